/* server/codec/number.c: exact parsing and shortest printing of JSON
 * numbers as float32. See number.h.
 *
 * Pure functions of their arguments (only constant tables are read), so any
 * thread may call them. strtod() is used on the rare slow paths and assumes
 * the C locale's decimal point, as attnd never calls setlocale(). */
#include "number.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
 * a number followed by something. An integer literal beyond int64 is read
 * as the real it is, as the decoder has jansson read it (bulk.h,
 * attnd_json_widen_numbers). Linear in the token: each character is read
 * once here, and once more by strtod on the slow path. */
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

  /* integer part: "0" or [1-9][0-9]* */
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

  /* fraction: "." [0-9]+ */
  if (p < end && *p == '.') {
    p++;
    if (p == end || !is_digit(*p))
      return -1;
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
    int64_t ex = 0;
    do {
      if (ex < 1000000)
        ex = ex * 10 + (*p - '0');
    } while (++p < end && is_digit(*p));
    e10 += eneg ? -ex : ex;
  }

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
    if (range && isinf(d)) {
      *next = p;
      return -2; /* jansson: "real number overflow"; underflow is fine */
    }
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

char *attnd_float_put(float v, char *p) {
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
  char *end = attnd_float_put(v, buf);
  *end = '\0';
  return (int)(end - buf);
}
