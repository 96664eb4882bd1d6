/* tools/load/report.c: see report.h. */
#include "report.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <string.h>

const char *const load_lat_names[LOAD_NLAT] = {"p50", "p90", "p99", "p99.9",
                                               "max"};
const char *const load_srv_names[LOAD_NSRV] = {"p50", "p90", "p99", "max"};
static const double lat_pct[LOAD_NLAT] = {50, 90, 99, 99.9, 100};
static const double srv_pct[LOAD_NSRV] = {50, 90, 99, 100};

/* The p-th percentile of h in ms, or no value (NAN) when h is empty. */
static double pct_ms(const load_hist_t *h, double p) {
  return h->count ? (double)load_hist_percentile(h, p) / 1e3 : NAN;
}

/* The mean of h in ms, or no value (NAN) when h is empty. */
static double mean_ms(const load_hist_t *h) {
  return h->count ? load_hist_mean(h) / 1e3 : NAN;
}

/* The times both engines' results have, in ms: the client's latency
 * (its percentiles and mean) and the server's queue and compute times
 * (their percentiles), from their histograms (us). */
static void fill_times(load_result_t *r, const load_hist_t *latency,
                       const load_hist_t *queue, const load_hist_t *compute) {
  for (int i = 0; i < LOAD_NLAT; i++)
    r->lat_ms[i] = pct_ms(latency, lat_pct[i]);
  r->lat_mean_ms = mean_ms(latency);
  for (int i = 0; i < LOAD_NSRV; i++) {
    r->queue_ms[i] = pct_ms(queue, srv_pct[i]);
    r->compute_ms[i] = pct_ms(compute, srv_pct[i]);
  }
}

void load_result_fill(load_result_t *r, const load_stats_t *st) {
  r->sent = st->sent;
  r->ok = st->ok;
  r->s429 = st->status[429];
  r->s503 = st->status[503];
  r->s504 = st->status[504];
  r->other = load_stats_other_errors(st);
  r->transport = st->transport;
  r->timeouts = st->timeouts;
  for (int s = 0; s < LOAD_STATUS_MAX; s++)
    r->status[s] = s < 200 || s > 299 ? st->status[s] : 0;
  r->error_rate =
      st->sent ? (double)load_stats_errors(st) / (double)st->sent : 0;
  r->elapsed_s = st->elapsed_s;
  double t = st->elapsed_s > 0 ? st->elapsed_s : 1;
  r->rps = (double)st->span_ok / t;
  r->tokens_per_s = st->span_tokens / t;
  r->gflops = st->span_flops / t * 1e-9;
  r->cpu_pct = 100.0 * st->cpu_s / t;
  fill_times(r, st->latency, st->queue, st->compute);
  r->timed = st->timed;
  for (int i = 0; i < LOAD_NSRV; i++)
    r->total_ms[i] = pct_ms(st->total, srv_pct[i]);
  snprintf(r->first_error, sizeof r->first_error, "%s", st->first_error);
  r->stop = st->stop
                ? st->stop
                : load_stop_of_replies(st->sent - st->transport, st->status);
}

void load_result_fill_decode(load_result_t *r, const load_decode_stats_t *st) {
  r->sent = st->sent;
  r->ok = st->ok;
  r->s429 = st->status[429];
  r->s503 = st->status[503];
  r->s504 = st->status[504];
  r->transport = st->transport;
  r->timeouts = st->timeouts;
  /* the 404, 410 and 409 that made a session be created again are not
   * errors: they are in recreated */
  r->other =
      load_decode_errors(st) - r->s429 - r->s503 - r->s504 - r->transport;
  memcpy(r->status, st->status, sizeof r->status);
  r->error_rate =
      st->sent ? (double)load_decode_errors(st) / (double)st->sent : 0;
  r->elapsed_s = st->elapsed_s;
  double t = st->elapsed_s > 0 ? st->elapsed_s : 1;
  r->rps = (double)st->ok / t;
  r->tokens_per_s =
      st->decode_span_s > 0 ? st->decode_tokens / st->decode_span_s : 0;
  r->prefill_tokens_per_s = st->prefill_tokens / t;
  r->gflops = 0;
  r->cpu_pct = 100.0 * st->cpu_s / t;
  fill_times(r, st->step, st->queue, st->compute);
  r->timed = st->timed;
  for (int i = 0; i < LOAD_NSRV; i++) {
    r->total_ms[i] = NAN; /* the decode engine reads no total */
    r->ttft_ms[i] = pct_ms(st->ttft, srv_pct[i]);
  }
  r->ttft_mean_ms = mean_ms(st->ttft);
  r->create_p50_ms = pct_ms(st->create, 50);
  r->sessions_done = st->sessions_done;
  r->abandoned = st->abandoned;
  r->bad_replies = st->bad_replies;
  for (int i = 0; i < LOAD_NRECREATE; i++)
    r->recreated[i] = st->recreated[i];
  r->n_codes = st->n_codes;
  for (int i = 0; i < st->n_codes; i++) {
    snprintf(r->codes[i].code, sizeof r->codes[i].code, "%s",
             st->codes[i].code);
    r->codes[i].count = st->codes[i].count;
  }
  snprintf(r->first_error, sizeof r->first_error, "%s", st->first_error);
  r->stop = st->stop
                ? st->stop
                : load_stop_of_replies(st->sent - st->transport, st->status);
}

