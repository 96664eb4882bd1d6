/* tests/check_metrics.c: server/metrics.c, without a server, and then
 * /metrics of a real attnd.
 *
 * Observations recorded with attnd_metrics_ran and attnd_metrics_observe,
 * and read back from
 * attnd_metrics_render's text (tests/server_harness.c's sh_metric_in):
 *   - the sums, in seconds, of many short observations (a session step
 *     computes in a few microseconds, an inline request waits less than
 *     one): each counted whole, not cut to a whole microsecond, in the
 *     histograms' _sum, attnd_backend_compute_seconds_total and
 *     attnd_backend_stage_seconds_total;
 *   - the buckets: a value on a bound counted in that bucket, one past the
 *     last bound in +Inf only, the buckets cumulative and +Inf equal to
 *     _count;
 *   - the statuses: every status of the error table (errors.h), under /v1
 *     and OIP, is a label of its own, never "other".
 * And the whole exposition, read by a strict reader of the text format
 * (version 0.0.4, written here from Prometheus' description of it, with
 * the rules attnd keeps beside it: every family has its HELP and TYPE,
 * counters end in _total), which fails on any line that breaks one:
 * the reader itself on a table of expositions that each break one rule,
 * then on attnd_metrics_render's text after observations of every kind;
 * and in the "scrape" case, on a real attnd after mixed traffic (/v1 and
 * its errors, a layer, sessions, the Open Inference Protocol, API keys
 * missing and wrong), with its Content-Type; there no series is born of
 * what clients sent (paths, model names, session ids, keys), no counter
 * goes back, every request is counted once, and the gauges are back at
 * rest once every request is answered. In the "paths" case, one request
 * down each path of a request's life (each status attnd answers, a client
 * that leaves while uploading, queued or computing, deadlines in the queue
 * and in a run, sessions), each between two scrapes of the whole
 * exposition: exactly the counters docs/operations.md names move, by
 * exactly what it says, and no other. The reload families, each for what
 * is configured alone, count its refusals and keep its last success's
 * time. In the "process" case, the process collector's families of a real
 * attnd against what the test reads of it from outside (its start, its
 * descriptors, its soft limit on them), and attnd_build_info against
 * `attnd --version`.
 * No timings are asserted. */
#include <check.h>
#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "attn/attn.h"
#include "config.h"
#include "errors.h"
#include "layer_files.h"
#include "metrics.h"
#include "server_harness.h"
#include "suite.h"

/* ---- a strict reader of the text format ----------------------------------
 */

/* One series of an exposition: its sample name with its labels sorted by
 * name ("name{a=\"x\",b=\"y\"}", the values escaped as sent), its
 * family's type and its value. */
typedef struct prom_series {
  char *key;
  char type[16];
  double value;
} prom_series_t;

/* One histogram's series of a label set (le aside): what its buckets have
 * said so far. */
typedef struct prom_hist {
  char *key; /* family{labels without le} */
  double last_le, last_count, inf_count, count;
  int buckets, closed, has_count, has_sum;
} prom_hist_t;

typedef struct prom {
  prom_series_t *series;
  size_t n, cap;
} prom_t;

static void prom_free(prom_t *p) {
  for (size_t i = 0; i < p->n; i++)
    free(p->series[i].key);
  free(p->series);
  memset(p, 0, sizeof *p);
}

static void *grow(void *v, size_t *cap, size_t need, size_t size) {
  if (need <= *cap)
    return v;
  *cap = need * 2 + 16;
  v = realloc(v, *cap * size);
  if (v == NULL)
    abort();
  return v;
}

/* The length of a valid UTF-8 sequence at s, or 0. */
static size_t utf8_len(const unsigned char *s) {
  if (s[0] < 0x80)
    return 1;
  size_t n = s[0] >= 0xc2 && s[0] <= 0xdf   ? 2
             : s[0] >= 0xe0 && s[0] <= 0xef ? 3
             : s[0] >= 0xf0 && s[0] <= 0xf4 ? 4
                                            : 0;
  for (size_t i = 1; i < n; i++)
    if ((s[i] & 0xc0) != 0x80)
      return 0;
  if ((n == 3 && s[0] == 0xe0 && s[1] < 0xa0) ||
      (n == 3 && s[0] == 0xed && s[1] >= 0xa0) ||
      (n == 4 && s[0] == 0xf0 && s[1] < 0x90) ||
      (n == 4 && s[0] == 0xf4 && s[1] >= 0x90))
    return 0;
  return n;
}

/* The length of a metric name ([a-zA-Z_:][a-zA-Z0-9_:]*) or, without
 * colons, a label name, at s; 0 where none starts. */
static size_t name_len(const char *s, int colon) {
  size_t n = 0;
  while (isalpha((unsigned char)s[n]) || s[n] == '_' ||
         (colon && s[n] == ':') || (n > 0 && isdigit((unsigned char)s[n])))
    n++;
  return n;
}

/* A sample's value: a decimal float, +Inf, -Inf or NaN (Go's ParseFloat
 * takes more, hexadecimal among them; attnd writes none of it). */
static int parse_value(const char *s, size_t n, double *v) {
  if ((n == 4 && strncmp(s, "+Inf", 4) == 0) ||
      (n == 4 && strncmp(s, "-Inf", 4) == 0)) {
    *v = s[0] == '-' ? -INFINITY : INFINITY;
    return 0;
  }
  if (n == 3 && strncmp(s, "NaN", 3) == 0) {
    *v = NAN;
    return 0;
  }
  size_t i = s[0] == '-' || s[0] == '+', digits = 0;
  while (i < n && isdigit((unsigned char)s[i]))
    i++, digits++;
  if (i < n && s[i] == '.')
    for (i++; i < n && isdigit((unsigned char)s[i]); i++)
      digits++;
  if (digits == 0)
    return -1;
  if (i < n && (s[i] == 'e' || s[i] == 'E')) {
    i += i + 1 < n && (s[i + 1] == '-' || s[i + 1] == '+');
    size_t e = ++i;
    while (i < n && isdigit((unsigned char)s[i]))
      i++;
    if (i == e)
      return -1;
  }
  if (i != n)
    return -1;
  char buf[64];
  if (n >= sizeof buf)
    return -1;
  memcpy(buf, s, n);
  buf[n] = 0;
  *v = strtod(buf, NULL);
  return 0;
}

typedef struct label {
  char name[64];
  char *value; /* as sent, escapes kept */
  size_t len;
} label_t;

static int label_cmp(const void *a, const void *b) {
  return strcmp(((const label_t *)a)->name, ((const label_t *)b)->name);
}

static int str_cmp(const void *a, const void *b) {
  return strcmp(((const prom_series_t *)a)->key,
                ((const prom_series_t *)b)->key);
}

/* Writes "name{labels}" into a new string, the labels sorted, without
 * `skip` (NULL: none). */
static char *series_key(const char *name, size_t nlen, const label_t *l,
                        size_t nl, const char *skip) {
  size_t len = nlen + 3;
  for (size_t i = 0; i < nl; i++)
    len += strlen(l[i].name) + l[i].len + 4;
  char *k = malloc(len);
  if (k == NULL)
    abort();
  size_t at = (size_t)snprintf(k, len, "%.*s{", (int)nlen, name);
  int first = 1;
  for (size_t i = 0; i < nl; i++) {
    if (skip && strcmp(l[i].name, skip) == 0)
      continue;
    at += (size_t)snprintf(k + at, len - at, "%s%s=\"%.*s\"", first ? "" : ",",
                           l[i].name, (int)l[i].len, l[i].value);
    first = 0;
  }
  snprintf(k + at, len - at, "}");
  return k;
}

/* What is known of the families met so far, in order. */
typedef struct family {
  char name[128];
  char type[16];
  int help, closed; /* closed: its first sample has been read */
} family_t;

/* Writes "line N: " and the rule broken into why[0..wn). */
static void __attribute__((format(printf, 4, 5)))
say(char *why, size_t wn, int line, const char *fmt, ...) {
  int o = snprintf(why, wn, "line %d: ", line);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why + o, wn - (size_t)o, fmt, ap);
  va_end(ap);
}

#define PROM_FAIL(...)                                                         \
  do {                                                                         \
    say(why, wn, line, __VA_ARGS__);                                           \
    goto fail;                                                                 \
  } while (0)

/* Reads `text`, a whole exposition in the Prometheus text format 0.0.4,
 * into p (every sample's series), and checks every rule: UTF-8, \n line
 * endings and a last \n; HELP (its text escaping only backslash and \n)
 * and TYPE (counter, gauge, histogram, summary or untyped) at most once a
 * family, both before its first sample and the family's lines together;
 * names and label names by their grammar, label names unrepeated and none
 * reserved (__), label values escaping only backslash, double quote and
 * \n; a value a float; no series twice. attnd's own rules beside them:
 * every family has HELP and TYPE, a counter's name ends in _total and its
 * value is a number >= 0. A histogram has only _bucket, _sum and _count
 * samples; each label set's buckets have le, sorted ascending and counted
 * cumulatively, the last +Inf and equal to _count, and a _sum. Returns 0,
 * or -1 with the line and the rule broken in why[0..wn) (p is freed). */
