/* tests/check_load.c: attnd-load's modules, without a server.
 *
 * References: a sorted copy of the data for the histogram (the exact
 * nearest-rank percentile), jansson and the harness's own tensor decoder
 * (tests/server_harness.c, written apart from codec/) for the
 * generated bodies, and the core run here for --verify. Cases:
 *   - the histogram: every value below 2^LOAD_HIST_SUB_BITS exact; data
 *     sets from uniform to twelve decades wide within LOAD_HIST_PRECISION;
 *     exact min, max and mean; empty, negative and huge values;
 *   - Server-Timing values as attnd writes them, reordered, partial, bad;
 *     and, from a scripted server, in several header lines (attnd's
 *     metrics one a line, or followed by a proxy's line): every reply and
 *     every decode step timed, in both engines;
 *   - the generator: shapes and tensors for a table of options in each
 *     encoding, the FLOP count, seeds that reproduce and seeds that differ,
 *     every option visible in the JSON, the sizes it refuses;
 *   - --verify: reply tensors read back bit for bit in each encoding, with
 *     wrong shapes refused; a correct reply passes, a perturbed one fails;
 *   - v2, the Open Inference Protocol: a body's exact bytes (tritonclient's
 *     member order, the binary tail, the header length); every generator
 *     case as four bodies (the generic model or a layer, binary or JSON),
 *     each input checked bit for bit and in member order; gzip and
 *     deflate bodies inflated back with zlib; the percent-encoded path;
 *     replies read back bit for bit (JSON, binary, mixed, either order)
 *     and a table of wrong ones refused with their messages; --verify
 *     over v2, and refused for a layer;
 *   - --dtype float16 and bfloat16: every tensor the float32 run's
 *     rounded, sent as the dtype in each v1 form and v2 form (bytes that
 *     widen back to it, the dtype asked back); half replies read back
 *     exactly and the wrong ones (another dtype, float32 bytes, unrounded
 *     numbers) refused; --verify within the dtype's unit roundoff;
 *   - the CSV, JSON and SVG writers (the dtype named in both reports);
 *     by_status with every error status, however many, and the codes no
 *     status line carries as "invalid"; the times of a step that nothing
 *     measured as no value in every writer (an empty cell, null, "-");
 *   - decode mode: the create and step bodies (members, and the tokens
 *     bit for bit in each encoding), tokens a function of the session and
 *     the position only, a step's reply checked against the float64
 *     reference of the whole sequence (with and without rope) and the
 *     wrong ones refused with their reasons, and the decode columns, JSON
 *     and SVG panel;
 *   - the decode engine against a scripted loopback server (its own
 *     tcase): a wrong 2xx
 *     (a creation without its id, a prefill's wrong length) counted once,
 *     as an error and not as a success too, and a server whose every
 *     reply is wrong leading to the session's abandonment, not to retries
 *     without end;
 *   - statuses 600 to 999 from a scripted server, counted as themselves
 *     in both engines;
 *   - the open loop: evenly spaced arrivals fill a window with exactly
 *     rate x duration requests (against a port that refuses them);
 *   - failures that no later request could cure end a run at once: a
 *     refused connection in a sweep's first step (both engines; in a
 *     later one, decode mode sends it again), and a 401 before any
 *     success in decode mode, nothing sent again;
 *   - --progress's cadence, from the time of the last line.
 * No timings are asserted. */
#include <arpa/inet.h>
#include <check.h>
#include <curl/curl.h>
#include <jansson.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include "attn/attn.h"
#include "client.h"
#include "codec/base64.h"
#include "codec/buf.h"
#include "codec/half.h"
#include "codec/number.h"
#include "decode.h"
#include "gen.h"
#include "hist.h"
#include "ref.h"
#include "report.h"
#include "server_harness.h"
#include "suite.h"
#include "testutil.h"
#include "v2.h"
#include "verify.h"

/* ---- the histogram ------------------------------------------------------- */

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* The nearest-rank percentile of sorted x[0..n): the smallest value with
 * at least p% of the values at or below it. p is in thousandths of a
 * percent, so that the rank is computed in integers. */
static int64_t exact_pct(const int64_t *x, int64_t n, int64_t p_milli) {
  int64_t rank = (p_milli * n + 100000 - 1) / 100000;
  return x[rank < 1 ? 0 : rank - 1];
}

static const int64_t pcts_milli[] = {0,     100,   1000,  10000, 25000, 50000,
                                     75000, 90000, 99000, 99900, 99990, 100000};
#define NPCTS (int)(sizeof pcts_milli / sizeof pcts_milli[0])

/* Records x[0..n) and checks every percentile of pcts_milli, the minimum,
 * maximum and mean against the sorted data. */
static void check_hist_against(int64_t *x, int64_t n, const char *what) {
  load_hist_t *h = malloc(sizeof *h);
  ck_assert_ptr_nonnull(h);
  load_hist_reset(h);
  double sum = 0;
  for (int64_t i = 0; i < n; i++) {
    load_hist_record(h, x[i]);
    sum += (double)x[i];
  }
  qsort(x, (size_t)n, sizeof *x, cmp_i64);
  ck_assert_int_eq(h->count, n);
  ck_assert_int_eq(h->min, x[0]);
  ck_assert_int_eq(h->max, x[n - 1]);
  ck_assert_double_eq_tol(load_hist_mean(h), sum / (double)n,
                          1e-12 * fabs(sum / (double)n) + 1e-12);
  for (int k = 0; k < NPCTS; k++) {
    int64_t want = exact_pct(x, n, pcts_milli[k]);
    int64_t got = load_hist_percentile(h, (double)pcts_milli[k] / 1000.0);
    double hi = (double)want * (1.0 + LOAD_HIST_PRECISION);
    ck_assert_msg(got >= want && (double)got <= hi,
                  "%s: p%g is %lld, exact %lld (allowed up to %.0f)", what,
                  (double)pcts_milli[k] / 1000.0, (long long)got,
                  (long long)want, hi);
    if (want < (1 << LOAD_HIST_SUB_BITS))
      ck_assert_msg(got == want, "%s: p%g is %lld, exact %lld below 2^%d", what,
                    (double)pcts_milli[k] / 1000.0, (long long)got,
                    (long long)want, LOAD_HIST_SUB_BITS);
  }
  free(h);
}

/* Every value that the histogram keeps exactly, in a shuffled order, some
 * several times: every percentile is exact. */
START_TEST(test_hist_exact_small) {
  tu_rng_t rng;
  tu_rng_seed(&rng, 7);
  int64_t n = 3 << LOAD_HIST_SUB_BITS;
  int64_t *x = malloc((size_t)n * sizeof *x);
  for (int64_t i = 0; i < n; i++)
    x[i] = i % (1 << LOAD_HIST_SUB_BITS);
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = tu_rng_below(&rng, i + 1), t = x[i];
    x[i] = x[j];
    x[j] = t;
  }
  check_hist_against(x, n, "0..2047 three times");
  free(x);
}
END_TEST

/* Data sets of latencies in microseconds. */
enum { DS_UNIFORM, DS_LOG_UNIFORM, DS_CONSTANT, DS_BIMODAL, DS_PARETO, N_DS };

START_TEST(test_hist_datasets) {
  static const char *const names[N_DS] = {
      "uniform in [0, 1e6)", "log-uniform over 12 decades", "constant 12345",
      "two modes: 100 us and 5 s", "Pareto tail (alpha 1.2)"};
  tu_rng_t rng;
  tu_rng_seed(&rng, 100 + (uint64_t)_i);
  const int64_t n = 100000;
  int64_t *x = malloc((size_t)n * sizeof *x);
  for (int64_t i = 0; i < n; i++) {
    double u = tu_rng_unit(&rng);
    switch (_i) {
    case DS_UNIFORM:
      x[i] = (int64_t)(u * 1e6);
      break;
    case DS_LOG_UNIFORM:
      x[i] = (int64_t)pow(10.0, 12.0 * u);
      break;
    case DS_CONSTANT:
      x[i] = 12345;
      break;
    case DS_BIMODAL:
      x[i] = u < 0.97 ? 100 + (int64_t)(u * 20) : 5000000 + (int64_t)(u * 1e5);
      break;
    default:
      x[i] = (int64_t)(1000.0 / pow(1.0 - u, 1.0 / 1.2));
      break;
    }
  }
  check_hist_against(x, n, names[_i]);
  free(x);
}
END_TEST

START_TEST(test_hist_edges) {
  load_hist_t *h = malloc(sizeof *h);
  load_hist_reset(h);
  ck_assert_int_eq(load_hist_percentile(h, 50), 0);
  ck_assert_double_eq(load_hist_mean(h), 0);
  load_hist_record(h, -5); /* counts as 0 */
  ck_assert_int_eq(h->min, 0);
  ck_assert_int_eq(load_hist_percentile(h, 100), 0);
  load_hist_record(h, INT64_MAX); /* counts as LOAD_HIST_MAX */
  ck_assert_int_eq(h->max, LOAD_HIST_MAX);
  ck_assert_int_eq(load_hist_percentile(h, 100), LOAD_HIST_MAX);
  ck_assert_int_eq(load_hist_percentile(h, 50), 0);
  ck_assert_int_eq(load_hist_percentile(h, 250), LOAD_HIST_MAX); /* clamped */
  ck_assert_int_eq(load_hist_percentile(h, -1), 0);
  load_hist_reset(h);
  load_hist_record(h, 123456789);
  for (int p = 0; p <= 100; p += 25) /* one value: every percentile is it */
    ck_assert_int_eq(load_hist_percentile(h, p), 123456789);
  free(h);
}
END_TEST

/* The nearest rank at counts of 1e8 and more, where p/100 · count in
 * floating point lands a hair above an integer rank: two values, 1000 and
 * 1500 (both kept exactly), with exactly as many 1000s as the rank of p
 * (so p is 1000), then one 1000 fewer (so p is 1500). Caught: a rank
 * taken as ceil(p/100 · count − 1e-9), one too high for p99.9 of 1e8
 * counts (1500 for 1000). */
START_TEST(test_hist_rank_large) {
  static const int64_t counts[] = {100000000, 300000000, 1000000000,
                                   10000000000};
  static const int64_t ps[] = {50000, 90000, 99000, 99900, 99990, 99999};
  load_hist_t *h = malloc(sizeof *h);
  ck_assert_ptr_nonnull(h);
  for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++)
    for (size_t j = 0; j < sizeof ps / sizeof ps[0]; j++)
      for (int fewer = 0; fewer < 2; fewer++) {
        int64_t n = counts[i], rank = (ps[j] * (n / 1000) + 99) / 100;
        load_hist_reset(h);
        load_hist_record_n(h, 1000, rank - fewer);
        load_hist_record_n(h, 1500, n - rank + fewer);
        ck_assert_int_eq(h->count, n);
        int64_t got = load_hist_percentile(h, (double)ps[j] / 1000.0);
        ck_assert_msg(got == (fewer ? 1500 : 1000),
                      "p%g of %lld counts, %lld of them 1000: %lld",
                      (double)ps[j] / 1000.0, (long long)n,
                      (long long)(rank - fewer), (long long)got);
      }
  free(h);
}
END_TEST

/* The stats of each engine own their histograms: _i 0 the request
 * engine's (latency, queue, compute, total), 1 the decode engine's (ttft,
 * step, create, queue, compute). After init every one is allocated and
 * empty, after free every one is NULL. Caught: a histogram in the struct
 * left out of the list that allocates them, or a count of that list one
 * short (the last one NULL, and the first record into it a crash in the
 * middle of a run). */
START_TEST(test_stats_own_hists) {
  load_stats_t st;
  load_decode_stats_t dst;
  load_hist_t *const *h[5];
  static const char *const names[2][5] = {
      {"latency", "queue", "compute", "total"},
      {"ttft", "step", "create", "queue", "compute"}};
  int n = _i ? 5 : 4;
  if (_i) {
    ck_assert_int_eq(load_decode_stats_init(&dst), 0);
    h[0] = &dst.ttft, h[1] = &dst.step, h[2] = &dst.create;
    h[3] = &dst.queue, h[4] = &dst.compute;
  } else {
    ck_assert_int_eq(load_stats_init(&st), 0);
    h[0] = &st.latency, h[1] = &st.queue, h[2] = &st.compute;
    h[3] = &st.total;
  }
  for (int i = 0; i < n; i++) {
    ck_assert_msg(*h[i] != NULL, "%s not allocated", names[_i][i]);
    ck_assert_int_eq((*h[i])->count, 0);
  }
  if (_i)
    load_decode_stats_free(&dst);
  else
    load_stats_free(&st);
  for (int i = 0; i < n; i++)
    ck_assert_msg(*h[i] == NULL, "%s not freed", names[_i][i]);
}
END_TEST

/* ---- Server-Timing ------------------------------------------------------- */

START_TEST(test_server_timing) {
  double q = -1, c = -1, t = -1;
  const char *v = " queue;dur=0.012, compute;dur=1.234, total;dur=1.500\r\n";
  ck_assert_int_eq(load_server_timing_parse(v, strlen(v), &q, &c, &t), 7);
  ck_assert_double_eq(q, 0.012);
  ck_assert_double_eq(c, 1.234);
  ck_assert_double_eq(t, 1.5);

  /* other metrics and parameters, any order */
  q = c = t = -1;
  v = "db;desc=\"x, y\";dur=9,total;desc=all;dur=3e1 , compute ;dur=2";
  ck_assert_int_eq(load_server_timing_parse(v, strlen(v), &q, &c, &t), 6);
  ck_assert_double_eq(c, 2);
  ck_assert_double_eq(t, 30);
  ck_assert_double_eq(q, -1);

  /* no duration, a bad one, a name that only starts alike */
  v = "queue, compute;dur=abc, totality;dur=4";
  ck_assert_int_eq(load_server_timing_parse(v, strlen(v), &q, &c, &t), 0);
  ck_assert_int_eq(load_server_timing_parse("", 0, &q, &c, &t), 0);

  /* only the given length is read */
  v = "queue;dur=5, compute;dur=6";
  ck_assert_int_eq(load_server_timing_parse(v, 12, &q, &c, &t), 1);
  ck_assert_double_eq(q, 5);
}
END_TEST

/* Values a proxy or a misbehaving server may send. Caught: the value was
 * copied into 512 bytes first, so a long one cut a duration short (12.5
 * read as 1); metrics were split at every comma, quoted ones too, and
 * "dur=" was searched anywhere in a metric, so that text inside a quoted
 * desc, or a param "xdur", was read as its duration; and strtod took a
 * negative duration, or hex. */
