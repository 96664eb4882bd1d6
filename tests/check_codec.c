/* tests/check_codec.c: the codec library (codec/) against simple references.
 *
 * References: strtod/strtoll and jansson itself for numbers (bit for bit),
 * a naive bit-by-bit base64 codec, a brute-force shortest-decimal search
 * built on printf and strtod, and jansson for the bulk scanner. The
 * scanner's property: for any text T, jansson parses T iff it parses the
 * skeleton, and then the skeleton with every placeholder replaced by its
 * tensor equals T's value (numbers compared as floats, see json_same);
 * jansson here reads as the decoder does, with integers beyond int64
 * widened to reals (load_widened).
 * Cases:
 *   - numbers: random values printed in many formats, edge and halfway
 *     cases, invalid grammar, overflow, the `end` bound;
 *   - floats: a million random bit patterns read back, special values,
 *     exact texts, shortness against the brute-force search;
 *   - base64: random lengths against the naive codec, RFC 4648 vectors,
 *     every way to be malformed with its bad_pos;
 *   - the text buffer and its tensor printer;
 *   - the scanner: exact skeletons, a table of adversarial texts, jansson's
 *     depth limit, random documents, every prefix, random mutations;
 *     linear work on hostile texts, counted (attnd__bulk_examined);
 *   - the widening of integers beyond int64: exact texts, and against
 *     jansson's JSON_DECODE_INT_AS_REAL on random documents.
 * No timings are asserted. */
#include <check.h>
#include <errno.h>
#include <float.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "codec/base64.h"
#include "codec/buf.h"
#include "codec/bulk.h"
#include "codec/number.h"
#include "codec/util.h"
#include "suite.h"

/* Check's ck_assert* tell the parent process about every passing call (the
 * "last checkpoint" of a crash report), a system call each. The sweeps here
 * make millions of checks, so their hot loops use CHECK, which calls into
 * Check only to fail. */
#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond))                                                               \
      ck_abort_msg("Assertion '%s' failed", #cond);                            \
  } while (0)
#define CHECK_MSG(cond, ...)                                                   \
  do {                                                                         \
    if (!(cond))                                                               \
      ck_abort_msg(__VA_ARGS__);                                               \
  } while (0)

/* ---- PRNG (splitmix64) and helpers --------------------------------------- */

typedef struct rng {
  uint64_t s;
} rng_t;

static rng_t rng_seeded(uint64_t seed) {
  rng_t r = {seed * 0x9E3779B97F4A7C15ull + 1};
  return r;
}

