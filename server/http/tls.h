/* server/http/tls.h: the certificate and key attnd serves HTTPS with.
 *
 * libmicrohttpd does the TLS (through GnuTLS) and asks for the certificate
 * at each handshake (MHD_OPTION_HTTPS_CERT_CALLBACK); this reads
 * tls_cert_file and tls_key_file and checks them with GnuTLS first, so
 * that a file that cannot be read, is not PEM, or holds a key that does
 * not match the certificate stops the start (or a SIGHUP's reload keeps
 * the pair in force) with a message naming the file and GnuTLS's reason,
 * rather than a bare "cannot listen" or a failed handshake.
 *
 * A pair once loaded is shared: the server holds the one new handshakes
 * get, and each connection holds the one its handshake got, until it
 * closes; the last holder frees it. */
#ifndef ATTND_TLS_H
#define ATTND_TLS_H

#include <gnutls/abstract.h>
#include <stddef.h>
#include <stdint.h>

typedef struct attnd_tls_pair attnd_tls_pair_t;

/* Pairs loaded and not yet freed, for tests and the reload's log line: a
 * reload gives the pair it replaced back once no connection holds it. */
extern _Atomic long attnd__tls_pairs_live;

/* Reads and checks the pair. Returns 0 with *pair a new pair holding one
 * reference, or -1 with the reason in msg. Any thread. */
int attnd_tls_load(const char *cert_file, const char *key_file,
                   attnd_tls_pair_t **pair, char *msg, size_t msg_size);

/* Another reference to pair (NULL gives NULL). Any thread. */
attnd_tls_pair_t *attnd_tls_ref(attnd_tls_pair_t *pair);

/* Gives a reference back; the last frees the pair. NULL is ignored. */
void attnd_tls_unref(attnd_tls_pair_t *pair);

/* The certificate chain and key as GnuTLS's retrieve function gives them:
 * they stay valid while the caller holds its reference. */
void attnd_tls_get(const attnd_tls_pair_t *pair, gnutls_pcert_st **chain,
                   unsigned *chain_len, gnutls_privkey_t *key);

/* The certificate's serial number in hex, and its expiry (notAfter) in UTC
 * as 2026-01-31T12:00:00Z, for the log and /v1/info. */
void attnd_tls_describe(const attnd_tls_pair_t *pair, char *serial,
                        size_t serial_size, char *expires, size_t expires_size);

/* The same expiry in seconds since the epoch, for /metrics; -1 where
 * GnuTLS could not read it. */
int64_t attnd_tls_not_after(const attnd_tls_pair_t *pair);

#endif
