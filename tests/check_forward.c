/* tests/check_forward.c: attn_forward against the float64 reference.
 *
 * Every requested output (out, weights, mean weights, head outputs) must be
 * within FWD_TOL of tests/ref.c, as ‖got − ref‖₂ / ‖ref‖₂ (see testutil.h),
 * and the plan's derived sizes must equal the reference's. The tolerance is
 * a few hundred float32 roundings, far below what any wrong mask, head
 * mapping, bias index or projection layout produces (those give 1e-2 and
 * up). Cases:
 *   - the worked example of the seed text, by hand;
 *   - a table with each feature alone and some combined;
 *   - odd sizes around tile edges and fully masked tiles;
 *   - every thread count 1..4 with every ISA; an ISA this CPU lacks is
 *     skipped with a line on stderr, and planning with it must then fail
 *     with ATTN_ENOTSUP (test_isa_support), whose detected ISA is checked
 *     against the CPU's own feature flags; with ATTND_REQUIRE_ISA=avx512
 *     (as .ci/run sets it) a skip fails instead (tu_isa_required);
 *   - a batch item's output bits, alone and beside others (every ISA);
 *   - random specs with every feature on or off;
 *   - one larger case;
 *   - the default ALiBi slopes. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attn.h"
#include "ref.h"
#include "suite.h"
#include "testutil.h"

#define FWD_TOL 1e-5

/* ---- the worked example -------------------------------------------------- */

/* Two heads, one query, two keys. Q and K are all zero, so every score is
 * the bias alone; the bias holds log-weights, so softmax returns them:
 * head 1 (0.8, 0.2) over values (2, 6) → 2.8; head 2 (0.25, 0.75) over
 * (10, −2) → 1.0; o_weight [[2, −1]] gives 2·2.8 − 1.0 = 4.6. */
START_TEST(test_worked_example) {
  static const float query[1 * 2] = {0, 0};     /* [Lq=1, H·Dh=2] */
  static const float key[2 * 2] = {0, 0, 0, 0}; /* [Lk=2, 2] */
  static const float value[2 * 2] = {2, 10, 6, -2};
  static const float o_weight[1 * 2] = {2, -1}; /* [Eo=1, H·Dv=2] */
  float bias[2 * 1 * 2] = {logf(0.8f), logf(0.2f), logf(0.25f), logf(0.75f)};

  attn_params_t p = {0};
  p.query = tu_t2(query, 1, 2);
  p.key = tu_t2(key, 2, 2);
  p.value = tu_t2(value, 2, 2);
  p.num_heads = 2;
  p.o_weight = tu_t2(o_weight, 1, 2);
  p.bias = tu_t3(bias, 2, 1, 2); /* [H, Lq, Lk], broadcast over B */
  p.want_weights = p.want_mean_weights = p.want_head_outputs = 1;

  tu_run_t run;
  attn_exec_t ex = {.threads = 1, .isa = ATTN_ISA_AUTO};
  ck_assert_int_eq(tu_run(&run, &p, &ex), 0);
  ck_assert_int_eq(run.plan.Dh, 1);
  ck_assert_int_eq(run.plan.Dv, 1);
  ck_assert_int_eq(run.plan.Eo, 1);
  ck_assert_int_eq(run.plan.out_elems, 1);

  const double w[4] = {0.8, 0.2, 0.25, 0.75};
  for (int k = 0; k < 4; k++)
    ck_assert_double_eq_tol(run.o.weights[k], w[k], 1e-5);
  ck_assert_double_eq_tol(run.o.mean_weights[0], 0.525, 1e-5);
  ck_assert_double_eq_tol(run.o.mean_weights[1], 0.475, 1e-5);
  ck_assert_double_eq_tol(run.o.head_outputs[0], 2.8, 1e-5);
  ck_assert_double_eq_tol(run.o.head_outputs[1], 1.0, 1e-5);
  ck_assert_double_eq_tol(run.o.out[0], 4.6, 1e-5);
  tu_run_free(&run);

  /* The reference agrees with the text too. */
  ref_result_t ref;
  ck_assert_int_eq(ref_attention(&p, &ref), 0);
  ck_assert_double_eq_tol(ref.out[0], 4.6, 1e-6);
  ck_assert_double_eq_tol(ref.head_outputs[0], 2.8, 1e-6);
  ck_assert_double_eq_tol(ref.head_outputs[1], 1.0, 1e-6);
  ref_result_free(&ref);
}
END_TEST

/* ---- each feature, alone and combined ------------------------------------ */

typedef struct fcase {
  const char *name;
  tu_spec_t s;
} fcase_t;

#define BR ATTN_CAUSAL_BOTTOM_RIGHT
#define TL ATTN_CAUSAL_TOP_LEFT

