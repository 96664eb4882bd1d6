/* server/http/http.c: libmicrohttpd's daemon and its access handler: each
 * request from its first callback (routed by the table, http/router.h) to
 * its completion (logged, counted, freed). exchange.h has the walk from
 * socket to reply; server.h the contract. */
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "api/api.h"
#include "codec/pool.h"
#include "codec/util.h"
#include "http/access_log.h"
#include "http/listen.h"
#include "http/tls.h"
#include "sched/run.h"

/* Freed requests, kept for the next ones (64: about 600 KB). */
static attnd_pool_t req_pool = ATTND_POOL_INIT(sizeof(attnd_http_req_t), 64);

static attnd_http_req_t *req_new(void) {
  attnd_http_req_t *r = attnd_pool_get(&req_pool);
  if (r) {
    memset(r, 0, offsetof(attnd_http_req_t, body_mem));
    r->model = r->model_mem;
    r->version = r->version_mem;
    r->name = r->name_mem;
    r->method = r->method_mem;
    r->path = r->path_mem;
  }
  return r;
}

/* ---- the deadline for a request's headers ----------------------------------
 *
 * libmicrohttpd's connection_timeout_s counts from a connection's last
 * byte: headers sent a byte at a time, each sooner than the timeout after
 * the last, held their connection for as long as the client liked, before
 * any key was checked, and max_connections such clients locked out every
 * other one (slowloris). So each connection is listed from its opening,
 * and while it waits for a request's headers (from its opening, or from
 * its last reply) it has connection_timeout_s in all to send them; then
 * the loop thread's sweep shuts its socket down, and libmicrohttpd, seeing
 * the end of the stream, closes it.
 *
 * A body has a pace: the library's timeout, from the last byte, let a
 * client that sent a few bytes each connection_timeout_s hold the share of
 * the budget its Content-Length took (up to max_body_bytes) for as long as
 * it liked. From the moment its headers are in, a request's client must
 * have sent min_recv_rate_bytes_per_s for every second past a grace of
 * connection_timeout_s, until its body's last byte, as the kernel counts
 * it (tcpi_bytes_received); a body that falls behind has its socket shut
 * down by the sweep, and libmicrohttpd ends the request.
 *
 * A reply has a pace as well: the library's timeout alone let a client
 * that took a few bytes each connection_timeout_s hold its reply (up to
 * max_response_bytes, counted in the memory budget) for as long as it
 * liked, and a handful of them filled max_memory_bytes. From the moment a
 * reply is queued, the client must have taken min_send_rate_bytes_per_s
 * for every second past a grace of connection_timeout_s, as the kernel
 * counts it: the bytes of the connection the client's TCP acknowledged
 * (tcpi_bytes_acked, Linux 4.1 on), which a client holds back by not
 * reading, and which a reply in libmicrohttpd's own buffer or the socket's
 * does not advance. A reply that falls behind has its connection reset by
 * the same sweep (a connect to AF_UNSPEC: Linux's TCP then sends a RST
 * and drops what it still holds of the reply, at once; a shutdown would
 * send that on, and SO_LINGER 0 would drop it only at libmicrohttpd's
 * close, later): libmicrohttpd's next send fails, it ends the request (not
 * complete, in the access log), frees the reply and closes the socket. */

typedef struct attnd_http_conn {
  struct attnd_http_conn *prev, *next;
  int fd;             /* -1 once shut down */
  int in_request;     /* between a request's first callback and completion */
  double since;       /* when it began to wait for a request's headers, or
                         when they were all in (ms) */
  int body_done;      /* its request's body all in, or its pace not
                         measurable */
  uint64_t received;  /* the connection's bytes received when the request's
                         headers were all in */
  double reply_since; /* when its reply was queued (ms); 0: none queued, or
                         its pace not measurable */
  uint64_t acked;     /* the connection's bytes acknowledged then */
  size_t reply_bytes; /* the reply's body */
  int had_request;    /* a request line has parsed (on_uri) */
  int body_in;        /* its request's body all in, or no request begun */
  int slow;           /* counted in s->slow_bodies (sweep_body_pace) */
  double swept_at;    /* the last sweep that read its bytes (ms); 0: none */
  uint64_t swept;     /* the connection's bytes received then */
  char request_id[96];
  char client[INET6_ADDRSTRLEN + IF_NAMESIZE + 1]; /* its peer's address */
  attnd_server_t *s;
  struct attnd_tls_pair *tls; /* the pair its handshake got, held until it
                                 closes (on_tls_cert) */
} attnd_http_conn_t;

/* The peer's address `a` as the access log gives it, into out (empty when
 * it cannot be said): an IPv4 peer of a dual-stack socket (`::`) arrives
 * as ::ffff:a.b.c.d, and is written a.b.c.d, as the same client is where
 * attnd listens on 0.0.0.0, so that one client is one address in the log
 * however attnd listens; an IPv6 peer in its compressed form, with its
 * %zone where link-local. Once a connection. */
static void client_addr(const struct sockaddr *a, char *out, size_t n) {
  out[0] = 0;
  if (a == NULL)
    return;
  if (a->sa_family == AF_INET6) {
    const struct sockaddr_in6 *a6 = (const struct sockaddr_in6 *)a;
    if (IN6_IS_ADDR_V4MAPPED(&a6->sin6_addr)) {
      if (inet_ntop(AF_INET, &a6->sin6_addr.s6_addr[12], out, (socklen_t)n) ==
          NULL)
        out[0] = 0;
      return;
    }
  } else if (a->sa_family != AF_INET) {
    return;
  }
  socklen_t len = a->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                           : sizeof(struct sockaddr_in);
  if (getnameinfo(a, len, out, (socklen_t)n, NULL, 0, NI_NUMERICHOST) != 0)
    out[0] = 0;
}

/* c's body no longer counted slow. Under conns_lock. */
static void conn_not_slow(attnd_server_t *s, attnd_http_conn_t *c) {
  if (c->slow) {
    c->slow = 0;
    atomic_fetch_sub(&s->slow_bodies, 1);
  }
}

/* libmicrohttpd's notice of a connection opened or closed: lists it, or
 * takes it off the list. The socket is closed only after the notice of
 * its closing, so a listed fd is always the connection's own. Any HTTP
 * thread. */
