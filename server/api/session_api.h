/* server/api/session_api.h: the bodies and replies of the sessions' endpoints,
 * apart from HTTP (http.c routes them) and from steps (requests decoded by
 * attnd_step_decode):
 *   POST /v1/sessions               create: {"layer"} or {"num_heads",
 *                                   "num_kv_heads"?, "head_dim",
 *                                   "v_head_dim"?, "rope"?}, plus
 *                                   "max_tokens"? and "ttl_s"?
 *   PUT /v1/sessions/{id}           create, with the client's id
 *   POST /v1/sessions/{id}/fork     no body, or {}
 *   POST /v1/sessions/{id}/truncate {"length": n}
 *   GET /v1/sessions?limit=&after=  a page of sessions in id order
 * Each writes its reply's JSON (a session's info, session.h) into `reply`
 * and returns 0, or returns -1 with err. HTTP thread. */
#ifndef ATTND_SESSION_API_H
#define ATTND_SESSION_API_H

#include "codec/buf.h"
#include "config.h"
#include "errors.h"
#include "model/layers.h"
#include "store/session.h"

/* The members a create's body may have, of its rope, and of a truncate's
 * body (NULL-terminated): what their decoders take. check_sessions holds
 * docs/sessions.md's table of endpoints and docs/openapi.json's schemas of
 * the requests to them. */
extern const char *const attnd__session_create_members[];
extern const char *const attnd__session_rope_members[];
extern const char *const attnd__session_truncate_members[];

/* `id`: the client's (PUT), or NULL for a fresh one (POST). */
int attnd_session_api_create(attnd_sessions_t *st, const char *id,
                             const char *body, size_t len,
                             const attnd_config_t *cfg,
                             attnd_layer_set_t *layers, attnd_buf_t *reply,
                             attnd_error_t *err);

int attnd_session_api_truncate(attnd_sessions_t *st, const char *id,
                               const char *body, size_t len, attnd_buf_t *reply,
                               attnd_error_t *err);

/* POST /v1/sessions/{id}/fork: the body is empty, or {}. */
int attnd_session_api_fork(attnd_sessions_t *st, const char *id,
                           const char *body, size_t len, attnd_buf_t *reply,
                           attnd_error_t *err);

/* limit and after are the query's arguments (NULL when absent). */
int attnd_session_api_list(attnd_sessions_t *st, const char *limit,
                           const char *after, attnd_buf_t *reply,
                           attnd_error_t *err);

#endif
