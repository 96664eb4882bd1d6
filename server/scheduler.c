/* server/scheduler.c: the FIFO, the workers and the deadlines. See scheduler.h.
 */
#include "scheduler.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef struct worker {
  attnd_sched_t *s;
  int index;
  uv_thread_t thread;
  attnd_job_t *job; /* assigned by the loop, under s->mu */
  attnd_scratch_t scratch;
} worker_t;

struct attnd_sched {
  uv_loop_t *loop;
  attnd_sched_done_fn done;
  void *arg;
  int n_workers, depth;

  /* Crossing threads, under mu: jobs submitted and not yet seen by the
   * loop; jobs the workers finished; the workers' assignments. */
  uv_mutex_t mu;
  uv_cond_t cv;
  attnd_job_t *incoming, *finished;
  worker_t *workers;
  int stopping;
  uv_async_t wake;

  /* Loop thread only. */
  attnd_job_t *head, *tail; /* FIFO of ATTND_JOB_QUEUED */
  attnd_job_t **running;    /* per worker */
  uv_timer_t timer;         /* next deadline */

  atomic_int inflight, waiting, busy;
  _Atomic double avg_ms; /* moving average of compute time */
};

/* ---- workers ------------------------------------------------------------ */

static void worker_main(void *arg) {
  worker_t *w = arg;
  attnd_sched_t *s = w->s;
  uv_mutex_lock(&s->mu);
  for (;;) {
    while (w->job == NULL && !s->stopping)
      uv_cond_wait(&s->cv, &s->mu);
    if (w->job == NULL)
      break;
    attnd_job_t *job = w->job;
    uv_mutex_unlock(&s->mu);

    attnd_job_run(job, w->index, &w->scratch);

    uv_mutex_lock(&s->mu);
    w->job = NULL;
    job->next = s->finished;
    s->finished = job;
    uv_async_send(&s->wake);
  }
  uv_mutex_unlock(&s->mu);
  free(w->scratch.data);
}

/* ---- the loop side ------------------------------------------------------ */

/* Watches a waiting job's socket for the client going away. */
typedef struct watcher {
  uv_poll_t poll;
  attnd_sched_t *s;
  attnd_job_t *job;
} watcher_t;

static void watcher_closed(uv_handle_t *h) {
  free(h->data);
}

static void unwatch(attnd_job_t *job) {
  watcher_t *w = job->poll;
  if (w) {
    uv_poll_stop(&w->poll);
    uv_close((uv_handle_t *)&w->poll, watcher_closed);
    job->poll = NULL;
  }
}

static void finish(attnd_sched_t *s, attnd_job_t *job, int state) {
  unwatch(job);
  job->state = state;
  atomic_fetch_sub(&s->inflight, 1);
  s->done(job, s->arg);
}

static void fifo_remove(attnd_sched_t *s, attnd_job_t *job) {
  attnd_job_t **pp = &s->head, *prev = NULL;
  while (*pp && *pp != job) {
    prev = *pp;
    pp = &(*pp)->next;
  }
  if (*pp == NULL)
    return;
  *pp = job->next;
  if (s->tail == job)
    s->tail = prev;
  job->next = NULL;
  atomic_fetch_sub(&s->waiting, 1);
}

static void cancel(attnd_job_t *job) {
  __atomic_store_n(&job->cancel, 1, __ATOMIC_RELAXED);
}

/* The client closed its connection: a waiting job leaves the FIFO now; a
 * running one is cancelled and leaves when its worker returns. */
static void on_disconnect(uv_poll_t *p, int status, int events) {
  watcher_t *w = p->data;
  attnd_job_t *job = w->job;
  (void)status;
  (void)events;
  job->status = -1;
  unwatch(job);
  cancel(job);
  if (job->state == ATTND_JOB_QUEUED) {
    fifo_remove(w->s, job);
    finish(w->s, job, ATTND_JOB_ABANDONED);
  }
}

static void schedule_timer(attnd_sched_t *s);

static double deadline(const attnd_job_t *job) {
  return job->t_arrival + (double)job->timeout_ms;
}

/* Hands waiting jobs to idle workers, in arrival order. */
static void dispatch(attnd_sched_t *s) {
  uv_mutex_lock(&s->mu);
  for (int w = 0; w < s->n_workers && s->head; w++) {
    if (s->running[w])
      continue;
    attnd_job_t *job = s->head;
    s->head = job->next;
    if (s->head == NULL)
      s->tail = NULL;
    job->next = NULL;
    atomic_fetch_sub(&s->waiting, 1);
    if (job->status == -1 || deadline(job) <= attnd_now_ms()) {
      /* gone or expired while waiting: never computed */
      uv_mutex_unlock(&s->mu);
      finish(s, job,
             job->status == -1 ? ATTND_JOB_ABANDONED : ATTND_JOB_EXPIRED);
      uv_mutex_lock(&s->mu);
      w--;
      continue;
    }
    job->state = ATTND_JOB_RUNNING;
    s->running[w] = job;
    s->workers[w].job = job;
    atomic_fetch_add(&s->busy, 1);
  }
  uv_cond_broadcast(&s->cv);
  uv_mutex_unlock(&s->mu);
}

static void watch(attnd_sched_t *s, attnd_job_t *job, int fd) {
  if (fd < 0)
    return;
  watcher_t *w = malloc(sizeof *w);
  if (w == NULL)
    return;
  if (uv_poll_init(s->loop, &w->poll, fd) != 0) {
    free(w);
    return;
  }
  w->s = s;
  w->job = job;
  w->poll.data = w;
  job->poll = w;
  if (uv_poll_start(&w->poll, UV_DISCONNECT, on_disconnect) != 0)
    unwatch(job);
}

