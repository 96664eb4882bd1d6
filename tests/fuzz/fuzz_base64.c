/* tests/fuzz/fuzz_base64.c: base64 in and out (codec/base64.h).
 *
 * The input is both bytes and text. As bytes: the encoding equals a plain
 * scalar reference's, and decodes back to the input. As text: decoding
 * agrees with a reference decoder written from the header's contract (the
 * same verdict, the same first offending offset, the same bytes), a
 * failure's offset lies inside the text (or is its length when that is
 * not a multiple of 4), and a success re-encodes to the very same text, as
 * only canonical base64 is accepted. Buffers are exactly as large as the
 * contract says, so ASan sees a write past them. Inputs of 48 characters
 * and more take the AVX2 paths where the CPU has them. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "codec/base64.h"
#include "fuzz.h"

static const char alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static int value(unsigned char c) {
  const char *p = c ? strchr(alphabet, c) : NULL;
  return p ? (int)(p - alphabet) : -1;
}

static void ref_encode(const uint8_t *s, size_t n, char *out) {
  for (size_t i = 0; i < n; i += 3, out += 4) {
    uint32_t x = (uint32_t)s[i] << 16;
    if (i + 1 < n)
      x |= (uint32_t)s[i + 1] << 8;
    if (i + 2 < n)
      x |= s[i + 2];
    out[0] = alphabet[x >> 18];
    out[1] = alphabet[(x >> 12) & 63];
    out[2] = i + 1 < n ? alphabet[(x >> 6) & 63] : '=';
    out[3] = i + 2 < n ? alphabet[x & 63] : '=';
  }
}

/* Returns 0 with the bytes in out and *out_n, or -1 with *bad. */
static int ref_decode(const char *s, size_t n, uint8_t *out, size_t *out_n,
                      size_t *bad) {
  *out_n = 0;
  if (n % 4) {
    *bad = n;
    return -1;
  }
  for (size_t i = 0; i < n; i += 4) {
    int last = i + 4 == n;
    int pad = 0;
    if (last && s[n - 1] == '=')
      pad = s[n - 2] == '=' ? 2 : 1;
    uint32_t x = 0;
    for (int j = 0; j < 4 - pad; j++) {
      int v = value((unsigned char)s[i + (size_t)j]);
      if (v < 0) {
        *bad = i + (size_t)j;
        return -1;
      }
      x = x << 6 | (uint32_t)v;
    }
    x <<= 6 * pad;
    if (x & ((1u << (8 * pad)) - 1)) {
      *bad = i + 3 - (size_t)pad;
      return -1;
    }
    for (int j = 0; j < 3 - pad; j++)
      out[(*out_n)++] = (uint8_t)(x >> (16 - 8 * j));
  }
  return 0;
}

static void check_bytes(const uint8_t *data, size_t n) {
  size_t len = attnd_b64_encoded_len(n);
  FUZZ_CHECK(len == (n + 2) / 3 * 4, "encoded_len(%zu) = %zu", n, len);
  char *text = malloc(len + 1), *want = malloc(len + 1);
  uint8_t *back = malloc(n + 1);
  FUZZ_CHECK(text && want && back, "out of memory");
  attnd_b64_encode(data, n, text);
  ref_encode(data, n, want);
  for (size_t i = 0; i < len; i++)
    FUZZ_CHECK(text[i] == want[i],
               "encoding %zu bytes: character %zu is '%c', want '%c'", n, i,
               text[i], want[i]);
  size_t out_n = 0, bad = 0;
  int r = attnd_b64_decode(text, len, back, &out_n, &bad);
  FUZZ_CHECK(r == 0, "the encoding of %zu bytes fails to decode at %zu", n,
             bad);
  FUZZ_CHECK(out_n == n && memcmp(back, data, n) == 0,
             "%zu bytes come back as %zu different ones", n, out_n);
  free(text);
  free(want);
  free(back);
}

static void check_text(const char *s, size_t n) {
  size_t cap = n / 4 * 3; /* the most a decode may write */
  uint8_t *out = malloc(cap ? cap : 1), *want = malloc(cap ? cap : 1);
  FUZZ_CHECK(out && want, "out of memory");
  size_t out_n = 12345, bad = 12345, want_n = 0, want_bad = 0;
  int r = attnd_b64_decode(s, n, out, &out_n, &bad);
  int wr = ref_decode(s, n, want, &want_n, &want_bad);
  FUZZ_CHECK(r == wr, "decoding %zu characters: %d, the reference %d", n, r,
             wr);
  if (r < 0) {
    FUZZ_CHECK(n % 4 ? bad == n : bad < n,
               "%zu characters: bad_pos %zu outside the text", n, bad);
    FUZZ_CHECK(bad == want_bad, "%zu characters: bad_pos %zu, want %zu", n, bad,
               want_bad);
  } else {
    FUZZ_CHECK(out_n == want_n && memcmp(out, want, out_n) == 0,
               "%zu characters decode to %zu bytes that differ from the "
               "reference's %zu",
               n, out_n, want_n);
    size_t len = attnd_b64_encoded_len(out_n);
    char *again = malloc(len + 1);
    FUZZ_CHECK(again != NULL, "out of memory");
    attnd_b64_encode(out, out_n, again);
    FUZZ_CHECK(len == n && memcmp(again, s, n) == 0,
               "accepted %zu characters that are not canonical base64", n);
    free(again);
  }
  free(out);
  free(want);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  check_bytes(data, size);
  check_text((const char *)data, size);
  return 0;
}
