/* codec/bulk.h: the bulk scanner, jansson's fast lane.
 *
 * It copies a JSON text into a small "skeleton" where every large, regular
 * array of numbers (or of booleans) and every long base64 text is replaced
 * by a placeholder, and parses those arrays itself. jansson then parses only
 * the skeleton. Also the widening of integers beyond int64 that jansson
 * refuses. Every function here reads its input in one linear pass (see
 * attnd__bulk_examined). Any thread, one set per thread. */
#ifndef ATTND_CODEC_BULK_H
#define ATTND_CODEC_BULK_H

#include <stddef.h>
#include <stdint.h>

#include "arena.h"
#include "buf.h"

#define ATTND_BULK_MAX_RANK 4

/* One array the scanner parsed: `rank` nested levels (1..4) of the given
 * shape, every leaf a number (is_bool 0) or every leaf true/false (is_bool
 * 1, stored as 1.0f/0.0f). Or one long string (text != NULL): the
 * string's value, borrowed from the scanned text when the string has no
 * escapes, else unescaped into `copy`, which the set owns; a base64
 * member's text (in_tree 0), which the decoder reads as a tensor, or any
 * other string (in_tree 1), which the decoder puts back into jansson's tree
 * as the string it is (attnd_bulk_string). */
typedef struct attnd_bulk {
  float *data; /* owned by the set unless `lent`; NULL for a string */
  size_t n;    /* elements: the product of dim */
  int rank;
  int64_t dim[ATTND_BULK_MAX_RANK];
  int is_bool;
  int lent;         /* data is in the set's arena, not owned */
  const char *text; /* a string item, or NULL */
  size_t text_len;
  char *copy;      /* owned by the set: what `text` points to, or NULL */
  int in_tree;     /* a string the decoder restores to jansson's tree */
  const char *src; /* the text it stands for, borrowed from the scan's */
  size_t src_len;
} attnd_bulk_t;

typedef struct attnd_bulk_set {
  attnd_bulk_t *items; /* owned, or in `arena` */
  size_t n, cap;
  size_t n_data;       /* the items that are not in_tree: tensor data */
  size_t lifted_bytes; /* bytes of the text the placeholders stand for */
  uint64_t nonce;      /* marks this set's placeholders */
  /* Set by the caller, or NULL (attnd_bulk_set_init's): the member names
   * whose values alone may be lifted arrays (attnd_bulk_scan). */
  const char *const *array_keys;
  /* Set by the caller, or NULL: where the items and the data of arrays
   * take their bytes first (the heap when it is full). Such data is the
   * arena's (`lent`), not the set's. */
  attnd_arena_t *arena;
  /* The first syntax error the scan met inside an array it tried to lift
   * (a token jansson refuses there: NaN, a bare word, "1e", a missing ','
   * or ']'), or fault SIZE_MAX: where jansson's reading of that array goes
   * wrong, so that the caller can have jansson name the error without
   * reading the array's numbers (and without counting them as structure).
   * The text skel[0 .. fault_skel) + fault_fill + " " + src[fault ..)
   * leaves jansson as src does up to `fault`, with one 0 for each run of
   * leaves already read. */
  size_t fault;        /* where the token jansson refuses starts, in src */
  size_t fault_array;  /* where that array starts, in src */
  size_t fault_skel;   /* the skeleton's length before that array */
  size_t fault_lifted; /* lifted_bytes before that array */
  char fault_fill[16]; /* "[", "[0," or "[0" for each array open there */
  int fault_wide;      /* a leaf read before it is an integer beyond int64 */
} attnd_bulk_set_t;

void attnd_bulk_set_init(attnd_bulk_set_t *set, uint64_t nonce);
void attnd_bulk_set_free(attnd_bulk_set_t *set);

