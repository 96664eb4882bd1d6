/* server/serve.c: the service's lifecycle: start, signals, drain, stop.
 * See serve.h. Main thread, which runs the libuv loop. */
#include "serve.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "codec/util.h"
#include "http/access_log.h"
#include "http/tls.h"
#include "notify.h"
#include "sched/pinned.h"
#include "sched/run.h"
#include "server.h"

/* The server and what only its lifecycle needs. */
typedef struct life {
  attnd_server_t s;
  uv_signal_t sigterm, sigint, sighup;
  uv_timer_t drain_timer;
  double drain_started;
  int exit_code;
  int drain_timed_out; /* work was still in flight when the loop stopped */
} life_t;

/* Held while the state a service manager hears of (reloading, draining)
 * changes and the message is sent (notify.h), so that the messages of the
 * loop thread and of a reload's thread arrive in the order of the changes:
 * never a reload's READY=1 after the RELOADING=1 of the next one, or after
 * STOPPING=1. Static, not the server's: a reload's thread unlocks it after
 * it has set reloading to 0, when the teardown may have freed the server. */
static pthread_mutex_t notify_lock = PTHREAD_MUTEX_INITIALIZER;

/* While draining, every 20 ms: stop the loop once nothing is in flight, or
 * once drain_timeout_s has passed (exit code 1). A reload of the layers
 * counts as in flight: it reads the server, which the teardown frees, and
 * waiting for it there was waiting without drain_timeout_s's bound. */
static void on_drain_tick(uv_timer_t *t) {
  life_t *l = t->data;
  attnd_server_t *s = &l->s;
  int idle = attnd_sched_inflight(s->sched) == 0 &&
             atomic_load(&s->active) == 0 && atomic_load(&s->reloading) == 0;
  int late = s->cfg->drain_timeout_s > 0 &&
             attnd_now_ms() - l->drain_started >
                 (double)s->cfg->drain_timeout_s * 1000.0;
  if (!idle && !late)
    return;
  if (!idle) {
    fprintf(stderr,
            "{\"event\":\"drain_timeout\",\"inflight\":%d,\"active\":%d,"
            "\"reloading\":%d}\n",
            attnd_sched_inflight(s->sched), atomic_load(&s->active),
            atomic_load(&s->reloading) != 0);
    l->exit_code = 1;
    l->drain_timed_out = 1;
  }
  uv_timer_stop(t);
  uv_stop(&s->loop);
}

static void on_signal(uv_signal_t *sig, int signum) {
  life_t *l = sig->data;
  pthread_mutex_lock(&notify_lock);
  int again = atomic_exchange(&l->s.draining, 1);
  if (!again)
    attnd_notify("STOPPING=1\nSTATUS=draining");
  pthread_mutex_unlock(&notify_lock);
  if (again)
    return;
  /* inflight: queued or computing; active: every request not yet
   * answered, bodies still uploading included, which the drain waits for
   * too (drain_timeout's line has the same two) */
  fprintf(stderr,
          "{\"event\":\"draining\",\"signal\":%d,\"inflight\":%d,"
          "\"active\":%d}\n",
          signum, attnd_sched_inflight(l->s.sched), atomic_load(&l->s.active));
  l->drain_started = attnd_now_ms();
  uv_timer_start(&l->drain_timer, on_drain_tick, 0, 20);
}

attnd_layer_set_t *attnd_server_layers(attnd_server_t *s) {
  uv_mutex_lock(&s->layers_lock);
  attnd_layer_set_t *set = attnd_layer_set_ref(s->layers);
  uv_mutex_unlock(&s->layers_lock);
  return set;
}

/* Logs one event with a message, JSON-escaped. */
static void log_event(const char *event, const char *msg) {
  attnd_buf_t b;
  attnd_buf_init(&b);
  attnd_buf_json_string(&b, msg, strlen(msg));
  fprintf(stderr, "{\"event\":\"%s\",\"error\":%.*s}\n", event,
          b.oom ? 2 : (int)b.len, b.oom ? "\"\"" : b.data);
  attnd_buf_free(&b);
}