static void on_connection(void *cls, struct MHD_Connection *conn, void **ctx,
                          enum MHD_ConnectionNotificationCode code) {
  attnd_server_t *s = cls;
  attnd_http_conn_t *c = *ctx;
  if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
    const union MHD_ConnectionInfo *di =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_DAEMON);
    if (di)
      attnd_listener_closed(s->listener, di->daemon);
  }
  if (code == MHD_CONNECTION_NOTIFY_STARTED) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci == NULL || (c = calloc(1, sizeof *c)) == NULL)
      return; /* unlisted: the library's timeout alone */
    c->fd = ci->connect_fd;
    c->s = s;
    c->since = attnd_now_ms();
    ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    client_addr(ci ? ci->client_addr : NULL, c->client, sizeof c->client);
    uv_mutex_lock(&s->conns_lock);
    c->next = s->conns;
    if (s->conns)
      s->conns->prev = c;
    s->conns = c;
    uv_mutex_unlock(&s->conns_lock);
    *ctx = c;
  } else if (c) {
    uint64_t written;
    uv_mutex_lock(&s->conns_lock);
    /* libmicrohttpd wrote to a connection on which no request line
     * parsed: its own refusal of that line (414, 505, 400), which no
     * attnd code saw; its status is gone by now. Plain HTTP alone: TLS
     * writes its handshake. The SYN and the FIN take a sequence number
     * each, which the kernel counts as written: 2 is nothing written. */
    if (!c->had_request && c->fd >= 0 && !s->https &&
        attnd_tcp_written(c->fd, &written) == 0 && written > 2)
      attnd_metrics_reject(s->metrics, ATTND_REJECT_REQUEST_LINE);
    conn_not_slow(s, c);
    if (c->prev)
      c->prev->next = c->next;
    else
      s->conns = c->next;
    if (c->next)
      c->next->prev = c->prev;
    uv_mutex_unlock(&s->conns_lock);
    /* the TLS session is gone by now (libmicrohttpd frees it before this
     * notice): nothing reads the pair any more */
    attnd_tls_unref(c->tls);
    free(c);
    *ctx = NULL;
  }
}

static attnd_http_conn_t *conn_of(struct MHD_Connection *conn) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  return ci ? ci->socket_context : NULL;
}

/* Marks conn's request begun (its headers all in: r) or completed (NULL:
 * the next request's headers awaited from now). Any HTTP thread. */
static void conn_mark(attnd_server_t *s, struct MHD_Connection *conn,
                      const attnd_http_req_t *r) {
  attnd_http_conn_t *c = conn_of(conn);
  if (c == NULL)
    return;
  uv_mutex_lock(&s->conns_lock);
  c->in_request = r != NULL;
  c->body_in = r == NULL;
  conn_not_slow(s, c);
  c->swept_at = 0;
  c->since = attnd_now_ms();
  c->reply_since = 0;
  c->body_done = r == NULL || s->cfg->min_recv_rate_bytes_per_s == 0 ||
                 c->fd < 0 || attnd_tcp_bytes(c->fd, NULL, &c->received) != 0;
  if (r)
    memcpy(c->request_id, r->request_id, sizeof c->request_id);
  uv_mutex_unlock(&s->conns_lock);
}

/* Notes that r's body is all in: its pace no longer counts. Once a
 * request. */
static void conn_body_done(attnd_http_req_t *r) {
  attnd_http_conn_t *c = conn_of(r->conn);
  r->body_done = 1;
  if (c == NULL)
    return;
  uv_mutex_lock(&r->srv->conns_lock);
  c->body_done = 1;
  c->body_in = 1;
  conn_not_slow(r->srv, c);
  uv_mutex_unlock(&r->srv->conns_lock);
}

void attnd_http_conn_replying(attnd_http_req_t *r) {
  attnd_server_t *s = r->srv;
  attnd_http_conn_t *c = conn_of(r->conn);
  uint64_t acked;
  if (c == NULL || s->cfg->min_send_rate_bytes_per_s == 0)
    return;
  uv_mutex_lock(&s->conns_lock);
  if (c->fd >= 0 && attnd_tcp_bytes(c->fd, &acked, NULL) == 0) {
    c->reply_since = attnd_now_ms();
    c->acked = acked;
    c->reply_bytes = r->bytes_out;
  }
  uv_mutex_unlock(&s->conns_lock);
}

/* Whether c's reply has fallen behind min_send_rate_bytes_per_s at `now`,
 * with what the client took of it into *taken. Under conns_lock. */
static int reply_behind(const attnd_server_t *s, const attnd_http_conn_t *c,
                        double now, uint64_t *taken) {
  double grace = (double)s->cfg->connection_timeout_s * 1000.0,
         late = now - c->reply_since - grace;
  uint64_t acked;
  if (c->reply_since == 0 || late <= 0 ||
      attnd_tcp_bytes(c->fd, &acked, NULL) != 0)
    return 0;
  *taken = acked - c->acked;
  return (double)*taken <
         (double)s->cfg->min_send_rate_bytes_per_s * late / 1000.0;
}

/* Whether c's request body has fallen behind min_recv_rate_bytes_per_s at
 * `now`, with what the client sent of it into *sent. Under conns_lock. */
static int body_behind(const attnd_server_t *s, const attnd_http_conn_t *c,
                       double now, uint64_t *sent) {
  double grace = (double)s->cfg->connection_timeout_s * 1000.0,
         late = now - c->since - grace;
  uint64_t received;
  if (c->body_done || late <= 0 || attnd_tcp_bytes(c->fd, NULL, &received) != 0)
    return 0;
  *sent = received - c->received;
  return (double)*sent <
         (double)s->cfg->min_recv_rate_bytes_per_s * late / 1000.0;
}

/* Counts c's request a slow sender, `sent` bytes of its body in, and
 * writes the line that says so into log. Under conns_lock. */
static void slow_sender(const attnd_server_t *s, const attnd_http_conn_t *c,
                        uint64_t sent, double now, attnd_buf_t *log) {
  attnd_metrics_reject(s->metrics, ATTND_REJECT_SLOW_SENDER);
  attnd_buf_printf(log,
                   "{\"event\":\"slow_sender\",\"request_id\":\"%s\","
                   "\"sent_bytes\":%llu,\"seconds\":%.3f,"
                   "\"min_recv_rate_bytes_per_s\":%lld}\n",
                   c->request_id, (unsigned long long)sent,
                   (now - c->since) / 1000.0,
                   (long long)s->cfg->min_recv_rate_bytes_per_s);
}

/* Counts c's request a slow reader, `taken` bytes of its reply taken, and
 * writes the line that says so into log. Under conns_lock. */
