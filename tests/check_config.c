/* tests/check_config.c: the configuration table and its three sources, and
 * the cgroup limits that size the "auto" values (server/cgroup.h), read
 * from directories of fixture files. */
#include <check.h>
#include <ctype.h>
#include <errno.h>
#include <ftw.h>
#include <glob.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "attn/attn.h"
#include "cgroup.h"
#include "config.h"
#include "http/auth.h"
#include "suite.h"
#include "testutil.h"

/* Loads with these arguments and environment; returns the load's result. */
static int load(attnd_config_t *cfg, char **argv, char **envp, char *msg,
                size_t n) {
  int argc = 0;
  while (argv[argc])
    argc++;
  attnd_config_load_t how;
  return attnd_config_load(cfg, &how, argc, argv, envp, 4, msg, n);
}

static char *write_tmp(const char *text) {
  static char path[64];
  strcpy(path, "/tmp/attnd-conf-XXXXXX");
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  FILE *f = fdopen(fd, "w");
  fputs(text, f);
  fclose(f);
  return path;
}

/* What attnd_config_print writes for `c` (no file path), malloc'd. */
static char *printed_config(const attnd_config_t *c) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  ck_assert_ptr_nonnull(f);
  attnd_config_print(c, NULL, f);
  fclose(f);
  return text;
}

/* What --help prints (attnd_config_usage), malloc'd. */
static char *usage_text(void) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  ck_assert_ptr_nonnull(f);
  attnd_config_usage(f);
  fclose(f);
  return text;
}

START_TEST(test_defaults) {
  attnd_config_t c;
  char msg[256];
  char *argv[] = {"attnd", NULL}, *envp[] = {NULL};
  ck_assert_int_eq(load(&c, argv, envp, msg, sizeof msg), 0);
  ck_assert_str_eq(c.host, "127.0.0.1");
  ck_assert_int_eq(c.port, 8080);
  ck_assert_int_eq(c.queue_depth, 64);
  ck_assert_int_eq(c.max_body_bytes, 256 << 20);
  /* auto on 4 CPUs: threads decided as each request starts (0), at most
   * 4, 4 workers, 4 HTTP threads */
  ck_assert_int_eq(c.threads_per_request, 0);
  ck_assert_int_eq(c.max_threads_per_request, 4);
  ck_assert_int_eq(attnd_config_plan_threads(&c), 4);
  ck_assert_int_eq(c.workers, 4);
  ck_assert_int_eq(c.http_threads, 4);
  ck_assert_str_eq(c.access_log, "stderr");
}
END_TEST

START_TEST(test_auto_workers_follow_threads) {
  attnd_config_t c;
  char msg[256];
  char *argv[] = {"attnd", "--threads-per-request", "2", NULL},
       *envp[] = {NULL};
  ck_assert_int_eq(load(&c, argv, envp, msg, sizeof msg), 0);
  ck_assert_int_eq(c.workers, 2); /* 4 CPUs / 2 threads: no oversubscription */
  ck_assert_int_eq(attnd_config_plan_threads(&c), 2);
}
END_TEST

/* With threads_per_request = auto, a worker per CPU, requests planned for
 * the cap, and --print-config writes auto back (a number there would read
 * back as a fixed count). */
START_TEST(test_auto_threads) {
  attnd_config_t c;
  char msg[256];
  char *argv[] = {"attnd", "--threads-per-request",
                  "auto",  "--max-threads-per-request",
                  "3",     NULL},
       *envp[] = {NULL};
  ck_assert_int_eq(load(&c, argv, envp, msg, sizeof msg), 0);
  ck_assert_int_eq(c.threads_per_request, 0);
  ck_assert_int_eq(c.workers, 4);
  ck_assert_int_eq(attnd_config_plan_threads(&c), 3);
  char *text = printed_config(&c);
  ck_assert_msg(strstr(text, "\nthreads_per_request = auto\n") != NULL, "%s",
                text);
  ck_assert_msg(strstr(text, "\nmax_threads_per_request = 3\n") != NULL, "%s",
                text);
  free(text);
}
END_TEST

/* With threads_per_request = auto, a cap above the CPUs (4 here) plans for
 * the CPUs: the scheduler never gives a request more threads than CPUs, so
 * a plan for the cap would make every request hold the workspace of threads
 * it cannot get, in the memory budget (on 2 CPUs at 256, a request whose
 * 2 threads' workspace fits was refused 422 for 69 MB of workspace). The key
 * keeps what was set. A fixed threads_per_request above the CPUs is the
 * operator's to choose. Catches requests planned for the cap alone. */
START_TEST(test_auto_cap_above_cpus) {
  attnd_config_t c;
  char msg[256];
  char *argv[] = {"attnd", "--max-threads-per-request", "256", NULL},
       *envp[] = {NULL};
  ck_assert_int_eq(load(&c, argv, envp, msg, sizeof msg), 0);
  ck_assert_int_eq(c.max_threads_per_request, 256);
  ck_assert_int_eq(attnd_config_plan_threads(&c), 4);
  char *fixed[] = {"attnd", "--threads-per-request", "8", NULL};
  ck_assert_int_eq(load(&c, fixed, envp, msg, sizeof msg), 0);
  ck_assert_int_eq(attnd_config_plan_threads(&c), 8);
}
END_TEST

START_TEST(test_precedence) {
  char *path = write_tmp("# comment\nport = 7001\nqueue_depth = 5\n"
                         "workers = 3 # trailing comment\n"
                         "access_log = \"off\"\n");
  char conf[128];
  snprintf(conf, sizeof conf, "--config=%s", path);
  attnd_config_t c;
  char msg[256];
  /* file: port, queue_depth, workers; env overrides port and queue_depth;
   * the flag overrides port again, and of a flag given twice the last
   * counts (--help says so) */
  char *argv[] = {"attnd", conf, "--port", "7004", "--port", "7003", NULL};
  char *envp[] = {"ATTND_PORT=7002", "ATTND_QUEUE_DEPTH=6",
                  "ATTND_SERVICE_HOST=10.0.0.1", "HOME=/root", NULL};
  ck_assert_int_eq(load(&c, argv, envp, msg, sizeof msg), 0);
  ck_assert_int_eq(c.port, 7003);
  ck_assert_int_eq(c.queue_depth, 6);
  ck_assert_int_eq(c.workers, 3);
  ck_assert_str_eq(c.access_log, "off");
  unlink(path);
}
END_TEST

/* The file: --config's, else ATTND_CONFIG's (docs/operations.md). Bugs:
 * ATTND_CONFIG ignored, or preferred to the flag. */
START_TEST(test_config_path) {
  char env_file[64], env[96], flag[96];
  snprintf(env_file, sizeof env_file, "%s", write_tmp("port = 7001\n"));
  snprintf(env, sizeof env, "ATTND_CONFIG=%s", env_file);
  snprintf(flag, sizeof flag, "--config=%s", write_tmp("port = 7002\n"));
  attnd_config_t c;
  char msg[256];
  char *argv0[] = {"attnd", NULL}, *argv1[] = {"attnd", flag, NULL},
       *envp[] = {env, NULL};
  ck_assert_msg(load(&c, argv0, envp, msg, sizeof msg) == 0, "%s", msg);
  ck_assert_int_eq(c.port, 7001);
  ck_assert_msg(load(&c, argv1, envp, msg, sizeof msg) == 0, "%s", msg);
  ck_assert_int_eq(c.port, 7002);
  unlink(env_file);
  unlink(flag + 9);
}
END_TEST

/* A --config or ATTND_CONFIG path longer than the 511 bytes loading keeps
 * of it is refused, naming its source, and so is a path that is not a
 * file. Bugs: the path was cut silently, and a cut path that named a
 * directory (a run of slashes, cut) was read as an empty file, so attnd
 * served on the defaults; a directory given as the file was the same. */
START_TEST(test_config_path_unreadable) {
  char file[64], path[700], flag[720], env[720];
  snprintf(file, sizeof file, "%s", write_tmp("port = 7003\n"));
  /* "/tmp////...////attnd-conf-XXXXXX": the same file, 600 bytes long */
  size_t slashes = 600 - strlen(file);
  snprintf(path, sizeof path, "/tmp%.*s%s", (int)slashes,
           "////////////////////////////////////////////////////////////////"
           "////////////////////////////////////////////////////////////////"
           "////////////////////////////////////////////////////////////////"
           "////////////////////////////////////////////////////////////////"
           "////////////////////////////////////////////////////////////////"
           "////////////////////////////////////////////////////////////////"
           "////////////////////////////////////////////////////////////////"
           "////////////////////////////////////////////////////////////////"
           "////////////////////////////////////////////////////////////////"
           "////////////////////////////////////////////////////////////////",
           file + 4);
  ck_assert_uint_gt(strlen(path), 511);
  snprintf(flag, sizeof flag, "--config=%s", path);
  snprintf(env, sizeof env, "ATTND_CONFIG=%s", path);
  attnd_config_t c;
  char msg[512] = "";
  char *argv0[] = {"attnd", NULL}, *argv1[] = {"attnd", flag, NULL},
       *argv2[] = {"attnd", "--config", "/tmp", NULL}, *envp0[] = {NULL},
       *envp1[] = {env, NULL};
  ck_assert_int_eq(load(&c, argv1, envp0, msg, sizeof msg), -1);
  ck_assert_msg(strstr(msg, "config: the path is too long (at most 511 "
                            "bytes) [flag --config]"),
                "%s", msg);
  ck_assert_int_eq(load(&c, argv0, envp1, msg, sizeof msg), -1);
  ck_assert_msg(strstr(msg, "[ATTND_CONFIG]"), "%s", msg);
  ck_assert_int_eq(load(&c, argv2, envp0, msg, sizeof msg), -1);
  ck_assert_msg(strstr(msg, "config: cannot read /tmp: Is a directory"), "%s",
                msg);
  unlink(file);
}
END_TEST

