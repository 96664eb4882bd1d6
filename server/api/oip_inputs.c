/* server/api/oip_inputs.c: the Open Inference Protocol's inputs: each
 * input's header (name, datatype, shape, parameters) and then its data,
 * into a buffer the request owns: from JSON (fill_json, with the bulk
 * scanner's lifted arrays), or from Triton's binary tensor data (a span of
 * the body, used where it lies when it is FP32 and aligned). See
 * oip_decode.h. HTTP thread. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/oip_decode.h"
#include "codec/util.h"
#include "model/safetensors.h"

/* ---- inputs -------------------------------------------------------------- */

/* The inputs `model` takes, for messages: "query, key, ..." */
static void input_list(const oip_t *o, char *s, size_t n) {
  size_t k = 0;
  s[0] = 0;
  for (size_t i = 0; i < N_INPUTS && k < n; i++)
    if (!(o->layer && attnd__oip_inputs[i].generic))
      k += (size_t)snprintf(s + k, n - k, "%s%s", k ? ", " : "",
                            attnd__oip_inputs[i].name);
}

/* The input's name: known to the model, and not given before. */
static int read_name(oip_t *o, const json_t *v, size_t at, oip_in_t *in) {
  char field[64], list[256];
  const json_t *name =
      attnd__oip_need(o, v, in->path, "name", field, JSON_STRING, "a string");
  if (name == NULL)
    return -1;
  const char *s = json_string_value(name);
  size_t k = 0;
  while (k < N_INPUTS && strcmp(attnd__oip_inputs[k].name, s) != 0)
    k++;
  if (k == N_INPUTS || (o->layer && attnd__oip_inputs[k].generic)) {
    input_list(o, list, sizeof list);
    return E(&o->d, ATTND_ERR_INVALID_VALUE, field,
             "%s is '%.64s', not an input of model '%s'%s (inputs: %s)", field,
             s, o->layer ? o->layer->name : ATTND_OIP_GENERIC,
             k < N_INPUTS ? ", which has its own weights" : "", list);
  }
  if (o->input_at[k] >= 0)
    return E(&o->d, ATTND_ERR_INVALID_VALUE, field,
             "%s is '%.64s', as is inputs[%d].name: an input is given once",
             field, s, o->input_at[k]);
  o->input_at[k] = (int)at;
  in->def = &attnd__oip_inputs[k];
  return 0;
}

/* The datatype: one that the input is sent in. */
static int read_dtype(oip_t *o, const json_t *v, oip_in_t *in) {
  char field[64], list[64] = "";
  const json_t *dt = attnd__oip_need(o, v, in->path, "datatype", field,
                                     JSON_STRING, "a string such as \"FP32\"");
  if (dt == NULL)
    return -1;
  unsigned ok = attnd__oip_elem_dtypes[in->def->elem];
  int k = attnd__oip_find_name(attnd__oip_dtypes, json_string_value(dt));
  if (k >= 0 && (ok >> k & 1)) {
    in->dtype = (dtype_t)k;
    return 0;
  }
  size_t n = 0;
  for (int i = 0; i < DT_COUNT; i++)
    if (ok >> i & 1)
      n += (size_t)snprintf(list + n, sizeof list - n, "%s%s",
                            n == 0          ? ""
                            : ok >> (i + 1) ? ", "
                                            : " or ",
                            attnd__oip_dtypes[i]);
  return E(&o->d, ATTND_ERR_INVALID_VALUE, field, "%s is '%.32s'; %s takes %s",
           field, json_string_value(dt), in->def->name, list);
}

const char *const attnd__oip_input_param_members[] = {"binary_data_size", NULL};

/* The input's parameters: binary_data_size alone is known, a byte count
 * of the binary data after the JSON. */
