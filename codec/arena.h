/* codec/arena.h: a bump allocator over memory its caller owns.
 *
 * For what a request, or one parse, needs in small pieces and gives back all
 * at once: each allocation takes the next bytes of the region (64-byte
 * aligned), and nothing is freed but the whole, by attnd_arena_reset. When a
 * piece does not fit, attnd_arena_alloc returns NULL and the caller takes
 * it from the heap instead; attnd_arena_owns tells the two apart when
 * freeing. Under AddressSanitizer the bytes not handed out are poisoned, so
 * a read of a piece after its reset is reported as a use after free.
 * One thread at a time. */
#ifndef ATTND_CODEC_ARENA_H
#define ATTND_CODEC_ARENA_H

#include <stddef.h>
#include <stdint.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define ATTND_ARENA_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define ATTND_ARENA_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#include <sanitizer/asan_interface.h>
#define ATTND_ARENA_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define ATTND_ARENA_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#endif
#endif
#ifndef ATTND_ARENA_POISON
#define ATTND_ARENA_POISON(p, n) ((void)(p), (void)(n))
#define ATTND_ARENA_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define ATTND_ARENA_ALIGN 64

typedef struct attnd_arena {
  unsigned char *base; /* the caller's, ATTND_ARENA_ALIGN-aligned */
  size_t cap, used;
} attnd_arena_t;

/* Takes mem[0..cap) as the region (mem aligned to ATTND_ARENA_ALIGN). */
static inline void attnd_arena_init(attnd_arena_t *a, void *mem, size_t cap) {
  a->base = mem;
  a->cap = cap;
  a->used = 0;
  ATTND_ARENA_POISON(mem, cap);
}

/* n bytes of the region, or NULL when they do not fit. */
static inline void *attnd_arena_alloc(attnd_arena_t *a, size_t n) {
  size_t need = (n + ATTND_ARENA_ALIGN - 1) & ~(size_t)(ATTND_ARENA_ALIGN - 1);
  if (need < n || need > a->cap - a->used)
    return NULL;
  void *p = a->base + a->used;
  a->used += need;
  ATTND_ARENA_UNPOISON(p, n ? n : 1);
  return p;
}

/* Whether p points into the region. */
static inline int attnd_arena_owns(const attnd_arena_t *a, const void *p) {
  return (uintptr_t)p - (uintptr_t)a->base < a->cap;
}

/* Gives back every piece at once. */
static inline void attnd_arena_reset(attnd_arena_t *a) {
  ATTND_ARENA_POISON(a->base, a->used);
  a->used = 0;
}

#endif
