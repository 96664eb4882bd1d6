/* server/metrics.c: see metrics.h. */
#include "metrics.h"

#include <ctype.h>
#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "attn/attn.h"
#include "errors.h"
#include "sched/pinned.h"

/* Statuses counted by name: those attnd answers that are not errors, and
 * libmicrohttpd's 500 (a reply that could not be made), with every status
 * of the error table (errors.h) under /v1 and OIP and those libmicrohttpd
 * answers itself (ATTND_LIBRARY_STATUS_MAP), sorted and each once
 * (the metrics' statuses, add_status); anything else is counted as "other". */
#define LIBRARY_STATUS(code, reason) code,
static const int own_statuses[] = {200, 201, 204, 500,
                                   ATTND_LIBRARY_STATUS_MAP(LIBRARY_STATUS)};
#undef LIBRARY_STATUS
#define NSTATUS                                                                \
  (sizeof own_statuses / sizeof own_statuses[0] + 2 * ATTND_ERR_COUNT)

static const char *const protocols[ATTND_PROTO_COUNT] = {
#define PROTO_LABEL(name, label, computes) label,
    ATTND_PROTOCOL_MAP(PROTO_LABEL)
#undef PROTO_LABEL
};
static const int computes[ATTND_PROTO_COUNT] = {
#define PROTO_COMPUTES(name, label, computes) computes,
    ATTND_PROTOCOL_MAP(PROTO_COMPUTES)
#undef PROTO_COMPUTES
};

static const char *const reasons[ATTND_REJECT_COUNT] = {
#define REASON_LABEL(name, label) label,
    ATTND_REJECT_MAP(REASON_LABEL)
#undef REASON_LABEL
};

static const char *const reload_what[ATTND_RELOAD_COUNT] = {
#define RELOAD_LABEL(name, label) label,
    ATTND_RELOAD_MAP(RELOAD_LABEL)
#undef RELOAD_LABEL
};

/* Context-length classes (key length <= bound) and latency buckets (s):
 * from 10 us, below a session step's compute, to 600 s, max_timeout_ms's
 * default, at most a factor of 3 apart, so that a quantile can tell a
 * step from a small request and a long request from a minute. Both are
 * listed in docs/operations.md's table of label values, as /metrics
 * writes them (check_metrics' test_label_values_listed). */
static const int64_t ctx_bounds[] = {128, 512, 2048, 8192, 32768};
#define NCTX (sizeof ctx_bounds / sizeof ctx_bounds[0] + 1)
static const double buckets[] = {
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025,
    0.005,   0.01,     0.025,   0.05,   0.1,     0.25,   0.5,   1,
    2.5,     5,        10,      30,     60,      120,    300,   600};
#define NBUCKET (sizeof buckets / sizeof buckets[0] + 1)

/* The sums are kept in nanoseconds, each observation rounded: whole
 * microseconds cut each session step's few microseconds by up to one, and
 * an inline request's wait to nothing. */
typedef struct hist {
  atomic_uint_fast64_t count[NCTX][NBUCKET]; /* not cumulative */
  atomic_uint_fast64_t sum_ns[NCTX];
} hist_t;

enum { H_QUEUE, H_COMPUTE, H_TOTAL, NHIST };
static const char *const hist_names[NHIST] = {"attnd_queue_wait_seconds",
                                              "attnd_compute_seconds",
                                              "attnd_request_seconds"};
static const char *const hist_help[NHIST] = {
    "Time requests waited in the queue, whatever their outcome.",
    "Time computed requests took to compute (a batched session step: its "
    "batch's).",
    "Time from a computed request's arrival to the start of its reply "
    "with the result."};

/* The backends a request computes on (attn_backend_kind_t), labelled by
 * the core's names. */
#define NBACKEND 2

/* The core's stages (attn_timing_t), in its order. */
#define NSTAGE 3
static const char *const stages[NSTAGE] = {"projection", "attention", "output"};

