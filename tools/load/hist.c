/* tools/load/hist.c: see hist.h. */
#include "hist.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SUB (INT64_C(1) << LOAD_HIST_SUB_BITS)
#define HALF (SUB / 2)

/* The bucket of v (0 <= v <= LOAD_HIST_MAX). Below SUB the value itself;
 * above, for v in [2^k, 2^(k+1)), its top LOAD_HIST_SUB_BITS bits. */
static int64_t bucket_of(int64_t v) {
  if (v < SUB)
    return v;
  int k = 63 - __builtin_clzll((unsigned long long)v); /* k >= SUB_BITS */
  int shift = k - (LOAD_HIST_SUB_BITS - 1);
  int64_t top = v >> shift; /* in [HALF, SUB) */
  return SUB + (int64_t)(k - LOAD_HIST_SUB_BITS) * HALF + (top - HALF);
}

/* The highest value that falls in bucket i. */
static int64_t bucket_high(int64_t i) {
  if (i < SUB)
    return i;
  int64_t level = (i - SUB) / HALF; /* k - SUB_BITS */
  int64_t top = HALF + (i - SUB) % HALF;
  int shift = (int)level + 1;
  return ((top + 1) << shift) - 1;
}

void load_hist_reset(load_hist_t *h) {
  memset(h, 0, sizeof *h);
}

void load_hist_record_n(load_hist_t *h, int64_t v, int64_t n) {
  if (n <= 0)
    return;
  if (v < 0)
    v = 0;
  if (v > LOAD_HIST_MAX)
    v = LOAD_HIST_MAX;
  if (h->count == 0 || v < h->min)
    h->min = v;
  if (h->count == 0 || v > h->max)
    h->max = v;
  h->count += n;
  h->sum += (double)v * (double)n;
  h->bucket[bucket_of(v)] += n;
}

int64_t load_hist_us_of_ms(double ms) {
  double us = ms * 1e3;
  if (!(us > 0)) /* NaN too */
    return 0;
  return us >= (double)LOAD_HIST_MAX ? LOAD_HIST_MAX : llround(us);
}

void load_hist_record(load_hist_t *h, int64_t v) {
  load_hist_record_n(h, v, 1);
}

int64_t load_hist_percentile(const load_hist_t *h, double p) {
  if (h->count == 0)
    return 0;
  if (p < 0)
    p = 0;
  if (p > 100)
    p = 100;
  /* nearest rank: the smallest r with r >= p/100 · count, at least 1. In
   * integers, p in millionths of a percent: in floating point p/100 · count
   * lands a hair above an integer at 1e8 counts (p99.9), one rank too
   * high. count = q·D + m, so the rank is q·pm + ceil(m·pm / D), and
   * m·pm < 1e16 does not overflow. */
  const int64_t D = 100000000; /* 100% in millionths of a percent */
  int64_t pm = llround(p * 1e6), q = h->count / D, m = h->count % D;
  int64_t rank = q * pm + (m * pm + D - 1) / D;
  if (rank < 1)
    rank = 1;
  int64_t seen = 0;
  for (int64_t i = 0; i < LOAD_HIST_BUCKETS; i++) {
    seen += h->bucket[i];
    if (seen >= rank) {
      int64_t v = bucket_high(i);
      return v < h->min ? h->min : v > h->max ? h->max : v;
    }
  }
  return h->max;
}

double load_hist_mean(const load_hist_t *h) {
  return h->count ? h->sum / (double)h->count : 0;
}

int load_hists_new(load_hist_t **const *h, int n) {
  for (int i = 0; i < n; i++) {
    if ((*h[i] = malloc(sizeof **h[i])) == NULL) {
      load_hists_free(h, i);
      return -1;
    }
    load_hist_reset(*h[i]);
  }
  return 0;
}

void load_hists_free(load_hist_t **const *h, int n) {
  for (int i = 0; i < n; i++) {
    free(*h[i]);
    *h[i] = NULL;
  }
}