static int prom_read(const char *text, prom_t *p, char *why, size_t wn) {
  family_t fam[256];
  size_t nfam = 0, cur = (size_t)-1;
  prom_hist_t *hist = NULL;
  size_t nhist = 0, hcap = 0;
  int line = 0;
  memset(p, 0, sizeof *p);
  why[0] = 0;
  size_t tlen = strlen(text);
  for (size_t i = 0; i < tlen;) {
    size_t u = utf8_len((const unsigned char *)text + i);
    if (u == 0 || i + u > tlen) {
      line = 1;
      for (size_t k = 0; k < i; k++)
        line += text[k] == '\n';
      PROM_FAIL("not UTF-8 at byte %zu", i);
    }
    i += u;
  }
  if (tlen == 0 || text[tlen - 1] != '\n')
    PROM_FAIL("the text does not end with a line feed");
  for (const char *l = text; *l;) {
    const char *end = strchr(l, '\n');
    size_t n = (size_t)(end - l);
    line++;
    if (memchr(l, '\r', n))
      PROM_FAIL("a carriage return: lines end with \\n alone");
    const char *fname = NULL; /* the family this line belongs to */
    size_t flen = 0;
    const char *kind = NULL; /* "HELP" or "TYPE" */
    const char *rest = NULL;
    int is_sample = 0;
    char sname[160];
    size_t snlen = 0;
    label_t labels[16];
    size_t nl = 0;
    double value = 0;
    if (n == 0) {
      l = end + 1;
      continue; /* empty lines are ignored */
    }
    if (l[0] == '#') {
      const char *c = l + 1;
      while (*c == ' ' || *c == '\t')
        c++;
      if (strncmp(c, "HELP", 4) != 0 && strncmp(c, "TYPE", 4) != 0) {
        l = end + 1;
        continue; /* a plain comment */
      }
      kind = c;
      c += 4;
      if (*c != ' ' && *c != '\t')
        PROM_FAIL("%.4s without a metric name", kind);
      while (*c == ' ' || *c == '\t')
        c++;
      flen = name_len(c, 1);
      if (flen == 0 || flen >= sizeof fam[0].name)
        PROM_FAIL("%.4s: not a metric name: %.40s", kind, c);
      fname = c;
      rest = c + flen;
      if (rest < end && *rest != ' ' && *rest != '\t')
        PROM_FAIL("%.4s: not a metric name: %.*s", kind, (int)(end - c), c);
      while (rest < end && (*rest == ' ' || *rest == '\t'))
        rest++;
    } else {
      is_sample = 1;
      const char *c = l;
      snlen = name_len(c, 1);
      if (snlen == 0 || snlen >= sizeof sname)
        PROM_FAIL("not a metric name: %.40s", c);
      memcpy(sname, c, snlen);
      sname[snlen] = 0;
      c += snlen;
      if (*c == '{') {
        c++;
        while (*c != '}') {
          while (*c == ' ' || *c == '\t')
            c++;
          if (*c == '}')
            break;
          size_t ln = name_len(c, 0);
          if (ln == 0 || ln >= sizeof labels[0].name)
            PROM_FAIL("not a label name: %.40s", c);
          if (nl == sizeof labels / sizeof labels[0])
            PROM_FAIL("more than %zu labels", nl);
          memcpy(labels[nl].name, c, ln);
          labels[nl].name[ln] = 0;
          if (strncmp(c, "__", 2) == 0)
            PROM_FAIL("label name %s is reserved (__)", labels[nl].name);
          for (size_t k = 0; k < nl; k++)
            if (strcmp(labels[k].name, labels[nl].name) == 0)
              PROM_FAIL("label %s twice", labels[nl].name);
          c += ln;
          while (*c == ' ' || *c == '\t')
            c++;
          if (*c++ != '=')
            PROM_FAIL("label %s without '='", labels[nl].name);
          while (*c == ' ' || *c == '\t')
            c++;
          if (*c++ != '"')
            PROM_FAIL("label %s: its value is not quoted", labels[nl].name);
          labels[nl].value = (char *)c;
          while (c < end && *c != '"') {
            if (*c == '\\') {
              if (c[1] != '\\' && c[1] != '"' && c[1] != 'n')
                PROM_FAIL("label %s: the escape \\%c (only \\\\, \\\" and \\n)",
                          labels[nl].name, c[1]);
              c++;
            }
            c++;
          }
          if (c >= end)
            PROM_FAIL("label %s: its value is not closed", labels[nl].name);
          labels[nl].len = (size_t)(c - labels[nl].value);
          nl++;
          c++;
          while (*c == ' ' || *c == '\t')
            c++;
          if (*c == ',')
            c++;
          else if (*c != '}')
            PROM_FAIL("labels: ',' or '}' expected at %.20s", c);
        }
        c++;
      }
      if (*c != ' ' && *c != '\t')
        PROM_FAIL("no space before the value: %.*s", (int)n, l);
      while (*c == ' ' || *c == '\t')
        c++;
      const char *v = c;
      while (c < end && *c != ' ' && *c != '\t')
        c++;
      if (parse_value(v, (size_t)(c - v), &value) < 0)
        PROM_FAIL("not a float: '%.*s'", (int)(c - v), v);
      while (c < end && (*c == ' ' || *c == '\t'))
        c++;
      if (c < end) { /* a timestamp: an integer of milliseconds */
        const char *t = c + (*c == '-');
        if (t == end)
          PROM_FAIL("not a timestamp: %.*s", (int)(end - c), c);
        for (; t < end; t++)
          if (!isdigit((unsigned char)*t))
            PROM_FAIL("not a timestamp: %.*s", (int)(end - c), c);
      }
      /* its family: a histogram's or summary's by suffix, else its own */
      fname = sname;
      flen = snlen;
      static const char *const sfx[] = {"_bucket", "_sum", "_count"};
      for (int k = 0; k < 3; k++) {
        size_t sl = strlen(sfx[k]);
        if (snlen <= sl || strcmp(sname + snlen - sl, sfx[k]) != 0)
          continue;
        for (size_t f = 0; f < nfam; f++)
          if (strlen(fam[f].name) == snlen - sl &&
              strncmp(fam[f].name, sname, snlen - sl) == 0 &&
              (strcmp(fam[f].type, "histogram") == 0 ||
               (k > 0 && strcmp(fam[f].type, "summary") == 0)))
            flen = snlen - sl;
      }
    }
    /* the family: met before only if it is the current one */
    size_t f = 0;
    while (f < nfam && !(strlen(fam[f].name) == flen &&
                         strncmp(fam[f].name, fname, flen) == 0))
      f++;
    if (f < nfam && f != cur)
      PROM_FAIL("family %s again, after other families' lines", fam[f].name);
    if (f == nfam) {
      if (nfam == sizeof fam / sizeof fam[0])
        PROM_FAIL("more than %zu families", nfam);
      memset(&fam[nfam], 0, sizeof fam[0]);
      memcpy(fam[nfam].name, fname, flen);
      nfam++;
    }
    cur = f;
    family_t *F = &fam[f];
    if (kind && strncmp(kind, "HELP", 4) == 0) {
      if (F->help)
        PROM_FAIL("a second HELP for %s", F->name);
      if (F->closed)
        PROM_FAIL("HELP for %s after its samples", F->name);
      for (const char *c = rest; c < end; c++)
        if (*c == '\\') {
          if (c[1] != '\\' && c[1] != 'n')
            PROM_FAIL("HELP %s: the escape \\%c (only \\\\ and \\n)", F->name,
                      c[1]);
          c++;
        }
      F->help = 1;
    } else if (kind) {
      static const char *const types[] = {"counter", "gauge", "histogram",
                                          "summary", "untyped"};
      size_t tn = (size_t)(end - rest);
      while (tn && (rest[tn - 1] == ' ' || rest[tn - 1] == '\t'))
        tn--;
      int ok = 0;
      for (int k = 0; k < 5; k++)
        ok |= strlen(types[k]) == tn && strncmp(rest, types[k], tn) == 0;
      if (!ok)
        PROM_FAIL("TYPE %s: no such type '%.*s'", F->name, (int)tn, rest);
      if (F->type[0])
        PROM_FAIL("a second TYPE for %s", F->name);
      if (F->closed)
        PROM_FAIL("TYPE for %s after its samples", F->name);
      memcpy(F->type, rest, tn);
      F->type[tn] = 0;
    } else if (is_sample) {
      if (!F->type[0] || !F->help)
        PROM_FAIL("%s: no %s before its samples (attnd gives every family "
                  "both)",
                  F->name, F->type[0] ? "HELP" : "TYPE");
      F->closed = 1;
      qsort(labels, nl, sizeof labels[0], label_cmp);
      p->series = grow(p->series, &p->cap, p->n + 1, sizeof p->series[0]);
      prom_series_t *S = &p->series[p->n++];
      S->key = series_key(sname, snlen, labels, nl, NULL);
      snprintf(S->type, sizeof S->type, "%s", F->type);
      S->value = value;
      if (strcmp(F->type, "counter") == 0) {
        size_t fl = strlen(F->name);
        if (fl < 6 || strcmp(F->name + fl - 6, "_total") != 0)
          PROM_FAIL("counter %s: its name does not end in _total", F->name);
        if (!(value >= 0) || isinf(value))
          PROM_FAIL("counter %s: value %g", S->key, value);
      }
      if (strcmp(F->type, "histogram") == 0) {
        const char *suffix = sname + strlen(F->name);
        int bucket = strcmp(suffix, "_bucket") == 0;
        if (!bucket && strcmp(suffix, "_sum") != 0 &&
            strcmp(suffix, "_count") != 0)
          PROM_FAIL("histogram %s: a sample %s (only _bucket, _sum, _count)",
                    F->name, sname);
        const label_t *le = NULL;
        for (size_t k = 0; k < nl; k++)
          if (strcmp(labels[k].name, "le") == 0)
            le = &labels[k];
        if (bucket != (le != NULL))
          PROM_FAIL("%s: %s", S->key,
                    bucket ? "a bucket without le" : "le outside a bucket");
        char *hk = series_key(F->name, strlen(F->name), labels, nl, "le");
        size_t h = 0;
        while (h < nhist && strcmp(hist[h].key, hk) != 0)
          h++;
        if (h == nhist) {
          hist = grow(hist, &hcap, nhist + 1, sizeof hist[0]);
          memset(&hist[nhist], 0, sizeof hist[0]);
          hist[nhist++].key = hk;
        } else {
          free(hk);
        }
        prom_hist_t *H = &hist[h];
        if (bucket) {
          double b;
          if (parse_value(le->value, le->len, &b) < 0 || isnan(b))
            PROM_FAIL("%s: le is not a bound", S->key);
          if (H->closed)
            PROM_FAIL("%s: a bucket after +Inf", S->key);
          if (H->buckets && !(b > H->last_le))
            PROM_FAIL("%s: le not above the previous bucket's %g", S->key,
                      H->last_le);
          if (H->buckets && value < H->last_count)
            PROM_FAIL("%s: %g, below the previous bucket's %g: buckets are "
                      "cumulative",
                      S->key, value, H->last_count);
          H->last_le = b;
          H->last_count = value;
          H->buckets++;
          if (isinf(b)) {
            H->closed = 1;
            H->inf_count = value;
          }
        } else if (suffix[1] == 's') {
          H->has_sum = 1;
        } else {
          H->has_count = 1;
          H->count = value;
        }
      }
    }
    l = end + 1;
  }
  for (size_t h = 0; h < nhist; h++) {
    const prom_hist_t *H = &hist[h];
    if (!H->closed)
      PROM_FAIL("histogram %s: no +Inf bucket", H->key);
    if (!H->has_count || !H->has_sum)
      PROM_FAIL("histogram %s: no %s", H->key,
                H->has_count ? "_sum" : "_count");
    if (H->count != H->inf_count)
      PROM_FAIL("histogram %s: _count %g, the +Inf bucket %g", H->key, H->count,
                H->inf_count);
  }
  for (size_t k = 0; k < nfam; k++)
    if (!fam[k].help || !fam[k].type[0])
      PROM_FAIL("%s: %s without %s", fam[k].name, fam[k].help ? "HELP" : "TYPE",
                fam[k].help ? "TYPE" : "HELP");
  qsort(p->series, p->n, sizeof p->series[0], str_cmp);
  for (size_t k = 1; k < p->n; k++)
    if (strcmp(p->series[k - 1].key, p->series[k].key) == 0)
      PROM_FAIL("the series %s twice", p->series[k].key);
  for (size_t h = 0; h < nhist; h++)
    free(hist[h].key);
  free(hist);
  return 0;
fail:
  for (size_t h = 0; h < nhist; h++)
    free(hist[h].key);
  free(hist);
  prom_free(p);
  return -1;
}

/* The value of the series `key` (as prom_read writes it) in p, or NAN. */
static double prom_get(const prom_t *p, const char *key) {
  prom_series_t k = {.key = (char *)key};
  const prom_series_t *s =
      bsearch(&k, p->series, p->n, sizeof p->series[0], str_cmp);
  return s ? s->value : NAN;
}

/* Reads text with prom_read, failing the test on a broken rule. */
static void prom_assert(const char *text, prom_t *p) {
  char why[512];
  ck_assert_msg(prom_read(text, p, why, sizeof why) == 0, "/metrics: %s", why);
}

/* Expositions that each break one rule, and the words of the reason. */
static const struct {
  const char *text, *why;
} bad_texts[] = {
    {"# HELP a_total A.\n# TYPE a_total counter\na_total 1", "line feed"},
    {"# HELP a A.\n# TYPE a gauge\na 1\r\n", "carriage return"},
    {"# HELP a A\xff.\n# TYPE a gauge\na 1\n", "not UTF-8"},
    {"# HELP a A.\n# HELP a A.\n# TYPE a gauge\na 1\n", "second HELP"},
    {"# HELP a A.\n# TYPE a gauge\n# TYPE a gauge\na 1\n", "second TYPE"},
    {"# HELP a A.\na 1\n# TYPE a gauge\n", "no TYPE before"},
    {"# TYPE a gauge\na 1\n", "no HELP before"},
    {"# HELP a A.\n# TYPE a gauge\na 1\n# HELP a again\n", "second HELP"},
    {"# HELP a A.\n# TYPE a gauge\na{x=\"1\"} 1\n# HELP b B.\n# TYPE b "
     "gauge\nb 1\na{x=\"2\"} 2\n",
     "again, after other"},
    {"# HELP a A.\n# TYPE a gauge\na 1\n# HELP b B.\n", "b: HELP without TYPE"},
    {"# HELP a A.\n# TYPE a gauge\na{x=\"1\"} 1\na{x=\"1\"} 2\n", "twice"},
    {"# HELP a A.\n# TYPE a gauge\na{x=\"1\",y=\"2\"} 1\na{y=\"2\",x=\"1\"} "
     "2\n",
     "twice"},
    {"# HELP a A.\n# TYPE a gauge\na{x=\"1\",x=\"2\"} 1\n", "label x twice"},
    {"# HELP a A.\n# TYPE a gauge\na{__x=\"1\"} 1\n", "reserved"},
    {"# HELP a A.\n# TYPE a gauge\na{x=\"a\\tb\"} 1\n", "escape \\t"},
    {"# HELP a A.\n# TYPE a gauge\na{x=\"a\"b\"} 1\n", "',' or '}'"},
    {"# HELP a A.\n# TYPE a gauge\na{x=\"ab} 1\n", "not closed"},
    {"# HELP a A.\n# TYPE a gauge\na{1x=\"a\"} 1\n", "not a label name"},
    {"# HELP a A \\t.\n# TYPE a gauge\na 1\n", "HELP a: the escape"},
    {"# HELP a A.\n# TYPE a meter\na 1\n", "no such type"},
    {"# HELP a A.\n# TYPE a gauge\na 1.2.3\n", "not a float"},
    {"# HELP a A.\n# TYPE a gauge\na 0x10\n", "not a float"},
    {"# HELP a A.\n# TYPE a gauge\na1\n", "no space"},
    {"# HELP a A.\n# TYPE a gauge\na 1 12:00\n", "not a timestamp"},
    {"# HELP a A.\n# TYPE a counter\na 1\n", "does not end in _total"},
    {"# HELP a_total A.\n# TYPE a_total counter\na_total -1\n", "value -1"},
    {"# HELP h H.\n# TYPE h histogram\nh{le=\"1\"} 1\n", "only _bucket"},
    {"# HELP h H.\n# TYPE h histogram\nh_bucket 1\nh_sum 1\nh_count 1\n",
     "without le"},
    {"# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\n"
     "h_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",
     "cumulative"},
    {"# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"2\"} 1\n"
     "h_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",
     "not above"},
    {"# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\n"
     "h_count 1\n",
     "no +Inf"},
    {"# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\n"
     "h_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 3\n",
     "_count 3, the +Inf bucket 2"},
    {"# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_count 2\n",
     "no _sum"},
    {"# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"+Inf\"} 1\n"
     "h_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",
     "after +Inf"},
    {"# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"x\"} 1\nh_sum 1\n"
     "h_count 1\n",
     "not a bound"},
    {"# HELP h H.\n# TYPE h histogram\nh_sum{le=\"1\"} 1\n", "le outside"},
};

/* The reader refuses each broken exposition for its own reason, and takes
 * the rules' edges: escapes, a timestamp, comments, empty lines, a
 * histogram per label set. */
START_TEST(test_reader_refuses) {
  prom_t p;
  char why[512];
  for (size_t k = 0; k < sizeof bad_texts / sizeof bad_texts[0]; k++) {
    ck_assert_msg(prom_read(bad_texts[k].text, &p, why, sizeof why) < 0,
                  "taken: %s", bad_texts[k].text);
    ck_assert_msg(strstr(why, bad_texts[k].why) != NULL,
                  "'%s' refused for '%s', not '%s'", bad_texts[k].text, why,
                  bad_texts[k].why);
  }
  static const char good[] =
      "# a comment\n\n"
      "# HELP a A \\\\ and \\n.\n# TYPE a gauge\n"
      "a{x=\"q\\\"\\\\\\n\",y=\"\"} -1.5e-3 1700000000000\na NaN\n"
      "# HELP c_total C.\n# TYPE c_total counter\nc_total{k=\"1\",} 2\n"
      "# HELP h H.\n# TYPE h histogram\n"
      "h_bucket{p=\"1\",le=\"0.5\"} 1\nh_bucket{p=\"1\",le=\"+Inf\"} 3\n"
      "h_sum{p=\"1\"} 4\nh_count{p=\"1\"} 3\n"
      "h_bucket{p=\"2\",le=\"+Inf\"} 0\nh_sum{p=\"2\"} 0\nh_count{p=\"2\"} 0\n";
  ck_assert_msg(prom_read(good, &p, why, sizeof why) == 0, "%s", why);
  ck_assert_uint_eq(p.n, 10);
  ck_assert_double_eq(prom_get(&p, "c_total{k=\"1\"}"), 2);
  ck_assert_double_eq(prom_get(&p, "h_count{p=\"1\"}"), 3);
  ck_assert_double_eq(prom_get(&p, "a{x=\"q\\\"\\\\\\n\",y=\"\"}"), -1.5e-3);
  prom_free(&p);
}
END_TEST

/* attnd_metrics_render's text after observations of every kind, by every
 * protocol and backend, at every context length, with every gauge set,
 * keeps every rule. */
START_TEST(test_render_reads) {
  attnd_metrics_t *m = attnd_metrics_new();
  ck_assert_ptr_nonnull(m);
  const double stage_ms[3] = {0.25, 1.5, 0.125};
  static const int64_t ctx[] = {1, 128, 129, 4000, 32768, 1 << 20};
  for (int p = 0; p < ATTND_PROTO_COUNT; p++) {
    attnd_metrics_request(m, (attnd_protocol_t)p, 200);
    attnd_metrics_request(m, (attnd_protocol_t)p, 299);
    for (size_t c = 0; c < sizeof ctx / sizeof ctx[0]; c++)
      for (int b = 0; b < 2; b++) {
        attnd_metrics_ran(m, b, 1, 3.0 * (double)c, stage_ms);
        attnd_metrics_waited(m, (attnd_protocol_t)p, ctx[c], 0.0004);
        attnd_metrics_observe(m, (attnd_protocol_t)p, ctx[c], 3.0 * (double)c,
                              7e4 * (double)c);
      }
  }
  for (int k = 0; k < ATTND_REJECT_COUNT; k++)
    attnd_metrics_reject(m, (attnd_reject_t)k);
  attnd_gauges_t g = {.queue_depth = 3,
                      .busy_workers = 2,
                      .workers = 4,
                      .inflight = 5,
                      .sessions = 7,
                      .kv_bytes_used = 4096,
                      .kv_bytes_free = 1 << 20,
                      .kv_device_bytes_used = 10,
                      .kv_device_bytes_held = 30,
                      .evicted_lru = 1,
                      .batches = 2,
                      .batched_steps = 5,
                      .memory_limit = 1 << 30,
                      .memory_held = 1 << 20,
                      .device_total = 80ull << 30,
                      .pinned_served = 3};
  attnd_buf_t b;
  attnd_buf_init(&b);
  attnd_metrics_render(m, &g, &b);
  ck_assert(!b.oom);
  attnd_buf_append(&b, "", 1);
  prom_t p;
  prom_assert(b.data, &p);
  ck_assert_double_eq(
      prom_get(&p, "attnd_requests_total{protocol=\"other\",status=\"other\"}"),
      1);
  ck_assert_double_eq(
      prom_get(&p, "attnd_rejections_total{reason=\"slow_reader\"}"), 1);
  ck_assert_double_eq(
      prom_get(&p, "attnd_request_seconds_count{ctx=\"+Inf\",protocol=\"v2\"}"),
      2);
  ck_assert_double_eq(prom_get(&p, "attnd_kv_device_bytes{state=\"kept\"}"),
                      20);
  prom_free(&p);
  attnd_buf_free(&b);
  attnd_metrics_free(m);
}
END_TEST

