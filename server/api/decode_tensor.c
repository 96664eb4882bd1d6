/* server/api/decode_tensor.c: a request's tensors, in any of their three JSON
 * forms (nested arrays; {"shape", "data"}; {"shape", "dtype", "base64"}) or
 * as items the bulk scanner lifted out, to buffers the request owns. Every
 * failure names the member as a JSON path and gives its dimensions.
 * HTTP thread. */
#include "api/decode.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/base64.h"
#include "codec/util.h"
#include "model/safetensors.h"
#include "sched/pinned.h"

void *attnd__dec_alloc(dec_t *d, size_t bytes) {
  attnd_request_t *r = d->req;
  void *p = attnd_arena_alloc(&r->arena, bytes); /* goes with the request */
  if (p) {
    r->alloc_bytes += bytes;
    return p;
  }
  p = attnd_tensor_alloc(bytes, NULL); /* adopted: freed with the request */
  return p && attnd__dec_adopt(d, p, bytes) == 0 ? p : NULL;
}

int attnd__dec_adopt(dec_t *d, void *p, size_t bytes) {
  attnd_request_t *r = d->req;
  if (r->n_allocs == r->cap_allocs) {
    size_t cap = r->cap_allocs ? 2 * r->cap_allocs : 16;
    void **a = attnd_request_alloc(r, cap * sizeof *a);
    if (a == NULL) {
      attnd_tensor_free(p);
      return -1;
    }
    if (r->n_allocs)
      memcpy(a, r->allocs, r->n_allocs * sizeof *a);
    attnd_request_release(r, r->allocs);
    r->allocs = a;
    r->cap_allocs = cap;
  }
  r->allocs[r->n_allocs++] = p;
  if (!attnd_pinned_owns(p)) /* pinned bytes were counted at start */
    r->alloc_bytes += bytes;
  return 0;
}

float *attnd__dec_take_floats(dec_t *d, attnd_bulk_t *b, const char *field) {
  float *x = b->data;
  size_t bytes = b->n * sizeof(float);
  b->data = NULL;
  if (b->lent) /* the set's arena is the request's region */
    d->req->alloc_bytes += bytes;
  else if (attnd__dec_adopt(d, x, bytes) < 0)
    return attnd__dec_oom(d, field), NULL;
  return x;
}

int attnd__dec_oom(dec_t *d, const char *field) {
  return attnd_error_set(d->err, ATTND_ERR_OUT_OF_MEMORY, field,
                         "out of memory decoding %s", field);
}

const char *attnd__json_type(const json_t *v) {
  switch (json_typeof(v)) {
  case JSON_OBJECT:
    return "an object";
  case JSON_ARRAY:
    return "an array";
  case JSON_STRING:
    return "a string";
  case JSON_INTEGER:
  case JSON_REAL:
    return "a number";
  case JSON_TRUE:
    return "true";
  case JSON_FALSE:
    return "false";
  case JSON_NULL:
    return "null";
  }
  return "unknown";
}

const char *attnd__dec_num(double x, char *buf) {
  if (fabs(x) >= ATTND_JSON_HUGE)
    snprintf(buf, 32, "%s9e+307", x < 0 ? "at most -" : "at least ");
  else
    snprintf(buf, 32, "%.9g", x);
  return buf;
}

int attnd__dec_softcap(dec_t *d, double x, const char *field) {
  char num[32];
  if ((float)x > 0)
    return 0;
  return E(d, ATTND_ERR_INVALID_VALUE, field, "%s is %s%s; it must be above 0",
           field, attnd__dec_num(x, num),
           x > 0 ? ", which is 0 in float32 (its least positive value is "
                   "1.4e-45)"
                 : "");
}

