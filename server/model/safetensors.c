/* server/model/safetensors.c: the safetensors format of safetensors.h.
 *
 * Reading is one pass over the header's members in their order (checking
 * each tensor alone: form, dtype, shape, size, bounds), then one pass over
 * the tensors sorted by offset (checking that they tile the data). The
 * names and metadata are copied into one block the file owns, so that the
 * JSON tree is freed before the parse returns.
 *
 * Conversion runs over the whole tensor, flagging a non-finite value as it
 * goes, and looks for the first bad index only when the flag is up: the
 * loops have no early exit, so that they vectorise (F16 with F16C where the
 * CPU has it, the others by `omp simd`). */
#include "model/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ST_HAVE_F16C 1
#endif

#include "codec/half.h"
#include "codec/util.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the format is little-endian, and so are the copies here"
#endif

static const struct {
  const char *name;
  unsigned bits;
} st_dtypes[] = {
#define ST_ROW(name, text, bits) {text, bits},
    ATTND_ST_DTYPE_MAP(ST_ROW)
#undef ST_ROW
};

const char *attnd_st_dtype_name(attnd_st_dtype_t t) {
  return (unsigned)t < ATTND_ST_N_DTYPES ? st_dtypes[t].name : "?";
}

unsigned attnd_st_dtype_bits(attnd_st_dtype_t t) {
  return (unsigned)t < ATTND_ST_N_DTYPES ? st_dtypes[t].bits : 0;
}

size_t attnd_st_dtype_size(attnd_st_dtype_t t) {
  unsigned bits = attnd_st_dtype_bits(t);
  return bits % 8 ? 0 : bits / 8;
}

/* The element count and byte size of `shape` in `dt`: 0, or -1 when the
 * count overflows int64, -2 when the size overflows int64 or size_t, -3
 * when the elements' bits do not end on a byte (F4, F6). A zero dimension
 * makes both 0, whatever the others are. */
static int st_count(int rank, const int64_t *shape, attnd_st_dtype_t dt,
                    int64_t *elems, size_t *bytes) {
  int64_t e = 1;
  for (int i = 0; i < rank; i++)
    if (shape[i] == 0) {
      *elems = 0, *bytes = 0;
      return 0;
    }
  for (int i = 0; i < rank; i++)
    if (__builtin_mul_overflow(e, shape[i], &e))
      return -1;
  /* e * bits / 8, in eighths of e so that no whole byte count overflows
   * on the way */
  int64_t bits = attnd_st_dtype_bits(dt), b, rest = e % 8 * bits;
  *elems = e;
  if (rest % 8)
    return -3;
  if (__builtin_mul_overflow(e / 8, bits, &b) ||
      __builtin_add_overflow(b, rest / 8, &b) || (uint64_t)b > SIZE_MAX)
    return -2;
  *bytes = (size_t)b;
  return 0;
}

/* ---- reading ------------------------------------------------------------ */

/* How a message names v's JSON type. (decode.c has its own, which calls
 * integers and reals alike "a number", and belongs to the decoder.) */
static const char *st_kind(const json_t *v) {
  static const char *const kinds[] = {
      [JSON_OBJECT] = "an object",   [JSON_ARRAY] = "an array",
      [JSON_STRING] = "a string",    [JSON_INTEGER] = "an integer",
      [JSON_REAL] = "a real number", [JSON_TRUE] = "true",
      [JSON_FALSE] = "false",        [JSON_NULL] = "null"};
  return kinds[json_typeof(v)];
}

/* Copies s (NUL-terminated) to *text and returns the copy. */
static const char *st_copy(char **text, const char *s) {
  size_t n = strlen(s) + 1;
  char *c = memcpy(*text, s, n);
  *text += n;
  return c;
}

/* The non-negative integer member[i] of tensor `name` ("shape",
 * "data_offsets"). Returns 0, or -1 with msg. */
