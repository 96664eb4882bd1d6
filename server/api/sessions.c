/* server/api/sessions.c: KV-cache sessions' endpoints (docs/sessions.md):
 * create, list, get, delete, fork and truncate, answered at once with the
 * store's JSON (api/session_api.c), and a step's attention. See api.h.
 *
 * A step is decoded against its session's shape, holds its decoded
 * tensors' share of the memory budget, and is enqueued on it. In its
 * turn (at once, or when the step ahead of it has ended) it is prepared,
 * planned, given the rest of its memory and handed to the scheduler;
 * attnd_http_job_done ends it, which gives the next step its turn. A step that
 * must wait keeps its connection suspended meanwhile, and is held by the
 * scheduler (a job it never runs), which watches its deadline and its
 * client as it does a queued job's: its turn comes through the scheduler's
 * loop (attnd_sessions_released), and a deadline that passes or a client
 * that goes first takes it out of the session's queue
 * (attnd_sessions_withdraw), to be answered as a queued job is. One that
 * fails in its turn comes back with its error (pre_error). */
#include <stdatomic.h>
#include <string.h>

#include "api/api.h"
#include "api/decode.h"
#include "api/session_api.h"
#include "sched/request.h"

/* In its turn: the step prepared (its pages ready) and planned, within its
 * deadline. 0, or -1 with e, the step then ended, and, where it `waited`
 * for its turn, its wait ended too (t.left); one whose turn came at once
 * is refused before the queue. */
static int step_prepare(attnd_http_req_t *r, int waited, attnd_error_t *e) {
  attnd_server_t *s = r->srv;
  attnd_request_t *j = r->req;
  int bad = attnd_session_prepare(s->sessions, j, e) < 0 ||
            attnd_request_plan(j, s->cfg, e) < 0;
  double now = attnd_now_ms();
  if (!bad && now > j->t.arrival + (double)j->timeout_ms)
    bad = attnd_api_deadline_error(j, j->t.submit, now - j->t.submit,
                                   "for the session's steps ahead of this one",
                                   e) < 0;
  if (bad) {
    if (waited)
      j->t.left = now; /* it waited for its turn until now */
    attnd_session_step_end(s->sessions, j, 0, NULL);
  }
  return bad ? -1 : 0;
}

/* A waiting step's turn: it is prepared and handed to a worker, never
 * computed here. The connection is suspended; a step that cannot start
 * comes back with its error. */
static void step_start(attnd_http_req_t *r) {
  attnd_request_t *j = r->req;
  struct MHD_Connection *conn = r->conn;
  attnd_error_t *e = &r->pre_error;
  if (step_prepare(r, 1, e) == 0) {
    int why = 0;
    if (attnd_api_take_memory(r, j, e) == 0 &&
        ((why = attnd_api_hand_off(r, j, 0)) == 0 ||
         attnd_api_refused(r, why, e) == 0))
      return;
    j->t.left = attnd_now_ms();
    attnd_session_step_end(r->srv->sessions, j, 0, NULL);
  }
  uv_mutex_lock(&r->mu);
  r->has_pre_error = 1;
  r->outcome = ATTND_SCHED_DONE;
  r->submitted = 0;
  uv_mutex_unlock(&r->mu);
  MHD_resume_connection(conn); /* r may be gone from here on */
}

/* The session's turn function (session.h), on the thread that ended the
 * step ahead of this one. A held step's turn goes through the scheduler,
 * whose loop then calls attnd_sessions_released; r is not touched after
 * its release (the loop may have it answered by then). */
static void step_turn(void *tag) {
  attnd_http_req_t *r = tag;
  attnd_sched_t *sched = r->srv->sched;
  uv_mutex_lock(&r->mu); /* waits out attnd_sessions_step's suspension */
  uint64_t held = r->req->wait_id;
  uv_mutex_unlock(&r->mu);
  if (held)
    attnd_sched_release(sched, held);
  else
    step_start(r);
}

void attnd_sessions_released(void *job, void *tag, void *arg) {
  attnd_http_req_t *r = tag;
  (void)arg;
  ((attnd_request_t *)job)->wait_id = 0;
  step_start(r);
}

int attnd_sessions_withdraw(void *job, void *tag, void *arg) {
  attnd_http_req_t *r = tag;
  (void)arg;
  return attnd_session_unqueue(r->srv->sessions, job);
}

/* Holds step j, which waits behind its session's step ahead, in the
 * scheduler: its id there, or 0 when the queue is full (it then waits
 * unwatched, its deadline checked in its turn). Under r->mu. */
static uint64_t hold_step(attnd_http_req_t *r, attnd_request_t *j) {
  static atomic_uint_fast64_t ids;
  attnd_sched_job_t job = attnd_api_job(r, j);
  job.held = 1;
  job.id = (uint64_t)atomic_fetch_add(&ids, 1) + 1;
  return attnd_sched_submit(r->srv->sched, &job) == 0 ? job.id : 0;
}

