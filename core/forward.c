/* core/forward.c: one attention forward call, stage by stage.
 *
 *   stage 1  layout: Q, K and V projected (sgemm) or copied into the
 *            kernels' layouts (internal.h), in independent row chunks;
 *   stage 2  attention: fused scores, masks, softmax and mixing, one unit of
 *            query rows per task (core/kernel.c);
 *   stage 3  output projection, in independent row chunks.
 * Each stage is a list of independent tasks shared out among the threads;
 * a task computes the same thing whichever thread runs it, so results do
 * not depend on the thread count. BLAS runs single-threaded inside tasks. */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "internal.h"

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static void blas_single_thread(void) {
  openblas_set_num_threads(1);
}

void attn_alibi_default_slopes(int64_t H, float *slopes) {
  /* The ALiBi reference: 2^(-8(h+1)/n) for the largest power of two n <= H,
   * then every other slope of the rule for 2n heads. */
  int64_t n = 1;
  while (n * 2 <= H)
    n *= 2;
  for (int64_t h = 0; h < n; h++)
    slopes[h] = (float)exp2(-8.0 * (double)(h + 1) / (double)n);
  for (int64_t k = 0; k < H - n; k++)
    slopes[n + k] = (float)exp2(-8.0 * (double)(2 * k + 1) / (double)(2 * n));
}

size_t attn__scratch_floats(const attn_plan_t *pl) {
  const attn_params_t *p = pl->params;
  int64_t Lkp = attn__round_up(pl->Lk, ATTN__BC);
  int64_t Dvp = attn__round_up(pl->Dv, ATTN__VPAD);
  int64_t cols = (p->want_weights || p->want_mean_weights) ? Lkp : ATTN__BC;
  /* scores or probabilities [BR, cols], output rows [BR, Dvp], query rows
   * [BR, Dh], the running
   * sum [BR] as vectors of up to 16 floats, the running max [BR], and the
   * key range of each row [BR] x 2 int64. */
  return (size_t)(ATTN__BR * cols + ATTN__BR * Dvp + ATTN__BR * pl->Dh +
                  16 * ATTN__BR + 5 * ATTN__BR);
}

/* Element strides of a tensor broadcast to [B, H, Lq, Lk]; 0 where it is
 * broadcast. */
static void broadcast_strides(const attn_tensor_t *t, int64_t st[4]) {
  int64_t s = 1;
  for (int i = 3; i >= 0; i--) {
    int k = t->rank - 4 + i;
    int64_t d = k >= 0 ? t->dim[k] : 1;
    st[i] = d == 1 ? 0 : s;
    s *= d;
  }
}

typedef struct fwd {
  const attn_plan_t *pl;
  const attn_params_t *p;
  attn__ctx_t ctx;
  const float *query, *key, *value;
  float *q, *kt, *v, *out;
  float *scratch;
  size_t scratch_stride;
  int64_t rows;                               /* per projection task */
  int64_t n_q, n_k, n_layout, n_units, n_out; /* V has as many tasks as K */
  attn__attend_fn attend;
} fwd_t;

static int64_t chunks(int64_t n, int64_t rows) {
  return (n + rows - 1) / rows;
}

/* Rows per projection task for this shape (internal.h). */
static int64_t proj_rows(const attn_plan_t *pl) {
  int64_t rows = ATTN__PROJ_ROWS_MAX;
  while (rows > ATTN__PROJ_ROWS_MIN &&
         pl->B * (chunks(pl->Lq, rows) + 2 * chunks(pl->Lk, rows)) <
             ATTN__PROJ_TASKS)
    rows /= 2;
  return rows;
}

/* Q for batch b, rows [i0, i1): q[b, i, :] = scale·(x·Wqᵀ + bq), all heads
 * in one product. */
static void layout_q(const fwd_t *f, int64_t b, int64_t i0, int64_t i1) {
  const attn_plan_t *pl = f->pl;
  const attn_params_t *p = f->p;
  int64_t n = pl->H * pl->Dh, Eq = pl->Eq, m = i1 - i0;
  const float *x = f->query + (b * pl->Lq + i0) * Eq;
  float *dst = f->q + (b * pl->Lq + i0) * n;
  const float *bias = p->q_bias.rank ? p->q_bias.data : NULL;
  float s = pl->scale;
  if (p->q_weight.rank) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)n,
                (int)Eq, s, x, (int)Eq, p->q_weight.data, (int)Eq, 0.0f, dst,
                (int)n);
    if (bias)
      for (int64_t r = 0; r < m; r++)
        for (int64_t k = 0; k < n; k++)
          dst[r * n + k] += s * bias[k];
  } else {
    for (int64_t r = 0; r < m; r++)
      for (int64_t k = 0; k < n; k++)
        dst[r * n + k] = s * (x[r * Eq + k] + (bias ? bias[k] : 0));
  }
}

