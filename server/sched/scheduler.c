/* server/sched/scheduler.c: the FIFO, the workers and the deadlines. See
 * scheduler.h.
 */
#include "sched/scheduler.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "attn/error.h"
#include "codec/util.h"

/* The scheduler's own record of a job, from submit to done. */
typedef struct node {
  struct node *next; /* incoming, FIFO or finished list */
  struct node *peer; /* the next job of its batch, running */
  attnd_sched_job_t j;
  double queued_at;        /* when it was submitted */
  int state;               /* QUEUED, RUNNING or HELD, loop thread */
  int released;            /* a held job's release came, under mu */
  int kept;                /* a held job withdraw kept: waits for it, mu */
  int gone;                /* the client went away, loop thread */
  int result;              /* what run returned, worker then loop */
  int threads;             /* given to it (or its batch) when it started */
  struct watcher *watcher; /* on j.fd while waiting or running, or NULL */
} node_t;

enum { QUEUED = 1, RUNNING, HELD };

typedef struct worker {
  attnd_sched_t *s;
  int index;
  uv_thread_t thread;
  node_t *job; /* assigned by the loop, under s->mu; its batch by `peer` */
  int threads; /* what job was given, with it */
  attnd_scratch_t scratch;
  void *jobs[ATTND_SCHED_MAX_BATCH]; /* a batch's, for run_batch */
  int results[ATTND_SCHED_MAX_BATCH];
} worker_t;

struct attnd_sched {
  uv_loop_t *loop;
  attnd_sched_run_fn run;
  attnd_sched_done_fn done;
  attnd_sched_release_fn release;
  attnd_sched_withdraw_fn withdraw;
  void *arg;
  int n_workers, depth;

  /* Crossing threads, under mu: jobs submitted and not yet seen by the
   * loop; jobs the workers finished; the workers' assignments; the held
   * jobs (attnd_sched_release reads it, the loop links and unlinks). */
  uv_mutex_t mu;
  uv_cond_t cv;
  node_t *incoming, *finished, *held;
  worker_t *workers;
  int stopping;
  uv_async_t wake;

  /* Loop thread only. */
  node_t *head, *tail; /* FIFO of QUEUED nodes */
  node_t **running;    /* per worker: its job, or its batch's first */
  uv_timer_t timer;    /* next deadline, or the end of a batch's window */
  attnd_sched_batching_t batching;
  double window_end; /* a worker waits for a batch until then; 0: none */
  int cores, cap;    /* attnd_sched_set_threads; cores 0: off */
  const atomic_int *arriving;      /* attnd_sched_set_arriving, or NULL */
  const atomic_int *idle_arriving; /* of them, those not using a CPU */

  /* Under mu, for batching (batching_pays): batchable arrivals, queued or
   * computed by their submitter, the last one's time and the mean gap
   * between two (a moving average; 0 until there have been two); what a
   * token of a batchable job costs to compute, alone and in a batch
   * (moving averages, ms), how many runs each has seen (a batch is one),
   * and when the last batch ended. */
  double last_arrival, gap_ms;
  double token_ms_alone, token_ms_batched;
  int64_t seen_alone, seen_batched;
  double batched_at;

  atomic_int inflight, waiting, busy;
  atomic_int n_held;       /* held jobs in flight (attnd_sched_job_t.held) */
  atomic_int threads_busy; /* given to running jobs; written on the loop */
  atomic_uint_fast64_t batches, batched; /* batches of 2 or more, their jobs */
  _Atomic double avg_ms;                 /* moving average of run time */
};

/* ---- workers ------------------------------------------------------------ */

/* Folds x into the moving average *avg of *seen samples. */
static void learn(double *avg, int64_t *seen, double x) {
  *avg = (*seen)++ ? 0.9 * *avg + 0.1 * x : x;
}

/* A batchable job arrived at `now`; under mu. */
static void arrive(attnd_sched_t *s, double now) {
  if (s->last_arrival > 0) {
    double gap = now > s->last_arrival ? now - s->last_arrival : 0;
    s->gap_ms = s->gap_ms > 0 ? 0.8 * s->gap_ms + 0.2 * gap : gap;
  }
  if (now > s->last_arrival)
    s->last_arrival = now;
}

