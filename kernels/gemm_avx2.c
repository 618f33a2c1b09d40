/* gemm_avx2.c - the AVX2 + FMA matrix kernels: a 6 x 16 register tile (12 ymm
 * accumulators, two 8-float loads of B and six broadcasts of A per step of
 * k, 12 FMAs), and the drivers built on it.  Weights are packed in panels of
 * 16 columns: panel p holds W^T[:, 16p .. 16p+15] as IN rows of 16 floats,
 * zero-padded past OUT.  The contract is that of every ISA (gemm_avx512.c):
 *   ff_matmul_*  C [m, n] = alpha A [m, k] B [k, n] + bias [n] (+ C when flags
 *                has FF_ACC), then max(0, .) with FF_RELU;
 *   ff_linear_*  y [T, OUT] = x [T, IN] W + b, W packed in panels; only
 *                columns j0 .. j1-1 (j0 a multiple of 16);
 *   ff_sdpa_*    heads h0 .. h1-1 of multi-head attention (below).
 * Sums over k run in k order per output, like the reference. */
#if !defined(__AVX2__) || !defined(__FMA__)
#error "these kernels need AVX2 and FMA: build with -mavx2 -mfma (or -march=native), or emit with --isa generic"
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
#define FF_AVX2_MR 6
#define FF_AVX2_NR 16
#if defined(FF_TABLE_MR) && (FF_TABLE_MR != FF_AVX2_MR || FF_TABLE_NR != FF_AVX2_NR) /* the host build */
#error "kernels/isas.h: the avx2 row's MR, NR are not this register tile"
#endif
#define FF_AVX2_KC 256 /* k per pass over a panel: 16 KB of B stays in L1 */

/* @part tile */
/* lanes 0 .. n-1 of 8 on (maskload / maskstore) */
static inline __m256i ff_mask_avx2(int n) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n < 0 ? 0 : n), lane);
}

/* One row of a tile's epilogue: c = alpha acc + bias (+ c), max(0, .), masked to n. */
static inline __attribute__((always_inline)) void ff_store_row_avx2(float *c, __m256 acc0, __m256 acc1, int n,
                                                                   __m256 bias0, __m256 bias1, float alpha,
                                                                   int flags) {
  const __m256i m0 = ff_mask_avx2(n), m1 = ff_mask_avx2(n - 8);
  const __m256 va = _mm256_set1_ps(alpha), zero = _mm256_setzero_ps();
  __m256 r0 = _mm256_fmadd_ps(va, acc0, bias0), r1 = _mm256_fmadd_ps(va, acc1, bias1);
  if (flags & FF_ACC) {
    r0 = _mm256_add_ps(r0, _mm256_maskload_ps(c, m0));
    if (n > 8) r1 = _mm256_add_ps(r1, _mm256_maskload_ps(c + 8, m1));
  }
  if (flags & FF_RELU) { /* maxps gives its second operand when either is NaN: NaN stays NaN, as in PyTorch */
    r0 = _mm256_max_ps(zero, r0);
    r1 = _mm256_max_ps(zero, r1);
  }
  _mm256_maskstore_ps(c, m0, r0);
  if (n > 8) _mm256_maskstore_ps(c + 8, m1, r1);
}

/* The int8 and bf16 tiles' four rows, named (as the f32 tile's: an array of
 * accumulators is stored on every step); CALL(M) with m <= 4 as a constant. */
#define FF_AVX2_ROWS4(X) X(0) X(1) X(2) X(3)
#define FF_AVX2_ROWS_OF(m, CALL) (m) >= 4 ? CALL(4) : (m) == 3 ? CALL(3) : (m) == 2 ? CALL(2) : CALL(1)

/* A row of n <= 16 biases (0 without b). */
static inline __attribute__((always_inline)) void ff_bias_avx2(const float *b, int n, __m256 *bias0, __m256 *bias1) {
  *bias0 = b ? _mm256_maskload_ps(b, ff_mask_avx2(n)) : _mm256_setzero_ps();
  *bias1 = b && n > 8 ? _mm256_maskload_ps(b + 8, ff_mask_avx2(n - 8)) : _mm256_setzero_ps();
}

/* The tile: M (a constant after inlining) <= 6 rows, n <= 16 columns.  The
 * twelve accumulators are named variables, not an array: GCC keeps an array
 * of them in registers but also stores it on every step. */
#define FF_AVX2_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define FF_AVX2_ZERO(i) __m256 c##i##0 = _mm256_setzero_ps(), c##i##1 = c##i##0;
#define FF_AVX2_STEP(i)                                                                                               \
  if (M > i) {                                                                                                        \
    const __m256 a = _mm256_broadcast_ss(TA ? A + (size_t)q * lda + (i) : A + (size_t)(i)*lda + q);                   \
    c##i##0 = _mm256_fmadd_ps(a, b0, c##i##0);                                                                        \
    c##i##1 = _mm256_fmadd_ps(a, b1, c##i##1);                                                                        \
  }