static int read_input_params(oip_t *o, const json_t *v, oip_in_t *in) {
  const json_t *ps = json_object_get(v, "parameters");
  char field[64];
  attnd_fmt_member(field, sizeof field, in->path, "parameters");
  in->binary_size = -1;
  if (ps == NULL || json_is_null(ps))
    return 0;
  if (!json_is_object(ps))
    return attnd__oip_bad_type(o, field, ps, "an object");
  if (attnd__dec_members(&o->d, ps, field, attnd__oip_input_param_members) < 0)
    return -1;
  const json_t *size = json_object_get(ps, "binary_data_size");
  if (size == NULL || json_is_null(size))
    return 0;
  attnd_fmt_member(field, sizeof field, in->path,
                   "parameters.binary_data_size");
  if (attnd__dec_int(&o->d, size, field, field, 0, INT64_MAX,
                     &in->binary_size) < 0)
    return -1;
  if (json_object_get(v, "data"))
    return E(&o->d, ATTND_ERR_INVALID_VALUE, field,
             "%s is given, and so is %s.data: an input's data is JSON or "
             "binary, not both",
             field, in->path);
  if (o->bin == NULL)
    return E(&o->d, ATTND_ERR_BAD_REQUEST, field,
             "%s is given, but the request has no binary data: send the "
             "JSON's length in Inference-Header-Content-Length and the "
             "tensors' bytes after it",
             field);
  return 0;
}

/* The shape: 1 to ATTN_MAX_RANK dimensions of at least 1, and at most
 * max_tensor_elements elements. */
static int read_shape(oip_t *o, const json_t *v, oip_in_t *in) {
  char field[64], path[80];
  const json_t *sh = attnd__oip_need(o, v, in->path, "shape", field, JSON_ARRAY,
                                     "an array of dimensions");
  if (sh == NULL)
    return -1;
  size_t rank = json_array_size(sh);
  if (rank < 1 || rank > ATTN_MAX_RANK)
    return E(&o->d, ATTND_ERR_SHAPE_MISMATCH, field,
             "%s has %zu dimensions; expected 1 to %d", field, rank,
             ATTN_MAX_RANK);
  in->rank = (int)rank;
  for (size_t k = 0; k < rank; k++) {
    attnd_fmt_index(path, sizeof path, field, (int64_t)k);
    if (attnd__dec_int(&o->d, json_array_get(sh, k), field, path, 1, INT64_MAX,
                       &in->dim[k]) < 0)
      return -1;
  }
  int past = attnd__dec_count(in->rank, in->dim, &in->n);
  attnd_shape_text(in->shape, sizeof in->shape, in->rank, in->dim, ", ");
  int64_t max = o->d.cfg->max_tensor_elements;
  if (in->n > max)
    return E(&o->d, ATTND_ERR_LIMIT_EXCEEDED, field,
             "%s (%s) %s has %s%lld elements, over max_tensor_elements %lld",
             in->path, in->def->name, in->shape, past ? "more than " : "",
             (long long)in->n, (long long)max);
  return 0;
}

/* Stores leaf x, element i of the input, as its kind. `path` names it
 * ("inputs[0].data[1][2]"), `field` the data ("inputs[0].data"). */
static int leaf(oip_t *o, const oip_in_t *in, const json_t *x, void *dst,
                int64_t i, const char *field, const char *path) {
  dec_t *d = &o->d;
  char num[32];
  switch (in->def->elem) {
  case EL_FLOAT: {
    if (!json_is_number(x))
      return E(d, ATTND_ERR_INVALID_TYPE, field,
               "%s is %s; expected a number (%s)", path, attnd__json_type(x),
               attnd__oip_dtypes[in->dtype]);
    float f = (float)json_number_value(x);
    if (!isfinite(f))
      return E(d, ATTND_ERR_NON_FINITE, field,
               "%s is %s, which is not a finite float32", path,
               attnd__dec_num(json_number_value(x), num));
    ((float *)dst)[i] = f;
    return 0;
  }
  case EL_INT: {
    int64_t lo = in->dtype == DT_INT32 ? INT32_MIN : INT64_MIN,
            hi = in->dtype == DT_INT32 ? INT32_MAX : INT64_MAX;
    return attnd__dec_int(d, x, field, path, lo, hi, &((int64_t *)dst)[i]);
  }
  case EL_BOOL:
    if (json_is_boolean(x) ||
        (json_is_number(x) &&
         (json_number_value(x) == 0 || json_number_value(x) == 1))) {
      ((uint8_t *)dst)[i] = json_is_true(x) || json_number_value(x) == 1;
      return 0;
    }
    if (json_is_number(x))
      return E(d, ATTND_ERR_INVALID_VALUE, field,
               "%s is %s; expected true, false, 0 or 1", path,
               attnd__dec_num(json_number_value(x), num));
    return E(d, ATTND_ERR_INVALID_TYPE, field,
             "%s is %s; expected true, false, 0 or 1", path,
             attnd__json_type(x));
  }
  return 0;
}

