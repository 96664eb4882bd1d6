/* tools/load/client.h: the load engine, libcurl's multi interface on one
 * thread.
 *
 * One run is one step of a sweep: requests go to one URL over keep-alive
 * connections, either
 *   - closed loop: `concurrency` requests always in flight, each sent as
 *     soon as the one before it on its slot is answered; or
 *   - open loop: requests arrive at `rate` per second (Poisson or evenly
 *     spaced), whatever the server does, and go out on at most
 *     `concurrency` connections; an arrival that finds them all busy waits
 *     in a backlog.
 * Latency runs from each request's intended send time (its arrival in open
 * loop, its send in closed loop) to the end of its reply, so a server that
 * stalls shows as latency and not as fewer requests sent. The loop sleeps
 * in curl_multi_poll, whose timeout is whole milliseconds: an arrival may
 * go out up to 1 ms late, and that delay is counted in its latency.
 *
 * A run has a warm-up (`warmup_s`, not measured) and then a measured window
 * of `duration_s`, or of `requests` requests. Requests whose intended send
 * time falls in the window are measured; after it, nothing new is sent and
 * the run waits for what is in flight or waiting, each request bounded by
 * `timeout_s` from its intended send time. So every measured request ends
 * as exactly one of: success (2xx), an HTTP error status, or a transport
 * error (no reply, or the timeout). */
#ifndef LOAD_CLIENT_H
#define LOAD_CLIENT_H

#include <curl/curl.h>
#include <stddef.h>
#include <stdint.h>

#include "hist.h"

typedef enum { LOAD_CLOSED, LOAD_OPEN } load_mode_t;

/* One request body of the pool a run cycles through. Borrowed. */
typedef struct load_body {
  const char *data;
  size_t len;
  double flops;      /* dense FLOPs of the request */
  int64_t tokens;    /* B·Lq */
  size_t header_len; /* sent as Inference-Header-Content-Length; 0: not */
} load_body_t;

/* One reply kept for --verify. Owns body. */
typedef struct load_kept {
  char *body;
  size_t len;
  size_t variant;     /* index of its request in the run's pool */
  int64_t header_len; /* its Inference-Header-Content-Length, or -1 */
} load_kept_t;

struct load_stats;

/* How every request reaches attnd, in both engines (this one and
 * decode.h's): its API key and whom to trust for TLS. Borrowed. */
typedef struct load_access {
  const char *api_key; /* sent as "Authorization: Bearer KEY"; NULL: none */
  const char *cacert;  /* the CA (or certificate) trusted; NULL: the system's */
  int insecure;        /* no certificate verification (for testing) */
} load_access_t;

/* Sets on easy handle h what every request of both engines carries: no
 * signals, no proxy, TCP_NODELAY, the connect timeout, and a's TLS trust
 * (a may be NULL). Any thread. */
void load_easy_setup(CURL *h, const load_access_t *a);

/* Appends a's "Authorization: Bearer KEY" line to the header list l, where
 * a has a key. Returns the list, or NULL when out of memory (l freed). */
struct curl_slist *load_access_header(struct curl_slist *l,
                                      const load_access_t *a);

/* Whether rc is a TLS failure (the handshake, or the peer's certificate
 * not trusted): one that the next request meets again, so an engine stops
 * sending rather than fail the same way at full speed. */
int load_tls_failed(CURLcode rc);

/* Why a sweep ends before its last step: a failure that no later request,
 * and no later step, can cure (docs/load-testing.md, "When a sweep
 * stops"). Transient failures (429, 503, timeouts, resets) never stop
 * one: they are what a load test measures. */
typedef enum load_stop {
  LOAD_STOP_NONE,
  LOAD_STOP_TLS,          /* a TLS handshake failed */
  LOAD_STOP_UNREACHABLE,  /* nothing answered at the URL: a refused
                             connection or an unknown host, in the sweep's
                             first step before any reply */
  LOAD_STOP_UNAUTHORIZED, /* every reply of a step a 401 */
  LOAD_STOP_NOT_FOUND,    /* every reply of a step a 404 */
  LOAD_NSTOP
} load_stop_t;

