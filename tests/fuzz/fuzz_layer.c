/* tests/fuzz/fuzz_layer.c: a layer directory's load (server/model/layers.h
 * attnd_layers_load, with layer_source.c and layer_params.c): config.json,
 * the safetensors headers' __metadata__ and the tensors' names, dtypes and
 * shapes, the shard index, resolved into resident layers.
 *
 * Input: config.json's text up to the first NUL (empty: the directory has
 * no config.json); the safetensors headers' JSON up to the second NUL, one
 * a shard, separated by form feeds (which JSON never needs), at most
 * MAX_SHARDS of them: a lone one is model.safetensors, several are
 * model-00001.safetensors, model-00002.safetensors and on;
 * model.safetensors.index.json's text up to the third (empty: none);
 * the bytes after it, repeated to fill the data the headers' data_offsets
 * ask for (zeros when there are none), so that mutations of a header keep
 * a consistent file whose values the fuzzer still chooses; and a header
 * that is JSON gets its data_offsets from its tensors' dtypes and shapes,
 * laid end to end, so that a mutated shape keeps it consistent too. The
 * files are rewritten at each input in one directory under /dev/shm (the
 * loader's only entry is a path), and the directory is loaded. The
 * directory is named by the process's pid and start time, so that a run
 * removes those that a killed or crashed run left (stale_dirs).
 *
 * Checked: no crash, no leak; a failure leaves a message and no set; a
 * success gives layers in strict name order, each found by its name, whose
 * parameters are what layers.h and layer_build.h promise: head counts and
 * sizes positive, Hkv dividing H, the query and output weights' shapes in
 * the files equal to H·Dh by E and Eo by H·Dv (as the convention stores
 * them), the layer's file the shard that holds its query weight (and,
 * where config.json gives no head count, H that shard's num_heads), the bytes
 * held equal to the sizes the parameters give, every value finite, rope
 * either all zero or with theta > 1, an even rope_dims in 2 .. Dh and
 * finite scaling of its type's ranges, norm_eps in [0, 1], a window >= 0;
 * and of the files, that the shards read are those layers.h's rule
 * chooses (model.safetensors alone, its index unread; else those the
 * index names, each of them there by its plain file name, not a path;
 * else all), the others named in the set as left out by the index, that
 * no tensor is in two shards read and that each tensor the index names is
 * in the shard it names. Only the shards read are searched for a layer's
 * tensors. */
#include <dirent.h>
#include <errno.h>
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
#define MAX_SHARDS 4
#define SHM "/dev/shm"
#define PREFIX "attnd-fuzz-layer-"

static char dir[96], config_path[128], index_path[128], single_path[128];
static char shard_path[MAX_SHARDS][128]; /* model-00001.safetensors, ... */
static int verbose; /* FUZZ_LAYER_VERBOSE=1: each input's outcome */

/* The start time of process pid (field 22 of /proc/pid/stat, in clock
 * ticks since boot), or 0 when there is no such process or it has exited
 * (a zombie, not yet reaped, holds its pid). With the pid it names one
 * process for good: a pid is reused, a pid and start time are not. */
static unsigned long long start_time(long pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%ld/stat", pid);
  int fd = open(path, O_RDONLY);
  if (fd < 0)
    return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0)
    return 0;
  buf[n] = '\0';
  /* the command's name, field 2, is in parentheses and may hold spaces */
  char *p = strrchr(buf, ')');
  char state;
  unsigned long long t = 0;
  if (!p ||
      sscanf(p + 1,
             " %c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u "
             "%*u %*d %*d %*d %*d %*d %*d %llu",
             &state, &t) != 2 ||
      state == 'Z' || state == 'X')
    return 0;
  return t;
}

/* Removes directory name of `parent` (a descriptor) and the files in it,
 * without following links. */
static void remove_tree(int parent, const char *name) {
  int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
  DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
  if (!d) {
    if (fd >= 0)
      close(fd);
    return;
  }
  struct dirent *de;
  while ((de = readdir(d)))
    if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, ".."))
      unlinkat(fd, de->d_name, 0);
  closedir(d);
  unlinkat(parent, name, AT_REMOVEDIR);
}

/* Removes the directories of this harness that a run no longer alive left
 * under /dev/shm: a crash (libFuzzer exits without atexit) or a kill -9
 * leaves its directory, and tmpfs holds it until the next boot. Only those
 * of this user, named PREFIX<pid>-<start time>, whose pid is not that
 * process (gone, or reused by another). */