static int st_index(const json_t *v, const char *name, const char *member,
                    size_t i, int64_t *out, char *msg, size_t msz) {
  if (json_is_real(v))
    return attnd_fail(msg, msz,
                      "tensor '%s': %s[%zu] is a real number (%.17g), not an "
                      "integer",
                      name, member, i, json_real_value(v));
  if (!json_is_integer(v))
    return attnd_fail(msg, msz, "tensor '%s': %s[%zu] is %s, not an integer",
                      name, member, i, st_kind(v));
  json_int_t x = json_integer_value(v);
  if (x < 0)
    return attnd_fail(msg, msz, "tensor '%s': %s[%zu] is %lld, negative", name,
                      member, i, (long long)x);
  *out = (int64_t)x;
  return 0;
}

/* The tensor member `name` = v into *t (data relative to `data`, which holds
 * data_bytes), its offsets into off[2]. Returns 0, or -1 with msg. */
static int st_tensor(const char *name, const json_t *v, const uint8_t *data,
                     size_t data_bytes, attnd_st_tensor_t *t, uint64_t off[2],
                     char *msg, size_t msz) {
  if (!json_is_object(v))
    return attnd_fail(
        msg, msz,
        "tensor '%s': is %s, not an object {\"dtype\", \"shape\", "
        "\"data_offsets\"}",
        name, st_kind(v));
  const char *key;
  json_t *m;
  json_object_foreach((json_t *)v, key, m) {
    if (strcmp(key, "dtype") && strcmp(key, "shape") &&
        strcmp(key, "data_offsets"))
      return attnd_fail(msg, msz, "tensor '%s': unknown member '%s'", name,
                        key);
  }
  const json_t *dt = json_object_get(v, "dtype"),
               *shape = json_object_get(v, "shape"),
               *offs = json_object_get(v, "data_offsets");
  if (!dt || !shape || !offs)
    return attnd_fail(msg, msz, "tensor '%s': no \"%s\" member", name,
                      !dt      ? "dtype"
                      : !shape ? "shape"
                               : "data_offsets");

  if (!json_is_string(dt))
    return attnd_fail(msg, msz, "tensor '%s': dtype is %s, not a string", name,
                      st_kind(dt));
  const char *dname = json_string_value(dt);
  int d = 0;
  while (d < ATTND_ST_N_DTYPES && strcmp(dname, st_dtypes[d].name))
    d++;
  if (d == ATTND_ST_N_DTYPES)
    return attnd_fail(msg, msz, "tensor '%s': unknown dtype '%s'", name, dname);
  t->dtype = (attnd_st_dtype_t)d;

  if (!json_is_array(shape))
    return attnd_fail(msg, msz, "tensor '%s': shape is %s, not an array", name,
                      st_kind(shape));
  size_t rank = json_array_size(shape);
  if (rank > ATTND_ST_MAX_RANK)
    return attnd_fail(msg, msz,
                      "tensor '%s': shape has %zu dimensions, over %d", name,
                      rank, ATTND_ST_MAX_RANK);
  t->rank = (int)rank;
  for (size_t i = 0; i < rank; i++)
    if (st_index(json_array_get(shape, i), name, "shape", i, &t->shape[i], msg,
                 msz))
      return -1;
  char stext[ATTND_ST_MAX_RANK * 22 + 4];
  attnd_shape_text(stext, sizeof stext, t->rank, t->shape, ", ");
  switch (st_count(t->rank, t->shape, t->dtype, &t->elems, &t->bytes)) {
  case -1:
    return attnd_fail(msg, msz,
                      "tensor '%s': shape %s has more than 2^63 - 1 elements",
                      name, stext);
  case -2:
    return attnd_fail(msg, msz, "tensor '%s': %s %s is more bytes than fit",
                      name, dname, stext);
  case -3:
    return attnd_fail(msg, msz,
                      "tensor '%s': %s %s: %lld elements of %u bits do not "
                      "end on a byte",
                      name, dname, stext, (long long)t->elems,
                      attnd_st_dtype_bits(t->dtype));
  }

  if (!json_is_array(offs))
    return attnd_fail(msg, msz,
                      "tensor '%s': data_offsets is %s, not [begin, end]", name,
                      st_kind(offs));
  if (json_array_size(offs) != 2)
    return attnd_fail(msg, msz,
                      "tensor '%s': data_offsets has %zu member%s, not 2 "
                      "[begin, end]",
                      name, json_array_size(offs),
                      json_array_size(offs) == 1 ? "" : "s");
  int64_t be[2];
  for (size_t i = 0; i < 2; i++)
    if (st_index(json_array_get(offs, i), name, "data_offsets", i, &be[i], msg,
                 msz))
      return -1;
  if (be[0] > be[1])
    return attnd_fail(msg, msz,
                      "tensor '%s': data_offsets [%lld, %lld] end before they "
                      "begin",
                      name, (long long)be[0], (long long)be[1]);
  if ((uint64_t)(be[1] - be[0]) != t->bytes)
    return attnd_fail(msg, msz,
                      "tensor '%s': data_offsets [%lld, %lld] hold %lld bytes, "
                      "but %s %s needs %zu",
                      name, (long long)be[0], (long long)be[1],
                      (long long)(be[1] - be[0]), dname, stext, t->bytes);
  if ((uint64_t)be[1] > data_bytes)
    return attnd_fail(msg, msz,
                      "tensor '%s': data_offsets [%lld, %lld] end past the "
                      "data, which is %zu bytes",
                      name, (long long)be[0], (long long)be[1], data_bytes);
  off[0] = (uint64_t)be[0], off[1] = (uint64_t)be[1];
  t->data = data + off[0];
  return 0;
}

