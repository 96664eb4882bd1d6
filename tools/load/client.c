/* tools/load/client.c: see client.h.
 *
 * The run owns `concurrency` slots, each one easy handle with its options
 * set once; a request takes an idle slot, sets its body, the body's header
 * lines (built once per body) and its timeout and is added to the multi
 * handle, whose connection cache keeps the connections
 * alive between requests. The loop:
 *   1. issue: closed loop, fill every idle slot; open loop, move the
 *      arrivals that are due into the backlog, expire backlog entries past
 *      their timeout, and start the oldest ones on idle slots;
 *   2. curl_multi_perform, then account for every finished transfer (and
 *      go back to 1 at once when one finished, so that a closed loop keeps
 *      its slots full);
 *   3. sleep in curl_multi_poll until a socket is ready, curl's own timer,
 *      or the next arrival.
 * Everything runs on the caller's thread. */
#include "client.h"

#include <curl/curl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>

#include "codec/buf.h"
#include "codec/util.h"

static double now_s(void) {
  return attnd_now_ms() * 1e-3;
}

int load_multi_transfers(CURLM *multi, load_finish_fn finish, void *engine) {
  int running, done = 0, left;
  curl_multi_perform(multi, &running);
  CURLMsg *m;
  while ((m = curl_multi_info_read(multi, &left))) {
    if (m->msg != CURLMSG_DONE)
      continue;
    void *slot;
    curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&slot);
    finish(engine, slot, m->data.result, now_s());
    done++;
  }
  return done;
}

void load_multi_sleep(CURLM *multi, double wake_s) {
  long wait_ms = 100;
  curl_multi_timeout(multi, &wait_ms);
  if (wait_ms < 0 || wait_ms > 100)
    wait_ms = 100;
  if (isfinite(wake_s)) {
    double until = wake_s - now_s();
    long w = until > 0 ? (long)ceil(until * 1e3) : 0;
    if (w < wait_ms)
      wait_ms = w;
  }
  if (wait_ms > 0)
    curl_multi_poll(multi, NULL, 0, (int)wait_ms, NULL);
}

int load_progress_due(double now, double *next) {
  if (now < *next)
    return 0;
  *next = now + 0.5;
  return 1;
}

void load_easy_free(CURLM *multi, CURL *h, int busy) {
  if (h == NULL)
    return;
  if (busy)
    curl_multi_remove_handle(multi, h);
  curl_easy_cleanup(h);
}

void load_easy_setup(CURL *h, const load_access_t *a) {
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_NOPROXY, "*");
  curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
  if (a && a->cacert)
    curl_easy_setopt(h, CURLOPT_CAINFO, a->cacert);
  if (a && a->insecure) {
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
  }
}

struct curl_slist *load_access_header(struct curl_slist *l,
                                      const load_access_t *a) {
  if (l == NULL || a == NULL || a->api_key == NULL)
    return l;
  attnd_buf_t t;
  attnd_buf_init(&t);
  attnd_buf_printf(&t, "Authorization: Bearer %s", a->api_key);
  if (t.oom || !curl_slist_append(l, t.data))
    l = (curl_slist_free_all(l), NULL);
  /* this copy of the secret is wiped before it is freed (libcurl's, in
   * the list, lives as long as the list) */
  if (t.data)
    memset(t.data, 0, t.len);
  attnd_buf_free(&t);
  return l;
}

int load_tls_failed(CURLcode rc) {
  return rc == CURLE_SSL_CONNECT_ERROR ||
         rc == CURLE_PEER_FAILED_VERIFICATION || rc == CURLE_SSL_CERTPROBLEM ||
         rc == CURLE_SSL_CIPHER || rc == CURLE_SSL_CACERT_BADFILE ||
         rc == CURLE_SSL_ISSUER_ERROR;
}

const char *const load_stop_names[LOAD_NSTOP] = {"", "tls", "unreachable",
                                                 "unauthorized", "not_found"};

