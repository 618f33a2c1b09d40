/* bf16.c - bf16 compute (`compute = "bf16"`, docs/performance.md): a linear's
 * input rows rounded to bfloat16 when it runs, its weights rounded when they
 * are packed, the products of pairs summed in float32.  The ISA's file
 * defines, then includes this:
 *   FF_B16(name)        this ISA's name of a function: ff_name_ISA
 *   FF_B16_MR, FF_B16_NR   the rows of a tile, the panel width
 *   FF_B16_TILE(m, n, pairs, A, lda, panel, b, y, ldy, flags)   optional: the
 *                       ISA's tile (declared before, defined after; with
 *                       FF_B16_PLAIN defined it may fall back on
 *                       FF_B16(b16_tile_plain), the plain loops)
 *   FF_B16_ROW(x, IN, q)   optional: the ISA's row rounding, the same bits
 * Rounded rows (ff_bf16_rows_ISA, the op before the linear): T rows of IN2 =
 * 2 ceil(IN / 2) bfloat16, x rounded to the nearest, ties to even (the high
 * half of the float, as torch's .to(torch.bfloat16); a NaN stays a NaN), 0
 * past IN.
 * Weights (panel p of NR output channels, words at p NR IN2 / 2): per pair of
 * k, the NR columns' (w[k], w[k+1]) in one word each, w[k] in the low half,
 * rounded the same way; 0 past OUT and IN.
 *   y[t][c] = b[c] + the float32 sum over pairs j of x[2j+1] w[2j+1] + x[2j] w[2j]
 * (+ y with FF_ACC, max(0, .) with FF_RELU): each product of two bfloat16 is
 * exact in float32, each add rounded, as AVX-512 BF16's VDPBF16PS does (but
 * for subnormals, which it takes as zero). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* one float -> bfloat16 bits, to nearest even; a NaN stays a (quiet) NaN */
static inline uint16_t FF_B16(b16_of)(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)(u >> 16 | 0x40u);
  return (uint16_t)((u + 0x7FFFu + (u >> 16 & 1u)) >> 16);
}

static inline float FF_B16(b16_value)(uint16_t h) {
  const uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

#ifndef FF_B16_ROW
static void FF_B16(b16_round_row)(const float *x, int IN, uint16_t *q) {
  for (int i = 0; i < IN; i++) q[i] = FF_B16(b16_of)(x[i]);
  if (IN % 2) q[IN] = 0;
}
#define FF_B16_ROW FF_B16(b16_round_row)
#endif

/* x [T, IN] -> q: T rows of IN2 bfloat16 (above) */
FF_KERNEL void FF_B16(bf16_rows)(const float *x, int T, int IN, float *q) {
  const size_t IN2 = (size_t)(IN + 1) / 2 * 2;
  for (int t = 0; t < T; t++) FF_B16_ROW(x + (size_t)t * IN, IN, (uint16_t *)(void *)q + (size_t)t * IN2);
}

#if !defined(FF_B16_TILE) || defined(FF_B16_PLAIN)
/* Before the loop over a tile's columns: under GCC it stays a loop, which is
 * vectorised at every level.  At -O3 GCC unrolled it whole, then built vectors
 * from the copies a weight at a time, through shuffles: the base encoder with
 * bf16 compute (emit --isa generic) took 520 ms at gcc -O3 against 185 at -O2
 * (now 200 and 185; 90 at -O3 -march=native, 364 before).  clang does better
 * with the loop unrolled where the vectors are wide (AVX-512: 219 GFLOP/s
 * against 95), so it keeps its own choice. */
#if defined(__GNUC__) && !defined(__clang__) && !defined(__TINYC__)
#define FF_B16_COLUMNS _Pragma("GCC unroll 1")
#else
#define FF_B16_COLUMNS
#endif
/* the plain tile: m <= MR rows of A (bfloat16 pairs, every lda pairs) times
 * the panel's n <= NR columns, then + b (+ y), max(0, .) into y (rows every
 * ldy floats) */
static void FF_B16(b16_tile_plain)(int m, int n, int pairs, const uint32_t *A, size_t lda, const uint32_t *panel,
                               const float *b, float *y, size_t ldy, int flags) {
  float acc[FF_B16_MR][FF_B16_NR];
  for (int i = 0; i < m; i++)
    for (int c = 0; c < FF_B16_NR; c++) acc[i][c] = 0.0f;
  for (int k = 0; k < pairs; k++) {
    const uint32_t *w = panel + (size_t)k * FF_B16_NR;
    for (int i = 0; i < m; i++) {
      const uint32_t a = A[(size_t)i * lda + (size_t)k];
      const float a0 = FF_B16(b16_value)((uint16_t)(a & 0xFFFFu)), a1 = FF_B16(b16_value)((uint16_t)(a >> 16));
      FF_B16_COLUMNS
      for (int c = 0; c < FF_B16_NR; c++) {
        acc[i][c] += a1 * FF_B16(b16_value)((uint16_t)(w[c] >> 16)); /* (the products are exact) */
        acc[i][c] += a0 * FF_B16(b16_value)((uint16_t)(w[c] & 0xFFFFu));
      }
    }
  }
  for (int i = 0; i < m; i++) {
    float *yr = y + (size_t)i * ldy;
    for (int c = 0; c < n; c++) {
      float v = acc[i][c] + (b ? b[c] : 0.0f);
      if (flags & FF_ACC) v += yr[c];
      yr[c] = (flags & FF_RELU) && v < 0.0f ? 0.0f : v;
    }
  }
}
#endif
#ifndef FF_B16_TILE
#define FF_B16_TILE FF_B16(b16_tile_plain)
#endif

/* y [T, OUT] (+)= the product of the rounded rows q and the packed W (above),
 * columns j0 .. j1-1 (j0 a multiple of NR): panel by panel, each row tile
 * over the whole of k */
FF_KERNEL void FF_B16(linear_dpbf16)(const float *q, int T, int IN, const void *W, const float *b, int OUT, float *y,
                                     int flags, int j0, int j1) {
  const int pairs = (IN + 1) / 2;
  const uint32_t *A = (const uint32_t *)(const void *)q;
  for (int j = j0; j < j1; j += FF_B16_NR) {
    const uint32_t *panel = (const uint32_t *)W + (size_t)FF_B16_NR * pairs * (size_t)(j / FF_B16_NR);
    const int n = OUT - j < FF_B16_NR ? OUT - j : FF_B16_NR;
    for (int i = 0; i < T; i += FF_B16_MR)
      FF_B16_TILE(T - i < FF_B16_MR ? T - i : FF_B16_MR, n, pairs, A + (size_t)i * pairs, (size_t)pairs, panel,
                  b ? b + j : NULL, y + (size_t)i * OUT + j, (size_t)OUT, flags);
  }
}
