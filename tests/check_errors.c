/* tests/check_errors.c: the API error table (server/errors.h) and what is
 * derived from it.
 *
 * The table's columns are well formed (distinct codes, HTTP statuses of
 * the right class), and docs/api.md's error table lists exactly the
 * table's codes with the table's statuses, so the docs cannot drift from
 * the code. docs/operations.md names every rejection reason, docs/oip.md
 * every status /v2 answers with, and docs/openapi.json's Error<status>
 * descriptions the codes of their status. */
#include <check.h>
#include <jansson.h>
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
    int v2 = attnd_error_status_v2((attnd_err_t)i);
    ck_assert_msg(v2 >= 400 && v2 < 600, "%s: /v2 status %d", name, v2);
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

/* docs/oip.md's Errors table has a row for each status a /v2 path can
 * answer with (the table's third column, 0 where none can: the sessions'
 * codes) and no other: a code given a new /v2 status, or one the sessions
 * shared with /v2, needs its row there. */
START_TEST(test_oip_doc_lists_every_status) {
  char *doc = tu_read_file_or_fail("docs/oip.md", NULL);
  char *at = strstr(doc, "\n## Errors\n");
  ck_assert_msg(at != NULL, "docs/oip.md has no Errors section");
  char *end = strstr(at + 1, "\n## ");
  if (end)
    *end = 0;
  int rows[16], n = 0;
  for (char *line = strtok(at, "\n"); line; line = strtok(NULL, "\n")) {
    int status;
    if (sscanf(line, "| %d |", &status) != 1)
      continue;
    int known = 0;
    for (int c = 0; c < ATTND_ERR_COUNT && !known; c++)
      known = attnd_error_on_v2((attnd_err_t)c) &&
              attnd_error_status_v2((attnd_err_t)c) == status;
    ck_assert_msg(known,
                  "docs/oip.md's Errors table has a row %d; no code of "
                  "server/errors.h has that status under the Open "
                  "Inference Protocol",
                  status);
    ck_assert(n < 16);
    rows[n++] = status;
  }
  for (int c = 0; c < ATTND_ERR_COUNT; c++) {
    if (!attnd_error_on_v2((attnd_err_t)c))
      continue;
    int status = attnd_error_status_v2((attnd_err_t)c), found = 0;
    for (int i = 0; i < n && !found; i++)
      found = rows[i] == status;
    ck_assert_msg(found,
                  "server/errors.h gives %s status %d under the Open "
                  "Inference Protocol; docs/oip.md's Errors table has no "
                  "row %d (add it, or make the column 0 if no /v2 path "
                  "answers the code)",
                  attnd_error_name((attnd_err_t)c), status, status);
  }
  free(doc);
}
END_TEST

/* The description of each Error<status> schema of docs/openapi.json names
 * in backquotes exactly the codes the table gives that status (its enum is
 * held to the table by make openapi-lint; the words were not). */
START_TEST(test_openapi_descriptions_name_the_codes) {
  json_error_t je;
  json_t *api = json_load_file("docs/openapi.json", 0, &je);
  ck_assert_msg(api != NULL, "docs/openapi.json: %s", je.text);
  json_t *schemas =
      json_object_get(json_object_get(api, "components"), "schemas");
  int checked = 0;
  for (int c = 0; c < ATTND_ERR_COUNT; c++) {
    int status = attnd_error_status((attnd_err_t)c), first = 1;
    for (int k = 0; k < c && first; k++)
      first = attnd_error_status((attnd_err_t)k) != status;
    if (!first)
      continue;
    char schema[16];
    snprintf(schema, sizeof schema, "Error%d", status);
    const char *text = json_string_value(
        json_object_get(json_object_get(schemas, schema), "description"));
    ck_assert_msg(text != NULL,
                  "docs/openapi.json's %s has no description (server/"
                  "errors.h gives %d to %s)",
                  schema, status, attnd_error_name((attnd_err_t)c));
    for (const char *p = strchr(text, '`'); p; p = strchr(p, '`')) {
      const char *q = strchr(p + 1, '`');
      ck_assert_msg(q != NULL, "%s's description: unbalanced `", schema);
      int found = -1;
      for (int k = 0; k < ATTND_ERR_COUNT && found < 0; k++) {
        const char *name = attnd_error_name((attnd_err_t)k);
        if (strlen(name) == (size_t)(q - p - 1) &&
            strncmp(p + 1, name, (size_t)(q - p - 1)) == 0)
          found = k;
      }
      ck_assert_msg(found >= 0 &&
                        attnd_error_status((attnd_err_t)found) == status,
                    "docs/openapi.json's %s description names %.*s, which "
                    "server/errors.h does not give status %d",
                    schema, (int)(q - p - 1), p + 1, status);
      p = q + 1;
    }
    for (int k = 0; k < ATTND_ERR_COUNT; k++) {
      if (attnd_error_status((attnd_err_t)k) != status)
        continue;
      char quoted[64];
      snprintf(quoted, sizeof quoted, "`%s`", attnd_error_name((attnd_err_t)k));
      ck_assert_msg(strstr(text, quoted) != NULL,
                    "server/errors.h gives %s status %d; docs/openapi.json's "
                    "%s description does not name it",
                    attnd_error_name((attnd_err_t)k), status, schema);
    }
    checked++;
  }
  ck_assert_int_gt(checked, 0);
  json_decref(api);
}
END_TEST

Suite *test_suite(void) {
  Suite *s = suite_create("errors");
  TCase *tc = tcase_create("errors");
  tcase_add_test(tc, test_table_columns);
  tcase_add_test(tc, test_api_doc_lists_every_code);
  tcase_add_test(tc, test_operations_doc_lists_every_reason);
  tcase_add_test(tc, test_oip_doc_lists_every_status);
  tcase_add_test(tc, test_openapi_descriptions_name_the_codes);
  suite_add_tcase(s, tc);
  return s;
}
