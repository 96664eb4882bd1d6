/* tests/check_routes.c: the route table (server/api/routes.c) and the
 * router (server/http/router.c), without a server.
 *
 *   - the table against docs/openapi.json, both ways: every row's methods
 *     and pattern are an operation there, every operation is a row, and a
 *     path documents OPTIONS exactly where its rows answer preflights;
 *   - the table's own rules: rows of a pattern adjacent, at most one "+"
 *     parameter, a known protocol, a handler, bodies only for POST and PUT;
 *   - paths to rows: each case a path and a method, and the pattern, the
 *     Allow and the parameters expected (a model's name with '/', a
 *     version, a 405, no route);
 *   - the default public_paths are all routes (a renamed path would
 *     silently start asking for a key);
 *   - every pattern is named in the prose of README.md or docs/ (the
 *     API document alone is not where a reader looks for an endpoint). */
#include "testutil.h"
#include <check.h>
#include <glob.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "http/router.h"
#include "suite.h"

/* A pattern as OpenAPI writes it: "{name+}" as "{name}". */
static void doc_pattern(const char *pattern, char *out, size_t cap) {
  size_t k = 0;
  for (const char *p = pattern; *p && k + 1 < cap; p++)
    if (!(*p == '+' && p[1] == '}'))
      out[k++] = *p;
  out[k] = 0;
}

static json_t *load_doc(void) {
  json_error_t e;
  json_t *doc = json_load_file("docs/openapi.json", 0, &e);
  ck_assert_msg(doc != NULL, "docs/openapi.json: %s (line %d)", e.text, e.line);
  return doc;
}

/* The OpenAPI name of a row's method ("GET" -> "get"). */
static void lower(const char *m, size_t n, char *out) {
  for (size_t i = 0; i < n; i++)
    out[i] = (char)(m[i] | 0x20);
  out[n] = 0;
}

START_TEST(test_table_in_openapi) {
  json_t *doc = load_doc(), *paths = json_object_get(doc, "paths");
  size_t n;
  const attnd_route_t *t = attnd_routes(&n);
  for (size_t i = 0; i < n; i++) {
    char p[256];
    doc_pattern(t[i].pattern, p, sizeof p);
    json_t *item = json_object_get(paths, p);
    ck_assert_msg(item != NULL, "route %s %s is not in docs/openapi.json",
                  t[i].methods, t[i].pattern);
    for (const char *m = t[i].methods; *m; m += strspn(m, ", ")) {
      size_t k = strcspn(m, ", ");
      char op[16];
      lower(m, k, op);
      if (strcmp(op, "head") != 0) /* OpenAPI's GET covers HEAD */
        ck_assert_msg(json_object_get(item, op) != NULL,
                      "route %.*s %s: docs/openapi.json has no %s there",
                      (int)k, m, t[i].pattern, op);
      m += k;
    }
    ck_assert_msg(!(t[i].flags & ATTND_ROUTE_CORS) ==
                      !json_object_get(item, "options"),
                  "%s: answers preflights %s, docs/openapi.json's OPTIONS %s",
                  t[i].pattern, t[i].flags & ATTND_ROUTE_CORS ? "yes" : "no",
                  json_object_get(item, "options") ? "yes" : "no");
  }
  json_decref(doc);
}
END_TEST

START_TEST(test_openapi_in_table) {
  json_t *doc = load_doc(), *paths = json_object_get(doc, "paths");
  size_t n;
  const attnd_route_t *t = attnd_routes(&n);
  const char *path;
  json_t *item;
  ck_assert_int_gt(json_object_size(paths), 10);
  json_object_foreach(paths, path, item) {
    const char *op;
    json_t *v;
    json_object_foreach(item, op, v) {
      if (strcmp(op, "options") == 0 || strcmp(op, "parameters") == 0 ||
          strcmp(op, "summary") == 0 || strcmp(op, "description") == 0)
        continue;
      char method[16];
      snprintf(method, sizeof method, "%s", op);
      for (char *c = method; *c; c++)
        *c = (char)(*c & ~0x20);
      int found = 0;
      for (size_t i = 0; i < n && !found; i++) {
        char p[256];
        doc_pattern(t[i].pattern, p, sizeof p);
        found =
            strcmp(p, path) == 0 && attnd_route_allows(t[i].methods, method);
      }
      ck_assert_msg(found, "docs/openapi.json's %s %s is no route", method,
                    path);
    }
  }
  json_decref(doc);
}
END_TEST

