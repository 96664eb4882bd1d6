/* codec/number.c: exact parsing and shortest printing of JSON
 * numbers as float32. See number.h.
 *
 * Pure functions of their arguments (only constant tables are read), so any
 * thread may call them. strtod() is used on the rare slow paths and assumes
 * the C locale's decimal point, as attnd never calls setlocale(). */
#include "number.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mem.h"

/* ---- powers of ten ----------------------------------------------------------
 *
 * pow10_tab[k] is 10^k, exact in double for k in [0, 22], as Clinger's fast
 * path needs. */
static const double pow10_tab[23] = {
    1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* c·10^q rounded to double exactly as strtod would round the decimal text,
 * when Clinger's fast path applies: c ≤ 2^53 and |q| ≤ 22 make c and 10^|q|
 * exact doubles, so one IEEE multiply or divide rounds the exact value
 * once. Returns 0 and sets *d, or -1 outside that range. */
static inline int clinger(uint64_t c, int64_t q, double *d) {
  if (c > (1ull << 53) || q < -22 || q > 22)
    return -1;
  *d = q < 0 ? (double)c / pow10_tab[-q] : (double)c * pow10_tab[q];
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

/* How many of the 8 bytes of w (the first in its lowest byte) are ASCII
 * digits before the first that is not, without a branch per byte: a
 * byte's high bit is set in `low` when it is at least '0', in `high` when
 * it is above '9' (per 7-bit lane, so no lane carries into the next), and
 * in w itself when it is not ASCII. */
static inline int digits_lead(uint64_t w) {
  const uint64_t H = 0x8080808080808080ull;
  uint64_t low = ((w | H) - 0x3030303030303030ull) & H;
  uint64_t high = ((w & ~H) + 0x4646464646464646ull) & H;
  uint64_t bad = (~low | high | w) & H;
  return bad ? __builtin_ctzll(bad) / 8 : 8;
}

/* The value of the first n (1 to 8) digits of w, as digits_lead counted
 * them: the rest shifted out, the digits' values combined in pairs, then
 * fours, then eights, each a multiply-add of adjacent lanes (10a + b in
 * 16-bit lanes, 100a + b in 32-bit ones, 10^4·a + b), with no carry
 * between lanes at any step (99, 9999, 99999999 at most). */
static inline uint64_t digits_value(uint64_t w, int n) {
  uint64_t x = (w - 0x3030303030303030ull) << (8 * (8 - n));
  x = (x * 10 + (x >> 8)) & 0x00FF00FF00FF00FFull;
  x = (x * 100 + (x >> 16)) & 0x0000FFFF0000FFFFull;
  return (x * 10000 + (x >> 32)) & 0xFFFFFFFFull;
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
 * once here (up to 7 more past a fraction's end, unused), and once more by
 * strtod on the slow path. */
#define MANT_FULL 1000000000000000000ull /* 10^18: 19 digits in mant */
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

  /* The first 19 significant digits go into mant (each digit that comes
   * while mant < 10^18), with value = mant·10^e10 while no digit is left
   * out. Once one is, mant ≥ 10^18 > 2^53 keeps the number off the fast
   * path, so the rest need not be counted. */
  uint64_t mant = 0;
  int whole = 1; /* no significant digit was left out of mant */
  int64_t e10 = 0;

  /* integer part: "0" or [1-9][0-9]* */
  if (*p == '0') {
    p++;
    if (p < end && is_digit(*p))
      return -1; /* a leading zero */
  } else {
    do {
      if (mant < MANT_FULL)
        mant = mant * 10 + (uint64_t)(*p - '0');
      else
        whole = 0;
    } while (++p < end && is_digit(*p));
  }

  /* fraction: "." [0-9]+, 8 digits at a time while all fit in mant */
  if (p < end && *p == '.') {
    p++;
    if (p == end || !is_digit(*p))
      return -1;
    while (end - p >= 8 && mant < 10000000000ull) { /* 10^10: 8 more fit */
      uint64_t w;
      memcpy(&w, p, sizeof w);
      int n = digits_lead(w);
      if (n == 0)
        break;
      static const uint64_t scale[9] = {
          1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000};
      mant = mant * scale[n] + digits_value(w, n);
      e10 -= n;
      p += n;
      if (n < 8)
        break;
    }
    for (; p < end && is_digit(*p); p++) {
      if (mant < MANT_FULL) {
        mant = mant * 10 + (uint64_t)(*p - '0');
        e10--;
      } else {
        whole = 0;
      }
    }
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
    char *tok = len < sizeof small ? small : attnd_mem_alloc(len + 1);
    if (!tok)
      return -1; /* out of memory for an over-long token */
    memcpy(tok, s, len);
    tok[len] = '\0';
    errno = 0;
    d = strtod(tok, NULL);
    int range = errno == ERANGE;
    if (tok != small)
      attnd_mem_free(tok);
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
 * A positive finite float is v = c·2^q exactly, c < 2^24 an integer. A
 * decimal reads back to v (attnd_number_parse, (float)strtod) when it lies
 * in v's rounding interval: between the midpoints v - 2^(q-1) and
 * v + 2^(q-1) that v shares with its neighbours (the lower one v - 2^(q-2)
 * when v is a power of two above the smallest normal, where the float below
 * is twice as dense), the midpoints themselves going to the float with the
 * even significand: included iff c is even. strtod's rounding to double
 * comes first, and it sends a decimal within half a double ulp of a
 * midpoint onto the midpoint (as 7.038531e-26, between the floats
 * 0x15ae43fd and 0x15ae43fe and a relative 3e-17 below their midpoint,
 * reads as the even 0x15ae43fe, where strtof gives the odd one). So the
 * interval's ends are the midpoints moved by that much, outwards when c is
 * even and inwards when it is odd, and included iff c is even. In units of
 * 2^(q-2), with v = 4c, an end X of n bits moves by 2^(n-54), X's 54th
 * bit. (No midpoint is a power of two, below which the doubles are twice as
 * dense, but 2^-150, the lower end of 2^-149, which moves up.)
 *
 * Scaled by 10^-k, with k = floor(log10(width)), the interval [l, r] is
 * between 1 and 10 wide, and the decimals in it with exponent k or more
 * are its integers times 10^k. Being narrower than 10, it holds at most one
 * multiple of 10; if it holds one, that one is shorter than any other
 * candidate (a multiple of 100 in it would be the same number), so it is
 * the answer. If it holds none, its integers lie in one decade, so all have
 * the same length, and at least one of them lies in it, being 1 wide or
 * more; of those, the nearest v are the ones on either side of s = v·10^-k,
 * floor(s) and floor(s) + 1, and the nearer of the two that lies in the
 * interval is the answer. Where s is exactly halfway between them (v has
 * few bits, as 0.000244140625 = 2^-12), the larger one wins, as in earlier
 * versions of this printer. At most 9 digits: s < 10 · 2^24.
 *
 * Exactly, in integers: for X the ends 4c - 2 (4c - 1 below a power of two)
 * and 4c + 2, moved as above, and v's 4c, let Y = X·2^q·10^-k, four times
 * their scaled values. The choice compares Y with integers: with 4n for a
 * candidate n (is it in the interval?) and with 4s + 2 (is v past halfway?).
 * With the table entry g ≈ 10^-k·2^(63-b), b = floor(log2 10^-k), and
 * h = q + b + 1 in [1, 4], Y·2^34 = xs·g / 2^64 for the integer
 * xs = X·2^(34+h) < 2^64 (a normal float's moved X has 29 bits of
 * fraction at most; see scaled_subnormal for the others), and as g exceeds
 * the exact scale by at most 1, the high word y of that 128-bit product is
 * floor(Y·2^34 + e) for some e in (0, 1). For every float,
 * each of its three Y is an integer or further than 2^-34 from one
 * (checked over all 2^31 floats, against exact big-integer arithmetic), so
 * y is Y·2^34 when that is a multiple of 2^34, else strictly between the
 * same two multiples: y compares with n·2^34 exactly as Y with n. */

/* ten_neg_pow[k + 45], for k in [-45, 31], is floor(10^-k·2^(63-b)) + 1
 * with b = floor(log2 10^-k), so in (2^63, 2^64): 10^-k rounded up to 64
 * significant bits (+1 also where the product is exact, which keeps the
 * error bound above one-sided). Regenerate with exact rationals, e.g.
 * python3: from fractions import Fraction as F; x = F(10)**-k; b = the
 * largest integer with 2**b <= x; g = int(x * F(2)**(63 - b)) + 1. */
static const uint64_t ten_neg_pow[77] = {
    0xb35dbf821ae4f38c, 0x8f7e32ce7bea5c70, 0xe596b7b0c643c71a,
    0xb7abc627050305ae, 0x92efd1b8d0cf37bf, 0xeb194f8e1ae525fe,
    0xbc143fa4e250eb32, 0x96769950b50d88f5, 0xf0bdc21abb48db21,
    0xc097ce7bc90715b4, 0x9a130b963a6c115d, 0xf684df56c3e01bc7,
    0xc5371912364ce306, 0x9dc5ada82b70b59e, 0xfc6f7c4045812297,
    0xc9f2c9cd04674edf, 0xa18f07d736b90be6, 0x813f3978f8940985,
    0xcecb8f27f4200f3b, 0xa56fa5b99019a5c9, 0x84595161401484a1,
    0xd3c21bcecceda101, 0xa968163f0a57b401, 0x878678326eac9001,
    0xd8d726b7177a8001, 0xad78ebc5ac620001, 0x8ac7230489e80001,
    0xde0b6b3a76400001, 0xb1a2bc2ec5000001, 0x8e1bc9bf04000001,
    0xe35fa931a0000001, 0xb5e620f480000001, 0x9184e72a00000001,
    0xe8d4a51000000001, 0xba43b74000000001, 0x9502f90000000001,
    0xee6b280000000001, 0xbebc200000000001, 0x9896800000000001,
    0xf424000000000001, 0xc350000000000001, 0x9c40000000000001,
    0xfa00000000000001, 0xc800000000000001, 0xa000000000000001,
    0x8000000000000001, 0xcccccccccccccccd, 0xa3d70a3d70a3d70b,
    0x83126e978d4fdf3c, 0xd1b71758e219652c, 0xa7c5ac471b478424,
    0x8637bd05af6c69b6, 0xd6bf94d5e57a42bd, 0xabcc77118461cefd,
    0x89705f4136b4a598, 0xdbe6fecebdedd5bf, 0xafebff0bcb24aaff,
    0x8cbccc096f5088cc, 0xe12e13424bb40e14, 0xb424dc35095cd810,
    0x901d7cf73ab0acda, 0xe69594bec44de15c, 0xb877aa3236a4b44a,
    0x9392ee8e921d5d08, 0xec1e4a7db69561a6, 0xbce5086492111aeb,
    0x971da05074da7bef, 0xf1c90080baf72cb2, 0xc16d9a0095928a28,
    0x9abe14cd44753b53, 0xf79687aed3eec552, 0xc612062576589ddb,
    0x9e74d1b791e07e49, 0xfd87b5f28300ca0e, 0xcad2f7f5359a3b3f,
    0xa2425ff75e14fc32, 0x81ceb32c4b43fcf5,
};

__extension__ typedef unsigned __int128 u128; /* gcc and clang */

/* Y·2^34 (see above) from the table entry g and xs, X moved and scaled so
 * that g·xs is Y·2^(34+sh), over by less than 2^sh. */
static inline uint64_t scaled(uint64_t g, uint64_t xs, int sh) {
  return (uint64_t)(((u128)g * xs) >> sh);
}

/* The same for a subnormal's X (q = -149, k = -45, h = 1), moved by
 * d ∈ {-1, 0, 1} units of its 54th bit, which can be X's 52nd fraction
 * bit: xs = X·2^(54-n) + d < 2^54 for X of n bits, Y = xs·g / 2^(117-n),
 * and g·xs is over by less than 2^54 ≤ 2^(83-n). */
static inline uint64_t scaled_subnormal(uint64_t g, uint32_t x, int d) {
  int n = 32 - __builtin_clz(x);
  uint64_t xs = ((uint64_t)x << (54 - n)) + (uint64_t)(int64_t)d;
  return scaled(g, xs, 83 - n);
}

/* "00".."99", for the exponent's digits. */
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

/* The 8 decimal digits of r < 10^8 as the bytes of a little-endian word,
 * the first digit in the lowest byte, before adding '0': halves of 4
 * digits in 32-bit lanes, split into 2-digit 16-bit lanes, then into
 * 1-digit bytes, each lane by a multiply-shift division that is exact for
 * the lane's range (x/100 as x·10486 >> 20 for x < 10^4, x/10 as
 * x·103 >> 10 for x < 100), with no branch on the number of digits. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "digits8 and put16 write a word's low byte first");
static inline uint64_t digits8(uint32_t r) {
  uint64_t x = r / 10000 | (uint64_t)(r % 10000) << 32;
  uint64_t hundreds = (x * 10486 >> 20) & 0x0000007F0000007Full;
  x = hundreds | (x - hundreds * 100) << 16;
  uint64_t tens = (x * 103 >> 10) & 0x000F000F000F000Full;
  return tens | (x - tens * 10) << 8;
}

/* 16 bytes of text to p, from two words of digit values (see
 * put_decimal): '0' added to each byte, without carries as each is at
 * most 9. */
static inline void put16(char *p, uint64_t w0, uint64_t w1) {
  w0 += 0x3030303030303030ull;
  w1 += 0x3030303030303030ull;
  memcpy(p, &w0, 8);
  memcpy(p + 8, &w1, 8);
}

/* Writes c·10^q (0 < c < 10^9) to p; returns the end. Plain positional
 * notation for a decimal exponent x in [-4, 15) (like %g), else
 * "d.ddde±XX". The text is at most 16 characters, but stores of a fixed
 * 16 bytes (cheaper than exact ones) may write up to 25 bytes at p. */
static char *put_decimal(uint32_t c, int q, char *p) {
  /* c's significant digits, the first in the lowest byte of w0, then
   * those of w1, followed by zero bytes that put16 turns into '0's: with
   * a 9th digit top, top and low's 8 bytes; else low without its `lead`
   * leading zero bytes, 8 digits at most. Built in registers and stored,
   * not copied through a buffer, whose narrower stores a 16-byte load
   * could not take its bytes from. */
  uint32_t top = c / 100000000;
  uint64_t low = digits8(c - top * 100000000);
  uint32_t has_top = top != 0; /* then bit 0 stands in for low's 1st byte */
  int zeros = (int)((unsigned)__builtin_ctzll(low | has_top) / 8);
  uint64_t w0 = has_top ? top | low << 8 : low >> (8 * zeros);
  uint64_t w1 = has_top ? low >> 56 : 0;
  int lead = 1 - (int)has_top + zeros; /* of 9 digits */
  int x = q + 8 - lead;                /* the value is d.ddd·10^x */
  /* nd digits once trailing zeros are dropped (all of low's when it is 0:
   * bit 0 then stands in for its first byte) */
  int trail = (int)((unsigned)__builtin_clzll(low | 1) / 8) + (low == 0);
  int nd = 9 - lead - trail;

  if (x >= 0 && x < 15) {
    put16(p, w0, w1);
    if (nd <= x + 1) /* an integer: the digits, then '0's */
      return p + x + 1;
    u128 frac = ((u128)w1 << 64 | w0) >> (8 * (x + 1)); /* from digit x+1 */
    put16(p + x + 2, (uint64_t)frac, (uint64_t)(frac >> 64));
    p[x + 1] = '.';
    return p + nd + 1;
  }
  if (x < 0 && x >= -4) {
    memcpy(p, "0.000", 5);
    p += 1 - x;
    put16(p, w0, w1);
    return p + nd;
  }
  put16(p + 1, w0, w1); /* the first digit moves before the point */
  p[0] = p[1];
  p[1] = '.';
  p += nd > 1 ? nd + 1 : 1;
  int ax = x < 0 ? -x : x; /* a float's is at most 45: two digits */
  p[0] = 'e';
  p[1] = x < 0 ? '-' : '+';
  memcpy(p + 2, digit_pairs + 2 * ax, 2);
  return p + 4;
}

/* The shortest decimal m·10^*e that reads back to the positive finite
 * float of these bits (see above). */
static inline uint32_t shortest(uint32_t bits, int *e) {
  /* v = c·2^q; `out` when the interval's ends are not in it (c odd), and
   * then they move inwards (`in`), else outwards */
  uint32_t frac = bits & 0x7FFFFFu, bexp = bits >> 23;
  uint32_t c = bexp ? frac | 0x800000u : frac;
  uint32_t out = c & 1;
  int in = out ? 1 : -1;
  int k;
  uint64_t lo, mid, hi; /* Y·2^34 for the interval's ends and v */
  if (__builtin_expect(bexp != 0, 1)) {
    int q = (int)bexp - 150;
    int narrow = frac == 0 && bexp > 1; /* a power of two: 3/4 as wide */
    /* k = floor(log10(width)), the width 2^q or 3·2^(q-2); then
     * b = floor(log2 10^-k). Both from fixed-point logarithms
     * (2^22·log10 2, -2^22·log10 0.75, 2^19·log2 10, rounded down), offset
     * to shift only non-negative numbers, and exact over the range used
     * (q in [-149, 104], k in [-45, 31]), as checked with exact
     * rationals. */
    k = ((q * 1262611 - (narrow ? 524031 : 0) + (64 << 22)) >> 22) - 64;
    int b = ((-k * 1741647 + (128 << 19)) >> 19) - 128;
    int h = q + b + 1;
    uint64_t g = ten_neg_pow[k + 45];
    /* X·2^29: an X of 26 bits moves by 2^-28 (2 units), the lower end
     * 4c - 2 or 4c - 1 of 25 bits at c = 2^23 by 2^-29 (1); times
     * 2^(h+5) ≤ 2^9, so that Y·2^34 is the high word of xs·g */
    int64_t dl = frac ? 2 * in : in;
    uint64_t xl =
        ((uint64_t)(4 * c - 2 + (uint32_t)narrow) << 29) + (uint64_t)dl;
    uint64_t xh = ((uint64_t)(4 * c + 2) << 29) - (uint64_t)(int64_t)(2 * in);
    lo = scaled(g, xl << (h + 5), 64);
    mid = scaled(g, (uint64_t)c << (36 + h), 64);
    hi = scaled(g, xh << (h + 5), 64);
  } else { /* q = -149, so k = -45, h = 1 */
    k = -45;
    uint64_t g = ten_neg_pow[0];
    lo = scaled_subnormal(g, 4 * c - 2, in);
    mid = scaled_subnormal(g, 4 * c, 0);
    hi = scaled_subnormal(g, 4 * c + 2, -in);
  }

  /* Y·2^34 at the candidate n·10^k, Y = 4n (< 2^30); `out` makes the
   * comparisons with the ends strict */
#define AT(n) ((uint64_t)(n) << 36)
  /* floor(s) or floor(s) + 1: `up` if floor(s) is out, or both are in and
   * floor(s) + 1 is as near or nearer */
  uint32_t s = (uint32_t)(mid >> 36);
  uint32_t s_in = lo + out <= AT(s), s1_in = AT(s + 1) + out <= hi;
  uint32_t up = (s_in ^ 1) | (s1_in & (mid >= AT(s) + AT(1) / 2));
  /* but the multiple of 10 in the interval, if one is: t or t + 10 */
  uint32_t t = s / 10;
  uint32_t t_in = lo + out <= AT(10 * t), t10_in = AT(10 * t + 10) + out <= hi;
#undef AT
  uint32_t ten = t_in ^ t10_in, pick = 0u - ten; /* a mask: no branch */
  *e = k + (int)ten;
  return ((t + t10_in) & pick) | ((s + up) & ~pick);
}

/* v's text at p, from its shortest decimal when that is m·10^e (m > 0),
 * else as attnd_float_put writes it; returns the end. */
static inline char *put_float(float v, uint32_t m, int e, char *p) {
  uint32_t bits;
  memcpy(&bits, &v, sizeof bits);
  if (__builtin_expect(m == 0, 0)) {
    if ((bits & 0x7FFFFFFFu) >= 0x7F800000u) { /* NaN or ±inf: not JSON */
      memcpy(p, "null", 4);
      return p + 4;
    }
    *p = '-';
    p += bits >> 31;
    *p = '0';
    return p + 1;
  }
  *p = '-'; /* kept only for a negative v: no branch on the sign */
  p += bits >> 31;
  return put_decimal(m, e, p);
}

/* shortest() of a float that is finite and not zero, else m = 0. */
static inline uint32_t shortest_of(float v, int *e) {
  uint32_t bits;
  memcpy(&bits, &v, sizeof bits);
  bits &= 0x7FFFFFFFu;
  *e = 0;
  return bits - 1 < 0x7F7FFFFFu ? shortest(bits, e) : 0;
}

char *attnd_float_put(float v, char *p) {
  int e;
  uint32_t m = shortest_of(v, &e);
  return put_float(v, m, e, p);
}

/* Blocks of FLOATS_BLOCK: their digits first, then their text, so that the
 * digits of several floats are computed at once (each is a long chain of
 * dependent multiplies; their text's position depends on the one before). */
#define FLOATS_BLOCK 8
char *attnd_floats_put(const float *x, size_t n, char *p) {
  uint32_t m[FLOATS_BLOCK];
  int e[FLOATS_BLOCK];
  for (size_t i = 0; i < n; i += FLOATS_BLOCK) {
    size_t b = n - i < FLOATS_BLOCK ? n - i : FLOATS_BLOCK;
    for (size_t j = 0; j < b; j++)
      m[j] = shortest_of(x[i + j], &e[j]);
    for (size_t j = 0; j < b; j++) {
      p = put_float(x[i + j], m[j], e[j], p);
      *p++ = ',';
    }
  }
  return n ? p - 1 : p;
}

int attnd_float_format(float v, char *buf) {
  char *end = attnd_float_put(v, buf);
  *end = '\0';
  return (int)(end - buf);
}
