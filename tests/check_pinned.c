/* tests/check_pinned.c: the pool of pinned host memory that requests'
 * tensors bound for the GPU are decoded into (server/sched/pinned.h).
 *
 * Where there is no GPU nothing can be pinned, so the pool here is made of
 * ordinary memory, as pinned memory is ordinary memory to the CPU: the
 * tests check the pool's own logic and the server's use of it, not the
 * speed of the copies (the device's HTTP row measures that). TCases:
 *   - pool: first fit, neighbours merging, alignment, the minimum size,
 *     misses, against a model of the blocks on random sequences, and from
 *     several threads at once; a put of what is not a block aborts;
 *   - decode: /v1 base64 tensors and OIP binary bodies decoded in this
 *     process land in the pool, are not counted again in the request's
 *     memory (the pool was, at start), and go back with the request, or
 *     to the caller when the decode fails; a cuda request's results;
 *   - server: tests/pinned/attnd_pinned.c, attnd with such a pool, over
 *     real sockets: replies against the float64 reference with the
 *     tensors in the pool, in a pool too small for them, /metrics,
 *     /v1/info, the budget less the pool, and every block back after each
 *     reply;
 *   - gpu: build/attnd itself: on the device, the pool pinned with CUDA
 *     and a request on cuda through it; without a GPU, no pool.
 * Each test names the bug it catches. */
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/oip.h"
#include "sched/pinned.h"
#include "sched/request.h"
#include "server_harness.h"
#include "suite.h"
#include "testutil.h"
#include "triton_client.h"

#define MIN ATTND_PINNED_MIN
#define ALIGN ATTND_PINNED_ALIGN

/* ---- ordinary memory standing in for pinned memory ------------------- */

static int heap_allocs, heap_frees;

static void *heap_alloc(size_t bytes) {
  heap_allocs++;
  return aligned_alloc(ALIGN, bytes);
}

static void heap_free(void *p) {
  heap_frees++;
  free(p);
}

static const attnd_host_memory_t heap = {heap_alloc, heap_free};

static char *start_pool(size_t bytes) {
  ck_assert_int_eq(attnd_pinned_start(bytes, &heap), 0);
  char *base = attnd_pinned_get(bytes);
  ck_assert_ptr_nonnull(base); /* the pool's first byte */
  attnd_pinned_put(base);
  return base;
}

static attnd_pinned_stats_t stats(void) {
  attnd_pinned_stats_t st;
  attnd_pinned_stats(&st);
  return st;
}

/* ---- pool ---------------------------------------------------------------- */

/* Bugs: no first fit (a block placed past a gap that holds it), freed
 * neighbours that do not merge, lengths not rounded to the alignment, a
 * second start over the first pool, stop not giving the memory back. */
START_TEST(test_pool_fit) {
  char *base = start_pool(16 * MIN);
  ck_assert_int_eq(attnd_pinned_start(MIN, &heap), -1); /* one pool */
  ck_assert_ptr_null(attnd_pinned_get(MIN - 1));        /* too small */
  ck_assert_uint_eq(stats().missed, 0);
  char *b[16];
  for (int i = 0; i < 16; i++) {
    b[i] = attnd_pinned_get(MIN);
    ck_assert_ptr_eq(b[i], base + (size_t)i * MIN);
    ck_assert(attnd_pinned_owns(b[i]) && attnd_pinned_owns(b[i] + MIN - 1));
  }
  ck_assert_ptr_null(attnd_pinned_get(MIN)); /* full */
  ck_assert_uint_eq(stats().missed, 1);
  ck_assert(!attnd_pinned_owns(base + 16 * MIN));
  ck_assert(!attnd_pinned_owns(base - 1));
  /* two neighbours freed make one gap; a larger block takes it */
  attnd_pinned_put(b[3]);
  attnd_pinned_put(b[4]);
  ck_assert_int_eq(stats().used, 14 * (int64_t)MIN);
  ck_assert_int_eq(stats().blocks, 14);
  ck_assert_ptr_eq(attnd_pinned_get(2 * MIN), b[3]);
  /* a length rounded up to the alignment: MIN + 1 takes MIN + ALIGN */
  attnd_pinned_put(b[10]);
  attnd_pinned_put(b[11]);
  char *odd = attnd_pinned_get(MIN + 1);
  ck_assert_ptr_eq(odd, b[10]);
  ck_assert_int_eq(stats().used, 15 * (int64_t)MIN + (int64_t)ALIGN);
  /* the gap left after it holds MIN - ALIGN: too small for MIN */
  ck_assert_ptr_null(attnd_pinned_get(MIN));
  ck_assert_uint_eq(stats().missed, 2);
  attnd_pinned_put(odd);
  char *two = attnd_pinned_get(2 * MIN);
  ck_assert_ptr_eq(two, b[10]);
  ck_assert_int_eq(stats().used, 16 * (int64_t)MIN);
  ck_assert_int_eq(stats().high, 16 * (int64_t)MIN);
  /* everything back: one gap, the whole pool */
  for (int i = 0; i < 16; i++)
    if (i != 3 && i != 4 && i != 10 && i != 11)
      attnd_pinned_put(b[i]);
  attnd_pinned_put(b[3]);
  attnd_pinned_put(two);
  attnd_pinned_put(NULL);
  ck_assert_int_eq(stats().used, 0);
  ck_assert_int_eq(stats().blocks, 0);
  char *all = attnd_pinned_get(16 * MIN);
  ck_assert_ptr_eq(all, base);
  attnd_pinned_put(all);
  /* start_pool's, b's, 2 MIN, odd, two, all */
  ck_assert_uint_eq(stats().served, 1 + 16 + 1 + 1 + 1 + 1);
  attnd_pinned_stop();
  ck_assert_int_eq(heap_frees, heap_allocs);
  ck_assert_int_eq(stats().bytes, 0);
  ck_assert_ptr_null(attnd_pinned_get(MIN)); /* no pool */
  ck_assert(!attnd_pinned_owns(base));
}
END_TEST