/* A batchable run of n jobs and `tokens` took ms; under mu. */
static void ran(attnd_sched_t *s, int n, int64_t tokens, double ms) {
  if (tokens <= 0)
    return;
  if (n > 1) {
    learn(&s->token_ms_batched, &s->seen_batched, ms / (double)tokens);
    s->batched_at = attnd_now_ms();
  } else {
    learn(&s->token_ms_alone, &s->seen_alone, ms / (double)tokens);
  }
}

int attnd_sched_expired(double deadline_ms, double now) {
  return deadline_ms <= now;
}

static int expired(const node_t *n, double now) {
  return attnd_sched_expired(n->j.deadline_ms, now);
}

static void worker_main(void *arg) {
  worker_t *w = arg;
  attnd_sched_t *s = w->s;
  uv_mutex_lock(&s->mu);
  for (;;) {
    while (w->job == NULL && !s->stopping)
      uv_cond_wait(&s->cv, &s->mu);
    if (w->job == NULL)
      break;
    node_t *job = w->job, *last = job;
    int threads = w->threads;
    uv_mutex_unlock(&s->mu);

    double t0 = attnd_now_ms();
    if (job->peer == NULL) {
      job->result = s->run(job->j.job, w->index, threads, &w->scratch);
    } else {
      int n = 0;
      for (node_t *m = job; m; m = m->peer)
        w->jobs[n++] = m->j.job;
      s->batching.run_batch(w->jobs, n, w->index, threads, &w->scratch,
                            w->results);
      atomic_fetch_add(&s->batches, 1);
      atomic_fetch_add(&s->batched, (uint_fast64_t)n);
      n = 0;
      for (node_t *m = job; m; m = m->peer) {
        m->result = w->results[n++];
        m->next = m->peer; /* the batch, as a list for the loop */
        last = m;
      }
    }
    double end = attnd_now_ms(), ms = end - t0;
    int64_t tokens = 0, n = 0;
    for (node_t *m = job; m; m = m->peer, n++) {
      tokens += m->j.tokens;
      /* the loop's timer cancels a job when its deadline passes, but a
       * loaded machine may not run the loop thread before the job ends: a
       * result that came later is no more its client's than one cancelled
       * in time (docs/api.md: 504, no result before timeout_ms) */
      if (m->result == 0 && expired(m, end))
        m->result = ATTN_ECANCELED;
    }

    uv_mutex_lock(&s->mu);
    s->avg_ms = 0.8 * s->avg_ms + 0.2 * ms;
    if (job->j.batchable)
      ran(s, (int)n, tokens, ms);
    w->job = NULL;
    last->next = s->finished;
    s->finished = job;
    uv_async_send(&s->wake);
  }
  uv_mutex_unlock(&s->mu);
  attnd_scratch_free(&w->scratch);
}

/* ---- the loop side ------------------------------------------------------ */

/* Watches a job's socket for the client going away. */
typedef struct watcher {
  uv_poll_t poll;
  attnd_sched_t *s;
  node_t *node;
} watcher_t;

static void watcher_closed(uv_handle_t *h) {
  free(h->data);
}

static void unwatch(node_t *n) {
  watcher_t *w = n->watcher;
  if (w) {
    uv_poll_stop(&w->poll);
    uv_close((uv_handle_t *)&w->poll, watcher_closed);
    n->watcher = NULL;
  }
}

/* Passes the job back and frees its node. */
static void finish(attnd_sched_t *s, node_t *n, attnd_sched_outcome_t how) {
  unwatch(n);
  attnd_sched_job_t j = n->j;
  free(n);
  if (j.held)
    atomic_fetch_sub(&s->n_held, 1);
  atomic_fetch_sub(&s->inflight, 1);
  s->done(j.job, j.tag, how, s->arg);
}

/* A job leaving the FIFO without running: gone or expired. */
static void drop(attnd_sched_t *s, node_t *n) {
  finish(s, n, n->gone ? ATTND_SCHED_ABANDONED : ATTND_SCHED_EXPIRED);
}

/* Unlinks the held node n (its deadline passed or its client went) when
 * it may leave for done: not released, and `withdraw` lets it; else it is
 * kept, to wait for its release. Under mu. Loop thread. */
