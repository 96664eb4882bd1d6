/* server/config.c: the configuration table and its readers. */
#include "config.h"

#include "attn/attn.h"
#include "cgroup.h"
#include "codec/util.h"
#include "http/auth.h"
#include "http/cors.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum { T_INT, T_STR };
/* F_AUTO: accepts "auto" (held as auto_value, until resolve_auto); F_SIZE:
 * K/M/G suffixes; F_INFO and F_LIMIT: shown by GET /v1/info, at its top
 * level or under "limits";
 * F_SECRET: a value no message or printout shows; F_BOOL: on or off (also
 * true/false, yes/no, 1/0), held as 1 or 0; F_OFF: accepts "off" (as -1). */
enum {
  F_AUTO = 1,
  F_SIZE = 2,
  F_INFO = 4,
  F_LIMIT = 8,
  F_SECRET = 16,
  F_BOOL = 32,
  F_OFF = 64
};

typedef struct key {
  const char *name;
  int type;
  size_t off, size;
  const char *def;
  int64_t min, max;
  unsigned flags;
  const char *help;
  const char *const *words; /* a string key's only values, or NULL */
  /* a string key's test of its value (1: good), and what it takes, for
   * messages and --help; or NULL */
  int (*check)(const char *val);
  const char *takes;
} cfg_key_t;

#define INT_KEY(n, d, lo, hi, fl, h)                                           \
  {                                                                            \
#n, T_INT, offsetof(attnd_config_t, n), 0, d, lo, hi, fl, h, NULL, NULL,   \
        NULL                                                                   \
  }
#define STR_KEYW(n, d, fl, w, h)                                               \
  {                                                                            \
#n, T_STR, offsetof(attnd_config_t, n), sizeof(((attnd_config_t *)0)->n),  \
        d, 0, 0, fl, h, w, NULL, NULL                                          \
  }
#define STR_KEYF(n, d, fl, h) STR_KEYW(n, d, fl, NULL, h)
#define STR_KEY(n, d, h) STR_KEYF(n, d, 0, h)
/* a string key whose values check(val) accepts, described by `takes` */
#define STR_KEYC(n, d, check, takes, h)                                        \
  {                                                                            \
#n, T_STR, offsetof(attnd_config_t, n), sizeof(((attnd_config_t *)0)->n),  \
        d, 0, 0, 0, h, NULL, check, takes                                      \
  }
/* the words of a key that takes a few (NULL-terminated) */
#define WORDS(...) ((const char *const[]){__VA_ARGS__, NULL})
#define BOOL_KEY(n, d, h) INT_KEY(n, d, 0, 1, F_BOOL, h)

/* An IP literal (IPv6 with a %zone), or a host name: labels of letters,
 * digits and '-' (not at a label's ends) of 1 to 63 bytes, a final '.'
 * allowed, at most 253 bytes. What getaddrinfo could take; whether the
 * name resolves, and to an address of this machine, is known at bind. */
#define WORD "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-"
static int host_ok(const char *v) {
  unsigned char a[16];
  char ip6[INET6_ADDRSTRLEN];
  size_t zone = strcspn(v, "%");
  if (inet_pton(AF_INET, v, a) == 1)
    return 1;
  if (strchr(v, ':')) { /* IPv6, its zone an interface's name or number */
    const char *z = v + zone + (v[zone] == '%');
    if (zone >= sizeof ip6 || (v[zone] && (*z == 0 || z[strspn(z, WORD)])))
      return 0;
    memcpy(ip6, v, zone);
    ip6[zone] = 0;
    return inet_pton(AF_INET6, ip6, a) == 1;
  }
  size_t n = strlen(v);
  if (n == 0 || n > 253 + (v[n - 1] == '.'))
    return 0;
  for (const char *l = v; *l;) {
    size_t k = strspn(l, WORD);
    if (k == 0 || k > 63 || l[0] == '-' || l[k - 1] == '-' ||
        (l[k] != '.' && l[k] != 0))
      return 0;
    l += k + (l[k] == '.');
  }
  return 1;
}
#undef WORD

