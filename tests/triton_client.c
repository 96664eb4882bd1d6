/* tests/triton_client.c: a tritonclient.http-like client. See
 * triton_client.h. */
#include "triton_client.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <zlib.h>

/* ---- a growing text ------------------------------------------------------ */

typedef struct sb {
  char *p;
  size_t len, cap;
  int oom;
} sb_t;

static void sb_add(sb_t *b, const void *s, size_t n) {
  if (b->oom)
    return;
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n + 1)
      cap *= 2;
    char *p = realloc(b->p, cap);
    if (p == NULL) {
      b->oom = 1;
      return;
    }
    b->p = p, b->cap = cap;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = 0;
}

static void sb_puts(sb_t *b, const char *s) {
  sb_add(b, s, strlen(s));
}

static void sb_printf(sb_t *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void sb_printf(sb_t *b, const char *fmt, ...) {
  char tmp[128];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  sb_add(b, tmp, n < 0 ? 0 : (size_t)n < sizeof tmp ? (size_t)n : 127);
}

/* A JSON string as python-rapidjson writes it with ensure_ascii: '"', '\\'
 * and control characters escaped (\b \f \n \r \t, else \u00XX), bytes
 * above 0x7f as \u escapes of their code points (ASCII is all tests use:
 * other bytes are written as \u00XX of the byte). */
static void sb_string(sb_t *b, const char *s) {
  sb_puts(b, "\"");
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    static const char esc[] = "btn\0fr";
    if (*p == '"' || *p == '\\') {
      char e[2] = {'\\', (char)*p};
      sb_add(b, e, 2);
    } else if (*p >= 8 && *p <= 13 && *p != 11) {
      char e[2] = {'\\', esc[*p - 8]};
      sb_add(b, e, 2);
    } else if (*p < 0x20 || *p >= 0x7f) {
      sb_printf(b, "\\u%04x", *p);
    } else {
      sb_add(b, p, 1);
    }
  }
  sb_puts(b, "\"");
}

/* ---- numbers ------------------------------------------------------------- */

size_t tc_format_double(double x, char *buf) {
  char *w = buf;
  if (isnan(x))
    return (size_t)sprintf(buf, "NaN");
  if (isinf(x))
    return (size_t)sprintf(buf, x < 0 ? "-Infinity" : "Infinity");
  if (signbit(x))
    *w++ = '-', x = -x;
  if (x == 0)
    return (size_t)(w - buf) + (size_t)sprintf(w, "0.0");
  /* pass 1: the shortest digits that read back (repr's 'r' mode) */
  char sci[40];
  for (int p = 1; p <= 17; p++) {
    snprintf(sci, sizeof sci, "%.*e", p - 1, x);
    if (strtod(sci, NULL) == x)
      break;
  }
  char digits[20];
  int nd = 0;
  const char *s = sci;
  for (; *s != 'e'; s++)
    if (*s != '.')
      digits[nd++] = *s;
  while (nd > 1 && digits[nd - 1] == '0')
    nd--;
  int e = atoi(s + 1), decpt = e + 1; /* x = 0.d1d2... · 10^decpt */
  /* pass 2: repr's layout: exponent form outside -4 < decpt <= 16 */
  if (decpt <= -4 || decpt > 16) {
    *w++ = digits[0];
    if (nd > 1) {
      *w++ = '.';
      memcpy(w, digits + 1, (size_t)nd - 1);
      w += nd - 1;
    }
    w += sprintf(w, "e%c%02d", e < 0 ? '-' : '+', abs(e));
  } else if (decpt <= 0) {
    *w++ = '0', *w++ = '.';
    for (int i = 0; i < -decpt; i++)
      *w++ = '0';
    memcpy(w, digits, (size_t)nd);
    w += nd;
  } else if (decpt >= nd) {
    memcpy(w, digits, (size_t)nd);
    w += nd;
    for (int i = nd; i < decpt; i++)
      *w++ = '0';
    *w++ = '.', *w++ = '0';
  } else {
    memcpy(w, digits, (size_t)decpt);
    w += decpt;
    *w++ = '.';
    memcpy(w, digits + decpt, (size_t)(nd - decpt));
    w += nd - decpt;
  }
  *w = 0;
  return (size_t)(w - buf);
}

static void sb_double(sb_t *b, double x) {
  char t[40];
  sb_add(b, t, tc_format_double(x, t));
}

