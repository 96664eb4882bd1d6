/* server/http/cors.h: Cross-Origin Resource Sharing, for browsers calling
 * attnd.
 *
 * cors_allow_origins is "" (off: no CORS header is ever sent, and OPTIONS
 * gets 405 like any other method not allowed), "*" (any origin), or a
 * comma-separated list of origins ("https://app.example.com,
 * http://localhost:3000"), compared case-insensitively with a request's
 * Origin header. A preflight (OPTIONS) is answered 204 with the route's
 * methods and the request headers a caller may send (Authorization,
 * Content-Type, Content-Encoding, Inference-Header-Content-Length,
 * X-Request-Id); every other reply to an allowed origin names it and
 * exposes Server-Timing, X-Request-Id, Retry-After and
 * Inference-Header-Content-Length to the page's script.
 *
 * Pure: the headers go out through a callback, so that
 * tests/check_cors.c tests it without a server. */
#ifndef ATTND_CORS_H
#define ATTND_CORS_H

#include <stddef.h>
#include <stdint.h>

typedef struct attnd_cors {
  int enabled;    /* cors_allow_origins is not empty */
  int any;        /* "*" */
  char **origins; /* owned, NULL-terminated, sorted ignoring case */
  size_t n;       /* how many */
} attnd_cors_t;

/* For tests: the origins this thread has compared (sorting them at init
 * and searching them for a request's Origin). */
extern _Thread_local uint64_t attnd__cors_compares;

/* Parses cors_allow_origins. Returns 0, or -1 with msg naming the entry
 * that is not an origin (scheme://host[:port], no path); `c` needs
 * attnd_cors_free either way. Main thread, at start. */
int attnd_cors_init(attnd_cors_t *c, const char *list, char *msg,
                    size_t msg_size);

void attnd_cors_free(attnd_cors_t *c);

/* Whether a request with this Origin header (NULL: none) gets CORS
 * headers. Any thread. */
int attnd_cors_allowed(const attnd_cors_t *c, const char *origin);

typedef void (*attnd_cors_add_fn)(void *arg, const char *name,
                                  const char *value);

/* Calls add for each CORS header of a reply to a request with this Origin
 * header (NULL: none): none when CORS is off; Vary: Origin whenever the
 * answer depends on the origin (a list); and, for an allowed origin (with
 * "*", every request, Origin or none), the allowed origin and either the
 * preflight's headers (`preflight`, with `methods` the route's methods,
 * OPTIONS added) or the exposed headers.
 * Values are borrowed for the call only. Any thread. */
void attnd_cors_headers(const attnd_cors_t *c, const char *origin,
                        int preflight, const char *methods,
                        attnd_cors_add_fn add, void *arg);

#endif
