/* tests/flash-emu/flash_emu.cc: flash version 3's kernel
 * (core/cuda/flash_mma.cuh), its own source, run on the CPU against a
 * float64 reference, for machines without a GPU (make flash-emu-check,
 * and make test with CUDA=1): every problem in bf16 (within 1e-2
 * relative L2) and in fp32 (3xTF32, within check_cuda's 1e-4).
 *
 * g++ compiles the kernel template with this file's stand-ins for the
 * few things only nvcc has: mma.cuh's warp instructions (cp.async,
 * ldmatrix, mma.m16n8k16 bf16, mma.m16n8k8 tf32, which reads only the
 * 19 bits of a tf32 from each operand, cvt.rna.tf32.f32, ex2),
 * __shfl_xor_sync, __syncthreads, the thread and block indices. Each stand-in
 * follows the PTX ISA's definition, not the kernel's index math: an ldmatrix
 * lane reads the row addresses the other lanes gave, an MMA gathers A, B and C
 * from all 32 lanes' fragments by the ISA's layouts and hands each lane its
 * part of D. Every CUDA thread of a block is a fiber of tests/emu/emu.h, and
 * the collectives meet at its barriers (a warp's 32, a block's all): a lane
 * missing from a collective is a deadlock that it reports, and a missing
 * __syncthreads a read of a value not yet written. A group of cp.async copies
 * lands at random either at its commit or at its wait, so that reading a buffer
 * before the wait, or refilling one that another warp still reads, shows;
 * shared memory starts as NaNs; copies must read inside Q, K and V,
 * land inside the launch's shared memory (smem_layout's bytes, not all
 * of the array that holds the largest; under ASan any access past them
 * is reported) and be 16-byte aligned. What it cannot show: timing, bank
 * conflicts, register spills, and whatever nvcc compiles differently from g++.
 *
 * Bugs planted in the kernel while writing it, each caught here: the P
 * fragment's registers 1 and 2 swapped; K's or V's ldmatrix row address
 * with its two halves swapped; cp.async.wait_group 2 for 1; the trailing
 * __syncthreads removed; the fast path taken for tiles past a row's
 * causal edge; scale without log2(e) there; keys past the range not
 * masked; the -inf guard of a row that has seen no key yet; the quad's
 * sum of l left out; the row blocks shifted by one; the tiles a warp
 * skips taken from its first row's keys only. And in the fp32 path (10
 * to 23 of the 23 fp32 problems failing; tests/README.md has the table):
 * either cross term of 3xTF32 left out, or both; hi not rounded to tf32;
 * P's or Q's A fragment with registers 1 and 2 swapped; K's k-step
 * offset 4 for 8; V's second B value read from the next column, or V
 * read with K's row stride; Q's row g + 8 read one row down; fp32 rows
 * staged 8 elements a 16-byte piece; V's second buffer at K's stride.
 *
 * usage: flash_emu [SEED]; prints a line a problem, then "N passed, M
 * failed", and exits 1 if any failed. */
#define __launch_bounds__(...) /* nvcc's; g++ knows none */
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <random>
#include <vector>

#include "../emu/emu.h"

static inline int64_t min(int64_t a, int64_t b) {
  return a < b ? a : b;
}

// ---- the emulated warp instructions ----------------------------------------
#define ATTN_CUDA_MMA_CUH

namespace attn_cu {
namespace v3 {
alignas(16) unsigned char smem_v3[232448];
}
} // namespace attn_cu

