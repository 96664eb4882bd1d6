/* codec/mem.c: see mem.h. */
#include "mem.h"

#include <malloc.h>
#include <stdlib.h>

static _Thread_local attnd_meter_t *meter;

attnd_meter_t *attnd_meter_set(attnd_meter_t *m) {
  attnd_meter_t *old = meter;
  meter = m;
  return old;
}

static int64_t usable(void *p) {
  return (int64_t)malloc_usable_size(p);
}

/* Takes what m->live + extra needs beyond what m has taken: 0, or -1 when
 * `take` refuses it. */
static int cover(attnd_meter_t *m, int64_t extra) {
  int64_t want = m->live + extra;
  if (want <= m->taken)
    return 0;
  if (m->take(m->ctx, want - m->taken) < 0)
    return -1;
  m->taken = want;
  return 0;
}

void *attnd_mem_alloc(size_t bytes) {
  attnd_meter_t *m = meter;
  if (m == NULL)
    return malloc(bytes);
  if (bytes > INT64_MAX / 2 || cover(m, (int64_t)bytes) < 0)
    return NULL;
  void *p = malloc(bytes);
  if (p == NULL)
    return NULL;
  m->live += usable(p);
  if (cover(m, 0) < 0) { /* malloc's rounding, past what is left */
    m->live -= usable(p);
    free(p);
    return NULL;
  }
  return p;
}

void *attnd_mem_realloc(void *p, size_t bytes) {
  attnd_meter_t *m = meter;
  if (m == NULL)
    return realloc(p, bytes);
  int64_t old = p ? usable(p) : 0;
  /* growing, the block may move: the new one is held beside the old until
   * realloc has copied it */
  if (bytes > INT64_MAX / 2 ||
      ((int64_t)bytes > old && cover(m, (int64_t)bytes) < 0))
    return NULL;
  void *q = realloc(p, bytes);
  if (q == NULL)
    return NULL;
  m->live += usable(q) - old;
  /* malloc's rounding: the block is made, so taken now if there is room,
   * else by the next call */
  if (m->live > m->taken && m->take(m->ctx, m->live - m->taken) == 0)
    m->taken = m->live;
  return q;
}

void attnd_mem_free(void *p) {
  attnd_meter_t *m = meter;
  if (m && p)
    m->live -= usable(p);
  free(p);
}