/* The model: blocks live, as offsets and lengths, in no order. */
enum { MAX_LIVE = 256 };
typedef struct {
  size_t off[MAX_LIVE], len[MAX_LIVE];
  int n;
} model_t;

/* Whether [off, off + len) is free in the model and inside `bytes`. */
static int model_free(const model_t *m, size_t off, size_t len, size_t bytes) {
  if (off + len > bytes)
    return 0;
  for (int i = 0; i < m->n; i++)
    if (off < m->off[i] + m->len[i] && m->off[i] < off + len)
      return 0;
  return 1;
}

/* The first fit of len: the lowest offset where it is free (every gap
 * starts at 0 or at a block's end). */
static size_t model_first_fit(const model_t *m, size_t len, size_t bytes) {
  size_t best = SIZE_MAX;
  if (model_free(m, 0, len, bytes))
    best = 0;
  for (int i = 0; i < m->n; i++) {
    size_t off = m->off[i] + m->len[i];
    if (off < best && model_free(m, off, len, bytes))
      best = off;
  }
  return best;
}

/* Bugs: a gap found too small or too large (off by one block), a block
 * handed out twice, a put that frees its neighbour's bytes, the used count
 * drifting, a miss where a gap holds the block. */
START_TEST(test_pool_model) {
  const size_t bytes = 64 * MIN;
  char *base = start_pool(bytes);
  model_t m = {.n = 0};
  tu_rng_t rng;
  tu_rng_seed(&rng, 31 + (uint64_t)_i);
  size_t used = 0;
  uint64_t missed = 0;
  for (int step = 0; step < 4000; step++) {
    int get = m.n == 0 || (m.n < MAX_LIVE && tu_rng_below(&rng, 100) < 55);
    if (get) {
      size_t want = MIN + (size_t)tu_rng_below(&rng, (int64_t)(6 * MIN));
      size_t len = (want + ALIGN - 1) / ALIGN * ALIGN;
      size_t fit = model_first_fit(&m, len, bytes);
      char *p = attnd_pinned_get(want);
      if (fit == SIZE_MAX) {
        ck_assert_msg(p == NULL, "step %d: a block past the pool", step);
        missed++;
        continue;
      }
      ck_assert_msg(p == base + fit, "step %d: %zu bytes at %td, first fit %zu",
                    step, want, p ? p - base : (ptrdiff_t)-1, fit);
      m.off[m.n] = fit;
      m.len[m.n++] = len;
      used += len;
    } else {
      int i = (int)tu_rng_below(&rng, m.n);
      attnd_pinned_put(base + m.off[i]);
      used -= m.len[i];
      m.off[i] = m.off[m.n - 1];
      m.len[i] = m.len[--m.n];
    }
    attnd_pinned_stats_t st = stats();
    ck_assert_int_eq(st.used, (int64_t)used);
    ck_assert_int_eq(st.blocks, m.n);
    ck_assert_uint_eq(st.missed, missed);
  }
  for (int i = 0; i < m.n; i++)
    attnd_pinned_put(base + m.off[i]);
  ck_assert_int_eq(stats().used, 0);
  ck_assert_ptr_eq(attnd_pinned_get(bytes), base);
  attnd_pinned_put(base);
  attnd_pinned_stop();
}
END_TEST

