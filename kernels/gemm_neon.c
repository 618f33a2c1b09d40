/* gemm_neon.c - the AArch64 NEON matrix kernels: a 6 x 16 register tile (24
 * q accumulators, four 4-float loads of B and six broadcasts of A per step
 * of k, 24 FMAs), and the drivers built on it.  Weights are packed in panels
 * of 16 columns: panel p holds W^T[:, 16p .. 16p+15] as IN rows of 16
 * floats, zero-padded past OUT.  The contract is that of every ISA
 * (gemm_avx512.c):
 *   ff_matmul_*  C [m, n] = alpha A [m, k] B [k, n] + bias [n] (+ C when flags
 *                has FF_ACC), then max(0, .) with FF_RELU;
 *   ff_linear_*  y [T, OUT] = x [T, IN] W + b, W packed in panels; only
 *                columns j0 .. j1-1 (j0 a multiple of 16);
 *   ff_sdpa_*    heads h0 .. h1-1 of multi-head attention (sdpa.c).
 * Sums over k run in k order per output, like the reference.  NEON has no
 * masked loads: a tile narrower than 16 columns goes through a zero-padded
 * copy of its rows of B and of its output. */
#if !defined(__aarch64__) || !defined(__ARM_NEON)
#error "these kernels need AArch64 NEON; emit with --isa generic for other targets"
#endif
#include <arm_neon.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifndef FF_KERNEL
#define FF_KERNEL
#endif
#ifndef FF_ACC
#define FF_ACC 1  /* C += the product instead of C = */
#define FF_RELU 2 /* then C = max(0, C) */
#define FF_FETCH 4 /* (ff_linear) y is cold: each next tile's rows of y into L2 ahead */
#endif
#define FF_NEON_MR 6
#define FF_NEON_NR 16
#if defined(FF_TABLE_MR) && (FF_TABLE_MR != FF_NEON_MR || FF_TABLE_NR != FF_NEON_NR) /* the host build */
#error "kernels/isas.h: the neon row's MR, NR are not this register tile"
#endif
#define FF_NEON_KC 256 /* k per pass over a panel: 16 KB of B stays in L1 */
/* Before the loops over a tile's rows and vectors: their accumulators are
 * registers only once the loops are unrolled, which GCC does by itself at
 * -O3 but not at -O2 (there the int8 and bf16 tiles kept them on the stack) */
#define FF_NEON_UNROLL _Pragma("GCC unroll 8")

/* @part tile */
/* The tile: M (a constant after inlining) <= 6 rows by 16 columns of B rows
 * every ldb floats; acc[i][0..3] the row's four vectors.  Every two steps of
 * k it fetches the line at pf + pfs p (drivers.c). */
static inline __attribute__((always_inline)) void ff_tile_neon(const int M, int k, const float *A, int lda,
                                                              const float *B, int ldb, float32x4_t acc[][4],
                                                              uintptr_t pf, int pfs) {
  float32x4_t c00 = vdupq_n_f32(0), c01 = c00, c02 = c00, c03 = c00, c10 = c00, c11 = c00, c12 = c00, c13 = c00;
  float32x4_t c20 = c00, c21 = c00, c22 = c00, c23 = c00, c30 = c00, c31 = c00, c32 = c00, c33 = c00;
  float32x4_t c40 = c00, c41 = c00, c42 = c00, c43 = c00, c50 = c00, c51 = c00, c52 = c00, c53 = c00;
  for (int p = 0; p < k; p++) {
    const float *b = B + (size_t)p * ldb;
    const float32x4_t b0 = vld1q_f32(b), b1 = vld1q_f32(b + 4), b2 = vld1q_f32(b + 8), b3 = vld1q_f32(b + 12);
    if (!(p & 1)) __builtin_prefetch((const void *)(pf + (uintptr_t)pfs * p));
#define FF_NEON_ROW(i)                                                                                                \
  if (M > i) {                                                                                                        \
    const float32x4_t a = vld1q_dup_f32(A + (size_t)(i)*lda + p);                                                     \
    c##i##0 = vfmaq_f32(c##i##0, a, b0), c##i##1 = vfmaq_f32(c##i##1, a, b1);                                         \
    c##i##2 = vfmaq_f32(c##i##2, a, b2), c##i##3 = vfmaq_f32(c##i##3, a, b3);                                         \
  }
    FF_NEON_ROW(0) FF_NEON_ROW(1) FF_NEON_ROW(2) FF_NEON_ROW(3) FF_NEON_ROW(4) FF_NEON_ROW(5)
#undef FF_NEON_ROW
  }
#define FF_NEON_OUT(i) \
  if (M > i) acc[i][0] = c##i##0, acc[i][1] = c##i##1, acc[i][2] = c##i##2, acc[i][3] = c##i##3;
  FF_NEON_OUT(0) FF_NEON_OUT(1) FF_NEON_OUT(2) FF_NEON_OUT(3) FF_NEON_OUT(4) FF_NEON_OUT(5)
#undef FF_NEON_OUT
}

