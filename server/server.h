/* server/server.h: the state of one running attnd, shared by the files
 * that make up the service: serve.c (its lifecycle: start, signals,
 * drain, stop) and http.c (its HTTP front). Internal to those two. */
#ifndef ATTND_SERVER_H
#define ATTND_SERVER_H

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <uv.h>

#include "attn/attn.h"
#include "budget.h"
#include "config.h"
#include "metrics.h"
#include "scheduler.h"

typedef struct attnd_server {
  const attnd_config_t *cfg;
  struct MHD_Daemon *daemon;
  uv_loop_t loop;
  attnd_sched_t *sched;
  attnd_metrics_t *metrics;
  attn_backend_t backend;
  FILE *access_log; /* NULL when off */
  int port;         /* the port bound */
  atomic_int draining;
  atomic_int active; /* HTTP requests between first callback and completion */
  attnd_budget_t budget;
  atomic_uint_fast64_t next_id;
  uint64_t id_prefix;
} attnd_server_t;

/* Starts libmicrohttpd on cfg's host and port, and sets s->port. Returns 0,
 * or -1 with the reason on stderr. Main thread. */
int attnd_http_start(attnd_server_t *s);

/* Stops libmicrohttpd. Main thread, after the loop has stopped. */
void attnd_http_stop(attnd_server_t *s);

/* The scheduler's done function: resumes the waiting connection. Loop
 * thread. */
void attnd_http_job_done(void *job, void *tag, attnd_sched_outcome_t outcome,
                         void *arg);

#endif
