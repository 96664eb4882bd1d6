/* tests/check_sessions.c: KV-cache sessions over HTTP (server/store/session.h),
 * black-box against the real build/attnd.
 *
 * A session's steps are checked against a recomputation: the same tokens
 * sent at once to POST /v1/attention, causal (bottom_right), with the
 * session's layer, or pre-projected with its head counts and rope and no
 * projections; a step's rows of "output", and of "weights" over the whole
 * cache [H, Lnew, length], must equal the recomputation's rows within TOL
 * as ‖got − ref‖₂ / ‖ref‖₂ (floats travel as base64, exactly). Where no
 * server is left to ask (after a drain), and for the hundred sessions, the
 * recomputation is the float64 reference of tests/ref.c instead. TCases:
 *   - steps: one server with two layers (torch MHA E 64, H 4, rope half,
 *     as the demo layer; Llama E 32, H 4, Hkv 2, rope interleaved on 4 of
 *     8 features) for every shape (two layers, three pre-projected: MHA,
 *     GQA with Dv != Dh, MQA without rope) times every schedule of chunks
 *     (single tokens, mixed sizes across the 64-token page boundary, whole
 *     pages, one big step); a step's own members (mask.window, mask.alibi,
 *     scale, softcap); expected_length; many threads stepping one session
 *     at once (every length once, the tokens in the order of their
 *     lengths);
 *   - pool: a server per test: fork and truncate against their
 *     recomputations, with shared_pages, the pool's bytes and
 *     attnd_kv_pages_shared; eviction order under a small kv_cache_bytes
 *     (the least recently used idle session answers 410, the others 200),
 *     and 422 for a step that could never fit, which evicts nobody;
 *     truncate while a step is in flight and queued (409 session_busy),
 *     429 while every session is busy; DELETE with a step in flight and one
 * queued; ttl_s; the session protocol's /metrics; a drain with steps in flight
 * and queued (all 200, exit status 0);
 *   - errors: every hostile input of create, step, truncate with its
 *     status, code, field and message words; unknown ids, well-formed and
 *     not; methods (405 with Allow); list arguments;
 *   - load: 100 sessions × 50 steps from 8 connections at once, every
 *     step against the reference; listing them page by page; deleting
 *     them.
 *   - regressions: six bugs the suite found (a fork evicting its parent,
 *     shared pages counted per holder, rope's field paths, a fork's body,
 *     a refused step's pages, sessions left out of the pool's bytes).
 * Every test stops its server with SIGTERM, expecting exit status 0 and no
 * 500 answered. Threads are POSIX's (ThreadSanitizer does not follow
 * C11's thrd_create); they never call Check, they note what went wrong,
 * and the test's thread asserts. */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/session_api.h"
#include "attn/attn.h"
#include "codec/util.h"
#include "doc_names.h"
#include "http/exchange.h"
#include "layer_files.h"
#include "ref.h"
#include "server_harness.h"
#include "store/session.h"
#include "suite.h"
#include "testutil.h"

/* The core's tolerance (tests/check_forward.c); the wire adds nothing. */
#define TOL 1e-5
#define MHA "demo"
#define LLAMA "model.layers.0.self_attn"
#define SESSION_COST ATTND_SESSION_COST /* the pool's, before pages */
#define PAGE 64                         /* tokens per page */

/* Written by test_setup, before any test: the two layers' files (the
 * --layers argument), and the bytes a page of a "demo" session takes,
 * measured from a server (a one-page session's info.bytes less its
 * SESSION_COST). */
static char layer_dir[64];
static char layer_arg[300];
static int64_t demo_page;

/* ---- shapes ------------------------------------------------------------- */

typedef struct shape {
  const char *name;
  const char *layer; /* a layer of layer_arg, or NULL: pre-projected */
  int64_t E;         /* the layer's hidden width */
  int64_t H, Hkv, Dh, Dv;
  attn_rope_style_t rope;
  double theta;
  int64_t rope_dims; /* as the info shows it (Dh when all) */
} shape_t;

static const shape_t shapes[] = {
    {"layer demo: E 64, H 4, rope half", MHA, 64, 4, 4, 16, 16, ATTN_ROPE_HALF,
     10000, 16},
    {"layer llama: E 32, H 4, Hkv 2, rope interleaved 4 of 8", LLAMA, 32, 4, 2,
     8, 8, ATTN_ROPE_INTERLEAVED, 500, 4},
    {"H 2, Dh 4, rope half", NULL, 0, 2, 2, 4, 4, ATTN_ROPE_HALF, 10000, 4},
    {"H 4, Hkv 2, Dh 8, Dv 6, rope interleaved 4", NULL, 0, 4, 2, 8, 6,
     ATTN_ROPE_INTERLEAVED, 500, 4},
    {"H 3, Hkv 1, Dh 5, Dv 3, no rope", NULL, 0, 3, 1, 5, 3, ATTN_ROPE_NONE, 0,
     0},
};
#define N_SHAPES ((int)(sizeof shapes / sizeof shapes[0]))
#define SH_DEMO (&shapes[0])
#define SH_LLAMA (&shapes[1])
#define SH_SMALL (&shapes[2])
#define SH_GQA (&shapes[3])

/* A token's row: its query part (the hidden state, with a layer), then its
 * key and value parts (pre-projected only). */
static int64_t w_q(const shape_t *s) {
  return s->layer ? s->E : s->H * s->Dh;
}
static int64_t w_k(const shape_t *s) {
  return s->layer ? 0 : s->Hkv * s->Dh;
}
static int64_t w_v(const shape_t *s) {
  return s->layer ? 0 : s->Hkv * s->Dv;
}
static int64_t w_row(const shape_t *s) {
  return w_q(s) + w_k(s) + w_v(s);
}
/* The output's width: the layer's (o_proj), else H·Dv. */
static int64_t e_out(const shape_t *s) {
  return s->layer ? s->E : s->H * s->Dv;
}

static json_t *rope_json(const shape_t *s) {
  return json_pack("{s:f,s:I,s:s}", "theta", s->theta, "dims",
                   (json_int_t)s->rope_dims, "style",
                   s->rope == ATTN_ROPE_HALF ? "half" : "interleaved");
}

/* The members of the JSON object text `extra` (may be NULL) into obj. */
static void merge(json_t *obj, const char *extra) {
  if (extra == NULL)
    return;
  json_error_t e;
  json_t *x = json_loads(extra, 0, &e);
  if (x == NULL || json_object_update(obj, x) < 0)
    abort(); /* a bad literal in this file */
  json_decref(x);
}

static char *dump(json_t *v) {
  char *t = json_dumps(v, JSON_COMPACT);
  json_decref(v);
  if (t == NULL)
    abort();
  return t;
}

/* POST /v1/sessions's body for shape s, with `extra` members. */
static char *create_text(const shape_t *s, const char *extra) {
  json_t *b;
  if (s->layer) {
    b = json_pack("{s:s}", "layer", s->layer);
  } else {
    b = json_pack("{s:I,s:I,s:I,s:I}", "num_heads", (json_int_t)s->H,
                  "num_kv_heads", (json_int_t)s->Hkv, "head_dim",
                  (json_int_t)s->Dh, "v_head_dim", (json_int_t)s->Dv);
    if (s->rope)
      json_object_set_new(b, "rope", rope_json(s));
  }
  merge(b, extra);
  return dump(b);
}

/* ---- HTTP --------------------------------------------------------------- */

/* One exchange on c: `method` `path` with the JSON text `body` (NULL for
 * none). Returns 0 when a reply came; any thread. */
static int call_r(sh_client_t *c, const char *method, const char *path,
                  const char *body, sh_resp_t *r) {
  sh_req_t q = {.method = method,
                .path = path,
                .content_type = body ? "application/json" : NULL,
                .body = body,
                .len = body ? strlen(body) : 0};
  return sh_http(c, &q, r);
}

/* The same, asserting that a reply came. */
static sh_resp_t call(sh_client_t *c, const char *method, const char *path,
                      const char *body) {
  sh_resp_t r;
  ck_assert_msg(call_r(c, method, path, body, &r) == 0, "%s %s: %s", method,
                path, r.error);
  return r;
}

/* `method` /v1/sessions/{id}{sub}. */
static sh_resp_t call_id(sh_client_t *c, const char *method, const char *id,
                         const char *sub, const char *body) {
  char path[640];
  snprintf(path, sizeof path, "/v1/sessions/%s%s", id, sub);
  return call(c, method, path, body);
}

/* The body of a reply with `status`, parsed (a new reference); r freed. */
static json_t *json_reply(sh_resp_t *r, long status) {
  ck_assert_msg(r->status == status, "status %ld, expected %ld: %.500s",
                r->status, status, r->body);
  json_t *v = sh_json(r);
  ck_assert_msg(v != NULL, "not JSON: %.300s", r->body);
  sh_resp_free(r);
  return v;
}

static int64_t ji(const json_t *o, const char *key) {
  const json_t *v = json_object_get(o, key);
  ck_assert_msg(json_is_integer(v), "%s is not an integer", key);
  return (int64_t)json_integer_value(v);
}

static int jb(const json_t *o, const char *key) {
  const json_t *v = json_object_get(o, key);
  ck_assert_msg(json_is_boolean(v), "%s is not a boolean", key);
  return json_is_true(v);
}

static double jnum(const json_t *o, const char *key) {
  const json_t *v = json_object_get(o, key);
  ck_assert_msg(json_is_number(v), "%s is not a number", key);
  return json_number_value(v);
}

/* GET /v1/sessions/{id}: its info (a new reference). */
static json_t *get_info(sh_client_t *c, const char *id) {
  sh_resp_t r = call_id(c, "GET", id, "", NULL);
  return json_reply(&r, 200);
}

/* Checks what a session's info says of its shape, and that it is idle
 * with `length` tokens. */
static void check_info(const json_t *in, const shape_t *s, int64_t length) {
  const char *id = json_string_value(json_object_get(in, "session"));
  ck_assert_msg(id && strlen(id) == 32 && strspn(id, "0123456789abcdef") == 32,
                "session is not 32 hex digits: %s", id ? id : "(none)");
  const json_t *l = json_object_get(in, "layer");
  if (s->layer)
    ck_assert_str_eq(json_string_value(l), s->layer);
  else
    ck_assert(json_is_null(l));
  ck_assert_int_eq(ji(in, "num_heads"), s->H);
  ck_assert_int_eq(ji(in, "num_kv_heads"), s->Hkv);
  ck_assert_int_eq(ji(in, "head_dim"), s->Dh);
  ck_assert_int_eq(ji(in, "v_head_dim"), s->Dv);
  const json_t *rp = json_object_get(in, "rope");
  if (s->rope == ATTN_ROPE_NONE) {
    ck_assert(json_is_null(rp));
  } else {
    ck_assert_msg(json_is_object(rp), "rope is not an object");
    ck_assert(jnum(rp, "theta") == s->theta);
    ck_assert_int_eq(ji(rp, "dims"), s->rope_dims);
    ck_assert_str_eq(json_string_value(json_object_get(rp, "style")),
                     s->rope == ATTN_ROPE_HALF ? "half" : "interleaved");
  }
  ck_assert_int_eq(ji(in, "length"), length);
  ck_assert_int_eq(ji(in, "page_tokens"), PAGE);
  ck_assert(!jb(in, "busy"));
  ck_assert_int_eq(ji(in, "queued"), 0);
  ck_assert(jnum(in, "age_s") >= 0 && jnum(in, "idle_s") >= 0);
  ck_assert(jnum(in, "expires_in_s") <= (double)ji(in, "ttl_s"));
}

/* A reply that made a session: 201, its info (a new reference; r freed),
 * the session's id copied into id. */
static json_t *new_session_info(sh_resp_t *r, char *id) {
  json_t *in = json_reply(r, 201);
  snprintf(id, 40, "%s", json_string_value(json_object_get(in, "session")));
  return in;
}

/* POST /v1/sessions with `body`: 201, the new id in id. Returns the info
 * (a new reference). */
static json_t *create(sh_client_t *c, const char *body, char *id) {
  sh_resp_t r = call(c, "POST", "/v1/sessions", body);
  return new_session_info(&r, id);
}

/* POST /v1/sessions/{parent}/fork: 201, the fork's id in id. Returns its
 * info (a new reference). */
static json_t *fork_session(sh_client_t *c, const char *parent, char *id) {
  sh_resp_t r = call_id(c, "POST", parent, "/fork", NULL);
  return new_session_info(&r, id);
}

/* A new session of shape sh with the `extra` members (may be NULL): its id
 * in id. */
static void create_shape(sh_client_t *c, const shape_t *sh, const char *extra,
                         char *id) {
  char *body = create_text(sh, extra);
  json_decref(create(c, body, id));
  free(body);
}

/* DELETE /v1/sessions/{id}: 204. */
static void delete_session(sh_client_t *c, const char *id) {
  sh_resp_t r = call_id(c, "DELETE", id, "", NULL);
  ck_assert_int_eq(r.status, 204);
  sh_resp_free(&r);
}

/* `method` `path` with `body` is refused: the error reply of sh_assert_error
 * with this status, code and field, its message holding each of the
 * NULL-terminated words that follow. */
static void call_refused(sh_client_t *c, const char *method, const char *path,
                         const char *body, long status, const char *code,
                         const char *field, ...) __attribute__((sentinel));
static void call_refused(sh_client_t *c, const char *method, const char *path,
                         const char *body, long status, const char *code,
                         const char *field, ...) {
  sh_resp_t r = call(c, method, path, body);
  va_list words;
  va_start(words, field);
  sh_assert_error_v(&r, status, code, field, words);
  va_end(words);
  sh_resp_free(&r);
}

/* The same for `method` /v1/sessions/{id}{sub}. */
static void call_id_refused(sh_client_t *c, const char *method, const char *id,
                            const char *sub, const char *body, long status,
                            const char *code, const char *field, ...)
    __attribute__((sentinel));
static void call_id_refused(sh_client_t *c, const char *method, const char *id,
                            const char *sub, const char *body, long status,
                            const char *code, const char *field, ...) {
  sh_resp_t r = call_id(c, method, id, sub, body);
  va_list words;
  va_start(words, field);
  sh_assert_error_v(&r, status, code, field, words);
  va_end(words);
  sh_resp_free(&r);
}

/* ---- servers ------------------------------------------------------------ */

static void start(sh_server_t *s, const char *const *args) {
  ck_assert_msg(sh_server_start(s, args) == 0, "attnd did not start:\n%s",
                s->log);
}

/* A server started with args, a client of it, and rng (unless NULL) seeded
 * with `seed`. */
static void open_server(sh_server_t *srv, const char *const *args,
                        sh_client_t *c, tu_rng_t *rng, uint64_t seed) {
  start(srv, args);
  sh_client_init(c, srv->port);
  if (rng)
    tu_rng_seed(rng, seed);
}

/* What the server wrote to stderr, for failure messages: from its first
 * sanitizer report if there is one, else the last 3000 bytes. */
static const char *log_tail(sh_server_t *s) {
  sh_server_read_log(s);
  const char *e = strstr(s->log, "==ERROR: ");
  if (e) {
    while (e > s->log && e[-1] != '\n')
      e--;
    return e;
  }
  return s->log_len > 3000 ? s->log + s->log_len - 3000 : s->log;
}

/* No 500 was ever answered, and SIGTERM ends the server with 0. */
static void stop(sh_server_t *s) {
  double n500 = sh_metric(s->port, "attnd_requests_total{status=\"500\"}");
  ck_assert_msg(n500 == 0, "500s answered: %g (or the server is gone):\n%s",
                n500, log_tail(s));
  int st = sh_server_stop(s, 20);
  ck_assert_msg(st == 0, "attnd exited with %d on SIGTERM:\n%s", st,
                log_tail(s));
}

/* The client freed, then the server stopped as stop() does. */
static void close_server(sh_server_t *srv, sh_client_t *c) {
  sh_client_free(c);
  stop(srv);
}

/* The TCase's server, for the TCases that share one: started in Check's
 * parent (an unchecked fixture), so that the forked tests inherit its
 * port. A test that finds it dead (an earlier one crashed it) starts its
 * own, so that one crash fails one test; the teardown reports the crash. */
static sh_server_t fx;
static const char *const *fx_args;
static int fx_own;
static int teardown_failures;

static const char *const *steps_args(void) {
  static const char *args[] = {
      "--layers", layer_arg, "--workers", "2", "--threads-per-request",
      "1",        NULL};
  return args;
}

static void fx_start_steps(void) {
  fx_args = steps_args();
  if (sh_server_start(&fx, fx_args) < 0)
    ck_abort_msg("attnd did not start:\n%s", fx.log);
}

/* Small limits for the errors TCase. */
static void fx_start_errors(void) {
  static const char *args[] = {"--layers",
                               layer_arg,
                               "--workers",
                               "1",
                               "--threads-per-request",
                               "1",
                               "--max-heads",
                               "8",
                               "--max-body-bytes",
                               "65536",
                               "--session-max-tokens",
                               "512",
                               "--session-ttl-s",
                               "50",
                               "--session-max-ttl-s",
                               "100",
                               NULL};
  fx_args = args;
  if (sh_server_start(&fx, fx_args) < 0)
    ck_abort_msg("attnd did not start:\n%s", fx.log);
}

static void fx_ensure(void) {
  sh_resp_t r;
  int up = sh_get(fx.port, "/healthz", &r) == 0 && r.status == 200;
  sh_resp_free(&r);
  fx_own = 0;
  if (up)
    return;
  if (sh_server_start(&fx, fx_args) < 0)
    ck_abort_msg("attnd did not restart:\n%s", fx.log);
  fx_own = 1;
}

static void fx_release(void) {
  if (fx_own)
    stop(&fx);
}

/* Unchecked teardown (Check's parent): a failed assertion here would end
 * the run silently, so problems are counted for test_finish instead. */
static void fx_stop(void) {
  double n500 = sh_metric(fx.port, "attnd_requests_total{status=\"500\"}");
  if (n500 < 0) {
    int st = sh_server_wait(&fx, 1.0);
    sh_server_kill(&fx);
    fprintf(stderr, "check_sessions: attnd died during a TCase (%d):\n%s\n", st,
            log_tail(&fx));
    teardown_failures++;
    return;
  }
  if (n500 > 0) {
    fprintf(stderr, "check_sessions: attnd answered %g 500s\n", n500);
    teardown_failures++;
  }
  int st = sh_server_stop(&fx, 20);
  if (st != 0) {
    fprintf(stderr, "check_sessions: attnd exited with %d on SIGTERM:\n%s\n",
            st, log_tail(&fx));
    teardown_failures++;
  }
}

/* ---- what a session holds, and its recomputation ------------------------- */

/* One step's reply: the cache's length after it, its new tokens, and its
 * output [n, Eo] and weights [H, n, len]. */
typedef struct step_rec {
  int64_t len, n;
  sh_tensor_t out, w;
} step_rec_t;

/* The tokens a session holds, as the test sent them (rows of w_row
 * floats), and the steps not yet compared with a recomputation. */
typedef struct seq {
  const shape_t *sh;
  char id[40];
  const char *opts; /* members of every step and of the recomputation (a
                       JSON object's text: mask.window, scale, ...), or
                       NULL */
  int64_t n, cap;   /* tokens held; rows allocated */
  float *rows;      /* [cap, w_row] */
  step_rec_t *steps;
  size_t n_steps, cap_steps;
} seq_t;

static void seq_init(seq_t *s, const shape_t *sh, const char *id) {
  memset(s, 0, sizeof *s);
  s->sh = sh;
  snprintf(s->id, sizeof s->id, "%s", id);
}

static void seq_reserve(seq_t *s, int64_t n) {
  if (n <= s->cap)
    return;
  int64_t cap = s->cap ? s->cap : 64;
  while (cap < n)
    cap *= 2;
  s->rows = realloc(s->rows, (size_t)(cap * w_row(s->sh)) * sizeof(float));
  if (s->rows == NULL)
    abort();
  s->cap = cap;
}

static void seq_free(seq_t *s) {
  for (size_t i = 0; i < s->n_steps; i++) {
    sh_tensor_free(&s->steps[i].out);
    sh_tensor_free(&s->steps[i].w);
  }
  free(s->steps);
  free(s->rows);
  memset(s, 0, sizeof *s);
}

/* A session's tokens for another session (a fork): no steps. */
static void seq_copy(seq_t *dst, const seq_t *src, const char *id) {
  seq_init(dst, src->sh, id);
  dst->opts = src->opts;
  seq_reserve(dst, src->n);
  memcpy(dst->rows, src->rows,
         (size_t)(src->n * w_row(src->sh)) * sizeof(float));
  dst->n = src->n;
}

/* Random rows for `count` new tokens at [s->n, s->n + count); they count
 * once the caller adds them to s->n (seq_step: after the step's 200). */
static void seq_gen(seq_t *s, tu_rng_t *rng, int64_t count) {
  seq_reserve(s, s->n + count);
  float *x = s->rows + s->n * w_row(s->sh);
  for (int64_t i = 0; i < count * w_row(s->sh); i++)
    x[i] = (float)tu_rng_sym(rng);
}

/* Columns [c0, c0 + w) of rows [from, from + count), as a base64 tensor. */
static json_t *part_json(const seq_t *s, int64_t from, int64_t count,
                         int64_t c0, int64_t w) {
  float *x = malloc((size_t)(count * w) * sizeof *x);
  if (x == NULL)
    abort();
  for (int64_t i = 0; i < count; i++)
    memcpy(x + i * w, s->rows + (from + i) * w_row(s->sh) + c0,
           (size_t)w * sizeof *x);
  int64_t dim[2] = {count, w};
  json_t *t = sh_floats_json(x, 2, dim, SH_BASE64);
  free(x);
  return t;
}

/* A step's body for rows [from, from + count), asking for per-head
 * weights, base64 and no timings, with `extra` members. */
static char *step_text(const seq_t *s, int64_t from, int64_t count,
                       const char *extra) {
  const shape_t *sh = s->sh;
  json_t *b = json_pack(
      "{s:o,s:{s:s,s:s,s:b}}", "query", part_json(s, from, count, 0, w_q(sh)),
      "return", "weights", "per_head", "encoding", "base64", "metrics", 0);
  if (!sh->layer) {
    json_object_set_new(b, "key", part_json(s, from, count, w_q(sh), w_k(sh)));
    json_object_set_new(b, "value",
                        part_json(s, from, count, w_q(sh) + w_k(sh), w_v(sh)));
  }
  merge(b, s->opts);
  merge(b, extra);
  return dump(b);
}

/* Reads a step's 200 reply for `count` new tokens into rec (owning its
 * tensors on success), checking its shapes, and its id when `id` is not
 * NULL. Returns 0, or -1 with why. Any thread. */