static int held_leaves(attnd_sched_t *s, node_t *n) {
  if (n->released || n->kept)
    return 0;
  if (!s->withdraw(n->j.job, n->j.tag, s->arg)) {
    n->kept = 1;
    return 0;
  }
  for (node_t **pp = &s->held; *pp; pp = &(*pp)->next)
    if (*pp == n) {
      *pp = n->next;
      n->next = NULL;
      break;
    }
  return 1;
}

static void fifo_remove(attnd_sched_t *s, node_t *n) {
  node_t **pp = &s->head, *prev = NULL;
  while (*pp && *pp != n) {
    prev = *pp;
    pp = &(*pp)->next;
  }
  if (*pp == NULL)
    return;
  *pp = n->next;
  if (s->tail == n)
    s->tail = prev;
  n->next = NULL;
  atomic_fetch_sub(&s->waiting, 1);
}

/* Takes the jobs just assigned (RUNNING) out of the FIFO, in one pass. */
static void fifo_take_running(attnd_sched_t *s) {
  node_t **pp = &s->head, *prev = NULL;
  while (*pp) {
    node_t *n = *pp;
    if (n->state == RUNNING) {
      *pp = n->next;
      n->next = NULL;
      atomic_fetch_sub(&s->waiting, 1);
    } else {
      prev = n;
      pp = &n->next;
    }
  }
  s->tail = prev;
}

static void cancel(node_t *n) {
  __atomic_store_n(n->j.cancel, 1, __ATOMIC_RELAXED);
}

static int cancelled(const node_t *n) {
  return __atomic_load_n(n->j.cancel, __ATOMIC_RELAXED);
}

/* The client closed its connection: a waiting job leaves the FIFO now; a
 * running one is cancelled and leaves when its worker returns. */
static void on_disconnect(uv_poll_t *p, int status, int events) {
  watcher_t *w = p->data;
  node_t *n = w->node;
  (void)status;
  (void)events;
  n->gone = 1;
  unwatch(n);
  if (n->state == HELD) {
    uv_mutex_lock(&w->s->mu);
    int leaves = held_leaves(w->s, n);
    uv_mutex_unlock(&w->s->mu);
    if (leaves)
      drop(w->s, n);
    return; /* else its release goes on, its client gone */
  }
  cancel(n);
  if (n->state == QUEUED) {
    fifo_remove(w->s, n);
    drop(w->s, n);
  }
}

static void schedule_timer(attnd_sched_t *s);

/* Whether batching a job of `tokens` pays, by what batches have been seen
 * to cost. While a worker waits for company, it computes nothing; each
 * step that joins in the meantime (one per gap_ms) then costs its tokens'
 * saving less than it would alone. So batching pays while a step of
 * `tokens` saves more than gap_ms in a batch. Where the layer's weights
 * stay in the cache, a step alone reads them about as fast as a batch's
 * product does, and that saving is small (docs/performance.md,
 * "Batching"); where they come from memory, it is most of a step.
 *
 * Until there have been BATCH_SEEN runs each way, it is taken to pay. So
 * it is again once BATCH_RELEARN_MS have passed without a batch: batches
 * are then measured afresh, as the load or the layers may have changed
 * (the jobs alone are measured all along, by the submitters' runs too).
 * Under mu. */
#define BATCH_SEEN 16
#define BATCH_RELEARN_MS 1000.0
static int batching_pays(attnd_sched_t *s, int64_t tokens) {
  if (s->seen_batched >= BATCH_SEEN &&
      attnd_now_ms() - s->batched_at > BATCH_RELEARN_MS)
    s->seen_batched = 0;
  if (s->seen_alone < BATCH_SEEN || s->seen_batched < BATCH_SEEN)
    return 1;
  double saving = (s->token_ms_alone - s->token_ms_batched) *
                  (double)(tokens > 0 ? tokens : 1);
  return saving > s->gap_ms;
}

/* When a batch led by head should stop waiting for company, or 0 when it
 * should not wait at all: while compatible jobs keep arriving, up to the
 * window's end and never past twice the mean gap between arrivals since
 * the last one. A server that has seen too few arrivals to know their
 * pace (an idle one) never waits, nor does one whose arrivals come further
 * apart than half the window (few would join in it), nor one where waiting
 * has not paid (batching_pays). */
