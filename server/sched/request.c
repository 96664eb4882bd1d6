/* server/sched/request.c: what a request holds, and freeing it. See request.h.
 */
#include "sched/request.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "codec/mem.h"
#include "codec/pool.h"
#include "sched/pinned.h"

/* Whether the reply holds output `bit` (ATTND_OIP_*): an OIP reply holds
 * those asked for, and leaves out the rest that the core computes (output,
 * a top-k's other half). */
static int in_reply(const attnd_request_t *j, unsigned bit) {
  return !j->oip_outputs || (j->oip_outputs & bit);
}

/* The bytes of n floats of the output `bit` (ATTND_OIP_*) at most: none
 * when the reply leaves it out, 4 each as OIP binary data, else text in
 * the request's encoding. */
static double tensor_bytes(const attnd_request_t *j, unsigned bit, int64_t n) {
  if (!in_reply(j, bit))
    return 0;
  if (j->oip_binary & bit)
    return (double)n * 4;
  return j->encoding == ATTND_FORM_BASE64 ? (double)n * 4 * 4 / 3 + 4
                                          : (double)n * 16;
}

/* The reductions of the weights (attn_reduce_t): top-k indices (int32,
 * at most 12 bytes of text each) and values, the pooled map, and each
 * statistic. */
static double reduce_bytes(const attnd_request_t *j) {
  const attn_plan_t *pl = &j->plan;
  unsigned st = j->params.reduce.stats;
  double idx = !in_reply(j, ATTND_OIP_TOP_K_INDEX)
                   ? 0
                   : (double)pl->top_k_elems *
                             (j->oip_binary & ATTND_OIP_TOP_K_INDEX ? 4
                              : j->encoding == ATTND_FORM_BASE64    ? 16.0 / 3
                                                                    : 12) +
                         (pl->top_k_elems ? 4 : 0);
  return idx + tensor_bytes(j, ATTND_OIP_TOP_K_VALUE, pl->top_k_elems) +
         tensor_bytes(j, ATTND_OIP_POOLED, pl->pooled_elems) +
         (st & ATTN_STAT_ENTROPY
              ? tensor_bytes(j, ATTND_OIP_ENTROPY, pl->stats_elems)
              : 0) +
         (st & ATTN_STAT_SINK ? tensor_bytes(j, ATTND_OIP_SINK, pl->stats_elems)
                              : 0) +
         (st & ATTN_STAT_DISTANCE
              ? tensor_bytes(j, ATTND_OIP_DISTANCE, pl->stats_elems)
              : 0) +
         (pl->reduce ? 256 : 0);
}

double attnd_request_reply_bytes(const attnd_request_t *j) {
  const attn_plan_t *pl = &j->plan;
  const attn_params_t *p = &j->params;
  return tensor_bytes(j, ATTND_OIP_OUTPUT, pl->out_elems) +
         (p->want_weights
              ? tensor_bytes(j, ATTND_OIP_WEIGHTS, pl->weights_elems)
              : 0) +
         (p->want_mean_weights
              ? tensor_bytes(j, ATTND_OIP_WEIGHTS_MEAN, pl->mean_elems)
              : 0) +
         (p->want_head_outputs
              ? tensor_bytes(j, ATTND_OIP_HEAD_OUTPUTS, pl->head_elems)
              : 0) +
         reduce_bytes(j);
}

attnd_request_mem_t attnd_request_memory_parts(const attnd_request_t *j) {
  const attn_plan_t *pl = &j->plan;
  const attn_params_t *p = &j->params;
  int64_t out = pl->out_elems + (p->want_weights ? pl->weights_elems : 0) +
                (p->want_mean_weights ? pl->mean_elems : 0) +
                (p->want_head_outputs ? pl->head_elems : 0) +
                2 * pl->top_k_elems + pl->pooled_elems + 3 * pl->stats_elems;
  return (attnd_request_mem_t){.tensors = (int64_t)j->alloc_bytes +
                                          4096, /* and the request itself */
                               .workspace = (int64_t)pl->workspace_bytes,
                               .outputs = out * (int64_t)sizeof(float),
                               .reply = (int64_t)attnd_request_reply_bytes(j)};
}