static int64_t recreated_of(const load_result_t *r) {
  int64_t n = 0;
  for (int i = 0; i < LOAD_NRECREATE; i++)
    n += r->recreated[i];
  return n;
}

static int64_t errors_of(const load_result_t *r) {
  return r->s429 + r->s503 + r->s504 + r->other + r->transport;
}

/* "c=4" or "rate=100/s". */
static void load_label(const load_result_t *r, char *buf, size_t n) {
  if (r->mode == LOAD_CLOSED)
    snprintf(buf, n, "c=%d", r->concurrency);
  else
    snprintf(buf, n, "rate=%g/s", r->rate);
}

/* 1234567 as "1.23M": three significant digits and a suffix. */
static void si(double v, char *buf, size_t n) {
  static const char *const suf[] = {"", "k", "M", "G", "T"};
  int k = 0;
  while (fabs(v) >= 999.5 && k < 4) {
    v /= 1000;
    k++;
  }
  snprintf(buf, n,
           fabs(v) >= 99.95   ? "%.0f%s"
           : fabs(v) >= 9.995 ? "%.1f%s"
                              : "%.2f%s",
           v, suf[k]);
}

/* A time for the line and the table: three significant digits, or "-"
 * for no value. Writes buf[0..16) and returns it. */
static const char *ms3(double v, char buf[16]) {
  if (isnan(v))
    return "-";
  snprintf(buf, 16, "%.3g", v);
  return buf;
}

/* " | verify 3/4" (right of checked), and the replies that never came. */
static void verify_part(FILE *f, const load_result_t *r) {
  if (r->verified || r->verify_failed)
    fprintf(f, " | verify %d/%d", r->verified, r->verified + r->verify_failed);
  if (r->verify_missing)
    fprintf(f, " | %d to verify never came", r->verify_missing);
}

/* Both kinds of line end alike: the server's times where replies carried
 * them, the verification, and on a line of its own the first error
 * (`what`: which errors the engine keeps the first of). */
static void line_end(FILE *f, const load_result_t *r, const char *what) {
  char m[2][16];
  if (r->timed)
    fprintf(f, " | server queue p50 %s compute p50 %s",
            ms3(r->queue_ms[0], m[0]), ms3(r->compute_ms[0], m[1]));
  verify_part(f, r);
  fprintf(f, "\n");
  /* the error that stopped the sweep is said once, in the message on
   * the stop (attnd-load's main) */
  if (r->first_error[0] && r->stop != LOAD_STOP_TLS &&
      r->stop != LOAD_STOP_UNREACHABLE)
    fprintf(f, "  first %s: %s\n", what, r->first_error);
}

/* A decode step's line: sessions, errors, recreations, time to first
 * token, step latency and tokens per second. */
static void decode_line(FILE *f, const load_result_t *r) {
  char tok[16], m[5][16];
  si(r->tokens_per_s, tok, sizeof tok);
  fprintf(f,
          "step %d prefill=%lld c=%d: %d sessions x %lld steps, %lld/%lld "
          "done, %lld abandoned; %lld/%lld requests ok, %lld errors (429: "
          "%lld, 503: %lld, 504: %lld, other: %lld, transport: %lld), "
          "%lld recreated (404: %lld, 410: %lld, 409: %lld) | ttft ms p50 "
          "%s p99 %s | step ms p50 %s p99 %s max %s | %s tok/s",
          r->step, (long long)r->length, r->concurrency, r->sessions,
          (long long)r->steps, (long long)r->sessions_done,
          (long long)r->sessions, (long long)r->abandoned, (long long)r->ok,
          (long long)r->sent, (long long)errors_of(r), (long long)r->s429,
          (long long)r->s503, (long long)r->s504, (long long)r->other,
          (long long)r->transport, (long long)recreated_of(r),
          (long long)r->recreated[LOAD_RECREATE_404],
          (long long)r->recreated[LOAD_RECREATE_410],
          (long long)r->recreated[LOAD_RECREATE_409], ms3(r->ttft_ms[0], m[0]),
          ms3(r->ttft_ms[2], m[1]), ms3(r->lat_ms[0], m[2]),
          ms3(r->lat_ms[2], m[3]), ms3(r->lat_ms[4], m[4]), tok);
  line_end(f, r, "error");
}