namespace emu {
constexpr int kMaxWarps = 16;
constexpr size_t kSmem = sizeof attn_cu::v3::smem_v3;
unsigned char *const smem = attn_cu::v3::smem_v3;
uint64_t slot[kMaxWarps][32][8]; // per warp and lane: what it posts
struct range {
  const unsigned char *p;
  size_t n;
};
std::vector<range> globals; // where cp.async may read
int failures = 0;
std::mt19937 *rng;

void fail(const char *what) {
  if (failures++ < 10)
    fprintf(stderr, "emu: %s (thread %u block %u,%u,%u)\n", what, threadIdx.x,
            blockIdx.x, blockIdx.y, blockIdx.z);
}
int warp() {
  return threadIdx.x / 32;
}
int lane() {
  return threadIdx.x % 32;
}
void wsync() {
  warp_sync();
}

size_t launch_smem = kSmem; // the running launch's dynamic shared memory
bool in_smem(const void *p, size_t n) {
  const unsigned char *c = (const unsigned char *)p;
  return c >= smem && c + n <= smem + launch_smem;
}
uint16_t ld16(const unsigned char *p) {
  uint16_t x;
  memcpy(&x, p, 2);
  return x;
}
float bf(uint16_t x) {
  uint32_t u = (uint32_t)x << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

// cp.async: a thread's groups; each is run either when committed or when
// waited for (chosen at random), so that a read before the wait, or a
// write into a buffer still being read, shows.
struct copy {
  void *dst;
  const void *src;
  bool full;
};
std::vector<copy> open_groups[kMaxWarps * 32];
std::vector<std::vector<copy>> pendings[kMaxWarps * 32];
std::vector<copy> &open_group() { // the running thread's
  return open_groups[threadIdx.x];
}
std::vector<std::vector<copy>> &pending() {
  return pendings[threadIdx.x];
}
void run(const std::vector<copy> &g) {
  for (const copy &c : g) {
    if (c.full)
      memcpy(c.dst, c.src, 16);
    else
      memset(c.dst, 0, 16);
  }
}
} // namespace emu

namespace attn_cu {
using namespace emu;
inline void cp_async16(void *dst, const void *src, bool full) {
  if (!in_smem(dst, 16) || (uintptr_t)dst % 16)
    fail("cp.async: dst not 16-aligned in the launch's shared memory");
  if ((uintptr_t)src % 16)
    fail("cp.async: src not 16-aligned");
  if (full) {
    bool ok = false;
    for (const range &r : globals)
      ok |= (const unsigned char *)src >= r.p &&
            (const unsigned char *)src + 16 <= r.p + r.n;
    if (!ok)
      fail("cp.async: src outside the tensors");
  }
  open_group().push_back({dst, src, full});
}
inline void cp_async_commit() {
  const bool eager = (*rng)() % 2;
  if (eager) {
    run(open_group());
    pending().push_back({});
  } else {
    pending().push_back(open_group());
  }
  open_group().clear();
}
template <int N> inline void cp_async_wait() {
  while ((int)pending().size() > N) {
    run(pending().front());
    pending().erase(pending().begin());
  }
}
// ldmatrix .x4 (.trans): lane 8m + r gives row r of matrix m
inline void ldsm(uint32_t r[4], const void *row, bool trans) {
  if (!in_smem(row, 16) || (uintptr_t)row % 16)
    fail("ldmatrix: row not 16-aligned in the launch's shared memory");
  slot[warp()][lane()][0] = (uint64_t)(uintptr_t)row;
  wsync();
  const int l = lane();
  for (int m = 0; m < 4; m++) {
    uint16_t lo, hi;
    if (!trans) { // row l/4, elements 2(l%4), +1
      const unsigned char *p =
          (const unsigned char *)(uintptr_t)slot[warp()][8 * m + l / 4][0];
      lo = ld16(p + 2 * (2 * (l % 4)));
      hi = ld16(p + 2 * (2 * (l % 4) + 1));
    } else { // column l/4, rows 2(l%4), +1
      const unsigned char *p0 = (const unsigned char *)(uintptr_t)
          slot[warp()][8 * m + 2 * (l % 4)][0];
      const unsigned char *p1 = (const unsigned char *)(uintptr_t)
          slot[warp()][8 * m + 2 * (l % 4) + 1][0];
      lo = ld16(p0 + 2 * (l / 4));
      hi = ld16(p1 + 2 * (l / 4));
    }
    r[m] = (uint32_t)lo | (uint32_t)hi << 16;
  }
  wsync();
}
inline void ldsm_x4(uint32_t r[4], const void *row) {
  ldsm(r, row, false);
}
inline void ldsm_x4_trans(uint32_t r[4], const void *row) {
  ldsm(r, row, true);
}
// The m16n8 MMAs: each lane has posted its A and B fragments in its
// slots 0 .. 5; it posts C in 6 and 7, and gets its part of D = C + A·B
// (fragments per the PTX ISA), A [16, K] and B [K, 8] gathered from every
// lane's slots by gather(slots, g, t, A, B), in double.
template <int K, class Gather> void mma_m16n8(float d[4], Gather gather) {
  uint64_t *my = slot[warp()][lane()];
  uint32_t cbits[4];
  memcpy(cbits, d, 16);
  my[6] = (uint64_t)cbits[0] | (uint64_t)cbits[1] << 32;
  my[7] = (uint64_t)cbits[2] | (uint64_t)cbits[3] << 32;
  wsync();
  float A[16][K], B[K][8], C[16][8];
  for (int l = 0; l < 32; l++) {
    const uint64_t *s = slot[warp()][l];
    const int g = l / 4, t = l % 4;
    gather(s, g, t, A, B);
    for (int i = 0; i < 4; i++) { // c_i
      const int row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i & 1);
      uint32_t u = (uint32_t)(s[6 + i / 2] >> (32 * (i & 1)));
      memcpy(&C[row][col], &u, 4);
    }
  }
  wsync();
  const int g = lane() / 4, t = lane() % 4;
  for (int i = 0; i < 4; i++) {
    const int row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i & 1);
    double acc = C[row][col];
    for (int k = 0; k < K; k++)
      acc += (double)A[row][k] * B[k][col];
    d[i] = (float)acc;
  }
}
// mma.m16n8k16 bf16: a register holds two bf16, the lower index low
inline void mma_bf16(float d[4], const uint32_t a[4], uint32_t b0,
                     uint32_t b1) {
  uint64_t *my = slot[warp()][lane()];
  for (int x = 0; x < 4; x++)
    my[x] = a[x];
  my[4] = b0, my[5] = b1;
  mma_m16n8<16>(
      d, [](const uint64_t *s, int g, int t, float(*A)[16], float(*B)[8]) {
        for (int i = 0; i < 8; i++) { // a_i
          const int row = g + ((i >= 2 && i < 4) || i >= 6 ? 8 : 0);
          const int col = 2 * t + (i & 1) + (i >= 4 ? 8 : 0);
          A[row][col] = bf((uint16_t)(s[i / 2] >> (16 * (i & 1))));
        }
        for (int i = 0; i < 4; i++) { // b_i
          const int row = 2 * t + (i & 1) + (i >= 2 ? 8 : 0);
          B[row][g] = bf((uint16_t)(s[4 + i / 2] >> (16 * (i & 1))));
        }
      });
}
// mma.m16n8k8 tf32: one element a register; the tensor cores read only a
// tf32's 19 bits of each operand register (the low 13 ignored)
inline float tf32_bits(uint32_t u) {
  u &= 0xffffe000u;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
inline void mma_tf32(float d[4], const float a[4], float b0, float b1) {
  uint64_t *my = slot[warp()][lane()];
  uint32_t bits[6];
  memcpy(bits, a, 16);
  memcpy(bits + 4, &b0, 4);
  memcpy(bits + 5, &b1, 4);
  for (int x = 0; x < 6; x++)
    my[x] = bits[x];
  mma_m16n8<8>(
      d, [](const uint64_t *s, int g, int t, float(*A)[8], float(*B)[8]) {
        for (int i = 0; i < 4; i++) // a_i: rows g, g+8; columns t, t+4
          A[g + 8 * (i & 1)][t + 4 * (i / 2)] = tf32_bits((uint32_t)s[i]);
        for (int i = 0; i < 2; i++) // b_i: rows t, t+4; column g
          B[t + 4 * i][g] = tf32_bits((uint32_t)s[4 + i]);
      });
}
// cvt.rna.tf32.f32: to nearest, ties away from zero, 10 mantissa bits
// (adding half the dropped unit to the magnitude carries into the
// exponent where it must, up to inf); inf and NaN are kept
inline float tf32_round(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) != 0x7f800000u)
    u = (u + 0x1000u) & 0xffffe000u;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
