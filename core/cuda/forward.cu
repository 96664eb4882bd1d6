/* core/cuda/forward.cu: attn_forward on the GPU, and the device probe.
 *
 * One call, for a plan that attn_plan_init accepted with backend CUDA
 * (plan.c has refused every option this backend lacks):
 *   stage 0: one device allocation from CUDA's stream-ordered pool; the
 *     inputs, weights, biases (unless they are device memory already:
 *     weights_on_device), key lengths, allow mask, score bias and ALiBi
 *     slopes copied in;
 *   stage 1: Q, K, V = x·Wᵀ on cuBLAS (fp32: cublasSgemm, pure fp32
 *     arithmetic; bf16: cublasGemmEx with bfloat16 inputs, converted once
 *     per distinct input, and float32 accumulation), then the biases,
 *     the q/k norms and the rope per head of Q and K (in float64, as the
 *     CPU), the finite checks and with bf16 the bfloat16 Q, K, V: one
 *     pass a tensor (kernels.h: finish) where no per-head work comes
 *     between;
 *   stage 2: attention (kernels.h: flash), the heads' outputs checked
 *     (and rounded to bfloat16 for the output projection), then the
 *     weights, mean weights, head outputs and reductions of the weights
 *     (kernels.h: reduce) asked for;
 *   stage 3: out = concat·Woᵀ on cuBLAS, its bias and finite check in
 *     one pass (finish), the results copied back.
 * Everything runs on the calling thread's default stream
 * (cudaStreamPerThread) of device 0, with one cuBLAS handle and four
 * events per thread, made on its first call and kept. cuBLAS is loaded
 * (dlopen) by the probe once it has found a device, not linked: loading
 * it maps about 150 MB, which a CUDA build running on the CPU alone
 * should not pay. The host enqueues the whole call and waits once, at its
 * end: an event on the stream marks each stage's end, and attn_timing_t's
 * stages are the GPU's times between them; attn_exec_t's cancel flag is
 * read as each stage is enqueued (so a call whose work is all enqueued
 * runs to its end). Where the CPU core falls back to float64, this backend
 * has no such path: a result that is not finite (Q, K, V, the heads'
 * outputs, out) is ATTN_ENUMERIC naming the stage. A CUDA or cuBLAS
 * failure, out of device memory included, is ATTN_EDEVICE naming the
 * call. */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

extern "C" {
#include "attn/attn.h"
}
#include "kernels.h"

/* core/error.c and the seam in core/forward.c (core/internal.h). */
extern "C" int attn__err(attn_error_t *err, int code, attn_field_t field,
                         const char *fmt, ...);
extern "C" int attn__cuda_forward(const attn_plan_t *plan, attn_outputs_t *o,
                                  void *workspace, attn_error_t *err);
extern "C" int attn__cuda_flash_version, attn__cuda_flash_last;
extern "C" void attn__broadcast_strides(const attn_tensor_t *t, int64_t st[4]);
extern "C" void attn__rope_frequencies(const attn_rope_t *rp, int64_t dims,
                                       double *freq);

/* ---- cuBLAS, loaded by the probe ------------------------------------------ */

/* The cuBLAS functions this file calls, from the library of the major
 * version it was compiled against. */
static struct {
  decltype(&cublasCreate_v2) create;
  decltype(&cublasSetStream_v2) set_stream;
  decltype(&cublasSgemm_v2) sgemm;
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t,
                            cublasOperation_t, int, int, int, const void *,
                            const void *, cudaDataType, int, const void *,
                            cudaDataType, int, const void *, void *,
                            cudaDataType, int, cublasComputeType_t,
                            cublasGemmAlgo_t); /* overloaded in C++ */
  decltype(&cublasGetStatusString) status_string;
} blas;

#define ATTN_STR2(x) #x
#define ATTN_STR(x) ATTN_STR2(x)
#define CUBLAS_SONAME "libcublas.so." ATTN_STR(CUBLAS_VER_MAJOR)

/* Loads cuBLAS: by its soname (the run path, LD_LIBRARY_PATH), else from
 * the CUDA_HOME it was built with. Returns 0, or -1 with why in `why`. */