struct attnd_metrics {
  int statuses[NSTATUS]; /* the first nstatus, ascending */
  size_t nstatus;
  atomic_uint_fast64_t by_status[ATTND_PROTO_COUNT][NSTATUS + 1];
  atomic_uint_fast64_t computed[NBACKEND], compute_ns[NBACKEND];
  atomic_uint_fast64_t stage_ns[NBACKEND][NSTAGE];
  atomic_uint_fast64_t rejected[ATTND_REJECT_COUNT];
  atomic_uint_fast64_t reload_failures[ATTND_RELOAD_COUNT];
  atomic_int_fast64_t reload_ok_ms[ATTND_RELOAD_COUNT]; /* since the epoch */
  hist_t hist[ATTND_PROTO_COUNT][NHIST];                /* those that compute */
};

/* Adds status s to the n sorted in st, unless it is there. */
static void add_status(int *st, size_t *n, int s) {
  size_t i = 0;
  while (i < *n && st[i] < s)
    i++;
  if (i < *n && st[i] == s)
    return;
  for (size_t k = *n; k > i; k--)
    st[k] = st[k - 1];
  st[i] = s;
  (*n)++;
}

attnd_metrics_t *attnd_metrics_new(void) {
  attnd_metrics_t *m = calloc(1, sizeof(attnd_metrics_t));
  if (m == NULL)
    return NULL;
  for (size_t i = 0; i < sizeof own_statuses / sizeof own_statuses[0]; i++)
    add_status(m->statuses, &m->nstatus, own_statuses[i]);
  for (int c = 0; c < ATTND_ERR_COUNT; c++) {
    add_status(m->statuses, &m->nstatus, attnd_error_status(c));
    add_status(m->statuses, &m->nstatus, attnd_error_status_v2(c));
  }
  return m;
}

void attnd_metrics_free(attnd_metrics_t *m) {
  free(m);
}

void attnd_metrics_request(attnd_metrics_t *m, attnd_protocol_t proto,
                           int status) {
  size_t i = 0; /* past the last: "other" */
  while (i < m->nstatus && m->statuses[i] != status)
    i++;
  atomic_fetch_add_explicit(&m->by_status[proto][i], 1, memory_order_relaxed);
}

void attnd_metrics_reject(attnd_metrics_t *m, attnd_reject_t why) {
  if (why == ATTND_REJECT_NONE)
    return;
  atomic_fetch_add_explicit(&m->rejected[why], 1, memory_order_relaxed);
}

void attnd_metrics_reloaded(attnd_metrics_t *m, attnd_reload_t what, int ok) {
  struct timespec now;
  if (!ok) {
    atomic_fetch_add_explicit(&m->reload_failures[what], 1,
                              memory_order_relaxed);
    return;
  }
  clock_gettime(CLOCK_REALTIME, &now);
  atomic_store_explicit(&m->reload_ok_ms[what],
                        (int_fast64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000,
                        memory_order_relaxed);
}

/* The boot time, in seconds since the epoch (/proc/stat's btime), read
 * once: it does not change, and /proc/stat lists every CPU and interrupt
 * before it. -1 where it cannot be read. */
static double btime = -1;
static void read_btime(void) {
  FILE *f = fopen("/proc/stat", "r");
  char line[256];
  long long v;
  if (f == NULL)
    return;
  /* fgets cuts a long line (intr) into pieces: only a piece that starts a
   * line can start with "btime " */
  int at_start = 1;
  while (fgets(line, sizeof line, f)) {
    if (at_start && sscanf(line, "btime %lld", &v) == 1) {
      btime = (double)v;
      break;
    }
    at_start = strchr(line, '\n') != NULL;
  }
  fclose(f);
}

/* Fields 22 to 24 of /proc/self/stat (proc(5)): the start in clock ticks
 * after the boot, the virtual size in bytes and the resident size in
 * pages. The name (field 2) is in parentheses and may hold spaces and
 * parentheses itself: the fields are counted from the last ')'. */
static void read_stat(attnd_process_t *p) {
  char buf[1024];
  FILE *f = fopen("/proc/self/stat", "r");
  size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
  if (f)
    fclose(f);
  buf[n] = 0;
  const char *at = strrchr(buf, ')');
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, read_btime);
  for (int field = 3; at && field <= 24; field++) {
    at = strchr(at + 1, ' ');
    if (at == NULL)
      break;
    double v = strtod(at + 1, NULL);
    if (field == 22 && btime >= 0)
      p->start_time_seconds = btime + v / (double)sysconf(_SC_CLK_TCK);
    else if (field == 23)
      p->virtual_bytes = v;
    else if (field == 24)
      p->resident_bytes = v * (double)sysconf(_SC_PAGESIZE);
  }
}

