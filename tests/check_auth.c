/* tests/check_auth.c: API keys (server/http/auth.c) without a server.
 *
 * The Authorization header's parsing, from a table; the comparison's
 * result for every byte and bit that may differ; that checking reads
 * every hash of a large set wherever the matching key sits (counted in
 * pages touched, not timed: a comparison that stopped at the first match
 * would read one page of sixteen for the first key); key lists and files with
 * comments, CRLF and bad lines, whose messages name the position and never the
 * key; reloading, which keeps the old keys when the file is bad and keeps
 * nothing of the set it replaced (key sets counted live); threads checking
 * while another reloads (run it under ASan for use-after-free); and
 * that --print-config and the config's messages never show a key. */
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "alloc_fail.h"
#include "config.h"
#include "http/auth.h"
#include "suite.h"

/* ---- the Authorization header -------------------------------------------- */

static const struct {
  const char *header;
  const char *token; /* NULL: not "Bearer <token>" */
} bearer[] = {
    {"Bearer abc", "abc"},
    {"bearer abc", "abc"},
    {"BEARER\tabc", "abc"},
    {"  Bearer   abc  ", "abc"},
    {"Bearer aZ09-._~+/==", "aZ09-._~+/=="},
    {"Bearer", NULL},
    {"Bearer ", NULL},
    {"Bearer    ", NULL},
    {"Bearerabc", NULL},
    {"Basic YWxhZGRpbjpvcGVuc2VzYW1l", NULL},
    {"Token abc", NULL},
    {"Bearer a b", NULL},
    {"Bearer a,b", NULL},
    {"Bearer a\"b", NULL},
    {"Bearer a#b", NULL},
    {"Bearer a\x01", NULL},
    {"Bearer caf\xc3\xa9", NULL},
    {"", NULL},
    {"abc", NULL},
};

START_TEST(test_bearer) {
  const char *tok = NULL;
  size_t len = 0;
  int rc = attnd_auth_bearer(bearer[_i].header, &tok, &len);
  if (bearer[_i].token == NULL) {
    ck_assert_msg(rc == -1, "'%s' parsed", bearer[_i].header);
    return;
  }
  ck_assert_msg(rc == 0, "'%s' refused", bearer[_i].header);
  ck_assert_uint_eq(len, strlen(bearer[_i].token));
  ck_assert(memcmp(tok, bearer[_i].token, len) == 0);
}
END_TEST

START_TEST(test_bearer_limits) {
  const char *tok;
  size_t len;
  ck_assert_int_eq(attnd_auth_bearer(NULL, &tok, &len), -1);
  char h[ATTND_AUTH_MAX_KEY + 16];
  strcpy(h, "Bearer ");
  memset(h + 7, 'k', ATTND_AUTH_MAX_KEY);
  h[7 + ATTND_AUTH_MAX_KEY] = 0;
  ck_assert_int_eq(attnd_auth_bearer(h, &tok, &len), 0);
  ck_assert_uint_eq(len, ATTND_AUTH_MAX_KEY);
  strcat(h, "k"); /* one over */
  ck_assert_int_eq(attnd_auth_bearer(h, &tok, &len), -1);
}
END_TEST

/* ---- the comparison -------------------------------------------------------
 */

START_TEST(test_equal_every_bit) {
  uint8_t a[32], b[32];
  for (int i = 0; i < 32; i++)
    a[i] = b[i] = (uint8_t)(i * 37 + 11);
  ck_assert_int_eq(attnd_auth_equal(a, b, 32), 1);
  ck_assert_int_eq(attnd_auth_equal(a, b, 0), 1);
  for (int i = 0; i < 32; i++)
    for (int bit = 0; bit < 8; bit++) {
      b[i] ^= (uint8_t)(1u << bit);
      ck_assert_msg(attnd_auth_equal(a, b, 32) == 0, "byte %d bit %d", i, bit);
      b[i] ^= (uint8_t)(1u << bit);
    }
  ck_assert_int_eq(attnd_auth_equal(a, b, 32), 1);
}
END_TEST