enum MHD_Result attnd_sessions_step(attnd_http_req_t *r) {
  attnd_server_t *s = r->srv;
  attnd_error_t e;
  attnd_session_shape_t shape;
  attnd_request_t *j = NULL;
  if (attnd_session_shape(s->sessions, r->sid, &shape, &e) < 0) {
    /* the body's id, as a step refused for its body has it */
    attnd__dec_find_id(r->body.data ? r->body.data + r->pad : "",
                       r->body.len - r->pad, &e);
    return attnd_http_send_error(r, &e);
  }
  attnd_api_meter_begin(r);
  int bad = attnd_step_decode(r->body.data ? r->body.data + r->pad : "",
                              r->body.len - r->pad, s->cfg, &shape, &j, &e);
  bad = attnd_api_meter_end(r, bad, &e);
  attnd_layer_set_unref(shape.layers); /* a request with a layer holds one */
  attnd_buf_free(&r->body);
  if (bad < 0) { /* decoding freed what it held */
    attnd_api_give_memory(r, r->mem_held);
    return attnd_http_send_error(r, &e);
  }
  r->req = j; /* the connection owns the step from here */
  /* the share of the body and of its decoding becomes the decoded step's:
   * what it holds while it waits for its turn (its plan's share is taken
   * then) */
  if (attnd_api_hold_memory(r, (int64_t)j->alloc_bytes, "its decoded tensors",
                            &e) < 0)
    return attnd_http_send_error(r, &e);
  j->t.arrival = r->t_arrival;
  j->t.submit = attnd_now_ms(); /* waiting for its turn is queueing too */
  uv_mutex_lock(&r->mu);
  int now = attnd_session_enqueue(s->sessions, r->sid, j, step_turn, r, &e);
  if (now == 0) { /* others are ahead: its turn comes later */
    r->submitted = 1;
    j->wait_id = hold_step(r, j);
    MHD_suspend_connection(r->conn);
  }
  uv_mutex_unlock(&r->mu);
  if (now < 0 || (now == 1 && step_prepare(r, 0, &e) < 0))
    return attnd_http_send_error(r, &e);
  return now == 1 ? attnd_api_admit(r, j) : MHD_YES;
}

/* A control request's reply: `status` with b, or e. */
static enum MHD_Result control_reply(attnd_http_req_t *r, int bad, int status,
                                     attnd_buf_t *b, const attnd_error_t *e) {
  if (bad < 0) {
    attnd_buf_free(b);
    return attnd_http_send_error(r, e);
  }
  return attnd_http_send_buf(r, status, b, "application/json");
}

/* POST /v1/sessions (an id of the store's), PUT /v1/sessions/{id}. */
static enum MHD_Result create(attnd_http_req_t *r, const char *id) {
  attnd_server_t *s = r->srv;
  attnd_error_t e;
  attnd_buf_t b;
  attnd_buf_init(&b);
  attnd_layer_set_t *layers = attnd_server_layers(s);
  int bad = attnd_session_api_create(
      s->sessions, id, r->body.data ? r->body.data + r->pad : "",
      r->body.len - r->pad, s->cfg, layers, &b, &e);
  attnd_layer_set_unref(layers);
  return control_reply(r, bad, 201, &b, &e);
}

enum MHD_Result attnd_sessions_create(attnd_http_req_t *r) {
  return create(r, NULL);
}

enum MHD_Result attnd_sessions_put(attnd_http_req_t *r) {
  return create(r, r->sid);
}

/* A session's fork or truncate: `op` on the session with the body. */
static enum MHD_Result on_session(attnd_http_req_t *r,
                                  int (*op)(attnd_sessions_t *, const char *,
                                            const char *, size_t, attnd_buf_t *,
                                            attnd_error_t *),
                                  int status) {
  attnd_error_t e;
  attnd_buf_t b;
  attnd_buf_init(&b);
  int bad =
      op(r->srv->sessions, r->sid, r->body.data ? r->body.data + r->pad : "",
         r->body.len - r->pad, &b, &e);
  return control_reply(r, bad, status, &b, &e);
}

/* POST /v1/sessions/{id}/fork: 201. */
enum MHD_Result attnd_sessions_fork(attnd_http_req_t *r) {
  return on_session(r, attnd_session_api_fork, 201);
}

/* POST /v1/sessions/{id}/truncate: 200. */
enum MHD_Result attnd_sessions_truncate(attnd_http_req_t *r) {
  return on_session(r, attnd_session_api_truncate, 200);
}

/* GET /v1/sessions?limit=&after=: a page of the list. */
enum MHD_Result attnd_sessions_list(attnd_http_req_t *r) {
  attnd_error_t e;
  attnd_buf_t b;
  attnd_buf_init(&b);
  static const char *const names[] = {"limit", "after", NULL};
  const char *v[2];
  int bad = attnd_http_query(r, names, v, &e);
  if (bad == 0)
    bad = attnd_session_api_list(r->srv->sessions, v[0], v[1], &b, &e);
  return control_reply(r, bad, 200, &b, &e);
}

/* DELETE /v1/sessions/{id}: 204. */
enum MHD_Result attnd_sessions_delete(attnd_http_req_t *r) {
  attnd_error_t e;
  if (attnd_session_delete(r->srv->sessions, r->sid, &e) < 0)
    return attnd_http_send_error(r, &e);
  return attnd_http_send_body(r, 204, NULL, 0, 0, NULL);
}

/* GET /v1/sessions/{id}. */
enum MHD_Result attnd_sessions_get(attnd_http_req_t *r) {
  attnd_error_t e;
  attnd_buf_t b;
  attnd_buf_init(&b);
  attnd_session_info_t info;
  int bad = attnd_session_get(r->srv->sessions, r->sid, &info, &e);
  if (!bad) {
    attnd_session_info_json(&info, &b);
    attnd_buf_puts(&b, "\n");
  }
  return control_reply(r, bad, 200, &b, &e);
}
