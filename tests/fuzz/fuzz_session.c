/* tests/fuzz/fuzz_session.c: the bodies of the sessions' endpoints.
 *
 * The input's first byte chooses what the rest is:
 *   0, 1: a step's body, for a session of the layer "L" (0) or a
 *     pre-projected one with GQA and rope (1), decoded by both paths and
 *     compared (step_decode_diff, tests/decode_diff.h);
 *   2: a create body (POST /v1/sessions, or PUT with an id taken from the
 *     body's first 32 bytes when they are hex): it fails with a message, or
 *     makes a session whose info is a JSON object naming it, which is then
 *     deleted;
 *   3, 4: a truncate or fork body, on a session of 3 tokens made for the
 *     input: a truncate that succeeds leaves the length asked for; a fork
 *     that succeeds makes a session of the same length;
 *   5: a list's limit and after arguments (the body split at its first
 *     NUL): a page of JSON, or an error.
 * Every error names a code the table has and a message; the store's pool
 * is back to empty after each input (nothing leaks). ASan and UBSan watch
 * the parsers, the store and the decoders. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "api/session_api.h"
#include "config.h"
#include "decode_diff.h"
#include "fuzz.h"
#include "model/layers.h"
#include "sched/request.h"
#include "sched/run.h"
#include "store/session.h"

static attnd_config_t cfg;
static attnd_layer_set_t *layers;
static attnd_sessions_t *store;
static attnd_session_shape_t shapes[2];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  fuzz_small_config(&cfg, NULL, NULL);
  layers = fuzz_layer(0);
  const attnd_layer_t *l = attnd_layer_set_find(layers, "L");
  FUZZ_CHECK(l != NULL, "no layer L");
  shapes[0] = (attnd_session_shape_t){.layers = layers,
                                      .layer = l,
                                      .H = l->H,
                                      .Hkv = l->Hkv,
                                      .Dh = l->Dh,
                                      .Dv = l->Dv,
                                      .rope = l->rope};
  shapes[1] = (attnd_session_shape_t){
      .H = 4,
      .Hkv = 2,
      .Dh = 4,
      .Dv = 2,
      .rope = {.style = ATTN_ROPE_INTERLEAVED, .theta = 500, .dims = 4}};
  store = attnd_sessions_new(1 << 20, NULL, NULL);
  FUZZ_CHECK(store != NULL, "no store");
  return 0;
}

/* An error as the API gives it: a code in the table and a message. */
static void check_error(const attnd_error_t *e, const char *what) {
  FUZZ_CHECK(e->code >= 0 && e->code < ATTND_ERR_COUNT && e->message[0],
             "%s: error %d without a message", what, (int)e->code);
}

/* The id member of a reply's session info, checked: into id[33]. */
static void info_id(const attnd_buf_t *b, char *id, const char *what) {
  json_t *v = json_loadb(b->data, b->len, 0, NULL);
  const char *s = json_string_value(json_object_get(v, "session"));
  FUZZ_CHECK(s && attnd_session_id_ok(s), "%s: a reply without an id: %.*s",
             what, (int)(b->len < 300 ? b->len : 300), b->data);
  snprintf(id, 33, "%s", s);
  json_decref(v);
}

static int64_t length_of(const char *id) {
  attnd_session_info_t in;
  attnd_error_t e;
  FUZZ_CHECK(attnd_session_get(store, id, &in, &e) == 0, "%s: %s", id,
             e.message);
  return in.length;
}

