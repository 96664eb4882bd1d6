/* server/http/listen.c: the listening socket and its acceptor thread
 * (listen.h). */
#include "http/listen.h"

#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "codec/util.h"

struct attnd_listener {
  int fd; /* blocking: the acceptor sleeps in accept() */
  int n, max;
  struct MHD_Daemon *const *d; /* borrowed: they outlive the listener */
  uv_thread_t thread;
  uv_mutex_t lock; /* guards the rest */
  uv_cond_t freed; /* signalled when a connection closes, and at stop */
  int stopping;
  int total;  /* open connections: given to a daemon, no notice of closing */
  int open[]; /* of them, each daemon's */
};

int attnd_listen_socket(const struct addrinfo *ai, int *port) {
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
  int one = 1; /* a restart binds at once, past the old one's TIME_WAITs */
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0)
    goto fail;
  if (ai->ai_family == AF_INET6) {
    const struct in6_addr *a6 =
        &((const struct sockaddr_in6 *)ai->ai_addr)->sin6_addr;
    int v6only = !(IN6_IS_ADDR_UNSPECIFIED(a6) || IN6_IS_ADDR_V4MAPPED(a6));
    if (setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof v6only) < 0)
      goto fail;
  }
  struct sockaddr_storage a;
  socklen_t len = sizeof a;
  if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 1024) < 0 ||
      getsockname(fd, (struct sockaddr *)&a, &len) < 0)
    goto fail;
  *port = ntohs(a.ss_family == AF_INET6
                    ? ((const struct sockaddr_in6 *)&a)->sin6_port
                    : ((const struct sockaddr_in *)&a)->sin_port);
  return fd;
fail:;
  int e = errno;
  close(fd);
  errno = e;
  return -1;
}

/* Daemon k's connection is gone: its place is free. */
static void give_back(attnd_listener_t *l, int k) {
  uv_mutex_lock(&l->lock);
  if (l->open[k] > 0) {
    l->open[k]--;
    l->total--;
    uv_cond_signal(&l->freed);
  }
  uv_mutex_unlock(&l->lock);
}

/* Waits up to ms for a connection to close, unless stopping. */
static void wait_freed(attnd_listener_t *l, uint64_t ms) {
  uv_mutex_lock(&l->lock);
  if (!l->stopping)
    (void)uv_cond_timedwait(&l->freed, &l->lock, ms * 1000000u);
  uv_mutex_unlock(&l->lock);
}

/* accept(2)'s errors that are the connection's (Linux passes on the
 * network's pending errors), after which the next one is accepted at
 * once. */
static int connection_error(int e) {
  return e == EINTR || e == EAGAIN || e == ECONNABORTED || e == EPROTO ||
         e == ENETDOWN || e == ENOPROTOOPT || e == EHOSTDOWN || e == ENONET ||
         e == EHOSTUNREACH || e == EOPNOTSUPP || e == ENETUNREACH;
}

static void acceptor(void *arg) {
  attnd_listener_t *l = arg;
  double said = 0; /* when a failure was last logged (ms) */
  for (;;) {
    uv_mutex_lock(&l->lock);
    while (!l->stopping && l->total >= l->max)
      uv_cond_wait(&l->freed, &l->lock); /* the next waits in the backlog */
    int stopping = l->stopping;
    uv_mutex_unlock(&l->lock);
    if (stopping)
      return;
    struct sockaddr_storage a;
    socklen_t len = sizeof a;
    int c = accept4(l->fd, (struct sockaddr *)&a, &len,
                    SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (c < 0) {
      int e = errno;
      if (connection_error(e))
        continue;
      /* out of descriptors or memory (or stopping: the socket shut down,
       * EINVAL): the connection waits in the backlog until one closes,
       * and tries again in 0.1 s at the latest */
      uv_mutex_lock(&l->lock);
      stopping = l->stopping;
      int total = l->total;
      uv_mutex_unlock(&l->lock);
      if (stopping)
        return;
      double now = attnd_now_ms();
      if (said == 0 || now - said >= 10000) {
        said = now;
        fprintf(stderr,
                "{\"event\":\"accept_failed\",\"error\":\"%s\","
                "\"open_connections\":%d,\"message\":\"new connections wait "
                "in the backlog until one closes (said at most each 10 "
                "s)\"}\n",
                strerror(e), total);
      }
      wait_freed(l, 100);
      continue;
    }
    uv_mutex_lock(&l->lock);
    int k = 0;
    for (int i = 1; i < l->n; i++)
      if (l->open[i] < l->open[k])
        k = i;
    l->open[k]++;
    l->total++;
    uv_mutex_unlock(&l->lock);
    /* Counted before it is given, as its notice of closing may come
     * before this returns. A connection the daemon's thread cannot take
     * in (its pool's memory short) is closed with no notice, and stays
     * counted: libmicrohttpd logs it. */
    if (MHD_add_connection(l->d[k], c, (struct sockaddr *)&a, len) !=
        MHD_YES) /* it closed c */
      give_back(l, k);
  }
}

int attnd_listener_start(attnd_listener_t **out, int fd,
                         struct MHD_Daemon *const *d, int n,
                         int max_connections) {
  attnd_listener_t *l = calloc(1, sizeof *l + (size_t)n * sizeof(int));
  *out = NULL;
  if (l == NULL || uv_mutex_init(&l->lock) != 0)
    goto fail;
  if (uv_cond_init(&l->freed) != 0) {
    uv_mutex_destroy(&l->lock);
    goto fail;
  }
  l->fd = fd;
  l->d = d;
  l->n = n;
  l->max = max_connections;
  *out = l;
  if (uv_thread_create(&l->thread, acceptor, l) != 0) {
    *out = NULL;
    uv_cond_destroy(&l->freed);
    uv_mutex_destroy(&l->lock);
    goto fail;
  }
  return 0;
fail:
  free(l);
  close(fd);
  return -1;
}

void attnd_listener_closed(attnd_listener_t *l, const struct MHD_Daemon *d) {
  for (int i = 0; i < l->n; i++) /* the array does not change */
    if (l->d[i] == d) {
      give_back(l, i);
      return;
    }
}

void attnd_listener_open(attnd_listener_t *l, int *open) {
  uv_mutex_lock(&l->lock);
  memcpy(open, l->open, (size_t)l->n * sizeof *open);
  uv_mutex_unlock(&l->lock);
}

void attnd_listener_stop(attnd_listener_t *l) {
  uv_mutex_lock(&l->lock);
  l->stopping = 1;
  uv_cond_signal(&l->freed);
  uv_mutex_unlock(&l->lock);
  shutdown(l->fd, SHUT_RDWR); /* a blocked accept() returns (EINVAL) */
  uv_thread_join(&l->thread);
  close(l->fd);
}

void attnd_listener_free(attnd_listener_t *l) {
  if (l == NULL)
    return;
  uv_cond_destroy(&l->freed);
  uv_mutex_destroy(&l->lock);
  free(l);
}
