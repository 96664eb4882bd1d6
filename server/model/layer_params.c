/* server/model/layer_params.c: a layer's parameters (pass 4 of layers.c's
 * load): head counts, head sizes and rope from config.json, then the
 * __metadata__ of the file that holds the query weight, then the
 * convention's defaults, each checked against the tensors' shapes. See
 * layer_build.h. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/util.h"
#include "model/layer_build.h"

/* config.json's value of key (NULL key or a JSON null: absent). */
json_t *attnd__config_get(const build_t *b, const char *key) {
  json_t *v =
      key && b->src->config ? json_object_get(b->src->config, key) : NULL;
  return json_is_null(v) ? NULL : v;
}

const char *attnd__meta_get(const build_t *b, const char *key) {
  return key ? attnd_st_meta(b->st, key) : NULL;
}

/* A parameter from config.json's cfg (or cfg2), else the metadata's meta:
 * with `n`, a positive integer into *n; without, a finite number into *x.
 * Returns FROM_*, or -1 with the message when a value is not one. */
static int param(build_t *b, const char *cfg, const char *cfg2,
                 const char *meta, int64_t *n, double *x) {
  const char *key = cfg;
  json_t *v = attnd__config_get(b, key);
  if (!v && (v = attnd__config_get(b, cfg2)))
    key = cfg2;
  if (v) {
    if (n ? !json_is_integer(v) || json_integer_value(v) < 1
          : !json_is_number(v) || !isfinite(json_number_value(v)))
      return attnd__layer_fail(b, "%s: '%s' must be %s", b->src->config_path,
                               key, n ? "a positive integer" : "a number");
    if (n)
      *n = json_integer_value(v);
    else
      *x = json_number_value(v);
    return FROM_CONFIG;
  }
  const char *s = attnd__meta_get(b, meta);
  if (!s)
    return FROM_NONE;
  char *end;
  errno = 0;
  long long i = n ? strtoll(s, &end, 10) : 0;
  double f = n ? 0 : strtod(s, &end);
  if (end == s || *end || errno || (n ? i < 1 : !isfinite(f)))
    return attnd__layer_fail(b, "__metadata__ '%s' is '%s', not %s", meta, s,
                             n ? "a positive integer" : "a finite number");
  if (n)
    *n = i;
  else
    *x = f;
  return FROM_META;
}

static int param_int(build_t *b, const char *cfg, const char *cfg2,
                     const char *meta, int64_t *out) {
  return param(b, cfg, cfg2, meta, out, NULL);
}

int attnd__param_num(build_t *b, const char *cfg, const char *meta,
                     double *out) {
  return param(b, cfg, NULL, meta, NULL, out);
}

const char *attnd__param_where(const build_t *b, int from, const char *key,
                               char *buf, size_t n) {
  if (from == FROM_CONFIG)
    snprintf(buf, n, "%s: '%s'", b->src->config_path, key);
  else if (from == FROM_META)
    snprintf(buf, n, "__metadata__ '%s'", key);
  else
    snprintf(buf, n, "%s", key);
  return buf;
}

/* Where a missing parameter was looked for, for the refusal. */
static const char *config_absence(const build_t *b, char *buf, size_t n) {
  if (b->src->config)
    snprintf(buf, n, "%s has no", b->src->config_path);
  else if (b->src->is_dir)
    snprintf(buf, n, "%s has no config.json, so no", b->src->path);
  else
    snprintf(buf, n,
             "a file path reads no config.json (list its directory "
             "to read one), so no");
  return buf;
}

/* A number member of a rope_scaling object, required. */
static int scaling_num(build_t *b, json_t *s, const char *where,
                       const char *key, double *out) {
  json_t *v = json_object_get(s, key);
  if (!json_is_number(v) || !isfinite(json_number_value(v)))
    return attnd__layer_fail(b, "%s rope_scaling: '%s' must be a number", where,
                             key);
  *out = json_number_value(v);
  return 0;
}

/* rope_scaling: {"type" or "rope_type": "default" | "linear" (factor) |
 * "llama3" (factor, low_freq_factor, high_freq_factor,
 * original_max_position_embeddings)}. */
