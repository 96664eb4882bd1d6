/* tests/fuzz/fuzz_decode.c: request decoding on both paths, compared.
 *
 * The input is a request body. decode_diff (tests/decode_diff.h) decodes
 * it by jansson alone and with the bulk scanner's fast path, and this
 * aborts, printing the difference, unless both give the same request or
 * the same error (code, field and message). ASan and UBSan watch both
 * decoders, the bulk scanner, the base64 and number codecs under them, and
 * the core's planning.
 *
 * The limits are small (fuzz_small_config, as the http harness's) so that
 * a body that asks for a big shape is refused before anything of that size
 * is allocated; the fast path lifts arrays of 64 numbers or more and strings of
 * 1024 characters or more, which bodies of a few KB reach. One layer is
 * loaded, "L" (torch_mha, E = 8, H = 2, RoPE, causal, written at start),
 * so that bodies naming it take the layer's path. */
#include <stdint.h>

#include <stdio.h>
#include <unistd.h>

#include "config.h"
#include "decode_diff.h"
#include "fuzz.h"
#include "model/layers.h"
#include "model/safetensors.h"

static attnd_config_t cfg;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  fuzz_small_config(&cfg, NULL, NULL);
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
  FUZZ_CHECK(attnd_st_write(path, t, 2, keys, vals, 3, msg, sizeof msg) == 0 &&
                 attnd_layers_load(path, &set, msg, sizeof msg) == 0,
             "the fuzz layer: %s", msg);
  unlink(path);
  decode_diff_set_layers(set); /* held for the process's life */
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char why[2048];
  FUZZ_CHECK(decode_diff((const char *)data, size, &cfg, why, sizeof why) == 0,
             "the two decoding paths differ: %s", why);
  return 0;
}
