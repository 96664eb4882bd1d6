/* server/http/tls.h: the certificate and key attnd serves HTTPS with.
 *
 * libmicrohttpd does the TLS (through GnuTLS) from PEM text in memory; this
 * reads tls_cert_file and tls_key_file and checks them with GnuTLS first,
 * so that a file that cannot be read, is not PEM, or holds a key that does
 * not match the certificate stops the start with a message naming the file
 * and GnuTLS's reason, rather than a bare "cannot listen". */
#ifndef ATTND_TLS_H
#define ATTND_TLS_H

#include <stddef.h>

/* Reads and checks the pair. Returns 0 with *cert and *key new
 * NUL-terminated strings (the caller frees them once the daemon is
 * stopped), or -1 with the reason in msg. Main thread, at start. */
int attnd_tls_load(const char *cert_file, const char *key_file, char **cert,
                   char **key, char *msg, size_t msg_size);

#endif