static int parse_scaling(build_t *b, json_t *s, const char *where,
                         attn_rope_t *r) {
  if (!json_is_object(s))
    return attnd__layer_fail(b, "%s rope_scaling must be an object or null",
                             where);
  json_t *t = json_object_get(s, "rope_type");
  if (!t)
    t = json_object_get(s, "type");
  const char *type = json_string_value(t);
  if (!type)
    return attnd__layer_fail(
        b, "%s rope_scaling has no \"type\" or \"rope_type\"", where);
  if (strcmp(type, "default") == 0)
    return 0;
  if (strcmp(type, "linear") == 0) {
    r->scaling = ATTN_ROPE_SCALING_LINEAR;
  } else if (strcmp(type, "llama3") == 0) {
    r->scaling = ATTN_ROPE_SCALING_LLAMA3;
    if (scaling_num(b, s, where, "low_freq_factor", &r->low_freq_factor) < 0 ||
        scaling_num(b, s, where, "high_freq_factor", &r->high_freq_factor) <
            0 ||
        scaling_num(b, s, where, "original_max_position_embeddings",
                    &r->original_max_position) < 0)
      return -1;
    if (!(r->low_freq_factor > 0) ||
        !(r->high_freq_factor > r->low_freq_factor) ||
        !(r->original_max_position > 0))
      return attnd__layer_fail(
          b,
          "%s rope_scaling: llama3 needs low_freq_factor > 0, "
          "high_freq_factor > low_freq_factor and "
          "original_max_position_embeddings > 0 (got %g, %g, "
          "%g)",
          where, r->low_freq_factor, r->high_freq_factor,
          r->original_max_position);
  } else {
    return attnd__layer_fail(
        b,
        "%s rope_scaling type '%s' is not supported (linear, "
        "llama3)",
        where, type);
  }
  if (scaling_num(b, s, where, "factor", &r->factor) < 0)
    return -1;
  if (!(r->factor >= 1))
    return attnd__layer_fail(b, "%s rope_scaling: factor must be >= 1, got %g",
                             where, r->factor);
  return 0;
}

/* Rotary embeddings. Llama: HALF, config.json's rope_theta (10000),
 * partial_rotary_factor and rope_scaling first. Any convention: the
 * metadata's rope_theta, rope_dims, rope_style ("half", "interleaved",
 * "none") and rope_scaling (the JSON text of config.json's object); for
 * the others, any of them turns rope on. */
int attnd__resolve_rope(build_t *b, int llama) {
  attn_rope_t *r = &b->l.rope;
  int64_t Dh = b->l.Dh;
  const char *style = attnd__meta_get(b, "rope_style");
  const char *scaling_text = attnd__meta_get(b, "rope_scaling");
  r->style = ATTN_ROPE_NONE;
  if (llama || attnd__meta_get(b, "rope_theta") ||
      attnd__meta_get(b, "rope_dims") || style || scaling_text)
    r->style = ATTN_ROPE_HALF;
  if (style && strcmp(style, "half") != 0) {
    if (strcmp(style, "interleaved") == 0)
      r->style = ATTN_ROPE_INTERLEAVED;
    else if (strcmp(style, "none") == 0)
      r->style = ATTN_ROPE_NONE;
    else
      return attnd__layer_fail(b,
                               "__metadata__ 'rope_style' is '%s', not half, "
                               "interleaved or none",
                               style);
  }
  if (r->style == ATTN_ROPE_NONE) {
    memset(r, 0, sizeof *r);
    return 0;
  }

  r->theta = 10000;
  int from =
      attnd__param_num(b, llama ? "rope_theta" : NULL, "rope_theta", &r->theta);
  char where[512];
  if (from < 0)
    return -1;
  if (!(r->theta > 1))
    return attnd__layer_fail(
        b, "%s must be > 1, got %g",
        attnd__param_where(b, from, "rope_theta", where, sizeof where),
        r->theta);

  double factor;
  from = attnd__param_num(b, llama ? "partial_rotary_factor" : NULL, NULL,
                          &factor);
  if (from < 0)
    return -1;
  r->dims = Dh;
  if (from == FROM_CONFIG) { /* config.json's wins over the metadata's */
    if (!(factor > 0 && factor <= 1))
      return attnd__layer_fail(b,
                               "%s: partial_rotary_factor must be in (0, 1], "
                               "got %g",
                               b->src->config_path, factor);
    r->dims = (int64_t)((double)Dh * factor); /* as transformers truncates */
    if (r->dims < 2 || r->dims % 2)
      return attnd__layer_fail(
          b,
          "partial_rotary_factor %g of head_dim %lld rotates "
          "%lld features, not an even number >= 2",
          factor, (long long)Dh, (long long)r->dims);
  } else {
    if ((from = param_int(b, NULL, NULL, "rope_dims", &r->dims)) < 0)
      return -1;
    if (r->dims < 2 || r->dims % 2 || r->dims > Dh)
      return attnd__layer_fail(
          b,
          "rope would rotate %lld features (%s): they must be "
          "even, 2 .. head_dim %lld",
          (long long)r->dims,
          from == FROM_META ? "__metadata__ 'rope_dims'" : "head_dim",
          (long long)Dh);
  }

  json_t *s = llama ? attnd__config_get(b, "rope_scaling") : NULL;
  if (s)
    return parse_scaling(b, s, b->src->config_path, r);
  if (scaling_text) {
    json_error_t jerr;
    s = json_loads(scaling_text, JSON_DECODE_ANY, &jerr);
    if (!s)
      return attnd__layer_fail(b, "__metadata__ 'rope_scaling' is not JSON: %s",
                               jerr.text);
    int rc = json_is_null(s) ? 0 : parse_scaling(b, s, "__metadata__", r);
    json_decref(s);
    return rc;
  }
  return 0;
}

