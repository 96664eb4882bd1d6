/* bench/attn_bench.c: the attention core against the machine's own limit.
 *
 * Prints one table, to the terminal and as CSV: each row a shape, mask,
 * thread count and kernel path, with the median time over repeated runs,
 * the dense-equivalent GFLOP/s (projections and attention counted as if
 * nothing were masked: 8·B·L·E² + 4·B·L²·E for self-attention with E→E
 * projections), that rate as a ratio to the host's single-thread sgemm rate
 * (2048³, the ceiling), the projections' rate per thread as a ratio to it
 * too (proj_x), for rows of several threads their speedup over one
 * thread (x_1th, paired the same way), and the row's peak RSS. Each run of a
 * row is paired with a run of the ceiling just before it, and the ratios are
 * the medians of the pairs' ratios. Each row runs in a child process, so its
 * peak RSS is its own.
 *
 * With --torch, each row also times Debian's PyTorch nn.MultiheadAttention
 * (bench/torch_mha.py under /usr/bin/python3, one thread, OpenBLAS on the
 * same kernel) and prints the speedup.
 *
 * Every row also prints its stages' median times (attn_timing_t): the
 * projections (stage 1), the attention and the output projection, to see
 * which stage a thread count does not speed up.
 *
 * --shape L,E,H (repeatable) replaces the table with causal self-attention
 * rows of those shapes, B = 1, at each thread count of --threads (a comma
 * list, default 1,2), for profiling a shape across thread counts
 * (tools/device/cores.sh). --unpaired skips the one-thread run paired with
 * each run of a row of several threads (x_1th then is "-"): a sweep's own
 * one-thread row is the reference, at a fraction of the time.
 *
 * --only WORD runs the table's rows whose name starts with WORD ("L32768").
 * Then, in one process, the reductions of the weights against none, in
 * turns (compare_weights): at L = 8192, 5 rounds, unless
 * --compare-weights L ROUNDS says otherwise (L 0: not at all), with top_k
 * 8 unless --top-k K says otherwise.
 *
 * usage: attn-bench [--quick] [--torch] [--csv FILE] [--reps N]
 *                   [--shape L,E,H]... [--threads N,N...] [--unpaired]
 *                   [--only WORD] [--compare-weights L ROUNDS] [--top-k K] */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "attn/attn.h"
#include "bench.h"
#include "blas.h"

/* What a row asks for beside the output (row_t.weights). */
enum {
  W_NONE,
  W_DENSE,  /* per-head weights [B, H, Lq, Lk] */
  W_POOLED, /* pooled [256, 256] mean, per head */
  W_TOP_K,  /* top_k 8, per head */
  W_STATS,  /* entropy, sink and distance, per head */
};
static const char *const weights_names[] = {"none", "per_head", "pool256",
                                            "top_k8", "stats"};
static int64_t top_k = 8; /* W_TOP_K's k in compare_weights (--top-k) */

typedef struct row {
  const char *name;
  int64_t B, Lq, Lk, E, H, Hkv;
  int causal, weights, threads;
  attn_isa_t isa;
  int quick; /* part of --quick */
} row_t;