/* ---- a real attnd, after mixed traffic ------------------------------------
 */

#define SCRAPE_KEY "metrics-test-key"

static sh_server_t srv;
static char layer_dir[64], layer_file[128];

/* Starts srv with a layer "blk." (torch's MultiheadAttention, E 16, four
 * heads), an API key, and `args`. */
static void start_with(const char *const *args) {
  char msg[512];
  snprintf(layer_dir, sizeof layer_dir, "/tmp/attnd-metrics-XXXXXX");
  if (mkdtemp(layer_dir) == NULL)
    ck_abort_msg("mkdtemp");
  snprintf(layer_file, sizeof layer_file, "%s/blk.safetensors", layer_dir);
  static const lf_shape_t shape = {.E = 16, .H = 4};
  const char *meta[] = {"num_heads", "4", NULL};
  if (lf_write(layer_file, LF_TORCH_MHA, ATTND_ST_F32, "blk.", &shape, 5, meta,
               NULL, msg, sizeof msg) < 0)
    ck_abort_msg("%s", msg);
  const char *all[20] = {"--layers", layer_file, "--api-keys", SCRAPE_KEY};
  for (int i = 0; args[i] && i < 15; i++)
    all[4 + i] = args[i];
  if (sh_server_start(&srv, all) < 0)
    ck_abort_msg("attnd did not start:\n%s", srv.log);
}

/* Unchecked setups: for the "scrape" case, a small max_body_bytes for a
 * 413; for the "batch" case, one worker, no step computed inline and a
 * window of 20 ms, so that concurrent session steps wait behind the one
 * computing and are computed together. */
static void start_server(void) {
  static const char *const args[] = {"--workers", "2", "--max-body-bytes",
                                     "4096", NULL};
  start_with(args);
}

static void start_batch_server(void) {
  static const char *const args[] = {"--workers",
                                     "1",
                                     "--inline-max-flops",
                                     "0",
                                     "--batch-window-us",
                                     "20000",
                                     "--max-batch-tokens",
                                     "8192",
                                     NULL};
  start_with(args);
}

static void stop_server(void) {
  sh_server_stop(&srv, 15.0);
  unlink(layer_file);
  rmdir(layer_dir);
}

/* One request with the key (key 1), a key that is not one (2), or none
 * (0); returns its status and keeps its body in out (may be NULL). */
static long call(const char *method, const char *path, const char *body,
                 const char *ctype, int key, char **out) {
  const char *hdr[] = {key == 1 ? "Authorization: Bearer " SCRAPE_KEY
                                : "Authorization: Bearer not-" SCRAPE_KEY,
                       NULL};
  sh_client_t c;
  sh_client_init(&c, srv.port);
  sh_req_t q = {.method = method,
                .path = path,
                .content_type =
                    body ? (ctype ? ctype : "application/json") : NULL,
                .body = body,
                .len = body ? strlen(body) : 0,
                .headers = key ? hdr : NULL};
  sh_resp_t r;
  ck_assert_msg(sh_http(&c, &q, &r) == 0, "%s %s: %s", method, path, r.error);
  long st = r.status;
  if (out)
    *out = strdup(r.body);
  sh_resp_free(&r);
  sh_client_free(&c);
  return st;
}

/* The hidden states of n tokens of the layer (E 16), as JSON. */
static void tokens(char *s, size_t cap, int n) {
  size_t at = (size_t)snprintf(s, cap, "[");
  for (int t = 0; t < n; t++)
    for (int e = 0; e < 16; e++)
      at += (size_t)snprintf(s + at, cap - at, "%s%s%g", e ? "," : "",
                             e ? "" : (t ? "],[" : "["),
                             0.125 * (double)((t * 16 + e) % 7) - 0.375);
  snprintf(s + at, cap - at, "]]");
}

/* Every kind of traffic a client can send, each with its expected status;
 * returns how many requests it sent, less the probes (protocol other,
 * status 200, as the scrapes are: answered() leaves those out). The
 * session ids, paths and model names it makes up are new each time
 * (`round`). */
static int traffic(int round) {
  char q[4096], body[8192], path[160], *rep = NULL;
  int n = 0;
#define EXPECT(st, ...)                                                        \
  do {                                                                         \
    long got_ = call(__VA_ARGS__);                                             \
    n++;                                                                       \
    ck_assert_msg(got_ == (st), "line %d: %ld, not %d", __LINE__, got_, (st)); \
  } while (0)
  EXPECT(200, "GET", "/healthz", NULL, NULL, 0, NULL);
  EXPECT(200, "GET", "/readyz", NULL, NULL, 0, NULL);
  n -= 2;
  EXPECT(200, "POST", "/v1/attention",
         "{\"query\":[[0.5,-1],[2,0.25]],\"num_heads\":2}", NULL, 1, NULL);
  EXPECT(401, "POST", "/v1/attention",
         "{\"query\":[[0.5,-1],[2,0.25]],\"num_heads\":2}", NULL, 0, NULL);
  EXPECT(401, "GET", "/v1/info", NULL, NULL, 2, NULL);
  EXPECT(400, "POST", "/v1/attention", "{\"query\":", NULL, 1, NULL);
  EXPECT(422, "POST", "/v1/attention", "{\"num_heads\":2}", NULL, 1, NULL);
  EXPECT(415, "POST", "/v1/attention", "{}", "text/plain", 1, NULL);
  memset(body, ' ', 5000);
  body[5000] = 0;
  EXPECT(413, "POST", "/v1/attention", body, NULL, 1, NULL);
  snprintf(path, sizeof path, "/v1/nowhere-%d", round);
  EXPECT(404, "GET", path, NULL, NULL, 1, NULL);
  snprintf(path, sizeof path, "/elsewhere/%d\"\\", round);
  EXPECT(404, "GET", path, NULL, NULL, 1, NULL);
  EXPECT(405, "DELETE", "/metrics", NULL, NULL, 1, NULL);
  EXPECT(200, "GET", "/v1/info", NULL, NULL, 1, NULL);
  EXPECT(200, "GET", "/v1/layers", NULL, NULL, 1, NULL);
  /* a layer */
  tokens(q, sizeof q, 3);
  snprintf(body, sizeof body, "{\"layer\":\"blk\",\"query\":%s}", q);
  EXPECT(200, "POST", "/v1/attention", body, NULL, 1, NULL);
  snprintf(body, sizeof body, "{\"layer\":\"no-such-%d\",\"query\":%s}", round,
           q);
  EXPECT(404, "POST", "/v1/attention", body, NULL, 1, NULL);
  /* sessions: made, stepped, forked, listed, deleted; and one unknown */
  EXPECT(201, "POST", "/v1/sessions", "{\"layer\":\"blk\",\"max_tokens\":64}",
         NULL, 1, &rep);
  json_t *v = json_loads(rep, 0, NULL);
  free(rep);
  const char *sid = json_string_value(json_object_get(v, "session"));
  ck_assert_ptr_nonnull(sid);
  char sess[64];
  snprintf(sess, sizeof sess, "%s", sid);
  json_decref(v);
  tokens(q, sizeof q, 2);
  snprintf(body, sizeof body, "{\"query\":%s}", q);
  snprintf(path, sizeof path, "/v1/sessions/%s/attention", sess);
  EXPECT(200, "POST", path, body, NULL, 1, NULL);
  EXPECT(200, "POST", path, body, NULL, 1, NULL);
  snprintf(body, sizeof body, "{\"query\":%s,\"expected_length\":99}", q);
  EXPECT(409, "POST", path, body, NULL, 1, NULL);
  snprintf(path, sizeof path, "/v1/sessions/%s/fork", sess);
  EXPECT(201, "POST", path, "{}", NULL, 1, &rep);
  v = json_loads(rep, 0, NULL);
  free(rep);
  char fork[64];
  snprintf(fork, sizeof fork, "%s",
           json_string_value(json_object_get(v, "session")));
  json_decref(v);
  EXPECT(200, "GET", "/v1/sessions", NULL, NULL, 1, NULL);
  snprintf(path, sizeof path, "/v1/sessions/%s", sess);
  EXPECT(204, "DELETE", path, NULL, NULL, 1, NULL);
  snprintf(path, sizeof path, "/v1/sessions/%s", fork);
  EXPECT(204, "DELETE", path, NULL, NULL, 1, NULL);
  EXPECT(404, "GET", path, NULL, NULL, 1, NULL);
  /* the Open Inference Protocol: the layer, and a model that is not */
  EXPECT(200, "GET", "/v2/models/blk/ready", NULL, NULL, 1, NULL);
  snprintf(body, sizeof body,
           "{\"inputs\":[{\"name\":\"query\",\"shape\":[1,3,16],"
           "\"datatype\":\"FP32\",\"data\":[%s]}]}",
           (tokens(q, sizeof q, 3), q));
  EXPECT(200, "POST", "/v2/models/blk/infer", body, NULL, 1, NULL);
  snprintf(path, sizeof path, "/v2/models/model-%d/infer", round);
  EXPECT(404, "POST", path, body, NULL, 1, NULL);
  EXPECT(400, "POST", "/v2/models/blk/infer", "{\"inputs\":", NULL, 1, NULL);
#undef EXPECT
  return n;
}

static prom_t scrape(char *ctype, size_t cap) {
  sh_resp_t r;
  ck_assert_int_eq(sh_get(srv.port, "/metrics", &r), 0);
  ck_assert_int_eq(r.status, 200);
  if (ctype)
    ck_assert_ptr_nonnull(sh_header(&r, "Content-Type", ctype, cap));
  prom_t p;
  prom_assert(r.body, &p);
  sh_resp_free(&r);
  return p;
}

/* The requests /metrics has counted, but for those of protocol other
 * answered 200 (the scrapes themselves, and the probes). */
static double answered(const prom_t *p) {
  double n = 0;
  for (size_t i = 0; i < p->n; i++)
    if (strncmp(p->series[i].key, "attnd_requests_total{", 21) == 0 &&
        strcmp(p->series[i].key, "attnd_requests_total{protocol=\"other\","
                                 "status=\"200\"}") != 0)
      n += p->series[i].value;
  return n;
}

/* Scrapes until the n requests sent since `before` are counted (a request
 * is counted once its reply is out, a moment after the client read it),
 * for 10 s at most. */
static prom_t scrape_after(const prom_t *before, int n, char *ctype,
                           size_t cap) {
  double want = answered(before) + n, t0 = sh_now();
  for (;;) {
    prom_t p = scrape(ctype, cap);
    if (answered(&p) >= want || sh_now() - t0 > 10)
      return p;
    prom_free(&p);
    usleep(5000);
  }
}

/* Mixed traffic, twice, each round with ids, paths and model names of its
 * own: every scrape keeps the format's rules, with attnd's Content-Type;
 * no series appears that the first scrape did not have (no label takes a
 * client's path, model, session id or key); no counter goes back; and
 * once every request is answered, the gauges are back at rest. */
START_TEST(test_scrape_after_traffic) {
  char ctype[128];
  prom_t p0 = scrape(ctype, sizeof ctype);
  ck_assert_str_eq(ctype, "text/plain; version=0.0.4; charset=utf-8");
  prom_t prev = p0;
  for (int round = 0; round < 2; round++) {
    int n = traffic(round);
    prom_t p = scrape_after(&prev, n, ctype, sizeof ctype);
    ck_assert_str_eq(ctype, "text/plain; version=0.0.4; charset=utf-8");
    ck_assert_msg(answered(&p) == answered(&prev) + n,
                  "%g requests counted, %g before and %d sent", answered(&p),
                  answered(&prev), n);
    ck_assert_msg(p.n == p0.n, "%zu series, %zu before any traffic", p.n, p0.n);
    for (size_t i = 0; i < p.n; i++) {
      double was = prom_get(&prev, p.series[i].key);
      ck_assert_msg(!isnan(was), "a new series after traffic: %s",
                    p.series[i].key);
      if (strcmp(p.series[i].type, "counter") == 0 ||
          strcmp(p.series[i].type, "histogram") == 0)
        ck_assert_msg(p.series[i].value >= was, "%s went back: %g, was %g",
                      p.series[i].key, p.series[i].value, was);
    }
    static const char *const rest[] = {
        "attnd_queue_depth{}", "attnd_busy_workers{}", "attnd_busy_threads{}",
        "attnd_inflight{}",    "attnd_sessions{}",     "attnd_draining{}"};
    for (size_t k = 0; k < sizeof rest / sizeof rest[0]; k++)
      ck_assert_msg(prom_get(&p, rest[k]) == 0, "%s is %g at rest", rest[k],
                    prom_get(&p, rest[k]));
    ck_assert_msg(prom_get(&p, "attnd_kv_bytes{state=\"used\"}") == 0,
                  "the sessions are deleted, their pages held still");
    ck_assert_double_eq(prom_get(&p, "attnd_memory_held_bytes{}"),
                        prom_get(&p, "attnd_scratch_bytes{}"));
    ck_assert_double_ge(
        prom_get(&p, "attnd_rejections_total{reason=\"unauthorized\"}"),
        2.0 * (round + 1));
    ck_assert_double_ge(
        prom_get(&p, "attnd_rejections_total{reason=\"too_large\"}"),
        round + 1.0);
    ck_assert_double_ge(
        prom_get(&p, "attnd_session_ends_total{cause=\"deleted\"}"),
        2.0 * (round + 1));
    if (prev.series != p0.series)
      prom_free(&prev);
    prev = p;
  }
  prom_free(&prev);
  prom_free(&p0);
}
END_TEST

/* A path no route takes is counted under the protocol of its prefix, as
 * docs/operations.md lists them (v1 for what is under /v1, session under
 * /v1/sessions, v2 under /v2, other for the rest): the 404s of a
 * protocol's clients are that protocol's. */
START_TEST(test_unrouted_protocol) {
  static const struct {
    const char *method, *path, *proto;
    long status;
  } cases[] = {
      {"GET", "/v1/nowhere", "v1", 404},
      {"POST", "/v1", "v1", 404},
      {"GET", "/v1/sessions/0123/nothing", "session", 404},
      {"POST", "/v1/sessions//attention", "session", 404},
      {"GET", "/v2/nowhere", "v2", 404},
      {"GET", "/v1x", "other", 404},
      {"GET", "/nowhere/v1/", "other", 404},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    char series[128];
    snprintf(series, sizeof series,
             "attnd_requests_total{protocol=\"%s\",status=\"%ld\"}",
             cases[k].proto, cases[k].status);
    double before = sh_metric(srv.port, series);
    long st =
        call(cases[k].method, cases[k].path,
             strcmp(cases[k].method, "POST") == 0 ? "{}" : NULL, NULL, 1, NULL);
    ck_assert_int_eq(st, cases[k].status);
    double after = sh_wait_metric(srv.port, series, before + 1, 5.0);
    ck_assert_msg(after == before + 1, "%s %s: %s is %g, was %g",
                  cases[k].method, cases[k].path, series, after, before);
  }
}
END_TEST

