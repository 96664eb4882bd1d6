/* tests/check_properties.c: identities that must hold between runs of the
 * core itself, independent of the reference:
 *   - GQA/MQA equals MHA with each key/value head repeated;
 *   - causal (both alignments), key lengths and the sliding window each
 *     equal the explicit allow mask they stand for;
 *   - weight rows sum to 1, or are exactly 0 when every key is masked (and
 *     then the head output is exactly 0 and nothing is NaN);
 *   - results are bitwise identical for 1 to 5, 7, 16 and 33 threads (a
 *     plan made for 33 and lowered too; rope, q/k norms and the weights'
 *     reductions included, and a session's steps over a paged cache),
 *     across repeated calls on one plan, whatever the workspace held, and
 *     when two calls run at once;
 *   - mean weights are the mean of the per-head weights;
 *   - batch items are independent; a constant bias changes nothing; keys
 *     are a set (permuting keys and values permutes the weights only).
 * Two formulations of one problem may round differently, so they are
 * compared at PROP_TOL (relative, see tu_rel_err); same-formulation reruns
 * are compared bit for bit. */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attn.h"
#include "ref.h"
#include "suite.h"
#include "testutil.h"

#define PROP_TOL 1e-6

#define BR ATTN_CAUSAL_BOTTOM_RIGHT
#define TL ATTN_CAUSAL_TOP_LEFT

static const attn_exec_t exec1 = {.threads = 1, .isa = ATTN_ISA_AUTO};

/* Asserts that every output both runs were asked for agrees within `tol`. */
static void expect_close(const tu_run_t *a, const tu_run_t *b,
                         const attn_params_t *p, double tol, const char *what) {
  const attn_plan_t *pl = &a->plan;
  ck_assert_int_eq(a->plan.out_elems, b->plan.out_elems);
  double e = tu_rel_err_f(a->o.out, b->o.out, (size_t)pl->out_elems);
  ck_assert_msg(e <= tol, "%s: out differs by %.3g", what, e);
  if (p->want_weights) {
    e = tu_rel_err_f(a->o.weights, b->o.weights, (size_t)pl->weights_elems);
    ck_assert_msg(e <= tol, "%s: weights differ by %.3g", what, e);
  }
  if (p->want_mean_weights) {
    e = tu_rel_err_f(a->o.mean_weights, b->o.mean_weights,
                     (size_t)pl->mean_elems);
    ck_assert_msg(e <= tol, "%s: mean weights differ by %.3g", what, e);
  }
  if (p->want_head_outputs) {
    e = tu_rel_err_f(a->o.head_outputs, b->o.head_outputs,
                     (size_t)pl->head_elems);
    ck_assert_msg(e <= tol, "%s: head outputs differ by %.3g", what, e);
  }
}

/* Asserts that every requested output of two runs is the same bits. */
static void expect_same_bits(const attn_outputs_t *a, const attn_outputs_t *b,
                             const attn_plan_t *pl, const char *what) {
  const attn_params_t *p = pl->params;
  ck_assert_msg(memcmp(a->out, b->out, (size_t)pl->out_elems * 4) == 0,
                "%s: out not bitwise identical", what);
  if (p->want_weights)
    ck_assert_msg(
        memcmp(a->weights, b->weights, (size_t)pl->weights_elems * 4) == 0,
        "%s: weights not bitwise identical", what);
  if (p->want_mean_weights)
    ck_assert_msg(memcmp(a->mean_weights, b->mean_weights,
                         (size_t)pl->mean_elems * 4) == 0,
                  "%s: mean weights not bitwise identical", what);
  if (p->want_head_outputs)
    ck_assert_msg(memcmp(a->head_outputs, b->head_outputs,
                         (size_t)pl->head_elems * 4) == 0,
                  "%s: head outputs not bitwise identical", what);
  const struct {
    const void *a, *b;
    int64_t n;
    const char *name;
  } red[] = {
      {a->top_k_index, b->top_k_index, pl->top_k_elems, "top-k index"},
      {a->top_k_value, b->top_k_value, pl->top_k_elems, "top-k value"},
      {a->pooled, b->pooled, pl->pooled_elems, "pooled"},
      {a->entropy, b->entropy, pl->stats_elems, "entropy"},
      {a->sink, b->sink, pl->stats_elems, "sink"},
      {a->distance, b->distance, pl->stats_elems, "distance"},
  };
  for (size_t k = 0; k < sizeof red / sizeof *red; k++)
    if (red[k].a && red[k].b) /* every element is 4 bytes */
      ck_assert_msg(memcmp(red[k].a, red[k].b, (size_t)red[k].n * 4) == 0,
                    "%s: %s not bitwise identical", what, red[k].name);
}

/* ---- GQA equals repeated MHA --------------------------------------------- */

/* src [rows_outer][Hkv][D][cols] → dst [rows_outer][H][D][cols], head h a
 * copy of kv head h / G. A K/V tensor is rows_outer = B·Lk, cols = 1; a
 * weight is rows_outer = 1, cols = in-features; a bias is both 1. Returns a
 * new array (free()). */
static float *repeat_heads(const float *src, int64_t Hkv, int64_t G, int64_t D,
                           int64_t rows_outer, int64_t cols) {
  const int64_t H = Hkv * G;
  float *dst = malloc((size_t)(rows_outer * H * D * cols) * sizeof *dst + 4);
  ck_assert_ptr_nonnull(dst);
  for (int64_t r = 0; r < rows_outer; r++)
    for (int64_t h = 0; h < H; h++)
      memcpy(dst + (r * H + h) * D * cols, src + (r * Hkv + h / G) * D * cols,
             (size_t)(D * cols) * sizeof *dst);
  return dst;
}

typedef struct gqa_case {
  const char *name;
  tu_spec_t s;
} gqa_case_t;

/* clang-format off */
static const gqa_case_t gqa_cases[] = {
    {"GQA 4/2, raw K/V",
     {.B = 2, .batched = 1, .Lq = 9, .Lk = 14, .cross = 1, .value_given = 1,
      .H = 4, .Hkv = 2, .Dh = 5, .Dv = 3}},
    {"GQA 4/2, projected K/V with biases",
     {.B = 2, .batched = 1, .Lq = 9, .Lk = 14, .cross = 1, .value_given = 1,
      .H = 4, .Hkv = 2, .Dh = 5, .Dv = 3, .Ek = 11, .Ev = 7,
      .proj = TU_KW | TU_KB | TU_VW | TU_VB}},
    {"MQA 4/1, raw K/V, causal and bias",
     {.Lq = 12, .Lk = 12, .cross = 1, .value_given = 1, .H = 4, .Hkv = 1,
      .Dh = 8, .Dv = 8, .causal = BR, .bias_rank = 3}},
    {"MQA 6/1, everything projected, alibi",
     {.B = 3, .batched = 1, .Lq = 33, .Lk = 20, .cross = 1, .value_given = 1,
      .H = 6, .Hkv = 1, .Dh = 4, .Dv = 2, .Eq = 10, .Ek = 9, .Ev = 6,
      .Eo = 5, .proj = TU_ALLPROJ, .alibi = ATTN_ALIBI_DEFAULT,
      .causal = TL}},
    {"GQA 6/3 self, k/v weights",
     {.Lq = 17, .H = 6, .Hkv = 3, .Dh = 2, .proj = TU_KW | TU_VW}},
};
/* clang-format on */

