/* tests/check_decode.c: request decoding from strings, with no server.
 *
 * Each case hands a body to attnd_request_decode (server/request.h) under
 * the small limits that check_server's "errors" TCase gives its server
 * (limited_config below mirrors its flags), as jansson tests its loader
 * from strings. TCases:
 *   - errors: one case per error class, each a body and the exact error
 *     expected: HTTP status, code, field and the words of the message that
 *     carry the numbers (also in arrays big enough for the fast path);
 *     the same requests just under the limits; invalid JSON;
 *   - values: valid bodies in every tensor form, rank 2 and 3, and the
 *     decoded request's shapes, data, options, encoding, weights mode and
 *     timeout;
 *   - oom: allocation failures, as in jansson's suites (tests/alloc_fail.h):
 *     for n = 0, 1, 2, ... the nth allocation fails (or, sticky, every one
 *     from the nth on) in attnd_request_decode, attnd_request_run and
 *     attnd_request_encode, until a call meets no failure. Each call must
 *     give out_of_memory (503), ATTN_ENOSPC or a buffer marked oom, or else
 *     its usual result, unchanged; never another error, and nothing leaked
 *     (ASan reports leaks at exit). check_server keeps a few of the invalid
 *     requests end to end, for their HTTP replies. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc_fail.h"
#include "attn/attn.h"
#include "config.h"
#include "request.h"
#include "run.h"
#include "server_harness.h"
#include "suite.h"
#include "testutil.h"

/* ---- the limits ---------------------------------------------------------- */

/* check_server's start_limited flags: default_timeout_ms must not exceed
 * max_timeout_ms, or the configuration is refused. Set in main, before
 * Check forks. */
static attnd_config_t cfg;

static void limited_config(void) {
  static char *argv[] = {"attnd", "--workers",
                         "1",     "--threads-per-request",
                         "1",     "--max-body-bytes",
                         "65536", "--max-seq-len",
                         "16",    "--max-heads",
                         "4",     "--max-tensor-elements",
                         "4096",  "--max-response-bytes",
                         "16384", "--max-timeout-ms",
                         "5000",  "--default-timeout-ms",
                         "5000",  NULL};
  static char *envp[] = {NULL};
  attnd_config_load_t how;
  char msg[256];
  int argc = (int)(sizeof argv / sizeof argv[0]) - 1;
  if (attnd_config_load(&cfg, &how, argc, argv, envp, 4, msg, sizeof msg) < 0) {
    fprintf(stderr, "check_decode: the limits do not load: %s\n", msg);
    exit(EXIT_FAILURE);
  }
}

/* Decodes the NUL-terminated `body` under the limits. */
static int decode(const char *body, attnd_request_t **out, attnd_error_t *e) {
  return attnd_request_decode(body, strlen(body), &cfg, out, e);
}

/* ---- errors -------------------------------------------------------------- */

#define Q24 "[[1,2,3,4],[5,6,7,8]]" /* [Lq=2, E=4] */
#define REQ(...) "{\"query\":" Q24 ",\"num_heads\":1" __VA_ARGS__ "}"

typedef struct err_case {
  const char *name;
  const char *body;
  char *(*make)(void); /* builds the body when body is NULL */
  long status;
  const char *code;
  const char *field; /* NULL: no field */
  const char *msg;   /* words the message must contain, '|' between */
} err_case_t;

/* Compact JSON text of `r` (a new string, free()); steals r. */
static char *dump(json_t *r) {
  char *t = json_dumps(r, JSON_COMPACT);
  json_decref(r);
  ck_assert_ptr_nonnull(t);
  return t;
}

/* A base64 tensor of n floats, one of which is NaN. */
static char *nan_body(void) {
  float x[4] = {1, 2, NAN, 4};
  int64_t dim[2] = {1, 4};
  return dump(json_pack("{s:o,s:i}", "query",
                        sh_floats_json(x, 2, dim, SH_BASE64), "num_heads", 1));
}

static char *inf_key_body(void) {
  float q[4] = {1, 2, 3, 4}, k[8] = {1, 2, 3, 4, 5, 6, INFINITY, 8};
  int64_t qd[2] = {1, 4}, kd[2] = {2, 4};
  return dump(json_pack("{s:o,s:o,s:i}", "query",
                        sh_floats_json(q, 2, qd, SH_BASE64), "key",
                        sh_floats_json(k, 2, kd, SH_BASE64), "num_heads", 1));
}

/* A query [L, E] (or [B, L, E]) of zeros as base64, with `extra` members. */
static char *zeros_body(int B, int64_t L, int64_t E, int H, const char *extra) {
  int64_t dim3[3] = {B, L, E};
  size_t n = (size_t)((B ? B : 1) * L * E);
  float *x = calloc(n, sizeof *x);
  json_t *r =
      json_pack("{s:o,s:i}", "query",
                sh_floats_json(x, B ? 3 : 2, B ? dim3 : dim3 + 1, SH_BASE64),
                "num_heads", H);
  free(x);
  if (extra) {
    json_error_t e;
    json_t *more = json_loads(extra, 0, &e);
    json_object_update(r, more);
    json_decref(more);
  }
  return dump(r);
}

static char *too_many_elements(void) {
  return zeros_body(0, 16, 300, 1, NULL);
}
static char *too_long(void) {
  return zeros_body(0, 17, 4, 1, NULL);
}
static char *key_too_long(void) {
  float k[17 * 4] = {0};
  int64_t kd[2] = {17, 4};
  json_error_t e;
  json_t *r = json_loads(REQ(), 0, &e);
  json_object_set_new(r, "key", sh_floats_json(k, 2, kd, SH_FLAT));
  return dump(r);
}
static char *too_many_heads(void) {
  return zeros_body(0, 2, 8, 8, NULL);
}
/* nested: 16 bytes a float by the server's estimate, so 4096 for the
 * output and 16384 for the weights */
static char *weights_too_large(void) {
  return zeros_body(0, 16, 16, 4,
                    "{\"return\":{\"weights\":\"per_head\","
                    "\"encoding\":\"nested\"}}");
}
static char *weights_too_many(void) {
  return zeros_body(5, 16, 16, 4, "{\"return\":{\"weights\":\"per_head\"}}");
}

