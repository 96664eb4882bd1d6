/* server/api/session_api.c: the JSON of the sessions' endpoints (all but the
 * steps, which are requests like any other). See session_api.h. */
#include "api/session_api.h"

#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/decode.h"
#include "codec/bulk.h"
#include "sched/request.h"

/* jansson's tree of a small control body ("" is {}): a new reference, or
 * NULL with invalid_json or invalid_type set. */
static json_t *parse_object(const char *body, size_t len, attnd_error_t *err) {
  if (len == 0)
    return json_object();
  json_error_t je;
  int oom = 0;
  /* as /v1 reads its JSON: any text at the root (RFC 8259 2), so that a
   * scalar is the wrong type, not invalid JSON; a number past int64 or a
   * double a number, which its member's range then refuses */
  json_t *v = attnd__dec_parse(body, len, &je, &oom);
  if (v == NULL) {
    if (oom)
      attnd_error_set(err, ATTND_ERR_OUT_OF_MEMORY, "",
                      "out of memory parsing the request's JSON");
    else
      attnd_error_set(err, ATTND_ERR_INVALID_JSON, "",
                      "invalid JSON at line %d, column %d: %s", je.line,
                      je.column, je.text);
    return NULL;
  }
  if (!json_is_object(v)) {
    attnd_error_set(err, ATTND_ERR_INVALID_TYPE, "",
                    "the body is %s, not an object", attnd__json_type(v));
    json_decref(v);
    return NULL;
  }
  return v;
}

/* Members of obj (at path `where`, "" for the root) other than `known`
 * (NULL-terminated): unknown_field, named by its path, the known ones
 * listed, as /v1 says it. */
static int only_at(const json_t *obj, const char *where,
                   const char *const *known, attnd_error_t *err) {
  dec_t d = {.err = err}; /* its message needs no request */
  return attnd__dec_members(&d, obj, where, known);
}

static int only(const json_t *obj, const char *const *known,
                attnd_error_t *err) {
  return only_at(obj, "", known, err);
}

/* Integer member `key` of obj, whose path is `field`, in [lo, hi], read
 * as /v1 reads one (attnd__dec_int: 2.0 is 2); *out untouched when absent
 * or null. Returns 1 when given, 0 when not, -1 with err. */
static int get_int_at(const json_t *obj, const char *key, const char *field,
                      int64_t lo, int64_t hi, int64_t *out,
                      attnd_error_t *err) {
  const json_t *v = json_object_get(obj, key);
  if (v == NULL || json_is_null(v))
    return 0;
  dec_t d = {.err = err}; /* its integers need no request */
  return attnd__dec_int(&d, v, field, field, lo, hi, out) < 0 ? -1 : 1;
}

static int get_int(const json_t *obj, const char *key, int64_t lo, int64_t hi,
                   int64_t *out, attnd_error_t *err) {
  return get_int_at(obj, key, key, lo, hi, out, err);
}

/* "backend" (attnd_backend_names; cpu where absent: the config's auto does
 * not pick cuda for sessions yet). cuda is refused where it cannot run
 * (as a /v1 request asking for it: attnd_cuda_refusal_code), and for heads
 * wider than it takes. */
static int get_backend(const json_t *obj, const attnd_session_shape_t *shape,
                       attn_backend_kind_t *out, attnd_error_t *err) {
  int b = ATTND_BACKEND_CPU;
  if (attnd__dec_enum(err, obj, "backend", "backend", attnd_backend_names, &b) <
      0)
    return -1;
  *out = b == ATTND_BACKEND_CUDA ? ATTN_BACKEND_CUDA : ATTN_BACKEND_CPU;
  if (*out != ATTN_BACKEND_CUDA)
    return 0;
  attn_cuda_info_t ci;
  attn_cuda_info(&ci);
  if (!ci.usable)
    return attnd_error_set(err, attnd_cuda_refusal_code(), "backend",
                           "backend cuda: %s", ci.status);
  if (shape->Dh > ATTN_CUDA_MAX_HEAD_DIM || shape->Dv > ATTN_CUDA_MAX_HEAD_DIM)
    return attnd_error_set(err, ATTND_ERR_INVALID_VALUE, "backend",
                           "backend cuda takes heads of at most %d features; "
                           "this session's are Dh=%lld, Dv=%lld: use backend "
                           "cpu",
                           ATTN_CUDA_MAX_HEAD_DIM, (long long)shape->Dh,
                           (long long)shape->Dv);
  return 0;
}

