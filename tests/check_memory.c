/* tests/check_memory.c: the server's memory follows the request.
 *
 * One attnd (one worker of one thread, scratch_keep_bytes 8M) gets a table
 * of shapes in turn, in base64 both ways: one head of 1M features, many
 * heads of one feature over many keys, B large with L = 1, Lk = 1, Lq = 1.
 * For each, from the server's /proc/<pid>/status:
 *   - its peak RSS while the request was in it (VmHWM, reset before each
 *     through clear_refs) is at most MEM_FACTOR times the request's bytes
 *     (body and reply; the table has no resident weights) plus MEM_BASE
 *     over the RSS before it: a workspace padded to whole tiles (keys to
 *     64, a unit's scratch to 64 query rows) passes that for none of the
 *     first three shapes;
 *   - after the reply, RSS comes back within MEM_MARGIN of what it was
 *     before the first shape, and attnd_scratch_bytes to at most the
 *     bound per thread: a worker that keeps the largest workspace it ever
 *     had, or memory that malloc keeps, fails that.
 * docs/operations.md ("Memory") states the factor. */
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codec/base64.h"
#include "server_harness.h"
#include "suite.h"
#include "testutil.h"
#include "triton_client.h"

#define MEM_FACTOR 4
#define MEM_BASE (32 << 20)
#define MEM_MARGIN (48 << 20)
#define KEEP "8M"
#define KEEP_BYTES (8 << 20)

static sh_server_t srv;
static long baseline; /* VmRSS before the first shape, bytes */

/* The value of `field` ("VmRSS:") in the server's /proc status, in bytes;
 * -1 when it cannot be read. */
static long status_bytes(const char *field) {
  long kb = sh_proc_status(srv.pid, field);
  return kb < 0 ? -1 : kb * 1024;
}

/* Resets the server's VmHWM to its VmRSS (proc(5), clear_refs "5"). */
static void reset_peak(void) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/clear_refs", (int)srv.pid);
  int fd = open(path, O_WRONLY);
  ck_assert_msg(fd >= 0, "cannot open %s", path);
  ck_assert_int_eq(write(fd, "5", 1), 1);
  close(fd);
}

/* A random float32 tensor [rows, cols] in base64, seeded. */
static json_t *tensor(int64_t rows, int64_t cols, uint64_t seed) {
  tu_rng_t rng;
  tu_rng_seed(&rng, seed);
  float *x = tu_rand_floats(&rng, (size_t)(rows * cols), 1.0f);
  int64_t dim[2] = {rows, cols};
  json_t *t = sh_floats_json(x, 2, dim, SH_BASE64);
  free(x);
  return t;
}

static const struct mem_shape {
  const char *name;
  int64_t B, Lq, Lk, E, H; /* Lk = 0: self-attention (no key given) */
} shapes[] = {
    {"one head of 1M features, Lq = Lk = 1", 1, 1, 0, 1 << 20, 1},
    {"256 heads of 1 feature, Lq 1, Lk 16384", 1, 1, 16384, 256, 256},
    {"B 4096 of one token, 4 heads of 16", 4096, 1, 0, 64, 4},
    {"Lk = 1, Lq 8192, 8 heads of 64", 1, 8192, 1, 512, 8},
    {"Lq = 1, Lk 8192, 8 heads of 64", 1, 1, 8192, 512, 8},
    {"[1, 512], 8 heads", 1, 1, 0, 512, 8},
};
#define N_SHAPES ((int)(sizeof shapes / sizeof shapes[0]))

