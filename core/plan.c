/* core/plan.c: validation of attention parameters and the derived plan.
 *
 * Every check that stands between untrusted input and the kernels lives
 * here; the kernels assume a plan that attn_plan_init accepted. Each error
 * names the field by its attn_field_t, whose name (attn_field_name) is the
 * one attn_params_t spells, and prints the shapes involved as
 * "[d0, d1, ...]". */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

typedef struct shape_str {
  char s[96];
} shape_str_t;

static shape_str_t shape_of(const attn_tensor_t *t) {
  shape_str_t r;
  size_t n = 0;
  n += (size_t)snprintf(r.s + n, sizeof r.s - n, "[");
  for (int i = 0; i < t->rank && i < ATTN_MAX_RANK && n < sizeof r.s; i++)
    n += (size_t)snprintf(r.s + n, sizeof r.s - n, "%s%lld", i ? ", " : "",
                          (long long)t->dim[i]);
  if (n < sizeof r.s)
    snprintf(r.s + n, sizeof r.s - n, "]");
  return r;
}

static int present(const attn_tensor_t *t) {
  return t->rank != 0;
}

/* Checks that a present tensor has data, a rank in [lo, hi] and positive
 * dimensions whose product stays below 2^48 elements. */
static int check_tensor(const attn_tensor_t *t, attn_field_t field, int lo,
                        int hi, attn_error_t *err) {
  const char *name = attn_field_name(field);
  if (t->rank < lo || t->rank > hi) {
    if (t->rank < 0 || t->rank > ATTN_MAX_RANK)
      return attn__err(err, ATTN_ERANK, field,
                       "%s has rank %d; expected %d%s%d", name, t->rank, lo,
                       lo == hi ? "" : " to ", hi);
    if (lo == hi)
      return attn__err(err, ATTN_ERANK, field,
                       "%s must have rank %d, got rank %d %s", name, lo,
                       t->rank, shape_of(t).s);
    return attn__err(err, ATTN_ERANK, field,
                     "%s must have rank %d to %d, got rank %d %s", name, lo, hi,
                     t->rank, shape_of(t).s);
  }
  if (t->data == NULL)
    return attn__err(err, ATTN_EINVAL, field, "%s %s has no data", name,
                     shape_of(t).s);
  int64_t n = 1;
  for (int i = 0; i < t->rank; i++) {
    if (t->dim[i] < 1)
      return attn__err(err, ATTN_ESHAPE, field,
                       "%s %s has an empty or negative dimension", name,
                       shape_of(t).s);
    if (__builtin_mul_overflow(n, t->dim[i], &n) || n > ((int64_t)1 << 48))
      return attn__err(err, ATTN_EOVERFLOW, field, "%s %s is too large", name,
                       shape_of(t).s);
  }
  return 0;
}

/* A projection weight [rows, in], with its input width `in` from `in_name`. */
static int check_weight(const attn_tensor_t *w, attn_field_t field, int64_t in,
                        const char *in_name, attn_error_t *err) {
  const char *name = attn_field_name(field);
  int r = check_tensor(w, field, 2, 2, err);
  if (r < 0)
    return r;
  if (w->dim[1] != in)
    return attn__err(err, ATTN_ESHAPE, field,
                     "%s %s must have %lld columns, the width of %s", name,
                     shape_of(w).s, (long long)in, in_name);
  return 0;
}

/* A projection bias [out]. */
static int check_bias(const attn_tensor_t *b, attn_field_t field, int64_t out,
                      const char *why, attn_error_t *err) {
  const char *name = attn_field_name(field);
  int r = check_tensor(b, field, 1, 1, err);
  if (r < 0)
    return r;
  if (b->dim[0] != out)
    return attn__err(err, ATTN_ESHAPE, field,
                     "%s %s must have %lld elements, %s", name, shape_of(b).s,
                     (long long)out, why);
  return 0;
}

/* A mask-like tensor of rank 2..4 broadcastable to [B, H, Lq, Lk]. */
static int check_broadcast(const attn_tensor_t *t, attn_field_t field,
                           const int64_t full[4], attn_error_t *err) {
  const char *name = attn_field_name(field);
  int r = check_tensor(t, field, 2, 4, err);
  if (r < 0)
    return r;
  for (int i = 0; i < t->rank; i++) {
    int64_t want = full[4 - t->rank + i];
    if (t->dim[i] == 1 || t->dim[i] == want)
      continue;
    /* where the target's dimension is 1, 1 is the one size it may have:
     * said once, not "1 or 1" */
    char or_want[32] = "";
    if (want != 1)
      snprintf(or_want, sizeof or_want, " or %lld", (long long)want);
    return attn__err(
        err, ATTN_ESHAPE, field,
        "%s %s does not broadcast to [B, H, Lq, Lk] = [%lld, %lld, %lld, "
        "%lld]: dimension %d is %lld, not 1%s",
        name, shape_of(t).s, (long long)full[0], (long long)full[1],
        (long long)full[2], (long long)full[3], i, (long long)t->dim[i],
        or_want);
  }
  return 0;
}

/* Whether a·b·c·d stays within `lim` (all >= 1), with no product formed
 * that could overflow. */
static int within(int64_t lim, int64_t a, int64_t b, int64_t c, int64_t d) {
  int64_t n;
  return !__builtin_mul_overflow(a, b, &n) &&
         !__builtin_mul_overflow(n, c, &n) &&
         !__builtin_mul_overflow(n, d, &n) && n <= lim;
}