START_TEST(test_server_timing_hostile) {
  double q = -1, c = -1, t = -1;
  /* "queue;dur=12.5" with its "dur=1" ending at byte 511 */
  char v[4096];
  int pre = 511 - (int)strlen("queue;dur=1");
  memset(v, 'a', (size_t)pre);
  memcpy(v, "edge;desc=", 10);
  v[pre - 1] = ',';
  snprintf(v + pre, sizeof v - (size_t)pre, "queue;dur=12.5");
  ck_assert_int_eq(load_server_timing_parse(v, strlen(v), &q, &c, &t), 1);
  ck_assert_double_eq(q, 12.5);
  /* the same after 4000 bytes of other metrics */
  size_t n = 0;
  while (n < 4000)
    n += (size_t)snprintf(v + n, sizeof v - n, "m%zu;dur=1, ", n);
  snprintf(v + n, sizeof v - n, "compute;dur=2.5");
  ck_assert_int_eq(load_server_timing_parse(v, strlen(v), &q, &c, &t), 2);
  ck_assert_double_eq(c, 2.5);

  static const struct {
    const char *v;
    int mask;
    double q; /* when mask is 1 */
  } cases[] = {
      {"queue;dur=3, db;desc=\"b, queue;dur=7\"", 1, 3},
      {"db;desc=\"a\\\", queue;dur=7\", queue;dur=4", 1, 4},
      {"queue;desc=\"dur=4\"", 0, 0},
      {"queue;xdur=5", 0, 0},
      {"queue;dur=2;dur=9", 1, 2},
      {"queue;DUR=0.5", 1, 0.5},
      {"queue ; dur = 6", 1, 6},
      {"queue;dur=\"8\"", 1, 8},
      {"queue;dur=-5", 0, 0},
      {"queue;dur=0x10", 0, 0},
      {"queue;dur=inf", 0, 0},
      {"queue;dur=nan", 0, 0},
      {"queue;dur=1e999", 0, 0},
      {"queue;dur=5x", 0, 0},
      {"queue;dur=", 0, 0},
      {"queue;dur=\"5", 0, 0},
      {";;,,==\"", 0, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    q = -1;
    int m =
        load_server_timing_parse(cases[i].v, strlen(cases[i].v), &q, &c, &t);
    ck_assert_msg(m == cases[i].mask, "'%s': mask %d", cases[i].v, m);
    ck_assert_msg(m == 0 || q == cases[i].q, "'%s': queue %g", cases[i].v, q);
  }
}
END_TEST

/* Inference-Header-Content-Length values. Caught: the value was cut to 31
 * bytes before it was read, so 40 zeros and a 5 read as 0. */
START_TEST(test_header_length) {
  static const struct {
    const char *v;
    int64_t want;
  } cases[] = {
      {" 5\r\n", 5},
      {"12 \t\r\n", 12},
      {"0000000000000000000000000000000000000005\r\n", 5},
      {"9223372036854775806", INT64_C(9223372036854775806)},
      {"9223372036854775808", INT64_MAX},
      {"99999999999999999999999", INT64_MAX},
      {"", INT64_MAX},
      {" \r\n", INT64_MAX},
      {"-1", INT64_MAX},
      {"+1", INT64_MAX},
      {"1x", INT64_MAX},
      {"1 2", INT64_MAX},
      {"0x10", INT64_MAX},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    ck_assert_msg(load_header_length_parse(cases[i].v, strlen(cases[i].v)) ==
                      cases[i].want,
                  "'%s'", cases[i].v);
  /* only len bytes are read: "7" of "78" */
  ck_assert_int_eq(load_header_length_parse("78", 1), 7);
}
END_TEST

/* ---- the generator ------------------------------------------------------- */

static const load_shape_t base_shape = {.B = 2,
                                        .Lq = 5,
                                        .Lk = 5,
                                        .E = 8,
                                        .H = 2,
                                        .Hkv = 2,
                                        .causal = ATTN_CAUSAL_BOTTOM_RIGHT,
                                        .encoding = ATTND_FORM_BASE64};

/* A v1 shape, its members in order up to timeout_ms. */
#define V1_SHAPE(b_, lq_, lk_, e_, h_, hkv_, c_, kl_, w_, p_, enc_, x_, to_)   \
  {                                                                            \
    .B = b_, .Lq = lq_, .Lk = lk_, .E = e_, .H = h_, .Hkv = hkv_,              \
    .causal = (attn_causal_t)(c_), .key_lengths = kl_,                         \
    .weights = (load_weights_t)(w_), .projections = p_,                        \
    .encoding = (attnd_form_t)(enc_), .cross = x_, .timeout_ms = to_           \
  }

/* The cases of test_gen_shapes, each run in the three encodings. */
typedef struct gen_case {
  const char *name;
  load_shape_t s;
  int key_sent; /* key and value expected in the body */
} gen_case_t;

static const gen_case_t gen_cases[] = {
    {"self-attention", V1_SHAPE(1, 7, 7, 8, 2, 2, 0, 0, 0, 0, 0, 0, 0), 0},
    {"batch, causal", V1_SHAPE(3, 6, 6, 12, 3, 3, 1, 0, 0, 0, 0, 0, 0), 0},
    {"cross, Lq != Lk", V1_SHAPE(2, 3, 9, 8, 4, 4, 2, 0, 0, 0, 0, 0, 0), 1},
    {"self, cross forced", V1_SHAPE(1, 4, 4, 8, 2, 2, 0, 0, 0, 0, 0, 1, 0), 1},
    {"GQA without projections",
     V1_SHAPE(2, 5, 5, 16, 4, 2, 1, 0, 0, 0, 0, 0, 0), 1},
    {"GQA with projections", V1_SHAPE(2, 5, 5, 16, 4, 1, 1, 0, 0, 1, 0, 0, 0),
     0},
    {"projections, cross", V1_SHAPE(1, 3, 6, 8, 2, 2, 0, 0, 0, 1, 0, 0, 0), 1},
    {"key lengths, weights", V1_SHAPE(4, 6, 6, 8, 2, 2, 1, 1, 1, 0, 0, 0, 0),
     0},
    {"mean weights, timeout", V1_SHAPE(1, 4, 8, 8, 1, 1, 2, 1, 2, 1, 0, 0, 900),
     1},
};
#define N_GEN_CASES (int)(sizeof gen_cases / sizeof gen_cases[0])

/* Decodes tensor member `name` of `obj` with the harness and checks its
 * shape and that it holds x[0..) bit for bit. */
static void check_tensor(const json_t *obj, const char *name, const float *x,
                         int rank, const int64_t *dim, attnd_form_t enc,
                         const char *what) {
  static const sh_form_t forms[] = {SH_NESTED, SH_FLAT, SH_BASE64};
  const json_t *v = json_object_get(obj, name);
  ck_assert_msg(v != NULL, "%s: no %s", what, name);
  sh_tensor_t t;
  char why[256];
  ck_assert_msg(sh_tensor_decode(v, &t, why, sizeof why) == 0, "%s: %s: %s",
                what, name, why);
  ck_assert_msg(t.form == forms[enc], "%s: %s in the wrong form", what, name);
  ck_assert_int_eq(t.rank, rank);
  for (int i = 0; i < rank; i++)
    ck_assert_msg(t.dim[i] == dim[i], "%s: %s dim %d is %lld, expected %lld",
                  what, name, i, (long long)t.dim[i], (long long)dim[i]);
  ck_assert_msg(memcmp(t.data, x, t.n * sizeof(float)) == 0,
                "%s: %s differs from the generated tensor", what, name);
  sh_tensor_free(&t);
}

static json_t *parse_body(const load_request_t *r) {
  json_error_t je;
  json_t *v = json_loadb(r->body, r->body_len, 0, &je);
  ck_assert_msg(v != NULL, "the body is not JSON: %s (line %d col %d)", je.text,
                je.line, je.column);
  ck_assert_uint_eq(strlen(r->body), r->body_len);
  return v;
}

START_TEST(test_gen_shapes) {
  const gen_case_t *c = &gen_cases[_i / 3];
  load_shape_t s = c->s;
  s.encoding = (attnd_form_t)(_i % 3);
  char what[128], err[256];
  snprintf(what, sizeof what, "%s, %s", c->name, load_enc_name(s.encoding));
  load_request_t r;
  ck_assert_msg(load_gen_request(&s, 42, 1, &r, err, sizeof err) == 0, "%s: %s",
                what, err);
  json_t *b = parse_body(&r);
  const int64_t B = s.B, Lq = s.Lq, Lk = s.Lk, E = s.E, Dh = E / s.H;
  const int64_t Ekv = s.projections ? E : s.Hkv * Dh;

  int64_t qdim[3] = {B, Lq, E}, kdim[3] = {B, Lk, Ekv};
  check_tensor(b, "query", r.query, 3, qdim, s.encoding, what);
  ck_assert_msg((json_object_get(b, "key") != NULL) == c->key_sent,
                "%s: key %s", what, c->key_sent ? "missing" : "sent");
  ck_assert_msg((json_object_get(b, "value") != NULL) == c->key_sent,
                "%s: value %s", what, c->key_sent ? "missing" : "sent");
  if (c->key_sent) {
    check_tensor(b, "key", r.key, 3, kdim, s.encoding, what);
    check_tensor(b, "value", r.value, 3, kdim, s.encoding, what);
  }
  const json_t *pr = json_object_get(b, "projections");
  ck_assert_msg((pr != NULL) == s.projections, "%s: projections", what);
  if (pr) {
    static const char *const names[4] = {"q_weight", "k_weight", "v_weight",
                                         "o_weight"};
    const int64_t rows[4] = {E, s.Hkv * Dh, s.Hkv * Dh, E};
    ck_assert_int_eq(json_object_size(pr), 4);
    for (int i = 0; i < 4; i++) {
      int64_t wdim[2] = {rows[i], E};
      check_tensor(pr, names[i], r.weight[i], 2, wdim, s.encoding, what);
    }
  }
  const json_t *kl = json_object_get(json_object_get(b, "mask"), "key_lengths");
  ck_assert_msg((kl != NULL) == s.key_lengths, "%s: key_lengths", what);
  for (size_t i = 0; kl && i < json_array_size(kl); i++) {
    json_int_t v = json_integer_value(json_array_get(kl, i));
    ck_assert_msg(v >= 1 && v <= Lk, "%s: key length %lld", what, (long long)v);
  }
  ck_assert_int_eq(kl ? (int64_t)json_array_size(kl) : B, B);

  /* the counts: tokens, and the core's dense FLOPs, here by hand */
  ck_assert_int_eq(r.tokens, B * Lq);
  double proj =
      s.projections
          ? 2.0 * B * (Lq * E * E + 2 * Lk * E * s.Hkv * Dh + Lq * E * E)
          : 0;
  double flops = proj + 2.0 * B * s.H * Lq * Lk * 2 * Dh;
  ck_assert_double_eq_tol(r.flops, flops, 1e-9 * flops);

  /* without a body, the same tensors */
  load_request_t r2;
  ck_assert_int_eq(load_gen_request(&s, 42, 0, &r2, err, sizeof err), 0);
  ck_assert_ptr_null(r2.body);
  ck_assert_int_eq(memcmp(r2.query, r.query, (size_t)(B * Lq * E) * 4), 0);
  load_gen_free(&r2);
  json_decref(b);
  load_gen_free(&r);
}
END_TEST

START_TEST(test_gen_seeds) {
  char err[256];
  for (int enc = 0; enc < 3; enc++) {
    load_shape_t s = base_shape;
    s.encoding = (attnd_form_t)enc;
    s.projections = 1;
    s.key_lengths = 1;
    load_request_t a, b, c;
    ck_assert_int_eq(load_gen_request(&s, 9, 1, &a, err, sizeof err), 0);
    ck_assert_int_eq(load_gen_request(&s, 9, 1, &b, err, sizeof err), 0);
    ck_assert_int_eq(load_gen_request(&s, 10, 1, &c, err, sizeof err), 0);
    ck_assert_uint_eq(a.body_len, b.body_len);
    ck_assert_msg(memcmp(a.body, b.body, a.body_len) == 0,
                  "the same seed gave two bodies (%s)",
                  load_enc_name(s.encoding));
    ck_assert_msg(a.body_len != c.body_len ||
                      memcmp(a.body, c.body, a.body_len) != 0,
                  "seeds 9 and 10 gave the same body");
    ck_assert_msg(memcmp(a.query, c.query, 4 * 2 * 5 * 8) != 0,
                  "seeds 9 and 10 gave the same query");
    load_gen_free(&a);
    load_gen_free(&b);
    load_gen_free(&c);
  }
  /* per-variant seeds: distinct over a grid of runs, lengths, variants */
  enum { NS = 3, NL = 6, NV = 8 };
  uint64_t seen[NS * NL * NV];
  int k = 0;
  for (uint64_t seed = 0; seed < NS; seed++)
    for (int64_t len = 1; len <= 1 << (NL - 1); len *= 2)
      for (int v = 0; v < NV; v++) {
        uint64_t x = load_gen_seed(seed, len, v);
        ck_assert_uint_eq(x, load_gen_seed(seed, len, v));
        for (int j = 0; j < k; j++)
          ck_assert_msg(seen[j] != x, "seed %llu L %lld variant %d repeats",
                        (unsigned long long)seed, (long long)len, v);
        seen[k++] = x;
      }
}
END_TEST

/* The body of `s` parsed: a new reference. */
static json_t *body_of(const load_shape_t *s) {
  load_request_t r;
  char err[256];
  ck_assert_msg(load_gen_request(s, 1, 1, &r, err, sizeof err) == 0, "%s", err);
  json_t *b = parse_body(&r);
  load_gen_free(&r);
  return b;
}

static const char *str_at(const json_t *b, const char *obj, const char *key) {
  const char *v =
      json_string_value(json_object_get(json_object_get(b, obj), key));
  ck_assert_msg(v != NULL, "%s.%s is not a string", obj, key);
  return v;
}

/* Each option, set away from the base, shows in the JSON. */
START_TEST(test_gen_options) {
  load_shape_t s = base_shape;
  json_t *b = body_of(&s);
  static const char *const always[] = {"query", "num_heads", "num_kv_heads",
                                       "mask", "return"};
  for (size_t i = 0; i < sizeof always / sizeof always[0]; i++)
    ck_assert_msg(json_object_get(b, always[i]) != NULL, "no %s", always[i]);
  ck_assert_int_eq(json_integer_value(json_object_get(b, "num_heads")), 2);
  ck_assert_int_eq(json_integer_value(json_object_get(b, "num_kv_heads")), 2);
  ck_assert_ptr_null(json_object_get(b, "projections"));
  ck_assert_ptr_null(json_object_get(b, "key"));
  ck_assert_ptr_null(json_object_get(b, "timeout_ms"));
  ck_assert_ptr_null(
      json_object_get(json_object_get(b, "mask"), "key_lengths"));
  ck_assert(
      json_is_false(json_object_get(json_object_get(b, "return"), "metrics")));
  json_decref(b);

  s = base_shape;
  s.H = 4, s.Hkv = 1, s.projections = 1;
  b = body_of(&s);
  ck_assert_int_eq(json_integer_value(json_object_get(b, "num_heads")), 4);
  ck_assert_int_eq(json_integer_value(json_object_get(b, "num_kv_heads")), 1);
  ck_assert_ptr_nonnull(json_object_get(b, "projections"));
  json_decref(b);

  static const char *const causal[] = {"none", "bottom_right", "top_left"};
  static const char *const weights[] = {"none", "per_head", "mean"};
  static const char *const encs[] = {"nested", "flat", "base64"};
  for (int c = 0; c < 3; c++) {
    s = base_shape;
    s.causal = (attn_causal_t)c;
    b = body_of(&s);
    ck_assert_str_eq(str_at(b, "mask", "causal"), causal[c]);
    json_decref(b);
  }
  for (int w = 0; w < 3; w++) {
    s = base_shape;
    s.weights = (load_weights_t)w;
    b = body_of(&s);
    ck_assert_str_eq(str_at(b, "return", "weights"), weights[w]);
    json_decref(b);
  }
  for (int e = 0; e < 3; e++) {
    s = base_shape;
    s.encoding = (attnd_form_t)e;
    b = body_of(&s);
    ck_assert_str_eq(str_at(b, "return", "encoding"), encs[e]);
    json_decref(b);
  }
  s = base_shape;
  s.key_lengths = 1, s.cross = 1, s.timeout_ms = 1234, s.B = 3, s.Lq = 2;
  s.Lk = 7;
  b = body_of(&s);
  const json_t *kl = json_object_get(json_object_get(b, "mask"), "key_lengths");
  ck_assert_int_eq(json_array_size(kl), 3);
  ck_assert_ptr_nonnull(json_object_get(b, "key"));
  ck_assert_ptr_nonnull(json_object_get(b, "value"));
  ck_assert_int_eq(json_integer_value(json_object_get(b, "timeout_ms")), 1234);
  json_decref(b);
}
END_TEST

START_TEST(test_gen_invalid) {
  static const struct {
    load_shape_t s;
    const char *msg;
  } bad[] = {
      {V1_SHAPE(1, 4, 4, 10, 4, 4, 0, 0, 0, 0, 0, 0, 0),
       "--embed 10 is not a multiple"},
      {V1_SHAPE(1, 4, 4, 12, 4, 3, 0, 0, 0, 0, 0, 0, 0),
       "--kv-heads 3 does not divide"},
      {V1_SHAPE(0, 4, 4, 8, 2, 2, 0, 0, 0, 0, 0, 0, 0), "--batch is 0"},
      {V1_SHAPE(1, 0, 4, 8, 2, 2, 0, 0, 0, 0, 0, 0, 0), "--lq is 0"},
      {V1_SHAPE(1, 4, 4, 8, 0, 1, 0, 0, 0, 0, 0, 0, 0), "--heads is 0"},
      /* refused before anything is allocated: 2^37 elements, and a product
       * that overflows */
      {V1_SHAPE(4, 1 << 20, 16, 1 << 15, 4, 4, 0, 0, 0, 0, 0, 0, 0),
       "--batch 4 x length 1048576 x --embed 32768 is too large"},
      {V1_SHAPE(INT64_C(1) << 40, 4, INT64_C(1) << 30, 8, 2, 2, 0, 0, 0, 0, 0,
                0, 0),
       "x length 1073741824 x --embed 8 is too large"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    load_request_t r;
    char err[256] = "";
    ck_assert_int_eq(load_gen_request(&bad[i].s, 1, 1, &r, err, sizeof err),
                     -1);
    ck_assert_msg(strstr(err, bad[i].msg) != NULL, "'%s' lacks '%s'", err,
                  bad[i].msg);
  }
}
END_TEST

/* ---- --verify ------------------------------------------------------------ */

/* A reply as attnd writes it: {"id":null,"output":...,"weights":...}, the
 * tensors written by the harness in `enc`. A new string. */
static char *reply_text(const float *out, int orank, const int64_t *odim,
                        const float *w, int wrank, const int64_t *wdim,
                        attnd_form_t enc) {
  static const sh_form_t forms[] = {SH_NESTED, SH_FLAT, SH_BASE64};
  json_t *v = json_pack("{s:n,s:o}", "id", "output",
                        sh_floats_json(out, orank, odim, forms[enc]));
  if (w)
    json_object_set_new(v, "weights",
                        sh_floats_json(w, wrank, wdim, forms[enc]));
  char *txt = json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(v);
  ck_assert_ptr_nonnull(txt);
  return txt;
}

START_TEST(test_reply_tensor) {
  attnd_form_t enc = (attnd_form_t)_i;
  tu_rng_t rng;
  tu_rng_seed(&rng, 5);
  int64_t odim[3] = {2, 3, 4}, wdim[4] = {2, 2, 3, 5};
  float *o = tu_rand_floats(&rng, 24, 3), *w = tu_rand_floats(&rng, 60, 1);
  o[5] = 1e-30f, o[6] = -0.0f, o[7] = 3e38f; /* extremes read back exactly */
  char *txt = reply_text(o, 3, odim, w, 4, wdim, enc);
  float got[60];
  char why[256];
  ck_assert_msg(load_reply_tensor(txt, strlen(txt), "output", enc, 3, odim, got,
                                  why, sizeof why) == 0,
                "%s", why);
  ck_assert_int_eq(memcmp(got, o, sizeof(float) * 24), 0);
  ck_assert_msg(load_reply_tensor(txt, strlen(txt), "weights", enc, 4, wdim,
                                  got, why, sizeof why) == 0,
                "%s", why);
  ck_assert_int_eq(memcmp(got, w, sizeof(float) * 60), 0);

  /* a shape that is not the reply's, a member that is not there */
  int64_t wrong[3] = {2, 4, 3};
  ck_assert_int_eq(load_reply_tensor(txt, strlen(txt), "output", enc, 3, wrong,
                                     got, why, sizeof why),
                   -1);
  ck_assert_msg(strstr(why, "reply output: ") == why, "%s", why);
  ck_assert_int_eq(load_reply_tensor(txt, strlen(txt), "head_outputs", enc, 3,
                                     odim, got, why, sizeof why),
                   -1);
  ck_assert_str_eq(why, "reply head_outputs: missing");
  /* cut short anywhere inside the output: refused, never read past */
  const char *start = strstr(txt, "\"output\":");
  const char *stop = strstr(txt, ",\"weights\"");
  for (const char *cut = start; cut < stop; cut += 7)
    ck_assert_int_eq(load_reply_tensor(txt, (size_t)(cut - txt), "output", enc,
                                       3, odim, got, why, sizeof why),
                     -1);
  free(txt);
  free(o);
  free(w);
}
END_TEST

/* A shape whose numbers are not dimensions (1e39 is a float's infinity,
 * 1e20 past int64): the wrong shape. Caught by fuzz_load under UBSan: the
 * shape's floats were cast to int64_t, undefined for these (x86 gives
 * INT64_MIN, so without UBSan the reply was refused all the same). */
START_TEST(test_reply_tensor_shape_not_int) {
  static const char *const bodies[] = {
      "{\"output\":{\"shape\":[1e39,2],\"data\":[1,2]}}",
      "{\"output\":{\"shape\":[1e20,2],\"data\":[1,2]}}",
      "{\"output\":{\"shape\":[-1e39,2],\"data\":[1,2]}}",
      "{\"output\":{\"shape\":[1.5,2],\"data\":[1,2]}}"};
  int64_t dim[2] = {1, 2};
  float got[2];
  char why[256];
  for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
    ck_assert_int_eq(load_reply_tensor(bodies[i], strlen(bodies[i]), "output",
                                       ATTND_FORM_FLAT, 2, dim, got, why,
                                       sizeof why),
                     -1);
    ck_assert_str_eq(why, "reply output: the wrong shape");
  }
}
END_TEST

/* Nested arrays with more children than their dimension above the
 * innermost level: refused, and nothing stored past the tensor. Caught by
 * fuzz_load (ASan: a heap overflow in read_array): only the innermost
 * arrays' lengths were checked as the numbers came, the outer ones' at
 * their ']', so that a second [1,2,4] block was stored past out first. */
START_TEST(test_reply_tensor_extra_rows) {
  static const char *const bodies[] = {
      "{\"output\":[[[1,2,3,4],[5,6,7,8]],[[9,10,11,12],[13,14,15,16]]]}",
      "{\"output\":[[[1,2,3,4],[5,6,7,8],[9,10,11,12]]]}"};
  int64_t dim[3] = {1, 2, 4};
  for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
    float got[16];
    for (int k = 0; k < 16; k++)
      got[k] = -7;
    char why[256];
    ck_assert_int_eq(load_reply_tensor(bodies[i], strlen(bodies[i]), "output",
                                       ATTND_FORM_NESTED, 3, dim, got, why,
                                       sizeof why),
                     -1);
    ck_assert_str_eq(why, "reply output: an array of the wrong length");
    for (int k = 8; k < 16; k++)
      ck_assert_msg(got[k] == -7, "body %zu: got[%d] = %g, past the tensor", i,
                    k, (double)got[k]);
  }
}
END_TEST

/* A reply computed here passes; one with a perturbed element fails. */
START_TEST(test_verify_reply) {
  load_shape_t s = base_shape;
  s.encoding = (attnd_form_t)_i;
  s.weights = LOAD_WEIGHTS_MEAN;
  s.projections = 1;
  s.key_lengths = 1;
  load_request_t r;
  char err[256];
  ck_assert_int_eq(load_gen_request(&s, 3, 0, &r, err, sizeof err), 0);
  tu_run_t run;
  ck_assert_int_eq(tu_run(&run, &r.params, NULL), 0);
  int64_t odim[3] = {s.B, s.Lq, s.E}, wdim[3] = {s.B, s.Lq, s.Lk};
  char *txt =
      reply_text(run.o.out, 3, odim, run.o.mean_weights, 3, wdim, s.encoding);
  double e;
  char why[256] = "";
  ck_assert_msg(load_verify_reply(&s, &r, txt, strlen(txt), -1, 2, &e, why,
                                  sizeof why) == 0,
                "%s", why);
  ck_assert_msg(e <= 1e-6, "relative error %g", e);
  free(txt);

  run.o.mean_weights[3] += 0.5f; /* the weights are checked too */
  txt = reply_text(run.o.out, 3, odim, run.o.mean_weights, 3, wdim, s.encoding);
  ck_assert_int_eq(
      load_verify_reply(&s, &r, txt, strlen(txt), -1, 1, &e, why, sizeof why),
      -1);
  ck_assert_msg(e > LOAD_VERIFY_TOL && strstr(why, "relative error"), "%s",
                why);
  free(txt);
  tu_run_free(&run);
  load_gen_free(&r);
}
END_TEST

/* ---- the Open Inference Protocol (v2) ------------------------------------ */

/* The v2 body of the generic model for a small shape: B 1, L 2, E 4, two
 * heads, key lengths and a timeout, binary tensors. */
static const load_shape_t v2_shape = {.B = 1,
                                      .Lq = 2,
                                      .Lk = 2,
                                      .E = 4,
                                      .H = 2,
                                      .Hkv = 2,
                                      .causal = ATTN_CAUSAL_BOTTOM_RIGHT,
                                      .key_lengths = 1,
                                      .timeout_ms = 500,
                                      .protocol = LOAD_V2,
                                      .model = "attention",
                                      .binary = 1};

static void gen_ok(const load_shape_t *s, uint64_t seed, load_request_t *r) {
  char err[256];
  ck_assert_msg(load_gen_request(s, seed, 1, r, err, sizeof err) == 0, "%s",
                err);
}

/* The exact bytes: tritonclient's member order, compact, the binary tail
 * in input order, and the header that says where the JSON ends. */
START_TEST(test_v2_body_exact) {
  static const char want[] =
      "{\"inputs\":[{\"name\":\"query\",\"shape\":[1,2,4],\"datatype\":"
      "\"FP32\",\"parameters\":{\"binary_data_size\":32}},{\"name\":"
      "\"key_lengths\",\"shape\":[1],\"datatype\":\"INT32\",\"parameters\":{"
      "\"binary_data_size\":4}}],\"parameters\":{\"binary_data_output\":true,"
      "\"num_heads\":2,\"num_kv_heads\":2,\"causal\":\"bottom_right\","
      "\"timeout_ms\":500}}";
  load_request_t r;
  gen_ok(&v2_shape, 7, &r);
  ck_assert_uint_eq(r.json_len, 303);
  ck_assert_uint_eq(strlen(want), 303);
  ck_assert_msg(memcmp(r.body, want, r.json_len) == 0, "the JSON is %.*s",
                (int)r.json_len, r.body);
  ck_assert_uint_eq(r.body_len, 303 + 8 * 4 + 4); /* the sizes' sum */
  ck_assert_int_eq(memcmp(r.body + 303, r.query, 32), 0);
  int32_t kl;
  memcpy(&kl, r.body + 303 + 32, 4);
  ck_assert_int_eq(kl, r.key_lengths[0]);
  ck_assert(kl >= 1 && kl <= 2);

  /* the header lines that go with it: no Content-Type, as tritonclient */
  load_run_t run = {.n_bodies = 1};
  load_body_t b = {.header_len = r.json_len};
  char h[256];
  load_body_headers(&run, &b, h, sizeof h);
  ck_assert_str_eq(h, "Inference-Header-Content-Length: 303\n");
  run.content_type = "application/json";
  run.content_encoding = "gzip";
  b.header_len = 0;
  load_body_headers(&run, &b, h, sizeof h);
  ck_assert_str_eq(h, "Content-Type: application/json\nContent-Encoding: "
                      "gzip\n");
  load_gen_free(&r);

  /* with weights asked, the outputs are named, binary, and there is no
   * binary_data_output */
  load_shape_t s = v2_shape;
  s.weights = LOAD_WEIGHTS_PER_HEAD;
  gen_ok(&s, 7, &r);
  static const char outs[] =
      "],\"outputs\":[{\"name\":\"output\",\"parameters\":{\"binary_data\":"
      "true}},{\"name\":\"weights\",\"parameters\":{\"binary_data\":true}}],"
      "\"parameters\":{\"num_heads\":2,\"num_kv_heads\":2,\"causal\":"
      "\"bottom_right\",\"timeout_ms\":500}}";
  size_t ni = (size_t)(strstr(want, "],\"parameters\"") - want);
  ck_assert_uint_eq(r.json_len, ni + strlen(outs));
  ck_assert_msg(memcmp(r.body, want, ni) == 0 &&
                    memcmp(r.body + ni, outs, strlen(outs)) == 0,
                "the JSON is %.*s", (int)r.json_len, r.body);
  ck_assert_uint_eq(r.body_len, r.json_len + 36);
  load_gen_free(&r);

  /* JSON tensors: the data inline, the outputs named with binary_data
   * false, no header length */
  s = v2_shape;
  s.binary = 0, s.key_lengths = 0, s.timeout_ms = 0;
  s.weights = LOAD_WEIGHTS_MEAN;
  gen_ok(&s, 7, &r);
  static const char pre[] = "{\"inputs\":[{\"name\":\"query\",\"shape\":[1,2,"
                            "4],\"datatype\":\"FP32\",\"data\":[";
  static const char post[] =
      "]}],\"outputs\":[{\"name\":\"output\",\"parameters\":{\"binary_data\":"
      "false}},{\"name\":\"weights_mean\",\"parameters\":{\"binary_data\":"
      "false}}],\"parameters\":{\"num_heads\":2,\"num_kv_heads\":2,"
      "\"causal\":\"bottom_right\"}}";
  ck_assert_uint_eq(r.json_len, 0);
  ck_assert_uint_eq(strlen(r.body), r.body_len);
  ck_assert_msg(strncmp(r.body, pre, strlen(pre)) == 0, "%s", r.body);
  ck_assert_msg(strcmp(r.body + r.body_len - strlen(post), post) == 0, "%s",
                r.body);
  const char *p = r.body + strlen(pre);
  for (int i = 0; i < 8; i++) { /* the shortest text of each float */
    char *end;
    float v = strtof(p, &end);
    ck_assert_msg(memcmp(&v, &r.query[i], 4) == 0, "data[%d]: %.*s", i,
                  (int)(end - p), p);
    char shortest[32];
    ck_assert_int_eq(attnd_float_format(r.query[i], shortest), (int)(end - p));
    ck_assert_int_eq(strncmp(p, shortest, strlen(shortest)), 0);
    ck_assert_int_eq(*end, i < 7 ? ',' : ']');
    p = end + 1;
  }
  load_gen_free(&r);
}
END_TEST

/* The members of object `o`, in order, are names[0..) (NULL-ended). */
static void assert_keys(const json_t *o, const char *const *names,
                        const char *what) {
  const char *k;
  const json_t *v;
  int i = 0;
  json_object_foreach((json_t *)o, k, v) {
    ck_assert_msg(names[i] != NULL, "%s: unexpected member %s", what, k);
    ck_assert_msg(strcmp(k, names[i]) == 0, "%s: member %d is %s, not %s", what,
                  i, k, names[i]);
    i++;
  }
  ck_assert_msg(names[i] == NULL, "%s: no member %s", what, names[i]);
}

/* test_gen_shapes's cases, each as four v2 bodies: the generic model or a
 * layer ("blocks.3"), binary or JSON tensors. Every input is checked: its
 * member order, name, shape, datatype and its bytes or data, bit for bit.
 * The generic model's tensors are v1's for the same shape and seed; a
 * layer's query, key and value are those of v1 with inline projections
 * (a layer draws no weights, so its key lengths come out otherwise). */
START_TEST(test_v2_body_shapes) {
  const gen_case_t *c = &gen_cases[_i / 4];
  int layer = (_i % 4) >= 2, binary = _i % 2 == 0;
  load_shape_t s = c->s;
  s.protocol = LOAD_V2;
  s.model = layer ? "blocks.3" : "attention";
  s.binary = binary;
  char what[160], err[256];
  snprintf(what, sizeof what, "%s, %s, %s", c->name, s.model,
           binary ? "binary" : "json");
  load_request_t r, v1;
  if (layer && s.projections) { /* a layer has its own weights */
    ck_assert_int_eq(load_gen_request(&s, 42, 1, &r, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "model 'blocks.3' is a layer") != NULL, "%s",
                  err);
    return;
  }
  gen_ok(&s, 42, &r);
  load_shape_t s1 = s;
  s1.protocol = LOAD_V1;
  s1.model = NULL;
  s1.projections = s.projections || layer;
  ck_assert_int_eq(load_gen_request(&s1, 42, 0, &v1, err, sizeof err), 0);

  size_t jl = binary ? r.json_len : r.body_len;
  ck_assert_msg(binary ? r.json_len > 0 && r.json_len < r.body_len
                       : r.json_len == 0,
                "%s: json_len %zu of %zu", what, r.json_len, r.body_len);
  json_error_t je;
  json_t *b = json_loadb(r.body, jl, 0, &je);
  ck_assert_msg(b != NULL, "%s: %s", what, je.text);
  int named = !binary || s.weights != LOAD_WEIGHTS_NONE;
  static const char *const root_named[] = {"inputs", "outputs", "parameters",
                                           NULL};
  static const char *const root_plain[] = {"inputs", "parameters", NULL};
  assert_keys(b, named ? root_named : root_plain, what);

  /* the inputs */
  const int64_t B = s.B, Lq = s.Lq, Lk = s.Lk, E = s.E, Dh = E / s.H;
  const int proj = s.projections || layer;
  const int64_t Ekv = proj ? E : s.Hkv * Dh, rows = s.Hkv * Dh;
  int key_sent = s.cross || Lq != Lk || Ekv != E;
  ck_assert_int_eq(key_sent, layer ? key_sent : c->key_sent);
  typedef struct {
    const char *name;
    int rank;
    int64_t dim[3];
    const void *data;
  } want_t;
  want_t want[8];
  int n = 0;
  want[n++] = (want_t){"query", 3, {B, Lq, E}, r.query};
  if (key_sent) {
    want[n++] = (want_t){"key", 3, {B, Lk, Ekv}, r.key};
    want[n++] = (want_t){"value", 3, {B, Lk, Ekv}, r.value};
  }
  static const char *const wn[4] = {"q_weight", "k_weight", "v_weight",
                                    "o_weight"};
  const int64_t wrows[4] = {E, rows, rows, E};
  for (int k = 0; s.projections && k < 4; k++)
    want[n++] = (want_t){wn[k], 2, {wrows[k], E}, r.weight[k]};
  if (s.key_lengths)
    want[n++] = (want_t){"key_lengths", 1, {B}, r.key_lengths};
  size_t qn = (size_t)(B * Lq * E) * 4, kn = (size_t)(B * Lk * Ekv) * 4;
  ck_assert_int_eq(memcmp(r.query, v1.query, qn), 0);
  ck_assert(!key_sent || (memcmp(r.key, v1.key, kn) == 0 &&
                          memcmp(r.value, v1.value, kn) == 0));
  for (int k = 0; s.projections && k < 4; k++)
    ck_assert_int_eq(
        memcmp(r.weight[k], v1.weight[k], (size_t)(wrows[k] * E) * 4), 0);
  ck_assert(layer || !s.key_lengths ||
            memcmp(r.key_lengths, v1.key_lengths, (size_t)B * 8) == 0);
  const json_t *ins = json_object_get(b, "inputs");
  ck_assert_int_eq((int)json_array_size(ins), n);
  size_t off = 0;
  for (int k = 0; k < n; k++) {
    const json_t *in = json_array_get(ins, (size_t)k);
    static const char *const bin_keys[] = {"name", "shape", "datatype",
                                           "parameters", NULL};
    static const char *const json_keys[] = {"name", "shape", "datatype", "data",
                                            NULL};
    assert_keys(in, binary ? bin_keys : json_keys, what);
    ck_assert_str_eq(json_string_value(json_object_get(in, "name")),
                     want[k].name);
    int is_int = strcmp(want[k].name, "key_lengths") == 0;
    ck_assert_str_eq(json_string_value(json_object_get(in, "datatype")),
                     is_int ? "INT32" : "FP32");
    const json_t *sh = json_object_get(in, "shape");
    size_t cnt = 1;
    ck_assert_int_eq((int)json_array_size(sh), want[k].rank);
    for (int d = 0; d < want[k].rank; d++) {
      ck_assert_int_eq(json_integer_value(json_array_get(sh, (size_t)d)),
                       want[k].dim[d]);
      cnt *= (size_t)want[k].dim[d];
    }
    const int64_t *iv = want[k].data;
    const float *fv = want[k].data;
    if (binary) {
      const json_t *ps = json_object_get(in, "parameters");
      ck_assert_int_eq(json_object_size(ps), 1);
      size_t sz =
          (size_t)json_integer_value(json_object_get(ps, "binary_data_size"));
      ck_assert_uint_eq(sz, cnt * 4);
      ck_assert_uint_le(jl + off + sz, r.body_len);
      const char *at = r.body + jl + off;
      for (size_t e = 0; is_int && e < cnt; e++) {
        int32_t x;
        memcpy(&x, at + 4 * e, 4);
        ck_assert_int_eq(x, iv[e]);
      }
      ck_assert_msg(is_int || memcmp(at, fv, sz) == 0, "%s: %s's bytes", what,
                    want[k].name);
      off += sz;
    } else {
      const json_t *d = json_object_get(in, "data");
      ck_assert_uint_eq(json_array_size(d), cnt);
      for (size_t e = 0; e < cnt; e++) {
        const json_t *x = json_array_get(d, e);
        if (is_int) {
          ck_assert_int_eq(json_integer_value(x), iv[e]);
        } else {
          float f = (float)json_number_value(x);
          ck_assert_msg(memcmp(&f, &fv[e], 4) == 0, "%s: %s[%zu]", what,
                        want[k].name, e);
        }
      }
    }
  }
  ck_assert_uint_eq(jl + off, binary ? r.body_len : jl); /* the sizes' sum */

  /* the outputs and the parameters */
  const json_t *outs = json_object_get(b, "outputs");
  if (named) {
    const char *wname = s.weights == LOAD_WEIGHTS_PER_HEAD ? "weights"
                        : s.weights == LOAD_WEIGHTS_MEAN   ? "weights_mean"
                                                           : NULL;
    ck_assert_int_eq((int)json_array_size(outs), wname ? 2 : 1);
    for (size_t k = 0; k < json_array_size(outs); k++) {
      const json_t *o = json_array_get(outs, k);
      static const char *const okeys[] = {"name", "parameters", NULL};
      assert_keys(o, okeys, what);
      ck_assert_str_eq(json_string_value(json_object_get(o, "name")),
                       k ? wname : "output");
      const json_t *bd =
          json_object_get(json_object_get(o, "parameters"), "binary_data");
      ck_assert(json_is_boolean(bd) && json_is_true(bd) == binary);
    }
  }
  const json_t *ps = json_object_get(b, "parameters");
  const char *pk[6];
  int np = 0;
  if (!named)
    pk[np++] = "binary_data_output";
  if (!layer) {
    pk[np++] = "num_heads";
    pk[np++] = "num_kv_heads";
  }
  pk[np++] = "causal";
  if (s.timeout_ms)
    pk[np++] = "timeout_ms";
  pk[np] = NULL;
  assert_keys(ps, pk, what);
  if (!named)
    ck_assert(json_is_true(json_object_get(ps, "binary_data_output")));
  if (!layer) {
    ck_assert_int_eq(json_integer_value(json_object_get(ps, "num_heads")), s.H);
    ck_assert_int_eq(json_integer_value(json_object_get(ps, "num_kv_heads")),
                     s.Hkv);
  }
  ck_assert_str_eq(json_string_value(json_object_get(ps, "causal")),
                   load_causal_name(s.causal));
  if (s.timeout_ms)
    ck_assert_int_eq(json_integer_value(json_object_get(ps, "timeout_ms")),
                     s.timeout_ms);

  /* the counts, as v1's: a layer's count its resident projections */
  ck_assert_double_eq(r.flops, v1.flops);
  ck_assert_int_eq(r.tokens, B * Lq);
  json_decref(b);
  load_gen_free(&v1);
  load_gen_free(&r);
}
END_TEST

/* gzip and deflate bodies (the codec's attnd_deflate) inflate back, with
 * zlib here, to the plain body; the header length stays the plain JSON's;
 * the same seed gives the same bytes. */
START_TEST(test_v2_compress) {
  load_shape_t s = v2_shape;
  s.projections = 1;
  s.compress = _i == 0 ? ATTND_CODING_GZIP : ATTND_CODING_DEFLATE;
  load_request_t plain, z;
  load_shape_t s0 = s;
  s0.compress = ATTND_CODING_IDENTITY;
  gen_ok(&s0, 3, &plain);
  gen_ok(&s, 3, &z);
  ck_assert_uint_eq(z.json_len, plain.json_len);
  if (s.compress == ATTND_CODING_GZIP)
    ck_assert(z.body[0] == '\x1f' && z.body[1] == '\x8b');
  else /* the zlib format: CMF 0x78, and CMF*256+FLG a multiple of 31 */
    ck_assert(
        z.body[0] == 0x78 &&
        ((unsigned char)z.body[0] * 256 + (unsigned char)z.body[1]) % 31 == 0);
  char *back = malloc(plain.body_len + 16);
  z_stream st = {0};
  ck_assert_int_eq(inflateInit2(&st, 15 + 32), Z_OK); /* either header */
  st.next_in = (Bytef *)z.body;
  st.avail_in = (uInt)z.body_len;
  st.next_out = (Bytef *)back;
  st.avail_out = (uInt)plain.body_len + 16;
  ck_assert_int_eq(inflate(&st, Z_FINISH), Z_STREAM_END);
  ck_assert_uint_eq(st.total_out, plain.body_len);
  ck_assert_int_eq(memcmp(back, plain.body, plain.body_len), 0);
  inflateEnd(&st);
  ck_assert_str_eq(load_compress_name(s.compress),
                   _i == 0 ? "gzip" : "deflate");
  ck_assert_str_eq(load_compress_name(ATTND_CODING_IDENTITY), "none");
  load_request_t again; /* deterministic */
  gen_ok(&s, 3, &again);
  ck_assert_uint_eq(again.body_len, z.body_len);
  ck_assert_int_eq(memcmp(again.body, z.body, z.body_len), 0);
  free(back);
  load_gen_free(&again);
  load_gen_free(&plain);
  load_gen_free(&z);
}
END_TEST

START_TEST(test_v2_path) {
  char buf[64];
  ck_assert_int_eq(load_v2_path(buf, sizeof buf, "attention"), 26);
  ck_assert_str_eq(buf, "/v2/models/attention/infer");
  ck_assert_int_gt(load_v2_path(buf, sizeof buf, "blocks.3-x_y~z"), 0);
  ck_assert_str_eq(buf, "/v2/models/blocks.3-x_y~z/infer");
  ck_assert_int_gt(load_v2_path(buf, sizeof buf, "a b/c%d?\xc3\xa9"), 0);
  ck_assert_str_eq(buf, "/v2/models/a%20b%2Fc%25d%3F%C3%A9/infer");
  ck_assert_int_eq(load_v2_path(buf, 26, "attention"), -1); /* no room */
  ck_assert_int_eq(load_v2_path(buf, 27, "attention"), 26);
}
END_TEST

/* A reply as the protocol writes it: output [2, 3, 4] and weights_mean
 * [2, 3, 5], each binary or JSON (`bin` bits 1 and 2), weights_mean
 * listed first when `wfirst`. A new buffer; *hl is the JSON's length when
 * anything is binary, else -1. */
static char *v2_reply(const float *o, const float *w, int bin, int wfirst,
                      size_t *len, int64_t *hl) {
  static const int64_t odim[3] = {2, 3, 4}, wdim[3] = {2, 3, 5};
  const float *x[2] = {o, w};
  const int64_t *dim[2] = {odim, wdim};
  static const char *const names[2] = {"output", "weights_mean"};
  json_t *outs = json_array();
  attnd_buf_t tail;
  attnd_buf_init(&tail);
  for (int j = 0; j < 2; j++) {
    int k = wfirst ? 1 - j : j;
    size_t n = (size_t)(dim[k][0] * dim[k][1] * dim[k][2]);
    json_t *e = json_pack("{s:s,s:s,s:[I,I,I]}", "name", names[k], "datatype",
                          "FP32", "shape", dim[k][0], dim[k][1], dim[k][2]);
    if (bin & (1 << k)) {
      json_object_set_new(
          e, "parameters",
          json_pack("{s:I}", "binary_data_size", (json_int_t)(n * 4)));
      attnd_buf_append(&tail, (const char *)x[k], n * 4);
    } else {
      json_t *d = json_array();
      for (size_t i = 0; i < n; i++)
        json_array_append_new(d, json_real(x[k][i]));
      json_object_set_new(e, "data", d);
    }
    json_array_append_new(outs, e);
  }
  json_t *v = json_pack("{s:s,s:s,s:o}", "model_name", "attention",
                        "model_version", "1", "outputs", outs);
  char *txt = json_dumps(v, JSON_COMPACT);
  json_decref(v);
  size_t jl = strlen(txt);
  char *body = malloc(jl + tail.len + 1);
  memcpy(body, txt, jl);
  if (tail.len)
    memcpy(body + jl, tail.data, tail.len);
  body[jl + tail.len] = 0;
  *len = jl + tail.len;
  *hl = tail.len ? (int64_t)jl : -1;
  free(txt);
  attnd_buf_free(&tail);
  return body;
}

/* Both outputs read back bit for bit: JSON, binary, mixed, in either
 * order; cut short anywhere in the tail, refused. */
START_TEST(test_v2_reply) {
  int bin = _i % 4, wfirst = _i / 4;
  tu_rng_t rng;
  tu_rng_seed(&rng, 11);
  float *o = tu_rand_floats(&rng, 24, 3), *w = tu_rand_floats(&rng, 30, 1);
  o[5] = 1e-30f, o[6] = -0.0f, o[7] = 3e38f;
  size_t len;
  int64_t hl;
  char *body = v2_reply(o, w, bin, wfirst, &len, &hl);
  int64_t odim[3] = {2, 3, 4}, wdim[3] = {2, 3, 5};
  float got[30];
  char why[256];
  ck_assert_msg(load_v2_reply_tensor(body, len, hl, "output", 3, odim, got, why,
                                     sizeof why) == 0,
                "%s", why);
  ck_assert_int_eq(memcmp(got, o, 24 * 4), 0);
  ck_assert_msg(load_v2_reply_tensor(body, len, hl, "weights_mean", 3, wdim,
                                     got, why, sizeof why) == 0,
                "%s", why);
  ck_assert_int_eq(memcmp(got, w, 30 * 4), 0);
  ck_assert_int_eq(load_v2_reply_tensor(body, len, hl, "weights", 3, wdim, got,
                                        why, sizeof why),
                   -1);
  ck_assert_str_eq(why, "reply weights: missing");
  for (size_t cut = hl < 0 ? len : (size_t)hl; cut < len; cut += 5) {
    ck_assert_int_eq(load_v2_reply_tensor(body, cut, hl, "output", 3, odim, got,
                                          why, sizeof why),
                     -1);
    ck_assert_msg(strstr(why, "add up to") != NULL, "%s", why);
  }
  free(body);
  free(o);
  free(w);
}
END_TEST

/* Replies that are wrong, each with the message expected. */
START_TEST(test_v2_reply_invalid) {
  static const struct {
    const char *json;
    const char *tail; /* bytes after the JSON, with a header length */
    const char *msg;
  } bad[] = {
      {"{\"error\":\"model 'x' is not loaded\"}", NULL,
       "reply: error 'model 'x' is not loaded'"},
      {"{\"model_name\":\"attention\"}", NULL,
       "reply output: the reply has no outputs array"},
      {"{\"outputs\":[]}", NULL, "reply output: missing"},
      {"{\"outputs\":[{\"name\":\"output\",\"datatype\":\"FP16\",\"shape\":[1,"
       "1,2],\"data\":[1,2]}]}",
       NULL, "reply output: the datatype is not FP32"},
      {"{\"outputs\":[{\"name\":\"output\",\"datatype\":\"FP32\",\"shape\":[1,"
       "2,1],\"data\":[1,2]}]}",
       NULL, "reply output: the wrong shape"},
      {"{\"outputs\":[{\"name\":\"output\",\"datatype\":\"FP32\",\"shape\":[1,"
       "1,2],\"data\":[1,2,3]}]}",
       NULL, "reply output: data that is not its shape's numbers"},
      {"{\"outputs\":[{\"name\":\"output\",\"datatype\":\"FP32\",\"shape\":[1,"
       "1,2],\"data\":[1,\"2\"]}]}",
       NULL, "reply output: data that is not its shape's numbers"},
      {"{\"outputs\":[{\"name\":\"output\",\"datatype\":\"FP32\",\"shape\":[1,"
       "1,2]}]}",
       NULL, "reply output: neither data nor binary_data_size"},
      {"{\"outputs\":[{\"name\":\"output\",\"datatype\":\"FP32\",\"shape\":[1,"
       "1,2],\"parameters\":{\"binary_data_size\":8}}]}",
       "abcd",
       "reply output: the outputs' binary_data_size add up to 8 bytes, but "
       "4 follow the JSON"},
      {"{\"outputs\":[{\"name\":\"output\",\"datatype\":\"FP32\",\"shape\":[1,"
       "1,2],\"parameters\":{\"binary_data_size\":4}}]}",
       "abcd", "reply output: binary data of the wrong size"},
      {"{\"outputs\":[{\"name\":\"output\",\"datatype\":\"FP32\",\"shape\":[1,"
       "1,2],\"parameters\":{\"binary_data_size\":-8}}]}",
       "", "reply output: a binary_data_size that is not a size"},
      {"{\"outputs\":[", NULL, "reply: not JSON: "},
      /* sizes whose sum wraps round to the 8 bytes that follow: the output
       * would be read 2^63 bytes past the body */
      {"{\"outputs\":[{\"name\":\"a\",\"parameters\":{\"binary_data_size\":"
       "9223372036854775807}},{\"name\":\"output\",\"datatype\":\"FP32\","
       "\"shape\":[1,1,2],\"parameters\":{\"binary_data_size\":8}},{"
       "\"name\":\"b\",\"parameters\":{\"binary_data_size\":"
       "9223372036854775807}},{\"name\":\"c\",\"parameters\":{"
       "\"binary_data_size\":2}}]}",
       "abcdefgh",
       "reply output: the outputs' binary_data_size add up to more than any "
       "body"},
  };
  int64_t dim[3] = {1, 1, 2};
  float got[2];
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char body[512], why[256] = "";
    size_t jl = strlen(bad[i].json);
    snprintf(body, sizeof body, "%s%s", bad[i].json,
             bad[i].tail ? bad[i].tail : "");
    int64_t hl = bad[i].tail ? (int64_t)jl : -1;
    ck_assert_int_eq(load_v2_reply_tensor(body, strlen(body), hl, "output", 3,
                                          dim, got, why, sizeof why),
                     -1);
    ck_assert_msg(strncmp(why, bad[i].msg, strlen(bad[i].msg)) == 0,
                  "case %zu: '%s', expected '%s'", i, why, bad[i].msg);
  }
  /* a header length past the body */
  static const char ok[] = "{\"outputs\":[]}";
  char why[256];
  ck_assert_int_eq(load_v2_reply_tensor(ok, strlen(ok), 99, "output", 3, dim,
                                        got, why, sizeof why),
                   -1);
  ck_assert_str_eq(why, "reply: Inference-Header-Content-Length 99 is past "
                        "the body's 14 bytes");
  /* nested data is read too */
  static const char nested[] =
      "{\"outputs\":[{\"name\":\"output\",\"datatype\":\"FP32\",\"shape\":[1,"
      "1,2],\"data\":[[[0.5,-2]]]}]}";
  ck_assert_int_eq(load_v2_reply_tensor(nested, strlen(nested), -1, "output", 3,
                                        dim, got, why, sizeof why),
                   0);
  ck_assert(got[0] == 0.5f && got[1] == -2.0f);
}
END_TEST

