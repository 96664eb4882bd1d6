/* tests/check_readme.c: the examples of the README and of docs/, run
 * against a live attnd.
 *
 * The documents are README.md and every .md file of docs/, read from the
 * repository root (where the test runs). Every ```sh block is an example
 * (its fence may be indented, as in a list), unless the line just before
 * its fence is `<!-- not run: REASON -->`: a make target, a container, a
 * model directory, minutes of load: what a test cannot have. Nothing else
 * is skipped, and nothing silently: a block of commands fenced as bash,
 * shell or console, or with no language, is an error (fence it sh), as is
 * a marker without a reason or without an sh block after it, and every sh
 * block that a plain count of fences finds must be an example or marked.
 *
 * Each example runs under /bin/sh -e, in a scratch directory holding a
 * link to every entry of the repository root (so that what it writes,
 * keys, certificates or reports, lands there and is removed), in a process
 * group of its own that is killed when the shell exits (a server it left
 * in the background after a failure dies with it). Its text is changed
 * so: localhost:8080 is a server started from config/attnd.conf (and the
 * demo layer, build/demo/demo.safetensors, which make check builds) on a
 * free port, as `make run`'s; localhost:8081 and `--port 8081`, the port
 * the docs give a second attnd, another free port; ./build/attnd and
 * build/attnd-load the binaries under test (ATTND_BIN, ATTND_LOAD_BIN);
 * and an attnd-load sweep's `--duration` gets `--warmup 0.1` before it (1 s
 * a step by default, which is measured by nothing: 18 s of the suite's 55)
 * and `--requests 8` (STEP_REQUESTS), which ends each step in its place.
 * When a ```json block follows it, the output must be that JSON: the same
 * members, strings and shapes, numbers within 1e-5 relative (the last bits
 * of float32 results may differ between SIMD levels); when a ```text block
 * does, the output must be its text, byte for byte. Otherwise the example
 * must exit 0 and print something.
 *
 * Examples must not silently disappear: README.md must keep at least one,
 * each document of `expected` at least its count, and all of them together
 * at least MIN_EXAMPLES. Nor may a document have one heading twice: a
 * section written again is a second home for its figures. */
#include <check.h>
#include <glob.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "server_harness.h"
#include "suite.h"

#define MAX_EXAMPLES 96
#define MAX_DOCS 32
#define MAX_PROBLEMS 32
/* The examples there were once load-testing.md's and security.md's ran
 * too: 25. */
#define MIN_EXAMPLES 25
/* The measured requests of each step of an attnd-load sweep here, in place
 * of the document's seconds: what is checked (the flags, the exit status,
 * the output, the replies --verify checks, at most 4 in the documents)
 * needs requests, not seconds of them, and a count ends a step on a slow
 * machine too, where 0.25 s once brought no reply to verify. */
enum { STEP_REQUESTS = 8 };

typedef struct example {
  const char *doc; /* the document, relative to the repository root */
  char *cmd;       /* the block's text */
  char *expect;    /* the following json or text block, or NULL */
  int is_text;     /* expect is a text block: stdout, byte for byte */
  int line;        /* where the block starts in doc */
} example_t;

/* The documents with examples, and how many each must keep at least. */
static const struct {
  const char *doc;
  int min;
} expected[] = {
    {"README.md", 4},            /* the first request, layers, a session */
    {"docs/api.md", 7},          /* the request forms, weights at any
                                    length, errors, /v1/info */
    {"docs/operations.md", 3},   /* --print-config, /metrics, its labels */
    {"docs/layers.md", 2},       /* a layer, a layer request */
    {"docs/oip.md", 2},          /* an inference, a model's metadata */
    {"docs/sessions.md", 2},     /* a session: create, steps, delete; a
                                    client's id, a fork, a truncate */
    {"docs/security.md", 3},     /* a key, --print-config, TLS */
    {"docs/load-testing.md", 6}, /* a sweep, a gate, v2, half precision,
                                    decode, keys and TLS */
};
#define N_EXPECTED ((int)(sizeof expected / sizeof expected[0]))

