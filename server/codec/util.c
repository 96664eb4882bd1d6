/* server/codec/util.c: the shared helpers of util.h. */
#include "util.h"

#include <stdarg.h>
#include <stdio.h>
#include <sys/random.h>
#include <time.h>

double attnd_now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

uint64_t attnd_splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t attnd_random_u64(void) {
  uint64_t x;
  if (getrandom(&x, sizeof x, 0) == sizeof x)
    return x;
  x = (uint64_t)(uintptr_t)&x ^ (uint64_t)(attnd_now_ms() * 1e3);
  return attnd_splitmix64(&x);
}

int attnd_fail(char *msg, size_t size, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, size, fmt, ap);
  va_end(ap);
  return -1;
}

size_t attnd_shape_text(char *buf, size_t n, int rank, const int64_t *dim,
                        const char *sep) {
  if (n == 0)
    return 0;
  size_t k = (size_t)snprintf(buf, n, "[");
  for (int i = 0; i < rank && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? sep : "",
                          (long long)dim[i]);
  if (k < n)
    k += (size_t)snprintf(buf + k, n - k, "]");
  return k < n ? k : n - 1;
}
