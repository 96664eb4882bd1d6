/* server/codec.c: base64, exact float parsing and printing, the growable
 * text buffer and the bulk scanner of server/codec.h.
 *
 * Everything here is a pure function of its arguments (no globals written,
 * only constant tables read), so any thread may call it. strtod() is used
 * on the rare slow paths and assumes the C locale's decimal point, as the
 * service never calls setlocale(). */
#include "codec.h"

#include <errno.h>
#include <immintrin.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- base64 -------------------------------------------------------------- */

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

/* ---- powers of ten ----------------------------------------------------------
 *
 * pow10_tab[k + 31] is 10^k correctly rounded to double, for k in [-31, 54]:
 * the float printer scales by 10^(8-e10) with e10 a float's decimal exponent
 * (in [-45, 38]) or an estimate of it one off. 10^0 .. 10^22 are exact, as
 * Clinger's fast path needs. */
static const double pow10_tab[] = {
    1e-31, 1e-30, 1e-29, 1e-28, 1e-27, 1e-26, 1e-25, 1e-24, 1e-23, 1e-22, 1e-21,
    1e-20, 1e-19, 1e-18, 1e-17, 1e-16, 1e-15, 1e-14, 1e-13, 1e-12, 1e-11, 1e-10,
    1e-9,  1e-8,  1e-7,  1e-6,  1e-5,  1e-4,  1e-3,  1e-2,  1e-1,  1e0,   1e1,
    1e2,   1e3,   1e4,   1e5,   1e6,   1e7,   1e8,   1e9,   1e10,  1e11,  1e12,
    1e13,  1e14,  1e15,  1e16,  1e17,  1e18,  1e19,  1e20,  1e21,  1e22,  1e23,
    1e24,  1e25,  1e26,  1e27,  1e28,  1e29,  1e30,  1e31,  1e32,  1e33,  1e34,
    1e35,  1e36,  1e37,  1e38,  1e39,  1e40,  1e41,  1e42,  1e43,  1e44,  1e45,
    1e46,  1e47,  1e48,  1e49,  1e50,  1e51,  1e52,  1e53,  1e54};
#define POW10(k) (pow10_tab[(k) + 31])

/* c·10^q rounded to double exactly as strtod would round the decimal text,
 * when Clinger's fast path applies: c ≤ 2^53 and |q| ≤ 22 make c and 10^|q|
 * exact doubles, so one IEEE multiply or divide rounds the exact value
 * once. Returns 0 and sets *d, or -1 outside that range. */
static inline int clinger(uint64_t c, int64_t q, double *d) {
  if (c > (1ull << 53) || q < -22 || q > 22)
    return -1;
  *d = q < 0 ? (double)c / POW10(-q) : (double)c * POW10(q);
  return 0;
}

/* c·10^q rounded to double exactly as strtod would, from one x87
 * extended-precision operation, for the numbers Clinger's path leaves:
 * typically 17 significant digits, as a float widened to double prints.
 * c < 2^64 and 10^|q| for |q| <= 27 (5^27 < 2^64) are exact long doubles,
 * so L = c·10^q is rounded once, to a 64-bit significand. Rounding L to 53
 * bits then gives strtod's double, unless L is exactly halfway between two
 * doubles (its low 11 bits 0x400): the exact value may lie on either side
 * of that midpoint, and this returns -1. Also -1 outside the range. */
static inline int extended(uint64_t c, int64_t q, double *d) {
#if defined(__x86_64__) && __LDBL_MANT_DIG__ == 64
  static const long double p10[28] = {
      1e0L,  1e1L,  1e2L,  1e3L,  1e4L,  1e5L,  1e6L,  1e7L,  1e8L,  1e9L,
      1e10L, 1e11L, 1e12L, 1e13L, 1e14L, 1e15L, 1e16L, 1e17L, 1e18L, 1e19L,
      1e20L, 1e21L, 1e22L, 1e23L, 1e24L, 1e25L, 1e26L, 1e27L};
  if (q < -27 || q > 27)
    return -1;
  long double l = q < 0 ? (long double)c / p10[-q] : (long double)c * p10[q];
  uint64_t sig;
  memcpy(&sig, &l, sizeof sig); /* the 64-bit significand, stored first */
  if ((sig & 0x7ff) == 0x400)
    return -1;
  *d = (double)l;
  return 0;
#else
  (void)c, (void)q, (void)d;
  return -1;
#endif
}

