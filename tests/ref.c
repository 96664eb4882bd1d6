/* tests/ref.c: the float64 reference of attention (see ref.h).
 *
 * Passes, each a plain loop nest:
 *   1. sizes from the tensors themselves;
 *   2. projections Q, K, V (nn.Linear layout, identity when absent), then
 *      per head of Q and K the RMSNorm (q_norm, k_norm) and rope;
 *   3. per (b, h, i): scores, softcap, bias, ALiBi, masks, softmax, mixing;
 *   4. concat of the heads and the output projection;
 *   5. mean of the weights over heads. */
#include "ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void ref_alibi_slopes(int64_t H, double *slopes) {
  /* n = 2^floor(log2 H); the first n slopes follow the power-of-two rule
   * m_h = 2^(-8(h+1)/n); the rest are slopes [0::2] of the rule for 2n
   * heads: 2^(-8(2k+1)/(2n)) for k = 0, 1, ... */
  int64_t n = 1;
  while (n * 2 <= H)
    n *= 2;
  for (int64_t h = 0; h < H; h++) {
    if (h < n) {
      slopes[h] = pow(2.0, -8.0 * (double)(h + 1) / (double)n);
    } else {
      int64_t k = h - n;
      slopes[h] = pow(2.0, -8.0 * (double)(2 * k + 1) / (double)(2 * n));
    }
  }
}

/* y [n, out] = x [n, in] · wᵀ + b, with w [out, in]; no w: y = x + b.
 * Returns a new array (NULL on a shape it cannot use); *out_width gets the
 * width of y. */
static double *ref_project(const float *x, int64_t n, int64_t in,
                           const attn_tensor_t *w, const attn_tensor_t *b,
                           int64_t *out_width) {
  int64_t out = in;
  const float *wd = NULL;
  if (w->rank != 0) {
    if (w->rank != 2 || w->dim[1] != in)
      return NULL;
    out = w->dim[0];
    wd = w->data;
  }
  const float *bd = NULL;
  if (b->rank != 0) {
    if (b->rank != 1 || b->dim[0] != out)
      return NULL;
    bd = b->data;
  }
  double *y = malloc((size_t)(n * out) * sizeof *y + 1);
  if (y == NULL)
    return NULL;
  for (int64_t r = 0; r < n; r++) {
    for (int64_t o = 0; o < out; o++) {
      double acc;
      if (wd != NULL) {
        acc = 0.0;
        for (int64_t i = 0; i < in; i++)
          acc += (double)x[r * in + i] * (double)wd[o * in + i];
      } else {
        acc = (double)x[r * in + o];
      }
      if (bd != NULL)
        acc += (double)bd[o];
      y[r * out + o] = acc;
    }
  }
  *out_width = out;
  return y;
}

/* Offset into a rank 2..4 tensor broadcast to [B, H, Lq, Lk]: its dims are
 * right-aligned with those four, and a dim of 1 repeats. */
static int64_t ref_bcast_offset(const attn_tensor_t *t, const int64_t idx[4]) {
  int64_t off = 0, stride = 1;
  for (int a = t->rank - 1; a >= 0; a--) {
    int canon = 4 - t->rank + a;
    if (t->dim[a] != 1)
      off += idx[canon] * stride;
    stride *= t->dim[a];
  }
  return off;
}

/* 1 if tensor `t` (rank 2..4) fits [B, H, Lq, Lk] by broadcasting. */
static int ref_bcast_fits(const attn_tensor_t *t, const int64_t full[4]) {
  if (t->rank < 2 || t->rank > 4)
    return 0;
  for (int a = 0; a < t->rank; a++) {
    int64_t d = t->dim[a], f = full[4 - t->rank + a];
    if (d != 1 && d != f)
      return 0;
  }
  return 1;
}

/* The rope's frequency f_i for pair i of dims/2 (attn.h), from the
 * formulas: theta^(-2i/dims), then the scaling. */
static double ref_rope_freq(const attn_rope_t *rp, int64_t dims, int64_t i) {
  double f = pow(rp->theta, -2.0 * (double)i / (double)dims);
  if (rp->scaling == ATTN_ROPE_SCALING_LINEAR)
    return f / rp->factor;
  if (rp->scaling != ATTN_ROPE_SCALING_LLAMA3)
    return f;
  double wavelength = 2.0 * M_PI / f;
  double low_wl = rp->original_max_position / rp->low_freq_factor;
  double high_wl = rp->original_max_position / rp->high_freq_factor;
  if (wavelength < high_wl)
    return f;
  if (wavelength > low_wl)
    return f / rp->factor;
  double s = (rp->original_max_position / wavelength - rp->low_freq_factor) /
             (rp->high_freq_factor - rp->low_freq_factor);
  return (1.0 - s) * f / rp->factor + s * f;
}

