/* bench/cuda_bench.c: the core's CUDA backend on the shapes of issue 31.
 *
 * Each row is causal self-attention with projections, as attnd serves it
 * and as tools/device/torch_sdpa.py times PyTorch's: x [1, L, E], q/k/v/o
 * weights [E, E] with biases, H heads of E/H features, the causal mask
 * bottom-right; in fp32 and in bf16. For each row: one warm-up call, then
 * --reps timed calls (fewer for the largest shape), and the medians of
 * compute_ms (the device stages: projections, attention, output
 * projection; attn_timing_t) and total_ms (the call, with its copies of
 * inputs, weights and results between host and device), and the
 * dense-equivalent TFLOP/s over compute_ms (8·L·E² + 4·L²·E, as the issue
 * counts), and each stage's median (projections, attention, output
 * projection: the GPU's times between the call's events), to see where
 * a row's time goes. Prints a table, and CSV with --csv
 * (tools/device/table.py joins it with torch's).
 *
 * The kernel column is the flash kernel's version that ran (bf16 runs
 * version 2 where it applies, fp32 version 1); --kernel 1 forces version
 * 1, --kernel 3 runs version 3 where it applies, bf16 and fp32, and
 * --kernel 4 version 4, the keys split across blocks where a call's grid
 * is small (core/cuda/kernels.h), to compare; --precision keeps the rows of one
 * precision. Each CSV row is flushed as it is written, so that a run cut
 * short by a time limit keeps the rows it finished.
 *
 * --decode times decoding over a kv cache in device memory instead (what
 * a session on the GPU runs): a layer of E 4096, 32 query heads and 8 kv
 * heads of 128 features, with projections whose weights are in device
 * memory too (weights_on_device); its context of N tokens
 * (4096, 16384, 32768) prefilled by one call, then --reps steps of one
 * token each, each appended to the cache; the prefill's time, and the
 * steps' medians of compute_ms and total_ms (with the step's copies: its
 * input, the page table, and the result). CSV columns:
 * context, precision, kernel, prefill_ms, step_compute_ms, step_total_ms,
 * step projection/attention/output ms.
 *
 * Exits 1, saying why, where the CUDA backend is unusable (a build without
 * CUDA=1, or no sm_90 device).
 *
 * usage: attn-cuda-bench [--quick] [--decode] [--kernel 1|2|3|4]
 *                        [--precision fp32|bf16] [--reps N] [--csv FILE] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attn.h"

/* core/internal.h's knob and record of the flash kernel's version. */
extern int attn__cuda_flash_version, attn__cuda_flash_last;

typedef struct shape {
  int64_t L, E, H;
  int quick; /* part of --quick */
} shape_t;

static const shape_t shapes[] = {
    {4096, 512, 8, 1},
    {16384, 512, 8, 1},
    {4096, 4096, 32, 0},
    {32768, 4096, 32, 0},
};

static const int64_t contexts[] = {4096, 16384, 32768};

static float *random_floats(int64_t n, float amp, uint64_t seed) {
  float *x = malloc((size_t)n * sizeof *x);
  if (x == NULL)
    return NULL;
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < n; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = amp * ((float)(s >> 40) / (float)(1 << 24) * 2.0f - 1.0f);
  }
  return x;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* A row's timed calls: each one's compute (the three device stages),
 * total, projection, attention and output ms. */
enum { R_COMPUTE, R_TOTAL, R_PROJ, R_ATTN, R_OUT, R_N };
typedef struct runs {
  double ms[R_N][32];
} runs_t;

static void runs_note(runs_t *rs, int r, const attn_timing_t *t) {
  rs->ms[R_COMPUTE][r] = t->projection_ms + t->attention_ms + t->output_ms;
  rs->ms[R_TOTAL][r] = t->total_ms;
  rs->ms[R_PROJ][r] = t->projection_ms;
  rs->ms[R_ATTN][r] = t->attention_ms;
  rs->ms[R_OUT][r] = t->output_ms;
}

/* The medians of the first n calls, in runs_t's order. */
static void runs_median(runs_t *rs, int n, double m[R_N]) {
  for (int k = 0; k < R_N; k++)
    m[k] = median(rs->ms[k], n);
}