load_stop_t load_stop_at_once(CURLcode rc, int unanswered) {
  if (load_tls_failed(rc))
    return LOAD_STOP_TLS;
  /* Later, a refusal is news from a server under load, or one that died
   * of it: a load test counts it. */
  if (unanswered &&
      (rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST))
    return LOAD_STOP_UNREACHABLE;
  return LOAD_STOP_NONE;
}

load_stop_t load_stop_of_replies(int64_t replies, const int64_t *status) {
  if (replies <= 0)
    return LOAD_STOP_NONE;
  if (status[401] == replies)
    return LOAD_STOP_UNAUTHORIZED;
  if (status[404] == replies)
    return LOAD_STOP_NOT_FOUND;
  return LOAD_STOP_NONE;
}

double load_cpu_now_s(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

/* ---- stats --------------------------------------------------------------- */

/* The histograms a load_stats_t owns, for LOAD_HISTS_NEW and _FREE
 * (which count them). */
#define STATS_HISTS(st)                                                        \
  ((load_hist_t **const[]){&(st)->latency, &(st)->queue, &(st)->compute,       \
                           &(st)->total})

int load_stats_init(load_stats_t *st) {
  memset(st, 0, sizeof *st);
  return LOAD_HISTS_NEW(STATS_HISTS(st));
}

void load_stats_free(load_stats_t *st) {
  LOAD_HISTS_FREE(STATS_HISTS(st));
  for (int i = 0; i < st->n_kept; i++)
    free(st->kept[i].body);
  free(st->kept);
  memset(st, 0, sizeof *st);
}

int load_status_index(long code) {
  return code >= 100 && code < LOAD_STATUS_MAX ? (int)code
                                               : LOAD_STATUS_INVALID;
}

int64_t load_stats_other_errors(const load_stats_t *st) {
  int64_t n = 0;
  for (int s = 0; s < LOAD_STATUS_MAX; s++)
    if ((s < 200 || s > 299) && s != 429 && s != 503 && s != 504)
      n += st->status[s];
  return n;
}

int64_t load_stats_errors(const load_stats_t *st) {
  return st->transport + st->status[429] + st->status[503] + st->status[504] +
         load_stats_other_errors(st);
}

/* ---- Server-Timing ------------------------------------------------------- */

/* Whether c ends a token of a Server-Timing value (RFC 9110's delimiters
 * that the field uses, and whitespace). */
static int st_delim(char c) {
  return c == ',' || c == ';' || c == '=' || c == '"' || c == ' ' ||
         c == '\t' || c == '\r' || c == '\n';
}

static const char *st_ows(const char *p, const char *end) {
  while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n'))
    p++;
  return p;
}

/* A param's value at p: a token, or a quoted string (its backslash pairs
 * kept as they are). Sets *v and *vl to its text (empty for a quoted
 * string that never closes); returns the end. */
static const char *st_value(const char *p, const char *end, const char **v,
                            size_t *vl) {
  if (p < end && *p == '"') {
    const char *q = ++p;
    while (q < end && *q != '"')
      q += *q == '\\' && q + 1 < end ? 2 : 1;
    /* one never closed is no value */
    *v = p, *vl = q < end ? (size_t)(q - p) : 0;
    return q < end ? q + 1 : q;
  }
  const char *q = p;
  while (q < end && !st_delim(*q))
    q++;
  *v = p, *vl = (size_t)(q - p);
  return q;
}

/* A duration's text, a number of milliseconds that is finite and not
 * negative; -1 for anything else. */
static double st_ms(const char *v, size_t vl) {
  char num[64];
  if (vl == 0 || vl >= sizeof num)
    return -1;
  memcpy(num, v, vl);
  num[vl] = 0;
  char *e;
  double x = strtod(num, &e);
  /* plain decimal only: strtod would also take hex, "inf" and "nan" */
  if (strspn(num, "0123456789.eE+-") != vl || *e != 0 || !isfinite(x) || x < 0)
    return -1;
  return x;
}

int load_server_timing_parse(const char *value, size_t len, double *queue_ms,
                             double *compute_ms, double *total_ms) {
  static const char *const names[3] = {"queue", "compute", "total"};
  double *out[3] = {queue_ms, compute_ms, total_ms};
  const char *p = value, *end = value + len;
  int mask = 0;
  /* One pass over the bytes: each step moves p on, so that a value of any
   * length is read in linear time, in place (no copy to cut it short). */
  while (p < end) {
    /* a metric: name *(OWS ";" OWS param), param: name OWS "=" OWS value */
    p = st_ows(p, end);
    const char *name = p;
    while (p < end && !st_delim(*p))
      p++;
    size_t nlen = (size_t)(p - name);
    int which = -1, seen_dur = 0;
    for (int i = 0; i < 3; i++)
      if (nlen == strlen(names[i]) && memcmp(name, names[i], nlen) == 0)
        which = i;
    for (;;) {
      p = st_ows(p, end);
      if (p == end || *p != ';')
        break;
      p = st_ows(p + 1, end);
      const char *pn = p;
      while (p < end && !st_delim(*p))
        p++;
      size_t pl = (size_t)(p - pn);
      p = st_ows(p, end);
      if (p == end || *p != '=')
        continue;
      const char *v;
      size_t vl;
      p = st_value(st_ows(p + 1, end), end, &v, &vl);
      /* the first dur counts, as the Server Timing draft has it */
      if (pl != 3 || strncasecmp(pn, "dur", 3) != 0 || seen_dur++)
        continue;
      double ms = st_ms(v, vl);
      if (which >= 0 && ms >= 0) {
        *out[which] = ms;
        mask |= 1 << which;
      }
    }
    /* anything else up to the next metric is skipped, quoted strings
     * whole (a comma in one does not end the metric) */
    while (p < end && *p != ',') {
      if (*p == '"') {
        const char *v;
        size_t vl;
        p = st_value(p, end, &v, &vl);
      } else {
        p++;
      }
    }
    if (p < end)
      p++;
  }
  return mask;
}

int64_t load_header_length_parse(const char *value, size_t len) {
  const char *p = value, *end = value + len;
  while (p < end && (*p == ' ' || *p == '\t'))
    p++;
  const char *digits = p;
  int64_t x = 0;
  int over = 0;
  for (; p < end && *p >= '0' && *p <= '9'; p++)
    over |= __builtin_mul_overflow(x, 10, &x) ||
            __builtin_add_overflow(x, *p - '0', &x);
  int some = p > digits;
  while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n'))
    p++;
  return p == end && some && !over ? x : INT64_MAX;
}

/* ---- the engine ---------------------------------------------------------- */

typedef struct slot {
  CURL *h;
  int busy;
  double t_intended;
  size_t variant;
  int measured;
  int keep;           /* a candidate for --verify: the body is kept */
  attnd_buf_t reply;  /* the body, when keep */
  int64_t header_len; /* the reply's Inference-Header-Content-Length, or -1 */
  int timing;         /* load_server_timing_parse's mask */
  double queue_ms, compute_ms, total_ms;
  char errbuf[CURL_ERROR_SIZE];
} slot_t;

typedef struct engine {
  const load_run_t *run;
  load_stats_t *st;
  CURLM *multi;
  struct curl_slist **headers; /* of each body */
  slot_t *slots;
  int *idle; /* stack of idle slot indices */
  int n_idle;
  double *backlog; /* open loop: FIFO ring of intended send times */
  size_t bl_head, bl_len, bl_cap;
  double t0, t_measure, t_stop; /* t_stop is +inf when counting requests */
  double next_arrival;
  int64_t arrivals; /* open loop: arrivals so far, warm-up included */
  uint64_t rng;
  int64_t issued; /* every request, warm-up included: picks the body */
  int stopping;   /* the run issues nothing more */
  int answered;   /* a reply came, of any status */
  int keep_pending;
  double t_last; /* the last reply since the window began */
} engine_t;

static size_t on_body(char *p, size_t size, size_t nmemb, void *ud) {
  slot_t *s = ud;
  if (s->keep)
    attnd_buf_append(&s->reply, p, size * nmemb);
  return size * nmemb;
}

static size_t on_header(char *p, size_t size, size_t nmemb, void *ud) {
  slot_t *s = ud;
  size_t n = size * nmemb;
  static const char name[] = "Server-Timing:";
  static const char ihcl[] = "Inference-Header-Content-Length:";
  if (n > sizeof name - 1 && strncasecmp(p, name, sizeof name - 1) == 0)
    s->timing |= /* a field may come in several lines: one list */
        load_server_timing_parse(p + sizeof name - 1, n - (sizeof name - 1),
                                 &s->queue_ms, &s->compute_ms, &s->total_ms);
  if (n > sizeof ihcl - 1 && strncasecmp(p, ihcl, sizeof ihcl - 1) == 0)
    s->header_len =
        load_header_length_parse(p + sizeof ihcl - 1, n - (sizeof ihcl - 1));
  return n;
}

static int slot_setup(engine_t *e, slot_t *s) {
  const load_run_t *run = e->run;
  attnd_buf_init(&s->reply);
  if ((s->h = curl_easy_init()) == NULL)
    return -1;
  CURL *h = s->h;
  curl_easy_setopt(h, CURLOPT_URL, run->url);
  curl_easy_setopt(h, CURLOPT_PRIVATE, s);
  load_easy_setup(h, run->access);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, s);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, s);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, s->errbuf);
  if (run->accept_encoding)
    curl_easy_setopt(h, CURLOPT_ACCEPT_ENCODING, run->accept_encoding);
  if (run->n_bodies == 0) {
    curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, e->headers[0]);
    return 0;
  }
  /* Megabyte bodies (and replies, about as large) move in fewer, larger
   * system calls with buffers up to libcurl's largest (measured: 24% of a
   * core down to 15% at 5.6 MB bodies, c=4). Small ones keep the
   * defaults, so that thousands of connections stay cheap. */
  size_t big = 0;
  for (size_t i = 0; i < run->n_bodies; i++)
    big = run->bodies[i].len > big ? run->bodies[i].len : big;
  if (big >= 256 * 1024) {
    curl_easy_setopt(h, CURLOPT_BUFFERSIZE, 512L * 1024);
    curl_easy_setopt(h, CURLOPT_UPLOAD_BUFFERSIZE, 2L * 1024 * 1024);
  }
  return 0;
}

