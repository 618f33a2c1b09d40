/* drivers.c - the matrix products on one ISA's register tile.  The ISA's
 * file defines, then includes this (emitted code gets the text in place of
 * the #include):
 *   FF_MATMUL, FF_LINEAR, FF_LINEAR_LD, FF_LINEAR_TA  the functions' names,
 *                       ff_matmul_ISA, ff_linear_ISA, ff_linear_ld_ISA,
 *                       ff_linear_ta_ISA
 *   FF_LIN_MR, FF_LIN_NR, FF_LIN_KC   the tile's rows and columns, and the k
 *                       per pass over a panel (its slice stays in L1)
 *   FF_LIN_TILE         tile(m, n, k, A, lda, B, ldb, C, ldc, bias, alpha,
 *                       flags, pf, pfs): C = alpha A B + bias (+ C, FF_ACC),
 *                       max(0, .) (FF_RELU) for m <= MR rows, n <= NR
 *                       columns; it fetches the line at pf + pfs p into L1
 *                       at every second step p of k (so a share of more
 *                       than k/2 lines, as when T <= MR, is fetched in part:
 *                       a hint, which the results do not depend on)
 *   FF_LIN_TILE_TA      (optional) the same tile reading A transposed, A [k, m]
 *                       with rows every lda (else ff_linear_ta copies A out)
 * ff_matmul: C [m, n] = alpha A [m, k] B [k, n] + bias (+ C), any B (rows
 * every ldb floats), tile by tile (no fetch ahead: B is attention's, small).
 * ff_linear: y [T, OUT] = x [T, IN] W + b, W packed in panels of NR columns
 * (panel p: W^T [:, NR p .. NR p + NR-1] as IN rows of NR floats,
 * zero-padded past OUT); only columns j0 .. j1-1 (j0 a multiple of NR), so
 * that threads can share the panels.  Sums over k run in k order per output,
 * like the reference.
 * ff_linear_ld: the same with x's rows every ldx floats and y's every ldy
 * (a training step's logits: a row of 2^n floats puts a tile's rows in the
 * same cache sets, and the step pads it); ff_linear_ta with x given as x^T
 * (a weight's gradient, dY^T X, from dY). */
#include <stdint.h>

/* @part matmul: tile */
FF_KERNEL void FF_MATMUL(int m, int n, int k, const float *A, int lda, const float *B, int ldb, float *C, int ldc,
                         const float *bias, float alpha, int flags) {
  for (int j = 0; j < n; j += FF_LIN_NR)
    for (int i = 0; i < m; i += FF_LIN_MR)
      FF_LIN_TILE(m - i < FF_LIN_MR ? m - i : FF_LIN_MR, n - j < FF_LIN_NR ? n - j : FF_LIN_NR, k,
                  A + (size_t)i * lda, lda, B + j, ldb, C + (size_t)i * ldc + j, ldc, bias ? bias + j : NULL, alpha,
                  flags, (uintptr_t)B, 0);
}

/* @part linear: tile */
/* Rows a block at most: its x for one pass (rows x KC floats) within
 * 128 KB, so that it stays in L2 while every panel passes over it; a
 * large T (the rows of a training step's products) goes in equal blocks,
 * panel by panel in each.  Each output still sums over k in k order. */
#define FF_LIN_BLOCK_ROWS (131072 / (int)sizeof(float) / FF_LIN_KC / FF_LIN_MR * FF_LIN_MR)

#define FF_LIN_CAT_(a, b) a##b
#define FF_LIN_CAT(a, b) FF_LIN_CAT_(a, b)
#define FF_LIN_BLOCK FF_LIN_CAT(FF_LINEAR, _block) /* ff_linear_ISA_block */

/* a tile as FF_LIN_TILE's (FF_LIN_TILE_TA: A transposed) */
typedef void (*FF_LIN_CAT(FF_LINEAR, _tile_fn))(int m, int n, int k, const float *A, int lda, const float *B, int ldb,
                                                 float *C, int ldc, const float *bias, float alpha, int flags,
                                                 uintptr_t pf, int pfs);

