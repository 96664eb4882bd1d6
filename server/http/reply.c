/* server/http/reply.c: every reply attnd sends, with its common headers
 * (request id, CORS, a 401's challenge, Allow, Retry-After, the page's
 * security policy, Server-Timing) and its compression. See exchange.h. */
#include <stdlib.h>
#include <string.h>

#include "codec/pool.h"
#include "codec/util.h"
#include "http/exchange.h"

static void add_header(void *resp, const char *name, const char *value) {
  MHD_add_response_header(resp, name, value);
}

/* The headers of auth.h and cors.h: a 401's challenge, and CORS's for an
 * allowed Origin (a preflight's, or the exposed headers). */
static void add_security_headers(attnd_http_req_t *r, struct MHD_Response *resp,
                                 int status) {
  if (status == 401)
    add_header(resp, "WWW-Authenticate",
               attnd_auth_challenge(MHD_lookup_connection_value(
                   r->conn, MHD_HEADER_KIND, "Authorization")));
  attnd_cors_headers(
      &r->srv->cors,
      MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Origin"),
      r->preflight, r->allow, add_header, resp);
}

/* A 200 body of COMPRESS_MIN to COMPRESS_MAX bytes is compressed when the
 * client's Accept-Encoding asks for it: smaller ones would gain nothing,
 * and bigger ones are mostly tensor data (floats in text or base64), which
 * zlib shrinks by a quarter or so at 50 to 100 MB/s, on the HTTP thread,
 * before the first byte goes out: a browser (which always asks) would
 * wait seconds for a large reply that comes uncompressed in a fraction. */
#define COMPRESS_MIN 1024
#define COMPRESS_MAX ((size_t)1 << 20)

/* Blocks for small replies' text (attnd_api_reply), kept for reuse. */
static attnd_pool_t reply_pool = ATTND_POOL_INIT(ATTND_REPLY_BLOCK, 64);

char *attnd_http_reply_block(void) {
  return attnd_pool_get(&reply_pool);
}

void attnd_http_reply_release(void *block) {
  attnd_pool_put(&reply_pool, block);
}

/* Frees a body as attnd_http_send_body takes it. */
static void body_release(char *body, int pooled) {
  if (pooled)
    attnd_http_reply_release(body);
  else
    free(body);
}

/* Queues resp (destroyed here: libmicrohttpd keeps its own reference) with
 * the status r->status. */
static enum MHD_Result queue(attnd_http_req_t *r, struct MHD_Response *resp) {
  enum MHD_Result ok = MHD_queue_response(r->conn, (unsigned)r->status, resp);
  MHD_destroy_response(resp);
  attnd_http_answered(r);
  if (ok == MHD_YES)
    attnd_http_conn_replying(r);
  return ok;
}

/* Queues `body` (malloc'd, or with `pooled` a block of reply_pool; owned
 * by MHD afterwards; NULL when len is 0) with the common headers; `ctype`
 * NULL for none. A 200 reply is compressed in the coding of the client's
 * Accept-Encoding, if any. With r->hold, the reply is held in r->held for
 * attnd_http_send_held, made as it would be queued. */
