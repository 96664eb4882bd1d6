/* server/api/decode.c: a request body to a planned request: the request's
 * schema, the configured limits, and the core's errors in the API's terms.
 *
 * Decoding checks, in order: JSON syntax (invalid_json); the request's
 * members and their types; every tensor (decode_tensor.c: form, shape,
 * leaf types, finiteness); then the configured limits on the batch, the
 * lengths and the heads; then the core's validation of shapes and options
 * (attn_plan_init); then the configured limits on the plan. Every failure
 * names the member as a JSON path. HTTP thread. */
#include "api/decode.h"

#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/arena.h"
#include "codec/util.h"

/* One pass ORs a sum whose top bit is set only for an exponent of all ones
 * (vectorized: 20 GB/s here), a second finds it. */
int64_t attnd__dec_first_non_finite(const float *x, int64_t n) {
  uint32_t acc = 0;
#pragma omp simd reduction(| : acc)
  for (int64_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, &x[i], sizeof u);
    acc |= (u & 0x7f800000u) + 0x800000u;
  }
  for (int64_t i = 0; (acc & 0x80000000u) && i < n; i++)
    if (!isfinite(x[i]))
      return i;
  return -1;
}

static int get_int(dec_t *d, const json_t *obj, const char *key,
                   const char *field, int64_t lo, int64_t hi, int64_t *out,
                   int *present) {
  const json_t *v = json_object_get(obj, key);
  *present = v != NULL && !json_is_null(v);
  if (!*present)
    return 0;
  return attnd__dec_int(d, v, field, field, lo, hi, out);
}

/* A number member `key` of obj (its path `field`), as a double (JSON's
 * own numbers are finite; one past a double is at least ATTND_JSON_HUGE);
 * with `as_float`, one that must be a finite float32 too. */
static int get_double(dec_t *d, const json_t *obj, const char *key,
                      const char *field, int as_float, double *out,
                      int *present) {
  const json_t *v = json_object_get(obj, key);
  *present = v != NULL && !json_is_null(v);
  if (!*present)
    return 0;
  if (!json_is_number(v))
    return E(d, ATTND_ERR_INVALID_TYPE, field, "%s is %s; expected a number",
             field, attnd__json_type(v));
  *out = json_number_value(v);
  char num[32];
  if (as_float ? !isfinite((float)*out) : fabs(*out) >= ATTND_JSON_HUGE)
    return E(d, ATTND_ERR_NON_FINITE, field, "%s is %s, not a finite %s", field,
             attnd__dec_num(*out, num), as_float ? "float32" : "number");
  return 0;
}

static int get_number(dec_t *d, const json_t *obj, const char *key, float *out,
                      int *present) {
  double x = 0;
  int r = get_double(d, obj, key, key, 1, &x, present);
  *out = (float)x;
  return r;
}

/* softcap, which must be above 0 in float32 (attnd__dec_softcap). */
static int get_softcap(dec_t *d, const json_t *obj, attn_params_t *p) {
  double x = 0;
  if (get_double(d, obj, "softcap", "softcap", 1, &x, &p->has_softcap) < 0)
    return -1;
  p->softcap = (float)x;
  return p->has_softcap ? attnd__dec_softcap(d, x, "softcap") : 0;
}

static int get_bool(dec_t *d, const json_t *obj, const char *key,
                    const char *field, int *out) {
  const json_t *v = json_object_get(obj, key);
  if (v == NULL || json_is_null(v))
    return 0;
  if (!json_is_boolean(v))
    return E(d, ATTND_ERR_INVALID_TYPE, field,
             "%s is %s; expected true or false", field, attnd__json_type(v));
  *out = json_is_true(v);
  return 0;
}

int attnd__dec_enum(attnd_error_t *err, const json_t *obj, const char *key,
                    const char *field, const char *const *names, int *out) {
  dec_t dd = {.err = err}, *d = &dd;
  const json_t *v = json_object_get(obj, key);
  if (v == NULL || json_is_null(v))
    return 0;
  for (int i = 0; json_is_string(v) && names[i]; i++)
    if (strcmp(json_string_value(v), names[i]) == 0) {
      *out = i;
      return 0;
    }
  char list[128] = "";
  size_t n = 0;
  for (int i = 0; names[i] && n < sizeof list; i++)
    n += (size_t)snprintf(list + n, sizeof list - n, "%s\"%s\"", i ? ", " : "",
                          names[i]);
  if (!json_is_string(v))
    return E(d, ATTND_ERR_INVALID_TYPE, field, "%s is %s; expected one of %s",
             field, attnd__json_type(v), list);
  return E(d, ATTND_ERR_INVALID_VALUE, field,
           "%s is \"%s\"; expected one of %s", field, json_string_value(v),
           list);
}

/* Picks one of `names` for a string member; *out is its index. */
static int get_enum(dec_t *d, const json_t *obj, const char *key,
                    const char *field, const char *const *names, int *out) {
  return attnd__dec_enum(d->err, obj, key, field, names, out);
}

/* The object member `key` of `obj`, whose path in the request is `path`
 * ("rope.scaling"): the field its errors and its members' errors name. */
static const json_t *get_object_at(dec_t *d, const json_t *obj, const char *key,
                                   const char *path, const char *const *known,
                                   int *bad) {
  const json_t *v = json_object_get(obj, key);
  *bad = 0;
  if (v == NULL || json_is_null(v))
    return NULL;
  if (!json_is_object(v)) {
    *bad = E(d, ATTND_ERR_INVALID_TYPE, path, "%s is %s; expected an object",
             path, attnd__json_type(v));
    return NULL;
  }
  *bad = attnd__dec_members(d, v, path, known);
  return *bad ? NULL : v;
}

/* A member of the request's root, `key` its own path. */
static const json_t *get_object(dec_t *d, const json_t *obj, const char *key,
                                const char *const *known, int *bad) {
  return get_object_at(d, obj, key, key, known, bad);
}

/* The members that hold tensors: at the root, under projections, under
 * mask, and an object tensor's "data". Only their values are lifted by the
 * bulk scanner (lifted_keys), so that only attnd__dec_tensor ever meets an
 * array placeholder where it stands for a tensor; under those names
 * anywhere else, a placeholder is an unknown member, whose error does not
 * show its value. */
#define PROJECTION_MEMBERS                                                     \
  "q_weight", "k_weight", "v_weight", "o_weight", "q_bias", "k_bias",          \
      "v_bias", "o_bias"
const char *const attnd__dec_projection_members[] = {PROJECTION_MEMBERS, NULL};
static const char *const lifted_keys[] = {
    "query", "key",  "value", PROJECTION_MEMBERS, "allow", "bias",
    "alibi", "data", NULL};

static int decode_projections(dec_t *d, const json_t *root) {
  const char *const *known = attnd__dec_projection_members;
  int bad;
  const json_t *pr = get_object(d, root, "projections", known, &bad);
  if (pr == NULL)
    return bad;
  attn_params_t *p = &d->req->params;
  attn_tensor_t *dst[] = {&p->q_weight, &p->k_weight, &p->v_weight,
                          &p->o_weight, &p->q_bias,   &p->k_bias,
                          &p->v_bias,   &p->o_bias};
  for (int i = 0; known[i]; i++) {
    const json_t *v = json_object_get(pr, known[i]);
    if (v == NULL || json_is_null(v))
      continue;
    char field[64];
    attnd_fmt_member(field, sizeof field, "projections", known[i]);
    if (attnd__dec_tensor(d, v, field, K_FLOAT, dst[i], NULL) < 0)
      return -1;
  }
  return 0;
}