static void slow_reader(const attnd_server_t *s, const attnd_http_conn_t *c,
                        uint64_t taken, double now, attnd_buf_t *log) {
  attnd_metrics_reject(s->metrics, ATTND_REJECT_SLOW_READER);
  attnd_buf_printf(log,
                   "{\"event\":\"slow_reader\",\"request_id\":\"%s\","
                   "\"reply_bytes\":%zu,\"taken_bytes\":%llu,"
                   "\"seconds\":%.3f,\"min_send_rate_bytes_per_s\":%lld}\n",
                   c->request_id, c->reply_bytes, (unsigned long long)taken,
                   (now - c->reply_since) / 1000.0,
                   (long long)s->cfg->min_send_rate_bytes_per_s);
}

/* Resets c's connection: Linux's TCP sends a RST and drops what it still
 * holds of the reply, at once (a shutdown where that fails). Its fd is
 * then -1. Under conns_lock. */
static void conn_reset(attnd_http_conn_t *c) {
  if (connect(c->fd, &(struct sockaddr){.sa_family = AF_UNSPEC},
              sizeof(struct sockaddr)) != 0)
    shutdown(c->fd, SHUT_RDWR);
  c->fd = -1;
}

/* A body that arrives slower than this keeps its HTTP thread busy for
 * about a third of the time or less (decoding runs at 100 MB/s or more,
 * docs/performance.md), and from the sweep after one that saw it so, no
 * longer counts as a CPU in use where threads_per_request = auto shares
 * them out (scheduler.h, attnd_sched_set_arriving). */
#define BUSY_BODY_BYTES_PER_S (32.0 * 1024 * 1024)

/* Whether c's body came slower than BUSY_BODY_BYTES_PER_S since the last
 * sweep: counts it in s->slow_bodies, or takes it out. Loop thread, under
 * conns_lock. */
static void sweep_body_pace(attnd_server_t *s, attnd_http_conn_t *c,
                            double now) {
  uint64_t received;
  if (attnd_tcp_bytes(c->fd, NULL, &received) != 0)
    return;
  if (c->swept_at > 0 && now > c->swept_at) {
    int slow = (double)(received - c->swept) <
               BUSY_BODY_BYTES_PER_S * (now - c->swept_at) / 1000.0;
    if (slow && !c->slow) {
      c->slow = 1;
      atomic_fetch_add(&s->slow_bodies, 1);
    } else if (!slow) {
      conn_not_slow(s, c);
    }
  }
  c->swept = received;
  c->swept_at = now;
}

/* Shuts down the connections that have waited connection_timeout_s for a
 * request's headers, and resets those whose body or reply has fallen behind
 * min_recv_rate_bytes_per_s or min_send_rate_bytes_per_s (each logged
 * once: its fd is then -1). Loop thread. */
static void on_header_sweep(uv_timer_t *t) {
  attnd_server_t *s = t->data;
  double now = attnd_now_ms(),
         limit = (double)s->cfg->connection_timeout_s * 1000.0;
  attnd_buf_t log; /* written once the lock is let go */
  attnd_buf_init(&log);
  uv_mutex_lock(&s->conns_lock);
  for (attnd_http_conn_t *c = s->conns; c; c = c->next) {
    uint64_t taken = 0, sent = 0;
    if (c->fd < 0)
      continue;
    if (c->in_request && !c->body_in)
      sweep_body_pace(s, c, now);
    int body = c->in_request && body_behind(s, c, now, &sent);
    if (c->in_request ? !body && !reply_behind(s, c, now, &taken)
                      : now - c->since <= limit)
      continue;
    if (body) /* counted before the body is freed */
      slow_sender(s, c, sent, now, &log);
    else if (c->in_request) /* counted before the reply is freed */
      slow_reader(s, c, taken, now, &log);
    if (c->in_request) { /* reset now, what the kernel holds dropped */
      conn_reset(c);
    } else {
      shutdown(c->fd, SHUT_RDWR);
      c->fd = -1;
    }
  }
  uv_mutex_unlock(&s->conns_lock);
  if (log.len && !log.oom)
    fwrite(log.data, 1, log.len, stderr);
  attnd_buf_free(&log);
}

/* libmicrohttpd closed conn, idle for connection_timeout_s, while its
 * request's body was still paced (not all in), or while its reply was
 * (queued, not all sent: the client stopped reading). A body that stalled
 * is a slow sender's, and a reply that stalled a slow reader's, as those
 * the sweep finds behind are; which of the two closes it first is a race
 * (the library's timeout counts from the last byte, the sweep's grace of
 * the same length from the headers or the reply). Counted once: the sweep
 * takes no connection whose fd is -1. A reply's connection is reset, as
 * the sweep's is, before the library closes the socket: what the kernel
 * holds of the reply is dropped, not sent on as the client reads. Any
 * HTTP thread. */
static void conn_timed_out(attnd_server_t *s, struct MHD_Connection *conn) {
  attnd_http_conn_t *c = conn_of(conn);
  uint64_t received, acked;
  if (c == NULL)
    return;
  attnd_buf_t log;
  attnd_buf_init(&log);
  uv_mutex_lock(&s->conns_lock);
  if (c->in_request && !c->body_done && c->fd >= 0 &&
      attnd_tcp_bytes(c->fd, NULL, &received) == 0) {
    slow_sender(s, c, received - c->received, attnd_now_ms(), &log);
    c->fd = -1;
  } else if (c->in_request && c->reply_since != 0 && c->fd >= 0 &&
             attnd_tcp_bytes(c->fd, &acked, NULL) == 0) {
    slow_reader(s, c, acked - c->acked, attnd_now_ms(), &log);
    conn_reset(c);
  }
  uv_mutex_unlock(&s->conns_lock);
  if (log.len && !log.oom)
    fwrite(log.data, 1, log.len, stderr);
  attnd_buf_free(&log);
}

/* ---- the access handler ---------------------------------------------------
 */

/* The lines of the headers the request's ids come from: X-Request-Id's
 * first value, and whether a later one differs from it; traceparent's
 * first value, and how many lines it has. */
typedef struct id_lines {
  const char *first;
  int differ;
  const char *trace;
  int n_trace;
} id_lines_t;

static enum MHD_Result id_line(void *cls, enum MHD_ValueKind kind,
                               const char *key, const char *value) {
  id_lines_t *l = cls;
  (void)kind;
  const char *v = value ? value : "";
  if (strcasecmp(key, "X-Request-Id") == 0) {
    if (l->first == NULL)
      l->first = v;
    else if (strcmp(v, l->first) != 0)
      l->differ = 1;
  } else if (strcasecmp(key, "traceparent") == 0 && l->n_trace++ == 0) {
    l->trace = v;
  }
  return MHD_YES;
}