enum MHD_Result attnd_http_send_body(attnd_http_req_t *r, int status,
                                     char *body, size_t len, int pooled,
                                     const char *ctype) {
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
      pooled
          ? MHD_create_response_from_buffer_with_free_callback_cls(
                len, body, attnd_http_reply_release, body)
          : MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
  if (resp == NULL) {
    body_release(body, pooled);
    return MHD_NO;
  }
  if (ctype) { /* never read as another type: a JSON error may echo the
                 client's text */
    MHD_add_response_header(resp, "Content-Type", ctype);
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
  }
  if (coding)
    MHD_add_response_header(resp, "Content-Encoding", coding);
  if (status == 200 && len >= COMPRESS_MIN && len <= COMPRESS_MAX)
    MHD_add_response_header(resp, "Vary", "Accept-Encoding");
  MHD_add_response_header(resp, "X-Request-Id", r->request_id);
  add_security_headers(r, resp, status);
  if (status == 405 && r->allow[0])
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
  if (r->route && (r->route->flags & ATTND_ROUTE_ASSET) && status == 200) {
    /* the binary's files: revalidated (a new binary may change them), and
     * the page's scripts only from here, none inline, no eval (and nosniff,
     * as every reply with a body) */
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    MHD_add_response_header(
        resp, "Content-Security-Policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; "
        "img-src 'self'; connect-src 'self'; base-uri 'none'; "
        "form-action 'none'; frame-ancestors 'none'");
  }
  if (r->route && (r->route->flags & ATTND_ROUTE_COMPUTES) && status == 200 &&
      r->req) {
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
  if (r->hold) { /* queued from the next callback: attnd_http_send_held */
    r->held = resp;
    r->held_status = status;
    r->held_len = len;
    return MHD_YES;
  }
  r->status = status;
  r->bytes_out = len;
  return queue(r, resp);
}

enum MHD_Result attnd_http_send_held(attnd_http_req_t *r) {
  struct MHD_Response *resp = r->held;
  r->held = NULL;
  r->status = r->held_status;
  r->bytes_out = r->held_len;
  attnd_metrics_reject(r->srv->metrics, r->held_reason);
  /* a drain that began while its body was read and dropped closes it too */
  if (atomic_load(&r->srv->draining) &&
      MHD_get_response_header(resp, "Connection") == NULL)
    MHD_add_response_header(resp, "Connection", "close");
  return queue(r, resp);
}

enum MHD_Result attnd_http_send_json(attnd_http_req_t *r, int status,
                                     json_t *v) {
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
  return attnd_http_send_body(r, status, body, n + 1, 0, "application/json");
}

/* The error reply: /v1's {"error":{"code","message","field"}}, or the Open
 * Inference Protocol's {"error":"<message>"} (its clients read a string
 * there) with that protocol's status, the message led by the field
 * ("inputs[1]: ...") where it does not name it already. Written with the
 * codec's string escaper, which turns bytes that are not UTF-8 (a client's
 * path, a message cut short) into U+FFFD, so that every error gets its reply.
 */
enum MHD_Result attnd_http_send_error(attnd_http_req_t *r,
                                      const attnd_error_t *e) {
  if (r->hold) /* counted once queued (attnd_http_send_held) */
    r->held_reason = attnd_error_reason(e->code);
  else
    attnd_metrics_reject(r->srv->metrics, attnd_error_reason(e->code));
  if (e->has_id) { /* for the log */
    r->has_id = 1;
    memcpy(r->id, e->id, sizeof r->id);
  }
  attnd_buf_t b;
  attnd_buf_init(&b);
  int status;
  if (r->proto == ATTND_PROTO_V2) {
    status = attnd_error_status_v2(e->code);
    char text[sizeof e->field + sizeof e->message + 2];
    int lead = e->field[0] && strstr(e->message, e->field) == NULL;
    int n = snprintf(text, sizeof text, "%s%s%s", lead ? e->field : "",
                     lead ? ": " : "", e->message);
    attnd_buf_puts(&b, "{\"error\":");
    attnd_buf_json_string(&b, text, (size_t)n);
    attnd_buf_puts(&b, "}\n");
  } else {
    status = attnd_error_status(e->code);
    /* the request's id, as its 200 would have it: OIP's error is its
     * message alone */
    const char *id = e->has_id              ? e->id
                     : r->req && r->req->id ? r->req->id
                                            : NULL;
    if (id) {
      attnd_buf_puts(&b, "{\"id\":");
      attnd_buf_json_string(&b, id, strlen(id));
      attnd_buf_puts(&b, ",");
    } else {
      attnd_buf_puts(&b, "{");
    }
    attnd_buf_puts(&b, "\"error\":{\"code\":\"");
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
  return attnd_http_send_body(r, status, b.data, b.len, 0, "application/json");
}

/* A body written into b, sent with `status` (b is emptied). */
enum MHD_Result attnd_http_send_buf(attnd_http_req_t *r, int status,
                                    attnd_buf_t *b, const char *ctype) {
  if (b->oom) {
    attnd_buf_free(b);
    return MHD_NO;
  }
  enum MHD_Result ok =
      attnd_http_send_body(r, status, b->data, b->len, 0, ctype);
  attnd_buf_init(b);
  return ok;
}

enum MHD_Result attnd_http_fail(attnd_http_req_t *r, attnd_err_t code,
                                const char *field, const char *fmt, ...) {
  attnd_error_t e;
  va_list ap;
  va_start(ap, fmt);
  attnd_error_vset(&e, code, field, fmt, ap);
  va_end(ap);
  return attnd_http_send_error(r, &e);
}
/* A small JSON body, sent with `status`. */
enum MHD_Result attnd_http_send_text(attnd_http_req_t *r, int status,
                                     const char *json) {
  attnd_buf_t b;
  attnd_buf_init(&b);
  attnd_buf_puts(&b, json);
  return attnd_http_send_buf(r, status, &b, "application/json");
}
