/* tests/check_security.c: API keys, TLS and CORS on the real attnd.
 *
 * - keys: a missing, malformed or wrong key gets 401 with WWW-Authenticate
 *   and a JSON error, counted under attnd_rejections_total{reason=
 *   "unauthorized"}; the public paths need none; every configured key
 *   (flag and file) works; SIGHUP re-reads api_keys_file, and a bad file
 *   leaves the keys in force; 200 reloads of 1100 keys while requests
 *   flow refuse no good key and leave the heap in use where it was (a
 *   reload gives back the set it replaced); no key shows in
 *   --print-config, the access log, the server's own log or an error body;
 * - TLS: a CA and a server certificate for 127.0.0.1 are made with
 *   GnuTLS (test_certs.h) when the suite starts; a client
 *   trusting the CA gets its reply, one that does not is refused by its
 *   own check, plain HTTP to the TLS port is closed at once, and the
 *   server goes on; files that cannot be read or do not match stop the
 *   start with a message naming them; SIGHUP renews the certificate (new
 *   connections get it, one kept alive keeps the old one, a bad file
 *   keeps the pair in force), and reloads do not pile up pairs or heap;
 *   /metrics and /v1/info show the serving certificate's expiry (and
 *   /v1/info its serial) and /metrics the renewals refused and when the
 *   last succeeded, and with plain HTTP neither shows any of it; the
 *   keys' reloads are counted the same way, under their own label;
 * - CORS: a preflight gets 204 without a key, with the methods and the
 *   headers allowed; replies to an allowed origin name it and expose
 *   Server-Timing and X-Request-Id; with no origins configured no CORS
 *   header is sent and OPTIONS gets 405. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "server_harness.h"
#include "suite.h"
#include "test_certs.h"
#include "testutil.h"

#define KEY1 "k1-Zq7VtR2mP9xW"
#define KEY2 "k2-Hn4LcY8sB1dE"
#define KEY3 "k3-file-Ua6GjK3o"
#define KEY4 "k4-file-Tf5NwQ0e"
#define WRONG "wrong-Mb2XyS7pLk"

static const char body[] = "{\"query\":[[1,2]],\"num_heads\":1}";

static char dir[64]; /* the suite's files: certificates, keys, logs */

static void path_in_dir(char *out, size_t n, const char *name) {
  snprintf(out, n, "%s/%s", dir, name);
}

/* ---- requests ------------------------------------------------------------ */

typedef struct call {
  const char *method, *path;
  const char *key;          /* "Authorization: Bearer <key>", or none */
  const char *authz;        /* a whole Authorization value, or none */
  const char *origin;       /* Origin, or none */
  const char *cafile;       /* HTTPS */
  const char *const *extra; /* more header lines, NULL-ended */
} call_t;

static sh_resp_t do_call(int port, const call_t *c) {
  char a[256] = "", o[256] = "";
  const char *h[16];
  int n = 0;
  if (c->key)
    snprintf(a, sizeof a, "Authorization: Bearer %s", c->key);
  else if (c->authz)
    snprintf(a, sizeof a, "Authorization: %s", c->authz);
  if (a[0])
    h[n++] = a;
  if (c->origin) {
    snprintf(o, sizeof o, "Origin: %s", c->origin);
    h[n++] = o;
  }
  for (int i = 0; c->extra && c->extra[i] && n < 15; i++)
    h[n++] = c->extra[i];
  h[n] = NULL;
  int post = c->method && strcmp(c->method, "POST") == 0;
  sh_req_t q = {.method = c->method ? c->method : "GET",
                .path = c->path,
                .content_type = post ? "application/json" : NULL,
                .body = post ? body : NULL,
                .len = post ? strlen(body) : 0,
                .headers = h,
                .timeout_ms = 10000,
                .cafile = c->cafile};
  sh_client_t cl;
  sh_client_init(&cl, port);
  sh_resp_t r;
  sh_http(&cl, &q, &r);
  sh_client_free(&cl);
  return r;
}

#define CALL(port, ...) do_call(port, &(call_t){__VA_ARGS__})

/* Asserts that GET `path` with `key` (NULL: none) gets `want`. */
static void assert_get(int port, const char *path, const char *key, long want) {
  sh_resp_t r = CALL(port, .path = path, .key = key);
  ck_assert_msg(r.status == want, "GET %s with key %s: %ld, expected %ld", path,
                key ? key : "(none)", r.status, want);
  sh_resp_free(&r);
}

static int has_header(const sh_resp_t *r, const char *name) {
  char v[512];
  return sh_header(r, name, v, sizeof v) != NULL;
}

static void assert_header(const sh_resp_t *r, const char *name,
                          const char *want) {
  char v[512];
  ck_assert_msg(sh_header(r, name, v, sizeof v), "no %s header in:\n%s", name,
                r->head);
  ck_assert_msg(strcmp(v, want) == 0, "%s is '%s', expected '%s'", name, v,
                want);
}

static void assert_header_has(const sh_resp_t *r, const char *name,
                              const char *part) {
  char v[512];
  ck_assert_msg(sh_header(r, name, v, sizeof v), "no %s header in:\n%s", name,
                r->head);
  ck_assert_msg(strstr(v, part), "%s is '%s', lacks '%s'", name, v, part);
}

static void assert_no_keys(const char *text, const char *where) {
  static const char *const keys[] = {KEY1, KEY2, KEY3, KEY4, WRONG};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
    ck_assert_msg(strstr(text, keys[i]) == NULL, "%s shows key %s", where,
                  keys[i]);
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  ck_assert_msg(f != NULL, "cannot write %s", path);
  fputs(text, f);
  fclose(f);
}

/* ---- API keys ------------------------------------------------------------ */

static const char *const unauthorized =
    "attnd_rejections_total{reason=\"unauthorized\"}";

START_TEST(test_keys) {
  char keys[128], log[128], flag[160];
  path_in_dir(keys, sizeof keys, "keys-a");
  path_in_dir(log, sizeof log, "access-a.log");
  write_file(keys, "# the file's keys\n" KEY3 "\n");
  snprintf(flag, sizeof flag, "--api-keys=%s,%s", KEY1, KEY2);
  const char *args[] = {flag, "--api-keys-file", keys, "--access-log", log,
                        NULL};
  sh_server_t s;
  ck_assert_msg(sh_server_start(&s, args) == 0, "%s", s.log);
  ck_assert_msg(strstr(s.log, "\"api_keys\":3"), "%s", s.log);
  int p = s.port, fails = 0;

  /* no key, a malformed header, a wrong key: 401 */
  sh_resp_t r = CALL(p, .path = "/v1/info");
  sh_assert_error(&r, 401, "unauthorized", NULL, "Authorization: Bearer", NULL);
  assert_header(&r, "WWW-Authenticate", "Bearer realm=\"attnd\"");
  /* every body's type is the one given, never sniffed: errors may echo
   * the client's text */
  assert_header(&r, "X-Content-Type-Options", "nosniff");
  sh_resp_free(&r), fails++;
  /* RFC 6750 3.1: error="invalid_token" only for a Bearer token; a
   * request by another scheme, or none, lacks authentication information
   * for this scheme and gets the challenge alone */
  static const struct {
    const char *authz;
    int bearer;
  } bad[] = {{"Basic " KEY1, 0},        {KEY1, 0},
             {"Bearerish " KEY1, 0},    {"Bearer", 1},
             {"bearer\t" KEY1 "\"", 1}, {"Bearer " KEY1 " " KEY2, 1}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    r = CALL(p, .path = "/v1/info", .authz = bad[i].authz);
    sh_assert_error(&r, 401, "unauthorized", NULL, "not 'Bearer <key>'", NULL);
    assert_header(&r, "WWW-Authenticate",
                  bad[i].bearer
                      ? "Bearer realm=\"attnd\", error=\"invalid_token\""
                      : "Bearer realm=\"attnd\"");
    assert_no_keys(r.body, "a 401 body");
    sh_resp_free(&r), fails++;
  }
  const char *wrong[] = {WRONG, KEY1 "x", "k1", KEY4};
  for (size_t i = 0; i < sizeof wrong / sizeof wrong[0]; i++) {
    r = CALL(p, .method = "POST", .path = "/v1/attention", .key = wrong[i]);
    sh_assert_error(&r, 401, "unauthorized", NULL, "not valid", NULL);
    assert_header_has(&r, "WWW-Authenticate", "Bearer");
    assert_no_keys(r.body, "a 401 body");
    sh_resp_free(&r), fails++;
  }
  /* an unknown path is 401 too: no key, nothing learnt */
  r = CALL(p, .path = "/nowhere");
  sh_assert_error(&r, 401, "unauthorized", NULL, NULL);
  sh_resp_free(&r), fails++;

  /* every key works, on every endpoint */
  static const char *const good[] = {KEY1, KEY2, KEY3};
  for (size_t i = 0; i < 3; i++) {
    r = CALL(p, .method = "POST", .path = "/v1/attention", .key = good[i]);
    ck_assert_msg(r.status == 200, "key %zu: %ld %s", i, r.status, r.body);
    sh_resp_free(&r);
    assert_get(p, "/v1/info", good[i], 200);
  }
  r = CALL(p, .path = "/nowhere", .key = KEY1);
  sh_assert_error(&r, 404, "not_found", NULL, NULL);
  sh_resp_free(&r);

  /* the public paths need none, and ignore a wrong one */
  static const char *const pub[] = {"/healthz", "/readyz", "/metrics"};
  for (size_t i = 0; i < 3; i++) {
    assert_get(p, pub[i], NULL, 200);
    assert_get(p, pub[i], WRONG, 200);
  }
  ck_assert_int_eq((int)sh_metric(p, unauthorized), fails);

  ck_assert_int_eq(sh_server_stop(&s, 15.0), 0);
  sh_server_read_log(&s);
  assert_no_keys(s.log, "the server's log");
  char *text = tu_read_file_or_fail(log, NULL);
  ck_assert_msg(strstr(text, "\"status\":401"), "%s", text);
  assert_no_keys(text, "the access log");
  free(text);
}
END_TEST

