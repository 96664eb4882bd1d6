/* codec/util.h: the small helpers every attnd program shares (the
 * server, attnd-load, the benches and the tests): a monotonic clock, a
 * random generator, formatted messages and the text of a shape.
 * Any thread. */
#ifndef ATTND_CODEC_UTIL_H
#define ATTND_CODEC_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* CLOCK_MONOTONIC in milliseconds. */
double attnd_now_ms(void);

/* splitmix64 (Steele, Lea and Flood, 2014): advances *state and returns the
 * next 64 random bits. Not for secrets. */
uint64_t attnd_splitmix64(uint64_t *state);

/* 64 bits from the OS (getrandom), for seeds and identifiers. Session ids
 * and the hash keys rest on them being unguessable, so there is no weaker
 * fallback: where getrandom fails (a seccomp filter that refuses it, a
 * kernel before 3.17), the process says so on stderr and aborts; attnd's
 * start takes one, so it stops there. */
uint64_t attnd_random_u64(void);

/* vsnprintf into msg[0..size) and return -1: the "fail with a message"
 * idiom of every parser here. */
int attnd_fail(char *msg, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* An API key: 1 to ATTND_AUTH_MAX_KEY characters of RFC 6750's b64token,
 * letters, digits and - . _ ~ + / = (so no space, comma, quote or '#',
 * which the config formats would cut). attnd's keys (server/http/auth.c)
 * and attnd-load's (tools/load/options.c) follow this one rule. */
#define ATTND_AUTH_MAX_KEY 4096
static inline int attnd_auth_key_char(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' ||
         c == '~' || c == '+' || c == '/' || c == '=';
}

/* The value of hex digit c (0-9, a-f, A-F), or -1. */
static inline int attnd_hex_digit(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  c = (char)(c | 0x20);
  return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Number text without printf, for the paths every request takes: glibc
 * sends every printf of a process down its slow positional path once a
 * library registers a printf type, and libquadmath (under OpenBLAS's
 * libgfortran) does at load. Each writes a NUL-terminated text into dst
 * and returns its length:
 *   attnd_fmt_i64: v in decimal (dst: 21 bytes);
 *   attnd_fmt_hex64: v as 16 lowercase hex digits (dst: 17 bytes);
 *   attnd_fmt_u64: v in decimal (dst: 21 bytes);
 *   attnd_fmt_ms: v with three decimals, byte for byte "%.3f" of v for v
 *     in [0, 1e15] (timings: a negative or non-finite v is 0, one over
 *     1e15 is 1e15; dst: 24 bytes). */
size_t attnd_fmt_i64(char *dst, int64_t v);
size_t attnd_fmt_u64(char *dst, uint64_t v);
size_t attnd_fmt_hex64(char *dst, uint64_t v);
size_t attnd_fmt_ms(char *dst, double v);
/* Copies s into dst[0..size) (size > 0), cut to fit, NUL-terminated, as
 * snprintf(dst, size, "%s", s) does; returns the length copied. */
size_t attnd_fmt_str(char *dst, size_t size, const char *s);

/* The paths of fields that error messages name, which a decoder builds
 * for every member it reads, before anything fails: so without printf too.
 * Each writes into dst[0..size) (size > 0), cut to fit and NUL-terminated,
 * and returns the length written:
 *   attnd_fmt_member: "a.b", or b alone when a is "";
 *   attnd_fmt_index: "a[k]". */
size_t attnd_fmt_member(char *dst, size_t size, const char *a, const char *b);
size_t attnd_fmt_index(char *dst, size_t size, const char *a, int64_t k);

/* Writes the shape dim[0..rank) as "[2, 3]" (with `sep` ", ") or "[2,3]"
 * (with ","), truncated to fit buf[0..n) and NUL-terminated; returns the
 * length written. */
size_t attnd_shape_text(char *buf, size_t n, int rank, const int64_t *dim,
                        const char *sep);

#endif
