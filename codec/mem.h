/* codec/mem.h: heap allocations counted against a limit while a thread
 * does one piece of work.
 *
 * attnd counts what decoding a request allocates in the request's share of
 * its memory budget, as it grows: the JSON parser's tree, the bulk
 * scanner's arrays, the text buffers and the decoded tensors. Those come
 * from the codec and from the server alike, so both allocate them here.
 * While a meter is set on the calling thread (attnd_meter_set), each block
 * counts its usable size (malloc_usable_size) in it, and a block the meter
 * has no room for is not allocated: the call fails as when malloc fails.
 * With no meter set, these are malloc, realloc and free.
 *
 * A block may be freed with attnd_mem_free or with free: blocks are plain
 * heap blocks. One freed with free, or outside the meter's time, is not
 * taken off it (the meter then counts on the safe side). Any thread; each
 * thread has its own meter. */
#ifndef ATTND_CODEC_MEM_H
#define ATTND_CODEC_MEM_H

#include <stddef.h>
#include <stdint.h>

typedef struct attnd_meter {
  /* Takes `bytes` more from what bounds this thread's work: 0, or -1
   * (taking nothing) when there is no room for them. Set by the caller. */
  int (*take)(void *ctx, int64_t bytes);
  void *ctx;
  /* Kept by the meter, 0 to start: the bytes of the blocks counted and
   * not freed, and the most they have been (a block that realloc may move
   * counted twice meanwhile, as both are held then), which is what was
   * taken through `take`. */
  int64_t live, taken;
} attnd_meter_t;

/* Makes m (NULL: none) this thread's meter; returns the one it replaces. */
attnd_meter_t *attnd_meter_set(attnd_meter_t *m);

/* malloc, realloc and free, counted in this thread's meter. */
void *attnd_mem_alloc(size_t bytes);
void *attnd_mem_realloc(void *p, size_t bytes);
void attnd_mem_free(void *p);

#endif