/* Walks array v at dimension `level` of data nested as the shape (flat:
 * data that is one array of n leaves), checking its structure; with dst,
 * it stores the leaves too, at *i on. path[0..plen) names v. */
static int walk(oip_t *o, const oip_in_t *in, const json_t *v, int level,
                int flat, void *dst, int64_t *i, const char *field, char *path,
                size_t plen) {
  int last = flat || level == in->rank - 1;
  size_t n = json_array_size(v);
  if (!flat && (int64_t)n != in->dim[level])
    return E(&o->d, ATTND_ERR_SHAPE_MISMATCH, field,
             "%s has length %zu, but shape %s has %lld at dimension %d", path,
             n, in->shape, (long long)in->dim[level], level);
  for (size_t k = 0; k < n; k++) {
    const json_t *x = json_array_get(v, k);
    size_t pl = plen + attnd_fmt_index(path + plen, 128 - plen, "", (int64_t)k);
    if (last && json_is_array(x))
      return flat && in->rank > 1
                 ? E(&o->d, ATTND_ERR_RAGGED_TENSOR, field,
                     "%s is an array, but %s[0] is not: data is flat, or "
                     "nested as shape %s",
                     path, field, in->shape)
                 : E(&o->d, ATTND_ERR_RAGGED_TENSOR, field,
                     "%s is an array, but shape %s has %d dimension%s", path,
                     in->shape, in->rank, in->rank == 1 ? "" : "s");
    if (!last && !json_is_array(x))
      return E(&o->d, ATTND_ERR_RAGGED_TENSOR, field,
               "%s is %s; expected an array of %lld (shape %s)", path,
               attnd__json_type(x), (long long)in->dim[level + 1], in->shape);
    int r = last ? (dst ? leaf(o, in, x, dst, (*i)++, field, path) : 0)
                 : walk(o, in, x, level + 1, 0, dst, i, field, path, pl);
    if (r < 0)
      return -1;
  }
  return 0;
}

/* The input's JSON data that the bulk scanner lifted (b: rectangular, all
 * numbers or all booleans), flat or nested as the shape. What would be an
 * error sends the body down the slow path (E_UNSURE), which words it. */
static int fill_bulk(oip_t *o, const oip_in_t *in, attnd_bulk_t *b,
                     const char *field, void **out) {
  dec_t *d = &o->d;
  int fits = b->rank == 1 ? (int64_t)b->n == in->n
                          : b->rank == in->rank &&
                                memcmp(b->dim, in->dim,
                                       sizeof(int64_t) * (size_t)in->rank) == 0;
  if (!fits)
    return E_UNSURE(d, ATTND_ERR_SIZE_MISMATCH, field, "%s: shape", field);
  int64_t n = in->n;
  switch (in->def->elem) {
  case EL_FLOAT: {
    if (b->is_bool || attnd__dec_first_non_finite(b->data, n) >= 0)
      return E_UNSURE(d, ATTND_ERR_NON_FINITE, field, "%s: values", field);
    return (*out = attnd__dec_take_floats(d, b, field)) ? 0 : -1;
  }
  case EL_INT: {
    int64_t *x = attnd__dec_alloc(d, (size_t)n * sizeof *x);
    if (x == NULL)
      return attnd__dec_oom(d, field);
    *out = x;
    if (b->is_bool || attnd_bulk_ints(b, x) < 0)
      return E_UNSURE(d, ATTND_ERR_INVALID_TYPE, field, "%s: values", field);
    for (int64_t i = 0; in->dtype == DT_INT32 && i < n; i++)
      if (x[i] < INT32_MIN || x[i] > INT32_MAX)
        return E_UNSURE(d, ATTND_ERR_INVALID_VALUE, field, "%s: range", field);
    return 0;
  }
  case EL_BOOL: {
    uint8_t *m = attnd__dec_alloc(d, (size_t)n);
    if (m == NULL)
      return attnd__dec_oom(d, field);
    *out = m;
    for (int64_t i = 0; i < n; i++) {
      if (b->data[i] != 0 && b->data[i] != 1)
        return E_UNSURE(d, ATTND_ERR_INVALID_VALUE, field, "%s: values", field);
      m[i] = b->data[i] == 1;
    }
    return 0;
  }
  }
  return 0;
}