/* A value [16, 256] of 4096 elements (the limit) projected by v_weight
 * [4, 256]: the reply stays small. */
static char *big_value_body(void) {
  float *v = calloc(16 * 256, sizeof *v), *w = calloc(4 * 256, sizeof *w);
  int64_t vd[2] = {16, 256}, wd[2] = {4, 256}, kd[2] = {16, 4};
  json_error_t e;
  json_t *r = json_loads(REQ(), 0, &e);
  json_object_set_new(r, "key", sh_floats_json(v, 2, kd, SH_BASE64));
  json_object_set_new(r, "value", sh_floats_json(v, 2, vd, SH_BASE64));
  json_object_set_new(
      r, "projections",
      json_pack("{s:o}", "v_weight", sh_floats_json(w, 2, wd, SH_BASE64)));
  free(v);
  free(w);
  return dump(r);
}

/* A nested [rows, cols] tensor as JSON text: every element is `fill`, but
 * element (br, bc) is `token`; with token NULL, row br lacks its last
 * element instead. Big enough (64 elements and more) for the decoder's
 * fast path for bulk numbers, which must report errors as the slow one
 * does. */
static char *grid(int rows, int cols, int br, int bc, const char *token,
                  const char *fill) {
  size_t cap = (size_t)(rows * cols) * (strlen(fill) + 8) + 64, n = 0;
  char *t = malloc(cap);
  n += (size_t)snprintf(t + n, cap - n, "[");
  for (int r = 0; r < rows; r++) {
    n += (size_t)snprintf(t + n, cap - n, "%s[", r ? "," : "");
    int w = token == NULL && r == br ? cols - 1 : cols;
    for (int c = 0; c < w; c++)
      n += (size_t)snprintf(t + n, cap - n, "%s%s", c ? "," : "",
                            token && r == br && c == bc ? token : fill);
    n += (size_t)snprintf(t + n, cap - n, "]");
  }
  snprintf(t + n, cap - n, "]");
  return t;
}

/* {"query": q, "num_heads": 1, <extra>} with q a [8, 16] grid. */
static char *grid_body(int br, int bc, const char *token, const char *fill,
                       const char *extra) {
  char *q = grid(8, 16, br, bc, token, fill);
  size_t cap = strlen(q) + strlen(extra) + 64;
  char *b = malloc(cap);
  snprintf(b, cap, "{\"query\":%s,\"num_heads\":1%s}", q, extra);
  free(q);
  return b;
}

static char *big_non_finite(void) {
  return grid_body(3, 5, "1e39", "0.25", "");
}
static char *big_string(void) {
  return grid_body(3, 5, "\"x\"", "0.25", "");
}
static char *big_booleans(void) {
  return grid_body(0, 0, "true", "true", "");
}
static char *big_ragged(void) {
  return grid_body(6, 0, NULL, "0.25", "");
}
/* query [8, 16], key [8, 16] and allow [8, 8] with a 2 at (2, 3) */
static char *big_bad_allow(void) {
  char *k = grid(8, 16, -1, -1, "", "0.5");
  char *allow = grid(8, 8, 2, 3, "2", "1");
  size_t cap = strlen(k) + strlen(allow) + 64;
  char *e = malloc(cap);
  snprintf(e, cap, ",\"key\":%s,\"mask\":{\"allow\":%s}", k, allow);
  char *b = grid_body(-1, -1, "", "0.25", e);
  free(k);
  free(allow);
  free(e);
  return b;
}
static char *big_flat_size(void) {
  char *g = grid(1, 100, -1, -1, "", "0.25"); /* "[[...]]" */
  g[strlen(g) - 1] = 0;                       /* "[[..." → "[...]" */
  char *b = malloc(strlen(g) + 96);
  sprintf(b, "{\"query\":{\"shape\":[10,11],\"data\":%s},\"num_heads\":1}",
          g + 1);
  free(g);
  return b;
}
static char *big_value_non_finite(void) {
  char *v = grid(8, 16, 7, 15, "-1e39", "0.5");
  char *e = malloc(strlen(v) + 32);
  sprintf(e, ",\"value\":%s", v);
  char *b = grid_body(-1, -1, "", "0.25", e);
  free(v);
  free(e);
  return b;
}

