/* tests/emu/emu_selftest.cc: the CUDA execution model of tests/emu/emu.h
 * checked by small kernels written for it, so that the four emulators'
 * passes mean what they claim (make emu-selftest, in cuda-check and in
 * make test with CUDA=1).
 *
 * - a correct kernel (a block's values reversed through shared memory,
 *   with a __syncthreads) gives the right answer, with every thread of
 *   every block run once, and a block whose threads partly return before
 *   the barrier still passes it;
 * - the same kernel without its barrier reads values not yet written;
 * - a warp that reads another's shared memory without a barrier, or
 *   overwrites what another has still to read, is exposed in some phases
 *   and not in others: the warps' order is drawn anew at each barrier,
 *   and a lane's place in its warp too, so no fixed order hides a race;
 * - a warp's shuffle gives each lane its partner's value, and a butterfly
 *   sum the warp's sum in every lane;
 * - a lane that returns while its warp waits at a collective, and a block
 *   barrier that waits for lanes held at a warp's, are reported as a
 *   deadlock and abort (each in a child process), rather than hang;
 * - atomicAdd and atomicMax add up across the blocks of a grid;
 * - under ASan (make SAN=1), a kernel's read past shared memory, and past
 *   a local array after two barriers, is reported (each in a child); so
 *   is a read past a templated kernel's static __shared__ array into the
 *   next (COMDAT data but for emu.h's __global__), and a read one float
 *   past a launch's dynamic shared memory, 4 bytes into an 8-byte granule
 *   of the larger array that holds it, where a read of the launch's last
 *   float is not, nor, once the launch is over, a write of all of the
 *   array.
 *
 * usage: emu_selftest; prints a line a case, then "N passed, M failed",
 * and exits 1 if any failed. */
#include <cuda_runtime.h>

#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "emu.h"

#ifdef EMU_ASAN
/* A templated kernel with two __shared__ arrays, as reduce_emu maps
 * reduce.cuh's: statics. Outside the anonymous namespace, so that only
 * emu.h's __global__ keeps them from being COMDAT data without redzones.
 * Each thread writes its float of each, then, after a barrier, reads one
 * of the four past a's end. */
#undef __shared__
#define __shared__ static
namespace selftest {
/* `p` as a pointer the compiler cannot follow, so that UBSan's bounds
 * checks leave an overrun through it to ASan. */
__attribute__((noipa)) const float *escape(const float *p) {
  return p;
}
template <int N> __global__ void pair_kernel(float *out) {
  __shared__ float a[N];
  __shared__ float b[N];
  a[threadIdx.x] = 1.0f;
  b[threadIdx.x] = 2.0f;
  emu::block_sync();
  out[threadIdx.x] = b[threadIdx.x] - escape(a)[N + threadIdx.x % 4];
}
} // namespace selftest
#undef __shared__
#endif