void load_report_line(FILE *f, const load_result_t *r) {
  char lab[32], rps[16], tok[16], m[3][16];
  if (r->decode) {
    decode_line(f, r);
    return;
  }
  load_label(r, lab, sizeof lab);
  si(r->rps, rps, sizeof rps);
  si(r->tokens_per_s, tok, sizeof tok);
  fprintf(f, "step %d", r->step);
  if (r->length)
    fprintf(f, " L=%lld", (long long)r->length);
  if (r->attention && r->shape.dtype != ATTND_DTYPE_F32)
    fprintf(f, " %s", load_dtype_name(r->shape.dtype));
  fprintf(f,
          " %s: %lld/%lld ok, %lld errors (429: %lld, 503: %lld, 504: %lld, "
          "other: %lld, transport: %lld) | %s req/s",
          lab, (long long)r->ok, (long long)r->sent, (long long)errors_of(r),
          (long long)r->s429, (long long)r->s503, (long long)r->s504,
          (long long)r->other, (long long)r->transport, rps);
  if (r->attention)
    fprintf(f, ", %s tok/s, %.1f GFLOP/s", tok, r->gflops);
  fprintf(f, " | ms p50 %s p99 %s max %s", ms3(r->lat_ms[0], m[0]),
          ms3(r->lat_ms[2], m[1]), ms3(r->lat_ms[4], m[2]));
  line_end(f, r, "transport error");
}

/* The table of decode steps. */
static void decode_table(FILE *f, const load_result_t *r, int n) {
  fprintf(f,
          "%4s %7s %5s %8s %6s %7s %6s %6s %9s %9s %8s %8s %8s %8s %9s "
          "%9s %5s\n",
          "step", "prefill", "c", "sessions", "steps", "ok", "errors", "recrt",
          "ttft_p50", "ttft_p99", "p50_ms", "p90_ms", "p99_ms", "max_ms",
          "tok/s", "comp_p50", "cpu%");
  for (int i = 0; i < n; i++) {
    const load_result_t *x = &r[i];
    char tok[16], m[7][16];
    si(x->tokens_per_s, tok, sizeof tok);
    fprintf(f,
            "%4d %7lld %5d %8d %6lld %7lld %6lld %6lld %9s %9s %8s %8s %8s "
            "%8s %9s %9s %5.0f\n",
            x->step, (long long)x->length, x->concurrency, x->sessions,
            (long long)x->steps, (long long)x->ok, (long long)errors_of(x),
            (long long)recreated_of(x), ms3(x->ttft_ms[0], m[0]),
            ms3(x->ttft_ms[2], m[1]), ms3(x->lat_ms[0], m[2]),
            ms3(x->lat_ms[1], m[3]), ms3(x->lat_ms[2], m[4]),
            ms3(x->lat_ms[4], m[5]), tok, ms3(x->compute_ms[0], m[6]),
            x->cpu_pct);
  }
}

void load_report_table(FILE *f, const load_result_t *r, int n) {
  if (n > 0 && r[0].decode) {
    decode_table(f, r, n);
    return;
  }
  fprintf(f,
          "%4s %6s %10s %7s %7s %6s %5s %9s %9s %8s %8s %8s %8s %8s %8s "
          "%9s %9s %5s\n",
          "step", "L", "load", "sent", "ok", "errors", "429", "req/s", "tok/s",
          "GFLOP/s", "p50_ms", "p90_ms", "p99_ms", "p99.9_ms", "max_ms",
          "queue_p50", "comp_p50", "cpu%");
  for (int i = 0; i < n; i++) {
    const load_result_t *x = &r[i];
    char lab[32], rps[16], tok[16], m[7][16];
    load_label(x, lab, sizeof lab);
    si(x->rps, rps, sizeof rps);
    si(x->tokens_per_s, tok, sizeof tok);
    fprintf(f,
            "%4d %6lld %10s %7lld %7lld %6lld %5lld %9s %9s %8.1f %8s %8s "
            "%8s %8s %8s %9s %9s %5.0f\n",
            x->step, (long long)x->length, lab, (long long)x->sent,
            (long long)x->ok, (long long)errors_of(x), (long long)x->s429, rps,
            x->attention ? tok : "-", x->gflops, ms3(x->lat_ms[0], m[0]),
            ms3(x->lat_ms[1], m[1]), ms3(x->lat_ms[2], m[2]),
            ms3(x->lat_ms[3], m[3]), ms3(x->lat_ms[4], m[4]),
            ms3(x->queue_ms[0], m[5]), ms3(x->compute_ms[0], m[6]), x->cpu_pct);
  }
}

/* ---- CSV ----------------------------------------------------------------- */

static int io_fail(char *err, size_t en, const char *path) {
  snprintf(err, en, "cannot write %s: %s", path, strerror(errno));
  return -1;
}

/* --verify's largest relative error, or NaN (no value) where no reply was
 * checked or one could not be measured (not read as a tensor at all). */
static double verify_err(const load_result_t *x) {
  return x->verified + x->verify_failed > 0 && isfinite(x->verify_max_err)
             ? x->verify_max_err
             : NAN;
}

/* Writes ",v" in ms to three decimals, or "," alone for no value. */
static void csv_ms(FILE *f, double v) {
  if (isnan(v))
    fputc(',', f);
  else
    fprintf(f, ",%.3f", v);
}

