/* server/http/exchange.h: one HTTP request and its reply, from its first
 * callback to its completion, as the http/ room (framing, intake, replies,
 * the router) and the api/ room's handlers share it. Internal to server/.
 *
 * A request goes:
 *   1. first callback (headers, http.c): its route (router.h), the framing
 *      (framing.c), a preflight, the API key, the method, the row's
 *      precheck; a route with a body starts reading it (intake.c), where a
 *      body over max_body_bytes is refused with 413 before it is stored;
 *   2. upload callbacks (intake.c): the body accumulates, inflated as it
 *      arrives when it has a content coding, within max_body_bytes (the
 *      small body of a request refused in 1 is dropped instead: http.c);
 *   3. the last callback: the route's handler (api/). One that computes
 *      decodes the body into the one request type and admits it
 *      (api/compute.c): computed inline, or handed to the scheduler with
 *      the connection suspended;
 *   4. the scheduler's done function (loop thread) resumes the connection;
 *   5. the callback after resumption writes the reply (api/compute.c);
 *   6. the completion callback (http.c) logs the request and frees it.
 * Every reply goes through reply.c. */
#ifndef ATTND_HTTP_EXCHANGE_H
#define ATTND_HTTP_EXCHANGE_H

#include <jansson.h>
#include <microhttpd.h>
#include <stdint.h>
#include <uv.h>

#include "codec/buf.h"
#include "codec/deflate.h"
#include "codec/mem.h"
#include "codec/util.h"
#include "errors.h"
#include "http/access_log.h"
#include "http/assets.h"
#include "http/router.h"
#include "sched/pinned.h"
#include "sched/request.h"
#include "sched/scheduler.h"
#include "server.h"

/* A body of up to this many bytes (pad included) is read into the request
 * itself. */
#define ATTND_BODY_INLINE 8192

/* The most bytes of a body refused from its headers (a wrong path, method
 * or key, a body's headers) that attnd reads and drops so as to keep the
 * connection (http.c, on_first). Any client may make it read this much
 * for nothing, one without a key too, so it is small: a JSON body sent to
 * the wrong place is a few KB, and a tensor body larger than this costs
 * its client more to send than a new connection costs (TCP and TLS
 * handshakes, a few KB). docs/operations.md says the rule. */
#define ATTND_DISCARD_MAX 65536

/* The most bytes a session's control body may have (a create, a PUT, a
 * fork or a truncate: a few members, no tensor data), below
 * max_body_bytes: jansson's tree of a body takes up to 80 bytes of memory
 * a byte of it, outside the memory budget, where /v1's structure is held
 * to max_json_structure_bytes and its tree counted. The largest such body
 * is a few hundred bytes. docs/sessions.md says the rule. */
#define ATTND_CONTROL_BODY_MAX 65536