/* rows 0 .. T-1 of x (rows every ldx floats) and y (every ldy), a block of ff_linear's on
 * FF_LIN_TILE; with ta (FF_LIN_TILE_TA), x given as x^T [IN, T], its rows every ldx */
static void FF_LIN_BLOCK(FF_LIN_CAT(FF_LINEAR, _tile_fn) ta, const float *x, int ldx, int T, int IN, const float *W,
                         const float *b, int OUT, float *y, int ldy, int flags, int j0, int j1) {
  const int tiles = (T + FF_LIN_MR - 1) / FF_LIN_MR;
  for (int j = j0; j < j1; j += FF_LIN_NR)       /* panel by panel: W is read once a block, front to back */
    for (int k0 = 0; k0 < IN; k0 += FF_LIN_KC) { /* the first pass stores (+ b), later ones add */
      const int kc = IN - k0 < FF_LIN_KC ? IN - k0 : FF_LIN_KC, last = k0 + kc == IN;
      const int f = (k0 ? FF_ACC : flags & FF_ACC) | (last ? flags & FF_RELU : 0), fetch = !k0 && flags & FF_FETCH;
      const float *panel = W + (size_t)j * IN + (size_t)k0 * FF_LIN_NR;
      /* The next pass's slice of W (the next k block, else the next panel's
       * first) follows this one in memory: each tile fetches its share of it,
       * spread over its steps of k, so that the next pass does not start on
       * DRAM misses.  Addresses are integers: a fetch past W is harmless, a
       * pointer past it would not be.  A block of one row tile (decoding)
       * reads W once, front to back, which the hardware's stream prefetch
       * follows by itself; one tile's share, a line in four of the next
       * slice, only got in its way (a decoder's weights streamed 16 % faster
       * without it): its fetches stay on the first line of its own slice. */
      const int next_kc = !last ? (IN - k0 - kc < FF_LIN_KC ? IN - k0 - kc : FF_LIN_KC)
                          : j + FF_LIN_NR < j1 ? (IN < FF_LIN_KC ? IN : FF_LIN_KC) : 0;
      const int lines = next_kc * FF_LIN_NR / 16, share = (lines + tiles - 1) / tiles, ahead = tiles > 1;
      const int pfs = ahead ? (64 * share + kc - 1) / kc : 0;
      const uintptr_t next = (uintptr_t)panel + (ahead ? sizeof(float) * (size_t)kc * FF_LIN_NR : 0);
      for (int i = 0; i < T; i += FF_LIN_MR) {
        /* FF_FETCH: the next tile's rows of y into L2 while this tile runs (y is memory the
         * caller has not touched for a while, a training step's activations, and a row of 2^n
         * floats puts a tile's rows in the same L1 sets, where store misses queue) */
        for (int r = i + FF_LIN_MR; fetch && r < i + 2 * FF_LIN_MR && r < T; r++)
          for (int c = 0; c < FF_LIN_NR && j + c < OUT; c += 16) __builtin_prefetch(y + (size_t)r * ldy + j + c, 1, 2);
        if (!ta) /* (a direct call: the common case, which compilers specialise) */
          FF_LIN_TILE(T - i < FF_LIN_MR ? T - i : FF_LIN_MR, OUT - j < FF_LIN_NR ? OUT - j : FF_LIN_NR, kc,
                      x + (size_t)i * ldx + k0, ldx, panel, FF_LIN_NR, y + (size_t)i * ldy + j, ldy,
                      b && !k0 ? b + j : NULL, 1.0f, f, next + (uintptr_t)64 * share * (i / FF_LIN_MR), pfs);
        else
          ta(T - i < FF_LIN_MR ? T - i : FF_LIN_MR, OUT - j < FF_LIN_NR ? OUT - j : FF_LIN_NR, kc,
             x + (size_t)k0 * ldx + i, ldx, panel, FF_LIN_NR, y + (size_t)i * ldy + j, ldy, b && !k0 ? b + j : NULL,
             1.0f, f, next + (uintptr_t)64 * share * (i / FF_LIN_MR), pfs);
      }
    }
}

