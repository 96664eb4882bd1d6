/* server/http/assets.c: finding an embedded file. See assets.h. */
#include "http/assets.h"

#include <string.h>

const attnd_asset_t *attnd_asset_find(const char *path) {
  for (const attnd_asset_t *a = attnd_assets; a->path; a++)
    if (strcmp(a->path, path) == 0)
      return a;
  return NULL;
}