/* Threads that take blocks, fill them with their own pattern, check it and
 * give them back. Bugs: the list changed outside the lock, two threads
 * given overlapping blocks. */
static void *hammer(void *arg) {
  uintptr_t me = (uintptr_t)arg;
  tu_rng_t rng;
  tu_rng_seed(&rng, me);
  char *mine[8] = {0};
  size_t len[8] = {0};
  long bad = 0;
  for (int step = 0; step < 3000; step++) {
    int k = (int)tu_rng_below(&rng, 8);
    if (mine[k]) {
      for (size_t i = 0; i < len[k]; i += 512)
        bad += mine[k][i] != (char)(me * 8 + (uintptr_t)k);
      attnd_pinned_put(mine[k]);
      mine[k] = NULL;
    } else {
      len[k] = MIN + (size_t)tu_rng_below(&rng, (int64_t)MIN);
      if ((mine[k] = attnd_pinned_get(len[k])) != NULL)
        memset(mine[k], (char)(me * 8 + (uintptr_t)k), len[k]);
    }
  }
  for (int k = 0; k < 8; k++)
    attnd_pinned_put(mine[k]);
  return (void *)bad;
}

START_TEST(test_pool_threads) {
  /* room for half of what one of them may hold at once (8 blocks of up to
   * 2 MIN): full at times even where the scheduler runs them one after
   * another (with 24 MIN, half of what all four may hold, a loaded machine
   * ran them so and the pool never filled) */
  start_pool(8 * MIN);
  pthread_t t[4];
  for (uintptr_t i = 0; i < 4; i++)
    ck_assert_int_eq(pthread_create(&t[i], NULL, hammer, (void *)(i + 1)), 0);
  long bad = 0;
  for (int i = 0; i < 4; i++) {
    void *r;
    pthread_join(t[i], &r);
    bad += (long)r;
  }
  ck_assert_int_eq(bad, 0);
  ck_assert_int_eq(stats().used, 0);
  ck_assert_int_eq(stats().blocks, 0);
  ck_assert_uint_gt(stats().missed, 0); /* the pool was full at times */
  attnd_pinned_stop();
}
END_TEST

/* attnd_tensor_alloc: the pool for large buffers while it has room, else
 * the heap; attnd_tensor_free tells them apart. Bugs: small buffers taking
 * the pool, a full pool failing the allocation, a heap pointer put into
 * the pool (aborts). */
START_TEST(test_tensor_alloc) {
  start_pool(2 * MIN);
  int pinned = -1;
  void *small = attnd_tensor_alloc(MIN - 1, &pinned);
  ck_assert(small && pinned == 0 && !attnd_pinned_owns(small));
  void *a = attnd_tensor_alloc(MIN, &pinned);
  ck_assert(a && pinned == 1 && attnd_pinned_owns(a));
  void *b = attnd_tensor_alloc(MIN + 1, &pinned); /* one MIN left */
  ck_assert(b && pinned == 0 && !attnd_pinned_owns(b));
  memset(b, 1, MIN + 1);
  ck_assert_uint_eq(stats().missed, 1);
  attnd_tensor_free(small);
  attnd_tensor_free(a);
  attnd_tensor_free(b);
  attnd_tensor_free(NULL);
  ck_assert_int_eq(stats().used, 0);
  attnd_pinned_stop();
  /* no pool: the heap */
  void *c = attnd_tensor_alloc(4 * MIN, &pinned);
  ck_assert(c && pinned == 0);
  attnd_tensor_free(c);
}
END_TEST

/* A put of a pointer inside a block, not its start, is a bug in the
 * caller, as free() of one is: it aborts rather than freeing the wrong
 * bytes. */
START_TEST(test_put_inside_aborts) {
  start_pool(4 * MIN);
  char *p = attnd_pinned_get(MIN);
  attnd_pinned_put(p + ALIGN);
}
END_TEST

/* ---- decode -------------------------------------------------------------- */

static attnd_config_t cfg;

static void load_config(void) {
  static char *argv[] = {"attnd", "--workers", "1", "--threads-per-request",
                         "1",     NULL};
  static char *envp[] = {NULL};
  attnd_config_load_t how;
  char msg[256];
  if (attnd_config_load(&cfg, &how, 5, argv, envp, 2, msg, sizeof msg) < 0) {
    fprintf(stderr, "check_pinned: the config does not load: %s\n", msg);
    exit(EXIT_FAILURE);
  }
}

enum { L = 64, E = 512, H = 4 }; /* q, k and v of 128 KiB each */

