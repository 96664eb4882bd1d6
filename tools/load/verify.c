/* tools/load/verify.c: see verify.h. */
#include "verify.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attn.h"
#include "codec/base64.h"
#include "codec/buf.h"
#include "codec/number.h"
#include "v2.h"

static int fail(char *why, size_t wn, const char *name, const char *what) {
  snprintf(why, wn, "reply %s: %s", name, what);
  return -1;
}

static const char *skip_ws(const char *p, const char *end) {
  while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
    p++;
  return p;
}

/* Reads a JSON array of numbers at *pp, nested `rank` deep with every
 * level as long as dim says, into out. Advances *pp past it. */
static int read_array(const char **pp, const char *end, int rank,
                      const int64_t *dim, float *out, const char *name,
                      char *why, size_t wn) {
  int64_t cnt[8] = {0}; /* children of the open array at each depth */
  int depth = 0;
  size_t k = 0;
  const char *p = skip_ws(*pp, end);
  if (p >= end || *p != '[')
    return fail(why, wn, name, "expected an array");
  do {
    p = skip_ws(p, end);
    if (p >= end)
      return fail(why, wn, name, "the text ends inside the array");
    if (*p == '[') {
      if (depth >= rank)
        return fail(why, wn, name, "nested deeper than its rank");
      /* one child too many is refused when it opens: its numbers would
       * be stored past out before the parent's ']' showed its length */
      if (depth > 0 && cnt[depth - 1]++ >= dim[depth - 1])
        return fail(why, wn, name, "an array of the wrong length");
      cnt[depth++] = 0;
      p++;
    } else if (*p == ']') {
      if (cnt[depth - 1] != dim[depth - 1])
        return fail(why, wn, name, "an array of the wrong length");
      depth--;
      p++;
    } else if (*p == ',') {
      p++;
    } else {
      float v;
      if (depth != rank || cnt[depth - 1] >= dim[depth - 1])
        return fail(why, wn, name, "a number out of place");
      if (attnd_number_parse(p, end, &v, &p) < 0)
        return fail(why, wn, name, "not a number");
      cnt[depth - 1]++;
      out[k++] = v;
    }
  } while (depth > 0);
  *pp = p;
  return 0;
}

double load_verify_tol(attnd_dtype_t t) {
  return LOAD_VERIFY_TOL + (t == ATTND_DTYPE_BF16  ? 0x1p-8
                            : t == ATTND_DTYPE_F16 ? 0x1p-11
                                                   : 0);
}

void load_dtype_widen(attnd_dtype_t t, const void *src, size_t n, float *out) {
  const unsigned char *p = src;
  if (t == ATTND_DTYPE_F32) {
    memcpy(out, src, n * sizeof(float));
    return;
  }
  for (size_t i = 0; i < n; i++) {
    uint32_t h = (uint32_t)p[2 * i] | (uint32_t)p[2 * i + 1] << 8;
    out[i] = t == ATTND_DTYPE_F16 ? attnd_f16_to_f32(h) : attnd_bf16_to_f32(h);
  }
}

int load_dtype_exact(attnd_dtype_t t, const float *x, size_t n,
                     const char *name, char *why, size_t wn) {
  for (size_t i = 0; t != ATTND_DTYPE_F32 && i < n; i++) {
    float r = t == ATTND_DTYPE_F16
                  ? attnd_f16_to_f32(attnd_f16_from_f32(x[i]))
                  : attnd_bf16_to_f32(attnd_bf16_from_f32(x[i]));
    if (r != x[i]) {
      snprintf(why, wn, "reply %s: %.9g at [%zu] is not a %s", name,
               (double)x[i], i, load_dtype_name(t));
      return -1;
    }
  }
  return 0;
}

int load_reply_tensor(const char *body, size_t len, const char *name,
                      attnd_form_t enc, int rank, const int64_t *dim,
                      float *out, char *why, size_t wn) {
  return load_reply_tensor_as(body, len, name, enc, ATTND_DTYPE_F32, rank, dim,
                              out, why, wn);
}

