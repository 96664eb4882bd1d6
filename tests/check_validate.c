/* tests/check_validate.c: attn_plan_init and attn_forward reject bad input.
 *
 * Data-driven, in the style of jansson's test/suites/invalid: each row of
 * `bad_params` applies up to three edits to one valid base problem and names
 * the exact result expected: the return code, err.code, err.field, and
 * substrings of err.message (the field name is always required; most rows
 * also require the offending shape, printed "[d0, d1, d2]").
 *
 * The base problem, with every dimension distinct so a message cannot name
 * the wrong one by accident:
 *   query [2, 6, 16]  key [2, 7, 12]  value [2, 7, 10]   H = 4, Hkv = 2
 *   q_weight [16, 16] (Dh 4)  k_weight [8, 12]  v_weight [6, 10] (Dv 3)
 *   o_weight [5, 12]  q_bias [16]  k_bias [8]  v_bias [6]  o_bias [5]
 * Every tensor's data points at a zeroed buffer of POOL elements, so a core
 * that reads before it checks still reads inside memory. */
#include <check.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attn.h"
#include "suite.h"
#include "testutil.h"

#define POOL 4096

/* Zeroed backing store, one per tensor field (float, int64 or uint8 all
 * read 0 from zero bytes). */
static double pool_query[POOL], pool_key[POOL], pool_value[POOL];
static double pool_qw[POOL], pool_kw[POOL], pool_vw[POOL], pool_ow[POOL];
static double pool_qb[POOL], pool_kb[POOL], pool_vb[POOL], pool_ob[POOL];
static double pool_allow[POOL], pool_bias[POOL], pool_norm[POOL];
static int64_t lengths[POOL];
static float slopes[POOL];

static attn_params_t base;
static attn_exec_t base_exec;

/* The valid base problem described at the top. */
static void setup_base(void) {
  memset(&base, 0, sizeof base);
  memset(lengths, 0, sizeof lengths);
  lengths[0] = 7;
  lengths[1] = 3;
  for (int h = 0; h < 8; h++)
    slopes[h] = 1.0f / (float)(2 << h);
  base.query = tu_t3(pool_query, 2, 6, 16);
  base.key = tu_t3(pool_key, 2, 7, 12);
  base.value = tu_t3(pool_value, 2, 7, 10);
  base.num_heads = 4;
  base.num_kv_heads = 2;
  base.q_weight = tu_t2(pool_qw, 16, 16);
  base.k_weight = tu_t2(pool_kw, 8, 12);
  base.v_weight = tu_t2(pool_vw, 6, 10);
  base.o_weight = tu_t2(pool_ow, 5, 12);
  base.q_bias = tu_t1(pool_qb, 16);
  base.k_bias = tu_t1(pool_kb, 8);
  base.v_bias = tu_t1(pool_vb, 6);
  base.o_bias = tu_t1(pool_ob, 5);
  /* absent (rank 0) but with data, so that an edit need only set a shape */
  base.key_lengths.data = lengths;
  base.allow.data = pool_allow;
  base.bias.data = pool_bias;
  base.alibi_slopes.data = slopes;
  base.q_norm.data = base.k_norm.data = pool_norm;
  base_exec = (attn_exec_t){.threads = 1, .isa = ATTN_ISA_AUTO};
}

static void teardown_base(void) {}

/* ---- the table ----------------------------------------------------------- */

typedef enum {
  E_END = 0,  /* no edit */
  E_TENSOR,   /* the tensor at `off`: rank and dims as given (data kept) */
  E_ABSENT,   /* the tensor at `off`: rank 0 */
  E_NULLDATA, /* the tensor at `off`: data NULL */
  E_I64,      /* the int64_t at `off` = v */
  E_FLAG,     /* the int at `off` = v */
  E_FLOAT,    /* the float at `off` = v */
  E_CAUSAL,   /* causal = (int)v */
  E_ALIBI,    /* alibi = (int)v */
  E_LENGTH1,  /* key_lengths[1] = v */
  E_SLOPE2,   /* alibi_slopes[2] = v */
  E_THREADS,  /* exec.threads = v */
  E_ISA       /* exec.isa = v */
} edit_kind_t;

typedef struct edit {
  edit_kind_t kind;
  size_t off;
  int rank;
  int64_t dim[4];
  double v;
} edit_t;

typedef struct bad_row {
  const char *name;
  edit_t edit[3];
  int code;
  const char *field;
  const char *sub[3]; /* besides the field name */
} bad_row_t;

#define F(member) offsetof(attn_params_t, member)
#define T(member, r, ...)                                                      \
  {                                                                            \
    .kind = E_TENSOR, .off = F(member), .rank = r, .dim = { __VA_ARGS__ }      \
  }
#define ABSENT(member)                                                         \
  { .kind = E_ABSENT, .off = F(member) }
#define I64(member, x)                                                         \
  { .kind = E_I64, .off = F(member), .v = (x) }
#define FLAG(member, x)                                                        \
  { .kind = E_FLAG, .off = F(member), .v = (x) }
#define FLT(member, x)                                                         \
  { .kind = E_FLOAT, .off = F(member), .v = (x) }

#define NULLDATA(member)                                                       \
  { .kind = E_NULLDATA, .off = F(member) }
#define CAUSAL(x)                                                              \
  { .kind = E_CAUSAL, .v = (x) }
#define ALIBI(x)                                                               \
  { .kind = E_ALIBI, .v = (x) }
#define LEN1(x)                                                                \
  { .kind = E_LENGTH1, .v = (x) }
#define SLOPE2(x)                                                              \
  { .kind = E_SLOPE2, .v = (x) }
#define THREADS(x)                                                             \
  { .kind = E_THREADS, .v = (x) }

