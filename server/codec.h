/* server/codec.h: fast, exact codecs for the bulk numbers of a request.
 *
 * JSON documents carry tensors as base64 or as arrays of numbers. jansson
 * reads numbers at ~21 MB/s and writes them at ~24 MB/s here, too slow for
 * megabyte tensors, so the bulk numbers bypass it:
 *   - base64: strict standard alphabet with padding, 24 bytes a step with
 *     AVX2 where the CPU has it;
 *   - numbers: parsed exactly as strtod() then a cast to float would, and
 *     printed as the shortest decimal that reads back to the same float;
 *   - the bulk scanner: copies a JSON text into a small "skeleton" where
 *     every large, regular array of numbers (or of booleans) is replaced by
 *     a placeholder, and parses those arrays itself. jansson then parses
 *     only the skeleton.
 * Pure functions of their arguments; any thread. */
#ifndef ATTND_CODEC_H
#define ATTND_CODEC_H

#include <stddef.h>
#include <stdint.h>

/* ---- base64 (RFC 4648, standard alphabet, '=' padding required) -------- */

/* Characters needed to encode n bytes: 4·ceil(n/3). */
size_t attnd_b64_encoded_len(size_t n);

/* Writes attnd_b64_encoded_len(n) characters to dst (no terminator). */
void attnd_b64_encode(const void *src, size_t n, char *dst);

/* Decodes src[0..n). Accepts only complete groups of four characters from
 * the standard alphabet, with '=' padding only at the end (one or two), and
 * zero unused bits in the last group. Writes at most 3·n/4 bytes to dst and
 * the byte count to *out_n. Returns 0, or -1 with *bad_pos the offset of the
 * first offending character (n when the length is not a multiple of 4). */
int attnd_b64_decode(const char *src, size_t n, void *dst, size_t *out_n,
                     size_t *bad_pos);

/* ---- numbers ------------------------------------------------------------ */

/* The shortest decimal text (JSON number syntax, at most 9 significant
 * digits, e.g. "0.1", "-3", "-0", "1.5e-07", "3.4028235e+38") that reads
 * back to exactly `v`, a finite float. Writes it to buf (at least 32 bytes,
 * NUL-terminated) and returns its length. A NaN or an infinity, which JSON
 * cannot express, gives "null" (as JavaScript's JSON.stringify does). */
int attnd_float_format(float v, char *buf);

/* Parses one JSON number (RFC 8259 grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?
 * ([eE][+-]?[0-9]+)?) starting at s, reading no further than end. On
 * success returns 0, stores (double)strtod-result rounded to float in *out
 * (the same bits as (float)strtod(s)) and the first unread character in
 * *next. Returns -1 if s does not start with a valid JSON number, or -2 for
 * a number jansson rejects: a real that overflows a double, or an integer
 * (no '.' and no exponent) outside the range of long long. */
int attnd_number_parse(const char *s, const char *end, float *out,
                       const char **next);

/* ---- growable text buffer ------------------------------------------------ */

typedef struct attnd_buf {
  char *data; /* owned; NUL-terminated when len > 0 */
  size_t len, cap;
  int oom; /* set once an allocation failed; later appends do nothing */
} attnd_buf_t;

void attnd_buf_init(attnd_buf_t *b);
void attnd_buf_free(attnd_buf_t *b);
/* Ensures room for n more bytes (plus a terminator). Returns 0 or -1. */
int attnd_buf_reserve(attnd_buf_t *b, size_t n);
void attnd_buf_append(attnd_buf_t *b, const char *s, size_t n);
void attnd_buf_puts(attnd_buf_t *b, const char *s);

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

/* ---- the bulk scanner --------------------------------------------------- */

#define ATTND_BULK_MAX_RANK 4

/* One array the scanner parsed: `rank` nested levels (1..4) of the given
 * shape, every leaf a number (is_bool 0) or every leaf true/false (is_bool
 * 1, stored as 1.0f/0.0f). Or one long plain string (text != NULL): its
 * characters between the quotes, borrowed from the scanned text. */
typedef struct attnd_bulk {
  float *data; /* owned by the set; NULL for a string */
  size_t n;    /* elements: the product of dim */
  int rank;
  int64_t dim[ATTND_BULK_MAX_RANK];
  int is_bool;
  const char *text; /* a string item, or NULL */
  size_t text_len;
} attnd_bulk_t;

typedef struct attnd_bulk_set {
  attnd_bulk_t *items; /* owned */
  size_t n, cap;
  uint64_t nonce; /* marks this set's placeholders */
} attnd_bulk_set_t;

void attnd_bulk_set_init(attnd_bulk_set_t *set, uint64_t nonce);
void attnd_bulk_set_free(attnd_bulk_set_t *set);

/* Copies the JSON text src[0..n) into `skeleton` (appended, NUL-terminated),
 * replacing each string of at least `min_string` characters (0: none) that
 * holds only printable ASCII without escapes (as base64 does) by the string
 * placeholder "\u0001bulk:<nonce>:<k>", and each array that is all of the
 * following by an array placeholder:
 *   - at most ATTND_BULK_MAX_RANK levels deep, rectangular (every sub-array
 *     at one level has the same length, none empty);
 *   - leaves all JSON numbers that attnd_number_parse accepts, or all the
 *     literals true/false;
 *   - at least `min_elems` leaves;
 *   - outside any JSON string;
 *   - nested shallowly enough that jansson's depth limit
 *     (JSON_PARSER_MAX_DEPTH, which counts the leaves too) accepts it, so
 *     that a text too deep for jansson stays too deep.
 * The placeholder for item k of the set is the JSON text (these bytes)
 *   ["\u0001bulk",<nonce>,<k>]
 * with <nonce> the set's nonce in decimal (a 53-bit value). The first
 * character of a placeholder is '[', like the array it stands for.
 * A string item's text points into src, which must outlive the set.
 * Everything else is copied byte for byte, including anything malformed:
 * the scanner never reports JSON errors; jansson finds them in the
 * skeleton. If the skeleton fails to parse, the caller re-parses the
 * original text to report jansson's own error and position.
 * Returns 0, or -1 when out of memory. */
int attnd_bulk_scan(const char *src, size_t n, size_t min_elems,
                    size_t min_string, attnd_bulk_set_t *set,
                    attnd_buf_t *skeleton);

#endif
