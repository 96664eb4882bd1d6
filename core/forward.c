/* core/forward.c: one attention forward call, stage by stage.
 *
 *   stage 1  layout: Q, K and V projected (sgemm) or copied into the
 *            kernels' layouts (internal.h), in independent row chunks
 *            (shorter with many threads, ATTN__PROJ_ROWS_MIN), each in
 *            groups of whole heads when wide (ATTN__PROJ_COLS);
 *   stage 2  attention: fused scores, masks, softmax and mixing, one unit of
 *            query rows per task (core/kernel.c);
 *   stage 3  output projection, in independent row chunks and, when wide,
 *            column groups.
 * Each stage is a list of independent tasks shared out among the threads;
 * a task computes the same thing whichever thread runs it, so results do
 * not depend on the thread count. BLAS runs single-threaded inside tasks.
 * The splits the thread count chooses, the projections' row chunks and
 * column groups (internal.h, ATTN__PROJ_ROWS_MIN and ATTN__PROJ_COLS), only
 * change which rows and columns of C each sgemm call writes: each element
 * is the same product over the same K either way (OpenBLAS, checked in
 * tests/check_properties.c's determinism cases and by hand at 1024 x 4096
 * x 4096, to the bit). That holds for calls of whole chunks and groups,
 * not for a call of a few rows or columns, which OpenBLAS (and gemm_nt's
 * dots) compute otherwise: so the partial last chunk and group of a
 * projection are always a call of their own (gemm_cut).
 *
 * Numbers: every task of stage 1 also takes the largest magnitude of what
 * it wrote (and of a chunk of the bias), so that between stages 1 and 2
 * one bound says whether any score could leave float32's range. If one
 * could, the kernels take their exact path (kernel.c, ctx->exact). A Q, K
 * or V that is not finite, an output row the kernels could not write in
 * float32, or an output projection that overflows ends the call with
 * ATTN_ENUMERIC naming the stage and the first position where it failed
 * (attn.h); a Q that overflows only through the scale is laid out again
 * unscaled and the scale applied in float64 instead. */
#include <cblas.h>
#include <float.h>
#include <math.h>
#ifdef _OPENMP /* not in the TSan build (the Makefile's SAN=thread) */
#include <omp.h>
#endif
#include <pthread.h>
#include <stddef.h>
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

/* Attention units of a call: a block of query rows of one head, or of all
 * heads when their mean weights are asked for. */
static int64_t heads_per_unit(const attn_plan_t *pl) {
  const attn_params_t *p = pl->params;
  return p->want_mean_weights || (pl->reduce && p->reduce.mean_heads) ? pl->H
                                                                      : 1;
}
static int64_t units(const attn_plan_t *pl) {
  int64_t hpu = heads_per_unit(pl);
  return pl->B * (pl->H / hpu) * ((pl->Lq + ATTN__BR - 1) / ATTN__BR);
}

/* The offset of a part of n floats at *at, whole cache lines, and the end
 * of it into *at. */
static int64_t part(int64_t *at, int64_t n) {
  int64_t r = *at;
  *at += attn__round_up(n, ATTN__ALIGN / 4);
  return r;
}

void attn__scratch_plan(const attn_plan_t *pl, attn__scratch_t *sc) {
  const attn_params_t *p = pl->params;
  const int64_t rows = pl->Lq < ATTN__BR ? pl->Lq : ATTN__BR;
  const int64_t Lkp = attn__round_up(pl->Lk, ATTN__KPAD);
  const int64_t Dvp = attn__round_up(pl->Dv, ATTN__VPAD);
  int64_t at = 0;
  sc->rows = rows;
  sc->lds =
      (p->want_weights || p->want_mean_weights || pl->reduce) ? Lkp : ATTN__BC;
  /* the online path's [rows, ATTN__BC] too, where reductions may take it */
  sc->s = part(&at, rows * (sc->lds > ATTN__BC ? sc->lds : ATTN__BC));
  sc->o = part(&at, rows * Dvp);
  sc->q = part(&at, rows > 1 ? rows * pl->Dh : 0);
  sc->l = part(&at, rows * 16);
  sc->m = part(&at, rows);
  sc->lo = part(&at, 2 * rows);
  sc->hi = part(&at, 2 * rows);
  sc->acc = part(&at, 2 * Dvp);
  sc->mw = part(&at, pl->reduce && p->reduce.mean_heads ? rows * sc->lds : 0);
  /* top-k's keys: uint64, in whole vectors of 8 (kernel.c's KP) */
  const int64_t kp = attn__round_up(p->reduce.top_k, 8);
  sc->tk = part(&at, pl->reduce ? 2 * kp : 0);
  const int online = pl->reduce && !p->reduce.mean_heads;
  sc->ex = part(&at, online ? rows * 48 : 0);
  sc->hk = part(&at, online ? 2 * rows * kp : 0);
  sc->hn = part(&at, online ? 2 * rows : 0);
  sc->pool = part(&at, online && p->reduce.pool_q ? rows * pl->pool_nk : 0);
  sc->floats = at;
  int64_t n = units(pl);
  sc->slots = pl->threads < n ? pl->threads : n;
  int64_t half = pl->rope_dims / 2;
  sc->stage1 = 4 * (half < ATTN__ROPE_CHUNK ? half : ATTN__ROPE_CHUNK);
}

void attn__broadcast_strides(const attn_tensor_t *t, int64_t st[4]) {
  int64_t s = 1;
  for (int i = 3; i >= 0; i--) {
    int k = t->rank - 4 + i;
    int64_t d = k >= 0 ? t->dim[k] : 1;
    st[i] = d == 1 ? 0 : s;
    s *= d;
  }
}

/* Indices of fwd_t.bits: the magnitudes stage 1 found. */
enum { BITS_Q, BITS_K, BITS_V, BITS_BIAS, BITS_N };

/* Bias elements per magnitude task of stage 1. */
#define BIAS_CHUNK ((int64_t)1 << 20)

typedef struct fwd {
  const attn_plan_t *pl;
  const attn_params_t *p;
  attn__ctx_t ctx;
  const float *query, *key, *value;
  float *q, *kt, *v, *out;
  float *out_pooled;   /* attn_outputs_t's pooled */
  float *knew, *vnew;  /* with a kv cache: the new rows of K and V */
  float *stage1, *att; /* the threads' scratch (attn__scratch_t) */
  int64_t stage1_stride, att_stride;
  int64_t rows;      /* per layout (Q, K and V) task */
  int64_t orows;     /* per output projection task */
  int64_t lnk;       /* rows of the key and value inputs: Lk, or Lq with a kv
                        cache (the new tokens) */
  uint32_t k_cached; /* with a kv cache: the magnitude bits of its keys */
  int64_t n_q, n_k, n_units, n_out; /* V has as many tasks as K */
  /* Column groups of a row chunk (ATTN__PROJ_COLS): of Q, gq of hq heads;
   * of K and V, gkv of hkv heads; of the output, gout of ocols columns.
   * A task is a row chunk and a group, the group varying fastest. */
  int64_t hq, gq, hkv, gkv, ocols, gout;
  int64_t n_layout; /* Q, K, V and bias tasks */
  int64_t n_bias;   /* magnitude tasks of bias */
  int64_t n_pool;   /* pooled rows (attn_reduce_t) */
  int64_t next[5];  /* per stage, the next task to take */
  attn__attend_fn attend;
  attn__absmax_fn absmax;
  attn__dots_fn dots;
  float qscale;            /* what layout_q multiplies by: the scale, or 1 */
  const double *rope_freq; /* [rope_dims / 2], or NULL without rope */
  double norm_eps;
  int64_t n_redo;        /* Q tasks to run again, unscaled */
  int stop;              /* a stage failed: skip the stages after it */
  double t[3];           /* ms: start, projections done, attention done */
  int64_t busy_ns[3];    /* the threads' time in each part's tasks (timing) */
  uint32_t bits[BITS_N]; /* atomic maxima (attn__absmax_fn) */
  int64_t fail[ATTN__FAIL_N]; /* ctx.fail points here */
} fwd_t;