/* IEEE half from float, rounded to nearest even (numpy's astype). */
static uint16_t f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint16_t sign = (uint16_t)(x >> 16 & 0x8000);
  int32_t exp = (int32_t)(x >> 23 & 0xff);
  uint32_t man = x & 0x7fffff;
  if (exp == 0xff)
    return sign | 0x7c00 | (man ? 0x200 : 0);
  int32_t e = exp - 127 + 15;
  if (e >= 0x1f)
    return sign | 0x7c00;
  if (e <= 0) { /* subnormal or zero */
    if (e < -10)
      return sign;
    man |= 0x800000;
    int shift = 14 - e;
    uint32_t half = man >> shift, rem = man & ((1u << shift) - 1),
             mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1)))
      half++;
    return sign | (uint16_t)half;
  }
  uint32_t half = (uint32_t)e << 10 | man >> 13, rem = man & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (half & 1)))
    half++; /* may carry into the exponent, up to infinity: right */
  return sign | (uint16_t)half;
}

static float f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = h >> 10 & 0x1f,
           man = h & 0x3ff, x;
  if (exp == 0 && man == 0) {
    x = sign;
  } else if (exp == 0) { /* subnormal: normalise */
    exp = 127 - 15 + 1;
    while (!(man & 0x400))
      man <<= 1, exp--;
    x = sign | exp << 23 | (man & 0x3ff) << 13;
  } else if (exp == 0x1f) {
    x = sign | 0x7f800000 | man << 13;
  } else {
    x = sign | (exp + 127 - 15) << 23 | man << 13;
  }
  float f;
  memcpy(&f, &x, 4);
  return f;
}

static float bf16_to_f32(uint16_t h) {
  uint32_t x = (uint32_t)h << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}

/* ---- inputs -------------------------------------------------------------- */

static const char *const dt_names[] = {"BOOL", "INT32", "INT64", "FP16",
                                       "BF16", "FP32",  "FP64"};
static const size_t dt_size[] = {1, 4, 8, 2, 2, 4, 8};

const char *tc_datatype_name(tc_datatype_t dt) {
  return dt_names[dt];
}

void tc_input_init(tc_input_t *in, const char *name, tc_datatype_t dt, int rank,
                   const int64_t *shape) {
  memset(in, 0, sizeof *in);
  snprintf(in->name, sizeof in->name, "%s", name);
  in->datatype = dt;
  in->rank = rank;
  in->n = 1;
  for (int i = 0; i < rank; i++)
    in->n *= (in->shape[i] = shape[i]);
}

static unsigned char *alloc_raw(tc_input_t *in, int binary) {
  free(in->raw);
  free(in->py);
  in->py = NULL;
  in->binary = binary;
  in->raw_len = (size_t)in->n * dt_size[in->datatype];
  in->raw = malloc(in->raw_len ? in->raw_len : 1);
  if (in->raw == NULL)
    abort();
  return in->raw;
}

void tc_input_set_floats(tc_input_t *in, const float *x, int binary) {
  unsigned char *p = alloc_raw(in, binary);
  for (int64_t i = 0; i < in->n; i++) {
    uint32_t u;
    memcpy(&u, &x[i], 4);
    uint16_t h;
    double d;
    switch (in->datatype) {
    case TC_FP16:
      h = f32_to_f16(x[i]);
      memcpy(p + 2 * i, &h, 2);
      break;
    case TC_BF16:
      h = (uint16_t)(u >> 16);
      memcpy(p + 2 * i, &h, 2);
      break;
    case TC_FP64:
      d = x[i];
      memcpy(p + 8 * i, &d, 8);
      break;
    default:
      memcpy(p + 4 * i, &x[i], 4);
    }
  }
}

void tc_input_set_doubles(tc_input_t *in, const double *x, int binary) {
  unsigned char *p = alloc_raw(in, binary);
  if (in->datatype == TC_FP64) {
    memcpy(p, x, (size_t)in->n * 8);
    return;
  }
  /* a Python list: raw holds the float32 values, py the list's */
  for (int64_t i = 0; i < in->n; i++) {
    float f = (float)x[i];
    memcpy(p + 4 * i, &f, 4);
  }
  in->py = malloc((size_t)in->n * sizeof(double) + 1);
  if (in->py == NULL)
    abort();
  memcpy(in->py, x, (size_t)in->n * sizeof(double));
}

