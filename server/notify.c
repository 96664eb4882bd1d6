/* server/notify.c: sd_notify(3)'s protocol for a service manager. See
 * notify.h. */
#include "notify.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "codec/buf.h"

static int notify_fd = -1;
static struct sockaddr_un notify_addr;
static socklen_t notify_len;
static atomic_flag notify_logged = ATOMIC_FLAG_INIT;

/* Logs the first failure only: a manager that is gone would otherwise put
 * a line in the log at every reload. */
static void log_failure(const char *name, const char *why) {
  if (atomic_flag_test_and_set(&notify_logged))
    return;
  attnd_buf_t b;
  attnd_buf_init(&b);
  attnd_buf_json_string(&b, name, strlen(name));
  size_t at = b.len;
  attnd_buf_json_string(&b, why, strlen(why));
  if (b.oom)
    fprintf(stderr, "{\"event\":\"notify_failed\"}\n");
  else
    fprintf(stderr,
            "{\"event\":\"notify_failed\",\"socket\":%.*s,\"error\":%.*s}\n",
            (int)at, b.data, (int)(b.len - at), b.data + at);
  attnd_buf_free(&b);
}

int attnd_notify_open(void) {
  const char *name = getenv("NOTIFY_SOCKET");
  if (name == NULL || name[0] == 0)
    return 0;
  size_t n = strlen(name);
  /* a path is absolute; an abstract name has no NUL of its own to end it,
   * so that all of sun_path may hold it */
  if ((name[0] != '/' && name[0] != '@') || n > sizeof notify_addr.sun_path ||
      (name[0] == '/' && n == sizeof notify_addr.sun_path)) {
    log_failure(name, "not an absolute path nor an @abstract name that fits "
                      "an AF_UNIX address");
    return 0;
  }
  memset(&notify_addr, 0, sizeof notify_addr);
  notify_addr.sun_family = AF_UNIX;
  memcpy(notify_addr.sun_path, name, n);
  if (name[0] == '@')
    notify_addr.sun_path[0] = 0;
  /* the abstract name is exactly its n bytes: a NUL after it would be
   * part of the name, another socket's */
  notify_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
  notify_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (notify_fd < 0) {
    log_failure(name, strerror(errno));
    return 0;
  }
  return 1;
}

void attnd_notify(const char *fmt, ...) {
  if (notify_fd < 0)
    return;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= sizeof msg)
    n = (int)strlen(msg);
  if (sendto(notify_fd, msg, (size_t)n, MSG_NOSIGNAL,
             (const struct sockaddr *)&notify_addr, notify_len) < 0) {
    char name[sizeof notify_addr.sun_path + 1], buf[128];
    const char *why = strerror_r(errno, buf, sizeof buf); /* any thread */
    memcpy(name, notify_addr.sun_path, sizeof notify_addr.sun_path);
    name[sizeof notify_addr.sun_path] = 0;
    if (name[0] == 0)
      name[0] = '@';
    log_failure(name, why);
  }
}

void attnd_notify_close(void) {
  if (notify_fd >= 0)
    close(notify_fd);
  notify_fd = -1;
}
