/* bench/decode_bench.c: decoding with KV-cache sessions against resending
 * the history, through a real attnd, in one run.
 *
 * attnd holds one layer (E = 512, H = 8, torch_mha, causal; two workers of
 * one thread). For each context length L: N sessions (64) are created and
 * given a prefill of L tokens, then decode S steps of one token each, the
 * sessions shared among T client threads (8), so that the server always
 * has steps waiting. Against that, the same steps sent as /v1 requests
 * that resend the history: the new token as query, and all L + 1 tokens'
 * hidden states as key and value, so that every step projects them again.
 * Reported: aggregate tokens/s both ways and their ratio, and the rate at
 * which a step's attention stage reads the session's cache (its keys and
 * values, L·Hkv·(Dh + Dv) floats, over the server's attention_ms, a
 * batch's divided among its steps), beside
 * this machine's memcpy rate on buffers far larger than its caches,
 * measured in the same run on one thread, as a step is computed.
 *
 * Then batching: N sessions at length B (128), each stepped S2 times (32)
 * by a client thread of its own, so that N steps are ready at once;
 * against one attnd with batching (the default batch_window_us) and one
 * without (batch_window_us 0), one after the other: aggregate tokens/s
 * both ways, their ratio, the mean batch the steps were computed in (their
 * metrics.batch), and the CPU time a step took in the server and in this
 * client. Beside them, the core alone: n steps as one attn_forward call
 * against n calls, for n = 4, 16 and N, the bound of the server's ratio.
 *
 * usage: decode-bench [--attnd PATH] [--csv FILE] [--lengths L,...]
 *                     [--sessions N] [--steps S] [--threads T]
 *                     [--batch-length B] (0: no batching rows)
 *                     [--batch-steps S2] (32: steps of the batching rows) */
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attn/attn.h"
#include "bench.h"
#include "codec/buf.h"
#include "model/safetensors.h"
#include "server.h"

enum { E = 512, H = 8, MAX_SESSIONS = 256, MAX_STEPS = 4096 };

/* A tensor [rows, E] of x, as base64. */
static void put_rows(attnd_buf_t *b, const float *x, int64_t rows) {
  attnd_buf_printf(b,
                   "{\"shape\":[%lld,%d],\"dtype\":\"float32\",\"base64\":\"",
                   (long long)rows, E);
  attnd_buf_base64(b, x, (size_t)(rows * E) * sizeof *x);
  attnd_buf_puts(b, "\"}");
}

typedef struct bench {
  int port;
  int64_t L;
  int sessions, steps, threads;
  char ids[MAX_SESSIONS][40];
  const float *tokens; /* [sessions, L + steps, E] hidden states */
  /* per thread: medians in, results out */
  double attention_ms[MAX_SESSIONS * 64];
  int n_attention;
  double batch_sum; /* of the steps' metrics.batch */
  pthread_mutex_t mu;
  int failed;
} bench_t;

static const float *token(const bench_t *b, int s, int64_t t) {
  return b->tokens + ((int64_t)s * (b->L + b->steps) + t) * E;
}

/* POSTs body to path; the reply's JSON in *v (a new reference), or -1. */
static int post(bench_client_t *c, const char *path, const attnd_buf_t *body,
                json_t **v) {
  bench_reply_t r;
  int ok = bench_client_post(c, path, "Content-Type: application/json\r\n",
                             body->data, body->len, &r) == 0 &&
           (r.status == 200 || r.status == 201);
  *v = ok ? json_loadb(r.body, r.body_len, 0, NULL) : NULL;
  if (*v == NULL)
    fprintf(stderr, "decode-bench: %s: status %d %s%.200s\n", path, r.status,
            r.error, r.body ? r.body : "");
  bench_reply_free(&r);
  return *v ? 0 : -1;
}

typedef struct job {
  bench_t *b;
  int t;      /* the thread */
  int resend; /* the /v1 way */
  int prefill;
} job_t;

