/* server/request.c: what a request holds, and freeing it. See request.h. */
#include "request.h"

#include <stdlib.h>

double attnd_request_reply_bytes(const attnd_request_t *j, int64_t n) {
  return j->encoding == ATTND_FORM_BASE64 ? (double)n * 4 * 4 / 3 + 4
                                          : (double)n * 16;
}

size_t attnd_request_memory(const attnd_request_t *j) {
  const attn_plan_t *pl = &j->plan;
  const attn_params_t *p = &j->params;
  int64_t out = pl->out_elems + (p->want_weights ? pl->weights_elems : 0) +
                (p->want_mean_weights ? pl->mean_elems : 0) +
                (p->want_head_outputs ? pl->head_elems : 0);
  return j->alloc_bytes + pl->workspace_bytes + (size_t)out * sizeof(float) +
         (size_t)attnd_request_reply_bytes(j, out) + 4096;
}

void attnd_request_free(attnd_request_t *j) {
  if (j == NULL)
    return;
  for (size_t i = 0; i < j->n_allocs; i++)
    free(j->allocs[i]);
  free(j->allocs);
  free(j->id);
  free(j->out.out);
  free(j->out.weights);
  free(j->out.mean_weights);
  free(j->out.head_outputs);
  free(j);
}