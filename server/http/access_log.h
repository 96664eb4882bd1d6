/* server/http/access_log.h: one JSON line per finished request.
 *
 * Every string in the line (paths, ids, methods) is escaped, so each line
 * is valid JSON whatever a client sent. Any thread: a line is one write. */
#ifndef ATTND_ACCESS_LOG_H
#define ATTND_ACCESS_LOG_H

#include <stddef.h>
#include <stdio.h>

/* What one line says. Strings are borrowed; NULL `id` (or any other
 * string) logs "", but for `trace_id` and `parent_id`: those are the
 * caller's W3C trace context (attnd_traceparent_parse), logged both or
 * neither, as trace_id is NULL or not. `client_addr` is the peer's
 * address without its port (a proxy's, behind one). `complete`
 * is whether the whole reply went out (not: the client left, or stopped
 * reading until connection_timeout_s, while it was sent); bytes_out is the
 * reply's length either way. */
typedef struct attnd_access {
  const char *request_id, *trace_id, *parent_id, *id, *method, *path,
      *client_addr;
  int status, complete;
  size_t bytes_in, bytes_out;
  double queue_ms, compute_ms, total_ms;
} attnd_access_t;

/* Opens the log `spec` names into *f: "off" (NULL), "stderr", "stdout" or
 * a file appended to. Returns 0, or -1 with msg naming the key, the file
 * and why (the start then fails: lines sent elsewhere than configured
 * would be lost to whoever reads the file). Main thread, at start. */
int attnd_access_log_open(const char *spec, FILE **f, char *msg, size_t msz);
void attnd_access_log_close(FILE *f);

/* Writes the line for `a` to f (NULL: nothing) and flushes it. A line that
 * cannot be written is lost whole (what a file took of it is cut off
 * again), and said so on stderr: the first of a run of
 * them as {"event":"access_log_failed","error":...}, and the run's length
 * as {"event":"access_log_resumed","lost":n} once a line is written again.
 * The count is the process's: one access log at a time. */
void attnd_access_log_write(FILE *f, const attnd_access_t *a);

/* A traceparent's text, as the W3C Recommendation "Trace Context" (2021)
 * defines it: version "-" trace-id "-" parent-id "-" trace-flags, in
 * lowercase hex digits of 2, 32, 16 and 2, the ids not all zeros, the
 * version not ff. Version 00 is exactly that, 55 characters; a higher
 * version may add fields after a further "-", and is read for these four
 * (the spec's rule for a version it does not know). Spaces and tabs
 * around the value are skipped (HTTP's optional whitespace). On success
 * writes the two ids, NUL-terminated, into trace_id[33] and
 * parent_id[17] and returns 1; else returns 0 and writes nothing: a
 * receiver that cannot parse the header acts as if it were absent.
 * Linear, with no byte read past the value's NUL; any thread. */
#define ATTND_TRACE_ID_LEN 32
#define ATTND_PARENT_ID_LEN 16
int attnd_traceparent_parse(const char *v, char *trace_id, char *parent_id);

#endif