/* ---- parsing numbers ----------------------------------------------------- */

static inline int is_digit(char c) {
  return c >= '0' && c <= '9';
}

/* The whole number grammar and value in one pass: the digits accumulate in
 * a uint64 mantissa, and Clinger's fast path or its extended-precision
 * sibling answer nearly all numbers; the rest go to strtod on a
 * NUL-terminated copy of the token, which keeps strtod's
 * rounding to double and then to float, and its overflow report. The
 * grammar is jansson's: "01", "1." and "1e" are invalid tokens there, not
 * a number followed by something. */
int attnd_number_parse(const char *s, const char *end, float *out,
                       const char **next) {
  const char *p = s;
  int neg = 0;
  if (p < end && *p == '-') {
    neg = 1;
    p++;
  }
  if (p == end || !is_digit(*p))
    return -1;

  /* The first 19 significant digits go into mant, with value = mant·10^e10
   * while no digit is left out. Once one is, mant ≥ 10^18 > 2^53 keeps the
   * number off the fast path, so the rest need not be counted. */
  uint64_t mant = 0;
  int nsig = 0;  /* significant digits in mant (leading zeros excluded) */
  int whole = 1; /* no significant digit was left out of mant */
  int64_t e10 = 0;
  int is_int = 1; /* no fraction and no exponent: jansson's integer */

  /* integer part: "0" or [1-9][0-9]* */
  const char *int_start = p;
  if (*p == '0') {
    p++;
    if (p < end && is_digit(*p))
      return -1; /* a leading zero */
  } else {
    do {
      if (nsig < 19) {
        mant = mant * 10 + (uint64_t)(*p - '0');
        nsig++;
      } else {
        whole = 0;
      }
    } while (++p < end && is_digit(*p));
  }
  size_t int_len = (size_t)(p - int_start);

  /* fraction: "." [0-9]+ */
  if (p < end && *p == '.') {
    p++;
    if (p == end || !is_digit(*p))
      return -1;
    is_int = 0;
    do {
      if (nsig < 19) {
        mant = mant * 10 + (uint64_t)(*p - '0');
        nsig += mant != 0;
        e10--;
      } else {
        whole = 0;
      }
    } while (++p < end && is_digit(*p));
  }

  /* exponent: [eE] [+-]? [0-9]+ (saturated at 10^6, far off the fast path,
   * the only user of e10) */
  if (p < end && (*p == 'e' || *p == 'E')) {
    p++;
    int eneg = 0;
    if (p < end && (*p == '+' || *p == '-'))
      eneg = *p++ == '-';
    if (p == end || !is_digit(*p))
      return -1;
    is_int = 0;
    int64_t ex = 0;
    do {
      if (ex < 1000000)
        ex = ex * 10 + (*p - '0');
    } while (++p < end && is_digit(*p));
    e10 += eneg ? -ex : ex;
  }

  /* jansson reads an integer with strtoll and rejects what overflows it. */
  if (is_int && (int_len > 19 ||
                 (int_len == 19 && mant > (neg ? 9223372036854775808ull
                                               : 9223372036854775807ull))))
    return -2;

  double d;
  if (mant == 0) { /* zero, whatever the exponent */
    d = neg ? -0.0 : 0.0;
  } else if (clinger(mant, e10, &d) == 0 ||
             (whole && extended(mant, e10, &d) == 0)) {
    d = neg ? -d : d;
  } else {
    char small[64];
    size_t len = (size_t)(p - s);
    char *tok = len < sizeof small ? small : malloc(len + 1);
    if (!tok)
      return -1; /* out of memory for an over-long token */
    memcpy(tok, s, len);
    tok[len] = '\0';
    errno = 0;
    d = strtod(tok, NULL);
    int range = errno == ERANGE;
    if (tok != small)
      free(tok);
    if (range && isinf(d))
      return -2; /* jansson: "real number overflow"; underflow is fine */
  }
  *out = (float)d;
  *next = p;
  return 0;
}