const char *const attnd__dec_mask_members[] = {
    "causal", "key_lengths", "allow", "bias", "window", "alibi", NULL};
/* a session's step is causal over its cache, and its masks are over a
 * length the step does not know until its turn */
const char *const attnd__dec_step_mask_members[] = {"window", "alibi", NULL};
const char *const attnd__dec_window_members[] = {"left", "right", NULL};

static int decode_mask(dec_t *d, const json_t *root) {
  int bad;
  const json_t *m = get_object(
      d, root, "mask",
      d->step ? attnd__dec_step_mask_members : attnd__dec_mask_members, &bad);
  if (m == NULL)
    return bad;
  attn_params_t *p = &d->req->params;

  const json_t *c = json_object_get(m, "causal");
  if (json_is_boolean(c)) {
    p->causal = json_is_true(c) ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_NONE;
  } else if (c && !json_is_null(c)) {
    static const char *const kinds[] = {"none", "bottom_right", "top_left",
                                        NULL};
    int k = 0;
    if (!json_is_string(c))
      return E(d, ATTND_ERR_INVALID_TYPE, "mask.causal",
               "mask.causal is %s; expected true, false, \"bottom_right\" "
               "or \"top_left\"",
               attnd__json_type(c));
    if (get_enum(d, m, "causal", "mask.causal", kinds, &k) < 0)
      return -1;
    p->causal = (attn_causal_t)k;
  }

  const json_t *kl = json_object_get(m, "key_lengths");
  if (kl && !json_is_null(kl)) {
    if (!json_is_array(kl) || json_array_size(kl) == 0)
      return E(d, ATTND_ERR_INVALID_TYPE, "mask.key_lengths",
               "mask.key_lengths is %s; expected an array of one integer "
               "per batch item",
               json_is_array(kl) ? "empty" : attnd__json_type(kl));
    size_t n = json_array_size(kl);
    int64_t *len = attnd__dec_alloc(d, n * sizeof *len);
    if (len == NULL)
      return attnd__dec_oom(d, "mask.key_lengths");
    for (size_t i = 0; i < n; i++) {
      char path[48];
      attnd_fmt_index(path, sizeof path, "mask.key_lengths", (int64_t)i);
      if (attnd__dec_int(d, json_array_get(kl, i), "mask.key_lengths", path,
                         INT64_MIN, INT64_MAX, &len[i]) < 0)
        return -1;
    }
    p->key_lengths = (attn_tensor_t){len, 1, {(int64_t)n}};
  }

  const json_t *allow = json_object_get(m, "allow");
  if (allow && !json_is_null(allow) &&
      attnd__dec_tensor(d, allow, "mask.allow", K_MASK, &p->allow, NULL) < 0)
    return -1;
  const json_t *bias = json_object_get(m, "bias");
  if (bias && !json_is_null(bias) &&
      attnd__dec_tensor(d, bias, "mask.bias", K_FLOAT, &p->bias, NULL) < 0)
    return -1;

  /* get_int sets both presences: a layer's window is replaced whole */
  const json_t *w = json_object_get(m, "window");
  if (w && !json_is_null(w)) {
    if (!json_is_object(w))
      return E(d, ATTND_ERR_INVALID_TYPE, "mask.window",
               "mask.window is %s; expected {\"left\": n, \"right\": n}",
               attnd__json_type(w));
    const char *const *wknown = attnd__dec_window_members;
    if (attnd__dec_members(d, w, "mask.window", wknown) < 0 ||
        get_int(d, w, "left", "mask.window.left", 0, INT64_MAX, &p->window_left,
                &p->has_window_left) < 0 ||
        get_int(d, w, "right", "mask.window.right", 0, INT64_MAX,
                &p->window_right, &p->has_window_right) < 0)
      return -1;
  }

  const json_t *al = json_object_get(m, "alibi");
  if (json_is_boolean(al)) {
    p->alibi = json_is_true(al) ? ATTN_ALIBI_DEFAULT : ATTN_ALIBI_NONE;
  } else if (json_is_array(al)) {
    p->alibi = ATTN_ALIBI_SLOPES;
    if (attnd__dec_tensor(d, al, "mask.alibi", K_FLOAT, &p->alibi_slopes,
                          NULL) < 0)
      return -1;
  } else if (al && !json_is_null(al)) {
    return E(d, ATTND_ERR_INVALID_TYPE, "mask.alibi",
             "mask.alibi is %s; expected true, false or one slope per "
             "head",
             attnd__json_type(al));
  }
  return 0;
}

/* A pair [a, b] of integers in [lo, hi], at `field`. */
static int get_pair(dec_t *d, const json_t *obj, const char *key,
                    const char *field, int64_t lo, int64_t hi, int64_t out[2],
                    int *present) {
  const json_t *v = json_object_get(obj, key);
  *present = v != NULL && !json_is_null(v);
  if (!*present)
    return 0;
  if (!json_is_array(v) || json_array_size(v) != 2)
    return E(d, ATTND_ERR_INVALID_TYPE, field,
             "%s is %s; expected an array of two integers", field,
             json_is_array(v) ? "an array of another length"
                              : attnd__json_type(v));
  for (size_t i = 0; i < 2; i++) {
    char path[64];
    attnd_fmt_index(path, sizeof path, field, (int64_t)i);
    if (attnd__dec_int(d, json_array_get(v, i), field, path, lo, hi, &out[i]) <
        0)
      return -1;
  }
  return 0;
}

/* The object form of "return.weights" (attn_reduce_t): reductions of the
 * weights instead of the dense tensor; at least one of top_k, pool and
 * stats. Ranges are checked against the axes by the core's plan. */
const char *const attnd__dec_weights_members[] = {
    "heads",       "top_k",       "pool",      "reduce", "stats",
    "sink_tokens", "query_range", "key_range", NULL};