namespace {

constexpr int kThreads = 256, kWarps = kThreads / 32;
constexpr int kPhases = 32;

/* A block's shared memory: statics, as in the emulators. */
float sh[kThreads];
float slot[kWarps][32]; /* a warp's shuffle exchange */

float shfl_xor(float v, int x) {
  const int w = threadIdx.x / 32, l = threadIdx.x % 32;
  slot[w][l] = v;
  emu::warp_sync();
  float r = slot[w][l ^ x];
  emu::warp_sync(); /* no lane writes again before every lane has read */
  return r;
}

/* Reverses each block's first `active` values of `in` through shared
 * memory; the other threads return at once. Shared memory starts as NaN
 * in every block, so a read of a value not yet written shows. */
int reverse(int blocks, int active, bool barrier, std::vector<int> &runs) {
  std::vector<float> in(blocks * kThreads), out(blocks * kThreads, -1.0f);
  for (size_t i = 0; i < in.size(); i++)
    in[i] = (float)i;
  runs.assign(blocks * kThreads, 0);
  emu::launch(
      dim3(blocks), kThreads,
      [&] {
        const int t = threadIdx.x, base = blockIdx.x * kThreads;
        runs[base + t]++;
        if (t >= active)
          return;
        sh[t] = in[base + t];
        if (barrier)
          emu::block_sync();
        out[base + t] = sh[active - 1 - t];
      },
      [] {
        for (float &x : sh)
          x = NAN;
      });
  int wrong = 0;
  for (int b = 0; b < blocks; b++)
    for (int t = 0; t < active; t++)
      wrong += out[b * kThreads + t] != in[b * kThreads + active - 1 - t];
  return wrong;
}

int case_correct() {
  std::vector<int> runs;
  for (int active : {kThreads, 160}) {
    int wrong = reverse(4, active, true, runs);
    if (wrong) {
      printf("FAIL correct: %d of %d threads wrong (%d active)\n", wrong,
             4 * active, active);
      return 1;
    }
    for (size_t i = 0; i < runs.size(); i++)
      if (runs[i] != 1) {
        printf("FAIL correct: thread %zu of the grid ran %d times\n", i,
               runs[i]);
        return 1;
      }
  }
  printf("ok correct: reversed through shared memory, each thread once\n");
  return 0;
}

int case_missing_barrier() {
  std::vector<int> runs;
  int wrong = reverse(4, kThreads, false, runs);
  if (!wrong) {
    printf("FAIL missing barrier: every read found its value\n");
    return 1;
  }
  printf("ok missing barrier: %d of %d reads before the write\n", wrong,
         4 * kThreads);
  return 0;
}

/* Whether a race showed in some of kPhases phases and not in others. */
int some_not_all(const char *name, const int *shown) {
  int n = 0;
  for (int p = 0; p < kPhases; p++)
    n += shown[p] != 0;
  if (n == 0 || n == kPhases) {
    printf("FAIL %s: shown in %d of %d phases (the same order every "
           "phase)\n",
           name, n, kPhases);
    return 1;
  }
  printf("ok %s: shown in %d of %d phases\n", name, n, kPhases);
  return 0;
}

/* Warp 0 reads what warp 1 writes in the same phase, with no barrier
 * between: it reads the last phase's value if it runs first. */
int case_read_before_write() {
  static float a[32];
  int shown[kPhases] = {0};
  for (float &x : a)
    x = -1.0f;
  emu::launch(dim3(1), 64, [&] {
    const int w = threadIdx.x / 32, l = threadIdx.x % 32;
    for (int p = 0; p < kPhases; p++) {
      if (w == 1)
        a[l] = (float)p;
      else if (a[l] != (float)p)
        shown[p] = 1;
      emu::block_sync();
    }
  });
  return some_not_all("read before write", shown);
}

/* Warp 0 reads, after a barrier, what warp 1 wrote before it; without a
 * second barrier warp 1 may write the next phase's value first. */
int case_write_before_read() {
  static float b[32];
  int shown[kPhases] = {0};
  emu::launch(dim3(1), 64, [&] {
    const int w = threadIdx.x / 32, l = threadIdx.x % 32;
    for (int p = 0; p < kPhases; p++) {
      if (w == 1)
        b[l] = (float)p;
      emu::block_sync();
      if (w == 0 && b[l] != (float)p)
        shown[p] = 1;
    }
  });
  return some_not_all("write before read", shown);
}

/* Lane 0 reads lane 1's value of the same phase without a collective:
 * lanes are not in lockstep, and their order changes phase to phase. */
int case_lanes() {
  static float c[32];
  int shown[kPhases] = {0};
  for (float &x : c)
    x = -1.0f;
  emu::launch(dim3(1), 32, [&] {
    const int l = threadIdx.x;
    for (int p = 0; p < kPhases; p++) {
      c[l] = (float)p;
      if (l == 0 && c[1] != (float)p)
        shown[p] = 1;
      emu::block_sync();
    }
  });
  return some_not_all("lanes not in lockstep", shown);
}

int case_shuffle() {
  std::vector<float> xo(kThreads * 5), sum(kThreads);
  emu::launch(dim3(1), kThreads, [&] {
    const int t = threadIdx.x, w = t / 32, l = t % 32;
    const float v = (float)((w + 1) * 1000 + l * l);
    for (int i = 0; i < 5; i++)
      xo[t * 5 + i] = shfl_xor(v, 1 << i);
    float s = v;
    for (int x = 16; x > 0; x /= 2)
      s += shfl_xor(s, x);
    sum[t] = s;
  });
  for (int t = 0; t < kThreads; t++) {
    const int w = t / 32, l = t % 32;
    for (int i = 0; i < 5; i++) {
      const int m = l ^ (1 << i);
      if (xo[t * 5 + i] != (float)((w + 1) * 1000 + m * m)) {
        printf("FAIL shuffle: lane %d of warp %d got %g for xor %d\n", l, w,
               xo[t * 5 + i], 1 << i);
        return 1;
      }
    }
    float want = 0;
    for (int m = 0; m < 32; m++)
      want += (float)((w + 1) * 1000 + m * m);
    if (sum[t] != want) {
      printf("FAIL shuffle: lane %d of warp %d summed %g, not %g\n", l, w,
             sum[t], want);
      return 1;
    }
  }
  printf("ok shuffle: every lane's partners and its warp's sum\n");
  return 0;
}

/* Runs `launch` in a child process, which must end in failure with
 * `want` in its report (the runtime's of a deadlock, or ASan's). An alarm
 * turns a hang into a failure rather than a stuck run; a correct runtime
 * reports at once. */
template <class L>
int case_reported_run(const char *name, const char *want, L launch) {
  int fd[2];
  if (pipe(fd) != 0) {
    perror("emu_selftest: pipe");
    return 1;
  }
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) {
    perror("emu_selftest: fork");
    return 1;
  }
  if (pid == 0) {
    close(fd[0]);
    dup2(fd[1], 2);
    alarm(60);
    launch();
    fprintf(stderr, "returned\n");
    _exit(0);
  }
  close(fd[1]);
  std::string err;
  char buf[512];
  ssize_t n;
  while ((n = read(fd[0], buf, sizeof buf)) > 0)
    err.append(buf, (size_t)n);
  close(fd[0]);
  int st;
  waitpid(pid, &st, 0);
  const bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
  if (ok || err.find(want) == std::string::npos) {
    printf("FAIL %s: %s, stderr:\n%s", name,
           WIFSIGNALED(st) ? strsignal(WTERMSIG(st)) : "exited", err.c_str());
    return 1;
  }
  printf("ok %s: reported\n", name);
  return 0;
}

