/* tests/layer_files.c: attention layers written as safetensors files in
 * each convention (layer_files.h). */
#include "layer_files.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/half.h"
#include "codec/util.h"

struct lf_file {
  attnd_st_out_t *t; /* names and data owned */
  size_t n;
  char **keys, **values; /* __metadata__, owned */
  size_t n_meta;
};

lf_file_t *lf_file_new(void) {
  return calloc(1, sizeof(lf_file_t));
}

static void out_free(attnd_st_out_t *t) {
  free((void *)t->name);
  free((void *)t->data);
}

void lf_file_free(lf_file_t *f) {
  if (!f)
    return;
  for (size_t i = 0; i < f->n; i++)
    out_free(&f->t[i]);
  for (size_t i = 0; i < f->n_meta; i++) {
    free(f->keys[i]);
    free(f->values[i]);
  }
  free(f->t);
  free(f->keys);
  free(f->values);
  free(f);
}

void lf_weights_free(lf_weights_t *w) {
  float *bufs[] = {w->q_weight, w->k_weight, w->v_weight, w->o_weight,
                   w->q_bias,   w->k_bias,   w->v_bias,   w->o_bias,
                   w->q_norm,   w->k_norm};
  for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
    free(bufs[i]);
  memset(w, 0, sizeof *w);
}

float lf_bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

float lf_f16_to_f32(uint16_t h) {
  int e = h >> 10 & 0x1f, m = h & 0x3ff;
  float x = e == 0    ? ldexpf((float)m, -24)
            : e == 31 ? (m ? NAN : INFINITY)
                      : ldexpf((float)(m | 0x400), e - 25);
  return h & 0x8000 ? -x : x;
}

static int64_t elems_of(int rank, const int64_t *shape) {
  int64_t n = 1;
  for (int d = 0; d < rank; d++)
    n *= shape[d];
  return n;
}

/* Stores value as element i of dtype at data; returns the float32 a
 * reader gets back (for the float dtypes). */
static float store(attnd_st_dtype_t dtype, void *data, int64_t i,
                   double value) {
  uint8_t *p = (uint8_t *)data + (size_t)i * attnd_st_dtype_size(dtype);
  switch (dtype) {
  case ATTND_ST_F64:
    memcpy(p, &value, 8);
    return (float)value;
  case ATTND_ST_F32: {
    float x = (float)value;
    memcpy(p, &x, 4);
    return x;
  }
  case ATTND_ST_F16: {
    uint16_t h = attnd_f16_from_f32((float)value);
    memcpy(p, &h, 2);
    return lf_f16_to_f32(h);
  }
  case ATTND_ST_BF16: {
    uint16_t h = attnd_bf16_from_f32((float)value);
    memcpy(p, &h, 2);
    return lf_bf16_to_f32(h);
  }
  default: { /* integers, little-endian, truncated to the size */
    int64_t v = (int64_t)value;
    size_t size = attnd_st_dtype_size(dtype);
    for (size_t b = 0; b < size; b++)
      p[b] = (uint8_t)((uint64_t)v >> (8 * b));
    return (float)v;
  }
  }
}

static attnd_st_out_t *find(const lf_file_t *f, const char *name) {
  for (size_t i = 0; i < f->n; i++)
    if (strcmp(f->t[i].name, name) == 0)
      return &f->t[i];
  return NULL;
}

/* Appends a tensor of zeros; returns its data to fill, or NULL. */
static void *add(lf_file_t *f, const char *name, attnd_st_dtype_t dtype,
                 int rank, const int64_t *shape) {
  attnd_st_out_t *grown = realloc(f->t, (f->n + 1) * sizeof *grown);
  if (!grown)
    return NULL;
  f->t = grown;
  size_t bytes = (size_t)elems_of(rank, shape) * attnd_st_dtype_size(dtype);
  attnd_st_out_t *t = &f->t[f->n];
  memset(t, 0, sizeof *t);
  t->name = strdup(name);
  t->dtype = dtype;
  t->rank = rank;
  memcpy(t->shape, shape, (size_t)rank * sizeof *shape);
  void *data = calloc(1, bytes ? bytes : 1);
  t->data = data;
  if (!t->name || !data) {
    out_free(t);
    return NULL;
  }
  f->n++;
  return data;
}

