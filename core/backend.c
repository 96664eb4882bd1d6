/* core/backend.c: what this CPU runs, and the BLAS underneath. */
#include <cblas.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "internal.h"

attn_isa_t attn__cpu_isa(void) {
#if defined(ATTN__X86_KERNELS)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma"))
    return ATTN_ISA_AVX512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return ATTN_ISA_AVX2;
#endif
  return ATTN_ISA_GENERIC;
}

const char *attn_isa_name(attn_isa_t isa) {
  switch (isa) {
  case ATTN_ISA_AUTO:
    return "auto";
  case ATTN_ISA_GENERIC:
    return "generic";
  case ATTN_ISA_AVX2:
    return "avx2";
  case ATTN_ISA_AVX512:
    return "avx512";
  }
  return "unknown";
}

/* OpenBLAS core types whose sgemm kernels use AVX-512, and AVX2 + FMA. */
static const char *const avx512_cores[] = {"SkylakeX", "Cooperlake",
                                           "SapphireRapids", NULL};
static const char *const avx2_cores[] = {
    "Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids", NULL};

static int among(const char *name, const char *const *set) {
  for (; name && *set; set++)
    if (strcasecmp(name, *set) == 0)
      return 1;
  return 0;
}

const char *attn_blas_preferred_coretype(void) {
  const char *have = openblas_get_corename();
  switch (attn__cpu_isa()) {
  case ATTN_ISA_AVX512:
    return among(have, avx512_cores) ? NULL : "SkylakeX";
  case ATTN_ISA_AVX2:
    return among(have, avx2_cores) ? NULL : "Haswell";
  default:
    return NULL;
  }
}

int attn_blas_split_invariant(void) {
  return among(openblas_get_corename(), avx512_cores);
}

void attn_backend_info(attn_backend_t *b) {
  b->blas = "OpenBLAS";
  b->blas_kernel = openblas_get_corename();
  b->blas_config = openblas_get_config();
  b->isa = attn__cpu_isa();
}

const char *attn_backend_kind_name(attn_backend_kind_t backend) {
  switch (backend) {
  case ATTN_BACKEND_CPU:
    return "cpu";
  case ATTN_BACKEND_CUDA:
    return "cuda";
  }
  return "unknown";
}

const char *attn_precision_name(attn_precision_t precision) {
  switch (precision) {
  case ATTN_PRECISION_FP32:
    return "fp32";
  case ATTN_PRECISION_BF16:
    return "bf16";
  }
  return "unknown";
}

int attn__cuda_flash_version, attn__cuda_flash_last;

#ifndef ATTN_HAVE_CUDA
/* A library built without CUDA=1: the backend is absent, and plans never
 * reach attn__cuda_forward (plan.c refuses them). */
void attn_cuda_info(attn_cuda_info_t *info) {
  memset(info, 0, sizeof *info);
  snprintf(info->status, sizeof info->status,
           "this build has no CUDA backend (build with make CUDA=1)");
}

int attn__cuda_forward(const attn_plan_t *plan, attn_outputs_t *o,
                       void *workspace, attn_error_t *err) {
  (void)plan, (void)o, (void)workspace;
  return attn__err(err, ATTN_ENOTSUP, ATTN_FIELD_BACKEND,
                   "backend cuda: this build has no CUDA backend");
}

int attn_cuda_memory(attn_cuda_memory_t *m) {
  memset(m, 0, sizeof *m);
  return -1;
}

size_t attn__cuda_device_bytes(const attn_plan_t *plan) {
  (void)plan;
  return 0;
}

int attn__cuda_trap(void) {
  return 0;
}

int attn__cuda_sticky(int error) {
  (void)error;
  return 0;
}

void *attn_cuda_alloc(size_t bytes) {
  (void)bytes;
  return NULL;
}

void attn_cuda_free(void *p) {
  (void)p;
}

void *attn_cuda_host_alloc(size_t bytes) {
  (void)bytes;
  return NULL;
}

void attn_cuda_host_free(void *p) {
  (void)p;
}

int attn_cuda_copy(void *dst, const void *src, size_t bytes) {
  (void)dst, (void)src, (void)bytes;
  return -1;
}
#endif