static void setup_server(void) {
  const char *args[] = {"--workers",
                        "1",
                        "--threads-per-request",
                        "1",
                        "--http-threads",
                        "2",
                        "--scratch-keep-bytes",
                        KEEP,
                        "--max-batch",
                        "4096",
                        NULL};
  ck_assert_msg(sh_server_start(&srv, args) == 0, "%s", srv.log);
  /* a request first, so that the baseline holds what any request leaves */
  sh_resp_t r;
  const char *tiny = "{\"query\": [[1, 2, 3, 4]], \"num_heads\": 2}";
  ck_assert_int_eq(sh_post(srv.port, tiny, strlen(tiny), &r), 0);
  ck_assert_int_eq(r.status, 200);
  sh_resp_free(&r);
  baseline = status_bytes("VmRSS:");
  ck_assert_int_gt(baseline, 0);
}

static void teardown_server(void) {
  sh_server_stop(&srv, 10);
}

START_TEST(test_memory_follows_request) {
  const struct mem_shape *s = &shapes[_i];
  json_t *req =
      json_pack("{s:o,s:I,s:{s:s}}", "query",
                s->B > 1 ? json_null() : tensor(s->Lq, s->E, 1), "num_heads",
                (json_int_t)s->H, "return", "encoding", "base64");
  if (s->B > 1) { /* [B, L, E] */
    tu_rng_t rng;
    tu_rng_seed(&rng, 2);
    float *x = tu_rand_floats(&rng, (size_t)(s->B * s->Lq * s->E), 1.0f);
    int64_t dim[3] = {s->B, s->Lq, s->E};
    json_object_set_new(req, "query", sh_floats_json(x, 3, dim, SH_BASE64));
    free(x);
  }
  if (s->Lk) {
    json_object_set_new(req, "key", tensor(s->Lk, s->E, 3));
    json_object_set_new(req, "value", tensor(s->Lk, s->E, 4));
  }
  char *body = json_dumps(req, JSON_COMPACT);
  json_decref(req);
  size_t len = strlen(body);

  long before = status_bytes("VmRSS:");
  reset_peak();
  sh_client_t c;
  sh_client_init(&c, srv.port);
  sh_req_t q = sh_attention_post(body, len);
  q.timeout_ms = 120000;
  sh_resp_t r;
  ck_assert_int_eq(sh_http(&c, &q, &r), 0);
  ck_assert_msg(r.status == 200, "%s: %ld %s", s->name, r.status, r.body);
  double bytes = (double)len + (double)r.body_len;
  sh_resp_free(&r);
  sh_client_free(&c);
  free(body);

  long peak = status_bytes("VmHWM:");
  double bound = MEM_FACTOR * bytes + MEM_BASE;
  fprintf(stderr,
          "check_memory: %s: body and reply %.1f MB, peak %.1f MB over the "
          "%.1f MB before (bound %.1f MB)\n",
          s->name, bytes / 1048576, (double)(peak - before) / 1048576,
          (double)before / 1048576, bound / 1048576);
#if !defined(__SANITIZE_ADDRESS__)
  /* ASan's shadow memory and its quarantine of freed blocks count in RSS:
   * the bounds hold for the plain build (make test); under make asan, the
   * scratch the server keeps is still checked, below */
  ck_assert_msg((double)(peak - before) <= bound,
                "%s: peak RSS %ld bytes over the %ld before; at most %d "
                "times the body and reply's %.0f plus %d",
                s->name, peak - before, before, MEM_FACTOR, bytes, MEM_BASE);

  /* the request's memory is given back once it is answered */
  long now = -1;
  for (int k = 0; k < 200; k++) {
    if ((now = status_bytes("VmRSS:")) <= baseline + MEM_MARGIN)
      break;
    usleep(10000);
  }
  ck_assert_msg(now <= baseline + MEM_MARGIN,
                "%s: RSS %ld bytes after the reply, over the baseline %ld "
                "plus %d",
                s->name, now, baseline, MEM_MARGIN);
#endif
  /* one worker and two HTTP threads keep at most the bound each */
  double held = sh_metric(srv.port, "attnd_scratch_bytes");
  ck_assert_msg(held >= 0 && held <= 3.0 * KEEP_BYTES,
                "%s: attnd_scratch_bytes %.0f; at most 3 x %d", s->name, held,
                KEEP_BYTES);
}
END_TEST

