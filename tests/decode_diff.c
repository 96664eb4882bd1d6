/* tests/decode_diff.c: the decoder's two paths, compared. See
 * decode_diff.h. */
#include "decode_diff.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/session.h"

/* Whether tensors a and b hold the same shape and bytes. */
static int same_tensor(const attn_tensor_t *a, const attn_tensor_t *b,
                       size_t esize) {
  if (a->rank != b->rank || (a->data == NULL) != (b->data == NULL))
    return 0;
  size_t n = 1;
  for (int i = 0; i < a->rank; i++) {
    if (a->dim[i] != b->dim[i])
      return 0;
    n *= (size_t)a->dim[i];
  }
  return a->data == NULL || memcmp(a->data, b->data, n * esize) == 0;
}

/* Bit for bit, so that 0 and -0 differ. */
static int same_float(float a, float b) {
  return memcmp(&a, &b, sizeof a) == 0;
}

const char *decode_request_diff(const attnd_request_t *a,
                                const attnd_request_t *b) {
  const attn_params_t *p = &a->params, *q = &b->params;
  const struct {
    const char *name;
    const attn_tensor_t *x, *y;
    size_t esize;
  } t[] = {
      {"query", &p->query, &q->query, 4},
      {"key", &p->key, &q->key, 4},
      {"value", &p->value, &q->value, 4},
      {"projections.q_weight", &p->q_weight, &q->q_weight, 4},
      {"projections.k_weight", &p->k_weight, &q->k_weight, 4},
      {"projections.v_weight", &p->v_weight, &q->v_weight, 4},
      {"projections.o_weight", &p->o_weight, &q->o_weight, 4},
      {"projections.q_bias", &p->q_bias, &q->q_bias, 4},
      {"projections.k_bias", &p->k_bias, &q->k_bias, 4},
      {"projections.v_bias", &p->v_bias, &q->v_bias, 4},
      {"projections.o_bias", &p->o_bias, &q->o_bias, 4},
      {"mask.key_lengths", &p->key_lengths, &q->key_lengths, 8},
      {"mask.allow", &p->allow, &q->allow, 1},
      {"mask.bias", &p->bias, &q->bias, 4},
      {"mask.alibi (slopes)", &p->alibi_slopes, &q->alibi_slopes, 4},
      {"positions.query", &p->positions_query, &q->positions_query, 8},
      {"positions.key", &p->positions_key, &q->positions_key, 8},
  };
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
    if (!same_tensor(t[i].x, t[i].y, t[i].esize))
      return t[i].name;
  if ((a->id == NULL) != (b->id == NULL) || (a->id && strcmp(a->id, b->id)))
    return "id";
  if (p->num_heads != q->num_heads || p->num_kv_heads != q->num_kv_heads)
    return "num_heads or num_kv_heads";
  if (p->causal != q->causal || p->alibi != q->alibi)
    return "mask.causal or mask.alibi";
  if (p->has_window_left != q->has_window_left ||
      p->window_left != q->window_left ||
      p->has_window_right != q->has_window_right ||
      p->window_right != q->window_right)
    return "mask.window";
  if (p->has_scale != q->has_scale || !same_float(p->scale, q->scale) ||
      p->has_softcap != q->has_softcap || !same_float(p->softcap, q->softcap))
    return "scale or softcap";
  if (p->want_weights != q->want_weights ||
      p->want_mean_weights != q->want_mean_weights ||
      p->want_head_outputs != q->want_head_outputs ||
      a->weights_mode != b->weights_mode || a->encoding != b->encoding ||
      a->want_metrics != b->want_metrics)
    return "a return member";
  if (a->timeout_ms != b->timeout_ms)
    return "timeout_ms";
  if (memcmp(&p->rope, &q->rope, sizeof p->rope) != 0)
    return "rope";
  if (memcmp(&p->reduce, &q->reduce, sizeof p->reduce) != 0)
    return "return.weights (reductions)";
  if (a->layer != b->layer)
    return "layer";
  if (a->expected_length != b->expected_length)
    return "expected_length";
  return NULL;
}

