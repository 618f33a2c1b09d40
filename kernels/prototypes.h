/* prototypes.h - the one text of the kernel signatures every ISA provides
 * (kernels/gemm_ISA.c defines them).  Include it with FF_SUFFIX defined to
 * the ISA (generic, avx2, avx512, neon); it may be included once per ISA.
 * Read by host/native.c (the declarations of the kernels compiled into the
 * host), by CMake's build of each gemm_ISA.c (-include: the definitions must
 * match), and pasted by gen/emit.lua with FF_ISA(kind) spelt out (the
 * declarations an emitted model sees under FIXFORMER_JIT or FF_EXTERN_KERNELS).
 * The declarations are the lines from the first "void" to the last ";". */
#include <stddef.h>
#include <stdint.h>
#ifndef FF_SUFFIX
#error "define FF_SUFFIX to the ISA before including prototypes.h"
#endif
#define FF_ISA_PASTE_(k, s) ff_##k##_##s
#define FF_ISA_PASTE(k, s) FF_ISA_PASTE_(k, s)
#define FF_ISA(k) FF_ISA_PASTE(k, FF_SUFFIX)
void FF_ISA(linear)(const float *x, int T, int IN, const float *W, const float *b, int OUT, float *y, int flags,
    int j0, int j1);
void FF_ISA(linear_ld)(const float *x, int ldx, int T, int IN, const float *W, const float *b, int OUT, float *y,
    int ldy, int flags, int j0, int j1);
void FF_ISA(linear_ta)(const float *xt, int ldx, int T, int IN, const float *W, const float *b, int OUT, float *y,
    int ldy, int flags, int j0, int j1);
/* the same on bf16 / int8 weights packed as kernels/quant.c says */
void FF_ISA(linear_bf16)(const float *x, int T, int IN, const void *W, const float *b, int OUT, float *y, int flags,
    int j0, int j1);
void FF_ISA(linear_q8)(const float *x, int T, int IN, const void *W, const float *b, int OUT, float *y, int flags,
    int j0, int j1);
/* int8 compute (kernels/int8.c): x's rows quantized into q, then y (+)= q times W's int8 panels */
void FF_ISA(quantize_rows)(const float *x, int T, int IN, float *q);
void FF_ISA(linear_i8)(const float *xq, int T, int IN, const void *W, const float *b, int OUT, float *y, int flags,
    int j0, int j1);
/* bf16 compute (kernels/bf16.c): x's rows rounded into q, then y (+)= q times W's bf16 pair panels */
void FF_ISA(bf16_rows)(const float *x, int T, int IN, float *q);
void FF_ISA(linear_dpbf16)(const float *q, int T, int IN, const void *W, const float *b, int OUT, float *y,
    int flags, int j0, int j1);
void FF_ISA(matmul)(int m, int n, int k, const float *A, int lda, const float *B, int ldb, float *C, int ldc,
    const float *bias, float alpha, int flags);
void FF_ISA(sdpa)(const float *q, int ldq, const float *k, int ldk, int Tq, int key_len, int heads, int kv_heads,
    int dk, int h0, int h1, int causal, int q_pos0, float scale, float *scratch, float *out);
void FF_ISA(layernorm)(const float *x, int T, int D, const float *gamma, const float *beta, float eps, float *y);
void FF_ISA(rmsnorm)(const float *x, int T, int D, const float *gamma, float eps, float *y);
void FF_ISA(gelu)(float *h, size_t n);
void FF_ISA(gelu_tanh)(float *h, size_t n);
void FF_ISA(silu)(float *h, size_t n);
void FF_ISA(swiglu)(const float *h, int T, int N, float *y);
/* generated training code's (kernels/train.c, plain.c) */
void FF_ISA(pack)(const float *src, int ld, int K, int N, int trans, int n0, int n1, float *dst);
void FF_ISA(transpose)(const float *src, int rows, int cols, int ld, float *dst);
void FF_ISA(dropout)(const float *x, float *y, size_t n, uint64_t seed, uint64_t step, uint32_t site, uint64_t index0,
    float p);
void FF_ISA(cross_entropy)(float *logits, int n, int V, int ld, const int32_t *labels, int ignore, float smoothing,
    int grad, double *loss, int64_t *count);
void FF_ISA(attention_train)(const float *q, int ldq, const float *k, int ldk, int Tq, int Tk, int q_len, int key_len,
    int heads, int kv_heads, int dk, int g0, int g1, int causal, float scale, float p, uint64_t seed, uint64_t step,
    uint32_t site, uint64_t index0, float *probs, float *scratch, float *out);
void FF_ISA(attention_backward)(const float *q, int ldq, const float *k, int ldk, int Tq, int Tk, int q_len,
    int key_len, int heads, int kv_heads, int dk, int g0, int g1, float scale, float p, uint64_t seed, uint64_t step,
    uint32_t site, uint64_t index0, const float *probs, const float *dout, float *dq, float *dkv, float *scratch);
void FF_ISA(layernorm_backward)(const float *x, int T, int D, const float *gamma, float eps, const float *dy,
    float *dx, int acc, float *dgamma, float *dbeta);
void FF_ISA(rmsnorm_backward)(const float *x, int T, int D, const float *gamma, float eps, const float *dy,
    float *dx, int acc, float *dgamma);
void FF_ISA(gelu_backward)(const float *h, const float *dy, float *dh, size_t n);
void FF_ISA(gelu_tanh_backward)(const float *h, const float *dy, float *dh, size_t n);
void FF_ISA(silu_backward)(const float *h, const float *dy, float *dh, size_t n);
void FF_ISA(swiglu_backward)(const float *h, int T, int N, const float *dy, float *dh);
void FF_ISA(adamw)(float *p, const float *g, float *m, float *v, size_t n, int64_t step, double lr, double beta1,
    double beta2, double eps, double weight_decay, float gscale, float gcoef);
double FF_ISA(sum_squares)(const float *g, size_t n, float scale);
#undef FF_ISA
#undef FF_ISA_PASTE
#undef FF_ISA_PASTE_
