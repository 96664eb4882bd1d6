/* tests/check_server.c: attnd over HTTP, against the float64 reference.
 *
 * Black-box: each TCase starts the real binary once, in an unchecked
 * fixture (in Check's parent process, before it forks a child per test, so
 * that the children inherit the server's port), and stops it with SIGTERM
 * at the end, expecting exit status 0 and no 500 ever answered. A test
 * that finds the server dead (an earlier one crashed it) starts its own, so
 * that a crash fails the test that caused it, not the rest of the TCase.
 * Every 200 reply is decoded and compared with tests/ref.c at REPLY_TOL,
 * as ‖got − ref‖₂ / ‖ref‖₂; every error reply is checked for its status,
 * error.code, error.field and the words of its message that carry the
 * numbers. TCases:
 *   - forms: every tensor form as input and every reply encoding, rank 2
 *     and 3;
 *   - options: causal masks, key lengths, windows, ALiBi, scale, softcap,
 *     grouped heads, every projection and bias, every returned tensor;
 *   - masks: mask.allow and mask.bias in every form and rank, everything
 *     combined, and random specs;
 *   - json: number spellings, escaped strings, and the reply encodings
 *     agreeing bit for bit; return.weights as an object (top_k, pool,
 *     stats, ranges) in each encoding against tests/ref.c's ref_reduce;
 *   - protocol: id, X-Request-Id, metrics, Server-Timing, GET endpoints and
 *     the Prometheus text;
 *   - errors: a few invalid requests under small configured limits (the
 *     table of every error class is decoded from strings in
 *     tests/check_decode.c), and the HTTP-level errors (400, 404, 405, 413,
 *     415). */
#include <check.h>
#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attn/attn.h"
#include "codec/buf.h"
#include "codec/half.h"
#include "ref.h"
#include "server_harness.h"
#include "suite.h"
#include "testutil.h"

/* The core's own tolerance (tests/check_forward.c); the wire adds nothing:
 * floats travel as exact decimals or raw bytes. */
#define REPLY_TOL 1e-5

/* ---- fixtures ------------------------------------------------------------ */

/* The TCase's server. Set in the unchecked setup (parent process); the
 * forked tests read it. */
static sh_server_t srv;
static const char *const *srv_args; /* its flags, for a restart */
static int srv_own;                 /* this test's child started srv */

static void start_with(const char *const *args) {
  srv_args = args;
  if (sh_server_start(&srv, args) < 0)
    ck_abort_msg("attnd did not start:\n%s", srv.log);
}

/* What the server wrote to stderr, for failure messages: from its first
 * sanitizer report if there is one, else the last 3000 bytes. */
static const char *server_log(void) {
  sh_server_read_log(&srv);
  const char *e = strstr(srv.log, "==ERROR: ");
  if (e) {
    while (e > srv.log && e[-1] != '\n')
      e--;
    return e;
  }
  return srv.log_len > 3000 ? srv.log + srv.log_len - 3000 : srv.log;
}

/* Checked setup (in the test's child): when an earlier test killed the
 * TCase's server, this test gets a server of its own, so that one crash
 * fails one test; the TCase's teardown still reports the crash. */
static void ensure_server(void) {
  sh_resp_t r;
  int up = sh_get(srv.port, "/healthz", &r) == 0 && r.status == 200;
  sh_resp_free(&r);
  srv_own = 0;
  if (up)
    return;
  if (sh_server_start(&srv, srv_args) < 0)
    ck_abort_msg("attnd did not restart:\n%s", srv.log);
  srv_own = 1;
}

static void release_server(void) {
  if (srv_own) {
    int st = sh_server_stop(&srv, 15.0);
    ck_assert_msg(st == 0, "attnd exited with status %d on SIGTERM:\n%s", st,
                  server_log());
  }
}

static void start_default(void) {
  static const char *const args[] = {"--workers", "2", "--threads-per-request",
                                     "1", NULL};
  start_with(args);
}

/* threads_per_request = auto, at most 2 threads a request. */
static void start_auto_threads(void) {
  static const char *const args[] = {"--workers",
                                     "2",
                                     "--threads-per-request",
                                     "auto",
                                     "--max-threads-per-request",
                                     "2",
                                     NULL};
  start_with(args);
}

/* Small limits for the errors TCase. default_timeout_ms must not exceed
 * max_timeout_ms, or the configuration is refused. */
static void start_limited(void) {
  static const char *const args[] = {"--workers",
                                     "1",
                                     "--threads-per-request",
                                     "1",
                                     "--max-body-bytes",
                                     "65536",
                                     "--max-seq-len",
                                     "16",
                                     "--max-heads",
                                     "4",
                                     "--max-tensor-elements",
                                     "4096",
                                     "--max-response-bytes",
                                     "16384",
                                     "--max-timeout-ms",
                                     "5000",
                                     "--default-timeout-ms",
                                     "5000",
                                     NULL};
  start_with(args);
}

/* Problems the unchecked teardowns found. Check 0.15 ends the whole run,
 * silently, when an assertion fails in an unchecked teardown, so they
 * report here instead, and main fails the run. Parent process only. */
static int teardown_failures;

/* Unchecked teardown: 500 must have been unreachable (none answered,
 * whatever the tests sent), and SIGTERM must end the server with 0. */
static void stop_server(void) {
  double n500 = sh_metric(srv.port, "attnd_requests_total{status=\"500\"}");
  int st;
  if (n500 < 0) {
    st = sh_server_wait(&srv, 1.0);
    sh_server_kill(&srv);
    fprintf(stderr,
            "check_server: attnd died during a TCase (status %d):\n%s\n", st,
            server_log());
    teardown_failures++;
    return;
  }
  if (n500 != 0) {
    fprintf(stderr, "check_server: attnd answered %g requests with 500\n",
            n500);
    teardown_failures++;
  }
  if ((st = sh_server_stop(&srv, 15.0)) != 0) {
    fprintf(stderr,
            "check_server: attnd exited with status %d on SIGTERM:\n%s\n", st,
            server_log());
    teardown_failures++;
  }
}

/* ---- helpers ------------------------------------------------------------- */

/* POSTs `req` (the caller keeps it) and asserts that the server answered
 * 200; returns the reply's body parsed (NULL where it is not JSON), the
 * reply itself in r. The caller frees both. `what` names the request in
 * failure messages. */
static json_t *post_ok(const json_t *req, sh_resp_t *r, const char *what) {
  ck_assert_msg(sh_post_json(srv.port, req, r) == 0, "%s: %s; the server:\n%s",
                what, r->error, server_log());
  ck_assert_msg(r->status == 200, "%s: status %ld: %.600s", what, r->status,
                r->body);
  return sh_json(r);
}

/* Checks the reply `rep` against the reference for `p`, at REPLY_TOL;
 * `form` is the encoding the reply must use (-1: any). */
static void check_reply(const attn_params_t *p, const json_t *rep, int form,
                        const char *what) {
  char why[512];
  ck_assert_msg(sh_check_reply(p, rep, form, REPLY_TOL, why, sizeof why) == 0,
                "%s: %s", what, why);
}

/* POSTs `req`, the request for `p`, and checks its reply against the
 * reference (see check_reply). */
static void post_req_and_check(const attn_params_t *p, const json_t *req,
                               int form, const char *what) {
  sh_resp_t r;
  json_t *rep = post_ok(req, &r, what);
  ck_assert_msg(rep != NULL, "%s: the reply is not JSON: %.300s", what, r.body);
  check_reply(p, rep, form, what);
  json_decref(rep);
  sh_resp_free(&r);
}

/* POSTs the request for `p` in the encodings `e` and checks the reply
 * against the reference (see check_reply). */
static void post_and_check(const attn_params_t *p, const sh_enc_t *e, int form,
                           const char *what) {
  json_t *req = sh_request_json(p, e);
  post_req_and_check(p, req, form, what);
  json_decref(req);
}

/* POSTs `body` and returns the reply (free it). */
static sh_resp_t post_text(const char *body) {
  sh_resp_t r;
  ck_assert_msg(sh_post(srv.port, body, strlen(body), &r) == 0,
                "%s; the server:\n%s", r.error, server_log());
  return r;
}

static sh_resp_t get(const char *path) {
  sh_resp_t r;
  ck_assert_msg(sh_get(srv.port, path, &r) == 0, "GET %s: %s", path, r.error);
  return r;
}

static sh_resp_t request(const char *method, const char *path,
                         const char *ctype, const char *body) {
  sh_client_t c;
  sh_client_init(&c, srv.port);
  sh_req_t q = {.method = method,
                .path = path,
                .content_type = ctype,
                .body = body,
                .len = body ? strlen(body) : 0};
  sh_resp_t r;
  ck_assert_msg(sh_http(&c, &q, &r) == 0, "%s %s: %s", method, path, r.error);
  sh_client_free(&c);
  return r;
}

/* ---- forms --------------------------------------------------------------- */

static const char *const form_names[] = {"nested", "flat", "base64"};

/* Cross-attention with a value of its own and every projection and bias,
 * each of another width, rank 2: a request that has every tensor. */
static tu_spec_t every_projection(void) {
  return (tu_spec_t){.Lq = 5,
                     .Lk = 7,
                     .H = 2,
                     .Dh = 4,
                     .cross = 1,
                     .value_given = 1,
                     .proj = TU_ALLPROJ,
                     .Eq = 6,
                     .Ek = 5,
                     .Ev = 3,
                     .Eo = 4,
                     .skip = TU_SKIP_M};
}

/* _i: rank (2, 3) × query form (3) × return.encoding (none + 3). Key and
 * value come in the two other forms, the projections in a third
 * rotation, so that every tensor of the request meets every form (mask
 * and bias tensors: see the masks TCase). The reply takes the query's form
 * unless return.encoding names one. */
START_TEST(test_forms) {
  const int rank = 2 + _i / 12, qform = _i / 4 % 3, enc = _i % 4 - 1;
  tu_spec_t s = every_projection();
  s.B = rank == 3 ? 2 : 1;
  s.batched = rank == 3;
  tu_case_t c;
  tu_case_build(&c, &s, 100 + (uint64_t)_i);
  sh_enc_t e = {.inputs = (sh_form_t)qform,
                .weights = (sh_form_t)((qform + 1) % 3),
                .encoding = enc < 0 ? NULL : form_names[enc]};
  json_t *req = sh_request_json(&c.p, &e);
  json_object_set_new(req, "key",
                      sh_floats_json(c.p.key.data, c.p.key.rank, c.p.key.dim,
                                     (sh_form_t)((qform + 1) % 3)));
  json_object_set_new(req, "value",
                      sh_floats_json(c.p.value.data, c.p.value.rank,
                                     c.p.value.dim,
                                     (sh_form_t)((qform + 2) % 3)));
  char what[96];
  snprintf(what, sizeof what, "rank %d, query %s, encoding %s", rank,
           form_names[qform], enc < 0 ? "(none)" : form_names[enc]);
  post_req_and_check(&c.p, req, enc < 0 ? qform : enc, what);
  json_decref(req);
  tu_case_free(&c);
}
END_TEST

/* base64 without dtype is float32; the reply's base64 names its dtype. */
START_TEST(test_base64_default_dtype) {
  tu_spec_t s = {.Lq = 3, .H = 1, .Dh = 4, .skip = 7};
  tu_case_t c;
  tu_case_build(&c, &s, 7);
  sh_enc_t e = {.inputs = SH_BASE64};
  json_t *req = sh_request_json(&c.p, &e);
  json_object_del(json_object_get(req, "query"), "dtype");
  sh_resp_t r;
  json_t *rep = post_ok(req, &r, "base64 without dtype");
  const json_t *out = json_object_get(rep, "output");
  ck_assert_str_eq(json_string_value(json_object_get(out, "dtype")), "float32");
  check_reply(&c.p, rep, SH_BASE64, "base64 without dtype");
  json_decref(rep);
  json_decref(req);
  sh_resp_free(&r);
  tu_case_free(&c);
}
END_TEST

/* ---- float16 and bfloat16 ------------------------------------------------ */

static const char *const half_names[] = {"float16", "bfloat16"};
static const attnd_dtype_t half_types[] = {ATTND_DTYPE_F16, ATTND_DTYPE_BF16};

/* _i: float16, bfloat16. Query, key and value come as base64 of the
 * dtype's two bytes; the reference computes on the same values (rounded
 * to the dtype beforehand, so that widening them is exact), with the
 * projections in float32. Catches bytes read as the other dtype, a wrong
 * element size, a missed subnormal. */
START_TEST(test_half_inputs) {
  tu_spec_t s = every_projection();
  tu_case_t c;
  tu_case_build(&c, &s, 300 + (uint64_t)_i);
  attn_tensor_t *ts[] = {&c.p.query, &c.p.key, &c.p.value};
  static const char *const names[] = {"query", "key", "value"};
  sh_enc_t e = {.inputs = SH_BASE64, .weights = SH_FLAT};
  float sub = _i ? 0x1p-130f : 0x1p-20f; /* a subnormal of each dtype */
  ((float *)c.p.query.data)[1] = sub;
  ((float *)c.p.key.data)[2] = -sub;
  json_t *req = sh_request_json(&c.p, &e);
  for (int k = 0; k < 3; k++) {
    size_t n = 1;
    for (int d = 0; d < ts[k]->rank; d++)
      n *= (size_t)ts[k]->dim[d];
    float *x = (float *)ts[k]->data;
    ck_assert_int_eq(attnd_dtype_round(half_types[_i], x, n), -1);
    uint16_t *h = malloc(2 * n);
    attnd_dtype_pack(half_types[_i], x, n, h);
    char *b64 = sh_base64(h, 2 * n);
    json_t *t = json_object_get(req, names[k]);
    json_object_set_new(t, "dtype", json_string(half_names[_i]));
    json_object_set_new(t, "base64", json_string(b64));
    free(b64);
    free(h);
  }
  ck_assert(((float *)c.p.query.data)[1] == sub);
  post_req_and_check(&c.p, req, SH_BASE64, half_names[_i]);
  json_decref(req);
  tu_case_free(&c);
}
END_TEST

/* The reply's tensor `name` of rep, decoded (shape and all). */
static sh_tensor_t reply_tensor(const json_t *rep, const char *name) {
  sh_tensor_t t;
  char why[256];
  ck_assert_msg(
      sh_tensor_decode(json_object_get(rep, name), &t, why, sizeof why) == 0,
      "%s: %s", name, why);
  return t;
}

/* _i: (float16, bfloat16) × (nested, flat, base64). return.dtype rounds
 * output, weights and head outputs to the dtype: each value is the float32
 * reply's rounded to nearest even (the same request with float32), base64
 * names the dtype and carries two bytes an element. Catches a tensor left
 * unrounded, rounding by truncation, the float32 name or size in base64. */
