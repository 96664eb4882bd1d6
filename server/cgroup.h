/* server/cgroup.h: the CPUs and memory a container lets this process use,
 * and the threads OpenMP lets one request's team have (main passes
 * these bounds to the configuration, server/config.c).
 *
 * The limits come from the cgroup files under <root>/sys/fs/cgroup: version
 * 2's cpu.max, cpuset.cpus.effective and memory.max, else version 1's
 * cpu/cpu.cfs_quota_us with cpu/cpu.cfs_period_us, cpuset/
 * cpuset.effective_cpus and memory/memory.limit_in_bytes. For each limit the
 * version 2 file, when it exists, is the only one read, even when its text
 * is not a limit. A file that is missing, unreadable or holds no limit
 * ("max", -1, text that does not parse) bounds nothing.
 *
 * The files are read in this process's own cgroup, the path that
 * <root>/proc/self/cgroup names below the mount ("/" in a cgroup namespace,
 * the host's path in a systemd service or a container sharing the host's
 * namespace), and in every cgroup above it up to the mount: a quota or a
 * memory limit anywhere on the way bounds the process, and the smallest
 * wins; the cpuset is the nearest effective one. When that path is not a
 * directory under the mount (a version 1 runtime that mounted the
 * container's own cgroup there), the longest tail of it that is one, else
 * the mount itself, stands for it.
 *
 * The _at functions are pure apart from reading those files: they take the
 * root directory and what the machine offers, so that tests can run them on
 * a directory of fixtures. attnd_cgroup_cpus and attnd_cgroup_memory apply
 * them to "/" and to this process and machine. All borrow their arguments
 * and may run on any thread. */
#ifndef ATTND_CGROUP_H
#define ATTND_CGROUP_H

#include <stdint.h>

/* The CPUs this process may use: `affinity_cpus` (its affinity mask's
 * count), bounded by the cgroup CPU quota rounded up to whole CPUs
 * (quota 150000 per period 100000 is 2) and by the number of CPUs in the
 * cgroup's cpuset. At least 1. `root` is the directory holding
 * sys/fs/cgroup ("/" for the real one). */
int attnd_cgroup_cpus_at(const char *root, int affinity_cpus);

/* The memory this process may use: `machine_bytes`, bounded by the cgroup
 * memory limit when that is positive and smaller. `root` as above. */
int64_t attnd_cgroup_memory_at(const char *root, int64_t machine_bytes);

/* attnd_cgroup_cpus_at("/", the CPU count of this process's affinity mask,
 * at least 1). Where OpenMP's binding variables (OMP_PROC_BIND, OMP_PLACES,
 * GOMP_CPU_AFFINITY) made libgomp bind the first thread to one place, the
 * process's mask is first set back to the union of OpenMP's places: call
 * it from main, before any thread starts. */
int attnd_cgroup_cpus(void);

/* The most threads OpenMP gives a team that one of attnd's threads starts,
 * as its variables set it: OMP_THREAD_LIMIT (thread-limit-var, one for each
 * contention group, and each thread that OpenMP did not start is one), or
 * 1 under OMP_MAX_ACTIVE_LEVELS=0 (no parallel region is active). INT_MAX
 * when neither bounds it. `why` gets the variable that bounds it, or NULL.
 * Any thread, before it changes OpenMP's settings. */
int attnd_omp_team_limit(const char **why);

/* attnd_cgroup_memory_at("/", this machine's physical memory; 4 GiB when
 * sysconf cannot tell). */
int64_t attnd_cgroup_memory(void);

#endif