void tc_input_set_ints(tc_input_t *in, const int64_t *x, int binary) {
  unsigned char *p = alloc_raw(in, binary);
  for (int64_t i = 0; i < in->n; i++) {
    if (in->datatype == TC_INT32) {
      int32_t v = (int32_t)x[i];
      memcpy(p + 4 * i, &v, 4);
    } else {
      memcpy(p + 8 * i, &x[i], 8);
    }
  }
}

void tc_input_set_bools(tc_input_t *in, const uint8_t *x, int binary) {
  unsigned char *p = alloc_raw(in, binary);
  for (int64_t i = 0; i < in->n; i++)
    p[i] = x[i] != 0;
}

void tc_input_fp32(tc_input_t *in, const char *name, int rank,
                   const int64_t *shape, const float *x, int binary) {
  tc_input_init(in, name, TC_FP32, rank, shape);
  tc_input_set_floats(in, x, binary);
}

void tc_input_ints(tc_input_t *in, const char *name, tc_datatype_t dt, int rank,
                   const int64_t *shape, const int64_t *x, int binary) {
  tc_input_init(in, name, dt, rank, shape);
  tc_input_set_ints(in, x, binary);
}

void tc_input_bools(tc_input_t *in, const char *name, int rank,
                    const int64_t *shape, const uint8_t *x, int binary) {
  tc_input_init(in, name, TC_BOOL, rank, shape);
  tc_input_set_bools(in, x, binary);
}

/* Element i as a double, as tolist() has it. */
static double element(const tc_input_t *in, int64_t i) {
  const unsigned char *p = in->raw + (size_t)i * dt_size[in->datatype];
  uint16_t h;
  float f;
  double d;
  int32_t i32;
  int64_t i64;
  switch (in->datatype) {
  case TC_FP16:
    memcpy(&h, p, 2);
    return f16_to_f32(h);
  case TC_BF16:
    memcpy(&h, p, 2);
    return bf16_to_f32(h);
  case TC_FP32:
    memcpy(&f, p, 4);
    return f;
  case TC_FP64:
    memcpy(&d, p, 8);
    return d;
  case TC_INT32:
    memcpy(&i32, p, 4);
    return i32;
  case TC_INT64:
    memcpy(&i64, p, 8);
    return (double)i64;
  case TC_BOOL:
    return *p;
  }
  return 0;
}

void tc_input_as_f32(const tc_input_t *in, float *out) {
  for (int64_t i = 0; i < in->n; i++)
    out[i] = (float)element(in, i);
}

void tc_input_free(tc_input_t *in) {
  free(in->raw);
  free(in->py);
  in->raw = NULL;
  in->py = NULL;
}

/* ---- the request --------------------------------------------------------- */

/* InferInput._get_tensor(), then dumps. */
static void put_input(sb_t *b, const tc_input_t *in) {
  sb_puts(b, "{\"name\":");
  sb_string(b, in->name);
  sb_puts(b, ",\"shape\":[");
  for (int i = 0; i < in->rank; i++)
    sb_printf(b, "%s%lld", i ? "," : "", (long long)in->shape[i]);
  sb_printf(b, "],\"datatype\":\"%s\"", dt_names[in->datatype]);
  if (in->binary) {
    sb_printf(b, ",\"parameters\":{\"binary_data_size\":%zu}}", in->raw_len);
    return;
  }
  sb_puts(b, ",\"data\":[");
  for (int64_t i = 0; i < in->n; i++) {
    if (i)
      sb_puts(b, ",");
    if (in->py) {
      sb_double(b, in->py[i]);
      continue;
    }
    int64_t v;
    switch (in->datatype) {
    case TC_BOOL:
      sb_puts(b, in->raw[i] ? "true" : "false");
      break;
    case TC_INT32:
    case TC_INT64:
      if (in->datatype == TC_INT32) {
        int32_t v32;
        memcpy(&v32, in->raw + 4 * i, 4);
        v = v32;
      } else {
        memcpy(&v, in->raw + 8 * i, 8);
      }
      sb_printf(b, "%lld", (long long)v);
      break;
    default:
      sb_double(b, element(in, i));
    }
  }
  sb_puts(b, "]}");
}

