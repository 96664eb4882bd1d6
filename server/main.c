/* server/main.c: the attnd binary. Reads the configuration, puts OpenBLAS
 * on its best kernel (blas.h), and serves. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attn.h"
#include "blas.h"
#include "config.h"
#include "http.h"

extern char **environ;

int main(int argc, char **argv) {
  attnd_config_t cfg;
  attnd_config_load_t how;
  char msg[512];
  if (attnd_config_load(&cfg, &how, argc, argv, environ, attnd_config_cpus(),
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
  if (how.print_config) {
    printf("# attnd %s, effective configuration%s%s\n", ATTN_VERSION,
           how.path[0] ? " from " : "", how.path);
    attnd_config_print(&cfg, stdout);
    return 0;
  }
  attnd_blas_select(cfg.blas_coretype, argv);
  return attnd_serve(&cfg);
}
