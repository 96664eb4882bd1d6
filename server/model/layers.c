/* server/model/layers.c: attention layers found in safetensors files and
 * held resident as float32 (layers.h).
 *
 * A load runs in passes, path by path of the list:
 *   1. open: the file, or a directory's *.safetensors files (checked
 *      against its *.safetensors.index.json) and its config.json; map and
 *      parse every file;
 *   2. gather: the tensors of all the path's files in one table sorted by
 *      name, so that a layer may span shards (a name in two files is an
 *      error);
 *   3. discover: a tensor whose name ends as a convention's query weight,
 *      after an empty prefix or one that ends with '.', starts a layer; its
 *      other tensors are looked up by name;
 *   4. resolve: head counts, rope, causal and norm_eps from config.json,
 *      then the __metadata__ of the file that holds the query weight, then
 *      the convention's defaults; every shape is checked against them;
 *   5. convert: each weight into a new 64-byte-aligned float32 buffer, split
 *      out of a fused q/k/v tensor and transposed where the convention
 *      stores it input-major.
 * The path's files are unmapped when it is done. Then the layers of all
 * paths are sorted by name, and a name found twice is an error. */
#include "model/layers.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "codec/util.h"
#include "model/safetensors.h"

static const char *const CONVENTION_NAMES[] = {
#define CONV_NAME(name, text) text,
    ATTND_CONVENTION_MAP(CONV_NAME)
#undef CONV_NAME
};

const char *attnd_convention_name(attnd_convention_t c) {
  size_t n = sizeof CONVENTION_NAMES / sizeof *CONVENTION_NAMES;
  return (size_t)c < n ? CONVENTION_NAMES[c] : "unknown";
}

struct attnd_layer_set {
  atomic_size_t refs;
  attnd_layer_t *layers; /* sorted by name; each owns its name, file and
                            buffers */
  size_t n, cap;
  size_t bytes;
  double seconds;
};

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

static const form_t FORMS[] = {
    {.conv = ATTND_CONV_TORCH_MHA,
     .names = {[Q_W] = "in_proj_weight",
               [O_W] = "out_proj.weight",
               [Q_B] = "in_proj_bias",
               [O_B] = "out_proj.bias"},
     .fused_w = 1,
     .fused_b = 1},
    {.conv = ATTND_CONV_TORCH_MHA, /* kdim or vdim given */
     .names = {[Q_W] = "q_proj_weight",
               [K_W] = "k_proj_weight",
               [V_W] = "v_proj_weight",
               [O_W] = "out_proj.weight",
               [Q_B] = "in_proj_bias",
               [O_B] = "out_proj.bias"},
     .fused_b = 1},
    {.conv = ATTND_CONV_BERT,
     .layer = "attention",
     .names = {[Q_W] = "attention.self.query.weight",
               [K_W] = "attention.self.key.weight",
               [V_W] = "attention.self.value.weight",
               [O_W] = "attention.output.dense.weight",
               [Q_B] = "attention.self.query.bias",
               [K_B] = "attention.self.key.bias",
               [V_B] = "attention.self.value.bias",
               [O_B] = "attention.output.dense.bias"}},
    {.conv = ATTND_CONV_LLAMA,
     .layer = "self_attn",
     .names = {[Q_W] = "self_attn.q_proj.weight",
               [K_W] = "self_attn.k_proj.weight",
               [V_W] = "self_attn.v_proj.weight",
               [O_W] = "self_attn.o_proj.weight",
               [Q_B] = "self_attn.q_proj.bias",
               [K_B] = "self_attn.k_proj.bias",
               [V_B] = "self_attn.v_proj.bias",
               [O_B] = "self_attn.o_proj.bias",
               [Q_N] = "self_attn.q_norm.weight",
               [K_N] = "self_attn.k_norm.weight"}},
    {.conv = ATTND_CONV_GPT2,
     .layer = "attn",
     .names = {[Q_W] = "attn.c_attn.weight",
               [O_W] = "attn.c_proj.weight",
               [Q_B] = "attn.c_attn.bias",
               [O_B] = "attn.c_proj.bias"},
     .fused_w = 1,
     .fused_b = 1,
     .transposed = 1},
};
#define N_FORMS (sizeof FORMS / sizeof *FORMS)

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
  char **index_paths;
  json_t **indexes; /* the *.safetensors.index.json objects */
  size_t n_indexes;
} source_t;