inline uint32_t pack_bf16(float x, float y) {
  __nv_bfloat162 v = __floats2bfloat162_rn(x, y);
  uint32_t u;
  memcpy(&u, &v, 4);
  return u;
}
inline float exp2_fast(float x) {
  return exp2f(x);
}
} // namespace attn_cu

inline float __shfl_xor_sync(unsigned mask, float v, int x) {
  using namespace emu;
  if (mask != 0xffffffffu)
    fail("shfl: partial mask");
  uint32_t u;
  memcpy(&u, &v, 4);
  slot[warp()][lane()][0] = u;
  wsync();
  uint32_t w = (uint32_t)slot[warp()][lane() ^ x][0];
  wsync();
  float r;
  memcpy(&r, &w, 4);
  return r;
}
inline void __syncthreads() {
  emu::block_sync();
}

#include "flash_mma.cuh"

// ---- running a grid --------------------------------------------------------

template <class P> void launch(const attn_cu::args &a) {
  using namespace emu;
  using attn_cu::v3::kRows, attn_cu::v3::kThreads, attn_cu::v3::kWarps;
  static_assert(kWarps <= kMaxWarps, "more warps than slots");
  /* the dynamic shared memory that flash_mma.cu's launch asks for */
  constexpr size_t kBytes = attn_cu::v3::smem_layout<P>::kBytes;
  const dynamic_shared own(smem, kSmem, kBytes);
  launch_smem = kBytes;
  emu::launch(
      dim3((unsigned)((a.Lq + kRows - 1) / kRows), (unsigned)a.H,
           (unsigned)a.B),
      kThreads, [&] { attn_cu::v3::flash_v3_kernel<P>(a); },
      [] {
        memset(smem, 0xff, kBytes); // NaN-ish garbage
        for (int t = 0; t < kThreads; t++) {
          open_groups[t].clear();
          pendings[t].clear();
        }
      });
}