void attnd_http_own_request_id(attnd_http_req_t *r) {
  uint64_t k = atomic_fetch_add(&r->srv->next_id, 1); /* "%016llx-%llu" */
  attnd_fmt_hex64(r->request_id, r->srv->id_prefix);
  r->request_id[16] = '-';
  attnd_fmt_i64(r->request_id + 17, (int64_t)(k & INT64_MAX));
}

/* The request's ids, from one walk of its headers. Its request id: its
 * X-Request-Id, where every line of it gives the
 * same value of 1 to 95 visible ASCII characters other than '"' and '\'
 * (so that it goes into log lines and headers as it is); else one of
 * attnd's own, unique in the process. Lines that differ, and a value that
 * a NUL cuts, are refused (framing.c) with an id of attnd's, not with
 * either of theirs, nor with the part before the NUL. And its trace
 * context, from a traceparent that parses, for the access log; one that
 * does not, or one given in two lines (which the Trace Context test suite
 * takes as invalid: which is the caller's?), is ignored, never refused, as
 * the spec asks of a receiver that cannot parse it. First callback (or
 * completion, where libmicrohttpd answered before it). */
static void set_request_id(attnd_http_req_t *r) {
  id_lines_t l = {0};
  MHD_get_connection_values(r->conn, MHD_HEADER_KIND, id_line, &l);
  const char *h = l.differ ? NULL : l.first;
  size_t n = h ? strlen(h) : 0;
  int ok = n > 0 && n < sizeof r->request_id;
  for (size_t i = 0; ok && i < n; i++)
    ok = h[i] > 0x20 && h[i] < 0x7f && h[i] != '"' && h[i] != '\\';
  if (ok)
    memcpy(r->request_id, h, n + 1);
  else
    attnd_http_own_request_id(r);
  if (l.n_trace == 1)
    attnd_traceparent_parse(l.trace, r->trace_id, r->parent_id);
}

/* Copies a parameter's value into *dst: into mem (of cap bytes) where it
 * fits, else into a new block, which r owns. Returns 0, or -1 when out of
 * memory. */
static int param_into(char **dst, char *mem, size_t cap, const char *v,
                      size_t len) {
  char *p = len < cap ? mem : malloc(len + 1);
  if (p == NULL)
    return -1;
  memcpy(p, v, len);
  p[len] = 0;
  *dst = p;
  return 0;
}

/* Copies s[0..len) whole into *dst as param_into does; where memory is
 * out, cut to fit mem (for the access log alone: better in part than not
 * at all). */
static void copy_whole(char **dst, char *mem, size_t cap, const char *s,
                       size_t len) {
  if (param_into(dst, mem, cap, s, len) < 0) {
    snprintf(mem, cap, "%.*s", (int)(len < cap ? len : cap - 1), s);
    *dst = mem;
  }
}

/* Frees what param_into took beyond r's own rooms. */
static void params_free(attnd_http_req_t *r) {
  if (r->method != r->method_mem)
    free(r->method);
  if (r->path != r->path_mem)
    free(r->path);
  if (r->model != r->model_mem)
    free(r->model);
  if (r->version != r->version_mem)
    free(r->version);
  if (r->name != r->name_mem)
    free(r->name);
}

/* A route's parameters into r. A {model}, {version} or {name} is taken
 * whole, however long (a layer's name has no limit, and an unknown one is
 * answered as unknown); a {session} is cut short (an id that long is no
 * session's, and the store says so); a {file} is read from the path by
 * the asset table. Returns 0, or -1 when out of memory. */
static int route_params(attnd_http_req_t *r, const attnd_route_match_t *m) {
  for (int i = 0; i < m->n_params; i++) {
    const char *name = m->params[i].name, *v = m->params[i].value;
    size_t n = m->params[i].name_len, len = m->params[i].len;
#define IS(s) (n == sizeof s - 1 && memcmp(name, s, n) == 0)
    if (IS("session")) {
      len = len < sizeof r->sid ? len : sizeof r->sid - 1;
      memcpy(r->sid, v, len);
      r->sid[len] = 0;
    } else if ((IS("model") && param_into(&r->model, r->model_mem,
                                          sizeof r->model_mem, v, len) < 0) ||
               (IS("version") &&
                param_into(&r->version, r->version_mem, sizeof r->version_mem,
                           v, len) < 0) ||
               (IS("name") && param_into(&r->name, r->name_mem,
                                         sizeof r->name_mem, v, len) < 0))
      return -1;
#undef IS
  }
  return 0;
}

static enum MHD_Result join_accept(void *cls, enum MHD_ValueKind kind,
                                   const char *key, const char *value) {
  attnd_buf_t *b = cls;
  (void)kind;
  if (value && strcasecmp(key, "Accept-Encoding") == 0) {
    if (b->len)
      attnd_buf_puts(b, ",");
    attnd_buf_puts(b, value);
  }
  return MHD_YES;
}

/* The reply's coding, from every Accept-Encoding line joined as one list,
 * in order (RFC 9110 5.3: libmicrohttpd would give the first line alone);
 * identity where there is none, or no memory to join them. */
static attnd_coding_t reply_coding(attnd_http_req_t *r) {
  char mem[256];
  attnd_buf_t b;
  attnd_buf_init_in(&b, mem, sizeof mem);
  MHD_get_connection_values(r->conn, MHD_HEADER_KIND, join_accept, &b);
  attnd_coding_t c =
      b.len && !b.oom ? attnd_coding_accept(b.data) : ATTND_CODING_IDENTITY;
  attnd_buf_free(&b);
  return c;
}

/* Whether url is `dir` or under it. */
static int under(const char *url, const char *dir) {
  size_t n = strlen(dir);
  return strncmp(url, dir, n) == 0 && (url[n] == 0 || url[n] == '/');
}

/* The protocol of a path no route takes, by its prefix, so that the 404s
 * of a protocol's clients count as that protocol's in /metrics
 * (docs/operations.md); every path under /v2 also answers in its form. */
static attnd_protocol_t unrouted_proto(const char *url) {
  return under(url, "/v2")            ? ATTND_PROTO_V2
         : under(url, "/v1/sessions") ? ATTND_PROTO_SESSION
         : under(url, "/v1")          ? ATTND_PROTO_V1
                                      : ATTND_PROTO_OTHER;
}