START_TEST(test_half_reply) {
  const int t = _i / 3, enc = _i % 3;
  tu_spec_t s = every_projection(); /* wider, for values that round */
  s.Lq = 6;
  s.Lk = 9;
  s.Dh = 8;
  s.Eq = s.Ek = s.Ev = s.Eo = 16;
  tu_case_t c;
  tu_case_build(&c, &s, 400 + (uint64_t)_i);
  c.p.want_weights = c.p.want_head_outputs = 1;
  sh_enc_t e = {.encoding = form_names[enc], .metrics_off = 1};
  json_t *req = sh_request_json(&c.p, &e);
  sh_resp_t r32, rh;
  ck_assert_int_eq(sh_post_json(srv.port, req, &r32), 0);
  json_object_set_new(json_object_get(req, "return"), "dtype",
                      json_string(half_names[t]));
  ck_assert_int_eq(sh_post_json(srv.port, req, &rh), 0);
  ck_assert_msg(r32.status == 200 && rh.status == 200, "%ld %ld %s", r32.status,
                rh.status, rh.body);
  json_t *a = sh_json(&r32), *b = sh_json(&rh);
  static const char *const outs[] = {"output", "weights", "head_outputs"};
  int changed = 0;
  for (int k = 0; k < 3; k++) {
    sh_tensor_t x = reply_tensor(a, outs[k]), y = reply_tensor(b, outs[k]);
    ck_assert_uint_eq(x.n, y.n);
    if (enc == SH_BASE64)
      ck_assert_str_eq(json_string_value(json_object_get(
                           json_object_get(b, outs[k]), "dtype")),
                       half_names[t]);
    for (size_t i = 0; i < x.n; i++) {
      float want = x.data[i];
      attnd_dtype_round(half_types[t], &want, 1);
      changed += want != x.data[i];
      ck_assert_msg(memcmp(&want, &y.data[i], 4) == 0,
                    "%s %s %s[%zu]: %a, want %a (float32 %a)", half_names[t],
                    form_names[enc], outs[k], i, (double)y.data[i],
                    (double)want, (double)x.data[i]);
    }
    sh_tensor_free(&x);
    sh_tensor_free(&y);
  }
  ck_assert_msg(changed > 0, "no value needed rounding: the test is blind");
  json_decref(a);
  json_decref(b);
  json_decref(req);
  sh_resp_free(&r32);
  sh_resp_free(&rh);
  tu_case_free(&c);
}
END_TEST

/* The errors of the 16-bit dtypes: a dtype a tensor cannot take, a
 * length counted in the dtype's bytes, an infinity in float16, a result
 * beyond float16's range; and a dtype beside flat data, whose numbers are
 * read as float32 whatever it says (it was ignored: a client that meant
 * its float16 to be rounded got no word that they were not). */