int attnd__dec_int(dec_t *d, const json_t *v, const char *field,
                   const char *path, int64_t lo, int64_t hi, int64_t *out) {
  int64_t n;
  if (json_is_integer(v)) {
    n = (int64_t)json_integer_value(v);
  } else if (json_is_real(v) &&
             json_real_value(v) == floor(json_real_value(v))) {
    double x = json_real_value(v); /* jansson's reals are finite */
    char num[32];
    if (x < -0x1p63 || x >= 0x1p63)
      return E(d, ATTND_ERR_INVALID_VALUE, field,
               "%s is %s; expected %lld to %lld", path, attnd__dec_num(x, num),
               (long long)lo, (long long)hi);
    n = (int64_t)x;
  } else {
    return E(d, ATTND_ERR_INVALID_TYPE, field, "%s is %s; expected an integer",
             path,
             json_is_real(v) ? "a fractional number" : attnd__json_type(v));
  }
  if (n < lo || n > hi)
    return E(d, ATTND_ERR_INVALID_VALUE, field,
             "%s is %lld; expected %lld to %lld", path, (long long)n,
             (long long)lo, (long long)hi);
  *out = n;
  return 0;
}

int attnd__dec_count(int rank, const int64_t *dim, int64_t *n) {
  *n = 1;
  for (int i = 0; i < rank; i++)
    if (__builtin_mul_overflow(*n, dim[i], n))
      return *n = INT64_MAX, 1;
  return 0;
}

/* Rejects a tensor of more than max_tensor_elements before it is stored. */
static int check_elements(dec_t *d, const char *field, int rank,
                          const int64_t *dim, int64_t *n) {
  int past = attnd__dec_count(rank, dim, n);
  if (*n > d->cfg->max_tensor_elements) {
    char s[128];
    attnd_shape_text(s, sizeof s, rank, dim, ", ");
    return E(d, ATTND_ERR_LIMIT_EXCEEDED, field,
             "%s %s has %s%lld elements, over max_tensor_elements %lld", field,
             s, past ? "more than " : "", (long long)*n,
             (long long)d->cfg->max_tensor_elements);
  }
  return 0;
}

/* Stores one leaf. `path` names it for messages ("query[0][3]"). */
static int leaf(dec_t *d, const json_t *v, int kind, void *dst, int64_t i,
                const char *field, const char *path) {
  if (kind == K_FLOAT) {
    if (!json_is_number(v))
      return E(d, ATTND_ERR_INVALID_TYPE, field, "%s is %s; expected a number",
               path, attnd__json_type(v));
    float f = (float)json_number_value(v);
    char num[32];
    if (!isfinite(f))
      return E(d, ATTND_ERR_NON_FINITE, field,
               "%s is %s, which is not a finite float32", path,
               attnd__dec_num(json_number_value(v), num));
    ((float *)dst)[i] = f;
    return 0;
  }
  uint8_t b;
  if (json_is_boolean(v))
    b = json_is_true(v);
  else if (json_is_number(v) &&
           (json_number_value(v) == 0 || json_number_value(v) == 1))
    b = json_number_value(v) == 1;
  else if (json_is_number(v)) {
    char num[32];
    return E(d, ATTND_ERR_INVALID_VALUE, field,
             "%s is %s; expected true, false, 0 or 1", path,
             attnd__dec_num(json_number_value(v), num));
  } else
    return E(d, ATTND_ERR_INVALID_TYPE, field,
             "%s is %s; expected true, false, 0 or 1", path,
             attnd__json_type(v));
  ((uint8_t *)dst)[i] = b;
  return 0;
}

/* Fills dst from nested arrays of the shape dim[level..rank), checking that
 * every sub-array has its expected length. */