/* Random self-attention inputs, no projections: q, k and v of [L, E]. */
static void inputs(float **q, float **k, float **v, uint64_t seed) {
  tu_rng_t rng;
  tu_rng_seed(&rng, seed);
  *q = tu_rand_floats(&rng, (size_t)L * E, 1.0f);
  *k = tu_rand_floats(&rng, (size_t)L * E, 1.0f);
  *v = tu_rand_floats(&rng, (size_t)L * E, 1.0f);
}

static attn_params_t params_of(float *q, float *k, float *v) {
  attn_params_t p = {0};
  p.query = tu_t2(q, L, E);
  p.key = tu_t2(k, L, E);
  p.value = tu_t2(v, L, E);
  p.num_heads = H;
  return p;
}

/* The /v1 body of p, base64 both ways. */
static char *v1_body(const attn_params_t *p) {
  sh_enc_t e = {.inputs = SH_BASE64, .encoding = "base64", .metrics_off = 1};
  json_t *j = sh_request_json(p, &e);
  char *s = json_dumps(j, JSON_COMPACT);
  json_decref(j);
  return s;
}

/* The OIP body of p for the generic model: q, k and v as binary data in
 * `dt`, num_heads `heads`; *json_len the JSON's length. With `sent`, the
 * inputs as attnd reads them (a BF16 one rounded as tritonclient does):
 * sent[0..2], malloc'd. */
static char *oip_body(const float *q, const float *k, const float *v,
                      tc_datatype_t dt, int heads, size_t *len, long *json_len,
                      float **sent) {
  static const char *const names[] = {"query", "key", "value"};
  const float *x[] = {q, k, v};
  const int64_t shape[] = {L, E};
  tc_input_t in[3];
  for (int i = 0; i < 3; i++) {
    tc_input_init(&in[i], names[i], dt, 2, shape);
    tc_input_set_floats(&in[i], x[i], 1);
    if (sent) {
      sent[i] = malloc((size_t)L * E * sizeof(float));
      tc_input_as_f32(&in[i], sent[i]);
    }
  }
  tc_param_t ps[] = {TC_PINT("num_heads", heads)};
  tc_output_t out[] = {{"output", 1}};
  char *body = NULL;
  ck_assert_int_eq(
      tc_request_body(in, 3, out, 1, ps, 1, NULL, &body, len, json_len), 0);
  for (int i = 0; i < 3; i++)
    tc_input_free(&in[i]);
  return body;
}

/* Bugs: base64 tensors decoded to the heap; pinned bytes counted again in
 * the request's memory (the budget took the pool at start); a request
 * that does not give its blocks back. */
START_TEST(test_decode_v1) {
  float *q, *k, *v;
  inputs(&q, &k, &v, 7);
  attn_params_t p = params_of(q, k, v);
  char *body = v1_body(&p);
  attnd_request_t *heap_req = NULL, *req = NULL;
  attnd_error_t e;
  ck_assert_int_eq(
      attnd_request_decode(body, strlen(body), &cfg, NULL, &heap_req, &e), 0);
  start_pool(64 * MIN);
  ck_assert_int_eq(
      attnd_request_decode(body, strlen(body), &cfg, NULL, &req, &e), 0);
  const void *t[] = {req->params.query.data, req->params.key.data,
                     req->params.value.data};
  for (int i = 0; i < 3; i++)
    ck_assert_msg(attnd_pinned_owns(t[i]), "tensor %d not pinned", i);
  ck_assert(!attnd_pinned_owns(heap_req->params.query.data));
  /* each tensor's block: its base64 text's bytes (up to 2 past the
   * floats), rounded up to whole pages */
  size_t bytes = (size_t)L * E * sizeof(float);
  ck_assert_int_eq(stats().blocks, 3);
  ck_assert_int_eq(stats().used, 3 * (int64_t)(bytes + ALIGN));
  size_t less = attnd_request_memory(heap_req) - attnd_request_memory(req);
  ck_assert_msg(less >= 3 * bytes && less <= 3 * (bytes + 2),
                "%zu bytes less counted with the pool", less);
  ck_assert_mem_eq(req->params.value.data, v, bytes);
  attnd_request_free(req);
  ck_assert_int_eq(stats().used, 0);
  attnd_request_free(heap_req);
  attnd_pinned_stop();
  free(body);
  free(q), free(k), free(v);
}
END_TEST

/* The OIP body as intake.c keeps it: in a pinned block, after a pad that
 * puts the binary data on a 64-byte boundary. */
