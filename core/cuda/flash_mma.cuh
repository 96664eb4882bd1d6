/* core/cuda/flash_mma.cuh: flash attention version 3, bf16 on the tensor
 * cores through mma.sync (FlashAttention-2's structure; Dao, 2023). The
 * kernel template alone, device code; flash_mma.cu launches it.
 *
 * Layouts are kernels.h's; here Dh = Dv = D, a multiple of 16 up to 128
 * (32, 64 and 128 are instantiated). A block of kWarps = 8 warps takes
 * kRows = 128 query rows of one (batch item, head), a warp 16 of them; the
 * key range the block can see (score.cuh's key_range) is visited in tiles
 * of kTile = 64 keys. Shared memory, bf16 rows padded to D + 8 elements
 * (so that the 8 rows one ldmatrix reads start 16 bytes apart modulo 128
 * and hit distinct banks): Q [128, D], K [2][64, D], V [2][64, D]; tile
 * n + 1 is copied in (cp.async, zeros past the range) while tile n is
 * computed. Registers, per lane: Q's A fragments [D/16][4], S [8][4] (the
 * warp's 16 × 64 scores), O [D/8][4] (its 16 × D outputs), and the max m
 * and partial sum l of its two rows g and g + 8 (mma.cuh's fragments).
 * Wider heads (256) would need 128 registers a lane for O alone, and
 * spill: they stay on version 2. 128 rows a block rather than 64 halve
 * the K and V tiles read from L2 per query row (FlashAttention-2 takes
 * 128 rows for these widths too); registers allow one block of 8 warps
 * an SM for D of 64 and 128, the same 8 warps as two blocks of 4.
 *
 * Per tile, each warp:
 *   pass 1: S = Q·Kᵀ, K's rows read by ldmatrix as B fragments;
 *   pass 2: S in log2 units: scale·log2(e)·S where every row of the warp
 *     sees every key of the tile and no term applies per element (the
 *     fast path), else masked_score(...)·log2(e) per element (-inf where
 *     masked, and for rows past Lq and keys past the range);
 *   pass 3: the online softmax: each row's tile max over its quad of
 *     lanes (shfl_xor 1, 2), m_new = max(m, tile max), O and l scaled by
 *     2^(m − m_new), P = 2^(S − m_new) in place, l += P (this lane's
 *     columns; the quad's partial sums are added at the end);
 *   pass 4: O += P·V: S's C fragments of key columns 16k .. 16k + 15
 *     (n-tiles 2k, 2k + 1) are, rounded to bf16, the A fragment of P's
 *     k-th slice; V's rows read by ldmatrix.trans as B fragments.
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

/* Shared memory for head width D, in bf16 elements: a row of Q, K or V is
 * kLd apart; Q [kRows] rows, then K's two buffers, then V's. */
template <int D> struct smem_layout {
  static constexpr int kLd = D + 8;
  static constexpr int kQ = kRows * kLd;
  static constexpr int kKV = kTile * kLd;
  static constexpr size_t kBytes = sizeof(bf16) * (size_t)(kQ + 4 * kKV);
};

/* Copies rows [0, valid) of a [R, D] bf16 tile from global src (rows
 * ld elements apart) to shared dst (rows kLd apart), zeros for rows
 * [valid, R), asynchronously; every thread of the block takes part. */
template <int D, int R>
__device__ __forceinline__ void stage(bf16 *dst, const bf16 *src, int64_t ld,
                                      int64_t valid) {
  constexpr int kChunks = D / 8; /* 16-byte pieces a row */
  constexpr int kLd = smem_layout<D>::kLd;
  static_assert(R * kChunks % kThreads == 0, "whole chunks per thread");
#pragma unroll
  for (int u = 0; u < R * kChunks / kThreads; u++) {
    const int c = threadIdx.x + u * kThreads;
    const int r = c / kChunks, x = c % kChunks;
    const bool full = r < valid;
    cp_async16(dst + r * kLd + x * 8, full ? src + r * ld + x * 8 : src,
               full);
  }
}

