/* bench/server.c: see server.h.
 *
 * Nothing here trusts the server: every wait is bounded, a server that does
 * not come up is killed rather than waited for, and a reply is read no
 * further than its headers say. */
#include "server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "codec/util.h"

/* ---- the launcher -------------------------------------------------------- */

static void log_append(bench_server_t *s, const char *p, size_t n) {
  size_t room = sizeof s->log - 1 - s->log_len;
  if (n > room)
    n = room;
  memcpy(s->log + s->log_len, p, n);
  s->log_len += n;
  s->log[s->log_len] = 0;
}

void bench_server_read_log(bench_server_t *s) {
  char buf[4096];
  if (s->err_fd < 0)
    return;
  for (;;) {
    ssize_t k = read(s->err_fd, buf, sizeof buf);
    if (k > 0) {
      log_append(s, buf, (size_t)k);
      continue;
    }
    if (k < 0 && errno == EINTR)
      continue;
    break; /* EAGAIN, EOF or an error */
  }
}

/* The port of the listening line in s->log, or 0 while there is none. */
static int listening_port(const bench_server_t *s) {
  const char *line = strstr(s->log, "\"event\":\"listening\"");
  if (line == NULL)
    return 0;
  const char *end = strchr(line, '\n');
  const char *p = strstr(line, "\"port\":");
  if (end == NULL || p == NULL || p > end)
    return 0;
  return atoi(p + 7);
}

/* The reaped server is gone: forget it and close its pipe. */
static void forget(bench_server_t *s) {
  s->pid = 0;
  if (s->err_fd >= 0)
    close(s->err_fd);
  s->err_fd = -1;
}

int bench_server_start(bench_server_t *s, const char *bin,
                       const char *const *args) {
  memset(s, 0, sizeof *s);
  s->err_fd = -1;
  if (bin == NULL || *bin == 0)
    bin = getenv("ATTND_BIN");
  if (bin == NULL || *bin == 0)
    bin = "build/attnd";
  const char *argv[64] = {bin,         "--port",       "0",  "--host",
                          "127.0.0.1", "--access-log", "off"};
  int argc = 7;
  for (int i = 0; args && args[i] && argc < 63; i++)
    argv[argc++] = args[i];
  argv[argc] = NULL;

  int p[2];
  if (pipe2(p, O_CLOEXEC) < 0) {
    snprintf(s->log, sizeof s->log, "pipe: %s", strerror(errno));
    return -1;
  }
  fcntl(p[1], F_SETPIPE_SZ, 1 << 20); /* room for the server to write */
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    snprintf(s->log, sizeof s->log, "fork: %s", strerror(errno));
    close(p[0]);
    close(p[1]);
    return -1;
  }
  if (pid == 0) {
    /* Only async-signal-safe calls: the parent may have threads. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
      _exit(127);
    int null = open("/dev/null", O_RDWR);
    if (null >= 0) {
      dup2(null, 0);
      dup2(null, 1);
    }
    dup2(p[1], 2);
    /* the server must not inherit the caller's signal dispositions */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    sigaction(SIGPIPE, &sa, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    execv(bin, (char *const *)argv);
    _exit(127);
  }
  close(p[1]);
  /* published: a thread of the caller may wait on it to signal the server
   * during its start (check_security's test_sighup_at_start) */
  __atomic_store_n(&s->pid, pid, __ATOMIC_RELEASE);
  s->owner = getpid();
  s->err_fd = p[0];
  fcntl(s->err_fd, F_SETFL, fcntl(s->err_fd, F_GETFL) | O_NONBLOCK);

  double deadline = attnd_now_ms() + 10e3;
  while ((s->port = listening_port(s)) == 0) {
    double left = deadline - attnd_now_ms();
    int st;
    if (left <= 0 || waitpid(pid, &st, WNOHANG) == pid) {
      if (left > 0) /* it exited, and is reaped */
        s->pid = 0;
      bench_server_read_log(s);
      char why[128];
      snprintf(why, sizeof why, "\n[launcher: %s did not listen%s]", bin,
               left <= 0 ? " within 10 s" : "; it exited");
      log_append(s, why, strlen(why));
      if (s->pid)
        bench_server_kill(s); /* closes err_fd */
      forget(s);
      return -1;
    }
    struct pollfd pf = {.fd = s->err_fd, .events = POLLIN};
    poll(&pf, 1, left > 50 ? 50 : 1);
    bench_server_read_log(s);
  }
  return 0;
}