static int load_cublas(char *why, size_t n) {
  void *h = dlopen(CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
#ifdef ATTN_CUDA_LIBDIR
  if (h == NULL)
    h = dlopen(ATTN_CUDA_LIBDIR "/" CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
#endif
  if (h == NULL) {
    snprintf(why, n, "cannot load cuBLAS: %.100s", dlerror());
    return -1;
  }
  blas.create = (decltype(blas.create))dlsym(h, "cublasCreate_v2");
  blas.set_stream = (decltype(blas.set_stream))dlsym(h, "cublasSetStream_v2");
  blas.sgemm = (decltype(blas.sgemm))dlsym(h, "cublasSgemm_v2");
  blas.gemm_ex = (decltype(blas.gemm_ex))dlsym(h, "cublasGemmEx");
  blas.status_string =
      (decltype(blas.status_string))dlsym(h, "cublasGetStatusString");
  if (!blas.create || !blas.set_stream || !blas.sgemm || !blas.gemm_ex ||
      !blas.status_string) {
    snprintf(why, n, "%s lacks a function this build calls", CUBLAS_SONAME);
    return -1;
  }
  return 0;
}

/* ---- the probe ---------------------------------------------------------- */

static attn_cuda_info_t probed;
static pthread_once_t probe_once = PTHREAD_ONCE_INIT;

static void probe(void) {
  attn_cuda_info_t *ci = &probed;
  memset(ci, 0, sizeof *ci);
  ci->built = 1;
  cudaRuntimeGetVersion(&ci->runtime_version);
  if (cudaDriverGetVersion(&ci->driver_version) != cudaSuccess)
    ci->driver_version = 0;
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n < 1) {
    /* No driver at all (a container that was given no GPU: the driver's
     * libcuda.so.1 comes from the host with the device) reads as "driver
     * version is insufficient" from cudart: say what is missing. */
    snprintf(ci->status, sizeof ci->status, "no CUDA device here (%s%s)",
             ci->driver_version == 0 ? "no CUDA driver, libcuda.so.1: " : "",
             e != cudaSuccess ? cudaGetErrorString(e) : "none found");
    cudaGetLastError(); /* clear it */
    return;
  }
  ci->devices = n;
  cudaDeviceProp prop;
  if ((e = cudaGetDeviceProperties(&prop, 0)) != cudaSuccess) {
    snprintf(ci->status, sizeof ci->status, "cudaGetDeviceProperties: %s",
             cudaGetErrorString(e));
    return;
  }
  snprintf(ci->device, sizeof ci->device, "%.95s", prop.name);
  ci->cc_major = prop.major;
  ci->cc_minor = prop.minor;
  ci->memory_bytes = prop.totalGlobalMem;
  if (prop.major != 9 || prop.minor != 0) {
    snprintf(ci->status, sizeof ci->status,
             "device 0 (%.60s) is sm_%d%d; this build has code for "
             ATTN_CUDA_ARCH " (H100, H200) only",
             prop.name, prop.major, prop.minor);
    return;
  }
  /* Keep freed device memory in the pool rather than giving it back at
   * every synchronisation: each call allocates its buffers afresh. */
  if (load_cublas(ci->status, sizeof ci->status) < 0)
    return;
  cudaMemPool_t pool;
  if (cudaDeviceGetDefaultMemPool(&pool, 0) == cudaSuccess) {
    uint64_t keep = UINT64_MAX;
    cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
  }
  cudaGetLastError(); /* a failed setting is not the next call's error */
  ci->usable = 1;
  snprintf(ci->status, sizeof ci->status, "ok");
}

/* The first error that left the CUDA context unusable, once one has:
 * `lost` is set (release) after `lost_status` is written, once. */
static int lost;
static char lost_status[sizeof probed.status];

extern "C" void attn_cuda_info(attn_cuda_info_t *info) {
  pthread_once(&probe_once, probe);
  *info = probed;
  if (__atomic_load_n(&lost, __ATOMIC_ACQUIRE) == 2) {
    info->usable = 0;
    memcpy(info->status, lost_status, sizeof info->status);
  }
}

/* Whether e is one of CUDA's sticky errors: the context is unusable, every
 * later call fails, and only a new process has the device again (each
 * error whose description in driver_types.h says the process must be
 * "terminated and relaunched", and an uncorrectable ECC error). */
static bool sticky(cudaError_t e) {
  switch ((int)e) {
  case cudaErrorIllegalAddress:
  case cudaErrorLaunchTimeout:
  case cudaErrorAssert:
  case cudaErrorHardwareStackError:
  case cudaErrorIllegalInstruction:
  case cudaErrorMisalignedAddress:
  case cudaErrorInvalidAddressSpace:
  case cudaErrorInvalidPc:
  case cudaErrorLaunchFailure:
  case cudaErrorECCUncorrectable:
  /* by value: CUDA 11.8, which the CUDA image builds with, lacks the
   * names of some (CUDA 13's driver_types.h has them) */
  case 226: /* cudaErrorContained: Hopper's error containment */
  case 721: /* cudaErrorTensorMemoryLeak */
  case 810: /* cudaErrorMpsClientTerminated: the MPS server ended us */
  case 911: /* cudaErrorExternalDevice */
    return true;
  default:
    return false;
  }
}

#if CUDART_VERSION >= 13000 /* the values sticky() takes by value */
static_assert(cudaErrorContained == 226 && cudaErrorTensorMemoryLeak == 721 &&
                  cudaErrorMpsClientTerminated == 810 &&
                  cudaErrorExternalDevice == 911,
              "CUDA's sticky errors' values");
#endif

extern "C" int attn__cuda_sticky(int error) {
  return sticky((cudaError_t)error);
}

/* Records a sticky error for attn_cuda_info, the first one only. */
static void note_lost(cudaError_t e, const char *what) {
  int expected = 0;
  if (!sticky(e) || !__atomic_compare_exchange_n(&lost, &expected, 1, false,
                                                 __ATOMIC_ACQ_REL,
                                                 __ATOMIC_ACQUIRE))
    return;
  snprintf(lost_status, sizeof lost_status,
           "device failed: %.60s in %.30s; restart the process to use it "
           "again",
           cudaGetErrorString(e), what);
  __atomic_store_n(&lost, 2, __ATOMIC_RELEASE);
}

/* A kernel that fails as a faulty one would. */
__global__ void trap_kernel() { __trap(); }

/* For tests/check_cuda.c alone: makes the device fail through the path a
 * call's errors take. The process cannot use the device afterwards.
 * Returns the error the stream reported. */
extern "C" int attn__cuda_trap(void) {
  trap_kernel<<<1, 1, 0, cudaStreamPerThread>>>();
  cudaError_t e = cudaStreamSynchronize(cudaStreamPerThread);
  note_lost(e, "attn__cuda_trap");
  return (int)e;
}

/* Whether the backend can run here now. */
static bool usable() {
  attn_cuda_info_t ci;
  attn_cuda_info(&ci);
  return ci.usable;
}

extern "C" int attn_cuda_memory(attn_cuda_memory_t *m) {
  memset(m, 0, sizeof *m);
  cudaMemPool_t pool;
  uint64_t reserved = 0, used = 0, high = 0;
  size_t free_b = 0, total_b = 0;
  if (!usable() || cudaSetDevice(0) != cudaSuccess ||
      cudaDeviceGetDefaultMemPool(&pool, 0) != cudaSuccess ||
      cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent,
                              &reserved) != cudaSuccess ||
      cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used) !=
          cudaSuccess ||
      cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &high) !=
          cudaSuccess ||
      cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
    cudaGetLastError(); /* not the next call's error */
    return -1;
  }
  m->pool_reserved = reserved;
  m->pool_used = used;
  m->pool_high = high;
  m->free = free_b;
  m->total = total_b;
  return 0;
}