START_TEST(test_gqa_equals_repeated_mha) {
  const gqa_case_t *gc = &gqa_cases[_i];
  tu_case_t c;
  tu_case_build(&c, &gc->s, 100 + (uint64_t)_i);
  const int64_t B = c.B, Lk = c.Lk, H = c.H, Hkv = c.Hkv, G = H / Hkv;
  const int64_t Dh = c.Dh, Dv = c.Dv;
  ck_assert_int_gt(G, 1);

  attn_params_t m = c.p; /* the MHA twin */
  m.num_kv_heads = H;
  float *own[4] = {NULL, NULL, NULL, NULL};
  const float *key = c.p.key.rank ? c.key : c.query;
  const int64_t Ek = c.Ek, Ev = c.Ev;
  if (c.kw != NULL) {
    own[0] = repeat_heads(c.kw, Hkv, G, Dh, 1, Ek);
    m.k_weight = tu_t2(own[0], H * Dh, Ek);
    if (c.kb != NULL) {
      own[1] = repeat_heads(c.kb, Hkv, G, Dh, 1, 1);
      m.k_bias = tu_t1(own[1], H * Dh);
    }
  } else {
    own[0] = repeat_heads(key, Hkv, G, Dh, B * Lk, 1);
    m.key = c.p.key.rank == 3 ? tu_t3(own[0], B, Lk, H * Dh)
                              : tu_t2(own[0], Lk, H * Dh);
  }
  if (c.vw != NULL) {
    own[2] = repeat_heads(c.vw, Hkv, G, Dv, 1, Ev);
    m.v_weight = tu_t2(own[2], H * Dv, Ev);
    if (c.vb != NULL) {
      own[3] = repeat_heads(c.vb, Hkv, G, Dv, 1, 1);
      m.v_bias = tu_t1(own[3], H * Dv);
    }
  } else {
    ck_assert_ptr_nonnull(c.value); /* the cases give value explicitly */
    own[2] = repeat_heads(c.value, Hkv, G, Dv, B * Lk, 1);
    m.value = c.p.value.rank == 3 ? tu_t3(own[2], B, Lk, H * Dv)
                                  : tu_t2(own[2], Lk, H * Dv);
  }

  tu_run_t a, b;
  ck_assert_int_eq(tu_run(&a, &c.p, &exec1), 0);
  ck_assert_int_eq(tu_run(&b, &m, &exec1), 0);
  ck_assert_int_eq(a.plan.Hkv, Hkv);
  ck_assert_int_eq(b.plan.Hkv, H);
  expect_close(&a, &b, &c.p, PROP_TOL, gc->name);
  tu_run_free(&a);
  tu_run_free(&b);
  for (int k = 0; k < 4; k++)
    free(own[k]);
  tu_case_free(&c);
}
END_TEST

/* ---- masks equal their explicit allow tensor ----------------------------- */

/* Runs `c` as built and again with its structured masks (causal, key
 * lengths, window) removed and `allow` [Lq, Lk] in their place. */
static void expect_same_as_allow(tu_case_t *c, const uint8_t *allow,
                                 const char *what) {
  const int64_t B = c->B, H = c->H, Lq = c->Lq, Lk = c->Lk;
  attn_params_t m = c->p;
  m.causal = ATTN_CAUSAL_NONE;
  m.key_lengths = (attn_tensor_t){0};
  m.has_window_left = m.has_window_right = 0;
  m.allow = tu_t2(allow, Lq, Lk);
  tu_run_t a, b;
  ck_assert_int_eq(tu_run(&a, &c->p, &exec1), 0);
  ck_assert_int_eq(tu_run(&b, &m, &exec1), 0);
  expect_close(&a, &b, &c->p, PROP_TOL, what);
  /* Masked weights are exactly zero in both. */
  for (int64_t bb = 0; bb < B; bb++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t i = 0; i < Lq; i++)
        for (int64_t j = 0; j < Lk; j++) {
          if (allow[i * Lk + j])
            continue;
          int64_t w = ((bb * H + h) * Lq + i) * Lk + j;
          ck_assert_msg(a.o.weights[w] == 0.0f && b.o.weights[w] == 0.0f,
                        "%s: masked weight b%lld h%lld (%lld,%lld) = %g / %g",
                        what, (long long)bb, (long long)h, (long long)i,
                        (long long)j, (double)a.o.weights[w],
                        (double)b.o.weights[w]);
        }
  tu_run_free(&a);
  tu_run_free(&b);
}

/* _i: alignment (BR, TL) x (Lq, Lk) in {(5,12), (12,5), (33,33), (70,40)}. */
START_TEST(test_causal_equals_allow) {
  static const int64_t shapes[4][2] = {{5, 12}, {12, 5}, {33, 33}, {70, 40}};
  const attn_causal_t causal = _i < 4 ? BR : TL;
  const int64_t Lq = shapes[_i % 4][0], Lk = shapes[_i % 4][1];
  tu_spec_t s = {.B = 2,
                 .batched = 1,
                 .Lq = Lq,
                 .Lk = Lk,
                 .cross = 1,
                 .H = 2,
                 .Dh = 4,
                 .causal = causal,
                 .bias_rank = 3,
                 .alibi = ATTN_ALIBI_DEFAULT};
  tu_case_t c;
  tu_case_build(&c, &s, 200 + (uint64_t)_i);
  uint8_t *allow = malloc((size_t)(Lq * Lk));
  ck_assert_ptr_nonnull(allow);
  const int64_t off = causal == BR ? Lk - Lq : 0;
  for (int64_t i = 0; i < Lq; i++)
    for (int64_t j = 0; j < Lk; j++)
      allow[i * Lk + j] = j <= i + off;
  char what[64];
  snprintf(what, sizeof what, "causal %s %lldx%lld",
           causal == BR ? "bottom-right" : "top-left", (long long)Lq,
           (long long)Lk);
  expect_same_as_allow(&c, allow, what);
  free(allow);
  tu_case_free(&c);
}
END_TEST

