/* tests/check_config.c: the configuration table and its three sources. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"

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

START_TEST(test_defaults) {
  attnd_config_t c;
  char msg[256];
  char *argv[] = {"attnd", NULL}, *envp[] = {NULL};
  ck_assert_int_eq(load(&c, argv, envp, msg, sizeof msg), 0);
  ck_assert_str_eq(c.host, "127.0.0.1");
  ck_assert_int_eq(c.port, 8080);
  ck_assert_int_eq(c.queue_depth, 64);
  ck_assert_int_eq(c.max_body_bytes, 256 << 20);
  /* auto on 4 CPUs: 1 thread per request, 4 workers, 4 HTTP threads */
  ck_assert_int_eq(c.threads_per_request, 1);
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
   * the flag overrides port again */
  char *argv[] = {"attnd", conf, "--port", "7003", NULL};
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
    {"--default-timeout-ms=9000000",
     NULL,
     NULL,
     {"default_timeout_ms", "max_timeout_ms"}},
    {"--max-body-bytes=1Q", NULL, NULL, {"max_body_bytes", "suffix"}},
    {NULL,
     "ATTND_PORT=tcp://10.96.0.10:8080",
     NULL,
     {"ATTND_PORT", "enableServiceLinks: false"}},
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

/* config/attnd.conf names every key, and its values are the defaults. */
START_TEST(test_shipped_file_is_the_defaults) {
  attnd_config_t def, file;
  char msg[256];
  char *argv0[] = {"attnd", NULL}, *envp[] = {NULL};
  char *argv1[] = {"attnd", "--config", "config/attnd.conf", NULL};
  ck_assert_int_eq(load(&def, argv0, envp, msg, sizeof msg), 0);
  ck_assert_msg(load(&file, argv1, envp, msg, sizeof msg) == 0, "%s", msg);
  ck_assert(memcmp(&def, &file, sizeof def) == 0);

  char printed[4096] = "";
  FILE *f = fmemopen(printed, sizeof printed, "w");
  attnd_config_print(&def, f);
  fclose(f);
  FILE *shipped = fopen("config/attnd.conf", "r");
  ck_assert_ptr_nonnull(shipped);
  char text[8192];
  size_t n = fread(text, 1, sizeof text - 1, shipped);
  text[n] = 0;
  fclose(shipped);
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
  attnd_config_print(&a, f);
  fclose(f);
  char conf[128];
  snprintf(conf, sizeof conf, "--config=%s", path);
  char *argv2[] = {"attnd", conf, NULL};
  ck_assert_msg(load(&b, argv2, envp, msg, sizeof msg) == 0, "%s", msg);
  ck_assert(memcmp(&a, &b, sizeof a) == 0);
  unlink(path);
}
END_TEST

START_TEST(test_cpus) {
  int n = attnd_config_cpus();
  ck_assert_int_ge(n, 1);
  ck_assert_int_le(n, 4096);
}
END_TEST

static Suite *config_suite(void) {
  Suite *s = suite_create("config");
  TCase *tc = tcase_create("config");
  tcase_add_test(tc, test_defaults);
  tcase_add_test(tc, test_auto_workers_follow_threads);
  tcase_add_test(tc, test_precedence);
  tcase_add_test(tc, test_flag_spellings_and_sizes);
  tcase_add_loop_test(tc, test_bad_values, 0, sizeof bad / sizeof bad[0]);
  tcase_add_test(tc, test_shipped_file_is_the_defaults);
  tcase_add_test(tc, test_print_round_trips);
  tcase_add_test(tc, test_cpus);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(config_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