/* The int8 and bf16 tiles' rows: CALL(M) with m <= 4 as a constant. */
#define FF_NEON_ROWS_OF(m, CALL) (m) >= 4 ? CALL(4) : (m) == 3 ? CALL(3) : (m) == 2 ? CALL(2) : CALL(1)

static inline void ff_tile_m_neon(int m, int k, const float *A, int lda, const float *B, int ldb,
                                  float32x4_t acc[][4], uintptr_t pf, int pfs) {
  switch (m) { /* the row count becomes a constant */
  case 6: ff_tile_neon(6, k, A, lda, B, ldb, acc, pf, pfs); break;
  case 5: ff_tile_neon(5, k, A, lda, B, ldb, acc, pf, pfs); break;
  case 4: ff_tile_neon(4, k, A, lda, B, ldb, acc, pf, pfs); break;
  case 3: ff_tile_neon(3, k, A, lda, B, ldb, acc, pf, pfs); break;
  case 2: ff_tile_neon(2, k, A, lda, B, ldb, acc, pf, pfs); break;
  default: ff_tile_neon(1, k, A, lda, B, ldb, acc, pf, pfs); break;
  }
}

/* One tile of m <= 6 rows and n <= 16 columns, with the epilogue
 * C = alpha acc + bias (+ C), max(0, .).  A narrow tile multiplies
 * zero-padded copies of its B rows, KC rows at a time. */
