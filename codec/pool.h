/* codec/pool.h: a few freed blocks of one size, kept for reuse.
 *
 * For the structs every request makes and frees (a request, the HTTP
 * layer's state of one): attnd_pool_get hands back a kept block or makes
 * one, attnd_pool_put keeps at most `max` and frees the rest. A block is
 * ATTND_ARENA_ALIGN-aligned and comes back uninitialised; under
 * AddressSanitizer a kept block is poisoned, so a use after its put is
 * still reported. Any thread (a mutex, held for a few instructions). */
#ifndef ATTND_CODEC_POOL_H
#define ATTND_CODEC_POOL_H

#include <pthread.h>
#include <stddef.h>

#define ATTND_POOL_MAX 64

typedef struct attnd_pool {
  pthread_mutex_t lock;
  size_t size; /* of a block */
  int max, n;  /* n of at most max (<= ATTND_POOL_MAX) kept */
  void *kept[ATTND_POOL_MAX];
} attnd_pool_t;

/* A pool of blocks of `size` bytes keeping up to `max`, as a static
 * initialiser. */
#define ATTND_POOL_INIT(size_, max_)                                           \
  { .lock = PTHREAD_MUTEX_INITIALIZER, .size = (size_), .max = (max_) }

/* A block: a kept one or a new one; NULL when out of memory. */
void *attnd_pool_get(attnd_pool_t *pool);
/* Gives p (from attnd_pool_get; NULL is fine) back. */
void attnd_pool_put(attnd_pool_t *pool, void *p);

#endif