static const cfg_key_t keys[] = {
    STR_KEYC(host, "127.0.0.1", host_ok,
             "an IP address without brackets, or a host name: labels of "
             "letters, digits and -, at most 63 bytes each and 253 in all",
             "address to listen on (0.0.0.0 or :: for all)"),
    INT_KEY(port, "8080", 0, 65535, 0, "TCP port; 0 picks a free one"),
    INT_KEY(workers, "auto", 1, 1024, F_AUTO | F_INFO,
            "worker threads running attention; auto: CPUs / "
            "threads_per_request, or CPUs when that is auto"),
    INT_KEY(threads_per_request, "auto", 1, 256, F_AUTO | F_INFO,
            "threads one request uses (BLAS included); auto: as many CPUs "
            "as no running request holds when it starts, less one for each "
            "request starting with it, at least 1, at most "
            "max_threads_per_request"),
    INT_KEY(max_threads_per_request, "auto", 1, 256, F_AUTO | F_INFO,
            "with threads_per_request = auto, the most threads one request "
            "gets; auto: CPUs; never more than OpenMP gives a team "
            "(OMP_THREAD_LIMIT, OMP_MAX_ACTIVE_LEVELS=0)"),
    INT_KEY(queue_depth, "64", 0, 1000000, F_INFO,
            "requests that may be in flight beyond workers: waiting for a "
            "worker, or session steps waiting their session's turn; more "
            "get 429"),
    INT_KEY(http_threads, "auto", 1, ATTND_HTTP_THREADS_MAX, F_AUTO | F_INFO,
            "threads parsing requests and writing replies; auto: CPUs, at "
            "least 2"),
    INT_KEY(max_connections, "1024", 1, 1000000, 0,
            "open client connections at most"),
    INT_KEY(
        connection_timeout_s, "30", 1, 86400, 0,
        "an idle or stalled client connection is closed after this, and one "
        "that takes longer to send a request's headers"),
    INT_KEY(min_send_rate_bytes_per_s, "64K", 0, INT64_C(1) << 40, F_SIZE,
            "the slowest a client may take a reply, in bytes a second, "
            "after a grace of connection_timeout_s; a connection whose "
            "reply falls behind is closed, and the reply freed; 0: no "
            "minimum"),
    INT_KEY(min_recv_rate_bytes_per_s, "64K", 0, INT64_C(1) << 40, F_SIZE,
            "the slowest a client may send a request's body, in bytes a "
            "second, after a grace of connection_timeout_s from its "
            "headers; a connection whose body falls behind is closed, and "
            "the body freed; 0: no minimum"),
    INT_KEY(connection_buffer_bytes, "32K", 4096, 16 << 20, F_SIZE,
            "each connection's buffer for headers and body reads; "
            "libmicrohttpd zeroes all of it between requests; a request's "
            "head may fill half of it (more: 414 or 431)"),
    INT_KEY(max_body_bytes, "256M", 1024, INT64_C(1) << 40, F_SIZE | F_LIMIT,
            "largest request body; larger gets 413 before it is read"),
    INT_KEY(max_json_structure_bytes, "256K", 4096, INT64_C(1) << 40,
            F_SIZE | F_LIMIT,
            "most bytes of a body's JSON outside tensor data and long "
            "strings (what the JSON parser reads); more gets 413"),
    INT_KEY(max_response_bytes, "256M", 1024, INT64_C(1) << 40,
            F_SIZE | F_LIMIT,
            "largest reply a request may ask for; larger gets 422"),
    INT_KEY(max_batch, "1024", 1, INT64_C(1) << 30, F_LIMIT, "largest batch B"),
    INT_KEY(max_seq_len, "32768", 1, INT64_C(1) << 30, F_LIMIT,
            "longest query or key sequence, Lq and Lk"),
    INT_KEY(max_heads, "256", 1, INT64_C(1) << 20, F_LIMIT,
            "most query heads H"),
    INT_KEY(max_tensor_elements, "64M", 1, INT64_C(1) << 40, F_SIZE | F_LIMIT,
            "most elements in any one tensor, given or returned"),
    INT_KEY(max_memory_bytes, "auto", 1, INT64_C(1) << 50,
            F_AUTO | F_SIZE | F_LIMIT,
            "memory the requests in flight may hold (bodies, tensors, "
            "workspaces, replies); auto: 3/4 of the memory limit"),
    INT_KEY(max_device_memory_bytes, "auto", 0, INT64_C(1) << 50,
            F_AUTO | F_SIZE | F_LIMIT,
            "GPU memory the cuda requests in flight (their tensors, "
            "intermediates and results on the device), cuda sessions' "
            "pages and the layers' weights (held there from their load "
            "under backend auto or cuda) may hold; more waits "
            "as 429, and a request that could never fit gets 422 (auto: the "
            "cpu); 0: none, so that cuda requests are refused or computed on "
            "the cpu; auto: 9/10 of the GPU's memory, 0 without one"),
    INT_KEY(pinned_memory_bytes, "auto", 0, INT64_C(1) << 50,
            F_AUTO | F_OFF | F_SIZE,
            "page-locked host memory, pinned once at start, that requests' "
            "tensors bound for the GPU are decoded into, so that they are "
            "copied at the bus's full rate; taken out of max_memory_bytes; "
            "used only where a GPU serves (backend auto or cuda); auto: an "
            "eighth of max_memory_bytes, at most 1G, there; 0 or off: none"),
    INT_KEY(default_timeout_ms, "60000", 1, INT64_C(1) << 40, F_LIMIT,
            "deadline of a request that sets no timeout_ms"),
    INT_KEY(max_timeout_ms, "600000", 1, INT64_C(1) << 40, F_LIMIT,
            "largest timeout_ms a request may set"),
    INT_KEY(drain_timeout_s, "60", 0, 86400, 0,
            "on SIGTERM, longest wait for accepted work before exiting (0: no "
            "limit)"),
    STR_KEY(access_log, "stderr",
            "one JSON line per request to stderr, stdout, a file, or off"),
    STR_KEY(blas_coretype, "auto",
            "OpenBLAS kernel: auto (best for this CPU), library (OpenBLAS's "
            "own choice) or a core name such as SkylakeX"),
    STR_KEYW(
        backend, "cpu", 0, WORDS("auto", "cpu", "cuda"),
        "where /v1/attention and /v2 compute when a request names no backend: "
        "cpu, cuda (a CUDA=1 build on an H100/H200; refused at start "
        "where it cannot run), or auto: cuda where it runs and supports "
        "the request, else cpu (docs/cuda.md)"),
    STR_KEYW(precision, "fp32", 0, WORDS("fp32", "bf16"),
             "the cuda backend's arithmetic when a request names none: fp32, "
             "or bf16 (bfloat16 inputs, float32 accumulation), and the form "
             "the layers' weights are kept on the GPU in; the cpu computes "
             "in fp32"),
    STR_KEYF(api_keys, "", F_SECRET,
             "API keys clients send as 'Authorization: Bearer <key>', "
             "comma-separated; empty (and no api_keys_file): no keys needed"),
    STR_KEY(api_keys_file, "",
            "a file of API keys, one a line, re-read on SIGHUP"),
    STR_KEY(public_paths,
            "/healthz,/readyz,/metrics,/v2/health/live,/v2/health/ready",
            "paths that need no API key, comma-separated"),
    STR_KEY(tls_cert_file, "",
            "PEM certificate (chain) to serve HTTPS with; empty: plain HTTP"),
    STR_KEY(tls_key_file, "", "PEM private key of tls_cert_file"),
    STR_KEY(cors_allow_origins, "",
            "origins browsers may call from (CORS), comma-separated, or *; "
            "empty: no CORS headers"),
    STR_KEY(layers, "",
            "attention layers to hold: .safetensors files and model "
            "directories, comma-separated; reloaded on SIGHUP"),
    INT_KEY(inline_max_flops, "4M", 0, INT64_C(1) << 40, F_SIZE | F_INFO,
            "a request of at most this many flops is computed at once on the "
            "HTTP thread that read it, not queued for a worker (the hops "
            "cost more than its work); 0: never; cpu requests only"),
    INT_KEY(scratch_keep_bytes, "64M", 0, INT64_C(1) << 50, F_SIZE,
            "workspace a worker or HTTP thread keeps for the next request; "
            "a larger one is freed once its request is computed"),
    INT_KEY(batch_window_us, "500", 0, 1000000, F_INFO,
            "session steps of one layer are computed together, the first "
            "waiting up to this long for others while they keep arriving and "
            "nothing else waits; 0: each step alone"),
    INT_KEY(max_batch_tokens, "256", 1, INT64_C(1) << 20, F_INFO,
            "most new tokens in one batch of session steps (and at most 256 "
            "steps)"),
    INT_KEY(kv_cache_bytes, "auto", 0, INT64_C(1) << 50,
            F_AUTO | F_SIZE | F_LIMIT,
            "memory of the sessions' key/value cache, within "
            "max_memory_bytes (requests get the rest); 0: none, and a "
            "session create gets 422; auto: a quarter of it"),
    INT_KEY(session_max_tokens, "32768", 1, INT64_C(1) << 30, F_LIMIT,
            "tokens a session may hold at most (and its default max_tokens)"),
    INT_KEY(session_ttl_s, "600", 1, INT64_C(1) << 31, F_LIMIT,
            "a session's default ttl_s: it ends after this long unused"),
    INT_KEY(session_max_ttl_s, "86400", 1, INT64_C(1) << 31, F_LIMIT,
            "the largest ttl_s a session may ask for"),
    BOOL_KEY(ui, "on",
             "the page at / (and its files under /ui/): on, or off to remove "
             "it"),
};
#define NKEYS (sizeof keys / sizeof keys[0])
_Static_assert(NKEYS <= ATTND_CONFIG_KEYS_MAX, "attnd_config_load_t.from");

