/* core/cuda/reduce.cuh: the reductions of the attention weights
 * (attn_reduce_t) on the GPU, after the flash kernel (kernels.h has the
 * contract).
 *
 * A block of kBlock threads takes one row of the reductions: query i of
 * batch item b, output head hh (a head, or 0 for the mean over heads).
 * It visits the keys the row can see ([lo, hi) of score.cuh's key_range;
 * only those of [k0, k1) without the statistics) in chunks of kBlock, a
 * key a thread, and recomputes each weight as the weights kernel does:
 * w = exp(s − lse) with s from score.cuh's `allowed` and `score`; for
 * the mean over heads, the heads' weights summed in float32 and times
 * 1/H, in the CPU core's order. Per chunk:
 *   statistics: each thread's sums (−w·ln w, w over the sink, w·|i + off
 *     − j|) in float64, reduced over the block at the end;
 *   top k: the row's k best so far, sorted, in the first kBlock slots of
 *     a shared list; the chunk's keys that beat the k-th best take the
 *     other kBlock slots, and a bitonic sort of the 2·kBlock slots (only
 *     for a chunk with such a key: in a long row, few) keeps the order
 *     (weight down, then key index up): a slot is one uint64, the
 *     weight's bits (w >= 0 orders as its bits) over the complement of
 *     the index, so that larger is better and 0 is an empty slot;
 *   pool: the chunk's weights in shared memory, each pooled key block it
 *     meets summed (or maxed) by one thread in key order in float64, and
 *     added (atomicAdd, float64; or atomicMax on the float's bits) into
 *     the pooled block's accumulator [B, H', nq, nk]; a last kernel
 *     divides a mean by its cells and writes float32.
 * The pooled sums of a block's rows land in any order (atomics): the
 * sums are float64, so that order changes no float32 result but in its
 * last bit, rarely. Everything else is the same from run to run.
 * Device code, launched by reduce.cu; a header so that
 * tests/reduce-emu/reduce_emu.cc runs the same source on the CPU. */
#ifndef ATTN_CUDA_REDUCE_CUH
#define ATTN_CUDA_REDUCE_CUH

#include <cuda_bf16.h>
#include <math.h>

#include "attn/attn.h"
#include "kernels.h"
#include "score.cuh"