static uint64_t rng_next(rng_t *r) {
  uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static uint64_t rng_below(rng_t *r, uint64_t n) {
  return rng_next(r) % n;
}

static double rng_unit(rng_t *r) {
  return (double)(rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

static uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static float bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* A finite float with uniformly random bits. */
static float rng_float_bits(rng_t *r) {
  for (;;) {
    uint32_t u = (uint32_t)rng_next(r);
    if ((u & 0x7F800000u) != 0x7F800000u)
      return bits_float(u);
  }
}

/* A finite double with uniformly random bits. */
static double rng_double_bits(rng_t *r) {
  for (;;) {
    uint64_t u = rng_next(r);
    if ((u & 0x7FF0000000000000ull) != 0x7FF0000000000000ull) {
      double d;
      memcpy(&d, &u, sizeof d);
      return d;
    }
  }
}

/* A value of the kind tensors hold: ±uniform·10^k, k in [-8, 8]. */
static float rng_float_typical(rng_t *r) {
  double v = (2 * rng_unit(r) - 1) * pow(10.0, (double)rng_below(r, 17) - 8);
  return (float)v;
}

#define TEST_NONCE 4503599627370497ull /* 2^52 + 1 */

/* ---- numbers: references ------------------------------------------------- */

/* The status and value attnd_number_parse must give for s, a string in the
 * JSON number grammar: (float)strtod, and -2 only when strtod overflows (an
 * integer literal beyond int64, which jansson alone refuses, is the real
 * it is: the decoder widens it, see bulk.h). */
static int ref_number(const char *s, float *out) {
  errno = 0;
  double d = strtod(s, NULL);
  if (errno == ERANGE && isinf(d))
    return -2;
  *out = (float)d;
  return 0;
}

/* jansson's value of s[0..n) as the decoder reads it: on jansson's numeric
 * overflow, again with the literals it refuses rewritten (integers beyond
 * int64 as reals, values beyond a double as ±ATTND_JSON_HUGE; server/
 * decode.c's parse). A new reference, or NULL with *e set. */
static json_t *load_widened(const char *s, size_t n, size_t flags,
                            json_error_t *e) {
  json_t *j = json_loadb(s, n, flags, e);
  if (j || json_error_code(e) != json_error_numeric_overflow)
    return j;
  attnd_buf_t w;
  attnd_buf_init(&w);
  long k = attnd_json_widen_numbers(s, n, &w);
  CHECK(k >= 0 && w.len == n);
  if (k > 0)
    j = json_loadb(w.data, w.len, flags, e);
  attnd_buf_free(&w);
  return j;
}

/* Parses s (all of it a JSON number) and checks status, value (bit for bit)
 * and end against ref_number, and acceptance and value against jansson as
 * the decoder reads it: a number beyond a double (-2) is one jansson
 * refuses, and reads as ATTND_JSON_HUGE once widened. */
static void check_number(const char *s) {
  size_t n = strlen(s);
  float want = 0, got = 0;
  const char *next = NULL;
  int want_st = ref_number(s, &want);
  int st = attnd_number_parse(s, s + n, &got, &next);
  CHECK_MSG(st == want_st, "\"%.80s\": status %d, want %d", s, st, want_st);
  json_error_t e;
  json_t *j = json_loads(s, JSON_DECODE_ANY, &e);
  if (st == -2) {
    CHECK_MSG(j == NULL && json_error_code(&e) == json_error_numeric_overflow,
              "\"%.80s\": jansson reads it", s);
    CHECK_MSG(next == s + n, "\"%.80s\": stopped at %td", s, next - s);
    j = load_widened(s, n, JSON_DECODE_ANY, &e);
    CHECK(j && fabs(json_number_value(j)) == ATTND_JSON_HUGE &&
          (json_number_value(j) < 0) == (s[0] == '-'));
    json_decref(j);
    return;
  }
  if (j == NULL)
    j = load_widened(s, n, JSON_DECODE_ANY, &e);
  CHECK_MSG((j != NULL) == (st == 0), "\"%.80s\": jansson disagrees", s);
  if (st == 0) {
    CHECK_MSG(next == s + n, "\"%.80s\": stopped at %td", s, next - s);
    CHECK_MSG(float_bits(got) == float_bits(want),
              "\"%.80s\": got %.9g (%08x), want %.9g (%08x)", s, got,
              float_bits(got), want, float_bits(want));
    float jf = (float)json_number_value(j);
    /* jansson's integer "-0" is 0 */
    CHECK(jf == got && (signbit(jf) == signbit(got) || json_is_integer(j)));
  }
  json_decref(j);
}

/* ---- numbers: tests ------------------------------------------------------ */

/* Random values in the formats clients use: even loop indices print
 * random floats (random bits or typical values), odd ones doubles with
 * random bits. */
static const char *const parse_formats[] = {
    "%.9g",  "%.9g",  "%.17g", "%.17g", "%.3g",  "%.3g",  "%e",    "%e",
    "%.25e", "%.25e", "%.0f",  "%.0f",  "%.40f", "%.40f", "%.19e", "%.19e",
};
#define N_PARSE_FORMATS (int)(sizeof parse_formats / sizeof *parse_formats)

START_TEST(test_parse_formats) {
  rng_t r = rng_seeded(100 + (uint64_t)_i);
  char s[512];
  for (int k = 0; k < 5000; k++) {
    double v = _i % 2 == 0 ? (k % 2 ? (double)rng_float_bits(&r)
                                    : (double)rng_float_typical(&r))
                           : rng_double_bits(&r);
    snprintf(s, sizeof s, parse_formats[_i], v);
    check_number(s);
  }
}
END_TEST

START_TEST(test_parse_integers) {
  rng_t r = rng_seeded(7);
  char s[64];
  for (int k = 0; k < 20000; k++) {
    uint64_t u = rng_next(&r) >> rng_below(&r, 64);
    if (k % 3 == 0)
      snprintf(s, sizeof s, "%llu", (unsigned long long)u);
    else
      snprintf(s, sizeof s, "%lld", (long long)(rng_below(&r, 2) ? u : -u));
    check_number(s);
  }
}
END_TEST

/* The extended-precision path: up to 19 significant digits with decimal
 * exponents in [-27, 27], as floats widened to doubles print (%.17g), and
 * 17 to 19 digits next to those midpoints between doubles that sit half a
 * double ulp from a midpoint between floats: there the 64-bit product may
 * land on the double midpoint, and must defer to strtod. */
START_TEST(test_parse_extended) {
  rng_t r = rng_seeded(300 + (uint64_t)_i);
  char s[128];
  for (int k = 0; k < 20000; k++) {
    double d = (double)rng_float_typical(&r);
    if (k % 2 == 0) {
      snprintf(s, sizeof s, k % 4 ? "%.17g" : "%.16g", d);
    } else {
      /* Where the double matters to the float: next to the midpoint fm of
       * two floats, the double midpoints fm ± ulp/2, printed to 17..19
       * digits. Rounded to 64 bits, these land on the double midpoint, and
       * the side the decimal lies on decides the float. */
      float f = rng_float_typical(&r);
      long double fm = ((long double)f + nextafterf(f, 2 * f)) / 2;
      double dm = (double)fm; /* exact: 25 significant bits */
      long double ud = (long double)nextafter(dm, 2 * dm) - dm;
      long double mid = fm + (k % 4 == 1 ? ud / 2 : -ud / 2);
      snprintf(s, sizeof s, "%.*Le", 16 + (int)rng_below(&r, 3), mid);
    }
    check_number(s);
  }
}
END_TEST

/* Values next to the midpoints between neighbouring floats and doubles,
 * where rounding twice (decimal to double to float) matters. */
START_TEST(test_parse_halfway) {
  rng_t r = rng_seeded(11);
  char s[1200];
  for (int k = 0; k < 3000; k++) {
    float f = fabsf(rng_float_bits(&r));
    if (f >= FLT_MAX)
      continue;
    double mid = 0.5 * ((double)f + (double)nextafterf(f, INFINITY));
    snprintf(s, sizeof s, "%.60e", mid); /* exact for most exponents */
    check_number(s);
    snprintf(s, sizeof s, "%.17g", nextafter(mid, 0));
    check_number(s);
    snprintf(s, sizeof s, "%.17g", nextafter(mid, INFINITY));
    check_number(s);
    double d = fabs(rng_double_bits(&r));
    if (d >= DBL_MAX)
      continue;
    long double dmid = 0.5L * ((long double)d + nextafter(d, INFINITY));
    snprintf(s, sizeof s, "%.800Le", dmid); /* exact: 800 digits */
    check_number(s);
  }
}
END_TEST

START_TEST(test_parse_edges) {
  static const char *const cases[] = {
      "0",
      "-0",
      "0.0",
      "-0.0",
      "0e0",
      "0E+0",
      "-0e-0",
      "0e99999999999999999999",
      "0.000e-9999",
      "1",
      "-1",
      "1.5",
      "1e5",
      "1E5",
      "1e+5",
      "1e-5",
      "1E-5",
      "1e-45",
      "1e-46",
      "7e-46",
      "7.1e-46",
      "1.4e-45",
      "1.17549435e-38",
      "3.4028235e38",
      "3.4028235e+38",
      "3.40282347e38",
      "3.4028236e38",
      "3.40282357e38",
      "1e38",
      "1e39",
      "1e308",
      "-1e308",
      "1.7976931348623157e308",
      "4.9e-324",
      "2.4703282292062327e-324",
      "2.4703282292062328e-324",
      "1e-400",
      "-1e-400",
      "2e-320",
      "9007199254740992",
      "9007199254740993",
      "9007199254740993.0",
      "9007199254740993e0",
      "9007199254740995",
      "123e22",
      "123e-22",
      "123e23",
      "123e-23",
      "9007199254740993e-22",
      "1e22",
      "1e23",
      "4503599627370497e22",
      "1.000000059604644775390625",
      "1.00000005960464477539062499",
      "1.000000059604644775390625000001",
      "1.0000000596046448",
      "1.00000017881393432617187499",
      "1.000000178813934326171875",
      "0.1",
      "0.2",
      "0.3",
      "0.7",
      "1234567890123456789",
      "-1234567890123456789",
      "9999999999999999999e0",
      "9223372036854775807",
      "-9223372036854775808",
      "0.1234567890123456789",
      "0.12345678901234567891",
      "1234567890123456789012345e-10",
      "1.234567890123456789012345",
      "123456789012345678901234567890",
      "0.000000000000000000000000001",
      "100000000000000000000000000000000000000e-38",
      "-1.5e-05",
      "0.123456789",
      "16777217",
      "16777219",
      "33554433",
      "340282356779733661637539395458142568448",
      "340282366920938463463374607431768211456",
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++)
    check_number(cases[k]);

  /* long tokens go through a heap copy */
  char s[2100];
  memset(s, '7', 1000);
  memcpy(s + 1000, ".5e-990", 8);
  check_number(s);
  memcpy(s, "0.", 2);
  memset(s + 2, '0', 1500);
  memcpy(s + 1502, "123e1400", 9);
  check_number(s);
  memset(s, '9', 2000);
  s[2000] = '\0';
  check_number(s); /* an integer far beyond long long */
  s[0] = '-';
  check_number(s);
}
END_TEST

START_TEST(test_parse_invalid) {
  static const char *const bad[] = {
      "",     "-",    "+1",   "+0",    ".5",   "-.5",      "5.",
      "5.e3", "1.e5", "1e",   "1e+",   "1e-",  "1E",       "1.5e",
      "e5",   "E5",   "01",   "00",    "-01",  "-00",      "007",
      "nan",  "NaN",  "-nan", "inf",   "-inf", "Infinity", "-Infinity",
      "--1",  "- 1",  " 1",   "\"1\"", "true", "null",     "[1]",
      "0.",   "-0.",  "1.-5", "1e+-5", "1ee5", "x",
  };
  for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
    const char *s = bad[k];
    float f = 42;
    const char *next = s;
    ck_assert_msg(attnd_number_parse(s, s + strlen(s), &f, &next) == -1,
                  "\"%s\" accepted", s);
    ck_assert(f == 42 && next == s); /* nothing written */
  }
}
END_TEST

/* Numbers whose value overflows a double: jansson refuses them, and the
 * parser says so (-2); the decoder reads them as ±ATTND_JSON_HUGE. */
START_TEST(test_parse_overflow) {
  static const char *const big[] = {
      "1e309",
      "-1e309",
      "1e400",
      "1.8e308",
      "-1.8e308",
      "1e99999999999999999999",
      "1797693134862315807937289714053034150799341327100378269361737789804449"
      "6829276475094664901797758720709633028641669288791094655554785194040263"
      "0657488671505820681908902000708383676273854845817711531764475730270069"
      "8555713669596228429148198608349364752927190741684443655107043427115596"
      "99508093042880177904174497792.0",
      "1797693134862315807937289714053034150799341327100378269361737789804449"
      "6829276475094664901797758720709633028641669288791094655554785194040263"
      "0657488671505820681908902000708383676273854845817711531764475730270069"
      "8555713669596228429148198608349364752927190741684443655107043427115596"
      "99508093042880177904174497792",
  };
  for (size_t k = 0; k < sizeof big / sizeof *big; k++) {
    const char *s = big[k];
    float f;
    const char *next;
    ck_assert_msg(attnd_number_parse(s, s + strlen(s), &f, &next) == -2,
                  "\"%.40s\" not rejected as jansson does", s);
    check_number(s); /* jansson refuses it too */
  }
}
END_TEST

/* Integer literals beyond int64 (issue 11, defect 6): valid JSON that
 * jansson alone refuses ("too big integer"), and finite floats. The parser
 * reads them as the reals they are, as the decoder has jansson read them
 * (widened to real literals). */
START_TEST(test_parse_beyond_int64) {
  static const struct {
    const char *s;
    float want;
  } cases[] = {
      {"9223372036854775808", 9223372036854775808.0f},
      {"-9223372036854775809", -9223372036854775808.0f},
      {"18446744073709551616", 18446744073709551616.0f},
      {"99999999999999999999", 1e20f},
      {"-99999999999999999999", -1e20f},
      {"340282346638528859811704183484516925440", 3.40282347e38f},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    const char *s = cases[k].s;
    float f = 0;
    const char *next = NULL;
    ck_assert_msg(attnd_number_parse(s, s + strlen(s), &f, &next) == 0,
                  "\"%s\" refused", s);
    ck_assert_msg(next == s + strlen(s) && f == cases[k].want,
                  "\"%s\": %.9g, want %.9g", s, (double)f,
                  (double)cases[k].want);
    json_error_t e; /* jansson alone refuses it */
    ck_assert_ptr_null(json_loads(s, JSON_DECODE_ANY, &e));
    ck_assert_int_eq(json_error_code(&e), json_error_numeric_overflow);
    check_number(s);
  }
}
END_TEST

/* Reading stops at `end` and at the first character after the number. */
/* Fractions read 8 digits at a time: every length from 1 to 24 digits,
 * after integer parts that leave room in the mantissa and one that does
 * not, each followed by a byte next to the digits in ASCII ('/', ':'), a
 * digit with its high bit set, a separator, an exponent, or the end of the
 * buffer, at 0 to 9 bytes past the number's end: the same value as strtod
 * reads from the number alone, and the same end. */
START_TEST(test_parse_fraction_runs) {
  static const char *const ints[] = {"0", "-7", "12345678901"};
  static const char after[] = {',', ']', '/', ':', (char)0xB0, (char)0xB9, 'x'};
  rng_t r = rng_seeded(77);
  char buf[80];
  for (int ii = 0; ii < 3; ii++)
    for (int len = 1; len <= 24; len++)
      for (int a = 0; a <= (int)sizeof after; a++)
        for (int pad = 0; pad <= 9; pad++) {
          int n = snprintf(buf, sizeof buf, "%s.", ints[ii]);
          for (int k = 0; k < len; k++)
            buf[n++] = (char)('0' + rng_below(&r, 10));
          buf[n] = '\0';
          float want = 0, got = 0;
          ck_assert_int_eq(ref_number(buf, &want), 0);
          int total = n;
          if (a < (int)sizeof after) /* else the buffer ends with it */
            for (int k = 0; k < pad + 1; k++)
              buf[total++] = k ? '9' : after[a];
          const char *next = NULL;
          int st = attnd_number_parse(buf, buf + total, &got, &next);
          ck_assert_msg(st == 0 && next == buf + n &&
                            float_bits(got) == float_bits(want),
                        "\"%.*s\" then %d bytes: status %d, read %td, %.9g "
                        "for %.9g",
                        n, buf, total - n, st, next - buf, got, want);
        }
}
END_TEST

START_TEST(test_parse_bounds) {
  static const struct {
    const char *s;
    int len;      /* characters before `end` */
    int status;   /* expected */
    int consumed; /* characters read, when status is 0 */
    float value;
  } cases[] = {
      {"12345", 3, 0, 3, 123.0f},    {"01", 1, 0, 1, 0.0f},
      {"1.5", 2, -1, 0, 0},          {"1e5", 2, -1, 0, 0},
      {"1e5", 1, 0, 1, 1.0f},        {"-5", 1, -1, 0, 0},
      {"0x10", 4, 0, 1, 0.0f},       {"1.5.3", 5, 0, 3, 1.5f},
      {"1e5e3", 5, 0, 3, 1e5f},      {"123abc", 6, 0, 3, 123.0f},
      {"7,8", 3, 0, 1, 7.0f},        {"7]", 2, 0, 1, 7.0f},
      {"2.5e-1 ", 7, 0, 6, 0.25f},   {"-0.5}", 5, 0, 4, -0.5f},
      {"1.25E+2x", 8, 0, 7, 125.0f}, {"4e", 2, -1, 0, 0},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    const char *s = cases[k].s;
    float f = 0;
    const char *next = NULL;
    int st = attnd_number_parse(s, s + cases[k].len, &f, &next);
    ck_assert_msg(st == cases[k].status, "case %zu (%s): %d", k, s, st);
    if (st == 0) {
      ck_assert_int_eq(next - s, cases[k].consumed);
      ck_assert(float_bits(f) == float_bits(cases[k].value));
    }
  }
}
END_TEST

/* ---- printing floats ----------------------------------------------------- */

/* The number of significant digits in a decimal text. */
static int sig_digits(const char *s) {
  int n = 0, last = 0, started = 0;
  for (; *s && *s != 'e'; s++) {
    if (*s < '0' || *s > '9')
      continue;
    started |= *s != '0';
    if (started) {
      n++;
      if (*s != '0')
        last = n;
    }
  }
  return last;
}

/* The fewest significant digits of a decimal that reads back to v: for each
 * precision p, the p-digit decimals nearest v on either side (the correctly
 * rounded one from printf and its two neighbours) are tried with strtod. */
static int ref_shortest(float v) {
  char s[64], t[64];
  for (int p = 1; p <= 9; p++) {
    snprintf(s, sizeof s, "%.*e", p - 1, fabs((double)v));
    char *e = strchr(s, 'e');
    long long digits = 0;
    for (char *q = s; q < e; q++)
      if (*q != '.')
        digits = digits * 10 + (*q - '0');
    for (int d = -1; d <= 1; d++) {
      snprintf(t, sizeof t, "%llde%d", digits + d, atoi(e + 1) - (p - 1));
      if ((float)strtod(t, NULL) == fabsf(v))
        return p;
    }
  }
  return 99;
}

/* Formats v and checks: a JSON number of at most 16 characters that our
 * parser and strtod read back bit for bit; with `shortest`, as few digits
 * as ref_shortest; with `jansson`, jansson reads it back too. */
static void check_format(float v, int shortest, int jansson) {
  char buf[32];
  int n = attnd_float_format(v, buf);
  CHECK(n == (int)strlen(buf));
  CHECK_MSG(n >= 1 && n <= 16, "%.9g: \"%s\"", v, buf);
  float got = 0;
  const char *next = NULL;
  CHECK_MSG(attnd_number_parse(buf, buf + n, &got, &next) == 0 &&
                next == buf + n,
            "%.9g: \"%s\" is not a JSON number", v, buf);
  CHECK_MSG(float_bits(got) == float_bits(v), "%.9g: \"%s\" reads %.9g", v, buf,
            got);
  CHECK(float_bits((float)strtod(buf, NULL)) == float_bits(v));
  if (shortest && v != 0)
    CHECK_MSG(sig_digits(buf) == ref_shortest(v),
              "%.9g: \"%s\" has %d digits, %d suffice", v, buf, sig_digits(buf),
              ref_shortest(v));
  if (jansson) {
    json_error_t err;
    json_t *j = json_loads(buf, JSON_DECODE_ANY, &err);
    CHECK_MSG(j != NULL, "\"%s\": %s", buf, err.text);
    float jf = (float)json_number_value(j);
    CHECK(jf == v && (signbit(jf) == signbit(v) || json_is_integer(j)));
    json_decref(j);
  }
}

/* 10 × 100000 random bit patterns; every 50th also checked for shortness
 * and by jansson. */
START_TEST(test_format_random_bits) {
  rng_t r = rng_seeded(200 + (uint64_t)_i);
  for (int k = 0; k < 100000; k++)
    check_format(rng_float_bits(&r), k % 50 == 0, k % 50 == 0);
}
END_TEST

START_TEST(test_format_random_typical) {
  rng_t r = rng_seeded(300 + (uint64_t)_i);
  for (int k = 0; k < 20000; k++)
    check_format(rng_float_typical(&r), k % 4 == 0, k % 4 == 0);
}
END_TEST

START_TEST(test_format_special) {
  for (int e = -149; e <= 127; e++) {
    check_format(ldexpf(1.0f, e), 1, 1);
    check_format(-ldexpf(1.0f, e), 1, 1);
  }
  for (uint32_t u = 1; u < 2000; u++) /* the smallest denormals */
    check_format(bits_float(u), 1, 1);
  for (uint32_t u = 0x7F7FFFFFu; u > 0x7F7FF000u; u--) /* the largest */
    check_format(bits_float(u), 1, 1);
  for (uint32_t u = 0x007FF000u; u < 0x00801000u; u++) /* around FLT_MIN */
    check_format(bits_float(u), 1, 1);
  for (int k = -1000000; k <= 1000000; k += 7) /* integers */
    check_format((float)k, 1, k % 1001 == 0);
  for (int k = 1; k < 20000; k++) /* short decimals */
    check_format((float)k / 1000.0f, 1, 0);
  check_format(0.0f, 0, 1);
  check_format(-0.0f, 0, 0);
}
END_TEST

START_TEST(test_format_texts) {
  static const struct {
    float v;
    const char *text;
  } cases[] = {
      {0.0f, "0"},
      {-0.0f, "-0"},
      {0.1f, "0.1"},
      {1.0f, "1"},
      {100.0f, "100"},
      {-3.0f, "-3"},
      {2.5f, "2.5"},
      {0.3f, "0.3"},
      {1.5e-7f, "1.5e-07"},
      {-1.5e-5f, "-1.5e-05"},
      {0.001f, "0.001"},
      {0.0001f, "0.0001"},
      {1e-5f, "1e-05"},
      {123456.7f, "123456.7"},
      {16777216.0f, "16777216"},
      {1e10f, "10000000000"},
      {1e14f, "100000000000000"},
      {1e15f, "1e+15"},
      {-1e-10f, "-1e-10"},
      {FLT_MAX, "3.4028235e+38"},
      {FLT_MIN, "1.1754944e-38"},
      {1e-45f, "1e-45"},
      {0.333333343f, "0.33333334"},
      {3.14159274f, "3.1415927"},
      {-123456789.0f, "-123456790"},
      {1.17549421e-38f, "1.1754942e-38"},
  };
  char buf[32];
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    attnd_float_format(cases[k].v, buf);
    ck_assert_str_eq(buf, cases[k].text);
  }
  /* JSON has no NaN or infinity */
  static const float nonfinite[] = {NAN, -NAN, INFINITY, -INFINITY};
  for (int k = 0; k < 4; k++) {
    ck_assert_int_eq(attnd_float_format(nonfinite[k], buf), 4);
    ck_assert_str_eq(buf, "null");
  }
  attnd_float_format(-0.0f, buf); /* -0 must keep its sign */
  float f;
  const char *next;
  ck_assert_int_eq(attnd_number_parse(buf, buf + 2, &f, &next), 0);
  ck_assert(float_bits(f) == 0x80000000u);
}
END_TEST

/* Floats where the printer's exact bookkeeping decides, by bit pattern,
 * with the texts an exhaustive comparison with the previous printer (over
 * all float32) and strtod agree on: interval ends that are short decimals,
 * included (even significand) or not, the narrower interval below a power
 * of two, exact ties between two shortest candidates, a decimal that
 * strtod's rounding to double moves onto a midpoint, and the extremes. */
START_TEST(test_format_edges) {
  static const struct {
    uint32_t bits;
    const char *text;
  } cases[] = {
      {0x00000001u, "1e-45"},         /* 2^-149, the smallest subnormal */
      {0x00000002u, "3e-45"},         /* 2^-148 */
      {0x007FFFFFu, "1.1754942e-38"}, /* the largest subnormal */
      {0x00800000u, "1.1754944e-38"}, /* the smallest normal, 2^-126 */
      {0x7F7FFFFFu, "3.4028235e+38"}, /* FLT_MAX */
      {0x7F000000u, "1.7014118e+38"}, /* 2^127 */
      {0x5F000000u, "9.223372e+18"},  /* 2^63 */
      {0x44800000u, "1024"},
      {0x3F000000u, "0.5"},
      {0x3E99999Au, "0.3"},
      {0x3DCCCCCDu, "0.1"},
      {0x38D1B717u, "0.0001"},
      {0x4B189680u, "10000000"},  /* 1e7 */
      {0x4CEB79A3u, "123456790"}, /* 123456789 */
      {0x58635FA8u, "999999900000000"},
      {0x58635FA9u, "1e+15"},
      /* 2^24 = 16777216: its upper end 16777217 is a short decimal but
       * reads as the even 16777216; 16777218 is odd, its ends excluded */
      {0x4B800000u, "16777216"},
      {0x4B800001u, "16777218"},
      /* ends that are multiples of 10, in (even) or out (odd) */
      {0x4C000004u, "33554450"}, /* 33554448: upper end 33554450, in */
      {0x4C000005u, "33554452"}, /* lower end 33554450, out */
      {0x4C000009u, "33554468"}, /* upper end 33554470, out */
      {0x4C00000Au, "33554470"}, /* 33554472: lower end 33554470, in */
      {0x4D00000Au, "134217890"},
      {0x4D00000Fu, "134217970"},
      /* powers of two: the narrower interval below them rules out
       * 3.355443e+07, 7.105427e-15 and 1.2621774e-29 */
      {0x4C000000u, "33554432"},
      {0x28000000u, "7.1054274e-15"},
      {0x0F800000u, "1.2621775e-29"},
      /* exact ties between two shortest candidates go up:
       * 2^-12 = 0.000244140625, 2097152.25 */
      {0x39800000u, "0.00024414063"},
      {0x4A000001u, "2097152.3"},
      /* 7.038531e-26 is a relative 3e-17 below the midpoint of these two,
       * so strtod rounds it onto the midpoint, which goes to the even
       * 0x15ae43fe: it is that one's text, not 0x15ae43fd's */
      {0x15AE43FDu, "7.0385307e-26"},
      {0x15AE43FEu, "7.038531e-26"},
  };
  char buf[32];
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    float v = bits_float(cases[k].bits);
    attnd_float_format(v, buf);
    ck_assert_str_eq(buf, cases[k].text);
    check_format(v, 1, 1);
    attnd_float_format(-v, buf);
    ck_assert(buf[0] == '-' && strcmp(buf + 1, cases[k].text) == 0);
  }
}
END_TEST