/* Writes v as one CSV cell: quoted, quotes doubled, when it holds a comma,
 * a quote or a line break (RFC 4180). */
static void csv_cell(FILE *f, const char *v) {
  if (strpbrk(v, ",\"\r\n") == NULL) {
    fputs(v, f);
    return;
  }
  fputc('"', f);
  for (const char *p = v; *p; p++) {
    if (*p == '"')
      fputc('"', f);
    fputc(*p, f);
  }
  fputc('"', f);
}

int load_report_csv(const char *path, const load_result_t *r, int n, char *err,
                    size_t en) {
  FILE *f = fopen(path, "w");
  if (f == NULL)
    return io_fail(err, en, path);
  fprintf(f,
          "step,length,B,Lq,Lk,E,H,Hkv,causal,key_lengths,weights,"
          "projections,encoding,protocol,model,compress,dtype,mode,concurrency,"
          "rate,"
          "window_s,elapsed_s,"
          "sent,ok,err_429,err_503,err_504,err_other,err_transport,err_timeout,"
          "error_rate,rps,tokens_per_s,gflops");
  for (int i = 0; i < LOAD_NLAT; i++)
    fprintf(f, ",lat_%s_ms", i == 3 ? "p999" : load_lat_names[i]);
  fprintf(f, ",lat_mean_ms,timed");
  static const char *const srv[3] = {"queue", "compute", "total"};
  for (int k = 0; k < 3; k++)
    for (int i = 0; i < LOAD_NSRV; i++)
      fprintf(f, ",%s_%s_ms", srv[k], load_srv_names[i]);
  fprintf(f, ",client_cpu_pct,verified,verify_failed,verify_missing,"
             "verify_max_err,"
             "workload,sessions,steps,create,rope,ttft_p50_ms,ttft_p90_ms,"
             "ttft_p99_ms,ttft_max_ms,ttft_mean_ms,create_p50_ms,"
             "prefill_tokens_per_s,sessions_done,abandoned,recreated,"
             "recreated_404,recreated_410,recreated_409,bad_replies,"
             "stopped\n");
  for (int j = 0; j < n; j++) {
    const load_result_t *x = &r[j];
    const load_shape_t *s = &x->shape;
    fprintf(f, "%d,%lld,", x->step, (long long)x->length);
    if (x->attention || x->decode) {
      fprintf(f, "%lld,%lld,%lld,%lld,%lld,%lld,%s,%s,%s,%s,%s,%s,",
              (long long)s->B, (long long)s->Lq, (long long)s->Lk,
              (long long)s->E, (long long)s->H, (long long)s->Hkv,
              load_causal_name(s->causal), s->key_lengths ? "random" : "none",
              load_weights_name(s->weights),
              x->decode ? (x->dshape.layer ? "resident" : "none")
                        : load_projections_name(s),
              load_tensors_name(s), load_protocol_name(s->protocol));
      csv_cell(f, s->model ? s->model : "");
      fprintf(f, ",%s,%s,", load_compress_name(s->compress),
              load_dtype_name(s->dtype));
    } else {
      fprintf(f, ",,,,,,,,,,,,,,,");
    }
    fprintf(
        f,
        "%s,%d,%g,%g,%.3f,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%.6g,%.6g,"
        "%.6g,%.6g",
        x->mode == LOAD_CLOSED ? "closed" : "open", x->concurrency, x->rate,
        x->window_s, x->elapsed_s, (long long)x->sent, (long long)x->ok,
        (long long)x->s429, (long long)x->s503, (long long)x->s504,
        (long long)x->other, (long long)x->transport, (long long)x->timeouts,
        x->error_rate, x->rps, x->tokens_per_s, x->gflops);
    for (int i = 0; i < LOAD_NLAT; i++)
      csv_ms(f, x->lat_ms[i]);
    csv_ms(f, x->lat_mean_ms);
    fprintf(f, ",%lld", (long long)x->timed);
    const double *sv[3] = {x->queue_ms, x->compute_ms, x->total_ms};
    for (int k = 0; k < 3; k++)
      for (int i = 0; i < LOAD_NSRV; i++)
        csv_ms(f, sv[k][i]);
    fprintf(f, ",%.1f,%d,%d,%d,", x->cpu_pct, x->verified, x->verify_failed,
            x->verify_missing);
    if (!isnan(verify_err(x)))
      fprintf(f, "%.3g", verify_err(x));
    fputc(',', f);
    if (!x->decode) {
      fprintf(f, "request,,,,,,,,,,,,,,,,,,,%s\n", load_stop_names[x->stop]);
      continue;
    }
    static const char *const ropes[] = {"none", "half", "interleaved"};
    fprintf(f, "decode,%d,%lld,%s,%s", x->sessions, (long long)x->steps,
            x->put ? "put" : "post", ropes[x->dshape.rope]);
    for (int i = 0; i < LOAD_NSRV; i++)
      csv_ms(f, x->ttft_ms[i]);
    csv_ms(f, x->ttft_mean_ms);
    csv_ms(f, x->create_p50_ms);
    fprintf(f, ",%.6g,%lld,%lld,%lld", x->prefill_tokens_per_s,
            (long long)x->sessions_done, (long long)x->abandoned,
            (long long)recreated_of(x));
    for (int i = 0; i < LOAD_NRECREATE; i++)
      fprintf(f, ",%lld", (long long)x->recreated[i]);
    fprintf(f, ",%lld,%s\n", (long long)x->bad_replies,
            load_stop_names[x->stop]);
  }
  if (fclose(f) != 0)
    return io_fail(err, en, path);
  return 0;
}

