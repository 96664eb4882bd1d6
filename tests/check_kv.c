/* tests/check_kv.c: attention over a paged key/value cache (attn_kv_t in
 * include/attn/attn.h), against the float64 reference of one causal call
 * over the whole sequence.
 *
 * A layer-like problem: E = 32 projected to H = 4 query heads and Hkv = 2
 * key/value heads of Dh = 8 (GQA), with biases, per-head norms of Q and K,
 * and partial RoPE (6 of 8 features, half style); a sequence of N = 150
 * tokens spans three pages of ATTN_KV_PAGE = 64. Pages start as NaN, so a
 * read of any slot not written shows in the results.
 *
 * TCases:
 *   - append: the sequence appended in chunks of each size (1, 2, 3, 5, 7,
 *     13, 31, 63, 64, 65, 100, 150) and in uneven chunks gives, chunk by
 *     chunk, the outputs and weights of the whole causal call at 1e-5;
 *   - truncate: a cache cut back to n tokens and appended to again equals
 *     the call over the first n tokens and the new ones;
 *   - batch: two items of different past lengths in one call, each equal
 *     to its own whole call; window, ALiBi and softcap over the cache;
 *   - plan: the errors of a cache that does not fit the call. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attn.h"
#include "ref.h"
#include "suite.h"
#include "testutil.h"

enum { E = 32, H = 4, HKV = 2, DH = 8, DV = 8, N = 150, MAXPAGES = 8 };
static const double TOL = 1e-5;

/* One layer (tests/testutil.h) of this file's shape, rope over 6 of each
 * head's 8 dimensions, and `tokens` hidden states. */
static void layer_init(tu_layer_t *l, uint64_t seed, int64_t tokens) {
  *l = (tu_layer_t){
      .E = E, .H = H, .Hkv = HKV, .Dh = DH, .Dv = DV, .rope_dims = 6};
  tu_layer_init(l, seed, tokens);
}

/* A cache of pages, NaN until written. */
typedef struct cache {
  float *pages[MAXPAGES];
  int64_t past;
  float k_absmax;
} cache_t;

static void cache_init(cache_t *c) {
  size_t n = attn_kv_page_floats(HKV, DH, DV);
  memset(c, 0, sizeof *c);
  for (int i = 0; i < MAXPAGES; i++) {
    c->pages[i] = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
    for (size_t k = 0; k < n; k++)
      c->pages[i][k] = NAN;
  }
}

static void cache_free(cache_t *c) {
  for (int i = 0; i < MAXPAGES; i++)
    free(c->pages[i]);
}

/* The whole causal call over x[0 .. n), in float64. */
static void whole(const tu_layer_t *l, const float *x, int64_t n,
                  ref_result_t *r) {
  attn_params_t p = tu_layer_params(l, tu_t2(x, n, E));
  ck_assert_int_eq(ref_attention(&p, r), 0);
}

/* Appends x[0 .. n) to the cache (one call) and checks its outputs against
 * rows [at, at + n) of `ref` (the whole call over the sequence so far),
 * weights over keys [0, at + n). */