/* K for batch b, keys [j0, j1): kt[b, :, j] = Wk·key[j] + bk, all heads in
 * one product; the last chunk zeroes the keys [Lk, Lkp). */
static void layout_k(const fwd_t *f, int64_t b, int64_t j0, int64_t j1) {
  const attn_plan_t *pl = f->pl;
  const attn_params_t *p = f->p;
  int64_t rows = pl->Hkv * pl->Dh, Ek = pl->Ek, ldk = f->ctx.ldk, n = j1 - j0;
  const float *x = f->key + (b * pl->Lk + j0) * Ek;
  float *base = f->kt + b * rows * ldk, *dst = base + j0;
  const float *bias = p->k_bias.rank ? p->k_bias.data : NULL;
  if (p->k_weight.rank) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)n,
                (int)Ek, 1.0f, p->k_weight.data, (int)Ek, x, (int)Ek, 0.0f, dst,
                (int)ldk);
    if (bias)
      for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < n; j++)
          dst[r * ldk + j] += bias[r];
  } else {
    for (int64_t j = 0; j < n; j++)
      for (int64_t r = 0; r < rows; r++)
        dst[r * ldk + j] = x[j * Ek + r] + (bias ? bias[r] : 0);
  }
  if (j1 == pl->Lk)
    for (int64_t r = 0; r < rows; r++)
      memset(base + r * ldk + pl->Lk, 0,
             (size_t)(f->ctx.Lkp - pl->Lk) * sizeof(float));
}

/* V for batch b, rows [j0, j1): v[b, j, g·Dvp + d] = value[j]·Wv_gᵀ + bv,
 * all heads in one product when no head needs padding; padding columns and,
 * in the last chunk, the rows [Lk, Lkp) zeroed. */
static void layout_v(const fwd_t *f, int64_t b, int64_t j0, int64_t j1) {
  const attn_plan_t *pl = f->pl;
  const attn_params_t *p = f->p;
  int64_t Dv = pl->Dv, Dvp = f->ctx.Dvp, Ev = pl->Ev, m = j1 - j0;
  int64_t ldv = f->ctx.ldv, Hkv = pl->Hkv;
  const float *x = f->value + (b * pl->Lk + j0) * Ev;
  float *base = f->v + b * f->ctx.Lkp * ldv, *dst = base + j0 * ldv;
  const float *bias = p->v_bias.rank ? p->v_bias.data : NULL;
  if (p->v_weight.rank) {
    const float *w = p->v_weight.data;
    for (int64_t g = 0; g < Hkv; g += Dv == Dvp ? Hkv : 1)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m,
                  (int)(Dv == Dvp ? Hkv * Dv : Dv), (int)Ev, 1.0f, x, (int)Ev,
                  w + g * Dv * Ev, (int)Ev, 0.0f, dst + g * Dvp, (int)ldv);
    if (bias)
      for (int64_t r = 0; r < m; r++)
        for (int64_t g = 0; g < Hkv; g++)
          for (int64_t d = 0; d < Dv; d++)
            dst[r * ldv + g * Dvp + d] += bias[g * Dv + d];
  } else {
    for (int64_t r = 0; r < m; r++)
      for (int64_t g = 0; g < Hkv; g++)
        for (int64_t d = 0; d < Dv; d++)
          dst[r * ldv + g * Dvp + d] =
              x[r * Ev + g * Dv + d] + (bias ? bias[g * Dv + d] : 0);
  }
  if (Dv < Dvp)
    for (int64_t r = 0; r < m; r++)
      for (int64_t g = 0; g < Hkv; g++)
        memset(dst + r * ldv + g * Dvp + Dv, 0,
               (size_t)(Dvp - Dv) * sizeof(float));
  if (j1 == pl->Lk)
    memset(base + pl->Lk * ldv, 0,
           (size_t)((f->ctx.Lkp - pl->Lk) * ldv) * sizeof(float));
}

