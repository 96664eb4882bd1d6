/* server/metrics.h: counters and histograms for GET /metrics.
 *
 * Every update is a relaxed atomic add, so any thread may record. The
 * rendering is the Prometheus text format, version 0.0.4. */
#ifndef ATTND_METRICS_H
#define ATTND_METRICS_H

#include <stdint.h>

#include "codec/buf.h"

/* Why a request was turned away: X(name, label of attnd_rejections_total).
 * Which API error counts under which reason is a column of errors.h. */
#define ATTND_REJECT_MAP(X)                                                    \
  X(OVERLOAD, "overload")                                                      \
  X(DEADLINE, "deadline")                                                      \
  X(TOO_LARGE, "too_large")                                                    \
  X(INVALID, "invalid")                                                        \
  X(DRAINING, "draining")                                                      \
  X(CLIENT_GONE, "client_gone")                                                \
  X(SLOW_READER, "slow_reader")                                                \
  X(SLOW_SENDER, "slow_sender")                                                \
  X(UNAUTHORIZED, "unauthorized")                                              \
  X(REQUEST_LINE, "request_line")

typedef enum {
#define ATTND__REJECT_ENUM(name, label) ATTND_REJECT_##name,
  ATTND_REJECT_MAP(ATTND__REJECT_ENUM)
#undef ATTND__REJECT_ENUM
      ATTND_REJECT_COUNT,
  ATTND_REJECT_NONE = -1 /* an error that is not a rejection (no memory) */
} attnd_reject_t;

/* The protocol a request came by, a label of every series that counts
 * requests: X(name, label, whether its requests compute attention, which
 * the histograms time). */
#define ATTND_PROTOCOL_MAP(X)                                                  \
  X(V1, "v1", 1)                                                               \
  X(V2, "v2", 1)                                                               \
  X(SESSION, "session", 1)                                                     \
  X(OTHER, "other", 0)

typedef enum {
#define ATTND__PROTO_ENUM(name, label, computes) ATTND_PROTO_##name,
  ATTND_PROTOCOL_MAP(ATTND__PROTO_ENUM)
#undef ATTND__PROTO_ENUM
      ATTND_PROTO_COUNT
} attnd_protocol_t;

typedef struct attnd_metrics attnd_metrics_t;

attnd_metrics_t *attnd_metrics_new(void);
void attnd_metrics_free(attnd_metrics_t *m);

/* One finished HTTP request, by protocol and status. */
void attnd_metrics_request(attnd_metrics_t *m, attnd_protocol_t proto,
                           int status);
void attnd_metrics_reject(attnd_metrics_t *m, attnd_reject_t why);
/* One request's run on its backend (the core's attn_backend_kind_t,
 * labelled by attn_backend_kind_name), whatever its reply: one that its
 * deadline or its client's leaving cancelled while it computed counts
 * too. Adds it to the backend's requests, and its compute time and the
 * core's stages (attn_timing_t: projection, attention, output) to the
 * backend's counters, which count the workers' time: a request computed in
 * a batch of `batch` (session steps in one forward call, each timed with
 * the batch's compute_ms and stages) adds its share, 1 / batch, so that
 * the batch's time is counted once. */
void attnd_metrics_ran(attnd_metrics_t *m, int backend, int batch,
                       double compute_ms, const double stage_ms[3]);
/* The wait of one request that entered the queue, by protocol (one that
 * computes) and key length, in attnd_queue_wait_seconds: once it has left
 * the queue, whatever its outcome (started, expired or its client gone). */
void attnd_metrics_waited(attnd_metrics_t *m, attnd_protocol_t proto,
                          int64_t context_len, double queue_ms);
/* The timings of one computed attention request answered with its result,
 * by protocol (one that computes) and key length, in the histograms of
 * compute and whole time: its whole compute_ms (a batched step's: the
 * batch's, the time it waited on). */
void attnd_metrics_observe(attnd_metrics_t *m, attnd_protocol_t proto,
                           int64_t context_len, double compute_ms,
                           double total_ms);

/* What a SIGHUP reloads (serve.c): X(name, label of
 * attnd_reload_failures_total and attnd_last_reload_success_timestamp_seconds).
 */
