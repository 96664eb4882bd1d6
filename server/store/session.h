/* server/store/session.h: KV-cache sessions for decoding.
 *
 * A session holds one sequence's keys and values, so that a client sends
 * only each step's new tokens. They live in pages of ATTN_KV_PAGE tokens
 * (the core's layout, attn_kv_t): a cpu session's in host memory, from one
 * pool of kv_cache_bytes; a cuda session's in GPU memory (attn_cuda_alloc),
 * counted against the GPU's budget (max_device_memory_bytes) that cuda
 * requests share. Every session's fixed cost (ATTND_SESSION_COST) is host
 * memory, in the host pool. Pages are reference-counted, so that a fork
 * (of the same backend as its parent) shares its parent's pages and a page
 * is copied only when a session writes into one it shares. When a pool is
 * full, the least recently used idle session whose pages live there is
 * evicted (its id then answers 410); a session in use never is. A session
 * unused for its ttl_s (a use: a step that ran, from its start to its
 * end, applied or not, a fork, a truncate; not a step refused before it
 * ran) ends (its id then answers 404, as a deleted one).
 *
 * Steps of one session run one at a time, in arrival order: a step is
 * enqueued on its session (attnd_session_enqueue); when its turn comes it
 * is prepared (attnd_session_prepare: its expected length checked, pages
 * made ready, the core's cache set up in the request), computed like any
 * request, and ended (attnd_session_step_end), which commits its tokens
 * and gives the next step its turn. Steps of different sessions run in
 * parallel.
 *
 * Every function takes the store's lock; any thread. The store owns the
 * sessions and their pages; a request that holds a session (its step)
 * keeps it alive until its step ends. */
#ifndef ATTND_SESSION_H
#define ATTND_SESSION_H

#include <stddef.h>
#include <stdint.h>

#include "attn/attn.h"
#include "codec/buf.h"
#include "errors.h"
#include "model/layers.h"
#include "sched/budget.h"

struct attnd_request;

typedef struct attnd_sessions attnd_sessions_t;
typedef struct attnd_session attnd_session_t;

/* What a session attends with: a layer (its weights, heads and rope), or,
 * pre-projected, head counts and widths and a rope. */
typedef struct attnd_session_shape {
  attnd_layer_set_t *layers;  /* a reference, with a layer; else NULL */
  const attnd_layer_t *layer; /* or NULL */
  int64_t H, Hkv, Dh, Dv;
  attn_rope_t rope;
  /* where its pages live and its steps compute: cpu (host memory) or cuda
   * (GPU memory); a fork's is its parent's */
  attn_backend_kind_t backend;
} attnd_session_shape_t;

/* What a session costs the pool before any page: it bounds how many empty
 * sessions a client can make. */
#define ATTND_SESSION_COST 4096

/* A session as GET /v1/sessions/{id} shows it. */
typedef struct attnd_session_info {
  char id[33];
  char layer[256]; /* "" when pre-projected */
  int64_t H, Hkv, Dh, Dv;
  attn_rope_t rope;
  attn_backend_kind_t backend;
  int64_t length, max_tokens, ttl_s;
  int64_t pages, shared_pages; /* shared: held by another session too */
  /* what it holds of the pools: ATTND_SESSION_COST and its pages, a page
   * it shares with another session counted in full (as in each holder);
   * a cuda session's pages are GPU memory (device_bytes of them) */
  int64_t bytes, device_bytes;
  double age_s, idle_s, expires_in_s;
  int busy;   /* a step is being computed */
  int queued; /* steps waiting their turn */
} attnd_session_info_t;

/* The pools' state, for /metrics: the host pool's bytes, and the GPU
 * memory that cuda sessions' pages hold (free pages kept for reuse
 * included, as they count against the GPU's budget). */
typedef struct attnd_sessions_stats {
  int64_t sessions, kv_bytes_used, kv_bytes_free, pages_shared;
  int64_t kv_device_bytes_used, kv_device_bytes_held;
  uint64_t evicted_lru, expired, deleted, cow_copies;
} attnd_sessions_stats_t;

/* A store of sessions over a host pool of pool_bytes; cuda sessions' pages
 * come from `device` (NULL: attn_cuda_alloc and its kin; borrowed, it must
 * outlive the store) within `device_budget` (borrowed too: the server's
 * GPU budget, which cuda requests take from as well; NULL: none, and no
 * cuda session gets a page). NULL when out of memory. */
attnd_sessions_t *attnd_sessions_new(int64_t pool_bytes,
                                     attnd_budget_t *device_budget,
                                     const attnd_device_memory_t *device);
void attnd_sessions_free(attnd_sessions_t *st);

/* Whether `id` is a session's id: 32 hex digits, 0-9 and a-f. */
int attnd_session_id_ok(const char *id);

/* For tests: the sessions this thread's lookups of an id (create, get,
 * steps, delete, ...) have compared it with so far. */
extern _Thread_local uint64_t attnd__session_probes;
/* For tests: the sessions this thread's attnd_session_list calls have
 * compared with `after` so far. */
extern _Thread_local uint64_t attnd__session_list_visits;

