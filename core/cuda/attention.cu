/* core/cuda/attention.cu: the CUDA backend's attention kernels
 * (kernels.h has the layouts and each kernel's contract).
 *
 * The algorithm is FlashAttention's (Dao et al., 2022): the keys are
 * visited tile by tile, and each query row keeps its running max m, its
 * sum l = Σ exp(s − m) and its unnormalised output o = Σ exp(s − m)·v;
 * when a tile raises the max, l and o are rescaled by exp(m_old − m_new).
 * At the end o / l is the softmax's output and m + log(l) (the row's
 * log-sum-exp) is kept, from which the weights kernel recomputes any
 * weight as exp(s − lse) without a second softmax. */
#include <cuda_bf16.h>
#include <math.h>
#include <mma.h>

#include "attn/attn.h"
#include "kernels.h"
#include "score.cuh"

namespace attn_cu {
namespace {

constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ float load(const float *p) { return *p; }
__device__ __forceinline__ float load(const __nv_bfloat16 *p) {
  return __bfloat162float(*p);
}

/* ---- version 2: bf16 on tensor cores (WMMA), a warp per 16 rows -------- */

/* Version 2 takes bf16 Q, K, V whose head widths are multiples of 16. A
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
constexpr int kV2Warps = 4;
constexpr int kV2Rows = 16 * kV2Warps; /* query rows a block */
constexpr int kV2Tile = 64;            /* keys a tile */

__host__ __device__ size_t align128(size_t n) { return (n + 127) / 128 * 128; }

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

/* The kernel's dynamic shared memory limit is raised once, to what the
 * widest heads take (Dh = Dv = 256: 188,672 bytes), not to each call's
 * own size: the attribute is the function's, for every thread, and a
 * worker setting a smaller one between another's set and launch (Dh 64's
 * 65,792 bytes under Dh 128's 106,752) would fail that launch. */
cudaError_t launch_flash_v2(const args &a, cudaStream_t s) {
  const size_t smem = v2_layout(a.Dh, a.Dv).total;
  static const cudaError_t set = cudaFuncSetAttribute(
      flash_v2_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
      (int)v2_layout(ATTN_CUDA_MAX_HEAD_DIM, ATTN_CUDA_MAX_HEAD_DIM).total);
  if (set != cudaSuccess)
    return set;
  dim3 grid((unsigned)((a.Lq + kV2Rows - 1) / kV2Rows), (unsigned)a.H,
            (unsigned)a.B);
  flash_v2_kernel<<<grid, kV2Warps * 32, smem, s>>>(a);
  return cudaGetLastError();
}

/* ---- weights ------------------------------------------------------------ */

template <typename T>
__global__ void __launch_bounds__(256) weights_kernel(args a, float *w) {
  extern __shared__ float qrow[]; /* [Dh] */
  const int64_t i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int64_t g = h / (a.H / a.Hkv);
  const T *q = static_cast<const T *>(a.q);
  const T *k = static_cast<const T *>(a.k);
  for (int64_t d = threadIdx.x; d < a.Dh; d += blockDim.x)
    qrow[d] = load(q + ((b * a.Lq + i) * a.H + h) * a.Dh + d);
  __syncthreads();
  const float lse = a.lse[(b * a.H + h) * a.Lq + i];
  float *wr = w + ((b * a.H + h) * a.Lq + i) * a.Lk;
  for (int64_t j = threadIdx.x; j < a.Lk; j += blockDim.x) {
    float x = 0.f;
    if (lse != -INFINITY && allowed(a, b, h, i, j)) {
      const T *kr = k + ((b * a.Lk + j) * a.Hkv + g) * a.Dh;
      float dot = 0.f;
      for (int64_t d = 0; d < a.Dh; d++)
        dot += qrow[d] * load(kr + d);
      x = expf(score(a, b, h, i, j, dot) - lse);
    }
    wr[j] = x;
  }
}

__global__ void mean_kernel(const float *w, int64_t H, int64_t Lq,
                            int64_t Lk, int64_t n, float *mean) {
  for (int64_t x = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; x < n;
       x += (int64_t)gridDim.x * blockDim.x) {
    const int64_t b = x / (Lq * Lk), ij = x % (Lq * Lk);
    float sum = 0.f;
    for (int64_t h = 0; h < H; h++)
      sum += w[(b * H + h) * Lq * Lk + ij];
    mean[x] = sum / (float)H;
  }
}

__global__ void heads_kernel(const float *concat, int64_t Lq, int64_t H,
                             int64_t Dv, int64_t n, float *heads) {
  for (int64_t x = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; x < n;
       x += (int64_t)gridDim.x * blockDim.x) {
    const int64_t d = x % Dv, i = (x / Dv) % Lq, bh = x / (Dv * Lq);
    const int64_t b = bh / H, h = bh % H;
    heads[x] = concat[((b * Lq + i) * H + h) * Dv + d];
  }
}

__global__ void __launch_bounds__(256) norm_rope_kernel(heads_args a) {
  const int lane = threadIdx.x % 32;
  const int64_t n = a.B * a.L * a.nh;
  for (int64_t u = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / 32;
       u < n; u += (int64_t)gridDim.x * blockDim.x / 32) {
    const int64_t r = u / a.nh, hd = u % a.nh;
    float *y = a.x + r * a.nh * a.Dh + hd * a.Dh;
    if (a.w) {
      double ss = 0;
      for (int64_t d = lane; d < a.Dh; d += 32)
        ss += (double)y[d] * y[d];
      for (int o = 16; o > 0; o >>= 1)
        ss += __shfl_xor_sync(kFull, ss, o);
      const double inv = 1.0 / sqrt(ss / (double)a.Dh + a.eps);
      for (int64_t d = lane; d < a.Dh; d += 32)
        y[d] = (float)(y[d] * inv * a.w[d]);
      __syncwarp();
    }
    if (a.freq) {
      const int64_t b = r / a.L, t = r % a.L;
      const int64_t pos = a.pos_rank == 0   ? (a.past ? a.past[b] : a.off) + t
                          : a.pos_rank == 1 ? a.pos[t]
                                            : a.pos[b * a.L + t];
      for (int64_t i = lane; i < a.half; i += 32) {
        const int64_t p0 = a.split ? i : 2 * i, p1 = a.split ? i + a.half
                                                            : 2 * i + 1;
        double si, co;
        sincos((double)pos * a.freq[i], &si, &co);
        const double x1 = y[p0], x2 = y[p1];
        y[p0] = (float)(x1 * co - x2 * si);
        y[p1] = (float)(x2 * co + x1 * si);
      }
    }
    __syncwarp();
  }
}

__global__ void finish_kernel(float *x, const float *bias, int64_t cols,
                              int64_t n, int *flag, __nv_bfloat16 *x16) {
  bool bad = false;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
       e += (int64_t)gridDim.x * blockDim.x) {
    float v = x[e];
    if (bias) {
      v += bias[e % cols];
      x[e] = v;
    }
    bad |= !isfinite(v);
    if (x16)
      x16[e] = __float2bfloat16_rn(v);
  }
  if (bad && flag)
    *flag = 1;
}

__global__ void bf16_kernel(const float *src, __nv_bfloat16 *dst, int64_t n) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
       e += (int64_t)gridDim.x * blockDim.x)
    dst[e] = __float2bfloat16_rn(src[e]);
}

