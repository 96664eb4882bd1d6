/* core/cuda/flash_cores.cu: the launcher of flash versions 1 and 4
 * (kernels.h: flash_cores); the kernels are in flash_cores.cuh. */
#include "flash_cores.cuh"

namespace attn_cu {

using namespace cores;

namespace {

/* Raises flash_kernel<T>'s dynamic shared memory limit once, to what the
 * widest heads take (Dh = Dv = 256: 73,856 bytes), not to each call's own
 * size: the attribute is the function's, for every thread, and a worker
 * setting a smaller one between another's set and launch would fail that
 * launch. Returns the setting's error, the same on every call. */
template <typename T> cudaError_t allow_smem() {
  static const cudaError_t set = cudaFuncSetAttribute(
      flash_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
      (int)smem_bytes(ATTN_CUDA_MAX_HEAD_DIM, ATTN_CUDA_MAX_HEAD_DIM));
  return set;
}

} // namespace

cudaError_t flash_cores(const args &a, int64_t ranges, cudaStream_t s) {
  const size_t smem = smem_bytes(a.Dh, a.Dv);
  auto kernel = a.bf16 ? flash_kernel<__nv_bfloat16> : flash_kernel<float>;
  cudaError_t e = a.bf16 ? allow_smem<__nv_bfloat16>() : allow_smem<float>();
  if (e != cudaSuccess)
    return e;
  if (ranges > 1 && a.part == nullptr) /* not laid out: one range */
    ranges = 1;
  dim3 grid((unsigned)(a.Hkv * row_blocks(a)), (unsigned)ranges,
            (unsigned)a.B);
  kernel<<<grid, kWarps * 32, smem, s>>>(a);
  e = cudaGetLastError();
  if (e != cudaSuccess || ranges == 1)
    return e;
  args c = a;
  c.splits = ranges;
  const int64_t n = a.B * a.H * a.Lq, blocks = (n + kWarps - 1) / kWarps;
  combine_kernel<<<(unsigned)(blocks < 65535 ? blocks : 65535), kWarps * 32, 0,
                   s>>>(c);
  return cudaGetLastError();
}

} // namespace attn_cu
