/* codec/half.h: float32 and the two 16-bit floats of the API, IEEE
 * binary16 ("float16", OIP's FP16, safetensors' F16) and bfloat16
 * ("bfloat16", BF16): conversions both ways, rounding to nearest with ties
 * to even, and the rounding and packing of whole tensors for replies.
 * Pure functions of their arguments; any thread. */
#ifndef ATTND_CODEC_HALF_H
#define ATTND_CODEC_HALF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The element type of a float tensor at the API. */
typedef enum {
  ATTND_DTYPE_F32 = 0, /* float32 */
  ATTND_DTYPE_F16,     /* IEEE binary16: 11 significant bits, |x| <= 65504 */
  ATTND_DTYPE_BF16     /* bfloat16: 8 significant bits, float32's range */
} attnd_dtype_t;

/* Bytes per element: 4 or 2. */
static inline size_t attnd_dtype_size(attnd_dtype_t t) {
  return t == ATTND_DTYPE_F32 ? 4 : 2;
}

/* F16 h (its low 16 bits) as float32, exactly, infinities and NaNs too. A
 * normal half is its exponent re-biased (15 to 127); a subnormal one,
 * m·2^-24, is (1 + m/1024)·2^-14 - 2^-14, exact by Sterbenz, with no
 * subnormal float operand (which some CPUs handle slowly). Selected by
 * masks, without a branch, so that loops over it vectorise. */
static inline float attnd_f16_to_f32(uint32_t h) {
  uint32_t em = (h & 0x7fff) << 13, exp = em & 0x0f800000;
  uint32_t normal = em + (112u << 23), special = em | 0x7f800000;
  uint32_t b = em + (113u << 23), c = 113u << 23, sub;
  float fb, fc, fs;
  memcpy(&fb, &b, 4);
  memcpy(&fc, &c, 4);
  fs = fb - fc;
  memcpy(&sub, &fs, 4);
  uint32_t is_sub = 0u - (exp == 0), is_special = 0u - (exp == 0x0f800000);
  uint32_t u = (sub & is_sub) | (special & is_special) |
               (normal & ~(is_sub | is_special)) | (h & 0x8000) << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* BF16 h as float32, exactly. */
static inline float attnd_bf16_to_f32(uint32_t h) {
  uint32_t u = (h & 0xffff) << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* float32 to F16 / BF16, rounding to nearest even: beyond F16's range (from
 * 65520 up) to infinity, below half its least subnormal to zero; a NaN
 * stays a quiet NaN. */
uint16_t attnd_f16_from_f32(float x);
uint16_t attnd_bf16_from_f32(float x);

/* Rounds x[0..n) in place to the nearest value of t (nothing for float32),
 * as the two functions above. Idempotent. Returns the index of the first
 * element that is infinite afterwards (a finite value beyond F16's range
 * rounds to infinity), or -1. */
int64_t attnd_dtype_round(attnd_dtype_t t, float *x, size_t n);

/* Writes x[0..n) as t to dst, little-endian, attnd_dtype_size(t) bytes
 * each, rounding as above. */
void attnd_dtype_pack(attnd_dtype_t t, const float *x, size_t n, void *dst);

/* Whether the CPU converts F16 itself (F16C, and the OS keeps AVX's
 * registers). Asked once. */
int attnd_cpu_has_f16c(void);

/* For tests: 1 makes the functions here, and safetensors' F16 reader, take
 * their scalar paths even where the CPU has F16C; returns the previous
 * setting. Set before any thread converts. */
int attnd__half_force_scalar(int on);
extern int attnd__half_scalar_only;

#endif