/* clang-format off */
static const bad_row_t bad_params[] = {
    /* query */
    {"query absent", {ABSENT(query)}, ATTN_EINVAL, "query", {0}},
    {"query data NULL",
     {NULLDATA(query)}, ATTN_EINVAL, "query", {0}},
    {"query rank 1", {T(query, 1, 16)}, ATTN_ERANK, "query", {"[16]"}},
    {"query rank 4",
     {T(query, 4, 1, 2, 6, 16)}, ATTN_ERANK, "query", {"[1, 2, 6, 16]"}},
    {"query zero length",
     {T(query, 3, 2, 0, 16)}, ATTN_ESHAPE, "query", {"[2, 0, 16]"}},
    {"query negative width",
     {T(query, 3, 2, 6, -16)}, ATTN_ESHAPE, "query", {"[2, 6, -16]"}},
    {"query zero batch",
     {T(query, 3, 0, 6, 16)}, ATTN_ESHAPE, "query", {"[0, 6, 16]"}},
    /* key and value against query */
    {"key rank 2 with query rank 3",
     {T(key, 2, 7, 12)}, ATTN_ERANK, "key", {"[7, 12]"}},
    {"key batch 3 with query batch 2",
     {T(key, 3, 3, 7, 12)}, ATTN_ESHAPE, "key", {"[3, 7, 12]", "[2, 6, 16]"}},
    {"key zero rows",
     {T(key, 3, 2, 0, 12)}, ATTN_ESHAPE, "key", {"[2, 0, 12]"}},
    {"value rows != key rows",
     {T(value, 3, 2, 5, 10)}, ATTN_ESHAPE, "value", {"[2, 5, 10]", "7"}},
    {"value rank 2 with query rank 3",
     {T(value, 2, 7, 10)}, ATTN_ERANK, "value", {"[7, 10]"}},
    {"value batch 3",
     {T(value, 3, 3, 7, 10)}, ATTN_ESHAPE, "value", {"[3, 7, 10]"}},
    {"key absent (= query, 6 rows), value 7 rows",
     {ABSENT(key), T(k_weight, 2, 8, 16)},
     ATTN_ESHAPE, "value", {"[2, 7, 10]"}},
    /* heads */
    {"num_heads 0", {I64(num_heads, 0)}, ATTN_EINVAL, "num_heads", {"0"}},
    {"num_heads -3", {I64(num_heads, -3)}, ATTN_EINVAL, "num_heads", {"-3"}},
    {"num_kv_heads -1",
     {I64(num_kv_heads, -1)}, ATTN_EINVAL, "num_kv_heads", {"-1"}},
    {"num_kv_heads 3 does not divide 4",
     {I64(num_kv_heads, 3)}, ATTN_EHEADS, "num_kv_heads", {"3", "4"}},
    {"num_kv_heads 8 > num_heads 4",
     {I64(num_kv_heads, 8)}, ATTN_EHEADS, "num_kv_heads", {"8", "4"}},
    /* q projection */
    {"no q_weight, Eq 18 % H 4",
     {ABSENT(q_weight), ABSENT(q_bias), T(query, 3, 2, 6, 18)},
     ATTN_EHEADS, "query", {"[2, 6, 18]"}},
    {"q_weight rank 3",
     {T(q_weight, 3, 1, 16, 16)}, ATTN_ERANK, "q_weight", {"[1, 16, 16]"}},
    {"q_weight rank 1", {T(q_weight, 1, 16)}, ATTN_ERANK, "q_weight", {"[16]"}},
    {"q_weight cols 15 != Eq 16",
     {T(q_weight, 2, 16, 15)}, ATTN_ESHAPE, "q_weight", {"[16, 15]", "query"}},
    {"q_weight rows 18 % H 4",
     {T(q_weight, 2, 18, 16), ABSENT(q_bias)},
     ATTN_EHEADS, "q_weight", {"[18, 16]"}},
    /* k projection */
    {"k_weight cols 11 != Ek 12",
     {T(k_weight, 2, 8, 11)},
     ATTN_ESHAPE, "k_weight", {"[8, 11]", "12", "key"}},
    {"k_weight rows 10 != Hkv*Dh 8",
     {T(k_weight, 2, 10, 12), ABSENT(k_bias)},
     ATTN_ESHAPE, "k_weight", {"[10, 12]"}},
    {"k_weight rank 1", {T(k_weight, 1, 8)}, ATTN_ERANK, "k_weight", {"[8]"}},
    {"no k_weight, Ek 12 != Hkv*Dh 8",
     {ABSENT(k_weight), ABSENT(k_bias)}, ATTN_ESHAPE, "key", {"[2, 7, 12]"}},
    /* v projection */
    {"v_weight cols 9 != Ev 10",
     {T(v_weight, 2, 6, 9)},
     ATTN_ESHAPE, "v_weight", {"[6, 9]", "10", "value"}},
    {"v_weight rows 7 % Hkv 2",
     {T(v_weight, 2, 7, 10), ABSENT(v_bias), ABSENT(o_weight)},
     ATTN_EHEADS, "v_weight", {"[7, 10]"}},
    {"v_weight rank 3",
     {T(v_weight, 3, 1, 6, 10)}, ATTN_ERANK, "v_weight", {"[1, 6, 10]"}},
    {"no v_weight, Ev 9 % Hkv 2",
     {ABSENT(v_weight), ABSENT(v_bias), T(value, 3, 2, 7, 9)},
     ATTN_EHEADS, "value", {"[2, 7, 9]"}},
    /* o projection */
    {"o_weight cols 11 != H*Dv 12",
     {T(o_weight, 2, 5, 11)}, ATTN_ESHAPE, "o_weight", {"[5, 11]"}},
    {"o_weight rank 1", {T(o_weight, 1, 5)}, ATTN_ERANK, "o_weight", {"[5]"}},
    /* biases: length and rank */
    {"q_bias length 15", {T(q_bias, 1, 15)}, ATTN_ESHAPE, "q_bias", {"[15]"}},
    {"k_bias length 7", {T(k_bias, 1, 7)}, ATTN_ESHAPE, "k_bias", {"[7]"}},
    {"v_bias length 5", {T(v_bias, 1, 5)}, ATTN_ESHAPE, "v_bias", {"[5]"}},
    {"o_bias length 4", {T(o_bias, 1, 4)}, ATTN_ESHAPE, "o_bias", {"[4]"}},
    {"q_bias rank 2", {T(q_bias, 2, 1, 16)}, ATTN_ERANK, "q_bias", {"[1, 16]"}},
    {"k_bias rank 2", {T(k_bias, 2, 1, 8)}, ATTN_ERANK, "k_bias", {"[1, 8]"}},
    {"v_bias rank 2", {T(v_bias, 2, 1, 6)}, ATTN_ERANK, "v_bias", {"[1, 6]"}},
    {"o_bias rank 2", {T(o_bias, 2, 1, 5)}, ATTN_ERANK, "o_bias", {"[1, 5]"}},
    {"q_bias without q_weight, length 16 != Eq 20",
     {ABSENT(q_weight), T(query, 3, 2, 6, 20)},
     ATTN_ESHAPE, "q_bias", {"[16]"}},
    /* enums */
    {"causal 7", {CAUSAL(7)}, ATTN_EINVAL, "causal", {"7"}},
    {"causal -1", {CAUSAL(-1)}, ATTN_EINVAL, "causal", {"-1"}},
    {"alibi 9", {ALIBI(9)}, ATTN_EINVAL, "alibi", {"9"}},
    /* key lengths */
    {"key_lengths length 3 != B 2",
     {T(key_lengths, 1, 3)}, ATTN_ESHAPE, "key_lengths", {"[3]"}},
    {"key_lengths rank 2",
     {T(key_lengths, 2, 2, 1)}, ATTN_ERANK, "key_lengths", {"[2, 1]"}},
    {"key_lengths value 8 > Lk 7",
     {T(key_lengths, 1, 2), LEN1(8)},
     ATTN_ERANGE, "key_lengths", {"8", "7"}},
    {"key_lengths value -1",
     {T(key_lengths, 1, 2), LEN1(-1)},
     ATTN_ERANGE, "key_lengths", {"-1"}},
    /* allow */
    {"allow rank 1", {T(allow, 1, 7)}, ATTN_ERANK, "allow", {"[7]"}},
    {"allow rank 5", {T(allow, 5, 2, 4, 6, 7)}, ATTN_ERANK, "allow", {"5"}},
    {"allow Lk dim 3",
     {T(allow, 4, 2, 4, 6, 3)}, ATTN_ESHAPE, "allow", {"[2, 4, 6, 3]"}},
    {"allow batch dim 3",
     {T(allow, 4, 3, 1, 1, 7)}, ATTN_ESHAPE, "allow", {"[3, 1, 1, 7]"}},
    {"allow head dim 2 (H 4)",
     {T(allow, 3, 2, 6, 7)}, ATTN_ESHAPE, "allow", {"[2, 6, 7]"}},
    {"allow Lq dim 7 at rank 2",
     {T(allow, 2, 7, 7)}, ATTN_ESHAPE, "allow", {"[7, 7]"}},
    /* bias */
    {"bias rank 1", {T(bias, 1, 7)}, ATTN_ERANK, "bias", {"[7]"}},
    {"bias rank 5", {T(bias, 5, 2, 4, 6, 7)}, ATTN_ERANK, "bias", {"5"}},
    {"bias Lk dim 3",
     {T(bias, 4, 2, 4, 6, 3)}, ATTN_ESHAPE, "bias", {"[2, 4, 6, 3]"}},
    {"bias head dim 2 (H 4)",
     {T(bias, 3, 2, 6, 7)}, ATTN_ESHAPE, "bias", {"[2, 6, 7]"}},
    {"bias Lq dim 5 at rank 2",
     {T(bias, 2, 5, 7)}, ATTN_ESHAPE, "bias", {"[5, 7]"}},
    /* window */
    {"window_left -1",
     {FLAG(has_window_left, 1), I64(window_left, -1)},
     ATTN_ERANGE, "window_left", {"-1"}},
    {"window_right -2",
     {FLAG(has_window_right, 1), I64(window_right, -2)},
     ATTN_ERANGE, "window_right", {"-2"}},
    /* scale and softcap */
    {"scale NaN",
     {FLAG(has_scale, 1), FLT(scale, NAN)}, ATTN_ERANGE, "scale", {0}},
    {"scale +inf",
     {FLAG(has_scale, 1), FLT(scale, INFINITY)}, ATTN_ERANGE, "scale", {0}},
    {"scale -inf",
     {FLAG(has_scale, 1), FLT(scale, -INFINITY)}, ATTN_ERANGE, "scale", {0}},
    {"softcap 0",
     {FLAG(has_softcap, 1), FLT(softcap, 0.0)}, ATTN_ERANGE, "softcap", {0}},
    {"softcap -1",
     {FLAG(has_softcap, 1), FLT(softcap, -1.0)},
     ATTN_ERANGE, "softcap", {"-1"}},
    {"softcap +inf",
     {FLAG(has_softcap, 1), FLT(softcap, INFINITY)},
     ATTN_ERANGE, "softcap", {0}},
    {"softcap NaN",
     {FLAG(has_softcap, 1), FLT(softcap, NAN)}, ATTN_ERANGE, "softcap", {0}},
    /* ALiBi slopes */
    /* q_norm and k_norm: one weight per head feature (a layer's, or a
     * caller's of libattn) */
    {"q_norm length 5 != Dh 4",
     {T(q_norm, 1, 5)}, ATTN_ESHAPE, "q_norm", {"[5]", "Dh = 4"}},
    {"k_norm length 3 != Dh 4",
     {T(k_norm, 1, 3)}, ATTN_ESHAPE, "k_norm", {"[3]", "Dh = 4"}},
    {"k_norm rank 2", {T(k_norm, 2, 1, 4)}, ATTN_ERANK, "k_norm", {"[1, 4]"}},
    {"alibi_slopes length 3 != H 4",
     {ALIBI(ATTN_ALIBI_SLOPES), T(alibi_slopes, 1, 3)},
     ATTN_ESHAPE, "alibi_slopes", {"[3]"}},
    {"alibi_slopes rank 2",
     {ALIBI(ATTN_ALIBI_SLOPES), T(alibi_slopes, 2, 1, 4)},
     ATTN_ERANK, "alibi_slopes", {"[1, 4]"}},
    {"alibi_slopes NaN",
     {ALIBI(ATTN_ALIBI_SLOPES), T(alibi_slopes, 1, 4), SLOPE2(NAN)},
     ATTN_ERANGE, "alibi_slopes", {0}},
    {"alibi_slopes inf",
     {ALIBI(ATTN_ALIBI_SLOPES), T(alibi_slopes, 1, 4), SLOPE2(INFINITY)},
     ATTN_ERANGE, "alibi_slopes", {0}},
    /* slopes that nothing reads: once accepted, and the call ran without
     * ALiBi (as positions without a rope are refused) */
    {"alibi_slopes with alibi none",
     {T(alibi_slopes, 1, 4)}, ATTN_EINVAL, "alibi_slopes", {"none"}},
    {"alibi_slopes with alibi default",
     {ALIBI(ATTN_ALIBI_DEFAULT), T(alibi_slopes, 1, 4)},
     ATTN_EINVAL, "alibi_slopes", {"default"}},
    /* exec */
    {"threads -1",
     {THREADS(-1)}, ATTN_EINVAL, "threads", {"-1"}},
};
/* clang-format on */
#define N_BAD ((int)(sizeof bad_params / sizeof bad_params[0]))