static int derive_sizes(attn_plan_t *pl, const attn_params_t *p,
                        attn_error_t *err) {
  int64_t B = pl->B, Lq = pl->Lq, Lk = pl->Lk, H = pl->H, Hkv = pl->Hkv;
  int64_t Lkp = attn__round_up(Lk, ATTN__BC);
  int64_t Dvp = attn__round_up(pl->Dv, ATTN__VPAD);
  /* Every size below is a product of up to four dimensions, each < 2^48
   * but together far past int64: bound each product first, without
   * forming one that overflows, so that the products below cannot. */
  const int64_t lim = (int64_t)1 << 40;
  if (!within(lim, B, H, Lq, Lk) || !within(lim, B, Lq, pl->Eo, 1) ||
      !within(lim, B, H, Lq, pl->Dh + pl->Dv) ||
      !within(lim, B, Hkv, Lkp + 16, pl->Dh + Dvp + 16))
    return attn__err(err, ATTN_EOVERFLOW, ATTN_FIELD_QUERY,
                     "problem too large: B=%lld H=%lld Lq=%lld Lk=%lld Dh=%lld "
                     "Dv=%lld",
                     (long long)B, (long long)H, (long long)Lq, (long long)Lk,
                     (long long)pl->Dh, (long long)pl->Dv);
  pl->out_elems = B * Lq * pl->Eo;
  pl->weights_elems = B * H * Lq * Lk;
  pl->mean_elems = B * Lq * Lk;
  pl->head_elems = B * H * Lq * pl->Dv;
  if (pl->reduce) { /* B·H·Lq <= 2^40 and k <= 256: no overflow */
    const attn_reduce_t *r = &p->reduce;
    const int64_t nq = pl->q1 - pl->q0, nk = pl->k1 - pl->k0;
    pl->rH = r->mean_heads ? 1 : H;
    if (r->top_k)
      pl->top_k_elems = B * pl->rH * nq * r->top_k;
    if (r->pool_q) { /* sides clipped to the ranges (attn_plan_t) */
      pl->pool_q = r->pool_q < nq ? r->pool_q : nq;
      pl->pool_k = r->pool_k < nk ? r->pool_k : nk;
      pl->pool_nq = (nq + pl->pool_q - 1) / pl->pool_q;
      pl->pool_nk = (nk + pl->pool_k - 1) / pl->pool_k;
      pl->pooled_elems = B * pl->rH * pl->pool_nq * pl->pool_nk;
    }
    if (r->stats)
      pl->stats_elems = B * pl->rH * nq;
  }

  /* Workspace (forward.c, lay_out): its products are bounded above. */
  pl->workspace_bytes = attn__workspace_bytes(pl);

  double proj = 0;
  if (present(&p->q_weight))
    proj += 2.0 * B * Lq * pl->Eq * H * pl->Dh;
  int64_t Lnk = p->kv ? Lq : Lk; /* keys projected */
  if (present(&p->k_weight))
    proj += 2.0 * B * Lnk * pl->Ek * Hkv * pl->Dh;
  if (present(&p->v_weight))
    proj += 2.0 * B * Lnk * pl->Ev * Hkv * pl->Dv;
  if (present(&p->o_weight))
    proj += 2.0 * B * Lq * H * pl->Dv * pl->Eo;
  pl->flops = proj + 2.0 * B * H * Lq * Lk * (pl->Dh + pl->Dv);
  return 0;
}

/* The kv cache (attn_kv_t), for B items of Lq new tokens: its arrays,
 * each item's past length, and its pages, present and aligned, for every
 * key it will hold. Sets Lk to the longest item's. */
static int check_kv(attn_plan_t *pl, const attn_kv_t *kv, attn_error_t *err) {
  if (kv->past == NULL || kv->pages == NULL || kv->k_absmax == NULL)
    return attn__err(err, ATTN_EINVAL, ATTN_FIELD_KV,
                     "kv needs past, pages and k_absmax [B = %lld]",
                     (long long)pl->B);
  int64_t lk = 0;
  for (int64_t b = 0; b < pl->B; b++) {
    int64_t n = kv->past[b];
    if (n < 0 || n > ((int64_t)1 << 40) - pl->Lq)
      return attn__err(err, ATTN_ERANGE, ATTN_FIELD_KV,
                       "kv past[%lld] is %lld; it must be in [0, 2^40 - Lq]",
                       (long long)b, (long long)n);
    if (!(kv->k_absmax[b] >= 0 && isfinite(kv->k_absmax[b])))
      return attn__err(err, ATTN_ERANGE, ATTN_FIELD_KV,
                       "kv k_absmax[%lld] is %g; it must be finite and >= 0",
                       (long long)b, (double)kv->k_absmax[b]);
    int64_t pages = (n + pl->Lq + ATTN_KV_PAGE - 1) / ATTN_KV_PAGE;
    for (int64_t i = 0; i < pages; i++)
      if (kv->pages[b] == NULL || kv->pages[b][i] == NULL ||
          (uintptr_t)kv->pages[b][i] % ATTN__ALIGN)
        return attn__err(err, ATTN_EINVAL, ATTN_FIELD_KV,
                         "kv pages[%lld][%lld] is missing or not %d-byte "
                         "aligned (%lld pages needed for %lld keys)",
                         (long long)b, (long long)i, ATTN__ALIGN,
                         (long long)pages, (long long)(n + pl->Lq));
    lk = n + pl->Lq > lk ? n + pl->Lq : lk;
  }
  pl->Lk = lk;
  return 0;
}

size_t attn_kv_v_offset(int64_t Hkv, int64_t Dh) {
  return (size_t)attn__round_up(Hkv * Dh * ATTN_KV_LDK, ATTN__ALIGN / 4);
}

size_t attn_kv_page_floats(int64_t Hkv, int64_t Dh, int64_t Dv) {
  int64_t Dvp = attn__round_up(Dv, ATTN__VPAD);
  return attn_kv_v_offset(Hkv, Dh) +
         (size_t)attn__round_up(ATTN_KV_PAGE * attn__ldv(Hkv, Dvp),
                                ATTN__ALIGN / 4);
}

