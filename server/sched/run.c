/* server/sched/run.c: a request on a worker: its workspace, its outputs and the
 * core's forward pass; and a batch of session steps in one forward pass.
 * See run.h. Worker thread, but for attnd_request_batchable and
 * attnd_request_compatible. */
#include "sched/run.h"

#include <malloc.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "codec/util.h"

/* The outputs not allocated yet (a batch that fell back to single runs has
 * its `out` already). */
static int alloc_outputs(attnd_request_t *j) {
  const attn_plan_t *pl = &j->plan;
  const attn_params_t *p = &j->params;
  struct {
    float **at;
    int want;
    int64_t elems;
  } o[] = {{&j->out.out, 1, pl->out_elems},
           {&j->out.weights, p->want_weights, pl->weights_elems},
           {&j->out.mean_weights, p->want_mean_weights, pl->mean_elems},
           {&j->out.head_outputs, p->want_head_outputs, pl->head_elems}};
  for (size_t i = 0; i < sizeof o / sizeof o[0]; i++) {
    if (!o[i].want || *o[i].at)
      continue;
    size_t bytes = (size_t)o[i].elems * sizeof(float);
    if ((*o[i].at = attnd_request_alloc(j, bytes)) == NULL)
      return -1;
  }
  /* the reductions of the weights (attn_reduce_t): 4 bytes an element */
  const unsigned st = p->reduce.stats;
#define ALLOC4(field, want, n)                                                 \
  if ((want) && !j->out.field &&                                               \
      !(j->out.field = attnd_request_alloc(j, (size_t)(n)*4)))                 \
    return -1;
  ALLOC4(top_k_index, pl->top_k_elems > 0, pl->top_k_elems)
  ALLOC4(top_k_value, pl->top_k_elems > 0, pl->top_k_elems)
  ALLOC4(pooled, pl->pooled_elems > 0, pl->pooled_elems)
  ALLOC4(entropy, st & ATTN_STAT_ENTROPY, pl->stats_elems)
  ALLOC4(sink, st & ATTN_STAT_SINK, pl->stats_elems)
  ALLOC4(distance, st & ATTN_STAT_DISTANCE, pl->stats_elems)
#undef ALLOC4
  return 0;
}

/* Rounds j's float results to its reply's dtype (half.h), in place, once
 * it has computed them. A value the dtype cannot hold (beyond float16's
 * 65504) fails the request as ATTN_ENUMERIC, naming the result (as the
 * protocol names it), the element and the path that asked for the dtype. An OIP
 * request's results that its reply leaves out (output, which the core always
 * computes, when not asked for) are neither rounded nor checked. */
static void round_results(attnd_request_t *j) {
  const attn_plan_t *pl = &j->plan;
  const attn_outputs_t *o = &j->out;
  if (j->result != 0 || j->dtype == ATTND_DTYPE_F32)
    return;
  const struct {
    float *x;
    int64_t n;
    const char *name;
    unsigned oip; /* its ATTND_OIP_* bit */
  } r[] = {
      {o->out, pl->out_elems, "output", ATTND_OIP_OUTPUT},
      {o->weights, pl->weights_elems, "weights", ATTND_OIP_WEIGHTS},
      {o->mean_weights, pl->mean_elems, "weights", ATTND_OIP_WEIGHTS_MEAN},
      {o->head_outputs, pl->head_elems, "head_outputs", ATTND_OIP_HEAD_OUTPUTS},
      {o->top_k_value, pl->top_k_elems, "weights_top_k value",
       ATTND_OIP_TOP_K_VALUE},
      {o->pooled, pl->pooled_elems, "weights_pooled", ATTND_OIP_POOLED},
      {o->entropy, pl->stats_elems, "weights_stats entropy", ATTND_OIP_ENTROPY},
      {o->sink, pl->stats_elems, "weights_stats sink", ATTND_OIP_SINK},
      {o->distance, pl->stats_elems, "weights_stats distance",
       ATTND_OIP_DISTANCE}};
  for (size_t i = 0; i < sizeof r / sizeof r[0]; i++) {
    if (j->oip_outputs && !(j->oip_outputs & r[i].oip))
      continue; /* an OIP reply that leaves it out */
    int64_t at =
        r[i].x ? attnd_dtype_round(j->dtype, r[i].x, (size_t)r[i].n) : -1;
    if (at < 0)
      continue;
    j->result = ATTN_ENUMERIC;
    j->error = (attn_error_t){.code = ATTN_ENUMERIC};
    int f16 = j->dtype == ATTND_DTYPE_F16;
    snprintf(j->error.message, sizeof j->error.message,
             "%s element %lld (row-major) is beyond the range of %s "
             "(+-%s), which %s asks for",
             j->oip_outputs ? attnd_oip_output_name(r[i].oip) : r[i].name,
             (long long)at, f16 ? "float16" : "bfloat16",
             f16 ? "65504" : "3.39e38", j->dtype_field);
    j->error_path = j->dtype_field;
    return;
  }
}

