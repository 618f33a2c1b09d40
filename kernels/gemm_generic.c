/* gemm_generic.c - the portable matrix kernels: a 4 x 16 tile of plain C
 * loops with constant bounds, which compilers keep in vector registers where
 * the target has them.  Weights are packed in panels of 16 columns: panel p
 * holds W^T[:, 16p .. 16p+15] as IN rows of 16 floats, zero-padded past OUT.
 * The contract is that of every ISA (see gemm_avx512.c):
 *   ff_matmul_*  C [m, n] = alpha A [m, k] B [k, n] + bias [n] (+ C when flags
 *                has FF_ACC), then max(0, .) with FF_RELU;
 *   ff_linear_*  y [T, OUT] = x [T, IN] W + b, W packed in panels; only
 *                columns j0 .. j1-1 (j0 a multiple of 16);
 *   ff_sdpa_*    heads h0 .. h1-1 of multi-head attention (below). */
#include <math.h>
#include <stddef.h>

#ifndef FF_KERNEL
#define FF_KERNEL
#endif
#ifndef FF_ACC
#define FF_ACC 1  /* C += the product instead of C = */
#define FF_RELU 2 /* then C = max(0, C) */
#define FF_FETCH 4 /* (ff_linear) y is cold: each next tile's rows of y into L2 ahead */
#endif
#define FF_GENERIC_MR 4
#define FF_GENERIC_NR 16
#if defined(FF_TABLE_MR) && (FF_TABLE_MR != FF_GENERIC_MR || FF_TABLE_NR != FF_GENERIC_NR) /* the host build */
#error "kernels/isas.h: the generic row's MR, NR are not this register tile"
#endif

/* @part tile */
/* One tile: m <= 4 rows, n <= 16 columns.  A whole tile has constant
 * bounds; fewer rows (decoding: one) loop over just those, so that a
 * one-row product costs a quarter of a tile, not a whole one (it matters
 * where the arithmetic, not the memory, is the limit: a microcontroller). */
static void ff_tile_generic(int m, int n, int k, const float *A, int lda, const float *B, int ldb, float *C, int ldc,
                            const float *bias, float alpha, int flags) {
  float acc[FF_GENERIC_MR][FF_GENERIC_NR] = {{0.0f}};
  const float *a[FF_GENERIC_MR];
  for (int i = 0; i < FF_GENERIC_MR; i++) a[i] = A + (size_t)(i < m ? i : m - 1) * lda; /* past m: read by none */
  if (n == FF_GENERIC_NR && m == FF_GENERIC_MR) {
    for (int p = 0; p < k; p++) {
      const float *b = B + (size_t)p * ldb;
      for (int i = 0; i < FF_GENERIC_MR; i++)
        for (int j = 0; j < FF_GENERIC_NR; j++) acc[i][j] += a[i][p] * b[j];
    }
  } else if (n == FF_GENERIC_NR) {
    for (int p = 0; p < k; p++) {
      const float *b = B + (size_t)p * ldb;
      for (int i = 0; i < m; i++)
        for (int j = 0; j < FF_GENERIC_NR; j++) acc[i][j] += a[i][p] * b[j];
    }
  } else {
    for (int p = 0; p < k; p++) {
      const float *b = B + (size_t)p * ldb;
      for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) acc[i][j] += a[i][p] * b[j];
    }
  }
  for (int i = 0; i < m; i++) {
    float *c = C + (size_t)i * ldc;
    for (int j = 0; j < n; j++) {
      float r = alpha * acc[i][j] + (bias ? bias[j] : 0.0f);
      if (flags & FF_ACC) r += c[j];
      c[j] = (flags & FF_RELU) && r < 0.0f ? 0.0f : r;
    }
  }
}

/* @part matmul: tile */
FF_KERNEL void ff_matmul_generic(int m, int n, int k, const float *A, int lda, const float *B, int ldb, float *C,
                                 int ldc, const float *bias, float alpha, int flags) {
  for (int j = 0; j < n; j += FF_GENERIC_NR)
    for (int i = 0; i < m; i += FF_GENERIC_MR)
      ff_tile_generic(m - i < FF_GENERIC_MR ? m - i : FF_GENERIC_MR, n - j < FF_GENERIC_NR ? n - j : FF_GENERIC_NR, k,
                      A + (size_t)i * lda, lda, B + j, ldb, C + (size_t)i * ldc + j, ldc, bias ? bias + j : 0, alpha,
                      flags);
}

/* @part linear: tile */
/* x's rows every ldx floats, y's every ldy (ff_linear_ld) */
FF_KERNEL void ff_linear_ld_generic(const float *x, int ldx, int T, int IN, const float *W, const float *b, int OUT,
                                    float *y, int ldy, int flags, int j0, int j1) {
  for (int j = j0; j < j1; j += FF_GENERIC_NR)
    for (int i = 0; i < T; i += FF_GENERIC_MR)
      ff_tile_generic(T - i < FF_GENERIC_MR ? T - i : FF_GENERIC_MR, OUT - j < FF_GENERIC_NR ? OUT - j : FF_GENERIC_NR,
                      IN, x + (size_t)i * ldx, ldx, W + (size_t)j * IN, FF_GENERIC_NR, y + (size_t)i * ldy + j, ldy,
                      b ? b + j : 0, 1.0f, flags);
}

