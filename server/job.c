/* server/job.c: a request body to a planned job, and a computed job to a
 * reply body.
 *
 * Decoding checks, in order: JSON syntax (400); the request's members and
 * their types; every tensor (form, shape, leaf types, finiteness); then
 * the core's validation of shapes and options (attn_plan_init); then the
 * configured limits. Every failure names the member as a JSON path. */
#include "job.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

/* The fast path lifts arrays of at least this many numbers, and strings of
 * at least this many characters, out of jansson's way. */
#define ATTND_BULK_MIN_ELEMS 64
#define ATTND_BULK_MIN_STRING 1024
#define JSON_FLAGS JSON_REJECT_DUPLICATES

double attnd_now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

int attnd_error_set(attnd_error_t *e, int status, const char *code,
                    const char *field, const char *fmt, ...) {
  e->status = status;
  e->code = code;
  snprintf(e->field, sizeof e->field, "%s", field ? field : "");
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->message, sizeof e->message, fmt, ap);
  va_end(ap);
  return -1;
}

#define E422(d, code, field, ...)                                              \
  attnd_error_set((d)->err, 422, code, field, __VA_ARGS__)

typedef struct dec {
  attnd_job_t *job;
  const attnd_config_t *cfg;
  attnd_error_t *err;
  attnd_form_t query_form;
  attnd_bulk_set_t *bulk; /* the fast path's items, or NULL */
  int planning; /* errors from here on do not depend on the path taken */
} dec_t;

enum { K_FLOAT, K_MASK }; /* element kinds: float32, or boolean as uint8 */

static void *dec_alloc(dec_t *d, size_t bytes) {
  attnd_job_t *j = d->job;
  if (j->n_allocs == j->cap_allocs) {
    size_t cap = j->cap_allocs ? 2 * j->cap_allocs : 16;
    void **a = realloc(j->allocs, cap * sizeof *a);
    if (a == NULL)
      return NULL;
    j->allocs = a;
    j->cap_allocs = cap;
  }
  void *p = malloc(bytes ? bytes : 1);
  if (p) {
    j->allocs[j->n_allocs++] = p;
    j->alloc_bytes += bytes;
  }
  return p;
}

/* Makes the job own p (malloc'd, `bytes` long). Returns 0, or -1 after
 * freeing p. */
static int dec_adopt(dec_t *d, void *p, size_t bytes) {
  attnd_job_t *j = d->job;
  if (j->n_allocs == j->cap_allocs) {
    size_t cap = j->cap_allocs ? 2 * j->cap_allocs : 16;
    void **a = realloc(j->allocs, cap * sizeof *a);
    if (a == NULL) {
      free(p);
      return -1;
    }
    j->allocs = a;
    j->cap_allocs = cap;
  }
  j->allocs[j->n_allocs++] = p;
  j->alloc_bytes += bytes;
  return 0;
}

static int oom(dec_t *d, const char *field) {
  return attnd_error_set(d->err, 503, "out_of_memory", field,
                         "out of memory decoding %s", field);
}

static const char *type_name(const json_t *v) {
  switch (json_typeof(v)) {
  case JSON_OBJECT:
    return "an object";
  case JSON_ARRAY:
    return "an array";
  case JSON_STRING:
    return "a string";
  case JSON_INTEGER:
  case JSON_REAL:
    return "a number";
  case JSON_TRUE:
    return "true";
  case JSON_FALSE:
    return "false";
  case JSON_NULL:
    return "null";
  }
  return "unknown";
}

static void shape_text(char *buf, size_t n, int rank, const int64_t *dim) {
  size_t k = (size_t)snprintf(buf, n, "[");
  for (int i = 0; i < rank && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "",
                          (long long)dim[i]);
  if (k < n)
    snprintf(buf + k, n - k, "]");
}

/* Rejects a tensor of more than max_tensor_elements before it is stored. */
static int check_elements(dec_t *d, const char *field, int rank,
                          const int64_t *dim, int64_t *n) {
  int64_t total = 1;
  for (int i = 0; i < rank; i++)
    if (__builtin_mul_overflow(total, dim[i], &total))
      total = INT64_MAX;
  *n = total;
  if (total > d->cfg->max_tensor_elements) {
    char s[128];
    shape_text(s, sizeof s, rank, dim);
    return E422(d, "limit_exceeded", field,
                "%s %s has %lld elements, over max_tensor_elements %lld", field,
                s, (long long)total, (long long)d->cfg->max_tensor_elements);
  }
  return 0;
}

/* Stores one leaf. `path` names it for messages ("query[0][3]"). */
static int leaf(dec_t *d, const json_t *v, int kind, void *dst, int64_t i,
                const char *field, const char *path) {
  if (kind == K_FLOAT) {
    if (!json_is_number(v))
      return E422(d, "invalid_type", field, "%s is %s; expected a number", path,
                  type_name(v));
    float f = (float)json_number_value(v);
    if (!isfinite(f))
      return E422(d, "non_finite", field,
                  "%s is %g, which is not a finite float32", path,
                  json_number_value(v));
    ((float *)dst)[i] = f;
    return 0;
  }
  uint8_t b;
  if (json_is_boolean(v))
    b = json_is_true(v);
  else if (json_is_number(v) &&
           (json_number_value(v) == 0 || json_number_value(v) == 1))
    b = json_number_value(v) == 1;
  else if (json_is_number(v))
    return E422(d, "invalid_value", field,
                "%s is %g; expected true, false, 0 or 1", path,
                json_number_value(v));
  else
    return E422(d, "invalid_type", field,
                "%s is %s; expected true, false, 0 or 1", path, type_name(v));
  ((uint8_t *)dst)[i] = b;
  return 0;
}

/* Fills dst from nested arrays of the shape dim[level..rank), checking that
 * every sub-array has its expected length. */
