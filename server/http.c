/* server/http.c: routes, request intake, replies, drain. See http.h.
 *
 * A POST /v1/attention request goes:
 *   1. first callback (headers): route, method, Content-Type and
 *      Content-Length are checked; a body over max_body_bytes is refused
 *      with 413 before it is read;
 *   2. upload callbacks: the body accumulates;
 *   3. last callback: the body is decoded and validated into a job (HTTP
 *      thread), admitted to the scheduler (or 429), and the connection is
 *      suspended;
 *   4. the scheduler's done callback (loop thread) resumes the connection;
 *   5. the callback after resumption writes the reply (HTTP thread);
 *   6. the completion callback logs the request and frees it. */
#include "http.h"

#include <arpa/inet.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <uv.h>

#include "attn/attn.h"
#include "job.h"
#include "metrics.h"
#include "scheduler.h"

typedef struct server {
  const attnd_config_t *cfg;
  struct MHD_Daemon *daemon;
  uv_loop_t loop;
  attnd_sched_t *sched;
  attnd_metrics_t *metrics;
  attn_backend_t backend;
  FILE *access_log; /* NULL when off */
  int port;
  atomic_int draining;
  atomic_int active;        /* requests between first callback and completion */
  _Atomic int64_t mem_used; /* of max_memory_bytes, by requests in flight */
  atomic_uint_fast64_t next_id;
  uint64_t id_prefix;
  uv_signal_t sigterm, sigint;
  uv_timer_t drain_timer;
  double drain_started;
  int exit_code;
} server_t;

enum { R_NONE, R_ATTENTION, R_HEALTHZ, R_READYZ, R_METRICS, R_INFO };

/* One HTTP request, from its first callback to its completion. */
typedef struct req {
  server_t *srv;
  struct MHD_Connection *conn;
  int route;
  double t_arrival;
  char request_id[96];
  char method[8];
  char path[96];
  attnd_buf_t body;
  attnd_job_t *job;  /* owned while not submitted or after it came back */
  uv_mutex_t mu;     /* orders suspension before resumption */
  int submitted;     /* under mu: the scheduler owns job until it is back */
  int too_large;     /* the body outgrew max_body_bytes */
  int over_budget;   /* the body did not fit in max_memory_bytes */
  int64_t mem_held;  /* this request's share of mem_used */
  const char *allow; /* the methods a 405 names */
  int status;
  size_t bytes_in, bytes_out;
  double total_ms;
} req_t;

