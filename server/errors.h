/* server/errors.h: every error attnd answers, from one table.
 *
 * A row gives the code's name in replies, its HTTP status and the reason it
 * counts under in attnd_rejections_total. Every site names its error by its
 * ATTND_ERR_* constant; nothing matches on strings. */
#ifndef ATTND_ERRORS_H
#define ATTND_ERRORS_H

#include <stdarg.h>

#include "metrics.h"

/* X(NAME, "code", status, the status under the Open Inference Protocol,
 * reason). OIP has one status for every invalid request, 400, where /v1
 * tells a request it cannot parse (400) from one it understands and
 * refuses (422). Its status is 0 for a code that no /v2 path can answer,
 * the sessions' (only /v1/sessions has them), so that docs/oip.md's
 * table of statuses can be held to this one (check_errors). */
#define ATTND_ERROR_MAP(X)                                                     \
  X(INVALID_JSON, "invalid_json", 400, 400, INVALID)                           \
  X(BAD_REQUEST, "bad_request", 400, 400, INVALID)                             \
  X(UNAUTHORIZED, "unauthorized", 401, 401, UNAUTHORIZED)                      \
  X(NOT_FOUND, "not_found", 404, 404, INVALID)                                 \
  X(UNKNOWN_LAYER, "unknown_layer", 404, 404, INVALID)                         \
  X(UNKNOWN_SESSION, "unknown_session", 404, 0, INVALID)                       \
  X(SESSION_EVICTED, "session_evicted", 410, 0, INVALID)                       \
  X(LENGTH_MISMATCH, "length_mismatch", 409, 0, INVALID)                       \
  X(SESSION_BUSY, "session_busy", 409, 0, INVALID)                             \
  X(SESSION_EXISTS, "session_exists", 409, 0, INVALID)                         \
  X(METHOD_NOT_ALLOWED, "method_not_allowed", 405, 405, INVALID)               \
  X(PAYLOAD_TOO_LARGE, "payload_too_large", 413, 413, TOO_LARGE)               \
  X(URI_TOO_LONG, "uri_too_long", 414, 414, TOO_LARGE)                         \
  X(UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type", 415, 415, INVALID)       \
  X(EXPECTATION_FAILED, "expectation_failed", 417, 417, INVALID)               \
  X(INVALID_TYPE, "invalid_type", 422, 400, INVALID)                           \
  X(INVALID_VALUE, "invalid_value", 422, 400, INVALID)                         \
  X(MISSING_FIELD, "missing_field", 422, 400, INVALID)                         \
  X(UNKNOWN_FIELD, "unknown_field", 422, 400, INVALID)                         \
  X(SHAPE_MISMATCH, "shape_mismatch", 422, 400, INVALID)                       \
  X(HEADS_MISMATCH, "heads_mismatch", 422, 400, INVALID)                       \
  X(SIZE_MISMATCH, "size_mismatch", 422, 400, INVALID)                         \
  X(RAGGED_TENSOR, "ragged_tensor", 422, 400, INVALID)                         \
  X(NON_FINITE, "non_finite", 422, 400, INVALID)                               \
  X(NUMERIC_OVERFLOW, "numeric_overflow", 422, 400, INVALID)                   \
  X(INVALID_BASE64, "invalid_base64", 422, 400, INVALID)                       \
  X(LIMIT_EXCEEDED, "limit_exceeded", 422, 400, TOO_LARGE)                     \
  X(OVERLOADED, "overloaded", 429, 429, OVERLOAD)                              \
  X(HEADERS_TOO_LARGE, "headers_too_large", 431, 431, TOO_LARGE)               \
  X(NOT_IMPLEMENTED, "not_implemented", 501, 501, INVALID)                     \
  X(OUT_OF_MEMORY, "out_of_memory", 503, 503, NONE)                            \
  X(BACKEND_UNAVAILABLE, "backend_unavailable", 503, 503, NONE)                \
  X(DRAINING, "draining", 503, 503, DRAINING)                                  \
  X(DEADLINE_EXCEEDED, "deadline_exceeded", 504, 504, DEADLINE)

/* The statuses libmicrohttpd answers with itself once attnd holds the
 * request (from its request line: http.c's on_uri) that no row above has:
 * X(status, reason), counted as the rows' are (docs/operations.md). None
 * at present: its 431 (a head over its buffer) is headers_too_large's. */
#define ATTND_LIBRARY_STATUS_MAP(X)

typedef enum {
#define ATTND__ERR_ENUM(name, code, status, v2, reason) ATTND_ERR_##name,
  ATTND_ERROR_MAP(ATTND__ERR_ENUM)
#undef ATTND__ERR_ENUM
      ATTND_ERR_COUNT
} attnd_err_t;

/* The most bytes of a request's "id" (UTF-8). */
#define ATTND_ID_MAX 256

/* An error to answer: the code, the offending member as a JSON path
 * ("mask.allow", "" for none) and a message naming it and its dimensions;
 * and where a request refused in decoding had a valid "id" (has_id), the
 * id, for the reply and the access log (the decoders set it; attnd_error_set
 * clears it). */
typedef struct attnd_error {
  attnd_err_t code;
  char field[64];
  char message[512];
  int has_id;
  char id[ATTND_ID_MAX + 1];
} attnd_error_t;

/* Fills `e` and returns -1. Any thread. */
int attnd_error_set(attnd_error_t *e, attnd_err_t code, const char *field,
                    const char *fmt, ...) __attribute__((format(printf, 4, 5)));
int attnd_error_vset(attnd_error_t *e, attnd_err_t code, const char *field,
                     const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));

/* The table's columns for `code`. */
const char *attnd_error_name(attnd_err_t code);
int attnd_error_status(attnd_err_t code);
/* /v1's status where the column is 0: no /v2 path answers such a code, and
 * were one to, a reply's status is never 0. */
int attnd_error_status_v2(attnd_err_t code);
/* Whether a /v2 path can answer `code` (its column is not 0). */
int attnd_error_on_v2(attnd_err_t code);
attnd_reject_t attnd_error_reason(attnd_err_t code);
/* The reason of the table's first code with /v1 status `status`, or
 * ATTND_REJECT_NONE where no code has it: how a refusal that
 * libmicrohttpd answered itself (a bad chunk's 400 or 413) counts. */
attnd_reject_t attnd_status_reason(int status);

#endif
