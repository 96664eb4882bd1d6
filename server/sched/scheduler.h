/* server/sched/scheduler.h: the bounded FIFO in front of the worker threads.
 *
 * The scheduler knows nothing of HTTP or of what a job computes: it queues
 * opaque jobs, runs each through the `run` function on a worker, and hands
 * each back through the `done` function with how it ended. Its own
 * bookkeeping (queue link, state, deadline, the client-gone flag, the
 * socket watcher) lives in a node it allocates and frees itself.
 *
 * Threads:
 *   - any thread calls attnd_sched_submit(): admission is decided there, at
 *     once, from an atomic count, so a full queue answers at once without
 *     waiting for the loop;
 *   - the libuv loop thread owns the FIFO: it hands jobs to idle workers in
 *     arrival order, expires jobs whose deadline passed (raising the job's
 *     cancel flag if it is running), drops jobs whose client has gone
 *     (watching each waiting job's socket), and calls `done` for each;
 *   - worker threads only call `run` (or `run_batch`).
 * A job submitted successfully belongs to the scheduler until `done`, which
 * runs on the loop thread and passes it back.
 *
 * Batching (attnd_sched_batching): a job marked batchable may run together
 * with others the `compatible` function pairs it with, in one call of
 * `run_batch` on one worker, up to max_tokens of their `tokens`. An idle
 * worker takes the first job waiting and every compatible one waiting
 * behind it. It waits for more, up to window_ms after the first arrived,
 * only when that can pay: nothing else is waiting, the batch is short of
 * max_tokens, and batchable jobs are arriving, at a pace (the mean gap
 * between two) of under half the window; the wait ends when none has
 * come for twice that gap. A server that has not seen two arrivals to
 * pace, an idle one, never waits; nor does one where batches have been
 * seen to save a job less than that gap (what a token of a batchable job
 * costs alone and in a batch, measured on the workers and, through
 * attnd_sched_ran_alone, by submitters that computed such jobs
 * themselves). attnd_sched_batch_pays tells a submitter the same, for a
 * job it could compute at once rather than queue. Each job of a batch
 * keeps its own deadline, client watch and outcome.
 *
 * Threads per job (attnd_sched_set_threads): with a number of cores the
 * running jobs share, each job is given, when it starts, as many threads
 * as there are cores no running job holds, less one for each job that
 * starts beside it (a waiting job with an idle worker to take it) and for
 * each request of the submitter's not yet submitted
 * (attnd_sched_set_arriving), within
 * a cap and the job's own max_threads, and at least one (its worker). A
 * long job alone thus gets every core, and under load each gets one. What
 * a job was given is held until it is done, then given back; a running
 * job never grows or shrinks. Without it, run is given 0 threads: each
 * job runs as its submitter planned it.
 *
 * Held jobs (attnd_sched_job_t.held) wait for something outside the
 * scheduler, a session's step ahead, with their deadline and client
 * watched as a waiting job's are, and count among the jobs in flight (not
 * as waiting for a worker); they are never run, but released to their
 * submitter (attnd_sched_release) or, past their deadline or without a
 * client, passed to done when `withdraw` lets them go. */
#ifndef ATTND_SCHEDULER_H
#define ATTND_SCHEDULER_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct attnd_sched attnd_sched_t;

/* A worker's workspace, kept from job to job so that its pages stay
 * mapped: fresh pages for every request cost more than small attention.
 * `run` may grow it, and gives back one above the kept bound after a job
 * (run.h); the scheduler frees it when the worker stops. */
typedef struct attnd_scratch {
  void *data; /* owned, 64-byte aligned */
  size_t cap;
  size_t counted; /* of cap, what the memory budget counts as kept */
} attnd_scratch_t;

/* Frees s's workspace, and its share of what is kept (run.c). Any thread
 * that owns s. */
void attnd_scratch_free(attnd_scratch_t *s);

/* How a job left the scheduler. */
typedef enum {
  ATTND_SCHED_DONE = 1, /* run returned 0, or an error other than cancel */
  ATTND_SCHED_EXPIRED,  /* its deadline passed, waiting or running */
  ATTND_SCHED_ABANDONED /* its client went away */
} attnd_sched_outcome_t;

