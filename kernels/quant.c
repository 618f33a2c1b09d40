/* quant.c - the matrix products on bf16 and int8 weights (issue 13) on one
 * ISA's kernels.  The ISA's file defines, then includes this after drivers.c
 * (emitted code gets the text in place of the #include), and defines after
 * it the two GEMVs:
 *   FF_QUANT(name)      this ISA's name of a function: ff_name_ISA
 *   FF_LIN_MR, FF_LIN_NR, FF_LIN_KC, FF_LIN_TILE   as drivers.c (KC a
 *                       multiple of 32, the int8 group)
 *   FF_GEMV_PANELS      how many panels the GEMVs take at once (1, 2 or 4)
 *   FF_QUANT_TILE_FIRST(dtype, kc, A, lda, src, buf, C, ldc, bias, flags, pf, pfs)
 *                       optional: the first tile of MR rows on a whole panel's
 *                       k block, which converts the block from src (the
 *                       packed bytes at k0) into buf [kc, NR] as it multiplies
 *   FF_DEQUANT_BF16(w, n, buf), FF_DEQUANT_Q8(q, scale, rows, buf)   optional:
 *                       the ISA's vector conversion of n bf16 (n a multiple
 *                       of 16), and of `rows` rows of one int8 group (NR
 *                       columns, scale [NR]), into floats (the exact values)
 *   FF_QUANT(gemv_bf16_p)(P, x, IN, W, panel_bytes, acc), FF_QUANT(gemv_q8_p)
 *                       (same): one row of x times P <= FF_GEMV_PANELS (a
 *                       constant) consecutive packed panels from W, acc [P NR] = their
 *                       dot products (the columns past OUT are zero weights),
 *                       each summed in k order (int8: a group's x q sums in k
 *                       order, scaled, summed in group order; several panels
 *                       at once give independent FMA chains without
 *                       reordering the sums)
 * ff_linear_bf16_ISA, ff_linear_q8_ISA: y [T, OUT] = x [T, IN] W^T + b,
 * flags and the columns j0 .. j1-1 as ff_linear_ISA (drivers.c), W packed
 * (NR the panel width, G = (IN + 31) / 32 groups of k):
 *   bf16: W[NR p + c][k] at uint16 index p IN NR + k NR + c, value bits << 16
 *   int8: panel p at byte p G 36 NR, its group g at g 36 NR: NR float scales,
 *         then 32 rows of NR int8 (q[k][c] at 4 NR + (k % 32) NR + c):
 *         W[NR p + c][k] = (float)q * scale[c]; padding q 0, scale 0.
 * Decoding (T = 1) is memory-bound: the ISA's GEMV reads each weight byte
 * once and widens it in registers (up to MR rows: row by row, see
 * FF_GEMV_ROWS).  More rows dequantize a k block of the panel (KC x NR
 * floats, in L1) once and run the f32 register tile over every row tile on
 * it, as ff_linear does on f32 panels: the dequantizing is then one pass
 * over the weights per call, the tile does the arithmetic. */
#include <stddef.h>
#include <stdint.h>

/* Up to MR rows (decoding, small batches) take the GEMV row by row, the
 * rows after the first reading the panels from L2; more take the tile.
 * Measured with bench_gemv on 32000 x 768 (avx512, GB/s of weights, bf16 /
 * int8): T = 2 GEMV 25.8 / 16.4, tile 13.5 / 8.8; T = 4 21.6 / 10.9 against
 * 9.7 / 7.1; T = 8 14.4 / 6.7 against 8.9 / 5.4; T = 16 7.0 / 3.0 against
 * 6.2 / 3.9 (avx2 alike). */
#define FF_GEMV_ROWS FF_LIN_MR
#if FF_LIN_KC % 32 || FF_LIN_KC < FF_GEMV_PANELS
#error "quant.c: the k block must hold whole int8 groups of 32 (and the GEMV's sums)"
#endif

/* the ISA's GEMVs, defined after this file */
static inline void FF_QUANT(gemv_bf16_p)(const int P, const float *x, int IN, const unsigned char *W,
                                         size_t panel_bytes, float *acc);
static inline void FF_QUANT(gemv_q8_p)(const int P, const float *x, int IN, const unsigned char *W,
                                       size_t panel_bytes, float *acc);

