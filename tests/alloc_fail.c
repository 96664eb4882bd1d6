/* tests/alloc_fail.c: the allocation wrappers. See alloc_fail.h. */
#include "alloc_fail.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

/* With -Wl,--wrap=malloc the linker sends calls of malloc to __wrap_malloc
 * and __real_malloc to malloc. Without it __real_malloc is defined nowhere:
 * the weak references leave it NULL instead of failing the link. */
extern void *__real_malloc(size_t n) __attribute__((weak));
extern void *__real_calloc(size_t n, size_t size) __attribute__((weak));
extern void *__real_realloc(void *p, size_t n) __attribute__((weak));
extern char *__real_strdup(const char *s) __attribute__((weak));
extern void *__real_aligned_alloc(size_t align, size_t n) __attribute__((weak));

void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t n);
char *__wrap_strdup(const char *s);
void *__wrap_aligned_alloc(size_t align, size_t n);

static atomic_long count; /* allocations since the last arm */
static atomic_long fail_at = -1;
static atomic_int sticky_, injected;

/* Counts one allocation; whether it must fail (then errno is ENOMEM). */
static int fail_now(void) {
  long k = atomic_fetch_add(&count, 1), at = atomic_load(&fail_at);
  if (at < 0 || k < at || (k > at && !atomic_load(&sticky_)))
    return 0;
  atomic_store(&injected, 1);
  errno = ENOMEM;
  return 1;
}

int alloc_fail_linked(void) {
  return __real_malloc != NULL && __real_calloc != NULL &&
         __real_realloc != NULL && __real_strdup != NULL &&
         __real_aligned_alloc != NULL;
}

void alloc_fail_arm(long n, int sticky) {
  if (!alloc_fail_linked()) {
    fprintf(stderr, "alloc_fail_arm: this binary was linked without "
                    "-Wl,--wrap=malloc,... (ALLOC_FAIL_WRAP)\n");
    abort();
  }
  atomic_store(&fail_at, -1);
  atomic_store(&count, 0);
  atomic_store(&injected, 0);
  atomic_store(&sticky_, sticky);
  atomic_store(&fail_at, n);
}

long alloc_fail_count(void) {
  return atomic_load(&count);
}

int alloc_fail_injected(void) {
  return atomic_load(&injected);
}

void *__wrap_malloc(size_t n) {
  return fail_now() ? NULL : __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t size) {
  return fail_now() ? NULL : __real_calloc(n, size);
}

/* A failed realloc leaves p as it was, as the real one does. */
void *__wrap_realloc(void *p, size_t n) {
  return fail_now() ? NULL : __real_realloc(p, n);
}

char *__wrap_strdup(const char *s) {
  return fail_now() ? NULL : __real_strdup(s);
}

void *__wrap_aligned_alloc(size_t align, size_t n) {
  return fail_now() ? NULL : __real_aligned_alloc(align, n);
}