/* C [m, n] (rows ldc apart) = alpha · A [m, k] · Bᵀ, B [n, k]: A and B
 * row-major, rows lda and ldb apart. OpenBLAS's sgemm packs the whole of
 * both operands on every call, which with a short side (a batch of decode
 * steps against a 512 x 512 weight) costs more than the product: with a
 * side of under 4 rows, or of at most DOTS_MAX that fits in DOTS_BYTES,
 * the product runs as dots of rows instead (attn__dots_fn), which read
 * the long side once and the short one from the cache. For a 512 x 512
 * weight that takes 0.84 to 1.04 of sgemv's time for one row and is 2.6
 * to 2.8 times as fast as sgemm at 4 to 6 rows, even at 32 to 64
 * (docs/performance.md, Batching). A step's rows then come out the same,
 * bit for bit, whether it runs alone or in a batch of up to DOTS_MAX. */
#define DOTS_MAX 32
#define DOTS_BYTES (256 << 10) /* of the short side, beyond 3 rows */
static int short_side(int64_t rows, int64_t k) {
  return rows < 4 ||
         (rows <= DOTS_MAX && rows * k * (int64_t)sizeof(float) <= DOTS_BYTES);
}

static void gemm_nt(const fwd_t *f, int64_t m, int64_t n, int64_t k,
                    float alpha, const float *a, int64_t lda, const float *b,
                    int64_t ldb, float *c, int64_t ldc) {
  if (m <= n && short_side(m, k)) /* B is the long side: c[i, j] at j + i·ldc */
    f->dots(n, m, k, alpha, b, ldb, a, lda, c, 1, ldc);
  else if (short_side(n, k))
    f->dots(m, n, k, alpha, a, lda, b, ldb, c, ldc, 1);
  else
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)n, (int)k,
                alpha, a, (int)lda, b, (int)ldb, 0.0f, c, (int)ldc);
}

/* Where the partial last cell of an axis of n, in cells of `cell`, begins
 * (n when there is none; 0 when n < cell: the whole axis is that cell). */
static int64_t tail_start(int64_t n, int64_t cell) {
  return n - n % cell;
}

/* gemm_nt over a block of a projection, its calls cut where the
 * projection's own tails begin: rows [0, mcut) and [mcut, m), columns
 * [0, ncut) and [ncut, n) (a cut outside (0, m) or (0, n) cuts nothing).
 * The row chunks and column groups (internal.h) change with the threads,
 * but both are whole cells (ATTN__PROJ_ROWS_MIN rows, a group's heads or
 * columns) from the projection's start; so with the tails cut apart, each
 * element's call has the same tail or body shape whatever the threads.
 * That matters because the kernels do not give a row the same bits in
 * calls of other shapes: dots take the short side that gemm_nt finds in
 * the call, and OpenBLAS's sgemm has its own kernels for small matrices (a
 * row computed in a call of 2 rows differs from the same row in a call of
 * 258). Bodies are sgemm calls of at least ATTN__PROJ_ROWS_MIN rows or a
 * group's columns, whose elements do not depend on the call's size. */
static void gemm_cut(const fwd_t *f, int64_t m, int64_t n, int64_t k,
                     float alpha, const float *a, int64_t lda, const float *b,
                     int64_t ldb, float *c, int64_t ldc, int64_t mcut,
                     int64_t ncut) {
  const int64_t mc[3] = {0, mcut > 0 && mcut < m ? mcut : m, m};
  const int64_t nc[3] = {0, ncut > 0 && ncut < n ? ncut : n, n};
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 2; j++)
      if (mc[i + 1] > mc[i] && nc[j + 1] > nc[j])
        gemm_nt(f, mc[i + 1] - mc[i], nc[j + 1] - nc[j], k, alpha,
                a + mc[i] * lda, lda, b + nc[j] * ldb, ldb,
                c + mc[i] * ldc + nc[j], ldc);
}

/* The heads of a column group of Q (d = Dh), or of K and V (d = the wider
 * of Dh and Dv), where the projection is split by columns (internal.h,
 * ATTN__PROJ_COLS); gemm_cut cuts at the last partial group whether or not
 * this call's threads split it. */
static int64_t group_heads(int64_t d) {
  return d < ATTN__PROJ_COLS ? ATTN__PROJ_COLS / d : 1;
}

/* Raises f->bits[k] to at least m, atomically. */
static void raise_bits(fwd_t *f, int k, uint32_t m) {
  uint32_t cur = __atomic_load_n(&f->bits[k], __ATOMIC_RELAXED);
  while (m > cur &&
         !__atomic_compare_exchange_n(&f->bits[k], &cur, m, 1, __ATOMIC_RELAXED,
                                      __ATOMIC_RELAXED))
    ;
}

/* Takes the magnitude of rows [0, rows) of n floats, ld apart, into
 * f->bits[k] (k < 0: nowhere). When some element is not finite, lowers
 * fail[stage] to pos0 plus the first row holding one or, with by_column,
 * the first column (K is laid out transposed: a column is a key). */
static void note(fwd_t *f, int k, const float *x, int64_t rows, int64_t n,
                 int64_t ld, int stage, int64_t pos0, int by_column) {
  uint32_t m = f->absmax(x, rows, n, ld, 0);
  if (k >= 0)
    raise_bits(f, k, m);
  if (m < ATTN__INF_BITS)
    return;
  int64_t lines = by_column ? n : rows;
  for (int64_t r = 0; r < lines; r++)
    if ((by_column ? f->absmax(x + r, rows, 1, ld, 0)
                   : f->absmax(x + r * ld, 1, n, ld, 0)) >= ATTN__INF_BITS) {
      attn__fail(f->fail, stage, pos0 + r);
      return;
    }
}

static int64_t chunks(int64_t n, int64_t rows) {
  return (n + rows - 1) / rows;
}

/* Whether n equal tasks keep `threads` threads busy 7/8 of the time or
 * more, counted in rounds of one task a thread. */
static int busy(int64_t n, int threads) {
  int64_t rounds = chunks(n, threads);
  return 8 * n >= 7 * (int64_t)threads * rounds;
}

/* The row chunks of K (and of V) in chunks of `rows`: of the new tokens
 * with a kv cache, else of each batch item's keys. */
static int64_t kv_chunks(const attn_plan_t *pl, int64_t rows) {
  return pl->params->kv ? chunks(pl->B * pl->Lq, rows)
                        : pl->B * chunks(pl->Lk, rows);
}

/* Rows per projection task for this shape, before the threads are counted
 * (internal.h). */
static int64_t proj_rows(const attn_plan_t *pl) {
  int64_t rows = ATTN__PROJ_ROWS_MAX;
  while (rows > ATTN__PROJ_ROWS_MIN &&
         chunks(pl->B * pl->Lq, rows) + 2 * kv_chunks(pl, rows) <
             ATTN__PROJ_TASKS)
    rows /= 2;
  return rows;
}

/* ---- per head of Q and K: RMSNorm, then rope (attn.h) ----------------------
 */

void attn__rope_frequencies(const attn_rope_t *rp, int64_t dims, double *freq) {
  for (int64_t i = 0; i < dims / 2; i++) {
    double fi = pow(rp->theta, -2.0 * (double)i / (double)dims);
    if (rp->scaling == ATTN_ROPE_SCALING_LINEAR) {
      fi /= rp->factor;
    } else if (rp->scaling == ATTN_ROPE_SCALING_LLAMA3) {
      double wavelength = 2.0 * M_PI / fi;
      double lo = rp->original_max_position / rp->low_freq_factor;
      double hi = rp->original_max_position / rp->high_freq_factor;
      if (wavelength > lo) {
        fi /= rp->factor;
      } else if (wavelength >= hi) {
        double s =
            (rp->original_max_position / wavelength - rp->low_freq_factor) /
            (rp->high_freq_factor - rp->low_freq_factor);
        fi = (1.0 - s) * fi / rp->factor + s * fi;
      }
    }
    freq[i] = fi;
  }
}