START_TEST(test_public_paths) {
  const char *args[] = {"--api-keys", KEY1, "--public-paths", "/v1/info", NULL};
  sh_server_t s;
  ck_assert_msg(sh_server_start(&s, args) == 0, "%s", s.log);
  assert_get(s.port, "/v1/info", NULL, 200);
  assert_get(s.port, "/healthz", NULL, 401); /* no longer public */
  ck_assert_int_eq(sh_server_stop(&s, 15.0), 0);
}
END_TEST

/* /metrics' reloads of api_keys_file, refused `failures` times; returns
 * when the last that succeeded ended (s since the epoch). Plain HTTP
 * without layers: what is not configured has no series. */
static double keys_reloads(int port, int failures) {
  sh_resp_t r = CALL(port, .path = "/metrics", .key = KEY1);
  ck_assert_msg(r.status == 200, "%ld %s", r.status, r.error);
  double n =
      sh_metric_in(r.body, "attnd_reload_failures_total{what=\"api_keys\"}");
  ck_assert_msg(n == failures, "%g keys reloads refused, not %d", n, failures);
  double at = sh_metric_in(
      r.body, "attnd_last_reload_success_timestamp_seconds{what=\"api_keys\"}");
  ck_assert_msg(strstr(r.body, "what=\"tls\"") == NULL &&
                    strstr(r.body, "what=\"layers\"") == NULL,
                "a reload series for what is not configured:\n%s", r.body);
  sh_resp_free(&r);
  return at;
}

START_TEST(test_sighup_reload) {
  char keys[128];
  path_in_dir(keys, sizeof keys, "keys-b");
  write_file(keys, KEY3 "\n");
  const char *args[] = {"--api-keys", KEY1, "--api-keys-file", keys, NULL};
  sh_server_t s;
  ck_assert_msg(sh_server_start(&s, args) == 0, "%s", s.log);
  int p = s.port;
  assert_get(p, "/v1/info", KEY3, 200);
  assert_get(p, "/v1/info", KEY4, 401);

  /* KEY3 out, KEY4 in */
  write_file(keys, KEY4 "\n\n# rotated\n");
  double hup = sh_wall_now();
  ck_assert_int_eq(kill(s.pid, SIGHUP), 0);
  sh_wait_log(&s, "{\"event\":\"keys_reloaded\",\"keys\":2}");
  assert_get(p, "/v1/info", KEY3, 401);
  assert_get(p, "/v1/info", KEY4, 200);
  assert_get(p, "/v1/info", KEY1, 200);
  double loaded = keys_reloads(p, 0);
  ck_assert_msg(loaded >= hup - 0.001,
                "the keys reloaded at %.3f, the SIGHUP sent at %.3f", loaded,
                hup);

  /* a bad file: refused, the keys in force stay, and the log says why
   * without the key */
  write_file(keys, KEY3 "\n" KEY2 " extra\n");
  ck_assert_int_eq(kill(s.pid, SIGHUP), 0);
  sh_wait_log(&s, "keys_reload_failed");
  ck_assert_msg(strstr(s.log, "line 2"), "%s", s.log);
  assert_get(p, "/v1/info", KEY4, 200);
  assert_get(p, "/v1/info", KEY3, 401);
  ck_assert_double_eq(keys_reloads(p, 1), loaded);

  /* plain HTTP, after two SIGHUPs: no certificate shown, none refused */
  sh_resp_t r = CALL(p, .path = "/metrics", .key = KEY4);
  ck_assert_msg(r.status == 200 && strstr(r.body, "attnd_tls_") == NULL,
                "%ld %s", r.status, r.body);
  sh_resp_free(&r);
  r = CALL(p, .path = "/v1/info", .key = KEY4);
  json_t *info = json_loads(r.body, 0, NULL);
  ck_assert_msg(r.status == 200 && json_object_size(info) > 0 &&
                    json_object_get(info, "tls") == NULL,
                "%ld %s", r.status, r.body);
  json_decref(info);
  sh_resp_free(&r);

  ck_assert_int_eq(sh_server_stop(&s, 15.0), 0); /* SIGHUP did not stop it */
  sh_server_read_log(&s);
  assert_no_keys(s.log, "the server's log");
}
END_TEST

/* A client that asks with a key that every version of the file holds, and
 * with one that none does, until told to stop. */
typedef struct asker {
  int port;
  atomic_int *stop;
  long asked, wrong; /* wrong: not 200 for the good key, not 401 for the bad */
  long last_status;  /* the last wrong one's */
} asker_t;

static void *ask_loop(void *arg) {
  asker_t *a = arg;
  sh_client_t c;
  sh_client_init(&c, a->port);
  const char *good[] = {"Authorization: Bearer " KEY3, NULL};
  const char *bad[] = {"Authorization: Bearer " WRONG, NULL};
  while (!atomic_load(a->stop)) {
    for (int k = 0; k < 2; k++) {
      sh_req_t q = {.method = "GET",
                    .path = "/v1/info",
                    .headers = k ? bad : good,
                    .timeout_ms = 10000};
      sh_resp_t r;
      sh_http(&c, &q, &r);
      if (r.status != (k ? 401 : 200))
        a->wrong++, a->last_status = r.status;
      a->asked++;
      sh_resp_free(&r);
    }
  }
  sh_client_free(&c);
  return NULL;
}

/* Writes KEY3 and `n` other keys, named after `round`, to `path`. */
static void write_many_keys(const char *path, int round, int n) {
  FILE *f = fopen(path, "w");
  ck_assert_msg(f != NULL, "cannot write %s", path);
  fputs(KEY3 "\n", f);
  for (int i = 0; i < n; i++)
    fprintf(f, "filler-%d-%05d-Xy3Lq8Wm\n", round, i);
  fclose(f);
}

/* The heap gauge read before `rounds` reloads and after: grown by less
 * than `margin` bytes. */
static void assert_heap_kept(double before, double after, double margin,
                             int rounds) {
  ck_assert_msg(before >= 0 && after >= 0, "no heap gauge");
  ck_assert_msg(after - before < margin,
                "the heap in use grew by %.0f bytes over %d reloads "
                "(%.0f to %.0f)",
                after - before, rounds, before, after);
}

/* SIGHUP RELOAD_ROUNDS times, the file growing by a key each time (so that
 * each reload's log line is its own), while two clients ask with a good
 * key and a wrong one. What the heap holds after the rounds is what it
 * held before them, within RELOAD_HEAP_MARGIN: a reload that kept the set
 * it replaced (32 bytes a key, 2048 keys' room here) would add 64 KiB a
 * round, 12.8 MB in all. Under a sanitizer the gauge reads 0 and only the
 * replies are checked (which ASan then watches for a use after free). */