/* What key k holds for "auto" until resolve_auto: 0 where its range
 * starts above 0 (0 is then no value of its own), else ATTND_CONFIG_AUTO,
 * so that a literal 0 keeps its meaning (none) and is never auto. */
static int64_t auto_value(const cfg_key_t *k) {
  return k->min > 0 ? 0 : ATTND_CONFIG_AUTO;
}

static const cfg_key_t *find_key(const char *name, size_t n) {
  for (size_t i = 0; i < NKEYS; i++) {
    size_t k = strlen(keys[i].name);
    if (k != n)
      continue;
    size_t j = 0;
    for (; j < n; j++) { /* '-' in a flag is '_' in the table */
      char c = name[j] == '-' ? '_' : (char)tolower((unsigned char)name[j]);
      if (c != keys[i].name[j])
        break;
    }
    if (j == n)
      return &keys[i];
  }
  return NULL;
}

/* The values key k takes, as its bad-value message and --help state
 * them, into dst[0..size): "an integer in [lo, hi]" with the suffixes and
 * words it also takes, "on or off", or its words ("a, b or c"); "" for a
 * string key that takes any text. */
static void values_text(const cfg_key_t *k, char *dst, size_t size) {
  dst[0] = 0;
  if (k->flags & F_BOOL) {
    snprintf(dst, size, "on or off");
  } else if (k->type == T_INT) {
    snprintf(dst, size, "an integer in [%" PRId64 ", %" PRId64 "]%s%s%s",
             k->min, k->max,
             (k->flags & F_SIZE) ? ", with an optional K, M or G suffix" : "",
             (k->flags & F_AUTO) ? ", or auto" : "",
             (k->flags & F_OFF) ? ", or off" : "");
  } else if (k->takes) {
    snprintf(dst, size, "%s", k->takes);
  } else if (k->words) {
    size_t n = 0, len = 0;
    while (k->words[n])
      n++;
    for (size_t i = 0; i < n && len < size; i++)
      len += (size_t)snprintf(dst + len, size - len, "%s%s",
                              i == 0      ? ""
                              : i + 1 < n ? ", "
                                          : " or ",
                              k->words[i]);
  }
}

/* The message for a value key k does not take. Returns -1. */
static int bad_value(const cfg_key_t *k, const char *val, const char *from,
                     char *msg, size_t msz) {
  char values[160];
  values_text(k, values, sizeof values);
  return attnd_fail(msg, msz, "%s: bad value '%s' [%s]: expected %s", k->name,
                    val, from, values);
}