/* Whether r's head (its request line, headers and empty line) is within
 * attnd's own limit: half of connection_buffer_bytes, the buffer
 * libmicrohttpd reads it into. The other half is room for what the library
 * keeps there beside the head (a record of some 64 bytes for each header
 * line and query argument) and for the reply's headers. A head over the
 * limit is answered here, in JSON naming it: 414 where the request line
 * alone is over, else 431. One that does not fit the buffer at all gets
 * the library's own HTML 414 or 431 before attnd sees it, and one that
 * fits but leaves no room for a reply's headers is closed unanswered. */
static int head_fits(attnd_http_req_t *r, const char *method,
                     const char *version, enum MHD_Result *ret) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
  long long most = (long long)(r->srv->cfg->connection_buffer_bytes / 2);
  if (ci == NULL || (long long)ci->header_size <= most)
    return 1;
  /* "METHOD target HTTP/1.1" and its CRLF */
  size_t line = strlen(method) + r->target_len + strlen(version) + 4;
  if ((long long)line > most)
    *ret = attnd_http_fail(
        r, ATTND_ERR_URI_TOO_LONG, NULL,
        "the request line is %zu bytes, over %lld, half of "
        "connection_buffer_bytes, the most a request's head may be",
        line, most);
  else
    *ret = attnd_http_fail(
        r, ATTND_ERR_HEADERS_TOO_LARGE, NULL,
        "the request line and headers are %zu bytes, over %lld, half of "
        "connection_buffer_bytes, the most a request's head may be",
        ci->header_size, most);
  return 0;
}

/* The first callback: the route, the framing, the head's size, a
 * preflight, the API key, the method (501 for one no route has, 405 for
 * one the path's rows lack) and the row's precheck; then the body's
 * headers for a route that reads one. A route without a body is answered on the
 * next callback: libmicrohttpd 0.9.75 closes the connection after a reply
 * queued from the first one (MHD_queue_response, in the state after the
 * headers, marks the rest of the request to be discarded, and a connection
 * with something discarded is not kept), and probes and scrapes should keep
 * theirs. So should a request that is refused here (a wrong path, method
 * or key, a precheck's or the body's headers' refusal): its reply is held
 * (r->hold) and queued from the library's call after the body's last byte
 * (at once, for one without a body). A body is read and dropped
 * meanwhile (discard) where it is small (r->discard_ok: a Content-Length
 * up to attnd_http_discard_max) and no client waits for a "100 Continue" to
 * send it. Not a chunked one: libmicrohttpd 0.9.75 queues no reply while a
 * body is being read (MHD_queue_response refuses in that state), so one
 * that grew past the bound could only be cut off with no reply, where the
 * client should learn why it is refused. Otherwise, and while draining (whose
 * replies close the connection anyway), the refusal is answered here, and the
 * connection closed, its body never read. So is a request whose framing or head
 * is refused: the framing is in doubt, so nothing after it may be read as
 * another request (framing.c), and a head over the limit has grown the
 * connection's buffer. */
static enum MHD_Result on_first(attnd_http_req_t *r, const char *url,
                                const char *method, const char *version) {
  attnd_server_t *s = r->srv;
  enum MHD_Result ret;
  size_t n;
  const attnd_route_t *table = attnd_routes(&n);
  attnd_route_match_t m;
  int found = attnd_route_find(table, n, url, method, &m);
  int no_memory = found && route_params(r, &m) < 0;
  r->proto = found ? m.first->proto : unrouted_proto(url);
  if (found && (m.first->flags & ATTND_ROUTE_ASSET) &&
      (((m.first->flags & ATTND_ROUTE_PAGE) && !s->cfg->ui) ||
       (r->asset = attnd_asset_find(url)) == NULL))
    found = 0; /* no file there, or the page is off */
  if (found) {
    r->route = m.route;
    memcpy(r->allow, m.allow, sizeof r->allow);
  }
  r->reply_coding = reply_coding(r);
  if (!attnd_http_framing_ok(r, version, &ret))
    return ret; /* before the route: whatever the path, nothing after */
  if (!head_fits(r, method, version, &ret))
    return ret; /* on every path too */
  /* from here a refusal of a request without a body, or with one to drop,
   * is held (on_request stops holding when this callback returns) */
  r->hold = r->no_body || (r->discard_ok && !atomic_load(&s->draining));
  if (no_memory)
    return attnd_http_fail(r, ATTND_ERR_OUT_OF_MEMORY, NULL,
                           "out of memory for the path's parameters");
  if (found && m.cors && s->cors.enabled && strcmp(method, "OPTIONS") == 0) {
    r->preflight = 1; /* needs no key; answered on the next callback */
    return MHD_YES;
  }
  attnd_auth_result_t why =
      found && (m.first->flags & ATTND_ROUTE_PUBLIC)
          ? ATTND_AUTH_OK
          : attnd_auth_request(&s->auth, url,
                               MHD_lookup_connection_value(
                                   r->conn, MHD_HEADER_KIND, "Authorization"));
  if (why != ATTND_AUTH_OK)
    return attnd_http_fail(r, ATTND_ERR_UNAUTHORIZED, NULL, "%s",
                           attnd_auth_message(why));
  char known[64]; /* a method no route has is unknown, whatever the path */
  if ((!found || r->route == NULL) &&
      (attnd_route_methods(table, n, known, sizeof known),
       !attnd_route_allows(known, method)))
    return attnd_http_fail(r, ATTND_ERR_NOT_IMPLEMENTED, NULL,
                           "the method %.20s is not implemented (RFC 9110 "
                           "9.1); attnd implements %s",
                           method, known);
  if (!found)
    return r->proto == ATTND_PROTO_V2
               ? attnd_http_fail(r, ATTND_ERR_NOT_FOUND, NULL,
                                 "no such path: %.80s (try GET "
                                 "/v2/models/attention, or POST "
                                 "/v2/models/{model}/infer)",
                                 url)
               : attnd_http_fail(r, ATTND_ERR_NOT_FOUND, NULL,
                                 "no such path: %.80s (try POST "
                                 "/v1/attention)",
                                 url);
  if (r->route == NULL && m.cors && s->cors.enabled) {
    /* preflights are answered there: OPTIONS is one of its methods (a
     * preflight never gets here, so its Allow-Methods keeps r->allow) */
    size_t k = strlen(r->allow);
    snprintf(r->allow + k, sizeof r->allow - k, ", OPTIONS");
  }
  if (r->route == NULL)
    return attnd_http_fail(r, ATTND_ERR_METHOD_NOT_ALLOWED, NULL,
                           "%s is not allowed on %s; use %s", method, url,
                           r->allow);
  if (r->route->precheck && !r->route->precheck(r, &ret))
    return ret;
  return (r->route->flags & ATTND_ROUTE_BODY) ? attnd_http_body_start(r)
                                              : MHD_YES;
}

