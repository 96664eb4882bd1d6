/* tests/check_cuda.c: the CUDA backend (core/cuda/, docs/cuda.md) against
 * the CPU core and the float64 reference (tests/ref.c).
 *
 * Two kinds of case:
 *   - refusals, which run in every build: a plan for backend cuda where it
 *     cannot run fails with ATTN_ENOTSUP naming "backend" and why; in a
 *     CUDA=1 build the option the backend lacks (kv, a key/value cache in
 *     host memory) is refused by its own name (on a host with or without a
 *     GPU), as the cpu backend refuses pages in device memory; bf16 on the
 *     cpu backend is refused naming "precision"; a plan's device_bytes
 *     against its buffers counted here (a CUDA build, GPU or not);
 *   - the GPU cases, added only where attn_cuda_info says the backend is
 *     usable (a CUDA=1 build on an sm_90 device): a table of masks, GQA
 *     and MQA, the rope (both styles, llama3 scaling, given positions) and
 *     the q/k norms, odd shapes (L = 1, L past a tile, Lq != Lk) and head
 *     widths 32, 64, 128 and 256 (64 and 128 at the edges of flash
 *     version 3's tiles: L of 1, 63, 64, 65, 200), each with every output
 *     asked for, where fp32 must be within 1e-4 and bf16 within 2e-2
 *     (relative L2, tu_rel_err) of the reference and of the CPU core, bf16
 *     with each version of the flash kernel (the default, 1, 3 and 4) and
 *     fp32 with the default (1), 3 and 4, checking which one ran (the
 *     table's last cases are a session step's shapes, where version 4
 *     splits the keys); and a Q
 *     that overflows float32 and a bias of +inf, which both backends
 *     refuse as ATTN_ENUMERIC naming query and bias; the reductions of
 *     the weights (top_k, pool, stats, of each head or of their mean)
 *     against the CPU core's and the reference's, fp32 and bf16 (on
 *     inputs rounded to bfloat16: see the rules above red_cases); the
 *     pool's counts around a call (attn_cuda_memory); a kv cache in
 *     device memory against one in host memory on the CPU core, call by
 *     call (outputs, weights, k_absmax and the pages' cells); two threads
 *     calling at once with different head widths (flash versions 1 and
 *     2 past 48 KB of shared memory), every call of which must succeed
 *     and match; a call on a new thread after its canceled first one,
 *     which must too; and, last, a device made to fail (a trapping
 *     kernel), which attn_cuda_info must then call unusable, and plans
 *     refuse.
 * Where the GPU cases do not run, the suite prints one line "check_cuda:
 * SKIP ..." naming why, and the suite holds only the refusals, the table
 * on the CPU and the check of docs/cuda.md's quote of that line, so its
 * count shows that they did not run; with ATTND_REQUIRE_CUDA=1 (as
 * tools/device/check.sh sets it) the skip fails instead. */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attn.h"
#include "codec/half.h"
#include "ref.h"
#include "suite.h"
#include "testutil.h"

#define FP32_TOL 1e-4
#define BF16_TOL 2e-2

static attn_cuda_info_t cuda;

/* core/internal.h's knob and record of the flash kernel's version, so
 * that each version is checked, and the one meant to run is the one that
 * ran. */
extern int attn__cuda_flash_version, attn__cuda_flash_last;

/* A small valid problem: two heads of 8 features, 5 tokens, projections. */
static void small_case(tu_case_t *c) {
  tu_spec_t s = {.Lq = 5, .H = 2, .Dh = 8, .proj = TU_ALLPROJ};
  tu_case_build(c, &s, 7);
}

static int plan_cuda(const attn_params_t *p, attn_precision_t prec,
                     attn_error_t *err) {
  attn_plan_t plan;
  attn_exec_t ex = {.backend = ATTN_BACKEND_CUDA, .precision = prec};
  return attn_plan_init(&plan, p, &ex, err);
}

/* ---- refusals (every build) --------------------------------------------- */

/* Where the backend cannot run, a plain request for it says why. */
START_TEST(test_unusable_refused) {
  tu_case_t c;
  small_case(&c);
  attn_error_t err;
  int rc = plan_cuda(&c.p, ATTN_PRECISION_FP32, &err);
  ck_assert_int_eq(rc, ATTN_ENOTSUP);
  ck_assert_str_eq(err.field, "backend");
  ck_assert_msg(strstr(err.message, cuda.status) != NULL,
                "message '%s' does not give the probe's reason '%s'",
                err.message, cuda.status);
  tu_case_free(&c);
}
END_TEST

/* bf16 needs the cuda backend; unknown enum values are EINVAL. */
START_TEST(test_precision_needs_cuda) {
  tu_case_t c;
  small_case(&c);
  attn_plan_t plan;
  attn_error_t err;
  attn_exec_t ex = {.precision = ATTN_PRECISION_BF16};
  ck_assert_int_eq(attn_plan_init(&plan, &c.p, &ex, &err), ATTN_ENOTSUP);
  ck_assert_str_eq(err.field, "precision");
  ck_assert_ptr_nonnull(strstr(err.message, "bf16"));
  ex = (attn_exec_t){.backend = (attn_backend_kind_t)7};
  ck_assert_int_eq(attn_plan_init(&plan, &c.p, &ex, &err), ATTN_EINVAL);
  ck_assert_str_eq(err.field, "backend");
  ex = (attn_exec_t){.precision = (attn_precision_t)7};
  ck_assert_int_eq(attn_plan_init(&plan, &c.p, &ex, &err), ATTN_EINVAL);
  ck_assert_str_eq(err.field, "precision");
  /* the cpu, named, is the default */
  ex = (attn_exec_t){.backend = ATTN_BACKEND_CPU};
  ck_assert_int_eq(attn_plan_init(&plan, &c.p, &ex, &err), 0);
  ck_assert_int_eq(plan.backend, ATTN_BACKEND_CPU);
  ck_assert_str_eq(attn_backend_kind_name(ATTN_BACKEND_CUDA), "cuda");
  ck_assert_str_eq(attn_precision_name(ATTN_PRECISION_BF16), "bf16");
  tu_case_free(&c);
}
END_TEST

/* The one option the cuda backend lacks, a key/value cache (sessions), is
 * refused by its own name, never computed without it: in a build without
 * CUDA, it is "backend". */
START_TEST(test_lacking_options_refused) {
  tu_case_t c;
  tu_spec_t s = {.Lq = 5, .H = 2, .Dh = 8, .proj = TU_ALLPROJ};
  tu_case_build(&c, &s, 11);
  size_t floats = attn_kv_page_floats(2, 8, 8);
  float *page = aligned_alloc(64, (floats * sizeof(float) + 63) / 64 * 64);
  ck_assert_ptr_nonnull(page);
  float *const table[1] = {page};
  float *const *const tables[1] = {table};
  int64_t past[1] = {0};
  float absmax[1] = {0};
  attn_kv_t kv = {.past = past, .pages = tables, .k_absmax = absmax};
  c.p.kv = &kv;
  attn_plan_t plan;
  attn_error_t err;
  ck_assert_msg(attn_plan_init(&plan, &c.p, NULL, &err) == 0,
                "kv: the cpu refuses it: %s", err.message);
  int rc = plan_cuda(&c.p, ATTN_PRECISION_FP32, &err);
  ck_assert_int_eq(rc, ATTN_ENOTSUP);
  if (!cuda.built) {
    ck_assert_str_eq(err.field, "backend");
  } else {
    ck_assert_msg(strcmp(err.field, "kv") == 0, "kv refused naming '%s': %s",
                  err.field, err.message);
    ck_assert_ptr_nonnull(strstr(err.message, "cuda"));
  }
  free(page);
  tu_case_free(&c);
}
END_TEST

/* Heads wider than the kernels take are refused, naming the limit. */
START_TEST(test_wide_heads_refused) {
  tu_case_t c;
  tu_spec_t s = {.Lq = 3, .H = 1, .Dh = ATTN_CUDA_MAX_HEAD_DIM + 8};
  tu_case_build(&c, &s, 3);
  attn_error_t err;
  ck_assert_int_eq(plan_cuda(&c.p, ATTN_PRECISION_FP32, &err), ATTN_ENOTSUP);
  if (cuda.built) {
    ck_assert_str_eq(err.field, "num_heads");
    ck_assert_ptr_nonnull(strstr(err.message, "256"));
  } else {
    ck_assert_str_eq(err.field, "backend");
  }
  tu_case_free(&c);
}
END_TEST

/* The cuda backend projects all of a call's rows in one GEMM, whose row
 * count cuBLAS takes as an int: a call of more than INT_MAX query rows
 * (B·Lq) or key rows (B·Lk) is refused naming the input, never computed
 * on the rows that the count cast to int leaves (2^32 + 5 rows would
 * project 5, a wrong result of the right shape). The plan reads no
 * element of the inputs: one float stands in for each tensor. In a CUDA
 * build, GPU or not (the options are refused before the device is
 * asked). */
START_TEST(test_gemm_rows_refused) {
  static float x[1];
  /* the most items, of L rows each: 2^32 + 65534 rows, which an int
   * reads as 65534 (within the core's other limits: one key or query an
   * item on the other side) */
  const int64_t B = 65535, L = 65538;
  for (int k = 0; k < 2; k++) {
    attn_params_t p = {.num_heads = 1};
    /* k 0: B·Lq past INT_MAX; k 1: B·Lk */
    p.query = (attn_tensor_t){.data = x, .rank = 3, .dim = {B, k ? 1 : L, 1}};
    p.key = (attn_tensor_t){.data = x, .rank = 3, .dim = {B, k ? L : 1, 1}};
    attn_error_t err;
    int rc = plan_cuda(&p, ATTN_PRECISION_FP32, &err);
    if (!cuda.built) {
      ck_assert_int_eq(rc, ATTN_ENOTSUP);
      ck_assert_str_eq(err.field, "backend");
      continue;
    }
    ck_assert_msg(rc == ATTN_EOVERFLOW, "%d: %s", rc, err.message);
    ck_assert_str_eq(err.field, k ? "key" : "query");
    ck_assert_msg(strstr(err.message, "2147483647") != NULL, "%s", err.message);
  }
}
END_TEST

/* The kernels' grids put the heads in y and the batch items in z, at most
 * 65535 each (ATTN_CUDA_MAX_GRID): a call of more is refused naming the
 * input whose dimension is over, the batch in `query`'s first and the
 * heads in `num_heads`. One float stands in for each tensor, as above. */
START_TEST(test_grid_refused) {
  static float x[1];
  const int64_t n = ATTN_CUDA_MAX_GRID + 1;
  for (int k = 0; k < 2; k++) {
    /* k 0: n items of one token; k 1: n heads of one feature */
    attn_params_t p = {.num_heads = k ? n : 1};
    p.query =
        (attn_tensor_t){.data = x, .rank = 3, .dim = {k ? 1 : n, 1, k ? n : 1}};
    attn_error_t err;
    int rc = plan_cuda(&p, ATTN_PRECISION_FP32, &err);
    ck_assert_int_eq(rc, ATTN_ENOTSUP);
    if (!cuda.built) {
      ck_assert_str_eq(err.field, "backend");
      continue;
    }
    ck_assert_msg(strcmp(err.field, k ? "num_heads" : "query") == 0,
                  "%s over 65535 refused naming '%s': %s",
                  k ? "heads" : "batch items", err.field, err.message);
    ck_assert_msg(strstr(err.message, "65535") != NULL, "%s", err.message);
  }
}
END_TEST

/* ---- the GPU cases --------------------------------------------------------
 */

/* What a case adds to its tu_spec_t: the rope (its style, scaling, half
 * the dims, given positions of rank 1 or 2) and the q/k norms. */
enum {
  X_ROPE_HALF = 1,
  X_ROPE_INTERLEAVED = 2,
  X_LLAMA3 = 4,
  X_HALF_DIMS = 8,
  X_POS1 = 16,
  X_POS2 = 32,
  X_NORMS = 64
};

typedef struct gpu_case {
  const char *name;
  tu_spec_t s;
  unsigned x; /* X_* */
} gpu_case_t;

/* The buffers a case's X_* add, owned by the test. */
typedef struct extras {
  float *norm_q, *norm_k;
  int64_t *pos_q, *pos_k;
} extras_t;

