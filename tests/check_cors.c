/* tests/check_cors.c: CORS headers (server/http/cors.c) without a server.
 *
 * Each case configures cors_allow_origins, asks for the headers of a reply
 * (or a preflight) to a request with some Origin, and compares the exact
 * list of headers that would go out. Bad lists are refused with a message
 * naming the entry. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "http/cors.h"
#include "suite.h"

/* The headers collected as "Name: value\n" lines. */
static void collect(void *arg, const char *name, const char *value) {
  char *out = arg;
  size_t n = strlen(out);
  snprintf(out + n, 2048 - n, "%s: %s\n", name, value);
}

#define EXPOSE                                                                 \
  "Access-Control-Expose-Headers: Server-Timing, X-Request-Id, "               \
  "Retry-After, Inference-Header-Content-Length\n"

/* The end of every preflight's headers. */
#define PREFLIGHT                                                              \
  "Access-Control-Allow-Headers: Authorization, Content-Type, "                \
  "Content-Encoding, Inference-Header-Content-Length, X-Request-Id, "          \
  "traceparent\n"                                                              \
  "Access-Control-Max-Age: 600\n"

static const struct {
  const char *list, *origin;
  int preflight;
  const char *methods, *want;
} cases[] = {
    /* off: nothing, whatever the request */
    {"", "https://a.example", 0, NULL, ""},
    {"", "https://a.example", 1, "POST", ""},
    {" , ", "https://a.example", 0, NULL, ""},
    /* a list: Vary always, the origin itself when listed */
    {"https://a.example", "https://a.example", 0, NULL,
     "Vary: Origin\nAccess-Control-Allow-Origin: https://a.example\n" EXPOSE},
    {"https://a.example, http://localhost:3000", "http://localhost:3000", 0,
     NULL,
     "Vary: Origin\nAccess-Control-Allow-Origin: "
     "http://localhost:3000\n" EXPOSE},
    {"https://a.example", "HTTPS://A.EXAMPLE", 0, NULL,
     "Vary: Origin\nAccess-Control-Allow-Origin: HTTPS://A.EXAMPLE\n" EXPOSE},
    {"https://a.example", "https://b.example", 0, NULL, "Vary: Origin\n"},
    {"https://a.example", "https://a.example.evil", 0, NULL, "Vary: Origin\n"},
    {"https://a.example", "http://a.example", 0, NULL, "Vary: Origin\n"},
    {"https://a.example", "null", 0, NULL, "Vary: Origin\n"},
    {"https://a.example", NULL, 0, NULL, "Vary: Origin\n"},
    /* an IPv6 page, as a browser writes its origin (brackets, the short
     * form); another spelling of the address is another origin */
    {"https://a.example,http://[::1]:8080", "http://[::1]:8080", 0, NULL,
     "Vary: Origin\nAccess-Control-Allow-Origin: http://[::1]:8080\n" EXPOSE},
    {"http://[::1]:8080", "http://[0:0::1]:8080", 0, NULL, "Vary: Origin\n"},
    {"http://[::1]:8080", "http://[::1]:80800", 0, NULL, "Vary: Origin\n"},
    {"https://a.example", "https://a.example", 1, "POST",
     "Vary: Origin\nAccess-Control-Allow-Origin: https://a.example\n"
     "Access-Control-Allow-Methods: POST, OPTIONS\n" PREFLIGHT},
    {"https://a.example", "https://b.example", 1, "POST", "Vary: Origin\n"},
    /* any origin: "*" on every reply, Origin or none, and no Vary */
    {"*", "https://b.example", 0, NULL,
     "Access-Control-Allow-Origin: *\n" EXPOSE},
    {"*", NULL, 0, NULL, "Access-Control-Allow-Origin: *\n" EXPOSE},
    {"*", "null", 0, NULL, "Access-Control-Allow-Origin: *\n" EXPOSE},
    {"*", "https://b.example", 1, "GET, HEAD",
     "Access-Control-Allow-Origin: *\n"
     "Access-Control-Allow-Methods: GET, HEAD, OPTIONS\n" PREFLIGHT},
};