static char *pinned_body(const char *body, size_t len, long json_len,
                         size_t *pad) {
  char *blk = attnd_pinned_get(len + 65);
  ck_assert_ptr_nonnull(blk);
  *pad = (64 - ((uintptr_t)blk + (uintptr_t)json_len) % 64) % 64;
  memset(blk, 0, *pad);
  memcpy(blk + *pad, body, len);
  blk[*pad + len] = 0;
  return blk;
}

/* A binary FP32 body in the pool: the request reads its tensors where
 * they lie, takes the block, does not count it, and gives it back when
 * freed; a BF16 body's tensors are widened into the pool. Bugs: the block
 * counted in the request's memory, a request that takes the block and
 * does not give it back, widened tensors on the heap. */
START_TEST(test_decode_oip) {
  float *q, *k, *v;
  inputs(&q, &k, &v, 8);
  start_pool(64 * MIN);
  size_t len, pad, bytes = (size_t)L * E * sizeof(float);
  long json_len;
  char *body = oip_body(q, k, v, TC_FP32, H, &len, &json_len, NULL);
  char *blk = pinned_body(body, len, json_len, &pad);
  void *own = blk;
  attnd_request_t *req = NULL;
  attnd_error_t e;
  ck_assert_int_eq(attnd_oip_decode(ATTND_OIP_GENERIC, blk + pad, len, json_len,
                                    &own, len + 65, &cfg, NULL, &req, &e),
                   0);
  ck_assert_ptr_null(own); /* taken */
  const char *qd = req->params.query.data;
  ck_assert_msg(qd >= blk && qd < blk + len + 65, "query not read in place");
  ck_assert_mem_eq(req->params.key.data, k, bytes);
  /* the memory of the same request with its body on the heap */
  char *copy = malloc(len + 65);
  size_t hpad = (64 - ((uintptr_t)copy + (uintptr_t)json_len) % 64) % 64;
  memcpy(copy + hpad, body, len);
  void *hown = copy;
  attnd_request_t *heap_req = NULL;
  ck_assert_int_eq(attnd_oip_decode(ATTND_OIP_GENERIC, copy + hpad, len,
                                    json_len, &hown, len + 65, &cfg, NULL,
                                    &heap_req, &e),
                   0);
  ck_assert_ptr_null(hown);
  ck_assert_uint_eq(attnd_request_memory(heap_req) - attnd_request_memory(req),
                    len + 65);
  attnd_request_free(heap_req);
  attnd_request_free(req);
  ck_assert_int_eq(stats().used, 0);
  free(body);

  /* BF16: the body is read, the tensors widened into the pool */
  body = oip_body(q, k, v, TC_BF16, H, &len, &json_len, NULL);
  blk = pinned_body(body, len, json_len, &pad);
  own = blk;
  ck_assert_int_eq(attnd_oip_decode(ATTND_OIP_GENERIC, blk + pad, len, json_len,
                                    &own, len + 65, &cfg, NULL, &req, &e),
                   0);
  ck_assert_ptr_eq(own, blk); /* nothing read in place: the caller's */
  ck_assert(attnd_pinned_owns(req->params.query.data));
  ck_assert(attnd_pinned_owns(req->params.value.data));
  attnd_request_free(req);
  attnd_pinned_put(blk);
  ck_assert_int_eq(stats().used, 0);
  free(body);
  attnd_pinned_stop();
  free(q), free(k), free(v);
}
END_TEST

/* A decode that fails after reading a tensor in place gives the block
 * back to the caller, who still owns it. Bug: the failed request frees
 * the caller's block (a double put, which aborts). */
START_TEST(test_decode_oip_fails) {
  float *q, *k, *v;
  inputs(&q, &k, &v, 9);
  start_pool(64 * MIN);
  size_t len, pad;
  long json_len;
  char *body =
      oip_body(q, k, v, TC_FP32, 3, &len, &json_len, NULL); /* 512 % 3 */
  char *blk = pinned_body(body, len, json_len, &pad);
  void *own = blk;
  attnd_request_t *req = NULL;
  attnd_error_t e;
  ck_assert_int_eq(attnd_oip_decode(ATTND_OIP_GENERIC, blk + pad, len, json_len,
                                    &own, len + 65, &cfg, NULL, &req, &e),
                   -1);
  ck_assert_ptr_null(req);
  ck_assert_ptr_eq(own, blk);
  ck_assert_int_eq(stats().blocks, 1);
  attnd_pinned_put(blk);
  ck_assert_int_eq(stats().used, 0);
  attnd_pinned_stop();
  free(body);
  free(q), free(k), free(v);
}
END_TEST