/* The budgets of the "budget" and "decode" cases. */
#define BUDGET_MB 64
#define DECODE_MB 128

/* attnd with a budget of `mb` MB (less 1 for the kv cache). */
static void start_budgeted(const char *mb) {
  const char *args[] = {"--workers", "1", "--http-threads", "4",
                        "--max-memory-bytes", mb, "--kv-cache-bytes", "1M",
                        "--max-response-bytes", "1G",
                        /* what a thread keeps, and the share past which
                         * freed memory goes back to the system */
                        "--scratch-keep-bytes", KEEP, NULL};
  ck_assert_msg(sh_server_start(&srv, args) == 0, "%s", srv.log);
}

static void setup_budget(void) {
  start_budgeted("64M");
}

/* ---- what decoding allocates, counted as it grows ------------------------
 *
 * Bodies that the budget admits, and whose decoding allocates a few times
 * their size: the scanner's arrays and the decoded floats of JSON, base64's
 * bytes, float16 widened to float32, and a gzip body's inflated text. That
 * memory counts in the request's share while it is decoded, as the parse
 * tree's does: a decoding the budget has no room for stops there (429, or
 * 422 where it could never fit), and attnd's peak RSS stays within the
 * budget plus a constant. Unbudgeted, a body of JSON zeros grew attnd by 3
 * times its size, random JSON by 1.4, base64 by 1.75, /v2's binary float16
 * and gzip of zeros by 3. The budget is DECODE_MB. */
static void setup_decode(void) {
  start_budgeted("128M");
}

/* The budget of test_budget_back_after_mixed: a quarter of DECODE_MB, for
 * bodies of 30 MB, a quarter of the decode case's 120, which each meet the
 * budget as those do there (the same statuses), in a quarter of the time:
 * with 120 MB bodies the test took 13.6 s. */
static void setup_mixed(void) {
  start_budgeted("32M");
}

enum {
  BIG_ZEROS,
  BIG_RANDOM,
  BIG_BASE64,
  BIG_FP16,
  BIG_GZIP,
  BIG_CHUNKED,
  N_BIG
};
static const char *const big_names[N_BIG] = {"JSON zeros",    "random JSON",
                                             "base64",        "/v2 binary FP16",
                                             "gzip of zeros", "chunked zeros"};

/* A request of about `bytes` bytes (before its coding) of kind `kind`, as
 * the whole text of an HTTP request in *out (*out_len bytes). Returns the
 * bytes the budget counts for its body (inflated, for gzip). */
