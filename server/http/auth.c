/* server/http/auth.c: API keys. See auth.h. */
#include "http/auth.h"
#include "list.h"

#include <errno.h>
#include <gnutls/crypto.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

_Atomic long attnd__keysets_live;

/* SHA-256 is always in GnuTLS, which libmicrohttpd links for TLS. A
 * failure (the library out of memory) fails closed: no set is built, no
 * presented key matches. */
static int sha256(const void *p, size_t n, uint8_t out[32]) {
  return gnutls_hash_fast(GNUTLS_DIG_SHA256, p, n, out) < 0 ? -1 : 0;
}

int attnd_auth_equal(const uint8_t *a, const uint8_t *b, size_t n) {
  uint8_t d = 0;
  for (size_t i = 0; i < n; i++) /* OR of every difference: no branch */
    d |= a[i] ^ b[i];
  /* An empty asm that "changes" d: the compiler cannot reason about its
   * value, so it cannot turn the loop into an early exit either. */
  __asm__ volatile("" : "+r"(d));
  return d == 0;
}

/* Where the credentials of a header of the Bearer scheme (case-insensitive,
 * RFC 9110 11.1) start, just past "Bearer", or NULL for another scheme or
 * none. */
static const char *bearer_scheme(const char *h) {
  if (h == NULL)
    return NULL;
  while (*h == ' ' || *h == '\t')
    h++;
  if (strncasecmp(h, "Bearer", 6) != 0 ||
      (h[6] != ' ' && h[6] != '\t' && h[6] != 0))
    return NULL;
  return h + 6;
}

int attnd_auth_bearer(const char *h, const char **tok, size_t *len) {
  h = bearer_scheme(h);
  if (h == NULL || (*h != ' ' && *h != '\t'))
    return -1;
  while (*h == ' ' || *h == '\t')
    h++;
  size_t n = 0;
  while (attnd_auth_key_char((unsigned char)h[n]))
    n++;
  const char *end = h + n;
  while (*end == ' ' || *end == '\t')
    end++;
  if (n == 0 || n > ATTND_AUTH_MAX_KEY || *end != 0)
    return -1;
  *tok = h;
  *len = n;
  return 0;
}

/* Appends key's hash. The room doubles when full, so that a file of n
 * keys costs O(log n) reallocations and O(n) bytes copied, not one of
 * each per key. */
static int add_hash(attnd_keyset_t *s, const char *key, size_t n) {
  if (s->n == s->cap) {
    size_t cap = s->cap ? 2 * s->cap : 16;
    uint8_t(*h)[32] = realloc(s->hash, cap * sizeof *h);
    if (h == NULL)
      return -1;
    s->hash = h;
    s->cap = cap;
  }
  if (sha256(key, n, s->hash[s->n]) < 0)
    return -1;
  s->n++;
  return 0;
}

int attnd_keyset_parse(attnd_keyset_t **set, const char *text, char sep,
                       const char *what, char *msg, size_t msz) {
  if (*set == NULL) {
    if ((*set = calloc(1, sizeof **set)) == NULL)
      return snprintf(msg, msz, "%s: out of memory", what), -1;
    atomic_fetch_add_explicit(&attnd__keysets_live, 1, memory_order_relaxed);
  }
  const char *unit = sep == '\n' ? "line" : "key";
  const char *p = text, *a, *b;
  for (int pos = 1; attnd_list_next(&p, sep, &a, &b); pos++) {
    if (a == b || (sep == '\n' && *a == '#'))
      continue;
    for (const char *c = a; c < b; c++)
      if (!attnd_auth_key_char((unsigned char)*c))
        return snprintf(msg, msz,
                        "%s: %s %d has a character outside letters, digits "
                        "and - . _ ~ + / = (position %d)",
                        what, unit, pos, (int)(c - a) + 1),
               -1;
    if (b - a > ATTND_AUTH_MAX_KEY)
      return snprintf(msg, msz, "%s: %s %d is longer than %d characters", what,
                      unit, pos, ATTND_AUTH_MAX_KEY),
             -1;
    if (add_hash(*set, a, (size_t)(b - a)) < 0)
      return snprintf(msg, msz, "%s: out of memory or no SHA-256", what), -1;
  }
  return 0;
}