struct attnd_http_req {
  attnd_server_t *srv;
  struct MHD_Connection *conn;
  const attnd_route_t *route; /* NULL until routed, and for no route */
  int preflight;              /* a CORS preflight (OPTIONS) on a route */
  int begun; /* the first callback has run (the state is made earlier, at
                the request line: on_uri) */
  attnd_protocol_t proto; /* its replies' and errors' form, and metrics */
  /* A {model}, {version} or {name} parameter, or "": in its _mem, or
   * where it does not fit there (a layer's name has no limit), malloc'd
   * and owned (on_completed frees it). */
  char *model, model_mem[256]; /* a model's name */
  char *version, version_mem[16];
  char *name, name_mem[256]; /* a layer's */
  char sid[72];              /* a {session} parameter: the id */
  attnd_error_t pre_error;   /* a session's step that failed in its turn */
  int has_pre_error;
  /* The "id" of a request refused in decoding (an error's, has_id), for
   * the access log: req, which would hold it, was never made. */
  int has_id;
  char id[ATTND_ID_MAX + 1];
  const attnd_asset_t *asset; /* an asset route's file */
  double t_arrival;
  char request_id[96];
  /* The caller's W3C trace context, for the access log: its trace-id and
   * parent-id, or "" where no valid traceparent came (http.c). */
  char trace_id[ATTND_TRACE_ID_LEN + 1], parent_id[ATTND_PARENT_ID_LEN + 1];
  /* The method and the path as sent, whole, for the access log: in their
   * _mem where they fit, else malloc'd and owned, as the parameters. */
  char *method, method_mem[16];
  char *path, path_mem[96];
  size_t target_len; /* the request target's bytes as sent (on_uri; 0
                        where on_uri had no memory for the request) */
  attnd_buf_t body;
  attnd_request_t *req; /* owned while not submitted or after it came back */
  attnd_sched_outcome_t outcome; /* how the scheduler passed it back */
  uv_mutex_t mu;                 /* orders suspension before resumption */
  int submitted;    /* under mu: the scheduler owns req until it is back */
  int too_large;    /* the body outgrew max_body_bytes */
  int over_budget;  /* the body did not fit in max_memory_bytes */
  size_t over_need; /* a growing body's share when it did not */
  attnd_inflate_t *inflate; /* the body's content coding, or NULL */
  attnd_coding_t coding;    /* the body's (identity without inflate) */
  int bad_coding;           /* the coded body does not inflate: why */
  int no_memory;            /* no memory to inflate it */
  char coding_msg[160];
  attnd_coding_t reply_coding; /* from Accept-Encoding */
  int64_t json_len;            /* Inference-Header-Content-Length, or -1 */
  int64_t body_len;  /* Content-Length, or -1: read once, by body_start */
  size_t pad;        /* bytes before the body in `body`, so that a binary body's
                        tensors lie 64-byte aligned after its JSON */
  size_t reply_json; /* the same for the reply; 0 for none */
  int64_t mem_held;  /* this request's share of the memory budget */
  /* A body that grows as it comes (chunked, or coded) holds the room its
   * buffer has grown to, not only its length: the buffer's blocks are
   * counted in mem_held as they are allocated (codec/mem.h). */
  attnd_meter_t body_meter;
  void *body_pinned; /* a binary OIP body's block of pinned memory
                        (sched/pinned.h), unless its request took it */
  size_t body_pinned_cap;
  int64_t device_held; /* its share of the GPU's (device_budget) */
  char allow[48];      /* the methods a 405 names */
  int status;
  int inflight;  /* counted in srv->inflight (attnd_http_answered) */
  int body_done; /* its body's last byte is in (or it has none) */
  int no_body;   /* no Content-Length (or 0) and no Transfer-Encoding */
  /* Its body may be read and dropped after a refusal from its headers:
   * a Content-Length up to attnd_http_discard_max, not chunked, and no
   * Expect: 100-continue (framing.c). */
  int discard_ok;
  /* A reply made in the first callback to a request without a body, or
   * with one that may be dropped: held (hold) rather than queued, and
   * queued once the body is in, since libmicrohttpd closes the connection
   * after a reply queued from the first (http.c, on_first). */
  int hold;
  /* The held reply, its status and length, and its refusal's reason for
   * attnd_rejections_total: each the request's once it is queued, so that
   * one whose connection ends first (its client gone, or too slow with the
   * body being dropped) is a 499, counted once, as any such request is. */
  struct MHD_Response *held;
  int held_status;
  size_t held_len;
  attnd_reject_t held_reason;
  size_t bytes_in, bytes_out;
  double total_ms;
  /* Last (the request's pool zeroes what comes before it): where a body of
   * Content-Length up to ATTND_BODY_INLINE bytes (pad included) is read. */
  _Alignas(64) char body_mem[ATTND_BODY_INLINE];
};

/* ---- replies (reply.c); HTTP thread ------------------------------------ */

/* Queues `body` (malloc'd, or with `pooled` a block from
 * attnd_http_reply_block; owned by libmicrohttpd afterwards; NULL when len
 * is 0) with the common headers; `ctype` NULL for none. A 200 reply is
 * compressed in the coding of the client's Accept-Encoding, if any. With
 * r->hold, the reply is made and held in r->held, not queued. */
enum MHD_Result attnd_http_send_body(attnd_http_req_t *r, int status,
                                     char *body, size_t len, int pooled,
                                     const char *ctype);
/* Queues the reply held from the first callback (r->held, r->hold), with
 * Connection: close where attnd has begun to drain since it was made. */
enum MHD_Result attnd_http_send_held(attnd_http_req_t *r);
/* A body written into b, sent with `status` (b is emptied). */
enum MHD_Result attnd_http_send_buf(attnd_http_req_t *r, int status,
                                    attnd_buf_t *b, const char *ctype);
/* A small JSON text, sent with `status`. */
enum MHD_Result attnd_http_send_text(attnd_http_req_t *r, int status,
                                     const char *json);
/* A JSON value (stolen), sent compact with `status`. */
enum MHD_Result attnd_http_send_json(attnd_http_req_t *r, int status,
                                     json_t *v);
/* The error reply in the request's protocol's form and status. */
enum MHD_Result attnd_http_send_error(attnd_http_req_t *r,
                                      const attnd_error_t *e);