/* Parses `val` into key k of cfg. `from` names the source for messages. */
static int set_key(attnd_config_t *cfg, const cfg_key_t *k, const char *val,
                   const char *from, char *msg, size_t msz) {
  char *dst = (char *)cfg + k->off;
  if (k->type == T_STR) {
    if (strlen(val) >= k->size)
      return attnd_fail(
          msg, msz, "%s: %s is too long (at most %zu characters) [%s]", k->name,
          (k->flags & F_SECRET) ? "the value" : val, k->size - 1, from);
    size_t w = 0;
    while (k->words && k->words[w] && strcmp(val, k->words[w]) != 0)
      w++;
    if ((k->words && k->words[w] == NULL) || (k->check && !k->check(val)))
      return bad_value(k, val, from, msg, msz);
    memcpy(dst, val, strlen(val) + 1);
    return 0;
  }
  int64_t v = 0;
  int is_off = (k->flags & F_OFF) && strcmp(val, "off") == 0;
  if (is_off || ((k->flags & F_AUTO) && strcmp(val, "auto") == 0)) {
    v = is_off ? -1 : auto_value(k);
    memcpy(dst, &v, sizeof v);
    return 0;
  }
  if (k->flags & F_BOOL) {
    static const char *const on[] = {"on", "true", "yes", "1"}, *const off[] = {
                                                                    "off",
                                                                    "false",
                                                                    "no", "0"};
    for (int i = 0; i < 4; i++)
      if (strcasecmp(val, on[i]) == 0 || strcasecmp(val, off[i]) == 0) {
        v = strcasecmp(val, on[i]) == 0;
        memcpy(dst, &v, sizeof v);
        return 0;
      }
    return bad_value(k, val, from, msg, msz);
  }
  /* digits, after a '-' at most: strtoll would also skip space and '+' */
  int digit = isdigit((unsigned char)val[val[0] == '-']);
  errno = 0;
  char *end = (char *)val;
  long long x = digit ? strtoll(val, &end, 10) : 0;
  int64_t mult = 1;
  if ((k->flags & F_SIZE) && *end && !end[1]) {
    switch (toupper((unsigned char)*end)) {
    case 'K':
      mult = 1 << 10;
      break;
    case 'M':
      mult = 1 << 20;
      break;
    case 'G':
      mult = 1 << 30;
      break;
    }
    if (mult > 1)
      end++;
  }
  if (end == val || *end || errno || __builtin_mul_overflow(x, mult, &v) ||
      v < k->min || v > k->max)
    return bad_value(k, val, from, msg, msz);
  memcpy(dst, &v, sizeof v);
  return 0;
}

/* set_key, noting in `how` where the key was set. */
static int set_key_from(attnd_config_t *cfg, attnd_config_load_t *how,
                        const cfg_key_t *k, const char *val, const char *from,
                        char *msg, size_t msz) {
  if (set_key(cfg, k, val, from, msg, msz) < 0)
    return -1;
  snprintf(how->from[k - keys], sizeof how->from[0], "%s", from);
  return 0;
}

/* Where the key `name` was set, for a message: its source, or "default". */
static const char *origin(const attnd_config_load_t *how, const char *name) {
  const char *from = how->from[find_key(name, strlen(name)) - keys];
  return from[0] ? from : "default";
}

static char *trim(char *s) {
  while (isspace((unsigned char)*s))
    s++;
  char *e = s + strlen(s);
  while (e > s && isspace((unsigned char)e[-1]))
    *--e = 0;
  return s;
}

/* A value as written after '=' (leading space already skipped), in place:
 * unquoted, it ends at '#' and loses its trailing space; quoted ("..."), it
 * keeps every byte, with the escapes \" \\ \n \r \t and \xHH (not
 * \x00), and only space or a comment may follow the closing quote. Returns
 * the value, or NULL with a message. */
static char *read_value(char *s, const char *from, char *msg, size_t msz) {
  if (*s != '"') {
    s[strcspn(s, "#")] = 0;
    return trim(s);
  }
  char *w = s, *r = s + 1;
  for (;; r++) {
    unsigned char c = (unsigned char)*r;
    if (c == 0 || c == '\n') {
      attnd_fail(msg, msz, "%s: the quoted value has no closing quote", from);
      return NULL;
    }
    if (c == '"')
      break;
    if (c == '\\') {
      static const char plain[] = "\"\\nrt", with[] = "\"\\\n\r\t";
      const char *e = r[1] ? strchr(plain, r[1]) : NULL;
      int hi, lo;
      if (e) {
        c = (unsigned char)with[e - plain];
        r++;
      } else if (r[1] == 'x' && (hi = attnd_hex_digit(r[2])) >= 0 &&
                 (lo = attnd_hex_digit(r[3])) >= 0) {
        /* a value is a C string: a NUL would end it there unseen, so \x00
         * is named as such, not as an escape unknown by its form */
        if ((hi | lo) == 0) {
          attnd_fail(msg, msz,
                     "%s: '\\x00' in a quoted value: a value cannot hold a "
                     "NUL byte",
                     from);
          return NULL;
        }
        c = (unsigned char)(hi << 4 | lo);
        r += 3;
      } else {
        attnd_fail(msg, msz,
                   "%s: bad escape '\\%.1s' in a quoted value (known: \\\" "
                   "\\\\ \\n \\r \\t \\xHH but \\x00)",
                   from, r + 1);
        return NULL;
      }
    }
    *w++ = (char)c;
  }
  char *rest = r + 1;
  *w = 0;
  rest = trim(rest);
  if (*rest != 0 && *rest != '#') {
    attnd_fail(msg, msz, "%s: unexpected '%.20s' after the quoted value", from,
               rest);
    return NULL;
  }
  return s;
}

/* Reads the next line of f, without its '\n', into line[0..cap) and
 * NUL-terminates it; *len is its length, NUL bytes in it included, so that
 * a caller sees them (strlen(line) < *len). Returns 1, 0 at the end of the
 * file, or -1 for a line of cap bytes or more (read no further). */
