/* tools/load/gen.h: attention requests, generated from a seed.
 *
 * A load_shape_t describes one step's requests in the API's terms (sizes,
 * masks, what to return, the tensors' encoding, the protocol);
 * load_gen_request turns it and a seed into the tensors (an attn_params_t
 * for the local check of --verify) and the body: POST /v1/attention's, or
 * with LOAD_V2 the Open Inference Protocol's (v2.h: the same tensors as
 * inputs). The same shape and seed always give the same bytes; tensors are
 * uniform in [-1, 1), projection weights in [-1/√E, 1/√E), so outputs stay
 * of order one. With a 16-bit `dtype` every float tensor is drawn so, then
 * rounded to it (codec/half.h), so that the params that --verify computes
 * on hold exactly what the server decodes.
 *
 * Tensors, with Dh = E / H:
 *   query [B, Lq, E];
 *   key, value [B, Lk, E] with projections, [B, Lk, Hkv·Dh] without; sent
 *   only when they cannot default to the query (Lq != Lk, or Hkv != H
 *   without projections) or when `cross` asks for them;
 *   projections: q_weight [E, E], k_weight and v_weight [Hkv·Dh, E],
 *   o_weight [E, E];
 *   mask.key_lengths: B integers drawn in [1, Lk].
 * Every request is rank 3 and names every option it has, defaults
 * included (num_kv_heads, mask.causal, return.weights, return.encoding),
 * with return.metrics false: the timings come from the Server-Timing
 * header. A 16-bit `dtype` adds return.dtype, and base64 tensors carry
 * its two bytes an element under its name; the nested and flat forms
 * have no dtype, and carry the rounded values as numbers. float32 bodies
 * name no dtype, and are the bytes they were before --dtype existed.
 * Pure functions of their arguments; any thread. */
#ifndef LOAD_GEN_H
#define LOAD_GEN_H

#include <stddef.h>
#include <stdint.h>

#include "attn/attn.h"
#include "codec/buf.h"
#include "codec/deflate.h"

/* The protocol of the bodies: POST /v1/attention, or the Open Inference
 * Protocol (KServe v2), POST /v2/models/{model}/infer. */
typedef enum { LOAD_V1, LOAD_V2 } load_protocol_t;

typedef enum {
  LOAD_WEIGHTS_NONE,
  LOAD_WEIGHTS_PER_HEAD,
  LOAD_WEIGHTS_MEAN
} load_weights_t;

/* One step's requests. */
typedef struct load_shape {
  int64_t B, Lq, Lk, E, H, Hkv; /* Hkv divides H, H divides E */
  attn_causal_t causal;
  int key_lengths;        /* 1: random mask.key_lengths */
  load_weights_t weights; /* return.weights */
  int projections;        /* 1: inline q, k, v and o weights */
  attnd_form_t encoding;  /* of every tensor sent, and return.encoding */
  int cross;              /* 1: send key and value even for self-attention */
  int64_t timeout_ms;     /* the request's timeout_ms; 0: none */
  attnd_dtype_t dtype;    /* of every float tensor sent and returned */
  load_protocol_t protocol;
  /* LOAD_V2 only (encoding is v1's): */
  const char *model; /* borrowed: "attention" (or NULL), else a layer's */
  int binary;        /* 1: tensors as binary data after the JSON */
  /* the body's Content-Encoding (the codec's attnd_deflate), which
   * replies may use too; identity: none */
  attnd_coding_t compress;
} load_shape_t;

/* Whether `s` asks a loaded layer (a v2 model other than "attention"):
 * the layer's weights are resident, so none are sent, the hidden states
 * (query, key, value) are E wide, and the FLOPs count projections. */
int load_shape_layer(const load_shape_t *s);

/* One generated request. Owns every array and the body; load_gen_free. */
typedef struct load_request {
  attn_params_t params; /* views of the arrays below */
  float *query, *key, *value;
  float *weight[4]; /* q, k, v, o projections, or NULL */
  int64_t *key_lengths;
  double flops;   /* attn_plan_t.flops: dense, as if nothing were masked */
  int64_t tokens; /* B·Lq */
  char *body;     /* the bytes sent, NUL-terminated; NULL unless asked */
  size_t body_len;
  /* v2 with binary tensors: the length of the JSON that starts the body
   * (before compression), the Inference-Header-Content-Length; else 0 */
  size_t json_len;
} load_request_t;

/* Checks the sizes of `s` (each >= 1, H divides E, Hkv divides H, no
 * tensor over 2^36 elements) and that a layer model is not sent inline
 * projections. Returns 0, or -1 with a message naming the option in
 * err[0..n). */
int load_gen_check(const load_shape_t *s, char *err, size_t n);

/* The seed of request `variant` of the step for context length `length`
 * in a run seeded with `seed`: a hash of the three, so distinct arguments
 * give distinct seeds but for chance collisions (2^-64 per pair). */
uint64_t load_gen_seed(uint64_t seed, int64_t length, int variant);

/* Generates the request for `s` and `seed` into `r`, with its body when
 * `with_body`. The params are planned with attn_plan_init, so a shape the
 * core rejects fails here with the core's message. Returns 0, or -1 with
 * the reason in err[0..n) (nothing to free then). */
int load_gen_request(const load_shape_t *s, uint64_t seed, int with_body,
                     load_request_t *r, char *err, size_t n);

/* Frees everything `r` owns (a body set to NULL beforehand is kept by
 * whoever took it) and zeroes it. */
void load_gen_free(load_request_t *r);

/* The names on the command line: "json" (nested arrays; the API calls it
 * "nested"), "flat", "base64"; "none", "per_head", "mean"; "none",
 * "bottom_right", "top_left"; "v1", "v2"; "none", "gzip", "deflate". */
const char *load_enc_name(attnd_form_t e);
const char *load_protocol_name(load_protocol_t p);
const char *load_compress_name(attnd_coding_t c);
/* "float32", "float16", "bfloat16": --dtype's values, and v1's names */
const char *load_dtype_name(attnd_dtype_t t);

/* The form of the tensors sent: load_enc_name's for v1, "binary" or
 * "json" for v2. The projections: "none", "inline", or "resident" for a
 * layer model. */
const char *load_tensors_name(const load_shape_t *s);
const char *load_projections_name(const load_shape_t *s);
const char *load_weights_name(load_weights_t w);
const char *load_causal_name(attn_causal_t c);

#endif
