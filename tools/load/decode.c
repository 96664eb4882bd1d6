/* tools/load/decode.c: see decode.h.
 *
 * The run owns `concurrency` slots (an easy handle each) and one state per
 * session. The loop, on the caller's thread:
 *   1. issue: while a slot is idle and a session is ready (no request in
 *      flight, not done, past its pause), start that session's next
 *      request, the session that was served longest ago first;
 *   2. curl_multi_perform, then account for every finished transfer and
 *      move its session on (decode.h: created, prefilled, stepped,
 *      deleted; created again after a 404, 410 or 409);
 *   3. sleep in curl_multi_poll until a socket, curl's timer, or the end
 *      of the nearest pause.
 * A reply body is kept whole only for --verify; otherwise its first
 * REPLY_HEAD bytes are enough for the id, "length" and an error's code. */
#include "decode.h"

#include <curl/curl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "codec/util.h"
#include "verify.h"

#define REPLY_HEAD 4096
#define ROPE_THETA 10000.0

static double now_s(void) {
  return attnd_now_ms() * 1e-3;
}

/* ---- stats --------------------------------------------------------------- */

/* The histograms a load_decode_stats_t owns, for LOAD_HISTS_NEW and _FREE
 * (which count them). */
#define STATS_HISTS(st)                                                        \
  ((load_hist_t **const[]){&(st)->ttft, &(st)->step, &(st)->create,            \
                           &(st)->queue, &(st)->compute})

int load_decode_stats_init(load_decode_stats_t *st) {
  memset(st, 0, sizeof *st);
  return LOAD_HISTS_NEW(STATS_HISTS(st));
}

void load_decode_stats_free(load_decode_stats_t *st) {
  LOAD_HISTS_FREE(STATS_HISTS(st));
  for (int i = 0; i < st->n_kept; i++)
    free(st->kept[i].body);
  free(st->kept);
  memset(st, 0, sizeof *st);
}

int64_t load_decode_errors(const load_decode_stats_t *st) {
  int64_t n = st->transport + st->bad_replies - st->recreate_replies;
  for (int s = 0; s < LOAD_STATUS_MAX; s++)
    n += st->status[s];
  return n;
}

/* ---- tokens and bodies --------------------------------------------------- */

uint64_t load_decode_seed(uint64_t seed, int64_t prefill, int session) {
  uint64_t s = seed ^ 0x6465636f6465ull; /* "decode": apart from gen.c's */
  uint64_t a = attnd_splitmix64(&s) ^ (uint64_t)prefill;
  uint64_t b = attnd_splitmix64(&a) ^ (uint64_t)session;
  return attnd_splitmix64(&b);
}

void load_decode_widths(const load_decode_shape_t *s, int64_t *wq, int64_t *wk,
                        int64_t *wv) {
  int64_t Dh = s->E / s->H;
  *wq = s->layer ? s->E : s->H * Dh;
  *wk = s->layer ? 0 : s->Hkv * Dh;
  *wv = *wk;
}

static void fill(uint64_t *state, float *x, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    x[i] = (float)((double)(attnd_splitmix64(state) >> 11) *
                       (2.0 / 9007199254740992.0) -
                   1.0);
}

void load_decode_row(const load_decode_shape_t *s, uint64_t seed, int64_t pos,
                     float *q, float *k, float *v) {
  int64_t wq, wk, wv;
  load_decode_widths(s, &wq, &wk, &wv);
  uint64_t st = seed ^ (uint64_t)pos;
  st = attnd_splitmix64(&st); /* rows apart: no stream is a shift of another */
  fill(&st, q, wq);
  if (wk) {
    fill(&st, k, wk);
    fill(&st, v, wv);
  }
}

static const char *rope_name(attn_rope_style_t r) {
  return r == ATTN_ROPE_INTERLEAVED ? "interleaved" : "half";
}

void load_decode_create_body(const load_decode_shape_t *s, attnd_buf_t *b) {
  if (s->layer) {
    attnd_buf_puts(b, "{\"layer\":");
    attnd_buf_json_string(b, s->layer, strlen(s->layer));
    attnd_buf_puts(b, "}");
    return;
  }
  attnd_buf_printf(b,
                   "{\"num_heads\":%lld,\"num_kv_heads\":%lld,"
                   "\"head_dim\":%lld",
                   (long long)s->H, (long long)s->Hkv,
                   (long long)(s->E / s->H));
  if (s->rope != ATTN_ROPE_NONE)
    attnd_buf_printf(b, ",\"rope\":{\"theta\":%g,\"style\":\"%s\"}", ROPE_THETA,
                     rope_name(s->rope));
  attnd_buf_puts(b, "}");
}

