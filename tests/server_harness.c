/* tests/server_harness.c: see server_harness.h.
 *
 * Nothing here trusts the server: every reply is parsed defensively, every
 * wait is bounded, and a server that misbehaves is killed rather than
 * waited for. Base64 and the tensor forms are written again here, apart
 * from codec/, so that a bug there cannot hide itself. */
#include "server_harness.h"

#include <check.h>
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "codec/half.h"
#include "codec/util.h"
#include "ref.h"
#include "testutil.h"

/* Allocation failures end the test process: a crash fails the test. */
static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (p == NULL)
    abort();
  return p;
}

/* Zeroed, for buffers filled by a loop and then read through a const
 * pointer: gcc 12 for aarch64 sees the read but not that the loop wrote
 * every byte, and fails the build with -Wmaybe-uninitialized. */
static void *xcalloc(size_t n) {
  void *p = calloc(n ? n : 1, 1);
  if (p == NULL)
    abort();
  return p;
}

static void *xrealloc(void *p, size_t n) {
  p = realloc(p, n ? n : 1);
  if (p == NULL)
    abort();
  return p;
}

double sh_now(void) {
  return attnd_now_ms() / 1000.0;
}

double sh_wall_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void sleep_ms(int ms) {
  struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&t, &t) < 0 && errno == EINTR)
    ;
}

/* ---- the reaper ---------------------------------------------------------- */

/* Servers started by this process. Check forks a child per test, which
 * inherits this table: the owner field keeps a child from killing its
 * parent's servers when it exits. Main thread only. */
enum { SH_MAX_SERVERS = 32 };
static struct { pid_t pid, owner; } reap_tab[SH_MAX_SERVERS];

static void reap_add(pid_t pid) {
  for (int i = 0; i < SH_MAX_SERVERS; i++)
    if (reap_tab[i].pid == 0) {
      reap_tab[i].pid = pid;
      reap_tab[i].owner = getpid();
      return;
    }
}

/* Forgets `pid` once the launcher has reaped it (s->pid is then 0). */
static void reap_del(pid_t pid, const sh_server_t *s) {
  for (int i = 0; pid > 0 && s->pid == 0 && i < SH_MAX_SERVERS; i++)
    if (reap_tab[i].pid == pid)
      reap_tab[i].pid = 0;
}

static void reap_all(void) {
  pid_t me = getpid();
  for (int i = 0; i < SH_MAX_SERVERS; i++)
    if (reap_tab[i].pid > 0 && reap_tab[i].owner == me) {
      kill(reap_tab[i].pid, SIGKILL);
      waitpid(reap_tab[i].pid, NULL, 0);
      reap_tab[i].pid = 0;
    }
}

void sh_init(void) {
  signal(SIGPIPE, SIG_IGN);
  curl_global_init(CURL_GLOBAL_ALL);
  atexit(reap_all);
}

/* ---- the server: bench/server.c's launcher, and the reaper -------------- */

int sh_server_start(sh_server_t *s, const char *const *args) {
  if (bench_server_start(s, NULL, args) < 0)
    return -1;
  reap_add(s->pid);
  return 0;
}

void sh_server_read_log(sh_server_t *s) {
  bench_server_read_log(s);
}

void sh_wait_log(sh_server_t *s, const char *event) {
  double end = sh_now() + 10;
  while (sh_now() < end) {
    sh_server_read_log(s);
    if (strstr(s->log, event))
      return;
    usleep(20000);
  }
  ck_abort_msg("no %s in the log:\n%s", event, s->log);
}

int sh_server_wait(sh_server_t *s, double timeout_s) {
  pid_t pid = s->pid;
  int st = bench_server_wait(s, timeout_s);
  reap_del(pid, s);
  return st;
}

int sh_server_stop(sh_server_t *s, double timeout_s) {
  pid_t pid = s->pid;
  int st = bench_server_stop(s, timeout_s);
  reap_del(pid, s);
  return st;
}

void sh_server_kill(sh_server_t *s) {
  pid_t pid = s->pid;
  bench_server_kill(s);
  reap_del(pid, s);
}

const char *sh_bin_beside(const char *name, char *out, size_t n) {
  const char *bin = getenv("ATTND_BIN");
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", bin && *bin ? bin : "build/attnd");
  snprintf(out, n, "%s/%s", dirname(dir), name);
  return out;
}

/* ---- HTTP ---------------------------------------------------------------- */

static void buf_add(char **b, size_t *len, size_t *cap, const char *p,
                    size_t n) {
  if (*len + n + 1 > *cap) {
    size_t c = *cap ? *cap : 1024;
    while (c < *len + n + 1)
      c *= 2;
    *b = xrealloc(*b, c);
    *cap = c;
  }
  memcpy(*b + *len, p, n);
  *len += n;
  (*b)[*len] = 0;
}

typedef struct sink {
  sh_resp_t *r;
  size_t body_cap, head_cap;
} sink_t;

static size_t on_body(char *p, size_t size, size_t nmemb, void *ud) {
  sink_t *k = ud;
  buf_add(&k->r->body, &k->r->body_len, &k->body_cap, p, size * nmemb);
  return size * nmemb;
}

/* Keeps the header lines of the last reply only (a 100 Continue comes
 * first when the client sent Expect). */
static size_t on_header(char *p, size_t size, size_t nmemb, void *ud) {
  sink_t *k = ud;
  size_t n = size * nmemb;
  if (n >= 5 && strncmp(p, "HTTP/", 5) == 0)
    k->r->head_len = 0;
  buf_add(&k->r->head, &k->r->head_len, &k->head_cap, p, n);
  return n;
}

