/* server/api/oip.c: an Open Inference Protocol (KServe v2) inference request to
 * a planned attnd_request_t. See oip.h.
 *
 * Decoding checks, in order: the model (before the body, so that an
 * unknown model is a 404 whatever the body holds); JSON syntax; the root's
 * members and the id; the parameters; each input in turn; the outputs;
 * what is required (query, the head counts) and the timeout; then the
 * steps /v1 takes too (decode.h): a layer's widths, planning, the limits.
 * Errors of those shared steps name /v1 paths, which remap_field turns
 * into this body's ("mask.allow" -> "inputs[3]").
 *
 * An input is read in two steps: its header (oip_in_t: which input, its
 * datatype, its shape and element count) and then its data, into a buffer
 * the request owns. fill_json reads JSON data; Triton's binary tensor
 * extension is a second filler beside it, taking the input's bytes from a
 * span of the body (both in oip_inputs.c). HTTP thread. */
#include "api/oip_decode.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/decode.h"
#include "codec/util.h"
#include "model/safetensors.h"

/* ---- the protocol's names ------------------------------------------------ */

const char *const attnd__oip_dtypes[DT_COUNT + 1] = {
    "FP32", "FP16", "BF16", "FP64", "INT32", "INT64", "BOOL", NULL};

const size_t attnd__oip_elem_size[] = {4, 8, 1};
const unsigned attnd__oip_elem_dtypes[] = {
    [EL_FLOAT] = 1u << DT_FP32 | 1u << DT_FP16 | 1u << DT_BF16 | 1u << DT_FP64,
    [EL_INT] = 1u << DT_INT32 | 1u << DT_INT64,
    [EL_BOOL] = 1u << DT_BOOL};