static const err_case_t err_cases[] = {
    {"missing query", "{\"num_heads\":1}", NULL, 422, "missing_field", "query",
     "query"},
    {"missing num_heads", "{\"query\":" Q24 "}", NULL, 422, "missing_field",
     "num_heads", "num_heads"},
    {"null query", "{\"query\":null,\"num_heads\":1}", NULL, 422,
     "missing_field", "query", "query"},
    {"num_heads a string", "{\"query\":" Q24 ",\"num_heads\":\"1\"}", NULL, 422,
     "invalid_type", "num_heads", "string"},
    {"num_heads fractional", "{\"query\":" Q24 ",\"num_heads\":1.5}", NULL, 422,
     "invalid_type", "num_heads", "fractional"},
    {"query a string", "{\"query\":\"abc\",\"num_heads\":1}", NULL, 422,
     "invalid_type", "query", "string"},
    {"request not an object", "[1,2]", NULL, 422, "invalid_type", NULL,
     "array"},
    {"id a number", REQ(",\"id\":5"), NULL, 422, "invalid_type", "id",
     "number"},
    {"return.weights a number", REQ(",\"return\":{\"weights\":3}"), NULL, 422,
     "invalid_type", "return.weights", "per_head"},
    {"return.head_outputs a string",
     REQ(",\"return\":{\"head_outputs\":\"yes\"}"), NULL, 422, "invalid_type",
     "return.head_outputs", "string"},
    {"unknown return.encoding", REQ(",\"return\":{\"encoding\":\"xml\"}"), NULL,
     422, "invalid_value", "return.encoding", "xml|base64"},
    {"unknown member", REQ(",\"bogus\":1"), NULL, 422, "unknown_field", "bogus",
     "bogus"},
    {"unknown mask member", REQ(",\"mask\":{\"causal\":true,\"diag\":1}"), NULL,
     422, "unknown_field", "mask.diag", "mask.diag"},
    {"unknown tensor member",
     "{\"query\":{\"shape\":[1,1],\"data\":[1],\"extra\":1},\"num_heads\":1}",
     NULL, 422, "unknown_field", "query.extra", "query.extra"},
    {"ragged: short row", "{\"query\":[[1,2,3,4],[5,6,7]],\"num_heads\":1}",
     NULL, 422, "ragged_tensor", "query", "query[1]|3|4"},
    {"ragged: number among rows", "{\"query\":[[1,2,3,4],5],\"num_heads\":1}",
     NULL, 422, "ragged_tensor", "query", "query[1]"},
    {"ragged: array among numbers",
     "{\"query\":[[1,2,3,[4]],[5,6,7,8]],\"num_heads\":1}", NULL, 422,
     "ragged_tensor", "query", "query[0][3]"},
    {"string among numbers",
     "{\"query\":[[1,2,\"x\",4],[5,6,7,8]],\"num_heads\":1}", NULL, 422,
     "invalid_type", "query", "query[0][2]|string"},
    {"string among flat data",
     "{\"query\":{\"shape\":[1,2],\"data\":[1,\"2\"]},\"num_heads\":1}", NULL,
     422, "invalid_type", "query", "query.data[1]"},
    {"bad base64 character",
     "{\"query\":{\"shape\":[2,2],\"base64\":\"AAAAAAAA!AAAAAAAAAAAAA==\"},"
     "\"num_heads\":1}",
     NULL, 422, "invalid_base64", "query.base64", "character 8"},
    {"base64 not a string",
     "{\"query\":{\"shape\":[1,1],\"base64\":5},\"num_heads\":1}", NULL, 422,
     "invalid_type", "query.base64", "number"},
    {"flat data size",
     "{\"query\":{\"shape\":[2,4],\"data\":[1,2,3]},"
     "\"num_heads\":1}",
     NULL, 422, "size_mismatch", "query.data", "3 elements|[2, 4]|8"},
    {"base64 size",
     "{\"query\":{\"shape\":[2,4],\"base64\":\"AAAAAAAAAAAAAAAAAAAAAA==\"},"
     "\"num_heads\":1}",
     NULL, 422, "size_mismatch", "query.base64", "32 bytes"},
    {"shape and data and base64",
     "{\"query\":{\"shape\":[1,1],\"data\":[1],\"base64\":\"AAAAAA==\"},"
     "\"num_heads\":1}",
     NULL, 422, "invalid_value", "query", "exactly one"},
    {"shape missing", "{\"query\":{\"data\":[1]},\"num_heads\":1}", NULL, 422,
     "missing_field", "query.shape", "query.shape"},
    {"shape not positive",
     "{\"query\":{\"shape\":[1,0],\"data\":[]},"
     "\"num_heads\":1}",
     NULL, 422, "invalid_value", "query.shape", "query.shape[1]"},
    {"dtype bool for floats",
     "{\"query\":{\"shape\":[1,1],\"dtype\":\"bool\",\"base64\":\"AQ==\"},"
     "\"num_heads\":1}",
     NULL, 422, "invalid_value", "query.dtype", "bool|float32"},
    {"non-finite 1e39", "{\"query\":[[1e39,2,3,4],[5,6,7,8]],\"num_heads\":1}",
     NULL, 422, "non_finite", "query", "query[0][0]"},
    {"non-finite -1e39 in value",
     "{\"query\":" Q24 ",\"value\":[[1,2],[3,-1e39]],\"num_heads\":1}", NULL,
     422, "non_finite", "value", "value[1][1]"},
    {"NaN in base64", NULL, nan_body, 422, "non_finite", "query", "element 2"},
    {"infinity in base64 key", NULL, inf_key_body, 422, "non_finite", "key",
     "element 6"},
    {"non-finite scale", REQ(",\"scale\":1e39"), NULL, 422, "non_finite",
     "scale", "scale"},
    {"rows of key and value differ",
     "{\"query\":" Q24 ",\"key\":[[1,2,3,4],[1,2,3,4],[1,2,3,4]],"
     "\"value\":" Q24 ",\"num_heads\":1}",
     NULL, 422, "shape_mismatch", "value", "[3, 4]|[2, 4]"},
    {"ranks differ", "{\"query\":" Q24 ",\"key\":[[" Q24 "]],\"num_heads\":1}",
     NULL, 422, "shape_mismatch", "key", "rank"},
    {"k_weight columns",
     REQ(",\"projections\":{\"k_weight\":[[1,2,3],[1,2,3],[1,2,3],[1,2,3]]}"),
     NULL, 422, "shape_mismatch", "projections.k_weight", "[4, 3]|4"},
    {"o_bias length", REQ(",\"projections\":{\"o_bias\":[1,2,3]}"), NULL, 422,
     "shape_mismatch", "projections.o_bias", "[3]|4"},
    {"heads do not divide the width", "{\"query\":" Q24 ",\"num_heads\":3}",
     NULL, 422, "heads_mismatch", "query", "[2, 4]|num_heads 3"},
    {"kv heads do not divide",
     "{\"query\":" Q24 ",\"num_heads\":4,\"num_kv_heads\":3}", NULL, 422,
     "heads_mismatch", "num_kv_heads", "3|4"},
    {"q_weight rows and heads",
     "{\"query\":" Q24 ",\"num_heads\":2,\"projections\":{\"q_weight\":"
     "[[1,2,3,4],[1,2,3,4],[1,2,3,4]]}}",
     NULL, 422, "heads_mismatch", "projections.q_weight", "[3, 4]|2"},
    {"num_heads zero", "{\"query\":" Q24 ",\"num_heads\":0}", NULL, 422,
     "invalid_value", "num_heads", "0"},
    {"unknown causal kind", REQ(",\"mask\":{\"causal\":\"diagonal\"}"), NULL,
     422, "invalid_value", "mask.causal", "diagonal|top_left"},
    {"causal a number", REQ(",\"mask\":{\"causal\":1}"), NULL, 422,
     "invalid_type", "mask.causal", "number"},
    {"key_lengths over Lk", REQ(",\"mask\":{\"key_lengths\":[3]}"), NULL, 422,
     "invalid_value", "mask.key_lengths", "3|Lk = 2"},
    {"key_lengths negative", REQ(",\"mask\":{\"key_lengths\":[-1]}"), NULL, 422,
     "invalid_value", "mask.key_lengths", "-1"},
    {"key_lengths per batch item", REQ(",\"mask\":{\"key_lengths\":[1,1]}"),
     NULL, 422, "shape_mismatch", "mask.key_lengths", "[2]|B = 1"},
    {"key_lengths not integers", REQ(",\"mask\":{\"key_lengths\":[1.5]}"), NULL,
     422, "invalid_type", "mask.key_lengths", "key_lengths[0]"},
    {"allow value 2", REQ(",\"mask\":{\"allow\":[[1,2],[1,1]]}"), NULL, 422,
     "invalid_value", "mask.allow", "mask.allow[0][1]|2"},
    {"allow a string", REQ(",\"mask\":{\"allow\":[[true,\"no\"],[1,1]]}"), NULL,
     422, "invalid_type", "mask.allow", "mask.allow[0][1]"},
    {"allow bool byte 2",
     REQ(",\"mask\":{\"allow\":{\"shape\":[2,2],\"dtype\":\"bool\","
         "\"base64\":\"AQIBAQ==\"}}"),
     NULL, 422, "invalid_value", "mask.allow", "byte 1|2"},
    {"allow does not broadcast",
     REQ(",\"mask\":{\"allow\":[[1,1],[1,1],[1,1]]}"), NULL, 422,
     "shape_mismatch", "mask.allow", "[3, 2]|broadcast"},
    {"bias does not broadcast", REQ(",\"mask\":{\"bias\":[[1,1,1],[1,1,1]]}"),
     NULL, 422, "shape_mismatch", "mask.bias", "[2, 3]"},
    {"window left negative", REQ(",\"mask\":{\"window\":{\"left\":-1}}"), NULL,
     422, "invalid_value", "mask.window.left", "-1"},
    {"window unknown side", REQ(",\"mask\":{\"window\":{\"up\":1}}"), NULL, 422,
     "unknown_field", "mask.window.up", "mask.window.up"},
    {"alibi slopes per head",
     "{\"query\":" Q24 ",\"num_heads\":2,\"mask\":{\"alibi\":[0.5]}}", NULL,
     422, "shape_mismatch", "mask.alibi", "[1]|2"},
    {"alibi a string", REQ(",\"mask\":{\"alibi\":\"yes\"}"), NULL, 422,
     "invalid_type", "mask.alibi", "string"},
    {"softcap zero", REQ(",\"softcap\":0"), NULL, 422, "invalid_value",
     "softcap", "softcap"},
    {"timeout_ms zero", REQ(",\"timeout_ms\":0"), NULL, 422, "invalid_value",
     "timeout_ms", "0"},
    /* the same errors in arrays of 64 elements and more */
    {"1e39 in a big query", NULL, big_non_finite, 422, "non_finite", "query",
     "query[3][5]"},
    {"a string in a big query", NULL, big_string, 422, "invalid_type", "query",
     "query[3][5]|string"},
    {"a big query of booleans", NULL, big_booleans, 422, "invalid_type",
     "query", "query[0][0]"},
    {"a big ragged query", NULL, big_ragged, 422, "ragged_tensor", "query",
     "query[6]|15|16"},
    {"2 in a big allow", NULL, big_bad_allow, 422, "invalid_value",
     "mask.allow", "mask.allow[2][3]|2"},
    {"big flat data size", NULL, big_flat_size, 422, "size_mismatch",
     "query.data", "100 elements|[10, 11]|110"},
    {"-1e39 in a big value", NULL, big_value_non_finite, 422, "non_finite",
     "value", "value[7][15]"},
    /* the configured limits: 16, 4, 4096, 16384 bytes, 5000 ms */
    {"max_seq_len (query)", NULL, too_long, 422, "limit_exceeded", "query",
     "17|max_seq_len 16"},
    {"max_seq_len (key)", NULL, key_too_long, 422, "limit_exceeded", "key",
     "17|max_seq_len 16"},
    {"max_heads", NULL, too_many_heads, 422, "limit_exceeded", "num_heads",
     "num_heads 8|max_heads 4"},
    {"max_tensor_elements", NULL, too_many_elements, 422, "limit_exceeded",
     "query", "[16, 300]|4800|max_tensor_elements 4096"},
    {"max_tensor_elements of a reply", NULL, weights_too_many, 422,
     "limit_exceeded", "return.weights", "5120|max_tensor_elements 4096"},
    {"max_response_bytes", NULL, weights_too_large, 422, "limit_exceeded",
     "return.weights", "max_response_bytes 16384"},
    {"max_timeout_ms", REQ(",\"timeout_ms\":6000"), NULL, 422, "limit_exceeded",
     "timeout_ms", "timeout_ms 6000|max_timeout_ms 5000"},
    /* the body is not JSON */
    {"invalid JSON", "{\"query\": [[1, 2]],\n\"num_heads\": 1,\n  ]", NULL, 400,
     "invalid_json", NULL, "line 3|column"},
    {"empty body", "", NULL, 400, "invalid_json", NULL, "line|column"},
};
#define N_ERR (int)(sizeof err_cases / sizeof err_cases[0])

