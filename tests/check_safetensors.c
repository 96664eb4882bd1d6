/* tests/check_safetensors.c: server/model/safetensors.c against the format
 * and against references written here.
 *
 * References: byte strings written by hand from the format's description
 * (the writer is checked byte for byte against them, not only against our
 * reader); an ldexp decode of F16, bit shifts for BF16, hexadecimal float
 * literals for F64's rounding, and a nearest-by-distance search in double
 * for rounding float32 to F16 and BF16.
 * Cases:
 *   - the writer's exact bytes (metadata and padding; escapes, UTF-8 and no
 *     padding; no tensor at all), and those bytes read back;
 *   - round trips through a file of every dtype, with shapes of rank 0 to
 *     8 and tensors of zero elements; the dtypes that do not convert;
 *   - headers of other writers (spaces, newlines, members in another order,
 *     an unpadded header and so unaligned data);
 *   - every malformed file, each with its exact message (those of jansson's
 *     own errors by their prefix), and a failed parse leaves *out empty;
 *   - the writer's refusals, and write errors (/dev/full);
 *   - attnd_st_map: a missing file, a directory, an empty file, a bad one;
 *   - conversion: all 65536 F16 values through both paths (scalar, F16C),
 *     all BF16 values, F32 bits, F64 rounding, the index of the first bad
 *     value at every lane and tail position;
 *   - float32 to F16 and BF16: every value back, every midpoint, random
 *     floats against the reference.
 * No timings are asserted. */
#include <check.h>
#include <dirent.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "codec/buf.h"
#include "codec/half.h"
#include "codec/util.h"
#include "model/safetensors.h"
#include "suite.h"
#include "testutil.h"

/* ck_assert* reports to the parent process on every call; the sweeps use
 * CHECK, which calls into Check only to fail. */
#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (!(cond))                                                               \
      ck_abort_msg(__VA_ARGS__);                                               \
  } while (0)

/* ---- helpers ------------------------------------------------------------- */

static char tmp_dir[64];

void test_setup(void) {
  snprintf(tmp_dir, sizeof tmp_dir, "/tmp/check_safetensors.XXXXXX");
  if (mkdtemp(tmp_dir) == NULL) {
    perror("mkdtemp");
    exit(1);
  }
}

