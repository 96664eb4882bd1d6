/* tests/check_soak.c: what a long-running attnd keeps of the requests it
 * has answered.
 *
 * One attnd (2 workers of one thread, 2 HTTP threads, 2 places in the
 * queue, connection_timeout_s 1, max_body_bytes 1M) gets a warm-up round,
 * then SOAK_ROUNDS rounds of SOAK_MIX requests of every kind it serves and
 * refuses, from keep-alive clients and closing ones:
 *   - /v1 JSON 200s of three shapes, with per-head and mean weights and
 *     head outputs, and a gzip body; /v2 binary tensors, gzip both ways;
 *   - 400 (bad JSON), 404 and 405, 413 (a Content-Length past the limit),
 *     422 (E not divisible by the heads);
 *   - clients gone mid-body and mid-reply (reset, SO_LINGER 0);
 *   - KV-cache sessions created, stepped, forked, truncated and deleted,
 *     and some left to expire with ttl_s 1;
 *   - a burst of slow requests past the workers and the queue (429s), a
 *     slow request with timeout_ms 5 (504), and one that expires queued;
 *   - a slow reader of a reply of megabytes, which attnd resets
 *     (min_send_rate_bytes_per_s 8M).
 * Once attnd is idle again (attnd_inflight 0, every session expired) these
 * must be back where the warm-up left them, exactly: its open fds (each by
 * what it names), its threads, attnd_memory_held_bytes less
 * attnd_scratch_bytes (the workspaces kept, which may move between the 4
 * threads, scratch_keep_bytes 4M each), attnd_sessions,
 * attnd_kv_bytes{state="used"};
 * and the heap malloc has in use (attnd_heap_bytes{state="in_use"}) within
 * SOAK_HEAP_MARGIN of it (what 170 bytes kept per request would pass). Not
 * VmRSS: attnd's malloc keeps what was freed (main.c), so its RSS follows
 * the peak of what requests held at once and how it fragmented, which
 * moved by -10 to +11 MB between runs of the same code, while the heap in
 * use moved by 112 to 162 KB (10 and 30 rounds: pools filling up). The server
 * is stopped with SIGTERM and must exit 0: under make asan, LeakSanitizer's
 * report at exit makes that status nonzero, and its first lines are printed. No
 * wall-clock assertion: the waits are bounded and only decide when to look. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server_harness.h"
#include "suite.h"
#include "testutil.h"
#include "triton_client.h"

#define SOAK_ROUNDS 10
#define SOAK_MIX 300 /* requests a round, besides the burst and the reader */
/* 170 bytes a request over the ~3000 of the rounds is 510 KB: the heap in
 * use may grow by less than that. */
#define SOAK_HEAP_MARGIN (512 << 10)
#define BURST 12

static sh_server_t srv;

/* ---- the server's own counts -------------------------------------------- */

/* `field` of attnd's /proc status ("VmRSS:", "Threads:"). */
static long proc_status(const char *field) {
  return sh_proc_status(srv.pid, field);
}

/* The server's open fds, each as "N -> target" on a line of its own, into
 * buf (NUL-terminated). Returns how many. */
static int open_fds(char *buf, size_t cap) {
  char dir[64];
  snprintf(dir, sizeof dir, "/proc/%d/fd", (int)srv.pid);
  DIR *d = opendir(dir);
  ck_assert_msg(d != NULL, "cannot open %s", dir);
  int n = 0;
  size_t at = 0;
  buf[0] = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.')
      continue;
    char path[320], target[256];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    ssize_t k = readlink(path, target, sizeof target - 1);
    target[k < 0 ? 0 : k] = 0;
    /* sockets differ by inode between runs: their kind is what counts */
    if (strncmp(target, "socket:", 7) == 0)
      snprintf(target, sizeof target, "socket");
    if (at + 300 < cap)
      at +=
          (size_t)snprintf(buf + at, cap - at, "%s -> %s\n", e->d_name, target);
    n++;
  }
  closedir(d);
  return n;
}

typedef struct snapshot {
  int fds;
  char fd_list[8192];
  long threads;
  long rss_kb;
  double held, scratch, sessions, kv_used, inflight, heap;
} snapshot_t;