#define FF_AVX2_STORE(i)                                                                                              \
  if (M > i) ff_store_row_avx2(C + (size_t)(i)*ldc, c##i##0, c##i##1, n, bias0, bias1, alpha, flags);
/* One step q of k, the full-width path */
#define FF_AVX2_KSTEP(Q)                                                                                              \
  {                                                                                                                   \
    const int q = (Q);                                                                                                \
    const __m256 b0 = _mm256_loadu_ps(B + (size_t)q * ldb), b1 = _mm256_loadu_ps(B + (size_t)q * ldb + 8);             \
    FF_AVX2_ROWS(FF_AVX2_STEP)                                                                                        \
  }
static inline __attribute__((always_inline)) void ff_tile_avx2(const int M, int n, int k, const float *A, int lda,
                                                              const float *B, int ldb, float *C, int ldc,
                                                              const float *bias, float alpha, int flags,
                                                              uintptr_t pf, int pfs, const int TA) {
  FF_AVX2_ROWS(FF_AVX2_ZERO)
  if (n == 16) { /* a line fetched from pf at every second step of k (drivers.c) */
    int p = 0;
    if (M > 3) {
      /* one step a turn of the loop: unrolled by two, GCC (12, any -mtune but znver)
       * kept an accumulator of the 6-row tile on the stack, 62 GFLOP/s against 126 */
      for (; p < k; p++) {
        if (!(p & 1)) _mm_prefetch((const char *)(pf + (uintptr_t)pfs * p), _MM_HINT_T0);
        FF_AVX2_KSTEP(p)
      }
    } else { /* a row or a few (decoding): two steps a turn, the loop's own work shared */
      for (; p + 2 <= k; p += 2) {
        _mm_prefetch((const char *)(pf + (uintptr_t)pfs * p), _MM_HINT_T0);
        FF_AVX2_KSTEP(p)
        FF_AVX2_KSTEP(p + 1)
      }
      if (p < k) FF_AVX2_KSTEP(p)
    }
  } else {
    const __m256i m0 = ff_mask_avx2(n), m1 = ff_mask_avx2(n - 8);
    for (int q = 0; q < k; q++) {
      const __m256 b0 = _mm256_maskload_ps(B + (size_t)q * ldb, m0);
      const __m256 b1 = _mm256_maskload_ps(B + (size_t)q * ldb + 8, m1);
      FF_AVX2_ROWS(FF_AVX2_STEP)
    }
  }
  const __m256 zero = _mm256_setzero_ps();
  const __m256 bias0 = bias ? _mm256_maskload_ps(bias, ff_mask_avx2(n)) : zero;
  const __m256 bias1 = bias && n > 8 ? _mm256_maskload_ps(bias + 8, ff_mask_avx2(n - 8)) : zero;
  FF_AVX2_ROWS(FF_AVX2_STORE)
}

/* one tile of m <= 6 rows: the row count becomes a constant (TA 1: A transposed, A [k, m] with
 * rows every lda, ff_linear_ta's) */
#define FF_AVX2_TILE_ROWS(name, TA)                                                                                   \
  static inline void name(int m, int n, int k, const float *A, int lda, const float *B, int ldb, float *C, int ldc,   \
                          const float *bias, float alpha, int flags, uintptr_t pf, int pfs) {                          \
    switch (m) {                                                                                                      \
    case 6: ff_tile_avx2(6, n, k, A, lda, B, ldb, C, ldc, bias, alpha, flags, pf, pfs, TA); break;                    \
    case 5: ff_tile_avx2(5, n, k, A, lda, B, ldb, C, ldc, bias, alpha, flags, pf, pfs, TA); break;                    \
    case 4: ff_tile_avx2(4, n, k, A, lda, B, ldb, C, ldc, bias, alpha, flags, pf, pfs, TA); break;                    \
    case 3: ff_tile_avx2(3, n, k, A, lda, B, ldb, C, ldc, bias, alpha, flags, pf, pfs, TA); break;                    \
    case 2: ff_tile_avx2(2, n, k, A, lda, B, ldb, C, ldc, bias, alpha, flags, pf, pfs, TA); break;                    \
    default: ff_tile_avx2(1, n, k, A, lda, B, ldb, C, ldc, bias, alpha, flags, pf, pfs, TA); break;                   \
    }                                                                                                                 \
  }
FF_AVX2_TILE_ROWS(ff_tile_rows_avx2, 0)

/* @part linear_ta: tile */
FF_AVX2_TILE_ROWS(ff_tile_rows_ta_avx2, 1)
#define FF_LIN_TILE_TA ff_tile_rows_ta_avx2

/* @part tile */
/* matmul and linear on these kernels (drivers.c) */
#define FF_MATMUL ff_matmul_avx2
#define FF_LINEAR ff_linear_avx2
#define FF_LINEAR_LD ff_linear_ld_avx2
#define FF_LINEAR_TA ff_linear_ta_avx2
#define FF_LIN_MR FF_AVX2_MR
#define FF_LIN_NR FF_AVX2_NR
#define FF_LIN_KC FF_AVX2_KC
#define FF_LIN_TILE ff_tile_rows_avx2
#include "drivers.c"

/* @part quant: tile */
/* bf16 and int8 weights (quant.c): the prefill's tile is the one above */
#define FF_QUANT(name) ff_##name##_avx2
#define FF_GEMV_PANELS 4
#include "quant.c"

/* quant.c's GEMVs: P (a constant after inlining) panels of 16 columns at
 * once, each column's sum in k order, 2 P independent FMA chains.  bf16: a
 * row of a panel is 32 bytes, 8 lanes of two weights; the odd column's
 * weight is its lane with the low half cleared, the even one's the lane
 * shifted left by 16 (no shuffle); back in column order at the end. */
static inline __attribute__((always_inline)) void ff_gemv_bf16_p_avx2(const int P, const float *x, int IN,
                                                                     const unsigned char *W, size_t pb, float *acc) {
  __m256 e[FF_GEMV_PANELS], o[FF_GEMV_PANELS];
  const __m256i high = _mm256_set1_epi32((int)0xFFFF0000u);
  for (int p = 0; p < P; p++) e[p] = o[p] = _mm256_setzero_ps();
  for (int k = 0; k < IN; k++) {
    const __m256 xk = _mm256_broadcast_ss(x + k);
    for (int p = 0; p < P; p++) {
      const __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)(W + pb * p + (size_t)k * 32));
      e[p] = _mm256_fmadd_ps(xk, _mm256_castsi256_ps(_mm256_slli_epi32(h, 16)), e[p]);
      o[p] = _mm256_fmadd_ps(xk, _mm256_castsi256_ps(_mm256_and_si256(h, high)), o[p]);
    }
  }
  for (int p = 0; p < P; p++) { /* e = columns 0 2 .. 14, o = 1 3 .. 15 */
    const __m256 lo = _mm256_unpacklo_ps(e[p], o[p]), hi = _mm256_unpackhi_ps(e[p], o[p]);
    _mm256_storeu_ps(acc + 16 * p, _mm256_permute2f128_ps(lo, hi, 0x20));
    _mm256_storeu_ps(acc + 16 * p + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
  }
}

