/* tests/fuzz/fuzz.c: what the libFuzzer harnesses share. See fuzz.h. */
#include "fuzz.h"

#include "config.h"

void fuzz_small_config(struct attnd_config *cfg, char *const *extra,
                       char **envp) {
  /* clang-format off */
  static char *const limits[] = {
      "--max-body-bytes", "64K",
      "--max-json-structure-bytes", "4K",
      "--max-response-bytes", "256K",
      "--max-batch", "4",
      "--max-seq-len", "64",
      "--max-heads", "8",
      "--max-tensor-elements", "4096",
      "--max-memory-bytes", "64M",
      "--default-timeout-ms", "2000",
      "--max-timeout-ms", "2000",
  };
  /* clang-format on */
  enum { N_LIMITS = sizeof limits / sizeof limits[0], MAX_ARGS = 64 };
  char *argv[MAX_ARGS] = {"attnd"};
  int argc = 1;
  for (int i = 0; i < N_LIMITS; i++)
    argv[argc++] = limits[i];
  for (int i = 0; extra && extra[i]; i++) {
    FUZZ_CHECK(argc < MAX_ARGS - 1, "too many flags");
    argv[argc++] = extra[i];
  }
  argv[argc] = NULL;
  attnd_config_load_t how;
  char msg[512];
  FUZZ_CHECK(
      attnd_config_load(cfg, &how, argc, argv, envp, 2, msg, sizeof msg) == 0,
      "config: %s", msg);
}
