/* server/store/session.c: the store of KV-cache sessions. See session.h.
 *
 * One mutex guards everything here: the table of sessions, the LRU list of
 * idle ones, the pool and the steps waiting their turn. A step's pages are
 * written by the core while it computes, outside the lock: they are its
 * session's alone then (prepare copies a shared last page first), and
 * nothing else changes a busy session's page table (truncate waits for
 * idleness, eviction never picks a busy session, delete frees the table
 * only after the step ends).
 *
 * The pools: the host pool holds cpu sessions' pages, each its data (a
 * shape's attn_kv_page_floats, rounded up to 64 bytes) and a 64-byte
 * header, and every session's fixed cost, within pool_bytes; the device
 * pool holds cuda sessions' pages, their data in GPU memory (the header
 * stays in host memory, uncounted) within the GPU's budget, which cuda
 * requests share. Both work alike, by one code path: a page no session
 * holds goes to its pool's free list of its size, and is reused (so a
 * device page never reaches a host session, nor the reverse); free pages
 * of other sizes are given back to the allocator when a page of a new size
 * does not fit, and idle sessions whose pages live in that pool are
 * evicted, least recently used first, when that is not enough. */
#include "store/session.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "codec/util.h"
#include "sched/request.h"

#define SESSION_COST ATTND_SESSION_COST
#define PAGE_HDR 64
#define TOMBSTONES 4096
#define SIZE_CLASSES 8

/* A page's header, in host memory for both kinds; its data, `bytes` less
 * its pool's header, is host or device memory. */
typedef struct page {
  float *data;
  int ref;
  unsigned mark; /* attnd_sessions_stats's epoch, to count it once */
  size_t bytes;  /* what its pool counts for it */
  struct page *next_free;
} page_t;

struct attnd_session {
  char id[33];
  uint64_t hash;
  attnd_session_shape_t shape;
  struct pool *pool; /* where its pages live: its backend's */
  size_t page_bytes; /* what its pool counts for each page */
  int64_t len, max_tokens, ttl_s;
  double created, used; /* attnd_now_ms */
  page_t **pages;
  float **data; /* each page's data: the core's page table */
  size_t n_pages, cap_pages;
  float k_absmax;
  int refs; /* the store's while live, and one per step that holds it */
  int live;
  int busy; /* a step has its turn */
  attnd_request_t *qhead, *qtail;
  attnd_session_t *lru_prev, *lru_next; /* while live and idle */
  attnd_session_t *hnext;
  attnd_session_t *lo, *hi; /* the id tree's */
};

typedef struct size_class {
  size_t bytes;
  page_t *free;
  int64_t n_free;
} size_class_t;

/* Pages of one kind of memory, and what they count against: `cap` (the
 * host pool), or `budget` (the device pool: the GPU's, shared with cuda
 * requests). */
typedef struct pool {
  const attnd_device_memory_t *mem;
  attnd_budget_t *budget;  /* NULL: within cap */
  int64_t cap, held, used; /* held: used + free pages */
  size_t hdr;              /* counted per page beside its data */
  size_class_t classes[SIZE_CLASSES];
} pool_t;

struct attnd_sessions {
  uv_mutex_t mu;
  attnd_session_t **buckets;
  size_t n_buckets, count;
  attnd_session_t *by_id; /* the id tree's root: the list's order */
  uint64_t hash_key[2];   /* random, for hash_id */
  attnd_session_t *lru_head, *lru_tail; /* head: the least recently used */
  pool_t host, device;
  attnd_device_memory_t host_mem, device_mem;
  attnd_budget_t no_device; /* the device pool's budget when given none */
  struct {
    uint64_t hash;
    char id[33];
  } evicted[TOMBSTONES];
  size_t n_evicted;
  double last_sweep;
  unsigned epoch;
  attnd_sessions_stats_t stats;
};

/* ---- ids and the table ----------------------------------------------------
 */

/* SipHash-2-4 of p[0..n) under key k (Aumasson and Bernstein, 2012; the
 * paper's test vector: key 00..0f, message 00..0e, a129ca6149be45e5). */
#define ROTL(x, b) (((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                               \
  do {                                                                         \
    v0 += v1, v1 = ROTL(v1, 13), v1 ^= v0, v0 = ROTL(v0, 32);                  \
    v2 += v3, v3 = ROTL(v3, 16), v3 ^= v2;                                     \
    v0 += v3, v3 = ROTL(v3, 21), v3 ^= v0;                                     \
    v2 += v1, v1 = ROTL(v1, 17), v1 ^= v2, v2 = ROTL(v2, 32);                  \
  } while (0)
static uint64_t siphash(const unsigned char *p, size_t n, const uint64_t k[2]) {
  uint64_t v0 = 0x736f6d6570736575ull ^ k[0], v1 = 0x646f72616e646f6dull ^ k[1];
  uint64_t v2 = 0x6c7967656e657261ull ^ k[0], v3 = 0x7465646279746573ull ^ k[1];
  uint64_t m, last = (uint64_t)n << 56;
  for (; n >= 8; p += 8, n -= 8) {
    m = 0;
    for (int i = 7; i >= 0; i--) /* little-endian, on any host */
      m = m << 8 | p[i];
    v3 ^= m;
    SIPROUND;
    SIPROUND;
    v0 ^= m;
  }
  for (size_t i = 0; i < n; i++)
    last |= (uint64_t)p[i] << (8 * i);
  v3 ^= last;
  SIPROUND;
  SIPROUND;
  v0 ^= last;
  v2 ^= 0xff;
  SIPROUND;
  SIPROUND;
  SIPROUND;
  SIPROUND;
  return v0 ^ v1 ^ v2 ^ v3;
}

/* Ids are the clients' own (PUT /v1/sessions/{id}), so their hash is keyed
 * with the store's random key: with an unkeyed one (FNV-1a was), ids found
 * offline to share their low bits all fall in one bucket, and every lookup
 * walks every session. */