static int decode_reduce(dec_t *d, const json_t *w) {
  static const char *const heads[] = {"per_head", "mean", NULL};
  static const char *const reduces[] = {"mean", "max", "sum", NULL};
  static const char *const stats[] = {"entropy", "sink", "distance", NULL};
  attn_reduce_t *r = &d->req->params.reduce;
  int h = 0, red = 0, has_k = 0, has_pool = 0, has_sink = 0;
  int64_t pool[2] = {0, 0};
  if (attnd__dec_members(d, w, "return.weights", attnd__dec_weights_members) <
          0 ||
      get_enum(d, w, "heads", "return.weights.heads", heads, &h) < 0 ||
      get_int(d, w, "top_k", "return.weights.top_k", 1, ATTN_TOP_K_MAX,
              &r->top_k, &has_k) < 0 ||
      get_pair(d, w, "pool", "return.weights.pool", 1, INT64_MAX, pool,
               &has_pool) < 0 ||
      get_enum(d, w, "reduce", "return.weights.reduce", reduces, &red) < 0 ||
      get_int(d, w, "sink_tokens", "return.weights.sink_tokens", 0, INT64_MAX,
              &r->sink_tokens, &has_sink) < 0 ||
      get_pair(d, w, "query_range", "return.weights.query_range", 0, INT64_MAX,
               r->query_range, &r->has_query_range) < 0 ||
      get_pair(d, w, "key_range", "return.weights.key_range", 0, INT64_MAX,
               r->key_range, &r->has_key_range) < 0)
    return -1;
  r->mean_heads = h == 1;
  r->pool_q = pool[0], r->pool_k = pool[1];
  r->pool_reduce = (attn_pool_reduce_t)red;
  if (!has_sink)
    r->sink_tokens = ATTND_SINK_TOKENS_DEFAULT;
  const json_t *rv = json_object_get(w, "reduce");
  if (rv && !json_is_null(rv) && !has_pool)
    return E(d, ATTND_ERR_INVALID_VALUE, "return.weights.reduce",
             "return.weights.reduce is given without return.weights.pool");
  const json_t *st = json_object_get(w, "stats");
  if (st && !json_is_null(st)) {
    if (!json_is_array(st) || json_array_size(st) == 0)
      return E(d, ATTND_ERR_INVALID_TYPE, "return.weights.stats",
               "return.weights.stats is %s; expected an array of \"entropy\", "
               "\"sink\" and \"distance\"",
               json_is_array(st) ? "empty" : attnd__json_type(st));
    for (size_t i = 0; i < json_array_size(st); i++) {
      const json_t *x = json_array_get(st, i);
      char path[64];
      attnd_fmt_index(path, sizeof path, "return.weights.stats", (int64_t)i);
      int k = -1;
      for (int n = 0; json_is_string(x) && stats[n]; n++)
        if (strcmp(json_string_value(x), stats[n]) == 0)
          k = n;
      if (k < 0)
        return E(d,
                 json_is_string(x) ? ATTND_ERR_INVALID_VALUE
                                   : ATTND_ERR_INVALID_TYPE,
                 "return.weights.stats",
                 "%s is %s; expected \"entropy\", \"sink\" or \"distance\"",
                 path,
                 json_is_string(x) ? "an unknown name" : attnd__json_type(x));
      if (r->stats & (1u << k))
        return E(d, ATTND_ERR_INVALID_VALUE, "return.weights.stats",
                 "%s: \"%s\" is named twice", path, stats[k]);
      r->stats |= 1u << k;
    }
  }
  if (!has_k && !has_pool && !r->stats)
    return E(d, ATTND_ERR_MISSING_FIELD, "return.weights",
             "return.weights as an object needs top_k, pool or stats");
  if (has_sink && !(r->stats & ATTN_STAT_SINK))
    return E(d, ATTND_ERR_INVALID_VALUE, "return.weights.sink_tokens",
             "return.weights.sink_tokens is given without \"sink\" in "
             "return.weights.stats");
  return 0;
}

const char *const attnd__dec_return_members[] = {
    "weights", "head_outputs", "metrics", "encoding", "dtype", NULL};

static int decode_return(dec_t *d, const json_t *root) {
  static const char *const wmodes[] = {"none", "per_head", "mean", NULL};
  static const char *const encs[] = {"nested", "flat", "base64", NULL};
  static const char *const dtypes[] = {"float32", "float16", "bfloat16", NULL};
  attnd_request_t *j = d->req;
  int bad, w = 0, enc = (int)d->query_form, dt = 0;
  const json_t *r =
      get_object(d, root, "return", attnd__dec_return_members, &bad);
  if (r == NULL && bad)
    return bad;
  j->want_metrics = 1;
  const json_t *wo = r ? json_object_get(r, "weights") : NULL;
  if (json_is_object(wo) && decode_reduce(d, wo) < 0)
    return -1;
  if (wo && !json_is_null(wo) && !json_is_object(wo) && !json_is_string(wo))
    return E(d, ATTND_ERR_INVALID_TYPE, "return.weights",
             "return.weights is %s; expected \"none\", \"per_head\", "
             "\"mean\" or an object of reductions (top_k, pool, stats)",
             attnd__json_type(wo));
  if (r && ((!json_is_object(wo) &&
             get_enum(d, r, "weights", "return.weights", wmodes, &w) < 0) ||
            get_bool(d, r, "head_outputs", "return.head_outputs",
                     &j->params.want_head_outputs) < 0 ||
            get_bool(d, r, "metrics", "return.metrics", &j->want_metrics) < 0 ||
            get_enum(d, r, "encoding", "return.encoding", encs, &enc) < 0 ||
            get_enum(d, r, "dtype", "return.dtype", dtypes, &dt) < 0))
    return -1;
  j->dtype = (attnd_dtype_t)dt;
  j->dtype_field = "return.dtype";
  j->weights_mode = (attnd_weights_t)w;
  j->params.want_weights = w == ATTND_WEIGHTS_PER_HEAD;
  j->params.want_mean_weights = w == ATTND_WEIGHTS_MEAN;
  j->encoding = (attnd_form_t)enc;
  return 0;
}

/* The backend and precision of request j: what it asked for, else the
 * config's. *fallback is set where the config's auto chose cuda, so that a
 * request the cuda backend refuses may still run on the cpu. */
static void pick_backend(const attnd_request_t *j, const attnd_config_t *cfg,
                         attn_exec_t *ex, int *fallback) {
  attn_cuda_info_t ci;
  *fallback = 0;
  ex->backend = ATTN_BACKEND_CPU;
  if (j->backend == ATTND_BACKEND_CUDA) {
    ex->backend = ATTN_BACKEND_CUDA;
  } else if (j->backend == ATTND_BACKEND_CONFIG) {
    if (strcmp(cfg->backend, "cuda") == 0) {
      ex->backend = ATTN_BACKEND_CUDA;
    } else if (strcmp(cfg->backend, "auto") == 0) {
      attn_cuda_info(&ci);
      if (ci.usable)
        ex->backend = ATTN_BACKEND_CUDA, *fallback = 1;
    }
  }
  ex->precision = ATTN_PRECISION_FP32;
  if (j->precision == ATTND_PRECISION_BF16)
    ex->precision = ATTN_PRECISION_BF16, *fallback = 0;
  else if (j->precision == ATTND_PRECISION_CONFIG &&
           ex->backend == ATTN_BACKEND_CUDA &&
           strcmp(cfg->precision, "bf16") == 0)
    ex->precision = ATTN_PRECISION_BF16;
}

attnd_err_t attnd_cuda_refusal_code(void) {
  attn_cuda_info_t ci;
  attn_cuda_info(&ci);
  return ci.built ? ATTND_ERR_BACKEND_UNAVAILABLE : ATTND_ERR_INVALID_VALUE;
}

/* A layer's projection weights and biases where ex's backend and
 * precision read them: on the GPU in place where its set is resident
 * there (attnd_layer_set_to_device) in a form the call takes (float32
 * weights, or bfloat16 ones for a bf16 call), else from host memory. */
static void layer_weights_for(attnd_request_t *j, const attn_exec_t *ex) {
  const attnd_layer_t *l = j->layer;
  if (l == NULL)
    return;
  attn_params_t *p = &j->params;
  const int cuda = ex->backend == ATTN_BACKEND_CUDA;
  const int w16 = cuda && ex->precision == ATTN_PRECISION_BF16 &&
                  l->gpu.weight16[0] != NULL;
  const int dev = cuda && (l->gpu.q_weight != NULL || w16);
  attn_tensor_t *t[8] = {&p->q_weight, &p->k_weight, &p->v_weight, &p->o_weight,
                         &p->q_bias,   &p->k_bias,   &p->v_bias,   &p->o_bias};
  const float *host[8] = {l->q_weight, l->k_weight, l->v_weight, l->o_weight,
                          l->q_bias,   l->k_bias,   l->v_bias,   l->o_bias};
  const float *gpu[8] = {l->gpu.q_weight, l->gpu.k_weight, l->gpu.v_weight,
                         l->gpu.o_weight, l->gpu.q_bias,   l->gpu.k_bias,
                         l->gpu.v_bias,   l->gpu.o_bias};
  for (int i = 0; i < 8; i++) /* a bf16 set's float weights: never read */
    if (t[i]->rank)
      t[i]->data = dev && gpu[i] ? gpu[i] : host[i];
  for (int i = 0; i < 4; i++)
    p->weights_bf16[i] = w16 ? l->gpu.weight16[i] : NULL;
  p->weights_on_device = dev;
}

