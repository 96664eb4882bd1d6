/* tools/load/main.c: attnd-load, the load tester of attnd.
 *
 * Sweeps context lengths crossed with concurrencies (closed loop) or
 * arrival rates (open loop) against POST /v1/attention, the Open Inference
 * Protocol's POST /v2/models/{model}/infer, or any GET path; or, with
 * --mode decode, prefill lengths crossed with concurrencies against
 * KV-cache sessions (decode.h: a prefill, then one-token steps);
 * reports per step what was sent, what succeeded, the errors by kind,
 * throughput, client latency percentiles and the server's Server-Timing
 * percentiles; writes CSV, JSON and an SVG plot; exits non-zero when a
 * step's error rate is over --max-error-rate or a --verify check fails.
 *
 * Exit status: 0 passed; 1 a step over --max-error-rate, a reply that
 * --verify found wrong, replies it asked for that never came, or a decode
 * session abandoned; 2 bad usage, or the sweep could not run; 3 the sweep
 * stopped at a failure that no later step could cure (load_stop_t: a
 * failed TLS handshake, nothing listening, every reply of a step a 401 or
 * a 404). */
#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client.h"
#include "codec/deflate.h"
#include "decode.h"
#include "gen.h"
#include "report.h"
#include "v2.h"
#include "verify.h"

#include "options.h"

/* ---- progress on a terminal ---------------------------------------------- */

typedef struct progress {
  const char *what; /* "step 3 L=512 c=4" */
  double total_s;   /* warm-up and window, or 0 when counting requests */
} progress_t;

static void on_progress(const load_stats_t *st, double t, void *arg) {
  const progress_t *p = arg;
  fprintf(stderr, "\r\033[K%s: %.1f/%.1f s, %lld sent, %lld ok, %lld errors",
          p->what, t, p->total_s, (long long)st->sent, (long long)st->ok,
          (long long)load_stats_errors(st));
  fflush(stderr);
}

/* ---- one step ------------------------------------------------------------ */

/* The pool of request bodies of one length. */
typedef struct pool {
  load_body_t *bodies;
  int n;
} pool_t;

static void pool_free(pool_t *p) {
  for (int i = 0; i < p->n; i++)
    free((char *)p->bodies[i].data);
  free(p->bodies);
  p->bodies = NULL;
  p->n = 0;
}

static int pool_build(pool_t *p, const opts_t *o, const load_shape_t *s,
                      int64_t length) {
  p->n = 0;
  p->bodies = calloc((size_t)o->variants, sizeof *p->bodies);
  if (p->bodies == NULL)
    return -1;
  for (int v = 0; v < o->variants; v++) {
    load_request_t r;
    char err[512];
    if (load_gen_request(s, load_gen_seed(o->seed, length, v), 1, &r, err,
                         sizeof err) < 0) {
      fprintf(stderr, "attnd-load: L=%lld: %s\n", (long long)length, err);
      return -1;
    }
    p->bodies[p->n++] =
        (load_body_t){r.body, r.body_len, r.flops, r.tokens, r.json_len};
    r.body = NULL; /* the pool owns it now */
    load_gen_free(&r);
  }
  return 0;
}

/* Checks the replies kept in `st` against the core. */
static void verify_step(const opts_t *o, const load_shape_t *s, int64_t length,
                        const load_stats_t *st, load_result_t *res) {
  res->verify_max_err = 0;
  for (int i = 0; i < st->n_kept; i++) {
    const load_kept_t *k = &st->kept[i];
    load_request_t r;
    char why[512];
    double e = INFINITY;
    int ok =
        load_gen_request(s, load_gen_seed(o->seed, length, (int)k->variant), 0,
                         &r, why, sizeof why) == 0;
    if (ok) {
      ok = load_verify_reply(s, &r, k->body, k->len, k->header_len,
                             (int)o->verify_threads, &e, why, sizeof why) == 0;
      load_gen_free(&r);
    }
    res->verified += ok;
    res->verify_failed += !ok;
    if (!(e <= res->verify_max_err))
      res->verify_max_err = e;
    if (!ok)
      fprintf(stderr, "attnd-load: step %d: verify: %s\n", res->step, why);
  }
  if (st->n_kept < o->verify) {
    fprintf(stderr,
            "attnd-load: step %d: verify: only %d of %d replies to check\n",
            res->step, st->n_kept, (int)o->verify);
    res->verify_missing += (int)o->verify - st->n_kept;
  }
}