/* Computes `job` on worker `worker` (0-based), on `threads` threads (the
 * worker's own included; 0: as many as the job was planned for). Returns
 * 0, ATTN_ECANCELED when it stopped because its cancel flag was raised, or
 * another negative code (the job keeps its own account of that). Worker
 * thread. */
typedef int (*attnd_sched_run_fn)(void *job, int worker, int threads,
                                  attnd_scratch_t *scratch);

/* Passes `job` back, with the submitter's `tag` and the outcome. Loop
 * thread. */
typedef void (*attnd_sched_done_fn)(void *job, void *tag,
                                    attnd_sched_outcome_t outcome, void *arg);

/* Creates the scheduler on `loop` (not yet running) and starts `workers`
 * threads. Returns NULL on failure. Loop thread, before the loop runs. */
attnd_sched_t *attnd_sched_new(uv_loop_t *loop, int workers, int queue_depth,
                               attnd_sched_run_fn run, attnd_sched_done_fn done,
                               void *arg);

/* Whether a job whose deadline is deadline_ms (attnd_sched_job_t) has
 * expired at `now`: the one rule for the scheduler's timer, its workers'
 * late results, and what the HTTP threads compute inline. Any thread. */
int attnd_sched_expired(double deadline_ms, double now);

/* What the scheduler needs to know of a job besides the job itself. */
typedef struct attnd_sched_job {
  void *job;          /* borrowed until done */
  void *tag;          /* the submitter's, passed back to done */
  double deadline_ms; /* attnd_now_ms() time after which it expires */
  int *cancel;        /* raised atomically to stop a running job */
  int fd;             /* the client's socket to watch, or -1 */
  int batchable;      /* may run in a batch (attnd_sched_batching) */
  int64_t tokens;     /* its size toward a batch's max_tokens, >= 1 */
  int max_threads;    /* the most threads it can use to advantage; 0: any
                         (attnd_sched_set_threads) */
  double work;        /* its work in threads' worth (>= 0): a batch is given at
                         most one thread for each whole one of its jobs' sum, and
                         at least one; 0 where max_threads alone says */
  /* A held job waits for something outside the scheduler (a session's
   * step ahead of it) with its deadline and its client watched, but is
   * never run: attnd_sched_release(id) passes it to the `release` function
   * of attnd_sched_set_release instead of `done`. When its deadline passes
   * or its client goes first, `withdraw` decides: 1, and it goes to `done`
   * (EXPIRED, ABANDONED); 0 (its release is on its way), and it waits for
   * that. */
  int held;
  uint64_t id; /* a held job's, unique among them */
} attnd_sched_job_t;

/* The most jobs in one batch. */
#define ATTND_SCHED_MAX_BATCH 256

/* Computes jobs[0..n) (2 <= n <= ATTND_SCHED_MAX_BATCH, pairwise
 * compatible) together on `threads` threads (as for run), setting
 * results[i] as `run` would return it for job i. A job whose cancel flag
 * is raised may still be computed; its result then is ATTN_ECANCELED.
 * Worker thread. */
typedef void (*attnd_sched_batch_fn)(void *const *jobs, int n, int worker,
                                     int threads, attnd_scratch_t *scratch,
                                     int *results);

typedef struct attnd_sched_batching {
  attnd_sched_batch_fn run_batch;
  /* Whether batchable jobs a and b may share a batch (symmetric and
   * transitive). Loop thread. */
  int (*compatible)(const void *a, const void *b);
  double window_ms;   /* 0: no batching */
  int64_t max_tokens; /* >= 1 */
} attnd_sched_batching_t;

/* Turns batching on (window_ms > 0). Loop thread, before the loop runs. */
void attnd_sched_set_batching(attnd_sched_t *s,
                              const attnd_sched_batching_t *b);

/* Gives each job threads when it starts, out of `cores` shared by all the
 * running jobs, at most `cap` (>= 1) to one (see the top of this file);
 * cores 0: off (the default). Loop thread, before the loop runs. */
void attnd_sched_set_threads(attnd_sched_t *s, int cores, int cap);