/* ---- printing floats --------------------------------------------------------
 *
 * A decimal D reads back to the float v when strtod's double, rounded to
 * float, is v: when double(D) lies strictly between the midpoints lo and hi
 * that v shares with its neighbours (or on one of them, if v's mantissa is
 * even). We work at the scale 10^(8-e10) that puts |v| in [1e8, 1e9):
 * there A, L and H (|v|, lo, hi scaled) carry an absolute error below
 * 3e-7 (two roundings of values below 1e9·(1 + 2^-52)), and the decimals of
 * p significant digits are the multiples of 10^(9-p). A multiple further
 * than PRINT_EPS inside (L, H) reads back, one further than PRINT_EPS
 * outside does not, and the rare one in between is settled exactly by
 * parsing it (reads_back).
 *
 * The fast path finds the largest power of ten 10^K with a multiple in the
 * slightly widened interval [L - PRINT_EPS, H + PRINT_EPS], takes the
 * multiple nearest A, and is done if that one lies safely inside. Otherwise
 * (a multiple within PRINT_EPS of L or H: a midpoint that is itself a short
 * decimal, like 16777217 between the floats 16777216 and 16777218, or
 * chance) the slow path tries p = 1..9 in turn: since [lo, hi] contains v,
 * the two multiples of 10^(9-p) nearest A, one on each side, are the only
 * p-digit candidates; the first one that reads back wins. At p = 9 the
 * nearest multiple is within 0.5 of A while L and H are at least 2.9 away
 * (the narrow side of a power of two), so that loop always ends. */

#define PRINT_EPS 1e-6

/* Whether c·10^q reads back to the float whose bits are `bits`, decided
 * exactly: Clinger when it applies, else strtod on the text. */
static int reads_back(uint64_t c, int q, uint32_t bits) {
  double d;
  if (clinger(c, q, &d) < 0) {
    char text[48];
    snprintf(text, sizeof text, "%llue%d", (unsigned long long)c, q);
    d = strtod(text, NULL);
  }
  float f = (float)d;
  uint32_t got;
  memcpy(&got, &f, sizeof got);
  return got == bits;
}

/* "00".."99", for writing two digits at a time. */
static const char digit_pairs[] = "00010203040506070809"
                                  "10111213141516171819"
                                  "20212223242526272829"
                                  "30313233343536373839"
                                  "40414243444546474849"
                                  "50515253545556575859"
                                  "60616263646566676869"
                                  "70717273747576777879"
                                  "80818283848586878889"
                                  "90919293949596979899";

/* Writes c·10^q (0 < c < 10^10) to p; returns the end. Plain positional
 * notation for a decimal exponent x in [-4, 15) (like %g), else
 * "d.ddde±XX". The text is at most 16 characters, but copies of a fixed
 * 16 bytes (cheaper than exact ones) may write up to 26 bytes at p. */