/* Asserts that decoding `body` failed with the error `c` expects. */
static void assert_error(const err_case_t *c, int r, const attnd_request_t *j,
                         const attnd_error_t *e) {
  ck_assert_msg(r == -1 && j == NULL, "%s: decoded", c->name);
  ck_assert_msg(attnd_error_status(e->code) == c->status &&
                    strcmp(attnd_error_name(e->code), c->code) == 0,
                "%s: %d %s (%s: %s), expected %ld %s", c->name,
                attnd_error_status(e->code), attnd_error_name(e->code),
                e->field, e->message, c->status, c->code);
  ck_assert_msg(strcmp(e->field, c->field ? c->field : "") == 0,
                "%s: field '%s', expected '%s' (%s)", c->name, e->field,
                c->field ? c->field : "", e->message);
  char words[256];
  snprintf(words, sizeof words, "%s", c->msg);
  char *save;
  for (char *w = strtok_r(words, "|", &save); w; w = strtok_r(NULL, "|", &save))
    ck_assert_msg(strstr(e->message, w) != NULL,
                  "%s: the message lacks '%s': %s", c->name, w, e->message);
}

START_TEST(test_invalid_request) {
  const err_case_t *c = &err_cases[_i];
  char *made = c->body ? NULL : c->make();
  attnd_request_t *j = (attnd_request_t *)1;
  attnd_error_t e;
  int r = decode(c->body ? c->body : made, &j, &e);
  assert_error(c, r, j, &e);
  free(made);
}
END_TEST