int tc_request_body(const tc_input_t *inputs, size_t n_inputs,
                    const tc_output_t *outputs, size_t n_outputs,
                    const tc_param_t *params, size_t n_params,
                    const char *request_id, char **body, size_t *len,
                    long *json_len) {
  sb_t b = {0};
  sb_puts(&b, "{");
  if (request_id && *request_id) {
    sb_puts(&b, "\"id\":");
    sb_string(&b, request_id);
    sb_puts(&b, ",");
  }
  sb_puts(&b, "\"inputs\":[");
  for (size_t i = 0; i < n_inputs; i++) {
    if (i)
      sb_puts(&b, ",");
    put_input(&b, &inputs[i]);
  }
  sb_puts(&b, "]");
  if (n_outputs) {
    sb_puts(&b, ",\"outputs\":[");
    for (size_t i = 0; i < n_outputs; i++) {
      sb_puts(&b, i ? ",{\"name\":" : "{\"name\":");
      sb_string(&b, outputs[i].name);
      sb_printf(&b, ",\"parameters\":{\"binary_data\":%s}}",
                outputs[i].binary ? "true" : "false");
    }
    sb_puts(&b, "]");
  }
  if (n_outputs == 0 || n_params) {
    sb_puts(&b, ",\"parameters\":{");
    int first = 1;
    if (n_outputs == 0) {
      sb_puts(&b, "\"binary_data_output\":true");
      first = 0;
    }
    for (size_t i = 0; i < n_params; i++, first = 0) {
      const tc_param_t *p = &params[i];
      if (!first)
        sb_puts(&b, ",");
      sb_string(&b, p->key);
      sb_puts(&b, ":");
      switch (p->type) {
      case TC_P_BOOL:
        sb_puts(&b, p->i ? "true" : "false");
        break;
      case TC_P_INT:
        sb_printf(&b, "%lld", (long long)p->i);
        break;
      case TC_P_FLOAT:
        sb_double(&b, p->f);
        break;
      case TC_P_STRING:
        sb_string(&b, p->s);
      }
    }
    sb_puts(&b, "}");
  }
  sb_puts(&b, "}");
  *json_len = -1;
  size_t json = b.len;
  for (size_t i = 0; i < n_inputs; i++)
    if (inputs[i].binary) {
      *json_len = (long)json;
      sb_add(&b, inputs[i].raw, inputs[i].raw_len);
    }
  if (b.oom) {
    free(b.p);
    return -1;
  }
  *body = b.p;
  *len = b.len;
  return 0;
}

/* ---- codings ------------------------------------------------------------- */

/* zlib's windowBits for each coding. */
static int window_bits(tc_coding_t c) {
  return c == TC_GZIP ? 15 + 16 : c == TC_DEFLATE ? 15 : -15;
}

int tc_compress(tc_coding_t coding, const void *in, size_t n,
                unsigned char **out, size_t *out_len) {
  z_stream z = {0};
  /* gzip.compress's level 9; zlib.compress's default level */
  int level = coding == TC_GZIP ? 9 : Z_DEFAULT_COMPRESSION;
  if (deflateInit2(&z, level, Z_DEFLATED, window_bits(coding), 8,
                   Z_DEFAULT_STRATEGY) != Z_OK)
    return -1;
  size_t cap = deflateBound(&z, (uLong)n) + 64;
  unsigned char *o = malloc(cap);
  if (o == NULL) {
    deflateEnd(&z);
    return -1;
  }
  z.next_in = (Bytef *)in;
  z.avail_in = (uInt)n;
  z.next_out = o;
  z.avail_out = (uInt)cap;
  int rc = deflate(&z, Z_FINISH);
  *out_len = z.total_out;
  deflateEnd(&z);
  if (rc != Z_STREAM_END) {
    free(o);
    return -1;
  }
  *out = o;
  return 0;
}

int tc_decompress(tc_coding_t coding, const void *in, size_t n,
                  unsigned char **out, size_t *out_len) {
  z_stream z = {0};
  if (inflateInit2(&z, window_bits(coding)) != Z_OK)
    return -1;
  sb_t b = {0};
  unsigned char chunk[65536];
  z.next_in = (Bytef *)in;
  z.avail_in = (uInt)n;
  int rc;
  do {
    z.next_out = chunk;
    z.avail_out = sizeof chunk;
    rc = inflate(&z, Z_NO_FLUSH);
    sb_add(&b, chunk, sizeof chunk - z.avail_out);
  } while (rc == Z_OK && (z.avail_in > 0 || z.avail_out == 0));
  inflateEnd(&z);
  /* the whole input, one stream: as gzip.decompress and zlib.decompress */
  if (rc != Z_STREAM_END || z.avail_in != 0 || b.oom) {
    free(b.p);
    return -1;
  }
  sb_add(&b, "", 0);
  *out = (unsigned char *)b.p;
  *out_len = b.len;
  return 0;
}

