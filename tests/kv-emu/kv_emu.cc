/* tests/kv-emu/kv_emu.cc: the kernels of a kv cache in device memory
 * (core/cuda/kv.cuh), their own source, run on the CPU against the CPU
 * core's pages, for machines without a GPU (make kv-emu-check, in
 * cuda-check and in make test with CUDA=1).
 *
 * Each problem is two batch items with their own past lengths and Lq new
 * tokens, of Hkv heads of Dh key and Dv value features, without
 * projections, so that the new keys and values are the inputs. Two sets
 * of pages start as the same NaN bytes and the same cached tokens (the
 * CPU core's own prefill, copied). Then the CPU core appends the new
 * tokens to one set (attn_forward with a kv cache), and the kernels to
 * the other (kv_write_k, kv_write_v, kv_zero_tail): every byte of every
 * page must be the same, NaNs included, so that a cell written in the
 * wrong place, one not written, or one zeroed that the core leaves shows.
 * Then kv_read_kernel must give back each item's whole sequence, keys
 * and values, exactly, and zeros past it; item_absmax the largest |k| of
 * each item's new keys.
 *
 * g++ compiles the kernels with this file's stand-ins for what only nvcc
 * has: the thread and block indices, a warp's shuffle (its 32 threads are
 * fibers of tests/emu/emu.h meeting at its barrier) and atomicMax. The
 * grids are smaller than the data, so that the kernels' grid-stride loops
 * run more than once. What it cannot show: timing, and whatever nvcc
 * compiles differently from g++.
 *
 * usage: kv_emu; prints a line a problem, then "N passed, M failed", and
 * exits 1 if any failed. */
#define __launch_bounds__(...) /* nvcc's; g++ knows none */
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "../emu/emu.h"

extern "C" {
#include "attn/attn.h"
}

namespace emu {
constexpr int kThreads = 64; /* two warps a block */
float slot[kThreads / 32][32];
} // namespace emu

namespace attn_cu {
inline float __shfl_xor_sync(unsigned mask, float v, int x) {
  const int w = threadIdx.x / 32, l = threadIdx.x % 32;
  if (mask != 0xffffffffu)
    abort();
  emu::slot[w][l] = v;
  emu::warp_sync();
  float r = emu::slot[w][l ^ x];
  emu::warp_sync();
  return r;
}
} // namespace attn_cu

#include "kv.cuh"

/* Runs `kernel` over a grid of `grid` blocks of emu::kThreads threads. */
template <class K> static void launch(dim3 grid, K kernel) {
  emu::launch(grid, emu::kThreads, kernel);
}

struct problem {
  int64_t Hkv, Dh, Dv;
  int64_t past[2], Lq;
};

static double rnd(uint64_t *s) { /* uniform [-1, 1) */
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(*s >> 11) / (double)(1ull << 52) - 1.0;
}

/* One attn_forward on the CPU over item pages `table` ([B] page lists):
 * B items of Lq new tokens, keys k and values v ([B, Lq, Hkv·D]); the
 * queries are the keys (one query head a kv head). Returns its rc. */
static int cpu_append(const problem &pb, int64_t B, const int64_t *past,
                      int64_t Lq, const float *k, const float *v,
                      float *const *const *table, float *absmax) {
  attn_params_t p = {};
  const int64_t nk = pb.Hkv * pb.Dh, nv = pb.Hkv * pb.Dv;
  p.query = {.data = k, .rank = 3, .dim = {B, Lq, nk}};
  p.key = {.data = k, .rank = 3, .dim = {B, Lq, nk}};
  p.value = {.data = v, .rank = 3, .dim = {B, Lq, nv}};
  p.num_heads = pb.Hkv;
  p.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
  attn_kv_t kv = {.past = past, .pages = table, .k_absmax = absmax};
  p.kv = &kv;
  attn_plan_t plan;
  attn_error_t err;
  int rc = attn_plan_init(&plan, &p, nullptr, &err);
  if (rc != 0) {
    fprintf(stderr, "plan: %s\n", err.message);
    return rc;
  }
  std::vector<float> out(plan.out_elems);
  void *ws = aligned_alloc(64, (plan.workspace_bytes + 63) / 64 * 64 + 64);
  attn_outputs_t o = {};
  o.out = out.data();
  rc = attn_forward(&plan, &o, ws, plan.workspace_bytes, &err);
  if (rc != 0)
    fprintf(stderr, "forward: %s\n", err.message);
  free(ws);
  return rc;
}

