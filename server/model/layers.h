/* server/model/layers.h: attention layers held resident, discovered in
 * safetensors files by the naming conventions of PyTorch, BERT, Llama and
 * GPT-2 (see attnd_layers_load), their weights converted to float32.
 *
 * A set of layers is immutable once loaded and reference-counted: a
 * request holds the set it decoded against until it is freed, so that a
 * reload (SIGHUP) swaps in a new set while requests in flight finish on
 * the old weights. Loading is the only I/O; any thread. */
#ifndef ATTND_MODEL_LAYERS_H
#define ATTND_MODEL_LAYERS_H

#include <stddef.h>
#include <stdint.h>

#include "attn/attn.h"
#include "sched/budget.h"

/* The naming conventions: X(NAME, "spelling") */
#define ATTND_CONVENTION_MAP(X)                                                \
  X(TORCH_MHA, "torch_mha") /* nn.MultiheadAttention's state_dict */           \
  X(BERT, "bert")           /* {p}attention.self.query ... output.dense */     \
  X(LLAMA, "llama")         /* {p}self_attn.{q,k,v,o}_proj (Mistral, Qwen) */  \
  X(GPT2, "gpt2")           /* {p}attn.c_attn, c_proj: Conv1D, input-major */

typedef enum attnd_convention {
#define CONV_ENUM(name, text) ATTND_CONV_##name,
  ATTND_CONVENTION_MAP(CONV_ENUM)
#undef CONV_ENUM
} attnd_convention_t;

const char *attnd_convention_name(attnd_convention_t c);

/* One layer: what a request with "layer" takes from it. Weights are
 * float32, nn.Linear layout [out_features, in_features], owned by the set;
 * absent ones NULL. */
typedef struct attnd_layer {
  const char *name; /* "model.layers.0.self_attn" */
  const char *file; /* the file that holds its query weight */
  attnd_convention_t convention;
  const char *file_dtype; /* the query weight's dtype in the file, "BF16" */
  /* embed dim: the query projection's in_features; kdim and vdim: the
   * key's and the value's, E but in cross-attention (attnd_layer_cross) */
  int64_t E, Ek, Ev;
  int64_t H, Hkv, Dh, Dv;
  int64_t Eo; /* output dim: o_weight's out_features */
  const float *q_weight, *k_weight, *v_weight, *o_weight;
  const float *q_bias, *k_bias, *v_bias, *o_bias;
  const float *q_norm, *k_norm; /* [Dh] each (Qwen3), or NULL */
  float norm_eps;               /* with q_norm/k_norm: rms_norm_eps */
  attn_rope_t rope;             /* style NONE for none */
  attn_causal_t causal;         /* the default: BOTTOM_RIGHT for GPT-2 and
                                   Llama, NONE for the others */
  int64_t window;               /* the default sliding window: query i sees
                                   keys i - window + 1 .. i (mask.window.left
                                   window - 1); 0: none (sliding_window in
                                   config.json or the __metadata__,
                                   attnd__resolve_window) */
  size_t bytes;                 /* float32 weights held */
  /* The eight projection tensors above, copied to GPU memory
   * (attnd_layer_set_to_device) in one block: the biases as float32, the
   * weights as float32 (weight, in a set copied in fp32) or as bfloat16
   * (weight16, in bf16); all NULL when the set is not resident there. The
   * norms stay in host memory, where the core reads them. */
  struct {
    const void *block;
    const float *q_weight, *k_weight, *v_weight, *o_weight;
    const void *weight16[4]; /* q, k, v, o */
    const float *q_bias, *k_bias, *v_bias, *o_bias;
  } gpu;
} attnd_layer_t;

/* Whether l is a cross-attention layer: its key or value width differs
 * from its embed dim, so that a request must give key [., Ek] and value
 * [., Ev] (neither can default to the query). */
int attnd_layer_cross(const attnd_layer_t *l);

typedef struct attnd_layer_set attnd_layer_set_t;

