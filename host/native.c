/* native.c - the kernels of kernels/ compiled into the host
 * (CMakeLists.txt builds each ISA's file with its flags), for the libtcc
 * engine: libtcc cannot emit SIMD, so the JIT-compiled model calls these
 * through tcc_add_symbol while the model code itself stays specialised. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen.h"

#define KERNEL_DECLS(isa)                                                                                            \
  void ff_linear_##isa(const float *x, int T, int IN, const float *W, const float *b, int OUT, float *y, int flags,  \
                       int j0, int j1);                                                                              \
  void ff_matmul_##isa(int m, int n, int k, const float *A, int lda, const float *B, int ldb, float *C, int ldc,     \
                       const float *bias, float alpha, int flags);                                           \
  void ff_sdpa_##isa(const float *q, int ldq, const float *k, int ldk, int Tq, int key_len, int heads, int dk,  \
                          int h0, int h1, int causal, int q_pos0, float scale, float *scratch, float *out);      \
  void ff_layernorm_##isa(const float *x, int T, int D, const float *gamma, const float *beta, double eps, float *y); \
  void ff_rmsnorm_##isa(const float *x, int T, int D, const float *gamma, double eps, float *y);                   \
  void ff_gelu_##isa(float *h, size_t n);                                                                          \
  void ff_gelu_tanh_##isa(float *h, size_t n);                                                                     \
  void ff_swiglu_##isa(const float *h, int T, int N, float *a);
KERNEL_DECLS(generic)
#ifdef FF_HAVE_AVX2
KERNEL_DECLS(avx2)
#endif
#ifdef FF_HAVE_AVX512
KERNEL_DECLS(avx512)
#endif
#ifdef FF_HAVE_NEON
KERNEL_DECLS(neon)
#endif

#define KERNEL_ENTRY(kind, isa) {#isa, "ff_" #kind "_" #isa, (void (*)(void))ff_##kind##_##isa},
#define KERNEL_ENTRIES(isa)                                                                                          \
  KERNEL_ENTRY(linear, isa) KERNEL_ENTRY(matmul, isa) KERNEL_ENTRY(sdpa, isa)      KERNEL_ENTRY(layernorm, isa)      \
  KERNEL_ENTRY(rmsnorm, isa) KERNEL_ENTRY(gelu, isa) KERNEL_ENTRY(gelu_tanh, isa) KERNEL_ENTRY(swiglu, isa)

/* every kernel the host carries: its ISA, C name and address */
static const struct {
  const char *isa, *name;
  void (*fn)(void);
} kernels[] = {
    KERNEL_ENTRIES(generic)
#ifdef FF_HAVE_AVX2
    KERNEL_ENTRIES(avx2)
#endif
#ifdef FF_HAVE_AVX512
    KERNEL_ENTRIES(avx512)
#endif
#ifdef FF_HAVE_NEON
    KERNEL_ENTRIES(neon)
#endif
};

void ff_native_kernels(void (*add)(void *ctx, const char *name, void *fn), void *ctx) {
  for (size_t i = 0; i < sizeof kernels / sizeof *kernels; i++)
    for (const char *const *isa = ff_host_isas(); *isa; isa++)
      if (!strcmp(kernels[i].isa, *isa)) add(ctx, kernels[i].name, (void *)kernels[i].fn);
}

const char *const *ff_host_isas(void) {
  static const char *list[4];
  if (!list[0]) {
    int n = 0;
#if defined(FF_HAVE_AVX512) || defined(FF_HAVE_AVX2)
    __builtin_cpu_init();
#endif
#ifdef FF_HAVE_AVX512
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma")) list[n++] = "avx512";
#endif
#ifdef FF_HAVE_AVX2
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) list[n++] = "avx2";
#endif
#ifdef FF_HAVE_NEON
    list[n++] = "neon"; /* every AArch64 CPU has it */
#endif
    list[n] = "generic";
  }
  return list;
}

/* FIXFORMER_ISA chooses another of the host's ISAs (the tests run both) */
const char *ff_host_isa(void) {
  const char *want = getenv("FIXFORMER_ISA");
  const char *const *isas = ff_host_isas();
  for (int i = 0; want && isas[i]; i++)
    if (!strcmp(isas[i], want)) return isas[i];
  return isas[0];
}

int ff_host_isa_check(ff_error *err) {
  const char *want = getenv("FIXFORMER_ISA");
  const char *const *isas = ff_host_isas();
  if (!want) return 0;
  char list[64] = "";
  for (int i = 0; isas[i]; i++) {
    if (!strcmp(isas[i], want)) return 0;
    snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", isas[i]);
  }
  return ff_fail(err, FF_EINVAL, "FIXFORMER_ISA=%s: not an ISA this machine runs (%s)", want, list);
}
