/* tests/fuzz/fuzz_http.c: the HTTP front, over a loopback socket.
 *
 * LLVMFuzzerInitialize starts the real service in this process (attnd_serve
 * on a thread of its own, with small limits, so that a valid request
 * computes in microseconds), and each input is sent as raw bytes on a new
 * connection to it: the request line, headers and body, or several
 * pipelined requests, or garbage. When the input holds a whole first
 * request, the harness waits for a whole reply (at most FUZZ_HTTP_WAIT_MS,
 * 100) before it half-closes, so that valid requests are computed and
 * answered; an incomplete one is half-closed at once. It reads until the
 * server closes (at most FUZZ_HTTP_READ_MS, 2000) and resets the
 * connection (no TIME_WAIT, so ports never run out); FUZZ_HTTP_VERBOSE=1
 * prints each input's first status line. Since the server runs in this
 * process, its code's coverage guides the fuzzer, and ASan and UBSan see
 * its every thread.
 *
 * Checked: no crash (sanitizers); a reply, when there is one, starts with
 * a well-formed status line, and is never a 500; and after every input the
 * server still answers GET /healthz on a new connection with 200 (every
 * FUZZ_HTTP_HEALTH_EVERY inputs; 1 by default). And the value of each
 * traceparent line of the input, which the server reads for its access
 * log, given to attnd_traceparent_parse here too: it accepts exactly what
 * the Trace Context Recommendation's rule, written out another way below,
 * accepts, with the same ids.
 *
 * The limits are flags; ATTND_* in the environment configure the rest
 * (e.g. ATTND_API_KEYS=k to fuzz behind API keys). Run it with
 * -close_fd_mask=2 (fuzz_http.options): libmicrohttpd logs every refused
 * request. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "fuzz.h"
#include "http/access_log.h"
#include "serve.h"

extern char **environ;

static attnd_config_t cfg;
static int port;
static int opt_read_ms = 2000, opt_wait_ms = 100, opt_health_every = 1;
static int opt_verbose;
static unsigned long inputs;

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* A port of 127.0.0.1 that was free a moment ago. */
static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t n = sizeof a;
  FUZZ_CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
                 getsockname(fd, (struct sockaddr *)&a, &n) == 0,
             "no free port: %s", strerror(errno));
  close(fd);
  return ntohs(a.sin_port);
}

