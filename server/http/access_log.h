/* server/http/access_log.h: one JSON line per finished request.
 *
 * Every string in the line (paths, ids, methods) is escaped, so each line
 * is valid JSON whatever a client sent. Any thread: a line is one write. */
#ifndef ATTND_ACCESS_LOG_H
#define ATTND_ACCESS_LOG_H

#include <stddef.h>
#include <stdio.h>

/* What one line says. Strings are borrowed; NULL `id` (or any other
 * string) logs "". `client_addr` is the peer's address without its port
 * (a proxy's, behind one). `complete`
 * is whether the whole reply went out (not: the client left, or stopped
 * reading until connection_timeout_s, while it was sent); bytes_out is the
 * reply's length either way. */
typedef struct attnd_access {
  const char *request_id, *id, *method, *path, *client_addr;
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

#endif
