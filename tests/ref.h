/* tests/ref.h: a naive float64 reference of the attention core.
 *
 * The reference reads attn_params_t directly and derives every size itself
 * (it never calls attn_plan_init), so that it checks the core's planning as
 * well as its arithmetic. It is written for clarity, one loop per formula in
 * include/attn/attn.h, and is only meant for the small sizes of the tests. */
#ifndef ATTN_TESTS_REF_H
#define ATTN_TESTS_REF_H

#include <stdint.h>

#include "attn/attn.h"

/* Everything the reference computes. Owns its arrays: release them with
 * ref_result_free. */
typedef struct ref_result {
  int64_t B, Lq, Lk, Eq, Ek, Ev, H, Hkv, Dh, Dv, Eo;
  double scale;            /* effective scale */
  double *out;             /* [B, Lq, Eo] */
  double *weights;         /* [B, H, Lq, Lk] */
  double *mean_weights;    /* [B, Lq, Lk] */
  double *head_outputs;    /* [B, H, Lq, Dv] */
  unsigned char *row_dead; /* [B, H, Lq]: 1 where every key is masked */
} ref_result_t;

/* Computes every result of attention for `p`, which must be valid (the
 * reference only checks what it needs to index safely). Returns 0, or -1
 * when `p` cannot be interpreted (then `r` holds nothing to free). Borrows
 * `p`; `r` owns what it returns. Any thread. */
int ref_attention(const attn_params_t *p, ref_result_t *r);

/* The reductions of the weights (attn_reduce_t), in float64, from a
 * reference result: computed from its weights (or its mean weights) by the
 * definitions in include/attn/attn.h, one loop per formula. Owns its
 * arrays: release them with ref_reduce_free. */
typedef struct ref_reduce {
  int64_t rH, q0, q1, k0, k1, nq, nk; /* H', ranges, pooled blocks */
  int64_t *top_k_index;               /* [B, H', Lq', k] */
  double *top_k_value;
  double *pooled;                    /* [B, H', nq, nk] */
  double *entropy, *sink, *distance; /* [B, H', Lq'] */
} ref_reduce_t;

/* Fills `out` for p->reduce (which must ask for something valid) from
 * `r`, computed by ref_attention(p). Returns 0, or -1 when out of memory.
 * Borrows p and r. */
int ref_reduce(const attn_params_t *p, const ref_result_t *r,
               ref_reduce_t *out);
void ref_reduce_free(ref_reduce_t *out);

/* Frees the arrays of `r` and zeroes it. */
void ref_result_free(ref_result_t *r);

/* The ALiBi paper's default slopes for H heads, computed in float64 from
 * the rule itself (not from the core): slopes[0..H-1]. */
void ref_alibi_slopes(int64_t H, double *slopes);

#endif