#define ATTND_RELOAD_MAP(X)                                                    \
  X(API_KEYS, "api_keys")                                                      \
  X(TLS, "tls")                                                                \
  X(LAYERS, "layers")

typedef enum {
#define ATTND__RELOAD_ENUM(name, label) ATTND_RELOAD_##name,
  ATTND_RELOAD_MAP(ATTND__RELOAD_ENUM)
#undef ATTND__RELOAD_ENUM
      ATTND_RELOAD_COUNT
} attnd_reload_t;

/* A load of `what` that succeeded (ok 1: the start's, or a SIGHUP's), its
 * time kept for attnd_last_reload_success_timestamp_seconds, or a
 * SIGHUP's that was refused (ok 0), the one in force kept, counted in
 * attnd_reload_failures_total, so that a renewal that failed is seen
 * before what it was to replace runs out. */
void attnd_metrics_reloaded(attnd_metrics_t *m, attnd_reload_t what, int ok);

/* The process collector's readings, as the Prometheus client libraries
 * name them (process_*); a reading that failed is -1 and not written. */
typedef struct attnd_process {
  double cpu_seconds;        /* user and system time */
  double start_time_seconds; /* since the epoch */
  double resident_bytes, virtual_bytes;
  double open_fds, max_fds; /* max_fds: the soft limit */
} attnd_process_t;

/* Reads this process's numbers from getrusage, getrlimit and /proc (a
 * file's read and a directory's listing: see docs/operations.md for what
 * a scrape costs). attnd runs on Linux only. */
void attnd_process_read(attnd_process_t *p);

/* Gauges sampled at render time. */
typedef struct attnd_gauges {
  int queue_depth, busy_workers, workers, inflight, draining;
  int busy_threads; /* given to running requests (threads_per_request auto) */
  /* the connections open on each HTTP thread (http_open[0 .. http_threads
   * - 1]; http/listen.h) */
  int http_threads;
  const int *http_open;
  /* the KV-cache sessions (session.h) */
  int64_t sessions, kv_bytes_used, kv_bytes_free, kv_pages_shared;
  int64_t kv_device_bytes_used, kv_device_bytes_held; /* cuda sessions' */
  uint64_t evicted_lru, expired, deleted;
  /* batches of session steps (scheduler.h) */
  uint64_t batches, batched_steps;
  /* the workspaces workers and HTTP threads hold (run.h) */
  int64_t scratch_bytes;
  /* malloc's heap (mallinfo2): in use by the process, and freed but kept
   * for reuse (main.c's mallopt keeps it) */
  uint64_t heap_in_use, heap_free;
  /* the requests' memory budget (max_memory_bytes less kv_cache_bytes and
   * pinned_memory_bytes) and what is held of it, the scratch included */
  int64_t memory_limit, memory_held;
  /* the GPU: whether the cuda backend is usable now, the cuda requests'
   * budget (max_device_memory_bytes) and what they hold of it, and CUDA's
   * pool and the device (attn_cuda_memory; 0 without a usable GPU) */
  int device_usable;
  int64_t device_limit, device_held;
  int64_t layers_device_bytes; /* the layers' weights on the GPU */
  /* the layer sets alive (attnd_layer_sets_alive) and their host bytes */
  uint64_t layer_sets, layer_sets_bytes;
  uint64_t device_pool_reserved, device_pool_used, device_free, device_total;
  /* page-locked host memory for tensors (sched/pinned.h) */
  int64_t pinned_bytes, pinned_used;
  uint64_t pinned_served, pinned_missed;
  /* TLS: 1 while serving HTTPS, when the TLS families are written; the
   * certificate new handshakes get expires at tls_not_after, in seconds
   * since the epoch (-1: unknown, and its gauge is not written) */
  int tls;
  int64_t tls_not_after;
  /* 1 for what is configured, and so reloaded by SIGHUP (api_keys_file,
   * TLS, layers): the reload families are written for those alone */
  int reloads[ATTND_RELOAD_COUNT];
  attnd_process_t process;
} attnd_gauges_t;

/* Appends the whole exposition to b. */
void attnd_metrics_render(const attnd_metrics_t *m, const attnd_gauges_t *g,
                          attnd_buf_t *b);

#endif