static const row_t rows[] = {
    {"L512", 1, 512, 512, 512, 8, 8, 1, 0, 1, 0, 1},
    {"L512", 1, 512, 512, 512, 8, 8, 1, 0, 2, 0, 0},
    {"L2048", 1, 2048, 2048, 512, 8, 8, 1, 0, 1, 0, 1},
    {"L2048", 1, 2048, 2048, 512, 8, 8, 1, 0, 2, 0, 1},
    {"L4096", 1, 4096, 4096, 512, 8, 8, 1, 0, 1, 0, 1},
    {"L4096", 1, 4096, 4096, 512, 8, 8, 1, 0, 2, 0, 1},
    {"L4096 weights", 1, 4096, 4096, 512, 8, 8, 1, 1, 1, 0, 1},
    {"L4096 weights", 1, 4096, 4096, 512, 8, 8, 1, 1, 2, 0, 0},
    {"L4096 full", 1, 4096, 4096, 512, 8, 8, 0, 0, 1, 0, 0},
    {"L4096 full weights", 1, 4096, 4096, 512, 8, 8, 0, 1, 1, 0, 0},
    {"L4096 GQA", 1, 4096, 4096, 512, 8, 2, 1, 0, 1, 0, 0},
    {"cross 1024x4096", 1, 1024, 4096, 512, 8, 8, 0, 0, 1, 0, 0},
    {"L16384", 1, 16384, 16384, 512, 8, 8, 1, 0, 1, 0, 0},
    {"L16384", 1, 16384, 16384, 512, 8, 8, 1, 0, 2, 0, 1},
    {"L4096 E4096", 1, 4096, 4096, 4096, 32, 32, 1, 0, 2, 0, 0},
    {"L2048 generic", 1, 2048, 2048, 512, 8, 8, 1, 0, 1, ATTN_ISA_GENERIC, 0},
    {"L2048 avx2", 1, 2048, 2048, 512, 8, 8, 1, 0, 1, ATTN_ISA_AVX2, 0},
    /* reductions of the weights (issue 34): each against "none" */
    {"L8192", 1, 8192, 8192, 512, 8, 8, 1, W_NONE, 1, 0, 1},
    {"L8192 pooled", 1, 8192, 8192, 512, 8, 8, 1, W_POOLED, 1, 0, 1},
    {"L8192 top_k", 1, 8192, 8192, 512, 8, 8, 1, W_TOP_K, 1, 0, 1},
    {"L8192 stats", 1, 8192, 8192, 512, 8, 8, 1, W_STATS, 1, 0, 1},
    {"L32768", 1, 32768, 32768, 512, 8, 8, 1, W_NONE, 1, 0, 0},
    {"L32768 pooled", 1, 32768, 32768, 512, 8, 8, 1, W_POOLED, 1, 0, 0},
    {"L32768 top_k", 1, 32768, 32768, 512, 8, 8, 1, W_TOP_K, 1, 0, 0},
    {"L32768 stats", 1, 32768, 32768, 512, 8, 8, 1, W_STATS, 1, 0, 0},
};
#define NROWS (sizeof rows / sizeof rows[0])

/* Rows of --shape and --threads, at most. */
#define MAX_SHAPES 8
#define MAX_THREADS 8

/* Whether to run again after n runs since `start`: until `reps` runs and
 * at least `min_ms` have passed, at most 4·reps runs and 64. */
static int more_runs(int n, int reps, double start, double min_ms) {
  return n < 64 &&
         (n < reps || (bench_now_ms() - start < min_ms && n < 4 * reps));
}

/* One thread's sgemm on [m, k]·[n, k]ᵀ, with its operands. */
typedef struct sgemm {
  int m, n, k;
  float *a, *b, *c;
} sgemm_t;

/* Makes the operands and runs once, to warm up. */
static void sgemm_init(sgemm_t *g, int m, int n, int k) {
  *g = (sgemm_t){m,
                 n,
                 k,
                 bench_random_floats((size_t)m * k, 1, 1),
                 bench_random_floats((size_t)n * k, 1, 2),
                 bench_random_floats((size_t)m * n, 1, 3)};
  openblas_set_num_threads(1);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1, g->a, k,
              g->b, k, 0, g->c, n);
}

/* One run's rate, GFLOP/s. */
static double sgemm_run(const sgemm_t *g) {
  double t0 = bench_now_ms();
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, g->m, g->n, g->k, 1,
              g->a, g->k, g->b, g->k, 0, g->c, g->n);
  return 2.0 * g->m * g->n * g->k / (bench_now_ms() - t0) / 1e6;
}

static void sgemm_free(sgemm_t *g) {
  free(g->a);
  free(g->b);
  free(g->c);
}

/* The median rate of `reps` runs (or more, for at least 500 ms) after a
 * warm-up. On 2048³ it is the ceiling. */
static double sgemm_rate(int m, int n, int k, int reps) {
  sgemm_t g;
  sgemm_init(&g, m, n, k);
  double r[64];
  int nr = 0;
  double start = bench_now_ms();
  while (more_runs(nr, reps, start, 500))
    r[nr++] = sgemm_run(&g);
  sgemm_free(&g);
  return bench_median(r, nr);
}

