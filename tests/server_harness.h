/* tests/server_harness.h: black-box helpers for attnd's integration tests.
 *
 * - the server: start the real binary (ATTND_BIN, default build/attnd) on a
 *   free port of 127.0.0.1, read its port from the "listening" line of its
 *   stderr, stop it with SIGTERM and collect its exit status, with the
 *   launcher of bench/server.h. A server dies with the thread that started
 *   it (PR_SET_PDEATHSIG) and with the process that started it (atexit),
 *   so a test that fails mid-way leaves nothing;
 * - an HTTP client on libcurl's easy interface, one handle per thread,
 *   keeping its connection alive between requests;
 * - raw sockets, for the tests that must control a connection byte by byte;
 * - tensors as JSON (jansson) in the three forms of the API, requests built
 *   from an attn_params_t, and a checker that compares a reply with the
 *   float64 reference of tests/ref.c;
 * - /metrics samples.
 * Call sh_init() once in main, before any thread or test. The functions
 * that end in _assert, and sh_assert_error, fail the running Check test;
 * the others return codes and messages, so that threads may use them. */
#ifndef ATTN_TESTS_SERVER_HARNESS_H
#define ATTN_TESTS_SERVER_HARNESS_H

#include <jansson.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../bench/server.h"
#include "attn/attn.h"
#include "ref.h"

/* curl_global_init, SIGPIPE ignored, the reaper installed. Main thread,
 * once, before any other call. */
void sh_init(void);

/* Monotonic clock, seconds. */
double sh_now(void);

/* The wall clock, in seconds since the epoch, as /metrics' timestamps. */
double sh_wall_now(void);

/* ---- the server ---------------------------------------------------------- */

/* The launcher's handle (bench/server.h): pid (0 when not running), port
 * (from the listening line), log and log_len (the start of its stderr, for
 * failure messages). */
typedef bench_server_t sh_server_t;

/* Starts the server with "--port 0 --host 127.0.0.1 --access-log off" and
 * `args` (NULL-terminated flags, may be NULL; a flag given again there
 * wins, as "--host ::1" does), and waits up to 10 s for its
 * listening line. Returns 0, or -1 with the reason in s->log (nothing is
 * left running). Call it from the thread that will outlive the server: the
 * server is killed when that thread ends. */
int sh_server_start(sh_server_t *s, const char *const *args);

/* Reads what the server wrote to stderr since the last call into s->log
 * (until it is full; the rest is discarded). Never blocks. */
void sh_server_read_log(sh_server_t *s);

/* Waits up to 10 s for `event` in the server's log; a Check failure
 * showing the log if it never comes. */
void sh_wait_log(sh_server_t *s, const char *event);

/* Waits up to timeout_s for the server to exit. Returns its exit status
 * (0..255), 128 + the signal that killed it, or -1 if it is still running
 * (then it is left alone). Only the owner may call it. */
int sh_server_wait(sh_server_t *s, double timeout_s);

/* SIGTERM, then sh_server_wait(timeout_s); a server still running then is
 * killed (SIGKILL) and -1 returned. Returns the exit status as
 * sh_server_wait. Only the owner may call it. */
int sh_server_stop(sh_server_t *s, double timeout_s);

/* SIGKILL and reap; no-op when not running. */
void sh_server_kill(sh_server_t *s);

/* `name` in the folder of the attnd under test (ATTND_BIN, default
 * build/attnd): build/attnd-load, build/tests/attnd-pinned, so that the
 * ASan build's suites run its own. Written into out[0..n). */
const char *sh_bin_beside(const char *name, char *out, size_t n);

/* ---- HTTP ---------------------------------------------------------------- */

typedef struct sh_req {
  const char *method;         /* "GET", "POST", ... */
  const char *path;           /* "/v1/attention" */
  const char *content_type;   /* NULL: no Content-Type header */
  const void *body;           /* NULL: no body */
  size_t len;                 /* of body */
  const char *const *headers; /* extra "Name: value" lines, NULL-ended */
  int chunked;                /* send the body with chunked encoding */
  long timeout_ms;            /* whole exchange; 0 means 30000 */
  const char *cafile;         /* HTTPS, trusting this PEM CA file; NULL: HTTP */
} sh_req_t;

/* One reply. Owns its buffers: sh_resp_free. */
typedef struct sh_resp {
  long status;     /* 0 when there was no HTTP reply */
  int curl_code;   /* CURLcode */
  char error[256]; /* curl's message when curl_code != 0 */
  char *head;      /* header lines of the final reply, NUL-terminated */
  size_t head_len;
  char *body; /* NUL-terminated (also when empty) */
  size_t body_len;
  double seconds; /* from the call to the end of the reply */
  double t_end;   /* sh_now() when the reply was complete */
} sh_resp_t;