static int read_line(FILE *f, char *line, size_t cap, size_t *len) {
  size_t n = 0;
  int c;
  while ((c = getc(f)) != EOF && c != '\n') {
    if (n + 1 >= cap)
      return -1;
    line[n++] = (char)c;
  }
  line[n] = 0;
  *len = n;
  return c == EOF && n == 0 ? 0 : 1;
}

/* name, for a message, with every byte outside printable ASCII as \xHH:
 * a key is ASCII, so such a byte is what made it unknown, and an invisible
 * one (a byte order mark) would hide it. */
static void escape_text(char *dst, size_t size, const char *name) {
  size_t n = 0;
  for (const unsigned char *c = (const unsigned char *)name; *c && n + 5 < size;
       c++)
    n += (size_t)snprintf(dst + n, size - n,
                          *c < 0x20 || *c > 0x7e ? "\\x%02x" : "%c", *c);
  dst[n] = 0;
}

/* Reads "key = value" lines (read_value has the value's forms); a line
 * whose first non-space character is '#' is a comment. A UTF-8 byte order
 * mark may open the file; a NUL byte anywhere is refused, and so is a key
 * set twice (the second would silently win). */
static int load_file(attnd_config_t *cfg, attnd_config_load_t *how,
                     const char *path, char *msg, size_t msz) {
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return attnd_fail(msg, msz, "config: cannot read %s: %s", path,
                      strerror(errno));
  /* room for the longest value with every byte escaped (\xHH) */
  char line[4 * sizeof(((attnd_config_t *)0)->api_keys) + 64], from[600];
  size_t lineno = 0, len, set_at[NKEYS] = {0};
  int r = 0, got;
  while (r == 0 && (got = read_line(f, line, sizeof line, &len)) != 0) {
    lineno++;
    snprintf(from, sizeof from, "%s:%zu", path, lineno);
    if (got < 0) {
      r = attnd_fail(msg, msz, "%s: a line longer than %zu bytes", from,
                     sizeof line - 1);
      break;
    }
    if (strlen(line) < len) {
      r = attnd_fail(msg, msz, "%s: a NUL byte at column %zu", from,
                     strlen(line) + 1);
      break;
    }
    char *s = line;
    if (lineno == 1 && strncmp(s, "\xef\xbb\xbf", 3) == 0)
      s += 3;
    s += strspn(s, " \t\r\n\v\f");
    char *eq = strchr(s, '=');
    size_t hash = strcspn(s, "#");
    if (eq == NULL || (size_t)(eq - s) > hash) {
      s[hash] = 0;
      if (*trim(s) == 0)
        continue;
      r = attnd_fail(msg, msz, "%s: expected 'key = value', got '%s'", from, s);
      break;
    }
    *eq = 0;
    char *name = trim(s);
    char *val = read_value(eq + 1 + strspn(eq + 1, " \t\v\f"), from, msg, msz);
    if (val == NULL) {
      r = -1;
      break;
    }
    const cfg_key_t *k = find_key(name, strlen(name));
    if (k == NULL) {
      char shown[256];
      escape_text(shown, sizeof shown, name);
      r = attnd_fail(msg, msz, "%s: unknown key '%s'", from, shown);
    } else if (set_at[k - keys]) {
      r = attnd_fail(msg, msz, "%s: set again [%s]: first set at line %zu",
                     k->name, from, set_at[k - keys]);
    } else {
      set_at[k - keys] = lineno;
      r = set_key_from(cfg, how, k, val, from, msg, msz);
    }
  }
  /* a directory opens, and reads as an error, not as an empty file */
  if (r == 0 && ferror(f))
    r = attnd_fail(msg, msz, "config: cannot read %s: %s", path,
                   strerror(errno));
  fclose(f);
  return r;
}

static void set_defaults(attnd_config_t *cfg) {
  char msg[256];
  memset(cfg, 0, sizeof *cfg);
  for (size_t i = 0; i < NKEYS; i++)
    set_key(cfg, &keys[i], keys[i].def, "default", msg, sizeof msg);
}

/* threads_per_request stays 0 (auto: decided as each request starts,
 * sched/scheduler.h), and pinned_memory_bytes auto where no GPU serves
 * (none here; it prints as auto, for another host); the rest become
 * numbers. */
static void resolve_auto(attnd_config_t *cfg, int cores) {
  cfg->cores = cores > 0 ? cores : 1;
  if (cfg->max_threads_per_request == 0)
    cfg->max_threads_per_request = cfg->cores;
  if (cfg->workers == 0) {
    cfg->workers = cfg->threads_per_request
                       ? cfg->cores / cfg->threads_per_request
                       : cfg->cores;
    if (cfg->workers < 1)
      cfg->workers = 1;
  }
  if (cfg->http_threads == 0)
    cfg->http_threads = cores < 2 ? 2 : cores;
  if (cfg->max_memory_bytes == 0)
    cfg->max_memory_bytes = attnd_cgroup_memory() / 4 * 3;
  if (cfg->kv_cache_bytes == ATTND_CONFIG_AUTO)
    cfg->kv_cache_bytes = cfg->max_memory_bytes / 4;
  attn_cuda_info_t ci;
  attn_cuda_info(&ci); /* in a CUDA build, this probes the GPU */
  if (cfg->max_device_memory_bytes == ATTND_CONFIG_AUTO)
    cfg->max_device_memory_bytes =
        ci.usable ? (int64_t)(ci.memory_bytes / 10 * 9) : 0;
  if (cfg->pinned_memory_bytes == ATTND_CONFIG_AUTO && ci.usable &&
      strcmp(cfg->backend, "cpu") != 0) {
    int64_t eighth = cfg->max_memory_bytes / 8, most = INT64_C(1) << 30;
    cfg->pinned_memory_bytes = eighth < most ? eighth : most;
  }
}

