/* tests/fuzz/fuzz_coding.c: HTTP content codings (codec/deflate.h).
 *
 * Three properties on any bytes:
 *
 * - Accept-Encoding, as the raw text: attnd_coding_accept answers one of
 *   the three codings, and the searches for its elements' ends examine at
 *   most two bytes per byte of the value (linear: a search that ran to the
 *   value's end for every element examined n²/4).
 * - Accept-Encoding, built from the input: each pair of bytes picks a
 *   coding token (in any case, "x-gzip", "*", one attnd does not know,
 *   none) and its parameters (none, a qvalue of 0, 0.5 or 1 as RFC 9110
 *   12.4.2 writes them, with other parameters and white space around),
 *   and the answer is the header's contract, computed here: gzip if its
 *   weight (or that of "*", when gzip is not named) is above 0, else
 *   deflate the same way, else identity; a coding named twice takes its
 *   last weight.
 * - Content-Encoding: attnd_coding_parse names a coding exactly when the
 *   trimmed value is one token of the three (or x-gzip), in any case.
 *
 * And the codec: the input deflated (gzip and zlib) inflates back to the
 * same bytes when fed in pieces cut where the input says, and inflating the
 * input itself as either coding ends in success or a message, never past
 * its limit. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "codec/buf.h"
#include "codec/deflate.h"
#include "fuzz.h"

#define MAX_INFLATE 4096

/* The coding tokens a built element may name: its coding (-1 for none
 * attnd knows, -2 for "*"). */
static const struct {
  const char *text;
  int coding;
} tokens[] = {
    {"gzip", ATTND_CODING_GZIP},
    {"GZip", ATTND_CODING_GZIP},
    {"x-gzip", ATTND_CODING_GZIP},
    {"deflate", ATTND_CODING_DEFLATE},
    {"DEFLATE", ATTND_CODING_DEFLATE},
    {"identity", ATTND_CODING_IDENTITY},
    {"*", -2},
    {"br", -1},
    {"gzipx", -1},
    {"compress", -1},
    {"zstd", -1},
    {"", -1},
};
#define N_TOKENS (sizeof tokens / sizeof tokens[0])

/* The parameters after a token, and the weight they give. */
static const struct {
  const char *text;
  double q;
} params[] = {
    {"", 1},
    {";q=0", 0},
    {";q=0.5", 0.5},
    {";q=1", 1},
    {";Q=0.000", 0},
    {";q=1.000", 1},
    {" ; q=0.001", 0.001},
    {";level=1;q=0", 0},
    {";q=0;level=1", 0},
    {";level=9", 1},
    {"\t;\tq=0.25\t", 0.25},
};
#define N_PARAMS (sizeof params / sizeof params[0])

static const char *const spaces[] = {"", " ", "\t", "  "};

/* Accept-Encoding's contract (deflate.h) for the weights w (-1: not
 * named) and any ("*", -1: not named). */
static attnd_coding_t expected(const double *w, double any) {
  for (int c = ATTND_CODING_GZIP; c <= ATTND_CODING_DEFLATE; c++)
    if (w[c] > 0 || (w[c] < 0 && any > 0))
      return (attnd_coding_t)c;
  return ATTND_CODING_IDENTITY;
}

static void check_accept_raw(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  memcpy(text, data, size);
  text[size] = 0;
  size_t len = strlen(text);
  uint64_t before = attnd__accept_examined;
  attnd_coding_t c = attnd_coding_accept(text);
  uint64_t examined = attnd__accept_examined - before;
  FUZZ_CHECK(c == ATTND_CODING_IDENTITY || c == ATTND_CODING_GZIP ||
                 c == ATTND_CODING_DEFLATE,
             "coding %d", (int)c);
  FUZZ_CHECK(examined <= 2 * (uint64_t)len + 2,
             "%llu bytes examined for a value of %zu",
             (unsigned long long)examined, len);
  free(text);
}

static void check_accept_built(const uint8_t *data, size_t size) {
  attnd_buf_t v;
  attnd_buf_init(&v);
  double w[3] = {-1, -1, -1}, any = -1;
  for (size_t i = 0; i + 1 < size && i < 64; i += 2) {
    size_t t = data[i] % N_TOKENS, p = data[i + 1] % N_PARAMS;
    if (i)
      attnd_buf_puts(&v, ",");
    attnd_buf_puts(&v, spaces[data[i] / N_TOKENS % 4]);
    attnd_buf_puts(&v, tokens[t].text);
    attnd_buf_puts(&v, params[p].text);
    attnd_buf_puts(&v, spaces[data[i + 1] / N_PARAMS % 4]);
    /* an element with no token names nothing, whatever its weight */
    if (!tokens[t].text[0])
      continue;
    if (tokens[t].coding == -2)
      any = params[p].q;
    else if (tokens[t].coding >= 0)
      w[tokens[t].coding] = params[p].q;
  }
  FUZZ_CHECK(!v.oom, "out of memory");
  const char *text = v.data ? v.data : "";
  attnd_coding_t got = attnd_coding_accept(text), want = expected(w, any);
  FUZZ_CHECK(got == want, "Accept-Encoding '%s': %s, expected %s", text,
             attnd_coding_name(got), attnd_coding_name(want));
  attnd_buf_free(&v);
}

