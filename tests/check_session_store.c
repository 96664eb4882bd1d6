/* tests/check_session_store.c: the store of KV-cache sessions
 * (server/store/session.h) called directly, for what HTTP cannot show
 * without a GPU: a cuda session's pages.
 *
 * The store takes its device memory as functions (attnd_device_memory_t);
 * here they are host memory that this file counts: every block it gave
 * out, every copy. So these tests check the store's own logic for device
 * pages (their accounting against the GPU budget and not the host pool,
 * copy on write through `copy`, fork, truncate, eviction of idle cuda
 * sessions, free lists never handing a device page to a host session or
 * the reverse, kv.device in the step's cache), not the GPU: the pages are
 * never computed on here. Each test names the bug it catches. And ids
 * chosen to collide in an unkeyed hash ("ids"). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched/request.h"
#include "store/session.h"
#include "suite.h"

/* ---- device memory that is host memory, counted ------------------------ */

enum { MAX_BLOCKS = 64 };

static struct {
  void *blocks[MAX_BLOCKS]; /* what alloc gave and free has not taken */
  int live, allocs, copies, fail_alloc, fail_copy;
  int lost; /* the device failed for good: nothing allocates or copies */
  size_t last_copy;
} dev;

static void *fake_alloc(size_t bytes) {
  if (dev.fail_alloc || dev.lost || dev.live == MAX_BLOCKS)
    return NULL;
  void *p = malloc(bytes);
  memset(p, 0x7f, bytes); /* finite garbage, as a device page's may be */
  for (int i = 0; i < MAX_BLOCKS; i++)
    if (dev.blocks[i] == NULL) {
      dev.blocks[i] = p;
      break;
    }
  dev.live++, dev.allocs++;
  return p;
}

static int is_device(const void *p) {
  for (int i = 0; i < MAX_BLOCKS; i++)
    if (p && dev.blocks[i] == p)
      return 1;
  return 0;
}

static void fake_free(void *p) {
  if (p == NULL)
    return;
  for (int i = 0; i < MAX_BLOCKS; i++)
    if (dev.blocks[i] == p) {
      dev.blocks[i] = NULL;
      dev.live--;
      free(p);
      return;
    }
  ck_abort_msg("the device allocator was given back %p, not its own", p);
}

static int fake_copy(void *dst, const void *src, size_t bytes) {
  ck_assert_msg(is_device(dst) && is_device(src),
                "a device page copied from or to host memory");
  if (dev.fail_copy || dev.lost)
    return -1;
  memcpy(dst, src, bytes);
  dev.copies++;
  dev.last_copy = bytes;
  return 0;
}

static int fake_lost(char *why, size_t n) {
  if (dev.lost)
    snprintf(why, n, "device failed: an illegal address (the test's)");
  return dev.lost;
}

static const attnd_device_memory_t fake = {fake_alloc, fake_free, fake_copy,
                                           fake_lost};

/* ---- a store, and steps on it ----------------------------------------- */

enum { DH = 16 };

static attnd_budget_t budget;
static attnd_sessions_t *st;
static size_t data_bytes; /* one page's data: what the device pool counts */

static void setup(void) {
  memset(&dev, 0, sizeof dev);
  data_bytes = (attn_kv_page_floats(1, DH, DH) * sizeof(float) + 63) / 64 * 64;
  budget = (attnd_budget_t){.max = (int64_t)(3 * data_bytes)};
  st = attnd_sessions_new(1 << 20, &budget, &fake);
  ck_assert_ptr_nonnull(st);
}

static void teardown(void) {
  attnd_sessions_free(st);
  /* every page given back: to the allocator and to the budget */
  ck_assert_int_eq(dev.live, 0);
  ck_assert_int_eq(attnd_budget_used(&budget), 0);
}

/* A new session of 1 head of DH features on `backend`: its id in id. */
static void create(attn_backend_kind_t backend, char id[33]) {
  attnd_session_shape_t sh = {
      .H = 1, .Hkv = 1, .Dh = DH, .Dv = DH, .backend = backend};
  attnd_session_info_t in;
  attnd_error_t e;
  ck_assert_msg(attnd_session_create(st, &sh, 1000, 3600, NULL, &in, &e) == 0,
                "%s", e.message);
  ck_assert_int_eq(in.backend, backend);
  memcpy(id, in.id, 33);
}