static uint64_t hash_id(const attnd_sessions_t *st, const char *id) {
  return siphash((const unsigned char *)id, strlen(id), st->hash_key);
}

/* A fresh id: 32 random hex digits, or, for a fork, its parent's first 16
 * and 16 random ones (a load balancer hashing on the first 16 keeps a
 * family on one replica). */
static void new_id(char *id, const char *parent) {
  uint64_t a = attnd_random_u64(), b = attnd_random_u64();
  snprintf(id, 33, "%016llx%016llx", (unsigned long long)a,
           (unsigned long long)b);
  if (parent)
    memcpy(id, parent, 16);
}

int attnd_session_id_ok(const char *id) {
  size_t n = 0;
  for (; id[n]; n++)
    if (!((id[n] >= '0' && id[n] <= '9') || (id[n] >= 'a' && id[n] <= 'f')))
      return 0;
  return n == 32;
}

/* Forgets that `id` was evicted (a session of that id is live again). */
static void tombstone_clear(attnd_sessions_t *st, const char *id) {
  size_t n = st->n_evicted < TOMBSTONES ? st->n_evicted : TOMBSTONES;
  for (size_t i = 0; i < n; i++)
    if (strcmp(st->evicted[i].id, id) == 0)
      st->evicted[i].id[0] = 0, st->evicted[i].hash = 0;
}

_Thread_local uint64_t attnd__session_probes;

static attnd_session_t *find(attnd_sessions_t *st, const char *id) {
  if (strlen(id) != 32)
    return NULL;
  uint64_t h = hash_id(st, id);
  for (attnd_session_t *s = st->buckets[h & (st->n_buckets - 1)]; s;
       s = s->hnext) {
    attnd__session_probes++;
    if (s->hash == h && strcmp(s->id, id) == 0)
      return s;
  }
  return NULL;
}

static void tree_insert(attnd_session_t **t, attnd_session_t *s);
static void tree_remove(attnd_session_t **t, attnd_session_t *s);

static int table_insert(attnd_sessions_t *st, attnd_session_t *s) {
  if (st->count + 1 > st->n_buckets) {
    size_t n = st->n_buckets * 2;
    attnd_session_t **b = calloc(n, sizeof *b);
    if (b == NULL)
      return -1;
    for (size_t i = 0; i < st->n_buckets; i++)
      for (attnd_session_t *x = st->buckets[i], *next; x; x = next) {
        next = x->hnext;
        x->hnext = b[x->hash & (n - 1)];
        b[x->hash & (n - 1)] = x;
      }
    free(st->buckets);
    st->buckets = b;
    st->n_buckets = n;
  }
  attnd_session_t **head = &st->buckets[s->hash & (st->n_buckets - 1)];
  s->hnext = *head;
  *head = s;
  st->count++;
  tree_insert(&st->by_id, s);
  return 0;
}

static void table_remove(attnd_sessions_t *st, attnd_session_t *s) {
  attnd_session_t **p = &st->buckets[s->hash & (st->n_buckets - 1)];
  while (*p != s)
    p = &(*p)->hnext;
  *p = s->hnext;
  st->count--;
  tree_remove(&st->by_id, s);
}

/* ---- the id tree ---------------------------------------------------------
 *
 * GET /v1/sessions pages through the sessions in id order. The table has
 * no order, and a page found by walking it costs every session, so that
 * listing them all took sessions squared over the page size. The tree is
 * a treap: a search tree by id that is also a heap by the id's hash, which
 * is keyed (hash_id) and so random to the clients: its depth is
 * logarithmic whatever ids they choose. */

_Thread_local uint64_t attnd__session_list_visits;

/* Puts s into the tree at *t. Its depth, O(log n), bounds the recursion. */
static void tree_insert(attnd_session_t **t, attnd_session_t *s) {
  attnd_session_t *x = *t;
  if (x == NULL) {
    s->lo = s->hi = NULL;
    *t = s;
  } else if (strcmp(s->id, x->id) < 0) {
    tree_insert(&x->lo, s);
    if (x->lo->hash > x->hash) { /* rotate x->lo up */
      *t = x->lo;
      x->lo = (*t)->hi;
      (*t)->hi = x;
    }
  } else {
    tree_insert(&x->hi, s);
    if (x->hi->hash > x->hash) { /* rotate x->hi up */
      *t = x->hi;
      x->hi = (*t)->lo;
      (*t)->lo = x;
    }
  }
}

/* One tree of two, every id of lo before every id of hi. */
static attnd_session_t *tree_join(attnd_session_t *lo, attnd_session_t *hi) {
  if (lo == NULL || hi == NULL)
    return lo ? lo : hi;
  if (lo->hash > hi->hash) {
    lo->hi = tree_join(lo->hi, hi);
    return lo;
  }
  hi->lo = tree_join(lo, hi->lo);
  return hi;
}

/* Takes s, which is in the tree at *t, out of it. */
static void tree_remove(attnd_session_t **t, attnd_session_t *s) {
  while (*t != s)
    t = strcmp(s->id, (*t)->id) < 0 ? &(*t)->lo : &(*t)->hi;
  *t = tree_join(s->lo, s->hi);
  s->lo = s->hi = NULL;
}

/* Appends to h[*n..cap) the sessions of the tree at t whose ids sort after
 * `after`, in id order, until h is full: the path down to `after`, then
 * the page itself. */
static void tree_after(const attnd_session_t *t, const char *after,
                       attnd_session_t **h, size_t *n, size_t cap) {
  while (t && *n < cap) {
    attnd__session_list_visits++;
    if (strcmp(t->id, after) <= 0) {
      t = t->hi;
      continue;
    }
    tree_after(t->lo, after, h, n, cap);
    if (*n < cap)
      h[(*n)++] = (attnd_session_t *)t;
    t = t->hi;
  }
}

/* ---- the LRU list of idle sessions ----------------------------------------
 */