static void append_check(const tu_layer_t *l, cache_t *c, const float *x,
                         int64_t n, const ref_result_t *ref, int64_t at,
                         const char *what) {
  attn_params_t p = tu_layer_params(l, tu_t2(x, n, E));
  float *const *table = c->pages;
  attn_kv_t kv = {.past = &c->past, .pages = &table, .k_absmax = &c->k_absmax};
  p.kv = &kv;
  tu_run_t run;
  ck_assert_int_eq(tu_run(&run, &p, NULL), 0);
  int64_t lk = c->past + n;
  ck_assert_int_eq(run.plan.Lk, lk);
  ck_assert_int_eq(run.plan.Lq, n);
  double *want = malloc(sizeof(double) * (size_t)(n * E));
  for (int64_t i = 0; i < n; i++)
    for (int64_t e = 0; e < E; e++)
      want[i * E + e] = ref->out[(at + i) * E + e];
  double err = tu_rel_err(run.o.out, want, (size_t)(n * E));
  ck_assert_msg(err <= TOL, "%s: output rows [%lld, %lld): error %g", what,
                (long long)at, (long long)(at + n), err);
  free(want);
  want = malloc(sizeof(double) * (size_t)(H * n * lk));
  for (int64_t h = 0; h < H; h++)
    for (int64_t i = 0; i < n; i++)
      for (int64_t j = 0; j < lk; j++)
        want[(h * n + i) * lk + j] =
            ref->weights[(h * ref->Lq + at + i) * ref->Lk + j];
  err = tu_rel_err(run.o.weights, want, (size_t)(H * n * lk));
  ck_assert_msg(err <= TOL, "%s: weights of rows [%lld, %lld): error %g", what,
                (long long)at, (long long)(at + n), err);
  free(want);
  ck_assert(c->k_absmax > 0 && isfinite(c->k_absmax));
  tu_run_free(&run);
  int64_t before = c->past;
  c->past += n;
  /* the rest of the last page, keys and values, is finite (attn_kv_t): the
   * kernels read whole pages, and a NaN there, though it weighs 0, would
   * send the rows down the exact path. A page this call began (its first
   * slot written now, NaN before) is zero there; one that held tokens
   * keeps what was past them (zeros, or stale tokens after a cut). */
  const float *page = c->pages[c->past / ATTN_KV_PAGE];
  int64_t ldv = HKV * 16 + 16;
  size_t voff = attn_kv_v_offset(HKV, DH);
  int begun = c->past / ATTN_KV_PAGE * ATTN_KV_PAGE >= before;
  for (int64_t t = c->past % ATTN_KV_PAGE; t % ATTN_KV_PAGE; t++) {
    for (int64_t r = 0; r < HKV * DH; r++) {
      float y = page[r * ATTN_KV_LDK + t];
      REQUIRE(begun ? y == 0 : isfinite(y), "%s: key slot %lld is %g", what,
              (long long)t, y);
    }
    for (int64_t k = 0; k < HKV * 16; k++) {
      float y = page[voff + (size_t)(t * ldv + k)];
      REQUIRE(begun ? y == 0 : isfinite(y), "%s: value slot %lld is %g", what,
              (long long)t, y);
    }
  }
}

static const int64_t chunk_sizes[] = {1,  2,  3,  5,  7,   13,
                                      31, 63, 64, 65, 100, 150};

START_TEST(test_append) {
  tu_layer_t l;
  layer_init(&l, 7, N);
  ref_result_t ref;
  whole(&l, l.x, N, &ref);
  cache_t c;
  cache_init(&c);
  int64_t size = chunk_sizes[_i];
  char what[64];
  snprintf(what, sizeof what, "chunks of %lld", (long long)size);
  for (int64_t t = 0; t < N; t += size) {
    int64_t n = N - t < size ? N - t : size;
    append_check(&l, &c, l.x + t * E, n, &ref, t, what);
  }
  ck_assert_int_eq(c.past, N);
  cache_free(&c);
  ref_result_free(&ref);
  tu_layer_free(&l);
}
END_TEST

/* Uneven chunks: 1, 2, 3, ... tokens, so that every chunk boundary falls at
 * a new offset within a page. */
START_TEST(test_append_uneven) {
  tu_layer_t l;
  layer_init(&l, 8, N);
  ref_result_t ref;
  whole(&l, l.x, N, &ref);
  cache_t c;
  cache_init(&c);
  for (int64_t t = 0, size = 1; t < N; t += size, size++) {
    int64_t n = N - t < size ? N - t : size;
    append_check(&l, &c, l.x + t * E, n, &ref, t, "uneven chunks");
    size = n;
  }
  cache_free(&c);
  ref_result_free(&ref);
  tu_layer_free(&l);
}
END_TEST

/* N tokens cached, then cut back to `keep` and 40 others appended in
 * chunks of 9: as the whole call over x[0 .. keep) and the others. */
