/* bench/codec_bench.c: the tensor codecs against jansson, in one run.
 *
 * On one 4096 x 512 float32 tensor (2M values, random in [-1, 1)):
 *   base64 encode and decode (server/codec.c);
 *   JSON numbers: parse with the bulk scanner and with jansson's
 *   json_loadb; print with attnd_buf_floats and with jansson's json_dumps
 *   (JSON_REAL_PRECISION(9), what round-trips a float32).
 * Rates are MB/s of text (the JSON or base64 characters) and of binary
 * (float32 bytes), medians of repeated runs; one thread.
 *
 * usage: codec-bench [--csv FILE] [--reps N] */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "codec/base64.h"
#include "codec/buf.h"
#include "codec/bulk.h"

#define MEDIAN_MS(reps, body)                                                  \
  ({                                                                           \
    double t_[64];                                                             \
    int n_ = (reps) < 64 ? (reps) : 64;                                        \
    for (int i_ = 0; i_ < n_; i_++) {                                          \
      double t0_ = bench_now_ms();                                             \
      body;                                                                    \
      t_[i_] = bench_now_ms() - t0_;                                           \
    }                                                                          \
    bench_median(t_, n_);                                                      \
  })

typedef struct result {
  const char *what, *impl;
  double ms, text_mb, bin_mb;
} result_t;

int main(int argc, char **argv) {
  int reps = 7;
  const char *csv_path = "build/bench/codec.csv";
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--csv") == 0 && i + 1 < argc)
      csv_path = argv[++i];
    else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
      reps = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: %s [--csv FILE] [--reps N]\n", argv[0]);
      return 2;
    }
  }
  if (reps < 1)
    reps = 1;
  const int64_t dim[2] = {4096, 512};
  const size_t n = (size_t)(dim[0] * dim[1]);
  float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
  uint64_t s = 88172645463325252ull;
  for (size_t i = 0; i < n; i++) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    x[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 2 - 1);
  }
  const double bin = (double)(n * sizeof(float)) / 1e6;
  result_t res[6];
  int nres = 0;

  /* base64 */
  size_t b64_len = attnd_b64_encoded_len(n * sizeof *x);
  char *b64 = malloc(b64_len);
  double ms = MEDIAN_MS(reps, attnd_b64_encode(x, n * sizeof *x, b64));
  res[nres++] = (result_t){"base64 encode", "attnd", ms, b64_len / 1e6, bin};
  size_t got, bad;
  ms = MEDIAN_MS(reps, attnd_b64_decode(b64, b64_len, y, &got, &bad));
  if (got != n * sizeof *x || memcmp(x, y, got) != 0)
    return fprintf(stderr, "base64 round trip failed\n"), 1;
  res[nres++] = (result_t){"base64 decode", "attnd", ms, b64_len / 1e6, bin};

  /* JSON print */
  attnd_buf_t text;
  attnd_buf_init(&text);
  ms = MEDIAN_MS(reps, {
    text.len = 0;
    attnd_buf_floats(&text, x, n, 2, dim);
  });
  res[nres++] = (result_t){"JSON print", "attnd", ms, text.len / 1e6, bin};
  json_t *arr = json_array();
  for (int64_t r = 0; r < dim[0]; r++) {
    json_t *row = json_array();
    for (int64_t c = 0; c < dim[1]; c++)
      json_array_append_new(row, json_real(x[r * dim[1] + c]));
    json_array_append_new(arr, row);
  }
  size_t jlen = 0;
  ms = MEDIAN_MS(reps < 3 ? reps : 3, {
    char *t = json_dumps(arr, JSON_COMPACT | JSON_REAL_PRECISION(9));
    jlen = strlen(t);
    free(t);
  });
  res[nres++] = (result_t){"JSON print", "jansson", ms, jlen / 1e6, bin};
  json_decref(arr);

  /* JSON parse, of attnd's text */
  size_t items = 0;
  ms = MEDIAN_MS(reps, {
    attnd_bulk_set_t set;
    attnd_buf_t sk;
    attnd_bulk_set_init(&set, 1);
    attnd_buf_init(&sk);
    attnd_bulk_scan(text.data, text.len, 64, 0, &set, &sk);
    items = set.n;
    if (items == 1)
      memcpy(y, set.items[0].data, n * sizeof *y);
    attnd_bulk_set_free(&set);
    attnd_buf_free(&sk);
  });
  if (items != 1 || memcmp(x, y, n * sizeof *x) != 0)
    return fprintf(stderr, "JSON round trip failed\n"), 1;
  res[nres++] = (result_t){"JSON parse", "attnd", ms, text.len / 1e6, bin};
  ms = MEDIAN_MS(reps < 3 ? reps : 3, {
    json_error_t e;
    json_decref(json_loadb(text.data, text.len, 0, &e));
  });
  res[nres++] = (result_t){"JSON parse", "jansson", ms, text.len / 1e6, bin};

  printf("codec-bench: one 4096 x 512 float32 tensor, median of %d runs\n",
         reps);
  printf("%-14s %-8s %9s %9s %12s %12s\n", "operation", "impl", "text_MB",
         "median_ms", "text_MB/s", "float_MB/s");
  FILE *csv = fopen(csv_path, "w");
  if (csv)
    fprintf(csv, "operation,impl,text_mb,median_ms,text_mb_s,float_mb_s\n");
  for (int i = 0; i < nres; i++) {
    result_t *r = &res[i];
    printf("%-14s %-8s %9.1f %9.2f %12.0f %12.0f\n", r->what, r->impl,
           r->text_mb, r->ms, r->text_mb / r->ms * 1e3,
           r->bin_mb / r->ms * 1e3);
    if (csv)
      fprintf(csv, "%s,%s,%.2f,%.3f,%.1f,%.1f\n", r->what, r->impl, r->text_mb,
              r->ms, r->text_mb / r->ms * 1e3, r->bin_mb / r->ms * 1e3);
  }
  if (csv) {
    fclose(csv);
    printf("CSV: %s\n", csv_path);
  }
  attnd_buf_free(&text);
  free(b64);
  free(x);
  free(y);
  return 0;
}