namespace attn_cu {
namespace red {

constexpr int kBlock = 256; /* threads a block, keys a chunk */
static_assert(ATTN_TOP_K_MAX <= kBlock, "the top-k list is kBlock slots");

__device__ __forceinline__ float load_el(const float *p) { return *p; }
__device__ __forceinline__ float load_el(const __nv_bfloat16 *p) {
  return __bfloat162float(*p);
}

/* A top-k slot: the weight's bits over the key's index complemented. */
__device__ __forceinline__ unsigned long long slot(float w, int64_t j) {
  return (unsigned long long)__float_as_uint(w) << 32 |
         (unsigned long long)(0xffffffffu - (uint32_t)j);
}

/* Sorts the 2·kBlock slots of `list` descending, a pair a thread per
 * step (bitonic). Every thread of the block calls it. */
__device__ void sort_slots(unsigned long long *list) {
  const int t = threadIdx.x;
  for (int size = 2; size <= 2 * kBlock; size <<= 1)
    for (int stride = size / 2; stride > 0; stride >>= 1) {
      const int lo = 2 * stride * (t / stride) + t % stride, hi = lo + stride;
      const bool down = (lo & size) == 0; /* the last merge: all down */
      const unsigned long long x = list[lo], y = list[hi];
      if (down ? x < y : x > y)
        list[lo] = y, list[hi] = x;
      __syncthreads();
    }
}

/* The block's sum of x, in a fixed order; every thread gets it. part has
 * kBlock / 32 doubles. */
__device__ double block_sum(double x, double *part) {
  for (int o = 16; o > 0; o >>= 1)
    x += __shfl_xor_sync(0xffffffffu, x, o);
  __syncthreads(); /* part's last use is over */
  if (threadIdx.x % 32 == 0)
    part[threadIdx.x / 32] = x;
  __syncthreads();
  double sum = 0;
  for (int w = 0; w < kBlock / 32; w++)
    sum += part[w];
  return sum;
}

template <typename T>
__global__ void __launch_bounds__(kBlock)
    reduce_kernel(args a, reduce_args r) {
  __shared__ float qrow[ATTN_CUDA_MAX_HEAD_DIM];
  __shared__ unsigned long long list[2 * kBlock];
  __shared__ float wbuf[kBlock];
  __shared__ double part[kBlock / 32];
  const int t = threadIdx.x;
  const int64_t hh = blockIdx.y, b = blockIdx.z, nrow = r.q1 - r.q0;
  const int64_t off = item_off(a, b);
  const T *q = static_cast<const T *>(a.q);
  const T *k = static_cast<const T *>(a.k);
  const bool stats = r.entropy || r.sink || r.distance;

  for (int64_t i = r.q0 + blockIdx.x; i < r.q1; i += gridDim.x) {
    const int64_t row = (b * r.rH + hh) * nrow + i - r.q0;
    int64_t lo, hi;
    key_range(a, b, i, i + 1, &lo, &hi);
    /* the keys to visit: all the row sees, or those of [k0, k1) */
    const int64_t start = stats ? lo : max(lo, r.k0);
    const int64_t end = stats ? hi : min(hi, r.k1);
    /* the heads whose weights make this row's, and their q rows */
    const int64_t h0 = r.mean_heads ? 0 : hh, h1 = r.mean_heads ? a.H : hh + 1;
    __syncthreads(); /* the last row's shared state is consumed */
    if (!r.mean_heads)
      for (int64_t d = t; d < a.Dh; d += kBlock)
        qrow[d] = load_el(q + ((b * a.Lq + i) * a.H + hh) * a.Dh + d);
    for (int e = t; e < 2 * kBlock; e += kBlock)
      list[e] = 0;
    __syncthreads();
    unsigned long long kth = 0; /* the k-th best slot so far */
    double ent = 0, sink = 0, dist = 0;

    for (int64_t c0 = start; c0 < end; c0 += kBlock) {
      const int64_t j = c0 + t;
      const bool key = j < end;
      float w = 0.f;
      for (int64_t h = h0; h < h1; h++) {
        if (r.mean_heads) { /* this head's q row */
          __syncthreads();
          for (int64_t d = t; d < a.Dh; d += kBlock)
            qrow[d] = load_el(q + ((b * a.Lq + i) * a.H + h) * a.Dh + d);
          __syncthreads();
        }
        const float lse = a.lse[(b * a.H + h) * a.Lq + i];
        if (key && lse != -INFINITY && allowed(a, b, h, i, j)) {
          const T *kr = k + ((b * a.Lk + j) * a.Hkv + h / (a.H / a.Hkv)) * a.Dh;
          float dot = 0.f;
          for (int64_t d = 0; d < a.Dh; d++)
            dot += qrow[d] * load_el(kr + d);
          w += expf(score(a, b, h, i, j, dot) - lse);
        }
      }
      if (r.mean_heads)
        w *= 1.0f / (float)a.H;

      if (stats && w > 0.f) {
        ent -= (double)w * (double)logf(w);
        if (j < r.sink_tokens)
          sink += w;
        const int64_t dj = i + off - j;
        dist += (double)w * (double)(dj < 0 ? -dj : dj);
      }
      const bool in = key && j >= r.k0 && j < r.k1;

      if (r.K) { /* the chunk's keys that beat the k-th best */
        const unsigned long long me = in && w > 0.f ? slot(w, j) : 0;
        const bool cand = me > kth;
        list[kBlock + t] = cand ? me : 0;
        if (__syncthreads_or(cand)) {
          sort_slots(list);
          kth = list[r.K - 1];
        }
      }

      if (r.pool_acc) {
        /* the chunk's keys in [k0, k1): [ca, ce), pooled key blocks
         * kb0 .. kb0 + nkb − 1, at most kBlock of them */
        const int64_t ca = max(c0, r.k0), ce = min(min(c0 + kBlock, end), r.k1);
        __syncthreads(); /* wbuf's last use is over */
        wbuf[t] = in ? w : 0.f;
        __syncthreads();
        if (ca < ce) {
          const int64_t kb0 = (ca - r.k0) / r.pool_k;
          const int64_t nkb = (ce - 1 - r.k0) / r.pool_k - kb0 + 1;
          if (t < nkb) {
            const int64_t kb = kb0 + t;
            const int64_t ja = max(r.k0 + kb * r.pool_k, ca);
            const int64_t je = min(r.k0 + (kb + 1) * r.pool_k, ce);
            const int64_t cell =
                ((b * r.rH + hh) * r.nq + (i - r.q0) / r.pool_q) * r.nk + kb;
            if (r.pool_reduce == ATTN_POOL_MAX) {
              float mx = 0.f;
              for (int64_t x = ja; x < je; x++)
                mx = fmaxf(mx, wbuf[x - c0]);
              if (mx > 0.f)
                atomicMax((unsigned *)r.pool_acc + cell, __float_as_uint(mx));
            } else {
              double sum = 0;
              for (int64_t x = ja; x < je; x++)
                sum += wbuf[x - c0];
              if (sum > 0)
                atomicAdd(r.pool_acc + cell, sum);
            }
          }
        }
      }
    }

    if (r.K && t < r.K) { /* best first; an empty slot is −1, 0 */
      const unsigned long long e = list[t];
      const float v = __uint_as_float((unsigned)(e >> 32));
      r.top_k_index[row * r.K + t] =
          v > 0.f ? (int32_t)(0xffffffffu - (uint32_t)e) : -1;
      r.top_k_value[row * r.K + t] = v > 0.f ? v : 0.f;
    }
    if (stats) {
      ent = block_sum(ent, part);
      sink = block_sum(sink, part);
      dist = block_sum(dist, part);
      if (t == 0) {
        if (r.entropy)
          r.entropy[row] = (float)ent;
        if (r.sink)
          r.sink[row] = (float)sink;
        if (r.distance)
          r.distance[row] = (float)dist;
      }
    }
  }
}

/* The pooled map from its accumulators: a mean divided by its cells. */
__global__ void pool_kernel(reduce_args r, int64_t n) {
  for (int64_t x = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; x < n;
       x += (int64_t)gridDim.x * blockDim.x) {
    double v = r.pool_reduce == ATTN_POOL_MAX
                   ? (double)__uint_as_float(((const unsigned *)r.pool_acc)[x])
                   : r.pool_acc[x];
    if (r.pool_reduce == ATTN_POOL_MEAN) {
      const int64_t qp = x / r.nk % r.nq, kp = x % r.nk;
      const int64_t rows = min(r.pool_q, r.q1 - r.q0 - qp * r.pool_q);
      const int64_t cols = min(r.pool_k, r.k1 - r.k0 - kp * r.pool_k);
      v /= (double)rows * (double)cols;
    }
    r.pooled[x] = (float)v;
  }
}

} // namespace red
} // namespace attn_cu

#endif
