/* server/http/access_log.c: see access_log.h. */
#include "http/access_log.h"

#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "codec/buf.h"
#include "codec/util.h"

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

/* Takes back the `done` bytes of a line that a failed write left at the
 * end of f's file (a disk that filled, or a size limit reached, in the
 * middle of it: the kernel writes what fits, then fails), so that the
 * next line written starts a line of its own and every line stays JSON.
 * The part is the file's last `done` bytes: the file is appended to, and
 * a stream not opened to append (stdout after `attnd > log`) writes at
 * its end too. Only a regular file that still holds them is cut: one
 * emptied meanwhile (logrotate's copytruncate) is left as it is. The
 * stream is then put back where the line began: one not opened to append
 * would write its next line past a hole of NULs. The file's size is asked
 * for here, on failure only. Returns 0, or -1 where the cut failed
 * (nothing more is tried). */
static int cut_back(FILE *f, size_t done) {
  struct stat st;
  int fd = fileno(f);
  if (done == 0 || fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
      st.st_size < (off_t)done)
    return 0;
  off_t at = st.st_size - (off_t)done;
  return ftruncate(fd, at) == 0 && fseeko(f, at, SEEK_SET) == 0 ? 0 : -1;
}

/* Writes the line p[0..len) to f and returns how many of its bytes went
 * in (len: all; else errno says why). Where f has a descriptor, after
 * what stdio holds of others' output, the line is one write(2), repeated
 * only for the rest of a short one, so that a failure tells how much of
 * it went in; a stream of no descriptor goes through fwrite and fflush,
 * and is never cut. Caller holds f's lock. */
static size_t put_line(FILE *f, const char *p, size_t len) {
  int fd = fileno(f);
  if (fd < 0) {
    int ok = fwrite(p, 1, len, f) == len;
    return fflush(f) == 0 && ok ? len : 0;
  }
  if (fflush(f) != 0)
    return 0;
  size_t done = 0;
  while (done < len) {
    ssize_t w = write(fd, p + done, len - done);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0) {
      if (w == 0)
        errno = EIO;
      break;
    }
    done += (size_t)w;
  }
  return done;
}

/* The line's "ts" for the second `now`: gmtime_r and strftime cost more
 * than the rest of a line, so each thread formats a second once. */
static const char *stamp(time_t now) {
  static _Thread_local time_t at;
  static _Thread_local char ts[32];
  if (now != at || ts[0] == 0) {
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
    at = now;
  }
  return ts;
}

/* Appends `key` and v as "%.3f" writes it: attnd_fmt_ms is that byte for
 * byte over [0, 1e15], where every timing a clock gives lies; printf
 * writes the rest (negative, NaN, infinite, huge). */
static void put_ms(attnd_buf_t *b, const char *key, double v) {
  attnd_buf_puts(b, key);
  char num[24];
  if (!signbit(v) && v <= 1e15)
    attnd_buf_append(b, num, attnd_fmt_ms(num, v));
  else
    attnd_buf_printf(b, "%.3f", v);
}

static void put_count(attnd_buf_t *b, const char *key, uint64_t v) {
  char num[24];
  attnd_buf_puts(b, key);
  attnd_buf_append(b, num, attnd_fmt_u64(num, v));
}

/* The line is built without printf (slow in this process: see
 * codec/util.h), in a buffer on the stack unless it is long. */
void attnd_access_log_write(FILE *f, const attnd_access_t *a) {
  if (f == NULL)
    return;
  char mem[512], num[24];
  attnd_buf_t b;
  attnd_buf_init_in(&b, mem, sizeof mem);
  put_string(&b, "{\"ts\":", stamp(time(NULL)));
  put_string(&b, ",\"request_id\":", a->request_id);
  if (a->trace_id) {
    put_string(&b, ",\"trace_id\":", a->trace_id);
    put_string(&b, ",\"parent_id\":", a->parent_id);
  }
  put_string(&b, ",\"id\":", a->id);
  put_string(&b, ",\"method\":", a->method);
  put_string(&b, ",\"path\":", a->path);
  put_string(&b, ",\"client_addr\":", a->client_addr);
  attnd_buf_puts(&b, ",\"status\":");
  attnd_buf_append(&b, num, attnd_fmt_i64(num, a->status));
  put_count(&b, ",\"bytes_in\":", a->bytes_in);
  put_count(&b, ",\"bytes_out\":", a->bytes_out);
  attnd_buf_puts(&b,
                 a->complete ? ",\"complete\":true" : ",\"complete\":false");
  put_ms(&b, ",\"queue_ms\":", a->queue_ms);
  put_ms(&b, ",\"compute_ms\":", a->compute_ms);
  put_ms(&b, ",\"total_ms\":", a->total_ms);
  attnd_buf_puts(&b, "}\n");
  int err = ENOMEM;
  if (!b.oom) {
    flockfile(f); /* errno and the error flag are this line's */
    size_t done = put_line(f, b.data, b.len); /* one write per line */
    err = done == b.len ? 0 : errno;
    if (err)
      cut_back(f, done);
    clearerr(f);
    funlockfile(f);
  }
  attnd_buf_free(&b);
  told(err);
}

/* Whether p[0..n) are n lowercase hex digits (HEXDIGLC), and, with
 * `nonzero`, not all '0'. Stops at the first other byte, so never reads
 * past a NUL. */
static int hex_run(const char *p, size_t n, int nonzero) {
  int any = !nonzero;
  for (size_t i = 0; i < n; i++) {
    if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f')))
      return 0;
    any |= p[i] != '0';
  }
  return any;
}

/* Each field is checked at its fixed place, in order, each check only
 * once the ones before it have passed, so that no byte past the value's
 * NUL is read. */
int attnd_traceparent_parse(const char *v, char *trace_id, char *parent_id) {
  while (*v == ' ' || *v == '\t')
    v++;
  if (!hex_run(v, 2, 0) || v[2] != '-' || memcmp(v, "ff", 2) == 0 ||
      !hex_run(v + 3, ATTND_TRACE_ID_LEN, 1) || v[35] != '-' ||
      !hex_run(v + 36, ATTND_PARENT_ID_LEN, 1) || v[52] != '-' ||
      !hex_run(v + 53, 2, 0))
    return 0;
  /* version 00 ends with its flags; a later one may go on after a dash,
   * with fields this version cannot know of */
  const char *end = v + 55;
  if (memcmp(v, "00", 2) == 0 || *end != '-') {
    while (*end == ' ' || *end == '\t')
      end++;
    if (*end)
      return 0;
  }
  memcpy(trace_id, v + 3, ATTND_TRACE_ID_LEN);
  trace_id[ATTND_TRACE_ID_LEN] = 0;
  memcpy(parent_id, v + 36, ATTND_PARENT_ID_LEN);
  parent_id[ATTND_PARENT_ID_LEN] = 0;
  return 1;
}