/* The submitter's requests in flight (*inflight, read atomically): each
 * of them that the scheduler does not hold (its body arriving or being
 * decoded, or computed by the submitter itself) takes a core from what a
 * job that starts is given, as a job starting beside it does: it uses one
 * now, or soon wants one; but for those of them in *idle (not NULL),
 * which use none (a body trickling in). NULL inflight: none counted. Loop
 * thread, before the loop runs. */
void attnd_sched_set_arriving(attnd_sched_t *s, const atomic_int *inflight,
                              const atomic_int *idle);

/* Held jobs (attnd_sched_job_t.held): release(job, tag, arg) takes a
 * released one, the scheduler done with it (it may submit the job again);
 * withdraw(job, tag, arg) is asked, under the scheduler's lock (so that no
 * release of the job is handled meanwhile), whether a held job whose
 * deadline passed or whose client went may leave for `done`. Both on the
 * loop thread. Set on the loop thread, before the loop runs. */
typedef void (*attnd_sched_release_fn)(void *job, void *tag, void *arg);
typedef int (*attnd_sched_withdraw_fn)(void *job, void *tag, void *arg);
void attnd_sched_set_release(attnd_sched_t *s, attnd_sched_release_fn release,
                             attnd_sched_withdraw_fn withdraw);

/* Releases the held job `id` (submitted before this call; see
 * attnd_sched_job_t.held): the loop passes it to `release`, unless it has
 * already gone to `done`, when nothing happens. Any thread. */
void attnd_sched_release(attnd_sched_t *s, uint64_t id);

/* What attnd_sched_submit refuses with: a full queue, or no memory for
 * the node that would hold the job (not the client's fault, nor a sign of
 * load: out_of_memory, not overloaded). */
enum { ATTND_SCHED_FULL = -1, ATTND_SCHED_NOMEM = -2 };

/* Admits a job or refuses it. Returns 0 (the scheduler holds the job until
 * done), ATTND_SCHED_FULL when the queue is full, or ATTND_SCHED_NOMEM when
 * no node could be allocated; a refused job is not counted. Any thread. */
int attnd_sched_submit(attnd_sched_t *s, const attnd_sched_job_t *job);

/* For a batchable job of `tokens` that its submitter could compute at
 * once, alone: whether it should be submitted instead, to be computed in a
 * batch. That is, whether batches have been seen to save a job of its
 * tokens more than the gap between arrivals, or have not been seen enough
 * lately to tell (scheduler.c, batching_pays); 0 when batching is off.
 * Any thread. */
int attnd_sched_batch_pays(attnd_sched_t *s, int64_t tokens);
/* A batchable job of `tokens` that its submitter computed alone, which
 * took ms: an arrival, and what such a job costs alone. Any thread. */
void attnd_sched_ran_alone(attnd_sched_t *s, int64_t tokens, double ms);
/* Jobs waiting, and workers busy, right now. Any thread. */
int attnd_sched_waiting(const attnd_sched_t *s);
int attnd_sched_busy(const attnd_sched_t *s);
/* Threads the running jobs were given (attnd_sched_set_threads), right
 * now. Any thread. */
int attnd_sched_threads_busy(const attnd_sched_t *s);
/* Jobs admitted and not yet passed back through done (or, held, release):
 * those running, waiting and held; submit refuses one more once they are
 * depth + workers. Any thread. */
int attnd_sched_inflight(const attnd_sched_t *s);
/* Held jobs among them (attnd_sched_job_t.held), right now. Any thread. */
int attnd_sched_held(const attnd_sched_t *s);
/* Batches of two or more jobs run so far, and the jobs in them. Any
 * thread. */
void attnd_sched_batches(const attnd_sched_t *s, uint64_t *batches,
                         uint64_t *jobs);
/* A guess at the seconds until a place frees: for Retry-After. */
int attnd_sched_retry_after_s(const attnd_sched_t *s);

/* Stops the workers once idle and closes the loop's handles. Call after
 * every admitted job has come back. Loop thread. */
void attnd_sched_close(attnd_sched_t *s);
/* Frees the scheduler after the loop has run its close callbacks. */
void attnd_sched_free(attnd_sched_t *s);

#endif
