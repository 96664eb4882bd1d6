/* tests/cores-emu/cores_emu.cc: flash versions 1 and 4 on CUDA cores,
 * the keys of a row in one range or split across blocks
 * (core/cuda/flash_cores.cuh), and version 2 on WMMA
 * (core/cuda/flash_wmma.cuh), their own source run on the CPU, for
 * machines without a GPU (make cores-emu-check, in cuda-check and in make
 * check with CUDA=1).
 *
 * Each problem is Q, K and V without projections (so that concat is the
 * heads' outputs), run through flash_kernel and, with several ranges,
 * combine_kernel, against two float64 references: the softmax written out
 * here from score.cuh's allowed() and score() (which every problem can
 * use, a kv cache's past lengths included), and, where there is no past,
 * tests/ref.c's ref_attention, which shares no code with the kernels. The
 * problems cover the GQA packing (rows of G query heads in one block, a
 * block's rows at several queries), one range (version 1) and several
 * (split_count's, and more ranges than tiles, so that some are empty),
 * K and V read in place from a kv cache's pages (attn.h's layout, every
 * cell that no key may read NaN, k and v null), dead rows (a key length
 * of 0, causal with Lq > Lk), every mask and score term, and head widths
 * to 256 with Dv ≠ Dh. Output: relative L2 error under 1e-5 a
 * problem; lse within 1e-5 (scaled by |lse| above 1), and -inf and zeros
 * exactly on dead rows.
 *
 * Version 2 runs in bf16 (the inputs rounded, the references reading the
 * rounded values) on every problem it takes, none of the pages' (forward.cu
 * reads pages out before it runs), and on problems of its own: several
 * row blocks, Dh 256, Dh ≠ Dv either way, Dh 16. Within 1e-2 relative L2
 * and lse within 1e-3, as flash_emu's bf16: P is rounded to bf16. WMMA is
 * tests/emu/wmma.h's stand-ins, __syncwarp a meeting of the warp's 32;
 * its shared memory starts as NaNs, and WMMA's loads and stores must stay
 * inside the launch's bytes.
 *
 * g++ compiles the kernels with this file's stand-ins for what only nvcc
 * has: __syncthreads, __shfl_xor_sync, __shfl_sync, the thread and block
 * indices, and the dynamic shared memory as a static array (under ASan,
 * a launch may touch only the bytes it asked for). A block's 256
 * threads run as fibers of tests/emu/emu.h, and the collectives meet at
 * its barriers (a warp's 32, the block's 256): a thread missing from one
 * is a deadlock that it reports, and a missing __syncthreads a read of a
 * value not yet written. What it cannot show: timing, and whatever nvcc
 * compiles differently from g++.
 *
 * usage: cores_emu; prints a line a problem, then "N passed, M failed",
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
#include "../emu/wmma.h"

extern "C" {
#include "ref.h"
}

static inline int64_t min(int64_t a, int64_t b) {
  return a < b ? a : b;
}

namespace emu {
constexpr int kThreads = 256;
float slot[kThreads / 32][32];
} // namespace emu

namespace attn_cu {
inline void __syncthreads() {
  emu::block_sync();
}
/* version 2's: all 32 lanes meet, and what each wrote before is seen by
 * every lane after */
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  if (mask != 0xffffffffu)
    abort();
  emu::warp_sync();
}
/* lane l gets lane `from(l)`'s v */
template <class F> inline float exchange(float v, F from) {
  const int w = threadIdx.x / 32, l = threadIdx.x % 32;
  emu::slot[w][l] = v;
  emu::warp_sync();
  float r = emu::slot[w][from(l)];
  emu::warp_sync();
  return r;
}
inline float __shfl_xor_sync(unsigned mask, float v, int x) {
  if (mask != 0xffffffffu)
    abort();
  return exchange(v, [x](int l) { return l ^ x; });
}
inline float __shfl_sync(unsigned mask, float v, int src) {
  if (mask != 0xffffffffu)
    abort();
  return exchange(v, [src](int) { return src; });
}
namespace cores {
namespace {
/* the kernel's extern __shared__ array: its largest use, Dh = Dv = 256; a
 * launch's own smem_bytes of it addressable (emu::dynamic_shared) */
alignas(16) float cores_smem[32 * 257 + 32 * 256 + 8 * 256];
} // namespace
} // namespace cores
namespace v2 {
namespace {
/* version 2's, for Dh = Dv = 256 */
alignas(128) unsigned char smem2[188672];
} // namespace
} // namespace v2
} // namespace attn_cu