/* ---- JSON ---------------------------------------------------------------- */

/* A time in ms as JSON: a number, or null for no value. */
static json_t *ms_json(double v) {
  return isnan(v) ? json_null() : json_real(v);
}

static json_t *pct_object(const char *const *names, const double *v, int n) {
  json_t *o = json_object();
  for (int i = 0; i < n; i++)
    json_object_set_new(o, names[i], ms_json(v[i]));
  return o;
}

static json_t *step_json(const load_result_t *x) {
  json_t *o = json_pack("{s:i,s:I,s:s,s:i,s:f,s:f,s:f}", "step", x->step,
                        "length", (json_int_t)x->length, "mode",
                        x->mode == LOAD_CLOSED ? "closed" : "open",
                        "concurrency", x->concurrency, "rate", x->rate,
                        "window_s", x->window_s, "elapsed_s", x->elapsed_s);
  if (x->attention || x->decode) {
    const load_shape_t *s = &x->shape;
    json_t *sh = json_pack(
        "{s:I,s:I,s:I,s:I,s:I,s:I,s:s,s:s,s:s,s:s,s:s,s:I,s:s,s:s}", "B",
        (json_int_t)s->B, "Lq", (json_int_t)s->Lq, "Lk", (json_int_t)s->Lk, "E",
        (json_int_t)s->E, "H", (json_int_t)s->H, "Hkv", (json_int_t)s->Hkv,
        "causal", load_causal_name(s->causal), "key_lengths",
        s->key_lengths ? "random" : "none", "weights",
        load_weights_name(s->weights), "projections",
        x->decode ? (x->dshape.layer ? "resident" : "none")
                  : load_projections_name(s),
        "encoding", load_tensors_name(s), "timeout_ms",
        (json_int_t)s->timeout_ms, "protocol", load_protocol_name(s->protocol),
        "compress", load_compress_name(s->compress));
    json_object_set_new(sh, "dtype", json_string(load_dtype_name(s->dtype)));
    if (s->model)
      json_object_set_new(sh, "model", json_string(s->model));
    json_object_set_new(o, "shape", sh);
  }
  json_t *by_status = json_object();
  for (int s = 0; s < LOAD_STATUS_MAX; s++) {
    char k[16];
    snprintf(k, sizeof k, "%d", s);
    if (x->status[s])
      json_object_set_new(by_status, s == LOAD_STATUS_INVALID ? "invalid" : k,
                          json_integer(x->status[s]));
  }
  json_object_set_new(o, "sent", json_integer(x->sent));
  json_object_set_new(o, "succeeded", json_integer(x->ok));
  json_object_set_new(
      o, "errors",
      json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:o}", "429", (json_int_t)x->s429,
                "503", (json_int_t)x->s503, "504", (json_int_t)x->s504,
                "other_status", (json_int_t)x->other, "transport",
                (json_int_t)x->transport, "transport_timeouts",
                (json_int_t)x->timeouts, "by_status", by_status));
  json_object_set_new(o, "error_rate", json_real(x->error_rate));
  json_object_set_new(o, "throughput",
                      json_pack("{s:f,s:f,s:f}", "requests_per_s", x->rps,
                                "tokens_per_s", x->tokens_per_s, "gflops",
                                x->gflops));
  json_t *lat = pct_object(load_lat_names, x->lat_ms, LOAD_NLAT);
  json_object_set_new(lat, "mean", ms_json(x->lat_mean_ms));
  json_object_set_new(o, "latency_ms", lat);
  json_object_set_new(
      o, "server_ms",
      json_pack("{s:I,s:o,s:o,s:o}", "replies_timed", (json_int_t)x->timed,
                "queue", pct_object(load_srv_names, x->queue_ms, LOAD_NSRV),
                "compute", pct_object(load_srv_names, x->compute_ms, LOAD_NSRV),
                "total", pct_object(load_srv_names, x->total_ms, LOAD_NSRV)));
  json_object_set_new(o, "client_cpu_pct", json_real(x->cpu_pct));
  json_object_set_new(o, "verify",
                      json_pack("{s:i,s:i,s:i,s:o}", "passed", x->verified,
                                "failed", x->verify_failed, "missing",
                                x->verify_missing, "max_rel_err",
                                ms_json(verify_err(x))));
  json_object_set_new(o, "workload",
                      json_string(x->decode ? "decode" : "request"));
  if (x->decode) {
    json_t *codes = json_object();
    for (int i = 0; i < x->n_codes; i++)
      json_object_set_new(codes, x->codes[i].code,
                          json_integer(x->codes[i].count));
    json_object_set_new(json_object_get(o, "errors"), "by_code", codes);
    json_t *ttft = pct_object(load_srv_names, x->ttft_ms, LOAD_NSRV);
    json_object_set_new(ttft, "mean", ms_json(x->ttft_mean_ms));
    static const char *const ropes[] = {"none", "half", "interleaved"};
    json_t *d = json_pack(
        "{s:i,s:I,s:I,s:s,s:s,s:o,s:o,s:f,s:f,s:I,s:I,s:I,s:{s:I,s:I,s:I},"
        "s:I}",
        "sessions", x->sessions, "prefill", (json_int_t)x->length, "steps",
        (json_int_t)x->steps, "create", x->put ? "put" : "post", "rope",
        ropes[x->dshape.rope], "ttft_ms", ttft, "create_p50_ms",
        ms_json(x->create_p50_ms), "decode_tokens_per_s", x->tokens_per_s,
        "prefill_tokens_per_s", x->prefill_tokens_per_s, "sessions_done",
        (json_int_t)x->sessions_done, "abandoned", (json_int_t)x->abandoned,
        "recreated", (json_int_t)recreated_of(x), "recreated_by", "404",
        (json_int_t)x->recreated[LOAD_RECREATE_404], "410",
        (json_int_t)x->recreated[LOAD_RECREATE_410], "409",
        (json_int_t)x->recreated[LOAD_RECREATE_409], "bad_replies",
        (json_int_t)x->bad_replies);
    if (x->dshape.layer)
      json_object_set_new(d, "layer", json_string(x->dshape.layer));
    json_object_set_new(o, "decode", d);
  }
  if (x->first_error[0])
    json_object_set_new(o, x->decode ? "first_error" : "first_transport_error",
                        json_string(x->first_error));
  json_object_set_new(o, "stopped",
                      x->stop ? json_string(load_stop_names[x->stop])
                              : json_null());
  return o;
}

