/* gemm_generic.c - the portable matrix kernels: a 4 x 16 tile of plain C
 * loops with constant bounds, which compilers keep in vector registers where
 * the target has them.  Weights are packed in panels of 16 columns: panel p
 * holds W^T[:, 16p .. 16p+15] as IN rows of 16 floats, zero-padded past OUT.
 * The contract is that of every ISA (see gemm_avx512.c):
 *   ff_matmul_*  C [m, n] = alpha A [m, k] B [k, n] + bias [n] (+ C when flags
 *                has FF_ACC), then max(0, .) with FF_RELU;
 *   ff_linear_*  y [T, OUT] = x [T, IN] W + b, W packed in panels; only
 *                columns j0 .. j1-1 (j0 a multiple of 16);
 *   ff_attention_*  heads h0 .. h1-1 of multi-head attention (below). */
#include <math.h>
#include <stddef.h>

#ifndef FF_KERNEL
#define FF_KERNEL
#endif
#ifndef FF_ACC
#define FF_ACC 1  /* C += the product instead of C = */
#define FF_RELU 2 /* then C = max(0, C) */
#endif
#define FF_GENERIC_MR 4
#define FF_GENERIC_NR 16

/* One tile: m <= 4 rows (rows past m repeat the last and are not stored),
 * n <= 16 columns. */
static void ff_tile_generic(int m, int n, int k, const float *A, int lda, const float *B, int ldb, float *C, int ldc,
                            const float *bias, float alpha, int flags) {
  float acc[FF_GENERIC_MR][FF_GENERIC_NR] = {{0.0f}};
  const float *a[FF_GENERIC_MR];
  for (int i = 0; i < FF_GENERIC_MR; i++) a[i] = A + (size_t)(i < m ? i : m - 1) * lda;
  if (n == FF_GENERIC_NR) {
    for (int p = 0; p < k; p++) {
      const float *b = B + (size_t)p * ldb;
      for (int i = 0; i < FF_GENERIC_MR; i++)
        for (int j = 0; j < FF_GENERIC_NR; j++) acc[i][j] += a[i][p] * b[j];
    }
  } else {
    for (int p = 0; p < k; p++) {
      const float *b = B + (size_t)p * ldb;
      for (int i = 0; i < FF_GENERIC_MR; i++)
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

FF_KERNEL void ff_matmul_generic(int m, int n, int k, const float *A, int lda, const float *B, int ldb, float *C,
                                 int ldc, const float *bias, float alpha, int flags) {
  for (int j = 0; j < n; j += FF_GENERIC_NR)
    for (int i = 0; i < m; i += FF_GENERIC_MR)
      ff_tile_generic(m - i < FF_GENERIC_MR ? m - i : FF_GENERIC_MR, n - j < FF_GENERIC_NR ? n - j : FF_GENERIC_NR, k,
                      A + (size_t)i * lda, lda, B + j, ldb, C + (size_t)i * ldc + j, ldc, bias ? bias + j : 0, alpha,
                      flags);
}

FF_KERNEL void ff_linear_generic(const float *x, int T, int IN, const float *W, const float *b, int OUT, float *y,
                                 int flags, int j0, int j1) {
  for (int j = j0; j < j1; j += FF_GENERIC_NR)
    for (int i = 0; i < T; i += FF_GENERIC_MR)
      ff_tile_generic(T - i < FF_GENERIC_MR ? T - i : FF_GENERIC_MR, OUT - j < FF_GENERIC_NR ? OUT - j : FF_GENERIC_NR,
                      IN, x + (size_t)i * IN, IN, W + (size_t)j * IN, FF_GENERIC_NR, y + (size_t)i * OUT + j, OUT,
                      b ? b + j : 0, 1.0f, flags);
}

/* Scaled dot-product attention, every head: out [Tq, heads*dk] =
 * softmax(scale Q K^T + mask) V, with the contract of ff_attention_avx512:
 * q rows every ldq floats, k and v = k + heads*dk rows every ldk; key j
 * masked when j >= key_len or (causal) j > q_pos0 + t; heads h0 .. h1-1.  Per head, K^T is
 * gathered once, then per block of 4 query rows S = scale Q K^T, a softmax
 * per row (the row max subtracted) and O = P V.
 * scratch: (dk + 8) * pad16(key_len) floats. */
FF_KERNEL void ff_attention_generic(const float *q, int ldq, const float *k, int ldk, int Tq, int key_len, int heads,
                                    int dk, int h0, int h1, int causal, int q_pos0, float scale, float *scratch,
                                    float *out) {
  const int d = heads * dk, ld = (key_len + 15) & ~15;
  float *kt = scratch, *s = scratch + (size_t)dk * ld;
  for (int h = h0; h < h1; h++) {
    for (int j = 0; j < key_len; j++) /* K^T [dk, key_len] of this head */
      for (int i = 0; i < dk; i++) kt[(size_t)i * ld + j] = k[(size_t)j * ldk + h * dk + i];
    for (int t0 = 0; t0 < Tq; t0 += FF_GENERIC_MR) {
      const int mb = Tq - t0 < FF_GENERIC_MR ? Tq - t0 : FF_GENERIC_MR;
      int nv = key_len; /* keys any row of the block sees */
      if (causal && q_pos0 + t0 + mb < nv) nv = q_pos0 + t0 + mb;
      if (nv <= 0) { /* every key masked: 0, as the reference */
        for (int t = t0; t < t0 + mb; t++)
          for (int i = 0; i < dk; i++) out[(size_t)t * d + h * dk + i] = 0.0f;
        continue;
      }
      ff_matmul_generic(mb, nv, dk, q + (size_t)t0 * ldq + h * dk, ldq, kt, ld, s, ld, 0, scale, 0);
      for (int r = 0; r < mb; r++) { /* softmax over the keys row r sees; the rest 0 */
        float *row = s + (size_t)r * ld, max = -3.402823466e+38f, sum = 0.0f;
        const int visible = causal && q_pos0 + t0 + r + 1 < nv ? q_pos0 + t0 + r + 1 : nv;
        for (int j = 0; j < visible; j++) max = row[j] > max ? row[j] : max;
        for (int j = 0; j < visible; j++) sum += row[j] = expf(row[j] - max);
        for (int j = 0; j < visible; j++) row[j] *= 1.0f / sum;
        for (int j = visible; j < nv; j++) row[j] = 0.0f;
      }
      ff_matmul_generic(mb, dk, nv, s, ld, k + d + h * dk, ldk, out + (size_t)t0 * d + h * dk, d, 0, 1.0f, 0);
    }
  }
}