/* A new request's state, its path path[0..len) (for the access log and
 * the metrics' protocol until the first callback routes it). Returns NULL
 * when out of memory. Any HTTP thread. */
static attnd_http_req_t *req_open(attnd_server_t *s,
                                  struct MHD_Connection *conn, const char *path,
                                  size_t len) {
  attnd_http_req_t *r = req_new();
  if (r == NULL)
    return NULL;
  if (uv_mutex_init(&r->mu) != 0) {
    attnd_pool_put(&req_pool, r);
    return NULL;
  }
  r->srv = s;
  r->conn = conn;
  r->t_arrival = attnd_now_ms();
  r->json_len = -1;
  r->body_len = -1;
  r->held_reason = ATTND_REJECT_NONE; /* a held reply that is no refusal */
  copy_whole(&r->path, r->path_mem, sizeof r->path_mem, path, len);
  r->proto = unrouted_proto(r->path);
  attnd_buf_init(&r->body);
  return r;
}

/* libmicrohttpd's URI log callback: its request line has parsed (method,
 * target and version), its headers are yet to come. The request's state is
 * made here, with the target's path as sent, so that a reply the library
 * makes itself from now on, before the first callback (431, a
 * Content-Length's 400 or 413, a header line without a colon), comes to
 * on_completed with it, and is logged and counted; one before (414, 505, a
 * bad request line) never reaches attnd, and counts only for its
 * connection (on_connection). Returns the request's state (the
 * con_cls of the callbacks after), or NULL when out of memory (then the
 * first callback makes it). Any HTTP thread. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn) {
  const char *path = attnd_http_target_path(uri);
  attnd_http_conn_t *c = conn_of(conn);
  if (c)
    c->had_request = 1; /* read on this thread alone (on_connection) */
  attnd_http_req_t *r = req_open(cls, conn, path, strcspn(path, "?"));
  if (r)
    r->target_len = strlen(uri);
  return r;
}

/* Reads and drops the next bytes of the body of a request refused in the
 * first callback, whose reply is held until the last byte is in (on_first).
 * Nothing is kept. The body's pace still counts, as any body's does
 * (min_recv_rate_bytes_per_s, connection_timeout_s): a client cannot hold
 * its connection by trickling a body it knows is refused. Its length is
 * within attnd_http_discard_max (framing.c), and libmicrohttpd gives no
 * byte past it. */
static enum MHD_Result discard(attnd_http_req_t *r, size_t *size) {
  r->bytes_in += *size;
  *size = 0;
  return MHD_YES;
}

uint64_t attnd_http_discard_max(const attnd_server_t *s) {
  uint64_t most = (uint64_t)s->cfg->max_body_bytes;
  return most < ATTND_DISCARD_MAX ? most : ATTND_DISCARD_MAX;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn,
                                  const char *url, const char *method,
                                  const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
  attnd_server_t *s = cls;
  attnd_http_req_t *r = *con_cls;
  if (r == NULL || !r->begun) {
    url = attnd_http_target_path(url);
    if (r == NULL && (r = req_open(s, conn, url, strlen(url))) == NULL)
      return MHD_NO;
    if (r->path != r->path_mem) /* the path as sent: now decoded */
      free(r->path);
    r->path = r->path_mem;
    copy_whole(&r->path, r->path_mem, sizeof r->path_mem, url, strlen(url));
    copy_whole(&r->method, r->method_mem, sizeof r->method_mem, method,
               strlen(method));
    r->t_arrival = attnd_now_ms(); /* its headers all in */
    r->begun = 1;
    *con_cls = r;
    atomic_fetch_add(&s->active, 1);
    r->inflight = 1;
    atomic_fetch_add(&s->inflight, 1);
    set_request_id(r);
    conn_mark(s, conn, r);
    enum MHD_Result ret = on_first(r, url, method, version);
    r->hold = 0;
    return ret;
  }
  /* libmicrohttpd 0.9.75 answers "100 Continue" to any request with
   * Expect: 100-continue whose first callback queued no reply, one without
   * a body too (a GET, or a refusal held for the next callback). When
   * bytes are already in behind such a request (one pipelined after it),
   * it then calls here as if reading a body: with those bytes as upload
   * but none of them given (*upload_size 0), in a state where
   * MHD_queue_response refuses, and a reply that fails there closes the
   * connection with nothing sent. Only that call has upload set and
   * empty; the library's next call, once the request is whole, has upload
   * NULL, and the reply is made there, so the connection is kept. */
  if (upload != NULL && *upload_size == 0)
    return MHD_YES;
  if (*upload_size == 0 && !r->body_done)
    conn_body_done(r);
  uv_mutex_lock(&r->mu);
  int back = r->req && !r->submitted;
  uv_mutex_unlock(&r->mu);
  if (back)
    return attnd_api_reply(r);
  if (r->held) /* a refusal made in the first callback: its body dropped */
    return *upload_size ? discard(r, upload_size) : attnd_http_send_held(r);
  if (r->status) /* answered already, from the first callback */
    return *upload_size = 0, MHD_YES;
  if (r->preflight) /* a body, never expected, is discarded */
    return *upload_size ? (*upload_size = 0, MHD_YES)
                        : attnd_http_send_body(r, 204, NULL, 0, 0, NULL);
  if (!(r->route->flags & ATTND_ROUTE_BODY))
    return *upload_size ? (*upload_size = 0, MHD_YES) : r->route->handler(r);
  if (*upload_size)
    return attnd_http_body_more(r, upload, upload_size);
  enum MHD_Result ret;
  return attnd_http_body_ok(r, &ret) ? r->route->handler(r) : ret;
}

/* ---- completion ------------------------------------------------------------
 */

/* Frees r and what it owns. Completion. */
static void req_free(attnd_http_req_t *r) {
  if (r->held) /* never queued: the connection ended before */
    MHD_destroy_response(r->held);
  attnd_buf_free(&r->body);
  attnd_pinned_put(r->body_pinned);
  attnd_inflate_free(r->inflate);
  attnd_request_free(r->req);
  params_free(r);
  uv_mutex_destroy(&r->mu);
  attnd_pool_put(&req_pool, r);
}