/* Whether a request intended at `t` belongs to the run; counts it as sent
 * when it is measured. Once one does not, the run stops issuing. */
static int admit(engine_t *e, double t) {
  const load_run_t *run = e->run;
  if (e->stopping)
    return 0;
  if (t >= e->t_measure) {
    if (t >= e->t_stop ||
        (run->duration_s <= 0 && e->st->sent >= run->requests)) {
      e->stopping = 1;
      return 0;
    }
    e->st->sent++;
  }
  return 1;
}

static void note_error(load_stats_t *st, const char *msg) {
  if (st->first_error[0] == 0)
    snprintf(st->first_error, sizeof st->first_error, "%s", msg);
}

/* Starts the request intended at `t` on an idle slot. */
static void start(engine_t *e, double t, double now) {
  const load_run_t *run = e->run;
  slot_t *s = &e->slots[e->idle[--e->n_idle]];
  s->busy = 1;
  s->t_intended = t;
  s->measured = t >= e->t_measure;
  s->timing = 0;
  s->header_len = -1;
  s->errbuf[0] = 0;
  s->reply.len = 0;
  s->keep = s->measured && e->st->n_kept + e->keep_pending < run->keep;
  e->keep_pending += s->keep;
  if (run->n_bodies) {
    s->variant = (size_t)(e->issued % (int64_t)run->n_bodies);
    const load_body_t *b = &run->bodies[s->variant];
    curl_easy_setopt(s->h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)b->len);
    curl_easy_setopt(s->h, CURLOPT_POSTFIELDS, b->data);
    curl_easy_setopt(s->h, CURLOPT_HTTPHEADER, e->headers[s->variant]);
  }
  e->issued++;
  long left_ms = (long)ceil((run->timeout_s - (now - t)) * 1000.0);
  curl_easy_setopt(s->h, CURLOPT_TIMEOUT_MS, left_ms < 1 ? 1L : left_ms);
  curl_multi_add_handle(e->multi, s->h);
}