static int check_inputs(attn_plan_t *pl, const attn_params_t *p,
                        attn_error_t *err) {
  int r;
  if (p->query.rank == 0 || p->query.data == NULL)
    return attn__err(err, ATTN_EINVAL, ATTN_FIELD_QUERY, "query is required");
  if ((r = check_tensor(&p->query, ATTN_FIELD_QUERY, 2, 3, err)) < 0)
    return r;
  const attn_tensor_t *q = &p->query;
  const attn_tensor_t *k = present(&p->key) ? &p->key : q;
  const attn_tensor_t *v = present(&p->value) ? &p->value : k;
  const char *kname = k == q ? "query" : "key";
  if (k != q &&
      (r = check_tensor(k, ATTN_FIELD_KEY, 1, ATTN_MAX_RANK, err)) < 0)
    return r;
  if (v != k &&
      (r = check_tensor(v, ATTN_FIELD_VALUE, 1, ATTN_MAX_RANK, err)) < 0)
    return r;
  if (k->rank != q->rank)
    return attn__err(err, ATTN_ERANK, ATTN_FIELD_KEY,
                     "key %s must have the rank of query %s", shape_of(k).s,
                     shape_of(q).s);
  if (v->rank != q->rank)
    return attn__err(err, ATTN_ERANK, ATTN_FIELD_VALUE,
                     "value %s must have the rank of query %s", shape_of(v).s,
                     shape_of(q).s);
  int b3 = q->rank == 3;
  pl->batched = b3;
  pl->B = b3 ? q->dim[0] : 1;
  if (b3 && k->dim[0] != q->dim[0])
    return attn__err(err, ATTN_ESHAPE, ATTN_FIELD_KEY,
                     "key %s has batch %lld but query %s has batch %lld",
                     shape_of(k).s, (long long)k->dim[0], shape_of(q).s,
                     (long long)q->dim[0]);
  if (b3 && v->dim[0] != k->dim[0])
    return attn__err(err, ATTN_ESHAPE, ATTN_FIELD_VALUE,
                     "value %s has batch %lld but %s %s has batch %lld",
                     shape_of(v).s, (long long)v->dim[0], kname, shape_of(k).s,
                     (long long)k->dim[0]);
  if (v->dim[b3] != k->dim[b3])
    return attn__err(err, ATTN_ESHAPE, ATTN_FIELD_VALUE,
                     "%s has %lld rows but value has %lld (%s %s, value %s)",
                     kname, (long long)k->dim[b3], (long long)v->dim[b3], kname,
                     shape_of(k).s, shape_of(v).s);
  pl->Lq = q->dim[b3];
  pl->Lk = k->dim[b3];
  if (p->kv) { /* the inputs are the new tokens; Lk counts the cached too */
    if (k->dim[b3] != pl->Lq)
      return attn__err(
          err, ATTN_ESHAPE, k == q ? ATTN_FIELD_QUERY : ATTN_FIELD_KEY,
          "%s %s has %lld rows; with a kv cache the new keys "
          "are the new tokens, Lq = %lld",
          kname, shape_of(k).s, (long long)k->dim[b3], (long long)pl->Lq);
    if ((r = check_kv(pl, p->kv, err)) < 0)
      return r;
  }
  pl->Eq = q->dim[b3 + 1];
  pl->Ek = k->dim[b3 + 1];
  pl->Ev = v->dim[b3 + 1];
  return 0;
}

