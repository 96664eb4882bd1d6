/* tests/fuzz/fuzz_layer.c: a layer directory's load (server/model/layers.h
 * attnd_layers_load, with layer_source.c and layer_params.c): config.json,
 * the safetensors header's __metadata__ and the tensors' names, dtypes and
 * shapes, resolved into resident layers.
 *
 * Input: config.json's text up to the first NUL (empty: the directory has
 * no config.json); the safetensors header's JSON up to the second NUL;
 * model.safetensors.index.json's text up to the third (empty: none); the
 * bytes after it, repeated to fill the data the header's data_offsets ask
 * for (zeros when there are none), so that mutations of the header keep a
 * consistent file whose values the fuzzer still chooses; and a header that
 * is JSON gets its data_offsets from its tensors' dtypes and shapes, laid
 * end to end, so that a mutated shape keeps it consistent too. The files are
 * rewritten at each input in one directory under /dev/shm (the loader's
 * only entry is a path), and the directory is loaded.
 *
 * Checked: no crash, no leak; a failure leaves a message and no set; a
 * success gives layers in strict name order, each found by its name, whose
 * parameters are what layers.h and layer_build.h promise: head counts and
 * sizes positive, Hkv dividing H, the query and output weights' shapes in
 * the file equal to H·Dh by E and Eo by H·Dv (as the convention stores
 * them), the bytes held equal to the sizes the parameters give, every
 * value finite, rope either all zero or with theta > 1, an even rope_dims
 * in 2 .. Dh and finite scaling of its type's ranges, norm_eps in [0, 1],
 * a window >= 0. */
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz.h"
#include "model/layers.h"
#include "model/safetensors.h"

/* Past this, the data are not written in full (the file is then refused
 * for its size), so that a header cannot ask for gigabytes. */
#define MAX_DATA ((size_t)1 << 22)

static char dir[96], config_path[128], st_path[128], index_path[128];
static int verbose; /* FUZZ_LAYER_VERBOSE=1: each input's outcome */

static void remove_dir(void) {
  unlink(config_path);
  unlink(st_path);
  unlink(index_path);
  rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  snprintf(dir, sizeof dir, "/dev/shm/attnd-fuzz-layer-%d", (int)getpid());
  snprintf(config_path, sizeof config_path, "%s/config.json", dir);
  snprintf(st_path, sizeof st_path, "%s/model.safetensors", dir);
  snprintf(index_path, sizeof index_path, "%s/model.safetensors.index.json",
           dir);
  FUZZ_CHECK(mkdir(dir, 0700) == 0, "cannot make %s", dir);
  atexit(remove_dir);
  verbose = getenv("FUZZ_LAYER_VERBOSE") != NULL;
  return 0;
}

static void write_file(const char *path, const uint8_t *a, size_t an,
                       const uint8_t *b, size_t bn) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  FUZZ_CHECK(fd >= 0, "cannot open %s", path);
  FUZZ_CHECK((an == 0 || write(fd, a, an) == (ssize_t)an) &&
                 (bn == 0 || write(fd, b, bn) == (ssize_t)bn),
             "cannot write %s", path);
  close(fd);
}

/* The data bytes the header asks for: the largest end of a tensor's
 * data_offsets (0 when the header is not JSON or names none). */
static size_t data_wanted(const uint8_t *h, size_t n) {
  json_t *root = json_loadb((const char *)h, n, 0, NULL);
  const char *key;
  json_t *t;
  size_t end = 0;
  json_object_foreach(root, key, t) {
    json_t *end_v = json_array_get(json_object_get(t, "data_offsets"), 1);
    json_int_t e = json_integer_value(end_v);
    if (strcmp(key, "__metadata__") != 0 && e > 0 && (size_t)e > end)
      end = (size_t)e;
  }
  json_decref(root);
  return end < MAX_DATA ? end : MAX_DATA;
}

/* The bytes of one element's worth of t's dtype and shape, or -1 when
 * they are not a known dtype and a shape of integers >= 0. */
static int64_t bytes_of(json_t *t) {
  const char *name = json_string_value(json_object_get(t, "dtype"));
  json_t *shape = json_object_get(t, "shape");
  int bits = 0;
  for (int i = 0; name && i < ATTND_ST_N_DTYPES; i++)
    if (strcmp(name, attnd_st_dtype_name((attnd_st_dtype_t)i)) == 0)
      bits = attnd_st_dtype_bits((attnd_st_dtype_t)i);
  if (!bits || !json_is_array(shape))
    return -1;
  int64_t elems = 1;
  size_t i;
  json_t *v;
  json_array_foreach(shape, i, v) {
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        __builtin_mul_overflow(elems, json_integer_value(v), &elems))
      return -1;
  }
  if (elems > INT64_MAX / 64 || elems * bits % 8)
    return -1;
  return elems * bits / 8;
}