static void ff_tile_rows_neon(int m, int n, int k, const float *A, int lda, const float *B, int ldb, float *C,
                              int ldc, const float *bias, float alpha, int flags, uintptr_t pf, int pfs) {
  float32x4_t acc[FF_NEON_MR][4];
  if (n == FF_NEON_NR) {
    ff_tile_m_neon(m, k, A, lda, B, ldb, acc, pf, pfs);
  } else {
    float pad[FF_NEON_KC * FF_NEON_NR];
    float32x4_t part[FF_NEON_MR][4];
    for (int i = 0; i < m; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = vdupq_n_f32(0.0f);
    memset(pad, 0, sizeof pad);
    for (int k0 = 0; k0 < k; k0 += FF_NEON_KC) {
      const int kc = k - k0 < FF_NEON_KC ? k - k0 : FF_NEON_KC;
      for (int p = 0; p < kc; p++) memcpy(pad + p * FF_NEON_NR, B + (size_t)(k0 + p) * ldb, sizeof(float) * n);
      ff_tile_m_neon(m, kc, A + k0, lda, pad, FF_NEON_NR, part, pf, pfs);
      for (int i = 0; i < m; i++)
        for (int v = 0; v < 4; v++) acc[i][v] = vaddq_f32(acc[i][v], part[i][v]);
    }
  }
  for (int i = 0; i < m; i++) {
    float row[FF_NEON_NR], *c = C + (size_t)i * ldc;
    for (int v = 0; v < 4; v++) vst1q_f32(row + 4 * v, acc[i][v]);
    for (int j = 0; j < n; j++) {
      float r = alpha * row[j] + (bias ? bias[j] : 0.0f);
      if (flags & FF_ACC) r += c[j];
      c[j] = (flags & FF_RELU) && r < 0.0f ? 0.0f : r;
    }
  }
}

/* matmul and linear on these kernels (drivers.c) */
#define FF_MATMUL ff_matmul_neon
#define FF_LINEAR ff_linear_neon
#define FF_LINEAR_LD ff_linear_ld_neon
#define FF_LINEAR_TA ff_linear_ta_neon
#define FF_LIN_MR FF_NEON_MR
#define FF_LIN_NR FF_NEON_NR
#define FF_LIN_KC FF_NEON_KC
#define FF_LIN_TILE ff_tile_rows_neon
#include "drivers.c"

/* @part quant: tile */
/* bf16 and int8 weights (quant.c): the prefill's tile is the one above */
#define FF_QUANT(name) ff_##name##_neon
#define FF_GEMV_PANELS 2
#include "quant.c"

/* quant.c's GEMVs: P (a constant after inlining) panels of 16 columns at
 * once, each column's sum in k order, 4 P independent FMA chains.  bf16: a
 * row of a panel is 32 bytes, 8 lanes of two weights; the odd column's
 * weight is its lane with the low half cleared, the even one's the lane
 * shifted left by 16; back in column order at the end (vzip). */
static inline __attribute__((always_inline)) void ff_gemv_bf16_p_neon(const int P, const float *x, int IN,
                                                                     const unsigned char *W, size_t pb, float *acc) {
  float32x4_t a[FF_GEMV_PANELS][4];
  const uint32x4_t high = vdupq_n_u32(0xFFFF0000u);
  for (int p = 0; p < P; p++) a[p][0] = a[p][1] = a[p][2] = a[p][3] = vdupq_n_f32(0.0f);
  for (int k = 0; k < IN; k++) {
    const float xk = x[k];
    for (int p = 0; p < P; p++) {
      const uint32_t *w = (const uint32_t *)(const void *)(W + pb * p + (size_t)k * 32);
      const uint32x4_t h0 = vld1q_u32(w), h1 = vld1q_u32(w + 4);
      a[p][0] = vfmaq_n_f32(a[p][0], vreinterpretq_f32_u32(vshlq_n_u32(h0, 16)), xk);
      a[p][1] = vfmaq_n_f32(a[p][1], vreinterpretq_f32_u32(vandq_u32(h0, high)), xk);
      a[p][2] = vfmaq_n_f32(a[p][2], vreinterpretq_f32_u32(vshlq_n_u32(h1, 16)), xk);
      a[p][3] = vfmaq_n_f32(a[p][3], vreinterpretq_f32_u32(vandq_u32(h1, high)), xk);
    }
  }
  for (int p = 0; p < P; p++) { /* interleaved: columns 0 .. 7, then 8 .. 15 (a named pair: clang's
                                  * vst2q_f32 is a macro, which a compound literal's comma would split) */
    float32x4x2_t lo, hi;
    lo.val[0] = a[p][0], lo.val[1] = a[p][1], hi.val[0] = a[p][2], hi.val[1] = a[p][3];
    vst2q_f32(acc + 16 * p, lo);
    vst2q_f32(acc + 16 * p + 8, hi);
  }
}

/* int8: a row of a panel is 16 bytes, widened to four vectors of 4 floats;
 * a group's sums x q (in k order) are then scaled into the column's sum (in
 * group order): one multiply per group instead of per weight */
static inline __attribute__((always_inline)) void ff_gemv_q8_p_neon(const int P, const float *x, int IN,
                                                                   const unsigned char *W, size_t pb, float *acc) {
  float32x4_t a[FF_GEMV_PANELS][4], s[FF_GEMV_PANELS][4];
  for (int p = 0; p < P; p++) a[p][0] = a[p][1] = a[p][2] = a[p][3] = vdupq_n_f32(0.0f);
  for (int k0 = 0; k0 < IN; k0 += 32) {
    const unsigned char *g = W + (size_t)(k0 / 32) * 36 * 16;
    const int rows = IN - k0 < 32 ? IN - k0 : 32;
    for (int p = 0; p < P; p++) s[p][0] = s[p][1] = s[p][2] = s[p][3] = vdupq_n_f32(0.0f);
    for (int r = 0; r < rows; r++) {
      const float xk = x[k0 + r];
      for (int p = 0; p < P; p++) {
        const int8x16_t q = vld1q_s8((const int8_t *)(const void *)(g + pb * p + 64 + 16 * r));
        const int16x8_t lo = vmovl_s8(vget_low_s8(q)), hi = vmovl_s8(vget_high_s8(q));
        s[p][0] = vfmaq_n_f32(s[p][0], vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), xk);
        s[p][1] = vfmaq_n_f32(s[p][1], vcvtq_f32_s32(vmovl_s16(vget_high_s16(lo))), xk);
        s[p][2] = vfmaq_n_f32(s[p][2], vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), xk);
        s[p][3] = vfmaq_n_f32(s[p][3], vcvtq_f32_s32(vmovl_s16(vget_high_s16(hi))), xk);
      }
    }
    for (int p = 0; p < P; p++)
      for (int v = 0; v < 4; v++)
        a[p][v] = vfmaq_f32(a[p][v], s[p][v], vld1q_f32((const float *)(const void *)(g + pb * p) + 4 * v));
  }
  for (int p = 0; p < P; p++)
    for (int v = 0; v < 4; v++) vst1q_f32(acc + 16 * p + 4 * v, a[p][v]);
}

