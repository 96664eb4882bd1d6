/* core/cuda/kv.cu: the launchers of a kv cache's kernels (kernels.h:
 * kv_write, kv_read, item_absmax); the kernels are in kv.cuh. */
#include "kv.cuh"

namespace attn_cu {

using namespace kvk;

namespace {

/* Blocks for a grid-stride loop over n elements, at most `most`. */
unsigned blocks(int64_t n, int64_t most) {
  int64_t b = (n + 255) / 256;
  return (unsigned)(b < 1 ? 1 : b > most ? most : b);
}

} // namespace

cudaError_t kv_write(const kv_args &a, const float *knew, const float *vnew,
                     cudaStream_t s) {
  kv_write_k<<<blocks(a.B * a.Lq * a.Hkv * a.Dh, 65535), 256, 0, s>>>(a, knew);
  kv_write_v<<<blocks(a.B * a.Lq * a.Hkv * a.Dvp, 65535), 256, 0, s>>>(a, vnew);
  dim3 grid(blocks((a.Hkv * a.Dh + a.ldv) * ATTN_KV_PAGE, 64), (unsigned)a.B);
  kv_zero_tail<<<grid, 256, 0, s>>>(a);
  return cudaGetLastError();
}

cudaError_t kv_read(const kv_args &a, float *k, float *v, cudaStream_t s) {
  kv_read_kernel<<<blocks(a.B * a.Lk * a.Hkv * (a.Dh + a.Dv), 65535), 256, 0,
                   s>>>(a, k, v);
  return cudaGetLastError();
}

cudaError_t item_absmax(const float *x, int64_t B, int64_t rows, int64_t cols,
                        unsigned *absmax, cudaStream_t s) {
  dim3 grid(blocks(rows * cols, 64), (unsigned)B);
  item_absmax_kernel<<<grid, 256, 0, s>>>(x, rows, cols, absmax);
  return cudaGetLastError();
}

} // namespace attn_cu