/* The comparison's reach, counted, not timed: the set's hashes lie in
 * pages that refuse every access, and a SIGSEGV handler opens each page
 * the comparison touches and counts it. A comparison that stopped at its
 * match would open none past the first key's page. */
static char *guard_lo, *guard_hi; /* the counted pages */
static size_t page_size;
static volatile sig_atomic_t pages_touched;

static void on_guard_fault(int sig, siginfo_t *si, void *ctx) {
  (void)ctx;
  char *a = si->si_addr;
  if (a < guard_lo || a >= guard_hi) { /* a real fault: die of it */
    signal(sig, SIG_DFL);
    raise(sig);
    return;
  }
  char *page = guard_lo + (size_t)(a - guard_lo) / page_size * page_size;
  mprotect(page, page_size, PROT_READ | PROT_WRITE); /* the access retries */
  pages_touched++;
}

START_TEST(test_no_early_exit) {
  /* 2048 keys: 64 KiB of hashes, 16 pages of 4 KiB */
  enum { N = 2048 };
  size_t cap = N * 24 + 1;
  char *list = malloc(cap), *p = list;
  for (int i = 0; i < N; i++)
    p += snprintf(p, cap - (size_t)(p - list), "%skey-%06d", i ? "," : "", i);
  attnd_keyset_t *set = NULL;
  char msg[256];
  ck_assert_int_eq(
      attnd_keyset_parse(&set, list, ',', "api_keys", msg, sizeof msg), 0);
  ck_assert_uint_eq(set->n, N);
  page_size = (size_t)sysconf(_SC_PAGESIZE);
  size_t bytes = (N * 32 + page_size - 1) / page_size * page_size;
  guard_lo = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ck_assert(guard_lo != MAP_FAILED);
  guard_hi = guard_lo + bytes;
  memcpy(guard_lo, set->hash, N * 32);
  attnd_keyset_t view = {.n = N, .cap = N, .hash = (uint8_t(*)[32])guard_lo};
  struct sigaction sa = {.sa_sigaction = on_guard_fault,
                         .sa_flags = SA_SIGINFO};
  sigemptyset(&sa.sa_mask);
  ck_assert_int_eq(sigaction(SIGSEGV, &sa, NULL), 0);
  /* The first key, the last, and none: each reads every page. */
  static const char *const keys[3] = {"key-000000", "key-002047", "key-xxxxxx"};
  for (int k = 0; k < 3; k++) {
    ck_assert_int_eq(mprotect(guard_lo, bytes, PROT_NONE), 0);
    pages_touched = 0;
    int found = attnd_keyset_has(&view, keys[k], strlen(keys[k]));
    ck_assert_int_eq(found, k < 2);
    ck_assert_msg((size_t)pages_touched == bytes / page_size,
                  "%s: %d of %zu pages of hashes read: the comparison stops "
                  "where the key is",
                  keys[k], (int)pages_touched, bytes / page_size);
  }
  signal(SIGSEGV, SIG_DFL);
  munmap(guard_lo, bytes);
  attnd_keyset_free(set);
  free(list);
}
END_TEST

/* ---- key lists and files --------------------------------------------------
 */