static void log_line(server_t *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ---- responses ------------------------------------------------------------
 */

/* Queues `body` (malloc'd, owned by MHD afterwards) with the common
 * headers. */
static enum MHD_Result send_body(req_t *r, int status, char *body, size_t len,
                                 const char *ctype) {
  struct MHD_Response *resp =
      MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
  if (resp == NULL) {
    free(body);
    return MHD_NO;
  }
  MHD_add_response_header(resp, "Content-Type", ctype);
  MHD_add_response_header(resp, "X-Request-Id", r->request_id);
  if (status == 405 && r->allow)
    MHD_add_response_header(resp, "Allow", r->allow);
  if (status == 429 || status == 503) {
    char ra[16];
    snprintf(ra, sizeof ra, "%d",
             status == 429 ? attnd_sched_retry_after_s(r->srv->sched) : 1);
    MHD_add_response_header(resp, "Retry-After", ra);
  }
  if (atomic_load(&r->srv->draining))
    MHD_add_response_header(resp, "Connection", "close");
  if (r->route == R_ATTENTION && status == 200 && r->job) {
    const attnd_job_t *j = r->job;
    char st[256];
    snprintf(st, sizeof st,
             "decode;dur=%.3f, queue;dur=%.3f, compute;dur=%.3f, "
             "encode;dur=%.3f, total;dur=%.3f",
             j->decode_ms, j->t_start - j->t_submit, j->t_end - j->t_start,
             j->encode_ms, r->total_ms);
    MHD_add_response_header(resp, "Server-Timing", st);
  }
  r->status = status;
  r->bytes_out = len;
  enum MHD_Result ok = MHD_queue_response(r->conn, (unsigned)status, resp);
  MHD_destroy_response(resp);
  return ok;
}

static enum MHD_Result send_json(req_t *r, int status, json_t *v) {
  char *txt = json_dumps(v, JSON_COMPACT);
  json_decref(v);
  if (txt == NULL)
    return MHD_NO;
  size_t n = strlen(txt);
  char *body = realloc(txt, n + 2);
  if (body == NULL) {
    free(txt);
    return MHD_NO;
  }
  body[n] = '\n';
  body[n + 1] = 0;
  return send_body(r, status, body, n + 1, "application/json");
}

static attnd_reject_t reject_reason(int status, const char *code) {
  switch (status) {
  case 429:
    return ATTND_REJECT_OVERLOAD;
  case 504:
    return ATTND_REJECT_DEADLINE;
  case 413:
    return ATTND_REJECT_TOO_LARGE;
  case 503:
    return ATTND_REJECT_DRAINING;
  }
  return strcmp(code, "limit_exceeded") == 0 ? ATTND_REJECT_TOO_LARGE
                                             : ATTND_REJECT_INVALID;
}

static enum MHD_Result send_error(req_t *r, const attnd_error_t *e) {
  if (e->status != 500 && strcmp(e->code, "out_of_memory") != 0)
    attnd_metrics_reject(r->srv->metrics, reject_reason(e->status, e->code));
  json_t *err = json_pack("{s:s,s:s}", "code", e->code, "message", e->message);
  if (err && e->field[0])
    json_object_set_new(err, "field", json_string(e->field));
  return send_json(r, e->status, json_pack("{s:o}", "error", err));
}

static enum MHD_Result fail(req_t *r, int status, const char *code,
                            const char *field, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static enum MHD_Result fail(req_t *r, int status, const char *code,
                            const char *field, const char *fmt, ...) {
  attnd_error_t e = {.status = status, .code = code};
  snprintf(e.field, sizeof e.field, "%s", field ? field : "");
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e.message, sizeof e.message, fmt, ap);
  va_end(ap);
  return send_error(r, &e);
}

/* ---- the memory budget ------------------------------------------------
 *
 * Every request in flight holds a share of max_memory_bytes: its body while
 * it arrives, then its job's footprint (attnd_job_memory) from admission to
 * completion. attnd keeps freed memory for reuse, so what requests hold at
 * once bounds the process's peak; a request that does not fit now is asked
 * to retry (429) rather than meeting the kernel's OOM killer. */

/* Takes `bytes` more for r. Returns 0, or -1 when they do not fit now. */
static int mem_take(req_t *r, int64_t bytes) {
  server_t *s = r->srv;
  int64_t used = atomic_load(&s->mem_used);
  do {
    if (used + bytes > s->cfg->max_memory_bytes)
      return -1;
  } while (!atomic_compare_exchange_weak(&s->mem_used, &used, used + bytes));
  r->mem_held += bytes;
  return 0;
}

static void mem_give(req_t *r, int64_t bytes) {
  atomic_fetch_sub(&r->srv->mem_used, bytes);
  r->mem_held -= bytes;
}

static enum MHD_Result no_memory(req_t *r, int64_t need) {
  return fail(r, 429, "overloaded", NULL,
              "%lld bytes of memory are needed and %lld of max_memory_bytes "
              "%lld are in use; retry later",
              (long long)need, (long long)atomic_load(&r->srv->mem_used),
              (long long)r->srv->cfg->max_memory_bytes);
}

/* ---- the GET endpoints ----------------------------------------------------
 */

static enum MHD_Result get_metrics(req_t *r) {
  server_t *s = r->srv;
  attnd_gauges_t g = {
      .queue_depth = attnd_sched_waiting(s->sched),
      .busy_workers = attnd_sched_busy(s->sched),
      .workers = (int)s->cfg->workers,
      .inflight = attnd_sched_inflight(s->sched),
      .draining = atomic_load(&s->draining),
  };
  attnd_buf_t b;
  attnd_buf_init(&b);
  attnd_metrics_render(s->metrics, &g, &b);
  if (b.oom) {
    attnd_buf_free(&b);
    return MHD_NO;
  }
  return send_body(r, 200, b.data, b.len, "text/plain; version=0.0.4");
}

static enum MHD_Result get_info(req_t *r) {
  server_t *s = r->srv;
  const attnd_config_t *c = s->cfg;
  json_t *v = json_pack(
      "{s:s,s:{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I},s:I,s:I,s:I,s:I,s:{s:s,s:s,"
      "s:s,s:s}}",
      "version", ATTN_VERSION, "limits", "max_body_bytes",
      (json_int_t)c->max_body_bytes, "max_response_bytes",
      (json_int_t)c->max_response_bytes, "max_batch", (json_int_t)c->max_batch,
      "max_seq_len", (json_int_t)c->max_seq_len, "max_heads",
      (json_int_t)c->max_heads, "max_tensor_elements",
      (json_int_t)c->max_tensor_elements, "max_memory_bytes",
      (json_int_t)c->max_memory_bytes, "default_timeout_ms",
      (json_int_t)c->default_timeout_ms, "max_timeout_ms",
      (json_int_t)c->max_timeout_ms, "workers", (json_int_t)c->workers,
      "threads_per_request", (json_int_t)c->threads_per_request, "queue_depth",
      (json_int_t)c->queue_depth, "http_threads", (json_int_t)c->http_threads,
      "backend", "blas", s->backend.blas, "blas_kernel", s->backend.blas_kernel,
      "blas_config", s->backend.blas_config, "simd",
      attn_isa_name(s->backend.isa));
  return send_json(r, 200, v);
}

/* ---- POST /v1/attention ---------------------------------------------------
 */

static int json_content_type(const char *ct) {
  if (ct == NULL)
    return 0;
  size_t n = strlen("application/json");
  return strncasecmp(ct, "application/json", n) == 0 &&
         (ct[n] == 0 || ct[n] == ';' || ct[n] == ' ');
}

static enum MHD_Result attention_start(req_t *r) {
  server_t *s = r->srv;
  if (atomic_load(&s->draining))
    return fail(r, 503, "draining", NULL,
                "the server is shutting down; retry on another instance");
  const char *ct =
      MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Content-Type");
  if (!json_content_type(ct))
    return fail(r, 415, "unsupported_media_type", NULL,
                "Content-Type is %s%s%s; expected application/json",
                ct ? "'" : "", ct ? ct : "missing", ct ? "'" : "");
  const char *cl =
      MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Content-Length");
  if (cl && strtoull(cl, NULL, 10) > (unsigned long long)s->cfg->max_body_bytes)
    return fail(r, 413, "payload_too_large", NULL,
                "the body has %s bytes, over max_body_bytes %lld", cl,
                (long long)s->cfg->max_body_bytes);
  if (cl && mem_take(r, (int64_t)strtoull(cl, NULL, 10)) < 0)
    return no_memory(r, (int64_t)strtoull(cl, NULL, 10));
  return MHD_YES; /* read the body */
}

/* Accumulates the body. A body without Content-Length that outgrows
 * max_body_bytes is discarded as it arrives and answered 413 at its end
 * (libmicrohttpd cannot answer in the middle of an upload); one that keeps
 * going 64 MiB past the limit has its connection closed. */
static enum MHD_Result attention_body(req_t *r, const char *data,
                                      size_t *size) {
  server_t *s = r->srv;
  size_t max = (size_t)s->cfg->max_body_bytes;
  r->bytes_in += *size;
  if (r->too_large || r->body.len + *size > max) {
    r->too_large = 1;
    attnd_buf_free(&r->body);
    *size = 0;
    return r->bytes_in - max > ((size_t)64 << 20) ? MHD_NO : MHD_YES;
  }
  const char *cl =
      MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Content-Length");
  if (r->over_budget || (!cl && mem_take(r, (int64_t)*size) < 0)) {
    r->over_budget = 1; /* without a length, the body takes as it grows */
    attnd_buf_free(&r->body);
    *size = 0;
    return MHD_YES;
  }
  if (r->body.cap == 0 && cl) /* size the buffer once, to the length */
    attnd_buf_reserve(&r->body, (size_t)strtoull(cl, NULL, 10));
  attnd_buf_append(&r->body, data, *size);
  *size = 0;
  return MHD_YES;
}

static enum MHD_Result attention_submit(req_t *r) {
  server_t *s = r->srv;
  attnd_error_t e;
  attnd_job_t *job;
  if (r->too_large)
    return fail(r, 413, "payload_too_large", NULL,
                "the body has %zu bytes, over max_body_bytes %lld", r->bytes_in,
                (long long)s->cfg->max_body_bytes);
  if (r->body.oom)
    return fail(r, 503, "out_of_memory", NULL,
                "out of memory reading the body");
  if (r->over_budget)
    return no_memory(r, (int64_t)r->bytes_in);
  if (attnd_job_decode(r->body.data ? r->body.data : "", r->body.len, s->cfg,
                       &job, &e) < 0)
    return send_error(r, &e);
  attnd_buf_free(&r->body);
  job->t_arrival = r->t_arrival;
  job->conn = r;
  r->job = job;
  /* the body's share of the budget becomes the job's */
  int64_t need = (int64_t)attnd_job_memory(job);
  mem_give(r, r->mem_held);
  if (need > s->cfg->max_memory_bytes)
    return fail(r, 422, "limit_exceeded", NULL,
                "the request needs %lld bytes of memory (tensors, workspace, "
                "reply), over max_memory_bytes %lld",
                (long long)need, (long long)s->cfg->max_memory_bytes);
  if (mem_take(r, need) < 0)
    return no_memory(r, need);
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
  /* Under mu, so that the job cannot come back (and resume the connection)
   * before the connection is suspended. */
  uv_mutex_lock(&r->mu);
  int ok = attnd_sched_submit(s->sched, job, ci ? ci->connect_fd : -1) == 0;
  if (ok) {
    r->submitted = 1;
    MHD_suspend_connection(r->conn);
  }
  uv_mutex_unlock(&r->mu);
  if (!ok)
    return fail(r, 429, "overloaded", NULL,
                "the queue is full (%lld waiting); retry later",
                (long long)s->cfg->queue_depth);
  return MHD_YES;
}

/* The job came back (the connection was resumed): write its reply. */
static enum MHD_Result attention_reply(req_t *r) {
  attnd_job_t *j = r->job;
  if (j->state == ATTND_JOB_ABANDONED) {
    r->status = 499; /* logged only: nobody is listening */
    return MHD_NO;
  }
  if (j->state == ATTND_JOB_EXPIRED)
    return fail(r, 504, "deadline_exceeded", "timeout_ms",
                "no result within timeout_ms %lld (waited %.1f ms in the "
                "queue%s)",
                (long long)j->timeout_ms,
                (j->t_start ? j->t_start : attnd_now_ms()) - j->t_submit,
                j->t_start ? ", then was cancelled while computing" : "");
  if (j->result != 0)
    return fail(r, 503, "out_of_memory", NULL,
                "out of memory for this request's workspace and outputs; "
                "retry later");
  attnd_buf_t b;
  attnd_buf_init(&b);
  attnd_job_encode(j, &b, &r->total_ms);
  if (b.oom) {
    attnd_buf_free(&b);
    return fail(r, 503, "out_of_memory", NULL, "out of memory for the reply");
  }
  attnd_metrics_observe(r->srv->metrics, j->plan.Lk, j->t_start - j->t_submit,
                        j->t_end - j->t_start, r->total_ms);
  return send_body(r, 200, b.data, b.len, "application/json");
}

/* Loop thread: the scheduler is done with a job. Taking mu waits out
 * attention_submit, so the connection is suspended by then. It is resumed
 * after mu is released: once resumed, an HTTP thread may finish the request
 * and free r (at once for an abandoned job), mu included. */
static void on_job_done(attnd_job_t *job, void *arg) {
  (void)arg;
  req_t *r = job->conn;
  struct MHD_Connection *conn = r->conn;
  uv_mutex_lock(&r->mu);
  r->submitted = 0;
  uv_mutex_unlock(&r->mu);
  MHD_resume_connection(conn); /* r may be gone from here on */
}

/* ---- the access handler ---------------------------------------------------
 */

static void set_request_id(req_t *r) {
  const char *h =
      MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "X-Request-Id");
  size_t n = h ? strlen(h) : 0;
  int ok = n > 0 && n < sizeof r->request_id;
  for (size_t i = 0; ok && i < n; i++)
    ok = h[i] > 0x20 && h[i] < 0x7f && h[i] != '"' && h[i] != '\\';
  if (ok) {
    memcpy(r->request_id, h, n + 1);
    return;
  }
  uint64_t k = atomic_fetch_add(&r->srv->next_id, 1);
  snprintf(r->request_id, sizeof r->request_id, "%016llx-%llu",
           (unsigned long long)r->srv->id_prefix, (unsigned long long)k);
}