int load_decode_step_body(const load_decode_shape_t *s, uint64_t seed,
                          int64_t start, int64_t n, attnd_buf_t *b) {
  static const char *const api_enc[] = {"nested", "flat", "base64"};
  int64_t wq, wk, wv;
  load_decode_widths(s, &wq, &wk, &wv);
  float *x = malloc((size_t)(n * (wq + wk + wv)) * sizeof *x);
  if (x == NULL)
    return -1;
  float *q = x, *k = x + n * wq, *v = k + n * wk;
  for (int64_t i = 0; i < n; i++)
    load_decode_row(s, seed, start + i, q + i * wq, k + i * wk, v + i * wv);
  const char *names[3] = {"query", "key", "value"};
  const float *t[3] = {q, k, v};
  const int64_t w[3] = {wq, wk, wv};
  for (int i = 0; i < (wk ? 3 : 1); i++) {
    int64_t dim[2] = {n, w[i]};
    attnd_buf_printf(b, "%s\"%s\":", i ? "," : "{", names[i]);
    attnd_buf_tensor(b, s->encoding, t[i], 2, dim);
  }
  free(x);
  attnd_buf_printf(b,
                   ",\"expected_length\":%lld,\"return\":{\"encoding\":\"%s\","
                   "\"metrics\":false}",
                   (long long)start, api_enc[s->encoding]);
  if (s->timeout_ms > 0)
    attnd_buf_printf(b, ",\"timeout_ms\":%lld", (long long)s->timeout_ms);
  attnd_buf_puts(b, "}");
  return b->oom ? -1 : 0;
}

/* ---- reading replies ----------------------------------------------------- */

int64_t load_decode_reply_int(const char *body, size_t len, const char *name) {
  char key[48], num[24];
  int kl = snprintf(key, sizeof key, "\"%s\":", name);
  const char *p = memmem(body, len, key, (size_t)kl);
  if (p == NULL)
    return -1;
  p += kl;
  size_t left = len - (size_t)(p - body), k = 0;
  while (k < left && k < sizeof num - 1 && p[k] >= '0' && p[k] <= '9')
    k++;
  if (k == 0 || k == sizeof num - 1)
    return -1;
  memcpy(num, p, k);
  num[k] = 0;
  return strtoll(num, NULL, 10);
}

int load_decode_reply_str(const char *body, size_t len, const char *name,
                          char *out, size_t n) {
  char key[48];
  int kl = snprintf(key, sizeof key, "\"%s\":\"", name);
  const char *p = memmem(body, len, key, (size_t)kl);
  if (p == NULL)
    return -1;
  p += kl;
  const char *q = memchr(p, '"', len - (size_t)(p - body));
  if (q == NULL || (size_t)(q - p) >= n)
    return -1;
  memcpy(out, p, (size_t)(q - p));
  out[q - p] = 0;
  return (int)(q - p);
}

int load_decode_session_id(const char *body, size_t len, char *id) {
  char got[40];
  if (load_decode_reply_str(body, len, "session", got, sizeof got) != 32 ||
      strspn(got, "0123456789abcdef") != 32)
    return 0;
  memcpy(id, got, 33);
  return 1;
}

/* ---- --verify ------------------------------------------------------------ */