/* The flops of a row's plan: projections and attention, as if unmasked. */
static double row_flops(const row_t *r, double *proj_flops) {
  int64_t Dh = r->E / r->H;
  *proj_flops = 2.0 * r->B *
                ((double)r->Lq * r->E * r->E * 2 +
                 (double)r->Lk * r->E * r->Hkv * Dh * 2);
  return *proj_flops + 4.0 * r->B * r->Lq * r->Lk * r->E;
}

/* What one row measured. The ratios pair each run of the row with a 2048³
 * sgemm run just before it, and take the median of the pairs' ratios: the
 * machine's speed drifts over seconds here, and a ratio of neighbours
 * cancels most of that drift. */
typedef struct result {
  double ms;          /* the median of the row's runs */
  double stage_ms[3]; /* medians of projection, attention and output */
  double busy_ms[3];  /* and of their busy times (attn_timing_t) */
  double x_sgemm, proj_x;
  double ceiling; /* the median sgemm rate of the pairs, GFLOP/s */
  double x_1th;   /* one thread's time over this row's, or -1 */
  double rss_mb;  /* peak RSS after the first run, before the sgemm buffers */
} result_t;

/* Runs a plan `inner` times; returns the median ms, the median time of
 * its projections (stages 1 and 3) in *proj_ms, and of each stage
 * (projection, attention, output) in stage_ms[0..3) and its busy time in
 * busy_ms[0..3) when not NULL. */
static double time_plan(const attn_plan_t *plan, attn_outputs_t *o, void *ws,
                        int inner, double *proj_ms, double *stage_ms,
                        double *busy_ms) {
  double t[16], pt[16], st[3][16], bt[3][16];
  attn_error_t err;
  for (int k = 0; k < inner; k++) {
    double t0 = bench_now_ms();
    attn_forward(plan, o, ws, plan->workspace_bytes, &err);
    t[k] = bench_now_ms() - t0;
    pt[k] = o->timing.projection_ms + o->timing.output_ms;
    st[0][k] = o->timing.projection_ms;
    st[1][k] = o->timing.attention_ms;
    st[2][k] = o->timing.output_ms;
    bt[0][k] = o->timing.projection_busy_ms;
    bt[1][k] = o->timing.attention_busy_ms;
    bt[2][k] = o->timing.output_busy_ms;
  }
  *proj_ms = bench_median(pt, inner);
  for (int i = 0; stage_ms && i < 3; i++)
    stage_ms[i] = bench_median(st[i], inner);
  for (int i = 0; busy_ms && i < 3; i++)
    busy_ms[i] = bench_median(bt[i], inner);
  return bench_median(t, inner);
}

/* What a W_* asks for beside the output. */
static void set_weights(attn_params_t *p, int w) {
  p->want_weights = w == W_DENSE;
  p->reduce = (attn_reduce_t){0};
  if (w == W_POOLED)
    p->reduce = (attn_reduce_t){.pool_q = 256, .pool_k = 256};
  else if (w == W_TOP_K)
    p->reduce = (attn_reduce_t){.top_k = top_k};
  else if (w == W_STATS)
    p->reduce = (attn_reduce_t){.stats = ATTN_STAT_ALL, .sink_tokens = 4};
}

/* The buffers of a plan's outputs (leaked, as the inputs). */
static attn_outputs_t plan_outputs(const attn_plan_t *pl) {
  attn_outputs_t o = {.out = malloc((size_t)pl->out_elems * sizeof(float))};
  if (pl->params->want_weights)
    o.weights = malloc((size_t)pl->weights_elems * sizeof(float));
  if (pl->top_k_elems) {
    o.top_k_index = malloc((size_t)pl->top_k_elems * sizeof(int32_t));
    o.top_k_value = malloc((size_t)pl->top_k_elems * sizeof(float));
  }
  if (pl->pooled_elems)
    o.pooled = malloc((size_t)pl->pooled_elems * sizeof(float));
  if (pl->stats_elems) {
    o.entropy = malloc((size_t)pl->stats_elems * sizeof(float));
    o.sink = malloc((size_t)pl->stats_elems * sizeof(float));
    o.distance = malloc((size_t)pl->stats_elems * sizeof(float));
  }
  return o;
}