static int check_heads_and_projections(attn_plan_t *pl, const attn_params_t *p,
                                       attn_error_t *err) {
  int r;
  if (p->num_heads < 1)
    return attn__err(err, ATTN_EINVAL, ATTN_FIELD_NUM_HEADS,
                     "num_heads is %lld; it must be at least 1",
                     (long long)p->num_heads);
  if (p->num_kv_heads < 0)
    return attn__err(err, ATTN_EINVAL, ATTN_FIELD_NUM_KV_HEADS,
                     "num_kv_heads is %lld; it must be at least 1 (0 means "
                     "num_heads)",
                     (long long)p->num_kv_heads);
  int64_t H = p->num_heads, Hkv = p->num_kv_heads ? p->num_kv_heads : H;
  if (Hkv > H || H % Hkv != 0)
    return attn__err(err, ATTN_EHEADS, ATTN_FIELD_NUM_KV_HEADS,
                     "num_kv_heads %lld does not divide num_heads %lld",
                     (long long)Hkv, (long long)H);
  pl->H = H;
  pl->Hkv = Hkv;
  const char *kname = present(&p->key) ? "key" : "query";
  const char *vname = present(&p->value) ? "value" : kname;

  /* Q: [H·Dh, Eq] fixes Dh. */
  int64_t qw = pl->Eq;
  if (present(&p->q_weight)) {
    if ((r = check_weight(&p->q_weight, ATTN_FIELD_Q_WEIGHT, pl->Eq, "query",
                          err)) < 0)
      return r;
    qw = p->q_weight.dim[0];
    if (qw % H)
      return attn__err(err, ATTN_EHEADS, ATTN_FIELD_Q_WEIGHT,
                       "q_weight %s has %lld rows, not a multiple of "
                       "num_heads %lld",
                       shape_of(&p->q_weight).s, (long long)qw, (long long)H);
  } else if (qw % H) {
    return attn__err(err, ATTN_EHEADS, ATTN_FIELD_QUERY,
                     "query %s has width %lld, not a multiple of num_heads "
                     "%lld (no q_weight)",
                     shape_of(&p->query).s, (long long)qw, (long long)H);
  }
  pl->Dh = qw / H;
  if (present(&p->q_bias) &&
      (r = check_bias(&p->q_bias, ATTN_FIELD_Q_BIAS, qw,
                      present(&p->q_weight) ? "the rows of q_weight"
                                            : "the width of query",
                      err)) < 0)
    return r;

  /* K: [Hkv·Dh, Ek]. */
  int64_t kw = Hkv * pl->Dh;
  if (present(&p->k_weight)) {
    if ((r = check_weight(&p->k_weight, ATTN_FIELD_K_WEIGHT, pl->Ek, kname,
                          err)) < 0)
      return r;
    if (p->k_weight.dim[0] != kw)
      return attn__err(err, ATTN_ESHAPE, ATTN_FIELD_K_WEIGHT,
                       "k_weight %s must have %lld rows, num_kv_heads %lld "
                       "times the head width %lld",
                       shape_of(&p->k_weight).s, (long long)kw, (long long)Hkv,
                       (long long)pl->Dh);
  } else if (pl->Ek != kw) {
    const attn_tensor_t *k = present(&p->key) ? &p->key : &p->query;
    return attn__err(err, ATTN_ESHAPE, ATTN_FIELD_KEY,
                     "%s %s has width %lld but needs num_kv_heads %lld times "
                     "the head width %lld = %lld (no k_weight)",
                     kname, shape_of(k).s, (long long)pl->Ek, (long long)Hkv,
                     (long long)pl->Dh, (long long)kw);
  }
  if (present(&p->k_bias) &&
      (r = check_bias(&p->k_bias, ATTN_FIELD_K_BIAS, kw,
                      "num_kv_heads times the head width", err)) < 0)
    return r;

  /* V: [Hkv·Dv, Ev] fixes Dv. */
  int64_t vw = pl->Ev;
  if (present(&p->v_weight)) {
    if ((r = check_weight(&p->v_weight, ATTN_FIELD_V_WEIGHT, pl->Ev, vname,
                          err)) < 0)
      return r;
    vw = p->v_weight.dim[0];
    if (vw % Hkv)
      return attn__err(err, ATTN_EHEADS, ATTN_FIELD_V_WEIGHT,
                       "v_weight %s has %lld rows, not a multiple of "
                       "num_kv_heads %lld",
                       shape_of(&p->v_weight).s, (long long)vw, (long long)Hkv);
  } else if (vw % Hkv) {
    const attn_tensor_t *v = present(&p->value) ? &p->value
                             : present(&p->key) ? &p->key
                                                : &p->query;
    return attn__err(err, ATTN_EHEADS, ATTN_FIELD_VALUE,
                     "%s %s has width %lld, not a multiple of num_kv_heads "
                     "%lld (no v_weight)",
                     vname, shape_of(v).s, (long long)vw, (long long)Hkv);
  }
  pl->Dv = vw / Hkv;
  if (present(&p->v_bias) &&
      (r = check_bias(&p->v_bias, ATTN_FIELD_V_BIAS, vw,
                      present(&p->v_weight) ? "the rows of v_weight"
                                            : "the width of value",
                      err)) < 0)
    return r;

  /* O: [Eo, H·Dv]. H and Dv are each below 2^48, their product need not
   * be. */
  if (!within((int64_t)1 << 48, H, pl->Dv, 1, 1))
    return attn__err(err, ATTN_EOVERFLOW, ATTN_FIELD_NUM_HEADS,
                     "num_heads %lld times the value head width %lld is too "
                     "large",
                     (long long)H, (long long)pl->Dv);
  pl->Eo = H * pl->Dv;
  if (present(&p->o_weight)) {
    if ((r = check_tensor(&p->o_weight, ATTN_FIELD_O_WEIGHT, 2, 2, err)) < 0)
      return r;
    if (p->o_weight.dim[1] != H * pl->Dv)
      return attn__err(err, ATTN_ESHAPE, ATTN_FIELD_O_WEIGHT,
                       "o_weight %s must have %lld columns, num_heads %lld "
                       "times the value head width %lld",
                       shape_of(&p->o_weight).s, (long long)(H * pl->Dv),
                       (long long)H, (long long)pl->Dv);
    pl->Eo = p->o_weight.dim[0];
  }
  if (present(&p->o_bias) &&
      (r = check_bias(&p->o_bias, ATTN_FIELD_O_BIAS, pl->Eo,
                      present(&p->o_weight) ? "the rows of o_weight"
                                            : "num_heads times the value head "
                                              "width",
                      err)) < 0)
    return r;
  return 0;
}

/* The projections run as sgemm calls, whose sizes and strides are int: a
 * present weight's dimensions, and the row strides of the K and V layouts
 * it writes (internal.h), must fit one. */
static int check_blas_sizes(const attn_plan_t *pl, const attn_params_t *p,
                            attn_error_t *err) {
  const struct {
    const attn_tensor_t *w;
    attn_field_t field;
    int64_t ld; /* the stride of what it writes */
  } ws[] = {
      {&p->q_weight, ATTN_FIELD_Q_WEIGHT, pl->H * pl->Dh},
      {&p->k_weight, ATTN_FIELD_K_WEIGHT,
       p->kv ? ATTN_KV_LDK : attn__ldk(pl->Lk)},
      {&p->v_weight, ATTN_FIELD_V_WEIGHT,
       p->kv ? attn__ldv(pl->Hkv, attn__round_up(pl->Dv, ATTN__VPAD))
             : attn__ldv_ws(pl->Hkv, attn__vh(pl->Dv))},
      {&p->o_weight, ATTN_FIELD_O_WEIGHT, pl->Eo},
  };
  for (size_t k = 0; k < sizeof ws / sizeof ws[0]; k++)
    if (present(ws[k].w) && (ws[k].w->dim[0] > INT_MAX ||
                             ws[k].w->dim[1] > INT_MAX || ws[k].ld > INT_MAX))
      return attn__err(err, ATTN_EOVERFLOW, ws[k].field,
                       "%s %s is too large for sgemm: its dimensions, and "
                       "the row stride %lld of its product, must be at most "
                       "%d",
                       attn_field_name(ws[k].field), shape_of(ws[k].w).s,
                       (long long)ws[k].ld, INT_MAX);
  return 0;
}