/* Position of row i of batch b: from pos ([L] or [B, L]), or `dflt`. */
static int64_t position(const attn_tensor_t *pos, int64_t b, int64_t i,
                        int64_t L, int64_t dflt) {
  const int64_t *x = pos->data;
  return pos->rank == 0 ? dflt : pos->rank == 1 ? x[i] : x[b * L + i];
}

/* cs[2k], cs[2k + 1] = cos, sin of pos·f_i for the rope's pairs
 * i = i0 + k in [i0, i1). */
static void rope_angles(const fwd_t *f, int64_t pos, int64_t i0, int64_t i1,
                        double *cs) {
  for (int64_t i = i0; i < i1; i++)
    sincos((double)pos * f->rope_freq[i], &cs[2 * (i - i0) + 1],
           &cs[2 * (i - i0)]);
}

/* nh heads of Dh features, in place: head h's are x[h·hs], x[h·hs + st],
 * .... Each head RMS-normed with w (when given), then, with the rope,
 * rotated at position pos: the angles of ATTN__ROPE_CHUNK pairs at a time
 * in cs (the thread's stage-1 scratch), so that a head of any width needs
 * no more; each element sees the same operations as a head at a time. */
static void transform_heads(const fwd_t *f, float *x, int64_t st, int64_t hs,
                            int64_t nh, const float *w, int64_t pos,
                            double *cs) {
  int64_t Dh = f->pl->Dh;
  for (int64_t h = 0; w && h < nh; h++) {
    float *y = x + h * hs;
    double ss = 0;
    for (int64_t d = 0; d < Dh; d++)
      ss += (double)y[d * st] * y[d * st];
    double inv = 1.0 / sqrt(ss / (double)Dh + f->norm_eps);
    for (int64_t d = 0; d < Dh; d++)
      y[d * st] = (float)(y[d * st] * inv * w[d]);
  }
  if (!f->rope_freq)
    return;
  int64_t half = f->pl->rope_dims / 2;
  int split = f->p->rope.style == ATTN_ROPE_HALF;
  for (int64_t i0 = 0; i0 < half; i0 += ATTN__ROPE_CHUNK) {
    int64_t i1 = half - i0 < ATTN__ROPE_CHUNK ? half : i0 + ATTN__ROPE_CHUNK;
    rope_angles(f, pos, i0, i1, cs);
    for (int64_t h = 0; h < nh; h++) {
      float *y = x + h * hs;
      for (int64_t i = i0; i < i1; i++) {
        int64_t a = (split ? i : 2 * i) * st,
                c = (split ? i + half : 2 * i + 1) * st;
        double x1 = y[a], x2 = y[c], co = cs[2 * (i - i0)],
               si = cs[2 * (i - i0) + 1];
        y[a] = (float)(x1 * co - x2 * si);
        y[c] = (float)(x2 * co + x1 * si);
      }
    }
  }
}

/* Q for rows [r0, r1) of the flattened [B·Lq] and heads [h0, h1):
 * q[r, h·Dh ..] = scale·(x·Wq_hᵀ + bq_h), every row of the chunk (all
 * batch items: a batch of one-token steps reads the weights once) in one
 * product; then each head normed and rotated at its row's position.
 * f->qscale is the scale, or 1 when Q is laid out again unscaled; with
 * q_norm the scale comes after the norm, which it does not commute
 * with. */
static void layout_q(fwd_t *f, int64_t r0, int64_t r1, int64_t h0, int64_t h1,
                     float *scratch) {
  const attn_plan_t *pl = f->pl;
  const attn_params_t *p = f->p;
  int64_t n = pl->H * pl->Dh, Eq = pl->Eq, m = r1 - r0;
  int64_t c0 = h0 * pl->Dh, nc = (h1 - h0) * pl->Dh; /* the group's columns */
  const float *x = f->query + r0 * Eq;
  float *dst = f->q + r0 * n + c0;
  const float *bias =
      p->q_bias.rank ? (const float *)p->q_bias.data + c0 : NULL;
  const float *norm = p->q_norm.rank ? p->q_norm.data : NULL;
  float s = norm ? 1.0f : f->qscale;
  if (p->q_weight.rank) {
    gemm_cut(f, m, nc, Eq, s, x, Eq, (const float *)p->q_weight.data + c0 * Eq,
             Eq, dst, n, tail_start(pl->B * pl->Lq, ATTN__PROJ_ROWS_MIN) - r0,
             tail_start(pl->H, group_heads(pl->Dh)) * pl->Dh - c0);
    if (bias)
      for (int64_t r = 0; r < m; r++)
        for (int64_t k = 0; k < nc; k++)
          dst[r * n + k] += s * bias[k];
  } else {
    for (int64_t r = 0; r < m; r++)
      for (int64_t k = 0; k < nc; k++)
        dst[r * n + k] = s * (x[r * Eq + c0 + k] + (bias ? bias[k] : 0));
  }
  if (norm || f->rope_freq) {
    for (int64_t r = 0; r < m; r++) {
      int64_t b = (r0 + r) / pl->Lq, i = (r0 + r) % pl->Lq;
      int64_t pos = f->rope_freq ? position(&p->positions_query, b, i, pl->Lq,
                                            attn__item_off(&f->ctx, b) + i)
                                 : 0;
      transform_heads(f, dst + r * n, 1, pl->Dh, h1 - h0, norm, pos,
                      (double *)scratch);
      if (norm)
        for (int64_t k = 0; k < nc; k++)
          dst[r * n + k] *= f->qscale;
    }
  }
  note(f, BITS_Q, dst, m, nc, n, ATTN__FAIL_Q, r0, 0);
}

/* Where key row j of batch b's key input goes: the column of its Hkv·Dh
 * rows of K transposed, their stride *ld, and how many rows from j on lie
 * in the same block of columns (*run): the workspace's kt, or with a kv
 * cache, the slot of token past[b] + j in its page. */
static float *k_slot(const fwd_t *f, int64_t b, int64_t j, int64_t *ld,
                     int64_t *run) {
  const attn__ctx_t *c = &f->ctx;
  const attn_plan_t *pl = f->pl;
  if (!c->pages) {
    *ld = c->ldk;
    *run = INT64_MAX;
    return f->kt + b * pl->Hkv * pl->Dh * c->ldk + j;
  }
  int64_t t = c->past[b] + j;
  *ld = ATTN_KV_LDK;
  *run = ATTN_KV_PAGE - t % ATTN_KV_PAGE;
  return c->pages[b][t / ATTN_KV_PAGE] + t % ATTN_KV_PAGE;
}

/* Where value row j of batch b goes (ldv apart), and the rows from j on
 * that follow it there (*run), as k_slot. */
static float *v_slot(const fwd_t *f, int64_t b, int64_t j, int64_t *run) {
  const attn__ctx_t *c = &f->ctx;
  if (!c->pages) {
    *run = INT64_MAX;
    return f->v + (b * f->pl->Lk + j) * c->ldv;
  }
  int64_t t = c->past[b] + j;
  *run = ATTN_KV_PAGE - t % ATTN_KV_PAGE;
  return c->pages[b][t / ATTN_KV_PAGE] + c->v_off + t % ATTN_KV_PAGE * c->ldv;
}

/* After batch b's last key: the keys up to ldk in the workspace (V has
 * no rows past Lk there), or with a kv cache the keys and values up to the
 * end of the last page, are zero, so that the kernels read finite numbers
 * (internal.h). */
