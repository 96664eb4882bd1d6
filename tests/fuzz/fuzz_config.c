/* tests/fuzz/fuzz_config.c: the config file, ATTND_* and flags
 * (server/config.h attnd_config_load).
 *
 * Input: the config file's text up to the first NUL byte; then NUL-separated
 * entries: NAME=value (not starting with '-') goes to the environment, any
 * other entry to argv (flags and their values). The file lives in a memfd, read
 * through /proc/self/fd/N. Checked: no crash and no leak (ASan); a failure
 * leaves a message; a success leaves NUL-terminated strings, resolved "auto"
 * values and consistent timeouts; --print-config's text never shows an API key
 * (it is the same with keys all "k"), and it reads back, as it is, to the same
 * configuration but api_keys, which it does not echo.
 *
 * --help and --version end the loading before anything is read, and so
 * end the checks too.
 *
 * Left out, so that a run stays quiet and cannot block: flags that name
 * another config file (--config), and ATTND_ names that are no key (each
 * would print a warning per run). */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "config.h"
#include "fuzz.h"

#define MAX_ENTRIES 64

static int file_fd = -1, back_fd = -1;
static char file_path[64], back_path[64];
/* The keys, from --print-config of the defaults: "name\0name\0...\0". */
static char key_names[4096];

static int memfd(char *path, size_t n) {
  int fd = memfd_create("attnd-fuzz-config", 0);
  FUZZ_CHECK(fd >= 0, "memfd_create failed");
  snprintf(path, n, "/proc/self/fd/%d", fd);
  return fd;
}

static void put_file(int fd, const void *text, size_t n) {
  FUZZ_CHECK(ftruncate(fd, 0) == 0 && pwrite(fd, text, n, 0) == (ssize_t)n,
             "cannot write the memfd");
}

/* --print-config's text of cfg, in a new string. */
static char *print_config(const attnd_config_t *cfg, size_t *len) {
  char *text = NULL;
  FILE *f = open_memstream(&text, len);
  FUZZ_CHECK(f != NULL, "open_memstream failed");
  attnd_config_print(cfg, NULL, f);
  fclose(f);
  return text;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  file_fd = memfd(file_path, sizeof file_path);
  back_fd = memfd(back_path, sizeof back_path);
  attnd_config_t cfg;
  attnd_config_load_t how;
  char msg[512], *args[] = {"attnd", NULL};
  FUZZ_CHECK(attnd_config_load(&cfg, &how, 1, args, NULL, 4, msg, sizeof msg) ==
                 0,
             "the defaults do not load: %s", msg);
  size_t len, k = 0;
  char *text = print_config(&cfg, &len);
  for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
    size_t n = strcspn(line, " =");
    FUZZ_CHECK(k + n + 2 < sizeof key_names, "too many keys");
    memcpy(key_names + k, line, n);
    k += n + 1;
  }
  free(text);
  return 0;
}

/* Whether the environment entry e (NAME=value) should be passed: any entry
 * that is not ATTND_, and ATTND_<key> (spelt as config.c's find_key reads
 * it) or the service-link names config.c leaves alone. */
static int env_wanted(const char *e) {
  if (strncmp(e, "ATTND_", 6) != 0)
    return 1;
  const char *name = e + 6, *eq = strchr(name, '=');
  if (eq == NULL || !strncmp(name, "SERVICE_", 8) ||
      !strncmp(name, "PORT_", 5) || !strncmp(name, "CONFIG=", 7) ||
      !strncmp(name, "BLAS_REEXEC=", 12))
    return 1;
  size_t n = (size_t)(eq - name);
  for (const char *k = key_names; *k; k += strlen(k) + 1) {
    if (strlen(k) != n)
      continue;
    size_t j = 0;
    while (j < n &&
           (name[j] == '-' ? '_' : tolower((unsigned char)name[j])) == k[j])
      j++;
    if (j == n)
      return 1;
  }
  return 0;
}

/* The string members of attnd_config_t. */
#define STR_FIELDS(X)                                                          \
  X(host)                                                                      \
  X(access_log)                                                                \
  X(blas_coretype)                                                             \
  X(api_keys)                                                                  \
  X(api_keys_file)                                                             \
  X(public_paths) X(tls_cert_file) X(tls_key_file) X(cors_allow_origins)

static void check_terminated(const char *s, size_t size, const char *what) {
  FUZZ_CHECK(memchr(s, '\0', size) != NULL, "%s is not terminated", what);
}

/* Zeroes what follows each string's terminator (a shorter value written
 * over a longer one leaves the longer one's tail), for memcmp. */
static void normalize(attnd_config_t *cfg) {
#define ZERO_TAIL(f)                                                           \
  {                                                                            \
    size_t n = strlen(cfg->f);                                                 \
    memset(cfg->f + n, 0, sizeof cfg->f - n);                                  \
  }
  STR_FIELDS(ZERO_TAIL)
#undef ZERO_TAIL
}

/* --print-config's text shows no configured key: it is byte for byte the
 * text printed with as many keys that are all "k" (api_keys is a comment
 * that counts them). The other strings are emptied first, so that no
 * other value can hold a key's text. */