static int fill(dec_t *d, const json_t *v, int level, int rank,
                const int64_t *dim, int kind, void *dst, int64_t *i,
                const char *field, char *path, size_t plen, size_t pcap) {
  size_t n = json_array_size(v);
  for (size_t k = 0; k < n; k++) {
    const json_t *x = json_array_get(v, k);
    size_t pl = plen + (size_t)snprintf(path + plen, pcap - plen, "[%zu]", k);
    if (pl >= pcap)
      pl = pcap - 1;
    if (level == rank - 1) {
      if (json_is_array(x))
        return E422(d, "ragged_tensor", field,
                    "%s is an array, but %s has %d dimensions", path, field,
                    rank);
      if (leaf(d, x, kind, dst, (*i)++, field, path) < 0)
        return -1;
      continue;
    }
    if (!json_is_array(x))
      return E422(d, "ragged_tensor", field,
                  "%s is %s; expected an array of %lld (the tensor has %d "
                  "dimensions)",
                  path, type_name(x), (long long)dim[level + 1], rank);
    if ((int64_t)json_array_size(x) != dim[level + 1]) {
      char first[96];
      size_t fl = (size_t)snprintf(first, sizeof first, "%s", field);
      for (int l = 0; l <= level && fl < sizeof first; l++)
        fl += (size_t)snprintf(first + fl, sizeof first - fl, "[0]");
      return E422(d, "ragged_tensor", field,
                  "%s has length %zu, but %s has length %lld", path,
                  json_array_size(x), first, (long long)dim[level + 1]);
    }
    if (fill(d, x, level + 1, rank, dim, kind, dst, i, field, path, pl, pcap) <
        0)
      return -1;
  }
  return 0;
}

static int decode_nested(dec_t *d, const json_t *v, const char *field, int kind,
                         attn_tensor_t *t) {
  int64_t dim[ATTN_MAX_RANK];
  int rank = 0;
  for (const json_t *x = v; json_is_array(x); x = json_array_get(x, 0)) {
    if (rank == ATTN_MAX_RANK)
      return E422(d, "shape_mismatch", field, "%s has more than %d dimensions",
                  field, ATTN_MAX_RANK);
    if (json_array_size(x) == 0)
      return E422(d, "shape_mismatch", field,
                  "%s has an empty array at dimension %d", field, rank);
    dim[rank++] = (int64_t)json_array_size(x);
  }
  int64_t n;
  if (check_elements(d, field, rank, dim, &n) < 0)
    return -1;
  void *dst = dec_alloc(d, (size_t)n * (kind == K_FLOAT ? 4 : 1));
  if (dst == NULL)
    return oom(d, field);
  char path[160];
  size_t plen = (size_t)snprintf(path, sizeof path, "%s", field);
  int64_t i = 0;
  if (fill(d, v, 0, rank, dim, kind, dst, &i, field, path, plen, sizeof path) <
      0)
    return -1;
  t->data = dst;
  t->rank = rank;
  memcpy(t->dim, dim, sizeof(int64_t) * (size_t)rank);
  return 0;
}

/* Rejects members of `obj` that are not in the NULL-terminated `known`. */
static int check_members(dec_t *d, const json_t *obj, const char *where,
                         const char *const *known) {
  const char *key;
  json_t *val;
  json_object_foreach((json_t *)obj, key, val) {
    int ok = 0;
    for (const char *const *k = known; *k && !ok; k++)
      ok = strcmp(key, *k) == 0;
    if (!ok) {
      char list[256] = "", field[64];
      size_t n = 0;
      for (const char *const *k = known; *k && n < sizeof list; k++)
        n += (size_t)snprintf(list + n, sizeof list - n, "%s%s",
                              k == known ? "" : ", ", *k);
      snprintf(field, sizeof field, "%s%s%s", where, *where ? "." : "", key);
      return E422(d, "unknown_field", field,
                  "%s is not a known member%s%s (known: %s)", field,
                  *where ? " of " : "", where, list);
    }
  }
  return 0;
}

/* ---- the fast path's items ------------------------------------------------
 */

/* The array item that placeholder v stands for, or NULL. */
static attnd_bulk_t *bulk_array(const dec_t *d, const json_t *v) {
  if (d->bulk == NULL || json_array_size(v) != 3)
    return NULL;
  const json_t *tag = json_array_get(v, 0), *nonce = json_array_get(v, 1),
               *idx = json_array_get(v, 2);
  if (!json_is_string(tag) || json_string_length(tag) != 5 ||
      memcmp(json_string_value(tag), "\001bulk", 5) != 0 ||
      !json_is_integer(nonce) ||
      (uint64_t)json_integer_value(nonce) != d->bulk->nonce ||
      !json_is_integer(idx) || json_integer_value(idx) < 0 ||
      (size_t)json_integer_value(idx) >= d->bulk->n)
    return NULL;
  attnd_bulk_t *b = &d->bulk->items[json_integer_value(idx)];
  return b->text || b->data == NULL ? NULL : b;
}

/* The string item that placeholder v stands for, or NULL. */
static const attnd_bulk_t *bulk_string(const dec_t *d, const json_t *v) {
  unsigned long long nonce, idx;
  int used = 0;
  const char *s = json_string_value(v);
  if (d->bulk == NULL || s == NULL || strncmp(s, "\001bulk:", 6) != 0 ||
      sscanf(s + 6, "%llu:%llu%n", &nonce, &idx, &used) != 2 ||
      s[6 + used] != 0 || nonce != d->bulk->nonce || idx >= d->bulk->n ||
      d->bulk->items[idx].text == NULL)
    return NULL;
  return &d->bulk->items[idx];
}

/* A tensor from an array item: the floats as they are (the job adopts
 * them), or 0/1 bytes for a mask. The slow path decodes the same text to
 * the same values; any error here sends the request down the slow path,
 * which reports it in its own words. */