/* Thread t's share of the sessions: s = t, t + T, ... */
static void *run(void *arg) {
  job_t *j = arg;
  bench_t *b = j->b;
  bench_client_t c;
  bench_client_init(&c, b->port);
  attnd_buf_t body;
  attnd_buf_init(&body);
  int rounds = j->prefill ? 1 : b->steps;
  for (int k = 0; k < rounds && !b->failed; k++)
    for (int s = j->t; s < b->sessions && !b->failed; s += b->threads) {
      int64_t at = b->L + k; /* the new token's position */
      char path[96];
      body.len = 0;
      if (j->resend) {
        snprintf(path, sizeof path, "/v1/attention");
        attnd_buf_puts(&body, "{\"layer\":\"bench\",\"query\":");
        put_rows(&body, token(b, s, at), 1);
        attnd_buf_puts(&body, ",\"key\":");
        put_rows(&body, token(b, s, 0), at + 1);
        attnd_buf_puts(&body, ",\"return\":{\"encoding\":\"base64\"}}");
      } else {
        snprintf(path, sizeof path, "/v1/sessions/%s/attention", b->ids[s]);
        attnd_buf_puts(&body, "{\"query\":");
        put_rows(&body, token(b, s, j->prefill ? 0 : at),
                 j->prefill ? b->L : 1);
        attnd_buf_printf(&body,
                         ",\"expected_length\":%lld,\"return\":{\"encoding\":"
                         "\"base64\"}}",
                         (long long)(j->prefill ? 0 : at));
      }
      json_t *v;
      if (post(&c, path, &body, &v) < 0) {
        b->failed = 1;
        break;
      }
      const json_t *m = json_object_get(v, "metrics");
      json_int_t in_batch = json_integer_value(json_object_get(m, "batch"));
      /* a batch's attention stage is its steps', one after another */
      double att = json_number_value(json_object_get(
                       json_object_get(m, "stages_ms"), "attention")) /
                   (double)(in_batch > 0 ? in_batch : 1);
      if (!j->prefill && !j->resend) {
        pthread_mutex_lock(&b->mu);
        if (b->n_attention < (int)(sizeof b->attention_ms / sizeof(double)))
          b->attention_ms[b->n_attention++] = att;
        b->batch_sum += (double)in_batch;
        pthread_mutex_unlock(&b->mu);
      }
      json_decref(v);
    }
  attnd_buf_free(&body);
  bench_client_free(&c);
  return NULL;
}

/* Runs every thread's share of one phase; its wall time in ms. */
static double phase(bench_t *b, int resend, int prefill) {
  pthread_t th[MAX_SESSIONS];
  job_t jobs[MAX_SESSIONS];
  double t0 = bench_now_ms();
  for (int t = 0; t < b->threads; t++) {
    jobs[t] = (job_t){b, t, resend, prefill};
    pthread_create(&th[t], NULL, run, &jobs[t]);
  }
  for (int t = 0; t < b->threads; t++)
    pthread_join(th[t], NULL);
  return bench_now_ms() - t0;
}

/* memcpy's rate on one thread, GB/s of bytes copied, over buffers of
 * `bytes` (far past the caches), the median of 5 after a warm-up. */
static double memcpy_rate(size_t bytes) {
  char *a = malloc(bytes), *b = malloc(bytes);
  if (!a || !b)
    return free(a), free(b), 0;
  memset(a, 1, bytes);
  memset(b, 2, bytes);
  double ms[5];
  for (int r = -1; r < 5; r++) {
    double t0 = bench_now_ms();
    memcpy(r % 2 ? a : b, r % 2 ? b : a, bytes);
    if (r >= 0)
      ms[r] = bench_now_ms() - t0;
  }
  free(a);
  free(b);
  return (double)bytes / 1e6 / bench_median(ms, 5);
}

/* Creates b->sessions sessions of the bench layer: 0, or -1. */
static int open_sessions(bench_t *b) {
  bench_client_t c;
  bench_client_init(&c, b->port);
  attnd_buf_t body;
  attnd_buf_init(&body);
  attnd_buf_puts(&body, "{\"layer\":\"bench\"}");
  int rc = 0;
  for (int s = 0; s < b->sessions && !rc; s++) {
    json_t *v;
    if (post(&c, "/v1/sessions", &body, &v) < 0) {
      rc = -1;
      break;
    }
    snprintf(b->ids[s], sizeof b->ids[s], "%s",
             json_string_value(json_object_get(v, "session")));
    json_decref(v);
  }
  attnd_buf_free(&body);
  bench_client_free(&c);
  return rc;
}