int load_decode_verify(const load_decode_shape_t *s, uint64_t seed,
                       int64_t start, int64_t n, const char *body, size_t len,
                       int threads, double *err_out, char *why, size_t wn) {
  *err_out = INFINITY;
  if (s->layer)
    return attnd_fail(why, wn,
                      "layer '%s': its weights are on the server, so its "
                      "steps cannot be computed here",
                      s->layer);
  int64_t got_len = load_decode_reply_int(body, len, "length");
  if (got_len != start + n)
    return attnd_fail(why, wn, "reply length %lld, expected %lld",
                      (long long)got_len, (long long)(start + n));
  int64_t wq, wk, wv, rows = start + n;
  load_decode_widths(s, &wq, &wk, &wv);
  float *x = malloc((size_t)(rows * (wq + wk + wv) + 2 * n * wq) * sizeof *x);
  if (x == NULL)
    return attnd_fail(why, wn, "out of memory for %lld tokens",
                      (long long)rows);
  float *q = x, *k = q + rows * wq, *v = k + rows * wk, *want = v + rows * wv,
        *got = want + n * wq;
  for (int64_t i = 0; i < rows; i++)
    load_decode_row(s, seed, i, q + i * wq, k + i * wk, v + i * wv);
  /* the new tokens' queries over every key so far, bottom-right causal:
   * query i is at position start + i, as in the session */
  attn_params_t p = {
      .query = {q + start * wq, 2, {n, wq}},
      .key = {k, 2, {rows, wk}},
      .value = {v, 2, {rows, wv}},
      .num_heads = s->H,
      .num_kv_heads = s->Hkv,
      .causal = ATTN_CAUSAL_BOTTOM_RIGHT,
      .rope = {.style = s->rope, .theta = ROPE_THETA},
  };
  attn_exec_t ex = {.threads = threads > 0 ? threads : 1};
  attn_plan_t pl;
  attn_error_t ae;
  void *ws = NULL;
  int rc = -1;
  if (attn_plan_init(&pl, &p, &ex, &ae) < 0) {
    attnd_fail(why, wn, "local plan: %s: %s", ae.field, ae.message);
    goto out;
  }
  size_t ws_bytes = (pl.workspace_bytes + 63) / 64 * 64;
  ws = aligned_alloc(64, ws_bytes ? ws_bytes : 64);
  attn_outputs_t o = {.out = want};
  if (ws == NULL) {
    attnd_fail(why, wn, "out of memory for the local computation");
    goto out;
  }
  if (attn_forward(&pl, &o, ws, ws_bytes, &ae) < 0) {
    attnd_fail(why, wn, "local forward: %s", ae.message);
    goto out;
  }
  int64_t odim[2] = {n, wq};
  if (load_reply_tensor(body, len, "output", s->encoding, 2, odim, got, why,
                        wn) < 0)
    goto out;
  double d = 0, w = 0;
  for (int64_t i = 0; i < n * wq; i++) {
    double e = (double)got[i] - (double)want[i];
    d += e * e;
    w += (double)want[i] * want[i];
  }
  *err_out = w > 0 ? sqrt(d / w) : sqrt(d);
  rc = *err_out <= LOAD_VERIFY_TOL ? 0 : -1;
  if (rc < 0)
    attnd_fail(why, wn, "relative error %.3g over %g", *err_out,
               LOAD_VERIFY_TOL);
out:
  free(ws);
  free(x);
  return rc;
}

/* ---- the engine ---------------------------------------------------------- */

typedef enum { PH_CREATE, PH_PREFILL, PH_STEP, PH_DELETE, PH_DONE } phase_t;

typedef struct sess {
  char id[40];
  uint64_t seed;
  phase_t phase;
  int64_t done;    /* one-token steps done */
  int prefilled;   /* a prefill has succeeded: later ones are re-prefills */
  int fails;       /* failures in a row */
  int recreations; /* so far */
  int busy;
  double not_before, last_served;
} sess_t;

typedef struct slot {
  CURL *h;
  int busy, sess;
  phase_t phase; /* of its request */
  int64_t start, n;
  int keep; /* a --verify candidate: the reply is kept whole */
  double t0;
  attnd_buf_t body, reply;
  int timing;
  double queue_ms, compute_ms, total_ms;
  char url[2200];
  char errbuf[CURL_ERROR_SIZE];
} slot_t;

typedef struct engine {
  const load_decode_run_t *run;
  load_decode_stats_t *st;
  CURLM *multi;
  struct curl_slist *headers;
  slot_t *slots;
  int *idle, n_idle;
  sess_t *sess;
  int left;     /* sessions not done */
  int stopping; /* a failure no later request can cure: nothing more sent */
  int answered; /* a reply came, of any status */
  double t0, t_last, t_first_step, t_last_step;
} engine_t;

static size_t on_body(char *p, size_t size, size_t nmemb, void *ud) {
  slot_t *s = ud;
  size_t n = size * nmemb, room = n;
  if (!s->keep)
    room = s->reply.len >= REPLY_HEAD      ? 0
           : REPLY_HEAD - s->reply.len < n ? REPLY_HEAD - s->reply.len
                                           : n;
  if (room)
    attnd_buf_append(&s->reply, p, room);
  return n;
}