static int decode_bulk(dec_t *d, attnd_bulk_t *b, const char *field, int kind,
                       int rank, const int64_t *dim, attn_tensor_t *t) {
  int64_t n;
  if (check_elements(d, field, rank, dim, &n) < 0)
    return -1;
  if ((size_t)n != b->n)
    return E422(d, "size_mismatch", field, "%s: size", field);
  if (kind == K_FLOAT) {
    if (b->is_bool)
      return E422(d, "invalid_type", field, "%s: booleans", field);
    for (int64_t i = 0; i < n; i++)
      if (!isfinite(b->data[i]))
        return E422(d, "non_finite", field, "%s: not finite", field);
    if (dec_adopt(d, b->data, b->n * sizeof(float)) < 0) {
      b->data = NULL;
      return oom(d, field);
    }
    t->data = b->data;
    b->data = NULL;
  } else {
    uint8_t *m = dec_alloc(d, (size_t)n);
    if (m == NULL)
      return oom(d, field);
    for (int64_t i = 0; i < n; i++) {
      if (b->data[i] != 0 && b->data[i] != 1)
        return E422(d, "invalid_value", field, "%s: not 0 or 1", field);
      m[i] = b->data[i] == 1;
    }
    t->data = m;
  }
  t->rank = rank;
  memcpy(t->dim, dim, sizeof(int64_t) * (size_t)rank);
  return 0;
}

static int decode_shaped(dec_t *d, const json_t *v, const char *field, int kind,
                         attn_tensor_t *t, attnd_form_t *form) {
  static const char *const known[] = {"shape", "data", "base64", "dtype", NULL};
  char sub[96];
  if (check_members(d, v, field, known) < 0)
    return -1;
  const json_t *shape = json_object_get(v, "shape");
  const json_t *data = json_object_get(v, "data");
  const json_t *b64 = json_object_get(v, "base64");
  const json_t *dtype = json_object_get(v, "dtype");
  snprintf(sub, sizeof sub, "%s.shape", field);
  if (!json_is_array(shape))
    return E422(d, shape ? "invalid_type" : "missing_field", sub,
                "%s must be an array of dimensions%s", sub,
                shape ? "" : " (it is missing)");
  size_t rank = json_array_size(shape);
  if (rank < 1 || rank > ATTN_MAX_RANK)
    return E422(d, "shape_mismatch", sub,
                "%s has %zu dimensions; expected 1 "
                "to %d",
                sub, rank, ATTN_MAX_RANK);
  int64_t dim[ATTN_MAX_RANK];
  for (size_t k = 0; k < rank; k++) {
    const json_t *x = json_array_get(shape, k);
    if (!json_is_integer(x) || json_integer_value(x) < 1)
      return E422(d, "invalid_value", sub, "%s[%zu] must be a positive integer",
                  sub, k);
    dim[k] = json_integer_value(x);
  }
  if ((data != NULL) == (b64 != NULL))
    return E422(d, data ? "invalid_value" : "missing_field", field,
                "%s must have exactly one of data and base64", field);
  int64_t n;
  if (check_elements(d, field, (int)rank, dim, &n) < 0)
    return -1;
  size_t esize = kind == K_FLOAT ? 4 : 1;
  void *dst;
  attnd_bulk_t *bulk = json_is_array(data) ? bulk_array(d, data) : NULL;
  if (bulk) {
    if (bulk->rank != 1)
      return E422(d, "invalid_type", field, "%s.data: nested", field);
    if (decode_bulk(d, bulk, field, kind, (int)rank, dim, t) < 0)
      return -1;
    *form = ATTND_FORM_FLAT;
    return 0;
  }
  if (data) {
    snprintf(sub, sizeof sub, "%s.data", field);
    if (!json_is_array(data))
      return E422(d, "invalid_type", sub, "%s is %s; expected an array", sub,
                  type_name(data));
    char s[128];
    shape_text(s, sizeof s, (int)rank, dim);
    if ((int64_t)json_array_size(data) != n)
      return E422(d, "size_mismatch", sub,
                  "%s has %zu elements but shape %s needs %lld", sub,
                  json_array_size(data), s, (long long)n);
    if ((dst = dec_alloc(d, (size_t)n * esize)) == NULL)
      return oom(d, field);
    char path[160];
    size_t plen = (size_t)snprintf(path, sizeof path, "%s", sub);
    int64_t i = 0, flat[1] = {n};
    if (fill(d, data, 0, 1, flat, kind, dst, &i, field, path, plen,
             sizeof path) < 0)
      return -1;
    *form = ATTND_FORM_FLAT;
  } else {
    /* base64: float32 by default, or one byte per element for masks */
    int as_bool = kind == K_MASK;
    snprintf(sub, sizeof sub, "%s.dtype", field);
    if (dtype && !json_is_string(dtype))
      return E422(d, "invalid_type", sub, "%s is %s; expected a string", sub,
                  type_name(dtype));
    if (dtype && strcmp(json_string_value(dtype), "float32") == 0)
      as_bool = 0;
    else if (dtype && strcmp(json_string_value(dtype), "bool") == 0) {
      if (kind != K_MASK)
        return E422(d, "invalid_value", sub,
                    "%s is bool, but %s holds floats: use float32", sub, field);
      as_bool = 1;
    } else if (dtype)
      return E422(d, "invalid_value", sub, "%s is '%s'; expected float32%s",
                  sub, json_string_value(dtype),
                  kind == K_MASK ? " or bool" : "");
    snprintf(sub, sizeof sub, "%s.base64", field);
    if (!json_is_string(b64))
      return E422(d, "invalid_type", sub, "%s is %s; expected a string", sub,
                  type_name(b64));
    const attnd_bulk_t *lifted = bulk_string(d, b64);
    const char *text = lifted ? lifted->text : json_string_value(b64);
    size_t tlen = lifted ? lifted->text_len : json_string_length(b64), got, bad;
    size_t want = (size_t)n * (as_bool ? 1 : 4);
    if (tlen / 4 * 3 < want || tlen / 4 * 3 > want + 2 || tlen % 4)
      return E422(d, "size_mismatch", sub,
                  "%s has %zu characters, which cannot hold the %zu bytes "
                  "of %lld %s elements",
                  sub, tlen, want, (long long)n, as_bool ? "bool" : "float32");
    void *raw = dec_alloc(d, tlen / 4 * 3);
    if (raw == NULL)
      return oom(d, field);
    if (attnd_b64_decode(text, tlen, raw, &got, &bad) < 0)
      return E422(d, "invalid_base64", sub,
                  "%s is not valid base64 at character %zu", sub, bad);
    if (got != want)
      return E422(d, "size_mismatch", sub,
                  "%s decodes to %zu bytes, but %lld %s elements need %zu", sub,
                  got, (long long)n, as_bool ? "bool" : "float32", want);
    if (kind == K_FLOAT) {
      const float *f = raw;
      for (int64_t i = 0; i < n; i++)
        if (!isfinite(f[i]))
          return E422(d, "non_finite", field,
                      "%s element %lld is %g; values must be finite", sub,
                      (long long)i, (double)f[i]);
      dst = raw;
    } else if (as_bool) {
      const uint8_t *b = raw;
      for (int64_t i = 0; i < n; i++)
        if (b[i] > 1)
          return E422(d, "invalid_value", field,
                      "%s byte %lld is %u; expected 0 or 1", sub, (long long)i,
                      b[i]);
      dst = raw;
    } else { /* a float32 mask: 0 or 1 */
      const float *f = raw;
      uint8_t *b = dec_alloc(d, (size_t)n);
      if (b == NULL)
        return oom(d, field);
      for (int64_t i = 0; i < n; i++) {
        if (f[i] != 0 && f[i] != 1)
          return E422(d, "invalid_value", field,
                      "%s element %lld is %g; expected 0 or 1", sub,
                      (long long)i, (double)f[i]);
        b[i] = f[i] == 1;
      }
      dst = b;
    }
    *form = ATTND_FORM_BASE64;
  }
  t->data = dst;
  t->rank = (int)rank;
  memcpy(t->dim, dim, sizeof(int64_t) * rank);
  return 0;
}