static example_t examples[MAX_EXAMPLES];
static int n_examples;
static char *docs[MAX_DOCS]; /* every document read */
static int n_docs;
static int not_run[MAX_DOCS];   /* per document: sh blocks marked not run */
static int sh_fences[MAX_DOCS]; /* per document: ```sh lines, counted apart */
static int too_many;            /* examples that did not fit in examples[] */
static char *problems[MAX_PROBLEMS]; /* blocks or markers out of order */
static int n_problems;
static sh_server_t server;
static int port2;        /* the second attnd's port (8081 in the docs) */
static char scratch[64]; /* where examples run */

static char *dup_range(const char *a, const char *b) {
  char *s = malloc((size_t)(b - a) + 1);
  memcpy(s, a, (size_t)(b - a));
  s[b - a] = 0;
  return s;
}

static void problem(const char *doc, int line, const char *what) {
  char *m = malloc(strlen(doc) + strlen(what) + 32);
  sprintf(m, "%s:%d: %s", doc, line, what);
  if (n_problems < MAX_PROBLEMS)
    problems[n_problems++] = m;
  else
    free(m);
}

static void add_example(const char *doc, char *cmd, char *expect, int is_text,
                        int line) {
  if (n_examples < MAX_EXAMPLES)
    examples[n_examples++] = (example_t){doc, cmd, expect, is_text, line};
  else
    too_many++;
}

/* The line at p without its leading spaces, and how many there were. */
static const char *unindent(const char *p, int *indent) {
  const char *q = p;
  while (*q == ' ')
    q++;
  *indent = (int)(q - p);
  return q;
}

/* Whether the line at p (up to its newline) is exactly s. */
static int line_is(const char *p, const char *s) {
  size_t n = strlen(s);
  return strncmp(p, s, n) == 0 && (p[n] == '\n' || p[n] == 0);
}

/* Whether text (a block's first line) starts as a command does. */
static int looks_like_command(const char *text) {
  static const char *const starts[] = {"curl ",   "./build/", "build/",
                                       "make ",   "sh ",      "podman ",
                                       "docker ", "kubectl ", "$ "};
  for (size_t i = 0; i < sizeof starts / sizeof starts[0]; i++)
    if (strncmp(text, starts[i], strlen(starts[i])) == 0)
      return 1;
  return 0;
}

/* The reason of a `<!-- not run: REASON -->` line at p, as a new string
 * ("" when it has none), or NULL when the line is no such marker. */
static char *not_run_reason(const char *p) {
  int indent;
  p = unindent(p, &indent);
  static const char open[] = "<!-- not run:";
  if (strncmp(p, open, sizeof open - 1) != 0)
    return NULL;
  p += sizeof open - 1;
  const char *eol = strchr(p, '\n'), *close = strstr(p, "-->");
  if (close == NULL || (eol && close > eol))
    return strdup("");
  while (p < close && *p == ' ')
    p++;
  while (close > p && close[-1] == ' ')
    close--;
  return dup_range(p, close);
}

/* Counts the lines of text that open an sh block, by the plainest rule:
 * "```sh" after any indent. What the parser below keeps must add up to it. */
