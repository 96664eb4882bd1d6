/* tests/check_scheduler.c: the scheduler (server/sched/scheduler.h) on its own,
 * on a real libuv loop, with fake jobs: FIFO order, admission and the
 * counts, deadlines while waiting and while running, clients that go away,
 * several workers, the outcomes of run's return codes, Retry-After, the
 * workers' scratch, the threads each job is given, and closing. No HTTP server
 * and no attention core.
 *
 * The test thread is the loop thread. It reads the counts only between
 * uv_run calls. Jobs that must stay in flight spin in `run` until the test
 * releases them or the scheduler raises their cancel flag, so the tests
 * order events by holding and releasing jobs, not by sleeping. Every wait is
 * bounded by GUARD_MS, so a broken scheduler fails a test instead of
 * hanging it. */
#include <check.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "alloc_fail.h"
#include "attn/error.h"
#include "codec/util.h"
#include "sched/scheduler.h"
#include "suite.h"

enum {
  MAX_JOBS = 400,
  GUARD_MS = 5000,   /* the longest any wait may take before failing */
  RUN_CAP_MS = 8000, /* a held run gives up after this, so nothing hangs */
};
/* A deadline no test reaches. */
#define FAR_MS 600000.0

/* ---- fake jobs ---------------------------------------------------------- */

/* One job as the scheduler sees it (an opaque pointer) and what happened to
 * it. The test thread fills the first group before submitting; `run` fills
 * the second on a worker; `done` fills the third on the loop thread. */
typedef struct fake {
  int id;
  int cancel;      /* the scheduler raises it, atomically */
  int hold;        /* run spins until the test clears it (atomic) */
  int ms;          /* then run takes this long */
  int ret;         /* what run returns when it was not cancelled */
  size_t grow;     /* run grows the worker's scratch to this many bytes */
  int key;         /* batchable with the jobs of the same key; 0: not */
  int tokens;      /* its tokens toward max_tokens (0: 1) */
  int max_threads; /* the most threads it can use (0: any) */
  double work;     /* its work in threads' worth (attnd_sched_job_t) */

  int runs;    /* times run was called (atomic) */
  int started; /* run has recorded the fields below (atomic, release) */
  int ended;   /* run has returned (atomic, release) */
  int worker;
  int threads; /* what run was given */
  uv_thread_t thread;
  int saw_cancel;
  int gave_up; /* RUN_CAP_MS passed while held */
  void *scratch;
  int batch;       /* jobs it ran with, itself included (1: alone) */
  int batch_first; /* the id of its batch's first job */
  double t_submit, t_start;

  int dones;
  int releases; /* passed to fake_release (a held job) */
  int resubmit; /* fake_release submits it again, to run */
  attnd_sched_outcome_t outcome;
  void *tag;
  void *arg;
  int on_loop_thread;
} fake_t;

static struct {
  uv_loop_t loop;
  uv_thread_t loop_thread;
  uv_timer_t guard;
  attnd_sched_t *s;
  fake_t jobs[MAX_JOBS];
  char tags[MAX_JOBS]; /* job i's tag is &tags[i] */

  uv_mutex_t mu; /* guards run_order and n_run */
  int run_order[MAX_JOBS], n_run;

  /* Loop thread. */
  int done_order[MAX_JOBS], n_done;
  int want;                /* uv_stop once n_done reaches it */
  int timed_out;           /* the guard fired */
  void (*then)(fake_t *f); /* called at the end of done, if set */

  int release_all; /* atomic: every held run may finish */
  int keep_held;   /* fake_withdraw keeps held jobs (its answer 0) */
  int withdraws;   /* fake_withdraw was asked */
} H;