static int step_parse(const shape_t *sh, const sh_resp_t *r, int64_t count,
                      const char *id, step_rec_t *rec, char *why, size_t wn) {
  memset(rec, 0, sizeof *rec);
  if (r->status != 200)
    return attnd_fail(why, wn, "status %ld: %.300s", r->status, r->body);
  json_t *v = sh_json(r);
  if (v == NULL)
    return attnd_fail(why, wn, "not JSON: %.200s", r->body);
  char sub[256];
  int bad = 0;
  const json_t *len = json_object_get(v, "length");
  const char *got_id = json_string_value(json_object_get(v, "id"));
  if (!json_is_integer(len))
    bad = attnd_fail(why, wn, "no length: %.200s", r->body);
  else if (id && (got_id == NULL || strcmp(got_id, id) != 0))
    bad =
        attnd_fail(why, wn, "id %s, expected %s", got_id ? got_id : "null", id);
  else if (sh_tensor_decode(json_object_get(v, "output"), &rec->out, sub,
                            sizeof sub) < 0)
    bad = attnd_fail(why, wn, "output: %s", sub);
  else if (sh_tensor_decode(json_object_get(v, "weights"), &rec->w, sub,
                            sizeof sub) < 0)
    bad = attnd_fail(why, wn, "weights: %s", sub);
  if (!bad) {
    rec->len = (int64_t)json_integer_value(len);
    rec->n = count;
    const sh_tensor_t *o = &rec->out, *w = &rec->w;
    if (o->form != SH_BASE64 || o->rank != 2 || o->dim[0] != count ||
        o->dim[1] != e_out(sh))
      bad = attnd_fail(why, wn, "output is not base64 [%lld, %lld]",
                       (long long)count, (long long)e_out(sh));
    else if (w->rank != 3 || w->dim[0] != sh->H || w->dim[1] != count ||
             w->dim[2] != rec->len)
      bad = attnd_fail(why, wn,
                       "weights are [%lld, %lld, %lld], not [H %lld, %lld new "
                       "tokens, length %lld]",
                       (long long)w->dim[0], (long long)w->dim[1],
                       (long long)w->dim[2], (long long)sh->H, (long long)count,
                       (long long)rec->len);
  }
  json_decref(v);
  if (bad) {
    sh_tensor_free(&rec->out);
    sh_tensor_free(&rec->w);
  }
  return bad;
}

static void seq_record(seq_t *s, const step_rec_t *rec) {
  if (s->n_steps == s->cap_steps) {
    s->cap_steps = s->cap_steps ? 2 * s->cap_steps : 16;
    s->steps = realloc(s->steps, s->cap_steps * sizeof *s->steps);
    if (s->steps == NULL)
      abort();
  }
  s->steps[s->n_steps++] = *rec;
}

/* Sends a step of `count` new random tokens (with `extra` members) and
 * asserts its 200: the cache's length grows by count. The step is kept
 * for seq_verify. */
static void seq_step(sh_client_t *c, seq_t *s, tu_rng_t *rng, int64_t count,
                     const char *extra) {
  seq_gen(s, rng, count);
  char id[64], ex[256];
  snprintf(id, sizeof id, "step-%lld+%lld", (long long)s->n, (long long)count);
  snprintf(ex, sizeof ex, "{\"id\":\"%s\"}", id);
  char *body = step_text(s, s->n, count, ex);
  if (extra) {
    json_error_t e;
    json_t *b = json_loads(body, 0, &e);
    free(body);
    merge(b, extra);
    body = dump(b);
  }
  sh_resp_t r = call_id(c, "POST", s->id, "/attention", body);
  free(body);
  step_rec_t rec;
  char why[512];
  ck_assert_msg(step_parse(s->sh, &r, count, id, &rec, why, sizeof why) == 0,
                "%s: step of %lld at %lld: %s", s->sh->name, (long long)count,
                (long long)s->n, why);
  sh_resp_free(&r);
  ck_assert_msg(rec.len == s->n + count,
                "%s: length %lld after a step of %lld "
                "at %lld",
                s->sh->name, (long long)rec.len, (long long)count,
                (long long)s->n);
  s->n += count;
  seq_record(s, &rec);
}

/* Compares step rec with a recomputation over n_full tokens: out
 * [n_full, Eo], w [H, n_full, n_full] (float64). Its rows are those of its
 * new tokens; the recomputation's weights past the cache must be 0
 * (causal). Returns 0, or -1 with why. Any thread. */
static int compare_step(const shape_t *sh, const step_rec_t *rec,
                        const double *out, const double *w, int64_t n_full,
                        char *why, size_t wn) {
  int64_t Eo = e_out(sh), H = sh->H, l = rec->len, n = rec->n, first = l - n;
  if (l > n_full || n < 1 || first < 0)
    return attnd_fail(why, wn, "a step to length %lld of %lld tokens, of %lld",
                      (long long)l, (long long)n, (long long)n_full);
  double e = tu_rel_err(rec->out.data, out + first * Eo, (size_t)(n * Eo));
  if (!(e <= TOL))
    return attnd_fail(why, wn,
                      "the output of the step of %lld to length %lld is off "
                      "by %g",
                      (long long)n, (long long)l, e);
  double *want = malloc((size_t)(H * n * l) * sizeof *want);
  if (want == NULL)
    abort();
  int bad = 0;
  for (int64_t h = 0; h < H; h++)
    for (int64_t i = 0; i < n; i++) {
      const double *row = w + (h * n_full + first + i) * n_full;
      memcpy(want + (h * n + i) * l, row, (size_t)l * sizeof *want);
      for (int64_t j = l; j < n_full && !bad; j++)
        if (row[j] != 0)
          bad = attnd_fail(why, wn,
                           "the recomputation's weight [%lld, %lld, %lld] "
                           "past the cache is %g",
                           (long long)h, (long long)(first + i), (long long)j,
                           row[j]);
    }
  e = tu_rel_err(rec->w.data, want, (size_t)(H * n * l));
  free(want);
  if (!bad && !(e <= TOL))
    bad = attnd_fail(why, wn,
                     "the weights of the step of %lld to length %lld are off "
                     "by %g",
                     (long long)n, (long long)l, e);
  return bad;
}

/* The recomputation of s's first n tokens by POST /v1/attention: output
 * [n, Eo] and weights [H, n, n] as float64 (new arrays). */
static void recompute_v1(sh_client_t *c, const seq_t *s, int64_t n,
                         double **out, double **w) {
  const shape_t *sh = s->sh;
  json_t *b = json_pack("{s:o,s:{s:s},s:{s:s,s:s,s:b}}", "query",
                        part_json(s, 0, n, 0, w_q(sh)), "mask", "causal",
                        "bottom_right", "return", "weights", "per_head",
                        "encoding", "base64", "metrics", 0);
  if (sh->layer) {
    json_object_set_new(b, "layer", json_string(sh->layer));
  } else {
    json_object_set_new(b, "key", part_json(s, 0, n, w_q(sh), w_k(sh)));
    json_object_set_new(b, "value",
                        part_json(s, 0, n, w_q(sh) + w_k(sh), w_v(sh)));
    json_object_set_new(b, "num_heads", json_integer(sh->H));
    json_object_set_new(b, "num_kv_heads", json_integer(sh->Hkv));
    if (sh->rope)
      json_object_set_new(b, "rope", rope_json(sh));
  }
  merge(b, s->opts); /* a mask of its own is causal too */
  json_object_set_new(json_object_get(b, "mask"), "causal",
                      json_string("bottom_right"));
  char *body = dump(b);
  sh_resp_t r = call(c, "POST", "/v1/attention", body);
  free(body);
  json_t *v = json_reply(&r, 200);
  sh_tensor_t t[2];
  const char *names[2] = {"output", "weights"};
  double **dst[2] = {out, w};
  for (int k = 0; k < 2; k++) {
    char why[256];
    ck_assert_msg(sh_tensor_decode(json_object_get(v, names[k]), &t[k], why,
                                   sizeof why) == 0,
                  "/v1 %s: %s", names[k], why);
    *dst[k] = malloc(t[k].n * sizeof(double));
    for (size_t i = 0; i < t[k].n; i++)
      (*dst[k])[i] = t[k].data[i];
  }
  ck_assert_int_eq(t[0].n, (size_t)(n * e_out(sh)));
  ck_assert_int_eq(t[1].n, (size_t)(sh->H * n * n));
  sh_tensor_free(&t[0]), sh_tensor_free(&t[1]);
  json_decref(v);
}

/* The float64 reference (tests/ref.c) of s's first n tokens,
 * pre-projected: causal, the session's rope. */
static void recompute_ref(const seq_t *s, int64_t n, ref_result_t *r) {
  const shape_t *sh = s->sh;
  ck_assert_ptr_null(sh->layer);
  ck_assert_ptr_null(s->opts);
  float *q = malloc((size_t)(n * w_row(sh)) * sizeof *q);
  float *k = q + n * w_q(sh), *v = k + n * w_k(sh);
  for (int64_t i = 0; i < n; i++) {
    const float *row = s->rows + i * w_row(sh);
    memcpy(q + i * w_q(sh), row, (size_t)w_q(sh) * sizeof *q);
    memcpy(k + i * w_k(sh), row + w_q(sh), (size_t)w_k(sh) * sizeof *q);
    memcpy(v + i * w_v(sh), row + w_q(sh) + w_k(sh),
           (size_t)w_v(sh) * sizeof *q);
  }
  attn_params_t p = {.query = tu_t2(q, n, w_q(sh)),
                     .key = tu_t2(k, n, w_k(sh)),
                     .value = tu_t2(v, n, w_v(sh)),
                     .num_heads = sh->H,
                     .num_kv_heads = sh->Hkv,
                     .causal = ATTN_CAUSAL_BOTTOM_RIGHT,
                     .want_weights = 1};
  if (sh->rope)
    p.rope = (attn_rope_t){
        .style = sh->rope, .theta = sh->theta, .dims = sh->rope_dims};
  ck_assert_int_eq(ref_attention(&p, r), 0);
  free(q);
}

/* Compares every step kept since the last call with a recomputation of
 * the tokens held now: POST /v1/attention on c, or, with c NULL, the
 * float64 reference. The steps are then dropped. */
static void seq_verify(sh_client_t *c, seq_t *s) {
  if (s->n_steps == 0)
    return;
  double *out, *w;
  ref_result_t ref = {0};
  if (c) {
    recompute_v1(c, s, s->n, &out, &w);
  } else {
    recompute_ref(s, s->n, &ref);
    out = ref.out, w = ref.weights;
  }
  for (size_t i = 0; i < s->n_steps; i++) {
    char why[512];
    ck_assert_msg(
        compare_step(s->sh, &s->steps[i], out, w, s->n, why, sizeof why) == 0,
        "%s, step %zu of session %s: %s", s->sh->name, i, s->id, why);
    sh_tensor_free(&s->steps[i].out);
    sh_tensor_free(&s->steps[i].w);
  }
  s->n_steps = 0;
  if (c)
    free(out), free(w);
  else
    ref_result_free(&ref);
}

/* POST .../truncate {"length": n}: 200 with the info; s keeps n tokens
 * (its steps are compared first: they hold tokens past n). */
static json_t *seq_truncate(sh_client_t *c, seq_t *s, int64_t n) {
  seq_verify(c, s);
  char body[64];
  snprintf(body, sizeof body, "{\"length\":%lld}", (long long)n);
  sh_resp_t r = call_id(c, "POST", s->id, "/truncate", body);
  json_t *in = json_reply(&r, 200);
  check_info(in, s->sh, n);
  ck_assert_int_eq(ji(in, "pages"), (n + PAGE - 1) / PAGE);
  s->n = n;
  return in;
}

/* ---- steps: every shape, every schedule of chunks ----------------------- */

static const struct {
  const char *name;
  int64_t sizes[8]; /* chunks, 0-ended; {0}: 70 steps of one token */
} scheds[] = {
    {"70 steps of 1", {0}},
    {"3, 61, 1, 7, 64, 2", {3, 61, 1, 7, 64, 2}},
    {"64, 64, 5", {64, 64, 5}},
    {"130 at once", {130}},
    {"1, 63, 1, 65, 10", {1, 63, 1, 65, 10}},
};
#define N_SCHED ((int)(sizeof scheds / sizeof scheds[0]))

START_TEST(test_schedules) {
  const shape_t *sh = &shapes[_i / N_SCHED];
  int k = _i % N_SCHED;
  sh_client_t c;
  sh_client_init(&c, fx.port);
  char id[40], *body = create_text(sh, NULL);
  json_t *in = create(&c, body, id);
  free(body);
  check_info(in, sh, 0);
  ck_assert_int_eq(ji(in, "pages"), 0);
  ck_assert_int_eq(ji(in, "bytes"), SESSION_COST); /* the cost alone */
  ck_assert_int_eq(ji(in, "shared_pages"), 0);
  ck_assert_int_eq(ji(in, "max_tokens"), 32768); /* the defaults */
  ck_assert_int_eq(ji(in, "ttl_s"), 600);
  json_decref(in);

  seq_t s;
  seq_init(&s, sh, id);
  tu_rng_t rng;
  tu_rng_seed(&rng, 100 + (uint64_t)_i);
  if (scheds[k].sizes[0] == 0)
    for (int i = 0; i < 70; i++)
      seq_step(&c, &s, &rng, 1, NULL);
  for (int i = 0; scheds[k].sizes[i]; i++)
    seq_step(&c, &s, &rng, scheds[k].sizes[i], NULL);
  seq_verify(&c, &s);

  /* the info: whole pages, each of the core's layout and a little more */
  in = get_info(&c, id);
  check_info(in, sh, s.n);
  int64_t pages = ji(in, "pages"), bytes = ji(in, "bytes") - SESSION_COST;
  ck_assert_int_eq(pages, (s.n + PAGE - 1) / PAGE);
  ck_assert_int_eq(ji(in, "shared_pages"), 0);
  int64_t floats = (int64_t)attn_kv_page_floats(sh->Hkv, sh->Dh, sh->Dv);
  ck_assert_msg(bytes % pages == 0 && bytes / pages >= floats * 4 &&
                    bytes / pages <= floats * 4 + 128,
                "%lld bytes for %lld pages of %lld floats", (long long)bytes,
                (long long)pages, (long long)floats);
  json_decref(in);
  sh_resp_t r = call_id(&c, "DELETE", id, "", NULL);
  ck_assert_int_eq(r.status, 204);
  ck_assert_uint_eq(r.body_len, 0);
  sh_resp_free(&r);
  seq_free(&s);
  sh_client_free(&c);
}
END_TEST

/* A step's own members: mask.window and mask.alibi (over the cache, as
 * over the whole sequence in /v1), scale and softcap. */
static const char *const step_opts[] = {
    "{\"mask\":{\"window\":{\"left\":5}},\"scale\":0.3,\"softcap\":2.5}",
    "{\"mask\":{\"alibi\":true,\"window\":{\"left\":70,\"right\":3}}}",
    "{\"mask\":{\"alibi\":[0.5,0.25,0.125,0.0625]},\"scale\":2}",
};
#define N_OPTS ((int)(sizeof step_opts / sizeof step_opts[0]))

START_TEST(test_step_options) {
  const shape_t *sh = _i / N_OPTS ? SH_GQA : SH_LLAMA; /* both H 4 */
  sh_client_t c;
  sh_client_init(&c, fx.port);
  char id[40];
  create_shape(&c, sh, NULL, id);
  seq_t s;
  seq_init(&s, sh, id);
  s.opts = step_opts[_i % N_OPTS];
  tu_rng_t rng;
  tu_rng_seed(&rng, 200 + (uint64_t)_i);
  static const int64_t sizes[] = {3, 61, 1, 7, 64, 1, 1};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
    seq_step(&c, &s, &rng, sizes[i], NULL);
  seq_verify(&c, &s);
  seq_free(&s);
  sh_client_free(&c);
}
END_TEST

/* Member `name` of v (a flat tensor) against ref[0..n) within 1e-5 (as
 * ‖got − ref‖₂ / ‖ref‖₂, or each element, with `each`), its shape dim. */
static void check_flat(const json_t *v, const char *name, const int64_t *dim,
                       int rank, const double *ref, int each,
                       const char *what) {
  sh_tensor_t t;
  char why[256];
  ck_assert_msg(
      sh_tensor_decode(json_object_get(v, name), &t, why, sizeof why) == 0,
      "%s: %s: %s", what, name, why);
  ck_assert_int_eq(t.rank, rank);
  for (int i = 0; i < rank; i++)
    ck_assert_msg(t.dim[i] == dim[i], "%s: %s dim %d is %lld, not %lld", what,
                  name, i, (long long)t.dim[i], (long long)dim[i]);
  double e = tu_rel_err(t.data, ref, t.n);
  for (size_t i = 0; each && i < t.n; i++)
    e = fabs(t.data[i] - ref[i]) > e ? fabs(t.data[i] - ref[i]) : e;
  ck_assert_msg(e <= 1e-5, "%s: %s off by %g", what, name, e);
  sh_tensor_free(&t);
}

/* A step's return.weights as an object (attn_reduce_t): its rows are the
 * new tokens, its keys the whole cache (the core's kv path), against the
 * float64 reference of all the tokens held, cut to the step's rows. */
START_TEST(test_step_reductions) {
  const shape_t *sh = SH_GQA; /* pre-projected, H 4, Hkv 2, rope */
  sh_client_t c;
  sh_client_init(&c, fx.port);
  char id[40];
  create_shape(&c, sh, NULL, id);
  seq_t s;
  seq_init(&s, sh, id);
  tu_rng_t rng;
  tu_rng_seed(&rng, 77);
  static const int64_t sizes[] = {40, 30, 1, 65};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    const int64_t n = sizes[k], len = s.n + n;
    seq_gen(&s, &rng, n);
    json_error_t je;
    char *step = step_text(&s, s.n, n, NULL);
    json_t *b = json_loads(step, 0, &je);
    free(step);
    ck_assert_ptr_nonnull(b);
    merge(b, "{\"return\":{\"metrics\":false,\"encoding\":\"flat\","
             "\"weights\":{\"top_k\":3,\"pool\":[7,16],\"stats\":["
             "\"entropy\",\"sink\",\"distance\"]}}}");
    char *text = dump(b);
    sh_resp_t r = call_id(&c, "POST", s.id, "/attention", text);
    free(text);
    json_t *v = json_reply(&r, 200);
    s.n = len;
    /* the reference over every token held, its last n rows */
    ref_result_t rr;
    recompute_ref(&s, len, &rr);
    attn_params_t p = {.reduce = {.top_k = 3,
                                  .pool_q = 7,
                                  .pool_k = 16,
                                  .stats = ATTN_STAT_ALL,
                                  .sink_tokens = 4,
                                  .has_query_range = 1,
                                  .query_range = {len - n, len}}};
    ref_reduce_t ref;
    ck_assert_int_eq(ref_reduce(&p, &rr, &ref), 0);
    char what[64];
    snprintf(what, sizeof what, "step of %lld to %lld", (long long)n,
             (long long)len);
    const json_t *tk = json_object_get(v, "weights_top_k");
    int64_t d3[3] = {sh->H, n, 3};
    const size_t m = (size_t)(sh->H * n * 3);
    double *idx = malloc(m * sizeof *idx);
    for (size_t i = 0; i < m; i++)
      idx[i] = (double)ref.top_k_index[i];
    check_flat(tk, "index", d3, 3, idx, 1, what);
    check_flat(tk, "value", d3, 3, ref.top_k_value, 1, what);
    free(idx);
    int64_t dp[3] = {sh->H, ref.nq, ref.nk};
    check_flat(v, "weights_pooled", dp, 3, ref.pooled, 0, what);
    const json_t *st = json_object_get(v, "weights_stats");
    int64_t d2[2] = {sh->H, n};
    check_flat(st, "entropy", d2, 2, ref.entropy, 0, what);
    check_flat(st, "sink", d2, 2, ref.sink, 0, what);
    check_flat(st, "distance", d2, 2, ref.distance, 0, what);
    ref_reduce_free(&ref);
    ref_result_free(&rr);
    json_decref(v);
  }
  seq_free(&s);
  sh_client_free(&c);
}
END_TEST

/* expected_length: the length held → 200; any other → 409, naming the
 * length held, and the step is not applied. */
START_TEST(test_expected_length) {
  sh_client_t c;
  sh_client_init(&c, fx.port);
  const shape_t *sh = _i ? SH_LLAMA : SH_GQA;
  char id[40];
  create_shape(&c, sh, NULL, id);
  seq_t s;
  seq_init(&s, sh, id);
  tu_rng_t rng;
  tu_rng_seed(&rng, 7);
  seq_step(&c, &s, &rng, 3, "{\"expected_length\":0}");
  seq_step(&c, &s, &rng, 2, "{\"expected_length\":3}");
  static const char *const wrong[] = {"0", "4", "6", "9223372036854775807"};
  for (int i = 0; i < 4; i++) {
    seq_gen(&s, &rng, 2); /* tokens the session must not take */
    char ex[64];
    snprintf(ex, sizeof ex, "{\"expected_length\":%s}", wrong[i]);
    char *body = step_text(&s, s.n, 2, ex);
    sh_resp_t r = call_id(&c, "POST", id, "/attention", body);
    free(body);
    char words[64];
    snprintf(words, sizeof words, "expected_length is %s", wrong[i]);
    sh_assert_error(&r, 409, "length_mismatch", "expected_length", words,
                    "holds 5 tokens", "not applied", NULL);
    sh_resp_free(&r);
    json_t *in = get_info(&c, id);
    check_info(in, sh, 5);
    json_decref(in);
  }
  /* the refused tokens are not in the cache: the next step sees 5 */
  seq_step(&c, &s, &rng, 1, "{\"expected_length\":5}");
  seq_step(&c, &s, &rng, 70, "{\"expected_length\":6}");
  seq_step(&c, &s, &rng, 1, "{\"expected_length\":null}");
  seq_verify(&c, &s);
  seq_free(&s);
  sh_client_free(&c);
}
END_TEST

/* ---- many threads stepping one session ---------------------------------- */

enum { ONE_THREADS = 12, ONE_PER = 4, ONE_N = ONE_THREADS * ONE_PER };

typedef struct one_arg {
  int port, t;
  const seq_t *pool; /* every token's rows, ONE_N of them */
  step_rec_t recs[ONE_PER];
  int tok[ONE_PER];
  char why[512];
  int bad;
} one_arg_t;

static void *one_main(void *p) {
  one_arg_t *a = p;
  sh_client_t c;
  sh_client_init(&c, a->port);
  for (int k = 0; k < ONE_PER && !a->bad; k++) {
    int tok = a->t * ONE_PER + k;
    char *body = step_text(a->pool, tok, 1, NULL);
    sh_resp_t r;
    char path[128];
    snprintf(path, sizeof path, "/v1/sessions/%s/attention", a->pool->id);
    if (call_r(&c, "POST", path, body, &r) < 0)
      a->bad = attnd_fail(a->why, sizeof a->why, "token %d: %s", tok, r.error);
    else if (step_parse(a->pool->sh, &r, 1, NULL, &a->recs[k], a->why,
                        sizeof a->why) < 0)
      a->bad = -1;
    a->tok[k] = tok;
    sh_resp_free(&r);
    free(body);
  }
  sh_client_free(&c);
  return NULL;
}

START_TEST(test_one_session_many_threads) {
  const shape_t *sh = SH_SMALL;
  sh_client_t c;
  sh_client_init(&c, fx.port);
  char id[40];
  create_shape(&c, sh, NULL, id);
  seq_t pool;
  seq_init(&pool, sh, id);
  tu_rng_t rng;
  tu_rng_seed(&rng, 21);
  seq_gen(&pool, &rng, ONE_N); /* token t's rows at t; none committed */
  static one_arg_t args[ONE_THREADS];
  pthread_t th[ONE_THREADS];
  for (int t = 0; t < ONE_THREADS; t++) {
    args[t] = (one_arg_t){.port = fx.port, .t = t, .pool = &pool};
    ck_assert_int_eq(pthread_create(&th[t], NULL, one_main, &args[t]), 0);
  }
  for (int t = 0; t < ONE_THREADS; t++)
    pthread_join(th[t], NULL);
  for (int t = 0; t < ONE_THREADS; t++)
    ck_assert_msg(!args[t].bad, "thread %d: %s", t, args[t].why);

  /* every length 1..N once; the session's tokens in that order */
  seq_t s;
  seq_init(&s, sh, id);
  seq_reserve(&s, ONE_N);
  int seen[ONE_N + 1] = {0};
  for (int t = 0; t < ONE_THREADS; t++)
    for (int k = 0; k < ONE_PER; k++) {
      step_rec_t *rec = &args[t].recs[k];
      ck_assert_msg(rec->len >= 1 && rec->len <= ONE_N && !seen[rec->len],
                    "length %lld twice, or out of 1..%d", (long long)rec->len,
                    ONE_N);
      seen[rec->len] = 1;
      memcpy(s.rows + (rec->len - 1) * w_row(sh),
             pool.rows + args[t].tok[k] * w_row(sh),
             (size_t)w_row(sh) * sizeof(float));
      seq_record(&s, rec);
    }
  s.n = ONE_N;
  seq_verify(&c, &s); /* each reply's rows, in the order of their lengths */
  json_t *in = get_info(&c, id);
  check_info(in, sh, ONE_N);
  json_decref(in);
  /* and the cache holds them in that order */
  seq_step(&c, &s, &rng, 3, NULL);
  seq_verify(&c, &s);
  seq_free(&s);
  seq_free(&pool);
  sh_client_free(&c);
}
END_TEST