/* Logs the set that was loaded. */
static void log_layers(const char *event, const attnd_layer_set_t *set) {
  fprintf(stderr,
          "{\"event\":\"%s\",\"layers\":%zu,\"bytes\":%zu,\"device_bytes\":"
          "%lld,\"seconds\":%.3f}\n",
          event, attnd_layer_set_count(set), attnd_layer_set_bytes(set),
          (long long)attnd_layer_set_device_bytes(set),
          attnd_layer_set_load_seconds(set));
}

/* Logs, one line a directory, the *.safetensors files a load left out
 * (the rule in layers.h): a user who put an adapter or another model's
 * weights beside the shards sees that attnd did not read them. */
static void log_skipped(const attnd_layer_set_t *set) {
  const attnd_layer_skip_t *k;
  for (size_t i = 0; (k = attnd_layer_set_skip(set, i)); i++) {
    attnd_buf_t b;
    attnd_buf_init(&b);
    attnd_buf_puts(&b, "{\"event\":\"layers_skipped\",\"dir\":");
    attnd_buf_json_string(&b, k->dir, strlen(k->dir));
    attnd_buf_puts(&b, ",\"by\":");
    attnd_buf_json_string(&b, k->by, strlen(k->by));
    attnd_buf_puts(&b, ",\"files\":[");
    for (size_t f = 0; f < k->n; f++) {
      if (f)
        attnd_buf_puts(&b, ",");
      attnd_buf_json_string(&b, k->files[f], strlen(k->files[f]));
    }
    attnd_buf_puts(&b, "]}\n");
    if (!b.oom)
      fwrite(b.data, 1, b.len, stderr);
    attnd_buf_free(&b);
  }
}

/* Where the GPU serves (device_at_start), a new set's weights go there
 * once, in the config's precision, counted by its budget, so that cuda
 * calls in that precision read them in place; when they cannot (the
 * budget is short, a copy failed), the log says why and each cuda call
 * copies them in, as where the set stays on the host. */
static void layers_to_device(attnd_server_t *s, attnd_layer_set_t *set) {
  static const attnd_device_memory_t cuda = {attn_cuda_alloc, attn_cuda_free,
                                             attn_cuda_copy, NULL};
  char msg[1024];
  if (s->device_at_start && attnd_layer_set_count(set) &&
      attnd_layer_set_to_device(set, &cuda,
                                strcmp(s->cfg->precision, "bf16") == 0,
                                &s->device_budget, msg, sizeof msg) < 0)
    log_event("layers_device_failed", msg);
}

/* Loads cfg's layers into s->layers at start: 0, or -1 with the reason on
 * stderr. */
static int layers_init(attnd_server_t *s) {
  char msg[2048];
  uv_mutex_init(&s->layers_lock);
  if (attnd_layers_load(s->cfg->layers, &s->layers, msg, sizeof msg) < 0) {
    fprintf(stderr, "attnd: layers: %s\n", msg);
    return -1;
  }
  log_skipped(s->layers);
  layers_to_device(s, s->layers);
  if (attnd_layer_set_count(s->layers))
    log_layers("layers_loaded", s->layers);
  return 0;
}

/* READY=1 for the service manager, at start and after a reload: the
 * address attnd serves on is in STATUS, for systemctl status. */
static void notify_ready(const attnd_server_t *s) {
  const char *host = s->cfg->host;
  int v6 = strchr(host, ':') != NULL;
  attnd_notify("READY=1\nMAINPID=%ld\nSTATUS=listening on %s://%s%s%s:%d",
               (long)getpid(), s->https ? "https" : "http", v6 ? "[" : "", host,
               v6 ? "]" : "", s->port);
}

/* A reload of the layers, off the loop thread (loading takes seconds): the
 * new set replaces the old one at once; requests in flight hold the old
 * one until they finish. A load that fails keeps the old set. When a
 * SIGHUP came while it ran (reloading 2), the files may have changed after
 * they were read: it loads them again. */