START_TEST(test_parse_list) {
  attnd_keyset_t *set = NULL;
  char msg[256];
  ck_assert_int_eq(attnd_keyset_parse(&set, " alpha,beta , ,,gamma=,", ',',
                                      "api_keys", msg, sizeof msg),
                   0);
  ck_assert_uint_eq(set->n, 3);
  ck_assert(attnd_keyset_has(set, "alpha", 5));
  ck_assert(attnd_keyset_has(set, "beta", 4));
  ck_assert(attnd_keyset_has(set, "gamma=", 6));
  ck_assert(!attnd_keyset_has(set, "gamma", 5));
  ck_assert(!attnd_keyset_has(set, "alph", 4));
  ck_assert(!attnd_keyset_has(set, "", 0));
  /* appending a file's lines to the same set */
  ck_assert_int_eq(attnd_keyset_parse(&set,
                                      "# keys\r\n\r\n  delta  \r\n#epsilon\n"
                                      "zeta",
                                      '\n', "f", msg, sizeof msg),
                   0);
  ck_assert_uint_eq(set->n, 5);
  ck_assert(attnd_keyset_has(set, "delta", 5));
  ck_assert(attnd_keyset_has(set, "zeta", 4));
  ck_assert(!attnd_keyset_has(set, "#epsilon", 8));
  ck_assert(!attnd_keyset_has(set, "epsilon", 7));
  attnd_keyset_free(set);

  set = NULL; /* empty text: an empty set */
  ck_assert_int_eq(
      attnd_keyset_parse(&set, "", ',', "api_keys", msg, sizeof msg), 0);
  ck_assert_uint_eq(set->n, 0);
  ck_assert(!attnd_keyset_has(set, "alpha", 5));
  attnd_keyset_free(set);
}
END_TEST

/* A large key file is read in a number of allocations that grows with
 * the log of its keys, counted (never timed). Bug: the set grew by one
 * realloc per key, each of which may copy every hash before it: 20000
 * keys took 20001 allocations (and up to 6.4 GB copied). */
START_TEST(test_parse_many) {
  enum { N = 20000 };
  char *text = malloc(N * 8 + 1), *p = text;
  for (int i = 0; i < N; i++)
    p += sprintf(p, "k%d\n", i);
  attnd_keyset_t *set = NULL;
  char msg[256];
  alloc_fail_arm(-1, 0); /* count only */
  ck_assert_int_eq(attnd_keyset_parse(&set, text, '\n', "f", msg, sizeof msg),
                   0);
  long allocs = alloc_fail_count();
  ck_assert_msg(allocs <= 40, "%ld allocations for %d keys", allocs, N);
  ck_assert_uint_eq(set->n, N);
  ck_assert(attnd_keyset_has(set, "k0", 2));
  ck_assert(attnd_keyset_has(set, "k19999", 6));
  ck_assert(!attnd_keyset_has(set, "k20000", 6));
  /* more keys appended to the same set, from the inline list */
  ck_assert_int_eq(
      attnd_keyset_parse(&set, "x1,x2", ',', "api_keys", msg, sizeof msg), 0);
  ck_assert_uint_eq(set->n, N + 2);
  ck_assert(attnd_keyset_has(set, "x2", 2) && attnd_keyset_has(set, "k7", 2));
  attnd_keyset_free(set);
  free(text);
}
END_TEST

static const struct {
  const char *text;
  char sep;
  const char *want; /* in the message */
} bad_keys[] = {
    {"good,bad key-SECRET", ',', "api_keys: key 2 has a character"},
    {"ok\nok2\nsecret\"SECRET", '\n', "f: line 3 has a character"},
    {"SECRET\xc3\xa9", ',', "key 1 has a character outside"},
    {"SECRET\tSECRET", ',', "(position 7)"},
};

START_TEST(test_parse_bad) {
  attnd_keyset_t *set = NULL;
  char msg[256] = "";
  ck_assert_int_eq(
      attnd_keyset_parse(&set, bad_keys[_i].text, bad_keys[_i].sep,
                         bad_keys[_i].sep == ',' ? "api_keys" : "f", msg,
                         sizeof msg),
      -1);
  ck_assert_msg(strstr(msg, bad_keys[_i].want), "'%s' lacks '%s'", msg,
                bad_keys[_i].want);
  ck_assert_msg(strstr(msg, "SECRET") == NULL, "'%s' shows the key", msg);
  attnd_keyset_free(set);
}
END_TEST