/* ---- fork and truncate -------------------------------------------------- */

static double kv_used(int port) {
  return sh_metric(port, "attnd_kv_bytes{state=\"used\"}");
}

START_TEST(test_fork_truncate) {
  const shape_t *sh = _i ? SH_GQA : SH_LLAMA;
  sh_server_t srv;
  start(&srv, steps_args());
  sh_client_t c;
  sh_client_init(&c, srv.port);
  tu_rng_t rng;
  tu_rng_seed(&rng, 31 + (uint64_t)_i);
  char id[40];
  create_shape(&c, sh, "{\"max_tokens\":1000,\"ttl_s\":300}", id);
  seq_t a, f, g;
  seq_init(&a, sh, id);
  seq_step(&c, &a, &rng, 40, NULL);
  seq_step(&c, &a, &rng, 60, NULL); /* 100: a full page and a partial one */
  seq_verify(&c, &a);
  json_t *in = get_info(&c, a.id);
  ck_assert_int_eq(ji(in, "pages"), 2);
  ck_assert_int_eq(ji(in, "shared_pages"), 0);
  int64_t page = (ji(in, "bytes") - SESSION_COST) / 2;
  json_decref(in);
  ck_assert(sh_metric(srv.port, "attnd_kv_pages_shared") == 0);
  double used0 = kv_used(srv.port),
         cap = used0 + sh_metric(srv.port, "attnd_kv_bytes{state=\"free\"}");
  ck_assert(used0 >= 2.0 * (double)page);

  /* fork: a new session with the same tokens, its pages shared */
  char fid[40];
  in = fork_session(&c, a.id, fid);
  ck_assert_str_ne(fid, a.id);
  check_info(in, sh, 100);
  ck_assert_int_eq(ji(in, "pages"), 2);
  ck_assert_int_eq(ji(in, "shared_pages"), 2);
  ck_assert_int_eq(ji(in, "max_tokens"), 1000);
  ck_assert_int_eq(ji(in, "ttl_s"), 300);
  json_decref(in);
  in = get_info(&c, a.id);
  ck_assert_int_eq(ji(in, "shared_pages"), 2);
  json_decref(in);
  ck_assert(sh_metric(srv.port, "attnd_kv_pages_shared") > 0);
  ck_assert(sh_metric(srv.port, "attnd_sessions") == 2);
  double used1 = kv_used(srv.port);
  ck_assert_msg(used1 - used0 < (double)page, "the fork copied pages: %g -> %g",
                used0, used1);
  ck_assert(used1 + sh_metric(srv.port, "attnd_kv_bytes{state=\"free\"}") ==
            cap);
  seq_copy(&f, &a, fid);

  /* the branches part: each step sees its own tokens only */
  seq_step(&c, &a, &rng, 10, NULL);
  seq_step(&c, &f, &rng, 10, NULL);
  seq_verify(&c, &a);
  seq_verify(&c, &f);
  in = get_info(&c, a.id);
  ck_assert_int_eq(ji(in, "shared_pages"), 1); /* the first, full page */
  json_decref(in);
  in = get_info(&c, f.id);
  ck_assert_int_eq(ji(in, "shared_pages"), 1);
  json_decref(in);
  ck_assert(sh_metric(srv.port, "attnd_kv_pages_shared") > 0);
  ck_assert_msg(kv_used(srv.port) - used1 == (double)page,
                "the branches' first steps took %g bytes, not one page (%lld)",
                kv_used(srv.port) - used1, (long long)page);

  /* a fork of a fork, stepped and deleted */
  char gid[40];
  in = fork_session(&c, f.id, gid);
  seq_copy(&g, &f, gid);
  ck_assert_int_eq(ji(in, "shared_pages"), 2);
  json_decref(in);
  seq_step(&c, &g, &rng, 5, NULL);
  seq_step(&c, &g, &rng, 20, NULL); /* 135: a third page */
  seq_verify(&c, &g);
  delete_session(&c, g.id);
  seq_free(&g);
  seq_step(&c, &f, &rng, 1, NULL); /* g's copies did not touch f */
  seq_verify(&c, &f);

  /* truncate into the shared page, then step: a's copy, f's page kept */
  in = seq_truncate(&c, &a, 37);
  ck_assert_int_eq(ji(in, "shared_pages"), 1);
  json_decref(in);
  seq_step(&c, &a, &rng, 30, NULL); /* 67, across the page boundary */
  seq_verify(&c, &a);
  in = get_info(&c, a.id);
  ck_assert_int_eq(ji(in, "pages"), 2);
  ck_assert_int_eq(ji(in, "shared_pages"), 0);
  json_decref(in);
  in = get_info(&c, f.id);
  ck_assert_int_eq(ji(in, "shared_pages"), 0);
  json_decref(in);
  ck_assert(sh_metric(srv.port, "attnd_kv_pages_shared") == 0);
  seq_step(&c, &f, &rng, 5, NULL);
  seq_verify(&c, &f);

  /* truncate at a page boundary, to 0, and to the length held */
  json_decref(seq_truncate(&c, &f, 64));
  seq_step(&c, &f, &rng, 3, NULL);
  seq_verify(&c, &f);
  json_decref(seq_truncate(&c, &f, 0));
  in = get_info(&c, f.id);
  ck_assert_int_eq(ji(in, "bytes"), SESSION_COST);
  json_decref(in);
  seq_step(&c, &f, &rng, 2, NULL);
  seq_verify(&c, &f);
  json_decref(seq_truncate(&c, &a, 67));
  seq_step(&c, &a, &rng, 1, NULL);
  seq_verify(&c, &a);

  /* deleting the parent leaves the fork whole */
  delete_session(&c, a.id);
  call_id_refused(&c, "GET", a.id, "", NULL, 404, "unknown_session", "session",
                  a.id, NULL);
  call_id_refused(&c, "POST", a.id, "/fork", NULL, 404, "unknown_session",
                  "session", a.id, NULL);
  seq_step(&c, &f, &rng, 4, NULL);
  seq_verify(&c, &f);
  ck_assert(sh_metric(srv.port, "attnd_sessions") == 1);
  ck_assert(
      sh_metric(srv.port, "attnd_session_ends_total{cause=\"deleted\"}") == 2);
  ck_assert(
      sh_metric(srv.port, "attnd_session_ends_total{cause=\"evicted\"}") == 0);
  seq_free(&a);
  seq_free(&f);
  close_server(&srv, &c);
}
END_TEST

/* A new session of shape sh with one step of `count` tokens (none: 0). */
static void new_session(sh_client_t *c, const shape_t *sh, seq_t *s,
                        tu_rng_t *rng, int64_t count) {
  char id[40];
  create_shape(c, sh, NULL, id);
  seq_init(s, sh, id);
  if (count)
    seq_step(c, s, rng, count, NULL);
}

/* The sum of "bytes" over the session list, and how many sessions. */
static int64_t listed_bytes(sh_client_t *c, size_t *n) {
  sh_resp_t r = call(c, "GET", "/v1/sessions?limit=1000", NULL);
  json_t *v = json_reply(&r, 200), *e;
  size_t i;
  int64_t sum = 0;
  json_array_foreach(json_object_get(v, "sessions"), i, e) sum +=
      ji(e, "bytes");
  *n = json_array_size(json_object_get(v, "sessions"));
  json_decref(v);
  return sum;
}

/* A session's bytes are what it holds of the pool, its fixed cost and its
 * pages: over sessions of two shapes, one empty, they add up to /metrics'
 * kv bytes used (nothing else holds the pool), and an empty one holds the
 * cost alone. A fork's shared pages count in each holder: the sum is then
 * over by those pages, once each; deleted, the sum is exact again. */
START_TEST(test_bytes_add_up) {
  sh_server_t srv;
  start(&srv, steps_args());
  sh_client_t c;
  sh_client_init(&c, srv.port);
  tu_rng_t rng;
  tu_rng_seed(&rng, 61);
  seq_t a, b, e;
  new_session(&c, SH_LLAMA, &a, &rng, 100); /* 2 pages */
  new_session(&c, SH_GQA, &b, &rng, 30);    /* 1 page */
  new_session(&c, SH_GQA, &e, &rng, 0);     /* none */
  json_t *in = get_info(&c, e.id);
  ck_assert_int_eq(ji(in, "bytes"), SESSION_COST);
  json_decref(in);
  size_t n;
  int64_t sum = listed_bytes(&c, &n);
  ck_assert_uint_eq(n, 3);
  ck_assert_msg((double)sum == kv_used(srv.port),
                "the sessions' bytes add up to %lld, kv bytes used %g",
                (long long)sum, kv_used(srv.port));

  /* a fork shares a's 2 pages: they count in a and in the fork */
  in = get_info(&c, a.id);
  int64_t page = (ji(in, "bytes") - SESSION_COST) / ji(in, "pages");
  json_decref(in);
  char fid[40];
  in = fork_session(&c, a.id, fid);
  ck_assert_int_eq(ji(in, "bytes"), SESSION_COST + 2 * page);
  json_decref(in);
  sum = listed_bytes(&c, &n);
  ck_assert_uint_eq(n, 4);
  double shared = sh_metric(srv.port, "attnd_kv_pages_shared");
  ck_assert(shared == 2);
  ck_assert_msg((double)sum == kv_used(srv.port) + shared * (double)page,
                "with a fork: %lld, kv bytes used %g, %g shared pages of %lld",
                (long long)sum, kv_used(srv.port), shared, (long long)page);
  delete_session(&c, fid);
  delete_session(&c, b.id);
  sum = listed_bytes(&c, &n);
  ck_assert_uint_eq(n, 2);
  ck_assert((double)sum == kv_used(srv.port));
  seq_free(&a);
  seq_free(&b);
  seq_free(&e);
  close_server(&srv, &c);
}
END_TEST

/* ---- eviction ----------------------------------------------------------- */

/* A demo session with one step of `count` tokens. */
static void demo_session(sh_client_t *c, seq_t *s, tu_rng_t *rng,
                         int64_t count) {
  new_session(c, SH_DEMO, s, rng, count);
}

/* Every step of the n sessions was right when it was made; then each is
 * freed. */
static void verify_free(sh_client_t *c, seq_t *const *all, int n) {
  for (int i = 0; i < n; i++) {
    seq_verify(c, all[i]);
    seq_free(all[i]);
  }
}

/* Every request on an evicted session answers 410, naming it. */
static void assert_evicted(sh_client_t *c, const seq_t *s) {
  static const struct {
    const char *method, *sub, *body;
  } reqs[] = {{"GET", "", NULL},
              {"POST", "/fork", NULL},
              {"POST", "/truncate", "{\"length\":0}"},
              {"DELETE", "", NULL},
              {"POST", "/attention", "{\"query\":[[0]]}"}};
  for (size_t i = 0; i < sizeof reqs / sizeof reqs[0]; i++) {
    call_id_refused(c, reqs[i].method, s->id, reqs[i].sub, reqs[i].body, 410,
                    "session_evicted", "session", s->id, "evicted", NULL);
  }
}

static void assert_alive(sh_client_t *c, const seq_t *s) {
  json_t *in = get_info(c, s->id);
  check_info(in, s->sh, s->n);
  json_decref(in);
}

static double ends(int port, const char *cause) {
  char sample[96];
  snprintf(sample, sizeof sample, "attnd_session_ends_total{cause=\"%s\"}",
           cause);
  return sh_metric(port, sample);
}

/* Starts attnd with the demo layer, a KV cache of `cap` bytes, and two
 * workers of one thread each; c a client of it, rng seeded with `seed`. */
static void start_kv(sh_server_t *srv, int64_t cap, sh_client_t *c,
                     tu_rng_t *rng, uint64_t seed) {
  /* every caller counts cap in demo pages */
  ck_assert_msg(demo_page > 0, "the demo layer's page size was not measured");
  char kv[32];
  snprintf(kv, sizeof kv, "%lld", (long long)cap);
  const char *args[] = {"--layers",
                        layer_arg,
                        "--kv-cache-bytes",
                        kv,
                        "--max-memory-bytes",
                        "268435456",
                        "--workers",
                        "2",
                        "--threads-per-request",
                        "1",
                        NULL};
  open_server(srv, args, c, rng, seed);
}

START_TEST(test_eviction_order) {
  sh_server_t srv; /* room for three sessions of one page, and a little */
  sh_client_t c;
  tu_rng_t rng;
  start_kv(&srv, 3 * (SESSION_COST + demo_page) + 512, &c, &rng, 41);
  seq_t a, b, cc, d, e;
  demo_session(&c, &a, &rng, 1);
  demo_session(&c, &b, &rng, 1);
  demo_session(&c, &cc, &rng, 1);
  json_t *in = get_info(&c, a.id);
  ck_assert_int_eq(ji(in, "bytes"), SESSION_COST + demo_page);
  json_decref(in);
  /* a is used again: b is now the least recently used */
  seq_step(&c, &a, &rng, 1, NULL);
  demo_session(&c, &d, &rng, 0); /* its cost evicts b */
  assert_evicted(&c, &b);
  assert_alive(&c, &a);
  assert_alive(&c, &cc);
  assert_alive(&c, &d);
  ck_assert(ends(srv.port, "evicted") == 1);
  ck_assert(sh_metric(srv.port, "attnd_sessions") == 3);
  seq_step(&c, &d, &rng, 1, NULL); /* b's page, free now: no eviction */
  ck_assert(ends(srv.port, "evicted") == 1);
  assert_alive(&c, &a);
  assert_alive(&c, &cc);

  /* cc used: a is the least recently used, then d */
  seq_step(&c, &cc, &rng, 1, NULL);
  demo_session(&c, &e, &rng, 1);
  assert_evicted(&c, &a);
  assert_alive(&c, &cc);
  assert_alive(&c, &d);
  assert_alive(&c, &e);
  ck_assert(ends(srv.port, "evicted") == 2);
  /* a step that needs a page evicts too, never its own session */
  seq_step(&c, &cc, &rng, 64, NULL); /* 66 tokens: a second page */
  assert_evicted(&c, &d);
  assert_alive(&c, &cc);
  assert_alive(&c, &e);
  ck_assert(ends(srv.port, "evicted") == 3);

  /* a fourth page, which the pool could not hold were cc alone in it:
   * 422, not applied (429 when what is in use might go: test_busy) */
  delete_session(&c, e.id);
  seq_step(&c, &cc, &rng, 64, NULL); /* 130: e's page */
  seq_gen(&cc, &rng, 64);
  char *body = step_text(&cc, cc.n, 64, NULL);
  call_id_refused(&c, "POST", cc.id, "/attention", body, 422, "limit_exceeded",
                  "query", "kv_cache_bytes", NULL);
  free(body);
  assert_alive(&c, &cc);
  seq_step(&c, &cc, &rng, 1, NULL); /* within its third page */
  ck_assert(ends(srv.port, "evicted") == 3);
  ck_assert(ends(srv.port, "deleted") == 1);
  ck_assert(sh_metric(srv.port, "attnd_sessions") == 1);
  /* an evicted id may be created again (PUT), empty */
  char *again = create_text(SH_DEMO, NULL);
  sh_resp_t r2 = call_id(&c, "PUT", b.id, "", again);
  free(again);
  json_t *info = json_reply(&r2, 201);
  ck_assert_str_eq(json_string_value(json_object_get(info, "session")), b.id);
  check_info(info, SH_DEMO, 0);
  json_decref(info);
  info = get_info(&c, b.id);
  check_info(info, SH_DEMO, 0);
  json_decref(info);

  /* every step, evicted sessions' included, was right when it was made */
  seq_t *all[] = {&a, &b, &cc, &d, &e};
  verify_free(&c, all, 5);
  close_server(&srv, &c);
}
END_TEST

/* A fork refreshes its parent's place in the LRU order, and a truncate its
 * session's, as a step does. Room for four sessions and three pages: a, b
 * and cc of one page each, then f, a's fork (its page shared). d evicts
 * the least recently used, b (a, were the fork not a use). cc is
 * truncated to its own length, a use: e then evicts a (a's page stays with
 * f), not cc. */
START_TEST(test_eviction_fork_truncate) {
  sh_server_t srv;
  sh_client_t c;
  tu_rng_t rng;
  start_kv(&srv, 4 * SESSION_COST + 3 * demo_page + 512, &c, &rng, 43);
  seq_t a, b, cc, d, e, f;
  demo_session(&c, &a, &rng, 1);
  demo_session(&c, &b, &rng, 1);
  demo_session(&c, &cc, &rng, 1);
  char fid[40];
  json_decref(fork_session(&c, a.id, fid));
  seq_copy(&f, &a, fid);
  ck_assert(ends(srv.port, "evicted") == 0);
  demo_session(&c, &d, &rng, 1); /* evicts b */
  ck_assert(ends(srv.port, "evicted") == 1);
  assert_evicted(&c, &b);
  assert_alive(&c, &a);
  assert_alive(&c, &cc);
  assert_alive(&c, &f);
  assert_alive(&c, &d);

  json_decref(seq_truncate(&c, &cc, cc.n)); /* cc: the most recent */
  demo_session(&c, &e, &rng, 0);            /* needs a session: evicts a */
  ck_assert(ends(srv.port, "evicted") == 2);
  assert_evicted(&c, &a);
  assert_alive(&c, &cc);
  assert_alive(&c, &f);
  assert_alive(&c, &d);
  assert_alive(&c, &e);
  seq_t *all[] = {&a, &b, &cc, &d, &e, &f};
  verify_free(&c, all, 6);
  close_server(&srv, &c);
}
END_TEST

/* A step whose pages could not fit in kv_cache_bytes were every other
 * session gone is 422 limit_exceeded naming query and the pool's bytes,
 * and evicts nobody: emptying the cache would not make it fit, and a 429's
 * retry never would. Room for three sessions of one page: two of one token
 * each stay alive, and a third takes a step of 193 tokens (4 pages, where
 * the pool less its own cost holds 3), then one of 192 (3 pages), which
 * evicts them both. */
START_TEST(test_step_never_fits) {
  sh_server_t srv;
  sh_client_t c;
  tu_rng_t rng;
  start_kv(&srv, 3 * (SESSION_COST + demo_page) + 512, &c, &rng, 47);
  seq_t a, b, big;
  demo_session(&c, &a, &rng, 1);
  demo_session(&c, &b, &rng, 1);
  demo_session(&c, &big, &rng, 0);
  double used = kv_used(srv.port);
  seq_gen(&big, &rng, 3 * PAGE + 1);
  char *body = step_text(&big, 0, 3 * PAGE + 1, NULL);
  call_id_refused(&c, "POST", big.id, "/attention", body, 422, "limit_exceeded",
                  "query", big.id, "193 tokens", "4 pages", "kv_cache_bytes",
                  NULL);
  free(body);
  assert_alive(&c, &a);
  assert_alive(&c, &b);
  assert_alive(&c, &big);
  ck_assert(ends(srv.port, "evicted") == 0);
  ck_assert_msg(kv_used(srv.port) == used,
                "the refused step left %g bytes of the pool in use",
                kv_used(srv.port) - used);
  /* three pages fit once a and b are gone: evicted for them, as ever */
  seq_step(&c, &big, &rng, 3 * PAGE, NULL);
  assert_evicted(&c, &a);
  assert_evicted(&c, &b);
  ck_assert(ends(srv.port, "evicted") == 2);
  seq_verify(&c, &big);
  seq_t *all[] = {&a, &b, &big};
  for (int i = 0; i < 3; i++)
    seq_free(all[i]);
  close_server(&srv, &c);
}
END_TEST

/* ---- busy sessions: 409 session_busy, 429 -------------------------------- */

/* A request in a thread: POST path with body (owned), its reply kept. */
typedef struct bg {
  int port;
  char path[128];
  char *body;
  sh_resp_t r;
  int rc;
  pthread_t th;
} bg_t;

static void *bg_main(void *p) {
  bg_t *b = p;
  sh_client_t c;
  sh_client_init(&c, b->port);
  b->rc = call_r(&c, "POST", b->path, b->body, &b->r);
  sh_client_free(&c);
  return NULL;
}

static void bg_start(bg_t *b, int port, const char *path, char *body) {
  memset(b, 0, sizeof *b);
  b->port = port;
  snprintf(b->path, sizeof b->path, "%s", path);
  b->body = body;
  ck_assert_int_eq(pthread_create(&b->th, NULL, bg_main, b), 0);
}

static void bg_join(bg_t *b) {
  pthread_join(b->th, NULL);
  free(b->body);
  ck_assert_msg(b->rc == 0, "%s: %s", b->path, b->r.error);
}

/* A request that keeps the one worker busy for 0.3 to 1 s. */
static void bg_slow(bg_t *b, int port) {
  json_t *x =
      json_pack("{s:{s:s,s:b}}", "return", "encoding", "base64", "metrics", 0);
  char *body = sh_slow_body(8192, 32, 8, 5, x);
  json_decref(x);
  bg_start(b, port, "/v1/attention", body);
  ck_assert_msg(sh_wait_metric(port, "attnd_busy_workers", 1, 10) >= 1,
                "the slow request did not start");
}

/* A step of s's token at `at` (generated already) in a thread. */
static void bg_step(bg_t *b, int port, const seq_t *s, int64_t at) {
  char path[128];
  snprintf(path, sizeof path, "/v1/sessions/%s/attention", s->id);
  bg_start(b, port, path, step_text(s, at, 1, NULL));
}

/* Polls s's info until `member` is `want` (10 s at most). */
static void wait_info(sh_client_t *c, const seq_t *s, const char *member,
                      int64_t want) {
  double end = sh_now() + 10;
  for (;;) {
    json_t *in = get_info(c, s->id);
    const json_t *v = json_object_get(in, member);
    int64_t got = json_is_boolean(v) ? json_is_true(v) : json_integer_value(v);
    json_decref(in);
    if (got == want)
      return;
    ck_assert_msg(sh_now() < end, "%s stayed %lld, not %lld", member,
                  (long long)got, (long long)want);
    usleep(5000);
  }
}

/* Two new tokens of s, each a step of its own from threads t1 and t2: t1's
 * (at `at`) handed to the worker (s busy), then t2's (at + 1) queued behind
 * it. */
static void busy_then_queued(int port, sh_client_t *c, seq_t *s, tu_rng_t *rng,
                             int64_t at, bg_t *t1, bg_t *t2) {
  seq_gen(s, rng, 2);
  bg_step(t1, port, s, at);
  wait_info(c, s, "busy", 1);
  bg_step(t2, port, s, at + 1);
  wait_info(c, s, "queued", 1);
}