int test_finish(int failed) {
  DIR *d = opendir(tmp_dir);
  struct dirent *e;
  char p[512];
  while (d && (e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.')
      continue;
    snprintf(p, sizeof p, "%s/%s", tmp_dir, e->d_name);
    if (rmdir(p) != 0)
      unlink(p);
  }
  if (d)
    closedir(d);
  rmdir(tmp_dir);
  return failed;
}

/* A path in the test's directory (a static buffer per call site's use). */
static const char *tpath(char *buf, size_t n, const char *name) {
  snprintf(buf, n, "%s/%s", tmp_dir, name);
  return buf;
}

static void put_file(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  ck_assert(f != NULL);
  ck_assert(fwrite(p, 1, n, f) == n);
  ck_assert(fclose(f) == 0);
}

/* A file's bytes: the 8-byte length field `n_field`, hlen bytes of header,
 * then `data` bytes 0, 1, 2, ... (mod 251). */
static uint8_t *raw(uint64_t n_field, const char *header, size_t hlen,
                    size_t data, size_t *len) {
  *len = 8 + hlen + data;
  uint8_t *b = malloc(*len + 1);
  for (int i = 0; i < 8; i++)
    b[i] = (uint8_t)(n_field >> (8 * i));
  memcpy(b + 8, header, hlen);
  for (size_t i = 0; i < data; i++)
    b[8 + hlen + i] = (uint8_t)(i % 251);
  return b;
}

static uint32_t fbits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static float bitsf(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* A tensor view of n values of `dt` at p, as the parser would make it. */
static attnd_st_tensor_t view(attnd_st_dtype_t dt, const void *p, size_t n) {
  attnd_st_tensor_t t = {.name = "t", .dtype = dt, .rank = 1};
  t.shape[0] = (int64_t)n;
  t.elems = (int64_t)n;
  t.data = p;
  t.bytes = n * attnd_st_dtype_size(dt);
  return t;
}

/* ---- the writer's exact bytes -------------------------------------------- */

/* From the format: length 144 (0x90) little-endian; the JSON, members in
 * order, __metadata__ first; 6 spaces to make 144 bytes; F32 1, 2; F16 1. */
static const char want_meta[] =
    "\x90\0\0\0\0\0\0\0"
    "{\"__metadata__\":{\"format\":\"pt\"},"
    "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
    "\"b\":{\"dtype\":\"F16\",\"shape\":[],\"data_offsets\":[8,10]}}"
    "      "
    "\x00\x00\x80\x3f\x00\x00\x00\x40"
    "\x00\x3c";

/* Length 64, already a multiple of 8: no padding. The name w"\é1 is
 * escaped ('"' and '\\') and its UTF-8 kept; BF16 1 and -2. */
static const char want_escaped[] =
    "\x40\0\0\0\0\0\0\0"
    "{\"w\\\"\\\\\xc3\xa9"
    "1\":{\"dtype\":\"BF16\",\"shape\":[1,2],\"data_offsets\":[0,4]}}"
    "\x80\x3f\x00\xc0";

/* No tensor: "{}" and 6 spaces. */
static const char want_empty[] = "\x08\0\0\0\0\0\0\0{}      ";

static void check_written(const char *name, const attnd_st_out_t *ts, size_t n,
                          const char *const *mk, const char *const *mv,
                          size_t n_meta, const char *want, size_t want_len) {
  char p[256], msg[256];
  tpath(p, sizeof p, name);
  ck_assert_msg(attnd_st_write(p, ts, n, mk, mv, n_meta, msg, sizeof msg) == 0,
                "%s", msg);
  size_t len;
  uint8_t *got = (uint8_t *)tu_read_file_or_fail(p, &len);
  ck_assert_uint_eq(len, want_len);
  for (size_t i = 0; i < len; i++)
    ck_assert_msg(got[i] == (uint8_t)want[i],
                  "%s: byte %zu is 0x%02x, want 0x%02x ('%c')", name, i, got[i],
                  (uint8_t)want[i], want[i]);
  free(got);
  /* and the spec's bytes read back */
  attnd_st_file_t f;
  ck_assert_msg(
      attnd_st_parse((const uint8_t *)want, want_len, &f, msg, sizeof msg) == 0,
      "%s", msg);
  ck_assert_uint_eq(f.n, n);
  ck_assert_uint_eq(f.n_meta, n_meta);
  attnd_st_free(&f);
}

START_TEST(test_exact_bytes) {
  float a[2] = {1, 2};
  uint16_t b = 0x3c00;
  attnd_st_out_t ts[2] = {{"a", ATTND_ST_F32, 1, {2}, a},
                          {"b", ATTND_ST_F16, 0, {0}, &b}};
  const char *mk[] = {"format"}, *mv[] = {"pt"};
  check_written("meta.safetensors", ts, 2, mk, mv, 1, want_meta,
                sizeof want_meta - 1);

  uint16_t w[2] = {attnd_bf16_from_f32(1), attnd_bf16_from_f32(-2)};
  attnd_st_out_t te = {"w\"\\\xc3\xa9"
                       "1",
                       ATTND_ST_BF16,
                       2,
                       {1, 2},
                       w};
  check_written("escaped.safetensors", &te, 1, NULL, NULL, 0, want_escaped,
                sizeof want_escaped - 1);

  check_written("empty.safetensors", NULL, 0, NULL, NULL, 0, want_empty,
                sizeof want_empty - 1);
}
END_TEST

/* ---- round trips --------------------------------------------------------- */

/* The F16 value of h, computed from the definition (not for inf/NaN). */
static double ref_f16(uint16_t h) {
  int e = h >> 10 & 31, m = h & 1023;
  double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
  return h & 0x8000 ? -v : v;
}

static const attnd_st_dtype_t convertible[] = {ATTND_ST_F64, ATTND_ST_F32,
                                               ATTND_ST_F16, ATTND_ST_BF16};

static const struct {
  int rank;
  int64_t shape[ATTND_ST_MAX_RANK];
} shapes[] = {{0, {0}},    {1, {0}},       {1, {5}},
              {2, {2, 3}}, {3, {2, 0, 3}}, {8, {1, 2, 1, 3, 1, 2, 1, 2}}};
#define N_SHAPES (sizeof shapes / sizeof shapes[0])

/* Every shape in one file of dtype convertible[_i], with metadata; mapped
 * back, each tensor's form, bytes and float32 values. */
START_TEST(test_round_trip) {
  attnd_st_dtype_t dt = convertible[_i];
  size_t sz = attnd_st_dtype_size(dt);
  attnd_st_out_t ts[N_SHAPES];
  char names[N_SHAPES][16];
  uint8_t *data[N_SHAPES];
  float *want[N_SHAPES];
  uint64_t seed = 42 + (uint64_t)_i;
  for (size_t s = 0; s < N_SHAPES; s++) {
    int64_t n = 1;
    for (int d = 0; d < shapes[s].rank; d++)
      n *= shapes[s].shape[d];
    data[s] = malloc((size_t)n * sz + 1);
    want[s] = malloc((size_t)n * sizeof(float) + 1);
    for (int64_t i = 0; i < n; i++) {
      /* a random float, then its value in dt: the file's value exactly */
      float x =
          (float)((double)(attnd_splitmix64(&seed) >> 11) * 0x1p-53 * 200.0 -
                  100.0);
      uint8_t *p = data[s] + (size_t)i * sz;
      if (dt == ATTND_ST_F64) {
        double d = x;
        memcpy(p, &d, 8);
      } else if (dt == ATTND_ST_F32) {
        memcpy(p, &x, 4);
      } else {
        uint16_t h =
            dt == ATTND_ST_F16 ? attnd_f16_from_f32(x) : attnd_bf16_from_f32(x);
        memcpy(p, &h, 2);
        x = dt == ATTND_ST_F16 ? (float)ref_f16(h) : bitsf((uint32_t)h << 16);
      }
      want[s][i] = x;
    }
    snprintf(names[s], sizeof names[s], "t%zu.weight", s);
    ts[s] = (attnd_st_out_t){names[s], dt, shapes[s].rank, {0}, data[s]};
    memcpy(ts[s].shape, shapes[s].shape, sizeof ts[s].shape);
  }
  const char *mk[] = {"format", "num_heads", "note"};
  const char *mv[] = {"pt", "4", "quote \" backslash \\ newline \n é"};
  char p[256], msg[256], file[32];
  snprintf(file, sizeof file, "rt_%s.safetensors", attnd_st_dtype_name(dt));
  tpath(p, sizeof p, file);
  ck_assert_msg(attnd_st_write(p, ts, N_SHAPES, mk, mv, 3, msg, sizeof msg) ==
                    0,
                "%s", msg);

  attnd_st_mapped_t m;
  ck_assert_msg(attnd_st_map(p, &m, msg, sizeof msg) == 0, "%s", msg);
  ck_assert_str_eq(msg, "");
  const attnd_st_file_t *f = &m.file;
  ck_assert_uint_eq(f->n, N_SHAPES);
  ck_assert_uint_eq(f->header_bytes % 8, 0);
  ck_assert_uint_eq(8 + f->header_bytes + f->data_bytes, m.len);
  ck_assert_uint_eq(f->n_meta, 3);
  for (size_t k = 0; k < 3; k++) {
    ck_assert_str_eq(f->meta_keys[k], mk[k]);
    ck_assert_str_eq(f->meta_values[k], mv[k]);
    ck_assert_str_eq(attnd_st_meta(f, mk[k]), mv[k]);
  }
  ck_assert_ptr_null(attnd_st_meta(f, "absent"));
  ck_assert_ptr_null(attnd_st_find(f, "__metadata__"));
  ck_assert_ptr_null(attnd_st_find(f, "t0"));
  size_t off = 0;
  for (size_t s = 0; s < N_SHAPES; s++) {
    const attnd_st_tensor_t *t = &f->tensors[s];
    ck_assert_str_eq(t->name, names[s]);
    ck_assert_ptr_eq(attnd_st_find(f, names[s]), t);
    ck_assert_int_eq(t->dtype, dt);
    ck_assert_int_eq(t->rank, shapes[s].rank);
    int64_t n = 1;
    for (int d = 0; d < t->rank; d++) {
      ck_assert_int_eq(t->shape[d], shapes[s].shape[d]);
      n *= shapes[s].shape[d];
    }
    ck_assert_int_eq(t->elems, n);
    ck_assert_uint_eq(t->bytes, (size_t)n * sz);
    /* contiguous, in the order written */
    ck_assert_ptr_eq(t->data, m.map + 8 + f->header_bytes + off);
    off += t->bytes;
    ck_assert_int_eq(memcmp(t->data, data[s], t->bytes), 0);
    float *got = malloc((size_t)n * sizeof(float) + 1);
    int64_t bad = -7;
    ck_assert_int_eq(attnd_st_to_f32(t, got, &bad), 0);
    ck_assert_int_eq(bad, -7);
    for (int64_t i = 0; i < n; i++)
      CHECK(fbits(got[i]) == fbits(want[s][i]), "%s[%lld]: %a, want %a",
            names[s], (long long)i, got[i], want[s][i]);
    free(got);
    free(data[s]);
    free(want[s]);
  }
  ck_assert_uint_eq(off, f->data_bytes);
  attnd_st_unmap(&m);
  ck_assert_ptr_null(m.map);
  attnd_st_unmap(&m); /* twice is harmless */
}
END_TEST

/* Every dtype that does not convert: its bytes round trip, to_f32 says -1. */
START_TEST(test_other_dtypes) {
  attnd_st_out_t ts[ATTND_ST_N_DTYPES];
  uint8_t bytes[ATTND_ST_N_DTYPES][24];
  char names[ATTND_ST_N_DTYPES][16];
  for (int d = 0; d < ATTND_ST_N_DTYPES; d++) {
    for (int i = 0; i < 24; i++)
      bytes[d][i] = (uint8_t)(d * 24 + i);
    snprintf(names[d], sizeof names[d], "%s", attnd_st_dtype_name(d));
    /* 24 bytes: 192 bits, whole for every dtype's width */
    int64_t n = 192 / attnd_st_dtype_bits(d);
    ts[d] = (attnd_st_out_t){names[d], d, 2, {1, n}, bytes[d]};
  }
  char p[256], msg[256];
  tpath(p, sizeof p, "dtypes.safetensors");
  ck_assert_msg(attnd_st_write(p, ts, ATTND_ST_N_DTYPES, NULL, NULL, 0, msg,
                               sizeof msg) == 0,
                "%s", msg);
  attnd_st_mapped_t m;
  ck_assert_msg(attnd_st_map(p, &m, msg, sizeof msg) == 0, "%s", msg);
  ck_assert_uint_eq(m.file.n, ATTND_ST_N_DTYPES);
  ck_assert_uint_eq(m.file.n_meta, 0);
  static const char *const spelt[] = {
      "F64",     "F32",     "F16", "BF16", "I64",     "I32",    "I16",
      "I8",      "U64",     "U32", "U16",  "U8",      "BOOL",   "F8_E4M3",
      "F8_E5M2", "F8_E8M0", "C64", "F4",   "F6_E2M3", "F6_E3M2"};
  static const unsigned bits[] = {64, 32, 16, 16, 64, 32, 16, 8, 64, 32,
                                  16, 8,  8,  8,  8,  8,  64, 4, 6,  6};
  ck_assert_uint_eq(sizeof bits / sizeof *bits, ATTND_ST_N_DTYPES);
  for (int d = 0; d < ATTND_ST_N_DTYPES; d++) {
    const attnd_st_tensor_t *t = &m.file.tensors[d];
    ck_assert_str_eq(attnd_st_dtype_name(d), spelt[d]);
    ck_assert_uint_eq(attnd_st_dtype_bits(d), bits[d]);
    ck_assert_uint_eq(attnd_st_dtype_size(d), bits[d] % 8 ? 0 : bits[d] / 8);
    ck_assert_int_eq(t->dtype, d);
    ck_assert_uint_eq(t->bytes, 24);
    ck_assert_int_eq(memcmp(t->data, bytes[d], 24), 0);
    float out[24];
    int64_t bad = -7;
    ck_assert_int_eq(attnd_st_to_f32(t, out, &bad),
                     d <= ATTND_ST_BF16 ? 0 : -1);
    ck_assert_int_eq(bad, -7);
  }
  attnd_st_unmap(&m);
}
END_TEST

/* Headers as other writers make them: spaces and newlines in the JSON,
 * members in another order, __metadata__ last, no padding (so the data is
 * unaligned), padding of spaces after the object. */
START_TEST(test_other_writers) {
  const char *h = "{\n  \"b\": {\"data_offsets\": [4, 6], \"shape\": [1], "
                  "\"dtype\": \"BF16\"},\n  \"a\" : { \"shape\" : [ ] , "
                  "\"dtype\" : \"F32\" , \"data_offsets\" : [ 0 , 4 ] } ,"
                  "\"__metadata__\": {}\n}   ";
  size_t len, hl = strlen(h);
  ck_assert_uint_ne(hl % 8, 0);
  uint8_t *b = raw(hl, h, hl, 6, &len);
  float x = -1.5f;
  memcpy(b + 8 + hl, &x, 4);
  b[8 + hl + 4] = 0x49, b[8 + hl + 5] = 0x40; /* BF16 0x4049: 3.140625 */
  attnd_st_file_t f;
  char msg[256];
  ck_assert_msg(attnd_st_parse(b, len, &f, msg, sizeof msg) == 0, "%s", msg);
  ck_assert_uint_eq(f.n, 2);
  ck_assert_uint_eq(f.n_meta, 0);
  ck_assert_uint_eq(f.header_bytes, hl);
  ck_assert_str_eq(f.tensors[0].name, "b");
  ck_assert_str_eq(f.tensors[1].name, "a");
  ck_assert_int_eq(f.tensors[1].rank, 0);
  ck_assert_int_eq(f.tensors[1].elems, 1);
  ck_assert_ptr_eq(f.tensors[0].data, b + 8 + hl + 4);
  float out[1];
  ck_assert_int_eq(attnd_st_to_f32(&f.tensors[1], out, NULL), 0);
  ck_assert(out[0] == -1.5f);
  ck_assert_int_eq(attnd_st_to_f32(&f.tensors[0], out, NULL), 0);
  ck_assert(out[0] == 3.140625f);
  attnd_st_free(&f);
  attnd_st_free(&f); /* twice is harmless */
  free(b);

  /* the header may fill the whole file: no tensor and no data */
  b = raw(2, "{}", 2, 0, &len);
  ck_assert_int_eq(attnd_st_parse(b, len, &f, msg, sizeof msg), 0);
  ck_assert_uint_eq(f.n, 0);
  ck_assert_uint_eq(f.data_bytes, 0);
  attnd_st_free(&f);
  free(b);

  /* a dimension of zero makes any other dimension harmless */
  h = "{\"z\":{\"dtype\":\"F64\",\"shape\":[0,9223372036854775807,"
      "9223372036854775807],\"data_offsets\":[0,0]}}";
  b = raw(strlen(h), h, strlen(h), 0, &len);
  ck_assert_msg(attnd_st_parse(b, len, &f, msg, sizeof msg) == 0, "%s", msg);
  ck_assert_int_eq(f.tensors[0].elems, 0);
  ck_assert_uint_eq(f.tensors[0].bytes, 0);
  attnd_st_free(&f);
  free(b);
}
END_TEST

/* ---- malformed files ----------------------------------------------------- */

/* Parses buf and wants failure with exactly `want` (or, when prefix, a
 * message that starts with it), and *out left empty. */
static void want_fail(const uint8_t *buf, size_t len, const char *want,
                      int prefix, const char *what) {
  attnd_st_file_t f;
  memset(&f, 0x5a, sizeof f);
  char msg[512] = "";
  int r = attnd_st_parse(buf, len, &f, msg, sizeof msg);
  ck_assert_msg(r == -1, "%s: parsed (%d), want \"%s\"", what, r, want);
  if (prefix)
    ck_assert_msg(strncmp(msg, want, strlen(want)) == 0,
                  "%s:\n got \"%s\"\nwant \"%s...\"", what, msg, want);
  else
    ck_assert_msg(strcmp(msg, want) == 0, "%s:\n got \"%s\"\nwant \"%s\"", what,
                  msg, want);
  ck_assert_ptr_null(f.tensors);
  ck_assert_ptr_null(f.owned);
  ck_assert_ptr_null(f.meta_keys);
  ck_assert_uint_eq(f.n, 0);
  ck_assert_uint_eq(f.n_meta, 0);
}

/* One tensor member, for the table below. */
#define T(name, dt, shape, offs)                                               \
  "\"" name "\":{\"dtype\":\"" dt "\",\"shape\":" shape                        \
  ",\"data_offsets\":" offs "}"

static const struct {
  const char *header; /* N is its length */
  size_t data;        /* bytes of data after it */
  const char *want;   /* whole; after "...JSON: ", jansson's text follows */
} bad_headers[] = {
    /* not an object */
    {"[1,2]", 0, "the header does not start with '{' (its first byte is 0x5b)"},
    {" {}", 0, "the header does not start with '{' (its first byte is 0x20)"},
    {"\"a\"", 0, "the header does not start with '{' (its first byte is 0x22)"},
    /* not JSON */
    {"{\"a\":", 0, "the header is not valid JSON: "},
    {"{\"a\":1,}", 0, "the header is not valid JSON: "},
    {"{\"\xff\":1}", 0, "the header is not valid JSON: "},
    {"{\"a\\u0000\":1}", 0, "the header is not valid JSON: "},
    /* duplicates, at the top and inside a tensor */
    {"{" T("a", "F32", "[1]", "[0,4]") "," T("a", "F32", "[1]", "[4,8]") "}", 8,
     "the header is not valid JSON: duplicate object key near '\"a\"'"},
    {"{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\"}}", 0,
     "the header is not valid JSON: duplicate object key"},
    /* after the object, only spaces */
    {"{}\n", 0,
     "byte 2 of the header (0x0a) follows its JSON object: only spaces may "
     "pad it"},
    {"{}  \t", 0,
     "byte 4 of the header (0x09) follows its JSON object: only spaces may "
     "pad it"},
    {"{}{}", 0,
     "byte 2 of the header (0x7b) follows its JSON object: only spaces may "
     "pad it"},
    {"{} x", 0,
     "byte 3 of the header (0x78) follows its JSON object: only spaces may "
     "pad it"},
    /* members of the wrong form */
    {"{\"a\":[1]}", 0,
     "tensor 'a': is an array, not an object {\"dtype\", \"shape\", "
     "\"data_offsets\"}"},
    {"{\"a\":null}", 0,
     "tensor 'a': is null, not an object {\"dtype\", \"shape\", "
     "\"data_offsets\"}"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4],\"x\":1}}",
     4, "tensor 'a': unknown member 'x'"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[]}}", 4,
     "tensor 'a': no \"data_offsets\" member"},
    {"{\"a\":{\"shape\":[],\"data_offsets\":[0,4]}}", 4,
     "tensor 'a': no \"dtype\" member"},
    {"{\"a\":{}}", 0, "tensor 'a': no \"dtype\" member"},
    /* dtype */
    {"{" T("a", "F128", "[1]", "[0,16]") "}", 16,
     "tensor 'a': unknown dtype 'F128'"},
    {"{" T("a", "f32", "[1]", "[0,4]") "}", 4,
     "tensor 'a': unknown dtype 'f32'"},
    {"{\"a\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
     "tensor 'a': dtype is an integer, not a string"},
    /* shape */
    {"{" T("a", "F32", "[2,-1]", "[0,4]") "}", 4,
     "tensor 'a': shape[1] is -1, negative"},
    {"{" T("a", "F32", "[2.5]", "[0,4]") "}", 4,
     "tensor 'a': shape[0] is a real number (2.5), not an integer"},
    {"{" T("a", "F32", "[2.0]", "[0,8]") "}", 8,
     "tensor 'a': shape[0] is a real number (2), not an integer"},
    {"{" T("a", "F32", "[\"2\"]", "[0,8]") "}", 8,
     "tensor 'a': shape[0] is a string, not an integer"},
    {"{" T("a", "F32", "[[2]]", "[0,8]") "}", 8,
     "tensor 'a': shape[0] is an array, not an integer"},
    {"{" T("a", "F32", "2", "[0,8]") "}", 8,
     "tensor 'a': shape is an integer, not an array"},
    {"{" T("a", "F32", "[1,1,1,1,1,1,1,1,1]", "[0,4]") "}", 4,
     "tensor 'a': shape has 9 dimensions, over 8"},
    {"{" T("a", "F32", "[4294967296,4294967296]", "[0,0]") "}", 0,
     "tensor 'a': shape [4294967296, 4294967296] has more than 2^63 - 1 "
     "elements"},
    {"{" T("a", "F32", "[2305843009213693952,2]", "[0,0]") "}", 0,
     "tensor 'a': F32 [2305843009213693952, 2] is more bytes than fit"},
    {"{" T("a", "F32", "[9223372036854775808]", "[0,0]") "}", 0,
     "the header is not valid JSON: "},
    /* data_offsets */
    {"{" T("a", "F32", "[1]", "[0]") "}", 4,
     "tensor 'a': data_offsets has 1 member, not 2 [begin, end]"},
    {"{" T("a", "F32", "[1]", "[0,4,4]") "}", 4,
     "tensor 'a': data_offsets has 3 members, not 2 [begin, end]"},
    {"{" T("a", "F32", "[1]", "{}") "}", 4,
     "tensor 'a': data_offsets is an object, not [begin, end]"},
    {"{" T("a", "F32", "[0]", "[8,4]") "}", 8,
     "tensor 'a': data_offsets [8, 4] end before they begin"},
    {"{" T("a", "F32", "[1]", "[-4,0]") "}", 4,
     "tensor 'a': data_offsets[0] is -4, negative"},
    {"{" T("a", "F32", "[1]", "[0,4.5]") "}", 4,
     "tensor 'a': data_offsets[1] is a real number (4.5), not an integer"},
    {"{" T("a", "F32", "[1]", "[0,true]") "}", 4,
     "tensor 'a': data_offsets[1] is true, not an integer"},
    /* size */
    {"{" T("a.weight", "F32", "[2,3]", "[0,12]") "}", 12,
     "tensor 'a.weight': data_offsets [0, 12] hold 12 bytes, but F32 [2, 3] "
     "needs 24"},
    {"{" T("s", "BF16", "[]", "[0,4]") "}", 4,
     "tensor 's': data_offsets [0, 4] hold 4 bytes, but BF16 [] needs 2"},
    {"{" T("z", "F16", "[3,0]", "[0,2]") "}", 2,
     "tensor 'z': data_offsets [0, 2] hold 2 bytes, but F16 [3, 0] needs 0"},
    /* bounds, overlaps, gaps */
    {"{" T("a", "F32", "[12]", "[0,48]") "}", 40,
     "tensor 'a': data_offsets [0, 48] end past the data, which is 40 bytes"},
    {"{" T("a", "I8", "[9223372036854775807]", "[0,9223372036854775807]") "}",
     0,
     "tensor 'a': data_offsets [0, 9223372036854775807] end past the data, "
     "which is 0 bytes"},
    {"{" T("a", "F32", "[4]", "[0,16]") "," T("b", "F32", "[4]", "[8,24]") "}",
     24, "tensors 'a' and 'b' overlap at bytes [8, 16)"},
    {"{" T("b", "F32", "[4]", "[8,24]") "," T("a", "F32", "[4]", "[0,16]") "}",
     24, "tensors 'a' and 'b' overlap at bytes [8, 16)"},
    {"{" T("a", "F32", "[4]", "[0,16]") "," T("b", "F32", "[4]", "[0,16]") "}",
     16, "tensors 'a' and 'b' overlap at bytes [0, 16)"},
    {"{" T("a", "F32", "[8]", "[0,32]") "," T("b", "F32", "[2]", "[8,16]") "}",
     32, "tensors 'a' and 'b' overlap at bytes [8, 16)"},
    {"{" T("a", "F32", "[4]", "[0,16]") "," T("z", "F32", "[0]", "[8,8]") "}",
     16,
     "tensor 'z' (0 bytes, at byte 8) lies inside tensor 'a' at bytes [0, "
     "16)"},
    {"{" T("a", "F32", "[6]", "[0,24]") "," T("b", "F32", "[2]", "[32,40]") "}",
     40, "a gap at bytes [24, 32) of the data, before tensor 'b'"},
    {"{" T("a", "F32", "[2]", "[8,16]") "}", 16,
     "a gap at bytes [0, 8) of the data, before tensor 'a'"},
    {"{" T("z", "F32", "[0]", "[8,8]") "}", 8,
     "a gap at bytes [0, 8) of the data, before tensor 'z'"},
    {"{" T("a", "F32", "[12]", "[0,48]") "}", 56,
     "the data ends at byte 48, but the file has 56 bytes of data (8 left "
     "over)"},
    {"{}", 8,
     "the data ends at byte 0, but the file has 8 bytes of data (8 left "
     "over)"},
    /* __metadata__ */
    {"{\"__metadata__\":{\"k\":1}}", 0,
     "__metadata__: 'k' is an integer, not a string"},
    {"{\"__metadata__\":{\"a\":\"x\",\"k\":{}}}", 0,
     "__metadata__: 'k' is an object, not a string"},
    {"{\"__metadata__\":[]}", 0,
     "__metadata__ is an array, not an object of strings"},
    {"{\"__metadata__\":null}", 0,
     "__metadata__ is null, not an object of strings"},
    {"{" T("a", "F32", "[1]", "[0,4]") ",\"__metadata__\":{\"k\":\"v\"},"
                                       "\"__metadata__\":{}}",
     4, "the header is not valid JSON: duplicate object key"},
};