static void *reload_layers(void *arg) {
  attnd_server_t *s = arg;
  char msg[2048];
  attnd_layer_set_t *set;
  for (;;) {
    if (attnd_layers_load(s->cfg->layers, &set, msg, sizeof msg) < 0) {
      /* counted first: whoever reads the log line finds it in /metrics */
      attnd_metrics_reloaded(s->metrics, ATTND_RELOAD_LAYERS, 0);
      log_event("layers_reload_failed", msg);
    } else {
      log_skipped(set);
      layers_to_device(s, set);
      uv_mutex_lock(&s->layers_lock);
      attnd_layer_set_t *old = s->layers;
      s->layers = set;
      uv_mutex_unlock(&s->layers_lock);
      /* held on by requests or sessions, the old set's weights are
       * counted in the requests' budget until it is freed (at once, where
       * this reference was the last) */
      attnd_layer_set_charge(old, &s->budget);
      attnd_layer_set_unref(old);
      attnd_metrics_reloaded(s->metrics, ATTND_RELOAD_LAYERS, 1);
      log_layers("layers_reloaded", set);
    }
    /* The loop thread changes reloading under notify_lock too: 1 here is
     * no SIGHUP since this pass began, and the reload is done; 2, one
     * came, and it goes again. Setting 0 is the last touch of s (the
     * teardown waits for it): READY=1 is sent before. */
    pthread_mutex_lock(&notify_lock);
    int done = atomic_load(&s->reloading) == 1;
    if (done && !atomic_load(&s->draining))
      notify_ready(s);
    atomic_store(&s->reloading, done ? 0 : 1);
    pthread_mutex_unlock(&notify_lock);
    if (done)
      break;
  }
  return NULL;
}

/* SIGHUP's renewal of the certificate: tls_cert_file and tls_key_file read
 * and checked as at the start (tls.h). A good pair serves the handshakes
 * from now on, while the connections open keep theirs; a bad one leaves
 * the pair in force, and is counted (attnd_reload_failures_total) so
 * that a renewal that failed can be alerted on. The log gives the new
 * certificate's serial and expiry, and the pairs in memory: the new one, and
 * the old ones that connections opened before still hold. */
static void reload_tls(attnd_server_t *s) {
  char msg[2048], serial[64], expires[32];
  attnd_tls_pair_t *pair;
  if (!s->https)
    return;
  if (attnd_tls_load(s->cfg->tls_cert_file, s->cfg->tls_key_file, &pair, msg,
                     sizeof msg) < 0) {
    /* counted first: whoever reads the log line finds it in /metrics */
    attnd_metrics_reloaded(s->metrics, ATTND_RELOAD_TLS, 0);
    log_event("tls_reload_failed", msg);
    return;
  }
  attnd_tls_describe(pair, serial, sizeof serial, expires, sizeof expires);
  attnd_http_tls_swap(s, pair);
  attnd_metrics_reloaded(s->metrics, ATTND_RELOAD_TLS, 1);
  fprintf(stderr,
          "{\"event\":\"tls_reloaded\",\"serial\":\"%s\",\"expires\":\"%s\","
          "\"in_memory\":%ld}\n",
          serial, expires, (long)attnd__tls_pairs_live);
}

/* SIGHUP: re-read api_keys_file and the TLS certificate, and load the
 * layers again (in a thread of its own; one reload at a time). The new key
 * set replaces the old one atomically (auth.h); when the file cannot be
 * read or holds a bad line, the old keys stay in force. The log names the
 * file, never a key. */
static void on_sighup(uv_signal_t *sig, int signum) {
  life_t *l = sig->data;
  char msg[1024];
  (void)signum;
  /* The service manager hears RELOADING=1 now and READY=1 once the keys
   * and the certificate are read and the layers' reload, if one runs, has
   * ended: then from the reload's thread, under notify_lock, which this
   * handler holds until the keys and the certificate are read, so that a reload
   * that ends first waits. MONOTONIC_USEC is what systemd's Type=notify-reload
   * matches with its own SIGHUP. Draining, attnd has said STOPPING=1, and says
   * nothing more. */
  pthread_mutex_lock(&notify_lock);
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  if (!atomic_load(&l->s.draining))
    attnd_notify("RELOADING=1\nMONOTONIC_USEC=%lld\nSTATUS=reloading",
                 (long long)now.tv_sec * 1000000 + now.tv_nsec / 1000);
  /* none running: start one; one running: it goes again when it ends (a
   * SIGHUP is never lost to the reload before it). The loop thread alone
   * runs this; the reload thread moves 1 to 0 or 2 to 1. */
  for (int cur = atomic_load(&l->s.reloading); l->s.cfg->layers[0];) {
    if (cur == 2 ||
        (cur == 1 && atomic_compare_exchange_strong(&l->s.reloading, &cur, 2)))
      break;
    if (cur == 0 && atomic_compare_exchange_strong(&l->s.reloading, &cur, 1)) {
      pthread_t t;
      if (pthread_create(&t, NULL, reload_layers, &l->s) == 0)
        pthread_detach(t);
      else
        atomic_store(&l->s.reloading, 0);
      break;
    }
  }
  int n = attnd_auth_reload(&l->s.auth, msg, sizeof msg);
  attnd_metrics_reloaded(l->s.metrics, ATTND_RELOAD_API_KEYS, n >= 0);
  if (n < 0) {
    attnd_buf_t b;
    attnd_buf_init(&b);
    attnd_buf_json_string(&b, msg, strlen(msg));
    fprintf(stderr,
            "{\"event\":\"keys_reload_failed\",\"keys\":%zu,\"error\":%.*s}\n",
            attnd_auth_count(&l->s.auth), b.oom ? 2 : (int)b.len,
            b.oom ? "\"\"" : b.data);
    attnd_buf_free(&b);
  } else {
    fprintf(stderr, "{\"event\":\"keys_reloaded\",\"keys\":%d}\n", n);
  }
  reload_tls(&l->s);
  if (atomic_load(&l->s.reloading) == 0 && !atomic_load(&l->s.draining))
    notify_ready(&l->s); /* no layers' reload runs */
  pthread_mutex_unlock(&notify_lock);
}