static size_t big_request(int kind, size_t bytes, char **out, size_t *out_len) {
  const int64_t cols = 2048;
  tu_rng_t rng;
  tu_rng_seed(&rng, 7 + (uint64_t)kind);
  char *body = NULL;
  size_t len = 0, json_len = 0;
  if (kind == BIG_ZEROS || kind == BIG_RANDOM || kind == BIG_GZIP ||
      kind == BIG_CHUNKED) {
    /* "0," or "0.123456," and "-0.123456,": 2 bytes, or 9.5 on average
     * (10 at most) */
    size_t per = kind == BIG_RANDOM ? 10 : 2;
    int64_t rows =
        (int64_t)(bytes * 2 / ((kind == BIG_RANDOM ? 19 : 4) * (size_t)cols));
    body = malloc((size_t)(rows * cols) * per + (size_t)rows * 3 + 128);
    ck_assert_ptr_nonnull(body);
    char *w = body;
    w += sprintf(w, "{\"num_heads\": 8, \"query\": [");
    for (int64_t i = 0; i < rows; i++) {
      *w++ = '[';
      for (int64_t k = 0; k < cols; k++) {
        if (kind == BIG_RANDOM)
          w += sprintf(w, "%.6f", tu_rng_sym(&rng));
        else
          *w++ = '0';
        *w++ = k == cols - 1 ? ']' : ',';
      }
      if (i < rows - 1)
        *w++ = ',';
    }
    w += sprintf(w, "]}");
    len = (size_t)(w - body);
  } else if (kind == BIG_BASE64) {
    int64_t rows = (int64_t)(bytes * 3 / 16 / (size_t)cols);
    size_t n = (size_t)(rows * cols);
    float *x = tu_rand_floats(&rng, n, 1.0f);
    size_t b64 = attnd_b64_encoded_len(n * sizeof *x);
    body = malloc(b64 + 128);
    ck_assert_ptr_nonnull(body);
    len = (size_t)sprintf(body,
                          "{\"num_heads\": 8, \"query\": {\"shape\": [%lld, "
                          "%lld], \"base64\": \"",
                          (long long)rows, (long long)cols);
    attnd_b64_encode(x, n * sizeof *x, body + len);
    len += b64;
    len += (size_t)sprintf(body + len, "\"}}");
    free(x);
  } else { /* FP16: random halves in [-1, 1) */
    int64_t rows = (int64_t)(bytes / 2 / (size_t)cols);
    size_t n = (size_t)(rows * cols);
    body = malloc(n * 2 + 512);
    ck_assert_ptr_nonnull(body);
    json_len = (size_t)sprintf(
        body,
        "{\"inputs\":[{\"name\":\"query\",\"shape\":[%lld,%lld],\"datatype\":"
        "\"FP16\",\"parameters\":{\"binary_data_size\":%zu}}],"
        "\"parameters\":{\"num_heads\":8}}",
        (long long)rows, (long long)cols, n * 2);
    for (size_t i = 0; i < n; i++) {
      uint16_t h = (uint16_t)(tu_rng_below(&rng, 0x3c00) |
                              (tu_rng_below(&rng, 2) << 15));
      memcpy(body + json_len + 2 * i, &h, 2);
    }
    len = json_len + n * 2;
  }
  size_t plain = len;
  unsigned char *z = NULL;
  if (kind == BIG_GZIP) {
    ck_assert_int_eq(tc_compress(TC_GZIP, body, len, &z, &len), 0);
    free(body);
    body = (char *)z;
  }
  if (kind == BIG_CHUNKED) { /* in chunks of 1 MiB */
    const size_t piece = (size_t)1 << 20;
    char *c = malloc(len + (len / piece + 2) * 16), *w = c;
    ck_assert_ptr_nonnull(c);
    for (size_t at = 0; at < len; at += piece) {
      size_t n = len - at < piece ? len - at : piece;
      w += sprintf(w, "%zx\r\n", n);
      memcpy(w, body + at, n);
      w += n;
      w += sprintf(w, "\r\n");
    }
    w += sprintf(w, "0\r\n\r\n");
    free(body);
    body = c;
    len = (size_t)(w - c);
  }
  char head[512], length[64];
  snprintf(length, sizeof length, "Content-Length: %zu", len);
  int hn = snprintf(
      head, sizeof head,
      "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: %s\r\n"
      "%s\r\n%s",
      kind == BIG_FP16 ? "/v2/models/attention/infer" : "/v1/attention",
      kind == BIG_FP16 ? "application/octet-stream" : "application/json",
      kind == BIG_CHUNKED ? "Transfer-Encoding: chunked" : length,
      kind == BIG_GZIP ? "Content-Encoding: gzip\r\n" : "");
  if (kind == BIG_FP16)
    hn += snprintf(head + hn, sizeof head - (size_t)hn,
                   "Inference-Header-Content-Length: %zu\r\n", json_len);
  hn += snprintf(head + hn, sizeof head - (size_t)hn, "\r\n");
  *out = malloc((size_t)hn + len);
  ck_assert_ptr_nonnull(*out);
  memcpy(*out, head, (size_t)hn);
  memcpy(*out + hn, body, len);
  *out_len = (size_t)hn + len;
  free(body);
  return plain;
}

