/* tests/reduce-emu/reduce_emu.cc: the reductions' kernels
 * (core/cuda/reduce.cuh), their own source, run on the CPU against the
 * float64 reference (tests/ref.c: ref_attention, ref_reduce), for
 * machines without a GPU (make reduce-emu-check, and make test with
 * CUDA=1).
 *
 * g++ compiles the kernels with this file's stand-ins for what only nvcc
 * has: __syncthreads, __syncthreads_or, __shfl_xor_sync, the atomics, the
 * thread and block indices, and __shared__ as function statics (one
 * block runs at a time). A block's 256 threads run as fibers of
 * tests/emu/emu.h, and the collectives meet at its barriers (a warp's 32,
 * the block's 256): a thread missing from one is a deadlock that it
 * reports, and a missing __syncthreads a read of a value not yet written. lse
 * comes from the kernels' own score.cuh, in float64. The rules are check_cuda's
 * (top-k values within 1e-5, an index the reference's unless a near tie, pooled
 * maps and statistics within 1e-4 relative L2). What it cannot show:
 * timing, and whatever nvcc compiles differently from g++.
 *
 * usage: reduce_emu; prints a line a problem, then "N passed, M failed",
 * and exits 1 if any failed. */
#define __launch_bounds__(...) /* nvcc's; g++ knows none */
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "../emu/emu.h"

extern "C" {
#include "ref.h"
}

static inline int64_t min(int64_t a, int64_t b) {
  return a < b ? a : b;
}
static inline int64_t max(int64_t a, int64_t b) {
  return a > b ? a : b;
}

namespace emu {
constexpr int kThreads = 256;
uint64_t slot[kThreads / 32][32];
int any; /* __syncthreads_or's; no thread runs beside another */
} // namespace emu

namespace attn_cu {
inline void __syncthreads() {
  emu::block_sync();
}
inline int __syncthreads_or(int p) {
  if (p)
    emu::any = 1;
  emu::block_sync();
  int r = emu::any;
  emu::block_sync();
  if (threadIdx.x == 0)
    emu::any = 0;
  emu::block_sync();
  return r;
}
inline double __shfl_xor_sync(unsigned mask, double v, int x) {
  const int w = threadIdx.x / 32, l = threadIdx.x % 32;
  if (mask != 0xffffffffu)
    abort();
  memcpy(&emu::slot[w][l], &v, 8);
  emu::warp_sync();
  double r;
  memcpy(&r, &emu::slot[w][l ^ x], 8);
  emu::warp_sync();
  return r;
}
} // namespace attn_cu

#undef __shared__
#define __shared__ static
#include "reduce.cuh"

/* One problem: no projections, so Q and K are the inputs. */
struct problem {
  const char *name;
  int64_t B, Lq, Lk, H, Hkv, Dh;
  int causal;
  int lengths; /* key lengths {Lk, Lk / 3, 0, ...} */
  int64_t wl, wr;
  int softcap, bias, allow, alibi;
  attn_reduce_t r;
};

static double rnd(uint64_t *s) { /* uniform [-1, 1) */
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(*s >> 11) / (double)(1ull << 52) - 1.0;
}