static char *put_decimal(uint64_t c, int q, char *p) {
  while (c % 10 == 0) {
    c /= 10;
    q++;
  }
  /* the digits, right-aligned in tmp[0..16) and followed by '0's */
  char tmp[32];
  memset(tmp + 16, '0', 16);
  int k = 16;
  while (c >= 100) {
    uint64_t r = c % 100;
    c /= 100;
    k -= 2;
    memcpy(tmp + k, digit_pairs + 2 * r, 2);
  }
  if (c >= 10) {
    k -= 2;
    memcpy(tmp + k, digit_pairs + 2 * c, 2);
  } else {
    tmp[--k] = (char)('0' + c);
  }
  const char *dig = tmp + k;
  int nd = 16 - k;
  int x = q + nd - 1; /* the value is d.ddd·10^x */

  if (x >= 0 && x < 15) {
    memcpy(p, dig, 16);
    if (nd <= x + 1) /* an integer: the digits, then '0's */
      return p + x + 1;
    memcpy(p + x + 2, dig + x + 1, 16);
    p[x + 1] = '.';
    return p + nd + 1;
  }
  if (x < 0 && x >= -4) {
    memcpy(p, "0.000", 5);
    p += 1 - x;
    memcpy(p, dig, 16);
    return p + nd;
  }
  p[0] = dig[0];
  p[1] = '.';
  memcpy(p + 2, dig + 1, 16);
  p += nd > 1 ? nd + 1 : 1;
  int ax = x < 0 ? -x : x; /* a float's is at most 45: two digits */
  p[0] = 'e';
  p[1] = x < 0 ? '-' : '+';
  memcpy(p + 2, digit_pairs + 2 * ax, 2);
  return p + 4;
}

/* The slow path: the shortest candidate that reads back, trying p = 1..9
 * (see above). Returns c with the value c·10^(e10+1-p) and sets *q. */
static uint64_t shortest_slow(double A, double L, double H, int e10,
                              uint32_t bits, int *q) {
  for (int prec = 1;; prec++) {
    double t = POW10(9 - prec); /* the unit of the prec-th digit */
    double qa = A / t;
    uint64_t near = (uint64_t)(qa + 0.5);
    uint64_t cand[2] = {near, (double)near <= qa ? near + 1 : near - 1};
    *q = e10 + 1 - prec;
    for (int j = 0; j < 2; j++) {
      double x = (double)cand[j] * t;
      if (x < L - PRINT_EPS || x > H + PRINT_EPS)
        continue;
      if ((x > L + PRINT_EPS && x < H - PRINT_EPS) ||
          reads_back(cand[j], *q, bits))
        return cand[j];
    }
  }
}

/* Writes the shortest text of the float v to p ("null" if not finite; at
 * most 16
 * characters, no terminator, but up to 27 bytes written); returns the
 * end. */
static char *format_float(float v, char *p) {
  uint32_t bits;
  memcpy(&bits, &v, sizeof bits);
  if ((bits & 0x7FFFFFFFu) >= 0x7F800000u) { /* NaN or ±inf: not JSON */
    memcpy(p, "null", 4);
    return p + 4;
  }
  if (bits >> 31) {
    *p++ = '-';
    bits &= 0x7FFFFFFFu;
  }
  if (bits == 0) {
    *p++ = '0';
    return p;
  }

  /* v's neighbours give the midpoints lo and hi (exact in double) */
  uint32_t nb[3] = {bits - 1, bits, bits + 1};
  float f[3];
  memcpy(f, nb, sizeof f);
  double a = f[1];
  double lo = 0.5 * ((double)f[0] + a);
  double hi = isinf(f[2]) ? a + 0.5 * (a - (double)f[0]) /* FLT_MAX */
                          : 0.5 * (a + (double)f[2]);

  /* e10 = floor(log10 a): estimate it from the binary exponent (within one),
   * then correct it so that A = a·10^(8-e10) lies in [1e8, 1e9). */
  uint64_t abits;
  memcpy(&abits, &a, sizeof abits);
  int e2 = (int)(abits >> 52) - 1023;
  int e10 = (int)(((unsigned)(e2 + 1000) * 78913u) >> 18) - 301;
  double A = a * POW10(8 - e10);
  if (A >= 1e9) {
    e10++;
    A = a * POW10(8 - e10);
  } else if (A < 1e8) {
    e10--;
    A = a * POW10(8 - e10);
  }
  double L = lo * POW10(8 - e10), H = hi * POW10(8 - e10);

  /* fast path: the multiples of 10^k in (lo1, hi1] exist for k ≤ K and
   * not above (a multiple of 10^k is one of 10^(k-1)), so K is a count. */
  uint32_t lo1 = (uint32_t)(L - PRINT_EPS), hi1 = (uint32_t)(H + PRINT_EPS);
  uint32_t qlo[10], qhi[10];
  int K = -1;
#define PRINT_STEP(k, t)                                                       \
  qlo[k] = lo1 / (t), qhi[k] = hi1 / (t), K += qhi[k] > qlo[k]
  PRINT_STEP(0, 1u);
  PRINT_STEP(1, 10u);
  PRINT_STEP(2, 100u);
  PRINT_STEP(3, 1000u);
  PRINT_STEP(4, 10000u);
  PRINT_STEP(5, 100000u);
  PRINT_STEP(6, 1000000u);
  PRINT_STEP(7, 10000000u);
  PRINT_STEP(8, 100000000u);
  PRINT_STEP(9, 1000000000u);
#undef PRINT_STEP
  if (K >= 0) {
    double t = POW10(K);
    uint64_t c = (uint64_t)(A / t + 0.5); /* nearest A, kept in range */
    if (c <= qlo[K])
      c = qlo[K] + 1;
    else if (c > qhi[K])
      c = qhi[K];
    double x = (double)c * t;
    if (x > L + PRINT_EPS && x < H - PRINT_EPS)
      return put_decimal(c, e10 - 8 + K, p);
  }
  int q;
  uint64_t c = shortest_slow(A, L, H, e10, bits, &q);
  return put_decimal(c, q, p);
}