void attnd_http_answered(attnd_http_req_t *r) {
  if (r->inflight) {
    r->inflight = 0;
    atomic_fetch_sub(&r->srv->inflight, 1);
  }
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
  attnd_server_t *s = cls;
  attnd_http_req_t *r = *con_cls;
  if (r == NULL)
    return;
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(conn, MHD_CONNECTION_INFO_HTTP_STATUS);
  if (!r->begun) { /* the library answered before the first callback */
    if (ci == NULL || ci->http_status == 0) {
      req_free(r); /* or nobody did: the client left, or the sweep shut it */
      *con_cls = NULL;
      return;
    }
    set_request_id(r);
  }
  int64_t held = r->req ? (int64_t)attnd_request_memory(r->req) : 0;
  /* before it counts as answered */
  attnd_budget_give(&s->budget, &r->mem_held);
  attnd_budget_give(&s->device_budget, &r->device_held);
  attnd_http_answered(r); /* one that got no reply of attnd's */
  if (r->status == 0) {   /* libmicrohttpd answered (a bad chunk, or above), or
                            nobody */
    r->status = ci && ci->http_status ? (int)ci->http_status
                : toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? 200
                                                             : 499;
    /* libmicrohttpd's refusal is a rejection, as attnd's own are */
    if (ci && ci->http_status)
      attnd_metrics_reject(s->metrics, attnd_status_reason(r->status));
  }
  if (toe == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED)
    conn_timed_out(s, conn);
  if (r->req && r->outcome == ATTND_SCHED_ABANDONED)
    attnd_metrics_reject(s->metrics, ATTND_REJECT_CLIENT_GONE);
  const attnd_request_t *j = r->req;
  /* every wait in the queue, once, whatever became of the request (a 504
   * or a 499 waited too: leaving them out would read low when the queue is
   * longest); before the request counts, so that a scrape that sees it
   * counted sees its wait */
  if (j && attnd_request_waited(j))
    attnd_metrics_waited(s->metrics, r->proto, j->plan.Lk,
                         attnd_request_queue_ms(j));
  attnd_metrics_request(s->metrics, r->proto, r->status);
  const attnd_http_conn_t *c = conn_of(conn); /* NULL: it went unlisted */
  attnd_access_t line = {
      .request_id = r->request_id,
      .trace_id = r->trace_id[0] ? r->trace_id : NULL,
      .parent_id = r->parent_id,
      .id = j           ? j->id
            : r->has_id ? r->id
                        : NULL,
      .method = r->method,
      .path = r->path,
      .client_addr = c ? c->client : NULL,
      .status = r->status,
      .complete = toe == MHD_REQUEST_TERMINATED_COMPLETED_OK,
      .bytes_in = r->bytes_in,
      .bytes_out = r->bytes_out,
      .queue_ms = j ? attnd_request_queue_ms(j) : 0,
      .compute_ms = j && j->t.end ? j->t.end - j->t.start : 0,
      .total_ms = r->total_ms ? r->total_ms : attnd_now_ms() - r->t_arrival,
  };
  attnd_access_log_write(s->access_log, &line);
  if (r->begun)
    atomic_fetch_sub(&s->active, 1);
  req_free(r);
  *con_cls = NULL;
  conn_mark(s, conn, NULL);
  attnd_memory_settle(held);
}
/* ---- the daemon ------------------------------------------------------------
 */

/* libmicrohttpd's own messages (the errors it answers itself, connections
 * it closes) as JSON lines among the server's other events on stderr,
 * rather than bare text. Any HTTP thread. */
static void mhd_log(void *cls, const char *fmt, va_list ap) {
  char msg[512];
  (void)cls;
  vsnprintf(msg, sizeof msg, fmt, ap);
  size_t n = strlen(msg);
  while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == ' '))
    n--;
  attnd_buf_t b;
  attnd_buf_init(&b);
  attnd_buf_puts(&b, "{\"event\":\"libmicrohttpd\",\"message\":");
  attnd_buf_json_string(&b, msg, n);
  attnd_buf_puts(&b, "}\n");
  if (!b.oom)
    fwrite(b.data, 1, b.len, stderr);
  attnd_buf_free(&b);
}

/* GnuTLS's question, at a handshake, of the certificate to send: the
 * connection's own pair when it has one (a second handshake on it), else
 * the server's current pair, which the connection then holds until it
 * closes, so that a SIGHUP's swap never frees a pair that a handshake in
 * progress reads. libmicrohttpd sets the session's pointer to its
 * connection. An HTTP thread. */
static int on_tls_cert(gnutls_session_t ses, const gnutls_datum_t *req_ca,
                       int n_req_ca, const gnutls_pk_algorithm_t *algos,
                       int n_algos, gnutls_pcert_st **chain,
                       unsigned *chain_len, gnutls_privkey_t *key) {
  (void)req_ca, (void)n_req_ca, (void)algos, (void)n_algos;
  attnd_http_conn_t *c = conn_of(gnutls_session_get_ptr(ses));
  if (c == NULL)
    return -1; /* unlisted (out of memory): nowhere to hold a pair */
  if (c->tls == NULL) {
    uv_mutex_lock(&c->s->tls_lock);
    c->tls = attnd_tls_ref(c->s->tls);
    uv_mutex_unlock(&c->s->tls_lock);
  }
  attnd_tls_get(c->tls, chain, chain_len, key);
  return 0;
}

void attnd_http_tls_swap(attnd_server_t *s, struct attnd_tls_pair *pair) {
  uv_mutex_lock(&s->tls_lock);
  attnd_tls_pair_t *old = s->tls;
  s->tls = pair;
  uv_mutex_unlock(&s->tls_lock);
  attnd_tls_unref(old);
}

attnd_tls_pair_t *attnd_http_tls_current(attnd_server_t *s) {
  if (!s->https)
    return NULL;
  uv_mutex_lock(&s->tls_lock);
  attnd_tls_pair_t *p = attnd_tls_ref(s->tls);
  uv_mutex_unlock(&s->tls_lock);
  return p;
}

/* Stops the daemons started (each connection's notice of closing comes
 * from here), then frees the listener, which borrows their array. */
static void stop_daemons(attnd_server_t *s) {
  for (int i = 0; s->daemons && i < s->ndaemons; i++)
    if (s->daemons[i])
      MHD_stop_daemon(s->daemons[i]);
  attnd_listener_free(s->listener);
  s->listener = NULL;
  free(s->daemons);
  s->daemons = NULL;
}

