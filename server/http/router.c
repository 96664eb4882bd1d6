/* server/http/router.c: a path's row in the route table. See router.h. */
#include <string.h>

#include "http/router.h"

/* The segments of a path or a pattern: one after each '/'. */
static size_t segments(const char *s) {
  size_t n = 0;
  for (; *s; s++)
    n += *s == '/';
  return n;
}

/* Whether `path` matches `pat`, with the parameters' values into m. One
 * pass over each: a "+" parameter takes the segments the rest of the
 * pattern leaves over, and every other token one segment; a parameter's
 * segments are never empty. */
static int match(const char *pat, const char *path, attnd_route_match_t *m) {
  size_t k = segments(pat), s = segments(path);
  int plus = strstr(pat, "+}") != NULL;
  if (path[0] != '/' || (plus ? s < k : s != k))
    return 0;
  size_t extra = s - k;
  const char *p = pat + 1, *u = path + 1;
  m->n_params = 0;
  for (;;) {
    size_t pn = strcspn(p, "/");
    if (p[0] == '{') {
      int many = pn >= 3 && p[pn - 2] == '+';
      const char *end = u;
      for (size_t i = 0; i < (many ? extra + 1 : 1); i++) {
        size_t seg = strcspn(end + (i ? 1 : 0), "/");
        if (seg == 0) /* no parameter has an empty segment */
          return 0;
        end += (i ? 1 : 0) + seg;
      }
      if (m->n_params == ATTND_ROUTE_MAX_PARAMS)
        return 0;
      m->params[m->n_params].name = p + 1;
      m->params[m->n_params].name_len = pn - 2 - (size_t)many;
      m->params[m->n_params].value = u;
      m->params[m->n_params].len = (size_t)(end - u);
      m->n_params++;
      u = end;
    } else {
      size_t un = strcspn(u, "/");
      if (un != pn || memcmp(u, p, pn) != 0)
        return 0;
      u += un;
    }
    p += pn;
    if (*p == 0)
      return *u == 0;
    if (*u != '/')
      return 0;
    p++;
    u++;
  }
}

int attnd_route_allows(const char *methods, const char *method) {
  size_t n = strlen(method);
  for (const char *a = methods; *a; a += strspn(a, ", ")) {
    size_t k = strcspn(a, ", ");
    if (k == n && strncmp(a, method, n) == 0)
      return 1;
    a += k;
  }
  return 0;
}

int attnd_route_find(const attnd_route_t *routes, size_t n, const char *path,
                     const char *method, attnd_route_match_t *m) {
  memset(m, 0, sizeof *m);
  size_t i = 0;
  while (i < n && !match(routes[i].pattern, path, m))
    i++;
  if (i == n)
    return 0;
  m->first = &routes[i];
  size_t len = 0;
  for (; i < n && strcmp(routes[i].pattern, m->first->pattern) == 0; i++) {
    const attnd_route_t *r = &routes[i];
    size_t k = strlen(r->methods);
    if (len + (len ? 2 : 0) + k < sizeof m->allow) {
      memcpy(m->allow + len, ", ", len ? 2 : 0);
      len += len ? 2 : 0;
      memcpy(m->allow + len, r->methods, k + 1);
      len += k;
    }
    m->cors |= (r->flags & ATTND_ROUTE_CORS) != 0;
    if (m->route == NULL && attnd_route_allows(r->methods, method))
      m->route = r;
  }
  return 1;
}

size_t attnd_route_methods(const attnd_route_t *routes, size_t n, char *out,
                           size_t cap) {
  size_t len = 0;
  int cors = 0;
  out[0] = 0;
  for (size_t i = 0; i <= n; i++) {
    const char *a = i < n ? routes[i].methods : cors ? "OPTIONS" : "";
    if (i < n)
      cors |= (routes[i].flags & ATTND_ROUTE_CORS) != 0;
    for (a += strspn(a, ", "); *a; a += strspn(a, ", ")) {
      size_t k = strcspn(a, ", ");
      char one[16];
      if (k < sizeof one) {
        memcpy(one, a, k);
        one[k] = 0;
        if (!attnd_route_allows(out, one) && len + (len ? 2 : 0) + k < cap) {
          memcpy(out + len, ", ", len ? 2 : 0);
          len += len ? 2 : 0;
          memcpy(out + len, one, k + 1);
          len += k;
        }
      }
      a += k;
    }
  }
  return len;
}
