/* tests/check_oip.c: Open Inference Protocol requests decoded from strings
 * (server/api/oip.h), with no server.
 *
 * TCases:
 *   - same: an OIP request decodes to the same attnd_request_t as the /v1
 *     request that says the same thing (tests/decode_diff.h compares every
 *     tensor byte for byte, every option, the id and the timeout): every
 *     input, in each float datatype (FP32, FP16, BF16, FP64), each integer
 *     one (INT32, INT64) and BOOL, as flat and as nested data; every
 *     parameter; the generic model and two layer models (torch's MHA with
 *     rope, Llama with GQA and q/k norms). Then what /v1 has no words for:
 *     the outputs asked for and their binary flags, FP16 and BF16 numbers
 *     converted to float32 directly;
 *   - errors: one case per error, each a model, a body and the exact error:
 *     code, field and the words of the message that carry the names and
 *     numbers; among them the core's and the limits' errors, whose /v1
 *     paths are turned into this body's.
 * The limits are small ones (test_setup), as check_decode's. */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/oip.h"
#include "api/oip_decode.h"
#include "codec/buf.h"
#include "codec/util.h"
#include "config.h"
#include "decode_diff.h"
#include "doc_names.h"
#include "layer_files.h"
#include "sched/request.h"
#include "suite.h"

static attnd_config_t cfg;
static attnd_layer_set_t *layers; /* "L" (torch MHA, E 8, H 2, rope) and
                                     LLAMA (E 8, H 4, Hkv 2, norms) */
#define LLAMA "model.layers.0.self_attn"

/* A layer file at /tmp/attnd-oip-<pid>-<tag>.safetensors; its path in p. */
static void write_layer(char *p, size_t n, const char *tag,
                        lf_convention_t conv, const char *prefix,
                        const lf_shape_t *s, const char *const *meta) {
  char msg[512];
  snprintf(p, n, "/tmp/attnd-oip-%d-%s.safetensors", (int)getpid(), tag);
  if (lf_write(p, conv, ATTND_ST_F32, prefix, s, 11, meta, NULL, msg,
               sizeof msg) < 0) {
    fprintf(stderr, "check_oip: %s\n", msg);
    exit(EXIT_FAILURE);
  }
}

void test_setup(void) {
  static char *argv[] = {"attnd", NULL};
  static char *envp[] = {NULL};
  attnd_config_load_t how;
  char msg[512], a[96], b[96], both[200];
  if (attnd_config_load(&cfg, &how, 1, argv, envp, 2, msg, sizeof msg) < 0) {
    fprintf(stderr, "check_oip: the defaults do not load: %s\n", msg);
    exit(EXIT_FAILURE);
  }
  cfg.threads_per_request = 1;
  cfg.max_seq_len = 16;
  cfg.max_heads = 4;
  cfg.max_tensor_elements = 4096;
  cfg.max_response_bytes = 16384;
  cfg.max_timeout_ms = cfg.default_timeout_ms = 5000;

  lf_shape_t torch = {.E = 8, .H = 2, .bias = LF_BIAS_ALL};
  const char *torch_meta[] = {"num_heads", "2", "rope_theta", "100", NULL};
  write_layer(a, sizeof a, "torch", LF_TORCH_MHA, "L.", &torch, torch_meta);
  lf_shape_t llama = {.E = 8, .H = 4, .Hkv = 2, .qk_norm = 1};
  const char *llama_meta[] = {"num_heads", "4", "num_kv_heads", "2", NULL};
  write_layer(b, sizeof b, "llama", LF_LLAMA, "model.layers.0.", &llama,
              llama_meta);
  snprintf(both, sizeof both, "%s,%s", a, b);
  int r = attnd_layers_load(both, &layers, msg, sizeof msg);
  unlink(a);
  unlink(b);
  if (r < 0) {
    fprintf(stderr, "check_oip: the layers do not load: %s\n", msg);
    exit(EXIT_FAILURE);
  }
}

/* ---- building the same request in both protocols ------------------------- */

/* One input: its name and shape, and for an integer input its values. The
 * float values are multiples of 1/4 in [-1, 1], exact in every float
 * datatype; allow's are a pattern of true and false. */
typedef struct tin {
  const char *name;
  int rank;
  int64_t dim[4];
  const int64_t *ints;
} tin_t;

typedef enum { K_F, K_I, K_B } kind_t;

static kind_t kind_of(const char *name) {
  if (strcmp(name, "allow") == 0)
    return K_B;
  if (strcmp(name, "key_lengths") == 0 || strncmp(name, "positions_", 10) == 0)
    return K_I;
  return K_F;
}

static int64_t count(const tin_t *t) {
  int64_t n = 1;
  for (int i = 0; i < t->rank; i++)
    n *= t->dim[i];
  return n;
}

/* The values, flat; BOOL as true/false, or as 0/1 with `numbers`. */
static json_t *flat_values(const tin_t *t, int numbers) {
  json_t *a = json_array();
  int64_t n = count(t);
  size_t salt = strlen(t->name);
  for (int64_t i = 0; i < n; i++) {
    switch (kind_of(t->name)) {
    case K_F:
      json_array_append_new(
          a, json_real((double)((int)((i * 7 + salt) % 9) - 4) * 0.25));
      break;
    case K_I:
      json_array_append_new(a, json_integer(t->ints[i]));
      break;
    case K_B:
      json_array_append_new(a, numbers ? json_integer((i + salt) % 3 != 2)
                                       : json_boolean((i + salt) % 3 != 2));
    }
  }
  return a;
}

/* flat[*at ..] nested as dim[0 .. rank). */
static json_t *nest(const json_t *flat, int rank, const int64_t *dim,
                    size_t *at) {
  json_t *a = json_array();
  for (int64_t i = 0; i < dim[0]; i++)
    json_array_append_new(a, rank == 1
                                 ? json_copy(json_array_get(flat, (*at)++))
                                 : nest(flat, rank - 1, dim + 1, at));
  return a;
}

static json_t *shape_of(const tin_t *t) {
  json_t *s = json_array();
  for (int i = 0; i < t->rank; i++)
    json_array_append_new(s, json_integer(t->dim[i]));
  return s;
}

/* Adds t to the OIP request's inputs, in datatype fdt (floats) or idt
 * (integers), as nested data with `nested`. */
static void put_oip(json_t *inputs, const tin_t *t, const char *fdt,
                    const char *idt, int nested) {
  kind_t k = kind_of(t->name);
  json_t *data = flat_values(t, nested);
  if (nested && t->rank > 1) {
    size_t at = 0;
    json_t *n = nest(data, t->rank, t->dim, &at);
    json_decref(data);
    data = n;
  }
  json_array_append_new(inputs, json_pack("{s:s,s:o,s:s,s:o}", "name", t->name,
                                          "shape", shape_of(t), "datatype",
                                          k == K_F   ? fdt
                                          : k == K_I ? idt
                                                     : "BOOL",
                                          "data", data));
}

/* Adds t to the /v1 request where /v1 has it. */
static void put_v1(json_t *root, const tin_t *t) {
  static const char *const at[][2] = {{"q_weight", "projections"},
                                      {"k_weight", "projections"},
                                      {"v_weight", "projections"},
                                      {"o_weight", "projections"},
                                      {"q_bias", "projections"},
                                      {"k_bias", "projections"},
                                      {"v_bias", "projections"},
                                      {"o_bias", "projections"},
                                      {"key_lengths", "mask"},
                                      {"allow", "mask"},
                                      {"bias", "mask"},
                                      {"positions_query", "positions"},
                                      {"positions_key", "positions"}};
  json_t *obj = root, *v;
  const char *key = t->name;
  for (size_t i = 0; i < sizeof at / sizeof at[0]; i++)
    if (strcmp(at[i][0], t->name) == 0) {
      if ((obj = json_object_get(root, at[i][1])) == NULL)
        json_object_set_new(root, at[i][1], obj = json_object());
      if (strncmp(key, "positions_", 10) == 0)
        key += 10;
    }
  if (kind_of(t->name) == K_I) {
    size_t n = 0;
    json_t *flat = flat_values(t, 0);
    v = nest(flat, t->rank, t->dim, &n);
    json_decref(flat);
  } else {
    v = json_pack("{s:o,s:o}", "shape", shape_of(t), "data", flat_values(t, 0));
  }
  json_object_set_new(obj, key, v);
}

/* Compact text of r, a new string; steals r. */
static char *dump(json_t *r) {
  char *s = json_dumps(r, JSON_COMPACT);
  json_decref(r);
  ck_assert_ptr_nonnull(s);
  return s;
}

static json_t *load(const char *text) {
  json_error_t je;
  json_t *v = json_loads(text, 0, &je);
  ck_assert_msg(v != NULL, "%s: %s", text, je.text);
  return v;
}

/* The OIP and /v1 texts of one request: inputs ts[0 .. n), and the extra
 * members of each root (JSON objects; /v1's merged recursively). */
static void build(const tin_t *ts, size_t n, const char *oip_extra,
                  const char *v1_extra, const char *fdt, const char *idt,
                  int nested, char **oip, char **v1) {
  json_t *o = load(oip_extra), *v = json_object(), *inputs = json_array();
  for (size_t i = 0; i < n; i++) {
    put_oip(inputs, &ts[i], fdt, idt, nested);
    put_v1(v, &ts[i]);
  }
  json_object_set_new(o, "inputs", inputs);
  json_t *ve = load(v1_extra);
  ck_assert_int_eq(json_object_update_recursive(v, ve), 0);
  json_decref(ve);
  *oip = dump(o);
  *v1 = dump(v);
}

/* Decodes body[0..len) by both paths (jansson alone, and the bulk
 * scanner's fast path) and checks they agree: the same request, or the
 * same error down to the message's bytes. Returns whether it decoded. */
