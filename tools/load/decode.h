/* tools/load/decode.h: decode mode, KV-cache sessions driven as a decoder
 * drives them (server/store/session.h, POST /v1/sessions and its steps).
 *
 * One run is one step of a sweep: `sessions` sessions, each
 *   1. created: POST /v1/sessions (the server picks the id), or with
 *      `put`, PUT /v1/sessions/{id} with an id of 32 hex digits drawn here
 *      from the OS (the client-chosen id that a balancer hashing on the id
 *      needs; see docs/deployment.md);
 *   2. given its prefill, `prefill` tokens in one step; the latency of
 *      that request is the session's time to first token;
 *   3. stepped `steps` times, one new token a step;
 *   4. deleted.
 * Every step sends expected_length, the length the session holds before
 * it, so a step the server did not apply, or applied twice, shows. At most
 * `concurrency` requests are in flight (closed loop), one per session at a
 * time; the ready sessions take turns, the one that waited longest first.
 *
 * A session's tokens are a pure function of the seed, the prefill length,
 * the session's index and the token's position (load_decode_row), so a
 * session is the same sequence however it was served:
 *   - pre-projected sessions (no `layer`): each token is a query row of
 *     H·Dh and key and value rows of Hkv·Dh, Dh = E / H, uniform in
 *     [-1, 1); the session may have rope (theta 10000, every feature).
 *   - a layer's sessions: each token is a hidden state of E.
 * A session that answers 404 (unknown_session: its replica restarted, or
 * it expired), 410 (session_evicted) or 409 (length_mismatch) is created
 * again and given its whole history so far (prefill and the steps done)
 * as one prefill, as a client that recomputes its cache does; then it goes
 * on. That is a recreation, counted by its cause, and not an error. Any
 * other failure is an error, and the request is sent again after a pause
 * (pause_s, 10 ms unless set, doubling up to 1 s). A session is abandoned
 * after LOAD_DECODE_MAX_FAILS failures in a row or LOAD_DECODE_MAX_RECREATE
 * recreations. But no request is sent again, and the run ends once those
 * in flight are answered, after a failure that no later request can cure
 * (load_stop_at_once: a failed TLS handshake, nothing listening), or a 401
 * before any request of the run succeeded (no key, or a wrong one).
 *
 * --verify: the replies of `verify` steps are kept (the sessions' last
 * decode steps first, the ones over the longest cache, then the ones
 * before them, then prefills) and load_decode_verify recomputes each with
 * the core: a causal attention over the whole sequence so far. Everything
 * runs on the caller's thread. */
#ifndef LOAD_DECODE_H
#define LOAD_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "attn/attn.h"
#include "client.h"
#include "codec/buf.h"
#include "hist.h"

#define LOAD_DECODE_MAX_FAILS 10
#define LOAD_DECODE_MAX_RECREATE 8
#define LOAD_DECODE_MAX_CODES 12

/* What the sessions attend with. Borrowed. */
typedef struct load_decode_shape {
  const char *layer;      /* a loaded layer's name, or NULL: pre-projected */
  int64_t E;              /* the layer's width, or H times the head size */
  int64_t H, Hkv;         /* pre-projected: query and key/value heads */
  attn_rope_style_t rope; /* pre-projected: NONE, HALF or INTERLEAVED */
  attnd_form_t encoding;  /* of the tensors sent and return.encoding */
  int64_t timeout_ms;     /* every step's timeout_ms; 0: none */
} load_decode_shape_t;

struct load_decode_stats;

/* One run. Borrowed by load_decode_run. */
typedef struct load_decode_run {
  const char *base; /* attnd's base URL, without a trailing '/' */
  const load_decode_shape_t *shape;
  int put;      /* create with PUT /v1/sessions/{id}, the id drawn here */
  int sessions; /* >= 1 */
  int64_t prefill, steps;      /* tokens: >= 1, >= 0 */
  int concurrency;             /* requests in flight, >= 1 */
  double timeout_s;            /* a request fails this long after it was sent */
  uint64_t seed;               /* of the tokens: load_decode_seed */
  int verify;                  /* step replies to keep */
  double pause_s;              /* the first failure's pause (0: 10 ms) */
  const load_access_t *access; /* the key and TLS trust; NULL: none */
  int unanswered;              /* the sweep's first step: load_stop_at_once's */
  /* Called about twice a second (may be NULL). */
  void (*progress)(const struct load_decode_stats *st, double t, void *arg);
  void *progress_arg;
} load_decode_run_t;

/* A step reply kept for --verify. Owns body. */
typedef struct load_decode_kept {
  char *body;
  size_t len;
  int session;   /* its index */
  int64_t start; /* the session's length before the step */
  int64_t n;     /* the step's new tokens */
} load_decode_kept_t;

/* Why sessions were created again. */
enum {
  LOAD_RECREATE_404,
  LOAD_RECREATE_410,
  LOAD_RECREATE_409,
  LOAD_NRECREATE
};

/* What a run measured. Owns the histograms and the kept replies:
 * load_decode_stats_init before, load_decode_stats_free after. */