/* Whether the CUDA steps of one of the calls below, e, succeeded; if not,
 * the error is noted (a sticky one makes the backend unusable) and
 * cleared, so that it is not the next call's (out of memory included). */
static bool succeeded(cudaError_t e, const char *what) {
  if (e == cudaSuccess)
    return true;
  note_lost(e, what);
  cudaGetLastError();
  return false;
}

/* The kv cache's pages (attn.h): from CUDA's stream-ordered pool, as the
 * calls' memory, so that no free waits for the whole device (cudaFree
 * would); the allocating stream is synchronised, after which any stream
 * may use the memory. */
extern "C" void *attn_cuda_alloc(size_t bytes) {
  void *p = nullptr;
  if (!usable() || bytes == 0)
    return nullptr;
  cudaError_t e = cudaSetDevice(0);
  if (e == cudaSuccess)
    e = cudaMallocAsync(&p, bytes, cudaStreamPerThread);
  if (e == cudaSuccess)
    e = cudaStreamSynchronize(cudaStreamPerThread);
  return succeeded(e, "attn_cuda_alloc") ? p : nullptr;
}

extern "C" void attn_cuda_free(void *p) {
  if (p == nullptr || cudaSetDevice(0) != cudaSuccess)
    return;
  succeeded(cudaFreeAsync(p, cudaStreamPerThread), "attn_cuda_free");
}

/* Pinned host memory (attn.h): portable, so that any context may copy
 * from it. */
extern "C" void *attn_cuda_host_alloc(size_t bytes) {
  void *p = nullptr;
  if (!usable() || bytes == 0)
    return nullptr;
  cudaError_t e = cudaSetDevice(0);
  if (e == cudaSuccess)
    e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
  return succeeded(e, "attn_cuda_host_alloc") ? p : nullptr;
}

extern "C" void attn_cuda_host_free(void *p) {
  if (p != nullptr)
    succeeded(cudaFreeHost(p), "attn_cuda_host_free");
}

extern "C" int attn_cuda_copy(void *dst, const void *src, size_t bytes) {
  if (!usable())
    return -1;
  cudaError_t e = cudaSetDevice(0);
  if (e == cudaSuccess)
    e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault,
                        cudaStreamPerThread);
  if (e == cudaSuccess)
    e = cudaStreamSynchronize(cudaStreamPerThread);
  return succeeded(e, "attn_cuda_copy") ? 0 : -1;
}

/* ---- one call ----------------------------------------------------------- */