static void add_extras(tu_case_t *c, unsigned x, extras_t *e) {
  memset(e, 0, sizeof *e);
  attn_params_t *p = &c->p;
  if (x & X_NORMS) {
    e->norm_q = malloc((size_t)c->Dh * sizeof(float));
    e->norm_k = malloc((size_t)c->Dh * sizeof(float));
    for (int64_t d = 0; d < c->Dh; d++) {
      e->norm_q[d] = 0.5f + 0.03f * (float)(d % 17);
      e->norm_k[d] = 1.5f - 0.02f * (float)(d % 13);
    }
    p->q_norm = tu_t1(e->norm_q, c->Dh);
    p->k_norm = tu_t1(e->norm_k, c->Dh);
    p->has_norm_eps = 1;
    p->norm_eps = 1e-5f;
  }
  if (x & (X_ROPE_HALF | X_ROPE_INTERLEAVED)) {
    p->rope = (attn_rope_t){.style = x & X_ROPE_HALF ? ATTN_ROPE_HALF
                                                     : ATTN_ROPE_INTERLEAVED,
                            .theta = 10000,
                            .dims = x & X_HALF_DIMS ? c->Dh / 2 : 0};
    if (x & X_LLAMA3)
      p->rope = (attn_rope_t){.style = p->rope.style,
                              .theta = 500000,
                              .dims = p->rope.dims,
                              .scaling = ATTN_ROPE_SCALING_LLAMA3,
                              .factor = 8,
                              .low_freq_factor = 1,
                              .high_freq_factor = 4,
                              .original_max_position = 64};
  }
  if (x & (X_POS1 | X_POS2)) {
    int64_t nq = x & X_POS2 ? c->B * c->Lq : c->Lq;
    int64_t nk = x & X_POS2 ? c->B * c->Lk : c->Lk;
    e->pos_q = malloc((size_t)nq * sizeof(int64_t));
    e->pos_k = malloc((size_t)nk * sizeof(int64_t));
    for (int64_t t = 0; t < nq; t++)
      e->pos_q[t] = 1000 + 7 * t + (t % 3);
    for (int64_t t = 0; t < nk; t++)
      e->pos_k[t] = 1000 + 5 * t;
    if (x & X_POS2) {
      p->positions_query = tu_t2(e->pos_q, c->B, c->Lq);
      p->positions_key = tu_t2(e->pos_k, c->B, c->Lk);
    } else {
      p->positions_query = tu_t1(e->pos_q, c->Lq);
      p->positions_key = tu_t1(e->pos_k, c->Lk);
    }
  }
}

static void free_extras(extras_t *e) {
  free(e->norm_q), free(e->norm_k), free(e->pos_q), free(e->pos_k);
}

#define P TU_ALLPROJ
/* One row a case: its name, its tu_spec_t and its X_* (clang-format would
 * put each member on a line of its own). */
/* clang-format off */
static const gpu_case_t gpu_cases[] = {
    {"plain", {.Lq = 37, .H = 4, .Dh = 16, .proj = P}, 0},
    {"L=1", {.Lq = 1, .H = 2, .Dh = 32, .proj = P}, 0},
    {"Lq=1 over 100 keys",
     {.Lq = 1, .Lk = 100, .cross = 1, .H = 2, .Dh = 32, .proj = P}, 0},
    {"causal bottom-right, Lq < Lk",
     {.Lq = 19, .Lk = 70, .cross = 1, .H = 2, .Dh = 32, .proj = P,
      .causal = ATTN_CAUSAL_BOTTOM_RIGHT}, 0},
    {"causal top-left, Lq < Lk",
     {.Lq = 19, .Lk = 70, .cross = 1, .H = 2, .Dh = 32, .proj = P,
      .causal = ATTN_CAUSAL_TOP_LEFT}, 0},
    {"causal bottom-right, Lq > Lk (dead rows)",
     {.Lq = 45, .Lk = 20, .cross = 1, .H = 2, .Dh = 32, .proj = P,
      .causal = ATTN_CAUSAL_BOTTOM_RIGHT}, 0},
    {"causal self, L = 100",
     {.Lq = 100, .H = 4, .Dh = 64, .proj = P,
      .causal = ATTN_CAUSAL_BOTTOM_RIGHT}, 0},
    {"key lengths, one of them 0",
     {.B = 3, .batched = 1, .Lq = 33, .H = 2, .Dh = 32, .proj = P,
      .key_lengths = 1, .lengths = {0, 33, 17}}, 0},
    {"window both sides",
     {.Lq = 70, .H = 2, .Dh = 32, .proj = P, .has_wl = 1, .wl = 5,
      .has_wr = 1, .wr = 2}, 0},
    {"window left, causal",
     {.Lq = 70, .H = 2, .Dh = 32, .proj = P, .has_wl = 1, .wl = 9,
      .causal = ATTN_CAUSAL_BOTTOM_RIGHT}, 0},
    {"softcap and scale",
     {.Lq = 40, .H = 2, .Dh = 32, .proj = P, .has_softcap = 1,
      .softcap = 2.0f, .has_scale = 1, .scale = 0.9f}, 0},
    {"alibi default",
     {.Lq = 40, .H = 8, .Dh = 16, .proj = P, .alibi = ATTN_ALIBI_DEFAULT,
      .causal = ATTN_CAUSAL_BOTTOM_RIGHT}, 0},
    {"alibi slopes",
     {.Lq = 40, .H = 4, .Dh = 16, .proj = P, .alibi = ATTN_ALIBI_SLOPES}, 0},
    {"allow [Lq, Lk]",
     {.Lq = 40, .H = 2, .Dh = 32, .proj = P, .allow_rank = 2}, 0},
    {"allow [B, H, Lq, Lk], causal",
     {.B = 2, .batched = 1, .Lq = 33, .H = 2, .Dh = 32, .proj = P,
      .allow_rank = 4, .causal = ATTN_CAUSAL_BOTTOM_RIGHT}, 0},
    {"allow broadcast over heads and queries, cross",
     {.B = 2, .batched = 1, .Lq = 20, .Lk = 50, .cross = 1, .H = 4, .Dh = 16,
      .proj = P, .allow_rank = 4, .allow_ones = TU_1H | TU_1Q}, 0},
    {"bias [H, Lq, Lk]",
     {.Lq = 40, .H = 4, .Dh = 32, .proj = P, .bias_rank = 3}, 0},
    {"bias and a sparse allow, softcap, ALiBi, GQA",
     {.B = 2, .batched = 1, .Lq = 70, .H = 4, .Hkv = 2, .Dh = 64, .proj = P,
      .bias_rank = 4, .bias_ones = TU_1B, .allow_rank = 3, .allow_p = 0.3,
      .has_softcap = 1, .softcap = 4.0f, .alibi = ATTN_ALIBI_DEFAULT}, 0},
    {"rope half, causal",
     {.Lq = 40, .H = 2, .Dh = 32, .proj = P,
      .causal = ATTN_CAUSAL_BOTTOM_RIGHT}, X_ROPE_HALF},
    {"rope interleaved on half the dims, Lq < Lk",
     {.Lq = 17, .Lk = 45, .cross = 1, .H = 2, .Dh = 64, .proj = P},
     X_ROPE_INTERLEAVED | X_HALF_DIMS},
    {"rope llama3 scaling, positions [L]",
     {.Lq = 30, .H = 4, .Hkv = 2, .Dh = 32, .proj = P},
     X_ROPE_HALF | X_LLAMA3 | X_POS1},
    {"q/k norms and rope, positions [B, L], GQA",
     {.B = 2, .batched = 1, .Lq = 33, .H = 4, .Hkv = 1, .Dh = 64, .proj = P,
      .causal = ATTN_CAUSAL_BOTTOM_RIGHT}, X_NORMS | X_ROPE_HALF | X_POS2},
    {"q/k norms alone", {.Lq = 20, .H = 2, .Dh = 128, .proj = P}, X_NORMS},
    {"GQA 8/2", {.Lq = 50, .H = 8, .Hkv = 2, .Dh = 32, .proj = P}, 0},
    {"MQA 4/1",
     {.Lq = 50, .H = 4, .Hkv = 1, .Dh = 64, .proj = P,
      .causal = ATTN_CAUSAL_TOP_LEFT}, 0},
    {"Dh 128, Dv 64",
     {.Lq = 65, .H = 2, .Dh = 128, .Dv = 64, .proj = P,
      .causal = ATTN_CAUSAL_BOTTOM_RIGHT}, 0},
    {"Dh 256", {.Lq = 33, .H = 2, .Dh = 256, .proj = P}, 0},
    {"Dh 5, Dv 3 (odd)", {.Lq = 9, .H = 3, .Dh = 5, .Dv = 3, .proj = P}, 0},
    {"no projections", {.Lq = 30, .H = 2, .Dh = 32}, 0},
    {"projections without biases, cross widths",
     {.Lq = 21, .Lk = 43, .cross = 1, .value_given = 1, .H = 4, .Hkv = 2,
      .Dh = 32, .Eq = 24, .Ek = 40, .Ev = 12, .Eo = 20,
      .proj = TU_QW | TU_KW | TU_VW | TU_OW}, 0},
    {"Dh 64, L = 1", {.Lq = 1, .H = 2, .Dh = 64, .proj = P}, 0},
    {"Dh 128, Lq = 1 over 200 keys",
     {.Lq = 1, .Lk = 200, .cross = 1, .H = 2, .Dh = 128, .proj = P}, 0},
    {"Dh 64, Lq 63 over 65 keys, causal top-left",
     {.Lq = 63, .Lk = 65, .cross = 1, .H = 2, .Dh = 64, .proj = P,
      .causal = ATTN_CAUSAL_TOP_LEFT}, 0},
    {"Dh 128, Lq 65 over 64 keys, causal bottom-right (a dead row)",
     {.Lq = 65, .Lk = 64, .cross = 1, .H = 2, .Dh = 128, .proj = P,
      .causal = ATTN_CAUSAL_BOTTOM_RIGHT}, 0},
    {"Dh 128, Lq 64 over 200 keys, causal top-left, GQA 4/2",
     {.Lq = 64, .Lk = 200, .cross = 1, .H = 4, .Hkv = 2, .Dh = 128,
      .proj = P, .causal = ATTN_CAUSAL_TOP_LEFT}, 0},
    {"Dh 64, Lq 200 over 65 keys, causal bottom-right (dead rows)",
     {.Lq = 200, .Lk = 65, .cross = 1, .H = 2, .Dh = 64, .proj = P,
      .causal = ATTN_CAUSAL_BOTTOM_RIGHT}, 0},
    {"Dh 128, causal self, L = 200, GQA 4/1",
     {.Lq = 200, .H = 4, .Hkv = 1, .Dh = 128, .proj = P,
      .causal = ATTN_CAUSAL_BOTTOM_RIGHT}, 0},
    {"Dh 64, L = 200, key lengths, window 70/5",
     {.B = 2, .batched = 1, .Lq = 200, .H = 2, .Dh = 64, .proj = P,
      .key_lengths = 1, .lengths = {130, 64}, .has_wl = 1, .wl = 70,
      .has_wr = 1, .wr = 5}, 0},
    {"batch of 2, everything",
     {.B = 2, .batched = 1, .Lq = 70, .H = 4, .Hkv = 2, .Dh = 64, .proj = P,
      .causal = ATTN_CAUSAL_BOTTOM_RIGHT, .key_lengths = 1,
      .lengths = {50, -1}, .has_wl = 1, .wl = 30, .has_softcap = 1,
      .softcap = 5.0f, .alibi = ATTN_ALIBI_DEFAULT}, 0},
    /* a step's shapes, where version 4 splits the keys (split_count: 8
     * and 5 splits, and ranges a window or a key length leaves empty) */
    {"a step: Lq 1 over 1000 keys, GQA 8/2, causal",
     {.Lq = 1, .Lk = 1000, .cross = 1, .H = 8, .Hkv = 2, .Dh = 64,
      .proj = P, .causal = ATTN_CAUSAL_BOTTOM_RIGHT}, 0},
    {"Lq 2 over 600 keys, key lengths (one 0), window, ALiBi, bias",
     {.B = 3, .batched = 1, .Lq = 2, .Lk = 600, .cross = 1, .H = 4,
      .Hkv = 1, .Dh = 32, .proj = P, .key_lengths = 1,
      .lengths = {600, 0, 90}, .has_wl = 1, .wl = 300,
      .alibi = ATTN_ALIBI_DEFAULT, .bias_rank = 4, .bias_ones = TU_1B}, 0},
    {"Lq 3 over 520 keys, Dh 128, Dv 64, softcap, allow",
     {.Lq = 3, .Lk = 520, .cross = 1, .H = 6, .Hkv = 2, .Dh = 128, .Dv = 64,
      .proj = P, .has_softcap = 1, .softcap = 3.0f, .allow_rank = 2}, 0},
};
/* clang-format on */
#undef P
#define N_GPU_CASES ((int)(sizeof gpu_cases / sizeof gpu_cases[0]))

/* Compares each output of `run` with the reference and with the CPU
 * core's run. */
