/* core/cuda/flash_cores.cuh: flash versions 1 and 4, FlashAttention's
 * online softmax on CUDA cores, the keys of a row in one range (version
 * 1) or split across blocks (version 4, for a session's step:
 * FlashDecoding's idea, Dao et al., 2023). kernels.h has the contract.
 *
 *   - The 8 warps of a block take 8 rows of one (item b, kv head g): row
 *     r of the G = H/Hkv query heads that read g, at Lq queries, is query
 *     i = r / G of head g·G + r % G, so that each tile of keys and values
 *     staged in shared memory serves all of them (a step with G = 4 has
 *     four busy warps a block, and reads each kv head's keys once, not
 *     four times). With G = 1, 8 consecutive queries of one head.
 *   - The keys that the block's rows can see, [lo, hi) (key_range), are
 *     cut into gridDim.y ranges of whole tiles of 32, one a block; in a
 *     range, lane j scores key j of a tile, and each warp keeps its row's
 *     running max m, sum l and unnormalised output o = Σ exp(s − m)·v
 *     (8 accumulators a lane).
 *   - With one range the block writes concat and lse itself. With more,
 *     it writes each row's m, l and o into a.part, and combine_kernel
 *     merges a row's ranges: M = max m_s, L = Σ l_s · exp(m_s − M), out =
 *     Σ o_s · exp(m_s − M) / L, lse = M + log(L). A range where every key
 *     is masked has l = 0 and counts for nothing.
 * Grid (Hkv · row blocks, ranges, B): each dimension within CUDA's limits
 * for every plan (B <= 65535, at most 64 ranges).
 * Device code, launched by flash_cores.cu; a header so that
 * tests/cores-emu/cores_emu.cc runs the same source on the CPU. */
#ifndef ATTN_CUDA_FLASH_CORES_CUH
#define ATTN_CUDA_FLASH_CORES_CUH

#include <cuda_bf16.h>
#include <math.h>

#include "attn/attn.h"
#include "kernels.h"
#include "score.cuh"

