/* sdpa.c - scaled dot-product attention on top of one ISA's matrix
 * kernels; the ISA's file defines, then includes this (emitted code gets the
 * text in place of the #include):
 *   FF_SDPA              the function's name, ff_sdpa_ISA
 *   FF_SDPA_MR           query rows per block (the tile's rows, at most 8)
 *   FF_SDPA_MATMUL       the ISA's ff_matmul_ISA
 *   FF_SDPA_SOFTMAX_ROWS  softmax(s, ld, m, v0, dv, n): rows r < m <= 8 of s
 *                       (rows every ld floats), row r over row[0 .. visible),
 *                       visible = min(v0 + r dv, n), in place, the row max
 *                       subtracted; row[visible .. n) = 0 (if not defined:
 *                       FF_SDPA_SOFTMAX_ROW(row, visible, n) on each row, else
 *                       the scalar one below, with expf)
 *   FF_SDPA_GATHER      gather(k, ldk, key_len, dk, kt, ld): kt [dk, key_len]
 *                       (rows every ld >= key_len floats) = K^T, K [key_len, dk]
 *                       with rows every ldk (optional: element by element)
 *   FF_SDPA_DOT, FF_SDPA_AXPY  q . k and y += p x over n floats (optional:
 *                       plain C below)
 *
 * Every head h0 .. h1-1: out [Tq, heads*dk] = softmax(scale Q K^T + mask) V.
 * q rows every ldq floats (head h at columns h*dk); k rows every ldk with
 * kv_heads heads, v = k + kv_heads*dk with the same stride: query head h
 * reads K/V head h / (heads / kv_heads) (grouped-query attention; the heads
 * of a group share one gathered K^T).  Key j is masked when j >= key_len, or
 * (causal) j > q_pos0 + t for query row t.  Per head, K^T is gathered once,
 * then for each block of FF_SDPA_MR query rows the scores S = scale Q K^T over
 * the keys the block sees, a softmax row by row and O = P V are tile
 * products: at most FF_SDPA_MR rows of the T x T scores exist at a time.
 * A masked key is absent for its row (its score and value are not used), so
 * a NaN in a later or padded position does not reach the row.
 * scratch: (dk + 8) * pad16(key_len) floats (threads take a head range and
 * scratch each). */

/* The scratch is K^T (dk rows) and one block of score rows: the plan
 * (gen/plan.lua) sizes it (dk + 8) x pad16(key_len), so a block may have at
 * most 8 rows.  A wider tile fails to compile here (C99: no _Static_assert). */
typedef char ff_sdpa_scratch_holds_the_block[(FF_SDPA_MR) <= 8 ? 1 : -1];
#ifndef FF_SDPA_SOFTMAX_ROWS
#ifndef FF_SDPA_SOFTMAX_ROW /* (the rows one at a time) */
static void ff_softmax_row_scalar(float *row, int visible, int n) {
  float max = -3.402823466e+38f, sum = 0.0f;
  for (int j = 0; j < visible; j++) max = row[j] > max ? row[j] : max;
  for (int j = 0; j < visible; j++) sum += row[j] = expf(row[j] - max);
  for (int j = 0; j < visible; j++) row[j] *= 1.0f / sum;
  for (int j = visible; j < n; j++) row[j] = 0.0f;
}
#define FF_SDPA_SOFTMAX_ROW ff_softmax_row_scalar
#endif
static void ff_softmax_rows_plain(float *s, int ld, int m, int v0, int dv, int n) {
  for (int r = 0; r < m; r++) FF_SDPA_SOFTMAX_ROW(s + (size_t)r * ld, v0 + r * dv < n ? v0 + r * dv : n, n);
}
#define FF_SDPA_SOFTMAX_ROWS ff_softmax_rows_plain
#endif
#ifndef FF_SDPA_GATHER
static void ff_sdpa_gather_plain(const float *k, int ldk, int key_len, int dk, float *kt, int ld) {
  for (int j = 0; j < key_len; j++)
    for (int i = 0; i < dk; i++) kt[(size_t)i * ld + j] = k[(size_t)j * ldk + i];
}
#define FF_SDPA_GATHER ff_sdpa_gather_plain
#endif
#ifndef FF_SDPA_DOT
/* q . k over n floats, in 8 interleaved partial sums (vectorised at -O3) */
static float ff_sdpa_dot_scalar(const float *q, const float *k, int n) {
  float s[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; l++) s[l] += q[i + l] * k[i + l];
  for (; i < n; i++) s[0] += q[i] * k[i];
  return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}
#define FF_SDPA_DOT ff_sdpa_dot_scalar
#endif
#ifndef FF_SDPA_AXPY
/* y += p x over n floats */
static void ff_sdpa_axpy_scalar(float *y, float p, const float *x, int n) {
  for (int i = 0; i < n; i++) y[i] += p * x[i];
}
#define FF_SDPA_AXPY ff_sdpa_axpy_scalar
#endif

#define FF_SDPA_AHEAD 2 /* rows: measured 2, 4, 8 and 12 on avx512 (110M's shape), 2 as good as any */
#if defined(__GNUC__) && !defined(__TINYC__)
/* asks for n floats at p, FF_SDPA_AHEAD rows ahead (past the cache: a hint, never a fault) */
#define FF_SDPA_PREFETCH(p, n)                                                                                          \
  do {                                                                                                                  \
    for (int l_ = 0; l_ < (n); l_ += 16) __builtin_prefetch((p) + l_);                                                  \
  } while (0)
#else
#define FF_SDPA_PREFETCH(p, n) ((void)0)
#endif