static void zero_tail(fwd_t *f, int64_t b, int is_k) {
  const attn__ctx_t *c = &f->ctx;
  const attn_plan_t *pl = f->pl;
  if (!c->pages) {
    if (is_k && c->ldk > pl->Lk) {
      float *k = f->kt + b * pl->Hkv * pl->Dh * c->ldk + pl->Lk;
      for (int64_t r = 0; r < pl->Hkv * pl->Dh; r++)
        memset(k + r * c->ldk, 0, (size_t)(c->ldk - pl->Lk) * sizeof(float));
    }
    return;
  }
  int64_t past = c->past[b], end = past + f->lnk;
  if (end % ATTN__BC == 0)
    return;
  /* a page that held tokens before this call keeps the finite numbers an
   * earlier call left past them (attn_kv_t): only a page this call began
   * is zeroed, once, rather than most of a page at every decoding step */
  if ((end - 1) / ATTN__BC * ATTN__BC < past)
    return;
  int64_t n = ATTN__BC - end % ATTN__BC, run, ld;
  if (is_k) {
    float *k = k_slot(f, b, f->lnk, &ld, &run);
    for (int64_t r = 0; r < pl->Hkv * pl->Dh; r++)
      memset(k + r * ld, 0, (size_t)n * sizeof(float));
  } else {
    float *v = v_slot(f, b, f->lnk, &run);
    memset(v, 0, (size_t)(n * c->ldv) * sizeof(float));
  }
}

/* K for batch b, key rows [j0, j1) and kv heads [g0, g1): kt[b, g·Dh ..,
 * j] = Wk_g·key[j] + bk_g, the group's heads in one product per block of
 * columns (k_slot), then each head normed and rotated; the last chunk of
 * the first group zeroes the rest of the last block (every head's). */
static void layout_k(fwd_t *f, int64_t b, int64_t j0, int64_t j1, int64_t g0,
                     int64_t g1, float *scratch) {
  const attn_plan_t *pl = f->pl;
  const attn_params_t *p = f->p;
  const attn__ctx_t *c = &f->ctx;
  int64_t r0 = g0 * pl->Dh, rows = (g1 - g0) * pl->Dh, Ek = pl->Ek;
  int64_t past = c->pages ? c->past[b] : 0;
  int64_t hg = group_heads(pl->Dh > pl->Dv ? pl->Dh : pl->Dv);
  const float *bias =
      p->k_bias.rank ? (const float *)p->k_bias.data + r0 : NULL;
  const float *norm = p->k_norm.rank ? p->k_norm.data : NULL;
  for (int64_t j = j0, n, ldk, run; j < j1; j += n) {
    float *dst = k_slot(f, b, j, &ldk, &run);
    n = j1 - j < run ? j1 - j : run;
    dst += r0 * ldk;
    const float *x = f->key + (b * f->lnk + j) * Ek;
    if (p->k_weight.rank) {
      gemm_cut(f, rows, n, Ek, 1.0f, (const float *)p->k_weight.data + r0 * Ek,
               Ek, x, Ek, dst, ldk, (tail_start(pl->Hkv, hg) - g0) * pl->Dh,
               tail_start(f->lnk, ATTN__PROJ_ROWS_MIN) - j);
      if (bias)
        for (int64_t r = 0; r < rows; r++)
          for (int64_t k = 0; k < n; k++)
            dst[r * ldk + k] += bias[r];
    } else {
      for (int64_t k = 0; k < n; k++)
        for (int64_t r = 0; r < rows; r++)
          dst[r * ldk + k] = x[k * Ek + r0 + r] + (bias ? bias[r] : 0);
    }
    if (norm || f->rope_freq)
      for (int64_t k = 0; k < n; k++)
        transform_heads(f, dst + k, ldk, pl->Dh * ldk, g1 - g0, norm,
                        f->rope_freq ? position(&p->positions_key, b, j + k,
                                                f->lnk, past + j + k)
                                     : 0,
                        (double *)scratch);
    note(f, BITS_K, dst, rows, n, ldk, ATTN__FAIL_K, b * pl->Lk + past + j, 1);
  }
  if (j1 == f->lnk && g0 == 0)
    zero_tail(f, b, 1);
}

/* V for batch b, rows [j0, j1) and kv heads [g0, g1): v[b, j, g·vh + d] =
 * value[j]·Wv_gᵀ + bv, the group's heads in one product (per block of
 * rows, v_slot) when no head needs padding; padding columns zeroed, by the
 * last group the row's own too where a head's read passes the last head
 * (vh < Dvp) and, with a kv cache, in the last chunk the rest of the last
 * page. */
static void layout_v(fwd_t *f, int64_t b, int64_t j0, int64_t j1, int64_t g0,
                     int64_t g1) {
  const attn_plan_t *pl = f->pl;
  const attn_params_t *p = f->p;
  const attn__ctx_t *c = &f->ctx;
  int64_t Dv = pl->Dv, vh = c->vh, Ev = pl->Ev, ldv = c->ldv, Hkv = pl->Hkv;
  int64_t past = c->pages ? c->past[b] : 0;
  int64_t hg = group_heads(Dv > pl->Dh ? Dv : pl->Dh);
  const float *bias = p->v_bias.rank ? p->v_bias.data : NULL;
  for (int64_t j = j0, m, run; j < j1; j += m) {
    float *dst = v_slot(f, b, j, &run);
    m = j1 - j < run ? j1 - j : run;
    const float *x = f->value + (b * f->lnk + j) * Ev;
    if (p->v_weight.rank) {
      const float *w = p->v_weight.data;
      for (int64_t g = g0; g < g1; g += Dv == vh ? g1 - g0 : 1)
        gemm_cut(f, m, Dv == vh ? (g1 - g0) * Dv : Dv, Ev, 1.0f, x, Ev,
                 w + g * Dv * Ev, Ev, dst + g * vh, ldv,
                 tail_start(f->lnk, ATTN__PROJ_ROWS_MIN) - j,
                 (tail_start(Hkv, hg) - g) * Dv);
      if (bias)
        for (int64_t r = 0; r < m; r++)
          for (int64_t g = g0; g < g1; g++)
            for (int64_t d = 0; d < Dv; d++)
              dst[r * ldv + g * vh + d] += bias[g * Dv + d];
    } else {
      for (int64_t r = 0; r < m; r++)
        for (int64_t g = g0; g < g1; g++)
          for (int64_t d = 0; d < Dv; d++)
            dst[r * ldv + g * vh + d] =
                x[r * Ev + g * Dv + d] + (bias ? bias[g * Dv + d] : 0);
    }
    if (Dv < vh)
      for (int64_t r = 0; r < m; r++)
        for (int64_t g = g0; g < g1; g++)
          memset(dst + r * ldv + g * vh + Dv, 0,
                 (size_t)(vh - Dv) * sizeof(float));
    if (vh < c->Dvp && !c->pages && g1 == Hkv)
      for (int64_t r = 0; r < m; r++)
        memset(dst + r * ldv + Hkv * vh, 0,
               (size_t)(ldv - Hkv * vh) * sizeof(float));
    note(f, BITS_V, dst + g0 * vh, m, (g1 - g0) * vh, ldv, ATTN__FAIL_V,
         b * pl->Lk + past + j, 0);
  }
  if (j1 == f->lnk && g0 == 0)
    zero_tail(f, b, 0);
}

/* With a kv cache, K or V (is_k) for rows [r0, r1) of the flattened
 * [B·Lq] new tokens: every row in one product into the workspace (f->knew
 * or f->vnew, [B·Lq, Hkv·D]), so that a batch of steps reads the weights
 * once; then each row's heads normed and rotated (K) and written into its
 * page slot, K transposed; the last row of an item zeroes the rest of its
 * page. */