/* What host takes: IP literals (IPv6 with a zone), and names of labels of
 * letters, digits and '-' (not at a label's ends), at most 63 bytes a
 * label and 253 in all. */
START_TEST(test_host_values) {
  static const char *const good[] = {
      "0.0.0.0",
      "::",
      "::1",
      "127.0.0.1",
      "fe80::1%lo",
      "localhost",
      "attnd-0.attnd.default.svc.cluster.local",
      "example.com.",
      "a23456789012345678901234567890123456789012345678901234567890123.x"};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    char arg[160], msg[512];
    snprintf(arg, sizeof arg, "--host=%s", good[i]);
    char *argv[] = {"attnd", arg, NULL}, *envp[] = {NULL};
    attnd_config_t c;
    ck_assert_msg(load(&c, argv, envp, msg, sizeof msg) == 0, "%s", msg);
    ck_assert_str_eq(c.host, good[i]);
  }
}
END_TEST

START_TEST(test_flag_spellings_and_sizes) {
  attnd_config_t c;
  char msg[256];
  char *argv[] = {"attnd", "--max-body-bytes=2M", "--max_response_bytes",
                  "64k",   "--workers",           "auto",
                  NULL};
  char *envp[] = {NULL};
  ck_assert_int_eq(load(&c, argv, envp, msg, sizeof msg), 0);
  ck_assert_int_eq(c.max_body_bytes, 2 << 20);
  ck_assert_int_eq(c.max_response_bytes, 64 << 10);
  ck_assert_int_eq(c.workers, 4);
}
END_TEST

/* Each bad value fails and names the key and where it came from. */
static const struct {
  char *arg, *env, *file, *want[2];
} bad[] = {
    {"--port=70000", NULL, NULL, {"port", "70000"}},
    {"--queue-depth=-1", NULL, NULL, {"queue_depth", "flag --queue-depth"}},
    {"--workers=many", NULL, NULL, {"workers", "or auto"}},
    {NULL, "ATTND_PORT=abc", NULL, {"port", "ATTND_PORT"}},
    {NULL, NULL, "max_seq_len = 0\n", {"max_seq_len", ":1"}},
    {NULL, NULL, "no_such_key = 1\n", {"unknown key", "no_such_key"}},
    {NULL, NULL, "just words\n", {"expected 'key = value'", ":1"}},
    {"--nope=1", NULL, NULL, {"unknown flag", "--nope"}},
    {NULL, NULL, "host = \"a\n", {"no closing quote", ":1"}},
    {NULL, NULL, "\nhost = \"a\\qb\"\n", {"bad escape '\\q'", ":2"}},
    /* \x00 has the escape's form: the message says why it is refused */
    {NULL, NULL, "host = \"a\\x00\"\n", {"'\\x00'", "cannot hold a NUL byte"}},
    {NULL, NULL, "host = \"a\\x4\"\n", {"bad escape", "\\xHH"}},
    {NULL, NULL, "host = \"a\" b\n", {"unexpected 'b'", ":1"}},
    {"--default-timeout-ms=9000000",
     NULL,
     NULL,
     {"default_timeout_ms", "max_timeout_ms"}},
    {"--max-body-bytes=1Q", NULL, NULL, {"max_body_bytes", "suffix"}},
    {NULL,
     "ATTND_PORT=tcp://10.96.0.10:8080",
     NULL,
     {"ATTND_PORT", "enableServiceLinks: false"}},
    /* an integer is digits, with a '-' at most: space or '+' before them
     * was accepted (strtoll skips them) while space after was refused */
    {"--port= 7", NULL, NULL, {"port: bad value ' 7'", "flag --port"}},
    {"--port=+7", NULL, NULL, {"port: bad value '+7'", "[0, 65535]"}},
    {NULL, "ATTND_QUEUE_DEPTH=\t5", NULL, {"queue_depth", "ATTND_QUEUE_DEPTH"}},
    {"--max-body-bytes=1e99", NULL, NULL, {"max_body_bytes", "suffix"}},
    {"--max-body-bytes=9223372036854775807K",
     NULL,
     NULL,
     {"max_body_bytes", "[1024, 1099511627776]"}},
    /* backend and precision take their words wherever they are set, and a
     * bad one names the file and line (it named neither) */
    {NULL,
     NULL,
     "port = 1\nbackend = gpu\n",
     {"backend: bad value 'gpu'", ":2]"}},
    {NULL, NULL, "precision = fp16\n", {"expected fp32 or bf16", ":1]"}},
    {NULL,
     "ATTND_BACKEND=CPU",
     NULL,
     {"expected auto, cpu or cuda", "ATTND_BACKEND"}},
    /* a key set twice in the file: the second line silently won */
    {NULL,
     NULL,
     "port = 1\nqueue_depth = 2\nport = 3\n",
     {"port: set again [", ":3]: first set at line 1"}},
    {NULL, NULL, "port = 1\nPORT = 1\n", {"port: set again", ":2"}},
    /* a check between two keys names where each was set (it named
     * neither) */
    {NULL,
     NULL,
     "max_timeout_ms = 100\n",
     {"default_timeout_ms: 60000 [default] is above max_timeout_ms 100 [",
      ":1]"}},
    {NULL,
     "ATTND_SESSION_TTL_S=90000",
     NULL,
     {"session_ttl_s: 90000 [ATTND_SESSION_TTL_S]",
      "session_max_ttl_s 86400 [default]"}},
    {"--kv-cache-bytes=1G",
     NULL,
     "\nmax_memory_bytes = 1G\n",
     {"kv_cache_bytes: 1073741824 [flag --kv-cache-bytes] leaves",
      ":2] to requests"}},
    /* host is checked as it is read, naming its source: a bad one failed
     * only at bind, with exit status 1 and no source */
    {"--host=bad host!",
     NULL,
     NULL,
     {"host: bad value 'bad host!' [flag --host]: expected an IP address",
      "or a host name"}},
    {NULL, NULL, "\nhost = \"\"\n", {"host: bad value ''", ":2]"}},
    {NULL, "ATTND_HOST=-lead.example", NULL, {"host: bad value", "ATTND_HOST"}},
    {"--host=[::1]", NULL, NULL, {"host: bad value '[::1]'", "--host"}},
    {"--host=a..b", NULL, NULL, {"host: bad value 'a..b'", "--host"}},
    {"--host=::1::2", NULL, NULL, {"host: bad value '::1::2'", "--host"}},
    {"--host=a-b-c-d-e-f-g-h-i-j-k-l-m-n-o-p-q-r-s-t-u-v-w-x-y-z-0-1-2-3-4-5-6",
     NULL,
     NULL,
     {"host: bad value", "--host"}},
    /* the lists the security modules parse, and the TLS pair, are checked
     * as the configuration loads, naming their source: each failed only
     * at start (exit status 1, no source; TLS after the layers loaded) */
    {"--api-keys=good,bad key",
     NULL,
     NULL,
     {"api_keys: key 2 has a character outside", "[flag --api-keys]"}},
    {NULL,
     "ATTND_CORS_ALLOW_ORIGINS=https://a.example,not a url",
     NULL,
     {"cors_allow_origins: entry 2 'not a url' is not an origin",
      "[ATTND_CORS_ALLOW_ORIGINS]"}},
    {NULL,
     NULL,
     "port = 1\ntls_cert_file = /x/cert.pem\n",
     {"tls_cert_file and tls_key_file go together: tls_cert_file [", ":2] is "
                                                                     "set"}},
    {"--tls-key-file=/k.pem",
     NULL,
     NULL,
     {"tls_key_file [flag --tls-key-file] is set", "tls_cert_file is not"}},
    /* a public path that is not a path never matches: probes got 401 */
    {"--public-paths=/healthz,readyz",
     NULL,
     NULL,
     {"public_paths: entry 2 'readyz' is not a path (expected /...)",
      "[flag --public-paths]"}},
    /* --config without its file: it started on the defaults */
    {"--config", NULL, NULL, {"--config", "needs a value"}},
    {"--config=", NULL, NULL, {"--config", "needs a value"}},
};

START_TEST(test_bad_values) {
  attnd_config_t c;
  char msg[512] = "", conf[128];
  char *argv[4] = {"attnd", NULL, NULL, NULL}, *envp[2] = {NULL, NULL};
  char *path = NULL;
  int a = 1;
  if (bad[_i].arg)
    argv[a++] = bad[_i].arg;
  if (bad[_i].env)
    envp[0] = bad[_i].env;
  if (bad[_i].file) {
    path = write_tmp(bad[_i].file);
    snprintf(conf, sizeof conf, "--config=%s", path);
    argv[a++] = conf;
  }
  ck_assert_int_eq(load(&c, argv, envp, msg, sizeof msg), -1);
  for (int k = 0; k < 2; k++)
    ck_assert_msg(strstr(msg, bad[_i].want[k]), "'%s' lacks '%s'", msg,
                  bad[_i].want[k]);
  if (path)
    unlink(path);
}
END_TEST

