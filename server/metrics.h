/* server/metrics.h: counters and histograms for GET /metrics.
 *
 * Every update is a relaxed atomic add, so any thread may record. The
 * rendering is the Prometheus text format, version 0.0.4. */
#ifndef ATTND_METRICS_H
#define ATTND_METRICS_H

#include <stdint.h>

#include "codec.h"

/* Why a request was turned away. */
typedef enum {
  ATTND_REJECT_OVERLOAD,  /* 429 */
  ATTND_REJECT_DEADLINE,  /* 504 */
  ATTND_REJECT_TOO_LARGE, /* 413, and 422 limit_exceeded */
  ATTND_REJECT_INVALID,   /* 400, 415, 422 */
  ATTND_REJECT_DRAINING,  /* 503 while draining */
  ATTND_REJECT_CLIENT_GONE,
  ATTND_REJECT_COUNT
} attnd_reject_t;

typedef struct attnd_metrics attnd_metrics_t;

attnd_metrics_t *attnd_metrics_new(void);
void attnd_metrics_free(attnd_metrics_t *m);

/* One finished HTTP request and its status. */
void attnd_metrics_request(attnd_metrics_t *m, int status);
void attnd_metrics_reject(attnd_metrics_t *m, attnd_reject_t why);
/* The timings of one computed attention request, by key length. */
void attnd_metrics_observe(attnd_metrics_t *m, int64_t context_len,
                           double queue_ms, double compute_ms, double total_ms);

/* Gauges sampled at render time. */
typedef struct attnd_gauges {
  int queue_depth, busy_workers, workers, inflight, draining;
} attnd_gauges_t;

/* Appends the whole exposition to b. */
void attnd_metrics_render(const attnd_metrics_t *m, const attnd_gauges_t *g,
                          attnd_buf_t *b);

#endif