/* Every row of bad_headers (one test: a fork per row would cost more than
 * all the rows). */
START_TEST(test_bad_headers) {
  for (size_t i = 0; i < sizeof bad_headers / sizeof bad_headers[0]; i++) {
    const char *h = bad_headers[i].header, *want = bad_headers[i].want;
    size_t len;
    uint8_t *b = raw(strlen(h), h, strlen(h), bad_headers[i].data, &len);
    char what[64];
    snprintf(what, sizeof what, "bad_headers[%zu]", i);
    want_fail(b, len, want, strstr(want, "JSON: ") != NULL, what);
    free(b);
  }
}
END_TEST

/* The format's dtypes that are not whole bytes or came later (F8_E8M0 and
 * C64 of 8 and 64 bits; F4 and F6 of 4 and 6 bits, packed): a file that
 * holds them beside the weights parses, each tensor's size the bits of
 * its elements / 8, and a count of sub-byte elements that ends inside a
 * byte is refused by name, as the format refuses it. */
START_TEST(test_packed_dtypes) {
  const char *h = "{" T("e8", "F8_E8M0", "[3]", "[0,3]") "," T(
      "c", "C64", "[2]",
      "[3,19]") "," T("f4", "F4", "[2,3]",
                      "[19,22]") "," T("e2", "F6_E2M3", "[4]",
                                       "[22,25]") "," T("e3", "F6_E3M2",
                                                        "[0,5]", "[25,25]") "}";
  size_t len;
  uint8_t *b = raw(strlen(h), h, strlen(h), 25, &len);
  attnd_st_file_t f;
  char msg[512];
  ck_assert_msg(attnd_st_parse(b, len, &f, msg, sizeof msg) == 0, "%s", msg);
  static const struct {
    const char *name;
    int64_t elems;
    size_t bytes;
  } want[] = {{"F8_E8M0", 3, 3},
              {"C64", 2, 16},
              {"F4", 6, 3},
              {"F6_E2M3", 4, 3},
              {"F6_E3M2", 0, 0}};
  ck_assert_uint_eq(f.n, 5);
  for (size_t i = 0; i < 5; i++) {
    const attnd_st_tensor_t *t = &f.tensors[i];
    ck_assert_str_eq(attnd_st_dtype_name(t->dtype), want[i].name);
    ck_assert_int_eq(t->elems, want[i].elems);
    ck_assert_uint_eq(t->bytes, want[i].bytes);
    float out[8];
    ck_assert_int_eq(attnd_st_to_f32(t, out, NULL), -1);
  }
  attnd_st_free(&f);
  free(b);

  h = "{" T("w", "F4", "[3]", "[0,2]") "}";
  b = raw(strlen(h), h, strlen(h), 2, &len);
  want_fail(b, len,
            "tensor 'w': F4 [3]: 3 elements of 4 bits do not end on a byte", 0,
            "F4 [3]");
  free(b);
  h = "{" T("w", "F6_E3M2", "[2,3]", "[0,5]") "}";
  b = raw(strlen(h), h, strlen(h), 5, &len);
  want_fail(b, len,
            "tensor 'w': F6_E3M2 [2, 3]: 6 elements of 6 bits do not end "
            "on a byte",
            0, "F6 [2, 3]");
  free(b);
}
END_TEST