/* Their names in the reports: "", "tls", "unreachable", "unauthorized",
 * "not_found". */
extern const char *const load_stop_names[LOAD_NSTOP];

/* The stop that a request's failure rc calls for at once, where the run
 * ends rather than send more: LOAD_STOP_TLS for a TLS failure; with
 * `unanswered` (the sweep's first step, nothing answered yet),
 * LOAD_STOP_UNREACHABLE for a refused connection or an unknown host; else
 * LOAD_STOP_NONE. */
load_stop_t load_stop_at_once(CURLcode rc, int unanswered);

/* The stop that a finished step's replies call for: `replies` of them (at
 * least one), counted by load_status_index in status[], every one a 401
 * (the key) or every one a 404 (the path or model); else LOAD_STOP_NONE. */
load_stop_t load_stop_of_replies(int64_t replies, const int64_t *status);

/* What to run. Borrowed by load_client_run. */
typedef struct load_run {
  const char *url;              /* the whole URL, path included */
  const load_body_t *bodies;    /* POST these, in turn */
  size_t n_bodies;              /* 0: GET, no body */
  const char *content_type;     /* of the bodies; NULL: no Content-Type */
  const char *content_encoding; /* of the bodies ("gzip"); NULL: none */
  /* Accept-Encoding sent, and replies so encoded decoded before they are
   * kept; NULL: none */
  const char *accept_encoding;
  load_mode_t mode;
  int concurrency; /* closed: in flight; open: connections */
  double rate;     /* open: arrivals per second */
  int poisson;     /* open: exponential gaps, else even ones */
  double warmup_s;
  double duration_s;           /* the measured window; 0: count `requests` */
  int64_t requests;            /* measured requests when duration_s is 0 */
  double timeout_s;            /* from the intended send time */
  uint64_t seed;               /* of the open-loop arrival times */
  int keep;                    /* successful replies to keep, for --verify */
  const load_access_t *access; /* the key and TLS trust; NULL: none */
  int unanswered;              /* the sweep's first step: load_stop_at_once's */
  /* Called about twice a second while the run goes (may be NULL), with the
   * stats so far and the seconds since the run began. */
  void (*progress)(const struct load_stats *st, double t, void *arg);
  void *progress_arg;
} load_run_t;

/* Replies are counted by status in arrays of LOAD_STATUS_MAX: every code a
 * status line's three digits can carry, 100 to 999 (libcurl hands back 600
 * to 999 as it reads them, though RFC 9110 15 defines only 100 to 599),
 * each as itself; at LOAD_STATUS_INVALID, any other code libcurl reports
 * with a reply. */
#define LOAD_STATUS_MAX 1000
#define LOAD_STATUS_INVALID 0

/* What a run measured. Owns the histograms and the kept replies:
 * load_stats_init before, load_stats_free after. */
typedef struct load_stats {
  int64_t sent;      /* measured requests issued */
  int64_t ok;        /* 2xx replies */
  int64_t transport; /* no reply: connection errors and timeouts */
  int64_t timeouts;  /* of which the client's timeout */
  int64_t status[LOAD_STATUS_MAX]; /* replies by load_status_index of their
                                      HTTP status, 2xx included */
  int64_t timed;                   /* 2xx replies that carried Server-Timing */
  load_hist_t *latency;            /* client, µs, of 2xx replies */
  load_hist_t *queue, *compute, *total; /* Server-Timing, µs */
  /* Throughput: every 2xx reply that ended in the span from the window's
   * start to the last reply (warm-up requests that end in it included),
   * so that it reads the server's rate even when work carries over from
   * the warm-up. The span is at least the window. */
  double elapsed_s; /* the span */
  int64_t span_ok;
  double span_flops;  /* dense FLOPs */
  double span_tokens; /* B·Lq */
  double cpu_s;       /* this process's CPU time over the span */
  load_kept_t *kept;  /* the first `keep` 2xx replies */
  int n_kept;
  char first_error[256]; /* the first transport error, or "" */
  load_stop_t stop;      /* what stopped the run at once, or NONE */
} load_stats_t;