/* The same requests just under the limits decode: the limits, not the
 * shapes, refused them. */
START_TEST(test_limits_boundary) {
  char *bodies[] = {
      zeros_body(0, 16, 4, 1, NULL), /* Lq 16 */
      zeros_body(0, 2, 4, 4, NULL),  /* 4 heads */
      zeros_body(0, 16, 16, 4,
                 "{\"return\":{\"weights\":\"mean\",\"encoding\":"
                 "\"nested\"}}"),
      zeros_body(0, 2, 4, 1, "{\"timeout_ms\":5000}"),
      big_value_body(),
  };
  for (int k = 0; k < 5; k++) {
    attnd_request_t *j = NULL;
    attnd_error_t e;
    ck_assert_msg(decode(bodies[k], &j, &e) == 0, "case %d: %s %s: %s", k,
                  attnd_error_name(e.code), e.field, e.message);
    attnd_request_free(j);
    free(bodies[k]);
  }
}
END_TEST

/* ---- values -------------------------------------------------------------- */

/* A valid request in one tensor form, and what it must decode to. Every
 * shape is fixed: query [B, 4, 8], key and value [B, 16, 8] (128 elements
 * and more: the fast path's size), 2 heads, B = 2 at rank 3. The full
 * variant adds every option: projections for one KV head, a mask of every
 * kind, scale, softcap, id, timeout and every return member. */
typedef struct val_case {
  int form; /* sh_form_t of every tensor, = attnd_form_t */
  int rank; /* 2 or 3 */
  int full;
  /* the body's values */
  float *q, *k, *v, *qw, *kw, *vw, *ob, *bias;
  uint8_t allow[4 * 16];
  int64_t key_lengths[2];
  char id[32];
  attnd_weights_t weights;
  attnd_form_t encoding;
} val_case_t;

enum { VB = 2, VLQ = 4, VLK = 16, VE = 8, VH = 2 };

static void val_case_init(val_case_t *c, int i) {
  memset(c, 0, sizeof *c);
  c->form = i % 3;
  c->rank = 2 + i / 3 % 2;
  c->full = i / 6;
  int64_t B = c->rank == 3 ? VB : 1;
  tu_rng_t r;
  tu_rng_seed(&r, 1000 + (uint64_t)i);
  c->q = tu_rand_floats(&r, (size_t)(B * VLQ * VE), 1);
  c->k = tu_rand_floats(&r, (size_t)(B * VLK * VE), 1);
  c->v = tu_rand_floats(&r, (size_t)(B * VLK * VE), 1);
  c->qw = tu_rand_floats(&r, VE * VE, 1);
  c->kw = tu_rand_floats(&r, VE / VH * VE, 1);
  c->vw = tu_rand_floats(&r, VE / VH * VE, 1);
  c->ob = tu_rand_floats(&r, VE, 1);
  c->bias = tu_rand_floats(&r, VLQ * VLK, 1);
  for (int k = 0; k < VLQ * VLK; k++)
    c->allow[k] = (uint8_t)(k % 3 != 1);
  c->key_lengths[0] = 9;
  c->key_lengths[1] = 16;
  snprintf(c->id, sizeof c->id, "req-%d", i);
  c->weights = !c->full       ? ATTND_WEIGHTS_NONE
               : c->form == 1 ? ATTND_WEIGHTS_MEAN
                              : ATTND_WEIGHTS_PER_HEAD;
  c->encoding =
      (attnd_form_t)(c->full ? (c->form + 1) % 3 : c->form); /* default */
}

static void val_case_free(val_case_t *c) {
  free(c->q);
  free(c->k);
  free(c->v);
  free(c->qw);
  free(c->kw);
  free(c->vw);
  free(c->ob);
  free(c->bias);
}

static char *val_body(const val_case_t *c) {
  static const sh_mask_form_t mask_forms[] = {SH_MASK_BOOLS, SH_MASK_FLAT,
                                              SH_MASK_BASE64_BOOL};
  static const char *const encs[] = {"nested", "flat", "base64"};
  static const char *const wmodes[] = {"none", "per_head", "mean"};
  sh_form_t f = (sh_form_t)c->form;
  int64_t B = c->rank == 3 ? VB : 1;
  int64_t qd[3] = {B, VLQ, VE}, kd[3] = {B, VLK, VE}, r2 = c->rank == 3 ? 0 : 1;
  json_t *r = json_pack(
      "{s:o,s:o,s:o,s:i}", "query", sh_floats_json(c->q, c->rank, qd + r2, f),
      "key", sh_floats_json(c->k, c->rank, kd + r2, f), "value",
      sh_floats_json(c->v, c->rank, kd + r2, f), "num_heads", VH);
  if (c->full) {
    int64_t wd[2] = {VE, VE}, kvd[2] = {VE / VH, VE}, ed[1] = {VE},
            md[2] = {VLQ, VLK};
    json_t *kl = json_array();
    for (int64_t b = 0; b < B; b++)
      json_array_append_new(kl, json_integer(c->key_lengths[b]));
    json_t *more = json_pack(
        "{s:s,s:i,s:f,s:f,s:i,"
        "s:{s:o,s:o,s:o,s:o},"
        "s:{s:s,s:o,s:o,s:o,s:{s:i},s:b},"
        "s:{s:s,s:b,s:b,s:s}}",
        "id", c->id, "num_kv_heads", 1, "scale", 0.5, "softcap", 30.0,
        "timeout_ms", 1234, /* */
        "projections", "q_weight", sh_floats_json(c->qw, 2, wd, f), "k_weight",
        sh_floats_json(c->kw, 2, kvd, f), "v_weight",
        sh_floats_json(c->vw, 2, kvd, f), "o_bias",
        sh_floats_json(c->ob, 1, ed, f), /* */
        "mask", "causal", "top_left", "key_lengths", kl, "allow",
        sh_mask_json(c->allow, 2, md, mask_forms[c->form]), "bias",
        sh_floats_json(c->bias, 2, md, f), "window", "left", 3, "alibi", 1,
        /* */
        "return", "weights", wmodes[c->weights], "head_outputs", 1, "metrics",
        0, "encoding", encs[c->encoding]);
    ck_assert_ptr_nonnull(more);
    json_object_update(r, more);
    json_decref(more);
  }
  return dump(r);
}