/* "rope": {"theta"?, "dims"?, "style"?: "half" | "interleaved"}. */
const char *const attnd__session_rope_members[] = {"theta", "dims", "style",
                                                   NULL};

static int get_rope(const json_t *obj, int64_t Dh, attn_rope_t *rp,
                    attnd_error_t *err) {
  const char *const *known = attnd__session_rope_members;
  const json_t *r = json_object_get(obj, "rope");
  if (r == NULL || json_is_null(r))
    return 0;
  if (!json_is_object(r))
    return attnd_error_set(err, ATTND_ERR_INVALID_TYPE, "rope",
                           "rope must be an object: {\"theta\", \"dims\", "
                           "\"style\"}");
  if (only_at(r, "rope", known, err) < 0)
    return -1;
  static const char *const styles[] = {"half", "interleaved", NULL};
  int style = 0;
  if (attnd__dec_enum(err, r, "style", "rope.style", styles, &style) < 0)
    return -1;
  rp->style = style ? ATTN_ROPE_INTERLEAVED : ATTN_ROPE_HALF;
  rp->theta = 10000;
  const json_t *t = json_object_get(r, "theta");
  if (t && !json_is_null(t)) {
    char num[32];
    if (!json_is_number(t))
      return attnd_error_set(err, ATTND_ERR_INVALID_TYPE, "rope.theta",
                             "rope.theta is %s; expected a number",
                             attnd__json_type(t));
    if (fabs(json_number_value(t)) >= ATTND_JSON_HUGE) /* as /v1's */
      return attnd_error_set(err, ATTND_ERR_NON_FINITE, "rope.theta",
                             "rope.theta is %s, not a finite number",
                             attnd__dec_num(json_number_value(t), num));
    if (json_number_value(t) <= 0)
      return attnd_error_set(err, ATTND_ERR_INVALID_VALUE, "rope.theta",
                             "rope.theta is %s; it must be above 0",
                             attnd__dec_num(json_number_value(t), num));
    rp->theta = json_number_value(t);
  }
  if (get_int_at(r, "dims", "rope.dims", 2, Dh, &rp->dims, err) < 0)
    return -1;
  if (rp->dims % 2)
    return attnd_error_set(err, ATTND_ERR_INVALID_VALUE, "rope.dims",
                           "rope.dims is %lld; it must be even",
                           (long long)rp->dims);
  /* absent, it is head_dim (0 in attn_rope_t), which the core refuses at
   * every step when odd */
  if (rp->dims == 0 && Dh % 2)
    return attnd_error_set(err, ATTND_ERR_INVALID_VALUE, "rope.dims",
                           "rope.dims is %lld (head_dim, its default); it "
                           "must be even: give an even rope.dims below "
                           "head_dim",
                           (long long)Dh);
  return 0;
}

const char *const attnd__session_create_members[] = {
    "layer", "num_heads",  "num_kv_heads", "head_dim", "v_head_dim",
    "rope",  "max_tokens", "ttl_s",        "backend",  NULL};