/* Times one row; returns 0, or the core's error (printed). */
static int run_row(const shape_t *sh, attn_precision_t prec, int reps,
                   FILE *csv) {
  const int64_t L = sh->L, E = sh->E;
  float *x = random_floats(L * E, 1.0f, 1);
  float *w[4], *bias[4];
  for (int k = 0; k < 4; k++) {
    w[k] = random_floats(E * E, 1.0f / 32.0f, 2 + (uint64_t)k);
    bias[k] = random_floats(E, 0.1f, 6 + (uint64_t)k);
  }
  float *out = malloc((size_t)(L * E) * sizeof *out);
  attn_params_t p = {0};
  p.query = (attn_tensor_t){.data = x, .rank = 2, .dim = {L, E}};
  p.num_heads = sh->H;
  attn_tensor_t *wt[4] = {&p.q_weight, &p.k_weight, &p.v_weight, &p.o_weight};
  attn_tensor_t *bt[4] = {&p.q_bias, &p.k_bias, &p.v_bias, &p.o_bias};
  for (int k = 0; k < 4; k++) {
    *wt[k] = (attn_tensor_t){.data = w[k], .rank = 2, .dim = {E, E}};
    *bt[k] = (attn_tensor_t){.data = bias[k], .rank = 1, .dim = {E}};
  }
  p.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
  attn_exec_t ex = {.backend = ATTN_BACKEND_CUDA, .precision = prec};
  attn_plan_t plan;
  attn_error_t err;
  void *ws = NULL;
  int rc = attn_plan_init(&plan, &p, &ex, &err);
  if (rc == 0)
    ws = aligned_alloc(64, (plan.workspace_bytes + 63) / 64 * 64 + 64);
  runs_t rs;
  for (int r = -1; rc == 0 && r < reps; r++) { /* r = -1: the warm-up */
    attn_outputs_t o = {.out = out};
    rc = attn_forward(&plan, &o, ws, plan.workspace_bytes, &err);
    if (rc == 0 && r >= 0)
      runs_note(&rs, r, &o.timing);
  }
  if (rc != 0) {
    fprintf(stderr, "attn-cuda-bench: L=%lld E=%lld H=%lld %s: %s (%s): %s\n",
            (long long)L, (long long)E, (long long)sh->H,
            attn_precision_name(prec), attn_errname(rc), err.field,
            err.message);
  } else {
    double m[R_N];
    runs_median(&rs, reps, m);
    double flops = 8.0 * L * E * E + 4.0 * (double)L * L * E;
    printf("%6lld %5lld %3lld  %-5s v%-5d %10.3f %10.3f %9.1f  %8.3f %8.3f "
           "%8.3f\n",
           (long long)L, (long long)E, (long long)sh->H,
           attn_precision_name(prec), attn__cuda_flash_last, m[R_COMPUTE],
           m[R_TOTAL], flops / (m[R_COMPUTE] * 1e-3) / 1e12, m[R_PROJ],
           m[R_ATTN], m[R_OUT]);
    if (csv) {
      fprintf(csv, "%lld,%lld,%lld,%s,%d,%.4f,%.4f,%.4f,%.4f,%.4f\n",
              (long long)L, (long long)E, (long long)sh->H,
              attn_precision_name(prec), attn__cuda_flash_last, m[R_COMPUTE],
              m[R_TOTAL], m[R_PROJ], m[R_ATTN], m[R_OUT]);
      fflush(csv);
    }
  }
  free(ws);
  free(out);
  free(x);
  for (int k = 0; k < 4; k++)
    free(w[k]), free(bias[k]);
  return rc;
}

/* One --decode row: a context of N tokens in device pages, then `reps`
 * steps of one token. Returns 0, or the core's error (printed). */
