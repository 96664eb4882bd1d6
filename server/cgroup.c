/* server/cgroup.c: the CPUs and memory a container lets this process use,
 * and the threads OpenMP lets a team have (cgroup.h). */
#include "cgroup.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

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

/* This process's cgroup in the hierarchy mounted at <root>/sys/fs/cgroup/
 * <mount> ("" for version 2's, "memory", "cpu" or "cpuset" for a version 1
 * controller's), as a directory relative to <root>/sys/fs/cgroup, into
 * `dir` (at least the mount itself). The path comes from
 * <root>/proc/self/cgroup: the line "0::PATH" for version 2, the line whose
 * controller list names `mount` for version 1. In a cgroup namespace that
 * path is "/" and the mount is the process's own cgroup; without one (a
 * systemd service, a container run with the host's cgroup namespace) it is
 * the host's path, the mount shows the whole hierarchy, and the limits are
 * in the directory of that path, not at the mount. A version 1 container
 * runtime may instead mount the process's own cgroup at the mount point
 * while /proc/self/cgroup names the host's path: the longest tail of the
 * path that is a directory under the mount is taken, and the mount itself
 * when none is. */
static void own_dir(const char *root, const char *mount, char *dir,
                    size_t cap) {
  char line[4096], base[4096], path[4096] = "";
  size_t rl = strlen(root);
  const char *sep = rl > 0 && root[rl - 1] == '/' ? "" : "/";
  snprintf(dir, cap, "%s", mount);
  snprintf(base, sizeof base, "%s%sproc/self/cgroup", root, sep);
  FILE *f = fopen(base, "r");
  if (f == NULL)
    return;
  size_t ml = strlen(mount);
  while (fgets(line, sizeof line, f)) {
    char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (c2 == NULL)
      continue;
    int match = 0;
    if (ml == 0) {
      match = c2 == c1 + 1 && strncmp(line, "0:", 2) == 0;
    } else {
      /* the controller list, comma-separated: "cpu,cpuacct" names "cpu" */
      for (const char *t = c1 + 1; t < c2;) {
        const char *e = memchr(t, ',', (size_t)(c2 - t));
        if (e == NULL)
          e = c2;
        if ((size_t)(e - t) == ml && strncmp(t, mount, ml) == 0)
          match = 1;
        t = e + 1;
      }
    }
    if (match) {
      snprintf(path, sizeof path, "%s", c2 + 1);
      path[strcspn(path, "\n")] = 0;
      break;
    }
  }
  fclose(f);
  /* a path above the namespace's root ("/../x") is not under the mount */
  if (path[0] != '/' || strstr(path, "/..") != NULL)
    return;
  for (const char *tail = path; *tail;) {
    while (*tail == '/')
      tail++;
    if (*tail == 0)
      break;
    struct stat st;
    int n = snprintf(base, sizeof base, "%s%ssys/fs/cgroup/%s%s%s", root, sep,
                     mount, ml ? "/" : "", tail);
    if (n > 0 && (size_t)n < sizeof base && stat(base, &st) == 0 &&
        S_ISDIR(st.st_mode)) {
      snprintf(dir, cap, "%s%s%s", mount, ml ? "/" : "", tail);
      return;
    }
    tail = strchr(tail, '/');
    if (tail == NULL)
      break;
  }
}

/* Moves `dir` one directory up, not above its first `mount_len` bytes (the
 * mount). Returns 0 when it was already there. */
static int up_dir(char *dir, size_t mount_len) {
  size_t n = strlen(dir);
  if (n <= mount_len)
    return 0;
  while (n > mount_len && dir[n - 1] != '/')
    n--;
  while (n > mount_len && dir[n - 1] == '/')
    n--;
  dir[n] = 0;
  return 1;
}

/* Reads <dir>/<file> under <root>/sys/fs/cgroup, as read_cgroup_file. */
static long read_in(const char *root, const char *dir, const char *file,
                    char *buf, size_t cap) {
  char rel[4096];
  int n = snprintf(rel, sizeof rel, "%s%s%s", dir, dir[0] ? "/" : "", file);
  if (n < 0 || (size_t)n >= sizeof rel) {
    buf[0] = 0;
    return -1;
  }
  return read_cgroup_file(root, rel, buf, cap);
}

/* The whole CPUs of a quota per period, rounded up (1.5 CPUs of time keep
 * 2 threads busy part of the time); -1 for no quota. */
static long long quota_cpus(long long quota, long long period) {
  if (quota <= 0 || period <= 0)
    return -1;
  return quota / period + (quota % period != 0);
}

