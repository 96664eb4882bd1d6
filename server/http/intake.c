/* server/http/intake.c: a request's body, from its headers to its last
 * byte: the media type, the content coding (inflated as it arrives), the
 * length against the most it may have (body_max: max_body_bytes, or less
 * for a session's control body), and the memory budget, which the body
 * takes its share of as it grows. See exchange.h. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http/exchange.h"

int attnd_http_mem_take(attnd_http_req_t *r, int64_t bytes) {
  return attnd_budget_take(&r->srv->budget, bytes, &r->mem_held);
}

int attnd_http_budget_full(const attnd_http_req_t *r, int64_t need,
                           attnd_error_t *e) {
  const attnd_budget_t *b = &r->srv->budget;
  /* in use by the others: what this request holds already (its body, what
   * its decoding took) is part of `need` */
  return attnd_error_set(e, ATTND_ERR_OVERLOADED, NULL,
                         "%lld bytes of memory are needed and %lld of the "
                         "%lld that requests may hold (max_memory_bytes less "
                         "kv_cache_bytes and pinned_memory_bytes) are in use; "
                         "retry later",
                         (long long)need,
                         (long long)(attnd_budget_used(b) - r->mem_held),
                         (long long)b->max);
}

int attnd_http_budget_never(const attnd_http_req_t *r, int64_t need,
                            const char *what, attnd_error_t *e) {
  return attnd_error_set(e, ATTND_ERR_LIMIT_EXCEEDED, NULL,
                         "the request needs %lld bytes of memory (%s), over "
                         "the %lld of max_memory_bytes that requests may hold "
                         "(less kv_cache_bytes and pinned_memory_bytes)",
                         (long long)need, what, (long long)r->srv->budget.max);
}

/* A body of `need` bytes the budget does not have: 429 when it would fit
 * once others are done, 422 when it could never fit (retrying is no use).
 * The body's own share is given back first: it is not in use by others. */
static enum MHD_Result no_memory(attnd_http_req_t *r, int64_t need) {
  attnd_error_t e;
  attnd_budget_give(&r->srv->budget, &r->mem_held);
  if (need > r->srv->budget.max)
    attnd_http_budget_never(r, need,
                            r->inflate ? "its body inflated, and the room "
                                         "it grows into, at least"
                            : r->body_len < 0
                                ? "its body and the room it grows into, at "
                                  "least; a Content-Length sizes it once"
                                : "its body, at least",
                            &e);
  else
    attnd_http_budget_full(r, need, &e);
  return attnd_http_send_error(r, &e);
}

/* ct is `type`, maybe with parameters ("application/json; charset=utf-8"),
 * before which OWS, spaces and tabs, may come (RFC 9110 8.3.1); nothing
 * else may follow the type. */
static int is_media_type(const char *ct, const char *type) {
  size_t n = strlen(type);
  if (ct == NULL || strncasecmp(ct, type, n) != 0)
    return 0;
  ct += n + strspn(ct + n, " \t");
  return *ct == 0 || *ct == ';';
}

/* /v1 takes JSON alone. The Open Inference Protocol does not read the
 * Content-Type, as Triton does not: its clients send none (tritonclient),
 * JSON, octet-stream for binary data, or curl's form type for -d. */
static enum MHD_Result check_content_type(attnd_http_req_t *r, int *ok) {
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
  return attnd_http_fail(r, ATTND_ERR_UNSUPPORTED_MEDIA_TYPE, NULL,
                         "Content-Type is %s%s%s; expected application/json",
                         ct ? "'" : "", ct ? ct : "missing", ct ? "'" : "");
}

/* The lines of Inference-Header-Content-Length: how many, the first's
 * value and a later one that differs from it. */
typedef struct json_lengths {
  int n;
  const char *first, *other;
} json_lengths_t;

static enum MHD_Result count_json_length(void *cls, enum MHD_ValueKind kind,
                                         const char *key, const char *value) {
  json_lengths_t *l = cls;
  (void)kind;
  if (strcasecmp(key, "Inference-Header-Content-Length") != 0)
    return MHD_YES;
  value = value ? value : "";
  if (l->n++ == 0)
    l->first = value;
  else if (!l->other && strcmp(value, l->first) != 0)
    l->other = value;
  return MHD_YES;
}

/* Inference-Header-Content-Length (OIP): the JSON's length in a binary
 * body, a decimal integer; -1 when absent. Lines that differ are refused
 * as Content-Length's are (framing.c): libmicrohttpd gives the first, and
 * a proxy that reads another would split the body elsewhere. */