#define RELOAD_ROUNDS 200
#define RELOAD_KEYS 1100
#define RELOAD_HEAP_MARGIN (2 << 20)

START_TEST(test_sighup_reload_bounded) {
  char keys[128];
  path_in_dir(keys, sizeof keys, "keys-many");
  write_many_keys(keys, 0, RELOAD_KEYS);
  const char *args[] = {"--api-keys-file", keys, NULL};
  sh_server_t s;
  ck_assert_msg(sh_server_start(&s, args) == 0, "%s", s.log);
  atomic_int stop = 0;
  asker_t a[2];
  pthread_t t[2];
  for (int i = 0; i < 2; i++) {
    a[i] = (asker_t){.port = s.port, .stop = &stop};
    ck_assert_int_eq(pthread_create(&t[i], NULL, ask_loop, &a[i]), 0);
  }
  const char *heap = "attnd_heap_bytes{state=\"in_use\"}";
  double before = 0;
  for (int round = 1; round <= RELOAD_ROUNDS + 5; round++) {
    if (round == 6) /* the pools that requests and reloads use filled */
      before = sh_metric(s.port, heap);
    write_many_keys(keys, round, RELOAD_KEYS + round);
    ck_assert_int_eq(kill(s.pid, SIGHUP), 0);
    char event[64];
    snprintf(event, sizeof event, "{\"event\":\"keys_reloaded\",\"keys\":%d}",
             RELOAD_KEYS + round + 1);
    sh_wait_log(&s, event);
  }
  double after = sh_metric(s.port, heap);
  atomic_store(&stop, 1);
  long asked = 0;
  for (int i = 0; i < 2; i++) {
    pthread_join(t[i], NULL);
    asked += a[i].asked;
    ck_assert_msg(a[i].wrong == 0, "%ld of %ld replies wrong, the last %ld",
                  a[i].wrong, a[i].asked, a[i].last_status);
  }
  ck_assert_int_gt(asked, 0);
  assert_heap_kept(before, after, RELOAD_HEAP_MARGIN, RELOAD_ROUNDS);
  ck_assert_int_eq(sh_server_stop(&s, 15.0), 0);
  unlink(keys);
}
END_TEST

/* The thread that feeds a FIFO standing for api_keys_file: its opening
 * holds attnd in its start (as layers that take seconds to load would),
 * and the test sends SIGHUP there. */
typedef struct fifo_feed {
  const char *path;
  sh_server_t *s;
  int sent; /* SIGHUP sent */
} fifo_feed_t;

/* Opens the FIFO for writing as soon as attnd opens it to read, waiting at
 * most 10 s; -1 if it never does. */
static int fifo_open(const char *path) {
  for (double t0 = sh_now(); sh_now() - t0 < 10.0; usleep(5000)) {
    int fd = open(path, O_WRONLY | O_NONBLOCK);
    if (fd >= 0 || errno != ENXIO)
      return fd;
  }
  return -1;
}

/* Writes `text` to the FIFO once attnd reads it. Returns whether it did
 * (EPIPE: attnd is gone). */
static int fifo_write(const char *path, const char *text) {
  int fd = fifo_open(path);
  int ok = fd >= 0 && write(fd, text, strlen(text)) == (ssize_t)strlen(text);
  if (fd >= 0)
    close(fd);
  return ok;
}

static void *fifo_feed(void *arg) {
  fifo_feed_t *f = arg;
  int fd = fifo_open(f->path); /* attnd is reading the keys in its start */
  if (fd < 0)
    return NULL;
  /* attnd may open the FIFO before its launcher has stored its pid (the
   * launcher stores it after fork returns, the child runs meanwhile) */
  pid_t pid = 0;
  for (double t0 = sh_now(); sh_now() - t0 < 10.0; usleep(1000))
    if ((pid = __atomic_load_n(&f->s->pid, __ATOMIC_ACQUIRE)) > 0)
      break;
  f->sent = pid > 0 && kill(pid, SIGHUP) == 0;
  usleep(200000); /* the signal lands while attnd waits for the file */
  if (write(fd, KEY3 "\n", strlen(KEY3) + 1) < 0) /* EPIPE: it died */
    f->sent = -1;
  close(fd);
  return NULL;
}

START_TEST(test_sighup_at_start) {
  char keys[128];
  path_in_dir(keys, sizeof keys, "keys-fifo");
  unlink(keys);
  ck_assert_int_eq(mkfifo(keys, 0600), 0);
  const char *args[] = {"--api-keys-file", keys, NULL};
  sh_server_t s = {0};
  fifo_feed_t f = {.path = keys, .s = &s};
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, fifo_feed, &f), 0);
  int rc = sh_server_start(&s, args);
  pthread_join(t, NULL);
  ck_assert_msg(f.sent, "no SIGHUP was sent during the start");
  ck_assert_msg(rc == 0, "a SIGHUP during the start ended attnd: %s", s.log);
  /* the reload that the held SIGHUP asked for reads the FIFO again */
  ck_assert_msg(fifo_write(keys, KEY4 "\n"),
                "the SIGHUP held during the start reloaded nothing");
  sh_wait_log(&s, "{\"event\":\"keys_reloaded\",\"keys\":1}");
  assert_get(s.port, "/v1/info", KEY3, 401);
  assert_get(s.port, "/v1/info", KEY4, 200);
  ck_assert_int_eq(sh_server_stop(&s, 15.0), 0);
  unlink(keys);
}
END_TEST

START_TEST(test_print_config) {
  const char *bin = getenv("ATTND_BIN") ? getenv("ATTND_BIN") : "build/attnd";
  char cmd[512];
  snprintf(cmd, sizeof cmd,
           "ATTND_API_KEYS=%s,%s %s --print-config --api-keys-file /k 2>&1",
           KEY1, KEY2, bin);
  FILE *f = popen(cmd, "r");
  ck_assert_ptr_nonnull(f);
  static char out[65536];
  size_t n = fread(out, 1, sizeof out - 1, f);
  out[n] = 0;
  ck_assert_int_eq(pclose(f), 0);
  ck_assert_msg(strstr(out, "\n# api_keys: 2 keys, set by ATTND_API_KEYS, not "
                            "echoed."),
                "%s", out);
  ck_assert_msg(strstr(out, "\n# Without them, this file accepts only the "
                            "keys of api_keys_file.\n"),
                "%s", out);
  ck_assert_msg(strstr(out, "\napi_keys_file = \"/k\"\n"), "%s", out);
  assert_no_keys(out, "--print-config");

  /* written to a file, it starts a server (one that needs no key: the
   * keys are not in it), and read back it prints the same values, with
   * api_keys = "" where the comment was */
  char conf[] = "/tmp/check_security_conf_XXXXXX";
  int fd = mkstemp(conf);
  ck_assert_int_ge(fd, 0);
  close(fd);
  snprintf(cmd, sizeof cmd, "ATTND_API_KEYS=%s,%s %s --print-config > %s", KEY1,
           KEY2, bin, conf);
  ck_assert_int_eq(system(cmd), 0);
  const char *args[] = {"--config", conf, NULL};
  sh_server_t s;
  ck_assert_msg(sh_server_start(&s, args) == 0, "%s", s.log);
  assert_get(s.port, "/v1/info", NULL, 200);
  ck_assert_int_eq(sh_server_stop(&s, 15.0), 0);
  static char again[65536];
  snprintf(cmd, sizeof cmd,
           "ATTND_API_KEYS=%s,%s %s --print-config | grep -v '^#' && "
           "%s --config %s --print-config | grep -v '^#\\|^api_keys ='",
           KEY1, KEY2, bin, bin, conf);
  f = popen(cmd, "r");
  n = fread(again, 1, sizeof again - 1, f);
  again[n] = 0;
  ck_assert_int_eq(pclose(f), 0);
  size_t half = n / 2;
  ck_assert_msg(n % 2 == 0 && memcmp(again, again + half, half) == 0,
                "read back to other values:\n%s", again);
  unlink(conf);

  /* a bad key stops the start, naming its place, not the key */
  snprintf(cmd, sizeof cmd, "%s --port 0 --api-keys '%s,%s\"' 2>&1", bin, KEY1,
           KEY2);
  f = popen(cmd, "r");
  n = fread(out, 1, sizeof out - 1, f);
  out[n] = 0;
  ck_assert_int_ne(pclose(f), 0);
  ck_assert_msg(strstr(out, "api_keys: key 2 has a character"), "%s", out);
  assert_no_keys(out, "the start's error");
}
END_TEST

