/* bench/server.h: a real attnd for the programs that drive one from outside
 * (e2e-bench, and the integration tests through tests/server_harness.c).
 *
 * - the launcher: start the binary on a free port of 127.0.0.1, read its
 *   port from the "listening" line of its stderr, stop it with SIGTERM and
 *   collect its exit status. A server dies with the thread that started it
 *   (PR_SET_PDEATHSIG);
 * - a minimal HTTP/1.1 client on a plain socket: one keep-alive connection,
 *   requests with a Content-Length body, replies with a Content-Length body
 *   (or one that ends when the server closes).
 * POSIX and the codec library's helpers only: no Check, no libcurl. Neither
 * half touches signal dispositions; sends use MSG_NOSIGNAL. */
#ifndef ATTN_BENCH_SERVER_H
#define ATTN_BENCH_SERVER_H

#include <stddef.h>
#include <sys/types.h>

/* ---- the launcher -------------------------------------------------------- */

typedef struct bench_server {
  pid_t pid;       /* 0 when not running */
  int port;        /* from the listening line */
  int err_fd;      /* read end of the server's stderr, non-blocking; or -1 */
  pid_t owner;     /* the process that started it, the only one that reaps it */
  char log[32768]; /* the start of its stderr, for failure messages */
  size_t log_len;
} bench_server_t;

/* Starts `bin` (NULL: $ATTND_BIN, else build/attnd) with "--port 0 --host
 * 127.0.0.1 --access-log off" and `args` (NULL-terminated flags, may be
 * NULL), and waits up to 10 s for its listening line. Returns 0, or -1 with
 * the reason in s->log (nothing is left running). Call it from the thread
 * that will outlive the server: the server is killed when that thread
 * ends. Borrows bin and args. */
int bench_server_start(bench_server_t *s, const char *bin,
                       const char *const *args);

/* Reads what the server wrote to stderr since the last call into s->log
 * (until it is full; the rest is discarded). Never blocks. */
void bench_server_read_log(bench_server_t *s);

/* Waits up to timeout_s for the server to exit. Returns its exit status
 * (0..255), 128 + the signal that killed it, or -1 if it is still running
 * (then it is left alone) or was not. Only the owner may call it. */
int bench_server_wait(bench_server_t *s, double timeout_s);

/* SIGTERM, then bench_server_wait(timeout_s); a server still running then
 * is killed (SIGKILL) and -1 returned. Only the owner may call it. */
int bench_server_stop(bench_server_t *s, double timeout_s);

/* SIGKILL and reap; no-op when not running. */
void bench_server_kill(bench_server_t *s);

/* ---- the client ---------------------------------------------------------- */

/* A blocking TCP connection to 127.0.0.1:port with TCP_NODELAY, or -1. */
int bench_connect(int port);

/* Sends all of p[0..n) on fd. Returns 0 or -1. */
int bench_send_all(int fd, const void *p, size_t n);

/* One connection to one server, opened on first use and kept alive between
 * requests. One thread at a time. */
typedef struct bench_client {
  int port;
  int fd;         /* -1 while not connected */
  int timeout_ms; /* of a whole exchange; bench_client_init sets 300000 */
} bench_client_t;

/* One reply. Owns body: bench_reply_free. */
typedef struct bench_reply {
  int status; /* 0 when no complete reply came */
  char *body; /* NUL-terminated; NULL when no reply came */
  size_t body_len;
  char server_timing[256]; /* its Server-Timing header, or "" */
  long long header_length; /* Inference-Header-Content-Length, or -1 */
  char error[160];         /* why, when bench_client_post returned -1 */
} bench_reply_t;

void bench_client_init(bench_client_t *c, int port);

/* Closes the connection. */
void bench_client_free(bench_client_t *c);

/* POSTs body[0..len) to `path` with the header lines `headers` (each
 * ending in CRLF: "Content-Type: application/json\r\n"), and reads the
 * whole reply. A kept-alive connection the server has closed in the
 * meantime is opened again once. Returns 0 when a complete reply came
 * (r->status set), -1 otherwise (r->error says why). r must be freed
 * either way. Borrows every argument but r. */
int bench_client_post(bench_client_t *c, const char *path, const char *headers,
                      const void *body, size_t len, bench_reply_t *r);

/* The same with any method (a GET or DELETE with no body: NULL, 0). */
int bench_client_send(bench_client_t *c, const char *method, const char *path,
                      const char *headers, const void *body, size_t len,
                      bench_reply_t *r);

void bench_reply_free(bench_reply_t *r);

#endif