/* A tensor in any of the three forms; `form` (may be NULL) says which. */
static int decode_tensor(dec_t *d, const json_t *v, const char *field, int kind,
                         attn_tensor_t *t, attnd_form_t *form) {
  attnd_form_t f = ATTND_FORM_NESTED;
  attnd_bulk_t *b;
  int r;
  if (json_is_array(v) && (b = bulk_array(d, v)))
    r = decode_bulk(d, b, field, kind, b->rank, b->dim, t);
  else if (json_is_array(v))
    r = decode_nested(d, v, field, kind, t);
  else if (json_is_object(v))
    r = decode_shaped(d, v, field, kind, t, &f);
  else
    r = E422(d, "invalid_type", field,
             "%s is %s; expected nested arrays, or an object with shape and "
             "data or base64",
             field, type_name(v));
  if (form)
    *form = f;
  return r;
}

/* Reads an optional integer member (integral reals are accepted). */
static int get_int(dec_t *d, const json_t *obj, const char *key,
                   const char *field, int64_t lo, int64_t hi, int64_t *out,
                   int *present) {
  const json_t *v = json_object_get(obj, key);
  *present = v != NULL && !json_is_null(v);
  if (!*present)
    return 0;
  double x = json_number_value(v);
  if (!json_is_integer(v) &&
      !(json_is_real(v) && x == floor(x) && fabs(x) < 9e15))
    return E422(d, "invalid_type", field, "%s is %s; expected an integer",
                field, json_is_real(v) ? "a fractional number" : type_name(v));
  int64_t n = json_is_integer(v) ? (int64_t)json_integer_value(v) : (int64_t)x;
  if (n < lo || n > hi)
    return E422(d, "invalid_value", field, "%s is %lld; expected %lld to %lld",
                field, (long long)n, (long long)lo, (long long)hi);
  *out = n;
  return 0;
}

static int get_number(dec_t *d, const json_t *obj, const char *key, float *out,
                      int *present) {
  const json_t *v = json_object_get(obj, key);
  *present = v != NULL && !json_is_null(v);
  if (!*present)
    return 0;
  if (!json_is_number(v))
    return E422(d, "invalid_type", key, "%s is %s; expected a number", key,
                type_name(v));
  *out = (float)json_number_value(v);
  if (!isfinite(*out))
    return E422(d, "non_finite", key, "%s is %g, not a finite float32", key,
                json_number_value(v));
  return 0;
}

static int get_bool(dec_t *d, const json_t *obj, const char *key,
                    const char *field, int *out) {
  const json_t *v = json_object_get(obj, key);
  if (v == NULL || json_is_null(v))
    return 0;
  if (!json_is_boolean(v))
    return E422(d, "invalid_type", field, "%s is %s; expected true or false",
                field, type_name(v));
  *out = json_is_true(v);
  return 0;
}

/* Picks one of `names` for a string member; *out is its index. */
static int get_enum(dec_t *d, const json_t *obj, const char *key,
                    const char *field, const char *const *names, int *out) {
  const json_t *v = json_object_get(obj, key);
  if (v == NULL || json_is_null(v))
    return 0;
  char list[128] = "";
  size_t n = 0;
  for (int i = 0; names[i]; i++) {
    if (json_is_string(v) && strcmp(json_string_value(v), names[i]) == 0) {
      *out = i;
      return 0;
    }
    n += (size_t)snprintf(list + n, sizeof list - n, "%s\"%s\"", i ? ", " : "",
                          names[i]);
  }
  if (!json_is_string(v))
    return E422(d, "invalid_type", field, "%s is %s; expected one of %s", field,
                type_name(v), list);
  return E422(d, "invalid_value", field, "%s is \"%s\"; expected one of %s",
              field, json_string_value(v), list);
}

