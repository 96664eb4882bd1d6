/* server/sched/budget.h: the memory budget, max_memory_bytes.
 *
 * Every request in flight holds a share of the budget: its body while it
 * arrives, then its request's footprint (attnd_request_memory) from
 * admission to completion. attnd keeps freed memory for reuse, so what
 * requests hold at once bounds the process's peak; a request that does not
 * fit now is asked to retry (429) rather than meeting the kernel's OOM
 * killer. Any thread: the count is one atomic. */
#ifndef ATTND_BUDGET_H
#define ATTND_BUDGET_H

#include <stddef.h>
#include <stdint.h>

typedef struct attnd_budget {
  int64_t max;
  _Atomic int64_t used;
  /* memory already allocated outside requests: the workspaces that
   * workers and HTTP threads keep between requests (run.h), less what a
   * running request's share already counts, and the layer sets a reload
   * replaced that are still held (attnd_layer_set_charge) */
  _Atomic int64_t scratch;
} attnd_budget_t;

/* Takes `bytes` more and adds them to *held. Returns 0, or -1 (taking
 * nothing) when they do not fit now beside what requests hold and the
 * kept workspaces. */
int attnd_budget_take(attnd_budget_t *b, int64_t bytes, int64_t *held);

/* Gives back everything in *held and zeroes it. */
void attnd_budget_give(attnd_budget_t *b, int64_t *held);

/* Adds `delta` (of either sign) to the count of kept workspaces and held
 * layer sets: memory already allocated, so never refused. */
void attnd_budget_scratch(attnd_budget_t *b, int64_t delta);

/* Bytes held by all requests and kept workspaces right now. */
int64_t attnd_budget_used(const attnd_budget_t *b);

/* Device memory as functions: attn_cuda_alloc, attn_cuda_free and
 * attn_cuda_copy (attn.h), whose contracts these keep. Cuda sessions' pages
 * and resident layers' weights come from them; a test of the store's or
 * the layers' own logic may pass functions over host memory instead. */
typedef struct attnd_device_memory {
  void *(*alloc)(size_t bytes); /* NULL when out of memory */
  void (*free)(void *p);
  int (*copy)(void *dst, const void *src, size_t bytes); /* 0 or -1 */
  /* 1 once the device has failed for good (a sticky CUDA error:
   * attn_cuda_info's usable 0), with why in `why`: nothing on it can be
   * computed on or copied again, so that a store refuses its steps
   * rather than reading alloc's NULL as a short device (and evicting for
   * room); 0 while it serves. NULL: it never fails. */
  int (*lost)(char *why, size_t n);
} attnd_device_memory_t;

#endif
