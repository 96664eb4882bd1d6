/* core/cuda/flash_mma.cuh: flash attention version 3, on the tensor cores
 * through mma.sync (FlashAttention-2's structure; Dao, 2023): bf16 on
 * m16n8k16, and fp32 on m16n8k8 tf32 with three MMAs a product (3xTF32,
 * near fp32's error). The kernel template alone, device code; flash_mma.cu
 * launches it.
 *
 * Layouts are kernels.h's; here Dh = Dv = D, a multiple of 16 up to 128
 * (32, 64 and 128 are instantiated, for each element type). The kernel is
 * one template over a path P (bf16_path, fp32_path below), which gives
 * the element type, the shared memory padding and the two GEMM passes;
 * the staging, the masks and the online softmax are shared. A block of
 * kWarps = 8 warps takes kRows = 128 query rows of one (batch item,
 * head), a warp 16 of them; the key range the block can see (score.cuh's
 * key_range) is visited in tiles of kTile = 64 keys. Shared memory, rows
 * padded against bank conflicts (each path says how): Q [128, D], K
 * [2][64, D], V [2][64, D]; tile n + 1 is copied in (cp.async, zeros past
 * the range) while tile n is computed. Registers, per lane: Q (D/4 bf16
 * pairs, or D/2 floats), S [8][4] (the warp's 16 × 64 scores), O [D/8][4]
 * (its 16 × D outputs), and the max m and partial sum l of its two rows g
 * and g + 8 (mma.cuh's fragments). Wider heads (256) would need 128
 * registers a lane for O alone, and spill: they stay on versions 2 and 1.
 * 128 rows a block rather than 64 halve the K and V tiles read from L2
 * per query row (FlashAttention-2 takes 128 rows for these widths too);
 * registers allow one block of 8 warps an SM for D of 64 and 128, the
 * same 8 warps as two blocks of 4.
 *
 * Per tile, each warp:
 *   pass 1: S = Q·Kᵀ (P::qk);
 *   pass 2: S in log2 units: scale·log2(e)·S where every row of the warp
 *     sees every key of the tile and no term applies per element (the
 *     fast path), else masked_score(...)·log2(e) per element (-inf where
 *     masked, and for rows past Lq and keys past the range);
 *   pass 3: the online softmax: each row's tile max over its quad of
 *     lanes (shfl_xor 1, 2), m_new = max(m, tile max), O and l scaled by
 *     2^(m − m_new), P = 2^(S − m_new) in place, l += P (this lane's
 *     columns; the quad's partial sums are added at the end);
 *   pass 4: O += P·V (P::pv), P taken from S's C fragments in registers.
 * At the end O / l and m·ln 2 + ln l go out: a row that saw no key (l =
 * 0) writes 0 and lse -inf, as versions 1 and 2. */
#ifndef ATTN_CUDA_FLASH_MMA_CUH
#define ATTN_CUDA_FLASH_MMA_CUH

#include <math.h>
#include <stdint.h>

#include "kernels.h"
#include "mma.cuh"
#include "score.cuh"

