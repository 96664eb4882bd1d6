/* server/http/assets.h: the files attnd serves from its own binary (the API
 * document, and the page's files), embedded at build time by tools/embed.c
 * into build/gen/assets.c. Read-only; any thread. */
#ifndef ATTND_ASSETS_H
#define ATTND_ASSETS_H

#include <stddef.h>

typedef struct attnd_asset {
  const char *path;         /* the URL path: "/openapi.json" */
  const char *content_type; /* from the file's extension */
  const unsigned char *data;
  size_t len;
} attnd_asset_t;

/* Every asset, ended by one whose path is NULL. */
extern const attnd_asset_t attnd_assets[];

/* The asset served at `path`, or NULL. */
const attnd_asset_t *attnd_asset_find(const char *path);

#endif