static void compare(const char *what, const char *prec, double tol,
                    const tu_run_t *run, const tu_run_t *cpu,
                    const ref_result_t *ref, const attn_params_t *p) {
  const attn_plan_t *pl = &run->plan;
  const struct {
    const char *name;
    int want;
    const float *got, *cpu;
    const double *ref;
    int64_t n;
  } outs[4] = {
      {"out", 1, run->o.out, cpu->o.out, ref->out, pl->out_elems},
      {"weights", p->want_weights, run->o.weights, cpu->o.weights, ref->weights,
       pl->weights_elems},
      {"mean_weights", p->want_mean_weights, run->o.mean_weights,
       cpu->o.mean_weights, ref->mean_weights, pl->mean_elems},
      {"head_outputs", p->want_head_outputs, run->o.head_outputs,
       cpu->o.head_outputs, ref->head_outputs, pl->head_elems},
  };
  for (int k = 0; k < 4; k++) {
    if (!outs[k].want)
      continue;
    double e_ref = tu_rel_err(outs[k].got, outs[k].ref, (size_t)outs[k].n);
    double e_cpu = tu_rel_err_f(outs[k].got, outs[k].cpu, (size_t)outs[k].n);
    ck_assert_msg(e_ref <= tol && e_cpu <= tol,
                  "%s, %s, %s: relative error %.3e against the reference, "
                  "%.3e against the cpu core (tolerance %.0e)",
                  what, prec, outs[k].name, e_ref, e_cpu, tol);
  }
}

/* The flash version that `version` runs with these head widths
 * (core/cuda/kernels.h): version 3 takes bf16 and fp32 with Dh = Dv of
 * 32, 64 or 128 when asked for; version 4 every case here; version 2, the
 * default, bf16 with Dh and Dv multiples of 16; version 1 the rest. */
static int flash_version_for(attn_precision_t prec, int version, int64_t Dh,
                             int64_t Dv) {
  if (version == 1 || version == 4) /* 4 takes every case of the table */
    return version;
  if (version == 3 && Dh == Dv && (Dh == 32 || Dh == 64 || Dh == 128))
    return 3;
  if (prec != ATTN_PRECISION_BF16)
    return 1;
  return Dh % 16 == 0 && Dv % 16 == 0 ? 2 : 1;
}

/* Runs case i with `version` of the flash kernel (0: the default;
 * core/cuda/kernels.h), and checks which one ran. */
static void run_gpu_case(int i, attn_precision_t prec, double tol,
                         int version) {
  const gpu_case_t *g = &gpu_cases[i];
  tu_case_t c;
  tu_case_build(&c, &g->s, 1000 + (uint64_t)i);
  extras_t ex_bufs;
  add_extras(&c, g->x, &ex_bufs);
  ref_result_t ref;
  ck_assert_int_eq(ref_attention(&c.p, &ref), 0);
  tu_run_t cpu, gpu;
  ck_assert_int_eq(tu_run(&cpu, &c.p, NULL), 0);
  attn_exec_t ex = {.backend = ATTN_BACKEND_CUDA, .precision = prec};
  attn__cuda_flash_version = version;
  ck_assert_int_eq(tu_run(&gpu, &c.p, &ex), 0);
  attn__cuda_flash_version = 0;
  ck_assert_int_eq(gpu.plan.backend, ATTN_BACKEND_CUDA);
  const int want = flash_version_for(prec, version, gpu.plan.Dh, gpu.plan.Dv);
  ck_assert_msg(attn__cuda_flash_last == want,
                "%s: flash version %d ran, %d expected", g->name,
                attn__cuda_flash_last, want);
  char what[160];
  snprintf(what, sizeof what, "%s (flash v%d)", g->name, attn__cuda_flash_last);
  compare(what, attn_precision_name(prec), tol, &gpu, &cpu, &ref, &c.p);
  tu_run_free(&gpu);
  tu_run_free(&cpu);
  ref_result_free(&ref);
  free_extras(&ex_bufs);
  tu_case_free(&c);
}

/* Every case of the table is valid, and the CPU core agrees with the
 * reference on it (1e-5, as check_forward): in every build, so that a GPU
 * case's failure is the GPU's, not the table's. */
START_TEST(test_table_on_cpu) {
  const gpu_case_t *g = &gpu_cases[_i];
  tu_case_t c;
  tu_case_build(&c, &g->s, 1000 + (uint64_t)_i);
  extras_t e;
  add_extras(&c, g->x, &e);
  int rc = tu_check_vs_ref(&c.p, NULL, 1e-5, g->name);
  ck_assert_int_eq(rc, 0);
  free_extras(&e);
  tu_case_free(&c);
}
END_TEST

/* A test of every gpu case at one precision, with one flash version (0:
 * the default). */
