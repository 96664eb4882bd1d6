/* server/http/access_log.c: see access_log.h. */
#include "http/access_log.h"

#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "codec/buf.h"

int attnd_access_log_open(const char *spec, FILE **f, char *msg, size_t msz) {
  *f = strcmp(spec, "off") == 0      ? NULL
       : strcmp(spec, "stderr") == 0 ? stderr
       : strcmp(spec, "stdout") == 0 ? stdout
                                     : fopen(spec, "a");
  if (*f == NULL && strcmp(spec, "off") != 0)
    return snprintf(msg, msz, "access_log: cannot open %s: %s", spec,
                    strerror(errno)),
           -1;
  return 0;
}

void attnd_access_log_close(FILE *f) {
  if (f && f != stderr && f != stdout)
    fclose(f);
}

static void put_string(attnd_buf_t *b, const char *key, const char *s) {
  attnd_buf_puts(b, key);
  attnd_buf_json_string(b, s ? s : "", s ? strlen(s) : 0);
}

/* Lines lost since the last one written (the log is one per process). */
static atomic_long lost;

/* Says on stderr when lines start to be lost (a full disk, an I/O error,
 * out of memory), once for a run of failures, and then how many were lost
 * when one is written again: an empty log is never a mystery. `err`: 0
 * when the line was written, else its errno. */
static void told(int err) {
  if (err && atomic_fetch_add(&lost, 1) == 0) {
    char mem[256]; /* one write, as every event line: none lands inside */
    attnd_buf_t b;
    attnd_buf_init_in(&b, mem, sizeof mem);
    attnd_buf_puts(&b, "{\"event\":\"access_log_failed\",\"error\":");
    const char *why = strerror(err);
    attnd_buf_json_string(&b, why, strlen(why));
    attnd_buf_puts(&b, "}\n");
    if (b.oom)
      fputs("{\"event\":\"access_log_failed\",\"error\":\"\"}\n", stderr);
    else
      fwrite(b.data, 1, b.len, stderr);
    attnd_buf_free(&b);
  } else if (err == 0 && atomic_load(&lost)) {
    long n = atomic_exchange(&lost, 0);
    if (n)
      fprintf(stderr, "{\"event\":\"access_log_resumed\",\"lost\":%ld}\n", n);
  }
}

/* The size of the regular file under f, where its lines are appended;
 * -1 for anything else (a pipe, a terminal, a stream of no descriptor). */
static off_t end_of(FILE *f) {
  struct stat st;
  int fd = fileno(f);
  return fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? st.st_size
                                                               : -1;
}

/* Takes back the part of a line that a failed write left at the end of
 * f's file (a disk that filled, or a size limit reached, in the middle of
 * it: the kernel writes what fits, then fails), so that the next line
 * written starts a line of its own and every line stays JSON. `at` is the
 * file's size before the line (end_of), `len` the line's. Only a file
 * that grew by less than the line is cut: one emptied meanwhile
 * (logrotate's copytruncate) is left as it is. The stream is then put
 * back at `at` too: one not opened to append (stdout after `attnd > log`)
 * would write its next line past a hole of NULs. Returns 0, or -1 where
 * the cut failed (nothing more is tried). */
static int cut_back(FILE *f, off_t at, size_t len) {
  off_t now = at < 0 ? -1 : end_of(f);
  if (now <= at || now >= at + (off_t)len)
    return 0;
  return ftruncate(fileno(f), at) == 0 && fseeko(f, at, SEEK_SET) == 0 ? 0 : -1;
}

void attnd_access_log_write(FILE *f, const attnd_access_t *a) {
  if (f == NULL)
    return;
  time_t now = time(NULL);
  struct tm tm;
  char ts[32], nums[256];
  gmtime_r(&now, &tm);
  strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
  attnd_buf_t b;
  attnd_buf_init(&b);
  attnd_buf_reserve(&b, 512);
  put_string(&b, "{\"ts\":", ts);
  put_string(&b, ",\"request_id\":", a->request_id);
  put_string(&b, ",\"id\":", a->id);
  put_string(&b, ",\"method\":", a->method);
  put_string(&b, ",\"path\":", a->path);
  int n = snprintf(nums, sizeof nums,
                   ",\"status\":%d,\"bytes_in\":%zu,\"bytes_out\":%zu,"
                   "\"complete\":%s,\"queue_ms\":%.3f,\"compute_ms\":%.3f,"
                   "\"total_ms\":%.3f}\n",
                   a->status, a->bytes_in, a->bytes_out,
                   a->complete ? "true" : "false", a->queue_ms, a->compute_ms,
                   a->total_ms);
  attnd_buf_append(&b, nums, (size_t)n);
  int err = ENOMEM;
  if (!b.oom) {
    flockfile(f); /* errno and the error flag are this line's */
    off_t at = end_of(f);
    int ok = fwrite(b.data, 1, b.len, f) == b.len; /* one write per line */
    ok = fflush(f) == 0 && ok;
    err = ok ? 0 : errno;
    if (!ok)
      cut_back(f, at, b.len);
    clearerr(f);
    funlockfile(f);
  }
  attnd_buf_free(&b);
  told(err);
}