int attnd_keyset_has(const attnd_keyset_t *set, const char *token, size_t len) {
  uint8_t h[32];
  if (sha256(token, len, h) < 0)
    return 0;
  int found = 0;
  for (size_t i = 0; i < set->n; i++) { /* every key: no early exit */
    found |= attnd_auth_equal(h, set->hash[i], 32);
    __asm__ volatile("" : "+r"(found)); /* found stays unknown: no exit */
  }
  return found;
}

void attnd_keyset_free(attnd_keyset_t *set) {
  if (set == NULL)
    return;
  atomic_fetch_sub_explicit(&attnd__keysets_live, 1, memory_order_relaxed);
  free(set->hash);
  free(set);
}

/* Reads `path` whole into a new NUL-terminated string. */
static char *read_file(const char *path, char *msg, size_t msz) {
  FILE *f = fopen(path, "r");
  if (f == NULL) {
    snprintf(msg, msz, "api_keys_file: cannot read %s: %s", path,
             strerror(errno));
    return NULL;
  }
  char *text = malloc(ATTND_AUTH_MAX_FILE + 1);
  size_t n = text ? fread(text, 1, ATTND_AUTH_MAX_FILE + 1, f) : 0;
  int err = ferror(f);
  fclose(f);
  if (text == NULL || err || n > ATTND_AUTH_MAX_FILE) {
    snprintf(msg, msz, "api_keys_file: cannot read %s: %s", path,
             text == NULL ? "out of memory"
             : err        ? "read error"
                          : "larger than 1 MiB");
    free(text);
    return NULL;
  }
  text[n] = 0;
  if (strlen(text) != n) {
    snprintf(msg, msz, "api_keys_file: %s holds a NUL byte", path);
    free(text);
    return NULL;
  }
  return text;
}

/* A new set from api_keys and the file, or NULL with msg set. */
static attnd_keyset_t *build(const attnd_auth_t *a, char *msg, size_t msz) {
  attnd_keyset_t *set = NULL;
  if (attnd_keyset_parse(&set, a->inline_keys, ',', "api_keys", msg, msz) < 0)
    goto fail;
  if (a->file) {
    char *text = read_file(a->file, msg, msz);
    char what[600];
    snprintf(what, sizeof what, "api_keys_file %s", a->file);
    int rc = text ? attnd_keyset_parse(&set, text, '\n', what, msg, msz) : -1;
    free(text);
    if (rc < 0)
      goto fail;
  }
  return set;
fail:
  attnd_keyset_free(set);
  return NULL;
}

int attnd_auth_check_paths(const char *public_paths, char *msg, size_t msz) {
  const char *p = public_paths, *a, *b;
  for (int pos = 1; attnd_list_next(&p, ',', &a, &b); pos++)
    if (a < b && *a != '/')
      return snprintf(msg, msz,
                      "public_paths: entry %d '%.*s' is not a path (expected "
                      "/...)",
                      pos, (int)(b - a > 200 ? 200 : b - a), a),
             -1;
  return 0;
}