/* Metadata of many keys is looked up by halving, not key by key: a layer
 * reads a dozen keys, so a file of L layers and M metadata keys cost
 * L * 12 * M comparisons (L = M = 6400, a header of 750 KB: 0.57 s; the
 * header may hold 100 MB). Counted, not timed: every key, and two that
 * are absent, each within log2(M) + 2 comparisons; and meta_keys keep
 * the header's order. */
START_TEST(test_meta_lookup_logarithmic) {
  enum { M = 4096 };
  attnd_buf_t h;
  attnd_buf_init(&h);
  attnd_buf_puts(&h, "{\"__metadata__\":{");
  for (size_t i = 0; i < M; i++) /* the keys out of order: 1031 is odd */
    attnd_buf_printf(&h, "%s\"k%05zu\":\"v%zu\"", i ? "," : "", i * 1031 % M,
                     i * 1031 % M);
  attnd_buf_puts(&h, "}}");
  size_t len;
  uint8_t *b = raw(h.len, h.data, h.len, 0, &len);
  attnd_st_file_t f;
  char msg[256];
  ck_assert_msg(attnd_st_parse(b, len, &f, msg, sizeof msg) == 0, "%s", msg);
  ck_assert_uint_eq(f.n_meta, M);
  ck_assert_str_eq(f.meta_keys[1], "k01031");
  uint64_t before = attnd__st_meta_compared;
  char key[16], want[16];
  for (size_t i = 0; i < M; i++) {
    snprintf(key, sizeof key, "k%05zu", i);
    snprintf(want, sizeof want, "v%zu", i);
    const char *v = attnd_st_meta(&f, key);
    ck_assert_msg(v && strcmp(v, want) == 0, "%s is %s", key, v ? v : "absent");
  }
  ck_assert_ptr_null(attnd_st_meta(&f, "k99999"));
  ck_assert_ptr_null(attnd_st_meta(&f, ""));
  uint64_t seen = attnd__st_meta_compared - before;
  ck_assert_msg(seen <= (M + 2) * 14, "%d lookups: %llu comparisons", M + 2,
                (unsigned long long)seen);
  attnd_st_free(&f);
  attnd_buf_free(&h);
  free(b);
}
END_TEST

