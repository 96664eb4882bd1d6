/* core/cuda/kernels.h: the CUDA backend's kernels, as host launchers.
 * C++ (nvcc) only; not installed, not API.
 *
 * Device layouts (row-major, everything in device memory):
 *   q       [B, Lq, H·Dh]      float or bfloat16, unscaled
 *   k       [B, Lk, Hkv·Dh]    float or bfloat16
 *   v       [B, Lk, Hkv·Dv]    float or bfloat16
 *   concat  [B, Lq, H·Dv]      float: the heads' outputs side by side
 *   lse     [B, H, Lq]         float: m + log(l) of each query row, -inf
 *                              where every key is masked (a dead row)
 *   weights [B, H, Lq, Lk]     float
 * Query head h reads kv head h / (H / Hkv). Scores follow attn.h: s =
 * scale·q·k, then softcap, then the bias, then ALiBi; a key is attended iff
 * the causal mask, the key lengths, the window and the allow mask all allow
 * it (a bias of -inf masks it too). A dead row's output and weights are 0.
 * Every launcher enqueues on `s` and returns the launch's error
 * (cudaGetLastError), never synchronising. */
#ifndef ATTN_CUDA_KERNELS_H
#define ATTN_CUDA_KERNELS_H

#include <cuda_runtime.h>
#include <stdint.h>

