/* attn/error.h: error codes and the caller-owned error record of the core.
 *
 * Every core function that can fail returns 0 or a negative ATTN_E* code and,
 * when given an attn_error_t, fills it with the code, the name of the
 * offending input (as named in attn_params_t) and a message that names that
 * input and its dimensions. */
#ifndef ATTN_ERROR_H
#define ATTN_ERROR_H

/* X(name, value, message) */
#define ATTN_ERRNO_MAP(X)                                                      \
  X(EINVAL, -1, "invalid argument")                                            \
  X(ERANK, -2, "tensor has the wrong rank")                                    \
  X(ESHAPE, -3, "tensor shapes do not fit")                                    \
  X(EHEADS, -4, "head counts do not divide")                                   \
  X(ERANGE, -5, "value out of range")                                          \
  X(EOVERFLOW, -6, "size overflows")                                           \
  X(ENOSPC, -7, "workspace too small")                                         \
  X(ENOTSUP, -8, "not supported on this CPU")                                  \
  X(ECANCELED, -9, "canceled")

typedef enum {
#define ATTN__ERR_ENUM(name, value, msg) ATTN_##name = (value),
  ATTN_ERRNO_MAP(ATTN__ERR_ENUM)
#undef ATTN__ERR_ENUM
} attn_errno_t;

#define ATTN_ERROR_FIELD_MAX 32
#define ATTN_ERROR_MESSAGE_MAX 256

typedef struct attn_error {
  int code;                         /* 0 or an ATTN_E* value */
  char field[ATTN_ERROR_FIELD_MAX]; /* offending input, "" if none */
  char message[ATTN_ERROR_MESSAGE_MAX];
} attn_error_t;

/* Static message for `code`, "unknown error" for anything else. */
const char *attn_strerror(int code);

/* Symbolic name for `code` ("EINVAL"...), "EUNKNOWN" for anything else. */
const char *attn_errname(int code);

#endif