template <int D>
__global__ void __launch_bounds__(kThreads) flash_v3_kernel(args a) {
  static_assert(D % 16 == 0 && D >= 16 && D <= 128, "D: 16 .. 128 by 16");
  using L = smem_layout<D>;
  constexpr int kLd = L::kLd;
  extern __shared__ __align__(16) unsigned char smem_v3[];
  bf16 *qs = reinterpret_cast<bf16 *>(smem_v3);
  bf16 *ks = qs + L::kQ;
  bf16 *vs = ks + 2 * L::kKV;

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
  const bf16 *q = static_cast<const bf16 *>(a.q) + (b * a.Lq * a.H + h) * D;
  const bf16 *k =
      static_cast<const bf16 *>(a.k) + (b * a.Lk * a.Hkv + hk) * D;
  const bf16 *v =
      static_cast<const bf16 *>(a.v) + (b * a.Lk * a.Hkv + hk) * D;
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
  uint32_t qf[D / 16][4]; /* Q's A fragments, 16 columns each */
  /* lane l's row address in ldmatrix: Q's A (rows l % 16, columns 8 ·
   * (l / 16) of a 16 × 16 slice), K's B for two n-tiles (keys l % 8 + 8 ·
   * (l / 16), dims 8 · (l / 8 % 2)), V's B for two n-tiles (keys l % 8 +
   * 8 · (l / 8 % 2), dims 8 · (l / 16)) */
  const int q_off = (warp * 16 + lane % 16) * kLd + 8 * (lane / 16);
  const int k_off = (lane % 8 + 8 * (lane / 16)) * kLd + 8 * (lane / 8 % 2);
  const int v_off = (lane % 8 + 8 * (lane / 8 % 2)) * kLd + 8 * (lane / 16);

  if (ntiles > 0) {
    stage<D, kRows>(qs, q + i0 * ldq, ldq, i1 - i0);
    stage<D, kTile>(ks, k + lo * ldkv, ldkv, hi - lo);
    stage<D, kTile>(vs, v + lo * ldkv, ldkv, hi - lo);
  }
  cp_async_commit();

  for (int n = 0; n < ntiles; n++) {
    const int64_t t0 = lo + (int64_t)n * kTile;
    if (n + 1 < ntiles) { /* the next tile, into the other buffers */
      const int nb = (n + 1) % 2;
      const int64_t t1 = t0 + kTile;
      stage<D, kTile>(ks + nb * L::kKV, k + t1 * ldkv, ldkv, hi - t1);
      stage<D, kTile>(vs + nb * L::kKV, v + t1 * ldkv, ldkv, hi - t1);
    }
    cp_async_commit(); /* perhaps empty: one group an iteration */
    cp_async_wait<1>(); /* Q and tile n have landed, for this thread */
    __syncthreads();    /* and for every thread */
    const bf16 *kt = ks + (n % 2) * L::kKV, *vt = vs + (n % 2) * L::kKV;
    if (n == 0) {
#pragma unroll
      for (int d = 0; d < D / 16; d++)
        ldsm_x4(qf[d], qs + q_off + 16 * d);
    }

    /* a warp wholly past Lq, or whose rows see none of the tile, only
     * keeps step */
    if (t0 < any_hi && t0 + kTile > any_lo) {
      /* pass 1: S = Q·Kᵀ */
      float s[kTile / 8][4];
#pragma unroll
      for (int c = 0; c < kTile / 8; c++)
        s[c][0] = s[c][1] = s[c][2] = s[c][3] = 0.f;
#pragma unroll
      for (int d = 0; d < D / 16; d++) {
#pragma unroll
        for (int c = 0; c < kTile / 16; c++) {
          uint32_t kb[4];
          ldsm_x4(kb, kt + k_off + 16 * c * kLd + 16 * d);
          mma_bf16(s[2 * c], qf[d], kb[0], kb[1]);
          mma_bf16(s[2 * c + 1], qf[d], kb[2], kb[3]);
        }
      }

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
          ldsm_x4_trans(vb, vt + v_off + 16 * kk * kLd + 16 * c);
          mma_bf16(o[2 * c], pa, vb[0], vb[1]);
          mma_bf16(o[2 * c + 1], pa, vb[2], vb[3]);
        }
      }
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