/* ---- the threads' workspaces (run.h) ------------------------------------- */

size_t attnd__scratch_keep = SIZE_MAX;
attnd_budget_t *attnd__scratch_budget;
static _Atomic int64_t scratch_held;

int64_t attnd_scratch_held(void) {
  return atomic_load(&scratch_held);
}

/* Sets the part of s the budget counts as kept to `counted`. */
static void count_kept(attnd_scratch_t *s, size_t counted) {
  if (attnd__scratch_budget)
    attnd_budget_scratch(attnd__scratch_budget,
                         (int64_t)counted - (int64_t)s->counted);
  s->counted = counted;
}

static void drop(attnd_scratch_t *s) {
  free(s->data);
  atomic_fetch_sub(&scratch_held, (int64_t)s->cap);
  s->data = NULL;
  s->cap = 0;
}

/* Grows s to `bytes` at least, for a run whose requests' budget shares
 * count `bytes` of it: the rest of it stays counted as kept. */
static int grow(attnd_scratch_t *s, size_t bytes) {
  if (bytes > s->cap || s->data == NULL) {
    drop(s);
    size_t cap = (bytes + 63) / 64 * 64;
    if ((s->data = aligned_alloc(64, cap ? cap : 64)) != NULL) {
      s->cap = cap;
      atomic_fetch_add(&scratch_held, (int64_t)cap);
    }
  }
  count_kept(s, s->cap > bytes ? s->cap - bytes : 0);
  return s->data ? 0 : -1;
}

/* After a run: s is freed when it is above what a thread keeps, and all
 * of what stays is counted as kept. */
static void keep(attnd_scratch_t *s) {
  if (s->cap > attnd__scratch_keep)
    drop(s);
  count_kept(s, s->cap);
}

void attnd_memory_settle(int64_t bytes) {
  if (bytes > 0 && (uint64_t)bytes > attnd__scratch_keep)
    malloc_trim(0);
}

void attnd_scratch_free(attnd_scratch_t *s) {
  drop(s);
  count_kept(s, 0);
}

/* A request's threads are its OpenMP team (core/forward.c's num_threads),
 * on whichever thread runs it: a worker, or an HTTP thread inline. Where
 * dynamic adjustment is on (OMP_DYNAMIC, which libgomp bounds by
 * OMP_NUM_THREADS and the load average), OpenMP may give a smaller team,
 * which is then not what the request was given, counted busy and reported.
 * dyn-var is each thread's own: off for the thread that runs the call. */
static void exact_team(void) {
#ifdef _OPENMP
  omp_set_dynamic(0);
#endif
}

/* The request alone on `threads` threads (0: its plan's), its workspace
 * in `scratch`. Its own plan stays as it was decoded: the memory budget
 * reads it again when the request is freed (attnd_request_memory). */