/* --verify over v2: a reply computed here passes in each form, a perturbed
 * one fails, and a layer's request cannot be checked here. */
START_TEST(test_v2_verify) {
  load_shape_t s = base_shape; /* B 2 */
  s.protocol = LOAD_V2, s.model = "attention", s.binary = _i != 0;
  s.weights = LOAD_WEIGHTS_MEAN, s.projections = 1, s.key_lengths = 1;
  /* the reply helper's shapes: output [2, 3, 4], weights_mean [2, 3, 5] */
  s.Lq = 3, s.Lk = 5, s.E = 4, s.H = 2, s.Hkv = 1;
  load_request_t r;
  char err[256];
  ck_assert_int_eq(load_gen_request(&s, 3, 0, &r, err, sizeof err), 0);
  tu_run_t run;
  ck_assert_int_eq(tu_run(&run, &r.params, NULL), 0);
  size_t len;
  int64_t hl;
  int bin = _i == 0 ? 0 : _i == 1 ? 3 : 2; /* JSON, binary, mixed */
  char *txt = v2_reply(run.o.out, run.o.mean_weights, bin, 1, &len, &hl);
  double e;
  char why[256] = "";
  ck_assert_msg(
      load_verify_reply(&s, &r, txt, len, hl, 2, &e, why, sizeof why) == 0,
      "%s", why);
  ck_assert_msg(e <= 1e-6, "relative error %g", e);
  free(txt);

  run.o.mean_weights[3] += 0.5f;
  txt = v2_reply(run.o.out, run.o.mean_weights, bin, 1, &len, &hl);
  ck_assert_int_eq(
      load_verify_reply(&s, &r, txt, len, hl, 1, &e, why, sizeof why), -1);
  ck_assert_msg(e > LOAD_VERIFY_TOL && strstr(why, "relative error"), "%s",
                why);

  load_shape_t sl = s;
  sl.model = "blocks.3", sl.projections = 0;
  ck_assert_int_eq(
      load_verify_reply(&sl, &r, txt, len, hl, 1, &e, why, sizeof why), -1);
  ck_assert_msg(strstr(why, "model 'blocks.3' is a layer") != NULL, "%s", why);
  free(txt);
  tu_run_free(&run);
  load_gen_free(&r);
}
END_TEST