static size_t on_header(char *p, size_t size, size_t nmemb, void *ud) {
  slot_t *s = ud;
  size_t n = size * nmemb;
  static const char name[] = "Server-Timing:";
  if (n > sizeof name - 1 && strncasecmp(p, name, sizeof name - 1) == 0)
    s->timing |= /* a field may come in several lines: one list */
        load_server_timing_parse(p + sizeof name - 1, n - (sizeof name - 1),
                                 &s->queue_ms, &s->compute_ms, &s->total_ms);
  return n;
}

static void note_error(load_decode_stats_t *st, const char *msg) {
  if (st->first_error[0] == 0)
    snprintf(st->first_error, sizeof st->first_error, "%s", msg);
}

/* Makes the server's text s printable ASCII in place: any other byte (a
 * control character, one of UTF-8 or not) becomes '?'. Such text goes
 * into the report's JSON, whose strings must be UTF-8 (jansson refuses
 * others, and the member was dropped), and onto a terminal. */
static void printable(char *s) {
  for (; *s; s++)
    if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e)
      *s = '?';
}

static void count_code(load_decode_stats_t *st, const char *body, size_t len) {
  char code[40];
  if (load_decode_reply_str(body, len, "code", code, sizeof code) < 0)
    snprintf(code, sizeof code, "(none)");
  printable(code);
  for (int i = 0; i < st->n_codes; i++)
    if (strcmp(st->codes[i].code, code) == 0) {
      st->codes[i].count++;
      return;
    }
  if (st->n_codes == LOAD_DECODE_MAX_CODES) { /* the last is "(other)" */
    st->codes[st->n_codes - 1].count++;
    return;
  }
  /* the last slot counts every code past the others */
  if (st->n_codes == LOAD_DECODE_MAX_CODES - 1)
    snprintf(code, sizeof code, "(other)");
  snprintf(st->codes[st->n_codes].code, sizeof st->codes[0].code, "%s", code);
  st->codes[st->n_codes++].count = 1;
}

/* Whether the reply to step `k` of session i (k = -1: its first prefill)
 * is one that --verify checks: the sessions' last steps first. */
static int wanted(const engine_t *e, int i, int64_t k) {
  const load_decode_run_t *run = e->run;
  int64_t rank = (k >= 0 ? run->steps - 1 - k : run->steps) * run->sessions + i;
  return rank < run->verify;
}

static void finish_session(engine_t *e, sess_t *s, phase_t to) {
  s->phase = to;
  if (to == PH_DONE)
    e->left--;
}

static void abandon(engine_t *e, sess_t *s) {
  e->st->abandoned++;
  finish_session(e, s, PH_DONE);
}

/* A failure that no later request can cure: nothing more is sent, and
 * the run ends once the requests in flight are answered. */
static void stop_run(engine_t *e, load_stop_t why) {
  if (e->st->stop == LOAD_STOP_NONE)
    e->st->stop = why;
  e->stopping = 1;
}

/* A failure that is an error: the same request again after a pause. */
static void failed(engine_t *e, sess_t *s, double now) {
  if (++s->fails >= LOAD_DECODE_MAX_FAILS) {
    abandon(e, s);
    return;
  }
  double first = e->run->pause_s > 0 ? e->run->pause_s : 0.01;
  double pause = first * (double)(1 << (s->fails - 1));
  s->not_before = now + (pause < 1 ? pause : 1);
}

/* The session is gone from the server: created again, its history to be
 * sent as one prefill. */
static void recreate(engine_t *e, sess_t *s, int cause) {
  e->st->recreated[cause]++;
  if (++s->recreations > LOAD_DECODE_MAX_RECREATE) {
    abandon(e, s);
    return;
  }
  s->id[0] = 0;
  s->phase = PH_CREATE;
}

/* 32 hex digits from the OS. */
static void new_id(char *id) {
  snprintf(id, 33, "%016llx%016llx", (unsigned long long)attnd_random_u64(),
           (unsigned long long)attnd_random_u64());
}

/* Starts session i's next request on an idle slot. Returns 0, or -1 when
 * out of memory. */
