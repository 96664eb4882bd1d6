/* tools/load/options.c: attnd-load's options: one table (name, kind,
 * destination, bounds, values, default, help), from which parsing, the
 * defaults and --help all come; then the checks that make bad usage exit 2
 * before any request (a malformed --url, a relative --path, empty values,
 * options of another mode). See options.h. */
#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client.h"
#include "codec/deflate.h"
#include "codec/util.h"
#include "decode.h"
#include "gen.h"
#include "report.h"
#include "v2.h"
#include "verify.h"

#include "options.h"

enum { O_FLAG, O_STR, O_NUM, O_INT, O_ENUM, O_LIST, O_INT_LIST };

const char *const load_methods[] = {"GET", "POST", NULL};
static const char *const arrivals[] = {"uniform", "poisson", NULL};
static const char *const causals[] = {"none", "bottom_right", "top_left", NULL};
static const char *const key_lengths[] = {"none", "random", NULL};
static const char *const weights[] = {"none", "per_head", "mean", NULL};
static const char *const projections[] = {"none", "inline", NULL};
static const char *const encodings[] = {"json", "flat", "base64", NULL};
static const char *const protocols[] = {"v1", "v2", NULL};
static const char *const tensor_forms[] = {"binary", "json", NULL};
/* in the order of attnd_dtype_t */
static const char *const dtypes[] = {"float32", "float16", "bfloat16", NULL};
/* in the order of attnd_coding_t */
static const char *const compressions[] = {"none", "gzip", "deflate", NULL};
static const char *const workloads[] = {"request", "decode", NULL};
/* in the order of attn_rope_style_t */
const char *const load_ropes[] = {"none", "half", "interleaved", NULL};
static const char *const creates[] = {"post", "put", NULL};

/* Every option: its name, kind, destination, bounds, values, default and
 * help. The defaults are set by parsing `def` as if it had been given, and
 * --help prints the table, defaults included; an option without `def`
 * has one that follows from others, which its help names. */
typedef struct opt {
  const char *name, *arg;
  int kind;
  size_t off; /* of the destination in opts_t */
  double lo, hi;
  const char *const *names; /* O_ENUM */
  const char *def;          /* the default as text, or NULL */
  const char *help;
} opt_t;

#define OPT(n, a, k, f, lo, hi, names, d, h)                                   \
  { n, a, k, offsetof(opts_t, f), lo, hi, names, d, h }
