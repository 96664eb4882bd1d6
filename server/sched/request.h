/* server/sched/request.h: one decoded attention request and its result.
 *
 * This is the one request type of attnd: whatever protocol a request came
 * by, it becomes an attnd_request_t, and the queue, the limits, the memory
 * budget, the deadlines and the metrics all see only this.
 *
 * Ownership passes along the path, one owner at a time:
 *   HTTP thread: attnd_request_decode() builds it from the body (decode.c);
 *   the scheduler from attnd_sched_submit() until its done callback, while
 *   a worker runs it (attnd_request_run, run.c);
 *   HTTP thread again: attnd_request_encode() writes the reply (encode.c),
 *   and attnd_request_free() when the connection completes. */
#ifndef ATTND_REQUEST_H
#define ATTND_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "attn/attn.h"
#include "codec/arena.h"
#include "codec/buf.h"
#include "config.h"
#include "errors.h"
#include "model/layers.h"

/* Bytes in each request for its small buffers (attnd_request_alloc). */
#define ATTND_REQUEST_REGION 8192

typedef enum {
  ATTND_WEIGHTS_NONE,
  ATTND_WEIGHTS_PER_HEAD,
  ATTND_WEIGHTS_MEAN
} attnd_weights_t;

/* The outputs of an Open Inference Protocol request (oip.c), as bits of
 * attnd_request_t's oip_outputs and oip_binary. */
typedef enum {
  ATTND_OIP_OUTPUT = 1,       /* "output": [B, Lq, Eo] */
  ATTND_OIP_WEIGHTS = 2,      /* "weights": [B, H, Lq, Lk] */
  ATTND_OIP_WEIGHTS_MEAN = 4, /* "weights_mean": [B, Lq, Lk] */
  ATTND_OIP_HEAD_OUTPUTS = 8, /* "head_outputs": [B, H, Lq, Dv] */
  /* the reductions of the weights (attn_reduce_t): */
  ATTND_OIP_TOP_K_INDEX = 16, /* "weights_top_k_index": [B, H', Lq', k] */
  ATTND_OIP_TOP_K_VALUE = 32, /* "weights_top_k_value" */
  ATTND_OIP_POOLED = 64,      /* "weights_pooled": [B, H', nq, nk] */
  ATTND_OIP_ENTROPY = 128,    /* "weights_entropy": [B, H', Lq'] */
  ATTND_OIP_SINK = 256,       /* "weights_sink" */
  ATTND_OIP_DISTANCE = 512,   /* "weights_distance" */
  ATTND_OIP_N = 10            /* outputs */
} attnd_oip_output_t;

/* The outputs' names, in the order of their bits, NULL-terminated. */
extern const char *const attnd_oip_output_names[ATTND_OIP_N + 1];
/* The name of one ATTND_OIP_* bit ("output", "weights", ...); NULL for
 * anything else. Any thread. */
const char *attnd_oip_output_name(unsigned bit);

/* When things happened, CLOCK_MONOTONIC milliseconds, and how long the
 * codecs took. Each field has one writer, named beside it. */
typedef struct attnd_timeline {
  double arrival;   /* HTTP thread: the request's first byte */
  double decode_ms; /* attnd_request_decode */
  double submit;    /* HTTP thread: handed to the scheduler */
  double start;     /* worker: attnd_request_run began (0 if it never ran) */
  double end;       /* worker: attnd_request_run returned */
  double left; /* when it left the queue without running (expired, its client
                  gone, or a session's step refused in its turn): the loop
                  thread (attnd_http_job_done), or the step's turn's
                  (sessions.c); 0 if it ran or never waited */
  double encode_ms; /* attnd_request_encode */
} attnd_timeline_t;

/* A request's backend and precision (attnd_request_t): zero is the cpu in
 * fp32, which every route but /v1/attention keeps. */
typedef enum {
  ATTND_BACKEND_CPU = 0,
  ATTND_BACKEND_CUDA,
  ATTND_BACKEND_CONFIG /* the config's `backend` (auto, cpu or cuda) */
} attnd_backend_choice_t;
typedef enum {
  ATTND_PRECISION_FP32 = 0,
  ATTND_PRECISION_BF16,
  ATTND_PRECISION_CONFIG /* the config's `precision`, on cuda; fp32 on cpu */
} attnd_precision_choice_t;

/* Their names at the API, for the parsers (NULL-terminated): the core's
 * (attn_backend_kind_name, attn_precision_name), in the order of the enums
 * above and the core's: "cpu", "cuda"; "fp32", "bf16". */
extern const char *const attnd_backend_names[];
extern const char *const attnd_precision_names[];