static void layout_kv_rows(fwd_t *f, int64_t r0, int64_t r1, int is_k,
                           float *scratch) {
  const attn_plan_t *pl = f->pl;
  const attn_params_t *p = f->p;
  const attn__ctx_t *c = &f->ctx;
  int64_t D = is_k ? pl->Dh : pl->Dv, n = pl->Hkv * D, m = r1 - r0;
  int64_t E = is_k ? pl->Ek : pl->Ev;
  const float *x = (is_k ? f->key : f->value) + r0 * E;
  const attn_tensor_t *w = is_k ? &p->k_weight : &p->v_weight;
  const attn_tensor_t *bt = is_k ? &p->k_bias : &p->v_bias;
  const float *bias = bt->rank ? bt->data : NULL;
  const float *norm = is_k && p->k_norm.rank ? p->k_norm.data : NULL;
  float *tmp = (is_k ? f->knew : f->vnew) + r0 * n;
  if (w->rank) {
    gemm_cut(f, m, n, E, 1.0f, x, E, w->data, E, tmp, n,
             tail_start(pl->B * pl->Lq, ATTN__PROJ_ROWS_MIN) - r0, n);
    if (bias)
      for (int64_t r = 0; r < m; r++)
        for (int64_t k = 0; k < n; k++)
          tmp[r * n + k] += bias[k];
  } else {
    for (int64_t r = 0; r < m; r++)
      for (int64_t k = 0; k < n; k++)
        tmp[r * n + k] = x[r * E + k] + (bias ? bias[k] : 0);
  }
  for (int64_t r = 0; r < m; r++) {
    int64_t b = (r0 + r) / pl->Lq, j = (r0 + r) % pl->Lq, ld, run;
    float *row = tmp + r * n;
    if (is_k && (norm || f->rope_freq))
      transform_heads(f, row, 1, D, pl->Hkv, norm,
                      f->rope_freq ? position(&p->positions_key, b, j, pl->Lq,
                                              c->past[b] + j)
                                   : 0,
                      (double *)scratch);
    note(f, is_k ? BITS_K : BITS_V, row, 1, n, n,
         is_k ? ATTN__FAIL_K : ATTN__FAIL_V, b * pl->Lk + c->past[b] + j, 0);
    if (is_k) {
      float *dst = k_slot(f, b, j, &ld, &run);
      for (int64_t k = 0; k < n; k++)
        dst[k * ld] = row[k];
    } else {
      float *dst = v_slot(f, b, j, &run);
      for (int64_t g = 0; g < pl->Hkv; g++) {
        memcpy(dst + g * c->Dvp, row + g * D, (size_t)D * sizeof(float));
        memset(dst + g * c->Dvp + D, 0, (size_t)(c->Dvp - D) * sizeof(float));
      }
    }
    if (j == pl->Lq - 1)
      zero_tail(f, b, is_k);
  }
}

/* Layout task t of n_layout: the Q chunks, then K, then V, then
 * the magnitude of the bias, chunk by chunk; on thread `id`. */
static void layout_task(fwd_t *f, int64_t t, int id) {
  const attn_plan_t *pl = f->pl;
  float *scratch = f->stage1 + id * f->stage1_stride;
  int64_t R = f->rows, ck = chunks(f->lnk, R);
  if (t < f->n_q) { /* rows of the flattened [B·Lq], a group of heads */
    int64_t r0 = t / f->gq * R, r1 = r0 + R, h0 = t % f->gq * f->hq,
            h1 = h0 + f->hq;
    layout_q(f, r0, r1 < pl->B * pl->Lq ? r1 : pl->B * pl->Lq, h0,
             h1 < pl->H ? h1 : pl->H, scratch);
    return;
  }
  t -= f->n_q;
  if (t >= 2 * f->n_k) { /* a bias of -inf is a mask, not a magnitude */
    int64_t n = 1, x0 = (t - 2 * f->n_k) * BIAS_CHUNK;
    for (int d = 0; d < f->p->bias.rank; d++)
      n *= f->p->bias.dim[d];
    n = n - x0 < BIAS_CHUNK ? n - x0 : BIAS_CHUNK;
    raise_bits(f, BITS_BIAS,
               f->absmax((const float *)f->p->bias.data + x0, 1, n, n, 1));
    return;
  }
  int is_k = t < f->n_k;
  if (!is_k)
    t -= f->n_k;
  if (f->ctx.pages) { /* the new tokens, flattened, as Q */
    int64_t r0 = t * R, r1 = r0 + R;
    layout_kv_rows(f, r0, r1 < pl->B * pl->Lq ? r1 : pl->B * pl->Lq, is_k,
                   scratch);
    return;
  }
  int64_t g0 = t % f->gkv * f->hkv, g1 = g0 + f->hkv;
  t /= f->gkv;
  int64_t j0 = t % ck * R, j1 = j0 + R;
  if (g1 > pl->Hkv)
    g1 = pl->Hkv;
  if (is_k)
    layout_k(f, t / ck, j0, j1 < f->lnk ? j1 : f->lnk, g0, g1, scratch);
  else
    layout_v(f, t / ck, j0, j1 < f->lnk ? j1 : f->lnk, g0, g1);
}

/* Attention unit u of n_units: item and head outside, query blocks inside,
 * so that the units a thread (or the threads) take one after another read
 * the same head's keys and values, from the caches; with the heads inside,
 * each unit read another head's (at L 4096, E 4096, 4 MB a head and 128
 * MB in all, from memory), and one thread spent 1.45 times as long in
 * attention there, 1.35 at L 16384, E 512 (2026-12-08). Within a head the
 * last query blocks come first: under a causal mask they hold the most
 * work, and dynamic scheduling then ends with the short ones. */
static void attend_task(fwd_t *f, int64_t u, int id) {
  float *scratch = f->att + id * f->att_stride;
  const attn__ctx_t *c = &f->ctx;
  int64_t nq = c->n_qblocks;
  int64_t qb = nq - 1 - u % nq, rest = u / nq;
  int64_t hu = f->pl->H / c->heads_per_unit;
  f->attend(c, rest / hu, (rest % hu) * c->heads_per_unit, qb, scratch);
}

/* Pooled row t of the flattened [B, H', nq]: the sum (or max) of the
 * partials of the units its query rows lie in, in the units' order, so
 * that the result does not depend on the threads; a mean then divides by
 * the cells the block has. */
static void pool_task(fwd_t *f, int64_t t, int id) {
  (void)id;
  const attn_plan_t *pl = f->pl;
  const attn__ctx_t *c = &f->ctx;
  const attn_reduce_t *r = c->red;
  const int64_t nk = pl->pool_nk, pq = pl->pool_q, pk = pl->pool_k;
  const int64_t qp = t % pl->pool_nq, bh = t / pl->pool_nq;
  const int64_t a = pl->q0 + qp * pq;
  const int64_t e = a + pq < pl->q1 ? a + pq : pl->q1;
  const int64_t qb0 = a / ATTN__BR, qb1 = (e - 1) / ATTN__BR;
  float *y = f->out_pooled + t * nk;
  for (int64_t k = 0; k < nk; k++) {
    double v = 0;
    for (int64_t qb = qb0; qb <= qb1; qb++) {
      double x =
          c->pool_part[(bh * c->pool_slots + attn__pool_slot(qb, qp, pl->q0)) *
                           nk +
                       k];
      v = r->pool_reduce == ATTN_POOL_MAX ? (x > v ? x : v) : v + x;
    }
    if (r->pool_reduce == ATTN_POOL_MEAN) {
      int64_t k1 = pl->k0 + (k + 1) * pk;
      k1 = k1 < pl->k1 ? k1 : pl->k1;
      v /= (double)(e - a) * (double)(k1 - pl->k0 - k * pk);
    }
    y[k] = (float)v;
  }
}

/* Output task t: rows [r0, r1) of the flattened [B·Lq] output, columns
 * [e0, e1) (a group of ocols). */
static void output_task(fwd_t *f, int64_t t, int id) {
  (void)id;
  const attn_plan_t *pl = f->pl;
  const attn_params_t *p = f->p;
  int64_t r0 = t / f->gout * f->orows, r1 = r0 + f->orows;
  if (r1 > pl->B * pl->Lq)
    r1 = pl->B * pl->Lq;
  int64_t K = pl->H * pl->Dv, Eo = pl->Eo;
  int64_t e0 = t % f->gout * f->ocols,
          ne = Eo - e0 < f->ocols ? Eo - e0 : f->ocols;
  float *y = f->out + r0 * Eo + e0;
  if (p->o_weight.rank)
    gemm_cut(f, r1 - r0, ne, K, 1.0f, f->ctx.concat + r0 * K, K,
             (const float *)p->o_weight.data + e0 * K, K, y, Eo,
             tail_start(pl->B * pl->Lq, ATTN__PROJ_ROWS_MIN) - r0,
             tail_start(Eo, ATTN__PROJ_COLS) - e0);
  if (p->o_bias.rank) {
    const float *bias = (const float *)p->o_bias.data + e0;
    for (int64_t r = 0; r < r1 - r0; r++)
      for (int64_t e = 0; e < ne; e++)
        y[r * Eo + e] += bias[e];
  }
  note(f, -1, y, r1 - r0, ne, Eo, ATTN__FAIL_OUT_PROJ, r0, 0);
}

