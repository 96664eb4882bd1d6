/* server/serve.h: the attnd service: HTTP (libmicrohttpd), the scheduler
 * loop (libuv) and the workers, put together.
 *
 * Threads: an acceptor hands each connection to one of the HTTP threads
 * (libmicrohttpd daemons), which parse requests and write replies; the
 * thread that calls attnd_serve() runs the libuv loop that schedules; the
 * workers compute. */
#ifndef ATTND_SERVE_H
#define ATTND_SERVE_H

#include "config.h"

/* Serves until SIGTERM or SIGINT, then drains: new requests get 503 and
 * readiness fails, everything accepted is answered, and it returns 0.
 * Returns 1 if the service cannot start (the reason is on stderr) or the
 * drain timed out. Logs a JSON "listening" line with the bound port to
 * stderr once it serves. Main thread. */
int attnd_serve(const attnd_config_t *cfg);

#endif
