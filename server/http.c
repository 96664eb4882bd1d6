/* server/http.c: routes, request intake and replies. See server.h.
 *
 * Two protocols compute attention: /v1 (POST /v1/attention, decode.c) and
 * the Open Inference Protocol (POST /v2/models/{model}/infer, oip.c). Each
 * decodes its body into the one request type and has its own reply and
 * error form; everything else, from the framing to the queue, is shared.
 * A POST request goes:
 *   1. first callback (headers): route, method, Content-Type,
 *      Content-Encoding and Content-Length are checked; a body over
 *      max_body_bytes is refused with 413 before it is read;
 *   2. upload callbacks: the body accumulates, inflated as it arrives when
 *      it has a content coding (gzip or deflate), within max_body_bytes;
 *   3. last callback: the body is decoded and validated into a job (HTTP
 *      thread), admitted to the scheduler (or 429), and the connection is
 *      suspended;
 *   4. the scheduler's done function (loop thread) resumes the connection;
 *   5. the callback after resumption writes the reply (HTTP thread);
 *   6. the completion callback logs the request and frees it. */
#include <jansson.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "access_log.h"
#include "assets.h"
#include "codec/deflate.h"
#include "codec/pool.h"
#include "codec/util.h"
#include "oip.h"
#include "request.h"
#include "run.h"
#include "server.h"
#include "session_api.h"

#include "tls.h"

/* R_PREFLIGHT: a CORS preflight (OPTIONS) on a known path. R_V2_*: the
 * paths of the Open Inference Protocol (oip.h). */
enum {
  R_NONE,
  R_ATTENTION,
  R_HEALTHZ,
  R_READYZ,
  R_METRICS,
  R_INFO,
  R_LAYERS,
  R_V2_SERVER,
  R_V2_LIVE,
  R_V2_READY,
  R_V2_MODEL,
  R_V2_MODEL_READY,
  R_V2_INFER,
  R_SESSIONS,         /* /v1/sessions: list (GET), create (POST) */
  R_SESSION,          /* /v1/sessions/{id}: GET, DELETE */
  R_SESSION_STEP,     /* /v1/sessions/{id}/attention */
  R_SESSION_FORK,     /* /v1/sessions/{id}/fork */
  R_SESSION_TRUNCATE, /* /v1/sessions/{id}/truncate */
  R_ASSET,            /* a file embedded in the binary (assets.h) */
  R_PREFLIGHT
};

/* The routes whose POST bodies become attention requests. */
static int computes(int route) {
  return route == R_ATTENTION || route == R_V2_INFER || route == R_SESSION_STEP;
}

#define BODY_INLINE 8192

/* One HTTP request, from its first callback to its completion. */
typedef struct req {
  attnd_server_t *srv;
  struct MHD_Connection *conn;
  int route;
  attnd_protocol_t proto;  /* its replies' and errors' form, and metrics */
  char model[256];         /* /v2/models/{model}...: the name */
  char version[16];        /* .../versions/{version}, or "" */
  char sid[72];            /* /v1/sessions/{id}...: the id */
  int with_body;           /* a POST or PUT: its body is read */
  attnd_error_t pre_error; /* a session's step that failed in its turn */
  int has_pre_error;
  const attnd_asset_t *asset; /* R_ASSET's file */
  double t_arrival;
  char request_id[96];
  char method[8];
  char path[96];
  attnd_buf_t body;
  attnd_request_t *req; /* owned while not submitted or after it came back */
  attnd_sched_outcome_t outcome; /* how the scheduler passed it back */
  uv_mutex_t mu;                 /* orders suspension before resumption */
  int submitted;   /* under mu: the scheduler owns req until it is back */
  int too_large;   /* the body outgrew max_body_bytes */
  int over_budget; /* the body did not fit in max_memory_bytes */
  attnd_inflate_t *inflate; /* the body's content coding, or NULL */
  attnd_coding_t coding;    /* the body's (identity without inflate) */
  int bad_coding;           /* the coded body does not inflate: why */
  int no_memory;            /* no memory to inflate it */
  char coding_msg[160];
  attnd_coding_t reply_coding; /* from Accept-Encoding */
  int64_t json_len;            /* Inference-Header-Content-Length, or -1 */
  size_t pad;        /* bytes before the body in `body`, so that a binary body's
                        tensors lie 64-byte aligned after its JSON */
  size_t reply_json; /* the same for the reply; 0 for none */
  int64_t mem_held;  /* this request's share of mem_used */
  const char *allow; /* the methods a 405 names */
  int status;
  size_t bytes_in, bytes_out;
  double total_ms;
  /* Last (req_new zeroes what comes before it): where a body of Content-
   * Length up to BODY_INLINE bytes (pad included) is read. */
  _Alignas(64) char body_mem[BODY_INLINE];
} req_t;

/* Freed req_t's, kept for the next requests (64: about 600 KB). */
static attnd_pool_t req_pool = ATTND_POOL_INIT(sizeof(req_t), 64);

static req_t *req_new(void) {
  req_t *r = attnd_pool_get(&req_pool);
  if (r)
    memset(r, 0, offsetof(req_t, body_mem));
  return r;
}

/* ---- responses ------------------------------------------------------------
 */

static void add_header(void *resp, const char *name, const char *value) {
  MHD_add_response_header(resp, name, value);
}

/* The headers of auth.h and cors.h: a 401's challenge, and CORS's for an
 * allowed Origin (a preflight's, or the exposed headers). */
static void add_security_headers(req_t *r, struct MHD_Response *resp,
                                 int status) {
  const char *authz =
      MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Authorization");
  if (status == 401)
    add_header(resp, "WWW-Authenticate", attnd_auth_challenge(authz != NULL));
  attnd_cors_headers(
      &r->srv->cors,
      MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Origin"),
      r->route == R_PREFLIGHT, r->allow, add_header, resp);
}

/* A 200 body of COMPRESS_MIN to COMPRESS_MAX bytes is compressed when the
 * client's Accept-Encoding asks for it: smaller ones would gain nothing,
 * and bigger ones are mostly tensor data (floats in text or base64), which
 * zlib shrinks by a quarter or so at 50 to 100 MB/s, on the HTTP thread,
 * before the first byte goes out: a browser (which always asks) would
 * wait seconds for a large reply that comes uncompressed in a fraction. */
#define COMPRESS_MIN 1024
#define COMPRESS_MAX ((size_t)1 << 20)

/* Blocks for small replies' text (body_reply), kept for reuse. */
#define REPLY_BLOCK 16384
static attnd_pool_t reply_pool = ATTND_POOL_INIT(REPLY_BLOCK, 64);

static void reply_release(void *block) {
  attnd_pool_put(&reply_pool, block);
}

/* Frees a body as send_body takes it. */
static void body_release(char *body, int pooled) {
  if (pooled)
    reply_release(body);
  else
    free(body);
}

/* Queues `body` (malloc'd, or with `pooled` a block of reply_pool; owned
 * by MHD afterwards; NULL when len is 0) with the common headers; `ctype`
 * NULL for none. A 200 reply is compressed in the coding of the client's
 * Accept-Encoding, if any. */