static void source_close(source_t *s) {
  for (size_t i = 0; i < s->n_mapped; i++)
    attnd_st_unmap(&s->maps[i]);
  for (size_t i = 0; i < s->n_files; i++)
    free(s->files[i]);
  for (size_t i = 0; i < s->n_indexes; i++) {
    free(s->index_paths[i]);
    json_decref(s->indexes[i]);
  }
  json_decref(s->config);
  free(s->maps);
  free(s->files);
  free(s->tensors);
  free(s->index_paths);
  free(s->indexes);
  free(s->config_path);
  free(s->unnamed);
  memset(s, 0, sizeof *s);
}

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* dir/name, without doubling a '/' the directory ends with. New string. */
static char *join(const char *dir, const char *name) {
  size_t n = strlen(dir);
  while (n > 1 && dir[n - 1] == '/')
    n--;
  size_t k = strlen(name);
  char *p = malloc(n + k + 2);
  if (p) {
    memcpy(p, dir, n);
    p[n] = '/';
    memcpy(p + n + 1, name, k + 1);
  }
  return p;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Appends a copy of s to the array *v of *n strings. */
static int push_str(char ***v, size_t *n, const char *s) {
  char **grown = realloc(*v, (*n + 1) * sizeof *grown);
  if (!grown)
    return -1;
  *v = grown;
  if (!(grown[*n] = strdup(s)))
    return -1;
  (*n)++;
  return 0;
}

static json_t *load_json(const char *path, char *msg, size_t msz) {
  json_error_t jerr;
  json_t *j = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
  if (!j) {
    attnd_fail(msg, msz, "%s: line %d: %s", path, jerr.line, jerr.text);
    return NULL;
  }
  if (!json_is_object(j)) {
    json_decref(j);
    attnd_fail(msg, msz, "%s: not a JSON object", path);
    return NULL;
  }
  return j;
}

/* A directory: its *.safetensors files (following links, as in the Hugging
 * Face cache), its shard indexes and its config.json. */
static int open_dir(source_t *s, char *msg, size_t msz) {
  DIR *d = opendir(s->path);
  if (!d)
    return attnd_fail(msg, msz, "%s: %s", s->path, strerror(errno));
  char **names = NULL, **index_names = NULL;
  size_t n_names = 0, n_index_names = 0;
  int rc = 0;
  struct dirent *de;
  while (rc == 0 && (de = readdir(d))) {
    int shard = ends_with(de->d_name, ".safetensors");
    int index = ends_with(de->d_name, ".safetensors.index.json");
    if (!shard && !index)
      continue;
    char *full = join(s->path, de->d_name);
    struct stat st;
    if (!full)
      rc = attnd_fail(msg, msz, "out of memory");
    else if (stat(full, &st) < 0)
      rc = attnd_fail(msg, msz, "%s: %s", full, strerror(errno));
    else if (!S_ISREG(st.st_mode))
      rc = attnd_fail(msg, msz, "%s: not a regular file", full);
    else if (push_str(shard ? &names : &index_names,
                      shard ? &n_names : &n_index_names, de->d_name) < 0)
      rc = attnd_fail(msg, msz, "out of memory");
    free(full);
  }
  closedir(d);
  if (rc == 0 && n_names == 0)
    rc = attnd_fail(msg, msz, "%s: no .safetensors file in this directory",
                    s->path);
  if (rc == 0) {
    qsort(names, n_names, sizeof *names, cmp_str);
    if (n_index_names)
      qsort(index_names, n_index_names, sizeof *index_names, cmp_str);
  }
  /* Every file an index names must be here (the tensors it puts in each
   * are checked once the files are parsed). */
  for (size_t i = 0; rc == 0 && i < n_index_names; i++) {
    char *ipath = join(s->path, index_names[i]);
    json_t *idx = ipath ? load_json(ipath, msg, msz) : NULL;
    if (!ipath)
      rc = attnd_fail(msg, msz, "out of memory");
    else if (!idx)
      rc = -1;
    json_t *map = idx ? json_object_get(idx, "weight_map") : NULL;
    if (idx && !json_is_object(map))
      rc = attnd_fail(msg, msz, "%s: no \"weight_map\" object", ipath);
    const char *tensor;
    json_t *file;
    if (rc == 0)
      json_object_foreach(map, tensor, file) {
        const char *f = json_string_value(file);
        if (!f) {
          rc = attnd_fail(msg, msz, "%s: weight_map[\"%s\"] is not a file name",
                          ipath, tensor);
          break;
        }
        if (!bsearch(&f, names, n_names, sizeof *names, cmp_str)) {
          rc = attnd_fail(msg, msz,
                          "%s: weight_map puts tensor '%s' in '%s', which is "
                          "not in %s",
                          ipath, tensor, f, s->path);
          break;
        }
      }
    if (rc == 0) {
      json_t **grown = realloc(s->indexes, (i + 1) * sizeof *grown);
      if (grown)
        s->indexes = grown;
      if (!grown || push_str(&s->index_paths, &s->n_indexes, ipath) < 0)
        rc = attnd_fail(msg, msz, "out of memory");
      else {
        s->indexes[i] = idx;
        idx = NULL;
      }
    }
    json_decref(idx);
    free(ipath);
  }
  for (size_t i = 0; rc == 0 && i < n_names; i++) {
    char *full = join(s->path, names[i]);
    if (!full || push_str(&s->files, &s->n_files, full) < 0)
      rc = attnd_fail(msg, msz, "out of memory");
    free(full);
  }
  for (size_t i = 0; i < n_names; i++)
    free(names[i]);
  for (size_t i = 0; i < n_index_names; i++)
    free(index_names[i]);
  free(names);
  free(index_names);
  if (rc < 0)
    return -1;

  s->config_path = join(s->path, "config.json");
  if (!s->config_path)
    return attnd_fail(msg, msz, "out of memory");
  struct stat st;
  if (stat(s->config_path, &st) < 0) {
    if (errno != ENOENT)
      return attnd_fail(msg, msz, "%s: %s", s->config_path, strerror(errno));
    return 0;
  }
  s->config = load_json(s->config_path, msg, msz);
  return s->config ? 0 : -1;
}

/* The last component of path (trailing '/' ignored), less `suffix` when it
 * ends so and something is left. New string. */
static char *base_name(const char *path, const char *suffix) {
  size_t end = strlen(path);
  while (end > 1 && path[end - 1] == '/')
    end--;
  size_t start = end;
  while (start > 0 && path[start - 1] != '/')
    start--;
  size_t k = strlen(suffix);
  if (end - start > k && memcmp(path + end - k, suffix, k) == 0)
    end -= k;
  return strndup(path + start, end - start);
}

static int cmp_entry(const void *a, const void *b) {
  return strcmp(((const entry_t *)a)->t->name, ((const entry_t *)b)->t->name);
}

/* The entry named p[0..plen) + suffix, or NULL. */
static const entry_t *find_entry(const source_t *s, const char *p, size_t plen,
                                 const char *suffix) {
  size_t lo = 0, hi = s->n_tensors;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    const char *name = s->tensors[mid].t->name;
    int c = strncmp(p, name, plen);
    if (c == 0)
      c = strcmp(suffix, name + plen);
    if (c == 0)
      return &s->tensors[mid];
    if (c < 0)
      hi = mid;
    else
      lo = mid + 1;
  }
  return NULL;
}

/* Passes 1 and 2: opens the path, maps its files and gathers their
 * tensors. */