int attnd_float_format(float v, char *buf) {
  char *end = format_float(v, buf);
  *end = '\0';
  return (int)(end - buf);
}

/* ---- growable text buffer ------------------------------------------------ */

void attnd_buf_init(attnd_buf_t *b) {
  b->data = NULL;
  b->len = b->cap = 0;
  b->oom = 0;
}

void attnd_buf_free(attnd_buf_t *b) {
  free(b->data);
  attnd_buf_init(b);
}

int attnd_buf_reserve(attnd_buf_t *b, size_t n) {
  if (b->oom)
    return -1;
  if (b->cap > b->len && n < b->cap - b->len)
    return 0;
  size_t need = b->len + n + 1, cap = b->cap ? b->cap : 64;
  if (need <= n) { /* overflow */
    b->oom = 1;
    return -1;
  }
  while (cap < need) {
    if (cap > SIZE_MAX / 2) {
      cap = need;
      break;
    }
    cap *= 2;
  }
  char *data = realloc(b->data, cap);
  if (!data) {
    b->oom = 1;
    return -1;
  }
  b->data = data;
  b->cap = cap;
  return 0;
}

void attnd_buf_append(attnd_buf_t *b, const char *s, size_t n) {
  if (n == 0 || attnd_buf_reserve(b, n) < 0)
    return;
  memcpy(b->data + b->len, s, n);
  b->len += n;
  b->data[b->len] = '\0';
}

void attnd_buf_puts(attnd_buf_t *b, const char *s) {
  attnd_buf_append(b, s, strlen(s));
}

/* The longest text format_float writes ("-123456789000000"), and how far
 * past its start it may write. */
#define FLOAT_TEXT_MAX 16
#define FLOAT_WRITE_MAX 27

/* Appends "[x0,x1,...]" for x[0..n), formatting in place. */
static void put_row(attnd_buf_t *b, const float *x, size_t n) {
  if (n > (SIZE_MAX - FLOAT_WRITE_MAX - 2) / (FLOAT_TEXT_MAX + 1)) {
    b->oom = 1;
    return;
  }
  if (attnd_buf_reserve(b, n * (FLOAT_TEXT_MAX + 1) + FLOAT_WRITE_MAX + 2) < 0)
    return;
  char *p = b->data + b->len;
  *p++ = '[';
  for (size_t i = 0; i < n; i++) {
    if (i)
      *p++ = ',';
    p = format_float(x[i], p);
  }
  *p++ = ']';
  *p = '\0';
  b->len = (size_t)(p - b->data);
}

/* Appends the sub-tensor of shape dim[level..rank) whose leaves start at
 * *x, and advances *x past them. */
