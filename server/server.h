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
#include "config.h"
#include "http/auth.h"
#include "http/cors.h"
#include "metrics.h"
#include "model/layers.h"
#include "sched/budget.h"
#include "sched/scheduler.h"
#include "store/session.h"

typedef struct attnd_server {
  const attnd_config_t *cfg;
  /* The HTTP threads: a libmicrohttpd daemon of one thread each, given
   * its connections by the listener (http/listen.h) */
  struct MHD_Daemon **daemons;
  int ndaemons; /* http_threads */
  struct attnd_listener *listener;
  uv_loop_t loop;
  attnd_sched_t *sched;
  attnd_metrics_t *metrics;
  attn_backend_t backend;
  FILE *access_log; /* NULL when off */
  int port;         /* the port bound */
  atomic_int draining;
  atomic_int active; /* HTTP requests between first callback and completion */
  /* HTTP requests from their headers to their reply (attnd_inflight):
   * bodies uploading, decoding, waiting, computing (exchange.h) */
  atomic_int inflight;
  /* of them, those whose body arrives too slowly to keep an HTTP thread
   * busy (http.c, sweep_body_pace) */
  atomic_int slow_bodies;
  atomic_int inline_steps; /* batchable steps computing on HTTP threads */
  attnd_budget_t budget;
  attnd_budget_t device_budget; /* cuda requests' GPU memory */
  int device_at_start; /* the cuda backend was usable when attnd started,
                          and the config's backend may use it */
  atomic_uint_fast64_t next_id;
  uint64_t id_prefix;
  attnd_auth_t auth; /* API keys; reloaded by serve.c on SIGHUP */
  attnd_cors_t cors;
  int https; /* serving HTTPS: tls_cert_file is set */
  /* The certificate and key new TLS handshakes get (http/tls.h), guarded
   * by tls_lock: SIGHUP replaces it (attnd_http_tls_swap) */
  uv_mutex_t tls_lock;
  struct attnd_tls_pair *tls;
  /* The open connections, for the deadline of a request's headers and
   * the pace of its reply (http.c): the list is guarded by conns_lock; the
   * sweep runs on the loop thread from header_timer while the daemon
   * runs. */
  uv_mutex_t conns_lock;
  struct attnd_http_conn *conns;
  uv_timer_t header_timer;
  uv_mutex_t layers_lock;     /* guards `layers` */
  attnd_layer_set_t *layers;  /* the loaded layers; swapped on SIGHUP */
  attnd_sessions_t *sessions; /* KV-cache sessions, kv_cache_bytes */
  /* 0: no layer reload runs; 1: one runs; 2: one runs, and a SIGHUP came
   * since it began, so that it loads the files again when it ends */
  atomic_int reloading;
} attnd_server_t;

/* A new reference to the current layer set (the caller unrefs it). Any
 * thread. */
attnd_layer_set_t *attnd_server_layers(attnd_server_t *s);

/* Listens on cfg's host and port and starts the HTTP threads, with TLS
 * when cfg names a certificate (read here into s->tls), and sets
 * s->port. s->auth and s->cors are set up before. Returns 0, or -1 with
 * the reason on stderr. Main thread. */
int attnd_http_start(attnd_server_t *s);

/* Makes `pair` (a reference the call takes over) the certificate and key
 * of the handshakes from now on; the connections open keep the one their
 * handshake got, and the last to close gives the old pair back. Any
 * thread, while the daemon runs. */
void attnd_http_tls_swap(attnd_server_t *s, struct attnd_tls_pair *pair);

/* A new reference to the pair new handshakes get now (the caller unrefs
 * it), for /metrics and /v1/info; NULL with plain HTTP. Any thread. */
struct attnd_tls_pair *attnd_http_tls_current(attnd_server_t *s);

/* Stops accepting, stops the HTTP threads and frees the TLS pair. Main thread,
 * after the loop has stopped. */
void attnd_http_stop(attnd_server_t *s);

/* The scheduler's done function: resumes the waiting connection. Loop
 * thread. */
void attnd_http_job_done(void *job, void *tag, attnd_sched_outcome_t outcome,
                         void *arg);

/* The scheduler's release and withdraw functions (scheduler.h) for the
 * session steps it holds while they wait behind their session's step ahead
 * (api/sessions.c). Loop thread. */
void attnd_sessions_released(void *job, void *tag, void *arg);
int attnd_sessions_withdraw(void *job, void *tag, void *arg);

#endif