START_TEST(test_half_errors) {
  static const struct {
    const char *body, *code, *field, *words;
  } cases[] = {
      {"{\"query\":{\"shape\":[1,2],\"dtype\":\"float8\",\"base64\":"
       "\"AAAAAA==\"},\"num_heads\":1}",
       "invalid_value", "query.dtype", "float32, float16 or bfloat16"},
      {"{\"query\":[[1,2]],\"num_heads\":1,\"mask\":{\"allow\":{"
       "\"shape\":[1,1],\"dtype\":\"bfloat16\",\"base64\":\"AAA=\"}}}",
       "invalid_value", "mask.allow.dtype", "float32 or bool"},
      {"{\"query\":{\"shape\":[1,3],\"dtype\":\"bfloat16\",\"base64\":"
       "\"AAAAAA==\"},\"num_heads\":1}",
       "size_mismatch", "query.base64", "3 bfloat16 elements need 6"},
      {"{\"query\":{\"shape\":[1,2],\"dtype\":\"float16\",\"base64\":"
       "\"ADwAfA==\"},\"num_heads\":1}",
       "non_finite", "query", "element 1"},
      {"{\"query\":[[1,2,3,70000]],\"num_heads\":2,"
       "\"return\":{\"dtype\":\"float16\"}}",
       "numeric_overflow", "return.dtype", "output element 3|float16"},
      {"{\"query\":[[1,2]],\"num_heads\":1,\"return\":{\"dtype\":"
       "\"half\"}}",
       "invalid_value", "return.dtype", "\"bfloat16\""},
      {"{\"query\":{\"shape\":[1,2],\"dtype\":\"float16\",\"data\":"
       "[1,2]},\"num_heads\":1}",
       "unknown_field", "query.dtype", "with data|base64 form"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    sh_resp_t r = post_text(cases[i].body);
    char words[96];
    snprintf(words, sizeof words, "%s", cases[i].words);
    char *bar = strchr(words, '|');
    if (bar)
      *bar++ = 0;
    sh_assert_error(&r, 422, cases[i].code, cases[i].field, words, bar, NULL);
    sh_resp_free(&r);
  }
}
END_TEST

/* ---- options ------------------------------------------------------------- */

/* Every option written out at its default value computes what leaving it
 * out does: causal false, alibi false, weights "none", head_outputs false,
 * metrics true, encoding "nested", num_kv_heads = num_heads. */
START_TEST(test_explicit_defaults) {
  tu_spec_t s = {.Lq = 4, .Lk = 6, .cross = 1, .H = 2, .Dh = 3, .skip = 7};
  tu_case_t c;
  tu_case_build(&c, &s, 11);
  json_t *req = sh_request_json(&c.p, NULL);
  json_object_set_new(req, "num_kv_heads", json_integer(2));
  json_object_set_new(req, "mask",
                      json_pack("{s:b,s:b}", "causal", 0, "alibi", 0));
  json_object_set_new(req, "return",
                      json_pack("{s:s,s:b,s:b,s:s}", "weights", "none",
                                "head_outputs", 0, "metrics", 1, "encoding",
                                "nested"));
  sh_resp_t r;
  json_t *rep = post_ok(req, &r, "explicit defaults");
  check_reply(&c.p, rep, SH_NESTED, "explicit defaults");
  ck_assert_ptr_nonnull(json_object_get(rep, "metrics"));
  json_decref(rep);
  json_decref(req);
  sh_resp_free(&r);
  tu_case_free(&c);
}
END_TEST

typedef struct opt_case {
  const char *name;
  tu_spec_t s;
  sh_enc_t e;
} opt_case_t;

#define W_ONLY (TU_SKIP_M | TU_SKIP_HO) /* per-head weights, no head outs */
#define M_ONLY (TU_SKIP_W | TU_SKIP_HO) /* mean weights */
#define NONE (TU_SKIP_W | TU_SKIP_M | TU_SKIP_HO)
/* Cross-attention, rank 2 or rank 3 with B = 2; H 0 means 2 and Dh 0
 * means 4 (see test_options). */
#define X2(...)                                                                \
  { .cross = 1, __VA_ARGS__ }
#define X3(...)                                                                \
  { .B = 2, .batched = 1, .cross = 1, __VA_ARGS__ }

/* Each feature alone (with the weights returned, where masks show best),
 * then combined. Lq ≠ Lk wherever the alignment matters. */
static const opt_case_t opt_cases[] = {
    {"causal bottom_right Lq<Lk",
     X2(.Lq = 5, .Lk = 9, .causal = ATTN_CAUSAL_BOTTOM_RIGHT, .skip = W_ONLY),
     {0}},
    {"causal bottom_right Lq>Lk",
     X3(.Lq = 9, .Lk = 5, .causal = ATTN_CAUSAL_BOTTOM_RIGHT, .skip = W_ONLY),
     {0}},
    {"causal true Lq<Lk",
     X3(.Lq = 4, .Lk = 7, .causal = ATTN_CAUSAL_BOTTOM_RIGHT, .skip = W_ONLY),
     {.causal_bool = 1}},
    {"causal top_left Lq<Lk",
     X2(.Lq = 5, .Lk = 9, .causal = ATTN_CAUSAL_TOP_LEFT, .skip = W_ONLY),
     {0}},
    {"causal top_left Lq>Lk",
     X3(.Lq = 9, .Lk = 5, .causal = ATTN_CAUSAL_TOP_LEFT, .skip = W_ONLY),
     {0}},
    {"key_lengths rank 2",
     X2(.Lq = 3, .Lk = 8, .key_lengths = 1, .lengths = {5}, .skip = W_ONLY),
     {0}},
    {"key_lengths rank 3 with an empty item",
     {.B = 3,
      .batched = 1,
      .cross = 1,
      .Lq = 4,
      .Lk = 8,
      .key_lengths = 1,
      .lengths = {2, 8, 0},
      .skip = W_ONLY},
     {0}},
    {"window left",
     X2(.Lq = 6, .Lk = 9, .has_wl = 1, .wl = 2, .skip = W_ONLY),
     {0}},
    {"window right",
     X3(.Lq = 6, .Lk = 9, .has_wr = 1, .wr = 1, .skip = W_ONLY),
     {0}},
    {"window both",
     X3(.Lq = 9, .Lk = 6, .has_wl = 1, .wl = 1, .has_wr = 1, .wr = 2,
        .skip = W_ONLY),
     {0}},
    {"alibi true",
     X3(.Lq = 5, .Lk = 8, .H = 3, .alibi = ATTN_ALIBI_DEFAULT, .skip = W_ONLY),
     {0}},
    {"alibi slopes",
     X2(.Lq = 5, .Lk = 8, .H = 3, .alibi = ATTN_ALIBI_SLOPES, .skip = W_ONLY),
     {0}},
    {"softcap",
     X2(.Lq = 5, .Lk = 6, .has_softcap = 1, .softcap = 0.7f, .skip = W_ONLY),
     {0}},
    {"scale",
     X3(.Lq = 5, .Lk = 6, .has_scale = 1, .scale = 0.9f, .skip = W_ONLY),
     {0}},
    {"scale and softcap",
     X2(.Lq = 5, .Lk = 6, .has_scale = 1, .scale = 2.5f, .has_softcap = 1,
        .softcap = 1.5f, .skip = W_ONLY),
     {0}},
    {"GQA 4/2", X3(.Lq = 5, .Lk = 6, .H = 4, .Hkv = 2, .skip = W_ONLY), {0}},
    {"GQA 6/3 with head outputs",
     X2(.Lq = 5, .Lk = 6, .H = 6, .Hkv = 3, .Dv = 3, .value_given = 1,
        .skip = TU_SKIP_M),
     {0}},
    {"MQA 4/1", X2(.Lq = 3, .Lk = 6, .H = 4, .Hkv = 1, .skip = NONE), {0}},
    {"q_weight",
     X2(.Lq = 4, .Lk = 5, .proj = TU_QW, .Eq = 7, .skip = NONE),
     {0}},
    {"k_weight",
     X3(.Lq = 4, .Lk = 5, .value_given = 1, .proj = TU_KW, .Ek = 3,
        .skip = NONE),
     {0}},
    {"v_weight",
     X2(.Lq = 4, .Lk = 5, .value_given = 1, .proj = TU_VW, .Ev = 5, .Dv = 3,
        .skip = TU_SKIP_W | TU_SKIP_M),
     {0}},
    {"o_weight",
     X3(.Lq = 4, .Lk = 5, .proj = TU_OW, .Eo = 3, .skip = NONE),
     {.weights = SH_BASE64}},
    {"q_bias", X2(.Lq = 4, .Lk = 5, .proj = TU_QB, .skip = NONE), {0}},
    {"k_bias",
     X2(.Lq = 4, .Lk = 5, .proj = TU_KB, .skip = NONE),
     {.weights = SH_FLAT}},
    {"v_bias", X2(.Lq = 4, .Lk = 5, .proj = TU_VB, .skip = NONE), {0}},
    {"o_bias", X2(.Lq = 4, .Lk = 5, .proj = TU_OB, .skip = NONE), {0}},
    {"every projection and bias",
     X3(.Lq = 4, .Lk = 5, .value_given = 1, .proj = TU_ALLPROJ, .Eq = 7,
        .Ek = 6, .Ev = 5, .Eo = 3, .Dv = 2, .skip = NONE),
     {0}},
    {"self-attention, every projection",
     {.Lq = 6,
      .H = 2,
      .Dh = 3,
      .proj = TU_ALLPROJ,
      .Eq = 5,
      .Eo = 4,
      .skip = TU_SKIP_W},
     {0}},
    {"weights per_head", X3(.Lq = 3, .Lk = 4, .skip = W_ONLY), {0}},
    {"weights mean", X3(.Lq = 3, .Lk = 4, .H = 3, .skip = M_ONLY), {0}},
    {"weights mean rank 2", X2(.Lq = 3, .Lk = 4, .skip = M_ONLY), {0}},
    {"head_outputs", X3(.Lq = 3, .Lk = 4, .skip = TU_SKIP_W | TU_SKIP_M), {0}},
};
#define N_OPT (int)(sizeof opt_cases / sizeof opt_cases[0])

/* The mask and bias tensors, in every form and rank, alone and with
 * everything else. Their own TCase: see test_mask_tail_block. */
static const opt_case_t mask_cases[] = {
    {"allow rank 2 bools",
     X2(.Lq = 4, .Lk = 6, .allow_rank = 2, .skip = W_ONLY),
     {.allow = SH_MASK_BOOLS}},
    {"allow rank 2 numbers",
     X2(.Lq = 4, .Lk = 6, .allow_rank = 2, .skip = W_ONLY),
     {.allow = SH_MASK_NUMBERS}},
    {"allow rank 2 base64 bool",
     X2(.Lq = 4, .Lk = 6, .allow_rank = 2, .skip = W_ONLY),
     {.allow = SH_MASK_BASE64_BOOL}},
    {"allow rank 3 bools [H,1,Lk]",
     X3(.Lq = 4, .Lk = 6, .allow_rank = 3, .allow_ones = TU_1Q, .skip = W_ONLY),
     {.allow = SH_MASK_BOOLS}},
    {"allow rank 3 numbers",
     X3(.Lq = 4, .Lk = 6, .allow_rank = 3, .skip = W_ONLY),
     {.allow = SH_MASK_NUMBERS}},
    {"allow rank 3 base64 bool",
     X3(.Lq = 4, .Lk = 6, .allow_rank = 3, .skip = W_ONLY),
     {.allow = SH_MASK_BASE64_BOOL}},
    {"allow rank 4 bools [B,1,Lq,Lk]",
     X3(.Lq = 4, .Lk = 6, .allow_rank = 4, .allow_ones = TU_1H, .skip = W_ONLY),
     {.allow = SH_MASK_BOOLS}},
    {"allow rank 4 numbers",
     X3(.Lq = 4, .Lk = 6, .allow_rank = 4, .skip = W_ONLY),
     {.allow = SH_MASK_NUMBERS}},
    {"allow rank 4 base64 bool [1,H,Lq,1]",
     X3(.Lq = 4, .Lk = 6, .allow_rank = 4, .allow_ones = TU_1B | TU_1K,
        .skip = W_ONLY),
     {.allow = SH_MASK_BASE64_BOOL}},
    {"allow flat",
     X3(.Lq = 4, .Lk = 6, .allow_rank = 4, .skip = W_ONLY),
     {.allow = SH_MASK_FLAT}},
    {"allow base64 float32 0/1",
     X3(.Lq = 4, .Lk = 6, .allow_rank = 3, .skip = W_ONLY),
     {.allow = SH_MASK_BASE64_F32}},
    {"bias rank 2", X2(.Lq = 4, .Lk = 6, .bias_rank = 2, .skip = W_ONLY), {0}},
    {"bias rank 3 flat [H,1,Lk]",
     X3(.Lq = 4, .Lk = 6, .bias_rank = 3, .bias_ones = TU_1Q, .skip = W_ONLY),
     {.weights = SH_FLAT}},
    {"bias rank 4 base64",
     X3(.Lq = 4, .Lk = 6, .bias_rank = 4, .skip = W_ONLY),
     {.weights = SH_BASE64}},
    {"everything at once",
     {.B = 3,
      .batched = 1,
      .cross = 1,
      .value_given = 1,
      .Lq = 7,
      .Lk = 11,
      .H = 4,
      .Hkv = 2,
      .Dh = 3,
      .Dv = 2,
      .proj = TU_ALLPROJ,
      .Eq = 5,
      .Ek = 6,
      .Ev = 4,
      .Eo = 3,
      .causal = ATTN_CAUSAL_TOP_LEFT,
      .key_lengths = 1,
      .lengths = {11, 6, 9},
      .allow_rank = 4,
      .allow_ones = TU_1H,
      .allow_p = 0.8,
      .bias_rank = 3,
      .has_wl = 1,
      .wl = 5,
      .alibi = ATTN_ALIBI_SLOPES,
      .has_scale = 1,
      .scale = 0.4f,
      .has_softcap = 1,
      .softcap = 3.0f,
      .skip = TU_SKIP_M},
     {.inputs = SH_BASE64,
      .weights = SH_FLAT,
      .allow = SH_MASK_BASE64_BOOL,
      .encoding = "flat"}},
};
#define N_MASK (int)(sizeof mask_cases / sizeof mask_cases[0])

static void run_case(const opt_case_t *oc, uint64_t seed) {
  tu_spec_t s = oc->s;
  if (s.H == 0)
    s.H = 2;
  if (s.Dh == 0)
    s.Dh = 4;
  tu_case_t c;
  tu_case_build(&c, &s, seed);
  post_and_check(&c.p, &oc->e, -1, oc->name);
  tu_case_free(&c);
}

START_TEST(test_options) {
  run_case(&opt_cases[_i], 1000 + (uint64_t)_i);
}
END_TEST

START_TEST(test_masks) {
  run_case(&mask_cases[_i], 2000 + (uint64_t)_i);
}
END_TEST

/* The params of test_mask_tail_block's body k, for the reference: the query
 * [Lq=2, E=2] as the server reads it ((float)strtod), one head, key and
 * value absent (= query), and body 0's zero bias [2, 2] or body 1's allow
 * [2, 2]. Borrows static buffers. */
static attn_params_t tail_block_params(int k) {
  static const float query[2 * 2] = {0.1f, 0.2f, 0.3f, 0.4f};
  static const float bias[2 * 2] = {0, 0, 0, 0};
  static const uint8_t allow[2 * 2] = {1, 1, 0, 1};
  attn_params_t p = {0};
  p.query = tu_t2(query, 2, 2);
  p.num_heads = 1;
  if (k == 0)
    p.bias = tu_t2(bias, 2, 2);
  else
    p.allow = tu_t2(allow, 2, 2);
  return p;
}

/* Regression test for a bug this suite found under `make asan`, since
 * fixed in core/kernel.c (score_terms now stops at Lk): for each block of
 * ATTN__BC = 64 keys the kernel read 64 entries of mask.bias and
 * mask.allow from the block's first key, also past Lk in the last block,
 * so any bias or allow whose last dimension was not a multiple of 64 was
 * read past its end. AddressSanitizer then aborted the server (heap-buffer-
 * overflow READ in score_terms) and the client got no reply; a plain build
 * masked the bytes it over-read, so its values were right. These are the
 * minimal reproductions: expected 200 with the server alive, observed an
 * empty reply and a dead ASan server. The other mask and bias tests are in
 * this TCase, whose tests restart a dead server (ensure_server). */
START_TEST(test_mask_tail_block) {
  static const char *const bodies[] = {
      "{\"query\":[[0.1,0.2],[0.3,0.4]],\"num_heads\":1,"
      "\"mask\":{\"bias\":[[0,0],[0,0]]}}",
      "{\"query\":[[0.1,0.2],[0.3,0.4]],\"num_heads\":1,"
      "\"mask\":{\"allow\":[[true,true],[false,true]]}}"};
  float out[2][4]; /* each body's output [Lq=2, Eo=2] */
  for (int k = 0; k < 2; k++) {
    sh_resp_t r = post_text(bodies[k]);
    ck_assert_msg(r.status == 200, "case %d: %ld %s", k, r.status, r.body);
    json_t *rep = sh_json(&r);
    ck_assert_msg(rep != NULL, "case %d: the reply is not JSON: %.300s", k,
                  r.body);
    /* the output, and nothing else, within REPLY_TOL of the reference */
    const attn_params_t p = tail_block_params(k);
    char what[32], why[512];
    snprintf(what, sizeof what, "case %d", k);
    check_reply(&p, rep, -1, what);
    sh_tensor_t t;
    ck_assert_msg(sh_tensor_decode(json_object_get(rep, "output"), &t, why,
                                   sizeof why) == 0,
                  "case %d: %s", k, why);
    ck_assert_int_eq(t.n, 4);
    memcpy(out[k], t.data, sizeof out[k]);
    sh_tensor_free(&t);
    json_decref(rep);
    sh_resp_free(&r);
    r = get("/healthz");
    ck_assert_msg(r.status == 200, "case %d: the server is gone:\n%s", k,
                  server_log());
    sh_resp_free(&r);
  }
  /* By hand, apart from the reference: a zero bias changes nothing, so
   * body 0 is plain attention; body 1's first query sees both keys as
   * body 0's does, and its second sees key 1 alone, so its output is
   * value row 1, the query's (0.3, 0.4), where plain attention gives a
   * mix of both rows (about 0.205, 0.305). */
  for (int e = 0; e < 2; e++)
    ck_assert_float_eq_tol(out[1][e], out[0][e], 1e-6f);
  ck_assert_float_eq_tol(out[1][2], 0.3f, 1e-6f);
  ck_assert_float_eq_tol(out[1][3], 0.4f, 1e-6f);
  ck_assert_float_lt(out[0][2], 0.29f);
}
END_TEST

/* Random specs (every feature on or off) in random forms. */
#define N_RANDOM 16
START_TEST(test_random_specs) {
  tu_rng_t rng;
  tu_rng_seed(&rng, 5000 + (uint64_t)_i);
  tu_spec_t s;
  tu_spec_random(&s, &rng);
  tu_case_t c;
  tu_case_build(&c, &s, 6000 + (uint64_t)_i);
  sh_enc_t e = {.inputs = (sh_form_t)tu_rng_below(&rng, 3),
                .weights = (sh_form_t)tu_rng_below(&rng, 3),
                .allow = (sh_mask_form_t)tu_rng_below(&rng, 5),
                .causal_bool = (int)tu_rng_below(&rng, 2)};
  char what[600];
  tu_spec_describe(&s, what, sizeof what);
  post_and_check(&c.p, &e, e.inputs, what);
  tu_case_free(&c);
}
END_TEST

/* ---- JSON text ----------------------------------------------------------- */

/* Numbers spelled every way JSON allows. With one key, softmax gives it
 * weight 1, so the output is the value row: each spelling must read as
 * (float)strtod(spelling). 80 elements take the server's fast path for
 * bulk numbers, 16 its slow path (jansson); _i picks which. */
START_TEST(test_number_spellings) {
  static const char *const sp[] = {"0",
                                   "-0",
                                   "1",
                                   "-1",
                                   "0.5",
                                   "-0.5",
                                   "1e0",
                                   "1E0",
                                   "1e+2",
                                   "1E-2",
                                   "2.5e-3",
                                   "-3.75E+1",
                                   "123456789",
                                   "0.1",
                                   "0.30000000000000004",
                                   "1e-46",
                                   "1.401298464324817e-45",
                                   "1e38",
                                   "-7.0000001",
                                   "65504",
                                   "1e-7",
                                   "100",
                                   "-100.25",
                                   "9007199254740993",
                                   "1.5e10",
                                   "0.0",
                                   "-0.0e0",
                                   "31415926535897932384626e-22"};
  const int n_sp = (int)(sizeof sp / sizeof sp[0]);
  const int E = _i == 0 ? 80 : 16;
  char *v = malloc((size_t)E * 48 + 256), *q = malloc((size_t)E * 4 + 16);
  size_t n = (size_t)sprintf(v, "[[");
  size_t m = (size_t)sprintf(q, "[[");
  float want[80];
  for (int k = 0; k < E; k++) {
    const char *t = sp[(k + 7 * _i) % n_sp];
    n += (size_t)sprintf(v + n, "%s%s", k ? "," : "", t);
    m += (size_t)sprintf(q + m, "%s0", k ? "," : "");
    want[k] = (float)strtod(t, NULL);
  }
  sprintf(v + n, "]]");
  sprintf(q + m, "]]");
  size_t cap = strlen(v) + strlen(q) * 2 + 128;
  char *body = malloc(cap);
  snprintf(body, cap,
           "{\"query\":%s,\"key\":%s,\"value\":%s,\"num_heads\":1,"
           "\"return\":{\"encoding\":\"base64\"}}",
           q, q, v);
  sh_resp_t r = post_text(body);
  ck_assert_msg(r.status == 200, "%ld %.300s", r.status, r.body);
  json_t *rep = sh_json(&r);
  sh_tensor_t t;
  char why[256];
  ck_assert_msg(sh_tensor_decode(json_object_get(rep, "output"), &t, why,
                                 sizeof why) == 0,
                "%s", why);
  ck_assert_int_eq(t.n, E);
  for (int k = 0; k < E; k++)
    ck_assert_msg(fabsf(t.data[k] - want[k]) <= 1e-6f * fabsf(want[k]),
                  "element %d, spelled %s: got %.9g, expected %.9g", k,
                  sp[(k + 7 * _i) % n_sp], (double)t.data[k], (double)want[k]);
  sh_tensor_free(&t);
  json_decref(rep);
  sh_resp_free(&r);
  free(body);
  free(v);
  free(q);
}
END_TEST

/* A JSON string may escape any character: base64 with "\/" for every '/'
 * and "\u0041" for every 'A' is the same tensor. Short strings and long
 * ones (which the server lifts out of the text before jansson sees it). */
START_TEST(test_escaped_base64) {
  tu_spec_t s = {.Lq = _i == 0 ? 3 : 64, .H = 2, .Dh = 8, .skip = 7};
  tu_case_t c;
  tu_case_build(&c, &s, 300 + (uint64_t)_i);
  char *b = sh_base64(c.p.query.data,
                      (size_t)(c.p.query.dim[0] * c.p.query.dim[1]) * 4);
  char *esc = malloc(strlen(b) * 6 + 1), *e = esc;
  int slashes = 0;
  for (const char *x = b; *x; x++) {
    if (*x == '/') {
      e += sprintf(e, "\\/");
      slashes++;
    } else if (*x == 'A') {
      e += sprintf(e, "\\u0041");
    } else {
      *e++ = *x;
    }
  }
  *e = 0;
  ck_assert_msg(slashes > 0 || _i == 0, "no '/' to escape: pick another seed");
  size_t cap = strlen(esc) + 256;
  char *body = malloc(cap);
  snprintf(body, cap,
           "{\"query\":{\"shape\":[%lld,%lld],\"base64\":\"%s\"},"
           "\"num_heads\":2}",
           (long long)c.p.query.dim[0], (long long)c.p.query.dim[1], esc);
  sh_resp_t r = post_text(body);
  ck_assert_msg(r.status == 200, "%ld %.300s", r.status, r.body);
  json_t *rep = sh_json(&r);
  check_reply(&c.p, rep, SH_BASE64, "escaped base64");
  json_decref(rep);
  sh_resp_free(&r);
  free(body);
  free(esc);
  free(b);
  tu_case_free(&c);
}
END_TEST

/* The three reply encodings of one request hold the same floats, bit for
 * bit: decimals in the nested and flat forms must read back exactly. */
START_TEST(test_encodings_agree) {
  tu_spec_t s = {.B = 2,
                 .batched = 1,
                 .Lq = 9,
                 .Lk = 11,
                 .cross = 1,
                 .H = 3,
                 .Dh = 5,
                 .proj = TU_ALLPROJ,
                 .Eq = 7,
                 .Ek = 6,
                 .Eo = 13,
                 .skip = TU_SKIP_M};
  tu_case_t c;
  tu_case_build(&c, &s, 77);
  static const char *const encs[] = {"base64", "nested", "flat"};
  static const char *const names[] = {"output", "weights", "head_outputs"};
  sh_tensor_t t[3][3];
  for (int k = 0; k < 3; k++) {
    sh_enc_t e = {.encoding = encs[k]};
    json_t *req = sh_request_json(&c.p, &e);
    sh_resp_t r;
    json_t *rep = post_ok(req, &r, encs[k]);
    char why[256];
    for (int x = 0; x < 3; x++)
      ck_assert_msg(sh_tensor_decode(json_object_get(rep, names[x]), &t[k][x],
                                     why, sizeof why) == 0,
                    "%s %s: %s", encs[k], names[x], why);
    json_decref(rep);
    json_decref(req);
    sh_resp_free(&r);
  }
  for (int k = 1; k < 3; k++)
    for (int x = 0; x < 3; x++) {
      ck_assert_int_eq(t[k][x].n, t[0][x].n);
      for (size_t i = 0; i < t[0][x].n; i++)
        ck_assert_msg(memcmp(&t[k][x].data[i], &t[0][x].data[i], 4) == 0,
                      "%s[%zu]: %s %.9g, base64 %.9g", names[x], i, encs[k],
                      (double)t[k][x].data[i], (double)t[0][x].data[i]);
    }
  for (int k = 0; k < 3; k++)
    for (int x = 0; x < 3; x++)
      sh_tensor_free(&t[k][x]);
  tu_case_free(&c);
}
END_TEST

/* ---- reductions of the weights ------------------------------------------ */

/* One request with return.weights as an object (attn_reduce_t), and its
 * reply's reductions against ref_reduce, in each encoding. */
typedef struct rdcase {
  const char *name;
  tu_spec_t s;
  const char *weights; /* the object, as JSON */
  attn_reduce_t r;     /* the same, for the reference */
} rdcase_t;

/* clang-format off */
static const rdcase_t rd_cases[] = {
    {"top_k per head, causal, rank 3",
     {.B = 2, .batched = 1, .Lq = 9, .H = 2, .Dh = 4,
      .causal = ATTN_CAUSAL_BOTTOM_RIGHT},
     "{\"top_k\":3}", {.top_k = 3, .sink_tokens = 4}},
    {"everything, mean over heads, ranges, rank 2",
     {.Lq = 11, .Lk = 14, .cross = 1, .H = 3, .Dh = 4, .bias_rank = 2},
     "{\"heads\":\"mean\",\"top_k\":4,\"pool\":[3,4],\"reduce\":\"max\","
     "\"stats\":[\"entropy\",\"sink\",\"distance\"],\"sink_tokens\":2,"
     "\"query_range\":[1,10],\"key_range\":[2,13]}",
     {.mean_heads = 1, .top_k = 4, .pool_q = 3, .pool_k = 4,
      .pool_reduce = ATTN_POOL_MAX, .stats = ATTN_STAT_ALL, .sink_tokens = 2,
      .has_query_range = 1, .query_range = {1, 10}, .has_key_range = 1,
      .key_range = {2, 13}}},
    {"pooled sum and sink per head, GQA, rank 3",
     {.B = 2, .batched = 1, .Lq = 7, .H = 4, .Hkv = 2, .Dh = 4,
      .proj = TU_KW | TU_VW, .causal = ATTN_CAUSAL_TOP_LEFT},
     "{\"pool\":[2,3],\"reduce\":\"sum\",\"stats\":[\"sink\"]}",
     {.pool_q = 2, .pool_k = 3, .pool_reduce = ATTN_POOL_SUM,
      .stats = ATTN_STAT_SINK, .sink_tokens = 4}},
};
/* clang-format on */
#define N_RD ((int)(sizeof rd_cases / sizeof rd_cases[0]))

/* Decodes reply member `name` (of `parent`, dotted for messages) and
 * checks its shape and values against ref[0..n): within REPLY_TOL as
 * ‖got − ref‖₂ / ‖ref‖₂, or, with abs_tol > 0, each element within it. */
static void check_rd_tensor(const json_t *parent, const char *name,
                            const char *what, const int64_t *dim, int rank,
                            const double *ref, double abs_tol) {
  sh_tensor_t t;
  char why[256];
  ck_assert_msg(
      sh_tensor_decode(json_object_get(parent, name), &t, why, sizeof why) == 0,
      "%s: %s: %s", what, name, why);
  ck_assert_msg(t.rank == rank, "%s: %s has rank %d, not %d", what, name,
                t.rank, rank);
  for (int i = 0; i < rank; i++)
    ck_assert_msg(t.dim[i] == dim[i], "%s: %s dim %d is %lld, not %lld", what,
                  name, i, (long long)t.dim[i], (long long)dim[i]);
  if (abs_tol > 0)
    for (size_t i = 0; i < t.n; i++)
      ck_assert_msg(fabs(t.data[i] - ref[i]) <= abs_tol,
                    "%s: %s[%zu] is %.9g, reference %.9g", what, name, i,
                    (double)t.data[i], ref[i]);
  else
    ck_assert_msg(tu_rel_err(t.data, ref, t.n) <= REPLY_TOL,
                  "%s: %s relative error %g", what, name,
                  tu_rel_err(t.data, ref, t.n));
  sh_tensor_free(&t);
}

START_TEST(test_weights_reduce) {
  static const char *const encs[] = {"nested", "flat", "base64"};
  const rdcase_t *rc = &rd_cases[_i / 3];
  const char *enc = encs[_i % 3];
  tu_case_t c;
  tu_case_build(&c, &rc->s, 400 + (uint64_t)_i / 3);
  c.p.want_weights = c.p.want_mean_weights = c.p.want_head_outputs = 0;
  sh_enc_t e = {.encoding = enc, .metrics_off = 1};
  json_t *req = sh_request_json(&c.p, &e);
  json_error_t jerr;
  json_t *w = json_loads(rc->weights, 0, &jerr);
  ck_assert_ptr_nonnull(w);
  json_object_set_new(json_object_get(req, "return"), "weights", w);
  c.p.reduce = rc->r;
  ref_result_t rr;
  ref_reduce_t ref;
  ck_assert_int_eq(ref_attention(&c.p, &rr), 0);
  ck_assert_int_eq(ref_reduce(&c.p, &rr, &ref), 0);

  sh_resp_t r;
  json_t *rep = post_ok(req, &r, rc->name);
  ck_assert_msg(json_object_get(rep, "weights") == NULL, "%s: dense weights",
                rc->name);
  char what[160];
  snprintf(what, sizeof what, "%s, %s", rc->name, enc);
  /* [B, H', rows, cols] less the batch of a rank-2 request and H' for the
   * mean */
  int64_t dim[4] = {0};
  int n = 0;
  if (rc->s.batched)
    dim[n++] = rr.B;
  if (!rc->r.mean_heads)
    dim[n++] = rr.H;
  const int64_t rows = ref.q1 - ref.q0, K = rc->r.top_k;
  const json_t *tk = json_object_get(rep, "weights_top_k");
  ck_assert_msg((tk != NULL) == (K > 0), "%s: weights_top_k", what);
  if (K) {
    int64_t d[4] = {dim[0], dim[1], dim[2], dim[3]};
    d[n] = rows, d[n + 1] = K;
    size_t m = (size_t)(rr.B * ref.rH * rows * K);
    double *idx = malloc(m * sizeof(double));
    for (size_t i = 0; i < m; i++)
      idx[i] = (double)ref.top_k_index[i];
    /* the cases have no near ties: the indices are the reference's */
    check_rd_tensor(tk, "index", what, d, n + 2, idx, 0.5);
    check_rd_tensor(tk, "value", what, d, n + 2, ref.top_k_value, 1e-5);
    free(idx);
  }
  const json_t *pooled = json_object_get(rep, "weights_pooled");
  ck_assert_msg((pooled != NULL) == (rc->r.pool_q > 0), "%s: pooled", what);
  if (pooled) {
    int64_t d[4] = {dim[0], dim[1], dim[2], dim[3]};
    d[n] = ref.nq, d[n + 1] = ref.nk;
    check_rd_tensor(rep, "weights_pooled", what, d, n + 2, ref.pooled, 0);
  }
  const json_t *st = json_object_get(rep, "weights_stats");
  ck_assert_msg((st != NULL) == (rc->r.stats != 0), "%s: stats", what);
  static const char *const names[] = {"entropy", "sink", "distance"};
  const double *refs[] = {ref.entropy, ref.sink, ref.distance};
  for (int k = 0; st && k < 3; k++) {
    int want = (rc->r.stats >> k) & 1;
    ck_assert_msg((json_object_get(st, names[k]) != NULL) == want,
                  "%s: weights_stats.%s", what, names[k]);
    int64_t d[4] = {dim[0], dim[1], dim[2], dim[3]};
    d[n] = rows;
    if (want)
      check_rd_tensor(st, names[k], what, d, n + 1, refs[k], 0);
  }
  json_decref(rep);
  json_decref(req);
  sh_resp_free(&r);
  ref_reduce_free(&ref);
  ref_result_free(&rr);
  tu_case_free(&c);
}
END_TEST

/* ---- protocol ------------------------------------------------------------ */

static json_t *small_request(void) {
  return json_pack("{s:[[f,f],[f,f],[f,f]],s:i}", "query", 0.5, -1.0, 2.0, 0.25,
                   1.5, -0.75, "num_heads", 2);
}

START_TEST(test_id_echo) {
  static const char *const ids[] = {"req-1", "with \"quotes\" and ünïcode", ""};
  for (int k = 0; k < 3; k++) {
    json_t *req = small_request();
    json_object_set_new(req, "id", json_string(ids[k]));
    sh_resp_t r;
    json_t *rep = post_ok(req, &r, ids[k]);
    ck_assert_str_eq(json_string_value(json_object_get(rep, "id")), ids[k]);
    json_decref(rep);
    json_decref(req);
    sh_resp_free(&r);
  }
  /* no id: the member is there, null */
  json_t *req = small_request();
  sh_resp_t r;
  ck_assert_int_eq(sh_post_json(srv.port, req, &r), 0);
  json_t *rep = sh_json(&r);
  ck_assert_msg(json_is_null(json_object_get(rep, "id")), "%s", r.body);
  json_decref(rep);
  json_decref(req);
  sh_resp_free(&r);
}
END_TEST

/* Accept-Encoding: a reply of a few KB comes gzip'd; one over 1 MiB (here
 * 2.8 MB of base64 floats) comes as it is, as compressing it would cost
 * more than it saves (reply.c, COMPRESS_MAX). */
START_TEST(test_reply_compression) {
  static const char *const hdr[] = {"Accept-Encoding: gzip", NULL};

  char *big = sh_slow_body(2048, 256, 4, 3, NULL);
  /* the small one: a query of 4096 ones, written flat */
  attnd_buf_t b;
  attnd_buf_init(&b);
  attnd_buf_puts(&b, "{\"query\":{\"shape\":[64,64],\"data\":[");
  for (int i = 0; i < 64 * 64; i++)
    attnd_buf_puts(&b, i ? ",1" : "1");
  attnd_buf_puts(&b, "]},\"num_heads\":1}");

  const struct {
    const char *body;
    size_t len;
    int coded;
  } cases[] = {{b.data, b.len, 1}, {big, strlen(big), 0}};
  sh_server_t own; /* the defaults: a reply of megabytes is within them */
  ck_assert_int_eq(sh_server_start(&own, NULL), 0);
  sh_client_t c;
  sh_client_init(&c, own.port);
  for (int k = 0; k < 2; k++) {
    sh_req_t q = sh_attention_post(cases[k].body, cases[k].len);
    q.headers = hdr;
    sh_resp_t r;
    char v[64];
    ck_assert_int_eq(sh_http(&c, &q, &r), 0);
    ck_assert_int_eq(r.status, 200);
    const char *ce = sh_header(&r, "Content-Encoding", v, sizeof v);
    if (cases[k].coded) {
      ck_assert_msg(ce && strcmp(v, "gzip") == 0, "a %zu byte reply: %s",
                    r.body_len, ce ? v : "not coded");
      ck_assert(r.body_len > 2 && (unsigned char)r.body[0] == 0x1f);
    } else {
      ck_assert_msg(ce == NULL, "a %zu byte reply is coded %s", r.body_len, v);
      ck_assert(r.body_len > ((size_t)1 << 20) && r.body[0] == '{');
    }
    sh_resp_free(&r);
  }
  sh_client_free(&c);
  ck_assert_int_eq(sh_server_stop(&own, 10), 0);
  attnd_buf_free(&b);
  free(big);
}
END_TEST

START_TEST(test_request_id_header) {
  char body[] = "{\"query\":[[1,2],[3,4]],\"num_heads\":1}";
  static const char *const hdr[] = {"X-Request-Id: trace-abc.123", NULL};
  sh_client_t c;
  sh_client_init(&c, srv.port);
  sh_req_t q = sh_attention_post(body, strlen(body));
  q.headers = hdr;
  sh_resp_t r;
  char v[128], g1[128], g2[128];
  ck_assert_int_eq(sh_http(&c, &q, &r), 0);
  ck_assert_int_eq(r.status, 200);
  ck_assert_ptr_nonnull(sh_header(&r, "X-Request-Id", v, sizeof v));
  ck_assert_str_eq(v, "trace-abc.123");
  sh_resp_free(&r);

  /* generated when absent, and different each time, errors included */
  q.headers = NULL;
  ck_assert_int_eq(sh_http(&c, &q, &r), 0);
  ck_assert_int_eq(r.status, 200);
  ck_assert_ptr_nonnull(sh_header(&r, "X-Request-Id", g1, sizeof g1));
  ck_assert_int_gt(strlen(g1), 0);
  sh_resp_free(&r);
  q.body = "{}";
  q.len = 2;
  ck_assert_int_eq(sh_http(&c, &q, &r), 0);
  ck_assert_int_eq(r.status, 422);
  ck_assert_ptr_nonnull(sh_header(&r, "X-Request-Id", g2, sizeof g2));
  ck_assert_int_gt(strlen(g2), 0);
  ck_assert_str_ne(g1, g2);
  sh_resp_free(&r);

  /* and on the GET endpoints */
  r = get("/healthz");
  ck_assert_ptr_nonnull(sh_header(&r, "X-Request-Id", v, sizeof v));
  sh_resp_free(&r);
  sh_client_free(&c);
}
END_TEST

/* A reply's metrics: every member there; flops the plan's count
 * (core/plan.c, derive_sizes), `flops` here; the core's three stages
 * within compute_ms, and decode, queue, compute and encode, which follow
 * one another, within total_ms. Each is printed to 3 decimals, rounded. */
static void check_metrics(const sh_resp_t *r, double flops) {
  ck_assert_msg(r->status == 200, "%ld %s", r->status, r->body);
  json_t *rep = sh_json(r);
  const json_t *m = json_object_get(rep, "metrics");
  ck_assert_msg(json_is_object(m), "metrics are on by default: %.300s",
                r->body);
  static const char *const keys[] = {"queue_ms", "compute_ms", "total_ms",
                                     "threads", "flops"};
  double v[5];
  for (int k = 0; k < 5; k++) {
    const json_t *x = json_object_get(m, keys[k]);
    ck_assert_msg(json_is_number(x), "metrics.%s: %.300s", keys[k], r->body);
    v[k] = json_number_value(x);
  }
  ck_assert_msg(v[4] == flops, "metrics.flops %.0f, the plan's formula %.0f",
                v[4], flops);
  static const char *const stages[] = {"decode", "projection", "attention",
                                       "output_projection", "encode"};
  const json_t *st = json_object_get(m, "stages_ms");
  ck_assert_msg(json_is_object(st), "metrics.stages_ms: %.300s", r->body);
  double ms[5];
  for (int k = 0; k < 5; k++) {
    const json_t *x = json_object_get(st, stages[k]);
    ck_assert_msg(json_is_number(x), "metrics.stages_ms.%s: %.300s", stages[k],
                  r->body);
    ms[k] = json_number_value(x);
  }
  const double half = 0.0005; /* rounding, per printed value */
  ck_assert_msg(ms[1] + ms[2] + ms[3] <= v[1] + 4 * half,
                "projection %.3f + attention %.3f + output_projection %.3f "
                "over compute_ms %.3f",
                ms[1], ms[2], ms[3], v[1]);
  ck_assert_msg(ms[0] + v[0] + v[1] + ms[4] <= v[2] + 5 * half,
                "decode %.3f + queue %.3f + compute %.3f + encode %.3f over "
                "total_ms %.3f",
                ms[0], v[0], v[1], ms[4], v[2]);
  ck_assert_msg(v[1] > 0 && v[2] > 0, "compute_ms %.3f, total_ms %.3f", v[1],
                v[2]);
  json_decref(rep);
}

/* POSTs body and returns its reply's metrics.threads. */
static json_int_t threads_of(char *body) {
  sh_resp_t r;
  ck_assert_int_eq(sh_post(srv.port, body, strlen(body), &r), 0);
  ck_assert_msg(r.status == 200, "%ld %.300s", r.status, r.body);
  json_t *v = sh_json(&r);
  json_int_t t = json_integer_value(
      json_object_get(json_object_get(v, "metrics"), "threads"));
  json_decref(v);
  sh_resp_free(&r);
  free(body);
  return t;
}

/* threads_per_request = auto: /v1/info says so, with its cap; a request
 * alone runs on every CPU up to the cap, and one whose work is too small
 * to share (under 2 x ATTND_FLOPS_PER_THREAD) on one, as does the large
 * one beside a request whose body is arriving, until a sweep has seen
 * that body stall. Catches the scheduler's grant not reaching the core
 * (threads 0 or the plan's), a small request given every core, requests
 * outside the scheduler not counted (attnd_sched_set_arriving), and a
 * stalled body counted for as long as it stalls (a slow uploader took a
 * CPU from every request that started meanwhile). */
START_TEST(test_threads_auto) {
  sh_resp_t r = get("/v1/info");
  ck_assert_int_eq(r.status, 200);
  json_t *v = sh_json(&r);
  ck_assert_str_eq(json_string_value(json_object_get(v, "threads_per_request")),
                   "auto");
  ck_assert_int_eq(
      json_integer_value(json_object_get(v, "max_threads_per_request")), 2);
  json_decref(v);
  sh_resp_free(&r);
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  /* 2·L²·(Dh + Dv) = 268M flops: 4 threads' worth, the cap 2 */
  ck_assert_int_eq(threads_of(sh_slow_body(1024, 64, 1, 7, NULL)),
                   cpus < 2 ? 1 : 2);
  /* 17M flops: one thread's */
  ck_assert_int_eq(threads_of(sh_slow_body(256, 64, 4, 8, NULL)), 1);
  /* given back before the reply (the done callback follows) */
  ck_assert_double_eq(sh_metric(srv.port, "attnd_busy_threads"), 0);
  /* beside a request whose body is still coming, the large one gets a CPU
   * less: that request's HTTP thread has one, and it will want a worker */
  int fd = sh_connect(srv.port);
  ck_assert_int_ge(fd, 0);
  static const char head[] = "POST /v1/attention HTTP/1.1\r\nHost: t\r\n"
                             "Content-Type: application/json\r\n"
                             "Content-Length: 100\r\n\r\n{\"query\":";
  ck_assert_int_eq(write(fd, head, sizeof head - 1),
                   (ssize_t)(sizeof head - 1));
  ck_assert_msg(sh_wait_metric(srv.port, "attnd_inflight", 1, 10) >= 1,
                "the request with its body coming is not in flight");
  ck_assert_int_eq(threads_of(sh_slow_body(1024, 64, 1, 7, NULL)), 1);
  /* once a sweep (each second here) has seen that body stall, it no
   * longer counts: its HTTP thread waits for bytes that do not come */
  json_int_t t = 0;
  for (double t0 = sh_now(); sh_now() - t0 < 6.0 && t != (cpus < 2 ? 1 : 2);)
    t = threads_of(sh_slow_body(1024, 64, 1, 7, NULL));
  ck_assert_msg(t == (cpus < 2 ? 1 : 2),
                "beside a body stalled for 6 s, a request was given %lld "
                "threads of %ld CPUs",
                (long long)t, cpus);
  close(fd);
  /* that request gone, a new one's body arriving counts again */
  double left = -1;
  for (double t0 = sh_now(); sh_now() - t0 < 10.0 && left != 0; usleep(5000))
    left = sh_metric(srv.port, "attnd_inflight");
  ck_assert_msg(left == 0, "the stalled request is still in flight");
  fd = sh_connect(srv.port);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(write(fd, head, sizeof head - 1),
                   (ssize_t)(sizeof head - 1));
  ck_assert_msg(sh_wait_metric(srv.port, "attnd_inflight", 1, 10) >= 1,
                "the second request with its body coming is not in flight");
  ck_assert_int_eq(threads_of(sh_slow_body(1024, 64, 1, 7, NULL)), 1);
  close(fd);
}
END_TEST

/* The workers a --print-config of the attnd under test reports, with the
 * environment `env` ("NAME=value" pairs, NULL-terminated) added. */
static long printed_workers(const char *const *env) {
  const char *bin = getenv("ATTND_BIN");
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "%s --print-config 2>/dev/null",
           bin && *bin ? bin : "build/attnd");
  for (const char *const *e = env; *e; e++)
    ck_assert_int_eq(putenv((char *)*e), 0);
  FILE *f = popen(cmd, "r");
  ck_assert_ptr_nonnull(f);
  char line[256];
  long workers = -1;
  while (fgets(line, sizeof line, f))
    if (strncmp(line, "workers = ", 10) == 0)
      workers = strtol(line + 10, NULL, 10);
  ck_assert_int_eq(pclose(f), 0);
  for (const char *const *e = env; *e; e++) {
    char name[64];
    snprintf(name, sizeof name, "%.*s", (int)strcspn(*e, "="), *e);
    unsetenv(name);
  }
  return workers;
}