int attnd_request_waited(const attnd_request_t *j) {
  return j->t.submit && (j->t.start || j->t.left);
}

double attnd_request_queue_ms(const attnd_request_t *j) {
  double until = j->t.start ? j->t.start : j->t.left;
  return attnd_request_waited(j) ? until - j->t.submit : 0;
}

size_t attnd_request_memory(const attnd_request_t *j) {
  attnd_request_mem_t m = attnd_request_memory_parts(j);
  return (size_t)(m.tensors + m.workspace + m.outputs + m.reply);
}

int attnd__arenas = 1;

/* Freed requests, kept for attnd_request_new (up to 64: about 600 KB). */
static attnd_pool_t pool = ATTND_POOL_INIT(sizeof(attnd_request_t), 64);

attnd_request_t *attnd_request_new(void) {
  attnd_request_t *j = attnd_pool_get(&pool);
  if (j == NULL)
    return NULL;
  memset(j, 0, offsetof(attnd_request_t, region));
  attnd_arena_init(&j->arena, j->region, attnd__arenas ? sizeof j->region : 0);
  return j;
}

void *attnd_request_alloc(attnd_request_t *j, size_t bytes) {
  void *p = attnd_arena_alloc(&j->arena, bytes);
  if (p)
    return p;
  return j->plan.backend == ATTN_BACKEND_CUDA
             ? attnd_tensor_alloc(bytes, NULL)
             : attnd_mem_alloc(bytes ? bytes : 1);
}

void attnd_request_release(attnd_request_t *j, void *p) {
  if (!attnd_arena_owns(&j->arena, p))
    attnd_tensor_free(p);
}

void attnd_request_free(attnd_request_t *j) {
  if (j == NULL)
    return;
  for (size_t i = 0; i < j->n_allocs; i++)
    attnd_tensor_free(j->allocs[i]);
  attnd_request_release(j, j->allocs);
  attnd_layer_set_unref(j->layers);
  attnd_request_release(j, j->id);
  attnd_request_release(j, j->out.out);
  attnd_request_release(j, j->out.weights);
  attnd_request_release(j, j->out.mean_weights);
  attnd_request_release(j, j->out.head_outputs);
  attnd_request_release(j, j->out.top_k_index);
  attnd_request_release(j, j->out.top_k_value);
  attnd_request_release(j, j->out.pooled);
  attnd_request_release(j, j->out.entropy);
  attnd_request_release(j, j->out.sink);
  attnd_request_release(j, j->out.distance);
  attnd_pool_put(&pool, j);
}

const char *const attnd_backend_names[] = {"cpu", "cuda", NULL};
const char *const attnd_precision_names[] = {"fp32", "bf16", NULL};

const char *const attnd_oip_output_names[ATTND_OIP_N + 1] = {
    "output",
    "weights",
    "weights_mean",
    "head_outputs",
    "weights_top_k_index",
    "weights_top_k_value",
    "weights_pooled",
    "weights_entropy",
    "weights_sink",
    "weights_distance",
    NULL};

const char *attnd_oip_output_name(unsigned bit) {
  for (int i = 0; i < ATTND_OIP_N; i++)
    if (bit == 1u << i)
      return attnd_oip_output_names[i];
  return NULL;
}
_Static_assert(ATTND_BACKEND_CPU == (int)ATTN_BACKEND_CPU &&
                   ATTND_BACKEND_CUDA == (int)ATTN_BACKEND_CUDA &&
                   ATTND_PRECISION_BF16 == (int)ATTN_PRECISION_BF16,
               "the names' order is the core's");

/* The JSON path of an input the core names. A switch rather than a table,
 * so that the compiler points at a field the core adds (-Wswitch). */