int load_reply_tensor_as(const char *body, size_t len, const char *name,
                         attnd_form_t enc, attnd_dtype_t dtype, int rank,
                         const int64_t *dim, float *out, char *why, size_t wn) {
  const char *end = body + len;
  char key[64];
  snprintf(key, sizeof key, "\"%s\":", name);
  const char *p = memmem(body, len, key, strlen(key));
  if (p == NULL)
    return fail(why, wn, name, "missing");
  p = skip_ws(p + strlen(key), end);
  size_t n = 1;
  for (int i = 0; i < rank; i++)
    n *= (size_t)dim[i];
  if (enc == ATTND_FORM_NESTED)
    return read_array(&p, end, rank, dim, out, name, why, wn) < 0
               ? -1
               : load_dtype_exact(dtype, out, n, name, why, wn);

  /* {"shape":[...],"data":[...]} or {..., "dtype":"...","base64":"..."} */
  const char *sh = memmem(p, (size_t)(end - p), "\"shape\":", 8);
  if (p >= end || *p != '{' || sh == NULL)
    return fail(why, wn, name, "expected an object with a shape");
  sh += 8;
  int64_t one = (int64_t)rank;
  float shape[8];
  if (read_array(&sh, end, 1, &one, shape, name, why, wn) < 0)
    return -1;
  for (int i = 0; i < rank; i++)
    if ((double)shape[i] != (double)dim[i]) /* no cast of inf to int */
      return fail(why, wn, name, "the wrong shape");
  if (enc == ATTND_FORM_FLAT) {
    const char *d = memmem(sh, (size_t)(end - sh), "\"data\":", 7);
    if (d == NULL)
      return fail(why, wn, name, "no data");
    int64_t flat = (int64_t)n;
    d += 7;
    return read_array(&d, end, 1, &flat, out, name, why, wn) < 0
               ? -1
               : load_dtype_exact(dtype, out, n, name, why, wn);
  }
  const char *b = memmem(sh, (size_t)(end - sh), "\"base64\":\"", 10);
  if (b == NULL)
    return fail(why, wn, name, "no base64");
  /* attnd names the dtype just before the bytes */
  char dt[40];
  int dl = snprintf(dt, sizeof dt, "\"dtype\":\"%s\",", load_dtype_name(dtype));
  if ((size_t)(b - sh) < (size_t)dl || memcmp(b - dl, dt, (size_t)dl) != 0) {
    snprintf(dt, sizeof dt, "not dtype %s", load_dtype_name(dtype));
    return fail(why, wn, name, dt);
  }
  b += 10;
  const char *q = memchr(b, '"', (size_t)(end - b));
  if (q == NULL)
    return fail(why, wn, name, "unterminated base64");
  size_t blen = (size_t)(q - b), got, bad;
  void *raw = malloc(blen / 4 * 3 + 3);
  if (raw == NULL)
    return fail(why, wn, name, "out of memory");
  int r = attnd_b64_decode(b, blen, raw, &got, &bad);
  size_t want = n * attnd_dtype_size(dtype);
  if (r == 0 && got == want)
    load_dtype_widen(dtype, raw, n, out);
  free(raw);
  if (r < 0)
    return fail(why, wn, name, "invalid base64");
  if (got != want)
    return fail(why, wn, name, "base64 of the wrong size");
  return 0;
}

/* ‖got − want‖₂ / ‖want‖₂, or ‖got‖₂ when want is zero. */
static double rel_err(const float *got, const float *want, size_t n) {
  double d = 0, w = 0;
  for (size_t i = 0; i < n; i++) {
    double e = (double)got[i] - (double)want[i];
    d += e * e;
    w += (double)want[i] * want[i];
  }
  return w > 0 ? sqrt(d / w) : sqrt(d);
}

