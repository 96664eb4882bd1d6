/* server/sched/run.h: computing a decoded request on a worker. */
#ifndef ATTND_RUN_H
#define ATTND_RUN_H

#include "sched/budget.h"
#include "sched/request.h"
#include "sched/scheduler.h"

/* The scheduler's run function for an attnd_request_t: grows the worker's
 * scratch to the plan's workspace, allocates the outputs, and runs
 * attn_forward on `threads` threads (0: the plan's; more than the plan's
 * counts as the plan's, which its memory was counted for). Sets the
 * request's result, worker, threads and its start and end times, and
 * returns the result (0, ATTN_ECANCELED when cancelled, ATTN_ENOSPC when
 * memory ran out, ATTN_ENUMERIC when a value left float32's range, with
 * req->error naming the input). Worker thread. */
int attnd_request_run(void *req, int worker, int threads,
                      attnd_scratch_t *scratch);

/* The most threads a request can use to advantage (attnd_sched_job_t's
 * max_threads): one for each ATTND_FLOPS_PER_THREAD of its work, at least
 * one, at most its plan's; and that work in threads' worth (its `work`,
 * which a batch sums). A thread's share of the work should outweigh
 * waking it and the barriers between the stages (tens of microseconds):
 * 64 MFLOP is a few hundred microseconds of one core's work. Any thread. */
#define ATTND_FLOPS_PER_THREAD 64e6
int attnd_request_max_threads(const attnd_request_t *req);
double attnd_request_work(const attnd_request_t *req);

/* What every thread's workspace (attnd_scratch_t) keeps between requests:
 * one above attnd__scratch_keep bytes (scratch_keep_bytes) is freed when
 * its request is done, so that one large request does not leave its
 * workspace resident. What stays is counted in attnd__scratch_budget
 * (attnd_budget_scratch), less what the running request's own share
 * counts. Both set once at startup (serve.c), before any request. */
extern size_t attnd__scratch_keep;
extern attnd_budget_t *attnd__scratch_budget;

/* Bytes of workspace all threads hold right now (the scratch metric). */
int64_t attnd_scratch_held(void);

/* After a request that held `bytes` of the budget is answered and freed:
 * when that was more than a thread keeps (attnd__scratch_keep), the
 * memory freed goes back to the system. malloc keeps freed memory for
 * reuse (main.c), which would leave the process at the peak of one large
 * request. Any thread. */
void attnd_memory_settle(int64_t bytes);

/* Batches of session steps (the scheduler's batching): a step may join one
 * when it has a layer and asks for the output alone (no weights, no
 * per-head outputs, no ALiBi slopes of its own); two may share one when
 * they have the same layer, number of new tokens, scale, softcap, window,
 * ALiBi and threads. Any thread; compatible takes two attnd_request_t. */
int attnd_request_batchable(const attnd_request_t *req);
int attnd_request_compatible(const void *a, const void *b);

/* The scheduler's run_batch: the steps computed in one forward call (see
 * run.c), each then as attnd_request_run leaves it, with `batch` the
 * number computed together and the batch's timings. A step whose cancel
 * flag was up before it ran is not computed (ATTN_ECANCELED); one raised
 * meanwhile is computed but ATTN_ECANCELED too. When the batch cannot run
 * as one (memory, or a value out of float32's range), each step runs
 * alone, with its own error. Worker thread. */
void attnd_request_run_batch(void *const *jobs, int n, int worker, int threads,
                             attnd_scratch_t *scratch, int *results);

#endif
