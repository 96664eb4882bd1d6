/* core/internal.h: what the core's files share. Not installed, not API. */
#ifndef ATTN_INTERNAL_H
#define ATTN_INTERNAL_H

#include <stdint.h>

#include "attn/attn.h"

/* Tile sizes shared by the planner (for workspace) and the kernels. A query
 * block is ATTN__BR query rows; a key block ATTN__BC keys. The workspace is
 * sized by the tensors, not by whole tiles: key-indexed buffers are padded
 * to ATTN__KPAD keys (the widest step in which kernels compute scores: a
 * partial last block is read up to the next multiple of ATTN__KPAD, never
 * further), and a head's value rows to ATTN__VPAD floats when it is wider
 * than that (narrower heads lie packed, internal.h's ctx). */
#define ATTN__BR 64
#define ATTN__BC 64
_Static_assert(ATTN__BC == ATTN_KV_PAGE, "a key block is a cache page");
#define ATTN__KPAD 16
_Static_assert(ATTN__BC % ATTN__KPAD == 0, "a key block of whole pads");
#define ATTN__VPAD 16
#define ATTN__ALIGN 64

/* Rows per projection task: projections run as independent sgemm calls of
 * up to ATTN__PROJ_ROWS_MAX rows, fewer (down to ATTN__PROJ_ROWS_MIN) when
 * the layout stage would otherwise have under ATTN__PROJ_TASKS tasks; then,
 * with several threads, fewer again (to the same floor) while a stage's
 * tasks would keep under 7/8 of the threads busy (forward.c, setup). Bigger
 * calls pack each weight once for more rows: 1024 runs about 4% faster
 * than 256 at E = 512. Which rows a call computes does not change any
 * element of the result (forward.c's header). */
#define ATTN__PROJ_ROWS_MIN 256
#define ATTN__PROJ_ROWS_MAX 1024
#define ATTN__PROJ_TASKS 12

/* Features per projection task, at least, when a stage's row chunks give
 * under two tasks a thread: a projection wider than this (Q's, K's and
 * V's in whole heads, the output's in columns) is then split by columns
 * too, into groups of about this many. At E = 4096 and L = 4096 a row
 * chunk of Q is one task of 34 GFLOP: 12 tasks in the layout stage and 4
 * in the output projection, which 16 threads cannot share (the output
 * stage runs on 4 of them); in groups, 48 and 16. Each group's call packs
 * the chunk's rows again: 1024 x 4096 x 4096 in 4 calls of 1024 columns
 * took 1.03 to 1.09 of one call's time on one thread (split into rows of
 * 256 instead, 1.14), which is why one thread, and two threads on 12 and
 * 4 tasks, keep whole rows. The results are the same to the bit either
 * way (forward.c). E = 512 stays one group. */
#define ATTN__PROJ_COLS 1024

static inline int64_t attn__round_up(int64_t x, int64_t m) {
  return (x + m - 1) / m * m;
}

/* Fills `err` (may be NULL) with `code`, `field` (both as field_id and as
 * its name) and the printf-style message, and returns `code`. */
int attn__err(attn_error_t *err, int code, attn_field_t field, const char *fmt,
              ...) __attribute__((format(printf, 4, 5)));

/* Everything a kernel reads, resolved by attn_forward from the plan. All
 * pointers borrowed. Layouts:
 *   q      [B, Lq, H·Dh]        scaled by the plan's scale
 *   kt     [B, Hkv·Dh, ldk]     keys transposed; keys in [Lk, ldk) are zero
 *   v      [B, Lk, ldv]         head g in columns g·vh .. g·vh + Dv
 *   concat [B, Lq, H·Dv]        the heads' outputs side by side
 * A key block is read up to Lkp = Lk rounded up to ATTN__KPAD, and a value
 * row of head g as Dvp floats from g·vh (Dvp = Dv rounded up to
 * ATTN__VPAD). Where ldk < ATTN__KPAD (Lk < ATTN__KPAD: rows of a few keys)
 * a row's read runs on into the next rows, and where vh = Dv < Dvp a head's
 * into the next head's: finite numbers of this call's K or V, or the zeros
 * of the buffer's tail, which the kernels mask (keys past Lk get -inf) or
 * drop (output columns past Dv); the tails hold what the last row's read
 * passes. So K and V take about what their tensors take, for any Lk, Dh or
 * number of heads. The row strides are padded by a cache line where they
 * would otherwise be a multiple of a block (a tile's rows, a power of two
 * apart, would fall into the same cache sets). */