static enum MHD_Result send_body(req_t *r, int status, char *body, size_t len,
                                 int pooled, const char *ctype) {
  const char *coding = NULL;
  if (status == 200 && len >= COMPRESS_MIN && len <= COMPRESS_MAX &&
      r->reply_coding != ATTND_CODING_IDENTITY) {
    attnd_buf_t z;
    attnd_buf_init(&z);
    if (attnd_deflate(r->reply_coding, body, len, &z) == 0) {
      body_release(body, pooled);
      pooled = 0;
      body = z.data;
      len = z.len;
      coding = attnd_coding_name(r->reply_coding);
    } /* out of memory: the reply goes uncompressed */
  }
  struct MHD_Response *resp =
      pooled ? MHD_create_response_from_buffer_with_free_callback_cls(
                   len, body, reply_release, body)
             : MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
  if (resp == NULL) {
    body_release(body, pooled);
    return MHD_NO;
  }
  if (ctype)
    MHD_add_response_header(resp, "Content-Type", ctype);
  if (coding)
    MHD_add_response_header(resp, "Content-Encoding", coding);
  if (status == 200 && len >= COMPRESS_MIN && len <= COMPRESS_MAX)
    MHD_add_response_header(resp, "Vary", "Accept-Encoding");
  MHD_add_response_header(resp, "X-Request-Id", r->request_id);
  add_security_headers(r, resp, status);
  if (status == 405 && r->allow)
    MHD_add_response_header(resp, "Allow", r->allow);
  if (status == 429 || status == 503) {
    char ra[24];
    attnd_fmt_i64(ra,
                  status == 429 ? attnd_sched_retry_after_s(r->srv->sched) : 1);
    MHD_add_response_header(resp, "Retry-After", ra);
  }
  if (atomic_load(&r->srv->draining))
    MHD_add_response_header(resp, "Connection", "close");
  if (status == 200 && r->reply_json) {
    char hl[24];
    attnd_fmt_i64(hl, (int64_t)r->reply_json);
    MHD_add_response_header(resp, "Inference-Header-Content-Length", hl);
  }
  if (r->route == R_ASSET && status == 200) {
    /* the binary's files: revalidated (a new binary may change them), and
     * the page's scripts only from here, none inline, no eval */
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(
        resp, "Content-Security-Policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; "
        "img-src 'self' data:; connect-src 'self'; base-uri 'none'; "
        "form-action 'none'; frame-ancestors 'none'");
  }
  if (computes(r->route) && status == 200 && r->req) {
    const attnd_request_t *j = r->req;
    const char *names[] = {"decode", "queue", "compute", "encode", "total"};
    double ms[] = {j->t.decode_ms, j->t.start - j->t.submit,
                   j->t.end - j->t.start, j->t.encode_ms, r->total_ms};
    char st[256];
    size_t k = 0;
    for (int i = 0; i < 5; i++) { /* "decode;dur=0.123, queue;dur=..." */
      size_t n = strlen(names[i]);
      memcpy(st + k, i ? ", " : "", i ? 2 : 0);
      k += i ? 2 : 0;
      memcpy(st + k, names[i], n);
      memcpy(st + k + n, ";dur=", 5);
      k += n + 5;
      k += attnd_fmt_ms(st + k, ms[i]);
    }
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
  return send_body(r, status, body, n + 1, 0, "application/json");
}

/* The error reply: /v1's {"error":{"code","message","field"}}, or the Open
 * Inference Protocol's {"error":"<message>"} (its clients read a string
 * there) with that protocol's status. Written with the codec's string
 * escaper, which turns bytes that are not UTF-8 (a client's path, a
 * message cut short) into U+FFFD, so that every error gets its reply. */
static enum MHD_Result send_error(req_t *r, const attnd_error_t *e) {
  attnd_metrics_reject(r->srv->metrics, attnd_error_reason(e->code));
  attnd_buf_t b;
  attnd_buf_init(&b);
  int status;
  if (r->proto == ATTND_PROTO_V2) {
    status = attnd_error_status_v2(e->code);
    attnd_buf_puts(&b, "{\"error\":");
    attnd_buf_json_string(&b, e->message, strlen(e->message));
    attnd_buf_puts(&b, "}\n");
  } else {
    status = attnd_error_status(e->code);
    attnd_buf_puts(&b, "{\"error\":{\"code\":\"");
    attnd_buf_puts(&b, attnd_error_name(e->code));
    attnd_buf_puts(&b, "\",\"message\":");
    attnd_buf_json_string(&b, e->message, strlen(e->message));
    if (e->field[0]) {
      attnd_buf_puts(&b, ",\"field\":");
      attnd_buf_json_string(&b, e->field, strlen(e->field));
    }
    attnd_buf_puts(&b, "}}\n");
  }
  if (b.oom) {
    attnd_buf_free(&b);
    return MHD_NO;
  }
  return send_body(r, status, b.data, b.len, 0, "application/json");
}

/* A body written into b, sent with `status` (b is emptied). */
static enum MHD_Result send_buf(req_t *r, int status, attnd_buf_t *b,
                                const char *ctype) {
  if (b->oom) {
    attnd_buf_free(b);
    return MHD_NO;
  }
  enum MHD_Result ok = send_body(r, status, b->data, b->len, 0, ctype);
  attnd_buf_init(b);
  return ok;
}

static enum MHD_Result fail(req_t *r, attnd_err_t code, const char *field,
                            const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static enum MHD_Result fail(req_t *r, attnd_err_t code, const char *field,
                            const char *fmt, ...) {
  attnd_error_t e;
  va_list ap;
  va_start(ap, fmt);
  attnd_error_vset(&e, code, field, fmt, ap);
  va_end(ap);
  return send_error(r, &e);
}

/* ---- the memory budget (budget.h) ---------------------------------------- */

static int mem_take(req_t *r, int64_t bytes) {
  return attnd_budget_take(&r->srv->budget, bytes, &r->mem_held);
}

/* The overloaded error of a request whose `need` bytes the budget does not
 * have now: -1, with e. */
static int budget_full(const req_t *r, int64_t need, attnd_error_t *e) {
  const attnd_budget_t *b = &r->srv->budget;
  return attnd_error_set(e, ATTND_ERR_OVERLOADED, NULL,
                         "%lld bytes of memory are needed and %lld of the "
                         "%lld that requests may hold (max_memory_bytes less "
                         "kv_cache_bytes) are in use; retry later",
                         (long long)need, (long long)attnd_budget_used(b),
                         (long long)b->max);
}

static enum MHD_Result no_memory(req_t *r, int64_t need) {
  attnd_error_t e;
  budget_full(r, need, &e);
  return send_error(r, &e);
}

/* ---- the GET endpoints ----------------------------------------------------
 */

static enum MHD_Result get_metrics(req_t *r) {
  attnd_server_t *s = r->srv;
  attnd_gauges_t g = {
      .queue_depth = attnd_sched_waiting(s->sched),
      .busy_workers = attnd_sched_busy(s->sched),
      .workers = (int)s->cfg->workers,
      .inflight = attnd_sched_inflight(s->sched),
      .draining = atomic_load(&s->draining),
  };
  attnd_sessions_stats_t st;
  attnd_sessions_stats(s->sessions, &st);
  g.sessions = st.sessions;
  g.kv_bytes_used = st.kv_bytes_used;
  g.kv_bytes_free = st.kv_bytes_free;
  g.kv_pages_shared = st.pages_shared;
  g.evicted_lru = st.evicted_lru;
  g.expired = st.expired;
  g.deleted = st.deleted;
  attnd_sched_batches(s->sched, &g.batches, &g.batched_steps);
  attnd_buf_t b;
  attnd_buf_init(&b);
  attnd_metrics_render(s->metrics, &g, &b);
  if (b.oom) {
    attnd_buf_free(&b);
    return MHD_NO;
  }
  return send_body(r, 200, b.data, b.len, 0, "text/plain; version=0.0.4");
}

static void info_key(const char *key, int64_t value, void *obj) {
  json_object_set_new(obj, key, json_integer((json_int_t)value));
}

/* GET /v1/info: the version, the keys the config table marks for it, and
 * the compute backend. */
static enum MHD_Result get_info(req_t *r) {
  attnd_server_t *s = r->srv;
  json_t *v = json_pack("{s:s}", "version", ATTN_VERSION);
  json_t *limits = json_object();
  attnd_config_info(s->cfg, 1, info_key, limits);
  json_object_set_new(v, "limits", limits);
  attnd_config_info(s->cfg, 0, info_key, v);
  json_object_set_new(v, "backend",
                      json_pack("{s:s,s:s,s:s,s:s}", "blas", s->backend.blas,
                                "blas_kernel", s->backend.blas_kernel,
                                "blas_config", s->backend.blas_config, "simd",
                                attn_isa_name(s->backend.isa)));
  return send_json(r, 200, v);
}

/* One layer as /v1/layers shows it. */
static json_t *layer_json(const attnd_layer_t *l) {
  static const char *const causal[] = {"none", "bottom_right", "top_left"};
  static const char *const styles[] = {"none", "half", "interleaved"};
  static const char *const scalings[] = {"none", "linear", "llama3"};
  json_t *pos;
  const attn_rope_t *rp = &l->rope;
  if (rp->style == ATTN_ROPE_NONE) {
    pos = json_pack("{s:s}", "type", "none");
  } else {
    pos = json_pack("{s:s,s:f,s:I,s:s}", "type", "rope", "theta", rp->theta,
                    "dims", (json_int_t)(rp->dims ? rp->dims : l->Dh), "style",
                    styles[rp->style]);
    if (rp->scaling != ATTN_ROPE_SCALING_NONE)
      json_object_set_new(
          pos, "scaling",
          rp->scaling == ATTN_ROPE_SCALING_LINEAR
              ? json_pack("{s:s,s:f}", "type", "linear", "factor", rp->factor)
              : json_pack("{s:s,s:f,s:f,s:f,s:f}", "type",
                          scalings[rp->scaling], "factor", rp->factor,
                          "low_freq_factor", rp->low_freq_factor,
                          "high_freq_factor", rp->high_freq_factor,
                          "original_max_position_embeddings",
                          rp->original_max_position));
  }
  return json_pack(
      "{s:s,s:s,s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:{s:b,s:b,s:b,s:b},s:b,s:o,s:s,"
      "s:s,s:I}",
      "name", l->name, "file", l->file, "convention",
      attnd_convention_name(l->convention), "embed_dim", (json_int_t)l->E,
      "num_heads", (json_int_t)l->H, "num_kv_heads", (json_int_t)l->Hkv,
      "head_dim", (json_int_t)l->Dh, "v_head_dim", (json_int_t)l->Dv,
      "output_dim", (json_int_t)l->Eo, "biases", "q", l->q_bias != NULL, "k",
      l->k_bias != NULL, "v", l->v_bias != NULL, "o", l->o_bias != NULL,
      "qk_norm", l->q_norm != NULL, "positions", pos, "causal",
      causal[l->causal], "dtype", l->file_dtype, "bytes", (json_int_t)l->bytes);
}

/* GET /v1/layers: every layer held; GET /v1/layers/{name}: one. */
static enum MHD_Result get_layers(req_t *r) {
  attnd_layer_set_t *set = attnd_server_layers(r->srv);
  const char *name = r->path + strlen("/v1/layers");
  enum MHD_Result ret;
  if (*name == '/') {
    const attnd_layer_t *l = attnd_layer_set_find(set, name + 1);
    if (l == NULL) {
      attnd_layer_set_unref(set);
      return fail(r, ATTND_ERR_UNKNOWN_LAYER, "layer",
                  "layer '%.200s' is not loaded (GET /v1/layers lists them)",
                  name + 1);
    }
    ret = send_json(r, 200, layer_json(l));
  } else {
    json_t *list = json_array();
    for (size_t i = 0; i < attnd_layer_set_count(set); i++)
      json_array_append_new(list, layer_json(attnd_layer_set_get(set, i)));
    ret =
        send_json(r, 200,
                  json_pack("{s:o,s:I,s:f}", "layers", list, "bytes",
                            (json_int_t)attnd_layer_set_bytes(set),
                            "load_seconds", attnd_layer_set_load_seconds(set)));
  }
  attnd_layer_set_unref(set);
  return ret;
}

/* ---- POST: the bodies that become attention requests ---------------------
 */

/* ct is `type`, maybe with parameters ("application/json; charset=utf-8"). */
static int is_media_type(const char *ct, const char *type) {
  size_t n = strlen(type);
  return ct && strncasecmp(ct, type, n) == 0 &&
         (ct[n] == 0 || ct[n] == ';' || ct[n] == ' ');
}

/* /v1 takes JSON alone. The Open Inference Protocol does not read the
 * Content-Type, as Triton does not: its clients send none (tritonclient),
 * JSON, octet-stream for binary data, or curl's form type for -d. */
static enum MHD_Result check_content_type(req_t *r, int *ok) {
  const char *ct =
      MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Content-Type");
  const char *cl =
      MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Content-Length");
  const char *te = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND,
                                               "Transfer-Encoding");
  int empty = cl ? strcmp(cl, "0") == 0 : te == NULL;
  *ok = r->proto == ATTND_PROTO_V2 || is_media_type(ct, "application/json") ||
        empty; /* no body, nothing to type */
  if (*ok)
    return MHD_YES;
  return fail(r, ATTND_ERR_UNSUPPORTED_MEDIA_TYPE, NULL,
              "Content-Type is %s%s%s; expected application/json",
              ct ? "'" : "", ct ? ct : "missing", ct ? "'" : "");
}

/* Inference-Header-Content-Length (OIP): the JSON's length in a binary
 * body, a decimal integer; -1 when absent. */
static enum MHD_Result read_json_length(req_t *r, int *ok) {
  const char *h = MHD_lookup_connection_value(
      r->conn, MHD_HEADER_KIND, "Inference-Header-Content-Length");
  r->json_len = -1;
  *ok = 1;
  if (h == NULL || r->proto != ATTND_PROTO_V2)
    return MHD_YES;
  size_t n = strlen(h);
  *ok = n > 0 && n <= 18 && strspn(h, "0123456789") == n;
  if (!*ok)
    return fail(r, ATTND_ERR_BAD_REQUEST, "Inference-Header-Content-Length",
                "Inference-Header-Content-Length is '%.40s'; expected the "
                "length in bytes of the body's JSON",
                h);
  r->json_len = (int64_t)strtoll(h, NULL, 10);
  return MHD_YES;
}

/* Content-Encoding: identity, or gzip or deflate, inflated as it comes. */
static enum MHD_Result read_coding(req_t *r, int *ok) {
  const char *h =
      MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Content-Encoding");
  int c = h ? attnd_coding_parse(h) : ATTND_CODING_IDENTITY;
  *ok = c >= 0;
  if (!*ok)
    return fail(r, ATTND_ERR_UNSUPPORTED_MEDIA_TYPE, "Content-Encoding",
                "Content-Encoding '%.40s' is not supported; send gzip, "
                "deflate or none",
                h);
  r->coding = (attnd_coding_t)c;
  if (c != ATTND_CODING_IDENTITY &&
      (r->inflate = attnd_inflate_new(r->coding)) == NULL)
    return *ok = 0, fail(r, ATTND_ERR_OUT_OF_MEMORY, NULL,
                         "out of memory to inflate the body");
  return MHD_YES;
}

static enum MHD_Result body_start(req_t *r) {
  attnd_server_t *s = r->srv;
  int ok;
  enum MHD_Result ret;
  if (atomic_load(&s->draining))
    return fail(r, ATTND_ERR_DRAINING, NULL,
                "the server is shutting down; retry on another instance");
  if ((ret = check_content_type(r, &ok), !ok) ||
      (ret = read_coding(r, &ok), !ok) || (ret = read_json_length(r, &ok), !ok))
    return ret;
  const char *cl =
      MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Content-Length");
  if (cl && strtoull(cl, NULL, 10) > (unsigned long long)s->cfg->max_body_bytes)
    return fail(r, ATTND_ERR_PAYLOAD_TOO_LARGE, NULL,
                "the body has %s bytes, over max_body_bytes %lld", cl,
                (long long)s->cfg->max_body_bytes);
  /* a coded body takes its share as it inflates */
  if (cl && !r->inflate && mem_take(r, (int64_t)strtoull(cl, NULL, 10)) < 0)
    return no_memory(r, (int64_t)strtoull(cl, NULL, 10));
  return MHD_YES; /* read the body */
}

/* Sizes the empty body buffer for `bytes`, and with binary tensor data,
 * starts it with the pad that puts the bytes after the JSON on a 64-byte
 * boundary, so that the request can read FP32 tensors where they lie. */
static void body_reserve(req_t *r, size_t bytes) {
  if (r->body.cap == 0 && bytes < BODY_INLINE - 64)
    attnd_buf_init_in(&r->body, r->body_mem, sizeof r->body_mem);
  if (r->json_len < 0) {
    attnd_buf_reserve(&r->body, bytes);
    return;
  }
  if (attnd_buf_reserve(&r->body, bytes + 64) < 0)
    return;
  r->pad = (64 - ((uintptr_t)r->body.data + (uintptr_t)r->json_len) % 64) % 64;
  memset(r->body.data, 0, r->pad);
  r->body.len = r->pad;
}

/* Inflates a coded body's next bytes into r->body, within max_body_bytes
 * and the memory budget, which it takes as the body grows. */
static void inflate_more(req_t *r, const char *data, size_t size, size_t max) {
  if (r->body.cap == 0)
    body_reserve(r, 65536);
  size_t before = r->body.len;
  int rc = attnd_inflate_feed(r->inflate, data, size, &r->body, max + r->pad,
                              r->coding_msg, sizeof r->coding_msg);
  if (rc == -1)
    r->bad_coding = 1;
  else if (rc == -2)
    r->too_large = 1;
  else if (rc == -3)
    r->no_memory = 1;
  else if (mem_take(r, (int64_t)(r->body.len - before)) < 0)
    r->over_budget = 1;
  if (rc < 0 || r->over_budget)
    attnd_buf_free(&r->body);
}

/* Accumulates the body. A body without Content-Length that outgrows
 * max_body_bytes (or a coded one that inflates past it) is discarded as it
 * arrives and answered 413 at its end (libmicrohttpd cannot answer in the
 * middle of an upload); one that keeps going 64 MiB past the limit has its
 * connection closed. */
static enum MHD_Result body_more(req_t *r, const char *data, size_t *size) {
  attnd_server_t *s = r->srv;
  size_t max = (size_t)s->cfg->max_body_bytes;
  r->bytes_in += *size;
  if (!r->inflate && r->body.len - r->pad + *size > max)
    r->too_large = 1;
  if (r->too_large || r->bad_coding || r->over_budget || r->no_memory) {
    attnd_buf_free(&r->body);
    *size = 0;
    return r->bytes_in > max + ((size_t)64 << 20) ? MHD_NO : MHD_YES;
  }
  if (r->inflate) {
    inflate_more(r, data, *size, max);
    *size = 0;
    return MHD_YES;
  }
  const char *cl =
      MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Content-Length");
  if (!cl && mem_take(r, (int64_t)*size) < 0) {
    r->over_budget = 1; /* without a length, the body takes as it grows */
    attnd_buf_free(&r->body);
    *size = 0;
    return MHD_YES;
  }
  if (r->body.cap == 0 && cl) /* size the buffer once, to the length */
    body_reserve(r, (size_t)strtoull(cl, NULL, 10));
  attnd_buf_append(&r->body, data, *size);
  *size = 0;
  return MHD_YES;
}

/* The body, read whole: decoded by its protocol into a request, which is
 * submitted to the scheduler, and the connection suspended. */
static enum MHD_Result session_control(req_t *r);
static enum MHD_Result step_submit(req_t *r);
static enum MHD_Result admit(req_t *r, attnd_request_t *req);
static enum MHD_Result body_reply(req_t *r);

/* The body, read whole: decoded by its protocol into a request, which is
 * submitted to the scheduler, and the connection suspended; or a session's
 * control request, answered now. */
static enum MHD_Result body_submit(req_t *r) {
  attnd_server_t *s = r->srv;
  attnd_error_t e;
  attnd_request_t *req;
  if (r->too_large && r->inflate)
    return fail(r, ATTND_ERR_PAYLOAD_TOO_LARGE, NULL,
                "the %s body inflates past max_body_bytes %lld",
                attnd_coding_name(r->coding),
                (long long)s->cfg->max_body_bytes);
  if (r->too_large)
    return fail(r, ATTND_ERR_PAYLOAD_TOO_LARGE, NULL,
                "the body has %zu bytes, over max_body_bytes %lld", r->bytes_in,
                (long long)s->cfg->max_body_bytes);
  if (r->bad_coding ||
      (r->inflate &&
       attnd_inflate_end(r->inflate, r->coding_msg, sizeof r->coding_msg) < 0))
    return fail(r, ATTND_ERR_BAD_REQUEST, "Content-Encoding",
                "Content-Encoding is %s, but %s", attnd_coding_name(r->coding),
                r->coding_msg);
  if (r->body.oom || r->no_memory)
    return fail(r, ATTND_ERR_OUT_OF_MEMORY, NULL,
                "out of memory reading the body");
  if (r->over_budget)
    return no_memory(r, (int64_t)(r->inflate ? r->body.len : r->bytes_in));
  if (r->route == R_SESSION_STEP)
    return step_submit(r);
  if (!computes(r->route))
    return session_control(r);
  attnd_layer_set_t *layers = attnd_server_layers(s);
  const char *body = r->body.data ? r->body.data + r->pad : "";
  size_t len = r->body.len - r->pad;
  /* lent: an OIP request may take a body on the heap */
  void *own = r->body.lent ? NULL : r->body.data;
  int bad = r->route == R_V2_INFER
                ? attnd_oip_decode(r->model, body, len, r->json_len, &own,
                                   r->body.cap, s->cfg, layers, &req, &e)
                : attnd_request_decode(body, len, s->cfg, layers, &req, &e);
  attnd_layer_set_unref(layers); /* a request with a layer holds its own */
  if (own == NULL)
    attnd_buf_init(&r->body); /* the request took the body */
  attnd_buf_free(&r->body);
  if (bad < 0)
    return send_error(r, &e);
  req->t.arrival = r->t_arrival;
  r->req = req; /* the connection owns the request from here */
  /* the body's share of the budget becomes the request's */
  attnd_budget_give(&s->budget, &r->mem_held);
  return admit(r, req);
}

/* The memory a decoded and planned request needs, taken from the budget:
 * 0, or -1 with the error (limit_exceeded, or overloaded) in e. */
static int take_memory(req_t *r, attnd_request_t *req, attnd_error_t *e) {
  attnd_server_t *s = r->srv;
  int64_t need = (int64_t)attnd_request_memory(req);
  if (need > s->budget.max)
    return attnd_error_set(e, ATTND_ERR_LIMIT_EXCEEDED, NULL,
                           "the request needs %lld bytes of memory (tensors, "
                           "workspace, reply), over the %lld of "
                           "max_memory_bytes that requests may hold (less "
                           "kv_cache_bytes)",
                           (long long)need, (long long)s->budget.max);
  return mem_take(r, need) < 0 ? budget_full(r, need, e) : 0;
}

/* Whether req may join a batch of session steps (batch_window_us). */
static int batches(const req_t *r, const attnd_request_t *req) {
  return r->srv->cfg->batch_window_us > 0 && attnd_request_batchable(req);
}

/* Hands req to the scheduler; with `suspend`, the connection is suspended
 * too (under mu, so that the request cannot come back and resume it before
 * it is). Returns 0, or -1 when the queue is full. */
static int hand_off(req_t *r, attnd_request_t *req, int suspend) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
  attnd_sched_job_t job = {
      .job = req,
      .tag = r,
      .deadline_ms = req->t.arrival + (double)req->timeout_ms,
      .cancel = &req->cancel,
      .fd = ci ? ci->connect_fd : -1,
      .batchable = batches(r, req),
      .tokens = req->params.query.dim[0],
  };
  if (req->t.submit == 0)
    req->t.submit = attnd_now_ms();
  /* The scheduler owns the request until attnd_http_job_done. */
  if (suspend)
    uv_mutex_lock(&r->mu);
  int ok = attnd_sched_submit(r->srv->sched, &job) == 0;
  if (ok && suspend) {
    r->submitted = 1;
    MHD_suspend_connection(r->conn);
  }
  if (suspend)
    uv_mutex_unlock(&r->mu);
  return ok ? 0 : -1;
}