/* Key lengths equal allow [B, 1, 1, Lk] with allow[b][j] = j < len[b]. */
START_TEST(test_key_lengths_equal_allow) {
  static const int64_t lens[3][3] = {{9, 0, 4}, {1, 9, 9}, {3, 7, 0}};
  tu_spec_t s = {.B = 3,
                 .batched = 1,
                 .Lq = 6 + _i * 5,
                 .Lk = 9,
                 .cross = 1,
                 .H = 2,
                 .Dh = 4,
                 .key_lengths = 1};
  memcpy(s.lengths, lens[_i], sizeof lens[_i]);
  s.causal = _i == 2 ? TL : ATTN_CAUSAL_NONE;
  tu_case_t c;
  tu_case_build(&c, &s, 300 + (uint64_t)_i);
  uint8_t allow[3 * 9];
  for (int64_t b = 0; b < 3; b++)
    for (int64_t j = 0; j < 9; j++)
      allow[b * 9 + j] = j < lens[_i][b];
  attn_params_t m = c.p; /* causal, if any, stays in both */
  m.key_lengths = (attn_tensor_t){0};
  m.allow = tu_t4(allow, 3, 1, 1, 9);
  tu_run_t a, b;
  ck_assert_int_eq(tu_run(&a, &c.p, &exec1), 0);
  ck_assert_int_eq(tu_run(&b, &m, &exec1), 0);
  expect_close(&a, &b, &c.p, PROP_TOL, "key lengths vs allow [B,1,1,Lk]");
  /* Batch item with length 0: every weight and head output exactly 0. */
  for (int64_t bb = 0; bb < 3; bb++) {
    if (lens[_i][bb] != 0)
      continue;
    const int64_t nw = 2 * c.Lq * 9, nh = 2 * c.Lq * c.Dv;
    for (int64_t x = 0; x < nw; x++)
      ck_assert_float_eq(a.o.weights[bb * nw + x], 0.0f);
    for (int64_t x = 0; x < nh; x++)
      ck_assert_float_eq(a.o.head_outputs[bb * nh + x], 0.0f);
  }
  tu_run_free(&a);
  tu_run_free(&b);
  tu_case_free(&c);
}
END_TEST

/* _i: left only, right only, both, left 0, with Lq < Lk or Lq > Lk. */
START_TEST(test_window_equals_allow) {
  static const struct {
    int hl, hr;
    int64_t l, r, Lq, Lk;
  } w[] = {{1, 0, 3, 0, 9, 14},  {0, 1, 0, 2, 9, 14}, {1, 1, 2, 1, 14, 9},
           {1, 0, 0, 0, 20, 20}, {1, 1, 0, 0, 12, 5}, {1, 1, 5, 40, 70, 40}};
  tu_spec_t s = {.B = 2,
                 .batched = 1,
                 .Lq = w[_i].Lq,
                 .Lk = w[_i].Lk,
                 .cross = 1,
                 .H = 2,
                 .Dh = 4,
                 .has_wl = w[_i].hl,
                 .has_wr = w[_i].hr,
                 .wl = w[_i].l,
                 .wr = w[_i].r,
                 .alibi = ATTN_ALIBI_DEFAULT};
  tu_case_t c;
  tu_case_build(&c, &s, 400 + (uint64_t)_i);
  const int64_t Lq = c.Lq, Lk = c.Lk, off = Lk - Lq;
  uint8_t *allow = malloc((size_t)(Lq * Lk));
  ck_assert_ptr_nonnull(allow);
  for (int64_t i = 0; i < Lq; i++)
    for (int64_t j = 0; j < Lk; j++)
      allow[i * Lk + j] = (!w[_i].hl || j >= i + off - w[_i].l) &&
                          (!w[_i].hr || j <= i + off + w[_i].r);
  char what[64];
  snprintf(what, sizeof what, "window case %d", _i);
  expect_same_as_allow(&c, allow, what);
  free(allow);
  tu_case_free(&c);
}
END_TEST

/* ---- rows of weights ----------------------------------------------------- */

/* clang-format off */
static const tu_spec_t rowsum_cases[] = {
    /* bottom-right with Lq > Lk: the first Lq - Lk rows see nothing */
    {.B = 2, .batched = 1, .Lq = 40, .Lk = 9, .cross = 1, .H = 3, .Dh = 4,
     .causal = BR, .proj = TU_OW | TU_OB, .Eo = 5},
    /* key length 0 for one batch item */
    {.B = 2, .batched = 1, .Lq = 7, .Lk = 9, .cross = 1, .H = 2, .Dh = 4,
     .key_lengths = 1, .lengths = {0, 5}, .proj = TU_OB},
    /* sparse per-head allow: some heads dead on a row, others not */
    {.B = 2, .batched = 1, .Lq = 33, .Lk = 6, .cross = 1, .H = 4, .Dh = 4,
     .allow_rank = 3, .allow_p = 0.2, .proj = TU_ALLPROJ, .Eq = 9, .Ek = 7},
    /* window outside the keys, with alibi, bias and softcap */
    {.Lq = 30, .Lk = 10, .cross = 1, .H = 2, .Dh = 8, .has_wl = 1, .wl = 0,
     .has_wr = 1, .wr = 1, .alibi = ATTN_ALIBI_DEFAULT, .bias_rank = 2,
     .has_softcap = 1, .softcap = 2.0f},
};
/* clang-format on */

START_TEST(test_weight_rows) {
  tu_case_t c;
  tu_case_build(&c, &rowsum_cases[_i], 500 + (uint64_t)_i);
  ref_result_t ref;
  ck_assert_int_eq(ref_attention(&c.p, &ref), 0);
  tu_run_t a;
  attn_exec_t ex = {.threads = 2, .isa = ATTN_ISA_AUTO};
  ck_assert_int_eq(tu_run(&a, &c.p, &ex), 0);
  const int64_t B = c.B, H = c.H, Lq = c.Lq, Lk = c.Lk, Dv = c.Dv, Eo = c.Eo;
  int64_t dead = 0, live = 0;
  for (int64_t b = 0; b < B; b++)
    for (int64_t i = 0; i < Lq; i++) {
      int all_dead = 1;
      for (int64_t h = 0; h < H; h++) {
        const int64_t row = (b * H + h) * Lq + i;
        const float *w = a.o.weights + row * Lk;
        const float *o = a.o.head_outputs + row * Dv;
        double sum = 0.0;
        for (int64_t j = 0; j < Lk; j++) {
          ck_assert_msg(isfinite(w[j]) && w[j] >= 0.0f && w[j] <= 1.0f,
                        "weight b%lld h%lld i%lld j%lld = %g", (long long)b,
                        (long long)h, (long long)i, (long long)j, (double)w[j]);
          sum += w[j];
        }
        if (ref.row_dead[row]) {
          dead++;
          ck_assert_msg(sum == 0.0, "dead row b%lld h%lld i%lld sums to %g",
                        (long long)b, (long long)h, (long long)i, sum);
          for (int64_t d = 0; d < Dv; d++)
            ck_assert_msg(
                o[d] == 0.0f, "dead row b%lld h%lld i%lld: head output %g",
                (long long)b, (long long)h, (long long)i, (double)o[d]);
        } else {
          live++;
          all_dead = 0;
          ck_assert_msg(fabs(sum - 1.0) <= 1e-5,
                        "row b%lld h%lld i%lld sums to %.9g", (long long)b,
                        (long long)h, (long long)i, sum);
          for (int64_t d = 0; d < Dv; d++)
            ck_assert(isfinite(o[d]));
        }
      }
      /* A query row dead in every head: out is the output bias (or 0). */
      for (int64_t e = 0; e < Eo; e++) {
        float got = a.o.out[(b * Lq + i) * Eo + e];
        ck_assert(isfinite(got));
        if (all_dead) {
          float want = c.ob != NULL ? c.ob[e] : 0.0f;
          ck_assert_msg(got == want,
                        "dead query b%lld i%lld: out[%lld] %g != %g",
                        (long long)b, (long long)i, (long long)e, (double)got,
                        (double)want);
        }
      }
      for (int64_t j = 0; j < Lk; j++) {
        float mw = a.o.mean_weights[(b * Lq + i) * Lk + j];
        ck_assert(isfinite(mw));
        if (all_dead)
          ck_assert_float_eq(mw, 0.0f);
      }
    }
  /* each case has both kinds of rows */
  ck_assert_int_gt(dead, 0);
  ck_assert_int_gt(live, 0);
  tu_run_free(&a);
  ref_result_free(&ref);
  tu_case_free(&c);
}
END_TEST

