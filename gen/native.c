/* native.c - the matrix kernels of templates/kernels/ compiled into the host
 * (CMakeLists.txt builds each ISA's file with its flags), for the libtcc
 * engine: libtcc cannot emit SIMD, so the JIT-compiled model calls these
 * through tcc_add_symbol while the model code itself stays specialised. */
#include <stdlib.h>
#include <string.h>

#include "codegen.h"

#define KERNEL_DECLS(isa)                                                                                            \
  void ff_linear_##isa(const float *x, int T, int IN, const float *W, const float *b, int OUT, float *y, int flags,  \
                       int j0, int j1);                                                                              \
  void ff_matmul_##isa(int m, int n, int k, const float *A, int lda, const float *B, int ldb, float *C, int ldc,     \
                       const float *bias, float alpha, int flags);                                           \
  void ff_attention_##isa(const float *q, int ldq, const float *k, int ldk, int Tq, int key_len, int heads, int dk,  \
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

static const struct {
  const char *name;
  void (*fn)(void);
} kernels[] = {
    {"ff_linear_generic", (void (*)(void))ff_linear_generic},
    {"ff_matmul_generic", (void (*)(void))ff_matmul_generic},
    {"ff_attention_generic", (void (*)(void))ff_attention_generic},
    {"ff_layernorm_generic", (void (*)(void))ff_layernorm_generic},
    {"ff_rmsnorm_generic", (void (*)(void))ff_rmsnorm_generic},
    {"ff_gelu_generic", (void (*)(void))ff_gelu_generic},
    {"ff_gelu_tanh_generic", (void (*)(void))ff_gelu_tanh_generic},
    {"ff_swiglu_generic", (void (*)(void))ff_swiglu_generic},
#ifdef FF_HAVE_AVX2
    {"ff_linear_avx2", (void (*)(void))ff_linear_avx2},
    {"ff_matmul_avx2", (void (*)(void))ff_matmul_avx2},
    {"ff_attention_avx2", (void (*)(void))ff_attention_avx2},
    {"ff_layernorm_avx2", (void (*)(void))ff_layernorm_avx2},
    {"ff_rmsnorm_avx2", (void (*)(void))ff_rmsnorm_avx2},
    {"ff_gelu_avx2", (void (*)(void))ff_gelu_avx2},
    {"ff_gelu_tanh_avx2", (void (*)(void))ff_gelu_tanh_avx2},
    {"ff_swiglu_avx2", (void (*)(void))ff_swiglu_avx2},
#endif
#ifdef FF_HAVE_AVX512
    {"ff_linear_avx512", (void (*)(void))ff_linear_avx512},
    {"ff_matmul_avx512", (void (*)(void))ff_matmul_avx512},
    {"ff_attention_avx512", (void (*)(void))ff_attention_avx512},
    {"ff_layernorm_avx512", (void (*)(void))ff_layernorm_avx512},
    {"ff_rmsnorm_avx512", (void (*)(void))ff_rmsnorm_avx512},
    {"ff_gelu_avx512", (void (*)(void))ff_gelu_avx512},
    {"ff_gelu_tanh_avx512", (void (*)(void))ff_gelu_tanh_avx512},
    {"ff_swiglu_avx512", (void (*)(void))ff_swiglu_avx512},
#endif
#ifdef FF_HAVE_NEON
    {"ff_linear_neon", (void (*)(void))ff_linear_neon},
    {"ff_matmul_neon", (void (*)(void))ff_matmul_neon},
    {"ff_attention_neon", (void (*)(void))ff_attention_neon},
    {"ff_layernorm_neon", (void (*)(void))ff_layernorm_neon},
    {"ff_rmsnorm_neon", (void (*)(void))ff_rmsnorm_neon},
    {"ff_gelu_neon", (void (*)(void))ff_gelu_neon},
    {"ff_gelu_tanh_neon", (void (*)(void))ff_gelu_tanh_neon},
    {"ff_swiglu_neon", (void (*)(void))ff_swiglu_neon},
#endif
};

void *ff_native_kernel(const char *name) {
  for (size_t i = 0; i < sizeof kernels / sizeof *kernels; i++)
    if (!strcmp(kernels[i].name, name)) return (void *)kernels[i].fn;
  return NULL;
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