typedef struct source {
  const char *p;
  size_t left;
} source_t;

/* Chunked uploads: a few kilobytes per call, so that the body really goes
 * out in several chunks. */
static size_t on_read(char *dst, size_t size, size_t nmemb, void *ud) {
  source_t *s = ud;
  size_t n = size * nmemb;
  if (n > 4096)
    n = 4096;
  if (n > s->left)
    n = s->left;
  memcpy(dst, s->p, n);
  s->p += n;
  s->left -= n;
  return n;
}

void sh_client_init(sh_client_t *c, int port) {
  c->curl = curl_easy_init();
  c->port = port;
  c->host = NULL;
  if (c->curl == NULL)
    abort();
}

void sh_client_free(sh_client_t *c) {
  if (c->curl)
    curl_easy_cleanup(c->curl);
  c->curl = NULL;
}

/* Replies whose body is larger are recorded without it. */
#define SH_RECORD_MAX_BODY ((size_t)4 << 20)

/* The body of a reply with Content-Encoding gzip or deflate, inflated with
 * zlib itself (not attnd's codec), up to SH_RECORD_MAX_BODY bytes: a new
 * buffer and its length, or NULL. */
static char *inflate_body(const sh_resp_t *r, size_t *len) {
  z_stream z = {0};
  if (inflateInit2(&z, 15 + 32) != Z_OK) /* gzip or zlib, by the header */
    return NULL;
  char *out = malloc(SH_RECORD_MAX_BODY);
  z.next_in = (Bytef *)r->body;
  z.avail_in = (uInt)r->body_len;
  z.next_out = (Bytef *)out;
  z.avail_out = (uInt)SH_RECORD_MAX_BODY;
  int rc = out ? inflate(&z, Z_FINISH) : Z_MEM_ERROR;
  *len = z.total_out;
  inflateEnd(&z);
  if (rc != Z_STREAM_END) {
    free(out);
    return NULL;
  }
  return out;
}

/* With ATTND_TEST_REPLIES naming a file, appends one JSON line for the
 * reply `r` to `q`: {"method", "path" (without its query), "status",
 * "content_type", "header_length" (Inference-Header-Content-Length),
 * "body"}, for tests/openapi/openapi.mjs to validate against
 * docs/openapi.json. The body is kept only when it is JSON, or the JSON
 * header of a binary reply; one over SH_RECORD_MAX_BODY becomes
 * "body_skipped": its length, one that is not UTF-8 "body_not_utf8"; a
 * compressed one is inflated first ("content_encoding" kept; one that does
 * not inflate is "body_bad_coding"). Each line
 * goes out in one write(2) to a file opened O_APPEND, so that the threads and
 * forked tests of every suite can share the file. Any thread; failures are
 * ignored. */
static void record_reply(const sh_req_t *q, const sh_resp_t *r, CURL *h) {
  const char *file = getenv("ATTND_TEST_REPLIES");
  if (file == NULL || *file == 0 || r->status == 0)
    return;
  char *ct = NULL, hl[32];
  curl_easy_getinfo(h, CURLINFO_CONTENT_TYPE, &ct);
  long header_len =
      sh_header(r, "Inference-Header-Content-Length", hl, sizeof hl)
          ? strtol(hl, NULL, 10)
          : -1;
  size_t path_len = strcspn(q->path, "?");
  json_t *line = json_pack(
      "{s:s,s:s%,s:I,s:s?}", "method", q->method ? q->method : "GET", "path",
      q->path, path_len, "status", (json_int_t)r->status, "content_type", ct);
  if (line == NULL)
    return;
  if (header_len >= 0)
    json_object_set_new(line, "header_length", json_integer(header_len));
  char ce[32];
  size_t n = r->body_len;
  const char *data = r->body;
  char *inflated = NULL;
  if (sh_header(r, "Content-Encoding", ce, sizeof ce)) {
    json_object_set_new(line, "content_encoding", json_string(ce));
    if ((inflated = inflate_body(r, &n)) == NULL)
      json_object_set_new(line, "body_bad_coding", json_true());
    data = inflated;
  }
  int is_json = ct && (strncasecmp(ct, "application/json", 16) == 0 ||
                       strstr(ct, "+json") != NULL);
  if (!is_json && header_len >= 0 && (size_t)header_len <= n)
    n = (size_t)header_len, is_json = 1;
  if (is_json && data == NULL)
    ; /* body_bad_coding */
  else if (is_json && n > SH_RECORD_MAX_BODY)
    json_object_set_new(line, "body_skipped", json_integer((json_int_t)n));
  else if (is_json) {
    json_t *body = json_stringn(data, n); /* NULL when not UTF-8 */
    json_object_set_new(line, body ? "body" : "body_not_utf8",
                        body ? body : json_true());
  }
  free(inflated);
  char *txt = json_dumps(line, JSON_COMPACT);
  json_decref(line);
  if (txt == NULL)
    return;
  size_t len = strlen(txt);
  txt[len] = '\n'; /* replaces the NUL: the line is written by length */
  int fd = open(file, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd >= 0) {
    ssize_t w = write(fd, txt, len + 1);
    (void)w;
    close(fd);
  }
  free(txt);
}