/* ---- --dtype: float16 and bfloat16 traffic ------------------------------ */

static const attnd_dtype_t half_types[2] = {ATTND_DTYPE_F16, ATTND_DTYPE_BF16};

/* Whether x is a value of t, by the bits: a bfloat16 is a float32 whose
 * low 16 bits are zero; a float16, one that survives the trip through
 * binary16 (the codec's conversions, which check_codec checks). */
static int is_half_value(attnd_dtype_t t, float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  if (t == ATTND_DTYPE_BF16)
    return (u & 0xffff) == 0;
  return attnd_f16_to_f32(attnd_f16_from_f32(x)) == x;
}

/* The element k of 16-bit little-endian data p, widened. */
static float half_at(attnd_dtype_t t, const unsigned char *p, size_t k) {
  uint32_t h = (uint32_t)p[2 * k] | (uint32_t)p[2 * k + 1] << 8;
  return t == ATTND_DTYPE_F16 ? attnd_f16_to_f32(h) : attnd_bf16_to_f32(h);
}

/* Checks that x[0..n) are values of t, and that they are the float32
 * generator's f[0..n), drawn from the same stream, rounded to t. */
static void check_rounded(attnd_dtype_t t, const float *x, const float *f,
                          size_t n, const char *what) {
  float *want = malloc(n * sizeof *want);
  memcpy(want, f, n * sizeof *want);
  attnd_dtype_round(t, want, n);
  for (size_t i = 0; i < n; i++) {
    ck_assert_msg(is_half_value(t, x[i]), "%s[%zu] = %.9g is not a %s", what, i,
                  (double)x[i], load_dtype_name(t));
    ck_assert_msg(x[i] == want[i], "%s[%zu] = %.9g, float32's rounded %.9g",
                  what, i, (double)x[i], (double)want[i]);
  }
  free(want);
}

/* Every float tensor of a --dtype body: in v1 base64 the dtype's name and
 * two bytes an element that widen to the generated values, in v1 JSON
 * those values as numbers, return.dtype the name; in v2 inputs of
 * datatype FP16 or BF16, two bytes an element in the binary tail or the
 * values in "data", and parameters.output_datatype. The values are the
 * float32 run's rounded. Cases: {v1 base64, v1 nested, v2 binary, v2
 * JSON} x {float16, bfloat16}. */
START_TEST(test_gen_dtype) {
  attnd_dtype_t t = half_types[_i % 2];
  int form = _i / 2, v2 = form >= 2;
  const char *dname = load_dtype_name(t),
             *oip = t == ATTND_DTYPE_F16 ? "FP16" : "BF16";
  load_shape_t s = base_shape;
  s.projections = 1, s.cross = 1, s.key_lengths = 1, s.dtype = t;
  s.encoding = form == 1 ? ATTND_FORM_NESTED : ATTND_FORM_BASE64;
  if (v2)
    s.protocol = LOAD_V2, s.model = "attention", s.binary = form == 2;
  load_shape_t s32 = s;
  s32.dtype = ATTND_DTYPE_F32;
  load_request_t r, r32;
  gen_ok(&s, 9, &r);
  gen_ok(&s32, 9, &r32);
  const char *names[7] = {"query",    "key",      "value",   "q_weight",
                          "k_weight", "v_weight", "o_weight"};
  const float *x[7] = {r.query,     r.key,       r.value,    r.weight[0],
                       r.weight[1], r.weight[2], r.weight[3]};
  const float *x32[7] = {r32.query,     r32.key,       r32.value,
                         r32.weight[0], r32.weight[1], r32.weight[2],
                         r32.weight[3]};
  const attn_tensor_t *pt[7] = {&r.params.query,    &r.params.key,
                                &r.params.value,    &r.params.q_weight,
                                &r.params.k_weight, &r.params.v_weight,
                                &r.params.o_weight};
  size_t n[7];
  for (int k = 0; k < 7; k++) {
    n[k] = 1;
    for (int d = 0; d < pt[k]->rank; d++)
      n[k] *= (size_t)pt[k]->dim[d];
    check_rounded(t, x[k], x32[k], n[k], names[k]);
  }

  size_t jlen = v2 && s.binary ? r.json_len : r.body_len;
  json_error_t je;
  json_t *b = json_loadb(r.body, jlen, 0, &je);
  ck_assert_msg(b != NULL, "%s", je.text);
  if (!v2) {
    ck_assert_str_eq(json_string_value(json_object_get(
                         json_object_get(b, "return"), "dtype")),
                     dname);
    for (int k = 0; k < 7; k++) {
      const json_t *v = json_object_get(
          k < 3 ? b : json_object_get(b, "projections"), names[k]);
      if (s.encoding != ATTND_FORM_BASE64) {
        check_tensor(k < 3 ? b : json_object_get(b, "projections"), names[k],
                     x[k], pt[k]->rank, pt[k]->dim, s.encoding, names[k]);
        continue;
      }
      ck_assert_str_eq(json_string_value(json_object_get(v, "dtype")), dname);
      const char *b64 = json_string_value(json_object_get(v, "base64"));
      ck_assert_ptr_nonnull(b64);
      unsigned char *raw = malloc(strlen(b64));
      size_t got, bad;
      ck_assert_int_eq(attnd_b64_decode(b64, strlen(b64), raw, &got, &bad), 0);
      ck_assert_uint_eq(got, 2 * n[k]);
      for (size_t i = 0; i < n[k]; i++)
        ck_assert_msg(half_at(t, raw, i) == x[k][i],
                      "%s[%zu]: the bytes widen to %.9g, not %.9g", names[k], i,
                      (double)half_at(t, raw, i), (double)x[k][i]);
      free(raw);
    }
  } else {
    const json_t *ins = json_object_get(b, "inputs");
    ck_assert_str_eq(json_string_value(json_object_get(
                         json_object_get(b, "parameters"), "output_datatype")),
                     oip);
    const unsigned char *tail = (const unsigned char *)r.body + r.json_len;
    for (int k = 0; k < 7; k++) {
      const json_t *in = json_array_get(ins, (size_t)k);
      ck_assert_str_eq(json_string_value(json_object_get(in, "name")),
                       names[k]);
      ck_assert_str_eq(json_string_value(json_object_get(in, "datatype")), oip);
      if (s.binary) {
        ck_assert_int_eq(
            json_integer_value(json_object_get(
                json_object_get(in, "parameters"), "binary_data_size")),
            (json_int_t)(2 * n[k]));
        for (size_t i = 0; i < n[k]; i++)
          ck_assert_msg(half_at(t, tail, i) == x[k][i],
                        "%s[%zu]: the bytes widen to %.9g, not %.9g", names[k],
                        i, (double)half_at(t, tail, i), (double)x[k][i]);
        tail += 2 * n[k];
      } else {
        const json_t *d = json_object_get(in, "data");
        ck_assert_uint_eq(json_array_size(d), n[k]);
        for (size_t i = 0; i < n[k]; i++)
          ck_assert((float)json_number_value(json_array_get(d, i)) == x[k][i]);
      }
    }
    if (s.binary) /* key_lengths, INT32, ends the tail */
      ck_assert_ptr_eq(tail + 4 * s.B,
                       (const unsigned char *)r.body + r.body_len);
  }
  json_decref(b);
  /* float32 bodies ask no dtype back: the bytes from before --dtype */
  b = json_loadb(r32.body, v2 && s.binary ? r32.json_len : r32.body_len, 0,
                 &je);
  ck_assert_ptr_nonnull(b);
  ck_assert_ptr_null(
      json_object_get(json_object_get(b, v2 ? "parameters" : "return"),
                      v2 ? "output_datatype" : "dtype"));
  json_decref(b);
  load_gen_free(&r);
  load_gen_free(&r32);
}
END_TEST

