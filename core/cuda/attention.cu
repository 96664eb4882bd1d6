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
#include "kernels.h"

namespace attn_cu {
namespace {

constexpr unsigned kFull = 0xffffffffu;
constexpr int kWarps = 8;  /* query rows per block, one per warp */
constexpr int kTile = 32;  /* keys per tile, one per lane */
constexpr int kDreg = ATTN_CUDA_MAX_HEAD_DIM / 32; /* accumulators a lane */

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

/* Whether query i of item b may attend key j: key lengths, causal (both
 * alignments), window. off = Lk − Lq. */
__device__ __forceinline__ bool allowed(const args &a, int64_t b, int64_t i,
                                        int64_t j) {
  const int64_t off = a.Lk - a.Lq;
  if (a.key_lengths && j >= a.key_lengths[b])
    return false;
  if (a.causal == ATTN_CAUSAL_BOTTOM_RIGHT && j > i + off)
    return false;
  if (a.causal == ATTN_CAUSAL_TOP_LEFT && j > i)
    return false;
  if (a.wl >= 0 && j < i + off - a.wl)
    return false;
  if (a.wr >= 0 && j > i + off + a.wr)
    return false;
  return true;
}

/* The score of q·k = dot, in attn.h's order: scale, softcap, ALiBi. */
__device__ __forceinline__ float score(const args &a, int64_t h, int64_t i,
                                       int64_t j, float dot) {
  float s = a.scale * dot;
  if (a.has_softcap)
    s = a.softcap * tanhf(s / a.softcap);
  if (a.slopes) {
    int64_t d = i + (a.Lk - a.Lq) - j;
    s -= a.slopes[h] * (float)(d < 0 ? -d : d);
  }
  return s;
}

/* The keys [lo, hi) that rows [i0, i1) of item b can see at all: every
 * key outside is masked for each of those rows. */
__device__ __forceinline__ void key_range(const args &a, int64_t b,
                                          int64_t i0, int64_t i1,
                                          int64_t *lo, int64_t *hi) {
  const int64_t off = a.Lk - a.Lq;
  int64_t l = 0, r = a.Lk;
  if (a.key_lengths)
    r = min(r, a.key_lengths[b]);
  if (a.causal == ATTN_CAUSAL_BOTTOM_RIGHT)
    r = min(r, i1 + off);
  if (a.causal == ATTN_CAUSAL_TOP_LEFT)
    r = min(r, i1);
  if (a.wr >= 0)
    r = min(r, i1 + off + a.wr);
  if (a.wl >= 0)
    l = max(l, i0 + off - a.wl);
  *lo = l;
  *hi = r;
}

/* ---- version 1: one warp per query row, CUDA cores --------------------- */

/* Shared memory, in floats: the key tile [kTile, Dh + 1] (a row padded by
 * one so that lane j reading row j hits distinct banks), the value tile
 * [kTile, Dv], and each warp's query row [kWarps, Dh]. */
size_t flash_v1_smem(int64_t Dh, int64_t Dv) {
  return sizeof(float) *
         (size_t)(kTile * (Dh + 1) + kTile * Dv + kWarps * Dh);
}

template <typename T>
__global__ void __launch_bounds__(kWarps * 32) flash_v1_kernel(args a) {
  extern __shared__ float smem[];
  const int64_t Dh = a.Dh, Dv = a.Dv, ldk = Dh + 1;
  float *ks = smem;
  float *vs = ks + kTile * ldk;
  float *qs = vs + kTile * Dv + (threadIdx.x / 32) * Dh;
  const int lane = threadIdx.x % 32;
  const int64_t b = blockIdx.z, h = blockIdx.y;
  const int64_t g = h / (a.H / a.Hkv);
  const int64_t i0 = (int64_t)blockIdx.x * kWarps;
  const int64_t i1 = min(i0 + kWarps, a.Lq);
  const int64_t i = i0 + threadIdx.x / 32;
  const bool row = i < a.Lq;
  const T *q = static_cast<const T *>(a.q);
  const T *k = static_cast<const T *>(a.k);
  const T *v = static_cast<const T *>(a.v);

  if (row)
    for (int64_t d = lane; d < Dh; d += 32)
      qs[d] = load(q + ((b * a.Lq + i) * a.H + h) * Dh + d);

  int64_t lo, hi;
  key_range(a, b, i0, i1, &lo, &hi);
  float m = -INFINITY, l = 0.f, o[kDreg];
#pragma unroll
  for (int t = 0; t < kDreg; t++)
    o[t] = 0.f;

  for (int64_t t0 = lo; t0 < hi; t0 += kTile) {
    __syncthreads(); /* the last tile is consumed; qs is written */
    /* pass 1: stage the tile's keys and values (zeros past hi) */
    for (int64_t e = threadIdx.x; e < kTile * Dh; e += blockDim.x) {
      int64_t jj = e / Dh, d = e % Dh, j = t0 + jj;
      ks[jj * ldk + d] =
          j < hi ? load(k + ((b * a.Lk + j) * a.Hkv + g) * Dh + d) : 0.f;
    }
    for (int64_t e = threadIdx.x; e < kTile * Dv; e += blockDim.x) {
      int64_t jj = e / Dv, d = e % Dv, j = t0 + jj;
      vs[jj * Dv + d] =
          j < hi ? load(v + ((b * a.Lk + j) * a.Hkv + g) * Dv + d) : 0.f;
    }
    __syncthreads();
    if (!row)
      continue;
    /* pass 2: lane j scores key t0 + j */
    const int64_t j = t0 + lane;
    float s = -INFINITY;
    if (j < hi && allowed(a, b, i, j)) {
      const float *kr = ks + lane * ldk;
      float dot = 0.f;
#pragma unroll 4
      for (int64_t d = 0; d < Dh; d++)
        dot += qs[d] * kr[d];
      s = score(a, h, i, j, dot);
    }
    /* pass 3: the online softmax's update of m and l */
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
  const float inv = l > 0.f ? 1.f / l : 0.f;
  float *out = a.concat + ((b * a.Lq + i) * a.H + h) * Dv;
#pragma unroll
  for (int t = 0; t < kDreg; t++)
    if (lane + 32 * t < Dv)
      out[lane + 32 * t] = o[t] * inv;
  if (a.lse && lane == 0)
    a.lse[(b * a.H + h) * a.Lq + i] = l > 0.f ? m + logf(l) : -INFINITY;
}

template <typename T> cudaError_t launch_flash_v1(const args &a,
                                                  cudaStream_t s) {
  const size_t smem = flash_v1_smem(a.Dh, a.Dv);
  cudaError_t e = cudaFuncSetAttribute(
      flash_v1_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
      (int)smem);
  if (e != cudaSuccess)
    return e;
  dim3 grid((unsigned)((a.Lq + kWarps - 1) / kWarps), (unsigned)a.H,
            (unsigned)a.B);
  flash_v1_kernel<T><<<grid, kWarps * 32, smem, s>>>(a);
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
    if (lse != -INFINITY && allowed(a, b, i, j)) {
      const T *kr = k + ((b * a.Lk + j) * a.Hkv + g) * a.Dh;
      float dot = 0.f;
      for (int64_t d = 0; d < a.Dh; d++)
        dot += qrow[d] * load(kr + d);
      x = expf(score(a, h, i, j, dot) - lse);
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

__global__ void bias_kernel(float *x, const float *bias, int64_t cols,
                            int64_t n) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
       e += (int64_t)gridDim.x * blockDim.x)
    x[e] += bias[e % cols];
}

__global__ void bf16_kernel(const float *src, __nv_bfloat16 *dst, int64_t n) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
       e += (int64_t)gridDim.x * blockDim.x)
    dst[e] = __float2bfloat16_rn(src[e]);
}

__global__ void nonfinite_kernel(const float *x, int64_t n, int *flag) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
       e += (int64_t)gridDim.x * blockDim.x)
    if (!isfinite(x[e]))
      *flag = 1;
}