/* The flags that are not keys, for the parser and --help: a flag with an
 * argument (--config) is read before the rest; the others set the int of
 * attnd_config_load_t at `off`, and one that reads no configuration
 * (`alone`: --help, --version) ends the loading at once, so that it
 * answers whatever the file, environment or other flags hold. */
typedef struct cli_flag {
  const char *name, *alias, *arg;
  size_t off;
  int alone;
  const char *help;
} cli_flag_t;

static const cli_flag_t cli_flags[] = {
    {"--config", NULL, "FILE", 0, 0,
     "the config file to read (else ATTND_CONFIG's, else none)"},
    {"--print-config", NULL, NULL, offsetof(attnd_config_load_t, print_config),
     0, "print the effective configuration in the file's format, and exit"},
    {"--help", "-h", NULL, offsetof(attnd_config_load_t, help), 1,
     "print this text and exit (also -h)"},
    {"--version", NULL, NULL, offsetof(attnd_config_load_t, version), 1,
     "print the version and exit"},
};

static const cli_flag_t *cli_flag(const char *a) {
  for (size_t i = 0; i < sizeof cli_flags / sizeof cli_flags[0]; i++)
    if (strcmp(a, cli_flags[i].name) == 0 ||
        (cli_flags[i].alias && strcmp(a, cli_flags[i].alias) == 0))
      return &cli_flags[i];
  return NULL;
}

/* The lists the security modules parse at start (api_keys, public_paths,
 * cors_allow_origins: http/auth.h, http/cors.h), checked by those same
 * parsers, and the TLS pair: a bad one stops attnd as any bad value does,
 * at once, with exit status 2 and its source, not at start after the
 * layers load. The files they name are read at start. Returns 0, or -1
 * with msg. */
static int check_security(const attnd_config_t *cfg,
                          const attnd_config_load_t *how, char *msg,
                          size_t msz) {
  const char *key = NULL;
  attnd_keyset_t *set = NULL;
  attnd_cors_t cors = {0};
  if (attnd_keyset_parse(&set, cfg->api_keys, ',', "api_keys", msg, msz) < 0)
    key = "api_keys";
  else if (attnd_auth_check_paths(cfg->public_paths, msg, msz) < 0)
    key = "public_paths";
  else if (attnd_cors_init(&cors, cfg->cors_allow_origins, msg, msz) < 0)
    key = "cors_allow_origins";
  attnd_keyset_free(set);
  attnd_cors_free(&cors);
  if (key) {
    size_t n = strlen(msg);
    snprintf(msg + n, msz - n, " [%s]", origin(how, key));
    return -1;
  }
  int cert = cfg->tls_cert_file[0] != 0;
  if (cert != (cfg->tls_key_file[0] != 0))
    return attnd_fail(msg, msz,
                      "tls_cert_file and tls_key_file go together: %s [%s] "
                      "is set, %s is not",
                      cert ? "tls_cert_file" : "tls_key_file",
                      origin(how, cert ? "tls_cert_file" : "tls_key_file"),
                      cert ? "tls_key_file" : "tls_cert_file");
  return 0;
}