static int check_finite(const float *x, int64_t n, attn_field_t field,
                        attn_error_t *err) {
  const char *name = attn_field_name(field);
  for (int64_t i = 0; i < n; i++)
    if (!isfinite(x[i]))
      return attn__err(err, ATTN_ERANGE, field,
                       "%s[%lld] is %g; it must be finite", name, (long long)i,
                       (double)x[i]);
  return 0;
}

static int check_masks(attn_plan_t *pl, const attn_params_t *p,
                       attn_error_t *err) {
  int r;
  if ((unsigned)p->causal > ATTN_CAUSAL_TOP_LEFT)
    return attn__err(err, ATTN_EINVAL, ATTN_FIELD_CAUSAL,
                     "causal is %d, not a known kind", (int)p->causal);
  if (present(&p->key_lengths)) {
    if ((r = check_tensor(&p->key_lengths, ATTN_FIELD_KEY_LENGTHS, 1, 1, err)) <
        0)
      return r;
    if (p->key_lengths.dim[0] != pl->B)
      return attn__err(err, ATTN_ESHAPE, ATTN_FIELD_KEY_LENGTHS,
                       "key_lengths %s must have one length per batch item, "
                       "B = %lld",
                       shape_of(&p->key_lengths).s, (long long)pl->B);
    const int64_t *len = p->key_lengths.data;
    for (int64_t b = 0; b < pl->B; b++)
      if (len[b] < 0 || len[b] > pl->Lk)
        return attn__err(err, ATTN_ERANGE, ATTN_FIELD_KEY_LENGTHS,
                         "key_lengths[%lld] is %lld; it must be in [0, Lk = "
                         "%lld]",
                         (long long)b, (long long)len[b], (long long)pl->Lk);
  }
  const int64_t full[4] = {pl->B, pl->H, pl->Lq, pl->Lk};
  if (present(&p->allow) &&
      (r = check_broadcast(&p->allow, ATTN_FIELD_ALLOW, full, err)) < 0)
    return r;
  if (present(&p->bias) &&
      (r = check_broadcast(&p->bias, ATTN_FIELD_BIAS, full, err)) < 0)
    return r;
  if (p->has_window_left && p->window_left < 0)
    return attn__err(err, ATTN_ERANGE, ATTN_FIELD_WINDOW_LEFT,
                     "window_left is %lld; it must be at least 0",
                     (long long)p->window_left);
  if (p->has_window_right && p->window_right < 0)
    return attn__err(err, ATTN_ERANGE, ATTN_FIELD_WINDOW_RIGHT,
                     "window_right is %lld; it must be at least 0",
                     (long long)p->window_right);
  /* A side no pair of rows reaches is no bound (attn_plan_t). */
  const int64_t reach = pl->Lq > pl->Lk ? pl->Lq : pl->Lk;
  pl->window_left =
      p->has_window_left && p->window_left < reach ? p->window_left : -1;
  pl->window_right =
      p->has_window_right && p->window_right < reach ? p->window_right : -1;
  if (p->has_scale && !isfinite(p->scale))
    return attn__err(err, ATTN_ERANGE, ATTN_FIELD_SCALE,
                     "scale is %g; it must be finite", (double)p->scale);
  if (p->has_softcap && !(isfinite(p->softcap) && p->softcap > 0))
    return attn__err(err, ATTN_ERANGE, ATTN_FIELD_SOFTCAP,
                     "softcap is %g; it must be finite and above 0",
                     (double)p->softcap);
  if ((unsigned)p->alibi > ATTN_ALIBI_SLOPES)
    return attn__err(err, ATTN_EINVAL, ATTN_FIELD_ALIBI,
                     "alibi is %d, not a known kind", (int)p->alibi);
  if (p->alibi != ATTN_ALIBI_SLOPES && present(&p->alibi_slopes))
    return attn__err(err, ATTN_EINVAL, ATTN_FIELD_ALIBI_SLOPES,
                     "alibi_slopes %s are given, but alibi is %s, which does "
                     "not read them (explicit slopes need ATTN_ALIBI_SLOPES)",
                     shape_of(&p->alibi_slopes).s,
                     p->alibi == ATTN_ALIBI_NONE ? "none" : "default");
  if (p->alibi == ATTN_ALIBI_SLOPES) {
    if (!present(&p->alibi_slopes))
      return attn__err(err, ATTN_EINVAL, ATTN_FIELD_ALIBI_SLOPES,
                       "alibi_slopes are required for explicit ALiBi slopes");
    if ((r = check_tensor(&p->alibi_slopes, ATTN_FIELD_ALIBI_SLOPES, 1, 1,
                          err)) < 0)
      return r;
    if (p->alibi_slopes.dim[0] != pl->H)
      return attn__err(err, ATTN_ESHAPE, ATTN_FIELD_ALIBI_SLOPES,
                       "alibi_slopes %s must have one slope per head, H = %lld",
                       shape_of(&p->alibi_slopes).s, (long long)pl->H);
    if ((r = check_finite(p->alibi_slopes.data, pl->H, ATTN_FIELD_ALIBI_SLOPES,
                          err)) < 0)
      return r;
  }
  return 0;
}

/* positions_query or positions_key: int64 [L] or [B, L], in
 * [0, ATTN_MAX_POSITION). */