static int queue_full(req_t *r, attnd_error_t *e) {
  return attnd_error_set(e, ATTND_ERR_OVERLOADED, NULL,
                         "the queue is full (%lld waiting); retry later",
                         (long long)r->srv->cfg->queue_depth);
}

/* The HTTP threads' workspaces for what they compute inline: kept from
 * request to request, as a worker's, and freed when the thread ends. */
static pthread_key_t inline_key;
static pthread_once_t inline_once = PTHREAD_ONCE_INIT;

static void inline_scratch_free(void *p) {
  attnd_scratch_t *s = p;
  free(s->data);
  free(s);
}

static void inline_key_init(void) {
  pthread_key_create(&inline_key, inline_scratch_free);
}

/* Whether req is small enough to compute here and now: its hand-off to a
 * worker and back (four thread hops and wake-ups) would cost more than its
 * work (inline_max_flops). A step that could join a batch goes to the
 * scheduler instead where it may find company (something in flight there,
 * or another such step computing on an HTTP thread) and batches have been
 * seen to pay (attnd_sched_batch_pays). */
static int runs_inline(const req_t *r, const attnd_request_t *req) {
  attnd_server_t *s = r->srv;
  if ((double)req->plan.flops > (double)s->cfg->inline_max_flops)
    return 0;
  return !batches(r, req) ||
         (atomic_load(&s->inline_steps) == 0 &&
          attnd_sched_inflight(s->sched) == 0) ||
         !attnd_sched_batch_pays(s->sched, req->params.query.dim[0]);
}