/* The same, from a code, the field and a message. */
enum MHD_Result attnd_http_fail(attnd_http_req_t *r, attnd_err_t code,
                                const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* A block for a reply's text, or NULL; given back by libmicrohttpd when the
 * reply is sent (attnd_http_send_body with `pooled`), or by
 * attnd_http_reply_release. */
#define ATTND_REPLY_BLOCK 16384
char *attnd_http_reply_block(void);
void attnd_http_reply_release(void *block);

/* ---- the connection (http.c); HTTP thread -------------------------------- */

/* r has its reply, or will get none (its completion): it leaves the
 * requests in flight (srv->inflight), which it joined with its headers.
 * Once for each request, whichever comes first. */
void attnd_http_answered(attnd_http_req_t *r);

/* The most bytes of a refused body that s reads and drops: ATTND_DISCARD_MAX,
 * or max_body_bytes where that is less (a body over it is refused unread,
 * as docs/api.md says of 413). */
uint64_t attnd_http_discard_max(const attnd_server_t *s);

/* Gives r an id of attnd's own, unique in the process, in place of its
 * X-Request-Id: for one that framing.c refuses. */
void attnd_http_own_request_id(attnd_http_req_t *r);

/* Notes that r's reply (r->bytes_out bytes of body) was queued now: from
 * here its connection must take it at min_send_rate_bytes_per_s, after a
 * grace of connection_timeout_s, or be closed by the sweep. */
void attnd_http_conn_replying(attnd_http_req_t *r);

/* The bytes of fd's connection that its peer has acknowledged, into
 * *acked, and that it has sent (as the kernel received them), into
 * *received (either may be NULL): 0, or -1 where the kernel does not say
 * (not TCP, or before Linux 4.1). Any thread (tcp_acked.c). */
int attnd_tcp_bytes(int fd, uint64_t *acked, uint64_t *received);
/* The bytes written to fd's connection, acknowledged or still in the
 * kernel's send queue, into *written: 0, or -1 where the kernel does not
 * say. Any thread (tcp_acked.c). */
int attnd_tcp_written(int fd, uint64_t *written);

/* ---- intake (intake.c); HTTP thread ------------------------------------- */

/* Checks a body's headers (draining, Content-Type, Content-Encoding,
 * Inference-Header-Content-Length, Content-Length against max_body_bytes
 * and the memory budget) before any of it is read. First callback. */
enum MHD_Result attnd_http_body_start(attnd_http_req_t *r);
/* Takes the next bytes of the body. Upload callbacks. */
enum MHD_Result attnd_http_body_more(attnd_http_req_t *r, const char *data,
                                     size_t *size);
/* The body read whole: 1 when it is there to decode (from r->body.data +
 * r->pad, r->body.len - r->pad bytes), else 0 with the reply (413, a bad
 * coding, out of memory or over the budget) queued into *ret. */
int attnd_http_body_ok(attnd_http_req_t *r, enum MHD_Result *ret);

/* The memory budget (sched/budget.h): takes `bytes` into r->mem_held; 0,
 * or -1 when the budget does not have them now. */
int attnd_http_mem_take(attnd_http_req_t *r, int64_t bytes);
/* The overloaded error of a request whose `need` bytes in all (what it
 * holds already among them) the budget does not have now: -1, with e,
 * whose message gives what the other requests hold. */
int attnd_http_budget_full(const attnd_http_req_t *r, int64_t need,
                           attnd_error_t *e);
/* The limit_exceeded error of a request whose `need` bytes (`what`: what
 * they are) are over what requests may hold at all: -1, with e. */
int attnd_http_budget_never(const attnd_http_req_t *r, int64_t need,
                            const char *what, attnd_error_t *e);

/* ---- framing (framing.c); HTTP thread ----------------------------------- */

/* Returns 1 when the body's length is unambiguous (RFC 9112 6.3), the
 * field values hold no CR, LF or NUL and Host is right for `version` (the
 * request line's), with r->no_body set where the request has no body and
 * r->discard_ok where its body may be dropped after a refusal; else
 * 0 with the 400 or 501 queued into *ret. First callback. */
int attnd_http_framing_ok(attnd_http_req_t *r, const char *version,
                          enum MHD_Result *ret);
/* The path of a decoded request target (RFC 9112 3.2): the target itself
 * in origin form; in absolute form ("http://host:port/path", which an
 * origin server must accept, 3.2.2), what follows the authority, or "/"
 * where nothing does. Borrows url; any thread. */
const char *attnd_http_target_path(const char *url);
/* libmicrohttpd's unescape callback for the path and query arguments. */
size_t attnd_http_unescape(void *cls, struct MHD_Connection *conn, char *s);

/* The most query arguments a route takes. */
#define ATTND_QUERY_MAX 8
/* The query's arguments of a route that takes `names` (NULL-terminated, at
 * most ATTND_QUERY_MAX), percent-decoded, in one walk: values[i] is the
 * value of names[i], or NULL where it is absent; borrowed from the
 * connection. Returns 0, or -1 with e: 422 unknown_field for an argument
 * not among names (names are case-sensitive), 400 bad_request for one
 * given more than once (with its first two values), 422 invalid_value for
 * one without a value ("?limit", "?limit="). A route that takes none
 * never calls it: its query is not read. */
int attnd_http_query(attnd_http_req_t *r, const char *const *names,
                     const char **values, attnd_error_t *e);

#endif
