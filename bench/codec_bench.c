/* bench/codec_bench.c: the tensor codecs against jansson, in one run.
 *
 * On one 4096 x 512 float32 tensor (2M values, random in [-1, 1)):
 *   base64 encode and decode (codec/base64.c);
 *   JSON numbers: parse with the bulk scanner and with jansson's
 *   json_loadb; print with attnd_buf_floats and with jansson's json_dumps
 *   (JSON_REAL_PRECISION(9), what round-trips a float32);
 *   float16 and bfloat16: pack, round in place, and base64 (codec/half.c;
 *   the memcpy of the float32 tensor is in the round rows' time).
 * Rates are MB/s of text (the JSON or base64 characters) and of binary
 * (float32 bytes), medians of repeated runs; one thread.
 *
 * Then the worst cases a hostile client can send (worst_cases below): each
 * a request body of about a megabyte, timed through the whole decode path
 * (attnd_request_decode, default limits), through the bulk scanner alone,
 * and through jansson alone, in MB/s of body. Every parser must be linear
 * in its input, and the decode and scan rates at least WORST_MIN_MB_S;
 * rows under it are marked (timing is not asserted: the exit status is 1
 * only when a body decodes to another outcome than it must). One row is
 * jansson's by design: JSON that is not tensor data is jansson's to parse,
 * up to max_json_structure_bytes (256K), and "nesting, 255 KB" is the
 * slowest such body, whose time that limit bounds.
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
#include "config.h"
#include "sched/request.h"

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

/* ---- the worst cases -------------------------------------------------------
 *
 * Each body is a whole request, built to be as slow as possible for one
 * part of the decoder, with the outcome it must have. */

#define WORST_MIN_MB_S 100.0
#define WORST_BYTES (1u << 20) /* about this much of the hostile part */

typedef struct worst {
  const char *name;
  attnd_buf_t body;
  const char *expect; /* the error code, or "ok" */
} worst_t;

/* A small valid query, [2, 4], for bodies whose weight is elsewhere. */
#define SMALL_QUERY "\"query\":[[1,2,3,4],[5,6,7,8]],\"num_heads\":1"

/* {"id": "<unit repeated>", small query}: a string of nothing but one
 * escape, far over id's 256 characters (so invalid_value). */
static void body_escaped_id(attnd_buf_t *b, const char *unit) {
  attnd_buf_puts(b, "{\"id\":\"");
  for (size_t n = 0; n < WORST_BYTES; n += strlen(unit))
    attnd_buf_puts(b, unit);
  attnd_buf_puts(b, "\"," SMALL_QUERY "}");
}

/* {"<\\ repeated>": 1, small query}: a member name of nothing but escapes
 * (names are never lifted), so over max_json_structure_bytes. */
static void body_escaped_key(attnd_buf_t *b) {
  attnd_buf_puts(b, "{\"");
  for (size_t n = 0; n < WORST_BYTES; n += 2)
    attnd_buf_puts(b, "\\\\");
  attnd_buf_puts(b, "\":1," SMALL_QUERY "}");
}

/* A 1 MB query of numbers, then a bad num_heads: an error about another
 * member, which the fast path answers without jansson reading the
 * tensor. */
static void body_bad_after_tensor(attnd_buf_t *b) {
  attnd_buf_puts(b, "{\"query\":[");
  for (int r = 0; b->len < WORST_BYTES; r++) {
    attnd_buf_puts(b, r ? ",[" : "[");
    for (int c = 0; c < 64; c++)
      attnd_buf_puts(b, c ? ",0.123456" : "0.123456");
    attnd_buf_puts(b, "]");
  }
  attnd_buf_puts(b, "],\"num_heads\":\"8\"}");
}

/* A query [L, 512] of random floats as base64, every '/' sent as '\/' (as
 * PHP's json_encode does by default), or plain. */
static void body_base64(attnd_buf_t *b, int escape_slash) {
  const int64_t L = 384, E = 512;
  size_t n = (size_t)(L * E);
  float *x = bench_random_floats(n, 1, 7);
  size_t len = attnd_b64_encoded_len(n * sizeof *x);
  char *t = malloc(len);
  attnd_b64_encode(x, n * sizeof *x, t);
  char head[96];
  snprintf(head, sizeof head, "{\"query\":{\"shape\":[%lld,%lld],\"base64\":\"",
           (long long)L, (long long)E);
  attnd_buf_puts(b, head);
  for (size_t i = 0; i < len; i++) {
    if (escape_slash && t[i] == '/')
      attnd_buf_append(b, "\\", 1);
    attnd_buf_append(b, t + i, 1);
  }
  attnd_buf_puts(b, "\"},\"num_heads\":8}");
  free(t);
  free(x);
}

/* A query of arrays nested as deep as jansson accepts (the root, the
 * query's array and the nest: 2048 levels with the leaf), repeated to
 * about `bytes`: shape_mismatch (a tensor has at most 4 dimensions), or
 * payload_too_large over max_json_structure_bytes, as none of it is
 * tensor data. */
