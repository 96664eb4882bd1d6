/* tests/check_ipv6.c: attnd over IPv6, end to end: the real build/attnd
 * listening on ::1 and on the unspecified address (dual stack), reached
 * through real sockets on ::1 and 127.0.0.1 only, never elsewhere. What
 * meets an address is checked from the outside: who reaches the socket,
 * the access log's client_addr, the bind failure's message, HTTPS to
 * [::1] with the certificate verified, the image's healthcheck
 * (docker/healthcheck.sh) and attnd-load with an [IPv6] URL.
 *
 * A machine without an IPv6 loopback (IPv6 off in the kernel or the
 * container) cannot run them: each test then says SKIP on stderr, with
 * the reason, and passes. */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "server_harness.h"
#include "suite.h"
#include "test_certs.h"
#include "testutil.h"

/* The loopback address of `family` (AF_INET or AF_INET6) with `port`
 * into *a; its length. */
static socklen_t loopback(int family, int port, struct sockaddr_storage *a) {
  memset(a, 0, sizeof *a);
  if (family == AF_INET6) {
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)a;
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons((uint16_t)port);
    a6->sin6_addr = in6addr_loopback;
    return sizeof *a6;
  }
  struct sockaddr_in *a4 = (struct sockaddr_in *)a;
  a4->sin_family = AF_INET;
  a4->sin_port = htons((uint16_t)port);
  a4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return sizeof *a4;
}

/* A TCP socket bound to the loopback address of `family` on a port the
 * kernel picks, listening when `listen_too`: its port into *port, or -1
 * (errno says why). The caller closes it. While it is open and not
 * listening, connections to its port are refused. */
static int loopback_socket(int family, int listen_too, int *port) {
  struct sockaddr_storage a;
  socklen_t len = loopback(family, 0, &a);
  int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
  if (bind(fd, (struct sockaddr *)&a, len) != 0 ||
      (listen_too && listen(fd, 8) != 0) ||
      getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
    int err = errno;
    close(fd);
    errno = err;
    return -1;
  }
  *port = ntohs(family == AF_INET6 ? ((struct sockaddr_in6 *)&a)->sin6_port
                                   : ((struct sockaddr_in *)&a)->sin_port);
  return fd;
}

/* Whether ::1 can be bound here; otherwise says SKIP, once a test. */
static int have_ipv6(const char *test) {
  int port, fd = loopback_socket(AF_INET6, 0, &port);
  if (fd >= 0) {
    close(fd);
    return 1;
  }
  fprintf(stderr, "SKIP check_ipv6 %.*s: no IPv6 loopback here (::1: %s)\n",
          (int)strlen(test) - 3, test, strerror(errno)); /* test is NAME_fn */
  return 0;
}
#define NEED_IPV6()                                                            \
  if (!have_ipv6(__func__))                                                    \
  return

/* Whether a TCP connection to the loopback address of `family` on `port`
 * is taken (1) or refused (0). */
static int reaches(int family, int port) {
  struct sockaddr_storage a;
  socklen_t len = loopback(family, port, &a);
  int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ck_assert_int_ge(fd, 0);
  int rc = connect(fd, (struct sockaddr *)&a, len), err = errno;
  close(fd);
  ck_assert_msg(rc == 0 || err == ECONNREFUSED, "connect: %s", strerror(err));
  return rc == 0;
}

/* Runs argv (NULL-terminated, argv[0] found on PATH), its stdout and
 * stderr into `log` (NULL: /dev/null): its exit status, or -1. */
static int run(const char *const *argv, const char *log) {
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    int fd = log ? open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644)
                 : open("/dev/null", O_WRONLY);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    signal(SIGPIPE, SIG_DFL);
    execvp(argv[0], (char *const *)argv);
    _exit(127);
  }
  int st;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Removes `files` (NULL-terminated names) from the folder `dir`, then
 * the folder. */
static void remove_dir(const char *dir, const char *const *files) {
  char p[256];
  for (; *files; files++) {
    snprintf(p, sizeof p, "%s/%s", dir, *files);
    unlink(p);
  }
  rmdir(dir);
}

