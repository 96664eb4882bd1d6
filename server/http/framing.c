/* server/http/framing.c: message framing (RFC 9112), and the path's
 * unescaping. See exchange.h.
 *
 * libmicrohttpd 0.9.75 reads the first Content-Length it finds and ignores
 * the rest; lets Transfer-Encoding override Content-Length and then keeps
 * the connection open for what follows the chunks; and reads a body with
 * any Transfer-Encoding other than exactly "chunked" until the client
 * closes. A request whose framing two parsers could read two ways is
 * refused here, from its headers, before any of its body is read: a reply
 * queued from the first callback closes the connection, so nothing after
 * the request is ever read as another one.
 *
 * Its other checks, on the same walk of the headers: no header line folded
 * onto the next (obs-fold, which the library joins to the name: folded),
 * no CR, LF or NUL in a field value (a bare CR, which the library keeps,
 * ends a line for some parsers, and hid a header from attnd that a proxy
 * would read; a NUL, which the library cuts the value at, is found after
 * it: nul_cut), one
 * valid Host (RFC 9112 3.2), one value of each singleton attnd reads
 * (Authorization, Content-Type, Origin, X-Request-Id), and no expectation but
 * 100-continue, which libmicrohttpd answers (RFC 9110 10.1.1).
 *
 * And the query's arguments, for a route that takes some: one walk of
 * them, as libmicrohttpd decoded them (attnd_http_unescape). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "codec/util.h"
#include "http/exchange.h"

/* The lines of a field that has one value: how many, the first's value
 * and a later one that differs from it. */
typedef struct single {
  int n;
  const char *first, *other;
} single_t;

/* What the headers say about the length of the body. */
typedef struct framing {
  single_t length;       /* Content-Length */
  single_t type;         /* Content-Type */
  single_t origin;       /* Origin */
  single_t request_id;   /* X-Request-Id */
  int n_coding;          /* Transfer-Encoding field lines */
  const char *coding;    /* the first one's value */
  int n_chunked;         /* "chunked" among all their codings */
  char unknown[32];      /* the first coding other than chunked */
  char unmet[32];        /* the first expectation other than 100-continue */
  int n_continue;        /* 100-continue among the expectations */
  const char *bad_name;  /* a field name that is not a token */
  const char *bad_value; /* the name of one whose value has a CR, LF or
                            NUL, */
  const char *bad_char;  /* and which: "a CR", "an LF" or "a NUL" */
  const char *last_key, *last_end; /* the header before: name, value's end */
  const char *fold;                /* the name of one folded into */
  int n_auth;                      /* Authorization field lines */
  int n_host;                      /* Host field lines */
  const char *host;                /* the first one's value */
  size_t host_len;
} framing_t;