int lf_add_tensor(lf_file_t *f, const char *name, attnd_st_dtype_t dtype,
                  int rank, const int64_t *shape, const float *values) {
  void *data = add(f, name, dtype, rank, shape);
  if (!data)
    return -1;
  int64_t n = elems_of(rank, shape);
  for (int64_t i = 0; values && i < n; i++)
    store(dtype, data, i, values[i]);
  return 0;
}

int lf_remove(lf_file_t *f, const char *name) {
  attnd_st_out_t *t = find(f, name);
  if (!t)
    return -1;
  out_free(t);
  size_t i = (size_t)(t - f->t);
  memmove(t, t + 1, (f->n - i - 1) * sizeof *t);
  f->n--;
  return 0;
}

int lf_move(lf_file_t *from, lf_file_t *to, const char *name) {
  attnd_st_out_t *t = find(from, name);
  attnd_st_out_t *grown =
      t ? realloc(to->t, (to->n + 1) * sizeof *grown) : NULL;
  if (!grown)
    return -1;
  to->t = grown;
  to->t[to->n++] = *t;
  size_t i = (size_t)(t - from->t);
  memmove(t, t + 1, (from->n - i - 1) * sizeof *t);
  from->n--;
  return 0;
}

int lf_set(lf_file_t *f, const char *name, int64_t index, double value) {
  attnd_st_out_t *t = find(f, name);
  if (!t || index < 0 || index >= elems_of(t->rank, t->shape))
    return -1;
  store(t->dtype, (void *)t->data, index, value);
  return 0;
}

int lf_meta(lf_file_t *f, const char *key, const char *value) {
  char *v = strdup(value);
  if (!v)
    return -1;
  for (size_t i = 0; i < f->n_meta; i++)
    if (strcmp(f->keys[i], key) == 0) {
      free(f->values[i]);
      f->values[i] = v;
      return 0;
    }
  char **k = realloc(f->keys, (f->n_meta + 1) * sizeof *k);
  if (k)
    f->keys = k;
  char **vs = realloc(f->values, (f->n_meta + 1) * sizeof *vs);
  if (vs)
    f->values = vs;
  if (!k || !vs || !(f->keys[f->n_meta] = strdup(key))) {
    free(v);
    return -1;
  }
  f->values[f->n_meta++] = v;
  return 0;
}

int lf_file_write(const lf_file_t *f, const char *path, char *msg, size_t msz) {
  return attnd_st_write(path, f->t, f->n, (const char *const *)f->keys,
                        (const char *const *)f->values, f->n_meta, msg, msz);
}

/* ---- layers -------------------------------------------------------------- */

/* A new [n] array of values drawn from *rng around `center`, rounded to
 * dtype as a reader gets them back; *raw gets the values to store (doubles:
 * F64 keeps more than float32 holds, to test its rounding). */
static float *draw(uint64_t *rng, int64_t n, double center, double amp,
                   attnd_st_dtype_t dtype, double **raw) {
  float *w = malloc((size_t)n * sizeof *w);
  *raw = malloc((size_t)n * sizeof **raw);
  if (!w || !*raw) {
    free(w);
    free(*raw);
    *raw = NULL;
    return NULL;
  }
  for (int64_t i = 0; i < n; i++) {
    double u = (double)(attnd_splitmix64(rng) >> 11) * 0x1p-53;
    (*raw)[i] = center + amp * (2 * u - 1);
    if (dtype != ATTND_ST_F64) /* what is stored is this float */
      (*raw)[i] = (float)(*raw)[i];
    uint8_t tmp[8];
    w[i] = store(dtype, tmp, 0, (*raw)[i]);
  }
  return w;
}

enum { P_QW, P_KW, P_VW, P_OW, P_QB, P_KB, P_VB, P_OB, P_QN, P_KN, P_N };

/* Adds tensor name made of pieces (stacked along its first dimension, or
 * along its second when transposed) of the raw arrays. */
static int add_stacked(lf_file_t *f, const char *prefix, const char *suffix,
                       attnd_st_dtype_t dtype, double *const *raw,
                       const int64_t (*dims)[2], const int *parts, int n_parts,
                       int transposed) {
  char name[512];
  snprintf(name, sizeof name, "%s%s", prefix, suffix);
  int64_t in = dims[parts[0]][1], out = 0;
  for (int i = 0; i < n_parts; i++)
    out += dims[parts[i]][0];
  int vector = in == 0; /* a bias or norm: dims [n, 0] */
  int64_t shape[2] = {transposed ? in : out, transposed ? out : in};
  void *data = add(f, name, dtype, vector ? 1 : 2, vector ? &out : shape);
  if (!data)
    return -1;
  int64_t row0 = 0;
  for (int i = 0; i < n_parts; i++) {
    const double *src = raw[parts[i]];
    int64_t rows = dims[parts[i]][0], cols = vector ? 1 : in;
    for (int64_t r = 0; r < rows; r++)
      for (int64_t c = 0; c < cols; c++) {
        int64_t at = transposed ? c * out + row0 + r : (row0 + r) * cols + c;
        store(dtype, data, at, src[r * cols + c]);
      }
    row0 += rows;
  }
  return 0;
}