static int source_open(source_t *s, char *msg, size_t msz) {
  struct stat st;
  if (stat(s->path, &st) < 0)
    return attnd_fail(msg, msz, "%s: %s", s->path, strerror(errno));
  if (S_ISDIR(st.st_mode)) {
    s->is_dir = 1;
    char *real = realpath(s->path, NULL); /* "." has a name too */
    s->unnamed = base_name(real ? real : s->path, "");
    free(real);
    if (open_dir(s, msg, msz) < 0)
      return -1;
  } else if (S_ISREG(st.st_mode)) {
    s->unnamed = base_name(s->path, ".safetensors");
    if (push_str(&s->files, &s->n_files, s->path) < 0)
      return attnd_fail(msg, msz, "out of memory");
  } else {
    return attnd_fail(msg, msz, "%s: not a file or directory", s->path);
  }
  if (!s->unnamed)
    return attnd_fail(msg, msz, "out of memory");

  s->maps = calloc(s->n_files, sizeof *s->maps);
  if (!s->maps)
    return attnd_fail(msg, msz, "out of memory");
  size_t total = 0;
  for (; s->n_mapped < s->n_files; s->n_mapped++) {
    if (attnd_st_map(s->files[s->n_mapped], &s->maps[s->n_mapped], msg, msz) <
        0)
      return -1;
    total += s->maps[s->n_mapped].file.n;
  }
  s->tensors = malloc((total ? total : 1) * sizeof *s->tensors);
  if (!s->tensors)
    return attnd_fail(msg, msz, "out of memory");
  for (size_t f = 0; f < s->n_files; f++)
    for (size_t i = 0; i < s->maps[f].file.n; i++)
      s->tensors[s->n_tensors++] =
          (entry_t){.t = &s->maps[f].file.tensors[i], .file = f};
  qsort(s->tensors, s->n_tensors, sizeof *s->tensors, cmp_entry);
  for (size_t i = 1; i < s->n_tensors; i++)
    if (strcmp(s->tensors[i - 1].t->name, s->tensors[i].t->name) == 0)
      return attnd_fail(msg, msz, "%s: tensor '%s' is in both %s and %s",
                        s->path, s->tensors[i].t->name,
                        s->files[s->tensors[i - 1].file],
                        s->files[s->tensors[i].file]);

  /* Each tensor an index names must be in the file it names. */
  for (size_t i = 0; i < s->n_indexes; i++) {
    const char *tensor;
    json_t *file;
    json_object_foreach(json_object_get(s->indexes[i], "weight_map"), tensor,
                        file) {
      const entry_t *e = find_entry(s, "", 0, tensor);
      const char *in = e ? s->files[e->file] : NULL;
      const char *base = in ? strrchr(in, '/') : NULL;
      if (!e || strcmp(base ? base + 1 : in, json_string_value(file)) != 0)
        return attnd_fail(msg, msz,
                          "%s: weight_map puts tensor '%s' in '%s', but %s",
                          s->index_paths[i], tensor, json_string_value(file),
                          e ? "it is in another file" : "no file holds it");
    }
  }
  return 0;
}

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

static int layer_fail(build_t *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int layer_fail(build_t *b, const char *fmt, ...) {
  int n = snprintf(b->msg, b->msz, "layer '%s' in %s: ", b->l.name, b->file);
  if (n >= 0 && (size_t)n < b->msz) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->msg + n, b->msz - (size_t)n, fmt, ap);
    va_end(ap);
  }
  return -1;
}

static void layer_free(attnd_layer_t *l) {
  const float *bufs[] = {l->q_weight, l->k_weight, l->v_weight, l->o_weight,
                         l->q_bias,   l->k_bias,   l->v_bias,   l->o_bias,
                         l->q_norm,   l->k_norm};
  for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
    free((void *)bufs[i]);
  free((void *)l->name);
  free((void *)l->file);
  memset(l, 0, sizeof *l);
}

static const char *shape_of(const attnd_st_tensor_t *t, char *buf, size_t n) {
  attnd_shape_text(buf, n, t->rank, t->shape, ", ");
  return buf;
}