/* Starts attnd on `host` with its access log on stderr (into s->log). */
static void start_on(sh_server_t *s, const char *host) {
  const char *args[] = {"--host", host, "--access-log", "stderr", "--workers",
                        "1",      NULL};
  if (sh_server_start(s, args) < 0)
    ck_abort_msg("attnd --host %s did not start:\n%s", host, s->log);
}

static void stop(sh_server_t *s) {
  int st = sh_server_stop(s, 30.0);
  ck_assert_msg(st == 0, "attnd exited with %d:\n%s", st, s->log);
}

/* GET /healthz from `host` (NULL: 127.0.0.1) to port, over HTTPS
 * trusting the CA in `cafile` where it is not NULL: its status. */
static long healthz_ca(const char *host, int port, const char *cafile) {
  sh_client_t c;
  sh_client_init(&c, port);
  c.host = host;
  sh_req_t q = {.method = "GET", .path = "/healthz", .cafile = cafile};
  sh_resp_t r;
  int rc = sh_http(&c, &q, &r);
  long status = rc == 0 ? r.status : 0;
  ck_assert_msg(rc == 0, "GET /healthz on %s%s: %s (curl %d)",
                host ? host : "127.0.0.1", cafile ? " over TLS" : "", r.error,
                r.curl_code);
  sh_resp_free(&r);
  sh_client_free(&c);
  return status;
}

static long healthz(const char *host, int port) {
  return healthz_ca(host, port, NULL);
}

/* ---- listening ----------------------------------------------------------- */

/* On ::1, attnd takes IPv6 alone: 127.0.0.1 is refused. The listening
 * line names the address as given; curl's own Host header for the URL
 * http://[::1]:PORT/ ("[::1]:PORT") is accepted; the access log gives the
 * client as ::1. */
START_TEST(test_loopback) {
  NEED_IPV6();
  sh_server_t s;
  start_on(&s, "::1");
  ck_assert_msg(strstr(s.log, "\"event\":\"listening\",\"host\":\"::1\","),
                "%s", s.log);
  ck_assert_int_eq(healthz("::1", s.port), 200);
  ck_assert_msg(!reaches(AF_INET, s.port), "127.0.0.1 reached attnd on ::1");
  sh_wait_log(&s, "\"path\":\"/healthz\",\"client_addr\":\"::1\",");
  stop(&s);
}
END_TEST

/* The unspecified address, in each of its spellings, takes both families
 * (dual stack), as "::" did alone (bug: "::0" and "0:0:0:0:0:0:0:0"
 * listened on IPv6 only, and 127.0.0.1 was refused). An IPv4 client
 * arrives as ::ffff:127.0.0.1 on such a socket, and is logged 127.0.0.1,
 * as where attnd listens on 0.0.0.0 (bug: in the mapped form). */
static const char *const unspecified[] = {"::", "::0", "0:0:0:0:0:0:0:0"};

START_TEST(test_dual_stack) {
  NEED_IPV6();
  sh_server_t s;
  start_on(&s, unspecified[_i]);
  ck_assert_int_eq(healthz("::1", s.port), 200);
  sh_wait_log(&s, "\"client_addr\":\"::1\",");
  ck_assert_int_eq(healthz(NULL, s.port), 200);
  sh_wait_log(&s, "\"client_addr\":\"127.0.0.1\",");
  ck_assert_msg(strstr(s.log, "::ffff:") == NULL, "%s", s.log);
  stop(&s);
}
END_TEST

/* An IPv4-mapped address, ::ffff:127.0.0.1, listens on 127.0.0.1 (bug:
 * the start failed, "cannot listen", the socket being IPv6 alone), and
 * its client is logged as IPv4. */
START_TEST(test_mapped) {
  NEED_IPV6();
  sh_server_t s;
  start_on(&s, "::ffff:127.0.0.1");
  ck_assert_int_eq(healthz(NULL, s.port), 200);
  ck_assert_msg(!reaches(AF_INET6, s.port), "::1 reached attnd on ::ffff:");
  sh_wait_log(&s, "\"client_addr\":\"127.0.0.1\",");
  stop(&s);
}
END_TEST

/* attnd on 127.0.0.1, by contrast, is not reached on ::1, and logs its
 * IPv4 client as such: the log's field is there for either family. */
