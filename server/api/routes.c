/* server/api/routes.c: the one table of attnd's routes (http/router.h says
 * what a row is and how a path finds it). To add an endpoint, add its rows
 * here, its handler in the protocol's file (api.h), and its operation to
 * docs/openapi.json: tests/check_routes.c holds the two to each other. */
#include "api/api.h"

#define BODY ATTND_ROUTE_BODY
#define COMPUTES (ATTND_ROUTE_BODY | ATTND_ROUTE_COMPUTES)
#define CONTROL (ATTND_ROUTE_BODY | ATTND_ROUTE_CONTROL)
#define PUBLIC ATTND_ROUTE_PUBLIC
#define CORS ATTND_ROUTE_CORS
#define ASSET ATTND_ROUTE_ASSET
#define PAGE ATTND_ROUTE_PAGE
#define V1 ATTND_PROTO_V1
#define V2 ATTND_PROTO_V2
#define SESSION ATTND_PROTO_SESSION
#define OTHER ATTND_PROTO_OTHER
#define GET "GET, HEAD"

/* Rows of one pattern are adjacent, in the order their Allow lists them;
 * a pattern comes before any other that would also take its paths. */
static const attnd_route_t routes[] = {
    /* methods, pattern, handler, protocol, flags, precheck */
    {"POST", "/v1/attention", attnd_v1_attention, V1, COMPUTES | CORS, 0},
    {GET, "/v1/info", attnd_v1_info, V1, CORS, 0},
    {GET, "/v1/layers", attnd_v1_layers, V1, CORS, 0},
    {GET, "/v1/layers/{name+}", attnd_v1_layer, V1, CORS, 0},

    {GET, "/v1/sessions", attnd_sessions_list, SESSION, CORS, 0},
    {"POST", "/v1/sessions", attnd_sessions_create, SESSION, CONTROL | CORS, 0},
    {GET, "/v1/sessions/{session}", attnd_sessions_get, SESSION, CORS, 0},
    {"PUT", "/v1/sessions/{session}", attnd_sessions_put, SESSION,
     CONTROL | CORS, 0},
    {"DELETE", "/v1/sessions/{session}", attnd_sessions_delete, SESSION, CORS,
     0},
    {"POST", "/v1/sessions/{session}/attention", attnd_sessions_step, SESSION,
     COMPUTES | CORS, 0},
    {"POST", "/v1/sessions/{session}/fork", attnd_sessions_fork, SESSION,
     CONTROL | CORS, 0},
    {"POST", "/v1/sessions/{session}/truncate", attnd_sessions_truncate,
     SESSION, CONTROL | CORS, 0},

    {GET, "/healthz", attnd_ops_healthz, OTHER, CORS, 0},
    {GET, "/readyz", attnd_ops_readyz, OTHER, CORS, 0},
    {GET, "/metrics", attnd_ops_metrics, OTHER, CORS, 0},

    {GET, "/v2", attnd_v2_server, V2, CORS, 0},
    {GET, "/v2/health/live", attnd_v2_live, V2, CORS, 0},
    {GET, "/v2/health/ready", attnd_v2_ready, V2, CORS, 0},
    {"POST", "/v2/models/{model+}/versions/{version}/infer", attnd_v2_infer, V2,
     COMPUTES | CORS, attnd_v2_infer_ok},
    {GET, "/v2/models/{model+}/versions/{version}/ready", attnd_v2_model_ready,
     V2, CORS, attnd_v2_model_ok},
    {"POST", "/v2/models/{model+}/infer", attnd_v2_infer, V2, COMPUTES | CORS,
     attnd_v2_infer_ok},
    {GET, "/v2/models/{model+}/ready", attnd_v2_model_ready, V2, CORS,
     attnd_v2_model_ok},
    {GET, "/v2/models/{model+}/versions/{version}", attnd_v2_model, V2, CORS,
     attnd_v2_model_ok},
    {GET, "/v2/models/{model+}", attnd_v2_model, V2, CORS, attnd_v2_model_ok},

    /* The binary's files hold no data: no key. */
    {GET, "/openapi.json", attnd_ops_asset, OTHER, PUBLIC | ASSET | CORS, 0},
    {GET, "/", attnd_ops_asset, OTHER, PUBLIC | ASSET | PAGE, 0},
    {GET, "/ui/{file}", attnd_ops_asset, OTHER, PUBLIC | ASSET | PAGE, 0},
};

const attnd_route_t *attnd_routes(size_t *n) {
  *n = sizeof routes / sizeof routes[0];
  return routes;
}
