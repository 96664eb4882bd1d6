/* server/model/layer_build.h: what the three files of a layer load share
 * (layers.c builds the layers and holds the set; layer_source.c opens a
 * path's files and gathers their tensors; layer_params.c resolves head
 * counts and rope from config.json and __metadata__). Internal to
 * server/model/. */
#ifndef ATTND_LAYER_BUILD_H
#define ATTND_LAYER_BUILD_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "model/layers.h"
#include "model/safetensors.h"

/* ---- the conventions ----------------------------------------------------- */

/* The parts of a layer, in the order of a form's names. */
enum { Q_W, K_W, V_W, O_W, Q_B, K_B, V_B, O_B, Q_N, K_N, N_PARTS };

/* One way of naming a layer's tensors: suffixes of the prefix p. */
typedef struct form {
  attnd_convention_t conv;
  const char *layer; /* appended to p to name the layer; NULL: p less its
                        '.' (torch_mha) */
  /* names[Q_W] marks a layer. With fused_w, it holds q, k and v stacked
   * ([3E, E], or [E, 3E] transposed) and K_W, V_W are NULL; with fused_b,
   * names[Q_B] holds the three biases. NULL: not in this form. */
  const char *names[N_PARTS];
  int fused_w, fused_b;
  int transposed; /* GPT-2's Conv1D: weights stored [in, out] */
} form_t;

/* ---- one path while it loads --------------------------------------------- */

/* A tensor of the path, in the table sorted by name. */
typedef struct entry {
  const attnd_st_tensor_t *t;
  size_t file; /* index into source_t.files */
} entry_t;

/* One path of the list: its files mapped, their tensors gathered, its
 * config.json and shard indexes parsed. Owns all of it (source_close). */
typedef struct source {
  const char *path; /* as listed; borrowed */
  int is_dir;
  char *unnamed; /* the name of a torch_mha layer with an empty prefix: the
                    file's name less ".safetensors", or the directory's */
  char **files;  /* each file's path, sorted */
  attnd_st_mapped_t *maps;
  size_t n_files, n_mapped;
  entry_t *tensors; /* sorted by name */
  size_t n_tensors;
  char *config_path; /* a directory's config.json, whether or not it exists */
  json_t *config;    /* its object, or NULL */
  /* its layer_types, read once for all the path's layers (a layer that
   * read them itself cost L layers × T entries): the index of the first
   * entry that is neither "full_attention" nor "sliding_attention" (the
   * array's size when none), and whether it has each (any[1]: sliding) */
  size_t types_bad;
  int types_any[2];
  char *index_path; /* model.safetensors.index.json, where it chose the
                       files */
  json_t *index;    /* its object, or NULL */
  /* a directory's *.safetensors files that the rule (open_dir) left out,
   * by name, sorted, and the file whose presence chose the others */
  char **skipped;
  size_t n_skipped;
  const char *chosen_by;
} source_t;

/* ---- one layer ----------------------------------------------------------- */

/* Where one weight comes from: rows [first, first + out) of a stored
 * [rows, in] tensor, or with `transposed` its columns [first, first + out)
 * of a stored [in, cols] one; a bias or norm is a vector (in = 1). */
typedef struct part {
  const entry_t *e; /* NULL: absent */
  int64_t first, out, in;
  int transposed;
} part_t;

/* A layer being built: its tensors, the sources of its parameters, and
 * the layer itself, which owns what it holds so far. */
typedef struct build {
  const source_t *src;
  const form_t *form;
  const entry_t *q;   /* the query weight (names[Q_W]) */
  const char *prefix; /* its name; p is its first plen characters */
  size_t plen;
  const char *file;            /* the file that holds the query weight */
  const attnd_st_file_t *st;   /* its parsed header: __metadata__ */
  part_t part[N_PARTS];        /* resolved shapes */
  const entry_t *raw[N_PARTS]; /* the tensors found by name */
  const entry_t *tmp_e;        /* what tmp holds converted (transposed */
  float *tmp;                  /* weights convert once, whole) */
  attnd_layer_t l;
  char *msg;
  size_t msz;
} build_t;

/* ---- layer_source.c ------------------------------------------------------ */

/* Opens s->path: maps its files, gathers their tensors, parses config.json
 * and the shard indexes. 0, or -1 with msg. */
int attnd__source_open(source_t *s, char *msg, size_t msz);
void attnd__source_close(source_t *s);
/* The tensor named p[0..plen) followed by suffix, or NULL. */
const entry_t *attnd__find_entry(const source_t *s, const char *p, size_t plen,
                                 const char *suffix);
int attnd__ends_with(const char *s, const char *suffix);
/* Entries of layer_types read (attnd__source_open), counted for
 * check_layers: once each a path, not once each a layer. */
extern _Thread_local uint64_t attnd__layer_types_read;

/* ---- layer_params.c ------------------------------------------------------ */

enum { FROM_NONE, FROM_CONFIG, FROM_META };
json_t *attnd__config_get(const build_t *b, const char *key);
const char *attnd__meta_get(const build_t *b, const char *key);
int attnd__param_num(build_t *b, const char *cfg, const char *meta,
                     double *out);
/* How a refusal names a parameter that came from `from`: "<config.json>:
 * 'key'" or "__metadata__ 'key'". buf, n long, holds it. */
const char *attnd__param_where(const build_t *b, int from, const char *key,
                               char *buf, size_t n);
/* b->l's rope (llama: Llama-family defaults), and its head counts and
 * sizes, checked against the tensors' shapes. 0, or -1 with the message. */
int attnd__resolve_rope(build_t *b, int llama);
int attnd__resolve_heads(build_t *b);
/* b->l's sliding window: a llama layer's from config.json (sliding_window,
 * use_sliding_window, max_window_layers, layer_types), as transformers
 * reads them, refused where it depends on a layer index the name lacks;
 * without config.json, or in another convention, the __metadata__'s
 * sliding_window. 0, or -1 with the message. */
int attnd__resolve_window(build_t *b, int llama);

/* ---- layers.c ------------------------------------------------------------ */

/* "layer '<name>' in <file>: " and the message: -1. */
int attnd__layer_fail(build_t *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Fails with "tensor 'x' has shape [..], expected <what>". */
int attnd__bad_shape(build_t *b, const entry_t *e, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