/* OpenMP's binding variables: libgomp binds the first thread to the first
 * place before main, and attnd's count of CPUs (and every thread it
 * starts) would follow that one CPU. The places are the CPUs given to
 * OpenMP: with every CPU in them, attnd has as many workers as without
 * the variables. Bug: workers = 1 under GOMP_CPU_AFFINITY=0-1, or
 * OMP_PROC_BIND=true, on 2 CPUs. (With one CPU it cannot fail.) */
START_TEST(test_threads_omp_binding) {
  static const char *const none[] = {NULL};
  long plain = printed_workers(none);
  ck_assert_int_ge(plain, 1);
  char all[64];
  snprintf(all, sizeof all, "GOMP_CPU_AFFINITY=0-%ld",
           sysconf(_SC_NPROCESSORS_CONF) - 1);
  const char *const cases[][3] = {
      {all, NULL},
      {"OMP_PROC_BIND=true", NULL},
      {"OMP_PLACES=threads", "OMP_PROC_BIND=close"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    ck_assert_msg(printed_workers(cases[i]) == plain,
                  "%s %s: workers %ld, %ld without", cases[i][0],
                  cases[i][1] ? cases[i][1] : "", printed_workers(cases[i]),
                  plain);
}
END_TEST

/* OpenMP's variables that size a team below its num_threads: libgomp's
 * dynamic adjustment under OMP_DYNAMIC=true gives at most OMP_NUM_THREADS
 * (and less under load), OMP_THREAD_LIMIT=1 (per contention group: each
 * of attnd's threads is its own) and OMP_MAX_ACTIVE_LEVELS=0 one. A
 * request, one that test_threads_auto runs alone
 * on 2 threads, and a small one computed inline on its HTTP thread with
 * threads_per_request 2, must run on the team it was given, and say so:
 * its metrics.threads is its own thread plus the threads its team added to
 * the process, /v1/info's max_threads_per_request the most a team can
 * have, and a threads_per_request above that is refused at start, naming
 * the variable. Bug: metrics.threads 2 (and 2 threads counted busy) on a team
 * of 1. */
static const char *const omp_fixed_args[] = {
    "--workers", "2", "--threads-per-request", "2", NULL};
static const struct {
  const char *env[3];
  int fixed; /* threads_per_request 2, and a request computed inline */
  int team;  /* on 2 CPUs or more (fixed: on any) */
  int cap;   /* max_threads_per_request, on 2 CPUs or more */
  const char *refused; /* threads_per_request 2 refused, naming this */
} omp_cases[] = {
    {{"OMP_DYNAMIC=true", "OMP_NUM_THREADS=1"}, 0, 2, 2, NULL},
    {{"OMP_DYNAMIC=true", "OMP_NUM_THREADS=1"}, 1, 2, 2, NULL},
    {{"OMP_THREAD_LIMIT=1"}, 0, 1, 1, "OMP_THREAD_LIMIT"},
    {{"OMP_MAX_ACTIVE_LEVELS=0"}, 0, 1, 1, "OMP_MAX_ACTIVE_LEVELS"},
};
#define N_OMP_CASES ((int)(sizeof omp_cases / sizeof omp_cases[0]))

START_TEST(test_threads_omp_team) {
  const char *const *env = omp_cases[_i].env;
  int fixed = omp_cases[_i].fixed;
  for (int k = 0; env[k]; k++)
    ck_assert_int_eq(putenv((char *)env[k]), 0);
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  int team = cpus < 2 && !fixed ? 1 : omp_cases[_i].team,
      cap = cpus < 2 ? 1 : omp_cases[_i].cap;
  sh_server_t own;
  ck_assert_int_eq(sh_server_start(&own, fixed ? omp_fixed_args : srv_args), 0);

  sh_resp_t r;
  long before = sh_proc_status(own.pid, "Threads:");
  /* 268M flops alone on a worker; 1M flops, under inline_max_flops */
  char *body = fixed ? sh_slow_body(64, 64, 1, 7, NULL)
                     : sh_slow_body(1024, 64, 1, 7, NULL);
  ck_assert_int_eq(sh_post(own.port, body, strlen(body), &r), 0);
  free(body);
  ck_assert_msg(r.status == 200, "%ld %.300s", r.status, r.body);
  long after = sh_proc_status(own.pid, "Threads:");
  json_t *v = sh_json(&r);
  const json_t *m = json_object_get(v, "metrics");
  json_int_t t = json_integer_value(json_object_get(m, "threads")),
             w = json_integer_value(json_object_get(m, "worker"));
  json_decref(v);
  sh_resp_free(&r);
  ck_assert_msg(before > 0 && t == 1 + (after - before) && t == team &&
                    (w == -1) == fixed,
                "%s %s: metrics.threads %lld, a team of %ld (want %d), "
                "worker %lld",
                env[0], env[1] ? env[1] : "", (long long)t,
                1 + (after - before), team, (long long)w);
  ck_assert_int_eq(sh_get(own.port, "/v1/info", &r), 0);
  v = sh_json(&r);
  ck_assert_int_eq(
      json_integer_value(json_object_get(v, "max_threads_per_request")), cap);
  json_decref(v);
  sh_resp_free(&r);
  ck_assert_int_eq(sh_server_stop(&own, 10), 0);

  if (omp_cases[_i].refused) {
    const char *bin = getenv("ATTND_BIN");
    char cmd[4200], out[4096] = "";
    snprintf(cmd, sizeof cmd,
             "%s --threads-per-request 2 --print-config 2>&1 >/dev/null",
             bin && *bin ? bin : "build/attnd");
    FILE *f = popen(cmd, "r");
    ck_assert_ptr_nonnull(f);
    size_t n = fread(out, 1, sizeof out - 1, f);
    out[n] = 0;
    int st = pclose(f);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 2 &&
                      strstr(out, "threads_per_request: 2 [flag") &&
                      strstr(out, omp_cases[_i].refused),
                  "%s: status %d, %s", env[0], st, out);
  }
  for (int k = 0; env[k]; k++) {
    char name[64];
    snprintf(name, sizeof name, "%.*s", (int)strcspn(env[k], "="), env[k]);
    unsetenv(name);
  }
}
END_TEST

/* attnd_backend_requests_total and attnd_backend_compute_seconds_total:
 * a computed request counts once, under the backend it ran on (the cpu
 * here), its compute time added; nothing under cuda. Catches the backend
 * label swapped, and a request counted twice or not at all. */
START_TEST(test_backend_metrics) {
  const char *n_cpu = "attnd_backend_requests_total{backend=\"cpu\"}",
             *n_cuda = "attnd_backend_requests_total{backend=\"cuda\"}",
             *s_cpu = "attnd_backend_compute_seconds_total{backend=\"cpu\"}";
  double cpu0 = sh_metric(srv.port, n_cpu), cuda0 = sh_metric(srv.port, n_cuda),
         sec0 = sh_metric(srv.port, s_cpu);
  ck_assert_msg(cpu0 >= 0 && cuda0 >= 0 && sec0 >= 0, "a series is missing");
  char *body = sh_slow_body(512, 64, 2, 5, NULL);
  sh_resp_t r = post_text(body);
  free(body);
  ck_assert_int_eq(r.status, 200);
  sh_resp_free(&r);
  ck_assert_double_eq(sh_metric(srv.port, n_cpu), cpu0 + 1);
  ck_assert_double_eq(sh_metric(srv.port, n_cuda), cuda0);
  ck_assert_msg(sh_metric(srv.port, s_cpu) > sec0, "no compute time added");
  /* the core's stages, by backend: the attention of L 512 takes time */
  static const char *const stage[3] = {"projection", "attention", "output"};
  for (int k = 0; k < 3; k++) {
    char name[128];
    snprintf(name, sizeof name,
             "attnd_backend_stage_seconds_total{backend=\"cuda\","
             "stage=\"%s\"}",
             stage[k]);
    ck_assert_double_eq(sh_metric(srv.port, name), 0);
    snprintf(name, sizeof name,
             "attnd_backend_stage_seconds_total{backend=\"cpu\","
             "stage=\"%s\"}",
             stage[k]);
    ck_assert_msg(sh_metric(srv.port, name) >= 0, "%s is missing", name);
  }
  ck_assert_msg(sh_metric(srv.port, "attnd_backend_stage_seconds_total{"
                                    "backend=\"cpu\",stage=\"attention\"}") > 0,
                "no attention time");
  /* without a GPU, the device's series are there, and 0 */
  attn_cuda_info_t ci;
  attn_cuda_info(&ci);
  if (ci.usable)
    return;
  static const char *const dev[] = {
      "attnd_device_usable", "attnd_device_memory_limit_bytes",
      "attnd_device_memory_held_bytes",
      "attnd_device_pool_bytes{state=\"reserved\"}",
      "attnd_device_bytes{state=\"total\"}"};
  for (size_t k = 0; k < sizeof dev / sizeof dev[0]; k++)
    ck_assert_msg(sh_metric(srv.port, dev[k]) == 0, "%s: %g", dev[k],
                  sh_metric(srv.port, dev[k]));
}
END_TEST

START_TEST(test_metrics_in_reply) {
  json_t *req = small_request();
  sh_resp_t r;
  ck_assert_int_eq(sh_post_json(srv.port, req, &r), 0);
  /* B 1, Lq = Lk 3, H 2, Dh = Dv 1: 2·B·H·Lq·Lk·(Dh + Dv) */
  check_metrics(&r, 2.0 * 1 * 2 * 3 * 3 * (1 + 1));
  json_t *rep = sh_json(&r);
  const json_t *m = json_object_get(rep, "metrics");
  ck_assert_int_eq(json_integer_value(json_object_get(m, "threads")), 1);
  /* a request this small is computed on the HTTP thread (worker -1); one
   * over inline_max_flops (4M) by one of the two workers */
  json_int_t w = json_integer_value(json_object_get(m, "worker"));
  ck_assert_msg(w == -1, "worker %lld for %g flops", (long long)w,
                json_number_value(json_object_get(m, "flops")));
  /* such a request waits for no worker: its queue_ms is 0, as docs/api.md
   * says, in each of a few, and in the queue wait's histogram (it was the
   * microseconds from its submission to its start on this thread, which
   * the reply's 3 decimals print as 0.000 now and then; the histogram's
   * sum, in seconds to 6 decimals, adds them up) */
  static const char sum[] = "attnd_queue_wait_seconds_sum{protocol=\"v1\"}",
                    count[] = "attnd_queue_wait_seconds_count{protocol=\"v1\"}";
  double sum0 = sh_metric(srv.port, sum), count0 = sh_metric(srv.port, count);
  for (int k = 0; k < 16; k++) {
    sh_resp_t q = post_text("{\"query\":[[1,2]],\"num_heads\":1}");
    json_t *v = sh_json(&q);
    const json_t *qm = json_object_get(v, "metrics");
    double ms = json_number_value(json_object_get(qm, "queue_ms"));
    ck_assert_msg(
        json_integer_value(json_object_get(qm, "worker")) == -1 && ms == 0,
        "request %d: worker %lld, queue_ms %g", k,
        (long long)json_integer_value(json_object_get(qm, "worker")), ms);
    json_decref(v);
    sh_resp_free(&q);
  }
  ck_assert_msg(sh_metric(srv.port, count) == count0 + 16 &&
                    sh_metric(srv.port, sum) == sum0,
                "16 waits of 0: count %g to %g, sum %g to %g", count0,
                sh_metric(srv.port, count), sum0, sh_metric(srv.port, sum));
  char *big = sh_slow_body(256, 64, 4, 5, NULL);
  sh_resp_t rb;
  ck_assert_int_eq(sh_post(srv.port, big, strlen(big), &rb), 0);
  check_metrics(&rb, 2.0 * 1 * 4 * 256 * 256 * (16 + 16));
  json_t *vb = sh_json(&rb);
  const json_t *mb = json_object_get(vb, "metrics");
  w = json_integer_value(json_object_get(mb, "worker"));
  ck_assert_msg(w >= 0 && w < 2, "worker %lld of 2 for %g flops", (long long)w,
                json_number_value(json_object_get(mb, "flops")));
  json_decref(vb);
  sh_resp_free(&rb);
  free(big);

  /* every projection, Lq 3 != Lk 4, Dh 1 != Dv 2 (v_weight's 4 rows over
   * 2 heads), Eq = Ek 2, Ev 4, Eo 3 */
  json_t *pr = json_pack(
      "{s:[[f,f],[f,f],[f,f]],s:[[f,f],[f,f],[f,f],[f,f]],"
      "s:[[f,f,f,f],[f,f,f,f],[f,f,f,f],[f,f,f,f]],s:i,"
      "s:{s:[[f,f],[f,f]],s:[[f,f],[f,f]],"
      "s:[[f,f,f,f],[f,f,f,f],[f,f,f,f],[f,f,f,f]],"
      "s:[[f,f,f,f],[f,f,f,f],[f,f,f,f]]}}",
      "query", .5, -1., 2., .25, 1.5, -.75, "key", 1., 0., 0., 1., -1., .5, .25,
      .25, "value", 1., 2., 3., 4., -1., 0., 1., 0., .5, .5, -.5, 2., 0., 1.,
      1., -1., "num_heads", 2, "projections", "q_weight", 1., .5, -.5, 1.,
      "k_weight", .25, 1., 1., -.25, "v_weight", 1., 0., 0., 0., 0., 1., 0., 0.,
      0., 0., 1., 0., 0., 0., 0., 1., "o_weight", 1., 0., 1., 0., 0., 1., 0.,
      1., .5, .5, .5, .5);
  ck_assert_ptr_nonnull(pr);
  sh_resp_t rp;
  ck_assert_int_eq(sh_post_json(srv.port, pr, &rp), 0);
  double B = 1, Lq = 3, Lk = 4, H = 2, Hkv = 2, Dh = 1, Dv = 2, Eq = 2, Ek = 2,
         Ev = 4, Eo = 3;
  check_metrics(&rp, 2 * B * Lq * Eq * H * Dh +       /* q_weight */
                         2 * B * Lk * Ek * Hkv * Dh + /* k_weight */
                         2 * B * Lk * Ev * Hkv * Dv + /* v_weight */
                         2 * B * Lq * H * Dv * Eo +   /* o_weight */
                         2 * B * H * Lq * Lk * (Dh + Dv));
  sh_resp_free(&rp);
  json_decref(pr);

  /* Server-Timing on a 200 */
  char t[256];
  ck_assert_ptr_nonnull(sh_header(&r, "Server-Timing", t, sizeof t));
  ck_assert_msg(strstr(t, "queue;dur=") && strstr(t, "compute;dur=") &&
                    strstr(t, "total;dur="),
                "Server-Timing: %s", t);
  json_decref(rep);
  sh_resp_free(&r);

  /* return.metrics false */
  json_object_set_new(req, "return", json_pack("{s:b}", "metrics", 0));
  rep = post_ok(req, &r, "return.metrics false");
  ck_assert_msg(json_object_get(rep, "metrics") == NULL, "%s", r.body);
  ck_assert_ptr_nonnull(json_object_get(rep, "output"));
  json_decref(rep);
  json_decref(req);
  sh_resp_free(&r);
}
END_TEST

START_TEST(test_health_ready) {
  sh_resp_t r = get("/healthz");
  ck_assert_int_eq(r.status, 200);
  sh_resp_free(&r);
  r = get("/readyz");
  ck_assert_int_eq(r.status, 200);
  sh_resp_free(&r);
  r = request("HEAD", "/healthz", NULL, NULL);
  ck_assert_int_eq(r.status, 200);
  sh_resp_free(&r);
}
END_TEST

START_TEST(test_info) {
  sh_resp_t r = get("/v1/info");
  ck_assert_int_eq(r.status, 200);
  json_t *v = sh_json(&r);
  ck_assert_msg(json_is_object(v), "%s", r.body);
  ck_assert_str_eq(json_string_value(json_object_get(v, "version")),
                   ATTN_VERSION);
  const json_t *lim = json_object_get(v, "limits");
  static const char *const keys[] = {
      "max_body_bytes",     "max_response_bytes", "max_batch",
      "max_seq_len",        "max_heads",          "max_tensor_elements",
      "default_timeout_ms", "max_timeout_ms"};
  for (int k = 0; k < 8; k++)
    ck_assert_msg(json_integer_value(json_object_get(lim, keys[k])) > 0,
                  "limits.%s: %s", keys[k], r.body);
  ck_assert_int_eq(json_integer_value(json_object_get(lim, "max_seq_len")),
                   32768);
  /* a limit is a number even where its auto found nothing: no GPU, 0 */
  attn_cuda_info_t ci;
  attn_cuda_info(&ci);
  const json_t *dev = json_object_get(lim, "max_device_memory_bytes");
  ck_assert_msg(json_is_integer(dev), "%s", r.body);
  ck_assert_int_eq(json_integer_value(dev) > 0, ci.usable);
  ck_assert_int_eq(json_integer_value(json_object_get(v, "workers")), 2);
  ck_assert_int_eq(
      json_integer_value(json_object_get(v, "threads_per_request")), 1);
  const json_t *b = json_object_get(v, "backend");
  static const char *const bk[] = {"blas", "blas_kernel", "simd"};
  for (int k = 0; k < 3; k++) {
    const char *s = json_string_value(json_object_get(b, bk[k]));
    ck_assert_msg(s && *s, "backend.%s: %s", bk[k], r.body);
  }
  const char *simd = json_string_value(json_object_get(b, "simd"));
  ck_assert_msg(strcmp(simd, "generic") == 0 || strcmp(simd, "avx2") == 0 ||
                    strcmp(simd, "avx512") == 0,
                "simd %s", simd);
  json_decref(v);
  sh_resp_free(&r);
}
END_TEST

/* The backend a /v1 request names (docs/cuda.md): where the cuda backend
 * cannot run, asking for it is refused naming "backend" and why (422 in a
 * build without CUDA, 503 in one whose host has no usable GPU); bf16 on
 * the cpu is 422 naming "precision"; /v1/info lists the backends a
 * request may name. Where cuda is usable, it computes. A session created
 * with "backend": "cuda" is refused the same; one created without is the
 * cpu's, and a step of it asking for cuda is 422 naming backend. */
START_TEST(test_backend_choice) {
  attn_cuda_info_t ci;
  attn_cuda_info(&ci);
  static const char base[] = "{\"query\": [[1, 2], [3, 4]], \"num_heads\": 1";
  char body[256];
  snprintf(body, sizeof body, "%s, \"backend\": \"cuda\"}", base);
  sh_resp_t r = post_text(body);
  if (ci.usable)
    ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
  else
    sh_assert_error(&r, ci.built ? 503 : 422,
                    ci.built ? "backend_unavailable" : "invalid_value",
                    "backend", "cuda", ci.status, NULL);
  sh_resp_free(&r);
  snprintf(body, sizeof body,
           "%s, \"backend\": \"cpu\", \"precision\": \"bf16\"}", base);
  r = post_text(body);
  sh_assert_error(&r, 422, "invalid_value", "precision", "bf16", "cuda", NULL);
  sh_resp_free(&r);
  snprintf(body, sizeof body, "%s, \"backend\": \"gpu\"}", base);
  r = post_text(body);
  sh_assert_error(&r, 422, "invalid_value", "backend", "gpu", NULL);
  sh_resp_free(&r);
  /* a session on the GPU (docs/sessions.md): refused as that request is;
   * a session created without one is the cpu's, and its step cannot ask
   * for cuda */
  static const char pre[] = "{\"num_heads\": 1, \"head_dim\": 2";
  snprintf(body, sizeof body, "%s, \"backend\": \"cuda\"}", pre);
  r = request("POST", "/v1/sessions", "application/json", body);
  if (ci.usable) {
    ck_assert_msg(r.status == 201, "%ld %s", r.status, r.body);
    ck_assert_ptr_nonnull(strstr(r.body, "\"backend\":\"cuda\""));
  } else {
    sh_assert_error(&r, ci.built ? 503 : 422,
                    ci.built ? "backend_unavailable" : "invalid_value",
                    "backend", "cuda", ci.status, NULL);
  }
  sh_resp_free(&r);
  snprintf(body, sizeof body, "%s}", pre);
  r = request("POST", "/v1/sessions", "application/json", body);
  ck_assert_msg(r.status == 201, "%ld %s", r.status, r.body);
  json_t *sv = sh_json(&r);
  char path[96];
  snprintf(path, sizeof path, "/v1/sessions/%s",
           json_string_value(json_object_get(sv, "session")));
  json_decref(sv);
  sh_resp_free(&r);
  r = get(path);
  ck_assert_msg(r.status == 200 && strstr(r.body, "\"backend\":\"cpu\""),
                "%ld %s", r.status, r.body);
  sh_resp_free(&r);
  strcat(path, "/attention");
  r = request("POST", path, "application/json",
              "{\"query\": [[1, 2]], \"key\": [[1, 0]], \"value\": [[3, 4]], "
              "\"backend\": \"cuda\"}");
  sh_assert_error(&r, 422, "invalid_value", "backend", "\"cuda\"",
                  "on the cpu backend", NULL);
  sh_resp_free(&r);
  snprintf(body, sizeof body,
           "%s, \"backend\": \"cpu\", \"precision\": \"fp32\"}", base);
  r = post_text(body);
  ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
  sh_resp_free(&r);

  r = get("/v1/info");
  json_t *v = sh_json(&r);
  const json_t *b = json_object_get(v, "backend");
  const json_t *avail = json_object_get(b, "available");
  ck_assert_msg(json_is_array(avail) &&
                    json_array_size(avail) == (ci.usable ? 2u : 1u),
                "backend.available: %s", r.body);
  ck_assert_str_eq(json_string_value(json_array_get(avail, 0)), "cpu");
  ck_assert_str_eq(json_string_value(json_object_get(b, "default")), "cpu");
  const json_t *cu = json_object_get(b, "cuda");
  ck_assert_int_eq(json_is_true(json_object_get(cu, "built")), ci.built);
  ck_assert_int_eq(json_is_true(json_object_get(cu, "usable")), ci.usable);
  ck_assert_str_eq(json_string_value(json_object_get(cu, "status")), ci.status);
  json_decref(v);
  sh_resp_free(&r);
}
END_TEST

/* ---- a session on the GPU ----------------------------------------------- */

/* Its backend's name in test_cuda_session: "cuda"; "cpu" checks the test
 * itself on a machine without a GPU (cpu against cpu, to the bit). */
static const char *const gpu_backend = "cuda";
#define GPU_SESSION_TOL 1e-4 /* check_cuda's fp32 tolerance */

/* A new pre-projected session (H 2, Hkv 1, Dh 8) on `backend`: its path,
 * /v1/sessions/{id}, in path. */
static void gpu_session_new(const char *backend, char path[64]) {
  char body[160];
  snprintf(body, sizeof body,
           "{\"num_heads\": 2, \"num_kv_heads\": 1, \"head_dim\": 8, "
           "\"backend\": \"%s\"}",
           backend);
  sh_resp_t r = request("POST", "/v1/sessions", "application/json", body);
  ck_assert_msg(r.status == 201, "%ld %s", r.status, r.body);
  json_t *v = sh_json(&r);
  ck_assert_str_eq(json_string_value(json_object_get(v, "backend")), backend);
  snprintf(path, 64, "/v1/sessions/%s",
           json_string_value(json_object_get(v, "session")));
  json_decref(v);
  sh_resp_free(&r);
}

/* POST `path``sub` with body, answered `status`: the new session's path
 * in fork (a fork), or the reply's output (a step: sh_tensor_free it). */
static sh_tensor_t gpu_session_post(const char *path, const char *sub,
                                    const char *body, long status,
                                    char fork[64]) {
  char at[96];
  snprintf(at, sizeof at, "%s%s", path, sub);
  sh_resp_t r = request("POST", at, "application/json", body);
  ck_assert_msg(r.status == status, "POST %s: %ld %s", at, r.status, r.body);
  json_t *v = sh_json(&r);
  sh_tensor_t t = {0};
  if (fork)
    snprintf(fork, 64, "/v1/sessions/%s",
             json_string_value(json_object_get(v, "session")));
  else if (strcmp(sub, "/attention") == 0)
    t = reply_tensor(v, "output");
  json_decref(v);
  sh_resp_free(&r);
  return t;
}

/* The same step of n random tokens to the cpu session and the GPU one:
 * their outputs agree within GPU_SESSION_TOL. */
static void gpu_session_step(const char *cpu, const char *gpu, int n,
                             tu_rng_t *rng) {
  attnd_buf_t b;
  attnd_buf_init(&b);
  static const char *const names[3] = {"query", "key", "value"};
  static const int widths[3] = {16, 8, 8};
  for (int m = 0; m < 3; m++) {
    attnd_buf_printf(&b, "%s\"%s\": [", m ? ", " : "{", names[m]);
    for (int i = 0; i < n; i++) {
      attnd_buf_puts(&b, i ? ", [" : "[");
      for (int k = 0; k < widths[m]; k++)
        attnd_buf_printf(&b, "%s%.6f", k ? ", " : "", tu_rng_sym(rng));
      attnd_buf_puts(&b, "]");
    }
    attnd_buf_puts(&b, "]");
  }
  attnd_buf_puts(&b, "}");
  sh_tensor_t want = gpu_session_post(cpu, "/attention", b.data, 200, NULL),
              got = gpu_session_post(gpu, "/attention", b.data, 200, NULL);
  ck_assert_uint_eq(got.n, want.n);
  double err = tu_rel_err_f(got.data, want.data, want.n);
  ck_assert_msg(err <= GPU_SESSION_TOL, "%s after %s: %d tokens: error %g", gpu,
                cpu, n, err);
  sh_tensor_free(&want);
  sh_tensor_free(&got);
  attnd_buf_free(&b);
}

/* Where the cuda backend is usable (nothing to do elsewhere: the create is
 * refused, test_backend_choice): a session on the GPU computes what one on
 * the cpu does, step by step, across a page's end (64 tokens), after a
 * fork (its first step copies the shared page on the GPU, and the parent's
 * next step must not see the fork's tokens) and after a truncate; its
 * pages count in attnd_kv_device_bytes, not attnd_kv_bytes, until they are
 * deleted. Catches: device pages written or read in another layout than
 * the cpu's, a fork writing into its parent's page, a truncate leaving
 * stale tokens visible, pages counted in the host pool. */
START_TEST(test_cuda_session) {
  attn_cuda_info_t ci;
  attn_cuda_info(&ci);
  if (!ci.usable && strcmp(gpu_backend, "cuda") == 0)
    return;
  tu_rng_t rng;
  tu_rng_seed(&rng, 31);
  char cpu[64], gpu[64], fcpu[64], fgpu[64];
  gpu_session_new("cpu", cpu);
  gpu_session_new(gpu_backend, gpu);
  gpu_session_step(cpu, gpu, 1, &rng);
  gpu_session_step(cpu, gpu, 70, &rng); /* 71: a page and 7 tokens */
  gpu_session_post(cpu, "/fork", "{}", 201, fcpu);
  gpu_session_post(gpu, "/fork", "{}", 201, fgpu);
  gpu_session_step(fcpu, fgpu, 2, &rng);
  gpu_session_step(cpu, gpu, 2, &rng);
  gpu_session_post(cpu, "/truncate", "{\"length\": 60}", 200, NULL);
  gpu_session_post(gpu, "/truncate", "{\"length\": 60}", 200, NULL);
  gpu_session_step(cpu, gpu, 5, &rng);
  gpu_session_step(fcpu, fgpu, 64, &rng);
  /* the GPU's pages: the parent's 2 and the fork's 3, none shared now */
  double used = sh_metric(srv.port, "attnd_kv_device_bytes{state=\"used\"}");
  if (strcmp(gpu_backend, "cuda") == 0)
    ck_assert_msg(used > 0, "attnd_kv_device_bytes used %g", used);
  const char *all[4] = {cpu, gpu, fcpu, fgpu};
  for (int i = 0; i < 4; i++) {
    sh_resp_t r = request("DELETE", all[i], NULL, NULL);
    ck_assert_int_eq(r.status, 204);
    sh_resp_free(&r);
  }
  ck_assert(sh_metric(srv.port, "attnd_kv_device_bytes{state=\"used\"}") == 0);
}
END_TEST

/* Every line of a Prometheus text is a comment or "name{labels} value". */
static void assert_prometheus(const char *text) {
  regex_t re;
  ck_assert_int_eq(
      regcomp(&re,
              "^[a-zA-Z_:][a-zA-Z0-9_:]*(\\{[a-zA-Z_][a-zA-Z0-9_]*=\"[^\"]*\""
              "(,[a-zA-Z_][a-zA-Z0-9_]*=\"[^\"]*\")*\\})? "
              "[-+]?([0-9]+(\\.[0-9]*)?([eE][-+]?[0-9]+)?|\\+Inf|NaN)$",
              REG_EXTENDED | REG_NOSUB),
      0);
  char *copy = strdup(text);
  int lines = 0;
  for (char *save, *l = strtok_r(copy, "\n", &save); l;
       l = strtok_r(NULL, "\n", &save)) {
    lines++;
    if (l[0] == '#') {
      ck_assert_msg(strncmp(l, "# HELP ", 7) == 0 ||
                        strncmp(l, "# TYPE ", 7) == 0,
                    "comment line: %s", l);
      continue;
    }
    ck_assert_msg(regexec(&re, l, 0, NULL, 0) == 0, "malformed line: '%s'", l);
  }
  ck_assert_int_gt(lines, 10);
  free(copy);
  regfree(&re);
}

static double metric(const char *text, const char *sample) {
  double v = sh_metric_in(text, sample);
  ck_assert_msg(v >= 0, "no sample %s in /metrics", sample);
  return v;
}

START_TEST(test_prometheus) {
  static const char *const rs[] = {
      "attnd_rejections_total{reason=\"overload\"}",
      "attnd_rejections_total{reason=\"deadline\"}",
      "attnd_rejections_total{reason=\"too_large\"}",
      "attnd_rejections_total{reason=\"invalid\"}",
      "attnd_rejections_total{reason=\"draining\"}",
      "attnd_rejections_total{reason=\"client_gone\"}",
      "attnd_rejections_total{reason=\"slow_reader\"}"};
  const char *ok = "attnd_requests_total{status=\"200\"}";
  const char *s404 = "attnd_requests_total{status=\"404\"}";
  const char *s422 = "attnd_requests_total{status=\"422\"}";
  const char *inval = "attnd_rejections_total{reason=\"invalid\"}";
  const char *hcount = "attnd_request_seconds_count{ctx=\"128\"}";

  sh_resp_t r = get("/metrics");
  ck_assert_int_eq(r.status, 200);
  char ct[128];
  ck_assert_ptr_nonnull(sh_header(&r, "Content-Type", ct, sizeof ct));
  ck_assert_msg(strncmp(ct, "text/plain", 10) == 0, "Content-Type %s", ct);
  assert_prometheus(r.body);
  for (size_t k = 0; k < sizeof rs / sizeof rs[0]; k++)
    metric(r.body, rs[k]);
  double ok0 = metric(r.body, ok), n404 = metric(r.body, s404),
         n422 = metric(r.body, s422), inv0 = metric(r.body, inval),
         h0 = metric(r.body, hcount);
  sh_resp_free(&r);

  /* two computed, one invalid, one unknown path */
  json_t *req = small_request();
  for (int k = 0; k < 2; k++) {
    json_decref(post_ok(req, &r, "a small request"));
    sh_resp_free(&r);
  }
  json_decref(req);
  r = post_text("{\"num_heads\":1}");
  ck_assert_int_eq(r.status, 422);
  sh_resp_free(&r);
  r = get("/nowhere");
  ck_assert_int_eq(r.status, 404);
  sh_resp_free(&r);

  /* a request is counted once its reply is out, a moment after the client
   * may have read it */
  sh_wait_metric(srv.port, s422, n422 + 1, 5.0);
  sh_wait_metric(srv.port, s404, n404 + 1, 5.0);
  sh_wait_metric(srv.port, ok, ok0 + 2, 5.0);
  r = get("/metrics");
  assert_prometheus(r.body);
  ck_assert_double_ge(metric(r.body, ok), ok0 + 2);
  ck_assert_double_eq(metric(r.body, s422), n422 + 1);
  ck_assert_double_eq(metric(r.body, s404), n404 + 1);
  ck_assert_double_ge(metric(r.body, inval), inv0 + 1);
  ck_assert_double_ge(metric(r.body, hcount), h0 + 2);
  /* the histograms carry ctx and le; the gauges are there */
  static const char *const fam[] = {
      "attnd_queue_wait_seconds_bucket{ctx=\"128\",le=\"+Inf\"}",
      "attnd_compute_seconds_bucket{ctx=\"128\",le=\"+Inf\"}",
      "attnd_request_seconds_bucket{ctx=\"128\",le=\"+Inf\"}",
      "attnd_queue_wait_seconds_sum{ctx=\"128\"}",
      "attnd_queue_depth",
      "attnd_busy_workers"};
  for (int k = 0; k < 6; k++)
    metric(r.body, fam[k]);
  ck_assert_double_ge(
      metric(r.body, "attnd_compute_seconds_bucket{ctx=\"128\",le=\"+Inf\"}"),
      2);
  ck_assert_double_eq(metric(r.body, "attnd_queue_depth"), 0);
  sh_resp_free(&r);
}
END_TEST

/* ---- errors -------------------------------------------------------------- */

#define Q24 "[[1,2,3,4],[5,6,7,8]]" /* [Lq=2, E=4] */
#define REQ(...) "{\"query\":" Q24 ",\"num_heads\":1" __VA_ARGS__ "}"

/* A few invalid requests end to end, for the HTTP side of an error: the
 * status, the JSON body (with error.field absent when there is none), and
 * a server that still answers. tests/check_decode.c holds the whole table,
 * one case per error class, decoded from strings. */
typedef struct err_case {
  const char *name;
  const char *body;
  long status;
  const char *code;
  const char *field; /* NULL: no field */
  const char *msg;   /* words the message must contain, '|' between */
} err_case_t;

static const err_case_t err_cases[] = {
    {"missing query", "{\"num_heads\":1}", 422, "missing_field", "query",
     "query"},
    {"request not an object", "[1,2]", 422, "invalid_type", NULL, "array"},
    {"ragged: short row", "{\"query\":[[1,2,3,4],[5,6,7]],\"num_heads\":1}",
     422, "ragged_tensor", "query", "query[1]|3|4"},
    {"bad base64 character",
     "{\"query\":{\"shape\":[2,2],\"base64\":\"AAAAAAAA!AAAAAAAAAAAAA==\"},"
     "\"num_heads\":1}",
     422, "invalid_base64", "query.base64", "character 8"},
    {"max_timeout_ms", REQ(",\"timeout_ms\":6000"), 422, "limit_exceeded",
     "timeout_ms", "timeout_ms 6000|max_timeout_ms 5000"},
    {"invalid JSON", "{\"query\": [[1, 2]],\n\"num_heads\": 1,\n  ]", 400,
     "invalid_json", NULL, "line 3|column"},
};
#define N_ERR (int)(sizeof err_cases / sizeof err_cases[0])

START_TEST(test_invalid_request) {
  const err_case_t *c = &err_cases[_i];
  sh_resp_t r = post_text(c->body);
  /* the name first, for the failure message */
  ck_assert_msg(r.status == c->status, "%s: status %ld: %.500s", c->name,
                r.status, r.body);
  char words[256], *w[3] = {"", "", ""};
  snprintf(words, sizeof words, "%s", c->msg);
  char *save, *t = strtok_r(words, "|", &save);
  for (int k = 0; t && k < 3; k++, t = strtok_r(NULL, "|", &save))
    w[k] = t;
  sh_assert_error(&r, c->status, c->code, c->field, w[0], w[1], w[2], NULL);
  sh_resp_free(&r);
  r = get("/healthz");
  ck_assert_msg(r.status == 200, "%s: then /healthz: %ld", c->name, r.status);
  sh_resp_free(&r);
}
END_TEST

START_TEST(test_not_found) {
  /* "/" is the page (ui/index.html); a name under /ui/ that is not one of
   * its files is none */
  static const char *const paths[] = {"/ui/none.js", "/v1/attention/x",
                                      "/v3/attention", "/healthz/"};
  for (int k = 0; k < 4; k++) {
    sh_resp_t r = get(paths[k]);
    sh_assert_error(&r, 404, "not_found", NULL, paths[k], NULL);
    sh_resp_free(&r);
  }
  sh_resp_t r = request("POST", "/v1/attentions", "application/json", "{}");
  sh_assert_error(&r, 404, "not_found", NULL, "/v1/attentions", NULL);
  sh_resp_free(&r);
}
END_TEST

START_TEST(test_method_not_allowed) {
  char allow[64];
  static const char *const bad[] = {"GET", "PUT", "DELETE"};
  for (int k = 0; k < 3; k++) {
    sh_resp_t r = request(bad[k], "/v1/attention", NULL, NULL);
    sh_assert_error(&r, 405, "method_not_allowed", NULL, bad[k], "POST", NULL);
    ck_assert_ptr_nonnull(sh_header(&r, "Allow", allow, sizeof allow));
    ck_assert_str_eq(allow, "POST");
    sh_resp_free(&r);
  }
  static const char *const gets[] = {"/healthz", "/readyz", "/metrics",
                                     "/v1/info"};
  for (int k = 0; k < 4; k++) {
    sh_resp_t r = request("POST", gets[k], "application/json", "{}");
    sh_assert_error(&r, 405, "method_not_allowed", NULL, "POST", NULL);
    ck_assert_ptr_nonnull(sh_header(&r, "Allow", allow, sizeof allow));
    ck_assert_msg(strstr(allow, "GET") != NULL, "Allow: %s", allow);
    sh_resp_free(&r);
  }
}
END_TEST

/* An Expect other than 100-continue is refused with 417 on any path (RFC
 * 9110 10.1.1), before its body is read; 100-continue, in any case, is
 * answered and the request computed. */
START_TEST(test_expectation_failed) {
  static const struct {
    const char *method, *path, *expect, *word;
  } bad[] = {
      {"POST", "/v1/attention", "Expect: x-fast", "'x-fast'"},
      {"POST", "/v1/attention", "Expect: 100-continue, later", "'later'"},
      {"GET", "/healthz", "Expect: 200-ok", "'200-ok'"},
  };
  const char *body = REQ();
  sh_client_t c;
  sh_client_init(&c, srv.port);
  sh_resp_t r;
  for (int k = 0; k < 3; k++) {
    const char *const hdr[] = {bad[k].expect, NULL};
    int post = bad[k].method[0] == 'P';
    sh_req_t q = {.method = bad[k].method,
                  .path = bad[k].path,
                  .content_type = post ? "application/json" : NULL,
                  .body = post ? body : NULL,
                  .len = post ? strlen(body) : 0,
                  .headers = hdr};
    ck_assert_int_eq(sh_http(&c, &q, &r), 0);
    sh_assert_error(&r, 417, "expectation_failed", "Expect", bad[k].word,
                    "100-continue", NULL);
    sh_resp_free(&r);
  }
  static const char *const good[] = {"Expect: 100-Continue", NULL};
  sh_req_t q = sh_attention_post(body, strlen(body));
  q.headers = good;
  ck_assert_int_eq(sh_http(&c, &q, &r), 0);
  ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
  sh_resp_free(&r);
  sh_client_free(&c);
}
END_TEST

START_TEST(test_unsupported_media_type) {
  const char *body = REQ();
  static const char *const bad[] = {"text/plain", "application/jsonx",
                                    "application/x-www-form-urlencoded"};
  for (int k = 0; k < 3; k++) {
    sh_resp_t r = request("POST", "/v1/attention", bad[k], body);
    sh_assert_error(&r, 415, "unsupported_media_type", NULL, bad[k],
                    "application/json", NULL);
    sh_resp_free(&r);
  }
  sh_resp_t r = request("POST", "/v1/attention", NULL, body);
  sh_assert_error(&r, 415, "unsupported_media_type", NULL, "missing", NULL);
  sh_resp_free(&r);
  /* parameters and case are fine */
  static const char *const good[] = {"application/json; charset=utf-8",
                                     "Application/JSON"};
  for (int k = 0; k < 2; k++) {
    r = request("POST", "/v1/attention", good[k], body);
    ck_assert_msg(r.status == 200, "%s: %ld %s", good[k], r.status, r.body);
    sh_resp_free(&r);
  }
}
END_TEST

/* A JSON body of exactly n bytes: a valid request padded with spaces. */
static char *padded_body(size_t n) {
  const char *base = REQ();
  char *b = malloc(n + 1);
  size_t k = strlen(base);
  memcpy(b, base, k - 1);
  memset(b + k - 1, ' ', n - k);
  b[n - 1] = '}';
  b[n] = 0;
  return b;
}

/* Announced with Content-Length: refused from the headers alone. The
 * body is never sent, so a server that waited for it would time out. */
START_TEST(test_too_large_content_length) {
  const char *too_large = "attnd_rejections_total{reason=\"too_large\"}";
  double n0 = sh_metric(srv.port, too_large);
  int fd = sh_connect(srv.port);
  ck_assert_int_ge(fd, 0);
  const char *head = "POST /v1/attention HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     "Content-Type: application/json\r\n"
                     "Content-Length: 65537\r\n\r\n";
  ck_assert_int_eq(sh_send_all(fd, head, strlen(head)), 0);
  char buf[4096];
  long n = sh_recv_reply(fd, buf, sizeof buf, 5000);
  close(fd);
  ck_assert_msg(n > 0, "no reply before the body was sent");
  ck_assert_int_eq(sh_raw_status(buf), 413);
  const char *json = strstr(buf, "\r\n\r\n") + 4;
  ck_assert_msg(strstr(json, "\"payload_too_large\"") &&
                    strstr(json, "65537") && strstr(json, "65536"),
                "%s", json);

  /* the same through libcurl, with the body (and Expect: 100-continue) */
  char *big = padded_body(65537);
  static const char *const expect[] = {"Expect: 100-continue", NULL};
  sh_client_t c;
  sh_client_init(&c, srv.port);
  sh_req_t q = sh_attention_post(big, 65537);
  q.headers = expect;
  sh_resp_t r;
  ck_assert_int_eq(sh_http(&c, &q, &r), 0);
  sh_assert_error(&r, 413, "payload_too_large", NULL, "65537",
                  "max_body_bytes 65536", NULL);
  sh_resp_free(&r);
  /* and one byte less is read and computed */
  q.len = 65536;
  big[65535] = '}';
  ck_assert_int_eq(sh_http(&c, &q, &r), 0);
  ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
  sh_resp_free(&r);
  sh_client_free(&c);
  free(big);
  ck_assert_double_eq(sh_metric(srv.port, too_large), n0 + 2);
}
END_TEST

/* Chunked: the size is known only at the end, and answered there; the
 * limit is exact, as with Content-Length. */
START_TEST(test_too_large_chunked) {
  size_t n = 100000;
  char *big = padded_body(n);
  sh_client_t c;
  sh_client_init(&c, srv.port);
  sh_req_t q = sh_attention_post(big, n);
  q.chunked = 1;
  sh_resp_t r;
  ck_assert_msg(sh_http(&c, &q, &r) == 0, "%s", r.error);
  sh_assert_error(&r, 413, "payload_too_large", NULL, "100000",
                  "max_body_bytes 65536", NULL);
  sh_resp_free(&r);
  free(big);
  /* at the edge: one byte over is refused, the limit itself computed */
  big = padded_body(65537);
  q.body = big;
  q.len = 65537;
  ck_assert_msg(sh_http(&c, &q, &r) == 0, "%s", r.error);
  sh_assert_error(&r, 413, "payload_too_large", NULL, "65537",
                  "max_body_bytes 65536", NULL);
  sh_resp_free(&r);
  q.len = 65536;
  big[65535] = '}';
  ck_assert_msg(sh_http(&c, &q, &r) == 0, "%s", r.error);
  ck_assert_msg(r.status == 200, "%ld %.300s", r.status, r.body);
  sh_resp_free(&r);
  free(big);
  /* a small chunked body is fine */
  big = padded_body(3000);
  q.body = big;
  q.len = 3000;
  ck_assert_msg(sh_http(&c, &q, &r) == 0, "%s", r.error);
  ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
  sh_resp_free(&r);
  sh_client_free(&c);
  free(big);
}
END_TEST

/* A gzip body of empty members (20 bytes each, inflating to nothing), sent
 * in chunks: refused 413 once past what any body of max_body_bytes needs
 * compressed, not read for as long as the client sends it. */
START_TEST(test_coded_input_bound) {
  static const unsigned char empty[20] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3,
                                          3,    0,    0, 0, 0, 0, 0, 0, 0, 0};
  size_t count = 4000, n = count * sizeof empty; /* 80,000 bytes */
  unsigned char *body = malloc(n);
  for (size_t i = 0; i < count; i++)
    memcpy(body + i * sizeof empty, empty, sizeof empty);
  static const char *const gz[] = {"Content-Encoding: gzip", NULL};
  sh_client_t c;
  sh_client_init(&c, srv.port);
  sh_req_t q = sh_attention_post((const char *)body, n);
  q.chunked = 1;
  q.headers = gz;
  sh_resp_t r;
  ck_assert_msg(sh_http(&c, &q, &r) == 0, "%s", r.error);
  sh_assert_error(&r, 413, "payload_too_large", NULL, "gzip body has 80000",
                  "more than any that inflates within max_body_bytes 65536",
                  NULL);
  sh_resp_free(&r);
  sh_client_free(&c);
  free(body);
}
END_TEST