static const opt_t options[] = {
    OPT("--url", "URL", O_STR, base, 0, 0, NULL, "http://127.0.0.1:8080",
        "attnd's base URL"),
    OPT("--api-key-file", "FILE", O_STR, api_key_file, 0, 0, NULL, NULL,
        "the API key (FILE's first line), sent as Authorization: Bearer; "
        "or give it in ATTND_API_KEY (no --api-key: argv shows in ps)"),
    OPT("--cacert", "FILE", O_STR, cacert, 0, 0, NULL, NULL,
        "https: trust the CA or certificate of this PEM file (a private CA, "
        "a self-signed attnd)"),
    OPT("--insecure", NULL, O_FLAG, insecure, 0, 0, NULL, NULL,
        "https: verify no certificate (for testing only: anyone in the path "
        "can read the key)"),
    OPT("--mode", "request|decode", O_ENUM, workload, 0, 0, workloads,
        "request", "decode: KV-cache sessions, a prefill then one-token steps"),
    OPT("--sessions", "N", O_INT, sessions, 1, 1 << 20, NULL, "8",
        "decode: sessions per step of the sweep"),
    OPT("--prefill", "L,...", O_INT_LIST, prefill, 1, 1 << 30, NULL, NULL,
        "decode: prefill lengths to sweep (--lengths)"),
    OPT("--steps", "S", O_INT, steps, 0, 1 << 30, NULL, "32",
        "decode: one-token steps per session after its prefill"),
    OPT("--rope", "none|half|interleaved", O_ENUM, rope, 0, 0, load_ropes,
        "none", "decode: the pre-projected sessions' rope (theta 10000)"),
    OPT("--create", "post|put", O_ENUM, create, 0, 0, creates, "post",
        "decode: POST /v1/sessions, or PUT /v1/sessions/ID with IDs drawn "
        "here"),
    OPT("--protocol", "v1|v2", O_ENUM, protocol, 0, 0, protocols, "v1",
        "v2: the Open Inference Protocol (KServe v2, Triton)"),
    OPT("--model", "NAME", O_STR, model, 0, 0, NULL, LOAD_V2_GENERIC,
        "v2: attention (inline inputs) or a loaded layer's name; decode: "
        "a layer's sessions (pre-projected without)"),
    OPT("--tensors", "binary|json", O_ENUM, tensors, 0, 0, tensor_forms,
        "binary", "v2: tensors as binary data after the JSON, or JSON data"),
    OPT("--path", "PATH", O_STR, path, 0, 0, NULL, NULL,
        "the path requested (/v1/attention; v2: /v2/models/NAME/infer); "
        "another path is fetched with GET"),
    OPT("--method", "GET|POST", O_ENUM, method, 0, 0, load_methods, NULL,
        "POST sends attention requests (POST on that path, else GET)"),
    OPT("--lengths", "L,...", O_INT_LIST, lengths, 1, 1 << 30, NULL,
        "128,512,2048", "context lengths to sweep"),
    OPT("--concurrency", "C,...", O_INT_LIST, concurrency, 1, 100000, NULL,
        "1,4", "closed loop: requests in flight"),
    OPT("--rate", "R,...", O_LIST, rate, 1e-3, 1e7, NULL, NULL,
        "open loop instead: arrivals per second"),
    OPT("--arrival", "poisson|uniform", O_ENUM, arrival, 0, 0, arrivals,
        "poisson", "open-loop gaps"),
    OPT("--connections", "N", O_INT, connections, 1, 100000, NULL, "64",
        "open loop: connections at most"),
    OPT("--warmup", "S", O_NUM, warmup, 0, 86400, NULL, "1",
        "seconds of warm-up per step, not measured"),
    OPT("--duration", "S", O_NUM, duration, 1e-3, 604800, NULL, "5",
        "measured seconds per step"),
    OPT("--requests", "N", O_INT, requests, 1, 1e15, NULL, NULL,
        "measured requests per step, instead of --duration"),
    OPT("--timeout", "S", O_NUM, timeout, 1e-3, 86400, NULL, "30",
        "a request fails S s after its intended send time"),
    OPT("--batch", "B", O_INT, batch, 1, 1 << 20, NULL, "1", "batch size"),
    OPT("--lq", "N", O_INT, lq, 1, 1 << 30, NULL, NULL,
        "query length (the swept length)"),
    OPT("--lk", "N", O_INT, lk, 1, 1 << 30, NULL, NULL,
        "key length (the swept length)"),
    OPT("--embed", "E", O_INT, embed, 1, 1 << 20, NULL, "512",
        "embedding size, H times the head size"),
    OPT("--heads", "H", O_INT, heads, 1, 1 << 20, NULL, "8", "query heads"),
    OPT("--kv-heads", "N", O_INT, kv_heads, 1, 1 << 20, NULL, NULL,
        "key/value heads, dividing H (H)"),
    OPT("--causal", "none|bottom_right|top_left", O_ENUM, causal, 0, 0, causals,
        "bottom_right", "causal mask"),
    OPT("--key-lengths", "none|random", O_ENUM, key_lengths, 0, 0, key_lengths,
        "none", "random: mask.key_lengths drawn in [1, Lk]"),
    OPT("--weights", "none|per_head|mean", O_ENUM, weights, 0, 0, weights,
        "none", "attention weights returned"),
    OPT("--projections", "none|inline", O_ENUM, projections, 0, 0, projections,
        "none", "inline: q, k, v, o weights in every request"),
    OPT("--encoding", "json|flat|base64", O_ENUM, encoding, 0, 0, encodings,
        "base64", "v1: tensors sent and returned"),
    OPT("--dtype", "float32|float16|bfloat16", O_ENUM, dtype, 0, 0, dtypes,
        "float32",
        "tensors rounded to it, sent and asked back so (v1: base64 bytes, "
        "return.dtype; v2: FP16/BF16, output_datatype)"),
    OPT("--compress", "none|gzip|deflate", O_ENUM, compress, 0, 0, compressions,
        "none", "v2: bodies compressed, and replies accepted so"),
    OPT("--cross", NULL, O_FLAG, cross, 0, 0, NULL, NULL,
        "send key and value even for self-attention"),
    OPT("--request-timeout-ms", "N", O_INT, request_timeout_ms, 1, 1e12, NULL,
        NULL, "the requests' timeout_ms (none)"),
    OPT("--seed", "N", O_INT, seed, 0, 9007199254740992.0, NULL, "1",
        "of every tensor and arrival"),
    OPT("--variants", "N", O_INT, variants, 1, 1024, NULL, "4",
        "distinct request bodies per step, sent in turn"),
    OPT("--verify", "N", O_INT, verify, 0, 1 << 20, NULL, "0",
        "check N replies per step against the core computed here"),
    OPT("--verify-threads", "N", O_INT, verify_threads, 1, 1024, NULL, NULL,
        "threads of that computation (the CPUs)"),
    OPT("--max-error-rate", "X", O_NUM, max_error_rate, 0, 1, NULL, "0",
        "exit 1 when a step's error rate is over X"),
    OPT("--out", "DIR", O_STR, out, 0, 0, NULL, ".",
        "where NAME.csv, NAME.json and NAME.svg go"),
    OPT("--name", "NAME", O_STR, name, 0, 0, NULL, "attnd-load",
        "the reports' file name, without extension"),
    OPT("--dump-body", "FILE", O_STR, dump_body, 0, 0, NULL, NULL,
        "write the first step's first body to FILE, its headers to stdout, "
        "and exit"),
    OPT("--quiet", NULL, O_FLAG, quiet, 0, 0, NULL, NULL,
        "no progress lines and no table"),
};
#define NOPTS (sizeof options / sizeof options[0])