static int fill(dec_t *d, const json_t *v, int level, int rank,
                const int64_t *dim, int kind, void *dst, int64_t *i,
                const char *field, char *path, size_t plen, size_t pcap) {
  size_t n = json_array_size(v);
  for (size_t k = 0; k < n; k++) {
    const json_t *x = json_array_get(v, k);
    size_t pl =
        plen + attnd_fmt_index(path + plen, pcap - plen, "", (int64_t)k);
    if (level == rank - 1) {
      if (json_is_array(x))
        return E(d, ATTND_ERR_RAGGED_TENSOR, field,
                 "%s is an array, but %s has %d dimensions", path, field, rank);
      if (leaf(d, x, kind, dst, (*i)++, field, path) < 0)
        return -1;
      continue;
    }
    if (!json_is_array(x))
      return E(d, ATTND_ERR_RAGGED_TENSOR, field,
               "%s is %s; expected an array of %lld (the tensor has %d "
               "dimensions)",
               path, attnd__json_type(x), (long long)dim[level + 1], rank);
    if ((int64_t)json_array_size(x) != dim[level + 1]) {
      char first[96];
      size_t fl = (size_t)snprintf(first, sizeof first, "%s", field);
      for (int l = 0; l <= level && fl < sizeof first; l++)
        fl += (size_t)snprintf(first + fl, sizeof first - fl, "[0]");
      return E(d, ATTND_ERR_RAGGED_TENSOR, field,
               "%s has length %zu, but %s has length %lld", path,
               json_array_size(x), first, (long long)dim[level + 1]);
    }
    if (fill(d, x, level + 1, rank, dim, kind, dst, i, field, path, pl, pcap) <
        0)
      return -1;
  }
  return 0;
}

static int decode_nested(dec_t *d, const json_t *v, const char *field, int kind,
                         attn_tensor_t *t) {
  int64_t dim[ATTN_MAX_RANK];
  int rank = 0;
  for (const json_t *x = v; json_is_array(x); x = json_array_get(x, 0)) {
    if (rank == ATTN_MAX_RANK)
      return E(d, ATTND_ERR_SHAPE_MISMATCH, field,
               "%s has more than %d dimensions", field, ATTN_MAX_RANK);
    if (json_array_size(x) == 0)
      return E(d, ATTND_ERR_SHAPE_MISMATCH, field,
               "%s has an empty array at dimension %d", field, rank);
    dim[rank++] = (int64_t)json_array_size(x);
  }
  int64_t n;
  if (check_elements(d, field, rank, dim, &n) < 0)
    return -1;
  void *dst = attnd__dec_alloc(d, (size_t)n * (kind == K_FLOAT ? 4 : 1));
  if (dst == NULL)
    return attnd__dec_oom(d, field);
  char path[160];
  size_t plen = attnd_fmt_str(path, sizeof path, field);
  int64_t i = 0;
  if (fill(d, v, 0, rank, dim, kind, dst, &i, field, path, plen, sizeof path) <
      0)
    return -1;
  t->data = dst;
  t->rank = rank;
  memcpy(t->dim, dim, sizeof(int64_t) * (size_t)rank);
  return 0;
}

/* Rejects members of `obj` that are not in the NULL-terminated `known`. */
int attnd__dec_members(dec_t *d, const json_t *obj, const char *where,
                       const char *const *known) {
  const char *key;
  json_t *val;
  json_object_foreach((json_t *)obj, key, val) {
    int ok = 0;
    for (const char *const *k = known; *k && !ok; k++)
      ok = strcmp(key, *k) == 0;
    if (!ok) {
      /* whole names, as many as fit a message, then "..." */
      char list[420] = "none", field[64];
      size_t n = 0;
      for (const char *const *k = known; *k; k++) {
        const char *sep = k == known ? "" : ", ";
        if (n + strlen(sep) + strlen(*k) + sizeof ", ..." > sizeof list) {
          snprintf(list + n, sizeof list - n, "%s...", sep);
          break;
        }
        n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", sep, *k);
      }
      snprintf(field, sizeof field, "%s%s%s", where, *where ? "." : "", key);
      return E(d, ATTND_ERR_UNKNOWN_FIELD, field,
               "%s is not a known member%s%s (known: %s)", field,
               *where ? " of " : "", where, list);
    }
  }
  return 0;
}

/* ---- the fast path's items ------------------------------------------------
 */

attnd_bulk_t *attnd__dec_bulk_array(const dec_t *d, const json_t *v) {
  if (d->bulk == NULL || json_array_size(v) != 3)
    return NULL;
  const json_t *tag = json_array_get(v, 0), *nonce = json_array_get(v, 1),
               *idx = json_array_get(v, 2);
  if (!json_is_string(tag) || json_string_length(tag) != 5 ||
      memcmp(json_string_value(tag), "\001bulk", 5) != 0 ||
      !json_is_integer(nonce) ||
      (uint64_t)json_integer_value(nonce) != d->bulk->nonce ||
      !json_is_integer(idx) || json_integer_value(idx) < 0 ||
      (size_t)json_integer_value(idx) >= d->bulk->n)
    return NULL;
  attnd_bulk_t *b = &d->bulk->items[json_integer_value(idx)];
  return b->text || b->data == NULL ? NULL : b;
}