/* ---- thread counts, reruns, concurrency ---------------------------------- */

/* clang-format off */
static const tu_spec_t determinism_cases[] = {
    {.B = 3, .batched = 1, .Lq = 37, .Lk = 70, .cross = 1, .value_given = 1,
     .H = 4, .Hkv = 2, .Dh = 17, .Dv = 9, .Eq = 40, .Ek = 24, .Ev = 20,
     .Eo = 12, .proj = TU_ALLPROJ, .causal = BR, .key_lengths = 1,
     .lengths = {70, 0, 33}, .bias_rank = 3, .alibi = ATTN_ALIBI_DEFAULT},
    {.Lq = 130, .H = 2, .Dh = 64, .causal = TL, .has_wl = 1, .wl = 40},
    /* wider than ATTN__PROJ_COLS: Q, K, V and the output in column
     * groups, 8 layout tasks and 2 output tasks for 1 to 4 threads */
    {.Lq = 70, .H = 6, .Hkv = 3, .Dh = 300, .Dv = 520, .Eq = 32, .Eo = 1100,
     .proj = TU_ALLPROJ, .causal = BR},
    /* row chunks that depend on the threads (internal.h,
     * ATTN__PROJ_ROWS_MIN): 13 layout tasks of 512 rows for 1 and 2
     * threads, 25 of 256 for 3 and 4; output chunks of 512 and 256 */
    {.Lq = 2049, .Lk = 2048, .cross = 1, .H = 2, .Dh = 16, .Eq = 600,
     .Ek = 600, .Eo = 24, .proj = TU_ALLPROJ},
    {.B = 2, .batched = 1, .Lq = 65, .Lk = 7, .cross = 1, .H = 8, .Hkv = 1,
     .Dh = 3, .allow_rank = 4, .allow_p = 0.5, .has_softcap = 1,
     .softcap = 2.0f},
    /* row chunks whose tails depend on the threads: the output's 3330
     * flattened rows in chunks of 1024 for 1, 2 and 4 threads, the last of
     * 258, and of 256 for 3, the last of 2 (Q, K and V stay in 1024). A
     * row's sgemm in a call of 2 rows differs from the same row's in a
     * call of 258 (OpenBLAS's small-matrix kernels, or dots) */
    {.B = 2, .batched = 1, .Lq = 1665, .H = 4, .Dh = 16, .Eq = 64, .Eo = 64,
     .proj = TU_ALLPROJ, .causal = BR, .skip = TU_SKIP_W | TU_SKIP_M},
    /* the same in the layout stage: Q's 517 rows and K's and V's 5637 in
     * chunks of 1024 for 1 and 2 threads (13 tasks), the last of 517
     * rows, and of 512 for 3 and 4, the last of 5; 64 features, so that
     * a call of 517 rows is an sgemm and one of 5 the dots */
    {.Lq = 517, .Lk = 5637, .cross = 1, .H = 1, .Dh = 64, .Eq = 24, .Ek = 24,
     .Eo = 8, .proj = TU_ALLPROJ, .skip = TU_SKIP_W | TU_SKIP_M},
    /* column groups whose last one is narrow: 129 heads of 8 in groups of
     * 128 and 1 (Q, K and V), the output's 1025 columns in 1024 and 1;
     * one thread computes each projection in one call */
    {.Lq = 100, .H = 129, .Dh = 8, .Eq = 64, .Eo = 1025, .proj = TU_ALLPROJ,
     .causal = TL},
    /* fewer query rows, heads and units than most of the thread counts:
     * one query row; three rows of one kv head under a window, projected */
    {.B = 2, .batched = 1, .Lq = 1, .Lk = 9, .cross = 1, .H = 2, .Dh = 4,
     .causal = BR, .key_lengths = 1, .lengths = {9, 4}},
    {.Lq = 3, .Lk = 40, .cross = 1, .value_given = 1, .H = 3, .Hkv = 1,
     .Dh = 6, .Dv = 5, .Eq = 7, .Ek = 5, .Ev = 9, .Eo = 4,
     .proj = TU_ALLPROJ, .has_wl = 1, .wl = 20, .has_wr = 1, .wr = 3},
};
/* clang-format on */

/* The thread counts compared with one thread: each of 1 to 5, then odd
 * counts and counts above the row chunks, heads and units of most cases
 * (the projections' chunks and groups change at 3, 5, 7 and 16 threads,
 * core/forward.c). */
static const int thread_counts[] = {2, 3, 4, 5, 7, 16, 33};
#define N_COUNTS ((int)(sizeof thread_counts / sizeof *thread_counts))

/* The most threads whose results the BLAS kernel loaded lets the core keep
 * the same to the bit as one thread's: every count, or 1 where its sgemm is
 * not the same however a call is split (attn_blas_split_invariant:
 * OpenBLAS's Haswell kernel, which an AVX2 CPU runs; tests/main.c loads the
 * AVX-512 one where the CPU has it, so that with ATTND_REQUIRE_ISA=avx512
 * this never limits the cases). */
static int bitwise_threads(void) {
  if (attn_blas_split_invariant())
    return thread_counts[N_COUNTS - 1];
  attn_backend_t b;
  attn_backend_info(&b);
  ck_assert_msg(tu_isa_required() != ATTN_ISA_AVX512,
                "the BLAS kernel %s is not split-invariant, and "
                "ATTND_REQUIRE_ISA=avx512",
                b.blas_kernel);
  fprintf(stderr,
          "properties: more threads' bits against 1's skipped: the BLAS "
          "kernel %s computes an sgemm otherwise when it is split\n",
          b.blas_kernel);
  return 1;
}

