/* tests/suite.h: what each tests/check_<module>.c gives the shared main
 * (tests/main.c): its suite, and optionally a setup and a last word. */
#ifndef ATTND_TEST_SUITE_H
#define ATTND_TEST_SUITE_H

#include <check.h>

/* The module's suite. Required. */
Suite *test_suite(void);

/* Runs before the suite is built, if the file defines it. */
void test_setup(void) __attribute__((weak));

/* Runs after the suite with the number of failed checks, if the file
 * defines it, and returns the number that decides the exit status (a file
 * may add failures found outside Check, such as a server that would not
 * stop). */
int test_finish(int failed) __attribute__((weak));

/* ck_assert_msg for loops over many values: Check records the place of
 * every assertion that passes (_mark_point, a write to the parent
 * process), which in a loop of millions costs more than the test; this
 * records nothing unless it fails. */
#define REQUIRE(cond, ...)                                                     \
  do {                                                                         \
    if (!(cond))                                                               \
      ck_abort_msg(__VA_ARGS__);                                               \
  } while (0)

#endif
