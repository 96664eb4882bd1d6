/* tests/check_invalid.c: the invalid-input corpus of tests/invalid/ against
 * the real attnd, as jansson runs its test/suites/invalid.
 *
 * A case is data (tests/invalid/README.md has the format): a request, as a
 * body (<group>/<name>.json, POSTed to /v1/attention as application/json)
 * or as raw bytes (<group>/<name>.http), and <name>.expect, the replies it
 * may get: status, error.code and error.field, and optionally words of the
 * message, the output of a 200, and whether the connection must close.
 * The server is started once, in an unchecked fixture, with
 * tests/invalid/attnd.conf (small limits, so that every limit is cheap to
 * go just over). Each case is one iteration of a loop test: it is sent
 * over a fresh loopback connection, its reply checked, and then GET
 * /healthz must answer 200. A case that finds the server dead starts
 * another, so that a crash fails the case that caused it, and the
 * teardown reports it. The "corpus" test fails when a case or its .expect
 * cannot be read, when two cases send the same bytes, or when there are
 * fewer than CORPUS_MIN cases.
 *
 * ATTND_INVALID_DIR names another corpus; ATTND_INVALID_ONLY runs only the
 * cases whose name ("group/name.ext") contains it. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server_harness.h"
#include "suite.h"
#include "testutil.h"

#define CORPUS_MIN 300
#define REPLY_CAP 65536
#define REPLY_TIMEOUT_MS 3000 /* attnd.conf closes idle ones after 2 s */
#define OUTPUT_TOL 1e-5 /* ‖got − want‖₂ / ‖want‖₂, as check_server */

enum { MAX_ALT = 6, MAX_WORDS = 4 };

/* One reply a case may get. code "-" is a 200 with an output; field NULL
 * is an error with no field, "*" any field. */
typedef struct want {
  int status;
  char code[40];
  char *field;
} want_t;

typedef struct icase {
  char name[520]; /* "group/name.ext", for messages */
  char *wire;     /* the bytes sent */
  size_t wire_len;
  want_t want[MAX_ALT];
  int n_want;
  char *has[MAX_WORDS]; /* the error message contains each */
  char *lacks[MAX_WORDS];
  int n_has, n_lacks;
  json_t *output; /* a 200's expected output, or NULL */
  int close;      /* the server closes the connection after its reply */
} icase_t;

static icase_t *cases; /* the whole corpus */
static size_t n_cases, cap_cases;
static icase_t **run; /* the cases to run (ATTND_INVALID_ONLY) */
static int n_run;
static char load_error[1024]; /* the first problem loading the corpus */
static int n_load_errors;
static char dir[512];

static void load_fail(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
static void load_fail(const char *fmt, ...) {
  if (n_load_errors++ == 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(load_error, sizeof load_error, fmt, ap);
    va_end(ap);
  }
}

/* ---- loading ------------------------------------------------------------- */

/* realloc, or the end of the run: a corpus that cannot load fails anyway. */
static void *grow(void *p, size_t n) {
  if ((p = realloc(p, n ? n : 1)) == NULL) {
    fprintf(stderr, "check_invalid: out of memory loading the corpus\n");
    exit(EXIT_FAILURE);
  }
  return p;
}

/* A .json case: the body behind a fixed POST with an exact length. */
static void wire_json(icase_t *c, const char *body, size_t n) {
  char head[256];
  int h = snprintf(head, sizeof head,
                   "POST /v1/attention HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                   "Content-Type: application/json\r\nContent-Length: %zu\r\n"
                   "Connection: close\r\n\r\n",
                   n);
  c->wire = grow(NULL, (size_t)h + n);
  memcpy(c->wire, head, (size_t)h);
  memcpy(c->wire + h, body, n);
  c->wire_len = (size_t)h + n;
}

/* A .http case: every LF not after a CR becomes CRLF, then {{length}} in
 * the head becomes the length of what follows the first empty line. */
static void wire_http(icase_t *c, const char *raw, size_t n) {
  char *w = grow(NULL, 2 * n + 1);
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    if (raw[i] == '\n' && (i == 0 || raw[i - 1] != '\r'))
      w[k++] = '\r';
    w[k++] = raw[i];
  }
  w[k] = 0;
  const char *end = memmem(w, k, "\r\n\r\n", 4);
  size_t head = end ? (size_t)(end - w) + 4 : k;
  char len[24];
  int ll = snprintf(len, sizeof len, "%zu", k - head);
  static const char ph[] = "{{length}}";
  char *out = grow(NULL, k + 1), *p;
  size_t o = 0, i = 0;
  while ((p = memmem(w + i, head - i, ph, sizeof ph - 1)) != NULL) {
    memcpy(out + o, w + i, (size_t)(p - (w + i)));
    o += (size_t)(p - (w + i));
    memcpy(out + o, len, (size_t)ll); /* never longer than the placeholder */
    o += (size_t)ll;
    i = (size_t)(p - w) + sizeof ph - 1;
  }
  memcpy(out + o, w + i, k - i);
  c->wire = out;
  c->wire_len = o + k - i;
  free(w);
}