/* A v1 reply {"output":..,"weights":..} of dtype t in form `enc`. */
static char *reply_text_as(attnd_dtype_t t, attnd_form_t enc, const float *o,
                           const int64_t *odim, const float *w,
                           const int64_t *wdim) {
  attnd_buf_t b;
  attnd_buf_init(&b);
  attnd_buf_puts(&b, "{\"output\":");
  attnd_buf_tensor_as(&b, enc, t, o, 3, odim);
  if (w) {
    attnd_buf_puts(&b, ",\"weights\":");
    attnd_buf_tensor_as(&b, enc, t, w, 3, wdim);
  }
  attnd_buf_puts(&b, "}");
  ck_assert(!b.oom);
  return b.data;
}

/* A v2 reply of outputs "output" and "weights_mean" as `datatype`, each
 * binary (elem bytes an element, packed as t) or JSON data. */
static char *v2_reply_as(attnd_dtype_t t, const char *datatype, size_t elem,
                         int binary, const float *o, const int64_t *odim,
                         const float *w, const int64_t *wdim, size_t *len,
                         int64_t *hl) {
  attnd_buf_t j, tail;
  attnd_buf_init(&j);
  attnd_buf_init(&tail);
  attnd_buf_puts(&j, "{\"model_name\":\"attention\",\"outputs\":[");
  const float *x[2] = {o, w};
  const int64_t *dim[2] = {odim, wdim};
  for (int k = 0; k < (w ? 2 : 1); k++) {
    size_t n = (size_t)(dim[k][0] * dim[k][1] * dim[k][2]);
    attnd_buf_printf(&j,
                     "%s{\"name\":\"%s\",\"datatype\":\"%s\",\"shape\":[%lld,"
                     "%lld,%lld]",
                     k ? "," : "", k ? "weights_mean" : "output", datatype,
                     (long long)dim[k][0], (long long)dim[k][1],
                     (long long)dim[k][2]);
    if (binary) {
      attnd_buf_printf(&j, ",\"parameters\":{\"binary_data_size\":%zu}}",
                       n * elem);
      if (elem == 4) {
        attnd_buf_append(&tail, (const char *)x[k], n * 4);
      } else {
        char *p = malloc(2 * n);
        attnd_dtype_pack(t, x[k], n, p);
        attnd_buf_append(&tail, p, 2 * n);
        free(p);
      }
    } else {
      attnd_buf_puts(&j, ",\"data\":");
      attnd_buf_floats(&j, x[k], n, 0, NULL);
      attnd_buf_puts(&j, "}");
    }
  }
  attnd_buf_puts(&j, "]}");
  *hl = binary ? (int64_t)j.len : -1;
  attnd_buf_append(&j, tail.data ? tail.data : "", tail.len);
  *len = j.len;
  attnd_buf_free(&tail);
  ck_assert(!j.oom);
  return j.data;
}

/* Half replies read back exactly, in v1's three forms and v2's two; the
 * wrong ones refused: another dtype's name, float32 bytes, a number
 * that is not of the dtype, FP32 where FP16/BF16 was asked, binary data
 * four bytes an element. Cases: float16, bfloat16. */
START_TEST(test_reply_dtype) {
  attnd_dtype_t t = half_types[_i], other = half_types[1 - _i];
  const char *oip = t == ATTND_DTYPE_F16 ? "FP16" : "BF16";
  tu_rng_t rng;
  tu_rng_seed(&rng, 21);
  int64_t odim[3] = {2, 3, 4};
  float *o = tu_rand_floats(&rng, 24, 3), got[24];
  attnd_dtype_round(t, o, 24);
  char why[256];
  for (int e = 0; e < 3; e++) {
    char *txt = reply_text_as(t, (attnd_form_t)e, o, odim, NULL, NULL);
    ck_assert_msg(load_reply_tensor_as(txt, strlen(txt), "output",
                                       (attnd_form_t)e, t, 3, odim, got, why,
                                       sizeof why) == 0,
                  "%s", why);
    ck_assert_int_eq(memcmp(got, o, sizeof got), 0);
    free(txt);
  }
  /* the wrong ones: base64 under the other dtype's name, float32's bytes,
   * a number the server did not round */
  float o2[24];
  memcpy(o2, o, sizeof o2);
  o2[7] = 0.1f;
  const struct {
    attnd_dtype_t sent;
    attnd_form_t form;
    const float *x;
    const char *msg;
  } wrong[] = {{other, ATTND_FORM_BASE64, o, "not dtype"},
               {ATTND_DTYPE_F32, ATTND_FORM_BASE64, o, "not dtype"},
               {t, ATTND_FORM_FLAT, o2, "at [7] is not a"},
               {t, ATTND_FORM_NESTED, o2, "at [7] is not a"}};
  char *txt;
  for (size_t k = 0; k < sizeof wrong / sizeof wrong[0]; k++) {
    txt = reply_text_as(wrong[k].sent, wrong[k].form, wrong[k].x, odim, NULL,
                        NULL);
    ck_assert_int_eq(load_reply_tensor_as(txt, strlen(txt), "output",
                                          wrong[k].form, t, 3, odim, got, why,
                                          sizeof why),
                     -1);
    ck_assert_msg(strstr(why, wrong[k].msg) != NULL, "case %zu: %s", k, why);
    free(txt);
  }

  /* v2: binary and JSON read back; then the wrong ones */
  size_t len;
  int64_t hl;
  for (int bin = 0; bin < 2; bin++) {
    txt = v2_reply_as(t, oip, 2, bin, o, odim, NULL, NULL, &len, &hl);
    ck_assert_msg(load_v2_reply_tensor_as(txt, len, hl, "output", t, 3, odim,
                                          got, why, sizeof why) == 0,
                  "%s", why);
    ck_assert_int_eq(memcmp(got, o, sizeof got), 0);
    free(txt);
  }
  txt = v2_reply_as(t, "FP32", 4, 1, o, odim, NULL, NULL, &len, &hl);
  ck_assert_int_eq(load_v2_reply_tensor_as(txt, len, hl, "output", t, 3, odim,
                                           got, why, sizeof why),
                   -1);
  ck_assert_msg(strstr(why, "the datatype is not") != NULL, "%s", why);
  free(txt);
  txt = v2_reply_as(t, oip, 4, 1, o, odim, NULL, NULL, &len, &hl);
  ck_assert_int_eq(load_v2_reply_tensor_as(txt, len, hl, "output", t, 3, odim,
                                           got, why, sizeof why),
                   -1);
  ck_assert_str_eq(why, "reply output: binary data of the wrong size");
  free(txt);
  txt = v2_reply_as(t, oip, 2, 0, o2, odim, NULL, NULL, &len, &hl);
  ck_assert_int_eq(load_v2_reply_tensor_as(txt, len, hl, "output", t, 3, odim,
                                           got, why, sizeof why),
                   -1);
  ck_assert_msg(strstr(why, "at [7] is not a") != NULL, "%s", why);
  free(txt);
  free(o);
}
END_TEST

/* --verify of half traffic: the core's float32 result on the generated
 * (rounded) tensors, rounded to the dtype as the server rounds it,
 * passes, its error within the dtype's unit roundoff; one 3 units off
 * fails. Cases: {v1 base64, v2 binary} x {float16, bfloat16}. */
START_TEST(test_verify_dtype) {
  attnd_dtype_t t = half_types[_i % 2];
  const char *oip = t == ATTND_DTYPE_F16 ? "FP16" : "BF16";
  double u = t == ATTND_DTYPE_F16 ? 0x1p-11 : 0x1p-8;
  int v2 = _i / 2;
  load_shape_t s = base_shape; /* B 2 */
  s.weights = LOAD_WEIGHTS_MEAN, s.projections = 1, s.key_lengths = 1;
  s.dtype = t;
  if (v2)
    s.protocol = LOAD_V2, s.model = "attention", s.binary = 1;
  load_request_t r;
  char err[256];
  ck_assert_int_eq(load_gen_request(&s, 5, 0, &r, err, sizeof err), 0);
  tu_run_t run;
  ck_assert_int_eq(tu_run(&run, &r.params, NULL), 0);
  int64_t odim[3] = {s.B, s.Lq, s.E}, wdim[3] = {s.B, s.Lq, s.Lk};
  size_t on = (size_t)(s.B * s.Lq * s.E), wn = (size_t)(s.B * s.Lq * s.Lk);
  ck_assert_double_eq(load_verify_tol(t), LOAD_VERIFY_TOL + u);
  for (int bad = 0; bad < 2; bad++) {
    float *o = malloc(on * sizeof *o), *w = malloc(wn * sizeof *w);
    memcpy(o, run.o.out, on * sizeof *o);
    memcpy(w, run.o.mean_weights, wn * sizeof *w);
    for (size_t i = 0; bad && i < on; i++)
      o[i] *= (float)(1 + 3 * u);
    attnd_dtype_round(t, o, on);
    attnd_dtype_round(t, w, wn);
    size_t len;
    int64_t hl = -1;
    char *txt = v2 ? v2_reply_as(t, oip, 2, 1, o, odim, w, wdim, &len, &hl)
                   : reply_text_as(t, ATTND_FORM_BASE64, o, odim, w, wdim);
    if (!v2)
      len = strlen(txt);
    double e;
    char why[256] = "";
    int rc = load_verify_reply(&s, &r, txt, len, hl, 2, &e, why, sizeof why);
    if (!bad) {
      ck_assert_msg(rc == 0, "%s", why);
      ck_assert_msg(e <= u, "relative error %g over 2^%d", e,
                    t == ATTND_DTYPE_F16 ? -11 : -8);
    } else {
      ck_assert_int_eq(rc, -1);
      ck_assert_msg(e > load_verify_tol(t) && strstr(why, "relative error"),
                    "%s (%g)", why, e);
    }
    free(txt);
    free(o);
    free(w);
  }
  tu_run_free(&run);
  load_gen_free(&r);
}
END_TEST

/* ---- the report writers -------------------------------------------------- */

START_TEST(test_report_files) {
  load_result_t r[3];
  memset(r, 0, sizeof r);
  for (int i = 0; i < 3; i++) {
    r[i].step = i + 1;
    r[i].length = 128 << i;
    r[i].attention = 1;
    r[i].shape = base_shape;
    r[i].mode = LOAD_CLOSED;
    r[i].concurrency = 1 + (i == 2);
    r[i].sent = 100, r[i].ok = 97 - i, r[i].s429 = 3 + i;
    r[i].error_rate = (3.0 + i) / 100;
    r[i].rps = 50, r[i].tokens_per_s = 6400, r[i].gflops = 1.5;
    for (int k = 0; k < LOAD_NLAT; k++)
      r[i].lat_ms[k] = 1.0 + k;
    for (int k = 0; k < LOAD_NSRV; k++)
      r[i].compute_ms[k] = r[i].queue_ms[k] = r[i].total_ms[k] = 0.5 * (k + 1);
  }
  r[2].shape.dtype = ATTND_DTYPE_BF16; /* named in the CSV and the JSON */
  char dir[] = "/tmp/check_load_XXXXXX", path[128], err[256];
  ck_assert_ptr_nonnull(mkdtemp(dir));

  snprintf(path, sizeof path, "%s/r.csv", dir);
  ck_assert_int_eq(load_report_csv(path, r, 3, err, sizeof err), 0);
  char *csv = tu_read_file_or_fail(path, NULL);
  int lines = 0, commas0 = -1;
  for (char *line = csv, *nl; (nl = strchr(line, '\n')); line = nl + 1) {
    int commas = 0;
    for (char *p = line; p < nl; p++)
      commas += *p == ',';
    if (commas0 < 0)
      commas0 = commas;
    ck_assert_msg(commas == commas0, "CSV line %d has %d commas, not %d",
                  lines + 1, commas, commas0);
    lines++;
  }
  ck_assert_int_eq(lines, 4);
  ck_assert_msg(strncmp(csv, "step,length,", 12) == 0, "%.40s", csv);
  ck_assert_ptr_nonnull(strstr(csv, "\n3,512,2,5,5,8,2,2,bottom_right,none,"));
  ck_assert_ptr_nonnull(strstr(csv, ",compress,dtype,mode,"));
  ck_assert_ptr_nonnull(strstr(csv, ",v1,,none,float32,closed,1,"));
  ck_assert_ptr_nonnull(strstr(csv, ",v1,,none,bfloat16,closed,2,"));
  free(csv);
  unlink(path);

  snprintf(path, sizeof path, "%s/r.json", dir);
  ck_assert_int_eq(
      load_report_json(path, "http://x/v1/attention", r, 3, err, sizeof err),
      0);
  json_error_t je;
  json_t *doc = json_load_file(path, 0, &je);
  ck_assert_msg(doc != NULL, "%s", je.text);
  json_t *steps = json_object_get(doc, "steps");
  ck_assert_int_eq(json_array_size(steps), 3);
  json_t *s2 = json_array_get(steps, 2);
  ck_assert_int_eq(json_integer_value(json_object_get(s2, "length")), 512);
  ck_assert_str_eq(
      json_string_value(json_object_get(json_object_get(s2, "shape"), "dtype")),
      "bfloat16");
  ck_assert_int_eq(
      json_integer_value(json_object_get(json_object_get(s2, "errors"), "429")),
      5);
  ck_assert_double_eq(json_real_value(json_object_get(
                          json_object_get(s2, "latency_ms"), "p99.9")),
                      4.0);
  json_decref(doc);
  unlink(path);

  snprintf(path, sizeof path, "%s/r.svg", dir);
  ck_assert_int_eq(
      load_report_svg(path, "a <title> & more", r, 3, err, sizeof err), 0);
  char *svg = tu_read_file_or_fail(path, NULL);
  ck_assert_msg(strncmp(svg, "<svg ", 5) == 0, "%.40s", svg);
  ck_assert_ptr_nonnull(strstr(svg, "a &lt;title> &amp; more"));
  ck_assert_ptr_nonnull(strstr(svg, "<polyline"));
  ck_assert_ptr_nonnull(strstr(svg, ">c=2</text>"));
  ck_assert_ptr_nonnull(strstr(svg, "</svg>\n"));
  free(svg);
  unlink(path);
  ck_assert_int_eq(
      load_report_svg("/nonexistent/dir/x.svg", "t", r, 3, err, sizeof err),
      -1);
  ck_assert_ptr_nonnull(strstr(err, "/nonexistent/dir/x.svg"));
  rmdir(dir);
}
END_TEST

/* The JSON report of the steps r[0..n), read back (a new reference). */
static json_t *report_json_of(const load_result_t *r, int n) {
  char dir[] = "/tmp/check_load_XXXXXX", path[128], err[256];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/s.json", dir);
  ck_assert_msg(load_report_json(path, "http://x", r, n, err, sizeof err) == 0,
                "%s", err);
  json_error_t je;
  json_t *doc = json_load_file(path, 0, &je);
  ck_assert_msg(doc != NULL, "%s", je.text);
  unlink(path);
  rmdir(dir);
  return doc;
}

/* The fields of the CSV line at `line` (to its newline), read as RFC 4180
 * has them: a quoted field may hold commas, and "" is a quote. */
static int csv_fields(const char *line) {
  int n = 1, quoted = 0;
  for (const char *p = line; *p && (quoted || *p != '\n'); p++)
    if (*p == '"')
      quoted = !quoted;
    else if (*p == ',' && !quoted)
      n++;
  return n;
}

/* A model named with a comma and quotes (an OIP layer model: --model
 * takes any name) is one CSV cell, quoted, its quotes doubled, so that
 * the row keeps the header's columns. Caught: the name written as it is
 * (one column more from "model" on). */
START_TEST(test_report_csv_quotes) {
  load_result_t r;
  memset(&r, 0, sizeof r);
  r.step = 1;
  r.length = 64;
  r.attention = 1;
  r.shape = base_shape;
  r.shape.protocol = LOAD_V2;
  r.shape.model = "layer \"7\", head,s";
  r.mode = LOAD_CLOSED;
  r.concurrency = 1;
  char dir[] = "/tmp/check_load_XXXXXX", path[128], err[256];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/r.csv", dir);
  ck_assert_int_eq(load_report_csv(path, &r, 1, err, sizeof err), 0);
  char *csv = tu_read_file_or_fail(path, NULL);
  char *row = strchr(csv, '\n');
  ck_assert_ptr_nonnull(row);
  row++;
  ck_assert_msg(strstr(row, ",v2,\"layer \"\"7\"\", head,s\",none,") != NULL,
                "%s", row);
  ck_assert_int_eq(csv_fields(row), csv_fields(csv));
  free(csv);
  unlink(path);
  rmdir(dir);
}
END_TEST

/* The JSON report's errors.by_status of the one step r (a new reference). */
static json_t *by_status_of(const load_result_t *r) {
  json_t *doc = report_json_of(r, 1);
  json_t *by = json_object_get(
      json_object_get(json_array_get(json_object_get(doc, "steps"), 0),
                      "errors"),
      "by_status");
  ck_assert_ptr_nonnull(by);
  json_incref(by);
  json_decref(doc);
  return by;
}

/* Twelve distinct error statuses, 400 to 411, with 1 to 12 replies each,
 * and 5 successes: by_status lists all twelve, each with its count, and no
 * 2xx; _i 0 the request engine's stats, 1 the decode engine's. Caught:
 * by_status kept the first 8 statuses and dropped the rest without a word
 * (8 keys of 12). */
START_TEST(test_report_every_status) {
  load_result_t *r = calloc(1, sizeof *r);
  ck_assert_ptr_nonnull(r);
  load_stats_t st;
  load_decode_stats_t dst;
  int64_t *status = _i ? dst.status : st.status;
  if (_i)
    ck_assert_int_eq(load_decode_stats_init(&dst), 0);
  else
    ck_assert_int_eq(load_stats_init(&st), 0);
  int64_t errors = 0;
  for (int i = 0; i < 12; i++)
    errors += status[400 + i] = i + 1;
  if (_i) {
    dst.sent = errors + 5, dst.ok = 5;
    load_result_fill_decode(r, &dst);
    load_decode_stats_free(&dst);
  } else {
    st.status[200] = 5;
    st.sent = errors + 5, st.ok = 5;
    load_result_fill(r, &st);
    load_stats_free(&st);
  }
  ck_assert_int_eq(r->other, errors);
  json_t *by = by_status_of(r);
  ck_assert_msg(json_object_size(by) == 12, "%zu statuses listed, not 12",
                json_object_size(by));
  for (int i = 0; i < 12; i++) {
    char k[16];
    snprintf(k, sizeof k, "%d", 400 + i);
    ck_assert_msg(json_integer_value(json_object_get(by, k)) == i + 1,
                  "by_status[%s] is %lld, not %d", k,
                  (long long)json_integer_value(json_object_get(by, k)), i + 1);
  }
  json_decref(by);
  free(r);
}
END_TEST

/* ---- decode mode ----------------------------------------------------------
 */

/* Pre-projected sessions: E 16, 4 heads over 2 key/value heads (Dh 4),
 * half rope, a timeout. */
static const load_decode_shape_t dec_shape = {
    .E = 16, .H = 4, .Hkv = 2, .rope = ATTN_ROPE_HALF, .timeout_ms = 250};

static json_t *parse_text(const char *txt, size_t len) {
  json_error_t je;
  json_t *v = json_loadb(txt, len, JSON_REJECT_DUPLICATES, &je);
  ck_assert_msg(v != NULL, "not JSON: %s: %.200s", je.text, txt);
  return v;
}