static int run_one(attnd_request_t *j, int worker, int threads,
                   attnd_scratch_t *scratch) {
  attn_plan_t plan = j->plan;
  if (threads > 0 && threads < plan.threads)
    attn_plan_set_threads(&plan, threads);
  j->worker = worker;
  j->threads = plan.threads;
  j->batch = 1;
  j->t.start = attnd_now_ms();
  if (grow(scratch, plan.workspace_bytes) < 0 || alloc_outputs(j) < 0) {
    j->result = ATTN_ENOSPC;
    j->error = (attn_error_t){.code = ATTN_ENOSPC};
  } else {
    /* kept for the reply: ATTN_ENUMERIC names the input and the stage */
    j->result =
        attn_forward(&plan, &j->out, scratch->data, scratch->cap, &j->error);
    round_results(j);
  }
  j->t.end = attnd_now_ms();
  return j->result;
}

int attnd_request_run(void *job, int worker, int threads,
                      attnd_scratch_t *scratch) {
  exact_team();
  int rc = run_one(job, worker, threads, scratch);
  keep(scratch);
  return rc;
}

double attnd_request_work(const attnd_request_t *j) {
  return j->plan.flops / ATTND_FLOPS_PER_THREAD;
}

int attnd_request_max_threads(const attnd_request_t *j) {
  double n = attnd_request_work(j);
  return n < 1 ? 1 : n >= j->plan.threads ? j->plan.threads : (int)n;
}

/* ---- batches ------------------------------------------------------------- */

/* A cross-attention layer's steps are computed alone: run_together stacks
 * the query only. */
int attnd_request_batchable(const attnd_request_t *j) {
  const attn_params_t *p = &j->params;
  return j->session && j->layer && !attnd_layer_cross(j->layer) &&
         !p->want_weights && !p->want_mean_weights && !p->want_head_outputs &&
         !j->plan.reduce && p->alibi != ATTN_ALIBI_SLOPES;
}

int attnd_request_compatible(const void *a, const void *b) {
  const attnd_request_t *x = a, *y = b;
  const attn_params_t *p = &x->params, *q = &y->params;
  return x->layer == y->layer && p->query.dim[0] == q->query.dim[0] &&
         p->has_scale == q->has_scale &&
         (!p->has_scale || p->scale == q->scale) &&
         p->has_softcap == q->has_softcap &&
         (!p->has_softcap || p->softcap == q->softcap) &&
         p->has_window_left == q->has_window_left &&
         p->has_window_right == q->has_window_right &&
         (!p->has_window_left || p->window_left == q->window_left) &&
         (!p->has_window_right || p->window_right == q->window_right) &&
         p->alibi == q->alibi && x->plan.threads == y->plan.threads &&
         x->plan.backend == y->plan.backend &&
         x->plan.precision == y->plan.precision;
}

static int cancelled(const attnd_request_t *j) {
  return __atomic_load_n(&j->cancel, __ATOMIC_RELAXED);
}

/* The steps js[0..n) (n >= 2, compatible) as one forward call of batch n:
 * their new tokens' rows stacked into one query [n, Lnew, E], so that each
 * projection is one GEMM over the n·Lnew rows (the layer's weights read
 * once), and each step attends over its own cache (attn_kv_t, per item).
 * Returns 0 with every step's output and k_absmax set, or a negative code
 * (nothing to trust: the caller runs the steps one by one). */
