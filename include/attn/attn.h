/* attn/attn.h: the attention core's public API.
 *
 * Multi-head attention over float32 tensors, with optional projections,
 * grouped key/value heads, masks, biases, ALiBi and softcapping.
 *
 * Use:
 *   attn_params_t p = {0};          // describe inputs (borrowed) and options
 *   attn_plan_t plan;
 *   if (attn_plan_init(&plan, &p, &exec, &err) < 0) ... // validates everything
 *   void *ws = malloc(plan.workspace_bytes);
 *   attn_outputs_t o = {.out = malloc(plan.out_elems * sizeof(float))};
 *   attn_forward(&plan, &o, ws, plan.workspace_bytes, &err);
 *
 * Shapes, for batch item b and query head h (Hkv divides H, group G = H/Hkv):
 *   query [B, Lq, Eq]  key [B, Lk, Ek]  value [B, Lk, Ev]   (rank 2: B = 1)
 *   Q = query·Wqᵀ + bq : [B, Lq, H·Dh]    K = key·Wkᵀ + bk : [B, Lk, Hkv·Dh]
 *   V = value·Wvᵀ + bv : [B, Lk, Hkv·Dv]  head h reads key/value head h / G
 *   out = concat_h(softmax(mask(s_h))·V_g)·Woᵀ + bo : [B, Lq, Eo]
 * A missing weight is the identity; a bias without a weight is added to the
 * input. A head is a contiguous slice of the feature dimension.
 * Then, per head of Q and K, in this order: an RMSNorm with q_norm / k_norm
 * (Qwen3), and rotary position embeddings (rope), at the positions given
 * (positions_query / positions_key) or the default ones.
 *
 * Nothing here does I/O or exits. attn_plan_init checks every input that
 * attn_forward reads, so untrusted input may be passed straight to it. */
#ifndef ATTN_ATTN_H
#define ATTN_ATTN_H

#include <stddef.h>
#include <stdint.h>

#include "attn/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ATTN_VERSION "0.1.0"
#define ATTN_MAX_RANK 4

/* A borrowed view of a dense row-major tensor. rank 0 means absent. The
 * element type is fixed by the field that holds it (see attn_params_t). */
typedef struct attn_tensor {
  const void *data;
  int rank;
  int64_t dim[ATTN_MAX_RANK];
} attn_tensor_t;

typedef enum attn_causal {
  ATTN_CAUSAL_NONE = 0,
  ATTN_CAUSAL_BOTTOM_RIGHT, /* query i sees key j iff j <= i + (Lk - Lq) */
  ATTN_CAUSAL_TOP_LEFT      /* query i sees key j iff j <= i */
} attn_causal_t;

typedef enum attn_alibi {
  ATTN_ALIBI_NONE = 0,
  ATTN_ALIBI_DEFAULT, /* slopes of the ALiBi paper's reference code */
  ATTN_ALIBI_SLOPES   /* alibi_slopes, one per query head */
} attn_alibi_t;

/* Rotary position embeddings (RoFormer, Su et al. 2021), on Q and K after
 * projection: feature pairs (x1, x2) of each head, among its first `dims`
 * features, rotate by the angle pos·f_i, f_i = theta^(-2i/dims), i =
 * 0 .. dims/2 - 1:  x1' = x1·cos − x2·sin,  x2' = x2·cos + x1·sin. The
 * angles, their cosines and sines are computed in float64. */
typedef enum attn_rope_style {
  ATTN_ROPE_NONE = 0,
  ATTN_ROPE_HALF,       /* pair i is (i, i + dims/2): Hugging Face's
                           rotate_half, GPT-NeoX, Llama in transformers */
  ATTN_ROPE_INTERLEAVED /* pair i is (2i, 2i + 1): GPT-J, Meta's Llama */
} attn_rope_style_t;

typedef enum attn_rope_scaling {
  ATTN_ROPE_SCALING_NONE = 0,
  ATTN_ROPE_SCALING_LINEAR, /* f_i / factor (position interpolation) */
  ATTN_ROPE_SCALING_LLAMA3  /* Llama 3.1: f_i / factor for wavelengths over
                               original_max_position / low_freq_factor, f_i
                               under original_max_position /
                               high_freq_factor, and between them
                               (1 − s)·f_i / factor + s·f_i with s =
                               (original_max_position / wavelength −
                               low_freq_factor) / (high_freq_factor −
                               low_freq_factor) */
} attn_rope_scaling_t;

