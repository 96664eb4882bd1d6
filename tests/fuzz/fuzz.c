/* tests/fuzz/fuzz.c: what the libFuzzer harnesses share. See fuzz.h. */
#include "fuzz.h"

#include <unistd.h>

#include "config.h"
#include "model/layers.h"
#include "model/safetensors.h"

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

struct attnd_layer_set *fuzz_layer(int causal) {
  enum { E = 8 };
  static float in_w[3 * E * E], out_w[E * E];
  for (int i = 0; i < 3 * E * E; i++)
    in_w[i] = (float)((i * 37) % 17 - 8) / 16.0f;
  for (int i = 0; i < E * E; i++)
    out_w[i] = (float)((i * 11) % 13 - 6) / 16.0f;
  const attnd_st_out_t t[] = {
      {"L.in_proj_weight", ATTND_ST_F32, 2, {3 * E, E}, in_w},
      {"L.out_proj.weight", ATTND_ST_F32, 2, {E, E}, out_w},
  };
  const char *keys[] = {"num_heads", "rope_theta", "causal"};
  const char *vals[] = {"2", "100", "bottom_right"};
  char path[64], msg[512];
  snprintf(path, sizeof path, "/tmp/attnd-fuzz-layer-%d.safetensors",
           (int)getpid());
  attnd_layer_set_t *set = NULL;
  FUZZ_CHECK(attnd_st_write(path, t, 2, keys, vals, causal ? 3 : 2, msg,
                            sizeof msg) == 0 &&
                 attnd_layers_load(path, &set, msg, sizeof msg) == 0,
             "the fuzz layer: %s", msg);
  unlink(path);
  return set;
}