/* The header with the tensors' data_offsets laid end to end in its order,
 * from their dtypes and shapes, so that a mutated shape still fits (the
 * offsets themselves are fuzz_safetensors' part); NULL, to keep the text
 * as it is, when it is not a JSON object without duplicate keys. */
static char *laid_out(const uint8_t *h, size_t hn) {
  json_t *root = json_loadb((const char *)h, hn, JSON_REJECT_DUPLICATES, NULL);
  const char *key;
  json_t *t;
  int64_t off = 0, n;
  json_object_foreach(root, key, t) {
    if (strcmp(key, "__metadata__") == 0 || (n = bytes_of(t)) < 0 ||
        n > INT64_MAX - off)
      continue;
    json_object_set_new(t, "data_offsets", json_pack("[II]", off, off + n));
    off += n;
  }
  char *text = json_is_object(root)
                   ? json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER)
                   : NULL;
  json_decref(root);
  return text;
}

/* The file's bytes in a new buffer: length, header, data. */
static uint8_t *file_of(const uint8_t *h0, size_t hn, const uint8_t *d,
                        size_t dn, size_t *len) {
  char *text = laid_out(h0, hn);
  const uint8_t *h = text ? (const uint8_t *)text : h0;
  hn = text ? strlen(text) : hn;
  size_t want = data_wanted(h, hn);
  *len = 8 + hn + want;
  uint8_t *b = malloc(*len);
  FUZZ_CHECK(b != NULL, "out of memory");
  for (int i = 0; i < 8; i++)
    b[i] = (uint8_t)((uint64_t)hn >> (8 * i));
  memcpy(b + 8, h, hn);
  for (size_t i = 0; i < want; i++)
    b[8 + hn + i] = dn ? d[i % dn] : 0;
  free(text);
  return b;
}

/* Every value of a weight of n floats is finite (and readable: ASan checks
 * that the buffer holds n). */
static void check_values(const attnd_layer_t *l, const char *what,
                         const float *w, int64_t n) {
  if (!w)
    return;
  for (int64_t i = 0; i < n; i++)
    FUZZ_CHECK(isfinite(w[i]), "'%s': %s[%lld] is not finite", l->name, what,
               (long long)i);
}

/* The stored tensor named name + suffix, or NULL. */
static const attnd_st_tensor_t *tensor(const attnd_st_file_t *f,
                                       const char *name, const char *suffix) {
  char full[1024];
  snprintf(full, sizeof full, "%s%s", name, suffix);
  return attnd_st_find(f, full);
}

static int has_shape(const attnd_st_tensor_t *t, int64_t rows, int64_t cols) {
  return t && t->rank == 2 && t->shape[0] == rows && t->shape[1] == cols;
}

/* The query and output weights in the file have the shapes l's parameters
 * give, as its convention names and stores them. */
static void check_shapes(const attnd_layer_t *l, const attnd_st_file_t *f) {
  int64_t qo = l->H * l->Dh, oi = l->H * l->Dv;
  const attnd_st_tensor_t *q = NULL, *o = NULL;
  int ok = 0;
  switch (l->convention) {
  case ATTND_CONV_LLAMA:
    q = tensor(f, l->name, ".q_proj.weight");
    o = tensor(f, l->name, ".o_proj.weight");
    ok = has_shape(q, qo, l->E) && has_shape(o, l->Eo, oi) &&
         has_shape(tensor(f, l->name, ".k_proj.weight"), l->Hkv * l->Dh,
                   l->Ek) &&
         has_shape(tensor(f, l->name, ".v_proj.weight"), l->Hkv * l->Dv, l->Ev);
    break;
  case ATTND_CONV_BERT:
    q = tensor(f, l->name, ".self.query.weight");
    o = tensor(f, l->name, ".output.dense.weight");
    ok = has_shape(q, qo, l->E) && has_shape(o, l->Eo, oi);
    break;
  case ATTND_CONV_GPT2:
    q = tensor(f, l->name, ".c_attn.weight");
    o = tensor(f, l->name, ".c_proj.weight");
    ok = has_shape(q, l->E, 3 * l->E) && qo == l->E && l->Hkv == l->H &&
         l->Dv == l->Dh && has_shape(o, oi, l->Eo);
    break;
  case ATTND_CONV_TORCH_MHA: {
    /* "x" is prefix "x.", or the directory's name for an empty prefix */
    char p[1024];
    snprintf(p, sizeof p, "%s.", l->name);
    if (!tensor(f, p, "out_proj.weight"))
      p[0] = '\0';
    o = tensor(f, p, "out_proj.weight");
    if ((q = tensor(f, p, "in_proj_weight")))
      ok = has_shape(q, 3 * l->E, l->E) && qo == l->E && l->Hkv == l->H &&
           l->Dv == l->Dh && l->Ek == l->E && l->Ev == l->E;
    else
      ok = has_shape(q = tensor(f, p, "q_proj_weight"), qo, l->E) &&
           has_shape(tensor(f, p, "k_proj_weight"), l->Hkv * l->Dh, l->Ek) &&
           has_shape(tensor(f, p, "v_proj_weight"), l->Hkv * l->Dv, l->Ev);
    ok = ok && has_shape(o, l->Eo, oi);
    break;
  }
  }
  FUZZ_CHECK(ok,
             "'%s' (%s): H %lld, Hkv %lld, Dh %lld, Dv %lld, E %lld, Ek "
             "%lld, Ev %lld, Eo %lld disagree with the file's shapes",
             l->name, attnd_convention_name(l->convention), (long long)l->H,
             (long long)l->Hkv, (long long)l->Dh, (long long)l->Dv,
             (long long)l->E, (long long)l->Ek, (long long)l->Ev,
             (long long)l->Eo);
  FUZZ_CHECK(strcmp(l->file_dtype, attnd_st_dtype_name(q->dtype)) == 0,
             "'%s': file_dtype %s, the query weight is %s", l->name,
             l->file_dtype, attnd_st_dtype_name(q->dtype));
}