int attnd_config_load(attnd_config_t *cfg, attnd_config_load_t *how, int argc,
                      char **argv, char **envp, int cores, char *msg,
                      size_t msz) {
  memset(how, 0, sizeof *how);
  set_defaults(cfg);

  for (int i = 1; i < argc; i++) { /* --help, --version: nothing read */
    const cli_flag_t *o = cli_flag(argv[i]);
    if (o && o->alone) {
      *(int *)((char *)how + o->off) = 1;
      return 0;
    }
  }
  /* The file first: its path comes from --config, else ATTND_CONFIG. A
   * --config without one is refused, not served on the defaults. */
  const char *path = NULL, *path_from = "flag --config";
  for (int i = 1; i < argc; i++) {
    const char *p = strcmp(argv[i], "--config") == 0
                        ? (i + 1 < argc ? argv[++i] : "")
                    : strncmp(argv[i], "--config=", 9) == 0 ? argv[i] + 9
                                                            : NULL;
    if (p && *p == 0)
      return attnd_fail(msg, msz, "flag --config needs a value: a file");
    if (p)
      path = p;
  }
  for (char **e = envp; path == NULL && e && *e; e++)
    if (strncmp(*e, "ATTND_CONFIG=", 13) == 0 && (*e)[13])
      path = *e + 13, path_from = "ATTND_CONFIG";
  /* a cut path would name another file, or a directory */
  if (path && strlen(path) >= sizeof how->path)
    return attnd_fail(msg, msz,
                      "config: the path is too long (at most %zu bytes) [%s]",
                      sizeof how->path - 1, path_from);
  if (path)
    memcpy(how->path, path, strlen(path) + 1);
  if (how->path[0] && load_file(cfg, how, how->path, msg, msz) < 0)
    return -1;

  /* ATTND_<KEY>. Kubernetes adds service links for a Service named attnd
   * (ATTND_SERVICE_HOST, ATTND_PORT_8080_TCP, ..., and ATTND_PORT itself,
   * which collides with the port key); those names are left alone, and any
   * other unknown ATTND_ name is reported, as it is likely a misspelt key. */
  for (char **e = envp; e && *e; e++) {
    if (strncmp(*e, "ATTND_", 6) != 0)
      continue;
    const char *name = *e + 6, *eq = strchr(name, '=');
    if (eq == NULL)
      continue;
    const cfg_key_t *k = find_key(name, (size_t)(eq - name));
    char from[64];
    snprintf(from, sizeof from, "ATTND_%.*s", (int)(eq - name), name);
    if (k == NULL) {
      if (strncmp(name, "SERVICE_", 8) && strncmp(name, "PORT_", 5) &&
          strncmp(name, "CONFIG=", 7) && strncmp(name, "BLAS_REEXEC=", 12))
        fprintf(stderr, "attnd: ignoring %s: not a configuration key\n", from);
      continue;
    }
    if (set_key_from(cfg, how, k, eq + 1, from, msg, msz) < 0) {
      if (strncmp(eq + 1, "tcp://", 6) == 0)
        snprintf(msg + strlen(msg), msz - strlen(msg),
                 " (a Kubernetes service link for a Service named attnd? set "
                 "enableServiceLinks: false in the pod spec)");
      return -1;
    }
  }

  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const cli_flag_t *o = cli_flag(a);
    if (o && o->arg) { /* --config FILE, read above */
      i++;
      continue;
    }
    if (o) {
      *(int *)((char *)how + o->off) = 1;
      continue;
    }
    if (strncmp(a, "--config=", 9) == 0)
      continue;
    if (strncmp(a, "--", 2) != 0)
      return attnd_fail(msg, msz, "unexpected argument '%s' (see --help)", a);
    const char *name = a + 2, *eq = strchr(name, '=');
    size_t n = eq ? (size_t)(eq - name) : strlen(name);
    const cfg_key_t *k = find_key(name, n);
    if (k == NULL)
      return attnd_fail(msg, msz, "unknown flag '--%.*s' (see --help)", (int)n,
                        name);
    const char *val = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
    if (val == NULL)
      return attnd_fail(msg, msz, "%s: flag --%.*s needs a value", k->name,
                        (int)n, name);
    char from[64];
    snprintf(from, sizeof from, "flag --%.*s", (int)n, name);
    if (set_key_from(cfg, how, k, val, from, msg, msz) < 0)
      return -1;
  }
  if (check_security(cfg, how, msg, msz) < 0)
    return -1;
  if (cfg->session_ttl_s > cfg->session_max_ttl_s)
    return attnd_fail(msg, msz,
                      "session_ttl_s: %" PRId64
                      " [%s] is above session_max_ttl_s %" PRId64 " [%s]",
                      cfg->session_ttl_s, origin(how, "session_ttl_s"),
                      cfg->session_max_ttl_s, origin(how, "session_max_ttl_s"));
  if (cfg->default_timeout_ms > cfg->max_timeout_ms)
    return attnd_fail(msg, msz,
                      "default_timeout_ms: %" PRId64
                      " [%s] is above max_timeout_ms %" PRId64 " [%s]",
                      cfg->default_timeout_ms,
                      origin(how, "default_timeout_ms"), cfg->max_timeout_ms,
                      origin(how, "max_timeout_ms"));
  if (strcmp(cfg->backend, "cuda") == 0) {
    attn_cuda_info_t ci;
    attn_cuda_info(&ci);
    if (!ci.usable)
      return attnd_fail(msg, msz, "backend: cuda [%s] cannot run here: %s",
                        origin(how, "backend"), ci.status);
  }
  resolve_auto(cfg, cores);
  if (cfg->kv_cache_bytes >= cfg->max_memory_bytes)
    return attnd_fail(msg, msz,
                      "kv_cache_bytes: %" PRId64
                      " [%s] leaves nothing of max_memory_bytes %" PRId64
                      " [%s] to requests",
                      cfg->kv_cache_bytes, origin(how, "kv_cache_bytes"),
                      cfg->max_memory_bytes, origin(how, "max_memory_bytes"));
  if (cfg->pinned_memory_bytes > 0 &&
      cfg->kv_cache_bytes + cfg->pinned_memory_bytes >= cfg->max_memory_bytes)
    return attnd_fail(
        msg, msz,
        "pinned_memory_bytes: %" PRId64 " [%s] with kv_cache_bytes %" PRId64
        " [%s] leaves nothing of max_memory_bytes %" PRId64 " [%s] to requests",
        cfg->pinned_memory_bytes, origin(how, "pinned_memory_bytes"),
        cfg->kv_cache_bytes, origin(how, "kv_cache_bytes"),
        cfg->max_memory_bytes, origin(how, "max_memory_bytes"));
  return 0;
}

/* s with the config file's escapes (read_value reads them back): '"', '\\',
 * and control bytes, so that no value can end its line or forge another. */
static void print_escaped(FILE *f, const char *s) {
  for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
    const char *e = strchr("\"\\\n\r\t", *c);
    if (e)
      fprintf(f, "\\%c", "\"\\nrt"[e - "\"\\\n\r\t"]);
    else if (*c < 0x20 || *c == 0x7f)
      fprintf(f, "\\x%02x", *c);
    else
      fputc(*c, f);
  }
}

/* In place of a secret's line, a comment: how many keys, where they were
 * set, how to give them again, and what the file does without them. The
 * line of the key is left out, so that the file still loads, and keys given
 * again by the environment or a flag take effect over it. */
/* The entries a list of keys holds (" , " holds none). */
static int key_count(const char *p) {
  int n = 0;
  for (const char *c = p; *c; c++)
    n += *c != ',' && *c != ' ' && (c == p || c[-1] == ',' || c[-1] == ' ');
  return n;
}