namespace attn_cu {
namespace v3 {

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kRows = 16 * kWarps; /* query rows a block */
constexpr int kTile = 64;          /* keys a tile */
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

typedef __nv_bfloat16 bf16;

/* The two element types' passes 1 and 4 (what differs between them; the
 * rest of the kernel is shared). Each path P gives: T, the element type;
 * kLdQK and kLdV, the shared memory row strides of Q and K, and of V, in
 * elements (rows 16-byte aligned); qfrag, this lane's part of the warp's
 * 16 rows of Q in registers; load_q; qk, S [16, 64] = Q·Kᵀ of one tile
 * into s (C fragments: n-tile c is keys 8c .. 8c + 7); and pv, O += P·V
 * with P in s (as qk left it, softmaxed). */

/* bf16: mma.m16n8k16, fragments by ldmatrix. Rows padded to D + 8, so
 * that the 8 rows one ldmatrix reads start 16 bytes apart modulo 128 (no
 * bank conflicts). Lane l's row address in ldmatrix: Q's A (rows l % 16,
 * columns 8 · (l / 16) of a 16 × 16 slice), K's B for two n-tiles (keys
 * l % 8 + 8 · (l / 16), dims 8 · (l / 8 % 2)), V's B for two n-tiles
 * (keys l % 8 + 8 · (l / 8 % 2), dims 8 · (l / 16)). */
template <int D> struct bf16_path {
  typedef bf16 T;
  static constexpr int kD = D;
  static constexpr int kLdQK = D + 8, kLdV = D + 8;
  struct qfrag {
    uint32_t r[D / 16][4]; /* A fragments, 16 columns each */
  };

  static __device__ __forceinline__ void load_q(qfrag &qf, const T *qs,
                                                int warp, int lane) {
    const int off = (warp * 16 + lane % 16) * kLdQK + 8 * (lane / 16);
#pragma unroll
    for (int d = 0; d < D / 16; d++)
      ldsm_x4(qf.r[d], qs + off + 16 * d);
  }

  static __device__ __forceinline__ void qk(float s[kTile / 8][4],
                                            const qfrag &qf, const T *kt,
                                            int lane) {
    const int off = (lane % 8 + 8 * (lane / 16)) * kLdQK + 8 * (lane / 8 % 2);
#pragma unroll
    for (int d = 0; d < D / 16; d++) {
#pragma unroll
      for (int c = 0; c < kTile / 16; c++) {
        uint32_t kb[4];
        ldsm_x4(kb, kt + off + 16 * c * kLdQK + 16 * d);
        mma_bf16(s[2 * c], qf.r[d], kb[0], kb[1]);
        mma_bf16(s[2 * c + 1], qf.r[d], kb[2], kb[3]);
      }
    }
  }

  /* S's C fragments of key columns 16k .. 16k + 15 (n-tiles 2k, 2k + 1)
   * are, rounded to bf16, the A fragment of P's k-th slice; V's B
   * fragments by ldmatrix.trans */
  static __device__ __forceinline__ void pv(float o[D / 8][4],
                                            const float s[kTile / 8][4],
                                            const T *vt, int lane) {
    const int off = (lane % 8 + 8 * (lane / 8 % 2)) * kLdV + 8 * (lane / 16);
#pragma unroll
    for (int kk = 0; kk < kTile / 16; kk++) {
      const uint32_t pa[4] = {
          pack_bf16(s[2 * kk][0], s[2 * kk][1]),
          pack_bf16(s[2 * kk][2], s[2 * kk][3]),
          pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]),
          pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]),
      };
#pragma unroll
      for (int c = 0; c < D / 16; c++) {
        uint32_t vb[4];
        ldsm_x4_trans(vb, vt + off + 16 * kk * kLdV + 16 * c);
        mma_bf16(o[2 * c], pa, vb[0], vb[1]);
        mma_bf16(o[2 * c + 1], pa, vb[2], vb[3]);
      }
    }
  }
};

/* d += A·B in near-fp32 precision from three tf32 MMAs (3xTF32): with x
 * = hi + lo, hi = tf32(x), lo = tf32(x − hi), A·B ≈ lo_A·hi_B + hi_A·lo_B
 * + hi_A·hi_B (lo·lo, about 2^-22 of it, dropped), small terms first. */
__device__ __forceinline__ void mma_3xtf32(float d[4], const float ah[4],
                                           const float al[4], float bh0,
                                           float bh1, float bl0, float bl1) {
  mma_tf32(d, al, bh0, bh1);
  mma_tf32(d, ah, bl0, bl1);
  mma_tf32(d, ah, bh0, bh1);
}

/* x's tf32 halves, for mma_3xtf32. */
__device__ __forceinline__ void split_tf32(float x, float *hi, float *lo) {
  *hi = tf32_round(x);
  *lo = tf32_round(x - *hi);
}

/* fp32: mma.m16n8k8 tf32, three a product (mma_3xtf32), fragments by
 * plain shared memory loads (ldmatrix moves 16-bit elements). The order
 * of k within an MMA is free as long as A and B agree: k = t and t + 4
 * of lane (g, t) stand for the elements 2t and 2t + 1 of the 8 (dims in
 * pass 1, keys in pass 4). So in pass 1, A's and B's two values a lane
 * holds in a row are adjacent (one 8-byte load: Q[g][2t, 2t+1], K[key
 * g][2t, 2t+1]); and in pass 4, P's A fragment is S's C fragment as it
 * is, with registers 1 and 2 swapped (c = P[g][2t, 2t+1], P[g+8][2t,
 * 2t+1]), no shuffle, V's B rows 2t and 2t + 1. Padding: Q and K rows
 * D + 8 floats (≡ 8 banks: the 16 lanes of a half warp's 8-byte loads,
 * rows g < 4 and words 2t, 2t + 1, hit 32 distinct banks); V rows D + 4
 * (≡ 4: rows 2t, 2t + 1 and column g hit banks 8t + g (+ 4), distinct).
 * Q is split as each k-step uses it; it stays in registers as fp32 for
 * D up to 64, and is read from shared memory each tile for D = 128 (in
 * registers it took 255 and spilled: ptxas, docs/cuda.md). */