START_TEST(test_ipv4_only) {
  NEED_IPV6();
  sh_server_t s;
  start_on(&s, "127.0.0.1");
  ck_assert_int_eq(healthz(NULL, s.port), 200);
  ck_assert_msg(!reaches(AF_INET6, s.port), "::1 reached attnd on 127.0.0.1");
  sh_wait_log(&s, "\"client_addr\":\"127.0.0.1\",");
  stop(&s);
}
END_TEST

/* A port in use on ::1: the start fails, and the message writes the
 * address as a URL does, [::1]:PORT (bug: "::1:PORT", which reads as the
 * address ::1:PORT and no port). */
START_TEST(test_bind_failure) {
  NEED_IPV6();
  int port, busy = loopback_socket(AF_INET6, 1, &port);
  ck_assert_int_ge(busy, 0);
  char port_arg[16], want[64];
  snprintf(port_arg, sizeof port_arg, "%d", port);
  snprintf(want, sizeof want, "cannot listen on [::1]:%d ", port);
  const char *args[] = {"--host", "::1", "--port", port_arg, NULL};
  sh_server_t s;
  ck_assert_int_eq(sh_server_start(&s, args), -1);
  ck_assert_msg(strstr(s.log, want), "no '%s' in:\n%s", want, s.log);
  close(busy);
}
END_TEST

/* ---- TLS ----------------------------------------------------------------- */

/* TLS on ::1 (docs/security.md): https://[::1]:PORT/ answers a client that
 * verifies the certificate as curl does by default, its chain to the CA
 * and its name, which for that URL is the IP address SAN ::1
 * (test_certs.h); 127.0.0.1 is refused, as without TLS; the access log
 * gives the client as ::1. */
START_TEST(test_tls) {
  NEED_IPV6();
  char dir[] = "/tmp/check_ipv6_tls_XXXXXX", ca[64], cert[64], key[64];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  ck_assert_int_eq(tcert_make(dir), 0);
  snprintf(ca, sizeof ca, "%s/ca.pem", dir);
  snprintf(cert, sizeof cert, "%s/cert.pem", dir);
  snprintf(key, sizeof key, "%s/key.pem", dir);
  const char *args[] = {"--host",
                        "::1",
                        "--access-log",
                        "stderr",
                        "--tls-cert-file",
                        cert,
                        "--tls-key-file",
                        key,
                        "--workers",
                        "1",
                        NULL};
  sh_server_t s;
  if (sh_server_start(&s, args) < 0)
    ck_abort_msg("attnd --host ::1 with TLS did not start:\n%s", s.log);
  ck_assert_msg(strstr(s.log, "\"event\":\"listening\",\"host\":\"::1\","),
                "%s", s.log);
  ck_assert_msg(strstr(s.log, "\"tls\":true"), "%s", s.log);
  ck_assert_int_eq(healthz_ca("::1", s.port, ca), 200);
  ck_assert_msg(!reaches(AF_INET, s.port), "127.0.0.1 reached attnd on ::1");
  sh_wait_log(&s, "\"path\":\"/healthz\",\"client_addr\":\"::1\",");
  stop(&s);
  static const char *const files[] = {
      "ca.pem", "cert.pem", "key.pem", "other-key.pem", "other-ca.pem", NULL};
  remove_dir(dir, files);
}
END_TEST

/* ---- the image's healthcheck --------------------------------------------- */

/* Runs `bash docker/healthcheck.sh` with ATTND_HOST (NULL: unset) and
 * ATTND_PORT: its exit status, or -1. */
static int healthcheck(const char *host, int port) {
  char host_env[80], port_env[32];
  snprintf(host_env, sizeof host_env, "ATTND_HOST=%s", host ? host : "");
  snprintf(port_env, sizeof port_env, "ATTND_PORT=%d", port);
  const char *set[] =
      {"env", host_env, port_env, "bash", "docker/healthcheck.sh", NULL},
             *unset[] = {"env",    "-u",   "ATTND_HOST",
                         port_env, "bash", "docker/healthcheck.sh",
                         NULL};
  return run(host ? set : unset, NULL);
}

/* The HEALTHCHECK asks the address the container's attnd listens on,
 * ATTND_HOST (bug: always 127.0.0.1, so that an attnd on ::1, or on a
 * pod's IPv6 address, was never healthy), and 127.0.0.1 for the
 * unspecified address of either family (:: takes IPv4 as well, and a
 * container with IPv6 turned off has no ::1). Without ATTND_HOST (a --host
 * flag or a config file set it) it asks 127.0.0.1, attnd's default. A port
 * nobody listens on, on the address it asks, is unhealthy. */