/* Computes req on this HTTP thread, as a worker would (worker -1); the
 * caller then answers at once. Returns 0, or -1 when there is no memory
 * for the workspace (req->result says so too). */
static void run_inline(attnd_request_t *req) {
  pthread_once(&inline_once, inline_key_init);
  attnd_scratch_t *s = pthread_getspecific(inline_key);
  if (s == NULL && (s = calloc(1, sizeof *s)) != NULL)
    pthread_setspecific(inline_key, s);
  attnd_scratch_t none = {0};
  req->t.submit = attnd_now_ms();
  attnd_request_run(req, -1, s ? s : &none);
}

/* A decoded and planned request: its memory, then the scheduler, or, when
 * it is small, computed here and answered now. HTTP thread. */
static enum MHD_Result admit(req_t *r, attnd_request_t *req) {
  attnd_error_t e;
  int inline_run = runs_inline(r, req);
  if (take_memory(r, req, &e) < 0 ||
      (!inline_run && hand_off(r, req, 1) < 0 && queue_full(r, &e) < 0)) {
    if (req->session) /* a step that will not run lets the next have its turn */
      attnd_session_step_end(r->srv->sessions, req, 0, NULL);
    return send_error(r, &e);
  }
  if (!inline_run)
    return MHD_YES;
  int step = batches(r, req);
  if (step)
    atomic_fetch_add(&r->srv->inline_steps, 1);
  run_inline(req);
  if (step) {
    atomic_fetch_sub(&r->srv->inline_steps, 1);
    attnd_sched_ran_alone(r->srv->sched, req->params.query.dim[0],
                          req->t.end - req->t.start);
  }
  if (req->session &&
      attnd_session_step_end(r->srv->sessions, req, req->result == 0,
                             &r->pre_error) < 0)
    r->has_pre_error = 1;
  r->outcome = ATTND_SCHED_DONE;
  return body_reply(r);
}