/* np <= FF_GEMV_PANELS panels of one type: the count becomes a constant */
static void FF_QUANT(gemv)(int q8, const float *x, int IN, const unsigned char *W, size_t pb, int np, float *acc) {
#define FF_GEMV_CASE(P)                                                                                               \
  if (q8) FF_QUANT(gemv_q8_p)(P, x, IN, W, pb, acc);                                                                  \
  else FF_QUANT(gemv_bf16_p)(P, x, IN, W, pb, acc);                                                                   \
  break;
  switch (np) {
#if FF_GEMV_PANELS >= 4
  case 4: FF_GEMV_CASE(4)
  case 3: FF_GEMV_CASE(3)
#endif
#if FF_GEMV_PANELS >= 2
  case 2: FF_GEMV_CASE(2)
#endif
  default: FF_GEMV_CASE(1)
  }
#undef FF_GEMV_CASE
}

#ifndef FF_DEQUANT_BF16 /* (an ISA with its own conversion does not need it) */
/* one bf16 weight: the high half of its float */
static inline float FF_QUANT(bf16_value)(uint16_t h) {
  union {
    uint32_t u;
    float f;
  } v;
  v.u = (uint32_t)h << 16;
  return v.f;
}
#endif

/* rows k0 .. k0+kc-1 of a bf16 panel -> buf [kc, NR] floats */
static void FF_QUANT(dequant_bf16)(const uint16_t *panel, int k0, int kc, float *buf) {
  const uint16_t *w = panel + (size_t)k0 * FF_LIN_NR;
#ifdef FF_DEQUANT_BF16 /* the ISA's vector conversion (NR a multiple of 16) */
  FF_DEQUANT_BF16(w, kc * FF_LIN_NR, buf);
#else
  for (int i = 0; i < kc * FF_LIN_NR; i++) buf[i] = FF_QUANT(bf16_value)(w[i]);
#endif
}

/* rows k0 .. k0+kc-1 (k0 a multiple of 32) of an int8 panel -> buf [kc, NR]:
 * the exact float product q scale, as the reference dequantizes */
static void FF_QUANT(dequant_q8)(const unsigned char *panel, int k0, int kc, float *buf) {
  for (int p = 0; p < kc; p += 32) {
    const unsigned char *group = panel + (size_t)((k0 + p) / 32) * 36 * FF_LIN_NR;
    const float *scale = (const float *)(const void *)group;
    const signed char *q = (const signed char *)(group + 4 * FF_LIN_NR);
    const int rows = kc - p < 32 ? kc - p : 32;
#ifdef FF_DEQUANT_Q8 /* the ISA's vector conversion of one group's rows */
    FF_DEQUANT_Q8(q, scale, rows, buf + (size_t)p * FF_LIN_NR);
#else
    for (int r = 0; r < rows; r++)
      for (int c = 0; c < FF_LIN_NR; c++)
        buf[(size_t)(p + r) * FF_LIN_NR + c] = (float)q[r * FF_LIN_NR + c] * scale[c];
#endif
  }
}

/* The GEMV's epilogue, as the tile's: y = acc + b (+ y), max(0, .) (NaN stays) */
static void FF_QUANT(store_q)(const float *acc, int n, const float *b, float *y, int flags) {
  for (int c = 0; c < n; c++) {
    float r = acc[c] + (b ? b[c] : 0.0f);
    if (flags & FF_ACC) r += y[c];
    y[c] = (flags & FF_RELU) && r < 0.0f ? 0.0f : r;
  }
}

/* The driver of both types: dtype 0 bf16, 1 int8; panel_bytes the size of
 * one packed panel. */