__global__ void nonfinite_kernel(const float *x, int64_t n, int skip_neg_inf,
                                 int *flag) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
       e += (int64_t)gridDim.x * blockDim.x)
    if (!isfinite(x[e]) && !(skip_neg_inf && x[e] == -INFINITY))
      *flag = 1;
}

/* Blocks for a grid-stride loop over n elements. */
unsigned blocks_for(int64_t n) {
  int64_t blocks = (n + 255) / 256;
  return (unsigned)(blocks < 1 ? 1 : blocks > 65535 ? 65535 : blocks);
}

} // namespace

cudaError_t flash(const args &a, int version, int *ran, cudaStream_t s) {
  if (version == 3 && flash_v3_fits(a)) {
    *ran = 3;
    return flash_v3(a, s);
  }
  if (version == 4) {
    *ran = 4;
    return flash_cores(a, a.splits, s);
  }
  const bool v2 = a.bf16 && a.Dh % 16 == 0 && a.Dv % 16 == 0;
  if (v2 && version != 1) {
    *ran = 2;
    return launch_flash_v2(a, s);
  }
  *ran = 1;
  return flash_cores(a, 1, s);
}

cudaError_t weights(const args &a, float *w, cudaStream_t s) {
  dim3 grid((unsigned)a.Lq, (unsigned)a.H, (unsigned)a.B);
  const size_t smem = sizeof(float) * (size_t)a.Dh;
  if (a.bf16)
    weights_kernel<__nv_bfloat16><<<grid, 256, smem, s>>>(a, w);
  else
    weights_kernel<float><<<grid, 256, smem, s>>>(a, w);
  return cudaGetLastError();
}

cudaError_t mean_weights(const float *w, int64_t B, int64_t H, int64_t Lq,
                         int64_t Lk, float *mean, cudaStream_t s) {
  const int64_t n = B * Lq * Lk;
  mean_kernel<<<blocks_for(n), 256, 0, s>>>(w, H, Lq, Lk, n, mean);
  return cudaGetLastError();
}

cudaError_t head_outputs(const float *concat, int64_t B, int64_t Lq,
                         int64_t H, int64_t Dv, float *heads, cudaStream_t s) {
  const int64_t n = B * H * Lq * Dv;
  heads_kernel<<<blocks_for(n), 256, 0, s>>>(concat, Lq, H, Dv, n, heads);
  return cudaGetLastError();
}

cudaError_t transform_heads(const heads_args &h, cudaStream_t s) {
  const int64_t warps = h.B * h.L * h.nh;
  norm_rope_kernel<<<blocks_for(warps * 32), 256, 0, s>>>(h);
  return cudaGetLastError();
}

cudaError_t finish(float *x, const float *bias, int64_t rows, int64_t cols,
                   int *flag, void *x16, cudaStream_t s) {
  const int64_t n = rows * cols;
  finish_kernel<<<blocks_for(n), 256, 0, s>>>(
      x, bias, cols, n, flag, static_cast<__nv_bfloat16 *>(x16));
  return cudaGetLastError();
}

cudaError_t to_bf16(const float *src, void *dst, int64_t n, cudaStream_t s) {
  bf16_kernel<<<blocks_for(n), 256, 0, s>>>(
      src, static_cast<__nv_bfloat16 *>(dst), n);
  return cudaGetLastError();
}

cudaError_t nonfinite(const float *x, int64_t n, int skip_neg_inf, int *flag,
                      cudaStream_t s) {
  nonfinite_kernel<<<blocks_for(n), 256, 0, s>>>(x, n, skip_neg_inf, flag);
  return cudaGetLastError();
}

} // namespace attn_cu
