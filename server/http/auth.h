/* server/http/auth.h: API keys, checked on every request that is not public.
 *
 * Clients send "Authorization: Bearer <key>". A key set holds the SHA-256
 * of each configured key, never the key: a presented key is hashed and
 * compared with every hash of the set in constant time, with no early exit,
 * so neither the position nor the common prefix of a near miss shows in the
 * time taken. The keys come from api_keys (a comma-separated list) and
 * api_keys_file (one key a line, '#' comments), re-read on SIGHUP: the
 * reloading thread builds a new set, swaps it in under a write lock and
 * frees the old one, so an HTTP thread sees the old set or the new one,
 * never a half-loaded or a freed one. A key is 1 to ATTND_AUTH_MAX_KEY
 * characters of RFC 6750's b64token (codec/util.h, attnd_auth_key_char). No
 * message of this module contains a key.
 *
 * Pure: no server, no HTTP library; tests/check_auth.c tests it alone. */
#ifndef ATTND_AUTH_H
#define ATTND_AUTH_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "codec/util.h" /* ATTND_AUTH_MAX_KEY, attnd_auth_key_char */

#define ATTND_AUTH_MAX_FILE (1 << 20) /* larger key files are refused */

/* An immutable set of key hashes. */
typedef struct attnd_keyset {
  size_t n, cap;
  uint8_t (*hash)[32]; /* n SHA-256 digests, room for cap */
} attnd_keyset_t;

/* Key sets allocated and not yet freed, for tests: a reload must give the
 * set it replaces back. */
extern _Atomic long attnd__keysets_live;

/* What a request's Authorization header amounts to. */
typedef enum {
  ATTND_AUTH_OK,        /* a configured key */
  ATTND_AUTH_MISSING,   /* no Authorization header */
  ATTND_AUTH_MALFORMED, /* not "Bearer <token>" */
  ATTND_AUTH_INVALID    /* a well-formed token that is not a key */
} attnd_auth_result_t;

/* The API keys and the public paths of one server.
 *
 * `current` is read by any thread under a read lock of `lock`, held for
 * the whole comparison, and replaced only by attnd_auth_reload under the
 * write lock; the replaced set is then freed, as no reader can still hold
 * it. So a reload keeps nothing of the set before, however many come. The
 * lock prefers writers, so that a steady flow of requests cannot hold a
 * reload off. */
typedef struct attnd_auth {
  int enabled;             /* api_keys or api_keys_file configured */
  char *inline_keys;       /* api_keys, owned */
  char *file;              /* api_keys_file, owned; NULL when none */
  char **public_paths;     /* owned, NULL-terminated */
  pthread_rwlock_t lock;   /* guards `current` (see above) */
  attnd_keyset_t *current; /* NULL when keys are off */
} attnd_auth_t;

/* Sets up `a` from the configuration strings: `keys` (api_keys, may be ""),
 * `file` (api_keys_file, "" for none) and `public_paths` (comma-separated
 * exact paths). Reads the file. Returns 0, or -1 with a message naming the
 * key and the line or position at fault (never a key) in msg; `a` needs
 * attnd_auth_free either way. Main thread, at start. */
int attnd_auth_init(attnd_auth_t *a, const char *keys, const char *file,
                    const char *public_paths, char *msg, size_t msg_size);

/* Checks public_paths: each entry a path, starting with '/' (a request's
 * path always does, so another entry could never match). Returns 0, or -1
 * with msg naming the entry. Any thread. */
int attnd_auth_check_paths(const char *public_paths, char *msg,
                           size_t msg_size);

/* Re-reads api_keys_file (api_keys stays as configured) and publishes the
 * new set. On failure the old set stays and -1 comes back with the reason
 * in msg. Returns the number of keys in force, or -1. One thread at a time
 * (the loop thread, on SIGHUP); HTTP threads may check meanwhile. */
int attnd_auth_reload(attnd_auth_t *a, char *msg, size_t msg_size);

/* Frees everything `a` owns. No thread may be checking any more. */
void attnd_auth_free(attnd_auth_t *a);

/* Whether `path` is one of the public paths (exact match). Any thread. */
int attnd_auth_is_public(const attnd_auth_t *a, const char *path);

/* Checks an Authorization header value (NULL when absent) against the
 * current set. Any thread. */
attnd_auth_result_t attnd_auth_check(const attnd_auth_t *a,
                                     const char *authorization);

/* The check of one request: ATTND_AUTH_OK when keys are off or `path` is
 * public, else attnd_auth_check of its Authorization header (NULL when
 * absent). Any thread. */
attnd_auth_result_t attnd_auth_request(const attnd_auth_t *a, const char *path,
                                       const char *authorization);

/* The 401 reply's message for `why` (a static string, naming no key). */
const char *attnd_auth_message(attnd_auth_result_t why);

/* The WWW-Authenticate value of a 401 to a request with this
 * Authorization header (NULL when absent), per RFC 6750 3.1:
 * error="invalid_token" when the header is of the Bearer scheme (a token
 * that is wrong, malformed or missing), none for another scheme, which
 * holds no bearer token. Static. */
const char *attnd_auth_challenge(const char *authorization);

/* The number of keys in force. Any thread. */
size_t attnd_auth_count(const attnd_auth_t *a);

/* ---- the parts, for tests ------------------------------------------------ */

/* Finds the token of "Bearer <token>" (the scheme case-insensitive, spaces
 * around the token allowed). Returns 0 with *tok and *len set, or -1 when
 * the header is not of that form or the token is empty, longer than
 * ATTND_AUTH_MAX_KEY or holds a character outside b64token. */
int attnd_auth_bearer(const char *header, const char **tok, size_t *len);

/* Whether a[0..n) equals b[0..n), in time that depends on n only. */
int attnd_auth_equal(const uint8_t *a, const uint8_t *b, size_t n);

/* Appends the keys of `text`, separated by `sep` (',' for api_keys, '\n'
 * for a file, where a line starting with '#' is a comment), to *set,
 * which is created when NULL. Blank entries are skipped and spaces around a
 * key trimmed. `what` names the source in messages ("api_keys", a file).
 * Returns 0, or -1 with msg naming the entry's position (never its text);
 * *set is left for the caller to free either way. */
int attnd_keyset_parse(attnd_keyset_t **set, const char *text, char sep,
                       const char *what, char *msg, size_t msg_size);

/* Whether the SHA-256 of token[0..len) is in `set`, comparing with every
 * hash of the set. */
int attnd_keyset_has(const attnd_keyset_t *set, const char *token, size_t len);

/* Frees `set`; NULL is a no-op. */
void attnd_keyset_free(attnd_keyset_t *set);

#endif