/* A request planned on cuda takes its large buffers (its results, which
 * the GPU copies back into them) from the pool; one on the cpu from the
 * heap; small ones from its region either way; all go back with it. No GPU
 * can plan one here, so the test sets the plan's backend as planning on
 * cuda would. Bugs: results on cuda in ordinary memory; cpu requests
 * taking the pool; a result block that the request's free never puts
 * back. */
START_TEST(test_results_pinned) {
  float *q, *k, *v;
  inputs(&q, &k, &v, 15);
  attn_params_t p = params_of(q, k, v);
  char *body = v1_body(&p);
  start_pool(64 * MIN);
  attnd_request_t *req = NULL;
  attnd_error_t e;
  ck_assert_int_eq(
      attnd_request_decode(body, strlen(body), &cfg, NULL, &req, &e), 0);
  int64_t inputs_used = stats().used;
  size_t bytes = (size_t)req->plan.out_elems * sizeof(float);
  float *cpu_out = attnd_request_alloc(req, bytes);
  ck_assert(!attnd_pinned_owns(cpu_out));
  attnd_request_release(req, cpu_out);
  req->plan.backend = ATTN_BACKEND_CUDA;
  void *small = attnd_request_alloc(req, 64);
  ck_assert(small && !attnd_pinned_owns(small));
  req->out.out = attnd_request_alloc(req, bytes);
  ck_assert(attnd_pinned_owns(req->out.out));
  ck_assert_int_eq(stats().used, inputs_used + (int64_t)bytes);
  attnd_request_release(req, small);
  attnd_request_free(req);
  ck_assert_int_eq(stats().used, 0);
  attnd_pinned_stop();
  free(body);
  free(q), free(k), free(v);
}
END_TEST

/* ---- server -------------------------------------------------------------- */

/* Starts attnd-pinned with a pool of `pool` (ATTND_TEST_PINNED_BYTES) and
 * `args`. */
static void start_pinned(sh_server_t *s, const char *pool,
                         const char *const *args) {
  char bin[4096];
  sh_bin_beside("tests/attnd-pinned", bin, sizeof bin);
  const char *was = getenv("ATTND_BIN");
  char *keep = was ? strdup(was) : NULL;
  setenv("ATTND_BIN", bin, 1);
  setenv("ATTND_TEST_PINNED_BYTES", pool, 1);
  int rc = sh_server_start(s, args);
  if (keep)
    setenv("ATTND_BIN", keep, 1), free(keep);
  else
    unsetenv("ATTND_BIN");
  unsetenv("ATTND_TEST_PINNED_BYTES");
  ck_assert_msg(rc == 0, "%s did not start:\n%s", bin, s->log);
}

static double pinned_metric(int port, const char *which) {
  char sample[96];
  snprintf(sample, sizeof sample, "attnd_pinned_%s", which);
  return sh_metric(port, sample);
}

/* The reply of an OIP request (body of len, json_len), checked against the
 * reference of p within tol. */
static void oip_check(int port, const char *body, size_t len, long json_len,
                      const attn_params_t *p, double tol) {
  char hdr[80];
  snprintf(hdr, sizeof hdr, "Inference-Header-Content-Length: %ld", json_len);
  const char *const headers[] = {hdr, NULL};
  sh_client_t c;
  sh_client_init(&c, port);
  sh_req_t rq = {.method = "POST",
                 .path = "/v2/models/attention/infer",
                 .content_type = "application/octet-stream",
                 .body = body,
                 .len = len,
                 .headers = headers};
  sh_resp_t r;
  ck_assert_int_eq(sh_http(&c, &rq, &r), 0);
  ck_assert_msg(r.status == 200, "OIP: %ld %s", r.status, r.body);
  char lenbuf[32];
  ck_assert_ptr_nonnull(
      sh_header(&r, "Inference-Header-Content-Length", lenbuf, sizeof lenbuf));
  long jl = atol(lenbuf);
  ck_assert(jl > 0 && (size_t)jl + (size_t)L * E * 4 == r.body_len);
  ref_result_t ref;
  ref_attention(p, &ref);
  double err = tu_rel_err((const float *)(r.body + jl), ref.out, (size_t)L * E);
  ck_assert_msg(err <= tol, "OIP output off by %g", err);
  ref_result_free(&ref);
  sh_resp_free(&r);
  sh_client_free(&c);
}

static void v1_check(int port, const attn_params_t *p, double tol) {
  char *body = v1_body(p);
  sh_resp_t r;
  ck_assert_int_eq(sh_post(port, body, strlen(body), &r), 0);
  ck_assert_msg(r.status == 200, "/v1: %ld %s", r.status, r.body);
  json_t *rep = sh_json(&r);
  char why[256];
  ck_assert_msg(sh_check_reply(p, rep, SH_BASE64, tol, why, sizeof why) == 0,
                "/v1: %s", why);
  json_decref(rep);
  sh_resp_free(&r);
  free(body);
}

