/* core/cuda/flash_wmma.cuh: flash attention version 2, bf16 on tensor
 * cores through WMMA (kernels.h has the contract). Device code, launched by
 * attention.cu's launch_flash_v2; a header so that
 * tests/cores-emu/cores_emu.cc runs the same source on the CPU, with
 * stand-ins for nvcuda::wmma (tests/emu/wmma.h).
 *
 * Version 2 takes bf16 Q, K, V whose head widths are multiples of 16. A
 * block of 4 warps takes 64 query rows of one (batch item, head), a warp
 * 16 of them; key tiles of 64. Per tile, each warp:
 *   pass 1: S [16, 64] = Q_w·Kᵀ on tensor cores (16×16×16 bf16 MMAs,
 *     float accumulators), stored to its shared S;
 *   pass 2: the score terms and masks on S, the online softmax's m and l
 *     per row (two lanes a row, 32 columns each), P = exp(S − m) rounded
 *     to bf16, and each row's rescale factor;
 *   pass 3: O_w [16, Dv] (float, in shared memory) scaled by the factors;
 *   pass 4: O_w += P·V on tensor cores.
 * O stays in shared memory because a WMMA accumulator's element-to-row
 * map is opaque, and the rescale needs the rows. Shared memory, in bytes,
 * each part 128-aligned: Q [64, Dh], K [64, Dh], V [64, Dv] bf16; S
 * [4, 16, 64] float; P [4, 16, 64] bf16; O [4, 16, Dv] float; the factors
 * [4, 16] float. */
#ifndef ATTN_CUDA_FLASH_WMMA_CUH
#define ATTN_CUDA_FLASH_WMMA_CUH

#include <cuda_bf16.h>
#include <math.h>
#include <mma.h>

#include "kernels.h"
#include "score.cuh"

namespace attn_cu {
namespace v2 {

constexpr int kV2Warps = 4;
constexpr int kV2Rows = 16 * kV2Warps; /* query rows a block */
constexpr int kV2Tile = 64;            /* keys a tile */

__host__ __device__ inline size_t align128(size_t n) {
  return (n + 127) / 128 * 128;
}

struct v2_layout {
  size_t q, k, v, s, p, o, f, total;
  __host__ __device__ v2_layout(int64_t Dh, int64_t Dv) {
    size_t at = 0;
    q = at, at += align128((size_t)kV2Rows * Dh * 2);
    k = at, at += align128((size_t)kV2Tile * Dh * 2);
    v = at, at += align128((size_t)kV2Tile * Dv * 2);
    s = at, at += align128((size_t)kV2Warps * 16 * kV2Tile * 4);
    p = at, at += align128((size_t)kV2Warps * 16 * kV2Tile * 2);
    o = at, at += align128((size_t)kV2Warps * 16 * Dv * 4);
    f = at, at += align128((size_t)kV2Warps * 16 * 4);
    total = at;
  }
};

namespace { /* each file that includes this has its own copy */

constexpr unsigned kFull = 0xffffffffu;

__global__ void __launch_bounds__(kV2Warps * 32) flash_v2_kernel(args a) {
  namespace wmma = nvcuda::wmma;
  extern __shared__ __align__(128) unsigned char smem2[];
  const int64_t Dh = a.Dh, Dv = a.Dv;
  const v2_layout lay(Dh, Dv);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __nv_bfloat16 *qs = (__nv_bfloat16 *)(smem2 + lay.q);
  __nv_bfloat16 *ks = (__nv_bfloat16 *)(smem2 + lay.k);
  __nv_bfloat16 *vs = (__nv_bfloat16 *)(smem2 + lay.v);
  float *sw = (float *)(smem2 + lay.s) + warp * 16 * kV2Tile;
  __nv_bfloat16 *pw = (__nv_bfloat16 *)(smem2 + lay.p) + warp * 16 * kV2Tile;
  float *ow = (float *)(smem2 + lay.o) + warp * 16 * Dv;
  float *fw = (float *)(smem2 + lay.f) + warp * 16;
  const int64_t b = blockIdx.z, h = blockIdx.y;
  const int64_t g = h / (a.H / a.Hkv);
  const int64_t i0 = (int64_t)blockIdx.x * kV2Rows;
  const int64_t i1 = min(i0 + kV2Rows, a.Lq);
  const __nv_bfloat16 *q = static_cast<const __nv_bfloat16 *>(a.q);
  const __nv_bfloat16 *k = static_cast<const __nv_bfloat16 *>(a.k);
  const __nv_bfloat16 *v = static_cast<const __nv_bfloat16 *>(a.v);
  const __nv_bfloat16 zero = __float2bfloat16_rn(0.f);

  /* the block's query rows (zeros past Lq), and O = 0 */
  for (int64_t e = threadIdx.x; e < kV2Rows * Dh; e += blockDim.x) {
    int64_t r = e / Dh, d = e % Dh, i = i0 + r;
    qs[e] = i < a.Lq ? q[((b * a.Lq + i) * a.H + h) * Dh + d] : zero;
  }
  for (int64_t e = lane; e < 16 * Dv; e += 32)
    ow[e] = 0.f;

  /* lanes 2r and 2r + 1 hold row r's m and l, and its columns 32·(lane %
   * 2) .. + 31 */
  const int r = lane / 2, c0 = (lane % 2) * 32;
  const int64_t i = i0 + warp * 16 + r;
  float m = -INFINITY, l = 0.f;

  int64_t lo, hi;
  key_range(a, b, i0, i1, &lo, &hi);
  for (int64_t t0 = lo; t0 < hi; t0 += kV2Tile) {
    __syncthreads(); /* the last tile is consumed; qs is written */
    for (int64_t e = threadIdx.x; e < kV2Tile * Dh; e += blockDim.x) {
      int64_t jj = e / Dh, d = e % Dh, j = t0 + jj;
      ks[e] = j < hi ? k[((b * a.Lk + j) * a.Hkv + g) * Dh + d] : zero;
    }
    for (int64_t e = threadIdx.x; e < kV2Tile * Dv; e += blockDim.x) {
      int64_t jj = e / Dv, d = e % Dv, j = t0 + jj;
      vs[e] = j < hi ? v[((b * a.Lk + j) * a.Hkv + g) * Dv + d] : zero;
    }
    __syncthreads();

    /* pass 1: S = Q_w·Kᵀ; Kᵀ is K's rows read column-major */
    for (int n = 0; n < kV2Tile / 16; n++) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.f);
      for (int64_t kk = 0; kk < Dh; kk += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16,
                       wmma::row_major>
            fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16,
                       wmma::col_major>
            fb;
        wmma::load_matrix_sync(fa, qs + warp * 16 * Dh + kk, (unsigned)Dh);
        wmma::load_matrix_sync(fb, ks + n * 16 * Dh + kk, (unsigned)Dh);
        wmma::mma_sync(acc, fa, fb, acc);
      }
      wmma::store_matrix_sync(sw + n * 16, acc, kV2Tile, wmma::mem_row_major);
    }
    __syncwarp();