/* int8: a row of a panel is 16 bytes, widened to two vectors of 8 floats;
 * a group's sums x q (in k order) are then scaled into the column's sum (in
 * group order): one multiply per group instead of per weight */
static inline __attribute__((always_inline)) void ff_gemv_q8_p_avx2(const int P, const float *x, int IN,
                                                                   const unsigned char *W, size_t pb, float *acc) {
  __m256 a0[FF_GEMV_PANELS], a1[FF_GEMV_PANELS], g0[FF_GEMV_PANELS], g1[FF_GEMV_PANELS];
  for (int p = 0; p < P; p++) a0[p] = a1[p] = _mm256_setzero_ps();
  for (int k0 = 0; k0 < IN; k0 += 32) {
    const unsigned char *g = W + (size_t)(k0 / 32) * 36 * 16;
    const int rows = IN - k0 < 32 ? IN - k0 : 32;
    for (int p = 0; p < P; p++) g0[p] = g1[p] = _mm256_setzero_ps();
    for (int r = 0; r < rows; r++) {
      const __m256 xk = _mm256_broadcast_ss(x + k0 + r);
      for (int p = 0; p < P; p++) {
        const unsigned char *q = g + pb * p + 64 + 16 * r;
        const __m128i q0 = _mm_loadl_epi64((const __m128i *)(const void *)q);
        const __m128i q1 = _mm_loadl_epi64((const __m128i *)(const void *)(q + 8));
        g0[p] = _mm256_fmadd_ps(xk, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q0)), g0[p]);
        g1[p] = _mm256_fmadd_ps(xk, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q1)), g1[p]);
      }
    }
    for (int p = 0; p < P; p++) {
      const float *scale = (const float *)(const void *)(g + pb * p);
      a0[p] = _mm256_fmadd_ps(g0[p], _mm256_loadu_ps(scale), a0[p]);
      a1[p] = _mm256_fmadd_ps(g1[p], _mm256_loadu_ps(scale + 8), a1[p]);
    }
  }
  for (int p = 0; p < P; p++) _mm256_storeu_ps(acc + 16 * p, a0[p]), _mm256_storeu_ps(acc + 16 * p + 8, a1[p]);
}