/* --help (and the man page made from it) documents every flag: the four
 * that are not keys, each key with its default and the values it takes
 * (as the message for a bad value states them, so that the two cannot
 * differ), and the exit statuses. Bugs: --version, -h and the exit
 * statuses missing from --help; a key's range in no document. */
START_TEST(test_usage) {
  char *text = usage_text();
  static const char *const plain[] = {
      "\n  --config FILE ", "\n  --print-config ", "\n  --help ",
      "(also -h)",          "\n  --version ",      "\nexit status: 0 "};
  for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++)
    ck_assert_msg(strstr(text, plain[i]), "--help lacks '%s'", plain[i]);
  /* each key's line: its help then "(default D; VALUES)" */
  attnd_config_t def;
  char msg[512], *argv0[] = {"attnd", NULL}, *envp[] = {NULL};
  ck_assert_int_eq(load(&def, argv0, envp, msg, sizeof msg), 0);
  char *printed = printed_config(&def);
  int checked = 0;
  for (char *line = strtok(printed, "\n"); line; line = strtok(NULL, "\n")) {
    char key[64], flag[80], arg[96];
    if (sscanf(line, "%63s =", key) != 1 || key[0] == '#')
      continue;
    snprintf(flag, sizeof flag, "\n  --%s", key);
    for (char *c = flag; *c; c++)
      *c = *c == '_' ? '-' : *c;
    char *at = strstr(text, flag);
    ck_assert_msg(at != NULL, "--help lacks %s", flag + 3);
    char *end = strstr(at + 1, "\n  --");
    end = end ? end : at + strlen(at);
    /* a value no key takes: the message names what they do take */
    snprintf(arg, sizeof arg, "%s=\x01", flag + 3);
    attnd_config_t c;
    char *argv[] = {"attnd", arg, NULL};
    if (load(&c, argv, envp, msg, sizeof msg) == 0)
      continue; /* a string key: any text */
    /* a list its module parses names the entry at fault; a TLS file
     * alone, its missing partner */
    char spaced[70];
    snprintf(spaced, sizeof spaced, " %s ", key);
    if (strstr(" api_keys public_paths cors_allow_origins tls_cert_file "
               "tls_key_file ",
               spaced)) {
      ck_assert_msg(strstr(msg, key) && strstr(msg, "[flag --"), "%s", msg);
      continue;
    }
    char *values = strstr(msg, ": expected ");
    ck_assert_msg(values != NULL, "%s", msg);
    char want[512];
    snprintf(want, sizeof want, "; %s)\n", values + 11);
    char *hit = strstr(at, want);
    ck_assert_msg(hit && hit < end, "--help's %s lacks '%s'", flag + 3, want);
    checked++;
  }
  ck_assert_int_ge(checked, 30);
  free(printed);
  free(text);
}
END_TEST

/* --help and --version answer whatever the configuration holds: they
 * read none of it. --print-config shows the configuration, so a bad value
 * still stops it. Bug: `attnd --version` exits 2 on a bad ATTND_PORT (a
 * Kubernetes service link) or a config file that is not there. */
START_TEST(test_help_reads_nothing) {
  attnd_config_t c;
  attnd_config_load_t how;
  char msg[256] = "";
  char *bad_env[] = {"ATTND_PORT=tcp://10.96.0.10:8080", NULL};
  char *version[] = {"attnd", "--version", NULL};
  ck_assert_msg(
      attnd_config_load(&c, &how, 2, version, bad_env, 4, msg, sizeof msg) == 0,
      "%s", msg);
  ck_assert_int_eq(how.version, 1);
  char *help[] = {"attnd", "--config", "/nonexistent/attnd.conf",
                  "-h",    "--port=x", NULL};
  ck_assert_msg(
      attnd_config_load(&c, &how, 5, help, bad_env, 4, msg, sizeof msg) == 0,
      "%s", msg);
  ck_assert_int_eq(how.help, 1);
  char *print[] = {"attnd", "--print-config", NULL};
  ck_assert_int_eq(
      attnd_config_load(&c, &how, 2, print, bad_env, 4, msg, sizeof msg), -1);
  ck_assert_msg(strstr(msg, "ATTND_PORT"), "%s", msg);
}
END_TEST

/* The defaults the docs quote in prose, "`key` (32K)" or "`key` is 32K",
 * are the table's: a default changed in config.c alone fails here. The
 * keys come from --print-config of the defaults, their values resolved
 * (auto keys print as auto, and are not quoted so). */
START_TEST(test_docs_quote_defaults) {
  attnd_config_t def;
  char msg[256], *argv0[] = {"attnd", NULL}, *envp[] = {NULL};
  ck_assert_int_eq(load(&def, argv0, envp, msg, sizeof msg), 0);
  char *printed = printed_config(&def);
  glob_t g;
  ck_assert_int_eq(glob("docs/*.md", 0, NULL, &g), 0);
  ck_assert_int_eq(glob("README.md", GLOB_APPEND, NULL, &g), 0);
  int quoted = 0;
  for (size_t d = 0; d < g.gl_pathc; d++) {
    FILE *doc = fopen(g.gl_pathv[d], "r");
    ck_assert_ptr_nonnull(doc);
    char *text = NULL;
    size_t cap = 0;
    ssize_t n;
    for (int lineno = 1; (n = getline(&text, &cap, doc)) > 0; lineno++) {
      for (char *p = strchr(text, '`'); p; p = strchr(p + 1, '`')) {
        char key[64];
        long long v;
        int used = 0;
        if (sscanf(p, "`%63[a-z_]` (%lld%n", key, &v, &used) != 2 &&
            sscanf(p, "`%63[a-z_]` is %lld%n", key, &v, &used) != 2)
          continue;
        const char *u = p + used;
        long long mult = *u == 'K'   ? 1 << 10
                         : *u == 'M' ? 1 << 20
                         : *u == 'G' ? 1 << 30
                                     : 1;
        u += mult > 1;
        /* "(40 KB of headers)" is a size, not the default */
        if (!strchr(");,.", *u) &&
            !(*u == ' ' && !isalpha((unsigned char)u[1])))
          continue;
        char line[96];
        snprintf(line, sizeof line, "\n%s = ", key);
        char *at = strstr(printed, line);
        if (at == NULL) /* not a key */
          continue;
        long long want;
        int end = 0;
        at += strlen(line);
        if (sscanf(at, "%lld%n", &want, &end) != 1 || at[end] != '\n')
          continue; /* auto, or a string */
        ck_assert_msg(v * mult == want,
                      "%s:%d quotes %s as %lld, the default is %lld",
                      g.gl_pathv[d], lineno, key, v * mult, want);
        quoted++;
      }
    }
    free(text);
    fclose(doc);
  }
  globfree(&g);
  free(printed);
  ck_assert_int_ge(quoted, 5);
}
END_TEST

/* config/attnd.conf names every key, and its values are the defaults. */
START_TEST(test_shipped_file_is_the_defaults) {
  attnd_config_t def, file;
  char msg[256];
  char *argv0[] = {"attnd", NULL}, *envp[] = {NULL};
  char *argv1[] = {"attnd", "--config", "config/attnd.conf", NULL};
  ck_assert_int_eq(load(&def, argv0, envp, msg, sizeof msg), 0);
  ck_assert_msg(load(&file, argv1, envp, msg, sizeof msg) == 0, "%s", msg);
  ck_assert(memcmp(&def, &file, sizeof def) == 0);

  char *printed = printed_config(&def);
  /* the whole file, however long its comments grow */
  char *text = tu_read_file_or_fail("config/attnd.conf", NULL);
  int keys = 0;
  for (char *line = strtok(printed, "\n"); line; line = strtok(NULL, "\n")) {
    char key[64];
    ck_assert_int_eq(sscanf(line, "%63s =", key), 1);
    char pat[80];
    snprintf(pat, sizeof pat, "\n%s = ", key);
    ck_assert_msg(strstr(text, pat), "config/attnd.conf lacks %s", key);
    keys++;
  }
  ck_assert_int_ge(keys, 19);
  free(printed);
  free(text);
}
END_TEST

START_TEST(test_print_round_trips) {
  /* what --print-config prints reads back as the same configuration */
  attnd_config_t a, b;
  char msg[256];
  char *argv[] = {"attnd", "--port=9", "--queue-depth=3", "--host=::1", NULL},
       *envp[] = {NULL};
  ck_assert_int_eq(load(&a, argv, envp, msg, sizeof msg), 0);
  char *path = write_tmp("");
  FILE *f = fopen(path, "w");
  attnd_config_print(&a, NULL, f);
  fclose(f);
  char conf[128];
  snprintf(conf, sizeof conf, "--config=%s", path);
  char *argv2[] = {"attnd", conf, NULL};
  ck_assert_msg(load(&b, argv2, envp, msg, sizeof msg) == 0, "%s", msg);
  ck_assert(memcmp(&a, &b, sizeof a) == 0);
  unlink(path);
}
END_TEST

/* --print-config with API keys given each way: inline by flag, by the
 * environment, in the config file, and by api_keys_file. Its output,
 * written to a file, loads; as it is, it gives the same values but
 * api_keys, which it does not echo (none of the keys' text is in it), and
 * the auth of a start builds from it (no key, or api_keys_file's two).
 * With the keys given again as its comment says, it gives the same values
 * as the first load, and two keys. Catches: a placeholder printed as the
 * value (api_keys = "<2 keys>" loads as the text '<2 keys>', and the start
 * refuses it), keys echoed, and a comment that says where they came from
 * wrongly. */