/* The input's JSON data, flat or nested as its shape, into a buffer the
 * request owns: its structure is checked before anything is allocated. */
static int fill_json(oip_t *o, const json_t *v, const oip_in_t *in,
                     void **out) {
  char field[64], path[128];
  const json_t *data =
      attnd__oip_need(o, v, in->path, "data", field, JSON_ARRAY, "an array");
  if (data == NULL)
    return -1;
  attnd_bulk_t *b = attnd__dec_bulk_array(&o->d, data);
  if (b)
    return fill_bulk(o, in, b, field, out);
  size_t n = json_array_size(data);
  int flat = in->rank == 1 || n == 0 || !json_is_array(json_array_get(data, 0));
  if (flat && (int64_t)n != in->n)
    return E(&o->d, ATTND_ERR_SIZE_MISMATCH, field,
             "%s has %zu elements, but %s's shape %s needs %lld", field, n,
             in->def->name, in->shape, (long long)in->n);
  size_t plen = attnd_fmt_str(path, sizeof path, field);
  int64_t i = 0;
  if (walk(o, in, data, 0, flat, NULL, &i, field, path, plen) < 0)
    return -1;
  void *dst = attnd__dec_alloc(&o->d, (size_t)in->n *
                                          attnd__oip_elem_size[in->def->elem]);
  if (dst == NULL)
    return attnd__dec_oom(&o->d, field);
  *out = dst;
  return walk(o, in, data, 0, flat, dst, &i, field, path, plen);
}

/* The size in bytes of one element of each datatype on the wire. */
static const size_t dtype_size[DT_COUNT] = {4, 2, 2, 8, 4, 8, 1};

/* The element at flat index i of the input, as "[1, 3]". */
static const char *index_text(const oip_in_t *in, int64_t i, char *buf,
                              size_t n) {
  int64_t at[ATTN_MAX_RANK];
  for (int d = in->rank - 1; d >= 0; d--) {
    at[d] = i % in->dim[d];
    i /= in->dim[d];
  }
  attnd_shape_text(buf, n, in->rank, at, ", ");
  return buf;
}

/* The input's binary data: the next binary_data_size bytes after the JSON,
 * which must be the shape's elements in the datatype, little-endian and
 * row-major, converted into a buffer the request owns. */