/* The value of magnitude bits (attn__absmax_fn): inf for inf or NaN. */
static double bits_value(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return u >= ATTN__INF_BITS ? INFINITY : (double)x;
}

/* Whether the fast paths' float32 scores are safe: |q·k| <= Dh·max|q|·
 * max|k|, which bounds every partial sum too (up to rounding); a softcap
 * bounds the capped score by c, and needs 1/c finite; the bias and ALiBi
 * add at most max|bias| and max|slope|·max(Lq, Lk). Below FLT_MAX/16,
 * every score and every difference of two stays finite. */
static int scores_fit(const fwd_t *f) {
  const attn_plan_t *pl = f->pl;
  const attn__ctx_t *c = &f->ctx;
  const double lim = FLT_MAX / 16;
  uint32_t kb = f->bits[BITS_K] > f->k_cached ? f->bits[BITS_K] : f->k_cached;
  double qk = (double)pl->Dh * bits_value(f->bits[BITS_Q]) * bits_value(kb),
         s = qk;
  if (c->has_softcap) {
    if (!(1.0f / c->softcap <= FLT_MAX))
      return 0;
    s = fmin(s, c->softcap);
  }
  if (c->bias)
    s += bits_value(f->bits[BITS_BIAS]);
  if (c->slopes) {
    double smax = 0;
    for (int64_t h = 0; h < pl->H; h++)
      smax = fmax(smax, fabs((double)c->slopes[h]));
    s += smax * (double)(pl->Lq > pl->Lk ? pl->Lq : pl->Lk);
  }
  return qk <= lim && s <= lim;
}

static int failed(const fwd_t *f) {
  for (int k = 0; k < ATTN__FAIL_N; k++)
    if (f->fail[k] != INT64_MAX)
      return 1;
  return 0;
}

/* Between stages 1 and 2, once: a Q that overflowed where the scale
 * magnifies it is laid out again unscaled (n_redo tasks), the scale then
 * applied by the exact path in float64. */
static void retry_unscaled(fwd_t *f) {
  if (f->fail[ATTN__FAIL_Q] == INT64_MAX ||
      f->fail[ATTN__FAIL_K] != INT64_MAX ||
      f->fail[ATTN__FAIL_V] != INT64_MAX || !(fabsf(f->pl->scale) > 1.0f))
    return;
  f->fail[ATTN__FAIL_Q] = INT64_MAX;
  f->bits[BITS_Q] = 0;
  f->qscale = 1.0f;
  f->ctx.qmul = f->pl->scale;
  f->n_redo = f->n_q;
}

/* After stage 1, once: stop on a failed projection, else choose the path. */
static void decide(fwd_t *f) {
  f->stop = failed(f);
  f->ctx.exact = f->n_redo > 0 || !scores_fit(f);
  f->t[1] = now_ms();
}

/* After the attention, once. */
static void attended(fwd_t *f) {
  f->stop = failed(f);
  f->t[2] = now_ms();
}

/* The ATTN_ENUMERIC error of the first stage that failed (internal.h). */
static int numeric_error(const fwd_t *f, attn_error_t *err) {
  const attn_plan_t *pl = f->pl;
  const attn_params_t *p = f->p;
  const int64_t Lq = pl->Lq, Lk = pl->Lk, H = pl->H;
  const attn_field_t kf = p->key.rank ? ATTN_FIELD_KEY : ATTN_FIELD_QUERY;
  const attn_field_t vf = p->value.rank ? ATTN_FIELD_VALUE : kf;
  /* RMSNorm of a head of zeros is 0/0 without an epsilon */
  const char *zero_norm = f->norm_eps == 0 ? " (or a head of it is all "
                                             "zeros, which norm_eps 0 cannot "
                                             "normalize)"
                                           : "";
  int stage = 0;
  while (f->fail[stage] == INT64_MAX)
    stage++;
  const long long x = f->fail[stage];
  switch (stage) {
  case ATTN__FAIL_Q:
    return attn__err(err, ATTN_ENUMERIC, ATTN_FIELD_QUERY,
                     "projection: Q = query%s%s%s does not fit float32 at "
                     "batch %lld, query row %lld%s",
                     p->q_weight.rank ? " * q_weight^T" : "",
                     p->q_bias.rank ? " + q_bias" : "",
                     p->q_norm.rank ? ", then q_norm," : "", x / Lq, x % Lq,
                     p->q_norm.rank ? zero_norm : "");
  case ATTN__FAIL_K:
  case ATTN__FAIL_V: {
    int k = stage == ATTN__FAIL_K;
    attn_field_t in = k ? kf : vf;
    int w = k ? p->k_weight.rank : p->v_weight.rank;
    int bb = k ? p->k_bias.rank : p->v_bias.rank;
    int nm = k && p->k_norm.rank;
    return attn__err(err, ATTN_ENUMERIC, in,
                     "projection: %s = %s%s%s%s does not fit float32 at batch "
                     "%lld, key row %lld%s",
                     k ? "K" : "V", attn_field_name(in),
                     w ? (k ? " * k_weight^T" : " * v_weight^T") : "",
                     bb ? (k ? " + k_bias" : " + v_bias") : "",
                     nm ? ", then k_norm," : "", x / Lk, x % Lk,
                     nm ? zero_norm : "");
  }
  case ATTN__FAIL_SCORES:
  case ATTN__FAIL_OUTPUT:
    return attn__err(
        err, ATTN_ENUMERIC, stage == ATTN__FAIL_SCORES ? ATTN_FIELD_BIAS : vf,
        stage == ATTN__FAIL_SCORES
            ? "scores: a score is +inf or NaN at batch %lld, head %lld, "
              "query row %lld: bias holds +inf or NaN"
            : "output: weights * V does not fit float32 at batch %lld, head "
              "%lld, query row %lld",
        x / Lq / H, x / Lq % H, x % Lq);
  default:
    return attn__err(err, ATTN_ENUMERIC,
                     p->o_weight.rank ? ATTN_FIELD_O_WEIGHT : ATTN_FIELD_O_BIAS,
                     "output projection: out = %s%s does not fit float32 at "
                     "batch %lld, query row %lld",
                     p->o_weight.rank ? "concat * o_weight^T" : "concat",
                     p->o_bias.rank ? " + o_bias" : "", x / Lq, x % Lq);
  }
}

static int canceled(const attn_plan_t *pl) {
  return pl->cancel && __atomic_load_n(pl->cancel, __ATOMIC_RELAXED);
}

/* A part of n floats at *at (floats from the workspace's start, part()),
 * at `base`, or NULL when only sizes are wanted. */
static float *carve(char *base, int64_t *at, int64_t n) {
  int64_t o = part(at, n);
  return base ? (float *)(base + o * (int64_t)sizeof(float)) : NULL;
}

/* The workspace's parts, at `base` (NULL: sizes only, the pointers NULL):
 * q, with a kv cache the new rows of K and V, else kt and v (each with its
 * tail, internal.h), concat when an output projection follows, the ALiBi
 * slopes, the rope's frequencies, each thread's stage-1 scratch and the
 * attention threads' scratch. Returns its size in bytes; the planner and
 * attn_forward both read it from here. */
typedef struct parts {
  float *q, *knew, *vnew, *kt, *v, *concat, *slopes, *freq, *stage1, *att;
  float *pool; /* the units' pooled partials (attn__ctx_t), doubles */
} parts_t;