/* The length field: shorter than 8 bytes, 0, past the file, over the
 * limit (faked: the file is small). */
START_TEST(test_bad_length) {
  uint8_t b[64] = {0};
  char want[128];
  for (size_t n = 0; n < 8; n++) {
    snprintf(want, sizeof want,
             "the file is %zu bytes, too short for the 8-byte header length",
             n);
    want_fail(b, n, want, 0, "short");
  }
  size_t len;
  uint8_t *r = raw(0, "", 0, 8, &len);
  want_fail(r, len, "header length 0: the file has no header", 0, "zero");
  free(r);
  r = raw(3, "{}\0", 3, 0, &len); /* N counts the NUL */
  want_fail(r, len,
            "byte 2 of the header (0x00) follows its JSON object: only spaces "
            "may pad it",
            0, "NUL");
  free(r);
  r = raw(999, "{}", 2, 30, &len);
  want_fail(r, len, "header length 999 is past the end of the file (40 bytes)",
            0, "past");
  free(r);
  r = raw(33, "{}", 2, 30, &len);
  want_fail(r, len, "header length 33 is past the end of the file (40 bytes)",
            0, "one past");
  free(r);
  r = raw(100000001, "{}", 2, 0, &len);
  want_fail(r, len,
            "header length 100000001 is over the limit of 100000000 bytes", 0,
            "over");
  free(r);
  r = raw(UINT64_MAX, "{}", 2, 0, &len);
  want_fail(r, len,
            "header length 18446744073709551615 is over the limit of "
            "100000000 bytes",
            0, "max");
  free(r);
  r = raw(100000000, "{}", 2, 0, &len);
  want_fail(r, len,
            "header length 100000000 is past the end of the file (10 bytes)", 0,
            "at the limit");
  free(r);
}
END_TEST

/* Messages fit any buffer: truncated and terminated, or none asked for. */
START_TEST(test_small_message) {
  size_t len;
  const char *h = "{" T("a.weight", "F32", "[2,3]", "[0,12]") "}";
  uint8_t *b = raw(strlen(h), h, strlen(h), 12, &len);
  attnd_st_file_t f;
  char msg[12];
  memset(msg, 'x', sizeof msg);
  ck_assert_int_eq(attnd_st_parse(b, len, &f, msg, 10), -1);
  ck_assert_str_eq(msg, "tensor 'a");
  ck_assert_int_eq(msg[11], 'x');
  ck_assert_int_eq(attnd_st_parse(b, len, &f, NULL, 0), -1);
  free(b);
}
END_TEST

/* ---- the writer's refusals ----------------------------------------------- */