static int fill_binary(oip_t *o, const oip_in_t *in, void **out) {
  dec_t *d = &o->d;
  char field[64], at[96];
  attnd_fmt_member(field, sizeof field, in->path,
                   "parameters.binary_data_size");
  size_t es = dtype_size[in->dtype];
  if ((uint64_t)in->binary_size != (uint64_t)in->n * es)
    return E(d, ATTND_ERR_SIZE_MISMATCH, field,
             "%s is %lld, but %s's shape %s of %s needs %lld bytes", field,
             (long long)in->binary_size, in->def->name, in->shape,
             attnd__oip_dtypes[in->dtype], (long long)(in->n * (int64_t)es));
  size_t left = o->bin_len - o->bin_at;
  if ((uint64_t)in->binary_size > left)
    return E(d, ATTND_ERR_BAD_REQUEST, field,
             "%s is %lld, but only %zu bytes of the binary data are left after "
             "the JSON (%zu in all, %zu taken by earlier inputs)",
             field, (long long)in->binary_size, left, o->bin_len, o->bin_at);
  const unsigned char *src = o->bin + o->bin_at;
  o->bin_at += (size_t)in->binary_size;
  if (in->dtype == DT_FP32 && (uintptr_t)src % sizeof(float) == 0 && o->own &&
      (*o->own || o->own_bytes == 0)) {
    int64_t bad = attnd__dec_first_non_finite((const float *)src, in->n);
    if (bad >= 0)
      return E(d, ATTND_ERR_NON_FINITE, in->path,
               "%s (%s) element %s is not a finite float32", in->path,
               in->def->name, index_text(in, bad, at, sizeof at));
    if (o->own_bytes) { /* the first tensor read in place takes the body */
      if (attnd__dec_adopt(d, *o->own, o->own_bytes) < 0)
        return *o->own = NULL, o->own = NULL, attnd__dec_oom(d, in->path);
      o->lent = *o->own;
      *o->own = NULL;
      o->own_bytes = 0;
    }
    *out = (void *)src;
    return 0;
  }
  void *dst =
      attnd__dec_alloc(d, (size_t)in->n * attnd__oip_elem_size[in->def->elem]);
  if (dst == NULL)
    return attnd__dec_oom(d, in->path);
  *out = dst;
  switch (in->def->elem) {
  case EL_FLOAT: {
    static const attnd_st_dtype_t st[] = {[DT_FP32] = ATTND_ST_F32,
                                          [DT_FP16] = ATTND_ST_F16,
                                          [DT_BF16] = ATTND_ST_BF16,
                                          [DT_FP64] = ATTND_ST_F64};
    attnd_st_tensor_t t = {.name = in->def->name,
                           .dtype = st[in->dtype],
                           .rank = 1,
                           .shape = {in->n},
                           .elems = in->n,
                           .data = src,
                           .bytes = (size_t)in->binary_size};
    int64_t bad = 0;
    if (attnd_st_to_f32(&t, dst, &bad) < 0)
      return E(d, ATTND_ERR_NON_FINITE, in->path,
               "%s (%s) element %s is not a finite float32", in->path,
               in->def->name, index_text(in, bad, at, sizeof at));
    return 0;
  }
  case EL_INT:
    for (int64_t i = 0; i < in->n; i++) {
      int64_t x;
      if (in->dtype == DT_INT32) {
        int32_t y;
        memcpy(&y, src + 4 * i, 4);
        x = y;
      } else {
        memcpy(&x, src + 8 * i, 8);
      }
      ((int64_t *)dst)[i] = x;
    }
    return 0;
  case EL_BOOL:
    for (int64_t i = 0; i < in->n; i++) {
      if (src[i] > 1)
        return E(d, ATTND_ERR_INVALID_VALUE, in->path,
                 "%s (%s) element %s is the byte %u; BOOL is 0 or 1", in->path,
                 in->def->name, index_text(in, i, at, sizeof at), src[i]);
      ((uint8_t *)dst)[i] = src[i];
    }
    return 0;
  }
  return 0;
}

const char *const attnd__oip_input_members[] = {
    "name", "shape", "datatype", "parameters", "data", NULL};

/* inputs[at]: its header, then its data, into the params' tensor. */
static int read_input(oip_t *o, const json_t *v, size_t at) {
  oip_in_t in;
  void *data = NULL;
  attnd_fmt_index(in.path, sizeof in.path, "inputs", (int64_t)at);
  if (!json_is_object(v))
    return attnd__oip_bad_type(o, in.path, v,
                               "an object with name, shape, datatype and data");
  if (attnd__dec_members(&o->d, v, in.path, attnd__oip_input_members) < 0 ||
      read_name(o, v, at, &in) < 0 || read_dtype(o, v, &in) < 0 ||
      read_input_params(o, v, &in) < 0 || read_shape(o, v, &in) < 0 ||
      (in.binary_size >= 0 ? fill_binary(o, &in, &data)
                           : fill_json(o, v, &in, &data)) < 0)
    return -1;
  attn_tensor_t *t = (attn_tensor_t *)((char *)&o->d.req->params + in.def->off);
  t->data = data;
  t->rank = in.rank;
  memcpy(t->dim, in.dim, sizeof(int64_t) * (size_t)in.rank);
  return 0;
}

int attnd__oip_read_inputs(oip_t *o, const json_t *ins) {
  if (ins == NULL || json_is_null(ins))
    return E(&o->d, ATTND_ERR_MISSING_FIELD, "inputs",
             "inputs is required: an array of tensors, query among them");
  if (!json_is_array(ins))
    return attnd__oip_bad_type(o, "inputs", ins, "an array of tensors");
  for (size_t i = 0; i < json_array_size(ins); i++)
    if (read_input(o, json_array_get(ins, i), i) < 0)
      return -1;
  if (o->input_at[0] < 0)
    return E(&o->d, ATTND_ERR_MISSING_FIELD, "inputs",
             "inputs has no tensor named query; it is required");
  if (o->bin_at < o->bin_len)
    return E(&o->d, ATTND_ERR_BAD_REQUEST, "Inference-Header-Content-Length",
             "the body has %zu bytes after its JSON, and its inputs' "
             "binary_data_size take %zu of them: the rest would be ignored",
             o->bin_len, o->bin_at);
  return 0;
}