/* The same with `kernel` launched on one block of kThreads. */
template <class K>
int case_reported(const char *name, const char *want, K kernel) {
  return case_reported_run(name, want,
                           [&] { emu::launch(dim3(1), kThreads, kernel); });
}

#ifdef EMU_ASAN
using selftest::escape;

/* A launch's dynamic shared memory: an odd count of floats (1028 bytes,
 * not a multiple of ASan's 8) of an array that holds four times that. */
constexpr int kDynamic = kThreads + 1;
alignas(16) float dyn[4 * kDynamic];

/* Each thread writes its float of the launch's kDynamic and, after a
 * barrier, reads the float `past` floats beyond the launch's last. */
void dynamic_launch(int past) {
  const emu::dynamic_shared own(dyn, sizeof dyn, kDynamic * sizeof(float));
  emu::launch(dim3(1), kThreads, [past] {
    dyn[threadIdx.x] = 1.0f;
    if (threadIdx.x == 0)
      dyn[kThreads] = 2.0f;
    emu::block_sync();
    const float *p = escape(dyn);
    sh[threadIdx.x] = p[kDynamic - 1 + past];
  });
}

/* The launch's last float read, then all of the array written once the
 * launch is over: neither may be reported. */
int case_dynamic_bounds() {
  dynamic_launch(0);
  memset(dyn, 0, sizeof dyn);
  printf("ok asan: a launch's own dynamic shared memory, all of it\n");
  return 0;
}
#endif

int case_atomics() {
  constexpr int blocks = 16, n = blocks * kThreads;
  double total = 0;
  unsigned top = 0;
  std::vector<double> old(n);
  emu::launch(dim3(blocks), kThreads, [&] {
    const int i = blockIdx.x * kThreads + threadIdx.x;
    old[i] = attn_cu::atomicAdd(&total, 1.0);
    attn_cu::atomicMax(&top, (unsigned)(i * 2654435761u) >> 8);
  });
  unsigned want_top = 0;
  std::vector<int> seen(n, 0);
  for (int i = 0; i < n; i++) {
    unsigned h = (unsigned)(i * 2654435761u) >> 8;
    want_top = h > want_top ? h : want_top;
    if (old[i] >= 0 && old[i] < n && old[i] == (int)old[i])
      seen[(int)old[i]]++;
  }
  for (int i = 0; i < n; i++)
    if (seen[i] != 1) {
      printf("FAIL atomics: atomicAdd returned %d %d times\n", i, seen[i]);
      return 1;
    }
  if (total != n || top != want_top) {
    printf("FAIL atomics: sum %g of %d, max %u of %u\n", total, n, top,
           want_top);
    return 1;
  }
  printf("ok atomics: %d adds and maxes across %d blocks\n", n, blocks);
  return 0;
}

} // namespace

int main(void) {
  int failed = 0, cases = 0;
  auto run = [&](int r) {
    cases++;
    failed += r;
  };
  run(case_correct());
  run(case_missing_barrier());
  run(case_read_before_write());
  run(case_write_before_read());
  run(case_lanes());
  run(case_shuffle());
  run(case_reported("lane returns at a collective", "emu: deadlock", [] {
    if (threadIdx.x % 32 == 5)
      return;
    shfl_xor(1.0f, 1);
  }));
  run(case_reported("barrier against a collective", "emu: deadlock", [] {
    if (threadIdx.x % 32 < 16)
      emu::block_sync();
    else
      shfl_xor(1.0f, 1);
  }));
  run(case_atomics());
#ifdef EMU_ASAN
  /* A read past shared memory, and past a kernel's local array after two
   * barriers: the fiber's frame keeps its redzones across the switches. */
  run(case_reported("asan: shared memory", "global-buffer-overflow", [] {
    sh[threadIdx.x] = 1.0f;
    emu::block_sync();
    const float *p = escape(sh);
    sh[0] = p[kThreads + threadIdx.x % 4];
  }));
  run(case_reported("asan: a local array", "stack-buffer-overflow", [] {
    float loc[4] = {1, 2, 3, 4};
    emu::block_sync();
    emu::block_sync();
    const float *p = escape(loc);
    sh[threadIdx.x] = p[4 + threadIdx.x % 2];
  }));
  run(case_reported("asan: a templated kernel's __shared__ array",
                    "global-buffer-overflow",
                    [] { selftest::pair_kernel<kThreads>(sh); }));
  run(case_dynamic_bounds());
  run(case_reported_run("asan: past a launch's dynamic shared memory",
                        "use-after-poison", [] { dynamic_launch(1); }));
#endif
  printf("%d passed, %d failed\n", cases - failed, failed);
  return failed ? 1 : 0;
}