/* One line of a .expect; 0, or -1 with load_fail called. */
static int expect_line(icase_t *c, char *line) {
  char *rest = strchr(line, ' ');
  if (line[0] >= '1' && line[0] <= '5') {
    want_t *w = &c->want[c->n_want];
    int used = 0;
    if (c->n_want == MAX_ALT ||
        sscanf(line, "%3d %39s %n", &w->status, w->code, &used) < 2 ||
        used == 0 || w->status < 100 || w->status > 599) {
      load_fail("%s: bad reply line '%s'", c->name, line);
      return -1;
    }
    const char *f = line + used;
    if (*f == 0) {
      load_fail("%s: '%s' has no field ('-' for none)", c->name, line);
      return -1;
    }
    if (f[0] == '"') { /* a JSON string, for fields with spaces */
      json_t *s = json_loads(f, JSON_DECODE_ANY, NULL);
      if (!json_is_string(s)) {
        json_decref(s);
        load_fail("%s: bad field %s", c->name, f);
        return -1;
      }
      w->field = strdup(json_string_value(s));
      json_decref(s);
    } else {
      w->field = strcmp(f, "-") == 0 ? NULL : strdup(f);
    }
    c->n_want++;
  } else if ((line[0] == '~' || line[0] == '!') && rest == line + 1 &&
             rest[1]) {
    int *n = line[0] == '~' ? &c->n_has : &c->n_lacks;
    char **words = line[0] == '~' ? c->has : c->lacks;
    if (*n == MAX_WORDS) {
      load_fail("%s: more than %d '%c' lines", c->name, MAX_WORDS, line[0]);
      return -1;
    }
    words[(*n)++] = strdup(rest + 1);
  } else if (strncmp(line, "output ", 7) == 0) {
    json_error_t je;
    if ((c->output = json_loads(line + 7, 0, &je)) == NULL) {
      load_fail("%s: output: %s", c->name, je.text);
      return -1;
    }
  } else if (strcmp(line, "close") == 0) {
    c->close = 1;
  } else {
    load_fail("%s: unknown line '%s'", c->name, line);
    return -1;
  }
  return 0;
}

static void load_expect(icase_t *c, const char *path) {
  size_t n;
  char *text = tu_read_file(path, &n), *save = NULL;
  if (text == NULL) {
    load_fail("%s: no %s", c->name, path);
    return;
  }
  for (char *line = strtok_r(text, "\n", &save); line;
       line = strtok_r(NULL, "\n", &save)) {
    size_t l = strlen(line);
    while (l && line[l - 1] == '\r')
      line[--l] = 0;
    if (l && line[0] != '#' && expect_line(c, line) < 0)
      break;
  }
  free(text);
  if (c->n_want == 0)
    load_fail("%s: %s names no reply", c->name, path);
}

static int is_case(const struct dirent *e) {
  size_t n = strlen(e->d_name);
  return e->d_name[0] != '.' && n > 5 &&
         (strcmp(e->d_name + n - 5, ".json") == 0 ||
          strcmp(e->d_name + n - 5, ".http") == 0);
}

static int is_group(const struct dirent *e) {
  char p[1024];
  snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
  DIR *d = e->d_name[0] == '.' ? NULL : opendir(p);
  if (d)
    closedir(d);
  return d != NULL;
}

static void load_group(const char *group) {
  char gdir[1024], path[1280];
  struct dirent **names;
  snprintf(gdir, sizeof gdir, "%s/%s", dir, group);
  int n = scandir(gdir, &names, is_case, alphasort);
  if (n < 0) {
    load_fail("cannot read %s: %s", gdir, strerror(errno));
    return;
  }
  for (int i = 0; i < n; i++) {
    const char *f = names[i]->d_name;
    size_t len, stem = strlen(f) - 5;
    if (n_cases == cap_cases) {
      cap_cases = cap_cases ? 2 * cap_cases : 512;
      cases = grow(cases, cap_cases * sizeof *cases);
    }
    icase_t *c = &cases[n_cases++];
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%.255s/%.255s", group, f);
    snprintf(path, sizeof path, "%s/%s", gdir, f);
    char *data = tu_read_file(path, &len);
    if (data == NULL) {
      load_fail("%s: %s", path, strerror(errno));
      n_cases--;
    } else {
      if (strcmp(f + stem, ".json") == 0)
        wire_json(c, data, len);
      else
        wire_http(c, data, len);
      free(data);
      snprintf(path, sizeof path, "%s/%.*s.expect", gdir, (int)stem, f);
      load_expect(c, path);
    }
    free(names[i]);
  }
  free(names);
}

