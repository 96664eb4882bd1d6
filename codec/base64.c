/* codec/base64.c: strict base64 (RFC 4648), 24 bytes a step with
 * AVX2 where the CPU has it. See base64.h. Pure functions; any thread. */
#include "base64.h"

#include <stdint.h>

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* The 6-bit value of character c, or 0xFF when c is outside the alphabet
 * ('=' included: padding is handled apart). Built by the preprocessor, so
 * the table is constant data and needs no initialisation. */
#define B64_VAL(c)                                                             \
  ((c) >= 'A' && (c) <= 'Z'   ? (c) - 'A'                                      \
   : (c) >= 'a' && (c) <= 'z' ? (c) - 'a' + 26                                 \
   : (c) >= '0' && (c) <= '9' ? (c) - '0' + 52                                 \
   : (c) == '+'               ? 62                                             \
   : (c) == '/'               ? 63                                             \
                              : 0xFF)
#define B64_R4(c) B64_VAL(c), B64_VAL(c + 1), B64_VAL(c + 2), B64_VAL(c + 3)
#define B64_R16(c) B64_R4(c), B64_R4(c + 4), B64_R4(c + 8), B64_R4(c + 12)
#define B64_R64(c) B64_R16(c), B64_R16(c + 16), B64_R16(c + 32), B64_R16(c + 48)
static const unsigned char b64_value[256] = {B64_R64(0), B64_R64(64),
                                             B64_R64(128), B64_R64(192)};

size_t attnd_b64_encoded_len(size_t n) {
  return (n + 2) / 3 * 4;
}

/* ---- base64 with AVX2 (x86-64 only; picked at run time) ------------------
 *
 * 24 bytes to 32 characters and back per step. Characters are classified
 * by byte ranges with signed compares (bytes from 0x80 up are negative, so
 * they fall in no range). The 6-bit values of four characters are packed
 * with multiply-adds: [a, b, c, d] -> a<<6|b and c<<6|d in 16 bits, then
 * a<<18|b<<12|c<<6|d in 32, whose three low bytes are the output, high
 * first. Encoding goes the other way: each 3-byte group is spread over a
 * 32-bit word as [s1, s0, s2, s1] (little-endian), where a and c, and b and
 * d, sit in fixed bits of its two 16-bit halves, moved into place with
 * multiplies. */
#if defined(__x86_64__)
#include <immintrin.h>

#define B64_AVX2 __attribute__((target("avx2")))

B64_AVX2 static __m256i b64_in(__m256i c, char lo, char hi) {
  return _mm256_and_si256(
      _mm256_cmpgt_epi8(c, _mm256_set1_epi8((char)(lo - 1))),
      _mm256_cmpgt_epi8(_mm256_set1_epi8((char)(hi + 1)), c));
}

