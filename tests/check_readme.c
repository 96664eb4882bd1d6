/* tests/check_readme.c: the README's examples, run against a live attnd.
 *
 * Every ```sh block of README.md whose first line is a curl or
 * ./build/attnd command is an example (blocks that set things up first,
 * with podman or make, are not). It runs under /bin/sh with localhost:8080
 * pointed at a server started from config/attnd.conf on a free port, and
 * ./build/attnd at the binary under test. When a ```json block follows it, the
 * output must be that JSON: the same members, strings and shapes, numbers
 * within 1e-5 relative (the last bits of float32 results may differ between
 * SIMD levels). Otherwise the example must exit 0 and print something. */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server_harness.h"

#define MAX_EXAMPLES 64

typedef struct example {
  char *cmd;    /* the block's text */
  char *expect; /* the following json block, or NULL */
  int line;     /* where the block starts in README.md */
} example_t;

static example_t examples[MAX_EXAMPLES];
static int n_examples;
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

/* Splits README.md into fenced blocks and keeps the examples. */
static void load_examples(void) {
  FILE *f = fopen("README.md", "r");
  if (f == NULL) {
    fprintf(stderr, "README.md not found: run from the repository\n");
    exit(EXIT_FAILURE);
  }
  static char text[1 << 20];
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
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
    if (pending && n_examples < MAX_EXAMPLES) {
      examples[n_examples++] = (example_t){
          pending, is_json ? dup_range(body, close + 1) : NULL, pending_line};
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
  if (pending && n_examples < MAX_EXAMPLES)
    examples[n_examples++] = (example_t){pending, NULL, pending_line};
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
  ck_assert_msg(status == 0, "README.md:%d exits %d:\n%s\n%s", ex->line, status,
                ex->cmd, out);
  ck_assert_msg(n > 0, "README.md:%d prints nothing:\n%s", ex->line, ex->cmd);
  if (ex->expect) {
    json_error_t e;
    json_t *want = json_loads(ex->expect, 0, &e), *got = json_loads(out, 0, &e);
    ck_assert_msg(want != NULL, "README.md:%d: the expected JSON is invalid",
                  ex->line);
    ck_assert_msg(got != NULL, "README.md:%d: the output is not JSON: %s",
                  ex->line, out);
    char path[256] = "$";
    ck_assert_msg(json_close(want, got, path, sizeof path),
                  "README.md:%d: output differs at %s:\n%s\nwant:\n%s",
                  ex->line, path, out, ex->expect);
    json_decref(want);
    json_decref(got);
  }
  free(cmd);
}
END_TEST

static void start(void) {
  const char *const args[] = {"--config", "config/attnd.conf", NULL};
  ck_assert_msg(sh_server_start(&server, args) == 0, "%s", server.log);
}

static void stop(void) {
  if (sh_server_stop(&server, 30) != 0)
    fprintf(stderr, "attnd did not exit cleanly:\n%s\n", server.log);
}

int main(void) {
  sh_init();
  load_examples();
  Suite *s = suite_create("readme");
  TCase *tc = tcase_create("examples");
  tcase_add_unchecked_fixture(tc, start, stop);
  tcase_add_loop_test(tc, test_example, 0, n_examples);
  tcase_set_timeout(tc, 60);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  printf("readme: %d examples\n", n_examples);
  return failed || n_examples < 8 ? EXIT_FAILURE : EXIT_SUCCESS;
}
