/* tests/check_decode.c: request decoding from strings, with no server.
 *
 * Each case hands a body to attnd_request_decode (server/sched/request.h) under
 * the small limits that check_server's "errors" TCase gives its server
 * (limited_config below mirrors its flags), as jansson tests its loader
 * from strings. TCases:
 *   - errors: one case per error class, each a body and the exact error
 *     expected: HTTP status, code, field and the words of the message that
 *     carry the numbers (also in arrays big enough for the fast path);
 *     the same requests just under the limits; invalid JSON;
 *   - values: valid bodies in every tensor form, rank 2 and 3, and the
 *     decoded request's shapes, data, options, encoding, weights mode and
 *     timeout; integer literals beyond int64 where floats are expected;
 *     base64 texts whose '/' are escaped (\/, as PHP sends them, and
 *     \u002f) decode to the same request as plain ones;
 *   - paths: the fast path is invisible (tests/decode_diff.h): every body
 *     above, and bodies made to tell the paths apart, decode to the same
 *     request or the same error by jansson alone and by the fast path, as
 *     /v1 requests and as session steps;
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
#include <unistd.h>

#include "alloc_fail.h"
#include "api/decode.h"
#include "attn/attn.h"
#include "codec/base64.h"
#include "codec/util.h"
#include "config.h"
#include "decode_diff.h"
#include "doc_names.h"
#include "layer_files.h"
#include "sched/request.h"
#include "sched/run.h"
#include "server_harness.h"
#include "store/session.h"
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
  return attnd_request_decode(body, strlen(body), &cfg, NULL, out, e);
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
/* a flat query [10, 10] (the fast path's bulk data) with a dtype beside
 * its data */