static void never_turn(void *tag) {
  (void)tag;
  ck_abort_msg("a step waited for its turn");
}

/* A step of n tokens on session `id`, prepared (its pages ready): 0, or -1
 * with e. *out is the request, which the caller ends (step_end). */
static int prepare(const char *id, int64_t n, attnd_request_t **out,
                   attnd_error_t *e) {
  attnd_request_t *j = calloc(1, sizeof *j);
  j->expected_length = -1;
  j->params.query.rank = 2;
  j->params.query.dim[0] = n;
  ck_assert_int_eq(attnd_session_enqueue(st, id, j, never_turn, NULL, e), 1);
  *out = j;
  return attnd_session_prepare(st, j, e);
}

static void end(attnd_request_t *j, int commit) {
  attnd_error_t e;
  ck_assert_int_eq(attnd_session_step_end(st, j, commit, &e), 0);
  free(j);
}

/* A step of n tokens on `id`, committed. */
static void step(const char *id, int64_t n) {
  attnd_request_t *j;
  attnd_error_t e;
  ck_assert_msg(prepare(id, n, &j, &e) == 0, "%s", e.message);
  end(j, 1);
}

static attnd_sessions_stats_t stats(void) {
  attnd_sessions_stats_t s;
  attnd_sessions_stats(st, &s);
  return s;
}

/* ---- the tests --------------------------------------------------------- */

/* A cuda session's pages come from the device allocator, count against
 * the GPU budget and kv_device_bytes, never the host pool, and its step's
 * cache says device = 1; a cpu session's are host memory in the host pool.
 * Catches: device pages counted in kv_bytes (or not in the budget); a
 * cuda session's pages from aligned_alloc; kv.device left 0. */
START_TEST(test_device_pages_counted_apart) {
  char cu[33], cpu[33];
  create(ATTN_BACKEND_CUDA, cu);
  create(ATTN_BACKEND_CPU, cpu);
  attnd_sessions_stats_t s0 = stats();
  attnd_request_t *j;
  attnd_error_t e;
  ck_assert_msg(prepare(cu, 70, &j, &e) == 0, "%s", e.message); /* 2 pages */
  ck_assert_int_eq(j->kv.device, 1);
  ck_assert(j->params.kv == &j->kv);
  ck_assert(is_device(j->kv_pages[0]) && is_device(j->kv_pages[1]));
  end(j, 1);
  attnd_sessions_stats_t s1 = stats();
  ck_assert_int_eq(dev.live, 2);
  ck_assert_int_eq(attnd_budget_used(&budget), (int64_t)(2 * data_bytes));
  ck_assert_int_eq(s1.kv_device_bytes_used, (int64_t)(2 * data_bytes));
  ck_assert_int_eq(s1.kv_bytes_used, s0.kv_bytes_used); /* host: unchanged */

  ck_assert_msg(prepare(cpu, 1, &j, &e) == 0, "%s", e.message);
  ck_assert_int_eq(j->kv.device, 0);
  ck_assert(!is_device(j->kv_pages[0]));
  end(j, 1);
  attnd_sessions_stats_t s2 = stats();
  ck_assert_int_eq(dev.live, 2);
  ck_assert_int_eq(s2.kv_device_bytes_used, s1.kv_device_bytes_used);
  ck_assert_int_eq(s2.kv_bytes_used, s1.kv_bytes_used + 64 + data_bytes);

  attnd_session_info_t in;
  ck_assert_int_eq(attnd_session_get(st, cu, &in, &e), 0);
  ck_assert_int_eq(in.device_bytes, (int64_t)(2 * data_bytes));
  ck_assert_int_eq(in.bytes, ATTND_SESSION_COST + (int64_t)(2 * data_bytes));
  ck_assert_int_eq(attnd_session_get(st, cpu, &in, &e), 0);
  ck_assert_int_eq(in.device_bytes, 0);
  attnd_buf_t b;
  attnd_buf_init(&b);
  attnd_session_info_json(&in, &b);
  ck_assert_ptr_nonnull(strstr(b.data, "\"backend\":\"cpu\""));
  attnd_buf_free(&b);
}
END_TEST