/* The row's inputs (random, leaked: each row runs in a child process) and
 * its params, with what it asks for beside the output. */
static attn_params_t row_params(const row_t *r) {
  int64_t Dh = r->E / r->H;
  float *x = bench_random_floats((size_t)(r->B * r->Lq * r->E), 1, 4);
  float *kv = r->Lk != r->Lq
                  ? bench_random_floats((size_t)(r->B * r->Lk * r->E), 1, 5)
                  : NULL;
  float scale = 1.0f / sqrtf((float)r->E);
  float *wq = bench_random_floats((size_t)(r->E * r->E), scale, 6);
  float *wk = bench_random_floats((size_t)(r->Hkv * Dh * r->E), scale, 7);
  float *wv = bench_random_floats((size_t)(r->Hkv * Dh * r->E), scale, 8);
  float *wo = bench_random_floats((size_t)(r->E * r->E), scale, 9);
  attn_params_t p = {
      .query = {x, 3, {r->B, r->Lq, r->E}},
      .num_heads = r->H,
      .num_kv_heads = r->Hkv,
      .q_weight = {wq, 2, {r->E, r->E}},
      .k_weight = {wk, 2, {r->Hkv * Dh, r->E}},
      .v_weight = {wv, 2, {r->Hkv * Dh, r->E}},
      .o_weight = {wo, 2, {r->E, r->E}},
      .causal = r->causal ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_NONE,
  };
  set_weights(&p, r->weights);
  if (kv)
    p.key = (attn_tensor_t){kv, 3, {r->B, r->Lk, r->E}};
  return p;
}

/* Runs one row in this process; returns 0, or -1. Unless `unpaired`, a row
 * of several threads also times one thread, paired run by run. */
static int run_row(const row_t *r, int reps, int unpaired, result_t *res) {
  attn_params_t p = row_params(r);
  attn_exec_t ex = {.threads = r->threads, .isa = r->isa};
  attn_plan_t plan;
  attn_error_t err;
  if (attn_plan_init(&plan, &p, &ex, &err) < 0) {
    fprintf(stderr, "%s: %s\n", r->name, err.message);
    return -1;
  }
  /* Rows of several threads also time one thread, paired the same way. */
  attn_exec_t ex1 = {.threads = 1, .isa = r->isa};
  attn_plan_t plan1;
  int paired = r->threads > 1 && !unpaired;
  if (paired && attn_plan_init(&plan1, &p, &ex1, &err) < 0)
    return -1;
  void *ws = aligned_alloc(64, (plan.workspace_bytes + 63) / 64 * 64);
  attn_outputs_t o = plan_outputs(&plan);
  if (!ws || !o.out || (r->weights == W_DENSE && !o.weights))
    return -1;
  double w0 = bench_now_ms();
  attn_forward(&plan, &o, ws, plan.workspace_bytes, &err); /* warm up */
  double warm_ms = bench_now_ms() - w0;
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  res->rss_mb = (double)ru.ru_maxrss / 1024.0;

  sgemm_t ceil;
  sgemm_init(&ceil, 2048, 2048, 2048);
  /* Short rows run several times per pair, so that they run warm. */
  int inner = warm_ms >= 40 ? 1 : warm_ms < 2.5 ? 16 : (int)(40 / warm_ms);
  double proj_flops, flops = row_flops(r, &proj_flops);
  double ms[64], proj[64], xs[64], pxs[64], cs[64], sp[64], st[3][64],
      bt[3][64];
  int np = 0;
  double start = bench_now_ms();
  while (more_runs(np, reps, start, 1000)) {
    double stage[3], busy[3];
    cs[np] = sgemm_run(&ceil);
    ms[np] = time_plan(&plan, &o, ws, inner, &proj[np], stage, busy);
    for (int i = 0; i < 3; i++)
      st[i][np] = stage[i], bt[i][np] = busy[i];
    if (paired) {
      double unused;
      sp[np] = time_plan(&plan1, &o, ws, inner, &unused, NULL, NULL) / ms[np];
    }
    xs[np] = flops / ms[np] / 1e6 / cs[np];
    pxs[np] = proj_flops / proj[np] / 1e6 / r->threads / cs[np];
    np++;
  }
  res->ms = bench_median(ms, np);
  res->x_sgemm = bench_median(xs, np);
  res->proj_x = bench_median(pxs, np);
  res->ceiling = bench_median(cs, np);
  res->x_1th = paired ? bench_median(sp, np) : -1;
  for (int i = 0; i < 3; i++) {
    res->stage_ms[i] = bench_median(st[i], np);
    res->busy_ms[i] = bench_median(bt[i], np);
  }
  return 0;
}