// ---- the reference, from kernels.h's rules, in double ---------------------

struct problem {
  const char *name;
  int D;
  int64_t B, Lq, Lk, H, Hkv;
  int causal;
  int64_t wl = -1, wr = -1;
  int lengths = 0; // key lengths: (37b + 11) % (Lk + 1), 0 for b = 1
  int softcap = 0;
  int bias = 0;  // [1, H, Lq, Lk]-broadcast: strides {0, Lq*Lk, Lk, 1}
  int allow = 0; // [B, 1, Lq, Lk]
  int alibi = 0;
  float scale_mul = 1.f;
};

static float rnd(uint64_t &s) {
  s = s * 6364136223846793005ull + 1442695040888963407ull;
  return (float)(s >> 40) / (float)(1 << 24) * 2.f - 1.f;
}

/* Runs p in bf16 (fp32 0) or fp32: the kernel against the reference,
 * within 1e-2 (bf16) or 1e-4 (fp32, check_cuda's FP32_TOL) relative L2,
 * and the lse within 1e-3 or 1e-5. */
static int run_problem(const problem &p, uint64_t seed, int fp32) {
  using bf16 = __nv_bfloat16;
  const int D = p.D;
  // the inputs as float (bf16's rounded to bf16), and bf16's copies
  std::vector<float> q(p.B * p.Lq * p.H * D), k(p.B * p.Lk * p.Hkv * D),
      v(p.B * p.Lk * p.Hkv * D);
  uint64_t s = seed;
  for (auto &x : q)
    x = 2.f * rnd(s);
  for (auto &x : k)
    x = 2.f * rnd(s);
  for (auto &x : v)
    x = rnd(s);
  std::vector<bf16> q16, k16, v16;
  if (!fp32)
    for (auto [f, h] : {std::pair{&q, &q16}, {&k, &k16}, {&v, &v16}})
      for (float &x : *f) {
        h->push_back(__float2bfloat16_rn(x));
        x = __bfloat162float(h->back());
      }
  std::vector<int64_t> kl(p.B);
  for (int64_t b = 0; b < p.B; b++)
    kl[b] = b == 1 ? 0 : (b * 37 + 11) % (p.Lk + 1);
  std::vector<float> bias(p.H * p.Lq * p.Lk), slopes(p.H);
  for (auto &x : bias)
    x = rnd(s) < -0.9f ? -INFINITY : 1.5f * rnd(s);
  for (int64_t h = 0; h < p.H; h++)
    slopes[h] = 0.05f * (float)(h + 1);
  std::vector<uint8_t> allow(p.B * p.Lq * p.Lk);
  for (auto &x : allow)
    x = rnd(s) > -0.6f;
  std::vector<float> concat(p.B * p.Lq * p.H * D, 12345.f),
      lse(p.B * p.H * p.Lq, 12345.f);

  attn_cu::args a = {};
  if (fp32)
    a.q = q.data(), a.k = k.data(), a.v = v.data();
  else
    a.q = q16.data(), a.k = k16.data(), a.v = v16.data();
  a.bf16 = !fp32;
  a.concat = concat.data(), a.lse = lse.data();
  a.key_lengths = p.lengths ? kl.data() : nullptr;
  a.slopes = p.alibi ? slopes.data() : nullptr;
  a.allow = p.allow ? allow.data() : nullptr;
  a.allow_st[0] = p.Lq * p.Lk, a.allow_st[1] = 0, a.allow_st[2] = p.Lk,
  a.allow_st[3] = 1;
  a.bias = p.bias ? bias.data() : nullptr;
  a.bias_st[0] = 0, a.bias_st[1] = p.Lq * p.Lk, a.bias_st[2] = p.Lk,
  a.bias_st[3] = 1;
  a.B = p.B, a.Lq = p.Lq, a.Lk = p.Lk, a.H = p.H, a.Hkv = p.Hkv, a.Dh = D,
  a.Dv = D;
  a.scale = p.scale_mul / sqrtf((float)D);
  a.causal = p.causal;
  a.wl = p.wl, a.wr = p.wr;
  a.has_softcap = p.softcap, a.softcap = 3.f;

  const size_t el = fp32 ? 4 : 2;
  emu::globals = {{(const unsigned char *)a.q, q.size() * el},
                  {(const unsigned char *)a.k, k.size() * el},
                  {(const unsigned char *)a.v, v.size() * el}};
  using attn_cu::v3::bf16_path, attn_cu::v3::fp32_path;
  switch (D + fp32) {
  case 32:
    launch<bf16_path<32>>(a);
    break;
  case 64:
    launch<bf16_path<64>>(a);
    break;
  case 128:
    launch<bf16_path<128>>(a);
    break;
  case 33:
    launch<fp32_path<32>>(a);
    break;
  case 65:
    launch<fp32_path<64>>(a);
    break;
  case 129:
    launch<fp32_path<128>>(a);
    break;
  }

  // reference
  double num = 0, den = 0, lse_err = 0;
  int bad_dead = 0;
  const int64_t off = p.Lk - p.Lq;
  for (int64_t b = 0; b < p.B; b++)
    for (int64_t h = 0; h < p.H; h++) {
      const int64_t g = h / (p.H / p.Hkv);
      for (int64_t i = 0; i < p.Lq; i++) {
        std::vector<double> sc(p.Lk, -INFINITY);
        double mx = -INFINITY;
        for (int64_t j = 0; j < p.Lk; j++) {
          bool ok = true;
          if (p.lengths && j >= kl[b])
            ok = false;
          if (p.causal == ATTN_CAUSAL_BOTTOM_RIGHT && j > i + off)
            ok = false;
          if (p.causal == ATTN_CAUSAL_TOP_LEFT && j > i)
            ok = false;
          if (p.wl >= 0 && j < i + off - p.wl)
            ok = false;
          if (p.wr >= 0 && j > i + off + p.wr)
            ok = false;
          if (p.allow && !allow[(b * p.Lq + i) * p.Lk + j])
            ok = false;
          if (!ok)
            continue;
          double dot = 0;
          for (int d = 0; d < D; d++)
            dot += (double)q[((b * p.Lq + i) * p.H + h) * D + d] *
                   k[((b * p.Lk + j) * p.Hkv + g) * D + d];
          double x = a.scale * dot;
          if (p.softcap)
            x = 3.0 * tanh(x / 3.0);
          if (p.bias)
            x += bias[(h * p.Lq + i) * p.Lk + j];
          if (p.alibi)
            x -= slopes[h] * (double)llabs(i + off - j);
          sc[j] = x;
          mx = fmax(mx, x);
        }
        double l = 0;
        for (int64_t j = 0; j < p.Lk; j++)
          if (sc[j] != -INFINITY)
            l += exp(sc[j] - mx);
        const float *got = &concat[((b * p.Lq + i) * p.H + h) * D];
        const float gl = lse[(b * p.H + h) * p.Lq + i];
        if (l == 0) { // dead row
          for (int d = 0; d < D; d++)
            bad_dead += got[d] != 0.f;
          bad_dead += gl != -INFINITY;
          continue;
        }
        for (int d = 0; d < D; d++) {
          double o = 0;
          for (int64_t j = 0; j < p.Lk; j++)
            if (sc[j] != -INFINITY)
              o += exp(sc[j] - mx) * v[((b * p.Lk + j) * p.Hkv + g) * D + d];
          o /= l;
          num += (got[d] - o) * (got[d] - o);
          den += o * o;
        }
        lse_err = fmax(lse_err, fabs(gl - (mx + log(l))));
      }
    }
  const double rel = den > 0 ? sqrt(num / den) : sqrt(num);
  const bool ok = rel < (fp32 ? 1e-4 : 1e-2) &&
                  lse_err < (fp32 ? 1e-5 : 1e-3) && bad_dead == 0 &&
                  emu::failures == 0;
  printf("%-4s %s %s\n     rel %.2e  lse max err %.2e  dead-row errors %d  "
         "%s\n",
         ok ? "ok" : "FAIL", fp32 ? "fp32" : "bf16", p.name, rel, lse_err,
         bad_dead, emu::failures ? "(emulator faults)" : "");
  emu::failures = 0;
  return ok ? 0 : 1;
}