/* ---- the exchange -------------------------------------------------------- */

void tc_client_init(tc_client_t *c, int port) {
  c->curl = curl_easy_init();
  c->port = port;
  if (c->curl == NULL)
    abort();
}

void tc_client_free(tc_client_t *c) {
  if (c->curl)
    curl_easy_cleanup(c->curl);
  c->curl = NULL;
}

typedef struct sink {
  sb_t head, body;
} sink_t;

static size_t on_body(char *p, size_t size, size_t nmemb, void *ud) {
  sb_add(&((sink_t *)ud)->body, p, size * nmemb);
  return size * nmemb;
}

static size_t on_header(char *p, size_t size, size_t nmemb, void *ud) {
  sink_t *k = ud;
  size_t n = size * nmemb;
  if (n >= 5 && strncmp(p, "HTTP/", 5) == 0) /* a new reply: the last wins */
    k->head.len = 0;
  sb_add(&k->head, p, n);
  return n;
}

const char *tc_result_header(const tc_result_t *r, const char *name, char *buf,
                             size_t n) {
  size_t k = strlen(name);
  for (const char *l = r->head; l && *l;) {
    const char *end = strchr(l, '\n');
    if (strncasecmp(l, name, k) == 0 && l[k] == ':') {
      const char *v = l + k + 1;
      while (*v == ' ' || *v == '\t')
        v++;
      size_t vn = (size_t)((end ? end : v + strlen(v)) - v);
      while (vn && (v[vn - 1] == '\r' || v[vn - 1] == ' '))
        vn--;
      snprintf(buf, n, "%.*s", (int)vn, v);
      return buf;
    }
    l = end ? end + 1 : NULL;
  }
  return NULL;
}

/* Appends the reply to ATTND_TEST_REPLIES as tests/server_harness.c's
 * record_reply does: {"method", "path", "status", "content_type",
 * "header_length"?, "body"?}, the body (decompressed) kept when it is
 * JSON or the JSON header of a binary reply. Failures are ignored. */
static void record(const char *path, const tc_result_t *r) {
  const char *file = getenv("ATTND_TEST_REPLIES");
  char ct[128];
  if (file == NULL || *file == 0 || r->status == 0)
    return;
  const char *type = tc_result_header(r, "Content-Type", ct, sizeof ct);
  json_t *line =
      json_pack("{s:s,s:s,s:I,s:s?}", "method", "POST", "path", path, "status",
                (json_int_t)r->status, "content_type", type);
  if (line == NULL)
    return;
  size_t n = r->body_len;
  int is_json = type && strncasecmp(type, "application/json", 16) == 0;
  if (r->header_length >= 0) {
    json_object_set_new(line, "header_length", json_integer(r->header_length));
    if (!is_json && (size_t)r->header_length <= n)
      n = (size_t)r->header_length, is_json = 1;
  }
  if (is_json && r->body) {
    json_t *body = json_stringn((const char *)r->body, n);
    json_object_set_new(line, body ? "body" : "body_not_utf8",
                        body ? body : json_true());
  }
  char *txt = json_dumps(line, JSON_COMPACT);
  json_decref(line);
  if (txt == NULL)
    return;
  size_t len = strlen(txt);
  txt[len] = '\n';
  int fd = open(file, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd >= 0) {
    ssize_t w = write(fd, txt, len + 1);
    (void)w;
    close(fd);
  }
  free(txt);
}

static int failed(tc_result_t *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int failed(tc_result_t *r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->error, sizeof r->error, fmt, ap);
  va_end(ap);
  return -1;
}