/* _i: case (_i / 2) x ISA auto / generic (_i % 2). */
START_TEST(test_threads_bitwise) {
  const tu_spec_t *s = &determinism_cases[_i / 2];
  const attn_isa_t isa = _i % 2 ? ATTN_ISA_GENERIC : ATTN_ISA_AUTO;
  tu_case_t c;
  tu_case_build(&c, s, 600 + (uint64_t)_i);
  tu_run_t base;
  attn_exec_t ex = {.threads = 1, .isa = isa};
  ck_assert_int_eq(tu_run(&base, &c.p, &ex), 0);
  const int most = bitwise_threads();
  for (int i = 0; i < N_COUNTS && thread_counts[i] <= most; i++) {
    const int t = thread_counts[i];
    tu_run_t r;
    ex.threads = t;
    ck_assert_int_eq(tu_run(&r, &c.p, &ex), 0);
    ck_assert_int_eq(r.plan.threads, t);
    char what[48];
    snprintf(what, sizeof what, "threads %d vs 1, isa %s", t,
             attn_isa_name(isa));
    expect_same_bits(&r.o, &base.o, &base.plan, what);
    tu_run_free(&r);
  }
  tu_run_free(&base);
  tu_case_free(&c);
}
END_TEST

/* The options determinism_cases cannot spell, at every count of
 * thread_counts against one thread, bit for bit: rotary embeddings with q
 * and k norms (_i 0, 1) and the reductions of the weights, per head and of
 * the mean over heads (_i 2, 3), the second of each over fewer query rows
 * than most counts. */
START_TEST(test_threads_bitwise_features) {
  /* clang-format off */
  static const tu_spec_t specs[2] = {
      {.B = 2, .batched = 1, .Lq = 70, .Lk = 90, .cross = 1, .H = 4, .Hkv = 2,
       .Dh = 8, .Eq = 24, .Ek = 16, .proj = TU_QW | TU_KW | TU_OW,
       .causal = BR, .bias_rank = 2},
      {.Lq = 5, .Lk = 130, .cross = 1, .value_given = 1, .H = 2, .Hkv = 1,
       .Dh = 6, .Dv = 3, .causal = TL, .has_wl = 1, .wl = 64},
  };
  /* clang-format on */
  tu_case_t c;
  tu_case_build(&c, &specs[_i % 2], 670 + (uint64_t)_i);
  float norm[2][8];
  for (int k = 0; k < 8; k++) {
    norm[0][k] = 0.5f + 0.125f * (float)k;
    norm[1][k] = 1.5f - 0.0625f * (float)k;
  }
  if (_i < 2) {
    c.p.rope = (attn_rope_t){
        .style = _i ? ATTN_ROPE_INTERLEAVED : ATTN_ROPE_HALF, .theta = 1e4};
    c.p.q_norm = tu_t1(norm[0], c.Dh);
    c.p.k_norm = tu_t1(norm[1], c.Dh);
  } else {
    c.p.want_weights = c.p.want_mean_weights = 0;
    c.p.reduce = (attn_reduce_t){.mean_heads = _i == 3,
                                 .top_k = 5,
                                 .pool_q = 3,
                                 .pool_k = 7,
                                 .pool_reduce = ATTN_POOL_MEAN,
                                 .stats = ATTN_STAT_ALL,
                                 .sink_tokens = 2,
                                 .has_query_range = _i == 3,
                                 .query_range = {1, c.Lq}};
  }
  tu_run_t base;
  attn_exec_t ex = {.threads = 1, .isa = ATTN_ISA_AUTO};
  ck_assert_int_eq(tu_run(&base, &c.p, &ex), 0);
  const int most = bitwise_threads();
  for (int i = 0; i < N_COUNTS && thread_counts[i] <= most; i++) {
    tu_run_t r;
    ex.threads = thread_counts[i];
    ck_assert_int_eq(tu_run(&r, &c.p, &ex), 0);
    char what[48];
    snprintf(what, sizeof what, "case %d, threads %d vs 1", _i, ex.threads);
    expect_same_bits(&r.o, &base.o, &base.plan, what);
    tu_run_free(&r);
  }
  tu_run_free(&base);
  tu_case_free(&c);
}
END_TEST

/* A session's steps over a paged cache (attn_kv_t), as the server runs
 * them: a prefill of 259 tokens, whose keys and values go to the pages
 * from row chunks of 256 and 3 (two tasks each) and end inside the fifth
 * page, then a decoding step of 1 token and one of 61 that crosses into
 * the sixth (tests/testutil.h's layer: GQA, biases, q/k norms, rope,
 * weights asked for), at every count of thread_counts against one
 * thread, bit for bit: each step's outputs, k_absmax and every page's
 * floats after it. Both caches start as the same NaN bits. */
START_TEST(test_threads_bitwise_kv) {
  enum { PAGES = 6, STEPS = 3 };
  static const int64_t steps[STEPS] = {259, 1, 61};
  tu_layer_t l = {.E = 32, .H = 4, .Hkv = 2, .Dh = 8, .Dv = 8, .rope_dims = 6};
  tu_layer_init(&l, 690, 259 + 1 + 61);
  const size_t floats = attn_kv_page_floats(l.Hkv, l.Dh, l.Dv);
  float *pages[2][PAGES]; /* one thread's, then t threads' */
  for (int c = 0; c < 2; c++)
    for (int k = 0; k < PAGES; k++)
      ck_assert_ptr_nonnull(pages[c][k] = aligned_alloc(
                                64, (floats * sizeof(float) + 63) / 64 * 64));
  const int most = bitwise_threads();
  for (int i = 0; i < N_COUNTS && thread_counts[i] <= most; i++) {
    int64_t past[2] = {0, 0};
    float absmax[2] = {0, 0};
    for (int c = 0; c < 2; c++)
      for (int k = 0; k < PAGES; k++)
        for (size_t x = 0; x < floats; x++)
          pages[c][k][x] = NAN;
    for (int st = 0, at = 0; st < STEPS; at += (int)steps[st++]) {
      /* in this scope, not the loop's: each run's plan points at its
       * params, and expect_same_bits reads them after the loop */
      tu_run_t run[2];
      attn_params_t p[2];
      float *const *table[2];
      attn_kv_t kv[2];
      for (int c = 0; c < 2; c++) {
        p[c] = tu_layer_params(&l, tu_t2(l.x + at * l.E, steps[st], l.E));
        table[c] = pages[c];
        kv[c] = (attn_kv_t){
            .past = &past[c], .pages = &table[c], .k_absmax = &absmax[c]};
        p[c].kv = &kv[c];
        attn_exec_t ex = {.threads = c ? thread_counts[i] : 1};
        ck_assert_int_eq(tu_run(&run[c], &p[c], &ex), 0);
        past[c] += steps[st];
      }
      char what[64];
      snprintf(what, sizeof what, "kv step %d (%lld tokens), threads %d vs 1",
               st, (long long)steps[st], thread_counts[i]);
      expect_same_bits(&run[1].o, &run[0].o, &run[0].plan, what);
      ck_assert_msg(memcmp(&absmax[0], &absmax[1], sizeof absmax[0]) == 0,
                    "%s: k_absmax %g vs %g", what, (double)absmax[1],
                    (double)absmax[0]);
      for (int k = 0; k < PAGES; k++) /* NaN is the same bits on both */
        ck_assert_msg(
            memcmp(pages[1][k], pages[0][k], floats * sizeof(float)) == 0,
            "%s: page %d not bitwise identical", what, k);
      for (int c = 0; c < 2; c++)
        tu_run_free(&run[c]);
    }
  }
  for (int c = 0; c < 2; c++)
    for (int k = 0; k < PAGES; k++)
      free(pages[c][k]);
  tu_layer_free(&l);
}
END_TEST