/* Layout task t of n_layout: the Q chunks, then K, then V. */
static void layout_task(const fwd_t *f, int64_t t) {
  const attn_plan_t *pl = f->pl;
  int64_t R = f->rows, cq = chunks(pl->Lq, R), ck = chunks(pl->Lk, R);
  if (t < f->n_q) {
    int64_t i0 = t % cq * R, i1 = i0 + R;
    layout_q(f, t / cq, i0, i1 < pl->Lq ? i1 : pl->Lq);
    return;
  }
  t -= f->n_q;
  if (t < f->n_k) {
    int64_t j0 = t % ck * R, j1 = j0 + R;
    layout_k(f, t / ck, j0, j1 < pl->Lk ? j1 : pl->Lk);
    return;
  }
  t -= f->n_k;
  int64_t j0 = t % ck * R, j1 = j0 + R;
  layout_v(f, t / ck, j0, j1 < pl->Lk ? j1 : pl->Lk);
}

/* Attention unit u of n_units. The last query blocks come first: under a
 * causal mask they hold the most work, and dynamic scheduling then ends
 * with the short ones. */
static void attend_task(const fwd_t *f, int64_t u, float *scratch) {
  const attn__ctx_t *c = &f->ctx;
  int64_t per_block = f->pl->B * (f->pl->H / c->heads_per_unit);
  int64_t qb = c->n_qblocks - 1 - u / per_block, rest = u % per_block;
  int64_t hu = f->pl->H / c->heads_per_unit;
  f->attend(c, rest / hu, (rest % hu) * c->heads_per_unit, qb, scratch);
}

/* Output task t: rows [r0, r1) of the flattened [B·Lq] output. */
static void output_task(const fwd_t *f, int64_t t) {
  const attn_plan_t *pl = f->pl;
  const attn_params_t *p = f->p;
  int64_t r0 = t * f->rows, r1 = r0 + f->rows;
  if (r1 > pl->B * pl->Lq)
    r1 = pl->B * pl->Lq;
  int64_t K = pl->H * pl->Dv, Eo = pl->Eo;
  float *y = f->out + r0 * Eo;
  if (p->o_weight.rank)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)(r1 - r0),
                (int)Eo, (int)K, 1.0f, f->ctx.concat + r0 * K, (int)K,
                p->o_weight.data, (int)K, 0.0f, y, (int)Eo);
  if (p->o_bias.rank) {
    const float *bias = p->o_bias.data;
    for (int64_t r = 0; r < r1 - r0; r++)
      for (int64_t e = 0; e < Eo; e++)
        y[r * Eo + e] += bias[e];
  }
}

static int canceled(const attn_plan_t *pl) {
  return pl->cancel && __atomic_load_n(pl->cancel, __ATOMIC_RELAXED);
}

/* Carves n floats, cache-line aligned, off *ws. */
static float *carve(char **ws, int64_t n) {
  float *r = (float *)*ws;
  *ws += attn__round_up(n, ATTN__ALIGN / 4) * 4;
  return r;
}

static void setup(fwd_t *f, const attn_plan_t *pl, attn_outputs_t *o,
                  void *workspace) {
  const attn_params_t *p = pl->params;
  attn__ctx_t *c = &f->ctx;
  memset(f, 0, sizeof *f);
  f->pl = pl;
  f->p = p;
  f->query = p->query.data;
  f->key = p->key.rank ? p->key.data : f->query;
  f->value = p->value.rank ? p->value.data : f->key;
  f->out = o->out;

  c->plan = pl;
  c->Lkp = attn__round_up(pl->Lk, ATTN__BC);
  c->Dvp = attn__round_up(pl->Dv, ATTN__VPAD);
  c->off = pl->Lk - pl->Lq;
  char *ws = workspace;
  c->ldk = attn__ldk(c->Lkp);
  c->ldv = attn__ldv(pl->Hkv, c->Dvp);
  f->q = carve(&ws, pl->B * pl->Lq * pl->H * pl->Dh);
  f->kt = carve(&ws, pl->B * pl->Hkv * pl->Dh * c->ldk);
  f->v = carve(&ws, pl->B * c->Lkp * c->ldv);
  c->concat =
      p->o_weight.rank ? carve(&ws, pl->B * pl->Lq * pl->H * pl->Dv) : o->out;
  float *slopes = carve(&ws, pl->H);
  f->scratch_stride = (size_t)attn__round_up((int64_t)attn__scratch_floats(pl),
                                             ATTN__ALIGN / 4);
  f->scratch = (float *)ws;

  c->q = f->q;
  c->kt = f->kt;
  c->v = f->v;
  c->head_outputs = p->want_head_outputs ? o->head_outputs : NULL;
  c->weights = p->want_weights ? o->weights : NULL;
  c->mean_weights = p->want_mean_weights ? o->mean_weights : NULL;
  if (p->alibi == ATTN_ALIBI_DEFAULT) {
    attn_alibi_default_slopes(pl->H, slopes);
    c->slopes = slopes;
  } else if (p->alibi == ATTN_ALIBI_SLOPES) {
    c->slopes = p->alibi_slopes.data;
  }
  c->key_lengths = p->key_lengths.rank ? p->key_lengths.data : NULL;
  if (p->allow.rank) {
    c->allow = p->allow.data;
    broadcast_strides(&p->allow, c->allow_st);
  }
  if (p->bias.rank) {
    c->bias = p->bias.data;
    broadcast_strides(&p->bias, c->bias_st);
  }
  c->has_softcap = p->has_softcap;
  c->softcap = p->softcap;
  c->wl = p->has_window_left ? p->window_left : -1;
  c->wr = p->has_window_right ? p->window_right : -1;
  c->n_qblocks = (pl->Lq + ATTN__BR - 1) / ATTN__BR;
  c->heads_per_unit = p->want_mean_weights ? (int)pl->H : 1;
  c->scratch_floats = attn__scratch_floats(pl);

  f->rows = proj_rows(pl);
  f->n_q = pl->B * chunks(pl->Lq, f->rows);
  f->n_k = pl->B * chunks(pl->Lk, f->rows);
  f->n_layout = f->n_q + 2 * f->n_k;
  f->n_units = pl->B * (pl->H / c->heads_per_unit) * c->n_qblocks;
  f->n_out = (p->o_weight.rank || p->o_bias.rank)
                 ? chunks(pl->B * pl->Lq, f->rows)
                 : 0;
  f->attend = pl->isa == ATTN_ISA_AVX512 ? attn__attend_avx512
              : pl->isa == ATTN_ISA_AVX2 ? attn__attend_avx2
                                         : attn__attend_generic;
}

