/* tools/load/verify.h: --verify, a reply checked against the core.
 *
 * The request's params (regenerated from its seed, see gen.h) run through
 * attn_plan_init and attn_forward here, and the reply's "output" (and
 * "weights" when they were asked for; v2's "weights" or "weights_mean",
 * read by load_v2_reply_tensor) must be within LOAD_VERIFY_TOL of them as
 * ‖got − want‖₂ / ‖want‖₂; with a 16-bit dtype within load_verify_tol's
 * (the server rounds its float32 result), and every value read must be one
 * of that dtype. A layer model's request cannot be computed
 * here (its weights are on the server) and fails. The same core on both sides:
 * what this checks is everything in between (request encoding, the server's
 * decoding, scheduling and reply encoding, HTTP). */
#ifndef LOAD_VERIFY_H
#define LOAD_VERIFY_H

#include <stddef.h>
#include <stdint.h>

#include "gen.h"

#define LOAD_VERIFY_TOL 1e-4

/* The tolerance of a reply rounded to `t`: LOAD_VERIFY_TOL plus the unit
 * roundoff of t, 2^-8 for bfloat16 (8 significant bits) and 2^-11 for
 * float16 (11): rounding to nearest moves each normal value by at most
 * that much of itself, hence the 2-norm of the whole by at most that much
 * of its norm. (float16's subnormals, below 2^-14, move by at most 2^-25
 * each, nothing next to the norm of outputs of order one.) */
double load_verify_tol(attnd_dtype_t t);

/* Widens n elements of dtype t at src (little-endian, any alignment) into
 * out[0..n), exactly. */
void load_dtype_widen(attnd_dtype_t t, const void *src, size_t n, float *out);

/* Whether x[0..n), read from a reply's numbers, are all values of t:
 * returns 0, or -1 with "reply NAME: VALUE at [i] is not a TYPE" in
 * why[0..wn). Nothing to check for float32. */
int load_dtype_exact(attnd_dtype_t t, const float *x, size_t n,
                     const char *name, char *why, size_t wn);

/* Decodes member `name` of a reply body, a tensor of the given shape in
 * encoding `enc`, into out[0..prod(dim)). The body must be attnd's reply
 * to a request without an id: its tensors hold no quote characters, so the
 * first `"name":` in the text is the member. Returns 0, or -1 with the
 * reason in why[0..wn). Borrows everything; any thread. */
int load_reply_tensor(const char *body, size_t len, const char *name,
                      attnd_form_t enc, int rank, const int64_t *dim,
                      float *out, char *why, size_t wn);

/* The same for a reply to a request with return.dtype `dtype`: in base64
 * the tensor must name that dtype and carry its bytes (two an element for
 * the 16-bit ones, widened exactly), and the numbers of the other forms
 * must be values of it (load_dtype_exact). */
int load_reply_tensor_as(const char *body, size_t len, const char *name,
                         attnd_form_t enc, attnd_dtype_t dtype, int rank,
                         const int64_t *dim, float *out, char *why, size_t wn);

/* Computes request `r` (generated for shape `s`, with its tensors) with
 * `threads` threads and compares reply body[0..len) with it; header_len is
 * the reply's Inference-Header-Content-Length (v2), -1 when none. Stores the
 * largest relative error in *err_out (+inf when the reply could not be
 * read). Returns 0 when within load_verify_tol(s->dtype), -1 otherwise, with
 * the reason in why[0..wn). Borrows everything; any thread. */
int load_verify_reply(const load_shape_t *s, const load_request_t *r,
                      const char *body, size_t len, int64_t header_len,
                      int threads, double *err_out, char *why, size_t wn);

#endif