static int paths_agree(const char *model, const char *body, size_t len,
                       int64_t json_len) {
  attnd_request_t *a = NULL, *b = NULL;
  attnd_error_t ea, eb;
  memset(&ea, 0, sizeof ea);
  memset(&eb, 0, sizeof eb);
  int ra = attnd__oip_decode_path(model, body, len, json_len, NULL, 0, 0, &cfg,
                                  layers, &a, &ea);
  int rb = attnd__oip_decode_path(model, body, len, json_len, NULL, 0, 1, &cfg,
                                  layers, &b, &eb);
  ck_assert_msg(ra == rb, "slow %d (%s), fast %d (%s)\n%.*s", ra, ea.message,
                rb, eb.message, (int)len, body);
  if (ra == 0) {
    const char *d = decode_request_diff(a, b);
    ck_assert_msg(d == NULL, "the paths differ in %s\n%.*s", d, (int)len, body);
    ck_assert_uint_eq(a->oip_outputs, b->oip_outputs);
    ck_assert_uint_eq(a->oip_binary, b->oip_binary);
  } else {
    ck_assert_msg(ea.code == eb.code && strcmp(ea.field, eb.field) == 0 &&
                      strcmp(ea.message, eb.message) == 0,
                  "slow: %s %s %s\nfast: %s %s %s", attnd_error_name(ea.code),
                  ea.field, ea.message, attnd_error_name(eb.code), eb.field,
                  eb.message);
  }
  attnd_request_free(a);
  attnd_request_free(b);
  return ra == 0;
}

/* Decodes both and checks they are the same request; returns the OIP one
 * (attnd_request_free). */
static attnd_request_t *same(const char *model, const char *oip,
                             const char *v1) {
  attnd_request_t *a = NULL, *b = NULL;
  attnd_error_t ea, eb;
  ck_assert(paths_agree(model, oip, strlen(oip), -1));
  double t0 = attnd_now_ms();
  int ra = attnd_oip_decode(model, oip, strlen(oip), -1, NULL, 0, &cfg, layers,
                            &a, &ea);
  double took = attnd_now_ms() - t0;
  ck_assert_msg(ra == 0, "OIP: %s (%s): %s\n%s", attnd_error_name(ea.code),
                ea.field, ea.message, oip);
  int rb = attnd_request_decode(v1, strlen(v1), &cfg, layers, &b, &eb);
  ck_assert_msg(rb == 0, "/v1: %s (%s): %s\n%s", attnd_error_name(eb.code),
                eb.field, eb.message, v1);
  const char *d = decode_request_diff(a, b);
  ck_assert_msg(d == NULL, "%s differs\nOIP: %s\n/v1: %s", d, oip, v1);
  ck_assert_int_eq(a->plan.Lq, b->plan.Lq);
  ck_assert_int_eq(a->plan.Hkv, b->plan.Hkv);
  /* the decoder's own time: some, and no more than the call took */
  ck_assert_msg(a->t.decode_ms > 0 && a->t.decode_ms <= took,
                "decode_ms %g, the call took %g ms", a->t.decode_ms, took);
  attnd_request_free(b);
  return a;
}

/* ---- same: the generic model ----------------------------------------------
 */

static const int64_t key_lengths[] = {4, 3}, pos_q[] = {1, 2, 3},
                     pos_k[] = {0, 1, 2, 3, 5, 6, 7, 8};

/* Every input of the generic model, B 2, Lq 3, Lk 4, E 4, H 2, Hkv 1. */
static const tin_t every_input[] = {
    {"query", 3, {2, 3, 4}, NULL},      {"key", 3, {2, 4, 4}, NULL},
    {"value", 3, {2, 4, 4}, NULL},      {"q_weight", 2, {4, 4}, NULL},
    {"k_weight", 2, {2, 4}, NULL},      {"v_weight", 2, {2, 4}, NULL},
    {"o_weight", 2, {4, 4}, NULL},      {"q_bias", 1, {4}, NULL},
    {"k_bias", 1, {2}, NULL},           {"v_bias", 1, {2}, NULL},
    {"o_bias", 1, {4}, NULL},           {"key_lengths", 1, {2}, key_lengths},
    {"allow", 2, {3, 4}, NULL},         {"bias", 4, {2, 1, 3, 4}, NULL},
    {"positions_query", 1, {3}, pos_q}, {"positions_key", 2, {2, 4}, pos_k},
};

/* Each float datatype, INT32 and INT64 by turns, flat and nested. */
START_TEST(test_generic_every_input) {
  static const char *const fdt[] = {"FP32", "FP16", "BF16", "FP64"};
  const char *oip_extra =
      "{\"id\":\"r-1\",\"parameters\":{\"num_heads\":2,\"num_kv_heads\":1,"
      "\"causal\":\"top_left\",\"window_left\":2,\"window_right\":1,"
      "\"alibi\":true,\"scale\":0.5,\"softcap\":30,\"rope_theta\":100,"
      "\"rope_dims\":2,\"rope_style\":\"interleaved\",\"timeout_ms\":1000},"
      "\"outputs\":[{\"name\":\"weights\"},{\"name\":\"head_outputs\"},"
      "{\"name\":\"output\"}]}";
  const char *v1_extra =
      "{\"id\":\"r-1\",\"num_heads\":2,\"num_kv_heads\":1,\"mask\":{"
      "\"causal\":\"top_left\",\"window\":{\"left\":2,\"right\":1},"
      "\"alibi\":true},\"scale\":0.5,\"softcap\":30,\"rope\":{\"theta\":100,"
      "\"dims\":2,\"style\":\"interleaved\"},\"timeout_ms\":1000,"
      "\"return\":{\"weights\":\"per_head\",\"head_outputs\":true,"
      "\"metrics\":false,\"encoding\":\"flat\"}}";
  char *oip, *v1;
  build(every_input, sizeof every_input / sizeof every_input[0], oip_extra,
        v1_extra, fdt[_i % 4], _i % 2 ? "INT64" : "INT32", _i / 4, &oip, &v1);
  attnd_request_t *r = same(ATTND_OIP_GENERIC, oip, v1);
  ck_assert_ptr_null(r->layer);
  ck_assert_uint_eq(r->oip_outputs, ATTND_OIP_WEIGHTS | ATTND_OIP_OUTPUT |
                                        ATTND_OIP_HEAD_OUTPUTS);
  ck_assert_uint_eq(r->oip_binary, 0);
  ck_assert_int_eq(r->oip_n_outputs, 3);
  ck_assert_uint_eq(r->oip_order[0], ATTND_OIP_WEIGHTS);
  ck_assert_uint_eq(r->oip_order[1], ATTND_OIP_HEAD_OUTPUTS);
  ck_assert_uint_eq(r->oip_order[2], ATTND_OIP_OUTPUT);
  ck_assert_str_eq(r->id, "r-1");
  attnd_request_free(r);
  free(oip);
  free(v1);
}
END_TEST

/* The parameters one at a time, each with its /v1 spelling; and defaults
 * (no outputs named: output alone; timeout_ms the configured default). */
static const struct {
  const char *oip, *v1;
} param_cases[] = {
    {"{}", "{}"},
    {"{\"causal\":true}", "{\"mask\":{\"causal\":true}}"},
    {"{\"causal\":false}", "{\"mask\":{\"causal\":false}}"},
    {"{\"causal\":\"none\"}", "{\"mask\":{\"causal\":\"none\"}}"},
    {"{\"causal\":\"bottom_right\"}",
     "{\"mask\":{\"causal\":\"bottom_right\"}}"},
    {"{\"window_left\":0}", "{\"mask\":{\"window\":{\"left\":0}}}"},
    {"{\"window_right\":3}", "{\"mask\":{\"window\":{\"right\":3}}}"},
    {"{\"alibi\":false}", "{\"mask\":{\"alibi\":false}}"},
    {"{\"scale\":-2e-3}", "{\"scale\":-2e-3}"},
    {"{\"softcap\":5}", "{\"softcap\":5}"},
    {"{\"rope_theta\":500}", "{\"rope\":{\"theta\":500}}"},
    {"{\"rope_dims\":2}", "{\"rope\":{\"dims\":2}}"},
    {"{\"rope_style\":\"half\"}", "{\"rope\":{}}"},
    {"{\"num_kv_heads\":2}", "{\"num_kv_heads\":2}"},
    {"{\"timeout_ms\":1}", "{\"timeout_ms\":1}"},
    {"{\"binary_data_output\":true}", "{}"},
    {"{\"num_heads\":null}", NULL}, /* null is absent: num_heads missing */
};

START_TEST(test_generic_parameters) {
  static const tin_t q[] = {{"query", 2, {3, 4}, NULL}};
  char oip_extra[256], v1_extra[256], *oip, *v1;
  if (param_cases[_i].v1 == NULL) {
    attnd_request_t *r = NULL;
    attnd_error_t e;
    const char *body = "{\"parameters\":{\"num_heads\":null},\"inputs\":[{"
                       "\"name\":\"query\",\"shape\":[1],\"datatype\":"
                       "\"FP32\",\"data\":[1]}]}";
    ck_assert_int_eq(attnd_oip_decode(ATTND_OIP_GENERIC, body, strlen(body), -1,
                                      NULL, 0, &cfg, layers, &r, &e),
                     -1);
    ck_assert_str_eq(e.field, "parameters.num_heads");
    return;
  }
  /* num_heads 2 joins each case's parameters */
  json_t *p = load(param_cases[_i].oip), *v = load(param_cases[_i].v1);
  json_object_set_new(p, "num_heads", json_integer(2));
  json_object_set_new(v, "num_heads", json_integer(2));
  json_t *ret = load("{\"metrics\":false,\"encoding\":\"flat\"}");
  json_object_set_new(v, "return", ret);
  char *pt = dump(p), *vt = dump(v);
  snprintf(oip_extra, sizeof oip_extra, "{\"parameters\":%s}", pt);
  snprintf(v1_extra, sizeof v1_extra, "%s", vt);
  free(pt);
  free(vt);
  build(q, 1, oip_extra, v1_extra, "FP32", "INT64", 0, &oip, &v1);
  attnd_request_t *r = same(ATTND_OIP_GENERIC, oip, v1);
  ck_assert_uint_eq(r->oip_outputs, ATTND_OIP_OUTPUT);
  ck_assert_int_eq(r->oip_n_outputs, 1);
  ck_assert_uint_eq(r->oip_order[0], ATTND_OIP_OUTPUT);
  ck_assert_uint_eq(r->oip_binary, strstr(param_cases[_i].oip, "binary")
                                       ? ATTND_OIP_OUTPUT
                                       : 0);
  ck_assert_int_eq(r->timeout_ms,
                   strstr(param_cases[_i].oip, "timeout") ? 1 : 5000);
  ck_assert_int_eq(r->weights_mode, ATTND_WEIGHTS_NONE);
  ck_assert(!r->params.want_weights && !r->params.want_mean_weights &&
            !r->params.want_head_outputs);
  attnd_request_free(r);
  free(oip);
  free(v1);
}
END_TEST

