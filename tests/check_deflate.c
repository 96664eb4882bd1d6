/* tests/check_deflate.c: content codings (codec/deflate.h), against
 * zlib's own one-shot calls.
 *
 * TCases:
 *   - names: Content-Encoding values and Accept-Encoding choices;
 *   - inflate: gzip (one member and several), zlib and raw deflate bodies,
 *     fed whole and a byte at a time, give back the exact bytes; the limit
 *     stops the output at exactly `max`, a bomb included; corrupt, cut
 *     short and trailing bytes are errors that say so, counting the bytes
 *     from the body's start (not its gzip member's);
 *   - deflate: what attnd_deflate writes, zlib reads back. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "codec/deflate.h"
#include "suite.h"

START_TEST(test_parse) {
  static const struct {
    const char *v;
    int want;
  } cases[] = {
      {"gzip", ATTND_CODING_GZIP},
      {" GZip\t", ATTND_CODING_GZIP},
      {"x-gzip", ATTND_CODING_GZIP},
      {"deflate", ATTND_CODING_DEFLATE},
      {"identity", ATTND_CODING_IDENTITY},
      {"br", -1},
      {"gzip, deflate", -1},
      {"", -1},
      {"*", -1},
      {"gzipx", -1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    ck_assert_msg(attnd_coding_parse(cases[i].v) == cases[i].want,
                  "'%s' gives %d", cases[i].v, attnd_coding_parse(cases[i].v));
}
END_TEST

START_TEST(test_accept) {
  static const struct {
    const char *v;
    attnd_coding_t want;
  } cases[] = {
      {NULL, ATTND_CODING_IDENTITY},
      {"", ATTND_CODING_IDENTITY},
      {"gzip", ATTND_CODING_GZIP},
      {"deflate", ATTND_CODING_DEFLATE},
      {"gzip, deflate", ATTND_CODING_GZIP},
      {"deflate, gzip;q=0", ATTND_CODING_DEFLATE},
      {"gzip;q=0, deflate;q=0.5", ATTND_CODING_DEFLATE},
      {"gzip;q=0.001", ATTND_CODING_GZIP},
      {"*", ATTND_CODING_GZIP},
      {"*;q=0", ATTND_CODING_IDENTITY},
      {"gzip;q=0, *", ATTND_CODING_DEFLATE},
      {"identity", ATTND_CODING_IDENTITY},
      {"br, zstd", ATTND_CODING_IDENTITY},
      {"gzip;q=nope", ATTND_CODING_IDENTITY},
      {"gzip;q=2", ATTND_CODING_IDENTITY},
      {" GZIP ; Q=1 ", ATTND_CODING_GZIP},
      {",,;,", ATTND_CODING_IDENTITY},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    ck_assert_msg(attnd_coding_accept(cases[i].v) == cases[i].want,
                  "'%s' gives %d", cases[i].v ? cases[i].v : "(none)",
                  attnd_coding_accept(cases[i].v));
}
END_TEST

/* An Accept-Encoding of many elements is read in one pass: each element's
 * search for its ';' stopped only at the value's end, so a header of n
 * bytes of "a," cost n^2 / 4 (a 32 KiB header, connection_buffer_bytes'
 * default, 19 ms; one of 8 MiB, within its limit, minutes). Counted, not
 * timed: the bytes examined stay within twice the value's length. */
START_TEST(test_accept_linear) {
  for (size_t n = 1024; n <= 16384; n *= 4) {
    attnd_buf_t b;
    attnd_buf_init(&b);
    while (b.len < n)
      attnd_buf_puts(&b, "a,");
    attnd_buf_puts(&b, "x;q=1,gzip");
    uint64_t before = attnd__accept_examined;
    ck_assert_int_eq(attnd_coding_accept(b.data), ATTND_CODING_GZIP);
    uint64_t seen = attnd__accept_examined - before;
    ck_assert_msg(seen >= b.len && seen <= 2 * b.len + 16,
                  "%zu bytes of Accept-Encoding: %llu bytes examined", b.len,
                  (unsigned long long)seen);
    attnd_buf_free(&b);
  }
}
END_TEST