int sh_http(sh_client_t *c, const sh_req_t *q, sh_resp_t *r) {
  memset(r, 0, sizeof *r);
  sink_t k = {.r = r};
  buf_add(&r->body, &r->body_len, &k.body_cap, "", 0);
  buf_add(&r->head, &r->head_len, &k.head_cap, "", 0);
  CURL *h = c->curl;
  curl_easy_reset(h); /* options only: the connection stays */
  char url[512];
  const char *host = c->host ? c->host : "127.0.0.1";
  int v6 = strchr(host, ':') != NULL; /* in brackets, as a URL has it */
  snprintf(url, sizeof url, "%s://%s%s%s:%d%s", q->cafile ? "https" : "http",
           v6 ? "[" : "", host, v6 ? "]" : "", c->port, q->path);
  curl_easy_setopt(h, CURLOPT_URL, url);
  if (q->cafile)
    curl_easy_setopt(h, CURLOPT_CAINFO, q->cafile);
  curl_easy_setopt(h, CURLOPT_PROXY, "");
  curl_easy_setopt(h, CURLOPT_NOPROXY, "*");
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS,
                   q->timeout_ms > 0 ? q->timeout_ms : 30000L);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &k);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &k);
  char errbuf[CURL_ERROR_SIZE] = "";
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);

  struct curl_slist *hl = NULL;
  char line[256];
  int has_expect = 0;
  if (q->content_type) {
    snprintf(line, sizeof line, "Content-Type: %s", q->content_type);
    hl = curl_slist_append(hl, line);
  } else {
    hl = curl_slist_append(hl, "Content-Type:"); /* none at all */
  }
  for (int i = 0; q->headers && q->headers[i]; i++) {
    hl = curl_slist_append(hl, q->headers[i]);
    has_expect |= strncasecmp(q->headers[i], "Expect:", 7) == 0;
  }
  if (!has_expect) /* no 100-continue round trip unless asked */
    hl = curl_slist_append(hl, "Expect:");

  source_t src = {q->body, q->len};
  const char *m = q->method ? q->method : "GET";
  if (q->chunked) {
    hl = curl_slist_append(hl, "Transfer-Encoding: chunked");
    curl_easy_setopt(h, CURLOPT_POST, 1L);
    curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
    curl_easy_setopt(h, CURLOPT_READDATA, &src);
    if (strcmp(m, "POST") != 0)
      curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, m);
  } else if (q->body) {
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)q->len);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, q->body);
    if (strcmp(m, "POST") != 0)
      curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, m);
  } else if (strcmp(m, "HEAD") == 0) {
    curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
  } else if (strcmp(m, "GET") != 0) {
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, m);
  }
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);

  double t0 = sh_now();
  CURLcode rc = curl_easy_perform(h);
  r->t_end = sh_now();
  r->seconds = r->t_end - t0;
  r->curl_code = (int)rc;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r->status);
  record_reply(q, r, h);
  curl_slist_free_all(hl);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, NULL);
  if (rc != CURLE_OK) {
    snprintf(r->error, sizeof r->error, "%.50s: %.200s", curl_easy_strerror(rc),
             errbuf);
    return r->status ? 0 : -1;
  }
  return 0;
}

int sh_get(int port, const char *path, sh_resp_t *r) {
  sh_client_t c;
  sh_client_init(&c, port);
  sh_req_t q = {.method = "GET", .path = path};
  int rc = sh_http(&c, &q, r);
  sh_client_free(&c);
  return rc;
}

int sh_post(int port, const char *body, size_t len, sh_resp_t *r) {
  sh_client_t c;
  sh_client_init(&c, port);
  sh_req_t q = sh_attention_post(body, len);
  int rc = sh_http(&c, &q, r);
  sh_client_free(&c);
  return rc;
}

int sh_post_json(int port, const json_t *req, sh_resp_t *r) {
  char *txt = json_dumps(req, JSON_COMPACT);
  if (txt == NULL)
    abort();
  int rc = sh_post(port, txt, strlen(txt), r);
  free(txt);
  return rc;
}

