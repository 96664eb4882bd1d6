/* server/api/encode.c: the 200 reply of a computed request. See request.h.
 * HTTP thread. */
#include "sched/request.h"

#include <stdio.h>
#include <string.h>

#include "codec/util.h"

/* Appends "name": and tensor x of the given shape in the job's encoding; a
 * rank-2 request drops the batch dimension (dim[0] == 1). */
static void put_tensor(attnd_buf_t *b, const attnd_request_t *j,
                       const char *name, const float *x, int rank,
                       const int64_t *dim) {
  if (!j->plan.batched) {
    rank--;
    dim++;
  }
  attnd_buf_puts(b, ",\"");
  attnd_buf_puts(b, name);
  attnd_buf_puts(b, "\":");
  attnd_buf_tensor_as(b, j->encoding, j->dtype, x, rank, dim);
}

/* The shape [B, H', rows, cols] of a reduction's tensor, less the batch
 * for a rank-2 request and H' for the mean over heads (cols 0: none);
 * returns its rank. */
static int reduce_shape(const attnd_request_t *j, int64_t rows, int64_t cols,
                        int64_t *dim) {
  const attn_plan_t *pl = &j->plan;
  int n = 0;
  if (pl->batched)
    dim[n++] = pl->B;
  if (!j->params.reduce.mean_heads)
    dim[n++] = pl->H;
  dim[n++] = rows;
  if (cols)
    dim[n++] = cols;
  return n;
}

/* "weights_top_k", "weights_pooled" and "weights_stats": the reductions
 * of the weights (attn_reduce_t), those asked for. */
static void put_reductions(attnd_buf_t *b, const attnd_request_t *j) {
  const attn_plan_t *pl = &j->plan;
  const attn_reduce_t *r = &j->params.reduce;
  const attn_outputs_t *o = &j->out;
  int64_t dim[4];
  int rank;
  if (r->top_k) {
    rank = reduce_shape(j, pl->q1 - pl->q0, r->top_k, dim);
    attnd_buf_puts(b, ",\"weights_top_k\":{\"index\":");
    attnd_buf_tensor_i32(b, j->encoding, o->top_k_index, rank, dim);
    attnd_buf_puts(b, ",\"value\":");
    attnd_buf_tensor_as(b, j->encoding, j->dtype, o->top_k_value, rank, dim);
    attnd_buf_puts(b, "}");
  }
  if (r->pool_q) {
    rank = reduce_shape(j, pl->pool_nq, pl->pool_nk, dim);
    attnd_buf_puts(b, ",\"weights_pooled\":");
    attnd_buf_tensor_as(b, j->encoding, j->dtype, o->pooled, rank, dim);
  }
  if (r->stats) {
    static const char *const names[] = {"entropy", "sink", "distance"};
    const float *x[] = {o->entropy, o->sink, o->distance};
    rank = reduce_shape(j, pl->q1 - pl->q0, 0, dim);
    attnd_buf_puts(b, ",\"weights_stats\":{");
    for (int k = 0, n = 0; k < 3; k++) {
      if (!(r->stats & (1u << k)))
        continue;
      attnd_buf_puts(b, n++ ? ",\"" : "\"");
      attnd_buf_puts(b, names[k]);
      attnd_buf_puts(b, "\":");
      attnd_buf_tensor_as(b, j->encoding, j->dtype, x[k], rank, dim);
    }
    attnd_buf_puts(b, "}");
  }
}

/* Appends key (its text, "," and ":" included) and v. */
static void put_int(attnd_buf_t *b, const char *key, int64_t v) {
  char num[24];
  attnd_buf_puts(b, key);
  attnd_buf_append(b, num, attnd_fmt_i64(num, v));
}

void attnd_request_encode(attnd_request_t *j, attnd_buf_t *b,
                          double *total_ms) {
  const attn_plan_t *pl = &j->plan;
  double t0 = attnd_now_ms();
  /* one allocation: the text's size is known, or bounded for numbers */
  attnd_buf_reserve(b, (size_t)attnd_request_reply_bytes(j) + 1024);
  attnd_buf_puts(b, "{\"id\":");
  if (j->id)
    attnd_buf_json_string(b, j->id, strlen(j->id));
  else
    attnd_buf_puts(b, "null");
  if (j->step_length) /* a session's step: the cache's length now */
    put_int(b, ",\"length\":", j->step_length);
  int64_t o_dim[3] = {pl->B, pl->Lq, pl->Eo};
  put_tensor(b, j, "output", j->out.out, 3, o_dim);
  if (j->params.want_weights) {
    int64_t dim[4] = {pl->B, pl->H, pl->Lq, pl->Lk};
    put_tensor(b, j, "weights", j->out.weights, 4, dim);
  } else if (j->params.want_mean_weights) {
    int64_t dim[3] = {pl->B, pl->Lq, pl->Lk};
    put_tensor(b, j, "weights", j->out.mean_weights, 3, dim);
  }
  if (j->params.want_head_outputs) {
    int64_t dim[4] = {pl->B, pl->H, pl->Lq, pl->Dv};
    put_tensor(b, j, "head_outputs", j->out.head_outputs, 4, dim);
  }
  if (pl->reduce)
    put_reductions(b, j);
  double t1 = attnd_now_ms();
  *total_ms = t1 - j->t.arrival;
  j->t.encode_ms = t1 - t0;
  if (j->want_metrics) {
    const attn_timing_t *t = &j->out.timing;
    static const char *const keys[] = {
        ",\"metrics\":{\"queue_ms\":", ",\"compute_ms\":", ",\"total_ms\":",
        ",\"stages_ms\":{\"decode\":", ",\"projection\":", ",\"attention\":",
        ",\"output_projection\":",     ",\"encode\":"};
    double ms[] = {j->t.start - j->t.submit,
                   j->t.end - j->t.start,
                   *total_ms,
                   j->t.decode_ms,
                   t->projection_ms,
                   t->attention_ms,
                   t->output_ms,
                   j->t.encode_ms};
    char num[32];
    for (int i = 0; i < 8; i++) {
      attnd_buf_puts(b, keys[i]);
      attnd_buf_append(b, num, attnd_fmt_ms(num, ms[i]));
    }
    put_int(b, "},\"threads\":", j->threads);
    put_int(b, ",\"worker\":", j->worker);
    put_int(b, ",\"batch\":", j->batch ? j->batch : 1);
    if (pl->flops < 9e18)
      put_int(b, ",\"flops\":", (int64_t)(pl->flops + 0.5));
    else
      attnd_buf_printf(b, ",\"flops\":%.0f", pl->flops);
    attnd_buf_puts(b, "}");
  }
  attnd_buf_puts(b, "}\n");
}