int bench_server_wait(bench_server_t *s, double timeout_s) {
  if (s->pid == 0)
    return -1;
  double deadline = attnd_now_ms() + timeout_s * 1e3;
  for (;;) {
    int st;
    if (waitpid(s->pid, &st, WNOHANG) == s->pid) {
      bench_server_read_log(s);
      forget(s);
      if (WIFEXITED(st))
        return WEXITSTATUS(st);
      return 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    }
    bench_server_read_log(s);
    if (attnd_now_ms() >= deadline)
      return -1;
    poll(NULL, 0, 5); /* a 5 ms nap; a signal may cut it short */
  }
}

int bench_server_stop(bench_server_t *s, double timeout_s) {
  if (s->pid == 0)
    return -1;
  kill(s->pid, SIGTERM);
  int st = bench_server_wait(s, timeout_s);
  if (st < 0)
    bench_server_kill(s);
  return st;
}

void bench_server_kill(bench_server_t *s) {
  if (s->pid == 0)
    return;
  kill(s->pid, SIGKILL);
  waitpid(s->pid, NULL, 0);
  forget(s);
}

/* ---- the client ---------------------------------------------------------- */

int bench_connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
    close(fd);
    return -1;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

int bench_send_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n > 0) {
    ssize_t k = send(fd, c, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      return -1;
    c += k;
    n -= (size_t)k;
  }
  return 0;
}

void bench_client_init(bench_client_t *c, int port) {
  c->port = port;
  c->fd = -1;
  c->timeout_ms = 300000;
}

void bench_client_free(bench_client_t *c) {
  if (c->fd >= 0)
    close(c->fd);
  c->fd = -1;
}

void bench_reply_free(bench_reply_t *r) {
  free(r->body);
  memset(r, 0, sizeof *r);
}

/* recv into p[0..n) before `deadline` (attnd_now_ms). Returns the bytes
 * read, 0 when the peer closed, -1 on an error or at the deadline. */
static ssize_t recv_by(int fd, void *p, size_t n, double deadline) {
  for (;;) {
    double left = deadline - attnd_now_ms();
    if (left <= 0) {
      errno = ETIMEDOUT;
      return -1;
    }
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    int pr = poll(&pf, 1, left > 1000 ? 1000 : (int)left + 1);
    if (pr < 0 && errno != EINTR)
      return -1;
    if (pr <= 0)
      continue;
    ssize_t k = recv(fd, p, n, 0);
    if (k < 0 && errno == EINTR)
      continue;
    return k;
  }
}

/* The value of header `name` in the header block `head` (NUL-terminated,
 * the status line first), or NULL. */
static const char *header(const char *head, const char *name) {
  size_t nl = strlen(name);
  for (const char *l = strstr(head, "\r\n"); l; l = strstr(l, "\r\n")) {
    l += 2;
    if (strncasecmp(l, name, nl) == 0 && l[nl] == ':')
      return l + nl + 1 + strspn(l + nl + 1, " \t");
  }
  return NULL;
}

enum { EXCHANGE_STALE = -2 }; /* nothing came back: the connection was dead */

/* Sends one request on c->fd and reads its reply into r. Returns 0, -1 with
 * r->error set, or EXCHANGE_STALE when the request could not be sent or the
 * peer closed before a byte of reply. Sets *close_after when the reply
 * ends the connection. */
