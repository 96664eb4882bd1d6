/* server/http/tls.c: the certificate and key. See tls.h. */
#include "http/tls.h"

#include <errno.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_PEM (1 << 20)
#define MAX_CHAIN 16 /* the certificate and its intermediates */
#define STR_(x) #x
#define STR(x) STR_(x)

_Atomic long attnd__tls_pairs_live;

struct attnd_tls_pair {
  atomic_long refs;
  unsigned n; /* certificates in chain */
  gnutls_pcert_st chain[MAX_CHAIN];
  gnutls_privkey_t key;
  char serial[2 * 20 + 1]; /* RFC 5280: at most 20 octets */
  char expires[32];
  int64_t not_after; /* expires in seconds since the epoch; -1: unknown */
};

/* The file at path as a new string, or NULL with msg set. */
static char *read_pem(const char *key, const char *path, char *msg,
                      size_t msz) {
  FILE *f = fopen(path, "r");
  if (f == NULL) {
    snprintf(msg, msz, "%s: cannot read %s: %s", key, path, strerror(errno));
    return NULL;
  }
  char *text = malloc(MAX_PEM + 1);
  size_t n = text ? fread(text, 1, MAX_PEM + 1, f) : 0;
  int err = ferror(f);
  fclose(f);
  if (text == NULL || err || n > MAX_PEM || n == 0) {
    snprintf(msg, msz, "%s: cannot read %s: %s", key, path,
             text == NULL ? "out of memory"
             : err        ? "read error"
             : n == 0     ? "the file is empty"
                          : "larger than 1 MiB");
    free(text);
    return NULL;
  }
  text[n] = 0;
  return text;
}

/* The pair's parts for GnuTLS: its chain as sent (the server's certificate
 * first, then the CAs that signed it) and its key. 0, or GnuTLS's error
 * (GNUTLS_E_SHORT_MEMORY_BUFFER: more than MAX_CHAIN certificates). */
static int import_pair(attnd_tls_pair_t *p, const char *cert, const char *key) {
  gnutls_datum_t c = {(unsigned char *)cert, (unsigned)strlen(cert)};
  gnutls_datum_t k = {(unsigned char *)key, (unsigned)strlen(key)};
  p->n = MAX_CHAIN;
  int rc = gnutls_pcert_list_import_x509_raw(
      p->chain, &p->n, &c, GNUTLS_X509_FMT_PEM, GNUTLS_X509_CRT_LIST_SORT);
  if (rc < 0) {
    p->n = 0;
    return rc;
  }
  if ((rc = gnutls_privkey_init(&p->key)) < 0)
    return rc;
  return gnutls_privkey_import_x509_raw(p->key, &k, GNUTLS_X509_FMT_PEM, NULL,
                                        0);
}

/* GnuTLS's own check of a server's pair, the key the certificate's: 0, or
 * its error. */
static int check_pair(const char *cert, const char *key) {
  gnutls_certificate_credentials_t cred;
  int rc = gnutls_certificate_allocate_credentials(&cred);
  if (rc < 0)
    return rc;
  gnutls_datum_t c = {(unsigned char *)cert, (unsigned)strlen(cert)};
  gnutls_datum_t k = {(unsigned char *)key, (unsigned)strlen(key)};
  rc = gnutls_certificate_set_x509_key_mem(cred, &c, &k, GNUTLS_X509_FMT_PEM);
  gnutls_certificate_free_credentials(cred);
  return rc;
}

/* The serial and expiry of the pair's certificate, for the log, /metrics
 * and /v1/info. */
static void describe_pair(attnd_tls_pair_t *p) {
  gnutls_x509_crt_t crt;
  unsigned char sn[20];
  size_t sn_len = sizeof sn;
  p->not_after = -1;
  if (gnutls_x509_crt_init(&crt) < 0)
    return;
  if (gnutls_x509_crt_import(crt, &p->chain[0].cert, GNUTLS_X509_FMT_DER) ==
      0) {
    if (gnutls_x509_crt_get_serial(crt, sn, &sn_len) == 0)
      for (size_t i = 0; i < sn_len; i++)
        snprintf(p->serial + 2 * i, 3, "%02x", sn[i]);
    time_t end = gnutls_x509_crt_get_expiration_time(crt);
    struct tm tm;
    if (end != (time_t)-1 && gmtime_r(&end, &tm)) {
      strftime(p->expires, sizeof p->expires, "%Y-%m-%dT%H:%M:%SZ", &tm);
      p->not_after = (int64_t)end;
    }
  }
  gnutls_x509_crt_deinit(crt);
}