/* Normalizes and rotates every head of X [B·L, nh·Dh] in place: RMSNorm
 * with w (if given) over each head's Dh features, then rope at the
 * positions (pos: [L] or [B, L], or NULL for first + 0 .. L − 1). */
static void ref_heads(double *X, int64_t B, int64_t L, int64_t nh, int64_t Dh,
                      const attn_tensor_t *w, double eps, const attn_rope_t *rp,
                      const attn_tensor_t *pos, int64_t first) {
  int64_t dims = rp->dims ? rp->dims : Dh;
  for (int64_t b = 0; b < B; b++)
    for (int64_t l = 0; l < L; l++)
      for (int64_t h = 0; h < nh; h++) {
        double *x = X + ((b * L + l) * nh + h) * Dh;
        if (w->rank != 0) {
          double ss = 0;
          for (int64_t d = 0; d < Dh; d++)
            ss += x[d] * x[d];
          double inv = 1.0 / sqrt(ss / (double)Dh + eps);
          for (int64_t d = 0; d < Dh; d++)
            x[d] = x[d] * inv * (double)((const float *)w->data)[d];
        }
        if (rp->style == ATTN_ROPE_NONE)
          continue;
        const int64_t *pd = pos->rank ? pos->data : NULL;
        double p = pd == NULL       ? (double)(first + l)
                   : pos->rank == 1 ? (double)pd[l]
                                    : (double)pd[b * L + l];
        for (int64_t i = 0; i < dims / 2; i++) {
          int64_t a = rp->style == ATTN_ROPE_HALF ? i : 2 * i;
          int64_t c = rp->style == ATTN_ROPE_HALF ? i + dims / 2 : 2 * i + 1;
          double t = p * ref_rope_freq(rp, dims, i);
          double x1 = x[a], x2 = x[c];
          x[a] = x1 * cos(t) - x2 * sin(t);
          x[c] = x2 * cos(t) + x1 * sin(t);
        }
      }
}

void ref_result_free(ref_result_t *r) {
  free(r->out);
  free(r->weights);
  free(r->mean_weights);
  free(r->head_outputs);
  free(r->row_dead);
  memset(r, 0, sizeof *r);
}