const char *sh_header(const sh_resp_t *r, const char *name, char *buf,
                      size_t n) {
  size_t nl = strlen(name);
  for (const char *l = r->head; l && *l;) {
    const char *e = strstr(l, "\r\n");
    size_t len = e ? (size_t)(e - l) : strlen(l);
    if (len > nl && strncasecmp(l, name, nl) == 0 && l[nl] == ':') {
      const char *v = l + nl + 1;
      while (*v == ' ' || *v == '\t')
        v++;
      size_t vl = len - (size_t)(v - l);
      while (vl > 0 && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
        vl--;
      if (vl >= n)
        vl = n - 1;
      memcpy(buf, v, vl);
      buf[vl] = 0;
      return buf;
    }
    if (e == NULL)
      break;
    l = e + 2;
  }
  return NULL;
}

json_t *sh_json(const sh_resp_t *r) {
  if (r->body == NULL)
    return NULL;
  json_error_t e;
  return json_loadb(r->body, r->body_len, 0, &e);
}

void sh_resp_free(sh_resp_t *r) {
  free(r->head);
  free(r->body);
  memset(r, 0, sizeof *r);
}

void sh_assert_error(const sh_resp_t *r, long status, const char *code,
                     const char *field, ...) {
  va_list ap;
  va_start(ap, field);
  sh_assert_error_v(r, status, code, field, ap);
  va_end(ap);
}

void sh_assert_error_v(const sh_resp_t *r, long status, const char *code,
                       const char *field, va_list words) {
  ck_assert_msg(r->status == status, "status %ld, expected %ld (%s): %.400s",
                r->status, status, r->error, r->body ? r->body : "");
  char ct[128];
  ck_assert_msg(sh_header(r, "Content-Type", ct, sizeof ct) &&
                    strncmp(ct, "application/json", 16) == 0,
                "an error has Content-Type application/json");
  json_t *v = sh_json(r);
  ck_assert_msg(v != NULL, "the body is not JSON: %.400s", r->body);
  json_t *err = json_object_get(v, "error");
  ck_assert_msg(json_is_object(err), "no error object: %.400s", r->body);
  const char *c = json_string_value(json_object_get(err, "code"));
  const char *m = json_string_value(json_object_get(err, "message"));
  const json_t *f = json_object_get(err, "field");
  ck_assert_msg(c && strcmp(c, code) == 0, "error.code %s, expected %s: %.400s",
                c ? c : "(none)", code, r->body);
  ck_assert_msg(m && *m, "error.message missing: %.400s", r->body);
  if (field == NULL)
    ck_assert_msg(f == NULL, "error.field present, expected none: %.400s",
                  r->body);
  else
    ck_assert_msg(json_is_string(f) && strcmp(json_string_value(f), field) == 0,
                  "error.field is not %s: %.400s", field, r->body);
  for (const char *want; (want = va_arg(words, const char *)) != NULL;)
    ck_assert_msg(strstr(m, want) != NULL, "error.message lacks '%s': %.400s",
                  want, m);
  json_decref(v);
}

/* ---- raw sockets --------------------------------------------------------- */

int sh_connect(int port) {
  return bench_connect(port);
}

int sh_bound_port_assert(int *port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ck_assert_int_ge(fd, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
  ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
  *port = ntohs(a.sin_port);
  return fd;
}

int sh_send_all(int fd, const void *p, size_t n) {
  return bench_send_all(fd, p, n);
}

int sh_post_slow_reader_assert(int port, const char *body, char head[1024]) {
  int fd = socket(AF_INET, SOCK_STREAM, 0), rcv = 4096;
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv), 0);
  struct timeval tv = {.tv_sec = 10}; /* a reply sent whole: no wait on */
  ck_assert_int_eq(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  char req[256];
  int n = snprintf(req, sizeof req,
                   "POST /v1/attention HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                   "Content-Type: application/json\r\nContent-Length: %zu"
                   "\r\n\r\n",
                   strlen(body));
  ck_assert_int_eq(sh_send_all(fd, req, (size_t)n), 0);
  ck_assert_int_eq(sh_send_all(fd, body, strlen(body)), 0);
  ssize_t got = recv(fd, head, 1023, 0);
  ck_assert_int_gt(got, 0);
  head[got] = 0;
  return fd;
}

long sh_recv_reply(int fd, char *buf, size_t cap, int timeout_ms) {
  size_t len = 0;
  double deadline = sh_now() + timeout_ms / 1000.0;
  buf[0] = 0;
  for (;;) {
    const char *end = strstr(buf, "\r\n\r\n");
    if (end) {
      const char *cl = strcasestr(buf, "\r\nContent-Length:");
      if (cl && cl < end) {
        size_t want = (size_t)(end + 4 - buf) + strtoul(cl + 17, NULL, 10);
        if (len >= want)
          return (long)len;
      }
    }
    int left = (int)((deadline - sh_now()) * 1000.0);
    if (left <= 0 || len + 1 >= cap)
      return -1;
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    int pr = poll(&pf, 1, left);
    if (pr < 0 && errno == EINTR)
      continue;
    if (pr <= 0)
      return -1;
    ssize_t k = recv(fd, buf + len, cap - 1 - len, 0);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0) /* closed: complete if the headers are in */
      return strstr(buf, "\r\n\r\n") ? (long)len : -1;
    len += (size_t)k;
    buf[len] = 0;
  }
}

int sh_raw_status(const char *reply) {
  if (strncmp(reply, "HTTP/1.", 7) != 0 || strlen(reply) < 12)
    return 0;
  return atoi(reply + 9);
}

/* ---- base64 -------------------------------------------------------------- */

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *sh_base64(const void *src, size_t n) {
  const unsigned char *s = src;
  char *out = xmalloc((n + 2) / 3 * 4 + 1), *o = out;
  for (size_t i = 0; i < n; i += 3) {
    uint32_t v = (uint32_t)s[i] << 16;
    if (i + 1 < n)
      v |= (uint32_t)s[i + 1] << 8;
    if (i + 2 < n)
      v |= s[i + 2];
    *o++ = b64_alphabet[v >> 18 & 63];
    *o++ = b64_alphabet[v >> 12 & 63];
    *o++ = i + 1 < n ? b64_alphabet[v >> 6 & 63] : '=';
    *o++ = i + 2 < n ? b64_alphabet[v & 63] : '=';
  }
  *o = 0;
  return out;
}

/* Decodes standard padded base64 into a new buffer; -1 when malformed. */
static int unbase64(const char *s, size_t n, unsigned char **out,
                    size_t *out_n) {
  if (n % 4)
    return -1;
  unsigned char *d = xmalloc(n / 4 * 3);
  size_t k = 0;
  for (size_t i = 0; i < n; i += 4) {
    uint32_t v = 0;
    int pad = 0;
    for (int j = 0; j < 4; j++) {
      const char c = s[i + j];
      const char *p = c ? strchr(b64_alphabet, c) : NULL;
      if (c == '=' && i + 4 == n && j >= 2) {
        pad++;
        v <<= 6;
        continue;
      }
      if (p == NULL || pad) {
        free(d);
        return -1;
      }
      v = v << 6 | (uint32_t)(p - b64_alphabet);
    }
    d[k++] = (unsigned char)(v >> 16);
    if (pad < 2)
      d[k++] = (unsigned char)(v >> 8);
    if (pad < 1)
      d[k++] = (unsigned char)v;
  }
  *out = d;
  *out_n = k;
  return 0;
}