/* The configured limits on the batch, the lengths and the heads. Run on
 * the decoded shapes before planning as well as on the plan: the core
 * refuses a problem whose sizes pass 2^40 elements ("problem too large"),
 * and a length that is over max_seq_len should be refused by the limit
 * that names it, whatever its size. */
static int check_dims(dec_t *d, int64_t B, int64_t Lq, int64_t Lk, int64_t H) {
  const attnd_config_t *c = d->cfg;
  const struct {
    int64_t n, max;
    const char *field, *what, *key;
  } lim[] = {
      {B, c->max_batch, "query", "batch", "max_batch"},
      {Lq, c->max_seq_len, "query", "query length", "max_seq_len"},
      {Lk, c->max_seq_len, d->req->params.key.rank ? "key" : "query",
       "key length", "max_seq_len"},
      {H, c->max_heads, "num_heads", "num_heads", "max_heads"},
  };
  for (size_t i = 0; i < sizeof lim / sizeof lim[0]; i++)
    if (lim[i].n > lim[i].max)
      return E(d, ATTND_ERR_LIMIT_EXCEEDED, lim[i].field,
               "%s %lld is over %s %lld", lim[i].what, (long long)lim[i].n,
               lim[i].key, (long long)lim[i].max);
  return 0;
}

/* check_dims on the sizes the core will take from the decoded query and
 * key (attn_plan_init: B from a rank-3 query, the lengths from their rows)
 * where their ranks are ones it takes; a kv cache's keys are checked on the
 * plan, which counts the cached ones. */
static int check_decoded_dims(dec_t *d) {
  const attn_params_t *p = &d->req->params;
  const attn_tensor_t *q = &p->query, *k = p->key.rank ? &p->key : q;
  if ((q->rank != 2 && q->rank != 3) || k->rank != q->rank)
    return 0;
  const int b3 = q->rank == 3;
  return check_dims(d, b3 ? q->dim[0] : 1, q->dim[b3], p->kv ? 0 : k->dim[b3],
                    p->num_heads);
}

int attnd__dec_plan(dec_t *d) {
  attnd_request_t *j = d->req;
  d->planning = 1;
  if (check_decoded_dims(d) < 0)
    return -1;
  attn_exec_t ex = {.threads = attnd_config_plan_threads(d->cfg),
                    .cancel = &j->cancel};
  int fallback;
  pick_backend(j, d->cfg, &ex, &fallback);
  layer_weights_for(j, &ex);
  attn_error_t ae;
  int rc = attn_plan_init(&j->plan, &j->params, &ex, &ae);
  /* what no GPU memory budget could hold: max_device_memory_bytes less
   * what the layers on the GPU hold of it for as long as they are
   * loaded */
  const int64_t layers_dev = attnd_layer_set_device_bytes(d->layers),
                room = d->cfg->max_device_memory_bytes - layers_dev;
  int too_big = rc == 0 && j->plan.backend == ATTN_BACKEND_CUDA &&
                j->plan.device_bytes > (uint64_t)(room > 0 ? room : 0);
  if ((rc == ATTN_ENOTSUP || too_big) && fallback) {
    /* auto: what cuda lacks or cannot hold, the cpu */
    ex.backend = ATTN_BACKEND_CPU;
    ex.precision = ATTN_PRECISION_FP32;
    layer_weights_for(j, &ex);
    rc = attn_plan_init(&j->plan, &j->params, &ex, &ae);
  } else if (too_big) {
    const attn_plan_t *pl = &j->plan;
    return E(d, ATTND_ERR_LIMIT_EXCEEDED, "backend",
             "on the cuda backend this request needs %llu bytes of GPU "
             "memory (B=%lld, Lq=%lld, Lk=%lld, H=%lld, Dh=%lld%s), over "
             "the %lld of max_device_memory_bytes %lld that the layers on "
             "the GPU (%lld bytes) leave; use backend cpu, or ask for less",
             (unsigned long long)pl->device_bytes, (long long)pl->B,
             (long long)pl->Lq, (long long)pl->Lk, (long long)pl->H,
             (long long)pl->Dh,
             j->params.want_weights || j->params.want_mean_weights
                 ? ", with the weights [B, H, Lq, Lk]"
                 : "",
             (long long)(room > 0 ? room : 0),
             (long long)d->cfg->max_device_memory_bytes, (long long)layers_dev);
  }
  if (rc == 0)
    return 0;
  attnd_err_t code = ATTND_ERR_INVALID_VALUE;
  if (ae.code == ATTN_ENOTSUP && ae.field_id == ATTN_FIELD_BACKEND)
    code = attnd_cuda_refusal_code();
  switch (ae.code) {
  case ATTN_ERANK:
  case ATTN_ESHAPE:
    code = ATTND_ERR_SHAPE_MISMATCH;
    break;
  case ATTN_EHEADS:
    code = ATTND_ERR_HEADS_MISMATCH;
    break;
  case ATTN_EOVERFLOW:
    code = ATTND_ERR_LIMIT_EXCEEDED;
    break;
  }
  /* The core's message names the field its own way ("positions_query");
   * /v1's names it by its path, as `field` does ("positions.query"). */
  const char *path = attnd_request_field_path(ae.field_id),
             *own = attn_field_name(ae.field_id);
  size_t k = strlen(own);
  if (!d->core_names && strcmp(path, own) != 0 && strcmp(path, "layer") != 0 &&
      strncmp(ae.message, own, k) == 0 && ae.message[k] != '_' &&
      !isalnum((unsigned char)ae.message[k]))
    return E(d, code, path, "%s%s", path, ae.message + k);
  return E(d, code, path, "%s", ae.message);
}

int attnd__dec_limits(dec_t *d) {
  const attnd_config_t *c = d->cfg;
  const attn_plan_t *pl = &d->req->plan;
  attnd_request_t *j = d->req;
  if (check_dims(d, pl->B, pl->Lq, pl->Lk, pl->H) < 0)
    return -1;
  struct {
    int on;
    int64_t n;
    const char *name;
  } outs[] = {
      {1, pl->out_elems, "output"},
      {j->params.want_weights, pl->weights_elems, "weights"},
      {j->params.want_mean_weights, pl->mean_elems, "weights"},
      {j->params.want_head_outputs, pl->head_elems, "head_outputs"},
      {pl->top_k_elems > 0, pl->top_k_elems, "weights_top_k"},
      {pl->pooled_elems > 0, pl->pooled_elems, "weights_pooled"},
      {pl->stats_elems > 0, pl->stats_elems, "weights_stats"},
  };
  static const char *const paths[] = {"query",
                                      "return.weights",
                                      "return.weights",
                                      "return.head_outputs",
                                      "return.weights.top_k",
                                      "return.weights.pool",
                                      "return.weights.stats"};
  for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++) {
    if (!outs[i].on)
      continue;
    if (outs[i].n > c->max_tensor_elements)
      return E(d, ATTND_ERR_LIMIT_EXCEEDED, paths[i],
               "the reply's %s would have %lld elements, over "
               "max_tensor_elements %lld",
               outs[i].name, (long long)outs[i].n,
               (long long)c->max_tensor_elements);
  }
  double bytes = attnd_request_reply_bytes(j);
  if (bytes > (double)c->max_response_bytes)
    return E(d, ATTND_ERR_LIMIT_EXCEEDED,
             j->params.want_weights || j->params.want_mean_weights || pl->reduce
                 ? "return.weights"
                 : "query",
             "the reply would take up to %.0f bytes, over "
             "max_response_bytes %lld",
             bytes, (long long)c->max_response_bytes);
  return 0;
}