const char *attnd_request_field_path(attn_field_t f) {
  switch (f) {
  case ATTN_FIELD_Q_WEIGHT:
    return "projections.q_weight";
  case ATTN_FIELD_K_WEIGHT:
    return "projections.k_weight";
  case ATTN_FIELD_V_WEIGHT:
    return "projections.v_weight";
  case ATTN_FIELD_O_WEIGHT:
    return "projections.o_weight";
  case ATTN_FIELD_Q_BIAS:
    return "projections.q_bias";
  case ATTN_FIELD_K_BIAS:
    return "projections.k_bias";
  case ATTN_FIELD_V_BIAS:
    return "projections.v_bias";
  case ATTN_FIELD_O_BIAS:
    return "projections.o_bias";
  case ATTN_FIELD_CAUSAL:
    return "mask.causal";
  case ATTN_FIELD_KEY_LENGTHS:
    return "mask.key_lengths";
  case ATTN_FIELD_ALLOW:
    return "mask.allow";
  case ATTN_FIELD_BIAS:
    return "mask.bias";
  case ATTN_FIELD_WINDOW_LEFT:
    return "mask.window.left";
  case ATTN_FIELD_WINDOW_RIGHT:
    return "mask.window.right";
  case ATTN_FIELD_ALIBI:
  case ATTN_FIELD_ALIBI_SLOPES:
    return "mask.alibi";
  case ATTN_FIELD_ROPE_SCALING:
    return "rope.scaling.type";
  case ATTN_FIELD_ROPE_FACTOR:
    return "rope.scaling.factor";
  case ATTN_FIELD_ROPE_LOW_FREQ_FACTOR:
    return "rope.scaling.low_freq_factor";
  case ATTN_FIELD_ROPE_HIGH_FREQ_FACTOR:
    return "rope.scaling.high_freq_factor";
  case ATTN_FIELD_ROPE_ORIGINAL_MAX_POSITION:
    return "rope.scaling.original_max_position_embeddings";
  case ATTN_FIELD_POSITIONS_QUERY:
    return "positions.query";
  case ATTN_FIELD_POSITIONS_KEY:
    return "positions.key";
  case ATTN_FIELD_Q_NORM:
  case ATTN_FIELD_K_NORM:
  case ATTN_FIELD_NORM_EPS:
    return "layer"; /* only a layer sets them */
  case ATTN_FIELD_TOP_K:
    return "return.weights.top_k";
  case ATTN_FIELD_POOL:
    return "return.weights.pool";
  case ATTN_FIELD_POOL_REDUCE:
    return "return.weights.reduce";
  case ATTN_FIELD_STATS:
    return "return.weights.stats";
  case ATTN_FIELD_SINK_TOKENS:
    return "return.weights.sink_tokens";
  case ATTN_FIELD_QUERY_RANGE:
    return "return.weights.query_range";
  case ATTN_FIELD_KEY_RANGE:
    return "return.weights.key_range";
  case ATTN_FIELD_TOP_K_INDEX:
  case ATTN_FIELD_TOP_K_VALUE:
  case ATTN_FIELD_POOLED:
  case ATTN_FIELD_ENTROPY:
  case ATTN_FIELD_SINK:
  case ATTN_FIELD_DISTANCE:
  case ATTN_FIELD_ROPE_STYLE: /* "rope.style", "rope.theta", "rope.dims" */
  case ATTN_FIELD_ROPE_THETA:
  case ATTN_FIELD_ROPE_DIMS:
  case ATTN_FIELD_NONE:
  case ATTN_FIELD_QUERY:
  case ATTN_FIELD_KEY:
  case ATTN_FIELD_VALUE:
  case ATTN_FIELD_SCALE:
  case ATTN_FIELD_SOFTCAP:
  case ATTN_FIELD_NUM_HEADS:
  case ATTN_FIELD_NUM_KV_HEADS:
  case ATTN_FIELD_THREADS:
  case ATTN_FIELD_ISA:
  case ATTN_FIELD_OUT:
  case ATTN_FIELD_WEIGHTS:
  case ATTN_FIELD_MEAN_WEIGHTS:
  case ATTN_FIELD_HEAD_OUTPUTS:
  case ATTN_FIELD_WORKSPACE:
  case ATTN_FIELD_CANCEL:
  case ATTN_FIELD_KV:
  case ATTN_FIELD_BACKEND:
  case ATTN_FIELD_PRECISION:
  case ATTN_FIELD_COUNT:
    break; /* the same name in the request */
  }
  return attn_field_name(f);
}