static double cpu_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

/* The reductions' cost beside the same call without them (issue 34): the
 * causal self-attention of row L<L> E 512 H 8 on one thread, with weights
 * none, pooled [256, 256] mean, top_k 8 and stats, in turns, `rounds`
 * times. The ratio of a round is each call's time over that round's
 * "none": printed are their medians (and range), by CPU time and by wall
 * time. CPU time leaves out the time this process waits for a core on a
 * shared machine; caches it shares it does not. */
static int compare_weights(int64_t L, int rounds) {
  enum { K = 4 };
  static const int kinds[K] = {W_NONE, W_POOLED, W_TOP_K, W_STATS};
  const row_t base = {"", 1, L, L, 512, 8, 8, 1, W_NONE, 1, 0, 0};
  attn_params_t p[K];
  attn_plan_t plan[K];
  attn_outputs_t o[K];
  size_t ws_bytes = 0;
  attn_error_t err;
  attn_exec_t ex = {.threads = 1};
  p[0] = row_params(&base);
  for (int k = 0; k < K; k++) {
    p[k] = p[0];
    set_weights(&p[k], kinds[k]);
    if (attn_plan_init(&plan[k], &p[k], &ex, &err) < 0) {
      fprintf(stderr, "compare: %s\n", err.message);
      return -1;
    }
    o[k] = plan_outputs(&plan[k]);
    if (plan[k].workspace_bytes > ws_bytes)
      ws_bytes = plan[k].workspace_bytes;
  }
  void *ws = aligned_alloc(64, (ws_bytes + 63) / 64 * 64); /* shared */
  for (int k = 0; k < K; k++)                              /* warm up */
    attn_forward(&plan[k], &o[k], ws, plan[k].workspace_bytes, &err);
  double cpu[K][64], wall[K][64], rc[K][64], rw[K][64];
  rounds = rounds < 1 ? 1 : rounds > 64 ? 64 : rounds;
  for (int r = 0; r < rounds; r++)
    for (int k = 0; k < K; k++) {
      double c0 = cpu_ms(), w0 = bench_now_ms();
      attn_forward(&plan[k], &o[k], ws, plan[k].workspace_bytes, &err);
      cpu[k][r] = cpu_ms() - c0;
      wall[k][r] = bench_now_ms() - w0;
    }
  printf("weights at L=%lld E=512 H=8 causal, one thread, %d rounds in "
         "turns; ratio to none, median [min, max] of the rounds:\n",
         (long long)L, rounds);
  printf("%-8s %10s %22s %10s %22s %9s\n", "weights", "cpu_ms", "cpu ratio",
         "wall_ms", "wall ratio", "ws_MiB");
  for (int k = 0; k < K; k++) {
    char name[16];
    snprintf(name, sizeof name, "top_k%lld", (long long)top_k);
    double lo[2] = {1e300, 1e300}, hi[2] = {0, 0};
    for (int r = 0; r < rounds; r++) {
      rc[k][r] = cpu[k][r] / cpu[0][r];
      rw[k][r] = wall[k][r] / wall[0][r];
      lo[0] = rc[k][r] < lo[0] ? rc[k][r] : lo[0];
      hi[0] = rc[k][r] > hi[0] ? rc[k][r] : hi[0];
      lo[1] = rw[k][r] < lo[1] ? rw[k][r] : lo[1];
      hi[1] = rw[k][r] > hi[1] ? rw[k][r] : hi[1];
    }
    printf("%-8s %10.1f %6.3f [%5.3f, %5.3f] %10.1f %6.3f [%5.3f, %5.3f] "
           "%9.1f\n",
           kinds[k] == W_TOP_K ? name : weights_names[kinds[k]],
           bench_median(cpu[k], rounds), bench_median(rc[k], rounds), lo[0],
           hi[0], bench_median(wall[k], rounds), bench_median(rw[k], rounds),
           lo[1], hi[1], (double)plan[k].workspace_bytes / 1048576.0);
  }
  return 0;
}