static const json_t *get_object(dec_t *d, const json_t *obj, const char *key,
                                const char *const *known, int *bad) {
  const json_t *v = json_object_get(obj, key);
  *bad = 0;
  if (v == NULL || json_is_null(v))
    return NULL;
  if (!json_is_object(v)) {
    *bad = E422(d, "invalid_type", key, "%s is %s; expected an object", key,
                type_name(v));
    return NULL;
  }
  *bad = check_members(d, v, key, known);
  return *bad ? NULL : v;
}

static int decode_projections(dec_t *d, const json_t *root) {
  static const char *const known[] = {"q_weight", "k_weight", "v_weight",
                                      "o_weight", "q_bias",   "k_bias",
                                      "v_bias",   "o_bias",   NULL};
  int bad;
  const json_t *pr = get_object(d, root, "projections", known, &bad);
  if (pr == NULL)
    return bad;
  attn_params_t *p = &d->job->params;
  attn_tensor_t *dst[] = {&p->q_weight, &p->k_weight, &p->v_weight,
                          &p->o_weight, &p->q_bias,   &p->k_bias,
                          &p->v_bias,   &p->o_bias};
  for (int i = 0; known[i]; i++) {
    const json_t *v = json_object_get(pr, known[i]);
    char field[64];
    snprintf(field, sizeof field, "projections.%s", known[i]);
    if (v && !json_is_null(v) &&
        decode_tensor(d, v, field, K_FLOAT, dst[i], NULL) < 0)
      return -1;
  }
  return 0;
}

static int decode_mask(dec_t *d, const json_t *root) {
  static const char *const known[] = {"causal", "key_lengths", "allow", "bias",
                                      "window", "alibi",       NULL};
  int bad;
  const json_t *m = get_object(d, root, "mask", known, &bad);
  if (m == NULL)
    return bad;
  attn_params_t *p = &d->job->params;

  const json_t *c = json_object_get(m, "causal");
  if (json_is_boolean(c)) {
    p->causal = json_is_true(c) ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_NONE;
  } else if (c && !json_is_null(c)) {
    static const char *const kinds[] = {"none", "bottom_right", "top_left",
                                        NULL};
    int k = 0;
    if (!json_is_string(c))
      return E422(d, "invalid_type", "mask.causal",
                  "mask.causal is %s; expected true, false, \"bottom_right\" "
                  "or \"top_left\"",
                  type_name(c));
    if (get_enum(d, m, "causal", "mask.causal", kinds, &k) < 0)
      return -1;
    p->causal = (attn_causal_t)k;
  }

  const json_t *kl = json_object_get(m, "key_lengths");
  if (kl && !json_is_null(kl)) {
    if (!json_is_array(kl) || json_array_size(kl) == 0)
      return E422(d, "invalid_type", "mask.key_lengths",
                  "mask.key_lengths is %s; expected an array of one integer "
                  "per batch item",
                  json_is_array(kl) ? "empty" : type_name(kl));
    size_t n = json_array_size(kl);
    int64_t *len = dec_alloc(d, n * sizeof *len);
    if (len == NULL)
      return oom(d, "mask.key_lengths");
    for (size_t i = 0; i < n; i++) {
      const json_t *x = json_array_get(kl, i);
      if (!json_is_integer(x))
        return E422(d, "invalid_type", "mask.key_lengths",
                    "mask.key_lengths[%zu] is %s; expected an integer", i,
                    type_name(x));
      len[i] = json_integer_value(x);
    }
    p->key_lengths = (attn_tensor_t){len, 1, {(int64_t)n}};
  }

  const json_t *allow = json_object_get(m, "allow");
  if (allow && !json_is_null(allow) &&
      decode_tensor(d, allow, "mask.allow", K_MASK, &p->allow, NULL) < 0)
    return -1;
  const json_t *bias = json_object_get(m, "bias");
  if (bias && !json_is_null(bias) &&
      decode_tensor(d, bias, "mask.bias", K_FLOAT, &p->bias, NULL) < 0)
    return -1;

  static const char *const wknown[] = {"left", "right", NULL};
  const json_t *w = json_object_get(m, "window");
  if (w && !json_is_null(w)) {
    if (!json_is_object(w))
      return E422(d, "invalid_type", "mask.window",
                  "mask.window is %s; expected {\"left\": n, \"right\": n}",
                  type_name(w));
    if (check_members(d, w, "mask.window", wknown) < 0 ||
        get_int(d, w, "left", "mask.window.left", 0, INT64_MAX, &p->window_left,
                &p->has_window_left) < 0 ||
        get_int(d, w, "right", "mask.window.right", 0, INT64_MAX,
                &p->window_right, &p->has_window_right) < 0)
      return -1;
  }

  const json_t *al = json_object_get(m, "alibi");
  if (json_is_boolean(al)) {
    p->alibi = json_is_true(al) ? ATTN_ALIBI_DEFAULT : ATTN_ALIBI_NONE;
  } else if (json_is_array(al)) {
    p->alibi = ATTN_ALIBI_SLOPES;
    if (decode_tensor(d, al, "mask.alibi", K_FLOAT, &p->alibi_slopes, NULL) < 0)
      return -1;
  } else if (al && !json_is_null(al)) {
    return E422(d, "invalid_type", "mask.alibi",
                "mask.alibi is %s; expected true, false or one slope per "
                "head",
                type_name(al));
  }
  return 0;
}