static void snap(snapshot_t *s) {
  /* the scrapes first: each is a connection of its own, closed before the
   * fds are read (see settle) */
  s->held = sh_metric(srv.port, "attnd_memory_held_bytes");
  s->scratch = sh_metric(srv.port, "attnd_scratch_bytes");
  s->sessions = sh_metric(srv.port, "attnd_sessions");
  s->kv_used = sh_metric(srv.port, "attnd_kv_bytes{state=\"used\"}");
  s->inflight = sh_metric(srv.port, "attnd_inflight");
  s->heap = sh_metric(srv.port, "attnd_heap_bytes{state=\"in_use\"}");
  usleep(20000); /* attnd sees the scrapes' connections close */
  s->fds = open_fds(s->fd_list, sizeof s->fd_list);
  s->threads = proc_status("Threads:");
  s->rss_kb = proc_status("VmRSS:");
}

static int same(const snapshot_t *a, const snapshot_t *b) {
  return a->fds == b->fds && strcmp(a->fd_list, b->fd_list) == 0 &&
         a->threads == b->threads &&
         a->held - a->scratch == b->held - b->scratch &&
         a->sessions == b->sessions && a->kv_used == b->kv_used &&
         a->inflight == b->inflight;
}

/* Waits (10 s at most) until attnd is idle and its counts equal `base`'s,
 * or, with base NULL, until two snapshots agree; the last one into *now. */
static void settle(const snapshot_t *base, snapshot_t *now) {
  snapshot_t prev;
  snap(&prev);
  double end = sh_now() + 10;
  for (;;) {
    usleep(100000);
    snap(now);
    if (now->inflight == 0 && (base ? same(base, now) : same(&prev, now)))
      return;
    if (sh_now() > end)
      return;
    prev = *now;
  }
}

/* ---- requests ----------------------------------------------------------- */

/* One exchange on c; the status, or 0 when no reply came. */
static long exchange(sh_client_t *c, const char *method, const char *path,
                     const char *ctype, const void *body, size_t len,
                     const char *const *headers, char **reply) {
  sh_req_t q = {.method = method,
                .path = path,
                .content_type = ctype,
                .body = body,
                .len = len,
                .headers = headers};
  sh_resp_t r;
  long st = sh_http(c, &q, &r) == 0 ? r.status : 0;
  if (reply)
    *reply = strdup(r.body ? r.body : "");
  sh_resp_free(&r);
  return st;
}

static long post_json(sh_client_t *c, const char *path, const char *body,
                      const char *const *headers, char **reply) {
  return exchange(c, "POST", path, "application/json", body, strlen(body),
                  headers, reply);
}

#define EXPECT(st, want, what)                                                 \
  ck_assert_msg((st) == (want), "%s: status %ld, expected %d", what,           \
                (long)(st), want)

/* A connection of 127.0.0.1 that the client resets when it closes it. */
static int reset_on_close(int fd) {
  struct linger l = {.l_onoff = 1, .l_linger = 0};
  return setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
}

/* A client gone mid-body: the headers and half of `body`, then a reset. */
static void gone_mid_body(const char *body) {
  int fd = sh_connect(srv.port);
  ck_assert_int_ge(fd, 0);
  char head[256];
  size_t len = strlen(body);
  int n = snprintf(head, sizeof head,
                   "POST /v1/attention HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                   "Content-Type: application/json\r\nContent-Length: %zu"
                   "\r\n\r\n",
                   len);
  ck_assert_int_eq(sh_send_all(fd, head, (size_t)n), 0);
  ck_assert_int_eq(sh_send_all(fd, body, len / 2), 0);
  usleep(2000);
  reset_on_close(fd);
  close(fd);
}

/* A client gone mid-reply: it reads the first KiB of a reply of
 * megabytes, then resets. */
static void gone_mid_reply(const char *big) {
  char head[1024];
  int fd = sh_post_slow_reader_assert(srv.port, big, head);
  ck_assert_msg(sh_raw_status(head) == 200, "%.200s", head);
  reset_on_close(fd);
  close(fd);
}

/* 413 for a Content-Length past max_body_bytes, refused before the body. */
static void too_large(void) {
  int fd = sh_connect(srv.port);
  ck_assert_int_ge(fd, 0);
  static const char head[] = "POST /v1/attention HTTP/1.1\r\nHost: 127.0.0.1"
                             "\r\nContent-Type: application/json\r\n"
                             "Content-Length: 2000000\r\n\r\n{\"query\":";
  ck_assert_int_eq(sh_send_all(fd, head, sizeof head - 1), 0);
  char reply[4096];
  ck_assert_int_gt(sh_recv_reply(fd, reply, sizeof reply, 10000), 0);
  ck_assert_msg(sh_raw_status(reply) == 413, "%.300s", reply);
  close(fd);
}