/* "layer": the named layer's weights, head counts, norms and rope; with
 * it, projections and rope are the layer's to give, and head counts must
 * agree with it. The request keeps a reference to the set. */
static int decode_layer(dec_t *d, const json_t *root) {
  const json_t *v = json_object_get(root, "layer");
  if (v == NULL || json_is_null(v))
    return 0;
  if (!json_is_string(v))
    return E(d, ATTND_ERR_INVALID_TYPE, "layer",
             "layer is %s; expected the name of a layer (GET /v1/layers)",
             attnd__json_type(v));
  const char *name = json_string_value(v);
  const attnd_layer_t *l = attnd_layer_set_find(d->layers, name);
  if (l == NULL) {
    size_t n = attnd_layer_set_count(d->layers);
    char some[160] = "";
    size_t k = 0;
    for (size_t i = 0; i < n && i < 4 && k < sizeof some; i++)
      k += (size_t)snprintf(some + k, sizeof some - k, "%s'%s'", i ? ", " : "",
                            attnd_layer_set_get(d->layers, i)->name);
    return E(d, ATTND_ERR_UNKNOWN_LAYER, "layer",
             "layer '%.128s' is not loaded (%zu layer%s%s%s%s)", name, n,
             n == 1 ? "" : "s", n ? ": " : "", some, n > 4 ? ", ..." : "");
  }
  static const char *const theirs[] = {"projections", "rope", NULL};
  for (int i = 0; theirs[i]; i++) {
    const json_t *x = json_object_get(root, theirs[i]);
    if (x && !json_is_null(x))
      return E(d, ATTND_ERR_INVALID_VALUE, theirs[i],
               "%s cannot be given with layer: layer '%s' has its own",
               theirs[i], l->name);
  }
  attnd__dec_use_layer(d, l);
  return 0;
}

void attnd__dec_use_layer(dec_t *d, const attnd_layer_t *l) {
  attnd_request_t *j = d->req;
  j->layers = attnd_layer_set_ref(d->layers);
  j->layer = l;
  attn_params_t *p = &j->params;
  int64_t qo = l->H * l->Dh, ko = l->Hkv * l->Dh, vo = l->Hkv * l->Dv,
          oi = l->H * l->Dv;
  p->q_weight = (attn_tensor_t){l->q_weight, 2, {qo, l->E}};
  p->k_weight = (attn_tensor_t){l->k_weight, 2, {ko, l->Ek}};
  p->v_weight = (attn_tensor_t){l->v_weight, 2, {vo, l->Ev}};
  p->o_weight = (attn_tensor_t){l->o_weight, 2, {l->Eo, oi}};
  if (l->q_bias)
    p->q_bias = (attn_tensor_t){l->q_bias, 1, {qo}};
  if (l->k_bias)
    p->k_bias = (attn_tensor_t){l->k_bias, 1, {ko}};
  if (l->v_bias)
    p->v_bias = (attn_tensor_t){l->v_bias, 1, {vo}};
  if (l->o_bias)
    p->o_bias = (attn_tensor_t){l->o_bias, 1, {l->Eo}};
  if (l->q_norm)
    p->q_norm = (attn_tensor_t){l->q_norm, 1, {l->Dh}};
  if (l->k_norm)
    p->k_norm = (attn_tensor_t){l->k_norm, 1, {l->Dh}};
  p->has_norm_eps = l->q_norm || l->k_norm;
  p->norm_eps = l->norm_eps;
  p->rope = l->rope;
  p->causal = l->causal; /* until mask.causal says otherwise */
  /* and its window until mask.window (or OIP's window_*) replaces it */
  p->has_window_left = l->window > 0;
  p->window_left = l->window > 0 ? l->window - 1 : 0;
  p->has_window_right = 0;
}

int attnd__dec_layer_widths(dec_t *d) {
  const attnd_layer_t *l = d->req->layer;
  const attn_params_t *p = &d->req->params;
  const struct {
    const attn_tensor_t *t;
    const char *name, *dim; /* the name of its width in the layer */
    int64_t width;
  } in[] = {{&p->query, "query", "embed dim", l->E},
            {&p->key, "key", "kdim", l->Ek},
            {&p->value, "value", "vdim", l->Ev}};
  int cross = attnd_layer_cross(l);
  for (int i = 0; i < 3; i++) {
    const attn_tensor_t *t = in[i].t;
    if (t->rank == 0 && i && cross)
      return E(d, ATTND_ERR_MISSING_FIELD, in[i].name,
               "%s is required by layer '%s', a cross-attention layer: its "
               "%s is %lld (embed dim %lld, kdim %lld, vdim %lld), so %s "
               "[Lk, %lld] or [B, Lk, %lld] cannot default to the query",
               in[i].name, l->name, in[i].dim, (long long)in[i].width,
               (long long)l->E, (long long)l->Ek, (long long)l->Ev, in[i].name,
               (long long)in[i].width, (long long)in[i].width);
    if (t->rank == 0 || t->dim[t->rank - 1] == in[i].width)
      continue;
    char s[128];
    attnd_shape_text(s, sizeof s, t->rank, t->dim, ", ");
    return E(d, ATTND_ERR_SHAPE_MISMATCH, in[i].name,
             "%s %s has %lld features; layer '%s' takes %s of %lld (its %s)",
             in[i].name, s, (long long)t->dim[t->rank - 1], l->name,
             i == 0 || !cross ? "hidden states"
             : i == 1         ? "keys"
                              : "values",
             (long long)in[i].width, cross ? in[i].dim : "embed dim");
  }
  return 0;
}

/* "rope": {"theta", "dims", "style", "scaling": {"type", ...}}, inline. */
const char *const attnd__dec_rope_members[] = {"theta", "dims", "style",
                                               "scaling", NULL};
const char *const attnd__dec_rope_scaling_members[] = {
    "type",
    "factor",
    "low_freq_factor",
    "high_freq_factor",
    "original_max_position_embeddings",
    NULL};

static int decode_rope(dec_t *d, const json_t *root) {
  static const char *const styles[] = {"half", "interleaved", NULL};
  static const char *const types[] = {"linear", "llama3", NULL};
  int bad, style = 0, present, type = 0;
  const json_t *r = get_object(d, root, "rope", attnd__dec_rope_members, &bad);
  if (r == NULL)
    return bad;
  attn_rope_t *rp = &d->req->params.rope;
  double theta = 10000.0, f = 0;
  if (get_enum(d, r, "style", "rope.style", styles, &style) < 0 ||
      get_double(d, r, "theta", "rope.theta", 0, &theta, &present) < 0 ||
      get_int(d, r, "dims", "rope.dims", 1, INT64_MAX, &rp->dims, &present) < 0)
    return -1;
  rp->style = style ? ATTN_ROPE_INTERLEAVED : ATTN_ROPE_HALF;
  rp->theta = theta;
  const json_t *s = get_object_at(d, r, "scaling", "rope.scaling",
                                  attnd__dec_rope_scaling_members, &bad);
  if (s == NULL)
    return bad;
  if (json_object_get(s, "type") == NULL)
    return E(d, ATTND_ERR_MISSING_FIELD, "rope.scaling.type",
             "rope.scaling.type is required: \"linear\" or \"llama3\"");
  if (get_enum(d, s, "type", "rope.scaling.type", types, &type) < 0)
    return -1;
  rp->scaling = type ? ATTN_ROPE_SCALING_LLAMA3 : ATTN_ROPE_SCALING_LINEAR;
  struct {
    const char *key, *field;
    double *dst;
    int llama3;
  } nums[] = {
      {"factor", "rope.scaling.factor", &rp->factor, 0},
      {"low_freq_factor", "rope.scaling.low_freq_factor", &rp->low_freq_factor,
       1},
      {"high_freq_factor", "rope.scaling.high_freq_factor",
       &rp->high_freq_factor, 1},
      {"original_max_position_embeddings",
       "rope.scaling.original_max_position_embeddings",
       &rp->original_max_position, 1},
  };
  for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
    if (get_double(d, s, nums[i].key, nums[i].field, 0, &f, &present) < 0)
      return -1;
    if (!present && (!nums[i].llama3 || type))
      return E(d, ATTND_ERR_MISSING_FIELD, nums[i].field,
               "%s is required for %s scaling", nums[i].field, types[type]);
    *nums[i].dst = f;
  }
  return 0;
}

