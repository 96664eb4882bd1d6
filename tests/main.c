/* tests/main.c: the one main of every Check suite. Runs the file's suite
 * (suite.h) and exits 0 only when every check passed.
 *
 * First it loads the OpenBLAS kernel that attnd runs with (blas_coretype
 * auto, server/blas.c), re-executing itself once where the environment
 * names another (OPENBLAS_CORETYPE=Haswell on an AVX-512 machine): the
 * core's results are tested as attnd computes them, and its promise of
 * the same bits at any thread count holds only with a kernel that allows
 * it (attn_blas_split_invariant). The servers the suites start then find
 * their kernel loaded already.
 *
 * A failure's message may hold a server's whole log (sh_wait_log and the
 * like: up to 64 KiB, an ASan report included); Check's own limit, 4 KiB,
 * turned such a failure into "Early exit with return value 2" with no
 * message at all. */
#include <stdlib.h>

#include "blas.h"
#include "suite.h"

int main(int argc, char **argv) {
  (void)argc;
  attnd_blas_select("auto", argv);
  unsetenv("ATTND_BLAS_REEXEC"); /* the servers started choose for themselves */
  if (test_setup)
    test_setup();
  check_set_max_msg_size(1 << 20);
  SRunner *sr = srunner_create(test_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  if (test_finish)
    failed = test_finish(failed);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
