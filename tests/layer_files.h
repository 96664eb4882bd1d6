/* tests/layer_files.h: safetensors files of attention layers, written in
 * each naming convention attnd reads (server/model/layers.h), for the test
 * suites.
 *
 * A layer's weights are drawn from a seed in nn.Linear layout
 * [out_features, in_features], rounded to the file's dtype, and laid out as
 * the convention stores them (q, k and v stacked for torch's in_proj, the
 * Conv1D transposition of GPT-2). What comes back, lf_weights_t, is what a
 * loader must hold: the same float32 values, exactly, in nn.Linear layout.
 *
 * Use:
 *   lf_file_t *f = lf_file_new();
 *   lf_weights_t w;
 *   lf_add_layer(f, LF_LLAMA, ATTND_ST_BF16, "model.layers.0.", &shape, 7,
 *                &w, msg, sizeof msg);
 *   lf_meta(f, "num_heads", "8");
 *   lf_file_write(f, "/tmp/x/model.safetensors", msg, sizeof msg);
 *   lf_file_free(f);  ...  lf_weights_free(&w);
 * or lf_write for a file of one layer. Tensors can also be added, removed,
 * moved to another file (shards) and poked, to make the bad files of tests.
 *
 * No Check calls: functions return 0, or -1 with a message. The decoders
 * here are independent of server/model/safetensors.c. Any thread. */
#ifndef ATTND_TESTS_LAYER_FILES_H
#define ATTND_TESTS_LAYER_FILES_H

#include <stddef.h>
#include <stdint.h>

#include "model/safetensors.h"

typedef enum lf_convention {
  LF_TORCH_MHA,       /* {p}in_proj_weight [3E, E], {p}in_proj_bias [3E],
                         {p}out_proj.weight, {p}out_proj.bias */
  LF_TORCH_MHA_SPLIT, /* {p}q_proj_weight, k_proj_weight, v_proj_weight
                         (kdim, vdim), in_proj_bias, out_proj.* */
  LF_BERT,            /* {p}attention.self.{query,key,value}.{weight,bias},
                         {p}attention.output.dense.{weight,bias} */
  LF_LLAMA,           /* {p}self_attn.{q,k,v,o}_proj.{weight,bias},
                         {p}self_attn.{q,k}_norm.weight */
  LF_GPT2             /* {p}attn.c_attn.{weight [E, 3E],bias},
                         {p}attn.c_proj.{weight [E, Eo],bias} */
} lf_convention_t;

/* Bits of lf_shape_t.bias. The stacked forms (torch's in_proj_bias,
 * GPT-2's c_attn.bias) take q, k and v together. */
enum { LF_BQ = 1, LF_BK = 2, LF_BV = 4, LF_BO = 8, LF_BIAS_ALL = 15 };

/* A layer's sizes; 0 means the default. */
typedef struct lf_shape {
  int64_t E;      /* q's in_features (required) */
  int64_t H;      /* heads (required) */
  int64_t Hkv;    /* key/value heads; 0: H */
  int64_t Dh, Dv; /* head dims; Dh 0: E / H, Dv 0: Dh */
  int64_t Eo;     /* o's out_features; 0: E */
  int64_t Ek, Ev; /* k's and v's in_features; 0: E */
  unsigned bias;  /* LF_B* */
  int qk_norm;    /* llama: q_norm and k_norm [Dh] */
} lf_shape_t;

/* The float32 weights a loader must hold, nn.Linear layout; NULL when not
 * written. Owns its buffers (lf_weights_free). */
typedef struct lf_weights {
  lf_shape_t shape; /* with every default filled in */
  float *q_weight, *k_weight, *v_weight, *o_weight;
  float *q_bias, *k_bias, *v_bias, *o_bias;
  float *q_norm, *k_norm;
  size_t bytes; /* float32 bytes of the above */
} lf_weights_t;

void lf_weights_free(lf_weights_t *w);

/* Tensors and metadata to be written as one file. */
typedef struct lf_file lf_file_t;

lf_file_t *lf_file_new(void);
void lf_file_free(lf_file_t *f);

/* Adds one layer's tensors, named prefix + the convention's suffixes, in
 * dtype (F64, F32, F16 or BF16), with values drawn from seed; fills *w (may
 * be NULL) with what a loader must hold. Fails for a shape the convention
 * cannot store (torch's in_proj and GPT-2 need E = H·Dh = Hkv·Dh = H·Dv and
 * Ek = Ev = E). */
int lf_add_layer(lf_file_t *f, lf_convention_t conv, attnd_st_dtype_t dtype,
                 const char *prefix, const lf_shape_t *s, uint64_t seed,
                 lf_weights_t *w, char *msg, size_t msz);

/* Adds a tensor: values[0 .. product of shape) converted to dtype (float
 * dtypes rounded to nearest; integer ones truncated; NULL values: zeros). */
int lf_add_tensor(lf_file_t *f, const char *name, attnd_st_dtype_t dtype,
                  int rank, const int64_t *shape, const float *values);
/* Removes the tensor named name; moves it to another file; sets its
 * element `index` to value, in its dtype. Each returns -1 when there is no
 * such tensor (or index). */
int lf_remove(lf_file_t *f, const char *name);
int lf_move(lf_file_t *from, lf_file_t *to, const char *name);
int lf_set(lf_file_t *f, const char *name, int64_t index, double value);
/* Sets the __metadata__ entry key (replacing it). */
int lf_meta(lf_file_t *f, const char *key, const char *value);

/* Writes the file at path (attnd_st_write). */
int lf_file_write(const lf_file_t *f, const char *path, char *msg, size_t msz);

/* One file of one layer: lf_add_layer, then the metadata given as key,
 * value, ..., NULL (meta may be NULL), then lf_file_write. */
int lf_write(const char *path, lf_convention_t conv, attnd_st_dtype_t dtype,
             const char *prefix, const lf_shape_t *s, uint64_t seed,
             const char *const *meta, lf_weights_t *w, char *msg, size_t msz);

/* Writes a shard index (model.safetensors.index.json) at path: its
 * weight_map puts each tensor of shards[i] in the file named names[i]. */
int lf_write_index(const char *path, const lf_file_t *const *shards,
                   const char *const *names, size_t n);

/* Writes text to path (a config.json, an index). */
int lf_write_text(const char *path, const char *text);

/* The float32 value of an F16 or BF16 number. */
float lf_f16_to_f32(uint16_t h);
float lf_bf16_to_f32(uint16_t h);

#endif