static int exchange(bench_client_t *c, const char *head, size_t head_len,
                    const void *body, size_t len, double deadline,
                    bench_reply_t *r, int *close_after) {
  if (bench_send_all(c->fd, head, head_len) < 0 ||
      bench_send_all(c->fd, body, len) < 0) {
    int dead = errno == EPIPE || errno == ECONNRESET;
    attnd_fail(r->error, sizeof r->error, "send: %s", strerror(errno));
    return dead ? EXCHANGE_STALE : -1;
  }
  /* pass 1: the header block, and whatever of the body came with it */
  enum { HEAD_MAX = 65536 };
  char *hb = malloc(HEAD_MAX + 1), *end = NULL;
  size_t got = 0;
  if (hb == NULL)
    return attnd_fail(r->error, sizeof r->error, "out of memory");
  while (end == NULL) {
    ssize_t k = got < HEAD_MAX
                    ? recv_by(c->fd, hb + got, HEAD_MAX - got, deadline)
                    : -1;
    if (k <= 0) {
      int stale = k == 0 && got == 0;
      free(hb);
      if (got == HEAD_MAX)
        return attnd_fail(r->error, sizeof r->error,
                          "reply headers over %d bytes", HEAD_MAX);
      attnd_fail(r->error, sizeof r->error, "reading the reply: %s",
                 k == 0 ? "connection closed" : strerror(errno));
      return stale ? EXCHANGE_STALE : -1;
    }
    size_t from = got > 3 ? got - 3 : 0;
    got += (size_t)k;
    hb[got] = 0;
    end = memmem(hb + from, got - from, "\r\n\r\n", 4);
  }
  end[2] = 0; /* the header block keeps its last CRLF */
  size_t in_head = (size_t)(end + 4 - hb), extra = got - in_head;
  const char *cl = header(hb, "Content-Length");
  const char *te = header(hb, "Transfer-Encoding");
  const char *conn = header(hb, "Connection");
  const char *st = header(hb, "Server-Timing");
  const char *hl = header(hb, "Inference-Header-Content-Length");
  if (st)
    snprintf(r->server_timing, sizeof r->server_timing, "%.*s",
             (int)strcspn(st, "\r"), st);
  r->header_length = hl ? strtoll(hl, NULL, 10) : -1;
  int status = strncmp(hb, "HTTP/1.", 7) == 0 ? atoi(hb + 9) : 0;
  *close_after = conn && strncasecmp(conn, "close", 5) == 0;
  if (status < 100 || (te && strncasecmp(te, "identity", 8) != 0)) {
    attnd_fail(r->error, sizeof r->error, "unsupported reply: %.100s", hb);
    free(hb);
    return -1;
  }
  /* pass 2: the body, Content-Length bytes or up to the peer's close */
  /* 1xx, 204 and 304 have no body (RFC 9112 6.3) */
  int bodiless = status < 200 || status == 204 || status == 304;
  size_t want = bodiless ? 0 : cl ? strtoull(cl, NULL, 10) : SIZE_MAX;
  size_t cap = cl ? want + 1 : (extra > 65536 ? extra : 65536) + 1;
  if (!cl && !bodiless)
    *close_after = 1;
  if (extra > want)
    extra = want; /* the rest is not ours to read */
  r->body = malloc(cap);
  if (r->body == NULL) {
    free(hb);
    return attnd_fail(r->error, sizeof r->error, "out of memory for %zu bytes",
                      cap);
  }
  memcpy(r->body, end + 4, extra);
  free(hb);
  r->body_len = extra;
  while (r->body_len < want) {
    if (r->body_len + 1 == cap) { /* no Content-Length: grow */
      char *b = realloc(r->body, 2 * cap);
      if (b == NULL)
        return attnd_fail(r->error, sizeof r->error, "out of memory");
      r->body = b;
      cap *= 2;
    }
    ssize_t k =
        recv_by(c->fd, r->body + r->body_len, cap - 1 - r->body_len, deadline);
    if (k == 0 && !cl)
      break;
    if (k <= 0) {
      r->body[r->body_len] = 0;
      return attnd_fail(r->error, sizeof r->error,
                        "reply body cut at %zu of %zu bytes: %s", r->body_len,
                        want, k == 0 ? "connection closed" : strerror(errno));
    }
    r->body_len += (size_t)k;
  }
  r->body[r->body_len] = 0;
  r->status = status;
  return 0;
}

int bench_client_post(bench_client_t *c, const char *path, const char *headers,
                      const void *body, size_t len, bench_reply_t *r) {
  return bench_client_send(c, "POST", path, headers, body, len, r);
}

int bench_client_send(bench_client_t *c, const char *method, const char *path,
                      const char *headers, const void *body, size_t len,
                      bench_reply_t *r) {
  memset(r, 0, sizeof *r);
  r->header_length = -1;
  char head[1024];
  int hn = snprintf(head, sizeof head,
                    "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                    "%sContent-Length: %zu\r\n\r\n",
                    method, path, c->port, headers, len);
  if (hn < 0 || (size_t)hn >= sizeof head)
    return attnd_fail(r->error, sizeof r->error, "path too long: %.80s", path);
  double deadline = attnd_now_ms() + c->timeout_ms;
  for (int attempt = 0;; attempt++) {
    int reused = c->fd >= 0;
    if (!reused) {
      if ((c->fd = bench_connect(c->port)) < 0)
        return attnd_fail(r->error, sizeof r->error,
                          "connect to 127.0.0.1:%d: %s", c->port,
                          strerror(errno));
      /* a server that stops reading must not block the send for ever */
      struct timeval tv = {c->timeout_ms / 1000, c->timeout_ms % 1000 * 1000};
      setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    }
    int close_after = 0;
    int rc =
        exchange(c, head, (size_t)hn, body, len, deadline, r, &close_after);
    if (rc < 0 || close_after)
      bench_client_free(c);
    if (rc == EXCHANGE_STALE && reused && attempt == 0) {
      bench_reply_free(r); /* the server closed an idle connection: again */
      continue;
    }
    return rc < 0 ? -1 : 0;
  }
}