/* Copies the JSON text src[0..n) into `skeleton` (appended, NUL-terminated),
 * replacing with a string placeholder "\u0001bulk:<nonce>:<k>" each string
 * that is one of these (0 for `min_string` lifts none):
 *   - base64 data (in_tree 0): the value of an object member whose key is
 *     spelled "base64" (no escapes in the key), of at least `min_string`
 *     characters once unescaped, printable ASCII as base64 is: raw
 *     characters 0x20..0x7e and only the escapes \" \\ \/ and \u00XX of a
 *     printable character (PHP sends every '/' as \/);
 *   - any other string that is no object key (in_tree 1), of at least
 *     `min_string` bytes between its quotes, that jansson accepts: valid
 *     UTF-8, no control character, the escapes \" \\ \/ \b \f \n \r \t
 *     and \uXXXX (surrogates in pairs, not \u0000); its value is
 *     unescaped to UTF-8, as jansson's own. The decoder puts it back into
 *     the tree, so that no member but a tensor's "base64" ever sees a
 *     string placeholder, and jansson never reads a long string;
 * and each array that is all of the following by an array placeholder:
 *   - when the set has array_keys, the value of an object member whose key
 *     is spelled as one of them (no escapes); else anywhere;
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
 * A string item's text may point into src, which must outlive the set.
 * The set's lifted_bytes counts the bytes of src its placeholders stand
 * for, so that n - lifted_bytes is what jansson reads of the text.
 * Everything else is copied byte for byte, including anything malformed:
 * the scanner never reports JSON errors; jansson finds them in the
 * skeleton. If the skeleton fails to parse, the caller re-parses the
 * original text to report jansson's own error and position, or, for an
 * array that the scanner gave up on at a syntax error (the set's fault),
 * has jansson read only the skeleton before it and the text from the
 * error on.
 * Returns 0, or -1 when out of memory. */
int attnd_bulk_scan(const char *src, size_t n, size_t min_elems,
                    size_t min_string, attnd_bulk_set_t *set,
                    attnd_buf_t *skeleton);

/* The string item that the string placeholder s (a NUL-terminated string
 * value) stands for in `set`, or NULL when s is no placeholder of it. */
const attnd_bulk_t *attnd_bulk_string(const attnd_bulk_set_t *set,
                                      const char *s);

/* The leaves of array item b as int64, into out[0 .. b->n), read again
 * from its text: each must be an integer literal within int64, or a real
 * literal of an integral value within int64 (2.0, 3e2), as the decoder's
 * integer members take them. Returns 0, or -1 when a leaf is not (the
 * caller then has the whole body read the slow way for the exact
 * message). */
int attnd_bulk_ints(const attnd_bulk_t *b, int64_t *out);

/* Copies the JSON text src[0..n) into `out` (appended, NUL-terminated) with
 * the number literals outside strings that jansson refuses, though they are
 * valid JSON ("too big integer", "real number overflow"), rewritten as
 * literals it reads, padded with spaces to the same length, so that any
 * other error is at the same line and column:
 *   - an integer literal beyond int64 as a real literal of the same double
 *     value (strtod's), e.g. 18446744073709551616 as 18446744073709552e3;
 *   - a literal whose value overflows a double as ATTND_JSON_HUGE (9e307),
 *     or its negative: a value that is no float32 either, and that no
 *     integer member accepts, so that it gets the answer it would get as a
 *     number (422), where jansson alone answers 400.
 * Returns the number of literals rewritten, or -1 when out of memory. */
#define ATTND_JSON_HUGE 9e307
/* The closing quote of the JSON string that opens at *open, or NULL if the
 * text ends first; sets *escapes if the string holds a backslash. Each byte
 * is examined at most twice. Internal to codec/ (bulk.c, widen.c). */
const char *attnd__string_close(const char *open, const char *end,
                                int *escapes);

long attnd_json_widen_numbers(const char *src, size_t n, attnd_buf_t *out);

/* For tests: how many bytes of input this thread's calls of the functions
 * above have examined so far, counting every pass over a byte (the main
 * pass, the searches for a string's end, each try at reading an array).
 * Linear scans examine a small constant times their input. */
extern _Thread_local uint64_t attnd__bulk_examined;
/* Counts n bytes examined. */
#define ATTND__EXAMINED(n) (attnd__bulk_examined += (uint64_t)(n))

#endif