/* "positions": {"query": [Lq] or [B, Lq], "key": [Lk] or [B, Lk]}. */
const char *const attnd__dec_positions_members[] = {"query", "key", NULL};

static int decode_positions(dec_t *d, const json_t *root) {
  int bad;
  const json_t *ps =
      get_object(d, root, "positions", attnd__dec_positions_members, &bad);
  if (ps == NULL)
    return bad;
  attn_params_t *p = &d->req->params;
  const json_t *q = json_object_get(ps, "query"),
               *k = json_object_get(ps, "key");
  if (q && !json_is_null(q) &&
      attnd__dec_int_tensor(d, q, "positions.query", 2, &p->positions_query) <
          0)
    return -1;
  if (k && !json_is_null(k) &&
      attnd__dec_int_tensor(d, k, "positions.key", 2, &p->positions_key) < 0)
    return -1;
  return 0;
}

int attnd__dec_root(dec_t *d, const json_t *root, const char *const *known) {
  attnd_request_t *j = d->req;
  if (!json_is_object(root))
    return E(d, ATTND_ERR_INVALID_TYPE, "",
             "the request is %s; expected an object", attnd__json_type(root));
  /* the id first, for the error of whatever else is wrong
   * (attnd__dec_keep_id) */
  const json_t *id = json_object_get(root, "id");
  if (id && !json_is_null(id)) {
    if (!json_is_string(id))
      return E(d, ATTND_ERR_INVALID_TYPE, "id", "id is %s; expected a string",
               attnd__json_type(id));
    if (json_string_length(id) > ATTND_ID_MAX) /* bytes, not characters */
      return E(d, ATTND_ERR_INVALID_VALUE, "id",
               "id has %zu bytes of UTF-8; at most %d bytes",
               json_string_length(id), ATTND_ID_MAX);
    size_t n = json_string_length(id) + 1;
    if ((j->id = attnd_request_alloc(j, n)) == NULL)
      return attnd__dec_oom(d, "id");
    memcpy(j->id, json_string_value(id), n);
  }
  return attnd__dec_members(d, root, "", known);
}

/* The end of the JSON value at p, as far as its brackets and strings go:
 * the ',' or '}' after it at its own level, or `end`. */
static const char *skip_value(const char *p, const char *end) {
  int depth = 0, esc;
  for (; p < end; p++) {
    if (*p == '"') {
      if ((p = attnd__string_close(p, end, &esc)) == NULL)
        return end;
    } else if (*p == '[' || *p == '{')
      depth++;
    else if ((*p == ']' || *p == '}') && depth-- == 0)
      return p;
    else if (*p == ',' && depth == 0)
      return p;
  }
  return end;
}

static const char *skip_ws(const char *p, const char *end) {
  while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
    p++;
  return p;
}

/* The string whose text is [p, q] as jansson reads it, copied into err's
 * id when it has at most ATTND_ID_MAX bytes. */
static void text_id(const char *p, const char *q, attnd_error_t *err) {
  json_error_t je;
  int oom = 0;
  attnd__dec_tree_begin(); /* the value goes into the thread's arena */
  json_t *v = attnd__dec_parse(p, (size_t)(q + 1 - p), &je, &oom);
  if (json_is_string(v) && json_string_length(v) <= ATTND_ID_MAX &&
      strlen(json_string_value(v)) == json_string_length(v)) {
    err->has_id = 1;
    snprintf(err->id, sizeof err->id, "%s", json_string_value(v));
  }
  json_decref(v);
  attnd__dec_tree_end();
}

void attnd__dec_find_id(const char *body, size_t len, attnd_error_t *err) {
  const char *end = body + len, *p = skip_ws(body, end), *q;
  int esc;
  if (p == end || *p++ != '{')
    return;
  for (;;) {
    p = skip_ws(p, end);
    if (p == end || *p != '"' ||
        (q = attnd__string_close(p, end, &esc)) == NULL)
      return;
    int is_id = !esc && q - p == 3 && memcmp(p + 1, "id", 2) == 0;
    p = skip_ws(q + 1, end);
    if (p == end || *p++ != ':')
      return;
    p = skip_ws(p, end);
    if (is_id) {
      if (p < end && *p == '"' &&
          (q = attnd__string_close(p, end, &esc)) != NULL)
        text_id(p, q, err);
      return;
    }
    p = skip_value(p, end);
    if (p == end || *p++ != ',')
      return;
  }
}

int attnd__dec_keep_id(const attnd_request_t *j, attnd_error_t *err) {
  if (j && j->id) {
    err->has_id = 1;
    snprintf(err->id, sizeof err->id, "%s", j->id);
  }
  return -1;
}

/* timeout_ms, at most max_timeout_ms; the configured default where
 * absent. The same for /v1 and a session's step. */
static int decode_timeout(dec_t *d, const json_t *root) {
  attnd_request_t *j = d->req;
  int present;
  j->timeout_ms = d->cfg->default_timeout_ms;
  if (get_int(d, root, "timeout_ms", "timeout_ms", 1, INT64_MAX, &j->timeout_ms,
              &present) < 0)
    return -1;
  if (j->timeout_ms > d->cfg->max_timeout_ms)
    return E(d, ATTND_ERR_LIMIT_EXCEEDED, "timeout_ms",
             "timeout_ms %lld is over max_timeout_ms %lld",
             (long long)j->timeout_ms, (long long)d->cfg->max_timeout_ms);
  return 0;
}

const char *const attnd__dec_v1_members[] = {
    "id",        "layer",        "query",       "key",    "value",
    "num_heads", "num_kv_heads", "projections", "mask",   "scale",
    "softcap",   "rope",         "positions",   "return", "timeout_ms",
    "backend",   "precision",    NULL};