static const struct {
  const char *listen, *env; /* --host, ATTND_HOST (NULL: unset) */
  int asks;                 /* the family of the address it asks */
} checks[] = {
    {"::1", "::1", AF_INET6},     {"::", "::", AF_INET},
    {"::", "0:0::0", AF_INET},    {"127.0.0.1", "127.0.0.1", AF_INET},
    {"127.0.0.1", NULL, AF_INET}, {"0.0.0.0", "0.0.0.0", AF_INET},
};

START_TEST(test_healthcheck) {
  NEED_IPV6();
  sh_server_t s;
  start_on(&s, checks[_i].listen);
  int st = healthcheck(checks[_i].env, s.port);
  ck_assert_msg(st == 0, "healthcheck, ATTND_HOST %s, attnd on %s: %d",
                checks[_i].env ? checks[_i].env : "unset", checks[_i].listen,
                st);
  stop(&s);
  /* a port of the address asked, bound and not listening: refused */
  int port, off = loopback_socket(checks[_i].asks, 0, &port);
  ck_assert_int_ge(off, 0);
  ck_assert_int_ne(healthcheck(checks[_i].env, port), 0);
  close(off);
}
END_TEST

/* ---- attnd-load ---------------------------------------------------------- */

/* attnd-load against http://[::1]:PORT, and with the zone of the loopback
 * interface, http://[::1%25lo]:PORT (bug: refused, "'%' in the IPv6
 * address", where libcurl takes it): every request answered, the target
 * named as given in its report, and attnd's log has them from ::1. */
static const char *const load_urls[] = {"http://[::1]:%d",
                                        "http://[::1%%25lo]:%d"};

START_TEST(test_load_url) {
  NEED_IPV6();
  sh_server_t s;
  start_on(&s, "::1");
  char bin[4096], url[64], dir[] = "/tmp/check_ipv6_XXXXXX", log[64];
  const char *b = getenv("ATTND_LOAD_BIN");
  if (b == NULL || *b == 0)
    b = sh_bin_beside("attnd-load", bin, sizeof bin);
  snprintf(url, sizeof url, load_urls[_i], s.port);
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(log, sizeof log, "%s/log.txt", dir);
  const char *argv[] = {b,    "--url",      url, "--lengths",
                        "16", "--requests", "3", "--concurrency",
                        "1",  "--warmup",   "0", "--timeout",
                        "60", "--out",      dir, NULL};
  int st = run(argv, log);
  char *text = tu_read_file(log, NULL);
  ck_assert_ptr_nonnull(text);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "attnd-load:\n%s", text);
  char want[96];
  snprintf(want, sizeof want, "POST %s/v1/attention", url);
  ck_assert_msg(strstr(text, want), "no '%s' in:\n%s", want, text);
  ck_assert_msg(strstr(text, "3/3 ok"), "%s", text);
  sh_wait_log(&s, "\"path\":\"/v1/attention\",\"client_addr\":\"::1\","
                  "\"status\":200");
  free(text);
  static const char *const files[] = {
      "log.txt", "attnd-load.csv", "attnd-load.json", "attnd-load.svg", NULL};
  remove_dir(dir, files);
  stop(&s);
}
END_TEST

Suite *test_suite(void) {
  Suite *s = suite_create("ipv6");
  TCase *tc = tcase_create("listen");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_loopback);
  tcase_add_loop_test(tc, test_dual_stack, 0,
                      sizeof unspecified / sizeof unspecified[0]);
  tcase_add_test(tc, test_mapped);
  tcase_add_test(tc, test_ipv4_only);
  tcase_add_test(tc, test_bind_failure);
  tcase_add_test(tc, test_tls);
  suite_add_tcase(s, tc);
  tc = tcase_create("healthcheck");
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, test_healthcheck, 0,
                      sizeof checks / sizeof checks[0]);
  suite_add_tcase(s, tc);
  tc = tcase_create("load");
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, test_load_url, 0,
                      sizeof load_urls / sizeof load_urls[0]);
  suite_add_tcase(s, tc);
  return s;
}
