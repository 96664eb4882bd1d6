/* codec/half.c: float32 and the 16-bit floats; see half.h.
 *
 * The tensor loops have no early exit, so that they vectorise: BF16 by
 * `omp simd` (its rounding is one add and a shift), F16 by F16C's
 * conversions where the CPU has them (which round to nearest even, to
 * infinity and to subnormals as IEEE says), else by the scalar functions. */
#include "codec/half.h"

#include <math.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define HALF_F16C 1
#endif

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "the 16-bit floats are written little-endian, as this host");

int attnd__half_scalar_only;

int attnd__half_force_scalar(int on) {
  int was = attnd__half_scalar_only;
  attnd__half_scalar_only = on;
  return was;
}

/* A uint16_t at any address (dst may be odd: the binary data of an OIP
 * reply follows its JSON). */
typedef uint16_t u16_any __attribute__((aligned(1), may_alias));

static inline uint32_t bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

/* v >> s (1 <= s < 32), rounded to nearest, ties to even. */
static uint32_t rne(uint32_t v, unsigned s) {
  uint32_t q = v >> s, rem = v & ((1u << s) - 1), half = 1u << (s - 1);
  return q + (rem > half || (rem == half && (q & 1)));
}

uint16_t attnd_f16_from_f32(float x) {
  uint32_t u = bits(x), a = u & 0x7fffffff;
  uint16_t sign = (uint16_t)(u >> 16 & 0x8000);
  if (a > 0x7f800000) /* NaN: quiet, with the top of its payload */
    return sign | 0x7e00 | (uint16_t)(a >> 13 & 0x3ff);
  if (a >= 0x477ff000) /* 65520 and up round to infinity */
    return sign | 0x7c00;
  int e = (int)(a >> 23) - 127;
  if (e < -25) /* below half the least subnormal (2^-24): zero */
    return sign;
  uint32_t m = (a & 0x7fffff) | 0x800000; /* x = m·2^(e-23) */
  if (e < -14) /* a subnormal half, in units of 2^-24: m·2^(e+1) */
    return sign | (uint16_t)rne(m, (unsigned)(-1 - e));
  /* a normal half: exponent and mantissa, the carry of rounding included */
  return sign | (uint16_t)rne(((uint32_t)(e + 15) << 23) | (a & 0x7fffff), 13);
}

/* BF16 of float32 bits u: the carry of rounding may reach the exponent,
 * and from the largest values infinity; a NaN keeps its top bits, quiet.
 * Branch-free, for the loops. */
static inline uint32_t bf16_bits(uint32_t u) {
  uint32_t r = (u + 0x7fffu + (u >> 16 & 1)) >> 16;
  uint32_t nan = 0u - ((u & 0x7fffffff) > 0x7f800000);
  return (r & ~nan) | ((u >> 16 | 0x40) & nan);
}

uint16_t attnd_bf16_from_f32(float x) {
  return (uint16_t)bf16_bits(bits(x));
}

int attnd_cpu_has_f16c(void) {
#ifdef HALF_F16C
  /* cpuid may trap to a hypervisor: asked once. gcc knows "f16c" as a
   * feature name, clang 14 does not, hence cpuid's leaf 1 (ECX bit 29). */
  static int known = -1;
  int k = __atomic_load_n(&known, __ATOMIC_RELAXED);
  if (k < 0) {
    unsigned a, b, c, d;
    k = __builtin_cpu_supports("avx") && __get_cpuid(1, &a, &b, &c, &d) &&
        (c & bit_F16C) != 0;
    __atomic_store_n(&known, k, __ATOMIC_RELAXED);
  }
  return k;
#else
  return 0;
#endif
}

#ifdef HALF_F16C
static int use_f16c(void) {
  return !attnd__half_scalar_only && attnd_cpu_has_f16c();
}

/* F16C rounds as the scalar function: to nearest even, with its overflow
 * to infinity and its subnormals. Returns how many it did (a multiple of
 * 8); the caller does the tail. */
__attribute__((target("avx,f16c"))) static size_t f16c_round(float *x,
                                                             size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_ps(x + i, _mm256_cvtph_ps(h));
  }
  return i;
}

__attribute__((target("avx,f16c"))) static size_t
f16c_pack(const float *x, size_t n, uint8_t *dst) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(
        (__m128i *)(void *)(dst + 2 * i),
        _mm256_cvtps_ph(_mm256_loadu_ps(x + i),
                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  return i;
}
#endif

int64_t attnd_dtype_round(attnd_dtype_t t, float *x, size_t n) {
  size_t i = 0;
  switch (t) {
  case ATTND_DTYPE_F32:
    break;
  case ATTND_DTYPE_BF16:
#pragma omp simd
    for (size_t k = 0; k < n; k++) {
      uint32_t u = bf16_bits(bits(x[k])) << 16;
      memcpy(&x[k], &u, sizeof u);
    }
    break;
  case ATTND_DTYPE_F16:
#ifdef HALF_F16C
    if (use_f16c())
      i = f16c_round(x, n);
#endif
    for (; i < n; i++)
      x[i] = attnd_f16_to_f32(attnd_f16_from_f32(x[i]));
    break;
  }
  /* the first infinity, looked for only where there is one */
  uint32_t acc = 0;
#pragma omp simd reduction(| : acc)
  for (size_t k = 0; k < n; k++)
    acc |= ((bits(x[k]) & 0x7fffffff) == 0x7f800000);
  if (!acc)
    return -1;
  for (size_t k = 0; k < n; k++)
    if (isinf(x[k]))
      return (int64_t)k;
  return -1;
}

void attnd_dtype_pack(attnd_dtype_t t, const float *x, size_t n, void *dst) {
  uint8_t *d = dst;
  size_t i = 0;
  switch (t) {
  case ATTND_DTYPE_F32:
    memcpy(dst, x, n * sizeof(float));
    return;
  case ATTND_DTYPE_BF16: {
    u16_any *h = (u16_any *)d;
#pragma omp simd
    for (size_t k = 0; k < n; k++)
      h[k] = (uint16_t)bf16_bits(bits(x[k]));
    return;
  }
  case ATTND_DTYPE_F16:
#ifdef HALF_F16C
    if (use_f16c())
      i = f16c_pack(x, n, d);
#endif
    for (; i < n; i++) {
      uint16_t h = attnd_f16_from_f32(x[i]);
      memcpy(d + 2 * i, &h, 2);
    }
    return;
  }
}
