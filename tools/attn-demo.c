/* tools/attn-demo.c: the worked two-head example of multi-head attention,
 * computed by the core. Run by `make run` until the HTTP service lands. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "attn/attn.h"

int main(void) {
  /* Two heads of width 1, one query, two keys. Zero scores plus an additive
   * bias of log-weights give weights 0.8/0.2 and 0.25/0.75. */
  static const float query[2] = {0, 0};
  static const float key[4] = {0, 0, 0, 0};
  static const float value[4] = {2, 10, 6, -2};
  static const float o_weight[2] = {2, -1};
  const float bias[4] = {logf(0.8f), logf(0.2f), logf(0.25f), logf(0.75f)};
  attn_params_t p = {
      .query = {query, 2, {1, 2}},
      .key = {key, 2, {2, 2}},
      .value = {value, 2, {2, 2}},
      .num_heads = 2,
      .o_weight = {o_weight, 2, {1, 2}},
      .bias = {bias, 3, {2, 1, 2}},
      .want_weights = 1,
      .want_head_outputs = 1,
  };
  attn_plan_t plan;
  attn_error_t err;
  if (attn_plan_init(&plan, &p, NULL, &err) < 0) {
    fprintf(stderr, "attn-demo: %s: %s\n", err.field, err.message);
    return 1;
  }
  float out[1], weights[4], heads[2];
  attn_outputs_t o = {.out = out, .weights = weights, .head_outputs = heads};
  void *ws = aligned_alloc(64, (plan.workspace_bytes + 63) / 64 * 64);
  if (ws == NULL || attn_forward(&plan, &o, ws, plan.workspace_bytes, &err)) {
    fprintf(stderr, "attn-demo: %s\n", ws ? err.message : "out of memory");
    return 1;
  }
  attn_backend_t be;
  attn_backend_info(&be);
  printf("backend: %s (%s), kernels %s\n", be.blas, be.blas_kernel,
         attn_isa_name(plan.isa));
  printf("head 1: weights %.4f %.4f, values 2 6   -> %.4f\n", weights[0],
         weights[1], heads[0]);
  printf("head 2: weights %.4f %.4f, values 10 -2 -> %.4f\n", weights[2],
         weights[3], heads[1]);
  printf("output: 2 * %.4f - %.4f = %.4f\n", heads[0], heads[1], out[0]);
  free(ws);
  return 0;
}
