/* tools/load/hist.h: a high-dynamic-range histogram of latencies.
 *
 * After HdrHistogram: integer values (attnd-load records microseconds) are
 * counted exactly below 2^LOAD_HIST_SUB_BITS; above that, each power-of-two
 * range [2^k, 2^(k+1)) is cut into 2^(LOAD_HIST_SUB_BITS-1) buckets of
 * equal width. A bucket is therefore at most 1/1024 of its values wide, and
 * a percentile read back is within that of the exact one:
 *
 *   exact <= load_hist_percentile(h, p) <= exact · (1 + LOAD_HIST_PRECISION)
 *
 * where exact is the nearest-rank percentile of the recorded values (the
 * smallest recorded value with at least p% of the values at or below it).
 * Values from 0 to LOAD_HIST_MAX (2^40 µs, 12.7 days) are recorded; larger
 * ones count as LOAD_HIST_MAX. The minimum, maximum and mean are exact.
 * Memory is fixed (about 250 KB); recording is O(1). One thread at a time. */
#ifndef LOAD_HIST_H
#define LOAD_HIST_H

#include <stdint.h>

#define LOAD_HIST_SUB_BITS 11
#define LOAD_HIST_MAX_BITS 40
#define LOAD_HIST_MAX ((INT64_C(1) << LOAD_HIST_MAX_BITS) - 1)
#define LOAD_HIST_PRECISION (1.0 / (1 << (LOAD_HIST_SUB_BITS - 1)))

/* Buckets: 2^SUB exact ones, then 2^(SUB-1) per power of two above. */
#define LOAD_HIST_BUCKETS                                                      \
  ((1 << LOAD_HIST_SUB_BITS) + (LOAD_HIST_MAX_BITS - LOAD_HIST_SUB_BITS) *     \
                                   (1 << (LOAD_HIST_SUB_BITS - 1)))

/* Caller-allocated (it is large: allocate it, do not put it on a thread's
 * stack); load_hist_reset before use. Plain data: no free. */
typedef struct load_hist {
  int64_t count;
  int64_t min, max; /* of the recorded values; 0 when count is 0 */
  double sum;
  int64_t bucket[LOAD_HIST_BUCKETS];
} load_hist_t;

/* A duration of `ms` milliseconds in whole microseconds, for
 * load_hist_record: rounded, and held to [0, LOAD_HIST_MAX] (a server's
 * 1e300 is LOAD_HIST_MAX, where llround would give an unspecified value). */
int64_t load_hist_us_of_ms(double ms);

/* Empties `h`. */
void load_hist_reset(load_hist_t *h);

/* Allocates *h[0], ..., *h[n-1], each reset. Returns 0, or -1 when out of
 * memory, with all n freed and set to NULL again. */
int load_hists_new(load_hist_t **const *h, int n);

/* Frees *h[0], ..., *h[n-1] and sets each to NULL (a NULL one is skipped). */
void load_hists_free(load_hist_t **const *h, int n);

/* load_hists_new and _free over `list`, an array of the histograms a
 * stats struct owns (a compound literal in parentheses, so that its commas
 * stay inside one macro argument), with n counted from the array itself:
 * a histogram added to the list is allocated and freed with the others,
 * where a count written beside the list could be left one short. */
#define LOAD_HISTS_N(list) ((int)(sizeof(list) / sizeof((list)[0])))
#define LOAD_HISTS_NEW(list) load_hists_new((list), LOAD_HISTS_N(list))
#define LOAD_HISTS_FREE(list) load_hists_free((list), LOAD_HISTS_N(list))

/* Counts one value; a negative value counts as 0. */
void load_hist_record(load_hist_t *h, int64_t v);

/* Counts value v n times (n >= 0), as n calls of load_hist_record would,
 * the sum within double rounding. */
void load_hist_record_n(load_hist_t *h, int64_t v, int64_t n);

/* The p-th percentile (0 <= p <= 100, taken to a millionth of a percent)
 * within the precision above: the highest value of the bucket holding the
 * nearest-rank percentile, clamped to [min, max] (so p = 100 is the exact
 * maximum). The rank is computed in integers, exact at any count. 0 when
 * `h` is empty. */
int64_t load_hist_percentile(const load_hist_t *h, double p);

/* The exact mean, 0 when empty. */
double load_hist_mean(const load_hist_t *h);

#endif
