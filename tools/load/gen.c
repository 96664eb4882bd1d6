/* tools/load/gen.c: see gen.h. */
#include "gen.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/buf.h"
#include "codec/util.h"
#include "v2.h"

/* Every number here comes from attnd_splitmix64. */

uint64_t load_gen_seed(uint64_t seed, int64_t length, int variant) {
  uint64_t s = seed;
  uint64_t a = attnd_splitmix64(&s) ^ (uint64_t)length;
  uint64_t b = attnd_splitmix64(&a) ^ (uint64_t)variant;
  return attnd_splitmix64(&b);
}

/* n floats uniform in [-amp, amp), rounded to `t` (finite: |x| < 1);
 * NULL when out of memory. */
static float *random_floats(uint64_t *state, size_t n, float amp,
                            attnd_dtype_t t) {
  float *x = malloc(n ? n * sizeof *x : 1);
  for (size_t i = 0; x && i < n; i++)
    x[i] = amp * (float)((double)(attnd_splitmix64(state) >> 11) *
                             (2.0 / 9007199254740992.0) -
                         1.0);
  if (x)
    attnd_dtype_round(t, x, n);
  return x;
}

int load_shape_layer(const load_shape_t *s) {
  return s->protocol == LOAD_V2 && s->model &&
         strcmp(s->model, LOAD_V2_GENERIC) != 0;
}

int load_gen_check(const load_shape_t *s, char *err, size_t n) {
  const struct {
    const char *name;
    int64_t v;
  } sizes[] = {{"--batch", s->B}, {"--lq", s->Lq},   {"--lk", s->Lk},
               {"--embed", s->E}, {"--heads", s->H}, {"--kv-heads", s->Hkv}};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
    if (sizes[i].v < 1) {
      snprintf(err, n, "%s is %lld; expected at least 1", sizes[i].name,
               (long long)sizes[i].v);
      return -1;
    }
  if (s->E % s->H) {
    snprintf(err, n, "--embed %lld is not a multiple of --heads %lld",
             (long long)s->E, (long long)s->H);
    return -1;
  }
  if (s->H % s->Hkv) {
    snprintf(err, n, "--kv-heads %lld does not divide --heads %lld",
             (long long)s->Hkv, (long long)s->H);
    return -1;
  }
  /* the largest tensor, the query or the key, must fit in memory at all */
  int64_t rows, elems;
  if (__builtin_mul_overflow(s->B, s->Lq > s->Lk ? s->Lq : s->Lk, &rows) ||
      __builtin_mul_overflow(rows, s->E, &elems) ||
      elems > (INT64_C(1) << 36)) {
    snprintf(err, n,
             "a tensor of --batch %lld x length %lld x --embed %lld is too "
             "large",
             (long long)s->B, (long long)(s->Lq > s->Lk ? s->Lq : s->Lk),
             (long long)s->E);
    return -1;
  }
  if (load_shape_layer(s) && s->projections) {
    snprintf(err, n,
             "--projections inline: model '%s' is a layer, with its own "
             "weights; inline projections are for model '%s'",
             s->model, LOAD_V2_GENERIC);
    return -1;
  }
  return 0;
}

/* Appends sep, then "name":<tensor> in the encoding and dtype of `s` (x
 * is rounded to it already). */
static void put_tensor(attnd_buf_t *b, const char *sep, const char *name,
                       const float *x, int rank, const int64_t *dim,
                       const load_shape_t *s) {
  attnd_buf_puts(b, sep);
  attnd_buf_puts(b, "\"");
  attnd_buf_puts(b, name);
  attnd_buf_puts(b, "\":");
  attnd_buf_tensor_as(b, s->encoding, s->dtype, x, rank, dim);
}