/* A session of 3 tokens, pre-projected (H 1, Dh 2): its id in id. */
static void three_tokens(char *id) {
  attnd_session_shape_t sh = {.H = 1, .Hkv = 1, .Dh = 2, .Dv = 2};
  attnd_session_info_t in;
  attnd_error_t e;
  FUZZ_CHECK(attnd_session_create(store, &sh, 64, 60, NULL, &in, &e) == 0,
             "create: %s", e.message);
  snprintf(id, 33, "%s", in.id);
  static const char body[] =
      "{\"query\":[[1,0],[0,1],[1,1]],\"key\":[[1,0],[0,1],[1,1]],"
      "\"value\":[[1,2],[3,4],[5,6]]}";
  attnd_request_t *req = NULL;
  FUZZ_CHECK(attnd_step_decode(body, sizeof body - 1, &cfg, &sh, &req, &e) ==
                     0 &&
                 attnd_session_enqueue(store, id, req, NULL, NULL, &e) == 1 &&
                 attnd_session_prepare(store, req, &e) == 0 &&
                 attnd_request_plan(req, &cfg, &e) == 0,
             "the three tokens: %s", e.message);
  attnd_scratch_t s = {0};
  FUZZ_CHECK(attnd_request_run(req, 0, 0, &s) == 0, "the three tokens' step");
  attnd_session_step_end(store, req, 1, &e);
  attnd_request_free(req);
  attnd_scratch_free(&s);
  FUZZ_CHECK(length_of(id) == 3, "three tokens are %lld",
             (long long)length_of(id));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  int kind = data[0] % 6;
  const char *body = (const char *)data + 1;
  size_t len = size - 1;
  char why[2048], id[33], other[33];
  attnd_error_t e = {0};
  attnd_buf_t b;
  attnd_buf_init(&b);
  switch (kind) {
  case 0:
  case 1:
    FUZZ_CHECK(
        step_decode_diff(body, len, &cfg, &shapes[kind], why, sizeof why) == 0,
        "the two decoding paths of a step differ: %s", why);
    break;
  case 2: {
    char want[33];
    int put = len >= 32;
    for (size_t i = 0; put && i < 32; i++)
      put = (body[i] >= '0' && body[i] <= '9') ||
            (body[i] >= 'a' && body[i] <= 'f');
    if (put) {
      memcpy(want, body, 32);
      want[32] = 0;
    }
    if (attnd_session_api_create(store, put ? want : NULL, body + 32 * put,
                                 len - 32 * put, &cfg, layers, &b, &e) < 0) {
      check_error(&e, "create");
      break;
    }
    info_id(&b, id, "create");
    FUZZ_CHECK(!put || strcmp(id, want) == 0, "PUT %s made %s", want, id);
    FUZZ_CHECK(attnd_session_delete(store, id, &e) == 0, "delete: %s",
               e.message);
    break;
  }
  case 3:
  case 4:
    three_tokens(id);
    if (kind == 3) {
      json_t *v = json_loadb(body, len, 0, NULL);
      int r = attnd_session_api_truncate(store, id, body, len, &b, &e);
      if (r < 0) {
        check_error(&e, "truncate");
      } else {
        json_t *n = json_object_get(v, "length");
        FUZZ_CHECK(json_is_integer(n) && length_of(id) == json_integer_value(n),
                   "truncate to %s left %lld", body, (long long)length_of(id));
      }
      json_decref(v);
    } else if (attnd_session_api_fork(store, id, body, len, &b, &e) < 0) {
      check_error(&e, "fork");
    } else {
      info_id(&b, other, "fork");
      FUZZ_CHECK(strncmp(other, id, 16) == 0 && length_of(other) == 3,
                 "fork of %s: %s", id, other);
      attnd_session_delete(store, other, &e);
    }
    attnd_session_delete(store, id, &e);
    break;
  default: {
    char text[256];
    size_t k = len < sizeof text - 1 ? len : sizeof text - 1;
    memcpy(text, body, k);
    text[k] = 0;
    const char *after = text + strlen(text) + (strlen(text) < k);
    if (attnd_session_api_list(store, text, after < text + k ? after : NULL, &b,
                               &e) < 0) {
      check_error(&e, "list");
    } else {
      json_t *v = json_loadb(b.data, b.len, 0, NULL);
      FUZZ_CHECK(json_is_object(v), "a list that is not JSON: %.*s",
                 (int)(b.len < 300 ? b.len : 300), b.data);
      json_decref(v);
    }
  }
  }
  attnd_buf_free(&b);
  attnd_sessions_stats_t st;
  attnd_sessions_stats(store, &st);
  FUZZ_CHECK(st.sessions == 0 && st.kv_bytes_used == 0,
             "after the input: %lld sessions, %lld bytes of the pool in use",
             (long long)st.sessions, (long long)st.kv_bytes_used);
  return 0;
}