static void lru_remove(attnd_sessions_t *st, attnd_session_t *s) {
  if (s->lru_prev)
    s->lru_prev->lru_next = s->lru_next;
  else if (st->lru_head == s)
    st->lru_head = s->lru_next;
  if (s->lru_next)
    s->lru_next->lru_prev = s->lru_prev;
  else if (st->lru_tail == s)
    st->lru_tail = s->lru_prev;
  s->lru_prev = s->lru_next = NULL;
}

static void lru_push(attnd_sessions_t *st, attnd_session_t *s) {
  s->lru_prev = st->lru_tail;
  s->lru_next = NULL;
  if (st->lru_tail)
    st->lru_tail->lru_next = s;
  else
    st->lru_head = s;
  st->lru_tail = s;
}

static int idle(const attnd_session_t *s) {
  return s->live && !s->busy && s->qhead == NULL;
}

/* ---- the pools ------------------------------------------------------------
 */

static void *host_alloc(size_t bytes) {
  return aligned_alloc(64, bytes);
}

static int host_copy(void *dst, const void *src, size_t bytes) {
  memcpy(dst, src, bytes);
  return 0;
}

static size_class_t *class_of(pool_t *pl, size_t bytes) {
  for (int i = 0; i < SIZE_CLASSES; i++)
    if (pl->classes[i].bytes == bytes)
      return &pl->classes[i];
  for (int i = 0; i < SIZE_CLASSES; i++) /* a class with no free page left */
    if (pl->classes[i].bytes == 0 || pl->classes[i].n_free == 0) {
      pl->classes[i].bytes = bytes;
      return &pl->classes[i];
    }
  return NULL;
}

/* Counts `bytes` more as held by pl: within its cap, or taken from its
 * budget. Returns 0, or -1 (nothing taken) when they do not fit. */
static int pool_reserve(pool_t *pl, int64_t bytes) {
  if (pl->budget)
    return attnd_budget_take(pl->budget, bytes, &pl->held);
  if (pl->held + bytes > pl->cap)
    return -1;
  pl->held += bytes;
  return 0;
}

static void pool_unreserve(pool_t *pl, int64_t bytes) {
  pl->held -= bytes;
  if (pl->budget) {
    int64_t give = bytes;
    attnd_budget_give(pl->budget, &give);
  }
}

/* Gives page p's memory back to the allocator and to pl's count. */
static void page_destroy(pool_t *pl, page_t *p) {
  pool_unreserve(pl, (int64_t)p->bytes);
  pl->mem->free(p->data);
  free(p);
}

static void page_release(pool_t *pl, page_t *p) {
  if (--p->ref > 0)
    return;
  pl->used -= (int64_t)p->bytes;
  size_class_t *c = class_of(pl, p->bytes);
  if (c == NULL) { /* every class busy with other sizes: give it back */
    page_destroy(pl, p);
    return;
  }
  p->next_free = c->free;
  c->free = p;
  c->n_free++;
}

/* Gives every free page of pl of other sizes than `keep` back to the
 * allocator. Returns how many. */
static int drop_free(pool_t *pl, size_t keep) {
  int n = 0;
  for (int i = 0; i < SIZE_CLASSES; i++) {
    size_class_t *c = &pl->classes[i];
    if (c->bytes == keep)
      continue;
    while (c->free) {
      page_t *p = c->free;
      c->free = p->next_free;
      page_destroy(pl, p);
      n++;
    }
    c->n_free = 0;
  }
  return n;
}

static void session_unref(attnd_sessions_t *st, attnd_session_t *s);
static void end_session(attnd_sessions_t *st, attnd_session_t *s, int evicted);
static int expired(const attnd_session_t *s, double now);

/* Evicts the least recently used idle session other than `keep` whose
 * pages live in `pl` (NULL: any session, as each holds its cost in the
 * host pool). One past its ttl_s that no sweep has ended yet ends as
 * expired, not evicted: its id answers 404, as docs/sessions.md says.
 * Returns whether there was one. */
static int evict_one(attnd_sessions_t *st, const attnd_session_t *keep,
                     const pool_t *pl) {
  for (attnd_session_t *s = st->lru_head; s; s = s->lru_next)
    if (s != keep && (pl == NULL || s->pool == pl)) {
      int due = expired(s, attnd_now_ms());
      st->stats.expired += due;
      end_session(st, s, !due);
      return 1;
    }
  return 0;
}

/* Takes `bytes` of the host pool (a session's cost), evicting idle
 * sessions other than `keep` when it is short. Returns 0 or -1. */
static int pool_take(attnd_sessions_t *st, int64_t bytes,
                     const attnd_session_t *keep) {
  while (pool_reserve(&st->host, bytes) < 0)
    if (drop_free(&st->host, 0) == 0 && !evict_one(st, keep, NULL))
      return -1;
  st->host.used += bytes;
  return 0;
}

/* A page of `bytes` (pl's header included) from pl: from its free list, or
 * new. When pl is short (or its allocator is), free pages of other sizes
 * go back first, then idle sessions of pl other than `keep` are evicted.
 * NULL when nothing is left to give back. */
static page_t *page_new(attnd_sessions_t *st, pool_t *pl, size_t bytes,
                        const attnd_session_t *keep) {
  for (;;) {
    size_class_t *c = class_of(pl, bytes);
    if (c && c->free) {
      page_t *p = c->free;
      c->free = p->next_free;
      c->n_free--;
      p->ref = 1;
      p->mark = 0;
      pl->used += (int64_t)bytes;
      return p;
    }
    if (pool_reserve(pl, (int64_t)bytes) == 0) {
      page_t *p = malloc(sizeof *p);
      float *data = p ? pl->mem->alloc(bytes - pl->hdr) : NULL;
      if (data) {
        *p = (page_t){.data = data, .ref = 1, .bytes = bytes};
        pl->used += (int64_t)bytes;
        return p;
      }
      free(p);
      pool_unreserve(pl, (int64_t)bytes);
    }
    /* short: other sizes' free pages, then an idle session, whose pages
     * may then be free: look again */
    if (drop_free(pl, bytes) == 0 && !evict_one(st, keep, pl))
      return NULL;
  }
}