/* ---- tensors as JSON ----------------------------------------------------- */

static size_t count(int rank, const int64_t *dim) {
  size_t n = 1;
  for (int i = 0; i < rank; i++)
    n *= (size_t)dim[i];
  return n;
}

static json_t *shape_json(int rank, const int64_t *dim) {
  json_t *s = json_array();
  for (int i = 0; i < rank; i++)
    json_array_append_new(s, json_integer(dim[i]));
  return s;
}

/* Nested arrays of dim[0..rank) from *x onwards; `leaf` makes a leaf. */
static json_t *nest(const void *x, size_t esize, size_t *at, int rank,
                    const int64_t *dim, json_t *(*leaf)(const void *, int),
                    int how) {
  json_t *a = json_array();
  for (int64_t i = 0; i < dim[0]; i++) {
    if (rank == 1)
      json_array_append_new(a, leaf((const char *)x + esize * (*at)++, how));
    else
      json_array_append_new(a,
                            nest(x, esize, at, rank - 1, dim + 1, leaf, how));
  }
  return a;
}

static json_t *float_leaf(const void *p, int how) {
  (void)how;
  return json_real((double)*(const float *)p);
}

/* how: 0 true/false, 1 the integers 0/1 */
static json_t *bool_leaf(const void *p, int how) {
  int b = *(const uint8_t *)p != 0;
  return how ? json_integer(b) : json_boolean(b);
}

json_t *sh_floats_json(const float *x, int rank, const int64_t *dim,
                       sh_form_t form) {
  size_t n = count(rank, dim), at = 0;
  if (form == SH_NESTED)
    return nest(x, sizeof(float), &at, rank, dim, float_leaf, 0);
  if (form == SH_FLAT) {
    int64_t flat[1] = {(int64_t)n};
    return json_pack("{s:o,s:o}", "shape", shape_json(rank, dim), "data",
                     nest(x, sizeof(float), &at, 1, flat, float_leaf, 0));
  }
  char *b = sh_base64(x, n * sizeof(float));
  json_t *v = json_pack("{s:o,s:s,s:s}", "shape", shape_json(rank, dim),
                        "dtype", "float32", "base64", b);
  free(b);
  return v;
}

json_t *sh_mask_json(const uint8_t *x, int rank, const int64_t *dim,
                     sh_mask_form_t form) {
  size_t n = count(rank, dim), at = 0;
  int64_t flat[1] = {(int64_t)n};
  switch (form) {
  case SH_MASK_BOOLS:
  case SH_MASK_NUMBERS:
    return nest(x, 1, &at, rank, dim, bool_leaf, form == SH_MASK_NUMBERS);
  case SH_MASK_FLAT:
    return json_pack("{s:o,s:o}", "shape", shape_json(rank, dim), "data",
                     nest(x, 1, &at, 1, flat, bool_leaf, 0));
  case SH_MASK_BASE64_BOOL: {
    uint8_t *b = xcalloc(n);
    for (size_t i = 0; i < n; i++)
      b[i] = x[i] != 0;
    char *t = sh_base64(b, n);
    json_t *v = json_pack("{s:o,s:s,s:s}", "shape", shape_json(rank, dim),
                          "dtype", "bool", "base64", t);
    free(b);
    free(t);
    return v;
  }
  case SH_MASK_BASE64_F32: {
    float *f = xcalloc(n * sizeof *f);
    for (size_t i = 0; i < n; i++)
      f[i] = x[i] != 0 ? 1.0f : 0.0f;
    char *t = sh_base64(f, n * sizeof *f);
    json_t *v = json_pack("{s:o,s:s,s:s}", "shape", shape_json(rank, dim),
                          "dtype", "float32", "base64", t);
    free(f);
    free(t);
    return v;
  }
  }
  return NULL;
}

/* Fills t->data from nested arrays shaped t->dim[level..rank). */
static int unnest(const json_t *v, int level, sh_tensor_t *t, size_t *at,
                  char *why, size_t n) {
  if (!json_is_array(v) || (int64_t)json_array_size(v) != t->dim[level])
    return attnd_fail(why, n, "ragged nested tensor at level %d", level);
  for (size_t i = 0; i < json_array_size(v); i++) {
    const json_t *x = json_array_get(v, i);
    if (level + 1 < t->rank) {
      if (unnest(x, level + 1, t, at, why, n) < 0)
        return -1;
    } else if (json_is_number(x)) {
      t->data[(*at)++] = (float)json_number_value(x);
    } else {
      return attnd_fail(why, n, "a leaf is not a number");
    }
  }
  return 0;
}