static enum MHD_Result read_json_length(attnd_http_req_t *r, int *ok) {
  const char *h = MHD_lookup_connection_value(
      r->conn, MHD_HEADER_KIND, "Inference-Header-Content-Length");
  r->json_len = -1;
  *ok = 1;
  if (h == NULL || r->proto != ATTND_PROTO_V2)
    return MHD_YES;
  json_lengths_t lines = {0};
  MHD_get_connection_values(r->conn, MHD_HEADER_KIND, count_json_length,
                            &lines);
  if (lines.other)
    return *ok = 0,
           attnd_http_fail(r, ATTND_ERR_BAD_REQUEST,
                           "Inference-Header-Content-Length",
                           "Inference-Header-Content-Length is given %d times "
                           "with different values ('%.40s' and '%.40s'); "
                           "send one",
                           lines.n, lines.first, lines.other);
  size_t n = strlen(h);
  *ok = n > 0 && n <= 18 && strspn(h, "0123456789") == n;
  if (!*ok)
    return attnd_http_fail(
        r, ATTND_ERR_BAD_REQUEST, "Inference-Header-Content-Length",
        "Inference-Header-Content-Length is '%.40s'; expected the "
        "length in bytes of the body's JSON",
        h);
  r->json_len = (int64_t)strtoll(h, NULL, 10);
  return MHD_YES;
}

static enum MHD_Result count_coding(void *cls, enum MHD_ValueKind kind,
                                    const char *key, const char *value) {
  (void)kind;
  (void)value;
  *(int *)cls += strcasecmp(key, "Content-Encoding") == 0;
  return MHD_YES;
}

/* Content-Encoding: identity, or gzip or deflate, inflated as it comes.
 * Lines of it are one list (RFC 9110 5.3), codings applied in turn, as a
 * list on one line is: not supported. */
static enum MHD_Result read_coding(attnd_http_req_t *r, int *ok) {
  const char *h =
      MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Content-Encoding");
  int lines = 0;
  if (h)
    MHD_get_connection_values(r->conn, MHD_HEADER_KIND, count_coding, &lines);
  if (lines > 1)
    return *ok = 0,
           attnd_http_fail(
               r, ATTND_ERR_UNSUPPORTED_MEDIA_TYPE, "Content-Encoding",
               "Content-Encoding is given %d times (the first '%.40s'): "
               "codings applied one over another are not supported; "
               "send one line of gzip, deflate or none",
               lines, h);
  int c = h ? attnd_coding_parse(h) : ATTND_CODING_IDENTITY;
  *ok = c >= 0;
  if (!*ok)
    return attnd_http_fail(
        r, ATTND_ERR_UNSUPPORTED_MEDIA_TYPE, "Content-Encoding",
        "Content-Encoding '%.40s' is not supported; send gzip, "
        "deflate or none",
        h);
  r->coding = (attnd_coding_t)c;
  if (c != ATTND_CODING_IDENTITY &&
      (r->inflate = attnd_inflate_new(r->coding)) == NULL)
    return *ok = 0, attnd_http_fail(r, ATTND_ERR_OUT_OF_MEMORY, NULL,
                                    "out of memory to inflate the body");
  return MHD_YES;
}

/* The body meter's `take` (exchange.h): from the budget, into the
 * request's share; when there is no room, notes what the share needed. */
static int body_take(void *ctx, int64_t bytes) {
  attnd_http_req_t *r = ctx;
  if (attnd_http_mem_take(r, bytes) == 0)
    return 0;
  r->over_budget = 1;
  r->over_need = (size_t)(r->mem_held + bytes);
  return -1;
}

/* The most bytes r's body may have: max_body_bytes, or a session's
 * control body's most where that is less. With `limit`, its name for a
 * 413, written there (not on every piece of a body: only for a refusal). */
static size_t body_max(const attnd_http_req_t *r, char *limit, size_t n) {
  int64_t most = r->srv->cfg->max_body_bytes;
  int control =
      (r->route->flags & ATTND_ROUTE_CONTROL) && most > ATTND_CONTROL_BODY_MAX;
  if (limit && control)
    snprintf(limit, n, "%d, the most a session's control body may have",
             ATTND_CONTROL_BODY_MAX);
  else if (limit)
    snprintf(limit, n, "max_body_bytes %lld", (long long)most);
  return control ? ATTND_CONTROL_BODY_MAX : (size_t)most;
}

enum MHD_Result attnd_http_body_start(attnd_http_req_t *r) {
  attnd_server_t *s = r->srv;
  int ok;
  enum MHD_Result ret;
  if (atomic_load(&s->draining))
    return attnd_http_fail(
        r, ATTND_ERR_DRAINING, NULL,
        "the server is shutting down; retry on another instance");
  if ((ret = check_content_type(r, &ok), !ok) ||
      (ret = read_coding(r, &ok), !ok) || (ret = read_json_length(r, &ok), !ok))
    return ret;
  const char *cl =
      MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Content-Length");
  char limit[80];
  if (cl && strtoull(cl, NULL, 10) > body_max(r, limit, sizeof limit))
    return attnd_http_fail(r, ATTND_ERR_PAYLOAD_TOO_LARGE, NULL,
                           "the body has %s bytes, over %s", cl, limit);
  /* Binary tensor data, whose float32 tensors a request reads where they
   * lie: into pinned memory where a GPU serves (sched/pinned.h), whose
   * bytes the budget counted once, at start; else the heap, taking its
   * share now (a coded body's as it inflates). */
  size_t clen = cl ? (size_t)strtoull(cl, NULL, 10) : 0;
  r->body_len = cl ? (int64_t)clen : -1; /* within body_max */
  if (cl && !r->inflate && r->json_len >= 0 &&
      (r->body_pinned = attnd_pinned_get(clen + 65)) != NULL) {
    r->body_pinned_cap = clen + 65; /* the pad's 64 and a terminator */
    return MHD_YES;
  }
  if (cl && !r->inflate && attnd_http_mem_take(r, (int64_t)clen) < 0)
    return no_memory(r, (int64_t)clen);
  r->body_meter = (attnd_meter_t){.take = body_take, .ctx = r};
  return MHD_YES; /* read the body */
}

