/* codec/buf.c: the growable text buffer and the JSON tensor writer.
 * See buf.h. */
#include "buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base64.h"
#include "mem.h"
#include "number.h"
#include "util.h"

/* ---- growable text buffer ------------------------------------------------ */

void attnd_buf_init(attnd_buf_t *b) {
  b->data = NULL;
  b->len = b->cap = 0;
  b->oom = b->lent = 0;
}

void attnd_buf_init_in(attnd_buf_t *b, char *mem, size_t cap) {
  attnd_buf_init(b);
  b->data = mem;
  b->cap = cap;
  b->lent = 1;
}

void attnd_buf_free(attnd_buf_t *b) {
  if (!b->lent)
    attnd_mem_free(b->data);
  attnd_buf_init(b);
}

int attnd_buf_reserve(attnd_buf_t *b, size_t n) {
  if (b->oom)
    return -1;
  if (b->cap > b->len && n < b->cap - b->len)
    return 0;
  size_t need = b->len + n + 1, cap = b->cap ? b->cap : 64;
  if (need <= n) { /* overflow */
    b->oom = 1;
    return -1;
  }
  while (cap < need) {
    if (cap > SIZE_MAX / 2) {
      cap = need;
      break;
    }
    cap *= 2;
  }
  char *data = b->lent ? attnd_mem_alloc(cap) : attnd_mem_realloc(b->data, cap);
  if (!data) {
    b->oom = 1;
    return -1;
  }
  if (b->lent && b->len)
    memcpy(data, b->data, b->len + 1);
  b->data = data;
  b->cap = cap;
  b->lent = 0;
  return 0;
}

void attnd_buf_append(attnd_buf_t *b, const char *s, size_t n) {
  if (n == 0 || attnd_buf_reserve(b, n) < 0)
    return;
  memcpy(b->data + b->len, s, n);
  b->len += n;
  b->data[b->len] = '\0';
}

void attnd_buf_puts(attnd_buf_t *b, const char *s) {
  attnd_buf_append(b, s, strlen(s));
}

/* Appends "[x0,x1,...]" for x[0..n), formatting in place. */
static void put_row(attnd_buf_t *b, const float *x, size_t n) {
  if (n > (SIZE_MAX - ATTND_FLOAT_WRITE_MAX - 2) / (ATTND_FLOAT_TEXT_MAX + 1)) {
    b->oom = 1;
    return;
  }
  if (attnd_buf_reserve(b, n * (ATTND_FLOAT_TEXT_MAX + 1) +
                               ATTND_FLOAT_WRITE_MAX + 2) < 0)
    return;
  char *p = b->data + b->len;
  *p++ = '[';
  p = attnd_floats_put(x, n, p);
  *p++ = ']';
  *p = '\0';
  b->len = (size_t)(p - b->data);
}

/* Appends the sub-tensor of shape dim[level..rank) whose leaves start at
 * *x, and advances *x past them. */
static void put_level(attnd_buf_t *b, const float **x, int level, int rank,
                      const int64_t *dim) {
  size_t k = (size_t)dim[level];
  if (level == rank - 1) {
    put_row(b, *x, k);
    *x += k;
    return;
  }
  attnd_buf_append(b, "[", 1);
  for (size_t i = 0; i < k; i++) {
    if (i)
      attnd_buf_append(b, ",", 1);
    put_level(b, x, level + 1, rank, dim);
  }
  attnd_buf_append(b, "]", 1);
}

void attnd_buf_floats(attnd_buf_t *b, const float *x, size_t n, int rank,
                      const int64_t *dim) {
  if (rank == 0)
    put_row(b, x, n);
  else
    put_level(b, &x, 0, rank, dim);
}

void attnd_buf_base64(attnd_buf_t *b, const void *src, size_t n) {
  size_t len = attnd_b64_encoded_len(n);
  if (len == 0 || attnd_buf_reserve(b, len) < 0)
    return;
  attnd_b64_encode(src, n, b->data + b->len);
  b->len += len;
  b->data[b->len] = '\0';
}

/* Appends the int32 sub-tensor of shape dim[level..rank) at *x (rank 0:
 * n integers in one row), and advances *x past it. */
static void put_ints(attnd_buf_t *b, const int32_t **x, int level, int rank,
                     const int64_t *dim, size_t n) {
  size_t k = rank ? (size_t)dim[level] : n;
  attnd_buf_append(b, "[", 1);
  for (size_t i = 0; i < k; i++) {
    if (i)
      attnd_buf_append(b, ",", 1);
    if (rank && level < rank - 1) {
      put_ints(b, x, level + 1, rank, dim, 0);
    } else {
      char num[16];
      attnd_buf_append(b, num, (size_t)snprintf(num, sizeof num, "%d", **x));
      (*x)++;
    }
  }
  attnd_buf_append(b, "]", 1);
}

/* The base64 text of x[0..n) as t's bytes: converted a piece at a time,
 * each piece a whole number of base64 groups (3 bytes), so that their
 * texts join. */
static void put_base64_as(attnd_buf_t *b, attnd_dtype_t t, const float *x,
                          size_t n) {
  enum { PIECE = 3072 }; /* 2·PIECE bytes: a multiple of 3 */
  unsigned char bytes[2 * PIECE];
  if (t == ATTND_DTYPE_F32) {
    attnd_buf_base64(b, x, n * sizeof(float));
    return;
  }
  for (size_t i = 0; i < n; i += PIECE) {
    size_t k = n - i < PIECE ? n - i : PIECE;
    attnd_dtype_pack(t, x + i, k, bytes);
    attnd_buf_base64(b, bytes, 2 * k);
  }
}