/* Accounts for the finished transfer of slot s and makes it idle
 * (load_finish_fn: engine e). */
static void finish(void *engine, void *slot, CURLcode rc, double now) {
  engine_t *e = engine;
  slot_t *s = slot;
  load_stats_t *st = e->st;
  long code = 0;
  if (rc == CURLE_OK)
    curl_easy_getinfo(s->h, CURLINFO_RESPONSE_CODE, &code);
  curl_multi_remove_handle(e->multi, s->h);
  int kept = 0, ok = rc == CURLE_OK && code >= 200 && code <= 299;
  if (now >= e->t_measure) {
    e->t_last = now;
    if (ok) {
      const load_body_t *b =
          e->run->n_bodies ? &e->run->bodies[s->variant] : NULL;
      st->span_ok++;
      st->span_flops += b ? b->flops : 0;
      st->span_tokens += b ? (double)b->tokens : 0;
    }
  }
  load_stop_t stop =
      rc == CURLE_OK
          ? LOAD_STOP_NONE
          : load_stop_at_once(rc, e->run->unanswered && !e->answered);
  e->answered |= rc == CURLE_OK;
  if (stop != LOAD_STOP_NONE && st->stop == LOAD_STOP_NONE) {
    /* every later request would fail the same way, at full speed: the
     * run ends, with this error as its first */
    e->stopping = 1;
    st->stop = stop;
    note_error(st, s->errbuf[0] ? s->errbuf : curl_easy_strerror(rc));
  }
  if (s->measured && rc != CURLE_OK) {
    st->transport++;
    st->timeouts += rc == CURLE_OPERATION_TIMEDOUT;
    note_error(st, s->errbuf[0] ? s->errbuf : curl_easy_strerror(rc));
  } else if (s->measured) {
    st->status[load_status_index(code)]++;
  }
  if (s->measured && ok) {
    st->ok++;
    load_hist_record(st->latency,
                     (int64_t)llround((now - s->t_intended) * 1e6));
    if (s->timing & 1)
      load_hist_record(st->queue, load_hist_us_of_ms(s->queue_ms));
    if (s->timing & 2)
      load_hist_record(st->compute, load_hist_us_of_ms(s->compute_ms));
    if (s->timing & 4)
      load_hist_record(st->total, load_hist_us_of_ms(s->total_ms));
    st->timed += s->timing != 0;
    if (s->keep && !s->reply.oom && s->reply.data) {
      st->kept[st->n_kept++] =
          (load_kept_t){s->reply.data, s->reply.len, s->variant, s->header_len};
      attnd_buf_init(&s->reply); /* the stats own it now */
      kept = 1;
    }
  }
  if (s->keep && !kept && s->reply.oom) {
    attnd_buf_free(&s->reply); /* try again with a fresh buffer */
    attnd_buf_init(&s->reply);
  }
  e->keep_pending -= s->keep;
  s->keep = 0;
  s->busy = 0;
  e->idle[e->n_idle++] = (int)(s - e->slots);
}