START_TEST(test_parse_too_long) {
  char *t = malloc(ATTND_AUTH_MAX_KEY + 8);
  memset(t, 'S', ATTND_AUTH_MAX_KEY + 1);
  t[ATTND_AUTH_MAX_KEY + 1] = 0;
  attnd_keyset_t *set = NULL;
  char msg[256];
  ck_assert_int_eq(
      attnd_keyset_parse(&set, t, ',', "api_keys", msg, sizeof msg), -1);
  ck_assert_msg(strstr(msg, "longer than 4096") && !strstr(msg, "SSSS"), "%s",
                msg);
  attnd_keyset_free(set);
  free(t);
}
END_TEST

/* ---- the server's key state: init, public paths, reload -------------------
 */

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  fclose(f);
}

static char key_file[64];

static void file_setup(void) {
  strcpy(key_file, "/tmp/attnd-keys-XXXXXX");
  int fd = mkstemp(key_file);
  ck_assert_int_ge(fd, 0);
  close(fd);
}

static void file_teardown(void) {
  unlink(key_file);
}

START_TEST(test_off) {
  attnd_auth_t a;
  char msg[256];
  ck_assert_int_eq(attnd_auth_init(&a, "", "", "/healthz", msg, sizeof msg), 0);
  ck_assert_int_eq(a.enabled, 0);
  ck_assert_int_eq(attnd_auth_request(&a, "/v1/attention", NULL),
                   ATTND_AUTH_OK);
  ck_assert_int_eq(attnd_auth_request(&a, "/v1/attention", "junk"),
                   ATTND_AUTH_OK);
  ck_assert_int_eq(attnd_auth_reload(&a, msg, sizeof msg), 0);
  attnd_auth_free(&a);
}
END_TEST

START_TEST(test_request) {
  attnd_auth_t a;
  char msg[256];
  write_file(key_file, "from-file\n");
  ck_assert_msg(attnd_auth_init(&a, "k1,k2", key_file,
                                " /healthz, /readyz ,/metrics,", msg,
                                sizeof msg) == 0,
                "%s", msg);
  ck_assert_uint_eq(attnd_auth_count(&a), 3);
  ck_assert(attnd_auth_is_public(&a, "/healthz"));
  ck_assert(attnd_auth_is_public(&a, "/readyz"));
  ck_assert(attnd_auth_is_public(&a, "/metrics"));
  ck_assert(!attnd_auth_is_public(&a, "/healthz/"));
  ck_assert(!attnd_auth_is_public(&a, "/v1/attention"));
  ck_assert(!attnd_auth_is_public(&a, ""));
  static const struct {
    const char *path, *header;
    attnd_auth_result_t want;
  } cases[] = {
      {"/healthz", NULL, ATTND_AUTH_OK},
      {"/metrics", "Bearer wrong", ATTND_AUTH_OK},
      {"/v1/attention", NULL, ATTND_AUTH_MISSING},
      {"/v1/attention", "Basic azE6", ATTND_AUTH_MALFORMED},
      {"/v1/attention", "Bearer", ATTND_AUTH_MALFORMED},
      {"/v1/attention", "Bearer k3", ATTND_AUTH_INVALID},
      {"/v1/attention", "Bearer k", ATTND_AUTH_INVALID},
      {"/v1/attention", "Bearer k1k1", ATTND_AUTH_INVALID},
      {"/v1/attention", "Bearer k1", ATTND_AUTH_OK},
      {"/v1/attention", "bearer  k2 ", ATTND_AUTH_OK},
      {"/nowhere", "Bearer from-file", ATTND_AUTH_OK},
      {"/nowhere", NULL, ATTND_AUTH_MISSING},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    ck_assert_msg(attnd_auth_request(&a, cases[i].path, cases[i].header) ==
                      cases[i].want,
                  "case %zu", i);
  for (int w = ATTND_AUTH_MISSING; w <= ATTND_AUTH_INVALID; w++)
    ck_assert(strlen(attnd_auth_message(w)) > 10);
  /* RFC 6750 3.1: an error code only for a request by the Bearer scheme */
  static const char *const plain[] = {NULL, "",         "Basic YTpi",
                                      "k1", "Bearerk1", "Token k1"};
  for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++)
    ck_assert_str_eq(attnd_auth_challenge(plain[i]), "Bearer realm=\"attnd\"");
  static const char *const bearer_hdrs[] = {"Bearer", "bearer k", " BEARER\tk",
                                            "Bearer k1 k2"};
  for (size_t i = 0; i < sizeof bearer_hdrs / sizeof bearer_hdrs[0]; i++)
    ck_assert_str_eq(attnd_auth_challenge(bearer_hdrs[i]),
                     "Bearer realm=\"attnd\", error=\"invalid_token\"");
  attnd_auth_free(&a);
}
END_TEST

