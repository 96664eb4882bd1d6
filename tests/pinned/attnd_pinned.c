/* tests/pinned/attnd_pinned.c: attnd with a pool of pinned memory
 * (server/sched/pinned.h) made of ordinary memory, so that check_pinned
 * can send requests through the pool, over real sockets, where there is no
 * GPU to pin with. It is build/attnd in every other way: the pool is
 * started first, and attnd_serve takes it as its own (serve.c). The pool's
 * size is ATTND_TEST_PINNED_BYTES (default 64M; a K, M or G suffix). */
#include <stdlib.h>

#include "sched/pinned.h"

int attnd_main(int argc, char **argv);
#define main attnd_main
#include "../../server/main.c"
#undef main

static void *heap_alloc(size_t bytes) {
  return aligned_alloc(ATTND_PINNED_ALIGN, bytes);
}

int main(int argc, char **argv) {
  static const attnd_host_memory_t heap = {heap_alloc, free};
  const char *v = getenv("ATTND_TEST_PINNED_BYTES");
  char *end = NULL;
  size_t bytes = v ? strtoull(v, &end, 10) : (size_t)64 << 20;
  if (end && *end)
    bytes <<= *end == 'G' ? 30 : *end == 'M' ? 20 : *end == 'K' ? 10 : 0;
  if (attnd_pinned_start(bytes, &heap) < 0) {
    fprintf(stderr, "attnd-pinned: no pool of %zu bytes\n", bytes);
    return 2;
  }
  return attnd_main(argc, argv);
}