START_TEST(test_decode_bodies) {
  load_decode_shape_t s = dec_shape;
  s.encoding = (attnd_form_t)_i;
  attnd_buf_t b;
  attnd_buf_init(&b);
  load_decode_create_body(&s, &b);
  ck_assert_str_eq(b.data, "{\"num_heads\":4,\"num_kv_heads\":2,\"head_dim\":4,"
                           "\"rope\":{\"theta\":10000,\"style\":\"half\"}}");
  b.len = 0;
  s.rope = ATTN_ROPE_NONE;
  load_decode_create_body(&s, &b);
  ck_assert_str_eq(b.data,
                   "{\"num_heads\":4,\"num_kv_heads\":2,\"head_dim\":4}");
  load_decode_shape_t l = {.layer = "blocks.\"3\"", .E = 32, .H = 4, .Hkv = 4};
  b.len = 0;
  load_decode_create_body(&l, &b);
  ck_assert_str_eq(b.data, "{\"layer\":\"blocks.\\\"3\\\"\"}");

  /* a step: the rows of positions 5, 6, 7, bit for bit, and the members */
  const uint64_t seed = load_decode_seed(1, 64, 2);
  b.len = 0;
  ck_assert_int_eq(load_decode_step_body(&s, seed, 5, 3, &b), 0);
  json_t *v = parse_text(b.data, b.len);
  int64_t wq, wk, wv;
  load_decode_widths(&s, &wq, &wk, &wv);
  ck_assert(wq == 16 && wk == 8 && wv == 8);
  float q[3 * 16], k[3 * 8], vv[3 * 8];
  for (int i = 0; i < 3; i++)
    load_decode_row(&s, seed, 5 + i, q + i * 16, k + i * 8, vv + i * 8);
  int64_t qdim[2] = {3, 16}, kdim[2] = {3, 8};
  check_tensor(v, "query", q, 2, qdim, s.encoding, "step");
  check_tensor(v, "key", k, 2, kdim, s.encoding, "step");
  check_tensor(v, "value", vv, 2, kdim, s.encoding, "step");
  ck_assert_int_eq(json_integer_value(json_object_get(v, "expected_length")),
                   5);
  ck_assert_int_eq(json_integer_value(json_object_get(v, "timeout_ms")), 250);
  static const char *const api_enc[] = {"nested", "flat", "base64"};
  json_t *ret = json_object_get(v, "return");
  ck_assert_str_eq(json_string_value(json_object_get(ret, "encoding")),
                   api_enc[_i]);
  ck_assert(json_is_false(json_object_get(ret, "metrics")));
  ck_assert_int_eq(json_object_size(v), 6);
  json_decref(v);

  /* a layer's step: only the hidden states */
  l.encoding = s.encoding;
  l.timeout_ms = 0;
  b.len = 0;
  ck_assert_int_eq(load_decode_step_body(&l, seed, 0, 2, &b), 0);
  v = parse_text(b.data, b.len);
  float h[2 * 32];
  load_decode_widths(&l, &wq, &wk, &wv);
  ck_assert(wq == 32 && wk == 0 && wv == 0);
  for (int i = 0; i < 2; i++)
    load_decode_row(&l, seed, i, h + i * 32, NULL, NULL);
  int64_t hdim[2] = {2, 32};
  check_tensor(v, "query", h, 2, hdim, s.encoding, "layer step");
  ck_assert_ptr_null(json_object_get(v, "key"));
  ck_assert_ptr_null(json_object_get(v, "value"));
  ck_assert_ptr_null(json_object_get(v, "timeout_ms"));
  ck_assert_int_eq(json_object_size(v), 3);
  json_decref(v);
  attnd_buf_free(&b);
}
END_TEST

/* A token is a function of the session's seed and its position only. */
START_TEST(test_decode_rows) {
  float a[32], b2[32], c[32];
  uint64_t s0 = load_decode_seed(1, 64, 0), s1 = load_decode_seed(1, 64, 1);
  ck_assert(s0 != s1);
  ck_assert(s0 != load_decode_seed(1, 65, 0) &&
            s0 != load_decode_seed(2, 64, 0));
  load_decode_row(&dec_shape, s0, 9, a, a + 16, a + 24);
  load_decode_row(&dec_shape, s0, 9, b2, b2 + 16, b2 + 24);
  ck_assert_int_eq(memcmp(a, b2, sizeof a), 0);
  load_decode_row(&dec_shape, s0, 10, c, c + 16, c + 24);
  ck_assert(memcmp(a, c, sizeof a) != 0);
  load_decode_row(&dec_shape, s1, 9, c, c + 16, c + 24);
  ck_assert(memcmp(a, c, sizeof a) != 0);
  for (int i = 0; i < 32; i++)
    ck_assert(a[i] >= -1 && a[i] < 1);
}
END_TEST

/* The reply text of a step: {"id":null,"length":n,"output":T}. */
static char *step_reply(int64_t length, const float *out, int64_t rows,
                        int64_t cols, attnd_form_t enc) {
  static const sh_form_t forms[] = {SH_NESTED, SH_FLAT, SH_BASE64};
  int64_t dim[2] = {rows, cols};
  json_t *v = json_pack("{s:n,s:I,s:o}", "id", "length", (json_int_t)length,
                        "output", sh_floats_json(out, 2, dim, forms[enc]));
  char *txt = json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(v);
  ck_assert_ptr_nonnull(txt);
  return txt;
}

/* load_decode_verify against the float64 reference of the whole sequence
 * (tests/ref.c): passes; a wrong length, a perturbed output and a layer's
 * session fail, saying why. Loops over the encodings, with and without
 * rope. */
START_TEST(test_decode_verify) {
  load_decode_shape_t s = dec_shape;
  s.encoding = (attnd_form_t)(_i % 3);
  s.rope = _i < 3 ? ATTN_ROPE_HALF : ATTN_ROPE_NONE;
  const uint64_t seed = load_decode_seed(7, 70, 1);
  const int64_t start = 70, n = 2, rows = start + n;
  float *q = malloc((size_t)rows * 16 * sizeof *q);
  float *k = malloc((size_t)rows * 8 * sizeof *k);
  float *v = malloc((size_t)rows * 8 * sizeof *v);
  for (int64_t i = 0; i < rows; i++)
    load_decode_row(&s, seed, i, q + i * 16, k + i * 8, v + i * 8);
  attn_params_t p = {.query = tu_t2(q + start * 16, n, 16),
                     .key = tu_t2(k, rows, 8),
                     .value = tu_t2(v, rows, 8),
                     .num_heads = 4,
                     .num_kv_heads = 2,
                     .causal = ATTN_CAUSAL_BOTTOM_RIGHT,
                     .rope = {.style = s.rope, .theta = 10000}};
  ref_result_t ref;
  ck_assert_int_eq(ref_attention(&p, &ref), 0);
  float out[2 * 16];
  for (int i = 0; i < 32; i++)
    out[i] = (float)ref.out[i];
  ref_result_free(&ref);

  double e;
  char why[256] = "";
  char *txt = step_reply(rows, out, n, 16, s.encoding);
  ck_assert_msg(load_decode_verify(&s, seed, start, n, txt, strlen(txt), 2, &e,
                                   why, sizeof why) == 0,
                "%s", why);
  ck_assert_msg(e <= 1e-5, "relative error %g", e);
  /* the same reply for tokens it is not: the check sees it */
  ck_assert_int_eq(load_decode_verify(&s, seed, start - 1, n, txt, strlen(txt),
                                      1, &e, why, sizeof why),
                   -1);
  ck_assert_str_eq(why, "reply length 72, expected 71");
  free(txt);
  txt = step_reply(rows - 1, out, n, 16, s.encoding);
  ck_assert_int_eq(load_decode_verify(&s, seed, start, n, txt, strlen(txt), 1,
                                      &e, why, sizeof why),
                   -1);
  ck_assert_str_eq(why, "reply length 71, expected 72");
  free(txt);
  out[17] += 0.05f;
  txt = step_reply(rows, out, n, 16, s.encoding);
  ck_assert_int_eq(load_decode_verify(&s, seed, start, n, txt, strlen(txt), 1,
                                      &e, why, sizeof why),
                   -1);
  ck_assert_msg(e > LOAD_VERIFY_TOL && strstr(why, "relative error"), "%s",
                why);
  /* a different session's tokens: a different answer */
  out[17] -= 0.05f;
  ck_assert_int_eq(load_decode_verify(&s, load_decode_seed(7, 70, 2), start, n,
                                      txt, strlen(txt), 1, &e, why, sizeof why),
                   -1);
  load_decode_shape_t l = {.layer = "demo", .E = 64, .H = 4, .Hkv = 4};
  ck_assert_int_eq(load_decode_verify(&l, seed, start, n, txt, strlen(txt), 1,
                                      &e, why, sizeof why),
                   -1);
  ck_assert_msg(strstr(why, "layer 'demo'") == why, "%s", why);
  free(txt);
  free(q);
  free(k);
  free(v);
}
END_TEST

/* The decode columns of the CSV and the decode object of the JSON; a
 * second step that stopped the sweep, named in the CSV's last column, the
 * JSON's "stopped" (null on the first) and the picture's title. */
START_TEST(test_decode_report) {
  load_result_t r[2];
  memset(r, 0, sizeof r);
  for (int i = 0; i < 2; i++) {
    r[i].step = i + 1;
    r[i].length = 256;
    r[i].decode = 1;
    r[i].dshape = dec_shape;
    r[i].shape = (load_shape_t){.B = 1,
                                .Lq = 1,
                                .Lk = 256,
                                .E = 16,
                                .H = 4,
                                .Hkv = 2,
                                .causal = ATTN_CAUSAL_BOTTOM_RIGHT};
    r[i].mode = LOAD_CLOSED;
    r[i].concurrency = 1 + 3 * i;
    r[i].sessions = 4;
    r[i].steps = 8;
    r[i].sent = r[i].ok = 44;
    r[i].tokens_per_s = 1000;
    r[i].recreated[LOAD_RECREATE_404] = 2;
    r[i].recreated[LOAD_RECREATE_410] = i;
    r[i].sessions_done = 4;
    for (int k = 0; k < LOAD_NLAT; k++)
      r[i].lat_ms[k] = 0.1 * (k + 1);
    for (int k = 0; k < LOAD_NSRV; k++)
      r[i].ttft_ms[k] = r[i].compute_ms[k] = 2.0 * (k + 1);
    r[i].stop = i ? LOAD_STOP_UNAUTHORIZED : LOAD_STOP_NONE;
    snprintf(r[i].codes[0].code, sizeof r[i].codes[0].code, "unknown_session");
    r[i].codes[0].count = 2;
    r[i].n_codes = 1;
  }
  char dir[] = "/tmp/check_load_XXXXXX", path[128], err[256];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/d.csv", dir);
  ck_assert_int_eq(load_report_csv(path, r, 2, err, sizeof err), 0);
  char *csv = tu_read_file_or_fail(path, NULL);
  ck_assert_msg(
      strstr(csv, ",workload,sessions,steps,create,rope,ttft_p50_ms,") != NULL,
      "%.400s", csv);
  ck_assert_msg(strstr(csv, ",decode,4,8,post,half,2.000,4.000,6.000,8.000,") !=
                    NULL,
                "%s", csv);
  ck_assert_msg(strstr(csv, ",recreated_409,bad_replies,stopped\n") &&
                    strstr(csv, ",4,0,2,2,0,0,0,\n") &&
                    strstr(csv, ",4,0,3,2,1,0,0,unauthorized\n"),
                "%s", csv);
  free(csv);
  unlink(path);

  snprintf(path, sizeof path, "%s/d.json", dir);
  ck_assert_int_eq(load_report_json(path, "http://x", r, 2, err, sizeof err),
                   0);
  json_error_t je;
  json_t *doc = json_load_file(path, 0, &je);
  ck_assert_msg(doc != NULL, "%s", je.text);
  json_t *s1 = json_array_get(json_object_get(doc, "steps"), 1);
  ck_assert_str_eq(json_string_value(json_object_get(s1, "workload")),
                   "decode");
  json_t *d = json_object_get(s1, "decode");
  ck_assert_int_eq(json_integer_value(json_object_get(d, "recreated")), 3);
  ck_assert_double_eq(
      json_real_value(json_object_get(json_object_get(d, "ttft_ms"), "p99")),
      6.0);
  ck_assert_int_eq(
      json_integer_value(json_object_get(
          json_object_get(json_object_get(s1, "errors"), "by_code"),
          "unknown_session")),
      2);
  ck_assert_str_eq(json_string_value(json_object_get(s1, "stopped")),
                   "unauthorized");
  ck_assert(json_is_null(json_object_get(
      json_array_get(json_object_get(doc, "steps"), 0), "stopped")));
  json_decref(doc);
  unlink(path);

  snprintf(path, sizeof path, "%s/d.svg", dir);
  ck_assert_int_eq(load_report_svg(path, "decode", r, 2, err, sizeof err), 0);
  char *svg = tu_read_file_or_fail(path, NULL);
  ck_assert_ptr_nonnull(strstr(svg, ">time to first token (prefill)</text>"));
  ck_assert_ptr_nonnull(strstr(svg, ">decode throughput</text>"));
  ck_assert_ptr_nonnull(strstr(svg, "width='1600'"));
  ck_assert_ptr_nonnull(
      strstr(svg, ">decode; stopped at step 2: every reply 401 unauthorized<"));
  free(svg);
  unlink(path);
  rmdir(dir);
}
END_TEST

/* Cell `col` of data row `row` (0: the first) of CSV text, copied into
 * out[0..n); the writer quotes no cell of these steps. */
static void csv_cell_of(const char *csv, int row, const char *col, char *out,
                        size_t n) {
  const char *nl = strchr(csv, '\n');
  int k = 0, found = -1;
  for (const char *p = csv; p < nl; k++) {
    size_t len = strcspn(p, ",\n");
    if (len == strlen(col) && strncmp(p, col, len) == 0)
      found = k;
    p += len + (p[len] == ',');
    if (p[-1] != ',')
      break;
  }
  ck_assert_msg(found >= 0, "no column %s", col);
  const char *line = nl + 1;
  for (int r = 0; r < row; r++)
    line = strchr(line, '\n') + 1;
  for (int i = 0; i < found; i++)
    line += strcspn(line, ",\n") + 1;
  snprintf(out, n, "%.*s", (int)strcspn(line, ",\n"), line);
}

/* The whitespace-separated fields of the table's row `row` (0: the first
 * after the header) of text, in f[0..32). Returns their number. */
static int table_fields(char *text, int row, char **f) {
  char *line = text;
  for (int r = 0; r <= row; r++)
    line = strchr(line, '\n') + 1;
  *strchr(line, '\n') = 0;
  int n = 0;
  for (char *save = NULL, *t = strtok_r(line, " ", &save); t && n < 32;
       t = strtok_r(NULL, " ", &save))
    f[n++] = t;
  return n;
}

/* Steps whose percentiles have no value: one whose every request failed
 * (no latency, no Server-Timing), one with two successes, 1.5 and 2.5 ms,
 * and no Server-Timing (a latency, no server times), and a decode step
 * with no reply. A time with no value is no number: an empty CSV cell,
 * JSON null, "-" in the table and the line, and no point in the picture,
 * where a series' line breaks;
 * the measured ones are as before. Caught: every one reported as 0.000 ms,
 * a value that looks measured; and --verify's largest error reported as 0
 * for steps that verified nothing. */
START_TEST(test_report_no_value) {
  load_result_t *r = calloc(3, sizeof *r);
  ck_assert_ptr_nonnull(r);
  load_stats_t st;
  for (int i = 0; i < 2; i++) {
    ck_assert_int_eq(load_stats_init(&st), 0);
    st.sent = 5;
    st.transport = 5 - 2 * i;
    st.ok = st.status[200] = 2 * i;
    if (i) {
      load_hist_record(st.latency, 1500);
      load_hist_record(st.latency, 2500);
    }
    load_result_fill(&r[i], &st);
    load_stats_free(&st);
    r[i].step = i + 1;
    r[i].length = 128 << i;
    r[i].attention = 1;
    r[i].shape = base_shape;
    r[i].mode = LOAD_CLOSED;
    r[i].concurrency = 1;
  }
  load_decode_stats_t dst;
  ck_assert_int_eq(load_decode_stats_init(&dst), 0);
  dst.sent = dst.transport = 3;
  load_result_fill_decode(&r[2], &dst);
  load_decode_stats_free(&dst);
  r[2].step = 1, r[2].length = 64, r[2].decode = 1, r[2].dshape = dec_shape;
  r[2].shape = (load_shape_t){.B = 1, .Lq = 1, .Lk = 64, .E = 16, .H = 4};
  r[2].mode = LOAD_CLOSED, r[2].concurrency = 1, r[2].sessions = 1;

  char dir[] = "/tmp/check_load_XXXXXX", path[128], err[256], cell[64];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  static const char *const none[] = {
      "lat_p50_ms",   "lat_p999_ms",    "lat_max_ms",   "lat_mean_ms",
      "queue_p50_ms", "compute_max_ms", "total_p90_ms", "ttft_p50_ms",
      "ttft_mean_ms", "create_p50_ms"};
  snprintf(path, sizeof path, "%s/n.csv", dir);
  for (int k = 0; k < 2; k++) { /* the request steps, then the decode step */
    ck_assert_int_eq(
        load_report_csv(path, k ? &r[2] : r, k ? 1 : 2, err, sizeof err), 0);
    char *csv = tu_read_file_or_fail(path, NULL);
    for (size_t c = 0; c < sizeof none / sizeof none[0]; c++) {
      csv_cell_of(csv, 0, none[c], cell, sizeof cell);
      ck_assert_msg(cell[0] == 0, "%s step: %s is '%s', not empty",
                    k ? "decode" : "failed", none[c], cell);
    }
    if (k == 0) {
      csv_cell_of(csv, 1, "lat_p50_ms", cell, sizeof cell);
      ck_assert_str_eq(cell, "1.500");
      csv_cell_of(csv, 1, "lat_mean_ms", cell, sizeof cell);
      ck_assert_str_eq(cell, "2.000");
      csv_cell_of(csv, 1, "queue_p50_ms", cell, sizeof cell);
      ck_assert_str_eq(cell, "");
    }
    free(csv);
  }

  json_t *doc = report_json_of(r, 3);
  json_t *steps = json_object_get(doc, "steps");
  for (int i = 0; i < 3; i++) {
    json_t *x = json_array_get(steps, i),
           *lat = json_object_get(x, "latency_ms");
    json_t *srv = json_object_get(x, "server_ms");
    ck_assert_msg(json_is_null(json_object_get(lat, "p50")) == (i != 1) &&
                      json_is_null(json_object_get(lat, "mean")) == (i != 1),
                  "step %d: latency_ms %s", i, json_dumps(lat, JSON_COMPACT));
    ck_assert_msg(
        json_is_null(json_object_get(json_object_get(srv, "queue"), "p50")) &&
            json_is_null(json_object_get(json_object_get(srv, "total"), "max")),
        "step %d: server_ms %s", i, json_dumps(srv, JSON_COMPACT));
  }
  ck_assert_double_eq(
      json_real_value(json_object_get(
          json_object_get(json_array_get(steps, 1), "latency_ms"), "p50")),
      1.5);
  json_t *d = json_object_get(json_array_get(steps, 2), "decode");
  ck_assert_msg(
      d && json_is_null(json_object_get(d, "create_p50_ms")) &&
          json_is_null(json_object_get(json_object_get(d, "ttft_ms"), "p99")),
      "decode: %s", d ? json_dumps(d, JSON_COMPACT) : "missing");
  for (int i = 0; i < 3; i++) /* nothing was verified: no error measured */
    ck_assert_msg(
        json_is_null(
            json_object_get(json_object_get(json_array_get(steps, i), "verify"),
                            "max_rel_err")),
        "step %d: verify %s", i,
        json_dumps(json_object_get(json_array_get(steps, i), "verify"),
                   JSON_COMPACT));
  json_decref(doc);
  r[1].verified = 2, r[1].verify_max_err = 2.5e-7;
  doc = report_json_of(r, 2);
  ck_assert_double_eq(
      json_real_value(json_object_get(
          json_object_get(json_array_get(json_object_get(doc, "steps"), 1),
                          "verify"),
          "max_rel_err")),
      2.5e-7);
  json_decref(doc);
  ck_assert_int_eq(load_report_csv(path, r, 2, err, sizeof err), 0);
  char *vcsv = tu_read_file_or_fail(path, NULL);
  csv_cell_of(vcsv, 0, "verify_max_err", cell, sizeof cell);
  ck_assert_msg(cell[0] == 0, "verify_max_err unverified is '%s'", cell);
  csv_cell_of(vcsv, 1, "verify_max_err", cell, sizeof cell);
  ck_assert_str_eq(cell, "2.5e-07");
  free(vcsv);
  r[1].verified = 0, r[1].verify_max_err = 0;

  /* the table and the line */
  char *text = NULL, *f[32];
  size_t tlen;
  FILE *mf = open_memstream(&text, &tlen);
  load_report_table(mf, r, 2);
  fclose(mf);
  char *copy = strdup(text);
  ck_assert_int_eq(table_fields(copy, 0, f), 18);
  for (int c = 10; c <= 16; c++) /* p50_ms .. comp_p50 */
    ck_assert_msg(strcmp(f[c], "-") == 0, "column %d is %s:\n%s", c, f[c],
                  text);
  free(copy);
  copy = strdup(text);
  ck_assert_int_eq(table_fields(copy, 1, f), 18);
  ck_assert_str_eq(f[10], "1.5");
  ck_assert_str_eq(f[14], "2.5");
  ck_assert_str_eq(f[15], "-");
  free(copy);
  free(text);
  mf = open_memstream(&text, &tlen);
  load_report_table(mf, &r[2], 1);
  fclose(mf);
  copy = strdup(text);
  ck_assert_int_eq(table_fields(copy, 0, f), 17);
  for (int c = 8; c <= 13; c++) /* ttft_p50 .. max_ms */
    ck_assert_msg(strcmp(f[c], "-") == 0, "column %d is %s:\n%s", c, f[c],
                  text);
  ck_assert_str_eq(f[15], "-"); /* comp_p50 */
  free(copy);
  free(text);
  mf = open_memstream(&text, &tlen);
  load_report_line(mf, &r[0]);
  load_report_line(mf, &r[2]);
  fclose(mf);
  ck_assert_msg(strstr(text, "| ms p50 - p99 - max -") &&
                    strstr(text, "| ttft ms p50 - p99 - | step ms p50 - p99 - "
                                 "max -"),
                "%s", text);
  free(text);

  /* the picture: the steps without a value leave no point, and no NaN */
  snprintf(path, sizeof path, "%s/n.svg", dir);
  ck_assert_int_eq(load_report_svg(path, "t", r, 2, err, sizeof err), 0);
  char *svg = tu_read_file_or_fail(path, NULL);
  ck_assert_msg(strstr(svg, "nan") == NULL, "%s", svg);
  free(svg);
  /* a series measured, not measured, measured: its latency lines stop at
   * the gap, one polyline of one point on each side for p50 and for p99;
   * tokens/s (0, a value) goes on; the server times have no line at all */
  load_result_t gap[3] = {r[1], r[0], r[1]};
  for (int i = 0; i < 3; i++)
    gap[i].length = 128 << i;
  ck_assert_int_eq(load_report_svg(path, "t", gap, 3, err, sizeof err), 0);
  svg = tu_read_file_or_fail(path, NULL);
  int lines = 0, single = 0;
  for (const char *p = strstr(svg, "points='"); p;
       p = strstr(p + 1, "points='")) {
    int pts = 0;
    for (const char *q = p + 8; *q != '\''; q++)
      pts += *q == ' ';
    lines++;
    single += pts == 1;
  }
  ck_assert_msg(lines == 5 && single == 4,
                "%d polylines, %d of one point:\n%.3000s", lines, single, svg);
  free(svg);
  unlink(path);
  snprintf(path, sizeof path, "%s/n.csv", dir);
  unlink(path);
  rmdir(dir);
  free(r);
}
END_TEST