static int run_decode(int64_t N, attn_precision_t prec, int reps, FILE *csv) {
  enum { E = 4096, H = 32, HKV = 8, D = 128 };
  const int64_t tokens = N + reps, n_pages = (tokens + 63) / 64;
  const size_t page_bytes = attn_kv_page_floats(HKV, D, D) * sizeof(float);
  float *x = random_floats(tokens * E, 1.0f, 11);
  float *qw = random_floats(H * D * E, 1.0f / 64.0f, 12);
  float *kw = random_floats(HKV * D * E, 1.0f / 64.0f, 13);
  float *vw = random_floats(HKV * D * E, 1.0f / 64.0f, 14);
  float *ow = random_floats(E * H * D, 1.0f / 64.0f, 15);
  float *out = malloc((size_t)(N * E) * sizeof *out);
  float **pages = calloc((size_t)n_pages, sizeof *pages);
  int rc = 0;
  attn_error_t err = {0};
  float *host_w[4] = {qw, kw, vw, ow}, *dev_w[4] = {NULL, NULL, NULL, NULL};
  const int64_t rows_w[4] = {H * D, HKV * D, HKV * D, E},
                cols_w[4] = {E, E, E, H * D};
  for (int k = 0; k < 4 && rc == 0; k++) {
    size_t bytes = (size_t)(rows_w[k] * cols_w[k]) * sizeof(float);
    if ((dev_w[k] = attn_cuda_alloc(bytes)) == NULL ||
        attn_cuda_copy(dev_w[k], host_w[k], bytes) != 0) {
      rc = ATTN_EDEVICE;
      snprintf(err.message, sizeof err.message,
               "attn_cuda_alloc/copy: weight %d of %zu bytes", k, bytes);
    }
  }
  for (int64_t i = 0; i < n_pages && rc == 0; i++)
    if ((pages[i] = attn_cuda_alloc(page_bytes)) == NULL) {
      rc = ATTN_EDEVICE;
      snprintf(err.message, sizeof err.message,
               "attn_cuda_alloc: no device memory for page %lld of %lld",
               (long long)i, (long long)n_pages);
    }
  int64_t past = 0;
  float absmax = 0;
  float *const *table = pages;
  attn_kv_t kv = {
      .past = &past, .pages = &table, .k_absmax = &absmax, .device = 1};
  attn_params_t p = {0};
  p.num_heads = H;
  p.num_kv_heads = HKV;
  attn_tensor_t *wt[4] = {&p.q_weight, &p.k_weight, &p.v_weight, &p.o_weight};
  for (int k = 0; k < 4; k++)
    *wt[k] = (attn_tensor_t){
        .data = dev_w[k], .rank = 2, .dim = {rows_w[k], cols_w[k]}};
  p.weights_on_device = 1;
  p.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
  p.kv = &kv;
  attn_exec_t ex = {.backend = ATTN_BACKEND_CUDA, .precision = prec};
  double prefill = 0;
  runs_t rs;
  for (int r = -1; rc == 0 && r < reps; r++) { /* r = -1: the prefill */
    const int64_t n = r < 0 ? N : 1;
    p.query = (attn_tensor_t){.data = x + past * E, .rank = 2, .dim = {n, E}};
    attn_plan_t plan;
    rc = attn_plan_init(&plan, &p, &ex, &err);
    void *ws = NULL;
    if (rc == 0 &&
        (ws = aligned_alloc(64, (plan.workspace_bytes + 63) / 64 * 64 + 64)) ==
            NULL)
      rc = ATTN_ENOSPC; /* no host memory for the workspace */
    attn_outputs_t o = {.out = out};
    if (rc == 0)
      rc = attn_forward(&plan, &o, ws, plan.workspace_bytes, &err);
    free(ws);
    if (rc != 0)
      break;
    past += n;
    if (r < 0) {
      prefill = o.timing.total_ms;
      continue;
    }
    runs_note(&rs, r, &o.timing);
  }
  if (rc != 0) {
    fprintf(stderr, "attn-cuda-bench: decode, context %lld %s: %s (%s): %s\n",
            (long long)N, attn_precision_name(prec), attn_errname(rc),
            err.field, err.message);
  } else {
    double m[R_N];
    runs_median(&rs, reps, m);
    printf("%7lld  %-5s v%-5d %10.2f %10.3f %10.3f  %8.3f %8.3f %8.3f\n",
           (long long)N, attn_precision_name(prec), attn__cuda_flash_last,
           prefill, m[R_COMPUTE], m[R_TOTAL], m[R_PROJ], m[R_ATTN], m[R_OUT]);
    if (csv) {
      fprintf(csv, "%lld,%s,%d,%.3f,%.4f,%.4f,%.4f,%.4f,%.4f\n", (long long)N,
              attn_precision_name(prec), attn__cuda_flash_last, prefill,
              m[R_COMPUTE], m[R_TOTAL], m[R_PROJ], m[R_ATTN], m[R_OUT]);
      fflush(csv);
    }
  }
  for (int64_t i = 0; i < n_pages; i++)
    attn_cuda_free(pages[i]);
  for (int k = 0; k < 4; k++)
    attn_cuda_free(dev_w[k]);
  free(pages);
  free(out), free(x), free(qw), free(kw), free(vw), free(ow);
  return rc;
}

