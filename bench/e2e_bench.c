/* bench/e2e_bench.c: a whole request through a real attnd, per encoding.
 *
 * Starts build/attnd with one worker and one thread per request, and sends
 * L = 4096, E = 512, H = 8 causal self-attention with inline projections
 * (all four E x E weights), once with every tensor in base64 and once as
 * nested JSON arrays, replies in the same form; then the same weights as a
 * resident layer (written as a torch_mha safetensors file, loaded with
 * --layers), with only the query in base64; then the first request again
 * by the Open Inference Protocol with Triton's binary tensor data (the
 * tensors' raw float32 bytes after the JSON, the output the same way). For
 * each it reports the medians of the server's own timings (its
 * Server-Timing header): total_ms (arrival to the start of the reply) and
 * compute_ms (the attention), their ratio, the decode and encode stages,
 * and the client's wall time; and the binary request's ingest rate, its
 * body's bytes over its decode time. Last, the load rate: attnd
 * started on an E = 4096 layer in BF16 (134 MB), its layers_loaded line,
 * also written beside the CSV as <csv>-load.csv.
 * Starts the server and talks to it with bench/server.h: no test code, no
 * Check.
 *
 * usage: e2e-bench [--attnd PATH] [--csv FILE] [--reps N] [--len L] */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "codec/buf.h"
#include "model/safetensors.h"
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

/* The time and bytes of attnd's load of a BF16 layer of width E (from its
 * layers_loaded line): prints the rate, and writes it to csv_path. */
static int load_rate(const char *attnd, int64_t E, const char *csv_path) {
  const char *path = "build/bench/e2e-load.safetensors";
  float *w[4];
  for (int i = 0; i < 4; i++)
    w[i] = bench_random_floats((size_t)(E * E), 0.02f, 20 + (uint64_t)i);
  int r = bench_write_layer(path, E, 32, w, ATTND_ST_BF16);
  for (int i = 0; i < 4; i++)
    free(w[i]);
  if (r < 0)
    return 1;
  bench_server_t srv;
  const char *const args[] = {"--layers", path, NULL};
  if (bench_server_start(&srv, attnd, args) < 0)
    return fprintf(stderr, "cannot start attnd:\n%s\n", srv.log), 1;
  const char *line = strstr(srv.log, "\"layers_loaded\"");
  double bytes = 0, seconds = 0;
  if (line &&
      sscanf(strstr(line, "\"bytes\":"), "\"bytes\":%lf", &bytes) == 1 &&
      sscanf(strstr(line, "\"seconds\":"), "\"seconds\":%lf", &seconds) == 1) {
    printf("load: E=%lld BF16 layer, %.0f MB in the file, %.0f MB of float32 "
           "held, in %.3f s: %.2f GB/s of file weights\n",
           (long long)E, bytes / 2 / 1e6, bytes / 1e6, seconds,
           bytes / 2 / 1e9 / seconds);
    FILE *csv = fopen(csv_path, "w");
    if (csv) {
      fprintf(csv,
              "E,file_mb,held_mb,seconds,file_gb_s\n%lld,%.1f,%.1f,%.4f,"
              "%.3f\n",
              (long long)E, bytes / 2 / 1e6, bytes / 1e6, seconds,
              bytes / 2 / 1e9 / seconds);
      fclose(csv);
      printf("CSV: %s\n", csv_path);
    }
  } else {
    fprintf(stderr, "no layers_loaded line:\n%s\n", srv.log);
  }
  bench_server_stop(&srv, 30);
  remove(path);
  return 0;
}

/* The request body, with every tensor in one form; with a layer, only the
 * query (base64). */
/* The same request as build_body's first, by the Open Inference Protocol
 * with binary data: the JSON (its length in *json_len), then the query's
 * and the four weights' float32 bytes. */
static void build_oip(attnd_buf_t *b, size_t *json_len, int64_t L, int64_t E,
                      int64_t H, const float *x, float *const w[4]) {
  static const char *const names[4] = {"q_weight", "k_weight", "v_weight",
                                       "o_weight"};
  attnd_buf_printf(b,
                   "{\"inputs\":[{\"name\":\"query\",\"shape\":[%lld,%lld],"
                   "\"datatype\":\"FP32\",\"parameters\":{"
                   "\"binary_data_size\":%lld}}",
                   (long long)L, (long long)E, (long long)(L * E * 4));
  for (int i = 0; i < 4; i++)
    attnd_buf_printf(b,
                     ",{\"name\":\"%s\",\"shape\":[%lld,%lld],\"datatype\":"
                     "\"FP32\",\"parameters\":{\"binary_data_size\":%lld}}",
                     names[i], (long long)E, (long long)E,
                     (long long)(E * E * 4));
  attnd_buf_printf(b,
                   "],\"parameters\":{\"num_heads\":%lld,\"causal\":true,"
                   "\"binary_data_output\":true}}",
                   (long long)H);
  *json_len = b->len;
  attnd_buf_append(b, (const char *)x, (size_t)(L * E) * sizeof(float));
  for (int i = 0; i < 4; i++)
    attnd_buf_append(b, (const char *)w[i], (size_t)(E * E) * sizeof(float));
}