/* ---- the request engine's open loop ---------------------------------------
 *
 * Against a loopback port that refuses connections, so that every request
 * fails at once and counts as a transport error: `sent` counts the
 * arrivals whose intended time falls in the window [warm-up, warm-up +
 * duration), whatever the server does. Evenly spaced arrivals at `rate`
 * fill a window of d seconds with exactly rate·d of them. */

static const struct {
  double rate, warmup, duration;
  int64_t sent;
} uniform_cases[] = {
    {100, 0, 0.5, 50},
    {300, 0, 0.3, 90},
    {100, 0.25, 0.5, 50},
};

/* Runs `run` against a loopback port bound but not listening, whose
 * connections are refused; st is initialised here (free it). */
static void run_refused(load_run_t *run, load_stats_t *st) {
  int port, fd = sh_bound_port_assert(&port);
  char url[64], err[256];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/x", port);
  curl_global_init(CURL_GLOBAL_ALL);
  run->url = url;
  ck_assert_int_eq(load_stats_init(st), 0);
  ck_assert_msg(load_client_run(run, st, err, sizeof err) == 0, "%s", err);
  run->url = NULL;
  close(fd);
}

START_TEST(test_open_loop_uniform_count) {
  load_run_t run = {.mode = LOAD_OPEN,
                    .concurrency = 4,
                    .rate = uniform_cases[_i].rate,
                    .poisson = 0,
                    .warmup_s = uniform_cases[_i].warmup,
                    .duration_s = uniform_cases[_i].duration,
                    .timeout_s = 10};
  load_stats_t st;
  run_refused(&run, &st);
  ck_assert_msg(st.sent == uniform_cases[_i].sent,
                "rate %g/s for %g s after %g s of warm-up: %lld sent, not %lld",
                run.rate, run.duration_s, run.warmup_s, (long long)st.sent,
                (long long)uniform_cases[_i].sent);
  ck_assert_int_eq(st.transport, st.sent);
  ck_assert_int_eq(st.ok, 0);
  load_stats_free(&st);
}
END_TEST

/* In a sweep's first step (`unanswered`), the request engine ends its run
 * at the first refused connection, rather than send to a port with
 * nothing behind it for the whole window: st.stop says why, and at most
 * one request a connection was sent. Caught: `unanswered` ignored. */
START_TEST(test_request_stops_unreachable) {
  load_run_t run = {.mode = LOAD_CLOSED,
                    .concurrency = 2,
                    .duration_s = 1,
                    .timeout_s = 10,
                    .unanswered = 1};
  load_stats_t st;
  run_refused(&run, &st);
  ck_assert_msg(st.stop == LOAD_STOP_UNREACHABLE && st.sent >= 1 &&
                    st.sent <= 2 && st.transport == st.sent,
                "stop %d, %lld sent", (int)st.stop, (long long)st.sent);
  ck_assert_msg(strstr(st.first_error, "onnect") != NULL, "%s", st.first_error);
  load_stats_free(&st);
}
END_TEST

/* ---- the engines against a scripted server --------------------------------
 *
 * A loopback server on a thread of its own, one request a connection
 * (Connection: close), that speaks just enough of the sessions' API: a
 * creation gets an id, an attention request the "length" due after it
 * (its expected_length plus the `prefill` tokens of a prefill, which
 * starts at 0, or plus the one token of a step), a deletion 204; any
 * other request is answered as an attention request. The request with
 * index `bad_at`, in arrival order (every request when it is -1), gets a
 * 2xx that is wrong instead: a creation without its id, or a length not
 * the one due. Every reply carries the header lines `extra`. The first
 * `ncodes` requests get instead the statuses `codes`, with a body {}. */

typedef struct fake {
  int fd, port;
  int bad_at;
  int64_t prefill;
  const char *extra; /* "Name: value\r\n" lines, or NULL */
  const int *codes;  /* request i < ncodes: status codes[i], body {} */
  int ncodes;
  int coded;           /* ... or, when set, {"error":{"code":"e<i>"}} */
  const char *session; /* the id creations get, or NULL: one of 32 hex */
  const char *code;    /* with coded, every error's code instead of e<i> */
  int n;               /* requests answered */
  int plain; /* set: every connection gets a plain "HTTP/1.1 400" at once,
                nothing read, which fails a TLS client's handshake */
  pthread_t th;
} fake_t;

/* Appends p[0..k) to the NUL-terminated tail[0..*tl), keeping its last
 * 256 bytes (tail has room for 257). */
static void tail_add(char *tail, size_t *tl, const char *p, size_t k) {
  if (k > 256) {
    p += k - 256;
    k = 256;
  }
  size_t drop = *tl + k > 256 ? *tl + k - 256 : 0;
  memmove(tail, tail + drop, *tl - drop);
  memcpy(tail + *tl - drop, p, k);
  *tl += k - drop;
  tail[*tl] = 0;
}

/* Reads one request from c: its head and then its body, which it drops
 * but for its expected_length (-1 without one); method and path get the
 * request line's. Returns 0, or -1 when the client went away. */
static int fake_read(int c, char *method, char *path, size_t n,
                     long long *expected) {
  char head[8192];
  size_t len = 0;
  char *end = NULL;
  while (end == NULL) {
    if (len == sizeof head - 1)
      return -1;
    ssize_t k = read(c, head + len, sizeof head - 1 - len);
    if (k <= 0)
      return -1;
    len += (size_t)k;
    head[len] = 0;
    end = strstr(head, "\r\n\r\n");
  }
  size_t ml = strcspn(head, " ");
  snprintf(method, n, "%.*s", (int)ml, head);
  snprintf(path, n, "%.*s", (int)strcspn(head + ml + 1, " "), head + ml + 1);
  const char *cl = strcasestr(head, "\r\nContent-Length:");
  long long body = cl ? strtoll(cl + 17, NULL, 10) : 0;
  long long have = (long long)(head + len - (end + 4));
  /* expected_length is in the body's last bytes (decode.c writes it after
   * the tensors): keep them, with the head's share of the body */
  char buf[65536], tail[257] = "";
  size_t tl = 0;
  tail_add(tail, &tl, end + 4, (size_t)have);
  while (have < body) {
    ssize_t k = read(c, buf, sizeof buf);
    if (k <= 0)
      return -1;
    have += k;
    tail_add(tail, &tl, buf, (size_t)k);
  }
  const char *e = strstr(tail, "\"expected_length\":");
  *expected = e ? strtoll(e + 18, NULL, 10) : -1;
  return 0;
}

static void *fake_main(void *arg) {
  fake_t *f = arg;
  for (;;) {
    int c = accept(f->fd, NULL, NULL);
    if (c < 0)
      return NULL; /* shut down */
    if (f->plain) {
      static const char line[] = "HTTP/1.1 400 Bad Request\r\n\r\n";
      f->n += send(c, line, sizeof line - 1, MSG_NOSIGNAL) > 0;
      close(c);
      continue;
    }
    char method[16], path[256], reply[1024], body[128] = "";
    long long expected;
    if (fake_read(c, method, path, sizeof method, &expected) == 0) {
      int i = f->n++, bad = f->bad_at < 0 || i == f->bad_at, code = 200;
      if (i < f->ncodes) {
        code = f->codes[i];
        if (f->coded && f->code)
          snprintf(body, sizeof body, "{\"error\":{\"code\":\"%s\"}}", f->code);
        else if (f->coded)
          snprintf(body, sizeof body, "{\"error\":{\"code\":\"e%d\"}}", i);
        else
          snprintf(body, sizeof body, "{}");
      } else if (strcmp(method, "DELETE") == 0)
        code = 204;
      else if (strcmp(path, "/v1/sessions") == 0) {
        code = 201;
        if (bad)
          snprintf(body, sizeof body, "{\"max_tokens\":64}");
        else if (f->session)
          snprintf(body, sizeof body, "{\"session\":\"%s\"}", f->session);
        else
          snprintf(body, sizeof body, "{\"session\":\"%032x\"}", 7);
      } else {
        long long due = expected > 0 ? expected + 1 : f->prefill;
        snprintf(body, sizeof body, "{\"length\":%lld}", due + bad);
      }
      int k = snprintf(reply, sizeof reply,
                       "HTTP/1.1 %d X\r\nContent-Type: application/json\r\n"
                       "%sContent-Length: %zu\r\nConnection: close\r\n\r\n%s",
                       code, f->extra ? f->extra : "", strlen(body), body);
      if (send(c, reply, (size_t)k, MSG_NOSIGNAL) != k)
        f->n = -1000; /* fails the test */
    }
    close(c);
  }
}

