/* server/http/access_log.c: see access_log.h. */
#include "http/access_log.h"

#include <string.h>
#include <time.h>

#include "codec/buf.h"

FILE *attnd_access_log_open(const char *spec) {
  if (strcmp(spec, "off") == 0)
    return NULL;
  if (strcmp(spec, "stderr") == 0)
    return stderr;
  if (strcmp(spec, "stdout") == 0)
    return stdout;
  FILE *f = fopen(spec, "a");
  if (f == NULL)
    fprintf(stderr, "attnd: access_log: cannot open %s; logging to stderr\n",
            spec);
  return f ? f : stderr;
}

void attnd_access_log_close(FILE *f) {
  if (f && f != stderr && f != stdout)
    fclose(f);
}

static void put_string(attnd_buf_t *b, const char *key, const char *s) {
  attnd_buf_puts(b, key);
  attnd_buf_json_string(b, s ? s : "", s ? strlen(s) : 0);
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
                   "\"queue_ms\":%.3f,\"compute_ms\":%.3f,\"total_ms\":%.3f}\n",
                   a->status, a->bytes_in, a->bytes_out, a->queue_ms,
                   a->compute_ms, a->total_ms);
  attnd_buf_append(&b, nums, (size_t)n);
  if (!b.oom)
    fwrite(b.data, 1, b.len, f); /* one write per line */
  fflush(f);
  attnd_buf_free(&b);
}