/* A fork shares its parent's device pages and backend; its first step
 * into the shared, partly filled last page copies it through `copy`, into
 * a new device page, and the parent's stays. A failed copy is
 * backend_unavailable, with nothing held for it. Truncate writes nothing.
 * Catches: the copy done by memcpy (or not at all) for a device page; a
 * fork on the host pool; a truncate that allocates or copies; a page
 * leaked when the copy fails. */
START_TEST(test_fork_copies_on_write) {
  char p[33];
  create(ATTN_BACKEND_CUDA, p);
  step(p, 10);
  attnd_session_info_t in;
  attnd_error_t e;
  ck_assert_int_eq(attnd_session_fork(st, p, &in, &e), 0);
  ck_assert_int_eq(in.backend, ATTN_BACKEND_CUDA);
  ck_assert_int_eq(in.shared_pages, 1);
  char f[33];
  memcpy(f, in.id, 33);
  ck_assert_int_eq(dev.allocs, 1);

  attnd_request_t *j;
  dev.fail_copy = 1;
  ck_assert_int_eq(prepare(f, 1, &j, &e), -1);
  ck_assert_int_eq(e.code, ATTND_ERR_BACKEND_UNAVAILABLE);
  ck_assert_str_eq(e.field, "backend");
  end(j, 0);
  ck_assert_int_eq(stats().kv_device_bytes_used, (int64_t)data_bytes);
  dev.fail_copy = 0;

  ck_assert_msg(prepare(f, 1, &j, &e) == 0, "%s", e.message);
  ck_assert_int_eq(dev.copies, 1);
  ck_assert_uint_eq(dev.last_copy, data_bytes);
  ck_assert(is_device(j->kv_pages[0]));
  float *mine = j->kv_pages[0];
  end(j, 1);
  ck_assert_int_eq(attnd_session_get(st, p, &in, &e), 0);
  ck_assert_int_eq(in.shared_pages, 0);
  ck_assert_int_eq(in.length, 10);
  ck_assert_int_eq(stats().cow_copies, 1);
  ck_assert_int_eq(stats().kv_device_bytes_used, (int64_t)(2 * data_bytes));
  ck_assert(mine != NULL && is_device(mine));

  int allocs = dev.allocs;
  ck_assert_int_eq(attnd_session_truncate(st, f, 3, &in, &e), 0);
  ck_assert_int_eq(in.length, 3);
  ck_assert_int_eq(in.pages, 1);
  ck_assert_int_eq(attnd_session_truncate(st, f, 0, &in, &e), 0);
  ck_assert_int_eq(in.pages, 0);
  ck_assert_int_eq(dev.allocs, allocs);
  ck_assert_int_eq(dev.copies, 1);
  /* its page is free now, kept for reuse: held, not used */
  ck_assert_int_eq(stats().kv_device_bytes_used, (int64_t)data_bytes);
  ck_assert_int_eq(stats().kv_device_bytes_held, (int64_t)(2 * data_bytes));
}
END_TEST

/* A device page freed goes to the device pool's free list: a cpu session
 * never gets it, and a cuda session reuses it. Catches: one free list for
 * both kinds (a host session handed GPU memory, or the reverse). */
START_TEST(test_free_lists_never_mixed) {
  char cu[33], cpu[33], cu2[33];
  create(ATTN_BACKEND_CUDA, cu);
  step(cu, 64);
  attnd_error_t e;
  ck_assert_int_eq(attnd_session_delete(st, cu, &e), 0);
  ck_assert_int_eq(dev.live, 1); /* kept, free */
  create(ATTN_BACKEND_CPU, cpu);
  attnd_request_t *j;
  ck_assert_msg(prepare(cpu, 64, &j, &e) == 0, "%s", e.message);
  ck_assert(!is_device(j->kv_pages[0]));
  end(j, 1);
  ck_assert_int_eq(attnd_session_delete(st, cpu, &e), 0);
  create(ATTN_BACKEND_CUDA, cu2);
  ck_assert_msg(prepare(cu2, 64, &j, &e) == 0, "%s", e.message);
  ck_assert(is_device(j->kv_pages[0]));
  end(j, 1);
  ck_assert_int_eq(dev.allocs, 1); /* the free one, reused */
}
END_TEST