/* One session step, sent from a thread of its own. */
typedef struct step {
  char path[96], body[8300];
  char *text;  /* the body instead, where set (malloc) */
  char *reply; /* the reply's body (malloc), or NULL */
  long status;
  int done; /* set (atomically) once the exchange has ended */
} step_t;

static void *step_thread(void *arg) {
  step_t *s = arg;
  const char *hdr[] = {"Authorization: Bearer " SCRAPE_KEY, NULL};
  sh_client_t c;
  sh_client_init(&c, srv.port);
  sh_req_t q = {.method = "POST",
                .path = s->path,
                .content_type = "application/json",
                .body = s->text ? s->text : s->body,
                .len = strlen(s->text ? s->text : s->body),
                .headers = hdr};
  sh_resp_t r;
  if (sh_http(&c, &q, &r) == 0) {
    s->status = r.status;
    s->reply = strdup(r.body);
  }
  sh_resp_free(&r);
  sh_client_free(&c);
  __atomic_store_n(&s->done, 1, __ATOMIC_RELEASE);
  return NULL;
}

#define NSTEPS 8

/* A new session of the layer of 4096 tokens, its id into sess. */
static void session_new(char sess[64]) {
  char *rep = NULL;
  ck_assert_int_eq(call("POST", "/v1/sessions",
                        "{\"layer\":\"blk\",\"max_tokens\":4096}", NULL, 1,
                        &rep),
                   201);
  json_t *v = json_loads(rep, 0, NULL);
  free(rep);
  snprintf(sess, 64, "%s", json_string_value(json_object_get(v, "session")));
  json_decref(v);
}

/* NSTEPS new sessions of the layer, their ids into sess. */
static void sessions_new(char sess[NSTEPS][64]) {
  for (int i = 0; i < NSTEPS; i++)
    session_new(sess[i]);
}

static void sessions_delete(char sess[NSTEPS][64]) {
  for (int i = 0; i < NSTEPS; i++) {
    char path[96];
    snprintf(path, sizeof path, "/v1/sessions/%.40s", sess[i]);
    ck_assert_int_eq(call("DELETE", path, NULL, NULL, 1, NULL), 204);
  }
}

/* Session steps computed together in a batch take one worker for the
 * batch's time T, and each step's reply says compute_ms T and batch n:
 * attnd_backend_compute_seconds_total ("time workers spent computing")
 * and attnd_backend_stage_seconds_total grow by T for the batch, the sum
 * of each step's compute_ms / batch, not by n T. Rounds of NSTEPS
 * concurrent steps of 16 tokens, one a session, until the batches' n T
 * exceed their T by 20 times the rounding (3 decimals a reply, 6 the
 * counter). */
START_TEST(test_batched_compute_time) {
  char sess[NSTEPS][64], q[8192];
  sessions_new(sess);
  const char *cpu = "attnd_backend_compute_seconds_total{backend=\"cpu\"}",
             *att = "attnd_backend_stage_seconds_total{backend=\"cpu\","
                    "stage=\"attention\"}";
  prom_t p0 = scrape(NULL, 0);
  double share = 0, att_share = 0, whole = 0;
  int steps = 0;
  for (int round = 0;
       round < 100 && whole - share < 20 * (0.0005 * steps + 0.001); round++) {
    step_t s[NSTEPS];
    pthread_t th[NSTEPS];
    tokens(q, sizeof q, 16);
    for (int i = 0; i < NSTEPS; i++) {
      memset(&s[i], 0, sizeof s[i]);
      snprintf(s[i].path, sizeof s[i].path, "/v1/sessions/%.40s/attention",
               sess[i]);
      snprintf(s[i].body, sizeof s[i].body, "{\"query\":%s}", q);
      ck_assert_int_eq(pthread_create(&th[i], NULL, step_thread, &s[i]), 0);
    }
    for (int i = 0; i < NSTEPS; i++) {
      pthread_join(th[i], NULL);
      ck_assert_msg(s[i].status == 200, "step: %ld %s", s[i].status,
                    s[i].reply ? s[i].reply : "");
      json_t *v = json_loads(s[i].reply, 0, NULL);
      json_t *m = json_object_get(v, "metrics");
      double ms = json_number_value(json_object_get(m, "compute_ms"));
      double n = json_number_value(json_object_get(m, "batch"));
      ck_assert_msg(n >= 1, "%s", s[i].reply);
      share += ms / n;
      whole += ms;
      att_share += json_number_value(json_object_get(
                       json_object_get(m, "stages_ms"), "attention")) /
                   n;
      steps++;
      json_decref(v);
      free(s[i].reply);
    }
  }
  ck_assert_msg(whole - share >= 20 * (0.0005 * steps + 0.001),
                "too few batches in 100 rounds to tell the two apart (%g ms "
                "counted whole, %g ms shared, %d steps)",
                whole, share, steps);
  prom_t p1 = scrape(NULL, 0);
  double got = (prom_get(&p1, cpu) - prom_get(&p0, cpu)) * 1e3,
         got_att = (prom_get(&p1, att) - prom_get(&p0, att)) * 1e3,
         tol = 0.0005 * steps + 0.001; /* ms */
  ck_assert_msg(fabs(got - share) <= tol,
                "%s grew %.3f ms; the steps' shares of their batches are "
                "%.3f ms (%.3f ms counted whole, %d steps)",
                cpu, got, share, whole, steps);
  ck_assert_msg(fabs(got_att - att_share) <= tol,
                "%s grew %.3f ms; the steps' shares are %.3f ms", att, got_att,
                att_share);
  prom_free(&p0);
  prom_free(&p1);
  sessions_delete(sess);
}
END_TEST

/* A request that keeps the one worker busy for a while: self-attention of
 * a query [BLOCK_L, 16], four heads, sent from a thread of its own. */
#define BLOCK_L 4096
static void *block_thread(void *arg) {
  step_t *s = arg;
  snprintf(s->path, sizeof s->path, "/v1/attention");
  return step_thread(s);
}

/* Steps of a batch that its deadline cancels while it computes (504) were
 * computed all the same: the worker spent the batch's time T on them, and
 * attnd_backend_compute_seconds_total grows by T for the batch, once,
 * whatever became of each step, not by T · (answered / n). Each round
 * keeps the worker busy with one request, then sends NSTEPS steps of
 * BIG_L new tokens (one session each), which queue behind it and are
 * computed as one batch; half of them have a timeout_ms tuned from round
 * to round to pass inside the batch's run. Each 200 names its run's
 * compute_ms and batch n; steps of a batch that got no 200 are n less the
 * 200s that name it. Rounds go on until four such steps are seen; the
 * counter's growth is then the runs' compute_ms, each run once. Bug: each
 * step added its share, T / n, when its reply was a 200, so a batch with
 * steps cancelled inside it was counted short. */
#define BIG_L 512
START_TEST(test_batched_expired_compute_time) {
  static char q[BIG_L * 16 * 12], bq[BLOCK_L * 16 * 12];
  tokens(q, sizeof q, BIG_L);
  tokens(bq, sizeof bq, BLOCK_L);
  const char *cpu = "attnd_backend_compute_seconds_total{backend=\"cpu\"}";
  double want = 0, got = 0, tol = 0, timeout = 0, T = 0, wait = 0;
  int missing = 0, rounds = 0;
  for (; rounds < 40 && missing < 4; rounds++) {
    char sess[NSTEPS][64];
    sessions_new(sess);
    double before = sh_metric(srv.port, cpu);
    step_t s[NSTEPS + 1];
    pthread_t th[NSTEPS + 1];
    memset(s, 0, sizeof s);
    size_t len = strlen(bq) + 64;
    ck_assert_ptr_nonnull(s[NSTEPS].text = malloc(len));
    snprintf(s[NSTEPS].text, len, "{\"query\":%s,\"num_heads\":4}", bq);
    ck_assert_int_eq(
        pthread_create(&th[NSTEPS], NULL, block_thread, &s[NSTEPS]), 0);
    /* until the worker is seen busy, or the request is already done (its
     * few milliseconds of work can fall between two scrapes: the steps
     * then queue behind the first of them instead, and batch all the same) */
    for (double end = sh_now() + 10;
         !__atomic_load_n(&s[NSTEPS].done, __ATOMIC_ACQUIRE) &&
         sh_metric(srv.port, "attnd_busy_workers") < 1 && sh_now() < end;)
      usleep(2000);
    for (int i = 0; i < NSTEPS; i++) {
      snprintf(s[i].path, sizeof s[i].path, "/v1/sessions/%.40s/attention",
               sess[i]);
      /* the first round measures: no step has a short deadline */
      long long ms = i % 2 && rounds ? (long long)timeout : 60000;
      if (ms < 1) /* 0 would be no deadline of its own */
        ms = 1;
      len = strlen(q) + 64;
      ck_assert_ptr_nonnull(s[i].text = malloc(len));
      snprintf(s[i].text, len, "{\"query\":%s,\"timeout_ms\":%lld}", q, ms);
      ck_assert_int_eq(pthread_create(&th[i], NULL, step_thread, &s[i]), 0);
    }
    /* the runs of this round: compute_ms, n, and the 200s naming each */
    double rt[NSTEPS + 1];
    int rn[NSTEPS + 1], rk[NSTEPS + 1], nr = 0, short_ok = 0, late = 0;
    for (int i = 0; i <= NSTEPS; i++) {
      pthread_join(th[i], NULL);
      free(s[i].text);
      ck_assert_msg(s[i].status == 200 || (i % 2 && s[i].status == 504),
                    "%s: %ld %s", s[i].path, s[i].status,
                    s[i].reply ? s[i].reply : "");
      if (s[i].status == 504) {
        late++;
        free(s[i].reply);
        continue;
      }
      short_ok += i < NSTEPS && i % 2;
      json_t *v = json_loads(s[i].reply, 0, NULL);
      json_t *m = json_object_get(v, "metrics");
      double ms = json_number_value(json_object_get(m, "compute_ms"));
      int n = (int)json_integer_value(json_object_get(m, "batch"));
      if (i == 0 && rounds == 0) /* a step's wait for the request ahead */
        wait = json_number_value(json_object_get(m, "queue_ms"));
      json_decref(v);
      free(s[i].reply);
      int k = 0;
      while (k < nr && !(rt[k] == ms && rn[k] == n))
        k++;
      if (k == nr)
        rt[nr] = ms, rn[nr] = n, rk[nr++] = 0;
      rk[k]++;
    }
    int round_missing = 0;
    for (int k = 0; k < nr; k++) {
      want += rt[k];
      round_missing += rn[k] - rk[k];
      tol += 0.0005 + 0.000001 * rn[k]; /* the reply's 3 decimals, ns */
      if (rn[k] > 1 && rt[k] > T)
        T = rt[k];
    }
    missing += round_missing;
    got += (sh_metric(srv.port, cpu) - before) * 1e3;
    tol += 0.001; /* two scrapes' 6 decimals (s) */
    /* the next round's short deadline: shorter when they all came in
     * time, longer when they all expired before their batch ran */
    if (rounds == 0)
      timeout = wait + T / 2;
    else if (late == 0)
      timeout *= 0.8;
    else if (short_ok == 0 && round_missing == 0)
      timeout += T / 4 + 1;
    sessions_delete(sess);
  }
  ck_assert_msg(missing >= 4,
                "%d rounds gave %d steps cancelled inside their batch (the "
                "last timeout_ms %.0f, a batch %.1f ms)",
                rounds, missing, timeout, T);
  ck_assert_msg(fabs(got - want) <= tol,
                "%s grew %.3f ms over %d rounds; their runs computed %.3f ms "
                "(%d steps cancelled inside a batch)",
                cpu, got, rounds, want, missing);
}
END_TEST

/* ---- every path of a request, against the whole exposition ----------------
 */

/* The paths case's server: one worker that computes everything (no request
 * on its HTTP thread), one place in the queue, a body limit of 2 MiB,
 * above the holder's body (HOLD_L) and far below what a 413 sends, and
 * connections idle for 2 s closed. */
static void start_paths_server(void) {
  static const char *const args[] = {"--workers",
                                     "1",
                                     "--threads-per-request",
                                     "1",
                                     "--queue-depth",
                                     "1",
                                     "--inline-max-flops",
                                     "0",
                                     "--max-body-bytes",
                                     "2M",
                                     "--connection-timeout-s",
                                     "2",
                                     "--min-recv-rate-bytes-per-s",
                                     "1",
                                     NULL};
  start_with(args);
}

/* What a path must move: a counter by exactly `by`, or, with by 0, a time
 * counter by something above 0. A histogram named by its _count moves by
 * `by` there, the +Inf bucket with it, its other buckets by 0 to `by` and
 * its _sum by 0 or more. Keys as prom_t spells them: labels sorted. */
typedef struct moved {
  const char *key;
  double by;
} moved_t;

#define CPU_RUN                                                                \
  {"attnd_backend_requests_total{backend=\"cpu\"}", 1}, {                      \
    "attnd_backend_compute_seconds_total{backend=\"cpu\"}", 0                  \
  }
/* A request that entered the queue observes its wait, whatever its
 * outcome; one answered with a result its compute and whole time too. */
#define QUEUED(proto, ctx)                                                     \
  {                                                                            \
    "attnd_queue_wait_seconds_count{ctx=\"" ctx "\",protocol=\"" proto "\"}",  \
        1                                                                      \
  }
#define TIMED(proto, ctx)                                                      \
  QUEUED(proto, ctx),                                                          \
      {"attnd_compute_seconds_count{ctx=\"" ctx "\",protocol=\"" proto "\"}",  \
       1},                                                                     \
  {                                                                            \
    "attnd_request_seconds_count{ctx=\"" ctx "\",protocol=\"" proto "\"}", 1   \
  }
#define COUNTED(proto, status)                                                 \
  { "attnd_requests_total{protocol=\"" proto "\",status=\"" status "\"}", 1 }
#define REJECTED(reason)                                                       \
  { "attnd_rejections_total{reason=\"" reason "\"}", 1 }

/* The _count key of a histogram sample's label set ("x_bucket{a,le,b}" and
 * "x_sum{a,b}" give "x_count{a,b}") into out; 0 where key is not one. */
static int count_key(const char *key, char *out, size_t cap) {
  const char *brace = strchr(key, '{'), *le = strstr(key, "le=\"");
  size_t base = (size_t)(brace - key);
  if (brace == NULL)
    return 0;
  if (base > 7 && strncmp(brace - 7, "_bucket", 7) == 0)
    base -= 7;
  else if (base > 4 && strncmp(brace - 4, "_sum", 4) == 0)
    base -= 4;
  else
    return 0;
  size_t at = (size_t)snprintf(out, cap, "%.*s_count{", (int)base, key);
  for (const char *l = brace + 1; *l && *l != '}';) {
    const char *end = strchr(l, '"') ? strchr(strchr(l, '"') + 1, '"') : NULL;
    if (end == NULL)
      return 0;
    if (l != le)
      at += (size_t)snprintf(out + at, cap - at, "%s%.*s",
                             out[at - 1] == '{' ? "" : ",", (int)(end + 1 - l),
                             l);
    l = end + 1 + (end[1] == ',');
  }
  snprintf(out + at, cap - at, "}");
  return 1;
}