/* Writes the header lines that body b needs in `run` into buf[0..n),
 * NUL-terminated, each "Name: value\n": Content-Type, Content-Encoding,
 * Inference-Header-Content-Length, those that apply. Returns the length
 * it needed (as snprintf). Any thread. */
size_t load_body_headers(const load_run_t *run, const load_body_t *b, char *buf,
                         size_t n);

/* Allocates the histograms. Returns 0 or -1 (out of memory). */
int load_stats_init(load_stats_t *st);
void load_stats_free(load_stats_t *st);

/* The index of HTTP status `code` in the status arrays: the code itself
 * from 100 to LOAD_STATUS_MAX - 1, else LOAD_STATUS_INVALID. Any thread. */
int load_status_index(long code);

/* Replies with an error status (the invalid ones included): not 2xx and
 * not 429, 503 or 504, which are counted apart. */
int64_t load_stats_other_errors(const load_stats_t *st);

/* All measured requests that failed. */
int64_t load_stats_errors(const load_stats_t *st);

/* Runs `run` on the calling thread, filling `st` (initialised, empty).
 * Needs curl_global_init. Returns 0, or -1 with err[0..n) saying why it
 * could not run. A failed request is counted; only one that no later
 * request can cure (load_stop_at_once) ends the run early, nothing new
 * sent after it, with st->stop saying why. */
int load_client_run(const load_run_t *run, load_stats_t *st, char *err,
                    size_t n);

/* The CPU time this process has used, user and system, in seconds
 * (getrusage); the engines' cpu_s is its difference over a run. */
double load_cpu_now_s(void);

/* What both engines (this one and decode.h's) do with their multi handle
 * each time round their loop, on the caller's thread. Step 2:
 * load_multi_transfers runs curl_multi_perform, then hands each transfer
 * that has finished to finish(engine, the pointer its easy handle carries
 * as CURLOPT_PRIVATE (its slot), its result, the time in s), and returns
 * how many did. Step 3: load_multi_sleep sleeps in curl_multi_poll for
 * curl's own timeout (100 ms where that is none or longer), or until
 * wake_s (attnd_now_ms's clock, in s) where that is sooner; INFINITY: no
 * wake of the engine's own. */
typedef void (*load_finish_fn)(void *engine, void *slot, CURLcode rc,
                               double now);
int load_multi_transfers(CURLM *multi, load_finish_fn finish, void *engine);
void load_multi_sleep(CURLM *multi, double wake_s);

/* Whether a --progress line is due at `now` (s): one is from *next on,
 * and when it is, *next moves to half a second after `now`. */
int load_progress_due(double now, double *next);

/* Takes an engine's easy handle h out of multi where it is busy there,
 * and frees it; NULL: none. */
void load_easy_free(CURLM *multi, CURL *h, int busy);

/* Parses a Server-Timing header value, "queue;dur=0.01, compute;dur=2.5,
 * total;dur=2.9" (milliseconds): stores the durations it finds of the
 * metrics queue, compute and total. Returns a bit mask of those found
 * (1 queue, 2 compute, 4 total). A metric's first "dur" param counts; a
 * duration must be a plain decimal number, finite and not negative (any
 * other is no duration); a quoted string is skipped whole, commas and
 * "dur=" inside it included. Reads value[0..len) in place, once (linear in
 * len, no terminator needed); borrows it. */
int load_server_timing_parse(const char *value, size_t len, double *queue_ms,
                             double *compute_ms, double *total_ms);

/* Parses an Inference-Header-Content-Length value: decimal digits between
 * optional whitespace (the line's CR LF included). Returns the length, or
 * INT64_MAX, one past any body, for a value that is not one (empty, a
 * sign, other text, past INT64_MAX). Reads value[0..len) in place. */
int64_t load_header_length_parse(const char *value, size_t len);

#endif