int sh_tensor_decode(const json_t *v, sh_tensor_t *t, char *why, size_t n) {
  memset(t, 0, sizeof *t);
  if (json_is_array(v)) {
    t->form = SH_NESTED;
    for (const json_t *x = v; json_is_array(x); x = json_array_get(x, 0)) {
      if (t->rank == 8 || json_array_size(x) == 0)
        return attnd_fail(why, n, "nested tensor too deep or empty");
      t->dim[t->rank++] = (int64_t)json_array_size(x);
    }
    t->n = count(t->rank, t->dim);
    t->data = xmalloc(t->n * sizeof(float));
    size_t at = 0;
    if (unnest(v, 0, t, &at, why, n) < 0) {
      sh_tensor_free(t);
      return -1;
    }
    return 0;
  }
  if (!json_is_object(v))
    return attnd_fail(why, n, "a tensor is neither an array nor an object");
  const json_t *shape = json_object_get(v, "shape");
  if (!json_is_array(shape) || json_array_size(shape) > 8)
    return attnd_fail(why, n, "no shape array");
  t->rank = (int)json_array_size(shape);
  for (int i = 0; i < t->rank; i++) {
    const json_t *d = json_array_get(shape, (size_t)i);
    if (!json_is_integer(d) || json_integer_value(d) < 1)
      return attnd_fail(why, n, "shape[%d] is not a positive integer", i);
    t->dim[i] = json_integer_value(d);
  }
  t->n = count(t->rank, t->dim);
  const json_t *data = json_object_get(v, "data");
  const json_t *b64 = json_object_get(v, "base64");
  if (json_is_array(data) && b64 == NULL) {
    t->form = SH_FLAT;
    if (json_array_size(data) != t->n)
      return attnd_fail(why, n, "data has %zu elements, shape needs %zu",
                        json_array_size(data), t->n);
    t->data = xmalloc(t->n * sizeof(float));
    for (size_t i = 0; i < t->n; i++) {
      const json_t *x = json_array_get(data, i);
      if (!json_is_number(x)) {
        sh_tensor_free(t);
        return attnd_fail(why, n, "data[%zu] is not a number", i);
      }
      t->data[i] = (float)json_number_value(x);
    }
    return 0;
  }
  if (json_is_string(b64) && data == NULL) {
    t->form = SH_BASE64;
    const json_t *dt = json_object_get(v, "dtype");
    static const char *const names[] = {"float32", "float16", "bfloat16",
                                        "int32"};
    int k = dt ? -1 : 0; /* no dtype: float32 */
    for (int i = 0; dt && i < 4; i++)
      if (json_is_string(dt) && strcmp(json_string_value(dt), names[i]) == 0)
        k = i;
    if (k < 0)
      return attnd_fail(why, n,
                        "dtype is not float32, float16, bfloat16 or int32");
    const size_t size = k == 1 || k == 2 ? 2 : 4;
    unsigned char *raw;
    size_t got;
    if (unbase64(json_string_value(b64), json_string_length(b64), &raw, &got) <
        0)
      return attnd_fail(why, n, "malformed base64");
    if (got != t->n * size) {
      free(raw);
      return attnd_fail(why, n, "base64 holds %zu bytes, shape needs %zu", got,
                        t->n * size);
    }
    if (size == 2) { /* float16, bfloat16: widened, exactly */
      t->data = malloc(t->n * sizeof(float) + 1);
      for (size_t i = 0; t->data && i < t->n; i++) {
        uint32_t h = (uint32_t)raw[2 * i] | (uint32_t)raw[2 * i + 1] << 8;
        t->data[i] = k == 1 ? attnd_f16_to_f32(h) : attnd_bf16_to_f32(h);
      }
      free(raw);
      if (t->data == NULL)
        return attnd_fail(why, n, "out of memory");
      return 0;
    }
    t->data = (float *)raw;                       /* malloc'd: aligned */
    for (size_t i = 0; k == 3 && i < t->n; i++) { /* int32: as floats */
      int32_t x;
      memcpy(&x, raw + 4 * i, 4);
      t->data[i] = (float)x;
    }
    return 0;
  }
  return attnd_fail(why, n,
                    "a shaped tensor needs exactly one of data, base64");
}

void sh_tensor_free(sh_tensor_t *t) {
  free(t->data);
  memset(t, 0, sizeof *t);
}

/* ---- requests from attn_params_t ----------------------------------------- */

static json_t *ftensor(const attn_tensor_t *t, sh_form_t form) {
  return sh_floats_json(t->data, t->rank, t->dim, form);
}