/* ff_linear_ld (ta NULL) and ff_linear_ta (ta FF_LIN_TILE_TA) in blocks of rows */
static void FF_LIN_CAT(FF_LINEAR, _rows)(FF_LIN_CAT(FF_LINEAR, _tile_fn) ta, const float *x, int ldx, int T, int IN,
                                          const float *W, const float *b, int OUT, float *y, int ldy, int flags,
                                          int j0, int j1) {
  const int most = FF_LIN_BLOCK_ROWS > FF_LIN_MR ? FF_LIN_BLOCK_ROWS : FF_LIN_MR;
  if (T <= most) { /* one block, the usual case */
    FF_LIN_BLOCK(ta, x, ldx, T, IN, W, b, OUT, y, ldy, flags, j0, j1);
    return;
  }
  const int blocks = (T + most - 1) / most, per = (T + blocks - 1) / blocks;
  const int rows = (per + FF_LIN_MR - 1) / FF_LIN_MR * FF_LIN_MR;
  for (int i0 = 0; i0 < T; i0 += rows)
    FF_LIN_BLOCK(ta, ta ? x + i0 : x + (size_t)i0 * ldx, ldx, T - i0 < rows ? T - i0 : rows, IN, W, b, OUT,
                 y + (size_t)i0 * ldy, ldy, flags, j0, j1);
}

FF_KERNEL void FF_LINEAR_LD(const float *x, int ldx, int T, int IN, const float *W, const float *b, int OUT, float *y,
                            int ldy, int flags, int j0, int j1) {
  FF_LIN_CAT(FF_LINEAR, _rows)(NULL, x, ldx, T, IN, W, b, OUT, y, ldy, flags, j0, j1);
}

FF_KERNEL void FF_LINEAR(const float *x, int T, int IN, const float *W, const float *b, int OUT, float *y, int flags,
                         int j0, int j1) {
  FF_LINEAR_LD(x, IN, T, IN, W, b, OUT, y, OUT, flags, j0, j1);
}

/* @part linear_ta: linear */
/* y [T, OUT] (+)= x W + b with x given transposed, xt [IN, T] (rows every ldx floats): a
 * weight's gradient dW [out, in] += dY^T X reads dY [R, out] itself, no dY^T written; y's rows
 * every ldy.  The same sums as ff_linear on x. */
FF_KERNEL void FF_LINEAR_TA(const float *xt, int ldx, int T, int IN, const float *W, const float *b, int OUT,
                            float *y, int ldy, int flags, int j0, int j1) {
#ifdef FF_LIN_TILE_TA
  FF_LIN_CAT(FF_LINEAR, _rows)(FF_LIN_TILE_TA, xt, ldx, T, IN, W, b, OUT, y, ldy, flags, j0, j1);
#else /* an ISA without a transposed tile: each tile's rows of x copied out of xt once a k block,
       * for every panel (each output still takes its k blocks in order) */
  float a[FF_LIN_MR * FF_LIN_KC];
  for (int k0 = 0; k0 < IN; k0 += FF_LIN_KC) {
    const int kc = IN - k0 < FF_LIN_KC ? IN - k0 : FF_LIN_KC, last = k0 + kc == IN;
    const int f = (k0 ? FF_ACC : flags & FF_ACC) | (last ? flags & FF_RELU : 0);
    for (int i = 0; i < T; i += FF_LIN_MR) {
      const int m = T - i < FF_LIN_MR ? T - i : FF_LIN_MR;
      for (int r = 0; r < m; r++)
        for (int p = 0; p < kc; p++) a[r * kc + p] = xt[(size_t)(k0 + p) * ldx + i + r];
      for (int j = j0; j < j1; j += FF_LIN_NR)
        FF_LIN_TILE(m, OUT - j < FF_LIN_NR ? OUT - j : FF_LIN_NR, kc, a, kc, W + (size_t)j * IN + (size_t)k0 * FF_LIN_NR,
                    FF_LIN_NR, y + (size_t)i * ldy + j, ldy, b && !k0 ? b + j : NULL, 1.0f, f, (uintptr_t)W, 0);
    }
  }
#endif
}
