/* core/cuda/score.cuh: attn.h's score terms and masks, one element at a
 * time, and the keys a block of query rows can see: written once, for
 * every flash version and the weights kernel (kernels.h has the rules).
 * Device code; header-only. */
#ifndef ATTN_CUDA_SCORE_CUH
#define ATTN_CUDA_SCORE_CUH

#include <math.h>

#include "attn/attn.h"
#include "kernels.h"

namespace attn_cu {

/* The key of item b that query 0 sits at: its causal diagonal's offset,
 * Lk − Lq, or with a kv cache the item's past length. */
__device__ __forceinline__ int64_t item_off(const args &a, int64_t b) {
  return a.past ? a.past[b] : a.Lk - a.Lq;
}

/* Whether query i of item b, head h, may attend key j (i < Lq, j < Lk):
 * key lengths, causal (both alignments), window, the allow mask. With a kv
 * cache, key_lengths also ends each item's keys at past[b] + Lq. */
__device__ __forceinline__ bool allowed(const args &a, int64_t b, int64_t h,
                                        int64_t i, int64_t j) {
  const int64_t off = item_off(a, b);
  if (a.key_lengths && j >= a.key_lengths[b])
    return false;
  if (a.causal == ATTN_CAUSAL_BOTTOM_RIGHT && j > i + off)
    return false;
  if (a.causal == ATTN_CAUSAL_TOP_LEFT && j > i)
    return false;
  if (a.wl >= 0 && j < i + off - a.wl)
    return false;
  if (a.wr >= 0 && j > i + off + a.wr)
    return false;
  if (a.allow && !a.allow[b * a.allow_st[0] + h * a.allow_st[1] +
                          i * a.allow_st[2] + j * a.allow_st[3]])
    return false;
  return true;
}

/* The score of q·k = dot, in attn.h's order: scale, softcap, bias,
 * ALiBi. */
__device__ __forceinline__ float score(const args &a, int64_t b, int64_t h,
                                       int64_t i, int64_t j, float dot) {
  float s = a.scale * dot;
  if (a.has_softcap)
    s = a.softcap * tanhf(s / a.softcap);
  if (a.bias)
    s += a.bias[b * a.bias_st[0] + h * a.bias_st[1] + i * a.bias_st[2] +
                j * a.bias_st[3]];
  if (a.slopes) {
    int64_t d = i + item_off(a, b) - j;
    s -= a.slopes[h] * (float)(d < 0 ? -d : d);
  }
  return s;
}

/* The score of query i and key j, or -inf where the key is masked (a
 * bias of -inf masks too); i < Lq and j < Lk. */
__device__ __forceinline__ float masked_score(const args &a, int64_t b,
                                              int64_t h, int64_t i, int64_t j,
                                              float dot) {
  return allowed(a, b, h, i, j) ? score(a, b, h, i, j, dot) : -INFINITY;
}

/* Whether any score term applies element by element (softcap, bias,
 * ALiBi) or a mask that key_range cannot bound (allow). Without one, a
 * key inside every row's key range scores scale·dot. */
__device__ __forceinline__ bool per_element(const args &a) {
  return a.has_softcap || a.bias || a.slopes || a.allow;
}

/* The keys [lo, hi) that rows [i0, i1) of item b can see at all: every
 * key outside is masked for each of those rows (the allow mask and a bias
 * of -inf aside). A row's own range [lo(i), hi(i)) only moves right as i
 * grows, so [lo(i1 − 1), hi(i0)) is the keys that every row of
 * [i0, i1) sees: key_range(a, b, i, i + 1, ...) gives each end. */
__device__ __forceinline__ void key_range(const args &a, int64_t b,
                                          int64_t i0, int64_t i1,
                                          int64_t *lo, int64_t *hi) {
  const int64_t off = item_off(a, b);
  int64_t l = 0, r = a.Lk;
  if (a.key_lengths && a.key_lengths[b] < r)
    r = a.key_lengths[b];
  if (a.causal == ATTN_CAUSAL_BOTTOM_RIGHT && i1 + off < r)
    r = i1 + off;
  if (a.causal == ATTN_CAUSAL_TOP_LEFT && i1 < r)
    r = i1;
  if (a.wr >= 0 && i1 + off + a.wr < r)
    r = i1 + off + a.wr;
  if (a.wl >= 0 && i0 + off - a.wl > l)
    l = i0 + off - a.wl;
  *lo = l;
  *hi = r;
}

} // namespace attn_cu

#endif