START_TEST(test_headers) {
  attnd_cors_t c;
  char msg[256], out[2048] = "";
  ck_assert_msg(attnd_cors_init(&c, cases[_i].list, msg, sizeof msg) == 0, "%s",
                msg);
  attnd_cors_headers(&c, cases[_i].origin, cases[_i].preflight,
                     cases[_i].methods, collect, out);
  ck_assert_str_eq(out, cases[_i].want);
  attnd_cors_free(&c);
}
END_TEST

static const struct {
  const char *list, *want;
} bad[] = {
    {"https://a.example/", "entry 1 'https://a.example/' is not an origin"},
    {"https://a.example,a.example", "entry 2 'a.example'"},
    {"https://a.example/path", "entry 1"},
    {"https://", "entry 1"},
    {"://a.example", "entry 1"},
    {"https://a .example", "entry 1"},
    {"https://a.example?x", "entry 1"},
};

START_TEST(test_bad_list) {
  attnd_cors_t c;
  char msg[256] = "";
  ck_assert_int_eq(attnd_cors_init(&c, bad[_i].list, msg, sizeof msg), -1);
  ck_assert_msg(strstr(msg, bad[_i].want), "'%s' lacks '%s'", msg,
                bad[_i].want);
  ck_assert_msg(strstr(msg, "cors_allow_origins"), "%s", msg);
  attnd_cors_free(&c);
}
END_TEST

START_TEST(test_allowed) {
  attnd_cors_t c;
  char msg[256];
  ck_assert_int_eq(
      attnd_cors_init(&c, "https://a.example:8443", msg, sizeof msg), 0);
  ck_assert_int_eq(c.enabled, 1);
  ck_assert(attnd_cors_allowed(&c, "https://a.example:8443"));
  ck_assert(!attnd_cors_allowed(&c, "https://a.example"));
  ck_assert(!attnd_cors_allowed(&c, NULL));
  attnd_cors_free(&c);
  ck_assert_int_eq(attnd_cors_init(&c, "", msg, sizeof msg), 0);
  ck_assert_int_eq(c.enabled, 0);
  ck_assert(!attnd_cors_allowed(&c, "https://a.example"));
  attnd_cors_free(&c);
}
END_TEST

/* A request's Origin is searched for among the allowed origins in log(n)
 * comparisons, not one per origin: 4096 of them, each asked for in
 * another case, and some that are not listed, at most 13 comparisons a
 * request (a walk of the list: 4096 for each origin not in it). */
START_TEST(test_allowed_many) {
  enum { N = 4096 };
  static char list[N * 40];
  size_t k = 0;
  for (int i = 0; i < N; i++)
    k += (size_t)snprintf(list + k, sizeof list - k, "%shttps://h%d.example",
                          i ? "," : "", (i * 2897) % N);
  attnd_cors_t c;
  char msg[256], origin[64];
  ck_assert_int_eq(attnd_cors_init(&c, list, msg, sizeof msg), 0);
  for (int i = 0; i < N + 64; i++) {
    snprintf(origin, sizeof origin, "HTTPS://H%d.example", i);
    uint64_t before = attnd__cors_compares;
    ck_assert_int_eq(attnd_cors_allowed(&c, origin), i < N);
    uint64_t n = attnd__cors_compares - before;
    ck_assert_msg(n <= 13, "%s among %d origins: %llu comparisons", origin, N,
                  (unsigned long long)n);
  }
  attnd_cors_free(&c);
}
END_TEST

Suite *test_suite(void) {
  Suite *s = suite_create("cors");
  TCase *tc = tcase_create("cors");
  tcase_add_loop_test(tc, test_headers, 0,
                      (int)(sizeof cases / sizeof cases[0]));
  tcase_add_loop_test(tc, test_bad_list, 0, (int)(sizeof bad / sizeof bad[0]));
  tcase_add_test(tc, test_allowed);
  tcase_add_test(tc, test_allowed_many);
  suite_add_tcase(s, tc);
  return s;
}
