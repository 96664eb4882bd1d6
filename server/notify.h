/* server/notify.h: telling a service manager (systemd, Type=notify) what
 * attnd is doing, with the protocol of sd_notify(3), written here rather
 * than linked from libsystemd.
 *
 * The protocol: the manager names an AF_UNIX datagram socket in the
 * environment variable NOTIFY_SOCKET, a path, or an abstract name when it
 * starts with '@' (the '@' stands for the address's leading NUL byte). A
 * message is one datagram of newline-separated KEY=VALUE lines. attnd
 * sends READY=1 (with MAINPID= and STATUS=) once it listens with its
 * layers loaded, RELOADING=1 (with MONOTONIC_USEC=) as a SIGHUP reload
 * begins and READY=1 when it has ended, and STOPPING=1 as it drains
 * (serve.c).
 *
 * Without NOTIFY_SOCKET nothing is sent. A socket that cannot be reached,
 * or a name that is no path nor abstract name, is logged once, as a JSON
 * "notify_failed" event on stderr, and never stops attnd: the manager then
 * decides, by its own timeout, what a service that never said READY=1 is.
 *
 * NOTIFY_SOCKET is left in the environment. sd_notify(3) makes unsetting
 * it the caller's choice, for a process whose children must not send in
 * its name; attnd starts no program, and unsetenv() would race with the
 * getenv() of OpenMP's and OpenBLAS's threads. */
#ifndef ATTND_NOTIFY_H
#define ATTND_NOTIFY_H

/* Reads NOTIFY_SOCKET and opens a datagram socket for it. Returns 1 when
 * messages will be sent, 0 when not (no NOTIFY_SOCKET, or one that is
 * logged as unusable). Main thread, once, before any other call. */
int attnd_notify_open(void);

/* Sends one message, its lines formatted as printf() does (no trailing
 * newline needed). Nothing without a socket; a failure is logged the first
 * time only. Any thread. */
void attnd_notify(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Closes the socket; attnd_notify sends nothing after it. Main thread. */
void attnd_notify_close(void);

#endif