/* A plan made for the most threads of thread_counts, lowered by
 * attn_plan_set_threads to t (as the server does with threads_per_request
 * = auto when a request starts): the workspace of a plan made for t, never
 * more than the most threads', and the same bits as one thread, in a
 * workspace of exactly that size; a count outside [1, most] is refused and
 * changes nothing. Catches a workspace size not recomputed (too small for
 * more threads, or one that keeps the most threads' slots), and a lowered
 * plan whose results differ. */
START_TEST(test_set_threads_bitwise) {
  const tu_spec_t *s = &determinism_cases[_i];
  tu_case_t c;
  tu_case_build(&c, s, 650 + (uint64_t)_i);
  tu_run_t base;
  attn_exec_t ex = {.threads = 1, .isa = ATTN_ISA_AUTO};
  ck_assert_int_eq(tu_run(&base, &c.p, &ex), 0);
  attn_plan_t top, made;
  attn_error_t err;
  const int planned = thread_counts[N_COUNTS - 1];
  ex.threads = planned;
  ck_assert_int_eq(attn_plan_init(&top, &c.p, &ex, &err), 0);
  attn_plan_t bad = top;
  ck_assert_int_eq(attn_plan_set_threads(&bad, 0), ATTN_EINVAL);
  ck_assert_int_eq(attn_plan_set_threads(&bad, planned + 1), ATTN_EINVAL);
  ck_assert_int_eq(bad.threads, planned);
  ck_assert_uint_eq(bad.workspace_bytes, top.workspace_bytes);
  const int most = bitwise_threads();
  for (int i = -1; i < N_COUNTS; i++) {
    const int t = i < 0 ? 1 : thread_counts[i];
    attn_plan_t pl = top;
    ck_assert_int_eq(attn_plan_set_threads(&pl, t), 0);
    ex.threads = t;
    ck_assert_int_eq(attn_plan_init(&made, &c.p, &ex, &err), 0);
    ck_assert_int_eq(pl.threads, t);
    ck_assert_uint_eq(pl.workspace_bytes, made.workspace_bytes);
    ck_assert_uint_le(pl.workspace_bytes, top.workspace_bytes);
    attn_outputs_t o = {0};
    float **dst[4] = {&o.out, &o.weights, &o.mean_weights, &o.head_outputs};
    const int64_t n[4] = {pl.out_elems, pl.weights_elems, pl.mean_elems,
                          pl.head_elems};
    const int want[4] = {1, c.p.want_weights, c.p.want_mean_weights,
                         c.p.want_head_outputs};
    for (int k = 0; k < 4; k++)
      if (want[k])
        ck_assert_ptr_nonnull(*dst[k] = malloc((size_t)n[k] * 4 + 4));
    size_t wsb = (pl.workspace_bytes + 63) / 64 * 64;
    void *ws = aligned_alloc(64, wsb ? wsb : 64);
    ck_assert_ptr_nonnull(ws);
    memset(ws, 0xff, wsb);
    ck_assert_int_eq(attn_forward(&pl, &o, ws, pl.workspace_bytes, &err), 0);
    char what[48];
    snprintf(what, sizeof what, "%d threads set to %d vs 1", planned, t);
    if (t <= most)
      expect_same_bits(&o, &base.o, &base.plan, what);
    free(ws);
    for (int k = 0; k < 4; k++)
      free(*dst[k]);
  }
  tu_run_free(&base);
  tu_case_free(&c);
}
END_TEST

/* Copies of every input buffer of a case, to prove attn_forward leaves them
 * alone. */
static int inputs_equal(const tu_case_t *c, const tu_case_t *copy) {
#define SAME(f, n)                                                             \
  (c->f == NULL || memcmp(c->f, copy->f, (size_t)(n) * sizeof *c->f) == 0)
  return SAME(query, c->B * c->Lq * c->Eq) && SAME(key, c->B * c->Lk * c->Ek) &&
         SAME(value, c->B * c->Lk * c->Ev) && SAME(qw, c->H * c->Dh * c->Eq) &&
         SAME(kw, c->Hkv * c->Dh * c->Ek) && SAME(vw, c->Hkv * c->Dv * c->Ev) &&
         SAME(ow, c->Eo * c->H * c->Dv);
#undef SAME
}

/* One plan, two calls; the second with a workspace of different garbage:
 * same bits, and the inputs are untouched. */
START_TEST(test_rerun_same_plan) {
  const tu_spec_t *s = &determinism_cases[_i];
  tu_case_t c, copy;
  tu_case_build(&c, s, 700 + (uint64_t)_i);
  tu_case_build(&copy, s, 700 + (uint64_t)_i);
  tu_run_t a;
  attn_exec_t ex = {.threads = 2, .isa = ATTN_ISA_AUTO};
  ck_assert_int_eq(tu_run(&a, &c.p, &ex), 0);

  const attn_plan_t *pl = &a.plan;
  size_t n[4] = {(size_t)pl->out_elems, (size_t)pl->weights_elems,
                 (size_t)pl->mean_elems, (size_t)pl->head_elems};
  attn_outputs_t o2 = {0};
  o2.out = calloc(n[0] + 1, 4);
  o2.weights = calloc(n[1] + 1, 4);
  o2.mean_weights = calloc(n[2] + 1, 4);
  o2.head_outputs = calloc(n[3] + 1, 4);
  size_t wsb = (pl->workspace_bytes + 63) / 64 * 64 + 64;
  void *ws = aligned_alloc(64, wsb);
  ck_assert_ptr_nonnull(ws);
  memset(ws, 0x3c, wsb); /* finite garbage, unlike tu_run's NaN bytes */
  attn_error_t err;
  ck_assert_int_eq(attn_forward(pl, &o2, ws, pl->workspace_bytes, &err), 0);
  expect_same_bits(&o2, &a.o, pl, "second call on one plan");
  ck_assert_msg(inputs_equal(&c, &copy), "attn_forward changed an input");
  free(o2.out);
  free(o2.weights);
  free(o2.mean_weights);
  free(o2.head_outputs);
  free(ws);
  tu_run_free(&a);
  tu_case_free(&copy);
  tu_case_free(&c);
}
END_TEST