/* Asserts that tensor t has shape dim[0..rank) and the bytes of `data`. */
static void assert_tensor(const char *what, const attn_tensor_t *t, int rank,
                          const int64_t *dim, const void *data, size_t esize) {
  ck_assert_msg(t->rank == rank, "%s: rank %d, expected %d", what, t->rank,
                rank);
  size_t n = 1;
  for (int i = 0; i < rank; i++) {
    ck_assert_msg(t->dim[i] == dim[i], "%s: dim[%d] = %lld, expected %lld",
                  what, i, (long long)t->dim[i], (long long)dim[i]);
    n *= (size_t)dim[i];
  }
  ck_assert_msg(t->data && memcmp(t->data, data, n * esize) == 0,
                "%s: the values differ", what);
}

START_TEST(test_values) {
  val_case_t c;
  val_case_init(&c, _i);
  char *body = val_body(&c);
  attnd_request_t *j = NULL;
  attnd_error_t e;
  ck_assert_msg(decode(body, &j, &e) == 0, "case %d: %s %s: %s", _i,
                attnd_error_name(e.code), e.field, e.message);
  const attn_params_t *p = &j->params;
  const attn_plan_t *pl = &j->plan;
  int64_t B = c.rank == 3 ? VB : 1, r2 = c.rank == 3 ? 0 : 1;
  int64_t qd[3] = {B, VLQ, VE}, kd[3] = {B, VLK, VE};
  assert_tensor("query", &p->query, c.rank, qd + r2, c.q, 4);
  assert_tensor("key", &p->key, c.rank, kd + r2, c.k, 4);
  assert_tensor("value", &p->value, c.rank, kd + r2, c.v, 4);
  ck_assert_int_eq(p->num_heads, VH);
  ck_assert_int_eq(pl->batched, c.rank == 3);
  ck_assert_int_eq(pl->B, B);
  ck_assert_int_eq(pl->Lq, VLQ);
  ck_assert_int_eq(pl->Lk, VLK);
  ck_assert_int_eq(pl->H, VH);
  ck_assert_int_eq(pl->Dh, VE / VH);
  ck_assert_int_eq(j->encoding, c.encoding);
  ck_assert_int_eq(j->weights_mode, c.weights);
  ck_assert_int_eq(p->want_weights, c.weights == ATTND_WEIGHTS_PER_HEAD);
  ck_assert_int_eq(p->want_mean_weights, c.weights == ATTND_WEIGHTS_MEAN);
  ck_assert(j->t.decode_ms >= 0);
  if (!c.full) {
    ck_assert_ptr_null(j->id);
    ck_assert_int_eq(p->num_kv_heads, 0);
    ck_assert_int_eq(pl->Hkv, VH);
    ck_assert_ptr_null(p->q_weight.data);
    ck_assert_ptr_null(p->allow.data);
    ck_assert_ptr_null(p->key_lengths.data);
    ck_assert_int_eq(p->causal, ATTN_CAUSAL_NONE);
    ck_assert_int_eq(p->alibi, ATTN_ALIBI_NONE);
    ck_assert(!p->has_scale && !p->has_softcap && !p->has_window_left &&
              !p->has_window_right && !p->want_head_outputs);
    ck_assert_int_eq(j->want_metrics, 1);
    ck_assert_int_eq(j->timeout_ms, cfg.default_timeout_ms);
  } else {
    int64_t wd[2] = {VE, VE}, kvd[2] = {VE / VH, VE}, ed[1] = {VE},
            md[2] = {VLQ, VLK}, bd[1] = {B};
    ck_assert_str_eq(j->id, c.id);
    ck_assert_int_eq(p->num_kv_heads, 1);
    ck_assert_int_eq(pl->Hkv, 1);
    assert_tensor("q_weight", &p->q_weight, 2, wd, c.qw, 4);
    assert_tensor("k_weight", &p->k_weight, 2, kvd, c.kw, 4);
    assert_tensor("v_weight", &p->v_weight, 2, kvd, c.vw, 4);
    assert_tensor("o_bias", &p->o_bias, 1, ed, c.ob, 4);
    ck_assert_ptr_null(p->o_weight.data);
    ck_assert_ptr_null(p->q_bias.data);
    assert_tensor("mask.allow", &p->allow, 2, md, c.allow, 1);
    assert_tensor("mask.bias", &p->bias, 2, md, c.bias, 4);
    assert_tensor("mask.key_lengths", &p->key_lengths, 1, bd, c.key_lengths, 8);
    ck_assert_int_eq(p->causal, ATTN_CAUSAL_TOP_LEFT);
    ck_assert(p->has_window_left && p->window_left == 3 &&
              !p->has_window_right);
    ck_assert_int_eq(p->alibi, ATTN_ALIBI_DEFAULT);
    ck_assert(p->has_scale && p->scale == 0.5f && pl->scale == 0.5f);
    ck_assert(p->has_softcap && p->softcap == 30.0f);
    ck_assert_int_eq(p->want_head_outputs, 1);
    ck_assert_int_eq(j->want_metrics, 0);
    ck_assert_int_eq(j->timeout_ms, 1234);
    ck_assert_int_eq(pl->Eo, VE);
  }
  attnd_request_free(j);
  free(body);
  val_case_free(&c);
}
END_TEST

/* ---- out of memory ------------------------------------------------------- */

/* Whether tensors a and b hold the same shape and bytes. */
static int same_tensor(const attn_tensor_t *a, const attn_tensor_t *b,
                       size_t esize) {
  if (a->rank != b->rank || (a->data == NULL) != (b->data == NULL))
    return 0;
  size_t n = 1;
  for (int i = 0; i < a->rank; i++) {
    if (a->dim[i] != b->dim[i])
      return 0;
    n *= (size_t)a->dim[i];
  }
  return a->data == NULL || memcmp(a->data, b->data, n * esize) == 0;
}

/* Names the first member in which requests a and b differ, or NULL: a
 * decode that met a failed allocation and still succeeded must give the
 * request the body asks for, not one with a byte lost on the way. */