int load_report_json(const char *path, const char *url, const load_result_t *r,
                     int n, char *err, size_t en) {
  json_t *steps = json_array();
  for (int i = 0; i < n; i++)
    json_array_append_new(steps, step_json(&r[i]));
  json_t *doc = json_pack("{s:s,s:o}", "target", url, "steps", steps);
  int rc =
      doc ? json_dump_file(doc, path, JSON_INDENT(1) | JSON_REAL_PRECISION(6))
          : -1;
  json_decref(doc);
  if (rc < 0)
    return io_fail(err, en, path);
  return 0;
}

/* ---- SVG ----------------------------------------------------------------- */

enum {
  PANEL_W = 400,
  PANEL_H = 320,
  PAD_L = 62,
  PAD_R = 14,
  PAD_T = 40,
  PAD_B = 46,
  TOP = 34
};

static const char *const palette[] = {"#1f77b4", "#d62728", "#2ca02c",
                                      "#9467bd", "#ff7f0e", "#8c564b",
                                      "#e377c2", "#17becf"};
#define NPAL (sizeof palette / sizeof palette[0])

/* One quantity plotted in a panel, in the given dash style. */
typedef struct curve {
  const char *name; /* legend, e.g. "p50" */
  const char *dash; /* stroke-dasharray, "" for solid */
  double (*value)(const load_result_t *);
} curve_t;

static double v_p50(const load_result_t *r) {
  return r->lat_ms[0];
}
static double v_p99(const load_result_t *r) {
  return r->lat_ms[2];
}
static double v_tok(const load_result_t *r) {
  return r->tokens_per_s;
}
static double v_queue(const load_result_t *r) {
  return r->queue_ms[0];
}
static double v_compute(const load_result_t *r) {
  return r->compute_ms[0];
}
static double v_ttft50(const load_result_t *r) {
  return r->ttft_ms[0];
}
static double v_ttft99(const load_result_t *r) {
  return r->ttft_ms[2];
}

/* A log-scaled axis from lo to hi (both > 0), over pixels a..b. */
typedef struct axis {
  double lo, hi, a, b;
} axis_t;

static double ax_map(const axis_t *x, double v) {
  return x->a +
         (x->b - x->a) * (log(v) - log(x->lo)) / (log(x->hi) - log(x->lo));
}

/* Tick labels of powers of ten: 0.01, 0.1, 1, 10, 100, 1k, 10k, ... */
static void tick_label(double v, char *buf, size_t n) {
  static const char *const suf[] = {"", "k", "M", "G", "T"};
  int k = 0;
  while (v >= 999.5 && k < 4) {
    v /= 1000;
    k++;
  }
  snprintf(buf, n, "%g%s", v, suf[k]);
}

/* Whether steps i and j belong to one line: same mode and load. */
static int same_series(const load_result_t *a, const load_result_t *b) {
  return a->mode == b->mode && a->concurrency == b->concurrency &&
         a->rate == b->rate;
}