static int start(engine_t *e, int i, double now) {
  const load_decode_run_t *run = e->run;
  sess_t *s = &e->sess[i];
  slot_t *sl = &e->slots[e->idle[--e->n_idle]];
  CURL *h = sl->h;
  sl->busy = 1;
  sl->sess = i;
  sl->phase = s->phase;
  sl->keep = 0;
  sl->timing = 0;
  sl->errbuf[0] = 0;
  sl->body.len = 0;
  sl->reply.len = 0;
  sl->t0 = now;
  s->busy = 1;
  s->last_served = now;
  const char *method = "POST";
  switch (s->phase) {
  case PH_CREATE:
    if (run->put) {
      new_id(s->id);
      method = "PUT";
      snprintf(sl->url, sizeof sl->url, "%s/v1/sessions/%s", run->base, s->id);
    } else {
      snprintf(sl->url, sizeof sl->url, "%s/v1/sessions", run->base);
    }
    load_decode_create_body(run->shape, &sl->body);
    break;
  case PH_PREFILL:
  case PH_STEP:
    /* a prefill sends the whole history: more than `prefill` tokens after
     * a recreation */
    sl->start = s->phase == PH_PREFILL ? 0 : run->prefill + s->done;
    sl->n = s->phase == PH_PREFILL ? run->prefill + s->done : 1;
    sl->keep = s->phase == PH_STEP ? wanted(e, i, s->done)
                                   : !s->prefilled && wanted(e, i, -1);
    snprintf(sl->url, sizeof sl->url, "%s/v1/sessions/%s/attention", run->base,
             s->id);
    if (load_decode_step_body(run->shape, s->seed, sl->start, sl->n,
                              &sl->body) < 0)
      return -1;
    if (s->phase == PH_STEP && e->t_first_step == 0)
      e->t_first_step = now;
    break;
  default: /* PH_DELETE */
    method = "DELETE";
    snprintf(sl->url, sizeof sl->url, "%s/v1/sessions/%s", run->base, s->id);
    break;
  }
  if (sl->body.oom)
    return -1;
  curl_easy_setopt(h, CURLOPT_URL, sl->url);
  if (sl->body.len) {
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, NULL);
    curl_easy_setopt(h, CURLOPT_POST, 1L);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)sl->body.len);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, sl->body.data);
    if (strcmp(method, "POST") != 0)
      curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
  } else {
    curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
  }
  e->st->sent++;
  curl_multi_add_handle(e->multi, h);
  return 0;
}

/* Accounts for slot sl's finished transfer and moves its session on
 * (load_finish_fn: engine e). */
