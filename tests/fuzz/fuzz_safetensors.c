/* tests/fuzz/fuzz_safetensors.c: the safetensors reader, converter and
 * writer (server/model/safetensors.h) on arbitrary bytes.
 *
 * Input, in one of two forms:
 *   - a whole file (any input that does not start with '{');
 *   - "{...header...}\0data": the header's text up to the first NUL, the
 *     data after it; the harness writes the length field, so that mutations
 *     of the JSON keep a consistent file (a file starting with '{' would
 *     claim a header of at least 123 bytes and is covered by this form).
 * The file is copied into an allocation of its exact size, so that ASan
 * sees any read past it. Checked: no crash, no leak; a failure leaves a
 * message and *out empty; a success gives tensors whose element count is
 * the product of their shape and whose bytes are that times the dtype's
 * size, whose data lie in the file past the header, which tile the data
 * exactly (sorted here, independently of the reader), each found by name,
 * and metadata found by key. Each tensor converts: F32, F16, BF16 and F64
 * give 0, or -2 at the index of the first value that is not finite (decoded
 * here); F16 gives the same bits through its scalar and F16C paths; the
 * other dtypes give -1. What was read is written again (attnd_st_write, to
 * a memfd) and reads back to the same tensors, bytes and metadata. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "codec/half.h"
#include "fuzz.h"
#include "model/safetensors.h"

/* safetensors.c's switch to its scalar F16 path. */

static int out_fd = -1;
static char out_path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  out_fd = memfd_create("attnd-fuzz-safetensors", 0);
  FUZZ_CHECK(out_fd >= 0, "memfd_create failed");
  snprintf(out_path, sizeof out_path, "/proc/self/fd/%d", out_fd);
  return 0;
}

/* The file the input stands for, in a new exact-size allocation. */
static uint8_t *file_of(const uint8_t *data, size_t size, size_t *len) {
  const uint8_t *nul = size && data[0] == '{' ? memchr(data, 0, size) : NULL;
  if (nul == NULL) {
    uint8_t *b = malloc(size ? size : 1);
    FUZZ_CHECK(b != NULL, "out of memory");
    memcpy(b, data, size);
    *len = size;
    return b;
  }
  size_t h = (size_t)(nul - data), d = size - h - 1;
  *len = 8 + h + d;
  uint8_t *b = malloc(*len);
  FUZZ_CHECK(b != NULL, "out of memory");
  for (int i = 0; i < 8; i++)
    b[i] = (uint8_t)((uint64_t)h >> (8 * i));
  memcpy(b + 8, data, h);
  memcpy(b + 8 + h, nul + 1, d);
  return b;
}

/* Whether value i of t is infinite or NaN (decoded here), or for F64 rounds
 * beyond float32's range. */
static int value_bad(const attnd_st_tensor_t *t, int64_t i) {
  const uint8_t *p = t->data + (size_t)i * attnd_st_dtype_size(t->dtype);
  uint32_t u = 0;
  double d;
  switch (t->dtype) {
  case ATTND_ST_F16:
    return ((p[1] >> 2) & 0x1f) == 0x1f;
  case ATTND_ST_BF16:
    return ((p[1] & 0x7f) << 1 | p[0] >> 7) == 0xff;
  case ATTND_ST_F32:
    memcpy(&u, p, 4);
    return (u >> 23 & 0xff) == 0xff;
  default:
    memcpy(&d, p, 8);
    return !(d > -0x1.ffffffp127 && d < 0x1.ffffffp127);
  }
}

static void check_convert(const attnd_st_tensor_t *t) {
  size_t n = (size_t)t->elems;
  float *a = malloc(n ? n * sizeof(float) : 1);
  float *b = malloc(n ? n * sizeof(float) : 1);
  FUZZ_CHECK(a && b, "out of memory");
  int64_t bad = -1;
  int r = attnd_st_to_f32(t, a, &bad);
  if (t->dtype > ATTND_ST_BF16) {
    FUZZ_CHECK(r == -1, "'%s': %s converted (%d)", t->name,
               attnd_st_dtype_name(t->dtype), r);
    free(a), free(b);
    return;
  }
  /* the first bad value, found here */
  int64_t first = 0;
  while (first < t->elems && !value_bad(t, first))
    first++;
  if (first == t->elems) {
    FUZZ_CHECK(r == 0, "'%s': returned %d, bad %lld, with every value finite",
               t->name, r, (long long)bad);
    if (t->dtype == ATTND_ST_F32)
      FUZZ_CHECK(memcmp(a, t->data, t->bytes) == 0, "'%s': F32 not copied",
                 t->name);
    for (size_t i = 0; t->dtype == ATTND_ST_BF16 && i < n; i++) {
      uint32_t u, want = (uint32_t)(t->data[2 * i] | t->data[2 * i + 1] << 8)
                         << 16;
      memcpy(&u, &a[i], 4);
      FUZZ_CHECK(u == want, "'%s'[%zu]: BF16 0x%08x, want 0x%08x", t->name, i,
                 u, want);
    }
  } else {
    FUZZ_CHECK(r == -2 && bad == first,
               "'%s': returned %d, bad %lld, want %lld", t->name, r,
               (long long)bad, (long long)first);
  }
  if (t->dtype == ATTND_ST_F16 && r == 0) {
    attnd__half_force_scalar(1);
    int64_t bad2 = -1;
    int r2 = attnd_st_to_f32(t, b, &bad2);
    attnd__half_force_scalar(0);
    FUZZ_CHECK(r2 == 0 && memcmp(a, b, n * sizeof(float)) == 0,
               "'%s': F16 paths differ", t->name);
  }
  free(a), free(b);
}

