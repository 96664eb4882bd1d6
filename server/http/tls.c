/* server/http/tls.c: the certificate and key. See tls.h. */
#include "http/tls.h"

#include <errno.h>
#include <gnutls/gnutls.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PEM (1 << 20)

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

int attnd_tls_load(const char *cert_file, const char *key_file, char **cert,
                   char **key, char *msg, size_t msz) {
  *cert = *key = NULL;
  if (!cert_file[0] || !key_file[0]) {
    snprintf(msg, msz,
             "tls_cert_file and tls_key_file go together: %s is set, %s is "
             "not",
             cert_file[0] ? "tls_cert_file" : "tls_key_file",
             cert_file[0] ? "tls_key_file" : "tls_cert_file");
    return -1;
  }
  if ((*cert = read_pem("tls_cert_file", cert_file, msg, msz)) == NULL ||
      (*key = read_pem("tls_key_file", key_file, msg, msz)) == NULL)
    goto fail;
  gnutls_certificate_credentials_t cred;
  if (gnutls_certificate_allocate_credentials(&cred) < 0) {
    snprintf(msg, msz, "tls: out of memory");
    goto fail;
  }
  gnutls_datum_t c = {(unsigned char *)*cert, (unsigned)strlen(*cert)};
  gnutls_datum_t k = {(unsigned char *)*key, (unsigned)strlen(*key)};
  int rc =
      gnutls_certificate_set_x509_key_mem(cred, &c, &k, GNUTLS_X509_FMT_PEM);
  gnutls_certificate_free_credentials(cred);
  if (rc < 0) {
    snprintf(msg, msz,
             "tls_cert_file %s and tls_key_file %s: not a PEM certificate and "
             "its unencrypted private key: %s",
             cert_file, key_file, gnutls_strerror(rc));
    goto fail;
  }
  return 0;
fail:
  free(*cert);
  free(*key);
  *cert = *key = NULL;
  return -1;
}