/* When the GPU budget (or the GPU) is short, the least recently used idle
 * cuda session is evicted, never a cpu session; with nothing to evict, the
 * step is 429 overloaded naming backend, and holds nothing. Catches:
 * eviction picking a cpu session (it frees no GPU memory); a failed device
 * allocation returning its budget late, or never. */
START_TEST(test_eviction_for_the_gpu) {
  char old_cpu[33], a[33], b[33], c[33];
  create(ATTN_BACKEND_CPU, old_cpu); /* the least recently used of all */
  step(old_cpu, 1);
  create(ATTN_BACKEND_CUDA, a);
  step(a, 64);
  create(ATTN_BACKEND_CUDA, b);
  step(b, 128); /* the budget, 3 pages, is full */
  create(ATTN_BACKEND_CUDA, c);
  step(c, 1); /* evicts a, not old_cpu */
  attnd_session_info_t in;
  attnd_error_t e;
  ck_assert_int_eq(attnd_session_get(st, old_cpu, &in, &e), 0);
  ck_assert_int_eq(attnd_session_get(st, a, &in, &e), -1);
  ck_assert_int_eq(e.code, ATTND_ERR_SESSION_EVICTED);
  ck_assert_int_eq(stats().evicted_lru, 1);

  /* the GPU short while the budget is not: idle b goes for it (c was used
   * since, and deleted), then, with nothing left to evict, 429 */
  ck_assert_int_eq(attnd_session_delete(st, c, &e), 0); /* its page: free */
  budget.max = (int64_t)(10 * data_bytes);
  attnd_request_t *j;
  char d[33];
  create(ATTN_BACKEND_CUDA, d);
  dev.fail_alloc = 1;
  ck_assert_int_eq(prepare(d, 200, &j, &e), -1); /* 4 pages; 3 exist */
  ck_assert_int_eq(e.code, ATTND_ERR_OVERLOADED);
  ck_assert_str_eq(e.field, "backend");
  ck_assert_ptr_nonnull(strstr(e.message, "cuda"));
  end(j, 0);
  ck_assert_int_eq(attnd_session_get(st, b, &in, &e), -1);
  ck_assert_int_eq(e.code, ATTND_ERR_SESSION_EVICTED);
  ck_assert_int_eq(attnd_session_get(st, old_cpu, &in, &e), 0);
  ck_assert_int_eq(dev.allocs, 3);
  /* the failed allocations hold nothing: the budget has the 3 free pages
   * kept for reuse, and no session uses any */
  ck_assert_int_eq(stats().kv_device_bytes_used, 0);
  ck_assert_int_eq(attnd_budget_used(&budget), (int64_t)(3 * data_bytes));
  dev.fail_alloc = 0;
  step(d, 64);
  ck_assert_int_eq(stats().kv_device_bytes_used, (int64_t)data_bytes);
  ck_assert_int_eq(dev.allocs, 3);
}
END_TEST

/* Once the GPU has failed for good (a sticky error: attn_cuda_info's
 * usable 0), a cuda session's step is 503 backend_unavailable naming
 * backend and why, whether it needs a page or not, and no session is
 * evicted for it; a cpu session's steps go on. Catches: the device
 * allocator's NULL read as the GPU being short, so that every idle cuda
 * session is evicted, one after the other, and the step is then 429
 * overloaded ("retry later"), which a client retries for as long as the
 * process lives. */