static int span_cmp(const void *x, const void *y) {
  const attnd_st_tensor_t *const *a = x, *const *b = y;
  if ((*a)->data != (*b)->data)
    return (*a)->data < (*b)->data ? -1 : 1;
  return ((*a)->bytes > (*b)->bytes) - ((*a)->bytes < (*b)->bytes);
}

/* The properties of a parsed file f of the bytes buf[0..len). */
static void check_file(const attnd_st_file_t *f, const uint8_t *buf,
                       size_t len) {
  FUZZ_CHECK(8 + f->header_bytes + f->data_bytes == len,
             "header %zu + data %zu + 8 is not the file's %zu bytes",
             f->header_bytes, f->data_bytes, len);
  const uint8_t *data = buf + 8 + f->header_bytes;
  const attnd_st_tensor_t **by_place =
      malloc((f->n ? f->n : 1) * sizeof *by_place);
  FUZZ_CHECK(by_place != NULL, "out of memory");
  for (size_t i = 0; i < f->n; i++) {
    const attnd_st_tensor_t *t = &f->tensors[i];
    FUZZ_CHECK(t->name != NULL && strcmp(t->name, "__metadata__") != 0,
               "tensor %zu has no name, or __metadata__", i);
    FUZZ_CHECK(attnd_st_find(f, t->name) == t, "'%s' not found by name",
               t->name);
    FUZZ_CHECK((unsigned)t->dtype < ATTND_ST_N_DTYPES, "'%s': dtype %d",
               t->name, (int)t->dtype);
    FUZZ_CHECK(t->rank >= 0 && t->rank <= ATTND_ST_MAX_RANK, "'%s': rank %d",
               t->name, t->rank);
    int64_t elems = 1;
    int zero = 0;
    for (int d = 0; d < t->rank; d++) {
      FUZZ_CHECK(t->shape[d] >= 0, "'%s': shape[%d] = %lld", t->name, d,
                 (long long)t->shape[d]);
      zero |= t->shape[d] == 0;
    }
    for (int d = 0; !zero && d < t->rank; d++)
      FUZZ_CHECK(!__builtin_mul_overflow(elems, t->shape[d], &elems),
                 "'%s': the element count overflows", t->name);
    elems = zero ? 0 : elems;
    FUZZ_CHECK(t->elems == elems, "'%s': elems %lld, shape says %lld", t->name,
               (long long)t->elems, (long long)elems);
    FUZZ_CHECK((uint64_t)elems % 8 * attnd_st_dtype_bits(t->dtype) % 8 == 0 &&
                   t->bytes ==
                       (size_t)elems / 8 * attnd_st_dtype_bits(t->dtype) +
                           (size_t)elems % 8 * attnd_st_dtype_bits(t->dtype) /
                               8,
               "'%s': %zu bytes for %lld elements", t->name, t->bytes,
               (long long)elems);
    FUZZ_CHECK(t->data >= data && t->bytes <= f->data_bytes &&
                   (size_t)(t->data - data) <= f->data_bytes - t->bytes,
               "'%s': its data is outside the file's", t->name);
    by_place[i] = t;
  }
  /* sorted by place, the tensors tile the data */
  qsort(by_place, f->n, sizeof *by_place, span_cmp);
  size_t pos = 0;
  for (size_t i = 0; i < f->n; i++) {
    FUZZ_CHECK((size_t)(by_place[i]->data - data) == pos,
               "'%s' begins at %zu, the previous tensor ends at %zu",
               by_place[i]->name, (size_t)(by_place[i]->data - data), pos);
    pos += by_place[i]->bytes;
  }
  FUZZ_CHECK(pos == f->data_bytes, "the tensors end at %zu of %zu bytes", pos,
             f->data_bytes);
  free(by_place);
  for (size_t i = 0; i < f->n_meta; i++)
    FUZZ_CHECK(attnd_st_meta(f, f->meta_keys[i]) == f->meta_values[i],
               "metadata '%s' not found", f->meta_keys[i]);
  for (size_t i = 0; i < f->n; i++)
    check_convert(&f->tensors[i]);
}