namespace {

double now_ms() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Suballocations of one device block, 256-byte aligned. Laid out twice:
 * first with base null to count, then over the allocation. */
struct arena {
  char *base = nullptr;
  size_t used = 0;
  void *take(size_t bytes) {
    void *p = base ? base + used : nullptr;
    used += (bytes + 255) / 256 * 256;
    return p;
  }
  float *floats(int64_t n) { return (float *)take((size_t)n * 4); }
};

/* The checks of a call's results, in the order attn.h's ATTN_ENUMERIC
 * reports them: Q, K, V; a bias of +inf or NaN (scores); the heads'
 * outputs; out. */
enum { F_Q, F_K, F_V, F_BIAS, F_CONCAT, F_OUT, N_FLAGS };

/* What the call's stages read and write on the device. */
struct bufs {
  float *query, *key, *value;        /* the inputs (key, value may alias) */
  float *qw, *kw, *vw, *ow;          /* projection weights, or null */
  float *qb, *kb, *vb, *ob;          /* biases, or null */
  void *query16, *key16, *value16;   /* bf16: the inputs, for the GEMMs */
  void *qw16, *kw16, *vw16, *ow16;   /* bf16: the weights */
  void *q16, *k16, *v16, *concat16;  /* bf16: Q, K, V, and the concat */
  float *q, *k, *v, *concat, *out;   /* float32 Q, K, V, concat, out */
  float *lse, *weights, *mean, *heads;
  float *part; /* version 4's partials, with several key splits */
  int32_t *top_k_index; /* the reductions asked for (attn_reduce_t) */
  float *top_k_value, *pooled, *entropy, *sink, *distance;
  double *pool_acc; /* the pooled blocks' accumulators */
  int64_t *key_lengths;
  float *slopes;
  uint8_t *allow;    /* the allow mask, as given */
  float *score_bias; /* the bias, as given */
  float *q_norm, *k_norm;         /* [Dh] each, or null */
  double *freq;                   /* the rope's [rope_dims / 2], or null */
  int64_t *pos_q, *pos_k;         /* the positions, as given, or null */
  int *flags; /* [N_FLAGS]: what was found not finite, in stage order */
  /* with a kv cache: the new tokens' K and V, [B·Lq, Hkv·D]; the page
   * tables, [B, maxp]; each item's past; the new keys' largest |k|, as
   * float bits, [B]. k and v are then read out of the pages. */
  float *knew, *vnew;
  float **pages;
  int64_t *past;
  unsigned *kabs;
};

/* Pages per item in a call's flattened page table (kernels.h, kv_args). */
int64_t max_pages(const attn_plan_t *pl) {
  return (pl->Lk + ATTN_KV_PAGE - 1) / ATTN_KV_PAGE;
}

const float *tensor_data(const attn_tensor_t *t) {
  return t->rank ? static_cast<const float *>(t->data) : nullptr;
}

int64_t elems(const attn_tensor_t *t) {
  int64_t n = 1;
  for (int i = 0; i < t->rank; i++)
    n *= t->dim[i];
  return t->rank ? n : 0;
}

/* Lays out every buffer of the call on `ar`. */
void lay_out(const attn_plan_t *pl, arena *ar, bufs *d) {
  const attn_params_t *p = pl->params;
  const bool bf = pl->precision == ATTN_PRECISION_BF16;
  const int64_t B = pl->B, Lq = pl->Lq, Lk = pl->Lk, H = pl->H;
  const int64_t Hkv = pl->Hkv, Dh = pl->Dh, Dv = pl->Dv;
  const bool kv = p->kv != nullptr;
  const int64_t lnk = kv ? Lq : Lk; /* rows of the key and value inputs */
  memset(d, 0, sizeof *d);
  d->query = ar->floats(elems(&p->query));
  d->key = p->key.rank ? ar->floats(elems(&p->key)) : d->query;
  d->value = p->value.rank ? ar->floats(elems(&p->value)) : d->key;
  const attn_tensor_t *w[4] = {&p->q_weight, &p->k_weight, &p->v_weight,
                               &p->o_weight};
  const attn_tensor_t *bs[4] = {&p->q_bias, &p->k_bias, &p->v_bias,
                                &p->o_bias};
  float **wd[4] = {&d->qw, &d->kw, &d->vw, &d->ow};
  float **bd[4] = {&d->qb, &d->kb, &d->vb, &d->ob};
  void **w16[4] = {&d->qw16, &d->kw16, &d->vw16, &d->ow16};
  const bool resident = p->weights_on_device; /* read in place */
  for (int x = 0; x < 4; x++) {
    if (w[x]->rank && bf && p->weights_bf16[x]) { /* rounded already */
      *w16[x] = const_cast<void *>(p->weights_bf16[x]);
    } else if (w[x]->rank) {
      *wd[x] = resident ? (float *)tensor_data(w[x]) : ar->floats(elems(w[x]));
      if (bf)
        *w16[x] = ar->take((size_t)elems(w[x]) * 2);
    }
    if (bs[x]->rank)
      *bd[x] = resident ? (float *)tensor_data(bs[x]) : ar->floats(elems(bs[x]));
  }
  /* What is laid out depends on the plan alone, never on the pointers,
   * which are all null in the counting pass. */
  if (bf) { /* the GEMMs' bf16 inputs, only where a weight is given; one
               per distinct input (key absent is query, value absent key) */
    const bool qw = p->q_weight.rank, kw = p->k_weight.rank,
               vw = p->v_weight.rank;
    if (qw)
      d->query16 = ar->take((size_t)elems(&p->query) * 2);
    if (kw)
      d->key16 = !p->key.rank && qw
                     ? d->query16
                     : ar->take((size_t)B * lnk * pl->Ek * 2);
    if (vw)
      d->value16 = !p->value.rank && kw
                       ? d->key16
                       : ar->take((size_t)B * lnk * pl->Ev * 2);
    d->q16 = ar->take((size_t)B * Lq * H * Dh * 2);
    d->k16 = ar->take((size_t)B * Lk * Hkv * Dh * 2);
    d->v16 = ar->take((size_t)B * Lk * Hkv * Dv * 2);
    if (p->o_weight.rank)
      d->concat16 = ar->take((size_t)B * Lq * H * Dv * 2);
  }
  d->q = ar->floats(B * Lq * H * Dh);
  d->k = ar->floats(B * Lk * Hkv * Dh);
  d->v = ar->floats(B * Lk * Hkv * Dv);
  d->concat = ar->floats(B * Lq * H * Dv);
  d->out = ar->floats(pl->out_elems);
  d->lse = ar->floats(B * H * Lq);
  /* version 4's partial rows where it would split the keys: reserved
   * whichever version runs, as the layout depends on the plan alone */
  const int64_t splits = attn_cu::split_count(B, Lq, Lk, H, Hkv);
  if (splits > 1)
    d->part = ar->floats(splits * B * H * Lq * (Dv + 2));
  if (p->want_weights || p->want_mean_weights)
    d->weights = ar->floats(pl->weights_elems);
  if (p->want_mean_weights)
    d->mean = ar->floats(pl->mean_elems);
  if (p->want_head_outputs)
    d->heads = ar->floats(pl->head_elems);
  if (pl->top_k_elems) {
    d->top_k_index = (int32_t *)ar->take((size_t)pl->top_k_elems * 4);
    d->top_k_value = ar->floats(pl->top_k_elems);
  }
  if (pl->pooled_elems) {
    d->pooled = ar->floats(pl->pooled_elems);
    d->pool_acc = (double *)ar->take((size_t)pl->pooled_elems * 8);
  }
  const unsigned st = pl->reduce ? p->reduce.stats : 0;
  if (st & ATTN_STAT_ENTROPY)
    d->entropy = ar->floats(pl->stats_elems);
  if (st & ATTN_STAT_SINK)
    d->sink = ar->floats(pl->stats_elems);
  if (st & ATTN_STAT_DISTANCE)
    d->distance = ar->floats(pl->stats_elems);
  if (p->key_lengths.rank || kv)
    d->key_lengths = (int64_t *)ar->take((size_t)B * 8);
  if (kv) {
    d->knew = ar->floats(B * Lq * Hkv * Dh);
    d->vnew = ar->floats(B * Lq * Hkv * Dv);
    d->pages = (float **)ar->take((size_t)(B * max_pages(pl)) * 8);
    d->past = (int64_t *)ar->take((size_t)B * 8);
    d->kabs = (unsigned *)ar->take((size_t)B * 4);
  }
  if (p->alibi != ATTN_ALIBI_NONE)
    d->slopes = ar->floats(H);
  if (p->allow.rank)
    d->allow = (uint8_t *)ar->take((size_t)elems(&p->allow));
  if (p->bias.rank)
    d->score_bias = ar->floats(elems(&p->bias));
  if (p->q_norm.rank)
    d->q_norm = ar->floats(Dh);
  if (p->k_norm.rank)
    d->k_norm = ar->floats(Dh);
  if (pl->rope_dims) {
    d->freq = (double *)ar->take((size_t)pl->rope_dims / 2 * 8);
    if (p->positions_query.rank)
      d->pos_q = (int64_t *)ar->take((size_t)elems(&p->positions_query) * 8);
    if (p->positions_key.rank)
      d->pos_k = (int64_t *)ar->take((size_t)elems(&p->positions_key) * 8);
  }
  d->flags = (int *)ar->take(N_FLAGS * sizeof(int));
}

thread_local cublasHandle_t handle = nullptr;

/* The state of one call, and its first error. */
struct call {
  const attn_plan_t *pl;
  attn_error_t *err;
  cudaStream_t s = cudaStreamPerThread;
  int rc = 0;

