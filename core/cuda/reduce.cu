/* core/cuda/reduce.cu: the reductions' launcher (kernels.h: reduce); the
 * kernels and their algorithm are in reduce.cuh. */
#include "reduce.cuh"

namespace attn_cu {

using red::kBlock;
using red::pool_kernel;
using red::reduce_kernel;

cudaError_t reduce(const args &a, const reduce_args &r, cudaStream_t s) {
  const int64_t n_pool = r.pool_acc ? a.B * r.rH * r.nq * r.nk : 0;
  if (n_pool) {
    cudaError_t e = cudaMemsetAsync(r.pool_acc, 0, (size_t)n_pool * 8, s);
    if (e != cudaSuccess)
      return e;
  }
  const int64_t rows = r.q1 - r.q0;
  dim3 grid((unsigned)(rows < INT32_MAX ? rows : INT32_MAX), (unsigned)r.rH,
            (unsigned)a.B);
  if (a.bf16)
    reduce_kernel<__nv_bfloat16><<<grid, kBlock, 0, s>>>(a, r);
  else
    reduce_kernel<float><<<grid, kBlock, 0, s>>>(a, r);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess || !n_pool)
    return e;
  const int64_t blocks = (n_pool + 255) / 256;
  pool_kernel<<<(unsigned)(blocks > 65535 ? 65535 : blocks), 256, 0, s>>>(
      r, n_pool);
  return cudaGetLastError();
}

} // namespace attn_cu
