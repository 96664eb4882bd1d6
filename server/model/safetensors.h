/* server/model/safetensors.h: the safetensors format, read strictly and
 * written byte for byte (https://github.com/huggingface/safetensors).
 *
 * A file is: an 8-byte little-endian header length N (at most
 * ATTND_ST_MAX_HEADER), N bytes of a JSON object (UTF-8, which may be
 * padded at its end with spaces), then the data. Each member of the object
 * but "__metadata__" is a tensor: {"dtype": "F32", "shape": [2, 3],
 * "data_offsets": [begin, end]}, offsets relative to the data's start;
 * "__metadata__", when present, maps strings to strings. The reader
 * refuses, with a message naming the tensor: a header length past the file
 * or over the limit, a header that is not a JSON object, a duplicate name,
 * a member of any other form, an unknown dtype, a negative or fractional
 * dimension, an element count or byte size that overflows, a size that is
 * not the element count times the dtype's size (or elements of 4 or 6
 * bits that do not end on a byte), offsets that overlap or leave a gap
 * (sorted by begin, the tensors must tile the data exactly from 0), and
 * data that does not end where the file ends. Linear in the file's header
 * (jansson parses it), whatever it holds.
 *
 * Pure functions over memory, but attnd_st_map, which maps a file. Any
 * thread. */
#ifndef ATTND_MODEL_SAFETENSORS_H
#define ATTND_MODEL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define ATTND_ST_MAX_HEADER 100000000 /* bytes of JSON header at most */
#define ATTND_ST_MAX_RANK 8

/* The dtypes of the format, with the bits of one element. Only F64, F32,
 * F16 and BF16 convert to float32; the others are known (a file may hold
 * them, e.g. an int64 buffer or the MX formats' packed F4 values and
 * F8_E8M0 scales), and a layer that needs one as a weight is refused by
 * name. F4 and F6 pack their elements: a tensor of them is elems * bits / 8
 * bytes, and a count whose bits do not end on a byte is refused. */
#define ATTND_ST_DTYPE_MAP(X)                                                  \
  X(F64, "F64", 64)                                                            \
  X(F32, "F32", 32)                                                            \
  X(F16, "F16", 16)                                                            \
  X(BF16, "BF16", 16)                                                          \
  X(I64, "I64", 64)                                                            \
  X(I32, "I32", 32)                                                            \
  X(I16, "I16", 16)                                                            \
  X(I8, "I8", 8)                                                               \
  X(U64, "U64", 64)                                                            \
  X(U32, "U32", 32)                                                            \
  X(U16, "U16", 16)                                                            \
  X(U8, "U8", 8)                                                               \
  X(BOOL, "BOOL", 8)                                                           \
  X(F8_E4M3, "F8_E4M3", 8)                                                     \
  X(F8_E5M2, "F8_E5M2", 8)                                                     \
  X(F8_E8M0, "F8_E8M0", 8)                                                     \
  X(C64, "C64", 64)                                                            \
  X(F4, "F4", 4)                                                               \
  X(F6_E2M3, "F6_E2M3", 6)                                                     \
  X(F6_E3M2, "F6_E3M2", 6)

typedef enum attnd_st_dtype {
#define ST_ENUM(name, text, bits) ATTND_ST_##name,
  ATTND_ST_DTYPE_MAP(ST_ENUM)
#undef ST_ENUM
      ATTND_ST_N_DTYPES
} attnd_st_dtype_t;

/* The dtype's name in the format ("BF16"), the bits of one element, and
 * its size in bytes (0 for F4 and F6, whose elements are not whole bytes). */
const char *attnd_st_dtype_name(attnd_st_dtype_t t);
unsigned attnd_st_dtype_bits(attnd_st_dtype_t t);
size_t attnd_st_dtype_size(attnd_st_dtype_t t);

/* One tensor of a parsed file. */
typedef struct attnd_st_tensor {
  const char *name; /* NUL-terminated, owned by the file */
  attnd_st_dtype_t dtype;
  int rank;                         /* 0 for a scalar */
  int64_t shape[ATTND_ST_MAX_RANK]; /* shape[0..rank) */
  int64_t elems;                    /* the product of the shape; 1 at rank 0 */
  const uint8_t *data;              /* into the file's bytes: elems values */
  size_t bytes;                     /* elems times the dtype's bits / 8 */
} attnd_st_tensor_t;

/* A parsed file: a view of the bytes it was parsed from, which must
 * outlive it, plus what it owns (names, metadata). */
typedef struct attnd_st_file {
  attnd_st_tensor_t *tensors; /* in the header's order */
  size_t n;
  const char **meta_keys, **meta_values; /* __metadata__, in its order */
  size_t n_meta;
  const size_t *meta_order; /* internal: meta's indices sorted by key */
  size_t header_bytes;      /* N */
  size_t data_bytes;        /* the file's length - 8 - N */
  void *owned;              /* internal */
} attnd_st_file_t;

/* Parses the whole file's bytes buf[0..len). Returns 0, or -1 with msg
 * (size msz) saying what is wrong and where ("tensor 'x.weight': ..."),
 * and *out emptied. */
int attnd_st_parse(const uint8_t *buf, size_t len, attnd_st_file_t *out,
                   char *msg, size_t msz);
void attnd_st_free(attnd_st_file_t *f);

/* The tensor named `name`, or NULL. Linear in the tensors (few hundred). */
const attnd_st_tensor_t *attnd_st_find(const attnd_st_file_t *f,
                                       const char *name);
/* The metadata value of `key`, or NULL. Logarithmic in the keys. */
const char *attnd_st_meta(const attnd_st_file_t *f, const char *key);
/* For tests: the keys this thread's calls of attnd_st_meta have compared
 * `key` with so far. */
extern _Thread_local uint64_t attnd__st_meta_compared;

/* Converts t's elements (F64, F32, F16 or BF16, little-endian as the
 * format stores them, the data possibly unaligned) to float32 at dst
 * (t->elems floats): F16 and BF16 exactly, F64 rounded to nearest. Returns
 * 0; -1 for a dtype that does not convert; -2 when a value is not finite
 * or beyond float32's range, with *bad its index. At least 1 GB/s of
 * input on one core. */
int attnd_st_to_f32(const attnd_st_tensor_t *t, float *dst, int64_t *bad);

/* A file mapped read-only (mmap) and parsed. */
typedef struct attnd_st_mapped {
  attnd_st_file_t file;
  const uint8_t *map;
  size_t len;
} attnd_st_mapped_t;

/* Maps and parses the file at path. Returns 0, or -1 with msg naming the
 * file ("<path>: ..."). */
int attnd_st_map(const char *path, attnd_st_mapped_t *m, char *msg, size_t msz);
void attnd_st_unmap(attnd_st_mapped_t *m);

/* For writers (tests, the demo layer, tools): one tensor to write. */
typedef struct attnd_st_out {
  const char *name;
  attnd_st_dtype_t dtype;
  int rank;
  int64_t shape[ATTND_ST_MAX_RANK];
  const void *data; /* elems values of the dtype, little-endian */
} attnd_st_out_t;

/* Writes a safetensors file at path: the tensors in the given order,
 * contiguous, and metadata (n_meta key/value pairs, may be 0) as
 * __metadata__. The header is padded with spaces to a multiple of 8 bytes,
 * as the reference writer does. Returns 0, or -1 with msg. */
int attnd_st_write(const char *path, const attnd_st_out_t *tensors, size_t n,
                   const char *const *meta_keys, const char *const *meta_values,
                   size_t n_meta, char *msg, size_t msz);

#endif