#undef __shared__
#define __shared__
#include "flash_cores.cuh"
#include "flash_wmma.cuh"

/* One problem: no projections. past: a kv cache's per-item past lengths
 * (Lk then counts the past and the Lq new keys; item b sees past[b] + Lq
 * of them). splits: the key ranges, 0 for split_count's. */
struct problem {
  const char *name;
  int64_t B, Lq, Lk, H, Hkv, Dh, Dv;
  int causal;
  int lengths; /* key lengths {Lk, Lk / 3, 0, ...} */
  int64_t wl, wr;
  int softcap, bias, allow, alibi;
  int64_t past[3];
  int64_t splits;
  int paged; /* K and V from pages (attn.h) rather than from k and v */
};

static double rnd(uint64_t *s) { /* uniform [-1, 1) */
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(*s >> 11) / (double)(1ull << 52) - 1.0;
}

/* Runs pb through versions 1 and 4 (v2 0, float inputs) or version 2 (v2
 * 1: bf16 inputs, which both references then read rounded). */
static int run(const problem &pb, uint64_t seed, int v2) {
  using namespace attn_cu;
  const int64_t B = pb.B, Lq = pb.Lq, Lk = pb.Lk, H = pb.H, Hkv = pb.Hkv,
                Dh = pb.Dh, Dv = pb.Dv;
  const bool kv = pb.past[0] > 0;
  std::vector<float> q(B * Lq * H * Dh), k(B * Lk * Hkv * Dh),
      v(B * Lk * Hkv * Dv), bias(Lq * Lk), slopes(H);
  std::vector<uint8_t> allow(Lq * Lk);
  std::vector<int64_t> len(B), past(B);
  for (auto &x : q)
    x = (float)(2.5 * rnd(&seed));
  for (auto &x : k)
    x = (float)(2.5 * rnd(&seed));
  for (auto &x : v)
    x = (float)rnd(&seed);
  auto to_bf16 = [](std::vector<float> &x) {
    std::vector<__nv_bfloat16> h(x.size());
    for (size_t e = 0; e < x.size(); e++) {
      h[e] = __float2bfloat16_rn(x[e]);
      x[e] = __bfloat162float(h[e]);
    }
    return h;
  };
  std::vector<__nv_bfloat16> q16, k16, v16;
  if (v2)
    q16 = to_bf16(q), k16 = to_bf16(k), v16 = to_bf16(v);
  for (auto &x : bias)
    x = (float)rnd(&seed);
  for (auto &x : allow)
    x = rnd(&seed) < 0.4;
  for (int64_t h = 0; h < H; h++)
    slopes[h] = 0.05f * (float)(h + 1);
  for (int64_t b = 0; b < B; b++) {
    len[b] = b == 0 ? Lk : b == 1 ? Lk / 3 : 0;
    past[b] = pb.past[b];
    if (kv) /* as forward.cu: the item's keys end at past + Lq */
      len[b] = past[b] + Lq;
  }

  /* the kernels' arguments, as forward.cu fills them */
  args a = {};
  a.q = q.data(), a.k = k.data(), a.v = v.data();
  if (v2)
    a.q = q16.data(), a.k = k16.data(), a.v = v16.data(), a.bf16 = 1;
  a.key_lengths = pb.lengths || kv ? len.data() : nullptr;
  a.past = kv ? past.data() : nullptr;
  a.slopes = pb.alibi ? slopes.data() : nullptr;
  a.allow = pb.allow ? allow.data() : nullptr;
  a.allow_st[2] = Lk, a.allow_st[3] = 1;
  a.bias = pb.bias ? bias.data() : nullptr;
  a.bias_st[2] = Lk, a.bias_st[3] = 1;
  a.B = B, a.Lq = Lq, a.Lk = Lk, a.H = H, a.Hkv = Hkv, a.Dh = Dh, a.Dv = Dv;
  a.scale = (float)(1.0 / sqrt((double)Dh));
  a.causal = pb.causal;
  const int64_t big = Lq > Lk ? Lq : Lk; /* attn_plan_t's effective sides */
  a.wl = pb.wl >= 0 && pb.wl < big ? pb.wl : -1;
  a.wr = pb.wr >= 0 && pb.wr < big ? pb.wr : -1;
  a.has_softcap = pb.softcap, a.softcap = 3.0f;
  a.splits = pb.splits ? pb.splits : split_count(B, Lq, Lk, H, Hkv);
  /* the pages, as attn.h lays them out, NaN wherever no key is written */
  const int64_t maxp = (Lk + ATTN_KV_PAGE - 1) / ATTN_KV_PAGE;
  const int64_t Dvp = (Dv + 15) / 16 * 16, ldv = Hkv * Dvp + 16;
  const int64_t voff = (int64_t)attn_kv_v_offset(Hkv, Dh);
  std::vector<std::vector<float>> store(pb.paged ? B * maxp : 0);
  std::vector<float *> table(B * maxp, nullptr);
  for (int64_t b = 0; b < B && pb.paged; b++)
    for (int64_t t = 0; t < Lk; t++) {
      std::vector<float> &pg = store[b * maxp + t / ATTN_KV_PAGE];
      if (pg.empty())
        pg.assign(attn_kv_page_floats(Hkv, Dh, Dv), NAN);
      table[b * maxp + t / ATTN_KV_PAGE] = pg.data();
      for (int64_t g = 0; g < Hkv; g++) {
        for (int64_t d = 0; d < Dh; d++)
          pg[(g * Dh + d) * ATTN_KV_LDK + t % ATTN_KV_PAGE] =
              k[((b * Lk + t) * Hkv + g) * Dh + d];
        for (int64_t d = 0; d < Dv; d++)
          pg[voff + t % ATTN_KV_PAGE * ldv + g * Dvp + d] =
              v[((b * Lk + t) * Hkv + g) * Dv + d];
      }
    }
  if (pb.paged) {
    a.pages = table.data();
    a.maxp = maxp, a.Dvp = Dvp, a.ldv = ldv, a.voff = voff;
    a.k = a.v = nullptr; /* read in place, never from k and v */
  }
  const int64_t rows = B * H * Lq;
  std::vector<float> concat(B * Lq * H * Dv, NAN), lse(rows, NAN),
      part(a.splits * rows * (Dv + 2), NAN);
  a.concat = concat.data(), a.lse = lse.data();
  a.part = a.splits > 1 ? part.data() : nullptr;

  /* float64, written out: every allowed key's exp(s − m) */
  std::vector<double> want(concat.size()), want_lse(rows);
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t i = 0; i < Lq; i++) {
        const int64_t g = h / (H / Hkv);
        std::vector<double> s(Lk, -INFINITY);
        double m = -INFINITY;
        for (int64_t j = 0; j < Lk; j++) {
          if (!allowed(a, b, h, i, j))
            continue;
          double dot = 0;
          for (int64_t d = 0; d < Dh; d++)
            dot += (double)q[((b * Lq + i) * H + h) * Dh + d] *
                   k[((b * Lk + j) * Hkv + g) * Dh + d];
          s[j] = score(a, b, h, i, j, (float)dot);
          m = fmax(m, s[j]);
        }
        double l = 0;
        std::vector<double> o(Dv, 0.0);
        for (int64_t j = 0; j < Lk; j++) {
          if (s[j] == -INFINITY)
            continue;
          double p = exp(s[j] - m);
          l += p;
          for (int64_t d = 0; d < Dv; d++)
            o[d] += p * v[((b * Lk + j) * Hkv + g) * Dv + d];
        }
        for (int64_t d = 0; d < Dv; d++)
          want[((b * Lq + i) * H + h) * Dv + d] = l > 0 ? o[d] / l : 0;
        want_lse[(b * H + h) * Lq + i] = l > 0 ? m + log(l) : -INFINITY;
      }

  /* flash_cores' grids, each with the dynamic shared memory that
   * flash_cores.cu gives it: smem_bytes for flash_kernel, none for
   * combine_kernel */
  if (v2) {
    /* launch_flash_v2's grid and shared memory, which starts as NaNs;
     * WMMA's loads and stores must stay inside the launch's bytes */
    const size_t bytes = v2::v2_layout(Dh, Dv).total;
    const emu::dynamic_shared smem(v2::smem2, sizeof v2::smem2, bytes);
    emu::wmma_layouts(seed);
    emu::wmma_region(v2::smem2, bytes);
    emu::launch(
        dim3((unsigned)((Lq + v2::kV2Rows - 1) / v2::kV2Rows), (unsigned)H,
             (unsigned)B),
        v2::kV2Warps * 32, [&] { v2::flash_v2_kernel(a); },
        [bytes] { memset(v2::smem2, 0xff, bytes); });
  } else {
    const emu::dynamic_shared smem(cores::cores_smem, sizeof cores::cores_smem,
                                   cores::smem_bytes(Dh, Dv));
    emu::launch(dim3((unsigned)(Hkv * cores::row_blocks(a)), (unsigned)a.splits,
                     (unsigned)B),
                emu::kThreads, [&] { cores::flash_kernel<float>(a); });
  }
  if (a.splits > 1 && !v2) {
    /* fewer blocks than rows: the combine's grid-stride loop runs too */
    const emu::dynamic_shared none(cores::cores_smem, sizeof cores::cores_smem,
                                   0);
    emu::launch(dim3((unsigned)((rows + 15) / 16), 1, 1), emu::kThreads,
                [&] { cores::combine_kernel(a); });
  }

  /* bf16's inputs are exact in the references; P in bf16 is not */
  const double tol = v2 ? 1e-2 : 1e-5, lse_tol = v2 ? 1e-3 : 1e-5;
  int bad = 0;
  auto err_of = [&](const std::vector<double> &w) {
    double num = 0, den = 0;
    for (size_t e = 0; e < concat.size(); e++) {
      num += (concat[e] - w[e]) * (concat[e] - w[e]);
      den += w[e] * w[e];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
  };
  double e1 = err_of(want), e2 = -1;
  if (!(e1 <= tol)) {
    printf("%s: output's relative error %.3e\n", pb.name, e1);
    bad++;
  }
  if (!kv) { /* and tests/ref.c's */
    attn_params_t p = {};
    p.query = {q.data(), 3, {B, Lq, H * Dh}};
    p.key = {k.data(), 3, {B, Lk, Hkv * Dh}};
    p.value = {v.data(), 3, {B, Lk, Hkv * Dv}};
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
    ref_result_t ref;
    if (ref_attention(&p, &ref) != 0) {
      printf("%s: the reference cannot read it\n", pb.name);
      return 1;
    }
    std::vector<double> w(concat.size());
    for (int64_t b = 0; b < B; b++)
      for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < Lq; i++)
          for (int64_t d = 0; d < Dv; d++)
            w[((b * Lq + i) * H + h) * Dv + d] =
                ref.head_outputs[((b * H + h) * Lq + i) * Dv + d];
    ref_result_free(&ref);
    e2 = err_of(w);
    if (!(e2 <= tol)) {
      printf("%s: output's relative error %.3e against ref_attention\n",
             pb.name, e2);
      bad++;
    }
  }
  int dead = 0;
  for (int64_t r = 0; r < rows && bad < 8; r++) {
    const double w = want_lse[r], g = lse[r];
    const int64_t b = r / (H * Lq), h = r / Lq % H, i = r % Lq;
    if (w == -INFINITY) {
      dead++;
      bool zeros = true;
      for (int64_t d = 0; d < Dv; d++)
        zeros = zeros && concat[((b * Lq + i) * H + h) * Dv + d] == 0.f;
      if (g != -INFINITY || !zeros) {
        printf("%s: dead row %lld: lse %.9g, output %s\n", pb.name,
               (long long)r, g, zeros ? "zeros" : "not zeros");
        bad++;
      }
    } else if (!(fabs(g - w) <= lse_tol * fmax(1.0, fabs(w)))) {
      printf("%s: lse row %lld: %.9g, expected %.9g\n", pb.name, (long long)r,
             g, w);
      bad++;
    }
  }
  printf("%s%s: %lld ranges, %d dead rows, error %.2e (ref.c %.2e): %s\n",
         v2 ? "version 2, " : "", pb.name, v2 ? 1ll : (long long)a.splits, dead,
         e1, e2, bad ? "FAILED" : "ok");
  return bad != 0;
}

