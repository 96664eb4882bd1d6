/* core/cuda/flash_mma.cu: flash attention version 3 (flash_mma.cuh has
 * the kernel and its design; kernels.h the contract): which shapes it
 * takes, and its launch. */
#include <cuda_runtime.h>

#include "flash_mma.cuh"
#include "kernels.h"

namespace attn_cu {
namespace {

/* Launches flash_v3_kernel<D>: a block of 8 warps per 128 query rows of
 * one (batch item, head). The first launch of each D raises the
 * kernel's dynamic shared memory limit (more than 48 KB for D of 64 and
 * 128); a failure there is returned on every later launch too. */
template <int D> cudaError_t launch(const args &a, cudaStream_t s) {
  constexpr size_t smem = v3::smem_layout<D>::kBytes;
  static const cudaError_t set = cudaFuncSetAttribute(
      v3::flash_v3_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
      (int)smem);
  if (set != cudaSuccess)
    return set;
  dim3 grid((unsigned)((a.Lq + v3::kRows - 1) / v3::kRows), (unsigned)a.H,
            (unsigned)a.B);
  v3::flash_v3_kernel<D><<<grid, v3::kThreads, smem, s>>>(a);
  return cudaGetLastError();
}

} // namespace

bool flash_v3_fits(const args &a) {
  return a.bf16 && a.Dh == a.Dv &&
         (a.Dh == 32 || a.Dh == 64 || a.Dh == 128);
}

cudaError_t flash_v3(const args &a, cudaStream_t s) {
  switch (a.Dh) {
  case 32:
    return launch<32>(a, s);
  case 64:
    return launch<64>(a, s);
  case 128:
    return launch<128>(a, s);
  }
  return cudaErrorInvalidValue;
}

} // namespace attn_cu