int ref_attention(const attn_params_t *p, ref_result_t *r) {
  memset(r, 0, sizeof *r);
  double *Q = NULL, *K = NULL, *V = NULL, *concat = NULL, *srow = NULL;
  unsigned char *ok = NULL;
  double *slopes = NULL;
  int rc = -1;

  /* Pass 1: sizes. key defaults to query, value to key. */
  const attn_tensor_t *qt = &p->query;
  if (qt->rank != 2 && qt->rank != 3)
    return -1;
  const attn_tensor_t *kt = p->key.rank != 0 ? &p->key : qt;
  const attn_tensor_t *vt = p->value.rank != 0 ? &p->value : kt;
  if (kt->rank != qt->rank || vt->rank != qt->rank)
    return -1;
  const int R = qt->rank;
  const int64_t B = R == 3 ? qt->dim[0] : 1;
  const int64_t Lq = qt->dim[R - 2], Eq = qt->dim[R - 1];
  const int64_t Lk = kt->dim[R - 2], Ek = kt->dim[R - 1];
  const int64_t Ev = vt->dim[R - 1];
  if (vt->dim[R - 2] != Lk)
    return -1;
  const int64_t H = p->num_heads;
  const int64_t Hkv = p->num_kv_heads != 0 ? p->num_kv_heads : H;
  if (H < 1 || Hkv < 1 || H % Hkv != 0)
    return -1;
  const int64_t G = H / Hkv;

  /* Pass 2: projections. */
  int64_t Fq = 0, Fk = 0, Fv = 0;
  Q = ref_project(qt->data, B * Lq, Eq, &p->q_weight, &p->q_bias, &Fq);
  K = ref_project(kt->data, B * Lk, Ek, &p->k_weight, &p->k_bias, &Fk);
  V = ref_project(vt->data, B * Lk, Ev, &p->v_weight, &p->v_bias, &Fv);
  if (Q == NULL || K == NULL || V == NULL)
    goto done;
  if (Fq % H != 0 || Fv % Hkv != 0)
    goto done;
  const int64_t Dh = Fq / H, Dv = Fv / Hkv;
  if (Fk != Hkv * Dh)
    goto done;
  const double scale = p->has_scale ? (double)p->scale : 1.0 / sqrt((double)Dh);
  const int64_t off = Lk - Lq;
  const double eps = p->has_norm_eps ? (double)p->norm_eps : 1e-6;
  ref_heads(Q, B, Lq, H, Dh, &p->q_norm, eps, &p->rope, &p->positions_query,
            Lk - Lq);
  ref_heads(K, B, Lk, Hkv, Dh, &p->k_norm, eps, &p->rope, &p->positions_key, 0);
  const int64_t full[4] = {B, H, Lq, Lk};
  if (p->allow.rank != 0 && !ref_bcast_fits(&p->allow, full))
    goto done;
  if (p->bias.rank != 0 && !ref_bcast_fits(&p->bias, full))
    goto done;
  if (p->key_lengths.rank != 0 &&
      (p->key_lengths.rank != 1 || p->key_lengths.dim[0] != B))
    goto done;

  slopes = calloc((size_t)H, sizeof *slopes);
  if (slopes == NULL)
    goto done;
  if (p->alibi == ATTN_ALIBI_DEFAULT) {
    ref_alibi_slopes(H, slopes);
  } else if (p->alibi == ATTN_ALIBI_SLOPES) {
    if (p->alibi_slopes.rank != 1 || p->alibi_slopes.dim[0] != H)
      goto done;
    const float *s = p->alibi_slopes.data;
    for (int64_t h = 0; h < H; h++)
      slopes[h] = (double)s[h];
  }

  r->B = B, r->Lq = Lq, r->Lk = Lk, r->Eq = Eq, r->Ek = Ek, r->Ev = Ev;
  r->H = H, r->Hkv = Hkv, r->Dh = Dh, r->Dv = Dv, r->scale = scale;
  r->weights = calloc((size_t)(B * H * Lq * Lk) + 1, sizeof(double));
  r->mean_weights = calloc((size_t)(B * Lq * Lk) + 1, sizeof(double));
  r->head_outputs = calloc((size_t)(B * H * Lq * Dv) + 1, sizeof(double));
  r->row_dead = calloc((size_t)(B * H * Lq) + 1, 1);
  srow = malloc((size_t)Lk * sizeof *srow + 1);
  ok = malloc((size_t)Lk + 1);
  if (!r->weights || !r->mean_weights || !r->head_outputs || !r->row_dead ||
      !srow || !ok)
    goto done;

  /* Pass 3: one query row of one head at a time. */
  const int64_t *lens = p->key_lengths.rank != 0 ? p->key_lengths.data : NULL;
  const uint8_t *allow = p->allow.rank != 0 ? p->allow.data : NULL;
  const float *bias = p->bias.rank != 0 ? p->bias.data : NULL;
  for (int64_t b = 0; b < B; b++) {
    for (int64_t h = 0; h < H; h++) {
      const int64_t g = h / G;
      for (int64_t i = 0; i < Lq; i++) {
        const double *q = Q + (b * Lq + i) * Fq + h * Dh;
        double mx = -INFINITY;
        int any = 0;
        for (int64_t j = 0; j < Lk; j++) {
          const int64_t idx[4] = {b, h, i, j};
          int allowed = 1;
          if (p->causal == ATTN_CAUSAL_BOTTOM_RIGHT && j > i + off)
            allowed = 0;
          if (p->causal == ATTN_CAUSAL_TOP_LEFT && j > i)
            allowed = 0;
          if (lens != NULL && j >= lens[b])
            allowed = 0;
          if (allow != NULL && allow[ref_bcast_offset(&p->allow, idx)] == 0)
            allowed = 0;
          /* distances, never i + off ± a side: a side may be INT64_MAX */
          if (p->has_window_left && i + off - j > p->window_left)
            allowed = 0;
          if (p->has_window_right && j - (i + off) > p->window_right)
            allowed = 0;
          ok[j] = (unsigned char)allowed;
          if (!allowed)
            continue;

          const double *k = K + (b * Lk + j) * Fk + g * Dh;
          double s = 0.0;
          for (int64_t d = 0; d < Dh; d++)
            s += q[d] * k[d];
          s *= scale;
          if (p->has_softcap) {
            const double c = (double)p->softcap;
            s = c * tanh(s / c);
          }
          if (bias != NULL)
            s += (double)bias[ref_bcast_offset(&p->bias, idx)];
          if (p->alibi != ATTN_ALIBI_NONE) {
            int64_t dist = i + off - j;
            if (dist < 0)
              dist = -dist;
            s -= slopes[h] * (double)dist;
          }
          if (s == -INFINITY) { /* a bias of -inf is a mask (attn.h) */
            ok[j] = 0;
            continue;
          }
          srow[j] = s;
          if (s > mx)
            mx = s;
          any = 1;
        }

        double *w = r->weights + ((b * H + h) * Lq + i) * Lk;
        double *o = r->head_outputs + ((b * H + h) * Lq + i) * Dv;
        if (!any) {
          r->row_dead[(b * H + h) * Lq + i] = 1;
          continue; /* weights and output stay 0 */
        }
        double sum = 0.0;
        for (int64_t j = 0; j < Lk; j++) {
          w[j] = ok[j] ? exp(srow[j] - mx) : 0.0;
          sum += w[j];
        }
        for (int64_t j = 0; j < Lk; j++)
          w[j] /= sum;
        for (int64_t j = 0; j < Lk; j++) {
          if (!ok[j])
            continue;
          const double *v = V + (b * Lk + j) * Fv + g * Dv;
          for (int64_t d = 0; d < Dv; d++)
            o[d] += w[j] * v[d];
        }
      }
    }
  }

  /* Pass 4: concat [B, Lq, H·Dv], then the output projection. */
  concat = malloc((size_t)(B * Lq * H * Dv) * sizeof *concat + 1);
  if (concat == NULL)
    goto done;
  for (int64_t b = 0; b < B; b++)
    for (int64_t i = 0; i < Lq; i++)
      for (int64_t h = 0; h < H; h++)
        for (int64_t d = 0; d < Dv; d++)
          concat[((b * Lq + i) * H + h) * Dv + d] =
              r->head_outputs[((b * H + h) * Lq + i) * Dv + d];
  /* The same nn.Linear rule as ref_project, on double input. */
  {
    const int64_t Cin = H * Dv;
    const attn_tensor_t *w = &p->o_weight, *bb = &p->o_bias;
    int64_t Eo = Cin;
    if (w->rank != 0) {
      if (w->rank != 2 || w->dim[1] != Cin)
        goto done;
      Eo = w->dim[0];
    }
    if (bb->rank != 0 && (bb->rank != 1 || bb->dim[0] != Eo))
      goto done;
    const float *wd = w->rank != 0 ? w->data : NULL;
    const float *bd = bb->rank != 0 ? bb->data : NULL;
    r->Eo = Eo;
    r->out = malloc((size_t)(B * Lq * Eo) * sizeof(double) + 1);
    if (r->out == NULL)
      goto done;
    for (int64_t n = 0; n < B * Lq; n++) {
      for (int64_t e = 0; e < Eo; e++) {
        double acc;
        if (wd != NULL) {
          acc = 0.0;
          for (int64_t c = 0; c < Cin; c++)
            acc += concat[n * Cin + c] * (double)wd[e * Cin + c];
        } else {
          acc = concat[n * Cin + e];
        }
        if (bd != NULL)
          acc += (double)bd[e];
        r->out[n * Eo + e] = acc;
      }
    }
  }

  /* Pass 5: mean of the weights over heads. */
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t x = 0; x < Lq * Lk; x++)
        r->mean_weights[b * Lq * Lk + x] +=
            r->weights[(b * H + h) * Lq * Lk + x] / (double)H;
  rc = 0;