int lf_add_layer(lf_file_t *f, lf_convention_t conv, attnd_st_dtype_t dtype,
                 const char *prefix, const lf_shape_t *s, uint64_t seed,
                 lf_weights_t *w, char *msg, size_t msz) {
  if (w)
    memset(w, 0, sizeof *w);
  lf_shape_t z = *s;
  if (z.E < 1 || z.H < 1)
    return attnd_fail(msg, msz, "lf_add_layer: E and H are required");
  z.Hkv = z.Hkv ? z.Hkv : z.H;
  z.Dh = z.Dh ? z.Dh : z.E / z.H;
  z.Dv = z.Dv ? z.Dv : z.Dh;
  z.Eo = z.Eo ? z.Eo : z.E;
  z.Ek = z.Ek ? z.Ek : z.E;
  z.Ev = z.Ev ? z.Ev : z.E;
  int stacked = conv == LF_TORCH_MHA || conv == LF_GPT2;
  unsigned qkv = z.bias & (LF_BQ | LF_BK | LF_BV);
  if ((stacked || conv == LF_TORCH_MHA_SPLIT) && qkv && qkv != 7)
    return attnd_fail(msg, msz,
                      "lf_add_layer: this convention stacks the "
                      "q, k and v biases: all or none");
  if (stacked && (z.H * z.Dh != z.E || z.Hkv * z.Dh != z.E ||
                  z.H * z.Dv != z.E || z.Ek != z.E || z.Ev != z.E))
    return attnd_fail(msg, msz,
                      "lf_add_layer: q, k and v stacked need "
                      "E = H·Dh = Hkv·Dh = H·Dv and Ek = Ev = E");
  if (z.qk_norm && conv != LF_LLAMA)
    return attnd_fail(msg, msz, "lf_add_layer: qk_norm is llama's");

  /* [rows, in] of each part; in 0 for vectors */
  int64_t dims[P_N][2] = {{z.H * z.Dh, z.E},
                          {z.Hkv * z.Dh, z.Ek},
                          {z.Hkv * z.Dv, z.Ev},
                          {z.Eo, z.H * z.Dv},
                          {z.H * z.Dh, 0},
                          {z.Hkv * z.Dh, 0},
                          {z.Hkv * z.Dv, 0},
                          {z.Eo, 0},
                          {z.Dh, 0},
                          {z.Dh, 0}};
  int present[P_N] = {1,
                      1,
                      1,
                      1,
                      !!(z.bias & LF_BQ),
                      !!(z.bias & LF_BK),
                      !!(z.bias & LF_BV),
                      !!(z.bias & LF_BO),
                      z.qk_norm,
                      z.qk_norm};
  lf_weights_t got = {.shape = z};
  float **dst[P_N] = {
      &got.q_weight, &got.k_weight, &got.v_weight, &got.o_weight, &got.q_bias,
      &got.k_bias,   &got.v_bias,   &got.o_bias,   &got.q_norm,   &got.k_norm};
  double *raw[P_N] = {0};
  uint64_t rng = seed;
  int rc = 0;
  for (int i = 0; i < P_N && rc == 0; i++) {
    if (!present[i])
      continue;
    int64_t n = dims[i][0] * (dims[i][1] ? dims[i][1] : 1);
    int norm = i >= P_QN;
    *dst[i] = draw(&rng, n, norm ? 1 : 0, norm ? 0.25 : 0.5, dtype, &raw[i]);
    if (!*dst[i])
      rc = attnd_fail(msg, msz, "lf_add_layer: out of memory");
    got.bytes += (size_t)n * sizeof(float);
  }

  /* the convention's names and layouts */
  static const int QKV[] = {P_QW, P_KW, P_VW}, QKV_B[] = {P_QB, P_KB, P_VB};
  static const char *const BERT[P_N] = {"attention.self.query.weight",
                                        "attention.self.key.weight",
                                        "attention.self.value.weight",
                                        "attention.output.dense.weight",
                                        "attention.self.query.bias",
                                        "attention.self.key.bias",
                                        "attention.self.value.bias",
                                        "attention.output.dense.bias",
                                        NULL,
                                        NULL};
  static const char *const LLAMA[P_N] = {
      "self_attn.q_proj.weight", "self_attn.k_proj.weight",
      "self_attn.v_proj.weight", "self_attn.o_proj.weight",
      "self_attn.q_proj.bias",   "self_attn.k_proj.bias",
      "self_attn.v_proj.bias",   "self_attn.o_proj.bias",
      "self_attn.q_norm.weight", "self_attn.k_norm.weight"};
  static const char *const SPLIT[3] = {"q_proj_weight", "k_proj_weight",
                                       "v_proj_weight"};
  const char *const *names = conv == LF_BERT ? BERT : LLAMA;
  int gpt2 = conv == LF_GPT2;
  for (int i = 0; i < P_N && rc == 0; i++) {
    if (!present[i])
      continue;
    int part = i;
    if (conv == LF_BERT || conv == LF_LLAMA)
      rc = add_stacked(f, prefix, names[i], dtype, raw, dims, &part, 1, 0);
    else if (i == P_QW && stacked)
      rc =
          add_stacked(f, prefix, gpt2 ? "attn.c_attn.weight" : "in_proj_weight",
                      dtype, raw, dims, QKV, 3, gpt2);
    else if (i <= P_VW && !stacked)
      rc = add_stacked(f, prefix, SPLIT[i], dtype, raw, dims, &part, 1, 0);
    else if (i == P_OW)
      rc = add_stacked(f, prefix,
                       gpt2 ? "attn.c_proj.weight" : "out_proj.weight", dtype,
                       raw, dims, &part, 1, gpt2);
    else if (i == P_QB)
      rc = add_stacked(f, prefix, gpt2 ? "attn.c_attn.bias" : "in_proj_bias",
                       dtype, raw, dims, QKV_B, 3, 0);
    else if (i == P_OB)
      rc = add_stacked(f, prefix, gpt2 ? "attn.c_proj.bias" : "out_proj.bias",
                       dtype, raw, dims, &part, 1, 0);
    if (rc < 0)
      attnd_fail(msg, msz, "lf_add_layer: out of memory");
  }
  for (int i = 0; i < P_N; i++)
    free(raw[i]);
  if (rc < 0 || !w)
    lf_weights_free(&got);
  else
    *w = got;
  return rc;
}

