/* gemm_avx512.c - the AVX-512 matrix kernels: an 8 x 32 register tile (16 zmm
 * accumulators, two 16-float loads of B and eight broadcasts of A per step of
 * k, 16 FMAs), and the drivers built on it.  Weights are packed in panels of
 * 32 columns: panel p holds W^T[:, 32p .. 32p+31] as IN rows of 32 floats,
 * zero-padded past OUT, 64-byte aligned.
 *
 * The same text is compiled into the fixformer host (for the libtcc engine,
 * which cannot emit SIMD) and copied into generated code for the cc engine
 * and `emit --isa avx512`; FF_KERNEL is `static` there.  Contract (every ISA):
 *   ff_matmul_*  C [m, n] = alpha A [m, k] B [k, n] + bias [n] (+ C when flags
 *                has FF_ACC), then max(0, .) with FF_RELU; A, B and C rows
 *                every lda, ldb, ldc floats; bias may be NULL.
 *   ff_linear_*  y [T, OUT] = x [T, IN] W + b (flags as above, and FF_FETCH:
 *                y is cold, fetch ahead), W packed in panels (above); only
 *                columns j0 .. j1-1 (j0 a multiple of the panel width), so
 *                that threads can share the panels; ff_linear_ld_* with x's
 *                and y's row strides.
 * Sums over k run in k order per output, like the reference. */
#if !defined(__AVX512F__) || !defined(__FMA__)
#error "these kernels need AVX-512F and FMA: build with -mavx512f -mfma (or -march=native), or emit with --isa generic"
#endif
#include <immintrin.h>
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
#define FF_AVX512_MR 8
#define FF_AVX512_NR 32
#if defined(FF_TABLE_MR) && (FF_TABLE_MR != FF_AVX512_MR || FF_TABLE_NR != FF_AVX512_NR) /* the host build */
#error "kernels/isas.h: the avx512 row's MR, NR are not this register tile"
#endif
#define FF_AVX512_KC 256 /* k per pass over a panel: 32 KB of B in L1 (docs/performance.md, the k block) */
/* Before each loop over a tile's rows: their accumulators are registers only
 * once the loop is unrolled, which GCC does by itself at -O3 but not at -O2
 * (there the tile kept them on the stack: 2.5x slower in f32 and bf16) */
#define FF_AVX512_ROWS _Pragma("GCC unroll 8")

/* @part tile */
/* 16 bf16 weights as floats (the bits << 16), and 16 int8 weights times
 * their columns' scales: the exact values of quant.c's layouts */
static inline __m512 ff_bf16x16_avx512(const uint16_t *w) {
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)w)), 16));
}
static inline __m512 ff_q8x16_avx512(const signed char *q, __m512 scale) {
  return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)q))),
                       scale);
}

/* The tile: M (a constant after inlining) <= 8 rows, n <= 32 columns; it
 * prefetches from pf on the full-width path.  Q (a constant): 0, B is f32;
 * on the full-width path 1 and 2 (quant.c's first row tile of a k block)
 * read B's rows converted from src, bf16 rows or int8 groups (quant.c's
 * layouts), and store them into B [k, 32] for the next row tiles: the
 * conversion runs beside the tile's multiply-adds instead of a pass of its own. */
