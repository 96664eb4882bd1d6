/* core/cuda/flash_mma.cu: flash attention version 3 (flash_mma.cuh has
 * the kernel and its design; kernels.h the contract): which shapes it
 * takes, and its launch. */
#include <cuda_runtime.h>

#include "flash_mma.cuh"
#include "kernels.h"

namespace attn_cu {
namespace {

/* Launches flash_v3_kernel<P>: a block of 8 warps per 128 query rows of
 * one (batch item, head). The first launch of each path raises the
 * kernel's dynamic shared memory limit (more than 48 KB for D of 64 and
 * 128 in bf16, and every fp32 width: up to 206,848 bytes, fp32 D = 128,
 * of the H200's 227 KB); a failure there is returned on every later
 * launch too. */
template <class P> cudaError_t launch(const args &a, cudaStream_t s) {
  constexpr size_t smem = v3::smem_layout<P>::kBytes;
  static_assert(smem <= 227 * 1024, "more shared memory than an SM has");
  static const cudaError_t set = cudaFuncSetAttribute(
      v3::flash_v3_kernel<P>, cudaFuncAttributeMaxDynamicSharedMemorySize,
      (int)smem);
  if (set != cudaSuccess)
    return set;
  dim3 grid((unsigned)((a.Lq + v3::kRows - 1) / v3::kRows), (unsigned)a.H,
            (unsigned)a.B);
  v3::flash_v3_kernel<P><<<grid, v3::kThreads, smem, s>>>(a);
  return cudaGetLastError();
}

template <template <int> class P>
cudaError_t launch_width(const args &a, cudaStream_t s) {
  switch (a.Dh) {
  case 32:
    return launch<P<32>>(a, s);
  case 64:
    return launch<P<64>>(a, s);
  case 128:
    return launch<P<128>>(a, s);
  }
  return cudaErrorInvalidValue;
}

} // namespace

bool flash_v3_fits(const args &a) {
  return a.Dh == a.Dv && (a.Dh == 32 || a.Dh == 64 || a.Dh == 128);
}

cudaError_t flash_v3(const args &a, cudaStream_t s) {
  return a.bf16 ? launch_width<v3::bf16_path>(a, s)
                : launch_width<v3::fp32_path>(a, s);
}

} // namespace attn_cu