static int dial(void) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  FUZZ_CHECK(fd >= 0, "socket: %s", strerror(errno));
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  /* a signal (libFuzzer's timer) may interrupt connect, which then goes on
   * in the background: wait for it and read its outcome */
  int r = connect(fd, (struct sockaddr *)&a, sizeof a), err = 0;
  if (r < 0 && errno == EINTR) {
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    socklen_t len = sizeof err;
    while ((r = poll(&p, 1, 5000)) < 0 && errno == EINTR)
      ;
    if (r == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 &&
        err == 0)
      r = 0;
    else
      r = -1, errno = err ? err : ETIMEDOUT;
  }
  if (r < 0) {
    err = errno;
    close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

/* Closes with a reset: the client side keeps no TIME_WAIT. */
static void hang_up(int fd) {
  struct linger l = {.l_onoff = 1, .l_linger = 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  close(fd);
}

static void send_all(int fd, const uint8_t *p, size_t n) {
  while (n > 0) {
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      return; /* the server closed, which it may */
    p += k;
    n -= (size_t)k;
  }
}

/* Where the HTTP message at p[0..n) ends (request or reply, framed by
 * Content-Length or chunked), or NULL when it is not all there: this
 * client's rough view, which only decides when to stop waiting. */
static const char *message_end(const char *p, size_t n) {
  const char *h = memmem(p, n, "\r\n\r\n", 4);
  if (h == NULL)
    return NULL;
  const char *body = h + 4, *end = p + n;
  for (const char *l = memmem(p, (size_t)(h - p), "\r\n", 2); l && l < h;
       l = memmem(l + 2, (size_t)(h - l - 2), "\r\n", 2)) {
    const char *f = l + 2;
    if (h - f > 15 && strncasecmp(f, "Content-Length:", 15) == 0) {
      char *e;
      unsigned long long k = strtoull(f + 15, &e, 10);
      return k <= (unsigned long long)(end - body) ? body + k : NULL;
    }
    if (h - f > 18 && strncasecmp(f, "Transfer-Encoding:", 18) == 0) {
      const char *z = memmem(body, (size_t)(end - body), "0\r\n\r\n", 5);
      return z ? z + 5 : NULL;
    }
  }
  return body;
}

/* Where the first final (not 1xx) reply in p[0..n) ends, or NULL. */
static const char *final_reply_end(const char *p, size_t n) {
  const char *end = p + n, *e;
  while ((e = message_end(p, (size_t)(end - p))) != NULL && end - p > 9 &&
         !memcmp(p, "HTTP/1.", 7) && p[9] == '1')
    p = e; /* 100 Continue: the reply follows */
  return e;
}

/* Reads the reply into buf (cap bytes kept, the rest discarded) until the
 * server closes or `ms` pass; returns the bytes kept. The write side stays
 * open until a whole reply is in, or `wait_ms` pass without one, and is
 * closed then (closed early, a request under way would be dropped as the
 * client's, 499, and never reach the workers). */
static size_t exchange(int fd, int complete, char *buf, size_t cap, int ms,
                       int wait_ms) {
  size_t n = 0;
  double start = now_ms(), end = start + ms;
  int open = 1;
  if (!complete) { /* nothing will come before the rest of the request */
    shutdown(fd, SHUT_WR);
    open = 0;
  }
  for (;;) {
    double t = now_ms();
    if (open && (t - start >= wait_ms || final_reply_end(buf, n))) {
      shutdown(fd, SHUT_WR);
      open = 0;
    }
    int left = (int)((open ? start + wait_ms : end) - t) + 1;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int r = poll(&p, 1, left);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0 || (!open && r == 0))
      return n;
    if (r == 0)
      continue;
    char sink[4096];
    char *dst = n < cap ? buf + n : sink;
    size_t room = n < cap ? cap - n : sizeof sink;
    ssize_t k = recv(fd, dst, room, 0);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      return n;
    if (dst == buf + n)
      n += (size_t)k;
  }
}

/* GET /healthz on a new connection: 1 when it answers 200. */
static int healthy(void) {
  int fd = dial();
  if (fd < 0)
    return 0;
  static const char get[] =
      "GET /healthz HTTP/1.1\r\nHost: fuzz\r\nConnection: close\r\n\r\n";
  send_all(fd, (const uint8_t *)get, sizeof get - 1);
  char buf[256];
  size_t n = exchange(fd, 1, buf, sizeof buf - 1, 5000, 5000);
  hang_up(fd);
  buf[n] = '\0';
  return strncmp(buf, "HTTP/1.1 200", 12) == 0;
}

static void *serve_thread(void *arg) {
  (void)arg;
  int r = attnd_serve(&cfg);
  FUZZ_CHECK(0, "attnd_serve returned %d: it stopped", r);
  return NULL;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  /* libmicrohttpd logs each refused request to stderr, which
   * -close_fd_mask=2 silences (fuzz_http.options); checks still report */
  fuzz_report_fd = dup(2);
  signal(SIGPIPE, SIG_IGN);
  const char *e = getenv("FUZZ_HTTP_READ_MS");
  if (e)
    opt_read_ms = atoi(e);
  e = getenv("FUZZ_HTTP_WAIT_MS");
  if (e)
    opt_wait_ms = atoi(e);
  e = getenv("FUZZ_HTTP_HEALTH_EVERY");
  if (e && atoi(e) > 0)
    opt_health_every = atoi(e);
  opt_verbose = getenv("FUZZ_HTTP_VERBOSE") != NULL;

  port = free_port();
  char port_s[16];
  snprintf(port_s, sizeof port_s, "%d", port);
  /* clang-format off */
  char *const flags[] = {
      "--host", "127.0.0.1",
      "--port", port_s,
      "--access-log", "off",
      "--workers", "1",
      "--threads-per-request", "1",
      "--http-threads", "2",
      "--queue-depth", "8",
      "--connection-timeout-s", "2",
      "--connection-buffer-bytes", "32K",
      "--drain-timeout-s", "1",
      NULL,
  };
  /* clang-format on */
  fuzz_small_config(&cfg, flags, environ);
  pthread_t t;
  FUZZ_CHECK(pthread_create(&t, NULL, serve_thread, NULL) == 0,
             "cannot start the server thread");
  pthread_detach(t);
  double end = now_ms() + 20000;
  while (!healthy()) {
    FUZZ_CHECK(now_ms() < end, "the server did not answer on port %d", port);
    usleep(20000);
  }
  return 0;
}

/* A reply starts "HTTP/1.x NNN " with a status of 100..599. */
static void check_reply(const char *r, size_t n) {
  if (n == 0)
    return;
  FUZZ_CHECK(n >= 13 && !memcmp(r, "HTTP/1.", 7) &&
                 (r[7] == '0' || r[7] == '1') && r[8] == ' ' && r[9] >= '1' &&
                 r[9] <= '5' && r[10] >= '0' && r[10] <= '9' && r[11] >= '0' &&
                 r[11] <= '9' && r[12] == ' ',
             "a malformed reply: %.*s", (int)(n < 200 ? n : 200), r);
  FUZZ_CHECK(memcmp(r + 9, "500", 3) != 0, "a 500 reply: %.*s",
             (int)(n < 400 ? n : 400), r);
}

/* The rule for a traceparent value s, another way than access_log.c's
 * walk: the text without the white space around it, at least 55
 * characters; dashes at 2, 35 and 52 and lowercase hex digits between;
 * not version ff, nor ids of zeros alone; and, past 55 characters, a
 * version other than 00 and a dash at 55. */
static int rule_traceparent(const char *s, char *trace, char *parent) {
  static const char hex[] = "0123456789abcdef";
  size_t n = strlen(s), lead = strspn(s, " \t");
  while (n > lead && (s[n - 1] == ' ' || s[n - 1] == '\t'))
    n--;
  s += lead;
  n -= lead;
  if (n < 55)
    return 0;
  for (size_t i = 0; i < 55; i++)
    if (i == 2 || i == 35 || i == 52 ? s[i] != '-'
                                     : memchr(hex, s[i], 16) == NULL)
      return 0;
  if (strncmp(s, "ff", 2) == 0 || strspn(s + 3, "0") >= ATTND_TRACE_ID_LEN ||
      strspn(s + 36, "0") >= ATTND_PARENT_ID_LEN ||
      (n > 55 && (strncmp(s, "00", 2) == 0 || s[55] != '-')))
    return 0;
  snprintf(trace, ATTND_TRACE_ID_LEN + 1, "%.32s", s + 3);
  snprintf(parent, ATTND_PARENT_ID_LEN + 1, "%.16s", s + 36);
  return 1;
}

/* Each line of data[0..size) that starts "traceparent:" (in any case):
 * its value, to the line's end, in a block of its own size (ASan sees a
 * byte read past it), parsed and checked against the rule. */
static void check_traceparents(const uint8_t *data, size_t size) {
  static const char name[] = "traceparent:";
  const char *l = (const char *)data, *end = l + size;
  while (l < end) {
    const char *eol = memchr(l, '\n', (size_t)(end - l));
    if (eol == NULL)
      eol = end;
    size_t n = (size_t)(eol - l);
    if (n >= sizeof name - 1 && strncasecmp(l, name, sizeof name - 1) == 0) {
      n -= sizeof name - 1;
      n -= n && l[sizeof name - 2 + n] == '\r';
      char *v = malloc(n + 1);
      FUZZ_CHECK(v != NULL, "out of memory");
      memcpy(v, l + sizeof name - 1, n);
      v[n] = 0;
      char t[2][ATTND_TRACE_ID_LEN + 1] = {""},
                                     p[2][ATTND_PARENT_ID_LEN + 1] = {""};
      int got = attnd_traceparent_parse(v, t[0], p[0]);
      int want = rule_traceparent(v, t[1], p[1]);
      FUZZ_CHECK(got == want && strcmp(t[0], t[1]) == 0 &&
                     strcmp(p[0], p[1]) == 0,
                 "traceparent '%s': parsed %d (%s, %s), the rule says %d "
                 "(%s, %s)",
                 v, got, t[0], p[0], want, t[1], p[1]);
      free(v);
    }
    l = eol + 1;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  check_traceparents(data, size);
  int fd = dial();
  FUZZ_CHECK(fd >= 0, "the server refuses connections: %s", strerror(errno));
  send_all(fd, data, size);
  static char reply[1 << 16];
  int complete = message_end((const char *)data, size) != NULL;
  size_t n =
      exchange(fd, complete, reply, sizeof reply, opt_read_ms, opt_wait_ms);
  hang_up(fd);
  if (opt_verbose) {
    const char *eol = memchr(reply, '\r', n);
    dprintf(fuzz_report_fd, "fuzz_http: %zu bytes, %s: %.*s\n", size,
            complete ? "complete" : "incomplete",
            (int)(eol      ? (size_t)(eol - reply)
                  : n < 80 ? n
                           : 80),
            reply);
  }
  check_reply(reply, n);
  if (++inputs % (unsigned long)opt_health_every == 0 && !healthy()) {
    usleep(200000); /* one retry: a connection slot may be freeing */
    FUZZ_CHECK(healthy(), "the server no longer answers GET /healthz");
  }
  return 0;
}