/* The wanted move of key, or NULL. */
static const moved_t *wanted(const moved_t *want, size_t n, const char *key) {
  for (size_t k = 0; k < n; k++)
    if (strcmp(want[k].key, key) == 0)
      return &want[k];
  return NULL;
}

/* Asserts that from a to b every counter and histogram series moved as
 * `want` says, and no other: the gauges aside, and the scrapes' own count
 * (protocol other, status 200, as docs/operations.md says: /metrics is
 * other's). A run's stages may each take under the text's microsecond, so
 * that attnd_backend_stage_seconds_total of its backend moves by 0 or more
 * where `ran` (the requests computed) says it ran; the process's CPU time
 * (process_cpu_seconds_total) moves with anything attnd does. */
static void assert_moved(const char *path, const prom_t *a, const prom_t *b,
                         const moved_t *want, size_t n, int ran) {
  static const char stage[] =
      "attnd_backend_stage_seconds_total{backend=\"cpu\",";
  char bad[4096] = "", ck[256];
  size_t at = 0;
  for (size_t k = 0; k < n; k++)
    if (isnan(prom_get(b, want[k].key)))
      at += (size_t)snprintf(bad + at, sizeof bad - at, "\n  no series %s",
                             want[k].key);
  for (size_t i = 0; i < b->n && at < sizeof bad - 256; i++) {
    const prom_series_t *s = &b->series[i];
    if ((strcmp(s->type, "counter") != 0 &&
         strcmp(s->type, "histogram") != 0) ||
        strcmp(s->key, "attnd_requests_total{protocol=\"other\","
                       "status=\"200\"}") == 0)
      continue;
    double d = s->value - prom_get(a, s->key);
    const moved_t *w = wanted(want, n, s->key);
    int ok;
    if (w)
      ok = w->by > 0 ? d == w->by : d > 0;
    else if (count_key(s->key, ck, sizeof ck) && wanted(want, n, ck)) {
      double c = wanted(want, n, ck)->by;
      ok = strstr(s->key, "_sum{")         ? d >= 0
           : strstr(s->key, "le=\"+Inf\"") ? d == c
                                           : d >= 0 && d <= c;
    } else
      ok = d == 0 ||
           (ran && d > 0 && strncmp(s->key, stage, strlen(stage)) == 0) ||
           (d > 0 && strcmp(s->key, "process_cpu_seconds_total{}") == 0);
    if (!ok)
      at += (size_t)snprintf(
          bad + at, sizeof bad - at, "\n  %s moved by %g%s", s->key, d,
          w ? (w->by > 0 ? ", not exactly that" : "") : ", not at all wanted");
    if (w && !ok && w->by > 0)
      at += (size_t)snprintf(bad + at, sizeof bad - at, " (want %g)", w->by);
  }
  ck_assert_msg(at == 0, "%s:%s", path, bad);
}

/* Polls until attnd_inflight is `inflight` and no worker is busy nor any
 * request queued beyond `queued` (10 s at most): the server has finished
 * what the path sent. */
static void settle(int inflight, int busy, int queued) {
  double t0 = sh_now();
  for (;;) {
    prom_t p = scrape(NULL, 0);
    int done = prom_get(&p, "attnd_inflight{}") == inflight &&
               prom_get(&p, "attnd_busy_workers{}") == busy &&
               prom_get(&p, "attnd_queue_depth{}") == queued;
    prom_free(&p);
    if (done)
      return;
    ck_assert_msg(sh_now() - t0 < 10,
                  "attnd did not settle at inflight %d, busy %d, queued %d",
                  inflight, busy, queued);
    usleep(5000);
  }
}

/* The whole exposition before a path (taken by path_begin), and after it:
 * waits until each counter it must move by a count has moved (the server
 * has finished the request), and the gauges say so, then asserts the
 * moves (assert_moved). */
static prom_t path_before;

static void path_begin(void) {
  path_before = scrape(NULL, 0);
}

static void path_end(const char *path, const moved_t *want, size_t n, int ran,
                     int inflight, int busy, int queued) {
  for (size_t k = 0; k < n; k++)
    if (want[k].by > 0) {
      double was = prom_get(&path_before, want[k].key);
      double got =
          sh_wait_metric(srv.port, want[k].key, was + want[k].by, 10.0);
      ck_assert_msg(got >= was + want[k].by,
                    "%s: %s moved by %g in 10 s, not %g", path, want[k].key,
                    got - was, want[k].by);
    }
  settle(inflight, busy, queued);
  prom_t after = scrape(NULL, 0);
  assert_moved(path, &path_before, &after, want, n, ran);
  prom_free(&after);
  prom_free(&path_before);
}

#define PATH_END(path, ran, inflight, busy, queued, ...)                       \
  do {                                                                         \
    static const moved_t want_[] = {__VA_ARGS__};                              \
    path_end(path, want_, sizeof want_ / sizeof want_[0], ran, inflight, busy, \
             queued);                                                          \
  } while (0)

/* Sends head and body on a new connection and returns it (-1 on failure);
 * a send the server cut short by its reply is not a failure. */
static int raw_send(const char *head, const char *body, size_t len) {
  int fd = sh_connect(srv.port);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(sh_send_all(fd, head, strlen(head)), 0);
  if (len)
    (void)sh_send_all(fd, body, len);
  return fd;
}

/* The status of the reply on fd, which is then closed. */
static int raw_status(int fd) {
  static char buf[1 << 16];
  long n = sh_recv_reply(fd, buf, sizeof buf, 10000);
  close(fd);
  return n > 0 ? sh_raw_status(buf) : 0;
}

#define KEY_HDR "Authorization: Bearer " SCRAPE_KEY "\r\n"

/* The request line of a raw POST to /v1/attention, with the key. */
#define V1_POST "POST /v1/attention HTTP/1.1\r\nHost: 127.0.0.1\r\n" KEY_HDR

/* A path's first half (PATH_END is its second): scrapes the counters, then
 * sends a request by call() and asserts the reply's status. */
static void path_call(const char *method, const char *path, const char *body,
                      const char *ctype, int key, long status) {
  path_begin();
  long got = call(method, path, body, ctype, key, NULL);
  ck_assert_msg(got == status, "%s %s: %ld, not %ld", method, path, got,
                status);
}

/* The same for a request sent raw (raw_send's head, body and len). The
 * failure shows the whole head: the heads share their first lines
 * (V1_POST) and differ only in the last. */
static void path_raw(const char *head, const char *body, size_t len,
                     int status) {
  path_begin();
  int got = raw_status(raw_send(head, body, len));
  ck_assert_msg(got == status, "%d, not %d, for the head:\n%s", got, status,
                head);
}

/* POSTs body to path, with the key, on a new connection, which it returns
 * unread. */
static int raw_post(const char *path, const char *body) {
  char head[512];
  snprintf(head, sizeof head,
           "POST %.200s HTTP/1.1\r\nHost: 127.0.0.1\r\n" KEY_HDR
           "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
           path, strlen(body));
  return raw_send(head, body, strlen(body));
}

/* Asserts that histogram name's _sum for proto and ctx moved from a to now
 * by ms, in seconds, within tol ms (how ms was rounded) and the text's
 * microsecond at each end. */
static void assert_sum_moved(const prom_t *a, const char *name,
                             const char *proto, const char *ctx, double ms,
                             double tol) {
  char key[160];
  snprintf(key, sizeof key, "%s_sum{ctx=\"%s\",protocol=\"%s\"}", name, ctx,
           proto);
  prom_t b = scrape(NULL, 0);
  double d = prom_get(&b, key) - prom_get(a, key);
  prom_free(&b);
  ck_assert_msg(fabs(d - ms / 1000.0) <= (tol + 0.002) / 1000.0,
                "%s moved by %.6f s; the reply says %.3f ms", key, d, ms);
}

/* DELETE of session sess, a path of its own. */
static void path_session_delete(const char *sess) {
  char path[96];
  snprintf(path, sizeof path, "/v1/sessions/%.40s", sess);
  path_call("DELETE", path, NULL, NULL, 1, 204);
  PATH_END("session delete", 0, 0, 0, 0, COUNTED("session", "204"),
           {"attnd_session_ends_total{cause=\"deleted\"}", 1});
}

/* A request that holds the one worker far longer than the paths behind it
 * take: self-attention of 32768 tokens, eight heads of width 1 (8.6e9
 * scores), a body of 1.4 MB. Its client leaves while it computes. */
#define HOLD_L 32768
#define HOLD_E 8

/* One request down each path of a request's life, each alone between two
 * scrapes of the whole exposition: exactly the counters that
 * docs/operations.md says it moves move, by one (a run's times by more
 * than 0, its histograms' _count by one: attnd_queue_wait_seconds' for
 * every request that entered the queue, the 504s and 499s there
 * included, and the histograms' _sum in seconds: a 200's by its reply's
 * times, a 504's by the wait it names), and nothing else does. The
 * queued paths (429, 504, a client gone while queued, a session's step
 * expired) wait behind a request that holds the one worker, whose client
 * then leaves while it computes; a last request's deadline passes while it
 * computes. */
