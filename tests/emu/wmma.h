/* tests/emu/wmma.h: stand-ins for CUDA's nvcuda::wmma (mma.h), as far as
 * flash version 2 (core/cuda/flash_wmma.cuh) uses it, for the CPU
 * emulators on tests/emu/emu.h: fragments of 16×16×16, matrix_a and
 * matrix_b of __nv_bfloat16 (row_major or col_major), float
 * accumulators; fill_fragment, load_matrix_sync, mma_sync and
 * store_matrix_sync.
 *
 * What they follow is the CUDA Programming Guide's contract, not what the
 * kernel happens to do:
 * - load, store and mma are warp collectives: they meet at emu.h's
 *   warp_sync, so a lane that skips one is a deadlock that emu reports,
 *   and every lane must pass the same pointer, ldm and layout.
 * - The pointer must be 256-bit aligned and ldm, the stride in elements
 *   between rows (row major) or columns (col major), a multiple of 16
 *   bytes (the Programming Guide), and each row's (or column's) start
 *   aligned to the size of the lane's fragment in bytes (PTX ISA,
 *   "Matrix Storage for WMMA", Address Alignment): a float
 *   accumulator's 8 floats, 32 bytes, so ldm a multiple of 8 floats; a
 *   bf16 A or B fragment's 4 registers, 16 bytes. Element (r, c) is
 *   p[r·ldm + c] in row major and p[c·ldm + r] in col major.
 * - Which lane holds which element of a fragment is unspecified: here
 *   each kind of fragment has its own permutation of the 256 elements
 *   over the 32 lanes' 8 slots, drawn from a seed (wmma_layouts), so
 *   that a kernel that reads or writes a fragment's x[] by an assumed
 *   layout computes garbage rather than the right answer.
 * - Where wmma_region has been set, every element a load or store
 *   touches must lie inside it (an emulator sets it to the launch's
 *   shared memory).
 * - mma_sync gathers A, B and C from all 32 lanes, and each lane's D
 *   elements are C + Σ_k A·B in float, the bf16 operands exact in float.
 * A violation prints what and where, and aborts. */
#ifndef ATTN_TESTS_EMU_WMMA_H
#define ATTN_TESTS_EMU_WMMA_H

/* CUDA's own mma.h is nvcc's alone: these stand in for it */
#define __CUDA_MMA_H__

#include <cuda_bf16.h>

#include <random>

#include "emu.h"

namespace emu {

struct wmma_post {
  const void *p;
  unsigned ldm;
  int layout;
  float v[3][8]; /* an mma's A, B and C slots */
};
inline wmma_post wmma_posts[32][32]; /* [warp][lane] */
/* [kind: A, B, accumulator][element r·16 + c] -> lane·8 + slot, and back */
inline int wmma_perm[3][256], wmma_elem[3][256];
inline const unsigned char *wmma_lo, *wmma_hi;

/* Draws each kind's element-to-lane layout from seed. */
inline void wmma_layouts(uint64_t seed) {
  std::mt19937_64 g(seed);
  for (int u = 0; u < 3; u++) {
    for (int e = 0; e < 256; e++)
      wmma_perm[u][e] = e;
    std::shuffle(wmma_perm[u], wmma_perm[u] + 256, g);
    for (int e = 0; e < 256; e++)
      wmma_elem[u][wmma_perm[u][e]] = e;
  }
}

/* Loads and stores must stay in [p, p + n) bytes; nullptr: anywhere. */
inline void wmma_region(const void *p, size_t n) {
  wmma_lo = (const unsigned char *)p;
  wmma_hi = wmma_lo + n;
}

[[noreturn]] inline void wmma_fail(const char *what) {
  fprintf(stderr, "emu: wmma: %s (thread %u block %u,%u,%u)\n", what,
          threadIdx.x, blockIdx.x, blockIdx.y, blockIdx.z);
  abort();
}

inline wmma_post &wmma_mine() {
  return wmma_posts[threadIdx.x / 32][threadIdx.x % 32];
}

/* A load's or store's meeting: every lane posts p, ldm and layout, and
 * each checks that all agree and that they keep the rules. */
inline void wmma_meet(const void *p, unsigned ldm, int layout, size_t el) {
  wmma_post &me = wmma_mine();
  me.p = p, me.ldm = ldm, me.layout = layout;
  warp_sync();
  const wmma_post *w = wmma_posts[threadIdx.x / 32];
  for (int l = 0; l < 32; l++)
    if (w[l].p != p || w[l].ldm != ldm || w[l].layout != layout)
      wmma_fail("the lanes disagree on the pointer, ldm or layout");
  if ((uintptr_t)p % 32 != 0)
    wmma_fail("the pointer is not 256-bit aligned");
  const size_t row_align = el == sizeof(float) ? 32 : 16; /* see the top */
  if (ldm * el % row_align != 0)
    wmma_fail(el == sizeof(float)
                  ? "ldm is not a multiple of 32 bytes (8 floats)"
                  : "ldm is not a multiple of 16 bytes");
  if (ldm < 16)
    wmma_fail("ldm is shorter than a row");
  const unsigned char *first = (const unsigned char *)p,
                      *end = first + (15 * (size_t)ldm + 16) * el;
  if (wmma_lo && (first < wmma_lo || end > wmma_hi))
    wmma_fail("a load or store outside the region");
}

} // namespace emu

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "16x16x16 only");
  static constexpr int num_elements = 8;
  T x[8];
};