static void check_content_encoding(const uint8_t *data, size_t size) {
  char text[64];
  size_t n = size < sizeof text - 1 ? size : sizeof text - 1;
  memcpy(text, data, n);
  text[n] = 0;
  const char *a = text;
  size_t k = strlen(text);
  while (k && (*a == ' ' || *a == '\t'))
    a++, k--;
  while (k && (a[k - 1] == ' ' || a[k - 1] == '\t'))
    k--;
  int want = -1;
  if ((k == 4 && strncasecmp(a, "gzip", 4) == 0) ||
      (k == 6 && strncasecmp(a, "x-gzip", 6) == 0))
    want = ATTND_CODING_GZIP;
  else if (k == 7 && strncasecmp(a, "deflate", 7) == 0)
    want = ATTND_CODING_DEFLATE;
  else if (k == 8 && strncasecmp(a, "identity", 8) == 0)
    want = ATTND_CODING_IDENTITY;
  int got = attnd_coding_parse(text);
  FUZZ_CHECK(got == want, "Content-Encoding '%s': %d, expected %d", text, got,
             want);
}

/* Inflates in[0..n) as `coding`, fed in pieces of the sizes cuts[] gives
 * (cycled; 0 stands for 1), into out within max. Returns its verdict. */
static int inflate_pieces(attnd_coding_t coding, const uint8_t *in, size_t n,
                          const uint8_t *cuts, size_t n_cuts, attnd_buf_t *out,
                          size_t max, char *msg, size_t msz) {
  attnd_inflate_t *z = attnd_inflate_new(coding);
  FUZZ_CHECK(z != NULL, "out of memory");
  int rc = 0;
  for (size_t at = 0, k = 0; rc == 0 && at < n; k++) {
    size_t piece = n_cuts ? cuts[k % n_cuts] : n;
    piece = piece ? piece : 1;
    piece = piece < n - at ? piece : n - at;
    rc = attnd_inflate_feed(z, in + at, piece, out, max, msg, msz);
    at += piece;
  }
  if (rc == 0)
    rc = attnd_inflate_end(z, msg, msz);
  attnd_inflate_free(z);
  return rc;
}

static void check_codec(const uint8_t *data, size_t size) {
  char msg[256];
  size_t n_cuts = size < 8 ? size : 8;
  for (int c = ATTND_CODING_GZIP; c <= ATTND_CODING_DEFLATE; c++) {
    attnd_buf_t packed, back;
    attnd_buf_init(&packed);
    attnd_buf_init(&back);
    FUZZ_CHECK(attnd_deflate((attnd_coding_t)c, data, size, &packed) == 0,
               "deflate failed");
    msg[0] = 0;
    int rc =
        inflate_pieces((attnd_coding_t)c, (const uint8_t *)packed.data,
                       packed.len, data, n_cuts, &back, size, msg, sizeof msg);
    FUZZ_CHECK(rc == 0, "%s of %zu bytes does not inflate back: %s",
               attnd_coding_name((attnd_coding_t)c), size, msg);
    FUZZ_CHECK(back.len == size &&
                   (size == 0 || memcmp(back.data, data, size) == 0),
               "%s: %zu bytes back of %zu",
               attnd_coding_name((attnd_coding_t)c), back.len, size);
    attnd_buf_free(&packed);
    attnd_buf_free(&back);

    /* the input itself as a coded body: a verdict, within the limit */
    attnd_buf_t out;
    attnd_buf_init(&out);
    msg[0] = 0;
    rc = inflate_pieces((attnd_coding_t)c, data, size, data, n_cuts, &out,
                        MAX_INFLATE, msg, sizeof msg);
    FUZZ_CHECK(out.len <= MAX_INFLATE, "inflated %zu bytes past %d", out.len,
               MAX_INFLATE);
    FUZZ_CHECK(rc == 0 || msg[0], "failed (%d) with no message", rc);
    attnd_buf_free(&out);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  check_accept_raw(data, size);
  check_accept_built(data, size);
  check_content_encoding(data, size);
  check_codec(data, size);
  return 0;
}