/* A tensor's place in the data, for the tiling check. */
typedef struct st_span {
  uint64_t begin, end;
  size_t i;
} st_span_t;

/* Two indices of the metadata, by their keys (keys: the file's meta_keys),
 * for qsort_r. The keys are distinct: the header's parse refuses
 * duplicates. */
static int meta_cmp(const void *a, const void *b, void *keys) {
  const char *const *k = keys;
  return strcmp(k[*(const size_t *)a], k[*(const size_t *)b]);
}

static int st_span_cmp(const void *a, const void *b) {
  const st_span_t *x = a, *y = b;
  if (x->begin != y->begin)
    return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end)
    return x->end < y->end ? -1 : 1;
  return x->i < y->i ? -1 : x->i > y->i;
}

/* Sorted by begin, the spans of f's tensors tile [0, data_bytes) exactly.
 * Returns 0, or -1 with msg naming the gap or the overlap. */
static int st_tile(const attnd_st_file_t *f, st_span_t *s, char *msg,
                   size_t msz) {
  qsort(s, f->n, sizeof *s, st_span_cmp);
  uint64_t pos = 0;
  const st_span_t *last = NULL; /* the non-empty span that ends at pos */
  for (size_t k = 0; k < f->n; k++) {
    const char *name = f->tensors[s[k].i].name;
    if (s[k].begin > pos)
      return attnd_fail(msg, msz,
                        "a gap at bytes [%llu, %llu) of the data, before "
                        "tensor '%s'",
                        (unsigned long long)pos, (unsigned long long)s[k].begin,
                        name);
    if (s[k].begin < pos) {
      const char *other = f->tensors[last->i].name;
      if (s[k].begin == s[k].end)
        return attnd_fail(msg, msz,
                          "tensor '%s' (0 bytes, at byte %llu) lies inside "
                          "tensor '%s' at bytes [%llu, %llu)",
                          name, (unsigned long long)s[k].begin, other,
                          (unsigned long long)last->begin,
                          (unsigned long long)last->end);
      return attnd_fail(msg, msz,
                        "tensors '%s' and '%s' overlap at bytes [%llu, %llu)",
                        other, name, (unsigned long long)s[k].begin,
                        (unsigned long long)(s[k].end < pos ? s[k].end : pos));
    }
    if (s[k].end > pos) {
      pos = s[k].end;
      last = &s[k];
    }
  }
  if (pos != f->data_bytes)
    return attnd_fail(msg, msz,
                      "the data ends at byte %llu, but the file has %zu bytes "
                      "of data (%llu left over)",
                      (unsigned long long)pos, f->data_bytes,
                      (unsigned long long)(f->data_bytes - pos));
  return 0;
}

