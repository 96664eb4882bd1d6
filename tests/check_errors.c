/* tests/check_errors.c: the API error table (server/errors.h) and what is
 * derived from it.
 *
 * The table's columns are well formed (distinct codes, HTTP statuses of
 * the right class), and docs/api.md's error table lists exactly the
 * table's codes with the table's statuses, so the docs cannot drift from
 * the code. docs/operations.md names every rejection reason. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "suite.h"
#include "testutil.h"

START_TEST(test_table_columns) {
  for (int i = 0; i < ATTND_ERR_COUNT; i++) {
    const char *name = attnd_error_name((attnd_err_t)i);
    int status = attnd_error_status((attnd_err_t)i);
    ck_assert_msg(name && *name, "error %d has no name", i);
    for (const char *p = name; *p; p++)
      ck_assert_msg((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
                        *p == '_',
                    "%s: codes are lower_snake_case", name);
    ck_assert_msg(status >= 400 && status < 600, "%s: status %d", name, status);
    for (int j = 0; j < i; j++)
      ck_assert_msg(strcmp(name, attnd_error_name((attnd_err_t)j)) != 0,
                    "%s appears twice", name);
    attnd_reject_t why = attnd_error_reason((attnd_err_t)i);
    ck_assert(why == ATTND_REJECT_NONE ||
              (why >= 0 && why < ATTND_REJECT_COUNT));
  }
  attnd_error_t e;
  ck_assert_int_eq(attnd_error_set(&e, ATTND_ERR_SHAPE_MISMATCH, "mask.allow",
                                   "%s has %d dimensions", "mask.allow", 5),
                   -1);
  ck_assert_int_eq(e.code, ATTND_ERR_SHAPE_MISMATCH);
  ck_assert_str_eq(e.field, "mask.allow");
  ck_assert_str_eq(e.message, "mask.allow has 5 dimensions");
}
END_TEST

/* Every row "| status | `code`, `code` | ..." of docs/api.md's table names
 * codes of the table with their statuses, and together the rows name
 * every code once. */
START_TEST(test_api_doc_lists_every_code) {
  char *doc = tu_read_file_or_fail("docs/api.md", NULL);
  int seen[ATTND_ERR_COUNT] = {0};
  for (char *line = strtok(doc, "\n"); line; line = strtok(NULL, "\n")) {
    int status;
    char rest[4096];
    if (sscanf(line, "| %d | %4095[^|]|", &status, rest) != 2 || status < 400 ||
        status > 599)
      continue;
    for (char *p = strchr(rest, '`'); p; p = strchr(p, '`')) {
      char *end = strchr(p + 1, '`');
      ck_assert_msg(end != NULL, "unbalanced ` in: %s", line);
      *end = 0;
      int found = -1;
      for (int i = 0; i < ATTND_ERR_COUNT && found < 0; i++)
        if (strcmp(p + 1, attnd_error_name((attnd_err_t)i)) == 0)
          found = i;
      ck_assert_msg(found >= 0, "docs/api.md names an unknown code '%s'",
                    p + 1);
      ck_assert_msg(attnd_error_status((attnd_err_t)found) == status,
                    "docs/api.md gives %s status %d; errors.h says %d", p + 1,
                    status, attnd_error_status((attnd_err_t)found));
      seen[found]++;
      p = end + 1;
    }
  }
  for (int i = 0; i < ATTND_ERR_COUNT; i++)
    ck_assert_msg(seen[i] == 1, "docs/api.md's error table names %s %d times",
                  attnd_error_name((attnd_err_t)i), seen[i]);
  free(doc);
}
END_TEST

START_TEST(test_operations_doc_lists_every_reason) {
  static const char *const labels[] = {
#define LABEL(name, label) label,
      ATTND_REJECT_MAP(LABEL)
#undef LABEL
  };
  char *doc = tu_read_file_or_fail("docs/operations.md", NULL);
  char *at = strstr(doc, "attnd_rejections_total{reason}");
  ck_assert_msg(at != NULL, "docs/operations.md does not describe "
                            "attnd_rejections_total{reason}");
  char *close = strchr(at, ')');
  ck_assert(close != NULL);
  *close = 0;
  for (size_t i = 0; i < sizeof labels / sizeof labels[0]; i++)
    ck_assert_msg(strstr(at, labels[i]) != NULL,
                  "docs/operations.md does not list the reason %s", labels[i]);
  free(doc);
}
END_TEST

Suite *test_suite(void) {
  Suite *s = suite_create("errors");
  TCase *tc = tcase_create("errors");
  tcase_add_test(tc, test_table_columns);
  tcase_add_test(tc, test_api_doc_lists_every_code);
  tcase_add_test(tc, test_operations_doc_lists_every_reason);
  suite_add_tcase(s, tc);
  return s;
}