static void print_usage(FILE *f) {
  fprintf(f, "usage: attnd-load [options]\n"
             "Sweeps every length with every concurrency (or rate); with "
             "--mode decode,\nevery prefill length with every concurrency. "
             "See docs/load-testing.md.\nOf an option given twice, the last "
             "counts (lists are comma-separated).\n");
  for (size_t i = 0; i < NOPTS; i++) {
    char left[64];
    snprintf(left, sizeof left, "%s%s%s", options[i].name,
             options[i].arg ? " " : "", options[i].arg ? options[i].arg : "");
    /* a left column too wide for its place ends its line (man pages are
     * made from this text: tools/man.sh) */
    if (strlen(left) > 34)
      fprintf(f, "  %s\n%37s", left, "");
    else
      fprintf(f, "  %-34s ", left);
    if (options[i].def)
      fprintf(f, "%s (%s)\n", options[i].help, options[i].def);
    else
      fprintf(f, "%s\n", options[i].help);
  }
  fprintf(f, "exit status: 0 passed; 1 a step over --max-error-rate, a "
             "wrong reply, replies to --verify that never came, or a decode "
             "session abandoned; 2 bad usage or a sweep that could not run; "
             "3 a sweep stopped where no later step could succeed: a failed "
             "TLS handshake, nothing answering at --url, or every reply of a "
             "step a 401 or a 404\n");
}

static int bad(const char *fmt, const char *a, const char *b) {
  fprintf(stderr, "attnd-load: ");
  fprintf(stderr, fmt, a, b);
  fprintf(stderr, "\n(attnd-load --help lists the options)\n");
  return -1;
}

