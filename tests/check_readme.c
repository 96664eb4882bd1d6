/* tests/check_readme.c: the examples of the README and of docs/, run
 * against a live attnd.
 *
 * The documents are README.md and every .md file of docs/, read from the
 * repository root (where the test runs). Every ```sh block whose first line
 * is a curl or ./build/attnd command is an example (blocks that set things
 * up first, with podman or make, are not). It runs under /bin/sh with
 * localhost:8080 pointed at a server started from config/attnd.conf (and
 * the demo layer, build/demo/demo.safetensors, which make check builds) on a
 * free port, and ./build/attnd at the binary under test. When a ```json
 * block follows it, the output must be that JSON: the same members, strings
 * and shapes, numbers within 1e-5 relative (the last bits of float32 results
 * may differ between SIMD levels). Otherwise the example must exit 0 and
 * print something.
 *
 * Examples must not silently disappear: README.md must keep at least one,
 * each document of `expected` at least its count, and all of them together
 * at least MIN_EXAMPLES. */
#include <check.h>
#include <glob.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server_harness.h"
#include "suite.h"

#define MAX_EXAMPLES 64
#define MAX_DOCS 32
/* The examples there were when the README split into docs/: 9. */
#define MIN_EXAMPLES 9

typedef struct example {
  const char *doc; /* the document, relative to the repository root */
  char *cmd;       /* the block's text */
  char *expect;    /* the following json block, or NULL */
  int line;        /* where the block starts in doc */
} example_t;

/* The documents with examples, and how many each must keep at least. */
static const struct {
  const char *doc;
  int min;
} expected[] = {
    {"README.md", 1},          /* the first request */
    {"docs/api.md", 6},        /* the request forms, errors, /v1/info */
    {"docs/operations.md", 2}, /* --print-config, /metrics */
    {"docs/layers.md", 2},     /* a layer, a layer request */
    {"docs/oip.md", 2},        /* an inference, a model's metadata */
    {"docs/sessions.md", 1},   /* a session: create, steps, delete */
};
#define N_EXPECTED ((int)(sizeof expected / sizeof expected[0]))

static example_t examples[MAX_EXAMPLES];
static int n_examples;
static char *docs[MAX_DOCS]; /* every document read */
static int n_docs;
static int too_many; /* examples that did not fit in examples[] */
static sh_server_t server;

static char *dup_range(const char *a, const char *b) {
  char *s = malloc((size_t)(b - a) + 1);
  memcpy(s, a, (size_t)(b - a));
  s[b - a] = 0;
  return s;
}

static int line_of(const char *text, const char *p) {
  int n = 1;
  for (const char *q = text; q < p; q++)
    n += *q == '\n';
  return n;
}

static void add_example(const char *doc, char *cmd, char *expect, int line) {
  if (n_examples < MAX_EXAMPLES)
    examples[n_examples++] = (example_t){doc, cmd, expect, line};
  else
    too_many++;
}

/* Splits the document at path into fenced blocks and keeps the examples. */
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
  const char *doc = docs[n_docs++] = strdup(path);
  static char text[1 << 20];
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  if (n == sizeof text - 1) {
    fprintf(stderr, "%s: too long to read whole\n", path);
    exit(EXIT_FAILURE);
  }
  text[n] = 0;
  const char *p = text;
  char *pending = NULL; /* an sh block waiting for a json block */
  int pending_line = 0;
  while ((p = strstr(p, "```")) != NULL) {
    const char *lang = p + 3, *eol = strchr(lang, '\n');
    if (eol == NULL)
      break;
    const char *body = eol + 1, *close = strstr(body, "\n```");
    if (close == NULL)
      break;
    int is_sh = strncmp(lang, "sh\n", 3) == 0;
    int is_json = strncmp(lang, "json\n", 5) == 0;
    if (pending) {
      add_example(doc, pending, is_json ? dup_range(body, close + 1) : NULL,
                  pending_line);
      pending = NULL;
      if (is_json) {
        p = close + 4;
        continue;
      }
    }
    if (is_sh) {
      char *block = dup_range(body, close + 1);
      if (strncmp(block, "curl ", 5) == 0 ||
          strncmp(block, "./build/attnd ", 14) == 0)
        pending = block, pending_line = line_of(text, p);
      else
        free(block);
    }
    p = close + 4;
  }
  if (pending)
    add_example(doc, pending, NULL, pending_line);
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

/* cmd with localhost:8080 and ./build/attnd replaced. */
static char *localize(const char *cmd, int port, const char *bin) {
  static const char *const from[2] = {"localhost:8080", "./build/attnd"};
  char to[2][600];
  snprintf(to[0], sizeof to[0], "127.0.0.1:%d", port);
  snprintf(to[1], sizeof to[1], "%s", bin);
  size_t cap = strlen(cmd) * 2 + 4096, len = 0;
  char *out = malloc(cap);
  for (const char *p = cmd; *p;) {
    int k = -1;
    for (int i = 0; i < 2; i++)
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
  const char *bin = getenv("ATTND_BIN") ? getenv("ATTND_BIN") : "build/attnd";
  char *cmd = localize(ex->cmd, server.port, bin);
  FILE *p = popen(cmd, "r");
  ck_assert_ptr_nonnull(p);
  static char out[1 << 16];
  size_t n = fread(out, 1, sizeof out - 1, p);
  out[n] = 0;
  int status = pclose(p);
  ck_assert_msg(status == 0, "%s:%d exits %d:\n%s\n%s", ex->doc, ex->line,
                status, ex->cmd, out);
  ck_assert_msg(n > 0, "%s:%d prints nothing:\n%s", ex->doc, ex->line, ex->cmd);
  if (ex->expect) {
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

START_TEST(test_total_examples) {
  ck_assert_int_eq(too_many, 0);
  ck_assert_int_ge(n_examples, MIN_EXAMPLES);
  ck_assert_int_ge(examples_in("README.md"), 1);
}
END_TEST

static void start(void) {
  const char *const args[] = {"--config", "config/attnd.conf", "--layers",
                              "build/demo/demo.safetensors", NULL};
  ck_assert_msg(sh_server_start(&server, args) == 0, "%s", server.log);
}

static void stop(void) {
  if (sh_server_stop(&server, 30) != 0)
    fprintf(stderr, "attnd did not exit cleanly:\n%s\n", server.log);
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
  suite_add_tcase(s, counts);
  TCase *tc = tcase_create("examples");
  tcase_add_unchecked_fixture(tc, start, stop);
  tcase_add_loop_test(tc, test_example, 0, n_examples);
  tcase_set_timeout(tc, 60);
  suite_add_tcase(s, tc);
  return s;
}

int test_finish(int failed) {
  printf("readme: %d examples in %d documents:", n_examples, n_docs);
  for (int i = 0; i < n_docs; i++)
    printf(" %s %d%s", docs[i], examples_in(docs[i]),
           i + 1 < n_docs ? "," : "");
  printf("\n");
  return failed || too_many || n_examples < MIN_EXAMPLES;
}