/* attnd_floats_put writes each float as attnd_float_put does, separated by
 * commas, for every count from 0 to 40 (whole and partial blocks) and
 * values of every kind: NaN, infinities, zeros of both signs, subnormals,
 * the extremes and random bit patterns; and writes nothing past the bound
 * it states. */
START_TEST(test_floats_put) {
  static const float kinds[] = {NAN,    -INFINITY, INFINITY, 0.0f, -0.0f,
                                1e-45f, -FLT_MIN,  FLT_MAX,  0.1f, -3.0f};
  rng_t r = rng_seeded(31);
  float x[40] = {0};
  static char got[40 * (ATTND_FLOAT_TEXT_MAX + 1) + ATTND_FLOAT_WRITE_MAX + 8];
  char want[40 * 32];
  for (size_t n = 0; n <= 40; n++) {
    for (size_t i = 0; i < n; i++)
      x[i] = rng_below(&r, 3)
                 ? rng_float_bits(&r)
                 : kinds[rng_below(&r, sizeof kinds / sizeof *kinds)];
    char *w = want;
    for (size_t i = 0; i < n; i++) {
      if (i)
        *w++ = ',';
      w = attnd_float_put(x[i], w);
    }
    size_t bound = n * (ATTND_FLOAT_TEXT_MAX + 1) + ATTND_FLOAT_WRITE_MAX;
    memset(got, '#', sizeof got);
    char *end = attnd_floats_put(x, n, got);
    ck_assert_uint_eq((size_t)(end - got), (size_t)(w - want));
    ck_assert(memcmp(got, want, (size_t)(w - want)) == 0);
    for (size_t i = bound; i < sizeof got; i++)
      ck_assert_msg(got[i] == '#', "%zu floats: byte %zu written", n, i);
  }
}
END_TEST

/* ---- base64 -------------------------------------------------------------- */

static const char ref_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* Naive encoder: one bit at a time. Returns the text length. */
static size_t ref_b64_encode(const unsigned char *src, size_t n, char *dst) {
  size_t len = 0;
  unsigned acc = 0, nbits = 0;
  for (size_t i = 0; i < 8 * n; i++) {
    acc = acc << 1 | ((src[i / 8] >> (7 - i % 8)) & 1);
    if (++nbits == 6) {
      dst[len++] = ref_alphabet[acc];
      acc = nbits = 0;
    }
  }
  if (nbits)
    dst[len++] = ref_alphabet[acc << (6 - nbits)];
  while (len % 4)
    dst[len++] = '=';
  return len;
}

/* attnd_fmt_i64, attnd_fmt_u64, attnd_fmt_hex64 and attnd_fmt_ms against
 * printf: the integers exactly (extremes included), the timings as "%.3f"
 * of the value rounded to thousandths (so that both sides round the same
 * number; test_fmt_ms_is_printf compares with "%.3f" of v itself). */
START_TEST(test_fmt_numbers) {
  uint64_t st = 77;
  char got[32], want[64];
  static const int64_t edges[] = {
      0,         1, -1, 9, 10, 99, 100, INT64_MAX, INT64_MIN, INT64_MIN + 1,
      1000000007};
  for (size_t i = 0; i < sizeof edges / sizeof edges[0] + 20000; i++) {
    int64_t v = i < sizeof edges / sizeof edges[0]
                    ? edges[i]
                    : (int64_t)(attnd_splitmix64(&st) >> (i % 64));
    if (i % 3 == 0)
      v = -v;
    size_t n = attnd_fmt_i64(got, v);
    snprintf(want, sizeof want, "%lld", (long long)v);
    ck_assert_str_eq(got, want);
    ck_assert_uint_eq(n, strlen(want));
    uint64_t u = i == 0 ? UINT64_MAX : attnd_splitmix64(&st) >> (i % 64);
    snprintf(want, sizeof want, "%llu", (unsigned long long)u);
    REQUIRE(attnd_fmt_u64(got, u) == strlen(want) && !strcmp(got, want),
            "%s, not %s", got, want);
    ck_assert_uint_eq(attnd_fmt_hex64(got, u), 16);
    snprintf(want, sizeof want, "%016llx", (unsigned long long)u);
    ck_assert_str_eq(got, want);
  }
  for (int i = 0; i < 20000; i++) {
    double v = (double)(attnd_splitmix64(&st) >> 11) / 9007199254740992.0 *
               pow(10, i % 9 - 2); /* 0 to 1e6 */
    double t = floor(v * 1000.0 + 0.5) / 1000.0;
    size_t n = attnd_fmt_ms(got, v);
    snprintf(want, sizeof want, "%.3f", t);
    ck_assert_msg(strcmp(got, want) == 0, "%.17g: %s, not %s", v, got, want);
    ck_assert_uint_eq(n, strlen(want));
  }
  static const struct {
    double v;
    const char *text;
  } ms[] = {{0, "0.000"},
            {-1, "0.000"},
            {NAN, "0.000"},
            {0.0004, "0.000"},
            {0.0006, "0.001"},
            {1.5, "1.500"},
            {1e300, "1000000000000000.000"},
            {INFINITY, "1000000000000000.000"},
            {12.3456, "12.346"}};
  for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) {
    attnd_fmt_ms(got, ms[i].v);
    ck_assert_str_eq(got, ms[i].text);
  }
}
END_TEST

/* attnd_fmt_ms is "%.3f" of v itself, byte for byte, over [0, 1e15] (the
 * access log's timings rely on it): ties that are exact in binary round
 * to even as printf does (0.0625 is "0.062"), values a hair under a tie
 * round down (1.0005 is 1.000499999..., "1.000"), and so do the
 * differences of two clock readings in milliseconds, the log's inputs.
 * Bug: v * 1000 + 0.5 rounded ties up, and rounded 1.0005 * 1000 to the
 * tie before adding 0.5: "0.063", "1.001". */
START_TEST(test_fmt_ms_is_printf) {
  uint64_t st = 12345;
  char got[32], want[64];
  static const double edges[] = {
      0.0625,   0.1875,   1.0005, 2.0625,        0.0005, 0.0015,    1e-300,
      4.9e-324, 999.9995, 1e15,   1e15 - 0.0625, 0.5,    1023.9375, 8.0005};
  size_t n_edges = sizeof edges / sizeof edges[0];
  for (size_t i = 0; i < n_edges + 30000; i++) {
    double v;
    if (i < n_edges)
      v = edges[i];
    else if (i % 3 == 0) /* a tie k/2000 exactly, or the double nearest */
      v = (double)(2 * (attnd_splitmix64(&st) % 2000000) + 1) / 2000.0;
    else if (i % 3 == 1) { /* a clock's difference, up to a year's uptime */
      double t0 = (double)(attnd_splitmix64(&st) % 31536000000000ull) * 1e-3;
      v = (t0 + (double)(attnd_splitmix64(&st) % 100000) / 16.0) - t0;
    } else
      v = (double)(attnd_splitmix64(&st) >> 11) / 9007199254740992.0 *
          pow(10, (double)(i % 18) - 3); /* 0 to 1e15 */
    size_t n = attnd_fmt_ms(got, v);
    snprintf(want, sizeof want, "%.3f", v);
    REQUIRE(strcmp(got, want) == 0, "%.17g: %s, not %s", v, got, want);
    REQUIRE(n == strlen(want), "%.17g: length %zu", v, n);
  }
}
END_TEST

/* attnd_fmt_member and attnd_fmt_index against snprintf, at every buffer
 * size from 1 up to room for the whole text: the same bytes, cut alike,
 * and the length written. */
START_TEST(test_fmt_paths) {
  static const char *const a[] = {"", "query", "inputs[3].parameters"};
  static const char *const b[] = {"shape", "binary_data_size", ""};
  static const int64_t k[] = {0, 7, 12345, -1, INT64_MAX};
  char got[64], want[64];
  for (size_t i = 0; i < 3; i++) {
    for (size_t j = 0; j < 3; j++)
      for (size_t size = 1; size <= sizeof got; size++) {
        size_t n = attnd_fmt_member(got, size, a[i], b[j]);
        snprintf(want, size, "%s%s%s", a[i], *a[i] ? "." : "", b[j]);
        ck_assert_str_eq(got, want);
        ck_assert_uint_eq(n, strlen(want));
      }
    for (size_t j = 0; j < sizeof k / sizeof k[0]; j++)
      for (size_t size = 1; size <= sizeof got; size++) {
        size_t n = attnd_fmt_index(got, size, a[i], k[j]);
        snprintf(want, size, "%s[%lld]", a[i], (long long)k[j]);
        ck_assert_str_eq(got, want);
        ck_assert_uint_eq(n, strlen(want));
      }
  }
}
END_TEST

START_TEST(test_b64_random) {
  rng_t r = rng_seeded(400 + (uint64_t)_i);
  unsigned char src[1001], back[1001];
  char enc[1400], ref[1400];
  for (int k = 0; k < 40; k++) {
    size_t n = (size_t)rng_below(&r, 1001);
    for (size_t i = 0; i < n; i++)
      src[i] = (unsigned char)rng_next(&r);
    size_t len = attnd_b64_encoded_len(n);
    CHECK(len == (n + 2) / 3 * 4);
    attnd_b64_encode(src, n, enc);
    CHECK(ref_b64_encode(src, n, ref) == len);
    CHECK(memcmp(enc, ref, len) == 0);
    size_t out_n = 12345, bad = 12345;
    CHECK(attnd_b64_decode(enc, len, back, &out_n, &bad) == 0);
    CHECK(out_n == n);
    CHECK(memcmp(back, src, n) == 0);
  }
}
END_TEST

