/* tests/alloc_fail.h: allocation failures on demand, as in jansson's test
 * suites: the nth allocation from now fails.
 *
 * A binary that uses it links with
 *   -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=strdup,
 *   --wrap=aligned_alloc
 * (the Makefile's ALLOC_FAIL_WRAP), so that every such call in the objects
 * and static libraries of its link (ours, and Check's) goes through the
 * counters of alloc_fail.c; a failure returns NULL with errno ENOMEM, as
 * malloc does. Shared libraries are not reached; jansson's allocations are,
 * because server/api/decode.c gives jansson an allocator of its own that calls
 * malloc from libattnd.a. (A json_set_alloc_funcs of the tests' own would
 * replace that allocator, which is what turns jansson's failures into
 * out_of_memory, and test a server that does not exist.) free is not
 * wrapped: it cannot fail.
 *
 * alloc_fail.c is linked into every test binary, most of them without the
 * flags: there its __real_* references are weak and stay NULL, nothing calls
 * its __wrap_* functions, and alloc_fail_arm aborts, so that a binary
 * linked without the flags cannot pass by never failing. Any thread; the
 * counters are process-wide. */
#ifndef ATTN_TESTS_ALLOC_FAIL_H
#define ATTN_TESTS_ALLOC_FAIL_H

/* Whether this binary was linked with the wrap flags. */
int alloc_fail_linked(void);

/* Restarts the count. The nth (0-based) allocation from now fails; with
 * `sticky`, every one after it fails too. n = -1 disarms: allocations are
 * only counted. Aborts when the binary lacks the wrap flags. */
void alloc_fail_arm(long n, int sticky);

/* Allocations (failed ones included) since the last alloc_fail_arm. */
long alloc_fail_count(void);

/* Whether a failure was injected since the last alloc_fail_arm. */
int alloc_fail_injected(void);

#endif
