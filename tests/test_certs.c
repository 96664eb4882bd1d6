/* tests/test_certs.c: see test_certs.h. */
#include "test_certs.h"

#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* Writes d into the file `name` in dir, and frees it: 0, or -1. */
static int save_datum(const char *dir, const char *name, gnutls_datum_t *d) {
  char path[256];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  int ok = f && fwrite(d->data, 1, d->size, f) == d->size;
  if (f)
    fclose(f);
  gnutls_free(d->data);
  return ok ? 0 : -1;
}

static gnutls_x509_privkey_t new_key(void) {
  gnutls_x509_privkey_t k;
  if (gnutls_x509_privkey_init(&k) < 0 ||
      gnutls_x509_privkey_generate(
          k, GNUTLS_PK_ECDSA, GNUTLS_CURVE_TO_BITS(GNUTLS_ECC_CURVE_SECP256R1),
          0) < 0)
    abort();
  return k;
}

/* A certificate for `key`, valid from an hour ago for `days` days. */
static gnutls_x509_crt_t new_crt(gnutls_x509_privkey_t key, const char *dn,
                                 int serial, int days) {
  gnutls_x509_crt_t c;
  unsigned char sn[1] = {(unsigned char)serial};
  time_t now = time(NULL);
  if (gnutls_x509_crt_init(&c) < 0 || gnutls_x509_crt_set_version(c, 3) < 0 ||
      gnutls_x509_crt_set_serial(c, sn, 1) < 0 ||
      gnutls_x509_crt_set_activation_time(c, now - 3600) < 0 ||
      gnutls_x509_crt_set_expiration_time(c, now + days * 86400L) < 0 ||
      gnutls_x509_crt_set_dn(c, dn, NULL) < 0 ||
      gnutls_x509_crt_set_key(c, key) < 0)
    abort();
  return c;
}

/* A server certificate for `key` that `ca` signs, for localhost,
 * 127.0.0.1 and ::1; rc set non-zero where a step fails. */
static gnutls_x509_crt_t server_crt(gnutls_x509_privkey_t key, int serial,
                                    int days, gnutls_x509_crt_t ca,
                                    gnutls_x509_privkey_t cakey,
                                    const unsigned char *id, size_t idlen,
                                    int *rc) {
  gnutls_x509_crt_t crt = new_crt(key, "CN=localhost", serial, days);
  static const unsigned char ip[4] = {127, 0, 0, 1};
  *rc |= gnutls_x509_crt_set_subject_alt_name(crt, GNUTLS_SAN_DNSNAME,
                                              "localhost", 9, GNUTLS_FSAN_SET);
  *rc |= gnutls_x509_crt_set_subject_alt_name(crt, GNUTLS_SAN_IPADDRESS, ip, 4,
                                              GNUTLS_FSAN_APPEND);
  /* ::1 too, for check_ipv6: a client checks https://[::1]:port/ against
   * an IP address SAN of 16 bytes, never against 127.0.0.1's */
  *rc |= gnutls_x509_crt_set_subject_alt_name(crt, GNUTLS_SAN_IPADDRESS,
                                              in6addr_loopback.s6_addr, 16,
                                              GNUTLS_FSAN_APPEND);
  *rc |= gnutls_x509_crt_set_basic_constraints(crt, 0, -1);
  *rc |= gnutls_x509_crt_set_key_usage(crt, GNUTLS_KEY_DIGITAL_SIGNATURE);
  *rc |= gnutls_x509_crt_set_key_purpose_oid(crt, GNUTLS_KP_TLS_WWW_SERVER, 0);
  *rc |= gnutls_x509_crt_set_authority_key_id(crt, id, idlen);
  *rc |= gnutls_x509_crt_sign2(crt, ca, cakey, GNUTLS_DIG_SHA256, 0);
  return crt;
}