/* n bytes of text with some repetition, so that they compress. */
static unsigned char *sample(size_t n, unsigned seed) {
  unsigned char *p = malloc(n ? n : 1);
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    p[i] = (unsigned char)((i % 97 < 60) ? 'a' + i % 7 : seed >> 24);
  }
  return p;
}

/* src compressed by zlib's deflate with windowBits `bits` (31 gzip, 15
 * zlib, -15 raw): a new buffer of *n bytes. */
static unsigned char *compress_bits(const unsigned char *src, size_t len,
                                    int bits, size_t *n) {
  z_stream z = {0};
  ck_assert_int_eq(deflateInit2(&z, 6, Z_DEFLATED, bits, 8, Z_DEFAULT_STRATEGY),
                   Z_OK);
  size_t cap = deflateBound(&z, (uLong)len) + 64;
  unsigned char *out = malloc(cap);
  z.next_in = (unsigned char *)src;
  z.avail_in = (uInt)len;
  z.next_out = out;
  z.avail_out = (uInt)cap;
  ck_assert_int_eq(deflate(&z, Z_FINISH), Z_STREAM_END);
  *n = cap - z.avail_out;
  deflateEnd(&z);
  return out;
}

/* Inflates in[0..n) as `coding` within max, `step` bytes a call (0: all at
 * once). Returns the feed's result; *out holds what came out. */
static int inflate_all(attnd_coding_t coding, const unsigned char *in, size_t n,
                       size_t step, size_t max, attnd_buf_t *out, char *msg,
                       size_t msz) {
  attnd_inflate_t *z = attnd_inflate_new(coding);
  ck_assert_ptr_nonnull(z);
  int rc = 0;
  for (size_t at = 0; rc == 0 && at < n;) {
    size_t k = step && n - at > step ? step : n - at;
    rc = attnd_inflate_feed(z, in + at, k, out, max, msg, msz);
    at += k;
  }
  if (rc == 0)
    rc = attnd_inflate_end(z, msg, msz) < 0 ? -4 : 0;
  attnd_inflate_free(z);
  return rc;
}

/* Each coding's stream of each size, whole and a byte at a time. */
START_TEST(test_round_trip) {
  static const size_t sizes[] = {0, 1, 100, 70000, 1 << 20};
  static const struct {
    attnd_coding_t coding;
    int bits;
  } forms[] = {{ATTND_CODING_GZIP, 31},
               {ATTND_CODING_DEFLATE, 15},
               {ATTND_CODING_DEFLATE, -15}};
  size_t len = sizes[_i % 5];
  unsigned char *src = sample(len, (unsigned)_i);
  for (size_t f = 0; f < 3; f++) {
    size_t n;
    unsigned char *z = compress_bits(src, len, forms[f].bits, &n);
    for (size_t step = 0; step <= 1; step++) {
      if (step && len > 100000)
        continue; /* a byte a call: the small ones suffice */
      attnd_buf_t out;
      attnd_buf_init(&out);
      char msg[200] = "";
      int rc = inflate_all(forms[f].coding, z, n, step, len + 10, &out, msg,
                           sizeof msg);
      ck_assert_msg(rc == 0, "form %zu, %zu bytes, step %zu: %d %s", f, len,
                    step, rc, msg);
      ck_assert_uint_eq(out.len, len);
      ck_assert(len == 0 || memcmp(out.data, src, len) == 0);
      attnd_buf_free(&out);
    }
    free(z);
  }
  free(src);
}
END_TEST

/* gzip may be several members (RFC 1952 2.2): their bytes, concatenated. */
/* Input that makes nothing: gzip members of nothing, one after another,
 * and a raw deflate stream of empty stored blocks (5 bytes each), which
 * went on for as long as they were fed. Refused (-2) once past the bound
 * for `max`; honest input of max random bytes (compressed, 23 bytes over
 * them), fed a byte at a time, is within it. */