done:
  free(Q);
  free(K);
  free(V);
  free(concat);
  free(srow);
  free(ok);
  free(slopes);
  if (rc != 0)
    ref_result_free(r);
  return rc;
}

/* ---- reductions of the weights ------------------------------------------ */

int ref_reduce(const attn_params_t *p, const ref_result_t *r, ref_reduce_t *o) {
  const attn_reduce_t *x = &p->reduce;
  const int64_t B = r->B, H = r->H, Lq = r->Lq, Lk = r->Lk, K = x->top_k;
  memset(o, 0, sizeof *o);
  o->rH = x->mean_heads ? 1 : H;
  o->q0 = x->has_query_range ? x->query_range[0] : 0;
  o->q1 = x->has_query_range ? x->query_range[1] : Lq;
  o->k0 = x->has_key_range ? x->key_range[0] : 0;
  o->k1 = x->has_key_range ? x->key_range[1] : Lk;
  const int64_t nrow = o->q1 - o->q0, ncol = o->k1 - o->k0;
  if (x->pool_q) { /* ceil(n / pool), for a pool of any size up to 2^63 - 1 */
    o->nq = (nrow - 1) / x->pool_q + 1;
    o->nk = (ncol - 1) / x->pool_k + 1;
  }
  const size_t rows = (size_t)(B * o->rH * nrow);
  o->top_k_index = calloc(rows * (size_t)K + 1, sizeof(int64_t));
  o->top_k_value = calloc(rows * (size_t)K + 1, sizeof(double));
  o->pooled = calloc((size_t)(B * o->rH * o->nq * o->nk) + 1, sizeof(double));
  o->entropy = calloc(rows + 1, sizeof(double));
  o->sink = calloc(rows + 1, sizeof(double));
  o->distance = calloc(rows + 1, sizeof(double));
  int64_t *used = calloc((size_t)Lk + 1, sizeof(int64_t));
  if (!o->top_k_index || !o->top_k_value || !o->pooled || !o->entropy ||
      !o->sink || !o->distance || !used) {
    free(used);
    ref_reduce_free(o);
    return -1;
  }
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < o->rH; h++)
      for (int64_t i = o->q0; i < o->q1; i++) {
        const double *w = x->mean_heads
                              ? r->mean_weights + (b * Lq + i) * Lk
                              : r->weights + ((b * H + h) * Lq + i) * Lk;
        const int64_t row = (b * o->rH + h) * nrow + i - o->q0;
        /* statistics: over every key */
        double ent = 0, sink = 0, dist = 0;
        for (int64_t j = 0; j < Lk; j++) {
          if (w[j] > 0)
            ent -= w[j] * log(w[j]);
          if (j < x->sink_tokens)
            sink += w[j];
          dist += w[j] * (double)llabs(i + Lk - Lq - j);
        }
        o->entropy[row] = ent;
        o->sink[row] = sink;
        o->distance[row] = dist;
        /* top k: the heaviest key of the range not yet taken, k times */
        for (int64_t j = 0; j < Lk; j++)
          used[j] = 0;
        for (int64_t t = 0; t < K; t++) {
          int64_t best = -1;
          for (int64_t j = o->k0; j < o->k1; j++)
            if (!used[j] && w[j] > 0 && (best < 0 || w[j] > w[best]))
              best = j;
          o->top_k_index[row * K + t] = best;
          o->top_k_value[row * K + t] = best < 0 ? 0 : w[best];
          if (best >= 0)
            used[best] = 1;
        }
        /* pooled: this row's cells, into its block */
        if (x->pool_q) {
          double *y =
              o->pooled +
              ((b * o->rH + h) * o->nq + (i - o->q0) / x->pool_q) * o->nk;
          for (int64_t j = o->k0; j < o->k1; j++) {
            double *c = &y[(j - o->k0) / x->pool_k];
            *c = x->pool_reduce == ATTN_POOL_MAX ? fmax(*c, w[j]) : *c + w[j];
          }
        }
      }
  if (x->pool_q && x->pool_reduce == ATTN_POOL_MEAN)
    for (int64_t t = 0; t < B * o->rH * o->nq * o->nk; t++) {
      int64_t qp = t / o->nk % o->nq, kp = t % o->nk;
      int64_t nr = nrow - qp * x->pool_q, nc = ncol - kp * x->pool_k;
      nr = nr < x->pool_q ? nr : x->pool_q;
      nc = nc < x->pool_k ? nc : x->pool_k;
      o->pooled[t] /= (double)(nr * nc);
    }
  free(used);
  return 0;
}

void ref_reduce_free(ref_reduce_t *o) {
  free(o->top_k_index);
  free(o->top_k_value);
  free(o->pooled);
  free(o->entropy);
  free(o->sink);
  free(o->distance);
  memset(o, 0, sizeof *o);
}