/* Appends the body of `r`, generated for `s`, to b. */
static void build_body(const load_shape_t *s, const load_request_t *r,
                       attnd_buf_t *b) {
  static const char *const wname[4] = {"q_weight", "k_weight", "v_weight",
                                       "o_weight"};
  static const char *const api_enc[] = {"nested", "flat", "base64"};
  const attn_params_t *p = &r->params;
  put_tensor(b, "{", "query", r->query, 3, p->query.dim, s);
  if (r->key) {
    put_tensor(b, ",", "key", r->key, 3, p->key.dim, s);
    put_tensor(b, ",", "value", r->value, 3, p->value.dim, s);
  }
  char num[160];
  snprintf(num, sizeof num, ",\"num_heads\":%lld,\"num_kv_heads\":%lld",
           (long long)s->H, (long long)s->Hkv);
  attnd_buf_puts(b, num);
  if (s->projections) {
    const attn_tensor_t *w[4] = {&p->q_weight, &p->k_weight, &p->v_weight,
                                 &p->o_weight};
    attnd_buf_puts(b, ",\"projections\":");
    for (int i = 0; i < 4; i++)
      put_tensor(b, i ? "," : "{", wname[i], r->weight[i], 2, w[i]->dim, s);
    attnd_buf_puts(b, "}");
  }
  attnd_buf_puts(b, ",\"mask\":{\"causal\":\"");
  attnd_buf_puts(b, load_causal_name(s->causal));
  attnd_buf_puts(b, "\"");
  if (s->key_lengths) {
    attnd_buf_puts(b, ",\"key_lengths\":[");
    for (int64_t i = 0; i < s->B; i++) {
      snprintf(num, sizeof num, "%s%lld", i ? "," : "",
               (long long)r->key_lengths[i]);
      attnd_buf_puts(b, num);
    }
    attnd_buf_puts(b, "]");
  }
  snprintf(num, sizeof num,
           "},\"return\":{\"weights\":\"%s\",\"encoding\":\"%s\","
           "\"metrics\":false",
           load_weights_name(s->weights), api_enc[s->encoding]);
  attnd_buf_puts(b, num);
  if (s->dtype != ATTND_DTYPE_F32)
    attnd_buf_printf(b, ",\"dtype\":\"%s\"", load_dtype_name(s->dtype));
  attnd_buf_puts(b, "}");
  if (s->timeout_ms > 0) {
    snprintf(num, sizeof num, ",\"timeout_ms\":%lld", (long long)s->timeout_ms);
    attnd_buf_puts(b, num);
  }
  attnd_buf_puts(b, "}");
}

