/* tests/testutil.h: helpers shared by the core's Check suites.
 *
 * - a seeded PRNG (splitmix64), so every run draws the same numbers;
 * - random tensors and quick attn_tensor_t views;
 * - normalised errors ‖got − ref‖₂ / ‖ref‖₂;
 * - a case builder: a tu_spec_t (sizes and features) becomes a filled
 *   attn_params_t whose buffers the tu_case_t owns;
 * - a runner that plans and runs the core with guarded output buffers and a
 *   poisoned workspace, and a checker that compares it with ref.c.
 * The helpers that assert use Check's ck_assert*, so call them from tests. */
#ifndef ATTN_TESTS_TESTUTIL_H
#define ATTN_TESTS_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

#include "attn/attn.h"

/* ---- PRNG ---------------------------------------------------------------- */

typedef struct tu_rng {
  uint64_t state;
} tu_rng_t;

void tu_rng_seed(tu_rng_t *r, uint64_t seed);
uint64_t tu_rng_next(tu_rng_t *r);
double tu_rng_unit(tu_rng_t *r);              /* uniform [0, 1) */
double tu_rng_sym(tu_rng_t *r);               /* uniform [-1, 1) */
int64_t tu_rng_below(tu_rng_t *r, int64_t n); /* uniform [0, n), n >= 1 */

/* n floats uniform in [-amp, amp). Returns a new array (free()). */
float *tu_rand_floats(tu_rng_t *r, size_t n, float amp);

/* `bytes` of zeroed memory that end exactly where an inaccessible page
 * begins, so that a read past the end faults at once, without ASan. Free
 * with tu_fenced_free (at most 64 live). tu_case_build uses it for every
 * input. */
void *tu_fenced_alloc(size_t bytes);
void tu_fenced_free(void *data);

/* ---- tensors and errors -------------------------------------------------- */

attn_tensor_t tu_t1(const void *data, int64_t d0);
attn_tensor_t tu_t2(const void *data, int64_t d0, int64_t d1);
attn_tensor_t tu_t3(const void *data, int64_t d0, int64_t d1, int64_t d2);
attn_tensor_t tu_t4(const void *data, int64_t d0, int64_t d1, int64_t d2,
                    int64_t d3);

/* ‖got − ref‖₂ / ‖ref‖₂; when ‖ref‖₂ = 0, the plain ‖got‖₂. NaN anywhere in
 * `got` gives NaN, which fails every `err <= tol`. */
double tu_rel_err(const float *got, const double *ref, size_t n);
/* As tu_rel_err, ‖ref‖₂ taken as at least that of n values of `scale`:
 * for a quantity of that scale whose rounding is absolute, as an entropy in
 * nats is (rows of one-hot weights have 0, which float32 gives exactly and
 * the float64 reference as 1e-16, a relative error of 1). */
double tu_rel_err_scaled(const float *got, const double *ref, size_t n,
                         double scale);
/* The same with a float reference (core against core). */
double tu_rel_err_f(const float *got, const float *ref, size_t n);

/* ---- running the core ---------------------------------------------------- */

/* One planned and executed forward call. Owns its buffers. */
typedef struct tu_run {
  attn_plan_t plan;
  attn_outputs_t o; /* out always; the others, the reductions' included,
                       when the params ask for them */
  attn_error_t err;
  /* private: the guarded allocations behind o's buffers (out, weights,
   * mean_weights, head_outputs, then the reductions': top_k_index,
   * top_k_value, pooled, entropy, sink, distance), and the scratch */
  float *base_[10];
  size_t len_[10];
  void *ws_;
} tu_run_t;

/* ---- instruction sets ---------------------------------------------------- */

/* Whether this CPU runs `isa`, by attn_backend_info's detected ISA: AUTO
 * and GENERIC always, AVX2 and AVX512 when they are not above it. */
int tu_isa_runs(attn_isa_t isa);

/* Says on stderr that the case `what` did not run because this CPU lacks
 * `isa`, as "<program>: avx512 case skipped: this CPU lacks AVX-512 (best:
 * avx2): <what>", so that a skip never passes silently; fails instead
 * when ATTND_REQUIRE_ISA asks for `isa` (tu_isa_required). */
void tu_isa_skipped(attn_isa_t isa, const char *what);

/* The ISA named by the environment's ATTND_REQUIRE_ISA (generic, avx2 or
 * avx512), or ATTN_ISA_AUTO when unset or empty; fails (Check) on any
 * other name. Set where the CPU is known (.ci/run: avx512), it makes
 * tu_isa_skipped fail for that ISA and those below it, so that a case
 * skipped there fails instead of passing. */
attn_isa_t tu_isa_required(void);

/* ---- running the core ---------------------------------------------------- */

/* Plans `p` with `ex` (may be NULL) and runs it. Output buffers are filled
 * with NaN and fenced by guard words, the workspace with 0xFF bytes (NaN),
 * so that unwritten outputs, reads of stale scratch and overruns all show.
 * Asserts that the plan's ISA is the one asked for (the detected one for
 * NULL or AUTO). Returns 0, or ATTN_ENOTSUP when `ex` names an ISA this
 * CPU lacks (asserted: !tu_isa_runs, and the error names "isa"; nothing to
 * free); any other failure fails the test with the core's message. */
int tu_run(tu_run_t *run, const attn_params_t *p, const attn_exec_t *ex);
void tu_run_free(tu_run_t *run);

/* Runs the core as tu_run does and asserts: the plan's sizes equal the
 * reference's, and every requested output is within `tol` (relative, see
 * tu_rel_err) of the reference. `what` names the case in messages. Returns
 * 0 when all that was checked, or ATTN_ENOTSUP, after tu_isa_skipped, when
 * `ex` names an ISA this CPU lacks: nothing was checked, so callers must
 * look at the result (the compiler makes them), assert it, and make sure
 * something else still runs. Every other outcome fails the test. */