/* The members of root (a parsed header) into f, whose header_bytes and
 * data_bytes are set; data is where the data begins. Returns 0, or -1 with
 * msg (f half-filled: the caller frees it). */
static int st_members(json_t *root, const uint8_t *data, attnd_st_file_t *f,
                      char *msg, size_t msz) {
  /* pass 1: sizes, and the metadata's form */
  size_t n = 0, n_meta = 0, text = 0;
  const char *key;
  json_t *v, *meta = NULL;
  json_object_foreach(root, key, v) {
    text += strlen(key) + 1;
    if (strcmp(key, "__metadata__") != 0) {
      n++;
      continue;
    }
    if (!json_is_object(v))
      return attnd_fail(
          msg, msz, "__metadata__ is %s, not an object of strings", st_kind(v));
    meta = v;
    const char *mk;
    json_t *mv;
    json_object_foreach(meta, mk, mv) {
      if (!json_is_string(mv))
        return attnd_fail(msg, msz, "__metadata__: '%s' is %s, not a string",
                          mk, st_kind(mv));
      text += strlen(mk) + 1 + json_string_length(mv) + 1;
      n_meta++;
    }
  }
  text -= meta ? strlen("__metadata__") + 1 : 0;

  size_t head = n * sizeof(attnd_st_tensor_t) + 2 * n_meta * sizeof(char *) +
                n_meta * sizeof(size_t);
  char *block = malloc(head + text + 1);
  st_span_t *spans = malloc((n ? n : 1) * sizeof *spans);
  if (block == NULL || spans == NULL) {
    free(block), free(spans);
    return attnd_fail(msg, msz, "out of memory for a header of %zu tensors", n);
  }
  f->owned = block;
  f->tensors = (attnd_st_tensor_t *)block;
  f->meta_keys = (const char **)(block + n * sizeof(attnd_st_tensor_t));
  f->meta_values = f->meta_keys + n_meta;
  size_t *order = (size_t *)(f->meta_values + n_meta);
  f->meta_order = order;
  char *out = block + head;

  /* pass 2: each member alone, in the header's order */
  json_object_foreach(root, key, v) {
    if (v == meta)
      continue;
    attnd_st_tensor_t *t = &f->tensors[f->n];
    memset(t, 0, sizeof *t);
    t->name = st_copy(&out, key);
    uint64_t off[2] = {0, 0};
    if (st_tensor(t->name, v, data, f->data_bytes, t, off, msg, msz)) {
      free(spans);
      return -1;
    }
    spans[f->n] = (st_span_t){off[0], off[1], f->n};
    f->n++;
  }
  if (meta) {
    const char *mk;
    json_t *mv;
    json_object_foreach(meta, mk, mv) {
      f->meta_keys[f->n_meta] = st_copy(&out, mk);
      f->meta_values[f->n_meta] = st_copy(&out, json_string_value(mv));
      order[f->n_meta] = f->n_meta;
      f->n_meta++;
    }
    qsort_r(order, f->n_meta, sizeof *order, meta_cmp, f->meta_keys);
  }

  /* pass 3: together, sorted by offset */
  int r = st_tile(f, spans, msg, msz);
  free(spans);
  return r;
}