/* ---- open loop ----------------------------------------------------------- */

/* Uniform in [0, 1): the top 53 bits of the next splitmix64 number. */
static double unit(uint64_t *state) {
  return (double)(attnd_splitmix64(state) >> 11) * (1.0 / 9007199254740992.0);
}

static int backlog_push(engine_t *e, double t) {
  if (e->bl_len == e->bl_cap) {
    size_t cap = e->bl_cap ? 2 * e->bl_cap : 1024;
    double *b = malloc(cap * sizeof *b);
    if (b == NULL)
      return -1;
    for (size_t i = 0; i < e->bl_len; i++)
      b[i] = e->backlog[(e->bl_head + i) % e->bl_cap];
    free(e->backlog);
    e->backlog = b;
    e->bl_cap = cap;
    e->bl_head = 0;
  }
  e->backlog[(e->bl_head + e->bl_len++) % e->bl_cap] = t;
  return 0;
}

static double backlog_pop(engine_t *e) {
  double t = e->backlog[e->bl_head];
  e->bl_head = (e->bl_head + 1) % e->bl_cap;
  e->bl_len--;
  return t;
}

/* Step 1 of the open loop. Returns 0, or -1 when out of memory. */
static int open_issue(engine_t *e, double now) {
  const load_run_t *run = e->run;
  while (!e->stopping && e->next_arrival <= now) {
    if (!admit(e, e->next_arrival))
      break;
    if (backlog_push(e, e->next_arrival) < 0)
      return -1;
    /* even arrivals at t0 + k/rate, not by adding 1/rate: the sum's
     * rounding put an arrival at the window's end inside it (51 at 100/s
     * over 0.5 s) */
    e->arrivals++;
    e->next_arrival =
        run->poisson ? e->next_arrival - log(1.0 - unit(&e->rng)) / run->rate
                     : e->t0 + (double)e->arrivals / run->rate;
  }
  if (now >= e->t_stop) /* at a low rate the next arrival may be far off */
    e->stopping = 1;
  while (e->bl_len && e->backlog[e->bl_head] + run->timeout_s <= now) {
    double t = backlog_pop(e); /* waited too long for a connection */
    if (t >= e->t_measure) {
      e->st->transport++;
      e->st->timeouts++;
      note_error(e->st, "timed out waiting for a free connection");
    }
  }
  /* after a stop the arrivals still waiting would fail alike: they fail
   * with it, unsent */
  while (e->bl_len && e->st->stop != LOAD_STOP_NONE)
    e->st->transport += backlog_pop(e) >= e->t_measure;
  while (e->bl_len && e->n_idle)
    start(e, backlog_pop(e), now);
  return 0;
}