static int count_sh_fences(const char *text) {
  int n = 0, indent;
  for (const char *p = text; p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
    n += line_is(unindent(p, &indent), "```sh");
  return n;
}

/* Splits the document at path into fenced blocks, line by line, and keeps
 * the examples. A fence is a line of ``` and its language after at most
 * any indent; the block ends at a line of ``` alone, and loses the
 * opening fence's indent from each of its lines. */
static void load_examples(const char *path) {
  FILE *f = fopen(path, "r");
  if (f == NULL) {
    fprintf(stderr, "%s not found: run from the repository\n", path);
    exit(EXIT_FAILURE);
  }
  if (n_docs == MAX_DOCS) {
    fprintf(stderr, "more than %d documents\n", MAX_DOCS);
    exit(EXIT_FAILURE);
  }
  int d = n_docs;
  const char *doc = docs[n_docs++] = strdup(path);
  static char text[1 << 20];
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  if (n == sizeof text - 1) {
    fprintf(stderr, "%s: too long to read whole\n", path);
    exit(EXIT_FAILURE);
  }
  text[n] = 0;
  sh_fences[d] = count_sh_fences(text);
  char *pending = NULL; /* an sh block waiting for a json block */
  int pending_line = 0, line = 1;
  char *reason = NULL; /* the marker on the line before, if any */
  int reason_line = 0;
  for (const char *p = text; *p;) {
    const char *eol = strchr(p, '\n');
    const char *next = eol ? eol + 1 : p + strlen(p);
    int indent;
    const char *fence = unindent(p, &indent);
    if (strncmp(fence, "```", 3) != 0) {
      if (reason)
        problem(doc, reason_line, "a not-run marker with no block after it");
      free(reason);
      reason = not_run_reason(p);
      reason_line = line;
      p = next, line++;
      continue;
    }
    /* a block: its language, then its lines up to the closing fence */
    char lang[32];
    snprintf(lang, sizeof lang, "%.*s", (int)((eol ? eol : next) - fence - 3),
             fence + 3);
    int open_line = line;
    size_t cap = (size_t)(text + n - p) + 1, len = 0;
    char *body = malloc(cap);
    const char *q = next;
    line++;
    int closed = 0;
    while (*q) {
      const char *qe = strchr(q, '\n'), *qn = qe ? qe + 1 : q + strlen(q);
      int in;
      const char *t = unindent(q, &in);
      line++;
      if (line_is(t, "```")) {
        closed = 1;
        q = qn;
        break;
      }
      const char *from = q + (in < indent ? in : indent);
      memcpy(body + len, from, (size_t)(qn - from));
      len += (size_t)(qn - from);
      q = qn;
    }
    body[len] = 0;
    p = q;
    if (!closed) {
      problem(doc, open_line, "a block that never closes");
      free(body);
      break;
    }
    int is_sh = strcmp(lang, "sh") == 0;
    int is_json = strcmp(lang, "json") == 0;
    int is_text = strcmp(lang, "text") == 0;
    if (pending) {
      add_example(doc, pending, is_json || is_text ? body : NULL, is_text,
                  pending_line);
      pending = NULL;
      if (is_json || is_text) {
        free(reason), reason = NULL;
        continue;
      }
    }
    if (reason && !is_sh)
      problem(doc, reason_line,
              "a not-run marker before a block that is not sh");
    if (is_sh && reason && *reason == 0)
      problem(doc, reason_line, "a not-run marker without a reason");
    if (is_sh && reason) {
      not_run[d]++;
      free(body);
    } else if (is_sh) {
      pending = body, pending_line = open_line;
    } else {
      if (strcmp(lang, "bash") == 0 || strcmp(lang, "shell") == 0 ||
          strcmp(lang, "console") == 0 ||
          (lang[0] == 0 && looks_like_command(body)))
        problem(doc, open_line,
                "commands not fenced as sh: fence them ```sh, to run or "
                "mark `<!-- not run: REASON -->`");
      free(body);
    }
    free(reason), reason = NULL;
  }
  if (reason)
    problem(doc, reason_line, "a not-run marker with no block after it");
  free(reason);
  if (pending)
    add_example(doc, pending, NULL, 0, pending_line);
}

/* README.md, then the .md files of docs/ in name order. */
static void load_all_examples(void) {
  load_examples("README.md");
  glob_t g;
  int rc = glob("docs/*.md", 0, NULL, &g);
  if (rc != 0 && rc != GLOB_NOMATCH) {
    fprintf(stderr, "docs/*.md: glob failed (%d)\n", rc);
    exit(EXIT_FAILURE);
  }
  for (size_t i = 0; rc == 0 && i < g.gl_pathc; i++)
    load_examples(g.gl_pathv[i]);
  if (rc == 0)
    globfree(&g);
}

static int examples_in(const char *doc) {
  int n = 0;
  for (int i = 0; i < n_examples; i++)
    n += strcmp(examples[i].doc, doc) == 0;
  return n;
}

static int was_read(const char *doc) {
  for (int i = 0; i < n_docs; i++)
    if (strcmp(docs[i], doc) == 0)
      return 1;
  return 0;
}

/* cmd with the ports and binaries of the docs replaced by the test's
 * (the header says which). */
static char *localize(const char *cmd) {
  const char *bin = getenv("ATTND_BIN") ? getenv("ATTND_BIN") : "build/attnd";
  const char *load =
      getenv("ATTND_LOAD_BIN") ? getenv("ATTND_LOAD_BIN") : "build/attnd-load";
  /* longest first where one starts another */
  static const char *const from[] = {"./build/attnd-load", "build/attnd-load",
                                     "./build/attnd",      "localhost:8080",
                                     "localhost:8081",     "--port 8081",
                                     "--duration "};
  enum { N = sizeof from / sizeof from[0] };
  char to[N][600];
  snprintf(to[0], sizeof to[0], "%s", load);
  snprintf(to[1], sizeof to[1], "%s", load);
  snprintf(to[2], sizeof to[2], "%s", bin);
  snprintf(to[3], sizeof to[3], "127.0.0.1:%d", server.port);
  snprintf(to[4], sizeof to[4], "127.0.0.1:%d", port2);
  snprintf(to[5], sizeof to[5], "--port %d", port2);
  /* a step's warm-up, 1 s unless given, measures nothing: 0.1 s (the
   * examples with --duration are attnd-load's sweeps; they give none);
   * nor does its window, whose figures nothing here reads: the step ends
   * after STEP_REQUESTS requests (--requests overrides --duration, which
   * is still read, so a renamed or refused flag still fails the example) */
  snprintf(to[6], sizeof to[6], "--warmup 0.1 --requests %d --duration ",
           STEP_REQUESTS);
  size_t cap = strlen(cmd) * 2 + 8192, len = 0;
  char *out = malloc(cap);
  for (const char *p = cmd; *p;) {
    int k = -1;
    for (int i = 0; i < N && k < 0; i++)
      if (strncmp(p, from[i], strlen(from[i])) == 0)
        k = i;
    if (k >= 0) {
      len += (size_t)snprintf(out + len, cap - len, "%s", to[k]);
      p += strlen(from[k]);
    } else {
      out[len++] = *p++;
    }
  }
  out[len] = 0;
  return out;
}

/* Runs cmd with /bin/sh -e in the scratch directory, its stdout and
 * stderr into files (so that a server it leaves in the background cannot
 * hold a pipe open), in a process group of its own, which is killed when
 * the shell exits. Returns the shell's wait status, the output (up to
 * cap - 1 bytes) in out with its length in *n, and the start of stderr in
 * err. */
static int run_example(const char *cmd, char *out, size_t cap, size_t *n,
                       char *err, size_t err_cap) {
  char out_path[128], err_path[128];
  snprintf(out_path, sizeof out_path, "%s/.example-stdout", scratch);
  snprintf(err_path, sizeof err_path, "%s/.example-stderr", scratch);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    setpgid(0, 0);
    if (chdir(scratch) != 0 || freopen(out_path, "w", stdout) == NULL ||
        freopen(err_path, "w", stderr) == NULL)
      _exit(126);
    execl("/bin/sh", "sh", "-e", "-c", cmd, (char *)NULL);
    _exit(127);
  }
  setpgid(pid, pid); /* whichever of the two runs first */
  int status;
  while (waitpid(pid, &status, 0) < 0)
    ;
  kill(-pid, SIGKILL); /* what it left behind */
  const char *paths[2] = {out_path, err_path};
  char *bufs[2] = {out, err};
  size_t caps[2] = {cap, err_cap}, lens[2];
  for (int i = 0; i < 2; i++) {
    FILE *f = fopen(paths[i], "r");
    ck_assert_ptr_nonnull(f);
    lens[i] = fread(bufs[i], 1, caps[i] - 1, f);
    bufs[i][lens[i]] = 0;
    fclose(f);
  }
  *n = lens[0];
  return status;
}

