/* tests/emu/emu.h: the CUDA execution model that the CPU emulators of the
 * kernels (tests/flash-emu, reduce-emu, cores-emu, kv-emu) share: a
 * grid's blocks run one after another, and a block's threads run as
 * cooperative fibers in the one OS thread that called emu::launch.
 *
 * What it guarantees:
 * - threadIdx, blockIdx, gridDim and blockDim are the running thread's;
 *   every thread of a block runs the kernel once, and a block's threads
 *   have all returned before the next block starts (so shared memory,
 *   which the emulators keep as statics, is reused the way a GPU reuses
 *   it: never by two blocks at once).
 * - No preemption: a thread runs from one sync point (block_sync,
 *   warp_sync) to the next without any other thread running. Between two
 *   __syncthreads the warps run one after another, each as far as it can,
 *   in an order drawn anew at each __syncthreads from a generator with a
 *   fixed seed: a missing barrier shows as a read of a value not yet
 *   written, or already overwritten by a warp that ran ahead, in either
 *   direction over a launch's many phases, and the same way every run.
 * - block_sync (__syncthreads) returns once every thread of the block that
 *   has not returned from the kernel has arrived: a thread that returns
 *   early leaves the count, as on the GPU.
 * - warp_sync (a warp collective's meeting point) returns once all 32
 *   lanes of the warp have arrived: the collectives are full-mask ones.
 *   A lane that returns while its warp waits, or a block barrier that
 *   waits for threads held at a warp's, is a deadlock: the runtime names
 *   the waiting threads and aborts, rather than hanging or passing.
 *
 * What it does not: blocks never run concurrently (a race between blocks
 * of one launch cannot show), nor do two threads within a round (lanes of
 * a warp are not in lockstep; code that relies on that without a
 * collective shows it). Memory is one address space with the program's;
 * there is no timing. Not reentrant: a kernel may not launch.
 *
 * Each fiber has its own stack (kStack bytes under a guard page, mapped
 * once and reused by every launch): a kernel whose locals overflow it
 * faults at once rather than writing over its neighbour. A switch is
 * __builtin_setjmp/__builtin_longjmp, without a system call; ucontext
 * starts each fiber once a launch.
 *
 * Under AddressSanitizer (make SAN=1) the runtime tells ASan of each
 * switch of stacks, and keeps the redzones of a fiber's suspended frames
 * (see jump): the heap, a kernel's locals and the emulators' shared
 * memory are checked as in any program. Two things make the shared
 * memory's bounds a launch's own:
 * - __global__ is `static` here, so a kernel has internal linkage. GCC
 *   (and clang 14) give no redzone to a static of a function of vague
 *   linkage, a template's or an inline one's (COMDAT data: the linker
 *   keeps one copy, which may not be the padded one), so the __shared__
 *   arrays of a templated kernel (reduce.cuh's reduce_kernel, which
 *   reduce_emu maps to statics) would overrun into their neighbours
 *   unseen; a template of internal linkage has plain statics, each with
 *   its redzone. A __shared__ array in a __device__ function outside an
 *   anonymous namespace would still have none (no kernel has one).
 * - An emulator keeps a kernel's dynamic shared memory as one array of
 *   the most it allows (flash_emu, cores_emu); a dynamic_shared (below)
 *   around a launch leaves only the launch's own bytes of it addressable.
 * Without ASan neither changes what a kernel computes; dynamic_shared
 * still checks that a launch's size fits its array. */
#ifndef ATTN_TESTS_EMU_H
#define ATTN_TESTS_EMU_H

#include <cuda_runtime.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <random>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_ASAN 1
#endif
#endif
#ifdef EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

/* A kernel of internal linkage, so that ASan pads its statics (above);
 * unused, since an emulator runs only some of a header's kernels. */
#undef __global__
#define __global__ static __attribute__((unused))

/* nvcc's built-in variables */
inline uint3 threadIdx, blockIdx;
inline dim3 gridDim, blockDim;

