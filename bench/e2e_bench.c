/* bench/e2e_bench.c: a whole request through a real attnd, per encoding.
 *
 * Starts build/attnd with one worker and one thread per request, and sends
 * L = 4096, E = 512, H = 8 causal self-attention with inline projections
 * (all four E x E weights), once with every tensor in base64 and once as
 * nested JSON arrays, replies in the same form. For each it reports the
 * medians of the server's own metrics, total_ms (arrival to the start of
 * the reply) and compute_ms (the attention), their ratio, the decode and
 * encode stages, and the client's wall time. Starts the server and talks
 * to it with bench/server.h: no test code, no Check.
 *
 * usage: e2e-bench [--attnd PATH] [--csv FILE] [--reps N] [--len L] */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "codec/buf.h"
#include "server.h"

static void put_tensor(attnd_buf_t *b, const float *x, int64_t rows,
                       int64_t cols, int base64) {
  int64_t dim[2] = {rows, cols};
  size_t n = (size_t)(rows * cols);
  if (!base64) {
    attnd_buf_floats(b, x, n, 2, dim);
    return;
  }
  char head[96];
  snprintf(head, sizeof head,
           "{\"shape\":[%lld,%lld],\"dtype\":\"float32\",\"base64\":\"",
           (long long)rows, (long long)cols);
  attnd_buf_puts(b, head);
  attnd_buf_base64(b, x, n * sizeof *x);
  attnd_buf_puts(b, "\"}");
}

/* The request body, with every tensor in one form. */
static void build_body(attnd_buf_t *b, int64_t L, int64_t E, int64_t H,
                       const float *x, float *const w[4], int base64) {
  static const char *const names[4] = {"q_weight", "k_weight", "v_weight",
                                       "o_weight"};
  attnd_buf_puts(b, "{\"query\":");
  put_tensor(b, x, L, E, base64);
  char mid[96];
  snprintf(mid, sizeof mid,
           ",\"num_heads\":%lld,\"mask\":{\"causal\":true},\"projections\":{",
           (long long)H);
  attnd_buf_puts(b, mid);
  for (int i = 0; i < 4; i++) {
    attnd_buf_puts(b, i ? ",\"" : "\"");
    attnd_buf_puts(b, names[i]);
    attnd_buf_puts(b, "\":");
    put_tensor(b, w[i], E, E, base64);
  }
  attnd_buf_puts(b, "}}");
}

int main(int argc, char **argv) {
  int reps = 5;
  int64_t L = 4096, E = 512, H = 8;
  const char *csv_path = "build/bench/e2e.csv", *attnd = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--attnd") == 0 && i + 1 < argc)
      attnd = argv[++i];
    else if (strcmp(argv[i], "--csv") == 0 && i + 1 < argc)
      csv_path = argv[++i];
    else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
      reps = atoi(argv[++i]);
    else if (strcmp(argv[i], "--len") == 0 && i + 1 < argc)
      L = atoll(argv[++i]);
    else {
      fprintf(stderr,
              "usage: %s [--attnd PATH] [--csv FILE] [--reps N] [--len L]\n",
              argv[0]);
      return 2;
    }
  }
  if (reps < 1 || reps > 64 || L < 1)
    return fprintf(stderr, "bad --reps or --len\n"), 2;
  bench_server_t srv;
  const char *const args[] = {"--workers",
                              "1",
                              "--threads-per-request",
                              "1",
                              "--max-body-bytes",
                              "1G",
                              "--max-response-bytes",
                              "1G",
                              NULL};
  if (bench_server_start(&srv, attnd, args) < 0)
    return fprintf(stderr, "cannot start attnd:\n%s\n", srv.log), 1;

  float *x = bench_random_floats((size_t)(L * E), 1, 1), *w[4];
  for (int i = 0; i < 4; i++)
    w[i] = bench_random_floats((size_t)(E * E), 0.044f, 2 + (uint64_t)i);
  printf("e2e-bench: attnd, 1 worker x 1 thread; L=%lld E=%lld H=%lld causal, "
         "inline projections; medians of %d requests\n",
         (long long)L, (long long)E, (long long)H, reps);
  printf("%-8s %8s %9s %10s %10s %8s %9s %9s %10s\n", "form", "body_MB",
         "reply_MB", "total_ms", "compute_ms", "ratio", "decode_ms",
         "encode_ms", "client_ms");
  FILE *csv = fopen(csv_path, "w");
  if (csv)
    fprintf(csv, "form,body_mb,reply_mb,total_ms,compute_ms,ratio,decode_ms,"
                 "encode_ms,client_ms\n");
  int rc = 0;
  for (int base64 = 1; base64 >= 0; base64--) {
    attnd_buf_t body;
    attnd_buf_init(&body);
    build_body(&body, L, E, H, x, w, base64);
    double total[64], compute[64], dec[64], enc[64], wall[64];
    size_t reply = 0;
    bench_client_t cl;
    bench_client_init(&cl, srv.port);
    for (int r = -1; r < reps; r++) { /* r = -1 warms up */
      bench_reply_t resp;
      double t0 = bench_now_ms();
      int ok = bench_client_post(&cl, "/v1/attention", "application/json",
                                 body.data, body.len, &resp) == 0 &&
               resp.status == 200;
      double t1 = bench_now_ms();
      json_t *v = ok ? json_loadb(resp.body, resp.body_len, 0, NULL) : NULL;
      json_t *m = json_object_get(v, "metrics");
      if (m == NULL) {
        fprintf(stderr, "request failed: status %d %s%.300s\n", resp.status,
                resp.error, resp.body ? resp.body : "");
        rc = 1;
      } else if (r >= 0) {
        json_t *st = json_object_get(m, "stages_ms");
        total[r] = json_number_value(json_object_get(m, "total_ms"));
        compute[r] = json_number_value(json_object_get(m, "compute_ms"));
        dec[r] = json_number_value(json_object_get(st, "decode"));
        enc[r] = json_number_value(json_object_get(st, "encode"));
        wall[r] = t1 - t0;
        reply = resp.body_len;
      }
      json_decref(v);
      bench_reply_free(&resp);
      if (rc)
        break;
    }
    bench_client_free(&cl);
    if (rc == 0) {
      double tm = bench_median(total, reps), cm = bench_median(compute, reps);
      printf("%-8s %8.1f %9.1f %10.1f %10.1f %8.3f %9.1f %9.1f %10.1f\n",
             base64 ? "base64" : "json", body.len / 1e6, reply / 1e6, tm, cm,
             tm / cm, bench_median(dec, reps), bench_median(enc, reps),
             bench_median(wall, reps));
      if (csv)
        fprintf(csv, "%s,%.2f,%.2f,%.3f,%.3f,%.4f,%.3f,%.3f,%.3f\n",
                base64 ? "base64" : "json", body.len / 1e6, reply / 1e6, tm, cm,
                tm / cm, bench_median(dec, reps), bench_median(enc, reps),
                bench_median(wall, reps));
    }
    attnd_buf_free(&body);
  }
  if (csv) {
    fclose(csv);
    printf("CSV: %s\n", csv_path);
  }
  bench_server_stop(&srv, 30);
  for (int i = 0; i < 4; i++)
    free(w[i]);
  free(x);
  return rc;
}