/* The base64 text that placeholder v stands for, or NULL. */
static const attnd_bulk_t *bulk_string(const dec_t *d, const json_t *v) {
  const char *s = json_string_value(v);
  const attnd_bulk_t *b = d->bulk && s ? attnd_bulk_string(d->bulk, s) : NULL;
  return b && !b->in_tree ? b : NULL;
}

/* A tensor from an array item: the floats as they are (the job adopts
 * them), or 0/1 bytes for a mask. The slow path decodes the same text to
 * the same values; an error about the values sends the request down the
 * slow path (E_UNSURE), which reports it in its own words. */
static int decode_bulk(dec_t *d, attnd_bulk_t *b, const char *field, int kind,
                       int rank, const int64_t *dim, attn_tensor_t *t) {
  int64_t n;
  if (check_elements(d, field, rank, dim, &n) < 0)
    return -1;
  if ((size_t)n != b->n)
    return E_UNSURE(d, ATTND_ERR_SIZE_MISMATCH, field, "%s: size", field);
  if (kind == K_FLOAT) {
    if (b->is_bool)
      return E_UNSURE(d, ATTND_ERR_INVALID_TYPE, field, "%s: booleans", field);
    if (attnd__dec_first_non_finite(b->data, n) >= 0)
      return E_UNSURE(d, ATTND_ERR_NON_FINITE, field, "%s: not finite", field);
    if ((t->data = attnd__dec_take_floats(d, b, field)) == NULL)
      return -1;
  } else {
    uint8_t *m = attnd__dec_alloc(d, (size_t)n);
    if (m == NULL)
      return attnd__dec_oom(d, field);
    for (int64_t i = 0; i < n; i++) {
      if (b->data[i] != 0 && b->data[i] != 1)
        return E_UNSURE(d, ATTND_ERR_INVALID_VALUE, field, "%s: not 0 or 1",
                        field);
      m[i] = b->data[i] == 1;
    }
    t->data = m;
  }
  t->rank = rank;
  memcpy(t->dim, dim, sizeof(int64_t) * (size_t)rank);
  return 0;
}

const char *const attnd__dec_tensor_members[] = {"shape", "data", "base64",
                                                 "dtype", NULL};

