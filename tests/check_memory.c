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

#include "server_harness.h"
#include "suite.h"
#include "testutil.h"

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
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)srv.pid);
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return -1;
  long kb = -1;
  while (fgets(line, sizeof line, f))
    if (strncmp(line, field, strlen(field)) == 0)
      kb = strtol(line + strlen(field), NULL, 10);
  fclose(f);
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
  sh_req_t q = {.method = "POST",
                .path = "/v1/attention",
                .content_type = "application/json",
                .body = body,
                .len = len,
                .timeout_ms = 120000};
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

/* A budget of BUDGET_MB, and a body whose tensor holds a number past
 * float32 at its end: the fast path refuses it, but in words the slow path
 * might choose otherwise, so jansson parses the whole body too, into a
 * tree of about 20 bytes a byte of "0," (a value and its array slot each).
 * That tree is memory the request holds: it counts in the budget like
 * any, and a parse the budget cannot hold stops there (422 where it could
 * never fit, else 429). Unbudgeted, the 8 MB body's tree grew attnd by
 * 176 MB, past the whole budget of 64. */
#define BUDGET_MB 64

static void setup_budget(void) {
  const char *args[] = {"--workers",
                        "1",
                        "--http-threads",
                        "2",
                        "--max-memory-bytes",
                        "64M",
                        "--kv-cache-bytes",
                        "1M",
                        NULL};
  ck_assert_msg(sh_server_start(&srv, args) == 0, "%s", srv.log);
}

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
                    strstr(r.body, "(its body and its JSON parsed, at least)"),
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
  /* and all of it is given back, once the connection completes (after
   * the reply's last byte) */
  double held = -1, kept = 0;
  for (int k = 0; k < 200 && held != kept; k++) {
    held = sh_metric(srv.port, "attnd_memory_held_bytes");
    kept = sh_metric(srv.port, "attnd_scratch_bytes");
    if (held != kept)
      usleep(10000);
  }
  ck_assert_double_eq(held, kept);
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
  return s;
}