static void check_rope(const attnd_layer_t *l) {
  const attn_rope_t *r = &l->rope;
  if (r->style == ATTN_ROPE_NONE) {
    FUZZ_CHECK(r->theta == 0 && r->dims == 0 &&
                   r->scaling == ATTN_ROPE_SCALING_NONE && r->factor == 0,
               "'%s': rope none, but not all zero", l->name);
    return;
  }
  FUZZ_CHECK(r->style == ATTN_ROPE_HALF || r->style == ATTN_ROPE_INTERLEAVED,
             "'%s': rope style %d", l->name, (int)r->style);
  FUZZ_CHECK(isfinite(r->theta) && r->theta > 1, "'%s': rope theta %g", l->name,
             r->theta);
  FUZZ_CHECK(r->dims >= 2 && r->dims % 2 == 0 && r->dims <= l->Dh,
             "'%s': rope dims %lld of head_dim %lld", l->name,
             (long long)r->dims, (long long)l->Dh);
  if (r->scaling == ATTN_ROPE_SCALING_NONE)
    return;
  FUZZ_CHECK(r->scaling == ATTN_ROPE_SCALING_LINEAR ||
                 r->scaling == ATTN_ROPE_SCALING_LLAMA3,
             "'%s': rope scaling %d", l->name, (int)r->scaling);
  FUZZ_CHECK(isfinite(r->factor) && r->factor >= 1, "'%s': rope factor %g",
             l->name, r->factor);
  if (r->scaling == ATTN_ROPE_SCALING_LLAMA3)
    FUZZ_CHECK(isfinite(r->low_freq_factor) && r->low_freq_factor > 0 &&
                   isfinite(r->high_freq_factor) &&
                   r->high_freq_factor > r->low_freq_factor &&
                   isfinite(r->original_max_position) &&
                   r->original_max_position > 0,
               "'%s': llama3 scaling %g, %g, %g", l->name, r->low_freq_factor,
               r->high_freq_factor, r->original_max_position);
}