/* The reductions of the weights: OIP's weights_* parameters and outputs
 * decode to the attn_reduce_t of /v1's return.weights object; each output
 * is asked for, in its order. */
START_TEST(test_weights_reduce) {
  static const tin_t q[] = {{"query", 2, {3, 4}, NULL}};
  static const struct {
    const char *params, *outputs, *v1;
    unsigned bits;
  } cases[] = {
      {"\"weights_top_k\":2,\"weights_heads\":\"mean\"",
       "[{\"name\":\"weights_top_k_value\"},{\"name\":\"weights_top_k_"
       "index\"}]",
       "{\"top_k\":2,\"heads\":\"mean\"}",
       ATTND_OIP_TOP_K_VALUE | ATTND_OIP_TOP_K_INDEX},
      {"\"weights_pool_queries\":2,\"weights_pool_keys\":3,\"weights_"
       "reduce\":\"max\",\"weights_sink_tokens\":1,\"weights_query_start\""
       ":1,\"weights_query_end\":3,\"weights_key_start\":0,\"weights_key_"
       "end\":2",
       "[{\"name\":\"weights_sink\"},{\"name\":\"weights_pooled\"},{"
       "\"name\":\"weights_entropy\"},{\"name\":\"weights_distance\"}]",
       "{\"pool\":[2,3],\"reduce\":\"max\",\"stats\":[\"entropy\","
       "\"sink\",\"distance\"],\"sink_tokens\":1,\"query_range\":[1,3],"
       "\"key_range\":[0,2]}",
       ATTND_OIP_SINK | ATTND_OIP_POOLED | ATTND_OIP_ENTROPY |
           ATTND_OIP_DISTANCE},
  };
  char oip_extra[1024], v1_extra[512], *oip, *v1;
  snprintf(oip_extra, sizeof oip_extra,
           "{\"parameters\":{\"num_heads\":2,%s},\"outputs\":%s}",
           cases[_i].params, cases[_i].outputs);
  snprintf(v1_extra, sizeof v1_extra,
           "{\"num_heads\":2,\"return\":{\"metrics\":false,\"encoding\":"
           "\"flat\",\"weights\":%s}}",
           cases[_i].v1);
  build(q, 1, oip_extra, v1_extra, "FP32", "INT64", 0, &oip, &v1);
  attnd_request_t *r = same(ATTND_OIP_GENERIC, oip, v1);
  ck_assert_uint_eq(r->oip_outputs, cases[_i].bits);
  ck_assert(r->plan.reduce);
  attnd_request_free(r);
  free(oip);
  free(v1);
}
END_TEST

/* ---- same: layer models ---------------------------------------------------
 */

static const int64_t one_length[] = {5}, pos5[] = {3, 4, 5, 6, 7},
                     pos3[] = {5, 6, 7};

START_TEST(test_layer_models) {
  static const tin_t torch[] = {
      {"query", 3, {1, 3, 8}, NULL},     {"key", 3, {1, 5, 8}, NULL},
      {"value", 3, {1, 5, 8}, NULL},     {"key_lengths", 1, {1}, one_length},
      {"allow", 4, {1, 2, 3, 5}, NULL},  {"bias", 3, {1, 3, 5}, NULL},
      {"positions_query", 1, {3}, pos3}, {"positions_key", 1, {5}, pos5},
  };
  static const tin_t llama[] = {{"query", 2, {3, 8}, NULL},
                                {"positions_query", 2, {1, 3}, pos3}};
  const struct {
    const char *model;
    const tin_t *ts;
    size_t n;
    const char *oip, *v1;
  } cases[] = {
      {"L", torch, sizeof torch / sizeof torch[0],
       "{\"parameters\":{\"causal\":\"bottom_right\",\"window_left\":3,"
       "\"scale\":0.25,\"softcap\":8,\"alibi\":true,\"timeout_ms\":20},"
       "\"outputs\":[{\"name\":\"weights_mean\",\"parameters\":{"
       "\"binary_data\":true}},{\"name\":\"output\"}]}",
       "{\"layer\":\"L\",\"mask\":{\"causal\":\"bottom_right\",\"window\":{"
       "\"left\":3},\"alibi\":true},\"scale\":0.25,\"softcap\":8,"
       "\"timeout_ms\":20,\"return\":{\"weights\":\"mean\",\"metrics\":false,"
       "\"encoding\":\"flat\"}}"},
      {LLAMA, llama, sizeof llama / sizeof llama[0],
       "{\"parameters\":{\"binary_data_output\":true},\"outputs\":[{\"name\":"
       "\"head_outputs\",\"parameters\":{\"binary_data\":false}},{\"name\":"
       "\"output\"}]}",
       "{\"layer\":\"" LLAMA "\",\"return\":{\"head_outputs\":true,"
       "\"metrics\":false,\"encoding\":\"flat\"}}"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    char *oip, *v1;
    build(cases[c].ts, cases[c].n, cases[c].oip, cases[c].v1,
          _i ? "BF16" : "FP16", _i ? "INT32" : "INT64", _i, &oip, &v1);
    attnd_request_t *r = same(cases[c].model, oip, v1);
    ck_assert_ptr_eq(r->layer, attnd_layer_set_find(layers, cases[c].model));
    ck_assert_int_eq(r->params.num_heads, c ? 4 : 2);
    ck_assert_int_eq(r->params.num_kv_heads, 2);
    if (c == 0) { /* weights_mean binary, output not */
      ck_assert_uint_eq(r->oip_outputs,
                        ATTND_OIP_WEIGHTS_MEAN | ATTND_OIP_OUTPUT);
      ck_assert_uint_eq(r->oip_binary, ATTND_OIP_WEIGHTS_MEAN);
      ck_assert_int_eq(r->weights_mode, ATTND_WEIGHTS_MEAN);
    } else { /* binary_data_output, but head_outputs says no */
      ck_assert_uint_eq(r->oip_binary, ATTND_OIP_OUTPUT);
      ck_assert_uint_eq(r->oip_order[0], ATTND_OIP_HEAD_OUTPUTS);
    }
    attnd_request_free(r);
    free(oip);
    free(v1);
  }
}
END_TEST

/* ---- values /v1 cannot say ------------------------------------------------
 */

static attnd_request_t *decode_ok(const char *model, const char *body) {
  attnd_request_t *r = NULL;
  attnd_error_t e;
  int rc = attnd_oip_decode(model, body, strlen(body), -1, NULL, 0, &cfg,
                            layers, &r, &e);
  ck_assert_msg(rc == 0, "%s (%s): %s\n%s", attnd_error_name(e.code), e.field,
                e.message, body);
  return r;
}

/* "data" arrays are lifted by the bulk scanner however short (decode.h,
 * ATTND_BULK_MIN_ELEMS): a small body is never parsed whole by jansson,
 * and both paths give the same request. */
START_TEST(test_small_data_lifted) {
  static const char *const bodies[] = {
      "{\"parameters\":{\"num_heads\":1},\"inputs\":[{\"name\":\"query\","
      "\"shape\":[1,1],\"datatype\":\"FP32\",\"data\":[1]}]}",
      "{\"parameters\":{\"num_heads\":2},\"inputs\":[{\"name\":\"query\","
      "\"shape\":[2,4],\"datatype\":\"FP16\",\"data\":[[0.5,-1,2,3],"
      "[4,5,6,7]]}]}",
  };
  for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
    uint64_t before = attnd__decode_slow_runs;
    attnd_request_free(decode_ok(ATTND_OIP_GENERIC, bodies[i]));
    ck_assert_msg(attnd__decode_slow_runs == before,
                  "body %zu was parsed whole by jansson", i);
    ck_assert(paths_agree(ATTND_OIP_GENERIC, bodies[i], strlen(bodies[i]), -1));
  }
}
END_TEST

/* max_response_bytes counts the outputs the reply sends: query [16, 256]
 * makes an output of 4096 floats (65536 bytes of JSON, over 16384), which
 * a request for weights_entropy alone does not send; asked for, it is
 * refused. */
START_TEST(test_reply_bytes_asked) {
  static const char *const outs[] = {
      "[{\"name\":\"weights_entropy\"}]",
      "[{\"name\":\"weights_entropy\"},{\"name\":\"output\"}]"};
  for (int k = 0; k < 2; k++) {
    char *body = malloc(16 * 256 * 2 + 512), *at = body;
    at += sprintf(at, "{\"parameters\":{\"num_heads\":1},\"inputs\":[{\"name\":"
                      "\"query\",\"shape\":[16,256],\"datatype\":\"FP32\","
                      "\"data\":[1");
    for (int i = 1; i < 16 * 256; i++, at += 2)
      memcpy(at, ",1", 2);
    sprintf(at, "]}],\"outputs\":%s}", outs[k]);
    attnd_request_t *r = NULL;
    attnd_error_t e;
    int rc = attnd_oip_decode(ATTND_OIP_GENERIC, body, strlen(body), -1, NULL,
                              0, &cfg, layers, &r, &e);
    free(body);
    if (k == 0) {
      ck_assert_msg(rc == 0, "%s (%s): %s", attnd_error_name(e.code), e.field,
                    e.message);
      attnd_request_free(r);
    } else {
      ck_assert_int_eq(rc, -1);
      ck_assert_str_eq(attnd_error_name(e.code), "limit_exceeded");
      ck_assert_msg(strstr(e.message, "over max_response_bytes 16384"), "%s",
                    e.message);
    }
  }
}
END_TEST