START_TEST(test_init_errors) {
  attnd_auth_t a;
  char msg[256];
  ck_assert_int_eq(
      attnd_auth_init(&a, "", "/nonexistent/keys", "", msg, sizeof msg), -1);
  ck_assert_msg(strstr(msg, "api_keys_file: cannot read /nonexistent/keys"),
                "%s", msg);
  attnd_auth_free(&a);
  write_file(key_file, "fine\nnot fine SECRET\n");
  ck_assert_int_eq(attnd_auth_init(&a, "", key_file, "", msg, sizeof msg), -1);
  ck_assert_msg(strstr(msg, key_file) && strstr(msg, "line 2") &&
                    !strstr(msg, "SECRET"),
                "%s", msg);
  attnd_auth_free(&a);
  /* a file that cannot be read whole, or holds a NUL byte, refuses to
   * start: the keys past a NUL would be dropped without a word, and a
   * file cut at the limit would end with a key cut short */
  FILE *f = fopen(key_file, "w");
  ck_assert_ptr_nonnull(f);
  fputs("good-key\n", f);
  for (int i = 0; i < ATTND_AUTH_MAX_FILE / 16; i++)
    fputs("k-0123456789abc\n", f);
  fclose(f);
  ck_assert_int_eq(attnd_auth_init(&a, "", key_file, "", msg, sizeof msg), -1);
  ck_assert_msg(strstr(msg, "larger than 1 MiB"), "%s", msg);
  attnd_auth_free(&a);
  f = fopen(key_file, "w");
  ck_assert_ptr_nonnull(f);
  fwrite("first\n\0second\n", 1, 14, f);
  fclose(f);
  ck_assert_int_eq(attnd_auth_init(&a, "", key_file, "", msg, sizeof msg), -1);
  ck_assert_msg(strstr(msg, "holds a NUL byte"), "%s", msg);
  attnd_auth_free(&a);
  ck_assert_int_eq(attnd_auth_init(&a, "", "/tmp", "", msg, sizeof msg), -1);
  ck_assert_msg(strstr(msg, "api_keys_file: cannot read /tmp: read error"),
                "%s", msg);
  attnd_auth_free(&a);
  /* an empty file: keys are on, and none is valid (fail closed) */
  write_file(key_file, "# no keys yet\n");
  ck_assert_int_eq(attnd_auth_init(&a, "", key_file, "", msg, sizeof msg), 0);
  ck_assert_int_eq(a.enabled, 1);
  ck_assert_uint_eq(attnd_auth_count(&a), 0);
  ck_assert_int_eq(attnd_auth_request(&a, "/v1/info", "Bearer x"),
                   ATTND_AUTH_INVALID);
  attnd_auth_free(&a);
}
END_TEST

/* The key sets not yet freed (a function: Check's message shows its
 * expression, and atomic_load's expansion is long). */
static long keysets_live(void) {
  return atomic_load(&attnd__keysets_live);
}