int tcert_make(const char *dir) {
  gnutls_x509_privkey_t cakey = new_key(), key = new_key(), other = new_key(),
                        key_b = new_key();
  gnutls_x509_crt_t ca = new_crt(cakey, "CN=attnd test CA", 1, 1);
  unsigned char id[64];
  size_t idlen = sizeof id;
  int rc = 0;
  rc |= gnutls_x509_crt_set_basic_constraints(ca, 1, -1);
  rc |= gnutls_x509_crt_set_key_usage(ca, GNUTLS_KEY_KEY_CERT_SIGN |
                                              GNUTLS_KEY_CRL_SIGN);
  rc |= gnutls_x509_crt_get_key_id(ca, 0, id, &idlen);
  rc |= gnutls_x509_crt_set_subject_key_id(ca, id, idlen);
  rc |= gnutls_x509_crt_sign2(ca, ca, cakey, GNUTLS_DIG_SHA256, 0);
  gnutls_x509_crt_t other_ca = new_crt(other, "CN=another CA", 3, 1);
  rc |= gnutls_x509_crt_set_basic_constraints(other_ca, 1, -1);
  rc |= gnutls_x509_crt_set_key_usage(other_ca, GNUTLS_KEY_KEY_CERT_SIGN);
  rc |= gnutls_x509_crt_sign2(other_ca, other_ca, other, GNUTLS_DIG_SHA256, 0);

  gnutls_x509_crt_t crt = server_crt(key, 2, 1, ca, cakey, id, idlen, &rc);
  /* the same name and CA, a new key and serial, and a day more: the
   * renewal, whose expiry /metrics and /v1/info must then show */
  gnutls_x509_crt_t crt_b = server_crt(key_b, 4, 2, ca, cakey, id, idlen, &rc);
  if (rc < 0)
    return -1;

  gnutls_datum_t d;
  rc |= gnutls_x509_crt_export2(ca, GNUTLS_X509_FMT_PEM, &d) < 0 ||
        save_datum(dir, "ca.pem", &d);
  rc |= gnutls_x509_crt_export2(crt, GNUTLS_X509_FMT_PEM, &d) < 0 ||
        save_datum(dir, "cert.pem", &d);
  rc |= gnutls_x509_privkey_export2(key, GNUTLS_X509_FMT_PEM, &d) < 0 ||
        save_datum(dir, "key.pem", &d);
  rc |= gnutls_x509_crt_export2(crt_b, GNUTLS_X509_FMT_PEM, &d) < 0 ||
        save_datum(dir, "cert-b.pem", &d);
  rc |= gnutls_x509_privkey_export2(key_b, GNUTLS_X509_FMT_PEM, &d) < 0 ||
        save_datum(dir, "key-b.pem", &d);
  rc |= gnutls_x509_privkey_export2(other, GNUTLS_X509_FMT_PEM, &d) < 0 ||
        save_datum(dir, "other-key.pem", &d);
  rc |= gnutls_x509_crt_export2(other_ca, GNUTLS_X509_FMT_PEM, &d) < 0 ||
        save_datum(dir, "other-ca.pem", &d);
  gnutls_x509_crt_deinit(other_ca);
  gnutls_x509_crt_deinit(ca);
  gnutls_x509_crt_deinit(crt);
  gnutls_x509_crt_deinit(crt_b);
  gnutls_x509_privkey_deinit(cakey);
  gnutls_x509_privkey_deinit(key);
  gnutls_x509_privkey_deinit(other);
  gnutls_x509_privkey_deinit(key_b);
  return rc ? -1 : 0;
}

long long tcert_not_after(const char *path) {
  gnutls_datum_t d;
  gnutls_x509_crt_t c;
  long long t = -1;
  if (gnutls_load_file(path, &d) < 0)
    return -1;
  if (gnutls_x509_crt_init(&c) == 0) {
    if (gnutls_x509_crt_import(c, &d, GNUTLS_X509_FMT_PEM) == 0)
      t = (long long)gnutls_x509_crt_get_expiration_time(c);
    gnutls_x509_crt_deinit(c);
  }
  gnutls_free(d.data);
  return t;
}