static int decode_return(dec_t *d, const json_t *root) {
  static const char *const known[] = {"weights", "head_outputs", "metrics",
                                      "encoding", NULL};
  static const char *const wmodes[] = {"none", "per_head", "mean", NULL};
  static const char *const encs[] = {"nested", "flat", "base64", NULL};
  attnd_job_t *j = d->job;
  int bad, w = 0, enc = (int)d->query_form;
  const json_t *r = get_object(d, root, "return", known, &bad);
  if (r == NULL && bad)
    return bad;
  j->want_metrics = 1;
  if (r && (get_enum(d, r, "weights", "return.weights", wmodes, &w) < 0 ||
            get_bool(d, r, "head_outputs", "return.head_outputs",
                     &j->params.want_head_outputs) < 0 ||
            get_bool(d, r, "metrics", "return.metrics", &j->want_metrics) < 0 ||
            get_enum(d, r, "encoding", "return.encoding", encs, &enc) < 0))
    return -1;
  j->weights_mode = (attnd_weights_t)w;
  j->params.want_weights = w == ATTND_WEIGHTS_PER_HEAD;
  j->params.want_mean_weights = w == ATTND_WEIGHTS_MEAN;
  j->encoding = (attnd_form_t)enc;
  return 0;
}

/* The JSON path of a field the core names. */
static const char *json_field(const char *core) {
  static const char *const map[][2] = {
      {"q_weight", "projections.q_weight"},
      {"k_weight", "projections.k_weight"},
      {"v_weight", "projections.v_weight"},
      {"o_weight", "projections.o_weight"},
      {"q_bias", "projections.q_bias"},
      {"k_bias", "projections.k_bias"},
      {"v_bias", "projections.v_bias"},
      {"o_bias", "projections.o_bias"},
      {"causal", "mask.causal"},
      {"key_lengths", "mask.key_lengths"},
      {"allow", "mask.allow"},
      {"bias", "mask.bias"},
      {"window_left", "mask.window.left"},
      {"window_right", "mask.window.right"},
      {"alibi", "mask.alibi"},
      {"alibi_slopes", "mask.alibi"},
  };
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
    if (strcmp(core, map[i][0]) == 0)
      return map[i][1];
  return core;
}

static int plan(dec_t *d) {
  attnd_job_t *j = d->job;
  d->planning = 1;
  attn_exec_t ex = {.threads = (int)d->cfg->threads_per_request,
                    .cancel = &j->cancel};
  attn_error_t ae;
  if (attn_plan_init(&j->plan, &j->params, &ex, &ae) == 0)
    return 0;
  const char *code = "invalid_value";
  switch (ae.code) {
  case ATTN_ERANK:
  case ATTN_ESHAPE:
    code = "shape_mismatch";
    break;
  case ATTN_EHEADS:
    code = "heads_mismatch";
    break;
  case ATTN_EOVERFLOW:
    code = "limit_exceeded";
    break;
  }
  return E422(d, code, json_field(ae.field), "%s", ae.message);
}

/* Reply bytes of n floats at most, in the job's encoding. */
static double reply_bytes(const attnd_job_t *j, int64_t n) {
  return j->encoding == ATTND_FORM_BASE64 ? (double)n * 4 * 4 / 3 + 4
                                          : (double)n * 16;
}

static int check_limits(dec_t *d) {
  const attnd_config_t *c = d->cfg;
  const attn_plan_t *pl = &d->job->plan;
  attnd_job_t *j = d->job;
  if (pl->B > c->max_batch)
    return E422(d, "limit_exceeded", "query",
                "batch %lld is over max_batch %lld", (long long)pl->B,
                (long long)c->max_batch);
  if (pl->Lq > c->max_seq_len)
    return E422(d, "limit_exceeded", "query",
                "query length %lld is over max_seq_len %lld", (long long)pl->Lq,
                (long long)c->max_seq_len);
  if (pl->Lk > c->max_seq_len)
    return E422(d, "limit_exceeded", j->params.key.rank ? "key" : "query",
                "key length %lld is over max_seq_len %lld", (long long)pl->Lk,
                (long long)c->max_seq_len);
  if (pl->H > c->max_heads)
    return E422(d, "limit_exceeded", "num_heads",
                "num_heads %lld is over max_heads %lld", (long long)pl->H,
                (long long)c->max_heads);
  struct {
    int on;
    int64_t n;
    const char *name;
  } outs[] = {
      {1, pl->out_elems, "output"},
      {j->params.want_weights, pl->weights_elems, "weights"},
      {j->params.want_mean_weights, pl->mean_elems, "weights"},
      {j->params.want_head_outputs, pl->head_elems, "head_outputs"},
  };
  double bytes = 0;
  for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++) {
    if (!outs[i].on)
      continue;
    if (outs[i].n > c->max_tensor_elements)
      return E422(d, "limit_exceeded",
                  i == 0   ? "query"
                  : i == 3 ? "return.head_outputs"
                           : "return.weights",
                  "the reply's %s would have %lld elements, over "
                  "max_tensor_elements %lld",
                  outs[i].name, (long long)outs[i].n,
                  (long long)c->max_tensor_elements);
    bytes += reply_bytes(j, outs[i].n);
  }
  if (bytes > (double)c->max_response_bytes)
    return E422(d, "limit_exceeded",
                j->params.want_weights || j->params.want_mean_weights
                    ? "return.weights"
                    : "query",
                "the reply would take up to %.0f bytes, over "
                "max_response_bytes %lld",
                bytes, (long long)c->max_response_bytes);
  return 0;
}