static int check_positions(const attn_plan_t *pl, const attn_tensor_t *t,
                           attn_field_t field, int64_t L, const char *Lname,
                           attn_error_t *err) {
  const char *name = attn_field_name(field);
  int r = check_tensor(t, field, 1, 2, err);
  if (r < 0)
    return r;
  if (t->dim[t->rank - 1] != L || (t->rank == 2 && t->dim[0] != pl->B))
    return attn__err(err, ATTN_ESHAPE, field,
                     "%s %s must be [%s] = [%lld] or [B, %s] = [%lld, %lld]",
                     name, shape_of(t).s, Lname, (long long)L, Lname,
                     (long long)pl->B, (long long)L);
  const int64_t *x = t->data;
  int64_t n = t->rank == 2 ? pl->B * L : L;
  for (int64_t i = 0; i < n; i++)
    if (x[i] < 0 || x[i] >= ATTN_MAX_POSITION)
      return attn__err(err, ATTN_ERANGE, field,
                       "%s[%lld] is %lld; positions must be in [0, 2^31)", name,
                       (long long)i, (long long)x[i]);
  return 0;
}

/* A finite number above 0 (lo_ok: or 0 itself). */
static int positive(double x, int lo_ok) {
  return isfinite(x) && (x > 0 || (lo_ok && x == 0));
}

/* q_norm, k_norm and norm_eps; the rope and its positions. */
static int check_rope_and_norms(attn_plan_t *pl, const attn_params_t *p,
                                attn_error_t *err) {
  int r;
  const attn_tensor_t *norms[2] = {&p->q_norm, &p->k_norm};
  for (int k = 0; k < 2; k++) {
    attn_field_t field = k ? ATTN_FIELD_K_NORM : ATTN_FIELD_Q_NORM;
    if (!present(norms[k]))
      continue;
    if ((r = check_tensor(norms[k], field, 1, 1, err)) < 0)
      return r;
    if (norms[k]->dim[0] != pl->Dh)
      return attn__err(err, ATTN_ESHAPE, field,
                       "%s %s must have one weight per head feature, Dh = %lld",
                       attn_field_name(field), shape_of(norms[k]).s,
                       (long long)pl->Dh);
    if ((r = check_finite(norms[k]->data, pl->Dh, field, err)) < 0)
      return r;
  }
  if (p->has_norm_eps && !positive(p->norm_eps, 1))
    return attn__err(err, ATTN_ERANGE, ATTN_FIELD_NORM_EPS,
                     "norm_eps is %g; it must be finite and at least 0",
                     (double)p->norm_eps);
  const attn_rope_t *rp = &p->rope;
  if ((unsigned)rp->style > ATTN_ROPE_INTERLEAVED)
    return attn__err(err, ATTN_EINVAL, ATTN_FIELD_ROPE_STYLE,
                     "rope style is %d, not a known kind", (int)rp->style);
  if (rp->style == ATTN_ROPE_NONE) {
    if (present(&p->positions_query) || present(&p->positions_key))
      return attn__err(err, ATTN_EINVAL,
                       present(&p->positions_query) ? ATTN_FIELD_POSITIONS_QUERY
                                                    : ATTN_FIELD_POSITIONS_KEY,
                       "positions are given, but no rope uses them");
    return 0;
  }
  if (!positive(rp->theta, 0))
    return attn__err(err, ATTN_ERANGE, ATTN_FIELD_ROPE_THETA,
                     "rope theta is %g; it must be finite and above 0",
                     rp->theta);
  int64_t dims = rp->dims ? rp->dims : pl->Dh;
  if (dims < 2 || dims > pl->Dh || dims % 2)
    return attn__err(err, ATTN_EINVAL, ATTN_FIELD_ROPE_DIMS,
                     "rope dims is %lld; it must be even and in [2, Dh = %lld]",
                     (long long)dims, (long long)pl->Dh);
  if ((unsigned)rp->scaling > ATTN_ROPE_SCALING_LLAMA3)
    return attn__err(err, ATTN_EINVAL, ATTN_FIELD_ROPE_SCALING,
                     "rope scaling is %d, not a known kind", (int)rp->scaling);
  if (rp->scaling != ATTN_ROPE_SCALING_NONE && !positive(rp->factor, 0))
    return attn__err(err, ATTN_ERANGE, ATTN_FIELD_ROPE_FACTOR,
                     "rope scaling factor is %g; it must be finite and above 0",
                     rp->factor);
  if (rp->scaling == ATTN_ROPE_SCALING_LLAMA3) {
    /* 0 < low_freq_factor < high_freq_factor, original_max_position > 0 */
    attn_field_t bad = !positive(rp->low_freq_factor, 0)
                           ? ATTN_FIELD_ROPE_LOW_FREQ_FACTOR
                       : !(positive(rp->high_freq_factor, 0) &&
                           rp->high_freq_factor > rp->low_freq_factor)
                           ? ATTN_FIELD_ROPE_HIGH_FREQ_FACTOR
                       : !positive(rp->original_max_position, 0)
                           ? ATTN_FIELD_ROPE_ORIGINAL_MAX_POSITION
                           : ATTN_FIELD_NONE;
    if (bad != ATTN_FIELD_NONE)
      return attn__err(err, ATTN_ERANGE, bad,
                       "rope llama3 scaling needs 0 < low_freq_factor (%g) < "
                       "high_freq_factor (%g) and original_max_position (%g) "
                       "above 0, all finite",
                       rp->low_freq_factor, rp->high_freq_factor,
                       rp->original_max_position);
  }
  if (present(&p->positions_query) &&
      (r = check_positions(pl, &p->positions_query, ATTN_FIELD_POSITIONS_QUERY,
                           pl->Lq, "Lq", err)) < 0)
    return r;
  if (present(&p->positions_key) &&
      (r = check_positions(pl, &p->positions_key, ATTN_FIELD_POSITIONS_KEY,
                           p->kv ? pl->Lq : pl->Lk,
                           p->kv ? "Lq (the new keys)" : "Lk", err)) < 0)
    return r;
  pl->rope_dims = dims;
  return 0;
}

