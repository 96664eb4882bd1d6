/* codec/deflate.c: gzip and deflate bodies with zlib. See
 * deflate.h. */
#include "deflate.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>

#include "util.h"

static const char *const coding_names[] = {"identity", "gzip", "deflate"};

const char *attnd_coding_name(attnd_coding_t c) {
  return coding_names[c];
}

/* s[0..n) with surrounding spaces and tabs trimmed. */
static const char *trim(const char *s, size_t *n) {
  while (*n && (*s == ' ' || *s == '\t'))
    s++, (*n)--;
  while (*n && (s[*n - 1] == ' ' || s[*n - 1] == '\t'))
    (*n)--;
  return s;
}

/* The coding named by t[0..n), or -1; "*" is -2. */
static int coding_token(const char *t, size_t n) {
  if (n == 1 && *t == '*')
    return -2;
  if ((n == 4 && strncasecmp(t, "gzip", 4) == 0) ||
      (n == 6 && strncasecmp(t, "x-gzip", 6) == 0))
    return ATTND_CODING_GZIP;
  if (n == 7 && strncasecmp(t, "deflate", 7) == 0)
    return ATTND_CODING_DEFLATE;
  if (n == 8 && strncasecmp(t, "identity", 8) == 0)
    return ATTND_CODING_IDENTITY;
  return -1;
}

int attnd_coding_parse(const char *value) {
  size_t n = strlen(value);
  const char *t = trim(value, &n);
  int c = coding_token(t, n);
  return c == -2 ? -1 : c;
}

/* The weight of one Accept-Encoding element's parameters p[0..n)
 * (";q=0.5"): 1 when none is given, 0 for a value it cannot read. */
static double weight(const char *p, size_t n) {
  while (n) {
    size_t k = 0;
    while (k < n && p[k] != ';')
      k++;
    size_t m = k;
    const char *a = trim(p, &m);
    if (m >= 2 && (a[0] | 0x20) == 'q' && a[1] == '=') {
      char num[8] = "";
      size_t len = m - 2 < sizeof num - 1 ? m - 2 : sizeof num - 1;
      memcpy(num, a + 2, len);
      char *end;
      double q = strtod(num, &end);
      return *end == 0 && q >= 0 && q <= 1 ? q : 0;
    }
    p += k < n ? k + 1 : k;
    n -= k < n ? k + 1 : k;
  }
  return 1;
}

_Thread_local uint64_t attnd__accept_examined;

attnd_coding_t attnd_coding_accept(const char *value) {
  double w[3] = {-1, -1, -1}, any = -1; /* -1: not named */
  for (const char *s = value; s && *s;) {
    /* the element's coding ends at its first ';' or ',', the element at
     * the ',' after: two searches that each stop inside the element (a
     * search for ';' alone ran to the value's end for every element) */
    size_t k = strcspn(s, ",;");
    size_t n = k + strcspn(s + k, ",");
    attnd__accept_examined += n + 1;
    size_t tn = k;
    const char *t = trim(s, &tn);
    int c = coding_token(t, tn);
    double q = weight(s + k, n - k);
    if (c == -2)
      any = q;
    else if (c >= 0)
      w[c] = q;
    s += n;
    if (*s == ',')
      s++;
  }
  for (int c = ATTND_CODING_GZIP; c <= ATTND_CODING_DEFLATE; c++)
    if (w[c] > 0 || (w[c] < 0 && any > 0))
      return (attnd_coding_t)c;
  return ATTND_CODING_IDENTITY;
}

/* ---- inflating ----------------------------------------------------------- */

struct attnd_inflate {
  z_stream z;
  attnd_coding_t coding;
  int started; /* inflateInit2 done (deflate waits for its first 2 bytes) */
  unsigned char head[2];
  size_t n_head;
  int ended;  /* the stream (or the last gzip member) ended */
  int failed; /* the error returned again by every later call */
  char why[160];
  /* the input bytes of the gzip members before this one: inflateReset
   * zeroes total_in, and the byte an error names counts from the body's
   * start */
  uint64_t done;
};

attnd_inflate_t *attnd_inflate_new(attnd_coding_t coding) {
  attnd_inflate_t *z = calloc(1, sizeof *z);
  if (z)
    z->coding = coding;
  return z;
}

void attnd_inflate_free(attnd_inflate_t *z) {
  if (z && z->started)
    inflateEnd(&z->z);
  free(z);
}