/* One number of option `o` from s, within its bounds. */
static int parse_num(const opt_t *o, const char *s, int integer, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || *end || errno || !(v >= o->lo && v <= o->hi))
    return bad("%s: bad value '%s'", o->name, s);
  if (integer && v != floor(v))
    return bad("%s: '%s' is not an integer", o->name, s);
  *out = v;
  return 0;
}

/* Stores value v of option o into `opts`. */
static int set_option(opts_t *opts, const opt_t *o, const char *v) {
  char *dst = (char *)opts + o->off;
  double d;
  switch (o->kind) {
  case O_STR:
    if (*v == 0)
      return bad("%s: the value is empty%s", o->name, "");
    memcpy(dst, &v, sizeof v);
    return 0;
  case O_NUM:
    if (parse_num(o, v, 0, &d) < 0)
      return -1;
    memcpy(dst, &d, sizeof d);
    return 0;
  case O_INT: {
    if (parse_num(o, v, 1, &d) < 0)
      return -1;
    int64_t x = (int64_t)d;
    memcpy(dst, &x, sizeof x);
    return 0;
  }
  case O_ENUM:
    for (int i = 0; o->names[i]; i++)
      if (strcmp(v, o->names[i]) == 0) {
        memcpy(dst, &i, sizeof i);
        return 0;
      }
    return bad("%s: unknown value '%s'", o->name, v);
  default: { /* O_LIST, O_INT_LIST */
    list_t l = {.n = 0};
    char buf[1024];
    if (strlen(v) >= sizeof buf)
      return bad("%s: '%.40s...' is longer than 1023 characters", o->name, v);
    snprintf(buf, sizeof buf, "%s", v);
    /* split at every comma, not at runs of them (strtok): "128,,512" and
     * "128," hold an empty value, refused as a whole empty value is */
    for (char *t = buf, *comma = buf; comma; t = comma + 1) {
      if ((comma = strchr(t, ',')) != NULL)
        *comma = 0;
      if (*t == 0)
        return bad("%s: an empty value in '%s'", o->name, v);
      if (l.n == MAX_LIST)
        return bad("%s: more than 64 values in '%s'", o->name, v);
      if (parse_num(o, t, o->kind == O_INT_LIST, &l.v[l.n++]) < 0)
        return -1;
    }
    memcpy(dst, &l, sizeof l);
    return 0;
  }
  }
}

/* The name of the option stored at offset `off`. */
static const char *opt_name(size_t off) {
  for (size_t k = 0; k < NOPTS; k++)
    if (options[k].off == off)
      return options[k].name;
  return "?";
}

/* Whether the command line gave the option stored at offset `off`. */
static int given_opt(const unsigned char *given, size_t off) {
  for (size_t k = 0; k < NOPTS; k++)
    if (options[k].off == off && given[k])
      return 1;
  return 0;
}

/* With --mode decode: the options of request mode refused, the decode
 * shape derived from the rest. */