START_TEST(test_lost_device_refuses_steps) {
  char cpu[33], a[33], b[33];
  create(ATTN_BACKEND_CPU, cpu);
  create(ATTN_BACKEND_CUDA, a);
  step(a, 10);
  create(ATTN_BACKEND_CUDA, b);
  dev.lost = 1;
  attnd_request_t *j;
  attnd_error_t e;
  ck_assert_int_eq(prepare(b, 1, &j, &e), -1); /* its first page */
  ck_assert_int_eq(e.code, ATTND_ERR_BACKEND_UNAVAILABLE);
  ck_assert_str_eq(e.field, "backend");
  ck_assert_msg(strstr(e.message, "illegal address") != NULL, "%s", e.message);
  end(j, 0);
  ck_assert_int_eq(prepare(a, 1, &j, &e), -1); /* within its page */
  ck_assert_int_eq(e.code, ATTND_ERR_BACKEND_UNAVAILABLE);
  end(j, 0);
  attnd_session_info_t in;
  ck_assert_int_eq(attnd_session_get(st, a, &in, &e), 0);
  ck_assert_int_eq(in.length, 10);
  ck_assert_int_eq(attnd_session_get(st, b, &in, &e), 0);
  ck_assert_int_eq(stats().evicted_lru, 0);
  step(cpu, 3);
  ck_assert_int_eq(attnd_session_get(st, cpu, &in, &e), 0);
  ck_assert_int_eq(in.length, 3);
  dev.lost = 0; /* for teardown's count */
}
END_TEST

/* ---- ids that collide -------------------------------------------------
 *
 * The table hashed a client's ids (PUT /v1/sessions/{id}) with FNV-1a,
 * unkeyed, into buckets by its low bits: ids found offline to share their
 * low bits all went into one bucket, and each lookup walked every session
 * (16000 such creates: 1.8 s, for 7 ms with random ids). Counted, not
 * timed: 2048 ids whose unkeyed FNV-1a ends in 11 zero bits, created and
 * looked up again, compare each with a few sessions, not with all. */

