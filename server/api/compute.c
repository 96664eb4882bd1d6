/* server/api/compute.c: what every route that computes shares, after its
 * protocol has decoded the body into the one request type: the memory
 * budget, computing inline or handing to the scheduler, the connection
 * resumed when the job is done, and the reply in the protocol's form. See
 * api.h. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "api/decode.h"
#include "api/oip.h"
#include "codec/util.h"
#include "sched/run.h"

void attnd_api_give_memory(attnd_http_req_t *r, int64_t bytes) {
  attnd_memory_settle(bytes);
  int64_t give = bytes;
  attnd_budget_give(&r->srv->budget, &give);
  r->mem_held -= bytes;
}

int attnd_api_hold_memory(attnd_http_req_t *r, int64_t need, const char *what,
                          attnd_error_t *e) {
  if (need > r->srv->budget.max)
    return attnd_http_budget_never(r, need, what, e);
  if (need > r->mem_held && attnd_http_mem_take(r, need - r->mem_held) < 0)
    return attnd_http_budget_full(r, need, e);
  if (need < r->mem_held) /* the rest (the body, decoding's peak) is freed */
    attnd_api_give_memory(r, r->mem_held - need);
  return 0;
}

void attnd_api_meter_begin(attnd_http_req_t *r) {
  attnd__dec_meter_begin(&r->srv->budget, &r->mem_held);
}

int attnd_api_meter_end(attnd_http_req_t *r, int bad, attnd_error_t *e) {
  int64_t need = attnd__dec_meter_end();
  if (bad < 0 && need > 0 && e->code == ATTND_ERR_OUT_OF_MEMORY) {
    attnd_error_t was = *e; /* the id decoding kept, if it had read it */
    if (need > r->srv->budget.max)
      attnd_http_budget_never(r, need, "its body and its decoding, at least",
                              e);
    else
      attnd_http_budget_full(r, need, e);
    e->has_id = was.has_id;
    memcpy(e->id, was.id, sizeof e->id);
    return -1;
  }
  return bad;
}

int attnd_api_take_memory(attnd_http_req_t *r, attnd_request_t *req,
                          attnd_error_t *e) {
  attnd_server_t *s = r->srv;
  attnd_request_mem_t m = attnd_request_memory_parts(req);
  char what[160];
  snprintf(what, sizeof what,
           "tensors %lld, workspace %lld, outputs %lld, reply %lld at most",
           (long long)m.tensors, (long long)m.workspace, (long long)m.outputs,
           (long long)m.reply);
  if (attnd_api_hold_memory(r, (int64_t)attnd_request_memory(req), what, e) < 0)
    return -1;
  /* on the GPU, its memory there too (decode refused what never fits) */
  attnd_budget_t *dev = &s->device_budget;
  int64_t dneed = (int64_t)req->plan.device_bytes;
  if (req->plan.backend == ATTN_BACKEND_CUDA &&
      attnd_budget_take(dev, dneed, &r->device_held) < 0)
    return attnd_error_set(e, ATTND_ERR_OVERLOADED, "backend",
                           "%lld bytes of GPU memory are needed and %lld of "
                           "the %lld that cuda requests may hold "
                           "(max_device_memory_bytes) are in use; retry later",
                           (long long)dneed, (long long)attnd_budget_used(dev),
                           (long long)dev->max);
  return 0;
}

/* Whether req may join a batch of session steps (batch_window_us). */
static int batches(const attnd_http_req_t *r, const attnd_request_t *req) {
  return r->srv->cfg->batch_window_us > 0 && attnd_request_batchable(req);
}

/* When req expires: timeout_ms after its headers arrived. */
static double deadline_of(const attnd_request_t *req) {
  return req->t.arrival + (double)req->timeout_ms;
}

/* Hands req to the scheduler; with `suspend`, the connection is suspended
 * too (under mu, so that the request cannot come back and resume it before
 * it is). Returns 0, or attnd_sched_submit's refusal. */