/* The head counts, checked against every shape: H divides q's rows
 * (Dh = rows / H, agreeing with head_dim), Hkv divides H and k has Hkv·Dh
 * rows, v Hkv·Dv, o H·Dv columns. */
int attnd__resolve_heads(build_t *b) {
  attnd_layer_t *l = &b->l;
  part_t *q = &b->part[Q_W], *k = &b->part[K_W], *v = &b->part[V_W],
         *o = &b->part[O_W];
  char where[512];
  int from = param_int(b, "num_attention_heads", "n_head", "num_heads", &l->H);
  if (from < 0)
    return -1;
  if (from == FROM_NONE)
    return attnd__layer_fail(
        b,
        "no head count: %s num_attention_heads (or n_head) "
        "and the file's __metadata__ no num_heads",
        config_absence(b, where, sizeof where));
  if (q->out % l->H)
    return attnd__layer_fail(
        b,
        "num_attention_heads %lld does not divide the %lld "
        "rows of the query weight '%s'",
        (long long)l->H, (long long)q->out, q->e->t->name);
  l->Dh = q->out / l->H;
  int64_t head_dim;
  if ((from = param_int(b, "head_dim", NULL, "head_dim", &head_dim)) < 0)
    return -1;
  if (from != FROM_NONE && head_dim != l->Dh)
    return attnd__layer_fail(
        b,
        "head_dim %lld disagrees with the query weight '%s': "
        "%lld rows / %lld heads = %lld",
        (long long)head_dim, q->e->t->name, (long long)q->out, (long long)l->H,
        (long long)l->Dh);
  l->Hkv = l->H;
  if (param_int(b, "num_key_value_heads", NULL, "num_kv_heads", &l->Hkv) < 0)
    return -1;
  if (l->H % l->Hkv)
    return attnd__layer_fail(b,
                             "num_key_value_heads %lld does not divide "
                             "num_attention_heads %lld",
                             (long long)l->Hkv, (long long)l->H);
  if (k->out != l->Hkv * l->Dh)
    return attnd__bad_shape(
        b, k->e, "%lld %s (num_key_value_heads %lld × head_dim %lld)",
        (long long)(l->Hkv * l->Dh), k->transposed ? "columns" : "rows",
        (long long)l->Hkv, (long long)l->Dh);
  if (v->out % l->Hkv)
    return attnd__bad_shape(
        b, v->e, "a multiple of num_key_value_heads %lld %s", (long long)l->Hkv,
        v->transposed ? "columns" : "rows");
  l->Dv = v->out / l->Hkv;
  int64_t o_in;
  if (__builtin_mul_overflow(l->H, l->Dv, &o_in) || o->in != o_in)
    return attnd__bad_shape(
        b, o->e,
        "%lld %s (num_attention_heads %lld × value head dim "
        "%lld)",
        (long long)o_in, o->transposed ? "rows" : "columns", (long long)l->H,
        (long long)l->Dv);
  l->Eo = o->out;
  return 0;
}

/* A stored weight: a non-empty matrix of a float dtype. */

/* The layer's index in its model: the last component of its prefix that
 * is a decimal number ("model.layers.12." gives 12), or -1. */
static int64_t layer_index(const build_t *b) {
  int64_t index = -1;
  const char *p = b->prefix, *end = b->prefix + b->plen;
  while (p < end) {
    const char *dot = memchr(p, '.', (size_t)(end - p));
    if (!dot)
      dot = end;
    size_t n = (size_t)(dot - p);
    if (n >= 1 && n <= 9 && strspn(p, "0123456789") >= n) {
      index = 0;
      for (size_t i = 0; i < n; i++)
        index = index * 10 + (p[i] - '0');
    }
    p = dot + 1;
  }
  return index;
}

/* Whether config.json's layer_types marks layer `index` as sliding: 1
 * sliding, 0 full, -1 with the message (not an array of the two words, no
 * entry at index, or an index needed that the name does not give). */
