/* core/cuda/kv.cuh: a kv cache's pages in device memory (attn.h,
 * attn_kv_t; kernels.h: kv_write, kv_read, item_absmax). The pages hold
 * what the CPU core's pages hold, cell for cell: K transposed, each kv
 * head's rows of Dh features with a column a token ([Hkv·Dh, ATTN_KV_LDK]),
 * then from float voff V, a row a token ([ATTN_KV_PAGE, ldv], head g's Dv
 * values at column g·Dvp and zeros to Dvp). Each kernel is a grid-stride
 * loop, a thread an element; item_absmax reduces a warp with shuffles.
 * Device code, launched by kv.cu; a header so that tests/kv-emu/kv_emu.cc
 * runs the same source on the CPU, against the CPU core's pages. */
#ifndef ATTN_CUDA_KV_CUH
#define ATTN_CUDA_KV_CUH

#include <math.h>

#include "attn/attn.h"
#include "kernels.h"

namespace attn_cu {
namespace kvk {
namespace { /* each file that includes this has its own copy */

/* kv_write's three parts, one thread an element (kernels.h). Keys: e
 * over [B, Lq, Hkv·Dh], the slot varying slowest within a row. */
__global__ void kv_write_k(kv_args a, const float *knew) {
  const int64_t nk = a.Hkv * a.Dh, n = a.B * a.Lq * nk;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t c = e % nk, r = e / nk, b = r / a.Lq;
    const int64_t t = a.past[b] + r % a.Lq;
    float *page = a.pages[b * a.maxp + t / ATTN_KV_PAGE];
    page[c * ATTN_KV_LDK + t % ATTN_KV_PAGE] = knew[e];
  }
}

/* Values: e over [B, Lq, Hkv·Dvp], the head padding written as zeros. */
__global__ void kv_write_v(kv_args a, const float *vnew) {
  const int64_t nc = a.Hkv * a.Dvp, n = a.B * a.Lq * nc;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
       e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t col = e % nc, r = e / nc, b = r / a.Lq;
    const int64_t g = col / a.Dvp, d = col % a.Dvp;
    const int64_t t = a.past[b] + r % a.Lq;
    float *page = a.pages[b * a.maxp + t / ATTN_KV_PAGE];
    page[a.voff + t % ATTN_KV_PAGE * a.ldv + col] =
        d < a.Dv ? vnew[r * a.Hkv * a.Dv + g * a.Dv + d] : 0.f;
  }
}

/* The rest of item blockIdx.y's last page, where this call wrote its first
 * slot: keys' columns and values' rows from the slot after its last key
 * to the page's end (as the CPU core's zero_tail). */
__global__ void kv_zero_tail(kv_args a) {
  const int64_t b = blockIdx.y, past = a.past[b], end = past + a.Lq;
  if (end % ATTN_KV_PAGE == 0 || (end - 1) / ATTN_KV_PAGE * ATTN_KV_PAGE < past)
    return;
  const int64_t s0 = end % ATTN_KV_PAGE, nk = a.Hkv * a.Dh;
  float *page = a.pages[b * a.maxp + end / ATTN_KV_PAGE];
  const int64_t n = (nk + a.ldv) * ATTN_KV_PAGE;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
       e += (int64_t)gridDim.x * blockDim.x) {
    if (e < nk * ATTN_KV_PAGE) {
      const int64_t c = e / ATTN_KV_PAGE, t = e % ATTN_KV_PAGE;
      if (t >= s0)
        page[c * ATTN_KV_LDK + t] = 0.f;
    } else {
      const int64_t x = e - nk * ATTN_KV_PAGE, t = x / a.ldv;
      if (t >= s0)
        page[a.voff + x] = 0.f;
    }
  }
}

/* kv_read: e over [B, Lk, Hkv·Dh] (keys) then [B, Lk, Hkv·Dv] (values). */
__global__ void kv_read_kernel(kv_args a, float *k, float *v) {
  const int64_t nk = a.Hkv * a.Dh, nv = a.Hkv * a.Dv;
  const int64_t n_k = a.B * a.Lk * nk, n = n_k + a.B * a.Lk * nv;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
       e += (int64_t)gridDim.x * blockDim.x) {
    const bool is_k = e < n_k;
    const int64_t x = is_k ? e : e - n_k, w = is_k ? nk : nv;
    const int64_t c = x % w, r = x / w, b = r / a.Lk, t = r % a.Lk;
    float y = 0.f;
    if (t < a.past[b] + a.Lq) {
      const float *page = a.pages[b * a.maxp + t / ATTN_KV_PAGE];
      y = is_k ? page[c * ATTN_KV_LDK + t % ATTN_KV_PAGE]
               : page[a.voff + t % ATTN_KV_PAGE * a.ldv +
                      c / a.Dv * a.Dvp + c % a.Dv];
    }
    (is_k ? k : v)[x] = y;
  }
}

__global__ void item_absmax_kernel(const float *x, int64_t rows, int64_t cols,
                                   unsigned *absmax) {
  const int64_t b = blockIdx.y, n = rows * cols;
  const float *xb = x + b * n;
  float m = 0.f;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
       e += (int64_t)gridDim.x * blockDim.x)
    m = fmaxf(m, fabsf(xb[e]));
  for (int o = 16; o > 0; o >>= 1)
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if (threadIdx.x % 32 == 0)
    atomicMax(absmax + b, __float_as_uint(m));
}

} // namespace
} // namespace kvk
} // namespace attn_cu

#endif