/* clang-format off */
static const fcase_t feature_cases[] = {
    /* self and cross, ranks, batch */
    {"self rank 2 one head", {.Lq = 5, .H = 1, .Dh = 4}},
    {"self rank 3 B=3", {.B = 3, .batched = 1, .Lq = 9, .H = 2, .Dh = 8}},
    {"self rank 3 B=1", {.B = 1, .batched = 1, .Lq = 6, .H = 2, .Dh = 3}},
    {"cross Lq<Lk",
     {.B = 2, .batched = 1, .Lq = 7, .Lk = 13, .cross = 1, .H = 2, .Dh = 8}},
    {"cross Lq>Lk rank 2", {.Lq = 19, .Lk = 6, .cross = 1, .H = 3, .Dh = 5}},
    {"cross Eq/Ek/Ev all differ",
     {.B = 2, .batched = 1, .Lq = 7, .Lk = 11, .cross = 1, .value_given = 1,
      .H = 2, .Dh = 6, .Dv = 5, .Eq = 20, .Ek = 12, .Ev = 10,
      .proj = TU_QW | TU_KW | TU_VW}},
    {"value given, key absent",
     {.Lq = 8, .value_given = 1, .H = 2, .Dh = 4, .Dv = 7}},
    {"cross, value absent (= key)",
     {.Lq = 5, .Lk = 9, .cross = 1, .H = 2, .Dh = 4}},
    {"Dv != Dh", {.Lq = 6, .Lk = 10, .cross = 1, .value_given = 1, .H = 2,
                  .Dh = 3, .Dv = 11}},
    /* grouped heads */
    {"GQA H=4 Hkv=2",
     {.B = 2, .batched = 1, .Lq = 10, .Lk = 12, .cross = 1, .value_given = 1,
      .H = 4, .Hkv = 2, .Dh = 4, .Dv = 6}},
    {"MQA H=4 Hkv=1",
     {.Lq = 9, .Lk = 9, .cross = 1, .value_given = 1, .H = 4, .Hkv = 1,
      .Dh = 8, .Dv = 3}},
    {"GQA H=6 Hkv=3 self, all projections",
     {.B = 2, .batched = 1, .Lq = 11, .H = 6, .Hkv = 3, .Dh = 4, .Dv = 5,
      .Eq = 24, .Eo = 7, .proj = TU_ALLPROJ}},
    {"Hkv given equal to H", {.Lq = 6, .H = 3, .Hkv = 3, .Dh = 2}},
    {"MQA H=8 self with k/v weights",
     {.Lq = 12, .H = 8, .Hkv = 1, .Dh = 2, .proj = TU_KW | TU_VW}},
    /* causal */
    {"causal bottom-right Lq<Lk",
     {.B = 2, .batched = 1, .Lq = 5, .Lk = 12, .cross = 1, .H = 2, .Dh = 4,
      .causal = BR}},
    {"causal bottom-right Lq>Lk",
     {.B = 2, .batched = 1, .Lq = 12, .Lk = 5, .cross = 1, .H = 2, .Dh = 4,
      .causal = BR}},
    {"causal top-left Lq<Lk",
     {.Lq = 5, .Lk = 12, .cross = 1, .H = 2, .Dh = 4, .causal = TL}},
    {"causal top-left Lq>Lk",
     {.Lq = 12, .Lk = 5, .cross = 1, .H = 2, .Dh = 4, .causal = TL}},
    {"causal bottom-right self", {.Lq = 17, .H = 2, .Dh = 4, .causal = BR}},
    {"causal top-left self", {.Lq = 17, .H = 2, .Dh = 4, .causal = TL}},
    /* key lengths */
    {"key lengths B=3 {Lk, 0, 4}",
     {.B = 3, .batched = 1, .Lq = 6, .Lk = 9, .cross = 1, .H = 2, .Dh = 4,
      .key_lengths = 1, .lengths = {9, 0, 4}}},
    {"key lengths rank 2 {0}",
     {.Lq = 5, .Lk = 7, .cross = 1, .H = 2, .Dh = 3, .key_lengths = 1,
      .lengths = {0}}},
    {"key lengths rank 2 {Lk}",
     {.Lq = 5, .Lk = 7, .cross = 1, .H = 2, .Dh = 3, .key_lengths = 1,
      .lengths = {7}}},
    {"key lengths {1, 13}",
     {.B = 2, .batched = 1, .Lq = 4, .Lk = 13, .cross = 1, .H = 1, .Dh = 5,
      .key_lengths = 1, .lengths = {1, 13}}},
    {"key lengths with causal bottom-right",
     {.B = 2, .batched = 1, .Lq = 8, .Lk = 11, .cross = 1, .H = 2, .Dh = 4,
      .causal = BR, .key_lengths = 1, .lengths = {6, 11}}},
    /* allow, each rank and broadcast pattern */
    {"allow [Lq, Lk]",
     {.B = 2, .batched = 1, .Lq = 7, .Lk = 9, .cross = 1, .H = 2, .Dh = 4,
      .allow_rank = 2}},
    {"allow [1, Lk]",
     {.B = 2, .batched = 1, .Lq = 7, .Lk = 9, .cross = 1, .H = 2, .Dh = 4,
      .allow_rank = 2, .allow_ones = TU_1Q}},
    {"allow [Lq, 1]",
     {.Lq = 7, .Lk = 9, .cross = 1, .H = 2, .Dh = 4, .allow_rank = 2,
      .allow_ones = TU_1K, .allow_p = 0.6}},
    {"allow [H, Lq, Lk]",
     {.B = 2, .batched = 1, .Lq = 7, .Lk = 9, .cross = 1, .H = 3, .Dh = 4,
      .allow_rank = 3}},
    {"allow [1, Lq, Lk]",
     {.B = 2, .batched = 1, .Lq = 7, .Lk = 9, .cross = 1, .H = 3, .Dh = 4,
      .allow_rank = 3, .allow_ones = TU_1H}},
    {"allow [H, 1, Lk]",
     {.Lq = 7, .Lk = 9, .cross = 1, .H = 3, .Dh = 4, .allow_rank = 3,
      .allow_ones = TU_1Q}},
    {"allow [B, H, Lq, Lk]",
     {.B = 2, .batched = 1, .Lq = 7, .Lk = 9, .cross = 1, .H = 2, .Dh = 4,
      .allow_rank = 4}},
    {"allow [B, 1, 1, Lk]",
     {.B = 3, .batched = 1, .Lq = 7, .Lk = 9, .cross = 1, .H = 2, .Dh = 4,
      .allow_rank = 4, .allow_ones = TU_1H | TU_1Q}},
    {"allow [1, H, Lq, 1]",
     {.B = 2, .batched = 1, .Lq = 7, .Lk = 9, .cross = 1, .H = 2, .Dh = 4,
      .allow_rank = 4, .allow_ones = TU_1B | TU_1K}},
    {"allow [1, 1, 1, 1] all allowed",
     {.B = 2, .batched = 1, .Lq = 7, .Lk = 9, .cross = 1, .H = 2, .Dh = 4,
      .allow_rank = 4, .allow_ones = 15, .allow_p = 1.0}},
    {"allow sparse, many dead rows",
     {.B = 2, .batched = 1, .Lq = 9, .Lk = 5, .cross = 1, .H = 2, .Dh = 4,
      .allow_rank = 4, .allow_p = 0.15}},
    /* bias */
    {"bias [Lq, Lk]",
     {.B = 2, .batched = 1, .Lq = 7, .Lk = 9, .cross = 1, .H = 2, .Dh = 4,
      .bias_rank = 2}},
    {"bias [H, Lq, Lk]",
     {.B = 2, .batched = 1, .Lq = 7, .Lk = 9, .cross = 1, .H = 3, .Dh = 4,
      .bias_rank = 3}},
    {"bias [1, 1, Lk]",
     {.Lq = 7, .Lk = 9, .cross = 1, .H = 3, .Dh = 4, .bias_rank = 3,
      .bias_ones = TU_1H | TU_1Q}},
    {"bias [B, H, Lq, Lk]",
     {.B = 2, .batched = 1, .Lq = 7, .Lk = 9, .cross = 1, .H = 2, .Dh = 4,
      .bias_rank = 4}},
    {"bias [B, 1, 1, Lk]",
     {.B = 2, .batched = 1, .Lq = 7, .Lk = 9, .cross = 1, .H = 2, .Dh = 4,
      .bias_rank = 4, .bias_ones = TU_1H | TU_1Q}},
    /* constant along keys: softmax ignores it (only indexing is tested) */
    {"bias [B, 1, Lq, 1]",
     {.B = 2, .batched = 1, .Lq = 7, .Lk = 9, .cross = 1, .H = 2, .Dh = 4,
      .bias_rank = 4, .bias_ones = TU_1H | TU_1K}},
    /* sliding window */
    {"window left 3",
     {.Lq = 9, .Lk = 14, .cross = 1, .H = 2, .Dh = 4, .has_wl = 1, .wl = 3}},
    {"window right 2",
     {.Lq = 9, .Lk = 14, .cross = 1, .H = 2, .Dh = 4, .has_wr = 1, .wr = 2}},
    {"window left 2 right 1, Lq>Lk",
     {.Lq = 14, .Lk = 9, .cross = 1, .H = 2, .Dh = 4, .has_wl = 1, .wl = 2,
      .has_wr = 1, .wr = 1}},
    {"window left 0", {.Lq = 9, .H = 2, .Dh = 4, .has_wl = 1, .wl = 0}},
    {"window 0/0 with Lq>Lk (dead rows)",
     {.Lq = 12, .Lk = 5, .cross = 1, .H = 2, .Dh = 4, .has_wl = 1, .wl = 0,
      .has_wr = 1, .wr = 0}},
    {"window left 4 and causal",
     {.B = 2, .batched = 1, .Lq = 13, .H = 2, .Dh = 4, .causal = BR,
      .has_wl = 1, .wl = 4}},
    /* ALiBi */
    {"alibi default H=8",
     {.Lq = 10, .Lk = 14, .cross = 1, .H = 8, .Dh = 2,
      .alibi = ATTN_ALIBI_DEFAULT}},
    {"alibi default H=6",
     {.Lq = 10, .Lk = 14, .cross = 1, .H = 6, .Dh = 2,
      .alibi = ATTN_ALIBI_DEFAULT}},
    {"alibi default H=3",
     {.Lq = 10, .Lk = 14, .cross = 1, .H = 3, .Dh = 2,
      .alibi = ATTN_ALIBI_DEFAULT}},
    {"alibi default H=1",
     {.Lq = 10, .H = 1, .Dh = 4, .alibi = ATTN_ALIBI_DEFAULT}},
    {"alibi default H=12 Lq>Lk",
     {.Lq = 15, .Lk = 6, .cross = 1, .H = 12, .Dh = 1,
      .alibi = ATTN_ALIBI_DEFAULT}},
    {"alibi slopes H=4",
     {.B = 2, .batched = 1, .Lq = 10, .Lk = 14, .cross = 1, .H = 4, .Dh = 3,
      .alibi = ATTN_ALIBI_SLOPES}},
    /* softcap and scale */
    {"softcap 2",
     {.Lq = 9, .H = 2, .Dh = 8, .has_scale = 1, .scale = 1.5f,
      .has_softcap = 1, .softcap = 2.0f}},
    {"softcap 30",
     {.Lq = 9, .H = 2, .Dh = 8, .has_softcap = 1, .softcap = 30.0f}},
    {"softcap then bias then alibi",
     {.Lq = 9, .Lk = 12, .cross = 1, .H = 4, .Dh = 4, .has_softcap = 1,
      .softcap = 1.0f, .bias_rank = 3, .alibi = ATTN_ALIBI_DEFAULT}},
    {"scale 0.3", {.Lq = 9, .H = 2, .Dh = 8, .has_scale = 1, .scale = 0.3f}},
    {"scale 2.5", {.Lq = 9, .H = 2, .Dh = 8, .has_scale = 1, .scale = 2.5f}},
    {"scale 0 (uniform)",
     {.Lq = 9, .H = 2, .Dh = 8, .has_scale = 1, .scale = 0.0f}},
    {"scale -0.7", {.Lq = 9, .H = 2, .Dh = 8, .has_scale = 1, .scale = -0.7f}},
    /* projections, each alone and together */
    {"q_weight only",
     {.Lq = 6, .Lk = 8, .cross = 1, .H = 2, .Dh = 3, .Eq = 10,
      .proj = TU_QW}},
    {"q_bias only", {.Lq = 6, .Lk = 8, .cross = 1, .H = 2, .Dh = 3,
                     .proj = TU_QB}},
    {"k_weight only",
     {.Lq = 6, .Lk = 8, .cross = 1, .H = 2, .Dh = 3, .Ek = 10, .proj = TU_KW}},
    {"k_bias only", {.Lq = 6, .Lk = 8, .cross = 1, .H = 2, .Dh = 3,
                     .proj = TU_KB}},
    {"v_weight only",
     {.Lq = 6, .Lk = 8, .cross = 1, .value_given = 1, .H = 2, .Dh = 3,
      .Dv = 4, .Ev = 7, .proj = TU_VW}},
    {"v_bias only",
     {.Lq = 6, .Lk = 8, .cross = 1, .value_given = 1, .H = 2, .Dh = 3,
      .Dv = 4, .proj = TU_VB}},
    {"o_weight only",
     {.Lq = 6, .Lk = 8, .cross = 1, .H = 2, .Dh = 3, .Eo = 5, .proj = TU_OW}},
    {"o_bias only", {.Lq = 6, .Lk = 8, .cross = 1, .H = 2, .Dh = 3,
                     .proj = TU_OB}},
    {"all projections",
     {.B = 2, .batched = 1, .Lq = 6, .Lk = 8, .cross = 1, .value_given = 1,
      .H = 2, .Dh = 3, .Dv = 4, .Eq = 11, .Ek = 9, .Ev = 7, .Eo = 5,
      .proj = TU_ALLPROJ}},
    {"biases without weights",
     {.B = 2, .batched = 1, .Lq = 6, .Lk = 8, .cross = 1, .value_given = 1,
      .H = 2, .Dh = 3, .Dv = 4, .proj = TU_QB | TU_KB | TU_VB | TU_OB}},
    {"weights without biases",
     {.B = 2, .batched = 1, .Lq = 6, .Lk = 8, .cross = 1, .value_given = 1,
      .H = 2, .Dh = 3, .Dv = 4, .Eq = 11, .Ek = 9, .Ev = 7, .Eo = 5,
      .proj = TU_QW | TU_KW | TU_VW | TU_OW}},
    /* which outputs are requested */
    {"out only",
     {.Lq = 7, .H = 2, .Dh = 4, .causal = BR,
      .skip = TU_SKIP_W | TU_SKIP_M | TU_SKIP_HO}},
    {"out and weights",
     {.Lq = 7, .H = 2, .Dh = 4, .causal = BR, .skip = TU_SKIP_M | TU_SKIP_HO}},
    {"out and mean weights",
     {.Lq = 7, .H = 2, .Dh = 4, .causal = BR, .skip = TU_SKIP_W | TU_SKIP_HO}},
    {"out and head outputs",
     {.Lq = 7, .H = 2, .Dh = 4, .causal = BR, .skip = TU_SKIP_W | TU_SKIP_M}},
    /* everything at once */
    {"everything, GQA, bottom-right",
     {.B = 2, .batched = 1, .Lq = 13, .Lk = 21, .cross = 1, .value_given = 1,
      .H = 4, .Hkv = 2, .Dh = 5, .Dv = 3, .Eq = 12, .Ek = 10, .Ev = 9,
      .Eo = 6, .proj = TU_ALLPROJ, .causal = BR, .key_lengths = 1,
      .lengths = {17, 21}, .allow_rank = 4, .allow_ones = TU_1H,
      .allow_p = 0.8, .bias_rank = 3, .has_wl = 1, .wl = 9,
      .alibi = ATTN_ALIBI_DEFAULT, .has_scale = 1, .scale = 0.4f,
      .has_softcap = 1, .softcap = 3.0f}},
    {"everything, MQA, top-left, rank 2",
     {.Lq = 21, .Lk = 13, .cross = 1, .value_given = 1, .H = 3, .Hkv = 1,
      .Dh = 7, .Dv = 2, .Eq = 8, .Ek = 10, .Ev = 9, .proj = TU_ALLPROJ,
      .causal = TL, .key_lengths = 1, .lengths = {10}, .allow_rank = 2,
      .allow_p = 0.9, .bias_rank = 4, .bias_ones = TU_1B, .has_wr = 1,
      .wr = 3, .alibi = ATTN_ALIBI_SLOPES, .has_softcap = 1,
      .softcap = 5.0f}},
    /* projections wider than ATTN__PROJ_COLS (1024) run in column groups:
     * Q in groups of 3 heads and 2, K and V of 3 and 2, the output in
     * 1024, 1024 and 52 columns */
    {"wide heads: every projection in column groups, partial last groups",
     {.B = 2, .batched = 1, .Lq = 13, .Lk = 21, .cross = 1, .value_given = 1,
      .H = 5, .Dh = 260, .Dv = 130, .Eq = 24, .Ek = 20, .Ev = 18,
      .Eo = 2100, .proj = TU_ALLPROJ, .causal = BR, .key_lengths = 1,
      .lengths = {21, 9}, .bias_rank = 3, .alibi = ATTN_ALIBI_DEFAULT}},
};
/* clang-format on */
#define N_FEATURE ((int)(sizeof feature_cases / sizeof feature_cases[0]))