/* Whether got matches want: same types and members; numbers close. */
static int json_close(json_t *want, json_t *got, char *path, size_t cap) {
  if (json_is_number(want) && json_is_number(got)) {
    double a = json_number_value(want), b = json_number_value(got);
    return fabs(a - b) <= 1e-5 * fmax(fabs(a), 1e-3);
  }
  if (json_typeof(want) != json_typeof(got))
    return 0;
  size_t plen = strlen(path);
  if (json_is_array(want)) {
    if (json_array_size(want) != json_array_size(got))
      return 0;
    for (size_t i = 0; i < json_array_size(want); i++) {
      snprintf(path + plen, cap - plen, "[%zu]", i);
      if (!json_close(json_array_get(want, i), json_array_get(got, i), path,
                      cap))
        return 0;
    }
    path[plen] = 0;
    return 1;
  }
  if (json_is_object(want)) {
    if (json_object_size(want) != json_object_size(got))
      return 0;
    const char *key;
    json_t *v;
    json_object_foreach(want, key, v) {
      snprintf(path + plen, cap - plen, ".%s", key);
      json_t *g = json_object_get(got, key);
      if (g == NULL || !json_close(v, g, path, cap))
        return 0;
    }
    path[plen] = 0;
    return 1;
  }
  return json_equal(want, got);
}

