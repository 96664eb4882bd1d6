/* core/kernel.c: fused attention over tiles, for one instruction set, and
 * the two vector loops beside it: the magnitude scan (attn__absmax_*) and
 * the products with a short side (attn__dots_*; internal.h has both).
 *
 * This file is compiled once per ISA (-DATTN_KERNEL_ISA=generic|avx2|avx512
 * with that ISA's -m flags) and written with GCC vector extensions, so that
 * one source gives 128-, 256- and 512-bit code. Layouts are those of
 * attn__ctx_t: q [B, Lq, H·Dh], kt [B, Hkv·Dh, ldk], v [B, Lk, ldv], or
 * the pages of a kv cache; keys and values are read a block at a time
 * (attn__kt_tile, attn__v_tile), a block being a page.
 *
 * A unit is ATTN__BR query rows of one head (or of every head, when the
 * mean of the weights is wanted). Two paths:
 *   online (no weights returned): for each key block of ATTN__BC keys that
 *     some row may see, pass 1: S = Q·Kᵀ (scale is folded into Q);
 *     pass 2: score terms and masks; pass 3: online softmax (running max m
 *     and sum l, rescaling O); pass 4: O += P·V. Then O /= l. The score
 *     matrix never exists beyond one BR x BC tile, and key blocks that no
 *     row may see are never visited. Where a key block is one register tile
 *     wide (AVX-512), tiles with no mask or score term run passes 1 and 3
 *     fused, on the registers.
 *   two-pass (weights returned): the unit's rows of S for every visible key
 *     block, then an exact softmax per row, then O = P·V; P is the weights.
 * A row that may see no key gets weights 0 and output 0.
 *
 * Both paths work in float32, and the caller (forward.c) proves from the
 * magnitudes of Q, K, the bias and the slopes that no score can leave its
 * range. Where it cannot, ctx->exact sends every row down the exact path
 * (attend_row_exact: scores in float64). An output row that is not finite
 * (O sums up to Lk·e^SLACK value rows before the division, so large values
 * can overflow) is redone on the exact path too, whose P·V is a convex
 * combination summed in float64. Those checks are per row, outside the
 * tile loops. */
#include <math.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "internal.h"

#if !defined(ATTN_KERNEL_ISA)
#error "compile with -DATTN_KERNEL_ISA=generic|avx2|avx512"
#endif
#define KNAME_(isa) attn__attend_##isa
#define KNAME(isa) KNAME_(isa)
#define ANAME_(isa) attn__absmax_##isa
#define ANAME(isa) ANAME_(isa)
#define DNAME_(isa) attn__dots_##isa
#define DNAME(isa) DNAME_(isa)

/* Vector width VL in floats, and register tiles for the two products:
 * S tiles of QK_MR rows x QK_NV vectors, O tiles of PV_MR x PV_NV. */
#if defined(__AVX512F__)
#define VL 16
#define QK_MR 6
#define QK_NV 4
#define PV_MR 6
#define PV_NV 4
#elif defined(__AVX2__)
#define VL 8
#define QK_MR 6
#define QK_NV 2
#define PV_MR 6
#define PV_NV 2
#else
#define VL 4
#define QK_MR 6
#define QK_NV 2
#define PV_MR 6
#define PV_NV 2
#endif

_Static_assert(ATTN__BC % (QK_NV * VL) == 0, "key block must fill S tiles");

/* The steps in which a block's keys are computed: whole vectors, and at
 * least 8 for pv_tile's split. */
#define SW (VL < 8 ? 8 : VL)
_Static_assert(ATTN__BC % SW == 0 && SW % VL == 0, "key block of whole steps");
_Static_assert(ATTN__VPAD % VL == 0, "value padding must be whole vectors");

typedef float vf __attribute__((vector_size(VL * 4)));
typedef int32_t vi __attribute__((vector_size(VL * 4)));
typedef float vfu __attribute__((vector_size(VL * 4), aligned(4), may_alias));

#define INLINE static inline __attribute__((always_inline))

INLINE vf ld(const float *p) {
  return *(const vfu *)p;
}
INLINE void st(float *p, vf x) {
  *(vfu *)p = x;
}
/* Every lane x, with the ISA's broadcast. ((vf){0} + x would cost an add,
 * as -0 + 0 is +0, and hide the broadcast from the FMA that uses it.) */
INLINE vf splat(float x) {
#if defined(__AVX512F__)
  return (vf)_mm512_set1_ps(x);
#elif defined(__AVX2__)
  return (vf)_mm256_set1_ps(x);
#elif defined(__SSE2__)
  return (vf)_mm_set1_ps(x);
#else
  return (vf){0} + x;
#endif
}
INLINE vf vsel(vi m, vf a, vf b) {
  return (vf)(((vi)a & m) | ((vi)b & ~m));
}
/* a > b ? a : b, lane by lane: b where either is NaN, and b where they are
 * equal, which is exactly what maxps does. */
INLINE vf vmax(vf a, vf b) {
#if defined(__AVX512F__)
  return (vf)_mm512_max_ps((__m512)a, (__m512)b);
#elif defined(__AVX2__)
  return (vf)_mm256_max_ps((__m256)a, (__m256)b);
#else
  return vsel(a > b, a, b);
#endif
}

/* The lane indices i ^ k, i < VL: a constant for __builtin_shuffle (built
 * in a loop, GCC assembled the index vector lane by lane at every use). */
#if VL == 16
#define XOR_IDX(k)                                                             \
  ((vi){0 ^ (k), 1 ^ (k), 2 ^ (k), 3 ^ (k), 4 ^ (k), 5 ^ (k), 6 ^ (k),         \
        7 ^ (k), 8 ^ (k), 9 ^ (k), 10 ^ (k), 11 ^ (k), 12 ^ (k), 13 ^ (k),     \
        14 ^ (k), 15 ^ (k)})
#elif VL == 8
#define XOR_IDX(k)                                                             \
  ((vi){0 ^ (k), 1 ^ (k), 2 ^ (k), 3 ^ (k), 4 ^ (k), 5 ^ (k), 6 ^ (k), 7 ^ (k)})
#else
#define XOR_IDX(k) ((vi){0 ^ (k), 1 ^ (k), 2 ^ (k), 3 ^ (k)})
#endif

/* Horizontal max and sum in log2(VL) steps, not VL serial ones: lane i
 * meets lane i ^ k for k = VL/2 .. 1, so the sums pair lanes in a fixed
 * tree whatever the ISA's width. */
INLINE float hmax(vf x) {
#if VL >= 16
  x = vmax(x, __builtin_shuffle(x, XOR_IDX(8)));
#endif
#if VL >= 8
  x = vmax(x, __builtin_shuffle(x, XOR_IDX(4)));
#endif
  x = vmax(x, __builtin_shuffle(x, XOR_IDX(2)));
  x = vmax(x, __builtin_shuffle(x, XOR_IDX(1)));
  return x[0];
}

INLINE float hsum(vf x) {
#if VL >= 16
  x += __builtin_shuffle(x, XOR_IDX(8));
#endif
#if VL >= 8
  x += __builtin_shuffle(x, XOR_IDX(4));
#endif
  x += __builtin_shuffle(x, XOR_IDX(2));
  x += __builtin_shuffle(x, XOR_IDX(1));
  return x[0];
}

/* Whether the n floats at x (n a multiple of VL) are all finite: x·0 is 0
 * for a finite x and NaN for an infinite or NaN one. */
INLINE int finite_row(const float *x, int64_t n) {
  vf z = splat(0);
  for (int64_t k = 0; k < n; k += VL)
    z += ld(x + k) * 0.0f;
  return hsum(z) == 0.0f;
}

/* See internal.h. The magnitudes are compared as integers: for floats of
 * one sign, the bits order as the values do, with inf and NaN above every
 * finite value. */
uint32_t ANAME(ATTN_KERNEL_ISA)(const float *x, int64_t rows, int64_t n,
                                int64_t stride, int skip_neg_inf) {
  const vi mag = (vi){0} + 0x7fffffff, neg_inf = (vi){0} + (int32_t)0xff800000;
  vi mx = {0};
  uint32_t m = 0;
  for (int64_t r = 0; r < rows; r++) {
    const float *p = x + r * stride;
    int64_t k = 0;
    for (; k + VL <= n; k += VL) {
      vi u = (vi)ld(p + k), a = u & mag;
      if (skip_neg_inf)
        a &= ~(u == neg_inf);
      vi gt = a > mx;
      mx = (a & gt) | (mx & ~gt);
    }
    for (; k < n; k++) {
      uint32_t u;
      memcpy(&u, p + k, sizeof u);
      uint32_t a = skip_neg_inf && u == 0xff800000u ? 0 : u & 0x7fffffffu;
      m = a > m ? a : m;
    }
  }
  for (int i = 0; i < VL; i++)
    m = (uint32_t)mx[i] > m ? (uint32_t)mx[i] : m;
  return m;
}

/* ---- products with a short side ---------------------------------------- */

/* Register tiles of dots (internal.h): DOT_XR rows of the long operand
 * against DOT_YR rows of the short one, an accumulator each. */