/* _get_error, then InferResult.from_response_body. */
static int read_reply(tc_result_t *r) {
  char v[64];
  if (r->status != 200) {
    json_error_t je;
    json_t *e = json_loadb((const char *)r->wire, r->wire_len, 0, &je);
    const json_t *msg = json_object_get(e, "error");
    int ok = json_is_string(msg);
    if (ok)
      snprintf(r->error, sizeof r->error, "%s", json_string_value(msg));
    else
      snprintf(r->error, sizeof r->error,
               "status %ld, and the body is not {\"error\": \"<string>\"}: "
               "%.300s",
               r->status, (const char *)r->wire);
    json_decref(e);
    return -1;
  }
  const char *ce = tc_result_header(r, "Content-Encoding", v, sizeof v);
  if (ce && strcmp(ce, "gzip") != 0 && strcmp(ce, "deflate") != 0)
    return failed(r, "Content-Encoding %s is not gzip or deflate", ce);
  if (ce) {
    if (tc_decompress(strcmp(ce, "gzip") == 0 ? TC_GZIP : TC_DEFLATE, r->wire,
                      r->wire_len, &r->body, &r->body_len) < 0)
      return failed(r, "the %s reply (%zu bytes) does not decompress as %s", ce,
                    r->wire_len,
                    strcmp(ce, "gzip") == 0 ? "gzip.decompress"
                                            : "zlib.decompress");
  } else {
    r->body = malloc(r->wire_len + 1);
    if (r->body == NULL)
      return failed(r, "out of memory");
    memcpy(r->body, r->wire, r->wire_len);
    r->body[r->wire_len] = 0;
    r->body_len = r->wire_len;
  }
  size_t json = r->body_len;
  if (tc_result_header(r, "Inference-Header-Content-Length", v, sizeof v)) {
    char *end;
    r->header_length = strtol(v, &end, 10);
    if (*end || r->header_length < 0 || (size_t)r->header_length > json)
      return failed(r,
                    "Inference-Header-Content-Length '%s' is not a length "
                    "within the %zu byte body",
                    v, r->body_len);
    json = (size_t)r->header_length;
  }
  json_error_t je;
  r->json = json_loadb((const char *)r->body, json, 0, &je);
  if (r->json == NULL)
    return failed(r, "the reply's JSON does not parse: %s: %.200s", je.text,
                  (const char *)r->body);
  return 0;
}

int tc_infer(tc_client_t *c, const char *model, const tc_input_t *inputs,
             size_t n_inputs, const tc_output_t *outputs, size_t n_outputs,
             const tc_param_t *params, size_t n_params, const tc_options_t *opt,
             tc_result_t *r) {
  static const tc_options_t none = {0};
  memset(r, 0, sizeof *r);
  r->header_length = -1;
  if (opt == NULL)
    opt = &none;
  char *body;
  size_t len;
  long json_len;
  if (tc_request_body(inputs, n_inputs, outputs, n_outputs, params, n_params,
                      opt->request_id, &body, &len, &json_len) < 0)
    return failed(r, "out of memory");
  if (opt->request_compression != TC_IDENTITY) {
    unsigned char *z;
    size_t zn;
    if (tc_compress(opt->request_compression, body, len, &z, &zn) < 0) {
      free(body);
      return failed(r, "cannot compress the request");
    }
    free(body);
    body = (char *)z;
    len = zn;
  }
  char path[512], url[600], line[128];
  if (opt->model_version && *opt->model_version)
    snprintf(path, sizeof path, "/v2/models/%s/versions/%s/infer", model,
             opt->model_version);
  else
    snprintf(path, sizeof path, "/v2/models/%s/infer", model);
  snprintf(url, sizeof url, "http://127.0.0.1:%d%s", c->port, path);

  CURL *h = c->curl;
  curl_easy_reset(h); /* options only: the connection stays */
  sink_t k = {0};
  curl_easy_setopt(h, CURLOPT_URL, url);
  curl_easy_setopt(h, CURLOPT_PROXY, "");
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS,
                   opt->timeout_ms > 0 ? opt->timeout_ms : 30000L);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &k);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &k);
  curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
  curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
  struct curl_slist *hl = curl_slist_append(NULL, "Content-Type:");
  hl = curl_slist_append(hl, "Expect:");
  if (json_len >= 0) {
    snprintf(line, sizeof line, "inference-header-content-length: %ld",
             json_len);
    hl = curl_slist_append(hl, line);
  }
  static const char *const names[] = {NULL, "gzip", "deflate", "deflate"};
  if (opt->request_compression != TC_IDENTITY) {
    snprintf(line, sizeof line, "Content-Encoding: %s",
             names[opt->request_compression]);
    hl = curl_slist_append(hl, line);
  }
  if (opt->response_compression != TC_IDENTITY) {
    snprintf(line, sizeof line, "Accept-Encoding: %s",
             names[opt->response_compression]);
    hl = curl_slist_append(hl, line);
  }
  for (int i = 0; opt->headers && opt->headers[i]; i++)
    hl = curl_slist_append(hl, opt->headers[i]);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
  char errbuf[CURL_ERROR_SIZE] = "";
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
  CURLcode rc = curl_easy_perform(h);
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r->status);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, NULL);
  curl_slist_free_all(hl);
  free(body);
  sb_add(&k.head, "", 0);
  sb_add(&k.body, "", 0);
  r->head = k.head.p;
  r->head_len = k.head.len;
  r->wire = (unsigned char *)k.body.p;
  r->wire_len = k.body.len;
  if (rc != CURLE_OK || r->status == 0)
    return failed(r, "no reply: %s: %s", curl_easy_strerror(rc), errbuf);
  int ok = read_reply(r);
  record(path, r);
  return ok;
}