/* An OIP binary FP32 request of random inputs (seed) checked within tol;
 * then the pool holds nothing, and `pinned` buffers went in it, ever. */
static void oip_fp32(int port, uint64_t seed, double tol, double pinned) {
  float *q, *k, *v;
  inputs(&q, &k, &v, seed);
  attn_params_t p = params_of(q, k, v);
  size_t len;
  long json_len;
  char *body = oip_body(q, k, v, TC_FP32, H, &len, &json_len, NULL);
  oip_check(port, body, len, json_len, &p, tol);
  free(body);
  free(q), free(k), free(v);
  ck_assert_int_eq(pinned_metric(port, "tensors_total{memory=\"pinned\"}"),
                   pinned);
  ck_assert_int_eq(pinned_metric(port, "memory_bytes{state=\"used\"}"), 0);
}

/* The budget requests get is `bytes`: a request of more is refused, and
 * its message says how much they may hold. */
static void budget_is(int port, long long bytes) {
  sh_resp_t r;
  char *big = sh_slow_body(4096, 1024, 8, 3, NULL);
  ck_assert_int_eq(sh_post(port, big, strlen(big), &r), 0);
  ck_assert_int_eq(r.status, 422);
  char want[64];
  snprintf(want, sizeof want, "over the %lld of", bytes);
  ck_assert_msg(strstr(r.body, want), "%s", r.body);
  sh_resp_free(&r);
  free(big);
}

/* Requests through the pool, by OIP binary FP32 (the body pinned, its
 * tensors read there), OIP binary BF16 (the body and the three widened
 * tensors) and /v1 base64 (the three tensors): each reply right, each
 * request's blocks counted, and all given back once it is answered. Bugs:
 * a body block never put back (used stays up); a block put twice (abort:
 * the server is gone); the pool not said in /metrics or /v1/info; the
 * budget not less the pool. */
START_TEST(test_server_pool) {
  sh_server_t s;
  const char *const args[] = {
      "--workers", "1", "--max-memory-bytes", "64M", "--kv-cache-bytes",
      "8M",        NULL};
  start_pinned(&s, "8M", args);
  ck_assert_ptr_nonnull(
      strstr(s.log, "\"event\":\"pinned_memory\",\"bytes\":8388608"));
  ck_assert_int_eq(pinned_metric(s.port, "memory_bytes{state=\"size\"}"),
                   8 << 20);
  sh_resp_t r;
  ck_assert_int_eq(sh_get(s.port, "/v1/info", &r), 0);
  json_t *info = sh_json(&r);
  ck_assert_int_eq(
      json_integer_value(json_object_get(
          json_object_get(json_object_get(info, "backend"), "cuda"),
          "pinned_memory_bytes")),
      8 << 20);
  json_decref(info);
  sh_resp_free(&r);

  oip_fp32(s.port, 10, 1e-5, 1); /* the body */

  /* BF16: the body and the three widened tensors; the reference on the
   * inputs as the server reads them */
  float *q, *k, *v, *x16[3];
  inputs(&q, &k, &v, 11);
  size_t len;
  long json_len;
  char *body = oip_body(q, k, v, TC_BF16, H, &len, &json_len, x16);
  attn_params_t p16 = params_of(x16[0], x16[1], x16[2]);
  oip_check(s.port, body, len, json_len, &p16, 1e-5);
  free(body);
  free(x16[0]), free(x16[1]), free(x16[2]);
  ck_assert_int_eq(pinned_metric(s.port, "tensors_total{memory=\"pinned\"}"),
                   5);
  ck_assert_int_eq(pinned_metric(s.port, "memory_bytes{state=\"used\"}"), 0);

  /* /v1 base64: the three tensors */
  attn_params_t p = params_of(q, k, v);
  v1_check(s.port, &p, 1e-5);
  ck_assert_int_eq(pinned_metric(s.port, "tensors_total{memory=\"pinned\"}"),
                   8);
  ck_assert_int_eq(pinned_metric(s.port, "tensors_total{memory=\"ordinary\"}"),
                   0);
  ck_assert_int_eq(pinned_metric(s.port, "memory_bytes{state=\"used\"}"), 0);
  /* the budget is max_memory_bytes less kv_cache_bytes and the pool */
  budget_is(s.port, (64 - 8 - 8) << 20);
  ck_assert_int_eq(sh_server_stop(&s, 10), 0);
  free(q), free(k), free(v);
}
END_TEST