#if defined(__AVX512F__)
#define DOT_XR 4
#else
#define DOT_XR 2
#endif
#define DOT_YR 6
/* with one row of y, each row of x is one dot: twice the rows of x a tile
 * keep twice the loads in flight */
#define DOT_XR1 (2 * DOT_XR)

/* c[i·cx + j·cy] = alpha · x_i · y_j for i < xr, j < yr: each dot a vector
 * of partial sums over the whole vectors of k, then their horizontal sum,
 * then the last k % VL products, in that order wherever the tile lies. */
INLINE void dot_tile(const int xr, const int yr, int64_t k, float alpha,
                     const float *x, int64_t ldx, const float *y, int64_t ldy,
                     float *c, int64_t cx, int64_t cy) {
  vf acc[DOT_XR1][DOT_YR];
#pragma GCC unroll 8
  for (int i = 0; i < xr; i++)
#pragma GCC unroll 8
    for (int j = 0; j < yr; j++)
      acc[i][j] = splat(0);
  const int64_t kv = k / VL * VL;
  /* a pointer a row, stepped: row offsets would each take a register to
   * form their addresses, and spill */
  const float *xp[DOT_XR1], *yp[DOT_YR];
#pragma GCC unroll 8
  for (int i = 0; i < xr; i++)
    xp[i] = x + i * ldx;
#pragma GCC unroll 8
  for (int j = 0; j < yr; j++)
    yp[j] = y + j * ldy;
  for (const float *end = x + kv; xp[0] < end;) {
    vf a[DOT_XR1];
#pragma GCC unroll 8
    for (int i = 0; i < xr; i++) {
      a[i] = ld(xp[i]);
      xp[i] += VL;
    }
#pragma GCC unroll 8
    for (int j = 0; j < yr; j++) {
      vf b = ld(yp[j]);
      yp[j] += VL;
#pragma GCC unroll 8
      for (int i = 0; i < xr; i++)
        acc[i][j] += a[i] * b;
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < xr; i++)
#pragma GCC unroll 8
    for (int j = 0; j < yr; j++) {
      float sum = hsum(acc[i][j]);
      for (int64_t p = kv; p < k; p++)
        sum += x[i * ldx + p] * y[j * ldy + p];
      c[i * cx + j * cy] = alpha * sum;
    }
}

#define DOT_Y(xr, ...)                                                         \
  switch (yr) {                                                                \
  case 1:                                                                      \
    dot_tile(xr, 1, __VA_ARGS__);                                              \
    break;                                                                     \
  case 2:                                                                      \
    dot_tile(xr, 2, __VA_ARGS__);                                              \
    break;                                                                     \
  case 3:                                                                      \
    dot_tile(xr, 3, __VA_ARGS__);                                              \
    break;                                                                     \
  case 4:                                                                      \
    dot_tile(xr, 4, __VA_ARGS__);                                              \
    break;                                                                     \
  case 5:                                                                      \
    dot_tile(xr, 5, __VA_ARGS__);                                              \
    break;                                                                     \
  default:                                                                     \
    dot_tile(xr, 6, __VA_ARGS__);                                              \
  }
_Static_assert(DOT_YR == 6, "DOT_Y covers 1..6");

/* See internal.h. A block of DOT_XR rows of x stays in the first-level
 * cache while every row of y passes it, so x is read from memory once and
 * y, the short side, from the cache. */
void DNAME(ATTN_KERNEL_ISA)(int64_t nx, int64_t ny, int64_t k, float alpha,
                            const float *x, int64_t ldx, const float *y,
                            int64_t ldy, float *c, int64_t cx, int64_t cy) {
  int64_t i = 0;
  if (ny == 1)
    for (; i + DOT_XR1 <= nx; i += DOT_XR1)
      dot_tile(DOT_XR1, 1, k, alpha, x + i * ldx, ldx, y, ldy, c + i * cx, cx,
               cy);
  for (; i < nx; i += DOT_XR) {
    const int xr = nx - i < DOT_XR ? (int)(nx - i) : DOT_XR;
    const float *xi = x + i * ldx;
    for (int64_t j = 0; j < ny; j += DOT_YR) {
      const int yr = ny - j < DOT_YR ? (int)(ny - j) : DOT_YR;
      const float *yj = y + j * ldy;
      float *cij = c + i * cx + j * cy;
      switch (xr) {
      case 1:
        DOT_Y(1, k, alpha, xi, ldx, yj, ldy, cij, cx, cy);
        break;
#if DOT_XR == 4
      case 2:
        DOT_Y(2, k, alpha, xi, ldx, yj, ldy, cij, cx, cy);
        break;
      case 3:
        DOT_Y(3, k, alpha, xi, ldx, yj, ldy, cij, cx, cy);
        break;
#endif
      default:
        DOT_Y(DOT_XR, k, alpha, xi, ldx, yj, ldy, cij, cx, cy);
      }
    }
  }
}

/* e^x for x <= 88, exactly 0 for x = -inf: Cody-Waite reduction
 * x = n·ln2 + r, |r| <= ln2/2, and Cephes' degree-6 polynomial for e^r;
 * about 1 ulp. 2^n is applied by vscalefps with AVX-512, and put in the
 * exponent bits otherwise. Results below e^-87.3 (under FLT_MIN) are 0:
 * a subnormal result costs a microcode assist per lane, and every masked
 * key (-inf) of a block would pay one. */
INLINE vf exp_poly(vf r) {
  vf p = splat(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  return p * r * r + r + 1.0f;
}

#if defined(__AVX512F__)
INLINE vf vexp(vf x) {
  const float lo = -87.3f;
  __mmask16 keep =
      _mm512_cmp_ps_mask((__m512)x, _mm512_set1_ps(lo), _CMP_GE_OQ);
  x = vmax(x, splat(lo));
  vf n =
      (vf)_mm512_roundscale_ps((__m512)(x * 1.44269504088896341f),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  vf r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  return (vf)_mm512_maskz_scalef_ps(keep, (__m512)exp_poly(r), (__m512)n);
}
#else
INLINE vf vexp(vf x) {
  const float lo = -87.3f;
  vi keep = x >= lo;
  x = vmax(x, splat(lo));
  vf n = x * 1.44269504088896341f + 12582912.0f; /* round to nearest */
  n -= 12582912.0f;
  vf r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  vi e = (__builtin_convertvector(n, vi) + 127) << 23;
  return (vf)((vi)(exp_poly(r) * (vf)e) & keep);
}
#endif

/* ---- the running max of the online softmax ------------------------------ */

/* The reductions on the online path (per head, scores in float32): each
 * row's running state beside its running max m and sum l, rescaled with
 * them (raise_red), in the unit's scratch (attn__scratch_t):
 *   ex [rows, 3·16]: lane-wise Σ e·(s − m), Σ e·|d − j| and Σ_{j<S} e,
 *     e = e^(s − m): so entropy = ln l − Σ e·(s − m) / l, and the others
 *     are their sums over l, all in the same pass as the output;
 *   hk [rows, KP]: the top k keys so far, each score and index in one
 *     key (top_key), sorted best first (top_insert): scores order keys as
 *     their weights do, so they need no final max;
 *   pool [rows, nk]: each pooled block's Σ e (or max e) of the row. */
typedef struct ored {
  float *ex;
  uint64_t *hk;
  int64_t *hn;
  float *pool;
  int64_t K, nk;
  int sums;     /* entropy or distance asked: ex's first two sums kept */
  double *part; /* the unit's pooled partials (attn__ctx_t) */
  int64_t pfirst;
} ored_t;

/* The row state's rescaling when row r's max m rises to mt (see ored_t).
 * Where alpha = e^(m − mt) is 0 every earlier term vanishes, and (mt − m)·l
 * may be +inf (mt − m up to FLT_MAX/8 on the fast paths, l up to Lk·e^SLACK
 * a lane): the sums are zeroed, not multiplied out to inf·0 = NaN. */
INLINE void raise_red(const ored_t *ro, int64_t r, float m, float mt,
                      float alpha, const float *l) {
  float *ex = ro->ex + r * 48;
  if (m == -INFINITY || alpha == 0.0f) {
    memset(ex, 0, 48 * sizeof(float));
  } else {
    st(ex, (ld(ex) - (mt - m) * ld(l)) * alpha);
    st(ex + 16, ld(ex + 16) * alpha);
    st(ex + 32, ld(ex + 32) * alpha);
  }
  if (ro->pool) {
    float *pr = ro->pool + r * ro->nk;
    for (int64_t k = 0; k < ro->nk; k++)
      pr[k] *= alpha;
  }
}

/* The lanes of x above t, as bit i for lane i (none where x is NaN). */
INLINE unsigned above_bits(vf x, float t) {
#if defined(__AVX512F__)
  return _mm512_cmp_ps_mask((__m512)x, _mm512_set1_ps(t), _CMP_GT_OQ);
#elif defined(__AVX2__)
  return (unsigned)_mm256_movemask_ps(
      _mm256_cmp_ps((__m256)x, _mm256_set1_ps(t), _CMP_GT_OQ));
#else
  vi gt = x > splat(t);
  unsigned bits = 0;
  for (int i = 0; i < VL; i++)
    bits |= (unsigned)(gt[i] & 1) << i;
  return bits;
#endif
}
/* Whether some lane of x is above t. */
INLINE int any_above(vf x, float t) {
  return above_bits(x, t) != 0;
}

/* Softmax does not change when every score of a row moves by the same
 * amount, so the max a row subtracts need not be its exact max: it may lag
 * the scores by up to e^SLACK, far from overflow. A row's max is raised
 * (exactly, with a horizontal reduction) only when a score passes it by
 * more; its output row and running sums are then rescaled. mx holds the
 * lane-wise max of the row's scores in this key block. */
#define SLACK 8.0f
INLINE void raise_max(vf mx, float *m, float *o, float *l, int64_t Dvp,
                      const ored_t *ro, int64_t r) {
  if (!any_above(mx, *m + SLACK))
    return;
  float mt = hmax(mx);
  float alpha = *m == -INFINITY ? 0.0f : expf(*m - mt);
  if (ro)
    raise_red(ro, r, *m, mt, alpha, l);
  *m = mt;
  for (int64_t k = 0; k < Dvp; k += VL)
    st(o + k, ld(o + k) * alpha);
  st(l, ld(l) * alpha);
}

/* ---- products on register tiles ---------------------------------------- */

/* acc[mr][nv] = Q[mr, D] · Kt[D, nv·VL], nv <= QK_NV: the register tile
 * of scores. q rows are ldq apart, kt rows ldk apart. Inlined into its
 * callers with mr and nv constant, acc never leaves the registers. */
INLINE void qk_acc(const int mr, const int nv, const float *q, int64_t ldq,
                   const float *kt, int64_t ldk, int64_t D,
                   vf acc[QK_MR][QK_NV]) {
#pragma GCC unroll 8
  for (int r = 0; r < mr; r++)
#pragma GCC unroll 8
    for (int n = 0; n < nv; n++)
      acc[r][n] = splat(0);
  for (int64_t d = 0; d < D; d++) {
    vf k[QK_NV];
#pragma GCC unroll 8
    for (int n = 0; n < nv; n++)
      k[n] = ld(kt + d * ldk + n * VL);
#pragma GCC unroll 8
    for (int r = 0; r < mr; r++) {
      vf a = splat(q[r * ldq + d]);
#pragma GCC unroll 8
      for (int n = 0; n < nv; n++)
        acc[r][n] += a * k[n];
    }
  }
}

/* S[mr, nv·VL] = Q·Kt, stored with rows lds apart. */
INLINE void qk_tile(const int mr, const int nv, const float *q, int64_t ldq,
                    const float *kt, int64_t ldk, int64_t D, float *s,
                    int64_t lds) {
  vf acc[QK_MR][QK_NV];
  qk_acc(mr, nv, q, ldq, kt, ldk, D, acc);
#pragma GCC unroll 8
  for (int r = 0; r < mr; r++)
#pragma GCC unroll 8
    for (int n = 0; n < nv; n++)
      st(s + r * lds + n * VL, acc[r][n]);
}

#if QK_NV * VL == ATTN__BC
/* A whole key block's scores for mr rows fit in the register tile: the
 * online softmax of a tile without masks or score terms runs on them in
 * registers. Per row, the running max m, the running sums l (a vector per
 * row) and the output rows o are rescaled if the max must grow, and
 * P = e^(S - m) is stored to p. */
INLINE void qk_softmax_tile(const int mr, const float *q, int64_t ldq,
                            const float *kt, int64_t ldk, int64_t D, float *p,
                            float *m, float *l, float *o, int64_t Dvp) {
  vf acc[QK_MR][QK_NV];
  qk_acc(mr, QK_NV, q, ldq, kt, ldk, D, acc);
#pragma GCC unroll 8
  for (int r = 0; r < mr; r++) {
    vf mx = acc[r][0];
#pragma GCC unroll 8
    for (int n = 1; n < QK_NV; n++)
      mx = vmax(mx, acc[r][n]);
    raise_max(mx, &m[r], o + r * Dvp, l + r * VL, Dvp, NULL, 0);
    vf mv = splat(m[r]), sum = ld(l + r * VL);
#pragma GCC unroll 8
    for (int n = 0; n < QK_NV; n++) {
      vf e = vexp(acc[r][n] - mv);
      st(p + r * ATTN__BC + n * VL, e);
      sum += e;
    }
    st(l + r * VL, sum);
  }
}
#endif

/* O[mr, nv·VL] += P[mr, C] · V[C, nv·VL]. A tile of few accumulators
 * would leave the FMA units waiting on their results (a decode step's one
 * row and one vector: a chain of C dependent FMAs, each waiting out the
 * last's latency); so u copies of them, u = PV_SPLIT(mr·nv), take every
 * u-th key, and are summed at the end. Key c goes to copy c % u whatever
 * C is, so that stopping at the last key that exists (V has no rows past
 * Lk) sums the same as running on over keys of weight 0. */
#define PV_SPLIT(t) ((t) == 1 ? 8 : (t) <= 3 ? 4 : (t) <= 5 ? 2 : 1)
/* acc += p[r·ldp] · the value row v, for the mr rows of a tile. */
INLINE void pv_key(const int mr, const int nv, const float *p, int64_t ldp,
                   const float *v, vf acc[PV_MR][PV_NV]) {
  vf x[PV_NV];
#pragma GCC unroll 8
  for (int n = 0; n < nv; n++)
    x[n] = ld(v + n * VL);
#pragma GCC unroll 8
  for (int r = 0; r < mr; r++) {
    vf a = splat(p[r * ldp]);
#pragma GCC unroll 8
    for (int n = 0; n < nv; n++)
      acc[r][n] += a * x[n];
  }
}
INLINE void pv_tile(const int mr, const int nv, const float *p, int64_t ldp,
                    const float *v, int64_t ldv, int64_t C, float *o,
                    int64_t ldo) {
  const int u = PV_SPLIT(mr * nv);
  vf acc[PV_SPLIT(1)][PV_MR][PV_NV];
#pragma GCC unroll 8
  for (int k = 0; k < u; k++)
#pragma GCC unroll 8
    for (int r = 0; r < mr; r++)
#pragma GCC unroll 8
      for (int n = 0; n < nv; n++)
        acc[k][r][n] = k ? splat(0) : ld(o + r * ldo + n * VL);
  int64_t c = 0;
  for (; c + u <= C; c += u)
#pragma GCC unroll 8
    for (int k = 0; k < u; k++)
      pv_key(mr, nv, p + c + k, ldp, v + (c + k) * ldv, acc[k]);
#pragma GCC unroll 8
  for (int k = 0; k < u; k++) /* the last keys, fewer than u */
    if (c + k < C)
      pv_key(mr, nv, p + c + k, ldp, v + (c + k) * ldv, acc[k]);
#pragma GCC unroll 8
  for (int k = 1; k < u; k++)
#pragma GCC unroll 8
    for (int r = 0; r < mr; r++)
#pragma GCC unroll 8
      for (int n = 0; n < nv; n++)
        acc[0][r][n] += acc[k][r][n];
#pragma GCC unroll 8
  for (int r = 0; r < mr; r++)
#pragma GCC unroll 8
    for (int n = 0; n < nv; n++)
      st(o + r * ldo + n * VL, acc[0][r][n]);
}

/* The tile functions with mr (and nv) as compile-time constants. */
#define CASE_MR(F, ...)                                                        \
  case 1:                                                                      \
    F(1, __VA_ARGS__);                                                         \
    break;                                                                     \
  case 2:                                                                      \
    F(2, __VA_ARGS__);                                                         \
    break;                                                                     \
  case 3:                                                                      \
    F(3, __VA_ARGS__);                                                         \
    break;                                                                     \
  case 4:                                                                      \
    F(4, __VA_ARGS__);                                                         \
    break;                                                                     \
  case 5:                                                                      \
    F(5, __VA_ARGS__);                                                         \
    break;                                                                     \
  case 6:                                                                      \
    F(6, __VA_ARGS__);                                                         \
    break;
_Static_assert(QK_MR == 6 && PV_MR == 6, "CASE_MR covers 1..6");

/* S[rows, n] = Q[rows, D] · Kt[D, n] for the first n keys of a key block
 * (n a multiple of SW): q rows are ldq apart, kt rows ldk apart. Whole
 * tiles of QK_NV vectors, then one narrower tile for the rest. */
#define SCORE_TILES(nv, c)                                                     \
  for (int64_t r = 0; r < rows; r += QK_MR) {                                  \
    int mr = rows - r < QK_MR ? (int)(rows - r) : QK_MR;                       \
    switch (mr) {                                                              \
      CASE_MR(qk_tile, nv, q + r * ldq, ldq, kt + (c), ldk, D,                 \
              s + r * lds + (c), lds)                                          \
    }                                                                          \
  }
static void scores(const float *q, int64_t ldq, int64_t D, const float *kt,
                   int64_t ldk, int64_t rows, float *s, int64_t lds,
                   int64_t n) {
  int64_t c = 0;
  for (; c + QK_NV * VL <= n; c += QK_NV * VL)
    SCORE_TILES(QK_NV, c)
  switch ((n - c) / VL) {
  case 0:
    break;
#if QK_NV > 1
  case 1:
    SCORE_TILES(1, c)
    break;
#endif
#if QK_NV > 2
  case 2:
    SCORE_TILES(2, c)
    break;
#endif
#if QK_NV > 3
  case 3:
    SCORE_TILES(3, c)
    break;
#endif
  }
}
#undef SCORE_TILES
_Static_assert(QK_NV <= 4, "scores covers tails of up to 3 vectors");

/* O[rows, Dvp] += P[rows, C] · V[C, Dvp]: p rows ldp apart, v rows ldv
 * apart, o rows Dvp apart. Column groups outside, row tiles inside: a
 * group's value rows (C × PV_NV vectors, 16 KB) stay in L1 for every row
 * tile, where the block's whole V (32 KB at Dv 128) beside P and O did not
 * (L 4096, Dh 128, one thread: 3 to 6% less time in attention, 2026-12-08).
 * Each output's sum runs over the keys in the same order either way. */
static void mix(const float *p, int64_t ldp, const float *v, int64_t ldv,
                int64_t Dvp, int64_t rows, int64_t C, float *o) {
  int64_t nvec = Dvp / VL;
  int64_t n = 0;
  for (; n + PV_NV <= nvec; n += PV_NV)
    for (int64_t r = 0; r < rows; r += PV_MR) {
      int mr = rows - r < PV_MR ? (int)(rows - r) : PV_MR;
      switch (mr) {
        CASE_MR(pv_tile, PV_NV, p + r * ldp, ldp, v + n * VL, ldv, C,
                o + r * Dvp + n * VL, Dvp)
      }
    }
  for (; n < nvec; n++)
    for (int64_t r = 0; r < rows; r += PV_MR) {
      int mr = rows - r < PV_MR ? (int)(rows - r) : PV_MR;
      switch (mr) {
        CASE_MR(pv_tile, 1, p + r * ldp, ldp, v + n * VL, ldv, C,
                o + r * Dvp + n * VL, Dvp)
      }
    }
}

/* ---- masks and score terms --------------------------------------------- */

/* The keys [lo, hi) that query row i of batch b may see under the causal,
 * key-length and window masks; lo == hi when none. The diagonal d = i + off
 * lies in (-Lq, Lk), and a window side is compared with a distance from d
 * before any bound is formed from it, so no sum here can overflow, however
 * large the side (the plan also clamps them). */
static void row_range(const attn__ctx_t *c, int64_t b, int64_t i, int64_t *lo,
                      int64_t *hi) {
  const attn_params_t *p = c->plan->params;
  const int64_t d = i + attn__item_off(c, b);
  int64_t l = 0, h = attn__item_lk(c, b);
  if (c->key_lengths && c->key_lengths[b] < h)
    h = c->key_lengths[b];
  if (p->causal == ATTN_CAUSAL_BOTTOM_RIGHT && d + 1 < h)
    h = d + 1;
  if (p->causal == ATTN_CAUSAL_TOP_LEFT && i + 1 < h)
    h = i + 1;
  if (c->wl >= 0 && d - l > c->wl) /* keys j < d - wl are out */
    l = d - c->wl;
  if (c->wr >= 0 && h - 1 - d > c->wr) /* keys j > d + wr are out */
    h = d + c->wr + 1;
  if (h <= l)
    l = h = 0;
  *lo = l;
  *hi = h;
}

/* Applies softcap, bias, ALiBi and the masks to S rows [0, rows) (query rows
 * i0.., row r at s + r·lds) over keys [j0, j0 + n). Masked scores become
 * -inf. `inside` says every key of the block is in every row's range, so
 * that only the allow tensor can mask. Keys past Lk (the padding of the
 * last block) read no bias or allow: their range mask makes them -inf. */
static void score_terms(const attn__ctx_t *c, int64_t b, int64_t h, int64_t i0,
                        int64_t rows, int64_t j0, int64_t n, float *s,
                        int64_t lds, const int64_t *lo, const int64_t *hi,
                        int inside) {
  const float cap = c->softcap, inv_cap = 1.0f / c->softcap;
  const float slope = c->slopes ? c->slopes[h] : 0;
  const int64_t nk = j0 + n <= c->plan->Lk ? n : c->plan->Lk - j0;
  for (int64_t r = 0; r < rows; r++) {
    float *x = s + r * lds;
    int64_t i = i0 + r;
    if (c->has_softcap)
      for (int64_t k = 0; k < n; k++)
        x[k] = cap * tanhf(x[k] * inv_cap);
    if (c->bias) {
      const int64_t *st4 = c->bias_st;
      const float *bp =
          c->bias + b * st4[0] + h * st4[1] + i * st4[2] + j0 * st4[3];
      if (st4[3])
        for (int64_t k = 0; k < nk; k++)
          x[k] += bp[k];
      else
        for (int64_t k = 0; k < nk; k++)
          x[k] += bp[0];
    }
    if (c->slopes) {
      int64_t d0 = i + attn__item_off(c, b) - j0; /* distance to key j0 */
      for (int64_t k = 0; k < n; k++)
        x[k] -= slope * (float)(d0 - k < 0 ? k - d0 : d0 - k);
    }
    if (c->allow) {
      const int64_t *st4 = c->allow_st;
      const uint8_t *ap =
          c->allow + b * st4[0] + h * st4[1] + i * st4[2] + j0 * st4[3];
      for (int64_t k = 0; k < nk; k++)
        if (!ap[k * st4[3]])
          x[k] = -INFINITY;
    }
    if (!inside) { /* keys outside [lo, hi): two runs, stored whole (a
                      store per masked key stalls the vector loads after) */
      int64_t a = lo[r] - j0, e = hi[r] - j0;
      a = a < 0 ? 0 : a > n ? n : a;
      e = e < a ? a : e > n ? n : e;
      for (int64_t k = 0; k < a; k++)
        x[k] = -INFINITY;
      for (int64_t k = e; k < n; k++)
        x[k] = -INFINITY;
    }
  }
}

static int any_terms(const attn__ctx_t *c) {
  return c->has_softcap || c->bias || c->slopes || c->allow;
}

/* The keys of the block at j0 that are computed: all ATTN__BC, or in the
 * last block those up to Lkp, the next multiple of ATTN__KPAD past Lk
 * (internal.h: kt's rows are read no further). */
static inline int block_keys(const attn__ctx_t *c, int64_t j0) {
  return c->Lkp - j0 < ATTN__BC ? (int)(c->Lkp - j0) : ATTN__BC;
}

/* ---- the exact path ----------------------------------------------------- */

/* The scores of query row i (q: its Dh floats) of head h against the keys
 * [j0, j0 + n), in float64, with the score terms and masks applied, in
 * the order of score_terms: s[k] is -inf where key j0 + k is masked or
 * outside [lo, hi). Nothing here can overflow float64: |q·k| <= Dh·FLT_MAX²
 * times a scale <= FLT_MAX, and slope·distance <= FLT_MAX·2^49. */
static void exact_scores(const attn__ctx_t *c, int64_t b, int64_t h, int64_t i,
                         const float *q, int64_t j0, int n, int64_t lo,
                         int64_t hi, double *s) {
  const attn_plan_t *pl = c->plan;
  const float *kt = attn__kt_tile(c, b, h / (pl->H / pl->Hkv), j0 / ATTN__BC);
  for (int k = 0; k < n; k++)
    s[k] = 0;
  for (int64_t d = 0; d < pl->Dh; d++) {
    const double qd = (double)q[d];
    const float *kr = kt + d * c->ldk;
    for (int k = 0; k < n; k++)
      s[k] += qd * (double)kr[k];
  }
  const double cap = c->softcap, slope = c->slopes ? c->slopes[h] : 0;
  const int64_t *bs = c->bias_st, *as = c->allow_st;
  for (int k = 0; k < n; k++) {
    const int64_t j = j0 + k, dist = i + attn__item_off(c, b) - j;
    if (j < lo || j >= hi) {
      s[k] = -INFINITY;
      continue;
    }
    double x = s[k] * c->qmul;
    if (c->has_softcap)
      x = cap * tanh(x / cap);
    if (c->bias)
      x += (double)c->bias[b * bs[0] + h * bs[1] + i * bs[2] + j * bs[3]];
    if (c->slopes)
      x -= slope * (double)(dist < 0 ? -dist : dist);
    if (c->allow && !c->allow[b * as[0] + h * as[1] + i * as[2] + j * as[3]])
      x = -INFINITY;
    s[k] = x;
  }
}

/* Query row i of head h, batch b, on the exact path. pass 1: the row's max
 * score, in float64 (exact_scores); pass 2: the weights w = e^(s - max),
 * in [0, 1], their sum, and Σ w·v, in float64 (acc: Dvp doubles), so that
 * O = Σ w·v / Σ w is a convex combination of value rows and cannot pass
 * max|v| by more than float64 rounding. Writes o [Dvp], zero padded, and,
 * when p is not NULL, the row's weights p [Lkp] (0 outside the visible
 * blocks). Returns 0, or -1 when a score is +inf or NaN, which only a bias
 * of +inf or NaN can make. */
static int attend_row_exact(const attn__ctx_t *c, int64_t b, int64_t h,
                            int64_t i, int64_t lo, int64_t hi, const float *q,
                            float *o, float *p, double *acc) {
  const attn_plan_t *pl = c->plan;
  const int64_t Dv = pl->Dv, Dvp = c->Dvp, ldv = c->ldv;
  const int64_t g = h / (pl->H / pl->Hkv);
  const int64_t kb0 = lo / ATTN__BC, kb1 = (hi + ATTN__BC - 1) / ATTN__BC;
  double s[ATTN__BC];
  float w[ATTN__BC];
  memset(o, 0, (size_t)Dvp * sizeof(float));
  if (p)
    memset(p, 0, (size_t)c->Lkp * sizeof(float));

  /* pass 1: the max */
  double m = -INFINITY;
  int bad = 0;
  for (int64_t kb = kb0; kb < kb1; kb++) {
    int n = block_keys(c, kb * ATTN__BC);
    exact_scores(c, b, h, i, q, kb * ATTN__BC, n, lo, hi, s);
    for (int k = 0; k < n; k++) {
      bad |= isnan(s[k]) || s[k] == INFINITY;
      m = s[k] > m ? s[k] : m;
    }
  }
  if (bad)
    return -1;
  if (m == -INFINITY) /* nothing visible: weights and output 0 */
    return 0;

  /* pass 2: weights, their sum, and Σ w·v */
  double l = 0;
  for (int64_t d = 0; d < Dv; d++)
    acc[d] = 0;
  for (int64_t kb = kb0; kb < kb1; kb++) {
    int64_t j0 = kb * ATTN__BC;
    int n = block_keys(c, j0);
    exact_scores(c, b, h, i, q, j0, n, lo, hi, s);
    for (int k = 0; k < n; k++) /* <= 0; e^-1000 is 0 in float32 */
      w[k] = (float)(s[k] - m > -1000.0 ? s[k] - m : -1000.0);
    for (int k = 0; k < n; k += VL)
      st(w + k, vexp(ld(w + k)));
    const float *vb = attn__v_tile(c, b, g, kb);
    for (int k = 0; k < n; k++) {
      if (w[k] == 0.0f)
        continue;
      const float *vr = vb + k * ldv;
      l += w[k];
      for (int64_t d = 0; d < Dv; d++)
        acc[d] += (double)w[k] * (double)vr[d];
    }
    if (p)
      memcpy(p + j0, w, (size_t)n * sizeof(float));
  }
  /* l >= 1: the max's own weight is e^0 */
  for (int64_t d = 0; d < Dv; d++)
    o[d] = (float)(acc[d] / l);
  if (p)
    for (int64_t j = kb0 * ATTN__BC; j < kb1 * ATTN__BC && j < c->Lkp; j++)
      p[j] = (float)(p[j] / l);
  return 0;
}

/* ---- reductions of the weights ---------------------------------------- */

/* ln x for finite x > 0: x = 2^e·f, f in [√½, √2), and Cephes' logf
 * polynomial for ln f; about 1 ulp. A subnormal x gives a wrong but finite
 * result, which only ever multiplies x itself (x·ln x, below 1e-36). */
INLINE vf vlog(vf x) {
  vi u = (vi)x;
  vi e = ((u >> 23) & 0xff) - 126;
  vf f = (vf)((u & 0x807fffff) | 0x3f000000); /* in [0.5, 1) */
  vi small = f < 0.70710678f;
  vf ef = __builtin_convertvector(e, vf) - vsel(small, splat(1.0f), splat(0));
  f = f + vsel(small, f, splat(0)) - 1.0f;
  vf z = f * f;
  vf y = splat(7.0376836292E-2f);
  y = y * f - 1.1514610310E-1f;
  y = y * f + 1.1676998740E-1f;
  y = y * f - 1.2420140846E-1f;
  y = y * f + 1.4249322787E-1f;
  y = y * f - 1.6668057665E-1f;
  y = y * f + 2.0000714765E-1f;
  y = y * f - 2.4999993993E-1f;
  y = y * f + 3.3333331174E-1f;
  y = y * f * z;
  y += ef * -2.12194440e-4f;
  y -= z * 0.5f;
  return f + y + ef * 0.693359375f;
}

/* Σ x[a, e) (or the max, with 0 as the floor), a whole vector at a time
 * where the vectors of x's own alignment allow. */
static float range_sum(const float *x, int64_t a, int64_t e) {
  float sum = 0;
  int64_t j = a;
  for (; j < e && j % VL; j++)
    sum += x[j];
  vf acc = splat(0);
  for (; j + VL <= e; j += VL)
    acc += ld(x + j);
  sum += hsum(acc);
  for (; j < e; j++)
    sum += x[j];
  return sum;
}
static float range_max(const float *x, int64_t a, int64_t e) {
  float mx = 0;
  int64_t j = a;
  for (; j < e && j % VL; j++)
    mx = x[j] > mx ? x[j] : mx;
  vf acc = splat(0);
  for (; j + VL <= e; j += VL)
    acc = vmax(acc, ld(x + j));
  mx = hmax(acc) > mx ? hmax(acc) : mx;
  for (; j < e; j++)
    mx = x[j] > mx ? x[j] : mx;
  return mx;
}

/* Score v of key j as one key that orders as top-k does: a higher score
 * first, then the lower index (-0 taken as +0, equal to it). v is not
 * NaN. */
INLINE uint64_t top_key(float v, int64_t j) {
  uint32_t u;
  v += 0.0f;
  memcpy(&u, &v, sizeof u);
  u = u >> 31 ? ~u : u | 0x80000000u;
  return (uint64_t)u << 32 | (uint32_t) ~(uint32_t)j;
}
INLINE float top_key_score(uint64_t k) {
  uint32_t u = (uint32_t)(k >> 32);
  u = u >> 31 ? u & 0x7fffffffu : ~u;
  float v;
  memcpy(&v, &u, sizeof v);
  return v;
}
INLINE int32_t top_key_index(uint64_t k) {
  return (int32_t) ~(uint32_t)k;
}
/* Top-k's keys are kept sorted, best first, in rows of whole vectors of 8
 * (KP, K rounded up); 0, below every key, fills a place not yet taken. */
#define KP(K) attn__round_up(K, 8)
typedef uint64_t vk __attribute__((vector_size(VL * 4)));
#define KL (VL / 2) /* keys a vector */
/* lane i of a shuffle of (a, b) by it: b's lane i − 1, a's last for 0 */
/* clang-format off */
#if VL == 16
#define RIGHT1 {7, 8, 9, 10, 11, 12, 13, 14}
#elif VL == 8
#define RIGHT1 {3, 4, 5, 6}
#else
#define RIGHT1 {1, 2}
#endif
/* clang-format on */
INLINE vk vk_min(vk a, vk b) {
#if defined(__AVX512F__)
  return (vk)_mm512_min_epu64((__m512i)a, (__m512i)b);
#else
  vk lt = (vk)(a < b);
  return (a & lt) | (b & ~lt);
#endif
}
INLINE vk vk_max(vk a, vk b) {
#if defined(__AVX512F__)
  return (vk)_mm512_max_epu64((__m512i)a, (__m512i)b);
#else
  return a ^ b ^ vk_min(a, b);
#endif
}
/* Inserts key x into the sorted keys h [kp], the last one leaving. Each
 * place takes the larger of its own key and the smaller of x and its left
 * neighbour's (above every key left of the first): the keys above x stay,
 * x takes the first place below them and the rest move one place right,
 * in one pass without a branch, where a heap's sifting mispredicts. */
INLINE void top_insert(uint64_t *h, int64_t kp, uint64_t x) {
  const vk xv = (vk){0} + x;
  vk prev = ~(vk){0};
  for (int64_t c = 0; c < kp; c += KL) {
    vk cur;
    memcpy(&cur, h + c, sizeof cur);
    vk left = __builtin_shuffle(prev, cur, (vk)RIGHT1);
    vk m = vk_max(cur, vk_min(left, xv));
    memcpy(h + c, &m, sizeof m);
    prev = cur;
  }
}

/* The reductions (attn_reduce_t) of one row of weights p [Lkp] (zero
 * outside [lo, hi), the keys the row's range masks let through): query i
 * of item b, output head hh (0 for the mean). Writes its statistics and
 * its top keys, and adds its pooled cells into part, the unit's pooled
 * rows (attn__ctx_t). tk is scratch for KP(k) keys. Sums are per stretch
 * of ATTN__BC keys in float32, then in float64. */
static void reduce_row(const attn__ctx_t *c, int64_t b, int64_t hh, int64_t i,
                       int64_t lo, int64_t hi, const float *p, double *part,
                       uint64_t *tk) {
  const attn_plan_t *pl = c->plan;
  const attn_reduce_t *r = c->red;
  const int64_t row = (b * pl->rH + hh) * (pl->q1 - pl->q0) + i - pl->q0;
  /* Keys in whole vectors: [a, e) covers [lo, hi) and stays in [0, Lkp). */
  const int64_t a = lo / VL * VL, e = attn__round_up(hi, VL);

  if (c->entropy || c->distance) {
    const float d = (float)(i + attn__item_off(c, b));
    double ent = 0, dist = 0;
    vf lane;
    for (int k = 0; k < VL; k++)
      lane[k] = (float)k;
    for (int64_t j0 = a; j0 < e; j0 += ATTN__BC) {
      const int64_t j1 = j0 + ATTN__BC < e ? j0 + ATTN__BC : e;
      vf se = splat(0), sd = splat(0);
      for (int64_t j = j0; j < j1; j += VL) {
        vf w = ld(p + j);
        vi pos = w > 0.0f;
        se -= vsel(pos, w * vlog(vsel(pos, w, splat(1.0f))), splat(0));
        vf dj = splat(d) - (lane + (float)j);
        sd += w * vsel(dj < 0.0f, -dj, dj);
      }
      ent += hsum(se);
      dist += hsum(sd);
    }
    if (c->entropy)
      c->entropy[row] = (float)ent;
    if (c->distance)
      c->distance[row] = (float)dist;
  }
  if (c->sink) {
    double sum = 0;
    for (int64_t j = lo; j < hi && j < r->sink_tokens; j++)
      sum += p[j];
    c->sink[row] = (float)sum;
  }

  const int64_t ka = lo > pl->k0 ? lo : pl->k0, ke = hi < pl->k1 ? hi : pl->k1;
  if (r->top_k) {
    const int64_t K = r->top_k;
    uint64_t *h = tk;
    int64_t n = 0;
    float thr = 0; /* a key must weigh more to enter */
    memset(h, 0, (size_t)KP(K) * sizeof *h);
    /* A whole vector at a time where it can, visiting only the lanes
     * above the threshold as it was at the vector's start (the rest can
     * only have fallen further behind it); a key at a time at the ends. */
    for (int64_t j = ka; j < ke;) {
      const int whole = j % VL == 0 && j + VL <= ke;
      for (unsigned bits = whole ? above_bits(ld(p + j), thr) : 1; bits;
           bits &= bits - 1) {
        const int64_t k = j + __builtin_ctz(bits);
        if (!(p[k] > thr))
          continue;
        top_insert(h, KP(K), top_key(p[k], k)); /* equal: the lower index */
        n += n < K;
        if (n == K)
          thr = top_key_score(h[K - 1]);
      }
      j += whole ? VL : 1;
    }
    int32_t *oi = c->top_k_index + row * K;
    float *ov = c->top_k_value + row * K;
    for (int64_t k = 0; k < K; k++) {
      oi[k] = k < n ? top_key_index(h[k]) : -1;
      ov[k] = k < n ? top_key_score(h[k]) : 0.0f;
    }
  }

  if (part) { /* the pooled cells of the key blocks [ka, ke) meets */
    const int64_t pk = pl->pool_k, is_max = r->pool_reduce == ATTN_POOL_MAX;
    for (int64_t kb = (ka - pl->k0) / pk; ka < ke && pl->k0 + kb * pk < ke;
         kb++) {
      int64_t j0 = pl->k0 + kb * pk, j1 = j0 + pk;
      j0 = j0 > ka ? j0 : ka;
      j1 = j1 < ke ? j1 : ke;
      if (is_max) {
        float x = range_max(p, j0, j1);
        part[kb] = x > part[kb] ? x : part[kb];
      } else {
        int64_t j = j0;
        double sum = 0;
        for (; j < j1 && j % VL; j++)
          sum += p[j];
        while (j + VL <= j1) {
          vf acc = splat(0);
          for (int64_t end = j + ATTN__BC; j + VL <= j1 && j < end; j += VL)
            acc += ld(p + j);
          sum += hsum(acc);
        }
        for (; j < j1; j++)
          sum += p[j];
        part[kb] += sum;
      }
    }
  }
}

/* Keys [a, e) of a score row x (x[0] is key j0) into row r's top keys. */
static void top_k_scores(const ored_t *ro, int64_t r, const float *x,
                         int64_t j0, int64_t a, int64_t e) {
  const int64_t K = ro->K;
  uint64_t *h = ro->hk + r * KP(K);
  int64_t n = ro->hn[r];
  float thr = n < K ? -INFINITY : top_key_score(h[K - 1]);
  /* as reduce_row does: whole vectors where it can, visiting only their
   * lanes above the threshold (keys come in rising order, so a score
   * equal to the worst's loses to it) */
  for (int64_t j = a; j < e;) {
    const int whole = (j - j0) % VL == 0 && j + VL <= e;
    for (unsigned bits = whole ? above_bits(ld(x + j - j0), thr) : 1; bits;
         bits &= bits - 1) {
      const int64_t k = j + __builtin_ctz(bits);
      const float v = x[k - j0];
      if (!(v > thr))
        continue;
      top_insert(h, KP(K), top_key(v, k));
      n += n < K;
      if (n == K)
        thr = top_key_score(h[K - 1]);
    }
    j += whole ? VL : 1;
  }
  ro->hn[r] = n;
}

/* Row r's results, once its max m and sum l are final: query i of item b,
 * head h. */
static void finish_row(const attn__ctx_t *c, const ored_t *ro, int64_t b,
                       int64_t h, int64_t i, int64_t r, float m, float l) {
  const attn_plan_t *pl = c->plan;
  const int64_t row = (b * pl->rH + h) * (pl->q1 - pl->q0) + i - pl->q0;
  const float *ex = ro->ex + r * 48;
  if (c->entropy)
    c->entropy[row] =
        l > 0 ? (float)(log((double)l) - (double)hsum(ld(ex)) / (double)l)
              : 0.0f;
  if (c->distance)
    c->distance[row] = l > 0 ? (float)((double)hsum(ld(ex + 16)) / l) : 0.0f;
  if (c->sink)
    c->sink[row] = l > 0 ? (float)((double)hsum(ld(ex + 32)) / l) : 0.0f;
  if (ro->K) {
    const int64_t K = ro->K;
    const uint64_t *hk = ro->hk + r * KP(K);
    int64_t n = ro->hn[r];
    int32_t *oi = c->top_k_index + row * K;
    float *ov = c->top_k_value + row * K;
    int64_t t = 0;
    for (int64_t k = 0; k < n; k++) {
      float w = l > 0 ? (float)(exp((double)top_key_score(hk[k]) - (double)m) /
                                (double)l)
                      : 0.0f;
      if (!(w > 0)) /* below float32's range: weighs nothing */
        break;
      /* scores that differ may round to one weight: its ties go to the
       * lower index */
      int64_t at = t++;
      const int32_t j = top_key_index(hk[k]);
      while (at > 0 && ov[at - 1] == w && oi[at - 1] > j) {
        ov[at] = ov[at - 1], oi[at] = oi[at - 1];
        at--;
      }
      ov[at] = w, oi[at] = j;
    }
    for (; t < K; t++)
      oi[t] = -1, ov[t] = 0.0f;
  }
  if (ro->part) {
    const attn_reduce_t *rd = c->red;
    const float *pr = ro->pool + r * ro->nk;
    double *y = ro->part + ((i - pl->q0) / pl->pool_q - ro->pfirst) * ro->nk;
    for (int64_t k = 0; k < ro->nk && l > 0; k++) {
      double v = (double)pr[k] / (double)l;
      y[k] =
          rd->pool_reduce == ATTN_POOL_MAX ? (v > y[k] ? v : y[k]) : y[k] + v;
    }
  }
}

/* Row r's share of a key block after its softmax, e = e^(s − m) of keys
 * [j0, j0 + w): the sink's sum and the pooled blocks'. */
static void block_red(const attn__ctx_t *c, const ored_t *ro, int64_t r,
                      int64_t j0, int64_t w, const float *e) {
  const attn_plan_t *pl = c->plan;
  const attn_reduce_t *rd = c->red;
  float *ex = ro->ex + r * 48;
  if (rd->sink_tokens > j0 && c->sink) {
    int64_t n = rd->sink_tokens - j0 < w ? rd->sink_tokens - j0 : w;
    float sum = 0;
    for (int64_t k = 0; k < n; k++)
      sum += e[k];
    ex[32] += sum;
  }
  if (ro->part) {
    const int64_t a = j0 > pl->k0 ? j0 : pl->k0;
    const int64_t end = j0 + w < pl->k1 ? j0 + w : pl->k1;
    float *pr = ro->pool + r * ro->nk;
    for (int64_t kb = (a - pl->k0) / pl->pool_k;
         a < end && pl->k0 + kb * pl->pool_k < end; kb++) {
      int64_t p0 = pl->k0 + kb * pl->pool_k, p1 = p0 + pl->pool_k;
      p0 = p0 > a ? p0 : a;
      p1 = p1 < end ? p1 : end;
      if (rd->pool_reduce == ATTN_POOL_MAX) {
        float mx = range_max(e - j0, p0, p1);
        pr[kb] = mx > pr[kb] ? mx : pr[kb];
      } else {
        pr[kb] += range_sum(e - j0, p0, p1);
      }
    }
  }
}

/* ---- the two paths ------------------------------------------------------ */

/* Online softmax over the key blocks [kb0, kb1), for head h of batch b and
 * query rows [i0, i0 + rows). Leaves normalised rows in o [rows, Dvp]. */
static void attend_online(const attn__ctx_t *c, int64_t b, int64_t h,
                          int64_t i0, int64_t rows, const int64_t *lo,
                          const int64_t *hi, int64_t kb0, int64_t kb1,
                          const float *q, float *s, float *o, float *m,
                          float *l, const ored_t *ro) {
  const attn_plan_t *pl = c->plan;
  int64_t g = h / (pl->H / pl->Hkv), Dh = pl->Dh, Dvp = c->Dvp, ldq = Dh;
  int64_t ldv = c->ldv;
  int terms = any_terms(c);

  memset(o, 0, (size_t)(rows * Dvp) * sizeof(float));
  memset(l, 0, (size_t)(rows * VL) * sizeof(float));
  /* The reductions' rows: those of the query range; their state zeroed */
  int64_t r0 = 0, r1 = 0;
  if (ro) {
    r0 = pl->q0 - i0 > 0 ? pl->q0 - i0 : 0;
    r1 = pl->q1 - i0 < rows ? pl->q1 - i0 : rows;
    r1 = r1 > r0 ? r1 : r0;
    memset(ro->ex, 0, (size_t)(rows * 48) * sizeof(float));
    if (ro->pool)
      memset(ro->pool, 0, (size_t)(rows * ro->nk) * sizeof(float));
    if (ro->K) {
      memset(ro->hn, 0, (size_t)rows * sizeof(int64_t));
      memset(ro->hk, 0, (size_t)(rows * KP(ro->K)) * sizeof(uint64_t));
    }
  }
  vf lane;
  for (int k = 0; k < VL; k++)
    lane[k] = (float)k;
  int64_t jend = 0; /* no row sees a key from here on */
  for (int64_t r = 0; r < rows; r++) {
    m[r] = -INFINITY;
    jend = hi[r] > jend ? hi[r] : jend;
  }
  for (int64_t kb = kb0; kb < kb1; kb++) {
    int64_t j0 = kb * ATTN__BC;
    /* The last block's keys are computed up to the next SW past jend,
     * not the whole block: a short tail (a tiny request's 16 keys, a
     * decode step's 100) costs what it holds. */
    int64_t w =
        jend - j0 >= ATTN__BC ? ATTN__BC : (jend - j0 + SW - 1) / SW * SW;
    int inside = 1;
    for (int64_t r = 0; r < rows; r++)
      inside &= lo[r] <= j0 && hi[r] >= j0 + ATTN__BC;
#if QK_NV * VL == ATTN__BC
    if (inside && !terms && !ro) { /* passes 1 and 3 fused, in registers */
      for (int64_t r = 0; r < rows; r += QK_MR) {
        int mr = rows - r < QK_MR ? (int)(rows - r) : QK_MR;
        switch (mr) {
          CASE_MR(qk_softmax_tile, q + r * ldq, ldq, attn__kt_tile(c, b, g, kb),
                  c->ldk, Dh, s + r * ATTN__BC, m + r, l + r * VL, o + r * Dvp,
                  Dvp)
        }
      }
      mix(s, ATTN__BC, attn__v_tile(c, b, g, kb), ldv, Dvp, rows, ATTN__BC, o);
      continue;
    }
#endif
    /* pass 1: S = Q·Kᵀ for this block */
    scores(q, ldq, Dh, attn__kt_tile(c, b, g, kb), c->ldk, rows, s, ATTN__BC,
           w);
    /* pass 2: terms and masks */
    if (terms || !inside)
      score_terms(c, b, h, i0, rows, j0, w, s, ATTN__BC, lo, hi, inside);
    /* pass 3: online softmax; P overwrites S. The running sum stays a
     * vector per row, reduced once at the end; O and the sum are rescaled
     * only when a row's max must grow (raise_max). */
    for (int64_t r = 0; r < rows; r++) {
      float *x = s + r * ATTN__BC;
      vf mx = ld(x);
      for (int k = VL; k < w; k += VL)
        mx = vmax(mx, ld(x + k));
      const int red = r >= r0 && r < r1; /* this row's reductions */
      raise_max(mx, &m[r], o + r * Dvp, l + r * VL, Dvp, red ? ro : NULL, r);
      if (m[r] == -INFINITY) { /* nothing visible yet: P = 0 */
        memset(x, 0, (size_t)w * sizeof(float));
        continue;
      }
      vf sum = ld(l + r * VL), mv = splat(m[r]);
      /* with the reductions, the top keys by score first */
      if (red && ro->K) { /* mx, the block's lane-wise max, rules most out */
        int64_t a = j0 > pl->k0 ? j0 : pl->k0;
        int64_t e = j0 + w < pl->k1 ? j0 + w : pl->k1;
        if (a < e &&
            (ro->hn[r] < ro->K ||
             any_above(mx, top_key_score(ro->hk[r * KP(ro->K) + ro->K - 1]))))
          top_k_scores(ro, r, x, j0, a, e);
      }
      if (!red || !ro->sums) { /* P = e^(s − m) and Σ e */
        for (int k = 0; k < w; k += VL) {
          vf e = vexp(ld(x + k) - mv);
          st(x + k, e);
          sum += e;
        }
        st(l + r * VL, sum);
        if (red)
          block_red(c, ro, r, j0, w, x);
        continue;
      }
      /* entropy or distance asked: Σ e·(s − m) and Σ e·|d − j| beside Σ e
       * (ored_t) */
      float *ex = ro->ex + r * 48;
      vf se = ld(ex), sd = ld(ex + 16);
      const float d = (float)(i0 + r + attn__item_off(c, b) - j0);
      for (int k = 0; k < w; k += VL) {
        vf t = ld(x + k) - mv;
        vf e = vexp(t);
        st(x + k, e);
        sum += e;
        se += e * vmax(t, splat(-200.0f)); /* e = 0 where t = -inf */
        vf dj = splat(d) - (lane + (float)k);
        sd += e * vsel(dj < 0.0f, -dj, dj);
      }
      st(ex, se);
      st(ex + 16, sd);
      st(l + r * VL, sum);
      block_red(c, ro, r, j0, w, x);
    }
    /* pass 4: O += P·V, over the keys that exist (V has no rows past Lk;
     * the rest have weight 0) */
    mix(s, ATTN__BC, attn__v_tile(c, b, g, kb), ldv, Dvp, rows,
        w < pl->Lk - j0 ? w : pl->Lk - j0, o);
  }
  for (int64_t r = 0; r < rows; r++) {
    float lr = hsum(ld(l + r * VL));
    if (r >= r0 && r < r1)
      finish_row(c, ro, b, h, i0 + r, r, m[r], lr);
    float inv = lr > 0 ? 1.0f / lr : 0.0f;
    float *y = o + r * Dvp;
    for (int64_t k = 0; k < Dvp; k += VL)
      st(y + k, ld(y + k) * inv);
  }
}

/* Exact softmax with the probabilities kept: p [rows, Lkp] receives the
 * weights of every key (0 outside [kb0, kb1) blocks and where masked), and
 * o [rows, Dvp] the normalised outputs. */
static void attend_two_pass(const attn__ctx_t *c, int64_t b, int64_t h,
                            int64_t i0, int64_t rows, const int64_t *lo,
                            const int64_t *hi, int64_t kb0, int64_t kb1,
                            const float *q, float *p, float *o) {
  const attn_plan_t *pl = c->plan;
  int64_t g = h / (pl->H / pl->Hkv), Dh = pl->Dh, Dvp = c->Dvp, Lkp = c->Lkp;
  int64_t ldq = Dh, ldv = c->ldv;
  int64_t c0 = kb0 * ATTN__BC, c1 = kb1 * ATTN__BC < Lkp ? kb1 * ATTN__BC : Lkp;
  int terms = any_terms(c);

  /* pass 1: scores for the visible blocks, terms and masks */
  if (c1 > c0) {
    for (int64_t j0 = c0; j0 < c1; j0 += ATTN__BC) {
      int n = block_keys(c, j0);
      scores(q, ldq, Dh, attn__kt_tile(c, b, g, j0 / ATTN__BC), c->ldk, rows,
             p + j0, Lkp, n);
      int inside = 1;
      for (int64_t r = 0; r < rows; r++)
        inside &= lo[r] <= j0 && hi[r] >= j0 + ATTN__BC;
      if (terms || !inside)
        score_terms(c, b, h, i0, rows, j0, n, p + j0, Lkp, lo, hi, inside);
    }
  }
  /* pass 2: exact softmax per row; zeros outside [c0, c1) */
  for (int64_t r = 0; r < rows; r++) {
    float *x = p + r * Lkp;
    memset(x, 0, (size_t)c0 * sizeof(float));
    memset(x + c1, 0, (size_t)(Lkp - c1) * sizeof(float));
    if (c1 == c0)
      continue;
    vf mx = splat(-INFINITY);
    for (int64_t k = c0; k < c1; k += VL)
      mx = vmax(mx, ld(x + k));
    float mrow = hmax(mx);
    if (mrow == -INFINITY) {
      memset(x + c0, 0, (size_t)(c1 - c0) * sizeof(float));
      continue;
    }
    vf sum = splat(0), mv = splat(mrow);
    for (int64_t k = c0; k < c1; k += VL) {
      vf e = vexp(ld(x + k) - mv);
      st(x + k, e);
      sum += e;
    }
    vf inv = splat(1.0f / hsum(sum));
    for (int64_t k = c0; k < c1; k += VL)
      st(x + k, ld(x + k) * inv);
  }
  /* pass 3: O = P·V, block by block (the same sums in the same order as
   * one pass over them all) */
  memset(o, 0, (size_t)(rows * Dvp) * sizeof(float));
  for (int64_t kb = kb0; kb < kb1; kb++) {
    int64_t j0 = kb * ATTN__BC, n = pl->Lk - j0;
    mix(p + j0, Lkp, attn__v_tile(c, b, g, kb), ldv, Dvp, rows,
        n < ATTN__BC ? n : ATTN__BC, o);
  }
}

void KNAME(ATTN_KERNEL_ISA)(const attn__ctx_t *c, int64_t b, int64_t h0,
                            int64_t qblock, float *scratch) {
  const attn_plan_t *pl = c->plan;
  int64_t i0 = qblock * ATTN__BR;
  int64_t rows = pl->Lq - i0 < ATTN__BR ? pl->Lq - i0 : ATTN__BR;
  int64_t Dv = pl->Dv, Dvp = c->Dvp, Lk = pl->Lk, H = pl->H;
  /* Reductions run on the online path, per head, unless every row takes
   * the exact path; of the mean over heads, from the two-pass path's
   * rows (reduce_row). */
  const int dense_red = c->red && (c->red->mean_heads || c->exact);
  int two_pass = c->weights || c->mean_weights || dense_red;

  /* scratch (attn__scratch_t): S or P | O | Q | l | m | lo, hi | sums */
  const attn__scratch_t *sc = &c->sc;
  float *s = scratch + sc->s;
  float *o = scratch + sc->o;
  float *qb = scratch + sc->q;
  float *l = scratch + sc->l;
  float *m = scratch + sc->m;
  int64_t *lo = (int64_t *)(scratch + sc->lo);
  int64_t *hi = (int64_t *)(scratch + sc->hi);
  double *acc = (double *)(scratch + sc->acc);
  float *rmw = scratch + sc->mw; /* reductions of the mean over heads */
  uint64_t *tk = (uint64_t *)(scratch + sc->tk);
  /* This unit's pooled rows (attn__ctx_t), zeroed */
  double *part = NULL;
  int64_t pfirst = 0;
  const int64_t qa = qblock * ATTN__BR > pl->q0 ? qblock * ATTN__BR : pl->q0,
                qe = (qblock + 1) * ATTN__BR < pl->q1 ? (qblock + 1) * ATTN__BR
                                                      : pl->q1;
  if (c->pool_part && qa < qe) { /* a block outside the range has none */
    const int64_t hh = c->red->mean_heads ? 0 : h0, pq = pl->pool_q;
    pfirst = attn__pool_first(qblock, pl->q0, pq);
    part = c->pool_part + ((b * pl->rH + hh) * c->pool_slots +
                           attn__pool_slot(qblock, pfirst, pl->q0)) *
                              pl->pool_nk;
    memset(part, 0,
           (size_t)(((qe - 1 - pl->q0) / pq - pfirst + 1) * pl->pool_nk) *
               sizeof(double));
  }
  ored_t ored, *ro = NULL;
  if (c->red && !dense_red) {
    ored = (ored_t){.ex = scratch + sc->ex,
                    .hk = (uint64_t *)(scratch + sc->hk),
                    .hn = (int64_t *)(scratch + sc->hn),
                    .pool = part ? scratch + sc->pool : NULL,
                    .K = c->red->top_k,
                    .sums = c->entropy || c->distance,
                    .nk = pl->pool_nk,
                    .part = part,
                    .pfirst = pfirst};
    ro = &ored;
  }

  /* The key blocks any row may see. */
  int64_t jmin = Lk, jmax = 0;
  for (int64_t r = 0; r < rows; r++) {
    row_range(c, b, i0 + r, &lo[r], &hi[r]);
    if (hi[r] > lo[r]) {
      jmin = lo[r] < jmin ? lo[r] : jmin;
      jmax = hi[r] > jmax ? hi[r] : jmax;
    }
  }
  int64_t kb0 = jmin / ATTN__BC, kb1 = (jmax + ATTN__BC - 1) / ATTN__BC;
  if (jmax <= jmin)
    kb0 = kb1 = 0;

  for (int64_t h = h0; h < h0 + c->heads_per_unit; h++) {
    /* This head's query rows, contiguous: in q they lie H·Dh apart, which
     * maps a block's rows onto few cache sets. One row is contiguous. */
    int64_t ldq = pl->H * pl->Dh;
    const float *q = c->q + (b * pl->Lq + i0) * ldq + h * pl->Dh;
    if (rows == 1)
      qb = (float *)q;
    else
      for (int64_t r = 0; r < rows; r++)
        memcpy(qb + r * pl->Dh, q + r * ldq, (size_t)pl->Dh * sizeof(float));
    const int64_t pos = (b * H + h) * pl->Lq + i0; /* for attn__fail */
    if (c->exact) {
      for (int64_t r = 0; r < rows; r++)
        if (attend_row_exact(c, b, h, i0 + r, lo[r], hi[r], qb + r * pl->Dh,
                             o + r * Dvp, two_pass ? s + r * sc->lds : NULL,
                             acc) < 0)
          attn__fail(c->fail, ATTN__FAIL_SCORES, pos + r);
    } else if (two_pass) {
      attend_two_pass(c, b, h, i0, rows, lo, hi, kb0, kb1, qb, s, o);
    } else {
      attend_online(c, b, h, i0, rows, lo, hi, kb0, kb1, qb, s, o, m, l, ro);
    }
    /* Every output row must be finite: one the fast paths overflowed
     * (large values) is redone exactly; one that still is not cannot be
     * written in float32. Columns past Dv hold the next head's sums where
     * heads lie packed (vh < Dvp): not this head's, dropped first. */
    for (int64_t r = 0; r < rows; r++) {
      float *y = o + r * Dvp;
      if (c->vh < Dvp)
        memset(y + Dv, 0, (size_t)(Dvp - Dv) * sizeof(float));
      if (finite_row(y, Dvp))
        continue;
      if (!c->exact &&
          attend_row_exact(c, b, h, i0 + r, lo[r], hi[r], qb + r * pl->Dh, y,
                           two_pass ? s + r * sc->lds : NULL, acc) < 0)
        attn__fail(c->fail, ATTN__FAIL_SCORES, pos + r);
      if (!finite_row(y, Dvp))
        attn__fail(c->fail, ATTN__FAIL_OUTPUT, pos + r);
    }

    for (int64_t r = 0; r < rows; r++) {
      int64_t i = i0 + r;
      const float *y = o + r * Dvp;
      memcpy(c->concat + (b * pl->Lq + i) * H * Dv + h * Dv, y,
             (size_t)Dv * sizeof(float));
      if (c->head_outputs)
        memcpy(c->head_outputs + ((b * H + h) * pl->Lq + i) * Dv, y,
               (size_t)Dv * sizeof(float));
      if (c->weights)
        memcpy(c->weights + ((b * H + h) * pl->Lq + i) * Lk, s + r * sc->lds,
               (size_t)Lk * sizeof(float));
      if (dense_red && i >= pl->q0 && i < pl->q1) {
        const float *x = s + r * sc->lds;
        double *pr =
            part ? part + ((i - pl->q0) / pl->pool_q - pfirst) * pl->pool_nk
                 : NULL;
        if (!c->red->mean_heads) {
          reduce_row(c, b, h, i, lo[r], hi[r], x, pr, tk);
        } else { /* the mean over heads, in the order of the dense one */
          float *z = rmw + r * sc->lds;
          if (h == h0)
            memcpy(z, x, (size_t)c->Lkp * sizeof(float));
          else
            for (int64_t k = lo[r]; k < hi[r]; k++)
              z[k] += x[k];
          if (h == h0 + c->heads_per_unit - 1) {
            for (int64_t k = lo[r]; k < hi[r]; k++)
              z[k] *= 1.0f / (float)H;
            reduce_row(c, b, 0, i, lo[r], hi[r], z, pr, tk);
          }
        }
      }
      if (c->mean_weights) {
        float *mw = c->mean_weights + (b * pl->Lq + i) * Lk;
        const float *x = s + r * sc->lds;
        if (h == h0)
          memcpy(mw, x, (size_t)Lk * sizeof(float));
        else
          for (int64_t k = 0; k < Lk; k++)
            mw[k] += x[k];
        if (h == h0 + c->heads_per_unit - 1)
          for (int64_t k = 0; k < Lk; k++)
            mw[k] *= 1.0f / (float)H;
      }
    }
  }
}
