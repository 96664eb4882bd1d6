/* tools/load/v2.c: see v2.h. */
#include "v2.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/util.h"
#include "verify.h"

/* The binary tail is the tensors' memory as it is: little-endian hosts
 * only, as the codec's base64 tensors. */
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "attnd-load writes tensors in the host's byte order: little-endian only"
#endif

int load_v2_path(char *buf, size_t n, const char *model) {
  static const char hex[] = "0123456789ABCDEF";
  attnd_buf_t b;
  attnd_buf_init(&b);
  attnd_buf_puts(&b, "/v2/models/");
  for (const unsigned char *p = (const unsigned char *)model; *p; p++) {
    char c[3] = {(char)*p, 0, 0};
    int plain = (*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
                (*p >= '0' && *p <= '9') || strchr("-._~", *p);
    if (!plain) {
      c[0] = '%';
      c[1] = hex[*p >> 4];
      c[2] = hex[*p & 15];
    }
    attnd_buf_append(&b, c, plain ? 1 : 3);
  }
  attnd_buf_puts(&b, "/infer");
  int len = b.oom || b.len >= n ? -1 : (int)b.len;
  if (len >= 0)
    memcpy(buf, b.data, b.len + 1);
  attnd_buf_free(&b);
  return len;
}

/* ---- the request --------------------------------------------------------- */

/* One input: a view of a tensor of the request. */
typedef struct input {
  const char *name;
  int rank;
  const int64_t *dim;
  const float *f;   /* FP32 data, or NULL */
  const int64_t *i; /* else INT32 data, held as int64 */
} input_t;

static size_t count_of(const input_t *in) {
  size_t n = 1;
  for (int k = 0; k < in->rank; k++)
    n *= (size_t)in->dim[k];
  return n;
}

/* The inputs of `r` for `s`, in body order, into in[0..8); returns how
 * many. */
static int inputs_of(const load_shape_t *s, const load_request_t *r,
                     input_t *in) {
  static const char *const wname[4] = {"q_weight", "k_weight", "v_weight",
                                       "o_weight"};
  const attn_params_t *p = &r->params;
  const attn_tensor_t *w[4] = {&p->q_weight, &p->k_weight, &p->v_weight,
                               &p->o_weight};
  int n = 0;
  in[n++] = (input_t){"query", 3, p->query.dim, r->query, NULL};
  if (r->key) {
    in[n++] = (input_t){"key", 3, p->key.dim, r->key, NULL};
    in[n++] = (input_t){"value", 3, p->value.dim, r->value, NULL};
  }
  for (int k = 0; s->projections && !load_shape_layer(s) && k < 4; k++)
    in[n++] = (input_t){wname[k], 2, w[k]->dim, r->weight[k], NULL};
  if (r->key_lengths)
    in[n++] =
        (input_t){"key_lengths", 1, p->key_lengths.dim, NULL, r->key_lengths};
  return n;
}

/* The OIP datatype of a float tensor of dtype t. */
static const char *datatype_of(attnd_dtype_t t) {
  static const char *const names[] = {"FP32", "FP16", "BF16"};
  return names[t];
}

/* Appends input `in` as tritonclient writes it: its name, shape and
 * datatype (a float one's `t`), then binary_data_size or the data (the
 * floats' numbers are t's already: gen.c rounds them). */
static void put_input(attnd_buf_t *b, const input_t *in, int binary,
                      attnd_dtype_t t) {
  char shape[256];
  attnd_shape_text(shape, sizeof shape, in->rank, in->dim, ",");
  size_t n = count_of(in);
  attnd_buf_puts(b, "{\"name\":");
  attnd_buf_json_string(b, in->name, strlen(in->name));
  attnd_buf_printf(b, ",\"shape\":%s,\"datatype\":\"%s\"", shape,
                   in->f ? datatype_of(t) : "INT32");
  if (binary) {
    attnd_buf_printf(b, ",\"parameters\":{\"binary_data_size\":%zu}}",
                     n * (in->f ? attnd_dtype_size(t) : sizeof(int32_t)));
    return;
  }
  attnd_buf_puts(b, ",\"data\":");
  if (in->f) {
    attnd_buf_floats(b, in->f, n, 0, NULL);
  } else {
    for (size_t k = 0; k < n; k++)
      attnd_buf_printf(b, "%s%lld", k ? "," : "[", (long long)in->i[k]);
    attnd_buf_puts(b, "]");
  }
  attnd_buf_puts(b, "}");
}

/* Appends the raw bytes of `in`: FP32 as it is, FP16 and BF16 packed
 * (exactly: the values are rounded already), INT32 narrowed (key lengths
 * are at most Lk < 2^31). */
static void put_bytes(attnd_buf_t *b, const input_t *in, attnd_dtype_t t) {
  size_t n = count_of(in);
  if (in->f && t == ATTND_DTYPE_F32) {
    attnd_buf_append(b, (const char *)in->f, n * sizeof(float));
    return;
  }
  if (in->f) {
    if (attnd_buf_reserve(b, n * attnd_dtype_size(t)) < 0)
      return;
    attnd_dtype_pack(t, in->f, n, b->data + b->len);
    b->len += n * attnd_dtype_size(t);
    b->data[b->len] = '\0';
    return;
  }
  for (size_t k = 0; k < n; k++) {
    int32_t v = (int32_t)in->i[k];
    attnd_buf_append(b, (const char *)&v, sizeof v);
  }
}

void load_v2_body(const load_shape_t *s, const load_request_t *r,
                  attnd_buf_t *b, size_t *json_len) {
  input_t in[8];
  int n = inputs_of(s, r, in);
  size_t start = b->len;

  /* pass 1: the JSON */
  attnd_buf_puts(b, "{\"inputs\":[");
  for (int k = 0; k < n; k++) {
    if (k)
      attnd_buf_puts(b, ",");
    put_input(b, &in[k], s->binary, s->dtype);
  }
  attnd_buf_puts(b, "]");
  const char *wname = s->weights == LOAD_WEIGHTS_PER_HEAD ? "weights"
                      : s->weights == LOAD_WEIGHTS_MEAN   ? "weights_mean"
                                                          : NULL;
  int name_outputs = wname || !s->binary;
  if (name_outputs) {
    const char *bin = s->binary ? "true" : "false";
    attnd_buf_printf(b,
                     ",\"outputs\":[{\"name\":\"output\",\"parameters\":{"
                     "\"binary_data\":%s}}",
                     bin);
    if (wname)
      attnd_buf_printf(b,
                       ",{\"name\":\"%s\",\"parameters\":{\"binary_data\":%s}}",
                       wname, bin);
    attnd_buf_puts(b, "]");
  }
  attnd_buf_puts(b, ",\"parameters\":{");
  if (!name_outputs)
    attnd_buf_puts(b, "\"binary_data_output\":true,");
  if (!load_shape_layer(s))
    attnd_buf_printf(b, "\"num_heads\":%lld,\"num_kv_heads\":%lld,",
                     (long long)s->H, (long long)s->Hkv);
  attnd_buf_printf(b, "\"causal\":\"%s\"", load_causal_name(s->causal));
  if (s->timeout_ms > 0)
    attnd_buf_printf(b, ",\"timeout_ms\":%lld", (long long)s->timeout_ms);
  if (s->dtype != ATTND_DTYPE_F32)
    attnd_buf_printf(b, ",\"output_datatype\":\"%s\"", datatype_of(s->dtype));
  attnd_buf_puts(b, "}}");
  *json_len = s->binary ? b->len - start : 0;

  /* pass 2: the binary tail, in input order */
  for (int k = 0; s->binary && k < n; k++)
    put_bytes(b, &in[k], s->dtype);
}

/* ---- the reply ----------------------------------------------------------- */

static int fail(char *why, size_t wn, const char *name, const char *what) {
  return attnd_fail(why, wn, "reply %s: %s", name, what);
}

/* Reads JSON data `v` (flat with `n` numbers, or nested `rank` deep as dim
 * says) into out[*k..), advancing *k. */
static int read_data(const json_t *v, int depth, int rank, const int64_t *dim,
                     size_t n, float *out, size_t *k) {
  if (!json_is_array(v))
    return -1;
  size_t len = json_array_size(v);
  int flat = depth == 0 && len == n &&
             (len == 0 || json_is_number(json_array_get(v, 0)));
  if (!flat && (depth >= rank || (int64_t)len != dim[depth]))
    return -1;
  for (size_t i = 0; i < len; i++) {
    const json_t *e = json_array_get(v, i);
    if (flat || depth == rank - 1) {
      if (!json_is_number(e))
        return -1;
      out[(*k)++] = (float)json_number_value(e);
    } else if (read_data(e, depth + 1, rank, dim, n, out, k) < 0) {
      return -1;
    }
  }
  return 0;
}

int load_v2_reply_tensor(const char *body, size_t len, int64_t header_len,
                         const char *name, int rank, const int64_t *dim,
                         float *out, char *why, size_t wn) {
  return load_v2_reply_tensor_as(body, len, header_len, name, ATTND_DTYPE_F32,
                                 rank, dim, out, why, wn);
}

int load_v2_reply_tensor_as(const char *body, size_t len, int64_t header_len,
                            const char *name, attnd_dtype_t dtype, int rank,
                            const int64_t *dim, float *out, char *why,
                            size_t wn) {
  if (header_len > (int64_t)len)
    return attnd_fail(why, wn,
                      "reply: Inference-Header-Content-Length %lld is past "
                      "the body's %zu bytes",
                      (long long)header_len, len);
  size_t jlen = header_len >= 0 ? (size_t)header_len : len;
  const char *tail = body + jlen;
  size_t tail_len = len - jlen;
  json_error_t je;
  json_t *root = json_loadb(body, jlen, 0, &je);
  if (root == NULL)
    return attnd_fail(why, wn, "reply: not JSON: %s (byte %d)", je.text,
                      je.position);
  int rc = -1;
  const json_t *e = json_object_get(root, "error");
  const json_t *outs = json_object_get(root, "outputs");
  size_t n = 1;
  for (int i = 0; i < rank; i++)
    n *= (size_t)dim[i];
  if (e) {
    attnd_fail(why, wn, "reply: error '%.200s'",
               json_is_string(e) ? json_string_value(e) : "(not a string)");
    goto out;
  }
  if (!json_is_array(outs)) {
    fail(why, wn, name, "the reply has no outputs array");
    goto out;
  }

  /* pass 1: every output's binary span, as tritonclient adds them up */
  const json_t *found = NULL;
  size_t offset = 0, at = 0, size = 0;
  for (size_t i = 0; i < json_array_size(outs); i++) {
    const json_t *o = json_array_get(outs, i);
    const json_t *bs =
        json_object_get(json_object_get(o, "parameters"), "binary_data_size");
    if (bs && (!json_is_integer(bs) || json_integer_value(bs) < 0)) {
      fail(why, wn, name, "a binary_data_size that is not a size");
      goto out;
    }
    size_t sz = bs ? (size_t)json_integer_value(bs) : 0;
    const char *oname = json_string_value(json_object_get(o, "name"));
    if (found == NULL && oname && strcmp(oname, name) == 0) {
      found = o;
      at = offset;
      size = bs ? sz : (size_t)-1;
    }
    /* sizes of up to 2^63 each could wrap the sum round to the tail's
     * length, and put an output's bytes far past the body */
    if (__builtin_add_overflow(offset, sz, &offset)) {
      fail(why, wn, name,
           "the outputs' binary_data_size add up to more than any body");
      goto out;
    }
  }
  if (offset != tail_len) {
    char msg[160];
    snprintf(msg, sizeof msg,
             "the outputs' binary_data_size add up to %zu bytes, but %zu "
             "follow the JSON",
             offset, tail_len);
    fail(why, wn, name, msg);
    goto out;
  }
  if (found == NULL) {
    fail(why, wn, name, "missing");
    goto out;
  }

  /* pass 2: this output */
  const char *dt = json_string_value(json_object_get(found, "datatype"));
  const json_t *shape = json_object_get(found, "shape");
  if (dt == NULL || strcmp(dt, datatype_of(dtype)) != 0) {
    char msg[64];
    snprintf(msg, sizeof msg, "the datatype is not %s", datatype_of(dtype));
    fail(why, wn, name, msg);
    goto out;
  }
  int same = json_is_array(shape) && (int)json_array_size(shape) == rank;
  for (int i = 0; same && i < rank; i++)
    same = json_integer_value(json_array_get(shape, (size_t)i)) == dim[i];
  if (!same) {
    fail(why, wn, name, "the wrong shape");
    goto out;
  }
  if (size != (size_t)-1) {
    if (size != n * attnd_dtype_size(dtype)) {
      fail(why, wn, name, "binary data of the wrong size");
      goto out;
    }
    load_dtype_widen(dtype, tail + at, n, out);
  } else {
    size_t k = 0;
    const json_t *data = json_object_get(found, "data");
    if (data == NULL) {
      fail(why, wn, name, "neither data nor binary_data_size");
      goto out;
    }
    if (read_data(data, 0, rank, dim, n, out, &k) < 0 || k != n) {
      fail(why, wn, name, "data that is not its shape's numbers");
      goto out;
    }
    if (load_dtype_exact(dtype, out, n, name, why, wn) < 0)
      goto out;
  }
  rc = 0;
out:
  json_decref(root);
  return rc;
}