static inline __attribute__((always_inline)) void ff_tile_avx512(const int M, int n, int k, const float *A, int lda,
                                                                const float *B, int ldb, float *C, int ldc,
                                                                const float *bias, float alpha, int flags,
                                                                uintptr_t pf, int pfs, const int Q,
                                                                const unsigned char *src, const int TA) {
  /* A's element (row i, step p): TA (a constant) 1 reads A transposed, A [k, M] with rows every lda */
#define FF_A_AT(i, p) (TA ? A[(size_t)(p) * lda + (size_t)(i)] : A[(size_t)(i) * lda + (size_t)(p)])
  __m512 c0[FF_AVX512_MR], c1[FF_AVX512_MR];
  const __mmask16 m0 = (__mmask16)(n >= 16 ? 0xFFFFu : (1u << n) - 1u);
  const __mmask16 m1 = (__mmask16)(n >= 32 ? 0xFFFFu : n > 16 ? (1u << (n - 16)) - 1u : 0u);
  FF_AVX512_ROWS
  for (int i = 0; i < M; i++) c0[i] = c1[i] = _mm512_setzero_ps();
  if (n == 32) {
    /* Two steps of k per line of the next slice of W fetched (pf, pfs bytes
     * further per step; linear's share, see ff_linear_avx512). */
    int p = 0;
    __m512 s0 = _mm512_setzero_ps(), s1 = s0; /* Q 2: the scales of the group of p */
#define FF_STEP(p)                                                                                                      \
  do {                                                                                                                 \
    __m512 b0, b1;                                                                                                     \
    if (Q == 0) {                                                                                                      \
      b0 = _mm512_loadu_ps(B + (size_t)(p) * ldb), b1 = _mm512_loadu_ps(B + (size_t)(p) * ldb + 16);                 \
    } else {                                                                                                           \
      if (Q == 1) {                                                                                                    \
        const uint16_t *w_ = (const uint16_t *)(const void *)src + (size_t)(p) * FF_AVX512_NR;                         \
        b0 = ff_bf16x16_avx512(w_), b1 = ff_bf16x16_avx512(w_ + 16);                                                   \
      } else { /* group (p) / 32: NR scales, then its row (p) % 32 of NR int8 */                                       \
        const signed char *q_ = (const signed char *)(src + (size_t)((p) / 32) * 36 * FF_AVX512_NR +                   \
                                                      4 * FF_AVX512_NR + ((p) % 32) * FF_AVX512_NR);                   \
        b0 = ff_q8x16_avx512(q_, s0), b1 = ff_q8x16_avx512(q_ + 16, s1);                                               \
      }                                                                                                                \
      _mm512_storeu_ps((float *)B + (size_t)(p) * ldb, b0), _mm512_storeu_ps((float *)B + (size_t)(p) * ldb + 16, b1); \
    }                                                                                                                  \
    FF_AVX512_ROWS                                                                                                     \
    for (int i = 0; i < M; i++) {                                                                                      \
      const __m512 a = _mm512_set1_ps(FF_A_AT(i, p));                                                                  \
      c0[i] = _mm512_fmadd_ps(a, b0, c0[i]);                                                                           \
      c1[i] = _mm512_fmadd_ps(a, b1, c1[i]);                                                                           \
    }                                                                                                                  \
  } while (0)
#define FF_SCALES(p)                                                                                                    \
  if (Q == 2 && (p) % 32 == 0) {                                                                                       \
    const float *sc_ = (const float *)(const void *)(src + (size_t)((p) / 32) * 36 * FF_AVX512_NR);                    \
    s0 = _mm512_loadu_ps(sc_), s1 = _mm512_loadu_ps(sc_ + 16);                                                         \
  }
    for (; p + 2 <= k; p += 2) {
      _mm_prefetch((const char *)(pf + (uintptr_t)pfs * p), _MM_HINT_T0);
      FF_SCALES(p)
      FF_STEP(p);
      FF_STEP(p + 1);
    }
    if (p < k) {
      FF_SCALES(p)
      FF_STEP(p);
    }
#undef FF_SCALES
#undef FF_STEP
  } else if (n > 16) { /* (Q 0 only) */
    for (int p = 0; p < k; p++) {
      const __m512 b0 = _mm512_loadu_ps(B + (size_t)p * ldb), b1 = _mm512_maskz_loadu_ps(m1, B + (size_t)p * ldb + 16);
      FF_AVX512_ROWS
      for (int i = 0; i < M; i++) {
        const __m512 a = _mm512_set1_ps(FF_A_AT(i, p));
        c0[i] = _mm512_fmadd_ps(a, b0, c0[i]);
        c1[i] = _mm512_fmadd_ps(a, b1, c1[i]);
      }
    }
  } else { /* one vector of columns */
    for (int p = 0; p < k; p++) {
      const __m512 b0 = _mm512_maskz_loadu_ps(m0, B + (size_t)p * ldb);
      FF_AVX512_ROWS
      for (int i = 0; i < M; i++) c0[i] = _mm512_fmadd_ps(_mm512_set1_ps(FF_A_AT(i, p)), b0, c0[i]);
    }
  }
  const __m512 va = _mm512_set1_ps(alpha), zero = _mm512_setzero_ps();
  const __m512 bias0 = bias ? _mm512_maskz_loadu_ps(m0, bias) : zero;
  const __m512 bias1 = bias && n > 16 ? _mm512_maskz_loadu_ps(m1, bias + 16) : zero;
  FF_AVX512_ROWS
  for (int i = 0; i < M; i++) {
    float *c = C + (size_t)i * ldc;
    __m512 r0 = _mm512_fmadd_ps(va, c0[i], bias0), r1 = _mm512_fmadd_ps(va, c1[i], bias1);
    if (flags & FF_ACC) {
      r0 = _mm512_add_ps(r0, _mm512_maskz_loadu_ps(m0, c));
      if (n > 16) r1 = _mm512_add_ps(r1, _mm512_maskz_loadu_ps(m1, c + 16));
    }
    if (flags & FF_RELU) { /* max gives its second operand when either is NaN: NaN stays NaN, as in PyTorch */
      r0 = _mm512_max_ps(zero, r0);
      r1 = _mm512_max_ps(zero, r1);
    }
    _mm512_mask_storeu_ps(c, m0, r0);
    if (n > 16) _mm512_mask_storeu_ps(c + 16, m1, r1);
  }
#undef FF_A_AT
}

/* one tile of m <= 8 rows: the row count becomes a constant (TA 1: A transposed, A [k, m] with
 * rows every lda, ff_linear_ta's: dW = dY^T X reads dY itself) */
#define FF_AVX512_TILE_ROWS(name, TA)                                                                                  \
  static void name(int m, int n, int k, const float *A, int lda, const float *B, int ldb, float *C, int ldc,           \
                   const float *bias, float alpha, int flags, uintptr_t pf, int pfs) {                                 \
    switch (m) {                                                                                                       \
    case 8: ff_tile_avx512(8, n, k, A, lda, B, ldb, C, ldc, bias, alpha, flags, pf, pfs, 0, NULL, TA); break;          \
    case 7: ff_tile_avx512(7, n, k, A, lda, B, ldb, C, ldc, bias, alpha, flags, pf, pfs, 0, NULL, TA); break;          \
    case 6: ff_tile_avx512(6, n, k, A, lda, B, ldb, C, ldc, bias, alpha, flags, pf, pfs, 0, NULL, TA); break;          \
    case 5: ff_tile_avx512(5, n, k, A, lda, B, ldb, C, ldc, bias, alpha, flags, pf, pfs, 0, NULL, TA); break;          \
    case 4: ff_tile_avx512(4, n, k, A, lda, B, ldb, C, ldc, bias, alpha, flags, pf, pfs, 0, NULL, TA); break;          \
    case 3: ff_tile_avx512(3, n, k, A, lda, B, ldb, C, ldc, bias, alpha, flags, pf, pfs, 0, NULL, TA); break;          \
    case 2: ff_tile_avx512(2, n, k, A, lda, B, ldb, C, ldc, bias, alpha, flags, pf, pfs, 0, NULL, TA); break;          \
    default: ff_tile_avx512(1, n, k, A, lda, B, ldb, C, ldc, bias, alpha, flags, pf, pfs, 0, NULL, TA); break;         \
    }                                                                                                                  \
  }