static int same_wire(const void *a, const void *b) {
  const icase_t *x = *(icase_t *const *)a, *y = *(icase_t *const *)b;
  if (x->wire_len != y->wire_len)
    return x->wire_len < y->wire_len ? -1 : 1;
  return memcmp(x->wire, y->wire, x->wire_len);
}

/* Every group's cases, in name order; then the cases to run. */
static void load_corpus(void) {
  const char *d = getenv("ATTND_INVALID_DIR");
  snprintf(dir, sizeof dir, "%s", d && *d ? d : "tests/invalid");
  struct dirent **groups;
  int ng = scandir(dir, &groups, is_group, alphasort);
  if (ng < 0)
    load_fail("cannot read %s: %s", dir, strerror(errno));
  for (int i = 0; i < ng; i++) {
    load_group(groups[i]->d_name);
    free(groups[i]);
  }
  if (ng >= 0)
    free(groups);
  const char *only = getenv("ATTND_INVALID_ONLY");
  run = grow(NULL, n_cases * sizeof *run);
  for (size_t i = 0; i < n_cases; i++)
    if (only == NULL || strstr(cases[i].name, only))
      run[n_run++] = &cases[i];
}

/* ---- the server ---------------------------------------------------------- */

static sh_server_t srv;
static int restarts;          /* servers started after one died */
static int teardown_failures; /* reported by test_finish */
static char conf_arg[600];

/* GET /healthz over a fresh connection: its status, or 0. */
static int healthz(int port) {
  static const char req[] =
      "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  char buf[1024];
  int fd = sh_connect(port), st = 0;
  if (fd >= 0 && sh_send_all(fd, req, sizeof req - 1) == 0 &&
      sh_recv_reply(fd, buf, sizeof buf, REPLY_TIMEOUT_MS) > 0)
    st = sh_raw_status(buf);
  if (fd >= 0)
    close(fd);
  return st;
}

static int srv_start(void) {
  snprintf(conf_arg, sizeof conf_arg, "%s/attnd.conf", dir);
  const char *const args[] = {"--config", conf_arg, NULL};
  return sh_server_start(&srv, args);
}

static void start_server(void) {
  if (srv_start() < 0)
    ck_abort_msg("attnd did not start:\n%s", srv.log);
}

/* Unchecked teardown: no 500 answered, whatever the cases sent, and exit
 * status 0 on SIGTERM. Check ends the run silently when an assertion
 * fails here, so problems are counted for test_finish instead. */
static void stop_server(void) {
  double n500 = sh_metric(srv.port, "attnd_requests_total{status=\"500\"}");
  int st = n500 < 0 ? (sh_server_kill(&srv), -2) : sh_server_stop(&srv, 15.0);
  sh_server_read_log(&srv);
  if (n500 != 0 || st != 0 || restarts) {
    fprintf(stderr,
            "check_invalid: attnd was restarted %d times (after the cases "
            "whose /healthz failed); at the end it had answered 500 %g "
            "times, and exited with status %d:\n%.3000s\n",
            restarts, n500, st, srv.log);
    teardown_failures++;
  }
}

/* ---- one case ------------------------------------------------------------ */

/* A reply, split: status, head, the body parsed, and its error members. */
typedef struct reply {
  int status;
  const char *head, *text; /* what was read (NUL-terminated); its body */
  size_t head_len, len;
  json_t *body;
  const char *code, *field, *message; /* NULL when absent */
} reply_t;

/* What a case holds, released by the checked teardown even when one of its
 * assertions fails. */
static struct {
  int fd;
  char *buf;
  reply_t r;
  sh_tensor_t got, want;
} cur;

/* Checked setup: a clean slate, and a server; a case that finds it dead
 * (the one before killed it, and failed) starts another, so that one
 * crash fails one case. */
static void case_setup(void) {
  memset(&cur, 0, sizeof cur);
  cur.fd = -1;
  if (healthz(srv.port) == 200)
    return;
  sh_server_kill(&srv);
  restarts++;
  if (srv_start() < 0)
    ck_abort_msg("attnd did not restart:\n%s", srv.log);
}