/* A token jansson refuses in a big "data" array (at its start, middle or
 * end, or the text ending in it) is invalid_json at jansson's line and
 * column for the whole body, on both paths, over max_json_structure_bytes
 * (4096, which the array alone is over) or under it, and the fast path
 * does not have jansson read the body whole: not 413 for the array
 * counted as structure. */
START_TEST(test_big_data_syntax_error) {
  const char *token = bad_array_tokens[_i];
  attnd_config_t saved = cfg;
  cfg.max_tensor_elements = 1 << 20;
  cfg.max_seq_len = 1 << 20;
  for (int where = 0; where < 3; where++) {
    int n = 2000, at = where == 0 ? 0 : where == 1 ? n / 2 : n;
    if (token && token[0] == ']' && at == 0)
      continue; /* "[]": an empty array, the numbers after it structure */
    size_t len;
    char *body = bad_array_body(
        "{\"parameters\":{\"num_heads\":1},\n\"inputs\":[{\"name\":\"query\","
        "\"shape\":[1,2000],\"datatype\":\"FP32\",\"data\":",
        n, at, token, "}]}", &len);
    char want[256];
    ck_assert(json_error_reference(body, len, want, sizeof want) == 0);
    for (int limit = 0; limit < 2; limit++) {
      cfg.max_json_structure_bytes =
          limit ? saved.max_json_structure_bytes : 4096;
      uint64_t before = attnd__decode_slow_runs;
      attnd_request_t *r = NULL;
      attnd_error_t e;
      int rc = attnd_oip_decode(ATTND_OIP_GENERIC, body, len, -1, NULL, 0, &cfg,
                                layers, &r, &e);
      ck_assert_msg(rc == -1 && attnd_error_status(e.code) == 400 &&
                        strcmp(attnd_error_name(e.code), "invalid_json") == 0 &&
                        e.field[0] == 0 && strcmp(e.message, want) == 0,
                    "token %s, at %d, limit %lld: %d %s (%s) %s; expected %s",
                    token, at, (long long)cfg.max_json_structure_bytes,
                    attnd_error_status(e.code), attnd_error_name(e.code),
                    e.field, e.message, want);
      ck_assert_msg(attnd__decode_slow_runs == before,
                    "token %s: the body was read whole", token);
      ck_assert(!paths_agree(ATTND_OIP_GENERIC, body, len, -1));
    }
    free(body);
  }
  cfg = saved;
}
END_TEST

/* FP16 and BF16 numbers are converted to float32 directly, not rounded to
 * the declared type first. */
START_TEST(test_direct_conversion) {
  static const char *const dts[] = {"FP16", "BF16", "FP64", "FP32"};
  for (int i = 0; i < 4; i++) {
    char body[256];
    snprintf(body, sizeof body,
             "{\"parameters\":{\"num_heads\":1},\"inputs\":[{\"name\":"
             "\"query\",\"shape\":[1,2],\"datatype\":\"%s\",\"data\":[0.1,"
             "70000.3]}]}",
             dts[i]);
    attnd_request_t *r = decode_ok(ATTND_OIP_GENERIC, body);
    const float *q = r->params.query.data;
    ck_assert_float_eq(q[0], 0.1f);
    ck_assert_float_eq(q[1], 70000.3f);
    attnd_request_free(r);
  }
}
END_TEST

/* ---- both paths: data the bulk scanner lifts ----------------------------
 */

/* n values from `gen` ("f": quarters, "b": true/false, "n": 0/1, "i":
 * integers), with value `odd` at index `at` (NULL: none), as a JSON array:
 * flat, or with `rows`, nested [rows][n / rows]. */
static void put_values(attnd_buf_t *b, int n, int rows, const char *gen, int at,
                       const char *odd) {
  attnd_buf_puts(b, "[");
  for (int i = 0; i < n; i++) {
    if (rows && i % (n / rows) == 0)
      attnd_buf_puts(b, i ? ",[" : "[");
    else if (i)
      attnd_buf_puts(b, ",");
    if (odd && i == at)
      attnd_buf_puts(b, odd);
    else if (*gen == 'f')
      attnd_buf_printf(b, "%g", ((i * 7) % 9 - 4) * 0.25);
    else if (*gen == 'b')
      attnd_buf_puts(b, i % 3 ? "true" : "false");
    else if (*gen == 'n')
      attnd_buf_puts(b, i % 3 ? "1" : "0");
    else
      attnd_buf_printf(b, "%d", i % 16);
    if (rows && i % (n / rows) == n / rows - 1)
      attnd_buf_puts(b, "]");
  }
  attnd_buf_puts(b, "]");
}

/* Bodies whose data the fast path lifts (64 values or more), valid and
 * not: both paths must give the same request, or the same error. */
START_TEST(test_lifted) {
  static const struct {
    const char *input, *dt, *shape, *gen;
    int n, rows, at;
    const char *odd; /* a value put at `at`, or NULL */
    int ok;
  } cases[] = {
      {"query", "FP32", "[16,4]", "f", 64, 0, 0, NULL, 1},
      {"query", "FP16", "[16,4]", "f", 64, 16, 0, NULL, 1},
      {"query", "BF16", "[1,16,4]", "f", 64, 0, 0, NULL, 1},
      {"bias", "FP64", "[16,16]", "f", 256, 16, 0, NULL, 1},
      {"allow", "BOOL", "[16,16]", "b", 256, 16, 0, NULL, 1},
      {"allow", "BOOL", "[16,16]", "n", 256, 0, 0, NULL, 1},
      {"positions_key", "INT64", "[4,16]", "i", 64, 4, 0, NULL, 1},
      {"positions_key", "INT32", "[4,16]", "i", 64, 0, 0, NULL, 1},
      /* errors the slow path words */
      {"query", "FP32", "[16,4]", "f", 64, 0, 5, "1e39", 0},
      {"query", "FP32", "[16,4]", "f", 65, 0, 0, NULL, 0},
      {"query", "FP32", "[16,4]", "f", 64, 8, 0, NULL, 0},
      {"query", "FP32", "[16,4]", "b", 64, 0, 0, NULL, 0},
      {"bias", "FP32", "[16,16]", "f", 256, 0, 100, "-1e300", 0},
      {"allow", "BOOL", "[16,16]", "n", 256, 0, 7, "2", 0},
      {"allow", "BOOL", "[16,16]", "n", 256, 16, 7, "0.5", 0},
      {"positions_key", "INT32", "[4,16]", "i", 64, 0, 9, "3000000000", 0},
      {"positions_key", "INT64", "[4,16]", "i", 64, 0, 9, "1.5", 0},
      {"positions_key", "INT64", "[4,16]", "b", 64, 0, 0, NULL, 0},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    attnd_buf_t b;
    attnd_buf_init(&b);
    int is_query = strcmp(cases[c].input, "query") == 0;
    attnd_buf_puts(&b, "{\"parameters\":{\"num_heads\":2,\"rope_theta\":"
                       "100},\"inputs\":[");
    if (!is_query) { /* a query of B 4, L 16, E 4 */
      attnd_buf_puts(&b, "{\"name\":\"query\",\"shape\":[4,16,4],"
                         "\"datatype\":\"FP32\",\"data\":");
      put_values(&b, 256, 0, "f", 0, NULL);
      attnd_buf_puts(&b, "},");
    }
    attnd_buf_printf(&b,
                     "{\"name\":\"%s\",\"shape\":%s,\"datatype\":"
                     "\"%s\",\"data\":",
                     cases[c].input, cases[c].shape, cases[c].dt);
    put_values(&b, cases[c].n, cases[c].rows, cases[c].gen, cases[c].at,
               cases[c].odd);
    attnd_buf_puts(&b, "}]}");
    int ok = paths_agree(ATTND_OIP_GENERIC, b.data, b.len, -1);
    ck_assert_msg(ok == cases[c].ok, "case %zu decodes %d: %s", c, ok, b.data);
    attnd_buf_free(&b);
  }
}
END_TEST

/* ---- same: binary data --------------------------------------------------
 */

/* Appends element x of datatype dt, little-endian, to b. */
static void put_elem(attnd_buf_t *b, const char *dt, const json_t *x) {
  unsigned char e[8];
  size_t n;
  double v = json_is_true(x) ? 1 : json_is_false(x) ? 0 : json_number_value(x);
  if (strcmp(dt, "FP32") == 0) {
    float f = (float)v;
    memcpy(e, &f, n = 4);
  } else if (strcmp(dt, "FP16") == 0) {
    _Float16 h = (_Float16)v;
    memcpy(e, &h, n = 2);
  } else if (strcmp(dt, "BF16") == 0) { /* exact values: the top half */
    float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t h = (uint16_t)(u >> 16);
    memcpy(e, &h, n = 2);
  } else if (strcmp(dt, "FP64") == 0) {
    memcpy(e, &v, n = 8);
  } else if (strcmp(dt, "INT32") == 0) {
    int32_t i = (int32_t)v;
    memcpy(e, &i, n = 4);
  } else if (strcmp(dt, "INT64") == 0) {
    int64_t i = (int64_t)v;
    memcpy(e, &i, n = 8);
  } else { /* BOOL */
    e[0] = v != 0;
    n = 1;
  }
  attnd_buf_append(b, (const char *)e, n);
}