enum { KEYS_FLAG, KEYS_ENV, KEYS_CONF, KEYS_FILE, N_KEYS_WAYS };

/* The keys a start would check with cfg: attnd_auth_init as serve.c
 * calls it. Returns their count, or -1 with msg set. */
static int start_keys(const attnd_config_t *cfg, char *msg, size_t n) {
  attnd_auth_t a;
  int r = attnd_auth_init(&a, cfg->api_keys, cfg->api_keys_file,
                          cfg->public_paths, msg, n);
  int count = r < 0 ? -1 : (int)attnd_auth_count(&a);
  attnd_auth_free(&a);
  return count;
}

START_TEST(test_print_round_trips_keys) {
  static const char *const from[N_KEYS_WAYS] = {
      ", set by flag --api-keys, not echoed",
      ", set by ATTND_API_KEYS, not echoed", ":2, not echoed", NULL};
  char keyfile[64] = "/tmp/attnd-keys-XXXXXX", msg[512];
  int fd = mkstemp(keyfile);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(write(fd, "key-file-one\nkey-file-two\n", 26), 26);
  close(fd);
  char conf_text[256];
  snprintf(conf_text, sizeof conf_text, "port = 9\n%s\n",
           _i == KEYS_CONF   ? "api_keys = \"key-one,key-two\""
           : _i == KEYS_FILE ? "api_keys_file = \"\""
                             : "# no keys here");
  char first_conf[64];
  snprintf(first_conf, sizeof first_conf, "--config=%s", write_tmp(conf_text));
  char *argv[8] = {"attnd", first_conf, "--queue-depth", "3"},
       *envp[2] = {NULL};
  int argc = 4;
  if (_i == KEYS_FLAG) {
    argv[argc++] = "--api-keys";
    argv[argc++] = "key-one,key-two";
  } else if (_i == KEYS_ENV) {
    envp[0] = "ATTND_API_KEYS=key-one,key-two";
  } else if (_i == KEYS_FILE) {
    argv[argc++] = "--api-keys-file";
    argv[argc++] = keyfile;
  }
  argv[argc] = NULL;
  attnd_config_t a;
  attnd_config_load_t how;
  ck_assert_msg(
      attnd_config_load(&a, &how, argc, argv, envp, 4, msg, sizeof msg) == 0,
      "%s", msg);
  ck_assert_int_eq(start_keys(&a, msg, sizeof msg), 2);

  char printed[8192] = "";
  FILE *f = fmemopen(printed, sizeof printed, "w");
  attnd_config_print(&a, &how, f);
  fclose(f);
  ck_assert_msg(strstr(printed, "key-") == NULL, "a key echoed:\n%s", printed);
  if (from[_i]) {
    char want[160];
    snprintf(want, sizeof want, "\n# api_keys: 2 keys%s%s%s. ",
             _i == KEYS_CONF ? ", set by " : "",
             _i == KEYS_CONF ? first_conf + 9 : "", from[_i]);
    ck_assert_msg(strstr(printed, want), "no '%s' in:\n%s", want, printed);
    ck_assert_msg(strstr(printed, "Without them, this file needs no key.\n"),
                  "%s", printed);
  }
  char *path = write_tmp(printed), conf[64];
  snprintf(conf, sizeof conf, "--config=%s", path);

  /* as it is */
  attnd_config_t b, want = a;
  if (from[_i])
    memset(want.api_keys, 0, sizeof want.api_keys);
  char *argv2[] = {"attnd", conf, NULL}, *noenv[] = {NULL};
  ck_assert_msg(load(&b, argv2, noenv, msg, sizeof msg) == 0, "%s\n%s", msg,
                printed);
  ck_assert_msg(memcmp(&b, &want, sizeof b) == 0,
                "read back to other values (api_keys '%s'):\n%s", b.api_keys,
                printed);
  ck_assert_msg(start_keys(&b, msg, sizeof msg) == (from[_i] ? 0 : 2), "%s\n%s",
                msg, printed);

  /* with the keys given again: the flag, or the environment */
  if (from[_i]) {
    char *argv3[] = {"attnd", conf, "--api-keys", "key-one,key-two", NULL};
    char *env3[] = {"ATTND_API_KEYS=key-one,key-two", NULL};
    ck_assert_msg(load(&b, _i == KEYS_FLAG ? argv3 : argv2,
                       _i == KEYS_FLAG ? noenv : env3, msg, sizeof msg) == 0,
                  "%s", msg);
    ck_assert_msg(memcmp(&b, &a, sizeof b) == 0,
                  "with the keys again, other values:\n%s", printed);
    ck_assert_int_eq(start_keys(&b, msg, sizeof msg), 2);
  }
  unlink(path);
  unlink(first_conf + 9);
  unlink(keyfile);
}
END_TEST

/* Strings print quoted and escaped, and read back byte for byte: a quote,
 * a backslash, '#', control bytes, edge spaces and UTF-8 survive, and a
 * newline cannot forge a line of its own. */
START_TEST(test_print_quotes_strings) {
  static const char *hostile[] = {"a\"b",
                                  "back\\slash",
                                  "hash # not a comment",
                                  " edge spaces ",
                                  "line\nport = 1",
                                  "cr\rtab\tbell\a\x7f",
                                  "caf\xc3\xa9 \\x41 \\n",
                                  "\"",
                                  ""};
  for (size_t i = 0; i < sizeof hostile / sizeof hostile[0]; i++) {
    attnd_config_t a, b;
    char msg[256];
    char *argv[] = {"attnd",        "--layers",         (char *)hostile[i],
                    "--access-log", (char *)hostile[i], NULL},
         *envp[] = {NULL};
    ck_assert_int_eq(load(&a, argv, envp, msg, sizeof msg), 0);
    char printed[8192] = "";
    FILE *f = fmemopen(printed, sizeof printed, "w");
    attnd_config_print(&a, NULL, f);
    fclose(f);
    /* one line a key: the value's newline is escaped */
    int lines = 0;
    for (const char *c = printed; *c; c++)
      lines += *c == '\n';
    attnd_config_t def;
    char *argv0[] = {"attnd", NULL};
    ck_assert_int_eq(load(&def, argv0, envp, msg, sizeof msg), 0);
    char plain[8192] = "";
    f = fmemopen(plain, sizeof plain, "w");
    attnd_config_print(&def, NULL, f);
    fclose(f);
    int want = 0;
    for (const char *c = plain; *c; c++)
      want += *c == '\n';
    ck_assert_int_eq(lines, want);

    char *path = write_tmp(printed);
    char conf[128];
    snprintf(conf, sizeof conf, "--config=%s", path);
    char *argv2[] = {"attnd", conf, NULL};
    ck_assert_msg(load(&b, argv2, envp, msg, sizeof msg) == 0, "%s", msg);
    ck_assert_str_eq(b.layers, hostile[i]);
    ck_assert_str_eq(b.access_log, hostile[i]);
    ck_assert_int_eq(b.port, 8080);
    unlink(path);
  }
}
END_TEST

/* The value forms a file may use: unquoted (to '#', trimmed), quoted with
 * escapes and a trailing comment, and quoted with a '#' inside. */
START_TEST(test_file_value_forms) {
  char *path = write_tmp("layers = plain value  # comment\n"
                         "  # an indented comment\n"
                         "access_log = \"x # y\\t\\\"z\\x41\"  # comment\n"
                         "blas_coretype=\"\"\n");
  char conf[128];
  snprintf(conf, sizeof conf, "--config=%s", path);
  attnd_config_t c;
  char msg[256];
  char *argv[] = {"attnd", conf, NULL}, *envp[] = {NULL};
  ck_assert_msg(load(&c, argv, envp, msg, sizeof msg) == 0, "%s", msg);
  ck_assert_str_eq(c.layers, "plain value");
  ck_assert_str_eq(c.access_log, "x # y\t\"zA");
  ck_assert_str_eq(c.blas_coretype, "");
  unlink(path);
}
END_TEST

/* Files as editors and accidents leave them, byte for byte: CRLF line
 * ends, a UTF-8 byte order mark (allowed at the file's start only), NUL
 * bytes, a line of 1 MB. Each loads to port 7001 or fails naming the line
 * and the cause. Bugs: the mark read as part of the first key (refused as
 * "unknown key 'port'", the mark invisible); a NUL byte reported as a
 * line longer than 32 KB, or, on the last line, ending it there with the
 * rest dropped unseen. */
static const struct {
  const char *text;
  size_t len;          /* 0: strlen */
  const char *want[2]; /* NULL: loads */
} files[] = {
    {"port = 7001\r\nqueue_depth = 5\r\nhost = \"a\"\r\n", 0, {NULL}},
    {"\xef\xbb\xbfport = 7001\nqueue_depth = 5\n", 0, {NULL}},
    {"\xef\xbb\xbf# a comment\r\nport = 7001\r\n", 0, {NULL}},
    {"queue_depth = 5\n\xef\xbb\xbfport = 7001\n",
     0,
     {"unknown key '\\xef\\xbb\\xbfport'", ":2"}},
    {"port = 7001\0 # junk\nqueue_depth = 5\n", 30, {"a NUL byte", ":1"}},
    {"queue_depth = 5\nport = 7001\0 99", 31, {"a NUL byte", ":2"}},
    {"host = \"a\0b\"\n", 13, {"a NUL byte", ":1"}},
    {NULL, 0, {"a line longer than", ":2"}}, /* 1 MB, written below */
};