/* Two ways of running each case: one thread with the best ISA, and three
 * threads with the portable kernels. */
static const attn_exec_t feature_execs[] = {
    {.threads = 1, .isa = ATTN_ISA_AUTO},
    {.threads = 3, .isa = ATTN_ISA_GENERIC},
};

static void check_case(const char *name, const tu_spec_t *s, uint64_t seed,
                       const attn_exec_t *execs, int n_exec) {
  char what[768], desc[512];
  tu_spec_describe(s, desc, sizeof desc);
  snprintf(what, sizeof what, "%s {%s}", name, desc);
  tu_case_t c;
  tu_case_build(&c, s, seed);
  int ran = 0;
  for (int e = 0; e < n_exec; e++) {
    /* ENOTSUP (printed as skipped) only for an ISA this CPU lacks */
    int rc = tu_check_vs_ref(&c.p, &execs[e], FWD_TOL, what);
    ck_assert_msg(rc == (tu_isa_runs(execs[e].isa) ? 0 : ATTN_ENOTSUP),
                  "%s: exec %d (isa %s) returned %d", what, e,
                  attn_isa_name(execs[e].isa), rc);
    ran += rc == 0;
  }
  ck_assert_msg(ran > 0, "%s: no exec ran on this CPU", what);
  tu_case_free(&c);
}

/* check_case for ready params: the best ISA with one thread, then the
 * portable kernels with three. */
static void check_case_params(const attn_params_t *p, const char *what) {
  int rc = tu_check_vs_ref(p, &feature_execs[0], FWD_TOL, what);
  ck_assert_int_eq(rc, 0);
  rc = tu_check_vs_ref(p, &feature_execs[1], FWD_TOL, what);
  ck_assert_int_eq(rc, 0);
}

START_TEST(test_feature) {
  check_case(feature_cases[_i].name, &feature_cases[_i].s, 1000 + (uint64_t)_i,
             feature_execs, 2);
}
END_TEST

/* ---- rope and the per-head norms ---------------------------------------- */

/* A feature case with rope, q_norm/k_norm and positions set on top: each
 * against the float64 reference. */
typedef struct rope_case {
  const char *name;
  tu_spec_t s;
  attn_rope_t rope;
  int norms;      /* 1: q_norm and k_norm, 2: q_norm only */
  int positions;  /* 0: default, 1: [L], 2: [B, L] */
  float norm_eps; /* 0: the default */
} rope_case_t;

#define HALF ATTN_ROPE_HALF
#define INTER ATTN_ROPE_INTERLEAVED
/* clang-format off */
static const rope_case_t rope_cases[] = {
    {"half, default positions, GQA, projections, causal",
     {.Lq = 9, .Lk = 14, .cross = 1, .value_given = 1, .H = 4, .Hkv = 2,
      .Dh = 8, .Eq = 12, .Ek = 12, .Ev = 12, .Eo = 12, .proj = TU_ALLPROJ,
      .causal = BR},
     {.style = HALF, .theta = 10000}, 0, 0, 0},
    {"interleaved, partial dims, [B, L] positions",
     {.B = 2, .batched = 1, .Lq = 7, .Lk = 11, .cross = 1, .H = 2, .Dh = 10,
      .Eq = 9, .Ek = 10, .proj = TU_QW | TU_KW | TU_QB | TU_KB},
     {.style = INTER, .theta = 500, .dims = 4}, 0, 2, 0},
    {"half, partial dims, [L] positions, linear scaling",
     {.B = 2, .batched = 1, .Lq = 5, .Lk = 5, .H = 3, .Dh = 6, .Eq = 12,
      .proj = TU_QW | TU_KW},
     {.style = HALF, .theta = 10000, .dims = 2,
      .scaling = ATTN_ROPE_SCALING_LINEAR, .factor = 4}, 0, 1, 0},
    {"llama3 scaling over all three bands",
     {.Lq = 12, .Lk = 12, .H = 2, .Hkv = 1, .Dh = 16, .Eq = 20,
      .proj = TU_QW | TU_KW | TU_VW, .causal = BR},
     {.style = HALF, .theta = 500000, .scaling = ATTN_ROPE_SCALING_LLAMA3,
      .factor = 8, .low_freq_factor = 1, .high_freq_factor = 4,
      .original_max_position = 64}, 0, 1, 0},
    {"q_norm and k_norm, rope, scale, pre-projected",
     {.Lq = 6, .Lk = 9, .cross = 1, .H = 2, .Dh = 8, .has_scale = 1,
      .scale = 0.7f},
     {.style = HALF, .theta = 10000}, 1, 0, 1e-3f},
    {"q_norm only, no rope, projections",
     {.Lq = 6, .Lk = 6, .H = 2, .Dh = 4, .Eq = 8, .proj = TU_QW | TU_QB},
     {0}, 2, 0, 0},
    {"rope with Lq > Lk (negative default query positions)",
     {.Lq = 11, .Lk = 4, .cross = 1, .H = 1, .Dh = 6, .causal = TL},
     {.style = INTER, .theta = 10000}, 0, 0, 0},
    {"wide heads in column groups (Q 3 + 3, K and V 1 + 1 + 1): norms, "
     "rope, GQA, every projection",
     {.B = 2, .batched = 1, .Lq = 9, .Lk = 14, .cross = 1, .value_given = 1,
      .H = 6, .Hkv = 3, .Dh = 300, .Dv = 520, .Eq = 40, .Ek = 40, .Ev = 40,
      .Eo = 1100, .proj = TU_ALLPROJ, .causal = BR},
     {.style = HALF, .theta = 10000}, 1, 2, 0},
    {"rope on every feature of a one-pair head, window and ALiBi",
     {.B = 2, .batched = 1, .Lq = 8, .Lk = 8, .H = 2, .Dh = 2, .has_wl = 1,
      .wl = 3, .alibi = ATTN_ALIBI_DEFAULT},
     {.style = HALF, .theta = 3}, 0, 0, 0},
};
/* clang-format on */
#undef HALF
#undef INTER
#define N_ROPE ((int)(sizeof rope_cases / sizeof rope_cases[0]))

/* Positions for rope_case `kind` of a [B, L] input: random in [0, 5000)
 * (kind 1: one row, [L]). A new array. */
static int64_t *rope_positions(tu_rng_t *r, int kind, int64_t B, int64_t L) {
  int64_t n = kind == 1 ? L : B * L;
  int64_t *x = malloc((size_t)n * sizeof *x);
  for (int64_t i = 0; i < n; i++)
    x[i] = tu_rng_below(r, 5000);
  return x;
}