typedef struct attn_rope {
  attn_rope_style_t style;
  double theta; /* base, finite and > 0 (10000 is usual; a layer's
                   config must have > 1, server/model) */
  int64_t dims; /* rotated features per head: even, 2 .. Dh; 0 means Dh */
  attn_rope_scaling_t scaling;
  double factor;                /* LINEAR and LLAMA3: finite, > 0 (a
                                   layer's config: >= 1) */
  double low_freq_factor;       /* LLAMA3: > 0 */
  double high_freq_factor;      /* LLAMA3: > low_freq_factor */
  double original_max_position; /* LLAMA3: > 0 */
} attn_rope_t;

/* Positions, with rope: at most ATTN_MAX_POSITION. */
#define ATTN_MAX_POSITION ((int64_t)1 << 31)

/* A paged key/value cache (PagedAttention: Kwon et al., 2023), owned by
 * the caller, for decoding: each batch item b has past[b] keys and values
 * cached already, in pages of ATTN_KV_PAGE tokens. attn_forward projects
 * the call's Lq new tokens (its query, key and value inputs all have Lq
 * rows), writes their keys and values into the item's pages at positions
 * past[b] .. past[b] + Lq − 1, and attends the new queries over all
 * past[b] + Lq keys. Lk is then max(past) + Lq; masks, positions and
 * weights are over those keys (item b's keys from past[b] + Lq on are
 * masked); a query's default position, and its causal diagonal, is its
 * key's, past[b] + i.
 *
 * A page holds, for every kv head, the keys transposed and then the
 * values, in the kernels' layout: K [Hkv·Dh, ATTN_KV_LDK] (token t of the
 * page in column t), then V [ATTN_KV_PAGE, Hkv·Dvp + 16] at float offset
 * attn_kv_v_offset (head g's Dv values at column g·Dvp, Dvp = Dv rounded
 * up to 16): attn_kv_page_floats floats, 64-byte aligned. The core writes
 * only the slots of the new tokens, and zeroes the rest of a page whose
 * first slot it writes. The slots of a page past the tokens it holds must
 * be finite: as the core left them (zeros, or tokens since dropped by the
 * caller), or zeros. The pages it writes must be the caller's alone (copy
 * a shared page first). A page's layout depends only on Hkv, Dh and Dv, so a
 * page from one call may be read by any later call of the same shape.
 *
 * With the cuda backend the pages are device memory (attn_cuda_alloc) and
 * `device` is 1; the page tables, past and k_absmax stay host arrays. The
 * layout, and what the core writes and zeroes, are the same. Each backend
 * refuses the other's pages (ATTN_ENOTSUP naming kv). */
#define ATTN_KV_PAGE 64
#define ATTN_KV_LDK (ATTN_KV_PAGE + 16)

typedef struct attn_kv {
  const int64_t *past;        /* [B]: tokens already cached, each >= 0 */
  float *const *const *pages; /* [B]: item b's page table, at least
                                 ceil((past[b] + Lq) / ATTN_KV_PAGE) pages */
  float *k_absmax;            /* [B] in and out: an upper bound of |k| over
                                 the item's cached keys (0 for none); raised
                                 to cover the new keys by a call that
                                 returns 0 */
  int device;                 /* the pages are device memory (cuda) */
} attn_kv_t;

/* The floats of one page, and the offset of its values, for a cache of
 * Hkv heads of Dh key and Dv value features. */
size_t attn_kv_page_floats(int64_t Hkv, int64_t Dh, int64_t Dv);
size_t attn_kv_v_offset(int64_t Hkv, int64_t Dh);

