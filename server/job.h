/* server/job.h: one attention request on its way through attnd.
 *
 * Ownership passes along the path, one owner at a time:
 *   HTTP thread: attnd_job_decode() builds the job from the body;
 *   scheduler (loop thread) from attnd_sched_submit() until it resumes the
 *   connection; a worker runs it in between;
 *   HTTP thread again: attnd_job_encode() writes the reply, then
 *   attnd_job_free() when the connection completes. */
#ifndef ATTND_JOB_H
#define ATTND_JOB_H

#include <stddef.h>
#include <stdint.h>

#include "attn/attn.h"
#include "codec.h"
#include "config.h"

/* The HTTP answer to a request that failed: status, a stable code, the
 * offending member as a JSON path ("mask.allow"), and a message. */
typedef struct attnd_error {
  int status;
  const char *code; /* static string, e.g. "shape_mismatch" */
  char field[64];
  char message[512];
} attnd_error_t;

/* Fills `e` and returns -1. */
int attnd_error_set(attnd_error_t *e, int status, const char *code,
                    const char *field, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

typedef enum {
  ATTND_WEIGHTS_NONE,
  ATTND_WEIGHTS_PER_HEAD,
  ATTND_WEIGHTS_MEAN
} attnd_weights_t;

typedef struct attnd_job {
  /* From the request (decode). */
  char *id; /* owned, the request's "id" or NULL */
  attn_params_t params;
  attn_plan_t plan;
  attnd_form_t encoding;
  attnd_weights_t weights_mode;
  int want_metrics;
  int64_t timeout_ms;
  void **allocs; /* owned buffers of decoded tensors */
  size_t n_allocs, cap_allocs, alloc_bytes;
  double decode_ms, encode_ms;

  /* Results (worker). */
  attn_outputs_t out;
  int cancel; /* raised (atomically) by the scheduler when the deadline
                 passes or the client goes; attn_forward then stops early */
  int result; /* 0, or an ATTN_E* code from attn_forward */
  int worker;
  int threads;

  /* Timeline, CLOCK_MONOTONIC milliseconds. */
  double t_arrival, t_submit, t_start, t_end;

  /* Scheduler state (loop thread only). */
  struct attnd_job *next; /* FIFO link */
  int state;              /* ATTND_JOB_* */
  int status;             /* HTTP status decided by the scheduler */
  void *conn;             /* the suspended connection (opaque here) */
  int conn_fd;
  void *poll; /* uv_poll_t watching conn_fd, or NULL */
} attnd_job_t;

enum {
  ATTND_JOB_QUEUED = 1,
  ATTND_JOB_RUNNING,
  ATTND_JOB_DONE,      /* computed: status 200 */
  ATTND_JOB_EXPIRED,   /* deadline passed: 504 */
  ATTND_JOB_ABANDONED, /* client went away */
};

/* Monotonic clock in milliseconds. */
double attnd_now_ms(void);

/* Parses and validates a request body into a new job (*out), with every
 * tensor decoded and the attention planned. Checks the configured limits.
 * Returns 0, or -1 with `err` set (400 for bad JSON, 422 for an invalid
 * request). Borrows body and cfg. HTTP thread. */
int attnd_job_decode(const char *body, size_t len, const attnd_config_t *cfg,
                     attnd_job_t **out, attnd_error_t *err);

/* A worker's workspace, kept from job to job so that its pages stay
 * mapped: fresh pages for every request cost more than small attention. */
typedef struct attnd_scratch {
  void *data; /* owned, 64-byte aligned */
  size_t cap;
} attnd_scratch_t;

/* The memory the job holds at its peak: its decoded tensors, the
 * workspace, the outputs, and the reply text (bounded from above). */
size_t attnd_job_memory(const attnd_job_t *job);

/* Runs the attention on `worker`, growing its scratch as needed, and
 * allocating the job's outputs. Sets job->result. Worker thread. */
void attnd_job_run(attnd_job_t *job, int worker, attnd_scratch_t *scratch);

/* Writes the 200 reply body of a computed job into `b`; `request_id` is the
 * X-Request-Id in use. Fills *total_ms with the time from arrival to the
 * end of encoding (it is also in the body). HTTP thread. */
void attnd_job_encode(attnd_job_t *job, attnd_buf_t *b, double *total_ms);

/* Frees the job and everything it owns. */
void attnd_job_free(attnd_job_t *job);

#endif