/* The budget's count back at what the kept workspaces alone hold, once
 * every connection has completed (the share goes back after the reply's
 * last byte): polled 2 s at most. */
static void assert_budget_back(void) {
  double held = -1, kept = 0;
  for (int k = 0; k < 200 && held != kept; k++) {
    held = sh_metric(srv.port, "attnd_memory_held_bytes");
    kept = sh_metric(srv.port, "attnd_scratch_bytes");
    if (held != kept)
      usleep(10000);
  }
  ck_assert_double_eq(held, kept);
}

/* Sends the n requests req[k] on n connections at once: each but its last
 * byte, then the last bytes together, so that their decodings overlap on
 * the HTTP threads. Each must be refused by the memory budget (429, or
 * 422, or /v2's 400, naming the bytes of memory needed); their statuses
 * into status[k]. */
static void send_together(int n, char *const *req, const size_t *len,
                          int *status) {
  int fd[8];
  ck_assert_int_le(n, 8);
  for (int k = 0; k < n; k++) {
    fd[k] = sh_connect(srv.port);
    ck_assert_int_ge(fd[k], 0);
  }
  for (int k = 0; k < n; k++)
    ck_assert_int_eq(sh_send_all(fd[k], req[k], len[k] - 1), 0);
  usleep(200000); /* every body but its last byte read */
  for (int k = 0; k < n; k++)
    ck_assert_int_eq(sh_send_all(fd[k], req[k] + len[k] - 1, 1), 0);
  for (int k = 0; k < n; k++) {
    char reply[4096];
    long got = sh_recv_reply(fd[k], reply, sizeof reply, 120000);
    ck_assert_msg(got > 0, "request %d: no reply", k);
    status[k] = sh_raw_status(reply);
    ck_assert_msg((status[k] == 400 || status[k] == 422 || status[k] == 429) &&
                      strstr(reply, "bytes of memory"),
                  "request %d: %s", k, reply);
    close(fd[k]);
  }
}

/* A budget of BUDGET_MB, and a body whose tensor holds a number past
 * float32 at its end: the fast path refuses it, but in words the slow path
 * might choose otherwise, so jansson parses the whole body too, into a
 * tree of about 20 bytes a byte of "0," (a value and its array slot each).
 * That tree is memory the request holds: it counts in the budget like
 * any, and a parse the budget cannot hold stops there (422 where it could
 * never fit, else 429). Unbudgeted, the 8 MB body's tree grew attnd by
 * 176 MB, past the whole budget of 64. */
START_TEST(test_parse_tree_budgeted) {
  const int rows = 8192, cols = 512;
  char *body = malloc((size_t)rows * (cols * 2 + 8) + 128), *w = body;
  ck_assert_ptr_nonnull(body);
  w += sprintf(w, "{\"num_heads\": 8, \"query\": [");
  for (int i = 0; i < rows; i++) {
    *w++ = '[';
    for (int k = 0; k < cols - 1; k++)
      *w++ = '0', *w++ = ',';
    w += sprintf(w, i == rows - 1 ? "1e39]" : "0],");
  }
  w += sprintf(w, "]}");
  size_t len = (size_t)(w - body);

  long before = status_bytes("VmRSS:");
  reset_peak();
  sh_resp_t r;
  ck_assert_int_eq(sh_post(srv.port, body, len, &r), 0);
  free(body);
  long peak = status_bytes("VmHWM:");
  /* refused: non_finite where the tree fitted, limit_exceeded where it
   * never can (it was the non_finite, after 168 MB) */
  ck_assert_msg(r.status == 422 && strstr(r.body, "\"limit_exceeded\"") &&
                    strstr(r.body, "(its body and its decoding, at least)"),
                "%ld %s", r.status, r.body);
  sh_resp_free(&r);
  fprintf(stderr,
          "check_memory: a %.1f MB body parsed whole: peak %.1f MB over the "
          "%.1f MB before, budget %d MB\n",
          (double)len / 1048576, (double)(peak - before) / 1048576,
          (double)before / 1048576, BUDGET_MB);
#if !defined(__SANITIZE_ADDRESS__)
  ck_assert_msg(peak - before <= ((long)BUDGET_MB << 20) + MEM_BASE,
                "peak RSS %ld bytes over the %ld before: past the budget of "
                "%d MB plus %d",
                peak - before, before, BUDGET_MB, MEM_BASE);
#endif
  assert_budget_back(); /* all of it is given back */
}
END_TEST