START_TEST(test_input_bound) {
  enum { MAX = 4000 };
  const size_t bound = attnd_inflate_in_bound(MAX);
  size_t ne;
  unsigned char *empty = compress_bits((const unsigned char *)"", 0, 31, &ne);
  size_t count = bound / ne + 2, n = count * ne;
  unsigned char *members = malloc(n);
  for (size_t i = 0; i < count; i++)
    memcpy(members + i * ne, empty, ne);
  unsigned char *blocks = malloc(n);
  for (size_t i = 0; i + 5 <= n; i += 5)
    memcpy(blocks + i, "\x00\x00\x00\xff\xff", 5);
  char msg[200], want[200];
  for (size_t step = 0; step <= 1; step++) {
    attnd_buf_t out;
    attnd_buf_init(&out);
    ck_assert_int_eq(inflate_all(ATTND_CODING_GZIP, members, n, step, MAX, &out,
                                 msg, sizeof msg),
                     -2);
    snprintf(want, sizeof want,
             "the gzip data passes %zu bytes, more than any that inflates "
             "to at most %d bytes needs",
             bound, MAX);
    ck_assert_str_eq(msg, want);
    attnd_buf_free(&out);
    attnd_buf_init(&out);
    ck_assert_int_eq(inflate_all(ATTND_CODING_DEFLATE, blocks, n / 5 * 5, step,
                                 MAX, &out, msg, sizeof msg),
                     -2);
    ck_assert_msg(strstr(msg, "the deflate data passes"), "%s", msg);
    attnd_buf_free(&out);
  }
  unsigned char *src = malloc(MAX);
  unsigned seed = 9;
  for (size_t i = 0; i < MAX; i++) /* no repeats for zlib to find */
    src[i] = (unsigned char)((seed = seed * 1103515245u + 12345u) >> 24);
  size_t nz;
  unsigned char *z = compress_bits(src, MAX, 31, &nz);
  ck_assert_uint_le(nz, bound);
  attnd_buf_t out;
  attnd_buf_init(&out);
  ck_assert_int_eq(
      inflate_all(ATTND_CODING_GZIP, z, nz, 1, MAX, &out, msg, sizeof msg), 0);
  ck_assert_uint_eq(out.len, MAX);
  attnd_buf_free(&out);
  free(z);
  free(src);
  free(blocks);
  free(members);
  free(empty);
}
END_TEST

START_TEST(test_gzip_members) {
  unsigned char *a = sample(5000, 1), *b = sample(3000, 2);
  size_t na, nb;
  unsigned char *za = compress_bits(a, 5000, 31, &na),
                *zb = compress_bits(b, 3000, 31, &nb);
  unsigned char *both = malloc(na + nb);
  memcpy(both, za, na);
  memcpy(both + na, zb, nb);
  attnd_buf_t out;
  attnd_buf_init(&out);
  char msg[200];
  ck_assert_int_eq(inflate_all(ATTND_CODING_GZIP, both, na + nb, 7, 1 << 20,
                               &out, msg, sizeof msg),
                   0);
  ck_assert_uint_eq(out.len, 8000);
  ck_assert(memcmp(out.data, a, 5000) == 0);
  ck_assert(memcmp(out.data + 5000, b, 3000) == 0);
  attnd_buf_free(&out);
  /* an error after the first member counts its bytes from the body's
   * start, not the member's (zlib's count starts again at each): bytes
   * that are no member, and a second member cut short, whole and a byte
   * at a time */
  unsigned char *tail = malloc(na + nb);
  memcpy(tail, za, na);
  memcpy(tail + na, "garbage", 7);
  char want[200];
  for (size_t step = 0; step <= 1; step++) {
    attnd_buf_init(&out);
    ck_assert_int_eq(inflate_all(ATTND_CODING_GZIP, tail, na + 7, step, 1 << 20,
                                 &out, msg, sizeof msg),
                     -1);
    snprintf(want, sizeof want,
             "the body is not valid gzip data (at byte %zu): incorrect "
             "header check",
             na + 2);
    ck_assert_str_eq(msg, want);
    attnd_buf_free(&out);
    attnd_buf_init(&out);
    ck_assert_int_eq(inflate_all(ATTND_CODING_GZIP, both, na + nb / 2, step,
                                 1 << 20, &out, msg, sizeof msg),
                     -4);
    snprintf(want, sizeof want,
             "the gzip body ends before its stream does (%zu bytes read)",
             na + nb / 2);
    ck_assert_str_eq(msg, want);
    attnd_buf_free(&out);
  }
  free(tail);
  /* deflate is one stream: what follows it is an error */
  size_t nd;
  unsigned char *zd = compress_bits(a, 5000, 15, &nd);
  unsigned char *twice = malloc(nd * 2);
  memcpy(twice, zd, nd);
  memcpy(twice + nd, zd, nd);
  attnd_buf_init(&out);
  ck_assert_int_eq(inflate_all(ATTND_CODING_DEFLATE, twice, 2 * nd, 0, 1 << 20,
                               &out, msg, sizeof msg),
                   -1);
  ck_assert_msg(strstr(msg, "the deflate stream ends") != NULL, "%s", msg);
  attnd_buf_free(&out);
  free(a);
  free(b);
  free(za);
  free(zb);
  free(both);
  free(zd);
  free(twice);
}
END_TEST