/* ---- the suite ----------------------------------------------------------- */

/* ---- numbers at the edge (issue 11, defects 3 and 4) --------------------- */

/* Finite inputs whose scores or sums leave float32's range, and integer
 * members at 2^63 - 1: a 200 whose output (and weights, when asked for)
 * equal the values worked out beside them, within REPLY_TOL, or a 422
 * with its code and field. Before the fix these answered zeros, null
 * (NaN), or a UBSan report that stopped the server (make asan runs this
 * against build/asan/attnd). One head, rank 2. */
typedef struct edge_req {
  const char *name, *body;
  double out[8], weights[8]; /* out [Lq, 2]; weights [1, Lq, Lk], or none
                                (n_weights 0) */
  int n_out, n_weights;
  const char *code, *field, *words; /* for a 422 */
} edge_req_t;

#define EDGE_RET ",\"return\":{\"metrics\":false,\"weights\":\"per_head\"}}"
#define EDGE_W0 0.6697615493266569 /* 1 / (1 + e^(-1/√2)) */

/* clang-format off */
static const edge_req_t edge_reqs[] = {
    {"query and key of 1e30: scores of 2e60, equal",
     "{\"query\":[[1e30,1e30],[1e30,1e30]],\"key\":[[1e30,1e30],[1e30,1e30]],"
     "\"num_heads\":1" EDGE_RET, {1e30, 1e30, 1e30, 1e30}, {.5, .5, .5, .5},
     4, 4, NULL, NULL, NULL},
    {"query of 1e20, self: scores of 5e40 and 0",
     "{\"query\":[[1e20,2e20],[2e20,-1e20]],\"num_heads\":1" EDGE_RET,
     {1e20, 2e20, 2e20, -1e20}, {1, 0, 0, 1}, 4, 4, NULL, NULL, NULL},
    {"scale 3e38", "{\"query\":[[1,2],[3,4]],\"num_heads\":1,"
     "\"scale\":3e38" EDGE_RET, {3, 4, 3, 4}, {0, 1, 0, 1}, 4, 4, NULL, NULL,
     NULL},
    /* row 1 has two farthest keys: 3e38 swamps q·k in float64, a tie */
    {"ALiBi slope -3e38: the farthest key",
     "{\"query\":[[1,2],[3,4],[5,6]],\"num_heads\":1,"
     "\"mask\":{\"alibi\":[-3e38]},\"return\":{\"metrics\":false}}",
     {5, 6, 3, 4, 1, 2}, {0}, 6, 0, NULL, NULL, NULL},
    /* no weights: the online path, whose running sums overflowed */
    {"two values of 3e38 averaged",
     "{\"query\":[[0,0],[0,0]],\"value\":[[3e38,3e38],[3e38,-3e38]],"
     "\"num_heads\":1,\"return\":{\"metrics\":false}}",
     {3e38, 0, 3e38, 0}, {0}, 4, 0, NULL, NULL, NULL},
    {"softcap 1e-45", "{\"query\":[[0,1],[1,0]],\"num_heads\":1,"
     "\"softcap\":1e-45" EDGE_RET, {.5, .5, .5, .5}, {.5, .5, .5, .5}, 4, 4,
     NULL, NULL, NULL},
    {"mask.window.right 2^63 - 1",
     "{\"query\":[[1,0],[0,1]],\"num_heads\":1,\"mask\":{\"window\":"
     "{\"left\":0,\"right\":9223372036854775807}}" EDGE_RET,
     {EDGE_W0, 1 - EDGE_W0, 0, 1}, {EDGE_W0, 1 - EDGE_W0, 0, 1}, 4, 4, NULL,
     NULL, NULL},
    /* Lq - Lk = 2: row 0's bound was -2 - (2^63 - 1), an overflow */
    {"mask.window.left 2^63 - 1, Lq > Lk",
     "{\"query\":[[1,0],[0,1],[1,1],[0,0]],\"key\":[[1,0],[0,1]],"
     "\"value\":[[1,2],[3,4]],\"num_heads\":1,\"mask\":{\"window\":"
     "{\"left\":9223372036854775807}}" EDGE_RET,
     {1.6604769013466862, 2.6604769013466862, 2.3395230986533138,
      3.3395230986533138, 2, 3, 2, 3},
     {EDGE_W0, 1 - EDGE_W0, 1 - EDGE_W0, EDGE_W0, .5, .5, .5, .5}, 8, 8, NULL,
     NULL, NULL},
    {"Q projection overflows",
     "{\"query\":[[1e30,1e30]],\"num_heads\":1,\"projections\":"
     "{\"q_weight\":[[1e30,1e30],[1e30,1e30]]}}", {0}, {0}, 0, 0,
     "numeric_overflow", "query", "projection: "},
    {"output projection overflows",
     "{\"query\":[[1,1]],\"value\":[[3e38,3e38]],\"num_heads\":1,"
     "\"projections\":{\"o_weight\":[[3e38,3e38]]}}", {0}, {0}, 0, 0,
     "numeric_overflow", "projections.o_weight", "output projection: "},
    {"output bias overflows",
     "{\"query\":[[1,1]],\"value\":[[3e38,3e38]],\"num_heads\":1,"
     "\"projections\":{\"o_bias\":[3e38,3e38]}}", {0}, {0}, 0, 0,
     "numeric_overflow", "projections.o_bias", "batch 0, query row 0"},
    /* a row that sees no key: weights 0, head output 0, so the output is
     * o_bias, alike for every mask that empties a row, on the exact path
     * (weights asked for) and the online one */
    {"key_lengths 0 with o_bias",
     "{\"query\":[[1,0],[0,1]],\"num_heads\":1,\"mask\":{\"key_lengths\":"
     "[0]},\"projections\":{\"o_bias\":[5,-7]}" EDGE_RET,
     {5, -7, 5, -7}, {0, 0, 0, 0}, 4, 4, NULL, NULL, NULL},
    {"key_lengths 0 with o_bias, online",
     "{\"query\":[[1,0],[0,1]],\"num_heads\":1,\"mask\":{\"key_lengths\":"
     "[0]},\"projections\":{\"o_bias\":[5,-7]},\"return\":{\"metrics\":"
     "false}}", {5, -7, 5, -7}, {0}, 4, 0, NULL, NULL, NULL},
    {"causal, Lq > Lk: two rows see no key",
     "{\"query\":[[1,0],[0,1],[1,1]],\"key\":[[1,0]],\"value\":[[2,4]],"
     "\"num_heads\":1,\"mask\":{\"causal\":true},\"projections\":"
     "{\"o_bias\":[1,1]}" EDGE_RET, {1, 1, 1, 1, 3, 5}, {0, 0, 1}, 6, 3,
     NULL, NULL, NULL},
    {"allow false: row 0 sees no key",
     "{\"query\":[[1,0],[0,1]],\"key\":[[1,0]],\"value\":[[2,4]],"
     "\"num_heads\":1,\"mask\":{\"allow\":[[false],[true]]},"
     "\"projections\":{\"o_bias\":[1,-1]}" EDGE_RET, {1, -1, 3, 3}, {0, 1},
     4, 2, NULL, NULL, NULL},
    {"window: row 0 sees no key",
     "{\"query\":[[1,0],[0,1]],\"key\":[[1,0]],\"value\":[[2,4]],"
     "\"num_heads\":1,\"mask\":{\"window\":{\"left\":0,\"right\":0}},"
     "\"projections\":{\"o_bias\":[1,-1]}" EDGE_RET, {1, -1, 3, 3}, {0, 1},
     4, 2, NULL, NULL, NULL},
    /* FLT_MAX rounds to bfloat16's infinity (from 0x7f7f8000 up) */
    {"FLT_MAX as bfloat16",
     "{\"query\":[[3.4028234e38]],\"num_heads\":1,\"return\":"
     "{\"dtype\":\"bfloat16\"}}", {0}, {0}, 0, 0, "numeric_overflow",
     "return.dtype", "bfloat16"},
    {"mask.key_lengths 2^63 - 1",
     "{\"query\":[[1,2],[3,4]],\"num_heads\":1,"
     "\"mask\":{\"key_lengths\":[9223372036854775807]}}", {0}, {0}, 0, 0,
     "invalid_value", "mask.key_lengths", "9223372036854775807"},
};
/* clang-format on */
#define N_EDGE_REQ ((int)(sizeof edge_reqs / sizeof edge_reqs[0]))