static int decode_root(dec_t *d, const json_t *root) {
  static const char *const known[] = {
      "id",           "query",       "key",  "value", "num_heads",
      "num_kv_heads", "projections", "mask", "scale", "softcap",
      "return",       "timeout_ms",  NULL};
  attnd_job_t *j = d->job;
  attn_params_t *p = &j->params;
  int present;
  if (!json_is_object(root))
    return E422(d, "invalid_type", "", "the request is %s; expected an object",
                type_name(root));
  if (check_members(d, root, "", known) < 0)
    return -1;

  const json_t *id = json_object_get(root, "id");
  if (id && !json_is_null(id)) {
    if (!json_is_string(id))
      return E422(d, "invalid_type", "id", "id is %s; expected a string",
                  type_name(id));
    if (json_string_length(id) > 256)
      return E422(d, "invalid_value", "id",
                  "id has %zu characters; at most 256", json_string_length(id));
    if ((j->id = strdup(json_string_value(id))) == NULL)
      return oom(d, "id");
  }

  const json_t *q = json_object_get(root, "query");
  if (q == NULL || json_is_null(q))
    return E422(d, "missing_field", "query", "query is required");
  if (decode_tensor(d, q, "query", K_FLOAT, &p->query, &d->query_form) < 0)
    return -1;
  const json_t *k = json_object_get(root, "key"),
               *v = json_object_get(root, "value");
  if (k && !json_is_null(k) &&
      decode_tensor(d, k, "key", K_FLOAT, &p->key, NULL) < 0)
    return -1;
  if (v && !json_is_null(v) &&
      decode_tensor(d, v, "value", K_FLOAT, &p->value, NULL) < 0)
    return -1;

  if (get_int(d, root, "num_heads", "num_heads", 1, INT64_MAX, &p->num_heads,
              &present) < 0)
    return -1;
  if (!present)
    return E422(d, "missing_field", "num_heads", "num_heads is required");
  if (get_int(d, root, "num_kv_heads", "num_kv_heads", 1, INT64_MAX,
              &p->num_kv_heads, &present) < 0)
    return -1;
  if (p->num_heads > d->cfg->max_heads)
    return E422(d, "limit_exceeded", "num_heads",
                "num_heads %lld is over max_heads %lld",
                (long long)p->num_heads, (long long)d->cfg->max_heads);

  if (decode_projections(d, root) < 0 || decode_mask(d, root) < 0 ||
      get_number(d, root, "scale", &p->scale, &p->has_scale) < 0 ||
      get_number(d, root, "softcap", &p->softcap, &p->has_softcap) < 0 ||
      decode_return(d, root) < 0)
    return -1;

  j->timeout_ms = d->cfg->default_timeout_ms;
  if (get_int(d, root, "timeout_ms", "timeout_ms", 1, INT64_MAX, &j->timeout_ms,
              &present) < 0)
    return -1;
  if (j->timeout_ms > d->cfg->max_timeout_ms)
    return E422(d, "limit_exceeded", "timeout_ms",
                "timeout_ms %lld is over max_timeout_ms %lld",
                (long long)j->timeout_ms, (long long)d->cfg->max_timeout_ms);
  return plan(d) < 0 ? -1 : check_limits(d);
}

/* A 53-bit value from a per-thread generator, seeded once from the OS. */
static uint64_t nonce53(void) {
  static _Thread_local uint64_t state;
  if (state == 0 && getrandom(&state, sizeof state, 0) != sizeof state)
    state = (uint64_t)(uintptr_t)&state ^ (uint64_t)time(NULL);
  uint64_t z = (state += 0x9e3779b97f4a7c15ull); /* splitmix64 */
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return (z ^ (z >> 31)) >> 11;
}

/* Decodes `root` into a new job; with `bulk`, placeholders stand for its
 * items. Returns the job or NULL with *err set. */
static attnd_job_t *decode(const json_t *root, attnd_bulk_set_t *bulk,
                           const attnd_config_t *cfg, attnd_error_t *err,
                           int *planning) {
  attnd_job_t *j = calloc(1, sizeof *j);
  if (j == NULL) {
    attnd_error_set(err, 503, "out_of_memory", "",
                    "out of memory for a new request");
    return NULL;
  }
  dec_t d = {.job = j, .cfg = cfg, .err = err, .bulk = bulk};
  int r = decode_root(&d, root);
  *planning = d.planning;
  if (r < 0) {
    attnd_job_free(j);
    return NULL;
  }
  return j;
}

/* The fast path: big arrays of numbers and long plain strings are lifted
 * out of the text by the bulk scanner, and jansson parses what is left.
 * The slow path has jansson parse everything. Both give the same job, and
 * the slow path also runs whenever the fast one fails before planning, so
 * that errors read the same whichever path met them. */
int attnd_job_decode(const char *body, size_t len, const attnd_config_t *cfg,
                     attnd_job_t **out, attnd_error_t *err) {
  double t0 = attnd_now_ms();
  int planning = 0;
  json_error_t je;
  attnd_bulk_set_t bulk;
  attnd_buf_t skel;
  attnd_bulk_set_init(&bulk, nonce53());
  attnd_buf_init(&skel);
  *out = NULL;
  if (attnd_bulk_scan(body, len, ATTND_BULK_MIN_ELEMS, ATTND_BULK_MIN_STRING,
                      &bulk, &skel) == 0) {
    json_t *root =
        json_loadb(skel.data ? skel.data : "", skel.len, JSON_FLAGS, &je);
    if (root) {
      *out = decode(root, &bulk, cfg, err, &planning);
      json_decref(root);
    }
  }
  attnd_buf_free(&skel);
  attnd_bulk_set_free(&bulk); /* the body outlives it: strings borrowed it */
  if (*out == NULL && !planning) {
    json_t *root = json_loadb(body, len, JSON_FLAGS, &je);
    if (root == NULL)
      return attnd_error_set(err, 400, "invalid_json", "",
                             "invalid JSON at line %d, column %d: %s", je.line,
                             je.column, je.text);
    *out = decode(root, NULL, cfg, err, &planning);
    json_decref(root);
  }
  if (*out == NULL)
    return -1;
  (*out)->decode_ms = attnd_now_ms() - t0;
  return 0;
}

size_t attnd_job_memory(const attnd_job_t *j) {
  const attn_plan_t *pl = &j->plan;
  const attn_params_t *p = &j->params;
  int64_t out = pl->out_elems + (p->want_weights ? pl->weights_elems : 0) +
                (p->want_mean_weights ? pl->mean_elems : 0) +
                (p->want_head_outputs ? pl->head_elems : 0);
  return j->alloc_bytes + pl->workspace_bytes + (size_t)out * sizeof(float) +
         (size_t)reply_bytes(j, out) + 4096;
}

