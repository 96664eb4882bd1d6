/* tests/check_load.c: attnd-load's modules, without a server.
 *
 * References: a sorted copy of the data for the histogram (the exact
 * nearest-rank percentile), jansson and the harness's own tensor decoder
 * (tests/server_harness.c, written apart from server/codec.c) for the
 * generated bodies, and the core run here for --verify. Cases:
 *   - the histogram: every value below 2^LOAD_HIST_SUB_BITS exact; data
 *     sets from uniform to twelve decades wide within LOAD_HIST_PRECISION;
 *     exact min, max and mean; empty, negative and huge values;
 *   - Server-Timing values as attnd writes them, reordered, partial, bad;
 *   - the generator: shapes and tensors for a table of options in each
 *     encoding, the FLOP count, seeds that reproduce and seeds that differ,
 *     every option visible in the JSON, the sizes it refuses;
 *   - --verify: reply tensors read back bit for bit in each encoding, with
 *     wrong shapes refused; a correct reply passes, a perturbed one fails;
 *   - the CSV, JSON and SVG writers.
 * No timings are asserted. */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attn/attn.h"
#include "client.h"
#include "gen.h"
#include "hist.h"
#include "report.h"
#include "server_harness.h"
#include "suite.h"
#include "testutil.h"
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

/* ---- the report writers -------------------------------------------------- */

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  ck_assert_msg(f != NULL, "cannot read %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)n + 1);
  ck_assert_uint_eq(fread(s, 1, (size_t)n, f), (size_t)n);
  s[n] = 0;
  fclose(f);
  return s;
}

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
  char dir[] = "/tmp/check_load_XXXXXX", path[128], err[256];
  ck_assert_ptr_nonnull(mkdtemp(dir));

  snprintf(path, sizeof path, "%s/r.csv", dir);
  ck_assert_int_eq(load_report_csv(path, r, 3, err, sizeof err), 0);
  char *csv = slurp(path);
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
  char *svg = slurp(path);
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

/* ---- the suite ----------------------------------------------------------- */

Suite *test_suite(void) {
  Suite *s = suite_create("load");
  TCase *tc = tcase_create("hist");
  tcase_add_test(tc, test_hist_exact_small);
  tcase_add_loop_test(tc, test_hist_datasets, 0, N_DS);
  tcase_add_test(tc, test_hist_edges);
  suite_add_tcase(s, tc);

  tc = tcase_create("server_timing");
  tcase_add_test(tc, test_server_timing);
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
  suite_add_tcase(s, tc);

  tc = tcase_create("report");
  tcase_add_test(tc, test_report_files);
  suite_add_tcase(s, tc);
  return s;
}
