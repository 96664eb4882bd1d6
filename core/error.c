/* core/error.c: error names, messages, input names and the error record. */
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

/* memset(err, 0) must mean "no field", and every spelling must fit in
 * attn_error_t.field whole. */
_Static_assert(ATTN_FIELD_NONE == 0, "ATTN_FIELD_NONE must be zero");
#define ATTN__FIELD_FITS(name, spelling)                                       \
  _Static_assert(sizeof(spelling) <= ATTN_ERROR_FIELD_MAX,                     \
                 "field name " spelling " too long for attn_error_t.field");
ATTN_FIELD_MAP(ATTN__FIELD_FITS)
#undef ATTN__FIELD_FITS

const char *attn_field_name(attn_field_t f) {
  static const char *const names[] = {
#define ATTN__FIELD_NAME(name, spelling) [ATTN_FIELD_##name] = spelling,
      ATTN_FIELD_MAP(ATTN__FIELD_NAME)
#undef ATTN__FIELD_NAME
  };
  if ((unsigned)f >= ATTN_FIELD_COUNT)
    return "unknown";
  return names[f];
}

int attn__err(attn_error_t *err, int code, attn_field_t field, const char *fmt,
              ...) {
  if (err == NULL)
    return code;
  err->code = code;
  err->field_id = field;
  snprintf(err->field, sizeof err->field, "%s", attn_field_name(field));
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err->message, sizeof err->message, fmt, ap);
  va_end(ap);
  return code;
}
