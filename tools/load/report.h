/* tools/load/report.h: a sweep's results as a line per step, a table, CSV,
 * JSON and an SVG plot.
 *
 * A load_result_t is one step reduced to numbers (load_result_fill), so
 * that the reports need neither the histograms nor the requests; a decode
 * step (decode.h) by load_result_fill_decode. Every time is in
 * milliseconds; one that nothing measured (a step without a success, or
 * without Server-Timing; a decode step's total) is NAN, "no value", which
 * the writers never print as a number: an empty CSV cell, JSON null, "-"
 * in the line and the table, no point in the picture. The writers borrow their
 * arguments and write only the file they are given; any thread, one at a time
 * per file. */
#ifndef LOAD_REPORT_H
#define LOAD_REPORT_H

#include <stdint.h>
#include <stdio.h>

#include "client.h"
#include "decode.h"
#include "gen.h"

/* The client latency percentiles reported, and those of the server's
 * Server-Timing durations. */
#define LOAD_NLAT 5 /* p50 p90 p99 p99.9 max */
#define LOAD_NSRV 4 /* p50 p90 p99 max */

/* One step. */
typedef struct load_result {
  /* what ran */
  int step;           /* 1, 2, ... */
  int64_t length;     /* the swept context length; 0 without a body */
  int attention;      /* 1: attention bodies of `shape` (v1 or v2) */
  load_shape_t shape; /* with attention */
  load_mode_t mode;
  int concurrency; /* closed: in flight; open: connections */
  double rate;     /* open: arrivals per second */
  double window_s; /* the measured window, or 0 when counting requests */

  /* what came back */
  int64_t sent, ok, s429, s503, s504, other, transport;
  int64_t timeouts; /* of transport: the client's --timeout */
  /* error replies by load_status_index of their status, every one seen;
   * 0 for the 2xx */
  int64_t status[LOAD_STATUS_MAX];
  double error_rate; /* failed / sent; 0 when nothing was sent */
  double elapsed_s, rps, tokens_per_s, gflops;
  double cpu_pct; /* the client's CPU time over the step, % of one core */
  double lat_ms[LOAD_NLAT], lat_mean_ms;
  int64_t timed; /* 2xx replies with Server-Timing */
  double queue_ms[LOAD_NSRV], compute_ms[LOAD_NSRV], total_ms[LOAD_NSRV];

  /* --verify: replies checked and right, checked and wrong, and asked for
   * but never come (no reply kept: the requests failed, or were too few) */
  int verified, verify_failed, verify_missing;
  double verify_max_err;

  char first_error[256]; /* the first transport error, or "" */
  load_stop_t stop;      /* why the sweep ended with this step, or NONE */

  /* --mode decode: `length` is the prefill, `shape` has B = 1, Lq = 1,
   * Lk = the prefill and the sizes; lat_ms are the one-token steps',
   * tokens_per_s theirs (over the span from the first sent to the last
   * answered), rps every request's, queue_ms and compute_ms the steps' */
  int decode;
  load_decode_shape_t dshape;
  int sessions, put;
  int64_t steps;
  double ttft_ms[LOAD_NSRV], ttft_mean_ms, create_p50_ms;
  double prefill_tokens_per_s; /* over the whole step */
  int64_t sessions_done, abandoned, bad_replies, recreated[LOAD_NRECREATE];
  struct {
    char code[40];
    int64_t count;
  } codes[LOAD_DECODE_MAX_CODES]; /* error replies by error.code */
  int n_codes;
} load_result_t;

/* Fills the "what came back" part of `r` from `st`. */
void load_result_fill(load_result_t *r, const load_stats_t *st);

/* The same for a decode step. */
void load_result_fill_decode(load_result_t *r, const load_decode_stats_t *st);

/* Percentile names, for headers: "p50", ..., and "max". */
extern const char *const load_lat_names[LOAD_NLAT];
extern const char *const load_srv_names[LOAD_NSRV];

/* One line for the terminal: step, shape, throughput, latency, errors. */
void load_report_line(FILE *f, const load_result_t *r);

/* A fixed-width table of the steps, one row each. */
void load_report_table(FILE *f, const load_result_t *r, int n);

/* CSV: a header and one row per step. Returns 0, or -1 with err set. */
int load_report_csv(const char *path, const load_result_t *r, int n, char *err,
                    size_t en);

/* JSON: {"target": url, "steps": [...]}, every number of every step.
 * Returns 0, or -1 with err set. */
int load_report_json(const char *path, const char *url, const load_result_t *r,
                     int n, char *err, size_t en);

/* SVG: three panels against the context length (log scale), one line per
 * concurrency (or rate): client latency p50 and p99; throughput in tokens
 * per second; the server's queue and compute p50. With decode steps the
 * first two are the one-token steps' latency and tokens per second, and a
 * fourth panel shows the time to first token, p50 and p99, against the
 * prefill length. Steps without a length are left out. Returns 0, or -1
 * with err set. */
int load_report_svg(const char *path, const char *title, const load_result_t *r,
                    int n, char *err, size_t en);

#endif
