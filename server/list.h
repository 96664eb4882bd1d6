/* server/list.h: the separated lists of the configuration (api_keys,
 * public_paths, cors_allow_origins) and of the key file. */
#ifndef ATTND_LIST_H
#define ATTND_LIST_H

#include <ctype.h>
#include <string.h>

/* Takes the next entry of the `sep`-separated list at *p: sets [*a, *b) to
 * it, without the white space around it (empty entries come back empty),
 * moves *p past its separator and returns 1; returns 0 at the end. */
static inline int attnd_list_next(const char **p, char sep, const char **a,
                                  const char **b) {
  if (**p == 0)
    return 0;
  const char *e = strchr(*p, sep);
  if (e == NULL)
    e = *p + strlen(*p);
  const char *s = *p, *t = e;
  while (s < t && isspace((unsigned char)*s))
    s++;
  while (t > s && isspace((unsigned char)t[-1]))
    t--;
  *a = s;
  *b = t;
  *p = *e ? e + 1 : e;
  return 1;
}

#endif
