/* server/blas.c: see blas.h. */
#include "blas.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "attn/attn.h"

void attnd_blas_select(const char *coretype, char **argv) {
  if (getenv("ATTND_BLAS_REEXEC"))
    return;
  const char *want = NULL;
  if (strcmp(coretype, "auto") == 0) {
    want = attn_blas_preferred_coretype();
  } else if (strcmp(coretype, "library") != 0) {
    attn_backend_t b;
    attn_backend_info(&b);
    want = strcasecmp(b.blas_kernel, coretype) ? coretype : NULL;
  }
  const char *threads = getenv("OPENBLAS_NUM_THREADS");
  int pool = threads == NULL || strcmp(threads, "1") != 0;
  if (want == NULL && !pool)
    return;
  if (want) {
    const char *was = getenv("OPENBLAS_CORETYPE");
    fprintf(stderr,
            "{\"event\":\"blas_kernel\",\"selected\":\"%s\",\"was\":\"%s\"}\n",
            want, was ? was : "");
    setenv("OPENBLAS_CORETYPE", want, 1);
  }
  setenv("OPENBLAS_NUM_THREADS", "1", 1);
  setenv("ATTND_BLAS_REEXEC", "1", 1);
  /* the binary's own path, not /proc/self/exe, so that the process keeps
   * its name ("attnd", not "exe") for ps, pgrep and ss */
  char path[4096];
  ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  if (n > 0 && (size_t)n < sizeof path - 1)
    path[n] = 0;
  else
    snprintf(path, sizeof path, "/proc/self/exe");
  execv(path, argv);
  perror("re-executing to set up OpenBLAS");
}