int attnd_auth_init(attnd_auth_t *a, const char *keys, const char *file,
                    const char *public_paths, char *msg, size_t msz) {
  memset(a, 0, sizeof *a);
  /* A writer waiting keeps new readers out: otherwise HTTP threads that
   * check back to back could hold a reload off for as long as they come. */
  pthread_rwlockattr_t attr;
  pthread_rwlockattr_init(&attr);
  pthread_rwlockattr_setkind_np(&attr,
                                PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
  int rc = pthread_rwlock_init(&a->lock, &attr);
  pthread_rwlockattr_destroy(&attr);
  if (rc != 0)
    return snprintf(msg, msz, "api_keys: no lock: %s", strerror(rc)), -1;
  if (attnd_auth_check_paths(public_paths, msg, msz) < 0)
    return -1;
  a->inline_keys = strdup(keys);
  a->file = file[0] ? strdup(file) : NULL;
  size_t n = 2;
  for (const char *p = public_paths; *p; p++)
    n += *p == ',';
  a->public_paths = calloc(n, sizeof *a->public_paths);
  if (a->inline_keys == NULL || (file[0] && a->file == NULL) ||
      a->public_paths == NULL)
    return snprintf(msg, msz, "api_keys: out of memory"), -1;
  size_t k = 0;
  for (const char *p = public_paths, *s, *t; attnd_list_next(&p, ',', &s, &t);)
    if (t > s && (a->public_paths[k++] = strndup(s, (size_t)(t - s))) == NULL)
      return snprintf(msg, msz, "public_paths: out of memory"), -1;
  a->enabled = keys[0] != 0 || a->file != NULL;
  if (!a->enabled)
    return 0;
  attnd_keyset_t *set = build(a, msg, msz);
  if (set == NULL)
    return -1;
  a->current = set; /* no thread checks yet */
  return 0;
}

int attnd_auth_reload(attnd_auth_t *a, char *msg, size_t msz) {
  if (!a->enabled)
    return 0;
  attnd_keyset_t *set = build(a, msg, msz);
  if (set == NULL)
    return -1;
  /* Once the write lock is ours no HTTP thread compares against the old
   * set, and none can reach it after: it can go. */
  pthread_rwlock_wrlock(&a->lock);
  attnd_keyset_t *old = a->current;
  a->current = set;
  pthread_rwlock_unlock(&a->lock);
  attnd_keyset_free(old);
  return (int)set->n;
}

void attnd_auth_free(attnd_auth_t *a) {
  attnd_keyset_free(a->current);
  pthread_rwlock_destroy(&a->lock);
  for (size_t i = 0; a->public_paths && a->public_paths[i]; i++)
    free(a->public_paths[i]);
  free(a->public_paths);
  free(a->inline_keys);
  free(a->file);
  memset(a, 0, sizeof *a);
}

int attnd_auth_is_public(const attnd_auth_t *a, const char *path) {
  for (size_t i = 0; a->public_paths && a->public_paths[i]; i++)
    if (strcmp(a->public_paths[i], path) == 0)
      return 1;
  return 0;
}

attnd_auth_result_t attnd_auth_check(const attnd_auth_t *a,
                                     const char *authorization) {
  if (authorization == NULL)
    return ATTND_AUTH_MISSING;
  const char *tok;
  size_t len;
  if (attnd_auth_bearer(authorization, &tok, &len) < 0)
    return ATTND_AUTH_MALFORMED;
  /* The lock is the one part of `a` a check changes; `a` is const to say
   * that a check changes nothing else. */
  pthread_rwlock_t *lock = (pthread_rwlock_t *)&a->lock;
  pthread_rwlock_rdlock(lock);
  int ok = a->current && attnd_keyset_has(a->current, tok, len);
  pthread_rwlock_unlock(lock);
  return ok ? ATTND_AUTH_OK : ATTND_AUTH_INVALID;
}

size_t attnd_auth_count(const attnd_auth_t *a) {
  pthread_rwlock_t *lock = (pthread_rwlock_t *)&a->lock;
  pthread_rwlock_rdlock(lock);
  size_t n = a->current ? a->current->n : 0;
  pthread_rwlock_unlock(lock);
  return n;
}

attnd_auth_result_t attnd_auth_request(const attnd_auth_t *a, const char *path,
                                       const char *authorization) {
  if (!a->enabled || attnd_auth_is_public(a, path))
    return ATTND_AUTH_OK;
  return attnd_auth_check(a, authorization);
}

const char *attnd_auth_message(attnd_auth_result_t why) {
  switch (why) {
  case ATTND_AUTH_MISSING:
    return "an API key is needed: send 'Authorization: Bearer <key>'";
  case ATTND_AUTH_MALFORMED:
    return "the Authorization header is not 'Bearer <key>' with a key of "
           "letters, digits and - . _ ~ + / =";
  case ATTND_AUTH_INVALID:
    return "the API key is not valid";
  default:
    return "";
  }
}

const char *attnd_auth_challenge(const char *authorization) {
  /* RFC 6750 3.1: a request by another scheme (or none) lacks this one's
   * authentication information, and gets no error code */
  return bearer_scheme(authorization)
             ? "Bearer realm=\"attnd\", error=\"invalid_token\""
             : "Bearer realm=\"attnd\"";
}