FF_AVX512_TILE_ROWS(ff_tile_rows_avx512, 0)

/* @part linear_ta: tile */
FF_AVX512_TILE_ROWS(ff_tile_rows_ta_avx512, 1)
#define FF_LIN_TILE_TA ff_tile_rows_ta_avx512

/* @part tile */

/* matmul and linear on these kernels (drivers.c) */
#define FF_MATMUL ff_matmul_avx512
#define FF_LINEAR ff_linear_avx512
#define FF_LINEAR_LD ff_linear_ld_avx512
#define FF_LINEAR_TA ff_linear_ta_avx512
#define FF_LIN_MR FF_AVX512_MR
#define FF_LIN_NR FF_AVX512_NR
#define FF_LIN_KC FF_AVX512_KC
#define FF_LIN_TILE ff_tile_rows_avx512
#include "drivers.c"

/* @part quant: tile */
/* bf16 and int8 weights (quant.c): the prefill's tile is the one above, on
 * blocks converted 16 floats a vector (the exact values: bits << 16, and
 * (float)q * scale) */
static inline void ff_vdequant_bf16_avx512(const uint16_t *w, int n, float *buf) { /* n: a multiple of 16 */
  for (int i = 0; i < n; i += 16) _mm512_storeu_ps(buf + i, ff_bf16x16_avx512(w + i));
}
static inline void ff_vdequant_q8_avx512(const signed char *q, const float *scale, int rows, float *buf) {
  const __m512 s0 = _mm512_loadu_ps(scale), s1 = _mm512_loadu_ps(scale + 16); /* a group's 32 columns */
  for (int r = 0; r < rows; r++) {
    _mm512_storeu_ps(buf + 32 * r, ff_q8x16_avx512(q + 32 * r, s0));
    _mm512_storeu_ps(buf + 32 * r + 16, ff_q8x16_avx512(q + 32 * r + 16, s1));
  }
}
/* quant.c's first row tile of a k block: 8 rows, a whole panel, B dequantized
 * from src (dtype 0 bf16, 1 int8) into buf as it goes */
static void ff_tile_first_avx512(int dtype, int k, const float *A, int lda, const unsigned char *src, float *buf,
                                 float *C, int ldc, const float *bias, int flags, uintptr_t pf, int pfs) {
  if (dtype)
    ff_tile_avx512(FF_AVX512_MR, 32, k, A, lda, buf, 32, C, ldc, bias, 1.0f, flags, pf, pfs, 2, src, 0);
  else
    ff_tile_avx512(FF_AVX512_MR, 32, k, A, lda, buf, 32, C, ldc, bias, 1.0f, flags, pf, pfs, 1, src, 0);
}
#define FF_QUANT(name) ff_##name##_avx512
#define FF_QUANT_TILE_FIRST ff_tile_first_avx512
#define FF_GEMV_PANELS 4
#define FF_DEQUANT_BF16 ff_vdequant_bf16_avx512
#define FF_DEQUANT_Q8 ff_vdequant_q8_avx512
#include "quant.c"

/* quant.c's GEMVs: P (a constant after inlining) panels of 32 columns at
 * once, each column's sum in k order, 2 P independent FMA chains.  bf16: a
 * row of a panel is one 64-byte line, 16 lanes of two weights; the odd
 * column's weight is its lane with the low half cleared, the even one's the
 * lane shifted left by 16 (no shuffle); the lanes are put back in column
 * order at the end. */
static inline __attribute__((always_inline)) void ff_gemv_bf16_p_avx512(const int P, const float *x, int IN,
                                                                       const unsigned char *W, size_t pb,
                                                                       float *acc) {
  __m512 e[FF_GEMV_PANELS], o[FF_GEMV_PANELS];
  const __m512i high = _mm512_set1_epi32((int)0xFFFF0000u);
  for (int p = 0; p < P; p++) e[p] = o[p] = _mm512_setzero_ps();
  for (int k = 0; k < IN; k++) {
    const __m512 xk = _mm512_set1_ps(x[k]);
    for (int p = 0; p < P; p++) {
      const __m512i h = _mm512_loadu_si512((const void *)(W + pb * p + (size_t)k * 64));
      e[p] = _mm512_fmadd_ps(xk, _mm512_castsi512_ps(_mm512_slli_epi32(h, 16)), e[p]);
      o[p] = _mm512_fmadd_ps(xk, _mm512_castsi512_ps(_mm512_and_si512(h, high)), o[p]);
    }
  }
  const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  for (int p = 0; p < P; p++) {
    _mm512_storeu_ps(acc + 32 * p, _mm512_permutex2var_ps(e[p], lo, o[p]));
    _mm512_storeu_ps(acc + 32 * p + 16, _mm512_permutex2var_ps(e[p], hi, o[p]));
  }
}

/* int8: a row of a panel is 32 bytes, widened to two vectors of 16 floats;
 * a group's sums x q (in k order) are then scaled into the column's sum (in
 * group order): one multiply per group instead of per weight, which decides
 * whether int8 keeps up with the memory (docs/performance.md) */
