/* server/api/api.h: the handlers of attnd's routes, one file per protocol,
 * and what the routes that compute share. The route table
 * (server/api/routes.c) names every handler here; http/http.c calls them
 * through it. Every handler runs on an HTTP thread and answers with
 * http/reply.c (exchange.h says when each is called).
 *
 *   v1.c        POST /v1/attention, GET /v1/info, GET /v1/layers[/{name}]
 *   sessions.c  /v1/sessions...: create, list, get, delete, fork,
 *               truncate, and a step's attention (its turn on the session)
 *   v2.c        the Open Inference Protocol (/v2...): server, health,
 *               model metadata and readiness, inference
 *   ops.c       /healthz, /readyz, /metrics, and the binary's files (the
 *               page, /openapi.json)
 *   compute.c   a decoded request's memory, its run (inline or through the
 *               scheduler) and its reply */
#ifndef ATTND_API_H
#define ATTND_API_H

#include "http/exchange.h"

/* ---- v1.c ---------------------------------------------------------------- */
enum MHD_Result attnd_v1_attention(attnd_http_req_t *r);
enum MHD_Result attnd_v1_info(attnd_http_req_t *r);
enum MHD_Result attnd_v1_layers(attnd_http_req_t *r);
enum MHD_Result attnd_v1_layer(attnd_http_req_t *r);

/* ---- sessions.c -------------------------------------------------------- */
enum MHD_Result attnd_sessions_list(attnd_http_req_t *r);
enum MHD_Result attnd_sessions_create(attnd_http_req_t *r); /* POST */
enum MHD_Result attnd_sessions_put(attnd_http_req_t *r);    /* PUT {id} */
enum MHD_Result attnd_sessions_get(attnd_http_req_t *r);
enum MHD_Result attnd_sessions_delete(attnd_http_req_t *r);
enum MHD_Result attnd_sessions_fork(attnd_http_req_t *r);
enum MHD_Result attnd_sessions_truncate(attnd_http_req_t *r);
enum MHD_Result attnd_sessions_step(attnd_http_req_t *r);

/* ---- v2.c ---------------------------------------------------------------- */
enum MHD_Result attnd_v2_server(attnd_http_req_t *r);
enum MHD_Result attnd_v2_live(attnd_http_req_t *r);
enum MHD_Result attnd_v2_ready(attnd_http_req_t *r);
enum MHD_Result attnd_v2_model(attnd_http_req_t *r);
enum MHD_Result attnd_v2_model_ready(attnd_http_req_t *r);
enum MHD_Result attnd_v2_infer(attnd_http_req_t *r);
/* A model path's version (only 1 exists), and for an inference, whether
 * the model is loaded: answered from the headers, before the body. */
int attnd_v2_model_ok(attnd_http_req_t *r, enum MHD_Result *ret);
int attnd_v2_infer_ok(attnd_http_req_t *r, enum MHD_Result *ret);

/* ---- ops.c --------------------------------------------------------------- */
/* Where the GPU that attnd started with (server.h's device_at_start) has
 * failed since: a health reply {key: value, "device": why} (value
 * stolen); else NULL, and value is freed. */
json_t *attnd_api_device_lost(const attnd_server_t *s, const char *key,
                              json_t *value);
enum MHD_Result attnd_ops_healthz(attnd_http_req_t *r);
enum MHD_Result attnd_ops_readyz(attnd_http_req_t *r);
enum MHD_Result attnd_ops_metrics(attnd_http_req_t *r);
enum MHD_Result attnd_ops_asset(attnd_http_req_t *r);

/* ---- compute.c ----------------------------------------------------------- */

/* A decoded and planned request (owned by r from here): its memory, then
 * the scheduler, or, when it is small, computed here and answered now. */
enum MHD_Result attnd_api_admit(attnd_http_req_t *r, attnd_request_t *req);
/* A protocol's decoder has been at the body (now freed): with `bad` < 0
 * the error e is sent, else req (owned by r from here) is admitted. */
enum MHD_Result attnd_api_decoded(attnd_http_req_t *r, int bad,
                                  attnd_request_t *req, const attnd_error_t *e);
/* The request came back (the connection was resumed, or it ran inline):
 * writes its reply, or its error. */
enum MHD_Result attnd_api_reply(attnd_http_req_t *r);
/* The memory a decoded and planned request needs, taken from the budget
 * (less what r holds already: a session step's decoded tensors while it
 * waited, attnd_api_hold_memory): 0, or -1 with the error
 * (limit_exceeded, or overloaded) in e. */
int attnd_api_take_memory(attnd_http_req_t *r, attnd_request_t *req,
                          attnd_error_t *e);
/* Gives back `bytes` of r's share, whose memory is freed by now: to the
 * system first, when they are more than a thread keeps
 * (attnd_memory_settle), so that no other request takes their share while
 * the process still holds their pages. */
void attnd_api_give_memory(attnd_http_req_t *r, int64_t bytes);
/* Makes r hold `need` bytes of the budget in all, taking what it lacks or
 * giving back what it holds beyond (its body and its decoding's peak,
 * freed by then): 0, or -1 with e (r's share as it was): limit_exceeded
 * when need is over what requests may hold at all (`what` names the
 * bytes), overloaded when others hold too much of it now. */
int attnd_api_hold_memory(attnd_http_req_t *r, int64_t need, const char *what,
                          attnd_error_t *e);
/* Around a protocol's decoding of r's body: from _begin to _end, what
 * decoding allocates counts in r's share of the budget, beside the body
 * (decode.h, attnd__dec_meter_begin); attnd_api_decoded gives it back
 * when decoding failed, else admission settles it to the request's own.
 * _end returns `bad`; where decoding failed as out of memory because the
 * budget was short, e is then the budget's error instead: overloaded
 * (429), or limit_exceeded when the decoding could never fit, with the
 * id that decoding kept (has_id). */
void attnd_api_meter_begin(attnd_http_req_t *r);
int attnd_api_meter_end(attnd_http_req_t *r, int bad, attnd_error_t *e);
/* What the scheduler needs of req besides req (attnd_sched_job_t): its
 * tag r, deadline, cancel flag, client's socket and tokens. */
attnd_sched_job_t attnd_api_job(attnd_http_req_t *r, attnd_request_t *req);
/* Hands req to the scheduler; with `suspend`, the connection is suspended
 * too (under r->mu, so that the request cannot come back and resume it
 * before it is). Returns 0, or attnd_sched_submit's refusal:
 * ATTND_SCHED_FULL, ATTND_SCHED_NOMEM. */
int attnd_api_hand_off(attnd_http_req_t *r, attnd_request_t *req, int suspend);
/* The error of hand_off's refusal `why`: overloaded (429) for a full
 * queue, out_of_memory (503) for no node. -1, with e. */
int attnd_api_refused(attnd_http_req_t *r, int why, attnd_error_t *e);
/* The 504 of j, whose deadline passed: -1, with e saying where its time
 * went. One decoded (`ready`, an attnd_now_ms() time) after its deadline
 * says so; else it waited `waited_ms` `where` ("in the queue"). Any
 * thread. */
int attnd_api_deadline_error(const attnd_request_t *j, double ready,
                             double waited_ms, const char *where,
                             attnd_error_t *e);

#endif