static int decode_args(opts_t *o, const unsigned char *given) {
  static const size_t request_only[] = {
      offsetof(opts_t, path),        offsetof(opts_t, method),
      offsetof(opts_t, rate),        offsetof(opts_t, arrival),
      offsetof(opts_t, connections), offsetof(opts_t, warmup),
      offsetof(opts_t, duration),    offsetof(opts_t, requests),
      offsetof(opts_t, batch),       offsetof(opts_t, lq),
      offsetof(opts_t, lk),          offsetof(opts_t, causal),
      offsetof(opts_t, key_lengths), offsetof(opts_t, weights),
      offsetof(opts_t, projections), offsetof(opts_t, cross),
      offsetof(opts_t, variants),    offsetof(opts_t, dump_body),
      offsetof(opts_t, tensors),     offsetof(opts_t, compress),
      offsetof(opts_t, dtype)};
  for (size_t k = 0; k < sizeof request_only / sizeof request_only[0]; k++)
    if (given_opt(given, request_only[k]))
      return bad("%s is an option of --mode request%s",
                 opt_name(request_only[k]), "");
  if (o->protocol != LOAD_V1)
    return bad("--mode decode: sessions are /v1's (POST /v1/sessions); "
               "--protocol v2 has none%s%s",
               "", "");
  if (given_opt(given, offsetof(opts_t, prefill)) &&
      given_opt(given, offsetof(opts_t, lengths)))
    return bad("--prefill and --lengths are the same list in --mode decode: "
               "give one%s%s",
               "", "");
  if (!given_opt(given, offsetof(opts_t, prefill)))
    o->prefill = o->lengths;
  const char *layer =
      given_opt(given, offsetof(opts_t, model)) ? o->model : NULL;
  if (layer && o->rope != ATTN_ROPE_NONE)
    return bad("--rope: layer '%s' has its own rope%s", layer, "");
  if (layer && o->verify)
    return bad("--verify: model '%s' is a layer, whose weights are on the "
               "server; only pre-projected sessions (no --model) can be "
               "verified%s",
               layer, "");
  int64_t Hkv = o->kv_heads ? o->kv_heads : o->heads;
  load_shape_t check = {
      .B = 1, .Lq = 1, .Lk = 1, .E = o->embed, .H = o->heads, .Hkv = Hkv};
  char err[512];
  if (load_gen_check(&check, err, sizeof err) < 0)
    return bad("%s%s", err, "");
  o->dshape = (load_decode_shape_t){.layer = layer,
                                    .E = o->embed,
                                    .H = o->heads,
                                    .Hkv = Hkv,
                                    .rope = (attn_rope_style_t)o->rope,
                                    .encoding = (attnd_form_t)o->encoding,
                                    .timeout_ms = o->request_timeout_ms};
  o->shape = (load_shape_t){.B = 1,
                            .Lq = 1,
                            .E = o->embed,
                            .H = o->heads,
                            .Hkv = Hkv,
                            .causal = ATTN_CAUSAL_BOTTOM_RIGHT,
                            .encoding = (attnd_form_t)o->encoding,
                            .timeout_ms = o->request_timeout_ms,
                            .protocol = LOAD_V1,
                            .model = layer};
  o->mode = LOAD_CLOSED;
  o->load = &o->concurrency;
  snprintf(o->url, sizeof o->url, "%s/v1/sessions", o->base_url); /* reports */
  return 0;
}

/* Whether `url` is a base URL that the paths can follow: http:// or
 * https://, a host (a name, an IPv4 address or an [IPv6] one, its zone as
 * %25 and a name, RFC 6874, which libcurl takes), an optional port in
 * [1, 65535] and an optional path prefix; no credentials, query,
 * fragment, space or control character. libcurl fails a malformed URL at
 * once, and the closed loop would send it again, a million times a second,
 * so it is refused here. Returns 0, or -1 with the reason on stderr. */