START_TEST(test_every_path_counted) {
  char q[4096], body[8192], path[160];
  static const char small_req[] = "{\"query\":[[0.5,-1],[2,0.25]],"
                                  "\"num_heads\":2}";
  settle(0, 0, 0);

  char *reply = NULL;
  prom_t a = scrape(NULL, 0);
  path_begin();
  ck_assert_int_eq(call("POST", "/v1/attention", small_req, NULL, 1, &reply),
                   200);
  PATH_END("200 /v1 JSON", 1, 0, 0, 0, COUNTED("v1", "200"), TIMED("v1", "128"),
           CPU_RUN);
  /* each histogram's _sum moved by the reply's own time, in seconds */
  json_t *v = json_loads(reply, 0, NULL), *rm = json_object_get(v, "metrics");
  static const char *const timed[][2] = {
      {"attnd_queue_wait_seconds", "queue_ms"},
      {"attnd_compute_seconds", "compute_ms"},
      {"attnd_request_seconds", "total_ms"}};
  for (int k = 0; k < 3; k++)
    assert_sum_moved(&a, timed[k][0], "v1", "128",
                     json_number_value(json_object_get(rm, timed[k][1])),
                     0.0005);
  json_decref(v);
  free(reply);
  prom_free(&a);

  /* the layer by the Open Inference Protocol, its query [1, 3, 16] FP32 as
   * Triton's binary tensor data */
  float x[3 * 16];
  for (int i = 0; i < 3 * 16; i++)
    x[i] = 0.125f * (float)(i % 7) - 0.375f;
  int jl = snprintf(body, sizeof body,
                    "{\"inputs\":[{\"name\":\"query\",\"shape\":[1,3,16],"
                    "\"datatype\":\"FP32\",\"parameters\":"
                    "{\"binary_data_size\":%zu}}]}",
                    sizeof x);
  memcpy(body + jl, x, sizeof x);
  char ihcl[64];
  snprintf(ihcl, sizeof ihcl, "Inference-Header-Content-Length: %d", jl);
  const char *oip_hdr[] = {"Authorization: Bearer " SCRAPE_KEY, ihcl, NULL};
  sh_client_t c;
  sh_client_init(&c, srv.port);
  sh_req_t oq = {.method = "POST",
                 .path = "/v2/models/blk/infer",
                 .content_type = "application/octet-stream",
                 .body = body,
                 .len = (size_t)jl + sizeof x,
                 .headers = oip_hdr};
  sh_resp_t r;
  path_begin();
  ck_assert_int_eq(sh_http(&c, &oq, &r), 0);
  ck_assert_msg(r.status == 200, "OIP binary: %ld %s", r.status, r.body);
  sh_resp_free(&r);
  sh_client_free(&c);
  PATH_END("200 OIP binary", 1, 0, 0, 0, COUNTED("v2", "200"),
           TIMED("v2", "128"), CPU_RUN);

  path_call("POST", "/v1/attention", "{\"query\":", NULL, 1, 400);
  PATH_END("400 bad JSON", 0, 0, 0, 0, COUNTED("v1", "400"),
           REJECTED("invalid"));

  path_call("POST", "/v1/attention", small_req, NULL, 0, 401);
  PATH_END("401 no key", 0, 0, 0, 0, COUNTED("v1", "401"),
           REJECTED("unauthorized"));

  path_call("GET", "/nowhere", NULL, NULL, 1, 404);
  PATH_END("404 unknown path", 0, 0, 0, 0, COUNTED("other", "404"),
           REJECTED("invalid"));

  path_call("DELETE", "/metrics", NULL, NULL, 1, 405);
  PATH_END("405 wrong method", 0, 0, 0, 0, COUNTED("other", "405"),
           REJECTED("invalid"));

  path_raw(V1_POST "Content-Type: application/json\r\n"
                   "Content-Length: 3000000\r\n\r\n",
           NULL, 0, 413);
  PATH_END("413 Content-Length", 0, 0, 0, 0, COUNTED("v1", "413"),
           REJECTED("too_large"));

  /* chunks of 64 KiB, past 2 MiB */
  size_t big = 34 * 65546 + 8;
  char *chunks = malloc(big);
  ck_assert_ptr_nonnull(chunks);
  size_t len = 0;
  for (int k = 0; k < 34; k++) {
    len += (size_t)sprintf(chunks + len, "10000\r\n");
    memset(chunks + len, ' ', 65536);
    len += 65536;
    len += (size_t)sprintf(chunks + len, "\r\n");
  }
  len += (size_t)sprintf(chunks + len, "0\r\n\r\n");
  path_raw(V1_POST "Content-Type: application/json\r\n"
                   "Transfer-Encoding: chunked\r\n\r\n",
           chunks, len, 413);
  free(chunks);
  PATH_END("413 chunked", 0, 0, 0, 0, COUNTED("v1", "413"),
           REJECTED("too_large"));

  path_call("POST", "/v1/attention", small_req, "text/plain", 1, 415);
  PATH_END("415 Content-Type", 0, 0, 0, 0, COUNTED("v1", "415"),
           REJECTED("invalid"));

  path_call("POST", "/v1/attention", "{\"query\":[[0.5,-1,2]],\"num_heads\":2}",
            NULL, 1, 422);
  PATH_END("422 shape", 0, 0, 0, 0, COUNTED("v1", "422"), REJECTED("invalid"));

  path_call("POST", "/v2/models/blk/infer", small_req, NULL, 0, 401);
  PATH_END("401 no key, OIP", 0, 0, 0, 0, COUNTED("v2", "401"),
           REJECTED("unauthorized"));

  path_call("POST", "/v2/models/blk/infer",
            "{\"inputs\":[{\"name\":\"query\",\"shape\":[1,1,3],"
            "\"datatype\":\"FP32\",\"data\":[1,2,3]}]}",
            NULL, 1, 400);
  PATH_END("400 OIP shape", 0, 0, 0, 0, COUNTED("v2", "400"),
           REJECTED("invalid"));

  path_raw(V1_POST "Content-Type: application/json\r\n"
                   "Expect: 200-ok\r\n"
                   "Content-Length: 2\r\n\r\n",
           "{}", 2, 417);
  PATH_END("417 Expect", 0, 0, 0, 0, COUNTED("v1", "417"), REJECTED("invalid"));

  /* libmicrohttpd's own refusals of a chunk's size, once attnd has the
   * request: not hexadecimal (400), and past 2^64 - 1 (413); a refusal
   * like attnd's, it is a rejection as theirs are */
  static const struct {
    const char *size;
    int status;
    moved_t reason;
  } bad_chunks[] = {
      {"zz", 400, REJECTED("invalid")},
      {"fffffffffffffffffffff", 413, REJECTED("too_large")},
  };
  for (size_t k = 0; k < sizeof bad_chunks / sizeof bad_chunks[0]; k++) {
    char chunk[64], st[8], what[64];
    int n = snprintf(chunk, sizeof chunk, "%s\r\n{}\r\n0\r\n\r\n",
                     bad_chunks[k].size);
    snprintf(st, sizeof st, "%d", bad_chunks[k].status);
    snprintf(what, sizeof what, "%s chunk size %s", st, bad_chunks[k].size);
    char counted[96];
    snprintf(counted, sizeof counted,
             "attnd_requests_total{protocol=\"v1\",status=\"%s\"}", st);
    const moved_t want[] = {{counted, 1}, bad_chunks[k].reason};
    path_raw(V1_POST "Content-Type: application/json\r\n"
                     "Transfer-Encoding: chunked\r\n\r\n",
             chunk, (size_t)n, bad_chunks[k].status);
    path_end(what, want, 2, 0, 0, 0, 0);
  }

  /* a Content-Length that is not a number: libmicrohttpd answers 400
   * before attnd's handler runs, but after the request line, from which
   * attnd holds the request (docs/operations.md): counted as the chunk's
   * are, under the protocol of its path */
  path_raw(V1_POST "Content-Length: abc\r\n\r\n", NULL, 0, 400);
  PATH_END("400 Content-Length abc", 0, 0, 0, 0, COUNTED("v1", "400"),
           REJECTED("invalid"));

  /* a client that leaves halfway through its body: only the access log's
   * 499, counted as status other */
  path_begin();
  close(raw_send(V1_POST "Content-Type: application/json\r\n"
                         "Content-Length: 1000\r\n\r\n",
                 "{\"query\":[[", 11));
  PATH_END("client gone uploading", 0, 0, 0, 0, COUNTED("v1", "other"));

  /* a body that stops after its headers, and one that stops halfway: the
   * connection is closed once it has been idle for connection_timeout_s
   * (2 s here), a slow sender's. Which closes the first, libmicrohttpd's
   * timeout or the sweep's pace (1 byte a second past the same 2 s), is
   * a race; the second is closed by the timeout, 11 bytes ahead of the
   * pace */
  static const char *const stalls[] = {"", "{\"query\":[["};
  sh_server_read_log(&srv);
  srv.log_len = 0; /* from here on only */
  srv.log[0] = 0;
  for (int k = 0; k < 2; k++) {
    path_begin();
    int fd = raw_send(V1_POST "Content-Type: application/json\r\n"
                              "Content-Length: 1000\r\n\r\n",
                      stalls[k], strlen(stalls[k]));
    ck_assert_int_eq(raw_status(fd), 0); /* closed, unanswered */
    PATH_END(k ? "body stalled halfway" : "body stalled at its headers", 0, 0,
             0, 0, COUNTED("v1", "other"), REJECTED("slow_sender"));
  }
  sh_server_read_log(&srv); /* and stderr said so, once each */
  int said = 0;
  for (const char *l = strstr(srv.log, "\"event\":\"slow_sender\""); l;
       l = strstr(l + 1, "\"event\":\"slow_sender\""))
    said++;
  ck_assert_msg(said == 2, "%d slow_sender lines for 2 bodies:\n%s", said,
                srv.log);

  /* sessions: made, stepped, deleted */
  char sess[64];
  path_begin();
  session_new(sess);
  PATH_END("session create", 0, 0, 0, 0, COUNTED("session", "201"));

  tokens(q, sizeof q, 2);
  snprintf(body, sizeof body, "{\"query\":%s}", q);
  snprintf(path, sizeof path, "/v1/sessions/%s/attention", sess);
  path_call("POST", path, body, NULL, 1, 200);
  PATH_END("session step", 1, 0, 0, 0, COUNTED("session", "200"),
           TIMED("session", "128"), CPU_RUN);

  /* a step refused in its turn that came at once never queued: no wait */
  snprintf(body, sizeof body, "{\"query\":%s,\"expected_length\":99}", q);
  path_call("POST", path, body, NULL, 1, 409);
  PATH_END("session step 409 at once", 0, 0, 0, 0, COUNTED("session", "409"),
           REJECTED("invalid"));

  path_session_delete(sess);

  /* the worker held: its request's upload and admission move no counter */
  char *hold = sh_slow_body(HOLD_L, HOLD_E, HOLD_E, 11, NULL);
  path_begin();
  int holder = raw_post("/v1/attention", hold);
  free(hold);
  ck_assert_double_ge(sh_wait_metric(srv.port, "attnd_busy_workers", 1, 10), 1);
  path_end("holder admitted", NULL, 0, 0, 1, 1, 0);

  /* one waits in the one place of the queue; the next is refused */
  int queued = raw_post("/v1/attention", small_req);
  ck_assert_double_ge(sh_wait_metric(srv.port, "attnd_queue_depth", 1, 10), 1);
  path_call("POST", "/v1/attention", small_req, NULL, 1, 429);
  PATH_END("429 queue full", 0, 2, 1, 1, COUNTED("v1", "429"),
           REJECTED("overload"));

  path_begin();
  close(queued);
  PATH_END("client gone queued", 0, 1, 1, 0, COUNTED("v1", "other"),
           REJECTED("client_gone"), QUEUED("v1", "128"));

  a = scrape(NULL, 0);
  path_begin();
  ck_assert_int_eq(call("POST", "/v1/attention",
                        "{\"query\":[[0.5,-1],[2,0.25]],\"num_heads\":2,"
                        "\"timeout_ms\":50}",
                        NULL, 1, &reply),
                   504);
  PATH_END("504 queued", 0, 1, 1, 0, COUNTED("v1", "504"), REJECTED("deadline"),
           QUEUED("v1", "128"));
  /* its wait, as the 504 names it ("waited 50.3 ms in the queue") */
  const char *w = strstr(reply, "waited ");
  ck_assert_msg(w != NULL, "504 without its wait: %s", reply);
  assert_sum_moved(&a, "attnd_queue_wait_seconds", "v1", "128",
                   strtod(w + 7, NULL), 0.05);
  free(reply);
  prom_free(&a);

  /* a session's step expires in the queue */
  path_begin();
  session_new(sess);
  PATH_END("session create, held", 0, 1, 1, 0, COUNTED("session", "201"));
  snprintf(body, sizeof body, "{\"query\":%s,\"timeout_ms\":50}", q);
  snprintf(path, sizeof path, "/v1/sessions/%s/attention", sess);
  path_call("POST", path, body, NULL, 1, 504);
  PATH_END("session step 504 queued", 0, 1, 1, 0, COUNTED("session", "504"),
           REJECTED("deadline"), QUEUED("session", "128"));

  /* and a step whose client leaves while it waits */
  snprintf(body, sizeof body, "{\"query\":%s}", q);
  path_begin();
  int step = raw_post(path, body);
  ck_assert_double_ge(sh_wait_metric(srv.port, "attnd_queue_depth", 1, 10), 1);
  close(step);
  PATH_END("session step, client gone queued", 0, 1, 1, 0,
           COUNTED("session", "other"), REJECTED("client_gone"),
           QUEUED("session", "128"));

  /* the holder's client leaves while it computes: its run counts, and so
   * does its leaving */
  path_begin();
  close(holder);
  PATH_END("client gone computing", 1, 0, 0, 0, COUNTED("v1", "other"),
           REJECTED("client_gone"), CPU_RUN, QUEUED("v1", "32768"));

  path_session_delete(sess);

  /* a deadline that passes while the request computes: the run counts */
  json_t *deadline = json_pack("{s:i}", "timeout_ms", 300);
  hold = sh_slow_body(HOLD_L, HOLD_E, HOLD_E, 12, deadline);
  json_decref(deadline);
  path_begin();
  call("POST", "/v1/attention", hold, NULL, 1, NULL);
  free(hold);
  PATH_END("504 computing", 1, 0, 0, 0, COUNTED("v1", "504"),
           REJECTED("deadline"), CPU_RUN, QUEUED("v1", "32768"));
}
END_TEST

/* The exposition of m with the gauges g, which the strict reader takes,
 * NUL-terminated. The caller frees it. */
static char *render_gauges(const attnd_metrics_t *m, const attnd_gauges_t *g) {
  attnd_buf_t b;
  attnd_buf_init(&b);
  attnd_metrics_render(m, g, &b);
  attnd_buf_append(&b, "", 1);
  ck_assert(!b.oom);
  prom_t p;
  prom_assert(b.data, &p);
  prom_free(&p);
  return b.data;
}

/* The exposition of m, with every gauge 0 but TLS on, every reload
 * configured and two HTTP threads, so that the families written only with
 * them are there. The caller frees it. */
static char *render(const attnd_metrics_t *m) {
  static const int http_open[2] = {0, 0};
  attnd_gauges_t g = {.tls = 1,
                      .reloads = {1, 1, 1},
                      .http_threads = 2,
                      .http_open = http_open};
  return render_gauges(m, &g);
}

static double sample(const char *text, const char *name) {
  double v = sh_metric_in(text, name);
  ck_assert_msg(v >= 0, "no sample %s", name);
  return v;
}

/* The TLS family: with plain HTTP it is not written; with TLS, the
 * expiry as given, in whole seconds, where it is known. */
START_TEST(test_tls_families) {
  attnd_metrics_t *m = attnd_metrics_new();
  ck_assert_ptr_nonnull(m);
  static const char *const expiry =
      "attnd_tls_cert_not_after_timestamp_seconds";
  attnd_gauges_t g = {0};
  for (int tls = 0; tls <= 1; tls++) {
    for (int known = 0; known <= 1; known++) {
      g.tls = tls;
      g.tls_not_after = known ? 1798761600 : -1;
      char *t = render_gauges(m, &g);
      ck_assert_msg(tls || strstr(t, "attnd_tls_") == NULL, "plain HTTP:\n%s",
                    t);
      if (tls) {
        ck_assert_msg(sh_metric_in(t, expiry) == (known ? 1798761600.0 : -1.0),
                      "%s: %f", expiry, sh_metric_in(t, expiry));
        ck_assert_msg(strstr(t, "\nattnd_tls_cert_not_after_timestamp_"
                                "seconds 1798761600\n") ||
                          !known,
                      "not written as whole seconds:\n%s", t);
      }
      free(t);
    }
  }
  attnd_metrics_free(m);
}
END_TEST

/* The reload families, for each of what SIGHUP reloads configured alone:
 * its series and no other's (none at all with nothing configured), its
 * refusals counted under its own label, and its last success at the time
 * it was recorded, which a refusal leaves. */
START_TEST(test_reload_families) {
  static const char *const what[] = {"api_keys", "tls", "layers"};
  ck_assert_int_eq(sizeof what / sizeof what[0], ATTND_RELOAD_COUNT);
  attnd_metrics_t *m = attnd_metrics_new();
  ck_assert_ptr_nonnull(m);
  double t0 = sh_wall_now();
  for (int w = 0; w < ATTND_RELOAD_COUNT; w++) {
    attnd_metrics_reloaded(m, (attnd_reload_t)w, 1);
    for (int k = 0; k <= w; k++) /* w + 1 refusals */
      attnd_metrics_reloaded(m, (attnd_reload_t)w, 0);
  }
  double t1 = sh_wall_now();
  for (int w = -1; w < ATTND_RELOAD_COUNT; w++) {
    attnd_gauges_t g = {0};
    if (w >= 0)
      g.reloads[w] = 1;
    char *t = render_gauges(m, &g);
    ck_assert_msg(w >= 0 || (strstr(t, "attnd_reload_") == NULL &&
                             strstr(t, "attnd_last_reload_") == NULL),
                  "nothing configured:\n%s", t);
    for (int k = 0; k < ATTND_RELOAD_COUNT; k++) {
      char f[96], ts[96];
      snprintf(f, sizeof f, "attnd_reload_failures_total{what=\"%s\"}",
               what[k]);
      snprintf(ts, sizeof ts,
               "attnd_last_reload_success_timestamp_seconds{what=\"%s\"}",
               what[k]);
      double fails = sh_metric_in(t, f), at = sh_metric_in(t, ts);
      if (k != w) {
        ck_assert_msg(fails < 0 && at < 0, "%s written, only %s configured",
                      what[k], w >= 0 ? what[w] : "nothing");
        continue;
      }
      ck_assert_msg(fails == k + 1, "%s: %g refusals, not %d", f, fails, k + 1);
      /* written to the millisecond */
      ck_assert_msg(at >= t0 - 0.001 && at <= t1 + 0.001,
                    "%s: %.3f, recorded between %.3f and %.3f", ts, at, t0, t1);
    }
    free(t);
  }
  /* a later success moves the time; a refusal leaves it */
  attnd_gauges_t g = {.reloads = {[ATTND_RELOAD_LAYERS] = 1}};
  double t2;
  while ((t2 = sh_wall_now()) < t1 + 0.005) /* past the first's millisecond */
    usleep(1000);
  attnd_metrics_reloaded(m, ATTND_RELOAD_LAYERS, 1);
  attnd_metrics_reloaded(m, ATTND_RELOAD_LAYERS, 0);
  char *t = render_gauges(m, &g);
  double at = sh_metric_in(
      t, "attnd_last_reload_success_timestamp_seconds{what=\"layers\"}");
  ck_assert_msg(at >= t2 - 0.001 && at <= sh_wall_now() + 0.001,
                "the last success at %.3f, after %.3f", at, t2);
  ck_assert_double_eq(
      sh_metric_in(t, "attnd_reload_failures_total{what=\"layers\"}"), 4);
  free(t);
  attnd_metrics_free(m);
}
END_TEST

/* 1000 session steps of 0.4 µs queued, 2.5 µs computed (0.7, 1.1 and
 * 0.7 in the stages) and 3.1 µs in all: the sums are 1000 times those,
 * within the text's microsecond. Cut to whole microseconds each, they read
 * 0, 2 and 3 ms: the queue lost, the compute a fifth low. */
START_TEST(test_sums_of_short_observations) {
  attnd_metrics_t *m = attnd_metrics_new();
  ck_assert_ptr_nonnull(m);
  const double stage_ms[3] = {0.0007, 0.0011, 0.0007};
  for (int i = 0; i < 1000; i++) {
    attnd_metrics_ran(m, ATTN_BACKEND_CPU, 1, 0.0025, stage_ms);
    attnd_metrics_waited(m, ATTND_PROTO_SESSION, 100, 0.0004);
    attnd_metrics_observe(m, ATTND_PROTO_SESSION, 100, 0.0025, 0.0031);
  }
  char *t = render(m);
  static const struct {
    const char *name;
    double want; /* s */
  } sums[] = {
      {"attnd_queue_wait_seconds_sum{protocol=\"session\",ctx=\"128\"}",
       0.0004},
      {"attnd_compute_seconds_sum{protocol=\"session\",ctx=\"128\"}", 0.0025},
      {"attnd_request_seconds_sum{protocol=\"session\",ctx=\"128\"}", 0.0031},
      {"attnd_backend_compute_seconds_total{backend=\"cpu\"}", 0.0025},
      {"attnd_backend_stage_seconds_total{backend=\"cpu\",stage="
       "\"projection\"}",
       0.0007},
      {"attnd_backend_stage_seconds_total{backend=\"cpu\",stage=\"attention\"}",
       0.0011},
      {"attnd_backend_stage_seconds_total{backend=\"cpu\",stage=\"output\"}",
       0.0007},
  };
  for (size_t k = 0; k < sizeof sums / sizeof sums[0]; k++) {
    double got = sample(t, sums[k].name);
    ck_assert_msg(fabs(got - sums[k].want) <= 1.5e-6, "%s is %.6f, not %.6f",
                  sums[k].name, got, sums[k].want);
  }
  ck_assert_double_eq(sample(t,
                             "attnd_compute_seconds_count{protocol=\"session\","
                             "ctx=\"128\"}"),
                      1000);
  free(t);
  attnd_metrics_free(m);
}
END_TEST