/* Sizes the empty body buffer for `bytes`, and with binary tensor data,
 * starts it with the pad that puts the bytes after the JSON on a 64-byte
 * boundary, so that the request can read FP32 tensors where they lie. */
static void body_reserve(attnd_http_req_t *r, size_t bytes) {
  if (r->body_pinned)
    attnd_buf_init_in(&r->body, r->body_pinned, r->body_pinned_cap);
  else if (r->body.cap == 0 && bytes < ATTND_BODY_INLINE - 64)
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

/* Inflates a coded body's next bytes into r->body, within `max` (body_max),
 * its input within what that needs compressed (attnd_inflate_in_bound),
 * and the memory budget, which its buffer takes as it grows. */
static void inflate_more(attnd_http_req_t *r, const char *data, size_t size,
                         size_t max) {
  attnd_meter_t *was = attnd_meter_set(&r->body_meter);
  if (r->body.cap == 0)
    body_reserve(r, 65536);
  int rc = attnd_inflate_feed(r->inflate, data, size, &r->body, max + r->pad,
                              r->coding_msg, sizeof r->coding_msg);
  attnd_meter_set(was);
  if (r->over_budget) /* the budget refused the buffer room: rc is -3 */
    ;
  else if (rc == -1)
    r->bad_coding = 1;
  else if (rc == -2)
    r->too_large = 1;
  else if (rc == -3)
    r->no_memory = 1;
  if (rc < 0 || r->over_budget)
    attnd_buf_free(&r->body);
}

/* Accumulates the body. A body without Content-Length that outgrows
 * body_max (or a coded one that inflates past it, or whose input passes
 * what that needs compressed) is discarded as it arrives and answered 413
 * at its end (libmicrohttpd cannot answer in the
 * middle of an upload); one that keeps going 64 MiB past the limit has its
 * connection closed. */
enum MHD_Result attnd_http_body_more(attnd_http_req_t *r, const char *data,
                                     size_t *size) {
  size_t max = body_max(r, NULL, 0);
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
  /* body_len, not the header: a lookup walks the header list, and a
   * chunked body comes in a callback a chunk */
  if (r->body_len >= 0) { /* sized once, to the length, and taken then */
    if (r->body.cap == 0)
      body_reserve(r, (size_t)r->body_len);
    attnd_buf_append(&r->body, data, *size);
  } else { /* without a length, the body takes as its buffer grows */
    attnd_meter_t *was = attnd_meter_set(&r->body_meter);
    attnd_buf_append(&r->body, data, *size);
    attnd_meter_set(was);
    if (r->over_budget)
      attnd_buf_free(&r->body);
  }
  *size = 0;
  return MHD_YES;
}

int attnd_http_body_ok(attnd_http_req_t *r, enum MHD_Result *ret) {
  char limit[80];
  size_t max = body_max(r, limit, sizeof limit);
  if (r->too_large && r->inflate && r->bytes_in > attnd_inflate_in_bound(max))
    *ret = attnd_http_fail(r, ATTND_ERR_PAYLOAD_TOO_LARGE, NULL,
                           "the %s body has %zu bytes, more than any that "
                           "inflates within %s needs",
                           attnd_coding_name(r->coding), r->bytes_in, limit);
  else if (r->too_large && r->inflate)
    *ret = attnd_http_fail(r, ATTND_ERR_PAYLOAD_TOO_LARGE, NULL,
                           "the %s body inflates past %s",
                           attnd_coding_name(r->coding), limit);
  else if (r->too_large)
    *ret =
        attnd_http_fail(r, ATTND_ERR_PAYLOAD_TOO_LARGE, NULL,
                        "the body has %zu bytes, over %s", r->bytes_in, limit);
  else if (r->over_budget) /* an inflate cut short is no bad coding */
    *ret = no_memory(r, (int64_t)r->over_need);
  else if (r->bad_coding ||
           (r->inflate && attnd_inflate_end(r->inflate, r->coding_msg,
                                            sizeof r->coding_msg) < 0))
    *ret = attnd_http_fail(r, ATTND_ERR_BAD_REQUEST, "Content-Encoding",
                           "Content-Encoding is %s, but %s",
                           attnd_coding_name(r->coding), r->coding_msg);
  else if (r->body.oom || r->no_memory)
    *ret = attnd_http_fail(r, ATTND_ERR_OUT_OF_MEMORY, NULL,
                           "out of memory reading the body");
  else
    return 1;
  return 0;
}
