/* server/model/layer_source.c: one path of --layers while it loads: a
 * file, or a directory's *.safetensors files checked against its
 * *.safetensors.index.json, and its config.json; every file mapped and
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
    int shard = attnd__ends_with(de->d_name, ".safetensors");
    int index = attnd__ends_with(de->d_name, ".safetensors.index.json");
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

  /* Each tensor an index names must be in the file it names. */
  for (size_t i = 0; i < s->n_indexes; i++) {
    const char *tensor;
    json_t *file;
    json_object_foreach(json_object_get(s->indexes[i], "weight_map"), tensor,
                        file) {
      const entry_t *e = attnd__find_entry(s, "", 0, tensor);
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