static void put_leaves(attnd_buf_t *b, const char *dt, const json_t *v) {
  size_t i;
  const json_t *x;
  if (!json_is_array(v)) {
    put_elem(b, dt, v);
    return;
  }
  json_array_foreach(v, i, x) put_leaves(b, dt, x);
}

/* The OIP request text `oip` with the data of every input whose index has
 * bit `which` set sent as binary data instead: a new body in *body (free)
 * whose first *json_len bytes are the JSON, padded with spaces to `mod4`
 * past a multiple of 4 bytes (or as it is, for -1). */
static size_t to_binary(const char *oip, unsigned which, int mod4, char **body,
                        int64_t *json_len) {
  json_t *root = load(oip), *in;
  attnd_buf_t bin;
  attnd_buf_init(&bin);
  size_t i;
  json_array_foreach(json_object_get(root, "inputs"), i, in) {
    if (!(which >> i & 1))
      continue;
    size_t before = bin.len;
    put_leaves(&bin, json_string_value(json_object_get(in, "datatype")),
               json_object_get(in, "data"));
    json_object_del(in, "data");
    json_object_set_new(
        in, "parameters",
        json_pack("{s:I}", "binary_data_size", (json_int_t)(bin.len - before)));
  }
  char *text = dump(root);
  size_t n = strlen(text), pad = mod4 < 0 ? 0 : (size_t)(mod4 + 4 - n % 4) % 4;
  *body = malloc(n + pad + bin.len + 1);
  memcpy(*body, text, n);
  memset(*body + n, ' ', pad);
  n += pad;
  if (bin.len)
    memcpy(*body + n, bin.data, bin.len);
  *json_len = (int64_t)n;
  free(text);
  n += bin.len;
  attnd_buf_free(&bin);
  return n;
}

/* Every input as binary data (and, by turns, every other one), in each
 * float datatype and INT32 or INT64: the same request as JSON data. */
START_TEST(test_binary_same) {
  static const char *const fdt[] = {"FP32", "FP16", "BF16", "FP64"};
  const char *extra = "{\"parameters\":{\"num_heads\":2,\"num_kv_heads\":1,"
                      "\"rope_theta\":100},\"outputs\":[{\"name\":\"output\","
                      "\"parameters\":{\"binary_data\":true}}]}";
  char *oip, *v1, *body;
  build(every_input, sizeof every_input / sizeof every_input[0], extra, "{}",
        fdt[_i % 4], _i % 2 ? "INT64" : "INT32", 0, &oip, &v1);
  attnd_request_t *a = decode_ok(ATTND_OIP_GENERIC, oip), *b = NULL;
  int64_t json_len;
  /* the FP32 turns lend the body, and the FP16 ones: FP32 data 4-byte
   * aligned in it is read in place, and the request takes the body */
  int lend = _i % 4 < 2;
  size_t len =
      to_binary(oip, _i < 4 ? ~0u : 0x5555u, _i == 4 ? 1 : 0, &body, &json_len);
  attnd_error_t e;
  void *own = body;
  int rc = attnd_oip_decode(ATTND_OIP_GENERIC, body, len, json_len,
                            lend ? &own : NULL, len, &cfg, layers, &b, &e);
  ck_assert_msg(rc == 0, "%s (%s): %s\n%.*s", attnd_error_name(e.code), e.field,
                e.message, (int)json_len, body);
  const char *d = decode_request_diff(a, b);
  ck_assert_msg(d == NULL, "%s differs\n%.*s", d, (int)json_len, body);
  ck_assert_uint_eq(b->oip_binary, ATTND_OIP_OUTPUT);
  const char *q = b->params.query.data;
  int in_place = q >= body && q < body + len;
  ck_assert_int_eq(in_place, _i == 0); /* FP32, lent, aligned */
  ck_assert_int_eq(own == NULL, in_place);
  attnd_request_free(a);
  attnd_request_free(b);
  if (own)
    free(body);
  free(oip);
  free(v1);
}
END_TEST

/* ---- errors ---------------------------------------------------------------
 */

#define Q24                                                                    \
  "{\"name\":\"query\",\"shape\":[2,4],\"datatype\":\"FP32\",\"data\":[1,2,3," \
  "4,5,6,7,8]}"
#define Q18                                                                    \
  "{\"name\":\"query\",\"shape\":[1,8],\"datatype\":\"FP32\",\"data\":[1,2,3," \
  "4,5,6,7,8]}"
/* A generic request: query [2, 4], num_heads 2, and more. */
#define GEN(params, inputs, rest)                                              \
  "{\"parameters\":{\"num_heads\":2" params "},\"inputs\":[" Q24 inputs        \
  "]" rest "}"
/* An input after the query: name, datatype, shape and data. */
#define IN(name, dt, shape, data)                                              \
  ",{\"name\":\"" name "\",\"datatype\":\"" dt "\",\"shape\":" shape           \
  ",\"data\":" data "}"
/* The query alone, with its members replaced. */
#define QX(members)                                                            \
  "{\"parameters\":{\"num_heads\":2},\"inputs\":[" members "]}"
/* A row of the query below. */
#define ONES4 "[1,1,1,1]"
/* A query [16, 4] of ones, four heads, with more parameters and the
 * outputs asked for: with the weights, a reply over max_response_bytes. */
#define Q16X4(params, outputs)                                                 \
  "{\"parameters\":{\"num_heads\":4" params "},\"inputs\":[{\"name\":"         \
  "\"query\",\"datatype\":\"FP32\",\"shape\":[16,4],\"data\":[" ONES4          \
  "," ONES4 "," ONES4 "," ONES4 "," ONES4 "," ONES4 "," ONES4 "," ONES4        \
  "," ONES4 "," ONES4 "," ONES4 "," ONES4 "," ONES4 "," ONES4 "," ONES4        \
  "," ONES4 "]}],\"outputs\":[" outputs "]}"

typedef struct err_case {
  const char *model; /* NULL: the generic model */
  const char *body;
  const char *code;
  const char *field;
  const char *msg; /* words the message must contain, '|' between */
  /* Binary data: with bin, the body is JSON (body) then bin[0..bin_len),
   * and Inference-Header-Content-Length says strlen(body) (or json_len
   * when that is not 0; -1: the header is absent). */
  const char *bin;
  size_t bin_len;
  int64_t json_len;
} err_case_t;

/* Cases without binary data leave its three members out (zero). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
static const err_case_t err_cases[] = {
    /* the model, the JSON, the root */
    {"nope", GEN("", "", ""), "unknown_layer", "model",
     "model 'nope' is not known|'attention'|2 loaded layers, 'L', '" LLAMA "'"},
    {"nope", "{", "unknown_layer", "model", "model 'nope'"},
    {"", GEN("", "", ""), "unknown_layer", "model", "model '' is not known"},
    {NULL, "{\"inputs\":", "invalid_json", "", "invalid JSON at line 1"},
    {NULL, "{\"inputs\":[],\"inputs\":[]}", "invalid_json", "",
     "duplicate object key"},
    {NULL, "[]", "invalid_type", "", "the request is an array"},
    {NULL, GEN("", "", ",\"model_name\":\"x\""), "unknown_field", "model_name",
     "model_name is not a known member|known: id, parameters, inputs, "
     "outputs"},
    {NULL, GEN("", "", ",\"id\":7"), "invalid_type", "id",
     "id is a number; expected a string"},
    /* inputs */
    {NULL, "{\"parameters\":{\"num_heads\":2}}", "missing_field", "inputs",
     "inputs is required"},
    {NULL, "{\"inputs\":{}}", "invalid_type", "inputs",
     "inputs is an object; expected an array"},
    {NULL, "{\"inputs\":[]}", "missing_field", "inputs",
     "no tensor named query"},
    {NULL, QX("[]"), "invalid_type", "inputs[0]",
     "inputs[0] is an array; expected an object"},
    {NULL, QX("{\"name\":\"query\",\"dtype\":\"FP32\"}"), "unknown_field",
     "inputs[0].dtype", "inputs[0].dtype is not a known member of inputs[0]"},
    {NULL, QX("{\"shape\":[1]}"), "missing_field", "inputs[0].name",
     "inputs[0].name is required"},
    {NULL, QX("{\"name\":1}"), "invalid_type", "inputs[0].name",
     "inputs[0].name is a number; expected a string"},
    {NULL, GEN("", IN("keys", "FP32", "[1]", "[1]"), ""), "invalid_value",
     "inputs[1].name",
     "inputs[1].name is 'keys', not an input of model 'attention' (inputs: "
     "query, key, value, q_weight|positions_key)"},
    {NULL, GEN("", IN("query", "FP32", "[1]", "[1]"), ""), "invalid_value",
     "inputs[1].name", "'query', as is inputs[0].name"},
    {"L", "{\"inputs\":[" Q18 IN("q_weight", "FP32", "[1]", "[1]") "]}",
     "invalid_value", "inputs[1].name",
     "'q_weight', not an input of model 'L', which has its own weights "
     "(inputs: query, key, value, key_lengths, allow, bias, positions_query, "
     "positions_key)"},
    {NULL, QX("{\"name\":\"query\",\"shape\":[1]}"), "missing_field",
     "inputs[0].datatype", "inputs[0].datatype is required"},
    {NULL, QX("{\"name\":\"query\",\"datatype\":32}"), "invalid_type",
     "inputs[0].datatype", "inputs[0].datatype is a number"},
    {NULL, QX("{\"name\":\"query\",\"datatype\":\"UINT8\"}"), "invalid_value",
     "inputs[0].datatype",
     "inputs[0].datatype is 'UINT8'; query takes FP32, FP16, BF16 or FP64"},
    {NULL, GEN("", IN("key_lengths", "FP32", "[2]", "[1,2]"), ""),
     "invalid_value", "inputs[1].datatype", "key_lengths takes INT32 or INT64"},
    {NULL, GEN("", IN("allow", "INT32", "[2,2]", "[1,0,1,1]"), ""),
     "invalid_value", "inputs[1].datatype", "'INT32'; allow takes BOOL"},
