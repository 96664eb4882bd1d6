/* codec/buf.h: a growable text buffer, and the JSON text of strings
 * and float32 tensors written into it.
 *
 * An append that cannot allocate sets `oom` and leaves the text as it was;
 * every later append does nothing, so a writer checks once, at the end.
 * Any thread, one buffer per thread. */
#ifndef ATTND_CODEC_BUF_H
#define ATTND_CODEC_BUF_H

#include <stddef.h>
#include <stdint.h>

#include "half.h"

typedef struct attnd_buf {
  char *data; /* owned, but for `lent`; NUL-terminated when len > 0 */
  size_t len, cap;
  int oom;  /* set once an allocation failed; later appends do nothing */
  int lent; /* data is the caller's (attnd_buf_init_in) */
} attnd_buf_t;

void attnd_buf_init(attnd_buf_t *b);
/* A buffer that starts in the caller's mem[0..cap), which must outlive it,
 * and moves to the heap only if the text outgrows it. */
void attnd_buf_init_in(attnd_buf_t *b, char *mem, size_t cap);
void attnd_buf_free(attnd_buf_t *b);
/* Ensures room for n more bytes (plus a terminator). Returns 0 or -1. */
int attnd_buf_reserve(attnd_buf_t *b, size_t n);
void attnd_buf_append(attnd_buf_t *b, const char *s, size_t n);
void attnd_buf_puts(attnd_buf_t *b, const char *s);
/* Appends printf-formatted text. */
void attnd_buf_printf(attnd_buf_t *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Appends s[0..n) as a JSON string, quotes included, escaped as jansson
 * escapes it ('"', '\\' and control characters). Bytes that are not valid
 * UTF-8 become U+FFFD, so the text is valid JSON whatever s holds. */
void attnd_buf_json_string(attnd_buf_t *b, const char *s, size_t n);

/* Appends floats x[0..n) as a JSON tensor: with rank 0 a flat array
 * "[a,b,...]"; otherwise nested arrays of the given shape (whose product is
 * n). Numbers as attnd_float_format. */
void attnd_buf_floats(attnd_buf_t *b, const float *x, size_t n, int rank,
                      const int64_t *dim);

/* Appends the base64 text of n bytes (no quotes). */
void attnd_buf_base64(attnd_buf_t *b, const void *src, size_t n);

/* The three JSON forms of a float32 tensor. */
typedef enum attnd_form {
  ATTND_FORM_NESTED, /* [[0.1, 0.2], [0.3, 0.4]] */
  ATTND_FORM_FLAT,   /* {"shape": [2, 2], "data": [0.1, 0.2, 0.3, 0.4]} */
  ATTND_FORM_BASE64  /* {"shape": [2, 2], "dtype": "float32", "base64": ".."}
                        of the little-endian bytes */
} attnd_form_t;

/* Appends the tensor x of shape dim[0..rank) (rank >= 1) in `form`. */
void attnd_buf_tensor(attnd_buf_t *b, attnd_form_t form, const float *x,
                      int rank, const int64_t *dim);

/* The same as `dtype` (half.h): in base64 its bytes, rounded, and its name
 * ("float16", "bfloat16"); the numbers of the other forms are x's as they
 * are (round x first: attnd_dtype_round). */
void attnd_buf_tensor_as(attnd_buf_t *b, attnd_form_t form, attnd_dtype_t dtype,
                         const float *x, int rank, const int64_t *dim);

/* The same for an int32 tensor: integers in the nested and flat forms,
 * "dtype": "int32" in base64. */
void attnd_buf_tensor_i32(attnd_buf_t *b, attnd_form_t form, const int32_t *x,
                          int rank, const int64_t *dim);

#endif