int tu_check_vs_ref(const attn_params_t *p, const attn_exec_t *ex, double tol,
                    const char *what) __attribute__((warn_unused_result));

/* ---- random cases -------------------------------------------------------- */

/* Projection bits of tu_spec_t.proj. */
enum {
  TU_QW = 1 << 0,
  TU_QB = 1 << 1,
  TU_KW = 1 << 2,
  TU_KB = 1 << 3,
  TU_VW = 1 << 4,
  TU_VB = 1 << 5,
  TU_OW = 1 << 6,
  TU_OB = 1 << 7,
  TU_ALLPROJ = 0xff
};

/* Output bits of tu_spec_t.skip: outputs NOT requested (0 = want all). */
enum { TU_SKIP_W = 1, TU_SKIP_M = 2, TU_SKIP_HO = 4 };

/* Bits of tu_spec_t.allow_ones / bias_ones: canonical dim d of
 * [B, H, Lq, Lk] (bit 0 = B ... bit 3 = Lk) has size 1 in the tensor. */
enum { TU_1B = 1, TU_1H = 2, TU_1Q = 4, TU_1K = 8 };

/* A case, by sizes and features. Zero means "default" for sizes: B 1, Lk
 * Lq, Dv Dh; Eq/Ek/Ev/Eo are only used with the matching weight (0: the
 * width the weight would have without projection). */
typedef struct tu_spec {
  int64_t B;
  int batched; /* rank-3 inputs (required when B > 1) */
  int64_t Lq, Lk;
  int64_t H, Hkv; /* Hkv is passed as num_kv_heads: 0 means H */
  int64_t Dh, Dv;
  int64_t Eq, Ek, Ev, Eo;
  int cross;       /* key given; else key is absent (= query) */
  int value_given; /* value given; else value is absent (= key) */
  unsigned proj;   /* TU_QW ... */
  attn_causal_t causal;
  int key_lengths;     /* give key_lengths */
  int64_t lengths[4];  /* for b < 4; negative: random in [0, Lk] */
  int allow_rank;      /* 0: none, else 2..4 */
  unsigned allow_ones; /* TU_1B ... */
  double allow_p;      /* chance that an element allows (0: 0.7) */
  int bias_rank;
  unsigned bias_ones;
  int has_wl, has_wr;
  int64_t wl, wr;
  attn_alibi_t alibi;
  int has_scale;
  float scale;
  int has_softcap;
  float softcap;
  unsigned skip; /* TU_SKIP_* */
} tu_spec_t;

/* A built case: params plus the buffers they borrow, owned here. */
typedef struct tu_case {
  attn_params_t p;
  int64_t B, Lq, Lk, Eq, Ek, Ev, Eo, H, Hkv, Dh, Dv; /* as intended */
  float *query, *key, *value;
  float *qw, *kw, *vw, *ow, *qb, *kb, *vb, *ob;
  float *bias, *slopes;
  uint8_t *allow;
  int64_t *lengths;
} tu_case_t;

/* Builds `c` from `s` with data drawn from `seed`. Asserts (fails the test)
 * when `s` is inconsistent: that is a bug in the test, not the core. */
void tu_case_build(tu_case_t *c, const tu_spec_t *s, uint64_t seed);
void tu_case_free(tu_case_t *c);

/* A random consistent spec: every feature on or off at random, sizes small
 * (L <= 70, widths <= 64). */
void tu_spec_random(tu_spec_t *s, tu_rng_t *r);

/* Prints a spec on one line into buf (for failure messages). */
void tu_spec_describe(const tu_spec_t *s, char *buf, size_t n);

/* ---- files --------------------------------------------------------------- */

/* The whole file at `path`, its bytes as they are (binary or text) in a
 * malloc'd buffer with a NUL after the last one, so that a text file reads
 * as a string; its length in *len where len is not NULL. NULL, errno set,
 * where the file cannot be opened, read or held; no Check assertion, so a
 * suite may read files while it builds its cases. The caller frees it. */
char *tu_read_file(const char *path, size_t *len);

/* tu_read_file inside a test: a Check failure naming `path` and the reason
 * where the file cannot be read, so the result is never NULL. */
char *tu_read_file_or_fail(const char *path, size_t *len);

/* One attention layer of a decoder, as check_kv and check_cuda's kv cases
 * run it: q/k/v/o projections with biases, per-head q and k norms, grouped
 * key/value heads, and `tokens` hidden states x [tokens, E]; all random.
 * The caller sets the shape (E to rope_dims) before tu_layer_init. */
typedef struct tu_layer {
  int64_t E, H, Hkv, Dh, Dv, rope_dims;
  float *qw, *kw, *vw, *ow, *qb, *kb, *vb, *ob, *qn, *kn;
  float *x;
} tu_layer_t;

/* Fills the weights and x from `seed`; the layer owns them until
 * tu_layer_free, which frees each and sets it to NULL (the shape stays). */
void tu_layer_init(tu_layer_t *l, uint64_t seed, int64_t tokens);
void tu_layer_free(tu_layer_t *l);

/* The layer's parameters over `query` (rank 2 or 3): causal, rope of
 * rope_dims in halves (theta 500), weights asked for; the caller adds the
 * cache. */
attn_params_t tu_layer_params(const tu_layer_t *l, attn_tensor_t query);

/* The score terms the batch cases add to a layer's parameters: a left
 * window of 20, ALiBi's default slopes and a softcap of 3. */
void tu_layer_add_terms(attn_params_t *p);

#endif