/* ---- sessions (session.h) --------------------------------------------------
 *
 * A step is decoded against its session's shape and enqueued on it. In its
 * turn (at once, or when the step ahead of it has ended) it is prepared,
 * planned, given its memory and handed to the scheduler; attnd_http_job_done
 * ends it, which gives the next step its turn. A step that must wait keeps
 * its connection suspended meanwhile; one that fails in its turn comes back
 * with its error (pre_error). */

/* In its turn: the step prepared (its pages ready) and planned, within its
 * deadline. 0, or -1 with e, the step then ended. */
static int step_prepare(req_t *r, attnd_error_t *e) {
  attnd_server_t *s = r->srv;
  attnd_request_t *j = r->req;
  int bad = attnd_session_prepare(s->sessions, j, e) < 0 ||
            attnd_request_plan(j, s->cfg, e) < 0;
  if (!bad && attnd_now_ms() > j->t.arrival + (double)j->timeout_ms)
    bad = attnd_error_set(e, ATTND_ERR_DEADLINE_EXCEEDED, "timeout_ms",
                          "no result within timeout_ms %lld (waited %.1f ms "
                          "for the session's steps ahead of this one)",
                          (long long)j->timeout_ms,
                          attnd_now_ms() - j->t.submit) < 0;
  if (bad)
    attnd_session_step_end(s->sessions, j, 0, NULL);
  return bad ? -1 : 0;
}

/* The session's turn function (session.h), on the thread that ended the
 * step ahead of this one (the loop thread: it hands the step to a worker,
 * never computes it). The connection is suspended; a step that cannot
 * start comes back with its error. */
static void step_turn(void *tag) {
  req_t *r = tag;
  attnd_request_t *j = r->req;
  struct MHD_Connection *conn = r->conn;
  uv_mutex_lock(&r->mu); /* waits out step_submit's suspension */
  uv_mutex_unlock(&r->mu);
  attnd_error_t *e = &r->pre_error;
  if (step_prepare(r, e) == 0) {
    if (take_memory(r, j, e) == 0 &&
        (hand_off(r, j, 0) == 0 || queue_full(r, e) == 0))
      return;
    attnd_session_step_end(r->srv->sessions, j, 0, NULL);
  }
  uv_mutex_lock(&r->mu);
  r->has_pre_error = 1;
  r->outcome = ATTND_SCHED_DONE;
  r->submitted = 0;
  uv_mutex_unlock(&r->mu);
  MHD_resume_connection(conn); /* r may be gone from here on */
}

static enum MHD_Result step_submit(req_t *r) {
  attnd_server_t *s = r->srv;
  attnd_error_t e;
  attnd_session_shape_t shape;
  attnd_request_t *j = NULL;
  if (attnd_session_shape(s->sessions, r->sid, &shape, &e) < 0)
    return send_error(r, &e);
  int bad = attnd_step_decode(r->body.data ? r->body.data + r->pad : "",
                              r->body.len - r->pad, s->cfg, &shape, &j, &e);
  attnd_layer_set_unref(shape.layers); /* a request with a layer holds one */
  attnd_buf_free(&r->body);
  attnd_budget_give(&s->budget, &r->mem_held);
  if (bad < 0)
    return send_error(r, &e);
  j->t.arrival = r->t_arrival;
  j->t.submit = attnd_now_ms(); /* waiting for its turn is queueing too */
  r->req = j;
  uv_mutex_lock(&r->mu);
  int now = attnd_session_enqueue(s->sessions, r->sid, j, step_turn, r, &e);
  if (now == 0) { /* others are ahead: its turn comes later */
    r->submitted = 1;
    MHD_suspend_connection(r->conn);
  }
  uv_mutex_unlock(&r->mu);
  if (now < 0 || (now == 1 && step_prepare(r, &e) < 0))
    return send_error(r, &e);
  return now == 1 ? admit(r, j) : MHD_YES;
}

/* A session's control request (create, by POST or PUT, fork, truncate):
 * answered now. */
static enum MHD_Result session_control(req_t *r) {
  attnd_server_t *s = r->srv;
  attnd_error_t e;
  attnd_buf_t b;
  attnd_buf_init(&b);
  const char *body = r->body.data ? r->body.data + r->pad : "";
  size_t len = r->body.len - r->pad;
  int bad, status = 201;
  if (r->route == R_SESSIONS || r->route == R_SESSION) { /* POST or PUT */
    attnd_layer_set_t *layers = attnd_server_layers(s);
    bad = attnd_session_api_create(s->sessions,
                                   r->route == R_SESSION ? r->sid : NULL, body,
                                   len, s->cfg, layers, &b, &e);
    attnd_layer_set_unref(layers);
  } else if (r->route == R_SESSION_FORK) {
    bad = attnd_session_api_fork(s->sessions, r->sid, body, len, &b, &e);
  } else {
    status = 200;
    bad = attnd_session_api_truncate(s->sessions, r->sid, body, len, &b, &e);
  }
  if (bad < 0) {
    attnd_buf_free(&b);
    return send_error(r, &e);
  }
  return send_buf(r, status, &b, "application/json");
}

/* GET /v1/sessions, GET or DELETE /v1/sessions/{id}. */
static enum MHD_Result session_get(req_t *r) {
  attnd_server_t *s = r->srv;
  attnd_error_t e;
  attnd_buf_t b;
  attnd_buf_init(&b);
  int bad;
  if (r->route == R_SESSIONS) {
    bad = attnd_session_api_list(
        s->sessions,
        MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "limit"),
        MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "after"),
        &b, &e);
  } else if (strcmp(r->method, "DELETE") == 0) {
    if (attnd_session_delete(s->sessions, r->sid, &e) < 0)
      return send_error(r, &e);
    return send_body(r, 204, NULL, 0, 0, NULL);
  } else {
    attnd_session_info_t info;
    bad = attnd_session_get(s->sessions, r->sid, &info, &e);
    if (!bad) {
      attnd_session_info_json(&info, &b);
      attnd_buf_puts(&b, "\n");
    }
  }
  if (bad < 0) {
    attnd_buf_free(&b);
    return send_error(r, &e);
  }
  return send_buf(r, 200, &b, "application/json");
}