static inline __attribute__((always_inline)) void ff_gemv_q8_p_avx512(const int P, const float *x, int IN,
                                                                     const unsigned char *W, size_t pb, float *acc) {
  __m512 a0[FF_GEMV_PANELS], a1[FF_GEMV_PANELS], g0[FF_GEMV_PANELS], g1[FF_GEMV_PANELS];
  for (int p = 0; p < P; p++) a0[p] = a1[p] = _mm512_setzero_ps();
  for (int k0 = 0; k0 < IN; k0 += 32) {
    const unsigned char *g = W + (size_t)(k0 / 32) * 36 * 32;
    const int rows = IN - k0 < 32 ? IN - k0 : 32;
    for (int p = 0; p < P; p++) g0[p] = g1[p] = _mm512_setzero_ps();
    for (int r = 0; r < rows; r++) {
      const __m512 xk = _mm512_set1_ps(x[k0 + r]);
      for (int p = 0; p < P; p++) {
        const __m128i *q = (const __m128i *)(const void *)(g + pb * p + 128 + 32 * r);
        g0[p] = _mm512_fmadd_ps(xk, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q))), g0[p]);
        g1[p] = _mm512_fmadd_ps(xk, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q + 1))), g1[p]);
      }
    }
    for (int p = 0; p < P; p++) {
      const float *scale = (const float *)(const void *)(g + pb * p);
      a0[p] = _mm512_fmadd_ps(g0[p], _mm512_loadu_ps(scale), a0[p]);
      a1[p] = _mm512_fmadd_ps(g1[p], _mm512_loadu_ps(scale + 16), a1[p]);
    }
  }
  for (int p = 0; p < P; p++) _mm512_storeu_ps(acc + 32 * p, a0[p]), _mm512_storeu_ps(acc + 32 * p + 16, a1[p]);
}

/* @part rowstore */
/* the ends of the int8 and bf16 tiles: the masks of their n <= 32 columns and
 * those columns' biases (0 without b); then per row of 32 columns, y (+)= r,
 * max(0, .) (NaN stays NaN), the columns of m0, m1 stored */
static inline __attribute__((always_inline)) void ff_cols_avx512(int n, const float *b, __mmask16 *m0, __mmask16 *m1,
                                                                __m512 *bias0, __m512 *bias1) {
  *m0 = (__mmask16)(n >= 16 ? 0xFFFFu : (1u << n) - 1u);
  *m1 = (__mmask16)(n >= 32 ? 0xFFFFu : n > 16 ? (1u << (n - 16)) - 1u : 0u);
  *bias0 = b ? _mm512_maskz_loadu_ps(*m0, b) : _mm512_setzero_ps();
  *bias1 = b ? _mm512_maskz_loadu_ps(*m1, b + 16) : _mm512_setzero_ps();
}

static inline __attribute__((always_inline)) void ff_store_row_avx512(float *yr, __m512 r0, __m512 r1, __mmask16 m0,
                                                                     __mmask16 m1, int flags) {
  if (flags & FF_ACC) {
    r0 = _mm512_add_ps(r0, _mm512_maskz_loadu_ps(m0, yr));
    r1 = _mm512_add_ps(r1, _mm512_maskz_loadu_ps(m1, yr + 16));
  }
  if (flags & FF_RELU) r0 = _mm512_max_ps(_mm512_setzero_ps(), r0), r1 = _mm512_max_ps(_mm512_setzero_ps(), r1);
  _mm512_mask_storeu_ps(yr, m0, r0);
  _mm512_mask_storeu_ps(yr + 16, m1, r1);
}

/* @part int8: rowstore */
/* int8 compute (int8.c): AVX-512 VNNI's VPDPBUSD sums four u8 x s8 products
 * into each of 16 int32 lanes, 64 multiply-adds an instruction against 16
 * f32 FMAs.  The tile takes 8 rows and a panel of 32 columns, as the f32
 * one; CPUs with AVX-512 but not VNNI (Skylake-SP) take int8.c's plain tile
 * (the same values).  The function carries its own target, so that code
 * built with the row's flags (-mavx512f -mfma) builds it too. */
static void ff_i8_tile_avx512(int m, int n, int quads, const unsigned char *A, size_t lda, const unsigned char *panel,
                              const float *sx, const float *b, float *y, size_t ldy, int flags);
/* a row quantized 16 floats a vector: the max, then x 127 / max rounded by
 * VCVTPS2DQ (the default rounding, to nearest even: int8.c's round_even) */
static inline float ff_i8_quantize_row_avx512(const float *x, int IN, unsigned char *q) {
  __m512 vmax = _mm512_setzero_ps();
  __mmask16 bad = 0;
  const __m512 big = _mm512_set1_ps(3.402823466e+38f);
  for (int i = 0; i < IN; i += 16) {
    const __mmask16 m = (__mmask16)(IN - i >= 16 ? 0xFFFFu : (1u << (IN - i)) - 1u);
    const __m512 a = _mm512_abs_ps(_mm512_maskz_loadu_ps(m, x + i));
    bad |= _mm512_cmp_ps_mask(a, big, _CMP_NLE_UQ); /* NaN or infinity */
    vmax = _mm512_max_ps(vmax, a);
  }
  const float amax = _mm512_reduce_max_ps(vmax);
  const int IN4 = (IN + 3) / 4 * 4;
  if (bad) { /* q 0 (int8.c) */
    memset(q, 128, (size_t)IN4);
    return 0.0f / 0.0f;
  }
  const __m512 inv = _mm512_set1_ps(amax >= 1e-30f ? 127.0f / amax : 0.0f);
  const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127), off = _mm512_set1_epi32(128);
  for (int i = 0; i < IN4; i += 16) {
    const __mmask16 m = (__mmask16)(IN - i >= 16 ? 0xFFFFu : IN > i ? (1u << (IN - i)) - 1u : 0u);
    const __mmask16 w = (__mmask16)(IN4 - i >= 16 ? 0xFFFFu : (1u << (IN4 - i)) - 1u);
    __m512i r = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), inv));
    r = _mm512_add_epi32(_mm512_min_epi32(hi, _mm512_max_epi32(lo, r)), off);
    _mm512_mask_cvtepi32_storeu_epi8(q + i, w, r);
  }
  return amax >= 1e-30f ? amax / 127.0f : 0.0f;
}
#define FF_I8_QUANTIZE_ROW ff_i8_quantize_row_avx512
#define FF_I8(name) ff_##name##_avx512
#define FF_I8_MR FF_AVX512_MR
#define FF_I8_NR FF_AVX512_NR
#define FF_I8_TILE ff_i8_tile_avx512
#define FF_I8_PLAIN /* (CPUs without VNNI) */
#include "int8.c"