static int route_of(const char *url, const char **allow) {
  static const struct {
    const char *path;
    int route;
  } routes[] = {{"/v1/attention", R_ATTENTION},
                {"/healthz", R_HEALTHZ},
                {"/readyz", R_READYZ},
                {"/metrics", R_METRICS},
                {"/v1/info", R_INFO}};
  for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
    if (strcmp(url, routes[i].path) == 0) {
      *allow = routes[i].route == R_ATTENTION ? "POST" : "GET, HEAD";
      return routes[i].route;
    }
  return R_NONE;
}

static enum MHD_Result on_first(req_t *r, const char *url, const char *method) {
  const char *allow = NULL;
  r->route = route_of(url, &allow);
  if (r->route == R_NONE)
    return fail(r, 404, "not_found", NULL,
                "no such path: %.80s (try POST /v1/attention)", url);
  int is_get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
  int ok = r->route == R_ATTENTION ? strcmp(method, "POST") == 0 : is_get;
  if (!ok) {
    r->allow = allow;
    return fail(r, 405, "method_not_allowed", NULL,
                "%s is not allowed on %s; use %s", method, url, allow);
  }
  /* A GET is answered on the next callback: libmicrohttpd closes the
   * connection after a reply queued from the first one, and probes and
   * scrapes should keep theirs. */
  return r->route == R_ATTENTION ? attention_start(r) : MHD_YES;
}