typedef struct conc_job {
  const attn_plan_t *plan;
  attn_outputs_t o;
  void *ws;
  int rc;
  int reps;
} conc_job_t;

static void *conc_worker(void *arg) {
  conc_job_t *j = arg;
  attn_error_t err;
  for (int k = 0; k < j->reps && j->rc == 0; k++)
    j->rc = attn_forward(j->plan, &j->o, j->ws, j->plan->workspace_bytes, &err);
  return NULL;
}

/* attn_timing_t's busy times (what tools/device/cores.sh reads to tell
 * idle threads from slow tasks): one thread's are its parts' times; with
 * three, each part's lies in (0, 3 × the part's time], since a thread is
 * busy only inside the part. An invariant of the measurement, not a
 * speed: catches a stage counted in the wrong part, or a unit slip. */
START_TEST(test_busy_times) {
  tu_case_t c;
  tu_case_build(&c, &determinism_cases[1], 660);
  c.p.want_weights = c.p.want_mean_weights = 0; /* a pooled map instead */
  c.p.reduce = (attn_reduce_t){.pool_q = 16, .pool_k = 16};
  for (int t = 1; t <= 3; t += 2) {
    tu_run_t r;
    attn_exec_t ex = {.threads = t};
    ck_assert_int_eq(tu_run(&r, &c.p, &ex), 0);
    const attn_timing_t *tm = &r.o.timing;
    const double part[3] = {tm->projection_ms, tm->attention_ms, tm->output_ms};
    const double busy[3] = {tm->projection_busy_ms, tm->attention_busy_ms,
                            tm->output_busy_ms};
    for (int k = 0; k < 3; k++)
      ck_assert_msg(t == 1 ? busy[k] == part[k]
                           : busy[k] > 0 && busy[k] <= t * part[k],
                    "%d threads, part %d: busy %.6f ms in %.6f ms", t, k,
                    busy[k], part[k]);
    tu_run_free(&r);
  }
  tu_case_free(&c);
}
END_TEST

/* Two threads call attn_forward on one plan at once, each with its own
 * buffers: both match a lone call bit for bit. */
START_TEST(test_concurrent_calls) {
  const tu_spec_t *s = &determinism_cases[0];
  tu_case_t c;
  tu_case_build(&c, s, 800);
  tu_run_t base;
  attn_exec_t ex = {.threads = 1 + _i, .isa = ATTN_ISA_AUTO};
  ck_assert_int_eq(tu_run(&base, &c.p, &ex), 0);
  const attn_plan_t *pl = &base.plan;
  conc_job_t jobs[2];
  pthread_t th[2];
  for (int k = 0; k < 2; k++) {
    jobs[k] = (conc_job_t){.plan = pl, .reps = 5};
    jobs[k].o.out = calloc((size_t)pl->out_elems + 1, 4);
    jobs[k].o.weights = calloc((size_t)pl->weights_elems + 1, 4);
    jobs[k].o.mean_weights = calloc((size_t)pl->mean_elems + 1, 4);
    jobs[k].o.head_outputs = calloc((size_t)pl->head_elems + 1, 4);
    jobs[k].ws = aligned_alloc(64, (pl->workspace_bytes + 63) / 64 * 64 + 64);
    ck_assert_ptr_nonnull(jobs[k].ws);
  }
  for (int k = 0; k < 2; k++)
    ck_assert_int_eq(pthread_create(&th[k], NULL, conc_worker, &jobs[k]), 0);
  for (int k = 0; k < 2; k++)
    ck_assert_int_eq(pthread_join(th[k], NULL), 0);
  for (int k = 0; k < 2; k++) {
    ck_assert_int_eq(jobs[k].rc, 0);
    expect_same_bits(&jobs[k].o, &base.o, pl, "concurrent call");
    free(jobs[k].o.out);
    free(jobs[k].o.weights);
    free(jobs[k].o.mean_weights);
    free(jobs[k].o.head_outputs);
    free(jobs[k].ws);
  }
  tu_run_free(&base);
  tu_case_free(&c);
}
END_TEST

/* ---- mean weights -------------------------------------------------------- */

START_TEST(test_mean_weights_are_mean) {
  tu_rng_t r;
  tu_rng_seed(&r, 900 + (uint64_t)_i);
  tu_spec_t s;
  tu_spec_random(&s, &r);
  s.skip = 0;
  tu_case_t c;
  tu_case_build(&c, &s, 950 + (uint64_t)_i);
  tu_run_t a;
  ck_assert_int_eq(tu_run(&a, &c.p, &exec1), 0);
  const int64_t B = c.B, H = c.H, LL = c.Lq * c.Lk;
  for (int64_t b = 0; b < B; b++)
    for (int64_t x = 0; x < LL; x++) {
      double m = 0.0;
      for (int64_t h = 0; h < H; h++)
        m += a.o.weights[(b * H + h) * LL + x];
      m /= (double)H;
      ck_assert_double_eq_tol(a.o.mean_weights[b * LL + x], m, 1e-6);
    }
  tu_run_free(&a);
  tu_case_free(&c);
}
END_TEST

/* ---- batch items are independent ----------------------------------------- */

START_TEST(test_batch_independent) {
  const int64_t B = 3, Lq = 11, Lk = 14, H = 4, Dh = 3, Eq = 10, Ek = 8;
  const tu_spec_t s = {.B = B,
                       .batched = 1,
                       .Lq = Lq,
                       .Lk = Lk,
                       .cross = 1,
                       .H = H,
                       .Hkv = 2,
                       .Dh = Dh,
                       .Eq = Eq,
                       .Ek = Ek,
                       .proj = TU_ALLPROJ,
                       .causal = BR,
                       .key_lengths = 1,
                       .lengths = {14, 5, 0},
                       .bias_rank = 3,
                       .allow_rank = 3,
                       .allow_p = 0.8,
                       .alibi = ATTN_ALIBI_DEFAULT};
  tu_case_t c;
  tu_case_build(&c, &s, 1000 + (uint64_t)_i);
  tu_run_t all;
  ck_assert_int_eq(tu_run(&all, &c.p, &exec1), 0);
  const int64_t Eo = c.Eo, Dv = c.Dv;
  for (int64_t b = 0; b < B; b++) {
    attn_params_t one = c.p;
    one.query = tu_t2(c.query + b * Lq * Eq, Lq, Eq);
    one.key = tu_t2(c.key + b * Lk * Ek, Lk, Ek);
    one.key_lengths = tu_t1(c.lengths + b, 1);
    tu_run_t r;
    ck_assert_int_eq(tu_run(&r, &one, &exec1), 0);
    ck_assert_int_eq(r.plan.B, 1);
    char what[32];
    snprintf(what, sizeof what, "batch item %lld", (long long)b);
    double e =
        tu_rel_err_f(r.o.out, all.o.out + b * Lq * Eo, (size_t)(Lq * Eo));
    ck_assert_msg(e <= PROP_TOL, "%s: out differs by %.3g", what, e);
    e = tu_rel_err_f(r.o.weights, all.o.weights + b * H * Lq * Lk,
                     (size_t)(H * Lq * Lk));
    ck_assert_msg(e <= PROP_TOL, "%s: weights differ by %.3g", what, e);
    e = tu_rel_err_f(r.o.head_outputs, all.o.head_outputs + b * H * Lq * Dv,
                     (size_t)(H * Lq * Dv));
    ck_assert_msg(e <= PROP_TOL, "%s: head outputs differ by %.3g", what, e);
    tu_run_free(&r);
  }
  tu_run_free(&all);
  tu_case_free(&c);
}
END_TEST