/* ---- TLS ----------------------------------------------------------------- */

/* The files test_certs.h makes in dir: the CA, the server's certificate
 * and key, and another CA. */
static char ca_pem[128], cert_pem[128], key_pem[128], other_ca_pem[128];

/* Sends a plain HTTP request to `port` and waits up to 5 s for the server
 * to close. Returns the seconds it took (-1: not closed), with what came
 * back in got. */
static double plain_to_tls(int port, char *got, size_t cap) {
  int fd = sh_connect(port);
  ck_assert_int_ge(fd, 0);
  static const char q[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
  ck_assert_int_eq(sh_send_all(fd, q, sizeof q - 1), 0);
  double t0 = sh_now();
  size_t len = 0;
  got[0] = 0;
  while (sh_now() - t0 < 5.0) {
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    if (poll(&pf, 1, 100) <= 0)
      continue;
    ssize_t n = read(fd, got + len, cap - 1 - len);
    if (n <= 0) { /* closed, or reset */
      close(fd);
      return sh_now() - t0;
    }
    len += (size_t)n;
    got[len] = 0;
  }
  close(fd);
  return -1;
}

/* A client's TLS connection (GnuTLS); the server's certificate is not
 * checked, but read. */
typedef struct tls_conn {
  int fd;
  gnutls_session_t ses;
  gnutls_certificate_credentials_t cred;
} tls_conn_t;

/* Connects to `port` and shakes hands offering only what the GnuTLS
 * `priority` allows: 0, or GnuTLS's error. tls_close either way. */
static int tls_open(tls_conn_t *t, int port, const char *priority) {
  t->fd = sh_connect(port);
  ck_assert_int_ge(t->fd, 0);
  ck_assert_int_eq(gnutls_certificate_allocate_credentials(&t->cred), 0);
  ck_assert_int_eq(gnutls_init(&t->ses, GNUTLS_CLIENT), 0);
  ck_assert_msg(gnutls_priority_set_direct(t->ses, priority, NULL) == 0, "%s",
                priority);
  ck_assert_int_eq(
      gnutls_credentials_set(t->ses, GNUTLS_CRD_CERTIFICATE, t->cred), 0);
  gnutls_transport_set_int(t->ses, t->fd);
  gnutls_handshake_set_timeout(t->ses, 5000);
  gnutls_record_set_timeout(t->ses, 5000);
  int rc;
  do
    rc = gnutls_handshake(t->ses);
  while (rc < 0 && !gnutls_error_is_fatal(rc));
  return rc;
}

static void tls_close(tls_conn_t *t, int rc) {
  if (rc == 0)
    gnutls_bye(t->ses, GNUTLS_SHUT_WR);
  gnutls_deinit(t->ses);
  gnutls_certificate_free_credentials(t->cred);
  close(t->fd);
}

/* A TLS handshake with `port` offering only what the GnuTLS `priority`
 * allows: 0, or GnuTLS's error. */
static int tls_handshake(int port, const char *priority) {
  tls_conn_t t;
  int rc = tls_open(&t, port, priority);
  tls_close(&t, rc);
  return rc;
}

/* The serial number, in hex, of the certificate the server sent on t. */
static void tls_serial(tls_conn_t *t, char *out, size_t n) {
  unsigned len = 0;
  const gnutls_datum_t *peer = gnutls_certificate_get_peers(t->ses, &len);
  ck_assert_msg(peer != NULL && len > 0, "no certificate from the server");
  gnutls_x509_crt_t crt;
  unsigned char sn[20];
  size_t sn_len = sizeof sn;
  ck_assert_int_eq(gnutls_x509_crt_init(&crt), 0);
  ck_assert_int_eq(gnutls_x509_crt_import(crt, &peer[0], GNUTLS_X509_FMT_DER),
                   0);
  ck_assert_int_eq(gnutls_x509_crt_get_serial(crt, sn, &sn_len), 0);
  gnutls_x509_crt_deinit(crt);
  out[0] = 0;
  for (size_t i = 0; i < sn_len && 2 * i + 2 < n; i++)
    snprintf(out + 2 * i, 3, "%02x", sn[i]);
}

/* The serial of the certificate a new connection to `port` gets. */
static void served_serial(int port, char *out, size_t n) {
  tls_conn_t t;
  int rc = tls_open(&t, port, "NORMAL");
  ck_assert_msg(rc == 0, "handshake: %s", gnutls_strerror(rc));
  tls_serial(&t, out, n);
  tls_close(&t, rc);
}

/* GET /healthz on t, kept alive: the reply's status. */
static long tls_healthz(tls_conn_t *t) {
  static const char q[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
  ck_assert_int_eq(gnutls_record_send(t->ses, q, sizeof q - 1),
                   (ssize_t)sizeof q - 1);
  char buf[4096];
  size_t len = 0;
  char *end = NULL;
  while (end == NULL && len < sizeof buf - 1) {
    ssize_t got = gnutls_record_recv(t->ses, buf + len, sizeof buf - 1 - len);
    if (got == GNUTLS_E_AGAIN || got == GNUTLS_E_INTERRUPTED)
      continue;
    ck_assert_msg(got > 0, "the reply: %s",
                  got ? gnutls_strerror((int)got) : "closed");
    len += (size_t)got;
    buf[len] = 0;
    end = strstr(buf, "\r\n\r\n");
  }
  ck_assert(end != NULL);
  /* the body too, so that the next reply starts the stream */
  const char *cl = strcasestr(buf, "\r\nContent-Length:");
  ck_assert(cl != NULL && cl < end);
  size_t want = (size_t)(end + 4 - buf) + strtoul(cl + 17, NULL, 10);
  while (len < want && len < sizeof buf - 1) {
    ssize_t got = gnutls_record_recv(t->ses, buf + len, sizeof buf - 1 - len);
    if (got == GNUTLS_E_AGAIN || got == GNUTLS_E_INTERRUPTED)
      continue;
    ck_assert_msg(got > 0, "the reply's body");
    len += (size_t)got;
  }
  buf[len] = 0;
  return sh_raw_status(buf);
}

START_TEST(test_tls) {
  const char *args[] = {"--tls-cert-file",
                        cert_pem,
                        "--tls-key-file",
                        key_pem,
                        "--api-keys",
                        KEY1,
                        NULL};
  sh_server_t s;
  ck_assert_msg(sh_server_start(&s, args) == 0, "%s", s.log);
  ck_assert_msg(strstr(s.log, "\"tls\":true"), "%s", s.log);
  int p = s.port;
  sh_resp_t r = CALL(p, .path = "/healthz", .cafile = ca_pem);
  ck_assert_msg(r.status == 200, "%ld %s", r.status, r.error);
  sh_resp_free(&r);
  r = CALL(p, .method = "POST", .path = "/v1/attention", .key = KEY1,
           .cafile = ca_pem);
  ck_assert_msg(r.status == 200, "%ld %s %s", r.status, r.error, r.body);
  sh_resp_free(&r);
  r = CALL(p, .path = "/v1/info", .cafile = ca_pem);
  sh_assert_error(&r, 401, "unauthorized", NULL, NULL);
  sh_resp_free(&r);

  /* a client that does not trust the CA refuses the server */
  r = CALL(p, .path = "/healthz", .cafile = other_ca_pem);
  ck_assert_msg(r.status == 0 && r.curl_code == 60, "%ld %d %s", r.status,
                r.curl_code, r.error); /* CURLE_PEER_FAILED_VERIFICATION */
  sh_resp_free(&r);

  /* forward secrecy and AEAD only (docs/security.md): TLS 1.3, and 1.2
   * with ECDHE and GCM or ChaCha20, not CBC, not TLS 1.1 */
  static const struct {
    const char *priority;
    int ok;
  } offers[] = {
      {"NORMAL:-VERS-ALL:+VERS-TLS1.3", 1},
      {"NORMAL:-VERS-ALL:+VERS-TLS1.2", 1},
      {"NORMAL:-VERS-ALL:+VERS-TLS1.2:-CIPHER-ALL:+CHACHA20-POLY1305", 1},
      {"NORMAL:-VERS-ALL:+VERS-TLS1.2:-CIPHER-ALL:+AES-128-CBC:+AES-256-CBC",
       0},
      {"NORMAL:-VERS-ALL:+VERS-TLS1.1", 0},
  };
  for (size_t i = 0; i < sizeof offers / sizeof offers[0]; i++) {
    int rc = tls_handshake(p, offers[i].priority);
    ck_assert_msg((rc == 0) == offers[i].ok, "%s: %s", offers[i].priority,
                  rc ? gnutls_strerror(rc) : "accepted");
  }

  /* plain HTTP to the TLS port: closed, within plain_to_tls's 5 s, long
   * before connection_timeout_s (30) would, and no HTTP reply */
  char got[4096];
  double t = plain_to_tls(p, got, sizeof got);
  ck_assert_msg(t >= 0, "plain HTTP: not closed within 5 s");
  ck_assert_msg(strstr(got, "HTTP/1.1 200") == NULL, "%s", got);
  for (int i = 0; i < 20; i++) /* many, then the server still serves */
    ck_assert(plain_to_tls(p, got, sizeof got) >= 0);
  r = CALL(p, .path = "/healthz", .cafile = ca_pem);
  ck_assert_msg(r.status == 200, "%ld %s", r.status, r.error);
  sh_resp_free(&r);
  ck_assert_int_eq(sh_server_stop(&s, 15.0), 0);
}
END_TEST

static const struct {
  const char *cert, *key; /* names in dir; "" for none */
  const char *want;
} tls_bad[] = {
    {"missing.pem", "key.pem", "tls_cert_file: cannot read"},
    {"cert.pem", "missing.pem", "tls_key_file: cannot read"},
    {"cert.pem", "other-key.pem", "not a PEM certificate and its"},
    {"key.pem", "key.pem", "not a PEM certificate and its"},
    {"cert.pem", "", "tls_cert_file and tls_key_file go together"},
    {"", "key.pem", "tls_cert_file and tls_key_file go together"},
    /* read whole or refused, by name: not handed to GnuTLS cut short */
    {"empty.pem", "key.pem", "empty.pem: the file is empty"},
    {"cert.pem", "big.pem", "big.pem: larger than 1 MiB"},
    {"cert.pem", "a-dir", "a-dir: read error"},
};

START_TEST(test_tls_bad_files) {
  char cert[128] = "", key[128] = "";
  if (tls_bad[_i].cert[0])
    path_in_dir(cert, sizeof cert, tls_bad[_i].cert);
  if (tls_bad[_i].key[0])
    path_in_dir(key, sizeof key, tls_bad[_i].key);
  const char *args[] = {"--tls-cert-file", cert, "--tls-key-file", key, NULL};
  sh_server_t s;
  double t0 = sh_now();
  ck_assert_int_eq(sh_server_start(&s, args), -1);
  ck_assert_msg(sh_now() - t0 < 8.0, "the start did not fail at once");
  ck_assert_msg(strstr(s.log, tls_bad[_i].want), "'%s' lacks '%s'", s.log,
                tls_bad[_i].want);
}
END_TEST

/* ---- TLS renewal --------------------------------------------------------- */

/* Writes `text` to `path` as cert-manager and certbot renew a file: into
 * a new file beside it, renamed over it, so that attnd reads the old
 * file or the new one whole. */
static void install_text(const char *path, const char *text) {
  char tmp[160];
  snprintf(tmp, sizeof tmp, "%s.new", path);
  write_file(tmp, text);
  ck_assert_int_eq(rename(tmp, path), 0);
}

/* install_text with the file `name` of dir. */
static void install(const char *path, const char *name) {
  char src[128];
  path_in_dir(src, sizeof src, name);
  char *text = tu_read_file_or_fail(src, NULL);
  install_text(path, text);
  free(text);
}

/* The line of the n-th `event` in the server's log, into out, waiting up
 * to 10 s for it. */
static void nth_line(sh_server_t *s, const char *event, int n, char *out,
                     size_t size) {
  for (double end = sh_now() + 10;; usleep(20000)) {
    sh_server_read_log(s);
    const char *at = s->log;
    for (int k = 0; at && k < n; k++)
      if ((at = strstr(at, event)) != NULL && k + 1 < n)
        at += strlen(event);
    if (at) {
      snprintf(out, size, "%.*s", (int)strcspn(at, "\n"), at);
      return;
    }
    ck_assert_msg(sh_now() < end, "no %d '%s' in the log:\n%s", n, event,
                  s->log);
  }
}

static const char *const tls_reloaded = "{\"event\":\"tls_reloaded\"";

/* What attnd on `port` shows of the certificate new handshakes get: in
 * /metrics, its expiry is the notAfter of the certificate `name` of dir,
 * as GnuTLS reads it from the file, in seconds since the epoch, and the
 * renewals refused are `failures`; in /v1/info, its serial is `serial`
 * and its not_after the same notAfter in UTC, RFC 3339. `step` names the
 * test's step in a failure. Returns when the last load of the pair that
 * succeeded ended, as /metrics says (s since the epoch). */
static double assert_cert_shown(const char *step, int port, const char *name,
                                const char *serial, int failures) {
  char path[128], want[32];
  path_in_dir(path, sizeof path, name);
  long long not_after = tcert_not_after(path);
  ck_assert_msg(not_after > 0, "%s: no notAfter", path);
  time_t t = (time_t)not_after;
  struct tm tm;
  ck_assert(gmtime_r(&t, &tm) != NULL);
  strftime(want, sizeof want, "%Y-%m-%dT%H:%M:%SZ", &tm);

  sh_resp_t r = CALL(port, .path = "/metrics", .cafile = ca_pem);
  ck_assert_msg(r.status == 200, "%ld %s", r.status, r.error);
  double got =
      sh_metric_in(r.body, "attnd_tls_cert_not_after_timestamp_seconds");
  ck_assert_msg(got == (double)not_after,
                "%s: /metrics: the certificate expires at %.0f; %s's notAfter "
                "is %lld (%s)",
                step, got, name, not_after, want);
  got = sh_metric_in(r.body, "attnd_reload_failures_total{what=\"tls\"}");
  ck_assert_msg(got == failures, "%s: /metrics: %.0f renewals refused, not %d",
                step, got, failures);
  double renewed = sh_metric_in(
      r.body, "attnd_last_reload_success_timestamp_seconds{what=\"tls\"}");
  sh_resp_free(&r);

  r = CALL(port, .path = "/v1/info", .cafile = ca_pem);
  ck_assert_msg(r.status == 200, "%ld %s", r.status, r.error);
  json_t *info = json_loads(r.body, 0, NULL);
  json_t *tls = json_object_get(info, "tls");
  const char *sn = json_string_value(json_object_get(tls, "serial")),
             *end = json_string_value(json_object_get(tls, "not_after"));
  ck_assert_msg(sn && strcmp(sn, serial) == 0 && end && strcmp(end, want) == 0,
                "%s: /v1/info: %s; %s is serial %s, not_after %s", step, r.body,
                name, serial, want);
  json_decref(info);
  sh_resp_free(&r);
  return renewed;
}

/* SIGHUP, the n-th since the start, and the pairs in memory that its
 * tls_reloaded line gives. */
static long hup_tls(sh_server_t *s, int n) {
  char line[1024];
  ck_assert_int_eq(kill(s->pid, SIGHUP), 0);
  nth_line(s, tls_reloaded, n, line, sizeof line);
  const char *held = strstr(line, "\"in_memory\":");
  ck_assert_msg(held != NULL, "%s", line);
  return strtol(held + 12, NULL, 10);
}

/* Certificate A (serial 02), then its renewal B (04) by rename and SIGHUP:
 * new connections get B, a connection kept alive from before goes on with
 * A; a file not PEM or a key not the certificate's is refused with the
 * file named, and B goes on; once the old connection closes, A is given
 * back. At each step /metrics and /v1/info show the certificate serving
 * (A's expiry, then B's, B's still after each refusal) and /metrics the
 * refusals so far and the last success, B's after the SIGHUP, which each
 * refusal leaves. */
START_TEST(test_tls_reload) {
  char cert[128], key[128], serial[48];
  path_in_dir(cert, sizeof cert, "served-cert.pem");
  path_in_dir(key, sizeof key, "served-key.pem");
  install(cert, "cert.pem");
  install(key, "key.pem");
  const char *args[] = {"--tls-cert-file", cert, "--tls-key-file", key, NULL};
  /* attnd nine hours east of UTC: an expiry written in local time, not
   * UTC, is then nine hours off */
  ck_assert_int_eq(setenv("TZ", "ATT-9", 1), 0);
  sh_server_t s;
  ck_assert_msg(sh_server_start(&s, args) == 0, "%s", s.log);
  int p = s.port;
  served_serial(p, serial, sizeof serial);
  ck_assert_str_eq(serial, "02");
  double loaded = assert_cert_shown("A at the start", p, "cert.pem", "02", 0);
  tls_conn_t kept;
  int rc = tls_open(&kept, p, "NORMAL");
  ck_assert_msg(rc == 0, "handshake: %s", gnutls_strerror(rc));
  ck_assert_int_eq(tls_healthz(&kept), 200);

  install(key, "key-b.pem");
  install(cert, "cert-b.pem");
  double hup = sh_wall_now();
  ck_assert_msg(loaded > 0 && loaded <= hup, "A loaded at %.3f, now %.3f",
                loaded, hup);
  long held = hup_tls(&s, 1);
  served_serial(p, serial, sizeof serial);
  ck_assert_str_eq(serial, "04");
  ck_assert_int_eq(held, 2); /* A, which `kept` holds, and B */
  ck_assert_msg(strstr(s.log, "{\"event\":\"tls_reloaded\",\"serial\":\"04\""),
                "%s", s.log);
  /* B a day after A, loaded after the SIGHUP */
  loaded = assert_cert_shown("B renewed", p, "cert-b.pem", "04", 0);
  ck_assert_msg(loaded >= hup - 0.001, "B loaded at %.3f, the SIGHUP at %.3f",
                loaded, hup);
  sh_resp_t r = CALL(p, .path = "/healthz", .cafile = ca_pem);
  ck_assert_msg(r.status == 200, "B, checked: %ld %s", r.status, r.error);
  sh_resp_free(&r);
  ck_assert_int_eq(tls_healthz(&kept), 200);
  tls_serial(&kept, serial, sizeof serial);
  ck_assert_str_eq(serial, "02");
  tls_close(&kept, 0);

  /* A's certificate put back (a stale file) with B's key, not its own:
   * refused, and what serves, and /metrics shows, is still B, not the
   * file */
  install(cert, "cert.pem");
  ck_assert_int_eq(kill(s.pid, SIGHUP), 0);
  char line[1024];
  nth_line(&s, "{\"event\":\"tls_reload_failed\"", 1, line, sizeof line);
  ck_assert_msg(
      strstr(line, key) &&
          strstr(line, gnutls_strerror(GNUTLS_E_CERTIFICATE_KEY_MISMATCH)),
      "%s", line);
  served_serial(p, serial, sizeof serial);
  ck_assert_str_eq(serial, "04");
  ck_assert_double_eq(
      assert_cert_shown("key refused", p, "cert-b.pem", "04", 1), loaded);

  /* not PEM: refused, the file named; B goes on */
  install_text(cert, "-----BEGIN CERTIFICATE-----\nnot base64\n");
  ck_assert_int_eq(kill(s.pid, SIGHUP), 0);
  nth_line(&s, "{\"event\":\"tls_reload_failed\"", 2, line, sizeof line);
  ck_assert_msg(strstr(line, cert) && strstr(line, "not a PEM certificate"),
                "%s", line);
  served_serial(p, serial, sizeof serial);
  ck_assert_str_eq(serial, "04");
  ck_assert_double_eq(
      assert_cert_shown("not PEM refused", p, "cert-b.pem", "04", 2), loaded);

  /* good again. `kept` is closed: once attnd has seen it close, A is given
   * back and B alone is in memory (a bounded poll, SIGHUP after SIGHUP) */
  install(cert, "cert-b.pem");
  for (int n = 2; n < 50 && (held = hup_tls(&s, n)) != 1; n++)
    usleep(20000);
  ck_assert_int_eq(held, 1);
  assert_cert_shown("B again", p, "cert-b.pem", "04", 2);
  int st = sh_server_stop(&s, 15.0);
  sh_server_read_log(&s);
  ck_assert_msg(st == 0, "exit %d:\n%s", st, s.log);
  ck_assert_ptr_null(strstr(s.log, "PRIVATE KEY"));
}
END_TEST

/* TLS_RELOADS SIGHUPs, with no connection open: each gives the pair it
 * replaced back at once, so that one pair is in memory after each, and
 * the heap in use after the rounds is what it was before them within
 * TLS_HEAP_MARGIN (a pair kept would add a few KiB a round). Under a
 * sanitizer the gauge reads 0, and the count alone is checked. */
#define TLS_RELOADS 50
#define TLS_HEAP_MARGIN (64 << 10)

static double heap_in_use(int port) {
  sh_resp_t r = CALL(port, .path = "/metrics", .cafile = ca_pem);
  ck_assert_msg(r.status == 200, "%ld %s", r.status, r.error);
  double v = sh_metric_in(r.body, "attnd_heap_bytes{state=\"in_use\"}");
  sh_resp_free(&r);
  return v;
}

START_TEST(test_tls_reload_bounded) {
  const char *args[] = {"--tls-cert-file", cert_pem, "--tls-key-file", key_pem,
                        NULL};
  sh_server_t s;
  ck_assert_msg(sh_server_start(&s, args) == 0, "%s", s.log);
  int n = 0;
  while (n < 5) /* the pools that handshakes and reloads use filled */
    hup_tls(&s, ++n);
  double before = heap_in_use(s.port);
  long held = 0;
  for (int k = 0; k < TLS_RELOADS; k++)
    held = hup_tls(&s, ++n);
  double after = heap_in_use(s.port);
  assert_heap_kept(before, after, TLS_HEAP_MARGIN, TLS_RELOADS);
  /* the one the scrape before got, at most, besides the current one */
  ck_assert_msg(held <= 2, "%ld pairs in memory after %d reloads", held,
                TLS_RELOADS);
  ck_assert_int_eq(sh_server_stop(&s, 15.0), 0);
}
END_TEST

/* ---- CORS ---------------------------------------------------------------- */

static const char *const preflight_hdrs[] = {
    "Access-Control-Request-Method: POST",
    "Access-Control-Request-Headers: authorization, content-type, traceparent",
    NULL};

START_TEST(test_cors) {
  const char *args[] = {"--cors-allow-origins",
                        "https://app.example, http://localhost:3000",
                        "--api-keys", KEY1, NULL};
  sh_server_t s;
  ck_assert_msg(sh_server_start(&s, args) == 0, "%s", s.log);
  int p = s.port;
  const char *app = "https://app.example";

  /* the preflight: 204, no key, the methods and headers allowed */
  sh_resp_t r = CALL(p, .method = "OPTIONS", .path = "/v1/attention",
                     .origin = app, .extra = preflight_hdrs);
  ck_assert_msg(r.status == 204, "%ld %s", r.status, r.body);
  ck_assert_uint_eq(r.body_len, 0);
  assert_header(&r, "Access-Control-Allow-Origin", app);
  assert_header(&r, "Vary", "Origin");
  assert_header_has(&r, "Access-Control-Allow-Methods", "POST");
  assert_header_has(&r, "Access-Control-Allow-Headers", "Authorization");
  assert_header_has(&r, "Access-Control-Allow-Headers", "Content-Type");
  assert_header_has(&r, "Access-Control-Allow-Headers", "traceparent");
  assert_header(&r, "Access-Control-Max-Age", "600");
  sh_resp_free(&r);
  r = CALL(p, .method = "OPTIONS", .path = "/v1/info", .origin = app);
  ck_assert_int_eq(r.status, 204);
  assert_header(&r, "Access-Control-Allow-Methods", "GET, HEAD, OPTIONS");
  sh_resp_free(&r);

  /* the request itself: the origin, and the headers a page may read */
  r = CALL(p, .method = "POST", .path = "/v1/attention", .key = KEY1,
           .origin = app);
  ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
  assert_header(&r, "Access-Control-Allow-Origin", app);
  assert_header_has(&r, "Access-Control-Expose-Headers", "Server-Timing");
  assert_header_has(&r, "Access-Control-Expose-Headers", "X-Request-Id");
  ck_assert(has_header(&r, "Server-Timing"));
  sh_resp_free(&r);
  /* the request headers attnd reads beyond the safelisted ones: a page
   * that sends OIP's binary data or a compressed body asks for them in
   * its preflight, and the browser sends nothing unless each is allowed;
   * the binary reply's own header is exposed, since the page needs it to
   * split the JSON from the tensors */
  static const char *const oip_preflight[] = {
      "Access-Control-Request-Method: POST",
      "Access-Control-Request-Headers: authorization, content-encoding, "
      "content-type, inference-header-content-length",
      NULL};
  r = CALL(p, .method = "OPTIONS", .path = "/v2/models/attention/infer",
           .origin = app, .extra = oip_preflight);
  ck_assert_int_eq(r.status, 204);
  assert_header_has(&r, "Access-Control-Allow-Headers", "Content-Encoding");
  assert_header_has(&r, "Access-Control-Allow-Headers",
                    "Inference-Header-Content-Length");
  sh_resp_free(&r);
  static const char oip[] =
      "{\"inputs\":[{\"name\":\"query\",\"datatype\":\"FP32\",\"shape\":"
      "[1,2],\"data\":[1,2]}],\"parameters\":{\"num_heads\":1,"
      "\"binary_data_output\":true}}";
  char ka[64];
  snprintf(ka, sizeof ka, "Authorization: Bearer %s", KEY1);
  char oa[64];
  snprintf(oa, sizeof oa, "Origin: %s", app);
  const char *oh[] = {ka, oa, NULL};
  sh_req_t q = {.method = "POST",
                .path = "/v2/models/attention/infer",
                .content_type = "application/json",
                .body = oip,
                .len = strlen(oip),
                .headers = oh,
                .timeout_ms = 10000};
  sh_client_t cl;
  sh_client_init(&cl, p);
  sh_http(&cl, &q, &r);
  sh_client_free(&cl);
  ck_assert_msg(r.status == 200, "%ld %s", r.status, r.body);
  ck_assert(has_header(&r, "Inference-Header-Content-Length"));
  assert_header_has(&r, "Access-Control-Expose-Headers",
                    "Inference-Header-Content-Length");
  sh_resp_free(&r);
  /* a 401 carries them too, so that the page can read the error */
  r = CALL(p, .method = "POST", .path = "/v1/attention",
           .origin = "http://localhost:3000");
  ck_assert_int_eq(r.status, 401);
  assert_header(&r, "Access-Control-Allow-Origin", "http://localhost:3000");
  sh_resp_free(&r);

  /* another origin: no CORS header but Vary */
  r = CALL(p, .path = "/healthz", .origin = "https://evil.example");
  ck_assert_int_eq(r.status, 200);
  ck_assert_msg(!has_header(&r, "Access-Control-Allow-Origin"), "%s", r.head);
  assert_header(&r, "Vary", "Origin");
  sh_resp_free(&r);
  r = CALL(p, .method = "OPTIONS", .path = "/v1/attention",
           .origin = "https://evil.example", .extra = preflight_hdrs);
  ck_assert_int_eq(r.status, 204);
  ck_assert_msg(!has_header(&r, "Access-Control-Allow-Origin"), "%s", r.head);
  ck_assert_msg(!has_header(&r, "Access-Control-Allow-Methods"), "%s", r.head);
  sh_resp_free(&r);
  /* a 405's Allow lists OPTIONS where the path answers preflights (RFC
   * 9110 10.2.1: the methods the resource supports), and not on the page,
   * which answers none */
  static const struct {
    const char *method, *path, *allow;
  } not_allowed[] = {
      {"PUT", "/v1/attention", "POST, OPTIONS"},
      {"DELETE", "/v1/sessions", "GET, HEAD, POST, OPTIONS"},
      {"POST", "/", "GET, HEAD"},
  };
  for (int k = 0; k < 3; k++) {
    r = CALL(p, .method = not_allowed[k].method, .path = not_allowed[k].path,
             .key = KEY1, .origin = app);
    ck_assert_msg(r.status == 405, "%s %s: %ld %s", not_allowed[k].method,
                  not_allowed[k].path, r.status, r.body);
    assert_header(&r, "Allow", not_allowed[k].allow);
    sh_resp_free(&r);
  }
  /* a preflight of an unknown path is still a 401 without a key */
  r = CALL(p, .method = "OPTIONS", .path = "/nowhere", .origin = app);
  ck_assert_int_eq(r.status, 401);
  sh_resp_free(&r);
  ck_assert_int_eq(sh_server_stop(&s, 15.0), 0);
}
END_TEST

START_TEST(test_cors_any) {
  const char *args[] = {"--cors-allow-origins", "*", NULL};
  sh_server_t s;
  ck_assert_msg(sh_server_start(&s, args) == 0, "%s", s.log);
  sh_resp_t r = CALL(s.port, .path = "/v1/info", .origin = "https://x.example");
  ck_assert_int_eq(r.status, 200);
  assert_header(&r, "Access-Control-Allow-Origin", "*");
  ck_assert_msg(!has_header(&r, "Vary"), "%s", r.head);
  sh_resp_free(&r);
  /* and without an Origin: the Fetch standard's "CORS protocol and HTTP
   * caches": a reply that carries "*" only when asked, with no Vary, is
   * kept by a cache from a request without Origin and then served to a
   * page's request, which the browser refuses. A static "*" goes on every
   * reply instead, so that the replies never differ by Origin */
  r = CALL(s.port, .path = "/openapi.json");
  ck_assert_int_eq(r.status, 200);
  assert_header(&r, "Access-Control-Allow-Origin", "*");
  ck_assert_msg(strstr(r.head, "Origin\r\n") == NULL, "%s", r.head);
  sh_resp_free(&r);
  ck_assert_int_eq(sh_server_stop(&s, 15.0), 0);
}
END_TEST

/* Reads a reply's head (through its blank line) into buf, waiting at most
 * ms; a 204 has no Content-Length to read the rest by. Returns whether the
 * whole head came. */
static int read_head(int fd, char *buf, size_t cap, int ms) {
  size_t n = 0;
  buf[0] = 0;
  for (double t0 = sh_now(); !strstr(buf, "\r\n\r\n") && n < cap - 1;) {
    int left = ms - (int)((sh_now() - t0) * 1000.0);
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    if (left <= 0 || poll(&pf, 1, left) != 1)
      return 0;
    ssize_t k = recv(fd, buf + n, 1, 0); /* a byte: the head alone */
    if (k <= 0)
      return 0;
    buf[n += (size_t)k] = 0;
  }
  return strstr(buf, "\r\n\r\n") != NULL;
}

/* A preflight with a body: the body was never read, and libmicrohttpd
 * closed the connection with no reply ("Application reported internal
 * error"). Its body is now discarded, as a GET's is, and the 204 comes,
 * on a connection that stays usable. */
START_TEST(test_preflight_body) {
  const char *args[] = {"--api-keys", KEY1, "--cors-allow-origins",
                        "https://app.example", NULL};
  sh_server_t s;
  ck_assert_msg(sh_server_start(&s, args) == 0, "%s", s.log);
  int fd = sh_connect(s.port);
  ck_assert_int_ge(fd, 0);
  static const char req[] = "OPTIONS /v1/attention HTTP/1.1\r\nHost: x\r\n"
                            "Origin: https://app.example\r\n"
                            "Access-Control-Request-Method: POST\r\n"
                            "Content-Length: 10\r\n\r\n0123456789";
  ck_assert_int_eq(sh_send_all(fd, req, sizeof req - 1), 0);
  static char buf[8192];
  ck_assert_msg(read_head(fd, buf, sizeof buf, 5000) &&
                    sh_raw_status(buf) == 204,
                "a preflight with a body: no 204, but '%s'", buf);
  ck_assert_msg(strstr(buf, "Access-Control-Allow-Origin: https://app.example"),
                "%s", buf);
  static const char get[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
  ck_assert_int_eq(sh_send_all(fd, get, sizeof get - 1), 0);
  long n = sh_recv_reply(fd, buf, sizeof buf, 5000);
  ck_assert_msg(n > 0 && sh_raw_status(buf) == 200, "then: %s",
                n > 0 ? buf : "");
  close(fd);
  ck_assert_int_eq(sh_server_stop(&s, 15.0), 0);
}
END_TEST

START_TEST(test_cors_off) {
  sh_server_t s;
  ck_assert_msg(sh_server_start(&s, NULL) == 0, "%s", s.log);
  ck_assert_msg(strstr(s.log, "\"cors\":false"), "%s", s.log);
  sh_resp_t r = CALL(s.port, .method = "OPTIONS", .path = "/v1/attention",
                     .origin = "https://app.example", .extra = preflight_hdrs);
  sh_assert_error(&r, 405, "method_not_allowed", NULL, NULL);
  ck_assert_msg(strstr(r.head, "Access-Control-") == NULL, "%s", r.head);
  sh_resp_free(&r);
  r = CALL(s.port, .method = "POST", .path = "/v1/attention",
           .origin = "https://app.example");
  ck_assert_int_eq(r.status, 200); /* and no key needed: keys are off */
  ck_assert_msg(strstr(r.head, "Access-Control-") == NULL, "%s", r.head);
  ck_assert_msg(!has_header(&r, "Vary"), "%s", r.head);
  sh_resp_free(&r);
  ck_assert_int_eq(sh_server_stop(&s, 15.0), 0);
}
END_TEST

/* ---- limits before the key ----------------------------------------------- */

/* Whether the server has closed fd: a read that sees the end (or a reset).
 * Waits at most ms. */
static int closed_by_server(int fd, int ms) {
  struct pollfd pf = {.fd = fd, .events = POLLIN};
  char c[64];
  return poll(&pf, 1, ms) == 1 && recv(fd, c, sizeof c, MSG_DONTWAIT) <= 0;
}

/* Slowloris: headers that never end, a byte at a time, each sooner than
 * connection_timeout_s after the last. The timeout counts from the last
 * byte, so without a deadline for the headers the connection was held
 * for as long as the client kept sending (4 s here, against a timeout of
 * 1 s), before any key was checked; max_connections of them locked out
 * every other client. */
START_TEST(test_slow_headers) {
  const char *args[] = {"--api-keys", KEY1, "--connection-timeout-s", "1",
                        NULL};
  sh_server_t s;
  ck_assert_msg(sh_server_start(&s, args) == 0, "%s", s.log);
  static const char head[] = "GET /v1/info HTTP/1.1\r\nHost: x\r\nX-Pad: "
                             "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
  int fd = sh_connect(s.port), closed = 0;
  ck_assert_int_ge(fd, 0);
  /* closed before the headers end (20 s of them), whenever that is: no
   * bound on the time, which a loaded machine stretches */
  size_t i = 0;
  for (; i < sizeof head - 1; i++) {
    if (send(fd, head + i, 1, MSG_NOSIGNAL) != 1 || closed_by_server(fd, 250)) {
      closed = 1;
      break;
    }
  }
  close(fd);
  ck_assert_msg(closed,
                "headers sent a byte each 250 ms, %zu of them: the "
                "connection is still open (connection_timeout_s 1)",
                i);

  /* a request whose headers come whole is served, on a connection kept
   * alive across the sweep: the deadline is for headers, not idle time
   * between a request's headers and its reply */
  assert_get(s.port, "/v1/info", KEY1, 200);
  assert_get(s.port, "/healthz", NULL, 200);
  ck_assert_int_eq(sh_server_stop(&s, 15.0), 0);
}
END_TEST

/* docs/security.md: with API keys on, a client without a valid key gets
 * 401 before its body is read. The headers of a 1 MB body come alone,
 * with a wrong key (and with Expect: 100-continue, which must not be
 * answered "100 Continue"): the 401 comes with no byte of the body sent,
 * and the connection is closed, so that nothing of the body is read or
 * held. A server that read the body first would not answer at all. */
START_TEST(test_key_before_body) {
  const char *args[] = {"--api-keys", KEY1, NULL};
  sh_server_t s;
  ck_assert_msg(sh_server_start(&s, args) == 0, "%s", s.log);
  static const char *const expect[] = {"", "Expect: 100-continue\r\n"};
  for (int k = 0; k < 2; k++) {
    char req[512];
    int n = snprintf(req, sizeof req,
                     "POST /v1/attention HTTP/1.1\r\nHost: x\r\n"
                     "Authorization: Bearer " WRONG "\r\n"
                     "Content-Type: application/json\r\n%s"
                     "Content-Length: 1000000\r\n\r\n",
                     expect[k]);
    int fd = sh_connect(s.port);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(sh_send_all(fd, req, (size_t)n), 0);
    static char buf[8192];
    ck_assert_msg(read_head(fd, buf, sizeof buf, 5000),
                  "%s: no reply to the headers alone: '%s'",
                  k ? "Expect: 100-continue" : "a body", buf);
    ck_assert_msg(sh_raw_status(buf) == 401, "%s", buf);
    /* the 401's body, then the end of the stream */
    char c[256];
    ssize_t got = 1;
    for (double t0 = sh_now(); got > 0 && sh_now() - t0 < 5.0;) {
      struct pollfd pf = {.fd = fd, .events = POLLIN};
      got = poll(&pf, 1, 1000) == 1 ? recv(fd, c, sizeof c, 0) : 1;
    }
    ck_assert_msg(got <= 0, "the connection stays open after the 401");
    close(fd);
  }
  ck_assert_int_eq((int)sh_metric(s.port, unauthorized), 2);
  ck_assert_int_eq(sh_server_stop(&s, 15.0), 0);
}
END_TEST

Suite *test_suite(void) {
  Suite *s = suite_create("security");
  TCase *tc = tcase_create("keys");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_keys);
  tcase_add_test(tc, test_public_paths);
  tcase_add_test(tc, test_sighup_reload);
  tcase_add_test(tc, test_sighup_reload_bounded);
  tcase_add_test(tc, test_sighup_at_start);
  tcase_add_test(tc, test_print_config);
  suite_add_tcase(s, tc);

  tc = tcase_create("tls");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_tls);
  tcase_add_loop_test(tc, test_tls_bad_files, 0,
                      (int)(sizeof tls_bad / sizeof tls_bad[0]));
  tcase_add_test(tc, test_tls_reload);
  tcase_add_test(tc, test_tls_reload_bounded);
  suite_add_tcase(s, tc);

  tc = tcase_create("cors");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_cors);
  tcase_add_test(tc, test_cors_any);
  tcase_add_test(tc, test_preflight_body);
  tcase_add_test(tc, test_cors_off);
  suite_add_tcase(s, tc);

  tc = tcase_create("limits");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_slow_headers);
  tcase_add_test(tc, test_key_before_body);
  suite_add_tcase(s, tc);
  return s;
}