namespace attn_cu {
namespace cores {

constexpr unsigned kFull = 0xffffffffu;
constexpr int kWarps = 8; /* rows a block, one a warp */
constexpr int kTile = 32; /* keys a tile, one a lane */
constexpr int kDreg = ATTN_CUDA_MAX_HEAD_DIM / 32; /* accumulators a lane */

/* Shared memory, in floats: the key tile [kTile, Dh + 1] (padded so that
 * lane j reading row j hits distinct banks), the value tile [kTile, Dv]
 * and each warp's query row [kWarps, Dh]. */
inline size_t smem_bytes(int64_t Dh, int64_t Dv) {
  return sizeof(float) *
         (size_t)(kTile * (Dh + 1) + kTile * Dv + kWarps * Dh);
}

namespace { /* each file that includes this has its own copy */

__device__ __forceinline__ float load(const float *p) { return *p; }
__device__ __forceinline__ float load(const __nv_bfloat16 *p) {
  return __bfloat162float(*p);
}

__device__ __forceinline__ float warp_max(float x) {
  for (int o = 16; o > 0; o >>= 1)
    x = fmaxf(x, __shfl_xor_sync(kFull, x, o));
  return x;
}

__device__ __forceinline__ float warp_sum(float x) {
  for (int o = 16; o > 0; o >>= 1)
    x += __shfl_xor_sync(kFull, x, o);
  return x;
}

/* Row (b, h, i)'s result from its m, l and o (lane's d = lane + 32·t):
 * concat = o / l and lse = m + log(l), or zeros and -inf where l = 0 (a
 * dead row). */
__device__ __forceinline__ void store_row(const args &a, int64_t b,
                                          int64_t h, int64_t i, int lane,
                                          const float *o, float m, float l) {
  const float inv = l > 0.f ? 1.f / l : 0.f;
  float *out = a.concat + ((b * a.Lq + i) * a.H + h) * a.Dv;
#pragma unroll
  for (int t = 0; t < kDreg; t++)
    if (lane + 32 * t < a.Dv)
      out[lane + 32 * t] = o[t] * inv;
  if (a.lse && lane == 0)
    a.lse[(b * a.H + h) * a.Lq + i] = l > 0.f ? m + logf(l) : -INFINITY;
}

/* Stages keys [t0, t0 + kTile) of item b, kv head g, into ks [kTile,
 * Dh + 1] and vs [kTile, Dv] as float, zeros from `end` on: from K
 * [B, Lk, Hkv·Dh] and V, a key's features contiguous. */
template <typename T>
__device__ __forceinline__ void stage(const args &a, const T *k, const T *v,
                                      int64_t b, int64_t g, int64_t t0,
                                      int64_t end, float *ks, float *vs) {
  const int64_t Dh = a.Dh, Dv = a.Dv;
  for (int64_t e = threadIdx.x; e < kTile * Dh; e += blockDim.x) {
    int64_t jj = e / Dh, d = e % Dh, j = t0 + jj;
    ks[jj * (Dh + 1) + d] =
        j < end ? load(k + ((b * a.Lk + j) * a.Hkv + g) * Dh + d) : 0.f;
  }
  for (int64_t e = threadIdx.x; e < kTile * Dv; e += blockDim.x) {
    int64_t jj = e / Dv, d = e % Dv, j = t0 + jj;
    vs[jj * Dv + d] =
        j < end ? load(v + ((b * a.Lk + j) * a.Hkv + g) * Dv + d) : 0.f;
  }
}

/* The same from a kv cache's pages (attn.h): K transposed, a feature's
 * tokens contiguous, so that consecutive threads take consecutive keys
 * (and write ks rows Dh + 1 apart, distinct banks); V a token's row. A
 * tile may straddle two pages. */
__device__ __forceinline__ void stage_pages(const args &a, int64_t b,
                                            int64_t g, int64_t t0,
                                            int64_t end, float *ks,
                                            float *vs) {
  const int64_t Dh = a.Dh, Dv = a.Dv;
  float *const *pages = a.pages + b * a.maxp;
  for (int64_t e = threadIdx.x; e < kTile * Dh; e += blockDim.x) {
    int64_t d = e / kTile, jj = e % kTile, j = t0 + jj;
    ks[jj * (Dh + 1) + d] =
        j < end ? pages[j / ATTN_KV_PAGE][(g * Dh + d) * ATTN_KV_LDK +
                                          j % ATTN_KV_PAGE]
                : 0.f;
  }
  for (int64_t e = threadIdx.x; e < kTile * Dv; e += blockDim.x) {
    int64_t jj = e / Dv, d = e % Dv, j = t0 + jj;
    vs[jj * Dv + d] = j < end ? pages[j / ATTN_KV_PAGE]
                                     [a.voff + j % ATTN_KV_PAGE * a.ldv +
                                      g * a.Dvp + d]
                              : 0.f;
  }
}

/* The row blocks of a kv head's group: ceil(G·Lq / 8). */
__host__ __device__ inline int64_t row_blocks(const args &a) {
  return (a.H / a.Hkv * a.Lq + kWarps - 1) / kWarps;
}

/* Grid (Hkv · row_blocks, ranges, B), 256 threads; four blocks an SM
 * (ptxas: 63 registers, 59 with bf16, no spills; 80 without the bound). */
template <typename T>
__global__ void __launch_bounds__(kWarps * 32, 4) flash_kernel(args a) {
  extern __shared__ float cores_smem[];
  const int64_t Dh = a.Dh, Dv = a.Dv, ldk = Dh + 1, G = a.H / a.Hkv;
  const int64_t rows = G * a.Lq, nb = row_blocks(a), S = gridDim.y;
  float *ks = cores_smem;
  float *vs = ks + kTile * ldk;
  float *qs = vs + kTile * Dv + (threadIdx.x / 32) * Dh;
  const int lane = threadIdx.x % 32;
  const int64_t b = blockIdx.z, g = blockIdx.x / nb;
  const int64_t r0 = (int64_t)(blockIdx.x % nb) * kWarps;
  const int64_t r1 = min(r0 + kWarps, rows);
  const int64_t r = r0 + threadIdx.x / 32;
  const bool row = r < rows;
  const int64_t i = r / G, h = g * G + r % G; /* valid where row */
  const T *q = static_cast<const T *>(a.q);
  const T *k = static_cast<const T *>(a.k);
  const T *v = static_cast<const T *>(a.v);

  if (row)
    for (int64_t d = lane; d < Dh; d += 32)
      qs[d] = load(q + ((b * a.Lq + i) * a.H + h) * Dh + d);

  /* the block's keys, then its split's share of them in whole tiles */
  int64_t lo, hi;
  key_range(a, b, r0 / G, (r1 - 1) / G + 1, &lo, &hi);
  const int64_t tiles = hi > lo ? (hi - lo + kTile - 1) / kTile : 0;
  const int64_t per = (tiles + S - 1) / S * kTile;
  const int64_t s_lo = lo + (int64_t)blockIdx.y * per;
  const int64_t s_hi = min(hi, s_lo + per);

  float m = -INFINITY, l = 0.f, o[kDreg];
#pragma unroll
  for (int t = 0; t < kDreg; t++)
    o[t] = 0.f;

  for (int64_t t0 = s_lo; t0 < s_hi; t0 += kTile) {
    __syncthreads(); /* the last tile is consumed; qs is written */
    /* pass 1: stage the tile's keys and values (zeros past s_hi) */
    if (a.pages)
      stage_pages(a, b, g, t0, s_hi, ks, vs);
    else
      stage(a, k, v, b, g, t0, s_hi, ks, vs);
    __syncthreads();
    if (!row)
      continue;
    /* pass 2: lane j scores key t0 + j */
    const int64_t j = t0 + lane;
    float s = -INFINITY;
    if (j < s_hi && allowed(a, b, h, i, j)) {
      const float *kr = ks + lane * ldk;
      float dot = 0.f;
#pragma unroll 4
      for (int64_t d = 0; d < Dh; d++)
        dot += qs[d] * kr[d];
      s = score(a, b, h, i, j, dot);
    }
    /* pass 3: the online softmax's m and l */
    const float m_new = fmaxf(m, warp_max(s));
    if (m_new == -INFINITY) /* every key so far masked: the whole warp */
      continue;
    const float p = s == -INFINITY ? 0.f : expf(s - m_new);
    const float corr = m == -INFINITY ? 0.f : expf(m - m_new);
    l = l * corr + warp_sum(p);
    m = m_new;
    /* pass 4: o = o·corr + Σ_j p_j·v_j, lane holding d = lane + 32·t */
#pragma unroll
    for (int t = 0; t < kDreg; t++)
      o[t] *= corr;
    for (int jj = 0; jj < kTile; jj++) {
      const float pj = __shfl_sync(kFull, p, jj);
      const float *vr = vs + jj * Dv;
#pragma unroll
      for (int t = 0; t < kDreg; t++)
        if (lane + 32 * t < Dv)
          o[t] += pj * vr[lane + 32 * t];
    }
  }
  if (!row)
    return;
  if (S == 1) { /* the whole range: the result itself */
    store_row(a, b, h, i, lane, o, m, l);
    return;
  }
  const int64_t at = (b * a.H + h) * a.Lq + i; /* the row in [B, H, Lq] */
  const int64_t n = a.B * a.H * a.Lq, part = blockIdx.y * n + at;
  float *po = a.part + part * Dv;
#pragma unroll
  for (int t = 0; t < kDreg; t++)
    if (lane + 32 * t < Dv)
      po[lane + 32 * t] = o[t];
  if (lane == 0) {
    float *ml = a.part + S * n * Dv + part * 2;
    ml[0] = m;
    ml[1] = l;
  }
}

/* One warp a row of [B, H, Lq]: its a.splits ranges merged into concat
 * and lse. Grid-stride over the rows, 256 threads a block. */
__global__ void __launch_bounds__(kWarps * 32) combine_kernel(args a) {
  const int64_t n = a.B * a.H * a.Lq, S = a.splits, Dv = a.Dv;
  const float *ml = a.part + S * n * Dv;
  const int lane = threadIdx.x % 32;
  for (int64_t at = (int64_t)blockIdx.x * kWarps + threadIdx.x / 32; at < n;
       at += (int64_t)gridDim.x * kWarps) {
    float mx = -INFINITY;
    for (int64_t s = 0; s < S; s++)
      if (ml[(s * n + at) * 2 + 1] > 0.f)
        mx = fmaxf(mx, ml[(s * n + at) * 2]);
    float l = 0.f, o[kDreg];
#pragma unroll
    for (int t = 0; t < kDreg; t++)
      o[t] = 0.f;
    for (int64_t s = 0; s < S; s++) {
      const float ls = ml[(s * n + at) * 2 + 1];
      if (!(ls > 0.f))
        continue;
      const float w = expf(ml[(s * n + at) * 2] - mx);
      l += ls * w;
      const float *po = a.part + (s * n + at) * Dv;
#pragma unroll
      for (int t = 0; t < kDreg; t++)
        if (lane + 32 * t < Dv)
          o[t] += w * po[lane + 32 * t];
    }
    store_row(a, at / (a.H * a.Lq), at / a.Lq % a.H, at % a.Lq, lane, o, mx,
              l);
  }
}

} // namespace
} // namespace cores
} // namespace attn_cu

#endif