START_TEST(test_write_errors) {
  char p[256], msg[512], want[512];
  tpath(p, sizeof p, "refused.safetensors");
  static float x[4];
  static const struct {
    attnd_st_out_t t;
    const char *why;
  } bad[] = {
      {{NULL, ATTND_ST_F32, 1, {1}, x}, "not a tensor name"},
      {{"__metadata__", ATTND_ST_F32, 1, {1}, x}, "not a tensor name"},
      {{"b", ATTND_ST_N_DTYPES, 1, {1}, x}, "an unknown dtype"},
      {{"b", ATTND_ST_F32, 9, {1}, x}, "a rank outside [0, 8]"},
      {{"b", ATTND_ST_F32, -1, {1}, x}, "a rank outside [0, 8]"},
      {{"b", ATTND_ST_F32, 2, {1, -2}, x}, "a negative dimension"},
      {{"b", ATTND_ST_F32, 2, {INT64_MAX, 2}, x}, "more bytes than fit"},
      {{"b", ATTND_ST_F4, 1, {3}, x},
       "elements whose bits do not end on a byte"},
      {{"b", ATTND_ST_F32, 1, {1}, NULL}, "no data"},
      {{"a", ATTND_ST_F32, 1, {1}, x}, "a duplicate name"},
      {{"b\xff", ATTND_ST_F32, 1, {1}, x}, "the name is not UTF-8"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    attnd_st_out_t ts[2] = {{"a", ATTND_ST_F32, 1, {4}, x}, bad[i].t};
    unlink(p);
    ck_assert_int_eq(attnd_st_write(p, ts, 2, NULL, NULL, 0, msg, sizeof msg),
                     -1);
    snprintf(want, sizeof want, "%s: tensor 1 ('%s'): %s", p,
             bad[i].t.name ? bad[i].t.name : "(null)", bad[i].why);
    ck_assert_str_eq(msg, want);
    ck_assert_int_ne(access(p, F_OK), 0); /* nothing written */
  }
  /* a zero-size tensor needs no data */
  attnd_st_out_t empty = {"e", ATTND_ST_F32, 2, {3, 0}, NULL};
  ck_assert_int_eq(attnd_st_write(p, &empty, 1, NULL, NULL, 0, msg, sizeof msg),
                   0);

  const char *k2[] = {"k", "k"}, *v2[] = {"1", "2"}, *kn[] = {"k", NULL};
  const char *vbad[] = {"1", "\xc3"};
  attnd_st_out_t one = {"a", ATTND_ST_F32, 1, {4}, x};
  ck_assert_int_eq(attnd_st_write(p, &one, 1, k2, v2, 2, msg, sizeof msg), -1);
  snprintf(want, sizeof want, "%s: metadata 1 ('k'): a duplicate key", p);
  ck_assert_str_eq(msg, want);
  ck_assert_int_eq(attnd_st_write(p, &one, 1, kn, v2, 2, msg, sizeof msg), -1);
  snprintf(want, sizeof want,
           "%s: metadata 1 ('(null)'): a key or value is "
           "NULL",
           p);
  ck_assert_str_eq(msg, want);
  ck_assert_int_eq(attnd_st_write(p, &one, 1, NULL, v2, 1, msg, sizeof msg),
                   -1);
  ck_assert_int_eq(attnd_st_write(p, &one, 1, kn, vbad, 2, msg, sizeof msg),
                   -1);
  const char *kk[] = {"k", "j"};
  ck_assert_int_eq(attnd_st_write(p, &one, 1, kk, vbad, 2, msg, sizeof msg),
                   -1);
  snprintf(want, sizeof want, "%s: metadata 1 ('j'): not UTF-8", p);
  ck_assert_str_eq(msg, want);

  /* the file system's errors */
  ck_assert_int_eq(attnd_st_write("/nonexistent/dir/x.safetensors", &one, 1,
                                  NULL, NULL, 0, msg, sizeof msg),
                   -1);
  ck_assert_str_eq(msg, "/nonexistent/dir/x.safetensors: cannot create: No "
                        "such file or directory");
  if (access("/dev/full", W_OK) == 0) {
    ck_assert_int_eq(
        attnd_st_write("/dev/full", &one, 1, NULL, NULL, 0, msg, sizeof msg),
        -1);
    ck_assert_str_eq(msg, "/dev/full: cannot write: No space left on device");
    ck_assert_int_eq(access("/dev/full", F_OK), 0); /* never unlinked */
  } else {
    fprintf(stderr, "check_safetensors: /dev/full not writable, skipped\n");
  }
}
END_TEST

/* ---- mapping ------------------------------------------------------------- */

START_TEST(test_map_errors) {
  char p[256], msg[512], want[600];
  attnd_st_mapped_t m;
  tpath(p, sizeof p, "absent.safetensors");
  ck_assert_int_eq(attnd_st_map(p, &m, msg, sizeof msg), -1);
  snprintf(want, sizeof want, "%s: cannot open: No such file or directory", p);
  ck_assert_str_eq(msg, want);
  ck_assert_ptr_null(m.map);

  ck_assert_int_eq(attnd_st_map(tmp_dir, &m, msg, sizeof msg), -1);
  snprintf(want, sizeof want, "%s: is a directory, not a file", tmp_dir);
  ck_assert_str_eq(msg, want);

  tpath(p, sizeof p, "zero.safetensors");
  put_file(p, "", 0);
  ck_assert_int_eq(attnd_st_map(p, &m, msg, sizeof msg), -1);
  snprintf(want, sizeof want, "%s: is empty (0 bytes), not a safetensors file",
           p);
  ck_assert_str_eq(msg, want);

  tpath(p, sizeof p, "gap.safetensors");
  size_t len;
  const char *h = "{" T("a", "F32", "[2]", "[8,16]") "}";
  uint8_t *b = raw(strlen(h), h, strlen(h), 16, &len);
  put_file(p, b, len);
  free(b);
  ck_assert_int_eq(attnd_st_map(p, &m, msg, sizeof msg), -1);
  snprintf(want, sizeof want,
           "%s: a gap at bytes [0, 8) of the data, before tensor 'a'", p);
  ck_assert_str_eq(msg, want);
  ck_assert_ptr_null(m.map);
  ck_assert_uint_eq(m.file.n, 0);
  attnd_st_unmap(&m); /* a failed map unmaps to nothing */

  /* a message buffer shorter than the path */
  char tiny[8];
  ck_assert_int_eq(attnd_st_map(p, &m, tiny, sizeof tiny), -1);
  ck_assert_uint_eq(strlen(tiny), 7);
  ck_assert_int_eq(attnd_st_map(p, &m, NULL, 0), -1);
}
END_TEST

/* ---- conversion ---------------------------------------------------------- */

/* All finite F16 values, unaligned, through both paths, against ref_f16. */
START_TEST(test_f16_all) {
  static uint8_t buf[2 * 65536 + 1];
  static float got[65536];
  size_t n = 0;
  for (uint32_t h = 0; h < 65536; h++)
    if ((h & 0x7c00) != 0x7c00) {
      buf[1 + 2 * n] = (uint8_t)h, buf[2 + 2 * n] = (uint8_t)(h >> 8);
      n++;
    }
  ck_assert_uint_eq(n, 65536 - 2048);
  attnd_st_tensor_t t = view(ATTND_ST_F16, buf + 1, n);
  for (int scalar = 0; scalar < 2; scalar++) {
    attnd__half_force_scalar(scalar);
    memset(got, 0xff, sizeof got);
    ck_assert_int_eq(attnd_st_to_f32(&t, got, NULL), 0);
    for (size_t i = 0; i < n; i++) {
      uint16_t h = (uint16_t)(buf[1 + 2 * i] | buf[2 + 2 * i] << 8);
      float want = (float)ref_f16(h);
      CHECK(fbits(got[i]) == fbits(want), "%s path: F16 0x%04x is %a, want %a",
            scalar ? "scalar" : "F16C", h, got[i], want);
    }
  }
  attnd__half_force_scalar(0);
}
END_TEST

/* Each infinite or NaN F16 (2048 of them), at every position of buffers of
 * 1 to 37 values (F16C's 8 lanes and the tail), gives -2 and its index,
 * through both paths; lengths 0 to 40 at both alignments agree with the
 * reference. */
START_TEST(test_f16_bad_and_tails) {
  uint8_t buf[2 * 41 + 1];
  float got[41];
  uint64_t seed = 7;
  for (int scalar = 0; scalar < 2; scalar++) {
    attnd__half_force_scalar(scalar);
    for (uint32_t k = 0; k < 2048; k++) {
      uint16_t h = (uint16_t)((k & 0x400 ? 0x8000 : 0) | 0x7c00 | (k & 0x3ff));
      size_t n = 1 + k % 37, at = (k / 37) % n;
      for (size_t i = 0; i < n; i++) {
        uint16_t v = i == at ? h : (uint16_t)(0x3c00 + i);
        if (i > at && i % 3 == 0)
          v = h; /* later bad values do not hide the first */
        buf[1 + 2 * i] = (uint8_t)v, buf[2 + 2 * i] = (uint8_t)(v >> 8);
      }
      attnd_st_tensor_t t = view(ATTND_ST_F16, buf + 1, n);
      int64_t bad = -1;
      CHECK(attnd_st_to_f32(&t, got, &bad) == -2 && bad == (int64_t)at,
            "%s path: F16 0x%04x at %zu of %zu: bad %lld",
            scalar ? "scalar" : "F16C", h, at, n, (long long)bad);
    }
    for (size_t n = 0; n <= 40; n++)
      for (int a = 0; a < 2; a++) {
        for (size_t i = 0; i < n; i++) {
          uint16_t v = (uint16_t)attnd_splitmix64(&seed);
          v &= (v & 0x7c00) == 0x7c00 ? 0xbfff : 0xffff;
          buf[a + 2 * i] = (uint8_t)v, buf[a + 1 + 2 * i] = (uint8_t)(v >> 8);
        }
        attnd_st_tensor_t t = view(ATTND_ST_F16, buf + a, n);
        ck_assert_int_eq(attnd_st_to_f32(&t, got, NULL), 0);
        for (size_t i = 0; i < n; i++) {
          uint16_t v = (uint16_t)(buf[a + 2 * i] | buf[a + 1 + 2 * i] << 8);
          CHECK(fbits(got[i]) == fbits((float)ref_f16(v)),
                "n %zu, F16 0x%04x: %a", n, v, got[i]);
        }
      }
  }
  attnd__half_force_scalar(0);
}
END_TEST

/* All BF16 values: the finite ones are their bits shifted, the others -2
 * with their index. */
START_TEST(test_bf16_all) {
  static uint8_t buf[2 * 65536 + 1];
  static float got[65536];
  for (uint32_t h = 0; h < 65536; h++)
    buf[1 + 2 * h] = (uint8_t)h, buf[2 + 2 * h] = (uint8_t)(h >> 8);
  /* the finite ones, in runs between the non-finite ones */
  for (uint32_t lo = 0; lo < 65536;) {
    uint32_t hi = lo;
    while (hi < 65536 && (hi & 0x7f80) != 0x7f80)
      hi++;
    attnd_st_tensor_t t = view(ATTND_ST_BF16, buf + 1 + 2 * lo, hi - lo);
    ck_assert_int_eq(attnd_st_to_f32(&t, got, NULL), 0);
    for (uint32_t h = lo; h < hi; h++)
      CHECK(fbits(got[h - lo]) == h << 16, "BF16 0x%04x: %a", h, got[h - lo]);
    lo = hi;
    while (lo < 65536 && (lo & 0x7f80) == 0x7f80)
      lo++;
  }
  /* each non-finite one, among finite ones, at a position of 0 to 5 */
  for (uint32_t k = 0; k < 512; k++) {
    uint16_t h = (uint16_t)((k & 0x100 ? 0x8000 : 0) | 0x7f80 | (k & 0xff));
    uint16_t v[6] = {0x3f80, 0x4000, 0x0001, 0xc040, 0x3f80, h};
    size_t at = k % 6;
    v[at] = h;
    memcpy(buf + 1, v, sizeof v);
    attnd_st_tensor_t t = view(ATTND_ST_BF16, buf + 1, 6);
    int64_t bad = -1;
    CHECK(attnd_st_to_f32(&t, got, &bad) == -2 && bad == (int64_t)at,
          "BF16 0x%04x at %zu: bad %lld", h, at, (long long)bad);
  }
}
END_TEST

/* F32: the bits themselves (subnormals, -0), at any alignment; inf and NaN
 * give -2 at their index. */
START_TEST(test_f32) {
  enum { N = 1000 };
  uint8_t buf[4 * N + 3];
  uint32_t want[N];
  float got[N];
  uint64_t seed = 3;
  for (size_t i = 0; i < N; i++) {
    uint32_t u = (uint32_t)attnd_splitmix64(&seed);
    if (i % 7 == 0)
      u &= 0x807fffff; /* subnormal or zero */
    if ((u & 0x7f800000) == 0x7f800000)
      u ^= 0x40000000;
    want[i] = i == 5 ? 0x80000000 : u;
  }
  for (int a = 0; a < 4; a++) {
    memcpy(buf + a, want, sizeof want);
    attnd_st_tensor_t t = view(ATTND_ST_F32, buf + a, N);
    ck_assert_int_eq(attnd_st_to_f32(&t, got, NULL), 0);
    ck_assert_int_eq(memcmp(got, want, sizeof want), 0);
  }
  static const uint32_t specials[] = {0x7f800000, 0xff800000, 0x7fc00000,
                                      0x7f800001, 0xffffffff};
  for (size_t s = 0; s < 5; s++)
    for (size_t at = 0; at < 40; at += 13) {
      uint32_t v[40];
      memcpy(v, want, sizeof v);
      v[at] = specials[s];
      v[39] = specials[s];
      memcpy(buf + 1, v, sizeof v);
      attnd_st_tensor_t t = view(ATTND_ST_F32, buf + 1, 40);
      int64_t bad = -1;
      ck_assert_int_eq(attnd_st_to_f32(&t, got, &bad), -2);
      ck_assert_int_eq(bad, (int64_t)at);
    }
}
END_TEST

/* F64: rounded to nearest, ties to even; what rounds past FLT_MAX, inf and
 * NaN give -2. */
START_TEST(test_f64) {
  static const struct {
    double in;
    float want;
  } ok[] = {
      {1.0, 1.0f},
      {-0.0, -0.0f},
      {0.1, 0x1.99999ap-4f},
      {1 + 0x1p-24, 1.0f},                      /* tie: to even */
      {1 + 0x3p-24, 1 + 0x1p-22f},              /* tie: to even, up */
      {1 + 0x1p-24 + 0x1p-50, 1 + 0x1p-23f},    /* above the tie */
      {0x1.fffffep127, 0x1.fffffep127f},        /* FLT_MAX */
      {0x1.fffffefffffffp127, 0x1.fffffep127f}, /* below the midpoint */
      {-0x1.fffffefffffffp127, -0x1.fffffep127f},
      {0x1p-149, 0x1p-149f},   /* the least subnormal */
      {0x1.8p-149, 0x1p-148f}, /* tie: to even */
      {0x1p-150, 0.0f},        /* tie: to even, zero */
      {0x1.0000000000001p-150, 0x1p-149f},
      {-1e-50, -0.0f},
      {1e300 * 1e-300, 1.0f},
  };
  size_t n_ok = sizeof ok / sizeof ok[0];
  uint8_t buf[8 * 16 + 1];
  float got[16];
  for (size_t i = 0; i < n_ok; i++)
    memcpy(buf + 1 + 8 * i, &ok[i].in, 8);
  attnd_st_tensor_t t = view(ATTND_ST_F64, buf + 1, n_ok);
  ck_assert_int_eq(attnd_st_to_f32(&t, got, NULL), 0);
  for (size_t i = 0; i < n_ok; i++)
    ck_assert_msg(fbits(got[i]) == fbits(ok[i].want), "F64 %a: %a, want %a",
                  ok[i].in, got[i], ok[i].want);

  static const double bad[] = {0x1.ffffffp127, -0x1.ffffffp127, 1e39, -1e300,
                               INFINITY,       -INFINITY,       NAN};
  for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
    memcpy(buf + 1 + 8 * 3, &bad[b], 8);
    int64_t at = -1;
    ck_assert_int_eq(attnd_st_to_f32(&t, got, &at), -2);
    ck_assert_int_eq(at, 3);
    memcpy(buf + 1 + 8 * 3, &ok[3].in, 8);
  }
}
END_TEST