/* The request came back (the connection was resumed): write its reply. */
static enum MHD_Result body_reply(req_t *r) {
  attnd_request_t *j = r->req;
  if (r->has_pre_error)
    return send_error(r, &r->pre_error);
  if (r->outcome == ATTND_SCHED_ABANDONED) {
    r->status = 499; /* logged only: nobody is listening */
    return MHD_NO;
  }
  if (r->outcome == ATTND_SCHED_EXPIRED)
    return fail(r, ATTND_ERR_DEADLINE_EXCEEDED, "timeout_ms",
                "no result within timeout_ms %lld (waited %.1f ms in the "
                "queue%s)",
                (long long)j->timeout_ms,
                (j->t.start ? j->t.start : attnd_now_ms()) - j->t.submit,
                j->t.start ? ", then was cancelled while computing" : "");
  if (j->result == ATTN_ENUMERIC) /* a result float32 cannot hold: 422 */
    return fail(r, ATTND_ERR_NUMERIC_OVERFLOW,
                attnd_request_field_path(j->error.field_id), "%s",
                j->error.message);
  if (j->result != 0) /* ATTN_ENOSPC */
    return fail(r, ATTND_ERR_OUT_OF_MEMORY, NULL,
                "out of memory for this request's workspace and outputs; "
                "retry later");
  attnd_buf_t b;
  char *block = attnd_pool_get(&reply_pool);
  if (block)
    attnd_buf_init_in(&b, block, REPLY_BLOCK);
  else
    attnd_buf_init(&b);
  size_t json_len = 0;
  if (r->route == R_V2_INFER)
    attnd_oip_encode(j, r->model, &b, &json_len, &r->total_ms);
  else
    attnd_request_encode(j, &b, &r->total_ms), json_len = b.len;
  int pooled = block && b.lent; /* else the text outgrew the block */
  if (block && !pooled)
    reply_release(block);
  if (b.oom) {
    if (pooled)
      reply_release(block);
    attnd_buf_free(&b);
    return fail(r, ATTND_ERR_OUT_OF_MEMORY, NULL,
                "out of memory for the reply");
  }
  attnd_metrics_observe(r->srv->metrics, r->proto, j->plan.Lk,
                        j->t.start - j->t.submit, j->t.end - j->t.start,
                        r->total_ms);
  int binary = json_len < b.len;
  r->reply_json = binary ? json_len : 0;
  return send_body(r, 200, b.data, b.len, pooled,
                   binary ? "application/octet-stream" : "application/json");
}

/* Taking mu waits out body_submit, so the connection is suspended by
 * then. It is resumed after mu is released: once resumed, an HTTP thread
 * may finish the request and free r (at once for an abandoned request), mu
 * included. */
void attnd_http_job_done(void *job, void *tag, attnd_sched_outcome_t outcome,
                         void *arg) {
  req_t *r = tag;
  attnd_request_t *j = job;
  struct MHD_Connection *conn = r->conn;
  (void)arg;
  attnd_error_t e;
  /* commits its tokens; the next step gets its turn */
  int gone = j->session && attnd_session_step_end(r->srv->sessions, j,
                                                  outcome == ATTND_SCHED_DONE &&
                                                      j->result == 0,
                                                  &e) < 0;
  uv_mutex_lock(&r->mu);
  if (gone) {
    r->pre_error = e;
    r->has_pre_error = 1;
  }
  r->outcome = outcome;
  r->submitted = 0;
  uv_mutex_unlock(&r->mu);
  MHD_resume_connection(conn); /* r may be gone from here on */
}

/* ---- message framing (RFC 9112) ------------------------------------------
 *
 * libmicrohttpd 0.9.75 reads the first Content-Length it finds and ignores
 * the rest; lets Transfer-Encoding override Content-Length and then keeps
 * the connection open for what follows the chunks; and reads a body with
 * any Transfer-Encoding other than exactly "chunked" until the client
 * closes. A request whose framing two parsers could read two ways is
 * refused here, from its headers, before any of its body is read: a reply
 * queued from the first callback closes the connection, so nothing after
 * the request is ever read as another one. */

/* What the headers say about the length of the body. */
typedef struct framing {
  int n_length;             /* Content-Length field lines */
  const char *length;       /* the first one's value */
  const char *other_length; /* a later one that differs from it */
  int n_coding;             /* Transfer-Encoding field lines */
  const char *coding;       /* the first one's value */
  int n_chunked;            /* "chunked" among all their codings */
  char unknown[32];         /* the first coding other than chunked */
  const char *bad_name;     /* a field name that is not a token */
} framing_t;

