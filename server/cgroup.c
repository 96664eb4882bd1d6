/* server/cgroup.c: the CPUs and memory a container lets this process use. */
#include "cgroup.h"

#include <ctype.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Reads <root>/sys/fs/cgroup/<rel> into buf (NUL-terminated, at most
 * cap - 1 bytes). Returns the bytes read, or -1 when the file cannot be
 * opened: to the callers, that is a file that is not there. */
static long read_cgroup_file(const char *root, const char *rel, char *buf,
                             size_t cap) {
  char path[4096];
  size_t rl = strlen(root);
  int n = snprintf(path, sizeof path, "%s%ssys/fs/cgroup/%s", root,
                   rl > 0 && root[rl - 1] == '/' ? "" : "/", rel);
  buf[0] = 0;
  if (n < 0 || (size_t)n >= sizeof path)
    return -1;
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return -1;
  size_t got = fread(buf, 1, cap - 1, f);
  buf[got] = 0;
  fclose(f);
  return (long)got;
}

/* Reads up to two integers from the start of `s`, as fscanf "%lld %lld"
 * would (leading blanks, a sign, base 10; out of range saturates). Returns
 * how many it read. */
static int scan_ll(const char *s, long long *a, long long *b) {
  char *end;
  errno = 0;
  *a = strtoll(s, &end, 10);
  if (end == s)
    return 0;
  s = end;
  *b = strtoll(s, &end, 10);
  return end == s ? 1 : 2;
}

/* The number of CPUs in a cpuset list such as "0-3,6\n": ascending,
 * disjoint ranges "lo" or "lo-hi" separated by commas, then blanks. Returns
 * -1 for anything else (an empty list included). */
static long long cpuset_count(const char *s) {
  long long count = 0, prev_hi = -1;
  for (;;) {
    if (!isdigit((unsigned char)*s))
      return -1;
    char *end;
    errno = 0;
    long long lo = strtoll(s, &end, 10), hi = lo;
    s = end;
    if (*s == '-') {
      s++;
      if (!isdigit((unsigned char)*s))
        return -1;
      hi = strtoll(s, &end, 10);
      s = end;
    }
    if (errno || hi < lo || lo <= prev_hi || hi > (1 << 24))
      return -1;
    count += hi - lo + 1;
    prev_hi = hi;
    if (*s != ',')
      break;
    s++;
  }
  while (isspace((unsigned char)*s))
    s++;
  return *s == 0 ? count : -1;
}

int attnd_cgroup_cpus_at(const char *root, int affinity_cpus) {
  int n = affinity_cpus < 1 ? 1 : affinity_cpus;
  char buf[4096];

  /* pass 1: the quota, version 2's "quota period" ("max period" when
   * unlimited) or version 1's two files (quota -1 when unlimited) */
  long long quota = -1, period = 0;
  if (read_cgroup_file(root, "cpu.max", buf, sizeof buf) >= 0) {
    if (scan_ll(buf, &quota, &period) != 2)
      quota = -1;
  } else if (read_cgroup_file(root, "cpu/cpu.cfs_quota_us", buf, sizeof buf) >=
             0) {
    long long unused;
    if (scan_ll(buf, &quota, &unused) < 1)
      quota = -1;
    if (read_cgroup_file(root, "cpu/cpu.cfs_period_us", buf, sizeof buf) < 0 ||
        scan_ll(buf, &period, &unused) < 1)
      period = 0;
  }
  if (quota > 0 && period > 0) {
    /* rounded up: 1.5 CPUs of time keep 2 threads busy part of the time */
    long long q = quota / period + (quota % period != 0);
    if (q < n)
      n = (int)q;
  }

  /* pass 2: the cpuset. The affinity mask already lies within it on Linux,
   * so this bounds only an affinity count that came from elsewhere. A list
   * that fills the buffer may be cut short, and is not trusted. */
  long len = read_cgroup_file(root, "cpuset.cpus.effective", buf, sizeof buf);
  if (len < 0)
    len =
        read_cgroup_file(root, "cpuset/cpuset.effective_cpus", buf, sizeof buf);
  if (len >= 0 && (size_t)len < sizeof buf - 1) {
    long long c = cpuset_count(buf);
    if (c > 0 && c < n)
      n = (int)c;
  }
  return n;
}

int64_t attnd_cgroup_memory_at(const char *root, int64_t machine_bytes) {
  int64_t mem = machine_bytes;
  /* version 2's memory.max ("max" when unlimited), or version 1's limit
   * (about 2^63 when unlimited, which is above any machine) */
  static const char *const files[] = {"memory.max",
                                      "memory/memory.limit_in_bytes"};
  char buf[256];
  for (int i = 0; i < 2; i++) {
    if (read_cgroup_file(root, files[i], buf, sizeof buf) < 0)
      continue;
    long long lim, unused;
    if (scan_ll(buf, &lim, &unused) >= 1 && lim > 0 && lim < mem)
      mem = lim;
    break;
  }
  return mem;
}

int attnd_cgroup_cpus(void) {
  int n = 0;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    n = CPU_COUNT(&set);
  return attnd_cgroup_cpus_at("/", n < 1 ? 1 : n);
}

int64_t attnd_cgroup_memory(void) {
  long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  int64_t mem =
      pages > 0 && size > 0 ? (int64_t)pages * size : INT64_C(1) << 32;
  return attnd_cgroup_memory_at("/", mem);
}