static int check_exec(attn_plan_t *pl, const attn_exec_t *ex,
                      attn_error_t *err) {
  attn_exec_t def = {.threads = 1, .isa = ATTN_ISA_AUTO};
  if (ex == NULL)
    ex = &def;
  if (ex->threads < 0 || ex->threads > 1024)
    return attn__err(err, ATTN_EINVAL, ATTN_FIELD_THREADS,
                     "threads is %d; it must be in [1, 1024] (0 means 1)",
                     ex->threads);
  pl->threads = ex->threads ? ex->threads : 1;
  attn_isa_t best = attn__cpu_isa();
  if ((unsigned)ex->isa > ATTN_ISA_AVX512)
    return attn__err(err, ATTN_EINVAL, ATTN_FIELD_ISA,
                     "isa is %d, not a known kind", (int)ex->isa);
  if (ex->isa > best)
    return attn__err(err, ATTN_ENOTSUP, ATTN_FIELD_ISA,
                     "isa %s is not supported by this CPU (best: %s)",
                     attn_isa_name(ex->isa), attn_isa_name(best));
  pl->isa = ex->isa == ATTN_ISA_AUTO ? best : ex->isa;
  pl->cancel = ex->cancel;
  if ((unsigned)ex->backend > ATTN_BACKEND_CUDA)
    return attn__err(err, ATTN_EINVAL, ATTN_FIELD_BACKEND,
                     "backend is %d, not a known kind", (int)ex->backend);
  if ((unsigned)ex->precision > ATTN_PRECISION_BF16)
    return attn__err(err, ATTN_EINVAL, ATTN_FIELD_PRECISION,
                     "precision is %d, not a known kind", (int)ex->precision);
  if (ex->backend == ATTN_BACKEND_CPU && ex->precision != ATTN_PRECISION_FP32)
    return attn__err(err, ATTN_ENOTSUP, ATTN_FIELD_PRECISION,
                     "precision %s needs the cuda backend; the cpu backend "
                     "computes in fp32",
                     attn_precision_name(ex->precision));
  pl->backend = ex->backend;
  pl->precision = ex->precision;
  return 0;
}

/* What the CUDA backend (core/cuda/) lacks, refused by name rather than
 * computed differently; then whether it runs here at all. Called on a plan
 * that passed every other check. The order: a library without CUDA says
 * so first; then the options, so that a CUDA build refuses them the same
 * on a host without a GPU; then the device. */
static int check_cuda(attn_plan_t *pl, const attn_params_t *p,
                      attn_error_t *err) {
  attn_cuda_info_t ci;
#ifndef ATTN_HAVE_CUDA
  (void)pl, (void)p;
  attn_cuda_info(&ci);
  return attn__err(err, ATTN_ENOTSUP, ATTN_FIELD_BACKEND, "backend cuda: %s",
                   ci.status);
#else
  if (p->kv != NULL && !p->kv->device)
    return attn__err(err, ATTN_ENOTSUP, ATTN_FIELD_KV,
                     "kv pages in host memory: the cuda backend attends over "
                     "pages in device memory (attn_cuda_alloc, device = 1); "
                     "use backend cpu");
  /* the batch items are query's first dimension, the heads num_heads */
  if (pl->B > ATTN_CUDA_MAX_GRID || pl->H > ATTN_CUDA_MAX_GRID)
    return attn__err(err, ATTN_ENOTSUP,
                     pl->B > ATTN_CUDA_MAX_GRID ? ATTN_FIELD_QUERY
                                                : ATTN_FIELD_NUM_HEADS,
                     "B=%lld, H=%lld: the cuda backend takes at most %d of "
                     "each",
                     (long long)pl->B, (long long)pl->H, ATTN_CUDA_MAX_GRID);
  if (pl->Dh > ATTN_CUDA_MAX_HEAD_DIM || pl->Dv > ATTN_CUDA_MAX_HEAD_DIM)
    return attn__err(err, ATTN_ENOTSUP, ATTN_FIELD_NUM_HEADS,
                     "head width Dh=%lld, Dv=%lld: the cuda backend takes "
                     "heads of at most %d features",
                     (long long)pl->Dh, (long long)pl->Dv,
                     ATTN_CUDA_MAX_HEAD_DIM);
  /* Each projection is one GEMM over all of the call's rows, whose count
   * cuBLAS takes as an int (core/cuda/forward.cu: gemm): more would be
   * cast to what is left of it, and computed on those rows alone. */
  const int64_t key_rows = pl->B * (p->kv ? pl->Lq : pl->Lk);
  if (pl->B * pl->Lq > INT_MAX || key_rows > INT_MAX)
    return attn__err(
        err, ATTN_EOVERFLOW,
        pl->B * pl->Lq > INT_MAX ? ATTN_FIELD_QUERY : ATTN_FIELD_KEY,
        "B=%lld, Lq=%lld, Lk=%lld: the cuda backend projects the call's "
        "B·L rows of each input in one GEMM, at most %d of them",
        (long long)pl->B, (long long)pl->Lq, (long long)pl->Lk, INT_MAX);
  attn_cuda_info(&ci);
  if (!ci.usable)
    return attn__err(err, ATTN_ENOTSUP, ATTN_FIELD_BACKEND, "backend cuda: %s",
                     ci.status);
  /* The host workspace holds the ALiBi slopes, [H] floats, then the
   * rope's frequencies, [rope_dims / 2] doubles; with a kv cache then each
   * item's page table, [B, ceil(Lk / ATTN_KV_PAGE)] pointers, its past, its
   * key count and its new keys' largest |k|, [B] 8 bytes each
   * (core/cuda/forward.cu). */
  pl->workspace_bytes =
      (size_t)(attn__round_up(pl->H * 4, ATTN__ALIGN) +
               attn__round_up(pl->rope_dims / 2 * 8 + 8, ATTN__ALIGN));
  if (p->kv)
    pl->workspace_bytes += (size_t)attn__round_up(
        pl->B * ((pl->Lk + ATTN_KV_PAGE - 1) / ATTN_KV_PAGE + 3) * 8,
        ATTN__ALIGN);
  pl->device_bytes = attn__cuda_device_bytes(pl);
  return 0;
#endif
}