static int decode_shaped(dec_t *d, const json_t *v, const char *field, int kind,
                         attn_tensor_t *t, attnd_form_t *form) {
  char sub[96];
  if (attnd__dec_members(d, v, field, attnd__dec_tensor_members) < 0)
    return -1;
  const json_t *shape = json_object_get(v, "shape");
  const json_t *data = json_object_get(v, "data");
  const json_t *b64 = json_object_get(v, "base64");
  const json_t *dtype = json_object_get(v, "dtype");
  attnd_fmt_member(sub, sizeof sub, field, "shape");
  if (!json_is_array(shape))
    return E(d, shape ? ATTND_ERR_INVALID_TYPE : ATTND_ERR_MISSING_FIELD, sub,
             "%s must be an array of dimensions%s", sub,
             shape ? "" : " (it is missing)");
  size_t rank = json_array_size(shape);
  if (rank < 1 || rank > ATTN_MAX_RANK)
    return E(d, ATTND_ERR_SHAPE_MISMATCH, sub,
             "%s has %zu dimensions; expected 1 "
             "to %d",
             sub, rank, ATTN_MAX_RANK);
  int64_t dim[ATTN_MAX_RANK];
  for (size_t k = 0; k < rank; k++) {
    char path[112];
    attnd_fmt_index(path, sizeof path, sub, (int64_t)k);
    if (attnd__dec_int(d, json_array_get(shape, k), sub, path, 1, INT64_MAX,
                       &dim[k]) < 0)
      return -1;
  }
  if ((data != NULL) == (b64 != NULL))
    return E(d, data ? ATTND_ERR_INVALID_VALUE : ATTND_ERR_MISSING_FIELD, field,
             "%s must have exactly one of data and base64", field);
  /* dtype names the bytes of base64; data are JSON numbers, read as
   * float32 (or a mask's 0 and 1) whatever a dtype beside them says, so
   * one there is refused rather than silently ignored */
  if (data && dtype) {
    attnd_fmt_member(sub, sizeof sub, field, "dtype");
    return E(d, ATTND_ERR_UNKNOWN_FIELD, sub,
             "%s is given with data; dtype belongs to the base64 form (data "
             "are JSON numbers, read as float32): leave it out",
             sub);
  }
  int64_t n;
  if (check_elements(d, field, (int)rank, dim, &n) < 0)
    return -1;
  size_t esize = kind == K_FLOAT ? 4 : 1;
  void *dst;
  attnd_bulk_t *bulk =
      json_is_array(data) ? attnd__dec_bulk_array(d, data) : NULL;
  if (bulk) {
    if (bulk->rank != 1)
      return E_UNSURE(d, ATTND_ERR_INVALID_TYPE, field, "%s.data: nested",
                      field);
    if (decode_bulk(d, bulk, field, kind, (int)rank, dim, t) < 0)
      return -1;
    *form = ATTND_FORM_FLAT;
    return 0;
  }
  if (data) {
    attnd_fmt_member(sub, sizeof sub, field, "data");
    if (!json_is_array(data))
      return E(d, ATTND_ERR_INVALID_TYPE, sub, "%s is %s; expected an array",
               sub, attnd__json_type(data));
    char s[128];
    attnd_shape_text(s, sizeof s, (int)rank, dim, ", ");
    if ((int64_t)json_array_size(data) != n)
      return E(d, ATTND_ERR_SIZE_MISMATCH, sub,
               "%s has %zu elements but shape %s needs %lld", sub,
               json_array_size(data), s, (long long)n);
    if ((dst = attnd__dec_alloc(d, (size_t)n * esize)) == NULL)
      return attnd__dec_oom(d, field);
    char path[160];
    size_t plen = attnd_fmt_str(path, sizeof path, sub);
    int64_t i = 0, flat[1] = {n};
    if (fill(d, data, 0, 1, flat, kind, dst, &i, field, path, plen,
             sizeof path) < 0)
      return -1;
    *form = ATTND_FORM_FLAT;
  } else {
    /* base64: float32 by default, float16 or bfloat16 for floats, one
     * byte per element (bool) for masks */
    enum { B_F32, B_F16, B_BF16, B_BOOL } as = kind == K_MASK ? B_BOOL : B_F32;
    static const char *const names[] = {"float32", "float16", "bfloat16",
                                        "bool", NULL};
    static const size_t sizes[] = {4, 2, 2, 1};
    attnd_fmt_member(sub, sizeof sub, field, "dtype");
    if (dtype && !json_is_string(dtype))
      return E(d, ATTND_ERR_INVALID_TYPE, sub, "%s is %s; expected a string",
               sub, attnd__json_type(dtype));
    int k = 0;
    while (dtype && names[k] && strcmp(json_string_value(dtype), names[k]))
      k++;
    int fits = kind == K_MASK ? k == B_F32 || k == B_BOOL : k != B_BOOL;
    if (dtype && (names[k] == NULL || !fits))
      return E(
          d, ATTND_ERR_INVALID_VALUE, sub,
          "%s is '%.32s'; %s holds %s: expected %s", sub,
          json_string_value(dtype), field, kind == K_MASK ? "a mask" : "floats",
          kind == K_MASK ? "float32 or bool" : "float32, float16 or bfloat16");
    if (dtype)
      as = k;
    attnd_fmt_member(sub, sizeof sub, field, "base64");
    if (!json_is_string(b64))
      return E(d, ATTND_ERR_INVALID_TYPE, sub, "%s is %s; expected a string",
               sub, attnd__json_type(b64));
    const attnd_bulk_t *lifted = bulk_string(d, b64);
    const char *text = lifted ? lifted->text : json_string_value(b64);
    size_t tlen = lifted ? lifted->text_len : json_string_length(b64), got, bad;
    size_t want = (size_t)n * sizes[as];
    /* want bytes take exactly 4·ceil(want/3) characters: the message
     * counts characters against characters, as they are what was sent */
    if (tlen / 4 * 3 < want || tlen / 4 * 3 > want + 2 || tlen % 4) {
      /* a character no base64 has (the line breaks `base64` writes every
       * 76 characters) makes the length wrong too: named first, as the
       * cause */
      size_t at = 0;
      while (at < tlen &&
             (isalnum((unsigned char)text[at]) || text[at] == '+' ||
              text[at] == '/' || text[at] == '='))
        at++;
      if (at < tlen)
        return E(d, ATTND_ERR_INVALID_BASE64, sub,
                 "%s is not valid base64 at character %zu%s", sub, at,
                 text[at] == '\n' || text[at] == '\r'
                     ? ", a line break: send it as one line (base64 -w0)"
                     : "");
      return E(d, ATTND_ERR_SIZE_MISMATCH, sub,
               "%s has %zu characters, but %lld %s elements need %zu bytes, "
               "%zu characters of base64",
               sub, tlen, (long long)n, names[as], want,
               attnd_b64_encoded_len(want));
    }
    void *raw = attnd__dec_alloc(d, tlen / 4 * 3);
    if (raw == NULL)
      return attnd__dec_oom(d, field);
    if (attnd_b64_decode(text, tlen, raw, &got, &bad) < 0)
      return E(d, ATTND_ERR_INVALID_BASE64, sub,
               "%s is not valid base64 at character %zu", sub, bad);
    if (got != want)
      return E(d, ATTND_ERR_SIZE_MISMATCH, sub,
               "%s decodes to %zu bytes, but %lld %s elements need %zu", sub,
               got, (long long)n, names[as], want);
    if (as == B_F16 || as == B_BF16) { /* widened to float32, exactly */
      float *f = attnd__dec_alloc(d, (size_t)n * sizeof(float));
      if (f == NULL)
        return attnd__dec_oom(d, field);
      attnd_st_tensor_t st = {.name = field,
                              .dtype =
                                  as == B_F16 ? ATTND_ST_F16 : ATTND_ST_BF16,
                              .rank = 1,
                              .shape = {n},
                              .elems = n,
                              .data = raw,
                              .bytes = want};
      int64_t at = 0;
      if (attnd_st_to_f32(&st, f, &at) < 0)
        return E(d, ATTND_ERR_NON_FINITE, field,
                 "%s element %lld is not finite; values must be finite", sub,
                 (long long)at);
      dst = f;
    } else if (kind == K_FLOAT) {
      const float *f = raw;
      int64_t i = attnd__dec_first_non_finite(f, n);
      if (i >= 0)
        return E(d, ATTND_ERR_NON_FINITE, field,
                 "%s element %lld is %g; values must be finite", sub,
                 (long long)i, (double)f[i]);
      dst = raw;
    } else if (as == B_BOOL) {
      const uint8_t *b = raw;
      for (int64_t i = 0; i < n; i++)
        if (b[i] > 1)
          return E(d, ATTND_ERR_INVALID_VALUE, field,
                   "%s byte %lld is %u; expected 0 or 1", sub, (long long)i,
                   b[i]);
      dst = raw;
    } else { /* a float32 mask: 0 or 1 */
      const float *f = raw;
      uint8_t *b = attnd__dec_alloc(d, (size_t)n);
      if (b == NULL)
        return attnd__dec_oom(d, field);
      for (int64_t i = 0; i < n; i++) {
        if (f[i] != 0 && f[i] != 1)
          return E(d, ATTND_ERR_INVALID_VALUE, field,
                   "%s element %lld is %g; expected 0 or 1", sub, (long long)i,
                   (double)f[i]);
        b[i] = f[i] == 1;
      }
      dst = b;
    }
    *form = ATTND_FORM_BASE64;
  }
  t->data = dst;
  t->rank = (int)rank;
  memcpy(t->dim, dim, sizeof(int64_t) * rank);
  return 0;
}