static const char *request_diff(const attnd_request_t *a,
                                const attnd_request_t *b) {
  const attn_params_t *p = &a->params, *q = &b->params;
  struct {
    const char *name;
    const attn_tensor_t *x, *y;
    size_t esize;
  } t[] = {
      {"query", &p->query, &q->query, 4},
      {"key", &p->key, &q->key, 4},
      {"value", &p->value, &q->value, 4},
      {"q_weight", &p->q_weight, &q->q_weight, 4},
      {"k_weight", &p->k_weight, &q->k_weight, 4},
      {"v_weight", &p->v_weight, &q->v_weight, 4},
      {"o_weight", &p->o_weight, &q->o_weight, 4},
      {"q_bias", &p->q_bias, &q->q_bias, 4},
      {"k_bias", &p->k_bias, &q->k_bias, 4},
      {"v_bias", &p->v_bias, &q->v_bias, 4},
      {"o_bias", &p->o_bias, &q->o_bias, 4},
      {"key_lengths", &p->key_lengths, &q->key_lengths, 8},
      {"allow", &p->allow, &q->allow, 1},
      {"bias", &p->bias, &q->bias, 4},
      {"alibi_slopes", &p->alibi_slopes, &q->alibi_slopes, 4},
  };
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
    if (!same_tensor(t[i].x, t[i].y, t[i].esize))
      return t[i].name;
  if ((a->id == NULL) != (b->id == NULL) || (a->id && strcmp(a->id, b->id)))
    return "id";
  if (p->num_heads != q->num_heads || p->num_kv_heads != q->num_kv_heads ||
      p->causal != q->causal || p->alibi != q->alibi ||
      p->has_window_left != q->has_window_left ||
      p->window_left != q->window_left ||
      p->has_window_right != q->has_window_right ||
      p->window_right != q->window_right || p->has_scale != q->has_scale ||
      p->scale != q->scale || p->has_softcap != q->has_softcap ||
      p->softcap != q->softcap || p->want_weights != q->want_weights ||
      p->want_mean_weights != q->want_mean_weights ||
      p->want_head_outputs != q->want_head_outputs)
    return "an option";
  if (a->encoding != b->encoding || a->weights_mode != b->weights_mode ||
      a->want_metrics != b->want_metrics || a->timeout_ms != b->timeout_ms)
    return "a return member or timeout_ms";
  return NULL;
}

/* Bodies for the failures: each tensor form, with a mask and weights
 * requested; one with nothing optional; one with numbers that end where
 * jansson's token buffer grows; and two invalid ones, whose own error must
 * survive any failure that does not end the decoding. */
static char *val_body_of(int i) {
  val_case_t c;
  val_case_init(&c, i);
  char *b = val_body(&c);
  val_case_free(&c);
  return b;
}
static char *oom_nested(void) {
  return val_body_of(6); /* nested, rank 2, every option */
}
static char *oom_flat(void) {
  return val_body_of(10); /* flat, rank 3, every option */
}
static char *oom_plain(void) {
  return val_body_of(1); /* flat, rank 2, nothing optional */
}
/* base64, every option, and a value [16, 64] whose text (5464 characters)
 * the fast path lifts as a long string */
static char *oom_base64(void) {
  char *b = val_body_of(8);
  json_error_t je;
  json_t *r = json_loads(b, 0, &je), *pr = json_object_get(r, "projections");
  free(b);
  float *v = malloc(16 * 64 * sizeof *v);
  for (int i = 0; i < 16 * 64; i++)
    v[i] = (float)(i % 7) * 0.125f;
  int64_t vd[2] = {16, 64};
  json_object_set_new(r, "value", sh_floats_json(v, 2, vd, SH_BASE64));
  free(v);
  json_object_del(pr, "v_weight"); /* for 8 columns */
  json_object_del(pr, "o_bias");   /* for 8 outputs */
  json_object_set_new(json_object_get(r, "return"), "head_outputs",
                      json_false());
  return dump(r);
}
/* The nested body without its closing brace: jansson fails at the end. */
static char *oom_truncated(void) {
  char *b = oom_nested();
  b[strlen(b) - 1] = 0;
  return b;
}

/* Number tokens of 15 and 31 characters: the byte after each is the one
 * that grows jansson's token buffer (16, then 32 bytes). */
static char *oom_long_numbers(void) {
  return strdup("{\"query\":[[0.1234567890123,2,3,4],[5,6,7,8]],"
                "\"num_heads\":1,\"scale\":0.12345678901234567890123456789}");
}

typedef struct oom_case {
  const char *name;
  char *(*make)(void);
  int valid; /* 0: the body fails with its own error */
} oom_case_t;

static const oom_case_t oom_cases[] = {
    {"nested, mask, per-head weights", oom_nested, 1},
    {"flat, rank 3, mask, mean weights", oom_flat, 1},
    {"base64, mask, a long string", oom_base64, 1},
    {"flat, nothing optional", oom_plain, 1},
    {"numbers of 15 and 31 characters", oom_long_numbers, 1},
    {"2 in a big allow", big_bad_allow, 0},
    {"truncated", oom_truncated, 0},
};
#define N_OOM (int)(sizeof oom_cases / sizeof oom_cases[0])
#define N_OOM_VALID 5     /* the valid ones come first */
#define MAX_ALLOCS 100000 /* a bound on the loops, far above any body's */

/* The wrappers are linked, and jansson's allocations reach them (through
 * decode.c's allocator for jansson). */
START_TEST(test_wrappers) {
  ck_assert_msg(alloc_fail_linked(), "linked without ALLOC_FAIL_WRAP");
  alloc_fail_arm(0, 0);
  json_t *o = json_object();
  int injected = alloc_fail_injected();
  alloc_fail_arm(-1, 0);
  ck_assert_msg(o == NULL && injected,
                "jansson's allocations do not reach the wrappers");
  char *body = oom_nested();
  attnd_request_t *j;
  attnd_error_t e;
  alloc_fail_arm(-1, 0); /* restarts the count */
  ck_assert_int_eq(decode(body, &j, &e), 0);
  ck_assert_int_gt(alloc_fail_count(), 10);
  ck_assert(!alloc_fail_injected());
  attnd_request_free(j);
  free(body);
}
END_TEST

