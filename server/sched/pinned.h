/* server/sched/pinned.h: page-locked host memory for requests' tensors,
 * pinned_memory_bytes.
 *
 * A GPU copies from page-locked ("pinned") host memory at the bus's full
 * rate, straight into its own; from ordinary memory, CUDA first copies
 * each chunk into a pinned bounce buffer of its own, and the copy waits on
 * the CPU. Pinning is slow (the kernel maps and locks every page), so
 * attnd pins one block at start and carves requests' tensors out of it:
 *   - an OIP body with binary tensor data, whose float32 tensors the
 *     request reads where they lie (intake.c);
 *   - a decoded tensor of at least ATTND_PINNED_MIN bytes: base64, a
 *     bfloat16 or float16 input widened to float32, and any other the
 *     decoder allocates (decode_tensor.c);
 *   - a cuda request's results, which the GPU copies back into them
 *     (attnd_request_alloc). The budget counts those at admission, before
 *     they exist, so they are counted twice: on the safe side.
 * A tensor that finds no room goes to the heap, as it would without the
 * pool, and is counted (missed); so is nothing ever refused for it.
 *
 * The pool's bytes are taken out of max_memory_bytes once, at start, and
 * the inputs a request has in it are not counted again for the request
 * (attnd_request_memory, the body's share in intake.c): what the budget
 * bounds is what the process holds.
 *
 * One pool per process, as there is one CUDA context: attnd_serve starts
 * it where a GPU serves. Any thread: a mutex, held while a list of the
 * blocks in use is searched (a few hundred entries at most). */
#ifndef ATTND_PINNED_H
#define ATTND_PINNED_H

#include <stddef.h>
#include <stdint.h>

/* Tensors smaller than this stay on the heap (or in the request's region):
 * their copies cost their launch, not their bytes. */
#define ATTND_PINNED_MIN ((size_t)64 << 10)
/* Blocks start on this boundary and take whole multiples of it. */
#define ATTND_PINNED_ALIGN ((size_t)4096)

/* What pins: attn_cuda_host_alloc and attn_cuda_host_free (attn.h). A
 * test of the pool's own logic passes functions over the heap. */
typedef struct attnd_host_memory {
  void *(*alloc)(size_t bytes); /* NULL on failure */
  void (*free)(void *p);
} attnd_host_memory_t;

/* Pins `bytes` (a multiple of ATTND_PINNED_ALIGN, rounded down) with `m`
 * (NULL: attn_cuda_host_alloc) and makes it the pool. Returns 0, or -1
 * when pinning failed or a pool is already started. Call before any
 * request. */
int attnd_pinned_start(size_t bytes, const attnd_host_memory_t *m);

/* Gives the pool back; every block must have been put back. */
void attnd_pinned_stop(void);

/* `bytes` (at least ATTND_PINNED_MIN) from the pool, ATTND_PINNED_ALIGN-
 * aligned: the first gap that holds them. NULL when there is no pool, the
 * bytes are fewer than ATTND_PINNED_MIN, or no gap holds them (counted as
 * missed). */
void *attnd_pinned_get(size_t bytes);

/* 1 when p points into the pool (a block from attnd_pinned_get). */
int attnd_pinned_owns(const void *p);

/* Puts back a block from attnd_pinned_get (p its start); NULL is fine. */
void attnd_pinned_put(void *p);

/* A tensor's buffer of `bytes`: from the pool when it can, else malloc.
 * *pinned (may be NULL) says which. attnd_tensor_free gives back either. */
void *attnd_tensor_alloc(size_t bytes, int *pinned);
void attnd_tensor_free(void *p);

typedef struct attnd_pinned_stats {
  int64_t bytes;   /* the pool's size; 0 without one */
  int64_t used;    /* in blocks now (whole multiples of ATTND_PINNED_ALIGN) */
  int64_t high;    /* the most used at once */
  int64_t blocks;  /* blocks now */
  uint64_t served; /* blocks given out, ever */
  uint64_t missed; /* asks of at least ATTND_PINNED_MIN that found no room */
} attnd_pinned_stats_t;

void attnd_pinned_stats(attnd_pinned_stats_t *st);

#endif