int attnd_cgroup_cpus_at(const char *root, int affinity_cpus) {
  int n = affinity_cpus < 1 ? 1 : affinity_cpus;
  char buf[4096], dir[4096];

  /* pass 1: the quota, version 2's "quota period" ("max period" when
   * unlimited) or version 1's two files (quota -1 when unlimited), of this
   * process's cgroup and of each one above it, which bound it too */
  int found = 0;
  own_dir(root, "", dir, sizeof dir);
  do {
    long long quota, period;
    if (read_in(root, dir, "cpu.max", buf, sizeof buf) < 0)
      continue;
    found = 1;
    long long q =
        scan_ll(buf, &quota, &period) == 2 ? quota_cpus(quota, period) : -1;
    if (q > 0 && q < n)
      n = (int)q;
  } while (up_dir(dir, 0));
  if (!found) {
    own_dir(root, "cpu", dir, sizeof dir);
    do {
      long long quota, period, unused;
      if (read_in(root, dir, "cpu.cfs_quota_us", buf, sizeof buf) < 0)
        continue;
      if (scan_ll(buf, &quota, &unused) < 1)
        quota = -1;
      if (read_in(root, dir, "cpu.cfs_period_us", buf, sizeof buf) < 0 ||
          scan_ll(buf, &period, &unused) < 1)
        period = 0;
      long long q = quota_cpus(quota, period);
      if (q > 0 && q < n)
        n = (int)q;
    } while (up_dir(dir, strlen("cpu")));
  }

  /* pass 2: the cpuset, the nearest effective list (it already lies within
   * those above). The affinity mask already lies within it on Linux, so
   * this bounds only an affinity count that came from elsewhere. A list
   * that fills the buffer may be cut short, and is not trusted. */
  long len = -1;
  own_dir(root, "", dir, sizeof dir);
  do
    len = read_in(root, dir, "cpuset.cpus.effective", buf, sizeof buf);
  while (len < 0 && up_dir(dir, 0));
  if (len < 0) {
    own_dir(root, "cpuset", dir, sizeof dir);
    do
      len = read_in(root, dir, "cpuset.effective_cpus", buf, sizeof buf);
    while (len < 0 && up_dir(dir, strlen("cpuset")));
  }
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
   * (about 2^63 when unlimited, which is above any machine), of this
   * process's cgroup and of each one above it */
  static const char *const mounts[] = {"", "memory"};
  static const char *const files[] = {"memory.max", "memory.limit_in_bytes"};
  char buf[256], dir[4096];
  for (int i = 0; i < 2; i++) {
    int found = 0;
    own_dir(root, mounts[i], dir, sizeof dir);
    do {
      if (read_in(root, dir, files[i], buf, sizeof buf) < 0)
        continue;
      found = 1;
      long long lim, unused;
      if (scan_ll(buf, &lim, &unused) >= 1 && lim > 0 && lim < mem)
        mem = lim;
    } while (up_dir(dir, strlen(mounts[i])));
    if (found)
      break;
  }
  return mem;
}

/* libgomp reads OMP_PROC_BIND, OMP_PLACES and GOMP_CPU_AFFINITY before
 * main and, where they ask for binding, binds the first thread to the
 * first place. Left so, attnd would count one CPU, and every thread it
 * starts would inherit that one. The CPUs given to OpenMP are its places:
 * the process gets their union back (within what the kernel and cgroup
 * allow), and each team is still bound within them as the variables ask.
 * Nothing where there are no places or the mask cannot be set. */
static void unbind_first_thread(void) {
#ifdef _OPENMP
  int places = omp_get_num_places();
  if (places < 1)
    return;
  cpu_set_t all;
  CPU_ZERO(&all);
  for (int p = 0; p < places; p++) {
    int n = omp_get_place_num_procs(p);
    int ids[CPU_SETSIZE];
    if (n < 1 || n > CPU_SETSIZE)
      continue;
    omp_get_place_proc_ids(p, ids);
    for (int i = 0; i < n; i++)
      if (ids[i] >= 0 && ids[i] < CPU_SETSIZE)
        CPU_SET(ids[i], &all);
  }
  if (CPU_COUNT(&all) > 0)
    (void)sched_setaffinity(0, sizeof all, &all);
#endif
}

int attnd_cgroup_cpus(void) {
  unbind_first_thread();
  int n = 0;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    n = CPU_COUNT(&set);
  return attnd_cgroup_cpus_at("/", n < 1 ? 1 : n);
}

int attnd_omp_team_limit(const char **why) {
  *why = NULL;
#ifdef _OPENMP
  if (omp_get_max_active_levels() < 1) {
    *why = "OMP_MAX_ACTIVE_LEVELS=0";
    return 1;
  }
  int n = omp_get_thread_limit(); /* INT_MAX when unlimited */
  if (n < INT_MAX) {
    *why = "OMP_THREAD_LIMIT";
    return n < 1 ? 1 : n;
  }
#endif
  return INT_MAX;
}

int64_t attnd_cgroup_memory(void) {
  long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  int64_t mem =
      pages > 0 && size > 0 ? (int64_t)pages * size : INT64_C(1) << 32;
  return attnd_cgroup_memory_at("/", mem);
}
