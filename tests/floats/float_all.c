/* tests/floats/float_all.c: every float32 through the JSON printer and back
 * (`make float-all`, a developer's tool: about 3 minutes on two cores).
 *
 * check_codec tests the printer (codec/number.c) on a million random bit
 * patterns and the edges it knows of; this program takes all 2^32 of
 * them, in blocks of 4096 consecutive patterns, through attnd_floats_put
 * (the reply's path) and reads each text back with attnd_number_parse:
 *   - a NaN or an infinity prints "null";
 *   - any other value reads back to its own bits (-0 included);
 *   - every 64th also reads back by (float)strtod, and has no more
 *     significant digits than the fewest that strtof reads back to it
 *     (printf's %.*e, from 1 digit up).
 * It prints the first 20 failures and a count, and exits 1 if there is
 * one. usage: float-all [THREADS] (2 by default; the range is split among
 * them). */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/number.h"

#define BLOCK 4096

typedef struct part {
  uint64_t lo, hi;
  uint64_t bad, sampled;
} part_t;

static pthread_mutex_t said_lock = PTHREAD_MUTEX_INITIALIZER;
static int said;

static void fail(uint32_t u, const char *what, const char *text, int len) {
  pthread_mutex_lock(&said_lock);
  if (said++ < 20)
    printf("0x%08x: \"%.*s\" %s\n", u, len, text, what);
  pthread_mutex_unlock(&said_lock);
}

/* Significant digits of a JSON number's text: neither leading nor
 * trailing zeros count ("1000" has 1, as "1e3" does). */
static int digits(const char *s, const char *end) {
  int n = 0, last = 0;
  for (; s < end && *s != 'e' && *s != 'E'; s++) {
    if (*s < '0' || *s > '9' || (n == 0 && *s == '0'))
      continue;
    n++;
    if (*s != '0')
      last = n;
  }
  return last;
}

/* The fewest significant digits that read back to v by strtof. */
static int fewest(float v) {
  char b[64];
  for (int d = 1; d < 9; d++) {
    snprintf(b, sizeof b, "%.*e", d - 1, (double)v);
    if (strtof(b, NULL) == v)
      return d;
  }
  return 9;
}

static void check_one(part_t *p, uint32_t u, float v, const char *s,
                      const char *end) {
  int len = (int)(end - s);
  if (!isfinite(v)) {
    if (len != 4 || memcmp(s, "null", 4) != 0)
      p->bad++, fail(u, "is not null", s, len);
    return;
  }
  float got = NAN;
  const char *next = NULL;
  int rc = attnd_number_parse(s, end, &got, &next);
  if (rc != 0 || next != end || memcmp(&got, &v, sizeof v) != 0) {
    p->bad++, fail(u, "does not read back", s, len);
    return;
  }
  if (u % 64 != 0)
    return;
  p->sampled++;
  char z[40];
  memcpy(z, s, (size_t)len);
  z[len] = '\0';
  float st = (float)strtod(z, NULL);
  if (memcmp(&st, &v, sizeof v) != 0)
    p->bad++, fail(u, "reads otherwise by strtod", s, len);
  if (v != 0 && digits(s, end) > fewest(v))
    p->bad++, fail(u, "is not the shortest", s, len);
}

static void *run(void *arg) {
  part_t *p = arg;
  static _Thread_local float x[BLOCK];
  static _Thread_local char
      text[BLOCK * (ATTND_FLOAT_TEXT_MAX + 1) + ATTND_FLOAT_WRITE_MAX];
  for (uint64_t u0 = p->lo; u0 < p->hi; u0 += BLOCK) {
    size_t n = p->hi - u0 < BLOCK ? (size_t)(p->hi - u0) : BLOCK;
    for (size_t i = 0; i < n; i++) {
      uint32_t u = (uint32_t)(u0 + i);
      memcpy(&x[i], &u, sizeof u);
    }
    const char *end = attnd_floats_put(x, n, text), *s = text;
    for (size_t i = 0; i < n; i++) {
      const char *comma = memchr(s, ',', (size_t)(end - s));
      const char *e = comma ? comma : end;
      check_one(p, (uint32_t)(u0 + i), x[i], s, e);
      s = e + 1;
    }
  }
  return NULL;
}

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 2;
  if (threads < 1 || threads > 64) {
    fprintf(stderr, "usage: float-all [THREADS (1 to 64)]\n");
    return 2;
  }
  part_t parts[64];
  pthread_t th[64];
  const uint64_t all = (uint64_t)1 << 32, step = all / (uint64_t)threads;
  for (int t = 0; t < threads; t++) {
    parts[t] =
        (part_t){.lo = step * (uint64_t)t,
                 .hi = t == threads - 1 ? all : step * (uint64_t)(t + 1)};
    if (pthread_create(&th[t], NULL, run, &parts[t]) != 0) {
      perror("float-all: pthread_create");
      return 2;
    }
  }
  uint64_t bad = 0, sampled = 0;
  for (int t = 0; t < threads; t++) {
    pthread_join(th[t], NULL);
    bad += parts[t].bad;
    sampled += parts[t].sampled;
  }
  printf("float-all: all 2^32 float32 printed and read back, %llu of them "
         "also by strtod and for the fewest digits: %llu failed\n",
         (unsigned long long)sampled, (unsigned long long)bad);
  return bad != 0;
}