START_TEST(test_reload) {
  attnd_auth_t a;
  char msg[256];
  long live = keysets_live();
  write_file(key_file, "old-1\nold-2\n");
  ck_assert_int_eq(attnd_auth_init(&a, "inline", key_file, "", msg, sizeof msg),
                   0);
  ck_assert_int_eq(attnd_auth_check(&a, "Bearer old-1"), ATTND_AUTH_OK);
  ck_assert_int_eq(attnd_auth_check(&a, "Bearer new-1"), ATTND_AUTH_INVALID);

  write_file(key_file, "new-1\n");
  ck_assert_int_eq(attnd_auth_reload(&a, msg, sizeof msg), 2);
  ck_assert_int_eq(attnd_auth_check(&a, "Bearer old-1"), ATTND_AUTH_INVALID);
  ck_assert_int_eq(attnd_auth_check(&a, "Bearer old-2"), ATTND_AUTH_INVALID);
  ck_assert_int_eq(attnd_auth_check(&a, "Bearer new-1"), ATTND_AUTH_OK);
  ck_assert_int_eq(attnd_auth_check(&a, "Bearer inline"), ATTND_AUTH_OK);

  /* a bad file, then a missing one: the keys in force stay */
  write_file(key_file, "new-2\nbad key\n");
  ck_assert_int_eq(attnd_auth_reload(&a, msg, sizeof msg), -1);
  ck_assert_msg(strstr(msg, "line 2"), "%s", msg);
  ck_assert_int_eq(attnd_auth_check(&a, "Bearer new-1"), ATTND_AUTH_OK);
  ck_assert_int_eq(attnd_auth_check(&a, "Bearer new-2"), ATTND_AUTH_INVALID);
  unlink(key_file);
  ck_assert_int_eq(attnd_auth_reload(&a, msg, sizeof msg), -1);
  ck_assert_msg(strstr(msg, "cannot read"), "%s", msg);
  ck_assert_int_eq(attnd_auth_check(&a, "Bearer new-1"), ATTND_AUTH_OK);
  ck_assert_uint_eq(attnd_auth_count(&a), 2);
  /* one set in force, none kept of the reloads or the failed ones */
  ck_assert_int_eq(keysets_live(), live + 1);
  attnd_auth_free(&a);
  ck_assert_int_eq(keysets_live(), live);
}
END_TEST

typedef struct checker {
  attnd_auth_t *a;
  atomic_int *stop;
  long checks, wrong;
} checker_t;

static void *check_loop(void *arg) {
  checker_t *c = arg;
  while (!atomic_load(c->stop)) {
    /* "stable" is in every version of the file; "gone" in none */
    c->wrong += attnd_auth_check(c->a, "Bearer stable") != ATTND_AUTH_OK;
    c->wrong += attnd_auth_check(c->a, "Bearer gone") != ATTND_AUTH_INVALID;
    c->checks += 2;
  }
  return NULL;
}

START_TEST(test_reload_while_checking) {
  attnd_auth_t a;
  char msg[256];
  long live = keysets_live();
  write_file(key_file, "stable\n");
  ck_assert_int_eq(attnd_auth_init(&a, "", key_file, "", msg, sizeof msg), 0);
  atomic_int stop = 0;
  checker_t c[4];
  pthread_t t[4];
  for (int i = 0; i < 4; i++) {
    c[i] = (checker_t){.a = &a, .stop = &stop};
    pthread_create(&t[i], NULL, check_loop, &c[i]);
  }
  for (int i = 0; i < 300; i++) {
    char text[128];
    snprintf(text, sizeof text, "other-%d\nstable\nmore-%d\n", i, i);
    write_file(key_file, text);
    ck_assert_int_eq(attnd_auth_reload(&a, msg, sizeof msg), 3);
    /* the replaced set is freed while the checkers run, not kept */
    ck_assert_int_eq(keysets_live(), live + 1);
  }
  atomic_store(&stop, 1);
  long checks = 0, wrong = 0;
  for (int i = 0; i < 4; i++) {
    pthread_join(t[i], NULL);
    checks += c[i].checks;
    wrong += c[i].wrong;
  }
  ck_assert_int_gt(checks, 0);
  ck_assert_msg(wrong == 0, "%ld of %ld checks were wrong", wrong, checks);
  attnd_auth_free(&a);
  ck_assert_int_eq(keysets_live(), live);
}
END_TEST

