/* server/errors.c: the columns of the error table. See errors.h. */
#include "errors.h"

#include <stdarg.h>
#include <stdio.h>

static const struct {
  const char *name;
  int status, status_v2;
  attnd_reject_t reason;
} rows[ATTND_ERR_COUNT] = {
#define ROW(name, code, status, v2, reason)                                    \
  {code, status, v2, ATTND_REJECT_##reason},
    ATTND_ERROR_MAP(ROW)
#undef ROW
};

int attnd_error_vset(attnd_error_t *e, attnd_err_t code, const char *field,
                     const char *fmt, va_list ap) {
  e->code = code;
  e->has_id = 0;
  snprintf(e->field, sizeof e->field, "%s", field ? field : "");
  vsnprintf(e->message, sizeof e->message, fmt, ap);
  return -1;
}

int attnd_error_set(attnd_error_t *e, attnd_err_t code, const char *field,
                    const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  attnd_error_vset(e, code, field, fmt, ap);
  va_end(ap);
  return -1;
}

const char *attnd_error_name(attnd_err_t code) {
  return rows[code].name;
}

int attnd_error_status(attnd_err_t code) {
  return rows[code].status;
}

int attnd_error_status_v2(attnd_err_t code) {
  return rows[code].status_v2 ? rows[code].status_v2 : rows[code].status;
}

int attnd_error_on_v2(attnd_err_t code) {
  return rows[code].status_v2 != 0;
}

attnd_reject_t attnd_error_reason(attnd_err_t code) {
  return rows[code].reason;
}

attnd_reject_t attnd_status_reason(int status) {
  for (int c = 0; c < ATTND_ERR_COUNT; c++)
    if (rows[c].status == status)
      return rows[c].reason;
#define LIBRARY_ROW(code, reason)                                              \
  if (status == code)                                                          \
    return ATTND_REJECT_##reason;
  ATTND_LIBRARY_STATUS_MAP(LIBRARY_ROW)
#undef LIBRARY_ROW
  return ATTND_REJECT_NONE;
}
