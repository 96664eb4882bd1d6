/* tests/test_certs.h: the certificates of the suites that serve TLS
 * (check_security, check_ipv6), made with GnuTLS when a suite starts, so
 * that no openssl or certtool is needed and none expires in the tree. */
#ifndef ATTND_TESTS_TEST_CERTS_H
#define ATTND_TESTS_TEST_CERTS_H

/* Makes in the folder `dir` a CA (ca.pem), a server certificate it signs
 * for localhost, 127.0.0.1 and ::1 (cert.pem, serial 02) with its key
 * (key.pem), its renewal (cert-b.pem, serial 04, with key-b.pem), a key
 * that matches none (other-key.pem) and another CA made with it
 * (other-ca.pem); each valid from an hour ago for a day, but the renewal,
 * for two. ECDSA P-256: milliseconds. 0, or -1. */
int tcert_make(const char *dir);

/* The notAfter of the PEM certificate at path, in seconds since the
 * epoch, as GnuTLS reads it; -1 where it cannot be read. */
long long tcert_not_after(const char *path);

#endif