/* The reply of a step in a thread: 200 with the length `len`. */
static void bg_step_done(bg_t *b, seq_t *s, int64_t len) {
  bg_join(b);
  step_rec_t rec;
  char why[512];
  ck_assert_msg(step_parse(s->sh, &b->r, 1, NULL, &rec, why, sizeof why) == 0,
                "%s", why);
  ck_assert_int_eq(rec.len, len);
  seq_record(s, &rec);
  sh_resp_free(&b->r);
}

START_TEST(test_busy) {
  ck_assert_msg(demo_page > 0, "the demo layer's page size was not measured");
  char cap[32];
  snprintf(cap, sizeof cap, "%lld",
           (long long)(SESSION_COST + demo_page + 512));
  const char *args[] = {"--layers",
                        layer_arg,
                        "--kv-cache-bytes",
                        cap,
                        "--max-memory-bytes",
                        "536870912",
                        "--workers",
                        "1",
                        "--threads-per-request",
                        "1",
                        "--inline-max-flops",
                        "0",
                        NULL};
  sh_server_t srv;
  sh_client_t c;
  tu_rng_t rng;
  open_server(&srv, args, &c, &rng, 51);
  seq_t a;
  demo_session(&c, &a, &rng, 3);

  /* the worker busy; a step of a handed to it (a busy), one more queued */
  bg_t slow, t1, t2;
  bg_slow(&slow, srv.port);
  busy_then_queued(srv.port, &c, &a, &rng, 3, &t1, &t2);

  call_id_refused(&c, "POST", a.id, "/truncate", "{\"length\":1}", 409,
                  "session_busy", "session", a.id, "in flight", NULL);
  json_t *in = get_info(&c, a.id);
  ck_assert_int_eq(ji(in, "length"), 3);
  ck_assert(jb(in, "busy"));
  ck_assert_int_eq(ji(in, "queued"), 1);
  ck_assert(jnum(in, "idle_s") == 0);
  json_decref(in);
  /* the pool holds a, busy: nothing can be evicted for a new session */
  char *body = create_text(SH_DEMO, NULL);
  sh_resp_t r = call(&c, "POST", "/v1/sessions", body);
  sh_assert_error(&r, 429, "overloaded", NULL, "KV cache", NULL);
  char ra[32];
  ck_assert_msg(sh_header(&r, "Retry-After", ra, sizeof ra) && atoi(ra) >= 1,
                "no Retry-After of 1 s or more");
  sh_resp_free(&r);
  /* nor forked: the step in flight writes its pages (session_busy comes
   * before the full pool's 429, test_fork_keeps_parent's) */
  call_id_refused(&c, "POST", a.id, "/fork", NULL, 409, "session_busy",
                  "session", a.id, "in flight", NULL);

  /* both steps answered in their order; the slow request too */
  bg_step_done(&t1, &a, 4);
  bg_step_done(&t2, &a, 5);
  a.n = 5;
  bg_join(&slow);
  ck_assert_msg(slow.r.status == 200, "slow: %ld", slow.r.status);
  sh_resp_free(&slow.r);
  seq_verify(&c, &a);
  in = get_info(&c, a.id);
  check_info(in, SH_DEMO, 5);
  json_decref(in);
  json_decref(seq_truncate(&c, &a, 4));
  seq_step(&c, &a, &rng, 1, NULL);
  seq_verify(&c, &a);

  /* idle now: a new session evicts it */
  char bid[40];
  json_decref(create(&c, body, bid));
  free(body);
  assert_evicted(&c, &a);
  ck_assert(ends(srv.port, "evicted") == 1);
  seq_free(&a);
  close_server(&srv, &c);
}
END_TEST

/* A server started with args, a client of it, rng seeded with `seed`, and
 * s a new session of SH_SMALL without tokens. */
static void small_session(sh_server_t *srv, const char *const *args,
                          sh_client_t *c, seq_t *s, tu_rng_t *rng,
                          uint64_t seed) {
  open_server(srv, args, c, rng, seed);
  char id[40];
  create_shape(c, SH_SMALL, NULL, id);
  seq_init(s, SH_SMALL, id);
}

/* A server of one worker that computes every request there (none
 * inline), and a SH_SMALL session of two tokens on it, stepped with rng
 * (seeded `seed`). */
static void one_worker_session(sh_server_t *srv, sh_client_t *c, seq_t *s,
                               tu_rng_t *rng, uint64_t seed) {
  const char *args[] = {"--workers",
                        "1",
                        "--threads-per-request",
                        "1",
                        "--max-memory-bytes",
                        "536870912",
                        "--inline-max-flops",
                        "0",
                        NULL};
  small_session(srv, args, c, s, rng, seed);
  seq_step(c, s, rng, 2, NULL);
}

/* The requests' memory held of the budget, less the kept scratch: what
 * the requests' shares come to. */
static double shares_held(int port) {
  return sh_metric(port, "attnd_memory_held_bytes") -
         sh_metric(port, "attnd_scratch_bytes");
}

/* The shares held once they are all given back, polled for up to 5 s:
 * a share is given back when its reply has been sent, which may be just
 * after the client has read it. */
static double shares_back(int port) {
  double left = shares_held(port);
  for (double end = sh_now() + 5; left != 0 && sh_now() < end; usleep(5000))
    left = shares_held(port);
  return left;
}

/* DELETE while a step computes and another waits its turn: the session
 * ends at once (404), the waiting step gets 404, the computing one
 * finishes with its output. */
START_TEST(test_delete_in_flight) {
  sh_server_t srv;
  sh_client_t c;
  tu_rng_t rng;
  seq_t s;
  one_worker_session(&srv, &c, &s, &rng, 56);
  const char *id = s.id;
  bg_t slow, t1, t2;
  bg_slow(&slow, srv.port);
  busy_then_queued(srv.port, &c, &s, &rng, 2, &t1, &t2);
  delete_session(&c, id);
  call_id_refused(&c, "GET", id, "", NULL, 404, "unknown_session", "session",
                  id, NULL);
  ck_assert(sh_metric(srv.port, "attnd_sessions") == 0);
  bg_join(&t2);
  sh_assert_error(&t2.r, 404, "unknown_session", "session", id,
                  "ended while this step waited", NULL);
  sh_resp_free(&t2.r);
  /* the step in flight is computed, but there is no session to commit it
   * to: not a 200 without a length */
  bg_join(&t1);
  sh_assert_error(&t1.r, 404, "unknown_session", "session", id,
                  "deleted while this step was computed", NULL);
  sh_resp_free(&t1.r);
  bg_join(&slow);
  ck_assert_int_eq(slow.r.status, 200);
  sh_resp_free(&slow.r);
  ck_assert(ends(srv.port, "deleted") == 1);
  ck_assert(kv_used(srv.port) == 0);
  /* every share of the budget back, the kept scratch apart */
  double left = shares_back(srv.port);
  ck_assert_msg(left == 0, "%.0f bytes of shares held after every reply", left);
  ck_assert(sh_metric(srv.port, "attnd_inflight") == 0);
  seq_free(&s);
  close_server(&srv, &c);
}
END_TEST

/* A request that keeps the one worker busy for a second or more (L 16384,
 * E 64, no mask; bg_slow's 8192 and 32 under ASan, which take as long),
 * its inputs from `seed`. */
static void bg_slower(bg_t *b, int port, uint64_t seed) {
  json_t *x =
      json_pack("{s:{s:s,s:b}}", "return", "encoding", "base64", "metrics", 0);
#if defined(__SANITIZE_ADDRESS__)
  bg_start(b, port, "/v1/attention", sh_slow_body(8192, 32, 8, seed, x));
#else
  bg_start(b, port, "/v1/attention", sh_slow_body(16384, 64, 8, seed, x));
#endif
  json_decref(x);
  ck_assert_msg(sh_wait_metric(port, "attnd_busy_workers", 1, 20) >= 1,
                "the slow request did not start");
}

/* Steps waiting their turn hold their decoded tensors' share of the
 * memory budget (docs/operations.md): three steps of N tokens queued
 * behind one that waits for a slow request add at least their tensors (N
 * rows of q, k and v each) to the shares held, and everything is given
 * back once all are answered (the waiting ones 404, by a DELETE). Bug: a
 * waiting step's share given back with its body and taken again only in
 * its turn, so that any number of decoded steps wait outside
 * max_memory_bytes. */
START_TEST(test_waiting_steps_hold_memory) {
  enum { N = 1024, WAITING = 3 };
  sh_server_t srv;
  sh_client_t c;
  tu_rng_t rng;
  seq_t s;
  one_worker_session(&srv, &c, &s, &rng, 57);
  const char *id = s.id;
  /* the one worker busy for a second or more; a step handed to it behind */
  bg_t slow, t1, t[WAITING];
  bg_slower(&slow, srv.port, 6);
  seq_gen(&s, &rng, 1 + WAITING * N);
  bg_step(&t1, srv.port, &s, 2);
  wait_info(&c, &s, "busy", 1);
  double before = shares_held(srv.port);
  char path[128];
  snprintf(path, sizeof path, "/v1/sessions/%s/attention", id);
  for (int k = 0; k < WAITING; k++)
    bg_start(&t[k], srv.port, path, step_text(&s, 3 + k * N, N, NULL));
  wait_info(&c, &s, "queued", WAITING);
  double waiting = shares_held(srv.port);
  const double tensors = (double)WAITING * N * (double)w_row(s.sh) * 4;
  ck_assert_msg(waiting - before >= tensors,
                "%d steps of %d tokens waiting added %.0f bytes to the "
                "shares held, under their tensors' %.0f",
                WAITING, N, waiting - before, tensors);
  delete_session(&c, id);
  for (int k = 0; k < WAITING; k++) {
    bg_join(&t[k]);
    sh_assert_error(&t[k].r, 404, "unknown_session", "session", id,
                    "ended while this step waited", NULL);
    sh_resp_free(&t[k].r);
  }
  bg_join(&t1);
  sh_resp_free(&t1.r);
  bg_join(&slow);
  ck_assert_int_eq(slow.r.status, 200);
  sh_resp_free(&slow.r);
  /* every share back once the replies are sent */
  double left = shares_back(srv.port);
  ck_assert_msg(left == 0, "%.0f bytes of shares held after every reply", left);
  seq_free(&s);
  close_server(&srv, &c);
}
END_TEST

/* A step waiting behind its session's step ahead keeps its own deadline
 * and client, as a queued request does (docs/sessions.md): with the one
 * worker busy with a slow request and the session's step ahead queued
 * behind it, a step with timeout_ms 100 gets its 504, and a step whose
 * client leaves is dropped, both while the step ahead has not yet run (the
 * session's length still the prompt's 2). Bug: both checked only in their turn,
 * once the step ahead had ended. */
START_TEST(test_waiting_step_deadline) {
  sh_server_t srv;
  sh_client_t c;
  tu_rng_t rng;
  seq_t s;
  one_worker_session(&srv, &c, &s, &rng, 58);
  bg_t slow, t1, t2;
  bg_slower(&slow, srv.port, 7);
  seq_gen(&s, &rng, 3);
  bg_step(&t1, srv.port, &s, 2);
  wait_info(&c, &s, "busy", 1);
  char path[128];
  snprintf(path, sizeof path, "/v1/sessions/%s/attention", s.id);
  bg_start(&t2, srv.port, path, step_text(&s, 3, 1, "{\"timeout_ms\":100}"));
  bg_join(&t2);
  sh_assert_error(&t2.r, 504, "deadline_exceeded", "timeout_ms", NULL);
  sh_resp_free(&t2.r);
  json_t *in = get_info(&c, s.id);
  ck_assert_msg(ji(in, "length") == 2,
                "the 504 came after the step ahead (length %lld)",
                (long long)ji(in, "length"));
  json_decref(in);

  /* a client that leaves while its step waits */
  char *body = step_text(&s, 3, 1, NULL);
  char head[256];
  int n = snprintf(head, sizeof head,
                   "POST %s HTTP/1.1\r\nHost: t\r\nContent-Type: "
                   "application/json\r\nContent-Length: %zu\r\n\r\n",
                   path, strlen(body));
  int fd = sh_connect(srv.port);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(sh_send_all(fd, head, (size_t)n), 0);
  ck_assert_int_eq(sh_send_all(fd, body, strlen(body)), 0);
  free(body);
  wait_info(&c, &s, "queued", 1);
  close(fd);
  wait_info(&c, &s, "queued", 0);
  in = get_info(&c, s.id);
  ck_assert_msg(ji(in, "length") == 2,
                "the step whose client left was dropped after the step ahead "
                "(length %lld)",
                (long long)ji(in, "length"));
  json_decref(in);

  bg_step_done(&t1, &s, 3);
  bg_join(&slow);
  ck_assert_int_eq(slow.r.status, 200);
  sh_resp_free(&slow.r);
  seq_free(&s);
  close_server(&srv, &c);
}
END_TEST

/* ---- ttl_s -------------------------------------------------------------- */

/* A server of one worker, session_ttl_s 60 and session_max_ttl_s 100, a
 * client of it and an rng seeded with `seed`. */
static void ttl_server(sh_server_t *srv, sh_client_t *c, tu_rng_t *rng,
                       uint64_t seed) {
  const char *args[] = {"--session-max-ttl-s",
                        "100",
                        "--session-ttl-s",
                        "60",
                        "--workers",
                        "1",
                        NULL};
  open_server(srv, args, c, rng, seed);
}

START_TEST(test_ttl) {
  sh_server_t srv;
  sh_client_t c;
  tu_rng_t rng;
  ttl_server(&srv, &c, &rng, 61);
  char ida[40], idb[40], idc[40], idd[40];
  char *b1 = create_text(SH_SMALL, "{\"ttl_s\":1}"),
       *b2 = create_text(SH_SMALL, "{\"ttl_s\":2}"),
       *b0 = create_text(SH_SMALL, NULL);
  json_t *in = create(&c, b1, ida);
  ck_assert_int_eq(ji(in, "ttl_s"), 1);
  ck_assert(jnum(in, "expires_in_s") <= 1 && jnum(in, "expires_in_s") >= 0);
  json_decref(in);
  in = create(&c, b0, idb);
  ck_assert_int_eq(ji(in, "ttl_s"), 60); /* session_ttl_s */
  json_decref(in);
  json_decref(create(&c, b2, idc));
  json_decref(create(&c, b1, idd));
  char idf[40];
  in = fork_session(&c, idd, idf);
  ck_assert_int_eq(ji(in, "ttl_s"), 1); /* a fork keeps its parent's */
  json_decref(in);
  free(b1), free(b2), free(b0);

  /* c is used every 0.25 s, for longer than its ttl_s of 2; the others not
   * at all (GET is no use). c's ttl_s is 2, not 1, so that a loaded machine
   * that stalls this loop (or the server) for 0.75 s does not expire it:
   * it takes 1.75 s now */
  seq_t sc;
  seq_init(&sc, SH_SMALL, idc);
  double end = sh_now() + 2.2, last = 0;
  while (sh_now() < end) {
    last = sh_now();
    seq_step(&c, &sc, &rng, 1, NULL);
    usleep(250000);
  }
  const char *gone[] = {ida, idd, idf};
  for (int i = 0; i < 3; i++) {
    call_id_refused(&c, "GET", gone[i], "", NULL, 404, "unknown_session",
                    "session", gone[i], "ttl_s", NULL);
    call_id_refused(&c, "POST", gone[i], "/attention", "{}", 404,
                    "unknown_session", "session", gone[i], NULL);
  }
  in = get_info(&c, idb);
  ck_assert(jnum(in, "idle_s") >= 2);
  json_decref(in);
  in = get_info(&c, idc);
  /* idle since its last step at most: not since its creation (idle_s is
   * given to the millisecond, rounded) */
  double since = sh_now() - last;
  check_info(in, SH_SMALL, sc.n);
  ck_assert_msg(jnum(in, "idle_s") <= since + 0.001,
                "idle_s %.3f, %.3f s after its last step began",
                jnum(in, "idle_s"), since);
  json_decref(in);
  seq_verify(&c, &sc);
  ck_assert(ends(srv.port, "expired") == 3);
  ck_assert(ends(srv.port, "evicted") == 0);
  ck_assert(sh_metric(srv.port, "attnd_sessions") == 2);
  seq_free(&sc);
  close_server(&srv, &c);
}
END_TEST

/* /metrics alone shows a session that outlived its ttl_s as ended: with
 * no request to the sessions since, attnd_sessions, the pool's bytes and
 * attnd_session_ends_total{cause="expired"} say so within a second. */
START_TEST(test_ttl_metrics) {
  sh_server_t srv;
  sh_client_t c;
  tu_rng_t rng;
  ttl_server(&srv, &c, &rng, 67);
  char *b1 = create_text(SH_SMALL, "{\"ttl_s\":1}"),
       *b0 = create_text(SH_SMALL, NULL);
  char ida[40], idb[40];
  json_decref(create(&c, b1, ida));
  json_decref(create(&c, b0, idb));
  free(b1), free(b0);
  seq_t a;
  seq_init(&a, SH_SMALL, ida);
  seq_step(&c, &a, &rng, 3, NULL); /* a page */
  ck_assert(sh_metric(srv.port, "attnd_sessions") == 2);
  ck_assert(kv_used(srv.port) > 2 * SESSION_COST);
  /* its expiry counted, then the gauges: waited for, not slept on (a
   * fixed 2.2 s cost every run and could be too short on a loaded CPU) */
  ck_assert_msg(sh_wait_metric(srv.port,
                               "attnd_session_ends_total{cause=\"expired\"}", 1,
                               20) == 1,
                "no expiry counted 20 s after a ttl_s of 1");
  ck_assert_msg(sh_metric(srv.port, "attnd_sessions") == 1,
                "attnd_sessions %g, after a ttl_s of 1 expired",
                sh_metric(srv.port, "attnd_sessions"));
  ck_assert_msg(kv_used(srv.port) == SESSION_COST,
                "kv bytes used %g, for one empty session", kv_used(srv.port));
  ck_assert(ends(srv.port, "expired") == 1);
  call_id_refused(&c, "GET", ida, "", NULL, 404, "unknown_session", "session",
                  ida, "ttl_s", NULL);
  ck_assert(ends(srv.port, "expired") == 1); /* counted once */
  seq_free(&a);
  close_server(&srv, &c);
}
END_TEST

/* ---- /metrics ----------------------------------------------------------- */

START_TEST(test_metrics) {
  const char *args[] = {"--kv-cache-bytes",
                        "16777216",
                        "--max-memory-bytes",
                        "268435456",
                        "--workers",
                        "1",
                        NULL};
  sh_server_t srv;
  sh_client_t c;
  tu_rng_t rng;
  open_server(&srv, args, &c, &rng, 71);
  ck_assert(sh_metric(srv.port, "attnd_sessions") == 0);
  ck_assert(kv_used(srv.port) == 0);
  ck_assert(sh_metric(srv.port, "attnd_kv_bytes{state=\"free\"}") == 16777216);
  /* no cuda session here: no GPU memory held for pages */
  ck_assert(sh_metric(srv.port, "attnd_kv_device_bytes{state=\"used\"}") == 0);
  ck_assert(sh_metric(srv.port, "attnd_kv_device_bytes{state=\"kept\"}") == 0);
  char id[40];
  create_shape(&c, SH_SMALL, NULL, id);
  seq_t s;
  seq_init(&s, SH_SMALL, id);
  seq_step(&c, &s, &rng, 1, NULL);   /* ctx 1 */
  seq_step(&c, &s, &rng, 127, NULL); /* ctx 128 */
  seq_step(&c, &s, &rng, 1, NULL);   /* ctx 129 */
  seq_verify(&c, &s);                /* a v1 request */
  const char *p = "attnd_requests_total{protocol=\"session\",";
  char sample[160];
  static const struct {
    const char *status;
    double n;
  } want[] = {{"201", 1}, {"200", 3}, {"404", 0}, {"204", 0}};
  for (int i = 0; i < 4; i++) {
    snprintf(sample, sizeof sample, "%sstatus=\"%s\"}", p, want[i].status);
    ck_assert_msg(sh_metric(srv.port, sample) == want[i].n, "%s is %g, not %g",
                  sample, sh_metric(srv.port, sample), want[i].n);
  }
  ck_assert(sh_metric(srv.port, "attnd_requests_total{protocol=\"v1\","
                                "status=\"200\"}") == 1);
  static const char *const hist[] = {"attnd_request_seconds",
                                     "attnd_compute_seconds",
                                     "attnd_queue_wait_seconds"};
  for (int i = 0; i < 3; i++) {
    snprintf(sample, sizeof sample,
             "%s_count{protocol=\"session\",ctx=\"128\"}", hist[i]);
    ck_assert_msg(sh_metric(srv.port, sample) == 2, "%s", sample);
    snprintf(sample, sizeof sample,
             "%s_count{protocol=\"session\",ctx=\"512\"}", hist[i]);
    ck_assert_msg(sh_metric(srv.port, sample) == 1, "%s", sample);
  }
  /* the pool: three pages of one session, and its cost */
  json_t *in = get_info(&c, id);
  int64_t bytes = ji(in, "bytes");
  ck_assert_int_eq(ji(in, "pages"), 3);
  json_decref(in);
  double used = kv_used(srv.port);
  ck_assert_msg(used == (double)bytes, "kv used %g for a session of %lld bytes",
                used, (long long)bytes);
  ck_assert(used + sh_metric(srv.port, "attnd_kv_bytes{state=\"free\"}") ==
            16777216);
  ck_assert(sh_metric(srv.port, "attnd_sessions") == 1);
  sh_resp_t r =
      call_id(&c, "GET", "0123456789abcdef0123456789abcdef", "", NULL);
  ck_assert_int_eq(r.status, 404);
  sh_resp_free(&r);
  delete_session(&c, id);
  snprintf(sample, sizeof sample, "%sstatus=\"404\"}", p);
  ck_assert(sh_metric(srv.port, sample) == 1);
  snprintf(sample, sizeof sample, "%sstatus=\"204\"}", p);
  ck_assert(sh_metric(srv.port, sample) == 1);
  snprintf(sample, sizeof sample, "%sstatus=\"200\"}", p);
  ck_assert(sh_metric(srv.port, sample) == 4); /* and the GET */
  ck_assert(sh_metric(srv.port, "attnd_sessions") == 0);
  ck_assert(kv_used(srv.port) == 0);
  ck_assert(ends(srv.port, "deleted") == 1);
  seq_free(&s);
  close_server(&srv, &c);
}
END_TEST

/* ---- drain -------------------------------------------------------------- */

START_TEST(test_drain) {
  const char *args[] = {"--workers",
                        "1",
                        "--threads-per-request",
                        "1",
                        "--max-memory-bytes",
                        "536870912",
                        "--inline-max-flops",
                        "0",
                        NULL};
  sh_server_t srv;
  sh_client_t c;
  tu_rng_t rng;
  open_server(&srv, args, &c, &rng, 81);
  char id[40], *body = create_text(SH_GQA, NULL);
  json_decref(create(&c, body, id));
  seq_t s;
  seq_init(&s, SH_GQA, id);
  seq_step(&c, &s, &rng, 2, NULL);
  /* a step handed to the busy worker, one waiting its turn on the session */
  bg_t slow, t1, t2;
  bg_slow(&slow, srv.port);
  busy_then_queued(srv.port, &c, &s, &rng, 2, &t1, &t2);
  ck_assert_int_eq(kill(srv.pid, SIGTERM), 0);
  sh_wait_log(&srv, "\"event\":\"draining\"");
  /* new work is refused while the accepted finishes */
  sh_client_t c2;
  sh_client_init(&c2, srv.port);
  call_refused(&c2, "POST", "/v1/sessions", body, 503, "draining", NULL, NULL);
  free(body);
  sh_client_free(&c2);
  bg_step_done(&t1, &s, 3);
  bg_step_done(&t2, &s, 4);
  s.n = 4;
  bg_join(&slow);
  ck_assert_int_eq(slow.r.status, 200);
  sh_resp_free(&slow.r);
  int st = sh_server_wait(&srv, 30);
  ck_assert_msg(st == 0, "exit status %d after SIGTERM:\n%s", st,
                log_tail(&srv));
  seq_verify(NULL, &s); /* the server is gone: the reference */
  seq_free(&s);
  sh_client_free(&c);
}
END_TEST