static void check_layer(const attnd_layer_t *l, const attnd_st_file_t *f) {
  FUZZ_CHECK(l->name && l->name[0] && l->file && strcmp(l->file, st_path) == 0,
             "a layer without a name, or of another file");
  FUZZ_CHECK(l->H >= 1 && l->Hkv >= 1 && l->H % l->Hkv == 0 && l->Dh >= 1 &&
                 l->Dv >= 1 && l->E >= 1 && l->Ek >= 1 && l->Ev >= 1 &&
                 l->Eo >= 1,
             "'%s': H %lld, Hkv %lld, Dh %lld, Dv %lld, E %lld, Eo %lld",
             l->name, (long long)l->H, (long long)l->Hkv, (long long)l->Dh,
             (long long)l->Dv, (long long)l->E, (long long)l->Eo);
  FUZZ_CHECK(l->q_weight && l->k_weight && l->v_weight && l->o_weight,
             "'%s': a weight is missing", l->name);
  check_shapes(l, f);
  int64_t qo = l->H * l->Dh, ko = l->Hkv * l->Dh, vo = l->Hkv * l->Dv;
  struct {
    const char *what;
    const float *w;
    int64_t n;
  } parts[] = {
      {"q_weight", l->q_weight, qo * l->E},
      {"k_weight", l->k_weight, ko * l->Ek},
      {"v_weight", l->v_weight, vo * l->Ev},
      {"o_weight", l->o_weight, l->Eo * l->H * l->Dv},
      {"q_bias", l->q_bias, qo},
      {"k_bias", l->k_bias, ko},
      {"v_bias", l->v_bias, vo},
      {"o_bias", l->o_bias, l->Eo},
      {"q_norm", l->q_norm, l->Dh},
      {"k_norm", l->k_norm, l->Dh},
  };
  size_t bytes = 0;
  for (size_t i = 0; i < sizeof parts / sizeof *parts; i++) {
    check_values(l, parts[i].what, parts[i].w, parts[i].n);
    bytes += parts[i].w ? (size_t)parts[i].n * sizeof(float) : 0;
  }
  FUZZ_CHECK(l->bytes == bytes, "'%s' holds %zu bytes, its parts %zu", l->name,
             l->bytes, bytes);
  check_rope(l);
  FUZZ_CHECK(l->norm_eps >= 0 && l->norm_eps <= 1, "'%s': norm_eps %g", l->name,
             (double)l->norm_eps);
  FUZZ_CHECK(l->window >= 0, "'%s': window %lld", l->name,
             (long long)l->window);
  FUZZ_CHECK(l->causal == ATTN_CAUSAL_NONE ||
                 l->causal == ATTN_CAUSAL_BOTTOM_RIGHT ||
                 l->causal == ATTN_CAUSAL_TOP_LEFT,
             "'%s': causal %d", l->name, (int)l->causal);
}

/* The next part of [*p, end): up to a NUL or the end, *p moved past it. */
static size_t part(const uint8_t **p, const uint8_t *end) {
  const uint8_t *start = *p, *nul = memchr(start, 0, (size_t)(end - start));
  *p = nul ? nul + 1 : end;
  return (size_t)((nul ? nul : end) - start);
}

/* Writes path with n bytes of text, or removes it for none. */
static void text_or_none(const char *path, const uint8_t *text, size_t n) {
  if (n)
    write_file(path, text, n, NULL, 0);
  else
    unlink(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const uint8_t *end = data + size, *p = data;
  const uint8_t *c = p;
  size_t cn = part(&p, end);
  const uint8_t *h = p;
  size_t hn = part(&p, end);
  const uint8_t *x = p;
  size_t xn = part(&p, end);
  const uint8_t *d = p;

  text_or_none(config_path, c, cn);
  text_or_none(index_path, x, xn);
  size_t len;
  uint8_t *file = file_of(h, hn, d, (size_t)(end - d), &len);
  write_file(st_path, file, len, NULL, 0);

  attnd_layer_set_t *set = (attnd_layer_set_t *)1;
  char msg[1024];
  memset(msg, 0x5a, sizeof msg);
  int rc = attnd_layers_load(dir, &set, msg, sizeof msg);
  if (verbose)
    dprintf(fuzz_report_fd, "%s\n", rc ? msg : "loaded");
  if (rc != 0) {
    FUZZ_CHECK(set == NULL, "a failure leaves a set");
    FUZZ_CHECK(memchr(msg, '\0', sizeof msg) != NULL && msg[0] != '\0',
               "a failure without a message");
    free(file);
    return 0;
  }
  /* what loaded parsed, so the harness reads the same header */
  attnd_st_file_t f;
  char st_msg[256];
  FUZZ_CHECK(attnd_st_parse(file, len, &f, st_msg, sizeof st_msg) == 0,
             "a loaded file does not parse: %s", st_msg);
  size_t n = attnd_layer_set_count(set), bytes = 0;
  FUZZ_CHECK(n >= 1, "a set loaded from a directory is empty");
  for (size_t i = 0; i < n; i++) {
    const attnd_layer_t *l = attnd_layer_set_get(set, i);
    FUZZ_CHECK(i == 0 ||
                   strcmp(attnd_layer_set_get(set, i - 1)->name, l->name) < 0,
               "layers out of order at '%s'", l->name);
    FUZZ_CHECK(attnd_layer_set_find(set, l->name) == l,
               "'%s' not found by name", l->name);
    check_layer(l, &f);
    bytes += l->bytes;
  }
  FUZZ_CHECK(attnd_layer_set_bytes(set) == bytes,
             "the set holds %zu bytes, its layers %zu",
             attnd_layer_set_bytes(set), bytes);
  attnd_st_free(&f);
  attnd_layer_set_unref(set);
  free(file);
  return 0;
}