static void fake_start(fake_t *f, int bad_at, int64_t prefill) {
  memset(f, 0, sizeof *f);
  f->bad_at = bad_at;
  f->prefill = prefill;
  f->fd = socket(AF_INET, SOCK_STREAM, 0);
  ck_assert_int_ge(f->fd, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof a;
  ck_assert_int_eq(bind(f->fd, (struct sockaddr *)&a, sizeof a), 0);
  ck_assert_int_eq(listen(f->fd, 16), 0);
  ck_assert_int_eq(getsockname(f->fd, (struct sockaddr *)&a, &al), 0);
  f->port = ntohs(a.sin_port);
  ck_assert_int_eq(pthread_create(&f->th, NULL, fake_main, f), 0);
}

static void fake_stop(fake_t *f) {
  shutdown(f->fd, SHUT_RDWR);
  pthread_join(f->th, NULL);
  close(f->fd);
}

/* The pause after a first failure, doubled after each to 1 s: 0.1 ms, not
 * the tool's 10 ms, so that a session's ten failures in a row pause 51 ms,
 * not 3.3 s. No test reads a pause's length. */
#define PAUSE_S 1e-4

/* `sessions` sessions, each a prefill of 4 tokens and `steps` one-token
 * steps, run to their end against the scripted server f (started, and set
 * up as the test needs), which is then stopped; st the run's (initialised
 * here). */
static void sessions_against(fake_t *f, int sessions, int64_t steps,
                             load_decode_stats_t *st) {
  curl_global_init(CURL_GLOBAL_ALL);
  char base[64], err[256];
  snprintf(base, sizeof base, "http://127.0.0.1:%d", f->port);
  load_decode_run_t run = {.base = base,
                           .shape = &dec_shape,
                           .sessions = sessions,
                           .prefill = 4,
                           .steps = steps,
                           .concurrency = 1,
                           .timeout_s = 10,
                           .seed = 1,
                           .pause_s = PAUSE_S};
  ck_assert_int_eq(load_decode_stats_init(st), 0);
  ck_assert_msg(load_decode_run(&run, st, err, sizeof err) == 0, "%s", err);
  fake_stop(f);
}

/* One session, a prefill of 4 tokens and `steps` one-token steps, run to
 * its end against the scripted server, which answers request `bad_at`
 * wrongly (every one when -1), the first `ncodes` with `codes`, and adds
 * `extra` to every reply; the server stopped, with f->n its requests, st
 * the run's. */
static void decode_steps_against(fake_t *f, int bad_at, int64_t steps,
                                 const char *extra, const int *codes,
                                 int ncodes, load_decode_stats_t *st) {
  fake_start(f, bad_at, 4);
  f->extra = extra;
  f->codes = codes, f->ncodes = ncodes;
  sessions_against(f, 1, steps, st);
}

/* The same with no steps and no extra header lines. */
static void decode_against(fake_t *f, int bad_at, load_decode_stats_t *st) {
  decode_steps_against(f, bad_at, 0, NULL, NULL, 0, st);
}

/* One session, a prefill and no steps, against a server that answers one
 * request (_i: the creation, then the prefill) with a wrong 2xx: the run
 * sends that request again and goes on. Each request sent ends as exactly
 * one of ok and the errors: the wrong reply is an error (bad_replies), not
 * a success too. */
START_TEST(test_decode_bad_reply_counts_once) {
  fake_t f;
  load_decode_stats_t st;
  decode_against(&f, (int)_i, &st);
  /* create, prefill, delete, and the one sent again */
  ck_assert_int_eq(f.n, 4);
  ck_assert_int_eq(st.sent, 4);
  ck_assert_int_eq(st.bad_replies, 1);
  ck_assert_int_eq(load_decode_errors(&st), 1);
  ck_assert_int_eq(st.sessions_done, 1);
  ck_assert_int_eq(st.abandoned, 0);
  ck_assert_msg(st.ok == 3, "%lld ok of %lld sent, %lld errors",
                (long long)st.ok, (long long)st.sent,
                (long long)load_decode_errors(&st));
  load_result_t r;
  memset(&r, 0, sizeof r);
  load_result_fill_decode(&r, &st);
  ck_assert_int_eq(r.ok + r.s429 + r.s503 + r.s504 + r.other + r.transport,
                   r.sent);
  load_decode_stats_free(&st);
}
END_TEST

/* A server whose every 2xx is wrong: the session fails
 * LOAD_DECODE_MAX_FAILS times in a row, is abandoned, and the run ends
 * (a wrong reply must not reset the count of failures in a row). */
START_TEST(test_decode_wrong_replies_abandon) {
  fake_t f;
  load_decode_stats_t st;
  decode_against(&f, -1, &st);
  ck_assert_int_eq(st.abandoned, 1);
  ck_assert_int_eq(st.sessions_done, 0);
  ck_assert_int_eq(st.sent, LOAD_DECODE_MAX_FAILS);
  ck_assert_int_eq(st.bad_replies, LOAD_DECODE_MAX_FAILS);
  ck_assert_int_eq(load_decode_errors(&st), LOAD_DECODE_MAX_FAILS);
  ck_assert_int_eq(st.ok, 0);
  load_decode_stats_free(&st);
}
END_TEST

/* An error.code that is not text (a byte of no UTF-8, an escape
 * sequence): counted under the code with each such byte as '?', which the
 * JSON report's by_code holds. Caught: the code was kept as it came, and
 * jansson refused it as a key of by_code, so that the report lost it. */
START_TEST(test_decode_code_bytes) {
  enum { N = LOAD_DECODE_MAX_FAILS };
  int codes[N];
  for (int i = 0; i < N; i++)
    codes[i] = 500;
  fake_t f;
  load_decode_stats_t st;
  fake_start(&f, 1 << 30, 4);
  f.codes = codes, f.ncodes = N, f.coded = 1;
  f.code = "bad\xff\x1b[2J\xc3";
  sessions_against(&f, 1, 0, &st);
  ck_assert_int_eq(st.abandoned, 1);
  load_result_t *r = calloc(1, sizeof *r);
  ck_assert_ptr_nonnull(r);
  r->decode = 1;
  load_result_fill_decode(r, &st);
  load_decode_stats_free(&st);
  json_t *doc = report_json_of(r, 1);
  json_t *by = json_object_get(
      json_object_get(json_array_get(json_object_get(doc, "steps"), 0),
                      "errors"),
      "by_code");
  ck_assert_msg(json_integer_value(json_object_get(by, "bad??[2J?")) == N,
                "by_code has %zu codes", json_object_size(by));
  json_decref(doc);
  free(r);
}
END_TEST

/* The open loop at 100,000 arrivals a second on one connection, to a
 * server whose handshakes all fail (https:// to plain HTTP): the first
 * failure stops the run, and the arrivals waiting for the connection by
 * then fail with it, unsent: one connection in all, every arrival counted
 * as a transport error. Caught: the waiting arrivals sent after the stop,
 * each a new connection and a new failed handshake. */
START_TEST(test_open_loop_stops_waiting) {
  fake_t f;
  fake_start(&f, 1 << 30, 4);
  f.plain = 1;
  char url[64], err[256];
  snprintf(url, sizeof url, "https://127.0.0.1:%d/x", f.port);
  curl_global_init(CURL_GLOBAL_ALL);
  load_run_t run = {.url = url,
                    .mode = LOAD_OPEN,
                    .concurrency = 1,
                    .rate = 1e5,
                    .duration_s = 0.05,
                    .timeout_s = 10};
  load_stats_t st;
  ck_assert_int_eq(load_stats_init(&st), 0);
  ck_assert_msg(load_client_run(&run, &st, err, sizeof err) == 0, "%s", err);
  fake_stop(&f);
  ck_assert_msg(st.stop == LOAD_STOP_TLS && f.n == 1 && st.sent > 1 &&
                    st.transport == st.sent,
                "stop %d, %d connections, %lld sent, %lld transport: %s",
                (int)st.stop, f.n, (long long)st.sent, (long long)st.transport,
                st.first_error);
  load_stats_free(&st);
}
END_TEST

/* Failures that no later request could cure end a decode run at once,
 * with nothing sent again (two sessions, one request at a time):
 *   0. every reply a 401: the first one ends the run (st.stop);
 *   1. a port with nothing listening, in a sweep's first step
 *      (`unanswered`): the first refusal ends it;
 *   2. the same port in a later step: refusals counted and sent again,
 *      as any transport error, until both sessions are abandoned;
 *   3. every creation a 404 (no sessions route at --url): the first ends
 *      it.
 * Caught: a 401, a creation's 404 or a refusal sent again after its
 * pauses (twenty requests, both sessions abandoned), `unanswered`
 * ignored. */
START_TEST(test_decode_stops_at_once) {
  enum { N = 2 * LOAD_DECODE_MAX_FAILS };
  int codes[N];
  for (int i = 0; i < N; i++)
    codes[i] = _i == 3 ? 404 : 401;
  fake_t f;
  int fd = -1, port;
  if (_i == 0 || _i == 3) {
    fake_start(&f, 1 << 30, 4);
    f.codes = codes, f.ncodes = N;
    port = f.port;
  } else {
    fd = sh_bound_port_assert(&port); /* bound, not listening: refused */
  }
  curl_global_init(CURL_GLOBAL_ALL);
  char base[64], err[256];
  snprintf(base, sizeof base, "http://127.0.0.1:%d", port);
  load_decode_run_t run = {.base = base,
                           .shape = &dec_shape,
                           .sessions = 2,
                           .prefill = 4,
                           .concurrency = 1,
                           .timeout_s = 10,
                           .seed = 1,
                           .pause_s = PAUSE_S,
                           .unanswered = _i == 1};
  load_decode_stats_t st;
  ck_assert_int_eq(load_decode_stats_init(&st), 0);
  ck_assert_msg(load_decode_run(&run, &st, err, sizeof err) == 0, "%s", err);
  if (_i == 0 || _i == 3)
    fake_stop(&f);
  else
    close(fd);
  static const load_stop_t stop[4] = {LOAD_STOP_UNAUTHORIZED,
                                      LOAD_STOP_UNREACHABLE, LOAD_STOP_NONE,
                                      LOAD_STOP_NOT_FOUND};
  const int once = _i != 2;
  ck_assert_msg(st.stop == stop[_i] && st.sent == (once ? 1 : N) &&
                    st.abandoned == (once ? 0 : 2) && st.ok == 0,
                "stop %d, %lld sent, %lld abandoned, %lld transport",
                (int)st.stop, (long long)st.sent, (long long)st.abandoned,
                (long long)st.transport);
  ck_assert_int_eq(st.status[401], _i == 0);
  ck_assert_int_eq(st.status[404], _i == 3);
  load_decode_stats_free(&st);
}
END_TEST

/* A creation answered with a "session" that is not 32 hex digits: a wrong
 * reply, counted in bad_replies, and the session abandoned after
 * LOAD_DECODE_MAX_FAILS of them. Caught: any 32 characters were taken as
 * the id and put into the URL of the session's requests, where
 * "../../../../../v1/layers?" sent them to /v1/layers, whose 2xx replies
 * were counted as a session served. */
START_TEST(test_decode_session_id) {
  static const char *const ids[] = {"../../../../../v1/layers?aaaaaaa",
                                    "0123456789ABCDEF0123456789abcdef",
                                    "0123456789abcdef 123456789abcdef"};
  fake_t f;
  load_decode_stats_t st;
  fake_start(&f, 1 << 30, 4);
  f.session = ids[_i];
  ck_assert_int_eq(strlen(f.session), 32);
  sessions_against(&f, 1, 0, &st);
  ck_assert_msg(st.bad_replies == LOAD_DECODE_MAX_FAILS,
                "%lld bad replies, %lld sessions done, %lld transport errors",
                (long long)st.bad_replies, (long long)st.sessions_done,
                (long long)st.transport);
  ck_assert_int_eq(st.sent, LOAD_DECODE_MAX_FAILS);
  ck_assert_int_eq(st.abandoned, 1);
  ck_assert_int_eq(st.ok, 0);
  ck_assert_str_eq(st.first_error, "a 2xx reply to a creation without a "
                                   "session id of 32 hex digits");
  load_decode_stats_free(&st);
}
END_TEST

/* ---- Server-Timing in several header lines --------------------------------
 *
 * RFC 9110 lets a field be sent as several lines, one list, and a proxy in
 * front of attnd (a CDN, a balancer) adds its own Server-Timing line after
 * attnd's. Each case gives the server's metrics in lines of its own or
 * followed by a proxy's line with none of them: every reply is timed, with
 * the durations its lines hold. Caught: each line replaced what the lines
 * before it found, so the proxy's line left the reply untimed. */

static const char *const timing_lines[] = {
    "Server-Timing: queue;dur=0.25, compute;dur=1.5, total;dur=3\r\n"
    "Server-Timing: cdn-cache;desc=MISS, edge;dur=9\r\n",
    "Server-Timing: queue;dur=0.25\r\n"
    "Server-Timing: compute;dur=1.5\r\nServer-Timing: total;dur=3\r\n"};

/* Three requests of the request engine, one at a time, against the
 * scripted server, which answers the first `ncodes` with `codes` and adds
 * `extra` to every reply; the server stopped, st the run's (initialised
 * here). */
static void requests_against(const char *extra, const int *codes, int ncodes,
                             load_stats_t *st) {
  fake_t f;
  fake_start(&f, 1 << 30, 4);
  f.extra = extra;
  f.codes = codes, f.ncodes = ncodes;
  curl_global_init(CURL_GLOBAL_ALL);
  char url[64], err[256];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/x", f.port);
  load_run_t run = {.url = url,
                    .mode = LOAD_CLOSED,
                    .concurrency = 1,
                    .requests = 3,
                    .timeout_s = 10};
  ck_assert_int_eq(load_stats_init(st), 0);
  ck_assert_msg(load_client_run(&run, st, err, sizeof err) == 0, "%s", err);
  fake_stop(&f);
}

/* The request engine: three requests, each timed. */
START_TEST(test_server_timing_lines) {
  load_stats_t st;
  requests_against(timing_lines[_i], NULL, 0, &st);
  ck_assert_int_eq(st.ok, 3);
  ck_assert_msg(st.timed == 3, "%lld of 3 replies timed", (long long)st.timed);
  const load_hist_t *h[3] = {st.queue, st.compute, st.total};
  const int64_t us[3] = {250, 1500, 3000};
  for (int k = 0; k < 3; k++) {
    ck_assert_int_eq(h[k]->count, 3);
    ck_assert_int_eq(h[k]->min, us[k]);
    ck_assert_int_eq(h[k]->max, us[k]);
  }
  load_stats_free(&st);
}
END_TEST

/* Durations past what the histograms hold, in the request engine: 1e300
 * ms is recorded as LOAD_HIST_MAX µs, 1e9 ms as itself. Caught: the µs
 * were llround(1e303), which x86 gives as INT64_MIN, recorded as 0. */
START_TEST(test_server_timing_huge) {
  load_stats_t st;
  requests_against("Server-Timing: queue;dur=1e300, compute;dur=1e9, "
                   "total;dur=123456789012345678901234567890\r\n",
                   NULL, 0, &st);
  ck_assert_int_eq(st.ok, 3);
  ck_assert_int_eq(st.timed, 3);
  ck_assert_int_eq(st.queue->count, 3);
  ck_assert_int_eq(st.queue->min, LOAD_HIST_MAX);
  ck_assert_int_eq(st.compute->max, INT64_C(1000000000000));
  ck_assert_int_eq(st.total->min, LOAD_HIST_MAX);
  load_stats_free(&st);
}
END_TEST

/* The decode engine: a session's two one-token steps, each timed (the
 * engine times steps only). */
START_TEST(test_decode_server_timing_lines) {
  fake_t f;
  load_decode_stats_t st;
  decode_steps_against(&f, 1 << 30, 2, timing_lines[_i], NULL, 0, &st);
  ck_assert_int_eq(st.sessions_done, 1);
  ck_assert_int_eq(st.steps_ok, 2);
  ck_assert_msg(st.timed == 2, "%lld of 2 steps timed", (long long)st.timed);
  ck_assert_int_eq(st.queue->count, 2);
  ck_assert_int_eq(st.queue->max, 250);
  ck_assert_int_eq(st.compute->count, 2);
  ck_assert_int_eq(st.compute->min, 1500);
  ck_assert_int_eq(st.compute->max, 1500);
  load_decode_stats_free(&st);
}
END_TEST

/* ---- statuses past RFC 9110's 599 ------------------------------------------
 *
 * A status line carries any three digits, and libcurl hands back 600 to
 * 999 as it reads them. Each is counted as itself, in by_status under its
 * number and in err_other; in the request engine (600, 999, then 404) and
 * in the decode engine (a creation answered 600, then 999, then created).
 * Caught: both engines filed every status of 600 and above under "0". */

static void assert_by_status(const load_result_t *r, const int *codes, int n) {
  json_t *by = by_status_of(r);
  char *txt = json_dumps(by, JSON_COMPACT);
  ck_assert_msg(json_object_size(by) == (size_t)n, "by_status %s", txt);
  for (int i = 0; i < n; i++) {
    char k[16];
    snprintf(k, sizeof k, "%d", codes[i]);
    ck_assert_msg(json_integer_value(json_object_get(by, k)) == 1,
                  "by_status %s: no %s", txt, k);
  }
  free(txt);
  json_decref(by);
}

START_TEST(test_status_over_599) {
  static const int codes[] = {600, 999, 404};
  load_result_t *r = calloc(1, sizeof *r);
  ck_assert_ptr_nonnull(r);
  if (_i == 0) {
    load_stats_t st;
    requests_against(NULL, codes, 3, &st);
    load_result_fill(r, &st);
    load_stats_free(&st);
    ck_assert_int_eq(r->sent, 3);
    ck_assert_int_eq(r->other, 3);
    ck_assert_int_eq(r->transport, 0);
    assert_by_status(r, codes, 3);
  } else {
    fake_t f;
    load_decode_stats_t st;
    decode_steps_against(&f, 1 << 30, 0, NULL, codes, 2, &st);
    ck_assert_int_eq(st.sessions_done, 1);
    load_result_fill_decode(r, &st);
    load_decode_stats_free(&st);
    ck_assert_int_eq(r->other, 2);
    assert_by_status(r, codes, 2);
  }
  free(r);
}
END_TEST

/* More distinct error.code values than by_code has room for: two sessions
 * whose every request fails, each with a code of its own, until both are
 * abandoned. The first LOAD_DECODE_MAX_CODES - 1 codes are kept by name,
 * the rest counted under "(other)", and by_code adds up to the errors.
 * Caught: the codes past the twelfth were dropped, uncounted. */
START_TEST(test_decode_codes_overflow) {
  enum { N = 2 * LOAD_DECODE_MAX_FAILS };
  int codes[N];
  for (int i = 0; i < N; i++)
    codes[i] = 500;
  fake_t f;
  fake_start(&f, 1 << 30, 4);
  f.codes = codes, f.ncodes = N, f.coded = 1;
  load_decode_stats_t st;
  sessions_against(&f, 2, 0, &st);
  ck_assert_int_eq(st.abandoned, 2);
  ck_assert_int_eq(load_decode_errors(&st), N);
  ck_assert_int_eq(st.n_codes, LOAD_DECODE_MAX_CODES);
  int64_t sum = 0;
  for (int i = 0; i < st.n_codes; i++)
    sum += st.codes[i].count;
  ck_assert_int_eq(sum, N);
  ck_assert_str_eq(st.codes[0].code, "e0");
  ck_assert_str_eq(st.codes[LOAD_DECODE_MAX_CODES - 1].code, "(other)");
  ck_assert_int_eq(st.codes[LOAD_DECODE_MAX_CODES - 1].count,
                   N - (LOAD_DECODE_MAX_CODES - 1));
  load_decode_stats_free(&st);
}
END_TEST

/* The codes no status line of three digits carries (libcurl refuses a
 * status under 100) are counted together, as "invalid" in by_status. */
START_TEST(test_status_invalid) {
  static const long codes[] = {-1, 0, 99, 100, 599, 600, 999, 1000};
  static const int want[] = {0, 0, 0, 100, 599, 600, 999, 0};
  for (int i = 0; i < 8; i++)
    ck_assert_int_eq(load_status_index(codes[i]), want[i]);
  load_result_t *r = calloc(1, sizeof *r);
  ck_assert_ptr_nonnull(r);
  r->status[LOAD_STATUS_INVALID] = 2;
  r->status[600] = 1;
  json_t *by = by_status_of(r);
  ck_assert_int_eq(json_object_size(by), 2);
  ck_assert_int_eq(json_integer_value(json_object_get(by, "invalid")), 2);
  ck_assert_int_eq(json_integer_value(json_object_get(by, "600")), 1);
  json_decref(by);
  free(r);
}
END_TEST

/* ---- the engines' shared parts ------------------------------------------- */

/* --progress's cadence (load_progress_due): a line is due from its time
 * on, and the next half a second after the one that was written, not
 * after the time it was due. */
START_TEST(test_progress_due) {
  double next = 10.5;
  ck_assert_int_eq(load_progress_due(10.4, &next), 0);
  ck_assert(next == 10.5);
  ck_assert_int_eq(load_progress_due(10.5, &next), 1);
  ck_assert(next == 11.0);
  ck_assert_int_eq(load_progress_due(10.9, &next), 0);
  ck_assert(next == 11.0);
  ck_assert_int_eq(load_progress_due(12.25, &next), 1);
  ck_assert(next == 12.75);
}
END_TEST

/* ---- the suite ----------------------------------------------------------- */

Suite *test_suite(void) {
  Suite *s = suite_create("load");
  TCase *tc = tcase_create("hist");
  tcase_add_test(tc, test_hist_exact_small);
  tcase_add_loop_test(tc, test_hist_datasets, 0, N_DS);
  tcase_add_test(tc, test_hist_edges);
  tcase_add_test(tc, test_hist_rank_large);
  tcase_add_loop_test(tc, test_stats_own_hists, 0, 2);
  suite_add_tcase(s, tc);

  tc = tcase_create("server_timing");
  tcase_add_test(tc, test_server_timing);
  tcase_add_test(tc, test_server_timing_hostile);
  tcase_add_test(tc, test_header_length);
  suite_add_tcase(s, tc);

  tc = tcase_create("progress");
  tcase_add_test(tc, test_progress_due);
  suite_add_tcase(s, tc);

  tc = tcase_create("gen");
  tcase_add_loop_test(tc, test_gen_shapes, 0, 3 * N_GEN_CASES);
  tcase_add_test(tc, test_gen_seeds);
  tcase_add_test(tc, test_gen_options);
  tcase_add_test(tc, test_gen_invalid);
  suite_add_tcase(s, tc);

  tc = tcase_create("verify");
  tcase_add_loop_test(tc, test_reply_tensor, 0, 3);
  tcase_add_loop_test(tc, test_verify_reply, 0, 3);
  tcase_add_test(tc, test_reply_tensor_shape_not_int);
  tcase_add_test(tc, test_reply_tensor_extra_rows);
  suite_add_tcase(s, tc);

  tc = tcase_create("v2");
  tcase_add_test(tc, test_v2_body_exact);
  tcase_add_loop_test(tc, test_v2_body_shapes, 0, 4 * N_GEN_CASES);
  tcase_add_loop_test(tc, test_v2_compress, 0, 2);
  tcase_add_test(tc, test_v2_path);
  tcase_add_loop_test(tc, test_v2_reply, 0, 8);
  tcase_add_test(tc, test_v2_reply_invalid);
  tcase_add_loop_test(tc, test_v2_verify, 0, 3);
  tcase_add_loop_test(tc, test_gen_dtype, 0, 8);
  tcase_add_loop_test(tc, test_reply_dtype, 0, 2);
  tcase_add_loop_test(tc, test_verify_dtype, 0, 4);
  suite_add_tcase(s, tc);

  tc = tcase_create("report");
  tcase_add_test(tc, test_report_files);
  tcase_add_test(tc, test_report_csv_quotes);
  tcase_add_loop_test(tc, test_report_every_status, 0, 2);
  tcase_add_test(tc, test_report_no_value);
  suite_add_tcase(s, tc);

  tc = tcase_create("decode");
  tcase_add_loop_test(tc, test_decode_bodies, 0, 3);
  tcase_add_test(tc, test_decode_rows);
  tcase_add_loop_test(tc, test_decode_verify, 0, 6);
  tcase_add_test(tc, test_decode_report);
  suite_add_tcase(s, tc);

  /* against a scripted server; the pauses between tries start at PAUSE_S */
  tc = tcase_create("decode_engine");
  tcase_set_timeout(tc, 30);
  tcase_add_loop_test(tc, test_decode_bad_reply_counts_once, 0, 2);
  tcase_add_test(tc, test_decode_wrong_replies_abandon);
  tcase_add_test(tc, test_decode_codes_overflow);
  tcase_add_loop_test(tc, test_decode_session_id, 0, 3);
  tcase_add_test(tc, test_decode_code_bytes);
  suite_add_tcase(s, tc);

  tc = tcase_create("server_timing_lines");
  tcase_add_loop_test(tc, test_server_timing_lines, 0, 2);
  tcase_add_test(tc, test_server_timing_huge);
  tcase_add_loop_test(tc, test_decode_server_timing_lines, 0, 2);
  suite_add_tcase(s, tc);

  tc = tcase_create("status_over_599");
  tcase_add_loop_test(tc, test_status_over_599, 0, 2);
  tcase_add_test(tc, test_status_invalid);
  suite_add_tcase(s, tc);

  tc = tcase_create("open_loop");
  tcase_add_loop_test(tc, test_open_loop_uniform_count, 0,
                      (int)(sizeof uniform_cases / sizeof uniform_cases[0]));
  suite_add_tcase(s, tc);

  tc = tcase_create("stop");
  tcase_add_test(tc, test_request_stops_unreachable);
  tcase_add_test(tc, test_open_loop_stops_waiting);
  tcase_add_loop_test(tc, test_decode_stops_at_once, 0, 4);
  suite_add_tcase(s, tc);
  return s;
}
