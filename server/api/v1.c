/* server/api/v1.c: attnd's own protocol: POST /v1/attention, GET /v1/info
 * and GET /v1/layers[/{name}]. See api.h. */
#include <jansson.h>
#include <string.h>

#include "api/api.h"
#include "api/decode.h"
#include "http/tls.h"

/* POST /v1/attention: the body decoded (api/decode.c) and admitted. */
enum MHD_Result attnd_v1_attention(attnd_http_req_t *r) {
  attnd_server_t *s = r->srv;
  attnd_error_t e;
  attnd_request_t *req = NULL;
  attnd_layer_set_t *layers = attnd_server_layers(s);
  attnd_api_meter_begin(r);
  int bad =
      attnd_request_decode(r->body.data ? r->body.data + r->pad : "",
                           r->body.len - r->pad, s->cfg, layers, &req, &e);
  bad = attnd_api_meter_end(r, bad, &e);
  attnd_layer_set_unref(layers); /* a request with a layer holds its own */
  attnd_buf_free(&r->body);
  return attnd_api_decoded(r, bad, req, &e);
}

static void info_key(const char *key, int64_t value, void *obj) {
  json_object_set_new(obj, key,
                      value < 0 ? json_string("auto")
                                : json_integer((json_int_t)value));
}

/* GET /v1/info: the version, the keys the config table marks for it, the
 * compute backend, and with HTTPS the certificate new handshakes get. */
enum MHD_Result attnd_v1_info(attnd_http_req_t *r) {
  attnd_server_t *s = r->srv;
  json_t *v = json_pack("{s:s}", "version", ATTN_VERSION);
  json_t *limits = json_object();
  attnd_config_info(s->cfg, 1, info_key, limits);
  json_object_set_new(v, "limits", limits);
  attnd_config_info(s->cfg, 0, info_key, v);
  attn_cuda_info_t ci;
  attn_cuda_info(&ci);
  attnd_pinned_stats_t ps;
  attnd_pinned_stats(&ps);
  json_t *avail = json_pack("[s]", "cpu");
  if (ci.usable)
    json_array_append_new(avail, json_string("cuda"));
  json_object_set_new(
      v, "backend",
      json_pack("{s:s,s:s,s:s,s:s,s:o,s:s,s:s,s:{s:b,s:b,s:s,s:s,s:I}}", "blas",
                s->backend.blas, "blas_kernel", s->backend.blas_kernel,
                "blas_config", s->backend.blas_config, "simd",
                attn_isa_name(s->backend.isa), "available", avail, "default",
                s->cfg->backend, "precision", s->cfg->precision, "cuda",
                "built", ci.built, "usable", ci.usable, "device", ci.device,
                "status", ci.status, "pinned_memory_bytes",
                (json_int_t)ps.bytes));
  attnd_tls_pair_t *pair = attnd_http_tls_current(s);
  if (pair) {
    char serial[64], expires[32];
    attnd_tls_describe(pair, serial, sizeof serial, expires, sizeof expires);
    attnd_tls_unref(pair);
    json_object_set_new(
        v, "tls",
        json_pack("{s:s,s:s}", "serial", serial, "not_after", expires));
  }
  return attnd_http_send_json(r, 200, v);
}

/* One layer as /v1/layers shows it. */
static json_t *layer_json(const attnd_layer_t *l) {
  static const char *const causal[] = {"none", "bottom_right", "top_left"};
  static const char *const styles[] = {"none", "half", "interleaved"};
  static const char *const scalings[] = {"none", "linear", "llama3"};
  json_t *pos;
  const attn_rope_t *rp = &l->rope;
  if (rp->style == ATTN_ROPE_NONE) {
    pos = json_pack("{s:s}", "type", "none");
  } else {
    pos = json_pack("{s:s,s:f,s:I,s:s}", "type", "rope", "theta", rp->theta,
                    "dims", (json_int_t)(rp->dims ? rp->dims : l->Dh), "style",
                    styles[rp->style]);
    if (rp->scaling != ATTN_ROPE_SCALING_NONE)
      json_object_set_new(
          pos, "scaling",
          rp->scaling == ATTN_ROPE_SCALING_LINEAR
              ? json_pack("{s:s,s:f}", "type", "linear", "factor", rp->factor)
              : json_pack("{s:s,s:f,s:f,s:f,s:f}", "type",
                          scalings[rp->scaling], "factor", rp->factor,
                          "low_freq_factor", rp->low_freq_factor,
                          "high_freq_factor", rp->high_freq_factor,
                          "original_max_position_embeddings",
                          rp->original_max_position));
  }
  return json_pack(
      "{s:s,s:s,s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:{s:b,s:b,s:b,s:b},s:b,"
      "s:o,s:s,s:o,s:s,s:I}",
      "name", l->name, "file", l->file, "convention",
      attnd_convention_name(l->convention), "embed_dim", (json_int_t)l->E,
      "kdim", (json_int_t)l->Ek, "vdim", (json_int_t)l->Ev, "num_heads",
      (json_int_t)l->H, "num_kv_heads", (json_int_t)l->Hkv, "head_dim",
      (json_int_t)l->Dh, "v_head_dim", (json_int_t)l->Dv, "output_dim",
      (json_int_t)l->Eo, "biases", "q", l->q_bias != NULL, "k",
      l->k_bias != NULL, "v", l->v_bias != NULL, "o", l->o_bias != NULL,
      "qk_norm", l->q_norm != NULL, "positions", pos, "causal",
      causal[l->causal], "window",
      l->window > 0 ? json_pack("{s:I}", "left", (json_int_t)(l->window - 1))
                    : json_null(),
      "dtype", l->file_dtype, "bytes", (json_int_t)l->bytes);
}

/* GET /v1/layers: every layer held. */
enum MHD_Result attnd_v1_layers(attnd_http_req_t *r) {
  attnd_layer_set_t *set = attnd_server_layers(r->srv);
  json_t *list = json_array();
  for (size_t i = 0; i < attnd_layer_set_count(set); i++)
    json_array_append_new(list, layer_json(attnd_layer_set_get(set, i)));
  enum MHD_Result ret = attnd_http_send_json(
      r, 200,
      json_pack("{s:o,s:I,s:I,s:f}", "layers", list, "bytes",
                (json_int_t)attnd_layer_set_bytes(set), "device_bytes",
                (json_int_t)attnd_layer_set_device_bytes(set), "load_seconds",
                attnd_layer_set_load_seconds(set)));
  attnd_layer_set_unref(set);
  return ret;
}

/* GET /v1/layers/{name}: one. */
enum MHD_Result attnd_v1_layer(attnd_http_req_t *r) {
  attnd_layer_set_t *set = attnd_server_layers(r->srv);
  const attnd_layer_t *l = attnd_layer_set_find(set, r->name);
  enum MHD_Result ret =
      l ? attnd_http_send_json(r, 200, layer_json(l))
        : attnd_http_fail(r, ATTND_ERR_UNKNOWN_LAYER, "layer",
                          "layer '%.200s' is not loaded (GET /v1/layers lists "
                          "them)",
                          r->name);
  attnd_layer_set_unref(set);
  return ret;
}