#define GPU_CASE_TEST(name, precision, tol, version)                           \
  START_TEST(name) {                                                           \
    run_gpu_case(_i, ATTN_PRECISION_##precision, tol, version);                \
  }                                                                            \
  END_TEST

/* fp32 with the default kernel (version 1), and version 3 (3xTF32) */
GPU_CASE_TEST(test_gpu_fp32, FP32, FP32_TOL, 0)
GPU_CASE_TEST(test_gpu_fp32_v3, FP32, FP32_TOL, 3)
/* bf16 with the default kernel (version 2 where it applies), version 1,
 * and version 3 */
GPU_CASE_TEST(test_gpu_bf16, BF16, BF16_TOL, 0)
GPU_CASE_TEST(test_gpu_bf16_v1, BF16, BF16_TOL, 1)
GPU_CASE_TEST(test_gpu_bf16_v3, BF16, BF16_TOL, 3)
/* version 4 (the keys split across blocks), fp32 and bf16 */
GPU_CASE_TEST(test_gpu_fp32_v4, FP32, FP32_TOL, 4)
GPU_CASE_TEST(test_gpu_bf16_v4, BF16, BF16_TOL, 4)

/* Runs p on the cpu, then on cuda, and asserts each fails with
 * ATTN_ENUMERIC naming `field`. */
static void both_refuse(const attn_params_t *p, const char *field) {
  for (int b = 0; b < 2; b++) {
    attn_exec_t ex = {.backend = b ? ATTN_BACKEND_CUDA : ATTN_BACKEND_CPU};
    attn_plan_t plan;
    attn_error_t err;
    ck_assert_int_eq(attn_plan_init(&plan, p, &ex, &err), 0);
    void *ws = aligned_alloc(64, (plan.workspace_bytes + 63) / 64 * 64 + 64);
    float *out = malloc((size_t)plan.out_elems * sizeof *out);
    attn_outputs_t o = {.out = out};
    int rc = attn_forward(&plan, &o, ws, plan.workspace_bytes, &err);
    ck_assert_msg(rc == ATTN_ENUMERIC && strcmp(err.field, field) == 0,
                  "%s: %d %s (field '%s', expected '%s'): %s",
                  b ? "cuda" : "cpu", rc, attn_errname(rc), err.field, field,
                  err.message);
    free(out);
    free(ws);
  }
}

/* A bias of +inf: both backends refuse it naming bias (-inf is a mask,
 * which the table's cases cover through allow). */
START_TEST(test_gpu_numeric_bias) {
  tu_case_t c;
  tu_spec_t s = {.Lq = 6, .H = 2, .Dh = 8, .proj = TU_ALLPROJ, .bias_rank = 2};
  tu_case_build(&c, &s, 9);
  c.bias[7] = INFINITY;
  both_refuse(&c.p, "bias");
  tu_case_free(&c);
}
END_TEST

/* A Q past float32's range: both backends refuse it naming query. */
START_TEST(test_gpu_numeric) {
  tu_case_t c;
  tu_spec_t s = {.Lq = 4, .H = 1, .Dh = 8, .proj = TU_ALLPROJ};
  tu_case_build(&c, &s, 5);
  for (int64_t e = 0; e < 4 * 8; e++)
    c.query[e] = 3e38f;
  for (int64_t e = 0; e < 8 * 8; e++)
    c.qw[e] = 1.0f; /* each Q element 8 · 3e38 */
  both_refuse(&c.p, "query");
  tu_case_free(&c);
}
END_TEST

/* ---- the reductions of the weights (attn_reduce_t) ----------------------
 *
 * Each case is a problem without projections (Q and K are the inputs) and
 * its reductions. fp32 runs it as it is; bf16 runs it on inputs rounded to
 * bfloat16 first, so that the GPU's bf16 Q and K are exactly the CPU
 * core's and the reference's, and both are held to fp32's tolerance: the
 * reductions' own arithmetic (the weights from lse, the sums) is float32
 * in either precision, and a looser bf16 tolerance would hide its bugs.
 * The rules, against the CPU core and against the float64 reference:
 *   - pooled, entropy, sink, distance: within FP32_TOL (relative L2);
 *   - top_k, rank by rank: value within RED_ABS of the other's and of the
 *     reference's weight at the index given; the index the other's, unless
 *     the two keys are a near tie: their reference weights differ, but by
 *     at most RED_TIE relative (float32's rounding of scores and lse can
 *     order those either way; an exact tie goes to the lower index on
 *     both); −1 (value 0) where the other has −1, or a value under 1e-30
 *     (float32's range); each row's values in order. */
#define RED_ABS 1e-5
#define RED_TIE 1e-5

typedef struct red_case {
  const char *name;
  tu_spec_t s;
  attn_reduce_t r;
  int zero_query; /* every score 0: rows of exact ties */
} red_case_t;

#define BR ATTN_CAUSAL_BOTTOM_RIGHT
#define TL ATTN_CAUSAL_TOP_LEFT
/* clang-format off */
static const red_case_t red_cases[] = {
    {"self: top_k 5, stats, pool 3x5 mean",
     {.Lq = 37, .H = 4, .Dh = 16},
     {.top_k = 5, .stats = ATTN_STAT_ALL, .sink_tokens = 4, .pool_q = 3,
      .pool_k = 5}, 0},
    {"Lq 1 over 1000 keys: top_k 256, pool 1x64 max, sink 0",
     {.Lq = 1, .Lk = 1000, .cross = 1, .H = 2, .Dh = 32},
     {.top_k = 256, .pool_q = 1, .pool_k = 64, .pool_reduce = ATTN_POOL_MAX,
      .stats = ATTN_STAT_ALL}, 0},
    {"causal bottom-right Lq 45 > Lk 20 (dead rows): top_k 30 > keys, sink "
     "past Lk",
     {.Lq = 45, .Lk = 20, .cross = 1, .H = 2, .Dh = 32, .causal = BR},
     {.top_k = 30, .pool_q = 4, .pool_k = 3, .pool_reduce = ATTN_POOL_SUM,
      .stats = ATTN_STAT_ALL, .sink_tokens = 100}, 0},
    {"causal top-left Lq 19 < Lk 600, ranges",
     {.Lq = 19, .Lk = 600, .cross = 1, .H = 2, .Dh = 32, .causal = TL},
     {.top_k = 7, .pool_q = 5, .pool_k = 50, .stats = ATTN_STAT_ALL,
      .sink_tokens = 2, .has_query_range = 1, .query_range = {3, 17},
      .has_key_range = 1, .key_range = {100, 550}}, 0},
    {"key lengths 0, 33, 17",
     {.B = 3, .batched = 1, .Lq = 33, .H = 2, .Dh = 32, .key_lengths = 1,
      .lengths = {0, 33, 17}},
     {.top_k = 5, .pool_q = 2, .pool_k = 2, .pool_reduce = ATTN_POOL_MAX,
      .stats = ATTN_STAT_ALL, .sink_tokens = 1}, 0},
    {"bias, softcap, ALiBi, sparse allow, window: top_k 9, pool 1x1",
     {.Lq = 70, .H = 4, .Dh = 64, .bias_rank = 4, .has_softcap = 1,
      .softcap = 4.0f, .alibi = ATTN_ALIBI_DEFAULT, .allow_rank = 3,
      .allow_p = 0.3, .has_wl = 1, .wl = 40, .has_wr = 1, .wr = 3},
     {.top_k = 9, .pool_q = 1, .pool_k = 1, .pool_reduce = ATTN_POOL_SUM,
      .stats = ATTN_STAT_ALL, .sink_tokens = 5}, 0},
    {"long rows: Lk 5000, top_k 256 of a key range, pool 2x512",
     {.Lq = 3, .Lk = 5000, .cross = 1, .H = 2, .Dh = 64},
     {.top_k = 256, .pool_q = 2, .pool_k = 512, .pool_reduce = ATTN_POOL_SUM,
      .stats = ATTN_STAT_ALL, .sink_tokens = 300, .has_key_range = 1,
      .key_range = {17, 4999}}, 0},
    {"mean_heads, GQA 8/2, causal, Lq 50 < Lk 300",
     {.Lq = 50, .Lk = 300, .cross = 1, .H = 8, .Hkv = 2, .Dh = 32,
      .causal = BR},
     {.mean_heads = 1, .top_k = 5, .pool_q = 7, .pool_k = 20,
      .stats = ATTN_STAT_ALL, .sink_tokens = 3}, 0},
    {"mean_heads, dead rows, allow per head",
     {.B = 2, .batched = 1, .Lq = 40, .Lk = 15, .cross = 1, .H = 3, .Dh = 16,
      .causal = BR, .allow_rank = 4, .allow_p = 0.7},
     {.mean_heads = 1, .top_k = 3, .pool_q = 64, .pool_k = 64,
      .stats = ATTN_STAT_ALL, .sink_tokens = 2}, 0},
    {"mean_heads, long rows: Lk 2100, top_k 100, ranges",
     {.Lq = 4, .Lk = 2100, .cross = 1, .H = 4, .Dh = 32},
     {.mean_heads = 1, .top_k = 100, .pool_q = 3, .pool_k = 300,
      .pool_reduce = ATTN_POOL_MAX, .stats = ATTN_STAT_ENTROPY,
      .has_query_range = 1, .query_range = {1, 4}, .has_key_range = 1,
      .key_range = {5, 2000}}, 0},
    {"Dh 5: top_k 1, pool 9x9 max, sink",
     {.Lq = 9, .H = 3, .Dh = 5},
     {.top_k = 1, .pool_q = 9, .pool_k = 9, .pool_reduce = ATTN_POOL_MAX,
      .stats = ATTN_STAT_SINK, .sink_tokens = 4}, 0},
    {"exact ties (Q = 0), causal, Lq 30 < Lk 300: lower index first",
     {.Lq = 30, .Lk = 300, .cross = 1, .H = 2, .Dh = 16, .causal = BR},
     {.top_k = 40, .stats = ATTN_STAT_DISTANCE}, 1},
};
/* clang-format on */
#undef BR
#undef TL
#define N_RED_CASES ((int)(sizeof red_cases / sizeof red_cases[0]))

/* bfloat16(x), rounded to nearest even, as a float (finite x). */
static float round_bf16(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  u = (u + 0x7fffu + (u >> 16 & 1)) & 0xffff0000u;
  memcpy(&x, &u, 4);
  return x;
}

/* Builds red case i (with `bf16`, its inputs rounded to bfloat16). */
static void red_case_build(tu_case_t *c, int i, int bf16) {
  const red_case_t *rc = &red_cases[i];
  tu_case_build(c, &rc->s, 3000 + (uint64_t)i);
  c->p.want_weights = c->p.want_mean_weights = c->p.want_head_outputs = 0;
  c->p.reduce = rc->r;
  if (rc->zero_query)
    memset(c->query, 0, (size_t)(c->B * c->Lq * c->Eq) * sizeof(float));
  float *in[2] = {c->query, c->key};
  int64_t n[2] = {c->B * c->Lq * c->Eq, c->B * c->Lk * c->Ek};
  for (int x = 0; x < 2 && bf16; x++)
    for (int64_t e = 0; in[x] && e < n[x]; e++)
      in[x][e] = round_bf16(in[x][e]);
}

/* The reference's reductions as the core's outputs (floats), owned. */
static void ref_outputs(const ref_reduce_t *r, const attn_plan_t *pl,
                        attn_outputs_t *o) {
  memset(o, 0, sizeof *o);
  const int64_t nk = pl->top_k_elems, ns = pl->stats_elems;
  o->top_k_index = malloc((size_t)(nk + 1) * sizeof(int32_t));
  o->top_k_value = malloc((size_t)(nk + 1) * sizeof(float));
  o->pooled = malloc((size_t)(pl->pooled_elems + 1) * sizeof(float));
  o->entropy = malloc((size_t)(ns + 1) * sizeof(float));
  o->sink = malloc((size_t)(ns + 1) * sizeof(float));
  o->distance = malloc((size_t)(ns + 1) * sizeof(float));
  ck_assert(o->top_k_index && o->top_k_value && o->pooled && o->entropy &&
            o->sink && o->distance);
  for (int64_t e = 0; e < nk; e++) {
    o->top_k_index[e] = (int32_t)r->top_k_index[e];
    o->top_k_value[e] = (float)r->top_k_value[e];
  }
  for (int64_t e = 0; e < pl->pooled_elems; e++)
    o->pooled[e] = (float)r->pooled[e];
  for (int64_t e = 0; e < ns; e++) {
    o->entropy[e] = (float)r->entropy[e];
    o->sink[e] = (float)r->sink[e];
    o->distance[e] = (float)r->distance[e];
  }
}

static void ref_outputs_free(attn_outputs_t *o) {
  free(o->top_k_index), free(o->top_k_value), free(o->pooled);
  free(o->entropy), free(o->sink), free(o->distance);
}

/* got's reductions against want's by the rules above; ref holds the
 * float64 weights of the problem, to judge the ties. */
static void compare_reduce(const char *what, const attn_params_t *p,
                           const attn_plan_t *pl, const attn_outputs_t *got,
                           const attn_outputs_t *want, const ref_result_t *ref,
                           double tol) {
  const attn_reduce_t *r = &p->reduce;
  const int64_t K = r->top_k, nrow = pl->q1 - pl->q0;
  for (int64_t row = 0; K && row < pl->B * pl->rH * nrow; row++) {
    const int64_t bh = row / nrow, i = pl->q0 + row % nrow;
    const int64_t b = bh / pl->rH, h = bh % pl->rH;
    const double *w =
        r->mean_heads ? ref->mean_weights + (b * pl->Lq + i) * pl->Lk
                      : ref->weights + ((b * pl->H + h) * pl->Lq + i) * pl->Lk;
    for (int64_t t = 0; t < K; t++) {
      const int32_t gi = got->top_k_index[row * K + t];
      const int32_t ci = want->top_k_index[row * K + t];
      const float gv = got->top_k_value[row * K + t];
      const float cv = want->top_k_value[row * K + t];
      if (gi < 0 || ci < 0) {
        ck_assert_msg(
            (gi == ci || fmax(gv, cv) < 1e-30) && (gi >= 0 || gv == 0),
            "%s: top_k row %lld rank %lld: index %d (%.9g), "
            "expected %d (%.9g)",
            what, (long long)row, (long long)t, gi, (double)gv, ci, (double)cv);
        continue;
      }
      ck_assert_msg(gi >= pl->k0 && gi < pl->k1 && fabs(gv - cv) <= RED_ABS &&
                        fabs(gv - w[gi]) <= RED_ABS,
                    "%s: top_k row %lld rank %lld: index %d value %.9g "
                    "(its weight %.9g), expected %d value %.9g",
                    what, (long long)row, (long long)t, gi, (double)gv,
                    gi >= pl->k0 && gi < pl->k1 ? w[gi] : NAN, ci, (double)cv);
      const double a = w[gi], c = w[ci];
      ck_assert_msg(gi == ci || (a != c && fabs(a - c) <= RED_TIE * fmax(a, c)),
                    "%s: top_k row %lld rank %lld: index %d (weight %.12g), "
                    "expected %d (weight %.12g): not a near tie",
                    what, (long long)row, (long long)t, gi, a, ci, c);
      ck_assert_msg(t == 0 || gv <= got->top_k_value[row * K + t - 1],
                    "%s: top_k row %lld: rank %lld out of order", what,
                    (long long)row, (long long)t);
    }
  }
  const struct {
    const char *name;
    const float *got, *want;
    int64_t n;
  } arrays[] = {
      {"pooled", got->pooled, want->pooled, pl->pooled_elems},
      {"entropy", got->entropy, want->entropy, pl->stats_elems},
      {"sink", got->sink, want->sink, pl->stats_elems},
      {"distance", got->distance, want->distance, pl->stats_elems},
  };
  for (size_t k = 0; k < sizeof arrays / sizeof *arrays; k++) {
    if (arrays[k].n == 0 || !arrays[k].got)
      continue;
    double e = tu_rel_err_f(arrays[k].got, arrays[k].want, (size_t)arrays[k].n);
    ck_assert_msg(e <= tol, "%s: %s relative error %.3e (tolerance %.0e)", what,
                  arrays[k].name, e, tol);
  }
}

/* Runs red case i on `ex` (NULL: the CPU core alone, against the
 * reference), else against the CPU core and the reference. */
static void run_red_case(int i, const attn_exec_t *ex) {
  const red_case_t *rc = &red_cases[i];
  const int bf16 = ex && ex->precision == ATTN_PRECISION_BF16;
  tu_case_t c;
  red_case_build(&c, i, bf16);
  ref_result_t ref;
  ref_reduce_t rr;
  ck_assert_int_eq(ref_attention(&c.p, &ref), 0);
  ck_assert_int_eq(ref_reduce(&c.p, &ref, &rr), 0);
  tu_run_t cpu, gpu;
  ck_assert_int_eq(tu_run(&cpu, &c.p, NULL), 0);
  attn_outputs_t want;
  ref_outputs(&rr, &cpu.plan, &want);
  char what[200];
  snprintf(what, sizeof what, "%s (%s)", rc->name,
           ex ? attn_precision_name(ex->precision) : "cpu");
  if (ex == NULL) {
    compare_reduce(what, &c.p, &cpu.plan, &cpu.o, &want, &ref, FP32_TOL);
  } else {
    ck_assert_int_eq(tu_run(&gpu, &c.p, ex), 0);
    ck_assert_int_eq(gpu.plan.backend, ATTN_BACKEND_CUDA);
    compare_reduce(what, &c.p, &gpu.plan, &gpu.o, &cpu.o, &ref, FP32_TOL);
    compare_reduce(what, &c.p, &gpu.plan, &gpu.o, &want, &ref, FP32_TOL);
    double e = tu_rel_err(gpu.o.out, ref.out, (size_t)gpu.plan.out_elems);
    ck_assert_msg(e <= (bf16 ? BF16_TOL : FP32_TOL),
                  "%s: out relative error %.3e", what, e);
    tu_run_free(&gpu);
  }
  ref_outputs_free(&want);
  tu_run_free(&cpu);
  ref_reduce_free(&rr);
  ref_result_free(&ref);
  tu_case_free(&c);
}

/* Every reduction case on the CPU core against the reference, in every
 * build: a GPU case's failure is then the GPU's. */
START_TEST(test_red_table_on_cpu) {
  run_red_case(_i, NULL);
}
END_TEST

START_TEST(test_gpu_reduce_fp32) {
  attn_exec_t ex = {.backend = ATTN_BACKEND_CUDA};
  run_red_case(_i, &ex);
}
END_TEST

START_TEST(test_gpu_reduce_bf16) {
  attn_exec_t ex = {.backend = ATTN_BACKEND_CUDA,
                    .precision = ATTN_PRECISION_BF16};
  run_red_case(_i, &ex);
}
END_TEST

/* ---- a kv cache in device memory ---------------------------------------
 *
 * The same layer-like problem as tests/check_kv.c (projections with
 * biases, per-head norms, partial rope, GQA, causal) appended chunk by
 * chunk to two caches, one in host pages on the CPU core and one in
 * device pages (attn_cuda_alloc) on the GPU, both NaN until written: each
 * call's outputs, weights and k_absmax agree within the precision's
 * tolerance, and so do the pages' cells it wrote; the rest of a page it
 * began is zero in both. The CPU core's kv path is itself checked against
 * the float64 reference in check_kv. */

enum { KV_E = 48, KV_H = 4, KV_HKV = 2, KV_N = 160, KV_PAGES = 4 };

typedef struct kv_shape {
  int64_t Dh, Dv, rope_dims;
} kv_shape_t;

/* Dv = 12 has 4 columns of padding per head (Dvp = 16) */
static const kv_shape_t kv_shapes[] = {{16, 16, 12}, {8, 12, 6}};

/* The layer (tests/testutil.h) of one shape, with the hidden states of
 * two sequences and their extra tokens. */
typedef struct kv_layer {
  kv_shape_t sh;
  tu_layer_t w;
} kv_layer_t;

static void kv_layer_init(kv_layer_t *l, const kv_shape_t *sh, uint64_t seed) {
  l->sh = *sh;
  l->w = (tu_layer_t){.E = KV_E,
                      .H = KV_H,
                      .Hkv = KV_HKV,
                      .Dh = sh->Dh,
                      .Dv = sh->Dv,
                      .rope_dims = sh->rope_dims};
  tu_layer_init(&l->w, seed, 2 * KV_N);
}

/* One sequence's two caches: host pages for the CPU, device pages for the
 * GPU, as many tokens in each. */
typedef struct kv_pair {
  size_t floats; /* attn_kv_page_floats */
  float *host[KV_PAGES], *dev[KV_PAGES];
  int64_t past;
  float host_absmax, dev_absmax;
} kv_pair_t;

static void kv_pair_init(kv_pair_t *c, const kv_shape_t *sh) {
  memset(c, 0, sizeof *c);
  c->floats = attn_kv_page_floats(KV_HKV, sh->Dh, sh->Dv);
  for (int i = 0; i < KV_PAGES; i++) {
    c->host[i] = aligned_alloc(64, (c->floats * 4 + 63) / 64 * 64);
    ck_assert_ptr_nonnull(c->host[i]);
    for (size_t k = 0; k < c->floats; k++)
      c->host[i][k] = NAN;
    c->dev[i] = attn_cuda_alloc(c->floats * 4);
    ck_assert_ptr_nonnull(c->dev[i]);
    ck_assert_int_eq(attn_cuda_copy(c->dev[i], c->host[i], c->floats * 4), 0);
  }
}

static void kv_pair_free(kv_pair_t *c) {
  for (int i = 0; i < KV_PAGES; i++) {
    free(c->host[i]);
    attn_cuda_free(c->dev[i]);
  }
}

/* The cells of item pages `c` that keys [t0, t1) fill (K's column t of
 * each row, V's row t up to Hkv·Dvp), device against host: within tol,
 * and V's head padding zero in both. */
static void kv_compare_pages(const kv_pair_t *c, const kv_shape_t *sh,
                             int64_t t0, int64_t t1, double tol,
                             const char *what) {
  const int64_t nk = KV_HKV * sh->Dh, Dvp = (sh->Dv + 15) / 16 * 16;
  const int64_t ldv = KV_HKV * Dvp + 16;
  const size_t voff = attn_kv_v_offset(KV_HKV, sh->Dh);
  const int64_t n = (t1 - t0) * (nk + KV_HKV * sh->Dv);
  float *got = malloc((size_t)n * 4), *want = malloc((size_t)n * 4);
  float *page = malloc(c->floats * 4);
  int64_t k = 0;
  for (int64_t t = t0; t < t1; t++) {
    const int64_t pg = t / ATTN_KV_PAGE, s = t % ATTN_KV_PAGE;
    ck_assert_int_eq(attn_cuda_copy(page, c->dev[pg], c->floats * 4), 0);
    const float *h = c->host[pg];
    for (int64_t r = 0; r < nk; r++, k++)
      got[k] = page[r * ATTN_KV_LDK + s], want[k] = h[r * ATTN_KV_LDK + s];
    for (int64_t col = 0; col < KV_HKV * Dvp; col++) {
      const size_t at = voff + (size_t)(s * ldv + col);
      if (col % Dvp < sh->Dv) {
        got[k] = page[at], want[k++] = h[at];
      } else {
        ck_assert_msg(page[at] == 0 && h[at] == 0,
                      "%s: value padding of key %lld, column %lld: %g on the "
                      "device, %g on the host",
                      what, (long long)t, (long long)col, (double)page[at],
                      (double)h[at]);
      }
    }
  }
  ck_assert_int_eq(k, n);
  double e = tu_rel_err_f(got, want, (size_t)n);
  ck_assert_msg(e <= tol, "%s: the page cells of keys [%lld, %lld): error %g",
                what, (long long)t0, (long long)t1, e);
  free(got), free(want), free(page);
}

/* The rest of the page that key `end` falls in, after a call that began
 * it: zero on the device, every key and value slot (as the host). */
static void kv_check_tail(const kv_pair_t *c, const kv_shape_t *sh, int64_t end,
                          const char *what) {
  if (end % ATTN_KV_PAGE == 0)
    return;
  const int64_t nk = KV_HKV * sh->Dh, Dvp = (sh->Dv + 15) / 16 * 16;
  const int64_t ldv = KV_HKV * Dvp + 16;
  const size_t voff = attn_kv_v_offset(KV_HKV, sh->Dh);
  float *page = malloc(c->floats * 4);
  ck_assert_int_eq(
      attn_cuda_copy(page, c->dev[end / ATTN_KV_PAGE], c->floats * 4), 0);
  for (int64_t s = end % ATTN_KV_PAGE; s < ATTN_KV_PAGE; s++) {
    for (int64_t r = 0; r < nk; r++)
      ck_assert_msg(page[r * ATTN_KV_LDK + s] == 0,
                    "%s: key slot %lld of the last page is %g", what,
                    (long long)s, (double)page[r * ATTN_KV_LDK + s]);
    for (int64_t col = 0; col < ldv; col++)
      ck_assert_msg(page[voff + (size_t)(s * ldv + col)] == 0,
                    "%s: value slot %lld of the last page is %g", what,
                    (long long)s, (double)page[voff + (size_t)(s * ldv + col)]);
  }
  free(page);
}

/* Runs p on the CPU core over the host cache hk and on the GPU over the
 * device cache dk (each call writes its own cache's pages), and compares
 * the outputs and weights within the precision's tolerance; Lk is the
 * call's key count. */
static void kv_run_both(attn_params_t *p, attn_kv_t *hk, attn_kv_t *dk,
                        attn_precision_t prec, int64_t Lk, const char *what) {
  const double tol = prec == ATTN_PRECISION_BF16 ? BF16_TOL : FP32_TOL;
  tu_run_t cpu, gpu;
  p->kv = hk;
  ck_assert_int_eq(tu_run(&cpu, p, NULL), 0);
  p->kv = dk;
  attn_exec_t ex = {.backend = ATTN_BACKEND_CUDA, .precision = prec};
  ck_assert_int_eq(tu_run(&gpu, p, &ex), 0);
  ck_assert_int_eq(gpu.plan.Lk, Lk);
  double e_out = tu_rel_err_f(gpu.o.out, cpu.o.out, (size_t)cpu.plan.out_elems);
  double e_w = tu_rel_err_f(gpu.o.weights, cpu.o.weights,
                            (size_t)cpu.plan.weights_elems);
  ck_assert_msg(e_out <= tol && e_w <= tol,
                "%s, %s, %lld keys: out error %.3e, weights error %.3e "
                "against the cpu core (tolerance %.0e)",
                what, attn_precision_name(prec), (long long)Lk, e_out, e_w,
                tol);
  tu_run_free(&gpu);
  tu_run_free(&cpu);
}

/* Without the weights: flash version 4 then reads K and V out of the
 * pages in place (core/cuda/forward.cu), not from a gathered copy. */
static int kv_no_weights;

/* Appends x [n, E] to both caches of c in one call each and compares
 * them (above). */
static void kv_append(const kv_layer_t *l, kv_pair_t *c, const float *x,
                      int64_t n, attn_precision_t prec, const char *what) {
  const double tol = prec == ATTN_PRECISION_BF16 ? BF16_TOL : FP32_TOL;
  attn_params_t p = tu_layer_params(&l->w, tu_t2(x, n, KV_E));
  p.want_weights = !kv_no_weights;
  float *const *host = c->host, *const *dev = c->dev;
  const int64_t before = c->past;
  attn_kv_t hk = {
      .past = &c->past, .pages = &host, .k_absmax = &c->host_absmax};
  attn_kv_t dk = {
      .past = &c->past, .pages = &dev, .k_absmax = &c->dev_absmax, .device = 1};
  kv_run_both(&p, &hk, &dk, prec, before + n, what);
  ck_assert_msg(fabs(c->dev_absmax - c->host_absmax) <= tol * c->host_absmax,
                "%s: k_absmax %g on the device, %g on the host", what,
                (double)c->dev_absmax, (double)c->host_absmax);
  kv_compare_pages(c, &l->sh, before, before + n, tol, what);
  if ((before + n - 1) / ATTN_KV_PAGE * ATTN_KV_PAGE >= before)
    kv_check_tail(c, &l->sh, before + n, what);
  c->past += n;
}

/* i: shape (i / 2) x fp32 / bf16 (i % 2). Chunks that end inside a
 * page, on its last slot, across two, and one token; then a cut back to
 * 70 tokens (the server's truncate: past lowered, the slots after it
 * stale) and more appended. */
static void kv_append_case(int _i) {
  const kv_shape_t *sh = &kv_shapes[_i / 2];
  const attn_precision_t prec =
      _i % 2 ? ATTN_PRECISION_BF16 : ATTN_PRECISION_FP32;
  static const int64_t chunks[] = {5, 1, 58, 65, 1, 13};
  kv_layer_t l;
  kv_layer_init(&l, sh, 40 + (uint64_t)_i);
  kv_pair_t c;
  kv_pair_init(&c, sh);
  char what[96];
  int64_t t = 0;
  for (size_t k = 0; k < sizeof chunks / sizeof chunks[0]; k++) {
    snprintf(what, sizeof what, "Dh %lld Dv %lld, chunk of %lld",
             (long long)sh->Dh, (long long)sh->Dv, (long long)chunks[k]);
    kv_append(&l, &c, l.w.x + t * KV_E, chunks[k], prec, what);
    t += chunks[k];
  }
  c.past = 70;
  kv_append(&l, &c, l.w.x + KV_N * KV_E, 9, prec, "after a cut to 70");
  kv_append(&l, &c, l.w.x + (KV_N + 9) * KV_E, 1, prec, "after a cut, one");
  kv_pair_free(&c);
  tu_layer_free(&l.w);
}

START_TEST(test_gpu_kv_append) {
  kv_append_case(_i);
}
END_TEST

/* with flash version 4: past 129 keys, its steps split them (offsets from
 * the items' past lengths in every range); with the weights (K and V
 * gathered out of the pages first) and without (read in place) */
START_TEST(test_gpu_kv_append_v4) {
  attn__cuda_flash_version = 4;
  kv_append_case(_i);
  kv_no_weights = 1;
  kv_append_case(_i);
  kv_no_weights = 0;
  attn__cuda_flash_version = 0;
}
END_TEST

/* Two items of different past lengths in one call (70 and 10 cached, 3
 * new each), plain and with a window, ALiBi and a softcap: every term
 * that reads an item's own offset. */
START_TEST(test_gpu_kv_batch) {
  const attn_precision_t prec =
      _i % 2 ? ATTN_PRECISION_BF16 : ATTN_PRECISION_FP32;
  const double tol = prec == ATTN_PRECISION_BF16 ? BF16_TOL : FP32_TOL;
  const kv_shape_t *sh = &kv_shapes[0];
  enum { NEW = 3 };
  const int64_t past[2] = {70, 10};
  kv_layer_t l;
  kv_layer_init(&l, sh, 50 + (uint64_t)_i);
  kv_pair_t c[2];
  for (int b = 0; b < 2; b++) {
    kv_pair_init(&c[b], sh);
    kv_append(&l, &c[b], l.w.x + b * KV_N * KV_E, past[b], prec, "prefill");
  }
  for (int terms = 0; terms < 2; terms++) {
    float *q = malloc(sizeof(float) * 2 * NEW * KV_E);
    for (int b = 0; b < 2; b++)
      memcpy(q + b * NEW * KV_E, l.w.x + (b * KV_N + past[b]) * KV_E,
             sizeof(float) * NEW * KV_E);
    attn_params_t p = tu_layer_params(&l.w, tu_t3(q, 2, NEW, KV_E));
    if (terms)
      tu_layer_add_terms(&p);
    float *const *host[2] = {c[0].host, c[1].host};
    float *const *dev[2] = {c[0].dev, c[1].dev};
    float habs[2] = {c[0].host_absmax, c[1].host_absmax};
    float dabs[2] = {c[0].dev_absmax, c[1].dev_absmax};
    attn_kv_t hk = {.past = past, .pages = host, .k_absmax = habs};
    attn_kv_t dk = {.past = past, .pages = dev, .k_absmax = dabs, .device = 1};
    kv_run_both(&p, &hk, &dk, prec, 73,
                terms ? "batch of 2, window, alibi, softcap" : "batch of 2");
    for (int b = 0; b < 2; b++)
      kv_compare_pages(&c[b], sh, past[b], past[b] + NEW, tol, "batch");
    free(q);
  }
  for (int b = 0; b < 2; b++)
    kv_pair_free(&c[b]);
  tu_layer_free(&l.w);
}
END_TEST

#define N_KV_SHAPES ((int)(sizeof kv_shapes / sizeof kv_shapes[0]))

/* Each backend refuses the other's pages, naming kv: in every build, the
 * cpu refuses pages marked device memory (and never reads them). */
START_TEST(test_kv_device_pages_on_cpu) {
  tu_case_t c;
  tu_spec_t s = {.Lq = 5, .H = 2, .Dh = 8, .proj = TU_ALLPROJ};
  tu_case_build(&c, &s, 12);
  float *page = aligned_alloc(64, 64 * 64);
  float *const table[1] = {page};
  float *const *const tables[1] = {table};
  int64_t past[1] = {0};
  float absmax[1] = {0};
  attn_kv_t kv = {
      .past = past, .pages = tables, .k_absmax = absmax, .device = 1};
  c.p.kv = &kv;
  attn_plan_t plan;
  attn_error_t err;
  ck_assert_int_eq(attn_plan_init(&plan, &c.p, NULL, &err), ATTN_ENOTSUP);
  ck_assert_str_eq(err.field, "kv");
  ck_assert_ptr_nonnull(strstr(err.message, "backend cuda"));
  free(page);
  tu_case_free(&c);
}
END_TEST

/* ---- calls on several threads -------------------------------------------
 *
 * The server's workers call attn_forward at once, each on its own thread
 * (its own stream, events and cuBLAS handle, core/cuda/forward.cu). Their
 * threads here report what they saw into their job, and the test asserts
 * it once they are joined: Check's assertions run on the test's thread
 * alone. */

/* Calls a thread makes in test_gpu_two_widths_at_once. */
enum { RACE_CALLS = 100 };

/* The head widths raced, each pair in one precision: both past 48 KB of
 * dynamic shared memory, or the wider one alone, with a narrower one
 * beside it (flash_cores.cuh's smem_bytes, attention.cu's v2_layout):
 * bf16 64 and 128, flash version 2 (65,792 and 106,752 bytes); fp32 64 and
 * 256, version 1 (18,560 and 73,856); bf16 72 and 248, version 1 on
 * bfloat16 (widths not multiples of 16: 20,864 and 71,552). */
static const struct {
  attn_precision_t prec;
  int64_t Dh[2];
} race_pairs[] = {
    {ATTN_PRECISION_BF16, {64, 128}},
    {ATTN_PRECISION_FP32, {64, 256}},
    {ATTN_PRECISION_BF16, {72, 248}},
};
#define N_RACE_PAIRS ((int)(sizeof race_pairs / sizeof race_pairs[0]))

/* One thread's calls of one plan, and what they gave. */
typedef struct race_job {
  const attn_plan_t *plan; /* out alone asked for */
  const ref_result_t *ref;
  const float *cpu_out; /* the CPU core's out */
  double tol;
  pthread_barrier_t *start; /* each call starts with the other thread's */
  float *out;
  void *ws;
  int failed, first_failed; /* calls that did not return 0; the first */
  int first_rc;
  attn_error_t first_err;
  int off, first_off;      /* calls whose out was past tol; the first */
  double off_ref, off_cpu; /* the first one's errors */
} race_job_t;

static void *race_worker(void *arg) {
  race_job_t *j = arg;
  const attn_plan_t *pl = j->plan;
  for (int k = 0; k < RACE_CALLS; k++) {
    pthread_barrier_wait(j->start);
    for (int64_t e = 0; e < pl->out_elems; e++)
      j->out[e] = NAN;
    attn_outputs_t o = {.out = j->out};
    attn_error_t err;
    int rc = attn_forward(pl, &o, j->ws, pl->workspace_bytes, &err);
    if (rc != 0) {
      if (j->failed++ == 0) {
        j->first_failed = k;
        j->first_rc = rc;
        j->first_err = err;
      }
      continue; /* every call meets the barrier: no early end */
    }
    double e_ref = tu_rel_err(j->out, j->ref->out, (size_t)pl->out_elems);
    double e_cpu = tu_rel_err_f(j->out, j->cpu_out, (size_t)pl->out_elems);
    if (!(e_ref <= j->tol && e_cpu <= j->tol) && j->off++ == 0) {
      j->first_off = k;
      j->off_ref = e_ref;
      j->off_cpu = e_cpu;
    }
  }
  return NULL;
}

/* _i: a pair of race_pairs. Two threads call attn_forward RACE_CALLS
 * times each, one with each width of the pair, each call starting as the
 * other thread's does (a barrier); every call must succeed and match the
 * reference and the CPU core. Flash versions 1 and 2 once set their
 * kernel's shared memory limit (an attribute of the function, for every
 * thread) to each call's own size just before its launch: the narrower
 * call's setting, between the wider one's and its launch, failed that
 * launch (cudaErrorInvalidValue). A race: each call's chance to meet it
 * is small, hence the calls' number and the barrier. Each problem runs
 * once alone first, checking which version runs it. */
START_TEST(test_gpu_two_widths_at_once) {
  const attn_precision_t prec = race_pairs[_i].prec;
  const double tol = prec == ATTN_PRECISION_BF16 ? BF16_TOL : FP32_TOL;
  attn_exec_t ex = {.backend = ATTN_BACKEND_CUDA, .precision = prec};
  attn__cuda_flash_version = 0; /* the default, as the server runs */
  pthread_barrier_t start;
  ck_assert_int_eq(pthread_barrier_init(&start, NULL, 2), 0);
  tu_case_t c[2];
  ref_result_t ref[2];
  tu_run_t cpu[2], gpu[2];
  race_job_t job[2];
  char what[2][96];
  for (int k = 0; k < 2; k++) {
    const int64_t Dh = race_pairs[_i].Dh[k];
    tu_spec_t s = {
        .Lq = 16, .H = 2, .Dh = Dh, .skip = TU_SKIP_W | TU_SKIP_M | TU_SKIP_HO};
    tu_case_build(&c[k], &s, 1500 + 2 * (uint64_t)_i + (uint64_t)k);
    ck_assert_int_eq(ref_attention(&c[k].p, &ref[k]), 0);
    ck_assert_int_eq(tu_run(&cpu[k], &c[k].p, NULL), 0);
    ck_assert_int_eq(tu_run(&gpu[k], &c[k].p, &ex), 0);
    const int want = flash_version_for(prec, 0, Dh, Dh);
    snprintf(what[k], sizeof what[k], "Dh %lld (flash v%d), alone",
             (long long)Dh, want);
    ck_assert_msg(attn__cuda_flash_last == want,
                  "%s: flash version %d ran, %d expected", what[k],
                  attn__cuda_flash_last, want);
    compare(what[k], attn_precision_name(prec), tol, &gpu[k], &cpu[k], &ref[k],
            &c[k].p);
    snprintf(what[k], sizeof what[k], "Dh %lld (flash v%d)", (long long)Dh,
             want);
    const attn_plan_t *pl = &gpu[k].plan;
    job[k] = (race_job_t){.plan = pl,
                          .ref = &ref[k],
                          .cpu_out = cpu[k].o.out,
                          .tol = tol,
                          .start = &start};
    job[k].out = malloc((size_t)pl->out_elems * sizeof(float));
    job[k].ws = aligned_alloc(64, (pl->workspace_bytes + 63) / 64 * 64 + 64);
    ck_assert_ptr_nonnull(job[k].out);
    ck_assert_ptr_nonnull(job[k].ws);
  }
  pthread_t th[2];
  for (int k = 0; k < 2; k++)
    ck_assert_int_eq(pthread_create(&th[k], NULL, race_worker, &job[k]), 0);
  for (int k = 0; k < 2; k++)
    ck_assert_int_eq(pthread_join(th[k], NULL), 0);
  for (int k = 0; k < 2; k++) {
    const race_job_t *j = &job[k];
    ck_assert_msg(j->failed == 0,
                  "%s, %s, beside Dh %lld: %d of %d calls failed, the first "
                  "(call %d) %d %s (field '%s'): %s",
                  what[k], attn_precision_name(prec),
                  (long long)race_pairs[_i].Dh[1 - k], j->failed, RACE_CALLS,
                  j->first_failed, j->first_rc, attn_errname(j->first_rc),
                  j->first_err.field, j->first_err.message);
    ck_assert_msg(j->off == 0,
                  "%s, %s, beside Dh %lld: out of %d of %d calls past "
                  "tolerance %.0e, the first (call %d) %.3e against the "
                  "reference, %.3e against the cpu core",
                  what[k], attn_precision_name(prec),
                  (long long)race_pairs[_i].Dh[1 - k], j->off, RACE_CALLS, tol,
                  j->first_off, j->off_ref, j->off_cpu);
  }
  for (int k = 0; k < 2; k++) {
    free(job[k].out);
    free(job[k].ws);
    tu_run_free(&gpu[k]);
    tu_run_free(&cpu[k]);
    ref_result_free(&ref[k]);
    tu_case_free(&c[k]);
  }
  pthread_barrier_destroy(&start);
}
END_TEST

/* A thread's canceled call, then its good one. */
typedef struct after_cancel_job {
  const attn_plan_t *plan; /* planned with .cancel = cancel */
  int *cancel;
  attn_outputs_t o;
  void *ws;
  int rc[2];
  attn_error_t err[2];
} after_cancel_job_t;

static void *after_cancel_worker(void *arg) {
  after_cancel_job_t *j = arg;
  for (int k = 0; k < 2; k++) {
    *j->cancel = k == 0; /* this thread's own flag, read on this thread */
    j->rc[k] = attn_forward(j->plan, &j->o, j->ws, j->plan->workspace_bytes,
                            &j->err[k]);
  }
  return NULL;
}

/* _i: fp32 / bf16. A call canceled (attn_exec_t's cancel flag, set before
 * it: read as its first stage is enqueued) is ATTN_ECANCELED, and the next
 * call on the same thread succeeds and matches the reference and the CPU
 * core. On a new thread (its events made at its first call), the canceled
 * call leaves three of its four stage marks never recorded, and reading
 * their times fails (cudaErrorInvalidResourceHandle, not sticky): that
 * error was once left as the thread's last error, and the next call's
 * first launch (here finish on Q: no projections, so that no cuBLAS call
 * comes before it) returned it, ATTN_EDEVICE for a good call. */
START_TEST(test_gpu_call_after_canceled) {
  const attn_precision_t prec = _i ? ATTN_PRECISION_BF16 : ATTN_PRECISION_FP32;
  const double tol = _i ? BF16_TOL : FP32_TOL;
  attn__cuda_flash_version = 0;
  tu_case_t c;
  tu_spec_t s = {.Lq = 30, .H = 2, .Dh = 32}; /* every output asked for */
  tu_case_build(&c, &s, 1600 + (uint64_t)_i);
  ref_result_t ref;
  ck_assert_int_eq(ref_attention(&c.p, &ref), 0);
  tu_run_t cpu;
  ck_assert_int_eq(tu_run(&cpu, &c.p, NULL), 0);
  int cancel = 0;
  attn_exec_t ex = {
      .backend = ATTN_BACKEND_CUDA, .precision = prec, .cancel = &cancel};
  attn_plan_t plan;
  attn_error_t err;
  ck_assert_msg(attn_plan_init(&plan, &c.p, &ex, &err) == 0, "%s", err.message);
  ck_assert_int_eq(plan.backend, ATTN_BACKEND_CUDA);
  after_cancel_job_t j = {.plan = &plan, .cancel = &cancel};
  float **buf[4] = {&j.o.out, &j.o.weights, &j.o.mean_weights,
                    &j.o.head_outputs};
  const int64_t n[4] = {plan.out_elems, plan.weights_elems, plan.mean_elems,
                        plan.head_elems};
  for (int k = 0; k < 4; k++) {
    *buf[k] = malloc((size_t)n[k] * sizeof(float));
    ck_assert_ptr_nonnull(*buf[k]);
    for (int64_t e = 0; e < n[k]; e++)
      (*buf[k])[e] = NAN; /* what no call wrote fails the comparison */
  }
  j.ws = aligned_alloc(64, (plan.workspace_bytes + 63) / 64 * 64 + 64);
  ck_assert_ptr_nonnull(j.ws);
  pthread_t th;
  ck_assert_int_eq(pthread_create(&th, NULL, after_cancel_worker, &j), 0);
  ck_assert_int_eq(pthread_join(th, NULL), 0);
  ck_assert_msg(j.rc[0] == ATTN_ECANCELED,
                "%s: the canceled call: %d %s (field '%s'): %s",
                attn_precision_name(prec), j.rc[0], attn_errname(j.rc[0]),
                j.err[0].field, j.err[0].message);
  ck_assert_msg(j.rc[1] == 0,
                "%s: the call after a canceled one on its thread: %d %s "
                "(field '%s'): %s",
                attn_precision_name(prec), j.rc[1], attn_errname(j.rc[1]),
                j.err[1].field, j.err[1].message);
  const tu_run_t gpu = {.plan = plan, .o = j.o}; /* compare reads these */
  compare("the call after a canceled one", attn_precision_name(prec), tol, &gpu,
          &cpu, &ref, &c.p);
  for (int k = 0; k < 4; k++)
    free(*buf[k]);
  free(j.ws);
  tu_run_free(&cpu);
  ref_result_free(&ref);
  tu_case_free(&c);
}
END_TEST

/* ---- device memory and a failed device --------------------------------- */

/* 256-byte blocks, as forward.cu lays its buffers out. */
static size_t blocks(int64_t bytes) {
  return (size_t)(bytes + 255) / 256 * 256;
}

/* core/cuda/forward.cu's count of a plan's device memory. */
extern size_t attn__cuda_device_bytes(const attn_plan_t *plan);

/* The device memory of p's call in `prec`: plan.device_bytes where the GPU
 * is; elsewhere (a CUDA build without one) the same count on a CPU plan
 * marked cuda, which the layout reads as the GPU's plan would be. */
static size_t device_bytes(const attn_params_t *p, attn_precision_t prec) {
  attn_plan_t plan;
  attn_error_t err;
  attn_exec_t ex = {.backend =
                        cuda.usable ? ATTN_BACKEND_CUDA : ATTN_BACKEND_CPU,
                    .precision = cuda.usable ? prec : ATTN_PRECISION_FP32};
  ck_assert_msg(attn_plan_init(&plan, p, &ex, &err) == 0, "%s", err.message);
  if (cuda.usable)
    return plan.device_bytes;
  plan.backend = ATTN_BACKEND_CUDA;
  plan.precision = prec;
  return attn__cuda_device_bytes(&plan);
}

/* device_bytes of p with its weights marked as device memory (their
 * pointers are never read to count): where no GPU is, planned on the cpu
 * unmarked, then marked. */
static size_t device_bytes_resident(const attn_params_t *p,
                                    attn_precision_t prec) {
  attn_params_t r = *p;
  r.weights_on_device = cuda.usable;
  attn_plan_t plan;
  attn_error_t err;
  attn_exec_t ex = {.backend =
                        cuda.usable ? ATTN_BACKEND_CUDA : ATTN_BACKEND_CPU,
                    .precision = cuda.usable ? prec : ATTN_PRECISION_FP32};
  ck_assert_msg(attn_plan_init(&plan, &r, &ex, &err) == 0, "%s", err.message);
  if (cuda.usable)
    return plan.device_bytes;
  r.weights_on_device = 1; /* the plan reads its params through a pointer */
  plan.backend = ATTN_BACKEND_CUDA;
  plan.precision = prec;
  return attn__cuda_device_bytes(&plan);
}

/* A plan's device_bytes is what one call takes from CUDA's pool, counted
 * here from its buffers (self-attention, fp32: the input, four weights and
 * biases, Q, K, V, the heads' outputs, out, the row sums, the dense and
 * mean weights and the head outputs asked for, the stage flags). In every
 * CUDA build: the count is the layout's, GPU or not. */
START_TEST(test_device_bytes) {
  tu_case_t c;
  small_case(&c); /* L 5, E 16, H 2: every projection with a bias */
  int64_t L = 5, E = 16, H = 2, Lk = 7;
  size_t want = blocks(L * E * 4) + 4 * (blocks(E * E * 4) + blocks(E * 4)) +
                5 * blocks(L * E * 4) + blocks(H * L * 4) +
                blocks(H * L * L * 4) + blocks(L * L * 4) + blocks(L * E * 4) +
                blocks(6 * 4);
  ck_assert_uint_eq(device_bytes(&c.p, ATTN_PRECISION_FP32), want);
  /* bf16 adds bfloat16 copies: of the weights, of the input (once: the
   * three projections share it), of Q, K and V, and of the heads'
   * outputs */
  ck_assert_uint_eq(device_bytes(&c.p, ATTN_PRECISION_BF16),
                    want + 4 * blocks(E * E * 2) + 5 * blocks(L * E * 2));
  /* cross-attention, key and value given: three inputs to round */
  tu_case_t x;
  tu_spec_t xs = {.Lq = 5,
                  .Lk = 7,
                  .H = 2,
                  .Dh = 8,
                  .cross = 1,
                  .value_given = 1,
                  .proj = TU_ALLPROJ};
  tu_case_build(&x, &xs, 8);
  ck_assert_uint_eq(device_bytes(&x.p, ATTN_PRECISION_BF16) -
                        device_bytes(&x.p, ATTN_PRECISION_FP32),
                    4 * blocks(E * E * 2) + 3 * blocks(L * E * 2) +
                        4 * blocks(Lk * E * 2));
  tu_case_free(&x);
  /* a kv cache (its pages are never read: the count is the plan's) of 70
   * keys, 3 new: K and V are read out of the pages for all 73 keys,
   * beside the new tokens' own K and V; then the page table, past, the
   * key counts and the new keys' magnitude bits */
  tu_case_t k;
  tu_spec_t ks = {.Lq = 3, .H = 2, .Dh = 8, .proj = TU_ALLPROJ};
  tu_case_build(&k, &ks, 9);
  float *page = aligned_alloc(64, 64 * 64);
  float *const table[2] = {page, page};
  float *const *const tables[1] = {table};
  int64_t past[1] = {70};
  float absmax[1] = {0};
  attn_kv_t kv = {.past = past,
                  .pages = tables,
                  .k_absmax = absmax,
                  .device = cuda.usable}; /* a plan reads no page */
  k.p.kv = &kv;
  k.p.want_weights = 0;
  k.p.want_mean_weights = 0;
  k.p.want_head_outputs = 0;
  const int64_t Lq = 3, Lkv = 73;
  size_t kv_want =
      blocks(Lq * E * 4) + 4 * (blocks(E * E * 4) + blocks(E * 4)) +
      blocks(Lq * E * 4) + 2 * blocks(Lkv * E * 4) + 2 * blocks(Lq * E * 4) +
      blocks(H * Lq * 4) + blocks(8) + 2 * blocks(Lq * E * 4) + blocks(2 * 8) +
      blocks(8) + blocks(4) + blocks(6 * 4);
  ck_assert_uint_eq(device_bytes(&k.p, ATTN_PRECISION_FP32), kv_want);
  /* bf16: the weights, the input once, Q, the 73 keys' K and V, and the
   * heads' outputs */
  ck_assert_uint_eq(device_bytes(&k.p, ATTN_PRECISION_BF16) - kv_want,
                    4 * blocks(E * E * 2) + 3 * blocks(Lq * E * 2) +
                        2 * blocks(Lkv * E * 2));
  free(page);
  tu_case_free(&k);
  /* weights in device memory are read in place: the four weights and
   * biases leave the count (bf16 still rounds them into the call's) */
  ck_assert_uint_eq(device_bytes_resident(&c.p, ATTN_PRECISION_FP32),
                    want - 4 * (blocks(E * E * 4) + blocks(E * 4)));
  ck_assert_uint_eq(device_bytes_resident(&c.p, ATTN_PRECISION_BF16),
                    want - 4 * (blocks(E * E * 4) + blocks(E * 4)) +
                        4 * blocks(E * E * 2) + 5 * blocks(L * E * 2));
  /* the weights given rounded to bf16 (weights_bf16): neither their float
   * copies nor their rounding in the call's memory, the biases still
   * copied in; ignored in fp32 */
  attn_params_t g16 = c.p;
  static const uint16_t fake[1]; /* counted, never read */
  for (int w4 = 0; w4 < 4; w4++)
    g16.weights_bf16[w4] = fake;
  ck_assert_uint_eq(device_bytes(&g16, ATTN_PRECISION_BF16),
                    want - 4 * blocks(E * E * 4) + 5 * blocks(L * E * 2));
  ck_assert_uint_eq(device_bytes(&g16, ATTN_PRECISION_FP32), want);
  tu_case_free(&c);
  /* flash version 4's partials, where a call's blocks would leave the GPU
   * idle (kernels.h, split_count): one query over 129 keys splits them in
   * two (splits of 128 keys or more), over 128 not; beyond the key, K and
   * V a key longer (the value is the key), 2 splits of B·H·Lq rows of Dv
   * floats and their m and l */
  tu_spec_t ss = {.Lq = 1, .Lk = 128, .cross = 1, .H = 8, .Hkv = 2, .Dh = 8};
  size_t step[2];
  for (int n = 0; n < 2; n++) {
    tu_case_t sc;
    ss.Lk = 128 + n;
    tu_case_build(&sc, &ss, 10);
    sc.p.want_weights = sc.p.want_mean_weights = sc.p.want_head_outputs = 0;
    step[n] = device_bytes(&sc.p, ATTN_PRECISION_FP32);
    tu_case_free(&sc);
  }
  ck_assert_uint_eq(step[1] - step[0],
                    3 * (blocks(129 * 2 * 8 * 4) - blocks(128 * 2 * 8 * 4)) +
                        blocks(2 * 8 * (8 + 2) * 4));
}
END_TEST

/* Weights in device memory need the cuda backend: the cpu refuses them,
 * naming backend, in every build (and never reads them). */
START_TEST(test_weights_on_device_cpu) {
  tu_case_t c;
  small_case(&c);
  c.p.weights_on_device = 1;
  attn_plan_t plan;
  attn_error_t err;
  ck_assert_int_eq(attn_plan_init(&plan, &c.p, NULL, &err), ATTN_ENOTSUP);
  ck_assert_str_eq(err.field, "backend");
  ck_assert_ptr_nonnull(strstr(err.message, "weights_on_device"));
  tu_case_free(&c);
}
END_TEST

/* _i: fp32 / bf16. The projections' weights and biases in device memory
 * (attn_cuda_alloc, weights_on_device) give the same bits as the same
 * call copying them in: the same arithmetic on the same numbers. In bf16,
 * so do the weights given rounded already (weights_bf16, rounded here by
 * the codec's float-to-bfloat16), while the float weights, marked device
 * memory, are host pointers: a call that read them on the GPU would
 * fail. */
START_TEST(test_gpu_weights_on_device) {
  const attn_precision_t prec = _i ? ATTN_PRECISION_BF16 : ATTN_PRECISION_FP32;
  tu_case_t c;
  small_case(&c);
  attn_exec_t ex = {.backend = ATTN_BACKEND_CUDA, .precision = prec};
  tu_run_t copied, resident;
  ck_assert_int_eq(tu_run(&copied, &c.p, &ex), 0);
  attn_params_t p = c.p;
  attn_tensor_t *t[8] = {&p.q_weight, &p.k_weight, &p.v_weight, &p.o_weight,
                         &p.q_bias,   &p.k_bias,   &p.v_bias,   &p.o_bias};
  void *dev[8];
  for (int k = 0; k < 8; k++) {
    size_t n = 4;
    for (int d = 0; d < t[k]->rank; d++)
      n *= (size_t)t[k]->dim[d];
    dev[k] = attn_cuda_alloc(n);
    ck_assert_ptr_nonnull(dev[k]);
    ck_assert_int_eq(attn_cuda_copy(dev[k], t[k]->data, n), 0);
    t[k]->data = dev[k];
  }
  p.weights_on_device = 1;
  ck_assert_int_eq(tu_run(&resident, &p, &ex), 0);
  ck_assert_uint_lt(resident.plan.device_bytes, copied.plan.device_bytes);
  ck_assert_msg(memcmp(resident.o.out, copied.o.out,
                       (size_t)copied.plan.out_elems * 4) == 0,
                "%s: out differs with the weights in device memory",
                attn_precision_name(prec));
  void *dev16[4] = {0};
  if (prec == ATTN_PRECISION_BF16) {
    for (int k = 0; k < 4; k++) {
      const attn_tensor_t *h = (const attn_tensor_t *[]){
          &c.p.q_weight, &c.p.k_weight, &c.p.v_weight, &c.p.o_weight}[k];
      size_t n = (size_t)(h->dim[0] * h->dim[1]);
      uint16_t *r = malloc(n * 2);
      for (size_t e = 0; e < n; e++)
        r[e] = attnd_bf16_from_f32(((const float *)h->data)[e]);
      dev16[k] = attn_cuda_alloc(n * 2);
      ck_assert_ptr_nonnull(dev16[k]);
      ck_assert_int_eq(attn_cuda_copy(dev16[k], r, n * 2), 0);
      free(r);
      p.weights_bf16[k] = dev16[k];
      t[k]->data = h->data; /* host memory, marked device: never read */
    }
    tu_run_t rounded;
    ck_assert_int_eq(tu_run(&rounded, &p, &ex), 0);
    ck_assert_uint_lt(rounded.plan.device_bytes, resident.plan.device_bytes);
    ck_assert_msg(memcmp(rounded.o.out, copied.o.out,
                         (size_t)copied.plan.out_elems * 4) == 0,
                  "bf16: out differs with the weights given rounded");
    tu_run_free(&rounded);
  }
  for (int k = 0; k < 8; k++)
    attn_cuda_free(dev[k]);
  for (int k = 0; k < 4; k++)
    attn_cuda_free(dev16[k]);
  tu_run_free(&resident);
  tu_run_free(&copied);
  tu_case_free(&c);
}
END_TEST

/* A call returns its device memory to CUDA's pool, which keeps it; fewer
 * threads change nothing of a GPU plan (not the CPU's workspace). */
START_TEST(test_gpu_pool) {
  tu_case_t c;
  small_case(&c);
  attn_plan_t plan;
  attn_error_t err;
  attn_exec_t ex = {.backend = ATTN_BACKEND_CUDA, .threads = 4};
  ck_assert_msg(attn_plan_init(&plan, &c.p, &ex, &err) == 0, "%s", err.message);
  ck_assert_uint_eq(plan.device_bytes, attn__cuda_device_bytes(&plan));
  attn_plan_t one = plan;
  ck_assert_int_eq(attn_plan_set_threads(&one, 1), 0);
  ck_assert_uint_eq(one.workspace_bytes, plan.workspace_bytes);
  attn_cuda_memory_t before, after;
  ck_assert_int_eq(attn_cuda_memory(&before), 0);
  float *out = malloc((size_t)plan.out_elems * sizeof(float));
  void *ws = aligned_alloc(64, (plan.workspace_bytes + 63) / 64 * 64);
  attn_outputs_t o = {.out = out};
  ck_assert_int_eq(attn_forward(&plan, &o, ws, plan.workspace_bytes, &err), 0);
  ck_assert_int_eq(attn_cuda_memory(&after), 0);
  ck_assert_uint_eq(after.pool_used, before.pool_used);
  ck_assert_uint_ge(after.pool_high, plan.device_bytes);
  ck_assert_uint_ge(after.pool_reserved, after.pool_used);
  ck_assert_uint_eq(after.total, cuda.memory_bytes);
  ck_assert_uint_le(after.free, after.total);
  free(ws), free(out);
  tu_case_free(&c);
}
END_TEST

/* Where the backend is unusable, attn_cuda_memory says so; a CPU plan
 * takes no device memory. */
START_TEST(test_memory_unusable) {
  attn_cuda_memory_t m;
  memset(&m, 0xff, sizeof m);
  ck_assert_int_eq(attn_cuda_memory(&m), -1);
  ck_assert_uint_eq(m.total, 0);
  ck_assert_uint_eq(m.pool_reserved, 0);
  tu_case_t c;
  small_case(&c);
  attn_plan_t plan;
  ck_assert_int_eq(attn_plan_init(&plan, &c.p, NULL, NULL), 0);
  ck_assert_uint_eq(plan.device_bytes, 0);
  tu_case_free(&c);
}
END_TEST

/* core/cuda/forward.cu's hook: a kernel that traps, through the path a
 * call's errors take. */
extern int attn__cuda_trap(void);

/* core/cuda/forward.cu's test of a CUDA error (a cudaError_t). */
extern int attn__cuda_sticky(int error);

/* The errors that leave the CUDA context unusable, which make the backend
 * unusable from then on (test_gpu_lost makes one happen): each one that
 * CUDA 13's driver_types.h says needs the process "terminated and
 * relaunched", by its value there, and none of the errors a call survives.
 * Bug: one of them read as a passing error (error containment's on a
 * Hopper GPU, 226), so that every later call fails while the health
 * checks say 200. In a CUDA build, GPU or not: a pure function. */
START_TEST(test_sticky_errors) {
  static const int sticky[] = {
      214, /* cudaErrorECCUncorrectable */
      226, /* cudaErrorContained */
      700, /* cudaErrorIllegalAddress */
      702, /* cudaErrorLaunchTimeout */
      710, /* cudaErrorAssert */
      714, /* cudaErrorHardwareStackError */
      715, /* cudaErrorIllegalInstruction */
      716, /* cudaErrorMisalignedAddress */
      717, /* cudaErrorInvalidAddressSpace */
      718, /* cudaErrorInvalidPc */
      719, /* cudaErrorLaunchFailure */
      721, /* cudaErrorTensorMemoryLeak */
      810, /* cudaErrorMpsClientTerminated */
      911, /* cudaErrorExternalDevice */
  };
  static const int passing[] = {
      0,   /* cudaSuccess */
      1,   /* cudaErrorInvalidValue */
      2,   /* cudaErrorMemoryAllocation */
      9,   /* cudaErrorInvalidConfiguration */
      400, /* cudaErrorInvalidResourceHandle */
      600, /* cudaErrorNotReady */
      701, /* cudaErrorLaunchOutOfResources */
      720, /* cudaErrorCooperativeLaunchTooLarge */
  };
  for (size_t i = 0; i < sizeof sticky / sizeof *sticky; i++)
    ck_assert_msg(attn__cuda_sticky(sticky[i]), "error %d", sticky[i]);
  for (size_t i = 0; i < sizeof passing / sizeof *passing; i++)
    ck_assert_msg(!attn__cuda_sticky(passing[i]), "error %d", passing[i]);
}
END_TEST

/* A device that failed (here a kernel that traps: CUDA's sticky errors
 * leave the context unusable) is unusable from then on: attn_cuda_info
 * says so and why, plans for it are refused naming backend, and its memory
 * cannot be read. The last case: the device is gone after it. */
START_TEST(test_gpu_lost) {
  ck_assert_int_ne(attn__cuda_trap(), 0);
  attn_cuda_info_t ci;
  attn_cuda_info(&ci);
  ck_assert_int_eq(ci.usable, 0);
  ck_assert_msg(strstr(ci.status, "restart") != NULL, "status '%s'", ci.status);
  tu_case_t c;
  small_case(&c);
  attn_error_t err;
  ck_assert_int_eq(plan_cuda(&c.p, ATTN_PRECISION_FP32, &err), ATTN_ENOTSUP);
  ck_assert_str_eq(err.field, "backend");
  ck_assert_ptr_nonnull(strstr(err.message, "device failed"));
  attn_cuda_memory_t m;
  ck_assert_int_eq(attn_cuda_memory(&m), -1);
  tu_case_free(&c);
}
END_TEST

/* ---- the suite ------------------------------------------------------------
 */

/* The line saying how many GPU cases did not run, of each kind, up to the
 * reason that test_setup prints after it. */
static void skip_line(char *dst, size_t size) {
  snprintf(dst, size,
           "check_cuda: SKIP: %d GPU cases not run (%d fp32 with flash "
           "versions 1, 3 and 4, %d bf16 with each flash version, 2 numeric, "
           "%d reductions in fp32 and bf16, %d kv caches in device memory, 2 "
           "with weights in device memory, %d with two head widths at once, "
           "2 after a canceled call)",
           7 * N_GPU_CASES + 2 + 2 * N_RED_CASES + 4 * N_KV_SHAPES + 4 +
               N_RACE_PAIRS + 2,
           3 * N_GPU_CASES, 4 * N_GPU_CASES, 2 * N_RED_CASES,
           4 * N_KV_SHAPES + 2, N_RACE_PAIRS);
}

/* docs/cuda.md quotes the skip line, "<why>" for the reason: its counts
 * change with the tables, and a quote left behind tells a reader of cases
 * that are not there. Bug: a case added to a table, the doc unchanged. */
START_TEST(test_doc_quotes_skip_line) {
  char line[512], want[544];
  skip_line(line, sizeof line);
  snprintf(want, sizeof want, "%s: <why>", line);
  char *doc = tu_read_file_or_fail("docs/cuda.md", NULL);
  const char *q = strstr(doc, "\ncheck_cuda: SKIP: ");
  ck_assert_msg(q != NULL, "docs/cuda.md quotes no line 'check_cuda: SKIP:'");
  q++;
  int n = (int)strcspn(q, "\n");
  ck_assert_msg((size_t)n == strlen(want) && memcmp(q, want, (size_t)n) == 0,
                "docs/cuda.md quotes\n  %.*s\nwhere check_cuda prints\n  %s", n,
                q, want);
  free(doc);
}
END_TEST

void test_setup(void) {
  attn_cuda_info(&cuda);
  const char *req = getenv("ATTND_REQUIRE_CUDA");
  if (cuda.usable) {
    /* CUDA does not survive fork() once the parent has initialised it
     * (the probe has): Check runs these cases in this process. */
    setenv("CK_FORK", "no", 1);
    fprintf(stderr,
            "check_cuda: GPU cases on %s (sm_%d%d, %.1f GiB), CUDA runtime "
            "%d, driver %d\n",
            cuda.device, cuda.cc_major, cuda.cc_minor,
            (double)cuda.memory_bytes / (1 << 30), cuda.runtime_version,
            cuda.driver_version);
    return;
  }
  char line[512];
  skip_line(line, sizeof line);
  fprintf(stderr, "%s: %s\n", line, cuda.status);
  if (req && strcmp(req, "1") == 0) {
    fprintf(stderr, "check_cuda: FAIL: ATTND_REQUIRE_CUDA=1 and the cuda "
                    "backend is unusable\n");
    exit(EXIT_FAILURE);
  }
}

Suite *test_suite(void) {
  Suite *s = suite_create("cuda");
  TCase *t = tcase_create("refusals");
  if (!cuda.usable)
    tcase_add_test(t, test_unusable_refused);
  tcase_add_test(t, test_precision_needs_cuda);
  tcase_add_test(t, test_lacking_options_refused);
  tcase_add_test(t, test_wide_heads_refused);
  tcase_add_test(t, test_gemm_rows_refused);
  tcase_add_test(t, test_grid_refused);
  tcase_add_test(t, test_kv_device_pages_on_cpu);
  tcase_add_test(t, test_weights_on_device_cpu);
  if (cuda.built) {
    tcase_add_test(t, test_device_bytes);
    tcase_add_test(t, test_sticky_errors);
  }
  suite_add_tcase(s, t);
  TCase *tt = tcase_create("table");
  tcase_add_loop_test(tt, test_table_on_cpu, 0, N_GPU_CASES);
  tcase_add_loop_test(tt, test_red_table_on_cpu, 0, N_RED_CASES);
  suite_add_tcase(s, tt);
  /* no GPU needed: not among the cases tools/device/check.sh names */
  TCase *td = tcase_create("doc");
  tcase_add_test(td, test_doc_quotes_skip_line);
  suite_add_tcase(s, td);
  if (cuda.usable) {
    /* A case a kernel family, so that tools/device/check.sh can run each
     * in a process of its own (CK_RUN_CASE): CUDA forbids fork(), so a
     * kernel that leaves the device failed (an illegal address) would
     * otherwise fail every case after it in this process. */
    TCase *g = tcase_create("gpu");
    tcase_set_timeout(g, 120);
    tcase_add_loop_test(g, test_gpu_fp32, 0, N_GPU_CASES);
    tcase_add_loop_test(g, test_gpu_bf16, 0, N_GPU_CASES);
    tcase_add_test(g, test_gpu_numeric);
    tcase_add_test(g, test_gpu_numeric_bias);
    tcase_add_test(g, test_gpu_pool);
    tcase_add_loop_test(g, test_gpu_weights_on_device, 0, 2);
    tcase_add_loop_test(g, test_gpu_two_widths_at_once, 0, N_RACE_PAIRS);
    tcase_add_loop_test(g, test_gpu_call_after_canceled, 0, 2);
    suite_add_tcase(s, g);
    TCase *gk = tcase_create("gpu-kv");
    tcase_set_timeout(gk, 120);
    tcase_add_loop_test(gk, test_gpu_kv_append, 0, 2 * N_KV_SHAPES);
    tcase_add_loop_test(gk, test_gpu_kv_batch, 0, 2);
    suite_add_tcase(s, gk);
    TCase *gr = tcase_create("gpu-reduce");
    tcase_set_timeout(gr, 120);
    tcase_add_loop_test(gr, test_gpu_reduce_fp32, 0, N_RED_CASES);
    tcase_add_loop_test(gr, test_gpu_reduce_bf16, 0, N_RED_CASES);
    suite_add_tcase(s, gr);
    TCase *g1 = tcase_create("gpu-v1");
    tcase_set_timeout(g1, 120);
    tcase_add_loop_test(g1, test_gpu_bf16_v1, 0, N_GPU_CASES);
    suite_add_tcase(s, g1);
    TCase *g3 = tcase_create("gpu-v3");
    tcase_set_timeout(g3, 120);
    tcase_add_loop_test(g3, test_gpu_fp32_v3, 0, N_GPU_CASES);
    tcase_add_loop_test(g3, test_gpu_bf16_v3, 0, N_GPU_CASES);
    suite_add_tcase(s, g3);
    TCase *g4 = tcase_create("gpu-v4");
    tcase_set_timeout(g4, 120);
    tcase_add_loop_test(g4, test_gpu_fp32_v4, 0, N_GPU_CASES);
    tcase_add_loop_test(g4, test_gpu_bf16_v4, 0, N_GPU_CASES);
    tcase_add_loop_test(g4, test_gpu_kv_append_v4, 0, 2 * N_KV_SHAPES);
    suite_add_tcase(s, g4);
    /* last: the device is unusable after it; compute-sanitizer would
     * report its trap (tools/device/check.sh sets ATTND_CUDA_NO_TRAP) */
    if (getenv("ATTND_CUDA_NO_TRAP") == NULL) {
      TCase *l = tcase_create("lost");
      tcase_add_test(l, test_gpu_lost);
      suite_add_tcase(s, l);
    } else {
      fprintf(stderr, "check_cuda: SKIP: test_gpu_lost (ATTND_CUDA_NO_TRAP "
                      "is set)\n");
    }
  } else {
    tcase_add_test(t, test_memory_unusable);
  }
  return s;
}