int attnd_st_parse(const uint8_t *buf, size_t len, attnd_st_file_t *out,
                   char *msg, size_t msz) {
  memset(out, 0, sizeof *out);
  if (len < 8)
    return attnd_fail(msg, msz,
                      "the file is %zu bytes, too short for the 8-byte header "
                      "length",
                      len);
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--)
    n = n << 8 | buf[i];
  if (n == 0)
    return attnd_fail(msg, msz, "header length 0: the file has no header");
  if (n > ATTND_ST_MAX_HEADER)
    return attnd_fail(msg, msz,
                      "header length %llu is over the limit of %d bytes",
                      (unsigned long long)n, ATTND_ST_MAX_HEADER);
  if (n > len - 8)
    return attnd_fail(msg, msz,
                      "header length %llu is past the end of the file (%zu "
                      "bytes)",
                      (unsigned long long)n, len);
  const char *h = (const char *)buf + 8;
  if (h[0] != '{')
    return attnd_fail(msg, msz,
                      "the header does not start with '{' (its first byte is "
                      "0x%02x)",
                      (unsigned char)h[0]);
  json_error_t err;
  json_t *root = json_loadb(
      h, (size_t)n, JSON_REJECT_DUPLICATES | JSON_DISABLE_EOF_CHECK, &err);
  if (root == NULL)
    return attnd_fail(msg, msz,
                      "the header is not valid JSON: %s (byte %d of the "
                      "header)",
                      err.text, err.position);
  /* on success, err.position is the length of the JSON text */
  for (size_t i = (size_t)err.position; i < n; i++)
    if (h[i] != ' ') {
      json_decref(root);
      return attnd_fail(msg, msz,
                        "byte %zu of the header (0x%02x) follows its JSON "
                        "object: only spaces may pad it",
                        i, (unsigned char)h[i]);
    }
  out->header_bytes = (size_t)n;
  out->data_bytes = len - 8 - (size_t)n;
  int r = st_members(root, buf + 8 + n, out, msg, msz);
  json_decref(root);
  if (r)
    attnd_st_free(out);
  return r;
}

void attnd_st_free(attnd_st_file_t *f) {
  free(f->owned);
  memset(f, 0, sizeof *f);
}

const attnd_st_tensor_t *attnd_st_find(const attnd_st_file_t *f,
                                       const char *name) {
  for (size_t i = 0; i < f->n; i++)
    if (strcmp(f->tensors[i].name, name) == 0)
      return &f->tensors[i];
  return NULL;
}

_Thread_local uint64_t attnd__st_meta_compared;

/* By halving meta_order: a layer reads a dozen keys, so a search key by
 * key cost a file of L layers and M keys L * 12 * M comparisons. */
const char *attnd_st_meta(const attnd_st_file_t *f, const char *key) {
  size_t lo = 0, hi = f->n_meta;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2, i = f->meta_order[mid];
    int c = strcmp(key, f->meta_keys[i]);
    attnd__st_meta_compared++;
    if (c == 0)
      return f->meta_values[i];
    if (c < 0)
      hi = mid;
    else
      lo = mid + 1;
  }
  return NULL;
}

/* ---- conversion to float32 ---------------------------------------------- */

static inline float st_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static inline uint32_t st_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

/* The little-endian uint16 at p. */
static inline uint32_t st_u16(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8;
}

/* Whether a value is infinite or NaN: its exponent is all ones. The
 * integer forms are sums whose top bit is set only then, to be OR-ed over
 * a loop (no branch, no boolean) and tested once. The F64 test is "rounds
 * beyond float32's range": below the midpoint of FLT_MAX and 2^128, a
 * double rounds to at most FLT_MAX. */
#define ST_F16_ALL1(h) (((h)&0x7c00) + 0x400)        /* bit 15 */
#define ST_BF16_ALL1(h) (((h)&0x7f80) + 0x80)        /* bit 15 */
#define ST_F32_ALL1(u) (((u)&0x7f800000) + 0x800000) /* bit 31 */
#define ST_F16_BAD(h) ((ST_F16_ALL1(h) & 0x8000) != 0)
#define ST_BF16_BAD(h) ((ST_BF16_ALL1(h) & 0x8000) != 0)
#define ST_F32_BAD(u) ((ST_F32_ALL1(u) & 0x80000000u) != 0)
#define ST_F64_BAD(d) (!(fabs(d) < 0x1.ffffffp127))

/* Each converter writes n floats and returns whether a value was bad. */
static int st_conv_f16(const uint8_t *src, float *dst, size_t n) {
  uint32_t acc = 0;
#pragma omp simd reduction(| : acc)
  for (size_t i = 0; i < n; i++) {
    uint32_t h = st_u16(src + 2 * i);
    dst[i] = attnd_f16_to_f32(h);
    acc |= ST_F16_ALL1(h);
  }
  return (acc & 0x8000) != 0;
}