START_TEST(test_truncate) {
  static const int64_t keeps[] = {0, 1, 63, 64, 65, 100};
  int64_t keep = keeps[_i];
  enum { MORE = 40 };
  tu_layer_t l;
  layer_init(&l, 9, N + MORE);
  cache_t c;
  cache_init(&c);
  ref_result_t ref;
  whole(&l, l.x, N, &ref);
  for (int64_t t = 0; t < N; t += 50)
    append_check(&l, &c, l.x + t * E, 50, &ref, t, "before the cut");
  ref_result_free(&ref);
  float *seq = malloc(sizeof(float) * (size_t)((keep + MORE) * E));
  memcpy(seq, l.x, sizeof(float) * (size_t)(keep * E));
  memcpy(seq + keep * E, l.x + N * E, sizeof(float) * (size_t)(MORE * E));
  whole(&l, seq, keep + MORE, &ref);
  c.past = keep; /* what the server does: the slots after it are stale */
  for (int64_t t = 0; t < MORE; t += 9) {
    int64_t n = MORE - t < 9 ? MORE - t : 9;
    append_check(&l, &c, seq + (keep + t) * E, n, &ref, keep + t,
                 "after the cut");
  }
  free(seq);
  ref_result_free(&ref);
  cache_free(&c);
  tu_layer_free(&l);
}
END_TEST

/* Two items in one call: item 0 with 70 tokens cached, item 1 with 10,
 * each given 3 new ones (and a window, ALiBi and a softcap over the
 * cache): each as its own whole call. */
START_TEST(test_batch) {
  enum { NEW = 3 };
  const int64_t past[2] = {70, 10};
  tu_layer_t l;
  layer_init(&l, 10, 2 * 80);
  const float *seq[2] = {l.x, l.x + 80 * E};
  cache_t c[2];
  float absmax[2];
  for (int b = 0; b < 2; b++) {
    cache_init(&c[b]);
    ref_result_t ref;
    whole(&l, seq[b], past[b], &ref);
    append_check(&l, &c[b], seq[b], past[b], &ref, 0, "prefill");
    ref_result_free(&ref);
    absmax[b] = c[b].k_absmax;
  }
  for (int terms = 0; terms < 2; terms++) {
    float *q = malloc(sizeof(float) * 2 * NEW * E);
    for (int b = 0; b < 2; b++)
      memcpy(q + b * NEW * E, seq[b] + past[b] * E, sizeof(float) * NEW * E);
    attn_params_t p = tu_layer_params(&l, tu_t3(q, 2, NEW, E));
    if (terms)
      tu_layer_add_terms(&p);
    float *const *tables[2] = {c[0].pages, c[1].pages};
    float k_absmax[2] = {absmax[0], absmax[1]};
    attn_kv_t kv = {.past = past, .pages = tables, .k_absmax = k_absmax};
    p.kv = &kv;
    tu_run_t run;
    ck_assert_int_eq(tu_run(&run, &p, NULL), 0);
    int64_t Lk = run.plan.Lk;
    ck_assert_int_eq(Lk, 73);
    for (int b = 0; b < 2; b++) {
      ref_result_t ref;
      attn_params_t w = tu_layer_params(&l, tu_t2(seq[b], past[b] + NEW, E));
      w.has_window_left = p.has_window_left;
      w.window_left = p.window_left;
      w.alibi = p.alibi;
      w.has_softcap = p.has_softcap;
      w.softcap = p.softcap;
      ck_assert_int_eq(ref_attention(&w, &ref), 0);
      double err = tu_rel_err(run.o.out + b * NEW * E, ref.out + past[b] * E,
                              (size_t)(NEW * E));
      ck_assert_msg(err <= TOL, "item %d (terms %d): output error %g", b, terms,
                    err);
      for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < NEW; i++) {
          const float *got = run.o.weights + ((b * H + h) * NEW + i) * Lk;
          const double *want =
              ref.weights + (h * ref.Lq + past[b] + i) * ref.Lk;
          ck_assert_msg(tu_rel_err(got, want, (size_t)ref.Lk) <= TOL,
                        "item %d head %lld row %lld: weights", b, (long long)h,
                        (long long)i);
          for (int64_t j = ref.Lk; j < Lk; j++) /* past the item's keys */
            ck_assert_msg(got[j] == 0, "item %d: weight %lld is %g", b,
                          (long long)j, (double)got[j]);
        }
      ref_result_free(&ref);
    }
    tu_run_free(&run);
    free(q);
  }
  for (int b = 0; b < 2; b++)
    cache_free(&c[b]);
  tu_layer_free(&l);
}
END_TEST