static char *big_flat_dtype(void) {
  char *g = grid(1, 100, -1, -1, "", "0.25"); /* "[[...]]" */
  g[strlen(g) - 1] = 0;                       /* "[[..." → "[...]" */
  char *b = malloc(strlen(g) + 128);
  sprintf(b,
          "{\"query\":{\"shape\":[10,10],\"data\":%s,\"dtype\":"
          "\"float16\"},\"num_heads\":1}",
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

/* {"id": <`n` repetitions of unit>, query [8, 16], num_heads 1}: the query
 * is big enough for the fast path. */
static char *id_body(const char *unit, int n) {
  size_t cap = (size_t)n * strlen(unit) + 16, len = 0;
  char *id = malloc(cap), *extra = malloc(cap + 16);
  for (int k = 0; k < n; k++)
    len += (size_t)snprintf(id + len, cap - len, "%s", unit);
  snprintf(extra, cap + 16, ",\"id\":\"%s\"", id);
  char *b = grid_body(-1, -1, "", "0.25", extra);
  free(id);
  free(extra);
  return b;
}
/* issue 11, defect 2: the fast path lifted an id of 1024 characters and
 * more, and the reply echoed its placeholder */
static char *long_id(void) {
  return id_body("A", 1500);
}
static char *long_escaped_id(void) {
  return id_body("\\/", 1500);
}

static char *big_beyond_double(void) {
  return grid_body(7, 15, "1e99999", "0.25", "");
}
/* ,"num_heads":<an integer of 400 digits> */
#define INT40 "9999999999999999999999999999999999999999"
#define INT400                                                                 \
  ",\"num_heads\":" INT40 INT40 INT40 INT40 INT40 INT40 INT40 INT40 INT40 INT40

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
     NULL, 422, "size_mismatch", "query.base64",
     "query.base64 has 24 characters, but 8 float32 elements need 32 bytes, "
     "44 characters of base64"},
    /* 3 of 4 float32s: 16 characters, as many as the bytes of 4 (it said
     * the 16 characters "cannot hold the 16 bytes") */
    {"base64 size, 3 of 4 float32s",
     "{\"query\":{\"shape\":[1,4],\"base64\":\"AAAAAAAAAAAAAAAA\"},"
     "\"num_heads\":1}",
     NULL, 422, "size_mismatch", "query.base64",
     "query.base64 has 16 characters, but 4 float32 elements need 16 bytes, "
     "24 characters of base64"},
    /* a line break, as `base64` writes one every 76 characters: named as
     * the cause, not the length it makes wrong */
    {"base64 with a line break",
     "{\"query\":{\"shape\":[1,4],\"base64\":\"AAAAAAAAAAAAAAAA\\nAAAAAAAA\"},"
     "\"num_heads\":1}",
     NULL, 422, "invalid_base64", "query.base64",
     "query.base64 is not valid base64 at character 16, a line break"},
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
    /* dtype describes base64's bytes: beside data it was ignored, whatever
     * it named */
    {"dtype with flat data",
     "{\"query\":{\"shape\":[1,2],\"data\":[1,2],\"dtype\":\"int8\"},"
     "\"num_heads\":1}",
     NULL, 422, "unknown_field", "query.dtype", "query.dtype|base64"},
    {"dtype with flat mask data",
     REQ(",\"mask\":{\"allow\":{\"shape\":[2,2],\"data\":[1,1,1,1],"
         "\"dtype\":\"bool\"}}"),
     NULL, 422, "unknown_field", "mask.allow.dtype", "mask.allow.dtype"},
    {"dtype with big flat data", NULL, big_flat_dtype, 422, "unknown_field",
     "query.dtype", "query.dtype|base64"},
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
    /* the core's message names the field by the request's path, as
     * `field` does, not by the core's own name (positions_query) */
    {"position negative", REQ(",\"rope\":{},\"positions\":{\"query\":[-1,2]}"),
     NULL, 422, "invalid_value", "positions.query", "positions.query[0] is -1"},
    {"q_weight columns", REQ(",\"projections\":{\"q_weight\":[[1,2],[3,4]]}"),
     NULL, 422, "shape_mismatch", "projections.q_weight",
     "projections.q_weight [2, 2]"},
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
    /* long strings, which the fast path must not lift (issue 11) */
    {"an id of 1500 characters", NULL, long_id, 422, "invalid_value", "id",
     "1500 bytes|at most 256"},
    {"an id of 1500 escaped characters", NULL, long_escaped_id, 422,
     "invalid_value", "id", "1500 bytes|at most 256"},
    /* integers beyond int64: valid JSON, 422 where an integer is expected
     * (issue 11, defect 6) */
    {"num_heads beyond int64",
     "{\"query\":" Q24 ",\"num_heads\":18446744073709551616}", NULL, 422,
     "invalid_value", "num_heads", "1.84467441e+19|1 to 9223372036854775807"},
    {"timeout_ms beyond int64", REQ(",\"timeout_ms\":99999999999999999999"),
     NULL, 422, "invalid_value", "timeout_ms", "1e+20|9223372036854775807"},
    {"window.left beyond int64",
     REQ(",\"mask\":{\"window\":{\"left\":9223372036854775808}}"), NULL, 422,
     "invalid_value", "mask.window.left", "0 to 9223372036854775807"},
    {"window.right below int64",
     REQ(",\"mask\":{\"window\":{\"right\":-18446744073709551616}}"), NULL, 422,
     "invalid_value", "mask.window.right", "-1.84467441e+19"},
    {"shape beyond int64",
     "{\"query\":{\"shape\":[18446744073709551616,1],\"data\":[1]},"
     "\"num_heads\":1}",
     NULL, 422, "invalid_value", "query.shape",
     "query.shape[0]|9223372036854775807"},
    {"key_lengths beyond int64",
     REQ(",\"mask\":{\"key_lengths\":[18446744073709551616]}"), NULL, 422,
     "invalid_value", "mask.key_lengths", "mask.key_lengths[0]|1.84467441e+19"},
    {"shape fractional",
     "{\"query\":{\"shape\":[1.5,1],\"data\":[1]},"
     "\"num_heads\":1}",
     NULL, 422, "invalid_type", "query.shape", "query.shape[0]|fractional"},
    {"beyond int64 and then a syntax error",
     "{\"query\":" Q24 ",\"num_heads\":18446744073709551616,\n  ]", NULL, 400,
     "invalid_json", NULL, "line 2, column 3"},
    {"beyond int64 in a float that overflows float32",
     "{\"query\":[[340282366920938463463374607431768211456,2,3,4],[5,6,7,8]],"
     "\"num_heads\":1}",
     NULL, 422, "non_finite", "query", "query[0][0]"},
    /* numbers beyond a double's range, valid JSON too */
    {"scale beyond double", REQ(",\"scale\":1e400"), NULL, 422, "non_finite",
     "scale", "at least 9e+307"},
    {"a query element beyond double",
     "{\"query\":[[1,2,3,4],[5,6,-1e400,8]],\"num_heads\":1}", NULL, 422,
     "non_finite", "query", "query[1][2]|at most -9e+307"},
    {"a big query element beyond double", NULL, big_beyond_double, 422,
     "non_finite", "query", "query[7][15]|at least 9e+307"},
    {"an integer beyond double", "{\"query\":" Q24 INT400 "}", NULL, 422,
     "invalid_value", "num_heads", "at least 9e+307|1 to"},
    {"allow beyond double", REQ(",\"mask\":{\"allow\":[[1,1],[1,1e999]]}"),
     NULL, 422, "invalid_value", "mask.allow",
     "mask.allow[1][1]|at least 9e+307"},
    /* any JSON value is a text; the request must be an object */
    {"request null", "null", NULL, 422, "invalid_type", NULL, "null"},
    {"request a number", " 5 ", NULL, 422, "invalid_type", NULL, "number"},
    {"request a string", "\"query\"", NULL, 422, "invalid_type", NULL,
     "string"},
    {"request 1e400", "1e400", NULL, 422, "invalid_type", NULL, "number"},
    {"request true then junk", "true false", NULL, 400, "invalid_json", NULL,
     "line 1"},
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

/* A query of 2^20 + 1 rows, of a size that the limits on its elements and
 * bytes take, passes the core's 2^40 elements of weights (Lq·Lk, "problem
 * too large"): refused by max_seq_len, the limit that names it, as a short
 * one is, unbatched and batched. */
START_TEST(test_limits_before_core) {
  attnd_config_t lim = cfg;
  lim.max_tensor_elements = 1 << 21;
  lim.max_body_bytes = 64 << 20;
  const int64_t L = ((int64_t)1 << 20) + 1;
  for (int B = 0; B < 2; B++) {
    char *body = zeros_body(B, L, 1, 1, NULL);
    attnd_request_t *j = NULL;
    attnd_error_t e;
    int r = attnd_request_decode(body, strlen(body), &lim, NULL, &j, &e);
    free(body);
    ck_assert_msg(r == -1 && j == NULL, "B %d: decoded", B);
    ck_assert_str_eq(attnd_error_name(e.code), "limit_exceeded");
    ck_assert_str_eq(e.field, "query");
    ck_assert_str_eq(e.message, "query length 1048577 is over max_seq_len 16");
  }
}
END_TEST

/* max_json_structure_bytes counts the body's JSON outside tensor data and
 * long strings, on both paths alike: a body with megabytes of lifted
 * tensor and long ids decodes under a 4K limit; 4K of anything else (a
 * long member name, nesting, short strings) is 413 before jansson reads
 * it, on both paths, and at the limit it is not. */
START_TEST(test_structure_limit) {
  attnd_config_t small = cfg;
  small.max_json_structure_bytes = 4096;
  small.max_seq_len = 4096;
  small.max_tensor_elements = 1 << 20;
  small.max_body_bytes = 64 << 20;
  small.max_response_bytes = 64 << 20;
  attnd_buf_t b;
  attnd_buf_init(&b);
  /* a 4096 x 8 query (lifted) and a 2000-byte id of escapes (lifted) */
  attnd_buf_puts(&b, "{\"id\":\"");
  for (int i = 0; i < 1000; i++)
    attnd_buf_puts(&b, "\\\\u");
  attnd_buf_puts(&b, "\",\"num_heads\":1,\"query\":[");
  for (int i = 0; i < 4096; i++)
    attnd_buf_puts(&b, i ? ",[1,2,3,4,5,6,7,8]" : "[1,2,3,4,5,6,7,8]");
  attnd_buf_puts(&b, "]}");
  attnd_request_t *j = NULL;
  attnd_error_t e;
  ck_assert_int_eq(attnd_request_decode(b.data, b.len, &small, NULL, &j, &e),
                   -1);
  ck_assert_str_eq(attnd_error_name(e.code), "invalid_value"); /* the id */
  ck_assert_str_eq(e.field, "id");
  ck_assert_msg(strstr(e.message, "2000 bytes"), "%s", e.message);
  attnd_request_free(j);
  j = NULL;
  /* over: a member name padded to make the structure 4097 bytes, then
   * 4096 (each on both paths) */
  for (int over = 1; over >= 0; over--) {
    attnd_buf_t c;
    attnd_buf_init(&c);
    attnd_buf_puts(&c, "{\"");
    size_t pad = 4096 + (size_t)over - 29; /* the rest: 29 bytes */
    for (size_t i = 0; i < pad; i++)
      attnd_buf_puts(&c, "x");
    attnd_buf_puts(&c, "\":1,\"num_heads\":1,\"query\":[");
    for (int i = 0; i < 64; i++)
      attnd_buf_puts(&c, i ? ",1" : "1");
    attnd_buf_puts(&c, "]}");
    for (int fast = 0; fast < 2; fast++) {
      int r =
          attnd__request_decode_path(c.data, c.len, &small, NULL, fast, &j, &e);
      ck_assert_int_eq(r, -1);
      if (over) {
        ck_assert_str_eq(attnd_error_name(e.code), "payload_too_large");
        ck_assert_msg(strstr(e.message, "4097 bytes of JSON outside tensor "
                                        "data") &&
                          strstr(e.message, "max_json_structure_bytes 4096"),
                      "%s", e.message);
      } else {
        ck_assert_str_eq(attnd_error_name(e.code), "unknown_field");
      }
    }
    attnd_buf_free(&c);
  }
  attnd_buf_free(&b);
}
END_TEST

/* A token jansson refuses in a tensor's array of numbers (at its start,
 * in its middle, at its end, or the text ending in it) is invalid_json at
 * that token's line and column, as jansson reading the whole body says,
 * however long the array: not 413 for the array counted as structure
 * (over a 4096-byte limit, which the array alone is over), and on the
 * fast path without jansson reading the body whole (under the default
 * limit too). Before the line and column: a line break in the head and
 * in the array, and 2-byte characters (one column each) on the array's
 * first line. */
START_TEST(test_big_array_syntax_error) {
  const char *token = bad_array_tokens[_i];
  attnd_config_t lim = cfg;
  lim.max_tensor_elements = 1 << 20;
  lim.max_seq_len = 1 << 20;
  const char *heads[] = {
      "{\"num_heads\":1,\n\"id\":\"\xc3\xa9t\xc3\xa9\",\"query\":{\"shape\":"
      "[1,2000],\"data\":",
      "{\"num_heads\":1, \"query\":",
  };
  const char *tails[] = {"}}", "}"};
  for (int layout = 0; layout < 2; layout++)
    for (int where = 0; where < 3; where++) {
      int n = 2000, at = where == 0 ? 0 : where == 1 ? n / 2 : n;
      if (token && token[0] == ']' && at < n && at % (layout ? 8 : n) == 0)
        continue; /* "[]": an empty array, the numbers after it structure */
      size_t len;
      char *body;
      if (layout == 0) {
        body = bad_array_body(heads[0], n, at, token, tails[0], &len);
      } else { /* [250, 8]: the token in a row, or after the rows */
        char *g = grid(250, 8, at == n ? -1 : at / 8, at % 8,
                       token ? token : "0.25", "0.25");
        size_t gl = strlen(g);
        if (at == n) /* "...]]" to "...],<token>]" */
          g[gl - 1] = 0;
        body = malloc(gl + 64);
        len = (size_t)sprintf(body, "%s%s%s%s%s", heads[1], g,
                              at == n ? "," : "", at == n && token ? token : "",
                              at == n ? "]}" : tails[1]);
        if (token == NULL) /* the text ends before the token */
          len = (size_t)(strstr(body, ",0.25]") - body) + 5;
        free(g);
      }
      char want[256];
      ck_assert_msg(json_error_reference(body, len, want, sizeof want) == 0,
                    "token %s: jansson reads the body", token);
      for (int limit = 0; limit < 2; limit++) {
        lim.max_json_structure_bytes =
            limit ? cfg.max_json_structure_bytes : 4096;
        for (int fast = 0; fast < 2; fast++) {
          attnd_request_t *j = NULL;
          attnd_error_t e;
          uint64_t slow = attnd__decode_slow_runs;
          int r =
              attnd__request_decode_path(body, len, &lim, NULL, fast, &j, &e);
          ck_assert_msg(
              r == -1 && attnd_error_status(e.code) == 400 &&
                  strcmp(attnd_error_name(e.code), "invalid_json") == 0 &&
                  e.field[0] == 0 && strcmp(e.message, want) == 0,
              "token %s, layout %d, at %d, limit %lld, fast %d: "
              "%d %s (%s) %s; expected %s",
              token, layout, at, (long long)lim.max_json_structure_bytes, fast,
              attnd_error_status(e.code), attnd_error_name(e.code), e.field,
              e.message, want);
          if (fast)
            ck_assert_msg(attnd__decode_slow_runs == slow,
                          "token %s: the body was read whole", token);
          attnd_request_free(j);
        }
      }
      free(body);
    }
}
END_TEST

/* A NUL byte anywhere is invalid_json at its place, on either path, with
 * or without a tensor the fast path lifts: jansson took `1<NUL>,` for `1,`
 * (it loses a NUL it reads past after a number), and said "end of file
 * expected near end of file" of one after the text. Before its place, a
 * line break. */
START_TEST(test_nul_byte) {
  static const char *const heads[] = {"{\"num_heads\":1", "{\"num_heads\":1,",
                                      "{\"num_heads\":1,\"query\":"};
  attnd_buf_t rows;
  attnd_buf_init(&rows);
  attnd_buf_puts(&rows, "[");
  for (int i = 0; i < 300; i++) /* lifted on the fast path */
    attnd_buf_printf(&rows, "%s[%d,0.5]", i ? "," : "", i);
  attnd_buf_puts(&rows, "]");
  for (int big = 0; big < 2; big++)
    for (int where = 0; where < 5; where++) {
      /* where: after the number 1, after a comma, inside the query's
       * array of numbers, after the text, and last after the number 1, the
       * text unfinished (jansson's error then lies at the NUL) */
      attnd_buf_t b;
      attnd_buf_init(&b);
      attnd_buf_puts(&b, "\n");
      const char *q = big ? rows.data : "[[1,2]]";
      size_t at = 0;
      if (where < 2) {
        attnd_buf_puts(&b, heads[where]);
        at = b.len;
        attnd_buf_append(&b, "\0", 1);
        attnd_buf_printf(&b, "%s\"query\":%s}", where ? "" : ",", q);
      } else if (where == 2) {
        attnd_buf_puts(&b, heads[2]);
        attnd_buf_puts(&b, "[[1");
        at = b.len;
        attnd_buf_append(&b, "\0", 1);
        attnd_buf_printf(&b, ",2]%s%s}", big ? "," : "]",
                         big ? rows.data + 1 : "");
      } else if (where == 3) {
        attnd_buf_printf(&b, "%s,\"query\":%s}", heads[0], q);
        at = b.len;
        attnd_buf_append(&b, "\0", 1);
      } else {
        attnd_buf_printf(&b, "{\"query\":%s,%s", q, heads[0] + 1);
        at = b.len;
        attnd_buf_append(&b, "\0", 1);
      }
      char want[96];
      snprintf(want, sizeof want, "line 2, column %zu: a NUL byte (byte %zu)",
               at, at);
      for (int fast = 0; fast < 2; fast++) {
        attnd_request_t *j = NULL;
        attnd_error_t e;
        int r =
            attnd__request_decode_path(b.data, b.len, &cfg, NULL, fast, &j, &e);
        ck_assert_msg(
            r == -1 && strcmp(attnd_error_name(e.code), "invalid_json") == 0 &&
                strstr(e.message, want),
            "big %d, where %d, fast %d: %d %s: %s; expected %s", big, where,
            fast, r, r ? attnd_error_name(e.code) : "-", r ? e.message : "",
            want);
        attnd_request_free(j);
      }
      attnd_buf_free(&b);
    }
  attnd_buf_free(&rows);
}
END_TEST

/* A value that is JSON but no number (an object, a string, null) in a big
 * array is no syntax error: the array is no tensor data, and over the
 * limit it counts as structure (413); under it, the decoder names it. */
START_TEST(test_big_array_json_value) {
  static const char *const values[] = {"{\"a\":1}", "\"x\"", "null"};
  attnd_config_t lim = cfg;
  lim.max_tensor_elements = 1 << 20;
  lim.max_seq_len = 1 << 20;
  for (int v = 0; v < 3; v++) {
    size_t len;
    char *body = bad_array_body(
        "{\"num_heads\":1,\"query\":{\"shape\":[1,2000],\"data\":", 2000, 1000,
        values[v], "}}", &len);
    for (int limit = 0; limit < 2; limit++) {
      lim.max_json_structure_bytes =
          limit ? cfg.max_json_structure_bytes : 4096;
      attnd_request_t *j = NULL;
      attnd_error_t e;
      int r = attnd_request_decode(body, len, &lim, NULL, &j, &e);
      ck_assert_int_eq(r, -1);
      ck_assert_str_eq(attnd_error_name(e.code),
                       limit ? "invalid_type" : "payload_too_large");
      if (limit)
        ck_assert_msg(strstr(e.message, "query.data[1000]"), "%s", e.message);
    }
    free(body);
  }
}
END_TEST

/* Decoding case c gave `want`: "ok", or the name of its error. */
static void assert_outcome(int r, const attnd_error_t *e, const char *want,
                           size_t c) {
  const char *got = r ? attnd_error_name(e->code) : "ok";
  ck_assert_msg(strcmp(got, want) == 0, "case %zu: %s: %s", c, got,
                r ? e->message : "");
}

/* Case c's body decodes alike on both paths (tests/decode_diff.h). */
static void assert_paths_agree(const char *body, size_t len,
                               const attnd_config_t *cf, size_t c) {
  char why[1024];
  ck_assert_msg(decode_diff(body, len, cf, why, sizeof why) == 0,
                "case %zu: %s", c, why);
}

/* Every array of numbers under a tensor's member is lifted, however small:
 * a few numbers read by jansson's tree cost several times what the
 * scanner does. Each body decodes with no whole-body parse by jansson, and
 * both paths give the same request. */
START_TEST(test_small_arrays_lifted) {
  static const char *const bodies[] = {
      "{\"num_heads\":2,\"query\":[[0.5,-1,2,3],[4,5,6,7]]}",
      "{\"num_heads\":1,\"query\":[[1]],\"key\":[[2],[3]],"
      "\"value\":[[4],[5]],\"mask\":{\"allow\":[[true,false]]}}",
      "{\"num_heads\":1,\"query\":{\"shape\":[1,2],\"data\":[1,2]}}",
      "{\"num_heads\":2,\"query\":[[1,2],[3,4]],\"mask\":"
      "{\"alibi\":[0.5,0.25]}}",
      "{\"num_heads\":1,\"rope\":{},\"query\":[[1,2],[3,4]],"
      "\"positions\":{\"query\":[7,9]}}",
  };
  for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
    attnd_request_t *j = NULL;
    attnd_error_t e;
    uint64_t before = attnd__decode_slow_runs;
    int r = decode(bodies[i], &j, &e);
    ck_assert_msg(r == 0, "body %zu: %s", i, e.message);
    ck_assert_msg(attnd__decode_slow_runs == before,
                  "body %zu was parsed whole by jansson", i);
    attnd_request_free(j);
    assert_paths_agree(bodies[i], strlen(bodies[i]), &cfg, i);
  }
}
END_TEST