static double wait_until(attnd_sched_t *s, const node_t *head, double now) {
  double end = head->queued_at + s->batching.window_ms;
  double quiet = s->last_arrival + 2 * s->gap_ms; /* the stream has paused */
  if (s->gap_ms <= 0 || s->gap_ms > s->batching.window_ms / 2 || now >= end ||
      now >= quiet || !batching_pays(s, head->j.tokens))
    return 0;
  return quiet < end ? quiet : end;
}

/* The batch that head (waiting, batchable) would lead now: it and the
 * compatible jobs waiting behind it, within max_tokens, linked by `peer`
 * in arrival order (not yet taken from the FIFO). Returns how many, and in
 * *others whether jobs outside it wait too. */
static int gather(attnd_sched_t *s, node_t *head, double now, int *others,
                  int64_t *tokens) {
  const attnd_sched_batching_t *b = &s->batching;
  node_t *last = head;
  int n = 1;
  *tokens = head->j.tokens;
  *others = 0;
  head->peer = NULL;
  for (node_t *m = head->next; m; m = m->next) {
    if (n < ATTND_SCHED_MAX_BATCH && m->j.batchable && !m->gone &&
        !expired(m, now) && *tokens + m->j.tokens <= b->max_tokens &&
        b->compatible(head->j.job, m->j.job)) {
      last->peer = m;
      last = m;
      m->peer = NULL;
      *tokens += m->j.tokens;
      n++;
    } else {
      *others = 1;
    }
  }
  return n;
}

/* The threads for job n (and its batch, by `peer`), about to start on the
 * idle worker w (attnd_sched_set_threads): the cores no running job holds,
 * less one for each job that starts beside it now (as many as there are
 * jobs waiting behind its batch, up to the idle workers after w: the
 * dispatch gives workers in order) and for each of the submitter's
 * requests in flight that it has not submitted (`arriving`, less the jobs
 * in flight here and those idle, `idle_arriving`), within [1, cap] and the
 * batch's
 * max_threads (their sum; a job of 0 can use any), and for a batch one
 * for each whole thread's worth of its jobs' work together (`work`):
 * steps too small for a thread each are not given one each. 0 when off.
 * Loop thread, under mu. */
static int threads_for(attnd_sched_t *s, int w, const node_t *n) {
  if (s->cores <= 0)
    return 0;
  int idle = 0, in_batch = 0;
  int64_t most = 0; /* the batch's max_threads, summed; -1: any */
  double work = 0;
  for (int i = w + 1; i < s->n_workers; i++)
    idle += s->running[i] == NULL;
  for (const node_t *m = n; m; m = m->peer, in_batch++) {
    most = most < 0 || m->j.max_threads <= 0 ? -1 : most + m->j.max_threads;
    work += m->j.work;
  }
  if (in_batch > 1 && work > 0) {
    int64_t whole = work < 1 ? 1 : work < s->cap ? (int64_t)work : s->cap;
    most = most < 0 || whole < most ? whole : most;
  }
  int behind = atomic_load(&s->waiting) - in_batch;
  int beside = behind < idle ? behind : idle;
  int outside = s->arriving
                    ? atomic_load(s->arriving) - atomic_load(&s->inflight) -
                          atomic_load(s->idle_arriving)
                    : 0;
  int t = s->cores - atomic_load(&s->threads_busy) - (beside > 0 ? beside : 0) -
          (outside > 0 ? outside : 0);
  if (most < 0 || most > s->cap)
    most = s->cap;
  return t > most ? (int)most : t < 1 ? 1 : t;
}

/* Gives worker w the job n, and its batch (peer), with its threads; under
 * mu. */
static void assign(attnd_sched_t *s, int w, node_t *n) {
  for (node_t *m = n; m; m = m->peer)
    m->state = RUNNING;
  n->threads = threads_for(s, w, n);
  atomic_fetch_add(&s->threads_busy, n->threads);
  s->running[w] = n;
  s->workers[w].job = n;
  s->workers[w].threads = n->threads;
  atomic_fetch_add(&s->busy, 1);
}

/* Hands waiting jobs to idle workers, in arrival order, a batchable one
 * with the compatible ones behind it; or holds the first back for its
 * batch's window (window_end). */