static int fail(attnd_inflate_t *z, int rc, char *msg, size_t msz,
                const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static int fail(attnd_inflate_t *z, int rc, char *msg, size_t msz,
                const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(z->why, sizeof z->why, fmt, ap);
  va_end(ap);
  z->failed = rc;
  snprintf(msg, msz, "%s", z->why);
  return rc;
}

/* Starts zlib for the coding; deflate is the zlib format when its first two
 * bytes are a zlib header (RFC 1950 2.2: method 8, check bits), else a raw
 * deflate stream. */
static int start(attnd_inflate_t *z, char *msg, size_t msz) {
  int bits = 15 + 16; /* gzip */
  if (z->coding == ATTND_CODING_DEFLATE) {
    unsigned cmf = z->head[0], flg = z->head[1];
    bits = (cmf & 0x0f) == 8 && (cmf >> 4) <= 7 && (cmf * 256 + flg) % 31 == 0
               ? 15
               : -15;
  }
  if (inflateInit2(&z->z, bits) != Z_OK)
    return fail(z, -3, msg, msz, "out of memory to inflate the body");
  z->started = 1;
  return 0;
}

size_t attnd_inflate_in_bound(size_t max) {
  return max + max / 8 + max / 64 + 64;
}

/* Runs zlib over in[0..n) into out, within max. */
static int run(attnd_inflate_t *z, const unsigned char *in, size_t n,
               attnd_buf_t *out, size_t max, char *msg, size_t msz) {
  z->z.next_in = (unsigned char *)in;
  z->z.avail_in = (uInt)n;
  unsigned char probe;
  while (z->z.avail_in > 0) {
    if (z->ended) {
      /* gzip may hold several members (RFC 1952 2.2); deflate one stream */
      if (z->coding != ATTND_CODING_GZIP)
        return fail(z, -1, msg, msz,
                    "the deflate stream ends %zu bytes before the body "
                    "does",
                    (size_t)z->z.avail_in);
      z->done += z->z.total_in;
      inflateReset(&z->z);
      z->ended = 0;
    }
    size_t room = max - out->len, chunk = out->len < 65536 ? 65536 : out->len;
    chunk = chunk < room ? chunk : room;
    chunk = chunk < ((size_t)1 << 30) ? chunk : ((size_t)1 << 30);
    if (chunk && attnd_buf_reserve(out, chunk) < 0)
      return fail(z, -3, msg, msz, "out of memory to inflate the body");
    /* with no room left, one byte more of output is what tells */
    z->z.next_out = chunk ? (unsigned char *)out->data + out->len : &probe;
    z->z.avail_out = chunk ? (uInt)chunk : 1;
    uInt before = z->z.avail_out;
    int rc = inflate(&z->z, Z_NO_FLUSH);
    size_t made = before - z->z.avail_out;
    if (!chunk && made)
      return fail(z, -2, msg, msz, "the body inflates past %zu bytes", max);
    out->len += made;
    if (out->data)
      out->data[out->len] = 0;
    if (z->done + z->z.total_in > attnd_inflate_in_bound(max))
      return fail(z, -2, msg, msz,
                  "the %s data passes %zu bytes, more than any that "
                  "inflates to at most %zu bytes needs",
                  attnd_coding_name(z->coding), attnd_inflate_in_bound(max),
                  max);
    if (rc == Z_STREAM_END) {
      z->ended = 1;
    } else if (rc == Z_MEM_ERROR) {
      return fail(z, -3, msg, msz, "out of memory to inflate the body");
    } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
      return fail(z, -1, msg, msz,
                  "the body is not valid %s data (at byte %llu): %s",
                  attnd_coding_name(z->coding),
                  (unsigned long long)(z->done + z->z.total_in),
                  z->z.msg ? z->z.msg : "corrupt");
    }
  }
  return 0;
}

int attnd_inflate_feed(attnd_inflate_t *z, const void *in, size_t n,
                       attnd_buf_t *out, size_t max, char *msg, size_t msz) {
  const unsigned char *p = in;
  if (z->failed)
    return snprintf(msg, msz, "%s", z->why), z->failed;
  if (!z->started) {
    if (z->coding == ATTND_CODING_DEFLATE && z->n_head < 2) {
      while (n && z->n_head < 2)
        z->head[z->n_head++] = *p++, n--;
      if (z->n_head < 2)
        return 0;
    }
    if (start(z, msg, msz) < 0)
      return z->failed;
    if (z->n_head && run(z, z->head, z->n_head, out, max, msg, msz) < 0)
      return z->failed;
  }
  while (n) { /* zlib counts in uInt */
    size_t k = n < ((size_t)1 << 30) ? n : ((size_t)1 << 30);
    if (run(z, p, k, out, max, msg, msz) < 0)
      return z->failed;
    p += k;
    n -= k;
  }
  return 0;
}

int attnd_inflate_end(const attnd_inflate_t *z, char *msg, size_t msz) {
  if (z->failed)
    return snprintf(msg, msz, "%s", z->why), -1;
  if (!z->ended)
    return snprintf(msg, msz,
                    "the %s body ends before its stream does (%llu bytes "
                    "read)",
                    attnd_coding_name(z->coding),
                    (unsigned long long)(z->started ? z->done + z->z.total_in
                                                    : z->n_head)),
           -1;
  return 0;
}

/* ---- deflating ----------------------------------------------------------- */

int attnd_deflate(attnd_coding_t coding, const void *in, size_t n,
                  attnd_buf_t *out) {
  enum { STEP = 1 << 30 }; /* zlib counts in uInt */
  z_stream z = {0};
  if (out->oom || deflateInit2(&z, 1, Z_DEFLATED,
                               coding == ATTND_CODING_GZIP ? 15 + 16 : 15, 8,
                               Z_DEFAULT_STRATEGY) != Z_OK) {
    out->oom = 1;
    return -1;
  }
  const unsigned char *p = in;
  size_t left = n;
  int flush;
  do { /* zlib's loop: input in steps, output until a call leaves room */
    size_t k = left < STEP ? left : STEP;
    z.next_in = (unsigned char *)p;
    z.avail_in = (uInt)k;
    p += k;
    left -= k;
    flush = left ? Z_NO_FLUSH : Z_FINISH;
    do {
      size_t room = deflateBound(&z, (uLong)k) + 64;
      room = room < STEP ? room : STEP;
      if (attnd_buf_reserve(out, room) < 0) {
        deflateEnd(&z);
        return -1;
      }
      z.next_out = (unsigned char *)out->data + out->len;
      z.avail_out = (uInt)room;
      deflate(&z, flush); /* cannot fail with a valid stream and room */
      out->len += room - z.avail_out;
    } while (z.avail_out == 0);
  } while (flush != Z_FINISH);
  deflateEnd(&z);
  out->data[out->len] = 0;
  return 0;
}