/* ---- hostile inputs ----------------------------------------------------- */

/* Sessions of the errors TCase: A pre-projected (H 2, Hkv 1, Dh 4, Dv 4:
 * query 8 wide, key and value 4; max_tokens 8), L of the llama layer (E
 * 32), Z pre-projected with 3 tokens. */
#define Q1 "[[1,2,3,4,5,6,7,8]]"
#define K1 "[[1,0,0,1]]"
#define V1 "[[1,2,3,4]]"
#define R8 "[1,2,3,4,5,6,7,8]"
#define R4 "[1,0,0,1]"
#define Q9 "[" R8 "," R8 "," R8 "," R8 "," R8 "," R8 "," R8 "," R8 "," R8 "]"
#define K9 "[" R4 "," R4 "," R4 "," R4 "," R4 "," R4 "," R4 "," R4 "," R4 "]"
#define STEP1 "\"query\":" Q1 ",\"key\":" K1 ",\"value\":" V1
#define X32                                                                    \
  "[[1,2,3,4,5,6,7,8,1,2,3,4,5,6,7,8,1,2,3,4,5,6,7,8,1,2,3,4,5,6,7,8]]"
#define PRE "\"num_heads\":2,\"head_dim\":4"

static const struct {
  char who;        /* 0: POST /v1/sessions; 'A', 'L', 'Z': that session */
  const char *sub; /* "/attention", "/truncate", "/fork" */
  const char *body;
  long status;
  const char *code, *field, *words[2];
} bad[] = {
    /* create */
    {0,
     0,
     "{\"layer\":\"nope\"}",
     404,
     "unknown_layer",
     "layer",
     {"'nope' is not loaded", "GET /v1/layers"}},
    {0, 0, "{\"layer\":7}", 422, "invalid_type", "layer", {"name of a layer"}},
    {0,
     0,
     "{\"num_heads\":2}",
     422,
     "missing_field",
     "head_dim",
     {"head_dim is required"}},
    {0,
     0,
     "{" PRE ",\"backend\":\"gpu\"}",
     422,
     "invalid_value",
     "backend",
     {"backend is \"gpu\"", "\"cpu\", \"cuda\""}},
    {0,
     0,
     "{" PRE ",\"backend\":1}",
     422,
     "invalid_type",
     "backend",
     {"backend is a number", "\"cpu\", \"cuda\""}},
    /* a step names its session's backend or none (A is a cpu session) */
    {'A',
     "/attention",
     "{" STEP1 ",\"backend\":\"cuda\"}",
     422,
     "invalid_value",
     "backend",
     {"backend is \"cuda\"", "pages live on the cpu backend"}},
    {'A',
     "/attention",
     "{" STEP1 ",\"backend\":\"tpu\"}",
     422,
     "invalid_value",
     "backend",
     {"backend is \"tpu\"", "\"cpu\", \"cuda\""}},
    {'A',
     "/attention",
     "{" STEP1 ",\"backend\":\"cpu\",\"precision\":\"bf16\"}",
     422,
     "invalid_value",
     "precision",
     {"bf16", "cuda"}},
    {0,
     0,
     "{\"head_dim\":4}",
     422,
     "missing_field",
     "num_heads",
     {"num_heads is required", "or a layer"}},
    {0, 0, "{}", 422, "missing_field", "num_heads", {"num_heads is required"}},
    {0, 0, "", 422, "missing_field", "num_heads", {"num_heads is required"}},
    {0,
     0,
     "{\"layer\":null,\"num_heads\":2}",
     422,
     "missing_field",
     "head_dim",
     {"head_dim is required"}},
    {0,
     0,
     "{\"num_heads\":4,\"num_kv_heads\":3,\"head_dim\":4}",
     422,
     "heads_mismatch",
     "num_kv_heads",
     {"num_kv_heads 3 does not divide num_heads 4"}},
    {0,
     0,
     "{" PRE ",\"num_kv_heads\":4}",
     422,
     "invalid_value",
     "num_kv_heads",
     {"num_kv_heads is 4", "1 to 2"}},
    {0,
     0,
     "{\"num_heads\":0,\"head_dim\":4}",
     422,
     "invalid_value",
     "num_heads",
     {"num_heads is 0", "1 to 8"}},
    {0,
     0,
     "{\"num_heads\":9,\"head_dim\":4}",
     422,
     "invalid_value",
     "num_heads",
     {"num_heads is 9", "1 to 8"}},
    {0,
     0,
     "{\"num_heads\":\"2\",\"head_dim\":4}",
     422,
     "invalid_type",
     "num_heads",
     {"num_heads is a string", "expected an integer"}},
    {0,
     0,
     "{\"num_heads\":2,\"head_dim\":0}",
     422,
     "invalid_value",
     "head_dim",
     {"head_dim is 0", "1 to 4096"}},
    {0,
     0,
     "{\"num_heads\":2,\"head_dim\":4097}",
     422,
     "invalid_value",
     "head_dim",
     {"head_dim is 4097"}},
    {0,
     0,
     "{" PRE ",\"v_head_dim\":0}",
     422,
     "invalid_value",
     "v_head_dim",
     {"v_head_dim is 0"}},
    {0,
     0,
     "{" PRE ",\"ttl_s\":101}",
     422,
     "invalid_value",
     "ttl_s",
     {"ttl_s is 101", "1 to 100"}},
    {0,
     0,
     "{" PRE ",\"ttl_s\":0}",
     422,
     "invalid_value",
     "ttl_s",
     {"ttl_s is 0"}},
    {0,
     0,
     "{" PRE ",\"ttl_s\":1.5}",
     422,
     "invalid_type",
     "ttl_s",
     {"ttl_s is a fractional number", "expected an integer"}},
    {0,
     0,
     "{" PRE ",\"max_tokens\":513}",
     422,
     "invalid_value",
     "max_tokens",
     {"max_tokens is 513", "1 to 512"}},
    {0,
     0,
     "{" PRE ",\"max_tokens\":0}",
     422,
     "invalid_value",
     "max_tokens",
     {"max_tokens is 0"}},
    {0,
     0,
     "{" PRE ",\"bogus\":1}",
     422,
     "unknown_field",
     "bogus",
     {"bogus is not a known member",
      "(known: layer, num_heads, num_kv_heads, head_dim, v_head_dim, rope, "
      "max_tokens, ttl_s, backend)"}},
    {0,
     0,
     "{" PRE ",\"query\":" Q1 "}",
     422,
     "unknown_field",
     "query",
     {"query is not a known member", "known: layer,"}},
    {0,
     0,
     "{\"layer\":\"" LLAMA "\",\"num_heads\":4}",
     422,
     "invalid_value",
     "num_heads",
     {"cannot be given with layer", LLAMA}},
    {0,
     0,
     "{\"layer\":\"" LLAMA "\",\"rope\":{}}",
     422,
     "invalid_value",
     "rope",
     {"cannot be given with layer"}},
    {0,
     0,
     "{" PRE ",\"rope\":\"half\"}",
     422,
     "invalid_type",
     "rope",
     {"rope must be an object"}},
    {0,
     0,
     "{" PRE ",\"rope\":{\"style\":\"x\"}}",
     422,
     "invalid_value",
     "rope.style",
     {"rope.style is \"x\"", "\"half\", \"interleaved\""}},
    {0,
     0,
     "{" PRE ",\"rope\":{\"theta\":-1}}",
     422,
     "invalid_value",
     "rope.theta",
     {"above 0"}},
    {0,
     0,
     "{" PRE ",\"rope\":{\"dims\":3}}",
     422,
     "invalid_value",
     "rope.dims",
     {"rope.dims is 3", "even"}},
    {0, 0, "[]", 422, "invalid_type", NULL, {"not an object"}},
    /* JSON texts that are scalars are JSON (RFC 8259 2), of the wrong type:
     * 422 as /v1 answers them (once 400 invalid_json, "'[' or '{'
     * expected") */
    {0, 0, "1", 422, "invalid_type", NULL, {"a number", "not an object"}},
    {0, 0, "null", 422, "invalid_type", NULL, {"null", "not an object"}},
    {0, 0, "{\"num_heads\":2,", 400, "invalid_json", NULL, {"invalid JSON"}},
    {0,
     0,
     "{\"num_heads\":2,\"num_heads\":3,\"head_dim\":4}",
     400,
     "invalid_json",
     NULL,
     {"duplicate"}},
    /* steps, pre-projected */
    {'A',
     "/attention",
     "{\"query\":" Q1 ",\"value\":" V1 "}",
     422,
     "missing_field",
     "key",
     {"key is required", "without a layer"}},
    {'A',
     "/attention",
     "{\"query\":" Q1 ",\"key\":" K1 "}",
     422,
     "missing_field",
     "value",
     {"value is required"}},
    {'A',
     "/attention",
     "{\"key\":" K1 ",\"value\":" V1 "}",
     422,
     "missing_field",
     "query",
     {"query is required"}},
    {'A',
     "/attention",
     "{\"query\":[[1,2,3,4,5,6,7]],\"key\":" K1 ",\"value\":" V1 "}",
     422,
     "shape_mismatch",
     "query",
     {"query [1, 7]", "8]"}},
    {'A',
     "/attention",
     "{\"query\":" Q1 ",\"key\":[[1,0,0,1,0]],\"value\":" V1 "}",
     422,
     "shape_mismatch",
     "key",
     {"key [1, 5]", "4]"}},
    {'A',
     "/attention",
     "{\"query\":" Q1 ",\"key\":[[1,0,0,1],[0,1,1,0]],\"value\":" V1 "}",
     422,
     "shape_mismatch",
     "key",
     {"key [2, 4]", "the query's rows"}},
    {'A',
     "/attention",
     "{\"query\":" Q1 ",\"key\":" K1 ",\"value\":[[1,2,3]]}",
     422,
     "shape_mismatch",
     "value",
     {"value [1, 3]", "4]"}},
    {'A',
     "/attention",
     "{\"query\":[" Q1 "],\"key\":[" K1 "],\"value\":[" V1 "]}",
     422,
     "shape_mismatch",
     "query",
     {"query [1, 1, 8]"}},
    {'A',
     "/attention",
     "{" STEP1 ",\"mask\":{\"causal\":false}}",
     422,
     "unknown_field",
     "mask.causal",
     {"window, alibi"}},
    {'A',
     "/attention",
     "{" STEP1 ",\"mask\":{\"key_lengths\":[1]}}",
     422,
     "unknown_field",
     "mask.key_lengths",
     {"window, alibi"}},
    {'A',
     "/attention",
     "{" STEP1 ",\"positions\":{\"query\":[0]}}",
     422,
     "unknown_field",
     "positions",
     {"expected_length"}},
    {'A',
     "/attention",
     "{" STEP1 ",\"num_heads\":2}",
     422,
     "unknown_field",
     "num_heads",
     {"num_heads is not a known member"}},
    {'A',
     "/attention",
     "{" STEP1 ",\"rope\":{}}",
     422,
     "unknown_field",
     "rope",
     {"rope is not a known member"}},
    {'A',
     "/attention",
     "{" STEP1 ",\"layer\":\"" LLAMA "\"}",
     422,
     "unknown_field",
     "layer",
     {"layer is not a known member"}},
    {'A',
     "/attention",
     "{" STEP1 ",\"projections\":{}}",
     422,
     "unknown_field",
     "projections",
     {"projections is not a known member"}},
    {'A',
     "/attention",
     "{" STEP1 ",\"bogus\":1}",
     422,
     "unknown_field",
     "bogus",
     {"bogus is not a known member"}},
    {'A',
     "/attention",
     "{" STEP1 ",\"expected_length\":-1}",
     422,
     "invalid_value",
     "expected_length",
     {"expected_length"}},
    {'A',
     "/attention",
     "{" STEP1 ",\"expected_length\":\"0\"}",
     422,
     "invalid_type",
     "expected_length",
     {"expected_length"}},
    {'A',
     "/attention",
     "{" STEP1 ",\"timeout_ms\":0}",
     422,
     "invalid_value",
     "timeout_ms",
     {"timeout_ms"}},
    {'A',
     "/attention",
     "{" STEP1 ",\"timeout_ms\":600001}",
     422,
     "limit_exceeded",
     "timeout_ms",
     {"timeout_ms 600001 is over max_timeout_ms 600000"}},
    {'A',
     "/attention",
     "{\"query\":" Q9 ",\"key\":" K9 ",\"value\":" K9 "}",
     422,
     "limit_exceeded",
     "query",
     {"9 new tokens", "max_tokens 8"}},
    {'A',
     "/attention",
     "{" STEP1 ",\"expected_length\":5}",
     409,
     "length_mismatch",
     "expected_length",
     {"expected_length is 5", "holds 0 tokens"}},
    {'A',
     "/attention",
     "{\"query\":[[1,2,3,4,5,6,7,NaN]]}",
     400,
     "invalid_json",
     NULL,
     {"invalid JSON"}},
    {'A', "/attention", "[" Q1 "]", 422, "invalid_type", NULL, {"object"}},
    /* steps of a layer's session */
    {'L',
     "/attention",
     "{\"query\":" X32 ",\"key\":" X32 "}",
     422,
     "invalid_value",
     "key",
     {"key cannot be given", LLAMA}},
    {'L',
     "/attention",
     "{\"query\":" X32 ",\"value\":" X32 "}",
     422,
     "invalid_value",
     "value",
     {"value cannot be given", LLAMA}},
    {'L',
     "/attention",
     "{\"query\":" Q1 "}",
     422,
     "shape_mismatch",
     "query",
     {"query [1, 8]", "32]"}},
    {'L',
     "/attention",
     "{}",
     422,
     "missing_field",
     "query",
     {"query is required"}},
    /* truncate (Z holds 3 tokens) */
    {'Z',
     "/truncate",
     "{\"length\":-1}",
     422,
     "invalid_value",
     "length",
     {"length is -1", "expected 0 to"}},
    {'Z',
     "/truncate",
     "{\"length\":4}",
     422,
     "invalid_value",
     "length",
     {"length is 4", "holds 3 tokens"}},
    {'Z',
     "/truncate",
     "{\"length\":9223372036854775807}",
     422,
     "invalid_value",
     "length",
     {"length is 9223372036854775807", "holds 3"}},
    {'Z',
     "/truncate",
     "{\"length\":-9223372036854775808}",
     422,
     "invalid_value",
     "length",
     {"length is -9223372036854775808"}},
    {'Z',
     "/truncate",
     "{\"length\":99999999999999999999}",
     422,
     "invalid_value",
     "length",
     {"length is 1e+20", "expected 0 to 9223372036854775807"}},
    {'Z',
     "/truncate",
     "{\"length\":\"2\"}",
     422,
     "invalid_type",
     "length",
     {"length is a string", "expected an integer"}},
    {'Z',
     "/truncate",
     "{\"length\":1.5}",
     422,
     "invalid_type",
     "length",
     {"length is a fractional number", "expected an integer"}},
    {'Z',
     "/truncate",
     "{}",
     422,
     "missing_field",
     "length",
     {"length is required"}},
    {'Z',
     "/truncate",
     "",
     422,
     "missing_field",
     "length",
     {"length is required"}},
    {'Z',
     "/truncate",
     "{\"length\":null}",
     422,
     "missing_field",
     "length",
     {"length is required"}},
    {'Z',
     "/truncate",
     "{\"length\":1,\"keep\":2}",
     422,
     "unknown_field",
     "keep",
     {"keep is not a known member (known: length)"}},
    {'Z', "/truncate", "[1]", 422, "invalid_type", NULL, {"not an object"}},
    {'Z', "/truncate", "7", 422, "invalid_type", NULL, {"a number"}},
    {'Z', "/fork", "\"x\"", 422, "invalid_type", NULL, {"a string"}},
    {'Z',
     "/truncate",
     "{\"length\":",
     400,
     "invalid_json",
     NULL,
     {"invalid JSON"}},
    /* numbers past int64 or a double, read as numbers as /v1 reads them:
     * their member's range refuses them, not the JSON parser */
    {0,
     0,
     "{" PRE ",\"max_tokens\":9223372036854775808}",
     422,
     "invalid_value",
     "max_tokens",
     {"max_tokens is 9.22337204e+18", "expected 1 to"}},
    {0,
     0,
     "{" PRE ",\"rope\":{\"theta\":1e400}}",
     422,
     "non_finite",
     "rope.theta",
     {"rope.theta is at least 9e+307", "not a finite number"}},
};
#define N_BAD ((int)(sizeof bad / sizeof bad[0]))

/* The errors TCase's sessions: ids[0] A, ids[1] L, ids[2] Z. */
static void error_sessions(sh_client_t *c, char ids[3][40]) {
  json_decref(create(c,
                     "{\"num_heads\":2,\"num_kv_heads\":1,\"head_dim\":4,"
                     "\"max_tokens\":8}",
                     ids[0]));
  json_decref(create(c, "{\"layer\":\"" LLAMA "\"}", ids[1]));
  json_decref(create(c, "{\"num_heads\":2,\"head_dim\":4}", ids[2]));
  const char *three = "{\"query\":[" R8 "," R8 "," R8 "],\"key\":[[1,2,3,4,5,"
                      "6,7,8],[1,2,3,4,5,6,7,8],[1,2,3,4,5,6,7,8]],\"value\":"
                      "[[1,2,3,4,5,6,7,8],[1,2,3,4,5,6,7,8],[1,2,3,4,5,6,7,"
                      "8]]}";
  sh_resp_t r = call_id(c, "POST", ids[2], "/attention", three);
  ck_assert_msg(r.status == 200, "%ld: %s", r.status, r.body);
  sh_resp_free(&r);
}

START_TEST(test_bad_requests) {
  sh_client_t c;
  sh_client_init(&c, fx.port);
  char ids[3][40];
  error_sessions(&c, ids);
  for (int i = 0; i < N_BAD; i++) {
    sh_resp_t r;
    if (bad[i].who == 0)
      r = call(&c, "POST", "/v1/sessions", bad[i].body);
    else
      r = call_id(&c, "POST",
                  ids[bad[i].who == 'A'   ? 0
                      : bad[i].who == 'L' ? 1
                                          : 2],
                  bad[i].sub, bad[i].body);
    if (bad[i].words[1])
      sh_assert_error(&r, bad[i].status, bad[i].code, bad[i].field,
                      bad[i].words[0], bad[i].words[1], NULL);
    else
      sh_assert_error(&r, bad[i].status, bad[i].code, bad[i].field,
                      bad[i].words[0], NULL);
    sh_resp_free(&r);
  }
  /* nothing was applied */
  int64_t lengths[3] = {0, 0, 3};
  for (int i = 0; i < 3; i++) {
    json_t *in = get_info(&c, ids[i]);
    ck_assert_int_eq(ji(in, "length"), lengths[i]);
    /* created without a backend: the cpu's, whatever the config's */
    ck_assert_str_eq(json_string_value(json_object_get(in, "backend")), "cpu");
    json_decref(in);
  }
  /* a step may name its session's backend */
  sh_resp_t ok = call_id(&c, "POST", ids[0], "/attention",
                         "{" STEP1 ",\"backend\":\"cpu\"}");
  ck_assert_msg(ok.status == 200, "%ld: %s", ok.status, ok.body);
  sh_resp_free(&ok);
  /* the media type, and bodies over max_body_bytes */
  sh_req_t q = {.method = "POST",
                .path = "/v1/sessions",
                .content_type = "text/plain",
                .body = "{}",
                .len = 2};
  sh_resp_t r;
  ck_assert_int_eq(sh_http(&c, &q, &r), 0);
  sh_assert_error(&r, 415, "unsupported_media_type", NULL, "text/plain", NULL);
  sh_resp_free(&r);
  char *big = malloc(70000);
  memset(big, ' ', 70000);
  big[0] = '{', big[69998] = '}', big[69999] = 0;
  call_refused(&c, "POST", "/v1/sessions", big, 413, "payload_too_large", NULL,
               "max_body_bytes", NULL);
  call_id_refused(&c, "POST", ids[0], "/attention", big, 413,
                  "payload_too_large", NULL, "max_body_bytes", NULL);
  free(big);
  sh_client_free(&c);
}
END_TEST

/* A session's control body (create, PUT, fork, truncate) is a few members
 * and no tensor data: one over ATTND_CONTROL_BODY_MAX bytes is refused
 * with 413 before it is parsed, whatever max_body_bytes is (the steps'
 * server has the default, 256 MiB), sent with a length or in chunks; one
 * of exactly that many is read. Before, jansson parsed any body up to
 * max_body_bytes, at 80 bytes of uncounted memory a byte of it. */
START_TEST(test_control_bodies_bounded) {
  sh_client_t c;
  sh_client_init(&c, fx.port);
  char id[40], path[96];
  json_decref(create(&c, "{\"num_heads\":1,\"head_dim\":2}", id));
  const size_t most = ATTND_CONTROL_BODY_MAX;
  char *body = malloc(most + 2);
  memset(body, ' ', most + 1);
  memcpy(body, "{\"length\":0", 11); /* a truncate's, padded with spaces */
  body[most] = '}';
  body[most + 1] = 0;
  static const struct {
    const char *method, *sub; /* sub NULL: POST /v1/sessions */
  } routes[] = {
      {"POST", NULL}, {"PUT", ""}, {"POST", "/fork"}, {"POST", "/truncate"}};
  for (size_t k = 0; k < sizeof routes / sizeof routes[0]; k++)
    for (int chunked = 0; chunked < 2; chunked++) {
      if (routes[k].sub)
        snprintf(path, sizeof path, "/v1/sessions/%s%s", id, routes[k].sub);
      sh_req_t q = {.method = routes[k].method,
                    .path = routes[k].sub ? path : "/v1/sessions",
                    .content_type = "application/json",
                    .body = body,
                    .len = most + 1,
                    .chunked = chunked};
      sh_resp_t r;
      ck_assert_int_eq(sh_http(&c, &q, &r), 0);
      sh_assert_error(&r, 413, "payload_too_large", NULL, "65537 bytes",
                      "over 65536, the most a session's control body may",
                      NULL);
      sh_resp_free(&r);
    }
  /* exactly the most: read, and the truncate applied */
  body[most] = ' ';
  body[most - 1] = '}';
  snprintf(path, sizeof path, "/v1/sessions/%s/truncate", id);
  sh_req_t q = {.method = "POST",
                .path = path,
                .content_type = "application/json",
                .body = body,
                .len = most};
  sh_resp_t r;
  ck_assert_int_eq(sh_http(&c, &q, &r), 0);
  json_decref(json_reply(&r, 200));
  free(body);
  sh_client_free(&c);
}
END_TEST