/* @part int8: tile */
/* int8 compute (int8.c) on Armv8.0's NEON, which has no dot product: SMULL
 * and SMULL2 multiply 16 signed q by 16 weights (four columns' quads) into
 * int16, exact (|q|, |w| <= 127), ADDP adds pairs (within 2 x 127 x 127) and
 * SADALP adds pairs again into each column's int32 sum: the same exact sum
 * as int8.c's, 16 multiply-adds in four instructions.  Built for Armv8.2's
 * dot product (__ARM_FEATURE_DOTPROD: -march=armv8.2-a+dotprod, or a -mcpu
 * that has it), SDOT makes the same sums in one instruction.  Four rows a
 * tile: 16 accumulators, the panel's four vectors. */
#define FF_NEON_I8_MR 4
static void ff_i8_tile_neon(int m, int n, int quads, const unsigned char *A, size_t lda, const unsigned char *panel,
                            const float *sx, const float *b, float *y, size_t ldy, int flags);
#define FF_I8(name) ff_##name##_neon
#define FF_I8_MR FF_NEON_I8_MR
#define FF_I8_NR FF_NEON_NR
#define FF_I8_TILE ff_i8_tile_neon
#include "int8.c"

/* acc lane l += the sum of a[4l + i] w[4l + i] over i < 4, exact */
static inline __attribute__((always_inline)) int32x4_t ff_i8_dot_neon(int32x4_t acc, int8x16_t a, int8x16_t w) {
#ifdef __ARM_FEATURE_DOTPROD
  return vdotq_s32(acc, a, w);
#else
  return vpadalq_s16(acc, vpaddq_s16(vmull_s8(vget_low_s8(a), vget_low_s8(w)), vmull_high_s8(a, w)));
#endif
}

static inline __attribute__((always_inline)) void ff_i8_tile_m_neon(const int M, int n, int quads,
                                                                   const unsigned char *A, size_t lda,
                                                                   const unsigned char *panel, const float *sx,
                                                                   const float *b, float *y, size_t ldy, int flags) {
  int32x4_t c[FF_NEON_I8_MR][4];
  const signed char *q = (const signed char *)(panel + 8 * FF_NEON_NR);
  const float *sw = (const float *)(const void *)panel;
  FF_NEON_UNROLL
  for (int i = 0; i < M; i++) c[i][0] = c[i][1] = c[i][2] = c[i][3] = vdupq_n_s32(0);
  for (int k = 0; k < quads; k++) {
    const signed char *w = q + (size_t)k * 64;
    const int8x16_t w0 = vld1q_s8(w), w1 = vld1q_s8(w + 16), w2 = vld1q_s8(w + 32), w3 = vld1q_s8(w + 48);
    FF_NEON_UNROLL
    for (int i = 0; i < M; i++) {
      uint32_t u;
      memcpy(&u, A + (size_t)i * lda + 4 * (size_t)k, 4);
      const int8x16_t x = vreinterpretq_s8_u32(vdupq_n_u32(u ^ 0x80808080u)); /* the signed q */
      c[i][0] = ff_i8_dot_neon(c[i][0], x, w0);
      c[i][1] = ff_i8_dot_neon(c[i][1], x, w1);
      c[i][2] = ff_i8_dot_neon(c[i][2], x, w2);
      c[i][3] = ff_i8_dot_neon(c[i][3], x, w3);
    }
  }
  FF_NEON_UNROLL
  for (int i = 0; i < M; i++) {
    int32_t row[FF_NEON_NR];
    float *yr = y + (size_t)i * ldy;
    for (int v = 0; v < 4; v++) vst1q_s32(row + 4 * v, c[i][v]);
    for (int j = 0; j < n; j++) {
      float r = (float)row[j] * (sx[i] * sw[j]) + (b ? b[j] : 0.0f);
      if (flags & FF_ACC) r += yr[j];
      yr[j] = (flags & FF_RELU) && r < 0.0f ? 0.0f : r;
    }
  }
}

