/* codec/pool.c: freed blocks kept for reuse. See pool.h. */
#include "pool.h"

#include <stdlib.h>

#include "arena.h"

void *attnd_pool_get(attnd_pool_t *pool) {
  void *p = NULL;
  pthread_mutex_lock(&pool->lock);
  if (pool->n > 0)
    p = pool->kept[--pool->n];
  pthread_mutex_unlock(&pool->lock);
  if (p) {
    ATTND_ARENA_UNPOISON(p, pool->size);
    return p;
  }
  size_t size = (pool->size + ATTND_ARENA_ALIGN - 1) / ATTND_ARENA_ALIGN *
                ATTND_ARENA_ALIGN;
  return aligned_alloc(ATTND_ARENA_ALIGN, size);
}

void attnd_pool_put(attnd_pool_t *pool, void *p) {
  if (p == NULL)
    return;
  pthread_mutex_lock(&pool->lock);
  int keep = pool->n < pool->max && pool->n < ATTND_POOL_MAX;
  if (keep) {
    ATTND_ARENA_POISON(p, pool->size);
    pool->kept[pool->n++] = p;
  }
  pthread_mutex_unlock(&pool->lock);
  if (!keep)
    free(p);
}