/* The output stops at exactly max: a stream of max bytes passes, one of
 * max + 1 does not; a 1 GB bomb of zeros stops at max. */
START_TEST(test_limit) {
  size_t len = 100000, n;
  unsigned char *src = sample(len, 3);
  unsigned char *z = compress_bits(src, len, 31, &n);
  attnd_buf_t out;
  char msg[200];
  attnd_buf_init(&out);
  ck_assert_int_eq(
      inflate_all(ATTND_CODING_GZIP, z, n, 0, len, &out, msg, sizeof msg), 0);
  attnd_buf_free(&out);
  attnd_buf_init(&out);
  ck_assert_int_eq(
      inflate_all(ATTND_CODING_GZIP, z, n, 0, len - 1, &out, msg, sizeof msg),
      -2);
  ck_assert_uint_eq(out.len, len - 1);
  ck_assert_msg(strstr(msg, "inflates past 99999 bytes") != NULL, "%s", msg);
  attnd_buf_free(&out);
  free(z);
  free(src);

  /* the bomb: 1 GiB of zeros, compressed by hand in 1 MiB steps */
  z_stream zs = {0};
  ck_assert_int_eq(deflateInit2(&zs, 9, Z_DEFLATED, 15, 8, Z_DEFAULT_STRATEGY),
                   Z_OK);
  unsigned char *zeros = calloc(1, 1 << 20), *bomb = malloc(2 << 20);
  zs.next_out = bomb;
  zs.avail_out = 2 << 20;
  for (int i = 0; i < 1024; i++) {
    zs.next_in = zeros;
    zs.avail_in = 1 << 20;
    deflate(&zs, i == 1023 ? Z_FINISH : Z_NO_FLUSH);
  }
  size_t nb = (2 << 20) - zs.avail_out;
  deflateEnd(&zs);
  ck_assert(nb < (2 << 20) && nb > 1000);
  attnd_buf_init(&out);
  ck_assert_int_eq(inflate_all(ATTND_CODING_DEFLATE, bomb, nb, 4096, 1 << 20,
                               &out, msg, sizeof msg),
                   -2);
  ck_assert_uint_eq(out.len, 1 << 20);
  attnd_buf_free(&out);
  free(zeros);
  free(bomb);
}
END_TEST