/* Ids no session has: well-formed, and not. */
START_TEST(test_unknown_ids) {
  sh_client_t c;
  sh_client_init(&c, fx.port);
  char ids[3][40], deleted[40], upper[40];
  error_sessions(&c, ids);
  json_decref(create(&c, "{\"num_heads\":1,\"head_dim\":2}", deleted));
  delete_session(&c, deleted);
  for (int i = 0; i < 32; i++)
    upper[i] = (char)(ids[0][i] >= 'a' ? ids[0][i] - 32 : ids[0][i]);
  upper[32] = 0;
  const char *unknown[] = {"0123456789abcdef0123456789abcdef",
                           deleted,
                           upper,
                           "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz",
                           "0123456789abcdef0123456789abcde",
                           "0123456789abcdef0123456789abcdef0",
                           "nope",
                           "-1"};
  static const struct {
    const char *method, *sub, *body;
  } reqs[] = {
      {"GET", "", NULL},       {"HEAD", "", NULL},
      {"DELETE", "", NULL},    {"POST", "/attention", "{\"query\":" Q1 "}"},
      {"POST", "/fork", NULL}, {"POST", "/truncate", "{\"length\":0}"}};
  for (size_t u = 0; u < sizeof unknown / sizeof unknown[0]; u++)
    for (size_t k = 0; k < sizeof reqs / sizeof reqs[0]; k++) {
      sh_resp_t r =
          call_id(&c, reqs[k].method, unknown[u], reqs[k].sub, reqs[k].body);
      if (strcmp(reqs[k].method, "HEAD") == 0) {
        ck_assert_int_eq(r.status, 404);
        ck_assert_uint_eq(r.body_len, 0);
      } else {
        sh_assert_error(&r, 404, "unknown_session", "session", unknown[u],
                        "does not exist", NULL);
      }
      sh_resp_free(&r);
    }
  /* a step's body id comes back with its session's 404, as with any other
   * refusal of a step */
  sh_resp_t r = call_id(&c, "POST", unknown[0], "/attention",
                        "{\"id\":\"s1\",\"query\":" Q1 "}");
  sh_assert_error(&r, 404, "unknown_session", "session", "does not exist",
                  NULL);
  json_t *ev = sh_json(&r);
  ck_assert_msg(
      ev && json_is_string(json_object_get(ev, "id")) &&
          strcmp(json_string_value(json_object_get(ev, "id")), "s1") == 0,
      "no id \"s1\": %s", r.body);
  json_decref(ev);
  sh_resp_free(&r);
  /* not a session's path at all */
  char longid[100];
  memset(longid, 'a', 80);
  longid[80] = 0;
  const char *paths[] = {"/v1/sessions/", "/v1/sessions//attention",
                         "/v1/sessionsx"};
  for (int i = 0; i < 3; i++) {
    call_refused(&c, "GET", paths[i], NULL, 404, "not_found", NULL,
                 "no such path", NULL);
  }
  /* an id longer than any session's names none */
  call_id_refused(&c, "GET", longid, "", NULL, 404, "unknown_session",
                  "session", "does not exist", NULL);
  call_id_refused(&c, "POST", ids[0], "/nope", "{}", 404, "not_found", NULL,
                  "no such path", NULL);
  call_id_refused(&c, "GET", ids[0], "/attention/x", NULL, 404, "not_found",
                  NULL, "no such path", NULL);
  /* the sessions that do exist are untouched */
  json_t *in = get_info(&c, ids[0]);
  ck_assert_int_eq(ji(in, "length"), 0);
  json_decref(in);
  sh_client_free(&c);
}
END_TEST

/* PUT /v1/sessions/{id}: a session with the client's id (a load balancer
 * hashing on the id then routes its create as it routes its steps). */
START_TEST(test_put_ids) {
  sh_client_t c;
  sh_client_init(&c, fx.port);
  tu_rng_t rng;
  tu_rng_seed(&rng, 91);
  char id[40];
  snprintf(id, sizeof id, "%016llx%016llx",
           (unsigned long long)tu_rng_next(&rng),
           (unsigned long long)tu_rng_next(&rng));
  char *body = create_text(SH_SMALL, NULL);
  sh_resp_t r = call_id(&c, "PUT", id, "", body);
  json_t *in = json_reply(&r, 201);
  ck_assert_str_eq(json_string_value(json_object_get(in, "session")), id);
  check_info(in, SH_SMALL, 0);
  json_decref(in);
  seq_t s;
  seq_init(&s, SH_SMALL, id);
  seq_step(&c, &s, &rng, 3, NULL);
  seq_verify(&c, &s);
  /* a live id is refused, the session untouched */
  call_id_refused(&c, "PUT", id, "", body, 409, "session_exists", "session", id,
                  "exists", NULL);
  in = get_info(&c, id);
  check_info(in, SH_SMALL, 3);
  json_decref(in);
  /* a fork's id begins with its parent's first 16 digits */
  r = call_id(&c, "POST", id, "/fork", NULL);
  in = json_reply(&r, 201);
  const char *child = json_string_value(json_object_get(in, "session"));
  ck_assert_msg(child && strlen(child) == 32 && strncmp(child, id, 16) == 0 &&
                    strcmp(child, id) != 0,
                "fork of %s is %s", id, child ? child : "null");
  json_decref(in);
  /* deleted, the id may be created again */
  delete_session(&c, id);
  r = call_id(&c, "PUT", id, "", body);
  in = json_reply(&r, 201);
  check_info(in, SH_SMALL, 0);
  json_decref(in);
  /* ids that are not 32 lowercase hex digits, and a bad body */
  char upper[40];
  for (int i = 0; i < 33; i++)
    upper[i] = (char)(id[i] >= 'a' ? id[i] - 32 : id[i]);
  const char *ill[] = {upper, "0123456789abcdef0123456789abcde",
                       "0123456789abcdef0123456789abcdef0",
                       "0123456789abcdef0123456789abcdeg", "x"};
  for (int i = 0; i < 5; i++) {
    call_id_refused(&c, "PUT", ill[i], "", body, 422, "invalid_value",
                    "session", "32 hex digits", NULL);
  }
  call_id_refused(&c, "PUT", "00000000000000000000000000000001", "",
                  "{\"num_heads\":2}", 422, "missing_field", "head_dim",
                  "head_dim", NULL);
  call_id_refused(&c, "GET", "00000000000000000000000000000001", "", NULL, 404,
                  "unknown_session", "session", "does not exist", NULL);
  free(body);
  seq_free(&s);
  sh_client_free(&c);
}
END_TEST

START_TEST(test_methods) {
  sh_client_t c;
  sh_client_init(&c, fx.port);
  char ids[3][40];
  error_sessions(&c, ids);
  char one[80], step[96], fork[96], trunc[96];
  snprintf(one, sizeof one, "/v1/sessions/%s", ids[2]);
  snprintf(step, sizeof step, "%s/attention", one);
  snprintf(fork, sizeof fork, "%s/fork", one);
  snprintf(trunc, sizeof trunc, "%s/truncate", one);
  const struct {
    const char *method, *path, *allow;
  } reqs[] = {{"PUT", "/v1/sessions", "GET, HEAD, POST"},
              {"DELETE", "/v1/sessions", "GET, HEAD, POST"},
              {"POST", one, "GET, HEAD, PUT, DELETE"},
              {"GET", step, "POST"},
              {"DELETE", step, "POST"},
              {"GET", fork, "POST"},
              {"PUT", fork, "POST"},
              {"GET", trunc, "POST"},
              {"DELETE", trunc, "POST"}};
  for (size_t i = 0; i < sizeof reqs / sizeof reqs[0]; i++) {
    sh_resp_t r = call(&c, reqs[i].method, reqs[i].path,
                       strcmp(reqs[i].method, "POST") == 0 ? "{}" : NULL);
    char words[128], allow[64];
    snprintf(words, sizeof words, "%s is not allowed on %s", reqs[i].method,
             reqs[i].path);
    sh_assert_error(&r, 405, "method_not_allowed", NULL, words, NULL);
    ck_assert_msg(sh_header(&r, "Allow", allow, sizeof allow) &&
                      strcmp(allow, reqs[i].allow) == 0,
                  "%s %s: Allow is not %s", reqs[i].method, reqs[i].path,
                  reqs[i].allow);
    sh_resp_free(&r);
  }
  /* PATCH is a method of no route: 501 (RFC 9110 9.1), not 405 */
  const char *patch[] = {"/v1/sessions", one};
  for (int i = 0; i < 2; i++) {
    call_refused(&c, "PATCH", patch[i], NULL, 501, "not_implemented", NULL,
                 "the method PATCH is not implemented", NULL);
  }
  /* HEAD is GET without the body */
  const char *heads[] = {"/v1/sessions", one};
  for (int i = 0; i < 2; i++) {
    sh_resp_t r = call(&c, "HEAD", heads[i], NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_uint_eq(r.body_len, 0);
    sh_resp_free(&r);
  }
  json_t *in = get_info(&c, ids[2]); /* none of it touched Z */
  ck_assert_int_eq(ji(in, "length"), 3);
  json_decref(in);
  sh_client_free(&c);
}
END_TEST

START_TEST(test_list_args) {
  sh_client_t c;
  sh_client_init(&c, fx.port);
  /* as sent, and as the message shows it (the query decoded): a sign or
   * space before the digits is no integer, though strtoll skips both */
  const char *limits[][2] = {
      {"0", "0"},       {"-1", "-1"},
      {"1001", "1001"}, {"abc", "abc"},
      {"1x", "1x"},     {"99999999999999999999", "99999999999999999999"},
      {"%2B5", "+5"},   {"+5", " 5"}, /* '+' is a space in a query */
      {"%205", " 5"}};
  for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++) {
    char path[96], words[64];
    snprintf(path, sizeof path, "/v1/sessions?limit=%s", limits[i][0]);
    snprintf(words, sizeof words, "limit is '%.20s'", limits[i][1]);
    call_refused(&c, "GET", path, NULL, 422, "invalid_value", "limit", words,
                 "1 to 1000", NULL);
  }
  /* past every id: an empty page */
  sh_resp_t r = call(
      &c, "GET", "/v1/sessions?after=ffffffffffffffffffffffffffffffff", NULL);
  json_t *v = json_reply(&r, 200);
  ck_assert_int_eq(json_array_size(json_object_get(v, "sessions")), 0);
  ck_assert(json_is_null(json_object_get(v, "next")));
  json_decref(v);
  sh_client_free(&c);
}
END_TEST

/* GET /v1/sessions reads its query in one walk: an argument given twice
 * (the first used to win, `limit=5&limit=abc` was 5), one with no value
 * (`?limit` was no limit, `?after=` no cursor) and one it does not take
 * (`?limt=5`, a page of 100) are refused, naming the argument; an empty
 * one between two '&' is none. Names and values are percent-decoded; a
 * malformed escape stays as sent. */
START_TEST(test_list_args_once) {
  sh_client_t c;
  sh_client_init(&c, fx.port);
  static const struct {
    const char *query;
    long status;
    const char *code, *field, *word1, *word2;
  } refused[] = {
      {"limit=5&limit=abc", 400, "bad_request", "limit", "'5'", "'abc'"},
      {"limit=5&after=a&limit=5", 400, "bad_request", "limit", "2 times", NULL},
      {"after=a&after=b", 400, "bad_request", "after", "'a'", "'b'"},
      {"%6Cimit=1&limit=2", 400, "bad_request", "limit", "'1'", "'2'"},
      {"limit", 422, "invalid_value", "limit", "no value", NULL},
      {"after=", 422, "invalid_value", "after", "no value", NULL},
      {"limit=", 422, "invalid_value", "limit", "no value", NULL},
      {"=5", 422, "unknown_field", NULL, "''", NULL},
      {"limit=1&after", 422, "invalid_value", "after", "no value", NULL},
      {"limt=5", 422, "unknown_field", "limt", "limit", "after"},
      {"limit=1&Limit=1", 422, "unknown_field", "Limit", NULL, NULL},
      {"limit=%G1", 422, "invalid_value", "limit", "'%G1'", NULL},
  };
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    char path[96];
    snprintf(path, sizeof path, "/v1/sessions?%s", refused[i].query);
    call_refused(&c, "GET", path, NULL, refused[i].status, refused[i].code,
                 refused[i].field, refused[i].word1, refused[i].word2, NULL);
  }
  /* 50 of one argument (what the harness's URL holds): one 400 that
   * counts them */
  attnd_buf_t b;
  attnd_buf_init(&b);
  attnd_buf_puts(&b, "/v1/sessions?limit=1");
  for (int i = 1; i < 50; i++)
    attnd_buf_puts(&b, "&limit=1");
  call_refused(&c, "GET", b.data, NULL, 400, "bad_request", "limit", "50 times",
               NULL);
  attnd_buf_free(&b);

  /* percent-decoded: a page of one of at least two sessions */
  char ids[2][40];
  json_decref(create(&c, "{\"num_heads\":2,\"head_dim\":4}", ids[0]));
  json_decref(create(&c, "{\"num_heads\":2,\"head_dim\":4}", ids[1]));
  static const char *const one[] = {
      "%6Cimit=1", "limit=%31", "limit=1&after=", "li%6D%69t=1", "&limit=1&&"};
  for (int i = 0; i < 5; i++) {
    char path[96];
    snprintf(path, sizeof path, "/v1/sessions?%s", one[i]);
    sh_resp_t r = call(&c, "GET", path, NULL);
    if (i == 2) { /* an empty after is refused even beside a good limit */
      sh_assert_error(&r, 422, "invalid_value", "after", NULL);
      sh_resp_free(&r);
      continue;
    }
    json_t *v = json_reply(&r, 200);
    ck_assert_msg(json_array_size(json_object_get(v, "sessions")) == 1,
                  "%s: %zu sessions", one[i],
                  json_array_size(json_object_get(v, "sessions")));
    ck_assert(json_is_string(json_object_get(v, "next")));
    json_decref(v);
  }
  for (int i = 0; i < 2; i++) {
    delete_session(&c, ids[i]);
  }
  sh_client_free(&c);
}
END_TEST

/* ---- 100 sessions × 50 steps -------------------------------------------- */

enum { MANY = 100, MANY_STEPS = 50, MANY_THREADS = 8 };

typedef struct many_arg {
  int port, t;
  seq_t *seqs;        /* MANY, their MANY_STEPS tokens generated */
  ref_result_t *refs; /* their references */
  char why[512];
  int bad;
} many_arg_t;

/* Thread t steps the sessions t, t + MANY_THREADS, ..., one token each,
 * round after round, checking each reply against the reference. */
static void *many_main(void *p) {
  many_arg_t *a = p;
  const shape_t *sh = a->seqs[0].sh;
  int64_t Eo = e_out(sh), H = sh->H;
  sh_client_t c;
  sh_client_init(&c, a->port);
  double *want = malloc((size_t)(H * MANY_STEPS) * sizeof *want);
  for (int k = 0; k < MANY_STEPS && !a->bad; k++)
    for (int i = a->t; i < MANY && !a->bad; i += MANY_THREADS) {
      seq_t *s = &a->seqs[i];
      char id[48], ex[64], path[96];
      snprintf(id, sizeof id, "s%d-%d", i, k);
      snprintf(ex, sizeof ex, "{\"id\":\"%s\"}", id);
      snprintf(path, sizeof path, "/v1/sessions/%s/attention", s->id);
      char *body = step_text(s, k, 1, ex);
      sh_resp_t r;
      step_rec_t rec;
      if (call_r(&c, "POST", path, body, &r) < 0) {
        a->bad = attnd_fail(a->why, sizeof a->why, "%s: %s", id, r.error);
      } else if (step_parse(sh, &r, 1, id, &rec, a->why, sizeof a->why) < 0) {
        a->bad = -1;
      } else {
        const ref_result_t *ref = &a->refs[i];
        for (int64_t h = 0; h < H; h++)
          memcpy(want + h * (k + 1),
                 ref->weights + (h * MANY_STEPS + k) * MANY_STEPS,
                 (size_t)(k + 1) * sizeof *want);
        double eo = tu_rel_err(rec.out.data, ref->out + k * Eo, (size_t)Eo);
        double ew = tu_rel_err(rec.w.data, want, (size_t)(H * (k + 1)));
        if (rec.len != k + 1)
          a->bad = attnd_fail(a->why, sizeof a->why, "%s: length %lld", id,
                              (long long)rec.len);
        else if (!(eo <= TOL && ew <= TOL))
          a->bad =
              attnd_fail(a->why, sizeof a->why,
                         "%s: output off by %g, weights by %g", id, eo, ew);
        sh_tensor_free(&rec.out);
        sh_tensor_free(&rec.w);
      }
      sh_resp_free(&r);
      free(body);
    }
  free(want);
  sh_client_free(&c);
  return NULL;
}

static int by_str(const void *x, const void *y) {
  return strcmp(*(const char *const *)x, *(const char *const *)y);
}

START_TEST(test_many_sessions) {
  const shape_t *sh = SH_GQA;
  const char *args[] = {"--workers", "2", "--threads-per-request", "1", NULL};
  sh_server_t srv;
  sh_client_t c;
  open_server(&srv, args, &c, NULL, 0);
  static seq_t seqs[MANY];
  static ref_result_t refs[MANY];
  static const char *sorted[MANY];
  tu_rng_t rng;
  tu_rng_seed(&rng, 91);
  char *body = create_text(sh, NULL);
  for (int i = 0; i < MANY; i++) {
    char id[40];
    json_decref(create(&c, body, id));
    seq_init(&seqs[i], sh, id);
    seq_gen(&seqs[i], &rng, MANY_STEPS);
    seqs[i].n = MANY_STEPS; /* for the reference; the server has none yet */
    recompute_ref(&seqs[i], MANY_STEPS, &refs[i]);
    sorted[i] = seqs[i].id;
  }
  free(body);
  double t0 = sh_now();
  static many_arg_t args_t[MANY_THREADS];
  pthread_t th[MANY_THREADS];
  for (int t = 0; t < MANY_THREADS; t++) {
    args_t[t] =
        (many_arg_t){.port = srv.port, .t = t, .seqs = seqs, .refs = refs};
    ck_assert_int_eq(pthread_create(&th[t], NULL, many_main, &args_t[t]), 0);
  }
  for (int t = 0; t < MANY_THREADS; t++)
    pthread_join(th[t], NULL);
  for (int t = 0; t < MANY_THREADS; t++)
    ck_assert_msg(!args_t[t].bad, "thread %d: %s", t, args_t[t].why);
  fprintf(stderr, "check_sessions: %d steps of %d sessions in %.2f s\n",
          MANY * MANY_STEPS, MANY, sh_now() - t0);

  /* every session listed once, in id order, 30 a page */
  qsort(sorted, MANY, sizeof *sorted, by_str);
  int listed = 0, pages = 0;
  char after[40] = "";
  for (;;) {
    char path[128];
    snprintf(path, sizeof path, "/v1/sessions?limit=30%s%s",
             after[0] ? "&after=" : "", after);
    sh_resp_t r = call(&c, "GET", path, NULL);
    json_t *v = json_reply(&r, 200);
    pages++;
    const json_t *list = json_object_get(v, "sessions");
    ck_assert_int_le(json_array_size(list), 30);
    for (size_t i = 0; i < json_array_size(list); i++, listed++) {
      const json_t *in = json_array_get(list, i);
      ck_assert_int_lt(listed, MANY);
      ck_assert_str_eq(json_string_value(json_object_get(in, "session")),
                       sorted[listed]);
      check_info(in, sh, MANY_STEPS);
    }
    const json_t *next = json_object_get(v, "next");
    if (json_is_null(next)) {
      json_decref(v);
      break;
    }
    ck_assert_str_eq(json_string_value(next), sorted[listed - 1]);
    snprintf(after, sizeof after, "%s", json_string_value(next));
    json_decref(v);
  }
  ck_assert_int_eq(listed, MANY);
  ck_assert_int_eq(pages, 4);
  ck_assert(sh_metric(srv.port, "attnd_sessions") == MANY);
  ck_assert(sh_metric(srv.port, "attnd_requests_total{protocol=\"session\","
                                "status=\"201\"}") == MANY);
  ck_assert(sh_metric(srv.port, "attnd_requests_total{protocol=\"session\","
                                "status=\"200\"}") == MANY * MANY_STEPS + 4);
  for (int i = 0; i < MANY; i++) {
    delete_session(&c, seqs[i].id);
    seqs[i].n = 0;
    seq_free(&seqs[i]);
    ref_result_free(&refs[i]);
  }
  ck_assert(sh_metric(srv.port, "attnd_sessions") == 0);
  ck_assert(kv_used(srv.port) == 0);
  ck_assert(ends(srv.port, "deleted") == MANY);
  close_server(&srv, &c);
}
END_TEST

/* ---- batches of steps across sessions ------------------------------------
 *
 * Steps of one layer's sessions that are ready together are computed in
 * one forward call (run.c). Here the one worker is kept busy by a slow
 * request while the steps queue, so that it then takes them all at once. */

/* The batch steps' body: one new token, the output alone (weights or
 * per-head outputs would keep the step out of a batch). */
static char *batch_text(const seq_t *s, int64_t count) {
  return step_text(s, s->n, count,
                   "{\"return\":{\"encoding\":\"base64\",\"metrics\":true}}");
}

/* A batch step's 200 reply: its output (owned, in *out), and its length
 * and metrics.batch. */
static void batch_reply(sh_resp_t *r, const seq_t *s, int64_t count,
                        sh_tensor_t *out, int64_t *len, int64_t *batch) {
  json_t *v = json_reply(r, 200);
  char why[256];
  ck_assert_msg(
      sh_tensor_decode(json_object_get(v, "output"), out, why, sizeof why) == 0,
      "output: %s", why);
  ck_assert_int_eq(out->n, (size_t)(count * e_out(s->sh)));
  *len = ji(v, "length");
  *batch = ji(json_object_get(v, "metrics"), "batch");
  json_decref(v);
}

/* The next token of each of the n sessions sq, generated and sent in
 * threads bg while the one worker of the server at `port` computes a slow
 * request, so that they queue behind it and are taken together; returns
 * once that request is done. */
static void steps_behind_slow(int port, seq_t *sq, int n, tu_rng_t *rng,
                              bg_t *bg) {
  bg_t slow;
  bg_slow(&slow, port);
  for (int i = 0; i < n; i++) {
    seq_gen(&sq[i], rng, 1);
    char path[128];
    snprintf(path, sizeof path, "/v1/sessions/%s/attention", sq[i].id);
    bg_start(&bg[i], port, path, batch_text(&sq[i], 1));
  }
  ck_assert_msg(sh_wait_metric(port, "attnd_queue_depth", n, 10) >= n,
                "the steps did not all queue behind the slow request");
  ck_assert_msg(sh_metric(port, "attnd_busy_workers") == 1,
                "the slow request ended before the steps had queued");
  bg_join(&slow);
  sh_resp_free(&slow.r);
}

/* Sends s's rows [from, from + count) to session `id` on c: 200. */
static void replay(sh_client_t *c, const seq_t *s, const char *id, int64_t from,
                   int64_t count) {
  char *body = step_text(s, from, count, NULL);
  sh_resp_t r = call_id(c, "POST", id, "/attention", body);
  free(body);
  json_decref(json_reply(&r, 200));
}

/* Batched and alone: N sessions of the demo layer and of the llama layer,
 * of lengths around the page's edges, a fork sharing its parent's pages
 * and a truncated one, built alike on two servers, one batching (its
 * window 1 s: a batch that waited it out would show in the test's time)
 * and one not. Each session's next token is sent to both: the batching
 * one computes each layer's steps in one batch, and every output agrees
 * with the other's within 1e-6, and with /v1's recomputation. */