/* The code of a refusal of the cuda backend where it cannot run here
 * (attn_cuda_info's usable is 0), for /v1, OIP and sessions alike:
 * backend_unavailable (503) in a CUDA build, whose host may have a GPU
 * later; invalid_value (422) in a build without CUDA, as for any option it
 * lacks. Any thread. */
attnd_err_t attnd_cuda_refusal_code(void);

typedef struct attnd_request {
  /* What was asked (decode). */
  char *id;             /* owned, the request's "id" or NULL */
  attn_params_t params; /* its tensors point into `allocs` */
  attn_plan_t plan;
  attnd_form_t encoding;
  /* Where and how it computes: /v1's "backend" and "precision", or the
   * config's keys where it names none; every other route the cpu. */
  attnd_backend_choice_t backend;
  attnd_precision_choice_t precision;
  attnd_weights_t weights_mode;
  /* The dtype of the reply's float tensors (/v1's return.dtype, OIP's
   * output_datatype; float32 by default), and the path that asked for it:
   * the worker rounds the results to it (attnd_request_run). */
  attnd_dtype_t dtype;
  const char *dtype_field;
  int want_metrics;
  int64_t timeout_ms;
  /* OIP requests only (oip.c; all 0 for /v1): the outputs asked for
   * (ATTND_OIP_* bits; never 0), those to send as binary data (an output's
   * "binary_data", else the request's "binary_data_output"), and the
   * outputs in the order asked (oip_n_outputs of them). */
  unsigned oip_outputs, oip_binary;
  unsigned short oip_order[ATTND_OIP_N];
  int oip_n_outputs;
  /* A step of a KV-cache session (session.h), or session NULL: the
   * session it holds from attnd_session_enqueue to attnd_session_step_end,
   * the link, turn function and tag of its queue there, the length the
   * client expects (-1: any), and the cache the core appends to. */
  struct attnd_session *session;
  struct attnd_request *session_next;
  void (*session_turn)(void *tag);
  void *session_tag;
  /* while it waits behind its session's step ahead: its id among the
   * scheduler's held jobs, which watch its deadline and client (0: not
   * held, the queue being full; api/sessions.c) */
  uint64_t wait_id;
  int64_t expected_length;
  int64_t kv_past;
  float kv_absmax;
  float *const *kv_pages;
  attn_kv_t kv;
  int64_t step_length;        /* the session's length after the step, for its
                                 reply (session.c); 0 until it commits */
  attnd_layer_set_t *layers;  /* a reference, with a layer: its weights */
  const attnd_layer_t *layer; /* the "layer" asked for, or NULL */
  void **allocs;              /* owned buffers of decoded tensors */
  size_t n_allocs, cap_allocs, alloc_bytes;

  /* The result (worker). */
  attn_outputs_t out; /* owned */
  int cancel; /* raised atomically by the scheduler (deadline passed or the
                 client went); the plan points attn_forward at it */
  int result; /* 0, or an ATTN_E* code from attn_forward */
  attn_error_t error;     /* attn_forward's record of it (run.c) */
  const char *error_path; /* the JSON path the error names where the
                             server, not the core, failed the result (run.c's
                             rounding to `dtype`); NULL: the core's field */
  int worker, threads;
  int batch; /* steps computed together with it, itself included (run.c) */

  attnd_timeline_t t;

  /* Small buffers of the request (its allocs array, decoded tensors, id and
   * outputs that fit) come from `region` (attnd_request_alloc), the others
   * from the heap; a freed request goes back to a pool of them. So a small
   * request makes no allocation of its own. Last: attnd_request_new zeroes
   * what comes before it. */
  attnd_arena_t arena;
  _Alignas(ATTND_ARENA_ALIGN) unsigned char region[ATTND_REQUEST_REGION];
} attnd_request_t;

/* A new request, every field zero: from the pool of freed ones, or the
 * heap. NULL when out of memory. Any thread. */
attnd_request_t *attnd_request_new(void);

/* For tests: 0 has requests made from now on, and decoding, take every
 * buffer from the heap (no region, no arena for jansson's tree), so that
 * allocation failures reach each of them; 1 by default. */
extern int attnd__arenas;

/* `bytes` for the request: from its region (ATTND_ARENA_ALIGN-aligned)
 * when they fit; else, for a request planned on cuda, from the pool of
 * pinned memory when it has room (sched/pinned.h: its results, which the
 * GPU copies back into them, the same); else from the heap. NULL when out
 * of memory. Given back by attnd_request_release. The request must be the
 * caller's to write (request.h's ownership). */
void *attnd_request_alloc(attnd_request_t *req, size_t bytes);