/* The reply to a GET endpoint. */
static enum MHD_Result on_get(req_t *r) {
  server_t *s = r->srv;
  switch (r->route) {
  case R_HEALTHZ:
    return send_json(r, 200, json_pack("{s:s}", "status", "ok"));
  case R_READYZ:
    return atomic_load(&s->draining)
               ? send_json(r, 503, json_pack("{s:s}", "status", "draining"))
               : send_json(r, 200, json_pack("{s:s}", "status", "ready"));
  case R_METRICS:
    return get_metrics(r);
  default:
    return get_info(r);
  }
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn,
                                  const char *url, const char *method,
                                  const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
  server_t *s = cls;
  req_t *r = *con_cls;
  (void)version;
  if (r == NULL) {
    if ((r = calloc(1, sizeof *r)) == NULL)
      return MHD_NO;
    if (uv_mutex_init(&r->mu) != 0) {
      free(r);
      return MHD_NO;
    }
    r->srv = s;
    r->conn = conn;
    r->t_arrival = attnd_now_ms();
    snprintf(r->method, sizeof r->method, "%s", method);
    snprintf(r->path, sizeof r->path, "%s", url);
    attnd_buf_init(&r->body);
    *con_cls = r;
    atomic_fetch_add(&s->active, 1);
    set_request_id(r);
    return on_first(r, url, method);
  }
  uv_mutex_lock(&r->mu);
  int back = r->job && !r->submitted;
  uv_mutex_unlock(&r->mu);
  if (back)
    return attention_reply(r);
  if (r->route != R_ATTENTION)
    return *upload_size ? (*upload_size = 0, MHD_YES) : on_get(r);
  if (*upload_size)
    return attention_body(r, upload, upload_size);
  return attention_submit(r);
}