/* RFC 9110 5.6.2: tchar. */
static int is_tchar(unsigned char c) {
  return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') ||
         (c && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

/* Counts the codings of one Transfer-Encoding value, a comma-separated
 * list with optional whitespace. */
static void framing_codings(framing_t *f, const char *v) {
  while (*v) {
    while (*v == ' ' || *v == '\t' || *v == ',')
      v++;
    size_t n = strcspn(v, ",");
    size_t k = n;
    while (k && (v[k - 1] == ' ' || v[k - 1] == '\t'))
      k--;
    if (k == 7 && strncasecmp(v, "chunked", 7) == 0)
      f->n_chunked++;
    else if (k && !f->unknown[0])
      snprintf(f->unknown, sizeof f->unknown, "%.*s", (int)k, v);
    v += n;
  }
}

static enum MHD_Result framing_header(void *cls, enum MHD_ValueKind kind,
                                      const char *key, const char *value) {
  framing_t *f = cls;
  (void)kind;
  for (const char *k = key; !f->bad_name && *k; k++)
    if (!is_tchar((unsigned char)*k))
      f->bad_name = key;
  if (!*key && !f->bad_name)
    f->bad_name = key;
  if (value == NULL)
    value = "";
  if (strcasecmp(key, "Content-Length") == 0) {
    if (f->n_length++ == 0)
      f->length = value;
    else if (!f->other_length && strcmp(value, f->length) != 0)
      f->other_length = value;
  } else if (strcasecmp(key, "Transfer-Encoding") == 0) {
    if (f->n_coding++ == 0)
      f->coding = value;
    framing_codings(f, value);
  }
  return MHD_YES;
}

/* Returns 1 when the body's length is unambiguous: no Transfer-Encoding
 * and at most one Content-Length value (repeated identical lines are
 * allowed, RFC 9110 8.6), or exactly one Transfer-Encoding "chunked" and
 * no Content-Length. Otherwise queues the reply into *ret and returns 0:
 * 400 bad_request for a field name that is not a token (RFC 9112 5.1:
 * "Content-Length : 5" would hide the length from us and not from a
 * proxy), Content-Length values that differ, Content-Length with
 * Transfer-Encoding, or chunked applied twice; 501 not_implemented for a
 * transfer coding other than chunked. HTTP thread, first callback. */
static int framing_ok(req_t *r, enum MHD_Result *ret) {
  framing_t f = {0};
  MHD_get_connection_values(r->conn, MHD_HEADER_KIND, framing_header, &f);
  if (f.bad_name)
    *ret = fail(r, ATTND_ERR_BAD_REQUEST, f.bad_name,
                "the header name '%.60s' is not a token (RFC 9112 5.1: no "
                "whitespace before the colon)",
                f.bad_name);
  else if (f.other_length)
    *ret = fail(r, ATTND_ERR_BAD_REQUEST, "Content-Length",
                "Content-Length is given %d times with different values "
                "('%.40s' and '%.40s'); send one",
                f.n_length, f.length, f.other_length);
  else if (f.n_coding && f.n_length)
    *ret = fail(r, ATTND_ERR_BAD_REQUEST, "Content-Length",
                "Content-Length and Transfer-Encoding are both given; send "
                "one (RFC 9112 6.3)");
  else if (f.unknown[0])
    *ret = fail(r, ATTND_ERR_NOT_IMPLEMENTED, "Transfer-Encoding",
                "the transfer coding '%s' is not implemented; send the body "
                "with Content-Length or Transfer-Encoding: chunked",
                f.unknown);
  else if (f.n_coding &&
           (f.n_coding > 1 || strcasecmp(f.coding, "chunked") != 0))
    *ret = fail(r, ATTND_ERR_BAD_REQUEST, "Transfer-Encoding",
                "Transfer-Encoding must be exactly 'chunked' (given %d "
                "times, chunked %d times)",
                f.n_coding, f.n_chunked);
  else
    return 1;
  return 0;
}

/* The unescaper of the path (and of query arguments): %XX decoded in
 * place, as libmicrohttpd's own does, except %00, which stays as the
 * three characters. Decoded to a NUL, it would end the path early
 * ("/v1/attention%00.json" would route as /v1/attention), and the route,
 * the 404's message and the access log would each see a different path.
 * Never lengthens s. Returns its new length. HTTP thread. */
static size_t unescape_path(void *cls, struct MHD_Connection *conn, char *s) {
  (void)cls;
  (void)conn;
  char *w = s;
  for (const char *p = s; *p;) {
    int hi = p[0] == '%' ? attnd_hex_digit(p[1]) : -1;
    int lo = hi >= 0 ? attnd_hex_digit(p[2]) : -1;
    if (lo >= 0 && (hi | lo) != 0) {
      *w++ = (char)(hi << 4 | lo);
      p += 3;
    } else {
      *w++ = *p++;
    }
  }
  *w = 0;
  return (size_t)(w - s);
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
  uint64_t k = atomic_fetch_add(&r->srv->next_id, 1); /* "%016llx-%llu" */
  attnd_fmt_hex64(r->request_id, r->srv->id_prefix);
  r->request_id[16] = '-';
  attnd_fmt_i64(r->request_id + 17, (int64_t)(k & INT64_MAX));
}

/* The route of url, and its protocol; a path ending in '/' matches every
 * url under it. Every path under /v2 is the Open Inference Protocol's,
 * and answers in its form, a 404 included. */
/* /v1/sessions, and /v1/sessions/{id}[/attention|/fork|/truncate]: the
 * route, and the id in r->sid (any text up to its room; ids that are no
 * session's are the session store's to refuse). Returns whether it is one. */
static int session_route(req_t *r, const char *url) {
  static const struct {
    const char *suffix;
    int route;
  } subs[] = {{"", R_SESSION},
              {"/attention", R_SESSION_STEP},
              {"/fork", R_SESSION_FORK},
              {"/truncate", R_SESSION_TRUNCATE}};
  const char *prefix = "/v1/sessions";
  size_t n = strlen(prefix);
  if (strncmp(url, prefix, n) != 0 || (url[n] != 0 && url[n] != '/'))
    return 0;
  if (url[n] == 0) {
    r->route = R_SESSIONS;
    return 1;
  }
  const char *id = url + n + 1;
  size_t k = strcspn(id, "/");
  if (k == 0)
    return 0;
  for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++)
    if (strcmp(id + k, subs[i].suffix) == 0) {
      /* an id too long for any session's is kept cut short: still none */
      size_t cut = k < sizeof r->sid - 1 ? k : sizeof r->sid - 1;
      memcpy(r->sid, id, cut);
      r->sid[cut] = 0;
      r->route = subs[i].route;
      return 1;
    }
  return 0;
}

/* Whether `method` is one of `allow` ("GET, HEAD"). */
static int method_allowed(const char *allow, const char *method) {
  size_t n = strlen(method);
  for (const char *a = allow; *a; a += strspn(a, ", ")) {
    size_t k = strcspn(a, ", ");
    if (k == n && strncmp(a, method, n) == 0)
      return 1;
    a += k;
  }
  return 0;
}

static void route_of(req_t *r, const char *url) {
  static const struct {
    const char *path;
    int route;
  } routes[] = {{"/v1/attention", R_ATTENTION}, {"/healthz", R_HEALTHZ},
                {"/readyz", R_READYZ},          {"/metrics", R_METRICS},
                {"/v1/info", R_INFO},           {"/v1/layers", R_LAYERS},
                {"/v1/layers/", R_LAYERS}};
  static const int v2_routes[] = {[ATTND_OIP_NONE] = R_NONE,
                                  [ATTND_OIP_SERVER] = R_V2_SERVER,
                                  [ATTND_OIP_LIVE] = R_V2_LIVE,
                                  [ATTND_OIP_READY] = R_V2_READY,
                                  [ATTND_OIP_MODEL] = R_V2_MODEL,
                                  [ATTND_OIP_MODEL_READY] = R_V2_MODEL_READY,
                                  [ATTND_OIP_INFER] = R_V2_INFER};
  r->route = R_NONE;
  r->proto = ATTND_PROTO_OTHER;
  if (strncmp(url, "/v2", 3) == 0 && (url[3] == 0 || url[3] == '/')) {
    r->proto = ATTND_PROTO_V2;
    r->route = v2_routes[attnd_oip_route(url, r->model, sizeof r->model,
                                         r->version, sizeof r->version)];
  }
  for (size_t i = 0; r->route == R_NONE && i < sizeof routes / sizeof routes[0];
       i++) {
    size_t n = strlen(routes[i].path);
    if (routes[i].path[n - 1] == '/' ? strncmp(url, routes[i].path, n) == 0
                                     : strcmp(url, routes[i].path) == 0) {
      r->route = routes[i].route;
      r->proto =
          strncmp(url, "/v1/", 4) == 0 ? ATTND_PROTO_V1 : ATTND_PROTO_OTHER;
    }
  }
  if (r->route == R_NONE && session_route(r, url))
    r->proto = ATTND_PROTO_SESSION;
  /* the page's files ("/" and "/ui/...") go with the ui key */
  int page = strcmp(url, "/") == 0 || strncmp(url, "/ui/", 4) == 0;
  if (r->route == R_NONE && (!page || r->srv->cfg->ui) &&
      (r->asset = attnd_asset_find(url)) != NULL)
    r->route = R_ASSET;
  r->allow = r->route == R_SESSIONS  ? "GET, HEAD, POST"
             : r->route == R_SESSION ? "GET, HEAD, PUT, DELETE"
             : r->route >= R_SESSION_STEP && r->route <= R_SESSION_TRUNCATE
                 ? "POST"
             : computes(r->route) ? "POST"
                                  : "GET, HEAD";
}

/* An embedded file, copied so that the reply may be compressed. */
static enum MHD_Result get_asset(req_t *r) {
  attnd_buf_t b;
  attnd_buf_init(&b);
  attnd_buf_append(&b, (const char *)r->asset->data, r->asset->len);
  return send_buf(r, 200, &b, r->asset->content_type);
}

/* A model path's model and version: a version other than 1 is unknown,
 * and for an inference, so is a model that is not loaded (answered from
 * the headers, before the body is read). Returns 1, or 0 with the 404
 * queued into *ret. */
static int model_ok(req_t *r, enum MHD_Result *ret) {
  attnd_error_t e;
  if (r->version[0] && strcmp(r->version, "1") != 0) {
    *ret = fail(r, ATTND_ERR_UNKNOWN_LAYER, "model",
                "model '%.128s' has no version '%s': its one version is 1",
                r->model, r->version);
    return 0;
  }
  if (r->route != R_V2_INFER)
    return 1;
  const attnd_layer_t *l;
  attnd_layer_set_t *set = attnd_server_layers(r->srv);
  int ok = attnd_oip_model(r->model, set, &l, &e) == 0;
  attnd_layer_set_unref(set);
  if (!ok)
    *ret = send_error(r, &e);
  return ok;
}

static enum MHD_Result on_first(req_t *r, const char *url, const char *method) {
  enum MHD_Result ret;
  route_of(r, url);
  r->reply_coding = attnd_coding_accept(
      MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Accept-Encoding"));
  if (!framing_ok(r, &ret))
    return ret; /* before the route: whatever the path, nothing after */
  if (r->route != R_NONE && r->srv->cors.enabled &&
      strcmp(method, "OPTIONS") == 0) { /* needs no key; answered by on_get */
    r->route = R_PREFLIGHT;
    return MHD_YES;
  }
  /* the embedded files hold no data: they need no key (their calls do) */
  attnd_auth_result_t why =
      r->route == R_ASSET
          ? ATTND_AUTH_OK
          : attnd_auth_request(&r->srv->auth, url,
                               MHD_lookup_connection_value(
                                   r->conn, MHD_HEADER_KIND, "Authorization"));
  if (why != ATTND_AUTH_OK)
    return fail(r, ATTND_ERR_UNAUTHORIZED, NULL, "%s", attnd_auth_message(why));
  if (r->route == R_NONE)
    return r->proto == ATTND_PROTO_V2
               ? fail(r, ATTND_ERR_NOT_FOUND, NULL,
                      "no such path: %.80s (try GET /v2/models/attention, or "
                      "POST /v2/models/{model}/infer)",
                      url)
               : fail(r, ATTND_ERR_NOT_FOUND, NULL,
                      "no such path: %.80s (try POST /v1/attention)", url);
  if (!method_allowed(r->allow, method))
    return fail(r, ATTND_ERR_METHOD_NOT_ALLOWED, NULL,
                "%s is not allowed on %s; use %s", method, url, r->allow);
  if (r->model[0] && !model_ok(r, &ret))
    return ret;
  /* A GET is answered on the next callback: libmicrohttpd closes the
   * connection after a reply queued from the first one, and probes and
   * scrapes should keep theirs. */
  r->with_body = strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0;
  return r->with_body ? body_start(r) : MHD_YES;
}

/* A small JSON body, sent with `status`. */
static enum MHD_Result send_text(req_t *r, int status, const char *json) {
  attnd_buf_t b;
  attnd_buf_init(&b);
  attnd_buf_puts(&b, json);
  return send_buf(r, status, &b, "application/json");
}

/* GET /v2/models/{model}[/ready]. */
static enum MHD_Result get_model(req_t *r) {
  attnd_layer_set_t *set = attnd_server_layers(r->srv);
  attnd_error_t e;
  attnd_buf_t b;
  attnd_buf_init(&b);
  int draining = atomic_load(&r->srv->draining), bad;
  if (r->route == R_V2_MODEL) {
    bad = attnd_oip_metadata(r->model, set, &b, &e);
  } else {
    const attnd_layer_t *l;
    if ((bad = attnd_oip_model(r->model, set, &l, &e)) == 0) {
      attnd_buf_puts(&b, "{\"name\":");
      attnd_buf_json_string(&b, r->model, strlen(r->model));
      attnd_buf_puts(&b,
                     draining ? ",\"ready\":false}\n" : ",\"ready\":true}\n");
    }
  }
  attnd_layer_set_unref(set);
  if (bad < 0) {
    attnd_buf_free(&b);
    return send_error(r, &e);
  }
  return send_buf(r, r->route == R_V2_MODEL_READY && draining ? 503 : 200, &b,
                  "application/json");
}

/* The reply to a GET endpoint. */
static enum MHD_Result on_get(req_t *r) {
  attnd_server_t *s = r->srv;
  int draining = atomic_load(&s->draining);
  attnd_buf_t b;
  switch (r->route) {
  case R_HEALTHZ:
    return send_text(r, 200, "{\"status\":\"ok\"}\n");
  case R_READYZ:
    return draining ? send_text(r, 503, "{\"status\":\"draining\"}\n")
                    : send_text(r, 200, "{\"status\":\"ready\"}\n");
  case R_METRICS:
    return get_metrics(r);
  case R_PREFLIGHT:
    return send_body(r, 204, NULL, 0, 0, NULL);
  case R_LAYERS:
    return get_layers(r);
  case R_V2_SERVER:
    attnd_buf_init(&b);
    attnd_oip_server_metadata(&b);
    return send_buf(r, 200, &b, "application/json");
  case R_V2_LIVE:
    return send_text(r, 200, "{\"live\":true}\n");
  case R_V2_READY:
    return draining ? send_text(r, 503, "{\"ready\":false}\n")
                    : send_text(r, 200, "{\"ready\":true}\n");
  case R_V2_MODEL:
  case R_V2_MODEL_READY:
    return get_model(r);
  case R_ASSET:
    return get_asset(r);
  case R_SESSIONS:
  case R_SESSION:
    return session_get(r);
  default:
    return get_info(r);
  }
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn,
                                  const char *url, const char *method,
                                  const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
  attnd_server_t *s = cls;
  req_t *r = *con_cls;
  (void)version;
  if (r == NULL) {
    if ((r = req_new()) == NULL)
      return MHD_NO;
    if (uv_mutex_init(&r->mu) != 0) {
      attnd_pool_put(&req_pool, r);
      return MHD_NO;
    }
    r->srv = s;
    r->conn = conn;
    r->t_arrival = attnd_now_ms();
    r->json_len = -1;
    attnd_fmt_str(r->method, sizeof r->method, method);
    attnd_fmt_str(r->path, sizeof r->path, url);
    attnd_buf_init(&r->body);
    *con_cls = r;
    atomic_fetch_add(&s->active, 1);
    set_request_id(r);
    return on_first(r, url, method);
  }
  uv_mutex_lock(&r->mu);
  int back = r->req && !r->submitted;
  uv_mutex_unlock(&r->mu);
  if (back)
    return body_reply(r);
  if (!r->with_body)
    return *upload_size ? (*upload_size = 0, MHD_YES) : on_get(r);
  if (*upload_size)
    return body_more(r, upload, upload_size);
  return body_submit(r);
}

/* ---- completion ------------------------------------------------------------
 */

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
  attnd_server_t *s = cls;
  req_t *r = *con_cls;
  if (r == NULL)
    return;
  attnd_budget_give(&s->budget,
                    &r->mem_held); /* before it counts as answered */
  if (r->status == 0) { /* libmicrohttpd answered (a bad chunk), or nobody */
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_HTTP_STATUS);
    r->status = ci && ci->http_status ? (int)ci->http_status
                : toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? 200
                                                             : 499;
  }
  if (r->req && r->outcome == ATTND_SCHED_ABANDONED)
    attnd_metrics_reject(s->metrics, ATTND_REJECT_CLIENT_GONE);
  attnd_metrics_request(s->metrics, r->proto, r->status);
  const attnd_request_t *j = r->req;
  attnd_access_t line = {
      .request_id = r->request_id,
      .id = j ? j->id : NULL,
      .method = r->method,
      .path = r->path,
      .status = r->status,
      .bytes_in = r->bytes_in,
      .bytes_out = r->bytes_out,
      .queue_ms = j && j->t.start ? j->t.start - j->t.submit : 0,
      .compute_ms = j && j->t.end ? j->t.end - j->t.start : 0,
      .total_ms = r->total_ms ? r->total_ms : attnd_now_ms() - r->t_arrival,
  };
  attnd_access_log_write(s->access_log, &line);
  attnd_buf_free(&r->body);
  attnd_inflate_free(r->inflate);
  attnd_request_free(r->req);
  uv_mutex_destroy(&r->mu);
  attnd_pool_put(&req_pool, r);
  *con_cls = NULL;
  atomic_fetch_sub(&s->active, 1);
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

int attnd_http_start(attnd_server_t *s) {
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
  /* TLS 1.2 and 1.3 only; the options are empty for plain HTTP. */
  struct MHD_OptionItem tls[] = {{MHD_OPTION_HTTPS_MEM_CERT, 0, NULL},
                                 {MHD_OPTION_HTTPS_MEM_KEY, 0, NULL},
                                 {MHD_OPTION_HTTPS_PRIORITIES, 0,
                                  "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2"},
                                 {MHD_OPTION_END, 0, NULL}};
  if (c->tls_cert_file[0] || c->tls_key_file[0]) {
    char msg[1024];
    if (!MHD_is_feature_supported(MHD_FEATURE_TLS))
      snprintf(msg, sizeof msg, "tls: this libmicrohttpd has no TLS support");
    else if (attnd_tls_load(c->tls_cert_file, c->tls_key_file, &s->tls_cert,
                            &s->tls_key, msg, sizeof msg) == 0)
      msg[0] = 0;
    if (msg[0]) {
      fprintf(stderr, "attnd: %s\n", msg);
      freeaddrinfo(ai);
      return -1;
    }
    tls[0].ptr_value = s->tls_cert;
    tls[1].ptr_value = s->tls_key;
    flags |= MHD_USE_TLS;
  } else {
    tls[0].option = MHD_OPTION_END;
  }
  if (ai->ai_family == AF_INET6)
    flags |= strcmp(c->host, "::") == 0 ? MHD_USE_DUAL_STACK : MHD_USE_IPv6;
  s->daemon = MHD_start_daemon(
      flags, (uint16_t)c->port, NULL, NULL, on_request, s,
      MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL, /* first, for every message */
      MHD_OPTION_UNESCAPE_CALLBACK, unescape_path, NULL, MHD_OPTION_SOCK_ADDR,
      ai->ai_addr, MHD_OPTION_THREAD_POOL_SIZE, (unsigned)c->http_threads,
      MHD_OPTION_CONNECTION_LIMIT, (unsigned)c->max_connections,
      MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)c->connection_timeout_s,
      MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
      MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
      (size_t)c->connection_buffer_bytes, MHD_OPTION_ARRAY, tls,
      MHD_OPTION_END);
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

void attnd_http_stop(attnd_server_t *s) {
  MHD_stop_daemon(s->daemon);
  if (s->tls_key)
    explicit_bzero(s->tls_key, strlen(s->tls_key));
  free(s->tls_key);
  free(s->tls_cert);
  s->tls_key = s->tls_cert = NULL;
}