int attn_forward(const attn_plan_t *pl, attn_outputs_t *o, void *workspace,
                 size_t workspace_bytes, attn_error_t *err) {
  const attn_params_t *p = pl->params;
  if (err)
    memset(err, 0, sizeof *err);
  if (o == NULL || o->out == NULL)
    return attn__err(err, ATTN_EINVAL, ATTN_FIELD_OUT,
                     "out [%lld] buffer is required", (long long)pl->out_elems);
  if (p->want_weights && o->weights == NULL)
    return attn__err(err, ATTN_EINVAL, ATTN_FIELD_WEIGHTS,
                     "weights [%lld] buffer is required when asked for",
                     (long long)pl->weights_elems);
  if (p->want_mean_weights && o->mean_weights == NULL)
    return attn__err(err, ATTN_EINVAL, ATTN_FIELD_MEAN_WEIGHTS,
                     "mean_weights [%lld] buffer is required when asked for",
                     (long long)pl->mean_elems);
  if (p->want_head_outputs && o->head_outputs == NULL)
    return attn__err(err, ATTN_EINVAL, ATTN_FIELD_HEAD_OUTPUTS,
                     "head_outputs [%lld] buffer is required when asked for",
                     (long long)pl->head_elems);
  if (workspace == NULL || workspace_bytes < pl->workspace_bytes ||
      (uintptr_t)workspace % ATTN__ALIGN)
    return attn__err(err, ATTN_ENOSPC, ATTN_FIELD_WORKSPACE,
                     "workspace of %zu bytes at %p: need %zu bytes, %d-byte "
                     "aligned",
                     workspace_bytes, workspace, pl->workspace_bytes,
                     ATTN__ALIGN);
  pthread_once(&blas_once, blas_single_thread);

  fwd_t f;
  setup(&f, pl, o, workspace);
  double t0 = now_ms(), t1 = t0, t2 = t0;
#pragma omp parallel num_threads(pl->threads) if (pl->threads > 1)
  {
    float *scratch =
        f.scratch + (size_t)omp_get_thread_num() * f.scratch_stride;
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < f.n_layout; t++)
      if (!canceled(pl))
        layout_task(&f, t);
#pragma omp master
    t1 = now_ms();
#pragma omp for schedule(dynamic, 1)
    for (int64_t u = 0; u < f.n_units; u++)
      if (!canceled(pl))
        attend_task(&f, u, scratch);
#pragma omp master
    t2 = now_ms();
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < f.n_out; t++)
      if (!canceled(pl))
        output_task(&f, t);
  }
  double t3 = now_ms();
  o->timing.projection_ms = t1 - t0;
  o->timing.attention_ms = t2 - t1;
  o->timing.output_ms = t3 - t2;
  o->timing.total_ms = t3 - t0;
  if (canceled(pl))
    return attn__err(err, ATTN_ECANCELED, ATTN_FIELD_CANCEL,
                     "canceled after %.3f ms", t3 - t0);
  return 0;
}