/* The reductions of the weights (attn_reduce_t): each option in range, a
 * range inside its axis, and not with the dense weights. */
static int check_reduce(attn_plan_t *pl, const attn_params_t *p,
                        attn_error_t *err) {
  const attn_reduce_t *r = &p->reduce;
  if (r->top_k < 0 || r->top_k > ATTN_TOP_K_MAX)
    return attn__err(err, ATTN_ERANGE, ATTN_FIELD_TOP_K,
                     "top_k is %lld; it must be in [1, %d] (0 for none)",
                     (long long)r->top_k, ATTN_TOP_K_MAX);
  if (r->pool_q < 0 || r->pool_k < 0 || (r->pool_q == 0) != (r->pool_k == 0))
    return attn__err(err, ATTN_ERANGE, ATTN_FIELD_POOL,
                     "pool is [%lld, %lld]; each must be >= 1 (both 0 for "
                     "none)",
                     (long long)r->pool_q, (long long)r->pool_k);
  if ((unsigned)r->pool_reduce > ATTN_POOL_SUM)
    return attn__err(err, ATTN_EINVAL, ATTN_FIELD_POOL_REDUCE,
                     "pool_reduce is %d, not mean, max or sum",
                     (int)r->pool_reduce);
  if (r->stats & ~(unsigned)ATTN_STAT_ALL)
    return attn__err(err, ATTN_EINVAL, ATTN_FIELD_STATS,
                     "stats is 0x%x; only entropy, sink and distance (0x%x) "
                     "are known",
                     r->stats, (unsigned)ATTN_STAT_ALL);
  if (r->sink_tokens < 0)
    return attn__err(err, ATTN_ERANGE, ATTN_FIELD_SINK_TOKENS,
                     "sink_tokens is %lld; it must be >= 0",
                     (long long)r->sink_tokens);
  pl->reduce = r->top_k || r->pool_q || r->stats;
  if (r->top_k && pl->Lk > INT32_MAX) /* top_k_index is int32 */
    return attn__err(err, ATTN_ERANGE, ATTN_FIELD_TOP_K,
                     "top_k reports int32 key indices; Lk = %lld is past "
                     "2^31 - 1",
                     (long long)pl->Lk);
  pl->q0 = 0, pl->q1 = pl->Lq, pl->k0 = 0, pl->k1 = pl->Lk;
  if (r->has_query_range) {
    const int64_t *q = r->query_range;
    if (q[0] < 0 || q[0] >= q[1] || q[1] > pl->Lq)
      return attn__err(err, ATTN_ERANGE, ATTN_FIELD_QUERY_RANGE,
                       "query_range is [%lld, %lld); it must lie in [0, Lq = "
                       "%lld) and hold a query",
                       (long long)q[0], (long long)q[1], (long long)pl->Lq);
    pl->q0 = q[0], pl->q1 = q[1];
  }
  if (r->has_key_range) {
    const int64_t *k = r->key_range;
    if (k[0] < 0 || k[0] >= k[1] || k[1] > pl->Lk)
      return attn__err(err, ATTN_ERANGE, ATTN_FIELD_KEY_RANGE,
                       "key_range is [%lld, %lld); it must lie in [0, Lk = "
                       "%lld) and hold a key",
                       (long long)k[0], (long long)k[1], (long long)pl->Lk);
    pl->k0 = k[0], pl->k1 = k[1];
  }
  if (pl->reduce && (p->want_weights || p->want_mean_weights))
    return attn__err(err, ATTN_EINVAL, ATTN_FIELD_TOP_K,
                     "reductions of the weights (top_k, pool, stats) are "
                     "not computed with the dense %s",
                     p->want_weights ? "weights" : "mean_weights");
  return 0;
}

int attn_plan_init(attn_plan_t *plan, const attn_params_t *p,
                   const attn_exec_t *exec, attn_error_t *err) {
  int r;
  if (err)
    memset(err, 0, sizeof *err);
  memset(plan, 0, sizeof *plan);
  plan->params = p;
  if ((r = check_exec(plan, exec, err)) < 0 ||
      (r = check_inputs(plan, p, err)) < 0 ||
      (r = check_heads_and_projections(plan, p, err)) < 0 ||
      (r = check_blas_sizes(plan, p, err)) < 0 ||
      (r = check_masks(plan, p, err)) < 0 ||
      (r = check_rope_and_norms(plan, p, err)) < 0 ||
      (r = check_reduce(plan, p, err)) < 0)
    return r;
  plan->scale = p->has_scale ? p->scale : (float)(1.0 / sqrt((double)plan->Dh));
  if ((r = derive_sizes(plan, p, err)) < 0)
    return r;
  if (plan->backend == ATTN_BACKEND_CPU && p->weights_on_device)
    return attn__err(err, ATTN_ENOTSUP, ATTN_FIELD_BACKEND,
                     "weights in device memory (weights_on_device) need "
                     "backend cuda");
  if (plan->backend == ATTN_BACKEND_CPU && p->kv && p->kv->device)
    return attn__err(err, ATTN_ENOTSUP, ATTN_FIELD_KV,
                     "kv pages in device memory (device = 1) need backend "
                     "cuda");
  return plan->backend == ATTN_BACKEND_CUDA ? check_cuda(plan, p, err) : 0;
}

int attn_plan_set_threads(attn_plan_t *plan, int threads) {
  if (threads < 1 || threads > plan->threads)
    return ATTN_EINVAL;
  plan->threads = threads;
  if (plan->backend == ATTN_BACKEND_CPU) /* the GPU's needs no threads */
    plan->workspace_bytes = attn__workspace_bytes(plan);
  return 0;
}