/* The open descriptors, as /proc/self/fd lists them, less the one that
 * reads the listing. */
static double open_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  if (d == NULL)
    return -1;
  double n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    n += isdigit((unsigned char)e->d_name[0]) && atoi(e->d_name) != dirfd(d);
  closedir(d);
  return n;
}

void attnd_process_read(attnd_process_t *p) {
  struct rusage ru;
  struct rlimit rl;
  p->cpu_seconds = p->start_time_seconds = p->resident_bytes =
      p->virtual_bytes = p->open_fds = p->max_fds = -1;
  if (getrusage(RUSAGE_SELF, &ru) == 0)
    p->cpu_seconds = (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
                     (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
  read_stat(p);
  p->open_fds = open_fds();
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
    p->max_fds = rl.rlim_cur == RLIM_INFINITY ? INFINITY : (double)rl.rlim_cur;
}

/* ms in whole nanoseconds, rounded; 0 for a negative time. */
static uint64_t ns_of(double ms) {
  return ms > 0 ? (uint64_t)llround(ms * 1e6) : 0;
}

static void observe(hist_t *h, size_t ctx, double ms) {
  double s = ms / 1000.0;
  size_t b = 0;
  while (b < NBUCKET - 1 && s > buckets[b])
    b++;
  atomic_fetch_add_explicit(&h->count[ctx][b], 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&h->sum_ns[ctx], ns_of(ms), memory_order_relaxed);
}

void attnd_metrics_ran(attnd_metrics_t *m, int backend, int batch,
                       double compute_ms, const double stage_ms[NSTAGE]) {
  double share = batch > 1 ? 1.0 / batch : 1.0;
  if (backend < 0 || backend >= NBACKEND)
    return;
  atomic_fetch_add_explicit(&m->computed[backend], 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&m->compute_ns[backend], ns_of(compute_ms * share),
                            memory_order_relaxed);
  for (int k = 0; k < NSTAGE; k++)
    atomic_fetch_add_explicit(&m->stage_ns[backend][k],
                              ns_of(stage_ms[k] * share), memory_order_relaxed);
}

/* The context-length class of a key length. */
static size_t ctx_of(int64_t context_len) {
  size_t c = 0;
  while (c < NCTX - 1 && context_len > ctx_bounds[c])
    c++;
  return c;
}

void attnd_metrics_waited(attnd_metrics_t *m, attnd_protocol_t proto,
                          int64_t context_len, double queue_ms) {
  observe(&m->hist[proto][H_QUEUE], ctx_of(context_len), queue_ms);
}

void attnd_metrics_observe(attnd_metrics_t *m, attnd_protocol_t proto,
                           int64_t context_len, double compute_ms,
                           double total_ms) {
  size_t c = ctx_of(context_len);
  observe(&m->hist[proto][H_COMPUTE], c, compute_ms);
  observe(&m->hist[proto][H_TOTAL], c, total_ms);
}

static void ctx_label(char *s, size_t n, size_t c) {
  if (c < NCTX - 1)
    snprintf(s, n, "%lld", (long long)ctx_bounds[c]);
  else
    snprintf(s, n, "+Inf");
}

/* The reload families, a series for each of what is configured, and
 * none at all where nothing is: with plain HTTP, a tls series would say
 * that a certificate was renewed. */
static void render_reloads(const attnd_metrics_t *m, const attnd_gauges_t *g,
                           attnd_buf_t *b) {
  int any = 0;
  for (int w = 0; w < ATTND_RELOAD_COUNT; w++)
    any |= g->reloads[w];
  if (!any)
    return;
  attnd_buf_printf(b, "# HELP attnd_reload_failures_total Reloads that a "
                      "SIGHUP asked for and that were refused, by what they "
                      "would have replaced, which stays in force.\n"
                      "# TYPE attnd_reload_failures_total counter\n");
  for (int w = 0; w < ATTND_RELOAD_COUNT; w++)
    if (g->reloads[w])
      attnd_buf_printf(b, "attnd_reload_failures_total{what=\"%s\"} %llu\n",
                       reload_what[w],
                       (unsigned long long)atomic_load_explicit(
                           &m->reload_failures[w], memory_order_relaxed));
  attnd_buf_printf(
      b, "# HELP attnd_last_reload_success_timestamp_seconds When the last "
         "load that succeeded ended (the start's, or a SIGHUP's), by what it "
         "loaded, in seconds since the epoch.\n"
         "# TYPE attnd_last_reload_success_timestamp_seconds gauge\n");
  for (int w = 0; w < ATTND_RELOAD_COUNT; w++)
    if (g->reloads[w])
      attnd_buf_printf(
          b, "attnd_last_reload_success_timestamp_seconds{what=\"%s\"} %.3f\n",
          reload_what[w],
          (double)atomic_load_explicit(&m->reload_ok_ms[w],
                                       memory_order_relaxed) /
              1e3);
}

/* The process collector's families, with the names, types and units the
 * Prometheus client libraries give them, so that their dashboards read
 * attnd as they read any other process. */
static const struct {
  const char *name, *type, *help;
  size_t at; /* the reading's offset in attnd_process_t */
  int decimals;
} process_families[] = {
    {"process_cpu_seconds_total", "counter",
     "User and system CPU time spent, in seconds.",
     offsetof(attnd_process_t, cpu_seconds), 6},
    {"process_resident_memory_bytes", "gauge", "Resident memory, in bytes.",
     offsetof(attnd_process_t, resident_bytes), 0},
    {"process_virtual_memory_bytes", "gauge", "Virtual memory, in bytes.",
     offsetof(attnd_process_t, virtual_bytes), 0},
    {"process_open_fds", "gauge", "Open file descriptors.",
     offsetof(attnd_process_t, open_fds), 0},
    {"process_max_fds", "gauge",
     "The limit on open file descriptors (the soft one).",
     offsetof(attnd_process_t, max_fds), 0},
    {"process_start_time_seconds", "gauge",
     "When the process started, in seconds since the epoch.",
     offsetof(attnd_process_t, start_time_seconds), 2},
};

static void render_process(const attnd_process_t *p, attnd_buf_t *b) {
  for (size_t k = 0; k < sizeof process_families / sizeof process_families[0];
       k++) {
    double v = *(const double *)((const char *)p + process_families[k].at);
    if (v < 0)
      continue;
    attnd_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n",
                     process_families[k].name, process_families[k].help,
                     process_families[k].name, process_families[k].type);
    if (isinf(v))
      attnd_buf_printf(b, "%s +Inf\n", process_families[k].name);
    else
      attnd_buf_printf(b, "%s %.*f\n", process_families[k].name,
                       process_families[k].decimals, v);
  }
}

/* attnd_build_info: 1, labelled by the version (`attnd --version`'s), the
 * backends built in (the core's names, "+" between them) and the SIMD
 * path this CPU runs (the listening line's "simd"). */
static void render_build_info(attnd_buf_t *b) {
  attn_backend_t be;
  attn_cuda_info_t ci;
  char backends[32] = "";
  attn_backend_info(&be);
  attn_cuda_info(&ci);
  for (int k = 0; k < NBACKEND; k++)
    if (k == ATTN_BACKEND_CPU || ci.built)
      snprintf(backends + strlen(backends), sizeof backends - strlen(backends),
               "%s%s", backends[0] ? "+" : "",
               attn_backend_kind_name((attn_backend_kind_t)k));
  attnd_buf_printf(b,
                   "# HELP attnd_build_info 1, labelled by the version, the "
                   "backends built in and the SIMD path this CPU runs.\n"
                   "# TYPE attnd_build_info gauge\n"
                   "attnd_build_info{version=\"%s\",backends=\"%s\","
                   "simd=\"%s\"} 1\n",
                   ATTN_VERSION, backends, attn_isa_name(be.isa));
}

void attnd_metrics_render(const attnd_metrics_t *m, const attnd_gauges_t *g,
                          attnd_buf_t *b) {
  attnd_buf_printf(b, "# HELP attnd_requests_total HTTP requests answered, by "
                      "protocol and status.\n"
                      "# TYPE attnd_requests_total counter\n");
  for (int p = 0; p < ATTND_PROTO_COUNT; p++)
    for (size_t i = 0; i <= m->nstatus; i++) {
      char st[16];
      snprintf(st, sizeof st, "%d", i < m->nstatus ? m->statuses[i] : 0);
      attnd_buf_printf(
          b, "attnd_requests_total{protocol=\"%s\",status=\"%s\"} %llu\n",
          protocols[p], i < m->nstatus ? st : "other",
          (unsigned long long)atomic_load_explicit(&m->by_status[p][i],
                                                   memory_order_relaxed));
    }
  attnd_buf_printf(
      b, "# HELP attnd_rejections_total Requests turned away, by reason.\n"
         "# TYPE attnd_rejections_total counter\n");
  for (int i = 0; i < ATTND_REJECT_COUNT; i++)
    attnd_buf_printf(b, "attnd_rejections_total{reason=\"%s\"} %llu\n",
                     reasons[i],
                     (unsigned long long)atomic_load_explicit(
                         &m->rejected[i], memory_order_relaxed));
  for (int h = 0; h < NHIST; h++) {
    attnd_buf_printf(b,
                     "# HELP %s %s Label ctx: key length at most this.\n"
                     "# TYPE %s histogram\n",
                     hist_names[h], hist_help[h], hist_names[h]);
    for (int p = 0; p < ATTND_PROTO_COUNT; p++) {
      if (!computes[p])
        continue;
      const hist_t *x = &m->hist[p][h];
      for (size_t c = 0; c < NCTX; c++) {
        char lab[64], ctx[32];
        ctx_label(ctx, sizeof ctx, c);
        snprintf(lab, sizeof lab, "protocol=\"%s\",ctx=\"%s\"", protocols[p],
                 ctx);
        uint64_t cum = 0;
        for (size_t k = 0; k < NBUCKET; k++) {
          char le[16] = "+Inf";
          cum += atomic_load_explicit(&x->count[c][k], memory_order_relaxed);
          if (k < NBUCKET - 1)
            snprintf(le, sizeof le, "%g", buckets[k]);
          attnd_buf_printf(b, "%s_bucket{%s,le=\"%s\"} %llu\n", hist_names[h],
                           lab, le, (unsigned long long)cum);
        }
        attnd_buf_printf(
            b, "%s_sum{%s} %.6f\n", hist_names[h], lab,
            (double)atomic_load_explicit(&x->sum_ns[c], memory_order_relaxed) /
                1e9);
        attnd_buf_printf(b, "%s_count{%s} %llu\n", hist_names[h], lab,
                         (unsigned long long)cum);
      }
    }
  }
  attnd_buf_printf(
      b, "# HELP attnd_backend_requests_total Requests computed, by backend, "
         "whatever their reply.\n"
         "# TYPE attnd_backend_requests_total counter\n");
  for (int k = 0; k < NBACKEND; k++)
    attnd_buf_printf(b, "attnd_backend_requests_total{backend=\"%s\"} %llu\n",
                     attn_backend_kind_name((attn_backend_kind_t)k),
                     (unsigned long long)atomic_load_explicit(
                         &m->computed[k], memory_order_relaxed));
  attnd_buf_printf(b, "# HELP attnd_backend_compute_seconds_total Time workers "
                      "spent computing, by backend (on cuda: the calls, "
                      "transfers included).\n"
                      "# TYPE attnd_backend_compute_seconds_total counter\n");
  for (int k = 0; k < NBACKEND; k++)
    attnd_buf_printf(
        b, "attnd_backend_compute_seconds_total{backend=\"%s\"} %.6f\n",
        attn_backend_kind_name((attn_backend_kind_t)k),
        (double)atomic_load_explicit(&m->compute_ns[k], memory_order_relaxed) /
            1e9);
  attnd_buf_printf(b, "# HELP attnd_backend_stage_seconds_total Time in each "
                      "stage of the core, by backend (on cuda: the device's "
                      "time, without the transfers).\n"
                      "# TYPE attnd_backend_stage_seconds_total counter\n");
  for (int k = 0; k < NBACKEND; k++)
    for (int st = 0; st < NSTAGE; st++)
      attnd_buf_printf(b,
                       "attnd_backend_stage_seconds_total{backend=\"%s\","
                       "stage=\"%s\"} %.6f\n",
                       attn_backend_kind_name((attn_backend_kind_t)k),
                       stages[st],
                       (double)atomic_load_explicit(&m->stage_ns[k][st],
                                                    memory_order_relaxed) /
                           1e9);
  attnd_buf_printf(
      b,
      "# HELP attnd_device_usable 1 while the cuda backend can run here.\n"
      "# TYPE attnd_device_usable gauge\nattnd_device_usable %d\n"
      "# HELP attnd_device_memory_limit_bytes GPU memory that cuda requests "
      "in flight, cuda sessions' pages and the layers' weights may hold "
      "(max_device_memory_bytes).\n"
      "# TYPE attnd_device_memory_limit_bytes gauge\n"
      "attnd_device_memory_limit_bytes %lld\n"
      "# HELP attnd_device_memory_held_bytes GPU memory the cuda requests "
      "in flight, cuda sessions' pages and the layers' weights hold.\n"
      "# TYPE attnd_device_memory_held_bytes gauge\n"
      "attnd_device_memory_held_bytes %lld\n"
      "# HELP attnd_layers_device_bytes GPU memory the layers' projection "
      "weights and biases hold, of max_device_memory_bytes (0: on the host "
      "only).\n"
      "# TYPE attnd_layers_device_bytes gauge\n"
      "attnd_layers_device_bytes %lld\n"
      "# HELP attnd_device_pool_bytes CUDA's memory pool, which keeps what "
      "calls gave back: reserved from the device, and used by calls now.\n"
      "# TYPE attnd_device_pool_bytes gauge\n"
      "attnd_device_pool_bytes{state=\"reserved\"} %llu\n"
      "attnd_device_pool_bytes{state=\"used\"} %llu\n"
      "# HELP attnd_device_bytes The GPU's memory, every user's: free and "
      "total.\n"
      "# TYPE attnd_device_bytes gauge\n"
      "attnd_device_bytes{state=\"free\"} %llu\n"
      "attnd_device_bytes{state=\"total\"} %llu\n",
      g->device_usable, (long long)g->device_limit, (long long)g->device_held,
      (long long)g->layers_device_bytes,
      (unsigned long long)g->device_pool_reserved,
      (unsigned long long)g->device_pool_used,
      (unsigned long long)g->device_free, (unsigned long long)g->device_total);
  attnd_buf_printf(
      b,
      "# HELP attnd_layer_sets Layer sets alive: the one serving, and each "
      "older one that requests or sessions created before a reload still "
      "hold.\n"
      "# TYPE attnd_layer_sets gauge\nattnd_layer_sets %llu\n"
      "# HELP attnd_layer_sets_bytes The float32 weights those sets hold on "
      "the host; the older ones count in max_memory_bytes until freed, the "
      "serving one does not.\n"
      "# TYPE attnd_layer_sets_bytes gauge\nattnd_layer_sets_bytes %llu\n",
      (unsigned long long)g->layer_sets,
      (unsigned long long)g->layer_sets_bytes);
  attnd_buf_printf(
      b,
      "# HELP attnd_pinned_memory_bytes Page-locked host memory for "
      "requests' tensors bound for the GPU (pinned_memory_bytes; 0 without "
      "it): its size, and what requests use now.\n"
      "# TYPE attnd_pinned_memory_bytes gauge\n"
      "attnd_pinned_memory_bytes{state=\"size\"} %lld\n"
      "attnd_pinned_memory_bytes{state=\"used\"} %lld\n"
      "# HELP attnd_pinned_tensors_total Buffers of %zu KiB or more "
      "(binary bodies, decoded tensors, cuda results) put in pinned memory, "
      "and those that found no room there and went to ordinary memory.\n"
      "# TYPE attnd_pinned_tensors_total counter\n"
      "attnd_pinned_tensors_total{memory=\"pinned\"} %llu\n"
      "attnd_pinned_tensors_total{memory=\"ordinary\"} %llu\n",
      (long long)g->pinned_bytes, (long long)g->pinned_used,
      ATTND_PINNED_MIN >> 10, (unsigned long long)g->pinned_served,
      (unsigned long long)g->pinned_missed);
  attnd_buf_printf(b,
                   "# HELP attnd_queue_depth Requests waiting for a worker.\n"
                   "# TYPE attnd_queue_depth gauge\nattnd_queue_depth %d\n",
                   g->queue_depth);
  attnd_buf_printf(b,
                   "# HELP attnd_busy_workers Workers computing now.\n"
                   "# TYPE attnd_busy_workers gauge\nattnd_busy_workers %d\n",
                   g->busy_workers);
  attnd_buf_printf(b,
                   "# HELP attnd_busy_threads Threads the running requests "
                   "were given (threads_per_request = auto; else 0).\n"
                   "# TYPE attnd_busy_threads gauge\nattnd_busy_threads %d\n",
                   g->busy_threads);
  attnd_buf_puts(b, "# HELP attnd_http_connections Client connections open on "
                    "each HTTP thread (http_threads), this scrape's included; "
                    "a new one goes to the thread with the fewest.\n"
                    "# TYPE attnd_http_connections gauge\n");
  for (int i = 0; i < g->http_threads; i++)
    attnd_buf_printf(b, "attnd_http_connections{thread=\"%d\"} %d\n", i,
                     g->http_open[i]);
  attnd_buf_printf(b,
                   "# HELP attnd_workers Worker threads.\n"
                   "# TYPE attnd_workers gauge\nattnd_workers %d\n",
                   g->workers);
  attnd_buf_printf(
      b,
      "# HELP attnd_inflight Requests whose headers have come and that have "
      "no reply yet (bodies uploading, requests decoding, waiting or "
      "computing), this scrape aside.\n"
      "# TYPE attnd_inflight gauge\nattnd_inflight %d\n"
      "# HELP attnd_scratch_bytes Workspace that workers and HTTP threads "
      "hold, kept between requests up to scratch_keep_bytes each.\n"
      "# TYPE attnd_scratch_bytes gauge\nattnd_scratch_bytes %lld\n"
      "# HELP attnd_heap_bytes malloc's heap: in use by the process, and "
      "freed but kept for reuse.\n"
      "# TYPE attnd_heap_bytes gauge\n"
      "attnd_heap_bytes{state=\"in_use\"} %llu\n"
      "attnd_heap_bytes{state=\"free\"} %llu\n"
      "# HELP attnd_memory_limit_bytes Host memory that requests may hold: "
      "max_memory_bytes less kv_cache_bytes and pinned_memory_bytes.\n"
      "# TYPE attnd_memory_limit_bytes gauge\n"
      "attnd_memory_limit_bytes %lld\n"
      "# HELP attnd_memory_held_bytes What requests hold of it (bodies being "
      "read, tensors, workspaces and replies; session steps waiting their "
      "turn, their decoded tensors) and the scratch.\n"
      "# TYPE attnd_memory_held_bytes gauge\n"
      "attnd_memory_held_bytes %lld\n",
      g->inflight, (long long)g->scratch_bytes,
      (unsigned long long)g->heap_in_use, (unsigned long long)g->heap_free,
      (long long)g->memory_limit, (long long)g->memory_held);
  attnd_buf_printf(
      b,
      "# HELP attnd_sessions KV-cache sessions held.\n"
      "# TYPE attnd_sessions gauge\nattnd_sessions %lld\n"
      "# HELP attnd_kv_bytes The KV cache's pool, by state.\n"
      "# TYPE attnd_kv_bytes gauge\nattnd_kv_bytes{state=\"used\"} %lld\n"
      "attnd_kv_bytes{state=\"free\"} %lld\n"
      "# HELP attnd_kv_device_bytes The GPU memory that cuda sessions' "
      "pages hold, of max_device_memory_bytes: used by sessions, and free "
      "pages kept for reuse.\n# TYPE attnd_kv_device_bytes gauge\n"
      "attnd_kv_device_bytes{state=\"used\"} %lld\n"
      "attnd_kv_device_bytes{state=\"kept\"} %lld\n"
      "# HELP attnd_kv_pages_shared Pages held by more than one session "
      "(forks).\n# TYPE attnd_kv_pages_shared gauge\n"
      "attnd_kv_pages_shared %lld\n"
      "# HELP attnd_session_ends_total Sessions ended, by cause.\n"
      "# TYPE attnd_session_ends_total counter\n"
      "attnd_session_ends_total{cause=\"evicted\"} %llu\n"
      "attnd_session_ends_total{cause=\"expired\"} %llu\n"
      "attnd_session_ends_total{cause=\"deleted\"} %llu\n",
      (long long)g->sessions, (long long)g->kv_bytes_used,
      (long long)g->kv_bytes_free, (long long)g->kv_device_bytes_used,
      (long long)(g->kv_device_bytes_held - g->kv_device_bytes_used),
      (long long)g->kv_pages_shared, (unsigned long long)g->evicted_lru,
      (unsigned long long)g->expired, (unsigned long long)g->deleted);
  attnd_buf_printf(
      b,
      "# HELP attnd_step_batches_total Batches of two or more session "
      "steps computed in one forward call.\n"
      "# TYPE attnd_step_batches_total counter\n"
      "attnd_step_batches_total %llu\n"
      "# HELP attnd_batched_steps_total Session steps computed in those "
      "batches.\n# TYPE attnd_batched_steps_total counter\n"
      "attnd_batched_steps_total %llu\n",
      (unsigned long long)g->batches, (unsigned long long)g->batched_steps);
  render_reloads(m, g, b);
  /* With plain HTTP there is no certificate: the TLS families are not
   * written, rather than a 0 that an alert on the expiry would read as
   * expired since 1970. */
  if (g->tls && g->tls_not_after >= 0)
    attnd_buf_printf(
        b,
        "# HELP attnd_tls_cert_not_after_timestamp_seconds When the TLS "
        "certificate new handshakes get expires (its notAfter), in seconds "
        "since the epoch: a SIGHUP's renewal moves it, a refused one does "
        "not.\n"
        "# TYPE attnd_tls_cert_not_after_timestamp_seconds gauge\n"
        "attnd_tls_cert_not_after_timestamp_seconds %lld\n",
        (long long)g->tls_not_after);
  attnd_buf_printf(b,
                   "# HELP attnd_draining 1 while shutting down.\n"
                   "# TYPE attnd_draining gauge\nattnd_draining %d\n",
                   g->draining);
  render_process(&g->process, b);
  render_build_info(b);
}