/* Decoding: the nth allocation fails (sticky: and every later one), for n
 * = 0, 1, ... until none does. Each call gives out_of_memory (503), or the
 * body's own result, unchanged. */
START_TEST(test_oom_decode) {
  const oom_case_t *c = &oom_cases[_i / 2];
  int sticky = _i % 2;
  char *body = c->make();
  attnd_request_t *ref = NULL;
  attnd_error_t ref_e;
  int ref_r = decode(body, &ref, &ref_e);
  ck_assert_msg(ref_r == (c->valid ? 0 : -1), "%s: %s", c->name, ref_e.message);
  long n, ooms = 0;
  for (n = 0;; n++) {
    ck_assert_msg(n < MAX_ALLOCS, "%s: still failing at %ld", c->name, n);
    attnd_request_t *j = NULL;
    attnd_error_t e;
    alloc_fail_arm(n, sticky);
    int r = decode(body, &j, &e);
    int injected = alloc_fail_injected();
    alloc_fail_arm(-1, 0);
    if (r == 0) {
      ck_assert_msg(c->valid, "%s: allocation %ld failed: decoded", c->name, n);
      const char *d = request_diff(j, ref);
      ck_assert_msg(d == NULL,
                    "%s: allocation %ld failed (sticky %d): %s "
                    "decoded differently",
                    c->name, n, sticky, d);
      attnd_request_free(j);
    } else if (e.code == ATTND_ERR_OUT_OF_MEMORY) {
      ck_assert_ptr_null(j);
      ck_assert_msg(injected, "%s: out_of_memory, but no allocation failed",
                    c->name);
      ck_assert_int_eq(attnd_error_status(e.code), 503);
      ooms++;
    } else {
      ck_assert_ptr_null(j);
      ck_assert_msg(!c->valid && e.code == ref_e.code &&
                        strcmp(e.field, ref_e.field) == 0 &&
                        strcmp(e.message, ref_e.message) == 0,
                    "%s: allocation %ld failed (sticky %d): %s (%s: %s)",
                    c->name, n, sticky, attnd_error_name(e.code), e.field,
                    e.message);
    }
    if (!injected)
      break;
  }
  ck_assert_msg(n > 0 && (ooms > 0 || !sticky),
                "%s: %ld allocations, %ld out_of_memory", c->name, n, ooms);
  attnd_request_free(ref);
  free(body);
}
END_TEST

/* A decoded request for a valid oom case. */
static attnd_request_t *decoded(const char *body) {
  attnd_request_t *j = NULL;
  attnd_error_t e;
  ck_assert_msg(decode(body, &j, &e) == 0, "%s", e.message);
  return j;
}

/* Job setup: the worker's scratch and the outputs. A failure gives
 * ATTN_ENOSPC, in the result too; the request still frees whole. */
START_TEST(test_oom_run) {
  const oom_case_t *c = &oom_cases[_i / 2];
  int sticky = _i % 2;
  char *body = c->make();
  long n;
  for (n = 0;; n++) {
    ck_assert_msg(n < MAX_ALLOCS, "%s: still failing at %ld", c->name, n);
    attnd_request_t *j = decoded(body);
    attnd_scratch_t s = {NULL, 0};
    alloc_fail_arm(n, sticky);
    int r = attnd_request_run(j, 0, &s);
    int injected = alloc_fail_injected();
    alloc_fail_arm(-1, 0);
    if (injected)
      ck_assert_msg(r == ATTN_ENOSPC && j->result == ATTN_ENOSPC,
                    "%s: allocation %ld failed: %d", c->name, n, r);
    else
      ck_assert_msg(r == 0 && j->result == 0, "%s: %d", c->name, r);
    free(s.data);
    attnd_request_free(j);
    if (!injected)
      break;
  }
  ck_assert_msg(n >= 2, "%s: %ld allocations", c->name, n);
  free(body);
}
END_TEST

/* Encoding the reply: a failure marks the buffer oom and nothing else. */
START_TEST(test_oom_encode) {
  const oom_case_t *c = &oom_cases[_i / 2];
  int sticky = _i % 2;
  char *body = c->make();
  attnd_request_t *j = decoded(body);
  attnd_scratch_t s = {NULL, 0};
  ck_assert_int_eq(attnd_request_run(j, 0, &s), 0);
  free(s.data);
  long n;
  for (n = 0;; n++) {
    ck_assert_msg(n < MAX_ALLOCS, "%s: still failing at %ld", c->name, n);
    attnd_buf_t b;
    double total_ms;
    attnd_buf_init(&b);
    alloc_fail_arm(n, sticky);
    attnd_request_encode(j, &b, &total_ms);
    int injected = alloc_fail_injected();
    alloc_fail_arm(-1, 0);
    if (injected) {
      ck_assert_msg(b.oom, "%s: allocation %ld failed: no oom", c->name, n);
    } else {
      ck_assert(!b.oom);
      json_error_t je;
      json_t *v = json_loadb(b.data, b.len, 0, &je);
      ck_assert_msg(v && json_object_get(v, "output"), "%s: %s: %.200s",
                    c->name, je.text, b.data);
      json_decref(v);
    }
    attnd_buf_free(&b);
    if (!injected)
      break;
  }
  ck_assert_msg(n >= 1, "%s: %ld allocations", c->name, n);
  attnd_request_free(j);
  free(body);
}
END_TEST

/* ---- the suite ----------------------------------------------------------- */

Suite *test_suite(void) {
  Suite *s = suite_create("decode");
  TCase *tc = tcase_create("errors");
  tcase_add_loop_test(tc, test_invalid_request, 0, N_ERR);
  tcase_add_test(tc, test_limits_boundary);
  suite_add_tcase(s, tc);

  tc = tcase_create("values");
  tcase_add_loop_test(tc, test_values, 0, 12);
  suite_add_tcase(s, tc);

  tc = tcase_create("oom");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_wrappers);
  tcase_add_loop_test(tc, test_oom_decode, 0, 2 * N_OOM);
  tcase_add_loop_test(tc, test_oom_run, 0, 2 * N_OOM_VALID);
  tcase_add_loop_test(tc, test_oom_encode, 0, 2 * N_OOM_VALID);
  suite_add_tcase(s, tc);
  return s;
}

void test_setup(void) {
  limited_config();
}
