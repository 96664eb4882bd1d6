/* tests/check_bench.c: what the benchmark programs share (bench/bench.c),
 * without timing anything.
 *
 * Cases:
 *   - bench_median: odd and even counts, and x left in run order, so that
 *     a ratio taken after a median still pairs each run with its own
 *     neighbour (attn-bench's compare_weights takes each round's ratio to
 *     that round's "none" after the median of "none"). */
#include <check.h>

#include "../bench/bench.h"
#include "suite.h"

START_TEST(test_median_values) {
  double odd[] = {5, 1, 4, 2, 3};
  ck_assert_double_eq(bench_median(odd, 5), 3);
  double even[] = {8, 2, 6, 4};
  ck_assert_double_eq(bench_median(even, 4), 5); /* (4 + 6) / 2 */
  double one[] = {7};
  ck_assert_double_eq(bench_median(one, 1), 7);
}
END_TEST

/* Three rounds of "none" and of another kind, each twice none's time in
 * its own round: every round's ratio is 2, whatever the order of the
 * rounds' times, and stays 2 after the median of none. */
START_TEST(test_median_keeps_pairs) {
  double none[] = {30, 10, 20}, other[] = {60, 20, 40};
  ck_assert_double_eq(bench_median(none, 3), 20);
  const double runs[] = {30, 10, 20};
  for (int r = 0; r < 3; r++) {
    ck_assert_double_eq(none[r], runs[r]);
    ck_assert_double_eq(other[r] / none[r], 2);
  }
}
END_TEST

Suite *test_suite(void) {
  Suite *s = suite_create("bench");
  TCase *tc = tcase_create("median");
  tcase_add_test(tc, test_median_values);
  tcase_add_test(tc, test_median_keeps_pairs);
  suite_add_tcase(s, tc);
  return s;
}