/* /v2's binary tensors, gzip both ways when `gzip`. */
static void oip_binary(tc_client_t *c, int gzip, uint64_t seed) {
  tu_rng_t rng;
  tu_rng_seed(&rng, seed);
  float *x = tu_rand_floats(&rng, 4 * 8, 1.0f);
  int64_t shape[3] = {1, 4, 8};
  tc_input_t in;
  tc_input_fp32(&in, "query", 3, shape, x, 1);
  tc_output_t out = {"output", 1};
  tc_param_t p = TC_PINT("num_heads", 2);
  tc_options_t o = {.request_compression = gzip ? TC_GZIP : TC_IDENTITY,
                    .response_compression = gzip ? TC_GZIP : TC_IDENTITY};
  tc_result_t r;
  int rc = tc_infer(c, "attention", &in, 1, &out, 1, &p, 1, &o, &r);
  ck_assert_msg(rc == 0 && r.status == 200, "/v2 binary: %ld %s", r.status,
                r.error);
  tc_result_free(&r);
  tc_input_free(&in);
  free(x);
}

/* A /v1 body of JSON text, gzipped. */
static void v1_gzip(sh_client_t *c, const char *body) {
  unsigned char *z;
  size_t zn;
  ck_assert_int_eq(tc_compress(TC_GZIP, body, strlen(body), &z, &zn), 0);
  static const char *const h[] = {"Content-Encoding: gzip", NULL};
  long st =
      exchange(c, "POST", "/v1/attention", "application/json", z, zn, h, NULL);
  free(z);
  EXPECT(st, 200, "/v1 gzip");
}

/* The id of a session reply, into id[40]. */
static void session_id(const char *reply, char *id) {
  const char *p = strstr(reply, "\"session\":\"");
  ck_assert_msg(p != NULL, "no session in %.200s", reply);
  snprintf(id, 40, "%.32s", p + 11);
}

/* A pre-projected session (2 heads of 4): created with `ttl`, stepped
 * twice; with `full`, also forked, the fork stepped, truncated, and both
 * deleted. */
static void session_life(sh_client_t *c, int ttl, int full) {
  char create[96], path[128], id[40], fid[40], *reply;
  snprintf(create, sizeof create,
           "{\"num_heads\":2,\"head_dim\":4,\"ttl_s\":%d}", ttl);
  long st = post_json(c, "/v1/sessions", create, NULL, &reply);
  ck_assert_msg(st == 201, "create: %ld %.300s", st, reply);
  session_id(reply, id);
  free(reply);
  static const char step[] =
      "{\"query\":[[1,2,3,4,5,6,7,8],[0,1,0,1,0,1,0,1]],"
      "\"key\":[[1,0,0,1,0,1,1,0],[2,1,0,1,0,1,2,0]],"
      "\"value\":[[1,2,3,4,5,6,7,8],[8,7,6,5,4,3,2,1]],"
      "\"return\":{\"weights\":\"per_head\",\"metrics\":false}}";
  snprintf(path, sizeof path, "/v1/sessions/%s/attention", id);
  for (int k = 0; k < 2; k++)
    EXPECT(post_json(c, path, step, NULL, NULL), 200, "session step");
  if (!full)
    return;
  snprintf(path, sizeof path, "/v1/sessions/%s/fork", id);
  st = exchange(c, "POST", path, NULL, NULL, 0, NULL, &reply);
  ck_assert_msg(st == 201, "fork: %ld %.300s", st, reply);
  session_id(reply, fid);
  free(reply);
  snprintf(path, sizeof path, "/v1/sessions/%s/attention", fid);
  EXPECT(post_json(c, path, step, NULL, NULL), 200, "fork step");
  snprintf(path, sizeof path, "/v1/sessions/%s/truncate", id);
  EXPECT(post_json(c, path, "{\"length\":1}", NULL, NULL), 200, "truncate");
  snprintf(path, sizeof path, "/v1/sessions/%s", id);
  EXPECT(exchange(c, "DELETE", path, NULL, NULL, 0, NULL, NULL), 204, "delete");
  snprintf(path, sizeof path, "/v1/sessions/%s", fid);
  EXPECT(exchange(c, "DELETE", path, NULL, NULL, 0, NULL, NULL), 204,
         "delete fork");
}

