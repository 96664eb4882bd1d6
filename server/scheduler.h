/* server/scheduler.h: the bounded FIFO in front of the worker threads.
 *
 * Threads:
 *   - HTTP threads call attnd_sched_submit(): admission is decided there,
 *     at once, from an atomic count, so a full queue answers 429 without
 *     waiting for the loop;
 *   - the libuv loop thread owns the FIFO: it hands jobs to idle workers in
 *     arrival order, expires jobs whose deadline passed (cancelling running
 *     ones through the core's cancel flag), drops jobs whose client has gone
 *     (watching each waiting connection's socket), and reports every
 *     finished job through the done callback;
 *   - worker threads only run jobs.
 * A job submitted successfully is owned by the scheduler until the done
 * callback, which runs on the loop thread and passes it back. */
#ifndef ATTND_SCHEDULER_H
#define ATTND_SCHEDULER_H

#include <uv.h>

#include "job.h"

typedef struct attnd_sched attnd_sched_t;

/* Called on the loop thread for each job leaving the scheduler, with
 * job->state one of DONE, EXPIRED, ABANDONED. */
typedef void (*attnd_sched_done_fn)(attnd_job_t *job, void *arg);

/* Creates the scheduler on `loop` (not yet running) and starts `workers`
 * threads. Returns NULL on failure. Loop thread. */
attnd_sched_t *attnd_sched_new(uv_loop_t *loop, int workers, int queue_depth,
                               attnd_sched_done_fn done, void *arg);

/* Admits `job` (whose connection socket is `fd`, or -1) or refuses it.
 * Returns 0 (the scheduler owns the job), or -1 when the queue is full.
 * Any thread. */
int attnd_sched_submit(attnd_sched_t *s, attnd_job_t *job, int fd);

/* Jobs waiting, and workers busy, right now. Any thread. */
int attnd_sched_waiting(const attnd_sched_t *s);
int attnd_sched_busy(const attnd_sched_t *s);
/* Jobs admitted and not yet passed back through the done callback. */
int attnd_sched_inflight(const attnd_sched_t *s);
/* A guess at the seconds until a place frees: for Retry-After. */
int attnd_sched_retry_after_s(const attnd_sched_t *s);

/* Stops the workers once idle and closes the loop's handles. Call after
 * every admitted job has come back. Loop thread. */
void attnd_sched_close(attnd_sched_t *s);
/* Frees the scheduler after the loop has run its close callbacks. */
void attnd_sched_free(attnd_sched_t *s);

#endif