int attnd_http_start(attnd_server_t *s) {
  const attnd_config_t *c = s->cfg;
  struct addrinfo hints = {.ai_flags = AI_PASSIVE | AI_NUMERICSERV,
                           .ai_socktype = SOCK_STREAM},
                  *ai = NULL;
  char port[16];
  snprintf(port, sizeof port, "%lld", (long long)c->port);
  if (uv_mutex_init(&s->conns_lock) != 0) {
    fprintf(stderr, "attnd: cannot make a mutex\n");
    return -1;
  }
  int rc = getaddrinfo(c->host, port, &hints, &ai);
  if (rc != 0) {
    fprintf(stderr, "attnd: host: cannot resolve '%s': %s\n", c->host,
            gai_strerror(rc));
    return -1;
  }
  /* poll(), not epoll: with libmicrohttpd 0.9.75's epoll, a client that
   * closes in the middle of its upload leaves the connection in CLOSE_WAIT
   * until connection_timeout_s (the end of the stream goes unseen), holding
   * a connection slot and the body read so far. */
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
                   MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG |
                   MHD_USE_NO_LISTEN_SOCKET;
  /* TLS 1.2 and 1.3 only, 1.2 with forward secrecy (ECDHE) and AEAD
   * ciphers only: no CBC, no static RSA. The options are empty for plain
   * HTTP. */
  struct MHD_OptionItem tls[] = {
      {MHD_OPTION_HTTPS_CERT_CALLBACK, 0, NULL},
      {MHD_OPTION_HTTPS_PRIORITIES, 0,
       "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2:"
       "-CIPHER-ALL:+AES-256-GCM:+AES-128-GCM:+CHACHA20-POLY1305:"
       "-MAC-ALL:+AEAD:-KX-ALL:+ECDHE-ECDSA:+ECDHE-RSA"},
      {MHD_OPTION_END, 0, NULL}};
  if (c->tls_cert_file[0] || c->tls_key_file[0]) {
    char msg[1024];
    if (!MHD_is_feature_supported(MHD_FEATURE_TLS) ||
        !MHD_is_feature_supported(MHD_FEATURE_HTTPS_CERT_CALLBACK))
      snprintf(msg, sizeof msg,
               "tls: this libmicrohttpd has no TLS support, or cannot ask "
               "for the certificate at each handshake");
    else if (uv_mutex_init(&s->tls_lock) != 0)
      snprintf(msg, sizeof msg, "cannot make a mutex");
    else if (attnd_tls_load(c->tls_cert_file, c->tls_key_file, &s->tls, msg,
                            sizeof msg) == 0)
      msg[0] = 0;
    else
      uv_mutex_destroy(&s->tls_lock);
    if (msg[0]) {
      fprintf(stderr, "attnd: %s\n", msg);
      freeaddrinfo(ai);
      return -1;
    }
    /* asked at each handshake (on_tls_cert), so that SIGHUP can renew it */
    gnutls_certificate_retrieve_function2 *cb = on_tls_cert;
    tls[0].ptr_value = (void *)cb;
    s->https = 1;
    flags |= MHD_USE_TLS;
  } else {
    tls[0].option = MHD_OPTION_END;
  }
  /* The unspecified address, however it is spelt (::, ::0, 0:0::0),
   * takes IPv4 clients as well (dual stack), as :: always did; so does an
   * IPv4-mapped one (::ffff:127.0.0.1), which is its IPv4 address and
   * which a socket of IPv6 alone cannot bind (EINVAL). Any other IPv6
   * address takes IPv6 alone (attnd_listen_socket). */
  int v6 = ai->ai_family == AF_INET6 && strchr(c->host, ':');
  int fd = attnd_listen_socket(ai, &s->port);
  freeaddrinfo(ai);
  if (fd < 0) { /* an IPv6 literal in brackets, as in a URL */
    fprintf(stderr, "attnd: cannot listen on %s%s%s:%lld (%s)\n", v6 ? "[" : "",
            c->host, v6 ? "]" : "", (long long)c->port, strerror(errno));
    return -1;
  }
  /* Each daemon may hold them all: the listener keeps the sum under
   * max_connections. */
  s->ndaemons = (int)c->http_threads;
  s->daemons = calloc((size_t)s->ndaemons, sizeof *s->daemons);
  if (s->daemons == NULL) {
    fprintf(stderr, "attnd: no memory for the HTTP threads\n");
    close(fd);
    return -1;
  }
  for (int i = 0; i < s->ndaemons; i++) {
    s->daemons[i] = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, s, MHD_OPTION_EXTERNAL_LOGGER,
        mhd_log, NULL, /* first, for every message */
        MHD_OPTION_UNESCAPE_CALLBACK, attnd_http_unescape, NULL,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)c->max_connections,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)c->connection_timeout_s,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
        MHD_OPTION_URI_LOG_CALLBACK, on_uri, s,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)c->connection_buffer_bytes,
        MHD_OPTION_ARRAY, tls, MHD_OPTION_END);
    if (s->daemons[i] == NULL) {
      fprintf(stderr, "attnd: cannot start HTTP thread %d of %d\n", i + 1,
              s->ndaemons);
      close(fd);
      stop_daemons(s);
      return -1;
    }
  }
  if (attnd_listener_start(&s->listener, fd, s->daemons, s->ndaemons,
                           (int)c->max_connections) < 0) {
    fprintf(stderr, "attnd: cannot start the thread that accepts\n");
    stop_daemons(s); /* fd closed by the listener */
    return -1;
  }
  /* the sweep a quarter of the deadline apart, at most 1 s (0.25 s at
   * the least deadline, 1 s; the floor of 0.1 s is a guard) */
  uint64_t every = (uint64_t)c->connection_timeout_s * 250;
  every = every < 100 ? 100 : every > 1000 ? 1000 : every;
  uv_timer_init(&s->loop, &s->header_timer);
  s->header_timer.data = s;
  uv_timer_start(&s->header_timer, on_header_sweep, every, every);
  uv_unref((uv_handle_t *)&s->header_timer);
  return 0;
}

void attnd_http_stop(attnd_server_t *s) {
  attnd_listener_stop(s->listener);
  stop_daemons(s); /* every connection's notice of closing */
  uv_close((uv_handle_t *)&s->header_timer, NULL);
  uv_mutex_destroy(&s->conns_lock);
  if (s->https) {
    attnd_tls_unref(s->tls);
    s->tls = NULL;
    uv_mutex_destroy(&s->tls_lock);
  }
}