START_TEST(test_table_rules) {
  size_t n;
  const attnd_route_t *t = attnd_routes(&n);
  for (size_t i = 0; i < n; i++) {
    const char *p = t[i].pattern, *plus = strstr(p, "+}");
    ck_assert_msg(p[0] == '/', "%s does not start with /", p);
    ck_assert_msg(plus == NULL || strstr(plus + 1, "+}") == NULL,
                  "%s has two '+' parameters", p);
    ck_assert_msg(t[i].handler != NULL, "%s has no handler", p);
    ck_assert_msg(t[i].proto < ATTND_PROTO_COUNT, "%s: no protocol", p);
    int body = attnd_route_allows(t[i].methods, "POST") ||
               attnd_route_allows(t[i].methods, "PUT");
    ck_assert_msg(!(t[i].flags & ATTND_ROUTE_BODY) == !body,
                  "%s %s: a body goes with POST and PUT alone", t[i].methods,
                  p);
    /* the rows of a pattern are adjacent, and speak one protocol */
    for (size_t j = i + 2; j < n; j++)
      if (strcmp(t[j].pattern, p) == 0)
        ck_assert_msg(strcmp(t[j - 1].pattern, p) == 0,
                      "the rows of %s are not adjacent", p);
    if (i && strcmp(t[i - 1].pattern, p) == 0)
      ck_assert_int_eq(t[i - 1].proto, t[i].proto);
  }
}
END_TEST

/* A path, a method, and what it should find: the row's pattern (NULL: no
 * pattern), whether a row takes the method, the Allow, and up to two
 * parameters as "name=value". */
