/* server/codec/bulk.h: the bulk scanner, jansson's fast lane.
 *
 * It copies a JSON text into a small "skeleton" where every large, regular
 * array of numbers (or of booleans) and every long plain string is replaced
 * by a placeholder, and parses those arrays itself. jansson then parses only
 * the skeleton. Any thread, one set per thread. */
#ifndef ATTND_CODEC_BULK_H
#define ATTND_CODEC_BULK_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"

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
