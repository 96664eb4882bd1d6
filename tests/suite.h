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

#endif
