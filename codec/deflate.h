/* codec/deflate.h: HTTP content codings (RFC 9110 8.4.1) with zlib:
 * gzip (RFC 1952) and deflate, which HTTP defines as the zlib format
 * (RFC 1950); a raw deflate stream (RFC 1951), which some clients send
 * under that name, is read too.
 *
 * Bodies are inflated as they arrive, within a limit on the inflated
 * bytes that is checked as they grow, so a small bomb is refused after at
 * most `max` bytes of output, whatever its ratio. Any thread, one
 * attnd_inflate_t per thread at a time. */
#ifndef ATTND_CODEC_DEFLATE_H
#define ATTND_CODEC_DEFLATE_H

#include <stddef.h>

#include "buf.h"

typedef enum attnd_coding {
  ATTND_CODING_IDENTITY,
  ATTND_CODING_GZIP,
  ATTND_CODING_DEFLATE
} attnd_coding_t;

/* "identity", "gzip" or "deflate". */
const char *attnd_coding_name(attnd_coding_t c);

/* The coding of a Content-Encoding value: one of the three (case-
 * insensitive, with surrounding whitespace; "x-gzip" is gzip), or -1 for
 * anything else, a list of several codings included. */
int attnd_coding_parse(const char *value);

/* The coding to answer in, from an Accept-Encoding value (RFC 9110
 * 12.5.3): gzip if its weight (or that of "*") is above 0, else deflate,
 * else identity. NULL (no header) is identity. Never fails: a value it
 * cannot read gives identity. */
attnd_coding_t attnd_coding_accept(const char *value);

/* For tests: how many bytes of Accept-Encoding values the searches for
 * each element's ends, in this thread's calls of attnd_coding_accept, have
 * examined so far. One pass examines each byte of the value once. */
extern _Thread_local uint64_t attnd__accept_examined;

typedef struct attnd_inflate attnd_inflate_t;

/* A new inflater for `coding` (gzip or deflate), or NULL when out of
 * memory. Owned by the caller: attnd_inflate_free. */
attnd_inflate_t *attnd_inflate_new(attnd_coding_t coding);
void attnd_inflate_free(attnd_inflate_t *z);

/* The most input that data inflating to at most `max` bytes needs: zlib's
 * bound on deflate's output for any settings (deflateBound: n + n/8 + n/64
 * + 5, stored blocks at worst), and 64 bytes for a gzip or zlib wrapper. A
 * stream of empty blocks, or of empty gzip members, makes nothing of its
 * input, which could then go on for as long as a client sends it. */
size_t attnd_inflate_in_bound(size_t max);

/* Inflates in[0..n), appending the output to `out`, which may hold at most
 * `max` bytes in all. Returns 0; -1 when the input is not of the coding
 * (msg says where and why) or goes on past the end of its stream; -2 when
 * the output would pass `max` (out then holds exactly max bytes), or the
 * input passes attnd_inflate_in_bound(max); -3 when out of memory. After
 * an error, every later call returns it again. */
int attnd_inflate_feed(attnd_inflate_t *z, const void *in, size_t n,
                       attnd_buf_t *out, size_t max, char *msg, size_t msz);

/* Returns 0 when the input fed so far is one whole stream, or -1 with msg
 * (it was cut short). */
int attnd_inflate_end(const attnd_inflate_t *z, char *msg, size_t msz);

/* Appends in[0..n) compressed as `coding` (gzip or deflate) to out, at
 * zlib's fastest level. Returns 0, or -1 when out of memory (out->oom). */
int attnd_deflate(attnd_coding_t coding, const void *in, size_t n,
                  attnd_buf_t *out);

#endif