/* The security settings (auth.h, cors.h): 0, or -1 with the reason on
 * stderr. */
static int security_init(attnd_server_t *s) {
  const attnd_config_t *cfg = s->cfg;
  char msg[1024];
  if (attnd_auth_init(&s->auth, cfg->api_keys, cfg->api_keys_file,
                      cfg->public_paths, msg, sizeof msg) < 0 ||
      attnd_cors_init(&s->cors, cfg->cors_allow_origins, msg, sizeof msg) < 0) {
    fprintf(stderr, "attnd: %s\n", msg);
    return -1;
  }
  return 0;
}

/* The access log (access_log.h): 0, or -1 with the reason on stderr. */
static int access_log_init(attnd_server_t *s) {
  char msg[1024];
  if (attnd_access_log_open(s->cfg->access_log, &s->access_log, msg,
                            sizeof msg) < 0) {
    fprintf(stderr, "attnd: %s\n", msg);
    return -1;
  }
  return 0;
}

/* Where a GPU serves, pins pinned_memory_bytes for requests' tensors
 * (sched/pinned.h); a pool that cannot be pinned is logged, and requests
 * use the heap. The pool, this one or one the caller started (a test's, of
 * ordinary memory), is taken out of the requests' budget. */
static void pinned_init(attnd_server_t *s) {
  int64_t bytes = s->cfg->pinned_memory_bytes;
  attnd_pinned_stats_t st;
  attnd_pinned_stats(&st);
  if (st.bytes == 0 && bytes > 0 && s->device_at_start) {
    if (attnd_pinned_start((size_t)bytes, NULL) < 0)
      fprintf(stderr, "{\"event\":\"pinned_memory_failed\",\"bytes\":%lld}\n",
              (long long)bytes);
    attnd_pinned_stats(&st);
  }
  if (st.bytes == 0)
    return;
  s->budget.max -= st.bytes;
  fprintf(stderr, "{\"event\":\"pinned_memory\",\"bytes\":%lld}\n",
          (long long)st.bytes);
}

/* Descriptors attnd needs beside its connections': the listening socket,
 * the loops' and threads' own, the access log, and the files a reload of
 * the layers or keys opens. */
#define OPEN_FILES_RESERVE 64

/* Raises the soft limit on open files (RLIMIT_NOFILE) to what
 * max_connections needs, within the hard limit. The soft limit a shell or
 * systemd gives (1024) is what max_connections' default alone needs, and
 * past it accept() fails: new clients wait in the backlog, unanswered,
 * until others close, and the log (accept_failed, http/listen.c) speaks
 * of open files, not of max_connections. (The soft limit is low for programs
 * that use select(); attnd polls.) A hard limit too low to raise it to is
 * named at start. Main thread, before the daemon starts. */