static void dispatch(attnd_sched_t *s) {
  s->window_end = 0;
  uv_mutex_lock(&s->mu);
  for (int w = 0; w < s->n_workers && s->head; w++) {
    if (s->running[w])
      continue;
    node_t *n = s->head;
    double now = attnd_now_ms();
    if (n->gone || expired(n, now)) {
      /* gone or expired while waiting: never computed */
      fifo_remove(s, n);
      uv_mutex_unlock(&s->mu);
      drop(s, n);
      uv_mutex_lock(&s->mu);
      w--;
      continue;
    }
    n->peer = NULL;
    if (n->j.batchable && s->batching.window_ms > 0) {
      int others;
      int64_t tokens;
      gather(s, n, now, &others, &tokens);
      double until = wait_until(s, n, now);
      if (!others && tokens < s->batching.max_tokens && until > 0) {
        for (node_t *m = n; m; m = m->peer) /* not now: undone */
          m->peer = NULL;
        s->window_end = until;
        break;
      }
    }
    assign(s, w, n);
    fifo_take_running(s);
  }
  uv_cond_broadcast(&s->cv);
  uv_mutex_unlock(&s->mu);
}

static void watch(attnd_sched_t *s, node_t *n) {
  if (n->j.fd < 0)
    return;
  watcher_t *w = malloc(sizeof *w);
  if (w == NULL)
    return;
  if (uv_poll_init(s->loop, &w->poll, n->j.fd) != 0) {
    free(w);
    return;
  }
  w->s = s;
  w->node = n;
  w->poll.data = w;
  n->watcher = w;
  if (uv_poll_start(&w->poll, UV_DISCONNECT, on_disconnect) != 0)
    unwatch(n);
}

static void on_wake(uv_async_t *a) {
  attnd_sched_t *s = a->data;
  uv_mutex_lock(&s->mu);
  node_t *in = s->incoming, *fin = s->finished, *rel = NULL;
  s->incoming = s->finished = NULL;
  /* held jobs: the new ones onto the held list, watched below; those
   * released, off it (in `rel`), the scheduler done with them */
  for (node_t **pp = &in; *pp;) {
    node_t *n = *pp;
    if (!n->j.held) {
      pp = &n->next;
      continue;
    }
    *pp = n->next;
    n->state = HELD;
    n->next = s->held;
    s->held = n;
    watch(s, n);
  }
  for (node_t **pp = &s->held; *pp;) {
    node_t *n = *pp;
    if (!n->released) {
      pp = &n->next;
      continue;
    }
    *pp = n->next;
    n->next = rel;
    rel = n;
  }
  uv_mutex_unlock(&s->mu);
  while (rel) {
    node_t *n = rel;
    rel = rel->next;
    unwatch(n);
    attnd_sched_job_t j = n->j;
    free(n);
    atomic_fetch_sub(&s->n_held, 1);
    atomic_fetch_sub(&s->inflight, 1);
    s->release(j.job, j.tag, s->arg);
  }

  /* Finished jobs, and free their workers. */
  while (fin) {
    node_t *n = fin;
    fin = fin->next;
    n->next = NULL;
    for (int w = 0; w < s->n_workers; w++)
      if (s->running[w] == n) { /* the job, or its batch's first */
        s->running[w] = NULL;
        atomic_fetch_sub(&s->busy, 1);
        atomic_fetch_sub(&s->threads_busy, n->threads); /* given back */
      }
    finish(s, n,
           n->gone                       ? ATTND_SCHED_ABANDONED
           : n->result == ATTN_ECANCELED ? ATTND_SCHED_EXPIRED
                                         : ATTND_SCHED_DONE);
  }

  /* Submitted jobs, reversed back to arrival order, onto the FIFO. */
  node_t *rev = NULL;
  while (in) {
    node_t *next = in->next;
    in->next = rev;
    rev = in;
    in = next;
  }
  while (rev) {
    node_t *n = rev;
    rev = rev->next;
    n->next = NULL;
    n->state = QUEUED;
    watch(s, n);
    if (s->tail)
      s->tail->next = n;
    else
      s->head = n;
    s->tail = n;
  }
  dispatch(s);
  schedule_timer(s);
}

/* Expires what is past its deadline: waiting jobs leave the FIFO at once;
 * running ones are cancelled and leave when their worker returns. Then a
 * batch whose window has ended goes. */
