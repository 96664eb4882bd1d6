/* tests/check_load_sweep.c: the real attnd-load against a live attnd.
 *
 * The tool is the binary named by ATTND_LOAD_BIN, else the attnd-load
 * beside ATTND_BIN (so that the ASan build tests its own), else
 * build/attnd-load; the server is started with tests/server_harness. Each
 * run writes its CSV, JSON and SVG into a fresh directory, which the test
 * reads back. Tests:
 *   - a short sweep, two lengths by two concurrencies, 100 measured
 *     requests a step (--requests: a count, not a window of time, which a
 *     starved machine filled with fewer replies than --verify asks for,
 *     and failed by design), with --verify 2: exit status 0, every step in the
 * CSV with zero errors, sent = succeeded, the client's and the server's
 * percentiles in order, every reply timed by Server-Timing, both checks passed,
 * a JSON of four steps and a non-empty picture; once with the defaults (base64,
 * no projections) and once with JSON tensors, inline projections, GQA, random
 * key lengths, mean weights and a batch; and the same two over the Open
 * Inference Protocol (--protocol v2, the generic model): binary tensors, then
 * JSON tensors with the rest of those options and gzip bodies and replies; and
 * half traffic
 *     (--dtype): bfloat16 over v2 with binary tensors, float16 over v1
 *     with base64, each verified within its dtype's rounding and named in
 *     the CSV's dtype column;
 *   - overload: slow requests at two concurrencies over one worker and
 *     one queue place: the 429s counted as such and nothing else failing,
 *     both steps run, exit status 1 under the default --max-error-rate 0,
 *     and 0 under 1; over v1 and over v2;
 *   - v2 to a loaded layer (--model blocks.3): every request succeeds; to
 *     a model that is not loaded: every request a 404, counted as such,
 *     and the sweep stopped;
 *   - --dump-body with v2: the file holds exactly the generator's bytes,
 *     and stdout the Inference-Header-Content-Length that goes with them;
 *   - --mode decode: a sweep of prefill lengths by concurrencies, with
 *     every request a success, the steps and the prefills verified, and
 *     the decode columns, JSON and picture; a layer's sessions; sessions
 *     deleted behind its back created again, counted, and carried to the
 *     end with their checks passing; the options it refuses;
 *   - bad usage (a malformed --url, a relative --path, an empty value,
 *     whole or in a list, a value left out before the next option, a
 *     --out it cannot write, options of another mode): exit status 2 at
 *     once, the reason on stderr, no report written;
 *   - a port that never answers, with --verify: the replies that never
 *     came counted as missing, not wrong, and the sweep going on; stderr
 *     naming the reports written, and where, and that a second run
 *     replaced them.
 *   - API keys and TLS: attnd with a key and a certificate of a test CA;
 *     attnd-load with the key (--api-key-file or ATTND_API_KEY) and
 *     --cacert, over v1, v2, decode mode and a GET: every request a
 *     success, verified, the key in no output; without the key, one plain
 *     line on the 401s and exit 3; another CA, libcurl's reason, exit 3
 *     and the step stopped at once; --insecure passing; --dump-body's
 *     header lines without the key; the options' bad usage (exit 2);
 *   - a sweep that stops where no later step could succeed, exit 3, one
 *     message, its reports holding the steps run and the cause: a failed
 *     TLS handshake, a step of 401s (in both modes; decode mode sending
 *     nothing again), nothing listening, a --path of 404s; and one that
 *     goes on through transient 429s and timeouts;
 *   - --help's exit status names every cause of 1;
 *   - docs/load-testing.md names every option --help lists;
 *   - bench/wrk/compare.sh with a stand-in wrk: stdout is its table
 *     alone.
 * The v2 cases need a server that speaks /v2 (server/api/oip.c, api/v2.c): they
 * fail, saying so, against one that does not.
 * No timings are asserted: only counts, orders and exit statuses. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gen.h"
#include "layer_files.h"
#include "server_harness.h"
#include "suite.h"
#include "test_certs.h"
#include "testutil.h"

/* ---- running the tool ---------------------------------------------------- */

/* The attnd-load binary to test (see the file comment). */
static const char *load_bin(void) {
  static char path[4096];
  const char *v = getenv("ATTND_LOAD_BIN");
  return v && *v ? v : sh_bin_beside("attnd-load", path, sizeof path);
}

/* Starts attnd-load with `args` (NULL-terminated), its output going to
 * `log_path`. Returns its pid. */
static pid_t spawn_load(const char *const *args, const char *log_path) {
  const char *bin = load_bin();
  const char *argv[64] = {bin};
  int argc = 1;
  for (int i = 0; args[i] && argc < 63; i++)
    argv[argc++] = args[i];
  argv[argc] = NULL;
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    signal(SIGPIPE, SIG_DFL);
    execv(bin, (char *const *)argv);
    _exit(127);
  }
  return pid;
}

/* Waits at most 120 s for attnd-load `pid`. Returns its exit status, or
 * -1 when it was killed or did not exit. */