static inline int64_t attn__pad_line(int64_t n) {
  n = attn__round_up(n, 16);
  return n % 64 ? n : n + 16;
}
static inline int64_t attn__ldk(int64_t Lk) {
  return Lk < ATTN__KPAD ? Lk : attn__pad_line(Lk);
}
static inline int64_t attn__vh(int64_t Dv) {
  return Dv < ATTN__VPAD ? Dv : attn__round_up(Dv, ATTN__VPAD);
}
static inline int64_t attn__ldv_ws(int64_t Hkv, int64_t vh) {
  return attn__pad_line(Hkv * vh);
}
/* Floats after kt's and v's last rows, for the reads that pass them. */
#define ATTN__TAIL 16
/* A kv cache's pages (attn_kv_t) keep their own layout: heads Dvp apart. */
static inline int64_t attn__ldv(int64_t Hkv, int64_t Dvp) {
  return Hkv * Dvp + 16;
}

/* Per-thread scratch, in floats from its start, each part 64-byte aligned.
 * Attention (a unit of `rows` query rows): S or P [rows, lds], O [rows,
 * Dvp], the unit's query rows [rows, Dh] (none for one row, which is
 * contiguous already), l [rows, 16], m [rows], lo and hi [rows] int64, the
 * exact path's sums [Dvp] doubles. Only `slots` threads run attention (no
 * more than there are units); every thread has `stage1` floats for the
 * layout (a chunk of the rope's cosines and sines). With reductions of the
 * weights (attn_reduce_t), S holds the unit's weights as for dense ones,
 * and mw and tk follow. */
typedef struct attn__scratch {
  int64_t rows, lds;
  int64_t s, o, q, l, m, lo, hi, acc;
  int64_t mw; /* reductions of the mean over heads: its rows [rows, lds] */
  int64_t tk; /* top_k: a row's best keys (uint64: a weight and its index),
               * sorted, k rounded up to whole vectors of 8 (kernel.c's KP) */
  /* The reductions on the online path (kernel.c, ored_t): per row, 3
   * vectors of sums, its best K keys (uint64: a score and its index) as
   * tk's, their count (int64), and the pooled blocks' sums [nk]. */
  int64_t ex, hk, hn, pool;
  int64_t floats;
  int64_t slots, stage1;
} attn__scratch_t;
void attn__scratch_plan(const attn_plan_t *plan, attn__scratch_t *sc);

/* The workspace attn_forward lays out for this plan, in bytes. */
size_t attn__workspace_bytes(const attn_plan_t *plan);

/* The rope's pairs whose angles stage 1 holds at once. */
#define ATTN__ROPE_CHUNK 256

typedef struct attn__ctx {
  const attn_plan_t *plan;
  int64_t Lkp, Dvp, vh, ldk, ldv, off; /* off = Lk - Lq */
  const float *q, *kt, *v;
  /* With a kv cache (attn_kv_t), instead of kt and v: the pages, each
   * item's cached keys, and the offset of a page's values; ldk is then
   * ATTN_KV_LDK. Item b sees past[b] + Lq keys, its diagonal past[b]. */
  float *const *const *pages;
  const int64_t *past;
  int64_t v_off;
  float *concat, *head_outputs, *weights, *mean_weights;
  const float *slopes;             /* [H] or NULL */
  const int64_t *key_lengths;      /* [B] or NULL */
  const uint8_t *allow;            /* or NULL */
  const float *bias;               /* or NULL */
  int64_t allow_st[4], bias_st[4]; /* element strides over [B, H, Lq, Lk],
                                      0 where broadcast */
  int has_softcap;
  float softcap;
  int64_t wl, wr; /* window sides, -1 if unbounded (attn_plan_t) */
  int64_t n_qblocks;
  int heads_per_unit; /* H when mean weights (or reductions of their mean)
                         are asked for, else 1 */
  /* Reductions of the weights (attn_reduce_t), or red NULL. The unit of
   * query block qb for output head hh (0 for the mean) of item b adds its
   * rows' pooled cells into pool_part [B, H', pool_slots, nk] doubles, at
   * the slots of its pooled rows (attn__pool_slot); forward.c sums the
   * units in order. */
  const attn_reduce_t *red;
  int32_t *top_k_index;
  float *top_k_value, *entropy, *sink, *distance;
  double *pool_part;
  int64_t pool_slots;
  attn__scratch_t sc; /* the attention's part of the scratch */
  /* Numeric safety (forward.c decides, the kernels obey): */
  int exact;     /* every row by the float64 path: some score may leave
                    float32's range, or the softcap is below 1/FLT_MAX */
  double qmul;   /* what q must still be multiplied by: 1, or the scale when
                    Q was laid out unscaled (exact is then set) */
  int64_t *fail; /* [ATTN__FAIL_N]: the first failing position per stage,
                    INT64_MAX if none; lowered with attn__fail */
} attn__ctx_t;