/* The fast path falls back to jansson on the whole body only when it must
 * (issue 11: a hostile body could otherwise have jansson read every
 * megabyte of its tensors again): not for an error elsewhere, nor for
 * tensor-named members in other places, nor for a batch of 64 key lengths
 * (never lifted); but for a lifted tensor's bad values, whose words are the
 * slow path's, and for a body that is not JSON. */
START_TEST(test_slow_path_only_when_needed) {
  static const struct {
    const char *tail; /* after a lifted 64 x 1 x 2 query */
    int slow;
    const char *code;
  } cases[] = {
      {",\"num_heads\":\"x\"}", 0, "invalid_type"},
      {",\"num_heads\":1,\"mask\":{\"query\":[QQ]}}", 0, "unknown_field"},
      {",\"num_heads\":1,\"shape\":[QQ]}", 0, "unknown_field"},
      {",\"num_heads\":1,\"mask\":{\"key_lengths\":[KL]}}", 0, "ok"},
      {",\"num_heads\":1,\"key\":[[1e39,QQ]]}", 1, "non_finite"},
      {",\"num_heads\":1,\"key\":{\"shape\":[2,64],\"data\":[[QQ],[QQ]]}}", 1,
       "size_mismatch"},
      {",\"num_heads\":1", 1, "invalid_json"},
  };
  char qq[512] = "", kl[512] = "";
  for (int i = 0; i < 64; i++) {
    strcat(qq, i ? ",1" : "1");
    strcat(kl, i ? ",1" : "1");
  }
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    attnd_buf_t b;
    attnd_buf_init(&b);
    attnd_buf_puts(&b, "{\"query\":[");
    for (int i = 0; i < 64; i++)
      attnd_buf_puts(&b, i ? ",[[1,2]]" : "[[1,2]]");
    attnd_buf_puts(&b, "]");
    for (const char *p = cases[c].tail; *p; p++) {
      if (p[0] == 'Q' && p[1] == 'Q')
        attnd_buf_puts(&b, qq), p++;
      else if (p[0] == 'K' && p[1] == 'L')
        attnd_buf_puts(&b, kl), p++;
      else
        attnd_buf_append(&b, p, 1);
    }
    attnd_config_t big = cfg;
    big.max_batch = 64;
    attnd_request_t *j = NULL;
    attnd_error_t e;
    uint64_t before = attnd__decode_slow_runs;
    int r = attnd__request_decode_path(b.data, b.len, &big, NULL, 1, &j, &e);
    assert_outcome(r, &e, cases[c].code, c);
    ck_assert_msg(attnd__decode_slow_runs - before == (uint64_t)cases[c].slow,
                  "case %zu: the slow path ran %llu times", c,
                  (unsigned long long)(attnd__decode_slow_runs - before));
    assert_paths_agree(b.data, b.len, &big, c);
    attnd_request_free(j);
    attnd_buf_free(&b);
  }
}
END_TEST

/* Positions of 64 or more are lifted as arrays (under "query" and "key")
 * and read exactly as int64 again (attnd_bulk_ints): integers up to 2^31
 * and beyond int32, integral reals, on both paths alike; a fractional or
 * out-of-range one gets the slow path's words. */
START_TEST(test_lifted_positions) {
  static const char *const spell[] = {"%d", "%d.0", "%de0", "%d"};
  static const struct {
    const char *last; /* the last position, spliced in */
    const char *code; /* "ok" or the error */
    int slow;         /* the whole body read again the slow way */
  } cases[] = {
      {"2147483647", "ok", 0},
      {"2147483648", "invalid_value", 0}, /* the core's range */
      {"1.5", "invalid_type", 1},
      {"-1", "invalid_value", 0},
      {"99999999999999999999", "invalid_value", 1},
      {"7", "ok", 0},
  };
  attnd_config_t big = cfg;
  big.max_seq_len = 128;
  big.max_tensor_elements = 1 << 16;
  big.max_response_bytes = 1 << 24;
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    attnd_buf_t b;
    attnd_buf_init(&b);
    attnd_buf_puts(&b, "{\"num_heads\":1,\"rope\":{},\"query\":[");
    for (int i = 0; i < 70; i++)
      attnd_buf_puts(&b, i ? ",[1,2,3,4]" : "[1,2,3,4]");
    attnd_buf_puts(&b, "],\"positions\":{\"query\":[");
    for (int i = 0; i < 69; i++) {
      char num[32];
      snprintf(num, sizeof num, spell[(size_t)i % 4], 1000 + i);
      attnd_buf_puts(&b, num);
      attnd_buf_puts(&b, ",");
    }
    attnd_buf_puts(&b, cases[c].last);
    attnd_buf_puts(&b, "],\"key\":[[");
    for (int i = 0; i < 70; i++)
      attnd_buf_puts(&b, i ? ",5" : "5");
    attnd_buf_puts(&b, "]]}}");
    attnd_request_t *j = NULL;
    attnd_error_t e;
    uint64_t before = attnd__decode_slow_runs;
    int r = attnd_request_decode(b.data, b.len, &big, NULL, &j, &e);
    assert_outcome(r, &e, cases[c].code, c);
    ck_assert_int_eq(attnd__decode_slow_runs - before, cases[c].slow);
    if (r == 0) {
      const int64_t *pq = j->params.positions_query.data;
      ck_assert_int_eq(j->params.positions_query.rank, 1);
      ck_assert_int_eq(pq[68], 1068);
      ck_assert_int_eq(pq[69], atoll(cases[c].last));
      ck_assert_int_eq(j->params.positions_key.rank, 2);
    } else {
      ck_assert_str_eq(e.field, "positions.query");
    }
    assert_paths_agree(b.data, b.len, &big, c);
    attnd_request_free(j);
    attnd_buf_free(&b);
  }
}
END_TEST