static void open_files_init(const attnd_config_t *cfg) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
    return;
  rlim_t need = (rlim_t)cfg->max_connections + OPEN_FILES_RESERVE;
  if (rl.rlim_cur < need && rl.rlim_max != rl.rlim_cur) {
    struct rlimit up = {
        rl.rlim_max == RLIM_INFINITY || rl.rlim_max > need ? need : rl.rlim_max,
        rl.rlim_max};
    if (setrlimit(RLIMIT_NOFILE, &up) == 0)
      rl.rlim_cur = up.rlim_cur;
  }
  if (rl.rlim_cur < need)
    fprintf(stderr,
            "{\"event\":\"open_files_short\",\"max_connections\":%lld,"
            "\"open_files\":%llu,\"needed\":%llu,\"message\":\"the hard "
            "limit on open files is below max_connections plus %d for attnd "
            "itself: past about %llu connections, new ones wait unaccepted; "
            "raise the limit (ulimit -n, LimitNOFILE, --ulimit nofile) or "
            "lower max_connections\"}\n",
            (long long)cfg->max_connections, (unsigned long long)rl.rlim_cur,
            (unsigned long long)need, OPEN_FILES_RESERVE,
            rl.rlim_cur > OPEN_FILES_RESERVE
                ? (unsigned long long)(rl.rlim_cur - OPEN_FILES_RESERVE)
                : 0ULL);
}