/* ---- float32 to F16 and BF16 --------------------------------------------- */

/* The 16-bit value nearest to x among lo and lo + 1 (both of x's sign, of
 * values vlo and vhi), ties to the even one: by distance, in double. */
static uint16_t nearest(float x, uint16_t lo, double vlo, double vhi) {
  double a = fabs((double)x), dlo = a - fabs(vlo), dhi = fabs(vhi) - a;
  if (dlo != dhi)
    return dlo < dhi ? lo : (uint16_t)(lo + 1);
  return lo & 1 ? (uint16_t)(lo + 1) : lo;
}

/* Every finite F16 value comes back; every midpoint between neighbours
 * rounds to the even one, and a float either side of it to the nearer;
 * overflow, inf and NaN. */
START_TEST(test_f16_from_f32) {
  for (uint32_t h = 0; h < 65536; h++) {
    if ((h & 0x7c00) == 0x7c00)
      continue;
    float x = (float)ref_f16((uint16_t)h);
    CHECK(attnd_f16_from_f32(x) == h, "%a: 0x%04x, want 0x%04x", x,
          attnd_f16_from_f32(x), h);
    if ((h & 0x7fff) == 0x7bff)
      continue;
    /* the midpoint to the next value away from zero: exact in float */
    double v0 = ref_f16((uint16_t)h), v1 = ref_f16((uint16_t)(h + 1));
    float mid = (float)((v0 + v1) / 2);
    CHECK((double)mid == (v0 + v1) / 2, "midpoint of 0x%04x not exact", h);
    uint16_t even = h & 1 ? (uint16_t)(h + 1) : (uint16_t)h;
    CHECK(attnd_f16_from_f32(mid) == even, "%a: 0x%04x, want 0x%04x", mid,
          attnd_f16_from_f32(mid), even);
    float below = nextafterf(mid, 0), above = nextafterf(mid, 2 * mid);
    CHECK(attnd_f16_from_f32(below) == h, "%a: 0x%04x", below,
          attnd_f16_from_f32(below));
    CHECK(attnd_f16_from_f32(above) == h + 1, "%a: 0x%04x", above,
          attnd_f16_from_f32(above));
  }
  ck_assert_uint_eq(attnd_f16_from_f32(65519.99f), 0x7bff);
  ck_assert_uint_eq(attnd_f16_from_f32(65520.0f), 0x7c00);
  ck_assert_uint_eq(attnd_f16_from_f32(-1e10f), 0xfc00);
  ck_assert_uint_eq(attnd_f16_from_f32(INFINITY), 0x7c00);
  ck_assert_uint_eq(attnd_f16_from_f32(-INFINITY), 0xfc00);
  ck_assert_uint_eq(attnd_f16_from_f32(0x1p-25f), 0x0000); /* tie: even */
  ck_assert_uint_eq(attnd_f16_from_f32(-0x1.000002p-25f), 0x8001);
  ck_assert_uint_eq(attnd_f16_from_f32(0x1p-149f), 0x0000);
  ck_assert_uint_eq(attnd_f16_from_f32(FLT_MIN), 0x0000);
  uint16_t nan = attnd_f16_from_f32(NAN);
  ck_assert((nan & 0x7c00) == 0x7c00 && (nan & 0x3ff) != 0);
  nan = attnd_f16_from_f32(bitsf(0xff800001)); /* a signalling NaN */
  ck_assert((nan & 0xfc00) == 0xfc00 && (nan & 0x3ff) != 0);
}
END_TEST