/* A new session of `shape` (steals its layers reference, also on failure),
 * holding up to max_tokens, ending after ttl_s unused. Its id is `id` (the
 * client's, attnd_session_id_ok; one evicted or ended before may be used
 * again), or, NULL, 128 bits from the OS. Whether shape->backend may run
 * here is the caller's to check (its pages are taken at its steps).
 * Returns 0 with `info`, or -1 with err: session_exists (409) when a live
 * session has the id, overloaded (429), out_of_memory. */
int attnd_session_create(attnd_sessions_t *st, attnd_session_shape_t *shape,
                         int64_t max_tokens, int64_t ttl_s, const char *id,
                         attnd_session_info_t *info, attnd_error_t *err);

/* Whether a session of `shape` could ever hold `tokens` tokens: its pages
 * within what its pool could hold were it alone there, as
 * attnd_session_prepare checks each step. 0, or -1 with err
 * limit_exceeded (422) naming `field`, its message beginning with `what`
 * ("max_tokens 900"). Any thread. */
int attnd_session_fits(attnd_sessions_t *st, const attnd_session_shape_t *shape,
                       int64_t tokens, const char *field, const char *what,
                       attnd_error_t *err);

/* Fills info for session `id`. -1 with err: unknown_session (404), or
 * session_evicted (410). */
int attnd_session_get(attnd_sessions_t *st, const char *id,
                      attnd_session_info_t *info, attnd_error_t *err);

/* Ends session `id` now; its pages go back to the pool once no other
 * session shares them, and a step in flight finishes first. */
int attnd_session_delete(attnd_sessions_t *st, const char *id,
                         attnd_error_t *err);

/* A new session with the pages of `id` shared, copy on write, its id
 * beginning with id's first 16 digits: its info in *info. The same errors,
 * overloaded (429) when the store is full, and, as truncate, session_busy
 * (409) while a step is in flight or waiting. */
int attnd_session_fork(attnd_sessions_t *st, const char *id,
                       attnd_session_info_t *info, attnd_error_t *err);

/* Drops the tokens of `id` from `length` on (at most its length). Refused
 * (session_busy, 409) while a step is in flight or waiting. */
int attnd_session_truncate(attnd_sessions_t *st, const char *id, int64_t length,
                           attnd_session_info_t *info, attnd_error_t *err);

/* Up to `max` sessions whose ids sort after `after` ("" for the first),
 * in id order, into infos; *more says whether others follow. Returns how
 * many, or -1 out of memory. A page costs log(sessions) + max. */
int attnd_session_list(attnd_sessions_t *st, const char *after,
                       attnd_session_info_t *infos, size_t max, int *more);

/* The shape of session `id`, with a new reference to its layers (for
 * decoding a step's body before it is enqueued). The errors of get. */
int attnd_session_shape(attnd_sessions_t *st, const char *id,
                        attnd_session_shape_t *shape, attnd_error_t *err);

/* Enqueues step `req` (decoded) on session `id`, which the request then
 * holds (req->session) until attnd_session_step_end. Returns 1 when it is
 * the step's turn at once (the caller prepares and runs it now), 0 when
 * others are ahead of it (turn(tag) is called when they have ended: from
 * the thread that ends the previous step), or -1 with err (the session's
 * errors). */
int attnd_session_enqueue(attnd_sessions_t *st, const char *id,
                          struct attnd_request *req, void (*turn)(void *tag),
                          void *tag, attnd_error_t *err);

/* Takes step `req`, waiting behind another (enqueued, its turn not yet
 * given), out of its session's queue; it then holds the session no more
 * (req->session NULL) and is answered without running. Returns 1, or 0
 * when its turn has been given already (it is not in the queue). Any
 * thread. */
int attnd_session_unqueue(attnd_sessions_t *st, struct attnd_request *req);

/* In its turn: checks req's expected_length (length_mismatch, 409) and the
 * session's max_tokens (limit_exceeded, as are pages its pool could not
 * hold were the session alone there: nobody is evicted for them), makes
 * its pages ready for the new tokens (copying a shared last page; evicting idle
 * sessions of its backend when its pool is short, else overloaded, 429 naming
 * backend for a cuda session; a failed GPU copy is backend_unavailable, 503)
 * and points req's params at the cache (kv.device set for a cuda session).
 * Returns 0, or -1 with err; either way the step must be ended. */
int attnd_session_prepare(attnd_sessions_t *st, struct attnd_request *req,
                          attnd_error_t *err);

/* Ends req's step: with `commit`, the session's length grows by its new
 * tokens. The request lets go of the session, and the next step, if any,
 * gets its turn (turn is called from here, after the lock is released).
 * Returns 0, or -1 with err (unknown_session) when the step was computed
 * but its session was deleted meanwhile: nothing was committed. */
int attnd_session_step_end(attnd_sessions_t *st, struct attnd_request *req,
                           int commit, attnd_error_t *err);

/* The stats, after ending the sessions past their ttl_s (as any lookup
 * does, at most once a second). */
void attnd_sessions_stats(attnd_sessions_t *st, attnd_sessions_stats_t *s);

/* Appends the JSON object of a session's info to b. */
void attnd_session_info_json(const attnd_session_info_t *info, attnd_buf_t *b);

#endif