void test_setup(void) {
  sh_init();
  strcpy(dir, "/tmp/attnd-security-XXXXXX");
  if (mkdtemp(dir) == NULL || tcert_make(dir) < 0) {
    fprintf(stderr, "check_security: cannot make the test certificates in %s\n",
            dir);
    exit(EXIT_FAILURE);
  }
  path_in_dir(ca_pem, sizeof ca_pem, "ca.pem");
  path_in_dir(cert_pem, sizeof cert_pem, "cert.pem");
  path_in_dir(key_pem, sizeof key_pem, "key.pem");
  path_in_dir(other_ca_pem, sizeof other_ca_pem, "other-ca.pem");
  /* tls_bad's files that cannot be read as a PEM file at all */
  char path[128];
  path_in_dir(path, sizeof path, "empty.pem");
  FILE *f = fopen(path, "w");
  int ok = f != NULL && fclose(f) == 0;
  path_in_dir(path, sizeof path, "big.pem");
  f = fopen(path, "w");
  for (int i = 0; ok && f && i <= (1 << 20) / 64; i++)
    ok =
        fputs(
            "-----BEGIN CERTIFICATE----- a line of 64 bytes of padding......\n",
            f) >= 0;
  ok = ok && f != NULL && fclose(f) == 0;
  path_in_dir(path, sizeof path, "a-dir");
  if (!ok || mkdir(path, 0700) < 0) {
    fprintf(stderr, "check_security: cannot write the test files in %s\n", dir);
    exit(EXIT_FAILURE);
  }
}

int test_finish(int failed) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (dir[0] && system(cmd) != 0)
    failed++;
  return failed;
}