/* Blocks for a grid-stride loop over n elements. */
unsigned blocks_for(int64_t n) {
  int64_t blocks = (n + 255) / 256;
  return (unsigned)(blocks < 1 ? 1 : blocks > 65535 ? 65535 : blocks);
}

} // namespace

cudaError_t flash_v1(const args &a, cudaStream_t s) {
  return a.bf16 ? launch_flash_v1<__nv_bfloat16>(a, s)
                : launch_flash_v1<float>(a, s);
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

cudaError_t add_bias(float *x, const float *bias, int64_t rows, int64_t cols,
                     cudaStream_t s) {
  const int64_t n = rows * cols;
  bias_kernel<<<blocks_for(n), 256, 0, s>>>(x, bias, cols, n);
  return cudaGetLastError();
}

cudaError_t to_bf16(const float *src, void *dst, int64_t n, cudaStream_t s) {
  bf16_kernel<<<blocks_for(n), 256, 0, s>>>(
      src, static_cast<__nv_bfloat16 *>(dst), n);
  return cudaGetLastError();
}

cudaError_t nonfinite(const float *x, int64_t n, int *flag, cudaStream_t s) {
  nonfinite_kernel<<<blocks_for(n), 256, 0, s>>>(x, n, flag);
  return cudaGetLastError();
}

} // namespace attn_cu