    /* pass 2: scores, masks, the online softmax; P in bf16 */
    float *srow = sw + r * kV2Tile;
    float tmax = -INFINITY;
    for (int c = c0; c < c0 + 32; c++) {
      const int64_t j = t0 + c;
      const float s =
          i < a.Lq && j < hi ? masked_score(a, b, h, i, j, srow[c]) : -INFINITY;
      srow[c] = s;
      tmax = fmaxf(tmax, s);
    }
    tmax = fmaxf(tmax, __shfl_xor_sync(kFull, tmax, 1));
    const float m_new = fmaxf(m, tmax);
    float sum = 0.f;
    for (int c = c0; c < c0 + 32; c++) {
      const float p = srow[c] == -INFINITY ? 0.f : expf(srow[c] - m_new);
      sum += p;
      pw[r * kV2Tile + c] = __float2bfloat16_rn(p);
    }
    sum += __shfl_xor_sync(kFull, sum, 1);
    const float corr = m == -INFINITY ? (m_new == -INFINITY ? 1.f : 0.f)
                                      : expf(m - m_new);
    l = l * corr + sum;
    m = m_new;
    if (c0 == 0)
      fw[r] = corr;
    __syncwarp();

    /* pass 3: O_w scaled row by row */
    for (int64_t e = lane; e < 16 * Dv; e += 32)
      ow[e] *= fw[e / Dv];
    __syncwarp();

    /* pass 4: O_w += P·V */
    for (int64_t nv = 0; nv < Dv; nv += 16) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::load_matrix_sync(acc, ow + nv, (unsigned)Dv, wmma::mem_row_major);
      for (int kk = 0; kk < kV2Tile; kk += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16,
                       wmma::row_major>
            fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16,
                       wmma::row_major>
            fb;
        wmma::load_matrix_sync(fa, pw + kk, kV2Tile);
        wmma::load_matrix_sync(fb, vs + kk * Dv + nv, (unsigned)Dv);
        wmma::mma_sync(acc, fa, fb, acc);
      }
      wmma::store_matrix_sync(ow + nv, acc, (unsigned)Dv, wmma::mem_row_major);
    }
    __syncwarp();
  }
  __syncwarp(); /* O's zeros, where no tile ran */

  /* out = O / l; the two lanes of a row split its columns */
  if (i < a.Lq) {
    const float inv = l > 0.f ? 1.f / l : 0.f;
    float *out = a.concat + ((b * a.Lq + i) * a.H + h) * Dv;
    for (int64_t d = lane % 2; d < Dv; d += 2)
      out[d] = ow[r * Dv + d] * inv;
    if (a.lse && c0 == 0)
      a.lse[(b * a.H + h) * a.Lq + i] = l > 0.f ? m + logf(l) : -INFINITY;
  }
}

} // namespace
} // namespace v2
} // namespace attn_cu

#endif