START_TEST(test_numeric_edges) {
  const edge_req_t *c = &edge_reqs[_i];
  sh_resp_t r = post_text(c->body);
  if (c->code) {
    sh_assert_error(&r, 422, c->code, c->field, c->words, NULL);
    sh_resp_free(&r);
    return;
  }
  ck_assert_msg(r.status == 200, "%s: status %ld: %.600s", c->name, r.status,
                r.body);
  json_t *rep = sh_json(&r);
  ck_assert_msg(rep != NULL, "%s: not JSON: %.300s", c->name, r.body);
  const char *names[2] = {"output", "weights"};
  const double *want[2] = {c->out, c->weights};
  const int n[2] = {c->n_out, c->n_weights};
  ck_assert_msg(c->n_weights || !json_object_get(rep, "weights"),
                "%s: weights not asked for: %.300s", c->name, r.body);
  for (int x = 0; x < (c->n_weights ? 2 : 1); x++) {
    sh_tensor_t t;
    char why[256];
    ck_assert_msg(sh_tensor_decode(json_object_get(rep, names[x]), &t, why,
                                   sizeof why) == 0,
                  "%s: %s: %s in %.300s", c->name, names[x], why, r.body);
    ck_assert_msg((int)t.n == n[x], "%s: %s has %zu values, not %d", c->name,
                  names[x], t.n, n[x]);
    double err = tu_rel_err(t.data, want[x], t.n);
    ck_assert_msg(err <= REPLY_TOL, "%s: %s off by %g: %.300s", c->name,
                  names[x], err, r.body);
    sh_tensor_free(&t);
  }
  json_decref(rep);
  sh_resp_free(&r);
}
END_TEST