/* Layer requests decode the same on both paths: a small query, a lifted
 * one, positions, and each error of a layer request. */
START_TEST(test_layer_paths_agree) {
  char path[64], msg[512];
  snprintf(path, sizeof path, "/tmp/attnd-decode-layer-%d.safetensors",
           (int)getpid());
  lf_shape_t shape = {.E = 8, .H = 2, .bias = LF_BIAS_ALL};
  const char *meta[] = {"num_heads", "2", "rope_theta", "100", NULL};
  ck_assert_msg(lf_write(path, LF_TORCH_MHA, ATTND_ST_F32, "L.", &shape, 3,
                         meta, NULL, msg, sizeof msg) == 0,
                "%s", msg);
  attnd_layer_set_t *set = NULL;
  ck_assert_msg(attnd_layers_load(path, &set, msg, sizeof msg) == 0, "%s", msg);
  unlink(path);
  attnd_buf_t q;
  attnd_buf_init(&q);
  for (int i = 0; i < 16; i++)
    attnd_buf_puts(&q, i ? ",[1,2,3,4,5,6,7,8]" : "[1,2,3,4,5,6,7,8]");
  char *bodies[] = {
      "{\"layer\":\"L\",\"query\":[[1,2,3,4,5,6,7,8]]}",
      NULL, /* the lifted query */
      "{\"layer\":\"L\",\"query\":[[1,2,3,4,5,6,7,8]],\"positions\":{"
      "\"query\":[7],\"key\":[7]}}",
      "{\"layer\":\"M\",\"query\":[[1]]}",
      "{\"layer\":\"L\",\"query\":[[1,2]]}",
      "{\"layer\":\"L\",\"query\":[[1,2,3,4,5,6,7,8]],\"num_heads\":4}",
      "{\"layer\":\"L\",\"query\":[[1,2,3,4,5,6,7,8]],\"rope\":{}}",
  };
  attnd_buf_t lifted;
  attnd_buf_init(&lifted);
  attnd_buf_puts(&lifted, "{\"layer\":\"L\",\"query\":[");
  attnd_buf_append(&lifted, q.data, q.len);
  attnd_buf_puts(&lifted, "]}");
  bodies[1] = lifted.data;
  static const char *const want[] = {"ok",
                                     "ok",
                                     "ok",
                                     "unknown_layer",
                                     "shape_mismatch",
                                     "heads_mismatch",
                                     "invalid_value"};
  decode_diff_set_layers(set);
  for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
    attnd_request_t *j = NULL;
    attnd_error_t e;
    int r =
        attnd_request_decode(bodies[i], strlen(bodies[i]), &cfg, set, &j, &e);
    assert_outcome(r, &e, want[i], i);
    if (r == 0)
      ck_assert_ptr_eq(j->layer, attnd_layer_set_find(set, "L"));
    attnd_request_free(j);
    assert_paths_agree(bodies[i], strlen(bodies[i]), &cfg, i);
  }
  decode_diff_set_layers(NULL);
  attnd_layer_set_unref(set);
  attnd_buf_free(&q);
  attnd_buf_free(&lifted);
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
  double t0 = attnd_now_ms();
  ck_assert_msg(decode(body, &j, &e) == 0, "case %d: %s %s: %s", _i,
                attnd_error_name(e.code), e.field, e.message);
  double took = attnd_now_ms() - t0;
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
  /* the decoder's own time: some, and no more than the call took */
  ck_assert_msg(j->t.decode_ms > 0 && j->t.decode_ms <= took,
                "decode_ms %g, the call took %g ms", j->t.decode_ms, took);
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

/* Integers beyond int64, which jansson reads only from the widened copy
 * of the text (server/api/decode.c): a second parse to fail in. */
static char *oom_big_int(void) {
  return strdup("{\"query\":[[18446744073709551616,2,3,4],[5,6,7,8]],"
                "\"num_heads\":1,\"scale\":99999999999999999999}");
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
    {"integers beyond int64", oom_big_int, 1},
    {"2 in a big allow", big_bad_allow, 0},
    {"truncated", oom_truncated, 0},
};
#define N_OOM (int)(sizeof oom_cases / sizeof oom_cases[0])
#define N_OOM_VALID 6     /* the valid ones come first */
#define MAX_ALLOCS 100000 /* a bound on the loops, far above any body's */

/* Ends what alloc_fail_arm began: whether a failure was injected since. */
static int alloc_fail_disarm(void) {
  int injected = alloc_fail_injected();
  alloc_fail_arm(-1, 0);
  return injected;
}

/* The oom tests' loop over i: each case four times, sticky (odd i) or not,
 * with the regions and arenas or without (set here, oom_end sets them back).
 * Returns the case, its body (made here) in *body. */
static const oom_case_t *oom_begin(int i, int *sticky, char **body) {
  const oom_case_t *c = &oom_cases[i / 4];
  *sticky = i % 2;
  attnd__arenas = i / 2 % 2;
  *body = c->make();
  return c;
}

/* Ends what oom_begin began: frees the body it made and turns the regions
 * and arenas back on for the tests that follow. */
static void oom_end(char *body) {
  free(body);
  attnd__arenas = 1;
}

/* The wrappers are linked, and jansson's allocations reach them (through
 * decode.c's allocator for jansson). */
START_TEST(test_wrappers) {
  ck_assert_msg(alloc_fail_linked(), "linked without ALLOC_FAIL_WRAP");
  alloc_fail_arm(0, 0);
  json_t *o = json_object();
  int injected = alloc_fail_disarm();
  ck_assert_msg(o == NULL && injected,
                "jansson's allocations do not reach the wrappers");
  char *body = oom_nested();
  attnd_request_t *j;
  attnd_error_t e;
  attnd__arenas = 0;     /* jansson's tree on the heap, as a big body's */
  alloc_fail_arm(-1, 0); /* restarts the count */
  ck_assert_int_eq(decode(body, &j, &e), 0);
  ck_assert_int_gt(alloc_fail_count(), 10);
  ck_assert(!alloc_fail_injected());
  attnd__arenas = 1;
  attnd_request_free(j);
  free(body);
}
END_TEST

/* A small request makes no allocation of its own once the pools are warm
 * (issue 16): the tree, the skeleton and the bulk items in arenas, the
 * request, its tensors and outputs in a pooled request's region; encoding
 * makes one, the reply's text, which libmicrohttpd takes. Shaped as
 * bench/wrk/small.sh's tiny request: L 16, E 16, 2 heads. */
START_TEST(test_small_no_alloc) {
  char body[8192];
  int k = snprintf(body, sizeof body, "{\"id\":\"tiny\",\"query\":[");
  for (int i = 0; i < 16; i++)
    for (int c = 0; c < 16; c++)
      k += snprintf(body + k, sizeof body - (size_t)k, "%s%s%.6f",
                    c   ? ","
                    : i ? "],["
                        : "[",
                    "", (i * 16 + c) % 13 * 0.1 - 0.6);
  k += snprintf(body + k, sizeof body - (size_t)k, "]],\"num_heads\":2}");
  ck_assert_int_lt(k, (int)sizeof body - 1);
  attnd_request_t *j;
  attnd_error_t e;
  attnd_scratch_t s = {0};
  for (int round = 0; round < 2; round++) { /* the first warms the pools */
    /* counted between Check's assertions, which allocate */
    alloc_fail_arm(-1, 0);
    int decoded = decode(body, &j, &e);
    long decoding = alloc_fail_count();
    ck_assert_msg(decoded == 0, "%s", e.message);
    alloc_fail_arm(-1, 0);
    int ran = attnd_request_run(j, 0, 0, &s);
    long running = alloc_fail_count();
    ck_assert_int_eq(ran, 0);
    attnd_buf_t b;
    double total_ms;
    attnd_buf_init(&b);
    alloc_fail_arm(-1, 0);
    attnd_request_encode(j, &b, &total_ms);
    long encoding = alloc_fail_count();
    ck_assert(!b.oom && strstr(b.data, "\"output\":[[") != NULL);
    attnd_buf_free(&b);
    attnd_request_free(j);
    if (round == 1)
      ck_assert_msg(decoding == 0 && running == 0 && encoding == 1,
                    "allocations: %ld decoding, %ld running, %ld encoding",
                    decoding, running, encoding);
  }
  attnd_scratch_free(&s);
}
END_TEST

/* Decoding: the nth allocation fails (sticky: and every later one), for n
 * = 0, 1, ... until none does. Each call gives out_of_memory (503), or the
 * body's own result, unchanged. */