static int check_url(const char *url) {
  const char *q = url;
  if (strncasecmp(q, "http://", 7) == 0)
    q += 7;
  else if (strncasecmp(q, "https://", 8) == 0)
    q += 8;
  else
    return bad("--url '%s': the scheme must be http:// or https:// (such as "
               "http://127.0.0.1:8080)%s",
               url, "");
  for (const unsigned char *c = (const unsigned char *)url; *c; c++)
    if (*c <= ' ' || *c == 0x7f)
      return bad("--url '%s': a space or control character in it%s", url, "");
  size_t alen = strcspn(q, "/?#"); /* the authority */
  const char *path = q + alen, *end = q + alen;
  if (memchr(q, '@', alen))
    return bad("--url '%s': credentials (user@host) are not supported%s", url,
               "");
  const char *host = q, *host_end;
  if (*q == '[') {
    host_end = memchr(q, ']', alen);
    if (host_end == NULL)
      return bad("--url '%s': the IPv6 address has no closing ']'%s", url, "");
    const char *c = q + 1;
    for (; c < host_end && *c != '%'; c++)
      if (!isxdigit((unsigned char)*c) && *c != ':' && *c != '.')
        return bad("--url '%s': '%.1s' in the IPv6 address", url, c);
    if (c == q + 1)
      return bad("--url '%s': the IPv6 address is empty%s", url, "");
    if (c < host_end) { /* a zone (RFC 6874): "%25", then its name */
      if (strncmp(c, "%25", 3) != 0 || c + 3 == host_end)
        return bad("--url '%s': a zone is written %%25 and its name, as in "
                   "http://[fe80::1%%25eth0]:8080%s",
                   url, "");
      for (c += 3; c < host_end; c++)
        if (!isalnum((unsigned char)*c) && !strchr("-._~", *c))
          return bad("--url '%s': '%.1s' in the zone", url, c);
    }
    host_end++;
  } else {
    host_end = memchr(q, ':', alen);
    if (host_end == NULL)
      host_end = end;
    for (const char *c = q; c < host_end; c++)
      if (!isalnum((unsigned char)*c) && !strchr(".-_", *c))
        return bad("--url '%s': '%.1s' in the host name", url, c);
  }
  if (host_end == host)
    return bad("--url '%s': no host after the scheme%s", url, "");
  if (host_end < end) {
    const char *p = host_end + 1;
    long port = 0;
    if (*host_end != ':' || p == end)
      return bad("--url '%s': expected ':PORT' after the host%s", url, "");
    for (; p < end && port <= 65535; p++)
      port = isdigit((unsigned char)*p) ? port * 10 + (*p - '0') : 99999;
    if (port < 1 || port > 65535)
      return bad("--url '%s': the port is not a number in [1, 65535]%s", url,
                 "");
  }
  if (strpbrk(path, "?#"))
    return bad("--url '%s': a query or fragment cannot be followed by the "
               "request paths; give the base URL (--path sets the path)%s",
               url, "");
  return 0;
}

/* Reads the API key of --api-key-file (`file`) or of ATTND_API_KEY
 * (`env`) into o->api_key: the file's first line without its line end,
 * or the variable's whole value. A key must be one attnd can accept
 * (codec/util.h's rule, attnd's own): 1 to ATTND_AUTH_MAX_KEY letters,
 * digits and - . _ ~ + / =.
 * No message holds the key. Returns 0, or -1 with the reason on stderr. */
static int read_key(opts_t *o, const char *file, const char *env) {
  const char *what = file ? "--api-key-file" : "ATTND_API_KEY";
  char where[1100];
  snprintf(where, sizeof where, "%s%s%.1024s", what, file ? " " : "",
           file ? file : "");
  size_t n = 0;
  if (file) {
    FILE *f = fopen(file, "r");
    if (f == NULL)
      return bad("%s: %s", where, strerror(errno));
    int c; /* up to one over the longest key, to tell a longer one */
    while ((c = fgetc(f)) != EOF && c != '\n' && n < sizeof o->api_key - 1)
      o->api_key[n++] = (char)c;
    int failed = ferror(f);
    fclose(f);
    if (failed)
      return bad("%s: %s", where, "read error");
    if (n && o->api_key[n - 1] == '\r')
      n--;
  } else {
    n = strlen(env);
    if (n >= sizeof o->api_key)
      n = sizeof o->api_key - 1; /* still too long: refused below */
    memcpy(o->api_key, env, n);
  }
  o->api_key[n] = 0;
  if (n == 0)
    return bad("%s: the key is empty%s", where, "");
  if (n > ATTND_AUTH_MAX_KEY) {
    char most[32];
    snprintf(most, sizeof most, "%d", ATTND_AUTH_MAX_KEY);
    return bad("%s: the key is longer than %s characters", where, most);
  }
  size_t ok = 0;
  while (ok < n && attnd_auth_key_char((unsigned char)o->api_key[ok]))
    ok++;
  if (ok < n) {
    char pos[32];
    snprintf(pos, sizeof pos, "%zu", ok + 1);
    return bad("%s: the key has a character outside letters, digits and "
               "- . _ ~ + / =, which attnd never accepts (position %s)",
               where, pos);
  }
  o->access.api_key = o->api_key;
  return 0;
}