int main(int argc, char **argv) {
  std::mt19937 r(argc > 1 ? atoi(argv[1]) : 1);
  emu::rng = &r;
  const int BR = ATTN_CAUSAL_BOTTOM_RIGHT, TL = ATTN_CAUSAL_TOP_LEFT;
  std::vector<problem> ps = {
      {"D32 L=1", 32, 1, 1, 1, 1, 1, 0},
      {"D64 L=1", 64, 1, 1, 1, 2, 2, 0},
      {"D64 causal self L=200", 64, 1, 200, 200, 2, 2, BR},
      {"D128 Lq=65 Lk=200 causal top-left GQA 4/2", 128, 1, 65, 200, 4, 2, TL},
      {"D64 Lq=200 Lk=64 causal bottom-right (dead rows)", 64, 1, 200, 64, 1, 1,
       BR},
      {"D128 Lq=63 Lk=65 window 5/2 key lengths", 128, 2, 63, 65, 2, 1, 0, 5, 2,
       1},
      {"D64 L=130 bias allow alibi softcap causal", 64, 2, 130, 130, 2, 2, BR,
       -1, -1, 0, 1, 1, 1, 1},
      {"D32 Lq=64 Lk=63 plain", 32, 1, 64, 63, 2, 1, 0},
      {"D128 L=129 causal BR, scale", 128, 1, 129, 129, 1, 1, BR, -1, -1, 0, 0,
       0, 0, 0, 0.7f},
      {"D32 Lq=70 Lk=140 causal BR, window left 30", 32, 1, 70, 140, 1, 1, BR,
       30},
      {"D128 L=300 causal BR GQA 2/1", 128, 1, 300, 300, 2, 1, BR},
  };
  /* and random ones: every feature on or off, L from 1 to 260 */
  static char names[12][96];
  uint64_t g = 7;
  auto below = [&](int n) { return (int)((rnd(g) + 1.f) / 2.f * n) % n; };
  for (int x = 0; x < 12; x++) {
    problem p = {names[x],       32 << below(3), 1 + below(2),
                 1 + below(260), 1 + below(260), 4,
                 1 << below(3),  below(3)};
    if (below(3) == 0)
      p.wl = below(80);
    if (below(3) == 0)
      p.wr = below(80);
    p.lengths = below(3) == 0;
    p.softcap = below(4) == 0, p.bias = below(4) == 0;
    p.allow = below(4) == 0, p.alibi = below(4) == 0;
    p.scale_mul = 0.5f + (float)below(100) / 100.f;
    snprintf(names[x], sizeof names[x],
             "random: D%d B%lld Lq=%lld Lk=%lld H 4/%lld causal %d "
             "window %lld/%lld %s%s%s%s%s",
             p.D, (long long)p.B, (long long)p.Lq, (long long)p.Lk,
             (long long)p.Hkv, p.causal, (long long)p.wl, (long long)p.wr,
             p.lengths ? "lengths " : "", p.softcap ? "softcap " : "",
             p.bias ? "bias " : "", p.allow ? "allow " : "",
             p.alibi ? "alibi" : "");
    ps.push_back(p);
  }
  int failed = 0;
  for (int fp32 = 0; fp32 < 2; fp32++)
    for (size_t i = 0; i < ps.size(); i++)
      failed += run_problem(ps[i], 100 + i, fp32);
  printf("%zu passed, %d failed\n", 2 * ps.size() - failed, failed);
  return failed != 0;
}