START_TEST(test_b64_vectors) {
  static const char *const plain[] = {"",     "f",     "fo",    "foo",
                                      "foob", "fooba", "foobar"};
  static const char *const text[] = {"",         "Zg==",     "Zm8=",    "Zm9v",
                                     "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
  for (int k = 0; k < 7; k++) {
    char enc[16];
    unsigned char dec[16];
    size_t n = strlen(plain[k]), len = attnd_b64_encoded_len(n), out_n, bad;
    attnd_b64_encode(plain[k], n, enc);
    ck_assert_uint_eq(len, strlen(text[k]));
    ck_assert(memcmp(enc, text[k], len) == 0);
    ck_assert_int_eq(attnd_b64_decode(text[k], len, dec, &out_n, &bad), 0);
    ck_assert_uint_eq(out_n, n);
    ck_assert(memcmp(dec, plain[k], n) == 0);
  }
  /* every byte value, and the two symbols */
  unsigned char all[256], dec[256];
  for (int k = 0; k < 256; k++)
    all[k] = (unsigned char)k;
  char enc[344];
  attnd_b64_encode(all, 256, enc);
  size_t out_n, bad;
  ck_assert_int_eq(attnd_b64_decode(enc, 344, dec, &out_n, &bad), 0);
  ck_assert(out_n == 256 && memcmp(dec, all, 256) == 0);
  ck_assert_int_eq(attnd_b64_decode("+/+/", 4, dec, &out_n, &bad), 0);
  ck_assert(out_n == 3 && dec[0] == 0xFB && dec[1] == 0xFF && dec[2] == 0xBF);
}
END_TEST

START_TEST(test_b64_invalid) {
#define B64_CASE(text, bad_pos)                                                \
  { text, sizeof text - 1, bad_pos }
  static const struct {
    const char *text;
    size_t len, bad_pos;
  } cases[] = {
      B64_CASE("a", 1),           B64_CASE("ab", 2),
      B64_CASE("abc", 3),         B64_CASE("abcde", 5),
      B64_CASE("abcd=", 5),       B64_CASE("abcd\n", 5),
      B64_CASE("ab=c", 2),        B64_CASE("a===", 1),
      B64_CASE("====", 0),        B64_CASE("=AAA", 0),
      B64_CASE("A=AA", 1),        B64_CASE("AA=A", 2),
      B64_CASE("A===", 1),        B64_CASE("QR==", 1),
      B64_CASE("QUJ=", 2),        B64_CASE("QQ=\n", 2),
      B64_CASE("ab c", 2),        B64_CASE("ab\tc", 2),
      B64_CASE("abc\n", 3),       B64_CASE(" abc", 0),
      B64_CASE("ab-_", 2),        B64_CASE("abc.", 3),
      B64_CASE("ab==abcd", 2),    B64_CASE("AAA=AAAA", 3),
      B64_CASE("AAAAA=A=", 5),    B64_CASE("AAAAAA=A", 6),
      B64_CASE("AAAAAAA\x80", 7), B64_CASE("AAAA====", 4),
      B64_CASE("Zm9vYh==", 5),    B64_CASE("Zm9vYmF=", 6),
      B64_CASE("Zm9v\0mFy", 4),
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    const char *t = cases[k].text;
    size_t n = cases[k].len;
    unsigned char dec[8];
    size_t out_n = 99, bad = 99;
    ck_assert_msg(attnd_b64_decode(t, n, dec, &out_n, &bad) == -1,
                  "\"%s\" accepted", t);
    ck_assert_msg(bad == cases[k].bad_pos, "\"%s\": bad_pos %zu, want %zu", t,
                  bad, cases[k].bad_pos);
  }
  /* the valid neighbours of some of those */
  static const char *const good[] = {
      "QQ==", "QUI=", "Zm9vYg==", "Zm9vYmE=", "AAAA", "////"};
  for (size_t k = 0; k < sizeof good / sizeof *good; k++) {
    unsigned char dec[8];
    size_t out_n, bad;
    ck_assert_int_eq(
        attnd_b64_decode(good[k], strlen(good[k]), dec, &out_n, &bad), 0);
  }
}
END_TEST

/* A bad character at every position of random valid texts. */
START_TEST(test_b64_bad_everywhere) {
  static const char bad_chars[] = {' ', '\n', '\r', '\t',   '-',    '_',
                                   '.', '*',  '\0', '\x80', '\xff', '='};
  rng_t r = rng_seeded(500 + (uint64_t)_i);
  unsigned char src[60], dec[60];
  char enc[80];
  size_t n = 1 + (size_t)rng_below(&r, 59);
  for (size_t i = 0; i < n; i++)
    src[i] = (unsigned char)rng_next(&r);
  size_t len = attnd_b64_encoded_len(n);
  attnd_b64_encode(src, n, enc);
  for (size_t pos = 0; pos < len; pos++) {
    for (size_t c = 0; c < sizeof bad_chars; c++) {
      /* '=' may be legal padding at the last two places, and padding
       * replaced makes the other '=' the first offender (see the table) */
      if ((bad_chars[c] == '=' && pos + 2 >= len) || enc[pos] == '=')
        continue;
      char t[80];
      memcpy(t, enc, len);
      t[pos] = bad_chars[c];
      size_t out_n, bad = 999;
      CHECK(attnd_b64_decode(t, len, dec, &out_n, &bad) == -1);
      CHECK(bad == pos);
    }
  }
}
END_TEST

/* Every byte outside the alphabet at every place of the first three
 * 32-character blocks of a 200-character text: the vector decoder's blocks
 * (codec/base64.c) must hand each one to the scalar code, which names it. */
START_TEST(test_b64_bad_bytes_in_blocks) {
  rng_t r = rng_seeded(550);
  unsigned char src[150], dec[150];
  char enc[200], t[200];
  for (size_t i = 0; i < sizeof src; i++)
    src[i] = (unsigned char)rng_next(&r);
  attnd_b64_encode(src, sizeof src, enc);
  for (int c = 0; c < 256; c++) {
    if (memchr(ref_alphabet, c, 64))
      continue;
    for (size_t pos = 0; pos < 96; pos++) {
      memcpy(t, enc, sizeof t);
      t[pos] = (char)c;
      size_t out_n, bad = 999;
      CHECK(attnd_b64_decode(t, sizeof t, dec, &out_n, &bad) == -1);
      CHECK(bad == pos);
    }
  }
  size_t out_n, bad;
  CHECK(attnd_b64_decode(enc, sizeof enc, dec, &out_n, &bad) == 0);
  CHECK(out_n == sizeof src && memcmp(dec, src, sizeof src) == 0);
}
END_TEST

/* ---- the text buffer ----------------------------------------------------- */

START_TEST(test_buf_basics) {
  attnd_buf_t b;
  attnd_buf_init(&b);
  CHECK(b.data == NULL && b.len == 0 && b.cap == 0 && b.oom == 0);
  attnd_buf_append(&b, "", 0);
  CHECK(b.len == 0);
  attnd_buf_puts(&b, "hello");
  attnd_buf_append(&b, ", world!!", 7);
  ck_assert_str_eq(b.data, "hello, world");
  CHECK(attnd_buf_reserve(&b, 1000) == 0);
  CHECK(b.cap >= b.len + 1001);
  /* grow far, checking the content */
  attnd_buf_t big;
  attnd_buf_init(&big);
  for (int k = 0; k < 100000; k++) {
    char s[16];
    int n = snprintf(s, sizeof s, "%d,", k);
    attnd_buf_append(&big, s, (size_t)n);
  }
  CHECK(!big.oom && big.data[big.len] == '\0');
  char *p = big.data;
  for (int k = 0; k < 100000; k++) {
    CHECK(strtol(p, &p, 10) == k);
    CHECK(*p++ == ',');
  }
  CHECK(p == big.data + big.len);
  attnd_buf_free(&big);
  /* an impossible size sets oom, and then appends do nothing */
  CHECK(attnd_buf_reserve(&b, SIZE_MAX - 4) == -1);
  CHECK(b.oom);
  attnd_buf_puts(&b, "more");
  ck_assert_str_eq(b.data, "hello, world");
  CHECK(attnd_buf_reserve(&b, 1) == -1);
  attnd_buf_free(&b);
  CHECK(b.data == NULL && b.len == 0 && b.oom == 0);
}
END_TEST

START_TEST(test_buf_floats_texts) {
  static const float x[6] = {1.0f, 0.5f, -2.0f, 0.1f, 1e-7f, -0.0f};
  static const struct {
    size_t n;
    int rank;
    int64_t dim[4];
    const char *text;
  } cases[] = {
      {6, 0, {0}, "[1,0.5,-2,0.1,1e-07,-0]"},
      {6, 1, {6}, "[1,0.5,-2,0.1,1e-07,-0]"},
      {6, 2, {2, 3}, "[[1,0.5,-2],[0.1,1e-07,-0]]"},
      {6, 2, {3, 2}, "[[1,0.5],[-2,0.1],[1e-07,-0]]"},
      {6, 3, {3, 1, 2}, "[[[1,0.5]],[[-2,0.1]],[[1e-07,-0]]]"},
      {6, 4, {1, 2, 3, 1}, "[[[[1],[0.5],[-2]],[[0.1],[1e-07],[-0]]]]"},
      {1, 0, {0}, "[1]"},
      {0, 0, {0}, "[]"},
      {0, 1, {0}, "[]"},
      {0, 2, {2, 0}, "[[],[]]"},
      {0, 2, {0, 3}, "[]"},
      {0, 3, {1, 0, 5}, "[[]]"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    attnd_buf_t b;
    attnd_buf_init(&b);
    attnd_buf_puts(&b, ">");
    attnd_buf_floats(&b, x, cases[k].n, cases[k].rank, cases[k].dim);
    ck_assert(!b.oom);
    ck_assert_str_eq(b.data + 1, cases[k].text);
    ck_assert_uint_eq(b.len, strlen(b.data));
    attnd_buf_free(&b);
  }
}
END_TEST

/* Checks that j is a nested array of the given shape holding x bit for bit
 * (with jansson's integer "-0" standing for -0.0f). */
static void check_json_tensor(json_t *j, const float **x, int rank,
                              const int64_t *dim) {
  CHECK(json_is_array(j));
  CHECK(json_array_size(j) == (size_t)dim[0]);
  for (size_t i = 0; i < (size_t)dim[0]; i++) {
    json_t *e = json_array_get(j, i);
    if (rank > 1) {
      check_json_tensor(e, x, rank - 1, dim + 1);
    } else {
      float f = (float)json_number_value(e);
      CHECK(json_is_number(e));
      CHECK(f == **x && (signbit(f) == signbit(**x) || json_is_integer(e)));
      (*x)++;
    }
  }
}

START_TEST(test_buf_floats_random) {
  rng_t r = rng_seeded(600 + (uint64_t)_i);
  int rank = 1 + _i % 4;
  int64_t dim[4];
  size_t n = 1;
  for (int d = 0; d < rank; d++) {
    dim[d] = 1 + (int64_t)rng_below(&r, rank == 1 ? 3000 : 12);
    n *= (size_t)dim[d];
  }
  float *x = malloc(n * sizeof *x);
  for (size_t i = 0; i < n; i++)
    x[i] = i % 2 ? rng_float_bits(&r) : rng_float_typical(&r);
  attnd_buf_t b;
  attnd_buf_init(&b);
  attnd_buf_floats(&b, x, n, rank, dim);
  ck_assert(!b.oom && b.len == strlen(b.data));
  json_error_t err;
  json_t *j = json_loadb(b.data, b.len, 0, &err);
  ck_assert_msg(j != NULL, "%s", err.text);
  const float *p = x;
  check_json_tensor(j, &p, rank, dim);
  ck_assert(p == x + n);
  json_decref(j);
  /* rank 0: the same numbers, flat */
  attnd_buf_t flat;
  attnd_buf_init(&flat);
  attnd_buf_floats(&flat, x, n, 0, NULL);
  j = json_loadb(flat.data, flat.len, 0, &err);
  ck_assert_msg(j != NULL, "%s", err.text);
  p = x;
  int64_t all = (int64_t)n;
  check_json_tensor(j, &p, 1, &all);
  json_decref(j);
  attnd_buf_free(&flat);
  attnd_buf_free(&b);
  free(x);
}
END_TEST

START_TEST(test_buf_base64) {
  rng_t r = rng_seeded(700);
  unsigned char src[300];
  for (size_t i = 0; i < sizeof src; i++)
    src[i] = (unsigned char)rng_next(&r);
  for (size_t n = 0; n < sizeof src; n += 7) {
    attnd_buf_t b;
    attnd_buf_init(&b);
    attnd_buf_puts(&b, "\"");
    attnd_buf_base64(&b, src, n);
    char ref[400];
    size_t len = ref_b64_encode(src, n, ref);
    ck_assert_uint_eq(b.len, 1 + len);
    ck_assert(memcmp(b.data + 1, ref, len) == 0 && b.data[b.len] == '\0');
    attnd_buf_free(&b);
  }
}
END_TEST

/* ---- the bulk scanner: references ---------------------------------------- */

/* Whether v is an array placeholder of an item of `set`; sets *k. */
static int is_placeholder(json_t *v, const attnd_bulk_set_t *set, size_t *k) {
  json_t *tag = json_array_get(v, 0), *nonce = json_array_get(v, 1);
  json_t *idx = json_array_get(v, 2);
  if (json_array_size(v) != 3 || !json_is_string(tag) ||
      json_string_length(tag) != 5 ||
      memcmp(json_string_value(tag),
             "\x01"
             "bulk",
             5) != 0 ||
      !json_is_integer(nonce) ||
      (uint64_t)json_integer_value(nonce) != set->nonce ||
      !json_is_integer(idx) || json_integer_value(idx) < 0 ||
      (size_t)json_integer_value(idx) >= set->n)
    return 0;
  *k = (size_t)json_integer_value(idx);
  return set->items[*k].text == NULL;
}

/* Whether s is a string placeholder of an item of `set`; sets *k. */
static int is_string_placeholder(const char *s, const attnd_bulk_set_t *set,
                                 size_t *k) {
  unsigned long long nonce, idx;
  int used = 0;
  if (strncmp(s,
              "\x01"
              "bulk:",
              6) != 0 ||
      sscanf(s + 6, "%llu:%llu%n", &nonce, &idx, &used) != 2 ||
      s[6 + used] != 0 || nonce != set->nonce || idx >= set->n ||
      set->items[idx].text == NULL)
    return 0;
  *k = (size_t)idx;
  return 1;
}

/* Item data[*at..] of the given shape as nested JSON arrays (new ref). */
static json_t *tensor_json(const attnd_bulk_t *item, size_t *at, int level) {
  json_t *a = json_array();
  for (int64_t i = 0; i < item->dim[level]; i++) {
    json_t *e;
    if (level + 1 < item->rank) {
      e = tensor_json(item, at, level + 1);
    } else {
      /* jansson has no infinite reals; ±DBL_MAX is ±inf as a float */
      float f = item->data[(*at)++];
      e = item->is_bool ? json_boolean(f != 0)
          : isinf(f)    ? json_real(copysign(DBL_MAX, f))
                        : json_real(f);
      CHECK(!item->is_bool || f == 0.0f || f == 1.0f);
    }
    json_array_append_new(a, e);
  }
  return a;
}

/* v with every placeholder replaced by its tensor or string, keys included
 * (new ref); counts the uses of each item in uses[]. */
static json_t *substitute(json_t *v, const attnd_bulk_set_t *set, int *uses) {
  size_t k;
  if (json_is_array(v) && is_placeholder(v, set, &k)) {
    size_t at = 0;
    uses[k]++;
    return tensor_json(&set->items[k], &at, 0);
  }
  if (json_is_string(v) &&
      is_string_placeholder(json_string_value(v), set, &k)) {
    uses[k]++;
    return json_stringn(set->items[k].text, set->items[k].text_len);
  }
  if (json_is_array(v)) {
    json_t *a = json_array();
    for (size_t i = 0; i < json_array_size(v); i++)
      json_array_append_new(a, substitute(json_array_get(v, i), set, uses));
    return a;
  }
  if (json_is_object(v)) {
    json_t *o = json_object();
    const char *key;
    json_t *e;
    json_object_foreach(v, key, e) {
      if (is_string_placeholder(key, set, &k)) {
        uses[k]++;
        char *real = strndup(set->items[k].text, set->items[k].text_len);
        json_object_set_new(o, real, substitute(e, set, uses));
        free(real);
      } else {
        json_object_set_new(o, key, substitute(e, set, uses));
      }
    }
    return o;
  }
  return json_incref(v);
}

/* Numbers compared as floats: (float)a == (float)b, with the same sign
 * (jansson's integer "-0" is 0, and so must the scanner's be). */
static int same_float_value(json_t *a, json_t *b) {
  float fa = (float)json_number_value(a), fb = (float)json_number_value(b);
  return fa == fb && signbit(fa) == signbit(fb);
}

/* Numbers compared as doubles (an integer in one may be the real of the
 * same value in the other). */
static int same_double_value(json_t *a, json_t *b) {
  return json_number_value(a) == json_number_value(b);
}

/* Whether a and b hold the same values, numbers compared by `same`. */
static int json_same_by(json_t *a, json_t *b, int (*same)(json_t *, json_t *)) {
  if (json_is_number(a) && json_is_number(b))
    return same(a, b);
  if (json_typeof(a) != json_typeof(b))
    return 0;
  if (json_is_array(a)) {
    if (json_array_size(a) != json_array_size(b))
      return 0;
    for (size_t i = 0; i < json_array_size(a); i++)
      if (!json_same_by(json_array_get(a, i), json_array_get(b, i), same))
        return 0;
    return 1;
  }
  if (json_is_object(a)) {
    if (json_object_size(a) != json_object_size(b))
      return 0;
    const char *key;
    json_t *e;
    json_object_foreach(a, key, e) {
      json_t *f = json_object_get(b, key);
      if (!f || !json_same_by(e, f, same))
        return 0;
    }
    return 1;
  }
  return json_equal(a, b);
}

/* Whether b equals a, the value of the original text, numbers compared as
 * floats. */
static int json_same(json_t *a, json_t *b) {
  return json_same_by(a, b, same_float_value);
}

static size_t check_scan_s(const char *text, size_t n, size_t min_elems,
                           size_t min_string, attnd_bulk_set_t *set_out);

/* check_scan_s without string items. */
static size_t check_scan(const char *text, size_t n, size_t min_elems,
                         attnd_bulk_set_t *set_out) {
  return check_scan_s(text, n, min_elems, 0, set_out);
}

/* Whether s[0..n) is UTF-8 that jansson accepts, without a NUL. */
static int jansson_utf8(const char *s, size_t n) {
  json_t *j = json_stringn(s, n);
  int ok = j != NULL && memchr(s, 0, n) == NULL;
  json_decref(j);
  return ok;
}

/* Scans text[0..n) and checks the scanner's property (see the top of this
 * file) under jansson's two decoding modes, that each item is well formed
 * and used exactly once, and that without items the skeleton is the text.
 * Returns the number of tensor-data items (arrays and base64 texts, not
 * the in_tree strings); *set_out, when given, takes the set. */
static size_t check_scan_s(const char *text, size_t n, size_t min_elems,
                           size_t min_string, attnd_bulk_set_t *set_out) {
  attnd_bulk_set_t set;
  attnd_buf_t sk;
  attnd_bulk_set_init(&set, TEST_NONCE);
  attnd_buf_init(&sk);
  CHECK(attnd_bulk_scan(text, n, min_elems, min_string, &set, &sk) == 0);
  CHECK(sk.len == 0 || sk.data[sk.len] == '\0');
  if (set.n == 0)
    CHECK(sk.len == n && (n == 0 || memcmp(sk.data, text, n) == 0));
  size_t in_tree = 0;
  for (size_t k = 0; k < set.n; k++) {
    const attnd_bulk_t *it = &set.items[k];
    if (it->in_tree) { /* any other string: as jansson reads it */
      CHECK(it->text && it->copy == it->text && !it->data);
      CHECK(min_string > 0 && jansson_utf8(it->text, it->text_len));
      in_tree++;
      continue;
    }
    if (it->text) { /* a base64 member's value: printable ASCII */
      CHECK(min_string > 0 && it->text_len >= min_string && !it->data);
      for (size_t i = 0; i < it->text_len; i++)
        CHECK(it->text[i] >= 0x20 && it->text[i] < 0x7f);
      if (it->copy) { /* unescaped */
        CHECK(it->text == it->copy);
        continue;
      }
      /* plain, inside the text, quoted there, after "base64": */
      CHECK(it->text > text && it->text + it->text_len < text + n);
      CHECK(it->text[-1] == '"' && it->text[it->text_len] == '"');
      const char *c = it->text - 2;
      while (*c == ' ' || *c == '\t' || *c == '\n' || *c == '\r')
        c--;
      CHECK(*c == ':');
      do
        c--;
      while (*c == ' ' || *c == '\t' || *c == '\n' || *c == '\r');
      CHECK(c - 7 >= text && memcmp(c - 7, "\"base64\"", 8) == 0);
      for (size_t i = 0; i < it->text_len; i++)
        CHECK(it->text[i] != '\\' && it->text[i] != '"');
      continue;
    }
    CHECK(it->rank >= 1 && it->rank <= ATTND_BULK_MAX_RANK);
    size_t prod = 1;
    for (int d = 0; d < it->rank; d++) {
      CHECK(it->dim[d] >= 1);
      prod *= (size_t)it->dim[d];
    }
    CHECK(prod == it->n && it->n >= min_elems && it->n >= 1);
    CHECK(it->is_bool == 0 || it->is_bool == 1);
  }
  static const size_t flags[2] = {0, JSON_DECODE_ANY};
  for (int f = 0; f < 2; f++) {
    json_error_t et, es;
    json_t *jt = load_widened(text, n, flags[f], &et);
    json_t *js = load_widened(sk.len ? sk.data : "", sk.len, flags[f], &es);
    CHECK_MSG((jt != NULL) == (js != NULL),
              "text %s (%s) but skeleton %s (%s)\ntext: %.300s\nskeleton: "
              "%.300s",
              jt ? "parses" : "fails", jt ? "" : et.text,
              js ? "parses" : "fails", js ? "" : es.text, text,
              sk.len ? sk.data : "");
    if (jt) {
      int *uses = calloc(set.n + 1, sizeof *uses);
      json_t *sub = substitute(js, &set, uses);
      CHECK_MSG(json_same(jt, sub), "values differ\ntext: %.300s", text);
      for (size_t k = 0; k < set.n; k++)
        CHECK(uses[k] == 1);
      json_decref(sub);
      free(uses);
    }
    json_decref(jt);
    json_decref(js);
  }
  attnd_buf_free(&sk);
  CHECK(set.n_data + in_tree == set.n);
  size_t count = set.n_data;
  if (set_out)
    *set_out = set;
  else
    attnd_bulk_set_free(&set);
  return count;
}

/* ---- the bulk scanner: tests --------------------------------------------- */

START_TEST(test_scan_example) {
  const char *text =
      "{\"a\": [[1, 2.5], [-3e2, 4]], \"s\": \"[1,2]\\\"[3]\", "
      "\"b\":[true,false ,true],\"c\":[[1,2],[3]],\"d\":[1,\"x\"],"
      "\"e\":[[[[[7]]]]]}";
  attnd_bulk_set_t set;
  attnd_buf_t sk;
  attnd_bulk_set_init(&set, 12345);
  attnd_buf_init(&sk);
  ck_assert_int_eq(attnd_bulk_scan(text, strlen(text), 1, 0, &set, &sk), 0);
  ck_assert_str_eq(
      sk.data, "{\"a\": [\"\\u0001bulk\",12345,0], \"s\": \"[1,2]\\\"[3]\", "
               "\"b\":[\"\\u0001bulk\",12345,1],"
               "\"c\":[[\"\\u0001bulk\",12345,2],[\"\\u0001bulk\",12345,3]],"
               "\"d\":[1,\"x\"],\"e\":[[\"\\u0001bulk\",12345,4]]}");
  ck_assert_uint_eq(set.n, 5);
  ck_assert_uint_eq(set.nonce, 12345);
  static const float a[4] = {1, 2.5f, -300, 4}, b[3] = {1, 0, 1};
  ck_assert(set.items[0].rank == 2 && set.items[0].dim[0] == 2 &&
            set.items[0].dim[1] == 2 && set.items[0].n == 4 &&
            !set.items[0].is_bool);
  ck_assert(memcmp(set.items[0].data, a, sizeof a) == 0);
  ck_assert(set.items[1].rank == 1 && set.items[1].dim[0] == 3 &&
            set.items[1].is_bool);
  ck_assert(memcmp(set.items[1].data, b, sizeof b) == 0);
  ck_assert(set.items[2].n == 2 && set.items[3].n == 1 &&
            set.items[3].data[0] == 3);
  ck_assert(set.items[4].rank == 4 && set.items[4].n == 1 &&
            set.items[4].data[0] == 7);
  for (int d = 0; d < 4; d++)
    ck_assert(set.items[4].dim[d] == 1);
  attnd_bulk_set_free(&set);
  ck_assert(set.items == NULL && set.n == 0);
  attnd_buf_free(&sk);
  check_scan(text, strlen(text), 1, NULL);
}
END_TEST

/* Adversarial texts: how many items each gives at a threshold, and the
 * property for each. */
#define SCAN_CASE(text, min_elems, items)                                      \
  { text, sizeof text - 1, min_elems, items }
static const struct {
  const char *text;
  size_t len, min_elems, items;
} scan_cases[] = {
    SCAN_CASE("[]", 1, 0),
    SCAN_CASE("[[]]", 1, 0),
    SCAN_CASE("[[],[]]", 1, 0),
    SCAN_CASE("[[1],[]]", 1, 1),
    SCAN_CASE("[1,2,]", 1, 0),
    SCAN_CASE("[1,,2]", 1, 0),
    SCAN_CASE("[1 2]", 1, 0),
    SCAN_CASE("[,1]", 1, 0),
    SCAN_CASE("[1,2", 1, 0),
    SCAN_CASE("[[1,2],[3,4]", 1, 2),
    SCAN_CASE("[1,2]]", 1, 1),
    SCAN_CASE("[1,2]x", 1, 1),
    SCAN_CASE("x[1,2]", 1, 1),
    SCAN_CASE("[[1,2],[3]]", 1, 2),
    SCAN_CASE("[[1,2],3]", 1, 1),
    SCAN_CASE("[1,[2,3]]", 1, 1),
    SCAN_CASE("[[1,2],[[3,4]]]", 1, 2),
    SCAN_CASE("[[[[[1]]]]]", 1, 1),
    SCAN_CASE("[[[[[1,2],[3,4]]]]]", 1, 1),
    SCAN_CASE("[[[[[[1]]]]]]", 1, 1),
    SCAN_CASE("[1,true]", 1, 0),
    SCAN_CASE("[true,1]", 1, 0),
    SCAN_CASE("[true,false]", 1, 1),
    SCAN_CASE("[[true],[false]]", 1, 1),
    SCAN_CASE("[[true],[1]]", 1, 2),
    SCAN_CASE("[null]", 1, 0),
    SCAN_CASE("[1,null]", 1, 0),
    SCAN_CASE("[\"a\"]", 1, 0),
    SCAN_CASE("[{}]", 1, 0),
    SCAN_CASE("[tru]", 1, 0),
    SCAN_CASE("[truex]", 1, 0),
    SCAN_CASE("[true1]", 1, 0),
    SCAN_CASE("[True]", 1, 0),
    SCAN_CASE("[1e400]", 1, 0),
    SCAN_CASE("[1,2,1e400]", 1, 0),
    SCAN_CASE("[[1,2],[1e400,3]]", 1, 1),
    SCAN_CASE("[-1e309]", 1, 0),
    SCAN_CASE("[9999999999999999999999999999]", 1, 1),
    SCAN_CASE("[-9223372036854775809]", 1, 1),
    SCAN_CASE("[9223372036854775807,-9223372036854775808]", 1, 1),
    SCAN_CASE("[3.4028236e38,1e-400,2e-320]", 1, 1),
    SCAN_CASE("[-]", 1, 0),
    SCAN_CASE("[01]", 1, 0),
    SCAN_CASE("[1.]", 1, 0),
    SCAN_CASE("[.5]", 1, 0),
    SCAN_CASE("[+1]", 1, 0),
    SCAN_CASE("[0x10]", 1, 0),
    SCAN_CASE("[1.5.3]", 1, 0),
    SCAN_CASE("[- 1]", 1, 0),
    SCAN_CASE("[NaN]", 1, 0),
    SCAN_CASE("[Infinity]", 1, 0),
    SCAN_CASE("[1e5e5]", 1, 0),
    SCAN_CASE("\"[1,2]\"", 1, 0),
    SCAN_CASE("[\"[1,2]\"]", 1, 0),
    SCAN_CASE("\"\\\"[1,2]\"", 1, 0),
    SCAN_CASE("\"\\\\\"[1,2]", 1, 1),
    SCAN_CASE("[\"\\\\\",[1,2]]", 1, 1),
    SCAN_CASE("[\"\\\\\\\"\",[1,2]]", 1, 1),
    SCAN_CASE("\"[1,2]", 1, 0),
    SCAN_CASE("\"\\", 1, 0),
    SCAN_CASE("{\"a\":[1,2]}", 1, 1),
    SCAN_CASE("{\"[\":[1]}", 1, 1),
    SCAN_CASE("{[1,2]:3}", 1, 1),
    SCAN_CASE("[ 1 , 2 ]", 1, 1),
    SCAN_CASE("[\t1\n,\r2 ]", 1, 1),
    SCAN_CASE("[1\f,2]", 1, 0),
    SCAN_CASE("[1,2\v]", 1, 0),
    SCAN_CASE("[1,2]", 3, 0),
    SCAN_CASE("[1,2,3]", 3, 1),
    SCAN_CASE("[[1,2],[3,4]]", 4, 1),
    SCAN_CASE("[[1,2],[3,4]]", 5, 0),
    SCAN_CASE("[[1,2,3],[4,5,6]]", 3, 1),
    SCAN_CASE("[[1,2],[3,4,5]]", 3, 1),
    SCAN_CASE("[\"\\u0001bulk\",1,0]", 1, 0),
    SCAN_CASE("[\"\\u0001bulk\",4503599627370497,0]", 1, 0),
    SCAN_CASE("[[\"\\u0001bulk\",4503599627370496,0],[1,2]]", 1, 1),
    SCAN_CASE("[[1],[2],[3]]", 1, 1),
    SCAN_CASE("[[[1,2]],[[3,4]]]", 1, 1),
    SCAN_CASE("[[[1,2]],[[3,4],[5,6]]]", 1, 2),
    SCAN_CASE("[1,2] [3,4]", 1, 2),
    SCAN_CASE("[1,2],[3,4]", 1, 2),
    SCAN_CASE("[1,2]\x00[3]", 1, 2),
    SCAN_CASE("[1,\xff]", 1, 0),
    SCAN_CASE("[\"\xff\",[1]]", 1, 1),
    SCAN_CASE("[1]\xc3\xa9", 1, 1),
    SCAN_CASE("1", 1, 0),
    SCAN_CASE("-0", 1, 0),
    SCAN_CASE("[-0,0,-0.0]", 1, 1),
    SCAN_CASE("[-0,-0e0,-0.0,-0E+1]", 1, 1),
    SCAN_CASE("", 1, 0),
    SCAN_CASE("]]]]", 1, 0),
    SCAN_CASE("}[1]", 1, 1),
    /* base64 texts (test_scan_cases lifts them from 1 character) */
    SCAN_CASE("{\"base64\":\"AAAA\"}", 1, 1),
    SCAN_CASE("{\"base64\":\"AA\\/A\"}", 1, 1),
    SCAN_CASE("{\"base64\":\"AA\\u002fA\"}", 1, 1),
    SCAN_CASE("{\"base64\":\"AA\\u007fA\"}", 1, 0),
    SCAN_CASE("{\"base64\":\"AA\\u0000A\"}", 1, 0),
    SCAN_CASE("{\"base64\":\"AA\\u001fA\"}", 1, 0),
    SCAN_CASE("{\"base64\":\"AA\\u00e9A\"}", 1, 0),
    SCAN_CASE("{\"base64\":\"AA\\ud800A\"}", 1, 0),
    SCAN_CASE("{\"base64\":\"AA\\u00\"}", 1, 0),
    SCAN_CASE("{\"base64\":\"AA\\u002\"}", 1, 0),
    SCAN_CASE("{\"base64\":\"AA\\u002g\"}", 1, 0),
    SCAN_CASE("{\"base64\":\"AA\\xA\"}", 1, 0),
    SCAN_CASE("{\"base64\":\"AA\\tA\"}", 1, 0),
    SCAN_CASE("{\"base64\":\"AA\tA\"}", 1, 0),
    SCAN_CASE("{\"base64\":\"AA\x7f\"}", 1, 0),
    SCAN_CASE("{\"base64\":\"AA\\", 1, 0),
    SCAN_CASE("{\"base64\":\"AA\\\"", 1, 0),
    SCAN_CASE("{\"base64\":\"AA", 1, 0),
    SCAN_CASE("{\"base64\" : \"AAAA\" }", 1, 1),
    SCAN_CASE("{\"base64\":\"AAAA\":1}", 1, 1),
    SCAN_CASE("[\"base64\",\"AAAA\"]", 1, 0),
    SCAN_CASE("{\"base64\":[\"AAAA\"]}", 1, 0),
    SCAN_CASE("{\"base64\":1,\"a\":\"AAAA\"}", 1, 0),
    SCAN_CASE("{\"id\":\"AAAA\"}", 1, 0),
    SCAN_CASE("{\"AAAA\":\"base64\"}", 1, 0),
    /* escapes: each string ends where jansson ends it */
    SCAN_CASE("[\"\\\\\\\\\\\\\",[1]]", 1, 1),
    SCAN_CASE("[\"\\\"\\\"\\\"\",[1]]", 1, 1),
    SCAN_CASE("[\"\\\"\\\"\\\",[1]]", 1, 0),
    /* integers beyond int64: numbers, as the decoder reads them */
    SCAN_CASE("[99999999999999999999]", 1, 1),
    SCAN_CASE("[-9223372036854775809,1]", 1, 1),
    SCAN_CASE("[1e400,99999999999999999999]", 1, 0),
    SCAN_CASE("[[99999999999999999999],[1e400]]", 1, 1),
};
#define N_SCAN_CASES (int)(sizeof scan_cases / sizeof *scan_cases)

/* A long value of a "base64" member becomes base64 data, its allowed
 * escapes undone (issue 11, defect 2: a lifted id was echoed as its
 * placeholder); every other long string that is no key becomes an in_tree
 * string, unescaped as jansson would (\u escapes to UTF-8 of two, three
 * and four bytes; ids, enums, unknown members, base64 values with escapes
 * of anything but printable ASCII or with non-ASCII characters); keys and
 * short strings stay in the skeleton. */
START_TEST(test_scan_strings) {
  static const char text[] =
      "{\"q\": {\"base64\" :\n \"AACAPwAAAEAAAEBA\"}, \"short\": \"abc\", "
      "\"id\": \"AAAAAAAAAAAAAAAA\", \"AAAAAAAAAAAAAAAA\": [1, 2], "
      "\"k\": {\"base64\": \"AAAA\\/AAA\\u002fA\\u002F\\\\\\\"AA\"}, "
      "\"e\": {\"base64\": \"AAAA\\u00e9AAAAAAAAAA\"}, "
      "\"n\": {\"base64\": \"AAAA\\nAAAAAAAAAAA\"}, "
      "\"u\": {\"base64\": \"AAAA\xc3\xa9"
      "AAAAAAAAAA\"}, "
      "\"s\": {\"base\\u0036\\u0034\": \"AAAAAAAAAAAAAAAA\"}, "
      "\"p\": \"\\ud83d\\ude00\\u00e9\\u4e2d\\uffff\\b\\f\\t\\r\\/\", "
      "\"x\": \"AAAA\\u0000AAAAAAAA\", \"y\": \"AAAA\\ud800AAAAAAAA\", "
      "\"r\": {\"xbase64\": \"AAAAAAAAAAAAAAAA\"}}";
  static const struct {
    const char *text; /* NULL: base64 data */
    size_t len;
  } want[] = {
      {NULL, 0},
      {"AAAAAAAAAAAAAAAA", 16},
      {NULL, 0},
      {"AAAA\xc3\xa9"
       "AAAAAAAAAA",
       16},
      {"AAAA\nAAAAAAAAAAA", 16},
      {"AAAA\xc3\xa9"
       "AAAAAAAAAA",
       16},
      {"AAAAAAAAAAAAAAAA", 16},
      {"\xf0\x9f\x98\x80\xc3\xa9\xe4\xb8\xad\xef\xbf\xbf\b\f\t\r/", 17},
      {"AAAAAAAAAAAAAAAA", 16},
  };
  attnd_bulk_set_t set;
  attnd_buf_t sk;
  attnd_bulk_set_init(&set, 12345);
  attnd_buf_init(&sk);
  ck_assert_int_eq(attnd_bulk_scan(text, strlen(text), 100, 8, &set, &sk), 0);
  ck_assert_uint_eq(set.n, sizeof want / sizeof want[0]);
  ck_assert_uint_eq(set.n_data, 2);
  for (size_t k = 0; k < set.n; k++) {
    const attnd_bulk_t *it = &set.items[k];
    ck_assert_int_eq(it->in_tree, want[k].text != NULL);
    if (want[k].text) {
      ck_assert_uint_eq(it->text_len, want[k].len);
      ck_assert(memcmp(it->text, want[k].text, want[k].len) == 0);
    }
  }
  /* the two base64 texts: borrowed, and unescaped */
  const char *first = strstr(text, "\"AACAPwAAAEAAAEBA\"");
  ck_assert_uint_eq(set.items[0].text_len, 16);
  ck_assert_ptr_null(set.items[0].data);
  ck_assert_ptr_null(set.items[0].copy); /* borrowed from the text */
  ck_assert(set.items[0].text == first + 1);
  ck_assert_uint_eq(set.items[2].text_len, 15);
  ck_assert(memcmp(set.items[2].text, "AAAA/AAA/A/\\\"AA", 15) == 0);
  ck_assert_ptr_eq(set.items[2].text, set.items[2].copy); /* unescaped */
  /* \u0000 and a lone surrogate stay for jansson, and so do keys */
  ck_assert_ptr_nonnull(strstr(sk.data, "\"AAAA\\u0000AAAAAAAA\""));
  ck_assert_ptr_nonnull(strstr(sk.data, "\"AAAA\\ud800AAAAAAAA\""));
  ck_assert_ptr_nonnull(strstr(sk.data, "\"AAAAAAAAAAAAAAAA\": [1, 2]"));
  /* a string placeholder's value names its item exactly, and nothing
   * else does: another nonce, index or spelling, or an array item */
  ck_assert_ptr_eq(attnd_bulk_string(&set, "\001bulk:12345:2"), &set.items[2]);
  ck_assert_ptr_eq(attnd_bulk_string(&set, "\001bulk:12345:0"), &set.items[0]);
  static const char *const not_items[] = {
      "\001bulk:12346:2",
      "\001bulk:12345:02",
      "\001bulk:012345:2",
      "\001bulk:12345:2 ",
      "\001bulk: 12345:2",
      "\001bulk:+12345:2",
      "\001bulk:12345:-2",
      "\001bulk:12345",
      "\001bulk:12345:",
      "\001bulk:12345:99",
      "\001bulk::2",
      "\002bulk:12345:2",
      "\001bulk:12345:18446744073709551618",
      "\001bulk:18446744073709564761:2", /* 12345 + 2^64 */
      "\001bulk:12345:2:",
      "bulk:12345:2"};
  for (size_t i = 0; i < sizeof not_items / sizeof not_items[0]; i++)
    ck_assert_msg(attnd_bulk_string(&set, not_items[i]) == NULL, "%s",
                  not_items[i] + 1);
  attnd_bulk_set_free(&set);
  attnd_buf_free(&sk);
  /* and the equivalence property, with strings of every length lifted */
  for (size_t m = 1; m < 20; m++)
    check_scan_s(text, strlen(text), 1, m, NULL);
}
END_TEST

/* A base64 value is lifted as data only when every character is printable
 * ASCII: each byte value, at each place of the 16- and 8-byte blocks the
 * check reads (their first and last bytes, and the tail after them). */
START_TEST(test_scan_base64_printable) {
  static const size_t at[] = {0, 7, 8, 15, 16, 31, 32, 39, 40, 44};
  for (int b = 1; b < 256; b++) {
    if (b == '"' || b == '\\')
      continue;
    for (size_t k = 0; k < sizeof at / sizeof *at; k++) {
      char text[80], value[46];
      memset(value, 'A', 45);
      value[45] = 0;
      value[at[k]] = (char)b;
      int n =
          snprintf(text, sizeof text, "{\"q\": {\"base64\": \"%s\"}}", value);
      attnd_bulk_set_t set;
      attnd_buf_t sk;
      attnd_bulk_set_init(&set, 12345);
      attnd_buf_init(&sk);
      int r = attnd_bulk_scan(text, (size_t)n, 100, 8, &set, &sk);
      int data = r == 0 && set.n == 1 && !set.items[0].in_tree;
      ck_assert_msg(data == (b >= 0x20 && b < 0x7f),
                    "byte 0x%02x at %zu: lifted as data %d", b, at[k], data);
      attnd_bulk_set_free(&set);
      attnd_buf_free(&sk);
    }
  }
}
END_TEST

START_TEST(test_scan_cases) {
  ck_assert_uint_eq(check_scan_s(scan_cases[_i].text, scan_cases[_i].len,
                                 scan_cases[_i].min_elems, 1, NULL),
                    scan_cases[_i].items);
}
END_TEST

/* Regular tensors of every rank, numbers and booleans, with random spacing:
 * exactly one item with the right shape, and values bit for bit those of
 * (float)strtod on the printed texts (but the integer "-0", 0 as jansson
 * reads it). */
START_TEST(test_scan_tensors) {
  rng_t r = rng_seeded(800 + (uint64_t)_i);
  int rank = 1 + _i % 4, is_bool = _i % 5 == 4;
  int64_t dim[4];
  size_t n = 1;
  for (int d = 0; d < rank; d++) {
    dim[d] = 1 + (int64_t)rng_below(&r, rank == 1 ? 200 : 6);
    n *= (size_t)dim[d];
  }
  float *want = malloc(n * sizeof *want);
  attnd_buf_t t;
  attnd_buf_init(&t);
  static const char *const fmt[] = {"%.9g", "%.17g", "%.3e", "%.0f", "%g"};
  static const char *const ws[] = {"", "", " ", "\n", "\t ", "\r\n  "};
  int64_t idx[4] = {0};
  for (int d = 0; d < rank; d++)
    attnd_buf_puts(&t, "[");
  for (size_t i = 0; i < n; i++) {
    char s[400];
    attnd_buf_puts(&t, ws[rng_below(&r, 6)]);
    if (is_bool) {
      int v = (int)rng_below(&r, 2);
      attnd_buf_puts(&t, v ? "true" : "false");
      want[i] = (float)v;
    } else {
      double v = i % 3 ? rng_float_typical(&r) : rng_double_bits(&r);
      if (fabs(v) > 1e15) /* keeps "%.0f" within long long */
        v = 1.5;
      snprintf(s, sizeof s, fmt[rng_below(&r, 5)], v);
      attnd_buf_puts(&t, s);
      want[i] = (float)strtod(s, NULL);
      if (strcmp(s, "-0") == 0)
        want[i] = 0.0f; /* jansson's integer -0 is 0 */
    }
    attnd_buf_puts(&t, ws[rng_below(&r, 6)]);
    int d = rank - 1; /* close the levels that end here, then reopen */
    while (d >= 0 && ++idx[d] == dim[d]) {
      idx[d--] = 0;
      attnd_buf_puts(&t, "]");
    }
    if (d >= 0) {
      attnd_buf_puts(&t, ",");
      for (int e = d + 1; e < rank; e++)
        attnd_buf_puts(&t, "[");
    }
  }
  attnd_bulk_set_t set;
  CHECK(check_scan(t.data, t.len, n, &set) == 1);
  const attnd_bulk_t *it = &set.items[0];
  CHECK(it->rank == rank);
  CHECK(it->is_bool == is_bool);
  CHECK(it->n == n);
  for (int d = 0; d < rank; d++)
    CHECK(it->dim[d] == dim[d]);
  for (size_t i = 0; i < n; i++)
    CHECK_MSG(float_bits(it->data[i]) == float_bits(want[i]),
              "element %zu: %.9g, want %.9g", i, it->data[i], want[i]);
  attnd_bulk_set_free(&set);
  /* one element fewer than the threshold: nothing is replaced */
  CHECK(check_scan(t.data, t.len, n + 1, NULL) == 0);
  attnd_buf_free(&t);
  free(want);
}
END_TEST

/* jansson stops at depth 2048, counting scalars: an array must not be
 * replaced when its leaves are too deep, or an invalid text would parse. */
START_TEST(test_scan_depth_limit) {
  static const char *const inner[] = {"[[1,2],[3,4]]", "[1,2]", "[[[[1]]]]"};
  static const int depth[] = {2, 1, 4};
  for (int k = 0; k < 3; k++) {
    for (int outer = 2040; outer <= 2050; outer++) {
      attnd_buf_t t;
      attnd_buf_init(&t);
      for (int d = 0; d < outer; d++)
        attnd_buf_puts(&t, d % 3 ? "[" : "{\"k\":");
      attnd_buf_puts(&t, inner[k]);
      for (int d = outer - 1; d >= 0; d--)
        attnd_buf_puts(&t, d % 3 ? "]" : "}");
      /* valid iff leaves, at depth outer + depth + 1, fit */
      int valid = outer + depth[k] + 1 <= JSON_PARSER_MAX_DEPTH;
      json_t *j = json_loadb(t.data, t.len, 0, NULL);
      ck_assert_int_eq(j != NULL, valid);
      json_decref(j);
      size_t items = check_scan(t.data, t.len, 1, NULL);
      if (valid)
        ck_assert_uint_eq(items, 1);
      attnd_buf_free(&t);
    }
  }
  /* closed containers do not count */
  attnd_buf_t t;
  attnd_buf_init(&t);
  attnd_buf_puts(&t, "[");
  for (int k = 0; k < 1500; k++)
    attnd_buf_puts(&t, "{\"a\":[]},[[]],");
  attnd_buf_puts(&t, "[1,2]]");
  ck_assert_uint_eq(check_scan(t.data, t.len, 1, NULL), 1);
  attnd_buf_free(&t);
}
END_TEST

/* ---- random documents ---------------------------------------------------- */

static void gen_ws(rng_t *r, attnd_buf_t *b) {
  static const char ws[] = " \t\n\r";
  if (rng_below(r, 3) == 0)
    for (int k = 1 + (int)rng_below(r, 3); k > 0; k--)
      attnd_buf_append(b, &ws[rng_below(r, 4)], 1);
}

/* A random string; a key `key` >= 0 starts with "<key>:", to keep the keys
 * of an object distinct (jansson keeps the last of duplicate keys, which
 * would drop a placeholder). */
static void gen_string(rng_t *r, attnd_buf_t *b, int key) {
  static const char *const parts[] = {
      "a",        "Z",    " ",     "[",        "]",           "{",
      "}",        ",",    ":",     "1",        "-2.5",        "\\\"",
      "\\\\",     "\\/",  "\\n",   "\\u005b",  "\\u0001bulk", "\\t",
      "\xc3\xa9", "true", "[1,2]", "\\\\\\\"", "e5"};
  attnd_buf_puts(b, "\"");
  if (key >= 0) {
    char s[16];
    snprintf(s, sizeof s, "%d:", key);
    attnd_buf_puts(b, s);
  }
  for (int k = (int)rng_below(r, 6); k > 0; k--)
    attnd_buf_puts(b, parts[rng_below(r, sizeof parts / sizeof *parts)]);
  attnd_buf_puts(b, "\"");
}

/* A string as a base64 member's value: mostly base64 characters, often
 * escaped as the scanner undoes them (\/, \u002f), sometimes with an
 * escape or a character it leaves to jansson. */
static void gen_b64_string(rng_t *r, attnd_buf_t *b) {
  static const char *const parts[] = {
      "AAAA",    "QUJD",    "+",   "/",       "=",        "\\/",
      "\\u002f", "AB",      "\\/", "\\u002F", "\\u0041",  "\\\\",
      "\\\"",    "\\u00e9", "\\n", "\\u0000", "\xc3\xa9", "\\u007f"};
  attnd_buf_puts(b, "\"");
  for (int k = (int)rng_below(r, 12); k > 0; k--) {
    size_t i = rng_below(r, sizeof parts / sizeof *parts);
    if (i >= 11 && rng_below(r, 4)) /* the rarer parts, rarer */
      i = rng_below(r, 11);
    attnd_buf_puts(b, parts[i]);
  }
  attnd_buf_puts(b, "\"");
}

static void gen_number(rng_t *r, attnd_buf_t *b) {
  static const char *const special[] = {
      "0",
      "-0",
      "0.0",
      "-0.0",
      "1e-45",
      "1E5",
      "1e+5",
      "3.4028235e38",
      "3.4028236e38",
      "1e-400",
      "2.5e-320",
      "0.1",
      "-1.5e-05",
      "123456789012345678",
      "9223372036854775807",
      "-9223372036854775808",
      "9223372036854775808",
      "-18446744073709551616",
      "340282346638528859811704183484516925440",
      "1.000000059604644775390625"};
  char s[64];
  switch (rng_below(r, 8)) {
  case 0:
  case 1:
  case 2:
    snprintf(s, sizeof s, "%.9g", rng_float_typical(r));
    break;
  case 3:
    snprintf(s, sizeof s, "%.17g", rng_double_bits(r));
    break;
  case 4:
    snprintf(s, sizeof s, "%d", (int)rng_below(r, 2000001) - 1000000);
    break;
  case 5:
    snprintf(s, sizeof s, "%.9g", rng_float_bits(r));
    break;
  default:
    snprintf(s, sizeof s, "%s",
             special[rng_below(r, sizeof special / sizeof *special)]);
  }
  attnd_buf_puts(b, s);
}

/* A leaf that breaks a numeric tensor, or once in a while a number jansson
 * rejects. */
static void gen_intruder(rng_t *r, attnd_buf_t *b) {
  static const char *const x[] = {"null",   "\"1\"", "{}",    "[]",
                                  "true",   "[1]",   "1e400", "1e999999",
                                  "-1e309", "[[2]]"};
  attnd_buf_puts(b, x[rng_below(r, sizeof x / sizeof *x)]);
}

/* A nested array of rank 1..6 (5 and 6 are too deep to be one item), all
 * numbers or all booleans, possibly flawed: ragged (a sub-array of another
 * length) or with one intruding leaf. */
static void gen_tensor(rng_t *r, attnd_buf_t *b) {
  int rank = 1 + (int)rng_below(r, rng_below(r, 8) == 0 ? 6 : 4);
  int64_t dim[6];
  size_t n = 1;
  for (int d = 0; d < rank; d++) {
    dim[d] = 1 + (int64_t)rng_below(r, rank == 1 ? 40 : 4);
    n *= (size_t)dim[d];
  }
  int is_bool = rng_below(r, 5) == 0;
  int flaw = (int)rng_below(r, 10); /* 0: ragged, 1: intruder, else none */
  size_t intruder = flaw == 1 ? (size_t)rng_below(r, n) : SIZE_MAX;
  int ragged_level = flaw == 0 ? (int)rng_below(r, (uint64_t)rank) : -1;
  int64_t idx[6] = {0};
  for (int d = 0; d < rank; d++)
    attnd_buf_puts(b, "[");
  for (size_t i = 0;; i++) {
    gen_ws(r, b);
    if (i == intruder)
      gen_intruder(r, b);
    else if (is_bool)
      attnd_buf_puts(b, rng_below(r, 2) ? "true" : "false");
    else
      gen_number(r, b);
    gen_ws(r, b);
    int d = rank - 1;
    while (d >= 0 && ++idx[d] >= dim[d]) {
      /* the ragged level's last array gets one extra element */
      if (d == ragged_level && idx[d] == dim[d] && i + 1 >= n / 2) {
        attnd_buf_puts(b, ",");
        for (int e = d + 1; e < rank; e++)
          attnd_buf_puts(b, "[");
        attnd_buf_puts(b, is_bool ? "true" : "1");
        for (int e = d + 1; e < rank; e++)
          attnd_buf_puts(b, "]");
        ragged_level = -1;
      }
      idx[d--] = 0;
      attnd_buf_puts(b, "]");
    }
    if (d < 0)
      break;
    attnd_buf_puts(b, ",");
    for (int e = d + 1; e < rank; e++)
      attnd_buf_puts(b, "[");
  }
}

static void gen_value(rng_t *r, attnd_buf_t *b, int depth) {
  gen_ws(r, b);
  switch (depth > 3 ? 4 + rng_below(r, 4) : rng_below(r, 8)) {
  case 0:
  case 1:
    gen_tensor(r, b);
    break;
  case 2: { /* an object */
    attnd_buf_puts(b, "{");
    for (int k = (int)rng_below(r, 5), first = 1; k > 0; k--, first = 0) {
      if (!first)
        attnd_buf_puts(b, ",");
      gen_ws(r, b);
      int b64 = k == 1 && rng_below(r, 3) == 0; /* keys stay distinct */
      if (b64)
        attnd_buf_puts(b, "\"base64\"");
      else
        gen_string(r, b, k);
      gen_ws(r, b);
      attnd_buf_puts(b, ":");
      if (b64 && rng_below(r, 4)) {
        gen_ws(r, b);
        gen_b64_string(r, b);
      } else {
        gen_value(r, b, depth + 1);
      }
    }
    attnd_buf_puts(b, "}");
    break;
  }
  case 3: { /* an array of anything */
    attnd_buf_puts(b, "[");
    for (int k = (int)rng_below(r, 5), first = 1; k > 0; k--, first = 0) {
      if (!first)
        attnd_buf_puts(b, ",");
      gen_value(r, b, depth + 1);
    }
    attnd_buf_puts(b, "]");
    break;
  }
  case 4:
    gen_string(r, b, -1);
    break;
  case 5:
    gen_number(r, b);
    break;
  case 6:
    attnd_buf_puts(b, rng_below(r, 3) == 0   ? "null"
                      : rng_below(r, 2) == 0 ? "true"
                                             : "false");
    break;
  default: /* a user's array that looks like a placeholder */
    attnd_buf_puts(b, rng_below(r, 2) ? "[\"\\u0001bulk\",4503599627370496,0]"
                                      : "[\"\\u0001bulk\", 7, 1]");
  }
  gen_ws(r, b);
}

/* A random document: an object or an array of 1..4 values. */
static void gen_doc(rng_t *r, attnd_buf_t *b) {
  int object = rng_below(r, 2) == 0;
  attnd_buf_puts(b, object ? "{" : "[");
  for (int k = 1 + (int)rng_below(r, 4); k > 0; k--) {
    if (object) {
      gen_string(r, b, k);
      attnd_buf_puts(b, ":");
    }
    gen_value(r, b, 1);
    if (k > 1)
      attnd_buf_puts(b, ",");
  }
  attnd_buf_puts(b, object ? "}" : "]");
}

static size_t rng_min_elems(rng_t *r) {
  static const size_t m[] = {1, 1, 2, 4, 9, 30};
  return m[rng_below(r, 6)];
}

START_TEST(test_scan_random_docs) {
  rng_t r = rng_seeded(900 + (uint64_t)_i);
  size_t items = 0, valid = 0;
  for (int k = 0; k < 60; k++) {
    attnd_buf_t t;
    attnd_buf_init(&t);
    gen_doc(&r, &t);
    items += check_scan_s(t.data, t.len, rng_min_elems(&r),
                          rng_below(&r, 4) * 3, NULL);
    json_t *j = json_loadb(t.data, t.len, 0, NULL);
    valid += j != NULL;
    json_decref(j);
    attnd_buf_free(&t);
  }
  /* the generator exercises both outcomes */
  ck_assert_uint_gt(items, 20);
  ck_assert_uint_gt(valid, 10);
}
END_TEST

START_TEST(test_scan_prefixes) {
  rng_t r = rng_seeded(1000 + (uint64_t)_i);
  attnd_buf_t t;
  attnd_buf_init(&t);
  do { /* a document of a useful size */
    t.len = 0;
    gen_doc(&r, &t);
  } while (t.len < 60 || t.len > 600);
  for (size_t n = 0; n <= t.len; n++) {
    char *copy = malloc(n + 1); /* exactly n readable bytes, for ASan */
    memcpy(copy, t.data, n);
    check_scan_s(copy, n, 1 + n % 3, n % 4, NULL);
    free(copy);
  }
  attnd_buf_free(&t);
}
END_TEST

START_TEST(test_scan_mutations) {
  static const char pool[] = "[]{},:\"\\ \t0123456789-+.eEtrufalsn\x01\xff";
  rng_t r = rng_seeded(1100 + (uint64_t)_i);
  for (int k = 0; k < 40; k++) {
    attnd_buf_t t;
    attnd_buf_init(&t);
    gen_doc(&r, &t);
    for (int m = 1 + (int)rng_below(&r, 3); m > 0 && t.len > 1; m--) {
      size_t pos = (size_t)rng_below(&r, t.len);
      char c = pool[rng_below(&r, sizeof pool - 1)];
      switch (rng_below(&r, 3)) {
      case 0: /* delete */
        memmove(t.data + pos, t.data + pos + 1, t.len - pos);
        t.len--;
        break;
      case 1: /* replace */
        t.data[pos] = c;
        break;
      default: /* insert */
        attnd_buf_append(&t, "x", 1);
        memmove(t.data + pos + 1, t.data + pos, t.len - pos - 1);
        t.data[pos] = c;
      }
    }
    check_scan_s(t.data, t.len, rng_min_elems(&r), rng_below(&r, 3) * 2, NULL);
    attnd_buf_free(&t);
  }
}
END_TEST

/* A large tensor, as clients send them. */
START_TEST(test_scan_large) {
  rng_t r = rng_seeded(1200);
  const size_t rows = 300, cols = 700, n = rows * cols;
  float *x = malloc(n * sizeof *x);
  for (size_t i = 0; i < n; i++)
    x[i] = rng_float_typical(&r);
  attnd_buf_t t;
  attnd_buf_init(&t);
  attnd_buf_puts(&t, "{\"query\": ");
  int64_t dim[2] = {(int64_t)rows, (int64_t)cols};
  attnd_buf_floats(&t, x, n, 2, dim);
  attnd_buf_puts(&t, ", \"num_heads\": 8}");
  attnd_bulk_set_t set;
  attnd_buf_t sk;
  attnd_bulk_set_init(&set, TEST_NONCE);
  attnd_buf_init(&sk);
  ck_assert_int_eq(attnd_bulk_scan(t.data, t.len, 64, 0, &set, &sk), 0);
  ck_assert_str_eq(sk.data, "{\"query\": [\"\\u0001bulk\",4503599627370497,0], "
                            "\"num_heads\": 8}");
  ck_assert(set.n == 1 && set.items[0].n == n && set.items[0].rank == 2 &&
            set.items[0].dim[0] == (int64_t)rows &&
            set.items[0].dim[1] == (int64_t)cols);
  ck_assert(memcmp(set.items[0].data, x, n * sizeof *x) == 0);
  attnd_bulk_set_free(&set);
  attnd_buf_free(&sk);
  attnd_buf_free(&t);
  free(x);
}
END_TEST

/* ---- linear time ------------------------------------------------------------
 *
 * Issue 11, defect 1: after each backslash the scanner searched again for
 * the string's closing quote, so a megabyte of "\\\\" took 2 s. No timing
 * here: bulk.h's counter gives the bytes each scan examines, which a
 * linear scan keeps under a small multiple of the text. */

#define WORK_PER_BYTE 8

/* A text of about n bytes made to slow a scan down. */
static void gen_hostile(int kind, size_t n, attnd_buf_t *b) {
  static const char *const unit[] = {"\\\\", "\\/", "\\u00e9", "\\\""};
  switch (kind) {
  case 0:
  case 1:
  case 2:
  case 3: /* an id of nothing but one escape */
    attnd_buf_puts(b, "{\"id\":\"");
    while (b->len < n)
      attnd_buf_puts(b, unit[kind]);
    attnd_buf_puts(b, "\"}");
    break;
  case 4: /* escapes in a string that never ends */
    attnd_buf_puts(b, "[\"");
    while (b->len < n)
      attnd_buf_puts(b, "\\\\");
    break;
  case 5: /* base64 with every '/' escaped, as PHP sends it */
    attnd_buf_puts(b, "{\"base64\":\"");
    while (b->len < n)
      attnd_buf_puts(b, "AB\\/+");
    attnd_buf_puts(b, "AAA=\"}");
    break;
  case 6: /* arrays nested to jansson's limit, repeated */
    attnd_buf_puts(b, "[");
    for (int k = 0; b->len < n; k++) {
      attnd_buf_puts(b, k ? "," : "");
      for (int d = 0; d < JSON_PARSER_MAX_DEPTH - 2; d++)
        attnd_buf_puts(b, "[");
      for (int d = 0; d < JSON_PARSER_MAX_DEPTH - 2; d++)
        attnd_buf_puts(b, "]");
    }
    attnd_buf_puts(b, "]");
    break;
  case 7: /* four levels of arrays that fail at their last leaf */
    attnd_buf_puts(b, "[[[[");
    while (b->len < n)
      attnd_buf_puts(b, "1,");
    attnd_buf_puts(b, "\"x\"]]]]");
    break;
  case 8: /* numbers of a thousand digits */
    attnd_buf_puts(b, "[");
    for (int k = 0; b->len < n; k++) {
      attnd_buf_puts(b, k ? ",0." : "0.");
      for (int d = 0; d < 1000; d++)
        attnd_buf_append(b, &"0123456789"[(k + d) % 10], 1);
    }
    attnd_buf_puts(b, "]");
    break;
  case 9: /* integers beyond int64 */
    attnd_buf_puts(b, "[1");
    while (b->len < n)
      attnd_buf_puts(b, ",18446744073709551616");
    attnd_buf_puts(b, "]");
    break;
  default: /* a key of escapes */
    attnd_buf_puts(b, "{\"");
    while (b->len < n)
      attnd_buf_puts(b, "\\\\");
    attnd_buf_puts(b, "\":[1,2]}");
  }
}
#define N_HOSTILE 11

START_TEST(test_scan_linear) {
  for (size_t n = 1 << 14; n <= 1 << 18; n <<= 2) {
    attnd_buf_t t, sk, w;
    attnd_buf_init(&t);
    attnd_buf_init(&sk);
    attnd_buf_init(&w);
    gen_hostile(_i, n, &t);
    attnd_bulk_set_t set;
    attnd_bulk_set_init(&set, TEST_NONCE);
    uint64_t before = attnd__bulk_examined;
    ck_assert_int_eq(attnd_bulk_scan(t.data, t.len, 1, 1, &set, &sk), 0);
    uint64_t scan = attnd__bulk_examined - before;
    before = attnd__bulk_examined;
    ck_assert_int_ge(attnd_json_widen_numbers(t.data, t.len, &w), 0);
    uint64_t widen = attnd__bulk_examined - before;
    ck_assert_msg(scan >= t.len && scan <= WORK_PER_BYTE * t.len,
                  "kind %d: the scan examined %llu bytes of %zu", _i,
                  (unsigned long long)scan, t.len);
    ck_assert_msg(widen >= t.len && widen <= WORK_PER_BYTE * t.len,
                  "kind %d: the widening examined %llu bytes of %zu", _i,
                  (unsigned long long)widen, t.len);
    ck_assert_uint_eq(w.len, t.len);
    /* and what the scan found */
    /* ids of escapes, and the "x" of kind 7, are in_tree strings */
    static const size_t items[N_HOSTILE] = {1, 1, 1, 1, 0, 1, 0, 1, 1, 1, 1};
    ck_assert_uint_eq(set.n, items[_i]);
    if (_i == 5)
      ck_assert(set.items[0].copy &&
                memchr(set.items[0].text, '\\', set.items[0].text_len) == NULL);
    attnd_bulk_set_free(&set);
    attnd_buf_free(&sk);
    attnd_buf_free(&w);
    attnd_buf_free(&t);
  }
}
END_TEST

/* ---- widening integers beyond int64 -------------------------------------- */

START_TEST(test_widen_texts) {
  static const struct {
    const char *in, *out;
    long count;
  } cases[] = {
      {"[18446744073709551616]", "[18446744073709552e3 ]", 1},
      {"[-18446744073709551616]", "[-18446744073709552e3 ]", 1},
      {"[9223372036854775808]", "[92233720368547758e2]", 1},
      {"[-9223372036854775809]", "[-92233720368547758e2]", 1},
      {"[9223372036854775807,-9223372036854775808]",
       "[9223372036854775807,-9223372036854775808]", 0},
      {"[99999999999999999999]", "[1e20                ]", 1},
      {"{\"a\":18446744073709551616,\n\"b\":[18446744073709551616]}",
       "{\"a\":18446744073709552e3 ,\n\"b\":[18446744073709552e3 ]}", 2},
      {"[\"18446744073709551616\"]", "[\"18446744073709551616\"]", 0},
      {"[\"\\\"18446744073709551616\"]", "[\"\\\"18446744073709551616\"]", 0},
      {"[1e-18446744073709551616]", "[1e-18446744073709551616]", 0},
      {"[1e18446744073709551616]", "[9e307                 ]", 1},
      {"[1.18446744073709551616]", "[1.18446744073709551616]", 0},
      {"[18446744073709551616.0]", "[18446744073709551616.0]", 0},
      {"[18446744073709551616e0]", "[18446744073709551616e0]", 0},
      {"[018446744073709551616]", "[018446744073709551616]", 0},
      {"18446744073709551616", "18446744073709552e3 ", 1},
      {"", "", 0},
      /* beyond a double */
      {"[1e400]", "[9e307]", 1},
      {"[-1e309,2e308]", "[-9e307,9e307]", 1 + 1},
      {"[1.8e308, -1.79769313486231581e308]",
       "[9e307  , -9e307                  ]", 2},
      {"[1.7976931348623157e308]", "[1.7976931348623157e308]", 0},
      {"[1e-400,-1e-99999]", "[1e-400,-1e-99999]", 0},
      {"{\"1e400\":1e99999999999999999999}",
       "{\"1e400\":9e307                 }", 1},
      {"[1e400x]", "[9e307x]", 1},
      {"[1e40a0]", "[1e40a0]", 0},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    attnd_buf_t w;
    attnd_buf_init(&w);
    long c = attnd_json_widen_numbers(cases[k].in, strlen(cases[k].in), &w);
    ck_assert_msg(c == cases[k].count, "%s: %ld widened", cases[k].in, c);
    ck_assert_str_eq(w.len ? w.data : "", cases[k].out);
    attnd_buf_free(&w);
  }
  /* an integer that overflows a double too */
  char big[402] = "[";
  memset(big + 1, '9', 399);
  big[400] = ']';
  attnd_buf_t w;
  attnd_buf_init(&w);
  ck_assert_int_eq(attnd_json_widen_numbers(big, 401, &w), 1);
  ck_assert(w.len == 401 && memcmp(w.data, "[9e307 ", 7) == 0 &&
            w.data[399] == ' ' && w.data[400] == ']');
  attnd_buf_free(&w);
}
END_TEST

/* Random documents, and mutations of them: jansson reads the widened text
 * as it reads the text with JSON_DECODE_INT_AS_REAL (every integer a real),
 * to the same numbers, and fails on it at the same line, column and
 * position; unless a number overflows a double (JSON_DECODE_INT_AS_REAL's
 * "real number overflow"), which test_widen_texts covers. */
START_TEST(test_widen_random) {
  rng_t r = rng_seeded(1300 + (uint64_t)_i);
  int widened = 0;
  for (int k = 0; k < 60; k++) {
    attnd_buf_t t, w;
    attnd_buf_init(&t);
    attnd_buf_init(&w);
    gen_doc(&r, &t);
    if (k % 2) { /* a mutation */
      size_t pos = (size_t)rng_below(&r, t.len);
      t.data[pos] = "[]{},:\"\\ 0-e."[rng_below(&r, 14)];
    }
    long c = attnd_json_widen_numbers(t.data, t.len, &w);
    CHECK(c >= 0 && w.len == t.len);
    widened += c > 0;
    json_error_t ew, ei;
    json_t *jw = json_loadb(w.len ? w.data : "", w.len, 0, &ew);
    json_t *ji = json_loadb(t.data, t.len, JSON_DECODE_INT_AS_REAL, &ei);
    if (!ji && json_error_code(&ei) == json_error_numeric_overflow) {
      json_decref(jw);
      attnd_buf_free(&t);
      attnd_buf_free(&w);
      continue;
    }
    CHECK_MSG((jw != NULL) == (ji != NULL), "%s / %s\ntext: %.300s",
              jw ? "ok" : ew.text, ji ? "ok" : ei.text, t.data);
    if (jw)
      CHECK_MSG(json_same_by(jw, ji, same_double_value),
                "values differ\ntext: %.300s", t.data);
    else
      CHECK_MSG(ew.line == ei.line && ew.column == ei.column &&
                    ew.position == ei.position,
                "%d:%d (%d) %s / %d:%d (%d) %s\ntext: %.300s", ew.line,
                ew.column, ew.position, ew.text, ei.line, ei.column,
                ei.position, ei.text, t.data);
    json_decref(jw);
    json_decref(ji);
    attnd_buf_free(&t);
    attnd_buf_free(&w);
  }
  ck_assert_int_gt(widened, 3);
}
END_TEST

/* ---- the suite ----------------------------------------------------------- */

/* ---- random numbers: the OS's or none ------------------------------------ */

/* check_codec links with -Wl,--wrap=getrandom (Makefile): getrandom's
 * calls come here, and fail with `random_errno` `random_fails` times
 * before going through. */
ssize_t __real_getrandom(void *buf, size_t n, unsigned flags);
ssize_t __wrap_getrandom(void *buf, size_t n, unsigned flags);
static int random_fails, random_errno;
ssize_t __wrap_getrandom(void *buf, size_t n, unsigned flags) {
  if (random_fails > 0) {
    random_fails--;
    errno = random_errno;
    return -1;
  }
  return __real_getrandom(buf, n, flags);
}

/* A signal before the pool answered (EINTR) is asked again; any other
 * failure (ENOSYS: a kernel before 3.17 or a seccomp filter; EPERM) stops
 * the process with the reason, rather than hand out an id from the clock
 * and an address. Caught: the old fallback (a value returned; no message),
 * EINTR taken as a failure. */
START_TEST(test_random_none_weaker) {
  random_fails = 3, random_errno = EINTR;
  uint64_t a = attnd_random_u64(), b = attnd_random_u64();
  ck_assert_int_eq(random_fails, 0);
  ck_assert_msg(a != b, "two draws equal: %llx", (unsigned long long)a);

  static const int errs[] = {ENOSYS, EPERM};
  for (size_t i = 0; i < sizeof errs / sizeof *errs; i++) {
    int fd[2];
    ck_assert_int_eq(pipe(fd), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
      dup2(fd[1], 2);
      random_fails = 1, random_errno = errs[i];
      uint64_t x = attnd_random_u64();
      printf("returned %llx\n", (unsigned long long)x);
      _exit(0);
    }
    close(fd[1]);
    char msg[512] = "";
    size_t got = 0;
    ssize_t n;
    while (got < sizeof msg - 1 &&
           (n = read(fd[0], msg + got, sizeof msg - 1 - got)) > 0)
      got += (size_t)n;
    msg[got] = 0;
    close(fd[0]);
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT,
                  "%s: the draw did not abort (status %d): %s",
                  strerror(errs[i]), st, msg);
    char want[128];
    snprintf(want, sizeof want, "\"event\":\"fatal\",\"error\":\"getrandom: %s",
             strerror(errs[i]));
    ck_assert_msg(strstr(msg, want) != NULL, "stderr: %s", msg);
  }
}
END_TEST

Suite *test_suite(void) {
  Suite *s = suite_create("codec");
  TCase *tc = tcase_create("numbers");
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, test_parse_formats, 0, N_PARSE_FORMATS);
  tcase_add_test(tc, test_parse_integers);
  tcase_add_test(tc, test_parse_halfway);
  tcase_add_loop_test(tc, test_parse_extended, 0, 4);
  tcase_add_test(tc, test_parse_edges);
  tcase_add_test(tc, test_parse_invalid);
  tcase_add_test(tc, test_parse_overflow);
  tcase_add_test(tc, test_parse_beyond_int64);
  tcase_add_test(tc, test_parse_bounds);
  tcase_add_test(tc, test_parse_fraction_runs);
  suite_add_tcase(s, tc);

  tc = tcase_create("format");
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, test_format_random_bits, 0, 10);
  tcase_add_loop_test(tc, test_format_random_typical, 0, 4);
  tcase_add_test(tc, test_format_special);
  tcase_add_test(tc, test_format_texts);
  tcase_add_test(tc, test_format_edges);
  tcase_add_test(tc, test_floats_put);
  tcase_add_test(tc, test_fmt_numbers);
  tcase_add_test(tc, test_fmt_ms_is_printf);
  tcase_add_test(tc, test_fmt_paths);
  suite_add_tcase(s, tc);

  tc = tcase_create("base64");
  tcase_set_timeout(tc, 30);
  tcase_add_loop_test(tc, test_b64_random, 0, 25);
  tcase_add_test(tc, test_b64_vectors);
  tcase_add_test(tc, test_b64_invalid);
  tcase_add_loop_test(tc, test_b64_bad_everywhere, 0, 20);
  tcase_add_test(tc, test_b64_bad_bytes_in_blocks);
  suite_add_tcase(s, tc);

  tc = tcase_create("buf");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, test_buf_basics);
  tcase_add_test(tc, test_buf_floats_texts);
  tcase_add_loop_test(tc, test_buf_floats_random, 0, 24);
  tcase_add_test(tc, test_buf_base64);
  suite_add_tcase(s, tc);

  tc = tcase_create("random");
  tcase_add_test(tc, test_random_none_weaker);
  suite_add_tcase(s, tc);

  tc = tcase_create("scan");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_scan_example);
  tcase_add_test(tc, test_scan_strings);
  tcase_add_test(tc, test_scan_base64_printable);
  tcase_add_loop_test(tc, test_scan_cases, 0, N_SCAN_CASES);
  tcase_add_loop_test(tc, test_scan_tensors, 0, 40);
  tcase_add_test(tc, test_scan_depth_limit);
  tcase_add_loop_test(tc, test_scan_random_docs, 0, 20);
  tcase_add_loop_test(tc, test_scan_prefixes, 0, 10);
  tcase_add_loop_test(tc, test_scan_mutations, 0, 25);
  tcase_add_test(tc, test_scan_large);
  tcase_add_loop_test(tc, test_scan_linear, 0, N_HOSTILE);
  tcase_add_test(tc, test_widen_texts);
  tcase_add_loop_test(tc, test_widen_random, 0, 10);
  suite_add_tcase(s, tc);
  return s;
}
