/* tests/fuzz/fuzz_load.c: attnd-load's readers of what a server sends
 * (tools/load/), fed as attnd-load feeds them, on any bytes: a server
 * under test may be a proxy or a misbehaving build, and its replies are
 * hostile input like any other.
 *
 * The input is a target byte (taken modulo 5), then the target's bytes:
 *   0  a Server-Timing value (load_server_timing_parse);
 *   1  an Inference-Header-Content-Length value (load_header_length_parse);
 *   2  a reply to /v1/attention read for --verify (load_reply_tensor_as):
 *      an options byte, `rank` dimension bytes, then the body;
 *   3  a v2 reply read for --verify (load_v2_reply_tensor_as): the same,
 *      then two bytes of the header length (little-endian; 0xffff: none);
 *   4  a decode engine's reply: the body, read for its "length", its
 *      error's "code" and its "session" id (load_decode_reply_int, _str,
 *      load_decode_session_id).
 * The options byte: bits 0-1 the encoding (nested, flat, base64; 3 is
 * nested), bits 2-3 the dtype (float32, float16, bfloat16; 3 is float32),
 * bits 4-5 the rank less 1, bit 6 the tensor ("output" or "weights"); a
 * dimension byte d is a dimension of d % 16 + 1.
 * Every value is copied into a buffer of its exact size, without a
 * terminator, so that ASan sees any read past it. Properties: a reader
 * fails with a reason ("reply ..."), or succeeds with what its contract
 * says (a Server-Timing duration finite and not negative, of a metric
 * named in the text; a tensor's values of its dtype; a session id of 32
 * hex digits); libFuzzer's timeout catches a reader that does not end. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "tools/load/client.h"
#include "tools/load/decode.h"
#include "tools/load/v2.h"
#include "tools/load/verify.h"

/* A copy of data[0..size) on the heap, exactly that long (one byte for an
 * empty input, never read). */
static char *exact(const uint8_t *data, size_t size) {
  char *p = malloc(size ? size : 1);
  FUZZ_CHECK(p != NULL, "out of memory");
  if (size)
    memcpy(p, data, size);
  return p;
}

static void server_timing(const uint8_t *data, size_t size) {
  static const char *const names[3] = {"queue", "compute", "total"};
  char *v = exact(data, size);
  double d[3] = {-1, -1, -1};
  int mask = load_server_timing_parse(v, size, &d[0], &d[1], &d[2]);
  FUZZ_CHECK(mask >= 0 && mask <= 7, "mask %d", mask);
  for (int i = 0; i < 3; i++) {
    if (!(mask & 1 << i)) {
      FUZZ_CHECK(d[i] == -1, "%s written (%g) but not in the mask", names[i],
                 d[i]);
      continue;
    }
    FUZZ_CHECK(isfinite(d[i]) && d[i] >= 0, "%s duration %g", names[i], d[i]);
    FUZZ_CHECK(memmem(v, size, names[i], strlen(names[i])) != NULL,
               "%s found in a value that does not name it", names[i]);
    int64_t us = load_hist_us_of_ms(d[i]);
    FUZZ_CHECK(us >= 0 && us <= LOAD_HIST_MAX, "%g ms as %lld us", d[i],
               (long long)us);
  }
  free(v);
}

static void header_length(const uint8_t *data, size_t size) {
  char *v = exact(data, size);
  int64_t n = load_header_length_parse(v, size);
  FUZZ_CHECK(n >= 0, "length %lld", (long long)n);
  if (n != INT64_MAX) {
    /* a length is digits between whitespace, and reads back as them */
    char text[32];
    size_t a = 0, b = size;
    while (a < b && (v[a] == ' ' || v[a] == '\t'))
      a++;
    while (b > a && strchr(" \t\r\n", v[b - 1]) && v[b - 1])
      b--;
    while (a + 1 < b && v[a] == '0')
      a++;
    FUZZ_CHECK(b > a && b - a < sizeof text, "length %lld from %zu bytes",
               (long long)n, b - a);
    memcpy(text, v + a, b - a);
    text[b - a] = 0;
    FUZZ_CHECK(strspn(text, "0123456789") == b - a &&
                   strtoll(text, NULL, 10) == n,
               "length %lld from '%s'", (long long)n, text);
  }
  free(v);
}

/* Targets 2 and 3. */
static void reply_tensor(int v2, const uint8_t *data, size_t size) {
  if (size < 1)
    return;
  unsigned o = data[0];
  attnd_form_t enc = (o & 3) == 3 ? ATTND_FORM_NESTED : (attnd_form_t)(o & 3);
  attnd_dtype_t dt =
      (o >> 2 & 3) == 3 ? ATTND_DTYPE_F32 : (attnd_dtype_t)(o >> 2 & 3);
  int rank = 1 + (int)(o >> 4 & 3);
  const char *name = o & 64 ? "weights" : "output";
  data++, size--;
  if (size < (size_t)rank + (v2 ? 2 : 0))
    return;
  int64_t dim[4];
  size_t n = 1;
  for (int i = 0; i < rank; i++) {
    dim[i] = data[i] % 16 + 1;
    n *= (size_t)dim[i];
  }
  data += rank, size -= (size_t)rank;
  int64_t header_len = -1;
  if (v2) {
    unsigned h = data[0] | data[1] << 8;
    header_len = h == 0xffff ? -1 : (int64_t)h;
    data += 2, size -= 2;
  }
  char *body = exact(data, size);
  float *out = malloc(n * sizeof *out);
  FUZZ_CHECK(out != NULL, "out of memory");
  char why[256] = "";
  int rc = v2 ? load_v2_reply_tensor_as(body, size, header_len, name, dt, rank,
                                        dim, out, why, sizeof why)
              : load_reply_tensor_as(body, size, name, enc, dt, rank, dim, out,
                                     why, sizeof why);
  if (rc < 0) {
    FUZZ_CHECK(strncmp(why, "reply", 5) == 0,
               "a failure without a reason: '%s'", why);
  } else {
    FUZZ_CHECK(rc == 0, "rc %d", rc);
    /* every value one of the dtype's (a binary NaN stays one, and no NaN
     * equals itself) */
    for (size_t i = 0; i < n; i++)
      if (isnan(out[i]))
        out[i] = 0;
    char w2[256];
    FUZZ_CHECK(load_dtype_exact(dt, out, n, name, w2, sizeof w2) == 0, "%s",
               w2);
  }
  free(out);
  free(body);
}

static void decode_reply(const uint8_t *data, size_t size) {
  char *body = exact(data, size);
  int64_t len = load_decode_reply_int(body, size, "length");
  FUZZ_CHECK(len >= -1, "length %lld", (long long)len);
  char code[40];
  int cl = load_decode_reply_str(body, size, "code", code, sizeof code);
  FUZZ_CHECK(cl >= -1 && cl < (int)sizeof code, "code of %d bytes", cl);
  FUZZ_CHECK(cl < 0 || code[cl] == 0, "code not terminated");
  char id[40];
  memset(id, 'x', sizeof id);
  if (load_decode_session_id(body, size, id))
    FUZZ_CHECK(strlen(id) == 32 && strspn(id, "0123456789abcdef") == 32,
               "session id '%.39s'", id);
  free(body);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  int target = data[0] % 5;
  data++, size--;
  switch (target) {
  case 0:
    server_timing(data, size);
    break;
  case 1:
    header_length(data, size);
    break;
  case 2:
  case 3:
    reply_tensor(target == 3, data, size);
    break;
  default:
    decode_reply(data, size);
    break;
  }
  return 0;
}