/* Deletes them, giving their pages back for the next length. */
static void close_sessions(bench_t *b) {
  bench_client_t c;
  bench_client_init(&c, b->port);
  for (int s = 0; s < b->sessions; s++) {
    char path[96];
    snprintf(path, sizeof path, "/v1/sessions/%s", b->ids[s]);
    bench_reply_t r;
    bench_client_send(&c, "DELETE", path, "", NULL, 0, &r);
    bench_reply_free(&r);
  }
  bench_client_free(&c);
}

/* attnd with the bench layer and a pool of kv bytes, and batch_window_us
 * `window` (NULL: its default). */
static int start_attnd(bench_server_t *srv, const char *attnd,
                       const char *layer, int64_t kv, const char *window) {
  char kvs[32], mem[32];
  snprintf(kvs, sizeof kvs, "%lld", (long long)kv);
  snprintf(mem, sizeof mem, "%lld", (long long)(kv + ((int64_t)4 << 30)));
  const char *args[] = {"--workers",
                        "2",
                        "--threads-per-request",
                        "1",
                        "--max-body-bytes",
                        "1G",
                        "--kv-cache-bytes",
                        kvs,
                        "--max-memory-bytes",
                        mem,
                        "--queue-depth",
                        "1024",
                        "--layers",
                        layer,
                        window ? "--batch-window-us" : NULL,
                        window,
                        NULL};
  if (bench_server_start(srv, attnd, args) < 0) {
    fprintf(stderr, "cannot start attnd:\n%s\n", srv->log);
    return -1;
  }
  return 0;
}

/* The pool for n sessions of L tokens and `steps` more, with room. */
static int64_t pool_bytes(int n, int64_t L, int steps) {
  int64_t page = (int64_t)attn_kv_page_floats(H, E / H, E / H) * 4 + 128;
  return (int64_t)n * ((L + steps + 63) / 64 * page + 8192) * 5 / 4;
}

/* CPU seconds (user and system) process pid has used, from /proc; 0 when
 * it cannot be read. */