int lf_write(const char *path, lf_convention_t conv, attnd_st_dtype_t dtype,
             const char *prefix, const lf_shape_t *s, uint64_t seed,
             const char *const *meta, lf_weights_t *w, char *msg, size_t msz) {
  lf_file_t *f = lf_file_new();
  if (!f)
    return attnd_fail(msg, msz, "lf_write: out of memory");
  int rc = lf_add_layer(f, conv, dtype, prefix, s, seed, w, msg, msz);
  for (size_t i = 0; rc == 0 && meta && meta[i]; i += 2)
    if (lf_meta(f, meta[i], meta[i + 1]) < 0)
      rc = attnd_fail(msg, msz, "lf_write: out of memory");
  if (rc == 0)
    rc = lf_file_write(f, path, msg, msz);
  lf_file_free(f);
  if (rc < 0 && w)
    lf_weights_free(w);
  return rc;
}

int lf_write_index(const char *path, const lf_file_t *const *shards,
                   const char *const *names, size_t n) {
  FILE *fp = fopen(path, "w");
  if (!fp)
    return -1;
  fputs("{\"metadata\": {}, \"weight_map\": {", fp);
  const char *sep = "";
  for (size_t i = 0; i < n; i++)
    for (size_t k = 0; k < shards[i]->n; k++) {
      fprintf(fp, "%s\n  \"%s\": \"%s\"", sep, shards[i]->t[k].name, names[i]);
      sep = ",";
    }
  fputs("\n}}\n", fp);
  return fclose(fp) == 0 ? 0 : -1;
}

int lf_write_text(const char *path, const char *text) {
  FILE *fp = fopen(path, "w");
  if (!fp)
    return -1;
  int ok = fputs(text, fp) >= 0;
  return fclose(fp) == 0 && ok ? 0 : -1;
}