/* BURST slow requests at once, the last with timeout_ms 30: 2 run, 2
 * wait, the rest 429; the last is 429, or 504 where it waited. */
static void burst(const char *slow, const char *slow_expiring) {
  int fd[BURST];
  for (int k = 0; k < BURST; k++) {
    const char *b = k == BURST - 1 ? slow_expiring : slow;
    fd[k] = sh_connect(srv.port);
    ck_assert_int_ge(fd[k], 0);
    char head[256];
    int n = snprintf(head, sizeof head,
                     "POST /v1/attention HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu"
                     "\r\n\r\n",
                     strlen(b));
    ck_assert_int_eq(sh_send_all(fd[k], head, (size_t)n), 0);
    ck_assert_int_eq(sh_send_all(fd[k], b, strlen(b)), 0);
  }
  int n429 = 0;
  char *reply = malloc(8 << 20);
  ck_assert_ptr_nonnull(reply);
  for (int k = 0; k < BURST; k++) {
    ck_assert_int_gt(sh_recv_reply(fd[k], reply, 8 << 20, 60000), 0);
    int st = sh_raw_status(reply);
    ck_assert_msg(st == 200 || st == 429 || (k == BURST - 1 && st == 504),
                  "burst %d: %.300s", k, reply);
    n429 += st == 429;
    close(fd[k]);
  }
  free(reply);
  ck_assert_int_ge(n429, 1);
}

/* The bodies a round sends. */
typedef struct bodies {
  char *small, *cross, *proj, *slow, *slow_5ms, *slow_expiring, *big;
} bodies_t;

static void bodies_init(bodies_t *b) {
  b->small = strdup("{\"query\":[[1,2,3,4],[5,6,7,8]],\"num_heads\":2,"
                    "\"return\":{\"weights\":\"per_head\"}}");
  b->cross =
      strdup("{\"query\":[[1,2,3,4]],\"key\":[[1,0,0,1],[0,1,1,0],[1,1,1,1]],"
             "\"value\":[[1,2,3,4],[4,3,2,1],[0,0,1,1]],\"num_heads\":2,"
             "\"return\":{\"weights\":\"mean\",\"head_outputs\":true,"
             "\"encoding\":\"base64\"}}");
  b->proj = strdup("{\"query\":[[0,0]],\"key\":[[0,0],[0,0]],"
                   "\"value\":[[2,10],[6,-2]],\"num_heads\":2,"
                   "\"projections\":{\"o_weight\":[[2,-1]]},"
                   "\"mask\":{\"causal\":\"bottom_right\"},"
                   "\"return\":{\"weights\":\"per_head\",\"head_outputs\":"
                   "true,\"metrics\":false}}");
  json_t *x = json_pack("{s:{s:s}}", "return", "encoding", "base64");
  b->slow = sh_slow_body(2048, 64, 4, 1, x);
  json_object_set_new(x, "timeout_ms", json_integer(5));
  b->slow_5ms = sh_slow_body(2048, 64, 4, 2, x);
  json_object_set_new(x, "timeout_ms", json_integer(30));
  b->slow_expiring = sh_slow_body(2048, 64, 4, 3, x);
  json_decref(x);
  /* a reply of about 11 MB: per-head weights [8, 512, 512] */
  x = json_pack("{s:{s:s,s:s,s:b}}", "return", "weights", "per_head",
                "encoding", "base64", "metrics", 0);
  b->big = sh_slow_body(512, 32, 8, 4, x);
  json_decref(x);
}

static void bodies_free(bodies_t *b) {
  free(b->small), free(b->cross), free(b->proj), free(b->slow);
  free(b->slow_5ms), free(b->slow_expiring), free(b->big);
}

/* A slow reader of b->big, left unread: attnd resets it once it falls
 * behind min_send_rate_bytes_per_s after the grace of 1 s. */
static int slow_reader(const bodies_t *b) {
  char head[1024];
  int fd = sh_post_slow_reader_assert(srv.port, b->big, head);
  ck_assert_msg(sh_raw_status(head) == 200, "%.200s", head);
  return fd;
}

/* Waits for attnd to count the slow reader (3 s at most), then reads its
 * socket to its end (15 s at most): attnd has ended the connection before
 * the reply's 11 MB went out. */