START_TEST(test_oom_decode) {
  int sticky;
  char *body;
  const oom_case_t *c = oom_begin(_i, &sticky, &body);
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
    int injected = alloc_fail_disarm();
    if (r == 0) {
      ck_assert_msg(c->valid, "%s: allocation %ld failed: decoded", c->name, n);
      const char *d = decode_request_diff(j, ref);
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
  /* with the arenas, a small invalid body may need no allocation */
  ck_assert_msg((n > 0 || attnd__arenas) && (ooms > 0 || !sticky || n == 0),
                "%s: %ld allocations, %ld out_of_memory", c->name, n, ooms);
  attnd_request_free(ref);
  oom_end(body);
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
  int sticky;
  char *body;
  const oom_case_t *c = oom_begin(_i, &sticky, &body);
  long n;
  for (n = 0;; n++) {
    ck_assert_msg(n < MAX_ALLOCS, "%s: still failing at %ld", c->name, n);
    attnd_request_t *j = decoded(body);
    attnd_scratch_t s = {0};
    alloc_fail_arm(n, sticky);
    int r = attnd_request_run(j, 0, 0, &s);
    int injected = alloc_fail_disarm();
    if (injected)
      ck_assert_msg(r == ATTN_ENOSPC && j->result == ATTN_ENOSPC,
                    "%s: allocation %ld failed: %d", c->name, n, r);
    else
      ck_assert_msg(r == 0 && j->result == 0, "%s: %d", c->name, r);
    attnd_scratch_free(&s);
    attnd_request_free(j);
    if (!injected)
      break;
  }
  /* the workspace, and without a region the outputs */
  ck_assert_msg(n >= (attnd__arenas ? 1 : 2), "%s: %ld allocations", c->name,
                n);
  oom_end(body);
}
END_TEST

/* Encoding the reply: a failure marks the buffer oom and nothing else. */
START_TEST(test_oom_encode) {
  int sticky;
  char *body;
  const oom_case_t *c = oom_begin(_i, &sticky, &body);
  attnd_request_t *j = decoded(body);
  attnd_scratch_t s = {0};
  ck_assert_int_eq(attnd_request_run(j, 0, 0, &s), 0);
  attnd_scratch_free(&s);
  long n;
  for (n = 0;; n++) {
    ck_assert_msg(n < MAX_ALLOCS, "%s: still failing at %ld", c->name, n);
    attnd_buf_t b;
    double total_ms;
    attnd_buf_init(&b);
    alloc_fail_arm(n, sticky);
    attnd_request_encode(j, &b, &total_ms);
    int injected = alloc_fail_disarm();
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
  oom_end(body);
}
END_TEST

/* ---- integer extremes (issue 11, defect 3) ------------------------------ */

/* Every integer member of a request at 0, 1, 2^31 - 1, 2^31, 2^31 + 1 and
 * 2^63 - 1, under the limits above: either it decodes, and then computes
 * what the float64 reference does (window sides of 2^63 - 1 once wrapped
 * in the kernel and gave rows of zeros), or it is a 422 naming the member.
 * `body` has one %s for the value (two for the windows together); field[k]
 * is the error's field for extreme k, NULL where the request is valid. */
static const char *const int_extremes[] = {
    "0", "1", "2147483647", "2147483648", "2147483649", "9223372036854775807"};

typedef struct int_extreme_case {
  const char *name, *body;
  const char *field[6];
} int_extreme_case_t;

#define IX_Q32 "[[1,2],[3,4],[5,6]]" /* [Lq=3, E=2] */
#define IX_K22 "[[1,0],[0,1]]"       /* [Lk=2, E=2]: Lq > Lk */
#define IX_ALL(f)                                                              \
  { f, f, f, f, f, f }
#define IX_ONLY1(f)                                                            \
  { f, NULL, f, f, f, f }

/* clang-format off */
static const int_extreme_case_t int_extreme_cases[] = {
    {"num_heads", "{\"query\":" Q24 ",\"num_heads\":%s}",
     IX_ONLY1("num_heads")},
    {"num_kv_heads", "{\"query\":" Q24 ",\"key\":[[1,0],[0,1],[1,1]],"
     "\"num_heads\":2,\"num_kv_heads\":%s}", IX_ONLY1("num_kv_heads")},
    {"mask.window.left", "{\"query\":" IX_Q32 ",\"key\":" IX_K22 ","
     "\"num_heads\":1,\"mask\":{\"window\":{\"left\":%s}}}", IX_ALL(NULL)},
    {"mask.window.right", "{\"query\":" IX_Q32 ",\"key\":" IX_K22 ","
     "\"num_heads\":1,\"mask\":{\"window\":{\"right\":%s}}}", IX_ALL(NULL)},
    {"mask.window, both sides, causal", "{\"query\":" IX_Q32 ",\"key\":"
     IX_K22 ",\"num_heads\":1,\"mask\":{\"causal\":true,"
     "\"window\":{\"left\":%s,\"right\":%s}}}", IX_ALL(NULL)},
    {"mask.key_lengths", "{\"query\":" IX_Q32 ",\"num_heads\":1,"
     "\"mask\":{\"key_lengths\":[%s]}}",
     {NULL, NULL, "mask.key_lengths", "mask.key_lengths", "mask.key_lengths",
      "mask.key_lengths"}},
    {"timeout_ms", "{\"query\":" IX_Q32 ",\"num_heads\":1,"
     "\"timeout_ms\":%s}", IX_ONLY1("timeout_ms")},
    {"query.shape rows", "{\"query\":{\"shape\":[%s,2],"
     "\"data\":[1,2,3,4]},\"num_heads\":1}",
     {"query.shape", "query.data", "query", "query", "query", "query"}},
    {"query.shape width, base64", "{\"query\":{\"shape\":[2,%s],"
     "\"dtype\":\"float32\",\"base64\":\"AACAPwAAAEAAAEBAAACAQA==\"},"
     "\"num_heads\":1}",
     {"query.shape", "query.base64", "query", "query", "query", "query"}},
    {"mask.allow.shape", "{\"query\":" IX_Q32 ",\"num_heads\":1,"
     "\"mask\":{\"allow\":{\"shape\":[%s,3],\"data\":[1,0,1]}}}",
     {"mask.allow.shape", NULL, "mask.allow", "mask.allow", "mask.allow",
      "mask.allow"}},
    {"projections.q_weight.shape", "{\"query\":" IX_Q32 ",\"num_heads\":1,"
     "\"projections\":{\"q_weight\":{\"shape\":[2,%s],"
     "\"data\":[1,0,0,1]}}}",
     {"projections.q_weight.shape", "projections.q_weight.data",
      "projections.q_weight", "projections.q_weight", "projections.q_weight",
      "projections.q_weight"}},
};
/* clang-format on */
#define N_INT_EXTREME                                                          \
  ((int)(sizeof int_extreme_cases / sizeof int_extreme_cases[0]) * 6)

START_TEST(test_integer_extremes) {
  const int_extreme_case_t *c = &int_extreme_cases[_i / 6];
  const char *v = int_extremes[_i % 6], *want = c->field[_i % 6];
  char body[512];
  snprintf(body, sizeof body, c->body, v, v);
  attnd_request_t *j = NULL;
  attnd_error_t e;
  int r = decode(body, &j, &e);
  if (want != NULL) {
    ck_assert_msg(r < 0 && attnd_error_status(e.code) == 422 &&
                      strcmp(e.field, want) == 0,
                  "%s = %s: want a 422 naming %s, got %s (%s: %s)", c->name, v,
                  want, r < 0 ? attnd_error_name(e.code) : "success",
                  r < 0 ? e.field : "", r < 0 ? e.message : "");
    ck_assert_ptr_null(j);
    return;
  }
  ck_assert_msg(r == 0, "%s = %s: %s (%s: %s)", c->name, v,
                attnd_error_name(e.code), e.field, e.message);
  attnd_scratch_t s = {0};
  ck_assert_int_eq(attnd_request_run(j, 0, 0, &s), 0);
  ref_result_t ref;
  ck_assert_int_eq(ref_attention(&j->params, &ref), 0);
  double err = tu_rel_err(j->out.out, ref.out, (size_t)j->plan.out_elems);
  ck_assert_msg(err <= 1e-5, "%s = %s: output off the reference by %g", c->name,
                v, err);
  ref_result_free(&ref);
  attnd_scratch_free(&s);
  attnd_request_free(j);
}
END_TEST

/* ---- integers beyond int64, escaped base64 ------------------------------- */

/* Integer literals beyond int64 are valid JSON and finite floats (issue 11,
 * defect 6): read as floats where floats are expected, in small tensors
 * (jansson) and big ones (the fast path) alike. Integers in any integral
 * spelling are integers. */
START_TEST(test_values_beyond_int64) {
  static const char *const bodies[] = {
      "{\"query\":[[18446744073709551616,-9223372036854775809,3,4],"
      "[5,6,7,8]],\"num_heads\":2.0,\"scale\":99999999999999999999,"
      "\"timeout_ms\":1e3,\"mask\":{\"window\":{\"left\":9223372036854775807,"
      "\"right\":2E0}}}",
      NULL, /* the same query, 8 x 16, through the fast path */
  };
  for (int k = 0; k < 2; k++) {
    char *made =
        k ? grid_body(0, 1, "-9223372036854775809", "18446744073709551616",
                      ",\"scale\":99999999999999999999,"
                      "\"timeout_ms\":1e3,\"mask\":{\"window\":"
                      "{\"left\":9223372036854775807,\"right\":2E0}}")
          : NULL;
    attnd_request_t *j = NULL;
    attnd_error_t e;
    ck_assert_msg(decode(k ? made : bodies[0], &j, &e) == 0, "%d: %s %s: %s", k,
                  attnd_error_name(e.code), e.field, e.message);
    const float *q = j->params.query.data;
    ck_assert(q[0] == 18446744073709551616.0f);
    ck_assert(q[1] == -9223372036854775808.0f);
    if (k == 0)
      ck_assert(q[2] == 3 && q[7] == 8);
    else
      ck_assert(q[127] == 18446744073709551616.0f);
    ck_assert(j->params.has_scale && j->params.scale == 1e20f);
    ck_assert_int_eq(j->timeout_ms, 1000);
    ck_assert(j->params.has_window_left && j->params.window_left == INT64_MAX);
    ck_assert(j->params.has_window_right && j->params.window_right == 2);
    ck_assert_int_eq(j->params.num_heads, k ? 1 : 2);
    attnd_request_free(j);
    free(made);
  }
}
END_TEST

/* A body with every '/' inside its strings sent as `esc` ("\\/", as PHP's
 * json_encode does, or "\\u002f"): a new string. */
static char *escape_slashes(const char *body, const char *esc) {
  size_t n = 0, cap = strlen(body) * strlen(esc) + 1;
  char *t = malloc(cap);
  int in_string = 0;
  for (const char *p = body; *p; p++) {
    if (*p == '"' && (p == body || p[-1] != '\\'))
      in_string = !in_string;
    if (in_string && *p == '/') {
      n += (size_t)snprintf(t + n, cap - n, "%s", esc);
      continue;
    }
    t[n++] = *p;
  }
  t[n] = 0;
  return t;
}

/* Bodies whose base64 texts escape their '/' decode to the same request as
 * the plain ones (issue 11: the fast path must take them too, and the slow
 * path read them the same). */
START_TEST(test_values_escaped) {
  static const char *const escapes[] = {"\\/", "\\u002f", "\\u002F"};
  char *plain = _i < 4 ? val_body_of(3 * _i + 2) : oom_base64();
  ck_assert_ptr_nonnull(strchr(plain, '/'));
  attnd_request_t *ref = NULL;
  attnd_error_t e;
  ck_assert_msg(decode(plain, &ref, &e) == 0, "%s", e.message);
  for (int k = 0; k < 3; k++) {
    char *esc = escape_slashes(plain, escapes[k]);
    attnd_request_t *j = NULL;
    ck_assert_msg(decode(esc, &j, &e) == 0, "%s: %s", escapes[k], e.message);
    const char *d = decode_request_diff(j, ref);
    ck_assert_msg(d == NULL, "case %d, %s: %s differs", _i, escapes[k], d);
    char why[1024];
    ck_assert_msg(decode_diff(esc, strlen(esc), &cfg, why, sizeof why) == 0,
                  "case %d, %s: %s", _i, escapes[k], why);
    attnd_request_free(j);
    free(esc);
  }
  attnd_request_free(ref);
  free(plain);
}
END_TEST

/* ---- the two paths ---------------------------------------------------------
 *
 * The fast path must be invisible (issue 11, defect 2): for every body, the
 * same request or the same error as jansson alone (tests/decode_diff.h).
 * The bodies: every error case and every value case above, and bodies made
 * to find a difference: long strings where the scanner lifts strings and
 * where it must not, escaped strings, numbers in every spelling, big
 * arrays in every form, and arrays that only nearly qualify. Each has an
 * array of 64 elements or more, so that the fast path runs. */

/* A string of n copies of unit, quoted, in a new buffer. */
static char *repeat(const char *unit, int n) {
  size_t len = strlen(unit), cap = len * (size_t)n + 3;
  char *t = malloc(cap);
  t[0] = '"';
  for (int k = 0; k < n; k++)
    memcpy(t + 1 + len * (size_t)k, unit, len);
  memcpy(t + 1 + len * (size_t)n, "\"", 2);
  return t;
}

/* The base64 text of n floats, quoted, with every '/' spelled `slash`. */
static char *b64_text(int n, const char *slash) {
  float *x = malloc((size_t)n * sizeof *x);
  for (int i = 0; i < n; i++)
    x[i] = (float)(i * 37 % 101 - 50) / 7.0f;
  size_t len = attnd_b64_encoded_len((size_t)n * 4);
  char *q = malloc(len + 3);
  q[0] = '"';
  attnd_b64_encode(x, (size_t)n * 4, q + 1);
  memcpy(q + 1 + len, "\"", 2);
  ck_assert_ptr_nonnull(strchr(q, '/'));
  char *t = escape_slashes(q, slash);
  free(q);
  free(x);
  return t;
}

/* `tmpl` with each "$1".."$9" replaced by arg[0..8]: a new string. */
static char *subst(const char *tmpl, char *const *arg) {
  size_t cap = strlen(tmpl) + 1;
  for (const char *p = tmpl; (p = strchr(p, '$')) != NULL; p++)
    cap += strlen(arg[p[1] - '1']);
  char *t = malloc(cap), *o = t;
  for (const char *p = tmpl; *p; p++) {
    if (*p == '$') {
      const char *a = arg[*++p - '1'];
      memcpy(o, a, strlen(a));
      o += strlen(a);
    } else {
      *o++ = *p;
    }
  }
  *o = 0;
  return t;
}

static char *diff_body(int i);
#define N_DIFF_EXTRA 128

/* Each error case, each value case, then the extra bodies. */
#define N_DIFF (N_ERR + 12 + N_DIFF_EXTRA)

START_TEST(test_paths_agree) {
  char *body;
  if (_i < N_ERR)
    body =
        err_cases[_i].body ? strdup(err_cases[_i].body) : err_cases[_i].make();
  else if (_i < N_ERR + 12)
    body = val_body_of(_i - N_ERR);
  else
    body = diff_body(_i - N_ERR - 12);
  if (body == NULL)
    return; /* past the last extra body */
  char why[1400];
  ck_assert_msg(decode_diff(body, strlen(body), &cfg, why, sizeof why) == 0,
                "body %d: %s\nbody: %.300s", _i, why, body);
  free(body);
}
END_TEST

/* A session step's body decodes to the same request or the same error by
 * both paths (attnd__step_decode_path): every body of test_paths_agree
 * (most of them errors for a step: members a step may not set), and steps
 * of their own, with tensors the fast path lifts (a long id, 64 rows of
 * numbers, base64 with escapes) and errors in lifted values. */
START_TEST(test_step_paths_agree) {
  attnd_session_shape_t sh = {
      .H = 2,
      .Hkv = 1,
      .Dh = 4,
      .Dv = 4,
      .rope = {.style = ATTN_ROPE_HALF, .theta = 10000, .dims = 4}};
  char why[1400];
  for (int i = 0; i < N_DIFF; i++) {
    char *body = i < N_ERR ? (err_cases[i].body ? strdup(err_cases[i].body)
                                                : err_cases[i].make())
                 : i < N_ERR + 12 ? val_body_of(i - N_ERR)
                                  : diff_body(i - N_ERR - 12);
    if (body == NULL)
      continue;
    ck_assert_msg(
        step_decode_diff(body, strlen(body), &cfg, &sh, why, sizeof why) == 0,
        "body %d: %s\nbody: %.300s", i, why, body);
    free(body);
  }
  attnd_buf_t rows[3]; /* 64 rows of query (8 wide), key and value (4) */
  for (int t = 0; t < 3; t++) {
    attnd_buf_init(&rows[t]);
    for (int r = 0; r < 64; r++) {
      attnd_buf_puts(&rows[t], r ? ",[" : "[");
      for (int c = 0; c < (t ? 4 : 8); c++)
        attnd_buf_printf(&rows[t], c ? ",%d.25" : "%d.25", (r * 7 + c) % 9);
      attnd_buf_puts(&rows[t], "]");
    }
  }
  char longid[1600];
  memset(longid, 'x', sizeof longid - 1);
  longid[sizeof longid - 1] = 0;
  const char *const bodies[] = {
      "{\"query\":[%s],\"key\":[%s],\"value\":[%s]}",
      "{\"query\":[%s],\"key\":[%s],\"value\":[%s],\"id\":\"%s\"}",
      "{\"query\":[%s],\"key\":[%s],\"value\":[%s],\"expected_length\":-1}",
      "{\"query\":[%s],\"key\":[%s],\"value\":[[1,2]]}",
      "{\"query\":[%s,[1e99]],\"key\":[%s],\"value\":[%s]}",
      "{\"query\":{\"shape\":[1,8],\"dtype\":\"float32\",\"base64\":"
      "\"AACAPwAAAEAAAEBAAACAQAAAoEAAAMBAAADgQAAAAEE=\"},\"key\":[[1,2,3,4]],"
      "\"value\":[[1,2,3,4]]%s%s%s}",
      "{\"query\":{\"shape\":[1,8],\"dtype\":\"float32\",\"base64\":"
      "\"AACAPwAAAEAAAEBAAACAQAAAoEAAAMBAAADgQAAAAEE\\/\"},\"key\":[[1,2,3,4]],"
      "\"value\":[[1,2,3,4]]%s%s%s}",
  };
  for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
    attnd_buf_t b;
    attnd_buf_init(&b);
    if (i >= 5)
      attnd_buf_printf(&b, bodies[i], "", "", "");
    else
      attnd_buf_printf(&b, bodies[i], rows[0].data, rows[1].data, rows[2].data,
                       longid);
    ck_assert_msg(step_decode_diff(b.data, b.len, &cfg, &sh, why, sizeof why) ==
                      0,
                  "step body %zu: %s", i, why);
    attnd_request_t *j = NULL;
    attnd_error_t e;
    int ok = attnd_step_decode(b.data, b.len, &cfg, &sh, &j, &e) == 0;
    ck_assert_msg(ok == (i == 0 || i == 5), "step body %zu: %s", i,
                  ok ? "decoded" : e.message);
    attnd_request_free(j);
    attnd_buf_free(&b);
  }
  for (int t = 0; t < 3; t++)
    attnd_buf_free(&rows[t]);
}
END_TEST

/* Extra body k of the differential test, or NULL past the last. */
static char *diff_body(int k) {
  /* fills of the 8 x 16 query (grid_body), or one token in it */
  static const char *const numbers[] = {
      "1",
      "1.0",
      "1e0",
      "10E-1",
      "-0",
      "0.0",
      "-0.0",
      "1e39",
      "-1e39",
      "1e400",
      "18446744073709551616",
      "-9223372036854775809",
      "9223372036854775807",
      "340282366920938463463374607431768211456",
      "1.5e-45",
      "1e-46",
      "3.4028235e38",
      "3.4028236e38",
      "0.1234567890123456789012345",
      "1e-400",
      "123456789012345678901234567890e-20",
      "1797693134862315807937289714053034150799341327100378269361737789804449"
      "6829276475094664901797758720709633028641669288791094655554785194040263"
      "0657488671505820681908902000708383676273854845817711531764475730270069"
      "8555713669596228429148198608349364752927190741684443655107043427115596"
      "99508093042880177904174497792",
      "true",
      "false",
      "null",
      "\"1\"",
      "[1]",
      "01",
      "1.",
      "-",
  };
  const int n_numbers = (int)(sizeof numbers / sizeof *numbers);
  if (k < n_numbers) /* every element */
    return grid_body(-1, -1, "", numbers[k], "");
  k -= n_numbers;
  if (k < n_numbers) /* one element, the last */
    return grid_body(7, 15, numbers[k], "0.5", "");
  k -= n_numbers;

  /* extras with the big query: long strings, members, other tensors. In
   * the templates, $1: 1500 b's, $2: 1500 escaped slashes, $3..$5: base64
   * of 256 floats, its slashes plain, \/ and \u002f; $6: an [8, 16] of
   * 0.5, $7: [8, 8] of true, $8: [8, 8] of 1 with a 0, $9: [16, 16]. */
  char *arg[9] = {repeat("b", 1500),
                  repeat("\\/", 1500),
                  b64_text(256, "/"),
                  b64_text(256, "\\/"),
                  b64_text(256, "\\u002f"),
                  grid(8, 16, -1, -1, "", "0.5"),
                  grid(8, 8, -1, -1, "", "true"),
                  grid(8, 8, 2, 3, "0", "1"),
                  grid(16, 16, -1, -1, "", "0.125")};
  static const char *const tmpl[] = {
      /* long strings where no placeholder may go */
      ",\"id\":$1",
      ",\"id\":$2",
      ",\"return\":{\"encoding\":$1}",
      ",\"return\":{\"weights\":$2}",
      ",\"mask\":{\"causal\":$1}",
      ",\"bogus\":$1",
      ",\"mask\":{\"bogus\":$2}",
      ",$1:1",
      ",\"key\":{\"shape\":[16,16],\"dtype\":$1,\"base64\":$3}",
      /* base64 members where they mean nothing */
      ",\"base64\":$3",
      ",\"mask\":{\"base64\":$3}",
      ",\"projections\":{\"base64\":$4}",
      ",\"return\":{\"base64\":$3}",
      ",\"key\":{\"base64\":$3}",
      ",\"key\":{\"shape\":[16,16],\"base64\":$3,\"data\":[1]}",
      ",\"id\":\"x\",\"base64\":$4",
      ",\"key\":{\"shape\":[16,16],\"base64\":$3,\"base64\":$4}",
      /* base64 tensors: plain and escaped, of the right size and not */
      ",\"key\":{\"shape\":[16,16],\"base64\":$3}",
      ",\"key\":{\"shape\":[16,16],\"base64\":$4}",
      ",\"key\":{\"shape\":[16,16],\"base64\":$5}",
      ",\"key\":{\"shape\":[16,16],\"dtype\":\"float32\",\"base64\":$4}",
      ",\"key\":{\"base64\":$4,\"shape\":[16,16]}",
      ",\"key\":{\"shape\":[16,15],\"base64\":$4}",
      ",\"key\":{\"shape\":[8,16],\"base64\":$4}",
      ",\"mask\":{\"allow\":{\"shape\":[8,16],\"dtype\":\"bool\","
      "\"base64\":$4}}",
      ",\"key\":{\"shape\":[16,16],\"base64\":$1}",
      ",\"key\":{\"shape\":[16,16],\"base64\":$2}",
      /* big arrays in every form */
      ",\"key\":$6,\"mask\":{\"allow\":$7}",
      ",\"key\":$6,\"mask\":{\"allow\":$8}",
      ",\"key\":$6,\"mask\":{\"bias\":$8}",
      ",\"key\":$6,\"value\":$6,\"projections\":{\"q_weight\":$9,"
      "\"k_weight\":$9,\"v_weight\":$9,\"o_weight\":$9}",
      ",\"projections\":{\"q_weight\":$9}",
      ",\"projections\":{\"k_weight\":{\"shape\":[16,16],\"data\":$9}}",
      ",\"key\":{\"shape\":[8,16],\"data\":$6}",
      ",\"mask\":{\"alibi\":$6}",
      ",\"mask\":{\"key_lengths\":$6}",
      ",\"mask\":{\"window\":$6}",
      ",\"return\":{\"weights\":$6}",
      ",\"id\":$6",
      ",\"timeout_ms\":$6",
      ",\"key\":{\"shape\":$6,\"data\":[1]}",
      /* arrays that nearly qualify */
      ",\"key\":[$6]",
      ",\"key\":[[$6]]",
      ",\"key\":[[[$6]]]",
      ",\"key\":[$6,$6]",
      ",\"key\":$6,\"key\":$6",
      ",\"key\":$6,",
      ",\"key\":$6]",
      ",\"key\":[\"\\u0001bulk\",1,0]",
      NULL,
  };
  int n_fmt = 0;
  while (tmpl[n_fmt])
    n_fmt++;
  char *ex = k < n_fmt ? subst(tmpl[k], arg) : NULL;
  for (int a = 0; a < 9; a++)
    free(arg[a]);
  k -= n_fmt;
  char *body = NULL;
  if (ex) {
    body = grid_body(-1, -1, "", "0.25", ex);
    free(ex);
  } else if (k < 4) {
    /* num_heads in several spellings, and a key_lengths array of 64 */
    static const char *const heads[] = {"1", "1.0", "1e0",
                                        "18446744073709551616"};
    char *q = malloc(64 * 20 + 64), *kl = malloc(64 * 4 + 8);
    size_t n = 0, m = 0;
    n += (size_t)sprintf(q + n, "[");
    m += (size_t)sprintf(kl + m, "[");
    for (int b = 0; b < 64; b++) {
      n += (size_t)sprintf(q + n, "%s[[0.5,1,2,3]]", b ? "," : "");
      m += (size_t)sprintf(kl + m, "%s%d", b ? "," : "", b % 2);
    }
    sprintf(q + n, "]");
    sprintf(kl + m, "]");
    body = malloc(n + m + 128);
    sprintf(body,
            "{\"query\":%s,\"num_heads\":%s,\"mask\":{\"key_lengths\":%s}}", q,
            heads[k], kl);
    free(q);
    free(kl);
  }
  return body;
}

/* The names /v1 and OIP take for backend and precision are the core's,
 * in the core's order: a request's choice reaches attn_exec_t as named. */
START_TEST(test_backend_names) {
  int n = 0;
  for (; attnd_backend_names[n]; n++)
    ck_assert_str_eq(attnd_backend_names[n],
                     attn_backend_kind_name((attn_backend_kind_t)n));
  ck_assert_int_eq(n, 2);
  for (n = 0; attnd_precision_names[n]; n++)
    ck_assert_str_eq(attnd_precision_names[n],
                     attn_precision_name((attn_precision_t)n));
  ck_assert_int_eq(n, 2);
}
END_TEST

/* The members the decoder reads are the documented ones: /v1's, its
 * mask's, its return's and the weights object's in docs/api.md's tables
 * and docs/openapi.json's schemas; a session step's, and its mask's, in
 * docs/sessions.md's list and the step's schemas. A member added to
 * decode.c alone would be served and described nowhere (the API
 * document checks replies, not requests). */
START_TEST(test_members_documented) {
  static const struct {
    const char *const *names;
    const char *owner, *object, *schema;
  } v1[] = {
      {attnd__dec_v1_members, "attnd__dec_v1_members", "", "AttentionRequest"},
      {attnd__dec_mask_members, "attnd__dec_mask_members", "mask.", "Mask"},
      {attnd__dec_return_members, "attnd__dec_return_members", "return.",
       "Return"},
  };
  char owner[96];
  for (size_t i = 0; i < sizeof v1 / sizeof v1[0]; i++) {
    snprintf(owner, sizeof owner, "server/api/decode.c's %s", v1[i].owner);
    dn_table_is("docs/api.md", "## POST /v1/attention", v1[i].object,
                v1[i].names, owner);
    dn_schema_is(v1[i].schema, v1[i].names, owner);
  }
  const char *weights = "server/api/decode.c's attnd__dec_weights_members";
  dn_table_is("docs/api.md", "### Weights at any length", "",
              attnd__dec_weights_members, weights);
  dn_schema_is("WeightsReduce", attnd__dec_weights_members, weights);

  const char *step = "server/api/decode.c's attnd__dec_step_members",
             *step_mask = "server/api/decode.c's attnd__dec_step_mask_members";
  dn_list_has("docs/sessions.md", "A step's body holds the members", "",
              attnd__dec_step_members, step);
  dn_schema_is("SessionStepRequest", attnd__dec_step_members, step);
  dn_list_has("docs/sessions.md", "A step's body holds the members", "mask.",
              attnd__dec_step_mask_members, step_mask);
  dn_schema_is("SessionMask", attnd__dec_step_mask_members, step_mask);
}
END_TEST

/* The members of the objects within a /v1 request (a mask's window, the
 * projections, rope and its scaling, positions, a tensor's object forms),
 * which docs/api.md gives in its row for the object (in its list of
 * tensor forms) and docs/openapi.json as the object's properties: a new
 * member of one fails, naming the row or schema that lacks it, as a new
 * member of the request's root does. */
START_TEST(test_nested_members_documented) {
  static const struct {
    const char *const *names;
    const char *owner, *doc, *heading, *row;
    int keys;
    const char *schema, *schema2;
  } v1[] = {
      {attnd__dec_window_members, "attnd__dec_window_members", "docs/api.md",
       "## POST /v1/attention", "mask.window", 1, "Mask.window",
       "SessionMask.window"},
      {attnd__dec_projection_members, "attnd__dec_projection_members",
       "docs/api.md", "## POST /v1/attention", "projections", 0, "Projections",
       NULL},
      {attnd__dec_rope_members, "attnd__dec_rope_members", "docs/api.md",
       "## POST /v1/attention", "rope", 1, "Rope", NULL},
      {attnd__dec_rope_scaling_members, "attnd__dec_rope_scaling_members",
       "docs/layers.md", "## Rotary position embeddings", "scaling", 1,
       "Rope.scaling", NULL},
      {attnd__dec_positions_members, "attnd__dec_positions_members",
       "docs/api.md", "## POST /v1/attention", "positions", 1, "Positions",
       NULL},
  };
  char owner[96];
  for (size_t i = 0; i < sizeof v1 / sizeof v1[0]; i++) {
    snprintf(owner, sizeof owner, "server/api/decode.c's %s", v1[i].owner);
    dn_row_is(v1[i].doc, v1[i].heading, v1[i].row, v1[i].keys, v1[i].names,
              owner);
    dn_schema_is(v1[i].schema, v1[i].names, owner);
    if (v1[i].schema2)
      dn_schema_is(v1[i].schema2, v1[i].names, owner);
  }
  /* docs/layers.md's table of rope's members, its first column */
  snprintf(owner, sizeof owner,
           "server/api/decode.c's attnd__dec_rope_members");
  dn_table_is("docs/layers.md", "## Rotary position embeddings", "",
              attnd__dec_rope_members, owner);
  /* a tensor's object forms, flat and base64 */
  snprintf(owner, sizeof owner,
           "server/api/decode_tensor.c's attnd__dec_tensor_members");
  dn_list_keys_are("docs/api.md", "Each tensor comes in any of three forms", "",
                   attnd__dec_tensor_members, owner);
  dn_schema_is("FlatTensor+Base64Tensor", attnd__dec_tensor_members, owner);
}
END_TEST

/* The figures that docs/api.md, docs/oip.md and docs/openapi.json give
 * for constants of the decoders: the most bytes of a request's id, the
 * largest top_k and the sink's default count; and those of configuration
 * defaults that docs/api.md repeats. Each is written in several
 * places (both protocols' documents and schemas); held here to the code,
 * none can stay behind when it changes. */
START_TEST(test_figures_documented) {
  static const struct {
    const char *doc, *fmt;
    long value;
  } lines[] = {
      {"docs/api.md", "| `id` | a string of at most %ld bytes of UTF-8",
       ATTND_ID_MAX},
      {"docs/api.md", "| `top_k` | 1..%ld:", ATTN_TOP_K_MAX},
      {"docs/api.md",
       "| `sink_tokens` | the first keys the sink sums (default %ld;",
       ATTND_SINK_TOKENS_DEFAULT},
      {"docs/oip.md", "| `id` | optional string of at most %ld bytes",
       ATTND_ID_MAX},
      {"docs/oip.md", "| `weights_top_k` | 1..%ld;", ATTN_TOP_K_MAX},
      {"docs/oip.md", "| `weights_sink_tokens` | integer ≥ 0 (default %ld)",
       ATTND_SINK_TOKENS_DEFAULT},
  };
  for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
    char *text = tu_read_file_or_fail(lines[i].doc, NULL), want[128];
    snprintf(want, sizeof want, lines[i].fmt, lines[i].value);
    ck_assert_msg(strstr(text, want) != NULL,
                  "%s has no '%s': the code's figure is %ld", lines[i].doc,
                  want, lines[i].value);
    free(text);
  }
  /* and the configuration's defaults that docs/api.md gives beside the
   * keys' names (their home is docs/operations.md's table, check_config's):
   * inline_max_flops, and connection_buffer_bytes and its half, in the
   * 414 and 431 rows; limited_config leaves both at their defaults */
  ck_assert(cfg.inline_max_flops % (1 << 20) == 0 &&
            cfg.connection_buffer_bytes % 2048 == 0);
  char *doc = tu_read_file_or_fail("docs/api.md", NULL), fig[96];
  snprintf(fig, sizeof fig, "`inline_max_flops` (%lldM)",
           (long long)(cfg.inline_max_flops >> 20));
  ck_assert_msg(strstr(doc, fig) != NULL,
                "docs/api.md has no '%s': the default is %lld", fig,
                (long long)cfg.inline_max_flops);
  snprintf(fig, sizeof fig, "(%lld KB with the default %lldK)",
           (long long)cfg.connection_buffer_bytes / 2048,
           (long long)cfg.connection_buffer_bytes / 1024);
  const char *at = strstr(doc, fig);
  ck_assert_msg(at != NULL && strstr(at + 1, fig) != NULL,
                "docs/api.md's 414 and 431 rows do not both say '%s'", fig);
  free(doc);
  /* components.schemas.<schema>.properties.<property>.<keyword> */
  static const struct {
    const char *schema, *property, *keyword;
    long value;
  } kw[] = {
      {"AttentionRequest", "id", "maxLength", ATTND_ID_MAX},
      {"SessionStepRequest", "id", "maxLength", ATTND_ID_MAX},
      {"InferRequest", "id", "maxLength", ATTND_ID_MAX},
      {"WeightsReduce", "top_k", "maximum", ATTN_TOP_K_MAX},
      {"InferParameters", "weights_top_k", "maximum", ATTN_TOP_K_MAX},
      {"WeightsReduce", "sink_tokens", "default", ATTND_SINK_TOKENS_DEFAULT},
  };
  json_error_t je;
  json_t *api = json_load_file("docs/openapi.json", 0, &je);
  ck_assert_msg(api != NULL, "docs/openapi.json: %s", je.text);
  const json_t *schemas =
      json_object_get(json_object_get(api, "components"), "schemas");
  for (size_t i = 0; i < sizeof kw / sizeof kw[0]; i++) {
    const json_t *v = json_object_get(
        json_object_get(json_object_get(json_object_get(schemas, kw[i].schema),
                                        "properties"),
                        kw[i].property),
        kw[i].keyword);
    ck_assert_msg(json_is_integer(v) && json_integer_value(v) == kw[i].value,
                  "docs/openapi.json's %s.%s.%s is not %ld, the code's",
                  kw[i].schema, kw[i].property, kw[i].keyword, kw[i].value);
  }
  /* /v2's parameter has its default in words */
  const json_t *sink = json_object_get(
      json_object_get(json_object_get(schemas, "InferParameters"),
                      "properties"),
      "weights_sink_tokens");
  char want[32];
  snprintf(want, sizeof want, "(default %d)", ATTND_SINK_TOKENS_DEFAULT);
  const char *d = json_string_value(json_object_get(sink, "description"));
  ck_assert_msg(d && strstr(d, want),
                "docs/openapi.json's InferParameters.weights_sink_tokens "
                "does not say '%s': %s",
                want, d ? d : "(no description)");
  json_decref(api);
}
END_TEST