/* The keys item b sees, and its causal diagonal's offset. */
static inline int64_t attn__item_lk(const attn__ctx_t *c, int64_t b) {
  return c->past ? c->past[b] + c->plan->Lq : c->plan->Lk;
}
static inline int64_t attn__item_off(const attn__ctx_t *c, int64_t b) {
  return c->past ? c->past[b] : c->off;
}

/* The key tile of key block kb for batch b, kv head g: Dh rows, ldk apart;
 * and its value rows, ldv apart. */
static inline const float *attn__kt_tile(const attn__ctx_t *c, int64_t b,
                                         int64_t g, int64_t kb) {
  const attn_plan_t *pl = c->plan;
  if (c->pages)
    return c->pages[b][kb] + g * pl->Dh * ATTN_KV_LDK;
  return c->kt + (b * pl->Hkv + g) * pl->Dh * c->ldk + kb * ATTN__BC;
}
static inline const float *attn__v_tile(const attn__ctx_t *c, int64_t b,
                                        int64_t g, int64_t kb) {
  if (c->pages)
    return c->pages[b][kb] + c->v_off + g * c->vh;
  return c->v + (b * c->plan->Lk + kb * ATTN__BC) * c->ldv + g * c->vh;
}

/* Stages that can find a result that does not fit float32, in the order
 * attn_forward reports them (attn.h, ATTN_ENUMERIC). Positions: a row of
 * the flattened [B·Lq] (Q, the output projection) or [B·Lk] (K, V), or
 * (b·H + h)·Lq + i for a query row of a head (scores, output). */
enum {
  ATTN__FAIL_Q,
  ATTN__FAIL_K,
  ATTN__FAIL_V,
  ATTN__FAIL_SCORES,
  ATTN__FAIL_OUTPUT,
  ATTN__FAIL_OUT_PROJ,
  ATTN__FAIL_N
};

/* Lowers fail[stage] to pos, atomically: the smallest position wins, so
 * the error reported does not depend on the threads. */
static inline void attn__fail(int64_t *fail, int stage, int64_t pos) {
  int64_t cur = __atomic_load_n(&fail[stage], __ATOMIC_RELAXED);
  while (pos < cur &&
         !__atomic_compare_exchange_n(&fail[stage], &cur, pos, 1,
                                      __ATOMIC_RELAXED, __ATOMIC_RELAXED))
    ;
}

/* The x86 kernels (avx2, avx512) exist only where the target is x86-64:
 * the Makefile compiles them for it alone (KERNEL_ISAS). Elsewhere
 * attn__cpu_isa answers generic, so no plan names them, and nothing may
 * refer to them: they would not link. */
#if defined(__x86_64__)
#define ATTN__X86_KERNELS 1
#endif

/* The largest |x| over rows [0, rows) of n floats, ld apart, as the bits
 * of a non-negative float: >= 0x7f800000 (ATTN__INF_BITS) when some
 * element is infinite or NaN. With skip_neg_inf, -inf counts as 0 (a
 * bias of -inf is a mask). Vectorised per ISA, like the kernels. */
#define ATTN__INF_BITS 0x7f800000u
typedef uint32_t (*attn__absmax_fn)(const float *x, int64_t rows, int64_t n,
                                    int64_t ld, int skip_neg_inf);
uint32_t attn__absmax_generic(const float *, int64_t, int64_t, int64_t, int);
uint32_t attn__absmax_avx2(const float *, int64_t, int64_t, int64_t, int);
uint32_t attn__absmax_avx512(const float *, int64_t, int64_t, int64_t, int);

/* c[i·cx + j·cy] = alpha · Σ_p x[i·ldx + p] · y[j·ldy + p], for i < nx,
 * j < ny: the products of rows, for a product with a short side y (a
 * batch of decode steps against a weight). x is read once; each dot is
 * summed in an order that depends on k and the ISA only, not on nx, ny or
 * where the dot lies, so a row's result does not depend on the rows it is
 * computed with. Vectorised per ISA, like the kernels. */