START_TEST(test_plan) {
  tu_layer_t l;
  layer_init(&l, 11, 8);
  cache_t c;
  cache_init(&c);
  float *const *table = c.pages;
  float *missing[MAXPAGES] = {c.pages[0], NULL};
  float *const *holey = missing;
  float *odd_page[1] = {c.pages[0] + 1};
  float *const *odd = odd_page;
  int64_t past = 60, negative = -1;
  float absmax = 0, bad_absmax = NAN;
  const struct {
    const int64_t *past;
    float *const *const *pages;
    float *absmax;
    int key_rows; /* a key input with this many rows, or 0 */
    attn_field_t field;
    const char *words;
  } cases[] = {
      {&past, &holey, &absmax, 0, ATTN_FIELD_KV, "pages[0][1] is missing"},
      {&negative, &table, &absmax, 0, ATTN_FIELD_KV, "past[0] is -1"},
      {&past, &table, &bad_absmax, 0, ATTN_FIELD_KV, "k_absmax[0] is nan"},
      {NULL, &table, &absmax, 0, ATTN_FIELD_KV, "needs past, pages"},
      {&past, &odd, &absmax, 0, ATTN_FIELD_KV, "not 64-byte aligned"},
      {&past, &table, &absmax, 5, ATTN_FIELD_KEY,
       "with a kv cache the new keys are the new tokens, Lq = 8"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    attn_params_t p = tu_layer_params(&l, tu_t2(l.x, 8, E));
    attn_kv_t kv = {.past = cases[k].past,
                    .pages = cases[k].pages,
                    .k_absmax = cases[k].absmax};
    p.kv = &kv;
    if (cases[k].key_rows)
      p.key = tu_t2(l.x, cases[k].key_rows, E);
    attn_plan_t plan;
    attn_error_t e;
    ck_assert_int_lt(attn_plan_init(&plan, &p, NULL, &e), 0);
    ck_assert_int_eq(e.field_id, cases[k].field);
    ck_assert_msg(strstr(e.message, cases[k].words) != NULL, "case %zu: %s", k,
                  e.message);
  }
  /* the workspace holds no K or V: they live in the pages; a call that
   * lays out the same 68 keys in the workspace takes more (planning reads
   * no key data) */
  attn_params_t p = tu_layer_params(&l, tu_t2(l.x, 8, E)), q = p;
  attn_kv_t kv = {.past = &past, .pages = &table, .k_absmax = &absmax};
  p.kv = &kv;
  q.key = tu_t2(l.x, 68, E);
  attn_plan_t with, without;
  ck_assert_int_eq(attn_plan_init(&with, &p, NULL, NULL), 0);
  ck_assert_int_eq(attn_plan_init(&without, &q, NULL, NULL), 0);
  ck_assert_int_eq(with.Lk, 68);
  ck_assert_int_eq(without.Lk, 68);
  ck_assert_uint_lt(with.workspace_bytes + 68 * 4 * H, without.workspace_bytes);
  cache_free(&c);
  tu_layer_free(&l);
}
END_TEST

Suite *test_suite(void) {
  Suite *s = suite_create("kv");
  TCase *tc = tcase_create("append");
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, test_append, 0,
                      (int)(sizeof chunk_sizes / sizeof chunk_sizes[0]));
  tcase_add_test(tc, test_append_uneven);
  suite_add_tcase(s, tc);
  tc = tcase_create("truncate");
  tcase_add_loop_test(tc, test_truncate, 0, 6);
  suite_add_tcase(s, tc);
  tc = tcase_create("batch");
  tcase_add_test(tc, test_batch);
  suite_add_tcase(s, tc);
  tc = tcase_create("plan");
  tcase_add_test(tc, test_plan);
  suite_add_tcase(s, tc);
  return s;
}