json_t *sh_request_json(const attn_params_t *p, const sh_enc_t *e) {
  static const sh_enc_t zero = {0};
  if (e == NULL)
    e = &zero;
  json_t *r = json_object();
  if (e->id)
    json_object_set_new(r, "id", json_string(e->id));
  json_object_set_new(r, "query", ftensor(&p->query, e->inputs));
  if (p->key.rank)
    json_object_set_new(r, "key", ftensor(&p->key, e->inputs));
  if (p->value.rank)
    json_object_set_new(r, "value", ftensor(&p->value, e->inputs));
  json_object_set_new(r, "num_heads", json_integer(p->num_heads));
  if (p->num_kv_heads)
    json_object_set_new(r, "num_kv_heads", json_integer(p->num_kv_heads));

  static const char *const pnames[] = {"q_weight", "k_weight", "v_weight",
                                       "o_weight", "q_bias",   "k_bias",
                                       "v_bias",   "o_bias"};
  const attn_tensor_t *pt[] = {&p->q_weight, &p->k_weight, &p->v_weight,
                               &p->o_weight, &p->q_bias,   &p->k_bias,
                               &p->v_bias,   &p->o_bias};
  json_t *proj = json_object();
  for (int i = 0; i < 8; i++)
    if (pt[i]->rank)
      json_object_set_new(proj, pnames[i], ftensor(pt[i], e->weights));
  if (json_object_size(proj))
    json_object_set_new(r, "projections", proj);
  else
    json_decref(proj);

  json_t *mask = json_object();
  if (p->causal == ATTN_CAUSAL_BOTTOM_RIGHT)
    json_object_set_new(mask, "causal",
                        e->causal_bool ? json_true()
                                       : json_string("bottom_right"));
  else if (p->causal == ATTN_CAUSAL_TOP_LEFT)
    json_object_set_new(mask, "causal", json_string("top_left"));
  if (p->key_lengths.rank) {
    json_t *kl = json_array();
    const int64_t *len = p->key_lengths.data;
    for (int64_t b = 0; b < p->key_lengths.dim[0]; b++)
      json_array_append_new(kl, json_integer(len[b]));
    json_object_set_new(mask, "key_lengths", kl);
  }
  if (p->allow.rank)
    json_object_set_new(
        mask, "allow",
        sh_mask_json(p->allow.data, p->allow.rank, p->allow.dim, e->allow));
  if (p->bias.rank)
    json_object_set_new(mask, "bias", ftensor(&p->bias, e->weights));
  if (p->has_window_left || p->has_window_right) {
    json_t *w = json_object();
    if (p->has_window_left)
      json_object_set_new(w, "left", json_integer(p->window_left));
    if (p->has_window_right)
      json_object_set_new(w, "right", json_integer(p->window_right));
    json_object_set_new(mask, "window", w);
  }
  if (p->alibi == ATTN_ALIBI_DEFAULT)
    json_object_set_new(mask, "alibi", json_true());
  else if (p->alibi == ATTN_ALIBI_SLOPES)
    json_object_set_new(mask, "alibi", ftensor(&p->alibi_slopes, SH_NESTED));
  if (json_object_size(mask))
    json_object_set_new(r, "mask", mask);
  else
    json_decref(mask);

  if (p->has_scale)
    json_object_set_new(r, "scale", json_real((double)p->scale));
  if (p->has_softcap)
    json_object_set_new(r, "softcap", json_real((double)p->softcap));

  json_t *ret = json_object();
  if (p->want_weights)
    json_object_set_new(ret, "weights", json_string("per_head"));
  else if (p->want_mean_weights)
    json_object_set_new(ret, "weights", json_string("mean"));
  if (p->want_head_outputs)
    json_object_set_new(ret, "head_outputs", json_true());
  if (e->metrics_off)
    json_object_set_new(ret, "metrics", json_false());
  if (e->encoding)
    json_object_set_new(ret, "encoding", json_string(e->encoding));
  if (json_object_size(ret))
    json_object_set_new(r, "return", ret);
  else
    json_decref(ret);
  if (e->timeout_ms)
    json_object_set_new(r, "timeout_ms", json_integer(e->timeout_ms));
  return r;
}

static const char *form_name(int f) {
  return f == SH_NESTED ? "nested" : f == SH_FLAT ? "flat" : "base64";
}

/* One returned tensor against the reference. */
static int check_one(const json_t *rep, const char *name, int batched,
                     const int64_t *full, int rank, const double *ref, int form,
                     double tol, char *why, size_t n) {
  const json_t *v = json_object_get(rep, name);
  if (v == NULL)
    return attnd_fail(why, n, "the reply has no %s", name);
  sh_tensor_t t;
  char sub[160];
  if (sh_tensor_decode(v, &t, sub, sizeof sub) < 0)
    return attnd_fail(why, n, "%s: %s", name, sub);
  const int64_t *want = batched ? full : full + 1;
  int wrank = batched ? rank : rank - 1;
  int ok = t.rank == wrank;
  for (int i = 0; ok && i < wrank; i++)
    ok = t.dim[i] == want[i];
  if (!ok) {
    char a[96] = "", b[96] = "";
    for (int i = 0; i < t.rank && i < 8; i++)
      snprintf(a + strlen(a), sizeof a - strlen(a), "%s%lld", i ? "," : "",
               (long long)t.dim[i]);
    for (int i = 0; i < wrank; i++)
      snprintf(b + strlen(b), sizeof b - strlen(b), "%s%lld", i ? "," : "",
               (long long)want[i]);
    sh_tensor_free(&t);
    return attnd_fail(why, n, "%s has shape [%s], expected [%s]", name, a, b);
  }
  if (form >= 0 && (int)t.form != form) {
    int got = (int)t.form;
    sh_tensor_free(&t);
    return attnd_fail(why, n, "%s is %s, expected %s", name, form_name(got),
                      form_name(form));
  }
  double err = tu_rel_err(t.data, ref, t.n);
  float first = t.n ? t.data[0] : 0.0f;
  sh_tensor_free(&t);
  if (!(err <= tol))
    return attnd_fail(why, n,
                      "%s relative error %.3g > %.1g (first: got %.9g, "
                      "expected %.9g)",
                      name, err, tol, (double)first, ref[0]);
  return 0;
}

int sh_check_reply_ref(const ref_result_t *ref, int batched, int weights,
                       int head_outputs, const json_t *rep, int form,
                       double tol, char *why, size_t n) {
  if (!json_is_object(rep))
    return attnd_fail(why, n, "the reply is not a JSON object");
  const int64_t o_dim[3] = {ref->B, ref->Lq, ref->Eo};
  const int64_t w_dim[4] = {ref->B, ref->H, ref->Lq, ref->Lk};
  const int64_t m_dim[3] = {ref->B, ref->Lq, ref->Lk};
  const int64_t h_dim[4] = {ref->B, ref->H, ref->Lq, ref->Dv};
  int rc =
      check_one(rep, "output", batched, o_dim, 3, ref->out, form, tol, why, n);
  if (rc == 0 && weights == SH_WEIGHTS_PER_HEAD)
    rc = check_one(rep, "weights", batched, w_dim, 4, ref->weights, form, tol,
                   why, n);
  else if (rc == 0 && weights == SH_WEIGHTS_MEAN)
    rc = check_one(rep, "weights", batched, m_dim, 3, ref->mean_weights, form,
                   tol, why, n);
  else if (rc == 0 && json_object_get(rep, "weights"))
    rc = attnd_fail(why, n, "weights returned, but not asked for");
  if (rc == 0 && head_outputs)
    rc = check_one(rep, "head_outputs", batched, h_dim, 4, ref->head_outputs,
                   form, tol, why, n);
  else if (rc == 0 && json_object_get(rep, "head_outputs"))
    rc = attnd_fail(why, n, "head_outputs returned, but not asked for");
  return rc;
}