/* A connection to one server, reused between requests (keep-alive). One
 * thread at a time. */
typedef struct sh_client {
  void *curl; /* CURL * */
  int port;
  const char *host; /* the server's address: NULL is 127.0.0.1; an IPv6
                       literal without brackets (sh_client_init sets NULL) */
} sh_client_t;

void sh_client_init(sh_client_t *c, int port);
void sh_client_free(sh_client_t *c);

/* Runs one exchange. Returns 0 when a reply came (r->status set), -1
 * otherwise (r->curl_code and r->error say why). r must be freed either way. */
int sh_http(sh_client_t *c, const sh_req_t *q, sh_resp_t *r);

/* Shortcuts on a fresh connection: GET `path`; POST /v1/attention with
 * Content-Type application/json and `body` or the compact text of `req`. */
int sh_get(int port, const char *path, sh_resp_t *r);
int sh_post(int port, const char *body, size_t len, sh_resp_t *r);
int sh_post_json(int port, const json_t *req, sh_resp_t *r);

/* The value of the reply's header `name` (case-insensitive), copied into
 * buf; NULL when absent. */
const char *sh_header(const sh_resp_t *r, const char *name, char *buf,
                      size_t n);

/* The reply's body parsed as JSON: a new reference, or NULL. */
json_t *sh_json(const sh_resp_t *r);

void sh_resp_free(sh_resp_t *r);

/* Asserts (Check) that `r` is the JSON error reply
 * {"error":{"code","message","field"?}} with this status and code, that
 * error.field is `field` (NULL: absent), and that the message contains
 * each of the NULL-terminated strings that follow. */
void sh_assert_error(const sh_resp_t *r, long status, const char *code,
                     const char *field, ...) __attribute__((sentinel));
/* The same, the message's strings from `words` (NULL-terminated): for a
 * suite's own helpers that send a request and check its error. */
void sh_assert_error_v(const sh_resp_t *r, long status, const char *code,
                       const char *field, va_list words);

/* ---- raw sockets --------------------------------------------------------- */

/* A blocking TCP connection to 127.0.0.1:port, or -1. */
int sh_connect(int port);

/* A TCP socket bound to a port of 127.0.0.1 that the kernel picks, never
 * listening, so that connections to it are refused while it is open, and
 * the port is free again once it is closed. Returns the socket (the caller
 * closes it) and sets *port; fails the running test on error. */
int sh_bound_port_assert(int *port);

/* Sends all of p[0..n). Returns 0 or -1. */
int sh_send_all(int fd, const void *p, size_t n);

/* POSTs `body` to /v1/attention from a client that reads slowly: a receive
 * buffer of 4 KiB, set before connecting, so that the kernel takes little
 * of a large reply for it. Reads the first KiB of the reply (its headers)
 * into head[0..1024), NUL-terminated, and returns the socket, the rest of
 * the reply unread; fails the running test on error. */
int sh_post_slow_reader_assert(int port, const char *body, char head[1024]);

/* Reads one HTTP reply (its headers, then Content-Length bytes of body, or
 * until the peer closes) into buf, NUL-terminated, waiting at most
 * timeout_ms in all. Returns its length, or -1 when nothing complete came
 * in time. */
long sh_recv_reply(int fd, char *buf, size_t cap, int timeout_ms);

/* The status of a raw reply text ("HTTP/1.1 413 ..."), or 0. */
int sh_raw_status(const char *reply);

/* ---- tensors as JSON ----------------------------------------------------- */

typedef enum { SH_NESTED, SH_FLAT, SH_BASE64 } sh_form_t;

/* The forms of a boolean tensor: nested true/false, nested 0/1, flat
 * true/false, base64 of bytes (dtype bool), base64 of float32 0/1. */
typedef enum {
  SH_MASK_BOOLS,
  SH_MASK_NUMBERS,
  SH_MASK_FLAT,
  SH_MASK_BASE64_BOOL,
  SH_MASK_BASE64_F32
} sh_mask_form_t;

/* Standard base64 with padding of n bytes: a new NUL-terminated string. */
char *sh_base64(const void *src, size_t n);

/* x[0..prod(dim)) as a JSON tensor in `form`: a new reference. A float is
 * written as a double, which reads back to the same float. */
json_t *sh_floats_json(const float *x, int rank, const int64_t *dim,
                       sh_form_t form);