/* Request times on the bounds and past the last: 0.5 ms (le 0.0005), 1 ms
 * (le 0.001), 60 s (le 60) and 61 s (+Inf only), at a key length of 2048
 * (ctx 2048). */
START_TEST(test_buckets) {
  attnd_metrics_t *m = attnd_metrics_new();
  ck_assert_ptr_nonnull(m);
  const double total_ms[] = {0.5, 1, 60000, 61000};
  for (int i = 0; i < 4; i++)
    attnd_metrics_observe(m, ATTND_PROTO_V1, 2048, 0, total_ms[i]);
  char *t = render(m);
  static const struct {
    const char *le;
    double count;
  } want[] = {{"0.0005", 1}, {"0.001", 2}, {"0.0025", 2},
              {"30", 2},     {"60", 3},    {"+Inf", 4}};
  for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
    char name[160];
    snprintf(name, sizeof name,
             "attnd_request_seconds_bucket{protocol=\"v1\",ctx=\"2048\","
             "le=\"%s\"}",
             want[k].le);
    ck_assert_msg(sample(t, name) == want[k].count, "%s is %g, not %g", name,
                  sample(t, name), want[k].count);
  }
  ck_assert_double_eq(
      sample(t, "attnd_request_seconds_count{protocol=\"v1\",ctx=\"2048\"}"),
      4);
  ck_assert_double_eq_tol(
      sample(t, "attnd_request_seconds_sum{protocol=\"v1\",ctx=\"2048\"}"),
      121.0015, 1e-6);
  ck_assert_double_eq(
      sample(t, "attnd_request_seconds_count{protocol=\"v1\",ctx=\"512\"}"), 0);
  free(t);
  attnd_metrics_free(m);
}
END_TEST

/* The bounds of the latency histograms cover what attnd times: from a
 * session step's few tens of microseconds (check_metrics' first case) to
 * max_timeout_ms's default, the longest a request is given, with no gap
 * wider than a factor of 3. A value below the first bound or past the
 * last is known only as "under" or "over" it: with a first bound of
 * 0.5 ms, every step and small request fell in one bucket, and a
 * quantile of them read 0.25 ms whatever they took; with a last of 60 s,
 * a request of 10 minutes read as 60 s. */
static int double_cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

START_TEST(test_buckets_cover) {
  attnd_config_t cfg;
  attnd_config_load_t how;
  char *argv[] = {"attnd", NULL}, *envp[] = {NULL}, msg[512];
  ck_assert_msg(
      attnd_config_load(&cfg, &how, 1, argv, envp, 4, msg, sizeof msg) == 0,
      "%s", msg);
  const double lo = 1e-5, hi = (double)cfg.max_timeout_ms / 1000.0;
  attnd_metrics_t *m = attnd_metrics_new();
  ck_assert_ptr_nonnull(m);
  attnd_metrics_observe(m, ATTND_PROTO_V1, 1, 0, 0);
  char *t = render(m);
  prom_t p;
  prom_assert(t, &p);
  static const char *const names[] = {"attnd_queue_wait_seconds_bucket{",
                                      "attnd_compute_seconds_bucket{",
                                      "attnd_request_seconds_bucket{"};
  for (int h = 0; h < 3; h++) {
    double le[64];
    size_t n = 0;
    for (size_t i = 0; i < p.n; i++) { /* one label set's finite bounds */
      const char *k = p.series[i].key, *at = strstr(k, "le=\"");
      if (strncmp(k, names[h], strlen(names[h])) == 0 &&
          strstr(k, "ctx=\"128\"") && strstr(k, "protocol=\"v1\"") && at &&
          strncmp(at + 4, "+Inf", 4) != 0 && n < 64)
        le[n++] = strtod(at + 4, NULL);
    }
    qsort(le, n, sizeof le[0], double_cmp);
    ck_assert_uint_gt(n, 0);
    ck_assert_msg(le[0] <= lo, "%s: the first bound %g s, over %g s", names[h],
                  le[0], lo);
    ck_assert_msg(le[n - 1] >= hi,
                  "%s: the last bound %g s, under max_timeout_ms's default "
                  "%g s",
                  names[h], le[n - 1], hi);
    for (size_t k = 1; k < n && le[k - 1] < hi; k++)
      ck_assert_msg(le[k] <= 3 * le[k - 1], "%s: from le %g to %g, %.1fx",
                    names[h], le[k - 1], le[k], le[k] / le[k - 1]);
  }
  prom_free(&p);
  free(t);
  attnd_metrics_free(m);
}
END_TEST

/* Whether the name d[0..len) is the family f[0..fl), or one of a
 * histogram's samples of it. */
static int names_family(const char *d, size_t len, const char *f, size_t fl) {
  static const char *const sfx[] = {"", "_bucket", "_sum", "_count"};
  for (int k = 0; k < 4; k++)
    if (len == fl + strlen(sfx[k]) && strncmp(d, f, fl) == 0 &&
        strncmp(d + fl, sfx[k], len - fl) == 0)
      return 1;
  return 0;
}

/* The label names of the family whose "# TYPE" line is at l, from its
 * first sample, as docs/operations.md writes them ("protocol,status"; a
 * histogram's le left out); "" for a family without labels. */
static void family_labels(const char *l, char *out, size_t size) {
  out[0] = 0;
  const char *s = strchr(l, '\n');
  while (s && s[1] == '#')
    s = strchr(s + 1, '\n');
  if (s == NULL || s[1 + name_len(s + 1, 1)] != '{')
    return;
  size_t n = 0;
  for (const char *k = s + 2 + name_len(s + 1, 1); *k && *k != '}';) {
    size_t kl = name_len(k, 0);
    if (!(kl == 2 && strncmp(k, "le", 2) == 0) && n < size)
      n += (size_t)snprintf(out + n, size - n, "%s%.*s", n ? "," : "", (int)kl,
                            k);
    const char *open = strchr(k, '"'), *close = strchr(open + 1, '"');
    k = close + 1 + (close[1] == ',');
  }
}

/* Copies docs/operations.md's Metrics section into doc[0..cap),
 * NUL-terminated; fails where there is none. */
static void metrics_section(char *doc, size_t cap) {
  FILE *f = fopen("docs/operations.md", "r");
  ck_assert_msg(f != NULL, "docs/operations.md (run from the repository)");
  size_t n = 0;
  int in = 0;
  char line[1024];
  doc[0] = 0;
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "## ", 3) == 0)
      in = strcmp(line, "## Metrics\n") == 0;
    else if (in && n + strlen(line) < cap)
      n += (size_t)snprintf(doc + n, cap - n, "%s", line);
  }
  fclose(f);
  ck_assert_msg(n > 0, "docs/operations.md has no Metrics section");
}

/* The next mention, from d on, of a family in doc: a name that starts
 * with "attnd_" or, for the process collector's, "process_", at the start
 * of a word; NULL where none is left. */
static const char *next_family(const char *doc, const char *d) {
  for (;; d++) {
    const char *a = strstr(d, "attnd_"), *p = strstr(d, "process_");
    d = a && (p == NULL || a < p) ? a : p;
    if (d == NULL || d == doc ||
        !(isalnum((unsigned char)d[-1]) || d[-1] == '_'))
      return d;
  }
}

/* The families /metrics has and those docs/operations.md's Metrics
 * section names are the same: none emitted undocumented, none documented
 * that is not there (a histogram's _count or _bucket named for the
 * histogram); and a family with labels is written once with their names,
 * as `attnd_requests_total{protocol,status}`, each such mention naming
 * exactly the labels it has. */
START_TEST(test_documented) {
  attnd_metrics_t *m = attnd_metrics_new();
  ck_assert_ptr_nonnull(m);
  char *t = render(m);
  prom_t p;
  prom_assert(t, &p);
  static char doc[1 << 16];
  metrics_section(doc, sizeof doc);
  /* each documented name is a family (or a histogram's sample) */
  for (const char *d = next_family(doc, doc); d; d = next_family(doc, d + 1)) {
    size_t len = name_len(d, 0);
    if (d[len - 1] == '_' || d[len] == '(') /* "attnd_(a|b)", a pattern */
      continue;
    const char *fam = NULL;
    for (const char *l = t; *l && !fam; l = strchr(l, '\n') + 1) {
      size_t fl = strncmp(l, "# TYPE ", 7) == 0 ? name_len(l + 7, 0) : 0;
      if (fl && names_family(d, len, l + 7, fl))
        fam = l;
    }
    ck_assert_msg(fam != NULL,
                  "docs/operations.md names %.*s; /metrics has no such "
                  "family",
                  (int)len, d);
    if (d[len] == '{' && name_len(fam + 7, 0) == len) {
      char want[128];
      family_labels(fam, want, sizeof want);
      const char *close = strchr(d + len, '}');
      size_t got = close ? (size_t)(close - d - len - 1) : 0;
      ck_assert_msg(close && got == strlen(want) &&
                        strncmp(d + len + 1, want, got) == 0,
                    "docs/operations.md writes %.*s; /metrics labels it "
                    "{%s}",
                    (int)(close ? close - d + 1 : (long)len), d, want);
    }
  }
  /* each family is documented */
  for (const char *l = t; *l; l = strchr(l, '\n') + 1) {
    if (strncmp(l, "# TYPE ", 7) != 0)
      continue;
    size_t len = name_len(l + 7, 0);
    int found = 0;
    for (const char *d = next_family(doc, doc); d && !found;
         d = next_family(doc, d + 1))
      found = names_family(d, name_len(d, 0), l + 7, len);
    ck_assert_msg(found, "%.*s is not in docs/operations.md's Metrics",
                  (int)len, l + 7);
    char want[128];
    family_labels(l, want, sizeof want);
    int labelled = want[0] == 0;
    for (const char *d = next_family(doc, doc); d && !labelled;
         d = next_family(doc, d + 1))
      labelled =
          name_len(d, 0) == len && strncmp(d, l + 7, len) == 0 && d[len] == '{';
    ck_assert_msg(labelled,
                  "docs/operations.md's Metrics names %.*s without its "
                  "labels: write `%.*s{%s}` there",
                  (int)len, l + 7, (int)len, l + 7, want);
  }
  prom_free(&p);
  free(t);
  attnd_metrics_free(m);
}
END_TEST

/* A label of a family of /metrics and the values it takes there,
 * ",v1,v2,session,other,": each between commas, in the text's order. */
typedef struct label_values {
  char family[96], label[32], values[256];
} label_values_t;

/* Reads each labelled sample of the exposition t into lv (at most cap),
 * by its family (its "# TYPE" line's name) and label; returns the count. */
static size_t label_values(const char *t, label_values_t *lv, size_t cap) {
  size_t n = 0;
  char fam[96] = "";
  for (const char *l = t; *l; l = strchr(l, '\n') + 1) {
    if (strncmp(l, "# TYPE ", 7) == 0)
      snprintf(fam, sizeof fam, "%.*s", (int)name_len(l + 7, 1), l + 7);
    const char *k = l + name_len(l, 1);
    if (*l == '#' || *k != '{')
      continue;
    for (k++; *k && *k != '}';) {
      size_t kl = name_len(k, 0);
      const char *open = k + kl + 1, *close = strchr(open + 1, '"');
      size_t i = 0;
      while (i < n &&
             (strcmp(lv[i].family, fam) != 0 || strlen(lv[i].label) != kl ||
              strncmp(lv[i].label, k, kl) != 0))
        i++;
      if (i == n) {
        ck_assert(n < cap);
        snprintf(lv[i].family, sizeof lv[i].family, "%s", fam);
        snprintf(lv[i].label, sizeof lv[i].label, "%.*s", (int)kl, k);
        snprintf(lv[i].values, sizeof lv[i].values, ",");
        n++;
      }
      char v[64];
      snprintf(v, sizeof v, ",%.*s,", (int)(close - open - 1), open + 1);
      size_t used = strlen(lv[i].values);
      if (strstr(lv[i].values, v) == NULL)
        snprintf(lv[i].values + used, sizeof lv[i].values - used, "%s", v + 1);
      k = close + 1 + (close[1] == ',');
    }
  }
  return n;
}

/* The two sides of the label values' tests, read once for a test:
 * docs/operations.md's Metrics section, and the label values of the
 * exposition of a new attnd_metrics_t. */
static char section[1 << 16];
static label_values_t seen[128];

/* Sets *m to a new attnd_metrics_t and *t to its exposition, reads doc
 * section and seen, and returns seen's count. */
static size_t read_labels(attnd_metrics_t **m, char **t) {
  *m = attnd_metrics_new();
  ck_assert_ptr_nonnull(*m);
  *t = render(*m);
  metrics_section(section, sizeof section);
  size_t n = label_values(*t, seen, sizeof seen / sizeof seen[0]);
  ck_assert_msg(n > 0, "/metrics has no labelled samples");
  return n;
}

/* The header of the Metrics section's table of each label's values. */
#define LABEL_TABLE "\n| family | label | values |\n"

/* Whether docs/operations.md's Metrics section (doc) writes `value` after
 * a mention of `family` with its labels (`attnd_kv_bytes{state}`), before
 * the next family mentioned with its labels and before the table of
 * label values, which would otherwise document every value for the last
 * family the prose mentions. */
static int value_after(const char *doc, const char *family, const char *value) {
  char quoted[80];
  snprintf(quoted, sizeof quoted, "`%s`", value);
  size_t fl = strlen(family);
  for (const char *d = strstr(doc, family); d; d = strstr(d + 1, family)) {
    if ((d > doc && (isalnum((unsigned char)d[-1]) || d[-1] == '_')) ||
        d[fl] != '{')
      continue;
    const char *from = strchr(d, '}'), *to = from;
    for (to = strstr(from, "attnd_"); to; to = strstr(to + 1, "attnd_"))
      if (to[name_len(to, 0)] == '{')
        break;
    const char *table = strstr(from, LABEL_TABLE);
    if (table && (to == NULL || table < to))
      to = table;
    const char *at = strstr(from, quoted);
    if (at && (to == NULL || at < to))
      return 1;
  }
  return 0;
}

/* Each value a label of /metrics takes is written in backquotes in
 * docs/operations.md's Metrics, after its family's mention
 * (`attnd_kv_bytes{state}` (the host pool: `used`, `free`)) or after that
 * of another family whose label takes the same values (the backends'
 * counters share one list), so that a new protocol, reason, backend,
 * stage or state is documented where its family is. A status is the
 * error table's (test_every_error_status_labelled) and ctx and le are
 * bounds that the prose writes as numbers: those are not looked for here,
 * but in the section's table (test_label_values_listed); attnd_build_info's
 * version is the build's own (test_process_families), and an HTTP thread's
 * number one of http_threads' (check_server_load's
 * test_connections_spread). */