/* Times the same row in PyTorch; returns its median ms, or -1. */
static double torch_row(const row_t *r, int reps) {
  if (r->weights > W_DENSE || r->Lq != r->Lk || r->Hkv != r->H ||
      r->isa != ATTN_ISA_AUTO || r->Lq > 4096 || r->E > 512)
    return -1; /* what nn.MultiheadAttention expresses, in minutes */
  char cmd[512];
  /* Torch at its best: the OpenBLAS kernel we use (this process's), its
   * own threads, and malloc keeping freed memory as attnd does (otherwise
   * every call pays first-touch page faults for its score matrices). */
  const char *core = getenv("OPENBLAS_CORETYPE");
  snprintf(cmd, sizeof cmd,
           "OPENBLAS_CORETYPE=%s OPENBLAS_NUM_THREADS=%d OMP_NUM_THREADS=%d "
           "MALLOC_ARENA_MAX=1 MALLOC_MMAP_MAX_=0 "
           "MALLOC_TRIM_THRESHOLD_=1073741824 "
           "/usr/bin/python3 bench/torch_mha.py %lld %lld %lld %lld %d %d %d "
           "%d 2>/dev/null",
           core ? core : "", r->threads, r->threads, (long long)r->B,
           (long long)r->Lq, (long long)r->E, (long long)r->H, r->causal,
           r->weights, r->threads, reps);
  FILE *f = popen(cmd, "r");
  double ms = -1;
  if (f == NULL || fscanf(f, "%lf", &ms) != 1)
    ms = -1;
  if (f)
    pclose(f);
  return ms;
}

/* Parses "L,E,H" into a causal self-attention row of one thread; returns
 * 0, or -1 when it is not three positive numbers with H dividing E. */
static int parse_shape(const char *s, row_t *r, char *name, size_t nsz) {
  long long L, E, H;
  char end;
  if (sscanf(s, "%lld,%lld,%lld%c", &L, &E, &H, &end) != 3 || L < 1 || E < 1 ||
      H < 1 || E % H != 0)
    return -1;
  snprintf(name, nsz, "L%lld E%lld H%lld", L, E, H);
  *r = (row_t){name, 1, L, L, E, H, H, 1, 0, 1, 0, 1};
  return 0;
}

/* Parses a comma list of thread counts (1..1024) into t; returns how many,
 * or -1. */
static int parse_threads(const char *s, int *t, int max) {
  int n = 0;
  for (const char *p = s; *p;) {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p || v < 1 || v > 1024 || n == max || (*end != ',' && *end != 0))
      return -1;
    t[n++] = (int)v;
    p = *end ? end + 1 : end;
  }
  return n ? n : -1;
}