/* Reads output `v1name` (or `v2name`) of the reply, in the protocol and
 * form of `s`. */
static int reply_tensor(const load_shape_t *s, const char *body, size_t len,
                        int64_t header_len, const char *v1name,
                        const char *v2name, int rank, const int64_t *dim,
                        float *out, char *why, size_t wn) {
  if (s->protocol == LOAD_V2)
    return load_v2_reply_tensor_as(body, len, header_len, v2name, s->dtype,
                                   rank, dim, out, why, wn);
  return load_reply_tensor_as(body, len, v1name, s->encoding, s->dtype, rank,
                              dim, out, why, wn);
}

int load_verify_reply(const load_shape_t *s, const load_request_t *r,
                      const char *body, size_t len, int64_t header_len,
                      int threads, double *err_out, char *why, size_t wn) {
  *err_out = INFINITY;
  if (load_shape_layer(s)) {
    snprintf(why, wn,
             "model '%s' is a layer, whose weights are on the server: only "
             "model '%s' can be computed here",
             s->model, LOAD_V2_GENERIC);
    return -1;
  }
  attn_exec_t ex = {.threads = threads > 0 ? threads : 1};
  attn_plan_t pl;
  attn_error_t ae;
  if (attn_plan_init(&pl, &r->params, &ex, &ae) < 0) {
    snprintf(why, wn, "local plan: %s: %s", ae.field, ae.message);
    return -1;
  }
  int64_t wn_elems = s->weights == LOAD_WEIGHTS_PER_HEAD ? pl.weights_elems
                     : s->weights == LOAD_WEIGHTS_MEAN   ? pl.mean_elems
                                                         : 0;
  size_t ws_bytes = (pl.workspace_bytes + 63) / 64 * 64;
  void *ws = aligned_alloc(64, ws_bytes ? ws_bytes : 64);
  float *want = malloc((size_t)(pl.out_elems + wn_elems) * sizeof(float));
  float *got = malloc((size_t)(pl.out_elems + wn_elems) * sizeof(float));
  int rc = -1;
  if (ws == NULL || want == NULL || got == NULL) {
    snprintf(why, wn, "out of memory for the local computation");
    goto out;
  }
  attn_outputs_t o = {.out = want};
  if (s->weights == LOAD_WEIGHTS_PER_HEAD)
    o.weights = want + pl.out_elems;
  if (s->weights == LOAD_WEIGHTS_MEAN)
    o.mean_weights = want + pl.out_elems;
  if (attn_forward(&pl, &o, ws, ws_bytes, &ae) < 0) {
    snprintf(why, wn, "local forward: %s", ae.message);
    goto out;
  }
  int64_t odim[3] = {pl.B, pl.Lq, pl.Eo};
  if (reply_tensor(s, body, len, header_len, "output", "output", 3, odim, got,
                   why, wn) < 0)
    goto out;
  double e = rel_err(got, want, (size_t)pl.out_elems);
  if (wn_elems) {
    int64_t wdim[4] = {pl.B, pl.H, pl.Lq, pl.Lk};
    int64_t mdim[3] = {pl.B, pl.Lq, pl.Lk};
    int per_head = s->weights == LOAD_WEIGHTS_PER_HEAD;
    if (reply_tensor(s, body, len, header_len, "weights",
                     per_head ? "weights" : "weights_mean", per_head ? 4 : 3,
                     per_head ? wdim : mdim, got + pl.out_elems, why, wn) < 0)
      goto out;
    double ew =
        rel_err(got + pl.out_elems, want + pl.out_elems, (size_t)wn_elems);
    e = ew > e ? ew : e;
  }
  *err_out = e;
  double tol = load_verify_tol(s->dtype);
  rc = e <= tol ? 0 : -1;
  if (rc < 0)
    snprintf(why, wn, "relative error %.3g over %g", e, tol);
out:
  free(ws);
  free(want);
  free(got);
  return rc;
}