typedef struct load_decode_stats {
  int64_t sent;      /* requests: creations, prefills, steps, deletions */
  int64_t ok;        /* 2xx replies that were right (and a deletion's 404) */
  int64_t transport; /* no reply: connection errors and timeouts */
  int64_t timeouts;  /* of which the client's timeout */
  int64_t status[LOAD_STATUS_MAX]; /* error replies by load_status_index
                                      of their HTTP status */
  int64_t recreate_replies;        /* of those, the 404, 410 and 409 that
                                      made a session be created again */
  int64_t bad_replies; /* 2xx replies that were wrong: a creation without
                          a session id of 32 hex digits, a step whose "length"
                          was not the one due */
  struct {
    char code[40];
    int64_t count;
  } codes[LOAD_DECODE_MAX_CODES]; /* error replies by their error.code */
  int n_codes;
  int64_t recreated[LOAD_NRECREATE]; /* recreations by cause */
  int64_t sessions_done, abandoned;
  int64_t prefills, steps_ok; /* first prefills, and one-token steps, 2xx */
  double prefill_tokens, decode_tokens; /* re-prefills' tokens included */
  load_hist_t *ttft;                    /* µs: a session's first prefill */
  load_hist_t *step;                    /* µs: one-token steps */
  load_hist_t *create;                  /* µs: creations */
  load_hist_t *queue, *compute;         /* Server-Timing of the steps, µs */
  int64_t timed;                        /* steps with Server-Timing */
  double elapsed_s;     /* the run, first request to last reply */
  double decode_span_s; /* first one-token step sent to the last answered */
  double cpu_s;         /* this process's CPU time over the run */
  load_decode_kept_t *kept;
  int n_kept;
  char first_error[256]; /* the first transport error, or "" */
  load_stop_t stop;      /* what stopped the run at once, or NONE */
} load_decode_stats_t;

int load_decode_stats_init(load_decode_stats_t *st);
void load_decode_stats_free(load_decode_stats_t *st);

/* Failed requests that count as errors: every failure but the 404, 410
 * and 409 that made a session be created again, plus the wrong 2xx
 * replies. */
int64_t load_decode_errors(const load_decode_stats_t *st);

/* The seed of session `session`'s tokens in a run seeded with `seed` at
 * prefill length `prefill`. */
uint64_t load_decode_seed(uint64_t seed, int64_t prefill, int session);

/* The widths of one token: query, key and value (a layer: E, 0, 0). */
void load_decode_widths(const load_decode_shape_t *s, int64_t *wq, int64_t *wk,
                        int64_t *wv);

/* Token `pos` of the session whose seed is `seed`: q[0..wq), and, when
 * pre-projected, k[0..wk) and v[0..wv) (load_decode_widths). */
void load_decode_row(const load_decode_shape_t *s, uint64_t seed, int64_t pos,
                     float *q, float *k, float *v);

/* Appends the create body of a session of shape s to b. */
void load_decode_create_body(const load_decode_shape_t *s, attnd_buf_t *b);

/* Appends the body of a step of tokens [start, start + n) of the session
 * whose seed is `seed` to b, with expected_length `start`. Returns 0, or -1
 * when out of memory. */
int load_decode_step_body(const load_decode_shape_t *s, uint64_t seed,
                          int64_t start, int64_t n, attnd_buf_t *b);

/* Checks reply body[0..len) of a step of tokens [start, start + n) of the
 * pre-projected session whose seed is `seed`: its "length" is start + n,
 * and its "output" [n, H·Dh] is within LOAD_VERIFY_TOL of the core's causal
 * attention of those tokens over tokens [0, start + n), with the session's
 * rope, computed here with `threads` threads. Stores the relative error in
 * *err_out (+inf when there is none). Returns 0, or -1 with the reason in
 * why[0..wn). Borrows everything; any thread. */
int load_decode_verify(const load_decode_shape_t *s, uint64_t seed,
                       int64_t start, int64_t n, const char *body, size_t len,
                       int threads, double *err_out, char *why, size_t wn);

/* What the engine reads of a reply body[0..len) (its first 4096 bytes
 * unless it is kept for --verify), attnd's compact JSON as text, bounded
 * by len (no terminator needed), in one pass:
 *   - load_decode_reply_int: the digits after the first `"name":`, or -1
 *     when there are none or more than 22 (at most INT64_MAX);
 *   - load_decode_reply_str: the text after the first `"name":"` up to the
 *     next quote, copied into out[0..n) with a terminator; returns its
 *     length, or -1 when absent or too long;
 *   - load_decode_session_id: whether "session" is an id as attnd makes
 *     them, 32 hex digits (0-9 a-f), stored into id[0..33) when it is. Any
 *     other text is refused: the id goes into the URL of every later
 *     request, where a '/', a '?' or "../" would send them elsewhere. */
int64_t load_decode_reply_int(const char *body, size_t len, const char *name);
int load_decode_reply_str(const char *body, size_t len, const char *name,
                          char *out, size_t n);
int load_decode_session_id(const char *body, size_t len, char *id);

/* Runs `run` on the calling thread, filling `st` (initialised, empty).
 * Needs curl_global_init. Returns 0, or -1 with err[0..n) saying why it
 * could not run (failed requests are counted; those above that stop the
 * run are in st->stop). */
int load_decode_run(const load_decode_run_t *run, load_decode_stats_t *st,
                    char *err, size_t n);

#endif