/* ---- the run ------------------------------------------------------------- */

static void engine_free(engine_t *e) {
  for (int i = 0; e->slots && i < e->run->concurrency; i++) {
    slot_t *s = &e->slots[i];
    load_easy_free(e->multi, s->h, s->busy);
    attnd_buf_free(&s->reply);
  }
  if (e->multi)
    curl_multi_cleanup(e->multi);
  for (size_t i = 0;
       e->headers && i < (e->run->n_bodies ? e->run->n_bodies : 1); i++)
    curl_slist_free_all(e->headers[i]);
  free(e->headers);
  free(e->slots);
  free(e->idle);
  free(e->backlog);
}

size_t load_body_headers(const load_run_t *run, const load_body_t *b, char *buf,
                         size_t n) {
  attnd_buf_t t;
  attnd_buf_init(&t);
  if (run->content_type)
    attnd_buf_printf(&t, "Content-Type: %s\n", run->content_type);
  if (run->content_encoding)
    attnd_buf_printf(&t, "Content-Encoding: %s\n", run->content_encoding);
  if (b->header_len)
    attnd_buf_printf(&t, "Inference-Header-Content-Length: %zu\n",
                     b->header_len);
  size_t len = t.len;
  snprintf(buf, n, "%s", t.len ? t.data : "");
  attnd_buf_free(&t);
  return len;
}

/* The header lines of body b (NULL: a GET) for libcurl, the key's
 * included: a new list, or NULL when out of memory. */
static struct curl_slist *body_headers(const load_run_t *run,
                                       const load_body_t *b) {
  /* no "Expect: 100-continue" round trip before large bodies, and no
   * Content-Type unless one is given ("Content-Type:" alone drops
   * libcurl's form type) */
  struct curl_slist *l = curl_slist_append(NULL, "Expect:");
  l = load_access_header(l, run->access);
  if (b == NULL)
    return l;
  char text[512];
  load_body_headers(run, b, text, sizeof text);
  if (l && run->content_type == NULL && !curl_slist_append(l, "Content-Type:"))
    l = (curl_slist_free_all(l), NULL);
  char *save = NULL;
  for (char *line = strtok_r(text, "\n", &save); l && line;
       line = strtok_r(NULL, "\n", &save))
    if (!curl_slist_append(l, line))
      l = (curl_slist_free_all(l), NULL);
  return l;
}

