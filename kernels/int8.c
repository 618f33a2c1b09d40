/* int8.c - int8 compute (`compute = "int8"`, docs/performance.md): a linear's
 * input rows quantized when it runs, its weights quantized per output
 * channel when they are packed, the products summed exactly in int32, the
 * result in f32.  The ISA's file defines, then includes this:
 *   FF_I8(name)         this ISA's name of a function: ff_name_ISA
 *   FF_I8_MR, FF_I8_NR  the rows of a tile, the panel width
 *   FF_I8_TILE(m, n, quads, A, lda, panel, sx, b, y, ldy, flags)   optional:
 *                       the ISA's tile (declared before, defined after; with
 *                       FF_I8_PLAIN defined it may fall back on
 *                       FF_I8(i8_tile_plain), the plain loops)
 *   FF_I8_QUANTIZE_ROW(x, IN, q)   optional: the ISA's vector row quantizer,
 *                       the same values as quantize_row below
 * Quantized rows (ff_quantize_rows_ISA, the op before the linear): T floats
 * s_x, each row's scale max|x| / 127, then T rows of IN4 = 4 ceil(IN / 4)
 * bytes u = round(x / s_x) + 128 (x times 127 / max|x| rounded to the
 * nearest, ties to even, in [1, 255]; 128 past IN).  A row of zeros (max|x|
 * below 1e-30) has s_x 0 and u 128; a row holding a NaN or an infinity has
 * s_x NaN and u 128: all its outputs are NaN (in f32 some could be +-inf).
 * Weights (panel p of NR output channels, words at p NR (2 + IN4 / 4)): NR
 * float scales s_w (runtime/quant.c's ff_q8_group over the whole row of W:
 * max|w| / 127), NR int32 sums of the column's q, then per quad of k the NR
 * columns' 4 int8 q[k .. k+3]; q and s_w 0 past OUT, q 0 past IN.
 *   y[t][c] = s_x[t] s_w[c] (sum_k u[t][k] q[c][k] - 128 sum_k q[c][k]) + b[c]
 * (+ y with FF_ACC, max(0, .) with FF_RELU): the int32 sum is that of the
 * signed q_x q_w, exact (below 2^31 for IN up to 66,000), as the reference
 * (runtime/model.c) computes it in double. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* round v (|v| <= 2^22) to the nearest integer, ties to even: plain
 * arithmetic, the same in every rounding mode and on every target */
static inline int FF_I8(i8_round_even)(float v) {
  int q = (int)v; /* toward zero */
  const float d = v - (float)q;
  if (d > 0.5f || (d == 0.5f && (q & 1))) q++;
  else if (d < -0.5f || (d == -0.5f && (q & 1))) q--;
  return q;
}

#ifndef FF_I8_QUANTIZE_ROW
/* one row: its scale, and IN4 bytes into q */
static float FF_I8(i8_quantize_row)(const float *x, int IN, unsigned char *q) {
  float amax = 0.0f;
  int finite = 1;
  for (int i = 0; i < IN; i++) {
    const float a = x[i] < 0.0f ? -x[i] : x[i];
    if (!(a <= 3.402823466e+38f)) finite = 0; /* NaN or infinity */
    amax = a > amax ? a : amax;
  }
  const int IN4 = (IN + 3) / 4 * 4;
  if (!finite) { /* q 0 (NaN x 0 would not be a number to round) */
    memset(q, 128, (size_t)IN4);
    return 0.0f / 0.0f;
  }
  const float inv = amax >= 1e-30f ? 127.0f / amax : 0.0f;
  for (int i = 0; i < IN; i++) {
    const float v = x[i] * inv;
    const int r = FF_I8(i8_round_even)(v);
    q[i] = (unsigned char)((r > 127 ? 127 : r < -127 ? -127 : r) + 128);
  }
  for (int i = IN; i < IN4; i++) q[i] = 128;
  return inv > 0.0f ? amax / 127.0f : 0.0f;
}
#define FF_I8_QUANTIZE_ROW FF_I8(i8_quantize_row)
#endif