static size_t lay_out(const attn_plan_t *pl, const attn__scratch_t *sc,
                      char *base, parts_t *w) {
  const attn_params_t *p = pl->params;
  const int64_t B = pl->B, Lq = pl->Lq, H = pl->H, Hkv = pl->Hkv;
  int64_t at = 0;
  *w = (parts_t){0};
  w->q = carve(base, &at, B * Lq * H * pl->Dh);
  if (p->kv) { /* K and V are laid out in the cache's pages */
    w->knew = carve(base, &at, B * Lq * Hkv * pl->Dh);
    w->vnew = carve(base, &at, B * Lq * Hkv * pl->Dv);
  } else {
    w->kt = carve(base, &at, B * Hkv * pl->Dh * attn__ldk(pl->Lk) + ATTN__TAIL);
    w->v = carve(base, &at,
                 B * pl->Lk * attn__ldv_ws(Hkv, attn__vh(pl->Dv)) + ATTN__TAIL);
  }
  if (p->o_weight.rank)
    w->concat = carve(base, &at, B * Lq * H * pl->Dv);
  w->slopes = carve(base, &at, H);
  w->freq = carve(base, &at, pl->rope_dims); /* rope_dims / 2 doubles */
  w->stage1 = carve(base, &at, 0);
  for (int t = 0; t < pl->threads; t++)
    carve(base, &at, sc->stage1);
  w->att = carve(base, &at, 0);
  for (int64_t t = 0; t < sc->slots; t++)
    carve(base, &at, sc->floats);
  if (pl->pooled_elems) /* B·H'·pool_slots·nk doubles */
    w->pool =
        carve(base, &at,
              2 * pl->B * pl->rH *
                  attn__pool_slots(pl->pool_nq, pl->q0, pl->q1) * pl->pool_nk);
  return (size_t)at * sizeof(float);
}

size_t attn__workspace_bytes(const attn_plan_t *pl) {
  attn__scratch_t sc;
  parts_t w;
  attn__scratch_plan(pl, &sc);
  return lay_out(pl, &sc, NULL, &w);
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
  c->Lkp = attn__round_up(pl->Lk, ATTN__KPAD);
  c->Dvp = attn__round_up(pl->Dv, ATTN__VPAD);
  c->vh = p->kv ? c->Dvp : attn__vh(pl->Dv);
  c->off = pl->Lk - pl->Lq;
  c->ldk = p->kv ? ATTN_KV_LDK : attn__ldk(pl->Lk);
  c->ldv = p->kv ? attn__ldv(pl->Hkv, c->Dvp) : attn__ldv_ws(pl->Hkv, c->vh);
  f->lnk = p->kv ? pl->Lq : pl->Lk;
  attn__scratch_plan(pl, &c->sc);
  parts_t w;
  lay_out(pl, &c->sc, workspace, &w);
  f->q = w.q;
  f->knew = w.knew;
  f->vnew = w.vnew;
  f->kt = w.kt;
  f->v = w.v;
  if (p->kv) {
    c->pages = p->kv->pages;
    c->past = p->kv->past;
    c->v_off = (int64_t)attn_kv_v_offset(pl->Hkv, pl->Dh);
    for (int64_t b = 0; b < pl->B; b++) {
      uint32_t u;
      memcpy(&u, &p->kv->k_absmax[b], sizeof u);
      f->k_cached = u > f->k_cached ? u : f->k_cached;
    }
  } else { /* the tails that the last rows' reads pass */
    memset(f->kt + pl->B * pl->Hkv * pl->Dh * c->ldk, 0,
           ATTN__TAIL * sizeof(float));
    memset(f->v + pl->B * pl->Lk * c->ldv, 0, ATTN__TAIL * sizeof(float));
  }
  c->concat = p->o_weight.rank ? w.concat : o->out;
  float *slopes = w.slopes;
  double *freq = (double *)w.freq;
  f->stage1 = w.stage1;
  f->stage1_stride = attn__round_up(c->sc.stage1, ATTN__ALIGN / 4);
  f->att = w.att;
  f->att_stride = attn__round_up(c->sc.floats, ATTN__ALIGN / 4);

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
  if (pl->rope_dims) {
    attn__rope_frequencies(&p->rope, pl->rope_dims, freq);
    f->rope_freq = freq;
  }
  f->norm_eps = p->has_norm_eps ? p->norm_eps : 1e-6;
  c->key_lengths = p->key_lengths.rank ? p->key_lengths.data : NULL;
  if (p->allow.rank) {
    c->allow = p->allow.data;
    attn__broadcast_strides(&p->allow, c->allow_st);
  }
  if (p->bias.rank) {
    c->bias = p->bias.data;
    attn__broadcast_strides(&p->bias, c->bias_st);
  }
  c->has_softcap = p->has_softcap;
  c->softcap = p->softcap;
  c->wl = pl->window_left;
  c->wr = pl->window_right;
  c->qmul = 1.0;
  c->fail = f->fail;
  for (int k = 0; k < ATTN__FAIL_N; k++)
    f->fail[k] = INT64_MAX;
  f->qscale = pl->scale;
  c->n_qblocks = (pl->Lq + ATTN__BR - 1) / ATTN__BR;
  c->heads_per_unit = (int)heads_per_unit(pl);
  if (pl->reduce) {
    c->red = &p->reduce;
    c->top_k_index = o->top_k_index;
    c->top_k_value = o->top_k_value;
    c->entropy = p->reduce.stats & ATTN_STAT_ENTROPY ? o->entropy : NULL;
    c->sink = p->reduce.stats & ATTN_STAT_SINK ? o->sink : NULL;
    c->distance = p->reduce.stats & ATTN_STAT_DISTANCE ? o->distance : NULL;
    c->pool_part = (double *)w.pool;
    c->pool_slots =
        pl->pool_q ? attn__pool_slots(pl->pool_nq, pl->q0, pl->q1) : 0;
    f->n_pool = pl->B * pl->rH * pl->pool_nq;
    f->out_pooled = o->pooled;
  }

  f->rows = f->orows = proj_rows(pl);
  int64_t q_rows = chunks(pl->B * pl->Lq, f->rows),
          kv_rows = kv_chunks(pl, f->rows);
  /* Column groups (ATTN__PROJ_COLS), for a stage whose row chunks alone
   * give several threads under two tasks each: whole heads of Q, K and V
   * (not with a kv cache, whose rows go to pages a row at a time), columns
   * of the output. One group each otherwise, and always on one thread. */
  int64_t two_each = pl->threads > 1 ? 2 * (int64_t)pl->threads : 0;
  int split_qkv = !p->kv && q_rows + 2 * kv_rows < two_each,
      split_out = q_rows < two_each;
  int64_t dmax = pl->Dh > pl->Dv ? pl->Dh : pl->Dv;
  f->hq =
      split_qkv && pl->Dh < ATTN__PROJ_COLS ? ATTN__PROJ_COLS / pl->Dh : pl->H;
  f->hq = f->hq < pl->H ? f->hq : pl->H;
  f->gq = chunks(pl->H, f->hq);
  f->hkv =
      split_qkv && dmax < ATTN__PROJ_COLS ? ATTN__PROJ_COLS / dmax : pl->Hkv;
  f->hkv = f->hkv < pl->Hkv ? f->hkv : pl->Hkv;
  f->gkv = chunks(pl->Hkv, f->hkv);
  f->ocols = split_out && pl->Eo > ATTN__PROJ_COLS ? ATTN__PROJ_COLS : pl->Eo;
  f->gout = chunks(pl->Eo, f->ocols);
  /* Then shorter row chunks, down to ATTN__PROJ_ROWS_MIN, for a stage that
   * would still leave threads idle (internal.h): at L 4096 and E 512 on 16
   * threads, 12 layout tasks keep 3/4 of the threads busy and 4 output
   * tasks 1/4, where chunks of 256 rows give 48 and 16. */
  while (f->rows > ATTN__PROJ_ROWS_MIN &&
         !busy(chunks(pl->B * pl->Lq, f->rows) * f->gq +
                   2 * kv_chunks(pl, f->rows) * f->gkv,
               pl->threads))
    f->rows /= 2;
  while (f->orows > ATTN__PROJ_ROWS_MIN &&
         !busy(chunks(pl->B * pl->Lq, f->orows) * f->gout, pl->threads))
    f->orows /= 2;
  f->n_q = chunks(pl->B * pl->Lq, f->rows) * f->gq;
  f->n_k = kv_chunks(pl, f->rows) * f->gkv;
  f->n_units = pl->B * (pl->H / c->heads_per_unit) * c->n_qblocks;
  f->n_out = (p->o_weight.rank || p->o_bias.rank)
                 ? chunks(pl->B * pl->Lq, f->orows) * f->gout
                 : 0;
  if (p->bias.rank) {
    int64_t n = 1;
    for (int d = 0; d < p->bias.rank; d++)
      n *= p->bias.dim[d];
    f->n_bias = chunks(n, BIAS_CHUNK);
  }
  f->n_layout = f->n_q + 2 * f->n_k + f->n_bias;
#if defined(ATTN__X86_KERNELS)
  f->attend = pl->isa == ATTN_ISA_AVX512 ? attn__attend_avx512
              : pl->isa == ATTN_ISA_AVX2 ? attn__attend_avx2
                                         : attn__attend_generic;
  f->absmax = pl->isa == ATTN_ISA_AVX512 ? attn__absmax_avx512
              : pl->isa == ATTN_ISA_AVX2 ? attn__absmax_avx2
                                         : attn__absmax_generic;
  f->dots = pl->isa == ATTN_ISA_AVX512 ? attn__dots_avx512
            : pl->isa == ATTN_ISA_AVX2 ? attn__dots_avx2
                                       : attn__dots_generic;
#else /* attn__cpu_isa answers generic for any other target */
  f->attend = attn__attend_generic;
  f->absmax = attn__absmax_generic;
  f->dots = attn__dots_generic;
#endif
}

