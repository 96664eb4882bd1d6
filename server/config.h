/* server/config.h: attnd's configuration, from one table.
 *
 * Every key is a row of the table in config.c: its name, type, default,
 * bounds and help. The same table reads the config file, the ATTND_<KEY>
 * environment variables and the --<key> flags, and prints --print-config
 * and --help. Precedence: defaults < file < environment < flags. */
#ifndef ATTND_CONFIG_H
#define ATTND_CONFIG_H

#include <stdint.h>
#include <stdio.h>

typedef struct attnd_config {
  char host[128];
  int64_t port;
  int64_t workers;                 /* resolved from auto */
  int64_t threads_per_request;     /* 0: auto, decided as each request starts */
  int64_t max_threads_per_request; /* with auto, the most; resolved */
  int64_t queue_depth;
  int64_t http_threads; /* resolved from auto */
  int64_t max_connections;
  int64_t connection_timeout_s;
  int64_t min_send_rate_bytes_per_s; /* a reply's pace at least; 0: none */
  int64_t min_recv_rate_bytes_per_s; /* a body's pace at least; 0: none */
  int64_t connection_buffer_bytes;
  int64_t max_body_bytes;
  int64_t max_json_structure_bytes;
  int64_t max_response_bytes;
  int64_t max_batch;
  int64_t max_seq_len;
  int64_t max_heads;
  int64_t max_tensor_elements;
  int64_t max_memory_bytes;        /* resolved from auto */
  int64_t max_device_memory_bytes; /* the cuda requests' GPU memory; 0: none
                                      (auto where there is no GPU) */
  int64_t pinned_memory_bytes;     /* page-locked tensors, in max_memory_bytes;
                                      0 or -1 (off): none; ATTND_CONFIG_AUTO
                                      where no GPU serves */
  int64_t default_timeout_ms;
  int64_t max_timeout_ms;
  int64_t drain_timeout_s;
  char access_log[256];   /* "stderr", "stdout", "off" or a file path */
  char blas_coretype[32]; /* "auto", "library" or an OpenBLAS core name */
  char backend[8];   /* /v1's default: "auto", "cpu" or "cuda" (docs/cuda.md) */
  char precision[8]; /* the cuda backend's default: "fp32" or "bf16" */
  /* Security (docs/security.md). api_keys is secret: --print-config shows
   * how many keys it holds, in a comment, and no message shows its text. It has
   * room for a few keys; api_keys_file holds any number. */
  char api_keys[8192];     /* comma-separated; "" for none */
  char api_keys_file[512]; /* one key a line, re-read on SIGHUP; "" none */
  char public_paths[1024]; /* comma-separated paths that need no key */
  char tls_cert_file[512]; /* PEM; "" serves plain HTTP */
  char tls_key_file[512];  /* PEM, unencrypted */
  char cors_allow_origins[2048]; /* comma-separated origins, "*", or "" */
  char layers[4096]; /* comma-separated .safetensors files and directories */
  int64_t inline_max_flops;   /* computed on the HTTP thread up to this */
  int64_t scratch_keep_bytes; /* a thread's workspace kept between requests */
  int64_t batch_window_us;    /* session steps batched (0: not) */
  int64_t max_batch_tokens;   /* new tokens in a batch at most */
  int64_t kv_cache_bytes;     /* the sessions' pool, in max_memory_bytes;
                                 0: none, no session */
  int64_t session_max_tokens; /* per session, at most */
  int64_t session_ttl_s, session_max_ttl_s;
  int64_t ui;    /* 1: serve the page at / and /ui/ */
  int64_t cores; /* not a key: the CPUs attnd_config_load was told of */
} attnd_config_t;

/* "auto" as a key held it before attnd_config_load resolved it, where 0
 * is a value of its own (none: kv_cache_bytes, max_device_memory_bytes,
 * pinned_memory_bytes); a key whose values start at 1 holds auto as 0.
 * Only pinned_memory_bytes keeps it once resolved, where no GPU serves
 * (none here, and --print-config writes auto, for another host). */
#define ATTND_CONFIG_AUTO INT64_C(-2)

/* The table's keys at most (config.c checks it). */
#define ATTND_CONFIG_KEYS_MAX 64

/* http_threads' most (the gauge of their connections has room for as
 * many) */
#define ATTND_HTTP_THREADS_MAX 256

/* What loading decided besides the values. */
typedef struct attnd_config_load {
  int print_config; /* --print-config */
  int help;         /* --help */
  int version;      /* --version */
  char path[512];   /* the config file read, "" if none */
  /* where each key of the table was set, in the table's order: "FILE:LINE",
   * "ATTND_<KEY>" or "flag --<key>"; "" for its default. Messages name
   * them, and --print-config where api_keys came from. */
  char from[ATTND_CONFIG_KEYS_MAX][600];
} attnd_config_load_t;

/* Fills `cfg` from the defaults, then the file named by --config (if any),
 * then the ATTND_<KEY> variables of `envp`, then argv's flags; resolves the
 * "auto" values for a machine of `cores` cores (main passes
 * attnd_cgroup_cpus) and the memory attnd_cgroup_memory finds. Returns 0,
 * or -1 with a message naming the key, its source and the accepted values
 * written to `msg`. With --help or -h, or --version, it reads nothing: it
 * returns 0 at once with how->help or how->version set (cfg holds the
 * defaults, unresolved). Main thread, at startup. */
int attnd_config_load(attnd_config_t *cfg, attnd_config_load_t *how, int argc,
                      char **argv, char **envp, int cores, char *msg,
                      size_t msg_size);

/* Bounds the threads of a request by `limit`, the most OpenMP gives a team
 * (main passes attnd_omp_team_limit; `why` names the variable that set it,
 * NULL when none did): max_threads_per_request becomes at most `limit`, and
 * a threads_per_request above it is refused, as OpenMP would run every
 * request on fewer. Returns 0, or -1 with a message naming the key, its
 * source and the variable written to `msg`. Main thread, after
 * attnd_config_load. */
int attnd_config_team_limit(attnd_config_t *cfg, const attnd_config_load_t *how,
                            int limit, const char *why, char *msg,
                            size_t msg_size);

/* Writes the configuration in the config file's format, which reads back
 * to the same values, but for the secret: api_keys is not echoed, and in
 * its place a comment says how many keys it held, where they were set
 * (from `how`, which may be NULL) and how to give them again; read back
 * without them, api_keys is "". api_keys_file, a path, prints as itself.
 * Borrows both arguments; any thread. */
void attnd_config_print(const attnd_config_t *cfg,
                        const attnd_config_load_t *how, FILE *f);

/* Calls fn for each integer key that GET /v1/info shows, in the table's
 * order: its "limits" (limits != 0) or its top-level keys (workers and the
 * like). A key still auto once resolved (threads_per_request) comes with
 * the value -1; a limit is always its number (max_device_memory_bytes is
 * 0 where there is no GPU). Any thread. */
void attnd_config_info(const attnd_config_t *cfg, int limits,
                       void (*fn)(const char *key, int64_t value, void *arg),
                       void *arg);

/* The threads a request is planned for: threads_per_request, or with auto
 * max_threads_per_request, at most the CPUs, the most the scheduler ever
 * gives one request (its memory is counted for those; it may be given
 * fewer when it starts). Any thread. */
int attnd_config_plan_threads(const attnd_config_t *cfg);

/* Writes the usage text: every flag with its help and default. */
void attnd_config_usage(FILE *f);

#endif
