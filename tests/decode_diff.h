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

#endif