/* Reductions of the attention weights, computed inside attn_forward without
 * the [Lq, Lk] matrix ever existing: the top keys of each query, a pooled
 * map, and per-query statistics. Each is over the final softmax weights
 * (masked keys weigh 0), of each head, or of their mean over heads.
 * Zero-initialise; the reductions run when top_k, pool_q or stats is set.
 *
 * Rows are the queries [q0, q1) of query_range, Lq' = q1 − q0 of them
 * (default the whole axis), and H' is H per head or 1 for the mean:
 *   top_k:  the k heaviest keys of [k0, k1) (key_range) per row, heaviest
 *           first, ties to the lower index; index [B, H', Lq', k] int32 of
 *           absolute key positions, value the weights. A key of weight 0
 *           (masked, or below float32's range) is never reported: where
 *           fewer than k keys weigh anything, the rest are index −1, value 0.
 *   pool:   blocks of pool_q rows × pool_k keys of [k0, k1), from the
 *           ranges' first row and key: [B, H', ceil(Lq'/pq), ceil(Lk'/pk)],
 *           each the mean, max or sum of its cells (a partial last block's
 *           mean divides by the cells it has).
 *   stats:  per row, over every key (not only key_range): entropy
 *           −Σ w·ln w (nats), sink Σ_{j < sink_tokens} w, distance
 *           Σ w·|i + off − j| (off = Lk − Lq, or past[b] with a kv cache).
 *           [B, H', Lq'] each; a row with no visible key gives 0. */
#define ATTN_TOP_K_MAX 256

typedef enum attn_pool_reduce {
  ATTN_POOL_MEAN = 0,
  ATTN_POOL_MAX,
  ATTN_POOL_SUM
} attn_pool_reduce_t;

enum {
  ATTN_STAT_ENTROPY = 1,
  ATTN_STAT_SINK = 2,
  ATTN_STAT_DISTANCE = 4,
  ATTN_STAT_ALL = 7
};

typedef struct attn_reduce {
  int mean_heads;         /* 0: per head; 1: of the mean over heads */
  int64_t top_k;          /* 0 (none) or 1 .. ATTN_TOP_K_MAX */
  int64_t pool_q, pool_k; /* both 0 (none) or both >= 1 */
  attn_pool_reduce_t pool_reduce;
  unsigned stats;      /* ATTN_STAT_* bits, 0 for none */
  int64_t sink_tokens; /* >= 0 */
  int has_query_range, has_key_range;
  int64_t query_range[2]; /* 0 <= q0 < q1 <= Lq */
  int64_t key_range[2];   /* 0 <= k0 < k1 <= Lk */
} attn_reduce_t;

/* Everything attn_forward computes from. All tensors are borrowed and must
 * outlive the forward call. Zero-initialise, then set what is used. */
typedef struct attn_params {
  attn_tensor_t query;  /* float [Lq, Eq] or [B, Lq, Eq] */
  attn_tensor_t key;    /* float [Lk, Ek] or [B, Lk, Ek]; absent: query */
  attn_tensor_t value;  /* float [Lk, Ev] or [B, Lk, Ev]; absent: key */
  int64_t num_heads;    /* H >= 1 */
  int64_t num_kv_heads; /* Hkv, divides H; 0 means H */

  /* Projections, nn.Linear layout [out_features, in_features]. */
  attn_tensor_t q_weight;                       /* float [H·Dh, Eq] */
  attn_tensor_t k_weight;                       /* float [Hkv·Dh, Ek] */
  attn_tensor_t v_weight;                       /* float [Hkv·Dv, Ev] */
  attn_tensor_t o_weight;                       /* float [Eo, H·Dv] */
  attn_tensor_t q_bias, k_bias, v_bias, o_bias; /* float [out_features] */
  /* 1: those eight tensors' data are device memory (attn_cuda_alloc),
   * which the cuda backend reads in place rather than copying them in at
   * every call (a layer kept on the GPU); the cpu backend refuses it. */
  int weights_on_device;
  /* For the cuda backend in bf16: q, k, v and o's weights already rounded
   * to bfloat16 (to nearest, ties to even; the float ones' layout) in
   * device memory, which the call then reads in place instead of rounding
   * the float ones at every call: a given one's float data is never read
   * (its shape still counts). NULL where not given; ignored in fp32 and
   * by the cpu backend. */
  const void *weights_bf16[4];

  /* Masks: a key is attended only if every mask given allows it. */
  attn_causal_t causal;
  attn_tensor_t key_lengths; /* int64 [B]: keys j >= len[b] are excluded */
  attn_tensor_t allow;       /* uint8 (nonzero = may attend), rank 2..4, numpy-
                                broadcastable to [B, H, Lq, Lk] */
  int has_window_left, has_window_right; /* an absent side is unbounded */
  int64_t window_left, window_right;     /* i+off-left <= j <= i+off+right,
                                            off = Lk - Lq; each >= 0 */

  /* Score terms, applied in this order after s = scale·q·k:
   * softcap s = c·tanh(s/c); s += bias; s -= slope_h·|i + off - j|. */
  int has_scale;
  float scale; /* default 1/sqrt(Dh) */
  int has_softcap;
  float softcap;      /* c > 0 */
  attn_tensor_t bias; /* float, rank 2..4, broadcastable to [B, H, Lq, Lk] */
  attn_alibi_t alibi;
  attn_tensor_t alibi_slopes; /* float [H], with ATTN_ALIBI_SLOPES only */

  /* Per-head RMSNorm of Q and K before rope: x·w / sqrt(mean(x²) + eps)
   * over each head's Dh features (Qwen3's q_norm and k_norm). */
  attn_tensor_t q_norm, k_norm; /* float [Dh] each, or absent */
  int has_norm_eps;
  float norm_eps; /* finite, >= 0; default 1e-6 */

  /* Rotary position embeddings (attn_rope_t); style NONE: none. */
  attn_rope_t rope;
  /* int64 positions in [0, ATTN_MAX_POSITION), [Lq] / [Lk] (every batch
   * item) or [B, Lq] / [B, Lk]. Absent: keys 0 .. Lk − 1, queries
   * Lk − Lq .. Lk − 1 (the bottom-right alignment of causal). Only with
   * rope. */
  attn_tensor_t positions_query, positions_key;

  /* A key/value cache to append to and attend over (attn_kv_t), or NULL;
   * borrowed, its pages written. */
  const attn_kv_t *kv;

  /* Optional results (see attn_outputs_t). */
  int want_weights;      /* per-head weights [B, H, Lq, Lk] */
  int want_mean_weights; /* mean over heads [B, Lq, Lk] */
  int want_head_outputs; /* per-head outputs [B, H, Lq, Dv] */
  /* Reductions of the weights (attn_reduce_t); not with want_weights or
   * want_mean_weights. */
  attn_reduce_t reduce;
} attn_params_t;

