/* tests/check_metrics.c: server/metrics.c, without a server.
 *
 * Observations recorded with attnd_metrics_observe and read back from
 * attnd_metrics_render's text (tests/server_harness.c's sh_metric_in):
 *   - the sums, in seconds, of many short observations (a session step
 *     computes in a few microseconds, an inline request waits less than
 *     one): each counted whole, not cut to a whole microsecond, in the
 *     histograms' _sum, attnd_backend_compute_seconds_total and
 *     attnd_backend_stage_seconds_total;
 *   - the buckets: a value on a bound counted in that bucket, one past the
 *     last bound in +Inf only, the buckets cumulative and +Inf equal to
 *     _count;
 *   - the statuses: every status of the error table (errors.h), under /v1
 *     and OIP, is a label of its own, never "other".
 * No timings are asserted. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "attn/attn.h"
#include "errors.h"
#include "metrics.h"
#include "server_harness.h"
#include "suite.h"

/* The exposition of m, with every gauge 0. The caller frees it. */
static char *render(const attnd_metrics_t *m) {
  attnd_gauges_t g = {0};
  attnd_buf_t b;
  attnd_buf_init(&b);
  attnd_metrics_render(m, &g, &b);
  ck_assert(!b.oom);
  attnd_buf_append(&b, "", 1); /* NUL-terminated */
  return b.data;
}

static double sample(const char *text, const char *name) {
  double v = sh_metric_in(text, name);
  ck_assert_msg(v >= 0, "no sample %s", name);
  return v;
}

/* 1000 session steps of 0.4 µs queued, 2.5 µs computed (0.7, 1.1 and
 * 0.7 in the stages) and 3.1 µs in all: the sums are 1000 times those,
 * within the text's microsecond. Cut to whole microseconds each, they read
 * 0, 2 and 3 ms: the queue lost, the compute a fifth low. */
START_TEST(test_sums_of_short_observations) {
  attnd_metrics_t *m = attnd_metrics_new();
  ck_assert_ptr_nonnull(m);
  const double stage_ms[3] = {0.0007, 0.0011, 0.0007};
  for (int i = 0; i < 1000; i++)
    attnd_metrics_observe(m, ATTND_PROTO_SESSION, ATTN_BACKEND_CPU, 100, 0.0004,
                          0.0025, 0.0031, stage_ms);
  char *t = render(m);
  static const struct {
    const char *name;
    double want; /* s */
  } sums[] = {
      {"attnd_queue_wait_seconds_sum{protocol=\"session\",ctx=\"128\"}",
       0.0004},
      {"attnd_compute_seconds_sum{protocol=\"session\",ctx=\"128\"}", 0.0025},
      {"attnd_request_seconds_sum{protocol=\"session\",ctx=\"128\"}", 0.0031},
      {"attnd_backend_compute_seconds_total{backend=\"cpu\"}", 0.0025},
      {"attnd_backend_stage_seconds_total{backend=\"cpu\",stage="
       "\"projection\"}",
       0.0007},
      {"attnd_backend_stage_seconds_total{backend=\"cpu\",stage=\"attention\"}",
       0.0011},
      {"attnd_backend_stage_seconds_total{backend=\"cpu\",stage=\"output\"}",
       0.0007},
  };
  for (size_t k = 0; k < sizeof sums / sizeof sums[0]; k++) {
    double got = sample(t, sums[k].name);
    ck_assert_msg(fabs(got - sums[k].want) <= 1.5e-6, "%s is %.6f, not %.6f",
                  sums[k].name, got, sums[k].want);
  }
  ck_assert_double_eq(sample(t,
                             "attnd_compute_seconds_count{protocol=\"session\","
                             "ctx=\"128\"}"),
                      1000);
  free(t);
  attnd_metrics_free(m);
}
END_TEST

/* Request times on the bounds and past the last: 0.5 ms (le 0.0005), 1 ms
 * (le 0.001), 60 s (le 60) and 61 s (+Inf only), at a key length of 2048
 * (ctx 2048). */
START_TEST(test_buckets) {
  attnd_metrics_t *m = attnd_metrics_new();
  ck_assert_ptr_nonnull(m);
  const double stage_ms[3] = {0, 0, 0};
  const double total_ms[] = {0.5, 1, 60000, 61000};
  for (int i = 0; i < 4; i++)
    attnd_metrics_observe(m, ATTND_PROTO_V1, ATTN_BACKEND_CPU, 2048, 0, 0,
                          total_ms[i], stage_ms);
  char *t = render(m);
  static const struct {
    const char *le;
    double count;
  } want[] = {{"0.0005", 1}, {"0.001", 2}, {"0.0025", 2},
              {"30", 2},     {"60", 3},    {"+Inf", 4}};
  for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
    char name[160];
    snprintf(name, sizeof name,
             "attnd_request_seconds_bucket{protocol=\"v1\",ctx=\"2048\","
             "le=\"%s\"}",
             want[k].le);
    ck_assert_msg(sample(t, name) == want[k].count, "%s is %g, not %g", name,
                  sample(t, name), want[k].count);
  }
  ck_assert_double_eq(
      sample(t, "attnd_request_seconds_count{protocol=\"v1\",ctx=\"2048\"}"),
      4);
  ck_assert_double_eq_tol(
      sample(t, "attnd_request_seconds_sum{protocol=\"v1\",ctx=\"2048\"}"),
      121.0015, 1e-6);
  ck_assert_double_eq(
      sample(t, "attnd_request_seconds_count{protocol=\"v1\",ctx=\"512\"}"), 0);
  free(t);
  attnd_metrics_free(m);
}
END_TEST

/* A request answered with each error's status, by each protocol's column,
 * counts under that status's label: an error code added with a status the
 * metrics did not list would have counted as "other". */
START_TEST(test_every_error_status_labelled) {
  attnd_metrics_t *m = attnd_metrics_new();
  for (int c = 0; c < ATTND_ERR_COUNT; c++) {
    attnd_metrics_request(m, ATTND_PROTO_V1, attnd_error_status(c));
    attnd_metrics_request(m, ATTND_PROTO_V2, attnd_error_status_v2(c));
  }
  attnd_metrics_request(m, ATTND_PROTO_V1, 299); /* no status of attnd's */
  char *t = render(m);
  for (int c = 0; c < ATTND_ERR_COUNT; c++) {
    char name[120];
    snprintf(name, sizeof name,
             "attnd_requests_total{protocol=\"v1\",status=\"%d\"}",
             attnd_error_status(c));
    ck_assert_msg(sample(t, name) >= 1, "%s (%s) not counted", name,
                  attnd_error_name(c));
    snprintf(name, sizeof name,
             "attnd_requests_total{protocol=\"v2\",status=\"%d\"}",
             attnd_error_status_v2(c));
    ck_assert_msg(sample(t, name) >= 1, "%s (%s) not counted", name,
                  attnd_error_name(c));
  }
  ck_assert_double_eq(
      sample(t, "attnd_requests_total{protocol=\"v1\",status=\"other\"}"), 1);
  ck_assert_double_eq(
      sample(t, "attnd_requests_total{protocol=\"v2\",status=\"other\"}"), 0);
  free(t);
  attnd_metrics_free(m);
}
END_TEST

Suite *test_suite(void) {
  Suite *s = suite_create("metrics");
  TCase *tc = tcase_create("render");
  tcase_add_test(tc, test_sums_of_short_observations);
  tcase_add_test(tc, test_buckets);
  tcase_add_test(tc, test_every_error_status_labelled);
  suite_add_tcase(s, tc);
  return s;
}