/* The key (--api-key-file, else ATTND_API_KEY where set and not empty)
 * and the TLS options, into o->access. Returns 0, or -1 with the reason on
 * stderr. */
static int access_args(opts_t *o) {
  const char *env = getenv("ATTND_API_KEY");
  if (o->api_key_file || (env && *env))
    if (read_key(o, o->api_key_file, env) < 0)
      return -1;
  int https = strncasecmp(o->base, "https://", 8) == 0;
  const char *tls = o->cacert ? "--cacert" : o->insecure ? "--insecure" : NULL;
  if (tls && !https)
    return bad("%s is for an https:// --url; '%s' uses no TLS", tls, o->base);
  if (o->cacert && o->insecure)
    return bad("--cacert and --insecure exclude each other (--insecure "
               "verifies nothing)%s%s",
               "", "");
  FILE *f = o->cacert ? fopen(o->cacert, "r") : NULL;
  if (o->cacert && f == NULL)
    return bad("--cacert %s: %s", o->cacert, strerror(errno));
  if (f)
    fclose(f);
  o->access.cacert = o->cacert;
  o->access.insecure = o->insecure;
  return 0;
}

/* The option of the table named `arg`, or NULL. */
static const opt_t *find_option(const char *arg) {
  for (size_t k = 0; k < NOPTS; k++)
    if (strcmp(arg, options[k].name) == 0)
      return &options[k];
  return NULL;
}