static void apply_edit(const edit_t *e, attn_params_t *p, attn_exec_t *ex) {
  char *at = (char *)p + e->off;
  attn_tensor_t *t = (attn_tensor_t *)at;
  switch (e->kind) {
  case E_END:
    break;
  case E_TENSOR:
    t->rank = e->rank;
    for (int a = 0; a < ATTN_MAX_RANK; a++)
      t->dim[a] = e->dim[a];
    break;
  case E_ABSENT:
    t->rank = 0;
    break;
  case E_NULLDATA:
    t->data = NULL;
    break;
  case E_I64:
    *(int64_t *)at = (int64_t)e->v;
    break;
  case E_FLAG:
    *(int *)at = (int)e->v;
    break;
  case E_FLOAT:
    *(float *)at = (float)e->v;
    break;
  case E_CAUSAL:
    p->causal = (attn_causal_t)(int)e->v;
    break;
  case E_ALIBI:
    p->alibi = (attn_alibi_t)(int)e->v;
    break;
  case E_LENGTH1:
    lengths[1] = (int64_t)e->v;
    break;
  case E_SLOPE2:
    slopes[2] = (float)e->v;
    break;
  case E_THREADS:
    ex->threads = (int)e->v;
    break;
  case E_ISA:
    ex->isa = (attn_isa_t)(int)e->v;
    break;
  }
}

