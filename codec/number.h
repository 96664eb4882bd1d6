/* codec/number.h: JSON numbers to float32 and back, exactly.
 *
 * jansson reads numbers at ~21 MB/s and writes them at ~24 MB/s here, too
 * slow for megabyte tensors, so the bulk numbers bypass it. Parsing gives
 * the same bits as (float)strtod(); printing gives the shortest decimal
 * that reads back to the same float. Pure functions; any thread. */
#ifndef ATTND_CODEC_NUMBER_H
#define ATTND_CODEC_NUMBER_H

#include <stddef.h>
#include <stdint.h>

/* The longest text attnd_float_put writes ("-123456789000000"), and how
 * many bytes past its start it may touch while writing. */
#define ATTND_FLOAT_TEXT_MAX 16
#define ATTND_FLOAT_WRITE_MAX 27

/* Writes the shortest decimal text (JSON number syntax, at most 9
 * significant digits, e.g. "0.1", "-3", "-0", "1.5e-07", "3.4028235e+38")
 * that reads back to exactly `v` at p, without a terminator, and returns
 * its end. It may write up to ATTND_FLOAT_WRITE_MAX bytes. A NaN or an
 * infinity, which JSON cannot express, gives "null" (as JavaScript's
 * JSON.stringify does). */
char *attnd_float_put(float v, char *p);

/* x[0..n) as attnd_float_put writes them, separated by commas; returns
 * the end. Writes up to n·(ATTND_FLOAT_TEXT_MAX + 1) + ATTND_FLOAT_WRITE_MAX
 * bytes at p. */
char *attnd_floats_put(const float *x, size_t n, char *p);

/* attnd_float_put into buf (at least 32 bytes), NUL-terminated; returns
 * the length. */
int attnd_float_format(float v, char *buf);

/* Parses one JSON number (RFC 8259 grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?
 * ([eE][+-]?[0-9]+)?) starting at s, reading no further than end. On
 * success returns 0, stores (double)strtod-result rounded to float in *out
 * (the same bits as (float)strtod(s)) and the first unread character in
 * *next. Returns -1 if s does not start with a valid JSON number, or -2,
 * with *next set, for a number whose value overflows a double, which
 * jansson refuses ("real number overflow", or "too big integer" for an
 * integer literal so long). An integer literal beyond int64 is a finite
 * value, which jansson alone refuses too: the decoder widens it to a real
 * for jansson (bulk.h, attnd_json_widen_numbers), and it parses here to the
 * same float. */
int attnd_number_parse(const char *s, const char *end, float *out,
                       const char **next);

#endif
