/* server/http/tcp_acked.c: what a connection's peer has acknowledged, and
 * what it has sent, from the kernel's TCP_INFO (the pace of a reply and of
 * a body, http.c). A file of its own: tcpi_bytes_acked and
 * tcpi_bytes_received are only in <linux/tcp.h>, which cannot share a
 * file with glibc's <netinet/tcp.h>, and uv.h includes that one. */
#include <linux/sockios.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

int attnd_tcp_bytes(int fd, uint64_t *acked, uint64_t *received);
int attnd_tcp_written(int fd, uint64_t *written);

int attnd_tcp_bytes(int fd, uint64_t *acked, uint64_t *received) {
  struct tcp_info ti;
  socklen_t n = sizeof ti;
  /* both counts came in the same version of the struct (Linux 4.1) */
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &n) != 0 ||
      n < offsetof(struct tcp_info, tcpi_bytes_received) +
              sizeof ti.tcpi_bytes_received)
    return -1;
  if (acked)
    *acked = ti.tcpi_bytes_acked;
  if (received)
    *received = ti.tcpi_bytes_received;
  return 0;
}

int attnd_tcp_written(int fd, uint64_t *written) {
  uint64_t acked;
  int queued; /* written, not yet acknowledged */
  if (attnd_tcp_bytes(fd, &acked, NULL) != 0 ||
      ioctl(fd, SIOCOUTQ, &queued) != 0 || queued < 0)
    return -1;
  *written = acked + (uint64_t)queued;
  return 0;
}