static void finish(void *engine, void *slot, CURLcode rc, double now) {
  engine_t *e = engine;
  slot_t *sl = slot;
  const load_decode_run_t *run = e->run;
  load_decode_stats_t *st = e->st;
  sess_t *s = &e->sess[sl->sess];
  long code = 0;
  if (rc == CURLE_OK)
    curl_easy_getinfo(sl->h, CURLINFO_RESPONSE_CODE, &code);
  curl_multi_remove_handle(e->multi, sl->h);
  sl->busy = 0;
  e->idle[e->n_idle++] = (int)(sl - e->slots);
  s->busy = 0;
  e->t_last = now;
  const char *body = sl->reply.data ? sl->reply.data : "";
  size_t len = sl->reply.len;
  int64_t us = (int64_t)llround((now - sl->t0) * 1e6);
  if (rc != CURLE_OK) {
    st->transport++;
    st->timeouts += rc == CURLE_OPERATION_TIMEDOUT;
    note_error(st, sl->errbuf[0] ? sl->errbuf : curl_easy_strerror(rc));
    load_stop_t stop = load_stop_at_once(rc, run->unanswered && !e->answered);
    if (stop != LOAD_STOP_NONE)
      stop_run(e, stop);
    else
      failed(e, s, now);
    return;
  }
  e->answered = 1;
  if (code < 200 || code > 299) {
    if (sl->phase == PH_DELETE && code == 404) { /* gone already: fine */
      st->ok++;
      finish_session(e, s, PH_DONE);
      st->sessions_done++;
      return;
    }
    st->status[load_status_index(code)]++;
    count_code(st, body, len);
    int gone = sl->phase == PH_PREFILL || sl->phase == PH_STEP;
    if (gone && (code == 404 || code == 410 || code == 409)) {
      st->recreate_replies++;
      recreate(e, s,
               code == 404   ? LOAD_RECREATE_404
               : code == 410 ? LOAD_RECREATE_410
                             : LOAD_RECREATE_409);
    } else if ((code == 401 || (code == 404 && sl->phase == PH_CREATE)) &&
               st->ok == 0) {
      /* no key, or one attnd does not know; no sessions route there (a
       * wrong --url): every request would meet the same, after pauses
       * that add up to seconds a session */
      stop_run(e, code == 401 ? LOAD_STOP_UNAUTHORIZED : LOAD_STOP_NOT_FOUND);
    } else {
      failed(e, s, now);
    }
    return;
  }
  /* a 2xx that is wrong (bad_replies) is an error, not a success too */
  switch (sl->phase) {
  case PH_CREATE:
    if (!run->put && !load_decode_session_id(body, len, s->id)) {
      st->bad_replies++;
      note_error(st, "a 2xx reply to a creation without a session id of 32 "
                     "hex digits");
      failed(e, s, now);
      return;
    }
    st->ok++;
    s->fails = 0;
    load_hist_record(st->create, us);
    s->phase = PH_PREFILL;
    return;
  case PH_PREFILL:
  case PH_STEP: {
    int64_t got = load_decode_reply_int(body, len, "length");
    if (got != sl->start + sl->n) {
      /* Sent again, the step meets a 409 if the server applied it, or a
       * 404 if the session is gone (attnd itself answers a step whose
       * session was deleted while it computed with a 404, not a 2xx) */
      st->bad_replies++;
      char msg[200], g[24] = "none";
      if (got >= 0)
        snprintf(g, sizeof g, "%lld", (long long)got);
      snprintf(msg, sizeof msg,
               "a %ld to a step of tokens %lld..%lld with length %s, not "
               "%lld: %.60s",
               code, (long long)sl->start, (long long)(sl->start + sl->n - 1),
               g, (long long)(sl->start + sl->n), body);
      printable(msg);
      note_error(st, msg);
      failed(e, s, now);
      return;
    }
    st->ok++;
    s->fails = 0;
    if (sl->phase == PH_PREFILL) {
      if (!s->prefilled) {
        load_hist_record(st->ttft, us);
        st->prefills++;
      }
      s->prefilled = 1;
      st->prefill_tokens += (double)sl->n;
    } else {
      load_hist_record(st->step, us);
      st->steps_ok++;
      st->decode_tokens += 1;
      s->done++;
      e->t_last_step = now;
      if (sl->timing & 1)
        load_hist_record(st->queue, load_hist_us_of_ms(sl->queue_ms));
      if (sl->timing & 2)
        load_hist_record(st->compute, load_hist_us_of_ms(sl->compute_ms));
      st->timed += sl->timing != 0;
    }
    if (sl->keep && st->n_kept < run->verify && !sl->reply.oom) {
      st->kept[st->n_kept++] = (load_decode_kept_t){
          sl->reply.data, sl->reply.len, sl->sess, sl->start, sl->n};
      attnd_buf_init(&sl->reply); /* the stats own it now */
    }
    s->phase = s->done >= run->steps ? PH_DELETE : PH_STEP;
    return;
  }
  default: /* PH_DELETE */
    st->ok++;
    s->fails = 0;
    st->sessions_done++;
    finish_session(e, s, PH_DONE);
    return;
  }
}

/* The ready session served longest ago, or -1; *wake is lowered to the
 * end of the nearest pause. */
static int next_ready(const engine_t *e, double now, double *wake) {
  int best = -1;
  for (int i = 0; i < e->run->sessions; i++) {
    const sess_t *s = &e->sess[i];
    if (s->busy || s->phase == PH_DONE)
      continue;
    if (s->not_before > now) {
      *wake = s->not_before < *wake ? s->not_before : *wake;
      continue;
    }
    if (best < 0 || s->last_served < e->sess[best].last_served)
      best = i;
  }
  return best;
}

static void engine_free(engine_t *e) {
  for (int i = 0; e->slots && i < e->run->concurrency; i++) {
    slot_t *s = &e->slots[i];
    load_easy_free(e->multi, s->h, s->busy);
    attnd_buf_free(&s->body);
    attnd_buf_free(&s->reply);
  }
  if (e->multi)
    curl_multi_cleanup(e->multi);
  curl_slist_free_all(e->headers);
  free(e->slots);
  free(e->idle);
  free(e->sess);
}