static const struct {
  const char *path, *method, *pattern;
  int routed;
  const char *allow, *p1, *p2;
} cases[] = {
    {"/v1/attention", "POST", "/v1/attention", 1, "POST", NULL, NULL},
    {"/v1/attention", "GET", "/v1/attention", 0, "POST", NULL, NULL},
    {"/v1/attention/", "POST", NULL, 0, "", NULL, NULL},
    {"/v1/attentionx", "POST", NULL, 0, "", NULL, NULL},
    {"/v1/layers", "HEAD", "/v1/layers", 1, "GET, HEAD", NULL, NULL},
    {"/v1/layers/a/b", "GET", "/v1/layers/{name+}", 1, "GET, HEAD", "name=a/b",
     NULL},
    {"/v1/layers/", "GET", NULL, 0, "", NULL, NULL},
    {"/v1/sessions", "POST", "/v1/sessions", 1, "GET, HEAD, POST", NULL, NULL},
    {"/v1/sessions", "DELETE", "/v1/sessions", 0, "GET, HEAD, POST", NULL,
     NULL},
    {"/v1/sessions/s1", "PUT", "/v1/sessions/{session}", 1,
     "GET, HEAD, PUT, DELETE", "session=s1", NULL},
    {"/v1/sessions/s1", "DELETE", "/v1/sessions/{session}", 1,
     "GET, HEAD, PUT, DELETE", "session=s1", NULL},
    {"/v1/sessions/s1/fork", "POST", "/v1/sessions/{session}/fork", 1, "POST",
     "session=s1", NULL},
    {"/v1/sessions/s1/fork", "GET", "/v1/sessions/{session}/fork", 0, "POST",
     "session=s1", NULL},
    {"/v1/sessions/s1/other", "POST", NULL, 0, "", NULL, NULL},
    {"/v1/sessions//attention", "POST", NULL, 0, "", NULL, NULL},
    {"/healthz", "GET", "/healthz", 1, "GET, HEAD", NULL, NULL},
    {"/v2", "GET", "/v2", 1, "GET, HEAD", NULL, NULL},
    {"/v2/", "GET", NULL, 0, "", NULL, NULL},
    {"/v2/models/m", "GET", "/v2/models/{model+}", 1, "GET, HEAD", "model=m",
     NULL},
    {"/v2/models/a/b/infer", "POST", "/v2/models/{model+}/infer", 1, "POST",
     "model=a/b", NULL},
    {"/v2/models/m/ready", "POST", "/v2/models/{model+}/ready", 0, "GET, HEAD",
     "model=m", NULL},
    {"/v2/models/m/versions/1/infer", "POST",
     "/v2/models/{model+}/versions/{version}/infer", 1, "POST", "model=m",
     "version=1"},
    /* the version is what follows the last /versions/ */
    {"/v2/models/a/versions/1/versions/2/ready", "GET",
     "/v2/models/{model+}/versions/{version}/ready", 1, "GET, HEAD",
     "model=a/versions/1", "version=2"},
    {"/v2/models/m/versions/3", "GET", "/v2/models/{model+}/versions/{version}",
     1, "GET, HEAD", "model=m", "version=3"},
    {"/v2/models/infer", "POST", "/v2/models/{model+}", 0, "GET, HEAD",
     "model=infer", NULL},
    {"/v2/models//infer", "POST", NULL, 0, "", NULL, NULL},
    {"/", "GET", "/", 1, "GET, HEAD", NULL, NULL},
    {"/ui/app.js", "GET", "/ui/{file}", 1, "GET, HEAD", "file=app.js", NULL},
    {"/ui/a/b.js", "GET", NULL, 0, "", NULL, NULL},
    {"", "GET", NULL, 0, "", NULL, NULL},
    {"v1/attention", "POST", NULL, 0, "", NULL, NULL},
};

static void assert_param(const attnd_route_match_t *m, int i,
                         const char *want) {
  if (want == NULL) {
    ck_assert_int_le(m->n_params, i);
    return;
  }
  ck_assert_int_gt(m->n_params, i);
  char got[512];
  snprintf(got, sizeof got, "%.*s=%.*s", (int)m->params[i].name_len,
           m->params[i].name, (int)m->params[i].len, m->params[i].value);
  ck_assert_str_eq(got, want);
}

START_TEST(test_find) {
  size_t n;
  const attnd_route_t *t = attnd_routes(&n);
  attnd_route_match_t m;
  int found = attnd_route_find(t, n, cases[_i].path, cases[_i].method, &m);
  ck_assert_msg(found == (cases[_i].pattern != NULL), "%s %s: found %d",
                cases[_i].method, cases[_i].path, found);
  if (!found)
    return;
  ck_assert_str_eq(m.first->pattern, cases[_i].pattern);
  ck_assert_int_eq(m.route != NULL, cases[_i].routed);
  if (m.route)
    ck_assert_str_eq(m.route->pattern, cases[_i].pattern);
  ck_assert_str_eq(m.allow, cases[_i].allow);
  assert_param(&m, 0, cases[_i].p1);
  assert_param(&m, 1, cases[_i].p2);
}
END_TEST

/* The router against a small table of its own: first pattern wins, the
 * "+" parameter takes what the rest leaves, HEAD only where listed. */
static enum MHD_Result none(attnd_http_req_t *r) {
  (void)r;
  return MHD_YES;
}

