/* server/http/router.h: the route table's row, and finding a path's row.
 *
 * attnd has one table of routes (server/api/routes.c). Each row is a set of
 * methods on a path pattern, the handler that answers them, the protocol
 * the row speaks, and its properties. Routing, the 405 and its Allow, the
 * API key check, CORS preflights and the metrics' protocol label are all
 * read from it; tests/check_routes.c checks it against docs/openapi.json's
 * paths, both ways.
 *
 * A pattern is literal segments and parameters: "{name}" matches one
 * non-empty segment, "{name+}" one or more non-empty segments (a layer's or
 * a model's name may hold '/'). A pattern has at most one "+" parameter; it
 * takes every segment except those the rest of the pattern needs, so matching
 * is one pass over the path. Rows of one pattern are adjacent, and the first
 * pattern that matches a path is its route: a longer pattern comes before
 * one that would also take its path ("{model+}/ready" before "{model+}"). */
#ifndef ATTND_HTTP_ROUTER_H
#define ATTND_HTTP_ROUTER_H

#include <microhttpd.h>
#include <stddef.h>

#include "metrics.h"

typedef struct attnd_http_req attnd_http_req_t;

/* Answers a request: queues its reply (or suspends its connection) and
 * returns what libmicrohttpd's access handler returns. A row with
 * ATTND_ROUTE_BODY is called once its body has been read whole; any other
 * on the callback after the first. HTTP thread. */
typedef enum MHD_Result (*attnd_handler_t)(attnd_http_req_t *r);

/* Checks a request from its path and headers alone, before its body is
 * read (a model that is not loaded). Returns 1, or 0 with the reply queued
 * into *ret. HTTP thread, first callback. */
typedef int (*attnd_precheck_t)(attnd_http_req_t *r, enum MHD_Result *ret);

enum {
  ATTND_ROUTE_BODY = 1 << 0,     /* a POST or PUT: the body is read first */
  ATTND_ROUTE_COMPUTES = 1 << 1, /* the body becomes an attention request */
  ATTND_ROUTE_PUBLIC = 1 << 2,   /* never needs an API key (holds no data) */
  ATTND_ROUTE_CORS = 1 << 3,     /* answers CORS preflights (OPTIONS) */
  ATTND_ROUTE_ASSET = 1 << 4,    /* a file of the binary (http/assets.h),
                                    routed only where one is at the path */
  ATTND_ROUTE_PAGE = 1 << 5,     /* the page's: routed only with `ui` on */
  ATTND_ROUTE_CONTROL = 1 << 6,  /* with BODY: a body of a few members, at
                                    most ATTND_CONTROL_BODY_MAX bytes */
};

typedef struct attnd_route {
  const char *methods; /* as an Allow header lists them: "GET, HEAD" */
  const char *pattern; /* "/v1/sessions/{session}/fork" */
  attnd_handler_t handler;
  attnd_protocol_t proto;    /* its replies' and errors' form, and metrics */
  unsigned flags;            /* ATTND_ROUTE_* */
  attnd_precheck_t precheck; /* or NULL */
} attnd_route_t;

/* The table: its rows, *n of them. Defined by server/api/routes.c. */
const attnd_route_t *attnd_routes(size_t *n);

#define ATTND_ROUTE_MAX_PARAMS 2

/* What a path matched. */
typedef struct attnd_route_match {
  const attnd_route_t *route; /* the row for the method; NULL for none */
  const attnd_route_t *first; /* the pattern's first row; NULL: no pattern */
  char allow[48];             /* every method of the pattern's rows */
  int cors;                   /* a row of the pattern answers preflights */
  int n_params;
  struct {
    const char *name; /* the pattern's text after '{' */
    size_t name_len;
    const char *value; /* in the path */
    size_t len;
  } params[ATTND_ROUTE_MAX_PARAMS];
} attnd_route_match_t;

/* Finds the rows of the first pattern of `routes` that matches `path` (a
 * decoded path, no query), and among them the one for `method`. Returns 1
 * when a pattern matched (m->route is NULL when the method is not one of
 * m->allow), 0 when none did. Borrows everything; m's values point into
 * path and the table. Any thread. */
int attnd_route_find(const attnd_route_t *routes, size_t n, const char *path,
                     const char *method, attnd_route_match_t *m);

/* Whether `method` is one of `methods` ("GET, HEAD"). */
int attnd_route_allows(const char *methods, const char *method);

/* Every method some row of `routes` answers, once each, in the table's
 * order, as an Allow header lists them, and OPTIONS where a row answers
 * preflights: the methods attnd implements, all others a 501 (RFC 9110
 * 9.1). Writes at most cap bytes into out (what does not fit is left
 * out); returns the length. Any thread. */
size_t attnd_route_methods(const attnd_route_t *routes, size_t n, char *out,
                           size_t cap);

#endif