static inline __attribute__((always_inline, target("avx512bw,avx512vnni"))) void
ff_i8_tile_vnni_avx512(const int M, int n, int quads, const unsigned char *A, size_t lda, const unsigned char *panel,
                       const float *sx, const float *b, float *y, size_t ldy, int flags) {
  __m512i c0[FF_AVX512_MR], c1[FF_AVX512_MR];
  const unsigned char *q = panel + 8 * FF_AVX512_NR;
  FF_AVX512_ROWS
  for (int i = 0; i < M; i++) c0[i] = c1[i] = _mm512_setzero_si512();
  for (int k = 0; k < quads; k++) {
    const __m512i b0 = _mm512_loadu_si512((const void *)(q + (size_t)k * 128));
    const __m512i b1 = _mm512_loadu_si512((const void *)(q + (size_t)k * 128 + 64));
    FF_AVX512_ROWS
    for (int i = 0; i < M; i++) {
      int32_t a;
      memcpy(&a, A + (size_t)i * lda + 4 * (size_t)k, 4);
      const __m512i av = _mm512_set1_epi32(a);
      c0[i] = _mm512_dpbusd_epi32(c0[i], av, b0);
      c1[i] = _mm512_dpbusd_epi32(c1[i], av, b1);
    }
  }
  __mmask16 m0, m1;
  __m512 bias0, bias1;
  ff_cols_avx512(n, b, &m0, &m1, &bias0, &bias1);
  const __m512 sw0 = _mm512_loadu_ps((const float *)(const void *)panel);
  const __m512 sw1 = _mm512_loadu_ps((const float *)(const void *)panel + 16);
  const __m512i s0 = _mm512_slli_epi32(_mm512_loadu_si512((const void *)(panel + 128)), 7); /* 128 sum */
  const __m512i s1 = _mm512_slli_epi32(_mm512_loadu_si512((const void *)(panel + 192)), 7);
  FF_AVX512_ROWS
  for (int i = 0; i < M; i++) {
    const __m512 s = _mm512_set1_ps(sx[i]);
    ff_store_row_avx512(y + (size_t)i * ldy,
                        _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(c0[i], s0)), _mm512_mul_ps(s, sw0), bias0),
                        _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(c1[i], s1)), _mm512_mul_ps(s, sw1), bias1),
                        m0, m1, flags);
  }
}

static __attribute__((target("avx512bw,avx512vnni"))) void
ff_i8_tile_rows_avx512(int m, int n, int quads, const unsigned char *A, size_t lda, const unsigned char *panel,
                       const float *sx, const float *b, float *y, size_t ldy, int flags) {
#define FF_I8_ROWS(M) ff_i8_tile_vnni_avx512(M, n, quads, A, lda, panel, sx, b, y, ldy, flags); break;
  switch (m) {
  case 8: FF_I8_ROWS(8)
  case 7: FF_I8_ROWS(7)
  case 6: FF_I8_ROWS(6)
  case 5: FF_I8_ROWS(5)
  case 4: FF_I8_ROWS(4)
  case 3: FF_I8_ROWS(3)
  case 2: FF_I8_ROWS(2)
  default: FF_I8_ROWS(1)
  }
#undef FF_I8_ROWS
}