/* ---- sessions -------------------------------------------------------------
 */

static void session_free(attnd_sessions_t *st, attnd_session_t *s) {
  for (size_t i = 0; i < s->n_pages; i++)
    page_release(s->pool, s->pages[i]);
  free(s->pages);
  free(s->data);
  attnd_layer_set_unref(s->shape.layers);
  pool_unreserve(&st->host, SESSION_COST);
  st->host.used -= SESSION_COST;
  free(s);
}

static void session_unref(attnd_sessions_t *st, attnd_session_t *s) {
  if (--s->refs == 0)
    session_free(st, s);
}

/* Takes s out of the store (deleted, expired or evicted); it is freed once
 * no step holds it. An evicted id is remembered, to answer 410. */
static void end_session(attnd_sessions_t *st, attnd_session_t *s, int evicted) {
  if (evicted) {
    size_t k = st->n_evicted++ % TOMBSTONES;
    st->evicted[k].hash = s->hash;
    memcpy(st->evicted[k].id, s->id, sizeof s->id);
    st->stats.evicted_lru++;
  }
  if (idle(s))
    lru_remove(st, s);
  table_remove(st, s);
  s->live = 0;
  session_unref(st, s);
}

static int expired(const attnd_session_t *s, double now) {
  return idle(s) && now - s->used > (double)s->ttl_s * 1000.0;
}

/* Ends every expired session, at most once a second. */
static void sweep(attnd_sessions_t *st, double now) {
  if (now - st->last_sweep < 1000.0)
    return;
  st->last_sweep = now;
  for (attnd_session_t *s = st->lru_head, *next; s; s = next) {
    next = s->lru_next;
    if (expired(s, now)) {
      st->stats.expired++;
      end_session(st, s, 0);
    }
  }
}

/* The live session `id`, or NULL with err: 410 when it was evicted, 404
 * when it never was, was deleted, or expired (ended now if due). */
static attnd_session_t *lookup(attnd_sessions_t *st, const char *id,
                               attnd_error_t *err) {
  double now = attnd_now_ms();
  sweep(st, now);
  attnd_session_t *s = find(st, id);
  if (s && expired(s, now)) {
    st->stats.expired++;
    end_session(st, s, 0);
    s = NULL;
  }
  if (s)
    return s;
  uint64_t h = hash_id(st, id);
  size_t n = st->n_evicted < TOMBSTONES ? st->n_evicted : TOMBSTONES;
  for (size_t i = 0; i < n; i++)
    if (st->evicted[i].hash == h && strcmp(st->evicted[i].id, id) == 0) {
      attnd_error_set(err, ATTND_ERR_SESSION_EVICTED, "session",
                      "session %.40s was evicted to make room in the KV "
                      "cache; create a new one (and send its prompt again)",
                      id);
      return NULL;
    }
  attnd_error_set(err, ATTND_ERR_UNKNOWN_SESSION, "session",
                  "session %.40s does not exist: it never did, was deleted, or "
                  "ended after its ttl_s unused",
                  id);
  return NULL;
}

static void info_of(const attnd_sessions_t *st, const attnd_session_t *s,
                    attnd_session_info_t *in) {
  double now = attnd_now_ms();
  memset(in, 0, sizeof *in);
  memcpy(in->id, s->id, sizeof in->id);
  if (s->shape.layer)
    snprintf(in->layer, sizeof in->layer, "%s", s->shape.layer->name);
  in->H = s->shape.H;
  in->Hkv = s->shape.Hkv;
  in->Dh = s->shape.Dh;
  in->Dv = s->shape.Dv;
  in->rope = s->shape.rope;
  in->backend = s->shape.backend;
  in->length = s->len;
  in->max_tokens = s->max_tokens;
  in->ttl_s = s->ttl_s;
  for (size_t i = 0; i < s->n_pages; i++)
    in->shared_pages += s->pages[i]->ref > 1;
  in->pages = (int64_t)s->n_pages;
  /* what pool_take and page_new took for it, as kv_bytes_used (and, for
   * a cuda session's pages, kv_device_bytes_used) count */
  int64_t pages = (int64_t)(s->n_pages * s->page_bytes);
  in->bytes = SESSION_COST + pages;
  in->device_bytes = s->pool == &st->device ? pages : 0;
  in->age_s = (now - s->created) / 1000.0;
  in->idle_s = s->busy ? 0 : (now - s->used) / 1000.0;
  in->expires_in_s = (double)s->ttl_s - in->idle_s;
  in->busy = s->busy;
  for (const attnd_request_t *r = s->qhead; r; r = r->session_next)
    in->queued++;
}

/* Grows s's page table to hold n pages. */
static int reserve_pages(attnd_session_t *s, size_t n) {
  if (n <= s->cap_pages)
    return 0;
  size_t cap = s->cap_pages ? s->cap_pages : 4;
  while (cap < n)
    cap *= 2;
  page_t **p = realloc(s->pages, cap * sizeof *p);
  if (p == NULL)
    return -1;
  s->pages = p;
  float **d = realloc(s->data, cap * sizeof *d);
  if (d == NULL)
    return -1;
  s->data = d;
  s->cap_pages = cap;
  return 0;
}

/* The bytes of a page of `shape`'s in pool pl: its header and its floats,
 * in whole cache lines. */
static size_t page_bytes_of(const pool_t *pl,
                            const attnd_session_shape_t *shape) {
  return pl->hdr + (attn_kv_page_floats(shape->Hkv, shape->Dh, shape->Dv) *
                        sizeof(float) +
                    63) /
                       64 * 64;
}

/* What one session's pages may ever hold of pool pl: the pool (less the
 * session's own cost, which is host memory) were the session alone in it;
 * for GPU memory, the budget cuda requests and sessions share. */
static int64_t pool_room(const pool_t *pl) {
  return pl->budget ? pl->budget->max : pl->cap - SESSION_COST;
}

/* The limit_exceeded error of `tokens` tokens in pages of page_bytes in
 * pl, over pool_room: "<what> needs N pages of P bytes (B bytes), over the
 * R bytes ...". */