int sh_weights_mode(const attn_params_t *p) {
  return p->want_weights        ? SH_WEIGHTS_PER_HEAD
         : p->want_mean_weights ? SH_WEIGHTS_MEAN
                                : SH_WEIGHTS_NONE;
}

int sh_check_reply(const attn_params_t *p, const json_t *rep, int form,
                   double tol, char *why, size_t n) {
  ref_result_t ref;
  if (ref_attention(p, &ref) < 0)
    return attnd_fail(why, n, "the reference cannot read these params");
  int rc = sh_check_reply_ref(&ref, p->query.rank == 3, sh_weights_mode(p),
                              p->want_head_outputs, rep, form, tol, why, n);
  ref_result_free(&ref);
  return rc;
}

/* ---- metrics ------------------------------------------------------------- */

/* Whether the labels of a sample line, l[0..n) ("a=\"1\",b=\"2\""), hold
 * every label of want[0..wn) (the same form). */
static int has_labels(const char *l, size_t n, const char *want, size_t wn) {
  while (wn) {
    size_t k = 0; /* one label: up to the comma after its closing quote */
    while (k < wn && !(want[k] == ',' && k && want[k - 1] == '"'))
      k++;
    int found = 0;
    for (size_t i = 0; !found && i + k <= n; i++)
      found = (i == 0 || l[i - 1] == ',') && memcmp(l + i, want, k) == 0 &&
              (i + k == n || l[i + k] == ',');
    if (!found)
      return 0;
    want += k < wn ? k + 1 : k;
    wn -= k < wn ? k + 1 : k;
  }
  return 1;
}

double sh_metric_in(const char *text, const char *sample) {
  const char *brace = strchr(sample, '{');
  size_t name = brace ? (size_t)(brace - sample) : strlen(sample);
  const char *want = brace ? brace + 1 : "";
  size_t wn = brace ? strlen(want) - 1 : 0; /* less the closing brace */
  double sum = 0;
  int seen = 0;
  for (const char *l = text; l && *l;) {
    const char *end = strchr(l, '\n');
    if (strncmp(l, sample, name) == 0 && (l[name] == ' ' || l[name] == '{')) {
      const char *labels = l[name] == '{' ? l + name + 1 : "";
      const char *close = l[name] == '{' ? strchr(labels, '}') : labels;
      if (close && has_labels(labels, (size_t)(close - labels), want, wn)) {
        sum += strtod(l[name] == '{' ? close + 2 : l + name + 1, NULL);
        seen = 1;
      }
    }
    l = end ? end + 1 : NULL;
  }
  return seen ? sum : -1;
}

double sh_metric(int port, const char *sample) {
  sh_resp_t r;
  double v = -1;
  if (sh_get(port, "/metrics", &r) == 0 && r.status == 200)
    v = sh_metric_in(r.body, sample);
  sh_resp_free(&r);
  return v;
}

long sh_proc_status(pid_t pid, const char *field) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return -1;
  long v = -1;
  while (fgets(line, sizeof line, f))
    if (strncmp(line, field, strlen(field)) == 0)
      v = strtol(line + strlen(field), NULL, 10);
  fclose(f);
  return v;
}

int sh_proc_fds(pid_t pid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%ld/fd", (long)pid);
  DIR *d = opendir(path);
  ck_assert_msg(d != NULL, "%s", path);
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    n += e->d_name[0] >= '0' && e->d_name[0] <= '9';
  closedir(d);
  return n;
}

double sh_wait_metric(int port, const char *sample, double min,
                      double timeout_s) {
  double deadline = sh_now() + timeout_s, v;
  while ((v = sh_metric(port, sample)) < min && sh_now() < deadline)
    sleep_ms(5);
  return v;
}

char *sh_slow_body(int64_t L, int64_t E, int64_t H, uint64_t seed,
                   const json_t *extra) {
  tu_rng_t rng;
  tu_rng_seed(&rng, seed);
  size_t n = (size_t)(L * E);
  float *q = xmalloc(n * sizeof *q);
  for (size_t i = 0; i < n; i++)
    q[i] = (float)tu_rng_sym(&rng);
  int64_t dim[2] = {L, E};
  json_t *r =
      json_pack("{s:o,s:I}", "query", sh_floats_json(q, 2, dim, SH_BASE64),
                "num_heads", (json_int_t)H);
  free(q);
  if (extra)
    json_object_update(r, (json_t *)extra);
  char *txt = json_dumps(r, JSON_COMPACT);
  json_decref(r);
  if (txt == NULL)
    abort();
  return txt;
}

sh_req_t sh_attention_post(const char *body, size_t len) {
  return (sh_req_t){.method = "POST",
                    .path = "/v1/attention",
                    .content_type = "application/json",
                    .body = body,
                    .len = len};
}