/* A pool too small for the tensors: those that find no room go to the
 * heap, counted, and the replies are still right. Bug: a full pool that
 * fails the request (out_of_memory) instead. */
START_TEST(test_server_pool_full) {
  sh_server_t s;
  const char *const args[] = {"--workers", "1", NULL};
  start_pinned(&s, "320K", args); /* two of the three tensors of /v1 */
  float *q, *k, *v;
  inputs(&q, &k, &v, 13);
  attn_params_t p = params_of(q, k, v);
  v1_check(s.port, &p, 1e-5);
  free(q), free(k), free(v);
  ck_assert_int_eq(pinned_metric(s.port, "tensors_total{memory=\"pinned\"}"),
                   2);
  ck_assert_int_eq(pinned_metric(s.port, "tensors_total{memory=\"ordinary\"}"),
                   1);
  /* an OIP body larger than the pool: on the heap, read in place there */
  oip_fp32(s.port, 14, 1e-5, 2);
  ck_assert_int_eq(pinned_metric(s.port, "tensors_total{memory=\"ordinary\"}"),
                   2);
  ck_assert_int_eq(sh_server_stop(&s, 10), 0);
}
END_TEST

/* build/attnd itself, backend auto, pinned_memory_bytes 8M. Where no GPU
 * serves: no pool, and 0 said for it (bug: a pool pinned, or tried,
 * without a GPU, or the budget made smaller). On the GPU (the device's
 * check runs this case): the pool pinned with CUDA, said in the log,
 * /metrics and /v1/info, the budget less it, and an OIP binary request on
 * cuda, its body and its output in the pool, within 1e-4 of the
 * reference, their blocks given back (bugs: cudaHostAlloc not called or
 * failing, a pinned body the GPU cannot read). */
START_TEST(test_server_real) {
  attn_cuda_info_t ci;
  attn_cuda_info(&ci);
  sh_server_t s;
  const char *const args[] = {"--backend",
                              "auto",
                              "--max-memory-bytes",
                              "64M",
                              "--kv-cache-bytes",
                              "8M",
                              "--pinned-memory-bytes",
                              "8M",
                              NULL};
  ck_assert_msg(sh_server_start(&s, args) == 0, "%s", s.log);
  long long pool = ci.usable ? 8 << 20 : 0;
  ck_assert_msg(ci.usable ? strstr(s.log, "\"event\":\"pinned_memory\","
                                          "\"bytes\":8388608") != NULL
                          : strstr(s.log, "pinned_memory") == NULL,
                "%s", s.log);
  ck_assert_int_eq(pinned_metric(s.port, "memory_bytes{state=\"size\"}"), pool);
  sh_resp_t r;
  ck_assert_int_eq(sh_get(s.port, "/v1/info", &r), 0);
  char want[64];
  snprintf(want, sizeof want, "\"pinned_memory_bytes\":%lld", pool);
  ck_assert_msg(strstr(r.body, want), "%s", r.body);
  sh_resp_free(&r);
  budget_is(s.port, ((64 - 8) << 20) - pool);
  oip_fp32(s.port, 12, 1e-4, ci.usable ? 2 : 0); /* the body, the output */
  if (ci.usable)                                 /* it ran there */
    ck_assert_int_ge(
        sh_metric(s.port, "attnd_backend_requests_total{backend=\"cuda\"}"), 1);
  ck_assert_int_eq(sh_server_stop(&s, 10), 0);
}
END_TEST

void test_setup(void) {
  sh_init();
  load_config();
}

Suite *test_suite(void) {
  Suite *s = suite_create("pinned");
  TCase *tc = tcase_create("pool");
  tcase_add_test(tc, test_pool_fit);
  tcase_add_loop_test(tc, test_pool_model, 0, 3);
  tcase_add_test(tc, test_pool_threads);
  tcase_add_test(tc, test_tensor_alloc);
  tcase_add_test_raise_signal(tc, test_put_inside_aborts, SIGABRT);
  suite_add_tcase(s, tc);
  tc = tcase_create("decode");
  tcase_add_test(tc, test_decode_v1);
  tcase_add_test(tc, test_decode_oip);
  tcase_add_test(tc, test_decode_oip_fails);
  tcase_add_test(tc, test_results_pinned);
  suite_add_tcase(s, tc);
  tc = tcase_create("server");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_server_pool);
  tcase_add_test(tc, test_server_pool_full);
  suite_add_tcase(s, tc);
  tc = tcase_create("gpu");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_server_real);
  suite_add_tcase(s, tc);
  return s;
}