static int never_fits(const pool_t *pl, size_t page_bytes, int64_t tokens,
                      const char *field, const char *what, attnd_error_t *err) {
  int64_t n = (tokens + ATTN_KV_PAGE - 1) / ATTN_KV_PAGE;
  return attnd_error_set(
      err, ATTND_ERR_LIMIT_EXCEEDED, field,
      "%s needs %lld page%s of %zu bytes (%lld bytes), over the %lld bytes a "
      "session's pages may ever hold (%s %lld%s): no step could fill it",
      what, (long long)n, n == 1 ? "" : "s", page_bytes,
      (long long)n * (long long)page_bytes, (long long)pool_room(pl),
      pl->budget ? "max_device_memory_bytes" : "kv_cache_bytes",
      (long long)(pl->budget ? pl->budget->max : pl->cap),
      pl->budget ? "" : ", less the session's own 4096");
}

int attnd_session_fits(attnd_sessions_t *st, const attnd_session_shape_t *shape,
                       int64_t tokens, const char *field, const char *what,
                       attnd_error_t *err) {
  const pool_t *pl =
      shape->backend == ATTN_BACKEND_CUDA ? &st->device : &st->host;
  size_t pb = page_bytes_of(pl, shape);
  int64_t n = (tokens + ATTN_KV_PAGE - 1) / ATTN_KV_PAGE;
  /* no lock: the pools' sizes are fixed; a host pool under one session's
   * cost is session_new's to refuse, naming kv_cache_bytes */
  if (st->host.cap < SESSION_COST || n <= pool_room(pl) / (int64_t)pb)
    return 0;
  return never_fits(pl, pb, tokens, field, what, err);
}

/* A new session in the store, of id `id` (checked free), or a fresh one;
 * room is made by evicting idle sessions other than `keep` (a fork's
 * parent, whose id the fork's begins with). */
static attnd_session_t *session_new(attnd_sessions_t *st,
                                    const attnd_session_shape_t *shape,
                                    int64_t max_tokens, int64_t ttl_s,
                                    const char *id, const attnd_session_t *keep,
                                    attnd_error_t *err) {
  attnd_session_t *s = calloc(1, sizeof *s);
  if (s == NULL) {
    attnd_error_set(err, ATTND_ERR_OUT_OF_MEMORY, NULL,
                    "out of memory for a new session");
    return NULL;
  }
  if (st->host.cap < SESSION_COST) { /* no eviction makes room: no retry */
    free(s);
    attnd_error_set(err, ATTND_ERR_LIMIT_EXCEEDED, NULL,
                    "a session takes %d bytes of the KV cache, over its "
                    "kv_cache_bytes %lld: this server holds no session",
                    SESSION_COST, (long long)st->host.cap);
    return NULL;
  }
  if (pool_take(st, SESSION_COST, keep) < 0) {
    free(s);
    attnd_error_set(err, ATTND_ERR_OVERLOADED, NULL,
                    "the KV cache is full of sessions in use (%lld of %lld "
                    "bytes); retry later",
                    (long long)st->host.used, (long long)st->host.cap);
    return NULL;
  }
  if (id) {
    snprintf(s->id, sizeof s->id, "%s", id);
    tombstone_clear(st, id);
  } else {
    do { /* 128 (a fork: 64) random bits; a clash costs one more draw */
      new_id(s->id, keep ? keep->id : NULL);
    } while (find(st, s->id));
  }
  s->hash = hash_id(st, s->id);
  s->shape = *shape;
  s->pool = shape->backend == ATTN_BACKEND_CUDA ? &st->device : &st->host;
  s->page_bytes = page_bytes_of(s->pool, shape);
  s->max_tokens = max_tokens;
  s->ttl_s = ttl_s;
  s->created = s->used = attnd_now_ms();
  s->refs = 1;
  s->live = 1;
  if (table_insert(st, s) < 0) {
    pool_unreserve(&st->host, SESSION_COST);
    st->host.used -= SESSION_COST;
    free(s);
    attnd_error_set(err, ATTND_ERR_OUT_OF_MEMORY, NULL,
                    "out of memory for a new session");
    return NULL;
  }
  lru_push(st, s);
  return s;
}

/* The cuda backend's device, failed for good (attnd_device_memory_t.lost):
 * attn_cuda_info says it is not usable, and why. */
static int cuda_lost(char *why, size_t n) {
  attn_cuda_info_t ci;
  attn_cuda_info(&ci);
  if (ci.usable)
    return 0;
  snprintf(why, n, "%s", ci.status);
  return 1;
}

/* ---- the API --------------------------------------------------------------
 */

attnd_sessions_t *attnd_sessions_new(int64_t pool_bytes,
                                     attnd_budget_t *device_budget,
                                     const attnd_device_memory_t *device) {
  attnd_sessions_t *st = calloc(1, sizeof *st);
  if (st == NULL)
    return NULL;
  st->n_buckets = 64;
  st->hash_key[0] = attnd_random_u64();
  st->hash_key[1] = attnd_random_u64();
  st->buckets = calloc(st->n_buckets, sizeof *st->buckets);
  if (st->buckets == NULL || uv_mutex_init(&st->mu) != 0) {
    free(st->buckets);
    free(st);
    return NULL;
  }
  st->host_mem = (attnd_device_memory_t){host_alloc, free, host_copy, NULL};
  st->device_mem =
      device ? *device
             : (attnd_device_memory_t){attn_cuda_alloc, attn_cuda_free,
                                       attn_cuda_copy, cuda_lost};
  st->host = (pool_t){.mem = &st->host_mem, .cap = pool_bytes, .hdr = PAGE_HDR};
  st->device =
      (pool_t){.mem = &st->device_mem,
               .budget = device_budget ? device_budget : &st->no_device};
  return st;
}