static void slow_reader_reset(int fd, double readers) {
  /* counted as a slow reader, or (connection_timeout_s) shut down: only
   * the first is reported here, not asserted; the cut is */
  sh_wait_metric(srv.port, "attnd_rejections_total{reason=\"slow_reader\"}",
                 readers, 3);
  static char buf[1 << 16];
  size_t got = 0;
  double end = sh_now() + 15;
  ssize_t n = 1;
  while (n > 0 && sh_now() < end) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 100) <= 0)
      continue;
    n = recv(fd, buf, sizeof buf, 0);
    got += n > 0 ? (size_t)n : 0;
  }
  close(fd);
  ck_assert_msg(n <= 0 && got < (8u << 20),
                "a slow reader's connection not ended: %zu bytes read", got);
}

/* One round: SOAK_MIX requests of the mix, a burst, a 504. */
static void round_of(const bodies_t *b, int round) {
  sh_client_t c;
  sh_client_init(&c, srv.port);
  tc_client_t t;
  tc_client_init(&t, srv.port);
  static const char *const close_h[] = {"Connection: close", NULL};
  for (int i = 0; i < SOAK_MIX; i++) {
    switch (i % 20) {
    case 0:
    case 1:
      EXPECT(post_json(&c, "/v1/attention", b->small, NULL, NULL), 200,
             "small");
      break;
    case 2:
      EXPECT(post_json(&c, "/v1/attention", b->cross, NULL, NULL), 200,
             "cross");
      break;
    case 3:
      EXPECT(post_json(&c, "/v1/attention", b->proj, close_h, NULL), 200,
             "projections, Connection: close");
      break;
    case 4:
      oip_binary(&t, 0, (uint64_t)i);
      break;
    case 5:
      oip_binary(&t, 1, (uint64_t)i);
      break;
    case 6:
      v1_gzip(&c, b->cross);
      break;
    case 7:
      EXPECT(post_json(&c, "/v1/attention", "{\"query\":[[1,2", NULL, NULL),
             400, "bad JSON");
      break;
    case 8:
      EXPECT(post_json(&c, "/v1/attention",
                       "{\"query\":[[1,2,3]],\"num_heads\":2}", close_h, NULL),
             422, "E 3 of 2 heads");
      break;
    case 9:
      too_large();
      break;
    case 10:
      EXPECT(exchange(&c, "GET", "/v1/nowhere", NULL, NULL, 0, NULL, NULL), 404,
             "unknown path");
      EXPECT(exchange(&c, "DELETE", "/v1/attention", NULL, NULL, 0, NULL, NULL),
             405, "DELETE /v1/attention");
      break;
    case 11:
      gone_mid_body(b->cross);
      break;
    case 12:
      if (i % 100 == 12)
        gone_mid_reply(b->big);
      else
        gone_mid_body(b->slow);
      break;
    case 13:
      session_life(&c, 60, 1);
      break;
    case 14:
      if (i % 100 == 14)
        session_life(&c, 1, 0); /* left to expire */
      else
        session_life(&c, 60, 1);
      break;
    case 15:
      if (i % 100 == 15) {
        sh_resp_t r;
        ck_assert_int_eq(
            sh_post(srv.port, b->slow_5ms, strlen(b->slow_5ms), &r), 0);
        sh_assert_error(&r, 504, "deadline_exceeded", "timeout_ms", NULL);
        sh_resp_free(&r);
      } else {
        EXPECT(exchange(&c, "GET", "/healthz", NULL, NULL, 0, NULL, NULL), 200,
               "healthz");
      }
      break;
    case 16:
      if (i % 100 == 16 && round % 2 == 0)
        burst(b->slow, b->slow_expiring);
      else
        EXPECT(exchange(&c, "GET", "/metrics", NULL, NULL, 0, NULL, NULL), 200,
               "metrics");
      break;
    default:
      EXPECT(post_json(&c, "/v1/attention", b->small, close_h, NULL), 200,
             "small, Connection: close");
      break;
    }
  }
  tc_client_free(&t);
  sh_client_free(&c);
}