int attnd_tls_load(const char *cert_file, const char *key_file,
                   attnd_tls_pair_t **pair, char *msg, size_t msz) {
  char *cert = NULL, *key = NULL;
  *pair = NULL;
  if (!cert_file[0] || !key_file[0]) {
    snprintf(msg, msz,
             "tls_cert_file and tls_key_file go together: %s is set, %s is "
             "not",
             cert_file[0] ? "tls_cert_file" : "tls_key_file",
             cert_file[0] ? "tls_key_file" : "tls_cert_file");
    return -1;
  }
  if ((cert = read_pem("tls_cert_file", cert_file, msg, msz)) == NULL ||
      (key = read_pem("tls_key_file", key_file, msg, msz)) == NULL)
    goto fail;
  if ((*pair = calloc(1, sizeof **pair)) == NULL) {
    snprintf(msg, msz, "tls: out of memory");
    goto fail;
  }
  atomic_init(&(*pair)->refs, 1);
  atomic_fetch_add_explicit(&attnd__tls_pairs_live, 1, memory_order_relaxed);
  /* Parsed first, and matched only once both parse: GnuTLS 3.7's
   * gnutls_certificate_set_x509_key_mem loses about 10 KB on a
   * certificate whose PEM does not decode, which each SIGHUP would then
   * add to. */
  int rc = import_pair(*pair, cert, key);
  if (rc >= 0)
    rc = check_pair(cert, key);
  if (rc < 0) {
    snprintf(msg, msz,
             "tls_cert_file %s and tls_key_file %s: not a PEM certificate and "
             "its unencrypted private key: %s",
             cert_file, key_file,
             rc == GNUTLS_E_SHORT_MEMORY_BUFFER
                 ? "more than " STR(MAX_CHAIN) " certificates"
                 : gnutls_strerror(rc));
    goto fail;
  }
  describe_pair(*pair);
  explicit_bzero(key, strlen(key));
  free(cert);
  free(key);
  return 0;
fail:
  if (key)
    explicit_bzero(key, strlen(key));
  free(cert);
  free(key);
  attnd_tls_unref(*pair);
  *pair = NULL;
  return -1;
}

attnd_tls_pair_t *attnd_tls_ref(attnd_tls_pair_t *p) {
  if (p)
    atomic_fetch_add_explicit(&p->refs, 1, memory_order_relaxed);
  return p;
}

void attnd_tls_unref(attnd_tls_pair_t *p) {
  if (p == NULL ||
      atomic_fetch_sub_explicit(&p->refs, 1, memory_order_acq_rel) != 1)
    return;
  for (unsigned i = 0; i < p->n; i++)
    gnutls_pcert_deinit(&p->chain[i]);
  if (p->key)
    gnutls_privkey_deinit(p->key);
  free(p);
  atomic_fetch_sub_explicit(&attnd__tls_pairs_live, 1, memory_order_relaxed);
}

void attnd_tls_get(const attnd_tls_pair_t *p, gnutls_pcert_st **chain,
                   unsigned *chain_len, gnutls_privkey_t *key) {
  *chain = (gnutls_pcert_st *)p->chain;
  *chain_len = p->n;
  *key = p->key;
}

void attnd_tls_describe(const attnd_tls_pair_t *p, char *serial,
                        size_t serial_size, char *expires,
                        size_t expires_size) {
  snprintf(serial, serial_size, "%s", p->serial);
  snprintf(expires, expires_size, "%s", p->expires);
}

int64_t attnd_tls_not_after(const attnd_tls_pair_t *p) {
  return p->not_after;
}