attnd_sched_job_t attnd_api_job(attnd_http_req_t *r, attnd_request_t *req) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
  return (attnd_sched_job_t){
      .job = req,
      .tag = r,
      .deadline_ms = deadline_of(req),
      .cancel = &req->cancel,
      .fd = ci ? ci->connect_fd : -1,
      .tokens = req->params.query.dim[0],
  };
}

int attnd_api_hand_off(attnd_http_req_t *r, attnd_request_t *req, int suspend) {
  attnd_sched_job_t job = attnd_api_job(r, req);
  job.batchable = batches(r, req);
  job.max_threads = attnd_request_max_threads(req);
  job.work = attnd_request_work(req);
  if (req->t.submit == 0)
    req->t.submit = attnd_now_ms();
  /* The scheduler owns the request until attnd_http_job_done. */
  if (suspend)
    uv_mutex_lock(&r->mu);
  int got = attnd_sched_submit(r->srv->sched, &job);
  if (got == 0 && suspend) {
    r->submitted = 1;
    MHD_suspend_connection(r->conn);
  }
  if (suspend)
    uv_mutex_unlock(&r->mu);
  return got;
}

int attnd_api_refused(attnd_http_req_t *r, int why, attnd_error_t *e) {
  if (why == ATTND_SCHED_NOMEM) /* short of memory, not of places */
    return attnd_error_set(e, ATTND_ERR_OUT_OF_MEMORY, NULL,
                           "out of memory for the scheduler's record of this "
                           "request; retry later");
  /* what attnd_sched_submit counted, as the gauges show it (read after
   * the refusal: others may have come or gone since) */
  const attnd_sched_t *s = r->srv->sched;
  int n = attnd_sched_inflight(s), waiting = attnd_sched_waiting(s),
      held = attnd_sched_held(s), running = n - waiting - held;
  return attnd_error_set(
      e, ATTND_ERR_OVERLOADED, NULL,
      "the queue is full: %d request%s in flight, of the %lld that "
      "queue_depth %lld and workers %lld allow (%d computing, %d waiting for "
      "a worker, %d session step%s waiting for its session's turn); retry "
      "later",
      n, n == 1 ? "" : "s",
      (long long)(r->srv->cfg->queue_depth + r->srv->cfg->workers),
      (long long)r->srv->cfg->queue_depth, (long long)r->srv->cfg->workers,
      running > 0 ? running : 0, waiting, held, held == 1 ? "" : "s");
}

/* The HTTP threads' workspaces for what they compute inline: kept from
 * request to request, as a worker's, and freed when the thread ends. */
static pthread_key_t inline_key;
static pthread_once_t inline_once = PTHREAD_ONCE_INIT;