static void ff_i8_tile_neon(int m, int n, int quads, const unsigned char *A, size_t lda, const unsigned char *panel,
                            const float *sx, const float *b, float *y, size_t ldy, int flags) {
#define FF_NEON_I8_CALL(M) ff_i8_tile_m_neon(M, n, quads, A, lda, panel, sx, b, y, ldy, flags)
  FF_NEON_ROWS_OF(m, FF_NEON_I8_CALL);
}

/* @part bf16c: tile */
/* bf16 compute (bf16.c) on NEON without BFMMLA / BFDOT: a pair of bfloat16 is
 * a 32-bit word, its high half a float when the low bits are masked off and
 * its low half one when shifted up 16, so each pair is two FMLAs by a scalar,
 * the odd element first as bf16.c orders them (the products are exact: the
 * same bits as its plain loops).  Four rows a tile. */
#define FF_NEON_B16_MR 4
static void ff_b16_tile_neon(int m, int n, int pairs, const uint32_t *A, size_t lda, const uint32_t *panel,
                             const float *b, float *y, size_t ldy, int flags);
#define FF_B16(name) ff_##name##_neon
#define FF_B16_MR FF_NEON_B16_MR
#define FF_B16_NR FF_NEON_NR
#define FF_B16_TILE ff_b16_tile_neon
#include "bf16.c"

static inline __attribute__((always_inline)) void ff_b16_tile_m_neon(const int M, int n, int pairs, const uint32_t *A,
                                                                    size_t lda, const uint32_t *panel, const float *b,
                                                                    float *y, size_t ldy, int flags) {
  float32x4_t c[FF_NEON_B16_MR][4];
  const uint32x4_t high = vdupq_n_u32(0xFFFF0000u);
  FF_NEON_UNROLL
  for (int i = 0; i < M; i++) c[i][0] = c[i][1] = c[i][2] = c[i][3] = vdupq_n_f32(0.0f);
  for (int k = 0; k < pairs; k++) {
    float32x4_t odd[4], even[4];
    FF_NEON_UNROLL
    for (int v = 0; v < 4; v++) {
      const uint32x4_t w = vld1q_u32(panel + (size_t)k * FF_NEON_NR + 4 * v);
      odd[v] = vreinterpretq_f32_u32(vandq_u32(w, high));
      even[v] = vreinterpretq_f32_u32(vshlq_n_u32(w, 16));
    }
    FF_NEON_UNROLL
    for (int i = 0; i < M; i++) {
      const uint32_t a = A[(size_t)i * lda + (size_t)k], a1 = a & 0xFFFF0000u, a0 = a << 16;
      float x1, x0;
      memcpy(&x1, &a1, 4);
      memcpy(&x0, &a0, 4);
      FF_NEON_UNROLL
      for (int v = 0; v < 4; v++) c[i][v] = vfmaq_n_f32(vfmaq_n_f32(c[i][v], odd[v], x1), even[v], x0);
    }
  }
  FF_NEON_UNROLL
  for (int i = 0; i < M; i++) {
    float row[FF_NEON_NR], *yr = y + (size_t)i * ldy;
    for (int v = 0; v < 4; v++) vst1q_f32(row + 4 * v, c[i][v]);
    for (int j = 0; j < n; j++) {
      float r = row[j] + (b ? b[j] : 0.0f);
      if (flags & FF_ACC) r += yr[j];
      yr[j] = (flags & FF_RELU) && r < 0.0f ? 0.0f : r;
    }
  }
}

static void ff_b16_tile_neon(int m, int n, int pairs, const uint32_t *A, size_t lda, const uint32_t *panel,
                             const float *b, float *y, size_t ldy, int flags) {
#define FF_NEON_B16_CALL(M) ff_b16_tile_m_neon(M, n, pairs, A, lda, panel, b, y, ldy, flags)
  FF_NEON_ROWS_OF(m, FF_NEON_B16_CALL);
}

/* @part plain */
/* norms and activations (plain.c) */
#define FF_PLAIN(name) ff_##name##_neon
#define FF_PLAIN_SELECT 1 /* its selects as bit masks, which the compiler vectorises */
#include "plain.c"

/* @part sdpa: matmul */
/* scaled dot-product attention on these kernels (sdpa.c) */
#define FF_SDPA ff_sdpa_neon
#define FF_SDPA_MR FF_NEON_MR
#define FF_SDPA_MATMUL ff_matmul_neon
#include "sdpa.c"

/* @part train_isa */
/* the kernels of generated training code (train.c) on these */
#define FF_TRAIN(name) ff_##name##_neon
#define FF_TRAIN_NR FF_NEON_NR
#include "train.c"