/* Asserts the full error report: code returned, err.code, err.field_id
 * (whose name is `field`), err.field, and that err.message names the field
 * and holds every substring asked for. */
static void expect_error(int rc, const attn_error_t *err, int code,
                         const char *field, const char *const *sub, int nsub,
                         const char *name) {
  ck_assert_msg(rc == code, "%s: returned %d (%s), expected %d (%s); %s: %s",
                name, rc, attn_errname(rc), code, attn_errname(code),
                err->field, err->message);
  ck_assert_msg(err->code == code, "%s: err.code %d, expected %d", name,
                err->code, code);
  ck_assert_msg(err->field_id > ATTN_FIELD_NONE &&
                    err->field_id < ATTN_FIELD_COUNT,
                "%s: err.field_id %d is not an input (message: %s)", name,
                (int)err->field_id, err->message);
  ck_assert_msg(strcmp(attn_field_name(err->field_id), field) == 0,
                "%s: err.field_id names '%s', expected '%s' (message: %s)",
                name, attn_field_name(err->field_id), field, err->message);
  ck_assert_msg(strcmp(err->field, field) == 0,
                "%s: err.field '%s', expected '%s' (message: %s)", name,
                err->field, field, err->message);
  ck_assert_msg(memchr(err->message, '\0', sizeof err->message) != NULL,
                "%s: message not terminated", name);
  ck_assert_msg(strstr(err->message, field) != NULL,
                "%s: message '%s' does not name '%s'", name, err->message,
                field);
  for (int k = 0; k < nsub; k++) {
    if (sub[k] == NULL)
      continue;
    ck_assert_msg(strstr(err->message, sub[k]) != NULL,
                  "%s: message '%s' lacks '%s'", name, err->message, sub[k]);
  }
}

START_TEST(test_bad_params) {
  const bad_row_t *row = &bad_params[_i];
  attn_params_t p = base;
  attn_exec_t ex = base_exec;
  for (int k = 0; k < 3; k++)
    apply_edit(&row->edit[k], &p, &ex);
  attn_plan_t plan;
  attn_error_t err;
  memset(&err, 0x5a, sizeof err); /* a stale record must be overwritten */
  int rc = attn_plan_init(&plan, &p, &ex, &err);
  expect_error(rc, &err, row->code, row->field, row->sub, 3, row->name);
  /* The same failure without an error record: same code, no crash. */
  ck_assert_int_eq(attn_plan_init(&plan, &p, &ex, NULL), row->code);
}
END_TEST

/* Each tensor given (rank > 0) with data NULL is refused, naming it. */
START_TEST(test_null_data) {
  static const struct {
    size_t off;
    const char *field;
  } t[] = {
      {F(query), "query"},
      {F(key), "key"},
      {F(value), "value"},
      {F(q_weight), "q_weight"},
      {F(k_weight), "k_weight"},
      {F(v_weight), "v_weight"},
      {F(o_weight), "o_weight"},
      {F(q_bias), "q_bias"},
      {F(k_bias), "k_bias"},
      {F(v_bias), "v_bias"},
      {F(o_bias), "o_bias"},
      {F(key_lengths), "key_lengths"},
      {F(allow), "allow"},
      {F(bias), "bias"},
      {F(alibi_slopes), "alibi_slopes"},
  };
  ck_assert_int_lt(_i, (int)(sizeof t / sizeof t[0]));
  attn_params_t p = base;
  /* give the optional tensors a valid shape first */
  p.key_lengths.rank = 1, p.key_lengths.dim[0] = 2;
  p.allow = tu_t4(pool_allow, 2, 4, 6, 7);
  p.bias = tu_t2(pool_bias, 6, 7);
  p.alibi = ATTN_ALIBI_SLOPES;
  p.alibi_slopes.rank = 1, p.alibi_slopes.dim[0] = 4;
  lengths[0] = 7, lengths[1] = 3;
  attn_plan_t plan;
  attn_error_t err;
  ck_assert_int_eq(attn_plan_init(&plan, &p, &base_exec, &err), 0);
  ((attn_tensor_t *)((char *)&p + t[_i].off))->data = NULL;
  int rc = attn_plan_init(&plan, &p, &base_exec, &err);
  expect_error(rc, &err, ATTN_EINVAL, t[_i].field, NULL, 0, t[_i].field);
}
END_TEST
#define N_NULL_DATA 15

/* ---- valid requests ------------------------------------------------------ */

START_TEST(test_valid_base) {
  attn_plan_t plan;
  attn_error_t err;
  memset(&err, 0x5a, sizeof err);
  int rc = attn_plan_init(&plan, &base, &base_exec, &err);
  ck_assert_msg(rc == 0, "base refused: %d %s: %s", rc, err.field, err.message);
  ck_assert_int_eq(err.code, 0);
  /* the derived sizes of the base problem */
  ck_assert_ptr_eq(plan.params, &base);
  ck_assert_int_eq(plan.batched, 1);
  ck_assert_int_eq(plan.B, 2);
  ck_assert_int_eq(plan.Lq, 6);
  ck_assert_int_eq(plan.Lk, 7);
  ck_assert_int_eq(plan.Eq, 16);
  ck_assert_int_eq(plan.Ek, 12);
  ck_assert_int_eq(plan.Ev, 10);
  ck_assert_int_eq(plan.H, 4);
  ck_assert_int_eq(plan.Hkv, 2);
  ck_assert_int_eq(plan.Dh, 4);
  ck_assert_int_eq(plan.Dv, 3);
  ck_assert_int_eq(plan.Eo, 5);
  ck_assert_float_eq_tol(plan.scale, 0.5f, 1e-7f);
  ck_assert_int_eq(plan.threads, 1);
  ck_assert_int_ne(plan.isa, ATTN_ISA_AUTO);
  ck_assert_int_eq(plan.out_elems, 2 * 6 * 5);
  ck_assert_int_eq(plan.weights_elems, 2 * 4 * 6 * 7);
  ck_assert_int_eq(plan.mean_elems, 2 * 6 * 7);
  ck_assert_int_eq(plan.head_elems, 2 * 4 * 6 * 3);
  /* 2 × multiply-adds: Q, K, V projections, q·k, w·v, output projection */
  const double flops =
      2.0 * (2 * 6 * 16 * 16 + 2 * 7 * 12 * 8 + 2 * 7 * 10 * 6 +
             2 * 4 * 6 * 7 * 4 + 2 * 4 * 6 * 7 * 3 + 2 * 6 * 12 * 5);
  ck_assert_double_eq_tol(plan.flops, flops, 0.5);

  /* Running it works, and fills every output (all-zero inputs: the
   * weights are uniform 1/7 and out is the output bias, 0). */
  attn_params_t p = base;
  p.want_weights = p.want_mean_weights = p.want_head_outputs = 1;
  tu_run_t run;
  ck_assert_int_eq(tu_run(&run, &p, &base_exec), 0);
  for (int64_t x = 0; x < run.plan.weights_elems; x++)
    ck_assert_float_eq_tol(run.o.weights[x], 1.0f / 7.0f, 1e-7f);
  for (int64_t x = 0; x < run.plan.out_elems; x++)
    ck_assert_float_eq(run.o.out[x], 0.0f);
  tu_run_free(&run);
}
END_TEST

