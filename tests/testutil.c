/* tests/testutil.c: see testutil.h. */
#include "testutil.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "codec/util.h"
#include "ref.h"

/* ---- PRNG ---------------------------------------------------------------- */

void tu_rng_seed(tu_rng_t *r, uint64_t seed) {
  r->state = seed ^ 0x5eed5eed12345678ull;
}

/* splitmix64, from the seed mixed above. */
uint64_t tu_rng_next(tu_rng_t *r) {
  return attnd_splitmix64(&r->state);
}

double tu_rng_unit(tu_rng_t *r) {
  return (double)(tu_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

double tu_rng_sym(tu_rng_t *r) {
  return 2.0 * tu_rng_unit(r) - 1.0;
}

int64_t tu_rng_below(tu_rng_t *r, int64_t n) {
  return (int64_t)(tu_rng_next(r) % (uint64_t)n);
}

float *tu_rand_floats(tu_rng_t *r, size_t n, float amp) {
  float *x = malloc(n * sizeof *x + sizeof *x);
  ck_assert_ptr_nonnull(x);
  for (size_t i = 0; i < n; i++)
    x[i] = (float)(amp * tu_rng_sym(r));
  return x;
}

/* ---- fenced allocations ------------------------------------------------ */

/* A live fenced allocation: what tu_fenced_free must unmap. */
typedef struct tu_fence {
  void *data, *base;
  size_t len;
} tu_fence_t;

enum { TU_MAX_FENCES = 64 };
static tu_fence_t tu_fences[TU_MAX_FENCES];

void *tu_fenced_alloc(size_t bytes) {
  const size_t pg = (size_t)sysconf(_SC_PAGESIZE);
  const size_t data_pages = (bytes + pg - 1) / pg;
  const size_t len = (data_pages + 1) * pg;
  char *base = mmap(NULL, len, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ck_assert_msg(base != MAP_FAILED, "mmap %zu bytes", len);
  ck_assert_int_eq(mprotect(base + data_pages * pg, pg, PROT_NONE), 0);
  void *data = base + data_pages * pg - bytes;
  for (int k = 0; k < TU_MAX_FENCES; k++) {
    if (tu_fences[k].data != NULL)
      continue;
    tu_fences[k] = (tu_fence_t){.data = data, .base = base, .len = len};
    return data;
  }
  ck_abort_msg("more than %d fenced buffers live", TU_MAX_FENCES);
  return NULL;
}

void tu_fenced_free(void *data) {
  if (data == NULL)
    return;
  for (int k = 0; k < TU_MAX_FENCES; k++) {
    if (tu_fences[k].data != data)
      continue;
    ck_assert_int_eq(munmap(tu_fences[k].base, tu_fences[k].len), 0);
    tu_fences[k] = (tu_fence_t){0};
    return;
  }
  ck_abort_msg("tu_fenced_free of an unknown pointer");
}

/* n floats uniform in [-amp, amp), fenced. */
static float *tu_fenced_floats(tu_rng_t *r, size_t n, float amp) {
  float *x = tu_fenced_alloc(n * sizeof *x);
  for (size_t i = 0; i < n; i++)
    x[i] = (float)(amp * tu_rng_sym(r));
  return x;
}

/* ---- tensors and errors -------------------------------------------------- */

attn_tensor_t tu_t1(const void *data, int64_t d0) {
  attn_tensor_t t = {.data = data, .rank = 1, .dim = {d0}};
  return t;
}

attn_tensor_t tu_t2(const void *data, int64_t d0, int64_t d1) {
  attn_tensor_t t = {.data = data, .rank = 2, .dim = {d0, d1}};
  return t;
}

attn_tensor_t tu_t3(const void *data, int64_t d0, int64_t d1, int64_t d2) {
  attn_tensor_t t = {.data = data, .rank = 3, .dim = {d0, d1, d2}};
  return t;
}

attn_tensor_t tu_t4(const void *data, int64_t d0, int64_t d1, int64_t d2,
                    int64_t d3) {
  attn_tensor_t t = {.data = data, .rank = 4, .dim = {d0, d1, d2, d3}};
  return t;
}

double tu_rel_err(const float *got, const double *ref, size_t n) {
  return tu_rel_err_scaled(got, ref, n, 0.0);
}

double tu_rel_err_scaled(const float *got, const double *ref, size_t n,
                         double scale) {
  double num = 0.0, den = 0.0, g2 = 0.0;
  for (size_t i = 0; i < n; i++) {
    double d = (double)got[i] - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
    g2 += (double)got[i] * (double)got[i];
  }
  if (den < (double)n * scale * scale)
    den = (double)n * scale * scale;
  if (den == 0.0)
    return sqrt(g2);
  return sqrt(num) / sqrt(den);
}

double tu_rel_err_f(const float *got, const float *ref, size_t n) {
  double num = 0.0, den = 0.0, g2 = 0.0;
  for (size_t i = 0; i < n; i++) {
    double d = (double)got[i] - (double)ref[i];
    num += d * d;
    den += (double)ref[i] * (double)ref[i];
    g2 += (double)got[i] * (double)got[i];
  }
  if (den == 0.0)
    return sqrt(g2);
  return sqrt(num) / sqrt(den);
}

/* ---- instruction sets ---------------------------------------------------- */

int tu_isa_runs(attn_isa_t isa) {
  if (isa == ATTN_ISA_AUTO || isa == ATTN_ISA_GENERIC)
    return 1;
  attn_backend_t b;
  attn_backend_info(&b);
  return isa <= b.isa;
}

attn_isa_t tu_isa_required(void) {
  const char *name = getenv("ATTND_REQUIRE_ISA");
  if (name == NULL || *name == 0)
    return ATTN_ISA_AUTO;
  static const attn_isa_t isas[] = {ATTN_ISA_GENERIC, ATTN_ISA_AVX2,
                                    ATTN_ISA_AVX512};
  for (size_t i = 0; i < sizeof isas / sizeof isas[0]; i++)
    if (strcmp(name, attn_isa_name(isas[i])) == 0)
      return isas[i];
  ck_abort_msg("ATTND_REQUIRE_ISA=%s: not generic, avx2 or avx512", name);
  return ATTN_ISA_AUTO;
}

void tu_isa_skipped(attn_isa_t isa, const char *what) {
  attn_backend_t b;
  attn_backend_info(&b);
  const char *lacks = isa == ATTN_ISA_AVX512 ? "AVX-512 (F, BW, DQ, VL)"
                      : isa == ATTN_ISA_AVX2 ? "AVX2 + FMA"
                                             : attn_isa_name(isa);
  attn_isa_t req = tu_isa_required();
  ck_assert_msg(req == ATTN_ISA_AUTO || isa > req,
                "%s case not run: this CPU lacks %s (best: %s), and "
                "ATTND_REQUIRE_ISA=%s: %s",
                attn_isa_name(isa), lacks, attn_isa_name(b.isa),
                attn_isa_name(req), what);
  fprintf(stderr, "%s: %s case skipped: this CPU lacks %s (best: %s): %s\n",
          program_invocation_short_name, attn_isa_name(isa), lacks,
          attn_isa_name(b.isa), what);
}

/* ---- running the core ---------------------------------------------------- */

enum { TU_GUARD = 16 };
static const uint32_t tu_guard_word = 0x7fc0dead; /* a NaN no kernel makes */

/* n floats of NaN between two fences of TU_GUARD guard words. */
static float *tu_guarded_alloc(size_t n, float **base) {
  float *b = malloc((n + 2 * TU_GUARD) * sizeof *b);
  ck_assert_ptr_nonnull(b);
  for (size_t i = 0; i < TU_GUARD; i++) {
    memcpy(&b[i], &tu_guard_word, sizeof(float));
    memcpy(&b[TU_GUARD + n + i], &tu_guard_word, sizeof(float));
  }
  for (size_t i = 0; i < n; i++)
    b[TU_GUARD + i] = NAN;
  *base = b;
  return b + TU_GUARD;
}

static int tu_guards_intact(const float *base, size_t n) {
  for (size_t i = 0; i < TU_GUARD; i++) {
    if (memcmp(&base[i], &tu_guard_word, sizeof(float)) != 0)
      return 0;
    if (memcmp(&base[TU_GUARD + n + i], &tu_guard_word, sizeof(float)) != 0)
      return 0;
  }
  return 1;
}

int tu_run(tu_run_t *run, const attn_params_t *p, const attn_exec_t *ex) {
  static const char *const names[10] = {
      "out",         "weights", "mean_weights", "head_outputs", "top_k_index",
      "top_k_value", "pooled",  "entropy",      "sink",         "distance"};
  memset(run, 0, sizeof *run);
  const attn_isa_t asked = ex != NULL ? ex->isa : ATTN_ISA_AUTO;
  int rc = attn_plan_init(&run->plan, p, ex, &run->err);
  if (rc == ATTN_ENOTSUP) {
    /* only for a named ISA above the detected one, and said as such */
    ck_assert_msg(!tu_isa_runs(asked),
                  "attn_plan_init: ENOTSUP for isa %s, which this CPU runs: "
                  "%s",
                  attn_isa_name(asked), run->err.message);
    ck_assert_int_eq(run->err.code, ATTN_ENOTSUP);
    ck_assert_str_eq(run->err.field, "isa");
    ck_assert_msg(strstr(run->err.message, attn_isa_name(asked)) != NULL,
                  "ENOTSUP message '%s' does not name %s", run->err.message,
                  attn_isa_name(asked));
    return rc;
  }
  ck_assert_msg(rc == 0, "attn_plan_init: %d %s (field '%s'): %s", rc,
                attn_errname(rc), run->err.field, run->err.message);
  ck_assert_int_eq(run->err.code, 0);
  ck_assert_msg(tu_isa_runs(asked),
                "attn_plan_init accepted isa %s, which "
                "attn_backend_info says this CPU lacks",
                attn_isa_name(asked));
  if (asked == ATTN_ISA_AUTO) {
    attn_backend_t b;
    attn_backend_info(&b);
    ck_assert_msg(run->plan.isa == b.isa,
                  "plan isa %s for auto, but the detected ISA is %s",
                  attn_isa_name(run->plan.isa), attn_isa_name(b.isa));
  } else {
    ck_assert_msg(run->plan.isa == asked, "plan isa %s, asked for %s",
                  attn_isa_name(run->plan.isa), attn_isa_name(asked));
  }

  const attn_plan_t *pl = &run->plan;
  const unsigned st = pl->reduce ? p->reduce.stats : 0;
  const int64_t elems[10] = {
      pl->out_elems,   pl->weights_elems, pl->mean_elems,   pl->head_elems,
      pl->top_k_elems, pl->top_k_elems,   pl->pooled_elems, pl->stats_elems,
      pl->stats_elems, pl->stats_elems};
  const int want[10] = {1,
                        p->want_weights,
                        p->want_mean_weights,
                        p->want_head_outputs,
                        pl->top_k_elems > 0,
                        pl->top_k_elems > 0,
                        pl->pooled_elems > 0,
                        (st & ATTN_STAT_ENTROPY) != 0,
                        (st & ATTN_STAT_SINK) != 0,
                        (st & ATTN_STAT_DISTANCE) != 0};
  float *buf[10] = {0};
  for (int k = 0; k < 10; k++) {
    if (!want[k])
      continue;
    ck_assert_int_ge(elems[k], 0);
    run->len_[k] = (size_t)elems[k];
    buf[k] = tu_guarded_alloc(run->len_[k], &run->base_[k]);
  }
  run->o.out = buf[0], run->o.weights = buf[1], run->o.mean_weights = buf[2];
  run->o.head_outputs = buf[3];
  /* int32, as many bytes as floats: NaN's bits until written */
  run->o.top_k_index = (int32_t *)(void *)buf[4];
  run->o.top_k_value = buf[5], run->o.pooled = buf[6];
  run->o.entropy = buf[7], run->o.sink = buf[8], run->o.distance = buf[9];
  size_t wsb = pl->workspace_bytes;
  size_t rounded = (wsb + 63) / 64 * 64;
  run->ws_ = aligned_alloc(64, rounded == 0 ? 64 : rounded);
  ck_assert_ptr_nonnull(run->ws_);
  memset(run->ws_, 0xff, rounded == 0 ? 64 : rounded);

  rc = attn_forward(pl, &run->o, run->ws_, wsb, &run->err);
  ck_assert_msg(rc == 0, "attn_forward: %d %s (field '%s'): %s", rc,
                attn_errname(rc), run->err.field, run->err.message);
  for (int k = 0; k < 10; k++) {
    if (run->base_[k] == NULL)
      continue;
    ck_assert_msg(tu_guards_intact(run->base_[k], run->len_[k]),
                  "attn_forward wrote outside %s [%zu floats]", names[k],
                  run->len_[k]);
  }
  const attn_timing_t *t = &run->o.timing;
  ck_assert_msg(isfinite(t->total_ms) && t->total_ms >= 0.0 &&
                    t->projection_ms >= 0.0 && t->attention_ms >= 0.0 &&
                    t->output_ms >= 0.0,
                "timing: total %g proj %g attn %g out %g", t->total_ms,
                t->projection_ms, t->attention_ms, t->output_ms);
  return 0;
}

void tu_run_free(tu_run_t *run) {
  for (int k = 0; k < 10; k++)
    free(run->base_[k]);
  free(run->ws_);
  memset(run, 0, sizeof *run);
}

int tu_check_vs_ref(const attn_params_t *p, const attn_exec_t *ex, double tol,
                    const char *what) {
  ref_result_t ref;
  ck_assert_msg(ref_attention(p, &ref) == 0,
                "%s: the reference cannot read these params (test bug)", what);
  tu_run_t run;
  int rc = tu_run(&run, p, ex);
  if (rc == ATTN_ENOTSUP) {
    /* tu_run asserted that the CPU lacks it; say so rather than pass */
    tu_isa_skipped(ex->isa, what);
    ref_result_free(&ref);
    return rc;
  }
  ck_assert_int_eq(rc, 0);
  const attn_plan_t *pl = &run.plan;
  int threads = ex != NULL ? ex->threads : 0;
  int isa = ex != NULL ? (int)ex->isa : 0;

  /* The plan's derived sizes against the reference's own derivation. */
  ck_assert_msg(pl->B == ref.B && pl->Lq == ref.Lq && pl->Lk == ref.Lk &&
                    pl->Eq == ref.Eq && pl->Ek == ref.Ek && pl->Ev == ref.Ev &&
                    pl->H == ref.H && pl->Hkv == ref.Hkv && pl->Dh == ref.Dh &&
                    pl->Dv == ref.Dv && pl->Eo == ref.Eo,
                "%s: plan B=%lld Lq=%lld Lk=%lld Eq=%lld Ek=%lld Ev=%lld "
                "H=%lld Hkv=%lld Dh=%lld Dv=%lld Eo=%lld; reference B=%lld "
                "Lq=%lld Lk=%lld Eq=%lld Ek=%lld Ev=%lld H=%lld Hkv=%lld "
                "Dh=%lld Dv=%lld Eo=%lld",
                what, (long long)pl->B, (long long)pl->Lq, (long long)pl->Lk,
                (long long)pl->Eq, (long long)pl->Ek, (long long)pl->Ev,
                (long long)pl->H, (long long)pl->Hkv, (long long)pl->Dh,
                (long long)pl->Dv, (long long)pl->Eo, (long long)ref.B,
                (long long)ref.Lq, (long long)ref.Lk, (long long)ref.Eq,
                (long long)ref.Ek, (long long)ref.Ev, (long long)ref.H,
                (long long)ref.Hkv, (long long)ref.Dh, (long long)ref.Dv,
                (long long)ref.Eo);
  ck_assert_int_eq(pl->batched, p->query.rank == 3);
  ck_assert_int_eq(pl->out_elems, ref.B * ref.Lq * ref.Eo);
  ck_assert_int_eq(pl->weights_elems, ref.B * ref.H * ref.Lq * ref.Lk);
  ck_assert_int_eq(pl->mean_elems, ref.B * ref.Lq * ref.Lk);
  ck_assert_int_eq(pl->head_elems, ref.B * ref.H * ref.Lq * ref.Dv);
  ck_assert_msg(fabs((double)pl->scale - ref.scale) <= 1e-6 * fabs(ref.scale),
                "%s: plan scale %.9g, expected %.9g", what, (double)pl->scale,
                ref.scale);
  ck_assert_int_ne(pl->isa, ATTN_ISA_AUTO);
  ck_assert_int_eq(pl->threads, threads > 0 ? threads : 1);

  struct {
    const char *name;
    int want;
    const float *got;
    const double *ref;
    int64_t n;
  } outs[4] = {
      {"out", 1, run.o.out, ref.out, pl->out_elems},
      {"weights", p->want_weights, run.o.weights, ref.weights,
       pl->weights_elems},
      {"mean_weights", p->want_mean_weights, run.o.mean_weights,
       ref.mean_weights, pl->mean_elems},
      {"head_outputs", p->want_head_outputs, run.o.head_outputs,
       ref.head_outputs, pl->head_elems},
  };
  /* ATTN_TEST_ERRORS=1 prints every error measured, to see the margin
   * below `tol`. */
  const int show = getenv("ATTN_TEST_ERRORS") != NULL;
  for (int k = 0; k < 4; k++) {
    if (!outs[k].want)
      continue;
    double e = tu_rel_err(outs[k].got, outs[k].ref, (size_t)outs[k].n);
    if (show)
      fprintf(stderr, "relerr %.3e %s [threads %d, isa %d] %s\n", e,
              outs[k].name, threads, isa, what);
    ck_assert_msg(e <= tol,
                  "%s [threads %d, isa %d]: %s relative error %.3g > %.1g "
                  "(first: got %.9g, expected %.9g)",
                  what, threads, isa, outs[k].name, e, tol,
                  outs[k].n > 0 ? (double)outs[k].got[0] : 0.0,
                  outs[k].n > 0 ? outs[k].ref[0] : 0.0);
  }
  tu_run_free(&run);
  ref_result_free(&ref);
  return 0;
}

/* ---- random cases -------------------------------------------------------- */

/* A rank 2..4 tensor shape, the last `rank` dims of [B, H, Lq, Lk], with
 * the dims flagged in `ones` set to 1. Returns the element count. */
static int64_t tu_bcast_shape(int rank, unsigned ones, const int64_t full[4],
                              attn_tensor_t *t) {
  int64_t n = 1;
  t->rank = rank;
  for (int a = 0; a < rank; a++) {
    int canon = 4 - rank + a;
    t->dim[a] = (ones & (1u << canon)) ? 1 : full[canon];
    n *= t->dim[a];
  }
  return n;
}

static float *tu_weight(tu_rng_t *r, int64_t out, int64_t in) {
  /* amplitude 2/sqrt(in): projected values keep roughly unit variance */
  return tu_fenced_floats(r, (size_t)(out * in),
                          (float)(2.0 / sqrt((double)in)));
}

void tu_case_build(tu_case_t *c, const tu_spec_t *s, uint64_t seed) {
  char desc[512];
  tu_spec_describe(s, desc, sizeof desc);
  memset(c, 0, sizeof *c);
  tu_rng_t r;
  tu_rng_seed(&r, seed);
  attn_params_t *p = &c->p;

  const int64_t B = s->B != 0 ? s->B : 1;
  const int64_t Lq = s->Lq, Lk = s->Lk != 0 ? s->Lk : s->Lq;
  const int64_t H = s->H, Hkv = s->Hkv != 0 ? s->Hkv : s->H;
  const int64_t Dh = s->Dh;
  int64_t Dv = s->Dv != 0 ? s->Dv : s->Dh;
  const unsigned pr = s->proj;
  ck_assert_msg(B == 1 || s->batched, "spec: B > 1 needs batched: %s", desc);
  ck_assert_msg(s->cross || Lk == Lq, "spec: self with Lk != Lq: %s", desc);
  ck_assert_msg(H >= 1 && Hkv >= 1 && H % Hkv == 0, "spec heads: %s", desc);

  const int64_t Eq = (pr & TU_QW) && s->Eq != 0 ? s->Eq : H * Dh;
  int64_t Ek = Eq;
  if (s->cross)
    Ek = (pr & TU_KW) && s->Ek != 0 ? s->Ek : Hkv * Dh;
  ck_assert_msg((pr & TU_KW) || Ek == Hkv * Dh,
                "spec: key width %lld without k_weight needs Hkv*Dh: %s",
                (long long)Ek, desc);
  int64_t Ev = Ek;
  if (s->value_given)
    Ev = (pr & TU_VW) && s->Ev != 0 ? s->Ev : Hkv * Dv;
  if (!(pr & TU_VW)) {
    ck_assert_msg(Ev % Hkv == 0, "spec: value width %% Hkv: %s", desc);
    Dv = Ev / Hkv;
  }
  const int64_t Eo = (pr & TU_OW) && s->Eo != 0 ? s->Eo : H * Dv;
  c->B = B, c->Lq = Lq, c->Lk = Lk, c->Eq = Eq, c->Ek = Ek, c->Ev = Ev;
  c->Eo = Eo, c->H = H, c->Hkv = Hkv, c->Dh = Dh, c->Dv = Dv;

  /* Inputs, amplitude 2: raw (unprojected) scores then spread over a few
   * units, enough to make softmax far from uniform. */
  c->query = tu_fenced_floats(&r, (size_t)(B * Lq * Eq), 2.0f);
  p->query = s->batched ? tu_t3(c->query, B, Lq, Eq) : tu_t2(c->query, Lq, Eq);
  if (s->cross) {
    c->key = tu_fenced_floats(&r, (size_t)(B * Lk * Ek), 2.0f);
    p->key = s->batched ? tu_t3(c->key, B, Lk, Ek) : tu_t2(c->key, Lk, Ek);
  }
  if (s->value_given) {
    c->value = tu_fenced_floats(&r, (size_t)(B * Lk * Ev), 2.0f);
    p->value =
        s->batched ? tu_t3(c->value, B, Lk, Ev) : tu_t2(c->value, Lk, Ev);
  }
  p->num_heads = H;
  p->num_kv_heads = s->Hkv;

  if (pr & TU_QW)
    c->qw = tu_weight(&r, H * Dh, Eq);
  if (pr & TU_KW)
    c->kw = tu_weight(&r, Hkv * Dh, Ek);
  if (pr & TU_VW)
    c->vw = tu_weight(&r, Hkv * Dv, Ev);
  if (pr & TU_OW)
    c->ow = tu_weight(&r, Eo, H * Dv);
  if (c->qw)
    p->q_weight = tu_t2(c->qw, H * Dh, Eq);
  if (c->kw)
    p->k_weight = tu_t2(c->kw, Hkv * Dh, Ek);
  if (c->vw)
    p->v_weight = tu_t2(c->vw, Hkv * Dv, Ev);
  if (c->ow)
    p->o_weight = tu_t2(c->ow, Eo, H * Dv);
  if (pr & TU_QB) {
    c->qb = tu_fenced_floats(&r, (size_t)(H * Dh), 0.5f);
    p->q_bias = tu_t1(c->qb, H * Dh);
  }
  if (pr & TU_KB) {
    c->kb = tu_fenced_floats(&r, (size_t)(Hkv * Dh), 0.5f);
    p->k_bias = tu_t1(c->kb, Hkv * Dh);
  }
  if (pr & TU_VB) {
    c->vb = tu_fenced_floats(&r, (size_t)(Hkv * Dv), 0.5f);
    p->v_bias = tu_t1(c->vb, Hkv * Dv);
  }
  if (pr & TU_OB) {
    c->ob = tu_fenced_floats(&r, (size_t)Eo, 0.5f);
    p->o_bias = tu_t1(c->ob, Eo);
  }

  p->causal = s->causal;
  if (s->key_lengths) {
    c->lengths = tu_fenced_alloc((size_t)B * sizeof *c->lengths);
    ck_assert_ptr_nonnull(c->lengths);
    for (int64_t b = 0; b < B; b++) {
      int64_t len = b < 4 ? s->lengths[b] : -1;
      c->lengths[b] = len >= 0 ? len : tu_rng_below(&r, Lk + 1);
      ck_assert_msg(c->lengths[b] <= Lk, "spec: length > Lk: %s", desc);
    }
    p->key_lengths = tu_t1(c->lengths, B);
  }
  const int64_t full[4] = {B, H, Lq, Lk};
  if (s->allow_rank != 0) {
    int64_t n = tu_bcast_shape(s->allow_rank, s->allow_ones, full, &p->allow);
    double pa = s->allow_p != 0.0 ? s->allow_p : 0.7;
    c->allow = tu_fenced_alloc((size_t)n);
    ck_assert_ptr_nonnull(c->allow);
    /* any nonzero byte allows, so use many of them */
    for (int64_t x = 0; x < n; x++)
      c->allow[x] =
          tu_rng_unit(&r) < pa ? (uint8_t)(1 + tu_rng_below(&r, 255)) : 0;
    p->allow.data = c->allow;
  }
  if (s->bias_rank != 0) {
    int64_t n = tu_bcast_shape(s->bias_rank, s->bias_ones, full, &p->bias);
    c->bias = tu_fenced_floats(&r, (size_t)n, 2.0f);
    p->bias.data = c->bias;
  }
  p->has_window_left = s->has_wl;
  p->has_window_right = s->has_wr;
  p->window_left = s->wl;
  p->window_right = s->wr;
  p->alibi = s->alibi;
  if (s->alibi == ATTN_ALIBI_SLOPES) {
    c->slopes = tu_fenced_alloc((size_t)H * sizeof *c->slopes);
    ck_assert_ptr_nonnull(c->slopes);
    for (int64_t h = 0; h < H; h++)
      c->slopes[h] = (float)(0.01 + 0.6 * tu_rng_unit(&r));
    p->alibi_slopes = tu_t1(c->slopes, H);
  }
  p->has_scale = s->has_scale;
  p->scale = s->scale;
  p->has_softcap = s->has_softcap;
  p->softcap = s->softcap;
  p->want_weights = !(s->skip & TU_SKIP_W);
  p->want_mean_weights = !(s->skip & TU_SKIP_M);
  p->want_head_outputs = !(s->skip & TU_SKIP_HO);
}

void tu_case_free(tu_case_t *c) {
  tu_fenced_free(c->query);
  tu_fenced_free(c->key);
  tu_fenced_free(c->value);
  tu_fenced_free(c->qw);
  tu_fenced_free(c->kw);
  tu_fenced_free(c->vw);
  tu_fenced_free(c->ow);
  tu_fenced_free(c->qb);
  tu_fenced_free(c->kb);
  tu_fenced_free(c->vb);
  tu_fenced_free(c->ob);
  tu_fenced_free(c->bias);
  tu_fenced_free(c->slopes);
  tu_fenced_free(c->allow);
  tu_fenced_free(c->lengths);
  memset(c, 0, sizeof *c);
}

void tu_spec_random(tu_spec_t *s, tu_rng_t *r) {
  static const int64_t heads[] = {1, 2, 3, 4, 6, 8};
  static const int64_t dims[] = {1, 2, 3, 4, 5, 8, 16, 17};
  memset(s, 0, sizeof *s);
  s->H = heads[tu_rng_below(r, 6)];
  int64_t divs[8], nd = 0;
  for (int64_t d = 1; d <= s->H; d++)
    if (s->H % d == 0)
      divs[nd++] = d;
  int64_t hkv = divs[tu_rng_below(r, nd)];
  s->Hkv = hkv == s->H && tu_rng_below(r, 2) ? 0 : hkv;
  s->Dh = dims[tu_rng_below(r, 8)];
  s->Dv = tu_rng_below(r, 2) ? s->Dh : dims[tu_rng_below(r, 8)];
  s->B = 1 + tu_rng_below(r, 3);
  s->batched = s->B > 1 || tu_rng_below(r, 2);
  s->cross = tu_rng_below(r, 3) != 0;
  s->Lq = 1 + tu_rng_below(r, 70);
  s->Lk = s->cross ? 1 + tu_rng_below(r, 70) : s->Lq;
  s->value_given = s->cross ? (int)tu_rng_below(r, 2) : tu_rng_below(r, 4) == 0;
  s->proj = (unsigned)tu_rng_below(r, 256);
  s->Eq = 1 + tu_rng_below(r, 64);
  s->Ek = 1 + tu_rng_below(r, 64);
  s->Ev = 1 + tu_rng_below(r, 64);
  s->Eo = 1 + tu_rng_below(r, 64);

  /* Make the widths consistent by adding weights where needed. */
  const int64_t hkv_eff = hkv;
  int64_t Eq = (s->proj & TU_QW) ? s->Eq : s->H * s->Dh;
  if (!s->cross && !(s->proj & TU_KW) && Eq != hkv_eff * s->Dh)
    s->proj |= TU_KW;
  int64_t Ek = s->cross ? ((s->proj & TU_KW) ? s->Ek : hkv_eff * s->Dh) : Eq;
  if (!s->value_given && !(s->proj & TU_VW)) {
    if (Ek % hkv_eff != 0)
      s->proj |= TU_VW;
    else
      s->Dv = Ek / hkv_eff;
  }

  s->causal = (attn_causal_t)tu_rng_below(r, 3);
  if (tu_rng_below(r, 3) == 0) {
    s->key_lengths = 1;
    for (int b = 0; b < 4; b++)
      s->lengths[b] = -1;
  }
  if (tu_rng_below(r, 3) == 0) {
    s->allow_rank = 2 + (int)tu_rng_below(r, 3);
    s->allow_ones = (unsigned)tu_rng_below(r, 16);
    s->allow_p = 0.3 + 0.7 * tu_rng_unit(r);
  }
  if (tu_rng_below(r, 3) == 0) {
    s->bias_rank = 2 + (int)tu_rng_below(r, 3);
    s->bias_ones = (unsigned)tu_rng_below(r, 16);
  }
  if (tu_rng_below(r, 4) == 0) {
    s->has_wl = (int)tu_rng_below(r, 2);
    s->has_wr = (int)tu_rng_below(r, 2);
    s->wl = tu_rng_below(r, s->Lk + 2);
    s->wr = tu_rng_below(r, s->Lk + 2);
  }
  int64_t a = tu_rng_below(r, 6);
  s->alibi = a == 0   ? ATTN_ALIBI_DEFAULT
             : a == 1 ? ATTN_ALIBI_SLOPES
                      : ATTN_ALIBI_NONE;
  if (tu_rng_below(r, 4) == 0) {
    s->has_scale = 1;
    s->scale = (float)(0.05 + tu_rng_unit(r));
  }
  if (tu_rng_below(r, 4) == 0) {
    s->has_softcap = 1;
    s->softcap = (float)(0.5 + 4.0 * tu_rng_unit(r));
  }
  s->skip = (unsigned)tu_rng_below(r, 8);
}

void tu_spec_describe(const tu_spec_t *s, char *buf, size_t n) {
  snprintf(buf, n,
           "B=%lld%s Lq=%lld Lk=%lld H=%lld Hkv=%lld Dh=%lld Dv=%lld "
           "Eq=%lld Ek=%lld Ev=%lld Eo=%lld cross=%d value=%d proj=0x%02x "
           "causal=%d kl=%d allow=%d/%x bias=%d/%x win=%d:%lld,%d:%lld "
           "alibi=%d scale=%d:%g softcap=%d:%g skip=%x",
           (long long)s->B, s->batched ? "(r3)" : "(r2)", (long long)s->Lq,
           (long long)s->Lk, (long long)s->H, (long long)s->Hkv,
           (long long)s->Dh, (long long)s->Dv, (long long)s->Eq,
           (long long)s->Ek, (long long)s->Ev, (long long)s->Eo, s->cross,
           s->value_given, s->proj, (int)s->causal, s->key_lengths,
           s->allow_rank, s->allow_ones, s->bias_rank, s->bias_ones, s->has_wl,
           (long long)s->wl, s->has_wr, (long long)s->wr, (int)s->alibi,
           s->has_scale, (double)s->scale, s->has_softcap, (double)s->softcap,
           s->skip);
}

char *tu_read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (f == NULL)
    return NULL;
  /* Read until the end rather than trust a size from fseek: a pipe or a
   * file still being written has none to tell. */
  size_t cap = 4096, n = 0, k;
  char *buf = malloc(cap + 1);
  while (buf != NULL && (k = fread(buf + n, 1, cap - n, f)) > 0)
    if ((n += k) == cap) {
      char *more = realloc(buf, (cap *= 2) + 1);
      if (more == NULL)
        free(buf);
      buf = more;
    }
  int failed = buf == NULL || ferror(f);
  int saved = buf == NULL ? ENOMEM : EIO;
  fclose(f);
  if (failed) {
    free(buf);
    errno = saved;
    return NULL;
  }
  buf[n] = 0;
  if (len != NULL)
    *len = n;
  return buf;
}

char *tu_read_file_or_fail(const char *path, size_t *len) {
  char *buf = tu_read_file(path, len);
  ck_assert_msg(buf != NULL, "cannot read %s: %s", path, strerror(errno));
  return buf;
}

void tu_layer_init(tu_layer_t *l, uint64_t seed, int64_t tokens) {
  const int64_t E = l->E, Dh = l->Dh, Dv = l->Dv;
  tu_rng_t r;
  tu_rng_seed(&r, seed);
  l->qw = tu_rand_floats(&r, (size_t)(l->H * Dh * E), 0.3f);
  l->kw = tu_rand_floats(&r, (size_t)(l->Hkv * Dh * E), 0.3f);
  l->vw = tu_rand_floats(&r, (size_t)(l->Hkv * Dv * E), 0.3f);
  l->ow = tu_rand_floats(&r, (size_t)(E * l->H * Dv), 0.3f);
  l->qb = tu_rand_floats(&r, (size_t)(l->H * Dh), 0.1f);
  l->kb = tu_rand_floats(&r, (size_t)(l->Hkv * Dh), 0.1f);
  l->vb = tu_rand_floats(&r, (size_t)(l->Hkv * Dv), 0.1f);
  l->ob = tu_rand_floats(&r, (size_t)E, 0.1f);
  l->qn = tu_rand_floats(&r, (size_t)Dh, 1.0f);
  l->kn = tu_rand_floats(&r, (size_t)Dh, 1.0f);
  l->x = tu_rand_floats(&r, (size_t)(tokens * E), 1.0f);
}

void tu_layer_free(tu_layer_t *l) {
  float **f[] = {&l->qw, &l->kw, &l->vw, &l->ow, &l->qb, &l->kb,
                 &l->vb, &l->ob, &l->qn, &l->kn, &l->x};
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
    free(*f[i]);
    *f[i] = NULL;
  }
}

attn_params_t tu_layer_params(const tu_layer_t *l, attn_tensor_t query) {
  const int64_t E = l->E, Dh = l->Dh, Dv = l->Dv;
  attn_params_t p = {0};
  p.query = query;
  p.num_heads = l->H;
  p.num_kv_heads = l->Hkv;
  p.q_weight = tu_t2(l->qw, l->H * Dh, E);
  p.k_weight = tu_t2(l->kw, l->Hkv * Dh, E);
  p.v_weight = tu_t2(l->vw, l->Hkv * Dv, E);
  p.o_weight = tu_t2(l->ow, E, l->H * Dv);
  p.q_bias = tu_t1(l->qb, l->H * Dh);
  p.k_bias = tu_t1(l->kb, l->Hkv * Dh);
  p.v_bias = tu_t1(l->vb, l->Hkv * Dv);
  p.o_bias = tu_t1(l->ob, E);
  p.q_norm = tu_t1(l->qn, Dh);
  p.k_norm = tu_t1(l->kn, Dh);
  p.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
  p.rope = (attn_rope_t){
      .style = ATTN_ROPE_HALF, .theta = 500, .dims = l->rope_dims};
  p.want_weights = 1;
  return p;
}

void tu_layer_add_terms(attn_params_t *p) {
  p->has_window_left = 1;
  p->window_left = 20;
  p->alibi = ATTN_ALIBI_DEFAULT;
  p->has_softcap = 1;
  p->softcap = 3;
}