/* Every finite BF16 value comes back; random floats and the midpoints
 * round as the reference does; overflow, inf and NaN. */
START_TEST(test_bf16_from_f32) {
  for (uint32_t h = 0; h < 65536; h++)
    if ((h & 0x7f80) != 0x7f80)
      CHECK(attnd_bf16_from_f32(bitsf(h << 16)) == h, "BF16 0x%04x", h);
  uint64_t seed = 11;
  for (int i = 0; i < 200000; i++) {
    uint32_t u = (uint32_t)attnd_splitmix64(&seed);
    if (i % 4 == 0)
      u = (u & 0xffff0000) | 0x8000; /* a midpoint */
    if ((u & 0x7f800000) == 0x7f800000)
      continue;
    float x = bitsf(u);
    uint16_t lo = (uint16_t)(u >> 16);
    double vhi = (lo & 0x7fff) == 0x7f7f
                     ? ldexp(1, 128)
                     : (double)bitsf((uint32_t)(lo + 1) << 16);
    uint16_t want = nearest(x, lo, (double)bitsf((uint32_t)lo << 16), vhi);
    CHECK(attnd_bf16_from_f32(x) == want, "%a: 0x%04x, want 0x%04x", x,
          attnd_bf16_from_f32(x), want);
  }
  ck_assert_uint_eq(attnd_bf16_from_f32(FLT_MAX), 0x7f80);
  ck_assert_uint_eq(attnd_bf16_from_f32(-FLT_MAX), 0xff80);
  ck_assert_uint_eq(attnd_bf16_from_f32(INFINITY), 0x7f80);
  ck_assert_uint_eq(attnd_bf16_from_f32(1.0f), 0x3f80);
  ck_assert_uint_eq(attnd_bf16_from_f32(-0.0f), 0x8000);
  uint16_t nan = attnd_bf16_from_f32(bitsf(0x7f800001));
  ck_assert((nan & 0x7f80) == 0x7f80 && (nan & 0x7f) != 0);
}
END_TEST

/* The tensor forms (codec/half.c): rounding in place and packing, F16 by
 * F16C and by the scalar path, BF16, over lengths 0 to 40 (F16C's 8 lanes
 * and the tail), agree with the scalar conversions element by element;
 * rounding twice changes nothing; the first value that overflows is the
 * one named. */
START_TEST(test_dtype_tensors) {
  static const attnd_dtype_t types[] = {ATTND_DTYPE_F16, ATTND_DTYPE_BF16};
  uint64_t seed = 5 + (uint64_t)_i;
  float x[40], y[40];
  uint16_t packed[40];
  for (int scalar = 0; scalar < 2; scalar++) {
    attnd__half_force_scalar(scalar);
    for (int ti = 0; ti < 2; ti++) {
      attnd_dtype_t t = types[ti];
      for (size_t n = 0; n <= 40; n++) {
        int64_t first_inf = -1;
        for (size_t i = 0; i < n; i++) {
          uint64_t r = attnd_splitmix64(&seed);
          /* exponents around F16's whole range, and some beyond it */
          x[i] = ldexpf((float)(r >> 40) / 0x1p24f, (int)(r % 48) - 30);
          if (r & 0x100)
            x[i] = -x[i];
          uint16_t h = t == ATTND_DTYPE_F16 ? attnd_f16_from_f32(x[i])
                                            : attnd_bf16_from_f32(x[i]);
          y[i] =
              t == ATTND_DTYPE_F16 ? attnd_f16_to_f32(h) : attnd_bf16_to_f32(h);
          if (first_inf < 0 && isinf(y[i]))
            first_inf = (int64_t)i;
        }
        attnd_dtype_pack(t, x, n, packed);
        for (size_t i = 0; i < n; i++) {
          uint16_t h = t == ATTND_DTYPE_F16 ? attnd_f16_from_f32(x[i])
                                            : attnd_bf16_from_f32(x[i]);
          CHECK(packed[i] == h,
                "%s %s pack n %zu [%zu] %a: 0x%04x, want 0x%04x",
                scalar ? "scalar" : "vector", ti ? "BF16" : "F16", n, i, x[i],
                packed[i], h);
        }
        int64_t got = attnd_dtype_round(t, x, n);
        CHECK(got == first_inf, "%s n %zu: first infinity %lld, want %lld",
              ti ? "BF16" : "F16", n, (long long)got, (long long)first_inf);
        for (size_t i = 0; i < n; i++)
          CHECK(memcmp(&x[i], &y[i], 4) == 0,
                "%s %s round n %zu [%zu]: %a, want %a",
                scalar ? "scalar" : "vector", ti ? "BF16" : "F16", n, i, x[i],
                y[i]);
        CHECK(attnd_dtype_round(t, x, n) == first_inf &&
                  memcmp(x, y, n * 4) == 0,
              "rounding twice changed n %zu", n);
      }
    }
  }
  attnd__half_force_scalar(0);
  float f[3] = {1.5f, -0.0f, FLT_MAX};
  ck_assert_int_eq(attnd_dtype_round(ATTND_DTYPE_F32, f, 3), -1);
  ck_assert(f[0] == 1.5f && f[2] == FLT_MAX);
  ck_assert_int_eq(attnd_dtype_round(ATTND_DTYPE_BF16, f, 3), 2);
}
END_TEST

Suite *test_suite(void) {
  Suite *s = suite_create("safetensors");
  TCase *tc = tcase_create("writer");
  tcase_add_test(tc, test_exact_bytes);
  tcase_add_loop_test(tc, test_round_trip, 0,
                      sizeof convertible / sizeof convertible[0]);
  tcase_add_test(tc, test_other_dtypes);
  tcase_add_test(tc, test_write_errors);
  suite_add_tcase(s, tc);

  tc = tcase_create("reader");
  tcase_add_test(tc, test_other_writers);
  tcase_add_test(tc, test_bad_headers);
  tcase_add_test(tc, test_packed_dtypes);
  tcase_add_test(tc, test_meta_lookup_logarithmic);
  tcase_add_test(tc, test_bad_length);
  tcase_add_test(tc, test_small_message);
  tcase_add_test(tc, test_map_errors);
  suite_add_tcase(s, tc);

  tc = tcase_create("convert");
  tcase_add_test(tc, test_f16_all);
  tcase_add_test(tc, test_f16_bad_and_tails);
  tcase_add_test(tc, test_bf16_all);
  tcase_add_test(tc, test_f32);
  tcase_add_test(tc, test_f64);
  tcase_add_test(tc, test_f16_from_f32);
  tcase_add_test(tc, test_bf16_from_f32);
  tcase_add_loop_test(tc, test_dtype_tensors, 0, 4);
  suite_add_tcase(s, tc);
  return s;
}