/* A JSON string's value, "" for anything else. */
static const char *str_of(const json_t *v) {
  return json_is_string(v) ? json_string_value(v) : "";
}

int tc_result_output(tc_result_t *r, const char *name, int *rank,
                     int64_t *shape, float **data, int *binary) {
  const json_t *outs = json_object_get(r->json, "outputs");
  size_t at = 0, i;
  const json_t *o = NULL;
  /* the binary outputs' offsets: their sizes summed in order */
  for (i = 0; i < json_array_size(outs); i++) {
    const json_t *x = json_array_get(outs, i);
    const json_t *size =
        json_object_get(json_object_get(x, "parameters"), "binary_data_size");
    if (strcmp(str_of(json_object_get(x, "name")), name) == 0) {
      o = x;
      break;
    }
    if (size)
      at += (size_t)json_integer_value(size);
  }
  if (o == NULL)
    return failed(r, "the reply has no output named %s", name);
  const char *dt = str_of(json_object_get(o, "datatype"));
  const int f16 = strcmp(dt, "FP16") == 0, bf16 = strcmp(dt, "BF16") == 0;
  const size_t esize = f16 || bf16 ? 2 : 4;
  if (!f16 && !bf16 && strcmp(dt, "FP32") != 0)
    return failed(r, "output %s is %s, not FP32, FP16 or BF16", name, dt);
  const json_t *sh = json_object_get(o, "shape");
  size_t n = 1;
  *rank = (int)json_array_size(sh);
  for (int d = 0; d < *rank && d < 8; d++)
    n *= (size_t)(shape[d] = json_integer_value(json_array_get(sh, (size_t)d)));
  const json_t *size =
      json_object_get(json_object_get(o, "parameters"), "binary_data_size");
  float *x = malloc(n * sizeof(float) + 1);
  if (x == NULL)
    return failed(r, "out of memory");
  if (size) {
    size_t bytes = (size_t)json_integer_value(size);
    size_t base = (size_t)r->header_length;
    if (r->header_length < 0 || bytes != n * esize ||
        base + at + bytes > r->body_len) {
      free(x);
      return failed(r,
                    "output %s: binary_data_size %zu at %zu of the %zu bytes "
                    "after the JSON; shape needs %zu",
                    name, bytes, at, r->body_len - base, n * esize);
    }
    const unsigned char *p = r->body + base + at;
    if (esize == 4)
      memcpy(x, p, bytes);
    for (size_t k2 = 0; esize == 2 && k2 < n; k2++) {
      uint16_t h = (uint16_t)(p[2 * k2] | p[2 * k2 + 1] << 8);
      x[k2] = f16 ? f16_to_f32(h) : bf16_to_f32(h);
    }
  } else {
    const json_t *d = json_object_get(o, "data");
    if (json_array_size(d) != n) {
      free(x);
      return failed(r, "output %s: %zu data for %zu elements", name,
                    json_array_size(d), n);
    }
    for (size_t k2 = 0; k2 < n; k2++)
      x[k2] = (float)json_number_value(json_array_get(d, k2));
  }
  *binary = size != NULL;
  *data = x;
  return 0;
}

void tc_result_free(tc_result_t *r) {
  free(r->head);
  free(r->wire);
  free(r->body);
  json_decref(r->json);
  memset(r, 0, sizeof *r);
}
