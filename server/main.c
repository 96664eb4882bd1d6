/* server/main.c: the attnd binary. Reads the configuration, puts OpenBLAS
 * on its best kernel (blas.h), and serves. */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attn.h"
#include "blas.h"
#include "cgroup.h"
#include "config.h"
#include "serve.h"

extern char **environ;

int main(int argc, char **argv) {
  attnd_config_t cfg;
  attnd_config_load_t how;
  char msg[2048]; /* a key's source alone may take 600 bytes (config.h) */
  if (attnd_config_load(&cfg, &how, argc, argv, environ, attnd_cgroup_cpus(),
                        msg, sizeof msg) < 0) {
    fprintf(stderr, "attnd: %s\n", msg);
    return 2;
  }
  if (how.help) {
    attnd_config_usage(stdout);
    return 0;
  }
  if (how.version) {
    printf("attnd %s\n", ATTN_VERSION);
    return 0;
  }
  const char *why;
  int team = attnd_omp_team_limit(&why);
  if (attnd_config_team_limit(&cfg, &how, team, why, msg, sizeof msg) < 0) {
    fprintf(stderr, "attnd: %s\n", msg);
    return 2;
  }
  if (how.print_config) {
    printf("# attnd %s, effective configuration%s%s\n", ATTN_VERSION,
           how.path[0] ? " from " : "", how.path);
    attnd_config_print(&cfg, &how, stdout);
    return 0;
  }
  attnd_blas_select(cfg.blas_coretype, argv);
  /* Requests bring and take megabytes (bodies, tensors, replies), and a
   * fresh page costs a fault: 13 us each on this project's VMs, 100 ms for
   * 32 MB, more than the attention of a mid-sized request. So malloc keeps
   * freed memory for the next request instead of unmapping it: no mmap
   * (glibc maps anything over 32 MB afresh otherwise), no trimming, and one
   * arena, so that a buffer freed by one thread (a reply, sent by an HTTP
   * thread) serves the next request on any thread. A request makes a few
   * large allocations, so the arena's lock costs nothing. The process holds
   * on to its peak; the limits bound that peak. */
  mallopt(M_ARENA_MAX, 1);
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  return attnd_serve(&cfg);
}