static void ff_i8_tile_avx512(int m, int n, int quads, const unsigned char *A, size_t lda, const unsigned char *panel,
                              const float *sx, const float *b, float *y, size_t ldy, int flags) {
  if (__builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw"))
    ff_i8_tile_rows_avx512(m, n, quads, A, lda, panel, sx, b, y, ldy, flags);
  else
    ff_i8_tile_plain_avx512(m, n, quads, A, lda, panel, sx, b, y, ldy, flags);
}

/* @part bf16c: rowstore */
/* bf16 compute (bf16.c): AVX-512 BF16's VDPBF16PS adds the products of 16
 * pairs of bfloat16 to 16 floats, 32 multiply-adds an instruction against 16
 * f32 FMAs.  The tile takes 8 rows and a panel of 32 columns; CPUs without
 * BF16 take bf16.c's plain tile (the same values but for subnormals). */
static void ff_b16_tile_avx512(int m, int n, int pairs, const uint32_t *A, size_t lda, const uint32_t *panel,
                               const float *b, float *y, size_t ldy, int flags);
/* a row rounded 16 floats a vector, in integers: bf16.c's b16_of */
static inline void ff_b16_round_row_avx512(const float *x, int IN, uint16_t *q) {
  const __m512i half = _mm512_set1_epi32(0x7FFF), one = _mm512_set1_epi32(1), abs = _mm512_set1_epi32(0x7FFFFFFF);
  const __m512i inf = _mm512_set1_epi32(0x7F800000), quiet = _mm512_set1_epi32(0x40);
  const int IN2 = (IN + 1) / 2 * 2;
  for (int i = 0; i < IN2; i += 16) {
    const __mmask16 m = (__mmask16)(IN - i >= 16 ? 0xFFFFu : IN > i ? (1u << (IN - i)) - 1u : 0u);
    const __mmask16 w = (__mmask16)(IN2 - i >= 16 ? 0xFFFFu : (1u << (IN2 - i)) - 1u);
    const __m512i u = _mm512_castps_si512(_mm512_maskz_loadu_ps(m, x + i)), high = _mm512_srli_epi32(u, 16);
    const __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, abs), inf);
    __m512i h = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(half, _mm512_and_si512(high, one))), 16);
    h = _mm512_mask_or_epi32(h, nan, high, quiet);
    _mm512_mask_cvtepi32_storeu_epi16(q + i, w, h);
  }
}
#define FF_B16_ROW ff_b16_round_row_avx512
#define FF_B16(name) ff_##name##_avx512
#define FF_B16_MR FF_AVX512_MR
#define FF_B16_NR FF_AVX512_NR
#define FF_B16_TILE ff_b16_tile_avx512
#define FF_B16_PLAIN /* (CPUs without BF16) */
#include "bf16.c"

static inline __attribute__((always_inline, target("avx512bf16"))) void
ff_b16_tile_dp_avx512(const int M, int n, int pairs, const uint32_t *A, size_t lda, const uint32_t *panel,
                      const float *b, float *y, size_t ldy, int flags) {
  __m512 c0[FF_AVX512_MR], c1[FF_AVX512_MR];
  FF_AVX512_ROWS
  for (int i = 0; i < M; i++) c0[i] = c1[i] = _mm512_setzero_ps();
  for (int k = 0; k < pairs; k++) {
    const __m512i b0 = _mm512_loadu_si512((const void *)(panel + (size_t)k * 32));
    const __m512i b1 = _mm512_loadu_si512((const void *)(panel + (size_t)k * 32 + 16));
    FF_AVX512_ROWS
    for (int i = 0; i < M; i++) {
      const __m512i av = _mm512_set1_epi32((int)A[(size_t)i * lda + (size_t)k]);
      c0[i] = _mm512_dpbf16_ps(c0[i], (__m512bh)av, (__m512bh)b0);
      c1[i] = _mm512_dpbf16_ps(c1[i], (__m512bh)av, (__m512bh)b1);
    }
  }
  __mmask16 m0, m1;
  __m512 bias0, bias1;
  ff_cols_avx512(n, b, &m0, &m1, &bias0, &bias1);
  FF_AVX512_ROWS
  for (int i = 0; i < M; i++)
    ff_store_row_avx512(y + (size_t)i * ldy, _mm512_add_ps(c0[i], bias0), _mm512_add_ps(c1[i], bias1), m0, m1, flags);
}

static __attribute__((target("avx512bf16"))) void
ff_b16_tile_rows_avx512(int m, int n, int pairs, const uint32_t *A, size_t lda, const uint32_t *panel, const float *b,
                        float *y, size_t ldy, int flags) {
#define FF_B16_ROWS(M) ff_b16_tile_dp_avx512(M, n, pairs, A, lda, panel, b, y, ldy, flags); break;
  switch (m) {
  case 8: FF_B16_ROWS(8)
  case 7: FF_B16_ROWS(7)
  case 6: FF_B16_ROWS(6)
  case 5: FF_B16_ROWS(5)
  case 4: FF_B16_ROWS(4)
  case 3: FF_B16_ROWS(3)
  case 2: FF_B16_ROWS(2)
  default: FF_B16_ROWS(1)
  }
#undef FF_B16_ROWS
}

static void ff_b16_tile_avx512(int m, int n, int pairs, const uint32_t *A, size_t lda, const uint32_t *panel,
                               const float *b, float *y, size_t ldy, int flags) {
  if (__builtin_cpu_supports("avx512bf16"))
    ff_b16_tile_rows_avx512(m, n, pairs, A, lda, panel, b, y, ldy, flags);
  else
    ff_b16_tile_plain_avx512(m, n, pairs, A, lda, panel, b, y, ldy, flags);
}

/* @part sdpa: matmul */
/* e^x for x <= 0 in 16 lanes: x = n ln2 + r, |r| <= ln2/2, e^r by a degree-6
 * polynomial (Cephes expf), times 2^n; about 1 ulp; e^-inf and below -87.3: 0;
 * NaN: NaN (max(lo, x) keeps it), so that a NaN score makes its softmax row NaN. */
static inline __m512 ff_exp_avx512(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-87.33654f);
  const __mmask16 tiny = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
  x = _mm512_max_ps(lo, x);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_maskz_scalef_ps((__mmask16)~tiny, p, n);
}

/* the eight rows' values a[0..7] (16 lanes each) combined into their eight
 * results, returned in a[0]'s lanes 4r (row r < 4) and 4(r - 4) + 2: op (add or
 * max) pairs lanes 8, 4, 2 and then 1 apart, _mm512_reduce_*_ps's order */