static int run_together(attnd_request_t *const *js, int n, int threads,
                        attnd_scratch_t *scratch) {
  const attnd_request_t *f = js[0];
  int64_t Lq = f->params.query.dim[0], E = f->params.query.dim[1];
  int64_t past[ATTND_SCHED_MAX_BATCH];
  float *const *pages[ATTND_SCHED_MAX_BATCH];
  float absmax[ATTND_SCHED_MAX_BATCH];
  size_t budget = 0;   /* what the steps took from the memory budget */
  uint64_t device = 0; /* and from the GPU's, on the cuda backend */
  for (int i = 0; i < n; i++) {
    past[i] = js[i]->kv_past;
    pages[i] = js[i]->kv_pages;
    absmax[i] = js[i]->kv_absmax;
    budget += attnd_request_memory(js[i]);
    device += js[i]->plan.device_bytes;
  }
  attn_kv_t kv = {
      .past = past, .pages = pages, .k_absmax = absmax, .device = f->kv.device};
  attn_params_t p = f->params;
  p.kv = &kv;
  p.query.rank = 3;
  p.query.dim[0] = n;
  p.query.dim[1] = Lq;
  p.query.dim[2] = E;
  attn_exec_t ex = {.threads = threads > 0 && threads < f->plan.threads
                                   ? threads
                                   : f->plan.threads,
                    .backend = f->plan.backend,
                    .precision = f->plan.precision};
  attn_plan_t plan;
  attn_error_t err;
  if (attn_plan_init(&plan, &p, &ex, &err) < 0)
    return err.code;
  size_t ws = (plan.workspace_bytes + 63) / 64 * 64,
         qb = ((size_t)(n * Lq * E) * sizeof(float) + 63) / 64 * 64,
         ob = (size_t)plan.out_elems * sizeof(float);
  if (ws + qb + ob > budget || plan.device_bytes > device)
    return ATTN_ENOSPC; /* never more than the steps hold */
  if (grow(scratch, ws + qb + ob) < 0)
    return ATTN_ENOSPC;
  float *q = (float *)((char *)scratch->data + ws),
        *out = (float *)((char *)scratch->data + ws + qb);
  size_t row = (size_t)(Lq * E);
  for (int i = 0; i < n; i++) {
    if (alloc_outputs(js[i]) < 0)
      return ATTN_ENOSPC;
    memcpy(q + (size_t)i * row, js[i]->params.query.data, row * sizeof(float));
  }
  p.query.data = q; /* the plan reads p's tensors when it runs */
  attn_outputs_t o = {.out = out};
  int rc = attn_forward(&plan, &o, scratch->data, plan.workspace_bytes, &err);
  if (rc < 0)
    return rc;
  size_t orow = (size_t)(plan.out_elems / n);
  for (int i = 0; i < n; i++) {
    attnd_request_t *j = js[i];
    memcpy(j->out.out, out + (size_t)i * orow, orow * sizeof(float));
    j->out.timing = o.timing;
    j->kv_absmax = absmax[i];
    j->threads = plan.threads;
    j->batch = n;
  }
  return 0;
}

void attnd_request_run_batch(void *const *jobs, int n, int worker, int threads,
                             attnd_scratch_t *scratch, int *results) {
  exact_team();
  attnd_request_t *live[ATTND_SCHED_MAX_BATCH];
  int at[ATTND_SCHED_MAX_BATCH], m = 0;
  double t0 = attnd_now_ms();
  for (int i = 0; i < n; i++) {
    attnd_request_t *j = jobs[i];
    j->worker = worker;
    j->t.start = t0;
    if (cancelled(j)) { /* expired or gone before it started */
      j->t.end = t0;
      results[i] = j->result = ATTN_ECANCELED;
      continue;
    }
    live[m] = j;
    at[m++] = i;
  }
  int rc = m >= 2 ? run_together(live, m, threads, scratch) : -1;
  double t1 = attnd_now_ms();
  for (int k = 0; k < m; k++) {
    attnd_request_t *j = live[k];
    if (rc == 0) {
      j->t.end = t1;
      /* one raised while the batch ran: computed, but not its client's */
      j->result = cancelled(j) ? ATTN_ECANCELED : 0;
      round_results(j);
    } else {
      run_one(j, worker, threads, scratch); /* its own error, its own time */
    }
    results[at[k]] = j->result;
  }
  keep(scratch);
}
