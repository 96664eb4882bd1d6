/* server/api/v2.c: the Open Inference Protocol (KServe v2): the server's
 * metadata and health, a model's metadata and readiness, and inference
 * (decoded by api/oip.c, answered by api/oip_reply.c). Its errors are
 * {"error": "<message>"} (http/reply.c, by the route's protocol). See
 * api.h. */
#include <stdatomic.h>
#include <string.h>

#include "api/api.h"
#include "api/oip.h"

/* GET /v2: the server's metadata. */
enum MHD_Result attnd_v2_server(attnd_http_req_t *r) {
  attnd_buf_t b;
  attnd_buf_init(&b);
  attnd_oip_server_metadata(&b);
  return attnd_http_send_buf(r, 200, &b, "application/json");
}

/* GET /v2/health/live: 503 once the GPU that attnd started with has
 * failed (only a new process has it again). */
enum MHD_Result attnd_v2_live(attnd_http_req_t *r) {
  json_t *lost = attnd_api_device_lost(r->srv, "live", json_false());
  return lost ? attnd_http_send_json(r, 503, lost)
              : attnd_http_send_text(r, 200, "{\"live\":true}\n");
}

/* GET /v2/health/ready: 503 once draining, or once the GPU has failed. */
enum MHD_Result attnd_v2_ready(attnd_http_req_t *r) {
  json_t *lost = attnd_api_device_lost(r->srv, "ready", json_false());
  if (lost)
    return attnd_http_send_json(r, 503, lost);
  return atomic_load(&r->srv->draining)
             ? attnd_http_send_text(r, 503, "{\"ready\":false}\n")
             : attnd_http_send_text(r, 200, "{\"ready\":true}\n");
}

/* Whether the URL's model is known; else 0 with e set (unknown_layer). */
static int model_known(attnd_http_req_t *r, attnd_error_t *e) {
  const attnd_layer_t *l;
  attnd_layer_set_t *set = attnd_server_layers(r->srv);
  int ok = attnd_oip_model(r->model, set, &l, e) == 0;
  attnd_layer_set_unref(set);
  return ok;
}

/* A version other than 1 is a 404: an unknown model's, as unknown. */
int attnd_v2_model_ok(attnd_http_req_t *r, enum MHD_Result *ret) {
  attnd_error_t e;
  if (r->version[0] && strcmp(r->version, "1") != 0) {
    *ret = !model_known(r, &e)
               ? attnd_http_send_error(r, &e)
               : attnd_http_fail(
                     r, ATTND_ERR_UNKNOWN_LAYER, "model",
                     "model '%.128s' has no version '%s': its one version is 1",
                     r->model, r->version);
    return 0;
  }
  return 1;
}

int attnd_v2_infer_ok(attnd_http_req_t *r, enum MHD_Result *ret) {
  attnd_error_t e;
  if (!attnd_v2_model_ok(r, ret))
    return 0;
  int ok = model_known(r, &e);
  if (!ok)
    *ret = attnd_http_send_error(r, &e);
  return ok;
}

/* GET /v2/models/{model}[/versions/{version}]: the model's metadata. */
enum MHD_Result attnd_v2_model(attnd_http_req_t *r) {
  attnd_layer_set_t *set = attnd_server_layers(r->srv);
  attnd_error_t e;
  attnd_buf_t b;
  attnd_buf_init(&b);
  int bad = attnd_oip_metadata(r->model, set, &b, &e);
  attnd_layer_set_unref(set);
  if (bad < 0) {
    attnd_buf_free(&b);
    return attnd_http_send_error(r, &e);
  }
  return attnd_http_send_buf(r, 200, &b, "application/json");
}

/* GET /v2/models/{model}[/versions/{version}]/ready: 503 once draining. */
enum MHD_Result attnd_v2_model_ready(attnd_http_req_t *r) {
  attnd_layer_set_t *set = attnd_server_layers(r->srv);
  attnd_error_t e;
  const attnd_layer_t *l;
  int draining = atomic_load(&r->srv->draining);
  int bad = attnd_oip_model(r->model, set, &l, &e);
  attnd_layer_set_unref(set);
  if (bad < 0)
    return attnd_http_send_error(r, &e);
  attnd_buf_t b;
  attnd_buf_init(&b);
  attnd_buf_puts(&b, "{\"name\":");
  attnd_buf_json_string(&b, r->model, strlen(r->model));
  attnd_buf_puts(&b, draining ? ",\"ready\":false}\n" : ",\"ready\":true}\n");
  return attnd_http_send_buf(r, draining ? 503 : 200, &b, "application/json");
}

/* POST /v2/models/{model}[/versions/{version}]/infer: the body (JSON, or
 * JSON and binary tensor data) decoded by api/oip.c, which may keep the
 * body where its tensors lie, and admitted. */
enum MHD_Result attnd_v2_infer(attnd_http_req_t *r) {
  attnd_server_t *s = r->srv;
  attnd_error_t e;
  attnd_request_t *req = NULL;
  attnd_layer_set_t *layers = attnd_server_layers(s);
  /* the request may take a body on the heap or in pinned memory, not one
   * in the exchange's own buffer */
  void *own =
      !r->body.lent || r->body.data == r->body_pinned ? r->body.data : NULL;
  attnd_api_meter_begin(r);
  int bad = attnd_oip_decode(
      r->model, r->body.data ? r->body.data + r->pad : "", r->body.len - r->pad,
      r->json_len, &own, r->body.cap, s->cfg, layers, &req, &e);
  bad = attnd_api_meter_end(r, bad, &e);
  attnd_layer_set_unref(layers); /* a request with a layer holds its own */
  if (own == NULL) {             /* the request took the body */
    if (r->body.data == r->body_pinned)
      r->body_pinned = NULL;
    attnd_buf_init(&r->body);
  }
  attnd_buf_free(&r->body);
  return attnd_api_decoded(r, bad, req, &e);
}