START_TEST(test_file_bytes) {
  char path[64] = "/tmp/attnd-conf-XXXXXX", conf[96];
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  FILE *f = fdopen(fd, "w");
  if (files[_i].text) {
    size_t n = files[_i].len ? files[_i].len : strlen(files[_i].text);
    ck_assert_uint_eq(fwrite(files[_i].text, 1, n, f), n);
  } else {
    fputs("port = 7001\nhost = ", f);
    for (int k = 0; k < 1 << 20; k++)
      fputc('a', f);
    fputc('\n', f);
  }
  fclose(f);
  snprintf(conf, sizeof conf, "--config=%s", path);
  attnd_config_t c;
  char msg[512] = "";
  char *argv[] = {"attnd", conf, NULL}, *envp[] = {NULL};
  int r = load(&c, argv, envp, msg, sizeof msg);
  unlink(path);
  if (files[_i].want[0] == NULL) {
    ck_assert_msg(r == 0, "%s", msg);
    ck_assert_int_eq(c.port, 7001);
    return;
  }
  ck_assert_int_eq(r, -1);
  for (int k = 0; k < 2; k++)
    ck_assert_msg(strstr(msg, files[_i].want[k]), "'%s' lacks '%s'", msg,
                  files[_i].want[k]);
}
END_TEST

/* backend and precision take their words only; backend = cuda is refused
 * at start, with the reason, where the cuda backend cannot run. */
START_TEST(test_backend_keys) {
  attnd_config_t c;
  char msg[256];
  char *envp[] = {NULL};
  char *def[] = {"attnd", NULL};
  ck_assert_msg(load(&c, def, envp, msg, sizeof msg) == 0, "%s", msg);
  ck_assert_str_eq(c.backend, "cpu");
  ck_assert_str_eq(c.precision, "fp32");
  char *cpu[] = {"attnd", "--backend", "auto", "--precision", "bf16", NULL};
  ck_assert_msg(load(&c, cpu, envp, msg, sizeof msg) == 0, "%s", msg);
  ck_assert_str_eq(c.backend, "auto");
  ck_assert_str_eq(c.precision, "bf16");
  char *gpu[] = {"attnd", "--backend", "gpu", NULL};
  ck_assert_int_ne(load(&c, gpu, envp, msg, sizeof msg), 0);
  ck_assert_msg(strstr(msg, "backend") && strstr(msg, "gpu"), "%s", msg);
  char *half[] = {"attnd", "--precision", "fp16", NULL};
  ck_assert_int_ne(load(&c, half, envp, msg, sizeof msg), 0);
  ck_assert_msg(strstr(msg, "precision") && strstr(msg, "fp16"), "%s", msg);
  attn_cuda_info_t ci;
  attn_cuda_info(&ci);
  /* the GPU's budget: auto is 9/10 of its memory, 0 without one */
  ck_assert_msg(load(&c, def, envp, msg, sizeof msg) == 0, "%s", msg);
  ck_assert_int_eq(c.max_device_memory_bytes,
                   ci.usable ? (int64_t)(ci.memory_bytes / 10 * 9) : 0);
  char *dev[] = {"attnd", "--max-device-memory-bytes", "40G", NULL};
  ck_assert_msg(load(&c, dev, envp, msg, sizeof msg) == 0, "%s", msg);
  ck_assert_int_eq(c.max_device_memory_bytes, INT64_C(40) << 30);
  char *cuda[] = {"attnd", "--backend", "cuda", NULL};
  int rc = load(&c, cuda, envp, msg, sizeof msg);
  if (ci.usable) {
    ck_assert_msg(rc == 0, "%s", msg);
  } else {
    ck_assert_int_ne(rc, 0);
    ck_assert_msg(strstr(msg, "backend") && strstr(msg, ci.status), "%s", msg);
  }
}
END_TEST

/* pinned_memory_bytes: auto is an eighth of max_memory_bytes, at most 1G,
 * where a GPU serves, and stays auto (none here) where none does, so that a
 * printed config keeps auto for another host; off is -1 and prints as off,
 * and reads back; a size; a bad value's message offers auto and off; the
 * pool with kv_cache_bytes must leave requests some of max_memory_bytes.
 * Bugs: off read as 0 (auto), auto resolved to a size without a GPU, or
 * to off (a printed config then turns the pool off on a GPU host), the
 * budget check missing. */
START_TEST(test_pinned_key) {
  attnd_config_t c, d;
  char msg[256];
  char *envp[] = {NULL};
  attn_cuda_info_t ci;
  attn_cuda_info(&ci);
  char *cpu[] = {"attnd", "--max-memory-bytes", "64M", NULL};
  ck_assert_msg(load(&c, cpu, envp, msg, sizeof msg) == 0, "%s", msg);
  /* backend cpu: none */
  ck_assert_int_eq(c.pinned_memory_bytes, ATTND_CONFIG_AUTO);
  char *aut[] = {"attnd", "--backend", "auto", "--max-memory-bytes",
                 "64M",   NULL};
  ck_assert_msg(load(&c, aut, envp, msg, sizeof msg) == 0, "%s", msg);
  ck_assert_int_eq(c.pinned_memory_bytes,
                   ci.usable ? 8 << 20 : ATTND_CONFIG_AUTO);
  char *big[] = {"attnd", "--backend", "auto", "--max-memory-bytes",
                 "64G",   NULL};
  ck_assert_msg(load(&c, big, envp, msg, sizeof msg) == 0, "%s", msg);
  ck_assert_int_eq(c.pinned_memory_bytes,
                   ci.usable ? 1 << 30 : ATTND_CONFIG_AUTO);
  char *off[] = {"attnd", "--pinned-memory-bytes", "off", NULL};
  ck_assert_msg(load(&c, off, envp, msg, sizeof msg) == 0, "%s", msg);
  ck_assert_int_eq(c.pinned_memory_bytes, -1);
  char *path = write_tmp("");
  FILE *f = fopen(path, "w");
  attnd_config_print(&c, NULL, f);
  fclose(f);
  f = fopen(path, "r");
  char line[256];
  int said = 0;
  while (fgets(line, sizeof line, f))
    said += strcmp(line, "pinned_memory_bytes = off\n") == 0;
  fclose(f);
  ck_assert_int_eq(said, 1);
  char conf[128];
  snprintf(conf, sizeof conf, "--config=%s", path);
  char *again[] = {"attnd", conf, NULL};
  ck_assert_msg(load(&d, again, envp, msg, sizeof msg) == 0, "%s", msg);
  ck_assert_int_eq(d.pinned_memory_bytes, -1);
  unlink(path);
  char *size[] = {"attnd", "--pinned-memory-bytes", "256M", NULL};
  ck_assert_msg(load(&c, size, envp, msg, sizeof msg) == 0, "%s", msg);
  ck_assert_int_eq(c.pinned_memory_bytes, 256 << 20);
  char *lots[] = {"attnd", "--pinned-memory-bytes", "lots", NULL};
  ck_assert_int_ne(load(&c, lots, envp, msg, sizeof msg), 0);
  ck_assert_msg(strstr(msg, "pinned_memory_bytes") && strstr(msg, "or auto") &&
                    strstr(msg, "or off"),
                "%s", msg);
  char *full[] = {"attnd", "--max-memory-bytes",    "64M", "--kv-cache-bytes",
                  "16M",   "--pinned-memory-bytes", "48M", NULL};
  ck_assert_int_ne(load(&c, full, envp, msg, sizeof msg), 0);
  ck_assert_msg(strstr(msg, "pinned_memory_bytes: 50331648"), "%s", msg);
}
END_TEST

/* A literal 0 for each key that also takes auto, from each source: never
 * auto. Where 0 means nothing (no worker, no HTTP thread, no memory for
 * requests) it is refused, the message naming the key, the value, its
 * source and a range from 1; where it means none (kv_cache_bytes: no
 * sessions; max_device_memory_bytes: no GPU memory for cuda requests;
 * pinned_memory_bytes: no pinned pool) it is held as 0, and
 * --print-config writes 0, which reads back to the same configuration.
 * The table holds every key --help offers auto for. Bug: auto was held as
 * 0, so that a 0 was auto: --kv-cache-bytes 0 gave a quarter of
 * max_memory_bytes, --workers 0 a worker per CPU, and on a GPU host
 * --max-device-memory-bytes 0 nine tenths of its memory. */
static const struct {
  const char *key;
  size_t off; /* where its value is, for a key that holds 0 */
  int none;   /* 1: 0 means none; 0: refused */
} zero_keys[] = {
    {"workers", 0, 0},
    {"threads_per_request", 0, 0},
    {"max_threads_per_request", 0, 0},
    {"http_threads", 0, 0},
    {"max_memory_bytes", 0, 0},
    {"max_device_memory_bytes",
     offsetof(attnd_config_t, max_device_memory_bytes), 1},
    {"pinned_memory_bytes", offsetof(attnd_config_t, pinned_memory_bytes), 1},
    {"kv_cache_bytes", offsetof(attnd_config_t, kv_cache_bytes), 1},
};
enum { ZERO_FLAG, ZERO_ENV, ZERO_FILE, N_ZERO_WAYS };
#define N_ZERO_KEYS (sizeof zero_keys / sizeof zero_keys[0])

