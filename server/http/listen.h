/* server/http/listen.h: attnd's listening socket, and the thread that
 * accepts on it and gives each new connection to the HTTP thread (a
 * libmicrohttpd daemon of one thread, with no listening socket of its
 * own) that has the fewest open.
 *
 * Why not libmicrohttpd's thread pool: its workers all poll one listening
 * socket, and each accepts whatever it wakes to first, so a burst of
 * connections can land on one of them (64 of 64 in 2 of 5 runs of
 * bench/wrk/small.sh's step row on 2 CPUs), which then parses, and
 * computes inline, every request of theirs while the others idle. */
#ifndef ATTND_HTTP_LISTEN_H
#define ATTND_HTTP_LISTEN_H

#include <stddef.h>
#include <stdint.h>

struct MHD_Daemon;
struct addrinfo;
typedef struct attnd_listener attnd_listener_t;

/* A socket bound to `ai` and listening: the unspecified IPv6 address and
 * an IPv4-mapped one take IPv4 clients too (dual stack); any other IPv6
 * address IPv6 alone. Returns the socket and sets *port to the port bound
 * (the one the kernel chose for 0), or -1 with errno set. */
int attnd_listen_socket(const struct addrinfo *ai, int *port);

/* Starts the thread that accepts on `fd` (taken over: the listener closes
 * it) and gives each connection to one of the n daemons d[] (the array
 * borrowed: it must outlive the listener), the one with the fewest open
 * (the first of those), while fewer than max_connections are
 * open in all; beyond that the next waits in the socket's backlog until
 * one closes. Sets *l before the thread starts, so that a connection's
 * notice of closing finds it however soon it comes. Returns 0, or -1 when
 * the thread cannot start (*l NULL, fd closed). */
int attnd_listener_start(attnd_listener_t **l, int fd,
                         struct MHD_Daemon *const *d, int n,
                         int max_connections);

/* A connection of daemon d has closed (libmicrohttpd's notice). Any HTTP
 * thread. */
void attnd_listener_closed(attnd_listener_t *l, const struct MHD_Daemon *d);

/* The connections open on each daemon, into open[0 .. n-1]. Any thread. */
void attnd_listener_open(attnd_listener_t *l, int *open);

/* Stops accepting: the thread ends and the socket is closed; the daemons'
 * connections are theirs to close. Any thread but the acceptor. */
void attnd_listener_stop(attnd_listener_t *l);

/* Frees l, once stopped and once the daemons are (their last notices of
 * closing come from MHD_stop_daemon). */
void attnd_listener_free(attnd_listener_t *l);

#endif