#define INPUT(member, v1, elem, generic, rank)                                 \
  { #member, v1, elem, generic, rank, offsetof(attn_params_t, member) }
const input_def_t attnd__oip_inputs[N_INPUTS] = {
    INPUT(query, "query", EL_FLOAT, 0, 3),
    INPUT(key, "key", EL_FLOAT, 0, 3),
    INPUT(value, "value", EL_FLOAT, 0, 3),
    INPUT(q_weight, "projections.q_weight", EL_FLOAT, 1, 2),
    INPUT(k_weight, "projections.k_weight", EL_FLOAT, 1, 2),
    INPUT(v_weight, "projections.v_weight", EL_FLOAT, 1, 2),
    INPUT(o_weight, "projections.o_weight", EL_FLOAT, 1, 2),
    INPUT(q_bias, "projections.q_bias", EL_FLOAT, 1, 1),
    INPUT(k_bias, "projections.k_bias", EL_FLOAT, 1, 1),
    INPUT(v_bias, "projections.v_bias", EL_FLOAT, 1, 1),
    INPUT(o_bias, "projections.o_bias", EL_FLOAT, 1, 1),
    INPUT(key_lengths, "mask.key_lengths", EL_INT, 0, 1),
    INPUT(allow, "mask.allow", EL_BOOL, 0, 4),
    INPUT(bias, "mask.bias", EL_FLOAT, 0, 4),
    INPUT(positions_query, "positions.query", EL_INT, 0, 2),
    INPUT(positions_key, "positions.key", EL_INT, 0, 2),
};
#undef INPUT

_Static_assert(sizeof attnd__oip_inputs / sizeof attnd__oip_inputs[0] ==
                   N_INPUTS,
               "N_INPUTS");

/* The request's parameters: X(ID, name, the /v1 path of what it sets,
 * whether only the generic model takes it). */
#define PARAM_MAP(X)                                                           \
  X(NUM_HEADS, "num_heads", "num_heads", 1)                                    \
  X(NUM_KV_HEADS, "num_kv_heads", "num_kv_heads", 1)                           \
  X(CAUSAL, "causal", "mask.causal", 0)                                        \
  X(WINDOW_LEFT, "window_left", "mask.window.left", 0)                         \
  X(WINDOW_RIGHT, "window_right", "mask.window.right", 0)                      \
  X(ALIBI, "alibi", "mask.alibi", 0)                                           \
  X(SCALE, "scale", "scale", 0)                                                \
  X(SOFTCAP, "softcap", "softcap", 0)                                          \
  X(ROPE_THETA, "rope_theta", "rope.theta", 1)                                 \
  X(ROPE_DIMS, "rope_dims", "rope.dims", 1)                                    \
  X(ROPE_STYLE, "rope_style", "rope.style", 1)                                 \
  X(TIMEOUT_MS, "timeout_ms", "timeout_ms", 0)                                 \
  X(BINARY_DATA_OUTPUT, "binary_data_output", "", 0)                           \
  X(OUTPUT_DATATYPE, "output_datatype", "return.dtype", 0)                     \
  X(BACKEND, "backend", "backend", 0)                                          \
  X(PRECISION, "precision", "precision", 0)                                    \
  X(WEIGHTS_HEADS, "weights_heads", "return.weights.heads", 0)                 \
  X(WEIGHTS_TOP_K, "weights_top_k", "return.weights.top_k", 0)                 \
  X(WEIGHTS_POOL_QUERIES, "weights_pool_queries", "return.weights.pool", 0)    \
  X(WEIGHTS_POOL_KEYS, "weights_pool_keys", "return.weights.pool", 0)          \
  X(WEIGHTS_REDUCE, "weights_reduce", "return.weights.reduce", 0)              \
  X(WEIGHTS_SINK_TOKENS, "weights_sink_tokens", "return.weights.sink_tokens",  \
    0)                                                                         \
  X(WEIGHTS_QUERY_START, "weights_query_start", "return.weights.query_range",  \
    0)                                                                         \
  X(WEIGHTS_QUERY_END, "weights_query_end", "return.weights.query_range", 0)   \
  X(WEIGHTS_KEY_START, "weights_key_start", "return.weights.key_range", 0)     \
  X(WEIGHTS_KEY_END, "weights_key_end", "return.weights.key_range", 0)

typedef enum {
#define PARAM_ENUM(id, name, v1, generic) P_##id,
  PARAM_MAP(PARAM_ENUM)
#undef PARAM_ENUM
      P_COUNT
} param_t;
const char *const attnd__oip_params[P_COUNT + 1] = {
#define PARAM_NAME(id, name, v1, generic) name,
    PARAM_MAP(PARAM_NAME)
#undef PARAM_NAME
        NULL};
static const char *const param_v1[P_COUNT] = {
#define PARAM_V1(id, name, v1, generic) v1,
    PARAM_MAP(PARAM_V1)
#undef PARAM_V1
};
static const unsigned generic_params = 0
#define PARAM_GENERIC(id, name, v1, generic) | (unsigned)generic << P_##id
    PARAM_MAP(PARAM_GENERIC)
#undef PARAM_GENERIC
    ;

/* The outputs' names (attnd_oip_output_names) are in the order of their
 * ATTND_OIP_* bits. */
_Static_assert((int)N_OUTPUTS == (int)ATTND_OIP_N,
               "an ATTND_OIP_* bit per output");
/* ---- the decoder's helpers ----------------------------------------------- */

int attnd__oip_bad_type(oip_t *o, const char *field, const json_t *v,
                        const char *what) {
  return E(&o->d, ATTND_ERR_INVALID_TYPE, field, "%s is %s; expected %s", field,
           attnd__json_type(v), what);
}

const json_t *attnd__oip_need(oip_t *o, const json_t *obj, const char *path,
                              const char *key, char *field, json_type type,
                              const char *what) {
  attnd_fmt_member(field, 64, path, key);
  const json_t *v = json_object_get(obj, key);
  if (v == NULL || json_is_null(v)) {
    E(&o->d, ATTND_ERR_MISSING_FIELD, field, "%s is required", field);
    return NULL;
  }
  if (json_typeof(v) != type) {
    attnd__oip_bad_type(o, field, v, what);
    return NULL;
  }
  return v;
}

int attnd__oip_find_name(const char *const *names, const char *v) {
  for (int i = 0; names[i]; i++)
    if (strcmp(names[i], v) == 0)
      return i;
  return -1;
}

/* ---- the model ----------------------------------------------------------- */

int attnd_oip_model(const char *model, attnd_layer_set_t *layers,
                    const attnd_layer_t **layer, attnd_error_t *err) {
  *layer = NULL;
  if (strcmp(model, ATTND_OIP_GENERIC) == 0)
    return 0;
  if ((*layer = attnd_layer_set_find(layers, model)) != NULL)
    return 0;
  size_t n = attnd_layer_set_count(layers), k = 0;
  char some[160] = "";
  for (size_t i = 0; i < n && i < 4 && k < sizeof some; i++)
    k += (size_t)snprintf(some + k, sizeof some - k, ", '%s'",
                          attnd_layer_set_get(layers, i)->name);
  return attnd_error_set(err, ATTND_ERR_UNKNOWN_LAYER, "model",
                         "model '%.128s' is not known: the models are '%s' "
                         "and the %zu loaded layer%s%s%s",
                         model, ATTND_OIP_GENERIC, n, n == 1 ? "" : "s", some,
                         n > 4 ? ", ..." : "");
}

/* "attention", or a loaded layer, whose weights the request takes now. */
static int resolve_model(oip_t *o) {
  if (attnd_oip_model(o->model, o->d.layers, &o->layer, o->d.err) < 0)
    return -1;
  if (o->layer)
    attnd__dec_use_layer(&o->d, o->layer);
  return 0;
}

/* ---- parameters ---------------------------------------------------------- */

static int param_int(oip_t *o, const json_t *v, const char *field, int64_t lo,
                     int64_t *out) {
  return attnd__dec_int(&o->d, v, field, field, lo, INT64_MAX, out);
}

/* A number: with as_float, one that is a finite float32 too. */
static int param_number(oip_t *o, const json_t *v, const char *field,
                        int as_float, double *out) {
  if (!json_is_number(v))
    return attnd__oip_bad_type(o, field, v, "a number");
  double x = json_number_value(v);
  char num[32];
  if (as_float ? !isfinite((float)x) : fabs(x) >= ATTND_JSON_HUGE)
    return E(&o->d, ATTND_ERR_NON_FINITE, field, "%s is %s, not a finite %s",
             field, attnd__dec_num(x, num), as_float ? "float32" : "number");
  *out = x;
  return 0;
}

static int param_float(oip_t *o, const json_t *v, const char *field, int *has,
                       float *out) {
  double x = 0;
  if (param_number(o, v, field, 1, &x) < 0)
    return -1;
  *has = 1;
  *out = (float)x;
  return 0;
}

static int param_bool(oip_t *o, const json_t *v, const char *field, int *out) {
  if (!json_is_boolean(v))
    return attnd__oip_bad_type(o, field, v, "true or false");
  *out = json_is_true(v);
  return 0;
}

/* One of `names` (NULL-terminated), *out its index; `also` is what else v
 * may be, for the message ("" for nothing). */
static int param_enum(oip_t *o, const json_t *v, const char *field,
                      const char *const *names, const char *also, int *out) {
  char list[128] = "";
  size_t n = 0;
  for (int i = 0; names[i] && n < sizeof list; i++)
    n += (size_t)snprintf(list + n, sizeof list - n, "%s\"%s\"",
                          i == 0         ? ""
                          : names[i + 1] ? ", "
                                         : " or ",
                          names[i]);
  if (!json_is_string(v))
    return E(&o->d, ATTND_ERR_INVALID_TYPE, field, "%s is %s; expected %s%s",
             field, attnd__json_type(v), also, list);
  if ((*out = attnd__oip_find_name(names, json_string_value(v))) < 0)
    return E(&o->d, ATTND_ERR_INVALID_VALUE, field,
             "%s is \"%.64s\"; expected %s%s", field, json_string_value(v),
             also, list);
  return 0;
}

static int read_param(oip_t *o, param_t id, const json_t *v,
                      const char *field) {
  static const char *const causal[] = {"none", "bottom_right", "top_left",
                                       NULL};
  static const char *const styles[] = {"half", "interleaved", NULL};
  static const char *const heads[] = {"per_head", "mean", NULL};
  static const char *const reduces[] = {"mean", "max", "sum", NULL};
  static const char *const float_types[] = {"FP32", "FP16", "BF16", NULL};
  attn_params_t *p = &o->d.req->params;
  attn_reduce_t *r = &p->reduce;
  int k = 0;
  switch (id) {
  case P_NUM_HEADS:
    return param_int(o, v, field, 1, &p->num_heads);
  case P_NUM_KV_HEADS:
    return param_int(o, v, field, 1, &p->num_kv_heads);
  case P_CAUSAL:
    if (json_is_boolean(v)) {
      p->causal = json_is_true(v) ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_NONE;
      return 0;
    }
    if (param_enum(o, v, field, causal, "true, false, ", &k) < 0)
      return -1;
    p->causal = (attn_causal_t)k;
    return 0;
  case P_WINDOW_LEFT:
    p->has_window_left = 1;
    return param_int(o, v, field, 0, &p->window_left);
  case P_WINDOW_RIGHT:
    p->has_window_right = 1;
    return param_int(o, v, field, 0, &p->window_right);
  case P_ALIBI:
    if (param_bool(o, v, field, &k) < 0)
      return -1;
    p->alibi = k ? ATTN_ALIBI_DEFAULT : ATTN_ALIBI_NONE;
    return 0;
  case P_SCALE:
    return param_float(o, v, field, &p->has_scale, &p->scale);
  case P_SOFTCAP:
    return param_float(o, v, field, &p->has_softcap, &p->softcap) < 0
               ? -1
               : attnd__dec_softcap(&o->d, json_number_value(v), field);
  case P_ROPE_THETA:
    return param_number(o, v, field, 0, &p->rope.theta);
  case P_ROPE_DIMS:
    return param_int(o, v, field, 1, &p->rope.dims);
  case P_ROPE_STYLE:
    return param_enum(o, v, field, styles, "", &o->rope_style);
  case P_TIMEOUT_MS:
    return param_int(o, v, field, 1, &o->d.req->timeout_ms);
  case P_BINARY_DATA_OUTPUT:
    return param_bool(o, v, field, &o->binary_all);
  case P_BACKEND:
    if (param_enum(o, v, field, attnd_backend_names, "", &k) < 0)
      return -1;
    o->d.req->backend = (attnd_backend_choice_t)k;
    return 0;
  case P_PRECISION:
    if (param_enum(o, v, field, attnd_precision_names, "", &k) < 0)
      return -1;
    o->d.req->precision = (attnd_precision_choice_t)k;
    return 0;
  case P_OUTPUT_DATATYPE:
    if (param_enum(o, v, field, float_types, "", &k) < 0)
      return -1;
    o->d.req->dtype = (attnd_dtype_t)k;
    o->d.req->dtype_field = "parameters.output_datatype";
    return 0;
  case P_WEIGHTS_HEADS:
    if (param_enum(o, v, field, heads, "", &k) < 0)
      return -1;
    r->mean_heads = k;
    return 0;
  case P_WEIGHTS_TOP_K:
    if (param_int(o, v, field, 1, &r->top_k) < 0)
      return -1;
    if (r->top_k > ATTN_TOP_K_MAX)
      return E(&o->d, ATTND_ERR_INVALID_VALUE, field,
               "%s is %lld; expected 1 to %d", field, (long long)r->top_k,
               ATTN_TOP_K_MAX);
    return 0;
  case P_WEIGHTS_POOL_QUERIES:
    return param_int(o, v, field, 1, &r->pool_q);
  case P_WEIGHTS_POOL_KEYS:
    return param_int(o, v, field, 1, &r->pool_k);
  case P_WEIGHTS_REDUCE:
    if (param_enum(o, v, field, reduces, "", &k) < 0)
      return -1;
    r->pool_reduce = (attn_pool_reduce_t)k;
    return 0;
  case P_WEIGHTS_SINK_TOKENS:
    return param_int(o, v, field, 0, &r->sink_tokens);
  case P_WEIGHTS_QUERY_START:
  case P_WEIGHTS_QUERY_END:
    r->has_query_range = 1;
    return param_int(o, v, field, 0,
                     &r->query_range[id == P_WEIGHTS_QUERY_END]);
  case P_WEIGHTS_KEY_START:
  case P_WEIGHTS_KEY_END:
    r->has_key_range = 1;
    return param_int(o, v, field, 0, &r->key_range[id == P_WEIGHTS_KEY_END]);
  case P_COUNT:
    break;
  }
  return 0;
}

/* "parameters": each one known, of its type, and none of the generic
 * model's own on a layer model; rope is on when any rope_* is given. */
static int read_params(oip_t *o, const json_t *ps) {
  dec_t *d = &o->d;
  if (ps == NULL || json_is_null(ps))
    return 0;
  if (!json_is_object(ps))
    return attnd__oip_bad_type(o, "parameters", ps, "an object");
  if (attnd__dec_members(d, ps, "parameters", attnd__oip_params) < 0)
    return -1;
  for (int i = 0; i < P_COUNT; i++) {
    const json_t *v = json_object_get(ps, attnd__oip_params[i]);
    char field[64];
    attnd_fmt_member(field, sizeof field, "parameters", attnd__oip_params[i]);
    if (v == NULL || json_is_null(v))
      continue;
    if (o->layer && (generic_params >> i & 1))
      return E(d, ATTND_ERR_INVALID_VALUE, field,
               "%s cannot be given to model '%s': the layer has its own", field,
               o->layer->name);
    o->params_given |= 1u << i;
    if (read_param(o, (param_t)i, v, field) < 0)
      return -1;
  }
  /* window_left and window_right replace a layer's window as a whole, as
   * mask.window does in /v1: a side not given is unbounded */
  const unsigned window = 1u << P_WINDOW_LEFT | 1u << P_WINDOW_RIGHT;
  if (o->params_given & window) {
    d->req->params.has_window_left = o->params_given >> P_WINDOW_LEFT & 1;
    d->req->params.has_window_right = o->params_given >> P_WINDOW_RIGHT & 1;
  }
  attn_rope_t *rp = &d->req->params.rope;
  const unsigned rope =
      1u << P_ROPE_THETA | 1u << P_ROPE_DIMS | 1u << P_ROPE_STYLE;
  if (o->params_given & rope) {
    rp->style = o->rope_style ? ATTN_ROPE_INTERLEAVED : ATTN_ROPE_HALF;
    if (!(o->params_given & 1u << P_ROPE_THETA))
      rp->theta = 10000.0;
  }
  return 0;
}

/* ---- outputs ------------------------------------------------------------- */

const char *const attnd__oip_output_members[] = {"name", "parameters", NULL};
const char *const attnd__oip_output_param_members[] = {"binary_data", NULL};

/* outputs[at]: a known name, not asked before, and whether it is wanted as
 * binary data (its binary_data, else binary_data_output). */
static int read_output(oip_t *o, const json_t *v, size_t at) {
  attnd_request_t *j = o->d.req;
  char path[32], field[64];
  attnd_fmt_index(path, sizeof path, "outputs", (int64_t)at);
  if (!json_is_object(v))
    return attnd__oip_bad_type(o, path, v, "an object with a name");
  if (attnd__dec_members(&o->d, v, path, attnd__oip_output_members) < 0)
    return -1;
  const json_t *name =
      attnd__oip_need(o, v, path, "name", field, JSON_STRING, "a string");
  if (name == NULL)
    return -1;
  int k = attnd__oip_find_name(attnd_oip_output_names, json_string_value(name));
  if (k < 0)
    return E(&o->d, ATTND_ERR_INVALID_VALUE, field,
             "%s is '%.64s'; expected output, weights, weights_mean, "
             "head_outputs, weights_top_k_index, weights_top_k_value, "
             "weights_pooled, weights_entropy, weights_sink or "
             "weights_distance",
             field, json_string_value(name));
  if (o->output_at[k] >= 0)
    return E(&o->d, ATTND_ERR_INVALID_VALUE, field,
             "%s is '%s', as is outputs[%d].name: an output is asked for once",
             field, attnd_oip_output_names[k], o->output_at[k]);
  o->output_at[k] = (int)at;
  int binary = o->binary_all;
  const json_t *ps = json_object_get(v, "parameters");
  char pfield[64];
  attnd_fmt_member(pfield, sizeof pfield, path, "parameters");
  if (ps && !json_is_null(ps)) {
    if (!json_is_object(ps))
      return attnd__oip_bad_type(o, pfield, ps, "an object");
    if (attnd__dec_members(&o->d, ps, pfield, attnd__oip_output_param_members) <
        0)
      return -1;
    const json_t *b = json_object_get(ps, "binary_data");
    attnd_fmt_member(field, sizeof field, path, "parameters.binary_data");
    if (b && !json_is_null(b) && param_bool(o, b, field, &binary) < 0)
      return -1;
  }
  j->oip_outputs |= 1u << k;
  j->oip_binary |= (unsigned)binary << k;
  j->oip_order[j->oip_n_outputs++] = (unsigned short)(1u << k);
  return 0;
}

/* The output of those in `outputs` (ATTND_OIP_* bits) asked for first in
 * "outputs" (its O_* index), or -1 when none is asked for. */
static int first_asked(const oip_t *o, unsigned outputs) {
  int k = -1;
  for (int i = 0; i < N_OUTPUTS; i++)
    if ((outputs >> i & 1) && o->output_at[i] >= 0 &&
        (k < 0 || o->output_at[i] < o->output_at[k]))
      k = i;
  return k;
}

/* The reductions of the weights (attn_reduce_t) that the outputs ask for,
 * with the weights_* parameters that shape them: each output needs its
 * parameters (top_k for weights_top_k_*, both pool sizes for
 * weights_pooled), and each parameter an output that uses it. The core
 * computes them in place of the dense weights, never beside them. */
static int reductions(oip_t *o) {
  attnd_request_t *j = o->d.req;
  attn_reduce_t *r = &j->params.reduce;
  const unsigned out = j->oip_outputs, given = o->params_given;
  const unsigned top_k = ATTND_OIP_TOP_K_INDEX | ATTND_OIP_TOP_K_VALUE;
  const unsigned any = top_k | ATTND_OIP_POOLED | ATTND_OIP_ENTROPY |
                       ATTND_OIP_SINK | ATTND_OIP_DISTANCE;
  int red = first_asked(o, any),
      dense = first_asked(o, ATTND_OIP_WEIGHTS | ATTND_OIP_WEIGHTS_MEAN);
  if (red >= 0 && dense >= 0) {
    char field[32];
    attnd_fmt_index(field, sizeof field, "outputs", o->output_at[red]);
    return E(&o->d, ATTND_ERR_INVALID_VALUE, field,
             "%s.name is '%s', a reduction of the weights, which is not "
             "computed beside the dense %s (outputs[%d]): ask for one or the "
             "other",
             field, attnd_oip_output_names[red], attnd_oip_output_names[dense],
             o->output_at[dense]);
  }
  struct {
    param_t param;
    unsigned outputs; /* the outputs that use it */
  } uses[] = {
      {P_WEIGHTS_HEADS, any},
      {P_WEIGHTS_TOP_K, top_k},
      {P_WEIGHTS_POOL_QUERIES, ATTND_OIP_POOLED},
      {P_WEIGHTS_POOL_KEYS, ATTND_OIP_POOLED},
      {P_WEIGHTS_REDUCE, ATTND_OIP_POOLED},
      {P_WEIGHTS_SINK_TOKENS, ATTND_OIP_SINK},
      {P_WEIGHTS_QUERY_START, any},
      {P_WEIGHTS_QUERY_END, any},
      {P_WEIGHTS_KEY_START, top_k | ATTND_OIP_POOLED},
      {P_WEIGHTS_KEY_END, top_k | ATTND_OIP_POOLED},
  };
  for (size_t i = 0; i < sizeof uses / sizeof uses[0]; i++)
    if ((given >> uses[i].param & 1) && !(out & uses[i].outputs))
      return E(&o->d, ATTND_ERR_INVALID_VALUE, "parameters",
               "parameters.%s is given, but no output that uses it is "
               "asked for",
               attnd__oip_params[uses[i].param]);
  if ((out & top_k) && !(given >> P_WEIGHTS_TOP_K & 1))
    return E(&o->d, ATTND_ERR_MISSING_FIELD, "parameters.weights_top_k",
             "parameters.weights_top_k is required for the output %s",
             out & ATTND_OIP_TOP_K_INDEX ? "weights_top_k_index"
                                         : "weights_top_k_value");
  if ((out & ATTND_OIP_POOLED) && !(given >> P_WEIGHTS_POOL_QUERIES & 1))
    return E(&o->d, ATTND_ERR_MISSING_FIELD, "parameters.weights_pool_queries",
             "parameters.weights_pool_queries is required for the output "
             "weights_pooled");
  if ((out & ATTND_OIP_POOLED) && !(given >> P_WEIGHTS_POOL_KEYS & 1))
    return E(&o->d, ATTND_ERR_MISSING_FIELD, "parameters.weights_pool_keys",
             "parameters.weights_pool_keys is required for the output "
             "weights_pooled");
  /* a range needs both ends */
  static const param_t ends[2][2] = {
      {P_WEIGHTS_QUERY_START, P_WEIGHTS_QUERY_END},
      {P_WEIGHTS_KEY_START, P_WEIGHTS_KEY_END}};
  for (int k = 0; k < 2; k++)
    for (int e = 0; e < 2; e++)
      if ((given >> ends[k][e] & 1) && !(given >> ends[k][!e] & 1))
        return E(&o->d, ATTND_ERR_MISSING_FIELD, "parameters",
                 "parameters.%s is given without parameters.%s",
                 attnd__oip_params[ends[k][e]], attnd__oip_params[ends[k][!e]]);
  r->stats = (out & ATTND_OIP_ENTROPY ? ATTN_STAT_ENTROPY : 0u) |
             (out & ATTND_OIP_SINK ? ATTN_STAT_SINK : 0u) |
             (out & ATTND_OIP_DISTANCE ? ATTN_STAT_DISTANCE : 0u);
  if ((out & any) && !(given >> P_WEIGHTS_SINK_TOKENS & 1))
    r->sink_tokens = ATTND_SINK_TOKENS_DEFAULT; /* as /v1's */
  return 0;
}

/* "outputs": none named (absent, null or []) is output alone. */
static int read_outputs(oip_t *o, const json_t *outs) {
  attnd_request_t *j = o->d.req;
  size_t n = 0;
  if (outs && !json_is_null(outs)) {
    if (!json_is_array(outs))
      return attnd__oip_bad_type(o, "outputs", outs,
                                 "an array of {\"name\": ...}");
    n = json_array_size(outs);
  }
  for (size_t i = 0; i < n; i++)
    if (read_output(o, json_array_get(outs, i), i) < 0)
      return -1;
  if (n == 0) {
    j->oip_outputs = ATTND_OIP_OUTPUT;
    j->oip_binary = o->binary_all ? ATTND_OIP_OUTPUT : 0;
    j->oip_order[j->oip_n_outputs++] = ATTND_OIP_OUTPUT;
  }
  attn_params_t *p = &j->params;
  p->want_weights = (j->oip_outputs & ATTND_OIP_WEIGHTS) != 0;
  p->want_mean_weights = (j->oip_outputs & ATTND_OIP_WEIGHTS_MEAN) != 0;
  p->want_head_outputs = (j->oip_outputs & ATTND_OIP_HEAD_OUTPUTS) != 0;
  j->weights_mode = p->want_weights        ? ATTND_WEIGHTS_PER_HEAD
                    : p->want_mean_weights ? ATTND_WEIGHTS_MEAN
                                           : ATTND_WEIGHTS_NONE;
  return reductions(o);
}

/* ---- the request --------------------------------------------------------- */

/* Turns the /v1 path that a shared step's error names into this body's:
 * an input's to "inputs[i]" ("inputs" when not given), a parameter's to
 * "parameters.<name>", an output's to "outputs[i]", and what a layer model
 * gave to "model". */
static void remap_field(oip_t *o) {
  char *f = o->d.err->field, to[64] = "";
  for (size_t k = 0; k < N_INPUTS && !*to; k++) {
    if (strcmp(f, attnd__oip_inputs[k].v1) != 0)
      continue;
    if (o->input_at[k] >= 0)
      snprintf(to, sizeof to, "inputs[%d]", o->input_at[k]);
    else
      snprintf(to, sizeof to, "%s",
               o->layer && attnd__oip_inputs[k].generic ? "model" : "inputs");
  }
  /* a parameter: the first given of those that share the path */
  int pick = -1;
  for (int i = 0; i < P_COUNT; i++)
    if (*param_v1[i] && strcmp(f, param_v1[i]) == 0 &&
        (pick < 0 ||
         (!(o->params_given >> pick & 1) && (o->params_given >> i & 1))))
      pick = i;
  if (!*to && pick >= 0 && o->layer && (generic_params >> pick & 1))
    snprintf(to, sizeof to, "model");
  else if (!*to && pick >= 0)
    snprintf(to, sizeof to, "parameters.%s", attnd__oip_params[pick]);
  /* "return.weights": the dense weights asked for, else the reduction
   * asked for first */
  int out = strcmp(f, "return.head_outputs") == 0 ? O_HEAD_OUTPUTS
            : strcmp(f, "return.weights") != 0    ? -1
            : o->output_at[O_WEIGHTS] >= 0        ? O_WEIGHTS
            : o->output_at[O_WEIGHTS_MEAN] >= 0
                ? O_WEIGHTS_MEAN
                : first_asked(o, ~(1u << O_OUTPUT | 1u << O_HEAD_OUTPUTS));
  if (!*to && out >= 0)
    snprintf(to, sizeof to, "outputs[%d]", o->output_at[out]);
  if (!*to && strcmp(f, "layer") == 0)
    snprintf(to, sizeof to, "model");
  if (*to)
    snprintf(f, sizeof o->d.err->field, "%s", to);
}

/* What is required, the head counts and the timeout, then the steps /v1
 * shares: the layer's widths, planning and the limits. */
static int finish(oip_t *o) {
  dec_t *d = &o->d;
  attnd_request_t *j = d->req;
  attn_params_t *p = &j->params;
  const attnd_config_t *c = d->cfg;
  if (o->layer) {
    p->num_heads = o->layer->H;
    p->num_kv_heads = o->layer->Hkv;
  } else if (!(o->params_given & 1u << P_NUM_HEADS)) {
    return E(d, ATTND_ERR_MISSING_FIELD, "parameters.num_heads",
             "parameters.num_heads is required for model '%s'",
             ATTND_OIP_GENERIC);
  }
  if (p->num_heads > c->max_heads)
    return E(d, ATTND_ERR_LIMIT_EXCEEDED,
             o->layer ? "model" : "parameters.num_heads",
             "num_heads %lld is over max_heads %lld", (long long)p->num_heads,
             (long long)c->max_heads);
  if (j->timeout_ms > c->max_timeout_ms)
    return E(d, ATTND_ERR_LIMIT_EXCEEDED, "parameters.timeout_ms",
             "parameters.timeout_ms %lld is over max_timeout_ms %lld",
             (long long)j->timeout_ms, (long long)c->max_timeout_ms);
  if ((o->layer && attnd__dec_layer_widths(d) < 0) || attnd__dec_plan(d) < 0 ||
      attnd__dec_limits(d) < 0) {
    remap_field(o);
    return -1;
  }
  return 0;
}

const char *const attnd__oip_request_members[] = {"id", "parameters", "inputs",
                                                  "outputs", NULL};

static int decode_body(oip_t *o, const json_t *root) {
  dec_t *d = &o->d;
  attnd_request_t *j = d->req;
  if (attnd__dec_root(d, root, attnd__oip_request_members) < 0)
    return -1;
  j->timeout_ms = d->cfg->default_timeout_ms;
  j->encoding = ATTND_FORM_FLAT;
  j->backend = ATTND_BACKEND_CONFIG; /* as /v1: the config's, unless asked */
  j->precision = ATTND_PRECISION_CONFIG;
  if (read_params(o, json_object_get(root, "parameters")) < 0 ||
      attnd__oip_read_inputs(o, json_object_get(root, "inputs")) < 0 ||
      read_outputs(o, json_object_get(root, "outputs")) < 0)
    return -1;
  return finish(o);
}

/* One decode of the JSON text json[0..n) (with `bulk`, a skeleton whose
 * placeholders stand for its items) into a new request. On failure, the
 * body taken gives back to the caller (*own), for the slow path to read
 * again; *unsure tells whether that path may word the error otherwise. */
static attnd_request_t *decode_once(oip_t tmpl, const char *json, size_t n,
                                    attnd_bulk_set_t *bulk, int *unsure) {
  attnd_error_t *err = tmpl.d.err;
  attnd_request_t *j = attnd_request_new();
  *unsure = 0;
  if (j == NULL) {
    attnd_error_set(err, ATTND_ERR_OUT_OF_MEMORY, "",
                    "out of memory for a new request");
    return NULL;
  }
  oip_t o = tmpl;
  o.d.req = j;
  o.d.bulk = bulk;
  json_error_t je;
  int oom = 0, r = resolve_model(&o);
  json_t *root = r == 0 ? attnd__dec_parse(json, n, &je, &oom) : NULL;
  if (r < 0)
    ;
  else if (oom)
    r = attnd_error_set(err, ATTND_ERR_OUT_OF_MEMORY, "",
                        "out of memory parsing the request's JSON");
  else if (root == NULL) /* the skeleton's error is not the body's */
    r = (*unsure = bulk != NULL,
         attnd_error_set(err, ATTND_ERR_INVALID_JSON, "",
                         "invalid JSON at line %d, column %d: %s", je.line,
                         je.column, je.text));
  else if ((r = decode_body(&o, root)) < 0) {
    *unsure = o.d.unsure && !o.d.planning;
    attnd__dec_keep_id(j, err);
  }
  json_decref(root);
  if (r == 0)
    return j;
  for (size_t i = 0; o.lent && i < j->n_allocs; i++)
    if (j->allocs[i] == o.lent) /* the body goes back, not with j */
      j->allocs[i] = NULL, *tmpl.own = o.lent;
  attnd_request_free(j);
  return NULL;
}

/* Where the JSON object or array that text[0..n) opens with ends (after
 * its closing bracket), found by its brackets, each closed by its own
 * kind, and its strings alone; 0 when it opens with neither, a bracket
 * closes one of the other kind, it nests deeper than jansson reads (2048),
 * or the text ends first. Any thread. */
static size_t json_value_end(const char *text, size_t n) {
  char open[2048]; /* the brackets not closed yet */
  size_t i = 0, depth = 0;
  while (i < n && strchr(" \t\r\n", text[i]) && text[i])
    i++;
  if (i == n || (text[i] != '{' && text[i] != '['))
    return 0;
  for (; i < n; i++) {
    char c = text[i];
    if (c == '"')
      for (i++; i < n && text[i] != '"'; i++)
        i += text[i] == '\\';
    else if (c == '{' || c == '[') {
      if (depth == sizeof open)
        return 0;
      open[depth++] = c;
    } else if (c == '}' || c == ']') {
      if (open[--depth] != (c == '}' ? '{' : '['))
        return 0;
      if (depth == 0)
        return i + 1;
    }
  }
  return 0;
}

/* An invalid_json error of a body sent without
 * Inference-Header-Content-Length, whose JSON is followed by more bytes,
 * as binary tensor data would be: the message says the header is probably
 * missing. */
static void hint_missing_length(const char *body, size_t len,
                                attnd_error_t *err) {
  size_t end = json_value_end(body, len), k = end;
  while (k < len && strchr(" \t\r\n", body[k]) && body[k])
    k++;
  if (end == 0 || k == len)
    return;
  char was[sizeof err->message];
  memcpy(was, err->message, sizeof was);
  attnd_error_set(err, ATTND_ERR_INVALID_JSON,
                  "Inference-Header-Content-Length",
                  "%s; %zu bytes follow the body's JSON: binary tensor data "
                  "needs the header Inference-Header-Content-Length (the "
                  "JSON's length in bytes), which is probably missing",
                  was, len - end);
}

int attnd__oip_decode_path(const char *model, const char *body, size_t len,
                           int64_t json_len, void **own, size_t own_bytes,
                           int fast, const attnd_config_t *cfg,
                           attnd_layer_set_t *layers, attnd_request_t **out,
                           attnd_error_t *err) {
  double t0 = attnd_now_ms();
  *out = NULL;
  if (json_len > (int64_t)len)
    return attnd_error_set(
        err, ATTND_ERR_BAD_REQUEST, "Inference-Header-Content-Length",
        "Inference-Header-Content-Length is %lld, past the end of the %zu "
        "byte body",
        (long long)json_len, len);
  size_t n = json_len < 0 ? len : (size_t)json_len;
  oip_t o = {.d = {.cfg = cfg, .err = err, .layers = layers, .core_names = 1},
             .model = model,
             .bin = json_len < 0 ? NULL : (const unsigned char *)body + n,
             .bin_len = len - n,
             .own = own && *own ? own : NULL,
             .own_bytes = own_bytes};
  memset(o.input_at, -1, sizeof o.input_at);
  memset(o.output_at, -1, sizeof o.output_at);
  /* the fast path: "data" arrays of numbers lifted out of
   * jansson's way; both paths refuse first a body whose JSON outside them
   * is over max_json_structure_bytes */
  attnd_bulk_set_t bulk;
  attnd_buf_t skel;
  char skel_mem[ATTND_DEC_SKELETON_INLINE];
  attnd_bulk_set_init(&bulk, attnd__dec_nonce());
  static const char *const data_key[] = {"data", NULL};
  bulk.array_keys = data_key;
  attnd_buf_init_in(&skel, skel_mem, sizeof skel_mem);
  attnd__dec_tree_begin();
  int unsure = 1, scanned = attnd_bulk_scan(body, n, ATTND_BULK_MIN_ELEMS, 0,
                                            &bulk, &skel) == 0;
  int over = scanned &&
             (int64_t)(n - bulk.lifted_bytes) > cfg->max_json_structure_bytes;
  /* an array given up on at a syntax error: jansson's error, read without
   * its numbers (and on both paths when they are over the limit) */
  json_error_t je;
  int oom = 0,
      fault = scanned && (over || fast)
                  ? attnd__dec_fault(body, n, &bulk, &skel,
                                     cfg->max_json_structure_bytes, &je, &oom)
                  : 0;
  if (!scanned || oom) {
    attnd_error_set(err, ATTND_ERR_OUT_OF_MEMORY, "",
                    "out of memory parsing the request's JSON");
    unsure = 0;
  } else if (fault > 0) {
    attnd_error_set(err, ATTND_ERR_INVALID_JSON, "",
                    "invalid JSON at line %d, column %d: %s", je.line,
                    je.column, je.text);
    unsure = 0;
  } else if (over) {
    attnd_error_set(err, ATTND_ERR_PAYLOAD_TOO_LARGE, "",
                    "the body has %zu bytes of JSON outside tensor data "
                    "(arrays of numbers), over max_json_structure_bytes %lld",
                    n - bulk.lifted_bytes,
                    (long long)cfg->max_json_structure_bytes);
    unsure = 0;
  } else if (fast && bulk.n > 0) {
    *out = decode_once(o, skel.data, skel.len, &bulk, &unsure);
  }
  attnd_buf_free(&skel);
  attnd_bulk_set_free(&bulk);
  if (*out == NULL && unsure) {
    attnd__decode_slow_runs++;
    *out = decode_once(o, body, n, NULL, &unsure);
  }
  attnd__dec_tree_end();
  if (*out == NULL && json_len < 0 && err->code == ATTND_ERR_INVALID_JSON)
    hint_missing_length(body, len, err);
  if (*out == NULL)
    return -1;
  (*out)->t.decode_ms = attnd_now_ms() - t0;
  return 0;
}

int attnd_oip_decode(const char *model, const char *body, size_t len,
                     int64_t json_len, void **own, size_t own_bytes,
                     const attnd_config_t *cfg, attnd_layer_set_t *layers,
                     attnd_request_t **out, attnd_error_t *err) {
  return attnd__oip_decode_path(model, body, len, json_len, own, own_bytes, 1,
                                cfg, layers, out, err);
}

/* ---- metadata ------------------------------------------------------------ */

/* {"name","datatype","shape"} of a tensor whose dims are given, -1 for a
 * variable one. */
static void put_meta(attnd_buf_t *b, const char *name, const char *dt, int rank,
                     const int64_t *dim) {
  attnd_buf_printf(b, "{\"name\":\"%s\",\"datatype\":\"%s\",\"shape\":[", name,
                   dt);
  for (int i = 0; i < rank; i++)
    attnd_buf_printf(b, "%s%lld", i ? "," : "", (long long)dim[i]);
  attnd_buf_puts(b, "]}");
}

int attnd_oip_metadata(const char *model, attnd_layer_set_t *layers,
                       attnd_buf_t *b, attnd_error_t *err) {
  const attnd_layer_t *l;
  if (attnd_oip_model(model, layers, &l, err) < 0)
    return -1;
  static const char *const dt[] = {"FP32", "INT64", "BOOL"};
  int64_t H = l ? l->H : -1, Eo = l ? l->Eo : -1, Dv = l ? l->Dv : -1;
  /* query, key, value (attnd__oip_inputs' first three): the layer's widths */
  const int64_t widths[3] = {l ? l->E : -1, l ? l->Ek : -1, l ? l->Ev : -1};
  attnd_buf_puts(b, "{\"name\":");
  attnd_buf_json_string(b, model, strlen(model));
  attnd_buf_puts(b, ",\"versions\":[\"1\"],\"platform\":\"attnd\","
                    "\"inputs\":[");
  int first = 1;
  for (size_t i = 0; i < N_INPUTS; i++) {
    const input_def_t *in = &attnd__oip_inputs[i];
    if (l && in->generic)
      continue;
    int64_t dim[4] = {-1, -1, -1, -1};
    if (i < 3)
      dim[2] = widths[i];
    if (!first)
      attnd_buf_puts(b, ",");
    first = 0;
    put_meta(b, in->name, dt[in->elem], in->rank, dim);
  }
  /* the reductions: [B, H', rows, cols] with H' = H per head (-1 here:
   * it may be absent, for the mean over heads) */
  const int64_t out[] = {-1, -1, Eo}, weights[] = {-1, H, -1, -1},
                mean[] = {-1, -1, -1}, heads[] = {-1, H, -1, Dv},
                red4[] = {-1, -1, -1, -1}, red3[] = {-1, -1, -1};
  const int64_t *dims[N_OUTPUTS] = {out,  weights, mean, heads, red4,
                                    red4, red4,    red3, red3,  red3};
  const int ranks[N_OUTPUTS] = {3, 4, 3, 4, 4, 4, 4, 3, 3, 3};
  attnd_buf_puts(b, "],\"outputs\":[");
  for (int i = 0; i < N_OUTPUTS; i++) {
    if (i)
      attnd_buf_puts(b, ",");
    put_meta(b, attnd_oip_output_names[i],
             i == O_TOP_K_INDEX ? "INT32" : "FP32", ranks[i], dims[i]);
  }
  attnd_buf_puts(b, "]}\n");
  return 0;
}