/* Options at the edge of valid: each accepted (rc 0, err.code 0). */
START_TEST(test_valid_edges) {
  attn_params_t p = base;
  attn_exec_t ex = base_exec;
  switch (_i) {
  case 0: /* exec NULL and threads 0 both mean one thread */
    break;
  case 1:
    ex.threads = 0;
    break;
  case 2: /* key_lengths 0 and Lk */
    p.key_lengths = tu_t1(lengths, 2);
    lengths[0] = 0, lengths[1] = 7;
    break;
  case 3: /* windows of 0 */
    p.has_window_left = p.has_window_right = 1;
    break;
  case 4: /* num_kv_heads = num_heads with matching k/v widths */
    p.num_kv_heads = 4;
    p.k_weight = tu_t2(pool_kw, 16, 12), p.k_bias = tu_t1(pool_kb, 16);
    p.v_weight = tu_t2(pool_vw, 12, 10), p.v_bias = tu_t1(pool_vb, 12);
    break;
  case 5: /* allow and bias at every all-ones rank */
    p.allow = tu_t4(pool_allow, 1, 1, 1, 1);
    p.bias = tu_t2(pool_bias, 1, 1);
    break;
  case 6: /* slopes of any finite value, softcap tiny, scale 0 */
    p.alibi = ATTN_ALIBI_SLOPES;
    p.alibi_slopes = tu_t1(slopes, 4);
    slopes[2] = -3.0f;
    p.has_softcap = 1, p.softcap = 1e-3f;
    p.has_scale = 1, p.scale = 0.0f;
    break;
  case 7: /* rank-2 inputs, no projections at all, key and value absent */
    p = (attn_params_t){0};
    p.query = tu_t2(pool_query, 5, 12);
    p.num_heads = 3;
    break;
  default:
    ck_abort_msg("no case %d", _i);
  }
  attn_plan_t plan;
  attn_error_t err;
  memset(&err, 0x5a, sizeof err);
  int rc = attn_plan_init(&plan, &p, _i == 0 ? NULL : &ex, &err);
  ck_assert_msg(rc == 0, "edge %d refused: %d %s: %s", _i, rc, err.field,
                err.message);
  ck_assert_int_eq(err.code, 0);
  ck_assert_int_eq(plan.threads, 1);
  if (_i == 7) {
    ck_assert_int_eq(plan.batched, 0);
    ck_assert_int_eq(plan.B, 1);
    ck_assert_int_eq(plan.Lk, 5);
    ck_assert_int_eq(plan.Dh, 4);
    ck_assert_int_eq(plan.Dv, 4);
    ck_assert_int_eq(plan.Eo, 12);
  }
  tu_run_t run;
  ck_assert_int_eq(tu_run(&run, &p, _i == 0 ? NULL : &ex), 0);
  tu_run_free(&run);
}
END_TEST

/* A mask dimension that does not broadcast names the sizes it may have: 1
 * or the target's, and 1 alone where the target's is 1 (it said "not 1 or
 * 1"). The base problem at batch 1 (three edits) with allow's batch 2, and
 * the same allow against the base's batch 2 with a head dimension of 3. */