typedef enum attn_isa {
  ATTN_ISA_AUTO = 0, /* the best this CPU runs */
  ATTN_ISA_GENERIC,  /* portable C */
  ATTN_ISA_AVX2,     /* AVX2 + FMA */
  ATTN_ISA_AVX512    /* AVX-512 F/BW/DQ/VL + FMA */
} attn_isa_t;

/* Where a forward call computes. The CPU is the default (zero) and the
 * reference; CUDA exists in a library built with `make CUDA=1` and runs on
 * device 0 (docs/cuda.md). attn_cuda_info says whether it is usable. */
typedef enum attn_backend_kind {
  ATTN_BACKEND_CPU = 0,
  ATTN_BACKEND_CUDA
} attn_backend_kind_t;

/* The arithmetic of the projections and the attention. FP32 everywhere is
 * the default; BF16 (CUDA only) rounds the projections' inputs and Q, K, V
 * to bfloat16 and accumulates in float32. Inputs and outputs stay float32
 * either way. */
typedef enum attn_precision {
  ATTN_PRECISION_FP32 = 0,
  ATTN_PRECISION_BF16
} attn_precision_t;

/* How to run: threads used inside one forward call, the kernel set, and a
 * way to stop early; and the backend and precision. */
typedef struct attn_exec {
  int threads;       /* >= 1; 0 means 1 */
  attn_isa_t isa;    /* a named ISA the CPU lacks is ATTN_ENOTSUP */
  const int *cancel; /* optional, borrowed: once *cancel is nonzero (read
                        atomically), attn_forward skips its remaining tasks
                        and returns ATTN_ECANCELED; the outputs are then
                        incomplete */
  attn_backend_kind_t backend; /* CUDA where unavailable, or with an option
                                  it lacks (docs/cuda.md), is ATTN_ENOTSUP
                                  naming that option */
  attn_precision_t precision;  /* BF16 needs backend CUDA */
} attn_exec_t;

/* The validated problem: derived sizes and the memory attn_forward needs.
 * Filled by attn_plan_init; read-only afterwards. */