int main(int argc, char **argv) {
  int quick = 0, torch = 0, reps = 5, unpaired = 0;
  const char *only = NULL;
  int64_t cmp_L = 8192; /* --compare-weights L ROUNDS; L 0: none */
  int cmp_rounds = 5;
  const char *csv_path = "build/bench/attn.csv";
  static row_t shapes[MAX_SHAPES], sweep[MAX_SHAPES * MAX_THREADS];
  static char names[MAX_SHAPES][64];
  int nshapes = 0, threads[MAX_THREADS] = {1, 2}, nthreads = 2;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0)
      quick = 1;
    else if (strcmp(argv[i], "--torch") == 0)
      torch = 1;
    else if (strcmp(argv[i], "--unpaired") == 0)
      unpaired = 1;
    else if (strcmp(argv[i], "--csv") == 0 && i + 1 < argc)
      csv_path = argv[++i];
    else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
      reps = atoi(argv[++i]);
    else if (strcmp(argv[i], "--shape") == 0 && i + 1 < argc &&
             nshapes < MAX_SHAPES &&
             parse_shape(argv[i + 1], &shapes[nshapes], names[nshapes],
                         sizeof names[nshapes]) == 0)
      nshapes++, i++;
    else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc &&
             (nthreads = parse_threads(argv[i + 1], threads, MAX_THREADS)) > 0)
      i++;
    else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc)
      only = argv[++i];
    else if (strcmp(argv[i], "--compare-weights") == 0 && i + 2 < argc) {
      cmp_L = atoll(argv[++i]);
      cmp_rounds = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--top-k") == 0 && i + 1 < argc &&
               atoll(argv[i + 1]) >= 1 &&
               atoll(argv[i + 1]) <= ATTN_TOP_K_MAX) {
      top_k = atoll(argv[++i]);
    } else {
      fprintf(stderr,
              "usage: %s [--quick] [--torch] [--csv FILE] [--reps N]\n"
              "       [--shape L,E,H]... [--threads N,N...] [--unpaired]\n"
              "       [--only WORD] [--compare-weights L ROUNDS] [--top-k K]\n"
              "--shape (up to %d) runs causal self-attention of those shapes, "
              "B = 1, at each of --threads (up to %d counts, default 1,2) "
              "instead of the table; --unpaired skips the one-thread run "
              "paired with each run of several threads\n",
              argv[0], MAX_SHAPES, MAX_THREADS);
      return 2;
    }
  }
  if (reps < 1)
    reps = 1;
  const row_t *table = rows;
  size_t ntable = NROWS;
  if (nshapes > 0) { /* the sweep: each shape at each thread count */
    ntable = 0;
    for (int s = 0; s < nshapes; s++)
      for (int t = 0; t < nthreads; t++) {
        sweep[ntable] = shapes[s];
        sweep[ntable++].threads = threads[t];
      }
    table = sweep;
  }
  attnd_blas_select("auto", argv);
  attn_backend_t be;
  attn_backend_info(&be);
  double ceilings[MAX_SHAPES * MAX_THREADS + NROWS + 1];
  int nceil = 0;
  ceilings[nceil++] = sgemm_rate(2048, 2048, 2048, reps);
  printf(
      "attn-bench: %s, kernel %s, SIMD %s; sgemm 2048^3 one thread: %.1f "
      "GFLOP/s (the ceiling; each run of a row is paired with a run of it, and "
      "the ratios are medians of the pairs')\n",
      be.blas_config, be.blas_kernel, attn_isa_name(be.isa), ceilings[0]);
  FILE *csv = fopen(csv_path, "w");
  if (csv)
    fprintf(csv,
            "name,B,Lq,Lk,E,H,Hkv,mask,weights,threads,path,median_ms,"
            "gflops,x_sgemm,proj_x_sgemm,x_one_thread,peak_rss_mib,torch_ms,"
            "x_torch,sgemm_gflops,projection_ms,attention_ms,output_ms,"
            "projection_busy_ms,attention_busy_ms,output_busy_ms\n");
  printf("%-19s %2s %6s %6s %5s %3s %3s %-6s %-8s %2s %-16s %10s %8s %6s %6s "
         "%6s %8s %9s %9s %9s%s\n",
         "row", "B", "Lq", "Lk", "E", "H", "Hkv", "mask", "weights", "th",
         "path", "median_ms", "GFLOP/s", "x_sgemm", "proj_x", "x_1th",
         "rss_MiB", "proj_ms", "attn_ms", "out_ms",
         torch ? "   torch_ms  x_torch" : "");
  for (size_t i = 0; i < ntable; i++) {
    const row_t *r = &table[i];
    if ((quick && !r->quick) ||
        (only && strncmp(r->name, only, strlen(only)) != 0))
      continue;
    int fd[2];
    if (pipe(fd) < 0)
      return 1;
    fflush(stdout);
    pid_t pid = fork(); /* so that the row's peak RSS is its own */
    if (pid == 0) {
      close(fd[0]);
      result_t res;
      if (run_row(r, reps, unpaired, &res) < 0 ||
          write(fd[1], &res, sizeof res) != sizeof res)
        _exit(1);
      _exit(0);
    }
    close(fd[1]);
    result_t res;
    int ok = read(fd[0], &res, sizeof res) == sizeof res;
    close(fd[0]);
    int status;
    waitpid(pid, &status, 0);
    if (!ok) {
      printf("%-19s failed\n", r->name);
      continue;
    }
    ceilings[nceil++] = res.ceiling;
    double proj_flops, ms = res.ms, rss = res.rss_mb;
    double gflops = row_flops(r, &proj_flops) / ms / 1e6;
    /* reductions per head run on the online path (core/kernel.c) */
    const char *path = r->weights == W_DENSE ? "two-pass" : "online";
    const char *wname = weights_names[r->weights];
    char pathname[32];
    snprintf(pathname, sizeof pathname, "%s/%s",
             attn_isa_name(r->isa ? r->isa : be.isa), path);
    char mask[8];
    snprintf(mask, sizeof mask, "%s", r->causal ? "causal" : "none");
    double tms = torch ? torch_row(r, reps) : -1;
    printf("%-19s %2lld %6lld %6lld %5lld %3lld %3lld %-6s %-8s %2d %-16s "
           "%10.1f %8.1f %6.2f %6.2f ",
           r->name, (long long)r->B, (long long)r->Lq, (long long)r->Lk,
           (long long)r->E, (long long)r->H, (long long)r->Hkv, mask, wname,
           r->threads, pathname, ms, gflops, res.x_sgemm, res.proj_x);
    if (res.x_1th > 0)
      printf("%6.2f", res.x_1th);
    else
      printf("%6s", "-");
    printf(" %8.0f %9.2f %9.2f %9.2f", rss, res.stage_ms[0], res.stage_ms[1],
           res.stage_ms[2]);
    if (torch && tms > 0)
      printf(" %10.1f %8.2f", tms, tms / ms);
    else if (torch)
      printf(" %10s %8s", "-", "-");
    printf("\n");
    if (csv)
      fprintf(csv,
              "%s,%lld,%lld,%lld,%lld,%lld,%lld,%s,%s,%d,%s,%.3f,%.2f,"
              "%.3f,%.3f,%.3f,%.1f,%.3f,%.3f,%.1f,%.3f,%.3f,%.3f,%.3f,%.3f,"
              "%.3f\n",
              r->name, (long long)r->B, (long long)r->Lq, (long long)r->Lk,
              (long long)r->E, (long long)r->H, (long long)r->Hkv, mask, wname,
              r->threads, pathname, ms, gflops, res.x_sgemm, res.proj_x,
              res.x_1th, rss, tms, tms > 0 ? tms / ms : -1.0, res.ceiling,
              res.stage_ms[0], res.stage_ms[1], res.stage_ms[2], res.busy_ms[0],
              res.busy_ms[1], res.busy_ms[2]);
    if (csv) /* a row at a time: a run cut short keeps the rows it finished */
      fflush(csv);
  }
  double lo = ceilings[0], hi = ceilings[0];
  for (int i = 1; i < nceil; i++) {
    lo = ceilings[i] < lo ? ceilings[i] : lo;
    hi = ceilings[i] > hi ? ceilings[i] : hi;
  }
  if (cmp_L > 0 && nshapes == 0 && compare_weights(cmp_L, cmp_rounds) < 0)
    return 1;
  printf("sgemm ceiling over the run: median %.1f, from %.1f to %.1f "
         "GFLOP/s\n",
         bench_median(ceilings, nceil), lo, hi);
  /* What sgemm itself does on the projections' calls at E = 512 from
   * L = 4096 (1024 rows of [512]·[512, 512]ᵀ: core/forward.c, proj_rows),
   * beside the ceiling measured just before it: the part of proj_x that is
   * the shape and not attnd. */
  double c = sgemm_rate(2048, 2048, 2048, reps),
         s = sgemm_rate(1024, 512, 512, 4 * reps);
  printf("sgemm on the projections' calls (1024x512x512): %.1f GFLOP/s, "
         "%.2f of the ceiling (%.1f)\n",
         s, s / c, c);
  if (csv) {
    fclose(csv);
    printf("CSV: %s\n", csv_path);
  }
  return 0;
}