START_TEST(test_example) {
  const example_t *ex = &examples[_i];
  char *cmd = localize(ex->cmd);
  static char out[1 << 16], err[4096];
  size_t n;
  int status = run_example(cmd, out, sizeof out, &n, err, sizeof err);
  ck_assert_msg(
      WIFEXITED(status) && WEXITSTATUS(status) == 0,
      "%s:%d exits %d:\n%s\nstdout:\n%s\nstderr:\n%s", ex->doc, ex->line,
      WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), ex->cmd,
      out, err);
  ck_assert_msg(n > 0, "%s:%d prints nothing:\n%s\nstderr:\n%s", ex->doc,
                ex->line, ex->cmd, err);
  if (ex->expect && ex->is_text) {
    ck_assert_msg(strcmp(out, ex->expect) == 0,
                  "%s:%d: the output is not the text block after it:\n%s\n"
                  "want:\n%s",
                  ex->doc, ex->line, out, ex->expect);
  } else if (ex->expect) {
    json_error_t e;
    json_t *want = json_loads(ex->expect, 0, &e), *got = json_loads(out, 0, &e);
    ck_assert_msg(want != NULL, "%s:%d: the expected JSON is invalid", ex->doc,
                  ex->line);
    ck_assert_msg(got != NULL, "%s:%d: the output is not JSON: %s", ex->doc,
                  ex->line, out);
    char path[256] = "$";
    ck_assert_msg(json_close(want, got, path, sizeof path),
                  "%s:%d: output differs at %s:\n%s\nwant:\n%s", ex->doc,
                  ex->line, path, out, ex->expect);
    json_decref(want);
    json_decref(got);
  }
  free(cmd);
}
END_TEST

/* Each expected document was read and keeps its examples. */
START_TEST(test_expected_examples) {
  const char *doc = expected[_i].doc;
  ck_assert_msg(was_read(doc), "%s was not found", doc);
  int n = examples_in(doc);
  ck_assert_msg(n >= expected[_i].min,
                "%s has %d examples, expected %d or more", doc, n,
                expected[_i].min);
}
END_TEST

/* Every sh block is run or marked with its reason, and every other block
 * of commands is fenced sh: none is skipped unseen. */