/* The duration of `stage` in a Server-Timing value ("decode;dur=1.5, ..."),
 * or -1. */
static double timing(const char *st, const char *stage) {
  char key[32];
  snprintf(key, sizeof key, "%s;dur=", stage);
  const char *p = strstr(st, key);
  return p ? strtod(p + strlen(key), NULL) : -1;
}

static void build_body(attnd_buf_t *b, int64_t L, int64_t E, int64_t H,
                       const float *x, float *const w[4], int base64,
                       int layer) {
  static const char *const names[4] = {"q_weight", "k_weight", "v_weight",
                                       "o_weight"};
  attnd_buf_puts(b, layer ? "{\"layer\":\"bench\",\"query\":" : "{\"query\":");
  put_tensor(b, x, L, E, base64);
  if (layer) {
    attnd_buf_puts(b, "}");
    return;
  }
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
  float *x = bench_random_floats((size_t)(L * E), 1, 1), *w[4];
  for (int i = 0; i < 4; i++)
    w[i] = bench_random_floats((size_t)(E * E), 0.044f, 2 + (uint64_t)i);
  const char *layer = "build/bench/e2e-layer.safetensors";
  if (bench_write_layer(layer, E, H, w, ATTND_ST_F32) < 0)
    return 1;
  bench_server_t srv;
  const char *const args[] = {"--workers",
                              "1",
                              "--threads-per-request",
                              "1",
                              "--max-body-bytes",
                              "1G",
                              "--max-response-bytes",
                              "1G",
                              "--layers",
                              layer,
                              NULL};
  if (bench_server_start(&srv, attnd, args) < 0)
    return fprintf(stderr, "cannot start attnd:\n%s\n", srv.log), 1;
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
  double ingest = 0;
  static const char *const forms[] = {"base64", "json", "layer", "oip"};
  for (int form = 0; form < 4; form++) {
    int base64 = form != 1, by_layer = form == 2, oip = form == 3;
    attnd_buf_t body;
    attnd_buf_init(&body);
    char headers[128] = "Content-Type: application/json\r\n";
    size_t json_len = 0;
    if (oip) {
      build_oip(&body, &json_len, L, E, H, x, w);
      snprintf(headers, sizeof headers,
               "Inference-Header-Content-Length: %zu\r\n", json_len);
    } else {
      build_body(&body, L, E, H, x, w, base64, by_layer);
    }
    const char *path = oip ? "/v2/models/attention/infer" : "/v1/attention";
    double total[64], compute[64], dec[64], enc[64], wall[64];
    size_t reply = 0;
    bench_client_t cl;
    bench_client_init(&cl, srv.port);
    for (int r = -1; r < reps; r++) { /* r = -1 warms up */
      bench_reply_t resp;
      double t0 = bench_now_ms();
      int ok = bench_client_post(&cl, path, headers, body.data, body.len,
                                 &resp) == 0 &&
               resp.status == 200 && timing(resp.server_timing, "total") >= 0;
      double t1 = bench_now_ms();
      if (!ok) {
        fprintf(stderr, "request failed: status %d %s%.300s\n", resp.status,
                resp.error, resp.body ? resp.body : "");
        rc = 1;
      } else if (r >= 0) {
        total[r] = timing(resp.server_timing, "total");
        compute[r] = timing(resp.server_timing, "compute");
        dec[r] = timing(resp.server_timing, "decode");
        enc[r] = timing(resp.server_timing, "encode");
        wall[r] = t1 - t0;
        reply = resp.body_len;
      }
      bench_reply_free(&resp);
      if (rc)
        break;
    }
    bench_client_free(&cl);
    if (rc == 0) {
      double tm = bench_median(total, reps), cm = bench_median(compute, reps);
      printf("%-8s %8.1f %9.1f %10.1f %10.1f %8.3f %9.1f %9.1f %10.1f\n",
             forms[form], body.len / 1e6, reply / 1e6, tm, cm, tm / cm,
             bench_median(dec, reps), bench_median(enc, reps),
             bench_median(wall, reps));
      if (csv)
        fprintf(csv, "%s,%.2f,%.2f,%.3f,%.3f,%.4f,%.3f,%.3f,%.3f\n",
                forms[form], body.len / 1e6, reply / 1e6, tm, cm, tm / cm,
                bench_median(dec, reps), bench_median(enc, reps),
                bench_median(wall, reps));
      if (oip)
        ingest = body.len / 1e6 / bench_median(dec, reps);
    }
    attnd_buf_free(&body);
  }
  if (rc == 0)
    printf("oip binary ingest: %.2f GB/s (the body's bytes over its decode "
           "time)\n",
           ingest);
  if (csv) {
    fclose(csv);
    printf("CSV: %s\n", csv_path);
  }
  bench_server_stop(&srv, 30);
  remove(layer);
  for (int i = 0; i < 4; i++)
    free(w[i]);
  free(x);
  if (rc)
    return rc;
  char lcsv[512];
  size_t k = strlen(csv_path);
  int dot = k > 4 && strcmp(csv_path + k - 4, ".csv") == 0;
  snprintf(lcsv, sizeof lcsv, "%.*s-load.csv", (int)(dot ? k - 4 : k),
           csv_path);
  return load_rate(attnd, 4096, lcsv);
}