/* ---- completion and the access log ----------------------------------------
 */

static void log_line(server_t *s, const char *fmt, ...) {
  if (s->access_log == NULL)
    return;
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line - 1, fmt, ap);
  va_end(ap);
  if (n < 0)
    return;
  if ((size_t)n > sizeof line - 2)
    n = sizeof line - 2;
  line[n] = '\n';
  fwrite(line, 1, (size_t)n + 1, s->access_log); /* one write per line */
  fflush(s->access_log);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
  server_t *s = cls;
  req_t *r = *con_cls;
  (void)conn;
  if (r == NULL)
    return;
  mem_give(r, r->mem_held); /* before it counts as answered */
  if (r->status == 0)
    r->status = toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? 200 : 499;
  if (r->job && r->job->state == ATTND_JOB_ABANDONED)
    attnd_metrics_reject(s->metrics, ATTND_REJECT_CLIENT_GONE);
  attnd_metrics_request(s->metrics, r->status);
  const attnd_job_t *j = r->job;
  double queue = j && j->t_start ? j->t_start - j->t_submit : 0;
  double compute = j && j->t_end ? j->t_end - j->t_start : 0;
  double total = r->total_ms ? r->total_ms : attnd_now_ms() - r->t_arrival;
  json_t *id = json_string(j && j->id ? j->id : "");
  char *id_txt = id ? json_dumps(id, JSON_ENCODE_ANY) : NULL;
  json_decref(id);
  time_t now = time(NULL);
  struct tm tm;
  char ts[32];
  gmtime_r(&now, &tm);
  strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
  log_line(s,
           "{\"ts\":\"%s\",\"request_id\":\"%s\",\"id\":%s,\"method\":\"%s\","
           "\"path\":\"%s\",\"status\":%d,\"bytes_in\":%zu,\"bytes_out\":%zu,"
           "\"queue_ms\":%.3f,\"compute_ms\":%.3f,\"total_ms\":%.3f}",
           ts, r->request_id, id_txt ? id_txt : "\"\"", r->method, r->path,
           r->status, r->bytes_in, r->bytes_out, queue, compute, total);
  free(id_txt);
  attnd_buf_free(&r->body);
  attnd_job_free(r->job);
  uv_mutex_destroy(&r->mu);
  free(r);
  *con_cls = NULL;
  atomic_fetch_sub(&s->active, 1);
}