/* @part sdpa: matmul */
/* e^x for x <= 0 in 8 lanes: x = n ln2 + r, |r| <= ln2/2, e^r by a degree-6
 * polynomial (Cephes expf), times 2^n built in the exponent bits; about
 * 1 ulp; below -87.3 (and -inf): 0; NaN: NaN (the clamp keeps it, see
 * ff_store_row_avx2), so that a NaN score makes its softmax row NaN. */
static inline __m256 ff_exp_avx2(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.33654f);
  const __m256 tiny = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_max_ps(lo, x);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256 two_n = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n),
                                                                              _mm256_set1_epi32(127)), 23));
  return _mm256_andnot_ps(tiny, _mm256_mul_ps(p, two_n));
}

static inline float ff_hsum_avx2(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

/* the eight rows' values a[0..7] (8 lanes each) combined into their results:
 * rows 0..3 in a[0]'s lanes 0, 4, 2, 6 and rows 4..7 in a[4]'s; op (add or
 * max) pairs lanes 4, 2 and then 1 apart, ff_hsum_avx2's order */
#define FF_AVX2_REDUCE8(op, a)                                                                                        \
  do {                                                                                                                 \
    for (int l_ = 0; l_ < 8; l_ += 2)                                                                                  \
      a[l_] = op(_mm256_permute2f128_ps(a[l_], a[l_ + 1], 0x20), _mm256_permute2f128_ps(a[l_], a[l_ + 1], 0x31));     \
    for (int l_ = 0; l_ < 8; l_ += 4) {                                                                                \
      a[l_] = op(_mm256_shuffle_ps(a[l_], a[l_ + 2], 0x44), _mm256_shuffle_ps(a[l_], a[l_ + 2], 0xee));               \
      a[l_] = op(a[l_], _mm256_permute_ps(a[l_], 0xb1));                                                               \
    }                                                                                                                  \
  } while (0)
#define FF_AVX2_ROW_LANE(r) ((((r)&1) << 2) | ((r)&2)) /* row r's lane in FF_AVX2_REDUCE8's a[r & 4] */

/* softmax of rows r = 0 .. m-1 (m <= 8) of s, rows every ld floats, row r
 * over its first min(v0 + r dv, n) floats (the rest set to 0): row by row,
 * but the rows' maxima and sums reduced together.  Each row's values as one
 * row alone would have them: its max, e^(x - max) summed lane by lane and
 * the lanes in ff_hsum_avx2's order, times 1 / sum */
static inline void ff_softmax_rows_avx2(float *s, int ld, int m, int v0, int dv, int n) {
  int visible[8]; /* row r's keys (rows past m: none, their results unused) */
  for (int r = 0; r < 8; r++) visible[r] = r < m ? (v0 + r * dv < n ? v0 + r * dv : n) : 0;
  __m256 acc[8];
  const __m256 lowest = _mm256_set1_ps(-3.402823466e+38f);
  for (int r = 0; r < 8; r++) {
    const int vis = visible[r], full = vis & ~7;
    const float *row = s + (size_t)r * ld;
    __m256 vmax = lowest;
    for (int j = 0; j < full; j += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(row + j));
    if (full < vis) { /* the tail's lanes, the others the lowest float */
      const __m256i tail = ff_mask_avx2(vis - full);
      vmax = _mm256_max_ps(vmax, _mm256_blendv_ps(lowest, _mm256_maskload_ps(row + full, tail), _mm256_castsi256_ps(tail)));
    }
    acc[r] = vmax;
  }
  FF_AVX2_REDUCE8(_mm256_max_ps, acc);
  const __m256 max0 = acc[0], max4 = acc[4];
  for (int r = 0; r < 8; r++) {
    const int vis = visible[r], full = vis & ~7;
    float *row = s + (size_t)r * ld;
    const __m256 vm = _mm256_permutevar8x32_ps(r < 4 ? max0 : max4, _mm256_set1_epi32(FF_AVX2_ROW_LANE(r)));
    __m256 vsum = _mm256_setzero_ps();
    for (int j = 0; j < full; j += 8) {
      const __m256 e = ff_exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(row + j), vm));
      _mm256_storeu_ps(row + j, e);
      vsum = _mm256_add_ps(vsum, e);
    }
    if (full < vis) {
      const __m256i tail = ff_mask_avx2(vis - full);
      const __m256 e = _mm256_and_ps(_mm256_castsi256_ps(tail),
                                     ff_exp_avx2(_mm256_sub_ps(_mm256_maskload_ps(row + full, tail), vm)));
      _mm256_maskstore_ps(row + full, tail, e);
      vsum = _mm256_add_ps(vsum, e);
    }
    acc[r] = vsum;
  }
  FF_AVX2_REDUCE8(_mm256_add_ps, acc);
  const __m256 one = _mm256_set1_ps(1.0f), inv0 = _mm256_div_ps(one, acc[0]), inv4 = _mm256_div_ps(one, acc[4]);
  for (int r = 0; r < m; r++) {
    const int vis = visible[r], full = vis & ~7;
    float *row = s + (size_t)r * ld;
    const __m256 vi = _mm256_permutevar8x32_ps(r < 4 ? inv0 : inv4, _mm256_set1_epi32(FF_AVX2_ROW_LANE(r)));
    for (int j = 0; j < full; j += 8) _mm256_storeu_ps(row + j, _mm256_mul_ps(_mm256_loadu_ps(row + j), vi));
    if (full < vis) {
      const __m256i tail = ff_mask_avx2(vis - full);
      _mm256_maskstore_ps(row + full, tail, _mm256_mul_ps(_mm256_maskload_ps(row + full, tail), vi));
    }
    for (int j = vis; j < n; j++) row[j] = 0.0f;
  }
}