/* Encodes 24-byte blocks while 32 bytes can be read; returns bytes done. */
B64_AVX2 static size_t b64_encode_avx2(const unsigned char *s, size_t n,
                                       char *dst) {
  const __m256i spread = _mm256_setr_epi8(
      1, 0, 2, 1, 4, 3, 5, 4, 7, 6, 8, 7, 10, 9, 11, 10, /* bytes 0..11 */
      1, 0, 2, 1, 4, 3, 5, 4, 7, 6, 8, 7, 10, 9, 11, 10);
  size_t i = 0;
  for (; i + 32 <= n; i += 24, dst += 32) {
    __m256i in = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(s + i))),
        _mm_loadu_si128((const __m128i *)(s + i + 12)), 1);
    __m256i w = _mm256_shuffle_epi8(in, spread);
    /* low half s0<<8|s1: a in bits 10..15, b in 4..9; high half s2|s1<<8:
     * c in bits 6..11, d in 0..5 */
    __m256i ac =
        _mm256_mulhi_epu16(_mm256_and_si256(w, _mm256_set1_epi32(0x0FC0FC00)),
                           _mm256_set1_epi32(0x04000040));
    __m256i bd =
        _mm256_mullo_epi16(_mm256_and_si256(w, _mm256_set1_epi32(0x003F03F0)),
                           _mm256_set1_epi32(0x01000010));
    __m256i v = _mm256_or_si256(ac, bd); /* bytes a, b, c, d */
    /* the character is the value plus an offset chosen by its range */
    __m256i off = _mm256_set1_epi8('A');
    off = _mm256_blendv_epi8(off, _mm256_set1_epi8('a' - 26),
                             _mm256_cmpgt_epi8(v, _mm256_set1_epi8(25)));
    off = _mm256_blendv_epi8(off, _mm256_set1_epi8('0' - 52),
                             _mm256_cmpgt_epi8(v, _mm256_set1_epi8(51)));
    off = _mm256_blendv_epi8(off, _mm256_set1_epi8('+' - 62),
                             _mm256_cmpeq_epi8(v, _mm256_set1_epi8(62)));
    off = _mm256_blendv_epi8(off, _mm256_set1_epi8('/' - 63),
                             _mm256_cmpeq_epi8(v, _mm256_set1_epi8(63)));
    _mm256_storeu_si256((__m256i *)dst, _mm256_add_epi8(v, off));
  }
  return i;
}

/* Decodes 32-character blocks while at least 48 characters remain (so that
 * the 32-byte store stays inside the output and the last group, with its
 * padding, is left to the scalar code), stopping before a block that holds
 * a character outside the alphabet. Returns characters done. */
B64_AVX2 static size_t b64_decode_avx2(const unsigned char *s, size_t n,
                                       unsigned char *d) {
  const __m256i pack = _mm256_setr_epi8(
      2, 1, 0, 6, 5, 4, 10, 9, 8, 14, 13, 12, -1, -1, -1, -1, /* per lane */
      2, 1, 0, 6, 5, 4, 10, 9, 8, 14, 13, 12, -1, -1, -1, -1);
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 4, 5, 6, 7, 7);
  size_t i = 0;
  for (; i + 48 <= n; i += 32, d += 24) {
    __m256i c = _mm256_loadu_si256((const __m256i *)(s + i));
    __m256i upper = b64_in(c, 'A', 'Z'), lower = b64_in(c, 'a', 'z');
    __m256i digit = b64_in(c, '0', '9');
    __m256i plus = _mm256_cmpeq_epi8(c, _mm256_set1_epi8('+'));
    __m256i slash = _mm256_cmpeq_epi8(c, _mm256_set1_epi8('/'));
    __m256i ok =
        _mm256_or_si256(_mm256_or_si256(upper, lower),
                        _mm256_or_si256(_mm256_or_si256(digit, plus), slash));
    if ((uint32_t)_mm256_movemask_epi8(ok) != 0xFFFFFFFFu)
      break;
    __m256i off = _mm256_and_si256(upper, _mm256_set1_epi8(-'A'));
    off = _mm256_or_si256(off,
                          _mm256_and_si256(lower, _mm256_set1_epi8(26 - 'a')));
    off = _mm256_or_si256(off,
                          _mm256_and_si256(digit, _mm256_set1_epi8(52 - '0')));
    off = _mm256_or_si256(off,
                          _mm256_and_si256(plus, _mm256_set1_epi8(62 - '+')));
    off = _mm256_or_si256(off,
                          _mm256_and_si256(slash, _mm256_set1_epi8(63 - '/')));
    __m256i v = _mm256_add_epi8(c, off);
    __m256i x = _mm256_maddubs_epi16(v, _mm256_set1_epi32(0x01400140));
    x = _mm256_madd_epi16(x, _mm256_set1_epi32(0x00011000));
    x = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(x, pack), lanes);
    _mm256_storeu_si256((__m256i *)d, x);
  }
  return i;
}