static void put_level(attnd_buf_t *b, const float **x, int level, int rank,
                      const int64_t *dim) {
  size_t k = (size_t)dim[level];
  if (level == rank - 1) {
    put_row(b, *x, k);
    *x += k;
    return;
  }
  attnd_buf_append(b, "[", 1);
  for (size_t i = 0; i < k; i++) {
    if (i)
      attnd_buf_append(b, ",", 1);
    put_level(b, x, level + 1, rank, dim);
  }
  attnd_buf_append(b, "]", 1);
}

void attnd_buf_floats(attnd_buf_t *b, const float *x, size_t n, int rank,
                      const int64_t *dim) {
  if (rank == 0)
    put_row(b, x, n);
  else
    put_level(b, &x, 0, rank, dim);
}

void attnd_buf_base64(attnd_buf_t *b, const void *src, size_t n) {
  size_t len = attnd_b64_encoded_len(n);
  if (len == 0 || attnd_buf_reserve(b, len) < 0)
    return;
  attnd_b64_encode(src, n, b->data + b->len);
  b->len += len;
  b->data[b->len] = '\0';
}

void attnd_buf_tensor(attnd_buf_t *b, attnd_form_t form, const float *x,
                      int rank, const int64_t *dim) {
  size_t n = 1;
  for (int i = 0; i < rank; i++)
    n *= (size_t)dim[i];
  if (form == ATTND_FORM_NESTED) {
    attnd_buf_floats(b, x, n, rank, dim);
    return;
  }
  char head[160];
  size_t k = (size_t)snprintf(head, sizeof head, "{\"shape\":[");
  for (int i = 0; i < rank && k < sizeof head; i++)
    k += (size_t)snprintf(head + k, sizeof head - k, "%s%lld", i ? "," : "",
                          (long long)dim[i]);
  attnd_buf_append(b, head, k < sizeof head ? k : sizeof head - 1);
  if (form == ATTND_FORM_FLAT) {
    attnd_buf_puts(b, "],\"data\":");
    attnd_buf_floats(b, x, n, 0, NULL);
  } else {
    attnd_buf_puts(b, "],\"dtype\":\"float32\",\"base64\":\"");
    attnd_buf_base64(b, x, n * sizeof *x);
    attnd_buf_puts(b, "\"");
  }
  attnd_buf_puts(b, "}");
}

/* ---- the bulk scanner -------------------------------------------------------
 *
 * One pass of a JSON lexer copies the text to the skeleton. It only needs to
 * know where strings are and how deep the containers nest; at each '['
 * outside a string it tries to read a bulk array (bulk_try). If that fails,
 * the '[' is copied and lexing goes on right after it, so the arrays inside
 * get their own tries. A leaf is read by at most ATTND_BULK_MAX_RANK tries
 * (those of its nearest enclosing arrays; further ones stop at depth 5
 * before reaching it), so the scan is linear.
 *
 * Why the skeleton parses exactly when the text does, to the same value: a
 * replaced array is a valid JSON array by jansson's own rules (the grammar
 * below, numbers that jansson accepts, true/false) and so is its
 * placeholder; jansson's parser state after either is the same, and all
 * other bytes are the same. The one global rule is jansson's depth limit,
 * JSON_PARSER_MAX_DEPTH, which counts every value, scalars included: a
 * rank-r array inside d containers reaches depth d + r + 1 and its
 * placeholder only d + 2, so an array is replaced only if d + r + 1 fits. */

/* Whether s[0..n) is all printable ASCII (0x20..0x7e), eight bytes at a
 * time: a byte is flagged if its high bit is set (>= 0x80), if adding 1 to
 * its low seven bits carries into the high bit (0x7f), or if subtracting
 * 0x20 borrows (< 0x20; the borrow may flag a neighbour too, but only when
 * some byte is below 0x20 already). */