START_TEST(test_rope) {
  const rope_case_t *rc = &rope_cases[_i];
  tu_case_t c;
  tu_case_build(&c, &rc->s, 3000 + (uint64_t)_i);
  tu_rng_t r;
  tu_rng_seed(&r, 77 + (uint64_t)_i);
  c.p.rope = rc->rope;
  float *qn = NULL, *kn = NULL;
  int64_t *pq = NULL, *pk = NULL;
  if (rc->norms) {
    qn = tu_rand_floats(&r, (size_t)c.Dh, 2.0f);
    c.p.q_norm = (attn_tensor_t){qn, 1, {c.Dh}};
    if (rc->norms == 1) {
      kn = tu_rand_floats(&r, (size_t)c.Dh, 2.0f);
      c.p.k_norm = (attn_tensor_t){kn, 1, {c.Dh}};
    }
  }
  if (rc->norm_eps != 0) {
    c.p.has_norm_eps = 1;
    c.p.norm_eps = rc->norm_eps;
  }
  if (rc->positions) {
    pq = rope_positions(&r, rc->positions, c.B, c.Lq);
    pk = rope_positions(&r, rc->positions, c.B, c.Lk);
    c.p.positions_query = rc->positions == 1
                              ? (attn_tensor_t){pq, 1, {c.Lq}}
                              : (attn_tensor_t){pq, 2, {c.B, c.Lq}};
    c.p.positions_key = rc->positions == 1
                            ? (attn_tensor_t){pk, 1, {c.Lk}}
                            : (attn_tensor_t){pk, 2, {c.B, c.Lk}};
  }
  check_case_params(&c.p, rc->name);
  free(qn), free(kn), free(pq), free(pk);
  tu_case_free(&c);
}
END_TEST

/* Runs p with one thread and the best ISA; the weights [H·Lq·Lk] into w. */
static void run_weights(attn_params_t *p, float *w) {
  attn_plan_t plan;
  attn_error_t e;
  p->want_weights = 1;
  ck_assert_msg(attn_plan_init(&plan, p, NULL, &e) == 0, "%s", e.message);
  void *ws = aligned_alloc(64, (plan.workspace_bytes + 63) / 64 * 64 + 64);
  float *out = malloc((size_t)plan.out_elems * sizeof *out);
  attn_outputs_t o = {.out = out, .weights = w};
  ck_assert_msg(attn_forward(&plan, &o, ws, plan.workspace_bytes, &e) == 0,
                "%s", e.message);
  free(out);
  free(ws);
}

/* Closed forms, independent of the reference. With one pair (Dh = 2), a
 * query (1, 0) at position m against keys (1, 0) and (0, 1) at 0 scores
 * cos m and sin m (times the scale): the weights are the softmax of those.
 * Rope depends on positions only through their differences: shifting
 * every position by the same amount leaves the weights as they were. And
 * position 0 everywhere is no rotation at all. */
START_TEST(test_rope_closed_forms) {
  const float q[2] = {1, 0}, k[4] = {1, 0, 0, 1};
  const int64_t m = 1 + _i * 997, zero[2] = {0, 0};
  attn_params_t p = {.query = {q, 2, {1, 2}},
                     .key = {k, 2, {2, 2}},
                     .num_heads = 1,
                     .has_scale = 1,
                     .scale = 1};
  p.rope = (attn_rope_t){.style = ATTN_ROPE_HALF, .theta = 10000};
  p.positions_query = (attn_tensor_t){&m, 1, {1}};
  p.positions_key = (attn_tensor_t){zero, 1, {2}};
  float w[2];
  run_weights(&p, w);
  double a = cos((double)m), b = sin((double)m);
  double w0 = 1.0 / (1.0 + exp(b - a)), w1 = 1.0 - w0;
  ck_assert_msg(fabs(w[0] - w0) < 1e-6 && fabs(w[1] - w1) < 1e-6,
                "m %lld: weights %g %g, want %g %g", (long long)m, w[0], w[1],
                w0, w1);

  tu_rng_t r;
  tu_rng_seed(&r, 900 + (uint64_t)_i);
  enum { L = 9, H = 2, D = 8 };
  float *x = tu_rand_floats(&r, L * H * D, 1.0f);
  int64_t pq[L], pk[L], shift = 12345 * (_i + 1);
  for (int i = 0; i < L; i++)
    pq[i] = pk[i] = tu_rng_below(&r, 1000);
  attn_params_t s = {.query = {x, 2, {L, H * D}}, .num_heads = H};
  s.rope = (attn_rope_t){
      .style = _i % 2 ? ATTN_ROPE_INTERLEAVED : ATTN_ROPE_HALF, .theta = 10000};
  s.positions_query = (attn_tensor_t){pq, 1, {L}};
  s.positions_key = (attn_tensor_t){pk, 1, {L}};
  float w_a[H * L * L], w_b[H * L * L], w_plain[H * L * L];
  run_weights(&s, w_a);
  for (int i = 0; i < L; i++)
    pq[i] += shift, pk[i] += shift;
  run_weights(&s, w_b);
  for (int i = 0; i < H * L * L; i++)
    ck_assert_msg(fabs(w_a[i] - w_b[i]) < 2e-5, "shift %lld: [%d] %g vs %g",
                  (long long)shift, i, w_a[i], w_b[i]);
  for (int i = 0; i < L; i++)
    pq[i] = pk[i] = 0;
  run_weights(&s, w_a);
  s.rope.style = ATTN_ROPE_NONE;
  s.positions_query.rank = s.positions_key.rank = 0;
  run_weights(&s, w_plain);
  for (int i = 0; i < H * L * L; i++)
    ck_assert(w_a[i] == w_plain[i]);
  free(x);
}
END_TEST

/* ---- tile edges ---------------------------------------------------------- */

/* Every (Lq, Lk) over sizes just off likely tile widths, with head sizes
 * 1..64 and each causal alignment, on each ISA. Lk mod 64 leaves the last
 * key block 1, 7, 20, 33 or 50 keys: a tail of every score-tile width
 * (kernel.c, scores: 1 to 3 vectors of 16 with AVX-512, 1 of 8 with
 * AVX2). Each case runs with the weights (the two-pass path) and without
 * (the online one). */
static const int64_t tile_L[] = {1, 7, 20, 33, 50, 65, 129};
static const int64_t tile_D[] = {1, 3, 17, 64};
#define N_TILE_L ((int)(sizeof tile_L / sizeof tile_L[0]))
#define N_TILE_SWEEP (N_TILE_L * N_TILE_L)
static const attn_exec_t tile_execs[] = {
    {.threads = 1, .isa = ATTN_ISA_AVX512},
    {.threads = 1, .isa = ATTN_ISA_AVX2},
    {.threads = 3, .isa = ATTN_ISA_GENERIC},
};

START_TEST(test_tile_sweep) {
  tu_spec_t s = {0};
  s.B = 1 + _i % 2;
  s.batched = s.B > 1;
  s.Lq = tile_L[_i / N_TILE_L];
  s.Lk = tile_L[_i % N_TILE_L];
  s.cross = 1;
  s.value_given = 1;
  s.H = 2;
  s.Hkv = _i % 2 ? 1 : 0;
  s.Dh = tile_D[_i % 4];
  s.Dv = tile_D[(_i + 1) % 4];
  s.causal = (attn_causal_t)(_i % 3);
  char name[64];
  snprintf(name, sizeof name, "tile sweep %d", _i);
  check_case(name, &s, 2000 + (uint64_t)_i, tile_execs, 3);
  /* without the weights: the online path, which computes the last block
   * only up to its last key's vector */
  s.skip = TU_SKIP_W | TU_SKIP_M;
  snprintf(name, sizeof name, "tile sweep %d online", _i);
  check_case(name, &s, 2000 + (uint64_t)_i, tile_execs, 3);
}
END_TEST

/* Whole tiles with nothing to attend, and tiles cut by masks. */
/* clang-format off */
static const fcase_t masked_tile_cases[] = {
    {"causal bottom-right 130x130",
     {.Lq = 130, .H = 2, .Dh = 16, .causal = BR}},
    {"causal top-left 130x70",
     {.Lq = 130, .Lk = 70, .cross = 1, .H = 2, .Dh = 16, .causal = TL}},
    {"causal bottom-right 130x40 (90 dead rows)",
     {.Lq = 130, .Lk = 40, .cross = 1, .H = 2, .Dh = 8, .causal = BR}},
    {"causal bottom-right 40x130",
     {.Lq = 40, .Lk = 130, .cross = 1, .H = 2, .Dh = 8, .causal = BR}},
    {"narrow window 3/0 at 130",
     {.Lq = 130, .H = 2, .Dh = 16, .has_wl = 1, .wl = 3, .has_wr = 1,
      .wr = 0}},
    {"window 0/2 at 130", {.Lq = 130, .H = 1, .Dh = 16, .has_wl = 1, .wl = 0,
                           .has_wr = 1, .wr = 2}},
    {"key lengths {1, 130, 64}",
     {.B = 3, .batched = 1, .Lq = 33, .Lk = 130, .cross = 1, .H = 2, .Dh = 8,
      .key_lengths = 1, .lengths = {1, 130, 64}}},
    {"allow [1, Lk] with long dead runs",
     {.Lq = 65, .Lk = 130, .cross = 1, .H = 2, .Dh = 8, .allow_rank = 2,
      .allow_ones = TU_1Q, .allow_p = 0.05}},
};
/* clang-format on */
#define N_MASKED_TILE                                                          \
  ((int)(sizeof masked_tile_cases / sizeof masked_tile_cases[0]))