/* A boolean tensor (nonzero = true) in `form`: a new reference. */
json_t *sh_mask_json(const uint8_t *x, int rank, const int64_t *dim,
                     sh_mask_form_t form);

/* A float tensor decoded from a reply. Owns data: sh_tensor_free. */
typedef struct sh_tensor {
  float *data;
  size_t n;
  int rank;
  int64_t dim[8];
  sh_form_t form;
} sh_tensor_t;

/* Decodes `v` in any of the three forms (base64 of dtype float32,
 * float16 or bfloat16, widened exactly, or of int32, whose integers become
 * floats). Returns 0, or -1 with the reason
 * in why. Borrows v. */
int sh_tensor_decode(const json_t *v, sh_tensor_t *t, char *why, size_t n);
void sh_tensor_free(sh_tensor_t *t);

/* ---- requests from attn_params_t ----------------------------------------- */

/* How to write a request. Zero is: nested inputs and weights, allow as
 * nested booleans, causal as strings, no return.encoding. */
typedef struct sh_enc {
  sh_form_t inputs;     /* query, key, value */
  sh_form_t weights;    /* projections, mask.bias */
  sh_mask_form_t allow; /* mask.allow */
  int causal_bool;      /* bottom_right as true (the default kind) */
  const char *encoding; /* return.encoding, or NULL for none */
  int metrics_off;      /* return.metrics false */
  const char *id;       /* id, or NULL for none */
  long timeout_ms;      /* 0: none */
} sh_enc_t;

/* The request for `p` (a valid attn_params_t): return.weights is per_head
 * when p->want_weights, else mean when p->want_mean_weights;
 * return.head_outputs is p->want_head_outputs. A new reference. */
json_t *sh_request_json(const attn_params_t *p, const sh_enc_t *e);

/* Checks reply `rep` (the parsed 200 body) to the request sh_request_json
 * built from `p`: "output", and "weights" / "head_outputs" exactly when
 * requested, each with the shape of the reference (no batch dimension when
 * the query has rank 2), in form `form` (-1: any), within `tol` of
 * ref_attention(p) as ‖got − ref‖₂ / ‖ref‖₂. Returns 0, or -1 with the
 * first difference in why. Any thread. */
int sh_check_reply(const attn_params_t *p, const json_t *rep, int form,
                   double tol, char *why, size_t n);

/* What return.weights asked for. */
enum { SH_WEIGHTS_NONE, SH_WEIGHTS_PER_HEAD, SH_WEIGHTS_MEAN };

/* The mode sh_request_json writes for `p`. */
int sh_weights_mode(const attn_params_t *p);

/* sh_check_reply against a reference computed beforehand (so that the
 * params need not outlive it): `batched` when the query had rank 3,
 * `weights` an SH_WEIGHTS_* mode, `head_outputs` whether they were asked
 * for. Borrows ref. Any thread. */
int sh_check_reply_ref(const ref_result_t *ref, int batched, int weights,
                       int head_outputs, const json_t *rep, int form,
                       double tol, char *why, size_t n);

/* ---- metrics ------------------------------------------------------------- */

/* The sum of the samples of a Prometheus text that `sample` selects: its
 * name, and every label it gives among theirs (so that
 * "attnd_requests_total{status=\"200\"}" adds up every protocol's), or -1
 * when none is there. */
double sh_metric_in(const char *text, const char *sample);

/* The same from GET /metrics; -1 when absent or on failure. */
double sh_metric(int port, const char *sample);
/* The number after `field` ("VmRSS:", "Threads:") in /proc/<pid>/status
 * (kB for sizes), or -1 when it cannot be read. */
long sh_proc_status(pid_t pid, const char *field);
/* The descriptors /proc/<pid>/fd lists; fails the running test when it
 * cannot be read. */
int sh_proc_fds(pid_t pid);

/* Polls /metrics every 5 ms until `sample` is at least `min`, for at most
 * timeout_s. Returns the last value read (-1 if none). */
double sh_wait_metric(int port, const char *sample, double min,
                      double timeout_s);

/* A base64 request of a random query [L, E] (seeded), num_heads H, no
 * projections: heavy enough to keep a worker busy. `extra` (may be NULL) is
 * copied into the request's members before it is written. Returns a new
 * NUL-terminated body. */
char *sh_slow_body(int64_t L, int64_t E, int64_t H, uint64_t seed,
                   const json_t *extra);

/* A POST of body[0..len) to /v1/attention as JSON, for sh_http; the
 * caller sets what else it needs (headers, chunked, timeout). */
sh_req_t sh_attention_post(const char *body, size_t len);

#endif