/* A TCase `name` of s whose tests share one server, started by `start`
 * before them and stopped after, a test finding it dead starting its own. */
static TCase *server_tcase(Suite *s, const char *name, void (*start)(void)) {
  TCase *tc = tcase_create(name);
  tcase_add_unchecked_fixture(tc, start, stop_server);
  tcase_add_checked_fixture(tc, ensure_server, release_server);
  tcase_set_timeout(tc, 30);
  suite_add_tcase(s, tc);
  return tc;
}

Suite *test_suite(void) {
  Suite *s = suite_create("server");
  TCase *tc = server_tcase(s, "forms", start_default);
  tcase_add_loop_test(tc, test_forms, 0, 24);
  tcase_add_test(tc, test_base64_default_dtype);
  tcase_add_loop_test(tc, test_half_inputs, 0, 2);
  tcase_add_loop_test(tc, test_half_reply, 0, 6);
  tcase_add_test(tc, test_half_errors);

  tc = server_tcase(s, "options", start_default);
  tcase_add_loop_test(tc, test_options, 0, N_OPT);
  tcase_add_test(tc, test_explicit_defaults);

  tc = server_tcase(s, "masks", start_default);
  tcase_add_test(tc, test_mask_tail_block);
  tcase_add_loop_test(tc, test_masks, 0, N_MASK);
  tcase_add_loop_test(tc, test_random_specs, 0, N_RANDOM);

  tc = server_tcase(s, "json", start_default);
  tcase_add_loop_test(tc, test_number_spellings, 0, 2);
  tcase_add_loop_test(tc, test_escaped_base64, 0, 2);
  tcase_add_test(tc, test_encodings_agree);
  tcase_add_loop_test(tc, test_weights_reduce, 0, 3 * N_RD);

  tc = server_tcase(s, "protocol", start_default);
  tcase_add_test(tc, test_id_echo);
  tcase_add_test(tc, test_request_id_header);
  tcase_add_test(tc, test_metrics_in_reply);
  tcase_add_test(tc, test_backend_metrics);
  tcase_add_test(tc, test_health_ready);
  tcase_add_test(tc, test_info);
  tcase_add_test(tc, test_backend_choice);
  tcase_add_test(tc, test_cuda_session);
  tcase_add_test(tc, test_prometheus);

  tc = server_tcase(s, "errors", start_limited);
  tcase_add_loop_test(tc, test_invalid_request, 0, N_ERR);
  tcase_add_test(tc, test_not_found);
  tcase_add_test(tc, test_reply_compression);
  tcase_add_test(tc, test_method_not_allowed);
  tcase_add_test(tc, test_unsupported_media_type);
  tcase_add_test(tc, test_expectation_failed);
  tcase_add_test(tc, test_too_large_content_length);
  tcase_add_test(tc, test_too_large_chunked);
  tcase_add_test(tc, test_coded_input_bound);

  tc = server_tcase(s, "threads", start_auto_threads);
  tcase_add_test(tc, test_threads_auto);
  tcase_add_test(tc, test_threads_omp_binding);
  tcase_add_loop_test(tc, test_threads_omp_team, 0, N_OMP_CASES);

  tc = server_tcase(s, "numeric", start_default);
  tcase_add_loop_test(tc, test_numeric_edges, 0, N_EDGE_REQ);
  return s;
}

void test_setup(void) {
  sh_init();
}

int test_finish(int failed) {
  if (teardown_failures)
    fprintf(stderr, "check_server: %d server teardowns failed (above)\n",
            teardown_failures);
  return failed + teardown_failures;
}
