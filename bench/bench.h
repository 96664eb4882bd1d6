/* bench/bench.h: what the benchmark programs share. */
#ifndef ATTN_BENCH_H
#define ATTN_BENCH_H

#include <stddef.h>
#include <stdint.h>

/* Monotonic clock, milliseconds. */
double bench_now_ms(void);

/* The median of x[0..n), n >= 1; sorts x. */
double bench_median(double *x, int n);

/* n floats uniform in [-amp, amp) from a xorshift seeded with `seed`, in a
 * new malloc'd array, or NULL. */
float *bench_random_floats(size_t n, float amp, uint64_t seed);

#endif