/* Whether step i is the first of its series among r[0..i]. */
static int first_of_series(const load_result_t *r, int i) {
  for (int j = 0; j < i; j++)
    if (same_series(&r[j], &r[i]))
      return 0;
  return 1;
}

/* Draws panel k: a log-log plot of `curves` against the length, one colour
 * per series, values below `vmin` drawn at it. */
static void panel(FILE *f, int k, const char *title, const char *unit,
                  const curve_t *curves, int nc, double vmin,
                  const load_result_t *r, int n, const axis_t *xa0,
                  const char *xlabel) {
  double x0 = k * PANEL_W, y0 = TOP;
  axis_t xa = *xa0;
  xa.a += x0;
  xa.b += x0;
  double lo = INFINITY, hi = 0;
  for (int i = 0; i < n; i++)
    for (int c = 0; c < nc; c++) {
      double v = curves[c].value(&r[i]);
      if (isnan(v)) /* no value: no point */
        continue;
      v = v < vmin ? vmin : v;
      lo = v < lo ? v : lo;
      hi = v > hi ? v : hi;
    }
  if (lo > hi) /* no point at all */
    lo = hi = vmin;
  axis_t ya = {pow(10, floor(log10(lo))), pow(10, ceil(log10(hi))),
               y0 + PANEL_H - PAD_B, y0 + PAD_T};
  if (ya.hi <= ya.lo)
    ya.hi = ya.lo * 10;
  fprintf(f,
          "<text x='%g' y='%g' font-size='14' text-anchor='middle'>%s</text>\n",
          x0 + PAD_L + (PANEL_W - PAD_L - PAD_R) / 2.0, y0 + 20, title);
  /* grid and labels */
  for (double v = ya.lo; v <= ya.hi * 1.0001; v *= 10) {
    char lab[16];
    tick_label(v, lab, sizeof lab);
    double y = ax_map(&ya, v);
    fprintf(f,
            "<line x1='%g' y1='%g' x2='%g' y2='%g' stroke='#ddd'/>\n"
            "<text x='%g' y='%g' font-size='11' text-anchor='end'>%s</text>\n",
            xa.a, y, xa.b, y, xa.a - 4, y + 4, lab);
  }
  for (int i = 0; i < n; i++) {
    int dup = 0;
    for (int j = 0; j < i; j++)
      dup |= r[j].length == r[i].length;
    if (dup)
      continue;
    double x = ax_map(&xa, (double)r[i].length);
    fprintf(f,
            "<line x1='%g' y1='%g' x2='%g' y2='%g' stroke='#ddd'/>\n"
            "<text x='%g' y='%g' font-size='11' "
            "text-anchor='middle'>%lld</text>\n",
            x, ya.b, x, ya.a, x, ya.a + 16, (long long)r[i].length);
  }
  fprintf(f,
          "<rect x='%g' y='%g' width='%g' height='%g' fill='none' "
          "stroke='#444'/>\n"
          "<text x='%g' y='%g' font-size='12' "
          "text-anchor='middle'>%s</text>\n"
          "<text x='%g' y='%g' font-size='12' text-anchor='middle' "
          "transform='rotate(-90 %g %g)'>%s</text>\n",
          xa.a, ya.b, xa.b - xa.a, ya.a - ya.b, (xa.a + xa.b) / 2, ya.a + 34,
          xlabel, x0 + 16, (ya.a + ya.b) / 2, x0 + 16, (ya.a + ya.b) / 2, unit);
  /* per series and curve, a polyline through the steps in order of length,
   * broken where a step has no value: a line over a step that measured
   * nothing would show a value there */
  int series = 0;
  for (int i = 0; i < n; i++) {
    if (!first_of_series(r, i))
      continue;
    const char *col = palette[series++ % NPAL];
    for (int c = 0; c < nc; c++) {
      int open = 0;
      for (int j = i; j < n; j++) {
        if (!same_series(&r[j], &r[i]))
          continue;
        double v = curves[c].value(&r[j]);
        if (isnan(v) && open)
          fprintf(f, "'/>\n");
        if (isnan(v)) {
          open = 0;
          continue;
        }
        if (!open)
          fprintf(f,
                  "<polyline fill='none' stroke='%s' stroke-width='2' "
                  "stroke-dasharray='%s' points='",
                  col, curves[c].dash);
        open = 1;
        fprintf(f, "%.1f,%.1f ", ax_map(&xa, (double)r[j].length),
                ax_map(&ya, v < vmin ? vmin : v));
      }
      if (open)
        fprintf(f, "'/>\n");
      for (int j = i; j < n; j++)
        if (same_series(&r[j], &r[i]) && !isnan(curves[c].value(&r[j]))) {
          double v = curves[c].value(&r[j]);
          fprintf(f, "<circle cx='%.1f' cy='%.1f' r='3' fill='%s'/>\n",
                  ax_map(&xa, (double)r[j].length),
                  ax_map(&ya, v < vmin ? vmin : v), col);
        }
    }
  }
  /* the curves' legend */
  double lx = xa.a + 8, ly = ya.b + 14;
  for (int c = 0; c < nc; c++) {
    fprintf(f,
            "<line x1='%g' y1='%g' x2='%g' y2='%g' stroke='#444' "
            "stroke-width='2' stroke-dasharray='%s'/>\n"
            "<text x='%g' y='%g' font-size='11'>%s</text>\n",
            lx, ly, lx + 24, ly, curves[c].dash, lx + 28, ly + 4,
            curves[c].name);
    lx += 44 + 7 * (double)strlen(curves[c].name);
  }
}