#ifdef ST_HAVE_F16C

__attribute__((target("avx,f16c"))) static int
st_conv_f16c(const uint8_t *src, float *dst, size_t n) {
  const __m128i mask = _mm_set1_epi16(0x7c00);
  __m128i acc = _mm_setzero_si128();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(src + 2 * i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
    acc = _mm_or_si128(acc, _mm_cmpeq_epi16(_mm_and_si128(h, mask), mask));
  }
  int bad = st_conv_f16(src + 2 * i, dst + i, n - i);
  return bad | !_mm_testz_si128(acc, acc);
}
#endif

static int st_conv_bf16(const uint8_t *src, float *dst, size_t n) {
  uint32_t acc = 0;
#pragma omp simd reduction(| : acc)
  for (size_t i = 0; i < n; i++) {
    uint32_t h = st_u16(src + 2 * i);
    dst[i] = st_f32(h << 16);
    acc |= ST_BF16_ALL1(h);
  }
  return (acc & 0x8000) != 0;
}

static int st_conv_f32(const uint8_t *src, float *dst, size_t n) {
  memcpy(dst, src, n * sizeof(float));
  uint32_t acc = 0;
#pragma omp simd reduction(| : acc)
  for (size_t i = 0; i < n; i++)
    acc |= ST_F32_ALL1(st_bits(dst[i]));
  return (acc & 0x80000000u) != 0;
}

static int st_conv_f64(const uint8_t *src, float *dst, size_t n) {
  int bad = 0;
  for (size_t i = 0; i < n; i++) {
    double d;
    memcpy(&d, src + 8 * i, sizeof d);
    int b = ST_F64_BAD(d);
    dst[i] = b ? 0.0f : (float)d; /* never cast what does not fit */
    bad |= b;
  }
  return bad;
}

/* The index of t's first bad value (one is known to be there). */
static int64_t st_first_bad(const attnd_st_tensor_t *t) {
  const uint8_t *p = t->data;
  int64_t i = 0;
  for (; i < t->elems; i++) {
    double d;
    uint32_t u;
    switch (t->dtype) {
    case ATTND_ST_F16:
      if (ST_F16_BAD(st_u16(p + 2 * i)))
        return i;
      break;
    case ATTND_ST_BF16:
      if (ST_BF16_BAD(st_u16(p + 2 * i)))
        return i;
      break;
    case ATTND_ST_F32:
      memcpy(&u, p + 4 * i, sizeof u);
      if (ST_F32_BAD(u))
        return i;
      break;
    default:
      memcpy(&d, p + 8 * i, sizeof d);
      if (ST_F64_BAD(d))
        return i;
    }
  }
  return i;
}

int attnd_st_to_f32(const attnd_st_tensor_t *t, float *dst, int64_t *bad) {
  size_t n = (size_t)t->elems;
  int b;
  switch (t->dtype) {
  case ATTND_ST_F16:
#ifdef ST_HAVE_F16C
    if (!attnd__half_scalar_only && attnd_cpu_has_f16c()) {
      b = st_conv_f16c(t->data, dst, n);
      break;
    }
#endif
    b = st_conv_f16(t->data, dst, n);
    break;
  case ATTND_ST_BF16:
    b = st_conv_bf16(t->data, dst, n);
    break;
  case ATTND_ST_F32:
    b = st_conv_f32(t->data, dst, n);
    break;
  case ATTND_ST_F64:
    b = st_conv_f64(t->data, dst, n);
    break;
  default:
    return -1;
  }
  if (!b)
    return 0;
  if (bad)
    *bad = st_first_bad(t);
  return -2;
}

/* ---- mapping ------------------------------------------------------------ */