START_TEST(test_broadcast_message) {
  static const struct {
    edit_t edit[4];
    const char *message;
  } cases[] = {
      {{T(query, 3, 1, 6, 16), T(key, 3, 1, 7, 12), T(value, 3, 1, 7, 10),
        T(allow, 4, 2, 4, 6, 7)},
       "allow [2, 4, 6, 7] does not broadcast to [B, H, Lq, Lk] = [1, 4, 6, "
       "7]: dimension 0 is 2, not 1"},
      {{T(allow, 4, 2, 3, 6, 7)},
       "allow [2, 3, 6, 7] does not broadcast to [B, H, Lq, Lk] = [2, 4, 6, "
       "7]: dimension 1 is 3, not 1 or 4"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    attn_params_t p = base;
    attn_exec_t ex = base_exec;
    for (int k = 0; k < 4; k++)
      apply_edit(&cases[c].edit[k], &p, &ex);
    attn_plan_t plan;
    attn_error_t err;
    int rc = attn_plan_init(&plan, &p, &ex, &err);
    ck_assert_msg(rc == ATTN_ESHAPE, "case %zu: returned %d (%s: %s)", c, rc,
                  err.field, err.message);
    ck_assert_str_eq(err.field, "allow");
    ck_assert_str_eq(err.message, cases[c].message);
  }
}
END_TEST

/* Sizes whose products overflow: EOVERFLOW, not a wrapped allocation. */
START_TEST(test_overflow) {
  attn_params_t p = {0};
  const int64_t big = (int64_t)1 << 40;
  p.query = tu_t3(pool_query, 1 << 20, big, 16);
  p.num_heads = 4;
  p.want_weights = 1;
  attn_plan_t plan;
  attn_error_t err;
  int rc = attn_plan_init(&plan, &p, &base_exec, &err);
  ck_assert_msg(rc == ATTN_EOVERFLOW, "returned %d %s (%s: %s)", rc,
                attn_errname(rc), err.field, err.message);
  ck_assert_int_eq(err.code, ATTN_EOVERFLOW);
  ck_assert_str_ne(err.field, "");
}
END_TEST

/* An ISA value outside the enum is refused and names "isa". */
START_TEST(test_bad_isa) {
  attn_exec_t ex = {.threads = 1, .isa = (attn_isa_t)42};
  attn_plan_t plan;
  attn_error_t err;
  int rc = attn_plan_init(&plan, &base, &ex, &err);
  ck_assert_msg(rc == ATTN_EINVAL || rc == ATTN_ENOTSUP, "returned %d %s", rc,
                attn_errname(rc));
  ck_assert_int_eq(err.code, rc);
  ck_assert_str_eq(err.field, "isa");
}
END_TEST

/* ---- attn_forward's own checks ------------------------------------------- */

/* Every output of test_bad_forward's plan in buf: out, weights,
 * mean_weights and head_outputs. */
static attn_outputs_t all_outputs(float *const buf[4]) {
  return (attn_outputs_t){.out = buf[0],
                          .weights = buf[1],
                          .mean_weights = buf[2],
                          .head_outputs = buf[3]};
}

/* _i: 0 out NULL, 1 weights NULL, 2 mean_weights NULL, 3 head_outputs NULL,
 * 4 workspace one byte short, 5 workspace NULL, 6 workspace misaligned. The
 * API names EINVAL for a missing buffer and ENOSPC for a short workspace; a
 * NULL or misaligned workspace may be either, but must name "workspace". */
START_TEST(test_bad_forward) {
  static const char *const field[] = {
      "out",       "weights",   "mean_weights", "head_outputs",
      "workspace", "workspace", "workspace"};
  attn_params_t p = base;
  p.want_weights = p.want_mean_weights = p.want_head_outputs = 1;
  attn_plan_t plan;
  attn_error_t err;
  ck_assert_int_eq(attn_plan_init(&plan, &p, &base_exec, &err), 0);
  ck_assert_uint_gt(plan.workspace_bytes, 0);
  float *buf[4];
  const int64_t n[4] = {plan.out_elems, plan.weights_elems, plan.mean_elems,
                        plan.head_elems};
  for (int k = 0; k < 4; k++) {
    buf[k] = calloc((size_t)n[k] + 1, sizeof(float));
    ck_assert_ptr_nonnull(buf[k]);
  }
  attn_outputs_t o = all_outputs(buf);
  const size_t wsb = (plan.workspace_bytes + 63) / 64 * 64 + 64;
  void *ws = aligned_alloc(64, wsb);
  ck_assert_ptr_nonnull(ws);
  size_t give = plan.workspace_bytes;
  void *ws_give = ws;
  switch (_i) {
  case 0:
    o.out = NULL;
    break;
  case 1:
    o.weights = NULL;
    break;
  case 2:
    o.mean_weights = NULL;
    break;
  case 3:
    o.head_outputs = NULL;
    break;
  case 4:
    give = plan.workspace_bytes - 1;
    break;
  case 5:
    ws_give = NULL;
    break;
  case 6:
    ws_give = (char *)ws + 16;
    break;
  default:
    ck_abort();
  }
  memset(&err, 0x5a, sizeof err);
  int rc = attn_forward(&plan, &o, ws_give, give, &err);
  char need[32];
  snprintf(need, sizeof need, "%zu", plan.workspace_bytes);
  const char *sub[1] = {_i == 4 ? need : NULL};
  int code = _i < 4 ? ATTN_EINVAL : ATTN_ENOSPC;
  if (_i >= 5 && rc == ATTN_EINVAL)
    code = ATTN_EINVAL;
  expect_error(rc, &err, code, field[_i], sub, 1, field[_i]);
  /* nothing was written to the buffers that were given */
  for (int k = 0; k < 4; k++)
    for (int64_t x = 0; x < n[k]; x++)
      ck_assert_float_eq(buf[k][x], 0.0f);
  /* with everything in place it succeeds */
  o = all_outputs(buf);
  ck_assert_int_eq(attn_forward(&plan, &o, ws, plan.workspace_bytes, &err), 0);
  ck_assert_int_eq(err.code, 0);
  for (int k = 0; k < 4; k++)
    free(buf[k]);
  free(ws);
}
END_TEST

/* Buffers not asked for may be NULL. */
START_TEST(test_forward_optional_null) {
  attn_plan_t plan;
  attn_error_t err;
  ck_assert_int_eq(attn_plan_init(&plan, &base, &base_exec, &err), 0);
  float out[60];
  attn_outputs_t o = {.out = out};
  void *ws = aligned_alloc(64, (plan.workspace_bytes + 63) / 64 * 64 + 64);
  ck_assert_ptr_nonnull(ws);
  ck_assert_int_eq(attn_forward(&plan, &o, ws, plan.workspace_bytes, &err), 0);
  ck_assert_int_eq(err.code, 0);
  free(ws);
}
END_TEST

/* ---- cancellation -------------------------------------------------------- */

/* exec.cancel: already set, attn_forward returns ATTN_ECANCELED naming
 * "cancel"; left at 0, the call runs to the same bits as one without it. */
START_TEST(test_cancel) {
  attn_params_t p = base;
  p.want_weights = 1;
  int flag = 0;
  attn_exec_t ex = {.threads = 2, .isa = ATTN_ISA_AUTO, .cancel = &flag};
  tu_run_t plain, watched;
  attn_exec_t ex_plain = ex;
  ex_plain.cancel = NULL;
  ck_assert_int_eq(tu_run(&plain, &p, &ex_plain), 0);
  ck_assert_int_eq(tu_run(&watched, &p, &ex), 0);
  ck_assert_ptr_eq(watched.plan.cancel, &flag);
  ck_assert_mem_eq(plain.o.out, watched.o.out,
                   (size_t)plain.plan.out_elems * sizeof(float));
  ck_assert_mem_eq(plain.o.weights, watched.o.weights,
                   (size_t)plain.plan.weights_elems * sizeof(float));

  flag = 1;
  attn_error_t err;
  memset(&err, 0x5a, sizeof err);
  const attn_plan_t *pl = &watched.plan;
  void *ws = aligned_alloc(64, (pl->workspace_bytes + 63) / 64 * 64 + 64);
  ck_assert_ptr_nonnull(ws);
  int rc = attn_forward(pl, &watched.o, ws, pl->workspace_bytes, &err);
  const char *none[1] = {NULL};
  expect_error(rc, &err, ATTN_ECANCELED, "cancel", none, 1, "cancel set");
  free(ws);
  tu_run_free(&plain);
  tu_run_free(&watched);
}
END_TEST

/* ---- integer extremes (issue 11, defect 3) ------------------------------ */

/* Every integer member at 0, 1, 2^31 - 1, 2^31, 2^31 + 1 and 2^63 - 1 (the
 * int members at 0, 1, INT_MAX - 1, INT_MAX, INT_MIN and -1): each plan
 * either fails naming the member (or the tensor whose shape it breaks),
 * or succeeds and computes what the reference does. Random data, so that a
 * wrong mask shows. Under UBSan (make asan), no arithmetic may overflow:
 * window sides of 2^63 - 1 once wrapped in the kernel's row_range and gave
 * rows of zeros. */
static const int64_t extremes64[] = {
    0, 1, INT32_MAX, 1LL << 31, (1LL << 31) + 1, INT64_MAX};
static const int extremes32[] = {0, 1, INT_MAX - 1, INT_MAX, INT_MIN, -1};
#define N_EXTREMES 6

typedef enum {
  M_NUM_HEADS,
  M_NUM_KV_HEADS,
  M_WINDOW_LEFT,
  M_WINDOW_RIGHT,
  M_WINDOWS_CAUSAL, /* both sides, with a causal mask */
  M_KEY_LENGTH,
  M_THREADS,
  M_CAUSAL,
  M_ALIBI,
  M_B,  /* dim 0 of query, key and value */
  M_LQ, /* query rows */
  M_LK, /* key and value rows */
  M_EQ, /* query width */
  M_N
} member_t;

static const char *const member_names[M_N] = {
    "num_heads",   "num_kv_heads", "window_left", "window_right", "window_left",
    "key_lengths", "threads",      "causal",      "alibi",        "query",
    "query",       "key",          "query"};

START_TEST(test_integer_extremes) {
  const member_t m = (member_t)(_i / N_EXTREMES);
  const int64_t v = extremes64[_i % N_EXTREMES];
  const int vi = extremes32[_i % N_EXTREMES];
  tu_spec_t s = {.B = 2,
                 .batched = 1,
                 .Lq = 9, /* more rows than keys: off = Lk - Lq < 0 */
                 .Lk = 7,
                 .cross = 1,
                 .value_given = 1,
                 .H = 2,
                 .Dh = 4,
                 .bias_rank = 2,
                 .key_lengths = m == M_KEY_LENGTH,
                 .lengths = {7, 5},
                 .skip = 0};
  tu_case_t c;
  tu_case_build(&c, &s, 9500 + (uint64_t)_i);
  attn_params_t p = c.p;
  attn_exec_t ex = {.threads = 1, .isa = ATTN_ISA_AUTO};
  int64_t data_rows = 0; /* the dimension the data really has, for dims */
  switch (m) {
  case M_NUM_HEADS:
    p.num_heads = v;
    break;
  case M_NUM_KV_HEADS:
    p.num_kv_heads = v;
    break;
  case M_WINDOW_LEFT:
    p.has_window_left = 1, p.window_left = v;
    break;
  case M_WINDOW_RIGHT:
    p.has_window_right = 1, p.window_right = v;
    break;
  case M_WINDOWS_CAUSAL:
    p.has_window_left = p.has_window_right = 1;
    p.window_left = p.window_right = v;
    p.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    break;
  case M_KEY_LENGTH:
    c.lengths[0] = v;
    break;
  case M_THREADS:
    ex.threads = vi;
    break;
  case M_CAUSAL:
    p.causal = (attn_causal_t)vi;
    break;
  case M_ALIBI:
    p.alibi = (attn_alibi_t)vi;
    break;
  case M_B:
    p.query.dim[0] = p.key.dim[0] = p.value.dim[0] = v, data_rows = 2;
    break;
  case M_LQ:
    p.query.dim[1] = v, data_rows = 9;
    break;
  case M_LK:
    p.key.dim[1] = p.value.dim[1] = v, data_rows = 7;
    break;
  case M_EQ:
    p.query.dim[2] = v, data_rows = 8;
    break;
  case M_N:
    break;
  }
  const int is_int = m == M_THREADS || m == M_CAUSAL || m == M_ALIBI;
  char what[96], val[32];
  snprintf(val, sizeof val, "%lld", is_int ? (long long)vi : (long long)v);
  snprintf(what, sizeof what, "%s = %s", member_names[m], val);

  attn_plan_t plan;
  attn_error_t err;
  int rc = attn_plan_init(&plan, &p, &ex, &err);
  if (rc < 0) {
    ck_assert_msg(err.code == rc && err.field[0] != '\0',
                  "%s: %d %s with field '%s'", what, rc, attn_errname(rc),
                  err.field);
    /* The message names the member and gives its value; a dimension may
     * be refused through any tensor it no longer fits, but the message
     * gives the dimension. */
    ck_assert_msg(data_rows || strstr(err.message, member_names[m]) != NULL,
                  "%s: '%s' does not name %s", what, err.message,
                  member_names[m]);
    if (m != M_KEY_LENGTH || v > 1)
      ck_assert_msg(strstr(err.message, val) != NULL,
                    "%s: '%s' does not give %s", what, err.message, val);
  } else if (data_rows && v > data_rows) {
    /* accepted, but its data is not that large: the sizes alone */
    ck_assert_int_eq(plan.out_elems, plan.B * plan.Lq * plan.Eo);
    ck_assert_int_le(plan.weights_elems, (int64_t)1 << 40);
  } else {
    int r = tu_check_vs_ref(&p, &ex, 1e-5, what);
    ck_assert_int_eq(r, 0);
    /* a side no pair of rows reaches is no bound */
    int64_t reach = plan.Lq > plan.Lk ? plan.Lq : plan.Lk;
    ck_assert_int_eq(plan.window_left,
                     p.has_window_left && p.window_left < reach ? p.window_left
                                                                : -1);
    ck_assert_int_eq(
        plan.window_right,
        p.has_window_right && p.window_right < reach ? p.window_right : -1);
  }
  tu_case_free(&c);
}
END_TEST

/* Dimensions whose products pass int64 one step later than each other's:
 * the plan refuses them (EOVERFLOW, naming a member), never wrapping a
 * size. num_heads × the value head width and B × H are each below 2^48 but
 * not their product; a weight wider than int cannot go to sgemm. */
START_TEST(test_overflow_products) {
  attn_params_t p = {0};
  attn_plan_t plan;
  attn_error_t err;
  int rc;
  switch (_i) {
  case 0: /* H·Dv = 2^47 · 2^20 through q_weight rows and v_weight rows */
    p.query = tu_t2(pool_query, 1, 1);
    p.num_heads = (int64_t)1 << 47;
    p.num_kv_heads = 1;
    p.q_weight = tu_t2(pool_qw, (int64_t)1 << 47, 1);
    p.k_weight = tu_t2(pool_kw, 1, 1);
    p.v_weight = tu_t2(pool_vw, (int64_t)1 << 20, 1);
    break;
  case 1: /* B·H = 2^47 · 2^40 */
    p.query = tu_t3(pool_query, (int64_t)1 << 47, 1, 1);
    p.num_heads = (int64_t)1 << 40;
    p.num_kv_heads = 1;
    p.q_weight = tu_t2(pool_qw, (int64_t)1 << 40, 1);
    p.k_weight = tu_t2(pool_kw, 1, 1);
    break;
  case 2: /* a q_weight of 2^31 + 1 columns */
    p.query = tu_t2(pool_query, 1, (1LL << 31) + 1);
    p.num_heads = 1;
    p.q_weight = tu_t2(pool_qw, 1, (1LL << 31) + 1);
    p.k_weight = tu_t2(pool_kw, 1, (1LL << 31) + 1);
    break;
  }
  rc = attn_plan_init(&plan, &p, &base_exec, &err);
  ck_assert_msg(rc == ATTN_EOVERFLOW, "case %d: %d %s (%s: %s)", _i, rc,
                attn_errname(rc), err.field, err.message);
  ck_assert_str_ne(err.field, "");
}
END_TEST

/* ---- error strings ------------------------------------------------------- */

START_TEST(test_error_strings) {
  static const struct {
    int code;
    const char *name, *msg;
  } map[] = {
#define ROW(name, value, msg) {value, #name, msg},
      ATTN_ERRNO_MAP(ROW)
#undef ROW
  };
  const int n = (int)(sizeof map / sizeof map[0]);
  ck_assert_int_ge(n, 8);
  for (int a = 0; a < n; a++) {
    ck_assert_int_eq(map[a].code, -(a + 1)); /* dense: -1, -2, ... */
    ck_assert_str_eq(attn_errname(map[a].code), map[a].name);
    ck_assert_str_eq(attn_strerror(map[a].code), map[a].msg);
    ck_assert_uint_gt(strlen(attn_strerror(map[a].code)), 0);
    for (int b = 0; b < a; b++) {
      ck_assert_str_ne(attn_errname(map[a].code), attn_errname(map[b].code));
      ck_assert_str_ne(attn_strerror(map[a].code), attn_strerror(map[b].code));
    }
  }
  ck_assert_str_eq(attn_strerror(-99), "unknown error");
  ck_assert_str_eq(attn_strerror(42), "unknown error");
  ck_assert_str_eq(attn_errname(-99), "EUNKNOWN");
  ck_assert_str_eq(attn_errname(42), "EUNKNOWN");
}
END_TEST

/* ATTN_FIELD_MAP: dense ids from NONE = 0, each with its own non-empty
 * spelling that fits err.field (NONE alone is ""), "unknown" outside it; and
 * a plan that succeeds leaves field_id at NONE. */
START_TEST(test_field_names) {
  static const struct {
    attn_field_t id;
    const char *name;
  } map[] = {
#define ROW(name, spelling) {ATTN_FIELD_##name, spelling},
      ATTN_FIELD_MAP(ROW)
#undef ROW
  };
  const int n = (int)(sizeof map / sizeof map[0]);
  ck_assert_int_eq(n, ATTN_FIELD_COUNT);
  ck_assert_int_eq(ATTN_FIELD_NONE, 0);
  ck_assert_str_eq(attn_field_name(ATTN_FIELD_NONE), "");
  for (int a = 0; a < n; a++) {
    ck_assert_int_eq(map[a].id, a);
    const char *na = attn_field_name(map[a].id);
    ck_assert_str_eq(na, map[a].name);
    ck_assert_uint_lt(strlen(na), ATTN_ERROR_FIELD_MAX);
    if (a == ATTN_FIELD_NONE)
      continue;
    ck_assert_msg(na[0] != '\0', "ATTN_FIELD %d has no name", a);
    ck_assert_msg(strcmp(na, "unknown") != 0, "ATTN_FIELD %d is 'unknown'", a);
    for (int b = 1; b < a; b++)
      ck_assert_msg(strcmp(na, attn_field_name(map[b].id)) != 0,
                    "ATTN_FIELD %d and %d are both '%s'", b, a, na);
  }
  ck_assert_str_eq(attn_field_name(ATTN_FIELD_COUNT), "unknown");
  ck_assert_str_eq(attn_field_name((attn_field_t)-1), "unknown");
  ck_assert_str_eq(attn_field_name((attn_field_t)1000), "unknown");

  attn_plan_t plan;
  attn_error_t err;
  memset(&err, 0x5a, sizeof err);
  ck_assert_int_eq(attn_plan_init(&plan, &base, &base_exec, &err), 0);
  ck_assert_int_eq(err.field_id, ATTN_FIELD_NONE);
  ck_assert_str_eq(err.field, "");
}
END_TEST

START_TEST(test_isa_names) {
  ck_assert_str_eq(attn_isa_name(ATTN_ISA_GENERIC), "generic");
  ck_assert_str_eq(attn_isa_name(ATTN_ISA_AVX2), "avx2");
  ck_assert_str_eq(attn_isa_name(ATTN_ISA_AVX512), "avx512");
  attn_backend_t b;
  memset(&b, 0, sizeof b);
  attn_backend_info(&b);
  ck_assert_int_ne(b.isa, ATTN_ISA_AUTO);
  ck_assert_ptr_nonnull(b.blas);
  /* exec NULL picks the best ISA */
  attn_plan_t plan;
  ck_assert_int_eq(attn_plan_init(&plan, &base, NULL, NULL), 0);
  ck_assert_int_eq(plan.isa, b.isa);
}
END_TEST

Suite *test_suite(void) {
  Suite *s = suite_create("validate");
  TCase *tc = tcase_create("plan");
  tcase_add_checked_fixture(tc, setup_base, teardown_base);
  tcase_add_loop_test(tc, test_bad_params, 0, N_BAD);
  tcase_add_loop_test(tc, test_null_data, 0, N_NULL_DATA);
  tcase_add_test(tc, test_valid_base);
  tcase_add_loop_test(tc, test_valid_edges, 0, 8);
  tcase_add_test(tc, test_broadcast_message);
  tcase_add_test(tc, test_overflow);
  tcase_add_test(tc, test_bad_isa);
  suite_add_tcase(s, tc);

  tc = tcase_create("extremes");
  tcase_add_checked_fixture(tc, setup_base, teardown_base);
  tcase_add_loop_test(tc, test_integer_extremes, 0, M_N * N_EXTREMES);
  tcase_add_loop_test(tc, test_overflow_products, 0, 3);
  suite_add_tcase(s, tc);

  tc = tcase_create("forward");
  tcase_add_checked_fixture(tc, setup_base, teardown_base);
  tcase_add_loop_test(tc, test_bad_forward, 0, 7);
  tcase_add_test(tc, test_forward_optional_null);
  tcase_add_test(tc, test_cancel);
  suite_add_tcase(s, tc);

  tc = tcase_create("strings");
  tcase_add_checked_fixture(tc, setup_base, teardown_base);
  tcase_add_test(tc, test_error_strings);
  tcase_add_test(tc, test_field_names);
  tcase_add_test(tc, test_isa_names);
  suite_add_tcase(s, tc);
  return s;
}