int load_gen_request(const load_shape_t *s, uint64_t seed, int with_body,
                     load_request_t *r, char *err, size_t n) {
  memset(r, 0, sizeof *r);
  if (load_gen_check(s, err, n) < 0)
    return -1;
  const int64_t B = s->B, Lq = s->Lq, Lk = s->Lk, E = s->E, H = s->H,
                Hkv = s->Hkv, Dh = E / H;
  /* without projections, key and value carry Hkv heads of Dh features; a
   * layer projects the hidden states with its own weights */
  const int layer = load_shape_layer(s), proj = s->projections || layer;
  const int64_t Ekv = proj ? E : Hkv * Dh;
  const int send_kv = s->cross || Lq != Lk || Ekv != E;
  attn_params_t *p = &r->params;
  uint64_t st = seed;
  int oom = 0;

  /* pass 1: the tensors, drawn in a fixed order from one stream */
  r->query = random_floats(&st, (size_t)(B * Lq * E), 1.0f, s->dtype);
  p->query = (attn_tensor_t){r->query, 3, {B, Lq, E}};
  oom |= r->query == NULL;
  if (send_kv) {
    r->key = random_floats(&st, (size_t)(B * Lk * Ekv), 1.0f, s->dtype);
    r->value = random_floats(&st, (size_t)(B * Lk * Ekv), 1.0f, s->dtype);
    p->key = (attn_tensor_t){r->key, 3, {B, Lk, Ekv}};
    p->value = (attn_tensor_t){r->value, 3, {B, Lk, Ekv}};
    oom |= r->key == NULL || r->value == NULL;
  }
  if (proj) {
    /* a layer's weights are on the server: the plan here sees their
     * shapes, for the FLOP count, over a placeholder it never reads (and
     * nothing computes a layer's request here: verify refuses one) */
    static const float placeholder;
    const int64_t rows[4] = {E, Hkv * Dh, Hkv * Dh, E};
    attn_tensor_t *w[4] = {&p->q_weight, &p->k_weight, &p->v_weight,
                           &p->o_weight};
    for (int i = 0; i < 4; i++) {
      if (!layer)
        r->weight[i] = random_floats(&st, (size_t)(rows[i] * E),
                                     1.0f / sqrtf((float)E), s->dtype);
      *w[i] =
          (attn_tensor_t){layer ? &placeholder : r->weight[i], 2, {rows[i], E}};
      oom |= !layer && r->weight[i] == NULL;
    }
  }
  if (s->key_lengths) {
    r->key_lengths = malloc((size_t)B * sizeof *r->key_lengths);
    oom |= r->key_lengths == NULL;
    for (int64_t b = 0; r->key_lengths && b < B; b++)
      r->key_lengths[b] = 1 + (int64_t)(attnd_splitmix64(&st) % (uint64_t)Lk);
    p->key_lengths = (attn_tensor_t){r->key_lengths, 1, {B}};
  }
  if (oom) {
    snprintf(err, n,
             "out of memory for the tensors of B=%lld Lq=%lld "
             "Lk=%lld E=%lld",
             (long long)B, (long long)Lq, (long long)Lk, (long long)E);
    load_gen_free(r);
    return -1;
  }
  p->num_heads = H;
  p->num_kv_heads = Hkv;
  p->causal = s->causal;
  p->want_weights = s->weights == LOAD_WEIGHTS_PER_HEAD;
  p->want_mean_weights = s->weights == LOAD_WEIGHTS_MEAN;

  /* pass 2: the plan, for its checks and its FLOP count */
  attn_plan_t plan;
  attn_error_t ae;
  if (attn_plan_init(&plan, p, NULL, &ae) < 0) {
    snprintf(err, n, "the core rejects this shape: %s: %s", ae.field,
             ae.message);
    load_gen_free(r);
    return -1;
  }
  r->flops = plan.flops;
  r->tokens = B * Lq;

  /* pass 3: the body, compressed when asked */
  if (with_body) {
    attnd_buf_t b;
    attnd_buf_init(&b);
    if (s->protocol == LOAD_V2)
      load_v2_body(s, r, &b, &r->json_len);
    else
      build_body(s, r, &b);
    if (!b.oom && s->compress != ATTND_CODING_IDENTITY) {
      attnd_buf_t z;
      attnd_buf_init(&z);
      attnd_deflate(s->compress, b.data, b.len, &z);
      attnd_buf_free(&b);
      b = z;
    }
    if (b.oom) {
      attnd_buf_free(&b);
      snprintf(err, n, "out of memory for a request body");
      load_gen_free(r);
      return -1;
    }
    r->body = b.data;
    r->body_len = b.len;
  }
  return 0;
}

void load_gen_free(load_request_t *r) {
  free(r->query);
  free(r->key);
  free(r->value);
  for (int i = 0; i < 4; i++)
    free(r->weight[i]);
  free(r->key_lengths);
  free(r->body);
  memset(r, 0, sizeof *r);
}

const char *load_enc_name(attnd_form_t e) {
  static const char *const names[] = {"json", "flat", "base64"};
  return names[e];
}

const char *load_weights_name(load_weights_t w) {
  static const char *const names[] = {"none", "per_head", "mean"};
  return names[w];
}

const char *load_causal_name(attn_causal_t c) {
  static const char *const names[] = {"none", "bottom_right", "top_left"};
  return names[c];
}

const char *load_protocol_name(load_protocol_t p) {
  return p == LOAD_V2 ? "v2" : "v1";
}

const char *load_compress_name(attnd_coding_t c) {
  return c == ATTND_CODING_IDENTITY ? "none" : attnd_coding_name(c);
}

const char *load_dtype_name(attnd_dtype_t t) {
  static const char *const names[] = {"float32", "float16", "bfloat16"};
  return names[t];
}

const char *load_tensors_name(const load_shape_t *s) {
  if (s->protocol == LOAD_V2)
    return s->binary ? "binary" : "json";
  return load_enc_name(s->encoding);
}

const char *load_projections_name(const load_shape_t *s) {
  return load_shape_layer(s) ? "resident" : s->projections ? "inline" : "none";
}