static void body_deep(attnd_buf_t *b, size_t bytes) {
  const int nest = JSON_PARSER_MAX_DEPTH - 3;
  attnd_buf_puts(b, "{\"num_heads\":1,\"query\":[");
  for (int k = 0; b->len + 2 * (size_t)nest + 8 < bytes; k++) {
    if (k)
      attnd_buf_puts(b, ",");
    for (int d = 0; d < nest; d++)
      attnd_buf_puts(b, "[");
    attnd_buf_puts(b, "1");
    for (int d = 0; d < nest; d++)
      attnd_buf_puts(b, "]");
  }
  attnd_buf_puts(b, "]}");
}

/* A query [rows, 16] whose every element is `digits` digits long: 0.ddd...
 * (a fraction), or with `integer`, a positive integer of 20 digits and more
 * (beyond int64, a finite float32 still). */
static void body_long_numbers(attnd_buf_t *b, int digits, int integer) {
  int per = digits + 1;
  int64_t rows = (int64_t)(WORST_BYTES / (size_t)per / 16);
  uint64_t s = 12345;
  char *num = malloc((size_t)digits + 3);
  char head[64];
  snprintf(head, sizeof head, "{\"num_heads\":1,\"query\":[");
  attnd_buf_puts(b, head);
  for (int64_t r = 0; r < rows; r++) {
    attnd_buf_puts(b, r ? ",[" : "[");
    for (int c = 0; c < 16; c++) {
      char *p = num;
      if (!integer) {
        *p++ = '0';
        *p++ = '.';
      }
      for (int i = 0; i < digits; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        *p++ = (char)('0' + (i == 0 && integer ? 1 + s % 9 : s % 10));
      }
      if (c)
        attnd_buf_puts(b, ",");
      attnd_buf_append(b, num, (size_t)(p - num));
    }
    attnd_buf_puts(b, "]");
  }
  attnd_buf_puts(b, "]}");
  free(num);
}

/* Times each worst case three ways: the whole decode (attnd_request_decode,
 * default limits), the bulk scanner alone, and jansson's json_loadb alone
 * (what the decode costs at least when the fast lane lifts nothing, and
 * jansson parses the whole body). Appends the rows to res. Returns the
 * number of bodies that decoded to another outcome than expected, or -1 if
 * the limits do not load. */