  /* Records a failure of `what` (the first one wins); returns false. */
  bool fail_cuda(cudaError_t e, const char *what) {
    if (rc == 0)
      rc = attn__err(err, ATTN_EDEVICE, ATTN_FIELD_BACKEND,
                     "cuda backend: %s failed: %s", what,
                     cudaGetErrorString(e));
    return false;
  }
  /* A failed runtime call also leaves its error as the thread's last
   * error, which every launcher returns (cudaGetLastError): cleared here,
   * as succeeded() does, or this thread's next call would fail at its
   * first launch with this call's error (an out-of-memory cudaMallocAsync;
   * cudaEventElapsedTime on a mark that a failed or cancelled first call
   * never recorded). A sticky error stays whatever is cleared. */
  bool ok(cudaError_t e, const char *what) {
    if (e != cudaSuccess) { /* even after a first failure */
      note_lost(e, what);
      cudaGetLastError();
    }
    return rc == 0 && (e == cudaSuccess || fail_cuda(e, what));
  }
  bool ok(cublasStatus_t st, const char *what) {
    if (st != CUBLAS_STATUS_SUCCESS) /* a launch of cuBLAS's that failed */
      note_lost(cudaGetLastError(), what);
    if (rc != 0)
      return false;
    if (st == CUBLAS_STATUS_SUCCESS)
      return true;
    rc = attn__err(err, ATTN_EDEVICE, ATTN_FIELD_BACKEND,
                   "cuda backend: %s failed: %s", what,
                   blas.status_string(st));
    return false;
  }
  bool up(void *dst, const void *src, int64_t bytes, const char *what) {
    return bytes == 0 || dst == src ||
           ok(cudaMemcpyAsync(dst, src, (size_t)bytes,
                              cudaMemcpyHostToDevice, s),
              what);
  }
  bool down(void *dst, const void *src, int64_t bytes, const char *what) {
    return ok(cudaMemcpyAsync(dst, src, (size_t)bytes, cudaMemcpyDeviceToHost,
                              s),
              what);
  }
  /* A stage boundary: records event `ev` on the stream (the stages' times
   * are the events' differences, read once the call is done), then reads
   * the cancel flag; the host does not wait here. */
  bool stage_mark(cudaEvent_t ev) {
    if (!ok(cudaEventRecord(ev, s), "cudaEventRecord"))
      return false;
    if (pl->cancel && __atomic_load_n(pl->cancel, __ATOMIC_RELAXED)) {
      rc = attn__err(err, ATTN_ECANCELED, ATTN_FIELD_CANCEL, "canceled");
      return false;
    }
    return true;
  }

  /* C[M, N] = A[M, K]·W[N, K]ᵀ, row-major: in cuBLAS's column-major
   * terms Cᵀ = W·Aᵀ, W read transposed. fp32: A and W float; bf16: A16
   * and W16 bfloat16, accumulated and written in float32. */
  bool gemm(int64_t M, int64_t N, int64_t K, const float *A, const void *A16,
            const float *W, const void *W16, float *C) {
    const float one = 1.f, zero = 0.f;
    if (pl->precision == ATTN_PRECISION_BF16)
      return ok(blas.gemm_ex(handle, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, (int)M,
                             (int)K, &one, W16, CUDA_R_16BF, (int)K, A16,
                             CUDA_R_16BF, (int)K, &zero, C, CUDA_R_32F,
                             (int)N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                "cublasGemmEx (bf16)");
    return ok(blas.sgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, (int)M,
                         (int)K, &one, W, (int)K, A, (int)K, &zero, C, (int)N),
              "cublasSgemm");
  }

  /* The per-head RMSNorm (w) and rope (freq) of Q or K, x [B·L, nh·Dh],
   * as kernels.h's transform_heads; nothing when neither is given. */
  bool heads(float *x, int64_t L, int64_t nh, const float *w,
             const double *freq, const int64_t *pos, int pos_rank,
             int64_t off, const int64_t *past) {
    if (!w && !freq)
      return true;
    const attn_params_t *p = pl->params;
    attn_cu::heads_args h = {};
    h.x = x, h.B = pl->B, h.L = L, h.nh = nh, h.Dh = pl->Dh;
    h.w = w;
    h.eps = p->has_norm_eps ? (double)p->norm_eps : 1e-6;
    h.freq = freq;
    h.half = pl->rope_dims / 2;
    h.split = p->rope.style == ATTN_ROPE_HALF;
    h.pos = pos, h.pos_rank = pos_rank, h.off = off, h.past = past;
    return ok(attn_cu::transform_heads(h, s), "transform_heads");
  }

  /* y[rows, out] = x[rows, in]·Wᵀ, the bias left to finish(); without a
   * weight, y = x (in == out). With bf16, x is rounded into x16 first (W16
   * is ready, and W may be absent: given rounded), unless x16_ready says
   * an earlier projection of the same x did. */
  bool project(int64_t rows, int64_t in, int64_t out, const float *x,
               void *x16, bool x16_ready, const float *W, const void *W16,
               float *y) {
    if (W || W16)
      return (pl->precision != ATTN_PRECISION_BF16 || x16_ready ||
              ok(attn_cu::to_bf16(x, x16, rows * in, s), "to_bf16")) &&
             gemm(rows, out, in, x, x16, W, W16, y);
    return ok(cudaMemcpyAsync(y, x, (size_t)(rows * out) * 4,
                              cudaMemcpyDeviceToDevice, s),
              "cudaMemcpyAsync");
  }