static int alloc_outputs(attnd_job_t *j) {
  const attn_plan_t *pl = &j->plan;
  const attn_params_t *p = &j->params;
  j->out.out = malloc((size_t)pl->out_elems * sizeof(float));
  if (p->want_weights)
    j->out.weights = malloc((size_t)pl->weights_elems * sizeof(float));
  if (p->want_mean_weights)
    j->out.mean_weights = malloc((size_t)pl->mean_elems * sizeof(float));
  if (p->want_head_outputs)
    j->out.head_outputs = malloc((size_t)pl->head_elems * sizeof(float));
  return j->out.out && (!p->want_weights || j->out.weights) &&
                 (!p->want_mean_weights || j->out.mean_weights) &&
                 (!p->want_head_outputs || j->out.head_outputs)
             ? 0
             : -1;
}

static int grow(attnd_scratch_t *s, size_t bytes) {
  if (bytes <= s->cap && s->data)
    return 0;
  free(s->data);
  s->cap = (bytes + 63) / 64 * 64;
  s->data = aligned_alloc(64, s->cap ? s->cap : 64);
  if (s->data == NULL)
    s->cap = 0;
  return s->data ? 0 : -1;
}

void attnd_job_run(attnd_job_t *j, int worker, attnd_scratch_t *scratch) {
  j->worker = worker;
  j->threads = j->plan.threads;
  j->t_start = attnd_now_ms();
  if (grow(scratch, j->plan.workspace_bytes) < 0 || alloc_outputs(j) < 0) {
    j->result = ATTN_ENOSPC;
  } else {
    attn_error_t ae;
    j->result =
        attn_forward(&j->plan, &j->out, scratch->data, scratch->cap, &ae);
  }
  j->t_end = attnd_now_ms();
}

/* ---- the reply ------------------------------------------------------------
 */

/* Appends "name": and tensor x of the given shape in the job's encoding; a
 * rank-2 request drops the batch dimension (dim[0] == 1). */
static void put_tensor(attnd_buf_t *b, const attnd_job_t *j, const char *name,
                       const float *x, int rank, const int64_t *dim) {
  if (!j->plan.batched) {
    rank--;
    dim++;
  }
  attnd_buf_puts(b, ",\"");
  attnd_buf_puts(b, name);
  attnd_buf_puts(b, "\":");
  attnd_buf_tensor(b, j->encoding, x, rank, dim);
}

void attnd_job_encode(attnd_job_t *j, attnd_buf_t *b, double *total_ms) {
  const attn_plan_t *pl = &j->plan;
  const attn_params_t *p = &j->params;
  double t0 = attnd_now_ms();
  /* one allocation: the text's size is known, or bounded for numbers */
  double need = reply_bytes(j, pl->out_elems) + 1024;
  if (p->want_weights)
    need += reply_bytes(j, pl->weights_elems);
  if (p->want_mean_weights)
    need += reply_bytes(j, pl->mean_elems);
  if (p->want_head_outputs)
    need += reply_bytes(j, pl->head_elems);
  attnd_buf_reserve(b, (size_t)need);
  attnd_buf_puts(b, "{\"id\":");
  if (j->id) {
    json_t *s = json_string(j->id);
    char *txt = s ? json_dumps(s, JSON_ENCODE_ANY) : NULL;
    attnd_buf_puts(b, txt ? txt : "null");
    free(txt);
    json_decref(s);
  } else {
    attnd_buf_puts(b, "null");
  }
  int64_t o_dim[3] = {pl->B, pl->Lq, pl->Eo};
  put_tensor(b, j, "output", j->out.out, 3, o_dim);
  if (j->params.want_weights) {
    int64_t dim[4] = {pl->B, pl->H, pl->Lq, pl->Lk};
    put_tensor(b, j, "weights", j->out.weights, 4, dim);
  } else if (j->params.want_mean_weights) {
    int64_t dim[3] = {pl->B, pl->Lq, pl->Lk};
    put_tensor(b, j, "weights", j->out.mean_weights, 3, dim);
  }
  if (j->params.want_head_outputs) {
    int64_t dim[4] = {pl->B, pl->H, pl->Lq, pl->Dv};
    put_tensor(b, j, "head_outputs", j->out.head_outputs, 4, dim);
  }
  double t1 = attnd_now_ms();
  *total_ms = t1 - j->t_arrival;
  j->encode_ms = t1 - t0;
  if (j->want_metrics) {
    const attn_timing_t *t = &j->out.timing;
    char m[640];
    int n = snprintf(
        m, sizeof m,
        ",\"metrics\":{\"queue_ms\":%.3f,\"compute_ms\":%.3f,\"total_ms\":%.3f,"
        "\"stages_ms\":{\"decode\":%.3f,\"projection\":%.3f,\"attention\":%.3f,"
        "\"output_projection\":%.3f,\"encode\":%.3f},\"threads\":%d,"
        "\"worker\":%d,\"flops\":%.0f}",
        j->t_start - j->t_submit, j->t_end - j->t_start, *total_ms,
        j->decode_ms, t->projection_ms, t->attention_ms, t->output_ms,
        j->encode_ms, j->threads, j->worker, pl->flops);
    attnd_buf_append(b, m, (size_t)n);
  }
  attnd_buf_puts(b, "}\n");
}

void attnd_job_free(attnd_job_t *j) {
  if (j == NULL)
    return;
  for (size_t i = 0; i < j->n_allocs; i++)
    free(j->allocs[i]);
  free(j->allocs);
  free(j->id);
  free(j->out.out);
  free(j->out.weights);
  free(j->out.mean_weights);
  free(j->out.head_outputs);
  free(j);
}