START_TEST(test_batched_equals_alone) {
  enum { N = 12 };
  static const int64_t lens[N] = {1,   2,   63, 64,  65, 127,
                                  129, 200, 64, 200, 5,  70};
  /* 8: a fork of 3 (64); 9: truncated to 70; 10, 11: the llama layer */
  const char *on_args[] = {"--layers",
                           layer_arg,
                           "--workers",
                           "1",
                           "--threads-per-request",
                           "1",
                           "--batch-window-us",
                           "1000000",
                           "--max-memory-bytes",
                           "536870912",
                           NULL};
  const char *off_args[] = {"--layers", layer_arg, "--batch-window-us", "0",
                            NULL};
  sh_server_t on, off;
  start(&on, on_args);
  start(&off, off_args);
  sh_client_t ca, cb;
  sh_client_init(&ca, on.port);
  sh_client_init(&cb, off.port);
  tu_rng_t rng;
  tu_rng_seed(&rng, 401);
  seq_t sq[N];
  char idb[N][40];
  for (int i = 0; i < N; i++) {
    const shape_t *sh = i >= 10 ? &shapes[1] : SH_DEMO;
    if (i == 8) { /* the fork, on both */
      char fid[40];
      json_decref(fork_session(&ca, sq[3].id, fid));
      seq_copy(&sq[i], &sq[3], fid);
      json_decref(fork_session(&cb, idb[3], idb[i]));
      continue;
    }
    char *body = create_text(sh, NULL), ida[40];
    json_decref(create(&ca, body, ida));
    json_decref(create(&cb, body, idb[i]));
    free(body);
    seq_init(&sq[i], sh, ida);
    seq_step(&ca, &sq[i], &rng, lens[i], NULL);
    replay(&cb, &sq[i], idb[i], 0, lens[i]);
  }
  for (int i = 0; i < N; i++)
    seq_verify(&ca, &sq[i]);
  json_decref(seq_truncate(&ca, &sq[9], 70)); /* 200 to 70, on both */
  sh_resp_t r = call_id(&cb, "POST", idb[9], "/truncate", "{\"length\":70}");
  json_decref(json_reply(&r, 200));

  /* the next token of each: queued behind the slow request on `on` */
  bg_t bg[N];
  steps_behind_slow(on.port, sq, N, &rng, bg);
  for (int i = 0; i < N; i++) {
    bg_join(&bg[i]);
    sh_tensor_t oa, ob;
    int64_t len, batch, lb, bb;
    batch_reply(&bg[i].r, &sq[i], 1, &oa, &len, &batch);
    ck_assert_int_eq(len, sq[i].n + 1);
    ck_assert_msg(batch == (i >= 10 ? 2 : 10),
                  "session %d's step was computed in a batch of %lld", i,
                  (long long)batch);
    char *body = batch_text(&sq[i], 1);
    sh_resp_t rb = call_id(&cb, "POST", idb[i], "/attention", body);
    free(body);
    batch_reply(&rb, &sq[i], 1, &ob, &lb, &bb);
    ck_assert_int_eq(lb, len);
    ck_assert_int_eq(bb, 1);
    double e = tu_rel_err_f(oa.data, ob.data, oa.n);
    ck_assert_msg(e == 0 &&
                      memcmp(oa.data, ob.data, oa.n * sizeof *oa.data) == 0,
                  "session %d: batched and alone differ by %g", i, e);
    /* and against /v1, the whole sequence at once */
    double *o, *w;
    recompute_v1(&ca, &sq[i], sq[i].n + 1, &o, &w);
    double ev = tu_rel_err(oa.data, o + sq[i].n * e_out(sq[i].sh),
                           (size_t)e_out(sq[i].sh));
    ck_assert_msg(ev <= TOL, "session %d: the batched step is off by %g", i,
                  ev);
    free(o), free(w);
    sh_tensor_free(&oa), sh_tensor_free(&ob);
  }
  ck_assert(sh_metric(on.port, "attnd_step_batches_total") == 2);
  ck_assert(sh_metric(on.port, "attnd_batched_steps_total") == N);
  ck_assert(sh_metric(off.port, "attnd_step_batches_total") == 0);
  for (int i = 0; i < N; i++)
    seq_free(&sq[i]);
  sh_client_free(&ca);
  sh_client_free(&cb);
  stop(&on);
  stop(&off);
}
END_TEST

/* The threads of a batch of one-token steps, with threads_per_request
 * auto: one, however many steps it holds (their work together is a
 * small fraction of a thread's worth), where a thread for each step up to
 * max_threads_per_request (2) once made a team of two wait at its
 * barriers on work of microseconds. On a machine of one CPU every request
 * gets one, and this cannot tell. */
START_TEST(test_batch_threads) {
  enum { N = 4 };
  const char *args[] = {"--layers",
                        layer_arg,
                        "--workers",
                        "1",
                        "--max-threads-per-request",
                        "2",
                        "--batch-window-us",
                        "1000000",
                        NULL};
  sh_server_t srv;
  start(&srv, args);
  sh_client_t c;
  sh_client_init(&c, srv.port);
  tu_rng_t rng;
  tu_rng_seed(&rng, 409);
  seq_t sq[N];
  for (int i = 0; i < N; i++) {
    char *body = create_text(SH_DEMO, NULL), id[40];
    json_decref(create(&c, body, id));
    free(body);
    seq_init(&sq[i], SH_DEMO, id);
    seq_step(&c, &sq[i], &rng, 16, NULL);
  }
  bg_t bg[N];
  steps_behind_slow(srv.port, sq, N, &rng, bg);
  for (int i = 0; i < N; i++) {
    bg_join(&bg[i]);
    json_t *v = json_reply(&bg[i].r, 200), *m = json_object_get(v, "metrics");
    ck_assert_msg(ji(m, "batch") == N && ji(m, "threads") == 1,
                  "step %d: a batch of %lld on %lld threads", i,
                  (long long)ji(m, "batch"), (long long)ji(m, "threads"));
    json_decref(v);
    seq_free(&sq[i]);
  }
  sh_client_free(&c);
  stop(&srv);
}
END_TEST

/* The layers, one worker of one thread, and memory for the slow request. */
static const char *const *one_worker_args(void) {
  static const char *args[] = {"--layers",
                               layer_arg,
                               "--workers",
                               "1",
                               "--threads-per-request",
                               "1",
                               "--max-memory-bytes",
                               "536870912",
                               NULL};
  return args;
}

/* N demo sessions of `len` tokens on c (seeded), for the batch tests. */
static void batch_sessions(sh_client_t *c, seq_t *sq, int n, int64_t len,
                           tu_rng_t *rng) {
  for (int i = 0; i < n; i++) {
    char id[40];
    create_shape(c, SH_DEMO, NULL, id);
    seq_init(&sq[i], SH_DEMO, id);
    seq_step(c, &sq[i], rng, len + i, NULL);
    seq_verify(c, &sq[i]);
  }
}

/* The batch's steps, queued behind the slow request on `port`: their
 * threads started, and all of them waiting. */
static void batch_queue(int port, bg_t *slow, bg_t *bg, seq_t *sq, int n,
                        tu_rng_t *rng) {
  bg_slow(slow, port);
  for (int i = 0; i < n; i++) {
    seq_gen(&sq[i], rng, 1);
    char path[128];
    snprintf(path, sizeof path, "/v1/sessions/%s/attention", sq[i].id);
    bg_start(&bg[i], port, path, batch_text(&sq[i], 1));
  }
}

/* A step whose client leaves while it waits for its batch is dropped, its
 * session as it was; the others are computed in one batch, correct. */
START_TEST(test_batch_client_leaves) {
  enum { N = 6 };
  sh_server_t srv;
  start(&srv, one_worker_args());
  sh_client_t c;
  sh_client_init(&c, srv.port);
  tu_rng_t rng;
  tu_rng_seed(&rng, 411);
  seq_t sq[N + 1];
  batch_sessions(&c, sq, N + 1, 30, &rng);
  bg_t slow, bg[N];
  batch_queue(srv.port, &slow, bg, sq, N, &rng);
  /* the leaving one, on a socket of its own */
  seq_gen(&sq[N], &rng, 1);
  char *body = batch_text(&sq[N], 1), head[256];
  int fd = sh_connect(srv.port);
  ck_assert_int_ge(fd, 0);
  int hn = snprintf(head, sizeof head,
                    "POST /v1/sessions/%s/attention HTTP/1.1\r\nHost: x\r\n"
                    "Content-Type: application/json\r\nContent-Length: "
                    "%zu\r\n\r\n",
                    sq[N].id, strlen(body));
  ck_assert_int_eq(sh_send_all(fd, head, (size_t)hn), 0);
  ck_assert_int_eq(sh_send_all(fd, body, strlen(body)), 0);
  free(body);
  ck_assert_msg(sh_wait_metric(srv.port, "attnd_queue_depth", N + 1, 10) >=
                    N + 1,
                "the steps did not all queue behind the slow request");
  close(fd);
  ck_assert_msg(sh_wait_metric(srv.port,
                               "attnd_rejections_total{reason=\"client_gone\"}",
                               1, 10) >= 1,
                "the leaving step was not dropped");
  ck_assert_msg(sh_metric(srv.port, "attnd_queue_depth") == N,
                "the slow request ended before the step left");
  bg_join(&slow);
  sh_resp_free(&slow.r);
  for (int i = 0; i < N; i++) {
    bg_join(&bg[i]);
    sh_tensor_t o;
    int64_t len, batch;
    batch_reply(&bg[i].r, &sq[i], 1, &o, &len, &batch);
    ck_assert_int_eq(batch, N);
    double *ref, *w;
    recompute_v1(&c, &sq[i], sq[i].n + 1, &ref, &w);
    double e = tu_rel_err(o.data, ref + sq[i].n * e_out(SH_DEMO),
                          (size_t)e_out(SH_DEMO));
    ck_assert_msg(e <= TOL, "step %d is off by %g", i, e);
    free(ref), free(w);
    sh_tensor_free(&o);
  }
  json_t *in = get_info(&c, sq[N].id); /* the dropped step: not applied */
  check_info(in, SH_DEMO, sq[N].n);
  json_decref(in);
  for (int i = 0; i <= N; i++)
    seq_free(&sq[i]);
  close_server(&srv, &c);
}
END_TEST

/* A step whose deadline passes while it waits in a batch's window gets
 * 504 and is not applied. Two workers, a window of 1 s: a step of 16384
 * new tokens runs on one (about a second); 200 ms later a compatible step
 * (as many tokens, within max_batch_tokens) reaches the idle one and waits
 * for company (steps arrive 200 ms apart: it would wait 400 ms) until its
 * timeout_ms of 40 passes. */
START_TEST(test_batch_deadline_in_window) {
  const char *args[] = {"--layers",
                        layer_arg,
                        "--workers",
                        "2",
                        "--threads-per-request",
                        "1",
                        "--batch-window-us",
                        "1000000",
                        "--max-batch-tokens",
                        "65536",
                        "--max-memory-bytes",
                        "1073741824",
                        "--access-log",
                        "stderr",
                        NULL};
  sh_server_t srv;
  sh_client_t c;
  tu_rng_t rng;
  open_server(&srv, args, &c, &rng, 421);
  enum { L = 16384 };
  seq_t x, y;
  char *body = create_text(SH_DEMO, NULL), id[40];
  json_decref(create(&c, body, id));
  seq_init(&x, SH_DEMO, id);
  json_decref(create(&c, body, id));
  seq_init(&y, SH_DEMO, id);
  free(body);
  seq_gen(&x, &rng, L);
  seq_gen(&y, &rng, L);
  bg_t bx;
  char path[128];
  snprintf(path, sizeof path, "/v1/sessions/%s/attention", x.id);
  bg_start(&bx, srv.port, path, batch_text(&x, L));
  ck_assert_msg(sh_wait_metric(srv.port, "attnd_busy_workers", 1, 10) >= 1,
                "the long step did not start");
  usleep(100000); /* the pace of arrivals: one in 100 ms, under half the
                     window, so the next waits for company for 200 ms; and
                     the long step still runs when the late one's 40 ms
                     have passed (with a pace of 200 ms, once in CI, it had
                     ended) */
  char *by = step_text(&y, 0, L,
                       "{\"id\":\"late-step\",\"timeout_ms\":40,"
                       "\"return\":{\"encoding\":\"base64\"}}");
  call_id_refused(&c, "POST", y.id, "/attention", by, 504, "deadline_exceeded",
                  "timeout_ms", "timeout_ms 40", NULL);
  free(by);
  int x_running = sh_metric(srv.port, "attnd_busy_workers") == 1;
  json_t *in = get_info(&c, y.id);
  check_info(in, SH_DEMO, 0);
  json_decref(in);
  bg_join(&bx);
  sh_tensor_t o;
  int64_t len, batch;
  batch_reply(&bx.r, &x, L, &o, &len, &batch);
  ck_assert_int_eq(len, L);
  ck_assert_int_eq(batch, 1);
  sh_tensor_free(&o);
  /* the wait ended with the deadline, while the other step still ran */
  ck_assert_msg(x_running, "the long step ended before the 504: it took "
                           "under the test's own time");
  /* and it was never computed: its access log line has no compute time */
  sh_server_read_log(&srv);
  const char *line = strstr(srv.log, "\"id\":\"late-step\"");
  ck_assert_msg(line, "no access log line for the late step:\n%s",
                log_tail(&srv));
  const char *eol = strchr(line, '\n'), *ms = strstr(line, "\"compute_ms\":");
  ck_assert_msg(ms && (!eol || ms < eol) &&
                    strncmp(ms, "\"compute_ms\":0.000,", 18) == 0 &&
                    strstr(line, "\"status\":504") < (eol ? eol : ms + 99),
                "the late step was computed: %.300s", line);
  seq_free(&x), seq_free(&y);
  close_server(&srv, &c);
}
END_TEST

/* A drain finishes the batch in flight: SIGTERM while N steps wait behind
 * the slow request; all N answered 200 from one batch, and exit 0. */
START_TEST(test_batch_drain) {
  enum { N = 5 };
  sh_server_t srv;
  start(&srv, one_worker_args());
  sh_client_t c;
  sh_client_init(&c, srv.port);
  tu_rng_t rng;
  tu_rng_seed(&rng, 431);
  seq_t sq[N];
  batch_sessions(&c, sq, N, 10, &rng);
  bg_t slow, bg[N];
  batch_queue(srv.port, &slow, bg, sq, N, &rng);
  ck_assert_msg(sh_wait_metric(srv.port, "attnd_queue_depth", N, 10) >= N,
                "the steps did not all queue behind the slow request");
  ck_assert_int_eq(kill(srv.pid, SIGTERM), 0);
  sh_wait_log(&srv, "\"event\":\"draining\"");
  bg_join(&slow);
  ck_assert_int_eq(slow.r.status, 200);
  sh_resp_free(&slow.r);
  for (int i = 0; i < N; i++) {
    bg_join(&bg[i]);
    sh_tensor_t o;
    int64_t len, batch;
    batch_reply(&bg[i].r, &sq[i], 1, &o, &len, &batch);
    ck_assert_int_eq(len, sq[i].n + 1);
    ck_assert_int_eq(batch, N);
    sh_tensor_free(&o);
  }
  int st = sh_server_wait(&srv, 30);
  ck_assert_msg(st == 0, "exit status %d after SIGTERM:\n%s", st,
                log_tail(&srv));
  for (int i = 0; i < N; i++)
    seq_free(&sq[i]);
  sh_client_free(&c);
}
END_TEST

/* ---- regressions -----------------------------------------------------------
 *
 * Each of these failed once (a crash or a wrong number), found by the
 * suite and fixed in server/store/session.c and session_api.c. */

/* A fork must not evict its own parent to make room for itself. With the
 * pool holding the parent alone, the fork's 4096 bytes can come only from
 * evicting it: 429 overloaded, and the parent intact. (It once freed the
 * parent, idle and the least recently used, while the fork read its
 * pages.) */
START_TEST(test_fork_keeps_parent) {
  ck_assert_msg(demo_page > 0, "the demo layer's page size was not measured");
  char cap[32];
  snprintf(cap, sizeof cap, "%lld",
           (long long)(SESSION_COST + demo_page + 1000));
  const char *args[] = {
      "--layers",  layer_arg, "--kv-cache-bytes", cap, "--max-memory-bytes",
      "268435456", NULL};
  sh_server_t srv;
  sh_client_t c;
  tu_rng_t rng;
  open_server(&srv, args, &c, &rng, 301);
  seq_t a;
  demo_session(&c, &a, &rng, 1);
  sh_resp_t r;
  char path[96];
  snprintf(path, sizeof path, "/v1/sessions/%s/fork", a.id);
  if (call_r(&c, "POST", path, NULL, &r) != 0) {
    int st = sh_server_wait(&srv, 5);
    ck_abort_msg("no reply to the fork (%s): attnd exited with %d (128 + "
                 "its signal)",
                 r.error, st);
  }
  sh_assert_error(&r, 429, "overloaded", NULL, "KV cache", NULL);
  sh_resp_free(&r);
  assert_alive(&c, &a);
  seq_step(&c, &a, &rng, 1, NULL);
  seq_verify(&c, &a);
  seq_free(&a);
  close_server(&srv, &c);
}
END_TEST

/* attnd_kv_pages_shared is "Pages held by more than one session": after
 * forking a session of 2 pages, 2 (once 4: a page counted once per
 * session that holds it). */
START_TEST(test_pages_shared_once) {
  sh_server_t srv;
  start(&srv, steps_args());
  sh_client_t c;
  sh_client_init(&c, srv.port);
  tu_rng_t rng;
  tu_rng_seed(&rng, 302);
  char id[40];
  create_shape(&c, SH_SMALL, NULL, id);
  seq_t a;
  seq_init(&a, SH_SMALL, id);
  seq_step(&c, &a, &rng, 100, NULL);
  char fid[40];
  json_t *in = fork_session(&c, id, fid);
  ck_assert_int_eq(ji(in, "shared_pages"), 2);
  json_decref(in);
  double n = sh_metric(srv.port, "attnd_kv_pages_shared");
  ck_assert_msg(n == 2, "attnd_kv_pages_shared is %g for 2 pages shared", n);
  seq_free(&a);
  close_server(&srv, &c);
}
END_TEST

/* The create body's errors inside "rope" name the member by its JSON path,
 * as /v1's do: "rope.dims" and "rope.x" (once the bare "dims" and "x"). */