static uint64_t fnv1a(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

START_TEST(test_ids_that_collide) {
  enum { N = 2048 };
  attnd_sessions_t *ids_st = attnd_sessions_new(64 << 20, NULL, NULL);
  ck_assert_ptr_nonnull(ids_st);
  static char ids[N][33];
  uint64_t k = 0;
  for (int i = 0; i < N; i++)
    do
      snprintf(ids[i], sizeof ids[i], "%032llx",
               (unsigned long long)(k++ * 0x9e3779b97f4a7c15ull));
    while ((fnv1a(ids[i]) & (N - 1)) != 0);
  attnd_session_shape_t sh = {.H = 1, .Hkv = 1, .Dh = 2, .Dv = 2};
  attnd_session_info_t in;
  attnd_error_t e;
  uint64_t before = attnd__session_probes;
  for (int i = 0; i < N; i++)
    ck_assert_msg(attnd_session_create(ids_st, &sh, 64, 600, ids[i], &in, &e) ==
                      0,
                  "%s: %s", ids[i], e.message);
  for (int i = 0; i < N; i++)
    ck_assert_msg(attnd_session_get(ids_st, ids[i], &in, &e) == 0, "%s: %s",
                  ids[i], e.message);
  uint64_t probes = attnd__session_probes - before;
  ck_assert_msg(probes <= 8 * N, "%d creates and gets: %llu comparisons", 2 * N,
                (unsigned long long)probes);
  attnd_sessions_free(ids_st);
}
END_TEST

/* Listing every session costs linear time: a page is found from the ids'
 * order (log(sessions) + its size), not from a walk of every session, which
 * made a walk through the list cost sessions squared over the page size
 * under the store's lock. 4096 sessions whose ids the client gave in
 * ascending order (a search tree without balance would be a list), in
 * pages of 16: the walk counts the sessions compared with `after`. */
START_TEST(test_list_linear) {
  enum { N = 4096, PAGE = 16 };
  attnd_sessions_t *ls = attnd_sessions_new(64 << 20, NULL, NULL);
  ck_assert_ptr_nonnull(ls);
  attnd_session_shape_t sh = {.H = 1, .Hkv = 1, .Dh = 2, .Dv = 2};
  static attnd_session_info_t in, page[PAGE];
  attnd_error_t e;
  char id[33];
  for (int i = 0; i < N; i++) {
    snprintf(id, sizeof id, "%032x", i);
    ck_assert_int_eq(attnd_session_create(ls, &sh, 64, 600, id, &in, &e), 0);
  }
  char after[40] = "";
  int at = 0, more = 1;
  uint64_t before = attnd__session_list_visits;
  while (more) {
    int k = attnd_session_list(ls, after, page, PAGE, &more);
    ck_assert_int_ge(k, 0);
    for (int i = 0; i < k; i++, at++) {
      snprintf(id, sizeof id, "%032x", at);
      ck_assert_str_eq(page[i].id, id);
    }
    if (k)
      snprintf(after, sizeof after, "%s", page[k - 1].id);
  }
  uint64_t visits = attnd__session_list_visits - before;
  ck_assert_int_eq(at, N);
  ck_assert_msg(visits <= 8 * N, "%d sessions in pages of %d: %llu compared", N,
                PAGE, (unsigned long long)visits);
  attnd_sessions_free(ls);
}
END_TEST

static int by_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Listing pages through every session once, in id order, whatever the
 * page size (a heap of the page's least ids): 300 random ids, pages of 1,
 * 2, 7, 299, 300 and 1000, each from the start and from a cut in the middle
 * (an `after` that is no session's id). */
START_TEST(test_list_pages) {
  enum { N = 300 };
  attnd_sessions_t *ls = attnd_sessions_new(64 << 20, NULL, NULL);
  ck_assert_ptr_nonnull(ls);
  static char ids[N][33];
  char *sorted[N];
  attnd_session_shape_t sh = {.H = 1, .Hkv = 1, .Dh = 2, .Dv = 2};
  attnd_session_info_t in, page[1000];
  attnd_error_t e;
  uint64_t x = 88172645463325252ull;
  for (int i = 0; i < N; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    snprintf(ids[i], sizeof ids[i], "%016llx%016llx", (unsigned long long)x,
             (unsigned long long)(x * 0x9e3779b97f4a7c15ull));
    ck_assert_int_eq(attnd_session_create(ls, &sh, 64, 600, ids[i], &in, &e),
                     0);
    sorted[i] = ids[i];
  }
  qsort(sorted, N, sizeof *sorted, by_str);
  static const size_t sizes[] = {1, 2, 7, 299, 300, 1000};
  for (size_t z = 0; z < sizeof sizes / sizeof *sizes; z++)
    for (int from_mid = 0; from_mid < 2; from_mid++) {
      char after[40] = "";
      int at = 0, more = 1;
      if (from_mid) { /* just before sorted[N / 2]: its last digit less 1 */
        snprintf(after, sizeof after, "%s", sorted[N / 2]);
        after[31]--;
        at = N / 2;
      }
      while (more) {
        int k = attnd_session_list(ls, after, page, sizes[z], &more);
        ck_assert_int_ge(k, 0);
        ck_assert_int_le(k, (int)sizes[z]);
        for (int i = 0; i < k; i++, at++) {
          ck_assert_int_lt(at, N);
          ck_assert_str_eq(page[i].id, sorted[at]);
        }
        ck_assert_int_eq(more, at < N);
        if (k)
          snprintf(after, sizeof after, "%s", page[k - 1].id);
      }
      ck_assert_int_eq(at, N);
    }
  attnd_sessions_free(ls);
}
END_TEST

Suite *test_suite(void) {
  Suite *s = suite_create("session_store");
  TCase *tc = tcase_create("device pages");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_device_pages_counted_apart);
  tcase_add_test(tc, test_fork_copies_on_write);
  tcase_add_test(tc, test_free_lists_never_mixed);
  tcase_add_test(tc, test_eviction_for_the_gpu);
  tcase_add_test(tc, test_lost_device_refuses_steps);
  suite_add_tcase(s, tc);
  tc = tcase_create("ids");
  tcase_add_test(tc, test_ids_that_collide);
  tcase_add_test(tc, test_list_pages);
  tcase_add_test(tc, test_list_linear);
  suite_add_tcase(s, tc);
  return s;
}