int load_report_svg(const char *path, const char *title,
                    const load_result_t *all, int n_all, char *err, size_t en) {
  /* only steps with a length can be placed on the axis */
  load_result_t *r = malloc((size_t)(n_all > 0 ? n_all : 1) * sizeof *r);
  if (r == NULL) {
    snprintf(err, en, "out of memory");
    return -1;
  }
  int n = 0;
  for (int i = 0; i < n_all; i++)
    if (all[i].length > 0)
      r[n++] = all[i];
  FILE *f = fopen(path, "w");
  if (f == NULL) {
    free(r);
    return io_fail(err, en, path);
  }
  int decode = 0;
  for (int i = 0; i < n; i++)
    decode |= r[i].decode;
  int width = (3 + decode) * PANEL_W, height = TOP + PANEL_H + 26;
  fprintf(f,
          "<svg xmlns='http://www.w3.org/2000/svg' width='%d' height='%d' "
          "viewBox='0 0 %d %d' font-family='sans-serif'>\n"
          "<rect width='100%%' height='100%%' fill='white'/>\n"
          "<text x='%d' y='22' font-size='16' text-anchor='middle'>",
          width, height, width, height, width / 2);
  for (const char *p = title; *p; p++) /* text: escape markup */
    if (*p == '<')
      fputs("&lt;", f);
    else if (*p == '&')
      fputs("&amp;", f);
    else
      fputc(*p, f);
  /* a sweep cut short says so, or its picture would pass for a whole one */
  static const char *const stop_says[LOAD_NSTOP] = {
      "", "a TLS handshake failed", "nothing answered at the URL",
      "every reply 401 unauthorized", "every reply 404 not found"};
  for (int i = 0; i < n_all; i++)
    if (all[i].stop)
      fprintf(f, "; stopped at step %d: %s", all[i].step,
              stop_says[all[i].stop]);
  fprintf(f, "</text>\n");
  if (n == 0) {
    fprintf(f,
            "<text x='%d' y='%d' font-size='14' text-anchor='middle'>no "
            "steps with a context length</text>\n",
            width / 2, height / 2);
  } else {
    double lo = INFINITY, hi = 0;
    for (int i = 0; i < n; i++) {
      lo = (double)r[i].length < lo ? (double)r[i].length : lo;
      hi = (double)r[i].length > hi ? (double)r[i].length : hi;
    }
    if (hi <= lo) { /* one length: centre it */
      lo /= 2;
      hi *= 2;
    }
    axis_t xa = {lo / 1.25, hi * 1.25, PAD_L, PANEL_W - PAD_R};
    static const curve_t lat[] = {{"p50", "", v_p50}, {"p99", "6 4", v_p99}};
    static const curve_t tok[] = {{"tokens/s", "", v_tok}};
    static const curve_t srv[] = {{"compute p50", "", v_compute},
                                  {"queue p50", "2 3", v_queue}};
    const char *xl = decode ? "context length (prefill)" : "context length";
    static const curve_t ttft[] = {{"p50", "", v_ttft50},
                                   {"p99", "6 4", v_ttft99}};
    panel(f, 0, decode ? "decode step latency (1 token)" : "client latency",
          "ms", lat, 2, 1e-3, r, n, &xa, xl);
    panel(f, 1, decode ? "decode throughput" : "throughput", "tokens/s", tok, 1,
          1e-3, r, n, &xa, xl);
    panel(f, 2,
          decode ? "server time of a step (Server-Timing)"
                 : "server time (Server-Timing)",
          "ms", srv, 2, 1e-3, r, n, &xa, xl);
    if (decode)
      panel(f, 3, "time to first token (prefill)", "ms", ttft, 2, 1e-3, r, n,
            &xa, xl);
    /* the series' legend, under the panels */
    int series = 0;
    for (int i = 0; i < n; i++) {
      if (!first_of_series(r, i))
        continue;
      char lab[32];
      load_label(&r[i], lab, sizeof lab);
      double lx = PAD_L + series * 110, ly = TOP + PANEL_H + 8;
      fprintf(f,
              "<line x1='%g' y1='%g' x2='%g' y2='%g' stroke='%s' "
              "stroke-width='3'/>\n"
              "<text x='%g' y='%g' font-size='12'>%s</text>\n",
              lx, ly, lx + 24, ly, palette[series % NPAL], lx + 28, ly + 4,
              lab);
      series++;
    }
  }
  fprintf(f, "</svg>\n");
  free(r);
  if (fclose(f) != 0)
    return io_fail(err, en, path);
  return 0;
}