/* ---- start, drain, stop ---------------------------------------------------
 */

static void on_drain_tick(uv_timer_t *t) {
  server_t *s = t->data;
  int idle =
      attnd_sched_inflight(s->sched) == 0 && atomic_load(&s->active) == 0;
  int late = s->cfg->drain_timeout_s > 0 &&
             attnd_now_ms() - s->drain_started >
                 (double)s->cfg->drain_timeout_s * 1000.0;
  if (!idle && !late)
    return;
  if (!idle) {
    fprintf(stderr,
            "{\"event\":\"drain_timeout\",\"inflight\":%d,\"active\":%d}\n",
            attnd_sched_inflight(s->sched), atomic_load(&s->active));
    s->exit_code = 1;
  }
  uv_timer_stop(t);
  uv_stop(&s->loop);
}

static void on_signal(uv_signal_t *sig, int signum) {
  server_t *s = sig->data;
  if (atomic_exchange(&s->draining, 1))
    return;
  fprintf(stderr, "{\"event\":\"draining\",\"signal\":%d,\"inflight\":%d}\n",
          signum, attnd_sched_inflight(s->sched));
  s->drain_started = attnd_now_ms();
  uv_timer_start(&s->drain_timer, on_drain_tick, 0, 20);
}

static int start_daemon(server_t *s) {
  const attnd_config_t *c = s->cfg;
  struct addrinfo hints = {.ai_flags = AI_PASSIVE | AI_NUMERICSERV,
                           .ai_socktype = SOCK_STREAM},
                  *ai = NULL;
  char port[16];
  snprintf(port, sizeof port, "%lld", (long long)c->port);
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
                   MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
  if (ai->ai_family == AF_INET6)
    flags |= strcmp(c->host, "::") == 0 ? MHD_USE_DUAL_STACK : MHD_USE_IPv6;
  s->daemon = MHD_start_daemon(
      flags, (uint16_t)c->port, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR,
      ai->ai_addr, MHD_OPTION_THREAD_POOL_SIZE, (unsigned)c->http_threads,
      MHD_OPTION_CONNECTION_LIMIT, (unsigned)c->max_connections,
      MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)c->connection_timeout_s,
      MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
      MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
      (size_t)c->connection_buffer_bytes, MHD_OPTION_END);
  freeaddrinfo(ai);
  if (s->daemon == NULL) {
    fprintf(stderr,
            "attnd: cannot listen on %s:%lld (in use, or not "
            "permitted?)\n",
            c->host, (long long)c->port);
    return -1;
  }
  const union MHD_DaemonInfo *di =
      MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
  s->port = di ? di->port : (int)c->port;
  return 0;
}