START_TEST(test_zero_is_not_auto) {
  const char *key = zero_keys[_i / N_ZERO_WAYS].key;
  int way = _i % N_ZERO_WAYS, none = zero_keys[_i / N_ZERO_WAYS].none;
  char arg[96], env[96], from[96], conf[128], text[96], *path = NULL;
  char *argv[3] = {"attnd", NULL, NULL}, *envp[2] = {NULL, NULL};
  if (way == ZERO_FLAG) {
    snprintf(arg, sizeof arg, "--%s=0", key);
    for (char *c = arg; *c; c++)
      *c = *c == '_' ? '-' : *c;
    snprintf(from, sizeof from, "[flag %.*s]", (int)strcspn(arg, "="), arg);
    argv[1] = arg;
  } else if (way == ZERO_ENV) {
    snprintf(env, sizeof env, "ATTND_%s=0", key);
    for (char *c = env; *c; c++)
      *c = (char)toupper((unsigned char)*c);
    snprintf(from, sizeof from, "[%.*s]", (int)strcspn(env, "="), env);
    envp[0] = env;
  } else {
    snprintf(text, sizeof text, "# a comment\n%s = 0\n", key);
    path = write_tmp(text);
    snprintf(conf, sizeof conf, "--config=%s", path);
    snprintf(from, sizeof from, "[%s:2]", path);
    argv[1] = conf;
  }
  attnd_config_t c, d;
  char msg[512] = "";
  int r = load(&c, argv, envp, msg, sizeof msg);
  if (path) /* write_tmp's path is its next one's too */
    unlink(path);
  if (!none) {
    char want[256];
    snprintf(want, sizeof want,
             "%s: bad value '0' %s: expected an integer in [1, ", key, from);
    ck_assert_msg(r == -1 && strstr(msg, want), "%s = 0: %d '%s', not '%s...'",
                  key, r, msg, want);
  } else {
    ck_assert_msg(r == 0, "%s = 0: %s", key, msg);
    int64_t v;
    memcpy(&v, (const char *)&c + zero_keys[_i / N_ZERO_WAYS].off, sizeof v);
    ck_assert_msg(v == 0, "%s = 0 is held as %lld", key, (long long)v);
    char *printed = printed_config(&c), line[96];
    snprintf(line, sizeof line, "\n%s = 0\n", key);
    ck_assert_msg(strstr(printed, line), "%s = 0 prints as:\n%s", key, printed);
    char *back = write_tmp(printed), bconf[128];
    snprintf(bconf, sizeof bconf, "--config=%s", back);
    char *again[] = {"attnd", bconf, NULL}, *none_env[] = {NULL};
    ck_assert_msg(load(&d, again, none_env, msg, sizeof msg) == 0, "%s", msg);
    unlink(back);
    ck_assert_msg(memcmp(&c, &d, sizeof c) == 0,
                  "%s = 0 printed reads back to another configuration", key);
    free(printed);
  }
  /* every key --help offers auto for is in the table: their values' text
   * ends "..., or auto)" or "..., or auto, or off)" */
  char *usage = usage_text();
  size_t autos = 0;
  for (const char *p = usage; (p = strstr(p, ", or auto")); p++)
    autos += p[9] == ')' || strncmp(p + 9, ", or off)", 9) == 0;
  free(usage);
  ck_assert_uint_eq(autos, N_ZERO_KEYS);
}
END_TEST

/* ---- cgroup limits ------------------------------------------------------- */

/* The fixture: a directory standing for "/", made once per TCase in Check's
 * parent process (unchecked), so that it is removed even when a test
 * fails; before each test (checked) its sys/fs/cgroup is emptied and made
 * again with the version 1 subdirectories, and the case writes the files it
 * needs. */
static char cg_root[64];

static int cg_remove(const char *path, const struct stat *st, int flag,
                     struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

static void cg_make_root(void) {
  strcpy(cg_root, "/tmp/attnd-cgroup-XXXXXX");
  if (mkdtemp(cg_root) == NULL)
    ck_abort_msg("mkdtemp %s", cg_root);
}

static void cg_remove_root(void) {
  if (cg_root[0])
    nftw(cg_root, cg_remove, 16, FTW_DEPTH | FTW_PHYS);
  cg_root[0] = 0;
}

static void cg_fresh(void) {
  char path[256];
  snprintf(path, sizeof path, "%s/sys", cg_root);
  nftw(path, cg_remove, 16, FTW_DEPTH | FTW_PHYS);
  snprintf(path, sizeof path, "%s/proc", cg_root);
  nftw(path, cg_remove, 16, FTW_DEPTH | FTW_PHYS);
  static const char *const dirs[] = {"sys",
                                     "sys/fs",
                                     "sys/fs/cgroup",
                                     "sys/fs/cgroup/cpu",
                                     "sys/fs/cgroup/cpuset",
                                     "sys/fs/cgroup/memory"};
  for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
    snprintf(path, sizeof path, "%s/%s", cg_root, dirs[i]);
    ck_assert_msg(mkdir(path, 0700) == 0, "mkdir %s", path);
  }
}

/* Writes `text` to <cg_root>/sys/fs/cgroup/<rel>. */
static void cg_put(const char *rel, const char *text) {
  char path[256];
  snprintf(path, sizeof path, "%s/sys/fs/cgroup/%s", cg_root, rel);
  FILE *f = fopen(path, "w");
  ck_assert_msg(f != NULL, "cannot write %s", path);
  fputs(text, f);
  fclose(f);
}

/* Makes <cg_root>/sys/fs/cgroup/<rel> and the directories above it. */
static void cg_mkdirs(const char *rel) {
  char path[512];
  int base = snprintf(path, sizeof path, "%s/sys/fs/cgroup/", cg_root);
  snprintf(path + base, sizeof path - (size_t)base, "%s", rel);
  for (char *p = path + base;; p++) {
    if (*p == '/' || *p == 0) {
      char c = *p;
      *p = 0;
      ck_assert_msg(mkdir(path, 0700) == 0 || errno == EEXIST, "mkdir %s",
                    path);
      *p = c;
      if (c == 0)
        break;
    }
  }
}

/* Writes `text` as <cg_root>/proc/self/cgroup. */
static void cg_put_self(const char *text) {
  char path[256];
  snprintf(path, sizeof path, "%s/proc", cg_root);
  ck_assert(mkdir(path, 0700) == 0 || errno == EEXIST);
  snprintf(path, sizeof path, "%s/proc/self", cg_root);
  ck_assert(mkdir(path, 0700) == 0 || errno == EEXIST);
  snprintf(path, sizeof path, "%s/proc/self/cgroup", cg_root);
  FILE *f = fopen(path, "w");
  ck_assert_msg(f != NULL, "cannot write %s", path);
  fputs(text, f);
  fclose(f);
}

/* Up to four cgroup files (path under sys/fs/cgroup, text; NULL ends). */
typedef struct cg_file {
  const char *rel, *text;
} cg_file_t;