static void inline_scratch_free(void *p) {
  attnd_scratch_t *s = p;
  attnd_scratch_free(s);
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
static int runs_inline(const attnd_http_req_t *r, const attnd_request_t *req) {
  attnd_server_t *s = r->srv;
  /* on the GPU, a worker: its stream, cuBLAS handle and events are warm,
   * where an HTTP thread's first call would make its own */
  if ((double)req->plan.flops > (double)s->cfg->inline_max_flops ||
      req->plan.backend != ATTN_BACKEND_CPU)
    return 0;
  return !batches(r, req) ||
         (atomic_load(&s->inline_steps) == 0 &&
          attnd_sched_inflight(s->sched) == 0) ||
         !attnd_sched_batch_pays(s->sched, req->params.query.dim[0]);
}

/* Computes req on this HTTP thread, as a worker would (worker -1); the
 * caller then answers at once. Returns 0, or -1 when there is no memory
 * for the workspace (req->result says so too). */
static void run_inline(const attnd_config_t *cfg, attnd_request_t *req) {
  pthread_once(&inline_once, inline_key_init);
  attnd_scratch_t *s = pthread_getspecific(inline_key);
  if (s == NULL && (s = calloc(1, sizeof *s)) != NULL)
    pthread_setspecific(inline_key, s);
  attnd_scratch_t none = {0};
  /* as planned, or with threads_per_request = auto on one thread: it is
   * tiny, and a team of threads would cost more than its work */
  attnd_request_run(req, -1, cfg->threads_per_request ? 0 : 1, s ? s : &none);
  /* it waited for no worker: its queue_ms is 0 (docs/api.md), not the
   * microseconds its run took to set up its team before it started */
  req->t.submit = req->t.start;
}

/* j's run in the backend's counters (attnd_metrics_ran), as it comes back
 * from its worker or its HTTP thread, once, whatever its reply. A job that
 * never ran (batch 0: cancelled before its batch began, or a session's
 * step withdrawn while it waited) adds nothing. */
static void count_run(attnd_server_t *s, const attnd_request_t *j) {
  if (j->batch < 1)
    return;
  const attn_timing_t *tm = &j->out.timing;
  double stage_ms[3] = {tm->projection_ms, tm->attention_ms, tm->output_ms};
  attnd_metrics_ran(s->metrics, (int)j->plan.backend, j->batch,
                    j->t.end - j->t.start, stage_ms);
}

int attnd_api_deadline_error(const attnd_request_t *j, double ready,
                             double waited_ms, const char *where,
                             attnd_error_t *e) {
  double before = ready - j->t.arrival;
  if (before > (double)j->timeout_ms)
    return attnd_error_set(e, ATTND_ERR_DEADLINE_EXCEEDED, "timeout_ms",
                           "no result within timeout_ms %lld: it had passed "
                           "before it was decoded, %.1f ms after its headers "
                           "arrived",
                           (long long)j->timeout_ms, before);
  return attnd_error_set(e, ATTND_ERR_DEADLINE_EXCEEDED, "timeout_ms",
                         "no result within timeout_ms %lld (waited %.1f ms %s)",
                         (long long)j->timeout_ms, waited_ms, where);
}

/* The 504 of a request the scheduler expired: -1, with e. */
static int expired_error(const attnd_request_t *j, attnd_error_t *e) {
  return attnd_api_deadline_error(
      j, j->t.submit, attnd_request_queue_ms(j),
      j->t.start ? "in the queue; its deadline passed while it computed"
                 : "in the queue",
      e);
}

/* A decoded and planned request: its memory, then the scheduler, or, when
 * it is small, computed here and answered now. HTTP thread. */
enum MHD_Result attnd_api_admit(attnd_http_req_t *r, attnd_request_t *req) {
  attnd_error_t e;
  int inline_run = runs_inline(r, req), why = 0;
  double now = attnd_now_ms();
  /* the scheduler expires the rest; what is computed here is checked here */
  if ((inline_run && attnd_sched_expired(deadline_of(req), now) &&
       attnd_api_deadline_error(req, now, 0, "in the queue", &e) < 0) ||
      attnd_api_take_memory(r, req, &e) < 0 ||
      (!inline_run && (why = attnd_api_hand_off(r, req, 1)) < 0 &&
       attnd_api_refused(r, why, &e) < 0)) {
    if (req->session) /* a step that will not run lets the next have its turn */
      attnd_session_step_end(r->srv->sessions, req, 0, NULL);
    return attnd_http_send_error(r, &e);
  }
  if (!inline_run)
    return MHD_YES;
  int step = batches(r, req);
  if (step)
    atomic_fetch_add(&r->srv->inline_steps, 1);
  run_inline(r->srv->cfg, req);
  double end = attnd_now_ms();
  count_run(r->srv, req);
  if (step) {
    atomic_fetch_sub(&r->srv->inline_steps, 1);
    attnd_sched_ran_alone(r->srv->sched, req->params.query.dim[0],
                          req->t.end - req->t.start);
  }
  /* as a worker's job (the scheduler's worker_main): a result that came
   * after its deadline is a 504, and a session's step is not committed */
  int late = req->result == 0 && attnd_sched_expired(deadline_of(req), end);
  if (req->session &&
      attnd_session_step_end(r->srv->sessions, req, req->result == 0 && !late,
                             &r->pre_error) < 0)
    r->has_pre_error = 1;
  r->outcome = late ? ATTND_SCHED_EXPIRED : ATTND_SCHED_DONE;
  return attnd_api_reply(r);
}

enum MHD_Result attnd_api_reply(attnd_http_req_t *r) {
  attnd_request_t *j = r->req;
  if (r->has_pre_error)
    return attnd_http_send_error(r, &r->pre_error);
  if (r->outcome == ATTND_SCHED_ABANDONED) {
    r->status = 499; /* logged only: nobody is listening */
    return MHD_NO;
  }
  if (r->outcome == ATTND_SCHED_EXPIRED) {
    attnd_error_t e;
    expired_error(j, &e);
    return attnd_http_send_error(r, &e);
  }
  if (j->result == ATTN_ENUMERIC) /* a result float32 cannot hold: 422 */
    return attnd_http_fail(r, ATTND_ERR_NUMERIC_OVERFLOW,
                           j->error_path
                               ? j->error_path
                               : attnd_request_field_path(j->error.field_id),
                           "%s", j->error.message);
  if (j->result == ATTN_EDEVICE) /* the GPU failed (or its memory ran out) */
    return attnd_http_fail(r, ATTND_ERR_BACKEND_UNAVAILABLE, "backend", "%s",
                           j->error.message);
  if (j->result != 0) /* ATTN_ENOSPC */
    return attnd_http_fail(
        r, ATTND_ERR_OUT_OF_MEMORY, NULL,
        "out of memory for this request's workspace and outputs; "
        "retry later");
  attnd_buf_t b;
  char *block = attnd_http_reply_block();
  if (block)
    attnd_buf_init_in(&b, block, ATTND_REPLY_BLOCK);
  else
    attnd_buf_init(&b);
  size_t json_len = 0;
  if (r->proto == ATTND_PROTO_V2)
    attnd_oip_encode(j, r->model, &b, &json_len, &r->total_ms);
  else
    attnd_request_encode(j, &b, &r->total_ms), json_len = b.len;
  int pooled = block && b.lent; /* else the text outgrew the block */
  if (block && !pooled)
    attnd_http_reply_release(block);
  if (b.oom) {
    if (pooled)
      attnd_http_reply_release(block);
    attnd_buf_free(&b);
    return attnd_http_fail(r, ATTND_ERR_OUT_OF_MEMORY, NULL,
                           "out of memory for the reply");
  }
  attnd_metrics_observe(r->srv->metrics, r->proto, j->plan.Lk,
                        j->t.end - j->t.start, r->total_ms);
  int binary = json_len < b.len;
  r->reply_json = binary ? json_len : 0;
  return attnd_http_send_body(r, 200, b.data, b.len, pooled,
                              binary ? "application/octet-stream"
                                     : "application/json");
}

/* Taking mu waits out attnd_api_hand_off, so the connection is suspended by
 * then. It is resumed after mu is released: once resumed, an HTTP thread
 * may finish the request and free r (at once for an abandoned request), mu
 * included. */
void attnd_http_job_done(void *job, void *tag, attnd_sched_outcome_t outcome,
                         void *arg) {
  attnd_http_req_t *r = tag;
  attnd_request_t *j = job;
  struct MHD_Connection *conn = r->conn;
  (void)arg;
  attnd_error_t e;
  count_run(r->srv, j); /* before its reply, which may never come */
  if (outcome != ATTND_SCHED_DONE && j->t.start == 0)
    j->t.left = attnd_now_ms(); /* its wait ends with the refusal */
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

enum MHD_Result attnd_api_decoded(attnd_http_req_t *r, int bad,
                                  attnd_request_t *req,
                                  const attnd_error_t *e) {
  if (bad < 0) { /* decoding freed what it held */
    attnd_api_give_memory(r, r->mem_held);
    return attnd_http_send_error(r, e);
  }
  req->t.arrival = r->t_arrival;
  r->req = req; /* the connection owns the request from here */
  /* the share of the body and of its decoding, which holds the request's
   * tensors now, becomes the request's own at admission, with no moment
   * between uncounted (attnd_api_take_memory) */
  return attnd_api_admit(r, req);
}
