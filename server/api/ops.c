/* server/api/ops.c: the operational endpoints: /healthz, /readyz and
 * /metrics, and the files of the binary (the page, /openapi.json). See
 * api.h. */
#include <malloc.h>
#include <stdatomic.h>

#include "api/api.h"
#include "http/listen.h"
#include "http/tls.h"
#include "sched/run.h"

json_t *attnd_api_device_lost(const attnd_server_t *s, const char *key,
                              json_t *value) {
  attn_cuda_info_t ci;
  if (s->device_at_start) {
    attn_cuda_info(&ci);
    if (!ci.usable)
      return json_pack("{s:o,s:s}", key, value, "device", ci.status);
  }
  json_decref(value);
  return NULL;
}

/* GET /healthz: the process answers, and the GPU it started with has not
 * failed (only a new process has it again). */
enum MHD_Result attnd_ops_healthz(attnd_http_req_t *r) {
  json_t *lost =
      attnd_api_device_lost(r->srv, "status", json_string("device failed"));
  return lost ? attnd_http_send_json(r, 503, lost)
              : attnd_http_send_text(r, 200, "{\"status\":\"ok\"}\n");
}

/* GET /readyz: 503 once draining, so that a balancer stops sending, or
 * once the GPU has failed. */
enum MHD_Result attnd_ops_readyz(attnd_http_req_t *r) {
  json_t *lost =
      attnd_api_device_lost(r->srv, "status", json_string("device failed"));
  if (lost)
    return attnd_http_send_json(r, 503, lost);
  return atomic_load(&r->srv->draining)
             ? attnd_http_send_text(r, 503, "{\"status\":\"draining\"}\n")
             : attnd_http_send_text(r, 200, "{\"status\":\"ready\"}\n");
}

/* GET /metrics: Prometheus' text format, with the gauges sampled now. */
enum MHD_Result attnd_ops_metrics(attnd_http_req_t *r) {
  attnd_server_t *s = r->srv;
  attnd_gauges_t g = {
      .queue_depth = attnd_sched_waiting(s->sched),
      .busy_workers = attnd_sched_busy(s->sched),
      .busy_threads = attnd_sched_threads_busy(s->sched),
      .workers = (int)s->cfg->workers,
      /* less this scrape, which has its headers and no reply yet */
      .inflight = atomic_load(&s->inflight) - 1,
      .draining = atomic_load(&s->draining),
  };
  int http_open[ATTND_HTTP_THREADS_MAX];
  g.http_threads = s->ndaemons;
  g.http_open = http_open;
  attnd_listener_open(s->listener, http_open);
  attnd_sessions_stats_t st;
  attnd_sessions_stats(s->sessions, &st);
  g.sessions = st.sessions;
  g.kv_bytes_used = st.kv_bytes_used;
  g.kv_bytes_free = st.kv_bytes_free;
  g.kv_pages_shared = st.pages_shared;
  g.kv_device_bytes_used = st.kv_device_bytes_used;
  g.kv_device_bytes_held = st.kv_device_bytes_held;
  g.evicted_lru = st.evicted_lru;
  g.expired = st.expired;
  g.deleted = st.deleted;
  attnd_sched_batches(s->sched, &g.batches, &g.batched_steps);
  g.scratch_bytes = attnd_scratch_held();
  struct mallinfo2 mi = mallinfo2();
  g.heap_in_use = mi.uordblks;
  g.heap_free = mi.fordblks;
  g.memory_limit = s->budget.max;
  g.memory_held = attnd_budget_used(&s->budget);
  attn_cuda_info_t ci;
  attn_cuda_info(&ci);
  attn_cuda_memory_t dm;
  attn_cuda_memory(&dm); /* zeroes where it is not usable */
  g.device_usable = ci.usable;
  g.device_limit = s->device_budget.max;
  g.device_held = attnd_budget_used(&s->device_budget);
  attnd_layer_set_t *set = attnd_server_layers(s);
  g.layers_device_bytes = attnd_layer_set_device_bytes(set);
  attnd_layer_set_unref(set);
  size_t sets, set_bytes;
  attnd_layer_sets_alive(&sets, &set_bytes);
  g.layer_sets = sets;
  g.layer_sets_bytes = set_bytes;
  g.device_pool_reserved = dm.pool_reserved;
  g.device_pool_used = dm.pool_used;
  g.device_free = dm.free;
  g.device_total = dm.total;
  attnd_pinned_stats_t ps;
  attnd_pinned_stats(&ps);
  g.pinned_bytes = ps.bytes;
  g.pinned_used = ps.used;
  g.pinned_served = ps.served;
  g.pinned_missed = ps.missed;
  attnd_tls_pair_t *pair = attnd_http_tls_current(s);
  g.tls = pair != NULL;
  g.tls_not_after = pair ? attnd_tls_not_after(pair) : -1;
  attnd_tls_unref(pair);
  g.reloads[ATTND_RELOAD_API_KEYS] = s->cfg->api_keys_file[0] != 0;
  g.reloads[ATTND_RELOAD_TLS] = g.tls;
  g.reloads[ATTND_RELOAD_LAYERS] = s->cfg->layers[0] != 0;
  attnd_process_read(&g.process);
  attnd_buf_t b;
  attnd_buf_init(&b);
  attnd_metrics_render(s->metrics, &g, &b);
  if (b.oom) {
    attnd_buf_free(&b);
    return MHD_NO;
  }
  return attnd_http_send_body(r, 200, b.data, b.len, 0,
                              "text/plain; version=0.0.4; charset=utf-8");
}

/* An embedded file (the router found it: r->asset), copied so that the
 * reply may be compressed. */
enum MHD_Result attnd_ops_asset(attnd_http_req_t *r) {
  attnd_buf_t b;
  attnd_buf_init(&b);
  attnd_buf_append(&b, (const char *)r->asset->data, r->asset->len);
  return attnd_http_send_buf(r, 200, &b, r->asset->content_type);
}