START_TEST(test_masked_tiles) {
  check_case(masked_tile_cases[_i].name, &masked_tile_cases[_i].s,
             3000 + (uint64_t)_i, feature_execs, 2);
}
END_TEST

/* ---- thread counts and ISAs ---------------------------------------------- */

/* _i: threads 1..4 (_i % 4) x ISA auto/generic/avx2/avx512 (_i / 4). An ISA
 * this CPU lacks is ATTN_ENOTSUP: that combination is skipped, with a line
 * on stderr, and test_isa_support asserts the refusal. */
START_TEST(test_exec_sweep) {
  static const attn_isa_t isas[] = {ATTN_ISA_AUTO, ATTN_ISA_GENERIC,
                                    ATTN_ISA_AVX2, ATTN_ISA_AVX512};
  const tu_spec_t s = {.B = 3,
                       .batched = 1,
                       .Lq = 37,
                       .Lk = 70,
                       .cross = 1,
                       .value_given = 1,
                       .H = 4,
                       .Hkv = 2,
                       .Dh = 17,
                       .Dv = 9,
                       .Eq = 40,
                       .Ek = 24,
                       .Ev = 20,
                       .Eo = 12,
                       .proj = TU_ALLPROJ,
                       .causal = BR,
                       .key_lengths = 1,
                       .lengths = {70, 0, 33},
                       .bias_rank = 3,
                       .alibi = ATTN_ALIBI_DEFAULT,
                       .has_softcap = 1,
                       .softcap = 4.0f};
  attn_exec_t ex = {.threads = 1 + _i % 4, .isa = isas[_i / 4]};
  char what[64];
  snprintf(what, sizeof what, "exec sweep threads %d isa %s", ex.threads,
           attn_isa_name(ex.isa));
  tu_case_t c;
  tu_case_build(&c, &s, 4000);
  int rc = tu_check_vs_ref(&c.p, &ex, FWD_TOL, what);
  /* A named ISA may be missing (then skipped, and said); generic and auto
   * never are. */
  ck_assert_msg(rc == (tu_isa_runs(ex.isa) ? 0 : ATTN_ENOTSUP),
                "%s: returned %d", what, rc);
  tu_case_free(&c);
}
END_TEST

/* A batch item's rows do not depend on the items beside them: B items of
 * one query row each (a batch of decode steps), as one call and as B calls
 * of one, give the same output bits, for B up to the short side that the
 * projections compute as dots (32; forward.c, gemm_nt), with sizes that
 * leave a tail of every vector width (E 36, Dh 12), on each ISA. The same
 * holds of the steps of KV-cache sessions (check_sessions,
 * test_batched_equals_alone). */
START_TEST(test_rows_independent) {
  static const attn_isa_t isas[] = {ATTN_ISA_GENERIC, ATTN_ISA_AVX2,
                                    ATTN_ISA_AVX512};
  static const int64_t sizes[] = {2, 3, 7, 13, 32};
  attn_isa_t isa = isas[_i % 3];
  int64_t B = sizes[_i / 3];
  if (!tu_isa_runs(isa)) {
    tu_isa_skipped(isa, "rows independent");
    return;
  }
  const tu_spec_t s = {.B = B,
                       .batched = 1,
                       .Lq = 1,
                       .Lk = 5,
                       .cross = 1,
                       .value_given = 1,
                       .H = 3,
                       .Dh = 12,
                       .Dv = 12,
                       .Eq = 36,
                       .Ek = 36,
                       .Ev = 36,
                       .Eo = 36,
                       .proj = TU_ALLPROJ,
                       .causal = BR};
  tu_case_t c;
  tu_case_build(&c, &s, 5000 + (uint64_t)_i);
  attn_exec_t ex = {.threads = 1, .isa = isa};
  tu_run_t all;
  ck_assert_int_eq(tu_run(&all, &c.p, &ex), 0);
  for (int64_t b = 0; b < B; b++) {
    attn_params_t one = c.p;
    one.query.data = c.query + b * c.Eq;
    one.key.data = c.key + b * c.Lk * c.Ek;
    one.value.data = c.value + b * c.Lk * c.Ev;
    one.query.dim[0] = one.key.dim[0] = one.value.dim[0] = 1;
    tu_run_t r;
    ck_assert_int_eq(tu_run(&r, &one, &ex), 0);
    ck_assert_msg(memcmp(r.o.out, all.o.out + b * c.Eo,
                         (size_t)c.Eo * sizeof(float)) == 0,
                  "isa %s, batch of %lld: item %lld alone differs",
                  attn_isa_name(isa), (long long)B, (long long)b);
    tu_run_free(&r);
  }
  tu_run_free(&all);
  tu_case_free(&c);
}
END_TEST

/* The ISA this CPU runs best, read from the kernel's account of its flags
 * (/proc/cpuinfo) rather than from cpuid as the core reads them, by the
 * rule of attn.h's attn_isa_t: AVX-512 F/BW/DQ/VL with FMA, else AVX2 with
 * FMA. */