START_TEST(test_rope_field_paths) {
  sh_client_t c;
  sh_client_init(&c, fx.port);
  static const struct {
    const char *body, *code, *field, *words;
  } cases[] = {
      {"{" PRE ",\"rope\":{\"dims\":6}}", "invalid_value", "rope.dims", "6"},
      {"{" PRE ",\"rope\":{\"dims\":\"a\"}}", "invalid_type", "rope.dims",
       "dims"},
      {"{" PRE ",\"rope\":{\"x\":1}}", "unknown_field", "rope.x", "x"},
      /* rope.dims defaults to head_dim, which must then be even: each step
       * of such a session was refused (once 201 here) */
      {"{\"num_heads\":2,\"head_dim\":5,\"rope\":{}}", "invalid_value",
       "rope.dims", "rope.dims is 5 (head_dim"},
      /* a member of the wrong type is invalid_type, as in /v1's rope (once
       * invalid_value, "must be a number above 0") */
      {"{" PRE ",\"rope\":{\"theta\":\"x\"}}", "invalid_type", "rope.theta",
       "rope.theta is a string"},
      {"{" PRE ",\"rope\":{\"style\":3}}", "invalid_type", "rope.style",
       "rope.style is a number"},
      {"{" PRE ",\"rope\":{\"theta\":0}}", "invalid_value", "rope.theta",
       "above 0"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    call_refused(&c, "POST", "/v1/sessions", cases[i].body, 422, cases[i].code,
                 cases[i].field, cases[i].words, NULL);
  }
  sh_client_free(&c);
}
END_TEST

/* A member that is null is absent (docs/openapi.json), with a layer too:
 * the layer's own head counts and rope given as null are no conflict
 * (once 422 "num_heads cannot be given with layer"). */
START_TEST(test_null_members_with_layer) {
  sh_client_t c;
  sh_client_init(&c, fx.port);
  char id[40];
  json_t *in = create(&c,
                      "{\"layer\":\"" LLAMA "\",\"num_heads\":null,"
                      "\"num_kv_heads\":null,\"head_dim\":null,"
                      "\"v_head_dim\":null,\"rope\":null,\"max_tokens\":null}",
                      id);
  check_info(in, SH_LLAMA, 0);
  ck_assert_int_eq(ji(in, "max_tokens"), 512); /* session_max_tokens */
  json_decref(in);
  sh_client_free(&c);
}
END_TEST

/* An integer member may be spelt as a number of integral value (2.0, 4e0),
 * as JSON Schema's "integer" (docs/openapi.json, OpenAPI 3.1) and /v1
 * take it; a fractional one stays invalid_type (test_bad_requests). Once
 * "num_heads must be an integer" at create and "length must be an
 * integer" at truncate, while a step took "expected_length": 1.0. */
START_TEST(test_integral_reals) {
  sh_client_t c;
  sh_client_init(&c, fx.port);
  char id[40];
  json_t *in = create(&c,
                      "{\"num_heads\":2.0,\"num_kv_heads\":1e0,\"head_dim\":"
                      "4.0,\"v_head_dim\":4E0,\"rope\":{\"dims\":2.0},"
                      "\"max_tokens\":8.0,\"ttl_s\":30.0}",
                      id);
  ck_assert_int_eq(ji(in, "num_heads"), 2);
  ck_assert_int_eq(ji(in, "num_kv_heads"), 1);
  ck_assert_int_eq(ji(in, "head_dim"), 4);
  ck_assert_int_eq(ji(in, "v_head_dim"), 4);
  ck_assert_int_eq(ji(json_object_get(in, "rope"), "dims"), 2);
  ck_assert_int_eq(ji(in, "max_tokens"), 8);
  ck_assert_int_eq(ji(in, "ttl_s"), 30);
  json_decref(in);
  sh_resp_t r = call_id(&c, "POST", id, "/attention",
                        "{\"query\":[[1,2,3,4,5,6,7,8],[1,2,3,4,5,6,7,8]],"
                        "\"key\":[[1,2,3,4],[1,2,3,4]],\"value\":[[1,2,3,4],"
                        "[1,2,3,4]],\"expected_length\":0.0}");
  ck_assert_msg(r.status == 200, "%ld: %s", r.status, r.body);
  sh_resp_free(&r);
  r = call_id(&c, "POST", id, "/truncate", "{\"length\":1.0}");
  in = json_reply(&r, 200);
  ck_assert_int_eq(ji(in, "length"), 1);
  json_decref(in);
  sh_client_free(&c);
}
END_TEST

/* A fork takes no members, and refuses them as every other endpoint does:
 * {"length": 1} (a client that means "fork at 1") is 422 unknown_field
 * "length", and "{" 400 invalid_json (once 201 for both, the body never
 * read). */
START_TEST(test_fork_takes_no_members) {
  sh_client_t c;
  sh_client_init(&c, fx.port);
  char ids[3][40];
  error_sessions(&c, ids);
  call_id_refused(&c, "POST", ids[2], "/fork", "{\"length\":1}", 422,
                  "unknown_field", "length",
                  "length is not a known member (known: none)", NULL);
  call_id_refused(&c, "POST", ids[2], "/fork", "{", 400, "invalid_json", NULL,
                  "invalid JSON", NULL);
  sh_client_free(&c);
}
END_TEST

/* A step refused after its turn came (here at planning: its weights, 2
 * heads × 65 keys, are over max_tensor_elements 128) is not applied, and
 * gives back the page it was given: a session of 64 tokens keeps 1 page
 * and the pool's bytes are unchanged. The same path serves every error
 * after prepare (max_response_bytes, memory, a full queue, a deadline
 * passed in the session's queue). */
START_TEST(test_refused_step_pages) {
  const char *args[] = {"--max-tensor-elements", "128", NULL};
  sh_server_t srv;
  sh_client_t c;
  tu_rng_t rng;
  open_server(&srv, args, &c, &rng, 305);
  char id[40];
  create_shape(&c, SH_SMALL, NULL, id);
  seq_t a;
  seq_init(&a, SH_SMALL, id);
  for (int i = 0; i < 64; i++) /* 1 token each: weights [2, 1, ≤ 64] */
    seq_step(&c, &a, &rng, 1, NULL);
  double used = kv_used(srv.port);
  seq_gen(&a, &rng, 1);
  char *body = step_text(&a, 64, 1, NULL);
  call_id_refused(&c, "POST", id, "/attention", body, 422, "limit_exceeded",
                  "return.weights", "max_tensor_elements 128", NULL);
  free(body);
  json_t *in = get_info(&c, id);
  check_info(in, SH_SMALL, 64);
  ck_assert_msg(ji(in, "pages") == 1, "a session of 64 tokens holds %lld pages",
                (long long)ji(in, "pages"));
  json_decref(in);
  ck_assert_msg(kv_used(srv.port) == used,
                "the refused step left %g bytes of the pool in use",
                kv_used(srv.port) - used);
  seq_free(&a);
  close_server(&srv, &c);
}
END_TEST

/* attnd_kv_bytes{state="used"} counts the 4096 bytes each session takes
 * from the pool, so that "free" is the room the pool has: 3 sessions
 * without pages use 3·4096 (once 0). */
START_TEST(test_kv_used_counts_sessions) {
  const char *args[] = {"--kv-cache-bytes", "1048576", "--max-memory-bytes",
                        "268435456", NULL};
  sh_server_t srv;
  sh_client_t c;
  open_server(&srv, args, &c, NULL, 0);
  char *body = create_text(SH_SMALL, NULL);
  for (int i = 0; i < 3; i++) {
    char id[40];
    json_decref(create(&c, body, id));
  }
  free(body);
  double used = kv_used(srv.port),
         free_b = sh_metric(srv.port, "attnd_kv_bytes{state=\"free\"}");
  ck_assert_msg(used == 3 * SESSION_COST &&
                    free_b == 1048576 - 3 * SESSION_COST,
                "3 sessions without pages: kv used %g, free %g", used, free_b);
  close_server(&srv, &c);
}
END_TEST

/* A KV cache smaller than one session's 4096 bytes holds no session: a
 * create is 422 limit_exceeded naming kv_cache_bytes, not 429 "full of
 * sessions in use (0 of 4000 bytes); retry later", which no retry meets.
 * 0 is such a cache, none: it was read as auto, a quarter of
 * max_memory_bytes, and the create succeeded. */
static const char *const below_one[] = {"4000", "0"};

START_TEST(test_cache_below_one_session) {
  const char *args[] = {"--kv-cache-bytes", below_one[_i], NULL};
  sh_server_t srv;
  sh_client_t c;
  open_server(&srv, args, &c, NULL, 0);
  sh_resp_t r = call(&c, "POST", "/v1/sessions", "{" PRE "}");
  char named[64];
  snprintf(named, sizeof named, "kv_cache_bytes %s:", below_one[_i]);
  sh_assert_error(&r, 422, "limit_exceeded", NULL, named, "4096", NULL);
  char buf[32];
  ck_assert_msg(sh_header(&r, "Retry-After", buf, sizeof buf) == NULL,
                "a create that never fits has a Retry-After");
  sh_resp_free(&r);
  ck_assert(sh_metric(srv.port, "attnd_sessions") == 0);
  close_server(&srv, &c);
}
END_TEST

/* A session past its ttl_s that a create's eviction meets before a sweep
 * (they run at most once a second) has ended after its ttl_s, as docs/
 * sessions.md says: 404 unknown_session and cause "expired", not 410
 * session_evicted and cause "evicted" (once both, about half a second
 * in each second). The sleeps order the events; no bound is asserted.
 * The cache holds 5 empty sessions (and one page of PRE's, 14912 bytes,
 * so that they may be created): a, and b with three more. */
START_TEST(test_expired_not_evicted) {
  const char *args[] = {"--kv-cache-bytes", "20480", NULL}; /* 5 sessions */
  sh_server_t srv;
  sh_client_t c;
  open_server(&srv, args, &c, NULL, 0);
  char ida[40], idb[4][40], idc[40];
  for (int i = 0; i < 4; i++) /* a sweep: the next is 1 s on */
    json_decref(create(&c, "{" PRE "}", idb[i]));
  usleep(500000);
  json_decref(create(&c, "{" PRE ",\"ttl_s\":1}", ida));
  usleep(600000);
  /* a sweep, before a expires; the others become more recently used */
  sh_resp_t r;
  for (int i = 0; i < 4; i++) {
    r = call_id(&c, "POST", idb[i], "/truncate", "{\"length\":0}");
    ck_assert_msg(r.status == 200, "%ld: %s", r.status, r.body);
    sh_resp_free(&r);
  }
  usleep(600000);
  /* a is past its ttl_s, the next sweep not due: the create needs a's room */
  json_decref(create(&c, "{" PRE "}", idc));
  call_id_refused(&c, "GET", ida, "", NULL, 404, "unknown_session", "session",
                  ida, "ttl_s", NULL);
  ck_assert(ends(srv.port, "expired") == 1);
  ck_assert(ends(srv.port, "evicted") == 0);
  for (int i = 0; i < 4; i++)
    json_decref(get_info(&c, idb[i]));
  close_server(&srv, &c);
}
END_TEST

/* An evicted id answers 410 while the store remembers it, for the last
 * 4096 evictions, as docs/sessions.md says; an older one answers 404, as
 * an id that never was. A cache of 5 empty sessions (as above): 4102
 * creates evict 4097, the first created first, so that the first is
 * forgotten and the second is not. */
START_TEST(test_evicted_remembered) {
  enum { REMEMBERED = 4096, ROOM = 5 };
  const char *args[] = {"--kv-cache-bytes", "20480", NULL};
  sh_server_t srv;
  sh_client_t c;
  open_server(&srv, args, &c, NULL, 0);
  char first[40], second[40], id[40];
  json_decref(create(&c, "{" PRE "}", first));
  json_decref(create(&c, "{" PRE "}", second));
  for (int i = 2; i < REMEMBERED + ROOM + 1; i++)
    json_decref(create(&c, "{" PRE "}", id));
  ck_assert(ends(srv.port, "evicted") == REMEMBERED + 1);
  call_id_refused(&c, "GET", second, "", NULL, 410, "session_evicted",
                  "session", second, "evicted", NULL);
  call_id_refused(&c, "GET", first, "", NULL, 404, "unknown_session", "session",
                  first, "does not exist", NULL);
  close_server(&srv, &c);
}
END_TEST

/* A refused step is no use of its session: only a step that is applied
 * (its tokens committed) refreshes the last use that ttl_s counts from,
 * so a client sending only steps that fail keeps no idle session alive.
 * Refused here in decoding (422 query), in its turn (409 length_mismatch,
 * 422 over max_tokens). Once refreshing: idle_s 0 after them, and the
 * session alive 1.2 s after its last applied step with a ttl_s of 1. The
 * sleeps are lower bounds; no upper bound is asserted. */
START_TEST(test_refused_step_not_use) {
  sh_server_t srv;
  sh_client_t c;
  open_server(&srv, NULL, &c, NULL, 0);
  char id[40];
  json_decref(create(&c,
                     "{\"num_heads\":2,\"num_kv_heads\":1,\"head_dim\":4,"
                     "\"ttl_s\":1,\"max_tokens\":1}",
                     id));
  sh_resp_t r = call_id(&c, "POST", id, "/attention",
                        "{" STEP1 ",\"expected_length\":0}");
  json_decref(json_reply(&r, 200));
  usleep(600000);
  static const struct {
    const char *body;
    long status;
    const char *code, *field;
  } refused[] = {
      {"{\"query\":[[1,2,3]],\"key\":" K1 ",\"value\":" V1 "}", 422,
       "shape_mismatch", "query"},
      {"{" STEP1 ",\"expected_length\":0}", 409, "length_mismatch",
       "expected_length"},
      {"{" STEP1 "}", 422, "limit_exceeded", "query"},
  };
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    call_id_refused(&c, "POST", id, "/attention", refused[i].body,
                    refused[i].status, refused[i].code, refused[i].field, NULL);
  }
  json_t *in = get_info(&c, id);
  ck_assert_msg(jnum(in, "idle_s") >= 0.5 && jnum(in, "expires_in_s") <= 0.5,
                "0.6 s after its last applied step, and three refused ones: "
                "idle_s %g, expires_in_s %g",
                jnum(in, "idle_s"), jnum(in, "expires_in_s"));
  ck_assert_int_eq(ji(in, "length"), 1);
  json_decref(in);
  usleep(600000);
  call_id_refused(&c, "GET", id, "", NULL, 404, "unknown_session", "session",
                  id, "ttl_s", NULL);
  ck_assert(ends(srv.port, "expired") == 1);
  close_server(&srv, &c);
}
END_TEST

/* A step that ran is a use of its session, whatever its outcome: the
 * session is busy (never swept) while the step runs, and its last use is
 * the step's end, so a step that outlasts ttl_s and then fails does not
 * leave its session expired under its client. ttl_s 1; at once after the
 * create, a step of 32768 new tokens on one thread (seconds of compute)
 * with timeout_ms 1300 ends past its deadline (504), 1.3 s or more
 * after the last use. Bug: the session ended as expired at the next lookup
 * (404), as only applied steps counted as use. The step is sent at once,
 * not after a pause: it must reach its session within ttl_s of the create,
 * after its 11 MB body has been uploaded and decoded, which on a loaded
 * machine took more than the 0.6 s a pause of 0.4 s left (404). Its
 * deadline alone puts its end past ttl_s; no upper bound is asserted (the
 * step's 504 shows that it ran past the deadline). */
START_TEST(test_failed_step_is_use) {
  const char *args[] = {"--layers",
                        layer_arg,
                        "--workers",
                        "1",
                        "--threads-per-request",
                        "1",
                        "--max-memory-bytes",
                        "1073741824",
                        NULL};
  sh_server_t srv;
  sh_client_t c;
  tu_rng_t rng;
  open_server(&srv, args, &c, &rng, 433);
  enum { L = 32768 };
  /* the step's body first: under ASan it takes longer than ttl_s */
  seq_t s;
  seq_init(&s, SH_DEMO, "");
  seq_gen(&s, &rng, L);
  char *body = step_text(&s, 0, L,
                         "{\"timeout_ms\":1300,\"return\":{\"encoding\":"
                         "\"base64\",\"metrics\":false}}");
  char id[40];
  create_shape(&c, SH_DEMO, "{\"ttl_s\":1}", id);
  call_id_refused(&c, "POST", id, "/attention", body, 504, "deadline_exceeded",
                  "timeout_ms", "deadline passed while it computed", NULL);
  free(body);
  json_t *in = get_info(&c, id);
  ck_assert_int_eq(ji(in, "length"), 0); /* not applied */
  ck_assert_msg(jnum(in, "idle_s") < 0.5,
                "idle_s %g just after a step that ran", jnum(in, "idle_s"));
  json_decref(in);
  ck_assert(ends(srv.port, "expired") == 0);
  seq_free(&s);
  close_server(&srv, &c);
}
END_TEST

/* A create whose pages could never fit the KV cache is refused at create,
 * 422 limit_exceeded, not accepted to have every step past the room
 * refused: a pre-projected session of H 2, Dh 4 has pages of 14912 bytes
 * (the core's padded layout and the pool's header), and kv_cache_bytes
 * 65536 leaves 61440 for its pages (4 of them, 256 tokens): max_tokens
 * 257 is refused naming max_tokens and the bytes, 256 fits; head_dim
 * 4096, whose one page (2 MB) never fits, is refused naming head_dim,
 * with or without max_tokens. Bug: all three created (201). */
START_TEST(test_create_never_fits) {
  const char *args[] = {"--kv-cache-bytes", "65536", NULL};
  sh_server_t srv;
  sh_client_t c;
  open_server(&srv, args, &c, NULL, 0);
  sh_resp_t r =
      call(&c, "POST", "/v1/sessions", "{" PRE ",\"max_tokens\":257}");
  sh_assert_error(&r, 422, "limit_exceeded", "max_tokens", "max_tokens 257",
                  "5 pages of 14912 bytes", "74560 bytes", "61440",
                  "kv_cache_bytes 65536", NULL);
  ck_assert_msg(sh_header(&r, "Retry-After", (char[32]){0}, 32) == NULL,
                "a create that never fits has a Retry-After");
  sh_resp_free(&r);
  char id[40];
  json_t *in = create(&c, "{" PRE ",\"max_tokens\":256}", id);
  ck_assert_int_eq(ji(in, "max_tokens"), 256);
  json_decref(in);
  const char *wide[] = {"{\"num_heads\":1,\"head_dim\":4096}",
                        "{\"num_heads\":1,\"head_dim\":4096,\"max_tokens\":1}"};
  for (int i = 0; i < 2; i++) {
    call_refused(&c, "POST", "/v1/sessions", wide[i], 422, "limit_exceeded",
                 "head_dim", "1 page of 2363456 bytes", "61440", NULL);
  }
  ck_assert(sh_metric(srv.port, "attnd_sessions") == 1);
  close_server(&srv, &c);
}
END_TEST

/* The 429 of a full queue says what was counted: requests in flight,
 * against queue_depth + workers, a session's step waiting its turn among
 * them. One worker, queue_depth 2: a slow request computing, a step of s
 * waiting for the worker, the next step of s held behind it; then a /v1
 * request is refused, and the message's counts agree with the gauges
 * (attnd_inflight 3, attnd_queue_depth 1). Bug: "the queue is full (2
 * waiting)" with one request waiting for a worker. */
START_TEST(test_queue_full_counts) {
  const char *args[] = {"--workers",
                        "1",
                        "--threads-per-request",
                        "1",
                        "--queue-depth",
                        "2",
                        "--inline-max-flops",
                        "0",
                        "--max-memory-bytes",
                        "536870912",
                        NULL};
  sh_server_t srv;
  sh_client_t c;
  tu_rng_t rng;
  seq_t s;
  small_session(&srv, args, &c, &s, &rng, 311);
  bg_t slow, t1, t2;
  bg_slower(&slow, srv.port, 9);
  busy_then_queued(srv.port, &c, &s, &rng, 0, &t1, &t2);
  ck_assert(sh_wait_metric(srv.port, "attnd_inflight", 3, 10) == 3);
  ck_assert(sh_metric(srv.port, "attnd_queue_depth") == 1);
  {
    call_refused(&c, "POST", "/v1/attention",
                 "{\"query\":[[1,2,3,4]],\"num_heads\":1}", 429, "overloaded",
                 NULL, "3 requests in flight", "queue_depth 2", "workers 1",
                 "1 waiting for a worker",
                 "1 session step waiting for its session's turn", NULL);
  }
  bg_step_done(&t1, &s, 1);
  bg_step_done(&t2, &s, 2);
  s.n = 2; /* the two tokens seq_gen made, now applied */
  bg_join(&slow);
  ck_assert_int_eq(slow.r.status, 200);
  sh_resp_free(&slow.r);
  seq_verify(&c, &s);
  seq_free(&s);
  close_server(&srv, &c);
}
END_TEST

/* The members a create's and a truncate's body may have, and a create's
 * rope's, are the properties of their schemas in docs/openapi.json, both
 * ways, and each is written in quotes in its endpoint's row of
 * docs/sessions.md's table: a new one fails, naming where it is missing. */
START_TEST(test_members_documented) {
  static const struct {
    const char *const *names;
    const char *owner, *schema, *row;
  } bodies[] = {
      {attnd__session_create_members, "attnd__session_create_members",
       "SessionCreateRequest", "| POST | `/v1/sessions` |"},
      {attnd__session_rope_members, "attnd__session_rope_members",
       "SessionRope", "| POST | `/v1/sessions` |"},
      {attnd__session_truncate_members, "attnd__session_truncate_members",
       "SessionTruncateRequest", "| POST | `/v1/sessions/{id}/truncate` |"},
  };
  char owner[96];
  for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
    snprintf(owner, sizeof owner, "server/api/session_api.c's %s",
             bodies[i].owner);
    dn_schema_is(bodies[i].schema, bodies[i].names, owner);
    dn_line_quotes("docs/sessions.md", bodies[i].row, bodies[i].names, owner);
  }
}
END_TEST

/* ---- the suite ---------------------------------------------------------- */

Suite *test_suite(void) {
  Suite *su = suite_create("sessions");
  TCase *tc = tcase_create("steps");
  tcase_add_unchecked_fixture(tc, fx_start_steps, fx_stop);
  tcase_add_checked_fixture(tc, fx_ensure, fx_release);
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, test_schedules, 0, N_SHAPES * N_SCHED);
  tcase_add_loop_test(tc, test_step_options, 0, 2 * N_OPTS);
  tcase_add_test(tc, test_step_reductions);
  tcase_add_loop_test(tc, test_expected_length, 0, 2);
  tcase_add_test(tc, test_one_session_many_threads);
  tcase_add_test(tc, test_control_bodies_bounded);
  suite_add_tcase(su, tc);

  tc = tcase_create("pool");
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, test_fork_truncate, 0, 2);
  tcase_add_test(tc, test_bytes_add_up);
  tcase_add_test(tc, test_eviction_order);
  tcase_add_test(tc, test_eviction_fork_truncate);
  tcase_add_test(tc, test_step_never_fits);
  tcase_add_test(tc, test_busy);
  tcase_add_test(tc, test_delete_in_flight);
  tcase_add_test(tc, test_waiting_steps_hold_memory);
  tcase_add_test(tc, test_waiting_step_deadline);
  tcase_add_test(tc, test_ttl);
  tcase_add_test(tc, test_ttl_metrics);
  tcase_add_test(tc, test_metrics);
  tcase_add_test(tc, test_drain);
  suite_add_tcase(su, tc);

  tc = tcase_create("batching");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_batched_equals_alone);
  tcase_add_test(tc, test_batch_threads);
  tcase_add_test(tc, test_batch_client_leaves);
  tcase_add_test(tc, test_batch_deadline_in_window);
  tcase_add_test(tc, test_batch_drain);
  suite_add_tcase(su, tc);

  tc = tcase_create("errors");
  tcase_add_unchecked_fixture(tc, fx_start_errors, fx_stop);
  tcase_add_checked_fixture(tc, fx_ensure, fx_release);
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, test_bad_requests);
  tcase_add_test(tc, test_unknown_ids);
  tcase_add_test(tc, test_methods);
  tcase_add_test(tc, test_list_args);
  tcase_add_test(tc, test_list_args_once);
  tcase_add_test(tc, test_put_ids);
  suite_add_tcase(su, tc);

  tc = tcase_create("regressions");
  tcase_add_unchecked_fixture(tc, fx_start_errors, fx_stop);
  tcase_add_checked_fixture(tc, fx_ensure, fx_release);
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, test_fork_keeps_parent);
  tcase_add_test(tc, test_pages_shared_once);
  tcase_add_test(tc, test_rope_field_paths);
  tcase_add_test(tc, test_fork_takes_no_members);
  tcase_add_test(tc, test_null_members_with_layer);
  tcase_add_test(tc, test_integral_reals);
  tcase_add_test(tc, test_refused_step_pages);
  tcase_add_test(tc, test_kv_used_counts_sessions);
  tcase_add_loop_test(tc, test_cache_below_one_session, 0,
                      sizeof below_one / sizeof below_one[0]);
  tcase_add_test(tc, test_expired_not_evicted);
  tcase_add_test(tc, test_evicted_remembered);
  tcase_add_test(tc, test_refused_step_not_use);
  tcase_add_test(tc, test_failed_step_is_use);
  tcase_add_test(tc, test_create_never_fits);
  tcase_add_test(tc, test_queue_full_counts);
  suite_add_tcase(su, tc);

  tc = tcase_create("load");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_many_sessions);
  suite_add_tcase(su, tc);
  tc = tcase_create("documented");
  tcase_add_test(tc, test_members_documented);
  suite_add_tcase(su, tc);
  return su;
}

/* Writes the two layers, and measures a demo session's page from a server
 * (test_eviction_order and test_busy size the pool by it). */
void test_setup(void) {
  sh_init();
  snprintf(layer_dir, sizeof layer_dir, "/tmp/attnd-sessions-XXXXXX");
  if (mkdtemp(layer_dir) == NULL) {
    perror("check_sessions: mkdtemp");
    exit(1);
  }
  char mha[128], llama[128], msg[512];
  snprintf(mha, sizeof mha, "%s/mha.safetensors", layer_dir);
  snprintf(llama, sizeof llama, "%s/llama.safetensors", layer_dir);
  snprintf(layer_arg, sizeof layer_arg, "%s,%s", mha, llama);
  /* the demo layer's shape (tools/demo-layer.c), weights of our own */
  lf_shape_t s1 = {.E = 64, .H = 4, .bias = LF_BIAS_ALL};
  const char *m1[] = {"num_heads",  "4",    "rope_theta", "10000",
                      "rope_style", "half", "causal",     "bottom_right",
                      NULL};
  lf_shape_t s2 = {.E = 32, .H = 4, .Hkv = 2, .bias = LF_BQ | LF_BK};
  const char *m2[] = {
      "num_heads",  "4",           "num_kv_heads", "2", "rope_theta", "500",
      "rope_style", "interleaved", "rope_dims",    "4", NULL};
  if (lf_write(mha, LF_TORCH_MHA, ATTND_ST_F32, "demo.", &s1, 1, m1, NULL, msg,
               sizeof msg) < 0 ||
      lf_write(llama, LF_LLAMA, ATTND_ST_F32, "model.layers.0.", &s2, 2, m2,
               NULL, msg, sizeof msg) < 0) {
    fprintf(stderr, "check_sessions: %s\n", msg);
    exit(1);
  }

  sh_server_t srv;
  const char *args[] = {"--layers", layer_arg, NULL};
  if (sh_server_start(&srv, args) < 0) {
    fprintf(stderr, "check_sessions: attnd did not start:\n%s\n", srv.log);
    return; /* demo_page stays 0: the tests that need it say so */
  }
  sh_client_t c;
  sh_client_init(&c, srv.port);
  sh_resp_t r;
  char path[96], step[128];
  json_t *v = NULL;
  if (call_r(&c, "POST", "/v1/sessions", "{\"layer\":\"demo\"}", &r) == 0 &&
      r.status == 201 && (v = sh_json(&r)) != NULL) {
    snprintf(path, sizeof path, "/v1/sessions/%.40s",
             json_string_value(json_object_get(v, "session")));
    json_decref(v);
    sh_resp_free(&r);
    snprintf(step, sizeof step, "%s/attention", path);
    float x[64] = {0};
    int64_t dim[2] = {1, 64};
    json_t *b =
        json_pack("{s:o}", "query", sh_floats_json(x, 2, dim, SH_NESTED));
    char *body = dump(b);
    if (call_r(&c, "POST", step, body, &r) == 0 && r.status == 200) {
      sh_resp_free(&r);
      if (call_r(&c, "GET", path, NULL, &r) == 0 && (v = sh_json(&r)) != NULL) {
        if (json_integer_value(json_object_get(v, "pages")) == 1)
          demo_page =
              json_integer_value(json_object_get(v, "bytes")) - SESSION_COST;
        json_decref(v);
      }
    }
    free(body);
  }
  sh_resp_free(&r);
  sh_client_free(&c);
  if (demo_page == 0)
    fprintf(stderr, "check_sessions: could not measure a demo page\n");
  sh_server_stop(&srv, 10);
}

int test_finish(int failed) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", layer_dir);
  if (system(cmd) != 0)
    fprintf(stderr, "check_sessions: could not remove %s\n", layer_dir);
  if (teardown_failures)
    fprintf(stderr, "check_sessions: %d server teardowns failed (above)\n",
            teardown_failures);
  return failed + teardown_failures;
}