/* The bodies' content headers in `run`, for shape s. */
static void set_content(load_run_t *run, const load_shape_t *s) {
  /* tritonclient sends no Content-Type */
  run->content_type = s->protocol == LOAD_V1 ? "application/json" : NULL;
  run->content_encoding = s->compress == ATTND_CODING_IDENTITY
                              ? NULL
                              : attnd_coding_name(s->compress);
  run->accept_encoding = run->content_encoding;
}

static int run_step(const opts_t *o, const load_shape_t *s, int64_t length,
                    const pool_t *pool, double load, load_result_t *res) {
  load_stats_t st;
  if (load_stats_init(&st) < 0) {
    fprintf(stderr, "attnd-load: out of memory\n");
    return -1;
  }
  res->mode = o->mode;
  res->concurrency = o->mode == LOAD_CLOSED ? (int)load : (int)o->connections;
  res->rate = o->mode == LOAD_OPEN ? load : 0;
  res->window_s = o->duration;
  char what[96];
  snprintf(what, sizeof what, "step %d L=%lld %s=%g", res->step,
           (long long)length, o->mode == LOAD_CLOSED ? "c" : "rate", load);
  progress_t pr = {what, o->duration > 0 ? o->warmup + o->duration : 0};
  int tty = !o->quiet && isatty(2);
  load_run_t run = {.url = o->url,
                    .bodies = pool->bodies,
                    .n_bodies = (size_t)pool->n,
                    .mode = o->mode,
                    .concurrency = res->concurrency,
                    .rate = res->rate,
                    .poisson = o->arrival == 1,
                    .warmup_s = o->warmup,
                    .duration_s = o->duration,
                    .requests = o->requests,
                    .timeout_s = o->timeout,
                    .seed = load_gen_seed(o->seed, length, -1 - res->step),
                    .keep = pool->n ? (int)o->verify : 0,
                    .access = &o->access,
                    .unanswered = res->step == 1,
                    .progress = tty ? on_progress : NULL,
                    .progress_arg = &pr};
  set_content(&run, s);
  char err[512];
  int rc = load_client_run(&run, &st, err, sizeof err);
  if (tty)
    fprintf(stderr, "\r\033[K");
  if (rc < 0) {
    fprintf(stderr, "attnd-load: %s: %s\n", what, err);
    load_stats_free(&st);
    return -1;
  }
  load_result_fill(res, &st);
  if (pool->n && o->verify)
    verify_step(o, s, length, &st, res);
  load_stats_free(&st);
  if (!o->quiet)
    load_report_line(stderr, res);
  return 0;
}

/* ---- one decode step ----------------------------------------------------- */

typedef struct decode_progress {
  const char *what;
  int sessions;
} decode_progress_t;

static void on_decode_progress(const load_decode_stats_t *st, double t,
                               void *arg) {
  const decode_progress_t *p = arg;
  fprintf(stderr,
          "\r\033[K%s: %.1f s, %lld/%d sessions done, %lld steps, %lld "
          "errors, %lld recreated",
          p->what, t, (long long)st->sessions_done, p->sessions,
          (long long)st->steps_ok, (long long)load_decode_errors(st),
          (long long)(st->recreated[0] + st->recreated[1] + st->recreated[2]));
  fflush(stderr);
}

/* Checks the step replies kept in `st` against the core. */
static void verify_decode(const opts_t *o, int64_t L,
                          const load_decode_stats_t *st, load_result_t *res) {
  res->verify_max_err = 0;
  for (int i = 0; i < st->n_kept; i++) {
    const load_decode_kept_t *k = &st->kept[i];
    char why[512];
    double e = INFINITY;
    int ok =
        load_decode_verify(&o->dshape, load_decode_seed(o->seed, L, k->session),
                           k->start, k->n, k->body, k->len,
                           (int)o->verify_threads, &e, why, sizeof why) == 0;
    res->verified += ok;
    res->verify_failed += !ok;
    if (!(e <= res->verify_max_err))
      res->verify_max_err = e;
    if (!ok)
      fprintf(stderr,
              "attnd-load: step %d: verify: session %d, tokens %lld..%lld: "
              "%s\n",
              res->step, k->session, (long long)k->start,
              (long long)(k->start + k->n - 1), why);
  }
  if (st->n_kept < o->verify) {
    fprintf(stderr,
            "attnd-load: step %d: verify: only %d of %d step replies to "
            "check\n",
            res->step, st->n_kept, (int)o->verify);
    res->verify_missing += (int)o->verify - st->n_kept;
  }
}

