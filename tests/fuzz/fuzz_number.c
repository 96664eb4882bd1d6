/* tests/fuzz/fuzz_number.c: JSON numbers in and out (codec/number.h).
 *
 * Parsing: the input is the text. A reference lexer written from RFC 8259's
 * grammar with jansson's token rules ("01", "1." and "1e" are invalid, not a
 * number and a rest) decides the token; attnd_number_parse must agree on
 * accept or reject and on where the number ends, and give the bits of
 * (float)strtod(token). Printing: the input's bytes, read four at a time, are
 * floats; each finite one prints as a valid JSON number of at most
 * ATTND_FLOAT_TEXT_MAX characters, within ATTND_FLOAT_WRITE_MAX written
 * bytes (an exact heap buffer, so ASan sees any write past it), with no
 * more significant digits than the shortest "%.*e" that reads back, and
 * parses back, with either parser, to the same bits. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/number.h"
#include "fuzz.h"

static int digit(int c) {
  return c >= '0' && c <= '9';
}

/* The length of the JSON number token at s[0..n), or -1 when the token is
 * invalid. *is_int: no fraction and no exponent. */
static long ref_lex(const char *s, size_t n, int *is_int) {
  size_t i = 0;
  *is_int = 1;
  if (i < n && s[i] == '-')
    i++;
  if (i == n || !digit(s[i]))
    return -1;
  if (s[i] == '0') {
    if (++i < n && digit(s[i]))
      return -1;
  } else {
    while (i < n && digit(s[i]))
      i++;
  }
  if (i < n && s[i] == '.') {
    *is_int = 0;
    if (++i == n || !digit(s[i]))
      return -1;
    while (i < n && digit(s[i]))
      i++;
  }
  if (i < n && (s[i] == 'e' || s[i] == 'E')) {
    *is_int = 0;
    if (++i < n && (s[i] == '+' || s[i] == '-'))
      i++;
    if (i == n || !digit(s[i]))
      return -1;
    while (i < n && digit(s[i]))
      i++;
  }
  return (long)i;
}

static uint32_t bits_of(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

/* (float)strtod of s[0..len), and whether strtod overflowed to infinity
 * (*overflow) or, for an integer token, strtoll would (*int_range). */
static float ref_value(const char *s, size_t len, int is_int, int *overflow,
                       int *int_range) {
  char *tok = malloc(len + 1);
  FUZZ_CHECK(tok != NULL, "out of memory");
  memcpy(tok, s, len);
  tok[len] = '\0';
  errno = 0;
  double d = strtod(tok, NULL);
  *overflow = errno == ERANGE && isinf(d);
  *int_range = 0;
  if (is_int) {
    errno = 0;
    (void)strtoll(tok, NULL, 10);
    *int_range = errno == ERANGE;
  }
  free(tok);
  return (float)d;
}

static void check_parse(const char *s, size_t n) {
  int is_int;
  long len = ref_lex(s, n, &is_int);
  float got = 0;
  const char *next = NULL;
  int r = attnd_number_parse(s, s + n, &got, &next);
  if (len < 0) {
    FUZZ_CHECK(r == -1, "accepted an invalid number (r=%d)", r);
    return;
  }
  int overflow, int_range;
  float want = ref_value(s, (size_t)len, is_int, &overflow, &int_range);
  /* -2 is jansson's refusal: a real that overflows a double; an integer
   * beyond long long may be refused so, or read as the float it is. */
  if (r == -2) {
    FUZZ_CHECK(overflow || int_range,
               "refused %.*s (-2) though strtod reads it as %g", (int)len, s,
               (double)want);
    return;
  }
  FUZZ_CHECK(r == 0, "rejected the valid number %.*s (r=%d)", (int)len, s, r);
  FUZZ_CHECK(!overflow, "accepted %.*s, which overflows a double", (int)len, s);
  FUZZ_CHECK(next == s + len, "number %.*s: stopped after %ld characters",
             (int)len, s, (long)(next - s));
  FUZZ_CHECK(bits_of(got) == bits_of(want),
             "%.*s: got %.9g (0x%08x), strtod gives %.9g (0x%08x)", (int)len, s,
             (double)got, bits_of(got), (double)want, bits_of(want));
}

/* Significant digits of a printed number (its mantissa's, zeros that only
 * place the point excluded). */
static int sig_digits(const char *t) {
  int n = 0, pending0 = 0, started = 0;
  for (; *t && *t != 'e' && *t != 'E'; t++) {
    if (!digit(*t))
      continue;
    if (*t == '0') {
      if (started)
        pending0++;
      continue;
    }
    started = 1;
    n += pending0 + 1;
    pending0 = 0;
  }
  return n;
}

/* The fewest significant digits p with which "%.{p-1}e" reads back to v. */
static int shortest_e(float v) {
  char t[64];
  for (int p = 1; p < 9; p++) {
    snprintf(t, sizeof t, "%.*e", p - 1, (double)v);
    if (bits_of((float)strtod(t, NULL)) == bits_of(v))
      return p;
  }
  return 9;
}

static void check_print(float v) {
  char *p = malloc(ATTND_FLOAT_WRITE_MAX);
  FUZZ_CHECK(p != NULL, "out of memory");
  char *end = attnd_float_put(v, p);
  size_t len = (size_t)(end - p);
  FUZZ_CHECK(len >= 1 && len <= ATTND_FLOAT_TEXT_MAX,
             "0x%08x printed %zu characters", bits_of(v), len);
  char t[ATTND_FLOAT_TEXT_MAX + 1];
  memcpy(t, p, len);
  t[len] = '\0';
  free(p);

  if (!isfinite(v)) {
    FUZZ_CHECK(strcmp(t, "null") == 0, "0x%08x printed '%s', not null",
               bits_of(v), t);
    return;
  }
  int is_int;
  FUZZ_CHECK(ref_lex(t, len, &is_int) == (long)len,
             "0x%08x printed '%s', not a JSON number", bits_of(v), t);
  FUZZ_CHECK(bits_of((float)strtod(t, NULL)) == bits_of(v),
             "0x%08x (%.9g) printed '%s', which strtod reads as %.9g",
             bits_of(v), (double)v, t, (double)(float)strtod(t, NULL));
  float back = 0;
  const char *next = NULL;
  int r = attnd_number_parse(t, t + len, &back, &next);
  FUZZ_CHECK(r == 0 && next == t + len && bits_of(back) == bits_of(v),
             "0x%08x printed '%s', which parses back as r=%d, 0x%08x",
             bits_of(v), t, r, bits_of(back));
  if (v != 0) {
    int want = shortest_e(v);
    FUZZ_CHECK(sig_digits(t) <= want,
               "0x%08x printed '%s' (%d digits); %d digits read back",
               bits_of(v), t, sig_digits(t), want);
  }
  char buf[32];
  FUZZ_CHECK(attnd_float_format(v, buf) == (int)len && strcmp(buf, t) == 0,
             "attnd_float_format(0x%08x) differs from attnd_float_put",
             bits_of(v));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  check_parse((const char *)data, size);
  for (size_t i = 0; i + 4 <= size && i < 64; i += 4) {
    float v;
    memcpy(&v, data + i, sizeof v);
    check_print(v);
  }
  return 0;
}