/* RFC 9110 5.6.2: tchar. */
static int is_tchar(unsigned char c) {
  return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') ||
         (c && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

/* Walks one value that is a comma-separated list with optional whitespace
 * (Transfer-Encoding, Expect): counts the members that are `known` (in any
 * case) into *n_known, and copies the first other one into other[0..32)
 * where that is still empty. */
static void framing_list(const char *v, const char *known, int *n_known,
                         char *other) {
  size_t len = strlen(known);
  while (*v) {
    while (*v == ' ' || *v == '\t' || *v == ',')
      v++;
    size_t n = strcspn(v, ",");
    size_t k = n;
    while (k && (v[k - 1] == ' ' || v[k - 1] == '\t'))
      k--;
    if (k == len && strncasecmp(v, known, len) == 0)
      ++*n_known;
    else if (k && !other[0])
      snprintf(other, 32, "%.*s", (int)k, v);
    v += n;
  }
}

/* RFC 3986's unreserved and sub-delims: the characters of a reg-name,
 * beside pct-encoded, and of an IP literal, beside ':'. */
static int is_host_char(unsigned char c) {
  return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') ||
         (c && strchr("-._~!$&'()*+,;=", c) != NULL);
}

/* Whether v[0..n) is a Host value (RFC 9112 3.2): uri-host [":" port],
 * the host an IP literal in brackets (with a zone, "%25eth0", as RFC 6874
 * allows) or a reg-name (which an IPv4 address is too), maybe empty; the
 * port digits, maybe none. */
static int host_ok(const char *v, size_t n) {
  size_t i = 0;
  if (n && v[0] == '[') {
    for (i = 1; i < n && v[i] != ']'; i++)
      if (!is_host_char((unsigned char)v[i]) && v[i] != ':' && v[i] != '%')
        return 0;
    if (i == n || i == 1)
      return 0;
    i++;
  } else {
    while (i < n && v[i] != ':') {
      if (v[i] == '%' && i + 2 < n && attnd_hex_digit(v[i + 1]) >= 0 &&
          attnd_hex_digit(v[i + 2]) >= 0)
        i += 3;
      else if (is_host_char((unsigned char)v[i]))
        i++;
      else
        return 0;
    }
  }
  if (i < n && v[i++] != ':')
    return 0;
  for (; i < n; i++)
    if (v[i] < '0' || v[i] > '9')
      return 0;
  return 1;
}

static void single_line(single_t *l, const char *value) {
  if (l->n++ == 0)
    l->first = value;
  else if (!l->other && strcmp(value, l->first) != 0)
    l->other = value;
}

/* libmicrohttpd 0.9.75 measures a value with strlen: a NUL in it ends it
 * there, and what follows, to the line's end, is dropped unseen. It reads
 * the headers in place, in its read buffer, writing a NUL over each line's
 * CR and LF, so the byte after a value's end (the NUL that ends it) is
 * another NUL (the LF of a CRLF, or the empty line that ends the headers,
 * after the last) or, for a line ended by a bare LF, the first of the next
 * header's name (`next`, NULL after the last). Anything else there is
 * what followed a NUL inside the value. */
static void nul_cut(framing_t *f, const char *next) {
  const char *end = f->last_end;
  if (!f->bad_value && end && end[1] != 0 && end + 1 != next) {
    f->bad_value = f->last_key;
    f->bad_char = "a NUL";
  }
}

/* Whether the header key: value was folded into (obs-fold, RFC 9112 5.2: a
 * line that starts with SP or HTAB continues the one before). libmicrohttpd
 * 0.9.75 parses a line in place: its name, the NUL written over the colon,
 * the whitespace it skipped, then its value. A continuation it appends,
 * without its leading whitespace, to the name, not to the value
 * (process_broken_line): "X-F: a<CRLF> b" is "X-Fb: a". For that it copies
 * the name to a new block of the connection's pool, past the read buffer
 * that holds the value, and zeroes the old one, after a CRLF as after a
 * bare LF. So a name that is not just before its value was folded into. */
static int folded(const char *key, size_t key_size, const char *value) {
  uintptr_t k = (uintptr_t)key + key_size + 1, v = (uintptr_t)value;
  if (v < k)
    return 1;
  const char *p = key + key_size + 1;
  while (p < value && (*p == ' ' || *p == '\t'))
    p++;
  return p != value;
}

static enum MHD_Result framing_header(void *cls, enum MHD_ValueKind kind,
                                      const char *key, size_t key_size,
                                      const char *value, size_t value_size) {
  framing_t *f = cls;
  (void)kind;
  nul_cut(f, key);
  if (!f->fold && value && folded(key, key_size, value))
    f->fold = key;
  f->last_key = key;
  f->last_end = value ? value + value_size : NULL;
  for (size_t i = 0; !f->bad_value && value && i < value_size; i++)
    if (value[i] == '\r' || value[i] == '\n' || value[i] == 0) {
      f->bad_value = key;
      f->bad_char = value[i] == '\r'   ? "a CR"
                    : value[i] == '\n' ? "an LF"
                                       : "a NUL";
    }
  for (const char *k = key; !f->bad_name && *k; k++)
    if (!is_tchar((unsigned char)*k))
      f->bad_name = key;
  if (!*key && !f->bad_name)
    f->bad_name = key;
  if (value == NULL)
    value = "";
  if (strcasecmp(key, "Content-Length") == 0) {
    single_line(&f->length, value);
  } else if (strcasecmp(key, "Content-Type") == 0) {
    single_line(&f->type, value);
  } else if (strcasecmp(key, "Origin") == 0) {
    single_line(&f->origin, value);
  } else if (strcasecmp(key, "X-Request-Id") == 0) {
    single_line(&f->request_id, value);
  } else if (strcasecmp(key, "Transfer-Encoding") == 0) {
    if (f->n_coding++ == 0)
      f->coding = value;
    framing_list(value, "chunked", &f->n_chunked, f->unknown);
  } else if (strcasecmp(key, "Expect") == 0) {
    framing_list(value, "100-continue", &f->n_continue, f->unmet);
  } else if (strcasecmp(key, "Authorization") == 0) {
    f->n_auth++;
  } else if (strcasecmp(key, "Host") == 0 && f->n_host++ == 0) {
    f->host = value;
    f->host_len = value_size;
  }
  return MHD_YES;
}

/* The 400 of a field of one value given in lines that differ. */
static enum MHD_Result single_fail(attnd_http_req_t *r, const char *name,
                                   const single_t *l) {
  return attnd_http_fail(r, ATTND_ERR_BAD_REQUEST, name,
                         "%s is given %d times with different values "
                         "('%.40s' and '%.40s'); send one",
                         name, l->n, l->first, l->other);
}

/* Returns 1 when the body's length is unambiguous: no Transfer-Encoding
 * and at most one Content-Length value (repeated identical lines are
 * allowed, RFC 9110 8.6), or exactly one Transfer-Encoding "chunked" and
 * no Content-Length. Otherwise queues the reply into *ret and returns 0:
 * 400 bad_request for a header line folded onto the next (RFC 9112 5.2),
 * for a field name that is not a token (RFC 9112 5.1:
 * "Content-Length : 5" would hide the length from us and not from a
 * proxy), Content-Length values that differ, Content-Length with
 * Transfer-Encoding, Transfer-Encoding in an HTTP/1.0 request (RFC 9112
 * 6.1: faulty framing, and the connection closes after it), or chunked
 * applied twice; 501 not_implemented for a
 * transfer coding other than chunked. Then 400 for a field value with a
 * CR, LF or NUL (RFC 9110 5.5), and for a Host missing from an HTTP/1.1
 * request, given twice, or not a host and port (RFC 9112 3.2), and for
 * Authorization given twice (a singleton field, RFC 9110 11.6.2: the key
 * check and a proxy in front could each read another), and Content-Type,
 * Origin or X-Request-Id lines that differ (singletons too, RFC 9110 8.3
 * and RFC 6454 7.3; X-Request-Id defines no list, RFC 9110 5.3; of each
 * libmicrohttpd gives the first); and 417
 * expectation_failed for an Expect member other than 100-continue (RFC
 * 9110 10.1.1), which libmicrohttpd would ignore. `version` is the
 * request line's. HTTP thread, first callback. */
int attnd_http_framing_ok(attnd_http_req_t *r, const char *version,
                          enum MHD_Result *ret) {
  framing_t f = {0};
  MHD_get_connection_values_n(r->conn, MHD_HEADER_KIND, framing_header, &f);
  nul_cut(&f, NULL);
  /* an id a NUL cut is not the client's: the refusal carries attnd's */
  if (f.bad_value && strcasecmp(f.bad_value, "X-Request-Id") == 0)
    attnd_http_own_request_id(r);
  /* nor is a trace context whose text a NUL ended early */
  if (f.bad_value && strcasecmp(f.bad_value, "traceparent") == 0)
    r->trace_id[0] = 0;
  if (f.fold)
    *ret = attnd_http_fail(
        r, ATTND_ERR_BAD_REQUEST, f.fold,
        "a header line is folded onto the next (obs-fold, RFC 9112 5.2), "
        "which reads as the header '%.60s'; send each header on one line",
        f.fold);
  else if (f.bad_name)
    *ret = attnd_http_fail(
        r, ATTND_ERR_BAD_REQUEST, f.bad_name,
        "the header name '%.60s' is not a token (RFC 9112 5.1: no "
        "whitespace before the colon)",
        f.bad_name);
  else if (f.bad_value)
    *ret = attnd_http_fail(r, ATTND_ERR_BAD_REQUEST, f.bad_value,
                           "the header %.60s holds %s (RFC 9110 5.5: no CR, "
                           "LF or NUL in a field value)",
                           f.bad_value, f.bad_char);
  else if (f.length.other)
    *ret = single_fail(r, "Content-Length", &f.length);
  else if (f.n_coding && f.length.n)
    *ret = attnd_http_fail(
        r, ATTND_ERR_BAD_REQUEST, "Content-Length",
        "Content-Length and Transfer-Encoding are both given; send "
        "one (RFC 9112 6.3)");
  else if (f.n_coding && strcmp(version, MHD_HTTP_VERSION_1_0) == 0)
    *ret = attnd_http_fail(r, ATTND_ERR_BAD_REQUEST, "Transfer-Encoding",
                           "Transfer-Encoding in a request of HTTP 1.0, "
                           "which has none: its framing is faulty (RFC 9112 "
                           "6.1); send Content-Length");
  else if (f.unknown[0])
    *ret = attnd_http_fail(
        r, ATTND_ERR_NOT_IMPLEMENTED, "Transfer-Encoding",
        "the transfer coding '%s' is not implemented; send the body "
        "with Content-Length or Transfer-Encoding: chunked",
        f.unknown);
  else if (f.n_coding &&
           (f.n_coding > 1 || strcasecmp(f.coding, "chunked") != 0))
    *ret =
        attnd_http_fail(r, ATTND_ERR_BAD_REQUEST, "Transfer-Encoding",
                        "Transfer-Encoding must be exactly 'chunked' (given %d "
                        "times, chunked %d times)",
                        f.n_coding, f.n_chunked);
  else if (f.n_host == 0 && strcmp(version, MHD_HTTP_VERSION_1_0) != 0)
    *ret = attnd_http_fail(r, ATTND_ERR_BAD_REQUEST, "Host",
                           "no Host is given; a request of HTTP 1.1 needs "
                           "one (RFC 9112 3.2)");
  else if (f.n_host > 1)
    *ret = attnd_http_fail(r, ATTND_ERR_BAD_REQUEST, "Host",
                           "Host is given %d times; send one (RFC 9112 3.2)",
                           f.n_host);
  else if (f.n_host && !host_ok(f.host, f.host_len))
    *ret = attnd_http_fail(r, ATTND_ERR_BAD_REQUEST, "Host",
                           "Host is '%.80s'; expected a host and an optional "
                           "port (RFC 9112 3.2)",
                           f.host);
  else if (f.n_auth > 1)
    *ret = attnd_http_fail(r, ATTND_ERR_BAD_REQUEST, "Authorization",
                           "Authorization is given %d times; send one (RFC "
                           "9110 11.6.2, RFC 6750 2)",
                           f.n_auth);
  else if (f.type.other)
    *ret = single_fail(r, "Content-Type", &f.type);
  else if (f.origin.other)
    *ret = single_fail(r, "Origin", &f.origin);
  else if (f.request_id.other)
    *ret = single_fail(r, "X-Request-Id", &f.request_id);
  else if (f.unmet[0])
    *ret = attnd_http_fail(r, ATTND_ERR_EXPECTATION_FAILED, "Expect",
                           "Expect holds '%s', which attnd cannot meet: the "
                           "one expectation is 100-continue (RFC 9110 10.1.1)",
                           f.unmet);
  else {
    /* no body: no Transfer-Encoding, and no Content-Length or one of 0
     * (the library refused one that is not a number) */
    r->no_body =
        f.n_coding == 0 &&
        (f.length.n == 0 || (f.length.first[0] &&
                             f.length.first[strspn(f.length.first, "0")] == 0));
    /* a body of a known, small length, that its client does not wait to
     * be invited to send; not a chunked one: one that grew past the bound
     * could only be cut off with no reply (http.c, on_first) */
    r->discard_ok =
        !r->no_body && f.n_continue == 0 && f.n_coding == 0 &&
        strtoull(f.length.first, NULL, 10) <= attnd_http_discard_max(r->srv);
    return 1;
  }
  return 0;
}

/* The length of an absolute form's "http://" or "https://" (any case) at
 * the start of a request target, or 0 for none. */
static size_t scheme_len(const char *url) {
  return strncasecmp(url, "http://", 7) == 0    ? 7
         : strncasecmp(url, "https://", 8) == 0 ? 8
                                                : 0;
}

/* The unescaper of the path (and of query arguments): %XX decoded in
 * place, as libmicrohttpd's own does, except %00, which stays as the
 * three characters. Decoded to a NUL, it would end the path early
 * ("/v1/attention%00.json" would route as /v1/attention), and the route,
 * the 404's message and the access log would each see a different path.
 * In a target of absolute form ("http://host/path"), only the path is
 * decoded: an authority "a%2Fhealthz" must not become a path. Never
 * lengthens s. Returns its new length. HTTP thread. */
size_t attnd_http_unescape(void *cls, struct MHD_Connection *conn, char *s) {
  (void)cls;
  (void)conn;
  char *w = s;
  const char *p = s;
  size_t k = scheme_len(s); /* an absolute form's authority stays as sent */
  if (k) {
    p = w = s + k + strcspn(s + k, "/");
  }
  while (*p) {
    int hi = p[0] == '%' ? attnd_hex_digit(p[1]) : -1;
    int lo = hi >= 0 ? attnd_hex_digit(p[2]) : -1;
    if (lo >= 0 && (hi | lo) != 0) {
      *w++ = (char)(hi << 4 | lo);
      p += 3;
    } else {
      *w++ = *p++;
    }
  }
  *w = 0;
  return (size_t)(w - s);
}

const char *attnd_http_target_path(const char *url) {
  size_t k = scheme_len(url);
  if (k == 0)
    return url;
  const char *p = strchr(url + k, '/');
  return p ? p : "/";
}

/* What one walk of the query's arguments found for a route that takes
 * `names`. */
typedef struct query_walk {
  const char *const *names;
  const char **values;                /* each name's first value */
  int n[ATTND_QUERY_MAX];             /* each name's arguments */
  const char *later[ATTND_QUERY_MAX]; /* each name's second value */
  const char *unknown;                /* the first name not among names */
  const char *no_value;               /* the first of names without a value */
} query_walk_t;

static enum MHD_Result query_arg(void *cls, enum MHD_ValueKind kind,
                                 const char *key, size_t key_size,
                                 const char *value, size_t value_size) {
  query_walk_t *q = cls;
  (void)kind;
  (void)key_size;
  if (!*key && value_size == 0)
    return MHD_YES; /* "&&": no argument */
  int i = 0;
  while (q->names[i] && strcmp(q->names[i], key) != 0)
    i++;
  if (q->names[i] == NULL) {
    if (!q->unknown)
      q->unknown = key;
    return MHD_YES;
  }
  value = value ? value : ""; /* "?limit", without "=" */
  if (q->n[i]++ == 0)
    q->values[i] = value;
  else if (q->n[i] == 2)
    q->later[i] = value;
  if (value_size == 0 && !q->no_value)
    q->no_value = q->names[i];
  return MHD_YES;
}

int attnd_http_query(attnd_http_req_t *r, const char *const *names,
                     const char **values, attnd_error_t *e) {
  query_walk_t q = {.names = names, .values = values};
  char list[128] = "";
  size_t len = 0;
  for (int i = 0; names[i]; i++) {
    values[i] = NULL;
    len +=
        (size_t)snprintf(list + len, len < sizeof list ? sizeof list - len : 0,
                         "%s%s", i ? ", " : "", names[i]);
  }
  MHD_get_connection_values_n(r->conn, MHD_GET_ARGUMENT_KIND, query_arg, &q);
  if (q.unknown)
    return attnd_error_set(e, ATTND_ERR_UNKNOWN_FIELD, q.unknown,
                           "the query argument '%.40s' is unknown; this "
                           "path takes %s",
                           q.unknown, list);
  for (int i = 0; names[i]; i++)
    if (q.n[i] > 1)
      return attnd_error_set(e, ATTND_ERR_BAD_REQUEST, names[i],
                             "the query argument %s is given %d times (the "
                             "first '%.40s', the second '%.40s'); send it "
                             "once",
                             names[i], q.n[i], values[i], q.later[i]);
  if (q.no_value)
    return attnd_error_set(e, ATTND_ERR_INVALID_VALUE, q.no_value,
                           "the query argument %s has no value; give one, "
                           "or leave it out",
                           q.no_value);
  return 0;
}