#define FF_AVX512_REDUCE8(op, a)                                                                                      \
  do {                                                                                                                 \
    for (int l_ = 0; l_ < 8; l_ += 2)                                                                                  \
      a[l_ / 2] = op(_mm512_shuffle_f32x4(a[l_], a[l_ + 1], 0x44), _mm512_shuffle_f32x4(a[l_], a[l_ + 1], 0xee));       \
    for (int l_ = 0; l_ < 4; l_ += 2)                                                                                  \
      a[l_ / 2] = op(_mm512_shuffle_f32x4(a[l_], a[l_ + 1], 0x88), _mm512_shuffle_f32x4(a[l_], a[l_ + 1], 0xdd));       \
    a[0] = op(_mm512_shuffle_ps(a[0], a[1], 0x44), _mm512_shuffle_ps(a[0], a[1], 0xee));                               \
    a[0] = op(a[0], _mm512_permute_ps(a[0], 0xb1));                                                                    \
  } while (0)
#define FF_AVX512_ROW_LANE(r) ((r) < 4 ? 4 * (r) : 4 * (r)-14) /* row r's lane in FF_AVX512_REDUCE8's result */

/* softmax of rows r = 0 .. m-1 (m <= 8) of s, rows every ld floats, row r
 * over its first min(v0 + r dv, n) floats (the rest set to 0): row by row,
 * but the rows' maxima and sums reduced together (one chain of shuffles for
 * eight).  Each row's values as one row alone would have them: its max,
 * e^(x - max) summed lane by lane and the lanes in _mm512_reduce_add_ps's
 * order, times 1 / sum */
static inline void ff_softmax_rows_avx512(float *s, int ld, int m, int v0, int dv, int n) {
  int visible[8]; /* row r's keys (rows past m: none, their results unused) */
  for (int r = 0; r < 8; r++) visible[r] = r < m ? (v0 + r * dv < n ? v0 + r * dv : n) : 0;
  __m512 acc[8];
  for (int r = 0; r < 8; r++) {
    const int vis = visible[r], full = vis & ~15;
    const float *row = s + (size_t)r * ld;
    const __mmask16 tail = (__mmask16)((1u << (vis - full)) - 1u);
    __m512 vmax = _mm512_set1_ps(-3.402823466e+38f);
    for (int j = 0; j < full; j += 16) vmax = _mm512_max_ps(vmax, _mm512_loadu_ps(row + j));
    acc[r] = _mm512_mask_max_ps(vmax, tail, vmax, _mm512_maskz_loadu_ps(tail, row + full));
  }
  FF_AVX512_REDUCE8(_mm512_max_ps, acc);
  const __m512 max = acc[0];
  for (int r = 0; r < 8; r++) {
    const int vis = visible[r], full = vis & ~15;
    float *row = s + (size_t)r * ld;
    const __mmask16 tail = (__mmask16)((1u << (vis - full)) - 1u);
    const __m512 vm = _mm512_permutexvar_ps(_mm512_set1_epi32(FF_AVX512_ROW_LANE(r)), max);
    __m512 vsum = _mm512_setzero_ps();
    for (int j = 0; j < full; j += 16) {
      const __m512 e = ff_exp_avx512(_mm512_sub_ps(_mm512_loadu_ps(row + j), vm));
      _mm512_storeu_ps(row + j, e);
      vsum = _mm512_add_ps(vsum, e);
    }
    if (tail) {
      const __m512 e = _mm512_maskz_mov_ps(tail, ff_exp_avx512(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, row + full), vm)));
      _mm512_mask_storeu_ps(row + full, tail, e);
      vsum = _mm512_add_ps(vsum, e);
    }
    acc[r] = vsum;
  }
  FF_AVX512_REDUCE8(_mm512_add_ps, acc);
  const __m512 inv = _mm512_div_ps(_mm512_set1_ps(1.0f), acc[0]);
  for (int r = 0; r < m; r++) {
    const int vis = visible[r], full = vis & ~15;
    float *row = s + (size_t)r * ld;
    const __mmask16 tail = (__mmask16)((1u << (vis - full)) - 1u);
    const __m512 vi = _mm512_permutexvar_ps(_mm512_set1_epi32(FF_AVX512_ROW_LANE(r)), inv);
    for (int j = 0; j < full; j += 16) _mm512_storeu_ps(row + j, _mm512_mul_ps(_mm512_loadu_ps(row + j), vi));
    if (tail) _mm512_mask_storeu_ps(row + full, tail, _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, row + full), vi));
    for (int j = vis; j < n; j++) row[j] = 0.0f;
  }
}

/* @part plain */
/* norms and activations (plain.c) */
#define FF_PLAIN(name) ff_##name##_avx512
#define FF_PLAIN_AVX 1 /* plain.c may take 8 floats as an __m256 (immintrin.h above) */
#define FF_PLAIN_SELECT 1 /* and its selects as bit masks, which the compiler vectorises */
#define FF_PLAIN_ROWS 4 /* the norms' rows side by side (six vectors a row, of 32 registers) */
#include "plain.c"

/* @part sdpa */
/* q . k over n floats (decoding's scores): 16 lanes, the tail masked */
static inline float ff_dot_avx512(const float *q, const float *k, int n) {
  __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
  int i = 0;
  for (; i + 32 <= n; i += 32) {
    s0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), _mm512_loadu_ps(k + i), s0);
    s1 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i + 16), _mm512_loadu_ps(k + i + 16), s1);
  }
  if (i + 16 <= n) s0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), _mm512_loadu_ps(k + i), s0), i += 16;
  if (i < n) {
    const __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
    s1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + i), _mm512_maskz_loadu_ps(m, k + i), s1);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

/* y += p x over n floats (decoding's P V); whole vectors unmasked, so that
 * the next call's loads of y are forwarded from these stores */
