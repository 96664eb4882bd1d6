/* server/api/oip_reply.c: the Open Inference Protocol's replies: the server's
 * metadata, and the reply of
 * a computed inference request. See oip.h. */
#include <string.h>

#include "api/oip.h"
#include "codec/util.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "binary tensor data is little-endian, as this host");

void attnd_oip_server_metadata(attnd_buf_t *b) {
  attnd_buf_puts(b, "{\"name\":\"attnd\",\"version\":\"" ATTN_VERSION
                    "\",\"extensions\":[\"binary_tensor_data\","
                    "\"parameters\"]}\n");
}

/* One output of the reply: its tensor and shape (without the batch
 * dimension when the query had none, as /v1). */
typedef struct out {
  const float *x; /* int32 for weights_top_k_index */
  int rank;
  int64_t dim[4];
} out_t;

/* A reduction of the weights (attn_reduce_t): [B, H', rows, cols], with
 * no H' for the mean over heads and no cols for 0. */
static out_t reduction(const attnd_request_t *j, const void *x, int64_t rows,
                       int64_t cols) {
  const attn_plan_t *pl = &j->plan;
  out_t o = {x, 0, {0}};
  o.dim[o.rank++] = pl->B;
  if (!j->params.reduce.mean_heads)
    o.dim[o.rank++] = pl->H;
  o.dim[o.rank++] = rows;
  if (cols)
    o.dim[o.rank++] = cols;
  return o;
}

static out_t output_of(const attnd_request_t *j, unsigned bit) {
  const attn_plan_t *pl = &j->plan;
  const int64_t rows = pl->q1 - pl->q0, k = j->params.reduce.top_k;
  out_t o;
  switch (bit) {
  case ATTND_OIP_TOP_K_INDEX:
    o = reduction(j, j->out.top_k_index, rows, k);
    break;
  case ATTND_OIP_TOP_K_VALUE:
    o = reduction(j, j->out.top_k_value, rows, k);
    break;
  case ATTND_OIP_POOLED:
    o = reduction(j, j->out.pooled, pl->pool_nq, pl->pool_nk);
    break;
  case ATTND_OIP_ENTROPY:
    o = reduction(j, j->out.entropy, rows, 0);
    break;
  case ATTND_OIP_SINK:
    o = reduction(j, j->out.sink, rows, 0);
    break;
  case ATTND_OIP_DISTANCE:
    o = reduction(j, j->out.distance, rows, 0);
    break;
  case ATTND_OIP_WEIGHTS:
    o = (out_t){j->out.weights, 4, {pl->B, pl->H, pl->Lq, pl->Lk}};
    break;
  case ATTND_OIP_WEIGHTS_MEAN:
    o = (out_t){j->out.mean_weights, 3, {pl->B, pl->Lq, pl->Lk}};
    break;
  case ATTND_OIP_HEAD_OUTPUTS:
    o = (out_t){j->out.head_outputs, 4, {pl->B, pl->H, pl->Lq, pl->Dv}};
    break;
  default:
    o = (out_t){j->out.out, 3, {pl->B, pl->Lq, pl->Eo}};
  }
  if (!pl->batched) {
    o.rank--;
    memmove(o.dim, o.dim + 1, sizeof(int64_t) * (size_t)o.rank);
  }
  return o;
}

static size_t count(const out_t *o) {
  size_t n = 1;
  for (int i = 0; i < o->rank; i++)
    n *= (size_t)o->dim[i];
  return n;
}

/* Bytes per element of output `bit`: INT32 for the top-k indices, else
 * the request's dtype. */
static size_t size_of(const attnd_request_t *j, unsigned bit) {
  return bit == ATTND_OIP_TOP_K_INDEX ? 4 : attnd_dtype_size(j->dtype);
}

void attnd_oip_encode(attnd_request_t *j, const char *model, attnd_buf_t *b,
                      size_t *json_len, double *total_ms) {
  double t0 = attnd_now_ms();
  attnd_buf_reserve(b, (size_t)attnd_request_reply_bytes(j) + 1024);
  attnd_buf_puts(b, "{\"model_name\":");
  attnd_buf_json_string(b, model, strlen(model));
  attnd_buf_puts(b, ",\"model_version\":\"1\"");
  if (j->id) {
    attnd_buf_puts(b, ",\"id\":");
    attnd_buf_json_string(b, j->id, strlen(j->id));
  }
  attnd_buf_puts(b, ",\"outputs\":[");
  for (int i = 0; i < j->oip_n_outputs; i++) {
    unsigned bit = j->oip_order[i];
    out_t o = output_of(j, bit);
    char shape[128];
    attnd_shape_text(shape, sizeof shape, o.rank, o.dim, ",");
    attnd_buf_puts(b, i ? ",{\"name\":\"" : "{\"name\":\"");
    attnd_buf_puts(b, attnd_oip_output_name(bit));
    static const char *const types[] = {
        [ATTND_DTYPE_F32] = "\",\"datatype\":\"FP32\",\"shape\":",
        [ATTND_DTYPE_F16] = "\",\"datatype\":\"FP16\",\"shape\":",
        [ATTND_DTYPE_BF16] = "\",\"datatype\":\"BF16\",\"shape\":"};
    const int i32 = bit == ATTND_OIP_TOP_K_INDEX;
    attnd_buf_puts(b, i32 ? "\",\"datatype\":\"INT32\",\"shape\":"
                          : types[j->dtype]);
    attnd_buf_puts(b, shape);
    attnd_buf_puts(b, ",");
    if (j->oip_binary & bit) {
      char num[24];
      attnd_buf_puts(b, "\"parameters\":{\"binary_data_size\":");
      attnd_buf_append(
          b, num, attnd_fmt_i64(num, (int64_t)(count(&o) * size_of(j, bit))));
      attnd_buf_puts(b, "}}");
    } else {
      attnd_buf_puts(b, "\"data\":");
      if (i32) /* the flat integers: the shape's text is already out */
        attnd_buf_tensor_i32(b, ATTND_FORM_NESTED, (const int32_t *)o.x, 1,
                             (int64_t[]){(int64_t)count(&o)});
      else
        attnd_buf_floats(b, o.x, count(&o), 0, NULL);
      attnd_buf_puts(b, "}");
    }
  }
  attnd_buf_puts(b, j->oip_binary ? "]}" : "]}\n");
  *json_len = b->len;
  /* the binary data: little-endian, as this host stores them */
  for (int i = 0; i < j->oip_n_outputs; i++)
    if (j->oip_binary & j->oip_order[i]) {
      unsigned bit = j->oip_order[i];
      out_t o = output_of(j, bit);
      size_t bytes = count(&o) * size_of(j, bit);
      if (attnd_buf_reserve(b, bytes) < 0)
        break; /* b->oom is set: the caller replies 500 */
      attnd_dtype_pack(bit == ATTND_OIP_TOP_K_INDEX ? ATTND_DTYPE_F32
                                                    : j->dtype,
                       o.x, count(&o), b->data + b->len);
      b->len += bytes;
    }
  double t1 = attnd_now_ms();
  *total_ms = t1 - j->t.arrival;
  j->t.encode_ms = t1 - t0;
}