static void on_timer(uv_timer_t *t) {
  attnd_sched_t *s = t->data;
  double now = attnd_now_ms();
  for (node_t *n = s->head, *next; n; n = next) {
    next = n->next;
    if (expired(n, now) || n->gone) {
      fifo_remove(s, n);
      drop(s, n);
    }
  }
  uv_mutex_lock(&s->mu); /* held jobs past their deadline, not released */
  node_t *late = NULL;
  for (node_t *n = s->held, *next; n; n = next) {
    next = n->next;
    if (expired(n, now) && held_leaves(s, n)) {
      n->next = late;
      late = n;
    }
  }
  uv_mutex_unlock(&s->mu);
  while (late) {
    node_t *n = late;
    late = late->next;
    drop(s, n);
  }
  for (int w = 0; w < s->n_workers; w++)
    for (node_t *n = s->running[w]; n; n = n->peer)
      if (expired(n, now))
        cancel(n);
  dispatch(s);
  schedule_timer(s);
}

/* The timer, for the next deadline or the end of a batch's window (libuv's
 * timers count whole milliseconds: a window ends up to 1 ms late). */
static void schedule_timer(attnd_sched_t *s) {
  double next = s->window_end > 0 ? s->window_end : -1;
  for (node_t *n = s->head; n; n = n->next)
    if (next < 0 || n->j.deadline_ms < next)
      next = n->j.deadline_ms;
  uv_mutex_lock(&s->mu);
  for (node_t *n = s->held; n; n = n->next)
    if (!n->released && !n->kept && (next < 0 || n->j.deadline_ms < next))
      next = n->j.deadline_ms;
  uv_mutex_unlock(&s->mu);
  for (int w = 0; w < s->n_workers; w++)
    for (node_t *n = s->running[w]; n; n = n->peer)
      if (!cancelled(n) && (next < 0 || n->j.deadline_ms < next))
        next = n->j.deadline_ms;
  if (next < 0) {
    uv_timer_stop(&s->timer);
    return;
  }
  double wait = next - attnd_now_ms();
  uv_timer_start(&s->timer, on_timer, wait > 0 ? (uint64_t)wait + 1 : 0, 0);
}

/* ---- public ------------------------------------------------------------- */

attnd_sched_t *attnd_sched_new(uv_loop_t *loop, int workers, int depth,
                               attnd_sched_run_fn run, attnd_sched_done_fn done,
                               void *arg) {
  attnd_sched_t *s = calloc(1, sizeof *s);
  if (s == NULL)
    return NULL;
  s->loop = loop;
  s->run = run;
  s->done = done;
  s->arg = arg;
  s->n_workers = workers;
  s->depth = depth;
  s->workers = calloc((size_t)workers, sizeof *s->workers);
  s->running = calloc((size_t)workers, sizeof *s->running);
  if (!s->workers || !s->running || uv_mutex_init(&s->mu)) {
    free(s->workers);
    free(s->running);
    free(s);
    return NULL;
  }
  if (uv_cond_init(&s->cv) != 0)
    goto fail_mutex;
  int started = 0;
  for (; started < workers; started++) {
    s->workers[started] = (worker_t){.s = s, .index = started};
    if (uv_thread_create(&s->workers[started].thread, worker_main,
                         &s->workers[started]) != 0)
      goto fail_threads;
  }
  /* The workers touch `wake` only once they have a job, so it can come
   * last. uv_timer_init cannot fail on an initialised loop. */
  if (uv_async_init(loop, &s->wake, on_wake) != 0)
    goto fail_threads;
  s->wake.data = s;
  uv_timer_init(loop, &s->timer);
  s->timer.data = s;
  return s;

fail_threads:
  uv_mutex_lock(&s->mu);
  s->stopping = 1;
  uv_cond_broadcast(&s->cv);
  uv_mutex_unlock(&s->mu);
  for (int w = 0; w < started; w++)
    uv_thread_join(&s->workers[w].thread);
  uv_cond_destroy(&s->cv);
fail_mutex:
  uv_mutex_destroy(&s->mu);
  free(s->workers);
  free(s->running);
  free(s);
  return NULL;
}

void attnd_sched_set_batching(attnd_sched_t *s,
                              const attnd_sched_batching_t *b) {
  s->batching = *b;
  if (s->batching.max_tokens < 1)
    s->batching.max_tokens = 1;
}

void attnd_sched_set_threads(attnd_sched_t *s, int cores, int cap) {
  s->cores = cores > 0 ? cores : 0;
  s->cap = cap > 0 ? cap : 1;
}

