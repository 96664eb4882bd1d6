/* core/backend.c: what this CPU runs, and the BLAS underneath. */
#include <cblas.h>
#include <pthread.h>
#include <strings.h>

#include "internal.h"

attn_isa_t attn__cpu_isa(void) {
#if defined(__x86_64__) || defined(__i386__)
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

void attn_backend_info(attn_backend_t *b) {
  b->blas = "OpenBLAS";
  b->blas_kernel = openblas_get_corename();
  b->blas_config = openblas_get_config();
  b->isa = attn__cpu_isa();
}