static int decode_root(dec_t *d, const json_t *root) {
  attnd_request_t *j = d->req;
  attn_params_t *p = &j->params;
  if (attnd__dec_root(d, root, attnd__dec_v1_members) < 0)
    return -1;
  int backend = ATTND_BACKEND_CONFIG, precision = ATTND_PRECISION_CONFIG;
  if (get_enum(d, root, "backend", "backend", attnd_backend_names, &backend) <
          0 ||
      get_enum(d, root, "precision", "precision", attnd_precision_names,
               &precision) < 0)
    return -1;
  j->backend = (attnd_backend_choice_t)backend;
  j->precision = (attnd_precision_choice_t)precision;

  if (decode_layer(d, root) < 0)
    return -1;
  const json_t *q = json_object_get(root, "query");
  if (q == NULL || json_is_null(q))
    return E(d, ATTND_ERR_MISSING_FIELD, "query", "query is required");
  if (attnd__dec_tensor(d, q, "query", K_FLOAT, &p->query, &d->query_form) < 0)
    return -1;
  const json_t *k = json_object_get(root, "key"),
               *v = json_object_get(root, "value");
  if (k && !json_is_null(k) &&
      attnd__dec_tensor(d, k, "key", K_FLOAT, &p->key, NULL) < 0)
    return -1;
  if (v && !json_is_null(v) &&
      attnd__dec_tensor(d, v, "value", K_FLOAT, &p->value, NULL) < 0)
    return -1;

  if (j->layer && attnd__dec_layer_widths(d) < 0)
    return -1;
  int64_t heads[2];
  int given[2];
  if (get_int(d, root, "num_heads", "num_heads", 1, INT64_MAX, &heads[0],
              &given[0]) < 0 ||
      get_int(d, root, "num_kv_heads", "num_kv_heads", 1, INT64_MAX, &heads[1],
              &given[1]) < 0)
    return -1;
  if (j->layer) {
    const int64_t layer_heads[2] = {j->layer->H, j->layer->Hkv};
    for (int h = 0; h < 2; h++)
      if (given[h] && heads[h] != layer_heads[h])
        return E(d, ATTND_ERR_HEADS_MISMATCH, h ? "num_kv_heads" : "num_heads",
                 "%s is %lld, but layer '%s' has %lld",
                 h ? "num_kv_heads" : "num_heads", (long long)heads[h],
                 j->layer->name, (long long)layer_heads[h]);
    heads[0] = layer_heads[0], heads[1] = layer_heads[1];
    given[0] = given[1] = 1;
  }
  if (!given[0])
    return E(d, ATTND_ERR_MISSING_FIELD, "num_heads",
             "num_heads is required (or a layer)");
  p->num_heads = heads[0];
  p->num_kv_heads = given[1] ? heads[1] : 0;
  if (p->num_heads > d->cfg->max_heads)
    return E(d, ATTND_ERR_LIMIT_EXCEEDED, "num_heads",
             "num_heads %lld is over max_heads %lld", (long long)p->num_heads,
             (long long)d->cfg->max_heads);

  if (decode_projections(d, root) < 0 || decode_mask(d, root) < 0 ||
      decode_rope(d, root) < 0 || decode_positions(d, root) < 0 ||
      get_number(d, root, "scale", &p->scale, &p->has_scale) < 0 ||
      get_softcap(d, root, p) < 0 || decode_return(d, root) < 0 ||
      decode_timeout(d, root) < 0)
    return -1;
  return attnd__dec_plan(d) < 0 ? -1 : attnd__dec_limits(d);
}

const char *const attnd__dec_step_members[] = {
    "id",      "query",     "key",    "value",      "mask",
    "scale",   "softcap",   "return", "timeout_ms", "expected_length",
    "backend", "precision", NULL};

/* A step of a session (session.h): the new tokens, as query (and, with
 * no layer or a cross-attention one, their key and value), and /v1's other
 * members that a step may set; the session gives the rest. Planned later, at
 * the step's turn (attnd_request_plan), when the cache's length is known. */
static int decode_step(dec_t *d, const json_t *root) {
  const attnd_session_shape_t *sh = d->step;
  attnd_request_t *j = d->req;
  attn_params_t *p = &j->params;
  int present;
  if (attnd__dec_root(d, root, attnd__dec_step_members) < 0)
    return -1;
  /* a step computes where its session's pages live, whatever the config's
   * backend; it may name that backend, and a precision for it */
  int backend = (int)sh->backend, precision = ATTND_PRECISION_CONFIG;
  if (get_enum(d, root, "backend", "backend", attnd_backend_names, &backend) <
          0 ||
      get_enum(d, root, "precision", "precision", attnd_precision_names,
               &precision) < 0)
    return -1;
  if (backend != (int)sh->backend)
    return E(d, ATTND_ERR_INVALID_VALUE, "backend",
             "backend is \"%s\", but this session's pages live on the %s "
             "backend (its create's \"backend\"): its steps compute there",
             attnd_backend_names[backend], attn_backend_kind_name(sh->backend));
  j->backend =
      sh->backend == ATTN_BACKEND_CUDA ? ATTND_BACKEND_CUDA : ATTND_BACKEND_CPU;
  j->precision = (attnd_precision_choice_t)precision;
  if (sh->layer) {
    d->layers = sh->layers;
    attnd__dec_use_layer(d, sh->layer);
  } else {
    p->rope = sh->rope;
  }
  p->num_heads = sh->H;
  p->num_kv_heads = sh->Hkv;
  p->causal = ATTN_CAUSAL_BOTTOM_RIGHT;
  const char *names[3] = {"query", "key", "value"};
  attn_tensor_t *ts[3] = {&p->query, &p->key, &p->value};
  const attnd_layer_t *l = sh->layer;
  int cross = l && attnd_layer_cross(l); /* key and value its own widths */
  int64_t widths[3] = {l ? l->E : sh->H * sh->Dh, l ? l->Ek : sh->Hkv * sh->Dh,
                       l ? l->Ev : sh->Hkv * sh->Dv};
  static const char *const whats[2][3] = {
      {"num_heads times the head width", "num_kv_heads times the head width",
       "num_kv_heads times the value head width"},
      {"hidden states of the layer's width", "keys of the layer's kdim",
       "values of the layer's vdim"}};
  for (int i = 0; i < 3; i++) {
    const json_t *v = json_object_get(root, names[i]);
    int given = v && !json_is_null(v);
    if (i && l && !cross && given)
      return E(d, ATTND_ERR_INVALID_VALUE, names[i],
               "%s cannot be given to a session of layer '%s': the new "
               "tokens' hidden states in query make their keys and values",
               names[i], l->name);
    if (i && l && !cross)
      continue;
    if (!given && cross)
      return E(d, ATTND_ERR_MISSING_FIELD, names[i],
               "%s is required in a step of a session of layer '%s', a "
               "cross-attention layer: the new tokens' %s [Lnew, %lld]",
               names[i], l->name, i == 1 ? "keys" : "values",
               (long long)widths[i]);
    if (!given)
      return E(d, ATTND_ERR_MISSING_FIELD, names[i], "%s is required%s",
               names[i],
               i ? " in a step of a session without a layer: the new "
                   "tokens' projected keys and values"
                 : ": the new tokens");
    if (attnd__dec_tensor(d, v, names[i], K_FLOAT, ts[i],
                          i ? NULL : &d->query_form) < 0)
      return -1;
    char shape[128];
    attnd_shape_text(shape, sizeof shape, ts[i]->rank, ts[i]->dim, ", ");
    if (ts[i]->rank != 2 || ts[i]->dim[1] != widths[i] ||
        (i && ts[i]->dim[0] != p->query.dim[0]))
      return E(d, ATTND_ERR_SHAPE_MISMATCH, names[i],
               "%s %s must be [%s, %lld]: %s", names[i], shape,
               i ? "the query's rows" : "the new tokens", (long long)widths[i],
               whats[l != NULL][i]);
  }
  if (decode_mask(d, root) < 0 ||
      get_number(d, root, "scale", &p->scale, &p->has_scale) < 0 ||
      get_softcap(d, root, p) < 0 || decode_return(d, root) < 0)
    return -1;
  j->expected_length = -1;
  if (get_int(d, root, "expected_length", "expected_length", 0, INT64_MAX,
              &j->expected_length, &present) < 0)
    return -1;
  return decode_timeout(d, root);
}

int attnd_request_plan(attnd_request_t *j, const attnd_config_t *cfg,
                       attnd_error_t *err) {
  dec_t d = {.req = j, .cfg = cfg, .err = err};
  return attnd__dec_plan(&d) < 0 ? -1 : attnd__dec_limits(&d);
}