/* Sends the n requests together (send_together), whose bodies the budget
 * counts as `plain` bytes in all, `what`: attnd's peak RSS meanwhile must
 * stay within the budget plus MEM_BASE (the plain build: see
 * test_memory_follows_request), and its budget come back. */
static void send_within_budget(int n, char *const *req, const size_t *len,
                               size_t plain, const char *what) {
  int status[8];
  long before = status_bytes("VmRSS:");
  reset_peak();
  send_together(n, req, len, status);
  long peak = status_bytes("VmHWM:");
  fprintf(stderr,
          "check_memory: %s, %.1f MB of bodies: status %d (first), peak "
          "%.1f MB over the %.1f MB before (%.2f times the bodies), budget "
          "%d MB\n",
          what, (double)plain / 1048576, status[0],
          (double)(peak - before) / 1048576, (double)before / 1048576,
          (double)(peak - before) / (double)plain, DECODE_MB);
#if !defined(__SANITIZE_ADDRESS__)
  ck_assert_msg(peak - before <= ((long)DECODE_MB << 20) + MEM_BASE,
                "%s: peak RSS %ld bytes over the %ld before: past the budget "
                "of %d MB plus %d",
                what, peak - before, before, DECODE_MB, MEM_BASE);
#endif
  assert_budget_back();
}

/* Four bodies of the kinds given, of `bytes` each, sent together within
 * the budget (send_within_budget). */
static void send_four_within_budget(const int *kinds, size_t bytes,
                                    const char *what) {
  char *req[4];
  size_t len[4], plain = 0;
  for (int k = 0; k < 4; k++)
    plain += big_request(kinds[k], bytes, &req[k], &len[k]);
  send_within_budget(4, req, len, plain, what);
  for (int k = 0; k < 4; k++)
    free(req[k]);
}

/* One body of each kind that the budget admits (120 MB of its 128),
 * alone. */
START_TEST(test_decode_budgeted) {
  char *req;
  size_t len, plain = big_request(_i, (size_t)120 << 20, &req, &len);
  send_within_budget(1, &req, &len, plain, big_names[_i]);
  free(req);
}
END_TEST

/* Four bodies of 30 MB (JSON zeros, base64, /v2 binary FP16, zeros
 * again), decoded at once: 120 MB of bodies, admitted, and decodings that
 * cannot all fit. */
START_TEST(test_decode_budgeted_together) {
  static const int kinds[] = {BIG_ZEROS, BIG_BASE64, BIG_FP16, BIG_ZEROS};
  send_four_within_budget(kinds, (size_t)30 << 20, "four at once");
}
END_TEST

/* Four bodies that grow as they come, of 17 MB each once inflated (gzip)
 * or joined (chunked): their buffers double as they grow, to 32 MB, and
 * that room is memory the requests hold, counted as it is taken. When
 * only their lengths counted, the four held 128 MB of room for 68 MB of
 * bodies, and attnd's peak passed the budget by that difference. */
START_TEST(test_growing_bodies_together) {
  static const int kinds[] = {BIG_GZIP, BIG_CHUNKED, BIG_GZIP, BIG_CHUNKED};
  send_four_within_budget(kinds, (size_t)17 << 20, "four growing at once");
}
END_TEST