/* Each case: the files, the affinity count passed in, the CPUs expected. */
/* clang-format off */
static const struct {
  const char *name;
  cg_file_t files[4];
  int affinity, want;
} cpu_cases[] = {
    {"no cgroup files: the affinity", {{NULL, NULL}}, 8, 8},
    {"no cgroup files, affinity 0: at least 1", {{NULL, NULL}}, 0, 1},
    {"cpu.max unlimited", {{"cpu.max", "max 100000\n"}}, 8, 8},
    {"cpu.max 1.5 CPUs rounds up", {{"cpu.max", "150000 100000\n"}}, 8, 2},
    {"cpu.max 0.5 CPUs rounds up", {{"cpu.max", "50000 100000\n"}}, 8, 1},
    {"cpu.max 0.01 CPUs is still 1", {{"cpu.max", "1000 100000\n"}}, 8, 1},
    {"cpu.max exactly 3 CPUs", {{"cpu.max", "300000 100000\n"}}, 8, 3},
    {"cpu.max 3.00001 CPUs", {{"cpu.max", "300001 100000\n"}}, 8, 4},
    {"cpu.max above the affinity", {{"cpu.max", "400000 100000\n"}}, 2, 2},
    {"cpu.max huge quota, no overflow",
     {{"cpu.max", "9223372036854775807 1\n"}}, 6, 6},
    {"cpu.max garbage", {{"cpu.max", "banana\n"}}, 8, 8},
    {"cpu.max quota without period", {{"cpu.max", "150000\n"}}, 8, 8},
    {"cpu.max negative quota", {{"cpu.max", "-1 100000\n"}}, 8, 8},
    {"cpu.max zero period", {{"cpu.max", "150000 0\n"}}, 8, 8},
    {"cpu.max empty", {{"cpu.max", ""}}, 8, 8},
    {"v1 quota 1.5 CPUs",
     {{"cpu/cpu.cfs_quota_us", "150000\n"},
      {"cpu/cpu.cfs_period_us", "100000\n"}}, 8, 2},
    {"v1 quota unlimited (-1)",
     {{"cpu/cpu.cfs_quota_us", "-1\n"},
      {"cpu/cpu.cfs_period_us", "100000\n"}}, 8, 8},
    {"v1 quota without period file",
     {{"cpu/cpu.cfs_quota_us", "150000\n"}}, 8, 8},
    {"v1 garbage period",
     {{"cpu/cpu.cfs_quota_us", "150000\n"},
      {"cpu/cpu.cfs_period_us", "x\n"}}, 8, 8},
    /* version 2's file, when there, is the only one read */
    {"cpu.max unlimited hides a v1 quota",
     {{"cpu.max", "max 100000\n"},
      {"cpu/cpu.cfs_quota_us", "100000\n"},
      {"cpu/cpu.cfs_period_us", "100000\n"}}, 8, 8},
    {"cpu.max wins over v1",
     {{"cpu.max", "250000 100000\n"},
      {"cpu/cpu.cfs_quota_us", "100000\n"},
      {"cpu/cpu.cfs_period_us", "100000\n"}}, 8, 3},
    {"cpuset 0-3,6", {{"cpuset.cpus.effective", "0-3,6\n"}}, 64, 5},
    {"cpuset above the affinity",
     {{"cpuset.cpus.effective", "0-3,6\n"}}, 2, 2},
    {"cpuset one CPU", {{"cpuset.cpus.effective", "7\n"}}, 64, 1},
    {"cpuset 0-63 without newline",
     {{"cpuset.cpus.effective", "0-63"}}, 128, 64},
    {"cpuset 2-5,8-9,12",
     {{"cpuset.cpus.effective", "2-5,8-9,12\n"}}, 64, 7},
    {"cpuset garbage", {{"cpuset.cpus.effective", "all of them\n"}}, 8, 8},
    {"cpuset empty", {{"cpuset.cpus.effective", "\n"}}, 8, 8},
    {"cpuset reversed range", {{"cpuset.cpus.effective", "3-1\n"}}, 8, 8},
    {"cpuset overlapping ranges",
     {{"cpuset.cpus.effective", "0-3,2\n"}}, 8, 8},
    {"cpuset trailing comma", {{"cpuset.cpus.effective", "0-3,\n"}}, 8, 8},
    {"cpuset trailing text", {{"cpuset.cpus.effective", "0-3 x\n"}}, 8, 8},
    {"v1 cpuset", {{"cpuset/cpuset.effective_cpus", "0-2\n"}}, 8, 3},
    {"v2 cpuset garbage hides v1",
     {{"cpuset.cpus.effective", "?\n"},
      {"cpuset/cpuset.effective_cpus", "0-2\n"}}, 8, 8},
    {"quota below the cpuset",
     {{"cpu.max", "250000 100000\n"},
      {"cpuset.cpus.effective", "0-3,6\n"}}, 64, 3},
    {"cpuset below the quota",
     {{"cpu.max", "800000 100000\n"},
      {"cpuset.cpus.effective", "0-3,6\n"}}, 64, 5},
    {"affinity below both",
     {{"cpu.max", "800000 100000\n"},
      {"cpuset.cpus.effective", "0-3,6\n"}}, 4, 4},
};
/* clang-format on */
#define N_CPU_CASES (int)(sizeof cpu_cases / sizeof cpu_cases[0])

START_TEST(test_cgroup_cpus) {
  for (int k = 0; k < 4 && cpu_cases[_i].files[k].rel; k++)
    cg_put(cpu_cases[_i].files[k].rel, cpu_cases[_i].files[k].text);
  int got = attnd_cgroup_cpus_at(cg_root, cpu_cases[_i].affinity);
  ck_assert_msg(got == cpu_cases[_i].want, "%s: %d CPUs, expected %d",
                cpu_cases[_i].name, got, cpu_cases[_i].want);
}
END_TEST

#define GIB (INT64_C(1) << 30)

/* Each case: the files, and the memory expected of a 64 GiB machine. */
/* clang-format off */
static const struct {
  const char *name;
  cg_file_t files[3];
  int64_t want;
} mem_cases[] = {
    {"no cgroup files: the machine", {{NULL, NULL}}, 64 * GIB},
    {"memory.max unlimited", {{"memory.max", "max\n"}}, 64 * GIB},
    {"memory.max 512 MiB", {{"memory.max", "536870912\n"}}, 512 << 20},
    {"memory.max one byte", {{"memory.max", "1\n"}}, 1},
    {"memory.max above the machine",
     {{"memory.max", "137438953472\n"}}, 64 * GIB},
    {"memory.max garbage", {{"memory.max", "lots\n"}}, 64 * GIB},
    {"memory.max zero", {{"memory.max", "0\n"}}, 64 * GIB},
    {"memory.max negative", {{"memory.max", "-4096\n"}}, 64 * GIB},
    {"memory.max empty", {{"memory.max", ""}}, 64 * GIB},
    {"v1 limit 1 GiB",
     {{"memory/memory.limit_in_bytes", "1073741824\n"}}, GIB},
    {"v1 unlimited (2^63 rounded to a page)",
     {{"memory/memory.limit_in_bytes", "9223372036854771712\n"}},
     64 * GIB},
    {"v1 garbage", {{"memory/memory.limit_in_bytes", "unlimited\n"}},
     64 * GIB},
    /* version 2's file, when there, is the only one read */
    {"memory.max unlimited hides v1",
     {{"memory.max", "max\n"},
      {"memory/memory.limit_in_bytes", "1073741824\n"}}, 64 * GIB},
    {"memory.max wins over v1",
     {{"memory.max", "2147483648\n"},
      {"memory/memory.limit_in_bytes", "1073741824\n"}},
     2 * GIB},
};
/* clang-format on */
#define N_MEM_CASES (int)(sizeof mem_cases / sizeof mem_cases[0])

START_TEST(test_cgroup_memory) {
  for (int k = 0; k < 3 && mem_cases[_i].files[k].rel; k++)
    cg_put(mem_cases[_i].files[k].rel, mem_cases[_i].files[k].text);
  int64_t got = attnd_cgroup_memory_at(cg_root, 64 * GIB);
  ck_assert_msg(got == mem_cases[_i].want, "%s: %lld bytes, expected %lld",
                mem_cases[_i].name, (long long)got,
                (long long)mem_cases[_i].want);
}
END_TEST

/* The limits of this process's own cgroup, named by /proc/self/cgroup:
 * outside a cgroup namespace (a systemd service, a container sharing the
 * host's namespace) the mount shows the whole hierarchy, and the limits are
 * in the process's directory below it and in those above that. Each case:
 * /proc/self/cgroup, the directories, the files, and the CPUs (of 8) and
 * memory (of a 64 GiB machine) expected. */
/* clang-format off */
static const struct {
  const char *name, *self;
  const char *dirs[3];
  cg_file_t files[5];
  int want_cpus;
  int64_t want_mem;
} nested_cases[] = {
    {"v2 systemd service: its own memory.max and cpu.max",
     "0::/system.slice/attnd.service\n",
     {"system.slice/attnd.service"},
     {{"system.slice/attnd.service/memory.max", "1073741824\n"},
      {"system.slice/attnd.service/cpu.max", "200000 100000\n"},
      {"system.slice/memory.max", "max\n"},
      {"system.slice/cpu.max", "max 100000\n"}},
     2, GIB},
    {"v2 host namespace: a parent's limits bound the leaf",
     "0::/kubepods.slice/pod1/ctr\n",
     {"kubepods.slice/pod1/ctr"},
     {{"kubepods.slice/pod1/ctr/memory.max", "max\n"},
      {"kubepods.slice/pod1/memory.max", "536870912\n"},
      {"kubepods.slice/pod1/cpu.max", "50000 100000\n"},
      {"kubepods.slice/memory.max", "4294967296\n"}},
     1, 512 << 20},
    {"v2: the smallest on the way wins, wherever it is",
     "0::/a/b\n",
     {"a/b"},
     {{"a/b/memory.max", "2147483648\n"},
      {"a/memory.max", "3221225472\n"},
      {"a/b/cpu.max", "600000 100000\n"},
      {"a/cpu.max", "300000 100000\n"}},
     3, 2 * GIB},
    {"v2: the nearest cpuset",
     "0::/a/b\n",
     {"a/b"},
     {{"a/b/cpuset.cpus.effective", "0-2\n"},
      {"a/cpuset.cpus.effective", "0-5\n"},
      {"cpuset.cpus.effective", "0-7\n"}},
     3, 64 * GIB},
    {"v2 cgroup namespace (\"0::/\"): the mount's own files",
     "0::/\n",
     {NULL},
     {{"memory.max", "1073741824\n"}, {"cpu.max", "100000 100000\n"}},
     1, GIB},
    {"v1 systemd service: memory and cpu,cpuacct lines",
     "12:pids:/system.slice/attnd.service\n"
     "4:memory:/system.slice/attnd.service\n"
     "3:cpu,cpuacct:/system.slice/attnd.service\n"
     "0::/system.slice/attnd.service\n",
     {"memory/system.slice/attnd.service", "cpu/system.slice/attnd.service"},
     {{"memory/system.slice/attnd.service/memory.limit_in_bytes",
       "805306368\n"},
      {"memory/memory.limit_in_bytes", "9223372036854771712\n"},
      {"cpu/system.slice/attnd.service/cpu.cfs_quota_us", "150000\n"},
      {"cpu/system.slice/attnd.service/cpu.cfs_period_us", "100000\n"},
      {"cpu/cpu.cfs_quota_us", "-1\n"}},
     2, 768 << 20},
    /* runc's version 1 mounts: the container's own cgroup at the mount,
     * the host's path in /proc/self/cgroup */
    {"v1 container: the host's path is not under the mount",
     "4:memory:/libpod_parent/libpod-0123abcd\n"
     "3:cpu:/libpod_parent/libpod-0123abcd\n",
     {NULL},
     {{"memory/memory.limit_in_bytes", "1073741824\n"},
      {"cpu/cpu.cfs_quota_us", "100000\n"},
      {"cpu/cpu.cfs_period_us", "100000\n"}},
     1, GIB},
    {"v1: the longest tail of the path that is a directory",
     "4:memory:/docker/abc/inner\n",
     {"memory/inner"},
     {{"memory/inner/memory.limit_in_bytes", "536870912\n"},
      {"memory/memory.limit_in_bytes", "1073741824\n"}},
     8, 512 << 20},
    {"a path above the namespace's root: the mount",
     "0::/../../x\n",
     {"x"},
     {{"x/memory.max", "1\n"}, {"memory.max", "1073741824\n"}},
     8, GIB},
    {"hybrid: no v2 files on the unified path, v1's are read",
     "4:memory:/user.slice\n0::/user.slice\n",
     {"memory/user.slice", "unified/user.slice"},
     {{"memory/user.slice/memory.limit_in_bytes", "1073741824\n"},
      {"unified/user.slice/memory.max", "1\n"}},
     8, GIB},
};
/* clang-format on */
#define N_NESTED_CASES (int)(sizeof nested_cases / sizeof nested_cases[0])