/* ---- the config never shows a key -----------------------------------------
 */

START_TEST(test_config_redacts) {
  attnd_config_t c;
  attnd_config_load_t how;
  char msg[512];
  char *argv[] = {"attnd", "--api-keys", "SECRET-1,SECRET-2", NULL};
  char *envp[] = {NULL};
  ck_assert_int_eq(
      attnd_config_load(&c, &how, 3, argv, envp, 2, msg, sizeof msg), 0);
  char out[16384] = "";
  FILE *f = fmemopen(out, sizeof out, "w");
  attnd_config_print(&c, &how, f);
  fclose(f);
  ck_assert_msg(strstr(out, "\n# api_keys: 2 keys, set by flag --api-keys, "
                            "not echoed. Give them again: ATTND_API_KEYS, "
                            "--api-keys, or one a line in api_keys_file.\n"
                            "# Without them, this file needs no key.\n"),
                "%s", out);
  ck_assert_msg(strstr(out, "SECRET") == NULL, "%s", out);
  /* no line sets api_keys (check_config reads the text back) */
  ck_assert_msg(strstr(out, "\napi_keys =") == NULL, "%s", out);
  ck_assert(strstr(
      out, "\npublic_paths = "
           "\"/healthz,/readyz,/metrics,/v2/health/live,/v2/health/ready\"\n"));

  /* a value too long is refused without being shown */
  size_t n = sizeof c.api_keys + 10;
  char *big = malloc(n + 1);
  memset(big, 'S', n);
  big[n] = 0;
  char *envp2[] = {NULL, NULL};
  char *var = malloc(n + 32);
  snprintf(var, n + 32, "ATTND_API_KEYS=%s", big);
  envp2[0] = var;
  char *argv2[] = {"attnd", NULL};
  ck_assert_int_eq(
      attnd_config_load(&c, &how, 1, argv2, envp2, 2, msg, sizeof msg), -1);
  ck_assert_msg(strstr(msg, "api_keys: the value is too long") &&
                    !strstr(msg, "SSSS"),
                "%s", msg);
  free(var);
  free(big);
}
END_TEST

Suite *test_suite(void) {
  Suite *s = suite_create("auth");
  TCase *tc = tcase_create("parse");
  tcase_add_loop_test(tc, test_bearer, 0,
                      (int)(sizeof bearer / sizeof bearer[0]));
  tcase_add_test(tc, test_bearer_limits);
  tcase_add_test(tc, test_equal_every_bit);
  tcase_add_test(tc, test_parse_list);
  tcase_add_test(tc, test_parse_many);
  tcase_add_loop_test(tc, test_parse_bad, 0,
                      (int)(sizeof bad_keys / sizeof bad_keys[0]));
  tcase_add_test(tc, test_parse_too_long);
  tcase_add_test(tc, test_config_redacts);
  suite_add_tcase(s, tc);

  tc = tcase_create("reach");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_no_early_exit);
  suite_add_tcase(s, tc);

  tc = tcase_create("keys");
  tcase_set_timeout(tc, 60);
  tcase_add_checked_fixture(tc, file_setup, file_teardown);
  tcase_add_test(tc, test_off);
  tcase_add_test(tc, test_request);
  tcase_add_test(tc, test_init_errors);
  tcase_add_test(tc, test_reload);
  tcase_add_test(tc, test_reload_while_checking);
  suite_add_tcase(s, tc);
  return s;
}