static void check_redacted(const attnd_config_t *cfg) {
  int keys = 0; /* a list of no key ("," say) prints as empty */
  for (const char *c = cfg->api_keys; *c; c++)
    keys += *c != ',' && *c != ' ' &&
            (c == cfg->api_keys || c[-1] == ',' || c[-1] == ' ');
  if (keys == 0)
    return;
  attnd_config_t only = *cfg;
#define EMPTY(f) only.f[0] = '\0';
  STR_FIELDS(EMPTY)
#undef EMPTY
  memcpy(only.api_keys, cfg->api_keys, sizeof only.api_keys);
  size_t len, ref_len;
  char *text = print_config(&only, &len);
  FUZZ_CHECK(strstr(text, "\napi_keys = ") == NULL,
             "--print-config echoes api_keys:\n%s", text);
  const char *line = strstr(text, "\n# api_keys: ");
  int n = -1;
  FUZZ_CHECK(line != NULL && sscanf(line, "\n# api_keys: %d key", &n) == 1 &&
                 n >= 1 && 2 * (size_t)n < sizeof only.api_keys,
             "--print-config has no api_keys comment:\n%s", text);
  attnd_config_t ref = only;
  memset(ref.api_keys, 0, sizeof ref.api_keys);
  char *w = ref.api_keys; /* "k,k,...,k" */
  for (int i = 0; i < n; i++)
    w += sprintf(w, i ? ",k" : "k");
  char *want = print_config(&ref, &ref_len);
  FUZZ_CHECK(len == ref_len && memcmp(text, want, len) == 0,
             "--print-config's text depends on the keys' text:\n%s", text);
  free(want);
  free(text);
}

/* --print-config reads back, as a config file, to the same values: every
 * byte of every string, quotes, '#', newlines and edge spaces included. */
static void check_reads_back(const attnd_config_t *cfg, const char *text,
                             size_t len) {
  /* api_keys is a comment: the file gets none, and so must cfg */
  attnd_config_t want = *cfg;
  memset(want.api_keys, 0, sizeof want.api_keys);
  normalize(&want);
  put_file(back_fd, text, len);
  attnd_config_t got;
  attnd_config_load_t how;
  char msg[512], *args[] = {"attnd", "--config", back_path, NULL};
  int r = attnd_config_load(&got, &how, 3, args, NULL, 4, msg, sizeof msg);
  FUZZ_CHECK(r == 0, "--print-config does not read back: %s\n%.*s", msg,
             (int)len, text);
  memset(got.api_keys, 0, sizeof got.api_keys);
  normalize(&got);
  FUZZ_CHECK(memcmp(&got, &want, sizeof got) == 0,
             "--print-config reads back to another configuration:\n%.*s",
             (int)len, text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* a private, NUL-terminated copy, cut into the file and the entries */
  char *in = malloc(size + 1);
  FUZZ_CHECK(in != NULL, "out of memory");
  memcpy(in, data, size);
  in[size] = '\0';
  size_t file_len = strlen(in);
  put_file(file_fd, in, file_len);

  char *argv[MAX_ENTRIES + 4] = {"attnd", "--config", file_path};
  char *envp[MAX_ENTRIES + 1];
  int argc = 3, envc = 0;
  for (size_t i = file_len + 1; i < size && argc + envc < MAX_ENTRIES;
       i += strlen(in + i) + 1) {
    char *e = in + i;
    if (e[0] != '-' && strchr(e, '=')) {
      if (env_wanted(e))
        envp[envc++] = e;
    } else if (strncmp(e, "--config", 8) != 0) {
      argv[argc++] = e;
    }
  }
  argv[argc] = NULL;
  envp[envc] = NULL;

  attnd_config_t cfg;
  attnd_config_load_t how;
  char msg[512];
  memset(msg, 0, sizeof msg);
  int r = attnd_config_load(&cfg, &how, argc, argv, envp, 4, msg, sizeof msg);
  if (r != 0) {
    FUZZ_CHECK(r == -1, "attnd_config_load returned %d", r);
    FUZZ_CHECK(msg[0] != '\0', "a failure without a message");
    check_terminated(msg, sizeof msg, "the message");
    free(in);
    return 0;
  }
  if (how.help || how.version) { /* these read nothing: cfg is unresolved */
    free(in);
    return 0;
  }
#define TERMINATED(f) check_terminated(cfg.f, sizeof cfg.f, #f);
  STR_FIELDS(TERMINATED)
#undef TERMINATED
  FUZZ_CHECK(cfg.workers >= 1 && cfg.threads_per_request >= 0 &&
                 cfg.max_threads_per_request >= 1 && cfg.http_threads >= 1 &&
                 cfg.max_memory_bytes > 0 && cfg.kv_cache_bytes >= 0 &&
                 cfg.max_device_memory_bytes >= 0,
             "auto left unresolved: workers %lld, threads %lld, http %lld, "
             "memory %lld, kv cache %lld, device memory %lld",
             (long long)cfg.workers, (long long)cfg.threads_per_request,
             (long long)cfg.http_threads, (long long)cfg.max_memory_bytes,
             (long long)cfg.kv_cache_bytes,
             (long long)cfg.max_device_memory_bytes);
  FUZZ_CHECK(cfg.pinned_memory_bytes <= 0 ||
                 cfg.kv_cache_bytes + cfg.pinned_memory_bytes <
                     cfg.max_memory_bytes,
             "pinned_memory_bytes %lld with kv_cache_bytes %lld leaves "
             "requests nothing of max_memory_bytes %lld",
             (long long)cfg.pinned_memory_bytes, (long long)cfg.kv_cache_bytes,
             (long long)cfg.max_memory_bytes);
  FUZZ_CHECK(cfg.default_timeout_ms <= cfg.max_timeout_ms,
             "default_timeout_ms %lld above max_timeout_ms %lld",
             (long long)cfg.default_timeout_ms, (long long)cfg.max_timeout_ms);
  size_t len;
  char *text = print_config(&cfg, &len);
  check_redacted(&cfg);
  check_reads_back(&cfg, text, len);
  free(text);
  free(in);
  return 0;
}
