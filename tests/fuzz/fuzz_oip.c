/* tests/fuzz/fuzz_oip.c: Open Inference Protocol requests: the content
 * codings, the binary framing, the decoder and the reply.
 *
 * The input is one flags byte, then (with FRAMED) two bytes of the JSON's
 * length, little-endian, as Inference-Header-Content-Length would say it,
 * then the body:
 *   flags & LAYER   the model is "L" (torch_mha, E = 8, H = 2, RoPE), else
 *                   the generic model "attention";
 *   flags & FRAMED  the body is JSON then binary tensor data;
 *   flags & CODED   the body is gzip (flags & DEFLATE: deflate) and is
 *                   inflated first, within a small limit, a byte span at a
 *                   time as it would arrive.
 * Properties: the body decodes the same by both paths (jansson alone, and
 * the bulk scanner's fast path, which is lent the body as the server lends
 * it): the same request (decode_diff.h) or the same error, byte for byte;
 * a decode that fails names a known error with a message; one that
 * succeeds is planned within the limits, and its reply (outputs of the
 * plan's sizes, zeros) is JSON with the outputs asked for, whose
 * binary_data_size add up to the bytes after it. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/oip.h"
#include "codec/deflate.h"
#include "config.h"
#include "decode_diff.h"
#include "fuzz.h"
#include "model/layers.h"

enum { LAYER = 1, FRAMED = 2, CODED = 4, DEFLATE = 8 };

static attnd_config_t cfg;
static attnd_layer_set_t *layers;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  fuzz_small_config(&cfg, NULL, NULL);
  layers = fuzz_layer(0);
  return 0;
}

/* The reply of a decoded request, with zero outputs of the plan's sizes. */
static void check_reply(attnd_request_t *j, const char *model) {
  const attn_plan_t *pl = &j->plan;
  j->out.out = calloc((size_t)pl->out_elems, sizeof(float));
  if (j->params.want_weights)
    j->out.weights = calloc((size_t)pl->weights_elems, sizeof(float));
  if (j->params.want_mean_weights)
    j->out.mean_weights = calloc((size_t)pl->mean_elems, sizeof(float));
  if (j->params.want_head_outputs)
    j->out.head_outputs = calloc((size_t)pl->head_elems, sizeof(float));
  /* the reductions of the weights (attn_reduce_t) */
  const unsigned st = j->params.reduce.stats;
  if (pl->top_k_elems) {
    j->out.top_k_index = calloc((size_t)pl->top_k_elems, sizeof(int32_t));
    j->out.top_k_value = calloc((size_t)pl->top_k_elems, sizeof(float));
  }
  if (pl->pooled_elems)
    j->out.pooled = calloc((size_t)pl->pooled_elems, sizeof(float));
  if (st & ATTN_STAT_ENTROPY)
    j->out.entropy = calloc((size_t)pl->stats_elems, sizeof(float));
  if (st & ATTN_STAT_SINK)
    j->out.sink = calloc((size_t)pl->stats_elems, sizeof(float));
  if (st & ATTN_STAT_DISTANCE)
    j->out.distance = calloc((size_t)pl->stats_elems, sizeof(float));
  attnd_buf_t b;
  attnd_buf_init(&b);
  size_t json_len;
  double total;
  attnd_oip_encode(j, model, &b, &json_len, &total);
  FUZZ_CHECK(!b.oom && json_len <= b.len, "the reply: %zu of %zu", json_len,
             b.len);
  json_error_t je;
  json_t *r = json_loadb(b.data, json_len, 0, &je);
  FUZZ_CHECK(r != NULL, "the reply is not JSON: %s: %.*s", je.text,
             (int)json_len, b.data);
  json_t *outs = json_object_get(r, "outputs");
  FUZZ_CHECK(json_array_size(outs) == (size_t)j->oip_n_outputs,
             "%zu outputs, %d asked", json_array_size(outs), j->oip_n_outputs);
  size_t i, bin = 0;
  json_t *o;
  json_array_foreach(outs, i, o) {
    json_t *size =
        json_object_get(json_object_get(o, "parameters"), "binary_data_size");
    bin += size ? (size_t)json_integer_value(size) : 0;
  }
  FUZZ_CHECK(bin == b.len - json_len, "binary sizes %zu, bytes after %zu", bin,
             b.len - json_len);
  json_decref(r);
  attnd_buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  unsigned flags = data[0];
  int64_t json_len = -1;
  data++, size--;
  if (flags & FRAMED) {
    if (size < 2)
      return 0;
    json_len = data[0] | data[1] << 8;
    data += 2, size -= 2;
  }
  attnd_buf_t body;
  attnd_buf_init(&body);
  if (flags & CODED) {
    attnd_inflate_t *z = attnd_inflate_new(
        flags & DEFLATE ? ATTND_CODING_DEFLATE : ATTND_CODING_GZIP);
    char msg[200];
    int rc = 0;
    for (size_t at = 0, step = 1 + (flags >> 4); rc == 0 && at < size;
         at += step)
      rc = attnd_inflate_feed(z, data + at, size - at < step ? size - at : step,
                              &body, 1 << 16, msg, sizeof msg);
    FUZZ_CHECK(body.len <= 1 << 16, "inflated %zu bytes", body.len);
    FUZZ_CHECK(rc == 0 || msg[0], "an inflate error (%d) without words", rc);
    if (rc == 0 && attnd_inflate_end(z, msg, sizeof msg) < 0)
      rc = -1;
    attnd_inflate_free(z);
    if (rc < 0) {
      attnd_buf_free(&body);
      return 0;
    }
  } else {
    attnd_buf_append(&body, (const char *)data, size);
  }
  const char *model = flags & LAYER ? "L" : ATTND_OIP_GENERIC;
  const char *text = body.data ? body.data : "";
  attnd_request_t *j = NULL, *slow = NULL;
  attnd_error_t e, es;
  memset(&e, 0, sizeof e);
  memset(&es, 0, sizeof es);
  int rs = attnd__oip_decode_path(model, text, body.len, json_len, NULL, 0, 0,
                                  &cfg, layers, &slow, &es);
  void *own = body.data; /* lent, as the server lends it */
  int rc = attnd__oip_decode_path(model, text, body.len, json_len, &own,
                                  body.cap, 1, &cfg, layers, &j, &e);
  int oom = (rc < 0 && e.code == ATTND_ERR_OUT_OF_MEMORY) ||
            (rs < 0 && es.code == ATTND_ERR_OUT_OF_MEMORY);
  FUZZ_CHECK(oom || rc == rs, "fast %d (%s), slow %d (%s)", rc, e.message, rs,
             es.message);
  if (!oom && rc == 0) {
    const char *d = decode_request_diff(j, slow);
    FUZZ_CHECK(d == NULL, "the paths differ in %s", d);
  } else if (!oom) {
    FUZZ_CHECK(e.code == es.code && strcmp(e.field, es.field) == 0 &&
                   strcmp(e.message, es.message) == 0,
               "fast: %s %s %s; slow: %s %s %s", attnd_error_name(e.code),
               e.field, e.message, attnd_error_name(es.code), es.field,
               es.message);
  }
  attnd_request_free(slow);
  if (own == NULL)
    attnd_buf_init(&body); /* the request took it */
  if (rc < 0) {
    FUZZ_CHECK(j == NULL && e.code < ATTND_ERR_COUNT && e.message[0],
               "an error without words: code %d", (int)e.code);
  } else {
    FUZZ_CHECK(j && j->plan.Lq >= 1 && j->plan.Lq <= cfg.max_seq_len &&
                   j->oip_n_outputs >= 1,
               "a decoded request out of its limits");
    check_reply(j, model);
    attnd_request_free(j);
  }
  attnd_buf_free(&body);
  return 0;
}
