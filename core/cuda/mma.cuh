/* core/cuda/mma.cuh: the warp-level tile operations flash version 3
 * (flash_mma.cuh) is written in, each one PTX instruction (PTX ISA 8.x;
 * sm_80 and later): cp.async copies into shared memory, ldmatrix loads of
 * 8×8 bf16 matrices, the m16n8k16 bf16 MMA with float accumulators, the
 * m16n8k8 tf32 MMA and cvt to tf32 (the fp32 path), ex2.
 *
 * Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16"), for lane l,
 * g = l / 4 (its group) and t = l % 4 (its place in the group); a
 * register of A or B holds two bf16, the lower index in the low half:
 *   A [16, 16] row-major: a[0] = A[g][2t, 2t+1], a[1] = A[g+8][2t, 2t+1],
 *     a[2] = A[g][2t+8, 2t+9], a[3] = A[g+8][2t+8, 2t+9];
 *   B [16, 8] (k × n): b[0] = B[2t, 2t+1][g], b[1] = B[2t+8, 2t+9][g];
 *   C, D [16, 8] float: c[0], c[1] = C[g][2t, 2t+1], c[2], c[3] =
 *     C[g+8][2t, 2t+1].
 * And for m16n8k8 tf32 ("Matrix Fragments for mma.m16n8k8", .tf32), one
 * element a register:
 *   A [16, 8] row-major: a[0] = A[g][t], a[1] = A[g+8][t], a[2] =
 *     A[g][t+4], a[3] = A[g+8][t+4];
 *   B [8, 8] (k × n): b[0] = B[t][g], b[1] = B[t+4][g];
 *   C, D as m16n8k16's.
 * ldmatrix .x4: lane 8m + r gives the address of row r of matrix m (16
 * bytes, 16-byte aligned); register m of lane l receives matrix m's row
 * l / 4, elements 2(l % 4) and 2(l % 4) + 1, or with .trans its column
 * l / 4, rows 2(l % 4) and 2(l % 4) + 1. Every lane of the warp must
 * execute each of these together (.sync.aligned). Device code;
 * header-only. */
#ifndef ATTN_CUDA_MMA_CUH
#define ATTN_CUDA_MMA_CUH

#include <cuda_bf16.h>
#include <stdint.h>

namespace attn_cu {

__device__ __forceinline__ uint32_t smem_addr(const void *p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16 bytes from global src to shared dst, asynchronously; where !full,
 * the 16 bytes are zeros and src is not read (src-size 0). */
__device__ __forceinline__ void cp_async16(void *dst, const void *src,
                                           bool full) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(
                   smem_addr(dst)),
               "l"(src), "r"(full ? 16 : 0));
}

/* Closes this thread's group of cp.async copies issued since the last. */
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}

/* Waits until at most N of this thread's groups are still in flight. */
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/* Four 8×8 bf16 matrices from shared memory, as above. */
__device__ __forceinline__ void ldsm_x4(uint32_t r[4], const void *row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, "
               "[%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(row)));
}

/* The same, each matrix transposed. */
__device__ __forceinline__ void ldsm_x4_trans(uint32_t r[4], const void *row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, "
               "%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(row)));
}

/* d += A·B: A [16, 16] and B [16, 8] bf16, d [16, 8] float (fragments as
 * above). */
__device__ __forceinline__ void mma_bf16(float d[4], const uint32_t a[4],
                                         uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* d += A·B: A [16, 8] and B [8, 8] tf32, d [16, 8] float (fragments as
 * above). The operands are floats whose low 13 bits the tensor cores
 * ignore: pass values tf32_round gave. */
__device__ __forceinline__ void mma_tf32(float d[4], const float a[4],
                                         float b0, float b1) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(__float_as_uint(a[0])), "r"(__float_as_uint(a[1])),
        "r"(__float_as_uint(a[2])), "r"(__float_as_uint(a[3])),
        "r"(__float_as_uint(b0)), "r"(__float_as_uint(b1)));
}

/* x rounded to tf32 (10 mantissa bits; to nearest, ties away from zero),
 * kept as a float with its low 13 bits zero. */
__device__ __forceinline__ float tf32_round(float x) {
  uint32_t u;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(u) : "f"(x));
  return __uint_as_float(u);
}

/* Two floats as bf16 (rounded to nearest even), x in the low half. */
__device__ __forceinline__ uint32_t pack_bf16(float x, float y) {
  __nv_bfloat162 v = __floats2bfloat162_rn(x, y);
  return *reinterpret_cast<uint32_t *>(&v);
}

/* 2^x (MUFU.EX2; ex2(-inf) = 0), flushing subnormal results to 0. */
__device__ __forceinline__ float exp2_fast(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

} // namespace attn_cu

#endif