static void stale_dirs(void) {
  DIR *d = opendir(SHM);
  if (!d)
    return;
  struct dirent *de;
  while ((de = readdir(d))) {
    long pid;
    unsigned long long t;
    int end = 0;
    struct stat st;
    if (strncmp(de->d_name, PREFIX, strlen(PREFIX)) != 0 ||
        sscanf(de->d_name + strlen(PREFIX), "%ld-%llu%n", &pid, &t, &end) !=
            2 ||
        de->d_name[strlen(PREFIX) + (size_t)end] != '\0' ||
        fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
        !S_ISDIR(st.st_mode) || st.st_uid != getuid() || start_time(pid) == t)
      continue;
    remove_tree(dirfd(d), de->d_name);
  }
  closedir(d);
}

static void remove_dir(void) {
  remove_tree(AT_FDCWD, dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  stale_dirs();
  long pid = (long)getpid();
  snprintf(dir, sizeof dir, SHM "/" PREFIX "%ld-%llu", pid, start_time(pid));
  snprintf(config_path, sizeof config_path, "%s/config.json", dir);
  snprintf(index_path, sizeof index_path, "%s/model.safetensors.index.json",
           dir);
  snprintf(single_path, sizeof single_path, "%s/model.safetensors", dir);
  for (int i = 0; i < MAX_SHARDS; i++)
    snprintf(shard_path[i], sizeof shard_path[i], "%s/model-%05d.safetensors",
             dir, i + 1);
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

/* The file's bytes in a new buffer: length, header, data; the data are
 * the input's tail d from byte *at on, and *at moves past them, so that
 * each shard has values of its own. */
static uint8_t *file_of(const uint8_t *h0, size_t hn, const uint8_t *d,
                        size_t dn, size_t *at, size_t *len) {
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
    b[8 + hn + i] = dn ? d[(*at + i) % dn] : 0;
  *at = dn ? (*at + want) % dn : 0;
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

/* The shards written for an input, and of those the load read (by the
 * rule, choose), each parsed (what loaded parsed). */
typedef struct {
  size_t n;
  uint8_t *bytes[MAX_SHARDS];
  size_t len[MAX_SHARDS];
  int read[MAX_SHARDS];
  attnd_st_file_t f[MAX_SHARDS];
} shards_t;

/* Shard i's path: model.safetensors when it is the only one. */
static const char *path_of(const shards_t *sh, size_t i) {
  return sh->n == 1 ? single_path : shard_path[i];
}

/* The tensor named name + suffix in any shard read, or NULL. */
static const attnd_st_tensor_t *tensor(const shards_t *sh, const char *name,
                                       const char *suffix) {
  char full[1024];
  snprintf(full, sizeof full, "%s%s", name, suffix);
  const attnd_st_tensor_t *t = NULL;
  for (size_t i = 0; !t && i < sh->n; i++)
    if (sh->read[i])
      t = attnd_st_find(&sh->f[i], full);
  return t;
}

/* The shard whose table holds t. */
static size_t shard_of(const shards_t *sh, const attnd_st_tensor_t *t) {
  size_t i = 0;
  /* a shard with no tensors may have no table (NULL: no pointer past it) */
  while (i + 1 < sh->n && !(sh->f[i].n > 0 && t >= sh->f[i].tensors &&
                            t < sh->f[i].tensors + sh->f[i].n))
    i++;
  return i;
}

static int has_shape(const attnd_st_tensor_t *t, int64_t rows, int64_t cols) {
  return t && t->rank == 2 && t->shape[0] == rows && t->shape[1] == cols;
}

/* The query and output weights in the files have the shapes l's
 * parameters give, as its convention names and stores them. Returns the
 * query weight. */
static const attnd_st_tensor_t *check_shapes(const attnd_layer_t *l,
                                             const shards_t *f) {
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
  FUZZ_CHECK(strcmp(l->file, path_of(f, shard_of(f, q))) == 0,
             "'%s' is of %s, its query weight in %s", l->name, l->file,
             path_of(f, shard_of(f, q)));
  return q;
}

/* Where config.json (config, or NULL) gives no head count, H is the
 * num_heads of the __metadata__ of the shard that holds the query weight
 * q, when it has one (layer_params.c's order), not another shard's. */
static void check_heads(const attnd_layer_t *l, const shards_t *f,
                        const attnd_st_tensor_t *q, const json_t *config) {
  const char *heads = attnd_st_meta(&f->f[shard_of(f, q)], "num_heads");
  json_t *h1 = json_object_get(config, "num_attention_heads"),
         *h2 = json_object_get(config, "n_head");
  if (!heads || (h1 && !json_is_null(h1)) || (h2 && !json_is_null(h2)))
    return;
  FUZZ_CHECK(l->H == strtoll(heads, NULL, 10),
             "'%s': H %lld, but num_heads '%s' in %s, its query weight's "
             "shard",
             l->name, (long long)l->H, heads, path_of(f, shard_of(f, q)));
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

static void check_layer(const attnd_layer_t *l, const shards_t *f,
                        const json_t *config) {
  FUZZ_CHECK(l->name && l->name[0] && l->file, "a layer without a name");
  FUZZ_CHECK(l->H >= 1 && l->Hkv >= 1 && l->H % l->Hkv == 0 && l->Dh >= 1 &&
                 l->Dv >= 1 && l->E >= 1 && l->Ek >= 1 && l->Ev >= 1 &&
                 l->Eo >= 1,
             "'%s': H %lld, Hkv %lld, Dh %lld, Dv %lld, E %lld, Eo %lld",
             l->name, (long long)l->H, (long long)l->Hkv, (long long)l->Dh,
             (long long)l->Dv, (long long)l->E, (long long)l->Eo);
  FUZZ_CHECK(l->q_weight && l->k_weight && l->v_weight && l->o_weight,
             "'%s': a weight is missing", l->name);
  check_heads(l, f, check_shapes(l, f), config);
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

/* Marks the shards a load reads (sh->read), by layers.h's rule: a lone
 * shard is model.safetensors, read alone and its index (x, xn bytes; none
 * when empty) never; else, with an index, the shards its weight_map
 * names; else all. Returns 0, or -1 where the rule refuses the directory:
 * an index that is not an object with a weight_map object naming at
 * least one tensor, each in a shard that is there, by plain file name. */
static int choose(shards_t *sh, const uint8_t *x, size_t xn) {
  for (size_t i = 0; i < sh->n; i++)
    sh->read[i] = sh->n == 1 || !xn;
  if (sh->n == 1 || !xn)
    return 0;
  json_t *idx = json_loadb((const char *)x, xn, JSON_REJECT_DUPLICATES, NULL);
  json_t *map = json_object_get(idx, "weight_map");
  int ok = json_is_object(map) && json_object_size(map) > 0;
  const char *name;
  json_t *v;
  json_object_foreach(map, name, v) {
    const char *file = json_string_value(v);
    size_t i = 0;
    while (i < sh->n &&
           !(file && strcmp(file, strrchr(shard_path[i], '/') + 1) == 0))
      i++;
    if (i == sh->n)
      ok = 0;
    else
      sh->read[i] = 1;
  }
  json_decref(idx);
  return ok ? 0 : -1;
}

/* Of a loaded directory's files: those the rule leaves out are the set's
 * one list of skipped files, chosen by the index; no tensor is in two
 * shards read, and each tensor the index names is in the shard it names,
 * by its plain file name. */
static void check_files(const attnd_layer_set_t *set, const shards_t *sh,
                        const uint8_t *x, size_t xn) {
  const attnd_layer_skip_t *k = attnd_layer_set_skip(set, 0);
  size_t skipped = 0;
  for (size_t i = 0; i < sh->n; i++) {
    if (sh->read[i])
      continue;
    FUZZ_CHECK(k && skipped < k->n &&
                   strcmp(k->files[skipped], strrchr(shard_path[i], '/') + 1) ==
                       0,
               "%s, which the index does not name, is not listed as left out",
               shard_path[i]);
    skipped++;
  }
  FUZZ_CHECK(attnd_layer_set_skip_count(set) == (skipped > 0) &&
                 (!k || (k->n == skipped &&
                         strcmp(k->by, "model.safetensors.index.json") == 0)),
             "%zu directories with %zu files left out, by %s; the rule "
             "leaves out %zu",
             attnd_layer_set_skip_count(set), k ? k->n : 0,
             k ? k->by : "nothing", skipped);
  for (size_t i = 0; i < sh->n; i++)
    for (size_t t = 0; sh->read[i] && t < sh->f[i].n; t++) {
      const char *name = sh->f[i].tensors[t].name;
      for (size_t j = i + 1; j < sh->n; j++)
        FUZZ_CHECK(!sh->read[j] || !attnd_st_find(&sh->f[j], name),
                   "'%s' is in both %s and %s", name, path_of(sh, i),
                   path_of(sh, j));
    }
  if (!xn || sh->n == 1)
    return;
  json_t *idx = json_loadb((const char *)x, xn, JSON_REJECT_DUPLICATES, NULL);
  json_t *map = json_object_get(idx, "weight_map");
  FUZZ_CHECK(json_is_object(map), "loaded with an index without weight_map");
  const char *name;
  json_t *v;
  json_object_foreach(map, name, v) {
    const char *file = json_string_value(v);
    const attnd_st_tensor_t *t = tensor(sh, name, "");
    const char *in = t ? strrchr(shard_path[shard_of(sh, t)], '/') + 1 : NULL;
    FUZZ_CHECK(file && in && strcmp(file, in) == 0,
               "the index puts '%s' in '%s', but it is in %s", name,
               file ? file : "(not a string)", in ? in : "no shard");
  }
  json_decref(idx);
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
  /* the shards' headers, split at form feeds (the last keeps any more) */
  shards_t sh = {0};
  size_t at = 0;
  for (const uint8_t *hend = h + hn; sh.n < MAX_SHARDS; sh.n++) {
    const uint8_t *ff =
        sh.n + 1 < MAX_SHARDS ? memchr(h, '\f', (size_t)(hend - h)) : NULL;
    const uint8_t *stop = ff ? ff : hend;
    sh.bytes[sh.n] = file_of(h, (size_t)(stop - h), d, (size_t)(end - d), &at,
                             &sh.len[sh.n]);
    if (!ff) {
      sh.n++;
      break;
    }
    h = ff + 1;
  }
  for (size_t i = 0; i < sh.n; i++)
    write_file(path_of(&sh, i), sh.bytes[i], sh.len[i], NULL, 0);
  /* an earlier input's */
  if (sh.n > 1)
    unlink(single_path);
  for (size_t i = sh.n > 1 ? sh.n : 0; i < MAX_SHARDS; i++)
    unlink(shard_path[i]);
  int refused = choose(&sh, x, xn);

  attnd_layer_set_t *set = (attnd_layer_set_t *)1;
  char msg[1024];
  memset(msg, 0x5a, sizeof msg);
  int rc = attnd_layers_load(dir, &set, msg, sizeof msg);
  if (verbose)
    dprintf(fuzz_report_fd, "%zu shard%s: %s\n", sh.n, sh.n > 1 ? "s" : "",
            rc ? msg : "loaded");
  if (rc != 0) {
    FUZZ_CHECK(set == NULL, "a failure leaves a set");
    FUZZ_CHECK(memchr(msg, '\0', sizeof msg) != NULL && msg[0] != '\0',
               "a failure without a message");
  } else {
    FUZZ_CHECK(!refused,
               "loaded with an index that names no shard, or one not there");
    /* what loaded parsed, so the harness reads the same headers */
    for (size_t i = 0; i < sh.n; i++) {
      char st_msg[256];
      FUZZ_CHECK(!sh.read[i] || attnd_st_parse(sh.bytes[i], sh.len[i], &sh.f[i],
                                               st_msg, sizeof st_msg) == 0,
                 "a loaded file, %s, does not parse: %s", path_of(&sh, i),
                 st_msg);
    }
    check_files(set, &sh, x, xn);
    json_t *config =
        json_loadb((const char *)c, cn, JSON_REJECT_DUPLICATES, NULL);
    size_t n = attnd_layer_set_count(set), bytes = 0;
    FUZZ_CHECK(n >= 1, "a set loaded from a directory is empty");
    for (size_t i = 0; i < n; i++) {
      const attnd_layer_t *l = attnd_layer_set_get(set, i);
      FUZZ_CHECK(i == 0 ||
                     strcmp(attnd_layer_set_get(set, i - 1)->name, l->name) < 0,
                 "layers out of order at '%s'", l->name);
      FUZZ_CHECK(attnd_layer_set_find(set, l->name) == l,
                 "'%s' not found by name", l->name);
      check_layer(l, &sh, config);
      bytes += l->bytes;
    }
    FUZZ_CHECK(attnd_layer_set_bytes(set) == bytes,
               "the set holds %zu bytes, its layers %zu",
               attnd_layer_set_bytes(set), bytes);
    json_decref(config);
    for (size_t i = 0; i < sh.n; i++)
      if (sh.read[i])
        attnd_st_free(&sh.f[i]);
    attnd_layer_set_unref(set);
  }
  for (size_t i = 0; i < sh.n; i++)
    free(sh.bytes[i]);
  return 0;
}
