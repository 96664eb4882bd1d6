/* tests/check_layers.c: attention layers loaded from safetensors files
 * (server/model/layers.h).
 *
 * Files are written by tests/layer_files.c in each convention (torch_mha
 * stacked and split, BERT, Llama, GPT-2) and dtype (F32, F16, BF16, F64),
 * with config.json and __metadata__ variants, shards and indexes. Every
 * field of every layer is checked, the weights bit for bit against what was
 * written (after rounding to the dtype, the split and the transposition);
 * every refusal by the content of its message. A cross-attention layer
 * (kdim, vdim ≠ embed_dim) is also run through the core and compared with
 * the float64 reference (tests/ref.c) of the weights written. Each test
 * works in a fresh directory under /tmp. */
#include <check.h>
#include <ftw.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "codec/buf.h"
#include "codec/half.h"
#include "codec/util.h"
#include "layer_files.h"
#include "model/layer_build.h"
#include "model/layers.h"
#include "ref.h"
#include "suite.h"
#include "testutil.h"

/* ---- fixture: a temporary directory -------------------------------------- */

static char tmp[64];

static void tmp_make(void) {
  strcpy(tmp, "/tmp/attnd-layers-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(tmp));
}

static int rm_one(const char *path, const struct stat *sb, int flag,
                  struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(path);
}

static void tmp_remove(void) {
  nftw(tmp, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* tmp/<formatted name>, in one of 16 rotating buffers. */
static const char *at(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
static const char *at(const char *fmt, ...) {
  static char bufs[16][512];
  static int next;
  char *p = bufs[next++ % 16];
  int n = snprintf(p, 512, "%s/", tmp);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(p + n, 512 - (size_t)n, fmt, ap);
  va_end(ap);
  return p;
}

static void mkdir_at(const char *path) {
  ck_assert_int_eq(mkdir(path, 0755), 0);
}

static void text_at(const char *path, const char *text) {
  ck_assert_int_eq(lf_write_text(path, text), 0);
}

/* ---- helpers ------------------------------------------------------------- */

/* lf_write, asserted; meta is key, value, ..., NULL. */
static void write_layer(const char *path, lf_convention_t conv,
                        attnd_st_dtype_t dtype, const char *prefix,
                        const lf_shape_t *s, uint64_t seed,
                        const char *const *meta, lf_weights_t *w) {
  char msg[512];
  ck_assert_msg(lf_write(path, conv, dtype, prefix, s, seed, meta, w, msg,
                         sizeof msg) == 0,
                "%s", msg);
}

static void add_layer(lf_file_t *f, lf_convention_t conv,
                      attnd_st_dtype_t dtype, const char *prefix,
                      const lf_shape_t *s, uint64_t seed, lf_weights_t *w) {
  char msg[512];
  ck_assert_msg(
      lf_add_layer(f, conv, dtype, prefix, s, seed, w, msg, sizeof msg) == 0,
      "%s", msg);
}

static void write_file(const lf_file_t *f, const char *path) {
  char msg[512];
  ck_assert_msg(lf_file_write(f, path, msg, sizeof msg) == 0, "%s", msg);
}

static attnd_layer_set_t *load(const char *paths) {
  attnd_layer_set_t *set = NULL;
  char msg[2048] = "";
  ck_assert_msg(attnd_layers_load(paths, &set, msg, sizeof msg) == 0,
                "load '%s': %s", paths, msg);
  ck_assert_ptr_nonnull(set);
  return set;
}

/* The load fails, and its message holds every string of want. */
static void refused_(const char *paths, const char *const *want) {
  attnd_layer_set_t *set = (attnd_layer_set_t *)&set;
  char msg[2048] = "";
  ck_assert_int_eq(attnd_layers_load(paths, &set, msg, sizeof msg), -1);
  ck_assert_ptr_null(set);
  for (; *want; want++)
    ck_assert_msg(strstr(msg, *want), "message \"%s\" lacks \"%s\"", msg,
                  *want);
}
#define REFUSED(paths, ...)                                                    \
  refused_(paths, (const char *const[]){__VA_ARGS__, NULL})

static const attnd_layer_t *find(const attnd_layer_set_t *set,
                                 const char *name) {
  const attnd_layer_t *l = attnd_layer_set_find(set, name);
  ck_assert_msg(l != NULL, "no layer '%s'", name);
  return l;
}

/* got holds want[0..n) bit for bit, 64-byte aligned; or both are absent. */
static void same(const float *got, const float *want, int64_t n,
                 const char *what) {
  if (!want) {
    ck_assert_msg(got == NULL, "%s: present, expected absent", what);
    return;
  }
  ck_assert_msg(got != NULL, "%s: absent", what);
  ck_assert_msg((uintptr_t)got % 64 == 0, "%s: not 64-byte aligned", what);
  for (int64_t i = 0; i < n; i++)
    REQUIRE(memcmp(&got[i], &want[i], sizeof *got) == 0,
            "%s[%lld] = %.9g, expected %.9g", what, (long long)i,
            (double)got[i], (double)want[i]);
}

/* Every size and weight of l is w's. */
static void check_weights(const attnd_layer_t *l, const lf_weights_t *w) {
  const lf_shape_t *s = &w->shape;
  ck_assert_int_eq(l->E, s->E);
  ck_assert_int_eq(l->Ek, s->Ek);
  ck_assert_int_eq(l->Ev, s->Ev);
  ck_assert_int_eq(attnd_layer_cross(l), s->Ek != s->E || s->Ev != s->E);
  ck_assert_int_eq(l->H, s->H);
  ck_assert_int_eq(l->Hkv, s->Hkv);
  ck_assert_int_eq(l->Dh, s->Dh);
  ck_assert_int_eq(l->Dv, s->Dv);
  ck_assert_int_eq(l->Eo, s->Eo);
  int64_t q = s->H * s->Dh, k = s->Hkv * s->Dh, v = s->Hkv * s->Dv;
  same(l->q_weight, w->q_weight, q * s->E, "q_weight");
  same(l->k_weight, w->k_weight, k * s->Ek, "k_weight");
  same(l->v_weight, w->v_weight, v * s->Ev, "v_weight");
  same(l->o_weight, w->o_weight, s->Eo * s->H * s->Dv, "o_weight");
  same(l->q_bias, w->q_bias, q, "q_bias");
  same(l->k_bias, w->k_bias, k, "k_bias");
  same(l->v_bias, w->v_bias, v, "v_bias");
  same(l->o_bias, w->o_bias, s->Eo, "o_bias");
  same(l->q_norm, w->q_norm, s->Dh, "q_norm");
  same(l->k_norm, w->k_norm, s->Dh, "k_norm");
  ck_assert_uint_eq(l->bytes, w->bytes);
}

static void check_no_rope(const attnd_layer_t *l) {
  attn_rope_t none = {0};
  ck_assert_msg(memcmp(&l->rope, &none, sizeof none) == 0, "rope present");
}

static void check_rope(const attnd_layer_t *l, attn_rope_style_t style,
                       double theta, int64_t dims) {
  ck_assert_int_eq(l->rope.style, style);
  ck_assert_double_eq(l->rope.theta, theta);
  ck_assert_int_eq(l->rope.dims, dims);
}

/* ---- every convention in every dtype ------------------------------------- */

typedef struct conv_case {
  lf_convention_t lf;
  attnd_convention_t conv;
  const char *prefix, *name;
  lf_shape_t shape;
  attn_causal_t causal;
} conv_case_t;

static const conv_case_t CONV_CASES[] = {
    {LF_TORCH_MHA,
     ATTND_CONV_TORCH_MHA,
     "encoder.layers.0.self_attn.",
     "encoder.layers.0.self_attn",
     {.E = 32, .H = 4, .bias = LF_BIAS_ALL},
     ATTN_CAUSAL_NONE},
    {LF_TORCH_MHA,
     ATTND_CONV_TORCH_MHA,
     "blocks.2.mha.",
     "blocks.2.mha",
     {.E = 24, .H = 3},
     ATTN_CAUSAL_NONE},
    {LF_TORCH_MHA_SPLIT,
     ATTND_CONV_TORCH_MHA,
     "cross.",
     "cross",
     {.E = 32, .H = 2, .bias = LF_BIAS_ALL},
     ATTN_CAUSAL_NONE},
    /* cross-attention: kdim and vdim differ from embed_dim and each other,
     * with biases and without */
    {LF_TORCH_MHA_SPLIT,
     ATTND_CONV_TORCH_MHA,
     "decoder.layers.0.cross_attn.",
     "decoder.layers.0.cross_attn",
     {.E = 32, .H = 4, .Ek = 24, .Ev = 40, .bias = LF_BIAS_ALL},
     ATTN_CAUSAL_NONE},
    {LF_TORCH_MHA_SPLIT,
     ATTND_CONV_TORCH_MHA,
     "xattn.",
     "xattn",
     {.E = 16, .H = 2, .Ek = 12, .Ev = 20},
     ATTN_CAUSAL_NONE},
    /* Dh·H ≠ E, and Dv ≠ Dh: every width from the shapes */
    {LF_BERT,
     ATTND_CONV_BERT,
     "bert.encoder.layer.3.",
     "bert.encoder.layer.3.attention",
     {.E = 40, .H = 4, .Dh = 8, .Dv = 10, .Eo = 36, .bias = LF_BIAS_ALL},
     ATTN_CAUSAL_NONE},
    /* GQA with Qwen2's q, k, v biases and Qwen3's norms */
    {LF_LLAMA,
     ATTND_CONV_LLAMA,
     "model.layers.7.",
     "model.layers.7.self_attn",
     {.E = 48,
      .H = 6,
      .Hkv = 2,
      .Dh = 12,
      .bias = LF_BQ | LF_BK | LF_BV,
      .qk_norm = 1},
     ATTN_CAUSAL_BOTTOM_RIGHT},
    {LF_GPT2,
     ATTND_CONV_GPT2,
     "transformer.h.1.",
     "transformer.h.1.attn",
     {.E = 32, .H = 4, .bias = LF_BIAS_ALL},
     ATTN_CAUSAL_BOTTOM_RIGHT},
};
#define N_CONV_CASES (int)(sizeof CONV_CASES / sizeof *CONV_CASES)
static const attnd_st_dtype_t DTYPES[] = {ATTND_ST_F32, ATTND_ST_F16,
                                          ATTND_ST_BF16, ATTND_ST_F64};

START_TEST(test_conventions) {
  const conv_case_t *c = &CONV_CASES[_i / 4];
  attnd_st_dtype_t dtype = DTYPES[_i % 4];
  char heads[16], kv[16];
  snprintf(heads, sizeof heads, "%lld", (long long)c->shape.H);
  snprintf(kv, sizeof kv, "%lld",
           (long long)(c->shape.Hkv ? c->shape.Hkv : c->shape.H));
  /* num_kv_heads only where it is not the default */
  const char *meta[] = {"num_heads", heads,
                        c->shape.Hkv ? "num_kv_heads" : NULL, kv, NULL};
  const char *path = at("layer.safetensors");
  lf_weights_t w;
  write_layer(path, c->lf, dtype, c->prefix, &c->shape, 1000 + (uint64_t)_i,
              meta, &w);

  attnd_layer_set_t *set = load(path);
  ck_assert_uint_eq(attnd_layer_set_count(set), 1);
  const attnd_layer_t *l = attnd_layer_set_get(set, 0);
  ck_assert_ptr_eq(attnd_layer_set_find(set, c->name), l);
  ck_assert_str_eq(l->name, c->name);
  ck_assert_str_eq(l->file, path);
  ck_assert_int_eq(l->convention, c->conv);
  ck_assert_str_eq(l->file_dtype, attnd_st_dtype_name(dtype));
  check_weights(l, &w);
  ck_assert_int_eq(l->causal, c->causal);
  if (c->conv == ATTND_CONV_LLAMA) {
    check_rope(l, ATTN_ROPE_HALF, 10000, c->shape.Dh);
    ck_assert_int_eq(l->rope.scaling, ATTN_ROPE_SCALING_NONE);
  } else {
    check_no_rope(l);
  }
  ck_assert_float_eq(l->norm_eps, 1e-6f);
  ck_assert_uint_eq(attnd_layer_set_bytes(set), w.bytes);
  ck_assert(attnd_layer_set_load_seconds(set) >= 0);
  attnd_layer_set_unref(set);
  lf_weights_free(&w);
}
END_TEST

/* The relative tolerance of a layer's forward pass against tests/ref.c,
 * as ‖got − ref‖₂ / ‖ref‖₂: check_layer_api's and check_forward's. */
#define FWD_TOL 1e-5

/* A cross-attention layer (torch's q/k/v_proj_weight with kdim ≠ vdim ≠
 * embed_dim, H > 1), with biases (_i < 2) and without, in F32 and BF16:
 * loaded, then run by the core on query [B, Lq, E], key [B, Lk, Ek]
 * and value [B, Lk, Ev] with the weights as the set holds them, and
 * compared with the reference of the weights written. */
START_TEST(test_cross_forward) {
  lf_shape_t shape = {.E = 32, .H = 4, .Ek = 24, .Ev = 40};
  shape.bias = _i / 2 == 0 ? LF_BIAS_ALL : 0;
  attnd_st_dtype_t dtype = _i % 2 ? ATTND_ST_BF16 : ATTND_ST_F32;
  const char *meta[] = {"num_heads", "4", NULL};
  const char *path = at("cross.safetensors");
  lf_weights_t w;
  write_layer(path, LF_TORCH_MHA_SPLIT, dtype, "cross.", &shape,
              60 + (uint64_t)_i, meta, &w);
  attnd_layer_set_t *set = load(path);
  const attnd_layer_t *l = find(set, "cross");
  check_weights(l, &w);
  ck_assert(attnd_layer_cross(l));

  enum { B = 2, Lq = 3, Lk = 5 };
  const lf_shape_t *z = &w.shape;
  tu_rng_t r;
  tu_rng_seed(&r, 90 + (uint64_t)_i);
  float *q = tu_rand_floats(&r, (size_t)(B * Lq * z->E), 1.0f),
        *k = tu_rand_floats(&r, (size_t)(B * Lk * z->Ek), 1.0f),
        *v = tu_rand_floats(&r, (size_t)(B * Lk * z->Ev), 1.0f);
  int64_t qo = z->H * z->Dh, ko = z->Hkv * z->Dh, vo = z->Hkv * z->Dv;
  /* the layer as the set holds it: its own sizes, its own buffers */
  attn_params_t held = {.query = tu_t3(q, B, Lq, l->E),
                        .key = tu_t3(k, B, Lk, l->Ek),
                        .value = tu_t3(v, B, Lk, l->Ev),
                        .num_heads = l->H,
                        .num_kv_heads = l->Hkv,
                        .q_weight = tu_t2(l->q_weight, l->H * l->Dh, l->E),
                        .k_weight = tu_t2(l->k_weight, l->Hkv * l->Dh, l->Ek),
                        .v_weight = tu_t2(l->v_weight, l->Hkv * l->Dv, l->Ev),
                        .o_weight = tu_t2(l->o_weight, l->Eo, l->H * l->Dv),
                        .causal = l->causal,
                        .want_weights = 1};
  if (l->q_bias) {
    held.q_bias = tu_t1(l->q_bias, l->H * l->Dh);
    held.k_bias = tu_t1(l->k_bias, l->Hkv * l->Dh);
    held.v_bias = tu_t1(l->v_bias, l->Hkv * l->Dv);
  }
  if (l->o_bias)
    held.o_bias = tu_t1(l->o_bias, l->Eo);
  /* the reference: the weights written, at the shape written */
  attn_params_t want = held;
  want.q_weight = tu_t2(w.q_weight, qo, z->E);
  want.k_weight = tu_t2(w.k_weight, ko, z->Ek);
  want.v_weight = tu_t2(w.v_weight, vo, z->Ev);
  want.o_weight = tu_t2(w.o_weight, z->Eo, z->H * z->Dv);
  want.q_bias = w.q_bias ? tu_t1(w.q_bias, qo) : (attn_tensor_t){0};
  want.k_bias = w.k_bias ? tu_t1(w.k_bias, ko) : (attn_tensor_t){0};
  want.v_bias = w.v_bias ? tu_t1(w.v_bias, vo) : (attn_tensor_t){0};
  want.o_bias = w.o_bias ? tu_t1(w.o_bias, z->Eo) : (attn_tensor_t){0};
  ref_result_t ref;
  ck_assert_int_eq(ref_attention(&want, &ref), 0);
  tu_run_t run;
  ck_assert_int_eq(tu_run(&run, &held, NULL), 0);
  ck_assert_int_eq(run.plan.Ek, 24);
  ck_assert_int_eq(run.plan.Ev, 40);
  double e_out = tu_rel_err(run.o.out, ref.out, (size_t)(B * Lq * z->Eo)),
         e_w = tu_rel_err(run.o.weights, ref.weights,
                          (size_t)(B * z->H * Lq * Lk));
  ck_assert_msg(e_out <= FWD_TOL && e_w <= FWD_TOL,
                "%s, %s: output %g, weights %g from the reference",
                shape.bias ? "biases" : "no biases", attnd_st_dtype_name(dtype),
                e_out, e_w);
  tu_run_free(&run);
  ref_result_free(&ref);
  free(q), free(k), free(v);
  attnd_layer_set_unref(set);
  lf_weights_free(&w);
}
END_TEST

START_TEST(test_convention_names) {
  ck_assert_str_eq(attnd_convention_name(ATTND_CONV_TORCH_MHA), "torch_mha");
  ck_assert_str_eq(attnd_convention_name(ATTND_CONV_BERT), "bert");
  ck_assert_str_eq(attnd_convention_name(ATTND_CONV_LLAMA), "llama");
  ck_assert_str_eq(attnd_convention_name(ATTND_CONV_GPT2), "gpt2");
}
END_TEST

/* ---- config.json --------------------------------------------------------- */

/* Qwen3-style: GQA, head_dim over E/H, q_norm/k_norm, partial rotary and
 * llama3 scaling, all from config.json, which wins over __metadata__;
 * tensors of no layer ignored. */
START_TEST(test_config_qwen3) {
  const char *dir = at("qwen3");
  mkdir_at(dir);
  text_at(at("qwen3/config.json"),
          "{\"model_type\": \"qwen3\", \"hidden_size\": 64,\n"
          " \"num_attention_heads\": 8, \"num_key_value_heads\": 2,\n"
          " \"head_dim\": 16, \"rope_theta\": 1000000.0,\n"
          " \"rms_norm_eps\": 1e-05, \"partial_rotary_factor\": 0.5,\n"
          " \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0,\n"
          "   \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0,\n"
          "   \"original_max_position_embeddings\": 8192}}\n");
  lf_shape_t s = {.E = 64, .H = 8, .Hkv = 2, .Dh = 16, .qk_norm = 1};
  lf_file_t *f = lf_file_new();
  lf_weights_t w0, w1;
  add_layer(f, LF_LLAMA, ATTND_ST_BF16, "model.layers.0.", &s, 1, &w0);
  add_layer(f, LF_LLAMA, ATTND_ST_BF16, "model.layers.1.", &s, 2, &w1);
  int64_t emb[2] = {100, 64}, mlp[2] = {128, 64}, buf[1] = {4};
  ck_assert_int_eq(lf_add_tensor(f, "model.embed_tokens.weight", ATTND_ST_BF16,
                                 2, emb, NULL),
                   0);
  ck_assert_int_eq(lf_add_tensor(f, "model.layers.0.mlp.gate_proj.weight",
                                 ATTND_ST_BF16, 2, mlp, NULL),
                   0);
  ck_assert_int_eq(
      lf_add_tensor(f, "model.position_ids", ATTND_ST_I64, 1, buf, NULL), 0);
  ck_assert_int_eq(lf_meta(f, "num_heads", "4"), 0); /* config.json wins */
  ck_assert_int_eq(lf_meta(f, "rope_theta", "5"), 0);
  write_file(f, at("qwen3/model.safetensors"));
  lf_file_free(f);

  attnd_layer_set_t *set = load(dir);
  ck_assert_uint_eq(attnd_layer_set_count(set), 2);
  const lf_weights_t *ws[] = {&w0, &w1};
  for (size_t i = 0; i < 2; i++) {
    const attnd_layer_t *l = attnd_layer_set_get(set, i);
    char name[64];
    snprintf(name, sizeof name, "model.layers.%zu.self_attn", i);
    ck_assert_str_eq(l->name, name);
    ck_assert_str_eq(l->file, at("qwen3/model.safetensors"));
    check_weights(l, ws[i]);
    check_rope(l, ATTN_ROPE_HALF, 1e6, 8);
    ck_assert_int_eq(l->rope.scaling, ATTN_ROPE_SCALING_LLAMA3);
    ck_assert_double_eq(l->rope.factor, 8);
    ck_assert_double_eq(l->rope.low_freq_factor, 1);
    ck_assert_double_eq(l->rope.high_freq_factor, 4);
    ck_assert_double_eq(l->rope.original_max_position, 8192);
    ck_assert_float_eq(l->norm_eps, 1e-5f);
    ck_assert_int_eq(l->causal, ATTN_CAUSAL_BOTTOM_RIGHT);
  }
  ck_assert_uint_eq(attnd_layer_set_bytes(set), w0.bytes + w1.bytes);
  attnd_layer_set_unref(set);
  lf_weights_free(&w0);
  lf_weights_free(&w1);
}
END_TEST

/* rope_scaling linear with the default theta, and "default" (none), with
 * GPT-2's n_head spelling of the head count. */
START_TEST(test_config_scalings) {
  static const char *const configs[] = {
      "{\"n_head\": 4, \"rope_scaling\": {\"type\": \"linear\", "
      "\"factor\": 2.5}}",
      "{\"num_attention_heads\": 4, \"rope_scaling\": {\"rope_type\": "
      "\"default\"}, \"head_dim\": null}",
      "{\"num_attention_heads\": 4, \"rope_scaling\": null}"};
  static const attn_rope_scaling_t want[] = {
      ATTN_ROPE_SCALING_LINEAR, ATTN_ROPE_SCALING_NONE, ATTN_ROPE_SCALING_NONE};
  for (int i = 0; i < 3; i++) {
    const char *dir = at("m%d", i);
    mkdir_at(dir);
    text_at(at("m%d/config.json", i), configs[i]);
    lf_shape_t s = {.E = 32, .H = 4, .bias = LF_BIAS_ALL};
    lf_weights_t w;
    write_layer(at("m%d/model.safetensors", i), LF_LLAMA, ATTND_ST_F16,
                "model.layers.0.", &s, 5, NULL, &w);
    attnd_layer_set_t *set = load(dir);
    const attnd_layer_t *l = find(set, "model.layers.0.self_attn");
    check_weights(l, &w);
    check_rope(l, ATTN_ROPE_HALF, 10000, 8);
    ck_assert_int_eq(l->rope.scaling, want[i]);
    ck_assert_double_eq(l->rope.factor, i == 0 ? 2.5 : 0);
    attnd_layer_set_unref(set);
    lf_weights_free(&w);
  }
}
END_TEST

/* Sliding windows from config.json, as transformers reads them, over a
 * model of three layers (model.layers.0 .. 2): Mistral's sliding_window in
 * every layer (4096 when absent, none when null); Qwen2's only with
 * use_sliding_window true and in layers of index >= max_window_layers (28
 * when absent); layer_types by index; and the keys of the one without
 * effect. The windows are transformers' W (keys seen, the query's own
 * included). Catches: the keys ignored (every window 0), Qwen's rule
 * upside down, the defaults. */
START_TEST(test_config_sliding_window) {
  static const struct {
    const char *config;
    int64_t want[3];
  } cases[] = {
      {"\"model_type\": \"mistral\", \"sliding_window\": 4", {4, 4, 4}},
      {"\"model_type\": \"mistral\"", {4096, 4096, 4096}},
      {"\"model_type\": \"mistral\", \"sliding_window\": null", {0, 0, 0}},
      /* Mistral's transformers ignores layer_types */
      {"\"model_type\": \"mistral\", \"sliding_window\": 4, \"layer_types\": "
       "[\"full_attention\", \"full_attention\", \"full_attention\"]",
       {4, 4, 4}},
      {"\"model_type\": \"llama\"", {0, 0, 0}},
      /* Llama's transformers ignores the key */
      {"\"model_type\": \"llama\", \"sliding_window\": 4", {0, 0, 0}},
      {"\"model_type\": \"mixtral\", \"sliding_window\": 4", {4, 4, 4}},
      {"\"model_type\": \"mixtral\"", {0, 0, 0}},
      {"\"model_type\": \"phi3\", \"sliding_window\": 5", {5, 5, 5}},
      /* another type, by its layer_types */
      {"\"model_type\": \"gemma2\", \"sliding_window\": 4, \"layer_types\": "
       "[\"sliding_attention\", \"full_attention\", \"sliding_attention\"]",
       {4, 0, 4}},
      {"\"model_type\": \"gemma2\", \"sliding_window\": null", {0, 0, 0}},
      {"\"sliding_window\": 6", {6, 6, 6}},
      {"\"model_type\": \"qwen2\", \"sliding_window\": 4, "
       "\"max_window_layers\": 1",
       {0, 0, 0}},
      {"\"model_type\": \"qwen2\", \"use_sliding_window\": false, "
       "\"sliding_window\": 4, \"max_window_layers\": 1",
       {0, 0, 0}},
      {"\"model_type\": \"qwen2\", \"use_sliding_window\": true, "
       "\"sliding_window\": 4, \"max_window_layers\": 1",
       {0, 4, 4}},
      {"\"model_type\": \"qwen3\", \"use_sliding_window\": true, "
       "\"sliding_window\": 4, \"max_window_layers\": 0",
       {4, 4, 4}},
      {"\"model_type\": \"qwen2\", \"use_sliding_window\": true, "
       "\"max_window_layers\": 2",
       {0, 0, 4096}},
      {"\"model_type\": \"qwen2\", \"use_sliding_window\": true, "
       "\"sliding_window\": 4",
       {0, 0, 0}},
      {"\"model_type\": \"qwen2\", \"use_sliding_window\": true, "
       "\"sliding_window\": null, \"max_window_layers\": 0",
       {0, 0, 0}},
      {"\"model_type\": \"qwen2\", \"use_sliding_window\": true, "
       "\"sliding_window\": 4, \"max_window_layers\": 0, \"layer_types\": "
       "[\"sliding_attention\", \"full_attention\", \"sliding_attention\"]",
       {4, 0, 4}},
      {"\"model_type\": \"qwen2\", \"use_sliding_window\": false, "
       "\"sliding_window\": 4, \"layer_types\": "
       "[\"sliding_attention\", \"full_attention\", \"sliding_attention\"]",
       {0, 0, 0}},
  };
  mkdir_at(at("d"));
  lf_shape_t s = {.E = 32, .H = 4};
  lf_file_t *f = lf_file_new();
  for (int i = 0; i < 3; i++) {
    char prefix[32];
    snprintf(prefix, sizeof prefix, "model.layers.%d.", i);
    add_layer(f, LF_LLAMA, ATTND_ST_F32, prefix, &s, 1 + (uint64_t)i, NULL);
  }
  write_file(f, at("d/model.safetensors"));
  lf_file_free(f);
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    char config[512];
    snprintf(config, sizeof config,
             "{\"num_attention_heads\": 4, \"num_hidden_layers\": 3, %s}",
             cases[c].config);
    text_at(at("d/config.json"), config);
    attnd_layer_set_t *set = load(at("d"));
    for (int i = 0; i < 3; i++) {
      const attnd_layer_t *l = attnd_layer_set_get(set, (size_t)i);
      ck_assert_msg(l->window == cases[c].want[i],
                    "{%s}: layer %d's window is %lld, not %lld",
                    cases[c].config, i, (long long)l->window,
                    (long long)cases[c].want[i]);
    }
    attnd_layer_set_unref(set);
  }
}
END_TEST

/* config.json's layer_types is read once for a path, not once for each of
 * its layers: a model of L layers and T entries cost L * T comparisons
 * (4000 layers and 100000 entries, 4 MB of header and config.json: 7.2 s
 * to load, 0.5 s read once). Counted, not timed: the
 * entries read for 64 layers and 128 entries are at most 128, and each
 * layer still gets the kind of its index; a bad entry is named by its
 * index whichever layer meets it, with only the entries up to it read. */
START_TEST(test_layer_types_read_once) {
  enum { L = 64, T = 2 * L };
  mkdir_at(at("d"));
  lf_shape_t s = {.E = 8, .H = 2};
  lf_file_t *f = lf_file_new();
  for (int i = 0; i < L; i++) {
    char prefix[32];
    snprintf(prefix, sizeof prefix, "model.layers.%d.", i);
    add_layer(f, LF_LLAMA, ATTND_ST_F32, prefix, &s, 1 + (uint64_t)i, NULL);
  }
  write_file(f, at("d/model.safetensors"));
  lf_file_free(f);
  attnd_buf_t c;
  attnd_buf_init(&c);
  attnd_buf_puts(&c, "{\"num_attention_heads\": 2, \"sliding_window\": 3, "
                     "\"layer_types\": [");
  for (int i = 0; i < T; i++) /* sliding where i % 3 == 1 */
    attnd_buf_printf(&c, "%s\"%s_attention\"", i ? ", " : "",
                     i % 3 == 1 ? "sliding" : "full");
  attnd_buf_puts(&c, "]}");
  text_at(at("d/config.json"), c.data);
  uint64_t before = attnd__layer_types_read;
  attnd_layer_set_t *set = load(at("d"));
  uint64_t read = attnd__layer_types_read - before;
  ck_assert_msg(read <= T,
                "%llu entries of layer_types read for %d layers "
                "and %d entries",
                (unsigned long long)read, L, T);
  for (int i = 0; i < L; i++) {
    char name[48];
    snprintf(name, sizeof name, "model.layers.%d.self_attn", i);
    ck_assert_int_eq(find(set, name)->window, i % 3 == 1 ? 3 : 0);
  }
  attnd_layer_set_unref(set);
  /* entry 5 is neither word: every layer would refuse it */
  attnd_buf_free(&c);
  attnd_buf_init(&c);
  attnd_buf_puts(&c, "{\"num_attention_heads\": 2, \"sliding_window\": 3, "
                     "\"layer_types\": [");
  for (int i = 0; i < T; i++)
    attnd_buf_printf(&c, "%s\"%s\"", i ? ", " : "",
                     i == 5 ? "chunked_attention" : "full_attention");
  attnd_buf_puts(&c, "]}");
  text_at(at("d/config.json"), c.data);
  before = attnd__layer_types_read;
  REFUSED(at("d"), "'layer_types'[5] is \"chunked_attention\"");
  ck_assert_uint_le(attnd__layer_types_read - before, 6);
  attnd_buf_free(&c);
}
END_TEST

/* GPT-2's layout in a directory: n_head from config.json, the model's
 * other tensors (embeddings, the causal-mask buffer attn.bias) ignored. */
START_TEST(test_config_gpt2) {
  const char *dir = at("gpt2");
  mkdir_at(dir);
  text_at(at("gpt2/config.json"),
          "{\"model_type\": \"gpt2\", \"n_embd\": 48, \"n_head\": 6, "
          "\"scale_attn_weights\": true}");
  lf_shape_t s = {.E = 48, .H = 6, .bias = LF_BIAS_ALL};
  lf_file_t *f = lf_file_new();
  lf_weights_t w0, w1;
  add_layer(f, LF_GPT2, ATTND_ST_F32, "h.0.", &s, 11, &w0);
  add_layer(f, LF_GPT2, ATTND_ST_F32, "h.1.", &s, 12, &w1);
  int64_t mask[4] = {1, 1, 8, 8}, wte[2] = {50, 48};
  ck_assert_int_eq(
      lf_add_tensor(f, "h.0.attn.bias", ATTND_ST_F32, 4, mask, NULL), 0);
  ck_assert_int_eq(lf_add_tensor(f, "wte.weight", ATTND_ST_F32, 2, wte, NULL),
                   0);
  write_file(f, at("gpt2/model.safetensors"));
  lf_file_free(f);
  attnd_layer_set_t *set = load(dir);
  ck_assert_uint_eq(attnd_layer_set_count(set), 2);
  check_weights(find(set, "h.0.attn"), &w0);
  check_weights(find(set, "h.1.attn"), &w1);
  ck_assert_int_eq(find(set, "h.1.attn")->convention, ATTND_CONV_GPT2);
  check_no_rope(find(set, "h.1.attn"));
  attnd_layer_set_unref(set);
  lf_weights_free(&w0);
  lf_weights_free(&w1);
}
END_TEST

/* ---- __metadata__ -------------------------------------------------------- */

/* rope on a BERT layer, interleaved and partial, with linear scaling given
 * as JSON text; causal top_left. */
START_TEST(test_metadata_rope) {
  lf_shape_t s = {.E = 32, .H = 2, .bias = LF_BIAS_ALL};
  const char *meta[] = {"num_heads",
                        "2",
                        "rope_theta",
                        "500.5",
                        "rope_dims",
                        "6",
                        "rope_style",
                        "interleaved",
                        "rope_scaling",
                        "{\"type\": \"linear\", \"factor\": 3}",
                        "causal",
                        "top_left",
                        "head_dim",
                        "16",
                        NULL};
  lf_weights_t w;
  write_layer(at("bert.safetensors"), LF_BERT, ATTND_ST_F32, "", &s, 3, meta,
              &w);
  attnd_layer_set_t *set = load(at("bert.safetensors"));
  const attnd_layer_t *l = find(set, "attention");
  check_weights(l, &w);
  check_rope(l, ATTN_ROPE_INTERLEAVED, 500.5, 6);
  ck_assert_int_eq(l->rope.scaling, ATTN_ROPE_SCALING_LINEAR);
  ck_assert_double_eq(l->rope.factor, 3);
  ck_assert_int_eq(l->causal, ATTN_CAUSAL_TOP_LEFT);
  attnd_layer_set_unref(set);
  lf_weights_free(&w);
}
END_TEST

/* The metadata's words for causal and rope_style, on a Llama layer with no
 * config.json (a file path). */
START_TEST(test_metadata_words) {
  static const struct {
    const char *causal, *style;
    attn_causal_t want_causal;
    attn_rope_style_t want_style;
  } cases[] = {
      {"false", "none", ATTN_CAUSAL_NONE, ATTN_ROPE_NONE},
      {"none", "half", ATTN_CAUSAL_NONE, ATTN_ROPE_HALF},
      {"true", "interleaved", ATTN_CAUSAL_BOTTOM_RIGHT, ATTN_ROPE_INTERLEAVED},
      {"bottom_right", "half", ATTN_CAUSAL_BOTTOM_RIGHT, ATTN_ROPE_HALF},
      {"top_left", "none", ATTN_CAUSAL_TOP_LEFT, ATTN_ROPE_NONE},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const char *meta[] = {"num_heads",     "4",          "causal",
                          cases[i].causal, "rope_style", cases[i].style,
                          "rope_theta",    "20000",      NULL};
    lf_shape_t s = {.E = 16, .H = 4};
    const char *path = at("w%zu.safetensors", i);
    write_layer(path, LF_LLAMA, ATTND_ST_F32, "layers.0.", &s, i, meta, NULL);
    attnd_layer_set_t *set = load(path);
    const attnd_layer_t *l = find(set, "layers.0.self_attn");
    ck_assert_int_eq(l->causal, cases[i].want_causal);
    if (cases[i].want_style == ATTN_ROPE_NONE)
      check_no_rope(l);
    else
      check_rope(l, cases[i].want_style, 20000, 4);
    attnd_layer_set_unref(set);
  }
}
END_TEST

/* A sliding window from the __metadata__ alone: a Llama layer read from its
 * file (no config.json) and a BERT layer; in a directory whose config.json
 * a Llama layer reads, config.json decides (model_type llama: none), while
 * a GPT-2 layer there reads its file's; a window that is not a positive
 * integer is refused, naming the key. */
START_TEST(test_metadata_window) {
  lf_shape_t s = {.E = 16, .H = 4};
  const char *meta8[] = {"num_heads", "4", "sliding_window", "8", NULL};
  write_layer(at("llama.safetensors"), LF_LLAMA, ATTND_ST_F32, "layers.3.", &s,
              1, meta8, NULL);
  attnd_layer_set_t *set = load(at("llama.safetensors"));
  ck_assert_int_eq(find(set, "layers.3.self_attn")->window, 8);
  attnd_layer_set_unref(set);

  const char *meta3[] = {"num_heads", "4", "sliding_window", "3", NULL};
  write_layer(at("bert.safetensors"), LF_BERT, ATTND_ST_F32, "", &s, 2, meta3,
              NULL);
  set = load(at("bert.safetensors"));
  ck_assert_int_eq(find(set, "attention")->window, 3);
  attnd_layer_set_unref(set);

  mkdir_at(at("l"));
  text_at(at("l/config.json"), "{\"model_type\": \"llama\", "
                               "\"num_attention_heads\": 4}");
  write_layer(at("l/model.safetensors"), LF_LLAMA, ATTND_ST_F32,
              "model.layers.0.", &s, 3, meta8, NULL);
  set = load(at("l"));
  ck_assert_int_eq(find(set, "model.layers.0.self_attn")->window, 0);
  attnd_layer_set_unref(set);

  mkdir_at(at("g"));
  text_at(at("g/config.json"), "{\"model_type\": \"gpt2\", \"n_head\": 4}");
  write_layer(at("g/model.safetensors"), LF_GPT2, ATTND_ST_F32, "h.0.", &s, 4,
              meta3, NULL);
  set = load(at("g"));
  ck_assert_int_eq(find(set, "h.0.attn")->window, 3);
  attnd_layer_set_unref(set);

  static const char *const bad[] = {"0", "-2", "4k", "", "null"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    const char *meta[] = {"num_heads", "4", "sliding_window", bad[i], NULL};
    const char *path = at("bad%zu.safetensors", i);
    write_layer(path, LF_BERT, ATTND_ST_F32, "", &s, 5, meta, NULL);
    REFUSED(path, "__metadata__ 'sliding_window'", "not a positive integer");
  }
}
END_TEST

/* ---- shards, several paths, names ---------------------------------------- */

/* Two layers over two shards, one of them split across both, with the
 * index; each layer's file is the one that holds its query weight. */
START_TEST(test_sharded) {
  const char *dir = at("llama");
  mkdir_at(dir);
  text_at(at("llama/config.json"),
          "{\"num_attention_heads\": 4, \"num_key_value_heads\": 2}");
  lf_shape_t s = {.E = 32, .H = 4, .Hkv = 2};
  lf_file_t *a = lf_file_new(), *b = lf_file_new();
  lf_weights_t w0, w1;
  add_layer(a, LF_LLAMA, ATTND_ST_BF16, "model.layers.0.", &s, 21, &w0);
  add_layer(b, LF_LLAMA, ATTND_ST_F16, "model.layers.1.", &s, 22, &w1);
  ck_assert_int_eq(lf_move(a, b, "model.layers.0.self_attn.o_proj.weight"), 0);
  static const char *const names[] = {"model-00001-of-00002.safetensors",
                                      "model-00002-of-00002.safetensors"};
  const lf_file_t *shards[] = {a, b};
  ck_assert_int_eq(lf_write_index(at("llama/model.safetensors.index.json"),
                                  shards, names, 2),
                   0);
  write_file(a, at("llama/%s", names[0]));
  write_file(b, at("llama/%s", names[1]));
  lf_file_free(a);
  lf_file_free(b);

  char slash[600];
  snprintf(slash, sizeof slash, "%s/", dir); /* a trailing '/' is fine */
  attnd_layer_set_t *set = load(slash);
  ck_assert_uint_eq(attnd_layer_set_count(set), 2);
  const attnd_layer_t *l0 = attnd_layer_set_get(set, 0),
                      *l1 = attnd_layer_set_get(set, 1);
  ck_assert_str_eq(l0->name, "model.layers.0.self_attn");
  ck_assert_str_eq(l1->name, "model.layers.1.self_attn");
  ck_assert_str_eq(l0->file, at("llama/%s", names[0]));
  ck_assert_str_eq(l1->file, at("llama/%s", names[1]));
  ck_assert_str_eq(l0->file_dtype, "BF16");
  ck_assert_str_eq(l1->file_dtype, "F16");
  check_weights(l0, &w0);
  check_weights(l1, &w1);
  attnd_layer_set_unref(set);
  lf_weights_free(&w0);
  lf_weights_free(&w1);
}
END_TEST

/* A layer across shards, with no config.json, takes its head count from
 * the __metadata__ of the shard that holds its query weight (the second
 * file by name here), not from another shard's. */
START_TEST(test_sharded_meta) {
  mkdir_at(at("mha"));
  lf_shape_t s = {.E = 16, .H = 2};
  lf_file_t *a = lf_file_new(), *b = lf_file_new();
  lf_weights_t w;
  add_layer(b, LF_TORCH_MHA, ATTND_ST_F32, "attn.", &s, 5, &w);
  ck_assert_int_eq(lf_move(b, a, "attn.out_proj.weight"), 0);
  ck_assert_int_eq(lf_meta(a, "num_heads", "4"), 0);
  ck_assert_int_eq(lf_meta(b, "num_heads", "2"), 0);
  write_file(a, at("mha/model-00001-of-00002.safetensors"));
  write_file(b, at("mha/model-00002-of-00002.safetensors"));
  lf_file_free(a);
  lf_file_free(b);

  attnd_layer_set_t *set = load(at("mha"));
  ck_assert_uint_eq(attnd_layer_set_count(set), 1);
  const attnd_layer_t *l = attnd_layer_set_get(set, 0);
  ck_assert_str_eq(l->file, at("mha/model-00002-of-00002.safetensors"));
  ck_assert_int_eq(l->H, 2);
  ck_assert_int_eq(l->Dh, 8);
  check_weights(l, &w);
  attnd_layer_set_unref(set);
  lf_weights_free(&w);
}
END_TEST

/* A list of three paths, spaces around the commas and empty items: one
 * sorted set; find and get at the edges. */
START_TEST(test_paths) {
  lf_shape_t s = {.E = 16, .H = 2, .bias = LF_BIAS_ALL};
  const char *meta[] = {"num_heads", "2", NULL};
  lf_weights_t wb, wl, wg;
  write_layer(at("bert.safetensors"), LF_BERT, ATTND_ST_F32, "bert.", &s, 31,
              meta, &wb);
  mkdir_at(at("llama"));
  text_at(at("llama/config.json"), "{\"num_attention_heads\": 2}");
  write_layer(at("llama/model.safetensors"), LF_LLAMA, ATTND_ST_F32,
              "model.layers.0.", &s, 32, NULL, &wl);
  write_layer(at("gpt2.safetensors"), LF_GPT2, ATTND_ST_F32, "h.0.", &s, 33,
              meta, &wg);
  char list[2048];
  snprintf(list, sizeof list, " %s , %s,,%s ,", at("gpt2.safetensors"),
           at("llama"), at("bert.safetensors"));
  attnd_layer_set_t *set = load(list);
  ck_assert_uint_eq(attnd_layer_set_count(set), 3);
  ck_assert_str_eq(attnd_layer_set_get(set, 0)->name, "bert.attention");
  ck_assert_str_eq(attnd_layer_set_get(set, 1)->name, "h.0.attn");
  ck_assert_str_eq(attnd_layer_set_get(set, 2)->name,
                   "model.layers.0.self_attn");
  ck_assert_ptr_null(attnd_layer_set_get(set, 3));
  check_weights(find(set, "bert.attention"), &wb);
  check_weights(find(set, "h.0.attn"), &wg);
  check_weights(find(set, "model.layers.0.self_attn"), &wl);
  ck_assert_ptr_null(attnd_layer_set_find(set, "h.0"));
  ck_assert_ptr_null(attnd_layer_set_find(set, "h.0.attnx"));
  ck_assert_ptr_null(attnd_layer_set_find(set, "zzz"));
  ck_assert_ptr_null(attnd_layer_set_find(set, ""));
  ck_assert_ptr_null(attnd_layer_set_find(set, NULL));
  ck_assert_uint_eq(attnd_layer_set_bytes(set), wb.bytes + wl.bytes + wg.bytes);
  attnd_layer_set_unref(set);
  lf_weights_free(&wb);
  lf_weights_free(&wl);
  lf_weights_free(&wg);
}
END_TEST

/* torch_mha with an empty prefix: named after the file, or the
 * directory. */
START_TEST(test_unnamed_torch) {
  lf_shape_t s = {.E = 16, .H = 2};
  const char *meta[] = {"num_heads", "2", NULL};
  write_layer(at("mha.safetensors"), LF_TORCH_MHA, ATTND_ST_F32, "", &s, 41,
              meta, NULL);
  mkdir_at(at("encoder_block"));
  write_layer(at("encoder_block/weights.safetensors"), LF_TORCH_MHA,
              ATTND_ST_F32, "", &s, 42, meta, NULL);
  char list[1200];
  snprintf(list, sizeof list, "%s,%s/", at("mha.safetensors"),
           at("encoder_block"));
  attnd_layer_set_t *set = load(list);
  ck_assert_uint_eq(attnd_layer_set_count(set), 2);
  ck_assert_str_eq(attnd_layer_set_get(set, 0)->name, "encoder_block");
  ck_assert_str_eq(attnd_layer_set_get(set, 0)->file,
                   at("encoder_block/weights.safetensors"));
  ck_assert_str_eq(attnd_layer_set_get(set, 1)->name, "mha");
  attnd_layer_set_unref(set);
}
END_TEST

/* The set's one directory that left files out: dir, chosen by `by`,
 * with the names files (NULL-terminated) left out. */
static void check_skipped(const attnd_layer_set_t *set, const char *dir,
                          const char *by, const char *const *files) {
  ck_assert_uint_eq(attnd_layer_set_skip_count(set), 1);
  const attnd_layer_skip_t *k = attnd_layer_set_skip(set, 0);
  ck_assert_ptr_null(attnd_layer_set_skip(set, 1));
  ck_assert_str_eq(k->dir, dir);
  ck_assert_str_eq(k->by, by);
  size_t n = 0;
  for (; files[n]; n++) {
    ck_assert_uint_gt(k->n, n);
    ck_assert_str_eq(k->files[n], files[n]);
  }
  ck_assert_uint_eq(k->n, n);
}

/* A file of the tensors `names` (NULL-terminated), [16, 16] each: an
 * adapter's or another format's, which name no layer attnd knows. */
static void other_file(const char *path, const char *const *names) {
  lf_file_t *f = lf_file_new();
  int64_t shape[2] = {16, 16};
  for (; *names; names++)
    ck_assert_int_eq(lf_add_tensor(f, *names, ATTND_ST_F32, 2, shape, NULL), 0);
  write_file(f, path);
  lf_file_free(f);
}

/* Of a Hugging Face directory's *.safetensors files, a load reads those
 * transformers' from_pretrained reads: with model.safetensors.index.json,
 * the shards it names, not a PEFT adapter, Mistral's consolidated.safetensors
 * or a draft block beside them, which the set names for the log; with
 * model.safetensors, that file alone, over shards and an index that a
 * later save_pretrained left stale; with neither, every file. A file
 * named in the list is read whatever its directory's rule. */
START_TEST(test_dir_files) {
  static const char *const adapter[] = {
      "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight",
      "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight", NULL};
  static const char *const consolidated[] = {
      "layers.0.attention.wq.weight", "layers.0.attention.wk.weight",
      "layers.0.attention.wv.weight", "layers.0.attention.wo.weight", NULL};
  static const char *const names[] = {"model-00001-of-00002.safetensors",
                                      "model-00002-of-00002.safetensors"};
  char dir[512]; /* at()'s buffers rotate */
  snprintf(dir, sizeof dir, "%s", at("d"));
  mkdir_at(dir);
  text_at(at("d/config.json"), "{\"num_attention_heads\": 2}");
  lf_shape_t s = {.E = 16, .H = 2};
  lf_file_t *a = lf_file_new(), *b = lf_file_new();
  lf_weights_t w0, w1;
  add_layer(a, LF_LLAMA, ATTND_ST_F32, "model.layers.0.", &s, 1, &w0);
  add_layer(b, LF_LLAMA, ATTND_ST_F32, "model.layers.1.", &s, 2, &w1);
  const lf_file_t *shards[] = {a, b};
  ck_assert_int_eq(
      lf_write_index(at("d/model.safetensors.index.json"), shards, names, 2),
      0);
  write_file(a, at("d/%s", names[0]));
  write_file(b, at("d/%s", names[1]));
  lf_file_free(a);
  lf_file_free(b);
  other_file(at("d/adapter_model.safetensors"), adapter);
  other_file(at("d/consolidated.safetensors"), consolidated);
  attnd_layer_set_t *set = load(dir);
  ck_assert_uint_eq(attnd_layer_set_count(set), 2);
  check_weights(attnd_layer_set_get(set, 0), &w0);
  check_weights(attnd_layer_set_get(set, 1), &w1);
  static const char *const beside[] = {"adapter_model.safetensors",
                                       "consolidated.safetensors", NULL};
  check_skipped(set, dir, "model.safetensors.index.json", beside);
  attnd_layer_set_unref(set);

  /* a draft block beside them is not served, unless named as a file (its
   * head count then from its own __metadata__) */
  const char *meta[] = {"num_heads", "2", NULL};
  write_layer(at("d/mtp.safetensors"), LF_LLAMA, ATTND_ST_F32,
              "model.layers.2.", &s, 3, meta, NULL);
  set = load(dir);
  ck_assert_uint_eq(attnd_layer_set_count(set), 2);
  static const char *const with_mtp[] = {"adapter_model.safetensors",
                                         "consolidated.safetensors",
                                         "mtp.safetensors", NULL};
  check_skipped(set, dir, "model.safetensors.index.json", with_mtp);
  attnd_layer_set_unref(set);
  char list[1200];
  snprintf(list, sizeof list, "%s,%s", dir, at("d/mtp.safetensors"));
  set = load(list);
  ck_assert_uint_eq(attnd_layer_set_count(set), 3);
  ck_assert_str_eq(attnd_layer_set_get(set, 2)->file, at("d/mtp.safetensors"));
  attnd_layer_set_unref(set);
  /* an adapter so named is read, and holds no layer */
  REFUSED(at("d/adapter_model.safetensors"), "no attention layer found in ",
          at("d/adapter_model.safetensors"), "lora_A.weight");

  /* model.safetensors comes first, even where the index names a shard
   * that is gone */
  lf_weights_t m0, m1;
  lf_file_t *m = lf_file_new();
  add_layer(m, LF_LLAMA, ATTND_ST_F32, "model.layers.0.", &s, 4, &m0);
  add_layer(m, LF_LLAMA, ATTND_ST_F32, "model.layers.1.", &s, 5, &m1);
  write_file(m, at("d/model.safetensors"));
  lf_file_free(m);
  ck_assert_int_eq(remove(at("d/%s", names[1])), 0);
  set = load(dir);
  ck_assert_uint_eq(attnd_layer_set_count(set), 2);
  ck_assert_str_eq(attnd_layer_set_get(set, 0)->file,
                   at("d/model.safetensors"));
  check_weights(attnd_layer_set_get(set, 0), &m0);
  check_weights(attnd_layer_set_get(set, 1), &m1);
  static const char *const all[] = {"adapter_model.safetensors",
                                    "consolidated.safetensors", names[0],
                                    "mtp.safetensors", NULL};
  check_skipped(set, dir, "model.safetensors", all);
  attnd_layer_set_unref(set);

  /* neither: every file, none left out */
  ck_assert_int_eq(remove(at("d/model.safetensors")), 0);
  ck_assert_int_eq(remove(at("d/model.safetensors.index.json")), 0);
  ck_assert_int_eq(remove(at("d/adapter_model.safetensors")), 0);
  ck_assert_int_eq(remove(at("d/consolidated.safetensors")), 0);
  set = load(dir);
  ck_assert_uint_eq(attnd_layer_set_count(set), 2);
  ck_assert_str_eq(attnd_layer_set_get(set, 0)->file, at("d/%s", names[0]));
  ck_assert_str_eq(attnd_layer_set_get(set, 1)->file, at("d/mtp.safetensors"));
  ck_assert_uint_eq(attnd_layer_set_skip_count(set), 0);
  attnd_layer_set_unref(set);
  lf_weights_free(&w0), lf_weights_free(&w1);
  lf_weights_free(&m0), lf_weights_free(&m1);
}
END_TEST

START_TEST(test_empty_list) {
  static const char *const lists[] = {"", " ", " , ,", NULL};
  for (size_t i = 0; i < 4; i++) {
    attnd_layer_set_t *set = load(lists[i]);
    ck_assert_uint_eq(attnd_layer_set_count(set), 0);
    ck_assert_uint_eq(attnd_layer_set_bytes(set), 0);
    ck_assert_ptr_null(attnd_layer_set_get(set, 0));
    ck_assert_ptr_null(attnd_layer_set_find(set, "x"));
    attnd_layer_set_unref(set);
  }
  /* and NULL sets */
  ck_assert_ptr_null(attnd_layer_set_ref(NULL));
  attnd_layer_set_unref(NULL);
  ck_assert_uint_eq(attnd_layer_set_count(NULL), 0);
  ck_assert_ptr_null(attnd_layer_set_find(NULL, "x"));
}
END_TEST

/* References: the set lives until its last unref (ASan sees a use after
 * free or a leak otherwise). */
START_TEST(test_refcount) {
  lf_shape_t s = {.E = 16, .H = 2};
  const char *meta[] = {"num_heads", "2", NULL};
  lf_weights_t w;
  write_layer(at("l.safetensors"), LF_LLAMA, ATTND_ST_F32, "", &s, 51, meta,
              &w);
  attnd_layer_set_t *set = load(at("l.safetensors"));
  ck_assert_ptr_eq(attnd_layer_set_ref(set), set);
  ck_assert_ptr_eq(attnd_layer_set_ref(set), set);
  attnd_layer_set_unref(set);
  attnd_layer_set_unref(set);
  const attnd_layer_t *l = find(set, "self_attn"); /* one reference left */
  check_weights(l, &w);
  attnd_layer_set_unref(set);
  lf_weights_free(&w);
}
END_TEST

/* ---- on the device ------------------------------------------------------- */

/* Device memory as host memory, counted, with a copy or an alloc that fails
 * on a given call (attnd_layer_set_to_device's contract is the store's:
 * attnd_device_memory_t). */
static struct {
  int blocks;                /* live */
  int allocs, copies;        /* calls so far */
  int fail_alloc, fail_copy; /* fail the n-th call (1-based); 0: never */
} dm;

static void *dm_alloc(size_t bytes) {
  if (++dm.allocs == dm.fail_alloc)
    return NULL;
  void *p = aligned_alloc(256, (bytes + 255) / 256 * 256);
  dm.blocks++;
  return p;
}

static void dm_free(void *p) {
  if (p)
    dm.blocks--;
  free(p);
}

static int dm_copy(void *dst, const void *src, size_t bytes) {
  if (++dm.copies == dm.fail_copy)
    return -1;
  memcpy(dst, src, bytes);
  return 0;
}

static const attnd_device_memory_t DM = {dm_alloc, dm_free, dm_copy, NULL};

/* Three layers, 18 tensors: Llama with q and k biases, Llama with all four,
 * and a cross-attention layer (kdim 24, vdim 40) without biases. */
static attnd_layer_set_t *device_set(lf_weights_t w[3]) {
  lf_shape_t qk = {.E = 32, .H = 4, .Hkv = 2, .bias = LF_BQ | LF_BK},
             all = {.E = 32, .H = 4, .Hkv = 2, .bias = LF_BIAS_ALL},
             cross = {.E = 32, .H = 4, .Ek = 24, .Ev = 40};
  lf_file_t *f = lf_file_new();
  add_layer(f, LF_LLAMA, ATTND_ST_F32, "model.layers.0.", &qk, 71, &w[0]);
  add_layer(f, LF_LLAMA, ATTND_ST_BF16, "model.layers.1.", &all, 72, &w[1]);
  ck_assert_int_eq(lf_meta(f, "num_heads", "4"), 0);
  ck_assert_int_eq(lf_meta(f, "num_kv_heads", "2"), 0);
  write_file(f, at("llama.safetensors"));
  lf_file_free(f);
  const char *meta[] = {"num_heads", "4", NULL};
  write_layer(at("cross.safetensors"), LF_TORCH_MHA_SPLIT, ATTND_ST_F32,
              "cross.", &cross, 73, meta, &w[2]);
  return load(at("llama.safetensors,%s", at("cross.safetensors")));
}

static const char *const DEVICE_LAYERS[3] = {
    "model.layers.0.self_attn", "model.layers.1.self_attn", "cross"};

/* Every layer's gpu tensors: absent where the host's are, else a copy of
 * them, each in its own 256-byte-aligned place of the layer's block (its
 * first tensor at the start): the biases bit for bit, the weights too, or
 * in a bf16 set (weight16; no float ones) each rounded to bfloat16 as the
 * codec rounds; returns the bytes the blocks span. */
static int64_t check_on_device(const attnd_layer_set_t *set,
                               const lf_weights_t w[3], int bf16) {
  int64_t bytes = 0;
  for (int i = 0; i < 3; i++) {
    const attnd_layer_t *l = find(set, DEVICE_LAYERS[i]);
    const lf_shape_t *z = &w[i].shape;
    int64_t qo = z->H * z->Dh, ko = z->Hkv * z->Dh, vo = z->Hkv * z->Dv;
    const void *gpu[8] = {bf16 ? l->gpu.weight16[0] : l->gpu.q_weight,
                          bf16 ? l->gpu.weight16[1] : l->gpu.k_weight,
                          bf16 ? l->gpu.weight16[2] : l->gpu.v_weight,
                          bf16 ? l->gpu.weight16[3] : l->gpu.o_weight,
                          l->gpu.q_bias,
                          l->gpu.k_bias,
                          l->gpu.v_bias,
                          l->gpu.o_bias};
    const float *want[8] = {w[i].q_weight, w[i].k_weight, w[i].v_weight,
                            w[i].o_weight, w[i].q_bias,   w[i].k_bias,
                            w[i].v_bias,   w[i].o_bias};
    const int64_t n[8] = {
        qo * z->E, ko * z->Ek, vo * z->Ev, z->Eo * z->H * z->Dv,
        qo,        ko,         vo,         z->Eo};
    const char *names[8] = {"q_weight", "k_weight", "v_weight", "o_weight",
                            "q_bias",   "k_bias",   "v_bias",   "o_bias"};
    const float *host[8] = {l->q_weight, l->k_weight, l->v_weight, l->o_weight,
                            l->q_bias,   l->k_bias,   l->v_bias,   l->o_bias};
    if (bf16)
      ck_assert_msg(!l->gpu.q_weight && !l->gpu.o_weight,
                    "%s: float weights in a bf16 set", l->name);
    const char *block = l->gpu.block, *end = block;
    ck_assert_ptr_eq(block, gpu[0]);
    for (int t = 0; t < 8; t++) {
      char what[96];
      snprintf(what, sizeof what, "%s gpu.%s", l->name, names[t]);
      const int half = bf16 && t < 4;
      if (!half) {
        same(gpu[t], want[t], n[t], what);
      } else {
        const uint16_t *h = gpu[t];
        ck_assert_msg(h != NULL, "%s: absent", what);
        for (int64_t e = 0; e < n[t]; e++)
          ck_assert_msg(h[e] == attnd_bf16_from_f32(want[t][e]),
                        "%s[%lld] = 0x%04x, expected 0x%04x", what,
                        (long long)e, h[e], attnd_bf16_from_f32(want[t][e]));
      }
      if (!want[t])
        continue;
      const char *p = (const char *)gpu[t];
      ck_assert_msg(p >= end && (p - block) % 256 == 0,
                    "%s at %td of its block, after %td", what, p - block,
                    end - block);
      end = p + (n[t] * (half ? 2 : 4) + 255) / 256 * 256;
      ck_assert_ptr_ne(gpu[t], host[t]);
    }
    bytes += end - block;
  }
  return bytes;
}

static void check_off_device(const attnd_layer_set_t *set) {
  for (int i = 0; i < 3; i++) {
    const attnd_layer_t *l = find(set, DEVICE_LAYERS[i]);
    const void *gpu[13] = {
        l->gpu.block,       l->gpu.q_weight,    l->gpu.k_weight,
        l->gpu.v_weight,    l->gpu.o_weight,    l->gpu.weight16[0],
        l->gpu.weight16[1], l->gpu.weight16[2], l->gpu.weight16[3],
        l->gpu.q_bias,      l->gpu.k_bias,      l->gpu.v_bias,
        l->gpu.o_bias};
    for (int t = 0; t < 13; t++)
      ck_assert_msg(gpu[t] == NULL, "%s: gpu pointer %d left", l->name, t);
  }
}

/* _i: fp32 / bf16. A set's weights on the device: copies of the host's,
 * one block a layer, held of the GPU's budget (beside what is already
 * there) until the set's last reference goes, which gives back both. */
START_TEST(test_to_device) {
  lf_weights_t w[3];
  attnd_layer_set_t *set = device_set(w);
  ck_assert_int_eq(attnd_layer_set_device_bytes(set), 0);
  memset(&dm, 0, sizeof dm);
  attnd_budget_t budget = {.max = 1 << 20};
  int64_t other = 1000; /* a request's, say */
  ck_assert_int_eq(attnd_budget_take(&budget, other, &other), 0);
  char msg[512] = "";
  ck_assert_msg(
      attnd_layer_set_to_device(set, &DM, _i, &budget, msg, sizeof msg) == 0,
      "%s", msg);
  int64_t bytes = check_on_device(set, w, _i);
  ck_assert_int_eq(dm.blocks, 3);
  ck_assert_int_eq(dm.copies, 18);
  ck_assert_int_eq(attnd_layer_set_device_bytes(set), bytes);
  ck_assert_int_eq(attnd_budget_used(&budget), bytes + 1000);
  attnd_layer_set_ref(set); /* a request's */
  attnd_layer_set_unref(set);
  ck_assert_int_eq(dm.blocks, 3);
  attnd_layer_set_unref(set);
  ck_assert_int_eq(dm.blocks, 0);
  ck_assert_int_eq(attnd_budget_used(&budget), 1000);
  for (int i = 0; i < 3; i++)
    lf_weights_free(&w[i]);
}
END_TEST

/* _i: fp32 / bf16. All or nothing: a budget a byte short, an alloc or a
 * copy that fails at each place in turn each leave the set on the host,
 * nothing allocated and nothing held, with a message that says why; and
 * the set still works. */
START_TEST(test_to_device_fails) {
  lf_weights_t w[3];
  attnd_layer_set_t *set = device_set(w);
  attnd_budget_t big = {.max = 1 << 20};
  memset(&dm, 0, sizeof dm);
  char msg[512] = "";
  ck_assert_int_eq(
      attnd_layer_set_to_device(set, &DM, _i, &big, msg, sizeof msg), 0);
  int64_t need = attnd_layer_set_device_bytes(set);
  attnd_layer_set_unref(set);
  for (int i = 0; i < 3; i++)
    lf_weights_free(&w[i]);
  set = device_set(w); /* the same files, loaded again */

  attnd_budget_t short_ = {.max = need - 1};
  memset(&dm, 0, sizeof dm);
  ck_assert_int_eq(
      attnd_layer_set_to_device(set, &DM, _i, &short_, msg, sizeof msg), -1);
  ck_assert_msg(strstr(msg, "max_device_memory_bytes") &&
                    strstr(msg, "3 layers"),
                "%s", msg);
  char want[64];
  snprintf(want, sizeof want, "%lld bytes", (long long)need);
  ck_assert_msg(strstr(msg, want), "%s lacks %s", msg, want);
  ck_assert_int_eq(dm.allocs, 0);
  ck_assert_int_eq(attnd_budget_used(&short_), 0);
  ck_assert_int_eq(attnd_layer_set_device_bytes(set), 0);
  check_off_device(set);

  for (int fail = 1; fail <= 3 + 18; fail++) {
    attnd_budget_t budget = {.max = need};
    memset(&dm, 0, sizeof dm);
    if (fail <= 3)
      dm.fail_alloc = fail;
    else
      dm.fail_copy = fail - 3;
    msg[0] = '\0';
    ck_assert_int_eq(
        attnd_layer_set_to_device(set, &DM, _i, &budget, msg, sizeof msg), -1);
    ck_assert_msg(strstr(msg, "to the GPU failed"), "%s", msg);
    ck_assert_msg(dm.blocks == 0, "fail %d: %d blocks left", fail, dm.blocks);
    ck_assert_int_eq(attnd_budget_used(&budget), 0);
    ck_assert_int_eq(attnd_layer_set_device_bytes(set), 0);
    check_off_device(set);
  }
  /* the last try may go through */
  attnd_budget_t budget = {.max = need};
  memset(&dm, 0, sizeof dm);
  ck_assert_int_eq(
      attnd_layer_set_to_device(set, &DM, _i, &budget, msg, sizeof msg), 0);
  check_on_device(set, w, _i);
  attnd_layer_set_unref(set);
  ck_assert_int_eq(dm.blocks, 0);
  ck_assert_int_eq(attnd_budget_used(&budget), 0);
  for (int i = 0; i < 3; i++)
    lf_weights_free(&w[i]);
}
END_TEST

/* ---- refusals ------------------------------------------------------------ */

/* A Llama layer E=32, H=4 (Dh 8), Hkv 2, biases, as a file to edit. */
static lf_file_t *llama_file(attnd_st_dtype_t dtype) {
  lf_shape_t s = {.E = 32, .H = 4, .Hkv = 2, .bias = LF_BIAS_ALL};
  lf_file_t *f = lf_file_new();
  add_layer(f, LF_LLAMA, dtype, "model.layers.0.", &s, 61, NULL);
  ck_assert_int_eq(lf_meta(f, "num_heads", "4"), 0);
  ck_assert_int_eq(lf_meta(f, "num_kv_heads", "2"), 0);
  return f;
}

static void write_free(lf_file_t *f, const char *path) {
  write_file(f, path);
  lf_file_free(f);
}

#define LQ "model.layers.0.self_attn.q_proj.weight"
#define LK "model.layers.0.self_attn.k_proj.weight"
#define LO "model.layers.0.self_attn.o_proj.weight"

START_TEST(test_refuse_missing_tensor) {
  lf_file_t *f = llama_file(ATTND_ST_F32);
  ck_assert_int_eq(lf_remove(f, LO), 0);
  const char *path = at("m.safetensors");
  write_free(f, path);
  REFUSED(path, "layer 'model.layers.0.self_attn' in ", path,
          ": missing tensor '" LO "'");

  lf_shape_t s = {.E = 16, .H = 2, .bias = LF_BIAS_ALL};
  f = lf_file_new();
  add_layer(f, LF_BERT, ATTND_ST_F32, "enc.", &s, 1, NULL);
  ck_assert_int_eq(lf_remove(f, "enc.attention.self.value.weight"), 0);
  write_free(f, path);
  REFUSED(path, "missing tensor 'enc.attention.self.value.weight'");
}
END_TEST

START_TEST(test_refuse_bad_shape) {
  const char *path = at("s.safetensors");
  /* k's rows against the metadata's num_kv_heads */
  lf_file_t *f = llama_file(ATTND_ST_F32);
  ck_assert_int_eq(lf_meta(f, "num_kv_heads", "4"), 0);
  write_free(f, path);
  REFUSED(path, "tensor '" LK "' has shape [16, 32], expected 32 rows "
                "(num_key_value_heads 4 × head_dim 8)");

  /* a bias of the wrong length */
  f = llama_file(ATTND_ST_F32);
  ck_assert_int_eq(lf_remove(f, "model.layers.0.self_attn.v_proj.bias"), 0);
  int64_t seven = 7;
  ck_assert_int_eq(lf_add_tensor(f, "model.layers.0.self_attn.v_proj.bias",
                                 ATTND_ST_F32, 1, &seven, NULL),
                   0);
  write_free(f, path);
  REFUSED(path, "tensor 'model.layers.0.self_attn.v_proj.bias' has shape [7], "
                "expected [16]");

  /* a weight that is not a matrix */
  f = llama_file(ATTND_ST_F32);
  ck_assert_int_eq(lf_remove(f, LQ), 0);
  int64_t flat = 32 * 32;
  ck_assert_int_eq(lf_add_tensor(f, LQ, ATTND_ST_F32, 1, &flat, NULL), 0);
  write_free(f, path);
  REFUSED(path, "tensor '" LQ "' has shape [1024], expected a non-empty "
                "matrix");

  /* o's columns: H·Dv */
  f = llama_file(ATTND_ST_F32);
  ck_assert_int_eq(lf_remove(f, LO), 0);
  int64_t o[2] = {32, 24};
  ck_assert_int_eq(lf_add_tensor(f, LO, ATTND_ST_F32, 2, o, NULL), 0);
  write_free(f, path);
  REFUSED(path, "tensor '" LO "' has shape [32, 24], expected 32 columns "
                "(num_attention_heads 4 × value head dim 8)");

  /* torch's in_proj_weight must be [3E, E]; GPT-2's c_attn [E, 3E] */
  f = lf_file_new();
  int64_t bad[2] = {64, 32}, out[2] = {32, 32};
  ck_assert_int_eq(
      lf_add_tensor(f, "in_proj_weight", ATTND_ST_F32, 2, bad, NULL), 0);
  ck_assert_int_eq(
      lf_add_tensor(f, "out_proj.weight", ATTND_ST_F32, 2, out, NULL), 0);
  ck_assert_int_eq(lf_meta(f, "num_heads", "4"), 0);
  write_free(f, path);
  REFUSED(path, "layer 's' in",
          "tensor 'in_proj_weight' has shape [64, 32], "
          "expected [3E, E] (q, k, v stacked)");
  f = lf_file_new();
  ck_assert_int_eq(
      lf_add_tensor(f, "h.0.attn.c_attn.weight", ATTND_ST_F32, 2, bad, NULL),
      0);
  ck_assert_int_eq(
      lf_add_tensor(f, "h.0.attn.c_proj.weight", ATTND_ST_F32, 2, out, NULL),
      0);
  ck_assert_int_eq(lf_meta(f, "num_heads", "4"), 0);
  write_free(f, path);
  REFUSED(path, "expected [E, 3E] (input-major q, k, v)");

  /* Qwen3's norms are [Dh] */
  lf_shape_t s = {.E = 32, .H = 4, .qk_norm = 1};
  f = lf_file_new();
  add_layer(f, LF_LLAMA, ATTND_ST_F32, "", &s, 1, NULL);
  ck_assert_int_eq(lf_remove(f, "self_attn.k_norm.weight"), 0);
  int64_t dh2 = 16;
  ck_assert_int_eq(
      lf_add_tensor(f, "self_attn.k_norm.weight", ATTND_ST_F32, 1, &dh2, NULL),
      0);
  ck_assert_int_eq(lf_meta(f, "num_heads", "4"), 0);
  write_free(f, path);
  REFUSED(path, "tensor 'self_attn.k_norm.weight' has shape [16], expected "
                "[8] (head_dim)");
}
END_TEST

START_TEST(test_refuse_heads) {
  const char *path = at("h.safetensors");
  /* no head count anywhere: a file path, a directory, a config.json */
  lf_shape_t s = {.E = 32, .H = 4};
  write_layer(path, LF_LLAMA, ATTND_ST_F32, "model.layers.0.", &s, 1, NULL,
              NULL);
  REFUSED(path, "layer 'model.layers.0.self_attn' in ", path,
          "no head count: a file path reads no config.json (list its "
          "directory to read one), so no num_attention_heads (or n_head) and "
          "the file's __metadata__ no num_heads");
  mkdir_at(at("d"));
  write_layer(at("d/model.safetensors"), LF_LLAMA, ATTND_ST_F32,
              "model.layers.0.", &s, 1, NULL, NULL);
  REFUSED(at("d"), "no head count: ", at("d"), " has no config.json, so no");
  text_at(at("d/config.json"), "{\"hidden_size\": 32}");
  REFUSED(at("d"), "no head count: ", at("d/config.json"),
          " has no num_attention_heads (or n_head) and the file's "
          "__metadata__ no num_heads");
  text_at(at("d/config.json"), "{\"num_attention_heads\": \"4\"}");
  REFUSED(at("d"), at("d/config.json"),
          ": 'num_attention_heads' must be a positive integer");
  text_at(at("d/config.json"), "{\"num_attention_heads\": 0}");
  REFUSED(at("d"), "'num_attention_heads' must be a positive integer");

  static const struct {
    const char *key, *value, *want;
  } cases[] = {
      {"num_heads", "5",
       "num_attention_heads 5 does not divide the 32 rows of the query weight "
       "'model.layers.0.self_attn.q_proj.weight'"},
      {"num_heads", "4x",
       "__metadata__ 'num_heads' is '4x', not a positive "
       "integer"},
      {"num_heads", "-4", "__metadata__ 'num_heads' is '-4'"},
      {"num_kv_heads", "3",
       "num_key_value_heads 3 does not divide "
       "num_attention_heads 4"},
      {"head_dim", "6",
       "head_dim 6 disagrees with the query weight "
       "'model.layers.0.self_attn.q_proj.weight': 32 rows / "
       "4 heads = 8"},
      {"rope_dims", "3",
       "rope would rotate 3 features (__metadata__ "
       "'rope_dims'): they must be even, 2 .. head_dim 8"},
      {"rope_dims", "10", "rope would rotate 10 features"},
      {"rope_theta", "nan",
       "__metadata__ 'rope_theta' is 'nan', not a "
       "finite number"},
      {"rope_theta", "1", "__metadata__ 'rope_theta' must be > 1, got 1"},
      {"rope_style", "neox",
       "__metadata__ 'rope_style' is 'neox', not half, "
       "interleaved or none"},
      {"causal", "maybe",
       "__metadata__ 'causal' is 'maybe', not true, false, "
       "bottom_right, top_left or none"},
      {"rms_norm_eps", "-1",
       "__metadata__ 'rms_norm_eps' must be in [0, 1], got -1"},
      {"rope_scaling", "{\"type\": \"dynamic\", \"factor\": 2}",
       "__metadata__ rope_scaling type 'dynamic' is not supported (linear, "
       "llama3)"},
      {"rope_scaling", "{\"factor\": 2",
       "__metadata__ 'rope_scaling' is not "
       "JSON"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const char *meta[] = {"num_heads", "4", cases[i].key, cases[i].value, NULL};
    write_layer(path, LF_LLAMA, ATTND_ST_F32, "model.layers.0.", &s, 1, meta,
                NULL);
    REFUSED(path, cases[i].want);
  }
}
END_TEST

START_TEST(test_refuse_config) {
  static const struct {
    const char *config, *want;
  } cases[] = {
      {"{\"num_attention_heads\": 4, \"rope_scaling\": {\"rope_type\": "
       "\"yarn\", \"factor\": 4.0}}",
       "rope_scaling type 'yarn' is not supported (linear, llama3)"},
      {"{\"num_attention_heads\": 4, \"rope_scaling\": {\"factor\": 4.0}}",
       "rope_scaling has no \"type\" or \"rope_type\""},
      {"{\"num_attention_heads\": 4, \"rope_scaling\": {\"type\": "
       "\"linear\", \"factor\": 0.5}}",
       "rope_scaling: factor must be >= 1, got 0.5"},
      {"{\"num_attention_heads\": 4, \"rope_scaling\": {\"type\": "
       "\"linear\"}}",
       "rope_scaling: 'factor' must be a number"},
      {"{\"num_attention_heads\": 4, \"rope_scaling\": {\"rope_type\": "
       "\"llama3\", \"factor\": 8, \"low_freq_factor\": 4, "
       "\"high_freq_factor\": 1, \"original_max_position_embeddings\": 8192}}",
       "llama3 needs low_freq_factor > 0, high_freq_factor > low_freq_factor"},
      {"{\"num_attention_heads\": 4, \"rope_scaling\": {\"rope_type\": "
       "\"llama3\", \"factor\": 8}}",
       "rope_scaling: 'low_freq_factor' must be a number"},
      {"{\"num_attention_heads\": 4, \"rope_scaling\": 2}",
       "rope_scaling must be an object or null"},
      {"{\"num_attention_heads\": 4, \"partial_rotary_factor\": 1.5}",
       "partial_rotary_factor must be in (0, 1], got 1.5"},
      {"{\"num_attention_heads\": 4, \"rope_theta\": \"big\"}",
       "'rope_theta' must be a number"},
      {"{\"num_attention_heads\": 4, \"rope_theta\": 0.5}",
       "config.json: 'rope_theta' must be > 1, got 0.5"},
      {"{\"num_attention_heads\": 4, \"rms_norm_eps\": 2}",
       "config.json: 'rms_norm_eps' must be in [0, 1], got 2"},
      {"{\"num_attention_heads\": 4, \"attn_logit_softcapping\": 50.0}",
       "attn_logit_softcapping is not supported"},
      {"{\"num_attention_heads\": 4, \"query_pre_attn_scalar\": 256}",
       "query_pre_attn_scalar other than head_dim 8 is not supported"},
      {"{\"num_attention_heads\": 4,", "config.json: line"},
      {"[4]", "config.json: not a JSON object"},
  };
  mkdir_at(at("d"));
  lf_shape_t s = {.E = 32, .H = 4};
  write_layer(at("d/model.safetensors"), LF_LLAMA, ATTND_ST_F32,
              "model.layers.0.", &s, 1, NULL, NULL);
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    text_at(at("d/config.json"), cases[i].config);
    REFUSED(at("d"), cases[i].want);
  }
  /* sliding windows attnd cannot compute as transformers would */
  static const struct {
    const char *config, *want;
  } windows[] = {
      {"{\"num_attention_heads\": 4, \"sliding_window\": 0}",
       "config.json: 'sliding_window' must be a positive integer or null"},
      {"{\"num_attention_heads\": 4, \"sliding_window\": \"4096\"}",
       "'sliding_window' must be a positive integer or null"},
      {"{\"num_attention_heads\": 4, \"model_type\": \"qwen2\", "
       "\"use_sliding_window\": 1}",
       "config.json: 'use_sliding_window' must be true or false"},
      {"{\"num_attention_heads\": 4, \"model_type\": \"qwen2\", "
       "\"use_sliding_window\": true, \"max_window_layers\": -1}",
       "config.json: 'max_window_layers' must be an integer >= 0"},
      {"{\"num_attention_heads\": 4, \"sliding_window\": 8, "
       "\"layer_types\": [\"full_attention\", \"chunked_attention\"]}",
       "'layer_types'[1] is \"chunked_attention\"; only \"full_attention\" "
       "and \"sliding_attention\" are supported"},
      {"{\"num_attention_heads\": 4, \"sliding_window\": 8, "
       "\"layer_types\": []}",
       "'layer_types' must be a non-empty array of strings"},
      /* Gemma 2 alternates, by a rule of its own */
      {"{\"num_attention_heads\": 4, \"model_type\": \"gemma2\", "
       "\"sliding_window\": 4096}",
       "config.json: model_type 'gemma2' sets 'sliding_window' 4096, and "
       "attnd does not know which of its layers take it; give 'layer_types', "
       "or 'sliding_window' null"},
  };
  for (size_t i = 0; i < sizeof windows / sizeof *windows; i++) {
    text_at(at("d/config.json"), windows[i].config);
    REFUSED(at("d"), windows[i].want);
  }
  /* layer_types with no entry for layer 1; and a window that depends on
   * the index of a layer whose name has none */
  write_layer(at("d/model.safetensors"), LF_LLAMA, ATTND_ST_F32,
              "model.layers.1.", &s, 1, NULL, NULL);
  text_at(at("d/config.json"),
          "{\"num_attention_heads\": 4, \"sliding_window\": 8, "
          "\"layer_types\": [\"full_attention\"]}");
  REFUSED(at("d"), "'layer_types' has 1 entries, none for layer index 1");
  write_layer(at("d/model.safetensors"), LF_LLAMA, ATTND_ST_F32, "decoder.", &s,
              1, NULL, NULL);
  text_at(at("d/config.json"),
          "{\"num_attention_heads\": 4, \"model_type\": \"qwen2\", "
          "\"use_sliding_window\": true, \"sliding_window\": 8, "
          "\"max_window_layers\": 2}");
  REFUSED(at("d"), "layer 'decoder.self_attn'",
          "config.json: 'max_window_layers' 2 makes the window depend on the "
          "layer's index, and the layer's name gives none");
  text_at(at("d/config.json"),
          "{\"num_attention_heads\": 4, \"sliding_window\": 8, "
          "\"layer_types\": [\"full_attention\", \"sliding_attention\"]}");
  REFUSED(at("d"), "'layer_types' mixes full and sliding attention, and the "
                   "layer's name gives no index to choose by");
  /* where the index does not matter, none is needed */
  text_at(at("d/config.json"),
          "{\"num_attention_heads\": 4, \"model_type\": \"qwen2\", "
          "\"use_sliding_window\": true, \"sliding_window\": 8, "
          "\"max_window_layers\": 0}");
  attnd_layer_set_t *set = load(at("d"));
  ck_assert_int_eq(find(set, "decoder.self_attn")->window, 8);
  attnd_layer_set_unref(set);
  write_layer(at("d/model.safetensors"), LF_LLAMA, ATTND_ST_F32,
              "model.layers.0.", &s, 1, NULL, NULL);
  /* 0.25 of head_dim 8: 2 rotated features, the fewest there are */
  text_at(at("d/config.json"),
          "{\"num_attention_heads\": 4, \"partial_rotary_factor\": 0.25}");
  set = load(at("d"));
  check_rope(find(set, "model.layers.0.self_attn"), ATTN_ROPE_HALF, 10000, 2);
  attnd_layer_set_unref(set);
  /* an odd count of rotated features */
  lf_shape_t s12 = {.E = 48, .H = 4};
  write_layer(at("d/model.safetensors"), LF_LLAMA, ATTND_ST_F32,
              "model.layers.0.", &s12, 1, NULL, NULL);
  text_at(at("d/config.json"),
          "{\"num_attention_heads\": 4, \"partial_rotary_factor\": 0.25}");
  REFUSED(at("d"), "partial_rotary_factor 0.25 of head_dim 12 rotates 3 "
                   "features, not an even number >= 2");
  /* Gemma3's (1 + w) norms */
  lf_shape_t sn = {.E = 32, .H = 4, .qk_norm = 1};
  write_layer(at("d/model.safetensors"), LF_LLAMA, ATTND_ST_F32,
              "model.layers.0.", &sn, 1, NULL, NULL);
  text_at(at("d/config.json"), "{\"num_attention_heads\": 4, \"model_type\": "
                               "\"gemma3_text\"}");
  REFUSED(at("d"), "model_type 'gemma3_text' scales q_norm/k_norm by "
                   "(1 + weight)");
}
END_TEST

START_TEST(test_refuse_dtype_and_values) {
  const char *path = at("v.safetensors");
  /* an integer tensor as a weight */
  lf_file_t *f = llama_file(ATTND_ST_F32);
  ck_assert_int_eq(lf_remove(f, LK), 0);
  int64_t k[2] = {16, 32};
  ck_assert_int_eq(lf_add_tensor(f, LK, ATTND_ST_I64, 2, k, NULL), 0);
  write_free(f, path);
  REFUSED(path, "layer 'model.layers.0.self_attn' in ", path,
          ": tensor '" LK "' is I64, which is not a float32 weight (F64, F32, "
          "F16 or BF16)");

  /* NaN, infinity, and an F64 beyond float32, each at its place */
  static const struct {
    attnd_st_dtype_t dtype;
    const char *tensor;
    int64_t index;
    double value;
    const char *at;
  } cases[] = {
      {ATTND_ST_F32, LQ, 2 * 32 + 3, NAN, "at [2, 3]"},
      {ATTND_ST_BF16, LO, 31 * 32 + 31, INFINITY, "at [31, 31]"},
      {ATTND_ST_F16, "model.layers.0.self_attn.v_proj.bias", 5, -INFINITY,
       "at [5]"},
      {ATTND_ST_F64, LK, 17, 1e300, "at [0, 17]"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    f = llama_file(cases[i].dtype);
    ck_assert_int_eq(lf_set(f, cases[i].tensor, cases[i].index, cases[i].value),
                     0);
    write_free(f, path);
    REFUSED(path, "tensor '", cases[i].tensor,
            "' holds a value that is not finite (or beyond float32's range) ",
            cases[i].at);
  }
  /* in GPT-2's transposed c_attn: the stored tensor's coordinates */
  lf_shape_t s = {.E = 16, .H = 2, .bias = LF_BIAS_ALL};
  f = lf_file_new();
  add_layer(f, LF_GPT2, ATTND_ST_BF16, "h.0.", &s, 1, NULL);
  ck_assert_int_eq(lf_set(f, "h.0.attn.c_attn.weight", 1 * 48 + 40, NAN), 0);
  ck_assert_int_eq(lf_meta(f, "num_heads", "2"), 0);
  write_free(f, path);
  REFUSED(path, "tensor 'h.0.attn.c_attn.weight' holds a value that is not "
                "finite (or beyond float32's range) at [1, 40]");
}
END_TEST

START_TEST(test_refuse_duplicates) {
  lf_shape_t s = {.E = 16, .H = 2};
  /* one layer name from two paths */
  const char *meta[] = {"num_heads", "2", NULL};
  write_layer(at("a.safetensors"), LF_LLAMA, ATTND_ST_F32, "model.layers.0.",
              &s, 1, meta, NULL);
  write_layer(at("b.safetensors"), LF_LLAMA, ATTND_ST_F16, "model.layers.0.",
              &s, 2, meta, NULL);
  char list[1200];
  snprintf(list, sizeof list, "%s,%s", at("a.safetensors"),
           at("b.safetensors"));
  REFUSED(list, "layer 'model.layers.0.self_attn' found twice: in ",
          at("a.safetensors"), " and in ", at("b.safetensors"));
  /* the same path twice */
  snprintf(list, sizeof list, "%s,%s", at("a.safetensors"),
           at("a.safetensors"));
  REFUSED(list, "layer 'model.layers.0.self_attn' found twice");

  /* one tensor name in two shards of a directory */
  mkdir_at(at("d"));
  text_at(at("d/config.json"), "{\"num_attention_heads\": 2}");
  write_layer(at("d/model-1.safetensors"), LF_LLAMA, ATTND_ST_F32,
              "model.layers.0.", &s, 1, NULL, NULL);
  write_layer(at("d/model-2.safetensors"), LF_LLAMA, ATTND_ST_F32,
              "model.layers.0.", &s, 1, NULL, NULL);
  REFUSED(at("d"), at("d"),
          ": tensor 'model.layers.0.self_attn.k_proj.weight' "
          "is in both ",
          at("d/model-1.safetensors"), " and ", at("d/model-2.safetensors"));

  /* both torch forms at one prefix */
  lf_file_t *f = lf_file_new();
  add_layer(f, LF_TORCH_MHA, ATTND_ST_F32, "mha.", &s, 1, NULL);
  int64_t sq[2] = {16, 16};
  ck_assert_int_eq(
      lf_add_tensor(f, "mha.q_proj_weight", ATTND_ST_F32, 2, sq, NULL), 0);
  ck_assert_int_eq(lf_meta(f, "num_heads", "2"), 0);
  write_free(f, at("t.safetensors"));
  REFUSED(at("t.safetensors"), "both 'mha.in_proj_weight' and "
                               "'mha.q_proj_weight': one form or the other");
}
END_TEST

START_TEST(test_refuse_index) {
  mkdir_at(at("d"));
  text_at(at("d/config.json"), "{\"num_attention_heads\": 2}");
  lf_shape_t s = {.E = 16, .H = 2};
  lf_file_t *a = lf_file_new(), *b = lf_file_new();
  add_layer(a, LF_LLAMA, ATTND_ST_F32, "model.layers.0.", &s, 1, NULL);
  add_layer(b, LF_LLAMA, ATTND_ST_F32, "model.layers.1.", &s, 2, NULL);
  static const char *const names[] = {"model-00001-of-00002.safetensors",
                                      "model-00002-of-00002.safetensors"};
  const lf_file_t *shards[] = {a, b};
  const char *index = at("d/model.safetensors.index.json");
  ck_assert_int_eq(lf_write_index(index, shards, names, 2), 0);
  write_file(a, at("d/%s", names[0]));
  /* the second shard is missing */
  REFUSED(at("d"), index, ": weight_map puts tensor 'model.layers.1.",
          "' in 'model-00002-of-00002.safetensors', which is not in ", at("d"));
  /* a tensor in another file than the index says */
  write_file(b, at("d/%s", names[1]));
  attnd_layer_set_unref(load(at("d")));
  /* a shard the index does not name is not read: its layer is not there */
  ck_assert_int_eq(lf_write_index(index, shards, names, 1), 0);
  attnd_layer_set_t *set = load(at("d"));
  ck_assert_uint_eq(attnd_layer_set_count(set), 1);
  ck_assert_str_eq(attnd_layer_set_get(set, 0)->file, at("d/%s", names[0]));
  const char *const unnamed[] = {names[1], NULL};
  check_skipped(set, at("d"), "model.safetensors.index.json", unnamed);
  attnd_layer_set_unref(set);
  static const char *const swapped[] = {names[1], names[0]};
  ck_assert_int_eq(lf_write_index(index, shards, swapped, 2), 0);
  REFUSED(at("d"), index, ": weight_map puts tensor 'model.layers.0.",
          "' in 'model-00002-of-00002.safetensors', but it is in another file");
  /* a tensor no file holds */
  text_at(index, "{\"weight_map\": {\"lm_head.weight\": "
                 "\"model-00001-of-00002.safetensors\"}}");
  REFUSED(at("d"), "weight_map puts tensor 'lm_head.weight' in "
                   "'model-00001-of-00002.safetensors', but no file holds it");
  /* the index names files of the directory, not paths: one through '..'
   * is refused although the shard it reaches is there */
  text_at(index,
          "{\"weight_map\": {\"model.layers.0.self_attn.q_proj.weight\": "
          "\"../d/model-00001-of-00002.safetensors\"}}");
  REFUSED(at("d"), index,
          ": weight_map puts tensor 'model.layers.0.self_attn.q_proj.weight' "
          "in '../d/model-00001-of-00002.safetensors', which is not in ",
          at("d"));
  text_at(index, "{\"metadata\": {}}");
  REFUSED(at("d"), index, ": no \"weight_map\" object");
  text_at(index, "{\"weight_map\": {}}");
  REFUSED(at("d"), index, ": weight_map names no file");
  text_at(index, "{\"weight_map\": {\"x\": 3}}");
  REFUSED(at("d"), "weight_map[\"x\"] is not a file name");
  lf_file_free(a);
  lf_file_free(b);
}
END_TEST

START_TEST(test_refuse_paths) {
  /* a path that does not exist, an empty directory, a bad file */
  REFUSED(at("nope.safetensors"), at("nope.safetensors"),
          ": No such file or directory");
  mkdir_at(at("empty"));
  text_at(at("empty/config.json"), "{}");
  REFUSED(at("empty"), at("empty"),
          ": no .safetensors file and no model.safetensors.index.json in "
          "this directory");
  text_at(at("bad.safetensors"), "not a safetensors file");
  REFUSED(at("bad.safetensors"), at("bad.safetensors"));
  /* a later path's failure fails the whole load */
  lf_shape_t s = {.E = 16, .H = 2};
  const char *meta[] = {"num_heads", "2", NULL};
  write_layer(at("ok.safetensors"), LF_LLAMA, ATTND_ST_F32, "", &s, 1, meta,
              NULL);
  char list[1200];
  snprintf(list, sizeof list, "%s,%s", at("ok.safetensors"),
           at("nope.safetensors"));
  REFUSED(list, at("nope.safetensors"));
  /* no layer: the expected names and what the file holds */
  lf_file_t *f = lf_file_new();
  int64_t shape[2] = {4, 4};
  ck_assert_int_eq(lf_add_tensor(f, "layers.0.attention.wq.weight",
                                 ATTND_ST_F32, 2, shape, NULL),
                   0);
  ck_assert_int_eq(lf_add_tensor(f, "mlp.weight", ATTND_ST_F32, 2, shape, NULL),
                   0);
  write_free(f, at("meta.safetensors"));
  REFUSED(at("meta.safetensors"), "no attention layer found in ",
          at("meta.safetensors"),
          ": expected tensors named like {p}in_proj_weight (torch_mha), "
          "{p}q_proj_weight (torch_mha), {p}attention.self.query.weight "
          "(bert), {p}self_attn.q_proj.weight (llama), {p}attn.c_attn.weight "
          "(gpt2); it holds 2 tensors: 'layers.0.attention.wq.weight', "
          "'mlp.weight'");
  /* a query name must follow a '.' or start the name */
  f = lf_file_new();
  add_layer(f, LF_GPT2, ATTND_ST_F32, "h.0.self_", &s, 1, NULL);
  write_free(f, at("near.safetensors"));
  REFUSED(at("near.safetensors"), "no attention layer found in ");
}
END_TEST

START_TEST(test_refuse_unsupported) {
  const char *path = at("u.safetensors");
  /* add_bias_kv */
  lf_shape_t t = {.E = 16, .H = 2};
  lf_file_t *f = lf_file_new();
  add_layer(f, LF_TORCH_MHA, ATTND_ST_F32, "x.", &t, 1, NULL);
  int64_t bk[3] = {1, 1, 16};
  ck_assert_int_eq(lf_add_tensor(f, "x.bias_k", ATTND_ST_F32, 3, bk, NULL), 0);
  ck_assert_int_eq(lf_meta(f, "num_heads", "2"), 0);
  write_free(f, path);
  REFUSED(path, "bias_k / bias_v (add_bias_kv) are not supported");
  /* BERT's relative positions */
  f = lf_file_new();
  add_layer(f, LF_BERT, ATTND_ST_F32, "", &t, 1, NULL);
  int64_t de[2] = {9, 8};
  ck_assert_int_eq(lf_add_tensor(f, "attention.self.distance_embedding.weight",
                                 ATTND_ST_F32, 2, de, NULL),
                   0);
  ck_assert_int_eq(lf_meta(f, "num_heads", "2"), 0);
  write_free(f, path);
  REFUSED(path, "relative position embeddings (distance_embedding)");
  /* GPT-2 without the usual scale */
  mkdir_at(at("g"));
  text_at(at("g/config.json"),
          "{\"n_head\": 2, \"scale_attn_by_inverse_layer_idx\": true}");
  write_layer(at("g/model.safetensors"), LF_GPT2, ATTND_ST_F32, "h.0.", &t, 1,
              NULL, NULL);
  REFUSED(at("g"), "only the scale 1/sqrt(head_dim) is supported");
}
END_TEST

/* ---- load throughput ----------------------------------------------------- */

/* Converts a BF16 Llama layer of ATTND_LAYERS_BENCH_MB megabytes (default
 * 4) and prints the rate; no timed assertion (the machine is shared). */
START_TEST(test_throughput) {
  const char *env = getenv("ATTND_LAYERS_BENCH_MB");
  double mb = env ? atof(env) : 4;
  /* four E × E weights of 2 bytes */
  int64_t E = (int64_t)(sqrt(mb * 1e6 / 8) / 64) * 64;
  if (E < 64)
    E = 64;
  size_t n = (size_t)(E * E);
  uint16_t *data = malloc(n * sizeof *data);
  ck_assert_ptr_nonnull(data);
  uint64_t rng = 1;
  for (size_t i = 0; i < n; i++) /* |x| < 2, finite: exponent under 128 */
    data[i] = (uint16_t)(attnd_splitmix64(&rng) & 0xbfff);
  static const char *const names[] = {"model.layers.0.self_attn.q_proj.weight",
                                      "model.layers.0.self_attn.k_proj.weight",
                                      "model.layers.0.self_attn.v_proj.weight",
                                      "model.layers.0.self_attn.o_proj.weight"};
  attnd_st_out_t t[4];
  for (int i = 0; i < 4; i++)
    t[i] = (attnd_st_out_t){.name = names[i],
                            .dtype = ATTND_ST_BF16,
                            .rank = 2,
                            .shape = {E, E},
                            .data = data};
  const char *keys[] = {"num_heads"}, *values[] = {"16"};
  char msg[512];
  ck_assert_msg(attnd_st_write(at("big.safetensors"), t, 4, keys, values, 1,
                               msg, sizeof msg) == 0,
                "%s", msg);
  free(data);
  attnd_layer_set_t *set = load(at("big.safetensors"));
  double s = attnd_layer_set_load_seconds(set);
  double bytes = 4.0 * (double)n * 2;
  fprintf(stderr,
          "check_layers: loaded %.0f MB of BF16 weights (E=%lld) in %.3f s: "
          "%.2f GB/s of file weights, %zu float32 bytes held\n",
          bytes / 1e6, (long long)E, s, bytes / s / 1e9,
          attnd_layer_set_bytes(set));
  ck_assert_uint_eq(attnd_layer_set_bytes(set), 4 * n * sizeof(float));
  attnd_layer_set_unref(set);
}
END_TEST

Suite *test_suite(void) {
  Suite *s = suite_create("layers");
  TCase *tc = tcase_create("load");
  tcase_add_checked_fixture(tc, tmp_make, tmp_remove);
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, test_conventions, 0, N_CONV_CASES * 4);
  tcase_add_loop_test(tc, test_cross_forward, 0, 4);
  tcase_add_test(tc, test_convention_names);
  tcase_add_test(tc, test_config_qwen3);
  tcase_add_test(tc, test_config_scalings);
  tcase_add_test(tc, test_config_gpt2);
  tcase_add_test(tc, test_config_sliding_window);
  tcase_add_test(tc, test_layer_types_read_once);
  tcase_add_test(tc, test_metadata_rope);
  tcase_add_test(tc, test_metadata_words);
  tcase_add_test(tc, test_metadata_window);
  tcase_add_test(tc, test_sharded);
  tcase_add_test(tc, test_sharded_meta);
  tcase_add_test(tc, test_paths);
  tcase_add_test(tc, test_unnamed_torch);
  tcase_add_test(tc, test_dir_files);
  tcase_add_test(tc, test_empty_list);
  tcase_add_test(tc, test_refcount);
  tcase_add_loop_test(tc, test_to_device, 0, 2);
  tcase_add_loop_test(tc, test_to_device_fails, 0, 2);
  tcase_add_test(tc, test_throughput);
  suite_add_tcase(s, tc);

  tc = tcase_create("refuse");
  tcase_add_checked_fixture(tc, tmp_make, tmp_remove);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_refuse_missing_tensor);
  tcase_add_test(tc, test_refuse_bad_shape);
  tcase_add_test(tc, test_refuse_heads);
  tcase_add_test(tc, test_refuse_config);
  tcase_add_test(tc, test_refuse_dtype_and_values);
  tcase_add_test(tc, test_refuse_duplicates);
  tcase_add_test(tc, test_refuse_index);
  tcase_add_test(tc, test_refuse_paths);
  tcase_add_test(tc, test_refuse_unsupported);
  suite_add_tcase(s, tc);
  return s;
}