typedef struct attn_plan {
  const attn_params_t *params; /* borrowed */
  int batched;                 /* 1 if inputs are rank 3 */
  int64_t B, Lq, Lk, Eq, Ek, Ev, H, Hkv, Dh, Dv, Eo;
  float scale;       /* effective scale */
  int64_t rope_dims; /* rotated features per head; 0 without rope */
  /* Effective window sides: -1 when unbounded. A side of max(Lq, Lk) or
   * more excludes no key (|i + off - j| < max(Lq, Lk) for every pair), so
   * it is -1 too, and every window bound the kernels form stays far from
   * int64 overflow. */
  int64_t window_left, window_right;
  int threads;
  attn_isa_t isa;              /* resolved, never AUTO */
  const int *cancel;           /* from attn_exec_t */
  attn_backend_kind_t backend; /* from attn_exec_t */
  attn_precision_t precision;  /* from attn_exec_t */
  size_t workspace_bytes;      /* host scratch; with CUDA a few bytes (the ALiBi
                                  slopes and the rope's frequencies) */
  size_t device_bytes;         /* with CUDA, the device memory one call takes
                                  from CUDA's stream-ordered pool (its inputs,
                                  intermediates and outputs); 0 on the CPU */
  int64_t out_elems;           /* B·Lq·Eo */
  int64_t weights_elems;       /* B·H·Lq·Lk */
  int64_t mean_elems;          /* B·Lq·Lk */
  int64_t head_elems;          /* B·H·Lq·Dv */
  /* Reductions (attn_reduce_t): any asked for, H', the ranges [q0, q1)
   * and [k0, k1), the pooled map's blocks nq × nk, and the outputs' sizes
   * (0 when not asked for). */
  int reduce;
  int64_t rH, q0, q1, k0, k1, pool_nq, pool_nk;
  /* Effective pool block sides: pool_q and pool_k, each at most its
   * range's length (Lq', Lk'). A larger block is the whole range, the same
   * blocks, and every block bound the kernels form stays far from int64
   * overflow (pool sides may be anything up to 2^63 − 1). */
  int64_t pool_q, pool_k;
  int64_t top_k_elems;  /* B·H'·Lq'·k */
  int64_t pooled_elems; /* B·H'·nq·nk */
  int64_t stats_elems;  /* B·H'·Lq', each statistic asked for */
  double flops;         /* multiply-adds ×2 of projections and attention, as if
                           nothing were masked */
} attn_plan_t;

/* Wall time of each stage of one forward call, in milliseconds. Scores,
 * softmax and mixing run fused, tile by tile, and are timed as one. */
typedef struct attn_timing {
  double projection_ms; /* Q, K and V projections and layout */
  double attention_ms;  /* scores, masks, softmax, mixing */
  double output_ms;     /* output projection */
  double total_ms;
  /* On the cpu backend, each part's busy time: summed over the threads,
   * from the part's start to the end of each thread's last task in it (a
   * thread's wait for the others is not busy). busy / (threads × the
   * part's time) is how evenly its tasks were shared; busy against one
   * thread's part time, how much slower its tasks ran (memory bandwidth,
   * caches). One thread: the part's time. 0 on the cuda backend. */
  double projection_busy_ms, attention_busy_ms, output_busy_ms;
} attn_timing_t;

/* Caller-owned result buffers. out is required; each other buffer is
 * required exactly when the matching want_* flag is set. */
typedef struct attn_outputs {
  float *out;          /* [B, Lq, Eo] */
  float *weights;      /* [B, H, Lq, Lk] */
  float *mean_weights; /* [B, Lq, Lk] */
  float *head_outputs; /* [B, H, Lq, Dv] */
  /* Reductions (attn_reduce_t), each required when asked for: */
  int32_t *top_k_index;             /* [B, H', Lq', k] */
  float *top_k_value;               /* [B, H', Lq', k] */
  float *pooled;                    /* [B, H', nq, nk] */
  float *entropy, *sink, *distance; /* [B, H', Lq'] */
  attn_timing_t timing;             /* filled by attn_forward */
} attn_outputs_t;

/* Validates `p` and derives the plan: every rank, shape, head count, option
 * and size is checked, and none of attn_forward's reads can go out of
 * bounds once this succeeds. `exec` may be NULL (one thread, best ISA).
 * Returns 0, or a negative ATTN_E* code with `err` (may be NULL) naming the
 * offending field and its dimensions. Borrows `p` (the plan keeps the
 * pointer); any thread. The checks cover the values `p` points to as well
 * as its shapes (key_lengths, positions, slopes, norms, a kv cache's past
 * length and pages): a plan holds only while `p` and what it points to
 * are unchanged, so a changed input (a cache after a step) needs a new
 * plan, never a run of the old one. The input data (query, key, value,
 * weights) may change between runs. */
