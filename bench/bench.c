/* bench/bench.c: see bench.h. */
#include "bench.h"

#include <stdlib.h>

#include "codec/util.h"

double bench_now_ms(void) {
  return attnd_now_ms();
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double bench_median(double *x, int n) {
  qsort(x, (size_t)n, sizeof *x, cmp_double);
  return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
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
