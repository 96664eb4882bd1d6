/* core/error.c: error names, messages and the error record. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

const char *attn_strerror(int code) {
  switch (code) {
  case 0:
    return "success";
#define ATTN__ERR_MSG(name, value, msg)                                        \
  case ATTN_##name:                                                            \
    return msg;
    ATTN_ERRNO_MAP(ATTN__ERR_MSG)
#undef ATTN__ERR_MSG
  }
  return "unknown error";
}

const char *attn_errname(int code) {
  switch (code) {
  case 0:
    return "OK";
#define ATTN__ERR_NAME(name, value, msg)                                       \
  case ATTN_##name:                                                            \
    return #name;
    ATTN_ERRNO_MAP(ATTN__ERR_NAME)
#undef ATTN__ERR_NAME
  }
  return "EUNKNOWN";
}

int attn__err(attn_error_t *err, int code, const char *field, const char *fmt,
              ...) {
  if (err == NULL)
    return code;
  err->code = code;
  snprintf(err->field, sizeof err->field, "%s", field ? field : "");
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err->message, sizeof err->message, fmt, ap);
  va_end(ap);
  return code;
}