static void FF_QUANT(linear_quant)(int dtype, const float *x, int T, int IN, const unsigned char *W,
                                   size_t panel_bytes, const float *b, int OUT, float *y, int flags, int j0,
                                   int j1) {
#if defined(__GNUC__) || defined(__TINYC__)
  float buf[FF_LIN_KC * FF_LIN_NR] __attribute__((aligned(64)));
#else
  float buf[FF_LIN_KC * FF_LIN_NR];
#endif
  for (int j = j0; j < j1; j += FF_LIN_NR) {
    const unsigned char *panel = W + panel_bytes * (size_t)(j / FF_LIN_NR);
    const int n = OUT - j < FF_LIN_NR ? OUT - j : FF_LIN_NR;
    if (T <= FF_GEMV_ROWS) { /* decoding: straight from the packed bytes, np panels at once */
      const int left = (j1 - j + FF_LIN_NR - 1) / FF_LIN_NR, np = left < FF_GEMV_PANELS ? left : FF_GEMV_PANELS;
      for (int t = 0; t < T; t++) { /* rows after the first read the panels from L2 */
        FF_QUANT(gemv)(dtype, x + (size_t)t * IN, IN, panel, panel_bytes, np, buf);
        for (int q = 0; q < np; q++) {
          const int c = j + q * FF_LIN_NR, w = OUT - c < FF_LIN_NR ? OUT - c : FF_LIN_NR;
          FF_QUANT(store_q)(buf + q * FF_LIN_NR, w, b ? b + c : NULL, y + (size_t)t * OUT + c, flags);
        }
      }
      j += (np - 1) * FF_LIN_NR;
      continue;
    }
    const int tiles = (T + FF_LIN_MR - 1) / FF_LIN_MR;
    for (int k0 = 0; k0 < IN; k0 += FF_LIN_KC) { /* the first pass stores (+ b), later ones add */
      const int kc = IN - k0 < FF_LIN_KC ? IN - k0 : FF_LIN_KC, last = k0 + kc == IN;
      const int f = (k0 ? FF_ACC : flags & FF_ACC) | (last ? flags & FF_RELU : 0);
      /* the packed bytes of this block, and the next block's (the next k, else the next panel's first: they
       * follow in memory), which the tiles fetch into L1 in shares over their steps of k, as drivers.c
       * does, so that the next dequantization does not start on DRAM misses */
      const size_t at = dtype ? (size_t)k0 / 32 * 36 * FF_LIN_NR : sizeof(uint16_t) * (size_t)k0 * FF_LIN_NR;
      const size_t bytes = dtype ? (size_t)(kc + 31) / 32 * 36 * FF_LIN_NR : sizeof(uint16_t) * (size_t)kc * FF_LIN_NR;
      const int lines = (int)(bytes / 64), share = (lines + tiles - 1) / tiles, pfs = (64 * share + kc - 1) / kc;
      const uintptr_t next = last && j + FF_LIN_NR >= j1 ? 0 : (uintptr_t)(panel + at + bytes);
      int i = 0;
#ifdef FF_QUANT_TILE_FIRST /* the ISA's first tile converts the block as it multiplies */
      if (n == FF_LIN_NR && T >= FF_LIN_MR) {
        FF_QUANT_TILE_FIRST(dtype, kc, x + k0, IN, panel + at, buf, y + j, OUT, b && !k0 ? b + j : NULL,
                            f, next ? next : (uintptr_t)buf, next ? pfs : 0);
        i = FF_LIN_MR;
      } else
#endif
      if (dtype) FF_QUANT(dequant_q8)(panel, k0, kc, buf);
      else FF_QUANT(dequant_bf16)((const uint16_t *)(const void *)panel, k0, kc, buf);
      for (; i < T; i += FF_LIN_MR)
        FF_LIN_TILE(T - i < FF_LIN_MR ? T - i : FF_LIN_MR, n, kc, x + (size_t)i * IN + k0, IN, buf, FF_LIN_NR,
                    y + (size_t)i * OUT + j, OUT, b && !k0 ? b + j : NULL, 1.0f, f,
                    next ? next + (uintptr_t)64 * share * (i / FF_LIN_MR) : (uintptr_t)buf, next ? pfs : 0);
    }
  }
}

FF_KERNEL void FF_QUANT(linear_bf16)(const float *x, int T, int IN, const void *W, const float *b, int OUT, float *y,
                                     int flags, int j0, int j1) {
  FF_QUANT(linear_quant)(0, x, T, IN, (const unsigned char *)W, sizeof(uint16_t) * (size_t)IN * FF_LIN_NR, b, OUT,
                         y, flags, j0, j1);
}

FF_KERNEL void FF_QUANT(linear_q8)(const float *x, int T, int IN, const void *W, const float *b, int OUT, float *y,
                                   int flags, int j0, int j1) {
  FF_QUANT(linear_quant)(1, x, T, IN, (const unsigned char *)W, (size_t)(IN + 31) / 32 * 36 * FF_LIN_NR, b, OUT, y,
                         flags, j0, j1);
}