/* One query row (decoding, T = 1), heads h0 .. h1-1, without gathering K^T
 * (that copy costs more than the row's own work): the scores are dot products
 * with K's rows where they lie, then O = sum_j P_j V_j in key order.  Key j
 * of every head is read in one pass along the cache's row j, so the reads
 * go forward through memory; at most dk + 8 heads at a time (the scratch's
 * score rows, pad16(key_len) apart). */
static void ff_sdpa_row(const float *q, const float *k, int ldk, int key_len, int heads, int kv_heads, int dk,
                        int h0, int h1, int causal, int q_pos0, float scale, float *s, float *out) {
  const int group = heads / kv_heads, ld = (key_len + 15) & ~15, most = dk + 8;
  int nv = key_len; /* the keys the row sees */
  if (causal && q_pos0 + 1 < nv) nv = q_pos0 + 1;
  for (int hb = h0; hb < h1; hb += most) {
    const int he = h1 - hb < most ? h1 : hb + most;
    for (int i = hb * dk; i < he * dk; i++) out[i] = 0.0f;
    if (nv <= 0) continue; /* every key masked: 0, as the reference */
    /* the K/V heads hb .. he-1 read: columns k0 .. k0+kn of K's (and V's) rows */
    const int k0 = hb / group * dk, kn = ((he - 1) / group + 1) * dk - k0;
    for (int j = 0; j < nv; j++) { /* S [heads, nv] = scale Q K^T */
      const float *kj = k + (size_t)j * ldk;
      if (j + FF_SDPA_AHEAD < nv) FF_SDPA_PREFETCH(kj + FF_SDPA_AHEAD * (size_t)ldk + k0, kn);
      for (int h = hb, kh = hb / group, g = hb % group; h < he; h++, g = g + 1 < group ? g + 1 : (kh++, 0))
        s[(size_t)(h - hb) * ld + j] = scale * FF_SDPA_DOT(q + h * dk, kj + kh * dk, dk);
    }
    for (int h = hb; h < he; h += 8) /* eight heads' rows at a time */
      FF_SDPA_SOFTMAX_ROWS(s + (size_t)(h - hb) * ld, ld, he - h < 8 ? he - h : 8, nv, 0, nv);
    for (int j = 0; j < nv; j++) { /* O [heads, dk] += P_j V_j */
      const float *vj = k + (size_t)j * ldk + kv_heads * dk;
      if (j + FF_SDPA_AHEAD < nv) FF_SDPA_PREFETCH(vj + FF_SDPA_AHEAD * (size_t)ldk + k0, kn);
      for (int h = hb, kh = hb / group, g = hb % group; h < he; h++, g = g + 1 < group ? g + 1 : (kh++, 0))
        FF_SDPA_AXPY(out + h * dk, s[(size_t)(h - hb) * ld + j], vj + kh * dk, dk);
    }
  }
}

FF_KERNEL void FF_SDPA(const float *q, int ldq, const float *k, int ldk, int Tq, int key_len, int heads,
                       int kv_heads, int dk, int h0, int h1, int causal, int q_pos0, float scale, float *scratch,
                       float *out) {
  if (Tq == 1) {
    ff_sdpa_row(q, k, ldk, key_len, heads, kv_heads, dk, h0, h1, causal, q_pos0, scale, scratch, out);
    return;
  }
  const int d = heads * dk, group = heads / kv_heads, ld = (key_len + 15) & ~15;
  float *kt = scratch, *s = scratch + (size_t)dk * ld;
  for (int h = h0; h < h1; h++) {
    const int kh = h / group;             /* the K/V head this query head reads */
    const float *v = k + (kv_heads + kh) * dk;
    if (h == h0 || (h - 1) / group != kh) /* K^T [dk, key_len] of the K/V head, once per group */
      FF_SDPA_GATHER(k + kh * dk, ldk, key_len, dk, kt, ld);
    for (int t0 = 0; t0 < Tq; t0 += FF_SDPA_MR) {
      const int mb = Tq - t0 < FF_SDPA_MR ? Tq - t0 : FF_SDPA_MR;
      int nv = key_len; /* keys any row of the block sees */
      if (causal && q_pos0 + t0 + mb < nv) nv = q_pos0 + t0 + mb;
      if (nv <= 0) { /* every key masked: 0, as the reference */
        for (int t = t0; t < t0 + mb; t++)
          for (int i = 0; i < dk; i++) out[(size_t)t * d + h * dk + i] = 0.0f;
        continue;
      }
      FF_SDPA_MATMUL(mb, nv, dk, q + (size_t)t0 * ldq + h * dk, ldq, kt, ld, s, ld, NULL, scale, 0);
      /* each row sees keys up to its own position */
      FF_SDPA_SOFTMAX_ROWS(s, ld, mb, causal ? q_pos0 + t0 + 1 : nv, causal, nv);
      /* O = P V over the keys every row of the block sees, then each row's
       * further keys (causal: fewer than FF_SDPA_MR) one by one, in key order:
       * a key masked for a row is not read for it, so that a NaN or inf in a
       * later position's value reaches no earlier row (0 * NaN would) */
      const int v0 = causal && q_pos0 + t0 + 1 < nv ? q_pos0 + t0 + 1 : nv;
      float *o = out + (size_t)t0 * d + h * dk;
      FF_SDPA_MATMUL(mb, dk, v0, s, ld, v, ldk, o, d, NULL, 1.0f, 0);
      for (int r = 1; r < mb && v0 < nv; r++)
        for (int j = v0; j < nv && j < q_pos0 + t0 + r + 1; j++) {
          const float p = s[(size_t)r * ld + j], *vj = v + (size_t)j * ldk;
          for (int i = 0; i < dk; i++) o[(size_t)r * d + i] += p * vj[i];
        }
    }
  }
}