/* @part int8: tile */
/* int8 compute (int8.c) without a dot-product instruction: VPMADDUBSW
 * multiplies u8 by s8 and adds pairs into int16, which two u8 x s8 products
 * (255 x 127 x 2) would overflow; on the signed q (u XOR 0x80) and |w|, with
 * w's sign moved onto q (VPSIGNB), a pair stays within 2 x 127 x 127, and
 * VPMADDWD by ones makes the int32 sum of each column's four products: the
 * same exact sum as int8.c's, 64 multiply-adds in ten instructions.  Four
 * rows a tile: eight accumulators, the panel's two vectors and their
 * magnitudes stay in the 16 registers. */
#define FF_AVX2_I8_MR 4
static void ff_i8_tile_avx2(int m, int n, int quads, const unsigned char *A, size_t lda, const unsigned char *panel,
                            const float *sx, const float *b, float *y, size_t ldy, int flags);
/* a row quantized 8 floats a vector: the max, then x 127 / max rounded by
 * VCVTPS2DQ (the default rounding, to nearest even: int8.c's round_even),
 * 32 bytes packed a step (lanes past IN load as 0: u 128, the padding) */
static inline float ff_i8_quantize_row_avx2(const float *x, int IN, unsigned char *q) {
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF)), big = _mm256_set1_ps(3.402823466e+38f);
  __m256 vmax = _mm256_setzero_ps(), bad = vmax;
  for (int i = 0; i < IN; i += 8) {
    const __m256 a = _mm256_and_ps(_mm256_maskload_ps(x + i, ff_mask_avx2(IN - i)), magnitude);
    bad = _mm256_or_ps(bad, _mm256_cmp_ps(a, big, _CMP_NLE_UQ)); /* NaN or infinity */
    vmax = _mm256_max_ps(vmax, a);
  }
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  const float amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1)));
  const int IN4 = (IN + 3) / 4 * 4;
  if (_mm256_movemask_ps(bad)) { /* q 0 (int8.c) */
    memset(q, 128, (size_t)IN4);
    return 0.0f / 0.0f;
  }
  const __m256 inv = _mm256_set1_ps(amax >= 1e-30f ? 127.0f / amax : 0.0f);
  const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127), off = _mm256_set1_epi32(128);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7); /* the packs work within 128-bit lanes */
  for (int i = 0; i < IN4; i += 32) {
    __m256i r[4];
    for (int j = 0; j < 4; j++) {
      const __m256 v = _mm256_maskload_ps(x + i + 8 * j, ff_mask_avx2(IN - i - 8 * j));
      r[j] = _mm256_add_epi32(_mm256_min_epi32(hi, _mm256_max_epi32(lo, _mm256_cvtps_epi32(_mm256_mul_ps(v, inv)))),
                              off);
    }
    const __m256i u = _mm256_permutevar8x32_epi32(
        _mm256_packus_epi16(_mm256_packs_epi32(r[0], r[1]), _mm256_packs_epi32(r[2], r[3])), order);
    if (IN4 - i >= 32) {
      _mm256_storeu_si256((__m256i *)(void *)(q + i), u);
    } else {
      unsigned char t[32];
      _mm256_storeu_si256((__m256i *)(void *)t, u);
      memcpy(q + i, t, (size_t)(IN4 - i));
    }
  }
  return amax >= 1e-30f ? amax / 127.0f : 0.0f;
}
#define FF_I8_QUANTIZE_ROW ff_i8_quantize_row_avx2
#define FF_I8(name) ff_##name##_avx2
#define FF_I8_MR FF_AVX2_I8_MR
#define FF_I8_NR FF_AVX2_NR
#define FF_I8_TILE ff_i8_tile_avx2
#include "int8.c"