static int run_decode_step(const opts_t *o, int64_t L, int c,
                           load_result_t *res) {
  load_decode_stats_t st;
  if (load_decode_stats_init(&st) < 0) {
    fprintf(stderr, "attnd-load: out of memory\n");
    return -1;
  }
  res->decode = 1;
  res->mode = LOAD_CLOSED;
  res->concurrency = c;
  res->dshape = o->dshape;
  res->sessions = (int)o->sessions;
  res->steps = o->steps;
  res->put = o->create == 1;
  res->shape = o->shape;
  res->shape.Lk = L;
  char what[96];
  snprintf(what, sizeof what, "step %d prefill=%lld c=%d", res->step,
           (long long)L, c);
  decode_progress_t pr = {what, (int)o->sessions};
  int tty = !o->quiet && isatty(2);
  load_decode_run_t run = {.base = o->base_url,
                           .shape = &o->dshape,
                           .put = res->put,
                           .sessions = (int)o->sessions,
                           .prefill = L,
                           .steps = o->steps,
                           .concurrency = c,
                           .timeout_s = o->timeout,
                           .seed = (uint64_t)o->seed,
                           .verify = (int)o->verify,
                           .access = &o->access,
                           .unanswered = res->step == 1,
                           .progress = tty ? on_decode_progress : NULL,
                           .progress_arg = &pr};
  char err[512];
  int rc = load_decode_run(&run, &st, err, sizeof err);
  if (tty)
    fprintf(stderr, "\r\033[K");
  if (rc < 0) {
    fprintf(stderr, "attnd-load: %s: %s\n", what, err);
    load_decode_stats_free(&st);
    return -1;
  }
  load_result_fill_decode(res, &st);
  if (o->verify)
    verify_decode(o, L, &st, res);
  load_decode_stats_free(&st);
  if (!o->quiet)
    load_report_line(stderr, res);
  return 0;
}

/* The reports' directory, made if missing, and checked before the sweep
 * (a sweep of minutes should not end in a directory it cannot write).
 * Sets *replacing when NAME.csv, .json or .svg is there already. Returns 0,
 * or -1 with the reason on stderr. */
static int prepare_out(const opts_t *o, int *replacing) {
  struct stat sb;
  if (mkdir(o->out, 0777) < 0 && errno != EEXIST)
    return fprintf(stderr, "attnd-load: --out %s: %s\n", o->out,
                   strerror(errno)),
           -1;
  if (stat(o->out, &sb) < 0 || !S_ISDIR(sb.st_mode) ||
      access(o->out, W_OK | X_OK) < 0)
    return fprintf(stderr, "attnd-load: --out %s: %s\n", o->out,
                   errno ? strerror(errno) : "not a directory"),
           -1;
  static const char *const ext[3] = {"csv", "json", "svg"};
  *replacing = 0;
  for (int k = 0; k < 3; k++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.%s", o->out, o->name, ext[k]);
    *replacing |= stat(path, &sb) == 0;
  }
  return 0;
}

/* The one message of a sweep that stopped early, at step r of `steps`
 * (load_stop_t): what failed, in libcurl's words where it has them, and
 * what would cure it. Said once, whatever the steps left. */
static void say_stopped(const opts_t *o, const load_result_t *r, int steps) {
  fprintf(stderr, "attnd-load: stopped at step %d of %d: ", r->step, steps);
  char target[2200];
  if (o->workload == W_DECODE)
    snprintf(target, sizeof target, "%s/v1/sessions", o->base_url);
  else
    snprintf(target, sizeof target, "%s", o->url);
  switch (r->stop) {
  case LOAD_STOP_TLS:
    fprintf(stderr,
            "TLS failed: %s (a private CA or a self-signed attnd: --cacert "
            "FILE)\n",
            r->first_error);
    break;
  case LOAD_STOP_UNREACHABLE:
    fprintf(stderr, "nothing answered at %s: %s (is attnd running there?)\n",
            target, r->first_error);
    break;
  case LOAD_STOP_UNAUTHORIZED:
    fprintf(stderr, "attnd answered 401 unauthorized to every request: %s\n",
            o->access.api_key
                ? "it does not know the key given (--api-key-file or "
                  "ATTND_API_KEY)"
                : "give the key with --api-key-file or ATTND_API_KEY");
    break;
  default: /* LOAD_STOP_NOT_FOUND: the cures of this run's mode alone */
    fprintf(stderr,
            "attnd answered 404 not found to every request of %s (%s the "
            "path in --url)\n",
            target,
            o->workload == W_DECODE        ? "--model, or"
            : o->shape.protocol == LOAD_V2 ? "--path, --model, or"
                                           : "--path, or");
    break;
  }
}