namespace detail {
template <class Use> constexpr int kind() {
  return std::is_same_v<Use, matrix_a>   ? 0
         : std::is_same_v<Use, matrix_b> ? 1
                                         : 2;
}
inline float to_float(float x) {
  return x;
}
inline float to_float(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
template <class T> T of_float(float x) {
  if constexpr (std::is_same_v<T, float>)
    return x;
  else
    return __float2bfloat16_rn(x);
}
/* the element of the 16×16 matrix at p in this layout */
template <class T> T *at(T *p, unsigned ldm, bool col, int e) {
  const int r = e / 16, c = e % 16;
  return col ? p + (size_t)c * ldm + r : p + (size_t)r * ldm + c;
}
template <class U, class T, class L>
void load(fragment<U, 16, 16, 16, T, L> &f, const T *p, unsigned ldm,
          bool col) {
  emu::wmma_meet(p, ldm, col, sizeof(T));
  const int u = kind<U>(), lane = threadIdx.x % 32;
  for (int s = 0; s < 8; s++)
    f.x[s] = *at(p, ldm, col, emu::wmma_elem[u][lane * 8 + s]);
  emu::warp_sync(); /* every lane has read before any goes on */
}
} // namespace detail

template <class U, class T, class L>
void fill_fragment(fragment<U, 16, 16, 16, T, L> &f, float v) {
  for (int s = 0; s < 8; s++)
    f.x[s] = detail::of_float<T>(v);
}

template <class U, class L>
void load_matrix_sync(fragment<U, 16, 16, 16, __nv_bfloat16, L> &f,
                      const __nv_bfloat16 *p, unsigned ldm) {
  static_assert(!std::is_same_v<L, void>, "a matrix fragment has a layout");
  detail::load(f, p, ldm, std::is_same_v<L, col_major>);
}

inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f,
                             const float *p, unsigned ldm, layout_t layout) {
  detail::load(f, p, ldm, layout == mem_col_major);
}

inline void store_matrix_sync(float *p,
                              const fragment<accumulator, 16, 16, 16, float> &f,
                              unsigned ldm, layout_t layout) {
  const bool col = layout == mem_col_major;
  emu::wmma_meet(p, ldm, col, sizeof(float));
  const int lane = threadIdx.x % 32;
  for (int s = 0; s < 8; s++)
    *detail::at(p, ldm, col, emu::wmma_elem[2][lane * 8 + s]) = f.x[s];
  emu::warp_sync(); /* the stores are all done at the collective's end */
}

template <class LA, class LB>
void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
              const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LA> &a,
              const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LB> &b,
              const fragment<accumulator, 16, 16, 16, float> &c) {
  emu::wmma_post &me = emu::wmma_mine();
  for (int s = 0; s < 8; s++) {
    me.v[0][s] = detail::to_float(a.x[s]);
    me.v[1][s] = detail::to_float(b.x[s]);
    me.v[2][s] = c.x[s];
  }
  emu::warp_sync();
  const emu::wmma_post *w = emu::wmma_posts[threadIdx.x / 32];
  auto get = [w](int u, int e) {
    const int at = emu::wmma_perm[u][e];
    return w[at / 8].v[u][at % 8];
  };
  const int lane = threadIdx.x % 32;
  float out[8];
  for (int s = 0; s < 8; s++) {
    const int e = emu::wmma_elem[2][lane * 8 + s], i = e / 16, j = e % 16;
    float acc = get(2, e);
    for (int k = 0; k < 16; k++)
      acc += get(0, i * 16 + k) * get(1, k * 16 + j);
    out[s] = acc;
  }
  emu::warp_sync(); /* every lane has gathered before d (maybe c) changes */
  for (int s = 0; s < 8; s++)
    d.x[s] = out[s];
}

} // namespace wmma
} // namespace nvcuda

#endif