static int layer_type_sliding(build_t *b, const json_t *types, int64_t index) {
  const char *where = b->src->config_path;
  size_t n = json_array_size(types);
  if (!json_is_array(types) || n == 0)
    return attnd__layer_fail(
        b, "%s: 'layer_types' must be a non-empty array of strings", where);
  size_t i = b->src->types_bad; /* the source read the entries once */
  const int *any = b->src->types_any;
  if (i < n) {
    const char *t = json_string_value(json_array_get(types, i));
    return attnd__layer_fail(
        b,
        "%s: 'layer_types'[%zu] is %s%s%s; only \"full_attention\" and "
        "\"sliding_attention\" are supported",
        where, i, t ? "\"" : "", t ? t : "not a string", t ? "\"" : "");
  }
  if (index >= 0 && (size_t)index >= n)
    return attnd__layer_fail(b,
                             "%s: 'layer_types' has %zu entries, none for "
                             "layer index %lld",
                             where, n, (long long)index);
  if (!(any[0] && any[1])) /* one kind: no index needed */
    return any[1];
  if (index < 0)
    return attnd__layer_fail(
        b,
        "%s: 'layer_types' mixes full and sliding attention, and the "
        "layer's name gives no index to choose by",
        where);
  return strcmp(json_string_value(json_array_get(types, (size_t)index)),
                "sliding_attention") == 0;
}

/* A sliding window from config.json (Llama family), as transformers reads
 * it: Qwen2 and Qwen3 (model_type qwen2*, qwen3*) only with
 * use_sliding_window true, in the layers of index >= max_window_layers
 * (28 when absent); Mistral, Mixtral, Phi-3 and StarCoder2 (and a config
 * that names no model_type) in every layer; Llama never (its
 * transformers ignores the key). Its size is sliding_window, 4096 when
 * absent from a Qwen or Mistral config, none when null; layer_types, where
 * given (Mistral's transformers ignores it), picks the layer's kind by its
 * index instead. Another model_type with a window and no layer_types is
 * refused: which of its layers take the window is its own rule (Gemma 2
 * alternates), which attnd does not know. Without config.json, and in the
 * other conventions, the file's __metadata__ 'sliding_window' (a positive
 * integer) where it has one. Window W: query i sees keys i − W + 1 … i, W
 * of them. */
int attnd__resolve_window(build_t *b, int llama) {
  const json_t *cfg = b->src->config;
  const char *where = b->src->config_path;
  b->l.window = 0;
  if (!llama || !cfg)
    return param_int(b, NULL, NULL, "sliding_window", &b->l.window) < 0 ? -1
                                                                        : 0;
  const char *type = json_string_value(json_object_get(cfg, "model_type"));
  int qwen = type && (!strncmp(type, "qwen2", 5) || !strncmp(type, "qwen3", 5));
  int mistral = type && !strcmp(type, "mistral");
  int every = !type || mistral || !strcmp(type, "mixtral") ||
              !strcmp(type, "phi3") || !strcmp(type, "starcoder2");
  if (type && !strcmp(type, "llama"))
    return 0;
  json_t *use = json_object_get(cfg, "use_sliding_window");
  if (qwen && use && !json_is_boolean(use))
    return attnd__layer_fail(
        b, "%s: 'use_sliding_window' must be true or false", where);
  if (qwen && !json_is_true(use))
    return 0;
  json_t *size = json_object_get(cfg, "sliding_window");
  int64_t w = 0;
  if (!size)
    w = qwen || mistral ? 4096 : 0;
  else if (json_is_integer(size) && json_integer_value(size) >= 1)
    w = json_integer_value(size);
  else if (!json_is_null(size))
    return attnd__layer_fail(
        b, "%s: 'sliding_window' must be a positive integer or null", where);
  if (w == 0)
    return 0;
  int64_t index = layer_index(b);
  json_t *types = mistral ? NULL : attnd__config_get(b, "layer_types");
  int sliding = 1;
  if (types) {
    sliding = layer_type_sliding(b, types, index);
  } else if (qwen) {
    json_t *m = json_object_get(cfg, "max_window_layers");
    int64_t full = 28; /* transformers' default */
    if (m && !(json_is_integer(m) && json_integer_value(m) >= 0))
      return attnd__layer_fail(
          b, "%s: 'max_window_layers' must be an integer >= 0", where);
    if (m)
      full = json_integer_value(m);
    json_t *nl = json_object_get(cfg, "num_hidden_layers");
    int64_t layers = json_is_integer(nl) ? json_integer_value(nl) : -1;
    if (full > 0 && index < 0 && (layers < 0 || full < layers))
      return attnd__layer_fail(
          b,
          "%s: 'max_window_layers' %lld makes the window depend on the "
          "layer's index, and the layer's name gives none",
          where, (long long)full);
    sliding = full == 0 || (index >= full && (layers < 0 || full < layers));
  } else if (!every) {
    return attnd__layer_fail(
        b,
        "%s: model_type '%s' sets 'sliding_window' %lld, and attnd does not "
        "know which of its layers take it; give 'layer_types', or "
        "'sliding_window' null",
        where, type, (long long)w);
  }
  if (sliding < 0)
    return -1;
  b->l.window = sliding ? w : 0;
  return 0;
}
