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

#include "attn/attn.h"
#include "flash_wmma.cuh"
#include "kernels.h"
#include "score.cuh"

namespace attn_cu {
namespace {

constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ float load(const float *p) { return *p; }
__device__ __forceinline__ float load(const __nv_bfloat16 *p) {
  return __bfloat162float(*p);
}

/* ---- version 2: bf16 on tensor cores (WMMA), flash_wmma.cuh ---------- */

/* The kernel's dynamic shared memory limit is raised once, to what the
 * widest heads take (Dh = Dv = 256: 188,672 bytes), not to each call's
 * own size: the attribute is the function's, for every thread, and a
 * worker setting a smaller one between another's set and launch (Dh 64's
 * 65,792 bytes under Dh 128's 106,752) would fail that launch. */
cudaError_t launch_flash_v2(const args &a, cudaStream_t s) {
  using namespace v2;
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