static int b64_have_avx2(void) {
  return __builtin_cpu_supports("avx2");
}
#else
static size_t b64_encode_avx2(const unsigned char *s, size_t n, char *dst) {
  (void)s, (void)n, (void)dst;
  return 0;
}
static size_t b64_decode_avx2(const unsigned char *s, size_t n,
                              unsigned char *d) {
  (void)s, (void)n, (void)d;
  return 0;
}
static int b64_have_avx2(void) {
  return 0;
}
#endif

void attnd_b64_encode(const void *src, size_t n, char *dst) {
  const unsigned char *s = src;
  size_t i = b64_have_avx2() ? b64_encode_avx2(s, n, dst) : 0;
  dst += i / 3 * 4;
  for (; i + 3 <= n; i += 3, dst += 4) {
    uint32_t x = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8 | s[i + 2];
    dst[0] = b64_alphabet[x >> 18];
    dst[1] = b64_alphabet[(x >> 12) & 63];
    dst[2] = b64_alphabet[(x >> 6) & 63];
    dst[3] = b64_alphabet[x & 63];
  }
  if (i < n) { /* one or two bytes left: pad to a full group */
    uint32_t x =
        (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0);
    dst[0] = b64_alphabet[x >> 18];
    dst[1] = b64_alphabet[(x >> 12) & 63];
    dst[2] = i + 1 < n ? b64_alphabet[(x >> 6) & 63] : '=';
    dst[3] = '=';
  }
}

/* The offset in g[0..k) of the first character outside the alphabet. */
static size_t b64_first_bad(const char *g, size_t k) {
  size_t j = 0;
  while (j < k && b64_value[(unsigned char)g[j]] != 0xFF)
    j++;
  return j;
}

/* Two passes: every group but the last has four alphabet characters and
 * gives three bytes; the last group may end in "=" or "==", and then the
 * bits its last data character carries beyond the bytes must be zero. */
int attnd_b64_decode(const char *src, size_t n, void *dst, size_t *out_n,
                     size_t *bad_pos) {
  const unsigned char *s = (const unsigned char *)src;
  unsigned char *d = dst;
  *out_n = 0;
  if (n % 4 != 0) {
    *bad_pos = n;
    return -1;
  }
  if (n == 0)
    return 0;

  /* pass 1: the full groups before the last */
  size_t i = b64_have_avx2() ? b64_decode_avx2(s, n, d) : 0;
  d += i / 4 * 3;
  for (; i + 4 < n; i += 4, d += 3) {
    uint32_t a = b64_value[s[i]], b = b64_value[s[i + 1]];
    uint32_t c = b64_value[s[i + 2]], e = b64_value[s[i + 3]];
    if ((a | b | c | e) & 0x80) {
      *bad_pos = i + b64_first_bad(src + i, 4);
      return -1;
    }
    uint32_t x = a << 18 | b << 12 | c << 6 | e;
    d[0] = (unsigned char)(x >> 16);
    d[1] = (unsigned char)(x >> 8);
    d[2] = (unsigned char)x;
  }

  /* pass 2: the last group, with its padding */
  int pad = s[n - 1] == '=' ? (s[n - 2] == '=' ? 2 : 1) : 0;
  size_t k = 4 - (size_t)pad; /* data characters */
  size_t bad = b64_first_bad(src + i, k);
  if (bad < k) {
    *bad_pos = i + bad;
    return -1;
  }
  uint32_t x = 0;
  for (size_t j = 0; j < k; j++)
    x = x << 6 | b64_value[s[i + j]];
  x <<= 6 * pad;
  if (x & ((1u << (8 * pad)) - 1)) { /* unused bits set */
    *bad_pos = i + k - 1;
    return -1;
  }
  d[0] = (unsigned char)(x >> 16);
  if (pad < 2)
    d[1] = (unsigned char)(x >> 8);
  if (pad < 1)
    d[2] = (unsigned char)x;
  *out_n = (n / 4) * 3 - (size_t)pad;
  return 0;
}