static int printable(const char *s, size_t n) {
  const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
  uint64_t bad = 0;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t x, low;
    memcpy(&x, s + i, 8);
    low = x & ~highs;
    bad |= x | (low + ones) | ((x - 0x20 * ones) & ~x);
  }
  if (bad & highs)
    return 0;
  for (; i < n; i++)
    if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] >= 0x7f)
      return 0;
  return 1;
}

/* Reusable storage for the leaves of the current try. */
typedef struct scratch {
  float *x;
  size_t n, cap;
} scratch_t;

static int is_ws(char c) {
  return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

static const char *skip_ws(const char *p, const char *end) {
  while (p < end && is_ws(*p))
    p++;
  return p;
}

/* Reads the array at p (*p == '['): a rectangular array of rank at most
 * max_rank whose leaves are all numbers or all true/false, with at least
 * min_elems of them. On success returns the first character after it and
 * fills *item, which takes the scratch's storage. Otherwise returns NULL,
 * with *oom set if the scratch could not grow.
 *
 * len[l] counts the elements of the open array at level l (1-based); dim[l-1]
 * is the length every array at level l must have, 0 until the first of them
 * closes. The first leaf fixes the rank: every leaf must be that deep. */
static const char *bulk_try(const char *p, const char *end, int max_rank,
                            size_t min_elems, scratch_t *sc, attnd_bulk_t *item,
                            int *oom) {
  int64_t len[ATTND_BULK_MAX_RANK + 1], dim[ATTND_BULK_MAX_RANK] = {0};
  int level = 0, rank = 0, is_bool = -1;
  sc->n = 0;
  for (;;) {
    /* a value: open arrays down to a leaf */
    while (*p == '[') {
      if (++level > max_rank || (rank && level > rank))
        return NULL;
      len[level] = 0;
      p = skip_ws(p + 1, end);
      if (p == end)
        return NULL;
    }
    if (!rank)
      rank = level;
    else if (level != rank)
      return NULL;

    /* the leaf */
    float v;
    int leaf_bool;
    if (end - p >= 4 && memcmp(p, "true", 4) == 0) {
      v = 1.0f, leaf_bool = 1, p += 4;
    } else if (end - p >= 5 && memcmp(p, "false", 5) == 0) {
      v = 0.0f, leaf_bool = 1, p += 5;
    } else if (attnd_number_parse(p, end, &v, &p) == 0) {
      leaf_bool = 0;
    } else {
      return NULL;
    }
    if (is_bool != leaf_bool) {
      if (is_bool >= 0)
        return NULL; /* numbers and booleans mixed */
      is_bool = leaf_bool;
    }
    if (sc->n == sc->cap) {
      size_t cap = sc->cap ? 2 * sc->cap : 1024;
      float *x =
          cap <= SIZE_MAX / sizeof *x ? realloc(sc->x, cap * sizeof *x) : NULL;
      if (!x) {
        *oom = 1;
        return NULL;
      }
      sc->x = x;
      sc->cap = cap;
    }
    sc->x[sc->n++] = v;
    len[level]++;

    /* after a value: ',' leads to the next one, ']' closes an array */
    for (;;) {
      p = skip_ws(p, end);
      if (p == end)
        return NULL;
      if (*p == ',') {
        p = skip_ws(p + 1, end);
        if (p == end)
          return NULL;
        break;
      }
      if (*p != ']')
        return NULL;
      p++;
      if (!dim[level - 1])
        dim[level - 1] = len[level];
      else if (dim[level - 1] != len[level])
        return NULL; /* ragged */
      if (--level == 0)
        goto done;
      len[level]++;
    }
  }

done:
  if (sc->n < min_elems)
    return NULL;
  item->n = sc->n;
  item->rank = rank;
  memset(item->dim, 0, sizeof item->dim);
  memcpy(item->dim, dim, (size_t)rank * sizeof *dim);
  item->is_bool = is_bool;
  item->text = NULL;
  item->text_len = 0;
  item->data = realloc(sc->x, sc->n * sizeof *sc->x); /* shrink */
  if (!item->data)
    item->data = sc->x;
  sc->x = NULL;
  sc->n = sc->cap = 0;
  return p;
}

void attnd_bulk_set_init(attnd_bulk_set_t *set, uint64_t nonce) {
  set->items = NULL;
  set->n = set->cap = 0;
  set->nonce = nonce;
}

void attnd_bulk_set_free(attnd_bulk_set_t *set) {
  for (size_t i = 0; i < set->n; i++)
    free(set->items[i].data);
  free(set->items);
  attnd_bulk_set_init(set, set->nonce);
}

/* Adds *item to the set and appends its placeholder to the skeleton: the
 * array placeholder, or for a string item the string placeholder. On
 * failure frees the item's data. Returns 0 or -1. */
static int bulk_add(attnd_bulk_set_t *set, attnd_bulk_t *item,
                    attnd_buf_t *skel) {
  if (set->n == set->cap) {
    size_t cap = set->cap ? 2 * set->cap : 8;
    attnd_bulk_t *items = realloc(set->items, cap * sizeof *items);
    if (!items) {
      free(item->data);
      return -1;
    }
    set->items = items;
    set->cap = cap;
  }
  char text[80];
  int len = snprintf(
      text, sizeof text,
      item->text ? "\"\\u0001bulk:%llu:%llu\"" : "[\"\\u0001bulk\",%llu,%llu]",
      (unsigned long long)set->nonce, (unsigned long long)set->n);
  set->items[set->n++] = *item;
  attnd_buf_append(skel, text, (size_t)len);
  return skel->oom ? -1 : 0;
}

int attnd_bulk_scan(const char *src, size_t n, size_t min_elems,
                    size_t min_string, attnd_bulk_set_t *set,
                    attnd_buf_t *skeleton) {
  const char *p = src, *end = src + n;
  const char *copied = src; /* src[copied..p) is still to be copied */
  size_t depth = 0;         /* containers open at p */
  scratch_t sc = {NULL, 0, 0};
  int oom = 0;
  while (p < end && !oom) {
    switch (*p) {
    case '"': { /* a string: skip to its closing quote */
      const char *open = p++;
      int escapes = 0;
      for (;;) { /* the next quote that no backslash escapes */
        const char *q = memchr(p, '"', (size_t)(end - p));
        const char *bs = memchr(p, '\\', (size_t)((q ? q : end) - p));
        if (bs == NULL) {
          p = q ? q + 1 : end;
          break;
        }
        escapes = 1;
        p = bs + 2 < end ? bs + 2 : end;
      }
      size_t len = (size_t)(p - open);
      if (!escapes && min_string && p[-1] == '"' && len >= min_string + 2 &&
          printable(open + 1, len - 2)) {
        attnd_bulk_t item = {.text = open + 1, .text_len = len - 2};
        attnd_buf_append(skeleton, copied, (size_t)(open - copied));
        oom = bulk_add(set, &item, skeleton) < 0;
        copied = p;
      }
      break;
    }
    case '[': {
      attnd_bulk_t item;
      const char *after = NULL;
      if (depth + 2 <= JSON_PARSER_MAX_DEPTH) {
        size_t room = JSON_PARSER_MAX_DEPTH - 1 - depth; /* ranks that fit */
        int max_rank =
            room < ATTND_BULK_MAX_RANK ? (int)room : ATTND_BULK_MAX_RANK;
        after = bulk_try(p, end, max_rank, min_elems, &sc, &item, &oom);
      }
      if (after) {
        attnd_buf_append(skeleton, copied, (size_t)(p - copied));
        oom = bulk_add(set, &item, skeleton) < 0;
        p = copied = after;
      } else {
        depth++;
        p++;
      }
      break;
    }
    case '{':
      depth++;
      p++;
      break;
    case ']':
    case '}':
      depth -= depth > 0;
      p++;
      break;
    default:
      p++;
    }
  }
  free(sc.x);
  if (!oom) {
    attnd_buf_append(skeleton, copied, (size_t)(p - copied));
    oom = skeleton->oom;
  }
  return oom ? -1 : 0;
}