/* Loads every layer found at `paths`, a comma-separated list of
 * .safetensors files, each read whatever its name, and directories. Of a
 * directory's *.safetensors files, as transformers' from_pretrained reads
 * them: model.safetensors alone when it is there; else, with
 * model.safetensors.index.json, the files its weight_map names (each must
 * be there, and hold the tensors it puts in it); else every one. Its
 * config.json goes with them. The files left out are named in the set
 * (attnd_layer_set_skip). An empty list gives an empty set. Returns 0 with a
 * new set (one reference), or -1 with msg naming the file, the tensor and what
 * is wrong (a bad file, an unknown convention, missing head counts, an unknown
 * rope_scaling type, a name found twice). */
int attnd_layers_load(const char *paths, attnd_layer_set_t **out, char *msg,
                      size_t msz);

/* Another reference to set (NULL is fine); the last unref frees it. */
attnd_layer_set_t *attnd_layer_set_ref(attnd_layer_set_t *set);
void attnd_layer_set_unref(attnd_layer_set_t *set);

/* From now until the set is freed, its float32 bytes count in budget
 * (borrowed: it must outlive the set) as memory already allocated, never
 * refused: a reload charges the set it replaced, which requests in flight
 * and sessions created before it may hold for long, so that requests are
 * not admitted into the memory it still occupies. Once per set. */
void attnd_layer_set_charge(attnd_layer_set_t *set, attnd_budget_t *budget);

size_t attnd_layer_set_count(const attnd_layer_set_t *set);
/* Layer i, in name order; or the layer named `name`, or NULL. */
const attnd_layer_t *attnd_layer_set_get(const attnd_layer_set_t *set,
                                         size_t i);
const attnd_layer_t *attnd_layer_set_find(const attnd_layer_set_t *set,
                                          const char *name);
/* The float32 bytes the set holds, and the seconds loading took. */
size_t attnd_layer_set_bytes(const attnd_layer_set_t *set);
double attnd_layer_set_load_seconds(const attnd_layer_set_t *set);

/* The *.safetensors files of one directory of the list that the load left
 * out: the directory as listed, the file whose presence chose the others
 * ("model.safetensors" or "model.safetensors.index.json"), and the names
 * of those left out, sorted. */
typedef struct attnd_layer_skip {
  const char *dir;
  const char *by;
  const char *const *files;
  size_t n;
} attnd_layer_skip_t;

/* The directories that left files out, in the list's order, and the i-th
 * of them (NULL past the last); they live as long as the set. */
size_t attnd_layer_set_skip_count(const attnd_layer_set_t *set);
const attnd_layer_skip_t *attnd_layer_set_skip(const attnd_layer_set_t *set,
                                               size_t i);
/* The sets with layers alive in the process and their float32 bytes: the
 * one loaded last, and each older one until its last reference goes (a
 * request in flight, or a session created before the reload). */
void attnd_layer_sets_alive(size_t *sets, size_t *bytes);

/* Copies every layer's projection weights and biases into device memory
 * from `mem` (one block a layer; mem is copied): the weights as float32,
 * or with bf16 rounded to bfloat16 (as the cuda backend rounds them), the
 * biases as float32. Takes their bytes from `budget` (borrowed: it must
 * outlive the set) for as long as the set lives, so that the cuda backend
 * reads them in place (attn_params_t.weights_on_device, weights_bf16)
 * instead of copying them in at every call. All or nothing: returns 0
 * with every layer's gpu pointers set, or -1 with msg saying why (the
 * budget short, out of device memory, a copy failed), nothing held and
 * every gpu pointer NULL. Call it before the set is shared, once. */
int attnd_layer_set_to_device(attnd_layer_set_t *set,
                              const attnd_device_memory_t *mem, int bf16,
                              attnd_budget_t *budget, char *msg, size_t msz);
/* The device bytes the set holds: 0 unless attnd_layer_set_to_device. */
int64_t attnd_layer_set_device_bytes(const attnd_layer_set_t *set);

#endif
