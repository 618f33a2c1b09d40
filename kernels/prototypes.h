/* prototypes.h - the one text of the kernel signatures every ISA provides
 * (kernels/gemm_ISA.c defines them).  Include it with FF_SUFFIX defined to
 * the ISA (generic, avx2, avx512, neon); it may be included once per ISA.
 * Read by host/native.c (the declarations of the kernels compiled into the
 * host), by CMake's build of each gemm_ISA.c (-include: the definitions must
 * match), and pasted by gen/emit.lua with FF_ISA(kind) spelt out (the
 * declarations an emitted model sees under FIXFORMER_JIT or FF_EXTERN_KERNELS).
 * The declarations are the lines from the first "void" to the last ";". */
#include <stddef.h>
#ifndef FF_SUFFIX
#error "define FF_SUFFIX to the ISA before including prototypes.h"
#endif
#define FF_ISA_PASTE_(k, s) ff_##k##_##s
#define FF_ISA_PASTE(k, s) FF_ISA_PASTE_(k, s)
#define FF_ISA(k) FF_ISA_PASTE(k, FF_SUFFIX)
void FF_ISA(linear)(const float *x, int T, int IN, const float *W, const float *b, int OUT, float *y, int flags,
    int j0, int j1);
/* the same on bf16 / int8 weights packed as kernels/quant.c says */
void FF_ISA(linear_bf16)(const float *x, int T, int IN, const void *W, const float *b, int OUT, float *y, int flags,
    int j0, int j1);
void FF_ISA(linear_q8)(const float *x, int T, int IN, const void *W, const float *b, int OUT, float *y, int flags,
    int j0, int j1);
void FF_ISA(matmul)(int m, int n, int k, const float *A, int lda, const float *B, int ldb, float *C, int ldc,
    const float *bias, float alpha, int flags);
void FF_ISA(sdpa)(const float *q, int ldq, const float *k, int ldk, int Tq, int key_len, int heads, int kv_heads,
    int dk, int h0, int h1, int causal, int q_pos0, float scale, float *scratch, float *out);
void FF_ISA(layernorm)(const float *x, int T, int D, const float *gamma, const float *beta, float eps, float *y);
void FF_ISA(rmsnorm)(const float *x, int T, int D, const float *gamma, float eps, float *y);
void FF_ISA(gelu)(float *h, size_t n);
void FF_ISA(gelu_tanh)(float *h, size_t n);
void FF_ISA(swiglu)(const float *h, int T, int N, float *y);
#undef FF_ISA
#undef FF_ISA_PASTE
#undef FF_ISA_PASTE_
