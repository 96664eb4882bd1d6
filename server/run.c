/* server/run.c: a request on a worker: its workspace, its outputs and the
 * core's forward pass. See run.h. Worker thread. */
#include "run.h"

#include <stdlib.h>

#include "codec/util.h"

static int alloc_outputs(attnd_request_t *j) {
  const attn_plan_t *pl = &j->plan;
  const attn_params_t *p = &j->params;
  j->out.out = malloc((size_t)pl->out_elems * sizeof(float));
  if (p->want_weights)
    j->out.weights = malloc((size_t)pl->weights_elems * sizeof(float));
  if (p->want_mean_weights)
    j->out.mean_weights = malloc((size_t)pl->mean_elems * sizeof(float));
  if (p->want_head_outputs)
    j->out.head_outputs = malloc((size_t)pl->head_elems * sizeof(float));
  return j->out.out && (!p->want_weights || j->out.weights) &&
                 (!p->want_mean_weights || j->out.mean_weights) &&
                 (!p->want_head_outputs || j->out.head_outputs)
             ? 0
             : -1;
}

static int grow(attnd_scratch_t *s, size_t bytes) {
  if (bytes <= s->cap && s->data)
    return 0;
  free(s->data);
  s->cap = (bytes + 63) / 64 * 64;
  s->data = aligned_alloc(64, s->cap ? s->cap : 64);
  if (s->data == NULL)
    s->cap = 0;
  return s->data ? 0 : -1;
}

int attnd_request_run(void *job, int worker, attnd_scratch_t *scratch) {
  attnd_request_t *j = job;
  j->worker = worker;
  j->threads = j->plan.threads;
  j->t.start = attnd_now_ms();
  if (grow(scratch, j->plan.workspace_bytes) < 0 || alloc_outputs(j) < 0) {
    j->result = ATTN_ENOSPC;
    j->error = (attn_error_t){.code = ATTN_ENOSPC};
  } else {
    /* kept for the reply: ATTN_ENUMERIC names the input and the stage */
    j->result =
        attn_forward(&j->plan, &j->out, scratch->data, scratch->cap, &j->error);
  }
  j->t.end = attnd_now_ms();
  return j->result;
}