static void on_wake(uv_async_t *a) {
  attnd_sched_t *s = a->data;
  uv_mutex_lock(&s->mu);
  attnd_job_t *in = s->incoming, *fin = s->finished;
  s->incoming = s->finished = NULL;
  uv_mutex_unlock(&s->mu);

  /* Finished jobs, and free their workers. */
  while (fin) {
    attnd_job_t *job = fin;
    fin = fin->next;
    job->next = NULL;
    for (int w = 0; w < s->n_workers; w++)
      if (s->running[w] == job)
        s->running[w] = NULL;
    atomic_fetch_sub(&s->busy, 1);
    double avg = atomic_load(&s->avg_ms);
    atomic_store(&s->avg_ms, 0.8 * avg + 0.2 * (job->t_end - job->t_start));
    if (job->status == -1)
      finish(s, job, ATTND_JOB_ABANDONED);
    else if (job->result == ATTN_ECANCELED)
      finish(s, job, ATTND_JOB_EXPIRED);
    else
      finish(s, job, ATTND_JOB_DONE);
  }

  /* Submitted jobs, reversed back to arrival order, onto the FIFO. */
  attnd_job_t *rev = NULL;
  while (in) {
    attnd_job_t *n = in->next;
    in->next = rev;
    rev = in;
    in = n;
  }
  while (rev) {
    attnd_job_t *job = rev;
    rev = rev->next;
    job->next = NULL;
    job->state = ATTND_JOB_QUEUED;
    watch(s, job, job->conn_fd);
    if (s->tail)
      s->tail->next = job;
    else
      s->head = job;
    s->tail = job;
  }
  dispatch(s);
  schedule_timer(s);
}

/* Expires what is past its deadline: waiting jobs leave the FIFO at once;
 * running ones are cancelled and leave when their worker returns. */
static void on_timer(uv_timer_t *t) {
  attnd_sched_t *s = t->data;
  double now = attnd_now_ms();
  for (attnd_job_t *job = s->head, *next; job; job = next) {
    next = job->next;
    if (deadline(job) <= now || job->status == -1) {
      fifo_remove(s, job);
      finish(s, job,
             job->status == -1 ? ATTND_JOB_ABANDONED : ATTND_JOB_EXPIRED);
    }
  }
  for (int w = 0; w < s->n_workers; w++)
    if (s->running[w] && deadline(s->running[w]) <= now)
      cancel(s->running[w]);
  schedule_timer(s);
}

static void schedule_timer(attnd_sched_t *s) {
  double next = -1;
  for (attnd_job_t *job = s->head; job; job = job->next)
    if (next < 0 || deadline(job) < next)
      next = job->status == -1 ? 0 : deadline(job);
  for (int w = 0; w < s->n_workers; w++) {
    attnd_job_t *job = s->running[w];
    if (job && !__atomic_load_n(&job->cancel, __ATOMIC_RELAXED) &&
        (next < 0 || deadline(job) < next))
      next = deadline(job);
  }
  if (next < 0) {
    uv_timer_stop(&s->timer);
    return;
  }
  double wait = next - attnd_now_ms();
  uv_timer_start(&s->timer, on_timer, wait > 0 ? (uint64_t)wait + 1 : 0, 0);
}

/* ---- public ------------------------------------------------------------- */

attnd_sched_t *attnd_sched_new(uv_loop_t *loop, int workers, int depth,
                               attnd_sched_done_fn done, void *arg) {
  attnd_sched_t *s = calloc(1, sizeof *s);
  if (s == NULL)
    return NULL;
  s->loop = loop;
  s->done = done;
  s->arg = arg;
  s->n_workers = workers;
  s->depth = depth;
  s->workers = calloc((size_t)workers, sizeof *s->workers);
  s->running = calloc((size_t)workers, sizeof *s->running);
  if (!s->workers || !s->running || uv_mutex_init(&s->mu) ||
      uv_cond_init(&s->cv)) {
    free(s->workers);
    free(s->running);
    free(s);
    return NULL;
  }
  uv_async_init(loop, &s->wake, on_wake);
  s->wake.data = s;
  uv_timer_init(loop, &s->timer);
  s->timer.data = s;
  for (int w = 0; w < workers; w++) {
    s->workers[w] = (worker_t){.s = s, .index = w};
    uv_thread_create(&s->workers[w].thread, worker_main, &s->workers[w]);
  }
  return s;
}

int attnd_sched_submit(attnd_sched_t *s, attnd_job_t *job, int fd) {
  if (atomic_fetch_add(&s->inflight, 1) >= s->depth + s->n_workers) {
    atomic_fetch_sub(&s->inflight, 1);
    return -1;
  }
  atomic_fetch_add(&s->waiting, 1);
  job->conn_fd = fd;
  job->t_submit = attnd_now_ms();
  uv_mutex_lock(&s->mu);
  job->next = s->incoming;
  s->incoming = job;
  uv_mutex_unlock(&s->mu);
  uv_async_send(&s->wake);
  return 0;
}

int attnd_sched_waiting(const attnd_sched_t *s) {
  return atomic_load(&s->waiting);
}
int attnd_sched_busy(const attnd_sched_t *s) {
  return atomic_load(&s->busy);
}
int attnd_sched_inflight(const attnd_sched_t *s) {
  return atomic_load(&s->inflight);
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