static inline __attribute__((always_inline)) __m256i ff_i8_dot_avx2(__m256i acc, __m256i a, __m256i w, __m256i wabs,
                                                                   __m256i ones) {
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(wabs, _mm256_sign_epi8(a, w)), ones));
}

/* Named accumulators, as the f32 tile's (an array of them is stored on every step) */
#define FF_AVX2_I8_ZERO(i) __m256i c##i##0 = _mm256_setzero_si256(), c##i##1 = c##i##0;
#define FF_AVX2_I8_STEP(i)                                                                                            \
  if (M > i) {                                                                                                        \
    const __m256i x = _mm256_xor_si256(_mm256_set1_epi32(ff_u32_avx2(A + (size_t)(i)*lda + 4 * (size_t)k)), flip);   \
    c##i##0 = ff_i8_dot_avx2(c##i##0, x, w0, a0, ones);                                                               \
    c##i##1 = ff_i8_dot_avx2(c##i##1, x, w1, a1, ones);                                                               \
  }
#define FF_AVX2_I8_STORE(i)                                                                                           \
  if (M > i) {                                                                                                        \
    const __m256 s = _mm256_set1_ps(sx[i]);                                                                           \
    ff_store_row_avx2(y + (size_t)(i)*ldy, _mm256_fmadd_ps(_mm256_cvtepi32_ps(c##i##0), _mm256_mul_ps(s, sw0), bias0), \
                      _mm256_fmadd_ps(_mm256_cvtepi32_ps(c##i##1), _mm256_mul_ps(s, sw1), bias1), n, zero, zero, 1.0f,  \
                      flags);                                                                                         \
  }
static inline __attribute__((always_inline)) int ff_u32_avx2(const unsigned char *p) {
  int32_t v;
  memcpy(&v, p, 4);
  return v;
}

static inline __attribute__((always_inline)) void ff_i8_tile_m_avx2(const int M, int n, int quads,
                                                                   const unsigned char *A, size_t lda,
                                                                   const unsigned char *panel, const float *sx,
                                                                   const float *b, float *y, size_t ldy, int flags) {
  const __m256i ones = _mm256_set1_epi16(1), flip = _mm256_set1_epi8((char)0x80); /* u XOR 0x80: the signed q */
  const unsigned char *q = panel + 8 * FF_AVX2_NR;
  FF_AVX2_ROWS4(FF_AVX2_I8_ZERO)
  for (int k = 0; k < quads; k++) {
    const __m256i w0 = _mm256_loadu_si256((const __m256i *)(const void *)(q + (size_t)k * 64));
    const __m256i w1 = _mm256_loadu_si256((const __m256i *)(const void *)(q + (size_t)k * 64 + 32));
    const __m256i a0 = _mm256_abs_epi8(w0), a1 = _mm256_abs_epi8(w1);
    FF_AVX2_ROWS4(FF_AVX2_I8_STEP)
  }
  __m256 bias0, bias1;
  ff_bias_avx2(b, n, &bias0, &bias1);
  const __m256 sw0 = _mm256_loadu_ps((const float *)(const void *)panel);
  const __m256 sw1 = _mm256_loadu_ps((const float *)(const void *)panel + 8), zero = _mm256_setzero_ps();
  FF_AVX2_ROWS4(FF_AVX2_I8_STORE) /* (then + 0: -0 to +0, as int8.c's + b) */
}

/* AVX-VNNI (Alder Lake, Zen 5): VPDPBUSD in its 256-bit VEX form sums four
 * u8 x s8 products into each int32 lane, one instruction for the four above.
 * It takes the unsigned u itself, so 128 x the column's sum of q (the
 * panel's int32 sums) comes off each sum after the k loop: the same exact
 * int32, the same epilogue, the same bits.  The function carries its own
 * target, so that code built with the row's flags (-mavx2 -mfma) builds it
 * too; CPUs without it take the tile above (ff_avx_vnni_avx2 asks CPUID
 * once: clang 14's __builtin_cpu_supports does not know the feature). */
#define FF_AVX2_VNNI_STEP(i)                                                                                          \
  if (M > i) {                                                                                                        \
    const __m256i x = _mm256_set1_epi32(ff_u32_avx2(A + (size_t)(i)*lda + 4 * (size_t)k));                            \
    c##i##0 = _mm256_dpbusd_avx_epi32(c##i##0, x, w0);                                                               \
    c##i##1 = _mm256_dpbusd_avx_epi32(c##i##1, x, w1);                                                               \
  }
#define FF_AVX2_VNNI_SUMS(i)                                                                                          \
  if (M > i) c##i##0 = _mm256_sub_epi32(c##i##0, s0), c##i##1 = _mm256_sub_epi32(c##i##1, s1);
static inline __attribute__((always_inline, target("avx2,fma,avxvnni"))) void
ff_i8_tile_vnni_m_avx2(const int M, int n, int quads, const unsigned char *A, size_t lda, const unsigned char *panel,
                       const float *sx, const float *b, float *y, size_t ldy, int flags) {
  const unsigned char *q = panel + 8 * FF_AVX2_NR;
  FF_AVX2_ROWS4(FF_AVX2_I8_ZERO)
  for (int k = 0; k < quads; k++) {
    const __m256i w0 = _mm256_loadu_si256((const __m256i *)(const void *)(q + (size_t)k * 64));
    const __m256i w1 = _mm256_loadu_si256((const __m256i *)(const void *)(q + (size_t)k * 64 + 32));
    FF_AVX2_ROWS4(FF_AVX2_VNNI_STEP)
  }
  const __m256i s0 = _mm256_slli_epi32(_mm256_loadu_si256((const __m256i *)(const void *)(panel + 64)), 7);
  const __m256i s1 = _mm256_slli_epi32(_mm256_loadu_si256((const __m256i *)(const void *)(panel + 96)), 7);
  FF_AVX2_ROWS4(FF_AVX2_VNNI_SUMS)
  __m256 bias0, bias1;
  ff_bias_avx2(b, n, &bias0, &bias1);
  const __m256 sw0 = _mm256_loadu_ps((const float *)(const void *)panel);
  const __m256 sw1 = _mm256_loadu_ps((const float *)(const void *)panel + 8), zero = _mm256_setzero_ps();
  FF_AVX2_ROWS4(FF_AVX2_I8_STORE)
}

static __attribute__((target("avx2,fma,avxvnni"))) void
ff_i8_tile_vnni_avx2(int m, int n, int quads, const unsigned char *A, size_t lda, const unsigned char *panel,
                     const float *sx, const float *b, float *y, size_t ldy, int flags) {
#define FF_AVX2_VNNI_CALL(M) ff_i8_tile_vnni_m_avx2(M, n, quads, A, lda, panel, sx, b, y, ldy, flags)
  FF_AVX2_ROWS_OF(m, FF_AVX2_VNNI_CALL);
}

/* 1 if the CPU has AVX-VNNI (CPUID leaf 7, sub-leaf 1: EAX bit 4), asked
 * once (a CPUID in a virtual machine can cost microseconds); FF_NO_AVX_VNNI
 * defined: 0, the tile above on every CPU (tests/CMakeLists.txt builds the
 * compute kernels' test both ways). */
#include <cpuid.h>
static int ff_avx_vnni_avx2(void) {
#ifdef FF_NO_AVX_VNNI
  return 0;
#else
  static int known = -1;
  int has = __atomic_load_n(&known, __ATOMIC_RELAXED);
  if (has < 0) {
    unsigned a = 0, b = 0, c = 0, d = 0;
    has = __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a >> 4 & 1u);
    __atomic_store_n(&known, has, __ATOMIC_RELAXED);
  }
  return has;
#endif
}

static void ff_i8_tile_avx2(int m, int n, int quads, const unsigned char *A, size_t lda, const unsigned char *panel,
                            const float *sx, const float *b, float *y, size_t ldy, int flags) {
#define FF_AVX2_I8_CALL(M) ff_i8_tile_m_avx2(M, n, quads, A, lda, panel, sx, b, y, ldy, flags)
  if (ff_avx_vnni_avx2())
    ff_i8_tile_vnni_avx2(m, n, quads, A, lda, panel, sx, b, y, ldy, flags);
  else
    FF_AVX2_ROWS_OF(m, FF_AVX2_I8_CALL);
}

/* @part bf16c: tile */
/* bf16 compute (bf16.c) without a bf16 instruction: a pair of bfloat16 is a
 * 32-bit word, its high half a float when the low bits are masked off and
 * its low half one when shifted up 16, so each pair is two FMAs on floats,
 * the odd element first as VDPBF16PS orders them (the products are exact:
 * the same bits as bf16.c's plain loops).  Four rows a tile, as int8's. */
#define FF_AVX2_B16_MR 4
static void ff_b16_tile_avx2(int m, int n, int pairs, const uint32_t *A, size_t lda, const uint32_t *panel,
                             const float *b, float *y, size_t ldy, int flags);
#define FF_B16(name) ff_##name##_avx2
#define FF_B16_MR FF_AVX2_B16_MR
#define FF_B16_NR FF_AVX2_NR
#define FF_B16_TILE ff_b16_tile_avx2
#include "bf16.c"

#define FF_AVX2_B16_ZERO(i) __m256 c##i##0 = _mm256_setzero_ps(), c##i##1 = c##i##0;
#define FF_AVX2_B16_STEP(i)                                                                                           \
  if (M > i) {                                                                                                        \
    const __m256i a = _mm256_set1_epi32((int)A[(size_t)(i)*lda + (size_t)k]);                                        \
    const __m256 x1 = _mm256_and_ps(_mm256_castsi256_ps(a), high), x0 = _mm256_castsi256_ps(_mm256_slli_epi32(a, 16)); \
    c##i##0 = _mm256_fmadd_ps(x0, even0, _mm256_fmadd_ps(x1, odd0, c##i##0));                                         \
    c##i##1 = _mm256_fmadd_ps(x0, even1, _mm256_fmadd_ps(x1, odd1, c##i##1));                                         \
  }
#define FF_AVX2_B16_STORE(i)                                                                                          \
  if (M > i) ff_store_row_avx2(y + (size_t)(i)*ldy, c##i##0, c##i##1, n, bias0, bias1, 1.0f, flags);
static inline __attribute__((always_inline)) void ff_b16_tile_m_avx2(const int M, int n, int pairs, const uint32_t *A,
                                                                    size_t lda, const uint32_t *panel, const float *b,
                                                                    float *y, size_t ldy, int flags) {
  const __m256 high = _mm256_castsi256_ps(_mm256_set1_epi32((int)0xFFFF0000u));
  FF_AVX2_ROWS4(FF_AVX2_B16_ZERO)
  for (int k = 0; k < pairs; k++) {
    const __m256i w0 = _mm256_loadu_si256((const __m256i *)(const void *)(panel + (size_t)k * 16));
    const __m256i w1 = _mm256_loadu_si256((const __m256i *)(const void *)(panel + (size_t)k * 16 + 8));
    const __m256 odd0 = _mm256_and_ps(_mm256_castsi256_ps(w0), high), even0 = _mm256_castsi256_ps(_mm256_slli_epi32(w0, 16));
    const __m256 odd1 = _mm256_and_ps(_mm256_castsi256_ps(w1), high), even1 = _mm256_castsi256_ps(_mm256_slli_epi32(w1, 16));
    FF_AVX2_ROWS4(FF_AVX2_B16_STEP)
  }
  __m256 bias0, bias1;
  ff_bias_avx2(b, n, &bias0, &bias1);
  FF_AVX2_ROWS4(FF_AVX2_B16_STORE)
}

static void ff_b16_tile_avx2(int m, int n, int pairs, const uint32_t *A, size_t lda, const uint32_t *panel,
                             const float *b, float *y, size_t ldy, int flags) {
#define FF_AVX2_B16_CALL(M) ff_b16_tile_m_avx2(M, n, pairs, A, lda, panel, b, y, ldy, flags)
  FF_AVX2_ROWS_OF(m, FF_AVX2_B16_CALL);
}

/* @part plain */
/* norms and activations (plain.c) */
#define FF_PLAIN(name) ff_##name##_avx2
#define FF_PLAIN_AVX 1 /* plain.c may take 8 floats as an __m256 (immintrin.h above) */
#define FF_PLAIN_SELECT 1 /* and its selects as bit masks, which the compiler vectorises */
#define FF_PLAIN_ROWS 2 /* the norms' rows side by side (six vectors a row, of 16 registers) */
#include "plain.c"

/* @part sdpa */
/* q . k over n floats (decoding's scores): 8 lanes, then the tail */
static inline float ff_dot_avx2(const float *q, const float *k, int n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(k + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), _mm256_loadu_ps(k + i + 8), s1);
  }
  for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(k + i), s0);
  float t = ff_hsum_avx2(_mm256_add_ps(s0, s1));
  for (; i < n; i++) t += q[i] * k[i];
  return t;
}

/* y += p x over n floats (decoding's P V) */
static inline void ff_axpy_avx2(float *y, float p, const float *x, int n) {
  const __m256 vp = _mm256_set1_ps(p);
  int i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(vp, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; i++) y[i] += p * x[i];
}

/* scaled dot-product attention on these kernels (sdpa.c) */
#define FF_SDPA_DOT ff_dot_avx2
#define FF_SDPA_AXPY ff_axpy_avx2
#define FF_SDPA ff_sdpa_avx2
#define FF_SDPA_MR FF_AVX2_MR
#define FF_SDPA_MATMUL ff_matmul_avx2
#define FF_SDPA_SOFTMAX_ROWS ff_softmax_rows_avx2
#include "sdpa.c"

/* @part train_isa */
/* the kernels of generated training code (train.c) on these */
#define FF_TRAIN(name) ff_##name##_avx2
#define FF_TRAIN_NR FF_AVX2_NR
#define FF_TRAIN_AVX 1 /* train.c may transpose 8 x 8 floats in __m256 registers */
#include "train.c"