FF_KERNEL void ff_linear_generic(const float *x, int T, int IN, const float *W, const float *b, int OUT, float *y,
                                 int flags, int j0, int j1) {
  ff_linear_ld_generic(x, IN, T, IN, W, b, OUT, y, OUT, flags, j0, j1);
}

/* @part linear_ta: tile */
/* ff_linear_ld with x given transposed, xt [IN, T] (rows every ldx floats): a weight's gradient
 * dW += dY^T X from dY itself.  Row by row, each output's sum over k in k order and its
 * epilogue as ff_tile_generic's: the same floats as ff_linear on x. */
FF_KERNEL void ff_linear_ta_generic(const float *xt, int ldx, int T, int IN, const float *W, const float *b, int OUT,
                                    float *y, int ldy, int flags, int j0, int j1) {
  for (int j = j0; j < j1; j += FF_GENERIC_NR) {
    const int n = OUT - j < FF_GENERIC_NR ? OUT - j : FF_GENERIC_NR;
    const float *panel = W + (size_t)j * IN;
    for (int i = 0; i < T; i++) {
      float acc[FF_GENERIC_NR] = {0.0f}, *c = y + (size_t)i * ldy + j;
      for (int p = 0; p < IN; p++) {
        const float a = xt[(size_t)p * ldx + i], *w = panel + (size_t)p * FF_GENERIC_NR;
        for (int k = 0; k < n; k++) acc[k] += a * w[k];
      }
      for (int k = 0; k < n; k++) {
        float r = 1.0f * acc[k] + (b ? b[j + k] : 0.0f);
        if (flags & FF_ACC) r += c[k];
        c[k] = (flags & FF_RELU) && r < 0.0f ? 0.0f : r;
      }
    }
  }
}

/* @part quant: tile */
/* bf16 and int8 weights (quant.c); the prefill's tile is the one above */
#define FF_QUANT(name) ff_##name##_generic
#define FF_GEMV_PANELS 1
#define FF_LIN_MR FF_GENERIC_MR
#define FF_LIN_NR FF_GENERIC_NR
#define FF_LIN_KC 32 /* k per dequantized block: 2 KB of floats, on the stack (microcontrollers) */
#define FF_LIN_TILE(m, n, k, A, lda, B, ldb, C, ldc, bias, alpha, flags, pf, pfs)                                    \
  ((void)(pf), (void)(pfs), ff_tile_generic(m, n, k, A, lda, B, ldb, C, ldc, bias, alpha, flags)) /* no fetch ahead */
#include "quant.c"

/* quant.c's GEMVs: one panel at a time, plain loops over its 16 columns
 * that compilers vectorize */
static inline void ff_gemv_bf16_p_generic(const int P, const float *x, int IN, const unsigned char *W,
                                          size_t panel_bytes, float *acc) {
  (void)P, (void)panel_bytes; /* FF_GEMV_PANELS 1 */
  const uint16_t *w = (const uint16_t *)(const void *)W;
  float s[FF_GENERIC_NR] = {0.0f};
  for (int k = 0; k < IN; k++)
    for (int c = 0; c < FF_GENERIC_NR; c++) s[c] += x[k] * ff_bf16_value_generic(w[(size_t)k * FF_GENERIC_NR + c]);
  for (int c = 0; c < FF_GENERIC_NR; c++) acc[c] = s[c];
}

static inline void ff_gemv_q8_p_generic(const int P, const float *x, int IN, const unsigned char *W,
                                        size_t panel_bytes, float *acc) {
  (void)P, (void)panel_bytes;
  float s[FF_GENERIC_NR] = {0.0f};
  for (int k0 = 0; k0 < IN; k0 += 32) {
    const unsigned char *group = W + (size_t)(k0 / 32) * 36 * FF_GENERIC_NR;
    const float *scale = (const float *)(const void *)group;
    const signed char *q = (const signed char *)(group + 4 * FF_GENERIC_NR);
    for (int r = 0; r < 32 && k0 + r < IN; r++)
      for (int c = 0; c < FF_GENERIC_NR; c++) s[c] += x[k0 + r] * ((float)q[r * FF_GENERIC_NR + c] * scale[c]);
  }
  for (int c = 0; c < FF_GENERIC_NR; c++) acc[c] = s[c];
}

/* @part int8 */
/* int8 compute (int8.c) on plain loops */
#define FF_I8(name) ff_##name##_generic
#define FF_I8_MR FF_GENERIC_MR
#define FF_I8_NR FF_GENERIC_NR
#include "int8.c"

/* @part bf16c */
/* bf16 compute (bf16.c) on its plain loops */
#define FF_B16(name) ff_##name##_generic
#define FF_B16_MR FF_GENERIC_MR
#define FF_B16_NR FF_GENERIC_NR
#include "bf16.c"

/* @part plain */
/* norms and activations (plain.c) */
#define FF_PLAIN(name) ff_##name##_generic
#include "plain.c"

/* @part sdpa: matmul */
/* scaled dot-product attention on these kernels (sdpa.c) */
#define FF_SDPA ff_sdpa_generic
#define FF_SDPA_MR FF_GENERIC_MR
#define FF_SDPA_MATMUL ff_matmul_generic
#include "sdpa.c"

/* @part train_isa */
/* the kernels of generated training code (train.c) on these */
#define FF_TRAIN(name) ff_##name##_generic
#define FF_TRAIN_NR FF_GENERIC_NR
#include "train.c"