static int engine_init(engine_t *e, const load_run_t *run, load_stats_t *st,
                       char *err, size_t n) {
  memset(e, 0, sizeof *e);
  e->run = run;
  e->st = st;
  int c = run->concurrency;
  if (c < 1 || (run->mode == LOAD_OPEN && !(run->rate > 0)) ||
      (run->duration_s <= 0 && run->requests < 1) || !(run->timeout_s > 0)) {
    snprintf(err, n,
             "bad run: concurrency %d, rate %g, duration %g s, "
             "requests %lld, timeout %g s",
             c, run->rate, run->duration_s, (long long)run->requests,
             run->timeout_s);
    return -1;
  }
  e->multi = curl_multi_init();
  e->slots = calloc((size_t)c, sizeof *e->slots);
  e->idle = malloc((size_t)c * sizeof *e->idle);
  st->kept = run->keep > 0 ? calloc((size_t)run->keep, sizeof *st->kept) : NULL;
  e->headers = calloc(run->n_bodies ? run->n_bodies : 1, sizeof *e->headers);
  int ok = e->multi && e->slots && e->idle && e->headers &&
           (run->keep <= 0 || st->kept);
  for (size_t i = 0; ok && i < (run->n_bodies ? run->n_bodies : 1); i++)
    ok = (e->headers[i] = body_headers(run, run->n_bodies ? &run->bodies[i]
                                                          : NULL)) != NULL;
  for (int i = 0; ok && i < c; i++) {
    ok = slot_setup(e, &e->slots[i]) == 0;
    e->idle[e->n_idle++] = c - 1 - i; /* slot 0 is used first */
  }
  if (!ok) {
    snprintf(err, n, "out of memory setting up %d connections", c);
    return -1;
  }
  curl_multi_setopt(e->multi, CURLMOPT_MAXCONNECTS, (long)c);
  curl_multi_setopt(e->multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long)c);
  e->rng = run->seed;
  return 0;
}

int load_client_run(const load_run_t *run, load_stats_t *st, char *err,
                    size_t n) {
  engine_t e;
  if (engine_init(&e, run, st, err, n) < 0) {
    engine_free(&e);
    return -1;
  }
  e.t0 = now_s();
  e.t_measure = e.t0 + (run->warmup_s > 0 ? run->warmup_s : 0);
  /* t0 plus one offset, as the even arrivals are: one that falls on the
   * window's end is out of it */
  e.t_stop =
      run->duration_s > 0
          ? e.t0 + ((run->warmup_s > 0 ? run->warmup_s : 0) + run->duration_s)
          : INFINITY;
  e.next_arrival = e.t0;
  double cpu0 = 0, next_progress = e.t0 + 0.5;
  int measuring = 0, rc = 0;
  for (;;) {
    double now = now_s();
    if (!measuring && now >= e.t_measure) {
      measuring = 1;
      cpu0 = load_cpu_now_s();
    }
    /* 1. issue */
    if (run->mode == LOAD_CLOSED) {
      while (e.n_idle && admit(&e, now))
        start(&e, now, now);
    } else if (open_issue(&e, now) < 0) {
      snprintf(err, n, "out of memory for the open loop's backlog");
      rc = -1;
      break;
    }
    if (e.stopping && e.n_idle == run->concurrency && e.bl_len == 0)
      break;
    /* 2. transfers */
    int done = load_multi_transfers(e.multi, finish, &e);
    if (run->progress && load_progress_due(now, &next_progress))
      run->progress(st, now - e.t0, run->progress_arg);
    if (done)
      continue;
    /* 3. sleep, until the next arrival at the latest */
    load_multi_sleep(e.multi, run->mode == LOAD_OPEN && !e.stopping
                                  ? e.next_arrival
                                  : INFINITY);
  }
  if (!measuring)
    cpu0 = load_cpu_now_s();
  /* a run stopped at once ended at its last reply, not the window's end */
  double window_end =
      isfinite(e.t_stop) && st->stop == LOAD_STOP_NONE ? e.t_stop : e.t_measure;
  st->elapsed_s = (e.t_last > window_end ? e.t_last : window_end) - e.t_measure;
  st->cpu_s = load_cpu_now_s() - cpu0;
  engine_free(&e);
  return rc;
}