static void case_teardown(void) {
  if (cur.fd >= 0)
    close(cur.fd);
  free(cur.buf);
  json_decref(cur.r.body);
  sh_tensor_free(&cur.got);
  sh_tensor_free(&cur.want);
}

static int want_matches(const want_t *w, const reply_t *r) {
  if (w->status != r->status)
    return 0;
  if (strcmp(w->code, "-") == 0)
    return r->code == NULL;
  if (r->code == NULL || strcmp(w->code, r->code) != 0)
    return 0;
  if (w->field == NULL)
    return r->field == NULL;
  return strcmp(w->field, "*") == 0 ||
         (r->field != NULL && strcmp(w->field, r->field) == 0);
}

/* The expected replies, for failure messages. */
static const char *wants_text(const icase_t *c, char *buf, size_t n) {
  size_t k = 0;
  buf[0] = 0;
  for (int i = 0; i < c->n_want && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, "%s%d %s %s", i ? " | " : "",
                          c->want[i].status, c->want[i].code,
                          c->want[i].field ? c->want[i].field : "-");
  return buf;
}

/* A 200: each tensor of the reply finite, and the output within OUTPUT_TOL
 * of the expected one when the case gives it. */
static void check_ok(const icase_t *c, const reply_t *r) {
  static const char *const names[] = {"output", "weights", "head_outputs"};
  char why[256];
  ck_assert_msg(json_object_get(r->body, "output") != NULL,
                "%s: a 200 without output: %.300s", c->name, r->text);
  for (int i = 0; i < 3; i++) {
    const json_t *v = json_object_get(r->body, names[i]);
    if (v == NULL)
      continue;
    sh_tensor_free(&cur.got);
    ck_assert_msg(sh_tensor_decode(v, &cur.got, why, sizeof why) == 0,
                  "%s: %s is not a tensor of numbers (%s): %.300s", c->name,
                  names[i], why, r->text);
    for (size_t k = 0; k < cur.got.n; k++)
      ck_assert_msg(isfinite(cur.got.data[k]), "%s: %s[%zu] is %g", c->name,
                    names[i], k, (double)cur.got.data[k]);
    if (i > 0 || c->output == NULL)
      continue;
    const sh_tensor_t *t = &cur.got, *e = &cur.want;
    ck_assert_msg(sh_tensor_decode(c->output, &cur.want, why, sizeof why) == 0,
                  "%s: the expected output: %s", c->name, why);
    ck_assert_msg(e->n == t->n, "%s: output has %zu values, expected %zu",
                  c->name, t->n, e->n);
    double d2 = 0, r2 = 0;
    for (size_t k = 0; k < t->n; k++) {
      d2 += ((double)t->data[k] - e->data[k]) * (t->data[k] - e->data[k]);
      r2 += (double)e->data[k] * e->data[k];
    }
    ck_assert_msg(sqrt(d2) <= OUTPUT_TOL * sqrt(r2),
                  "%s: output off by %g relative: %.300s", c->name,
                  sqrt(d2 / r2), r->text);
  }
}

static void check_error(const icase_t *c, const reply_t *r) {
  ck_assert_msg(r->message && *r->message, "%s: error.message missing",
                c->name);
  for (int i = 0; i < c->n_has; i++)
    ck_assert_msg(strstr(r->message, c->has[i]) != NULL,
                  "%s: error.message lacks '%s': %s", c->name, c->has[i],
                  r->message);
  for (int i = 0; i < c->n_lacks; i++)
    ck_assert_msg(strstr(r->message, c->lacks[i]) == NULL,
                  "%s: error.message has '%s': %s", c->name, c->lacks[i],
                  r->message);
}

/* After the reply: nothing more, and the end of the stream within 2 s. */
static void check_closed(const icase_t *c, const reply_t *r) {
  const char *cl = strcasestr(r->head, "\r\nContent-Length:");
  size_t end = r->head_len + (cl ? strtoul(cl + 17, NULL, 10) : 0);
  ck_assert_msg(r->len <= end, "%s: a second reply came: %.300s", c->name,
                r->head + end);
  struct pollfd pf = {.fd = cur.fd, .events = POLLIN};
  char b[256];
  ssize_t k = poll(&pf, 1, 2000) == 1 ? recv(cur.fd, b, sizeof b, 0) : -2;
  ck_assert_msg(k == 0 || (k == -1 && errno == ECONNRESET), "%s: %s", c->name,
                k > 0 ? "a second reply came after the first"
                      : "the connection stayed open");
}

