/* server/http/cors.c: CORS headers. See cors.h. */
#include "http/cors.h"
#include "list.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* scheme "://" host [":" port], with no path, query, space or comma. */
static int is_origin(const char *s, size_t n) {
  const char *sep = memmem(s, n, "://", 3);
  if (sep == NULL || sep == s || sep + 3 == s + n)
    return 0;
  for (const char *p = s; p < s + n; p++)
    if (*p <= ' ' || *p >= 0x7f || *p == ',' || *p == '"' ||
        (p >= sep + 3 && (*p == '/' || *p == '?' || *p == '#')))
      return 0;
  return 1;
}

_Thread_local uint64_t attnd__cors_compares;

/* Origins in the order attnd_cors_allowed searches them: case-insensitive,
 * as they are compared. */
static int by_origin(const void *a, const void *b) {
  attnd__cors_compares++;
  return strcasecmp(*(char *const *)a, *(char *const *)b);
}

int attnd_cors_init(attnd_cors_t *c, const char *list, char *msg, size_t msz) {
  memset(c, 0, sizeof *c);
  size_t cap = 2;
  for (const char *p = list; *p; p++)
    cap += *p == ',';
  if ((c->origins = calloc(cap, sizeof *c->origins)) == NULL)
    return snprintf(msg, msz, "cors_allow_origins: out of memory"), -1;
  size_t k = 0;
  const char *p = list, *a, *b;
  for (int pos = 1; attnd_list_next(&p, ',', &a, &b); pos++) {
    if (a == b)
      continue;
    if (b - a == 1 && *a == '*') {
      c->any = 1;
    } else if (!is_origin(a, (size_t)(b - a))) {
      return snprintf(msg, msz,
                      "cors_allow_origins: entry %d '%.*s' is not an origin; "
                      "expected scheme://host[:port] with no path, or *",
                      pos, (int)(b - a > 200 ? 200 : b - a), a),
             -1;
    } else if ((c->origins[k++] = strndup(a, (size_t)(b - a))) == NULL) {
      return snprintf(msg, msz, "cors_allow_origins: out of memory"), -1;
    }
  }
  /* sorted, so that each request's Origin costs log(origins) comparisons,
   * not one per origin: a list of thousands is searched per request */
  qsort(c->origins, k, sizeof *c->origins, by_origin);
  c->n = k;
  c->enabled = c->any || k > 0;
  return 0;
}

void attnd_cors_free(attnd_cors_t *c) {
  for (size_t i = 0; c->origins && c->origins[i]; i++)
    free(c->origins[i]);
  free(c->origins);
  memset(c, 0, sizeof *c);
}

int attnd_cors_allowed(const attnd_cors_t *c, const char *origin) {
  if (!c->enabled || origin == NULL)
    return 0;
  if (c->any)
    return 1;
  return bsearch(&origin, c->origins, c->n, sizeof *c->origins, by_origin) !=
         NULL;
}

void attnd_cors_headers(const attnd_cors_t *c, const char *origin,
                        int preflight, const char *methods,
                        attnd_cors_add_fn add, void *arg) {
  if (!c->enabled)
    return;
  /* The Fetch standard's "CORS protocol and HTTP caches": a list makes
   * the reply differ by Origin, so caches must key on it; "*" is static,
   * and goes on every reply, with no Origin too, so that none differs (a
   * reply kept from a request without Origin may serve a page's). */
  if (!c->any)
    add(arg, "Vary", "Origin");
  if (!c->any && !attnd_cors_allowed(c, origin))
    return;
  add(arg, "Access-Control-Allow-Origin", c->any ? "*" : origin);
  if (!preflight) {
    add(arg, "Access-Control-Expose-Headers",
        "Server-Timing, X-Request-Id, Retry-After, "
        "Inference-Header-Content-Length");
    return;
  }
  char m[64];
  snprintf(m, sizeof m, "%s, OPTIONS", methods ? methods : "GET, HEAD, POST");
  add(arg, "Access-Control-Allow-Methods", m);
  /* every request header attnd reads that is not CORS-safelisted: a
   * browser sends none that the preflight does not allow (a page that
   * traces its calls sends traceparent, and its preflight would fail) */
  add(arg, "Access-Control-Allow-Headers",
      "Authorization, Content-Type, Content-Encoding, "
      "Inference-Header-Content-Length, X-Request-Id, traceparent");
  add(arg, "Access-Control-Max-Age", "600");
}