/* binary data: framing */
#define QB(dt, shape, size)                                                    \
  QX("{\"name\":\"query\",\"datatype\":\"" dt "\",\"shape\":" shape            \
     ",\"parameters\":{\"binary_data_size\":" size "}}")
    {NULL, QB("FP32", "[1]", "4"), "bad_request",
     "inputs[0].parameters.binary_data_size",
     "is given, but the request has no binary data|"
     "Inference-Header-Content-Length"},
    {NULL, QB("FP32", "[1]", "4"), "bad_request",
     "Inference-Header-Content-Length",
     "Inference-Header-Content-Length is 9999, past the end of the", "\0\0\0",
     3, 9999},
    {NULL, QB("FP32", "[2]", "4"), "size_mismatch",
     "inputs[0].parameters.binary_data_size",
     "binary_data_size is 4, but query's shape [2] of FP32 needs 8 bytes",
     "\0\0\0\0", 4},
    {NULL, QB("FP16", "[2]", "4"), "bad_request",
     "inputs[0].parameters.binary_data_size",
     "is 4, but only 3 bytes of the binary data are left after the JSON",
     "\0\0\0", 3},
    {NULL, QB("BF16", "[2]", "4"), "bad_request",
     "Inference-Header-Content-Length",
     "the body has 6 bytes after its JSON, and its inputs' binary_data_size "
     "take 4 of them",
     "\0\0\0\0\0\0", 6},
    {NULL,
     QX("{\"name\":\"query\",\"datatype\":\"FP32\",\"shape\":[1],"
        "\"data\":[1]}"),
     "bad_request", "Inference-Header-Content-Length",
     "the body has 2 bytes after its JSON, and its inputs' binary_data_size "
     "take 0 of them",
     "\0\0", 2},
    {NULL,
     QX("{\"name\":\"query\",\"datatype\":\"FP32\",\"shape\":[1],"
        "\"parameters\":{\"binary_data_size\":4},\"data\":[1]}"),
     "invalid_value", "inputs[0].parameters.binary_data_size",
     "an input's data is JSON or binary, not both", "\0\0\0\0", 4},
    /* binary data sent without Inference-Header-Content-Length (json_len
     * -1): the JSON is taken to be the whole body, and the message says
     * what is probably missing, whatever the tensor's first bytes are */
    {NULL, QB("FP32", "[1]", "4"), "invalid_json",
     "Inference-Header-Content-Length",
     "invalid JSON|Inference-Header-Content-Length|missing", "\0\0\x80?", 4,
     -1},
    {NULL, QB("FP32", "[1]", "4"), "invalid_json",
     "Inference-Header-Content-Length",
     "invalid JSON|Inference-Header-Content-Length|missing", "\0\0\x80\xbf", 4,
     -1},
    {NULL, QB("FP32", "[2]", "8"), "invalid_json",
     "Inference-Header-Content-Length",
     "invalid JSON|Inference-Header-Content-Length|missing",
     "\xcd\xcc\xcc=\0\0\0@", 8, -1},
    {NULL, QB("FP32", "[1]", "-4"), "invalid_value",
     "inputs[0].parameters.binary_data_size", "is -4; expected 0 to",
     "\0\0\0\0", 4},
    {NULL, QB("FP32", "[1]", "\"4\""), "invalid_type",
     "inputs[0].parameters.binary_data_size", "is a string", "\0\0\0\0", 4},
    /* binary data: values */
    {NULL, QB("FP32", "[1,2]", "8"), "non_finite", "inputs[0]",
     "inputs[0] (query) element [0, 1] is not a finite float32",
     "\0\0\0\0\0\0\xc0\x7f", 8},
    {NULL, QB("FP16", "[2]", "4"), "non_finite", "inputs[0]",
     "inputs[0] (query) element [0] is not a finite float32", "\0\x7c\0\0", 4},
    {NULL, QB("FP64", "[1]", "8"), "non_finite", "inputs[0]",
     "element [0] is not a finite float32", "\0\0\0\0\0\0\xf0\x47", 8},
    {NULL,
     "{\"parameters\":{\"num_heads\":2},\"inputs\":[{\"name\":\"query\","
     "\"datatype\":\"FP32\",\"shape\":[1,2],\"data\":[1,2]},{\"name\":"
     "\"allow\",\"datatype\":\"BOOL\",\"shape\":[1,2],\"parameters\":{"
     "\"binary_data_size\":2}}]}",
     "invalid_value", "inputs[1]",
     "inputs[1] (allow) element [0, 1] is the byte 2; BOOL is 0 or 1", "\1\2",
     2},
    {NULL,
     QX("{\"name\":\"query\",\"datatype\":\"FP32\",\"shape\":[1],"
        "\"parameters\":{\"shared_memory_region\":\"x\"}}"),
     "unknown_field", "inputs[0].parameters.shared_memory_region",
     "not a known member of inputs[0].parameters (known: binary_data_size)"},
    {NULL,
     QX("{\"name\":\"query\",\"datatype\":\"FP32\",\"shape\":[1],"
        "\"parameters\":[]}"),
     "invalid_type", "inputs[0].parameters", "is an array; expected an object"},
    /* shapes */
    {NULL, QX("{\"name\":\"query\",\"datatype\":\"FP32\"}"), "missing_field",
     "inputs[0].shape", "inputs[0].shape is required"},
    {NULL, QX("{\"name\":\"query\",\"datatype\":\"FP32\",\"shape\":2}"),
     "invalid_type", "inputs[0].shape",
     "inputs[0].shape is a number; expected an array of dimensions"},
    {NULL, QX("{\"name\":\"query\",\"datatype\":\"FP32\",\"shape\":[]}"),
     "shape_mismatch", "inputs[0].shape",
     "inputs[0].shape has 0 dimensions; expected 1 to 4"},
    {NULL,
     QX("{\"name\":\"query\",\"datatype\":\"FP32\",\"shape\":[1,1,1,1,1]}"),
     "shape_mismatch", "inputs[0].shape", "has 5 dimensions"},
    {NULL, QX("{\"name\":\"query\",\"datatype\":\"FP32\",\"shape\":[2,0]}"),
     "invalid_value", "inputs[0].shape", "inputs[0].shape[1] is 0; expected 1"},
    {NULL, QX("{\"name\":\"query\",\"datatype\":\"FP32\",\"shape\":[\"2\"]}"),
     "invalid_type", "inputs[0].shape",
     "inputs[0].shape[0] is a string; expected an integer"},
    {NULL,
     QX("{\"name\":\"query\",\"datatype\":\"FP32\",\"shape\":[64,128],"
        "\"data\":[1]}"),
     "limit_exceeded", "inputs[0].shape",
     "inputs[0] (query) [64, 128] has 8192 elements, over "
     "max_tensor_elements 4096"},
    /* a count past int64 is not given as INT64_MAX elements */
    {NULL,
     QX("{\"name\":\"query\",\"datatype\":\"FP32\",\"shape\":[4294967296,"
        "4294967296,2],\"data\":[1]}"),
     "limit_exceeded", "inputs[0].shape",
     "inputs[0] (query) [4294967296, 4294967296, 2] has more than "
     "9223372036854775807 elements, over max_tensor_elements 4096"},
    /* data */
    {NULL, QX("{\"name\":\"query\",\"datatype\":\"FP32\",\"shape\":[1]}"),
     "missing_field", "inputs[0].data", "inputs[0].data is required"},
    {NULL,
     QX("{\"name\":\"query\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":1}"),
     "invalid_type", "inputs[0].data",
     "inputs[0].data is a number; expected an array"},
    {NULL, GEN("", IN("key", "FP32", "[2,4]", "[1,2,3,4,5,6,7]"), ""),
     "size_mismatch", "inputs[1].data",
     "inputs[1].data has 7 elements, but key's shape [2, 4] needs 8"},
    {NULL, GEN("", IN("key", "FP32", "[2,4]", "[]"), ""), "size_mismatch",
     "inputs[1].data", "has 0 elements, but key's shape [2, 4] needs 8"},
    {NULL, GEN("", IN("key", "FP32", "[2,4]", "[[1,2,3,4],[5,6,7]]"), ""),
     "shape_mismatch", "inputs[1].data",
     "inputs[1].data[1] has length 3, but shape [2, 4] has 4 at dimension 1"},
    {NULL, GEN("", IN("key", "FP32", "[3,4]", "[[1,2,3,4],[5,6,7,8]]"), ""),
     "shape_mismatch", "inputs[1].data",
     "inputs[1].data has length 2, but shape [3, 4] has 3 at dimension 0"},
    {NULL, GEN("", IN("key", "FP32", "[2,2]", "[1,[2],3,4]"), ""),
     "ragged_tensor", "inputs[1].data",
     "inputs[1].data[1] is an array, but inputs[1].data[0] is not: data is "
     "flat, or nested as shape [2, 2]"},
    {NULL, GEN("", IN("key", "FP32", "[2,2]", "[[1,2],3]"), ""),
     "ragged_tensor", "inputs[1].data",
     "inputs[1].data[1] is a number; expected an array of 2 (shape [2, 2])"},
    {NULL, GEN("", IN("key", "FP32", "[2,2]", "[[[1],2],[3,4]]"), ""),
     "ragged_tensor", "inputs[1].data",
     "inputs[1].data[0][0] is an array, but shape [2, 2] has 2 dimensions"},
    {NULL, GEN("", IN("key", "FP32", "[2]", "[[1],[2]]"), ""), "ragged_tensor",
     "inputs[1].data",
     "inputs[1].data[0] is an array, but shape [2] has 1 dimension"},
    {NULL,
     GEN(",\"rope_theta\":10",
         IN("positions_query", "INT64", "[2]", "[0,2147483648]"), ""),
     "invalid_value", "inputs[1]", "positions_query"},
    {NULL, GEN("", IN("key", "FP16", "[1,2]", "[[1,\"2\"]]"), ""),
     "invalid_type", "inputs[1].data",
     "inputs[1].data[0][1] is a string; expected a number (FP16)"},
    {NULL, GEN("", IN("key", "FP64", "[2]", "[1,1e39]"), ""), "non_finite",
     "inputs[1].data",
     "inputs[1].data[1] is 1e+39, which is not a finite float32"},
    {NULL, GEN("", IN("key_lengths", "INT32", "[2]", "[1,2147483648]"), ""),
     "invalid_value", "inputs[1].data",
     "inputs[1].data[1] is 2147483648; expected -2147483648 to 2147483647"},
    {NULL, GEN("", IN("key_lengths", "INT64", "[2]", "[1.5,2]"), ""),
     "invalid_type", "inputs[1].data",
     "inputs[1].data[0] is a fractional number; expected an integer"},
    {NULL, GEN("", IN("allow", "BOOL", "[2,2]", "[true,false,2,1]"), ""),
     "invalid_value", "inputs[1].data",
     "inputs[1].data[2] is 2; expected true, false, 0 or 1"},
    {NULL,
     GEN("", IN("allow", "BOOL", "[2,2]", "[[true,false],[\"x\",1]]"), ""),
     "invalid_type", "inputs[1].data",
     "inputs[1].data[1][0] is a string; expected true, false, 0 or 1"},
    /* parameters */
    {NULL, "{\"parameters\":[],\"inputs\":[" Q24 "]}", "invalid_type",
     "parameters", "parameters is an array; expected an object"},
    {NULL, GEN(",\"heads\":2", "", ""), "unknown_field", "parameters.heads",
     "parameters.heads is not a known member of parameters (known: "
     "num_heads, num_kv_heads, causal|binary_data_output, output_datatype, "
     "backend, precision, weights_heads|weights_key_end)"},
    {NULL, "{\"parameters\":{\"num_heads\":\"2\"},\"inputs\":[" Q24 "]}",
     "invalid_type", "parameters.num_heads",
     "parameters.num_heads is a string; expected an integer"},
    {NULL, "{\"parameters\":{\"num_heads\":0},\"inputs\":[" Q24 "]}",
     "invalid_value", "parameters.num_heads",
     "parameters.num_heads is 0; expected 1 to"},
    {NULL, "{\"parameters\":{\"num_heads\":2.5},\"inputs\":[" Q24 "]}",
     "invalid_type", "parameters.num_heads", "is a fractional number"},
    {NULL, "{\"inputs\":[" Q24 "]}", "missing_field", "parameters.num_heads",
     "parameters.num_heads is required for model 'attention'"},
    {NULL, "{\"parameters\":{\"num_heads\":8},\"inputs\":[" Q24 "]}",
     "limit_exceeded", "parameters.num_heads",
     "num_heads 8 is over max_heads 4"},
    {NULL, GEN(",\"causal\":3", "", ""), "invalid_type", "parameters.causal",
     "parameters.causal is a number; expected true, false, \"none\", "
     "\"bottom_right\" or \"top_left\""},
    {NULL, GEN(",\"causal\":\"sideways\"", "", ""), "invalid_value",
     "parameters.causal", "parameters.causal is \"sideways\"; expected true"},
    {NULL, GEN(",\"alibi\":\"yes\"", "", ""), "invalid_type",
     "parameters.alibi",
     "parameters.alibi is a string; expected true or false"},
    {NULL, GEN(",\"scale\":\"x\"", "", ""), "invalid_type", "parameters.scale",
     "parameters.scale is a string; expected a number"},
    {NULL, GEN(",\"softcap\":1e39", "", ""), "non_finite", "parameters.softcap",
     "parameters.softcap is 1e+39, not a finite float32"},
    {NULL, GEN(",\"softcap\":1e-50", "", ""), "invalid_value",
     "parameters.softcap",
     "parameters.softcap is 1e-50, which is 0 in float32"},
    {NULL, GEN(",\"window_left\":-1", "", ""), "invalid_value",
     "parameters.window_left", "parameters.window_left is -1; expected 0 to"},
    {NULL, GEN(",\"rope_style\":\"spiral\"", "", ""), "invalid_value",
     "parameters.rope_style",
     "parameters.rope_style is \"spiral\"; expected \"half\" or "
     "\"interleaved\""},
    {NULL, GEN(",\"rope_theta\":true", "", ""), "invalid_type",
     "parameters.rope_theta",
     "parameters.rope_theta is true; expected a "
     "number"},
    {NULL, GEN(",\"rope_theta\":10,\"rope_dims\":3", "", ""), "invalid_value",
     "parameters.rope_dims", "rope dims is 3"},
    {NULL, GEN(",\"rope_theta\":-1,\"rope_dims\":2", "", ""), "invalid_value",
     "parameters.rope_theta", "rope theta is -1"},
    {NULL, GEN(",\"binary_data_output\":1", "", ""), "invalid_type",
     "parameters.binary_data_output", "is a number; expected true or false"},
    {NULL, GEN(",\"timeout_ms\":9000", "", ""), "limit_exceeded",
     "parameters.timeout_ms",
     "parameters.timeout_ms 9000 is over max_timeout_ms 5000"},
    {"L", "{\"parameters\":{\"num_heads\":2},\"inputs\":[" Q18 "]}",
     "invalid_value", "parameters.num_heads",
     "parameters.num_heads cannot be given to model 'L': the layer has its "
     "own"},
    {"L", "{\"parameters\":{\"rope_theta\":10},\"inputs\":[" Q18 "]}",
     "invalid_value", "parameters.rope_theta", "cannot be given to model 'L'"},
    {LLAMA, "{\"parameters\":{\"num_kv_heads\":2},\"inputs\":[" Q18 "]}",
     "invalid_value", "parameters.num_kv_heads",
     "cannot be given to model '" LLAMA "'"},
    /* outputs */
    {NULL, GEN("", "", ",\"outputs\":{}"), "invalid_type", "outputs",
     "outputs is an object; expected an array"},
    {NULL, GEN("", "", ",\"outputs\":[\"output\"]"), "invalid_type",
     "outputs[0]", "outputs[0] is a string; expected an object with a name"},
    {NULL, GEN("", "", ",\"outputs\":[{}]"), "missing_field", "outputs[0].name",
     "outputs[0].name is required"},
    {NULL, GEN("", "", ",\"outputs\":[{\"name\":\"logits\"}]"), "invalid_value",
     "outputs[0].name",
     "outputs[0].name is 'logits'; expected output, weights, weights_mean, "
     "head_outputs, weights_top_k_index|weights_sink or weights_distance"},
    {NULL,
     GEN("", "", ",\"outputs\":[{\"name\":\"output\"},{\"name\":\"output\"}]"),
     "invalid_value", "outputs[1].name", "'output', as is outputs[0].name"},
    {NULL, GEN("", "", ",\"outputs\":[{\"name\":\"output\",\"shape\":[1]}]"),
     "unknown_field", "outputs[0].shape", "not a known member of outputs[0]"},
    {NULL,
     GEN("", "",
         ",\"outputs\":[{\"name\":\"output\",\"parameters\":{"
         "\"classification\":3}}]"),
     "unknown_field", "outputs[0].parameters.classification",
     "(known: binary_data)"},
    {NULL,
     GEN("", "",
         ",\"outputs\":[{\"name\":\"weights\",\"parameters\":{"
         "\"binary_data\":\"yes\"}}]"),
     "invalid_type", "outputs[0].parameters.binary_data",
     "outputs[0].parameters.binary_data is a string; expected true or false"},
    /* the shared steps' errors, in this body's paths */
    {NULL,
     GEN("", IN("q_weight", "FP32", "[4,3]", "[1,2,3,4,5,6,7,8,9,1,2,3]"), ""),
     "shape_mismatch", "inputs[1]", "q_weight [4, 3] must have 4 columns"},
    {NULL, GEN("", IN("allow", "BOOL", "[2,3]", "[1,1,1,1,1,1]"), ""),
     "shape_mismatch", "inputs[1]", "allow [2, 3] does not broadcast"},
    {NULL, GEN("", IN("positions_query", "INT32", "[2]", "[0,1]"), ""),
     "invalid_value", "inputs[1]", "positions are given, but no rope uses"},
    {NULL, GEN("", IN("key_lengths", "INT64", "[1]", "[9]"), ""),
     "invalid_value", "inputs[1]", "key_lengths"},
    {NULL, GEN(",\"num_kv_heads\":3", "", ""), "heads_mismatch",
     "parameters.num_kv_heads", "num_kv_heads"},
    {NULL, GEN(",\"rope_style\":\"half\",\"rope_dims\":3", "", ""),
     "invalid_value", "parameters.rope_dims", "rope dims is 3"},
    {NULL, GEN(",\"rope_style\":\"half\",\"rope_theta\":0", "", ""),
     "invalid_value", "parameters.rope_theta", "rope theta is 0"},
    {"L", "{\"inputs\":[" Q24 "]}", "shape_mismatch", "inputs[0]",
     "query [2, 4] has 4 features; layer 'L' takes hidden states of 8"},
    {"L", "{\"inputs\":[" Q18 IN("value", "FP32", "[1,4]", "[1,2,3,4]") "]}",
     "shape_mismatch", "inputs[1]", "value [1, 4] has 4 features"},
    {NULL,
     "{\"parameters\":{\"num_heads\":1},\"inputs\":[{\"name\":\"query\","
     "\"datatype\":\"FP32\",\"shape\":[17,1],\"data\":[1,1,1,1,1,1,1,1,1,1,1,"
     "1,1,1,1,1,1]}]}",
     "limit_exceeded", "inputs[0]", "query length 17 is over max_seq_len 16"},
    {NULL, Q16X4("", "{\"name\":\"output\"},{\"name\":\"weights\"}"),
     "limit_exceeded", "outputs[1]",
     "the reply would take up to 17408 bytes, over max_response_bytes 16384"},
    /* the same with a reduction of the weights, and no dense weights, as
     * what makes the reply too large: named, not "outputs[-1]" */
    {NULL,
     Q16X4(",\"weights_pool_queries\":1,\"weights_pool_keys\":1",
           "{\"name\":\"output\"},{\"name\":\"weights_pooled\"}"),
     "limit_exceeded", "outputs[1]",
     "the reply would take up to 17664 bytes, over max_response_bytes 16384"},
    /* the reductions of the weights */
    {NULL, GEN(",\"weights_top_k\":2", "", ""), "invalid_value", "parameters",
     "parameters.weights_top_k is given, but no output that uses it"},
    {NULL, GEN("", "", ",\"outputs\":[{\"name\":\"weights_top_k_index\"}]"),
     "missing_field", "parameters.weights_top_k",
     "parameters.weights_top_k is required for the output "
     "weights_top_k_index"},
    {NULL,
     GEN(",\"weights_pool_queries\":2", "",
         ",\"outputs\":[{\"name\":\"weights_pooled\"}]"),
     "missing_field", "parameters.weights_pool_keys",
     "parameters.weights_pool_keys is required"},
    {NULL,
     GEN(",\"weights_top_k\":257", "",
         ",\"outputs\":[{\"name\":\"weights_top_k_value\"}]"),
     "invalid_value", "parameters.weights_top_k",
     "parameters.weights_top_k is 257; expected 1 to 256"},
    {NULL,
     GEN(",\"weights_heads\":\"all\"", "",
         ",\"outputs\":[{\"name\":\"weights_sink\"}]"),
     "invalid_value", "parameters.weights_heads", "\"per_head\" or \"mean\""},
    {NULL,
     GEN(",\"weights_top_k\":1,\"weights_key_start\":1", "",
         ",\"outputs\":[{\"name\":\"weights_top_k_value\"}]"),
     "missing_field", "parameters",
     "parameters.weights_key_start is given without "
     "parameters.weights_key_end"},
    {NULL,
     GEN(",\"weights_top_k\":1,\"weights_query_start\":1,"
         "\"weights_query_end\":5",
         "", ",\"outputs\":[{\"name\":\"weights_top_k_value\"}]"),
     "invalid_value", "parameters.weights_query_start",
     "query_range is [1, 5); it must lie in [0, Lq = 2)"},
    /* a reduction beside the dense weights: the outputs named, not a
     * parameter that was never given */
    {NULL,
     GEN("", "",
         ",\"outputs\":[{\"name\":\"weights\"},{\"name\":\"weights_entropy\"}"
         "]"),
     "invalid_value", "outputs[1]",
     "outputs[1].name is 'weights_entropy'|not computed beside the dense "
     "weights|outputs[0]"},
    {NULL,
     GEN(",\"weights_pool_queries\":1,\"weights_pool_keys\":1", "",
         ",\"outputs\":[{\"name\":\"weights_pooled\"},{\"name\":\"output\"},"
         "{\"name\":\"weights_mean\"}]"),
     "invalid_value", "outputs[0]",
     "outputs[0].name is 'weights_pooled'|not computed beside the dense "
     "weights_mean (outputs[2])"},
};
#pragma GCC diagnostic pop