START_TEST(test_find_order) {
  static const attnd_route_t t[] = {
      {"GET", "/a/{x+}/b", none, ATTND_PROTO_OTHER, 0, 0},
      {"POST", "/a/{x+}", none, ATTND_PROTO_OTHER, ATTND_ROUTE_CORS, 0},
      {"GET", "/a/{x+}", none, ATTND_PROTO_OTHER, 0, 0},
  };
  attnd_route_match_t m;
  ck_assert(attnd_route_find(t, 3, "/a/q/r/b", "GET", &m));
  ck_assert_ptr_eq(m.route, &t[0]);
  assert_param(&m, 0, "x=q/r");
  ck_assert(!m.cors);
  ck_assert(attnd_route_find(t, 3, "/a/q/r/b", "POST", &m));
  ck_assert_ptr_null(m.route); /* the first pattern decides: 405 */
  ck_assert_str_eq(m.allow, "GET");
  ck_assert(attnd_route_find(t, 3, "/a/q/r", "GET", &m));
  ck_assert_ptr_eq(m.route, &t[2]);
  ck_assert_str_eq(m.allow, "POST, GET");
  ck_assert(m.cors);
  ck_assert(attnd_route_find(t, 3, "/a/q", "HEAD", &m));
  ck_assert_ptr_null(m.route);
  ck_assert(!attnd_route_find(t, 3, "/a", "GET", &m));
  ck_assert(!attnd_route_find(t, 3, "/b", "GET", &m));
}
END_TEST

/* The methods attnd implements: each once, in the table's order, OPTIONS
 * only where a row answers preflights; a list too long for its room keeps
 * what fits whole. */
START_TEST(test_methods) {
  static const attnd_route_t t[] = {
      {"GET, HEAD", "/a", none, ATTND_PROTO_OTHER, 0, 0},
      {"POST", "/a", none, ATTND_PROTO_OTHER, 0, 0},
      {"GET, HEAD", "/b", none, ATTND_PROTO_OTHER, 0, 0},
      {"DELETE", "/c", none, ATTND_PROTO_OTHER, ATTND_ROUTE_CORS, 0},
  };
  char out[64];
  ck_assert_uint_eq(attnd_route_methods(t, 3, out, sizeof out), 15);
  ck_assert_str_eq(out, "GET, HEAD, POST");
  attnd_route_methods(t, 4, out, sizeof out);
  ck_assert_str_eq(out, "GET, HEAD, POST, DELETE, OPTIONS");
  attnd_route_methods(t, 4, out, 17);
  ck_assert_str_eq(out, "GET, HEAD, POST");
  size_t n;
  const attnd_route_t *all = attnd_routes(&n);
  attnd_route_methods(all, n, out, sizeof out);
  ck_assert_str_eq(out, "POST, GET, HEAD, PUT, DELETE, OPTIONS");
}
END_TEST

/* A long path of many segments is matched in one pass (no backtracking):
 * 30,000 segments under /v2/models/, with and without a last /infer. */
START_TEST(test_find_long) {
  static char path[60020];
  size_t k = (size_t)snprintf(path, sizeof path, "/v2/models");
  while (k + 2 < 60000)
    memcpy(path + k, "/x", 2), k += 2;
  path[k] = 0;
  size_t n;
  const attnd_route_t *t = attnd_routes(&n);
  attnd_route_match_t m;
  ck_assert(attnd_route_find(t, n, path, "GET", &m));
  ck_assert_str_eq(m.first->pattern, "/v2/models/{model+}");
  ck_assert_uint_eq(m.params[0].len, k - 11);
  memcpy(path + k, "/infer", 7);
  ck_assert(attnd_route_find(t, n, path, "POST", &m));
  ck_assert_str_eq(m.first->pattern, "/v2/models/{model+}/infer");
  memcpy(path + 11, "/", 1); /* an empty segment: the model is no name */
  ck_assert(!attnd_route_find(t, n, path, "POST", &m));
}
END_TEST

START_TEST(test_public_paths_are_routes) {
  attnd_config_t cfg;
  attnd_config_load_t how;
  char msg[512], *argv[] = {"attnd", NULL}, *envp[] = {NULL};
  ck_assert_int_eq(
      attnd_config_load(&cfg, &how, 1, argv, envp, 2, msg, sizeof msg), 0);
  size_t n;
  const attnd_route_t *t = attnd_routes(&n);
  char list[sizeof cfg.public_paths];
  snprintf(list, sizeof list, "%s", cfg.public_paths);
  int count = 0;
  for (char *save, *p = strtok_r(list, ",", &save); p;
       p = strtok_r(NULL, ",", &save), count++) {
    attnd_route_match_t m;
    ck_assert_msg(attnd_route_find(t, n, p, "GET", &m) && m.route,
                  "public_paths' %s is no GET route", p);
  }
  ck_assert_int_ge(count, 3);
}
END_TEST