static int run(const problem &pb, uint64_t seed) {
  using namespace attn_cu;
  const int64_t B = pb.B, Lq = pb.Lq, Lk = pb.Lk, H = pb.H, Hkv = pb.Hkv,
                Dh = pb.Dh;
  std::vector<float> q(B * Lq * H * Dh), k(B * Lk * Hkv * Dh),
      v(B * Lk * Hkv * Dh), bias(Lq * Lk), slopes(H);
  std::vector<uint8_t> allow(Lq * Lk);
  std::vector<int64_t> len(B);
  for (auto &x : q)
    x = (float)(2.5 * rnd(&seed));
  for (auto &x : k)
    x = (float)(2.5 * rnd(&seed));
  for (auto &x : v)
    x = (float)rnd(&seed);
  for (auto &x : bias)
    x = (float)rnd(&seed);
  for (auto &x : allow)
    x = rnd(&seed) < 0.4;
  for (int64_t h = 0; h < H; h++)
    slopes[h] = 0.05f * (float)(h + 1);
  for (int64_t b = 0; b < B; b++)
    len[b] = b == 0 ? Lk : b == 1 ? Lk / 3 : 0;

  attn_params_t p = {};
  p.query = {q.data(), 3, {B, Lq, H * Dh}};
  p.key = {k.data(), 3, {B, Lk, Hkv * Dh}};
  p.value = {v.data(), 3, {B, Lk, Hkv * Dh}};
  p.num_heads = H, p.num_kv_heads = Hkv;
  p.causal = (attn_causal_t)pb.causal;
  if (pb.lengths)
    p.key_lengths = {len.data(), 1, {B}};
  if (pb.allow)
    p.allow = {allow.data(), 2, {Lq, Lk}};
  p.has_window_left = pb.wl >= 0, p.window_left = pb.wl;
  p.has_window_right = pb.wr >= 0, p.window_right = pb.wr;
  p.has_softcap = pb.softcap, p.softcap = 3.0f;
  if (pb.bias)
    p.bias = {bias.data(), 2, {Lq, Lk}};
  if (pb.alibi) {
    p.alibi = ATTN_ALIBI_SLOPES;
    p.alibi_slopes = {slopes.data(), 1, {H}};
  }
  p.reduce = pb.r;
  ref_result_t ref;
  ref_reduce_t rr;
  if (ref_attention(&p, &ref) != 0 || ref_reduce(&p, &ref, &rr) != 0) {
    printf("%s: the reference cannot read it\n", pb.name);
    return 1;
  }

  /* the kernels' arguments, as forward.cu fills them */
  args a = {};
  a.q = q.data(), a.k = k.data(), a.v = v.data();
  a.key_lengths = pb.lengths ? len.data() : nullptr;
  a.slopes = pb.alibi ? slopes.data() : nullptr;
  a.allow = pb.allow ? allow.data() : nullptr;
  a.allow_st[2] = Lk, a.allow_st[3] = 1;
  a.bias = pb.bias ? bias.data() : nullptr;
  a.bias_st[2] = Lk, a.bias_st[3] = 1;
  a.B = B, a.Lq = Lq, a.Lk = Lk, a.H = H, a.Hkv = Hkv, a.Dh = Dh, a.Dv = Dh;
  a.scale = (float)(1.0 / sqrt((double)Dh));
  a.causal = pb.causal;
  const int64_t big = Lq > Lk ? Lq : Lk; /* attn_plan_t's effective sides */
  a.wl = pb.wl >= 0 && pb.wl < big ? pb.wl : -1;
  a.wr = pb.wr >= 0 && pb.wr < big ? pb.wr : -1;
  a.has_softcap = pb.softcap, a.softcap = 3.0f;
  std::vector<float> lse(B * H * Lq);
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t i = 0; i < Lq; i++) {
        std::vector<double> s;
        double m = -INFINITY;
        for (int64_t j = 0; j < Lk; j++) {
          if (!allowed(a, b, h, i, j))
            continue;
          float dot = 0.f;
          for (int64_t d = 0; d < Dh; d++)
            dot += q[((b * Lq + i) * H + h) * Dh + d] *
                   k[((b * Lk + j) * Hkv + h / (H / Hkv)) * Dh + d];
          s.push_back(score(a, b, h, i, j, dot));
          m = fmax(m, s.back());
        }
        double l = 0;
        for (double x : s)
          l += exp(x - m);
        lse[(b * H + h) * Lq + i] = l > 0 ? (float)(m + log(l)) : -INFINITY;
      }
  a.lse = lse.data();

  const attn_reduce_t &rd = pb.r;
  reduce_args r = {};
  r.q0 = rr.q0, r.q1 = rr.q1, r.k0 = rr.k0, r.k1 = rr.k1, r.rH = rr.rH;
  r.mean_heads = rd.mean_heads, r.K = rd.top_k;
  const int64_t rows = B * rr.rH * (rr.q1 - rr.q0), K = rd.top_k;
  const int64_t npool = B * rr.rH * rr.nq * rr.nk;
  std::vector<int32_t> ti(rows * K + 1, 0x7fffffff);
  std::vector<float> tv(rows * K + 1, NAN), pooled(npool + 1, NAN),
      ent(rows, NAN), sink(rows, NAN), dist(rows, NAN);
  std::vector<double> acc(npool + 1, 0.0);
  r.top_k_index = K ? ti.data() : nullptr;
  r.top_k_value = K ? tv.data() : nullptr;
  r.pool_q = rd.pool_q, r.pool_k = rd.pool_k, r.nq = rr.nq, r.nk = rr.nk;
  r.pool_reduce = (int)rd.pool_reduce;
  r.pool_acc = rd.pool_q ? acc.data() : nullptr;
  r.pooled = rd.pool_q ? pooled.data() : nullptr;
  r.sink_tokens = rd.sink_tokens;
  r.entropy = rd.stats & ATTN_STAT_ENTROPY ? ent.data() : nullptr;
  r.sink = rd.stats & ATTN_STAT_SINK ? sink.data() : nullptr;
  r.distance = rd.stats & ATTN_STAT_DISTANCE ? dist.data() : nullptr;

  /* the grid, a block at a time; fewer x blocks than rows, to run the
   * kernel's row loop too */
  emu::launch(
      dim3((unsigned)((rr.q1 - rr.q0 + 1) / 2), (unsigned)rr.rH, (unsigned)B),
      emu::kThreads, [&] { red::reduce_kernel<float>(a, r); });
  if (r.pool_acc) {
    gridDim = dim3(1, 1, 1), blockDim = dim3(1, 1, 1);
    threadIdx = uint3{0, 0, 0}, blockIdx = uint3{0, 0, 0};
    red::pool_kernel(r, npool);
  }

  /* against the reference */
  int bad = 0;
  const int64_t nrow = rr.q1 - rr.q0;
  for (int64_t row = 0; row < rows && K; row++) {
    const int64_t bh = row / nrow, i = rr.q0 + row % nrow;
    const int64_t b = bh / rr.rH, h = bh % rr.rH;
    const double *w = rd.mean_heads ? ref.mean_weights + (b * Lq + i) * Lk
                                    : ref.weights + ((b * H + h) * Lq + i) * Lk;
    for (int64_t t = 0; t < K && bad < 5; t++) {
      const int32_t gi = ti[row * K + t];
      const int64_t ci = rr.top_k_index[row * K + t];
      const double gv = tv[row * K + t], cv = rr.top_k_value[row * K + t];
      bool ok;
      if (gi < 0 || ci < 0)
        ok = gi == ci && gv == 0;
      else
        ok = gi >= rr.k0 && gi < rr.k1 && fabs(gv - cv) <= 1e-5 &&
             fabs(gv - w[gi]) <= 1e-5 &&
             (gi == ci ||
              (w[gi] != w[ci] && fabs(w[gi] - w[ci]) <= 1e-5 * w[ci]));
      if (!ok) {
        printf("%s: top_k row %lld rank %lld: %d (%.9g), reference %lld "
               "(%.9g)\n",
               pb.name, (long long)row, (long long)t, gi, gv, (long long)ci,
               cv);
        bad++;
      }
    }
  }
  const struct {
    const char *name;
    const float *got;
    const double *want;
    int64_t n;
  } arr[] = {{"pooled", r.pooled, rr.pooled, npool},
             {"entropy", r.entropy, rr.entropy, rows},
             {"sink", r.sink, rr.sink, rows},
             {"distance", r.distance, rr.distance, rows}};
  for (const auto &x : arr) {
    if (!x.got)
      continue;
    double num = 0, den = 0;
    for (int64_t e = 0; e < x.n; e++) {
      num += (x.got[e] - x.want[e]) * (x.got[e] - x.want[e]);
      den += x.want[e] * x.want[e];
    }
    double err = den > 0 ? sqrt(num / den) : sqrt(num);
    if (!(err <= 1e-4)) {
      printf("%s: %s relative error %.3e\n", pb.name, x.name, err);
      bad++;
    }
  }
  printf("%s: %s\n", pb.name, bad ? "FAILED" : "ok");
  ref_reduce_free(&rr);
  ref_result_free(&ref);
  return bad != 0;
}