void attnd_sessions_free(attnd_sessions_t *st) {
  if (st == NULL)
    return;
  for (size_t i = 0; i < st->n_buckets; i++)
    for (attnd_session_t *s = st->buckets[i], *next; s; s = next) {
      next = s->hnext;
      session_free(st, s);
    }
  drop_free(&st->host, 0);
  drop_free(&st->device, 0);
  free(st->buckets);
  uv_mutex_destroy(&st->mu);
  free(st);
}

int attnd_session_create(attnd_sessions_t *st, attnd_session_shape_t *shape,
                         int64_t max_tokens, int64_t ttl_s, const char *id,
                         attnd_session_info_t *info, attnd_error_t *err) {
  uv_mutex_lock(&st->mu);
  double now = attnd_now_ms();
  sweep(st, now);
  attnd_session_t *s = id ? find(st, id) : NULL;
  if (s && expired(s, now)) {
    st->stats.expired++;
    end_session(st, s, 0);
    s = NULL;
  }
  if (s) {
    attnd_error_set(err, ATTND_ERR_SESSION_EXISTS, "session",
                    "session %s exists already; delete it first, or send "
                    "its steps",
                    id);
    s = NULL;
  } else {
    s = session_new(st, shape, max_tokens, ttl_s, id, NULL, err);
  }
  if (s)
    info_of(st, s, info);
  else
    attnd_layer_set_unref(shape->layers);
  uv_mutex_unlock(&st->mu);
  return s ? 0 : -1;
}

int attnd_session_get(attnd_sessions_t *st, const char *id,
                      attnd_session_info_t *info, attnd_error_t *err) {
  uv_mutex_lock(&st->mu);
  attnd_session_t *s = lookup(st, id, err);
  if (s)
    info_of(st, s, info);
  uv_mutex_unlock(&st->mu);
  return s ? 0 : -1;
}

int attnd_session_delete(attnd_sessions_t *st, const char *id,
                         attnd_error_t *err) {
  uv_mutex_lock(&st->mu);
  attnd_session_t *s = lookup(st, id, err);
  if (s) {
    st->stats.deleted++;
    end_session(st, s, 0);
  }
  uv_mutex_unlock(&st->mu);
  return s ? 0 : -1;
}

int attnd_session_fork(attnd_sessions_t *st, const char *id,
                       attnd_session_info_t *info, attnd_error_t *err) {
  uv_mutex_lock(&st->mu);
  attnd_session_t *s = lookup(st, id, err), *f = NULL;
  if (s && !idle(s)) /* its pages half written: what would the fork hold? */
    attnd_error_set(err, ATTND_ERR_SESSION_BUSY, "session",
                    "session %s has a step in flight; fork it after the "
                    "step's reply",
                    s->id);
  else if (s) {
    s->used = attnd_now_ms();
    if (idle(s)) { /* the parent is the most recently used now */
      lru_remove(st, s);
      lru_push(st, s);
    }
    attnd_session_shape_t shape = s->shape;
    shape.layers = attnd_layer_set_ref(s->shape.layers);
    size_t n = (size_t)((s->len + ATTN_KV_PAGE - 1) / ATTN_KV_PAGE);
    f = session_new(st, &shape, s->max_tokens, s->ttl_s, NULL, s, err);
    if (f == NULL) {
      attnd_layer_set_unref(shape.layers);
    } else if (reserve_pages(f, n) < 0) {
      attnd_error_set(err, ATTND_ERR_OUT_OF_MEMORY, NULL,
                      "out of memory to fork session %s", s->id);
      end_session(st, f, 0);
      f = NULL;
    } else {
      for (size_t i = 0; i < n; i++) { /* shared: copied on write */
        f->pages[i] = s->pages[i];
        f->data[i] = s->data[i];
        s->pages[i]->ref++;
      }
      f->n_pages = n;
      f->len = s->len;
      f->k_absmax = s->k_absmax;
      info_of(st, f, info);
    }
  }
  uv_mutex_unlock(&st->mu);
  return f ? 0 : -1;
}

int attnd_session_truncate(attnd_sessions_t *st, const char *id, int64_t length,
                           attnd_session_info_t *info, attnd_error_t *err) {
  uv_mutex_lock(&st->mu);
  attnd_session_t *s = lookup(st, id, err);
  int r = s ? 0 : -1;
  if (s && !idle(s)) {
    r = attnd_error_set(err, ATTND_ERR_SESSION_BUSY, "session",
                        "session %s has a step in flight; truncate it after "
                        "the step's reply",
                        s->id);
  } else if (s && length > s->len) {
    r = attnd_error_set(err, ATTND_ERR_INVALID_VALUE, "length",
                        "length is %lld, but session %s holds %lld tokens",
                        (long long)length, s->id, (long long)s->len);
  } else if (s) {
    size_t keep = (size_t)((length + ATTN_KV_PAGE - 1) / ATTN_KV_PAGE);
    while (s->n_pages > keep)
      page_release(s->pool, s->pages[--s->n_pages]);
    s->len = length;
    s->used = attnd_now_ms();
    lru_remove(st, s);
    lru_push(st, s);
    info_of(st, s, info);
  }
  uv_mutex_unlock(&st->mu);
  return r;
}

int attnd_session_list(attnd_sessions_t *st, const char *after,
                       attnd_session_info_t *infos, size_t max, int *more) {
  /* the max + 1 least ids after `after`, from the id tree: a page costs
   * log(sessions) + max under the lock, not a walk of every session */
  size_t cap = max + 1, n = 0;
  attnd_session_t **h = malloc(cap * sizeof *h);
  if (h == NULL)
    return -1;
  uv_mutex_lock(&st->mu);
  sweep(st, attnd_now_ms());
  tree_after(st->by_id, after, h, &n, cap);
  *more = n == cap;
  size_t k = n < max ? n : max;
  for (size_t i = 0; i < k; i++)
    info_of(st, h[i], &infos[i]);
  uv_mutex_unlock(&st->mu);
  free(h);
  return (int)k;
}