int attnd_session_api_create(attnd_sessions_t *st, const char *id,
                             const char *body, size_t len,
                             const attnd_config_t *cfg,
                             attnd_layer_set_t *layers, attnd_buf_t *reply,
                             attnd_error_t *err) {
  const char *const *known = attnd__session_create_members;
  if (id && !attnd_session_id_ok(id))
    return attnd_error_set(err, ATTND_ERR_INVALID_VALUE, "session",
                           "session id '%.40s%s' is not 32 hex digits 0-9a-f",
                           id, strlen(id) > 40 ? "..." : "");
  json_t *v = parse_object(body, len, err);
  if (v == NULL)
    return -1;
  attnd_session_shape_t shape = {0};
  /* a session holds no more than a request may attend over */
  int64_t most = cfg->session_max_tokens < cfg->max_seq_len
                     ? cfg->session_max_tokens
                     : cfg->max_seq_len;
  int64_t max_tokens = most, ttl_s = cfg->session_ttl_s;
  int r = only(v, known, err);
  const json_t *layer = json_object_get(v, "layer");
  if (r == 0 && layer && !json_is_null(layer)) {
    const char *name = json_is_string(layer) ? json_string_value(layer) : NULL;
    const attnd_layer_t *l = name ? attnd_layer_set_find(layers, name) : NULL;
    static const char *const theirs[] = {
        "num_heads", "num_kv_heads", "head_dim", "v_head_dim", "rope", NULL};
    for (int i = 0; l && theirs[i] && r == 0; i++) {
      const json_t *x = json_object_get(v, theirs[i]);
      if (x && !json_is_null(x)) /* null is absent */
        r = attnd_error_set(err, ATTND_ERR_INVALID_VALUE, theirs[i],
                            "%s cannot be given with layer: layer '%s' has "
                            "its own",
                            theirs[i], l->name);
    }
    if (r == 0 && l == NULL)
      r = name ? attnd_error_set(err, ATTND_ERR_UNKNOWN_LAYER, "layer",
                                 "layer '%.128s' is not loaded (GET "
                                 "/v1/layers lists them)",
                                 name)
               : attnd_error_set(err, ATTND_ERR_INVALID_TYPE, "layer",
                                 "layer must be the name of a layer");
    if (r == 0) {
      shape.layers = attnd_layer_set_ref(layers);
      shape.layer = l;
      shape.H = l->H;
      shape.Hkv = l->Hkv;
      shape.Dh = l->Dh;
      shape.Dv = l->Dv;
      shape.rope = l->rope;
    }
  } else if (r == 0) { /* pre-projected */
    int h = get_int(v, "num_heads", 1, cfg->max_heads, &shape.H, err);
    int d = h < 0 ? -1 : get_int(v, "head_dim", 1, 4096, &shape.Dh, err);
    if (h == 0 || d == 0)
      r = attnd_error_set(
          err, ATTND_ERR_MISSING_FIELD, h == 0 ? "num_heads" : "head_dim",
          "%s is required (or a layer)", h == 0 ? "num_heads" : "head_dim");
    else if (h < 0 || d < 0)
      r = -1;
    shape.Hkv = shape.H;
    shape.Dv = shape.Dh;
    if (r == 0 &&
        (get_int(v, "num_kv_heads", 1, shape.H, &shape.Hkv, err) < 0 ||
         get_int(v, "v_head_dim", 1, 4096, &shape.Dv, err) < 0 ||
         get_rope(v, shape.Dh, &shape.rope, err) < 0))
      r = -1;
    if (r == 0 && shape.H % shape.Hkv)
      r = attnd_error_set(err, ATTND_ERR_HEADS_MISMATCH, "num_kv_heads",
                          "num_kv_heads %lld does not divide num_heads %lld",
                          (long long)shape.Hkv, (long long)shape.H);
  }
  int given = 0; /* max_tokens */
  if (r == 0 &&
      ((given = get_int(v, "max_tokens", 1, most, &max_tokens, err)) < 0 ||
       get_int(v, "ttl_s", 1, cfg->session_max_ttl_s, &ttl_s, err) < 0 ||
       get_backend(v, &shape, &shape.backend, err) < 0))
    r = -1;
  /* a session whose pages could never fit is refused now, not at the
   * step that meets the pool's room: its heads when one page does not
   * fit, else a max_tokens it asked for (the default is what a server
   * allows, and a shorter sequence may still fit) */
  char what[160];
  snprintf(
      what, sizeof what,
      "one token of %s (num_kv_heads %lld, head_dim %lld, v_head_dim %lld)",
      shape.layer ? "its layer" : "its heads", (long long)shape.Hkv,
      (long long)shape.Dh, (long long)shape.Dv);
  if (r == 0 &&
      attnd_session_fits(st, &shape, 1, shape.layer ? "layer" : "head_dim",
                         what, err) < 0)
    r = -1;
  snprintf(what, sizeof what, "max_tokens %lld", (long long)max_tokens);
  if (r == 0 && given &&
      attnd_session_fits(st, &shape, max_tokens, "max_tokens", what, err) < 0)
    r = -1;
  json_decref(v);
  if (r < 0) {
    attnd_layer_set_unref(shape.layers);
    return -1;
  }
  attnd_session_info_t info;
  if (attnd_session_create(st, &shape, max_tokens, ttl_s, id, &info, err) < 0)
    return -1;
  attnd_session_info_json(&info, reply);
  attnd_buf_puts(reply, "\n");
  return 0;
}

