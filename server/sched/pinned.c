/* server/sched/pinned.c: see pinned.h.
 *
 * The blocks in use are a list sorted by offset; a get walks the gaps
 * between them (first fit) and inserts, a put finds its block by binary
 * search and removes it, so freed neighbours merge by themselves. The
 * list grows by doubling and never shrinks while the pool lives. */
#include "sched/pinned.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attn.h"
#include "codec/mem.h"

typedef struct {
  size_t off, len;
} block_t;

static struct {
  pthread_mutex_t lock;
  attnd_host_memory_t mem;
  char *base; /* NULL: no pool */
  size_t bytes;
  block_t *used; /* sorted by off */
  size_t n, cap;
  size_t in_use, high;
  uint64_t served, missed;
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER};

int attnd_pinned_start(size_t bytes, const attnd_host_memory_t *m) {
  static const attnd_host_memory_t cuda = {attn_cuda_host_alloc,
                                           attn_cuda_host_free};
  bytes -= bytes % ATTND_PINNED_ALIGN;
  if (pool.base != NULL || bytes == 0)
    return -1;
  if (m == NULL)
    m = &cuda;
  char *base = m->alloc(bytes);
  if (base == NULL)
    return -1;
  pthread_mutex_lock(&pool.lock);
  pool.mem = *m;
  pool.base = base;
  pool.bytes = bytes;
  pool.n = pool.in_use = pool.high = 0;
  pool.served = pool.missed = 0;
  pthread_mutex_unlock(&pool.lock);
  return 0;
}

void attnd_pinned_stop(void) {
  pthread_mutex_lock(&pool.lock);
  if (pool.base)
    pool.mem.free(pool.base);
  free(pool.used);
  pool.base = NULL;
  pool.used = NULL;
  pool.bytes = pool.n = pool.cap = 0;
  pthread_mutex_unlock(&pool.lock);
}

/* Inserts {off, len} at index i of the list; -1 when it cannot grow. */
static int insert(size_t i, size_t off, size_t len) {
  if (pool.n == pool.cap) {
    size_t cap = pool.cap ? 2 * pool.cap : 64;
    block_t *u = realloc(pool.used, cap * sizeof *u);
    if (u == NULL)
      return -1;
    pool.used = u;
    pool.cap = cap;
  }
  memmove(pool.used + i + 1, pool.used + i, (pool.n - i) * sizeof *pool.used);
  pool.used[i] = (block_t){off, len};
  pool.n++;
  return 0;
}

void *attnd_pinned_get(size_t bytes) {
  if (bytes < ATTND_PINNED_MIN)
    return NULL;
  void *p = NULL;
  pthread_mutex_lock(&pool.lock);
  if (pool.base && bytes <= pool.bytes) {
    size_t len = (bytes + ATTND_PINNED_ALIGN - 1) / ATTND_PINNED_ALIGN *
                 ATTND_PINNED_ALIGN;
    size_t start = 0; /* the gap before block i */
    for (size_t i = 0; i <= pool.n; i++) {
      size_t end = i < pool.n ? pool.used[i].off : pool.bytes;
      if (end - start >= len) {
        if (insert(i, start, len) == 0) {
          p = pool.base + start;
          pool.in_use += len;
          if (pool.in_use > pool.high)
            pool.high = pool.in_use;
          pool.served++;
        }
        break;
      }
      if (i < pool.n)
        start = pool.used[i].off + pool.used[i].len;
    }
  }
  if (p == NULL && pool.base)
    pool.missed++;
  pthread_mutex_unlock(&pool.lock);
  return p;
}

int attnd_pinned_owns(const void *p) {
  /* base and bytes change only at start and stop, before and after every
   * request, so no lock */
  const char *c = p;
  return pool.base != NULL && c >= pool.base && c < pool.base + pool.bytes;
}

void attnd_pinned_put(void *p) {
  if (p == NULL)
    return;
  pthread_mutex_lock(&pool.lock);
  size_t off = (size_t)((char *)p - pool.base), lo = 0, hi = pool.n;
  while (lo < hi) { /* the first block at or past off */
    size_t mid = lo + (hi - lo) / 2;
    if (pool.used[mid].off < off)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo < pool.n && pool.used[lo].off == off) {
    pool.in_use -= pool.used[lo].len;
    memmove(pool.used + lo, pool.used + lo + 1,
            (pool.n - lo - 1) * sizeof *pool.used);
    pool.n--;
  } else {
    abort(); /* not a block's start: a bug, as a bad free() is */
  }
  pthread_mutex_unlock(&pool.lock);
}

void *attnd_tensor_alloc(size_t bytes, int *pinned) {
  void *p = attnd_pinned_get(bytes);
  if (pinned)
    *pinned = p != NULL;
  /* a block of the pool is out of the budget already; one from the heap
   * counts in the thread's meter (codec/mem.h), while a request decodes */
  return p ? p : attnd_mem_alloc(bytes ? bytes : 1);
}

void attnd_tensor_free(void *p) {
  if (attnd_pinned_owns(p))
    attnd_pinned_put(p);
  else
    attnd_mem_free(p);
}

void attnd_pinned_stats(attnd_pinned_stats_t *st) {
  pthread_mutex_lock(&pool.lock);
  *st = (attnd_pinned_stats_t){.bytes = (int64_t)pool.bytes,
                               .used = (int64_t)pool.in_use,
                               .high = (int64_t)pool.high,
                               .blocks = (int64_t)pool.n,
                               .served = pool.served,
                               .missed = pool.missed};
  pthread_mutex_unlock(&pool.lock);
}