/* ---- softmax shift invariance -------------------------------------------- */

/* A bias of one constant, broadcast from [1, 1], shifts every score of a
 * row alike: weights and outputs do not change. */
START_TEST(test_constant_bias_changes_nothing) {
  const float shift[2] = {7.5f, -30.0f};
  const tu_spec_t s = {.B = 2,
                       .batched = 1,
                       .Lq = 9,
                       .Lk = 12,
                       .cross = 1,
                       .H = 2,
                       .Dh = 8,
                       .causal = BR,
                       .alibi = ATTN_ALIBI_DEFAULT};
  tu_case_t c;
  tu_case_build(&c, &s, 1100 + (uint64_t)_i);
  attn_params_t m = c.p;
  m.bias = tu_t2(&shift[_i], 1, 1);
  tu_run_t a, b;
  ck_assert_int_eq(tu_run(&a, &c.p, &exec1), 0);
  ck_assert_int_eq(tu_run(&b, &m, &exec1), 0);
  expect_close(&a, &b, &c.p, 1e-5, "constant bias");
  tu_run_free(&a);
  tu_run_free(&b);
  tu_case_free(&c);
}
END_TEST

/* ---- keys are a set ------------------------------------------------------ */

/* With no positional term, reversing the keys (with their values, their
 * allow and bias columns) reverses each weight row and leaves out alone. */
START_TEST(test_key_permutation) {
  const int64_t Lq = 6, Lk = 10, E = 8;
  const tu_spec_t s = {.Lq = Lq,
                       .Lk = Lk,
                       .cross = 1,
                       .value_given = 1,
                       .H = 2,
                       .Dh = 4,
                       .Dv = 5,
                       .proj = TU_ALLPROJ,
                       .Eq = E,
                       .Ek = E,
                       .Ev = E,
                       .bias_rank = 2,
                       .allow_rank = 2,
                       .allow_p = 0.8};
  tu_case_t c;
  tu_case_build(&c, &s, 1200);
  float *key = malloc((size_t)(Lk * E) * sizeof *key);
  float *value = malloc((size_t)(Lk * E) * sizeof *value);
  float *bias = malloc((size_t)(Lq * Lk) * sizeof *bias);
  uint8_t *allow = malloc((size_t)(Lq * Lk));
  ck_assert(key && value && bias && allow);
  for (int64_t j = 0; j < Lk; j++) {
    memcpy(key + j * E, c.key + (Lk - 1 - j) * E, (size_t)E * sizeof *key);
    memcpy(value + j * E, c.value + (Lk - 1 - j) * E,
           (size_t)E * sizeof *value);
    for (int64_t i = 0; i < Lq; i++) {
      bias[i * Lk + j] = c.bias[i * Lk + Lk - 1 - j];
      allow[i * Lk + j] = c.allow[i * Lk + Lk - 1 - j];
    }
  }
  attn_params_t m = c.p;
  m.key.data = key;
  m.value.data = value;
  m.bias.data = bias;
  m.allow.data = allow;
  tu_run_t a, b;
  ck_assert_int_eq(tu_run(&a, &c.p, &exec1), 0);
  ck_assert_int_eq(tu_run(&b, &m, &exec1), 0);
  double e = tu_rel_err_f(b.o.out, a.o.out, (size_t)a.plan.out_elems);
  ck_assert_msg(e <= PROP_TOL, "out differs by %.3g", e);
  for (int64_t r = 0; r < 2 * Lq; r++)
    for (int64_t j = 0; j < Lk; j++)
      ck_assert_double_eq_tol(b.o.weights[r * Lk + j],
                              a.o.weights[r * Lk + Lk - 1 - j], 1e-6);
  tu_run_free(&a);
  tu_run_free(&b);
  free(key);
  free(value);
  free(bias);
  free(allow);
  tu_case_free(&c);
}
END_TEST

Suite *test_suite(void) {
  Suite *s = suite_create("properties");
  TCase *tc = tcase_create("gqa");
  tcase_add_loop_test(tc, test_gqa_equals_repeated_mha, 0,
                      (int)(sizeof gqa_cases / sizeof gqa_cases[0]));
  suite_add_tcase(s, tc);

  tc = tcase_create("masks");
  tcase_add_loop_test(tc, test_causal_equals_allow, 0, 8);
  tcase_add_loop_test(tc, test_key_lengths_equal_allow, 0, 3);
  tcase_add_loop_test(tc, test_window_equals_allow, 0, 6);
  tcase_add_loop_test(tc, test_weight_rows, 0,
                      (int)(sizeof rowsum_cases / sizeof rowsum_cases[0]));
  suite_add_tcase(s, tc);

  tc = tcase_create("determinism");
  tcase_set_timeout(tc, 30);
  tcase_add_loop_test(
      tc, test_threads_bitwise, 0,
      2 * (int)(sizeof determinism_cases / sizeof determinism_cases[0]));
  tcase_add_loop_test(tc, test_threads_bitwise_features, 0, 4);
  tcase_add_test(tc, test_threads_bitwise_kv);
  tcase_add_loop_test(
      tc, test_rerun_same_plan, 0,
      (int)(sizeof determinism_cases / sizeof determinism_cases[0]));
  tcase_add_loop_test(
      tc, test_set_threads_bitwise, 0,
      (int)(sizeof determinism_cases / sizeof determinism_cases[0]));
  tcase_add_loop_test(tc, test_concurrent_calls, 0, 2);
  tcase_add_test(tc, test_busy_times);
  suite_add_tcase(s, tc);

  tc = tcase_create("identities");
  tcase_add_loop_test(tc, test_mean_weights_are_mean, 0, 20);
  tcase_add_loop_test(tc, test_batch_independent, 0, 2);
  tcase_add_loop_test(tc, test_constant_bias_changes_nothing, 0, 2);
  tcase_add_test(tc, test_key_permutation);
  suite_add_tcase(s, tc);
  return s;
}