static FILE *open_access_log(const char *spec) {
  if (strcmp(spec, "off") == 0)
    return NULL;
  if (strcmp(spec, "stderr") == 0)
    return stderr;
  if (strcmp(spec, "stdout") == 0)
    return stdout;
  FILE *f = fopen(spec, "a");
  if (f == NULL)
    fprintf(stderr, "attnd: access_log: cannot open %s; logging to stderr\n",
            spec);
  return f ? f : stderr;
}

int attnd_serve(const attnd_config_t *cfg) {
  server_t s = {.cfg = cfg};
  attn_backend_info(&s.backend);
  if (getrandom(&s.id_prefix, sizeof s.id_prefix, 0) != sizeof s.id_prefix)
    s.id_prefix = (uint64_t)time(NULL);
  s.metrics = attnd_metrics_new();
  s.access_log = open_access_log(cfg->access_log);
  uv_loop_init(&s.loop);
  s.sched = attnd_sched_new(&s.loop, (int)cfg->workers, (int)cfg->queue_depth,
                            on_job_done, &s);
  if (s.metrics == NULL || s.sched == NULL || start_daemon(&s) < 0)
    return 1;

  uv_signal_init(&s.loop, &s.sigterm);
  uv_signal_init(&s.loop, &s.sigint);
  s.sigterm.data = s.sigint.data = &s;
  uv_signal_start(&s.sigterm, on_signal, SIGTERM);
  uv_signal_start(&s.sigint, on_signal, SIGINT);
  uv_timer_init(&s.loop, &s.drain_timer);
  s.drain_timer.data = &s;

  fprintf(stderr,
          "{\"event\":\"listening\",\"host\":\"%s\",\"port\":%d,\"version\":"
          "\"%s\",\"workers\":%lld,\"threads_per_request\":%lld,"
          "\"queue_depth\":%lld,\"blas\":\"%s\",\"blas_kernel\":\"%s\","
          "\"simd\":\"%s\"}\n",
          cfg->host, s.port, ATTN_VERSION, (long long)cfg->workers,
          (long long)cfg->threads_per_request, (long long)cfg->queue_depth,
          s.backend.blas, s.backend.blas_kernel, attn_isa_name(s.backend.isa));

  uv_run(&s.loop, UV_RUN_DEFAULT); /* until drained */

  MHD_stop_daemon(s.daemon);
  attnd_sched_close(s.sched);
  uv_close((uv_handle_t *)&s.sigterm, NULL);
  uv_close((uv_handle_t *)&s.sigint, NULL);
  uv_close((uv_handle_t *)&s.drain_timer, NULL);
  uv_run(&s.loop, UV_RUN_DEFAULT); /* close callbacks */
  uv_loop_close(&s.loop);
  attnd_sched_free(s.sched);
  attnd_metrics_free(s.metrics);
  fprintf(stderr, "{\"event\":\"stopped\",\"exit_code\":%d}\n", s.exit_code);
  if (s.access_log && s.access_log != stderr && s.access_log != stdout)
    fclose(s.access_log);
  return s.exit_code;
}