/* Puts back into the tree under v the strings the bulk scanner lifted
 * that are no tensor data (bulk.h: in_tree), as jansson would have read
 * them. Returns 0, or -1 when out of memory. */
static int restore_strings(json_t *v, const attnd_bulk_set_t *bulk) {
  if (json_is_string(v)) {
    const attnd_bulk_t *b = attnd_bulk_string(bulk, json_string_value(v));
    return b && b->in_tree ? json_string_setn_nocheck(v, b->text, b->text_len)
                           : 0;
  }
  size_t i;
  const char *key;
  json_t *e;
  if (json_is_array(v))
    json_array_foreach(v, i, e) if (restore_strings(e, bulk) < 0) return -1;
  if (json_is_object(v))
    json_object_foreach(v, key, e) if (restore_strings(e, bulk) < 0) return -1;
  return 0;
}

/* Decodes `root` into the new request j; with `bulk`, placeholders stand
 * for its items. Returns 0, or -1 with *err set and *sure telling whether
 * the slow path would give the same error: it would after planning, and
 * unless an error about a bulk item's values was worded here (E_UNSURE). */
static int decode(attnd_request_t *j, const json_t *root,
                  attnd_bulk_set_t *bulk, const attnd_config_t *cfg,
                  attnd_layer_set_t *layers, const attnd_session_shape_t *step,
                  attnd_error_t *err, int *sure) {
  dec_t d = {.req = j,
             .cfg = cfg,
             .err = err,
             .bulk = bulk,
             .layers = layers,
             .step = step};
  int r = step ? decode_step(&d, root) : decode_root(&d, root);
  *sure = d.planning || !d.unsure;
  return r < 0 ? -1 : 0;
}

/* The fast path: big arrays of numbers, long base64 texts and other long
 * strings are lifted out of the text by the bulk scanner, and jansson
 * parses what is left; the other long strings are then put back into the
 * tree. The slow path has jansson parse everything. Both give the same
 * request, or the same error: when the fast path fails with an error the
 * slow path might word otherwise (decode's *sure), the slow path runs too;
 * and it runs when the skeleton does not parse, for jansson's error at its
 * place in the body. Both paths refuse,
 * first, a body whose JSON outside what the scanner lifts is over
 * max_json_structure_bytes: that is all jansson ever reads on the fast
 * path, and the bound on its time. A body the fast path refuses in words
 * the slow path might choose otherwise (a number past float32 in a tensor)
 * is parsed whole: in time linear in its bytes, within max_body_bytes,
 * about 13 times the fast path's (2026-12-05). */
static int decode_path(const char *body, size_t len, const attnd_config_t *cfg,
                       attnd_layer_set_t *layers,
                       const attnd_session_shape_t *step, int fast,
                       attnd_request_t **out, attnd_error_t *err) {
  double t0 = attnd_now_ms();
  int sure = 0, oom = 0, slow = !fast, r = -1;
  json_error_t je;
  attnd_bulk_set_t bulk;
  attnd_buf_t skel;
  char skel_mem[ATTND_DEC_SKELETON_INLINE];
  /* the request first: the scanner puts small arrays in its region */
  attnd_request_t *j = attnd_request_new();
  *out = NULL;
  if (j == NULL)
    return attnd_error_set(err, ATTND_ERR_OUT_OF_MEMORY, "",
                           "out of memory for a new request");
  attnd_bulk_set_init(&bulk, attnd__dec_nonce());
  bulk.array_keys = lifted_keys;
  bulk.arena = &j->arena;
  attnd_buf_init_in(&skel, skel_mem, sizeof skel_mem);
  attnd__dec_tree_begin();
  int over = 0, fault = 0;
  if (attnd_bulk_scan(body, len, ATTND_BULK_MIN_ELEMS, ATTND_BULK_MIN_STRING,
                      &bulk, &skel) < 0) {
    oom = 1;
  } else if ((over = (int64_t)(len - bulk.lifted_bytes) >
                     cfg->max_json_structure_bytes) ||
             fast) {
    fault = attnd__dec_fault(body, len, &bulk, &skel,
                             cfg->max_json_structure_bytes, &je, &oom);
  }
  if (oom) {
    ;
  } else if (fault > 0) {
    slow = 0;
    attnd_error_set(err, ATTND_ERR_INVALID_JSON, "",
                    "invalid JSON at line %d, column %d: %s", je.line,
                    je.column, je.text);
  } else if (over) {
    slow = 0;
    attnd_error_set(
        err, ATTND_ERR_PAYLOAD_TOO_LARGE, "",
        "the body has %zu bytes of JSON outside tensor data (arrays of "
        "numbers, base64 texts) and long strings, over "
        "max_json_structure_bytes %lld",
        len - bulk.lifted_bytes, (long long)cfg->max_json_structure_bytes);
  } else if (fast && bulk.n > 0) {
    json_t *root = attnd__dec_parse(skel.data, skel.len, &je, &oom);
    if (root && restore_strings(root, &bulk) < 0)
      oom = 1;
    else if (root)
      r = decode(j, root, &bulk, cfg, layers, step, err, &sure);
    json_decref(root);
    slow = !oom && r < 0 && !sure;
  } else {
    slow = 1;
  }
  attnd_buf_free(&skel);
  attnd_bulk_set_free(&bulk); /* the body outlives it: strings borrowed it */
  if (slow && !oom) {
    attnd__decode_slow_runs++;
    attnd_request_free(j); /* what the fast path put there goes with it */
    json_t *root = NULL;
    if ((j = attnd_request_new()) == NULL)
      oom = 1;
    else if ((root = attnd__dec_parse(body, len, &je, &oom)) != NULL)
      r = decode(j, root, NULL, cfg, layers, step, err, &sure);
    else if (!oom)
      attnd_error_set(err, ATTND_ERR_INVALID_JSON, "",
                      "invalid JSON at line %d, column %d: %s", je.line,
                      je.column, je.text);
    json_decref(root);
  }
  attnd__dec_tree_end();
  if (oom || r < 0) {
    if (!oom)
      attnd__dec_keep_id(j, err);
    attnd_request_free(j);
    if (!oom)
      return -1;
    attnd_error_set(err, ATTND_ERR_OUT_OF_MEMORY, "",
                    "out of memory parsing the request's JSON");
    attnd__dec_find_id(body, len, err); /* not parsed: read where it is */
    return -1;
  }
  j->t.decode_ms = attnd_now_ms() - t0;
  *out = j;
  return 0;
}

int attnd__request_decode_path(const char *body, size_t len,
                               const attnd_config_t *cfg,
                               attnd_layer_set_t *layers, int fast,
                               attnd_request_t **out, attnd_error_t *err) {
  return decode_path(body, len, cfg, layers, NULL, fast, out, err);
}

int attnd__step_decode_path(const char *body, size_t len,
                            const attnd_config_t *cfg,
                            const attnd_session_shape_t *shape, int fast,
                            attnd_request_t **out, attnd_error_t *err) {
  return decode_path(body, len, cfg, shape->layers, shape, fast, out, err);
}

int attnd_request_decode(const char *body, size_t len,
                         const attnd_config_t *cfg, attnd_layer_set_t *layers,
                         attnd_request_t **out, attnd_error_t *err) {
  return decode_path(body, len, cfg, layers, NULL, 1, out, err);
}

int attnd_step_decode(const char *body, size_t len, const attnd_config_t *cfg,
                      const attnd_session_shape_t *shape, attnd_request_t **out,
                      attnd_error_t *err) {
  return decode_path(body, len, cfg, shape->layers, shape, 1, out, err);
}
