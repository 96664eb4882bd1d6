/* codec/util.c: the shared helpers of util.h. */
#include "util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
  ssize_t n;
  do /* 8 bytes from an initialised pool come whole; a signal before it is */
    n = getrandom(&x, sizeof x, 0);
  while (n < 0 && errno == EINTR);
  if (n == (ssize_t)sizeof x)
    return x;
  fprintf(stderr,
          "{\"event\":\"fatal\",\"error\":\"getrandom: %s: no random "
          "numbers for session ids, request ids and hash keys, which a "
          "client could guess otherwise\"}\n",
          n < 0 ? strerror(errno) : "short read");
  abort();
}

int attnd_fail(char *msg, size_t size, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, size, fmt, ap);
  va_end(ap);
  return -1;
}

/* The digits of u, most significant first, into dst: their count. */
static size_t put_u64(char *dst, uint64_t u) {
  char tmp[20];
  size_t n = 0;
  do {
    tmp[n++] = (char)('0' + u % 10);
    u /= 10;
  } while (u);
  for (size_t i = 0; i < n; i++)
    dst[i] = tmp[n - 1 - i];
  return n;
}

size_t attnd_fmt_i64(char *dst, int64_t v) {
  size_t k = 0;
  uint64_t u = (uint64_t)v;
  if (v < 0) {
    dst[k++] = '-';
    u = 0 - u; /* INT64_MIN too */
  }
  k += put_u64(dst + k, u);
  dst[k] = 0;
  return k;
}

size_t attnd_fmt_hex64(char *dst, uint64_t v) {
  for (int i = 15; i >= 0; i--, v >>= 4)
    dst[i] = "0123456789abcdef"[v & 15];
  dst[16] = 0;
  return 16;
}

size_t attnd_fmt_str(char *dst, size_t size, const char *s) {
  size_t n = strnlen(s, size - 1);
  memcpy(dst, s, n);
  dst[n] = 0;
  return n;
}

size_t attnd_fmt_u64(char *dst, uint64_t v) {
  size_t k = put_u64(dst, v);
  dst[k] = 0;
  return k;
}

/* v * 1000 rounded to an integer exactly as printf rounds: to the nearest,
 * ties (exact in binary, as 0.0625) to even. v in [0, 1e15]. v is m * 2^-s
 * with m < 2^53, so m * 1000 < 2^63 is exact and its low s bits decide;
 * s >= 3 here, and from 64 up the product is under half a unit. Not
 * v * 1000 + 0.5: its two roundings take 1.0005 (1.000499999...) up. */
static uint64_t thousandths(double v) {
  uint64_t bits;
  memcpy(&bits, &v, sizeof bits);
  int be = (int)(bits >> 52); /* v >= 0: no sign bit */
  uint64_t m = bits & ((1ull << 52) - 1);
  if (be)
    m |= 1ull << 52;
  else
    be = 1; /* subnormal */
  int s = 1075 - be;
  if (s >= 64)
    return 0;
  uint64_t p = m * 1000, q = p >> s, r = p & ((1ull << s) - 1),
           half = 1ull << (s - 1);
  return q + (r > half || (r == half && (q & 1)));
}

size_t attnd_fmt_ms(char *dst, double v) {
  if (!(v > 0))
    v = 0; /* negative, and NaN */
  if (v > 1e15)
    v = 1e15;
  uint64_t t = thousandths(v);
  size_t k = put_u64(dst, t / 1000);
  uint64_t f = t % 1000;
  dst[k++] = '.';
  dst[k++] = (char)('0' + f / 100);
  dst[k++] = (char)('0' + f / 10 % 10);
  dst[k++] = (char)('0' + f % 10);
  dst[k] = 0;
  return k;
}

/* Appends src[0..len) to buf[0..n) at *k, as much as fits before the NUL. */
static void put_cut(char *buf, size_t n, size_t *k, const char *src,
                    size_t len) {
  size_t room = n - 1 - *k;
  len = len < room ? len : room;
  memcpy(buf + *k, src, len);
  *k += len;
}

size_t attnd_fmt_member(char *dst, size_t size, const char *a, const char *b) {
  size_t k = 0;
  put_cut(dst, size, &k, a, strlen(a));
  if (*a)
    put_cut(dst, size, &k, ".", 1);
  put_cut(dst, size, &k, b, strlen(b));
  dst[k] = 0;
  return k;
}

size_t attnd_fmt_index(char *dst, size_t size, const char *a, int64_t i) {
  char num[24];
  size_t k = 0;
  put_cut(dst, size, &k, a, strlen(a));
  put_cut(dst, size, &k, "[", 1);
  put_cut(dst, size, &k, num, attnd_fmt_i64(num, i));
  put_cut(dst, size, &k, "]", 1);
  dst[k] = 0;
  return k;
}

size_t attnd_shape_text(char *buf, size_t n, int rank, const int64_t *dim,
                        const char *sep) {
  if (n == 0)
    return 0;
  size_t k = 0, ls = strlen(sep);
  char num[24];
  put_cut(buf, n, &k, "[", 1);
  for (int i = 0; i < rank && k < n - 1; i++) {
    if (i)
      put_cut(buf, n, &k, sep, ls);
    put_cut(buf, n, &k, num, attnd_fmt_i64(num, dim[i]));
  }
  put_cut(buf, n, &k, "]", 1);
  buf[k] = 0;
  return k;
}