int attnd__dec_int_tensor(dec_t *d, const json_t *v, const char *field,
                          int max_rank, attn_tensor_t *t) {
  attnd_bulk_t *b = json_is_array(v) ? attnd__dec_bulk_array(d, v) : NULL;
  int64_t dim[ATTN_MAX_RANK], n = 1;
  int rank = 0;
  if (b) {
    if (b->rank > max_rank)
      return E_UNSURE(d, ATTND_ERR_SHAPE_MISMATCH, field, "%s: rank", field);
    rank = b->rank;
    memcpy(dim, b->dim, sizeof(int64_t) * (size_t)rank);
  } else {
    for (const json_t *x = v; json_is_array(x); x = json_array_get(x, 0)) {
      if (rank == max_rank)
        return E(d, ATTND_ERR_SHAPE_MISMATCH, field,
                 "%s has more than %d dimensions", field, max_rank);
      if (json_array_size(x) == 0)
        return E(d, ATTND_ERR_SHAPE_MISMATCH, field,
                 "%s has an empty array at dimension %d", field, rank);
      dim[rank++] = (int64_t)json_array_size(x);
    }
    if (rank == 0)
      return E(d, ATTND_ERR_INVALID_TYPE, field,
               "%s is %s; expected an array of integers", field,
               attnd__json_type(v));
  }
  if (check_elements(d, field, rank, dim, &n) < 0)
    return -1;
  int64_t *x = attnd__dec_alloc(d, (size_t)n * sizeof *x);
  if (x == NULL)
    return attnd__dec_oom(d, field);
  if (b && attnd_bulk_ints(b, x) < 0)
    return E_UNSURE(d, ATTND_ERR_INVALID_TYPE, field, "%s: not integers",
                    field);
  for (int64_t i = 0; !b && i < n; i++) {
    /* element i of a rank 1 or 2 array, checked for its length */
    char path[96];
    const json_t *e = v;
    if (rank == 2) {
      e = json_array_get(v, (size_t)(i / dim[1]));
      if (!json_is_array(e) || (int64_t)json_array_size(e) != dim[1])
        return E(d, ATTND_ERR_RAGGED_TENSOR, field,
                 "%s[%lld] is not an array of %lld, as %s[0] is", field,
                 (long long)(i / dim[1]), (long long)dim[1], field);
      size_t pl = attnd_fmt_index(path, sizeof path, field, i / dim[1]);
      attnd_fmt_index(path + pl, sizeof path - pl, "", i % dim[1]);
    } else {
      attnd_fmt_index(path, sizeof path, field, i);
    }
    if (attnd__dec_int(d, json_array_get(e, (size_t)(i % dim[rank - 1])), field,
                       path, INT64_MIN, INT64_MAX, &x[i]) < 0)
      return -1;
  }
  t->data = x;
  t->rank = rank;
  memcpy(t->dim, dim, sizeof(int64_t) * (size_t)rank);
  return 0;
}

/* A tensor in any of the three forms; `form` (may be NULL) says which. */
int attnd__dec_tensor(dec_t *d, const json_t *v, const char *field, int kind,
                      attn_tensor_t *t, attnd_form_t *form) {
  attnd_form_t f = ATTND_FORM_NESTED;
  attnd_bulk_t *b;
  int r;
  if (json_is_array(v) && (b = attnd__dec_bulk_array(d, v)))
    r = decode_bulk(d, b, field, kind, b->rank, b->dim, t);
  else if (json_is_array(v))
    r = decode_nested(d, v, field, kind, t);
  else if (json_is_object(v))
    r = decode_shaped(d, v, field, kind, t, &f);
  else
    r = E(d, ATTND_ERR_INVALID_TYPE, field,
          "%s is %s; expected nested arrays, or an object with shape and "
          "data or base64",
          field, attnd__json_type(v));
  if (form)
    *form = f;
  return r;
}