int attn_plan_init(attn_plan_t *plan, const attn_params_t *p,
                   const attn_exec_t *exec, attn_error_t *err);

/* Lowers a plan's threads to `threads`, in [1, plan->threads], for a
 * caller that planned for the most threads it might be given and learns
 * how many it has only when it runs. The workspace it needs
 * (plan->workspace_bytes) shrinks with them, never grows, and the results
 * stay the same to the bit: however the threads split the work, each
 * element is computed by the same operations (core/forward.c), where the
 * BLAS kernel allows (attn_blas_split_invariant). Returns 0, or
 * ATTN_EINVAL with the plan unchanged. Any thread that owns the plan. */
int attn_plan_set_threads(attn_plan_t *plan, int threads);

/* Runs the planned attention. `workspace` is caller-owned scratch of at
 * least plan->workspace_bytes, 64-byte aligned. Writes only the caller's
 * buffers in `o` and the workspace; never allocates. Returns 0, or
 * ATTN_EINVAL / ATTN_ENOSPC for a missing buffer or short workspace, or
 * ATTN_ECANCELED (see attn_exec_t), or ATTN_ENUMERIC when a result does not
 * fit float32 (then the outputs are incomplete).
 *
 * Every output of a call that returns 0 is finite. Scores and softmax never
 * fail on finite inputs: scores that could leave float32's range (huge
 * inputs, scale, bias or ALiBi slopes, or a softcap under 1/FLT_MAX) are
 * computed in float64, per row, and the softmax subtracts the row's max, so
 * an overflowing score row still gets its exact weights. ATTN_ENUMERIC
 * names the stage in its message and the input in err->field:
 *   projection: Q, K or V does not fit float32 (query, key or value; a Q
 *     that overflows only because of the scale is laid out unscaled and
 *     computed in float64 instead);
 *   scores: a bias of +inf or NaN (bias);
 *   output: P·V, a convex combination of value rows accumulated in
 *     float64, rounds past FLT_MAX (value);
 *   output projection: out = concat·o_weightᵀ + o_bias does not fit
 *     (o_weight, or o_bias without a weight).
 * A bias of -inf is a mask, as in PyTorch.
 * Blocks until done, using plan->threads threads (the caller's included);
 * any thread, and several calls may run at once with distinct buffers. */
int attn_forward(const attn_plan_t *plan, attn_outputs_t *o, void *workspace,
                 size_t workspace_bytes, attn_error_t *err);

/* The default ALiBi slopes for H heads, written to slopes[0..H-1]. */
void attn_alibi_default_slopes(int64_t H, float *slopes);

/* What computes: the BLAS and its kernel, and the best SIMD level here. */
typedef struct attn_backend {
  const char *blas;        /* "OpenBLAS" */
  const char *blas_kernel; /* the core type in use, e.g. "SkylakeX" */
  const char *blas_config; /* version and build, e.g. "OpenBLAS 0.3.21
                              DYNAMIC_ARCH ..." */
  attn_isa_t isa;          /* best ISA this CPU runs */
} attn_backend_t;

/* Fills `b`; any thread. */
void attn_backend_info(attn_backend_t *b);

/* "generic", "avx2" or "avx512". */
const char *attn_isa_name(attn_isa_t isa);

/* "cpu" or "cuda"; "fp32" or "bf16"; "unknown" for anything else. */
const char *attn_backend_kind_name(attn_backend_kind_t backend);
const char *attn_precision_name(attn_precision_t precision);

/* The CUDA backend's limits: heads of at most this many features (Dh and
 * Dv; a warp holds a query row, 8 accumulators a lane), and at most this
 * many batch items and heads (a launch grid's y and z). */
#define ATTN_CUDA_MAX_HEAD_DIM 256
#define ATTN_CUDA_MAX_GRID 65535