START_TEST(test_bad) {
  size_t len = 20000, n;
  unsigned char *src = sample(len, 4);
  unsigned char *z = compress_bits(src, len, 31, &n);
  attnd_buf_t out;
  char msg[200];
  /* cut short: a whole stream never ends */
  attnd_buf_init(&out);
  ck_assert_int_eq(inflate_all(ATTND_CODING_GZIP, z, n / 2, 0, 1 << 20, &out,
                               msg, sizeof msg),
                   -4);
  ck_assert_msg(strstr(msg, "ends before its stream does") != NULL, "%s", msg);
  attnd_buf_free(&out);
  /* not gzip at all */
  attnd_buf_init(&out);
  ck_assert_int_eq(inflate_all(ATTND_CODING_GZIP,
                               (const unsigned char *)"{\"inputs\":[]}", 13, 0,
                               1 << 20, &out, msg, sizeof msg),
                   -1);
  ck_assert_msg(strstr(msg, "not valid gzip data") != NULL, "%s", msg);
  attnd_buf_free(&out);
  /* a flipped byte in the middle: an error, or a failed check at the end */
  z[n / 2] ^= 0x55;
  attnd_buf_init(&out);
  int rc =
      inflate_all(ATTND_CODING_GZIP, z, n, 0, 1 << 20, &out, msg, sizeof msg);
  ck_assert_msg(rc == -1 || rc == -4, "a corrupt body gives %d", rc);
  attnd_buf_free(&out);
  /* an error stays: later feeds return it again */
  attnd_inflate_t *zi = attnd_inflate_new(ATTND_CODING_GZIP);
  attnd_buf_init(&out);
  ck_assert_int_eq(
      attnd_inflate_feed(zi, "nope", 4, &out, 100, msg, sizeof msg), -1);
  ck_assert_int_eq(attnd_inflate_feed(zi, z, n, &out, 100, msg, sizeof msg),
                   -1);
  ck_assert_int_eq(attnd_inflate_end(zi, msg, sizeof msg), -1);
  attnd_inflate_free(zi);
  attnd_buf_free(&out);
  free(z);
  free(src);
}
END_TEST

START_TEST(test_deflate) {
  static const size_t sizes[] = {0, 1, 5000, 3 << 20};
  size_t len = sizes[_i % 4];
  attnd_coding_t coding = _i < 4 ? ATTND_CODING_GZIP : ATTND_CODING_DEFLATE;
  unsigned char *src = sample(len, 5);
  attnd_buf_t z;
  attnd_buf_init(&z);
  ck_assert_int_eq(attnd_deflate(coding, src, len, &z), 0);
  /* zlib reads it back (inflateInit2 32 + 15: gzip or zlib by header) */
  z_stream zs = {0};
  ck_assert_int_eq(inflateInit2(&zs, 32 + 15), Z_OK);
  unsigned char *back = malloc(len + 1);
  zs.next_in = (unsigned char *)z.data;
  zs.avail_in = (uInt)z.len;
  zs.next_out = back;
  zs.avail_out = (uInt)len + 1;
  ck_assert_int_eq(inflate(&zs, Z_FINISH), Z_STREAM_END);
  ck_assert_uint_eq(zs.total_out, len);
  ck_assert_uint_eq(zs.avail_in, 0);
  ck_assert(len == 0 || memcmp(back, src, len) == 0);
  ck_assert_int_eq(((unsigned char *)z.data)[0] == 0x1f,
                   coding == ATTND_CODING_GZIP);
  inflateEnd(&zs);
  /* appended: what was in the buffer stays */
  attnd_buf_t pre;
  attnd_buf_init(&pre);
  attnd_buf_puts(&pre, "head");
  ck_assert_int_eq(attnd_deflate(coding, src, len, &pre), 0);
  ck_assert_uint_eq(pre.len, 4 + z.len);
  ck_assert(memcmp(pre.data, "head", 4) == 0);
  attnd_buf_free(&pre);
  attnd_buf_free(&z);
  free(back);
  free(src);
}
END_TEST

Suite *test_suite(void) {
  Suite *s = suite_create("deflate");
  TCase *tc = tcase_create("names");
  tcase_add_test(tc, test_parse);
  tcase_add_test(tc, test_accept);
  tcase_add_test(tc, test_accept_linear);
  suite_add_tcase(s, tc);
  tc = tcase_create("inflate");
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, test_round_trip, 0, 5);
  tcase_add_test(tc, test_gzip_members);
  tcase_add_test(tc, test_input_bound);
  tcase_add_test(tc, test_limit);
  tcase_add_test(tc, test_bad);
  suite_add_tcase(s, tc);
  tc = tcase_create("deflate");
  tcase_add_loop_test(tc, test_deflate, 0, 8);
  suite_add_tcase(s, tc);
  return s;
}