START_TEST(test_errors) {
  const err_case_t *c = &err_cases[_i];
  const char *model = c->model ? c->model : ATTND_OIP_GENERIC;
  attnd_request_t *r = NULL;
  attnd_error_t e;
  memset(&e, 0, sizeof e);
  size_t n = strlen(c->body), len = n + c->bin_len;
  char *body = malloc(len + 1);
  memcpy(body, c->body, n);
  if (c->bin)
    memcpy(body + n, c->bin, c->bin_len);
  int64_t json_len = !c->bin ? -1 : c->json_len ? c->json_len : (int64_t)n;
  ck_assert(!paths_agree(model, body, len, json_len));
  int rc = attnd_oip_decode(model, body, len, json_len, NULL, 0, &cfg, layers,
                            &r, &e);
  free(body);
  ck_assert_msg(rc == -1 && r == NULL, "case %d decoded: %s", _i, c->body);
  ck_assert_msg(strcmp(attnd_error_name(e.code), c->code) == 0,
                "case %d: code %s, not %s: %s", _i, attnd_error_name(e.code),
                c->code, e.message);
  ck_assert_msg(strcmp(e.field, c->field) == 0,
                "case %d: field '%s', not '%s': %s", _i, e.field, c->field,
                e.message);
  char words[512];
  snprintf(words, sizeof words, "%s", c->msg);
  for (char *save, *w = strtok_r(words, "|", &save); w;
       w = strtok_r(NULL, "|", &save))
    ck_assert_msg(strstr(e.message, w) != NULL,
                  "case %d: message '%s' lacks '%s'", _i, e.message, w);
}
END_TEST

