/* server/model/layer_source.c: one path of --layers while it loads: a
 * file, or the *.safetensors files of a directory that its
 * model.safetensors or model.safetensors.index.json chooses, and its
 * config.json; every file mapped and
 * parsed, and their tensors gathered into one table sorted by name (passes
 * 1 and 2 of layers.c's load). See layer_build.h. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "codec/util.h"
#include "model/layer_build.h"

void attnd__source_close(source_t *s) {
  for (size_t i = 0; i < s->n_mapped; i++)
    attnd_st_unmap(&s->maps[i]);
  for (size_t i = 0; i < s->n_files; i++)
    free(s->files[i]);
  for (size_t i = 0; i < s->n_skipped; i++)
    free(s->skipped[i]);
  json_decref(s->index);
  json_decref(s->config);
  free(s->maps);
  free(s->files);
  free(s->tensors);
  free(s->index_path);
  free(s->skipped);
  free(s->config_path);
  free(s->unnamed);
  memset(s, 0, sizeof *s);
}

int attnd__ends_with(const char *s, const char *suffix) {
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

#define SINGLE_NAME "model.safetensors"
#define INDEX_NAME "model.safetensors.index.json"

/* Marks in chosen[] which of a directory's *.safetensors files (names,
 * n of them, sorted) a load reads, as transformers' from_pretrained
 * chooses them: model.safetensors alone when it is there; else, with
 * model.safetensors.index.json, the files its weight_map names, each of
 * which must be there (a name of this directory, never a path); else
 * every one, as a directory of single-layer files needs. */
static int choose_files(source_t *s, char **names, size_t n, char *chosen,
                        char *msg, size_t msz) {
  const char *single = SINGLE_NAME;
  char **hit = n ? bsearch(&single, names, n, sizeof *names, cmp_str) : NULL;
  if (hit) {
    chosen[hit - names] = 1;
    s->chosen_by = SINGLE_NAME;
    return 0;
  }
  if (!(s->index_path = join(s->path, INDEX_NAME)))
    return attnd_fail(msg, msz, "out of memory");
  struct stat st;
  if (stat(s->index_path, &st) < 0) {
    if (errno != ENOENT)
      return attnd_fail(msg, msz, "%s: %s", s->index_path, strerror(errno));
    free(s->index_path);
    s->index_path = NULL;
    if (n == 0)
      return attnd_fail(msg, msz,
                        "%s: no .safetensors file and no " INDEX_NAME
                        " in this directory",
                        s->path);
    memset(chosen, 1, n);
    return 0;
  }
  if (!(s->index = load_json(s->index_path, msg, msz)))
    return -1;
  json_t *map = json_object_get(s->index, "weight_map");
  if (!json_is_object(map))
    return attnd_fail(msg, msz, "%s: no \"weight_map\" object", s->index_path);
  if (json_object_size(map) == 0)
    return attnd_fail(msg, msz, "%s: weight_map names no file", s->index_path);
  const char *tensor;
  json_t *file;
  json_object_foreach(map, tensor, file) {
    const char *f = json_string_value(file);
    if (!f)
      return attnd_fail(msg, msz, "%s: weight_map[\"%s\"] is not a file name",
                        s->index_path, tensor);
    hit = n ? bsearch(&f, names, n, sizeof *names, cmp_str) : NULL;
    if (!hit)
      return attnd_fail(msg, msz,
                        "%s: weight_map puts tensor '%s' in '%s', which is "
                        "not in %s",
                        s->index_path, tensor, f, s->path);
    chosen[hit - names] = 1;
  }
  s->chosen_by = INDEX_NAME;
  return 0;
}

/* A directory: the *.safetensors files choose_files picks (following
 * links, as in the Hugging Face cache; the others named in s->skipped),
 * and its config.json. */
static int open_dir(source_t *s, char *msg, size_t msz) {
  DIR *d = opendir(s->path);
  if (!d)
    return attnd_fail(msg, msz, "%s: %s", s->path, strerror(errno));
  char **names = NULL, *chosen = NULL;
  size_t n_names = 0;
  int rc = 0;
  struct dirent *de;
  while (rc == 0 && (de = readdir(d)))
    if (attnd__ends_with(de->d_name, ".safetensors") &&
        push_str(&names, &n_names, de->d_name) < 0)
      rc = attnd_fail(msg, msz, "out of memory");
  closedir(d);
  if (rc == 0 && n_names)
    qsort(names, n_names, sizeof *names, cmp_str);
  if (rc == 0 && !(chosen = calloc(n_names ? n_names : 1, 1)))
    rc = attnd_fail(msg, msz, "out of memory");
  if (rc == 0)
    rc = choose_files(s, names, n_names, chosen, msg, msz);
  for (size_t i = 0; rc == 0 && i < n_names; i++) {
    if (!chosen[i]) {
      if (push_str(&s->skipped, &s->n_skipped, names[i]) < 0)
        rc = attnd_fail(msg, msz, "out of memory");
      continue;
    }
    char *full = join(s->path, names[i]);
    struct stat st;
    if (!full)
      rc = attnd_fail(msg, msz, "out of memory");
    else if (stat(full, &st) < 0)
      rc = attnd_fail(msg, msz, "%s: %s", full, strerror(errno));
    else if (!S_ISREG(st.st_mode))
      rc = attnd_fail(msg, msz, "%s: not a regular file", full);
    else if (push_str(&s->files, &s->n_files, full) < 0)
      rc = attnd_fail(msg, msz, "out of memory");
    free(full);
  }
  for (size_t i = 0; i < n_names; i++)
    free(names[i]);
  free(names);
  free(chosen);
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
const entry_t *attnd__find_entry(const source_t *s, const char *p, size_t plen,
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

_Thread_local uint64_t attnd__layer_types_read;

/* What every layer of the path asks of config.json's layer_types
 * (attnd__resolve_window reads the one entry of its index). */
static void scan_layer_types(source_t *s) {
  const json_t *types =
      s->config ? json_object_get(s->config, "layer_types") : NULL;
  size_t n = json_array_size(types);
  s->types_bad = n;
  for (size_t i = 0; i < n; i++) {
    const char *t = json_string_value(json_array_get(types, i));
    attnd__layer_types_read++;
    int sliding = t && strcmp(t, "sliding_attention") == 0;
    if (!sliding && !(t && strcmp(t, "full_attention") == 0)) {
      s->types_bad = i;
      break;
    }
    s->types_any[sliding] = 1;
  }
}

/* Passes 1 and 2: opens the path, maps its files and gathers their
 * tensors. */
int attnd__source_open(source_t *s, char *msg, size_t msz) {
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
  scan_layer_types(s);

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

  /* Each tensor the index names must be in the file it names. */
  const char *tensor;
  json_t *file;
  json_object_foreach(json_object_get(s->index, "weight_map"), tensor, file) {
    const entry_t *e = attnd__find_entry(s, "", 0, tensor);
    const char *in = e ? s->files[e->file] : NULL;
    const char *base = in ? strrchr(in, '/') : NULL;
    if (!e || strcmp(base ? base + 1 : in, json_string_value(file)) != 0)
      return attnd_fail(msg, msz,
                        "%s: weight_map puts tensor '%s' in '%s', but %s",
                        s->index_path, tensor, json_string_value(file),
                        e ? "it is in another file" : "no file holds it");
  }
  return 0;
}