/* "200" or "<status> <code> (<field>): <message>", for `why`. */
static void outcome(char *s, size_t n, int r, const attnd_error_t *e) {
  if (r == 0)
    snprintf(s, n, "200");
  else
    snprintf(s, n, "%d %s (%s): %s", attnd_error_status(e->code),
             attnd_error_name(e->code), e->field, e->message);
}

static attnd_layer_set_t *diff_layers;

void decode_diff_set_layers(attnd_layer_set_t *layers) {
  diff_layers = layers;
}

/* Both paths of a request's body (shape NULL) or of a step's. */
static int diff(const char *body, size_t len, const attnd_config_t *cfg,
                const attnd_session_shape_t *shape, char *why, size_t n) {
  attnd_request_t *req[2] = {NULL, NULL};
  attnd_error_t err[2];
  int r[2], ret = 0;
  for (int fast = 0; fast < 2; fast++) {
    memset(&err[fast], 0, sizeof err[fast]);
    r[fast] = shape ? attnd__step_decode_path(body, len, cfg, shape, fast,
                                              &req[fast], &err[fast])
                    : attnd__request_decode_path(body, len, cfg, diff_layers,
                                                 fast, &req[fast], &err[fast]);
  }
  if ((r[0] < 0 && err[0].code == ATTND_ERR_OUT_OF_MEMORY) ||
      (r[1] < 0 && err[1].code == ATTND_ERR_OUT_OF_MEMORY)) {
    /* not a property of the body */
  } else if (r[0] == 0 && r[1] == 0) {
    const char *d = decode_request_diff(req[0], req[1]);
    if (d) {
      snprintf(why, n, "both paths decode, but %s differs", d);
      ret = -1;
    }
  } else if (r[0] != r[1] || err[0].code != err[1].code ||
             strcmp(err[0].field, err[1].field) != 0 ||
             strcmp(err[0].message, err[1].message) != 0) {
    char a[640], b[640];
    outcome(a, sizeof a, r[0], &err[0]);
    outcome(b, sizeof b, r[1], &err[1]);
    snprintf(why, n, "jansson alone: %s; fast path: %s", a, b);
    ret = -1;
  }
  attnd_request_free(req[0]);
  attnd_request_free(req[1]);
  return ret;
}

int decode_diff(const char *body, size_t len, const attnd_config_t *cfg,
                char *why, size_t n) {
  return diff(body, len, cfg, NULL, why, n);
}

int step_decode_diff(const char *body, size_t len, const attnd_config_t *cfg,
                     const attnd_session_shape_t *shape, char *why, size_t n) {
  return diff(body, len, cfg, shape, why, n);
}

const char *const bad_array_tokens[N_BAD_ARRAY_TOKENS] = {
    "NaN",   "Infinity", "-Infinity", "nope", "1e", "-",  "1.",
    "1.5.5", "01",       "2 3",       "tru",  "]",  NULL,
};

char *bad_array_body(const char *head, int n, int at, const char *token,
                     const char *tail, size_t *len) {
  size_t cap = strlen(head) + strlen(tail) + (size_t)n * 6 +
               (token ? strlen(token) : 0) + 16;
  char *b = malloc(cap), *p = b;
  if (b == NULL)
    abort();
  p += sprintf(p, "%s[", head);
  for (int i = 0; i <= n; i++) {
    if (i == at && token == NULL)
      break;
    if (i == n && at != n)
      break;
    if (i > 0)
      p += sprintf(p, i % 8 ? "," : ",\n");
    p += sprintf(p, "%s", i == at ? token : "0.25");
  }
  if (token)
    p += sprintf(p, "]%s", tail);
  *len = (size_t)(p - b);
  return b;
}

int json_error_reference(const char *body, size_t len, char *msg, size_t n) {
  json_error_t je;
  json_t *root =
      json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
  if (root) {
    json_decref(root);
    return -1;
  }
  snprintf(msg, n, "invalid JSON at line %d, column %d: %s", je.line, je.column,
           je.text);
  return 0;
}