/* Parses the command line into `o`, then derives the rest. */
int load_parse_args(int argc, char **argv, opts_t *o) {
  *o = (opts_t){.method = -1};
  for (size_t k = 0; k < NOPTS; k++)
    if (options[k].def && set_option(o, &options[k], options[k].def) < 0)
      return -1; /* a bad table: the tests run --help */
  int one = 1;
  unsigned char given[NOPTS] = {0};
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      print_usage(stdout);
      exit(0);
    }
    const opt_t *opt = find_option(argv[i]);
    if (opt == NULL)
      return bad("unknown option %s%s", argv[i], "");
    given[opt - options] = 1;
    if (opt->kind == O_FLAG)
      memcpy((char *)o + opt->off, &one, sizeof one);
    else if (i + 1 >= argc)
      return bad("%s needs a value%s", argv[i], "");
    /* an option where the value should be is a value left out: taken as
     * one, "--name --quiet" wrote --quiet.csv and was not quiet */
    else if (find_option(argv[i + 1]) || strcmp(argv[i + 1], "--help") == 0 ||
             strcmp(argv[i + 1], "-h") == 0)
      return bad("%s needs a value, not the option %s", argv[i], argv[i + 1]);
    else if (set_option(o, opt, argv[++i]) < 0)
      return -1;
  }

  if (o->verify_threads == 0) {
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    o->verify_threads = c > 0 ? c : 1;
  }
  if (check_url(o->base) < 0 || access_args(o) < 0)
    return -1;
  if (strchr(o->name, '/'))
    return bad("--name '%s': a file name, without '/' (--out is the "
               "directory)%s",
               o->name, "");
  size_t bl = strlen(o->base);
  while (bl && o->base[bl - 1] == '/')
    bl--;
  snprintf(o->base_url, sizeof o->base_url, "%.*s", (int)bl, o->base);
  if (o->workload == W_DECODE)
    return decode_args(o, given);
  static const size_t decode_only[] = {
      offsetof(opts_t, sessions), offsetof(opts_t, prefill),
      offsetof(opts_t, steps), offsetof(opts_t, rope),
      offsetof(opts_t, create)};
  for (size_t k = 0; k < sizeof decode_only / sizeof decode_only[0]; k++)
    if (given_opt(given, decode_only[k]))
      return bad("%s is an option of --mode decode%s", opt_name(decode_only[k]),
                 "");
  if (o->rate.n && given_opt(given, offsetof(opts_t, concurrency)))
    return bad("--rate and --concurrency exclude each other%s%s", "", "");
  static const size_t open_only[] = {offsetof(opts_t, connections),
                                     offsetof(opts_t, arrival)};
  for (size_t k = 0; k < sizeof open_only / sizeof open_only[0]; k++)
    if (!o->rate.n && given_opt(given, open_only[k]))
      return bad("%s is an option of the open loop (--rate)%s",
                 opt_name(open_only[k]), "");
  if (o->path && (o->path[0] != '/' || strpbrk(o->path, " #\t\r\n")))
    return bad("--path '%s': a path starting with '/', with no space or "
               "'#'%s",
               o->path, "");
  /* the options of one protocol are refused with the other */
  static const struct {
    size_t off;
    int protocol;
  } only[] = {{offsetof(opts_t, model), 1},
              {offsetof(opts_t, tensors), 1},
              {offsetof(opts_t, compress), 1},
              {offsetof(opts_t, encoding), 0}};
  for (size_t k = 0; k < sizeof only / sizeof only[0]; k++)
    if (given_opt(given, only[k].off) && o->protocol != only[k].protocol)
      return bad("%s is an option of --protocol %s", opt_name(only[k].off),
                 protocols[only[k].protocol]);
  if (o->protocol == LOAD_V2 && o->path == NULL &&
      load_v2_path(o->v2_path, sizeof o->v2_path, o->model) < 0)
    return bad("--model '%s' is too long%s", o->model, "");
  const char *infer = o->protocol == LOAD_V2 ? o->v2_path : "/v1/attention";
  if (o->path == NULL)
    o->path = infer;
  o->mode = o->rate.n ? LOAD_OPEN : LOAD_CLOSED;
  o->load = o->rate.n ? &o->rate : &o->concurrency;
  if (o->method < 0)
    o->method = strcmp(o->path, infer) == 0;
  o->post = o->method == 1;
  if (!o->post && o->verify)
    return bad("--verify checks attention replies; %s is fetched with GET, "
               "whose replies it cannot check%s",
               o->path, "");
  if (o->requests)
    o->duration = 0;
  if ((size_t)snprintf(o->url, sizeof o->url, "%s%s", o->base_url, o->path) >=
      sizeof o->url)
    return bad("--url and --path make a URL over %s bytes%s", "2047", "");
  o->shape = (load_shape_t){.B = o->batch,
                            .Lq = 1,
                            .Lk = 1,
                            .E = o->embed,
                            .H = o->heads,
                            .Hkv = o->kv_heads ? o->kv_heads : o->heads,
                            .causal = (attn_causal_t)o->causal,
                            .key_lengths = o->key_lengths,
                            .weights = (load_weights_t)o->weights,
                            .projections = o->projections,
                            .encoding = (attnd_form_t)o->encoding,
                            .cross = o->cross,
                            .timeout_ms = o->request_timeout_ms,
                            .dtype = (attnd_dtype_t)o->dtype,
                            .protocol = (load_protocol_t)o->protocol,
                            .model = o->protocol == LOAD_V2 ? o->model : NULL,
                            .binary = o->tensors == 0,
                            .compress = (attnd_coding_t)o->compress};
  char err[512];
  if (o->post && load_gen_check(&o->shape, err, sizeof err) < 0)
    return bad("%s%s", err, "");
  if (o->post && o->verify && load_shape_layer(&o->shape))
    return bad("--verify: model '%s' is a layer, whose weights are on the "
               "server; only model '" LOAD_V2_GENERIC "' can be verified%s",
               o->model, "");
  return 0;
}