int attnd_serve(const attnd_config_t *cfg) {
  life_t l = {.s = {.cfg = cfg}};
  attnd_server_t *s = &l.s;
  /* SIGHUP's default action ends the process: one sent while attnd starts
   * (loading layers takes seconds) killed it. It is held from here, in
   * this thread and every thread started from it, until its handler is
   * set below; one that came meanwhile then reloads. */
  sigset_t hup;
  sigemptyset(&hup);
  sigaddset(&hup, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &hup, NULL);
  /* A write to a pipe nobody reads (stderr piped to a log reader that has
   * gone, as tee after Ctrl-C) fails with EPIPE, which the writers
   * tolerate; SIGPIPE's default action would end the process at its next
   * event, the drain's own among them, with requests in flight. */
  signal(SIGPIPE, SIG_IGN);
  /* A write past the limit on a file's size (ulimit -f, LimitFSIZE) fails
   * with EFBIG, which the access log tolerates (its lines are lost, and
   * stderr says so); SIGXFSZ's default action would end the process at
   * the access log's first line past the limit. */
  signal(SIGXFSZ, SIG_IGN);
  attnd_notify_open();
  attn_backend_info(&s->backend);
  s->id_prefix = attnd_random_u64();
  s->budget.max = cfg->max_memory_bytes - cfg->kv_cache_bytes;
  s->device_budget.max = cfg->max_device_memory_bytes;
  attn_cuda_info_t ci;
  attn_cuda_info(&ci);
  s->device_at_start = ci.usable && strcmp(cfg->backend, "cpu") != 0;
  pinned_init(s);
  attnd__scratch_keep = (size_t)cfg->scratch_keep_bytes;
  attnd__scratch_budget = &s->budget;
  s->metrics = attnd_metrics_new();
  s->sessions =
      attnd_sessions_new(cfg->kv_cache_bytes, &s->device_budget, NULL);
  uv_loop_init(&s->loop);
  s->sched = attnd_sched_new(&s->loop, (int)cfg->workers, (int)cfg->queue_depth,
                             attnd_request_run, attnd_http_job_done, s);
  if (s->sched && cfg->threads_per_request == 0) { /* auto */
    attnd_sched_set_threads(s->sched, (int)cfg->cores,
                            (int)cfg->max_threads_per_request);
    attnd_sched_set_arriving(s->sched, &s->inflight, &s->slow_bodies);
  }
  if (s->sched)
    attnd_sched_set_release(s->sched, attnd_sessions_released,
                            attnd_sessions_withdraw);
  if (s->sched)
    attnd_sched_set_batching(
        s->sched, &(attnd_sched_batching_t){
                      .run_batch = attnd_request_run_batch,
                      .compatible = attnd_request_compatible,
                      .window_ms = (double)cfg->batch_window_us / 1000.0,
                      .max_tokens = cfg->max_batch_tokens});
  open_files_init(cfg);
  if (s->metrics == NULL || s->sessions == NULL || s->sched == NULL ||
      access_log_init(s) < 0 || security_init(s) < 0 || layers_init(s) < 0 ||
      attnd_http_start(s) < 0)
    return 1;
  /* the start's loads are the first that succeeded: without them attnd
   * would not be serving */
  for (int w = 0; w < ATTND_RELOAD_COUNT; w++)
    attnd_metrics_reloaded(s->metrics, (attnd_reload_t)w, 1);

  uv_signal_init(&s->loop, &l.sigterm);
  uv_signal_init(&s->loop, &l.sigint);
  uv_signal_init(&s->loop, &l.sighup);
  l.sigterm.data = l.sigint.data = l.sighup.data = &l;
  uv_signal_start(&l.sigterm, on_signal, SIGTERM);
  uv_signal_start(&l.sigint, on_signal, SIGINT);
  uv_signal_start(&l.sighup, on_sighup, SIGHUP);
  pthread_sigmask(SIG_UNBLOCK, &hup, NULL); /* here, on the loop thread */
  uv_timer_init(&s->loop, &l.drain_timer);
  l.drain_timer.data = &l;

  char tpr[24] = "\"auto\"";
  if (cfg->threads_per_request)
    snprintf(tpr, sizeof tpr, "%lld", (long long)cfg->threads_per_request);
  fprintf(stderr,
          "{\"event\":\"listening\",\"host\":\"%s\",\"port\":%d,\"version\":"
          "\"%s\",\"workers\":%lld,\"threads_per_request\":%s,"
          "\"max_threads_per_request\":%lld,\"queue_depth\":%lld,\"blas\":\"%"
          "s\",\"blas_kernel\":\"%s\","
          "\"simd\":\"%s\",\"tls\":%s,\"api_keys\":%zu,\"cors\":%s}\n",
          cfg->host, s->port, ATTN_VERSION, (long long)cfg->workers, tpr,
          (long long)cfg->max_threads_per_request, (long long)cfg->queue_depth,
          s->backend.blas, s->backend.blas_kernel,
          attn_isa_name(s->backend.isa), s->https ? "true" : "false",
          attnd_auth_count(&s->auth), s->cors.enabled ? "true" : "false");
  /* listening, the layers loaded: systemctl start returns now */
  notify_ready(s);

  uv_run(&s->loop, UV_RUN_DEFAULT); /* until drained */
  if (l.drain_timed_out) {
    /* Work is still in flight, and nothing of it can be stopped in order:
     * its connections are suspended, which MHD_stop_daemon refuses by
     * aborting; a worker may be inside a call that cannot be interrupted
     * (on the GPU, a kernel), so that nothing it reads or writes may be
     * freed; and exit()'s handlers (the CUDA runtime's teardown among
     * them) must not run under it. The access log is flushed a line at a
     * time, so the process ends here, as drain_timeout_s says. */
    fprintf(stderr, "{\"event\":\"stopped\",\"exit_code\":%d}\n", l.exit_code);
    _exit(l.exit_code);
  }

  attnd_http_stop(s);
  attnd_sched_close(s->sched);
  uv_close((uv_handle_t *)&l.sigterm, NULL);
  uv_close((uv_handle_t *)&l.sigint, NULL);
  uv_close((uv_handle_t *)&l.sighup, NULL);
  /* Closing them restored the default actions; a signal from here on
   * (a second SIGTERM as sessions and layers are freed) must not end the
   * process, with 143, that is already stopping with its own status. */
  signal(SIGTERM, SIG_IGN);
  signal(SIGINT, SIG_IGN);
  signal(SIGHUP, SIG_IGN);
  uv_close((uv_handle_t *)&l.drain_timer, NULL);
  uv_run(&s->loop, UV_RUN_DEFAULT); /* close callbacks */
  uv_loop_close(&s->loop);
  attnd_sched_free(s->sched);
  attnd_metrics_free(s->metrics);
  attnd_sessions_free(s->sessions); /* a cache: sessions end with the process */
  attnd_auth_free(&s->auth);
  attnd_cors_free(&s->cors);
  while (atomic_load(&s->reloading)) /* a reload thread still reads s */
    usleep(10000);
  attnd_layer_set_unref(s->layers);
  uv_mutex_destroy(&s->layers_lock);
  attnd_notify_close();
  attnd_pinned_stop(); /* every request is freed */
  fprintf(stderr, "{\"event\":\"stopped\",\"exit_code\":%d}\n", l.exit_code);
  attnd_access_log_close(s->access_log);
  return l.exit_code;
}