namespace emu {

constexpr int kMaxThreads = 1024;
constexpr size_t kStack = 256 * 1024; /* the kernels touch 8 KB (mincore) */

/* A barrier of a block's threads or of a warp's lanes: `arrived` of them
 * wait at generation `gen`; it opens by advancing `gen`. */
struct barrier {
  int arrived = 0;
  unsigned gen = 0;
};

/* A switch's frame and stack pointers and resume address, as GCC's
 * __builtin_setjmp saves them (no signal mask, no system call). */
using jump_buf = void *[5];

/* Resumes what __builtin_setjmp saved in `b`. Not _longjmp: ASan's
 * interceptor of it, like the __asan_handle_no_return that GCC puts
 * before a call it knows does not return (noipa and no_sanitize_address
 * keep it from here and the callers), unpoisons the stack from the
 * leaving fiber's stack pointer to its top: the redzones of the frames it
 * leaves at a barrier, so that a kernel's local array overrun after its
 * first __syncthreads would go unseen. Out of line also because GCC wants
 * __builtin_longjmp out of the function that called __builtin_setjmp. */
__attribute__((noipa, no_sanitize_address)) inline void jump(jump_buf b) {
  __builtin_longjmp(b, 1);
}

struct fiber {
  jump_buf jb;
  ucontext_t uc;
  char *stack = nullptr;
  bool started = false, done = false;
  barrier *waits = nullptr; /* null: may run */
  unsigned gen = 0;         /* waits's generation it waits out */
  void *fake = nullptr;     /* ASan's fake stack while switched out */
};

struct runtime {
  std::vector<fiber> f;
  int n = 0, cur = -1, live = 0;
  barrier block;
  std::vector<barrier> warp;
  jump_buf sched;
  void (*call)(void *) = nullptr;
  void *ctx = nullptr;
  std::mt19937 order_rng{12345};
  /* The scheduler's stack, as ASan knows it, and its fake stack. */
  const void *sched_bottom = nullptr;
  size_t sched_size = 0;
  void *sched_fake = nullptr;
};
inline runtime rt;

/* AddressSanitizer keeps the bounds of one stack a thread. Told of each
 * switch between the scheduler's stack and a fiber's (and of their fake
 * stacks, under detect_stack_use_after_return), it knows a fiber's frames
 * as stack; untold, it takes a stack pointer on a fiber's stack for a
 * frame as large as the gap to the thread's own, warns, and may report
 * false positives after. Nothing without ASan. */
inline void switch_begin(void **fake, const void *bottom, size_t size) {
#ifdef EMU_ASAN
  __sanitizer_start_switch_fiber(fake, bottom, size);
#else
  (void)fake, (void)bottom, (void)size;
#endif
}
inline void switch_end(void *fake, const void **bottom, size_t *size) {
#ifdef EMU_ASAN
  __sanitizer_finish_switch_fiber(fake, bottom, size);
#else
  (void)fake, (void)bottom, (void)size;
#endif
}

/* Back to the scheduler; returns when this fiber is resumed. */
inline void yield() {
  fiber &me = rt.f[rt.cur];
  if (!__builtin_setjmp(me.jb)) {
    switch_begin(&me.fake, rt.sched_bottom, rt.sched_size);
    jump(rt.sched);
  }
  switch_end(me.fake, nullptr, nullptr);
}

inline void release(barrier &b) {
  b.arrived = 0;
  b.gen++;
}

/* Waits at `b` until `expected` threads have arrived; the last one to
 * arrive opens it and goes on without yielding. */
inline void arrive(barrier &b, int expected) {
  if (++b.arrived == expected) {
    release(b);
    return;
  }
  fiber &me = rt.f[rt.cur];
  me.waits = &b, me.gen = b.gen;
  yield();
}

/* __syncthreads: every thread of the block still in the kernel. */
inline void block_sync() {
  arrive(rt.block, rt.live);
}

/* A warp collective's meeting point: the 32 lanes of threadIdx.x's warp. */
inline void warp_sync() {
  arrive(rt.warp[threadIdx.x / 32], 32);
}

/* A fiber's whole life: the kernel once a block, then wait for the next. */
inline void body() {
  for (;;) {
    rt.call(rt.ctx);
    fiber &me = rt.f[rt.cur];
    me.done = true;
    rt.live--;
    if (rt.block.arrived > 0 && rt.block.arrived == rt.live)
      release(rt.block); /* those waiting waited only for this thread */
    yield();
  }
}

inline void resume(int t) {
  fiber &x = rt.f[t];
  rt.cur = t;
  threadIdx = uint3{(unsigned)t, 0, 0};
  if (__builtin_setjmp(rt.sched)) {
    switch_end(rt.sched_fake, nullptr, nullptr);
    return;
  }
  switch_begin(&rt.sched_fake, x.stack, kStack);
  if (!x.started) {
    x.started = true;
    setcontext(&x.uc);
  }
  jump(x.jb);
}

[[noreturn]] inline void deadlock() {
  fflush(stdout); /* the problems run so far */
  fprintf(stderr,
          "emu: deadlock in block (%u,%u,%u): a barrier that cannot open\n",
          blockIdx.x, blockIdx.y, blockIdx.z);
  int shown = 0;
  for (int t = 0; t < rt.n && shown < 16; t++)
    if (!rt.f[t].done) {
      const fiber &x = rt.f[t];
      if (x.waits == &rt.block)
        fprintf(stderr, "  thread %d waits at __syncthreads\n", t);
      else
        fprintf(stderr, "  thread %d waits at warp %d's collective\n", t,
                (int)(x.waits - rt.warp.data()));
      shown++;
    }
  fprintf(stderr, "  (%d of %d threads returned)\n", rt.n - rt.live, rt.n);
  abort();
}

/* A phase's order: the warps in a random order, each warp's lanes in a
 * random order. */
inline void draw_order(std::vector<int> &order) {
  std::vector<int> w(rt.n / 32);
  for (size_t i = 0; i < w.size(); i++)
    w[i] = (int)i;
  std::shuffle(w.begin(), w.end(), rt.order_rng);
  order.clear();
  for (int x : w) {
    for (int l = 0; l < 32; l++)
      order.push_back(32 * x + l);
    std::shuffle(order.end() - 32, order.end(), rt.order_rng);
  }
}

/* Runs one block to its end. Each time, the first thread in the phase's
 * order that may run runs, so a warp goes as far as it can (to a
 * __syncthreads, or its end) before the next one starts: a warp that
 * should have waited for another reads or overwrites what the other has
 * not yet written or read. A new order at every __syncthreads. */
inline void run_block() {
  std::vector<int> order;
  unsigned phase = rt.block.gen - 1;
  while (rt.live > 0) {
    if (phase != rt.block.gen) {
      phase = rt.block.gen;
      draw_order(order);
    }
    int pick = -1;
    for (int t : order) {
      const fiber &x = rt.f[t];
      if (!x.done && !(x.waits && x.waits->gen == x.gen)) {
        pick = t;
        break;
      }
    }
    if (pick < 0)
      deadlock();
    rt.f[pick].waits = nullptr;
    resume(pick);
  }
}

/* A fiber's start: learns the scheduler's stack from the switch (a fiber
 * starts with no fake stack of its own). */
inline void entry() {
  switch_end(nullptr, &rt.sched_bottom, &rt.sched_size);
  body();
}

/* Runs kernel() as each of `threads` threads of every block of `grid`,
 * the blocks in order (x fastest), before_block() ahead of each block's
 * threads. Borrows both; the calling thread only. */
template <class K, class B>
void launch(dim3 grid, int threads, K &&kernel, B &&before_block) {
  if (threads < 1 || threads > kMaxThreads || threads % 32 || rt.cur >= 0) {
    fprintf(stderr, "emu: launch of %d threads not supported here\n", threads);
    abort();
  }
  gridDim = grid;
  blockDim = dim3((unsigned)threads, 1, 1);
  const long page = sysconf(_SC_PAGESIZE);
  rt.f.reserve(kMaxThreads);           /* a ucontext_t may not move once made */
  while ((int)rt.f.size() < threads) { /* stacks for good, a guard page */
    fiber x;
    void *m =
        mmap(nullptr, kStack + page, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (m == MAP_FAILED || mprotect(m, page, PROT_NONE) != 0) {
      perror("emu: a fiber's stack");
      abort();
    }
    x.stack = (char *)m + page;
    rt.f.push_back(x);
  }
  rt.n = threads;
  rt.warp.assign(threads / 32, barrier{});
  rt.block = barrier{};
  using fn = std::remove_reference_t<K>;
  rt.call = [](void *c) { (*static_cast<fn *>(c))(); };
  rt.ctx = &kernel;
  for (int t = 0; t < threads; t++) {
    fiber &x = rt.f[t];
    x.started = false;
    if (getcontext(&x.uc) != 0) {
      perror("emu: getcontext");
      abort();
    }
    x.uc.uc_stack.ss_sp = x.stack;
    x.uc.uc_stack.ss_size = kStack;
    x.uc.uc_link = nullptr; /* entry never returns */
    makecontext(&x.uc, entry, 0);
  }
  for (unsigned z = 0; z < grid.z; z++)
    for (unsigned y = 0; y < grid.y; y++)
      for (unsigned x = 0; x < grid.x; x++) {
        blockIdx = uint3{x, y, z};
        before_block();
        for (int t = 0; t < threads; t++) {
          rt.f[t].done = false;
          rt.f[t].waits = nullptr;
        }
        rt.live = threads;
        run_block();
      }
  rt.cur = -1;
}

template <class K> void launch(dim3 grid, int threads, K &&kernel) {
  launch(grid, threads, std::forward<K>(kernel), [] {});
}

/* A launch's dynamic shared memory, `bytes` of the `cap` an emulator's
 * array at `base` holds: while this lives, the array's bytes past the
 * launch's are poisoned under ASan, so that a kernel reading or writing
 * past what its launch asked for (on a GPU, another block's or none) is
 * reported at its line as a use-after-poison rather than passing. ASan
 * keeps, for each 8 bytes, how many of the first of them are addressable,
 * so a poisoned tail may begin anywhere among them: from an 8-aligned
 * base the bound is exact to the byte whatever `bytes` is, and an overrun
 * by a single byte is seen. A launch of more than the array
 * aborts, with ASan or without. Not nested: one launch at a time. */
class dynamic_shared {
public:
  dynamic_shared(void *base, size_t cap, size_t bytes)
      : base_((char *)base), cap_(cap) {
    if (bytes > cap || (uintptr_t)base % 8) {
      fprintf(stderr, "emu: %zu bytes of dynamic shared memory, of %zu at %p\n",
              bytes, cap, base);
      abort();
    }
#ifdef EMU_ASAN
    __asan_poison_memory_region(base_ + bytes, cap - bytes);
#endif
  }
  ~dynamic_shared() {
#ifdef EMU_ASAN
    __asan_unpoison_memory_region(base_, cap_);
#endif
  }
  dynamic_shared(const dynamic_shared &) = delete;
  dynamic_shared &operator=(const dynamic_shared &) = delete;

private:
  char *base_;
  size_t cap_;
};

} // namespace emu

/* The device functions that the kernels (namespace attn_cu) call and g++
 * lacks: the atomics, atomic as they stand since no thread runs beside
 * another, and the bit casts. */
namespace attn_cu {
inline double atomicAdd(double *p, double v) {
  double old = *p;
  *p = old + v;
  return old;
}
inline unsigned atomicMax(unsigned *p, unsigned v) {
  unsigned old = *p;
  *p = old > v ? old : v;
  return old;
}
inline unsigned __float_as_uint(float x) {
  unsigned u;
  memcpy(&u, &x, 4);
  return u;
}
inline float __uint_as_float(unsigned u) {
  float x;
  memcpy(&x, &u, 4);
  return x;
}
} // namespace attn_cu

#endif