static void sleep_ms(int ms) {
  struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

/* Job id (its id set by setup, once: a worker may be reading it). */
static fake_t *job(int id) {
  ck_assert_int_lt(id, MAX_JOBS);
  return &H.jobs[id];
}

static int started(const fake_t *f) {
  return __atomic_load_n(&f->started, __ATOMIC_ACQUIRE);
}

static int runs(const fake_t *f) {
  return __atomic_load_n(&f->runs, __ATOMIC_RELAXED);
}

static void release(fake_t *f) {
  __atomic_store_n(&f->hold, 0, __ATOMIC_RELAXED);
}

static int held(const fake_t *f) {
  return __atomic_load_n(&f->hold, __ATOMIC_RELAXED) &&
         !__atomic_load_n(&H.release_all, __ATOMIC_RELAXED);
}

/* The scheduler's run: records where and in which order it ran, grows the
 * scratch if asked, then spins in 1 ms steps until released and `ms` have
 * passed, returning ATTN_ECANCELED as soon as the cancel flag is up.
 * Worker thread. */
static int fake_spin(void *jp, int worker, int threads,
                     attnd_scratch_t *scratch) {
  fake_t *f = jp;
  __atomic_add_fetch(&f->runs, 1, __ATOMIC_RELAXED);
  f->threads = threads;
  f->batch = 1;
  f->batch_first = f->id;
  f->t_start = attnd_now_ms();
  f->worker = worker;
  f->thread = uv_thread_self();
  if (f->grow > scratch->cap) {
    free(scratch->data);
    scratch->data = aligned_alloc(64, f->grow);
    scratch->cap = scratch->data ? f->grow : 0;
  }
  f->scratch = scratch->data;
  uv_mutex_lock(&H.mu);
  if (H.n_run < MAX_JOBS)
    H.run_order[H.n_run] = f->id;
  H.n_run++;
  uv_mutex_unlock(&H.mu);
  __atomic_store_n(&f->started, 1, __ATOMIC_RELEASE);

  double t0 = attnd_now_ms();
  for (;;) {
    if (__atomic_load_n(&f->cancel, __ATOMIC_RELAXED)) {
      f->saw_cancel = 1;
      return ATTN_ECANCELED;
    }
    double elapsed = attnd_now_ms() - t0;
    if (!held(f) && elapsed >= f->ms)
      return f->ret;
    if (elapsed >= RUN_CAP_MS) {
      f->gave_up = 1;
      return f->ret;
    }
    sleep_ms(1);
  }
}

/* fake_spin, then `ended` raised. Worker thread. */
static int fake_run(void *jp, int worker, int threads,
                    attnd_scratch_t *scratch) {
  int r = fake_spin(jp, worker, threads, scratch);
  __atomic_store_n(&((fake_t *)jp)->ended, 1, __ATOMIC_RELEASE);
  return r;
}

/* The scheduler's run_batch: records each job as fake_run does, in the
 * batch's order, then runs as fake_run does for the batch's first job (its
 * hold, ms and cancel flag). Each job's result is its ret, or
 * ATTN_ECANCELED when its own flag is up by then. Worker thread. */
static void fake_run_batch(void *const *jobs, int n, int worker, int threads,
                           attnd_scratch_t *scratch, int *results) {
  fake_t *first = jobs[0];
  for (int i = 1; i < n; i++) {
    fake_t *f = jobs[i];
    __atomic_add_fetch(&f->runs, 1, __ATOMIC_RELAXED);
    f->threads = threads;
    f->worker = worker;
    f->thread = uv_thread_self();
    f->t_start = attnd_now_ms();
  }
  int r0 = fake_run(first, worker, threads, scratch); /* records the first */
  uv_mutex_lock(&H.mu); /* the others, after it in run_order */
  for (int i = 1; i < n; i++)
    if (H.n_run < MAX_JOBS)
      H.run_order[H.n_run++] = ((fake_t *)jobs[i])->id;
  uv_mutex_unlock(&H.mu);
  for (int i = 0; i < n; i++) {
    fake_t *f = jobs[i];
    f->batch = n;
    f->batch_first = first->id;
    int up = __atomic_load_n(&f->cancel, __ATOMIC_RELAXED);
    results[i] = i == 0 ? r0 : up ? ATTN_ECANCELED : f->ret;
    __atomic_store_n(&f->started, 1, __ATOMIC_RELEASE);
  }
}

static int fake_compatible(const void *a, const void *b) {
  return ((const fake_t *)a)->key == ((const fake_t *)b)->key;
}

/* The scheduler's done: records the outcome and the order. Loop thread. */
static void fake_done(void *jp, void *tag, attnd_sched_outcome_t outcome,
                      void *arg) {
  fake_t *f = jp;
  uv_thread_t self = uv_thread_self();
  f->dones++;
  f->outcome = outcome;
  f->tag = tag;
  f->arg = arg;
  f->on_loop_thread = uv_thread_equal(&self, &H.loop_thread);
  if (H.n_done < MAX_JOBS)
    H.done_order[H.n_done] = f->id;
  H.n_done++;
  if (H.then)
    H.then(f);
  if (H.n_done >= H.want)
    uv_stop(&H.loop);
}

/* Submits `f` with its tag, cancel flag, `deadline_ms` and `fd`; returns
 * what attnd_sched_submit returned. */
static int submit(fake_t *f, double deadline_ms, int fd) {
  attnd_sched_job_t j = {
      .job = f,
      .tag = &H.tags[f->id],
      .deadline_ms = deadline_ms,
      .cancel = &f->cancel,
      .fd = fd,
      .batchable = f->key != 0,
      .tokens = f->tokens ? f->tokens : 1,
      .max_threads = f->max_threads,
      .work = f->work,
  };
  f->t_submit = attnd_now_ms();
  return attnd_sched_submit(H.s, &j);
}

/* Submits `f` held, as `id` (attnd_sched_job_t.held). */
static int submit_held(fake_t *f, double deadline_ms, int fd, uint64_t id) {
  attnd_sched_job_t j = {.job = f,
                         .tag = &H.tags[f->id],
                         .deadline_ms = deadline_ms,
                         .cancel = &f->cancel,
                         .fd = fd,
                         .tokens = 1,
                         .held = 1,
                         .id = id};
  f->t_submit = attnd_now_ms();
  return attnd_sched_submit(H.s, &j);
}

/* The scheduler's release: counts, and submits the job again to run when
 * asked to (with a deadline far off). Loop thread. */
static void fake_release(void *jp, void *tag, void *arg) {
  fake_t *f = jp;
  uv_thread_t self = uv_thread_self();
  ck_assert(uv_thread_equal(&self, &H.loop_thread));
  ck_assert_ptr_eq(tag, &H.tags[f->id]);
  ck_assert_ptr_eq(arg, &H);
  f->releases++;
  if (f->resubmit)
    ck_assert_int_eq(submit(f, attnd_now_ms() + FAR_MS, -1), 0);
}

/* The scheduler's withdraw: lets a held job leave unless keep_held, under
 * the scheduler's lock. Loop thread. */
static int fake_withdraw(void *jp, void *tag, void *arg) {
  fake_t *f = jp;
  uv_thread_t self = uv_thread_self();
  ck_assert(uv_thread_equal(&self, &H.loop_thread));
  ck_assert_ptr_eq(tag, &H.tags[f->id]);
  ck_assert_ptr_eq(arg, &H);
  H.withdraws++;
  return !H.keep_held;
}

static double far(void) {
  return attnd_now_ms() + FAR_MS;
}

/* ---- driving the loop --------------------------------------------------- */

static void on_guard(uv_timer_t *t) {
  (void)t;
  H.timed_out = 1;
  uv_stop(&H.loop);
}

/* Runs the loop until `n` jobs in all have come back through done, or fails
 * after GUARD_MS. Also fails if more than `n` came back. */
static void wait_done(int n) {
  if (H.n_done < n) {
    H.want = n;
    H.timed_out = 0;
    uv_timer_start(&H.guard, on_guard, GUARD_MS, 0);
    while (H.n_done < n && !H.timed_out)
      uv_run(&H.loop, UV_RUN_DEFAULT);
    uv_timer_stop(&H.guard);
    H.want = INT_MAX;
  }
  ck_assert_msg(H.n_done == n, "%d jobs came back, expected %d", H.n_done, n);
}

/* Runs the loop without blocking, in 1 ms steps, until `cond` holds; fails
 * after GUARD_MS. For states that no done callback marks (a job started, a
 * count reached). */
#define PUMP_UNTIL(cond)                                                       \
  do {                                                                         \
    double until_ = attnd_now_ms() + GUARD_MS;                                 \
    while (!(cond)) {                                                          \
      ck_assert_msg(attnd_now_ms() < until_, "timed out waiting for %s",       \
                    #cond);                                                    \
      uv_run(&H.loop, UV_RUN_NOWAIT);                                          \
      sleep_ms(1);                                                             \
    }                                                                          \
  } while (0)

/* Runs the loop without blocking, in 1 ms steps, for about `ms`: for
 * what must not happen meanwhile. */
static void pump_ms(int ms) {
  for (int i = 0; i < ms; i++) {
    uv_run(&H.loop, UV_RUN_NOWAIT);
    sleep_ms(1);
  }
}

/* Submits job id, held, and waits until it runs. */
static fake_t *run_held(int id) {
  fake_t *f = job(id);
  f->hold = 1;
  ck_assert_int_eq(submit(f, far(), -1), 0);
  PUMP_UNTIL(started(f));
  return f;
}

static void start(int workers, int depth) {
  H.s = attnd_sched_new(&H.loop, workers, depth, fake_run, fake_done, &H);
  ck_assert_ptr_nonnull(H.s);
  ck_assert_int_eq(attnd_sched_inflight(H.s), 0);
  ck_assert_int_eq(attnd_sched_waiting(H.s), 0);
  ck_assert_int_eq(attnd_sched_busy(H.s), 0);
}

/* start, with batching: a window of window_ms, max_tokens. */
static void start_batching(int workers, int depth, double window_ms,
                           int64_t max_tokens) {
  start(workers, depth);
  attnd_sched_set_batching(
      H.s, &(attnd_sched_batching_t){.run_batch = fake_run_batch,
                                     .compatible = fake_compatible,
                                     .window_ms = window_ms,
                                     .max_tokens = max_tokens});
}

static void counts_are(int inflight, int waiting, int busy) {
  ck_assert_int_eq(attnd_sched_inflight(H.s), inflight);
  ck_assert_int_eq(attnd_sched_waiting(H.s), waiting);
  ck_assert_int_eq(attnd_sched_busy(H.s), busy);
}

/* `f` came back exactly once, with `outcome`, its own tag, the scheduler's
 * arg, on the loop thread, after run was called `ran` times. */
static void came_back(const fake_t *f, attnd_sched_outcome_t outcome, int ran) {
  ck_assert_msg(f->dones == 1, "job %d came back %d times", f->id, f->dones);
  ck_assert_msg(f->outcome == outcome, "job %d: outcome %d, expected %d", f->id,
                (int)f->outcome, (int)outcome);
  ck_assert_ptr_eq(f->tag, &H.tags[f->id]);
  ck_assert_ptr_eq(f->arg, &H);
  ck_assert(f->on_loop_thread);
  ck_assert_msg(runs(f) == ran, "job %d ran %d times, expected %d", f->id,
                runs(f), ran);
  ck_assert(!f->gave_up);
  if (ran) {
    uv_thread_t self = uv_thread_self();
    ck_assert(!uv_thread_equal(&f->thread, &self));
  }
}

/* Waits until jobs 0 to n-1 have come back, each done after one run, with
 * nothing left in flight. */
static void all_done(int n) {
  wait_done(n);
  counts_are(0, 0, 0);
  for (int i = 0; i < n; i++)
    came_back(job(i), ATTND_SCHED_DONE, 1);
}

/* ---- fixture ------------------------------------------------------------ */

/* Checked: runs in the forked child, so the workers are the child's. */
static void setup(void) {
  memset(&H, 0, sizeof H);
  for (int i = 0; i < MAX_JOBS; i++)
    H.jobs[i].id = i;
  H.want = INT_MAX;
  H.loop_thread = uv_thread_self();
  ck_assert_int_eq(uv_loop_init(&H.loop), 0);
  ck_assert_int_eq(uv_mutex_init(&H.mu), 0);
  ck_assert_int_eq(uv_timer_init(&H.loop, &H.guard), 0);
}

/* Lets every held job finish, waits for all to come back, closes the
 * scheduler, runs the close callbacks and frees it: the loop must then
 * close cleanly (no handle left behind) and ASan finds no leak. */
static void teardown(void) {
  if (H.s) {
    __atomic_store_n(&H.release_all, 1, __ATOMIC_RELAXED);
    PUMP_UNTIL(attnd_sched_inflight(H.s) == 0);
    attnd_sched_close(H.s);
  }
  uv_close((uv_handle_t *)&H.guard, NULL);
  int alive = 1;
  for (int i = 0; i < 100 && alive; i++)
    alive = uv_run(&H.loop, UV_RUN_NOWAIT);
  ck_assert_msg(!alive, "handles still active after attnd_sched_close");
  if (H.s)
    attnd_sched_free(H.s);
  H.s = NULL;
  ck_assert_int_eq(uv_loop_close(&H.loop), 0);
  uv_mutex_destroy(&H.mu);
}

/* ---- order and completion ----------------------------------------------- */

/* One worker: jobs run and come back in the order submitted, both those
 * submitted before the loop first ran and those appended to a FIFO that
 * already held jobs; each comes back DONE exactly once. */
START_TEST(test_fifo_one_worker) {
  enum { N = 32 };
  start(1, N);
  job(0)->hold = 1;
  for (int i = 0; i < N / 2; i++)
    ck_assert_int_eq(submit(job(i), far(), -1), 0);
  PUMP_UNTIL(started(job(0)));
  counts_are(N / 2, N / 2 - 1, 1);
  for (int i = N / 2; i < N; i++)
    ck_assert_int_eq(submit(job(i), far(), -1), 0);
  counts_are(N, N - 1, 1);
  release(job(0));
  wait_done(N);
  counts_are(0, 0, 0);
  ck_assert_int_eq(H.n_run, N);
  for (int i = 0; i < N; i++) {
    ck_assert_int_eq(H.run_order[i], i);
    ck_assert_int_eq(H.done_order[i], i);
    came_back(job(i), ATTND_SCHED_DONE, 1);
    ck_assert_int_eq(job(i)->worker, 0);
    ck_assert_int_eq(job(i)->cancel, 0);
  }
}
END_TEST

/* 1 to 4 workers, 64 short jobs: every job runs once, on a worker index in
 * range, and comes back DONE exactly once. */
START_TEST(test_all_done_workers) {
  enum { N = 64 };
  int workers = _i + 1;
  start(workers, N);
  for (int i = 0; i < N; i++) {
    job(i)->ms = i % 3; /* 0 to 2 ms, so workers overlap */
    ck_assert_int_eq(submit(job(i), far(), -1), 0);
  }
  wait_done(N);
  counts_are(0, 0, 0);
  int seen[N] = {0};
  for (int i = 0; i < N; i++) {
    came_back(job(i), ATTND_SCHED_DONE, 1);
    ck_assert_int_ge(job(i)->worker, 0);
    ck_assert_int_lt(job(i)->worker, workers);
    seen[H.done_order[i]]++;
  }
  for (int i = 0; i < N; i++)
    ck_assert_int_eq(seen[i], 1);
}
END_TEST

enum { SUBMITTERS = 4, PER_SUBMITTER = 32 };
static int submit_rc[SUBMITTERS * PER_SUBMITTER];

static void submitter(void *arg) {
  int t = (int)(intptr_t)arg;
  for (int k = 0; k < PER_SUBMITTER; k++) {
    int id = t * PER_SUBMITTER + k;
    submit_rc[id] = submit(&H.jobs[id], far(), -1);
  }
}

/* Submission from other threads, four at once, while the loop runs: every
 * job is admitted and comes back DONE exactly once. */
START_TEST(test_submit_from_threads) {
  enum { N = SUBMITTERS * PER_SUBMITTER };
  start(2, N);
  for (int i = 0; i < N; i++)
    job(i);
  uv_thread_t th[SUBMITTERS];
  for (int t = 0; t < SUBMITTERS; t++)
    ck_assert_int_eq(uv_thread_create(&th[t], submitter, (void *)(intptr_t)t),
                     0);
  wait_done(N); /* the loop runs while they submit */
  for (int t = 0; t < SUBMITTERS; t++)
    ck_assert_int_eq(uv_thread_join(&th[t]), 0);
  for (int i = 0; i < N; i++)
    ck_assert_int_eq(submit_rc[i], 0);
  counts_are(0, 0, 0);
  for (int i = 0; i < N; i++)
    came_back(job(i), ATTND_SCHED_DONE, 1);
}
END_TEST

enum { CHAIN = 8 };
static int chain_rc[CHAIN];

static void submit_next(fake_t *f) {
  if (f->id + 1 < CHAIN)
    chain_rc[f->id + 1] = submit(&H.jobs[f->id + 1], far(), -1);
}

/* Submission from inside done, on the loop thread: each job's done submits
 * the next, and all come back in order. */
START_TEST(test_submit_from_done) {
  start(1, 1);
  for (int i = 0; i < CHAIN; i++) {
    job(i);
    chain_rc[i] = 99;
  }
  H.then = submit_next;
  ck_assert_int_eq(submit(job(0), far(), -1), 0);
  wait_done(CHAIN);
  counts_are(0, 0, 0);
  for (int i = 0; i < CHAIN; i++) {
    if (i > 0)
      ck_assert_int_eq(chain_rc[i], 0);
    ck_assert_int_eq(H.done_order[i], i);
    came_back(job(i), ATTND_SCHED_DONE, 1);
  }
}
END_TEST

/* ---- admission and counts ----------------------------------------------- */

/* 2 workers, depth 3: five held jobs fill it (2 running, 3 waiting); the
 * sixth is refused at once and never comes back. When one finishes, the
 * next waiting job starts and one place frees: a submit succeeds again,
 * and the one after is refused. */
START_TEST(test_admission) {
  start(2, 3);
  for (int i = 0; i < 5; i++) {
    job(i)->hold = 1;
    ck_assert_int_eq(submit(job(i), far(), -1), 0);
    ck_assert_int_eq(attnd_sched_inflight(H.s), i + 1);
  }
  ck_assert_int_eq(submit(job(5), far(), -1), -1);
  ck_assert_int_eq(attnd_sched_inflight(H.s), 5);

  PUMP_UNTIL(started(job(0)) && started(job(1)));
  counts_are(5, 3, 2);
  ck_assert_int_eq(runs(job(2)) + runs(job(3)) + runs(job(4)), 0);
  ck_assert_int_eq(submit(job(5), far(), -1), -1); /* still full */
  counts_are(5, 3, 2);

  release(job(0));
  wait_done(1);
  came_back(job(0), ATTND_SCHED_DONE, 1);
  PUMP_UNTIL(started(job(2)));
  counts_are(4, 2, 2);
  ck_assert_int_eq(submit(job(5), far(), -1), 0);
  counts_are(5, 3, 2);
  ck_assert_int_eq(submit(job(6), far(), -1), -1);
  ck_assert_int_eq(attnd_sched_inflight(H.s), 5);

  for (int i = 1; i < 5; i++)
    release(job(i));
  all_done(6);
  ck_assert_int_eq(job(6)->dones, 0);
  ck_assert_int_eq(runs(job(6)), 0);
}
END_TEST

/* A node that cannot be allocated refuses the job as ATTND_SCHED_NOMEM,
 * not as a full queue (which its caller answers 429 overloaded, telling
 * the client to retry a server that is not loaded), and counts nothing:
 * the next job is admitted and runs. The node's calloc is the first
 * allocation of a submit (counted: exactly one, the failed one); the
 * workers are idle meanwhile. Bug: -1, the full queue's answer. */
START_TEST(test_submit_no_memory) {
  start(1, 2);
  fake_t *f = job(0);
  double deadline = far();
  alloc_fail_arm(0, 0); /* no ck_assert until disarmed: Check allocates */
  int got = submit(f, deadline, -1);
  int injected = alloc_fail_injected();
  long allocs = alloc_fail_count();
  alloc_fail_arm(-1, 0);
  ck_assert_int_eq(injected, 1);
  ck_assert_int_eq(allocs, 1);
  ck_assert_int_eq(got, ATTND_SCHED_NOMEM);
  counts_are(0, 0, 0);
  ck_assert_int_eq(submit(job(1), far(), -1), 0);
  wait_done(1);
  came_back(job(1), ATTND_SCHED_DONE, 1);
  ck_assert_int_eq(f->dones, 0);
  ck_assert_int_eq(runs(f), 0);
}
END_TEST

/* Two workers run two held jobs at the same time, on different threads
 * and worker indices; a third waits until one frees, then runs on the
 * worker that freed. */
START_TEST(test_two_workers_run_together) {
  start(2, 4);
  for (int i = 0; i < 3; i++) {
    job(i)->hold = 1;
    ck_assert_int_eq(submit(job(i), far(), -1), 0);
  }
  PUMP_UNTIL(started(job(0)) && started(job(1)));
  counts_are(3, 1, 2);
  ck_assert_int_eq(runs(job(2)), 0);
  ck_assert_int_ne(job(0)->worker, job(1)->worker);
  ck_assert_int_eq(job(0)->worker + job(1)->worker, 1); /* {0, 1} */
  ck_assert(!uv_thread_equal(&job(0)->thread, &job(1)->thread));

  release(job(0));
  wait_done(1);
  PUMP_UNTIL(started(job(2)));
  counts_are(2, 0, 2);
  ck_assert_int_eq(job(2)->worker, job(0)->worker);
  ck_assert(uv_thread_equal(&job(2)->thread, &job(0)->thread));

  release(job(1));
  release(job(2));
  all_done(3);
}
END_TEST

/* A run that fails with any code but ATTN_ECANCELED still comes back DONE
 * (the job keeps its own account of the error). */
static const int fail_codes[] = {ATTN_EINVAL, ATTN_ESHAPE, ATTN_ENOSPC,
                                 ATTN_ENOTSUP, -1000};

START_TEST(test_run_error_is_done) {
  start(1, 2);
  job(0)->ret = fail_codes[_i];
  ck_assert_int_eq(submit(job(0), far(), -1), 0);
  wait_done(1);
  came_back(job(0), ATTND_SCHED_DONE, 1);
  ck_assert_int_eq(job(0)->cancel, 0);
  counts_are(0, 0, 0);
}
END_TEST

/* ---- deadlines ---------------------------------------------------------- */

/* Behind a held job: one submitted already past its deadline, and one whose
 * deadline passes while it waits, both come back EXPIRED without running,
 * while the held job still runs; then the held job comes back DONE. */
START_TEST(test_expired_while_waiting) {
  start(1, 4);
  run_held(0);

  ck_assert_int_eq(submit(job(1), attnd_now_ms() - 1, -1), 0);
  wait_done(1);
  came_back(job(1), ATTND_SCHED_EXPIRED, 0);
  counts_are(1, 0, 1);

  ck_assert_int_eq(submit(job(2), attnd_now_ms() + 50, -1), 0);
  ck_assert_int_eq(submit(job(3), far(), -1), 0);
  wait_done(2);
  came_back(job(2), ATTND_SCHED_EXPIRED, 0);
  counts_are(2, 1, 1);
  ck_assert_int_eq(job(0)->dones, 0);
  ck_assert_int_eq(job(0)->cancel, 0);

  release(job(0));
  wait_done(4);
  came_back(job(0), ATTND_SCHED_DONE, 1);
  came_back(job(3), ATTND_SCHED_DONE, 1);
  ck_assert_int_eq(H.done_order[2], 0);
  ck_assert_int_eq(H.done_order[3], 3);
  counts_are(0, 0, 0);
}
END_TEST

/* With an idle worker, a job already past its deadline is still never run;
 * the worker then runs the next job. */
START_TEST(test_expired_on_arrival_idle_worker) {
  start(1, 4);
  ck_assert_int_eq(submit(job(0), attnd_now_ms() - 1000, -1), 0);
  wait_done(1);
  came_back(job(0), ATTND_SCHED_EXPIRED, 0);
  counts_are(0, 0, 0);
  ck_assert_int_eq(submit(job(1), far(), -1), 0);
  wait_done(2);
  came_back(job(1), ATTND_SCHED_DONE, 1);
}
END_TEST

/* Two held jobs run; the deadline of one passes: its cancel flag is raised,
 * its run returns ATTN_ECANCELED and it comes back EXPIRED. The other's
 * flag stays down and it comes back DONE when released. */
START_TEST(test_expired_while_running) {
  start(2, 2);
  job(0)->hold = 1;
  job(1)->hold = 1;
  /* long enough that both surely start first, even on a loaded machine */
  ck_assert_int_eq(submit(job(0), attnd_now_ms() + 500, -1), 0);
  ck_assert_int_eq(submit(job(1), far(), -1), 0);
  PUMP_UNTIL(started(job(0)) && started(job(1)));
  wait_done(1);
  came_back(job(0), ATTND_SCHED_EXPIRED, 1);
  ck_assert_int_eq(job(0)->cancel, 1);
  ck_assert_int_eq(job(0)->saw_cancel, 1);
  counts_are(1, 0, 1);
  ck_assert_int_eq(job(1)->cancel, 0);

  release(job(1));
  wait_done(2);
  came_back(job(1), ATTND_SCHED_DONE, 1);
  ck_assert_int_eq(job(1)->cancel, 0);
  ck_assert_int_eq(job(1)->saw_cancel, 0);
}
END_TEST

/* A job whose deadline passes while it runs, and whose run returns before
 * the loop thread runs again (on a loaded machine, the timer that would
 * cancel it waits for a CPU), comes back EXPIRED all the same: its result
 * came after its deadline. Bug: DONE, a result past timeout_ms answered
 * 200 (check_soak, under load: timeout_ms 5, a 200 tens of ms on). */
START_TEST(test_expired_unseen_while_running) {
  start(1, 1);
  fake_t *a = job(0);
  a->hold = 1;
  double deadline = attnd_now_ms() + 500; /* after it starts, surely */
  ck_assert_int_eq(submit(a, deadline, -1), 0);
  PUMP_UNTIL(started(a));
  /* from here the loop does not run until the run has returned */
  while (attnd_now_ms() <= deadline)
    sleep_ms(1);
  release(a);
  for (double until = attnd_now_ms() + GUARD_MS;
       !__atomic_load_n(&a->ended, __ATOMIC_ACQUIRE);) {
    ck_assert_msg(attnd_now_ms() < until, "the released run never returned");
    sleep_ms(1);
  }
  ck_assert_int_eq(a->saw_cancel, 0);
  wait_done(1);
  came_back(a, ATTND_SCHED_EXPIRED, 1);
  counts_are(0, 0, 0);
}
END_TEST

/* ---- clients that go away ----------------------------------------------- */

/* How the test's "client" leaves: closes its end, or shuts it down. */
static void hang_up(int fd, int how) {
  if (how == 0)
    ck_assert_int_eq(close(fd), 0);
  else
    ck_assert_int_eq(shutdown(fd, SHUT_RDWR), 0);
}

/* A job waiting behind a held one, watching a socket whose peer hangs up,
 * comes back ABANDONED without running; the held job is untouched. */
START_TEST(test_gone_while_waiting) {
  int sv[2];
  ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  start(1, 4);
  run_held(0);
  ck_assert_int_eq(submit(job(1), far(), sv[0]), 0);
  ck_assert_int_eq(submit(job(2), far(), -1), 0);
  PUMP_UNTIL(attnd_sched_waiting(H.s) == 2);
  ck_assert_int_eq(H.n_done, 0);

  hang_up(sv[1], _i);
  wait_done(1);
  came_back(job(1), ATTND_SCHED_ABANDONED, 0);
  counts_are(2, 1, 1);
  ck_assert_int_eq(job(0)->cancel, 0);

  release(job(0));
  wait_done(3);
  came_back(job(0), ATTND_SCHED_DONE, 1);
  came_back(job(2), ATTND_SCHED_DONE, 1);
  counts_are(0, 0, 0);
  close(sv[0]);
  if (_i != 0)
    close(sv[1]);
}
END_TEST

/* A running job whose client hangs up gets its cancel flag raised and
 * comes back ABANDONED. */
START_TEST(test_gone_while_running) {
  int sv[2];
  ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  start(1, 4);
  job(0)->hold = 1;
  ck_assert_int_eq(submit(job(0), far(), sv[0]), 0);
  PUMP_UNTIL(started(job(0)));
  counts_are(1, 0, 1);

  hang_up(sv[1], _i);
  wait_done(1);
  came_back(job(0), ATTND_SCHED_ABANDONED, 1);
  ck_assert_int_eq(job(0)->cancel, 1);
  ck_assert_int_eq(job(0)->saw_cancel, 1);
  counts_are(0, 0, 0);

  /* The worker is free again. */
  ck_assert_int_eq(submit(job(1), far(), -1), 0);
  wait_done(2);
  came_back(job(1), ATTND_SCHED_DONE, 1);
  close(sv[0]);
  if (_i != 0)
    close(sv[1]);
}
END_TEST

/* A client that stays connected, and even sends more bytes, is not gone:
 * its job waits, runs and comes back DONE, its flag down. */
START_TEST(test_connected_client_is_not_gone) {
  int sv[2];
  ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  start(1, 4);
  run_held(0);
  job(1)->hold = 1;
  ck_assert_int_eq(submit(job(1), far(), sv[0]), 0);
  ck_assert_int_eq(write(sv[1], "more", 4), 4);
  pump_ms(20);
  ck_assert_int_eq(H.n_done, 0);
  release(job(0));
  PUMP_UNTIL(started(job(1)));
  ck_assert_int_eq(write(sv[1], "more", 4), 4);
  pump_ms(20);
  ck_assert_int_eq(job(1)->cancel, 0);
  release(job(1));
  wait_done(2);
  came_back(job(0), ATTND_SCHED_DONE, 1);
  came_back(job(1), ATTND_SCHED_DONE, 1);
  close(sv[0]);
  close(sv[1]);
}
END_TEST

/* ---- held jobs ---------------------------------------------------------- */

/* start with one worker, a queue of 4 and the fake release and withdraw. */
static void start_held(void) {
  start(1, 4);
  attnd_sched_set_release(H.s, fake_release, fake_withdraw);
}

/* A held job waits, counted in flight but not as waiting for a worker, and
 * never runs; released (by id; an unknown id does nothing), it goes to
 * release, not done, and, submitted again from there, runs. A release that
 * comes before the loop has seen the job counts too. */
START_TEST(test_held_released) {
  start_held();
  job(0)->resubmit = 1;
  ck_assert_int_eq(submit_held(job(0), far(), -1, 7), 0);
  pump_ms(20);
  counts_are(1, 0, 0);
  ck_assert_int_eq(runs(job(0)) + job(0)->dones + job(0)->releases, 0);
  attnd_sched_release(H.s, 8);
  pump_ms(20);
  ck_assert_int_eq(job(0)->releases, 0);
  attnd_sched_release(H.s, 7);
  wait_done(1);
  ck_assert_int_eq(job(0)->releases, 1);
  came_back(job(0), ATTND_SCHED_DONE, 1);
  counts_are(0, 0, 0);

  /* released before the loop has run since its submit */
  job(1)->resubmit = 1;
  ck_assert_int_eq(submit_held(job(1), far(), -1, 9), 0);
  attnd_sched_release(H.s, 9);
  wait_done(2);
  ck_assert_int_eq(job(1)->releases, 1);
  came_back(job(1), ATTND_SCHED_DONE, 1);
}
END_TEST

/* A held job whose deadline passes comes back EXPIRED without running or
 * being released, at its deadline, not when a worker frees: the only worker
 * is busy throughout. Its release after that does nothing. */
START_TEST(test_held_expires) {
  start_held();
  run_held(0);
  ck_assert_int_eq(submit_held(job(1), attnd_now_ms() + 50, -1, 1), 0);
  wait_done(1);
  came_back(job(1), ATTND_SCHED_EXPIRED, 0);
  ck_assert_int_eq(job(1)->releases, 0);
  ck_assert_int_eq(job(0)->dones, 0); /* still running */
  counts_are(1, 0, 1);
  attnd_sched_release(H.s, 1);
  pump_ms(20);
  ck_assert_int_eq(job(1)->releases + job(1)->dones, 1);
  release(job(0));
  wait_done(2);
  came_back(job(0), ATTND_SCHED_DONE, 1);
}
END_TEST

/* A held job whose deadline passes, or whose client hangs up, when
 * withdraw keeps it (its release is on its way) neither comes back nor is
 * asked again: it goes to release when that comes, never to done. */
START_TEST(test_held_kept) {
  int sv[2];
  ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  start_held();
  H.keep_held = 1;
  job(0)->resubmit = 1;
  ck_assert_int_eq(submit_held(job(0), attnd_now_ms() + 20, -1, 5), 0);
  ck_assert_int_eq(submit_held(job(1), far(), sv[0], 6), 0);
  hang_up(sv[1], 0);
  PUMP_UNTIL(H.withdraws == 2);
  pump_ms(50);
  ck_assert_int_eq(H.withdraws, 2);
  ck_assert_int_eq(H.n_done + job(0)->releases + job(1)->releases, 0);
  counts_are(2, 0, 0);
  attnd_sched_release(H.s, 5);
  attnd_sched_release(H.s, 6);
  wait_done(1); /* job 0, run after its release */
  came_back(job(0), ATTND_SCHED_DONE, 1);
  ck_assert_int_eq(job(1)->releases, 1);
  ck_assert_int_eq(job(1)->dones, 0);
  counts_are(0, 0, 0);
  close(sv[0]);
}
END_TEST

/* A held job whose client hangs up comes back ABANDONED, never run. */
START_TEST(test_held_gone) {
  int sv[2];
  ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  start_held();
  ck_assert_int_eq(submit_held(job(0), far(), sv[0], 3), 0);
  pump_ms(20);
  ck_assert_int_eq(H.n_done, 0);
  hang_up(sv[1], 0);
  wait_done(1);
  came_back(job(0), ATTND_SCHED_ABANDONED, 0);
  ck_assert_int_eq(job(0)->releases, 0);
  counts_are(0, 0, 0);
  close(sv[0]);
}
END_TEST

/* ---- Retry-After, scratch, close ---------------------------------------- */

/* Retry-After is between 1 and 60 seconds: fresh, with the queue full, and
 * after jobs of a few milliseconds have set the average. */
START_TEST(test_retry_after_range) {
  start(2, 8);
  int r = attnd_sched_retry_after_s(H.s);
  ck_assert_int_ge(r, 1);
  ck_assert_int_le(r, 60);
  for (int i = 0; i < 10; i++) {
    job(i)->ms = 5;
    job(i)->hold = i < 2;
    ck_assert_int_eq(submit(job(i), far(), -1), 0);
  }
  ck_assert_int_eq(submit(job(10), far(), -1), -1);
  PUMP_UNTIL(started(job(0)) && started(job(1)));
  r = attnd_sched_retry_after_s(H.s);
  ck_assert_int_ge(r, 1);
  ck_assert_int_le(r, 60);
  release(job(0));
  release(job(1));
  wait_done(10);
  r = attnd_sched_retry_after_s(H.s);
  ck_assert_int_ge(r, 1);
  ck_assert_int_le(r, 60);
}
END_TEST

/* What Retry-After must say, in [*lo, *hi], for `waiting` jobs behind
 * `workers` busy ones when the moving average of run time lies in
 * [avg_lo, avg_hi] ms: (waiting + 1) runs over the workers, in whole
 * seconds plus one, at most 60 (scheduler.c, attnd_sched_retry_after_s). */
static void retry_bounds(double avg_lo, double avg_hi, int waiting, int workers,
                         int *lo, int *hi) {
  *lo = (int)(avg_lo * (waiting + 1) / workers / 1000.0) + 1;
  *hi = (int)(avg_hi * (waiting + 1) / workers / 1000.0) + 1;
  *lo = *lo > 60 ? 60 : *lo;
  *hi = *hi > 60 ? 60 : *hi;
}

/* Retry-After follows the moving average of run time (0.8 of the old, 0.2
 * of each run), times the jobs waiting plus one, over the workers, and
 * stops at 60 s. One run of 1 s (at least; at most what the test saw)
 * takes the average from 0 to 200 ms or a little more: with 10 waiting that
 * is 3 s, and with 349 waiting 71 s, capped. Fails if the guess ignores the
 * average, the queue or the cap, or weighs a run as the whole average. */
START_TEST(test_retry_after_follows_average) {
  start(1, 360);
  ck_assert_int_eq(attnd_sched_retry_after_s(H.s), 1); /* no run yet */
  job(0)->ms = 1000;
  double t0 = attnd_now_ms();
  ck_assert_int_eq(submit(job(0), far(), -1), 0);
  wait_done(1);
  double took = attnd_now_ms() - t0; /* at least the run's own time */
  job(1)->hold = 1;
  ck_assert_int_eq(submit(job(1), far(), -1), 0);
  PUMP_UNTIL(started(job(1)));
  int id = 2, lo, hi;
  for (; id < 12; id++)
    ck_assert_int_eq(submit(job(id), far(), -1), 0);
  counts_are(11, 10, 1);
  retry_bounds(0.2 * 1000, 0.2 * took, 10, 1, &lo, &hi);
  int r = attnd_sched_retry_after_s(H.s);
  ck_assert_msg(r >= lo && r <= hi,
                "Retry-After %d s with 10 waiting after a run of %.0f ms or "
                "less; expected %d..%d",
                r, took, lo, hi);
  for (; id < 351; id++)
    ck_assert_int_eq(submit(job(id), far(), -1), 0);
  counts_are(350, 349, 1);
  retry_bounds(0.2 * 1000, 0.2 * took, 349, 1, &lo, &hi);
  ck_assert_int_eq(lo, 60); /* the test's own arithmetic: over the cap */
  ck_assert_int_eq(attnd_sched_retry_after_s(H.s), 60);
  release(job(1));
  wait_done(351);
}
END_TEST

/* A worker's scratch outlives the job that grew it: the next job on that
 * worker sees the same buffer. The scheduler frees it at close (ASan). */
START_TEST(test_scratch_kept) {
  start(1, 4);
  job(0)->grow = 4096;
  ck_assert_int_eq(submit(job(0), far(), -1), 0);
  ck_assert_int_eq(submit(job(1), far(), -1), 0);
  wait_done(2);
  came_back(job(0), ATTND_SCHED_DONE, 1);
  came_back(job(1), ATTND_SCHED_DONE, 1);
  ck_assert_ptr_nonnull(job(0)->scratch);
  ck_assert_ptr_eq(job(1)->scratch, job(0)->scratch);
  /* Forget it, so that LeakSanitizer would see it if close did not free
   * it. */
  job(0)->scratch = job(1)->scratch = NULL;
}
END_TEST

/* A scheduler that never ran a job closes: after the close callbacks the
 * loop has nothing left alive, and it frees cleanly. */
START_TEST(test_close_idle) {
  start(3, 4);
  attnd_sched_close(H.s);
  int alive = 1;
  for (int i = 0; i < 100 && alive; i++)
    alive = uv_run(&H.loop, UV_RUN_NOWAIT);
  /* the guard timer is inactive, so nothing keeps the loop alive */
  ck_assert_int_eq(alive, 0);
  attnd_sched_free(H.s);
  H.s = NULL;
}
END_TEST

/* ---- batching ----------------------------------------------------------- */

/* Behind a held job: A1 A2 B1 A3 N1 A4 A5 (A and B batchable, each with
 * its own kind, N not). The worker then takes A1 and every A behind it in
 * one batch, in arrival order; then B1 alone; then N1. */
START_TEST(test_batch_gathers) {
  start_batching(1, 16, 1000, 256);
  run_held(0);
  static const int keys[] = {0, 1, 1, 2, 1, 0, 1, 1};
  for (int i = 1; i < 8; i++) {
    job(i)->key = keys[i];
    ck_assert_int_eq(submit(job(i), far(), -1), 0);
  }
  PUMP_UNTIL(attnd_sched_waiting(H.s) == 7);
  release(job(0));
  wait_done(8);
  counts_are(0, 0, 0);
  static const int order[] = {0, 1, 2, 4, 6, 7, 3, 5};
  for (int i = 0; i < 8; i++)
    ck_assert_int_eq(H.run_order[i], order[i]);
  for (int i = 0; i < 8; i++) {
    came_back(job(i), ATTND_SCHED_DONE, 1);
    ck_assert_int_eq(job(i)->batch, keys[i] == 1 ? 5 : 1);
    ck_assert_int_eq(job(i)->batch_first, keys[i] == 1 ? 1 : i);
  }
}
END_TEST

/* Batches hold at most max_tokens: jobs of 3 tokens, 7 at most, go 2 by
 * 2; and at most ATTND_SCHED_MAX_BATCH jobs. */
START_TEST(test_batch_max_tokens) {
  int many = _i == 1;
  int n = many ? ATTND_SCHED_MAX_BATCH + 10 : 5;
  ck_assert_int_lt(n, MAX_JOBS);
  start_batching(1, MAX_JOBS, 1000, many ? 100000 : 7);
  run_held(0);
  for (int i = 1; i <= n; i++) {
    job(i)->key = 1;
    job(i)->tokens = many ? 1 : 3;
    ck_assert_int_eq(submit(job(i), far(), -1), 0);
  }
  PUMP_UNTIL(attnd_sched_waiting(H.s) == n);
  release(job(0));
  wait_done(n + 1);
  for (int i = 1; i <= n; i++) {
    came_back(job(i), ATTND_SCHED_DONE, 1);
    int want = many ? (i <= ATTND_SCHED_MAX_BATCH ? ATTND_SCHED_MAX_BATCH : 10)
                    : (i <= 4 ? 2 : 1);
    ck_assert_msg(job(i)->batch == want, "job %d ran in a batch of %d, not %d",
                  i, job(i)->batch, want);
  }
}
END_TEST

/* Submits n jobs of key 1 from id `first` on, one every `gap_ms`, running
 * the loop meanwhile; their deadlines `deadline` (0: far). */
static void stream(int first, int n, int gap_ms, double deadline) {
  for (int i = 0; i < n; i++) {
    job(first + i)->key = 1;
    ck_assert_int_eq(
        submit(job(first + i), deadline > 0 && i == 0 ? deadline : far(), -1),
        0);
    double t0 = attnd_now_ms();
    while (attnd_now_ms() < t0 + gap_ms)
      uv_run(&H.loop, UV_RUN_NOWAIT), sleep_ms(1);
  }
}

/* Two workers, one held by a job that is not batchable. A stream of A, one
 * every 2 ms: the first runs at once on the idle worker (no pace known
 * yet); the rest wait for each other while they keep coming, and go as
 * one or two batches once the stream has paused (twice its gap). */
START_TEST(test_batch_waits_for_a_stream) {
  start_batching(2, 16, 10000, 256);
  run_held(0);
  stream(1, 6, 2, 0);
  wait_done(6); /* 1 to 6; 0 is held */
  ck_assert_int_eq(job(1)->batch, 1);
  int batches = 0, most = 0;
  for (int i = 2; i <= 6; i++) {
    came_back(job(i), ATTND_SCHED_DONE, 1);
    batches += job(i)->batch_first == i;
    most = job(i)->batch > most ? job(i)->batch : most;
  }
  ck_assert_msg(batches <= 2 && most >= 3,
                "5 jobs in a stream ran as %d batches, the largest of %d",
                batches, most);
  /* the last batch went once the stream had paused, not before */
  ck_assert_msg(job(6)->t_start - job(6)->t_submit >= 2,
                "the last of the stream ran %.1f ms after it came",
                job(6)->t_start - job(6)->t_submit);
  release(job(0));
  wait_done(7);
}
END_TEST

/* Runs n batches of two compatible jobs (key 1) that take ms together,
 * on a scheduler with one worker free: each pair queued behind a held
 * blocker, with a job that is not batchable behind it so that it does not
 * wait for more. Job ids from *id on; *done counts the jobs back. */
static void run_pairs(int n, int ms, int *id, int *done) {
  for (int i = 0; i < n; i++) {
    fake_t *blocker = job((*id)++), *a = job((*id)++), *b = job((*id)++);
    blocker->hold = 1;
    ck_assert_int_eq(submit(blocker, far(), -1), 0);
    PUMP_UNTIL(started(blocker));
    a->key = b->key = 1;
    a->ms = ms; /* the batch's time */
    ck_assert_int_eq(submit(a, far(), -1), 0);
    ck_assert_int_eq(submit(b, far(), -1), 0);
    ck_assert_int_eq(submit(job((*id)++), far(), -1), 0); /* not batchable */
    PUMP_UNTIL(attnd_sched_waiting(H.s) == 3);
    release(blocker);
    wait_done(*done += 4);
    ck_assert_int_eq(a->batch, 2);
  }
}

/* Waiting pays only when batches have been seen to save time: two
 * workers, one held. First the other runs 16 steps alone and 16 batches of
 * two (a blocker, then two compatible steps queued behind it), a token
 * costing 20 ms alone and 10 in a batch (_i = 1), or 4 alone and 8 in a
 * batch (_i = 0: not 4 both ways, for a run's fixed overhead, a wake-up
 * and the 1 ms steps of fake_run, weighs twice on a token run alone and
 * would make equal costs look like a saving); a job that is not batchable
 * queued behind each keeps them from waiting.
 * Then a stream of 6 jobs of 8 tokens, one every 2 ms: where batches save
 * 80 ms on such a job (more than the gap between arrivals), they wait for
 * each other and go as one or two batches; where they save nothing, each
 * runs as it comes, alone. */
START_TEST(test_batch_waits_if_it_pays) {
  const int pays = _i;
  start_batching(2, 16, 10000, 256);
  int id = 0, done = 0;
  fake_t *held_job = job(id++);
  held_job->hold = 1;
  ck_assert_int_eq(submit(held_job, far(), -1), 0);
  PUMP_UNTIL(started(held_job));
  for (int i = 0; i < 16; i++) { /* alone */
    fake_t *f = job(id++);
    f->key = 1;
    f->ms = pays ? 20 : 4;
    ck_assert_int_eq(submit(f, far(), -1), 0);
    ck_assert_int_eq(submit(job(id++), far(), -1), 0); /* not batchable */
    wait_done(done += 2);
    ck_assert_int_eq(f->batch, 1);
  }
  run_pairs(16, pays ? 20 : 16, &id, &done);
  ck_assert_int_eq(attnd_sched_batch_pays(H.s, 8), pays);
  int first = id;
  for (int i = first; i < first + 6; i++)
    job(i)->tokens = 8;
  stream(first, 6, 2, 0);
  wait_done(done + 6);
  int batches = 0, most = 0;
  for (int i = first; i < first + 6; i++) {
    came_back(job(i), ATTND_SCHED_DONE, 1);
    batches += job(i)->batch_first == i;
    most = job(i)->batch > most ? job(i)->batch : most;
  }
  if (pays)
    ck_assert_msg(batches <= 2 && most >= 3,
                  "where batches pay, 6 jobs in a stream ran as %d batches, "
                  "the largest of %d",
                  batches, most);
  else
    ck_assert_msg(batches == 6,
                  "where batches save nothing, 6 jobs in a stream ran as %d "
                  "batches, the largest of %d: some waited",
                  batches, most);
  release(held_job);
  wait_done(done + 7);
}
END_TEST

/* What a submitter is told (attnd_sched_batch_pays): batching pays until
 * batches have been seen; not where they save nothing, a token costing 4
 * ms alone (as the submitter's own runs say) and 4 in a batch; again once
 * a second has passed without a batch, until batches have been seen
 * afresh; and where the submitter's runs come to cost 40 ms a token, more
 * than a batch's. Never with batching off. */
START_TEST(test_batch_pays_told) {
  start_batching(1, 16, 10000, 256);
  int id = 0, done = 0;
  ck_assert_int_eq(attnd_sched_batch_pays(H.s, 1), 1);
  for (int i = 0; i < 16; i++)
    attnd_sched_ran_alone(H.s, 1, 4.0);
  ck_assert_int_eq(attnd_sched_batch_pays(H.s, 1), 1);
  run_pairs(16, 8, &id, &done);
  ck_assert_int_eq(attnd_sched_batch_pays(H.s, 1), 0);
  sleep_ms(1100);
  ck_assert_int_eq(attnd_sched_batch_pays(H.s, 1), 1);
  run_pairs(15, 8, &id, &done);
  ck_assert_int_eq(attnd_sched_batch_pays(H.s, 1), 1);
  run_pairs(1, 8, &id, &done);
  ck_assert_int_eq(attnd_sched_batch_pays(H.s, 1), 0);
  for (int i = 0; i < 16; i++)
    attnd_sched_ran_alone(H.s, 1, 40.0);
  ck_assert_int_eq(attnd_sched_batch_pays(H.s, 1), 1);

  attnd_sched_set_batching(
      H.s, &(attnd_sched_batching_t){.run_batch = fake_run_batch,
                                     .compatible = fake_compatible,
                                     .window_ms = 0,
                                     .max_tokens = 256});
  ck_assert_int_eq(attnd_sched_batch_pays(H.s, 1), 0);
}
END_TEST

/* The wait ends with the window, however long the stream: with a window
 * of 20 ms and a job every 2 ms for 120 ms, the first batch starts while
 * the stream still runs, and none waits much past the window. */
START_TEST(test_batch_window_ends) {
  start_batching(2, 128, 20, 256);
  run_held(0);
  stream(1, 60, 2, 0);
  wait_done(60);
  ck_assert_msg(job(2)->t_start < job(60)->t_submit,
                "the first batch waited for the whole stream");
  for (int i = 1; i <= 60; i++) {
    came_back(job(i), ATTND_SCHED_DONE, 1);
    ck_assert_msg(job(i)->t_start - job(i)->t_submit < 20 + 200,
                  "job %d waited %.1f ms, with a window of 20", i,
                  job(i)->t_start - job(i)->t_submit);
  }
  release(job(0));
  wait_done(61);
}
END_TEST

/* Never a wait when nothing suggests company: with a window of 10 s, the
 * first job an idle server sees runs at once (no pace known), and so does
 * a batch behind which other work waits. A test that waited would fail at
 * GUARD_MS. */
START_TEST(test_batch_no_wait) {
  start_batching(2, 8, 10000, 256);
  job(0)->key = 1;
  ck_assert_int_eq(submit(job(0), far(), -1), 0);
  wait_done(1);
  came_back(job(0), ATTND_SCHED_DONE, 1);
  /* both workers held; A1 A2 A3 queue at a pace of 1 ms, N4 behind them:
   * the worker that frees takes the three at once */
  job(5)->hold = 1;
  job(6)->hold = 1;
  ck_assert_int_eq(submit(job(5), far(), -1), 0);
  ck_assert_int_eq(submit(job(6), far(), -1), 0);
  PUMP_UNTIL(started(job(5)) && started(job(6)));
  stream(1, 3, 1, 0);
  ck_assert_int_eq(submit(job(4), far(), -1), 0);
  PUMP_UNTIL(attnd_sched_waiting(H.s) == 4);
  release(job(5));
  PUMP_UNTIL(runs(job(1)) == 1);
  release(job(6));
  wait_done(7);
  for (int i = 1; i < 7; i++)
    came_back(job(i), ATTND_SCHED_DONE, 1);
  ck_assert_int_eq(job(1)->batch, 3);
  ck_assert_int_eq(job(3)->batch_first, 1);
}
END_TEST

/* A deadline that passes while its job waits for company: it comes back
 * EXPIRED, never run, while the stream goes on. */
START_TEST(test_batch_expired_in_window) {
  start_batching(2, 128, 10000, 256);
  run_held(0);
  stream(1, 2, 2, 0);                    /* A1 runs; A2 waits */
  stream(3, 40, 2, attnd_now_ms() + 30); /* A3 expires at 30 ms */
  wait_done(42);
  came_back(job(3), ATTND_SCHED_EXPIRED, 0);
  release(job(0));
  wait_done(43);
}
END_TEST

/* A job of a batch whose client goes while it waits is dropped
 * (ABANDONED, never run); the rest run as one batch. One whose deadline
 * passes while its batch runs comes back EXPIRED, the others DONE. */
START_TEST(test_batch_members_leave) {
  int sv[2];
  ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  start_batching(1, 8, 1000, 256);
  run_held(0);
  for (int i = 1; i <= 4; i++)
    job(i)->key = 1;
  job(2)->hold = 1; /* the batch's first, once 1 is gone */
  ck_assert_int_eq(submit(job(1), far(), sv[0]), 0);
  ck_assert_int_eq(submit(job(2), far(), -1), 0);
  ck_assert_int_eq(submit(job(3), attnd_now_ms() + 300, -1), 0);
  ck_assert_int_eq(submit(job(4), far(), -1), 0);
  PUMP_UNTIL(attnd_sched_waiting(H.s) == 4);
  hang_up(sv[1], 0);
  wait_done(1);
  came_back(job(1), ATTND_SCHED_ABANDONED, 0);
  release(job(0));
  wait_done(2);
  PUMP_UNTIL(runs(job(2)) == 1);
  double t0 = attnd_now_ms(); /* job 3's deadline passes as its batch runs */
  while (attnd_now_ms() < t0 + 400)
    uv_run(&H.loop, UV_RUN_NOWAIT), sleep_ms(1);
  release(job(2));
  wait_done(5);
  came_back(job(2), ATTND_SCHED_DONE, 1);
  came_back(job(3), ATTND_SCHED_EXPIRED, 1);
  came_back(job(4), ATTND_SCHED_DONE, 1);
  ck_assert_int_eq(job(2)->batch, 3);
  ck_assert_int_eq(job(3)->cancel, 1);
  close(sv[0]);
}
END_TEST

/* ---- threads per job (attnd_sched_set_threads) --------------------------- */

/* start, with `cores` shared by the running jobs, at most `cap` each. */
static void start_threads(int workers, int depth, int cores, int cap) {
  start(workers, depth);
  attnd_sched_set_threads(H.s, cores, cap);
}

/* A job alone gets every core; they are given back when it is done; and
 * without the policy a job is given 0 (as its submitter planned it).
 * Catches threads not given back, and a lone job held to one. */
START_TEST(test_threads_lone_gets_all) {
  start_threads(4, 8, 4, 4);
  fake_t *f = run_held(0);
  ck_assert_int_eq(f->threads, 4);
  ck_assert_int_eq(attnd_sched_threads_busy(H.s), 4);
  release(f);
  wait_done(1);
  ck_assert_int_eq(attnd_sched_threads_busy(H.s), 0);
  attnd_sched_set_threads(H.s, 0, 1); /* off */
  f = run_held(1);
  ck_assert_int_eq(f->threads, 0);
  ck_assert_int_eq(attnd_sched_threads_busy(H.s), 0);
}
END_TEST

/* Waits until jobs 0 to 3 run, and asserts that each was given one
 * thread, the four cores. */
static void one_each_of_four(void) {
  PUMP_UNTIL(started(job(0)) && started(job(1)) && started(job(2)) &&
             started(job(3)));
  for (int i = 0; i < 4; i++)
    ck_assert_msg(job(i)->threads == 1, "job %d: %d threads", i,
                  job(i)->threads);
  ck_assert_int_eq(attnd_sched_threads_busy(H.s), 4);
}

/* Four jobs that arrive together on four workers and four cores get one
 * each, whichever starts first (each leaves one for every job starting
 * beside it); a job that arrives while another holds every core still
 * gets one, its worker's. Catches the first of a burst taking every core,
 * and a job given 0 threads. */
START_TEST(test_threads_under_load_one_each) {
  start_threads(4, 8, 4, 4);
  for (int i = 0; i < 4; i++) {
    job(i)->hold = 1;
    ck_assert_int_eq(submit(job(i), far(), -1), 0);
  }
  one_each_of_four();
  __atomic_store_n(&H.release_all, 1, __ATOMIC_RELAXED);
  wait_done(4);
  __atomic_store_n(&H.release_all, 0, __ATOMIC_RELAXED);
  ck_assert_int_eq(attnd_sched_threads_busy(H.s), 0);

  ck_assert_int_eq(run_held(4)->threads, 4);
  ck_assert_int_eq(run_held(5)->threads, 1);
  ck_assert_int_eq(attnd_sched_threads_busy(H.s), 5);
}
END_TEST

/* The cap bounds a lone job, and a job's max_threads bounds it below the
 * cores left. Catches either bound ignored. */
START_TEST(test_threads_cap) {
  start_threads(3, 8, 8, 3);
  job(0)->max_threads = 9; /* above the cap */
  ck_assert_int_eq(run_held(0)->threads, 3);
  job(1)->max_threads = 2;
  ck_assert_int_eq(run_held(1)->threads, 2);
  ck_assert_int_eq(run_held(2)->threads, 3); /* any: the cap, 3 cores left */
  ck_assert_int_eq(attnd_sched_threads_busy(H.s), 8);
}
END_TEST

/* Requests of the submitter's in flight that the scheduler does not hold
 * (bodies arriving, decoding; attnd_sched_set_arriving) each take a core
 * from a job that starts, and no more, but for those counted idle (bodies
 * trickling in): 3 outside leave a lone job 5 of 8 cores; none outside
 * (the count equal to the scheduler's in flight), all 8; a count below the
 * scheduler's (read apart), none either; 7 outside, still one; 3 outside
 * of which 2 idle, 7; more idle than outside (read apart), 8. Catches the
 * count ignored, counted whole (the scheduler's own jobs in it), allowed
 * below zero, or the idle ones counted. */
START_TEST(test_threads_arriving) {
  static const struct {
    int outside, idle, want;
  } rows[] = {{3, 0, 5}, {0, 0, 8}, {-2, 0, 8},
              {7, 0, 1}, {3, 2, 7}, {3, 5, 8}};
  enum { N = sizeof rows / sizeof rows[0] };
  static atomic_int arriving, idle; /* outlive the test: teardown frees H.s */
  start_threads(1, 8, 8, 16);       /* a cap above the cores: only they bound */
  attnd_sched_set_arriving(H.s, &arriving, &idle);
  for (int i = 0; i < N; i++) {
    /* the job is in flight when it starts: counted in both */
    atomic_store(&arriving, 1 + rows[i].outside);
    atomic_store(&idle, rows[i].idle);
    fake_t *f = run_held(i);
    ck_assert_msg(f->threads == rows[i].want,
                  "%d outside, %d of them idle: a lone job given %d "
                  "threads, not %d",
                  rows[i].outside, rows[i].idle, f->threads, rows[i].want);
    release(f);
    wait_done(i + 1);
  }
}
END_TEST

/* What a finished job held goes to the next to start, and only what it
 * held: a job that starts beside one still running gets the cores it does
 * not hold. Catches threads given back twice or not at all. */
START_TEST(test_threads_given_back) {
  start_threads(3, 8, 4, 4);
  fake_t *a = run_held(0), *b = run_held(1);
  ck_assert_int_eq(a->threads, 4);
  ck_assert_int_eq(b->threads, 1);
  release(a);
  wait_done(1);
  ck_assert_int_eq(attnd_sched_threads_busy(H.s), 1);
  ck_assert_int_eq(run_held(2)->threads, 3);
  release(b);
  release(job(2));
  wait_done(3);
  ck_assert_int_eq(attnd_sched_threads_busy(H.s), 0);
  ck_assert_int_eq(run_held(3)->threads, 4);
}
END_TEST

/* Threads come back however a running job ends: by an error, past its
 * deadline (cancelled, a 504), or with its client gone (a 499), as well as
 * done. Four jobs that start together get one each, the four cores; when
 * all have ended none is held, and a job alone gets every core again.
 * Catches threads given back only for a job that succeeded, or only for
 * one whose client is still there. */
START_TEST(test_threads_back_after_endings) {
  int sv[2];
  ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  start_threads(4, 8, 4, 4);
  for (int i = 0; i < 4; i++)
    job(i)->hold = 1;
  job(0)->ret = ATTN_ENOSPC;
  /* long enough that all four surely start first, even on a loaded
   * machine */
  ck_assert_int_eq(submit(job(1), attnd_now_ms() + 500, -1), 0);
  ck_assert_int_eq(submit(job(0), far(), -1), 0);
  ck_assert_int_eq(submit(job(2), far(), sv[0]), 0);
  ck_assert_int_eq(submit(job(3), far(), -1), 0);
  one_each_of_four();
  wait_done(1); /* job 1, past its deadline */
  came_back(job(1), ATTND_SCHED_EXPIRED, 1);
  ck_assert_int_eq(attnd_sched_threads_busy(H.s), 3);
  hang_up(sv[1], 0);
  wait_done(2);
  came_back(job(2), ATTND_SCHED_ABANDONED, 1);
  ck_assert_int_eq(attnd_sched_threads_busy(H.s), 2);
  release(job(0));
  wait_done(3);
  came_back(job(0), ATTND_SCHED_DONE, 1);
  ck_assert_int_eq(attnd_sched_threads_busy(H.s), 1);
  release(job(3));
  wait_done(4);
  ck_assert_int_eq(attnd_sched_threads_busy(H.s), 0);
  ck_assert_int_eq(run_held(4)->threads, 4);
  close(sv[0]);
}
END_TEST

/* A batch is given threads as one job, up to the sum of its jobs'
 * max_threads, and gives them back as one; its jobs' work counts
 * together: one thread for each whole thread's worth of their sum, at
 * least one. Three one-token steps (a tenth of a thread's worth each, one
 * thread each at most) run on one thread, not three; three of 1.5 each
 * (two each at most) on 4 of the 6 free, not 6; three of unknown work on
 * their max_threads' sum. */
START_TEST(test_threads_batch) {
  static const struct {
    double work;
    int max_threads, want;
  } rows[] = {{0.1, 1, 1}, {0.4, 1, 1}, {1.5, 2, 4}, {3.0, 1, 3}, {0, 1, 3}};
  const int r = _i;
  start_batching(2, 16, 1000, 256);
  attnd_sched_set_threads(H.s, 8, 8);
  job(0)->max_threads = 2;
  fake_t *a = run_held(0);
  ck_assert_int_eq(a->threads, 2);
  for (int i = 1; i < 4; i++) {
    job(i)->key = 1;
    job(i)->max_threads = rows[r].max_threads;
    job(i)->work = rows[r].work;
    ck_assert_int_eq(submit(job(i), far(), -1), 0);
  }
  wait_done(3);
  for (int i = 1; i < 4; i++) {
    ck_assert_int_eq(job(i)->batch, 3);
    ck_assert_msg(job(i)->threads == rows[r].want,
                  "3 jobs of work %g, max_threads %d: %d threads, not %d",
                  rows[r].work, rows[r].max_threads, job(i)->threads,
                  rows[r].want);
  }
  ck_assert_int_eq(attnd_sched_threads_busy(H.s), 2);
}
END_TEST

/* A TCase `name` of s, each test on a fresh loop and scheduler. */
static TCase *sched_tcase(Suite *s, const char *name) {
  TCase *tc = tcase_create(name);
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 20);
  suite_add_tcase(s, tc);
  return tc;
}

Suite *test_suite(void) {
  Suite *s = suite_create("scheduler");
  TCase *tc = sched_tcase(s, "order");
  tcase_add_test(tc, test_fifo_one_worker);
  tcase_add_loop_test(tc, test_all_done_workers, 0, 4);
  tcase_add_test(tc, test_submit_from_threads);
  tcase_add_test(tc, test_submit_from_done);
  tcase_add_loop_test(tc, test_run_error_is_done, 0,
                      sizeof fail_codes / sizeof fail_codes[0]);

  tc = sched_tcase(s, "admission");
  tcase_add_test(tc, test_admission);
  tcase_add_test(tc, test_submit_no_memory);
  tcase_add_test(tc, test_two_workers_run_together);
  tcase_add_test(tc, test_retry_after_range);
  tcase_add_test(tc, test_retry_after_follows_average);

  tc = sched_tcase(s, "deadline");
  tcase_add_test(tc, test_expired_while_waiting);
  tcase_add_test(tc, test_expired_on_arrival_idle_worker);
  tcase_add_test(tc, test_expired_while_running);
  tcase_add_test(tc, test_expired_unseen_while_running);

  tc = sched_tcase(s, "gone");
  tcase_add_loop_test(tc, test_gone_while_waiting, 0, 2); /* close, shutdown */
  tcase_add_loop_test(tc, test_gone_while_running, 0, 2); /* close, shutdown */
  tcase_add_test(tc, test_connected_client_is_not_gone);

  tc = sched_tcase(s, "held");
  tcase_add_test(tc, test_held_released);
  tcase_add_test(tc, test_held_expires);
  tcase_add_test(tc, test_held_gone);
  tcase_add_test(tc, test_held_kept);

  tc = sched_tcase(s, "batching");
  tcase_add_test(tc, test_batch_gathers);
  tcase_add_loop_test(tc, test_batch_max_tokens, 0, 2);
  tcase_add_test(tc, test_batch_waits_for_a_stream);
  tcase_add_test(tc, test_batch_window_ends);
  tcase_add_loop_test(tc, test_batch_waits_if_it_pays, 0, 2);
  tcase_add_test(tc, test_batch_pays_told);
  tcase_add_test(tc, test_batch_no_wait);
  tcase_add_test(tc, test_batch_expired_in_window);
  tcase_add_test(tc, test_batch_members_leave);

  tc = sched_tcase(s, "threads");
  tcase_add_test(tc, test_threads_lone_gets_all);
  tcase_add_test(tc, test_threads_under_load_one_each);
  tcase_add_test(tc, test_threads_cap);
  tcase_add_test(tc, test_threads_given_back);
  tcase_add_test(tc, test_threads_back_after_endings);
  tcase_add_loop_test(tc, test_threads_batch, 0, 5);
  tcase_add_test(tc, test_threads_arriving);

  tc = sched_tcase(s, "lifecycle");
  tcase_add_test(tc, test_scratch_kept);
  tcase_add_test(tc, test_close_idle);
  return s;
}