  /* attn_cu::finish on y [rows, cols]: its bias, its finite check into
   * flag, its bfloat16 copy y16, each where given; nothing to launch
   * where none is. */
  bool finish(float *y, const float *bias, int64_t rows, int64_t cols,
              int *flag, void *y16) {
    return (!bias && !flag && !y16) ||
           ok(attn_cu::finish(y, bias, rows, cols, flag, y16, s), "finish");
  }
};

/* The reductions' arguments (kernels.h), from the plan and the buffers
 * lay_out placed. */
attn_cu::reduce_args reduce_args_of(const attn_plan_t *pl, const bufs *d) {
  const attn_reduce_t *rd = &pl->params->reduce;
  attn_cu::reduce_args r = {};
  r.q0 = pl->q0, r.q1 = pl->q1, r.k0 = pl->k0, r.k1 = pl->k1, r.rH = pl->rH;
  r.mean_heads = rd->mean_heads;
  r.K = rd->top_k;
  r.top_k_index = d->top_k_index, r.top_k_value = d->top_k_value;
  r.pool_q = pl->pool_q, r.pool_k = pl->pool_k; /* clipped (attn_plan_t) */
  r.nq = pl->pool_nq, r.nk = pl->pool_nk;
  r.pool_reduce = (int)rd->pool_reduce;
  r.pool_acc = d->pool_acc, r.pooled = d->pooled;
  r.sink_tokens = rd->sink_tokens;
  r.entropy = d->entropy, r.sink = d->sink, r.distance = d->distance;
  return r;
}

/* The stage boundaries' events of the calling thread, made on its first
 * call and kept, as its cuBLAS handle. */
thread_local cudaEvent_t marks[4];

} // namespace

extern "C" size_t attn__cuda_device_bytes(const attn_plan_t *pl) {
  arena ar; /* base null: counts */
  bufs d;
  lay_out(pl, &ar, &d);
  return ar.used;
}