/* ---- the stages ------------------------------------------------------------
 *
 * A call runs four stages in order. A stage's tasks are independent (any
 * thread, any order, the same result); its `then` runs once, on one
 * thread, after all of them and before the next stage starts, and may set
 * the next stage's count. With one thread they run as plain loops: an
 * OpenMP team of one still pays a futex wake at every barrier, several a
 * call, which a tiny request would feel. The attention runs on the first
 * sc.slots threads only, those that have its scratch (no more than there
 * are units: one query row of one head needs one thread's scratch, not
 * every thread's). */
typedef struct {
  size_t n; /* offset of the task count in fwd_t */
  void (*task)(fwd_t *f, int64_t t, int id);
  void (*then)(fwd_t *f);
  int attention; /* on the threads with attention scratch only */
  int part;      /* attn_timing_t's: projection 0, attention 1, output 2 */
} stage_t;

static const stage_t stage_table[] = {
    {offsetof(fwd_t, n_layout), layout_task, retry_unscaled, 0, 0},
    {offsetof(fwd_t, n_redo), layout_task, decide, 0, 0},
    {offsetof(fwd_t, n_units), attend_task, NULL, 1, 1},
    {offsetof(fwd_t, n_pool), pool_task, attended, 0, 1},
    {offsetof(fwd_t, n_out), output_task, NULL, 0, 2},
};
#define STAGES ((int)(sizeof stage_table / sizeof *stage_table))
_Static_assert(STAGES <= sizeof((fwd_t *)0)->next / sizeof(int64_t),
               "a task counter per stage");

static int64_t count(const fwd_t *f, const stage_t *st) {
  return *(const int64_t *)((const char *)f + st->n);
}

static void run_task(fwd_t *f, const stage_t *st, int64_t t, int id) {
  if (!canceled(f->pl) && !f->stop)
    st->task(f, t, id);
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
  if (pl->reduce) {
    const struct {
      int want;
      const void *buf;
      attn_field_t field;
      int64_t n;
    } need[] = {
        {pl->top_k_elems > 0, o->top_k_index, ATTN_FIELD_TOP_K_INDEX,
         pl->top_k_elems},
        {pl->top_k_elems > 0, o->top_k_value, ATTN_FIELD_TOP_K_VALUE,
         pl->top_k_elems},
        {pl->pooled_elems > 0, o->pooled, ATTN_FIELD_POOLED, pl->pooled_elems},
        {(p->reduce.stats & ATTN_STAT_ENTROPY) != 0, o->entropy,
         ATTN_FIELD_ENTROPY, pl->stats_elems},
        {(p->reduce.stats & ATTN_STAT_SINK) != 0, o->sink, ATTN_FIELD_SINK,
         pl->stats_elems},
        {(p->reduce.stats & ATTN_STAT_DISTANCE) != 0, o->distance,
         ATTN_FIELD_DISTANCE, pl->stats_elems},
    };
    for (size_t k = 0; k < sizeof need / sizeof *need; k++)
      if (need[k].want && need[k].buf == NULL)
        return attn__err(err, ATTN_EINVAL, need[k].field,
                         "%s [%lld] buffer is required when asked for",
                         attn_field_name(need[k].field), (long long)need[k].n);
  }
  if (workspace == NULL || workspace_bytes < pl->workspace_bytes ||
      (uintptr_t)workspace % ATTN__ALIGN)
    return attn__err(err, ATTN_ENOSPC, ATTN_FIELD_WORKSPACE,
                     "workspace of %zu bytes at %p: need %zu bytes, %d-byte "
                     "aligned",
                     workspace_bytes, workspace, pl->workspace_bytes,
                     ATTN__ALIGN);
  if (pl->backend == ATTN_BACKEND_CUDA) /* only a CUDA build plans it */
    return attn__cuda_forward(pl, o, workspace, err);
  pthread_once(&blas_once, blas_single_thread);

  fwd_t f;
  setup(&f, pl, o, workspace);
  f.t[0] = now_ms();
#ifdef _OPENMP
  int team = pl->threads > 1;
  if (team) {
#pragma omp parallel num_threads(pl->threads)
    {
      int id = omp_get_thread_num();
      for (int k = 0; k < STAGES; k++) {
        const stage_t *st = &stage_table[k];
        int64_t n = count(&f, st); /* the last `then` set it */
        if (!st->attention || id < f.ctx.sc.slots) {
          double a = now_ms(); /* to this thread's last task's end */
          for (int64_t t;
               (t = __atomic_fetch_add(&f.next[k], 1, __ATOMIC_RELAXED)) < n;)
            run_task(&f, st, t, id);
          __atomic_fetch_add(&f.busy_ns[st->part],
                             (int64_t)((now_ms() - a) * 1e6), __ATOMIC_RELAXED);
        }
#pragma omp barrier
        if (stage_table[k].then) {
#pragma omp single
          stage_table[k].then(&f);
        }
      }
    }
  } else
#else
  int team = 0; /* the TSan build (SAN=thread): one thread runs them all */
#endif
  { /* the same stages without a team: no barrier, no futex */
    for (int k = 0; k < STAGES; k++) {
      for (int64_t t = 0; t < count(&f, &stage_table[k]); t++)
        run_task(&f, &stage_table[k], t, 0);
      if (stage_table[k].then)
        stage_table[k].then(&f);
    }
  }
  double t3 = now_ms();
  o->timing.projection_ms = f.t[1] - f.t[0];
  o->timing.attention_ms = f.t[2] - f.t[1];
  o->timing.output_ms = t3 - f.t[2];
  o->timing.total_ms = t3 - f.t[0];
  double *busy[3] = {&o->timing.projection_busy_ms,
                     &o->timing.attention_busy_ms, &o->timing.output_busy_ms};
  const double part[3] = {o->timing.projection_ms, o->timing.attention_ms,
                          o->timing.output_ms};
  for (int k = 0; k < 3; k++) /* one thread is busy throughout */
    *busy[k] = team ? (double)f.busy_ns[k] * 1e-6 : part[k];
  if (canceled(pl))
    return attn__err(err, ATTN_ECANCELED, ATTN_FIELD_CANCEL,
                     "canceled after %.3f ms", t3 - f.t[0]);
  if (failed(&f))
    return numeric_error(&f, err);
  if (p->kv) { /* the cache's keys now include this call's */
    float k = (float)bits_value(f.bits[BITS_K]);
    for (int64_t b = 0; b < pl->B; b++)
      if (k > p->kv->k_absmax[b])
        p->kv->k_absmax[b] = k;
  }
  return 0;
}