int main(int argc, char **argv) {
  int quick = 0, decode = 0, reps = 5, kernel = 2, bad = 0;
  int only = -1; /* a precision, or every one */
  const char *csv_path = NULL;
  for (int i = 1; i < argc && !bad; i++) {
    if (strcmp(argv[i], "--quick") == 0) {
      quick = 1;
    } else if (strcmp(argv[i], "--decode") == 0) {
      decode = 1;
    } else if (strcmp(argv[i], "--kernel") == 0 && i + 1 < argc) {
      kernel = atoi(argv[++i]);
      bad = kernel < 1 || kernel > 4;
    } else if (strcmp(argv[i], "--precision") == 0 && i + 1 < argc) {
      i++;
      if (strcmp(argv[i], "fp32") == 0)
        only = ATTN_PRECISION_FP32;
      else if (strcmp(argv[i], "bf16") == 0)
        only = ATTN_PRECISION_BF16;
      else
        bad = 1;
    } else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      reps = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--csv") == 0 && i + 1 < argc) {
      csv_path = argv[++i];
    } else {
      bad = 1;
    }
  }
  if (bad) {
    fprintf(stderr,
            "usage: %s [--quick] [--decode] [--kernel 1|2|3|4] [--precision "
            "fp32|bf16] [--reps N] [--csv FILE]\n",
            argv[0]);
    return 2;
  }
  /* core/internal.h: 0 is the default (version 2 where it applies) */
  attn__cuda_flash_version = kernel == 2 ? 0 : kernel;
  if (reps < 1 || reps > 32) {
    fprintf(stderr, "attn-cuda-bench: --reps must be 1 to 32\n");
    return 2;
  }
  attn_cuda_info_t ci;
  attn_cuda_info(&ci);
  if (!ci.usable) {
    fprintf(stderr, "attn-cuda-bench: the cuda backend is unusable: %s\n",
            ci.status);
    return 1;
  }
  FILE *csv = NULL;
  if (csv_path && (csv = fopen(csv_path, "w")) == NULL) {
    perror(csv_path);
    return 1;
  }
  printf("attn-cuda-bench on %s (sm_%d%d), CUDA runtime %d, driver %d\n",
         ci.device, ci.cc_major, ci.cc_minor, ci.runtime_version,
         ci.driver_version);
  int failed = 0;
  if (decode) {
    if (csv)
      fprintf(csv, "context,precision,kernel,prefill_ms,step_compute_ms,"
                   "step_total_ms,projection_ms,attention_ms,output_ms\n");
    printf("decoding: E 4096, H 32, Hkv 8, Dh 128, one token a step, the "
           "cache and the weights in device memory\n");
    printf("%7s  %-5s %-6s %10s %10s %10s  %8s %8s %8s\n", "context", "prec",
           "kernel", "prefill_ms", "step_ms", "step_total", "proj_ms",
           "attn_ms", "out_ms");
    for (size_t c = 0; c < sizeof contexts / sizeof contexts[0]; c++)
      for (int prec = ATTN_PRECISION_FP32; prec <= ATTN_PRECISION_BF16; prec++)
        if ((only < 0 || prec == only) && (!quick || c == 0))
          failed |=
              run_decode(contexts[c], (attn_precision_t)prec, reps, csv) != 0;
    if (csv)
      fclose(csv);
    return failed;
  }
  if (csv)
    fprintf(csv, "L,E,H,precision,kernel,compute_ms,total_ms,projection_ms,"
                 "attention_ms,output_ms\n");
  printf("%6s %5s %3s  %-5s %-6s %10s %10s %9s  %8s %8s %8s\n", "L", "E", "H",
         "prec", "kernel", "compute_ms", "total_ms", "TFLOP/s", "proj_ms",
         "attn_ms", "out_ms");
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    if (quick && !shapes[s].quick)
      continue;
    int n = shapes[s].L * shapes[s].E > 16384 * 4096 ? (reps + 1) / 2 : reps;
    for (int prec = ATTN_PRECISION_FP32; prec <= ATTN_PRECISION_BF16; prec++)
      if (only < 0 || prec == only)
        failed |= run_row(&shapes[s], (attn_precision_t)prec, n, csv) != 0;
    fflush(stdout);
  }
  if (csv)
    fclose(csv);
  return failed;
}