int attnd_session_shape(attnd_sessions_t *st, const char *id,
                        attnd_session_shape_t *shape, attnd_error_t *err) {
  uv_mutex_lock(&st->mu);
  attnd_session_t *s = lookup(st, id, err);
  if (s) {
    *shape = s->shape;
    shape->layers = attnd_layer_set_ref(s->shape.layers);
  }
  uv_mutex_unlock(&st->mu);
  return s ? 0 : -1;
}

/* ---- steps ----------------------------------------------------------------
 */

int attnd_session_enqueue(attnd_sessions_t *st, const char *id,
                          attnd_request_t *req, void (*turn)(void *tag),
                          void *tag, attnd_error_t *err) {
  uv_mutex_lock(&st->mu);
  attnd_session_t *s = lookup(st, id, err);
  int r = -1;
  if (s) {
    s->refs++;
    req->session = s;
    req->session_turn = turn;
    req->session_tag = tag;
    req->session_next = NULL;
    if (idle(s)) {
      lru_remove(st, s);
      s->busy = 1;
      r = 1;
    } else {
      if (s->qtail)
        s->qtail->session_next = req;
      else
        s->qhead = req;
      s->qtail = req;
      r = 0;
    }
  }
  uv_mutex_unlock(&st->mu);
  return r;
}

int attnd_session_unqueue(attnd_sessions_t *st, attnd_request_t *req) {
  uv_mutex_lock(&st->mu);
  attnd_session_t *s = req->session;
  attnd_request_t **pp = s ? &s->qhead : NULL, *prev = NULL;
  while (pp && *pp && *pp != req) {
    prev = *pp;
    pp = &(*pp)->session_next;
  }
  int found = pp && *pp == req;
  if (found) {
    *pp = req->session_next;
    if (s->qtail == req)
      s->qtail = prev;
    req->session_next = NULL;
    req->session = NULL;
    session_unref(st, s);
  }
  uv_mutex_unlock(&st->mu);
  return found;
}

int attnd_session_prepare(attnd_sessions_t *st, attnd_request_t *req,
                          attnd_error_t *err) {
  uv_mutex_lock(&st->mu);
  attnd_session_t *s = req->session;
  int64_t n = req->params.query.dim[0]; /* the new tokens (rank 2) */
  int r = 0, full = 0; /* full: the pool could not give a page */
  pool_t *pl = s->pool;
  char why[160];
  if (!s->live) {
    r = attnd_error_set(err, ATTND_ERR_UNKNOWN_SESSION, "session",
                        "session %s ended while this step waited for its "
                        "turn",
                        s->id);
  } else if (pl->mem->lost && pl->mem->lost(why, sizeof why)) {
    /* not short of room: nothing to evict for, nothing to retry */
    r = attnd_error_set(err, ATTND_ERR_BACKEND_UNAVAILABLE, "backend",
                        "session %s's pages are on the %s backend, which "
                        "cannot run: %s",
                        s->id, attn_backend_kind_name(s->shape.backend), why);
  } else if (req->expected_length >= 0 && req->expected_length != s->len) {
    r = attnd_error_set(err, ATTND_ERR_LENGTH_MISMATCH, "expected_length",
                        "expected_length is %lld, but session %s holds %lld "
                        "tokens: the step was not applied",
                        (long long)req->expected_length, s->id,
                        (long long)s->len);
  } else if (n > s->max_tokens - s->len) {
    r = attnd_error_set(err, ATTND_ERR_LIMIT_EXCEEDED, "query",
                        "%lld new tokens would make session %s hold %lld, "
                        "over its max_tokens %lld",
                        (long long)n, s->id, (long long)(s->len + n),
                        (long long)s->max_tokens);
  }
  size_t need = (size_t)((s->len + n + ATTN_KV_PAGE - 1) / ATTN_KV_PAGE);
  /* pages that could not fit in the pool were it empty but for this
   * session are refused before any idle session is evicted for them:
   * eviction would empty the cache, and no retry would ever fit */
  int64_t room = pool_room(pl);
  if (r == 0 && (int64_t)need > room / (int64_t)s->page_bytes)
    r = attnd_error_set(
        err, ATTND_ERR_LIMIT_EXCEEDED, "query",
        "%lld new tokens would make session %s hold %lld tokens: %zu pages "
        "of %zu bytes, over the %lld bytes its pages may ever hold (%s %lld%s)",
        (long long)n, s->id, (long long)(s->len + n), need, s->page_bytes,
        (long long)room,
        pl->budget ? "max_device_memory_bytes" : "kv_cache_bytes",
        (long long)(pl->budget ? pl->budget->max : pl->cap),
        pl->budget ? "" : ", less the session's own 4096");
  if (r == 0 && reserve_pages(s, need) < 0)
    r = attnd_error_set(err, ATTND_ERR_OUT_OF_MEMORY, NULL,
                        "out of memory for session %s's page table", s->id);
  /* the last page, when partly filled and shared, is copied before the
   * new tokens are written into it */
  size_t last = (size_t)(s->len / ATTN_KV_PAGE);
  if (r == 0 && s->len % ATTN_KV_PAGE && s->pages[last]->ref > 1) {
    page_t *p = page_new(st, pl, s->page_bytes, s);
    if (p == NULL) {
      r = -1, full = 1;
    } else if (pl->mem->copy(p->data, s->data[last], s->page_bytes - pl->hdr) <
               0) {
      page_release(pl, p);
      r = attnd_error_set(err, ATTND_ERR_BACKEND_UNAVAILABLE, "backend",
                          "copying session %s's shared last page on the "
                          "%s backend failed",
                          s->id, attn_backend_kind_name(s->shape.backend));
    } else {
      page_release(pl, s->pages[last]);
      s->pages[last] = p;
      s->data[last] = p->data;
      st->stats.cow_copies++;
    }
  }
  while (r == 0 && s->n_pages < need) {
    page_t *p = page_new(st, pl, s->page_bytes, s);
    if (p == NULL) {
      r = -1, full = 1;
      break;
    }
    s->pages[s->n_pages] = p;
    s->data[s->n_pages++] = p->data;
  }
  if (full && pl == &st->device)
    attnd_error_set(err, ATTND_ERR_OVERLOADED, "backend",
                    "GPU memory for session %s's pages (backend %s) is "
                    "short: %lld of the %lld bytes that cuda sessions and "
                    "requests may hold (max_device_memory_bytes) are in "
                    "use, or the GPU has no more; retry later",
                    s->id, attn_backend_kind_name(s->shape.backend),
                    (long long)attnd_budget_used(pl->budget),
                    (long long)pl->budget->max);
  else if (full)
    attnd_error_set(err, ATTND_ERR_OVERLOADED, NULL,
                    "the KV cache is full (%lld of %lld bytes in use, by "
                    "sessions that are busy or shared); retry later",
                    (long long)pl->used, (long long)pl->cap);
  if (r == 0) {
    req->kv_past = s->len;
    req->kv_absmax = s->k_absmax;
    req->kv_pages = s->data;
    req->kv = (attn_kv_t){.past = &req->kv_past,
                          .pages = &req->kv_pages,
                          .k_absmax = &req->kv_absmax,
                          .device = pl == &st->device};
    req->params.kv = &req->kv;
  }
  uv_mutex_unlock(&st->mu);
  return r < 0 ? -1 : 0;
}