int attnd_st_map(const char *path, attnd_st_mapped_t *m, char *msg,
                 size_t msz) {
  memset(m, 0, sizeof *m);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return attnd_fail(msg, msz, "%s: cannot open: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return attnd_fail(msg, msz, "%s: cannot stat: %s", path, strerror(e));
  }
  if (S_ISDIR(st.st_mode) || !S_ISREG(st.st_mode) || st.st_size == 0) {
    close(fd);
    return attnd_fail(msg, msz, "%s: %s", path,
                      S_ISDIR(st.st_mode) ? "is a directory, not a file"
                      : !S_ISREG(st.st_mode)
                          ? "is not a regular file"
                          : "is empty (0 bytes), not a safetensors file");
  }
  size_t len = (size_t)st.st_size;
  void *p = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
  int e = errno;
  close(fd);
  if (p == MAP_FAILED)
    return attnd_fail(msg, msz, "%s: cannot map %zu bytes: %s", path, len,
                      strerror(e));
  /* the parser's message follows "<path>: " */
  size_t k = (size_t)snprintf(msg, msz, "%s: ", path);
  if (attnd_st_parse(p, len, &m->file, k < msz ? msg + k : NULL,
                     k < msz ? msz - k : 0)) {
    munmap(p, len);
    return -1;
  }
  if (msz > 0)
    msg[0] = '\0';
  m->map = p;
  m->len = len;
  return 0;
}

void attnd_st_unmap(attnd_st_mapped_t *m) {
  attnd_st_free(&m->file);
  if (m->map)
    munmap((void *)m->map, m->len);
  memset(m, 0, sizeof *m);
}

/* ---- writing ------------------------------------------------------------ */

/* Writes all of p[0..n) to fd. Returns 0, or -1 with errno. */
static int st_write_all(int fd, const void *p, size_t n) {
  const uint8_t *b = p;
  while (n > 0) {
    ssize_t w = write(fd, b, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0) {
      if (w == 0)
        errno = EIO;
      return -1;
    }
    b += w;
    n -= (size_t)w;
  }
  return 0;
}

/* Why tensor t cannot be written (NULL when it can), with root the header
 * so far; its size in *bytes. */
static const char *st_out_check(const attnd_st_out_t *t, const json_t *root,
                                size_t *bytes) {
  int64_t elems;
  if (t->name == NULL || strcmp(t->name, "__metadata__") == 0)
    return "not a tensor name";
  if (json_object_get(root, t->name))
    return "a duplicate name";
  if ((unsigned)t->dtype >= ATTND_ST_N_DTYPES)
    return "an unknown dtype";
  if (t->rank < 0 || t->rank > ATTND_ST_MAX_RANK)
    return "a rank outside [0, 8]";
  for (int d = 0; d < t->rank; d++)
    if (t->shape[d] < 0)
      return "a negative dimension";
  switch (st_count(t->rank, t->shape, t->dtype, &elems, bytes)) {
  case 0:
    break;
  case -3:
    return "elements whose bits do not end on a byte";
  default:
    return "more bytes than fit";
  }
  if (*bytes > 0 && t->data == NULL)
    return "no data";
  return NULL;
}

/* The metadata as a new JSON object, or NULL with msg. */
static json_t *st_out_meta(const char *path, const char *const *mk,
                           const char *const *mv, size_t n_meta, char *msg,
                           size_t msz) {
  json_t *meta = json_object();
  for (size_t i = 0; meta && i < n_meta; i++) {
    const char *k = mk ? mk[i] : NULL, *v = mv ? mv[i] : NULL;
    const char *why = !k || !v                   ? "a key or value is NULL"
                      : json_object_get(meta, k) ? "a duplicate key"
                                                 : NULL;
    /* json_string and json_object_set_new refuse what is not UTF-8 */
    if (why == NULL && json_object_set_new(meta, k, json_string(v)))
      why = "not UTF-8";
    if (why) {
      json_decref(meta);
      attnd_fail(msg, msz, "%s: metadata %zu ('%s'): %s", path, i,
                 k ? k : "(null)", why);
      return NULL;
    }
  }
  if (meta == NULL)
    attnd_fail(msg, msz, "%s: out of memory", path);
  return meta;
}