static inline void ff_axpy_avx512(float *y, float p, const float *x, int n) {
  const __m512 vp = _mm512_set1_ps(p);
  int i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_fmadd_ps(vp, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
  if (i < n) {
    const __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(vp, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i)));
  }
}

/* 16 x 16 floats, the rows r[0..15], transposed in place: r[i] becomes
 * column (i & 12) | (i & 1) << 1 | (i & 2) >> 1.  Pairs of rows unpacked,
 * then pairs of pairs, then the 128-bit quarters twice, in 8 pairs a stage
 * written out (constant indices keep r in registers; a loop at -O2 would
 * keep it on the stack) */
#define FF_AVX512_PAIR(lo, hi, a, b)                                                                                  \
  do {                                                                                                                 \
    const __m512 l_ = lo(a, b);                                                                                        \
    b = hi(a, b), a = l_;                                                                                              \
  } while (0)
/* pair n of a stage: (i, i + d), i = n with a 0 put in at bit d */
#define FF_AVX512_PAIR_I(d, n) (((n) & ((d)-1)) | ((n) & ~((d)-1)) << 1)
#define FF_AVX512_PAIR_N(lo, hi, d, r, n) FF_AVX512_PAIR(lo, hi, r[FF_AVX512_PAIR_I(d, n)], r[FF_AVX512_PAIR_I(d, n) + (d)])
#define FF_AVX512_PAIRS8(lo, hi, d, r)                                                                                 \
  do {                                                                                                                 \
    FF_AVX512_PAIR_N(lo, hi, d, r, 0); FF_AVX512_PAIR_N(lo, hi, d, r, 1);                                              \
    FF_AVX512_PAIR_N(lo, hi, d, r, 2); FF_AVX512_PAIR_N(lo, hi, d, r, 3);                                              \
    FF_AVX512_PAIR_N(lo, hi, d, r, 4); FF_AVX512_PAIR_N(lo, hi, d, r, 5);                                              \
    FF_AVX512_PAIR_N(lo, hi, d, r, 6); FF_AVX512_PAIR_N(lo, hi, d, r, 7);                                              \
  } while (0)
#define FF_AVX512_UNPACKLO_PD(a, b) _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)))
#define FF_AVX512_UNPACKHI_PD(a, b) _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)))
#define FF_AVX512_QUARTERS_EVEN(a, b) _mm512_shuffle_f32x4(a, b, 0x88)
#define FF_AVX512_QUARTERS_ODD(a, b) _mm512_shuffle_f32x4(a, b, 0xdd)

/* K^T [dk, key_len] (rows every ld >= key_len floats) of K [key_len, dk]
 * (rows every ldk) in 16 x 16 blocks transposed in registers (the last
 * block's rows of kt stored masked to key_len) */
static void ff_sdpa_gather_avx512(const float *k, int ldk, int key_len, int dk, float *kt, int ld) {
  __m512 r[16];
  for (int j0 = 0; j0 < key_len; j0 += 16) {
    const __mmask16 km = (__mmask16)(key_len - j0 >= 16 ? 0xFFFFu : (1u << (key_len - j0)) - 1u);
    for (int i0 = 0; i0 < dk; i0 += 16) {
      const int nc = dk - i0 < 16 ? dk - i0 : 16;
      const __mmask16 cm = (__mmask16)(nc == 16 ? 0xFFFFu : (1u << nc) - 1u);
#pragma GCC unroll 16
      for (int l = 0; l < 16; l++)
        r[l] = j0 + l < key_len ? _mm512_maskz_loadu_ps(cm, k + (size_t)(j0 + l) * ldk + i0) : _mm512_setzero_ps();
      FF_AVX512_PAIRS8(_mm512_unpacklo_ps, _mm512_unpackhi_ps, 1, r);
      FF_AVX512_PAIRS8(FF_AVX512_UNPACKLO_PD, FF_AVX512_UNPACKHI_PD, 2, r);
      FF_AVX512_PAIRS8(FF_AVX512_QUARTERS_EVEN, FF_AVX512_QUARTERS_ODD, 4, r);
      FF_AVX512_PAIRS8(FF_AVX512_QUARTERS_EVEN, FF_AVX512_QUARTERS_ODD, 8, r);
#pragma GCC unroll 16
      for (int l = 0; l < 16; l++) {
        const int c = (l & 12) | (l & 1) << 1 | (l & 2) >> 1;
        if (c < nc) _mm512_mask_storeu_ps(kt + (size_t)(i0 + c) * ld + j0, km, r[l]);
      }
    }
  }
}

/* scaled dot-product attention on these kernels (sdpa.c) */
#define FF_SDPA_DOT ff_dot_avx512
#define FF_SDPA_AXPY ff_axpy_avx512
#define FF_SDPA ff_sdpa_avx512
#define FF_SDPA_MR FF_AVX512_MR
#define FF_SDPA_MATMUL ff_matmul_avx512
#define FF_SDPA_SOFTMAX_ROWS ff_softmax_rows_avx512
#define FF_SDPA_GATHER ff_sdpa_gather_avx512
#include "sdpa.c"

/* @part train_isa */
/* the kernels of generated training code (train.c) on these */
#define FF_TRAIN(name) ff_##name##_avx512
#define FF_TRAIN_NR FF_AVX512_NR
#define FF_TRAIN_AVX 1 /* train.c may transpose 8 x 8 floats in __m256 registers */
#define FF_TRAIN_AVX512 1 /* and compute dropout's masks 8 elements a vector (AVX512DQ's 64-bit products) */
#include "train.c"