typedef void (*attn__dots_fn)(int64_t nx, int64_t ny, int64_t k, float alpha,
                              const float *x, int64_t ldx, const float *y,
                              int64_t ldy, float *c, int64_t cx, int64_t cy);
void attn__dots_generic(int64_t, int64_t, int64_t, float, const float *,
                        int64_t, const float *, int64_t, float *, int64_t,
                        int64_t);
void attn__dots_avx2(int64_t, int64_t, int64_t, float, const float *, int64_t,
                     const float *, int64_t, float *, int64_t, int64_t);
void attn__dots_avx512(int64_t, int64_t, int64_t, float, const float *, int64_t,
                       const float *, int64_t, float *, int64_t, int64_t);

/* Computes one unit of attention: batch item, a block of ATTN__BR query
 * rows, and one head (or all heads, when heads_per_unit is H), writing
 * concat, head outputs and weights for those rows. `scratch` is this
 * thread's, of ctx->sc.floats floats, 64-byte aligned. Any thread;
 * units never write the same memory. One function per instruction set. */
typedef void (*attn__attend_fn)(const attn__ctx_t *ctx, int64_t b, int64_t h,
                                int64_t qblock, float *scratch);
void attn__attend_generic(const attn__ctx_t *, int64_t, int64_t, int64_t,
                          float *);
void attn__attend_avx2(const attn__ctx_t *, int64_t, int64_t, int64_t, float *);
void attn__attend_avx512(const attn__ctx_t *, int64_t, int64_t, int64_t,
                         float *);

/* Element strides of a tensor broadcast to [B, H, Lq, Lk]; 0 where it is
 * broadcast (the allow mask, the bias). */
void attn__broadcast_strides(const attn_tensor_t *t, int64_t st[4]);

/* The rope's frequencies f_i into freq[0 .. dims/2) (attn_rope_t), in
 * float64. */
void attn__rope_frequencies(const attn_rope_t *rp, int64_t dims, double *freq);

/* The CUDA backend's forward call (core/cuda/forward.cu), for a plan whose
 * backend is CUDA and whose outputs attn_forward has checked. */
int attn__cuda_forward(const attn_plan_t *plan, attn_outputs_t *o,
                       void *workspace, attn_error_t *err);

/* The device memory that attn__cuda_forward takes for a plan whose checks
 * have passed (attn_plan_t.device_bytes); 0 in a build without CUDA. */
size_t attn__cuda_device_bytes(const attn_plan_t *plan);

/* For tests/check_cuda.c: makes the device fail as a trapping kernel
 * would, through the path a call's errors take, and returns that error
 * (0 in a build without CUDA). The device is unusable afterwards. */
int attn__cuda_trap(void);

/* For tests/check_cuda.c: whether `error`, a cudaError_t, is one of CUDA's
 * sticky errors, after which the backend is unusable until the process
 * restarts (attn_cuda_info); 0 in a build without CUDA. */
int attn__cuda_sticky(int error);

/* The CUDA backend's flash kernel (core/cuda/kernels.h): 0 picks the
 * default (version 2 where it applies, else 1), 1 forces version 1, 3 runs
 * version 3 where it applies (else as 0); attn__cuda_flash_last is the
 * version the last call ran (0 before any). For the tests and the benchmark,
 * which compare the versions; read and written atomically. In every build. */
extern int attn__cuda_flash_version, attn__cuda_flash_last;
/* The first pooled row that query block qb touches (its rows from q0). */
static inline int64_t attn__pool_first(int64_t qb, int64_t q0, int64_t pq) {
  int64_t i = qb * ATTN__BR;
  return ((i > q0 ? i : q0) - q0) / pq;
}
/* The units' pooled partials of one (b, h'): query block qb's pooled row
 * qp is slot qp + qb − q0/ATTN__BR. A block's rows are consecutive, and
 * the next block's start at least one slot later (it may share its first
 * row with this one's last), so the blocks of the query range [q0, q1)
 * hold pool_nq + their count of slots: nothing for the blocks outside. */
static inline int64_t attn__pool_slot(int64_t qb, int64_t qp, int64_t q0) {
  return qp + qb - q0 / ATTN__BR;
}
static inline int64_t attn__pool_slots(int64_t pool_nq, int64_t q0,
                                       int64_t q1) {
  return pool_nq + (q1 - 1) / ATTN__BR - q0 / ATTN__BR + 1;
}

/* The best ISA this CPU runs. */
attn_isa_t attn__cpu_isa(void);

#endif