START_TEST(test_cgroup_nested) {
  cg_put_self(nested_cases[_i].self);
  for (int k = 0; k < 3 && nested_cases[_i].dirs[k]; k++)
    cg_mkdirs(nested_cases[_i].dirs[k]);
  for (int k = 0; k < 5 && nested_cases[_i].files[k].rel; k++)
    cg_put(nested_cases[_i].files[k].rel, nested_cases[_i].files[k].text);
  int cpus = attnd_cgroup_cpus_at(cg_root, 8);
  int64_t mem = attnd_cgroup_memory_at(cg_root, 64 * GIB);
  ck_assert_msg(cpus == nested_cases[_i].want_cpus, "%s: %d CPUs, expected %d",
                nested_cases[_i].name, cpus, nested_cases[_i].want_cpus);
  ck_assert_msg(mem == nested_cases[_i].want_mem,
                "%s: %lld bytes, expected %lld", nested_cases[_i].name,
                (long long)mem, (long long)nested_cases[_i].want_mem);
}
END_TEST

/* A root given with a trailing slash reads the same files. */
START_TEST(test_cgroup_root_spelling) {
  cg_put("cpu.max", "150000 100000\n");
  cg_put("memory.max", "1073741824\n");
  char slash[80];
  snprintf(slash, sizeof slash, "%s/", cg_root);
  ck_assert_int_eq(attnd_cgroup_cpus_at(slash, 8), 2);
  ck_assert_int_eq(attnd_cgroup_memory_at(slash, 64 * GIB), GIB);
  ck_assert_int_eq(attnd_cgroup_cpus_at("/nonexistent-attnd-root", 8), 8);
  ck_assert_int_eq(attnd_cgroup_memory_at("/nonexistent-attnd-root", GIB), GIB);
}
END_TEST

/* The real root: the wrappers are the _at functions on "/" with this
 * process's affinity and this machine's memory, and the config's auto
 * memory is 3/4 of it. */
START_TEST(test_cgroup_real_root) {
  cpu_set_t set;
  ck_assert_int_eq(sched_getaffinity(0, sizeof set, &set), 0);
  int affinity = CPU_COUNT(&set);
  ck_assert_int_ge(affinity, 1);
  int n = attnd_cgroup_cpus();
  ck_assert_int_eq(n, attnd_cgroup_cpus_at("/", affinity));
  ck_assert_int_ge(n, 1);
  ck_assert_int_le(n, affinity);

  long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  ck_assert(pages > 0 && size > 0);
  int64_t machine = (int64_t)pages * size;
  int64_t mem = attnd_cgroup_memory();
  ck_assert_int_eq(mem, attnd_cgroup_memory_at("/", machine));
  ck_assert_int_ge(mem, 1);
  ck_assert_int_le(mem, machine);

  attnd_config_t c;
  char msg[256];
  char *argv[] = {"attnd", NULL}, *envp[] = {NULL};
  ck_assert_int_eq(load(&c, argv, envp, msg, sizeof msg), 0);
  ck_assert_int_eq(c.max_memory_bytes, mem / 4 * 3);
}
END_TEST

/* The range --help gives key (its table row's), as "an integer in [lo,
 * hi]": 1, or 0 where the key is not an integer key. */
static int usage_range(const char *usage, const char *key, long long *lo,
                       long long *hi) {
  char flag[80];
  snprintf(flag, sizeof flag, "\n  --%s", key);
  for (char *c = flag; *c; c++)
    if (*c == '_')
      *c = '-';
  const char *p = strstr(usage, flag);
  if (p == NULL)
    return 0;
  size_t n = strlen(flag);
  if (p[n] != ' ' && p[n] != '\n')
    return 0;
  const char *next = strstr(p + n, "\n  --"),
             *in = strstr(p + n, "an integer in [");
  if (in == NULL || (next && in > next))
    return 0;
  return sscanf(in, "an integer in [%lld, %lld]", lo, hi) == 2;
}

/* docs/openapi.json's GET /v1/info: each field that is a configuration key
 * has the table's minimum, and its maximum where it gives one (the integer
 * branch of a oneOf). Catches a range changed in the table and not in the
 * document (workers' minimum 0 after 0 stopped meaning auto; the limits'
 * minimum 0 where the table's is 1 or 1024). */
START_TEST(test_openapi_info_ranges) {
  char *usage = usage_text();
  json_error_t je;
  json_t *doc = json_load_file("docs/openapi.json", 0, &je);
  ck_assert_msg(doc, "docs/openapi.json: %s", je.text);
  json_t *info = json_object_get(
      json_object_get(json_object_get(doc, "components"), "schemas"), "Info");
  json_t *top = json_object_get(info, "properties");
  json_t *lim = json_object_get(json_object_get(top, "limits"), "properties");
  ck_assert_msg(json_object_size(top) > 5 && json_object_size(lim) > 5,
                "Info or its limits have no properties");
  json_t *sets[] = {top, lim};
  int checked = 0;
  for (int s = 0; s < 2; s++) {
    const char *key;
    json_t *v;
    json_object_foreach(sets[s], key, v) {
      long long lo, hi;
      if (!usage_range(usage, key, &lo, &hi))
        continue;
      json_t *one = json_object_get(v, "oneOf"), *schema = v;
      for (size_t i = 0; one && i < json_array_size(one); i++)
        if (json_object_get(json_array_get(one, i), "minimum"))
          schema = json_array_get(one, i);
      json_t *min = json_object_get(schema, "minimum"),
             *max = json_object_get(schema, "maximum");
      ck_assert_msg(json_is_integer(min) && json_integer_value(min) == lo,
                    "openapi Info %s: minimum %lld, the table's %lld", key,
                    min ? (long long)json_integer_value(min) : -1LL, lo);
      ck_assert_msg(max == NULL || json_integer_value(max) == hi,
                    "openapi Info %s: maximum %lld, the table's %lld", key,
                    (long long)json_integer_value(max), hi);
      checked++;
    }
  }
  ck_assert_int_ge(checked, 20);
  json_decref(doc);
  free(usage);
}
END_TEST

Suite *test_suite(void) {
  Suite *s = suite_create("config");
  TCase *tc = tcase_create("config");
  tcase_add_test(tc, test_defaults);
  tcase_add_test(tc, test_auto_workers_follow_threads);
  tcase_add_test(tc, test_auto_threads);
  tcase_add_test(tc, test_auto_cap_above_cpus);
  tcase_add_test(tc, test_precedence);
  tcase_add_test(tc, test_config_path);
  tcase_add_test(tc, test_config_path_unreadable);
  tcase_add_test(tc, test_host_values);
  tcase_add_test(tc, test_flag_spellings_and_sizes);
  tcase_add_loop_test(tc, test_bad_values, 0, sizeof bad / sizeof bad[0]);
  tcase_add_test(tc, test_usage);
  tcase_add_test(tc, test_help_reads_nothing);
  tcase_add_test(tc, test_docs_quote_defaults);
  tcase_add_test(tc, test_shipped_file_is_the_defaults);
  tcase_add_test(tc, test_print_round_trips);
  tcase_add_loop_test(tc, test_print_round_trips_keys, 0, N_KEYS_WAYS);
  tcase_add_test(tc, test_print_quotes_strings);
  tcase_add_test(tc, test_file_value_forms);
  tcase_add_loop_test(tc, test_file_bytes, 0, sizeof files / sizeof files[0]);
  tcase_add_test(tc, test_backend_keys);
  tcase_add_test(tc, test_pinned_key);
  tcase_add_loop_test(tc, test_zero_is_not_auto, 0, N_ZERO_KEYS * N_ZERO_WAYS);
  tcase_add_test(tc, test_cgroup_real_root);
  tcase_add_test(tc, test_openapi_info_ranges);
  suite_add_tcase(s, tc);

  tc = tcase_create("cgroup");
  tcase_add_unchecked_fixture(tc, cg_make_root, cg_remove_root);
  tcase_add_checked_fixture(tc, cg_fresh, NULL);
  tcase_add_loop_test(tc, test_cgroup_cpus, 0, N_CPU_CASES);
  tcase_add_loop_test(tc, test_cgroup_memory, 0, N_MEM_CASES);
  tcase_add_loop_test(tc, test_cgroup_nested, 0, N_NESTED_CASES);
  tcase_add_test(tc, test_cgroup_root_spelling);
  suite_add_tcase(s, tc);
  return s;
}
