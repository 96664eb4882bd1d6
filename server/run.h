/* server/run.h: computing a decoded request on a worker. */
#ifndef ATTND_RUN_H
#define ATTND_RUN_H

#include "request.h"
#include "scheduler.h"

/* The scheduler's run function for an attnd_request_t: grows the worker's
 * scratch to the plan's workspace, allocates the outputs, and runs
 * attn_forward. Sets the request's result, worker, threads and its start
 * and end times, and returns the result (0, ATTN_ECANCELED when cancelled,
 * ATTN_ENOSPC when memory ran out, ATTN_ENUMERIC when a value left float32's
 * range, with req->error naming the input). Worker thread. */
int attnd_request_run(void *req, int worker, attnd_scratch_t *scratch);

#endif