static int has_flag(const char *flags, const char *name) {
  size_t n = strlen(name);
  for (const char *p = flags; (p = strstr(p, name)) != NULL; p += n)
    if ((p == flags || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\n' || !p[n]))
      return 1;
  return 0;
}

static attn_isa_t cpu_flags_isa(void) {
#if !defined(__x86_64__)
  /* avx2 and avx512 are x86-64's; another CPU (arm64, whose cpuinfo says
   * Features, not flags) runs the generic kernel alone. */
  return ATTN_ISA_GENERIC;
#endif
  FILE *f = fopen("/proc/cpuinfo", "r");
  char line[8192];
  int found = 0;
  while (f && !found && fgets(line, sizeof line, f))
    found = strncmp(line, "flags", 5) == 0;
  if (f)
    fclose(f);
  ck_assert_msg(found, "no flags line in /proc/cpuinfo");
  if (has_flag(line, "avx512f") && has_flag(line, "avx512bw") &&
      has_flag(line, "avx512dq") && has_flag(line, "avx512vl") &&
      has_flag(line, "fma"))
    return ATTN_ISA_AVX512;
  if (has_flag(line, "avx2") && has_flag(line, "fma"))
    return ATTN_ISA_AVX2;
  return ATTN_ISA_GENERIC;
}

/* _i: generic, avx2, avx512. Whatever this CPU is, each ISA asserts
 * something: the backend detects what the CPU's flags say; an ISA it runs
 * plans as itself; one it lacks is refused with ATTN_ENOTSUP naming "isa"
 * and the ISA, and is reported as skipped. With ATTND_REQUIRE_ISA set, the
 * CPU must run that ISA (tu_isa_required). */
START_TEST(test_isa_support) {
  static const attn_isa_t isas[] = {ATTN_ISA_GENERIC, ATTN_ISA_AVX2,
                                    ATTN_ISA_AVX512};
  const attn_isa_t isa = isas[_i];
  attn_backend_t b;
  attn_backend_info(&b);
  ck_assert_msg(b.isa == cpu_flags_isa(),
                "attn_backend_info says %s, the CPU's flags say %s",
                attn_isa_name(b.isa), attn_isa_name(cpu_flags_isa()));
  ck_assert_msg(b.isa >= tu_isa_required(),
                "ATTND_REQUIRE_ISA=%s, but this CPU's best is %s",
                attn_isa_name(tu_isa_required()), attn_isa_name(b.isa));

  static const float q[2 * 4] = {1, 2, 3, 4, 5, 6, 7, 8}; /* [Lq=2, 4] */
  attn_params_t p = {0};
  p.query = tu_t2(q, 2, 4);
  p.num_heads = 2;
  const attn_exec_t ex = {.threads = 1, .isa = isa};
  attn_plan_t plan;
  attn_error_t err;
  memset(&err, 0, sizeof err);
  int rc = attn_plan_init(&plan, &p, &ex, &err);
  if (isa <= b.isa) {
    ck_assert_msg(rc == 0, "isa %s on a %s CPU: %d %s: %s", attn_isa_name(isa),
                  attn_isa_name(b.isa), rc, attn_errname(rc), err.message);
    ck_assert_int_eq(plan.isa, isa);
    ck_assert(tu_isa_runs(isa));
  } else {
    ck_assert_msg(rc == ATTN_ENOTSUP, "isa %s on a %s CPU: %d %s",
                  attn_isa_name(isa), attn_isa_name(b.isa), rc,
                  attn_errname(rc));
    ck_assert_int_eq(err.code, ATTN_ENOTSUP);
    ck_assert_str_eq(err.field, "isa");
    ck_assert_msg(strstr(err.message, attn_isa_name(isa)) != NULL,
                  "message '%s' does not name %s", err.message,
                  attn_isa_name(isa));
    ck_assert(!tu_isa_runs(isa));
    tu_isa_skipped(isa, "every case run with it (exec sweep, random)");
  }
}
END_TEST

/* ---- random specs -------------------------------------------------------- */

#define N_FUZZ 300

START_TEST(test_random) {
  static const attn_isa_t isas[] = {ATTN_ISA_AUTO, ATTN_ISA_GENERIC,
                                    ATTN_ISA_AVX2, ATTN_ISA_AVX512};
  tu_rng_t r;
  tu_rng_seed(&r, 5000 + (uint64_t)_i);
  tu_spec_t s;
  tu_spec_random(&s, &r);
  attn_exec_t ex[2] = {
      {.threads = 1 + (int)tu_rng_below(&r, 4),
       .isa = isas[tu_rng_below(&r, 4)]},
      {.threads = 1, .isa = ATTN_ISA_GENERIC},
  };
  char name[32];
  snprintf(name, sizeof name, "random %d", _i);
  check_case(name, &s, 6000 + (uint64_t)_i, ex, 2);
}
END_TEST

/* ---- one larger case ----------------------------------------------------- */

START_TEST(test_large) {
  const tu_spec_t s = {.B = 1,
                       .batched = 1,
                       .Lq = 257,
                       .H = 4,
                       .Dh = 32,
                       .Eq = 128,
                       .Eo = 128,
                       .proj = TU_ALLPROJ,
                       .causal = BR};
  const attn_exec_t ex = {.threads = 2, .isa = ATTN_ISA_AUTO};
  check_case("large B=1 L=257 E=128 H=4 causal", &s, 7000, &ex, 1);
}
END_TEST

/* ---- workspace in proportion to the tensors --------------------------------
 *
 * attn_plan_init's workspace must follow the tensors of the call, for
 * every shape: at most WS_FACTOR times the bytes of its inputs, weights
 * and outputs, plus WS_PER_THREAD for each thread (a thread's tiles of
 * scores and running sums). A layout padded to whole tiles (keys to 64, a
 * unit's scratch to 64 query rows, for every thread) fails it: it planned
 * 275 times the input for one query row of one head of 4M features, and
 * 1121 times for one row of 512 heads of one feature. Each shape that is
 * small enough also runs against the reference, with 1 and 3 threads. */
#define WS_FACTOR 4
#define WS_PER_THREAD (64 << 10)

static const struct ws_shape {
  const char *name;
  int64_t B, Lq, Lk, H, Hkv, Dh, Dv, E; /* E > 0: all projections, E wide */
  int cross, weights, threads;
} ws_shapes[] = {
    {"one row, one head of 4M features", 1, 1, 1, 1, 1, 1 << 22, 1 << 22, 0, 0,
     0, 1},
    {"one row, 1M features, 4 threads", 1, 1, 1, 1, 1, 1 << 20, 1 << 20, 0, 0,
     0, 4},
    {"decode step: Lq 1, Lk 512, 8 heads", 1, 1, 512, 8, 8, 64, 64, 0, 1, 0, 1},
    {"one key: Lq 512, Lk 1", 1, 512, 1, 8, 8, 64, 64, 0, 1, 0, 4},
    {"512 heads of 1 feature", 1, 1, 1, 512, 512, 1, 1, 0, 0, 0, 1},
    {"128 heads of 3, Lq = Lk = 64", 1, 64, 64, 128, 128, 3, 3, 0, 0, 0, 2},
    {"GQA heads of 2, values of 5", 2, 9, 7, 8, 2, 2, 5, 0, 1, 0, 3},
    {"B 4096 of one token", 4096, 1, 1, 2, 2, 8, 8, 0, 0, 0, 4},
    {"B 256, L 2, heads of 2", 256, 2, 2, 4, 4, 2, 2, 0, 1, 0, 2},
    {"weights returned, Lk 100", 1, 100, 100, 4, 4, 16, 16, 0, 1, 1, 2},
    {"projections, one row, E 512", 1, 1, 1, 8, 8, 64, 64, 512, 0, 0, 1},
    {"projections, 64 rows, E 512", 1, 64, 64, 8, 8, 64, 64, 512, 0, 0, 1},
    {"square 64, 8 heads of 64", 1, 64, 64, 8, 8, 64, 64, 0, 0, 0, 1},
};
#define N_WS_SHAPES ((int)(sizeof ws_shapes / sizeof ws_shapes[0]))

START_TEST(test_workspace_bounded) {
  const struct ws_shape *w = &ws_shapes[_i];
  static const float dummy[1] = {0}; /* planning reads no tensor's data */
  const int64_t B = w->B, E = w->E;
  const int64_t Eq = E ? E : w->H * w->Dh, Ek = E ? E : w->Hkv * w->Dh,
                Ev = E ? E : w->Hkv * w->Dv;
  attn_params_t p = {0};
  p.query = tu_t3(dummy, B, w->Lq, Eq);
  double bytes = (double)(B * w->Lq * Eq);
  if (w->cross) {
    p.key = tu_t3(dummy, B, w->Lk, Ek);
    p.value = tu_t3(dummy, B, w->Lk, Ev);
    bytes += (double)(B * w->Lk * (Ek + Ev));
  }
  if (E) {
    p.q_weight = tu_t2(dummy, w->H * w->Dh, E);
    p.k_weight = tu_t2(dummy, w->Hkv * w->Dh, E);
    p.v_weight = tu_t2(dummy, w->Hkv * w->Dv, E);
    p.o_weight = tu_t2(dummy, E, w->H * w->Dv);
    bytes +=
        (double)(E * (w->H * w->Dh + w->Hkv * (w->Dh + w->Dv) + w->H * w->Dv));
  }
  p.num_heads = w->H;
  p.num_kv_heads = w->Hkv;
  p.want_weights = w->weights;
  attn_exec_t ex = {.threads = w->threads};
  attn_plan_t plan;
  attn_error_t err;
  ck_assert_msg(attn_plan_init(&plan, &p, &ex, &err) == 0, "%s: %s", w->name,
                err.message);
  bytes += (double)plan.out_elems + (w->weights ? plan.weights_elems : 0);
  bytes *= sizeof(float);
  double bound = WS_FACTOR * bytes + (double)WS_PER_THREAD * w->threads;
  ck_assert_msg((double)plan.workspace_bytes <= bound,
                "%s: workspace of %zu bytes, %.1f times the tensors' %.0f; "
                "at most %d times them plus %d per thread",
                w->name, plan.workspace_bytes,
                (double)plan.workspace_bytes / bytes, bytes, WS_FACTOR,
                WS_PER_THREAD);

  if (bytes > (64 << 20) || B * w->H * w->Lq * w->Lk * (w->Dh + w->Dv) > 1e8)
    return; /* the reference would take too long */
  tu_spec_t s = {.B = B,
                 .batched = 1,
                 .Lq = w->Lq,
                 .Lk = w->Lk,
                 .H = w->H,
                 .Hkv = w->Hkv,
                 .Dh = w->Dh,
                 .Dv = w->Dv,
                 .Eq = Eq,
                 .Ek = Ek,
                 .Ev = Ev,
                 .Eo = E ? E : w->H * w->Dv,
                 .cross = w->cross || w->Lk != w->Lq,
                 .value_given = w->cross || w->Lk != w->Lq || w->Dv != w->Dh,
                 .proj = E ? TU_ALLPROJ : 0};
  check_case(w->name, &s, 31 + (uint64_t)_i, feature_execs, 2);
}
END_TEST

/* ---- projection chunks ----------------------------------------------------
 */

/* Projections run in row chunks of 256 to 1024 rows chosen from the shape
 * (core/forward.c: proj_rows); these shapes land on 1024 with a one-row
 * tail over two batch items, and on 512 with a 511-row tail. */
START_TEST(test_proj_chunks) {
  static const struct { int64_t B, L; } shapes[] = {{2, 1025}, {1, 2047}};
  tu_spec_t s = {.B = shapes[_i].B,
                 .batched = 1,
                 .Lq = shapes[_i].L,
                 .H = 2,
                 .Dh = 8,
                 .Eq = 16,
                 .Eo = 16,
                 .proj = TU_ALLPROJ,
                 .causal = BR};
  const attn_exec_t ex[2] = {{.threads = 2, .isa = ATTN_ISA_AUTO},
                             {.threads = 1, .isa = ATTN_ISA_AUTO}};
  char name[64];
  snprintf(name, sizeof name, "projection chunks B=%lld L=%lld", (long long)s.B,
           (long long)s.Lq);
  check_case(name, &s, 7100 + (uint64_t)_i, ex, 2);
}
END_TEST

/* ---- the online softmax's running max ------------------------------------ */

/* Scores that climb (or fall) steeply from key block to key block: a row's
 * max must be raised many times in the middle of a row, by far more than
 * the slack the online softmax allows itself (e^8), with its output and
 * sums rescaled each time. Loop index: ISA (auto, generic) x direction x
 * causal. */
START_TEST(test_running_max) {
  const int64_t Lq = 70, Lk = 300, Dh = 8, H = 2;
  int falling = _i & 1, causal = (_i >> 1) & 1;
  attn_isa_t isa = (_i >> 2) ? ATTN_ISA_GENERIC : ATTN_ISA_AUTO;
  tu_rng_t r;
  tu_rng_seed(&r, 9100 + (uint64_t)_i);
  float *q = tu_fenced_alloc(sizeof(float) * (size_t)(Lq * H * Dh));
  float *k = tu_fenced_alloc(sizeof(float) * (size_t)(Lk * H * Dh));
  float *v = tu_rand_floats(&r, (size_t)(Lk * H * Dh), 1.0f);
  /* q·k_j = (1 + small noise)·slope·j: a climb of ~40 per key block of 64 */
  for (int64_t i = 0; i < Lq * H * Dh; i++)
    q[i] = 1.0f + 0.05f * (float)tu_rng_sym(&r);
  for (int64_t j = 0; j < Lk; j++)
    for (int64_t d = 0; d < H * Dh; d++)
      k[j * H * Dh + d] = (float)(falling ? Lk - j : j) * 0.25f / (float)Dh *
                          sqrtf((float)Dh) *
                          (1.0f + 0.05f * (float)tu_rng_sym(&r));
  attn_params_t p = {
      .query = tu_t2(q, Lq, H * Dh),
      .key = tu_t2(k, Lk, H * Dh),
      .value = tu_t2(v, Lk, H * Dh),
      .num_heads = H,
      .causal = causal ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_NONE,
      .want_head_outputs = 1,
  };
  const attn_exec_t ex = {.threads = 1, .isa = isa};
  ck_assert_int_eq(tu_check_vs_ref(&p, &ex, 1e-5, "running max"), 0);
  tu_fenced_free(q);
  tu_fenced_free(k);
  free(v);
}
END_TEST

/* ---- default ALiBi slopes ------------------------------------------------ */

/* H = 1..40 against the reference rule, to float rounding. */
START_TEST(test_alibi_default_slopes_rule) {
  const int64_t H = 1 + _i;
  float got[40];
  double want[40];
  attn_alibi_default_slopes(H, got);
  ref_alibi_slopes(H, want);
  for (int64_t h = 0; h < H; h++)
    ck_assert_msg(fabs((double)got[h] - want[h]) <= 1e-6 * want[h],
                  "H=%lld slope %lld: got %.9g, expected %.9g", (long long)H,
                  (long long)h, (double)got[h], want[h]);
}
END_TEST

/* Values written out, from the ALiBi reference code. */
START_TEST(test_alibi_default_slopes_values) {
  float s[16];
  /* H = 8: 1/2, 1/4, ..., 1/256 (exact in float). */
  attn_alibi_default_slopes(8, s);
  for (int h = 0; h < 8; h++)
    ck_assert_float_eq(s[h], ldexpf(1.0f, -(h + 1)));
  /* H = 6: rule(4) = 2^-2, 2^-4, 2^-6, 2^-8, then rule(8)[0::2][:2]. */
  attn_alibi_default_slopes(6, s);
  const float h6[6] = {0.25f, 0.0625f, 0.015625f, 0.00390625f, 0.5f, 0.125f};
  for (int h = 0; h < 6; h++)
    ck_assert_float_eq(s[h], h6[h]);
  /* H = 12: rule(8), then rule(16)[0::2][:4] = 2^-0.5, 2^-1.5, ... */
  attn_alibi_default_slopes(12, s);
  for (int h = 0; h < 8; h++)
    ck_assert_float_eq(s[h], ldexpf(1.0f, -(h + 1)));
  for (int k = 0; k < 4; k++)
    ck_assert_double_eq_tol(s[8 + k], pow(2.0, -0.5 - k), 1e-7);
  /* H = 1: 2^-8. H = 2: 2^-4, 2^-8. H = 3: 2^-4, 2^-8, then 2^-2. */
  attn_alibi_default_slopes(1, s);
  ck_assert_float_eq(s[0], 0.00390625f);
  attn_alibi_default_slopes(3, s);
  ck_assert_float_eq(s[0], 0.0625f);
  ck_assert_float_eq(s[1], 0.00390625f);
  ck_assert_float_eq(s[2], 0.25f);
}
END_TEST

/* ---- numbers at float32's edge (issue 11, defect 4) ---------------------- */

/* Finite inputs whose scores, sums or products leave float32's range. Each
 * must agree with the float64 reference, with and without the weights
 * (the two kernel paths), on the best ISA and on the portable kernels with
 * three threads: no NaN, no infinity, no wrong zero. Query [Lq, 2], key
 * and value [Lk, 2] (Lk 0: self-attention), one head; a constant `bias`
 * and an ALiBi `slope` when nonzero. */
typedef struct edge_case {
  const char *name;
  int64_t Lq, Lk;
  float q[6], k[6], v[6]; /* k, v: when has_k, has_v */
  int has_k, has_v;
  float scale, softcap, slope; /* 0: none */
  float bias[3];               /* [1, Lk] when has_bias */
  int has_bias;
  attn_causal_t causal;
} edge_case_t;

#define FMAX 3.40282347e38f

/* clang-format off */
static const edge_case_t edge_cases[] = {
    /* q·k = 2e60: every score is +inf in float32; equal, so weights 1/2 */
    {.name = "query and key of 1e30", .Lq = 2, .Lk = 2,
     .q = {1e30f, 1e30f, 1e30f, 1e30f}, .k = {1e30f, 1e30f, 1e30f, 1e30f},
     .has_k = 1},
    /* self-attention, scores of 5e40 and 0: one-hot on the diagonal */
    {.name = "query of 1e20", .Lq = 2, .q = {1e20f, 2e20f, 2e20f, -1e20f}},
    /* Q = 3e38·q is finite, the scores are not */
    {.name = "scale 3e38, Q finite", .Lq = 2, .q = {0.5f, 1, 1, 0.25f},
     .scale = 3e38f},
    /* Q = 3e38·q overflows: laid out unscaled, the scale applied later */
    {.name = "scale 3e38, Q overflows", .Lq = 2, .q = {1, 2, 3, 4},
     .scale = 3e38f},
    {.name = "scale -3e38", .Lq = 3, .q = {1, 2, 3, 4, 5, 6},
     .scale = -3e38f},
    /* the farthest key wins: s + 3e38·|i - j| */
    {.name = "ALiBi slope -3e38", .Lq = 3, .q = {1, 2, 3, 4, 5, 6},
     .slope = -3e38f},
    {.name = "ALiBi slope 3e38", .Lq = 3, .q = {1, 2, 3, 4, 5, 6},
     .slope = 3e38f},
    /* equal scores: O averages values whose sum overflows; causal, so row
     * 0 (one key) does not overflow and rows 1 and 2 do */
    {.name = "values of 3e38 averaged", .Lq = 3, .Lk = 3, .has_k = 1,
     .has_v = 1, .v = {3e38f, 3e38f, 3e38f, -3e38f, 1e38f, 3e38f},
     .causal = ATTN_CAUSAL_BOTTOM_RIGHT},
    {.name = "values of FLT_MAX averaged", .Lq = 1, .Lk = 3, .has_k = 1,
     .has_v = 1, .v = {FMAX, -FMAX, FMAX, -FMAX, FMAX, -FMAX}},
    /* 1/softcap is inf in float32: 0·inf would be NaN */
    {.name = "softcap 1e-45", .Lq = 2, .q = {0, 1, 1, 0}, .softcap = 1e-45f},
    {.name = "softcap 1e-45, scores of 1e60", .Lq = 2, .Lk = 2,
     .q = {1e30f, -1e30f, 1e30f, 1e30f}, .k = {1e30f, 1e30f, -1e30f, 1e30f},
     .has_k = 1, .softcap = 1e-45f},
    {.name = "softcap 5, scores of 1e60", .Lq = 2, .Lk = 2,
     .q = {1e30f, -1e30f, 1e30f, 1e30f}, .k = {1e30f, 1e30f, -1e30f, 1e30f},
     .has_k = 1, .softcap = 5},
    /* score + bias overflows */
    {.name = "bias of ±3e38 over scores of 3e38", .Lq = 2,
     .q = {0.5f, 1, 1, 0.25f}, .scale = 3e38f, .bias = {3e38f, -3e38f},
     .has_bias = 1},
    {.name = "bias of 3e38", .Lq = 3, .q = {1, 2, 3, 4, 5, 6},
     .bias = {3e38f, 3e38f, -3e38f}, .has_bias = 1},
    /* -inf is a mask, and stays on the fast path */
    {.name = "bias of -inf", .Lq = 2, .q = {1, 2, 3, 4},
     .bias = {0, -INFINITY}, .has_bias = 1},
    /* every key masked by the bias alone: weights and output 0, on the
     * fast path, under a softcap, and on the exact path */
    {.name = "bias of -inf on every key", .Lq = 2, .q = {1, 2, 3, 4},
     .bias = {-INFINITY, -INFINITY}, .has_bias = 1},
    {.name = "bias of -inf on every key, softcap 2", .Lq = 2,
     .q = {1, 2, 3, 4}, .bias = {-INFINITY, -INFINITY}, .has_bias = 1,
     .softcap = 2},
    {.name = "bias of -inf on every key, scores past float32", .Lq = 2,
     .q = {1, 2, 3, 4}, .scale = 3e38f, .bias = {-INFINITY, -INFINITY},
     .has_bias = 1},
};
/* clang-format on */
#define N_EDGE ((int)(sizeof edge_cases / sizeof edge_cases[0]))

/* The params of an edge case; `slope` points at its one ALiBi slope. */
static attn_params_t edge_params(const edge_case_t *e, float *slope) {
  attn_params_t p = {0};
  int64_t Lk = e->has_k || e->has_v ? e->Lk : e->Lq;
  p.query = tu_t2(e->q, e->Lq, 2);
  if (e->has_k)
    p.key = tu_t2(e->k, Lk, 2);
  if (e->has_v)
    p.value = tu_t2(e->v, Lk, 2);
  p.num_heads = 1;
  p.causal = e->causal;
  p.has_scale = e->scale != 0;
  p.scale = e->scale;
  p.has_softcap = e->softcap != 0;
  p.softcap = e->softcap;
  if (e->slope != 0) {
    *slope = e->slope;
    p.alibi = ATTN_ALIBI_SLOPES;
    p.alibi_slopes = tu_t1(slope, 1);
  }
  if (e->has_bias)
    p.bias = tu_t2(e->bias, 1, Lk);
  return p;
}

/* _i: case × (weights or not). Failed before the fix with NaN, zeros or
 * infinities in out and weights. */
START_TEST(test_edge_values) {
  const edge_case_t *e = &edge_cases[_i / 2];
  float slope;
  attn_params_t p = edge_params(e, &slope);
  p.want_weights = p.want_head_outputs = _i % 2;
  char what[128];
  snprintf(what, sizeof what, "%s (%s)", e->name,
           p.want_weights ? "two-pass" : "online");
  check_case_params(&p, what);
}
END_TEST

/* Random problems of several key and query blocks, with every mask and
 * score term, whose query and key are multiplied by 1e25 (scores near
 * 1e50, all beyond float32): the exact path, row by row, against the
 * reference. A softcap keeps some softmax rows from being one-hot. _i:
 * seed; odd ones ask for the weights. */
START_TEST(test_edge_sweep) {
  tu_spec_t s = {.B = 2,
                 .batched = 1,
                 .Lq = 70,
                 .Lk = 131,
                 .cross = 1,
                 .value_given = 1,
                 .H = 2,
                 .Hkv = 1,
                 .Dh = 5,
                 .Dv = 3,
                 .causal = (attn_causal_t)(_i % 3),
                 .key_lengths = 1,
                 .lengths = {131, 100},
                 .allow_rank = _i % 2 ? 4 : 0,
                 .allow_p = 0.9,
                 .bias_rank = 2,
                 .has_wl = 1,
                 .wl = 90,
                 .alibi = _i % 2 ? ATTN_ALIBI_DEFAULT : ATTN_ALIBI_NONE,
                 .has_softcap = _i >= 2,
                 .softcap = 7.0f,
                 .skip = _i % 2 ? 0 : TU_SKIP_W | TU_SKIP_M | TU_SKIP_HO};
  tu_case_t c;
  tu_case_build(&c, &s, 9300 + (uint64_t)_i);
  for (int64_t x = 0; x < c.B * c.Lq * c.Eq; x++)
    c.query[x] *= 1e25f;
  for (int64_t x = 0; x < c.B * c.Lk * c.Ek; x++)
    c.key[x] *= 1e25f;
  char what[64];
  snprintf(what, sizeof what, "edge sweep %d", _i);
  check_case_params(&c.p, what);
  tu_case_free(&c);
}
END_TEST

/* Results that float32 cannot hold: ATTN_ENUMERIC naming the stage, the
 * input and the first position, the same with one thread or three. */
typedef struct numeric_err {
  const char *name;
  int64_t Lq, Lk;
  float q[4], k[4], v[4]; /* [Lq or Lk, 2] */
  int has_kv;
  float w[4];    /* a [2, 2] weight */
  float bias[2]; /* o_bias, or the score bias [1, Lk] */
  enum { W_Q, W_K, W_V, W_O, B_O, B_SCORE, N_Q } where;
  const char *field, *stage, *at;
  const char *also; /* more the message must hold, or NULL */
} numeric_err_t;

/* clang-format off */
static const numeric_err_t numeric_errs[] = {
    {.name = "Q projection", .Lq = 2, .q = {1, 1, 1e30f, 1e30f},
     .w = {1e30f, 1e30f, 1, 1}, .where = W_Q, .field = "query",
     .stage = "projection", .at = "batch 0, query row 1"},
    {.name = "K projection", .Lq = 1, .Lk = 2, .q = {1, 1},
     .k = {1, 1, 1e30f, -1e30f}, .v = {1, 1, 1, 1}, .has_kv = 1,
     .w = {1e30f, 0, 0, 1}, .where = W_K, .field = "key",
     .stage = "projection", .at = "batch 0, key row 1"},
    {.name = "V projection", .Lq = 1, .Lk = 2, .q = {1, 1},
     .k = {1, 1, 1, 1}, .v = {3e38f, 3e38f, 0, 0}, .has_kv = 1,
     .w = {1, 1, 0, 0}, .where = W_V, .field = "value",
     .stage = "projection", .at = "batch 0, key row 0"},
    {.name = "output projection", .Lq = 2, .q = {3e38f, 3e38f, 1, 1},
     .w = {3e38f, 3e38f, 1, 1}, .where = W_O, .field = "o_weight",
     .stage = "output projection", .at = "batch 0, query row 0"},
    {.name = "output bias", .Lq = 2, .q = {-1, -1, 3e38f, 3e38f},
     .bias = {3e38f, 0}, .where = B_O, .field = "o_bias",
     .stage = "output projection", .at = "batch 0, query row 1"},
    {.name = "bias of +inf", .Lq = 2, .q = {1, 1, 1, 1},
     .bias = {0, INFINITY}, .where = B_SCORE, .field = "bias",
     .stage = "scores", .at = "batch 0, head 0, query row 0"},
    {.name = "bias of NaN", .Lq = 2, .q = {1, 1, 1, 1}, .bias = {NAN, 0},
     .where = B_SCORE, .field = "bias", .stage = "scores",
     .at = "batch 0, head 0, query row 0"},
    {.name = "q_norm of zeros, norm_eps 0", .Lq = 2, .q = {1, 2, 0, 0},
     .w = {1, 1}, .where = N_Q, .field = "query", .stage = "projection",
     .at = "batch 0, query row 1", .also = "all zeros, which norm_eps 0"},
};
/* clang-format on */
#define N_NUMERIC_ERR ((int)(sizeof numeric_errs / sizeof numeric_errs[0]))

START_TEST(test_numeric_errors) {
  const numeric_err_t *e = &numeric_errs[_i / 2];
  int64_t Lk = e->has_kv ? e->Lk : e->Lq;
  attn_params_t p = {0};
  p.query = tu_t2(e->q, e->Lq, 2);
  if (e->has_kv) {
    p.key = tu_t2(e->k, Lk, 2);
    p.value = tu_t2(e->v, Lk, 2);
  }
  p.num_heads = 1;
  attn_tensor_t w = tu_t2(e->w, 2, 2);
  switch (e->where) {
  case W_Q:
    p.q_weight = w;
    break;
  case W_K:
    p.k_weight = w;
    break;
  case W_V:
    p.v_weight = w;
    break;
  case W_O:
    p.o_weight = w;
    break;
  case B_O:
    p.o_bias = tu_t1(e->bias, 2);
    break;
  case B_SCORE:
    p.bias = tu_t2(e->bias, 1, Lk);
    break;
  case N_Q:
    p.q_norm = tu_t1(e->w, 2);
    p.has_norm_eps = 1; /* norm_eps 0 */
    break;
  }
  const attn_exec_t ex = {.threads = 1 + 2 * (_i % 2),
                          .isa = _i % 2 ? ATTN_ISA_GENERIC : ATTN_ISA_AUTO};
  attn_plan_t plan;
  attn_error_t err;
  ck_assert_int_eq(attn_plan_init(&plan, &p, &ex, &err), 0);
  void *ws = aligned_alloc(64, (plan.workspace_bytes + 63) / 64 * 64);
  float *out = calloc((size_t)plan.out_elems, sizeof *out);
  attn_outputs_t o = {.out = out};
  int rc = attn_forward(&plan, &o, ws, plan.workspace_bytes, &err);
  ck_assert_msg(rc == ATTN_ENUMERIC && err.code == ATTN_ENUMERIC,
                "%s: returned %d %s (%s)", e->name, rc, attn_errname(rc),
                err.message);
  ck_assert_str_eq(err.field, e->field);
  ck_assert_msg(strncmp(err.message, e->stage, strlen(e->stage)) == 0 &&
                    strstr(err.message, e->at) != NULL,
                "%s: message '%s' lacks '%s' or '%s'", e->name, err.message,
                e->stage, e->at);
  ck_assert_msg(e->also == NULL || strstr(err.message, e->also),
                "%s: message '%s' lacks '%s'", e->name, err.message, e->also);
  free(ws);
  free(out);
}
END_TEST

Suite *test_suite(void) {
  Suite *s = suite_create("forward");
  TCase *tc = tcase_create("worked_example");
  tcase_add_test(tc, test_worked_example);
  suite_add_tcase(s, tc);

  tc = tcase_create("features");
  tcase_set_timeout(tc, 30);
  tcase_add_loop_test(tc, test_feature, 0, N_FEATURE);
  tcase_add_loop_test(tc, test_rope, 0, N_ROPE);
  tcase_add_loop_test(tc, test_rope_closed_forms, 0, 4);
  suite_add_tcase(s, tc);

  tc = tcase_create("tiles");
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, test_tile_sweep, 0, N_TILE_SWEEP);
  tcase_add_loop_test(tc, test_masked_tiles, 0, N_MASKED_TILE);
  suite_add_tcase(s, tc);

  tc = tcase_create("exec");
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, test_exec_sweep, 0, 16);
  tcase_add_loop_test(tc, test_isa_support, 0, 3);
  tcase_add_loop_test(tc, test_rows_independent, 0, 15);
  suite_add_tcase(s, tc);

  tc = tcase_create("random");
  tcase_set_timeout(tc, 30);
  tcase_add_loop_test(tc, test_random, 0, N_FUZZ);
  suite_add_tcase(s, tc);

  tc = tcase_create("large");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_large);
  tcase_add_loop_test(tc, test_proj_chunks, 0, 2);
  tcase_add_loop_test(tc, test_running_max, 0, 8);
  tcase_add_loop_test(tc, test_workspace_bounded, 0, N_WS_SHAPES);
  suite_add_tcase(s, tc);

  tc = tcase_create("numeric");
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, test_edge_values, 0, 2 * N_EDGE);
  tcase_add_loop_test(tc, test_edge_sweep, 0, 4);
  tcase_add_loop_test(tc, test_numeric_errors, 0, 2 * N_NUMERIC_ERR);
  suite_add_tcase(s, tc);

  tc = tcase_create("alibi_slopes");
  tcase_add_loop_test(tc, test_alibi_default_slopes_rule, 0, 40);
  tcase_add_test(tc, test_alibi_default_slopes_values);
  suite_add_tcase(s, tc);
  return s;
}