namespace attn_cu {

/* One attention problem, by value into every kernel. */
struct args {
  const void *q, *k, *v; /* float, or __nv_bfloat16 with bf16 */
  int bf16;
  float *concat;
  float *lse;
  const int64_t *key_lengths; /* [B] or nullptr */
  const int64_t *past;        /* [B] with a kv cache, or nullptr: item b's
                                 query i sits at key past[b] + i (its
                                 causal diagonal, window and ALiBi); else
                                 at key Lk − Lq + i */
  const float *slopes;        /* [H] ALiBi slopes or nullptr */
  const uint8_t *allow;       /* the allow mask or nullptr, and */
  int64_t allow_st[4];        /* its element strides over [B, H, Lq, Lk] */
  const float *bias;          /* the score bias or nullptr, and */
  int64_t bias_st[4];         /* its strides (0 where broadcast) */
  int64_t B, Lq, Lk, H, Hkv, Dh, Dv;
  float scale;
  int causal;     /* attn_causal_t */
  int64_t wl, wr; /* window sides, -1 if unbounded (attn_plan_t) */
  int has_softcap;
  float softcap;
  /* version 4's key splits (split_count) and, with more than one, their
   * partial results: part_o [splits, B, H, Lq, Dv] then part_ml [splits,
   * B, H, Lq, 2] (each row's m and l), splits·B·H·Lq·(Dv + 2) floats of
   * device scratch; 0 and nullptr elsewhere */
  int64_t splits;
  float *part;
  /* versions 1 and 4 only: a kv cache's pages in device memory (kv_args'
   * layout; item b's page i at pages[b·maxp + i]), from which they read K
   * and V in place, as float, rather than from k and v (nullptr: from k
   * and v) */
  float *const *pages;
  int64_t maxp, Dvp, ldv, voff;
};

/* The key ranges version 4 takes for a call of B items, Lq rows, Lk keys
 * and H heads over Hkv: 1 where its blocks (B·Hkv·ceil(H/Hkv·Lq/8)) fill
 * the GPU already (kSplitTarget of them, twice an H100's or H200's 132
 * SMs), else enough to reach that, each split at least 4 tiles (128 keys),
 * at most 64. Depends on the shape alone, so that the plan's layout can
 * reserve the partials. Host and device. */
constexpr int64_t kSplitTarget = 264;
__host__ __device__ inline int64_t
split_count(int64_t B, int64_t Lq, int64_t Lk, int64_t H, int64_t Hkv) {
  const int64_t rows = H / Hkv * Lq, blocks = B * Hkv * ((rows + 7) / 8);
  if (blocks >= kSplitTarget)
    return 1;
  int64_t s = (kSplitTarget + blocks - 1) / blocks;
  const int64_t most = (Lk + 127) / 128; /* splits of 4 tiles or more */
  s = s < most ? s : most;
  s = s < 64 ? s : 64;
  return s < 1 ? 1 : s;
}

/* Versions 1 and 4 (flash_cores.cuh, flash_cores.cu): flash attention on
 * CUDA cores. A block of 8 warps takes 8 rows of one (batch item, kv
 * head): the H/Hkv query heads that read it, at consecutive queries, one
 * row a warp; key and value tiles of 32 keys are staged in shared memory
 * as float and shared by the 8 rows; lane j scores key j of the tile, the
 * warp keeps the running max m, sum l and the Dv accumulators (8 per
 * lane) of the online softmax. Only the tiles inside the block's key
 * range (causal, key lengths, window) are visited. Version 1 visits them
 * in one block; version 4, for calls of few query rows (a session's step:
 * Lq 1), whose grid would leave most of the GPU idle, splits them into
 * `splits` ranges (split_count), a block each, and a second kernel
 * merges the ranges' partial results (FlashDecoding's idea). Both write
 * concat and lse; any head width to 256, fp32 or bf16 inputs; K and V
 * from a kv cache's pages in place where a.pages is set. */
/* Version 2: bf16 Q, K, V with Dh and Dv multiples of 16, on tensor cores
 * (WMMA 16×16×16, float accumulators): 4 warps, 16 query rows each, key
 * tiles of 64; S and the output accumulators in shared memory (see
 * flash_wmma.cuh). Writes concat and lse, as version 1 does.
 *
 * Version 3 (flash_mma.cu, flash_mma.cuh): Q, K, V with Dh = Dv in
 * {32, 64, 128}, on tensor cores through mma.sync (FlashAttention-2's
 * structure): bf16 on m16n8k16, fp32 on m16n8k8 tf32 with three MMAs a
 * product (3xTF32, near fp32's error); 8 warps, 16 query rows each, key
 * tiles of 64 in shared memory (cp.async, double-buffered), S, P and the
 * output accumulators in registers. Writes concat and lse, as version 1
 * does.
 *
 * flash() with `version` 0 runs version 2 where it applies (bf16), else
 * version 1; 1 forces version 1; 3 runs version 3 where it applies (bf16
 * or fp32), else as 0 does; 4 runs version 4 (the tests and the
 * benchmark compare them). Versions 3 and 4 are not the default until
 * they have passed check_cuda on a GPU and been measured there
 * (docs/cuda.md). *ran says which ran. */
cudaError_t flash(const args &a, int version, int *ran, cudaStream_t s);

/* Whether version 3 takes a, and version 3 itself (flash() dispatches). */
bool flash_v3_fits(const args &a);
cudaError_t flash_v3(const args &a, cudaStream_t s);
/* Versions 1 (ranges 1) and 4 (ranges a.splits, with a.part as the plan
 * laid it out; without it, one range). */
cudaError_t flash_cores(const args &a, int64_t ranges, cudaStream_t s);

/* The dense weights [B, H, Lq, Lk] = exp(s − lse), recomputing each score
 * (one block per query row); dead rows and masked keys are 0. */
cudaError_t weights(const args &a, float *w, cudaStream_t s);

/* mean[b, i, j] = Σ_h w[b, h, i, j] / H. */
cudaError_t mean_weights(const float *w, int64_t B, int64_t H, int64_t Lq,
                         int64_t Lk, float *mean, cudaStream_t s);

/* heads[b, h, i, d] = concat[b, i, h·Dv + d]. */
cudaError_t head_outputs(const float *concat, int64_t B, int64_t Lq, int64_t H,
                         int64_t Dv, float *heads, cudaStream_t s);

/* Per head of Q or K, in place, as the CPU core does it (attn.h): an
 * RMSNorm with w, x·w / sqrt(mean(x²) + eps) in float64, when w is given;
 * then, with freq, the rope: pair i (of `half`; (i, i + half) with split,
 * else (2i, 2i + 1)) rotated by pos·freq[i], the angle's cosine and sine in
 * float64. x is [B·L, nh·Dh]; row r = b·L + t is at position pos[t]
 * (pos_rank 1), pos[b·L + t] (pos_rank 2), or off + t (pos_rank 0; with
 * past, past[b] + t). One warp a (row, head). */
struct heads_args {
  float *x;
  int64_t B, L, nh, Dh;
  const float *w; /* [Dh] or nullptr */
  double eps;
  const double *freq; /* [half] or nullptr */
  int64_t half;
  int split;
  const int64_t *pos;
  int pos_rank;
  int64_t off;
  const int64_t *past; /* [B] or nullptr: pos_rank 0 is then past[b] + t */
};
cudaError_t transform_heads(const heads_args &h, cudaStream_t s);

/* The end of a projection, in one pass over x [rows, cols]: x[r, c] +=
 * bias[c] where bias is given; *flag = 1 where flag is given and some x
 * is not finite (flag is otherwise left); x16 = bfloat16(x), rounded to
 * nearest even, where x16 is given. Each part is optional. */
cudaError_t finish(float *x, const float *bias, int64_t rows, int64_t cols,
                   int *flag, void *x16, cudaStream_t s);

/* dst[i] = bfloat16(src[i]), rounded to nearest even. */
cudaError_t to_bf16(const float *src, void *dst, int64_t n, cudaStream_t s);

/* *flag = 1 if some x[i] is infinite or NaN (flag is otherwise left);
 * with skip_neg_inf, -inf is not counted (a bias of -inf is a mask). */
cudaError_t nonfinite(const float *x, int64_t n, int skip_neg_inf, int *flag,
                      cudaStream_t s);

/* A kv cache's pages (attn.h, attn_kv_t) in device memory: item b's page
 * i is pages[b·maxp + i] (null past the item's last page). Each page holds
 * K transposed, [Hkv·Dh, ATTN_KV_LDK], then from float voff V, [64, ldv]
 * with head g's Dv values at column g·Dvp. */
struct kv_args {
  float *const *pages;
  const int64_t *past; /* [B] */
  int64_t B, Lq, Lk, maxp, Hkv, Dh, Dv, Dvp, ldv, voff;
};

/* Writes the call's new keys and values, knew [B·Lq, Hkv·Dh] and vnew
 * [B·Lq, Hkv·Dv], into item b's slots past[b] .. past[b] + Lq − 1 (V's
 * head padding to Dvp zeroed), then zeroes the rest of a page whose first
 * slot this call wrote: the cells the CPU core writes and zeroes. */
cudaError_t kv_write(const kv_args &a, const float *knew, const float *vnew,
                     cudaStream_t s);

/* Reads every item's keys and values out of its pages into k [B, Lk,
 * Hkv·Dh] and v [B, Lk, Hkv·Dv], zeros past its past[b] + Lq keys. */
cudaError_t kv_read(const kv_args &a, float *k, float *v, cudaStream_t s);

/* absmax[b] = max(absmax[b], the bits of max |x| over item b's rows of x
 * [B·rows, cols]): a float's bits, which order as the floats do for
 * x >= 0. */
cudaError_t item_absmax(const float *x, int64_t B, int64_t rows, int64_t cols,
                        unsigned *absmax, cudaStream_t s);

/* The reductions of the weights (attn.h's attn_reduce_t) of rows [q0, q1)
 * and keys [k0, k1), each weight exp(s − lse) recomputed as the weights
 * kernel does, after flash has written lse; per head (rH = H) or of the
 * mean over heads (mean_heads, rH = 1: the H heads' weights summed in
 * float32, times 1/H). Each output is optional (nullptr: not asked for):
 *   top_k_index, top_k_value [B, rH, q1 − q0, K]: the K heaviest keys of
 *     [k0, k1), heaviest first, ties to the lower index; −1 and 0 where
 *     fewer than K keys weigh more than 0;
 *   pooled [B, rH, nq, nk]: blocks of pool_q rows × pool_k keys, the mean
 *     (over the cells a block has), max or sum (pool_reduce); pool_acc is
 *     device scratch of as many doubles;
 *   entropy, sink, distance [B, rH, q1 − q0]: over every key, −Σ w·ln w,
 *     Σ_{j < sink_tokens} w, Σ w·|i + Lk − Lq − j|, in float64.
 * One block per row (reduce.cu has the algorithm). */
struct reduce_args {
  int64_t q0, q1, k0, k1, rH;
  int mean_heads;
  int64_t K; /* 0 for none */
  int32_t *top_k_index;
  float *top_k_value;
  int64_t pool_q, pool_k, nq, nk;
  int pool_reduce; /* attn_pool_reduce_t */
  double *pool_acc;
  float *pooled;
  int64_t sink_tokens;
  float *entropy, *sink, *distance;
};
cudaError_t reduce(const args &a, const reduce_args &r, cudaStream_t s);

} // namespace attn_cu

#endif
