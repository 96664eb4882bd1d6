/* tools/load/options.h: attnd-load's command line: the options as parsed,
 * and what follows from them. The table of options (options.c) is the one
 * source of parsing, --help and the man page (tools/man.sh). */
#ifndef ATTND_LOAD_OPTIONS_H
#define ATTND_LOAD_OPTIONS_H

#include <stdint.h>

#include "client.h"
#include "codec/util.h"
#include "decode.h"
#include "gen.h"

#define MAX_LIST 64

/* A comma-separated option: concurrencies, rates, lengths. */
typedef struct list {
  double v[MAX_LIST];
  int n;
} list_t;

/* The command line, as parsed (see the table below), and what follows
 * from it. */
typedef struct opts {
  const char *base, *path, *out, *name, *dump_body, *model;
  const char *api_key_file, *cacert;
  list_t lengths, concurrency, rate, prefill;
  int method, arrival, causal, key_lengths, weights, projections, encoding;
  int protocol, tensors, compress, dtype;
  int cross, quiet, insecure;
  int workload, rope, create; /* --mode decode */
  int64_t connections, requests, batch, lq, lk, embed, heads, kv_heads;
  int64_t request_timeout_ms, seed, variants, verify, verify_threads;
  int64_t sessions, steps;
  double warmup, duration, timeout, max_error_rate;

  /* derived */
  char v2_path[1024]; /* /v2/models/<model>/infer */
  char url[2048];
  int post;
  load_mode_t mode;
  const list_t *load;         /* concurrency or rate */
  load_shape_t shape;         /* Lq and Lk are set per length */
  load_decode_shape_t dshape; /* --mode decode */
  char base_url[2000];        /* --url without a trailing '/', within url[] */
  /* --api-key-file's or ATTND_API_KEY's key, "" for none: ATTND_AUTH_MAX_KEY
   * characters at most, and room for one more to tell a longer one */
  char api_key[ATTND_AUTH_MAX_KEY + 2];
  load_access_t access; /* the key and TLS trust, for both engines */
} opts_t;

/* --mode: a sweep of requests, or of decode sessions */
enum { W_REQUEST, W_DECODE };

/* The names of --method's and --rope's values, by their index in opts_t. */
extern const char *const load_methods[];
extern const char *const load_ropes[];

/* Parses argv into `o`, then derives the rest (URLs, shapes); checks every
 * option before any request is sent. Returns 0, or -1 with the reason on
 * stderr (bad usage: exit 2); --help and --version print and exit 0. */
int load_parse_args(int argc, char **argv, opts_t *o);

#endif
