/* bench/bench.h: what the benchmark programs share. */
#ifndef ATTN_BENCH_H
#define ATTN_BENCH_H

#include <stddef.h>
#include <stdint.h>

/* Monotonic clock, milliseconds. */
double bench_now_ms(void);

/* The median of x[0..n), n >= 1, or NAN when out of memory. x stays in
 * run order (a copy is sorted), so that run i still pairs with the other
 * runs i after it. */
double bench_median(const double *x, int n);

/* n floats uniform in [-amp, amp) from a xorshift seeded with `seed`, in a
 * new malloc'd array, or NULL. */
float *bench_random_floats(size_t n, float amp, uint64_t seed);

/* Writes the four E x E weights w (q, k, v, o) as a torch_mha layer
 * "bench" (in_proj_weight is q, k and v stacked) of H heads, causal, in
 * dtype (F32, or BF16 rounded; attnd_st_dtype_t), at path. Returns 0, or
 * -1 with the reason on stderr. */
int bench_write_layer(const char *path, int64_t E, int64_t H, float *const w[4],
                      int dtype);

#endif