static double cpu_s(pid_t pid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return 0;
  char buf[1024];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  const char *p = strrchr(buf, ')'); /* after the command's name */
  unsigned long long ut = 0, st = 0;
  if (p == NULL || sscanf(p + 2,
                          "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u "
                          "%llu %llu",
                          &ut, &st) != 2)
    return 0;
  return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* One decode phase of b's sessions at length b->L, against a fresh attnd
 * with batch_window_us `window`: tokens/s, the mean batch in *batch, and
 * the CPU time per step of the server and of this client in *srv_us and
 * *cli_us. 0, or -1. */
static int batch_run(bench_t *b, const char *attnd, const char *layer,
                     const char *window, double *tok, double *batch,
                     double *srv_us, double *cli_us) {
  bench_server_t srv;
  if (start_attnd(&srv, attnd, layer, pool_bytes(b->sessions, b->L, b->steps),
                  window) < 0)
    return -1;
  b->port = srv.port;
  b->n_attention = 0;
  b->batch_sum = 0;
  int rc = open_sessions(b);
  if (rc == 0)
    phase(b, 0, 1);
  double s0 = cpu_s(srv.pid), c0 = cpu_s(getpid());
  double dec = rc || b->failed ? 0 : phase(b, 0, 0);
  double steps = (double)b->sessions * b->steps;
  *srv_us = (cpu_s(srv.pid) - s0) / steps * 1e6;
  *cli_us = (cpu_s(getpid()) - c0) / steps * 1e6;
  if (b->failed)
    rc = -1;
  *tok = rc ? 0 : steps / (dec / 1000.0);
  *batch = b->n_attention ? b->batch_sum / b->n_attention : 0;
  bench_server_stop(&srv, 30);
  return rc;
}

/* Grows *ws (64-byte aligned) to at least bytes: 0, or -1. */
static int grow_ws(void **ws, size_t *cap, size_t bytes) {
  if (bytes <= *cap)
    return 0;
  free(*ws);
  *cap = (bytes + 63) / 64 * 64;
  *ws = aligned_alloc(64, *cap);
  return *ws ? 0 : -1;
}

/* The core's side of batching, without the server: n steps of one token
 * at `past` cached tokens (E, H, weights w), as one attn_forward call of
 * batch n against n calls of batch 1, one thread, the median of 5 each.
 * Each repetition is the sessions' next step, one key further, as the
 * server's are: repeating the step at `past` itself would, at a page's
 * first slot (past = 128), zero the rest of that page in every call, which
 * a session does once in 64 steps. Returns the ratio; *one and *each get
 * ms per step. */
static double core_batching(float *const *w, int n, int64_t past, double *one,
                            double *each) {
  *one = *each = 0;
  size_t pf = (size_t)attn_kv_page_floats(H, E / H, E / H);
  enum { REPS = 5 };
  int64_t npages = (past + 1 + REPS + 63) / 64; /* a warm-up, then REPS */
  float **pool = malloc((size_t)(n * npages) * sizeof *pool);
  float *const **tables = malloc((size_t)n * sizeof *tables);
  int64_t *pasts = malloc((size_t)n * sizeof *pasts);
  float *absmax = malloc((size_t)n * sizeof *absmax);
  float *q = bench_random_floats((size_t)n * E, 1, 5);
  float *out = malloc((size_t)n * E * sizeof *out);
  for (int i = 0; i < n * npages; i++) { /* cached keys, values: random */
    float *x = bench_random_floats(pf, 1, 11 + (uint64_t)i);
    pool[i] = aligned_alloc(64, (pf * sizeof(float) + 63) / 64 * 64);
    memcpy(pool[i], x, pf * sizeof(float));
    free(x);
  }
  for (int i = 0; i < n; i++) {
    tables[i] = pool + i * npages;
    absmax[i] = 1;
  }
  double ms[2] = {0, 0};
  void *ws = NULL; /* kept from call to call, as a worker keeps its own */
  size_t ws_cap = 0;
  for (int mode = 0; mode < 2; mode++) { /* 0: one call of n; 1: n of 1 */
    int calls = mode ? n : 1, b = mode ? 1 : n;
    double t[REPS];
    for (int i = 0; i < n; i++)
      pasts[i] = past;
    for (int r = -1; r < REPS; r++) {
      double t0 = bench_now_ms();
      for (int k = 0; k < calls; k++) {
        attn_kv_t kv = {
            .past = pasts + k, .pages = tables + k, .k_absmax = absmax + k};
        attn_params_t p = {
            .query = {.data = q + (size_t)k * E, .rank = 3, .dim = {b, 1, E}},
            .num_heads = H,
            .q_weight = {.data = w[0], .rank = 2, .dim = {E, E}},
            .k_weight = {.data = w[1], .rank = 2, .dim = {E, E}},
            .v_weight = {.data = w[2], .rank = 2, .dim = {E, E}},
            .o_weight = {.data = w[3], .rank = 2, .dim = {E, E}},
            .causal = ATTN_CAUSAL_BOTTOM_RIGHT,
            .kv = &kv};
        attn_plan_t plan;
        attn_error_t err = {0};
        attn_outputs_t o = {.out = out + (size_t)k * E};
        if (attn_plan_init(&plan, &p, &(attn_exec_t){.threads = 1}, &err) < 0 ||
            grow_ws(&ws, &ws_cap, plan.workspace_bytes) < 0 ||
            attn_forward(&plan, &o, ws, plan.workspace_bytes, &err) < 0) {
          fprintf(stderr, "decode-bench: core: %s\n", err.message);
          free(ws);
          return 0;
        }
      }
      if (r >= 0)
        t[r] = (bench_now_ms() - t0) / n;
      for (int i = 0; i < n; i++)
        pasts[i]++;
    }
    ms[mode] = bench_median(t, REPS);
  }
  free(ws);
  for (int i = 0; i < n * npages; i++)
    free(pool[i]);
  free(pool), free(tables), free(pasts), free(absmax), free(q), free(out);
  *each = ms[0];
  *one = ms[1];
  return ms[1] / ms[0];
}

/* The batching rows: on against off, at length L, one thread a session. */
static int batching(bench_t *b, const char *attnd, const char *layer,
                    float *const *w, int64_t L, const char *csv_path) {
  size_t n = (size_t)b->sessions * (size_t)(L + b->steps) * E;
  float *tokens = bench_random_floats(n, 1, 99);
  b->tokens = tokens;
  b->L = L;
  int keep = b->threads;
  b->threads = b->sessions;
  double on, off, bon, boff, son, soff, con, coff;
  int rc = batch_run(b, attnd, layer, NULL, &on, &bon, &son, &con) < 0 ||
           batch_run(b, attnd, layer, "0", &off, &boff, &soff, &coff) < 0;
  b->threads = keep;
  free(tokens);
  if (rc)
    return 1;
  printf("\nbatching: %d sessions at L=%lld, one client thread each, %d "
         "steps\n%14s %14s %8s %10s %10s\n",
         b->sessions, (long long)L, b->steps, "batched_tok/s", "alone_tok/s",
         "ratio", "batch_on", "batch_off");
  printf("%14.1f %14.1f %8.2f %10.1f %10.1f\n", on, off, on / off, bon, boff);
  printf("CPU per step, server and this client: batched %.0f + %.0f us, alone "
         "%.0f + %.0f us\n",
         son, con, soff, coff);
  double one = 0, each = 0, core = 0;
  printf("core (no server), the bound of the one above: n steps as one call "
         "against n calls\n%8s %12s %12s %8s\n",
         "n", "batched_us", "alone_us", "ratio");
  const int ns[] = {4, 16, b->sessions};
  for (int k = 0; k < 3; k++) {
    if (k < 2 && ns[k] >= b->sessions)
      continue;
    core = core_batching(w, ns[k], L, &one, &each);
    printf("%8d %12.1f %12.1f %8.2f\n", ns[k], each * 1000, one * 1000, core);
  }
  FILE *csv = fopen(csv_path, "w");
  if (csv) {
    fprintf(csv,
            "L,sessions,steps,batched_tok_s,alone_tok_s,ratio,"
            "mean_batch_on,mean_batch_off,core_us_batched,core_us_alone,"
            "core_ratio\n%lld,%d,%d,%.2f,%.2f,%.3f,%.2f,%.2f,%.2f,%.2f,%.3f\n",
            (long long)L, b->sessions, b->steps, on, off, on / off, bon, boff,
            each * 1000, one * 1000, core);
    fclose(csv);
    printf("CSV: %s\n", csv_path);
  }
  return 0;
}

static int parse_list(const char *s, int64_t *v, int max) {
  int n = 0;
  for (char *end; *s && n < max; s = *end ? end + 1 : end) {
    v[n++] = strtoll(s, &end, 10);
    if (end == s)
      return -1;
  }
  return n;
}

int main(int argc, char **argv) {
  const char *attnd = NULL, *csv_path = "build/bench/decode.csv";
  int64_t lengths[8] = {1024, 4096}, batch_length = 128;
  int batch_steps = 32;
  int n_lengths = 2;
  bench_t *b = calloc(1, sizeof *b);
  b->sessions = 64;
  b->steps = 8;
  b->threads = 8;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (v && strcmp(a, "--attnd") == 0)
      attnd = v, i++;
    else if (v && strcmp(a, "--csv") == 0)
      csv_path = v, i++;
    else if (v && strcmp(a, "--lengths") == 0)
      n_lengths = parse_list(v, lengths, 8), i++;
    else if (v && strcmp(a, "--sessions") == 0)
      b->sessions = atoi(v), i++;
    else if (v && strcmp(a, "--steps") == 0)
      b->steps = atoi(v), i++;
    else if (v && strcmp(a, "--threads") == 0)
      b->threads = atoi(v), i++;
    else if (v && strcmp(a, "--batch-length") == 0)
      batch_length = atoll(v), i++;
    else if (v && strcmp(a, "--batch-steps") == 0)
      batch_steps = atoi(v), i++;
    else
      return fprintf(stderr,
                     "usage: %s [--attnd PATH] [--csv FILE] [--lengths L,...] "
                     "[--sessions N] [--steps S] [--threads T] "
                     "[--batch-length B] [--batch-steps S2]\n",
                     argv[0]),
             2;
  }
  if (n_lengths < 1 || b->sessions < 1 || b->sessions > MAX_SESSIONS ||
      b->steps < 1 || b->steps > MAX_STEPS || b->threads < 1 ||
      b->threads > MAX_SESSIONS || batch_length < 0 || batch_steps < 1 ||
      batch_steps > MAX_STEPS)
    return fprintf(stderr, "decode-bench: bad arguments\n"), 2;
  int64_t Lmax = 0;
  for (int i = 0; i < n_lengths; i++)
    Lmax = lengths[i] > Lmax ? lengths[i] : Lmax;

  float *w[4];
  for (int i = 0; i < 4; i++)
    w[i] = bench_random_floats(E * E, 0.044f, 2 + (uint64_t)i);
  const char *layer = "build/bench/decode-layer.safetensors";
  if (bench_write_layer(layer, E, H, w, ATTND_ST_F32) < 0)
    return 1;
  /* the pool: every session's pages at the longest length, and room */
  bench_server_t srv;
  if (start_attnd(&srv, attnd, layer, pool_bytes(b->sessions, Lmax, b->steps),
                  NULL) < 0)
    return 1;
  b->port = srv.port;
  pthread_mutex_init(&b->mu, NULL);
  double copy = memcpy_rate((size_t)1 << 28);
  printf("decode-bench: attnd, 2 workers x 1 thread; layer E=%d H=%d; %d "
         "sessions, %d decode steps each, %d client threads; memcpy %.2f GB/s "
         "(one thread, 256 MB)\n",
         E, H, b->sessions, b->steps, b->threads, copy);
  printf("%6s %12s %12s %8s %10s %10s %8s %8s\n", "L", "session_tok/s",
         "resend_tok/s", "ratio", "attn_ms", "kv_GB/s", "x_memcpy",
         "prefill_s");
  FILE *csv = fopen(csv_path, "w");
  if (csv)
    fprintf(csv, "L,sessions,steps,session_tok_s,resend_tok_s,ratio,"
                 "attention_ms,kv_gb_s,memcpy_gb_s,x_memcpy\n");
  int rc = 0;
  for (int li = 0; li < n_lengths && !rc; li++) {
    b->L = lengths[li];
    size_t n = (size_t)b->sessions * (size_t)(b->L + b->steps) * E;
    float *tokens = bench_random_floats(n, 1, 7 + (uint64_t)li);
    b->tokens = tokens;
    b->n_attention = 0;
    rc = open_sessions(b) < 0;
    double pre = rc ? 0 : phase(b, 0, 1);
    double dec = rc || b->failed ? 0 : phase(b, 0, 0);
    int keep = b->steps;
    b->steps = 1; /* one round of resends is enough to time */
    double res = rc || b->failed ? 0 : phase(b, 1, 0);
    b->steps = keep;
    if (b->failed)
      rc = 1;
    if (!rc) {
      double tok = (double)b->sessions * b->steps / (dec / 1000.0);
      double rtok = (double)b->sessions / (res / 1000.0);
      double att = bench_median(b->attention_ms, b->n_attention);
      double kvbytes = (double)b->L * H * (E / H + E / H) * 4;
      double gbs = kvbytes / 1e6 / att;
      printf("%6lld %12.1f %12.1f %8.1f %10.3f %10.2f %8.2f %8.2f\n",
             (long long)b->L, tok, rtok, tok / rtok, att, gbs, gbs / copy,
             pre / 1000.0);
      if (csv)
        fprintf(csv, "%lld,%d,%d,%.2f,%.2f,%.3f,%.4f,%.3f,%.3f,%.3f\n",
                (long long)b->L, b->sessions, b->steps, tok, rtok, tok / rtok,
                att, gbs, copy, gbs / copy);
    }
    close_sessions(b);
    free(tokens);
  }
  if (csv) {
    fclose(csv);
    printf("CSV: %s\n", csv_path);
  }
  bench_server_stop(&srv, 30);
  if (!rc && batch_length > 0) {
    char bcsv[512];
    size_t k = strlen(csv_path);
    int dot = k > 4 && strcmp(csv_path + k - 4, ".csv") == 0;
    snprintf(bcsv, sizeof bcsv, "%.*s-batch.csv", (int)(dot ? k - 4 : k),
             csv_path);
    b->steps = batch_steps;
    rc = batching(b, attnd, layer, w, batch_length, bcsv);
  }
  remove(layer);
  for (int i = 0; i < 4; i++)
    free(w[i]);
  free(b);
  return rc;
}