void attnd_sched_set_arriving(attnd_sched_t *s, const atomic_int *inflight,
                              const atomic_int *idle) {
  s->arriving = inflight;
  s->idle_arriving = idle;
}

int attnd_sched_submit(attnd_sched_t *s, const attnd_sched_job_t *job) {
  if (atomic_fetch_add(&s->inflight, 1) >= s->depth + s->n_workers) {
    atomic_fetch_sub(&s->inflight, 1);
    return ATTND_SCHED_FULL;
  }
  node_t *n = calloc(1, sizeof *n);
  if (n == NULL) {
    atomic_fetch_sub(&s->inflight, 1);
    return ATTND_SCHED_NOMEM;
  }
  n->j = *job;
  n->queued_at = attnd_now_ms();
  /* a held job waits outside: not for a worker */
  atomic_fetch_add(job->held ? &s->n_held : &s->waiting, 1);
  uv_mutex_lock(&s->mu);
  if (job->batchable && !job->held)
    arrive(s, n->queued_at);
  n->next = s->incoming;
  s->incoming = n;
  uv_mutex_unlock(&s->mu);
  uv_async_send(&s->wake);
  return 0;
}

void attnd_sched_set_release(attnd_sched_t *s, attnd_sched_release_fn release,
                             attnd_sched_withdraw_fn withdraw) {
  s->release = release;
  s->withdraw = withdraw;
}

void attnd_sched_release(attnd_sched_t *s, uint64_t id) {
  uv_mutex_lock(&s->mu);
  node_t *lists[2] = {s->incoming, s->held}, *n = NULL;
  for (int k = 0; k < 2 && n == NULL; k++)
    for (n = lists[k]; n && !(n->j.held && n->j.id == id); n = n->next)
      ;
  if (n)
    n->released = 1;
  uv_mutex_unlock(&s->mu);
  if (n)
    uv_async_send(&s->wake);
}

int attnd_sched_batch_pays(attnd_sched_t *s, int64_t tokens) {
  if (s->batching.window_ms <= 0)
    return 0;
  uv_mutex_lock(&s->mu);
  int pays = batching_pays(s, tokens);
  uv_mutex_unlock(&s->mu);
  return pays;
}

void attnd_sched_ran_alone(attnd_sched_t *s, int64_t tokens, double ms) {
  double now = attnd_now_ms();
  uv_mutex_lock(&s->mu);
  arrive(s, now - ms); /* when it came */
  ran(s, 1, tokens, ms);
  uv_mutex_unlock(&s->mu);
}

int attnd_sched_waiting(const attnd_sched_t *s) {
  return atomic_load(&s->waiting);
}
int attnd_sched_busy(const attnd_sched_t *s) {
  return atomic_load(&s->busy);
}
int attnd_sched_threads_busy(const attnd_sched_t *s) {
  return atomic_load(&s->threads_busy);
}
int attnd_sched_inflight(const attnd_sched_t *s) {
  return atomic_load(&s->inflight);
}
int attnd_sched_held(const attnd_sched_t *s) {
  return atomic_load(&s->n_held);
}

void attnd_sched_batches(const attnd_sched_t *s, uint64_t *batches,
                         uint64_t *jobs) {
  *batches = atomic_load(&s->batches);
  *jobs = atomic_load(&s->batched);
}

int attnd_sched_retry_after_s(const attnd_sched_t *s) {
  double ms = atomic_load(&s->avg_ms) * (double)(atomic_load(&s->waiting) + 1) /
              s->n_workers;
  int sec = (int)(ms / 1000.0) + 1;
  return sec > 60 ? 60 : sec;
}

void attnd_sched_close(attnd_sched_t *s) {
  uv_mutex_lock(&s->mu);
  s->stopping = 1;
  uv_cond_broadcast(&s->cv);
  uv_mutex_unlock(&s->mu);
  for (int w = 0; w < s->n_workers; w++)
    uv_thread_join(&s->workers[w].thread);
  uv_close((uv_handle_t *)&s->wake, NULL);
  uv_close((uv_handle_t *)&s->timer, NULL);
}

void attnd_sched_free(attnd_sched_t *s) {
  uv_mutex_destroy(&s->mu);
  uv_cond_destroy(&s->cv);
  free(s->workers);
  free(s->running);
  free(s);
}