/* Whether the CUDA backend can run here. */
typedef struct attn_cuda_info {
  int built;              /* 1 in a library built with CUDA=1 */
  int usable;             /* 1 when plans with backend CUDA may run */
  int devices;            /* CUDA devices found; 0 if not built */
  char device[96];        /* device 0's name, "" if none */
  int cc_major, cc_minor; /* its compute capability */
  size_t memory_bytes;    /* its memory */
  int runtime_version;    /* cudaRuntimeGetVersion, e.g. 13000; 0 if none */
  int driver_version;     /* cudaDriverGetVersion; 0 if none */
  char status[160];       /* "ok", or why the backend is unusable */
} attn_cuda_info_t;

/* Fills `info`. The first call probes the devices (it initialises the CUDA
 * runtime: tens of milliseconds where there is a GPU); later calls copy
 * what it found. Once a call has met an error that leaves the CUDA context
 * unusable (a kernel's illegal address, an uncorrectable ECC error, ...:
 * CUDA's "sticky" errors, which only a new process clears), `usable` is 0
 * and `status` names that error, so that callers stop planning for the
 * device. Any thread. */
void attn_cuda_info(attn_cuda_info_t *info);

/* The device memory of the CUDA backend now, in bytes. */
typedef struct attn_cuda_memory {
  size_t pool_reserved; /* what CUDA's stream-ordered pool holds (calls
                           return their memory to it, and it keeps it) */
  size_t pool_used;     /* of that, what running calls and kv cache
                           pages (attn_cuda_alloc) use */
  size_t pool_high;     /* the most the pool has held */
  size_t free, total;   /* the whole device, other users included
                           (cudaMemGetInfo) */
} attn_cuda_memory_t;

/* Fills `m`. Returns 0, or -1 with `m` zeroed where the backend is not
 * usable (attn_cuda_info). Any thread. */
int attn_cuda_memory(attn_cuda_memory_t *m);

/* Device memory for the cuda backend's kv cache pages (attn_kv_t):
 * `bytes` on device 0, 256-byte aligned, its contents undefined (as a new
 * host page's: the core zeroes what it must), usable from any thread's
 * stream once this returns. NULL where the backend is not usable or the
 * device is out of memory; always NULL in a build without CUDA.
 * attn_cuda_free gives it back (NULL is ignored); no call may still be
 * using it. Any thread. */
void *attn_cuda_alloc(size_t bytes);
void attn_cuda_free(void *p);

/* Page-locked ("pinned") host memory of `bytes`, for a call's inputs and
 * outputs: the GPU copies to and from it at the bus's full rate, where
 * from ordinary memory CUDA stages each chunk through a pinned buffer of
 * its own and the CPU waits. To the CPU it is host memory like any other.
 * Pinning is slow (every page is mapped and locked), so pin once and
 * reuse. NULL where the backend is not usable or pinning fails; always
 * NULL in a build without CUDA. attn_cuda_host_free gives it back (NULL
 * is ignored); no call may still be using it. Any thread. */
void *attn_cuda_host_alloc(size_t bytes);
void attn_cuda_host_free(void *p);

/* Copies `bytes` from src to dst and waits for the copy: either may be
 * device memory from attn_cuda_alloc or host memory (a shared page copied
 * before a step writes into it; pages read back). Returns 0, or -1 (the
 * backend not usable, or CUDA's error). Any thread. */
int attn_cuda_copy(void *dst, const void *src, size_t bytes);

/* The OpenBLAS core type to load instead of the one loaded now, whose sgemm
 * uses this CPU's widest vectors ("SkylakeX" with AVX-512, "Haswell" with
 * AVX2), or NULL when the loaded one already does. OpenBLAS reads its
 * OPENBLAS_CORETYPE variable only when it loads, so a program that wants
 * this must set it and re-execute itself before any BLAS call. */
const char *attn_blas_preferred_coretype(void);

/* Whether the OpenBLAS kernel loaded now computes each element of an sgemm
 * the same however the call is split into calls of fewer rows or columns:
 * its AVX-512 kernels do (SkylakeX, measured; attnd loads it on AVX-512
 * CPUs), its Haswell kernel does not. Where it does not, the promise that
 * results are the same to the bit at any thread count (attn_plan_set_threads)
 * does not hold: the projections are split by the threads (core/forward.c),
 * and the last bits may differ between thread counts (well within the
 * float32 reference's tolerance). Any thread. */
int attn_blas_split_invariant(void);

#ifdef __cplusplus
}
#endif

#endif