static int worst_cases(int reps, result_t *res, int *nres) {
  static attnd_config_t cfg;
  attnd_config_load_t how;
  char *argv[] = {"attnd", NULL}, *envp[] = {NULL}, msg[256];
  if (attnd_config_load(&cfg, &how, 1, argv, envp, 1, msg, sizeof msg) < 0) {
    fprintf(stderr, "codec-bench: %s\n", msg);
    return -1;
  }
  worst_t w[] = {
      {"id of \\\\ escapes", {0}, "invalid_value"},
      {"id of \\/ escapes", {0}, "invalid_value"},
      {"id of \\u00e9", {0}, "invalid_value"},
      {"base64 with \\/", {0}, "ok"},
      {"base64 plain", {0}, "ok"},
      {"nesting, 1 MB", {0}, "payload_too_large"},
      {"nesting, 255 KB", {0}, "shape_mismatch"},
      {"key of \\\\ escapes", {0}, "payload_too_large"},
      {"bad member, 1 MB query", {0}, "invalid_type"},
      {"1000-digit numbers", {0}, "ok"},
      {"int > int64", {0}, "ok"},
  };
  int nw = (int)(sizeof w / sizeof w[0]), wrong = 0;
  for (int i = 0; i < nw; i++)
    attnd_buf_init(&w[i].body);
  body_escaped_id(&w[0].body, "\\\\");
  body_escaped_id(&w[1].body, "\\/");
  body_escaped_id(&w[2].body, "\\u00e9");
  body_base64(&w[3].body, 1);
  body_base64(&w[4].body, 0);
  body_deep(&w[5].body, WORST_BYTES);
  body_deep(&w[6].body, 255 << 10);
  body_escaped_key(&w[7].body);
  body_bad_after_tensor(&w[8].body);
  body_long_numbers(&w[9].body, 1000, 0);
  body_long_numbers(&w[10].body, 20, 1);
  for (int i = 0; i < nw; i++) {
    const attnd_buf_t *b = &w[i].body;
    double mb = b->len / 1e6;
    const char *got = "";
    double ms = MEDIAN_MS(reps, {
      attnd_request_t *req = NULL;
      attnd_error_t e;
      int r = attnd_request_decode(b->data, b->len, &cfg, NULL, &req, &e);
      got = r == 0 ? "ok" : attnd_error_name(e.code);
      attnd_request_free(req);
    });
    if (strcmp(got, w[i].expect) != 0) {
      fprintf(stderr, "codec-bench: %s decoded to %s, expected %s\n", w[i].name,
              got, w[i].expect);
      wrong++;
    }
    res[(*nres)++] = (result_t){w[i].name, "decode", ms, mb, 0};
    ms = MEDIAN_MS(reps, {
      attnd_bulk_set_t set;
      attnd_buf_t sk;
      attnd_bulk_set_init(&set, 1);
      attnd_buf_init(&sk);
      attnd_bulk_scan(b->data, b->len, 64, 1024, &set, &sk);
      attnd_bulk_set_free(&set);
      attnd_buf_free(&sk);
    });
    res[(*nres)++] = (result_t){w[i].name, "scan", ms, mb, 0};
    ms = MEDIAN_MS(
        reps, { /* with integers widened, as the decoder does */
                json_error_t e;
                json_t *j = json_loadb(b->data, b->len, 0, &e);
                if (!j && json_error_code(&e) == json_error_numeric_overflow) {
                  attnd_buf_t wide;
                  attnd_buf_init(&wide);
                  if (attnd_json_widen_numbers(b->data, b->len, &wide) > 0)
                    j = json_loadb(wide.data, wide.len, 0, &e);
                  attnd_buf_free(&wide);
                }
                json_decref(j);
        });
    res[(*nres)++] = (result_t){w[i].name, "jansson", ms, mb, 0};
  }
  for (int i = 0; i < nw; i++)
    attnd_buf_free(&w[i].body);
  return wrong;
}

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
  result_t res[48];
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

  /* float16 and bfloat16 (codec/half.c): packing a reply's floats into
   * two bytes each, rounding them in place (return.dtype), and the base64
   * of a half tensor as /v1 writes it; the text is the 2-byte data. */
  static const attnd_dtype_t halves[] = {ATTND_DTYPE_F16, ATTND_DTYPE_BF16};
  static const char *const half_pack[] = {"f16 pack", "bf16 pack"},
                           *const half_round[] = {"f16 round", "bf16 round"},
                           *const half_b64[] = {"f16 base64", "bf16 base64"};
  uint16_t *h = malloc(n * sizeof *h);
  for (int k = 0; k < 2; k++) {
    ms = MEDIAN_MS(reps, attnd_dtype_pack(halves[k], x, n, h));
    res[nres++] = (result_t){half_pack[k], "attnd", ms, n * 2 / 1e6, bin};
    ms = MEDIAN_MS(reps, {
      memcpy(y, x, n * sizeof *y);
      attnd_dtype_round(halves[k], y, n);
    });
    res[nres++] = (result_t){half_round[k], "attnd", ms, n * 2 / 1e6, bin};
    ms = MEDIAN_MS(reps, {
      text.len = 0;
      attnd_buf_tensor_as(&text, ATTND_FORM_BASE64, halves[k], x, 2, dim);
    });
    res[nres++] = (result_t){half_b64[k], "attnd", ms, text.len / 1e6, bin};
  }
  free(h);

  int first_worst = nres;
  int wrong = worst_cases(reps, res, &nres);
  if (wrong < 0)
    return 1;

  printf("codec-bench: one 4096 x 512 float32 tensor, median of %d runs\n",
         reps);
  printf("%-14s %-8s %9s %9s %12s %12s\n", "operation", "impl", "text_MB",
         "median_ms", "text_MB/s", "float_MB/s");
  FILE *csv = fopen(csv_path, "w");
  if (csv)
    fprintf(csv, "operation,impl,text_mb,median_ms,text_mb_s,float_mb_s\n");
  int slow = 0;
  for (int i = 0; i < nres; i++) {
    result_t *r = &res[i];
    double rate = r->text_mb / r->ms * 1e3;
    if (i < first_worst) {
      printf("%-14s %-8s %9.1f %9.2f %12.0f %12.0f\n", r->what, r->impl,
             r->text_mb, r->ms, rate, r->bin_mb / r->ms * 1e3);
    } else {
      if (i == first_worst)
        printf("\nworst cases: MB/s of request body (floor %.0f for decode "
               "and scan;\njansson: json_loadb alone, for reference)\n"
               "%-22s %-8s %9s %9s %12s\n",
               WORST_MIN_MB_S, "body", "path", "body_MB", "median_ms", "MB/s");
      int under = strcmp(r->impl, "jansson") != 0 && rate < WORST_MIN_MB_S;
      slow += under;
      printf("%-22s %-8s %9.1f %9.2f %12.0f%s\n", r->what, r->impl, r->text_mb,
             r->ms, rate, under ? "  under the floor" : "");
    }
    if (csv)
      fprintf(csv, "\"%s\",%s,%.2f,%.3f,%.1f,%.1f\n", r->what, r->impl,
              r->text_mb, r->ms, rate, r->bin_mb / r->ms * 1e3);
  }
  if (csv) {
    fclose(csv);
    printf("CSV: %s\n", csv_path);
  }
  if (slow)
    printf("codec-bench: %d worst-case rates under %.0f MB/s\n", slow,
           WORST_MIN_MB_S);
  attnd_buf_free(&text);
  free(b64);
  free(x);
  free(y);
  return wrong ? 1 : 0;
}