static int write_file(const char *path, const char *data, size_t len) {
  FILE *f = fopen(path, "wb");
  if (f == NULL)
    return -1;
  size_t w = fwrite(data, 1, len, f);
  return fclose(f) == 0 && w == len ? 0 : -1;
}

int main(int argc, char **argv) {
  opts_t o;
  if (load_parse_args(argc, argv, &o) < 0)
    return 2;
  const int post = o.post, decode = o.workload == W_DECODE;
  signal(SIGPIPE, SIG_IGN);
  if (curl_global_init(CURL_GLOBAL_ALL) != 0)
    return fprintf(stderr, "attnd-load: curl_global_init failed\n"), 2;

  int replacing = 0;
  if (!o.dump_body && prepare_out(&o, &replacing) < 0)
    return curl_global_cleanup(), 2;

  /* without bodies, lengths mean nothing: one step per load point */
  int n_len = decode ? o.prefill.n : post ? o.lengths.n : 1;
  int cap = n_len * o.load->n, n = 0, rc = 0;
  /* the step that stopped the sweep (load_stop_t), or NULL */
  const load_result_t *stopped = NULL;
  load_result_t *res = calloc((size_t)cap, sizeof *res);
  if (res == NULL)
    return fprintf(stderr, "attnd-load: out of memory\n"), 2;
  if (!o.quiet && decode)
    fprintf(stderr,
            "attnd-load: decode %s/v1/sessions, %lld sessions a step, each a "
            "prefill and %lld one-token steps, closed loop\n",
            o.base_url, (long long)o.sessions, (long long)o.steps);
  else if (!o.quiet && !o.dump_body)
    fprintf(stderr, "attnd-load: %s %s, %s loop, %g s warm-up + %s per step\n",
            load_methods[o.method], o.url,
            o.mode == LOAD_CLOSED ? "closed" : "open", o.warmup,
            o.duration > 0 ? "a window" : "a request count");
  for (int li = 0; decode && li < n_len && rc == 0 && !stopped; li++)
    for (int ci = 0; ci < o.load->n && rc == 0 && !stopped; ci++) {
      load_result_t *r = &res[n];
      r->step = n + 1;
      r->length = (int64_t)o.prefill.v[li];
      if (run_decode_step(&o, r->length, (int)o.load->v[ci], r) < 0)
        rc = 2;
      else if (res[n++].stop)
        stopped = r;
    }
  for (int li = 0; !decode && li < n_len && rc == 0 && !stopped; li++) {
    int64_t L = post ? (int64_t)o.lengths.v[li] : 0;
    load_shape_t s = o.shape;
    s.Lq = o.lq ? o.lq : L;
    s.Lk = o.lk ? o.lk : L;
    pool_t pool = {0};
    if (post && pool_build(&pool, &o, &s, L) < 0) {
      pool_free(&pool);
      rc = 2;
      break;
    }
    if (o.dump_body) {
      if (!post || write_file(o.dump_body, pool.bodies[0].data,
                              pool.bodies[0].len) < 0) {
        fprintf(stderr, "attnd-load: --dump-body %s: %s\n", o.dump_body,
                post ? strerror(errno) : "GET requests have no body");
        rc = 2;
      } else { /* the header lines that go with the body, for other tools */
        load_run_t run = {.n_bodies = 1};
        char lines[512];
        set_content(&run, &s);
        load_body_headers(&run, &pool.bodies[0], lines, sizeof lines);
        fputs(lines, stdout);
      }
      pool_free(&pool);
      free(res);
      curl_global_cleanup();
      return rc;
    }
    for (int ci = 0; ci < o.load->n && rc == 0 && !stopped; ci++) {
      load_result_t *r = &res[n];
      r->step = n + 1;
      r->length = L;
      r->attention = post;
      r->shape = s;
      if (run_step(&o, &s, L, &pool, o.load->v[ci], r) < 0)
        rc = 2;
      else if (res[n++].stop)
        stopped = r;
    }
    pool_free(&pool);
  }

  char path[4096], err[512], title[2560];
  if (decode)
    snprintf(title, sizeof title,
             "attnd-load --mode decode: %s/v1/sessions, %lld sessions x %lld "
             "steps, %s%s%s",
             o.base_url, (long long)o.sessions, (long long)o.steps,
             o.dshape.layer ? "layer " : "",
             o.dshape.layer ? o.dshape.layer : "",
             o.dshape.layer ? "" : "pre-projected");
  else
    snprintf(title, sizeof title, "attnd-load: %s %s", load_methods[o.method],
             o.url);
  if (decode && !o.dshape.layer)
    snprintf(title + strlen(title), sizeof title - strlen(title),
             " E=%lld H=%lld Hkv=%lld, rope %s, %s", (long long)o.dshape.E,
             (long long)o.dshape.H, (long long)o.dshape.Hkv, load_ropes[o.rope],
             load_enc_name(o.dshape.encoding));
  else if (post)
    snprintf(title + strlen(title), sizeof title - strlen(title),
             ", B=%lld E=%lld H=%lld Hkv=%lld, causal %s, %s%s%s%s",
             (long long)o.shape.B, (long long)o.shape.E, (long long)o.shape.H,
             (long long)o.shape.Hkv, load_causal_name(o.shape.causal),
             o.shape.protocol == LOAD_V2 ? "v2 " : "",
             load_tensors_name(&o.shape), o.shape.compress ? ", " : "",
             o.shape.compress ? load_compress_name(o.shape.compress) : "");
  static const char *const ext[3] = {"csv", "json", "svg"};
  int wrote = 0;
  for (int k = 0; k < 3; k++) {
    snprintf(path, sizeof path, "%s/%s.%s", o.out, o.name, ext[k]);
    int w = k == 0   ? load_report_csv(path, res, n, err, sizeof err)
            : k == 1 ? load_report_json(path, o.url, res, n, err, sizeof err)
                     : load_report_svg(path, title, res, n, err, sizeof err);
    if (w < 0) {
      fprintf(stderr, "attnd-load: %s\n", err);
      rc = 2;
    } else {
      wrote++;
    }
  }
  if (!o.quiet)
    load_report_table(stdout, res, n);
  /* always, --quiet or not: which files were written, and where */
  char *abs = realpath(o.out, NULL);
  if (wrote == 3)
    fprintf(stderr, "attnd-load: wrote %s/%s.csv, .json and .svg%s%s%s%s\n",
            o.out, o.name, abs && strcmp(abs, o.out) ? " (in " : "",
            abs && strcmp(abs, o.out) ? abs : "",
            abs && strcmp(abs, o.out) ? ")" : "",
            replacing ? ", replacing the reports of an earlier run" : "");
  free(abs);
  if (stopped)
    say_stopped(&o, stopped, cap);
  /* the step that stopped the sweep failed too, but its message says why */
  for (int i = 0; i < n && rc == 0 && !res[i].stop; i++)
    if (res[i].error_rate > o.max_error_rate || res[i].verify_failed ||
        res[i].verify_missing || res[i].abandoned) {
      fprintf(stderr,
              "attnd-load: step %d failed: error rate %.4g (--max-error-rate "
              "%g)",
              res[i].step, res[i].error_rate, o.max_error_rate);
      /* wrong: replies that came and were checked; missing: those --verify
       * asked for that never came (failed, or too few requests) */
      if (res[i].verify_failed)
        fprintf(stderr, ", %d of %d checked replies wrong",
                res[i].verify_failed, res[i].verified + res[i].verify_failed);
      if (res[i].verify_missing)
        fprintf(stderr, ", %d of the %lld replies to verify never came",
                res[i].verify_missing, (long long)o.verify);
      if (res[i].decode)
        fprintf(stderr, ", %lld sessions abandoned",
                (long long)res[i].abandoned);
      fprintf(stderr, "\n");
      rc = 1;
    }
  if (stopped && rc != 2)
    rc = 3;
  free(res);
  curl_global_cleanup();
  return rc;
}