/* A query of 2^20 + 1 rows (binary data, of a size that the limits on its
 * elements and bytes take) passes the core's 2^40 elements of weights
 * (Lq·Lk, "problem too large"): refused by max_seq_len, the limit that
 * names it, as /v1 refuses it. */
START_TEST(test_limits_before_core) {
  attnd_config_t saved = cfg;
  cfg.max_tensor_elements = 1 << 21;
  cfg.max_body_bytes = 64 << 20;
  const size_t rows = ((size_t)1 << 20) + 1, bytes = rows * 4;
  char head[256];
  int n = snprintf(head, sizeof head,
                   "{\"parameters\":{\"num_heads\":1},\"inputs\":[{\"name\":"
                   "\"query\",\"datatype\":\"FP32\",\"shape\":[%zu,1],"
                   "\"parameters\":{\"binary_data_size\":%zu}}]}",
                   rows, bytes);
  char *body = calloc((size_t)n + bytes, 1);
  memcpy(body, head, (size_t)n);
  attnd_request_t *r = NULL;
  attnd_error_t e;
  int rc = attnd_oip_decode(ATTND_OIP_GENERIC, body, (size_t)n + bytes, n, NULL,
                            0, &cfg, layers, &r, &e);
  free(body);
  cfg = saved;
  ck_assert_msg(rc == -1 && r == NULL, "decoded");
  ck_assert_str_eq(attnd_error_name(e.code), "limit_exceeded");
  ck_assert_str_eq(e.field, "inputs[0]");
  ck_assert_str_eq(e.message, "query length 1048577 is over max_seq_len 16");
}
END_TEST

/* The parameters the decoder reads are the documented ones: docs/oip.md's
 * table and docs/openapi.json's InferParameters. A parameter added to
 * oip.c's PARAM_MAP alone would be served and described nowhere. */
START_TEST(test_params_documented) {
  dn_table_is("docs/oip.md", "## Parameters", "", attnd__oip_params,
              "server/api/oip.c's PARAM_MAP");
  dn_schema_is("InferParameters", attnd__oip_params,
               "server/api/oip.c's PARAM_MAP");
}
END_TEST

/* The members of the request, of each input and each requested output,
 * and of their parameters, against docs/oip.md's table under "## The
 * request" and docs/openapi.json's schemas, both ways. */
START_TEST(test_members_documented) {
  static const struct {
    const char *const *names;
    const char *owner, *object, *schema;
  } m[] = {
      {attnd__oip_request_members, "oip.c's attnd__oip_request_members", "",
       "InferRequest"},
      {attnd__oip_input_members, "oip_inputs.c's attnd__oip_input_members",
       "inputs.", "InferInput"},
      {attnd__oip_input_param_members,
       "oip_inputs.c's attnd__oip_input_param_members", "inputs.parameters.",
       "InferInput.parameters"},
      {attnd__oip_output_members, "oip.c's attnd__oip_output_members",
       "outputs.", "InferRequestedOutput"},
      {attnd__oip_output_param_members,
       "oip.c's attnd__oip_output_param_members", "outputs.parameters.",
       "InferRequestedOutput.parameters"},
  };
  char owner[96];
  for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
    snprintf(owner, sizeof owner, "server/api/%s", m[i].owner);
    dn_table_is("docs/oip.md", "## The request", m[i].object, m[i].names,
                owner);
    dn_schema_is(m[i].schema, m[i].names, owner);
  }
}
END_TEST

Suite *test_suite(void) {
  Suite *s = suite_create("oip");
  TCase *tc = tcase_create("same");
  tcase_add_loop_test(tc, test_generic_every_input, 0, 8);
  tcase_add_loop_test(tc, test_weights_reduce, 0, 2);
  tcase_add_loop_test(tc, test_generic_parameters, 0,
                      (int)(sizeof param_cases / sizeof param_cases[0]));
  tcase_add_loop_test(tc, test_layer_models, 0, 2);
  tcase_add_test(tc, test_direct_conversion);
  tcase_add_test(tc, test_small_data_lifted);
  tcase_add_test(tc, test_reply_bytes_asked);
  tcase_add_loop_test(tc, test_big_data_syntax_error, 0, N_BAD_ARRAY_TOKENS);
  tcase_add_loop_test(tc, test_binary_same, 0, 8);
  tcase_add_test(tc, test_lifted);
  suite_add_tcase(s, tc);
  tc = tcase_create("errors");
  tcase_add_loop_test(tc, test_errors, 0,
                      (int)(sizeof err_cases / sizeof err_cases[0]));
  tcase_add_test(tc, test_limits_before_core);
  suite_add_tcase(s, tc);
  tc = tcase_create("documented");
  tcase_add_test(tc, test_params_documented);
  tcase_add_test(tc, test_members_documented);
  suite_add_tcase(s, tc);
  return s;
}