int attnd_session_step_end(attnd_sessions_t *st, attnd_request_t *req,
                           int commit, attnd_error_t *err) {
  uv_mutex_lock(&st->mu);
  attnd_session_t *s = req->session;
  attnd_request_t *next = NULL;
  int r = 0;
  if (commit && s->live && req->params.kv) {
    s->len = req->kv_past + req->params.query.dim[0];
    s->k_absmax = req->kv_absmax;
    req->step_length = s->len;
  } else if (commit && req->params.kv) {
    r = attnd_error_set(err, ATTND_ERR_UNKNOWN_SESSION, "session",
                        "session %s was deleted while this step was computed: "
                        "the step was not applied",
                        s->id);
  }
  if (!commit) { /* pages made ready for tokens that did not come */
    size_t keep = (size_t)((s->len + ATTN_KV_PAGE - 1) / ATTN_KV_PAGE);
    while (s->n_pages > keep)
      page_release(s->pool, s->pages[--s->n_pages]);
  }
  /* a step that ran (t.start set) is a use, whatever its outcome: its
   * session was busy, never idle, all along, and ttl_s counts from its
   * end; one refused before it ran leaves the last use where it was */
  if (req->t.start)
    s->used = attnd_now_ms();
  req->params.kv = NULL;
  req->session = NULL;
  s->busy = 0;
  if (s->qhead) { /* the next step's turn */
    next = s->qhead;
    s->qhead = next->session_next;
    if (s->qhead == NULL)
      s->qtail = NULL;
    s->busy = 1;
  } else if (s->live) {
    lru_push(st, s);
  }
  session_unref(st, s);
  uv_mutex_unlock(&st->mu);
  if (next)
    next->session_turn(next->session_tag);
  return r;
}

void attnd_sessions_stats(attnd_sessions_t *st, attnd_sessions_stats_t *out) {
  uv_mutex_lock(&st->mu);
  /* sessions past their ttl_s have ended: the gauges say so without
   * waiting for a request to the sessions to sweep them */
  sweep(st, attnd_now_ms());
  *out = st->stats;
  out->sessions = (int64_t)st->count;
  out->kv_bytes_used = st->host.used;
  out->kv_bytes_free = st->host.cap - st->host.used;
  out->kv_device_bytes_used = st->device.used;
  out->kv_device_bytes_held = st->device.held;
  st->epoch++;
  for (size_t i = 0; i < st->n_buckets; i++)
    for (attnd_session_t *s = st->buckets[i]; s; s = s->hnext)
      for (size_t k = 0; k < s->n_pages; k++) {
        page_t *p = s->pages[k];
        if (p->ref > 1 && p->mark != st->epoch) { /* once, not per holder */
          p->mark = st->epoch;
          out->pages_shared++;
        }
      }
  uv_mutex_unlock(&st->mu);
}

void attnd_session_info_json(const attnd_session_info_t *in, attnd_buf_t *b) {
  static const char *const styles[] = {"none", "half", "interleaved"};
  attnd_buf_printf(b, "{\"session\":\"%s\",\"layer\":", in->id);
  if (in->layer[0])
    attnd_buf_json_string(b, in->layer, strlen(in->layer));
  else
    attnd_buf_puts(b, "null");
  attnd_buf_printf(b,
                   ",\"num_heads\":%lld,\"num_kv_heads\":%lld,\"head_dim\":"
                   "%lld,\"v_head_dim\":%lld,\"rope\":",
                   (long long)in->H, (long long)in->Hkv, (long long)in->Dh,
                   (long long)in->Dv);
  if (in->rope.style == ATTN_ROPE_NONE)
    attnd_buf_puts(b, "null");
  else
    attnd_buf_printf(b, "{\"theta\":%.17g,\"dims\":%lld,\"style\":\"%s\"}",
                     in->rope.theta,
                     (long long)(in->rope.dims ? in->rope.dims : in->Dh),
                     styles[in->rope.style]);
  attnd_buf_printf(
      b,
      ",\"backend\":\"%s\",\"length\":%lld,\"max_tokens\":%lld,\"ttl_s\":%lld,"
      "\"page_tokens\":%d,"
      "\"pages\":%lld,\"shared_pages\":%lld,\"bytes\":%lld,\"age_s\":%.3f,"
      "\"idle_s\":%.3f,\"expires_in_s\":%.3f,\"busy\":%s,\"queued\":%d}",
      attn_backend_kind_name(in->backend), (long long)in->length,
      (long long)in->max_tokens, (long long)in->ttl_s, ATTN_KV_PAGE,
      (long long)in->pages, (long long)in->shared_pages, (long long)in->bytes,
      in->age_s, in->idle_s, in->expires_in_s > 0 ? in->expires_in_s : 0.0,
      in->busy ? "true" : "false", in->queued);
}