int main() {
  const int64_t n = -1;
  /* clang-format off */
  static const problem pbs[] = {
      {"self, top_k 5, stats, pool 3x5 mean", 1, 37, 37, 2, 2, 16, 0, 0, n, n,
       0, 0, 0, 0, {.top_k = 5, .pool_q = 3, .pool_k = 5,
       .stats = ATTN_STAT_ALL, .sink_tokens = 4}},
      {"Lq 2 over 700 keys, top_k 256, pool max, GQA", 1, 2, 700, 4, 2, 8,
       0, 0, n, n, 0, 0, 0, 0, {.top_k = 256, .pool_q = 1, .pool_k = 64,
       .pool_reduce = ATTN_POOL_MAX, .stats = ATTN_STAT_ALL}},
      {"causal Lq 20 > Lk 9 (dead rows), top_k 12 > keys, sink past Lk", 1,
       20, 9, 2, 1, 8, ATTN_CAUSAL_BOTTOM_RIGHT, 0, n, n, 0, 0, 0, 0,
       {.top_k = 12, .pool_q = 4, .pool_k = 3, .pool_reduce = ATTN_POOL_SUM,
       .stats = ATTN_STAT_ALL, .sink_tokens = 100}},
      {"key lengths (one 0), ranges, top-left, everything", 3, 13, 600, 2, 2,
       8, ATTN_CAUSAL_TOP_LEFT, 1, n, n, 1, 1, 1, 1, {.top_k = 7,
       .pool_q = 5, .pool_k = 50, .stats = ATTN_STAT_ALL, .sink_tokens = 2,
       .has_query_range = 1, .has_key_range = 1, .query_range = {3, 12},
       .key_range = {1, 550}}},
      {"mean over heads, window, allow, Lk 530", 2, 9, 530, 3, 3, 8, 0, 1,
       200, 40, 0, 0, 1, 0, {.mean_heads = 1, .top_k = 9, .pool_q = 2,
       .pool_k = 100, .stats = ATTN_STAT_ALL, .sink_tokens = 3}},
      {"mean over heads, dead rows, pool max", 1, 12, 5, 4, 2, 4,
       ATTN_CAUSAL_BOTTOM_RIGHT, 0, n, n, 1, 0, 0, 1, {.mean_heads = 1,
       .top_k = 3, .pool_q = 5, .pool_k = 2, .pool_reduce = ATTN_POOL_MAX,
       .stats = ATTN_STAT_ALL, .sink_tokens = 1}},
  };
  /* clang-format on */
  int failed = 0, passed = 0;
  for (size_t i = 0; i < sizeof pbs / sizeof *pbs; i++)
    (run(pbs[i], 77 + i) ? failed : passed)++;
  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