/* A float tensor of dtype t, or an int32 one with i32 (attnd_buf_tensor
 * and its twins). */
static void put_tensor(attnd_buf_t *b, attnd_form_t form, const void *x,
                       int i32, attnd_dtype_t t, int rank, const int64_t *dim) {
  const float *f = x;
  const int32_t *i = x;
  size_t n = 1;
  for (int d = 0; d < rank; d++)
    n *= (size_t)dim[d];
  if (form == ATTND_FORM_NESTED) {
    if (i32)
      put_ints(b, &i, 0, rank, dim, n);
    else
      attnd_buf_floats(b, f, n, rank, dim);
    return;
  }
  char shape[160];
  size_t k = attnd_shape_text(shape, sizeof shape, rank, dim, ",");
  attnd_buf_puts(b, "{\"shape\":");
  attnd_buf_append(b, shape, k);
  if (form == ATTND_FORM_FLAT) {
    attnd_buf_puts(b, ",\"data\":");
    if (i32)
      put_ints(b, &i, 0, 0, NULL, n);
    else
      attnd_buf_floats(b, f, n, 0, NULL);
  } else {
    static const char *const names[] = {
        [ATTND_DTYPE_F32] = ",\"dtype\":\"float32\",\"base64\":\"",
        [ATTND_DTYPE_F16] = ",\"dtype\":\"float16\",\"base64\":\"",
        [ATTND_DTYPE_BF16] = ",\"dtype\":\"bfloat16\",\"base64\":\""};
    attnd_buf_puts(b, i32 ? ",\"dtype\":\"int32\",\"base64\":\"" : names[t]);
    if (i32)
      attnd_buf_base64(b, x, n * 4);
    else
      put_base64_as(b, t, f, n);
    attnd_buf_puts(b, "\"");
  }
  attnd_buf_puts(b, "}");
}

void attnd_buf_tensor(attnd_buf_t *b, attnd_form_t form, const float *x,
                      int rank, const int64_t *dim) {
  put_tensor(b, form, x, 0, ATTND_DTYPE_F32, rank, dim);
}

void attnd_buf_tensor_as(attnd_buf_t *b, attnd_form_t form, attnd_dtype_t dtype,
                         const float *x, int rank, const int64_t *dim) {
  put_tensor(b, form, x, 0, dtype, rank, dim);
}

void attnd_buf_tensor_i32(attnd_buf_t *b, attnd_form_t form, const int32_t *x,
                          int rank, const int64_t *dim) {
  put_tensor(b, form, x, 1, ATTND_DTYPE_F32, rank, dim);
}

void attnd_buf_printf(attnd_buf_t *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n <= 0 || attnd_buf_reserve(b, (size_t)n) < 0)
    return;
  va_start(ap, fmt);
  vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

/* ---- JSON strings -------------------------------------------------------- */

/* The length of the valid UTF-8 sequence at s[0..n) (n >= 1, s[0] >= 0x80),
 * or 0: RFC 3629, no overlong forms, no surrogates, nothing past U+10FFFF. */
static size_t utf8_len(const unsigned char *s, size_t n) {
  size_t len;
  unsigned lo = 0x80, hi = 0xBF;
  if (s[0] >= 0xC2 && s[0] <= 0xDF)
    len = 2;
  else if (s[0] >= 0xE0 && s[0] <= 0xEF) {
    len = 3;
    lo = s[0] == 0xE0 ? 0xA0 : 0x80;
    hi = s[0] == 0xED ? 0x9F : 0xBF;
  } else if (s[0] >= 0xF0 && s[0] <= 0xF4) {
    len = 4;
    lo = s[0] == 0xF0 ? 0x90 : 0x80;
    hi = s[0] == 0xF4 ? 0x8F : 0xBF;
  } else
    return 0;
  if (n < len || s[1] < lo || s[1] > hi)
    return 0;
  for (size_t i = 2; i < len; i++)
    if (s[i] < 0x80 || s[i] > 0xBF)
      return 0;
  return len;
}

void attnd_buf_json_string(attnd_buf_t *b, const char *s, size_t n) {
  const unsigned char *u = (const unsigned char *)s;
  attnd_buf_append(b, "\"", 1);
  size_t run = 0; /* start of the bytes that need no escape */
  for (size_t i = 0; i < n;) {
    unsigned char c = u[i];
    size_t len = 1;
    const char *esc = NULL;
    char hex[8];
    if (c >= 0x80) {
      if ((len = utf8_len(u + i, n - i)) > 0) {
        i += len;
        continue;
      }
      esc = "\\ufffd"; /* a byte that is not UTF-8 */
      len = 1;
    } else if (c == '"')
      esc = "\\\"";
    else if (c == '\\')
      esc = "\\\\";
    else if (c < 0x20) {
      static const char *const named[0x20] = {['\b'] = "\\b",
                                              ['\f'] = "\\f",
                                              ['\n'] = "\\n",
                                              ['\r'] = "\\r",
                                              ['\t'] = "\\t"};
      esc = named[c];
      if (esc == NULL) {
        snprintf(hex, sizeof hex, "\\u%04X", c);
        esc = hex;
      }
    } else {
      i++;
      continue;
    }
    attnd_buf_append(b, s + run, i - run);
    attnd_buf_puts(b, esc);
    i += len;
    run = i;
  }
  attnd_buf_append(b, s + run, n - run);
  attnd_buf_append(b, "\"", 1);
}