static int wait_load(pid_t pid) {
  double deadline = sh_now() + 120;
  int st;
  while (waitpid(pid, &st, WNOHANG) == 0) {
    if (sh_now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      return -1;
    }
    usleep(10000);
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Runs attnd-load with `args` for at most 120 s: its exit status, or -1. */
static int run_load(const char *const *args, const char *log_path) {
  return wait_load(spawn_load(args, log_path));
}

/* A scratch directory for one run's files. */
typedef struct scratch {
  char dir[64];
  char log[128];
} scratch_t;

static void scratch_init(scratch_t *s) {
  snprintf(s->dir, sizeof s->dir, "/tmp/check_load_sweep_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(s->dir));
  snprintf(s->log, sizeof s->log, "%s/log.txt", s->dir);
}

static void scratch_free(scratch_t *s) {
  static const char *const files[] = {"log.txt", "attnd-load.csv",
                                      "attnd-load.json", "attnd-load.svg"};
  char p[160];
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    snprintf(p, sizeof p, "%s/%s", s->dir, files[i]);
    unlink(p);
  }
  rmdir(s->dir);
}

/* ---- reading the CSV ----------------------------------------------------- */

enum { CSV_MAX_COLS = 128, CSV_MAX_ROWS = 16 };

typedef struct csv {
  char *text; /* owned, cut into cells */
  int ncols, nrows;
  const char *head[CSV_MAX_COLS];
  const char *cell[CSV_MAX_ROWS][CSV_MAX_COLS];
} csv_t;

/* Splits one line at commas (the tool writes no quoted cells). */
static int split(char *line, const char **out) {
  int n = 0;
  for (char *p = line;; p++) {
    out[n++] = p;
    p = strchr(p, ',');
    if (p == NULL || n == CSV_MAX_COLS)
      return n;
    *p = 0;
  }
}

static void csv_read(csv_t *c, const char *path) {
  memset(c, 0, sizeof *c);
  c->text = tu_read_file(path, NULL);
  ck_assert_msg(c->text != NULL, "no CSV at %s", path);
  char *save = NULL;
  char *line = strtok_r(c->text, "\n", &save);
  ck_assert_msg(line != NULL, "empty CSV");
  c->ncols = split(line, c->head);
  while ((line = strtok_r(NULL, "\n", &save)) && c->nrows < CSV_MAX_ROWS) {
    int n = split(line, c->cell[c->nrows]);
    ck_assert_msg(n == c->ncols, "CSV row %d has %d cells, the header %d",
                  c->nrows + 1, n, c->ncols);
    c->nrows++;
  }
}

static const char *csv_str(const csv_t *c, int row, const char *col) {
  for (int i = 0; i < c->ncols; i++)
    if (strcmp(c->head[i], col) == 0)
      return c->cell[row][i];
  ck_abort_msg("no column %s in the CSV", col);
  return "";
}

static double csv_num(const csv_t *c, int row, const char *col) {
  for (int i = 0; i < c->ncols; i++)
    if (strcmp(c->head[i], col) == 0)
      return atof(c->cell[row][i]);
  ck_abort_msg("no column %s in the CSV", col);
  return 0;
}

/* ---- a sweep ------------------------------------------------------------- */

/* The base URL of the attnd on `port`, into url[0..64). */
static void url_of(char *url, int port) {
  snprintf(url, 64, "http://127.0.0.1:%d", port);
}

/* A run's CSV in sc, read into c, which must have `rows` steps. */
static void scratch_csv(const scratch_t *sc, csv_t *c, int rows) {
  char path[160];
  snprintf(path, sizeof path, "%s/attnd-load.csv", sc->dir);
  csv_read(c, path);
  ck_assert_int_eq(c->nrows, rows);
}

/* A run's JSON report in sc, parsed (free it). */
static json_t *scratch_json(const scratch_t *sc) {
  char path[160];
  snprintf(path, sizeof path, "%s/attnd-load.json", sc->dir);
  json_error_t je;
  json_t *doc = json_load_file(path, 0, &je);
  ck_assert_msg(doc != NULL, "JSON: %s", je.text);
  return doc;
}

/* A run's picture in sc, as text (free it). */
static char *scratch_svg(const scratch_t *sc) {
  char path[160];
  snprintf(path, sizeof path, "%s/attnd-load.svg", sc->dir);
  return tu_read_file(path, NULL);
}

/* Runs attnd-load with args[0..n) and then `extra` (NULL-terminated; args
 * has room for both), its output in sc->log; returns the exit status. */
static int run_load_extra(const char **args, int n, const char *const *extra,
                          const scratch_t *sc) {
  for (int i = 0; extra[i]; i++)
    args[n++] = extra[i];
  args[n] = NULL;
  return run_load(args, sc->log);
}

static void start(sh_server_t *s, const char *const *args) {
  if (sh_server_start(s, args) < 0)
    ck_abort_msg("attnd did not start:\n%s", s->log);
}

static void stop(sh_server_t *s) {
  int st = sh_server_stop(s, 30.0);
  ck_assert_msg(st == 0, "attnd exited with %d:\n%s", st, s->log);
}

/* The client's and a server metric's percentiles of row r, in order. */
static void assert_ordered(const csv_t *c, int r, const char *prefix,
                           const char *const *names, int n) {
  char col[64];
  double prev = 0;
  for (int i = 0; i < n; i++) {
    snprintf(col, sizeof col, "%s_%s_ms", prefix, names[i]);
    double v = csv_num(c, r, col);
    ck_assert_msg(v >= prev, "step %d: %s %g below the one before, %g", r + 1,
                  col, v, prev);
    prev = v;
  }
}

/* A v2 case's first failure names what it needs: a server that answers
 * 404 to POST /v2/models/attention/infer has no /v2 at all. */
static void assert_speaks_v2(int port, const char *log) {
  sh_client_t c;
  sh_client_init(&c, port);
  static const char body[] = "{\"inputs\":[]}";
  sh_req_t q = {.method = "POST",
                .path = "/v2/models/attention/infer",
                .body = body,
                .len = sizeof body - 1};
  sh_resp_t r;
  int rc = sh_http(&c, &q, &r);
  ck_assert_msg(rc == 0 && r.status != 404,
                "this v2 case needs a server with the Open Inference "
                "Protocol: POST /v2/models/attention/infer got %ld (%s)\n%s",
                r.status, r.body ? r.body : r.error, log);
  sh_resp_free(&r);
  sh_client_free(&c);
}

START_TEST(test_sweep) {
  static const char *const extra[6][24] = {
      {NULL},
      {"--encoding", "json", "--projections", "inline", "--kv-heads", "2",
       "--key-lengths", "random", "--weights", "mean", "--batch", "2",
       "--causal", "top_left", NULL},
      {"--protocol", "v2", NULL},
      {"--protocol", "v2", "--tensors", "json", "--projections", "inline",
       "--kv-heads", "2", "--key-lengths", "random", "--weights", "mean",
       "--batch", "2", "--causal", "top_left", "--compress", "gzip", NULL},
      /* half traffic, checked within the dtype's rounding */
      {"--protocol", "v2", "--dtype", "bfloat16", "--projections", "inline",
       "--weights", "mean", "--key-lengths", "random", NULL},
      {"--dtype", "float16", "--projections", "inline", "--weights", "per_head",
       "--kv-heads", "2", NULL}};
  static const char *const dtypes[6] = {"float32", "float32",  "float32",
                                        "float32", "bfloat16", "float16"};
  const int v2 = _i == 2 || _i == 3 || _i == 4;
  sh_server_t srv;
  start(&srv, NULL);
  scratch_t sc;
  scratch_init(&sc);
  char url[64];
  url_of(url, srv.port);
  const char *args[48] = {"--url",         url,    "--lengths", "64,128",
                          "--concurrency", "1,2",  "--warmup",  "0.1",
                          "--requests",    "100",  "--verify",  "2",
                          "--embed",       "64",   "--heads",   "4",
                          "--out",         sc.dir, "--quiet"};
  int st = run_load_extra(args, 19, extra[_i], &sc);
  char *log = tu_read_file(sc.log, NULL);
  if (st != 0 && v2)
    assert_speaks_v2(srv.port, log);
  ck_assert_msg(st == 0, "attnd-load exited with %d:\n%s", st, log);

  csv_t c;
  scratch_csv(&sc, &c, 4);
  static const int64_t lens[4] = {64, 64, 128, 128};
  static const int conc[4] = {1, 2, 1, 2};
  static const char *const lat[] = {"p50", "p90", "p99", "p999", "max"};
  static const char *const srvp[] = {"p50", "p90", "p99", "max"};
  static const char *const errs[] = {
      "err_429",       "err_503",    "err_504",      "err_other",
      "err_transport", "error_rate", "verify_failed"};
  for (int r = 0; r < 4; r++) {
    ck_assert_int_eq((int64_t)csv_num(&c, r, "length"), lens[r]);
    ck_assert_int_eq((int)csv_num(&c, r, "concurrency"), conc[r]);
    double sent = csv_num(&c, r, "sent"), ok = csv_num(&c, r, "ok");
    ck_assert_msg(sent == 100 && ok == sent, "step %d: %g sent, %g ok\n%s",
                  r + 1, sent, ok, log);
    for (size_t k = 0; k < sizeof errs / sizeof errs[0]; k++)
      ck_assert_msg(csv_num(&c, r, errs[k]) == 0, "step %d: %s is %g", r + 1,
                    errs[k], csv_num(&c, r, errs[k]));
    ck_assert_msg(csv_num(&c, r, "lat_p50_ms") > 0, "step %d: p50 of 0", r + 1);
    assert_ordered(&c, r, "lat", lat, 5);
    assert_ordered(&c, r, "queue", srvp, 4);
    assert_ordered(&c, r, "compute", srvp, 4);
    assert_ordered(&c, r, "total", srvp, 4);
    ck_assert_msg(csv_num(&c, r, "compute_p50_ms") > 0, "step %d", r + 1);
    ck_assert_msg(csv_num(&c, r, "timed") == ok,
                  "step %d: %g of %g replies had Server-Timing", r + 1,
                  csv_num(&c, r, "timed"), ok);
    ck_assert_msg(csv_num(&c, r, "verified") == 2, "step %d: %g verified",
                  r + 1, csv_num(&c, r, "verified"));
    ck_assert_str_eq(csv_str(&c, r, "dtype"), dtypes[_i]);
    ck_assert_msg(csv_num(&c, r, "rps") > 0 && csv_num(&c, r, "gflops") > 0,
                  "step %d: no throughput", r + 1);
  }
  free(c.text);

  json_t *doc = scratch_json(&sc);
  ck_assert_int_eq(json_array_size(json_object_get(doc, "steps")), 4);
  json_decref(doc);

  char path[160];
  snprintf(path, sizeof path, "%s/attnd-load.svg", sc.dir);
  struct stat sb;
  ck_assert_int_eq(stat(path, &sb), 0);
  ck_assert_msg(sb.st_size > 1000, "the picture has %lld bytes",
                (long long)sb.st_size);
  char *svg = tu_read_file(path, NULL);
  ck_assert_ptr_nonnull(strstr(svg, "<polyline"));
  free(svg);
  free(log);
  scratch_free(&sc);
  stop(&srv);
}
END_TEST

/* ---- overload ------------------------------------------------------------ */

/* One overload run of two steps (concurrency 6, then 5) with `rate` as
 * --max-error-rate (NULL: the default), over v2 when `v2`. Returns the
 * exit status; checks the CSV's counts: the 429s are transient, and the
 * sweep goes on past them. */
static int overload_run(int port, const char *rate, int v2) {
  scratch_t sc;
  scratch_init(&sc);
  char url[64];
  url_of(url, port);
  /* slow requests (see check_server_load.c): a query [4096, 32], 8 heads,
   * no mask: 0.1 to 0.5 s of one core each */
  const char *args[40] = {"--url",
                          url,
                          "--lengths",
                          "4096",
                          "--embed",
                          "32",
                          "--heads",
                          "8",
                          "--causal",
                          "none",
                          "--concurrency",
                          "6,5",
                          "--warmup",
                          "0",
                          "--duration",
                          "1",
                          "--variants",
                          "1",
                          "--out",
                          sc.dir,
                          "--quiet",
                          NULL,
                          NULL,
                          NULL,
                          NULL,
                          NULL};
  int n = 21;
  if (rate) {
    args[n++] = "--max-error-rate";
    args[n++] = rate;
  }
  if (v2) {
    args[n++] = "--protocol";
    args[n++] = "v2";
  }
  int st = run_load(args, sc.log);
  char *log = tu_read_file(sc.log, NULL);
  ck_assert_msg(st == 0 || st == 1, "exit %d:\n%s", st, log);
  csv_t c;
  scratch_csv(&sc, &c, 2);
  for (int r = 0; r < 2; r++) {
    double sent = csv_num(&c, r, "sent"), ok = csv_num(&c, r, "ok"),
           n429 = csv_num(&c, r, "err_429");
    if (v2 && n429 == 0)
      assert_speaks_v2(port, log);
    ck_assert_msg(n429 > 0, "step %d: no 429 in %g requests:\n%s", r + 1, sent,
                  log);
    ck_assert_msg(ok > 0, "step %d: nothing succeeded:\n%s", r + 1, log);
    ck_assert_msg(ok + n429 == sent, "step %d: %g ok + %g 429 != %g sent:\n%s",
                  r + 1, ok, n429, sent, log);
    static const char *const zero[] = {"err_503", "err_504", "err_other",
                                       "err_transport"};
    for (size_t k = 0; k < sizeof zero / sizeof zero[0]; k++)
      ck_assert_msg(csv_num(&c, r, zero[k]) == 0, "step %d: %s is %g", r + 1,
                    zero[k], csv_num(&c, r, zero[k]));
    ck_assert_double_eq_tol(csv_num(&c, r, "error_rate"), n429 / sent, 1e-4);
    ck_assert_str_eq(csv_str(&c, r, "stopped"), "");
  }
  if (st != 0)
    ck_assert_msg(strstr(log, "step 1 failed: error rate") != NULL, "%s", log);
  free(c.text);
  free(log);
  scratch_free(&sc);
  return st;
}

START_TEST(test_overload) {
  static const char *const args[] = {
      "--workers", "1", "--threads-per-request", "1", "--queue-depth",
      "1",         NULL};
  sh_server_t srv;
  start(&srv, args);
  ck_assert_int_eq(overload_run(srv.port, NULL, _i), 1);
  ck_assert_int_eq(overload_run(srv.port, "1", _i), 0);
  stop(&srv);
}
END_TEST

/* ---- v2: a layer, an unknown model, --dump-body ---------------------------
 */

/* Writes a layer blocks.3 (torch's MHA, E 32, 4 heads) into a new
 * directory: its name into dir[0..64), the layer file's path into
 * file[0..128). The caller removes both. */
static void write_layer(char *dir, char *file) {
  char msg[512];
  snprintf(dir, 64, "/tmp/check_load_sweep_layer_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(file, 128, "%s/model.safetensors", dir);
  lf_shape_t shape = {.E = 32, .H = 4, .bias = LF_BIAS_ALL};
  const char *meta[] = {"num_heads", "4", NULL};
  lf_weights_t w;
  ck_assert_msg(lf_write(file, LF_TORCH_MHA, ATTND_ST_F32, "blocks.3.", &shape,
                         9, meta, &w, msg, sizeof msg) == 0,
                "%s", msg);
  lf_weights_free(&w);
}

/* Runs a one-step v2 sweep of model `model` (E 32, H 4, L 16, c 2) with
 * the CSV read into c; returns the exit status. */
static int v2_run(int port, const char *model, scratch_t *sc, csv_t *c,
                  char **log) {
  char url[64];
  url_of(url, port);
  const char *args[] = {
      "--url",      url,     "--protocol",    "v2", "--model",  model,
      "--lengths",  "16",    "--concurrency", "2",  "--warmup", "0",
      "--duration", "0.5",   "--embed",       "32", "--heads",  "4",
      "--out",      sc->dir, "--quiet",       NULL};
  int st = run_load(args, sc->log);
  *log = tu_read_file(sc->log, NULL);
  scratch_csv(sc, c, 1);
  return st;
}

START_TEST(test_v2_models) {
  char dir[64], file[128];
  write_layer(dir, file);
  const char *sargs[] = {"--layers", dir, NULL};
  sh_server_t srv;
  start(&srv, sargs);

  /* the layer: every request succeeds */
  scratch_t sc;
  scratch_init(&sc);
  csv_t c;
  char *log;
  int st = v2_run(srv.port, "blocks.3", &sc, &c, &log);
  if (st != 0)
    assert_speaks_v2(srv.port, log);
  ck_assert_msg(st == 0, "attnd-load exited with %d:\n%s", st, log);
  double sent = csv_num(&c, 0, "sent");
  ck_assert_msg(sent > 0 && csv_num(&c, 0, "ok") == sent, "%g sent, %g ok",
                sent, csv_num(&c, 0, "ok"));
  ck_assert_msg(csv_num(&c, 0, "timed") == sent && csv_num(&c, 0, "gflops") > 0,
                "no Server-Timing or no throughput");
  free(c.text);
  free(log);
  scratch_free(&sc);

  /* a model that is not there: every request a 404, an error of its own,
   * and the sweep stopped (exit 3) */
  scratch_init(&sc);
  st = v2_run(srv.port, "blocks.4", &sc, &c, &log);
  ck_assert_msg(st == 3 && strcmp(csv_str(&c, 0, "stopped"), "not_found") == 0,
                "attnd-load exited with %d:\n%s", st, log);
  ck_assert_msg(strstr(log, "(--path, --model, or the path in --url)"),
                "v2's cures not named:\n%s", log);
  sent = csv_num(&c, 0, "sent");
  ck_assert_msg(sent > 0 && csv_num(&c, 0, "err_other") == sent &&
                    csv_num(&c, 0, "ok") == 0,
                "%g sent, %g other errors", sent, csv_num(&c, 0, "err_other"));
  json_t *doc = scratch_json(&sc);
  json_t *step = json_array_get(json_object_get(doc, "steps"), 0);
  json_t *by = json_object_get(json_object_get(step, "errors"), "by_status");
  ck_assert_int_eq(json_integer_value(json_object_get(by, "404")),
                   (json_int_t)sent);
  ck_assert_str_eq(json_string_value(json_object_get(
                       json_object_get(step, "shape"), "model")),
                   "blocks.4");
  json_decref(doc);
  free(c.text);
  free(log);
  scratch_free(&sc);
  stop(&srv);
  unlink(file);
  rmdir(dir);
}
END_TEST

/* --dump-body over v2: the generator's bytes for the first variant of the
 * first length, and the header line they need; no server. */
START_TEST(test_v2_dump_body) {
  scratch_t sc;
  scratch_init(&sc);
  char body_path[160];
  snprintf(body_path, sizeof body_path, "%s/body.bin", sc.dir);
  const char *args[] = {
      "--protocol",  "v2",      "--lengths", "8,16", "--embed",       "16",
      "--heads",     "2",       "--seed",    "5",    "--key-lengths", "random",
      "--dump-body", body_path, NULL};
  int st = run_load(args, sc.log);
  char *log = tu_read_file(sc.log, NULL);
  ck_assert_msg(st == 0, "attnd-load exited with %d:\n%s", st, log);

  load_shape_t s = {.B = 1,
                    .Lq = 8,
                    .Lk = 8,
                    .E = 16,
                    .H = 2,
                    .Hkv = 2,
                    .causal = ATTN_CAUSAL_BOTTOM_RIGHT,
                    .key_lengths = 1,
                    .protocol = LOAD_V2,
                    .model = "attention",
                    .binary = 1};
  load_request_t r;
  char err[256];
  ck_assert_msg(
      load_gen_request(&s, load_gen_seed(5, 8, 0), 1, &r, err, sizeof err) == 0,
      "%s", err);
  FILE *f = fopen(body_path, "rb");
  ck_assert_ptr_nonnull(f);
  char *got = malloc(r.body_len + 1);
  size_t n = fread(got, 1, r.body_len + 1, f);
  fclose(f);
  ck_assert_uint_eq(n, r.body_len);
  ck_assert_int_eq(memcmp(got, r.body, n), 0);
  char line[96];
  snprintf(line, sizeof line, "Inference-Header-Content-Length: %zu\n",
           r.json_len);
  ck_assert_msg(strcmp(log, line) == 0, "stdout is '%s', expected '%s'", log,
                line);
  free(got);
  free(log);
  load_gen_free(&r);
  unlink(body_path);
  scratch_free(&sc);
}
END_TEST

/* --dump-body that cannot write its file, or given a GET, which has no
 * body: exit status 2 and the reason, naming the flag and the file; no
 * server. Catches: a dump that fails quietly and exits 0, leaving a
 * script with no body file, or an empty one. */
START_TEST(test_dump_body_refused) {
  scratch_t sc;
  scratch_init(&sc);
  char body_path[160], want[256];
  snprintf(body_path, sizeof body_path, "%s/none/body.bin", sc.dir);
  const char *args[] = {"--lengths", "8",           "--embed", "16", "--heads",
                        "2",         "--dump-body", body_path, NULL};
  int st = run_load(args, sc.log);
  char *log = tu_read_file(sc.log, NULL);
  snprintf(want, sizeof want,
           "attnd-load: --dump-body %s: No such file or directory", body_path);
  ck_assert_msg(st == 2 && strstr(log, want), "exit %d, log:\n%s", st, log);
  free(log);

  snprintf(body_path, sizeof body_path, "%s/body.bin", sc.dir);
  const char *get[] = {"--method", "GET", "--dump-body", body_path, NULL};
  st = run_load(get, sc.log);
  log = tu_read_file(sc.log, NULL);
  ck_assert_msg(st == 2 && strstr(log, "GET requests have no body"),
                "exit %d, log:\n%s", st, log);
  ck_assert_int_eq(access(body_path, F_OK), -1);
  free(log);
  scratch_free(&sc);
}
END_TEST

/* ---- decode mode ----------------------------------------------------------
 */

/* A decode sweep, two prefill lengths by two concurrencies, three sessions
 * each: every session done, no error and no recreation, every request a
 * success (create, prefill, steps, delete), the steps timed, the checks
 * passed, the time to first token and the step latencies in order, and
 * the decode figures in the JSON and the picture. Cases: pre-projected
 * with GQA, half rope and base64 (steps verified); JSON tensors,
 * interleaved rope, no steps and more connections than sessions (the
 * prefills verified); a layer's sessions. */
START_TEST(test_decode_sweep) {
  static const char *const extra[3][16] = {
      {"--kv-heads", "2", "--rope", "half", "--steps", "10", "--verify", "4",
       "--concurrency", "1,3", NULL},
      {"--encoding", "json", "--rope", "interleaved", "--steps", "0",
       "--verify", "3", "--concurrency", "1,5", NULL},
      {"--model", "blocks.3", "--steps", "6", "--concurrency", "1,2", NULL}};
  static const int steps[3] = {10, 0, 6}, verified[3] = {4, 3, 0};
  char dir[64], file[128];
  const char *sargs[] = {"--layers", dir, NULL};
  if (_i == 2)
    write_layer(dir, file);
  sh_server_t srv;
  start(&srv, _i == 2 ? sargs : NULL);
  scratch_t sc;
  scratch_init(&sc);
  char url[64];
  url_of(url, srv.port);
  const char *args[48] = {"--url",     url,     "--mode",     "decode",
                          "--prefill", "32,96", "--sessions", "3",
                          "--embed",   "32",    "--heads",    "4",
                          "--out",     sc.dir,  "--quiet"};
  int st = run_load_extra(args, 15, extra[_i], &sc);
  char *log = tu_read_file(sc.log, NULL);
  ck_assert_msg(st == 0, "attnd-load exited with %d:\n%s", st, log);

  csv_t c;
  scratch_csv(&sc, &c, 4);
  static const int64_t lens[4] = {32, 32, 96, 96};
  static const char *const zero[] = {
      "err_429",    "err_503",       "err_504",   "err_other", "err_transport",
      "error_rate", "verify_failed", "abandoned", "recreated", "bad_replies"};
  static const char *const lat[] = {"p50", "p90", "p99", "p999", "max"};
  static const char *const ttft[] = {"p50", "p90", "p99", "max"};
  for (int r = 0; r < 4; r++) {
    ck_assert_str_eq(csv_str(&c, r, "workload"), "decode");
    ck_assert_int_eq((int64_t)csv_num(&c, r, "length"), lens[r]);
    ck_assert_int_eq((int64_t)csv_num(&c, r, "Lk"), lens[r]);
    ck_assert_int_eq((int)csv_num(&c, r, "sessions"), 3);
    ck_assert_int_eq((int)csv_num(&c, r, "steps"), steps[_i]);
    ck_assert_int_eq((int)csv_num(&c, r, "sessions_done"), 3);
    double sent = csv_num(&c, r, "sent"), ok = csv_num(&c, r, "ok");
    ck_assert_msg(sent == 3 * (3 + steps[_i]) && ok == sent,
                  "step %d: %g sent, %g ok\n%s", r + 1, sent, ok, log);
    for (size_t k = 0; k < sizeof zero / sizeof zero[0]; k++)
      ck_assert_msg(csv_num(&c, r, zero[k]) == 0, "step %d: %s is %g\n%s",
                    r + 1, zero[k], csv_num(&c, r, zero[k]), log);
    ck_assert_msg(csv_num(&c, r, "verified") == verified[_i],
                  "step %d: %g verified\n%s", r + 1, csv_num(&c, r, "verified"),
                  log);
    ck_assert_msg(csv_num(&c, r, "ttft_p50_ms") > 0, "step %d", r + 1);
    assert_ordered(&c, r, "ttft", ttft, 4);
    if (steps[_i]) {
      ck_assert_msg(csv_num(&c, r, "lat_p50_ms") > 0, "step %d", r + 1);
      assert_ordered(&c, r, "lat", lat, 5);
      ck_assert_msg(csv_num(&c, r, "tokens_per_s") > 0, "step %d", r + 1);
      ck_assert_msg(csv_num(&c, r, "timed") == 3 * steps[_i],
                    "step %d: %g steps timed", r + 1, csv_num(&c, r, "timed"));
      ck_assert_msg(csv_num(&c, r, "compute_p50_ms") > 0, "step %d", r + 1);
    }
    ck_assert_str_eq(csv_str(&c, r, "projections"),
                     _i == 2 ? "resident" : "none");
  }
  free(c.text);

  json_t *doc = scratch_json(&sc);
  char target[96];
  snprintf(target, sizeof target, "%s/v1/sessions", url);
  ck_assert_str_eq(json_string_value(json_object_get(doc, "target")), target);
  json_t *steps_j = json_object_get(doc, "steps");
  ck_assert_int_eq(json_array_size(steps_j), 4);
  json_t *d = json_object_get(json_array_get(steps_j, 3), "decode");
  ck_assert_int_eq(json_integer_value(json_object_get(d, "prefill")), 96);
  ck_assert_int_eq(json_integer_value(json_object_get(d, "sessions_done")), 3);
  if (_i == 2)
    ck_assert_str_eq(json_string_value(json_object_get(d, "layer")),
                     "blocks.3");
  json_decref(doc);
  char *svg = scratch_svg(&sc);
  ck_assert_ptr_nonnull(strstr(svg, ">time to first token (prefill)</text>"));
  ck_assert_ptr_nonnull(strstr(svg, "<polyline"));
  free(svg);
  free(log);
  scratch_free(&sc);
  stop(&srv);
  if (_i == 2) {
    unlink(file);
    rmdir(dir);
  }
}
END_TEST

/* One request over a raw socket (the harness's client records what it
 * gets for docs/openapi.json, which does not describe the sessions): the
 * reply, headers and body, into buf[0..cap). Returns its status, or 0. */
static int raw_request(int port, const char *method, const char *path,
                       char *buf, size_t cap) {
  int fd = sh_connect(port);
  if (fd < 0)
    return 0;
  char req[256];
  int n = snprintf(req, sizeof req,
                   "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: "
                   "close\r\n\r\n",
                   method, path);
  int st = sh_send_all(fd, req, (size_t)n) == 0 &&
                   sh_recv_reply(fd, buf, cap, 5000) > 0
               ? sh_raw_status(buf)
               : 0;
  close(fd);
  return st;
}

/* The id of a session of the server's whose length is over `min`, into
 * id[0..33); 0 when there is none. */
static int long_session(int port, int64_t min, char *id) {
  static char buf[1 << 16];
  if (raw_request(port, "GET", "/v1/sessions?limit=100", buf, sizeof buf) !=
      200)
    return 0;
  const char *body = strstr(buf, "\r\n\r\n");
  json_t *v = body ? json_loads(body + 4, 0, NULL) : NULL;
  int found = 0;
  json_t *list = json_object_get(v, "sessions"), *s;
  size_t i;
  json_array_foreach(list, i, s) {
    if (!found && json_integer_value(json_object_get(s, "length")) > min) {
      snprintf(id, 33, "%s", json_string_value(json_object_get(s, "session")));
      found = 1;
    }
  }
  json_decref(v);
  return found;
}

/* Sessions deleted behind attnd-load's back answer 404: each is created
 * again, given its history, and goes on to the end; the recreations are
 * counted as such and not as errors (but for the step that a deletion may
 * catch computing, answered without a length), and the checks pass, the
 * tokens being the same whatever served them. */
START_TEST(test_decode_recreate) {
  sh_server_t srv;
  start(&srv, NULL);
  scratch_t sc;
  scratch_init(&sc);
  char url[64];
  url_of(url, srv.port);
  const char *args[] = {"--url",     url,    "--mode",           "decode",
                        "--prefill", "16",   "--sessions",       "2",
                        "--steps",   "4000", "--concurrency",    "2",
                        "--embed",   "32",   "--heads",          "4",
                        "--verify",  "4",    "--max-error-rate", "0.01",
                        "--out",     sc.dir, "--quiet",          NULL};
  pid_t pid = spawn_load(args, sc.log);
  int deleted = 0;
  double deadline = sh_now() + 30;
  while (deleted < 2 && sh_now() < deadline) {
    char id[33], path[64];
    /* each deletion of a session well into its steps */
    if (!long_session(srv.port, 100 + 1000 * deleted, id)) {
      usleep(2000);
      continue;
    }
    char reply[1024];
    snprintf(path, sizeof path, "/v1/sessions/%s", id);
    ck_assert_int_eq(raw_request(srv.port, "DELETE", path, reply, sizeof reply),
                     204);
    deleted++;
  }
  int st = wait_load(pid);
  char *log = tu_read_file(sc.log, NULL);
  ck_assert_msg(deleted == 2, "deleted %d sessions:\n%s", deleted, log);
  ck_assert_msg(st == 0, "attnd-load exited with %d:\n%s", st, log);
  csv_t c;
  scratch_csv(&sc, &c, 1);
  ck_assert_msg(
      csv_num(&c, 0, "recreated_404") == 2 && csv_num(&c, 0, "recreated") == 2,
      "%g recreated after a 404, %g in all:\n%s",
      csv_num(&c, 0, "recreated_404"), csv_num(&c, 0, "recreated"), log);
  ck_assert_int_eq((int)csv_num(&c, 0, "sessions_done"), 2);
  ck_assert_int_eq((int)csv_num(&c, 0, "abandoned"), 0);
  ck_assert_int_eq((int)csv_num(&c, 0, "verified"), 4);
  double errors = csv_num(&c, 0, "err_other") + csv_num(&c, 0, "err_transport");
  ck_assert_msg(errors <= 2 && csv_num(&c, 0, "bad_replies") == errors,
                "%g errors, %g bad replies:\n%s", errors,
                csv_num(&c, 0, "bad_replies"), log);
  /* every step was done once in the end: 2 x 4000 */
  ck_assert_msg(csv_num(&c, 0, "timed") >= 8000, "%g steps timed",
                csv_num(&c, 0, "timed"));
  free(c.text);
  free(log);
  scratch_free(&sc);
  stop(&srv);
}
END_TEST

/* Asserts that attnd-load refuses `args` (NULL-terminated), case i of a
 * table, as bad usage: exit status 2 and `msg` in its output. With
 * `sweep`, args come after a short sweep (0.2 s, one step, its reports
 * into a scratch directory) that a tool that did not refuse them would
 * run, and no report may be left behind. */
static void assert_usage_error(const char *const *args, int sweep,
                               const char *msg, size_t i) {
  scratch_t sc;
  scratch_init(&sc);
  const char *all[24] = {"--lengths",  "16",
                         "--embed",    "16",
                         "--heads",    "2",
                         "--warmup",   "0",
                         "--duration", "0.2",
                         "--out",      sc.dir,
                         "--url",      "http://127.0.0.1:1"};
  int st = sweep ? run_load_extra(all, 14, args, &sc) : run_load(args, sc.log);
  char *log = tu_read_file(sc.log, NULL), csv[160];
  snprintf(csv, sizeof csv, "%s/attnd-load.csv", sc.dir);
  ck_assert_msg(st == 2 && strstr(log, msg),
                "case %zu: exit %d, expected 2 and '%s':\n%s", i, st, msg, log);
  if (sweep)
    ck_assert_msg(access(csv, F_OK) != 0, "case %zu: a report was written:\n%s",
                  i, log);
  free(log);
  scratch_free(&sc);
}

/* What --mode decode refuses, and what request mode refuses of it: exit
 * status 2 and a message naming the option. No server. */
START_TEST(test_decode_usage) {
  static const struct {
    const char *args[10];
    const char *msg;
  } cases[] = {
      {{"--sessions", "4", NULL}, "--sessions is an option of --mode decode"},
      {{"--steps", "4", NULL}, "--steps is an option of --mode decode"},
      {{"--mode", "decode", "--rate", "5", NULL},
       "--rate is an option of --mode request"},
      {{"--mode", "decode", "--duration", "5", NULL},
       "--duration is an option of --mode request"},
      {{"--mode", "decode", "--protocol", "v2", NULL},
       "--mode decode: sessions are /v1's"},
      {{"--mode", "decode", "--prefill", "8", "--lengths", "8", NULL},
       "--prefill and --lengths are the same list"},
      {{"--mode", "decode", "--model", "demo", "--verify", "1", NULL},
       "--verify: model 'demo' is a layer"},
      {{"--mode", "decode", "--model", "demo", "--rope", "half", NULL},
       "--rope: layer 'demo' has its own rope"},
      {{"--mode", "decode", "--embed", "30", "--heads", "4", NULL},
       "--embed 30 is not a multiple of --heads 4"},
      {{"--mode", "decode", "--create", "get", NULL},
       "--create: unknown value 'get'"},
      {{"--mode", "decode", "--dtype", "bfloat16", NULL},
       "--dtype is an option of --mode request"},
      {{"--dtype", "half", NULL}, "--dtype: unknown value 'half'"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    assert_usage_error(cases[i].args, 0, cases[i].msg, i);
}
END_TEST

/* ---- bad usage, replies that never came, the reports' names --------------
 */

/* Bad usage exits 2 before any request, with the reason on stderr, and
 * writes no report. Each run is given a short sweep (0.2 s, one step), so
 * that a tool that did not refuse it runs that sweep and exits 0 or 1, and
 * leaves attnd-load.csv behind. Catches: a --url that libcurl rejects sent
 * again and again (1.3M requests/s on a closed loop), and every other
 * option accepted and then ignored or failing late. No server. */
START_TEST(test_usage) {
  static const struct {
    const char *args[6];
    const char *msg;
  } cases[] = {
      {{"--url", "", NULL}, "--url: the value is empty"},
      {{"--url", "htp://127.0.0.1:8080", NULL},
       "the scheme must be http:// or https://"},
      {{"--url", "127.0.0.1:8080", NULL},
       "the scheme must be http:// or https://"},
      {{"--url", "http://", NULL}, "no host after the scheme"},
      {{"--url", "http://:8080", NULL}, "no host after the scheme"},
      {{"--url", "http://127.0.0.1:", NULL}, "expected ':PORT' after the host"},
      {{"--url", "http://127.0.0.1:0", NULL},
       "the port is not a number in [1, 65535]"},
      {{"--url", "http://127.0.0.1:65536", NULL},
       "the port is not a number in [1, 65535]"},
      {{"--url", "http://127.0.0.1:80a", NULL},
       "the port is not a number in [1, 65535]"},
      {{"--url", "http://[::1:8080", NULL}, "has no closing ']'"},
      {{"--url", "http://[::g]:8080", NULL}, "'g' in the IPv6 address"},
      {{"--url", "http://[fe80::1%eth0]:8080", NULL},
       "a zone is written %25 and its name"},
      {{"--url", "http://[fe80::1%25]:8080", NULL},
       "a zone is written %25 and its name"},
      {{"--url", "http://[fe80::1%25e^0]:8080", NULL}, "'^' in the zone"},
      {{"--url", "http://[%25lo]:8080", NULL}, "the IPv6 address is empty"},
      {{"--url", "http://local host", NULL}, "a space or control character"},
      {{"--url", "http://ho^st", NULL}, "'^' in the host name"},
      {{"--url", "http://u:p@127.0.0.1", NULL}, "credentials (user@host)"},
      {{"--url", "http://127.0.0.1/?a=1", NULL}, "a query or fragment"},
      {{"--path", "healthz", NULL}, "--path 'healthz': a path starting with"},
      {{"--path", "", NULL}, "--path: the value is empty"},
      {{"--path", "/healthz", "--verify", "1", NULL},
       "--verify checks attention replies"},
      {{"--model", "", "--protocol", "v2", NULL},
       "--model: the value is empty"},
      {{"--name", "a/b", NULL}, "--name 'a/b': a file name"},
      {{"--out", "", NULL}, "--out: the value is empty"},
      {{"--out", "/proc/attnd-load-none/x", NULL},
       "--out /proc/attnd-load-none/x: No such file or directory"},
      {{"--connections", "4", NULL},
       "--connections is an option of the open loop"},
      {{"--arrival", "uniform", NULL},
       "--arrival is an option of the open loop"},
      /* an empty value inside a list, as the docs promise for a whole one */
      {{"--lengths", "16,,32", NULL}, "--lengths: an empty value in '16,,32'"},
      {{"--concurrency", ",1", NULL}, "--concurrency: an empty value in ',1'"},
      {{"--lengths", "16,", NULL}, "--lengths: an empty value in '16,'"},
      {{"--lengths", ",", NULL}, "--lengths: an empty value in ','"},
      /* a value left out: the next option is not taken for it */
      {{"--name", "--quiet", NULL},
       "--name needs a value, not the option --quiet"},
      {{"--lengths", "--quiet", NULL},
       "--lengths needs a value, not the option --quiet"},
      {{"--duration", NULL}, "--duration needs a value"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    assert_usage_error(cases[i].args, 1, cases[i].msg, i);
}
END_TEST

/* Against a port that takes connections and never answers, with --verify
 * 2 and a timeout of 50 ms: every request times out, so no reply arrived
 * and none was wrong. A timeout is a transient failure: both steps run.
 * Each fails on its error rate, and under --max-error-rate 1 on the two
 * replies to verify that never came, named as such; verify_failed is 0
 * and verify_missing 2. stderr says which reports were written and where,
 * and the second run that it replaced the first's. The latencies, with no
 * reply, have no value: empty cells. Catches: replies that never came
 * counted as wrong ("error rate 1, 4 replies wrong"), reports overwritten
 * without a word, a step with no reply reporting latencies of 0.000 ms,
 * and a sweep stopped by a step without replies. */
START_TEST(test_missing_replies_and_reports) {
  int port, fd = sh_bound_port_assert(&port);
  /* never accepted: the connections wait in the backlog, then the SYNs */
  ck_assert_int_eq(listen(fd, 1), 0);
  char url[64];
  url_of(url, port);
  scratch_t sc;
  scratch_init(&sc);
  for (int run = 0; run < 2; run++) {
    const char *args[] = {"--url",
                          url,
                          "--lengths",
                          "16,32",
                          "--concurrency",
                          "1",
                          "--embed",
                          "16",
                          "--heads",
                          "2",
                          "--warmup",
                          "0",
                          "--duration",
                          "0.2",
                          "--timeout",
                          "0.05",
                          "--verify",
                          "2",
                          "--out",
                          sc.dir,
                          "--quiet",
                          run ? "--max-error-rate" : NULL,
                          "1",
                          NULL};
    int st = run_load(args, sc.log);
    char *log = tu_read_file(sc.log, NULL);
    ck_assert_msg(st == 1, "run %d: exit %d:\n%s", run, st, log);
    ck_assert_msg(strstr(log, "replies wrong") == NULL &&
                      strstr(log, "2 of the 2 replies to verify never came"),
                  "run %d:\n%s", run, log);
    if (run == 0)
      ck_assert_msg(strstr(log, "step 1 failed: error rate 1 "
                                "(--max-error-rate 0), 2 of the 2"),
                    "%s", log);
    char wrote[256];
    snprintf(wrote, sizeof wrote,
             "attnd-load: wrote %s/attnd-load.csv, .json and .svg%s\n", sc.dir,
             run ? ", replacing the reports of an earlier run" : "");
    ck_assert_msg(strstr(log, wrote), "run %d: no '%s' in:\n%s", run, wrote,
                  log);
    csv_t c;
    scratch_csv(&sc, &c, 2);
    for (int r = 0; r < 2; r++) {
      ck_assert_msg(csv_num(&c, r, "sent") > 0 && csv_num(&c, r, "ok") == 0 &&
                        csv_num(&c, r, "err_timeout") ==
                            csv_num(&c, r, "sent") &&
                        csv_str(&c, r, "stopped")[0] == 0,
                    "step %d:\n%s", r + 1, log);
      ck_assert_int_eq((int)csv_num(&c, r, "verify_failed"), 0);
      ck_assert_int_eq((int)csv_num(&c, r, "verify_missing"), 2);
    }
    /* no reply, no latency: empty cells, not 0 */
    static const char *const none[] = {"lat_p50_ms", "lat_max_ms",
                                       "lat_mean_ms", "compute_p50_ms"};
    for (int k = 0; k < 4; k++)
      ck_assert_msg(csv_str(&c, 0, none[k])[0] == 0, "%s is '%s', not empty",
                    none[k], csv_str(&c, 0, none[k]));
    free(c.text);
    free(log);
  }
  scratch_free(&sc);
  close(fd);
}
END_TEST

/* What attnd-load --help prints (exit status 0), malloc'd. */
static char *help_text(void) {
  scratch_t sc;
  scratch_init(&sc);
  const char *args[] = {"--help", NULL};
  ck_assert_int_eq(run_load(args, sc.log), 0);
  char *text = tu_read_file(sc.log, NULL);
  ck_assert_ptr_nonnull(text);
  scratch_free(&sc);
  return text;
}

/* --help's exit status (and so the man page's, tools/man.sh) names every
 * cause of status 1 that docs/load-testing.md gives and main() applies: a
 * step over --max-error-rate, a wrong reply, replies --verify asked for
 * that never came (test_missing_replies_and_reports sees that 1), and a
 * decode session abandoned; and of status 3 (the stops test_stop_* see):
 * a failed TLS handshake, nothing answering, a step of 401s or of 404s.
 * Catches: any of them left out. */
START_TEST(test_help_exit_status) {
  char *log = help_text();
  const char *line = strstr(log, "\nexit status: ");
  ck_assert_msg(line != NULL, "no exit status in --help:\n%s", log);
  static const char *const causes[] = {
      "--max-error-rate", "wrong reply", "never came",
      "abandoned",        "3 a sweep",   "TLS",
      "nothing answ",     "401",         "404"};
  for (int i = 0; i < 9; i++)
    ck_assert_msg(strstr(line, causes[i]) != NULL,
                  "--help's exit status does not name '%s':%s", causes[i],
                  line);
  free(log);
}
END_TEST

/* A character of an option's name (and its leading dashes). */
static int option_char(char c) {
  return c == '-' || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* docs/load-testing.md names every option --help lists (the table in
 * tools/load/options.c), as a whole word: an option added to the table
 * alone would be in --help and the man page and nowhere in the docs.
 * Catches: --method and --verify-threads, which the page never named. */
START_TEST(test_options_documented) {
  char *help = help_text();
  char *doc = tu_read_file_or_fail("docs/load-testing.md", NULL);
  int options = 0;
  for (const char *l = strstr(help, "\n  --"); l; l = strstr(l, "\n  --")) {
    l += 3;
    size_t n = 0;
    while (option_char(l[n]))
      n++;
    int named = 0;
    for (const char *d = strstr(doc, "--"); d && !named;
         d = strstr(d + 1, "--"))
      named = strncmp(d, l, n) == 0 && !option_char(d[n]) &&
              (d == doc || !option_char(d[-1]));
    ck_assert_msg(named,
                  "docs/load-testing.md does not name %.*s, an option of "
                  "tools/load/options.c's table: say there what it does",
                  (int)n, l);
    options++;
  }
  ck_assert_int_ge(options, 30);
  free(doc);
  free(help);
}
END_TEST

/* ---- bench/wrk/compare.sh ------------------------------------------------ */

/* bench/wrk/compare.sh (docs/load-testing.md, "Against wrk") against a
 * live attnd, with a stand-in wrk on PATH that answers 100 req/s: stdout
 * is the table alone, its header and one row per length and concurrency,
 * the stand-in's rate in it. Catches: attnd-load --dump-body's header
 * line ("Content-Type: application/json", on stdout by design) printed
 * into the table. */
START_TEST(test_wrk_compare_table) {
  sh_server_t srv;
  start(&srv, NULL);
  scratch_t sc;
  scratch_init(&sc);
  char path[4096], real[4096], cmd[8192];
  ck_assert_ptr_nonnull(realpath(load_bin(), real));
  snprintf(path, sizeof path, "%s/attnd-load", sc.dir);
  ck_assert_int_eq(symlink(real, path), 0);
  snprintf(path, sizeof path, "%s/bin", sc.dir); /* $BUILD/wrk is output */
  ck_assert_int_eq(mkdir(path, 0755), 0);
  snprintf(path, sizeof path, "%s/bin/wrk", sc.dir);
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs("#!/bin/sh\necho 'wrk: 100 requests in 1.00 s, 100.0 req/s; latency "
        "ms p50 1 p90 1 p99 1 p99.9 1 max 1; errors: status 0'\n",
        f);
  fclose(f);
  ck_assert_int_eq(chmod(path, 0755), 0);
  snprintf(
      cmd, sizeof cmd,
      "PATH='%s/bin':\"$PATH\" LENGTHS=16 CONCURRENCY=1 REPS=1 timeout 120 "
      "sh bench/wrk/compare.sh http://127.0.0.1:%d '%s' 1 "
      ">'%s/stdout.txt' 2>'%s'",
      sc.dir, srv.port, sc.dir, sc.dir, sc.log);
  int st = system(cmd);
  snprintf(path, sizeof path, "%s/stdout.txt", sc.dir);
  char *out = tu_read_file(path, NULL), *err = tu_read_file(sc.log, NULL);
  ck_assert_msg(st == 0, "compare.sh exited with %d:\n%s\nstderr:\n%s", st, out,
                err);
  static const char head[] =
      "     L    c attnd-load_rps        wrk_rps   ratio\n";
  ck_assert_msg(strncmp(out, head, sizeof head - 1) == 0,
                "stdout does not start with the table's header:\n%s", out);
  const char *row = out + sizeof head - 1;
  ck_assert_msg(
      strncmp(row, "    16    1 ", 12) == 0 && strstr(row, " 100.0 ") != NULL,
      "the row after the header is not L 16, c 1, wrk 100.0:\n%s", out);
  const char *nl = strchr(row, '\n');
  ck_assert_msg(nl != NULL && nl[1] == 0,
                "stdout holds more than the table:\n%s", out);
  free(out);
  free(err);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", sc.dir);
  ck_assert_int_eq(system(cmd), 0);
  stop(&srv);
}
END_TEST

/* ---- API keys and TLS ----------------------------------------------------
 *
 * attnd with API keys and its own certificate (tests/test_certs.h: a CA
 * and a server certificate it signs for 127.0.0.1), as production has
 * them; attnd-load given the key in a file or in ATTND_API_KEY, and the CA
 * with --cacert. */

/* The key attnd is given, every character class of a key in it. */
#define LOAD_KEY "kL0ad-Key_9.~+/="

/* A folder with the certificates and a key file ("keyfile", the key and
 * a newline); removed by auth_dir_free. */
typedef struct auth_dir {
  char dir[64];
  char ca[128], other_ca[128], cert[128], key[128], keyfile[128];
} auth_dir_t;

static void auth_dir_init(auth_dir_t *a) {
  snprintf(a->dir, sizeof a->dir, "/tmp/check_load_auth_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(a->dir));
  ck_assert_int_eq(tcert_make(a->dir), 0);
  snprintf(a->ca, sizeof a->ca, "%s/ca.pem", a->dir);
  snprintf(a->other_ca, sizeof a->other_ca, "%s/other-ca.pem", a->dir);
  snprintf(a->cert, sizeof a->cert, "%s/cert.pem", a->dir);
  snprintf(a->key, sizeof a->key, "%s/key.pem", a->dir);
  snprintf(a->keyfile, sizeof a->keyfile, "%s/keyfile", a->dir);
  FILE *f = fopen(a->keyfile, "w");
  ck_assert_ptr_nonnull(f);
  fputs(LOAD_KEY "\n", f);
  ck_assert_int_eq(fclose(f), 0);
}

static void auth_dir_free(auth_dir_t *a) {
  static const char *const files[] = {
      "ca.pem",    "cert.pem",      "key.pem",      "cert-b.pem",
      "key-b.pem", "other-key.pem", "other-ca.pem", "keyfile",
      "body.bin",  "empty",         "badkey"};
  char p[160];
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    snprintf(p, sizeof p, "%s/%s", a->dir, files[i]);
    unlink(p);
  }
  rmdir(a->dir);
}

/* attnd on TLS with LOAD_KEY its one key, the files it needs and a
 * scratch folder for attnd-load's: keyed_start, then keyed_stop. */
typedef struct keyed {
  auth_dir_t a;
  sh_server_t srv;
  scratch_t sc;
  char url[64]; /* https://127.0.0.1:PORT */
} keyed_t;

static void keyed_start(keyed_t *k) {
  auth_dir_init(&k->a);
  const char *args[] = {
      "--tls-cert-file", k->a.cert, "--tls-key-file", k->a.key, "--api-keys",
      LOAD_KEY,          NULL};
  start(&k->srv, args);
  scratch_init(&k->sc);
  snprintf(k->url, sizeof k->url, "https://127.0.0.1:%d", k->srv.port);
}

static void keyed_stop(keyed_t *k) {
  scratch_free(&k->sc);
  if (k->srv.pid)
    stop(&k->srv);
  auth_dir_free(&k->a);
}

/* Whether the key is in none of the run's log and reports. */
static void assert_key_unseen(const scratch_t *sc, const char *what) {
  static const char *const files[] = {"log.txt", "attnd-load.csv",
                                      "attnd-load.json", "attnd-load.svg"};
  char p[160];
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    snprintf(p, sizeof p, "%s/%s", sc->dir, files[i]);
    char *text = tu_read_file(p, NULL);
    ck_assert_msg(text == NULL || strstr(text, LOAD_KEY) == NULL,
                  "%s: the key is in %s:\n%s", what, files[i], text);
    free(text);
  }
}

/* The key, by file or by ATTND_API_KEY, and the CA by --cacert: exit 0,
 * every request a success (a /v1 sweep, the same over v2, a decode sweep
 * whose creations, prefills, steps and deletions all carry the key, and a
 * GET of a path that needs it), the replies verified, and the key in no
 * output. Catches: the key missing on any one path (its 401s fail the
 * step), CURLOPT_CAINFO not set (every handshake fails), the key printed. */
START_TEST(test_auth_sweep) {
  static const char *const extra[4][20] = {
      {"--lengths", "16", "--verify", "2", NULL},
      {"--lengths", "16", "--verify", "2", "--protocol", "v2", NULL},
      {"--mode", "decode", "--prefill", "8", "--steps", "4", "--sessions", "2",
       "--verify", "2", NULL},
      {"--path", "/v1/info", NULL}};
  static const int by_env[4] = {0, 1, 0, 1};
  keyed_t k;
  keyed_start(&k);
  const scratch_t *sc = &k.sc;
  const char *args[48] = {
      "--url", k.url,   "--cacert", k.a.ca,    "--embed",       "16", "--heads",
      "2",     "--out", sc->dir,    "--quiet", "--concurrency", "2",  NULL};
  int n = 13;
  if (_i != 2) {
    args[n++] = "--warmup";
    args[n++] = "0";
    args[n++] = "--requests";
    args[n++] = "12";
  }
  if (by_env[_i]) {
    setenv("ATTND_API_KEY", LOAD_KEY, 1);
  } else {
    args[n++] = "--api-key-file";
    args[n++] = k.a.keyfile;
  }
  int st = run_load_extra(args, n, extra[_i], sc);
  unsetenv("ATTND_API_KEY");
  char *log = tu_read_file(sc->log, NULL);
  ck_assert_msg(st == 0, "case %d: attnd-load exited with %d:\n%s", _i, st,
                log);
  csv_t c;
  scratch_csv(sc, &c, 1);
  double sent = csv_num(&c, 0, "sent"), ok = csv_num(&c, 0, "ok");
  ck_assert_msg(sent > 0 && ok == sent && csv_num(&c, 0, "error_rate") == 0,
                "case %d: %g sent, %g ok\n%s", _i, sent, ok, log);
  if (_i != 3)
    ck_assert_msg(csv_num(&c, 0, "verified") == 2, "case %d: %g verified", _i,
                  csv_num(&c, 0, "verified"));
  free(c.text);
  free(log);
  assert_key_unseen(sc, "a keyed sweep");
  keyed_stop(&k);
}
END_TEST

/* Against the same attnd: without the key, every reply a 401, said so in
 * one plain line, exit 3 (in request and in decode mode); a CA that did
 * not sign its certificate, libcurl's words for the failed handshake,
 * exit 3, and the step stopped at its first failures (at most one a
 * connection, not --requests of them); --insecure, which trusts it
 * unchecked, exit 0; --dump-body's header lines without the key.
 * Catches: a 401 sweep that only counts errors, a TLS failure sent again
 * and again, --insecure not set, the key in --dump-body's output. */
START_TEST(test_auth_refused) {
  keyed_t k;
  keyed_start(&k);
  const scratch_t *sc = &k.sc;
  static const char *const base[] = {
      "--embed", "16", "--heads", "2", "--quiet", "--concurrency", "2", NULL};
  static const char *const req[] = {"--lengths",  "16", "--warmup", "0",
                                    "--requests", "12", NULL};
  static const char *const dec[] = {"--mode",     "decode",  "--prefill",
                                    "8",          "--steps", "1",
                                    "--sessions", "2",       NULL};
  static const struct {
    const char *const *mode;
    int key, ca; /* 0: none; ca 1: ours, 2: the other CA, 3: --insecure */
    int status;
    const char *msg;
  } cases[] = {
      {req, 0, 1, 3,
       "attnd answered 401 unauthorized to every request: give the key "
       "with --api-key-file or ATTND_API_KEY"},
      {dec, 0, 1, 3, "attnd answered 401 unauthorized to every request"},
      {req, 1, 2, 3, "TLS failed: "},
      {dec, 1, 2, 3, "TLS failed: "},
      {req, 1, 3, 0, NULL},
  };
  for (size_t j = 0; j < sizeof cases / sizeof cases[0]; j++) {
    const char *args[48] = {"--url", k.url, "--out", sc->dir};
    int n = 4;
    for (int i = 0; base[i]; i++)
      args[n++] = base[i];
    for (int i = 0; cases[j].mode[i]; i++)
      args[n++] = cases[j].mode[i];
    if (cases[j].key) {
      args[n++] = "--api-key-file";
      args[n++] = k.a.keyfile;
    }
    if (cases[j].ca == 3) {
      args[n++] = "--insecure";
    } else {
      args[n++] = "--cacert";
      args[n++] = cases[j].ca == 1 ? k.a.ca : k.a.other_ca;
    }
    args[n] = NULL;
    int st = run_load(args, sc->log);
    char *log = tu_read_file(sc->log, NULL);
    ck_assert_msg(st == cases[j].status &&
                      (!cases[j].msg || strstr(log, cases[j].msg)),
                  "case %zu: exit %d, expected %d and '%s':\n%s", j, st,
                  cases[j].status, cases[j].msg ? cases[j].msg : "", log);
    csv_t c;
    scratch_csv(sc, &c, 1);
    double sent = csv_num(&c, 0, "sent");
    if (cases[j].ca == 2 && cases[j].mode == req)
      ck_assert_msg(sent <= 2, "case %zu: %g sent after a TLS failure\n%s", j,
                    sent, log);
    if (cases[j].ca == 2)
      ck_assert_msg(strstr(log, "certificate") || strstr(log, "SSL"),
                    "case %zu: no TLS reason:\n%s", j, log);
    free(c.text);
    free(log);
    assert_key_unseen(sc, "a refused sweep");
  }
  stop(&k.srv);

  /* --dump-body: the body's header lines, not the key */
  char body[160];
  snprintf(body, sizeof body, "%s/body.bin", k.a.dir);
  const char *dump[] = {"--lengths",      "8",         "--embed",     "16",
                        "--heads",        "2",         "--dump-body", body,
                        "--api-key-file", k.a.keyfile, NULL};
  int st = run_load(dump, sc->log);
  char *log = tu_read_file(sc->log, NULL);
  ck_assert_msg(st == 0 && strstr(log, "Content-Type: application/json") &&
                    !strstr(log, LOAD_KEY) && !strstr(log, "Authorization"),
                "exit %d:\n%s", st, log);
  free(log);
  keyed_stop(&k);
}
END_TEST

/* What the key and TLS options refuse: exit status 2 at once, naming the
 * option (and never the key), no report. No server. */
START_TEST(test_auth_usage) {
  auth_dir_t a;
  auth_dir_init(&a);
  char empty[128], badkey[128], none[128];
  snprintf(empty, sizeof empty, "%s/empty", a.dir);
  snprintf(badkey, sizeof badkey, "%s/badkey", a.dir);
  snprintf(none, sizeof none, "%s/none", a.dir);
  FILE *f = fopen(empty, "w");
  ck_assert_ptr_nonnull(f);
  fputs("\nsecond-line\n", f);
  fclose(f);
  f = fopen(badkey, "w");
  ck_assert_ptr_nonnull(f);
  fputs("sec ret\n", f);
  fclose(f);
  const char *https = "https://127.0.0.1:1";
  static char long_key[4098]; /* one over the longest key attnd takes */
  memset(long_key, 'k', sizeof long_key - 1);
  const struct {
    const char *args[8];
    const char *env; /* ATTND_API_KEY, or NULL */
    const char *msg;
  } cases[] = {
      {{"--api-key-file", none, NULL},
       NULL,
       "--api-key-file /tmp/check_load_auth_"},
      {{"--api-key-file", empty, NULL}, NULL, "/empty: the key is empty"},
      {{"--api-key-file", badkey, NULL},
       NULL,
       "/badkey: the key has a character outside letters, digits and - . _ ~ "
       "+ / =, which attnd never accepts (position 4)"},
      {{NULL}, "a,b", "ATTND_API_KEY: the key has a character outside"},
      {{NULL}, long_key, "ATTND_API_KEY: the key is longer than 4096"},
      {{"--cacert", a.ca, NULL},
       NULL,
       "--cacert is for an https:// --url; 'http://127.0.0.1:1' uses no TLS"},
      {{"--insecure", NULL}, NULL, "--insecure is for an https:// --url"},
      {{"--url", https, "--cacert", none, NULL}, NULL, "--cacert /tmp/"},
      {{"--url", https, "--cacert", a.ca, "--insecure", NULL},
       NULL,
       "--cacert and --insecure exclude each other"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    if (cases[i].env)
      setenv("ATTND_API_KEY", cases[i].env, 1);
    assert_usage_error(cases[i].args, 1, cases[i].msg, i);
    unsetenv("ATTND_API_KEY");
  }
  /* the message of a bad key names where it came from, not its text */
  scratch_t sc;
  scratch_init(&sc);
  const char *bad_key[] = {"--api-key-file", badkey, NULL};
  ck_assert_int_eq(run_load(bad_key, sc.log), 2);
  char *log = tu_read_file(sc.log, NULL);
  ck_assert_msg(strstr(log, "sec") == NULL, "the key is in:\n%s", log);
  free(log);
  scratch_free(&sc);
  auth_dir_free(&a);
}
END_TEST

/* ---- a sweep that stops ---------------------------------------------------
 *
 * A failure that no later step could cure ends the sweep at that step:
 * exit status 3, one message, and reports of the steps run. */

/* How often `needle` occurs in `hay`. */
static int occurrences(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = hay; (p = strstr(p, needle)) != NULL;
       p += strlen(needle))
    n++;
  return n;
}

/* The run in sc stopped at its first step, with `cause` (the CSV's and the
 * JSON's name for it): exit 3, `msg` once on its output (not --quiet, so
 * that each step's line is there too), the first error, where there is
 * one, once as well; the reports valid, with that one step and its cause,
 * and the picture saying where it stopped. A step stopped at once sent no
 * request again: at most one a slot of the first step (concurrency 1),
 * and no decode session was abandoned; one stopped at its end (`sent`
 * given) sent them all. */
static void assert_stopped(const scratch_t *sc, int st, const char *cause,
                           const char *msg, int decode, int sent) {
  char *log = tu_read_file(sc->log, NULL);
  ck_assert_msg(st == 3, "%s: exit %d:\n%s", cause, st, log);
  ck_assert_msg(occurrences(log, msg) == 1, "%s: '%s' %d times, not once:\n%s",
                cause, msg, occurrences(log, msg), log);
  ck_assert_msg(occurrences(log, "attnd-load: stopped at step 1 of 6: ") == 1,
                "%s: no one line on the stop:\n%s", cause, log);
  csv_t c;
  scratch_csv(sc, &c, 1);
  ck_assert_str_eq(csv_str(&c, 0, "stopped"), cause);
  ck_assert_msg(
      (sent ? csv_num(&c, 0, "sent") == sent : csv_num(&c, 0, "sent") <= 1) &&
          csv_num(&c, 0, "abandoned") == 0,
      "%s: %g sent, %g sessions abandoned:\n%s", cause, csv_num(&c, 0, "sent"),
      csv_num(&c, 0, "abandoned"), log);
  json_t *doc = scratch_json(sc);
  json_t *steps = json_object_get(doc, "steps");
  ck_assert_int_eq(json_array_size(steps), 1);
  json_t *step = json_array_get(steps, 0);
  ck_assert_str_eq(json_string_value(json_object_get(step, "stopped")), cause);
  const char *first = json_string_value(
      json_object_get(step, decode ? "first_error" : "first_transport_error"));
  if (first)
    ck_assert_msg(occurrences(log, first) == 1, "%s: '%s' %d times:\n%s", cause,
                  first, occurrences(log, first), log);
  json_decref(doc);
  char *svg = scratch_svg(sc);
  ck_assert_msg(svg && strstr(svg, "; stopped at step 1: "), "%s: %s", cause,
                svg);
  free(svg);
  free(c.text);
  free(log);
}

/* Six steps (three lengths or prefills by concurrencies 1 and 2), request
 * or decode mode, against attnd with a key on TLS: with a CA that did not
 * sign its certificate, and without the key. Each stops at step 1 with
 * one message: at once, but for request mode's 401s, counted to the
 * step's end. Catches: the sweep going on after a TLS failure or a step
 * of 401s (six messages, six rows), decode mode sending a failed
 * handshake or a 401 again after its pauses (20 requests, sessions
 * abandoned), the first error said on each step's line and again in the
 * message. */
START_TEST(test_stop_keyed) {
  keyed_t k;
  keyed_start(&k);
  const scratch_t *sc = &k.sc;
  static const char *const req[] = {"--lengths",  "8,16,32", "--warmup", "0",
                                    "--requests", "12",      NULL};
  static const char *const dec[] = {"--mode",     "decode",  "--prefill",
                                    "4,8,16",     "--steps", "1",
                                    "--sessions", "2",       NULL};
  for (int j = 0; j < 4; j++) {
    int decode = j & 1, tls = j < 2;
    const char *args[48] = {"--url",         k.url,
                            "--out",         sc->dir,
                            "--embed",       "16",
                            "--heads",       "2",
                            "--cacert",      tls ? k.a.other_ca : k.a.ca,
                            "--concurrency", "1,2"};
    int n = 12;
    for (int i = 0; (decode ? dec : req)[i]; i++)
      args[n++] = (decode ? dec : req)[i];
    if (tls) {
      args[n++] = "--api-key-file";
      args[n++] = k.a.keyfile;
    }
    args[n] = NULL;
    int st = run_load(args, sc->log);
    assert_stopped(sc, st, tls ? "tls" : "unauthorized",
                   tls ? "TLS failed: "
                       : "attnd answered 401 unauthorized to every request: "
                         "give the key",
                   decode, tls || decode ? 0 : 12);
  }
  keyed_stop(&k);
}
END_TEST

/* Nothing listening at --url (a port bound, not listening), in both
 * modes; and a --path that attnd answers with 404. Each stops at step 1 of
 * 6, exit 3, with one message, its step's elapsed_s the time to its stop.
 * Catches: a sweep that sends to a port with nothing behind it for every
 * step (or decode mode after its pauses), a stopped step timed to its
 * window's end (its rates over time it did not run), a sweep of 404s that
 * goes on. Then decode mode's 404s, a --model not
 * loaded; each 404's message names only the options of its mode (a cure
 * the run cannot be given is no help). */
START_TEST(test_stop_unreachable_not_found) {
  int port, fd = sh_bound_port_assert(&port);
  char url[64];
  url_of(url, port);
  scratch_t sc;
  scratch_init(&sc);
  for (int decode = 0; decode < 2; decode++) {
    const char *args[] = {"--url",
                          url,
                          "--out",
                          sc.dir,
                          "--embed",
                          "16",
                          "--heads",
                          "2",
                          "--concurrency",
                          "1,2",
                          decode ? "--prefill" : "--lengths",
                          "4,8,16",
                          decode ? "--mode" : "--warmup",
                          decode ? "decode" : "0",
                          decode ? "--steps" : "--duration",
                          decode ? "1" : "5",
                          NULL};
    int st = run_load(args, sc.log);
    assert_stopped(&sc, st, "unreachable", "nothing answered at ", decode, 0);
    csv_t c; /* its time ends at its stop, not at its window's end (5 s) */
    scratch_csv(&sc, &c, 1);
    ck_assert_msg(csv_num(&c, 0, "elapsed_s") >= 0 &&
                      csv_num(&c, 0, "elapsed_s") < 5,
                  "decode %d: a step stopped at once took %g s", decode,
                  csv_num(&c, 0, "elapsed_s"));
    free(c.text);
  }
  close(fd);

  sh_server_t srv;
  static const char *const none[] = {NULL};
  start(&srv, none);
  url_of(url, srv.port);
  const char *args[] = {
      "--url",       url,        "--path", "/nope",      "--concurrency",
      "1,2,3,4,5,6", "--warmup", "0",      "--requests", "4",
      "--out",       sc.dir,     NULL};
  int st = run_load(args, sc.log);
  char *log = tu_read_file(sc.log, NULL);
  /* the cures named are options of this mode and protocol: v1 has no
   * --model */
  ck_assert_msg(st == 3 &&
                    occurrences(log, "attnd answered 404 not found to "
                                     "every request of ") == 1 &&
                    occurrences(log, "(--path, or the path in --url)") == 1 &&
                    occurrences(log, "stopped at step 1 of 6") == 1,
                "exit %d:\n%s", st, log);
  csv_t c;
  scratch_csv(&sc, &c, 1);
  ck_assert_str_eq(csv_str(&c, 0, "stopped"), "not_found");
  ck_assert_msg(csv_num(&c, 0, "sent") == 4 && csv_num(&c, 0, "err_other") == 4,
                "%s", log);
  free(c.text);
  free(log);

  /* decode mode's sessions of a layer that is not loaded: a create's 404
   * stops the run, and the cure named is --model (decode mode has no
   * --path) */
  const char *dargs[] = {
      "--url",   url,  "--mode",    "decode", "--model",    "nope",
      "--embed", "16", "--prefill", "4",      "--sessions", "1",
      "--steps", "1",  "--out",     sc.dir,   NULL};
  st = run_load(dargs, sc.log);
  stop(&srv);
  log = tu_read_file(sc.log, NULL);
  ck_assert_msg(st == 3 &&
                    occurrences(log, "attnd answered 404 not found to "
                                     "every request of ") == 1 &&
                    occurrences(log, "(--model, or the path in --url)") == 1,
                "exit %d:\n%s", st, log);
  free(log);
  scratch_free(&sc);
}
END_TEST

/* The default --help gives option `opt` (with its leading dashes): the
 * last parenthesized words of its entry, which may wrap onto the lines
 * below it; into out. Returns whether there was one. */
static int help_default(const char *help, const char *opt, char *out,
                        size_t size) {
  char head[64];
  snprintf(head, sizeof head, "\n  %s", opt);
  const char *at = strstr(help, head);
  while (at && option_char(at[strlen(head)]))
    at = strstr(at + 1, head);
  if (at == NULL)
    return 0;
  const char *end = strstr(at + 1, "\n  --"), *close = NULL;
  if (end == NULL)
    end = at + strlen(at);
  for (const char *p = at; p < end; p++)
    if (*p == ')')
      close = p;
  const char *open = close;
  while (open && open > at && *open != '(')
    open--;
  if (close == NULL || *open != '(')
    return 0;
  snprintf(out, size, "%.*s", (int)(close - open - 1), open + 1);
  return 1;
}

/* The defaults docs/load-testing.md quotes, "`--opt` (default X)" or
 * "`--opt X` (the default)", are --help's (tools/load/options.c's table):
 * a default changed in the table alone, or in the page alone, fails here. */
START_TEST(test_defaults_documented) {
  char *help = help_text();
  char *doc = tu_read_file_or_fail("docs/load-testing.md", NULL);
  int quoted = 0;
  for (const char *d = strstr(doc, "`--"); d; d = strstr(d + 1, "`--")) {
    const char *close = strchr(d + 1, '`');
    if (close == NULL || close - d > 48)
      continue;
    char opt[48], value[48];
    snprintf(opt, sizeof opt, "%.*s", (int)(close - d - 1), d + 1);
    char *arg = strchr(opt, ' ');
    if (arg)
      *arg++ = 0;
    const char *p = close + 1;
    while (*p == ' ' || *p == '\n')
      p++;
    if (arg && strncmp(p, "(the default)", 13) == 0) {
      snprintf(value, sizeof value, "%s", arg);
    } else if (strncmp(p, "(default", 8) == 0) {
      p += 8 + (p[8] == ':');
      while (*p == ' ' || *p == '`')
        p++;
      size_t n = strcspn(p, "`,)");
      snprintf(value, sizeof value, "%.*s", (int)n, p);
    } else {
      continue;
    }
    char want[48];
    ck_assert_msg(help_default(help, opt, want, sizeof want),
                  "--help gives %s no default; docs/load-testing.md quotes %s",
                  opt, value);
    ck_assert_msg(strcmp(value, want) == 0,
                  "docs/load-testing.md quotes %s's default as '%s'; --help "
                  "gives '%s'",
                  opt, value, want);
    quoted++;
  }
  ck_assert_int_ge(quoted, 6);
  free(doc);
  free(help);
}
END_TEST

/* ---- the suite ----------------------------------------------------------- */

Suite *test_suite(void) {
  Suite *s = suite_create("load_sweep");
  TCase *tc = tcase_create("sweep");
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, test_sweep, 0, 6);
  suite_add_tcase(s, tc);
  tc = tcase_create("overload");
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, test_overload, 0, 2);
  suite_add_tcase(s, tc);
  tc = tcase_create("v2");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_v2_models);
  tcase_add_test(tc, test_v2_dump_body);
  tcase_add_test(tc, test_dump_body_refused);
  suite_add_tcase(s, tc);
  tc = tcase_create("decode");
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, test_decode_sweep, 0, 3);
  tcase_add_test(tc, test_decode_recreate);
  tcase_add_test(tc, test_decode_usage);
  suite_add_tcase(s, tc);
  tc = tcase_create("usage");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_usage);
  tcase_add_test(tc, test_missing_replies_and_reports);
  tcase_add_test(tc, test_help_exit_status);
  tcase_add_test(tc, test_options_documented);
  tcase_add_test(tc, test_defaults_documented);
  suite_add_tcase(s, tc);
  tc = tcase_create("auth");
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, test_auth_sweep, 0, 4);
  tcase_add_test(tc, test_auth_refused);
  tcase_add_test(tc, test_auth_usage);
  suite_add_tcase(s, tc);
  tc = tcase_create("stop");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_stop_keyed);
  tcase_add_test(tc, test_stop_unreachable_not_found);
  suite_add_tcase(s, tc);
  tc = tcase_create("wrk");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_wrk_compare_table);
  suite_add_tcase(s, tc);
  return s;
}

void test_setup(void) {
  sh_init();
}