/* Whether `text` names, in backquotes, a path that `row`'s pattern takes:
 * alone or after a method ("`GET /v1/info`", "`/v1/sessions/{id}`"), the
 * query left out. */
static int names_path(const char *text, const attnd_route_t *row) {
  for (const char *p = strchr(text, '`'); p; p = strchr(p, '`')) {
    const char *q = strchr(p + 1, '`');
    if (q == NULL)
      return 0;
    const char *s = p + 1 + strspn(p + 1, "ABCDEFGHIJKLMNOPQRSTUVWXYZ");
    s = s > p + 1 && *s == ' ' ? s + 1 : p + 1;
    size_t n = strcspn(s, " ?#`");
    char path[256];
    attnd_route_match_t m;
    if (*s == '/' && s + n <= q && n < sizeof path) {
      memcpy(path, s, n);
      path[n] = 0;
      if (attnd_route_find(row, 1, path, "GET", &m) && m.first)
        return 1;
    }
    p = q + 1;
  }
  return 0;
}

/* Every pattern is named in README.md or a .md file of docs/, where a reader
 * looks for what a path does; a pattern with /versions/{version} counts as
 * named where the same without it is (docs/oip.md says a model's path
 * may carry it). An endpoint added as a row and an operation alone would
 * be described in the API document and nowhere else. */
START_TEST(test_routes_in_docs) {
  glob_t g;
  ck_assert_int_eq(glob("docs/*.md", 0, NULL, &g), 0);
  ck_assert_int_eq(glob("README.md", GLOB_APPEND, NULL, &g), 0);
  char **text = calloc(g.gl_pathc, sizeof *text);
  ck_assert_ptr_nonnull(text);
  for (size_t d = 0; d < g.gl_pathc; d++)
    text[d] = tu_read_file_or_fail(g.gl_pathv[d], NULL);
  size_t n;
  const attnd_route_t *t = attnd_routes(&n);
  for (size_t i = 0; i < n; i++) {
    attnd_route_t row = t[i];
    char bare[256];
    const char *v = strstr(row.pattern, "/versions/{version}");
    if (v) {
      snprintf(bare, sizeof bare, "%.*s%s", (int)(v - row.pattern), row.pattern,
               v + strlen("/versions/{version}"));
      row.pattern = bare;
    }
    int named = 0;
    for (size_t d = 0; d < g.gl_pathc && !named; d++)
      named = names_path(text[d], &row);
    ck_assert_msg(named,
                  "route %s %s is named in no doc (README.md, docs/): "
                  "say what it does in its protocol's doc "
                  "(docs/architecture.md, Where a change goes)",
                  t[i].methods, t[i].pattern);
  }
  for (size_t d = 0; d < g.gl_pathc; d++)
    free(text[d]);
  free(text);
  globfree(&g);
}
END_TEST

Suite *test_suite(void) {
  Suite *s = suite_create("routes");
  TCase *tc = tcase_create("table");
  tcase_add_test(tc, test_table_in_openapi);
  tcase_add_test(tc, test_openapi_in_table);
  tcase_add_test(tc, test_table_rules);
  tcase_add_test(tc, test_public_paths_are_routes);
  tcase_add_test(tc, test_routes_in_docs);
  suite_add_tcase(s, tc);
  tc = tcase_create("find");
  tcase_add_loop_test(tc, test_find, 0, sizeof cases / sizeof cases[0]);
  tcase_add_test(tc, test_find_order);
  tcase_add_test(tc, test_find_long);
  tcase_add_test(tc, test_methods);
  suite_add_tcase(s, tc);
  return s;
}