/* x [T, IN] -> q: T scales, then T rows of IN4 bytes (above) */
FF_KERNEL void FF_I8(quantize_rows)(const float *x, int T, int IN, float *q) {
  const size_t IN4 = (size_t)(IN + 3) / 4 * 4;
  unsigned char *rows = (unsigned char *)(q + T);
  for (int t = 0; t < T; t++) q[t] = FF_I8_QUANTIZE_ROW(x + (size_t)t * IN, IN, rows + (size_t)t * IN4);
}

/* the epilogue of a tile's row: y [n] (+)= s_x s_w (acc - 128 sum) + b, max(0, .) */
static inline void FF_I8(i8_store)(const int32_t *acc, int n, float sx, const float *sw, const int32_t *sum,
                                const float *b, float *y, int flags) {
  for (int c = 0; c < n; c++) {
    float v = (float)(acc[c] - 128 * sum[c]) * (sx * sw[c]) + (b ? b[c] : 0.0f);
    if (flags & FF_ACC) v += y[c];
    y[c] = (flags & FF_RELU) && v < 0.0f ? 0.0f : v;
  }
}

#if !defined(FF_I8_TILE) || defined(FF_I8_PLAIN)
/* the plain tile: m <= MR rows of A (u8, every lda bytes) times the panel's
 * n <= NR columns (s8), 4 k a step, then the epilogue into y (rows every
 * ldy floats) */
static void FF_I8(i8_tile_plain)(int m, int n, int quads, const unsigned char *A, size_t lda, const unsigned char *panel,
                        const float *sx, const float *b, float *y, size_t ldy, int flags) {
  const float *sw = (const float *)(const void *)panel;
  const int32_t *sum = (const int32_t *)(const void *)(panel + 4 * FF_I8_NR);
  const signed char *q = (const signed char *)(panel + 8 * FF_I8_NR);
  int32_t acc[FF_I8_MR][FF_I8_NR];
  for (int i = 0; i < m; i++)
    for (int c = 0; c < FF_I8_NR; c++) acc[i][c] = 0;
  for (int k = 0; k < quads; k++) {
    const signed char *w = q + (size_t)k * 4 * FF_I8_NR;
    for (int i = 0; i < m; i++) {
      const unsigned char *a = A + (size_t)i * lda + 4 * (size_t)k;
      for (int c = 0; c < FF_I8_NR; c++)
        acc[i][c] += a[0] * w[4 * c] + a[1] * w[4 * c + 1] + a[2] * w[4 * c + 2] + a[3] * w[4 * c + 3];
    }
  }
  for (int i = 0; i < m; i++) FF_I8(i8_store)(acc[i], n, sx[i], sw, sum, b, y + (size_t)i * ldy, flags);
}
#endif
#ifndef FF_I8_TILE
#define FF_I8_TILE FF_I8(i8_tile_plain)
#endif

/* y [T, OUT] (+)= the product of the quantized rows xq and the packed W
 * (above), columns j0 .. j1-1 (j0 a multiple of NR): panel by panel, each
 * row tile over the whole of k (a panel's bytes stay in L2) */
FF_KERNEL void FF_I8(linear_i8)(const float *xq, int T, int IN, const void *W, const float *b, int OUT, float *y,
                                int flags, int j0, int j1) {
  const int quads = (IN + 3) / 4;
  const size_t lda = 4 * (size_t)quads, panel_bytes = 4 * (size_t)FF_I8_NR * (2 + (size_t)quads);
  const unsigned char *A = (const unsigned char *)(xq + T);
  for (int j = j0; j < j1; j += FF_I8_NR) {
    const unsigned char *panel = (const unsigned char *)W + panel_bytes * (size_t)(j / FF_I8_NR);
    const int n = OUT - j < FF_I8_NR ? OUT - j : FF_I8_NR;
    for (int i = 0; i < T; i += FF_I8_MR)
      FF_I8_TILE(T - i < FF_I8_MR ? T - i : FF_I8_MR, n, quads, A + (size_t)i * lda, lda, panel, xq + i,
                 b ? b + j : NULL, y + (size_t)i * OUT + j, (size_t)OUT, flags);
  }
}