/* Gives back p from attnd_request_alloc (NULL is fine): to the pool or
 * the heap, unless it is in the request's region (which goes with it). */
void attnd_request_release(attnd_request_t *req, void *p);

/* Parses and validates a request body into a new request (*out), with every
 * tensor decoded and the attention planned, within the configured limits.
 * Returns 0, or -1 with `err` set (invalid_json for bad JSON, a 422 code for
 * an invalid request, out_of_memory). Borrows body and cfg. HTTP thread. */
int attnd_request_decode(const char *body, size_t len,
                         const attnd_config_t *cfg, attnd_layer_set_t *layers,
                         attnd_request_t **out, attnd_error_t *err);

/* attnd_request_decode by one path, for tests and fuzzers: fast = 0 has
 * jansson parse the whole body; fast = 1 lifts tensor data and long
 * strings out with the bulk scanner first, and falls back to the first
 * path when the skeleton does not parse or an error about lifted values
 * may read otherwise (what attnd_request_decode does). Both must give the
 * same request, or the same error. Internal. */
int attnd__request_decode_path(const char *body, size_t len,
                               const attnd_config_t *cfg,
                               attnd_layer_set_t *layers, int fast,
                               attnd_request_t **out, attnd_error_t *err);

/* Decodes the body of a step of a session of `shape` (session.h): the new
 * tokens in query (and, without a layer, their key and value, [Lnew, width]
 * each), mask.window and mask.alibi, scale, softcap, return, timeout_ms,
 * id, expected_length, and backend (the session's own, else refused) and
 * precision; the session gives the projections, heads, its backend, rope
 * and a causal mask over its cache. Not planned: attnd_request_plan does
 * that in the step's turn. Returns 0, or -1 with `err`. HTTP thread. */
struct attnd_session_shape;
int attnd_step_decode(const char *body, size_t len, const attnd_config_t *cfg,
                      const struct attnd_session_shape *shape,
                      attnd_request_t **out, attnd_error_t *err);
/* attnd_step_decode by one path (as attnd__request_decode_path). */
int attnd__step_decode_path(const char *body, size_t len,
                            const attnd_config_t *cfg,
                            const struct attnd_session_shape *shape, int fast,
                            attnd_request_t **out, attnd_error_t *err);

/* Plans a decoded request and checks the configured limits on the plan
 * (what attnd_request_decode does last): for a session's step, once its
 * cache is set up. Returns 0, or -1 with `err`. Any thread. */
int attnd_request_plan(attnd_request_t *req, const attnd_config_t *cfg,
                       attnd_error_t *err);

/* For tests: how many times this thread's decodes (/v1, steps and OIP) have
 * had jansson parse a whole body (the slow path, or the fast path falling
 * back to it). */
extern _Thread_local uint64_t attnd__decode_slow_runs;

/* How long j waited for a worker (a session's step: for its turn too),
 * in ms: from its submission to its start, or to when it left the queue
 * without running (t.left); 0 where it was never submitted. The reply's,
 * the access log's and the 504's queue time. Once j is back from the
 * scheduler; any thread. */
double attnd_request_queue_ms(const attnd_request_t *j);
/* Whether j entered the queue and has left it: it started, or left
 * without running (t.left). 0 for one refused before the queue (or by
 * attnd_sched_submit). Any thread, as attnd_request_queue_ms. */
int attnd_request_waited(const attnd_request_t *j);

/* The memory the request holds at its peak: its decoded tensors, the
 * workspace, the outputs, and the reply text (bounded from above); in
 * parts, and their sum. */
typedef struct attnd_request_mem {
  int64_t tensors, workspace, outputs, reply;
} attnd_request_mem_t;
attnd_request_mem_t attnd_request_memory_parts(const attnd_request_t *req);
size_t attnd_request_memory(const attnd_request_t *req);

/* The bytes of the reply's tensors at most: every output asked for, in
 * the request's encoding, or 4 bytes a float for an OIP output sent as
 * binary data. */
double attnd_request_reply_bytes(const attnd_request_t *req);

/* Writes the 200 reply body of a computed request into `b`. Fills *total_ms
 * with the time from arrival to the end of encoding (it is also in the
 * body). HTTP thread. */
void attnd_request_encode(attnd_request_t *req, attnd_buf_t *b,
                          double *total_ms);

/* The JSON path of an input the core names in an attn_error_t
 * ("projections.q_weight", "mask.window.left", "query"). Any thread. */
const char *attnd_request_field_path(attn_field_t f);

/* Frees the request and everything it owns. NULL is fine. */
void attnd_request_free(attnd_request_t *req);

#endif