extern "C" int attn__cuda_forward(const attn_plan_t *pl, attn_outputs_t *o,
                                  void *workspace, attn_error_t *err) {
  const attn_params_t *p = pl->params;
  const bool bf = pl->precision == ATTN_PRECISION_BF16;
  const int64_t B = pl->B, Lq = pl->Lq, Lk = pl->Lk, H = pl->H;
  const int64_t Hkv = pl->Hkv, Dh = pl->Dh, Dv = pl->Dv;
  const bool kv = p->kv != nullptr;
  const int version = __atomic_load_n(&attn__cuda_flash_version,
                                      __ATOMIC_RELAXED);
  const int64_t lnk = kv ? Lq : Lk; /* rows of the key and value inputs */
  call c;
  c.pl = pl;
  c.err = err;
  const double t_start = now_ms();
  if (!c.ok(cudaSetDevice(0), "cudaSetDevice"))
    return c.rc;
  if (!handle && !c.ok(blas.create(&handle), "cublasCreate"))
    return c.rc;
  for (cudaEvent_t &ev : marks)
    if (!ev && !c.ok(cudaEventCreate(&ev), "cudaEventCreate"))
      return c.rc;
  if (!c.ok(blas.set_stream(handle, c.s), "cublasSetStream"))
    return c.rc;

  arena ar;
  bufs d;
  if (!c.ok(cudaMallocAsync((void **)&ar.base, pl->device_bytes, c.s),
            "cudaMallocAsync (device memory)"))
    return c.rc;
  lay_out(pl, &ar, &d); /* within device_bytes: the plan counted this */

  /* stage 0: inputs in */
  const attn_tensor_t *w[4] = {&p->q_weight, &p->k_weight, &p->v_weight,
                               &p->o_weight};
  const attn_tensor_t *bs[4] = {&p->q_bias, &p->k_bias, &p->v_bias,
                                &p->o_bias};
  float *wd[4] = {d.qw, d.kw, d.vw, d.ow};
  float *bd[4] = {d.qb, d.kb, d.vb, d.ob};
  void *w16[4] = {d.qw16, d.kw16, d.vw16, d.ow16};
  c.up(d.query, tensor_data(&p->query), elems(&p->query) * 4, "query in");
  if (p->key.rank)
    c.up(d.key, tensor_data(&p->key), elems(&p->key) * 4, "key in");
  if (p->value.rank)
    c.up(d.value, tensor_data(&p->value), elems(&p->value) * 4, "value in");
  for (int x = 0; x < 4; x++) {
    if (wd[x]) { /* (up copies nothing where dst is src: resident) */
      c.up(wd[x], tensor_data(w[x]), elems(w[x]) * 4, "weight in");
      if (bf)
        c.ok(attn_cu::to_bf16(wd[x], w16[x], elems(w[x]), c.s), "to_bf16");
    }
    if (bd[x])
      c.up(bd[x], tensor_data(bs[x]), elems(bs[x]) * 4, "bias in");
  }
  /* with a kv cache, in the host workspace after the frequencies (plan.c):
   * the page tables flattened, past, the key counts, the k bits back */
  unsigned *kabs = nullptr;
  if (kv) {
    const int64_t maxp = max_pages(pl);
    float **table =
        (float **)((char *)workspace + (H * 4 + 63) / 64 * 64 +
                   (pl->rope_dims / 2 * 8 + 8 + 63) / 64 * 64);
    int64_t *past = (int64_t *)(table + B * maxp), *klen = past + B;
    const int64_t *given = (const int64_t *)p->key_lengths.data;
    kabs = (unsigned *)(klen + B);
    for (int64_t b = 0; b < B; b++) {
      past[b] = p->kv->past[b];
      const int64_t n = (past[b] + Lq + ATTN_KV_PAGE - 1) / ATTN_KV_PAGE;
      for (int64_t i = 0; i < maxp; i++)
        table[b * maxp + i] = i < n ? p->kv->pages[b][i] : nullptr;
      klen[b] = past[b] + Lq; /* the item's keys end there */
      if (given && given[b] < klen[b])
        klen[b] = given[b];
    }
    c.up(d.pages, table, B * maxp * 8, "kv page tables in");
    c.up(d.past, past, B * 8, "kv past in");
    c.up(d.key_lengths, klen, B * 8, "key lengths in");
    c.ok(cudaMemsetAsync(d.kabs, 0, (size_t)B * 4, c.s), "cudaMemsetAsync");
  } else if (d.key_lengths) {
    c.up(d.key_lengths, p->key_lengths.data, B * 8, "key_lengths in");
  }
  if (d.allow)
    c.up(d.allow, p->allow.data, elems(&p->allow), "allow in");
  if (d.score_bias)
    c.up(d.score_bias, p->bias.data, elems(&p->bias) * 4, "bias in");
  if (d.q_norm)
    c.up(d.q_norm, p->q_norm.data, Dh * 4, "q_norm in");
  if (d.k_norm)
    c.up(d.k_norm, p->k_norm.data, Dh * 4, "k_norm in");
  if (d.freq) { /* after the slopes in the host workspace */
    double *host = (double *)((char *)workspace +
                              (H * 4 + 63) / 64 * 64);
    attn__rope_frequencies(&p->rope, pl->rope_dims, host);
    c.up(d.freq, host, pl->rope_dims / 2 * 8, "rope frequencies in");
  }
  if (d.pos_q)
    c.up(d.pos_q, p->positions_query.data, elems(&p->positions_query) * 8,
         "positions_query in");
  if (d.pos_k)
    c.up(d.pos_k, p->positions_key.data, elems(&p->positions_key) * 8,
         "positions_key in");
  if (d.slopes) {
    float *host = static_cast<float *>(workspace);
    if (p->alibi == ATTN_ALIBI_SLOPES)
      memcpy(host, p->alibi_slopes.data, (size_t)H * 4);
    else
      attn_alibi_default_slopes(H, host);
    c.up(d.slopes, host, H * 4, "alibi slopes in");
  }
  c.ok(cudaMemsetAsync(d.flags, 0, N_FLAGS * sizeof(int), c.s),
       "cudaMemsetAsync");
  if (d.score_bias) /* -inf is a mask; +inf and NaN are refused */
    c.ok(attn_cu::nonfinite(d.score_bias, elems(&p->bias), 1, d.flags + F_BIAS,
                            c.s),
         "check");

  /* stage 1: projections, then (Q, K) the norms and the rope per head,
   * each one's bias, finite check and bfloat16 copy in one pass where no
   * per-head work comes between; with a kv cache, the new K and V go into
   * their pages and every item's K and V are read out of them */
  const bool tq = d.q_norm || d.freq, tk = d.k_norm || d.freq;
  /* an input the bf16 GEMMs share (lay_out) is converted once */
  const bool k16_ready = bf && d.kw16 && d.key16 == d.query16,
             v16_ready = bf && d.vw16 && d.value16 == d.key16;
  float *kdst = kv ? d.knew : d.k, *vdst = kv ? d.vnew : d.v;
  /* version 4 reads K and V out of the pages in place, unless the weights
   * or their reductions (which read K) are asked for: then they are read
   * out first, as for the other versions */
  const bool paged = kv && version == 4 && !d.weights && !pl->reduce;
  attn_cu::kv_args ka = {};
  if (kv) {
    ka.pages = d.pages, ka.past = d.past;
    ka.B = B, ka.Lq = Lq, ka.Lk = Lk, ka.maxp = max_pages(pl);
    ka.Hkv = Hkv, ka.Dh = Dh, ka.Dv = Dv;
    ka.Dvp = (Dv + 15) / 16 * 16;
    ka.ldv = Hkv * ka.Dvp + 16;
    ka.voff = (int64_t)attn_kv_v_offset(Hkv, Dh);
  }
  if (c.rc == 0 && c.stage_mark(marks[0]) &&
      c.project(B * Lq, pl->Eq, H * Dh, d.query, d.query16, false, d.qw,
                d.qw16, d.q) &&
      c.project(B * lnk, pl->Ek, Hkv * Dh, d.key, d.key16, k16_ready, d.kw,
                d.kw16, kdst) &&
      c.project(B * lnk, pl->Ev, Hkv * Dv, d.value, d.value16, v16_ready,
                d.vw, d.vw16, vdst) &&
      (!tq || (c.finish(d.q, d.qb, B * Lq, H * Dh, nullptr, nullptr) &&
               c.heads(d.q, Lq, H, d.q_norm, d.freq, d.pos_q,
                       (int)p->positions_query.rank, Lk - Lq, d.past))) &&
      (!tk || (c.finish(kdst, d.kb, B * lnk, Hkv * Dh, nullptr, nullptr) &&
               c.heads(kdst, lnk, Hkv, d.k_norm, d.freq, d.pos_k,
                       (int)p->positions_key.rank, 0, d.past))) &&
      c.finish(d.q, tq ? nullptr : d.qb, B * Lq, H * Dh, d.flags + F_Q,
               bf ? d.q16 : nullptr) &&
      c.finish(kdst, tk ? nullptr : d.kb, B * lnk, Hkv * Dh, d.flags + F_K,
               bf && !kv ? d.k16 : nullptr) &&
      c.finish(vdst, d.vb, B * lnk, Hkv * Dv, d.flags + F_V,
               bf && !kv ? d.v16 : nullptr) &&
      kv &&
      c.ok(attn_cu::item_absmax(d.knew, B, Lq, Hkv * Dh, d.kabs, c.s),
           "item_absmax") &&
      c.ok(attn_cu::kv_write(ka, d.knew, d.vnew, c.s), "kv_write") &&
      !paged && c.ok(attn_cu::kv_read(ka, d.k, d.v, c.s), "kv_read") &&
      c.finish(d.k, nullptr, B * Lk, Hkv * Dh, nullptr, bf ? d.k16 : nullptr))
    c.finish(d.v, nullptr, B * Lk, Hkv * Dv, nullptr, bf ? d.v16 : nullptr);

  /* stage 2: attention, the heads' outputs checked (and with bf16 and an
   * output projection rounded for it), then the weights and their
   * reductions asked for */
  attn_cu::args a = {};
  a.q = bf ? d.q16 : (const void *)d.q;
  a.k = bf ? d.k16 : (const void *)d.k;
  a.v = bf ? d.v16 : (const void *)d.v;
  a.bf16 = bf;
  a.concat = d.concat;
  a.lse = d.lse;
  a.key_lengths = d.key_lengths;
  a.past = d.past;
  a.slopes = d.slopes;
  a.allow = d.allow;
  if (d.allow)
    attn__broadcast_strides(&p->allow, a.allow_st);
  a.bias = d.score_bias;
  if (d.score_bias)
    attn__broadcast_strides(&p->bias, a.bias_st);
  a.B = B, a.Lq = Lq, a.Lk = Lk, a.H = H, a.Hkv = Hkv, a.Dh = Dh, a.Dv = Dv;
  a.scale = pl->scale;
  a.causal = (int)p->causal;
  a.wl = pl->window_left, a.wr = pl->window_right;
  a.has_softcap = p->has_softcap;
  a.softcap = p->softcap;
  a.splits = attn_cu::split_count(B, Lq, Lk, H, Hkv);
  a.part = d.part;
  if (paged) {
    a.pages = d.pages;
    a.maxp = ka.maxp, a.Dvp = ka.Dvp, a.ldv = ka.ldv, a.voff = ka.voff;
  }
  int ran = 0;
  if (c.rc == 0 && c.stage_mark(marks[1]) &&
      c.ok(attn_cu::flash(a, version, &ran, c.s),
           "flash") &&
      c.finish(d.concat, nullptr, B * Lq, H * Dv, d.flags + F_CONCAT,
               bf && d.ow16 ? d.concat16 : nullptr)) {
    if (d.weights)
      c.ok(attn_cu::weights(a, d.weights, c.s), "weights");
    if (d.mean)
      c.ok(attn_cu::mean_weights(d.weights, B, H, Lq, Lk, d.mean, c.s),
           "mean_weights");
    if (d.heads)
      c.ok(attn_cu::head_outputs(d.concat, B, Lq, H, Dv, d.heads, c.s),
           "head_outputs");
    if (pl->reduce)
      c.ok(attn_cu::reduce(a, reduce_args_of(pl, &d), c.s), "reduce");
  }

  /* stage 3: the output projection, then the results out */
  if (c.rc == 0 && c.stage_mark(marks[2]) &&
      c.project(B * Lq, H * Dv, pl->Eo, d.concat, d.concat16, true, d.ow,
                d.ow16, d.out))
    c.finish(d.out, d.ob, B * Lq, pl->Eo, d.flags + F_OUT, nullptr);
  __atomic_store_n(&attn__cuda_flash_last, ran, __ATOMIC_RELAXED);
  int flags[N_FLAGS] = {0};
  if (c.rc == 0 && c.stage_mark(marks[3])) {
    c.down(o->out, d.out, pl->out_elems * 4, "out back");
    if (p->want_weights)
      c.down(o->weights, d.weights, pl->weights_elems * 4, "weights back");
    if (p->want_mean_weights)
      c.down(o->mean_weights, d.mean, pl->mean_elems * 4, "mean back");
    if (p->want_head_outputs)
      c.down(o->head_outputs, d.heads, pl->head_elems * 4, "heads back");
    const struct {
      void *host;
      const void *dev;
      int64_t bytes;
    } red[] = {
        {o->top_k_index, d.top_k_index, pl->top_k_elems * 4},
        {o->top_k_value, d.top_k_value, pl->top_k_elems * 4},
        {o->pooled, d.pooled, pl->pooled_elems * 4},
        {o->entropy, d.entropy, pl->stats_elems * 4},
        {o->sink, d.sink, pl->stats_elems * 4},
        {o->distance, d.distance, pl->stats_elems * 4},
    };
    for (const auto &x : red)
      if (x.dev)
        c.down(x.host, x.dev, x.bytes, "reductions back");
    if (kv)
      c.down(kabs, d.kabs, B * 4, "kv k_absmax back");
    c.down(flags, d.flags, sizeof flags, "flags back");
  }
  /* The memory goes back to the pool whatever happened. */
  cudaError_t fe = cudaFreeAsync(ar.base, c.s);
  cudaError_t se = cudaStreamSynchronize(c.s);
  c.ok(fe, "cudaFreeAsync");
  c.ok(se, "cudaStreamSynchronize");
  const double t_end = now_ms();
  float ms[3] = {0, 0, 0};
  for (int k = 0; k < 3; k++)
    c.ok(cudaEventElapsedTime(&ms[k], marks[k], marks[k + 1]),
         "cudaEventElapsedTime");
  if (c.rc != 0)
    return c.rc;
  o->timing.projection_ms = ms[0];
  o->timing.attention_ms = ms[1];
  o->timing.output_ms = ms[2];
  o->timing.total_ms = t_end - t_start; /* the copies in and out too */
  o->timing.projection_busy_ms = 0; /* threads' time: the cpu's only */
  o->timing.attention_busy_ms = 0;
  o->timing.output_busy_ms = 0;

  static const struct {
    attn_field_t field;
    const char *what;
  } stage[N_FLAGS] = {
      {ATTN_FIELD_QUERY, "projection: Q"},
      {ATTN_FIELD_KEY, "projection: K"},
      {ATTN_FIELD_VALUE, "projection: V"},
      {ATTN_FIELD_BIAS, "scores: a bias of +inf or NaN"},
      {ATTN_FIELD_VALUE, "output: a head's output (scores or P·V)"},
      {ATTN_FIELD_O_WEIGHT, "output projection: out"},
  };
  for (int x = 0; x < N_FLAGS; x++)
    if (flags[x]) {
      attn_field_t f = stage[x].field;
      if (x == F_OUT && !p->o_weight.rank)
        f = ATTN_FIELD_O_BIAS;
      return attn__err(err, ATTN_ENUMERIC, f,
                       "%s does not fit float32 on the cuda backend (which "
                       "has no float64 fallback; backend cpu may succeed)",
                       stage[x].what);
    }
  for (int64_t b = 0; kv && b < B; b++) { /* the cache covers the new keys */
    float k;
    memcpy(&k, &kabs[b], sizeof k);
    if (k > p->kv->k_absmax[b])
      p->kv->k_absmax[b] = k;
  }
  return 0;
}