static void print_diff(const snapshot_t *a, const snapshot_t *b) {
  fprintf(stderr,
          "check_soak: fds %d -> %d, threads %ld -> %ld, VmRSS %ld -> %ld "
          "kB, held %.0f -> %.0f, scratch %.0f -> %.0f, sessions %.0f -> "
          "%.0f, kv used %.0f -> %.0f, inflight %.0f -> %.0f, heap in use "
          "%.0f -> %.0f\n",
          a->fds, b->fds, a->threads, b->threads, a->rss_kb, b->rss_kb, a->held,
          b->held, a->scratch, b->scratch, a->sessions, b->sessions, a->kv_used,
          b->kv_used, a->inflight, b->inflight, a->heap, b->heap);
}

START_TEST(test_soak) {
  const char *args[] = {"--workers",
                        "2",
                        "--threads-per-request",
                        "1",
                        "--http-threads",
                        "2",
                        "--queue-depth",
                        "2",
                        "--connection-timeout-s",
                        "1",
                        "--min-send-rate-bytes-per-s",
                        "8M",
                        "--scratch-keep-bytes",
                        "4M",
                        "--max-body-bytes",
                        "1M",
                        NULL};
  ck_assert_msg(sh_server_start(&srv, args) == 0, "%s", srv.log);
  bodies_t b;
  bodies_init(&b);
  double readers = 0;

  /* the warm-up: one round of the same mix, a reader reset */
  int fd = slow_reader(&b);
  round_of(&b, 0);
  slow_reader_reset(fd, ++readers);
  static snapshot_t base, now; /* 8 KB of fd names each */
  sh_wait_metric(srv.port, "attnd_session_ends_total{cause=\"expired\"}",
                 SOAK_MIX / 100, 10);
  settle(NULL, &base);
  ck_assert_msg(base.inflight == 0, "inflight %.0f", base.inflight);
  double t0 = sh_now();
  for (int round = 1; round <= SOAK_ROUNDS; round++) {
    fd = round % 3 == 1 ? slow_reader(&b) : -1;
    round_of(&b, round);
    if (fd >= 0)
      slow_reader_reset(fd, ++readers);
  }
  /* the sessions left with ttl_s 1 end, and the connections close */
  sh_wait_metric(srv.port, "attnd_session_ends_total{cause=\"expired\"}",
                 (SOAK_ROUNDS + 1) * (SOAK_MIX / 100), 10);
  settle(&base, &now);
  fprintf(stderr, "check_soak: %d rounds of %d in %.1f s\n", SOAK_ROUNDS,
          SOAK_MIX, sh_now() - t0);
  print_diff(&base, &now);
  ck_assert_msg(now.inflight == 0, "inflight %.0f", now.inflight);
  ck_assert_msg(now.fds == base.fds && strcmp(now.fd_list, base.fd_list) == 0,
                "open fds %d, after the warm-up %d:\n%s\nthen:\n%s", now.fds,
                base.fds, now.fd_list, base.fd_list);
  ck_assert_int_eq(now.threads, base.threads);
  /* what requests hold is back to nothing; the workspaces kept may have
   * moved between threads (each keeps at most scratch_keep_bytes) */
  ck_assert_double_eq(now.held - now.scratch, base.held - base.scratch);
  ck_assert_double_le(now.scratch, 4.0 * (4 << 20));
  ck_assert_double_eq(now.sessions, base.sessions);
  ck_assert_double_eq(now.kv_used, base.kv_used);
#if !defined(__SANITIZE_ADDRESS__)
  /* ASan's allocator is not malloc's heap: LeakSanitizer at exit checks
   * that build instead */
  ck_assert_msg(now.heap - base.heap <= SOAK_HEAP_MARGIN,
                "heap in use %.0f bytes after %d requests, %.0f after the "
                "warm-up: more than %d kept",
                now.heap, SOAK_ROUNDS * SOAK_MIX, base.heap, SOAK_HEAP_MARGIN);
#endif
  double n500 = sh_metric(srv.port, "attnd_requests_total{status=\"500\"}");
  ck_assert_msg(n500 == 0, "500s answered: %g", n500);
  bodies_free(&b);
  int st = sh_server_stop(&srv, 20);
  const char *e = strstr(srv.log, "ERROR: LeakSanitizer");
  ck_assert_msg(st == 0, "attnd exited with %d on SIGTERM:\n%.4000s", st,
                e ? e : srv.log);
}
END_TEST

Suite *test_suite(void) {
  Suite *s = suite_create("soak");
  TCase *tc = tcase_create("soak");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, test_soak);
  suite_add_tcase(s, tc);
  return s;
}