static int engine_init(engine_t *e, const load_decode_run_t *run,
                       load_decode_stats_t *st, char *err, size_t n) {
  memset(e, 0, sizeof *e);
  e->run = run;
  e->st = st;
  int c = run->concurrency;
  if (c < 1 || run->sessions < 1 || run->prefill < 1 || run->steps < 0 ||
      !(run->timeout_s > 0)) {
    snprintf(err, n,
             "bad run: concurrency %d, sessions %d, prefill %lld, steps "
             "%lld, timeout %g s",
             c, run->sessions, (long long)run->prefill, (long long)run->steps,
             run->timeout_s);
    return -1;
  }
  e->multi = curl_multi_init();
  e->slots = calloc((size_t)c, sizeof *e->slots);
  e->idle = malloc((size_t)c * sizeof *e->idle);
  e->sess = calloc((size_t)run->sessions, sizeof *e->sess);
  st->kept =
      run->verify > 0 ? calloc((size_t)run->verify, sizeof *st->kept) : NULL;
  e->headers = curl_slist_append(NULL, "Content-Type: application/json");
  if (e->headers && !curl_slist_append(e->headers, "Expect:"))
    e->headers = (curl_slist_free_all(e->headers), NULL);
  e->headers = load_access_header(e->headers, run->access);
  int ok = e->multi && e->slots && e->idle && e->sess && e->headers &&
           (run->verify <= 0 || st->kept);
  for (int i = 0; ok && i < c; i++) {
    slot_t *s = &e->slots[i];
    attnd_buf_init(&s->body);
    attnd_buf_init(&s->reply);
    if ((s->h = curl_easy_init()) == NULL) {
      ok = 0;
      break;
    }
    curl_easy_setopt(s->h, CURLOPT_PRIVATE, s);
    load_easy_setup(s->h, run->access);
    curl_easy_setopt(s->h, CURLOPT_TIMEOUT_MS,
                     (long)ceil(run->timeout_s * 1e3));
    curl_easy_setopt(s->h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(s->h, CURLOPT_WRITEDATA, s);
    curl_easy_setopt(s->h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(s->h, CURLOPT_HEADERDATA, s);
    curl_easy_setopt(s->h, CURLOPT_ERRORBUFFER, s->errbuf);
    curl_easy_setopt(s->h, CURLOPT_HTTPHEADER, e->headers);
    e->idle[e->n_idle++] = c - 1 - i; /* slot 0 is used first */
  }
  if (!ok) {
    snprintf(err, n, "out of memory setting up %d connections", c);
    return -1;
  }
  for (int i = 0; i < run->sessions; i++)
    e->sess[i].seed = load_decode_seed(run->seed, run->prefill, i);
  e->left = run->sessions;
  curl_multi_setopt(e->multi, CURLMOPT_MAXCONNECTS, (long)c);
  curl_multi_setopt(e->multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long)c);
  return 0;
}

int load_decode_run(const load_decode_run_t *run, load_decode_stats_t *st,
                    char *err, size_t n) {
  engine_t e;
  if (engine_init(&e, run, st, err, n) < 0) {
    engine_free(&e);
    return -1;
  }
  e.t0 = e.t_last = now_s();
  double cpu0 = load_cpu_now_s(), next_progress = e.t0 + 0.5;
  int rc = 0;
  for (;;) {
    double now = now_s(), wake = INFINITY;
    /* 1. issue */
    int i;
    while (!e.stopping && e.n_idle && (i = next_ready(&e, now, &wake)) >= 0)
      if (start(&e, i, now) < 0) {
        snprintf(err, n, "out of memory for a request body");
        rc = -1;
        goto out;
      }
    if ((e.left == 0 || e.stopping) && e.n_idle == run->concurrency)
      break;
    /* 2. transfers */
    int done = load_multi_transfers(e.multi, finish, &e);
    if (run->progress && load_progress_due(now, &next_progress))
      run->progress(st, now - e.t0, run->progress_arg);
    if (done)
      continue;
    /* 3. sleep, until the nearest pause ends at the latest */
    load_multi_sleep(e.multi, wake);
  }
out:
  st->elapsed_s = e.t_last - e.t0;
  st->decode_span_s = e.t_first_step > 0 && e.t_last_step > e.t_first_step
                          ? e.t_last_step - e.t_first_step
                          : 0;
  st->cpu_s = load_cpu_now_s() - cpu0;
  engine_free(&e);
  return rc;
}