/* Fails with "tensor 'x' has shape [..], expected <what>". */
static int bad_shape(build_t *b, const entry_t *e, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int bad_shape(build_t *b, const entry_t *e, const char *fmt, ...) {
  char want[160], got[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(want, sizeof want, fmt, ap);
  va_end(ap);
  return layer_fail(b, "tensor '%s' has shape %s, expected %s", e->t->name,
                    shape_of(e->t, got, sizeof got), want);
}

/* ---- parameters: config.json, then __metadata__ -------------------------- */

enum { FROM_NONE, FROM_CONFIG, FROM_META };

/* config.json's value of key (NULL key or a JSON null: absent). */
static json_t *config_get(const build_t *b, const char *key) {
  json_t *v =
      key && b->src->config ? json_object_get(b->src->config, key) : NULL;
  return json_is_null(v) ? NULL : v;
}

static const char *meta_get(const build_t *b, const char *key) {
  return key ? attnd_st_meta(b->st, key) : NULL;
}

/* An integer from config.json's cfg (or cfg2), else the metadata's meta.
 * Returns FROM_*, or -1 with the message when a value is not a positive
 * integer. */
static int param_int(build_t *b, const char *cfg, const char *cfg2,
                     const char *meta, int64_t *out) {
  const char *key = cfg;
  json_t *v = config_get(b, key);
  if (!v && (v = config_get(b, cfg2)))
    key = cfg2;
  if (v) {
    if (!json_is_integer(v) || json_integer_value(v) < 1)
      return layer_fail(b, "%s: '%s' must be a positive integer",
                        b->src->config_path, key);
    *out = json_integer_value(v);
    return FROM_CONFIG;
  }
  const char *s = meta_get(b, meta);
  if (!s)
    return FROM_NONE;
  char *end;
  errno = 0;
  long long x = strtoll(s, &end, 10);
  if (end == s || *end || errno || x < 1)
    return layer_fail(b, "__metadata__ '%s' is '%s', not a positive integer",
                      meta, s);
  *out = x;
  return FROM_META;
}

/* A finite number, as param_int. */
static int param_num(build_t *b, const char *cfg, const char *meta,
                     double *out) {
  json_t *v = config_get(b, cfg);
  if (v) {
    if (!json_is_number(v) || !isfinite(json_number_value(v)))
      return layer_fail(b, "%s: '%s' must be a number", b->src->config_path,
                        cfg);
    *out = json_number_value(v);
    return FROM_CONFIG;
  }
  const char *s = meta_get(b, meta);
  if (!s)
    return FROM_NONE;
  char *end;
  errno = 0;
  double x = strtod(s, &end);
  if (end == s || *end || errno || !isfinite(x))
    return layer_fail(b, "__metadata__ '%s' is '%s', not a finite number", meta,
                      s);
  *out = x;
  return FROM_META;
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
    return layer_fail(b, "%s rope_scaling: '%s' must be a number", where, key);
  *out = json_number_value(v);
  return 0;
}

/* rope_scaling: {"type" or "rope_type": "default" | "linear" (factor) |
 * "llama3" (factor, low_freq_factor, high_freq_factor,
 * original_max_position_embeddings)}. */
static int parse_scaling(build_t *b, json_t *s, const char *where,
                         attn_rope_t *r) {
  if (!json_is_object(s))
    return layer_fail(b, "%s rope_scaling must be an object or null", where);
  json_t *t = json_object_get(s, "rope_type");
  if (!t)
    t = json_object_get(s, "type");
  const char *type = json_string_value(t);
  if (!type)
    return layer_fail(b, "%s rope_scaling has no \"type\" or \"rope_type\"",
                      where);
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
      return layer_fail(b,
                        "%s rope_scaling: llama3 needs low_freq_factor > 0, "
                        "high_freq_factor > low_freq_factor and "
                        "original_max_position_embeddings > 0 (got %g, %g, "
                        "%g)",
                        where, r->low_freq_factor, r->high_freq_factor,
                        r->original_max_position);
  } else {
    return layer_fail(b,
                      "%s rope_scaling type '%s' is not supported (linear, "
                      "llama3)",
                      where, type);
  }
  if (scaling_num(b, s, where, "factor", &r->factor) < 0)
    return -1;
  if (!(r->factor >= 1))
    return layer_fail(b, "%s rope_scaling: factor must be >= 1, got %g", where,
                      r->factor);
  return 0;
}

/* Rotary embeddings. Llama: HALF, config.json's rope_theta (10000),
 * partial_rotary_factor and rope_scaling first. Any convention: the
 * metadata's rope_theta, rope_dims, rope_style ("half", "interleaved",
 * "none") and rope_scaling (the JSON text of config.json's object); for
 * the others, any of them turns rope on. */
static int resolve_rope(build_t *b, int llama) {
  attn_rope_t *r = &b->l.rope;
  int64_t Dh = b->l.Dh;
  const char *style = meta_get(b, "rope_style");
  const char *scaling_text = meta_get(b, "rope_scaling");
  r->style = ATTN_ROPE_NONE;
  if (llama || meta_get(b, "rope_theta") || meta_get(b, "rope_dims") || style ||
      scaling_text)
    r->style = ATTN_ROPE_HALF;
  if (style && strcmp(style, "half") != 0) {
    if (strcmp(style, "interleaved") == 0)
      r->style = ATTN_ROPE_INTERLEAVED;
    else if (strcmp(style, "none") == 0)
      r->style = ATTN_ROPE_NONE;
    else
      return layer_fail(b,
                        "__metadata__ 'rope_style' is '%s', not half, "
                        "interleaved or none",
                        style);
  }
  if (r->style == ATTN_ROPE_NONE) {
    memset(r, 0, sizeof *r);
    return 0;
  }

  r->theta = 10000;
  if (param_num(b, llama ? "rope_theta" : NULL, "rope_theta", &r->theta) < 0)
    return -1;
  if (!(r->theta > 1))
    return layer_fail(b, "rope_theta must be > 1, got %g", r->theta);

  double factor;
  int from =
      param_num(b, llama ? "partial_rotary_factor" : NULL, NULL, &factor);
  if (from < 0)
    return -1;
  r->dims = Dh;
  if (from == FROM_CONFIG) { /* config.json's wins over the metadata's */
    if (!(factor > 0 && factor <= 1))
      return layer_fail(b,
                        "%s: partial_rotary_factor must be in (0, 1], "
                        "got %g",
                        b->src->config_path, factor);
    r->dims = (int64_t)((double)Dh * factor); /* as transformers truncates */
    if (r->dims < 2 || r->dims % 2)
      return layer_fail(b,
                        "partial_rotary_factor %g of head_dim %lld rotates "
                        "%lld features, not an even number >= 2",
                        factor, (long long)Dh, (long long)r->dims);
  } else {
    if ((from = param_int(b, NULL, NULL, "rope_dims", &r->dims)) < 0)
      return -1;
    if (r->dims < 2 || r->dims % 2 || r->dims > Dh)
      return layer_fail(b,
                        "rope would rotate %lld features (%s): they must be "
                        "even, 2 .. head_dim %lld",
                        (long long)r->dims,
                        from == FROM_META ? "__metadata__ 'rope_dims'"
                                          : "head_dim",
                        (long long)Dh);
  }

  json_t *s = llama ? config_get(b, "rope_scaling") : NULL;
  if (s)
    return parse_scaling(b, s, b->src->config_path, r);
  if (scaling_text) {
    json_error_t jerr;
    s = json_loads(scaling_text, JSON_DECODE_ANY, &jerr);
    if (!s)
      return layer_fail(b, "__metadata__ 'rope_scaling' is not JSON: %s",
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
static int resolve_heads(build_t *b) {
  attnd_layer_t *l = &b->l;
  part_t *q = &b->part[Q_W], *k = &b->part[K_W], *v = &b->part[V_W],
         *o = &b->part[O_W];
  char where[512];
  int from = param_int(b, "num_attention_heads", "n_head", "num_heads", &l->H);
  if (from < 0)
    return -1;
  if (from == FROM_NONE)
    return layer_fail(b,
                      "no head count: %s num_attention_heads (or n_head) "
                      "and the file's __metadata__ no num_heads",
                      config_absence(b, where, sizeof where));
  if (q->out % l->H)
    return layer_fail(b,
                      "num_attention_heads %lld does not divide the %lld "
                      "rows of the query weight '%s'",
                      (long long)l->H, (long long)q->out, q->e->t->name);
  l->Dh = q->out / l->H;
  int64_t head_dim;
  if ((from = param_int(b, "head_dim", NULL, "head_dim", &head_dim)) < 0)
    return -1;
  if (from != FROM_NONE && head_dim != l->Dh)
    return layer_fail(b,
                      "head_dim %lld disagrees with the query weight '%s': "
                      "%lld rows / %lld heads = %lld",
                      (long long)head_dim, q->e->t->name, (long long)q->out,
                      (long long)l->H, (long long)l->Dh);
  l->Hkv = l->H;
  if (param_int(b, "num_key_value_heads", NULL, "num_kv_heads", &l->Hkv) < 0)
    return -1;
  if (l->H % l->Hkv)
    return layer_fail(b,
                      "num_key_value_heads %lld does not divide "
                      "num_attention_heads %lld",
                      (long long)l->Hkv, (long long)l->H);
  if (k->out != l->Hkv * l->Dh)
    return bad_shape(
        b, k->e, "%lld %s (num_key_value_heads %lld × head_dim %lld)",
        (long long)(l->Hkv * l->Dh), k->transposed ? "columns" : "rows",
        (long long)l->Hkv, (long long)l->Dh);
  if (v->out % l->Hkv)
    return bad_shape(b, v->e, "a multiple of num_key_value_heads %lld %s",
                     (long long)l->Hkv, v->transposed ? "columns" : "rows");
  l->Dv = v->out / l->Hkv;
  int64_t o_in;
  if (__builtin_mul_overflow(l->H, l->Dv, &o_in) || o->in != o_in)
    return bad_shape(b, o->e,
                     "%lld %s (num_attention_heads %lld × value head dim "
                     "%lld)",
                     (long long)o_in, o->transposed ? "rows" : "columns",
                     (long long)l->H, (long long)l->Dv);
  l->Eo = o->out;
  return 0;
}

/* A stored weight: a non-empty matrix of a float dtype. */
static int check_matrix(build_t *b, const entry_t *e) {
  if (e->t->rank != 2 || e->t->shape[0] < 1 || e->t->shape[1] < 1)
    return bad_shape(b, e, "a non-empty matrix");
  return 0;
}

/* Finds the parts by name (pass 3) and reads the weights' shapes. */
static int find_parts(build_t *b) {
  const form_t *f = b->form;
  for (int i = 0; i < N_PARTS; i++) {
    b->raw[i] = f->names[i]
                    ? find_entry(b->src, b->prefix, b->plen, f->names[i])
                    : NULL;
    int required = i == Q_W || i == O_W || (i <= V_W && !f->fused_w);
    if (required && !b->raw[i])
      return layer_fail(b, "missing tensor '%.*s%s'", (int)b->plen, b->prefix,
                        f->names[i]);
  }
  for (int i = 0; i < N_PARTS; i++) {
    const entry_t *e = b->raw[i];
    if (e && e->t->dtype != ATTND_ST_F32 && e->t->dtype != ATTND_ST_F16 &&
        e->t->dtype != ATTND_ST_BF16 && e->t->dtype != ATTND_ST_F64)
      return layer_fail(b,
                        "tensor '%s' is %s, which is not a float32 weight "
                        "(F64, F32, F16 or BF16)",
                        e->t->name, attnd_st_dtype_name(e->t->dtype));
  }

  /* q, k, v: [out, in], or stacked in one tensor */
  part_t *p = b->part;
  if (f->fused_w) {
    const entry_t *e = b->raw[Q_W];
    if (check_matrix(b, e) < 0)
      return -1;
    int64_t rows = e->t->shape[0], cols = e->t->shape[1];
    int64_t stacked = f->transposed ? cols : rows,
            in = f->transposed ? rows : cols;
    if (stacked != 3 * in)
      return bad_shape(b, e,
                       f->transposed ? "[E, 3E] (input-major q, k, v)"
                                     : "[3E, E] (q, k, v stacked)");
    for (int i = Q_W; i <= V_W; i++)
      p[i] = (part_t){e, i * in, in, in, f->transposed};
  } else {
    for (int i = Q_W; i <= V_W; i++) {
      const entry_t *e = b->raw[i];
      if (check_matrix(b, e) < 0)
        return -1;
      p[i] = (part_t){e, 0, e->t->shape[0], e->t->shape[1], 0};
    }
  }
  const entry_t *o = b->raw[O_W];
  if (check_matrix(b, o) < 0)
    return -1;
  p[O_W] = (part_t){o, 0, o->t->shape[f->transposed],
                    o->t->shape[!f->transposed], f->transposed};

  /* each projection's in_features: the query's, the key's and the value's
   * widths (kdim and vdim differ from embed_dim in cross-attention) */
  b->l.E = p[Q_W].in;
  b->l.Ek = p[K_W].in;
  b->l.Ev = p[V_W].in;
  return 0;
}

/* Biases ([out], or the three stacked) and norms ([Dh]), once the weights'
 * shapes are known. */
static int check_vectors(build_t *b) {
  part_t *p = b->part;
  const entry_t *e;
  if (b->form->fused_b && (e = b->raw[Q_B])) {
    int64_t n = p[Q_W].out + p[K_W].out + p[V_W].out;
    if (e->t->rank != 1 || e->t->shape[0] != n)
      return bad_shape(b, e, "[%lld] (q, k and v biases stacked)",
                       (long long)n);
    int64_t first = 0;
    for (int i = 0; i < 3; i++) {
      p[Q_B + i] = (part_t){e, first, p[Q_W + i].out, 1, 0};
      first += p[Q_W + i].out;
    }
  } else {
    for (int i = Q_B; i <= V_B; i++)
      if ((e = b->raw[i]))
        p[i] = (part_t){e, 0, p[i - Q_B].out, 1, 0};
  }
  if ((e = b->raw[O_B]))
    p[O_B] = (part_t){e, 0, p[O_W].out, 1, 0};
  for (int i = Q_N; i <= K_N; i++)
    if ((e = b->raw[i]))
      p[i] = (part_t){e, 0, b->l.Dh, 1, 0};
  for (int i = Q_B; i < N_PARTS; i++) {
    if (!(e = p[i].e) || (i <= V_B && b->form->fused_b))
      continue;
    if (e->t->rank != 1 || e->t->shape[0] != p[i].out)
      return bad_shape(b, e, "[%lld] (%s)", (long long)p[i].out,
                       i >= Q_N ? "head_dim" : "the weight's out_features");
  }
  return 0;
}

/* The coordinates of flat index i of t, as "[3, 17]". */
static const char *index_text(const attnd_st_tensor_t *t, int64_t i, char *buf,
                              size_t n) {
  int64_t at[ATTND_ST_MAX_RANK];
  for (int d = t->rank - 1; d >= 0; d--) {
    at[d] = t->shape[d] ? i % t->shape[d] : 0;
    i = t->shape[d] ? i / t->shape[d] : 0;
  }
  attnd_shape_text(buf, n, t->rank, at, ", ");
  return buf;
}

/* Elements a thread converts at a time: the first writes to new pages
 * cost most of a load (weights_alloc), and threads take them in parallel. */
#define CONVERT_CHUNK ((int64_t)1 << 20)

/* Converts elements [off, off + n) of e's tensor into dst, in chunks spread
 * over the CPUs; the first failing element is reported. */
static int convert_range(build_t *b, const entry_t *e, int64_t off, int64_t n,
                         float *dst) {
  size_t dsize = attnd_st_dtype_size(e->t->dtype);
  int64_t chunks = (n + CONVERT_CHUNK - 1) / CONVERT_CHUNK, bad = INT64_MAX;
  int rc = 0;
#pragma omp parallel for schedule(dynamic, 1) if (chunks > 1)
  for (int64_t c = 0; c < chunks; c++) {
    int64_t c0 = c * CONVERT_CHUNK;
    attnd_st_tensor_t t = *e->t;
    t.data += (size_t)(off + c0) * dsize;
    t.elems = n - c0 < CONVERT_CHUNK ? n - c0 : CONVERT_CHUNK;
    t.bytes = (size_t)t.elems * dsize;
    t.rank = 1;
    t.shape[0] = t.elems;
    int64_t at = 0;
    int r = attnd_st_to_f32(&t, dst + c0, &at);
#pragma omp critical(attnd_convert)
    if (r < 0 && (rc == 0 || (r == -2 && c0 + at < bad))) {
      rc = r;
      bad = r == -2 ? c0 + at : bad;
    }
  }
  char at[160];
  if (rc == -2)
    return layer_fail(b,
                      "tensor '%s' holds a value that is not finite (or "
                      "beyond float32's range) at %s",
                      e->t->name, index_text(e->t, off + bad, at, sizeof at));
  if (rc < 0)
    return layer_fail(b, "tensor '%s': dtype %s does not convert to float32",
                      e->t->name, attnd_st_dtype_name(e->t->dtype));
  return 0;
}

/* A new buffer of n floats, 64-byte aligned. Plain pages: on these VMs
 * the first write to a page is most of a load's time, and advising huge
 * pages (MADV_HUGEPAGE) made it slower, 0.37 against 1.2 GB/s of BF16
 * weights in alternating runs, as the kernel zeroes and compacts 2 MB at
 * a time; neither does populating them ahead (MADV_POPULATE_WRITE) help. */
static float *weights_alloc(size_t n) {
  void *buf;
  return posix_memalign(&buf, 64, n * sizeof(float)) ? NULL : buf;
}

/* Pass 5 for one part: a new float32 [out, in] buffer in *dst. */
static int convert_part(build_t *b, const part_t *p, const float **dst) {
  size_t n = (size_t)(p->out * p->in);
  float *buf = weights_alloc(n);
  if (!buf)
    return layer_fail(b, "out of memory for tensor '%s'", p->e->t->name);
  *dst = buf;
  b->l.bytes += n * sizeof(float);
  if (!p->transposed)
    return convert_range(b, p->e, p->first * p->in, (int64_t)n, buf);
  /* stored [in, cols]: convert it whole once, then copy columns
   * [first, first + out) out as rows, in 32 × 32 tiles */
  if (b->tmp_e != p->e) {
    free(b->tmp);
    b->tmp_e = NULL;
    if (!(b->tmp = malloc(p->e->t->elems * sizeof(float))))
      return layer_fail(b, "out of memory for tensor '%s'", p->e->t->name);
    if (convert_range(b, p->e, 0, p->e->t->elems, b->tmp) < 0)
      return -1;
    b->tmp_e = p->e;
  }
  int64_t cols = p->e->t->shape[1];
  float *out = buf;
  for (int64_t i0 = 0; i0 < p->in; i0 += 32)
    for (int64_t o0 = 0; o0 < p->out; o0 += 32)
      for (int64_t i = i0; i < i0 + 32 && i < p->in; i++)
        for (int64_t o = o0; o < o0 + 32 && o < p->out; o++)
          out[o * p->in + i] = b->tmp[i * cols + p->first + o];
  return 0;
}

/* Refusals of what attnd would compute differently: torch's add_bias_kv,
 * BERT's relative positions, GPT-2's and Gemma's attention scales. */
static int check_unsupported(build_t *b) {
  const char *p = b->prefix;
  size_t n = b->plen;
  attnd_convention_t conv = b->form->conv;
  if (conv == ATTND_CONV_TORCH_MHA) {
    if (find_entry(b->src, p, n, "bias_k") ||
        find_entry(b->src, p, n, "bias_v"))
      return layer_fail(b, "bias_k / bias_v (add_bias_kv) are not supported");
    if (b->form->fused_w && find_entry(b->src, p, n, "q_proj_weight"))
      return layer_fail(b,
                        "both '%.*sin_proj_weight' and "
                        "'%.*sq_proj_weight': one form or the other",
                        (int)n, p, (int)n, p);
  }
  if (conv == ATTND_CONV_BERT &&
      find_entry(b->src, p, n, "attention.self.distance_embedding.weight"))
    return layer_fail(b, "relative position embeddings "
                         "(distance_embedding) are not supported");
  json_t *v;
  if (conv == ATTND_CONV_GPT2 &&
      (((v = config_get(b, "scale_attn_weights")) && json_is_false(v)) ||
       ((v = config_get(b, "scale_attn_by_inverse_layer_idx")) &&
        json_is_true(v))))
    return layer_fail(b,
                      "%s: only the scale 1/sqrt(head_dim) is supported "
                      "(scale_attn_weights true, "
                      "scale_attn_by_inverse_layer_idx false)",
                      b->src->config_path);
  if (conv == ATTND_CONV_LLAMA) {
    if (config_get(b, "attn_logit_softcapping"))
      return layer_fail(b, "%s: attn_logit_softcapping is not supported",
                        b->src->config_path);
    v = config_get(b, "query_pre_attn_scalar");
    if (v && json_number_value(v) != (double)b->l.Dh)
      return layer_fail(b,
                        "%s: query_pre_attn_scalar other than head_dim "
                        "%lld is not supported",
                        b->src->config_path, (long long)b->l.Dh);
    const char *type = json_string_value(config_get(b, "model_type"));
    if (type && strncmp(type, "gemma", 5) == 0 && (b->raw[Q_N] || b->raw[K_N]))
      return layer_fail(b,
                        "%s: model_type '%s' scales q_norm/k_norm by "
                        "(1 + weight), which is not supported",
                        b->src->config_path, type);
  }
  return 0;
}

/* Passes 3 to 5 for the layer whose query weight is q in form f. */
static int build_layer(build_t *b) {
  const form_t *f = b->form;
  attnd_layer_t *l = &b->l;
  const entry_t *q = b->q;
  b->file = b->src->files[q->file];
  b->st = &b->src->maps[q->file].file;

  /* the name: p + layer, or for torch_mha p less its '.' (the path's name
   * for an empty p) */
  char *name;
  if (f->layer)
    name = malloc(b->plen + strlen(f->layer) + 1);
  else
    name = b->plen ? strndup(b->prefix, b->plen - 1) : strdup(b->src->unnamed);
  if (name && f->layer) {
    memcpy(name, b->prefix, b->plen);
    strcpy(name + b->plen, f->layer);
  }
  if (!name || !(l->file = strdup(b->file))) {
    free(name);
    return attnd_fail(b->msg, b->msz, "out of memory");
  }
  l->name = name;
  if (!*name)
    return layer_fail(b, "the layer's name would be empty");
  l->convention = f->conv;
  l->file_dtype = attnd_st_dtype_name(q->t->dtype);

  int llama = f->conv == ATTND_CONV_LLAMA;
  if (find_parts(b) < 0 || resolve_heads(b) < 0 || check_vectors(b) < 0 ||
      check_unsupported(b) < 0 || resolve_rope(b, llama) < 0)
    return -1;

  double eps = 1e-6;
  if (param_num(b, llama ? "rms_norm_eps" : NULL, "rms_norm_eps", &eps) < 0)
    return -1;
  if (!(eps >= 0) || eps > 1)
    return layer_fail(b, "rms_norm_eps must be in [0, 1], got %g", eps);
  l->norm_eps = (float)eps;

  l->causal = llama || f->conv == ATTND_CONV_GPT2 ? ATTN_CAUSAL_BOTTOM_RIGHT
                                                  : ATTN_CAUSAL_NONE;
  const char *causal = meta_get(b, "causal");
  if (causal) {
    if (!strcmp(causal, "true") || !strcmp(causal, "bottom_right"))
      l->causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    else if (!strcmp(causal, "top_left"))
      l->causal = ATTN_CAUSAL_TOP_LEFT;
    else if (!strcmp(causal, "false") || !strcmp(causal, "none"))
      l->causal = ATTN_CAUSAL_NONE;
    else
      return layer_fail(b,
                        "__metadata__ 'causal' is '%s', not true, false, "
                        "bottom_right, top_left or none",
                        causal);
  }

  const float **dst[N_PARTS] = {
      &l->q_weight, &l->k_weight, &l->v_weight, &l->o_weight, &l->q_bias,
      &l->k_bias,   &l->v_bias,   &l->o_bias,   &l->q_norm,   &l->k_norm};
  for (int i = 0; i < N_PARTS; i++)
    if (b->part[i].e && convert_part(b, &b->part[i], dst[i]) < 0)
      return -1;
  return 0;
}

/* Appends to buf[*len ..), truncating at its size. */
static void append(char *buf, size_t size, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void append(char *buf, size_t size, size_t *len, const char *fmt, ...) {
  if (*len >= size - 1)
    return;
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(buf + *len, size - *len, fmt, ap);
  va_end(ap);
  if (k > 0)
    *len = *len + (size_t)k < size - 1 ? *len + (size_t)k : size - 1;
}

/* Adds the layers of one opened source to the set (pass 3: discovery). */
static int discover(const source_t *s, attnd_layer_set_t *set, char *msg,
                    size_t msz) {
  size_t found = 0;
  for (size_t i = 0; i < s->n_tensors; i++) {
    const char *name = s->tensors[i].t->name;
    for (size_t k = 0; k < N_FORMS; k++) {
      const char *query = FORMS[k].names[Q_W];
      if (!ends_with(name, query))
        continue;
      size_t plen = strlen(name) - strlen(query);
      if (plen && name[plen - 1] != '.')
        continue;
      if (set->n == set->cap) {
        size_t cap = set->cap ? 2 * set->cap : 16;
        attnd_layer_t *grown = realloc(set->layers, cap * sizeof *grown);
        if (!grown)
          return attnd_fail(msg, msz, "out of memory");
        set->layers = grown;
        set->cap = cap;
      }
      build_t b = {.src = s,
                   .form = &FORMS[k],
                   .q = &s->tensors[i],
                   .prefix = name,
                   .plen = plen,
                   .msg = msg,
                   .msz = msz};
      int rc = build_layer(&b);
      free(b.tmp);
      if (rc < 0) {
        layer_free(&b.l);
        return -1;
      }
      set->layers[set->n++] = b.l;
      set->bytes += b.l.bytes;
      found++;
    }
  }
  if (found)
    return 0;

  char expected[512], seen[512];
  size_t n = 0;
  for (size_t k = 0; k < N_FORMS; k++)
    append(expected, sizeof expected, &n, "%s{p}%s (%s)", k ? ", " : "",
           FORMS[k].names[Q_W], attnd_convention_name(FORMS[k].conv));
  n = 0;
  seen[0] = '\0';
  for (size_t i = 0; i < s->n_tensors && i < 5; i++)
    append(seen, sizeof seen, &n, "%s'%s'", i ? ", " : "",
           s->tensors[i].t->name);
  return attnd_fail(msg, msz,
                    "no attention layer found in %s: expected tensors named "
                    "like %s; it holds %zu tensor%s%s%s%s",
                    s->path, expected, s->n_tensors,
                    s->n_tensors == 1 ? "" : "s", s->n_tensors ? ": " : "",
                    seen, s->n_tensors > 5 ? ", ..." : "");
}

int attnd_layer_cross(const attnd_layer_t *l) {
  return l->Ek != l->E || l->Ev != l->E;
}

/* ---- the set ------------------------------------------------------------- */

static void set_free(attnd_layer_set_t *set) {
  for (size_t i = 0; i < set->n; i++)
    layer_free(&set->layers[i]);
  free(set->layers);
  free(set);
}

static int cmp_layer(const void *a, const void *b) {
  return strcmp(((const attnd_layer_t *)a)->name,
                ((const attnd_layer_t *)b)->name);
}

int attnd_layers_load(const char *paths, attnd_layer_set_t **out, char *msg,
                      size_t msz) {
  double t0 = attnd_now_ms();
  *out = NULL;
  attnd_layer_set_t *set = calloc(1, sizeof *set);
  char *list = strdup(paths ? paths : "");
  if (!set || !list) {
    free(set);
    free(list);
    return attnd_fail(msg, msz, "out of memory");
  }
  atomic_init(&set->refs, 1);
  int rc = 0;
  char *save = NULL;
  for (char *item = strtok_r(list, ",", &save); rc == 0 && item;
       item = strtok_r(NULL, ",", &save)) {
    while (*item == ' ' || *item == '\t')
      item++;
    size_t n = strlen(item);
    while (n && (item[n - 1] == ' ' || item[n - 1] == '\t'))
      item[--n] = '\0';
    if (!n)
      continue;
    source_t s = {.path = item};
    rc = source_open(&s, msg, msz);
    if (rc == 0)
      rc = discover(&s, set, msg, msz);
    source_close(&s); /* the set keeps float32 copies only */
  }
  if (rc == 0) {
    if (set->n)
      qsort(set->layers, set->n, sizeof *set->layers, cmp_layer);
    for (size_t i = 1; i < set->n && rc == 0; i++)
      if (strcmp(set->layers[i - 1].name, set->layers[i].name) == 0)
        rc = attnd_fail(msg, msz, "layer '%s' found twice: in %s and in %s",
                        set->layers[i].name, set->layers[i - 1].file,
                        set->layers[i].file);
  }
  free(list);
  if (rc < 0) {
    set_free(set);
    return -1;
  }
  set->seconds = (attnd_now_ms() - t0) / 1e3;
  *out = set;
  return 0;
}

attnd_layer_set_t *attnd_layer_set_ref(attnd_layer_set_t *set) {
  if (set)
    atomic_fetch_add_explicit(&set->refs, 1, memory_order_relaxed);
  return set;
}

void attnd_layer_set_unref(attnd_layer_set_t *set) {
  if (set &&
      atomic_fetch_sub_explicit(&set->refs, 1, memory_order_acq_rel) == 1)
    set_free(set);
}

size_t attnd_layer_set_count(const attnd_layer_set_t *set) {
  return set ? set->n : 0;
}

const attnd_layer_t *attnd_layer_set_get(const attnd_layer_set_t *set,
                                         size_t i) {
  return set && i < set->n ? &set->layers[i] : NULL;
}

const attnd_layer_t *attnd_layer_set_find(const attnd_layer_set_t *set,
                                          const char *name) {
  if (!set || !set->n || !name)
    return NULL;
  attnd_layer_t key = {.name = name};
  return bsearch(&key, set->layers, set->n, sizeof *set->layers, cmp_layer);
}

size_t attnd_layer_set_bytes(const attnd_layer_set_t *set) {
  return set ? set->bytes : 0;
}

double attnd_layer_set_load_seconds(const attnd_layer_set_t *set) {
  return set ? set->seconds : 0;
}