static int run(const problem &pb, uint64_t seed) {
  using namespace attn_cu;
  const int64_t B = 2, Lq = pb.Lq, nk = pb.Hkv * pb.Dh, nv = pb.Hkv * pb.Dv;
  const int64_t Lk = (pb.past[0] > pb.past[1] ? pb.past[0] : pb.past[1]) + Lq;
  const int64_t maxp = (Lk + ATTN_KV_PAGE - 1) / ATTN_KV_PAGE;
  const size_t floats = attn_kv_page_floats(pb.Hkv, pb.Dh, pb.Dv);
  const size_t bytes = (floats * 4 + 63) / 64 * 64;
  /* each item's whole sequence, [past + Lq, nk] and [past + Lq, nv] */
  std::vector<float> seq_k[2], seq_v[2];
  for (int b = 0; b < 2; b++) {
    seq_k[b].resize((pb.past[b] + Lq) * nk);
    seq_v[b].resize((pb.past[b] + Lq) * nv);
    for (auto &x : seq_k[b])
      x = (float)(2 * rnd(&seed));
    for (auto &x : seq_v[b])
      x = (float)(2 * rnd(&seed));
  }
  /* both page sets: NaN, then the prefill by the CPU core, copied */
  std::vector<float *> cpu_pages(2 * maxp), emu_pages(2 * maxp);
  for (int64_t i = 0; i < 2 * maxp; i++) {
    cpu_pages[i] = (float *)aligned_alloc(64, bytes);
    emu_pages[i] = (float *)aligned_alloc(64, bytes);
    for (size_t x = 0; x < floats; x++)
      cpu_pages[i][x] = NAN;
  }
  float *const *table[2] = {&cpu_pages[0], &cpu_pages[maxp]};
  float absmax[2] = {0, 0};
  for (int b = 0; b < 2; b++) {
    int64_t zero = 0;
    if (pb.past[b] && cpu_append(pb, 1, &zero, pb.past[b], seq_k[b].data(),
                                 seq_v[b].data(), &table[b], &absmax[b]))
      return 1;
  }
  for (int64_t i = 0; i < 2 * maxp; i++)
    memcpy(emu_pages[i], cpu_pages[i], bytes);

  /* the step: the CPU core's append, then the kernels' */
  std::vector<float> knew(B * Lq * nk), vnew(B * Lq * nv);
  for (int b = 0; b < 2; b++) {
    memcpy(&knew[b * Lq * nk], &seq_k[b][pb.past[b] * nk], Lq * nk * 4);
    memcpy(&vnew[b * Lq * nv], &seq_v[b][pb.past[b] * nv], Lq * nv * 4);
  }
  if (cpu_append(pb, 2, pb.past, Lq, knew.data(), vnew.data(), table, absmax))
    return 1;
  kv_args a = {};
  a.pages = emu_pages.data();
  a.past = pb.past;
  a.B = B, a.Lq = Lq, a.Lk = Lk, a.maxp = maxp;
  a.Hkv = pb.Hkv, a.Dh = pb.Dh, a.Dv = pb.Dv;
  a.Dvp = (pb.Dv + 15) / 16 * 16;
  a.ldv = pb.Hkv * a.Dvp + 16;
  a.voff = (int64_t)attn_kv_v_offset(pb.Hkv, pb.Dh);
  /* forward.cu's table: null past an item's last page */
  const std::vector<float *> emu_alloc = emu_pages;
  for (int b = 0; b < 2; b++)
    for (int64_t i = (pb.past[b] + Lq + ATTN_KV_PAGE - 1) / ATTN_KV_PAGE;
         i < maxp; i++)
      emu_pages[b * maxp + i] = nullptr;
  std::vector<float> k(B * Lk * nk, NAN), v(B * Lk * nv, NAN);
  std::vector<unsigned> bits(B, 0);
  launch(dim3(3, 1), [&] { kvk::kv_write_k(a, knew.data()); });
  launch(dim3(3, 1), [&] { kvk::kv_write_v(a, vnew.data()); });
  launch(dim3(2, (unsigned)B), [&] { kvk::kv_zero_tail(a); });
  launch(dim3(5, 1), [&] { kvk::kv_read_kernel(a, k.data(), v.data()); });
  launch(dim3(2, (unsigned)B),
         [&] { kvk::item_absmax_kernel(knew.data(), Lq, nk, bits.data()); });

  int bad = 0;
  for (int b = 0; b < 2; b++) {
    const int64_t n = (pb.past[b] + Lq + ATTN_KV_PAGE - 1) / ATTN_KV_PAGE;
    for (int64_t i = 0; i < n; i++)
      if (memcmp(cpu_pages[b * maxp + i], emu_pages[b * maxp + i],
                 floats * 4) != 0) {
        for (size_t x = 0; x < floats; x++)
          if (memcmp(&cpu_pages[b * maxp + i][x], &emu_pages[b * maxp + i][x],
                     4) != 0) {
            printf("  item %d page %lld float %zu: %g by the kernels, %g by "
                   "the cpu core\n",
                   b, (long long)i, x, (double)emu_pages[b * maxp + i][x],
                   (double)cpu_pages[b * maxp + i][x]);
            break;
          }
        bad++;
      }
    for (int64_t t = 0; t < Lk; t++) {
      const bool in = t < pb.past[b] + Lq;
      for (int64_t c = 0; c < nk; c++)
        if (k[(b * Lk + t) * nk + c] != (in ? seq_k[b][t * nk + c] : 0.f))
          bad++;
      for (int64_t c = 0; c < nv; c++)
        if (v[(b * Lk + t) * nv + c] != (in ? seq_v[b][t * nv + c] : 0.f))
          bad++;
    }
    float m = 0;
    for (int64_t x = 0; x < Lq * nk; x++)
      m = fmaxf(m, fabsf(knew[b * Lq * nk + x]));
    float got;
    memcpy(&got, &bits[b], 4);
    if (got != m) {
      printf("  item %d: item_absmax %g, %g expected\n", b, (double)got,
             (double)m);
      bad++;
    }
  }
  for (int64_t i = 0; i < 2 * maxp; i++)
    free(cpu_pages[i]), free(emu_alloc[i]);
  return bad != 0;
}

int main(void) {
  /* past lengths inside a page, at its end, at a new one's start, long;
   * Lq of one token, a few, a page, more; Dv with head padding, odd
   * widths, one kv head */
  static const problem problems[] = {
      {2, 16, 16, {0, 0}, 1},    {2, 16, 16, {0, 63}, 1},
      {2, 16, 16, {63, 64}, 1},  {2, 16, 16, {70, 10}, 3},
      {1, 8, 12, {64, 1}, 65},   {1, 8, 12, {5, 120}, 64},
      {3, 5, 7, {0, 0}, 130},    {3, 5, 7, {127, 40}, 2},
      {2, 32, 24, {1, 200}, 63},
  };
  int passed = 0, failed = 0;
  uint64_t seed = 7;
  for (const problem &pb : problems) {
    int r = run(pb, seed++);
    printf("Hkv %lld, Dh %lld, Dv %lld, past {%lld, %lld}, Lq %lld: %s\n",
           (long long)pb.Hkv, (long long)pb.Dh, (long long)pb.Dv,
           (long long)pb.past[0], (long long)pb.past[1], (long long)pb.Lq,
           r ? "FAILED" : "ok");
    r ? failed++ : passed++;
  }
  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
