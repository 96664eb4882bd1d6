/* tests/decode_diff.h: the decoder's two paths, compared (tests and
 * fuzzers; no Check, so that a libFuzzer harness links it too).
 *
 * attnd__request_decode_path (server/sched/request.h) decodes a body by jansson
 * alone (fast = 0) or with the bulk scanner's fast path first (fast = 1,
 * what the server does). The fast path must be invisible: every body
 * gives the same request, or the same error, either way. */
#ifndef ATTND_TESTS_DECODE_DIFF_H
#define ATTND_TESTS_DECODE_DIFF_H

#include <stddef.h>

#include "config.h"
#include "sched/request.h"

/* The layers both paths decode against (NULL, the default: none). */
void decode_diff_set_layers(attnd_layer_set_t *layers);

/* Decodes body[0..len) under `cfg` by both paths and compares them: both
 * succeed with the same request (decode_request_diff), or both fail with
 * the same error code, field and message, byte for byte. Returns 0 when
 * they agree, or when either path ran out of memory (which path meets a
 * failed allocation is not a property of the body); else -1 with the
 * difference written to why[0..n). Borrows everything; any thread. */
int decode_diff(const char *body, size_t len, const attnd_config_t *cfg,
                char *why, size_t n);

/* The same for the body of a step of a session of `shape`
 * (attnd__step_decode_path). */
struct attnd_session_shape;
int step_decode_diff(const char *body, size_t len, const attnd_config_t *cfg,
                     const struct attnd_session_shape *shape, char *why,
                     size_t n);

/* Names the first member in which the decoded requests a and b differ, or
 * returns NULL: every tensor (shape and bytes), every option, the id, the
 * return members and timeout_ms. */
const char *decode_request_diff(const attnd_request_t *a,
                                const attnd_request_t *b);

/* Tokens jansson refuses in an array of numbers, for bad_array_body: words
 * and things like numbers that are none, a missing ',', a ']' after a ','
 * (not the first), and NULL (the text ends in the array). */
#define N_BAD_ARRAY_TOKENS 13
extern const char *const bad_array_tokens[N_BAD_ARRAY_TOKENS];

/* A body with a big array of numbers in it that jansson refuses at one
 * token: head, then an array of n numbers ("0.25", eight to a line) whose
 * element `at` is `token` (at == n: token after the last, after a ','; a
 * NULL token: the text ends there instead), then "]" and tail. A new
 * string (free()), its length in *len. */
char *bad_array_body(const char *head, int n, int at, const char *token,
                     const char *tail, size_t *len);

/* What the decoders answer for body[0..len) when jansson refuses it, from
 * jansson reading the whole body itself: "invalid JSON at line L, column
 * C: <jansson's text>", into msg[0..n). Returns 0, or -1 when jansson
 * reads the body. */
int json_error_reference(const char *body, size_t len, char *msg, size_t n);

#endif
