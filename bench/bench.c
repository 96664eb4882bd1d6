/* bench/bench.c: see bench.h. */
#include "bench.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/half.h"
#include "codec/util.h"
#include "model/safetensors.h"

double bench_now_ms(void) {
  return attnd_now_ms();
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double bench_median(const double *x, int n) {
  double *s = malloc((size_t)n * sizeof *s); /* a copy: x stays paired */
  if (s == NULL)
    return NAN;
  memcpy(s, x, (size_t)n * sizeof *s);
  qsort(s, (size_t)n, sizeof *s, cmp_double);
  double m = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
  free(s);
  return m;
}

/* xorshift64, not attnd_splitmix64: another generator, kept so that a seed
 * gives the inputs it always gave and results stay comparable over time. */
float *bench_random_floats(size_t n, float amp, uint64_t seed) {
  float *x = malloc(n * sizeof *x);
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  for (size_t i = 0; x && i < n; i++) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    x[i] = amp * (float)((double)(s >> 11) / 9007199254740992.0 * 2 - 1);
  }
  return x;
}

/* Writes the four E x E weights as a torch_mha layer "bench" (in_proj_weight
 * is q, k and v stacked), causal, in dtype (F32, or BF16 rounded). */
int bench_write_layer(const char *path, int64_t E, int64_t H, float *const w[4],
                      int dtype) {
  size_t es = attnd_st_dtype_size(dtype), n = (size_t)(E * E);
  char *in = malloc(3 * n * es), *out = malloc(n * es), msg[256];
  for (size_t i = 0; i < 4 * n; i++) {
    float v = w[i / n][i % n];
    char *dst = i < 3 * n ? in + i * es : out + (i - 3 * n) * es;
    if (dtype == ATTND_ST_BF16) {
      uint16_t h = attnd_bf16_from_f32(v);
      memcpy(dst, &h, 2);
    } else {
      memcpy(dst, &v, 4);
    }
  }
  char heads[24];
  snprintf(heads, sizeof heads, "%lld", (long long)H);
  const attnd_st_out_t t[] = {
      {"bench.in_proj_weight", dtype, 2, {3 * E, E}, in},
      {"bench.out_proj.weight", dtype, 2, {E, E}, out},
  };
  const char *keys[] = {"num_heads", "causal"}, *vals[] = {heads, "true"};
  int r = attnd_st_write(path, t, 2, keys, vals, 2, msg, sizeof msg);
  if (r < 0)
    fprintf(stderr, "bench: %s\n", msg);
  free(in);
  free(out);
  return r;
}
