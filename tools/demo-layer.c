/* tools/demo-layer.c: writes the demo layer that `make run` serves, so that
 * a first request (and the web page) has a layer to name.
 *
 *   demo-layer FILE
 *
 * FILE gets a safetensors file holding one torch.nn.MultiheadAttention
 * state_dict under the prefix "demo." (layer "demo"): E = 64, H = 4, with
 * biases, and __metadata__ that gives its head count, rotary embeddings
 * (half style, theta 10000) and a causal mask. The weights are drawn from
 * a fixed seed, uniform in ±1/sqrt(E) as nn.Linear initialises them, so
 * the file is the same byte for byte on every build. */
#include <math.h>
#include <stdio.h>

#include "codec/util.h"
#include "model/safetensors.h"

enum { E = 64, H = 4 };

static void fill(float *x, int n, uint64_t *state) {
  const float bound = 1.0f / sqrtf((float)E);
  for (int i = 0; i < n; i++) /* 24 random bits: uniform in [-1, 1) */
    x[i] = bound *
           (float)((double)(attnd_splitmix64(state) >> 40) / (double)(1 << 23) -
                   1.0);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: demo-layer FILE\n");
    return 2;
  }
  static float in_w[3 * E * E], in_b[3 * E], out_w[E * E], out_b[E];
  uint64_t state = 0x5eed0fa77e4710ULL;
  fill(in_w, 3 * E * E, &state);
  fill(in_b, 3 * E, &state);
  fill(out_w, E * E, &state);
  fill(out_b, E, &state);
  const attnd_st_out_t t[] = {
      {"demo.in_proj_weight", ATTND_ST_F32, 2, {3 * E, E}, in_w},
      {"demo.in_proj_bias", ATTND_ST_F32, 1, {3 * E}, in_b},
      {"demo.out_proj.weight", ATTND_ST_F32, 2, {E, E}, out_w},
      {"demo.out_proj.bias", ATTND_ST_F32, 1, {E}, out_b},
  };
  const char *keys[] = {"num_heads", "rope_theta", "rope_style", "causal",
                        "description"};
  const char *values[] = {"4", "10000", "half", "bottom_right",
                          "attnd's demo layer: E=64, H=4, RoPE, causal; "
                          "weights from a fixed seed"};
  char msg[512];
  if (attnd_st_write(argv[1], t, sizeof t / sizeof t[0], keys, values,
                     sizeof keys / sizeof keys[0], msg, sizeof msg) < 0) {
    fprintf(stderr, "demo-layer: %s\n", msg);
    return 1;
  }
  return 0;
}