int main() {
  const int64_t n = -1;
  /* clang-format off */
  static const problem pbs[] = {
      {"a step: Lq 1 over 1000 keys, G 4, causal", 1, 1, 1000, 8, 2, 64, 64,
       1, 0, n, n, 0, 0, 0, 0, {}, 0},
      {"Lq 1, key lengths (one 0: dead), ALiBi, softcap, 64 ranges", 3, 1,
       700, 4, 4, 32, 32, 0, 1, n, n, 1, 0, 0, 1, {}, 64},
      {"Lq 3, G 3 (two row blocks), window, bias, Dh 40, Dv 24", 2, 3, 900,
       6, 2, 40, 24, 0, 0, 200, 0, 0, 1, 0, 0, {}, 0},
      {"a kv cache's steps: past 500 and 37, Lq 2, G 2, causal", 2, 2, 602,
       4, 2, 64, 64, 1, 0, n, n, 0, 0, 0, 0, {500, 37}, 0},
      {"past with a window and ALiBi, Lq 1, MQA (G 8)", 2, 1, 301, 8, 1, 16,
       16, 1, 0, 64, n, 0, 0, 0, 1, {300, 5}, 0},
      {"Lq 40 top-left, G 2, allow, 3 ranges", 1, 40, 300, 4, 2, 32, 32, 2,
       0, n, n, 0, 0, 1, 0, {}, 3},
      {"Lq 20 > Lk 9, bottom-right (dead rows), 5 ranges", 1, 20, 9, 2, 1,
       8, 8, 1, 0, n, n, 0, 0, 0, 0, {}, 5},
      {"Dh 256, Dv 256, Lq 1, 260 keys, split_count's", 1, 1, 260, 2, 2,
       256, 256, 0, 0, n, n, 0, 0, 0, 0, {}, 0},
      {"Dh 128, G 4, Lq 1, one range", 1, 1, 200, 4, 1, 128, 128, 0, 0, n,
       n, 0, 0, 0, 0, {}, 1},
      {"version 1: L 70 causal, G 2, one range, key lengths", 2, 70, 70, 4,
       2, 32, 32, 1, 1, n, n, 0, 0, 0, 0, {}, 1},
      {"version 1: Lq 45 > Lk 20 (dead rows), G 1, softcap, bias", 1, 45,
       20, 2, 2, 16, 8, 1, 0, n, n, 1, 1, 0, 0, {}, 1},
      {"pages: past 500 and 37, Lq 2, G 2, causal", 2, 2, 602, 4, 2, 64,
       64, 1, 0, n, n, 0, 0, 0, 0, {500, 37}, 0, 1},
      {"pages: past 300 and 5, window from mid-page, ALiBi, MQA, Dv 24", 2,
       1, 301, 8, 1, 16, 24, 1, 0, 100, n, 0, 0, 0, 1, {300, 5}, 0, 1},
      {"pages: past 130, Lq 3, G 3, Dh 40, one range (version 1)", 1, 3,
       133, 6, 2, 40, 40, 1, 0, n, n, 0, 0, 0, 0, {130}, 1, 1},
  };
  /* version 2's own: several row blocks, a last one part empty, Dh ≠ Dv
   * either way, widths 16 and 256 */
  static const problem v2s[] = {
      {"L 130 causal, bias, allow, ALiBi, softcap", 2, 130, 130, 2, 2, 64,
       64, 1, 0, n, n, 1, 1, 1, 1, {}, 0},
      {"Dh 256, Lq 100, Lk 150 top-left", 1, 100, 150, 2, 1, 256, 256, 2,
       0, n, n, 0, 0, 0, 0, {}, 0},
      {"Dh 64, Lq 70, Lk 150, window 40/10, softcap", 1, 70, 150, 2, 2, 64,
       64, 0, 0, 40, 10, 1, 0, 0, 0, {}, 0},
      {"Dh 128, Dv 64, Lq 65, Lk 200, G 2, key lengths", 3, 65, 200, 4, 2,
       128, 64, 0, 1, n, n, 0, 0, 0, 0, {}, 0},
      {"Dh 32, Dv 128, Lq 200 > Lk 64 bottom-right (dead rows)", 1, 200,
       64, 1, 1, 32, 128, 1, 0, n, n, 0, 0, 0, 0, {}, 0},
      {"Dh 16, Lq 3, Lk 37", 1, 3, 37, 1, 1, 16, 16, 0, 0, n, n, 0, 0, 0, 0,
       {}, 0},
      {"L 300 causal, G 2, Dh 64", 1, 300, 300, 2, 1, 64, 64, 1, 0, n, n,
       0, 0, 0, 0, {}, 0},
  };
  /* clang-format on */
  int failed = 0, passed = 0;
  for (size_t i = 0; i < sizeof pbs / sizeof *pbs; i++)
    (run(pbs[i], 91 + i, 0) ? failed : passed)++;
  /* and version 2, bf16, on every problem it takes (no pages: forward.cu
   * reads them out first), then its own */
  for (size_t i = 0; i < sizeof pbs / sizeof *pbs; i++)
    if (pbs[i].Dh % 16 == 0 && pbs[i].Dv % 16 == 0 && !pbs[i].paged)
      (run(pbs[i], 91 + i, 1) ? failed : passed)++;
  for (size_t i = 0; i < sizeof v2s / sizeof *v2s; i++)
    (run(v2s[i], 191 + i, 1) ? failed : passed)++;
  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