/* Requests of every outcome, then the budget's count is back where it
 * started (what the kept workspaces hold): answered (/v1 in JSON and
 * gzip, /v2 binary), refused by the budget while decoding, failed in
 * decoding (a value past float32, which also parses the whole body; bad
 * JSON), and a client gone in the middle of its body. */
START_TEST(test_budget_back_after_mixed) {
  static const char ok[] = "{\"query\": [[1, 2, 3, 4]], \"num_heads\": 2}";
  static const char huge[] = "{\"query\": [[1, 2, 3, 1e39]], \"num_heads\": 2}";
  static const char bad[] = "{\"query\": [[1, 2, 3, 4]], \"num_heads\": ";
  /* one round: the budget must come back exactly, so a share lost once
   * shows (three rounds took 80 s of the suite's 140) */
  sh_resp_t r;
  ck_assert_int_eq(sh_post(srv.port, ok, strlen(ok), &r), 0);
  ck_assert_int_eq(r.status, 200);
  sh_resp_free(&r);
  ck_assert_int_eq(sh_post(srv.port, huge, strlen(huge), &r), 0);
  ck_assert_int_eq(r.status, 422);
  sh_resp_free(&r);
  ck_assert_int_eq(sh_post(srv.port, bad, strlen(bad), &r), 0);
  ck_assert_int_eq(r.status, 400);
  sh_resp_free(&r);
  for (int k = 0; k < N_BIG; k++) { /* refused while decoding */
    char *req;
    size_t len;
    int status;
    big_request(k, (size_t)30 << 20, &req, &len);
    send_together(1, &req, &len, &status);
    free(req);
  }
  /* answered: small bodies of the same kinds */
  for (int k = 0; k < N_BIG; k++) {
    char *req, *reply = malloc(4 << 20);
    size_t len;
    ck_assert_ptr_nonnull(reply);
    big_request(k, (size_t)64 << 10, &req, &len);
    int fd = sh_connect(srv.port);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(sh_send_all(fd, req, len), 0);
    ck_assert_int_gt(sh_recv_reply(fd, reply, 4 << 20, 60000), 0);
    ck_assert_msg(sh_raw_status(reply) == 200, "%s: %.300s", big_names[k],
                  reply);
    free(reply);
    close(fd);
    /* and the client gone with half of it sent */
    fd = sh_connect(srv.port);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(sh_send_all(fd, req, len / 2), 0);
    usleep(20000);
    close(fd);
    free(req);
  }
  assert_budget_back();
}
END_TEST

Suite *test_suite(void) {
  Suite *s = suite_create("memory");
  TCase *tc = tcase_create("shapes");
  tcase_set_timeout(tc, 300);
  tcase_add_unchecked_fixture(tc, setup_server, teardown_server);
  tcase_add_loop_test(tc, test_memory_follows_request, 0, N_SHAPES);
  suite_add_tcase(s, tc);
  tc = tcase_create("budget");
  tcase_set_timeout(tc, 300);
  tcase_add_unchecked_fixture(tc, setup_budget, teardown_server);
  tcase_add_test(tc, test_parse_tree_budgeted);
  suite_add_tcase(s, tc);
  /* a new attnd for each: the heap that one test's decoding grew stays in
   * the process, and would hide the next one's */
  tc = tcase_create("decode");
  tcase_set_timeout(tc, 300);
  tcase_add_checked_fixture(tc, setup_decode, teardown_server);
  tcase_add_loop_test(tc, test_decode_budgeted, 0, N_BIG);
  tcase_add_test(tc, test_decode_budgeted_together);
  tcase_add_test(tc, test_growing_bodies_together);
  suite_add_tcase(s, tc);
  tc = tcase_create("mixed");
  tcase_set_timeout(tc, 300);
  tcase_add_checked_fixture(tc, setup_mixed, teardown_server);
  tcase_add_test(tc, test_budget_back_after_mixed);
  suite_add_tcase(s, tc);
  return s;
}