static void print_secret(const attnd_config_t *cfg,
                         const attnd_config_load_t *how, const cfg_key_t *k,
                         const char *p, FILE *f) {
  int n = key_count(p);
  fprintf(f, "# %s: %d key%s", k->name, n, n == 1 ? "" : "s");
  if (how && how->from[k - keys][0]) {
    fputs(", set by ", f);
    print_escaped(f, how->from[k - keys]);
  }
  char env[64], flag[64]; /* ATTND_API_KEYS, --api-keys */
  size_t j = 0;
  for (; k->name[j] && j < sizeof env - 7; j++) {
    env[j] = (char)toupper((unsigned char)k->name[j]);
    flag[j] = k->name[j] == '_' ? '-' : k->name[j];
  }
  env[j] = flag[j] = 0;
  fprintf(f,
          ", not echoed. Give %s again: ATTND_%s, --%s, or one a line in "
          "api_keys_file.\n# Without %s, this file %s.\n",
          n == 1 ? "it" : "them", env, flag, n == 1 ? "it" : "them",
          cfg->api_keys_file[0] ? "accepts only the keys of api_keys_file"
                                : "needs no key");
}

void attnd_config_print(const attnd_config_t *cfg,
                        const attnd_config_load_t *how, FILE *f) {
  for (size_t i = 0; i < NKEYS; i++) {
    const cfg_key_t *k = &keys[i];
    const char *p = (const char *)cfg + k->off;
    /* a list of no key ("," say) holds no secret: it prints as empty */
    if (k->type == T_STR && (k->flags & F_SECRET) && key_count(p) == 0) {
      fprintf(f, "%s = \"\"\n", k->name);
    } else if (k->type == T_STR && (k->flags & F_SECRET)) {
      print_secret(cfg, how, k, p, f);
    } else if (k->type == T_STR) {
      fprintf(f, "%s = \"", k->name);
      print_escaped(f, p);
      fputs("\"\n", f);
    } else {
      int64_t v;
      memcpy(&v, p, sizeof v);
      if (k->flags & F_BOOL)
        fprintf(f, "%s = %s\n", k->name, v ? "on" : "off");
      else if ((k->flags & F_AUTO) && v == auto_value(k))
        fprintf(f, "%s = auto\n", k->name);
      else if ((k->flags & F_OFF) && v == -1)
        fprintf(f, "%s = off\n", k->name);
      else
        fprintf(f, "%s = %" PRId64 "\n", k->name, v);
    }
  }
}

/* One option line of --help: a flag too wide for its column ends its
 * line (man pages are made from this text: tools/man.sh). */
static void usage_flag(FILE *f, const char *flag) {
  if (strlen(flag) > 24)
    fprintf(f, "  %s\n%27s", flag, "");
  else
    fprintf(f, "  %-24s ", flag);
}

void attnd_config_usage(FILE *f) {
  fprintf(f,
          "usage: attnd [--config FILE] [--print-config] [--KEY VALUE]...\n\n"
          "Each key is also read from the config file and from ATTND_<KEY>;\n"
          "flags override the environment, which overrides the file;\n"
          "of a flag given twice, the last counts.\n\n");
  for (size_t i = 0; i < sizeof cli_flags / sizeof cli_flags[0]; i++) {
    char flag[64];
    snprintf(flag, sizeof flag, "%s%s%s", cli_flags[i].name,
             cli_flags[i].arg ? " " : "",
             cli_flags[i].arg ? cli_flags[i].arg : "");
    usage_flag(f, flag);
    fprintf(f, "%s\n", cli_flags[i].help);
  }
  for (size_t i = 0; i < NKEYS; i++) {
    char flag[64], values[160];
    snprintf(flag, sizeof flag, "--%s", keys[i].name);
    for (char *c = flag; *c; c++)
      if (*c == '_')
        *c = '-';
    usage_flag(f, flag);
    values_text(&keys[i], values, sizeof values);
    fprintf(f, "%s (default %s%s%s)\n", keys[i].help,
            keys[i].def[0] ? keys[i].def : "\"\"", values[0] ? "; " : "",
            values);
  }
  fprintf(f, "\nexit status: 0 after --help, --version or --print-config, or "
             "once drained; 1 when the start fails (the address, a layer, "
             "TLS, a key or access_log file) or a drain outlasts "
             "drain_timeout_s; 2 for a bad flag or "
             "value (the message on stderr)\n");
}

void attnd_config_info(const attnd_config_t *cfg, int limits,
                       void (*fn)(const char *key, int64_t value, void *arg),
                       void *arg) {
  unsigned want = limits ? F_LIMIT : F_INFO;
  for (size_t i = 0; i < NKEYS; i++)
    if (keys[i].type == T_INT && (keys[i].flags & want)) {
      int64_t v;
      memcpy(&v, (const char *)cfg + keys[i].off, sizeof v);
      fn(keys[i].name,
         (keys[i].flags & F_AUTO) && v == auto_value(&keys[i]) && !limits ? -1
                                                                          : v,
         arg);
    }
}

int attnd_config_team_limit(attnd_config_t *cfg, const attnd_config_load_t *how,
                            int limit, const char *why, char *msg, size_t msz) {
  if (why == NULL || limit < 1)
    return 0;
  if (cfg->threads_per_request > limit)
    return attnd_fail(msg, msz,
                      "threads_per_request: %" PRId64
                      " [%s] is above the %d thread%s OpenMP gives a team "
                      "(%s)",
                      cfg->threads_per_request,
                      origin(how, "threads_per_request"), limit,
                      limit == 1 ? "" : "s", why);
  if (cfg->max_threads_per_request > limit)
    cfg->max_threads_per_request = limit;
  return 0;
}

int attnd_config_plan_threads(const attnd_config_t *cfg) {
  if (cfg->threads_per_request)
    return (int)cfg->threads_per_request;
  return (int)(cfg->max_threads_per_request < cfg->cores
                   ? cfg->max_threads_per_request
                   : cfg->cores);
}