/* Sends case _i on a fresh connection and checks its reply, then that the
 * server still answers. */
START_TEST(test_case) {
  const icase_t *c = run[_i];
  reply_t *r = &cur.r;
  char wants[512];
  cur.buf = grow(NULL, REPLY_CAP);
  cur.fd = sh_connect(srv.port);
  ck_assert_msg(cur.fd >= 0, "%s: cannot connect", c->name);
  sh_send_all(cur.fd, c->wire, c->wire_len); /* the reply may come first */
  long n = sh_recv_reply(cur.fd, cur.buf, REPLY_CAP, REPLY_TIMEOUT_MS);
  ck_assert_msg(n > 0, "%s: no reply within %d ms (expected %s)", c->name,
                REPLY_TIMEOUT_MS, wants_text(c, wants, sizeof wants));
  const char *end = strstr(cur.buf, "\r\n\r\n");
  r->status = sh_raw_status(cur.buf);
  r->head = cur.buf;
  r->text = end + 4;
  r->head_len = (size_t)(r->text - cur.buf);
  r->len = (size_t)n;
  r->body = json_loadb(r->text, r->len - r->head_len, 0, NULL);
  const json_t *e = json_object_get(r->body, "error");
  r->code = json_string_value(json_object_get(e, "code"));
  r->field = json_string_value(json_object_get(e, "field"));
  r->message = json_string_value(json_object_get(e, "message"));

  int k = 0;
  while (k < c->n_want && !want_matches(&c->want[k], r))
    k++;
  ck_assert_msg(k < c->n_want, "%s: got %d %s %s, expected %s: %.600s", c->name,
                r->status, r->code ? r->code : "-", r->field ? r->field : "-",
                wants_text(c, wants, sizeof wants), cur.buf);
  ck_assert_msg(r->body != NULL, "%s: the body is not JSON: %.300s", c->name,
                r->text);
  const char *ct = strcasestr(cur.buf, "\r\nContent-Type: application/json");
  ck_assert_msg(ct && ct < end, "%s: not application/json: %.300s", c->name,
                cur.buf);
  if (r->code)
    check_error(c, r);
  else
    check_ok(c, r);
  if (c->close)
    check_closed(c, r);

  int st = healthz(srv.port);
  ck_assert_msg(st == 200, "%s: then GET /healthz got %d", c->name, st);
}
END_TEST

START_TEST(test_corpus) {
  ck_assert_msg(n_load_errors == 0, "%d problems loading %s; the first: %s",
                n_load_errors, dir, load_error);
  ck_assert_msg(n_cases >= CORPUS_MIN, "%zu cases in %s; at least %d wanted",
                n_cases, dir, CORPUS_MIN);
  icase_t **sorted = grow(NULL, n_cases * sizeof *sorted);
  for (size_t i = 0; i < n_cases; i++)
    sorted[i] = &cases[i];
  qsort(sorted, n_cases, sizeof *sorted, same_wire);
  size_t i = 1;
  while (i < n_cases && same_wire(&sorted[i - 1], &sorted[i]) != 0)
    i++;
  const icase_t *a = i < n_cases ? sorted[i - 1] : NULL,
                *b = i < n_cases ? sorted[i] : NULL;
  free(sorted);
  ck_assert_msg(a == NULL, "%s and %s send the same bytes", a ? a->name : "",
                b ? b->name : "");
}
END_TEST

Suite *test_suite(void) {
  Suite *s = suite_create("invalid");
  TCase *tc = tcase_create("corpus");
  tcase_add_test(tc, test_corpus);
  suite_add_tcase(s, tc);

  tc = tcase_create("cases");
  tcase_add_unchecked_fixture(tc, start_server, stop_server);
  tcase_add_checked_fixture(tc, case_setup, case_teardown);
  tcase_set_timeout(tc, 20);
  tcase_add_loop_test(tc, test_case, 0, n_run);
  suite_add_tcase(s, tc);
  return s;
}

/* The corpus is loaded before Check forks, if it forks. It does not by
 * default here: the cases share nothing but the server, and a fork of this
 * binary (OpenBLAS maps 128 MiB) costs about 40 ms, which is 25 s over the
 * corpus; each case cleans up in its checked teardown instead, and a dead
 * server is restarted by the next case's setup. CK_FORK=yes still forks. */
void test_setup(void) {
  sh_init();
  load_corpus();
  setenv("CK_FORK", "no", 0);
}

int test_finish(int failed) {
  if (teardown_failures)
    fprintf(stderr, "check_invalid: the server's teardown failed (above)\n");
  return failed + teardown_failures;
}