template <int D> struct fp32_path {
  typedef float T;
  static constexpr int kD = D;
  static constexpr int kLdQK = D + 8, kLdV = D + 4;
  static constexpr bool kQRegs = D <= 64;
  struct qfrag {
    float x[kQRegs ? D / 8 : 1][4]; /* A fragments of dims 8k .. 8k + 7 */
    const float *r0; /* or, without kQRegs, this lane's Q in shared memory */
  };

  /* A fragment k of the rows at r0 (and r0 + 8 rows) */
  static __device__ __forceinline__ void q_at(float a[4], const float *r0,
                                              int k) {
    const float2 x = *reinterpret_cast<const float2 *>(r0 + 8 * k);
    const float2 y = *reinterpret_cast<const float2 *>(r0 + 8 * kLdQK + 8 * k);
    a[0] = x.x, a[1] = y.x, a[2] = x.y, a[3] = y.y;
  }

  static __device__ __forceinline__ void load_q(qfrag &qf, const T *qs,
                                                int warp, int lane) {
    qf.r0 = qs + (warp * 16 + lane / 4) * kLdQK + 2 * (lane % 4);
    if constexpr (kQRegs) {
#pragma unroll
      for (int k = 0; k < D / 8; k++)
        q_at(qf.x[k], qf.r0, k);
    }
  }

  static __device__ __forceinline__ void qk(float s[kTile / 8][4],
                                            const qfrag &qf, const T *kt,
                                            int lane) {
    const float *kr = kt + (lane / 4) * kLdQK + 2 * (lane % 4);
#pragma unroll
    for (int k = 0; k < D / 8; k++) {
      float a[4], ah[4], al[4];
      if constexpr (kQRegs) {
#pragma unroll
        for (int e = 0; e < 4; e++)
          a[e] = qf.x[k][e];
      } else {
        q_at(a, qf.r0, k);
      }
#pragma unroll
      for (int e = 0; e < 4; e++)
        split_tf32(a[e], &ah[e], &al[e]);
#pragma unroll
      for (int c = 0; c < kTile / 8; c++) {
        const float2 b =
            *reinterpret_cast<const float2 *>(kr + 8 * c * kLdQK + 8 * k);
        float bh0, bl0, bh1, bl1;
        split_tf32(b.x, &bh0, &bl0);
        split_tf32(b.y, &bh1, &bl1);
        mma_3xtf32(s[c], ah, al, bh0, bh1, bl0, bl1);
      }
    }
  }

  static __device__ __forceinline__ void pv(float o[D / 8][4],
                                            const float s[kTile / 8][4],
                                            const T *vt, int lane) {
    const float *vr = vt + 2 * (lane % 4) * kLdV + lane / 4;
#pragma unroll
    for (int k = 0; k < kTile / 8; k++) {
      const float p[4] = {s[k][0], s[k][2], s[k][1], s[k][3]};
      float ah[4], al[4];
#pragma unroll
      for (int e = 0; e < 4; e++)
        split_tf32(p[e], &ah[e], &al[e]);
#pragma unroll
      for (int c = 0; c < D / 8; c++) {
        const float *b = vr + 8 * k * kLdV + 8 * c;
        float bh0, bl0, bh1, bl1;
        split_tf32(b[0], &bh0, &bl0);
        split_tf32(b[kLdV], &bh1, &bl1);
        mma_3xtf32(o[c], ah, al, bh0, bh1, bl0, bl1);
      }
    }
  }
};

/* Shared memory for path P, in elements: Q [kRows] rows, then K's two
 * buffers, then V's. */
template <class P> struct smem_layout {
  static constexpr int kQ = kRows * P::kLdQK;
  static constexpr int kK = kTile * P::kLdQK;
  static constexpr int kV = kTile * P::kLdV;
  static constexpr size_t kBytes =
      sizeof(typename P::T) * (size_t)(kQ + 2 * kK + 2 * kV);
};