START_TEST(test_label_values_documented) {
  attnd_metrics_t *m;
  char *t;
  size_t n = read_labels(&m, &t);
  for (size_t i = 0; i < n; i++) {
    if (strcmp(seen[i].label, "status") == 0 ||
        strcmp(seen[i].label, "version") == 0 ||
        strcmp(seen[i].label, "thread") == 0 ||
        strcmp(seen[i].label, "ctx") == 0 || strcmp(seen[i].label, "le") == 0)
      continue;
    for (const char *v = seen[i].values + 1; *v; v = strchr(v, ',') + 1) {
      char one[64];
      snprintf(one, sizeof one, "%.*s", (int)strcspn(v, ","), v);
      int documented = 0;
      for (size_t j = 0; j < n && !documented; j++)
        documented = strcmp(seen[j].label, seen[i].label) == 0 &&
                     strcmp(seen[j].values, seen[i].values) == 0 &&
                     value_after(section, seen[j].family, one);
      ck_assert_msg(documented,
                    "/metrics labels %s with %s=\"%s\"; docs/operations.md's "
                    "Metrics does not write `%s` after `%s{...}`, nor after "
                    "another family whose %s takes the same values (%.*s)",
                    seen[i].family, seen[i].label, one, one, seen[i].family,
                    seen[i].label, (int)strlen(seen[i].values) - 2,
                    seen[i].values + 1);
    }
  }
  free(t);
  attnd_metrics_free(m);
}
END_TEST

/* The names in backquotes in the cell [p, end), each followed by a comma:
 * ",a,b," as label_values writes a label's values, into out. */
static void cell_names(const char *p, const char *end, char *out, size_t n) {
  size_t used = (size_t)snprintf(out, n, ",");
  for (const char *open = memchr(p, '`', (size_t)(end - p)); open;) {
    const char *close = memchr(open + 1, '`', (size_t)(end - open - 1));
    ck_assert_msg(close != NULL, "an unclosed backquote in %.*s",
                  (int)(end - p), p);
    used += (size_t)snprintf(out + used, n - used, "%.*s,",
                             (int)(close - open - 1), open + 1);
    ck_assert_msg(used < n, "too long a cell: %.*s", (int)(end - p), p);
    open = memchr(close + 1, '`', (size_t)(end - close - 1));
  }
}

/* docs/operations.md's table of label values, row by row: the families
 * of a row (",f1,f2,"), its label and its values, each as written. */
typedef struct label_row {
  char families[256], label[40], values[512];
} label_row_t;

static size_t label_rows(const char *doc, label_row_t *rows, size_t cap) {
  const char *at = strstr(doc, LABEL_TABLE);
  ck_assert_msg(at != NULL, "docs/operations.md's Metrics has no table "
                            "| family | label | values |");
  at = strchr(strchr(at + 1, '\n') + 1, '\n') + 1; /* past |---| */
  size_t n = 0;
  for (; *at == '|'; at = strchr(at, '\n') + 1) {
    const char *c[4] = {at, NULL, NULL, NULL};
    for (int k = 1; k < 4; k++)
      c[k] = strchr(c[k - 1] + 1, '|');
    ck_assert_msg(c[3] != NULL && n < cap, "a row of three cells: %.80s", at);
    label_row_t *r = &rows[n++];
    char label[48];
    cell_names(c[0], c[1], r->families, sizeof r->families);
    cell_names(c[1], c[2], label, sizeof label);
    snprintf(r->label, sizeof r->label, "%.*s", (int)strlen(label) - 2,
             label + 1);
    cell_names(c[2], c[3], r->values, sizeof r->values);
  }
  return n;
}

/* docs/operations.md's table lists each label's values, and they are
 * those /metrics writes, exactly and in its order, both ways: a protocol,
 * reason or state added to the code and not the table, one the table
 * names and /metrics never writes, a context class or a bucket bound
 * moved, or a histogram's buckets no longer ending in +Inf, fails here.
 * An _info family's labels (attnd_build_info's) take one of the values
 * listed, this build's and this CPU's. A status is the error table's
 * (test_every_error_status_labelled), the version the build's own
 * (test_process_families), and a thread one of http_threads'
 * (check_server_load's test_connections_spread). */
START_TEST(test_label_values_listed) {
  attnd_metrics_t *m;
  char *t;
  size_t n = read_labels(&m, &t);
  static label_row_t rows[64];
  size_t nr = label_rows(section, rows, sizeof rows / sizeof rows[0]);
  for (size_t r = 0; r < nr; r++)
    for (const char *f = rows[r].families + 1; *f; f = strchr(f, ',') + 1) {
      char fam[96];
      snprintf(fam, sizeof fam, "%.*s", (int)strcspn(f, ","), f);
      size_t i = 0;
      while (i < n && (strcmp(seen[i].family, fam) != 0 ||
                       strcmp(seen[i].label, rows[r].label) != 0))
        i++;
      ck_assert_msg(i < n,
                    "docs/operations.md's table of label values lists %s "
                    "for %s; /metrics has no such label there",
                    rows[r].label, fam);
      /* an _info family writes one of the values its row lists: the
       * build's and the machine's */
      size_t fl = strlen(fam);
      if (fl > 5 && strcmp(fam + fl - 5, "_info") == 0) {
        ck_assert_msg(strstr(rows[r].values, seen[i].values) != NULL,
                      "/metrics writes %s's %s as %.*s; docs/operations.md's "
                      "table of label values lists %.*s",
                      fam, rows[r].label, (int)strlen(seen[i].values) - 2,
                      seen[i].values + 1, (int)strlen(rows[r].values) - 2,
                      rows[r].values + 1);
        continue;
      }
      ck_assert_msg(strcmp(seen[i].values, rows[r].values) == 0,
                    "/metrics writes %s's %s as %.*s; docs/operations.md's "
                    "table of label values lists %.*s",
                    fam, rows[r].label, (int)strlen(seen[i].values) - 2,
                    seen[i].values + 1, (int)strlen(rows[r].values) - 2,
                    rows[r].values + 1);
    }
  for (size_t i = 0; i < n; i++) {
    if (strcmp(seen[i].label, "status") == 0 ||
        strcmp(seen[i].label, "version") == 0 ||
        strcmp(seen[i].label, "thread") == 0)
      continue;
    char fam[100];
    snprintf(fam, sizeof fam, ",%s,", seen[i].family);
    size_t r = 0;
    while (r < nr && (strcmp(rows[r].label, seen[i].label) != 0 ||
                      strstr(rows[r].families, fam) == NULL))
      r++;
    ck_assert_msg(r < nr,
                  "/metrics labels %s with %s (%.*s); docs/operations.md's "
                  "table of label values has no row for it: add one",
                  seen[i].family, seen[i].label,
                  (int)strlen(seen[i].values) - 2, seen[i].values + 1);
  }
  free(t);
  attnd_metrics_free(m);
}
END_TEST

/* A request answered with each error's status, by each protocol's column,
 * counts under that status's label: an error code added with a status the
 * metrics did not list would have counted as "other". */
START_TEST(test_every_error_status_labelled) {
  attnd_metrics_t *m = attnd_metrics_new();
  for (int c = 0; c < ATTND_ERR_COUNT; c++) {
    attnd_metrics_request(m, ATTND_PROTO_V1, attnd_error_status(c));
    attnd_metrics_request(m, ATTND_PROTO_V2, attnd_error_status_v2(c));
  }
  attnd_metrics_request(m, ATTND_PROTO_V1, 299); /* no status of attnd's */
  char *t = render(m);
  for (int c = 0; c < ATTND_ERR_COUNT; c++) {
    char name[120];
    snprintf(name, sizeof name,
             "attnd_requests_total{protocol=\"v1\",status=\"%d\"}",
             attnd_error_status(c));
    ck_assert_msg(sample(t, name) >= 1, "%s (%s) not counted", name,
                  attnd_error_name(c));
    snprintf(name, sizeof name,
             "attnd_requests_total{protocol=\"v2\",status=\"%d\"}",
             attnd_error_status_v2(c));
    ck_assert_msg(sample(t, name) >= 1, "%s (%s) not counted", name,
                  attnd_error_name(c));
  }
  ck_assert_double_eq(
      sample(t, "attnd_requests_total{protocol=\"v1\",status=\"other\"}"), 1);
  ck_assert_double_eq(
      sample(t, "attnd_requests_total{protocol=\"v2\",status=\"other\"}"), 0);
  free(t);
  attnd_metrics_free(m);
}
END_TEST

/* ---- the process collector and attnd_build_info, on a real attnd ------- */

/* /metrics on c, a connection kept alive, read by the strict reader. The
 * caller frees it. */
static char *scrape_on(sh_client_t *c) {
  sh_resp_t r;
  sh_req_t q = {.method = "GET", .path = "/metrics"};
  ck_assert_msg(sh_http(c, &q, &r) == 0 && r.status == 200, "%ld %s", r.status,
                r.error);
  prom_t p;
  prom_assert(r.body, &p);
  prom_free(&p);
  char *t = strdup(r.body);
  sh_resp_free(&r);
  return t;
}

/* Connections held open, each with a request answered on it. */
#define HELD 3

/* The process collector's families on a real attnd, each against what
 * the test reads of the process from outside: its start between the
 * test's clock before it started and after (in whole seconds, the boot
 * time's), its descriptors as /proc/<pid>/fd lists them at the same time
 * (a scrape's own connection kept alive, so that nothing opens or closes
 * between), HELD more while HELD connections are held open, its soft
 * limit on them (set below the hard one, so that the two differ); and
 * attnd_build_info labelled with `attnd --version`'s version, the
 * backends this build has and the SIMD path this CPU runs. */
START_TEST(test_process_families) {
  struct rlimit was, low;
  ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &was), 0);
  low = was;
  if (was.rlim_max == RLIM_INFINITY || was.rlim_max > 512)
    low.rlim_cur = 512; /* above what 16 connections need: attnd keeps it */
  ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
  static const char *const args[] = {"--max-connections", "16", NULL};
  time_t t0 = time(NULL);
  sh_server_t s;
  int started = sh_server_start(&s, args);
  time_t t1 = time(NULL);
  ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &was), 0);
  ck_assert_msg(started == 0, "attnd did not start:\n%s", s.log);
  struct rlimit child;
  ck_assert_int_eq(prlimit(s.pid, RLIMIT_NOFILE, NULL, &child), 0);

  sh_client_t c;
  sh_client_init(&c, s.port);
  char *t = scrape_on(&c);
  double start = sample(t, "process_start_time_seconds");
  ck_assert_msg(start >= (double)t0 - 2 && start <= (double)t1 + 2,
                "process_start_time_seconds %.2f; attnd started between %lld "
                "and %lld",
                start, (long long)t0, (long long)t1);
  double fds = sample(t, "process_open_fds");
  int listed = sh_proc_fds(s.pid);
  ck_assert_msg(fds == listed, "process_open_fds %g; /proc lists %d", fds,
                listed);
  ck_assert_double_eq(sample(t, "process_max_fds"), (double)child.rlim_cur);
  ck_assert_msg(child.rlim_cur != child.rlim_max ||
                    low.rlim_cur == was.rlim_cur,
                "the soft limit is the hard one: nothing tells them apart");
  ck_assert_double_gt(sample(t, "process_cpu_seconds_total"), 0);
  double rss = sample(t, "process_resident_memory_bytes");
  ck_assert_msg(rss >= 1 << 20 &&
                    rss <= sample(t, "process_virtual_memory_bytes"),
                "resident %g, virtual %g", rss,
                sample(t, "process_virtual_memory_bytes"));

  /* the version that `attnd --version` prints, and this build and CPU */
  char bin[512], cmd[600], line[128], want[512];
  snprintf(cmd, sizeof cmd, "%s --version",
           sh_bin_beside("attnd", bin, sizeof bin));
  FILE *f = popen(cmd, "r");
  ck_assert_ptr_nonnull(f);
  ck_assert_ptr_nonnull(fgets(line, sizeof line, f));
  pclose(f);
  line[strcspn(line, "\n")] = 0;
  ck_assert_msg(strncmp(line, "attnd ", 6) == 0, "%s", line);
  attn_backend_t be;
  attn_cuda_info_t ci;
  attn_backend_info(&be);
  attn_cuda_info(&ci);
  snprintf(want, sizeof want,
           "attnd_build_info{version=\"%s\",backends=\"%s\",simd=\"%s\"}",
           line + 6, ci.built ? "cpu+cuda" : "cpu", attn_isa_name(be.isa));
  ck_assert_msg(sh_metric_in(t, want) == 1, "no %s in:\n%s", want, t);
  free(t);

  /* HELD connections more, each answered */
  int held[HELD];
  for (int i = 0; i < HELD; i++) {
    static const char get[] =
        "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    static char buf[4096];
    held[i] = sh_connect(s.port);
    ck_assert_int_ge(held[i], 0);
    ck_assert_int_eq(sh_send_all(held[i], get, strlen(get)), 0);
    ck_assert_int_gt(sh_recv_reply(held[i], buf, sizeof buf, 10000), 0);
  }
  t = scrape_on(&c);
  double more = sample(t, "process_open_fds");
  listed = sh_proc_fds(s.pid);
  ck_assert_msg(more == fds + HELD && more == listed,
                "process_open_fds %g with %d connections held, %g before; "
                "/proc lists %d",
                more, HELD, fds, listed);
  free(t);
  for (int i = 0; i < HELD; i++)
    close(held[i]);
  sh_client_free(&c);
  ck_assert_int_eq(sh_server_stop(&s, 15.0), 0);
}
END_TEST

Suite *test_suite(void) {
  Suite *s = suite_create("metrics");
  TCase *tc = tcase_create("render");
  tcase_add_test(tc, test_sums_of_short_observations);
  tcase_add_test(tc, test_buckets);
  tcase_add_test(tc, test_buckets_cover);
  tcase_add_test(tc, test_every_error_status_labelled);
  tcase_add_test(tc, test_tls_families);
  tcase_add_test(tc, test_reload_families);
  tcase_add_test(tc, test_reader_refuses);
  tcase_add_test(tc, test_render_reads);
  tcase_add_test(tc, test_documented);
  tcase_add_test(tc, test_label_values_documented);
  tcase_add_test(tc, test_label_values_listed);
  suite_add_tcase(s, tc);
  tc = tcase_create("process");
  tcase_add_test(tc, test_process_families);
  suite_add_tcase(s, tc);
  tc = tcase_create("scrape");
  tcase_add_unchecked_fixture(tc, start_server, stop_server);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_scrape_after_traffic);
  tcase_add_test(tc, test_unrouted_protocol);
  suite_add_tcase(s, tc);
  tc = tcase_create("batch");
  tcase_add_unchecked_fixture(tc, start_batch_server, stop_server);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_batched_compute_time);
  tcase_add_test(tc, test_batched_expired_compute_time);
  suite_add_tcase(s, tc);
  tc = tcase_create("paths");
  tcase_add_unchecked_fixture(tc, start_paths_server, stop_server);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_every_path_counted);
  suite_add_tcase(s, tc);
  return s;
}

void test_setup(void) {
  sh_init();
}