START_TEST(test_every_block_seen) {
  for (int i = 0; i < n_problems; i++)
    fprintf(stderr, "%s\n", problems[i]);
  ck_assert_msg(n_problems == 0, "%d blocks or markers out of order: %s%s",
                n_problems, problems[0], n_problems > 1 ? " ..." : "");
  for (int d = 0; d < n_docs; d++)
    ck_assert_msg(examples_in(docs[d]) + not_run[d] == sh_fences[d],
                  "%s: %d sh blocks, but %d examples and %d not run", docs[d],
                  sh_fences[d], examples_in(docs[d]), not_run[d]);
}
END_TEST

/* No document has one heading twice (outside fenced blocks): a section
 * written again is two homes for its figures, which then drift apart, and
 * its second anchor gets a "-1" that no link means. */
START_TEST(test_headings_unique) {
  enum { MAX_HEADINGS = 256 };
  for (int d = 0; d < n_docs; d++) {
    FILE *f = fopen(docs[d], "r");
    ck_assert_ptr_nonnull(f);
    static char seen[MAX_HEADINGS][256];
    char line[4096];
    int n = 0, fenced = 0, indent;
    while (fgets(line, sizeof line, f)) {
      if (strncmp(unindent(line, &indent), "```", 3) == 0)
        fenced = !fenced;
      if (fenced || line[0] != '#')
        continue;
      line[strcspn(line, "\n")] = 0;
      for (int i = 0; i < n; i++)
        ck_assert_msg(strcmp(seen[i], line) != 0, "%s: \"%s\" twice", docs[d],
                      line);
      ck_assert_int_lt(n, MAX_HEADINGS);
      snprintf(seen[n++], sizeof seen[0], "%.255s", line);
    }
    fclose(f);
  }
}
END_TEST

START_TEST(test_total_examples) {
  ck_assert_int_eq(too_many, 0);
  ck_assert_int_ge(n_examples, MIN_EXAMPLES);
  ck_assert_int_ge(examples_in("README.md"), 1);
}
END_TEST

/* The server, the second port, and the scratch directory with a link to
 * every entry of the repository root. */
static void start(void) {
  const char *const args[] = {"--config", "config/attnd.conf", "--layers",
                              "build/demo/demo.safetensors", NULL};
  ck_assert_msg(sh_server_start(&server, args) == 0, "%s", server.log);
  close(sh_bound_port_assert(&port2)); /* free a moment ago */
  snprintf(scratch, sizeof scratch, "/tmp/attnd-readme-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(scratch));
  char cmd[256];
  snprintf(cmd, sizeof cmd, "ln -s \"$PWD\"/* '%s'/", scratch);
  ck_assert_int_eq(system(cmd), 0);
}

static void stop(void) {
  if (sh_server_stop(&server, 30) != 0)
    fprintf(stderr, "attnd did not exit cleanly:\n%s\n", server.log);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", scratch);
  if (scratch[0] && system(cmd) != 0)
    fprintf(stderr, "cannot remove %s\n", scratch);
}

void test_setup(void) {
  sh_init();
  load_all_examples();
}

Suite *test_suite(void) {
  Suite *s = suite_create("readme");
  TCase *counts = tcase_create("counts");
  tcase_add_loop_test(counts, test_expected_examples, 0, N_EXPECTED);
  tcase_add_test(counts, test_total_examples);
  tcase_add_test(counts, test_every_block_seen);
  tcase_add_test(counts, test_headings_unique);
  suite_add_tcase(s, counts);
  TCase *tc = tcase_create("examples");
  tcase_add_unchecked_fixture(tc, start, stop);
  tcase_add_loop_test(tc, test_example, 0, n_examples);
  tcase_set_timeout(tc, 60);
  suite_add_tcase(s, tc);
  return s;
}

int test_finish(int failed) {
  int marked = 0;
  printf("readme: %d examples in %d documents:", n_examples, n_docs);
  for (int i = 0; i < n_docs; i++) {
    printf(" %s %d%s", docs[i], examples_in(docs[i]),
           i + 1 < n_docs ? "," : "");
    marked += not_run[i];
  }
  printf("; %d marked not run\n", marked);
  return failed || too_many || n_problems || n_examples < MIN_EXAMPLES;
}
