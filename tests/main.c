/* tests/main.c: the one main of every Check suite. Runs the file's suite
 * (suite.h) and exits 0 only when every check passed. */
#include <stdlib.h>

#include "suite.h"

int main(void) {
  if (test_setup)
    test_setup();
  SRunner *sr = srunner_create(test_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  if (test_finish)
    failed = test_finish(failed);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