/* ---- the suite ----------------------------------------------------------- */

Suite *test_suite(void) {
  Suite *s = suite_create("decode");
  TCase *tc = tcase_create("errors");
  tcase_add_loop_test(tc, test_invalid_request, 0, N_ERR);
  tcase_add_test(tc, test_limits_boundary);
  tcase_add_test(tc, test_limits_before_core);
  tcase_add_test(tc, test_structure_limit);
  tcase_add_loop_test(tc, test_big_array_syntax_error, 0, N_BAD_ARRAY_TOKENS);
  tcase_add_test(tc, test_big_array_json_value);
  tcase_add_test(tc, test_nul_byte);
  tcase_add_test(tc, test_slow_path_only_when_needed);
  tcase_add_test(tc, test_lifted_positions);
  tcase_add_test(tc, test_layer_paths_agree);
  tcase_add_test(tc, test_backend_names);
  suite_add_tcase(s, tc);

  tc = tcase_create("values");
  tcase_add_loop_test(tc, test_values, 0, 12);
  tcase_add_test(tc, test_values_beyond_int64);
  tcase_add_loop_test(tc, test_values_escaped, 0, 5);
  suite_add_tcase(s, tc);

  tc = tcase_create("paths");
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, test_paths_agree, 0, N_DIFF);
  tcase_add_test(tc, test_step_paths_agree);
  tcase_add_test(tc, test_small_arrays_lifted);
  suite_add_tcase(s, tc);

  tc = tcase_create("oom");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_wrappers);
  tcase_add_test(tc, test_small_no_alloc);
  tcase_add_loop_test(tc, test_oom_decode, 0, 4 * N_OOM);
  tcase_add_loop_test(tc, test_oom_run, 0, 4 * N_OOM_VALID);
  tcase_add_loop_test(tc, test_oom_encode, 0, 4 * N_OOM_VALID);
  suite_add_tcase(s, tc);

  tc = tcase_create("documented");
  tcase_add_test(tc, test_members_documented);
  tcase_add_test(tc, test_nested_members_documented);
  tcase_add_test(tc, test_figures_documented);
  suite_add_tcase(s, tc);

  tc = tcase_create("integer_extremes");
  tcase_add_loop_test(tc, test_integer_extremes, 0, N_INT_EXTREME);
  suite_add_tcase(s, tc);
  return s;
}

void test_setup(void) {
  limited_config();
}