const char *const attnd__session_truncate_members[] = {"length", NULL};

int attnd_session_api_truncate(attnd_sessions_t *st, const char *id,
                               const char *body, size_t len, attnd_buf_t *reply,
                               attnd_error_t *err) {
  const char *const *known = attnd__session_truncate_members;
  json_t *v = parse_object(body, len, err);
  if (v == NULL)
    return -1;
  int64_t length = 0;
  int r = only(v, known, err);
  if (r == 0) {
    int given = get_int(v, "length", 0, INT64_MAX, &length, err);
    r = given < 0 ? -1
        : given   ? 0
                  : attnd_error_set(err, ATTND_ERR_MISSING_FIELD, "length",
                                    "length is required: the tokens to keep");
  }
  json_decref(v);
  attnd_session_info_t info;
  if (r < 0 || attnd_session_truncate(st, id, length, &info, err) < 0)
    return -1;
  attnd_session_info_json(&info, reply);
  attnd_buf_puts(reply, "\n");
  return 0;
}

int attnd_session_api_list(attnd_sessions_t *st, const char *limit,
                           const char *after, attnd_buf_t *reply,
                           attnd_error_t *err) {
  enum { MAX_PAGE = 1000 };
  char *end = NULL;
  /* digits only: strtoll would also skip space and a '+' */
  long long n = limit ? strtoll(limit, &end, 10) : 100;
  if (limit &&
      (!isdigit((unsigned char)*limit) || *end || n < 1 || n > MAX_PAGE))
    return attnd_error_set(err, ATTND_ERR_INVALID_VALUE, "limit",
                           "limit is '%.20s%s'; expected 1 to %d", limit,
                           strlen(limit) > 20 ? "..." : "", MAX_PAGE);
  attnd_session_info_t *infos = malloc((size_t)n * sizeof *infos);
  if (infos == NULL)
    return attnd_error_set(err, ATTND_ERR_OUT_OF_MEMORY, NULL,
                           "out of memory listing sessions");
  int more = 0;
  int k = attnd_session_list(st, after ? after : "", infos, (size_t)n, &more);
  if (k < 0) {
    free(infos);
    return attnd_error_set(err, ATTND_ERR_OUT_OF_MEMORY, NULL,
                           "out of memory listing sessions");
  }
  attnd_buf_puts(reply, "{\"sessions\":[");
  for (int i = 0; i < k; i++) {
    if (i)
      attnd_buf_puts(reply, ",");
    attnd_session_info_json(&infos[i], reply);
  }
  if (more && k)
    attnd_buf_printf(reply, "],\"next\":\"%s\"}\n", infos[k - 1].id);
  else
    attnd_buf_puts(reply, "],\"next\":null}\n");
  free(infos);
  return 0;
}

int attnd_session_api_fork(attnd_sessions_t *st, const char *id,
                           const char *body, size_t len, attnd_buf_t *reply,
                           attnd_error_t *err) {
  static const char *const known[] = {NULL};
  json_t *v = parse_object(body, len, err);
  if (v == NULL)
    return -1;
  int r = only(v, known, err);
  json_decref(v);
  attnd_session_info_t info;
  if (r < 0 || attnd_session_fork(st, id, &info, err) < 0)
    return -1;
  attnd_session_info_json(&info, reply);
  attnd_buf_puts(reply, "\n");
  return 0;
}
