/* codec/base64.h: base64 (RFC 4648), standard alphabet, '=' padding
 * required. Pure functions of their arguments; any thread. */
#ifndef ATTND_CODEC_BASE64_H
#define ATTND_CODEC_BASE64_H

#include <stddef.h>

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

#endif