/* The header's JSON text (compact, members in the given order) in a new
 * string, or NULL with msg. */
static char *st_out_header(const char *path, const attnd_st_out_t *ts, size_t n,
                           const char *const *mk, const char *const *mv,
                           size_t n_meta, char *msg, size_t msz) {
  json_t *root = json_object();
  if (root == NULL) {
    attnd_fail(msg, msz, "%s: out of memory", path);
    return NULL;
  }
  if (n_meta > 0) {
    json_t *meta = st_out_meta(path, mk, mv, n_meta, msg, msz);
    if (meta == NULL || json_object_set_new(root, "__metadata__", meta)) {
      json_decref(root);
      return NULL;
    }
  }
  uint64_t pos = 0;
  for (size_t i = 0; i < n; i++) {
    const attnd_st_out_t *t = &ts[i];
    size_t bytes = 0;
    const char *why = st_out_check(t, root, &bytes);
    if (why == NULL && pos + bytes > INT64_MAX)
      why = "more bytes than fit";
    json_t *ent =
        why ? NULL
            : json_pack("{s:s, s:[], s:[I, I]}", "dtype",
                        attnd_st_dtype_name(t->dtype), "shape", "data_offsets",
                        (json_int_t)pos, (json_int_t)(pos + bytes));
    json_t *shape = json_object_get(ent, "shape");
    int oom = why == NULL && ent == NULL;
    for (int d = 0; !oom && ent && d < t->rank; d++)
      oom = json_array_append_new(shape, json_integer(t->shape[d])) != 0;
    if (oom) {
      json_decref(ent);
      why = "out of memory";
    } else if (why == NULL && json_object_set_new(root, t->name, ent)) {
      why = "the name is not UTF-8"; /* or no memory */
    }
    if (why) {
      json_decref(root);
      attnd_fail(msg, msz, "%s: tensor %zu ('%s'): %s", path, i,
                 t->name ? t->name : "(null)", why);
      return NULL;
    }
    pos += bytes;
  }
  char *text = json_dumps(root, JSON_COMPACT);
  json_decref(root);
  if (text == NULL)
    attnd_fail(msg, msz, "%s: out of memory", path);
  return text;
}

int attnd_st_write(const char *path, const attnd_st_out_t *tensors, size_t n,
                   const char *const *meta_keys, const char *const *meta_values,
                   size_t n_meta, char *msg, size_t msz) {
  char *json =
      st_out_header(path, tensors, n, meta_keys, meta_values, n_meta, msg, msz);
  if (json == NULL)
    return -1;
  /* the length prefix, the JSON and its padding to a multiple of 8 */
  size_t len = strlen(json), padded = (len + 7) / 8 * 8;
  uint8_t *head = malloc(8 + padded);
  if (head == NULL) {
    free(json);
    return attnd_fail(msg, msz, "%s: out of memory", path);
  }
  for (int i = 0; i < 8; i++)
    head[i] = (uint8_t)((uint64_t)padded >> (8 * i));
  memcpy(head + 8, json, len);
  memset(head + 8 + len, ' ', padded - len);
  free(json);

  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    int e = errno;
    free(head);
    return attnd_fail(msg, msz, "%s: cannot create: %s", path, strerror(e));
  }
  int r = st_write_all(fd, head, 8 + padded);
  for (size_t i = 0; r == 0 && i < n; i++) {
    int64_t elems;
    size_t bytes;
    st_count(tensors[i].rank, tensors[i].shape, tensors[i].dtype, &elems,
             &bytes);
    r = st_write_all(fd, tensors[i].data, bytes);
  }
  int e = errno;
  free(head);
  struct stat st;
  int regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  if (close(fd) != 0 && r == 0) {
    r = -1;
    e = errno;
  }
  if (r) {
    if (regular) /* never a device such as /dev/full */
      unlink(path);
    return attnd_fail(msg, msz, "%s: cannot write: %s", path, strerror(e));
  }
  return 0;
}