/* f written again and read back is the same file. */
static void check_rewrite(const attnd_st_file_t *f) {
  attnd_st_out_t *ts = calloc(f->n ? f->n : 1, sizeof *ts);
  FUZZ_CHECK(ts != NULL, "out of memory");
  for (size_t i = 0; i < f->n; i++) {
    const attnd_st_tensor_t *t = &f->tensors[i];
    ts[i] = (attnd_st_out_t){t->name, t->dtype, t->rank, {0}, t->data};
    memcpy(ts[i].shape, t->shape, sizeof t->shape);
  }
  char msg[512] = "";
  FUZZ_CHECK(ftruncate(out_fd, 0) == 0, "ftruncate failed");
  FUZZ_CHECK(attnd_st_write(out_path, ts, f->n,
                            (const char *const *)f->meta_keys,
                            (const char *const *)f->meta_values, f->n_meta, msg,
                            sizeof msg) == 0,
             "what was read does not write: %s", msg);
  free(ts);
  off_t end = lseek(out_fd, 0, SEEK_END);
  FUZZ_CHECK(end > 0, "nothing written");
  uint8_t *back = malloc((size_t)end);
  FUZZ_CHECK(back && pread(out_fd, back, (size_t)end, 0) == end,
             "cannot read back");
  attnd_st_file_t g;
  FUZZ_CHECK(attnd_st_parse(back, (size_t)end, &g, msg, sizeof msg) == 0,
             "what was written does not read: %s", msg);
  FUZZ_CHECK(g.header_bytes % 8 == 0, "the header is not padded to 8 bytes");
  FUZZ_CHECK(g.n == f->n && g.n_meta == f->n_meta &&
                 g.data_bytes == f->data_bytes,
             "written again: %zu tensors, %zu metadata, %zu bytes; read: %zu, "
             "%zu, %zu",
             g.n, g.n_meta, g.data_bytes, f->n, f->n_meta, f->data_bytes);
  size_t pos = 0;
  for (size_t i = 0; i < f->n; i++) {
    const attnd_st_tensor_t *a = &f->tensors[i], *b = &g.tensors[i];
    FUZZ_CHECK(strcmp(a->name, b->name) == 0 && a->dtype == b->dtype &&
                   a->rank == b->rank &&
                   memcmp(a->shape, b->shape, sizeof(int64_t) * a->rank) == 0 &&
                   a->bytes == b->bytes &&
                   memcmp(a->data, b->data, a->bytes) == 0,
               "tensor %zu ('%s') differs written again", i, a->name);
    /* in the header's order, contiguous */
    FUZZ_CHECK(b->data == back + 8 + g.header_bytes + pos,
               "'%s' is not where the writer's order puts it", b->name);
    pos += b->bytes;
  }
  for (size_t i = 0; i < f->n_meta; i++)
    FUZZ_CHECK(strcmp(f->meta_keys[i], g.meta_keys[i]) == 0 &&
                   strcmp(f->meta_values[i], g.meta_values[i]) == 0,
               "metadata %zu ('%s') differs written again", i, f->meta_keys[i]);
  attnd_st_free(&g);
  free(back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  size_t len;
  uint8_t *buf = file_of(data, size, &len);
  attnd_st_file_t f;
  memset(&f, 0x5a, sizeof f);
  char msg[512];
  memset(msg, 0x5a, sizeof msg);
  int r = attnd_st_parse(buf, len, &f, msg, sizeof msg);
  if (r != 0) {
    FUZZ_CHECK(r == -1, "attnd_st_parse returned %d", r);
    FUZZ_CHECK(memchr(msg, '\0', sizeof msg) != NULL && msg[0] != '\0',
               "a failure without a message");
    FUZZ_CHECK(f.tensors == NULL && f.n == 0 && f.owned == NULL &&
                   f.n_meta == 0 && f.meta_keys == NULL,
               "a failure leaves *out filled: %s", msg);
    free(buf);
    return 0;
  }
  check_file(&f, buf, len);
  check_rewrite(&f);
  attnd_st_free(&f);
  free(buf);
  return 0;
}