/* Copies rows [0, valid) of a [R, D] tile of T from global src (rows ld
 * elements apart) to shared dst (rows Ld apart), zeros for rows [valid,
 * R), asynchronously; every thread of the block takes part. */
template <class T, int D, int Ld, int R>
__device__ __forceinline__ void stage(T *dst, const T *src, int64_t ld,
                                      int64_t valid) {
  constexpr int kPer = 16 / (int)sizeof(T); /* elements a 16-byte piece */
  constexpr int kChunks = D / kPer;         /* pieces a row */
  static_assert(R * kChunks % kThreads == 0, "whole chunks per thread");
#pragma unroll
  for (int u = 0; u < R * kChunks / kThreads; u++) {
    const int c = threadIdx.x + u * kThreads;
    const int r = c / kChunks, x = c % kChunks;
    const bool full = r < valid;
    cp_async16(dst + r * Ld + x * kPer, full ? src + r * ld + x * kPer : src,
               full);
  }
}

template <class P>
__global__ void __launch_bounds__(kThreads) flash_v3_kernel(args a) {
  typedef typename P::T T;
  constexpr int D = P::kD;
  static_assert(D % 16 == 0 && D >= 16 && D <= 128, "D: 16 .. 128 by 16");
  using L = smem_layout<P>;
  extern __shared__ __align__(16) unsigned char smem_v3[];
  T *qs = reinterpret_cast<T *>(smem_v3);
  T *ks = qs + L::kQ;
  T *vs = ks + 2 * L::kK;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int qg = lane / 4, qt = lane % 4; /* mma.cuh's g and t */
  const int64_t b = blockIdx.z, h = blockIdx.y;
  const int64_t hk = h / (a.H / a.Hkv);
  /* the last row blocks first: with causal masks they see the most keys,
   * and the light ones then make the tail of the grid */
  const int64_t i0 = (int64_t)(gridDim.x - 1 - blockIdx.x) * kRows;
  const int64_t i1 = min(i0 + kRows, a.Lq);
  const int64_t w0 = i0 + warp * 16; /* this warp's rows [w0, w1) */
  const int64_t w1 = min(w0 + 16, a.Lq);
  const T *q = static_cast<const T *>(a.q) + (b * a.Lq * a.H + h) * D;
  const T *k = static_cast<const T *>(a.k) + (b * a.Lk * a.Hkv + hk) * D;
  const T *v = static_cast<const T *>(a.v) + (b * a.Lk * a.Hkv + hk) * D;
  const int64_t ldq = a.H * D, ldkv = a.Hkv * D;

  int64_t lo, hi;
  key_range(a, b, i0, i1, &lo, &hi);
  /* a warp skips the tiles outside [any_lo, any_hi), which its rows see
   * none of (as if every key were masked), and takes the fast path on
   * those inside [all_lo, all_hi), which every row of it sees, where no
   * term applies per element */
  int64_t any_lo = 0, any_hi = 0, all_lo = 0, all_hi = 0, ignored;
  if (w0 < w1) {
    key_range(a, b, w0, w1, &any_lo, &any_hi);
    if (!per_element(a)) {
      key_range(a, b, w1 - 1, w1, &all_lo, &ignored);
      key_range(a, b, w0, w0 + 1, &ignored, &all_hi);
    }
  }
  const int ntiles = hi > lo ? (int)((hi - lo + kTile - 1) / kTile) : 0;

  float o[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; n++)
    o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  typename P::qfrag qf; /* this lane's part of the warp's Q */
  constexpr int kLdQK = P::kLdQK, kLdV = P::kLdV;

  if (ntiles > 0) {
    stage<T, D, kLdQK, kRows>(qs, q + i0 * ldq, ldq, i1 - i0);
    stage<T, D, kLdQK, kTile>(ks, k + lo * ldkv, ldkv, hi - lo);
    stage<T, D, kLdV, kTile>(vs, v + lo * ldkv, ldkv, hi - lo);
  }
  cp_async_commit();

  for (int n = 0; n < ntiles; n++) {
    const int64_t t0 = lo + (int64_t)n * kTile;
    if (n + 1 < ntiles) { /* the next tile, into the other buffers */
      const int nb = (n + 1) % 2;
      const int64_t t1 = t0 + kTile;
      stage<T, D, kLdQK, kTile>(ks + nb * L::kK, k + t1 * ldkv, ldkv,
                                hi - t1);
      stage<T, D, kLdV, kTile>(vs + nb * L::kV, v + t1 * ldkv, ldkv,
                               hi - t1);
    }
    cp_async_commit(); /* perhaps empty: one group an iteration */
    cp_async_wait<1>(); /* Q and tile n have landed, for this thread */
    __syncthreads();    /* and for every thread */
    const T *kt = ks + (n % 2) * L::kK, *vt = vs + (n % 2) * L::kV;
    if (n == 0)
      P::load_q(qf, qs, warp, lane);

    /* a warp wholly past Lq, or whose rows see none of the tile, only
     * keeps step */
    if (t0 < any_hi && t0 + kTile > any_lo) {
      /* pass 1: S = Q·Kᵀ */
      float s[kTile / 8][4];
#pragma unroll
      for (int c = 0; c < kTile / 8; c++)
        s[c][0] = s[c][1] = s[c][2] = s[c][3] = 0.f;
      P::qk(s, qf, kt, lane);

      /* pass 2: the scores, in log2 units */
      if (t0 >= all_lo && t0 + kTile <= all_hi) {
        const float sl = a.scale * kLog2e;
#pragma unroll
        for (int c = 0; c < kTile / 8; c++)
#pragma unroll
          for (int e = 0; e < 4; e++)
            s[c][e] *= sl;
      } else {
#pragma unroll
        for (int c = 0; c < kTile / 8; c++)
#pragma unroll
          for (int e = 0; e < 4; e++) {
            const int64_t i = w0 + qg + 8 * (e / 2);
            const int64_t j = t0 + 8 * c + 2 * qt + e % 2;
            s[c][e] = i < a.Lq && j < hi
                          ? masked_score(a, b, h, i, j, s[c][e]) * kLog2e
                          : -INFINITY;
          }
      }

      /* pass 3: the online softmax; row r of the lane is qg + 8r, its
       * elements e = 2r, 2r + 1 of each n-tile */
#pragma unroll
      for (int r = 0; r < 2; r++) {
        float mx = m[r];
#pragma unroll
        for (int c = 0; c < kTile / 8; c++)
          mx = fmaxf(mx, fmaxf(s[c][2 * r], s[c][2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        /* every key so far masked: subtract 0, so that P = 2^-inf = 0 */
        const float base = mx == -INFINITY ? 0.f : mx;
        const float corr = exp2_fast(m[r] - base);
        m[r] = mx;
        float sum = 0.f;
#pragma unroll
        for (int c = 0; c < kTile / 8; c++) {
          s[c][2 * r] = exp2_fast(s[c][2 * r] - base);
          s[c][2 * r + 1] = exp2_fast(s[c][2 * r + 1] - base);
          sum += s[c][2 * r] + s[c][2 * r + 1];
        }
        l[r] = l[r] * corr + sum;
#pragma unroll
        for (int c = 0; c < D / 8; c++) {
          o[c][2 * r] *= corr;
          o[c][2 * r + 1] *= corr;
        }
      }

      /* pass 4: O += P·V */
      P::pv(o, s, vt, lane);
    }
    __syncthreads(); /* buffer n % 2 is free for tile n + 2 */
  }

  /* out = O / l, lse = m·ln 2 + ln l: the quad's partial sums first */
  if (w0 >= w1)
    return;
#pragma unroll
  for (int r = 0; r < 2; r++) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
#pragma unroll
  for (int r = 0; r < 2; r++) {
    const int64_t i = w0 + qg + 8 * r;
    if (i >= a.Lq)
      continue;
    const float inv = l[r] > 0.f ? 1.f / l[r] : 0.f;
    float *out = a.concat + ((b * a.Lq + i) * a.H + h) * D + 2 * qt;
#pragma unroll
    for (int c = 0; c < D / 8; c++)
      *reinterpret_cast<float2 *>(out + 8 * c) =
          make_float2(o[c][2 * r] * inv, o[c][2 * r + 1] * inv);
    if (a.lse && qt == 0)
      a.lse[(b * a.H + h) * a.Lq + i] =
          l[r] > 0.f ? (m[r] + log2f(l[r])) * kLn2 : -INFINITY;
  }
}

} // namespace v3
} // namespace attn_cu

#endif
