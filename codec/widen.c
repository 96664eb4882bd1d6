/* codec/widen.c: the number literals jansson refuses, rewritten so that it
 * reads them (bulk.h, attnd_json_widen_numbers). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bulk.h"
#include "mem.h"
#include "number.h"
#include "util.h"

/*
 * jansson reads an integer literal with strtoll and refuses one that
 * overflows ("too big integer"), though it is valid JSON and, as a float,
 * a finite value; and it refuses a literal whose value overflows a double
 * ("real number overflow"). The decoder then has jansson read a copy of the
 * text with each such literal rewritten (bulk.h). An integer beyond int64
 * becomes a real literal of the same double value (strtod's): 17
 * significant digits and an exponent, which a literal of 19 digits or more
 * always has room for (17 + "e" + at most 3 exponent digits). A literal
 * beyond a double becomes "9e307" or "-9e307", which a literal of such a
 * value always has room for ("2e308" is the shortest). Both are padded with
 * spaces after them. */

/* Writes the real literal for the integer literal s[0..n) (an optional '-'
 * and 19 digits or more, a finite double) into buf (at least 32 bytes);
 * returns its length, 0 when it would be longer than the literal, or
 * (size_t)-1 when out of memory. */
static size_t widened(const char *s, size_t n, char *buf) {
  char small[64], *tok = n < sizeof small ? small : attnd_mem_alloc(n + 1);
  if (!tok)
    return (size_t)-1;
  memcpy(tok, s, n);
  tok[n] = '\0';
  double d = strtod(tok, NULL);
  if (tok != small)
    attnd_mem_free(tok);
  char e[40];
  snprintf(e, sizeof e, "%.16e", fabs(d)); /* d.dddddddddddddddde+XX */
  char digits[17];
  digits[0] = e[0];
  memcpy(digits + 1, e + 2, 16);
  int exp10 = atoi(e + 19) - 16, nd = 17;
  while (nd > 1 && digits[nd - 1] == '0') {
    nd--;
    exp10++;
  }
  int len = snprintf(buf, 32, "%s%.*se%d", d < 0 ? "-" : "", nd, digits, exp10);
  return len > 0 && (size_t)len <= n ? (size_t)len : 0;
}

long attnd_json_widen_numbers(const char *src, size_t n, attnd_buf_t *out) {
  const char *p = src, *end = src + n;
  const char *copied = src; /* src[copied..p) is still to be copied */
  long count = 0;
  ATTND__EXAMINED(n); /* the main pass, and the digits of every number */
  while (p < end) {
    if (*p == '"') {
      int escapes;
      const char *close = attnd__string_close(p, end, &escapes);
      p = close ? close + 1 : end;
      continue;
    }
    if (*p != '-' && (*p < '0' || *p > '9')) {
      p++;
      continue;
    }
    const char *tok = p, *next = NULL;
    float f;
    int r = attnd_number_parse(tok, end, &f, &next);
    if (r == -1) { /* not a number: step over what looks like one */
      while (p < end && ((*p >= '0' && *p <= '9') || *p == '.' || *p == 'e' ||
                         *p == 'E' || *p == '+' || *p == '-'))
        p++;
      continue;
    }
    ATTND__EXAMINED(next - tok);
    size_t tlen = (size_t)(next - tok), len = 0;
    const char *digits = tok + (*tok == '-');
    size_t nd = (size_t)(next - digits);
    char buf[32];
    if (r == -2) {               /* beyond a double */
      len = *tok == '-' ? 6 : 5; /* ATTND_JSON_HUGE */
      memcpy(buf, *tok == '-' ? "-9e307" : "9e307", len);
    } else if (memchr(digits, '.', nd) == NULL &&
               memchr(digits, 'e', nd) == NULL &&
               memchr(digits, 'E', nd) == NULL &&
               (nd > 19 ||
                (nd == 19 && memcmp(digits,
                                    *tok == '-' ? "9223372036854775808"
                                                : "9223372036854775807",
                                    19) > 0))) { /* an integer beyond int64 */
      len = widened(tok, tlen, buf);
      if (len == (size_t)-1)
        return -1;
    }
    if (len && len <= tlen) {
      attnd_buf_append(out, copied, (size_t)(tok - copied));
      attnd_buf_append(out, buf, len);
      for (size_t k = len; k < tlen; k++)
        attnd_buf_append(out, " ", 1);
      copied = next;
      count++;
    }
    p = next;
  }
  attnd_buf_append(out, copied, (size_t)(p - copied));
  return out->oom ? -1 : count;
}
