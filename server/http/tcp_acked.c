/* server/http/tcp_acked.c: what a connection's peer has acknowledged, from
 * the kernel's TCP_INFO (the pace of a reply, http.c). A file of its own:
 * tcpi_bytes_acked is only in <linux/tcp.h>, which cannot share a file
 * with glibc's <netinet/tcp.h>, and uv.h includes that one. */
#include <linux/tcp.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

int attnd_tcp_acked(int fd, uint64_t *acked);

int attnd_tcp_acked(int fd, uint64_t *acked) {
  struct tcp_info ti;
  socklen_t n = sizeof ti;
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &n) != 0 ||
      n < offsetof(struct tcp_info, tcpi_bytes_acked) +
              sizeof ti.tcpi_bytes_acked)
    return -1;
  *acked = ti.tcpi_bytes_acked;
  return 0;
}
