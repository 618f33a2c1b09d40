/* train.c - the kernels of generated training code on one ISA's matrix
 * kernels; the ISA's file defines, then includes this (emitted code gets the
 * text in place of the #include):
 *   FF_TRAIN(name)   the functions' names, ff_##name##_ISA
 *   FF_TRAIN_NR      the panel width of its matrix kernels (ff_linear_ISA)
 * and, from its sdpa part, FF_SDPA_MATMUL (ff_matmul_ISA), FF_SDPA_GATHER,
 * FF_SDPA_SOFTMAX_ROWS and FF_SDPA_DOT.  The libtcc engine gets the host's
 * build of them.
 *
 * A training step's matrix products are all ff_linear_ISA on panels that
 * ff_pack_ISA writes each step (the weights change every step):
 *   forward   Y [R, out] = X W^T + b   panels of W^T: pack(W, in, in, out, trans 1)
 *   dX        dX [R, in] = dY W         panels of W:   pack(W, in, out, in, trans 0)
 *   dW        dW [out, in] += dY^T X    ff_linear_ta_ISA on dY itself (the tile reads it
 *                                      transposed) times panels of X: pack(X, in, R, in, 0)
 * so every product runs on the ISA's register tile, sums over k in k order.
 * Attention (per sequence, per K/V head group) runs its products on
 * ff_matmul_ISA.  Dropout is runtime/ff_dropout.h's mask, computed again
 * where it is needed (never stored). */
#include <math.h>
#include <string.h>

#include "../runtime/ff_dropout.h"

/* @part pack: train_isa */
#ifdef FF_TRAIN_AVX
/* d [8, 8] (rows every dl floats) = s [8, 8]^T (rows every sl): the eight
 * rows in registers, interleaved in pairs, then fours, then halves (the
 * loops unrolled: GCC keeps r, t and u in registers then, and does not
 * unroll them by itself at -O2) */
static inline void FF_TRAIN(t8x8)(const float *s, size_t sl, float *d, size_t dl) {
  __m256 r[8], t[8], u[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(s + i * sl);
#pragma GCC unroll 4
  for (int i = 0; i < 8; i += 2) t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]), t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
#pragma GCC unroll 2
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44), u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44), u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; i++) {
    _mm256_storeu_ps(d + i * dl, _mm256_permute2f128_ps(u[i], u[i + 4], 0x20));
    _mm256_storeu_ps(d + (i + 4) * dl, _mm256_permute2f128_ps(u[i], u[i + 4], 0x31));
  }
}
#endif

/* B [K, N] into panels of NR columns, columns n0 .. n1-1 (n0 a multiple of
 * NR; n1 a multiple of NR or N): panel p holds B[:, NR p .. NR p + NR-1] as
 * K rows of NR floats, zero past N: the layout ff_linear_ISA multiplies by.
 * B(k, n) = src[n ld + k] (trans: B = S^T of a row-major S [N, ld]) or
 * src[k ld + n] (B = S [K, ld]). */
FF_KERNEL void FF_TRAIN(pack)(const float *src, int ld, int K, int N, int trans, int n0, int n1, float *dst) {
  for (int j = n0; j < n1; j += FF_TRAIN_NR) {
    float *panel = dst + (size_t)(j / FF_TRAIN_NR) * K * FF_TRAIN_NR;
    const int w = N - j < FF_TRAIN_NR ? N - j : FF_TRAIN_NR;
    if (trans) {
      int k8 = 0; /* k below k8: done in 8 x 8 blocks */
#ifdef FF_TRAIN_AVX
      if (w == FF_TRAIN_NR) {
        k8 = K & ~7;
        /* 8 columns at a time, each of S's 8 rows read front to back: when they are 2^n floats
         * apart (W [256, 1024]) they share an L1 set, which holds 8 rows' lines but not 32 */
        for (int c = 0; c < FF_TRAIN_NR; c += 8)
          for (int k = 0; k < k8; k += 8)
            FF_TRAIN(t8x8)(src + (size_t)(j + c) * ld + k, (size_t)ld, panel + (size_t)k * FF_TRAIN_NR + c,
                           FF_TRAIN_NR);
      }
#endif
      for (int k0 = k8; k0 < K; k0 += 64) { /* 64 k of every column: the reads stay in a few lines each */
        const int k1 = K - k0 < 64 ? K : k0 + 64;
        for (int c = 0; c < FF_TRAIN_NR; c++) {
          const float *s = src + (size_t)(j + c) * ld;
          for (int k = k0; k < k1; k++) panel[(size_t)k * FF_TRAIN_NR + c] = c < w ? s[k] : 0.0f;
        }
      }
    } else {
      for (int k = 0; k < K; k++) {
        const float *s = src + (size_t)k * ld + j;
        float *row = panel + (size_t)k * FF_TRAIN_NR;
        memcpy(row, s, sizeof(float) * (size_t)w);
        if (w < FF_TRAIN_NR) memset(row + w, 0, sizeof(float) * (size_t)(FF_TRAIN_NR - w));
      }
    }
  }
}

/* dst [cols, rows] = src [rows, cols]^T, src rows every ld floats; in blocks
 * (16 x 16, or 8 rows by 32 columns of 8 x 8 in registers), so that both
 * sides are read and written a few lines at a time */
FF_KERNEL void FF_TRAIN(transpose)(const float *src, int rows, int cols, int ld, float *dst) {
  int r8 = 0, c8 = 0; /* rows below r8 and columns below c8: done in 8 x 8 blocks */
#ifdef FF_TRAIN_AVX
  r8 = rows & ~7, c8 = cols & ~7;
  for (int c0 = 0; c0 < c8; c0 += 32)
    for (int r = 0; r < r8; r += 8)
      for (int c = c0; c < c0 + 32 && c < c8; c += 8)
        FF_TRAIN(t8x8)(src + (size_t)r * ld + c, (size_t)ld, dst + (size_t)c * rows + r, (size_t)rows);
#endif
  for (int r0 = 0; r0 < rows; r0 += 16)
    for (int c0 = r0 + 16 <= r8 ? c8 : 0; c0 < cols; c0 += 16) {
      const int r1 = rows - r0 < 16 ? rows : r0 + 16, c1 = cols - c0 < 16 ? cols : c0 + 16;
      for (int c = c0; c < c1; c++)
        for (int r = r0; r < r1; r++)
          if (r >= r8 || c >= c8) dst[(size_t)c * rows + r] = src[(size_t)r * ld + c];
    }
}

/* @part dropout: train_isa */
/* y[i] = x[i] scale, or 0 where ff_dropout_bits(key, index0 + i) < threshold, for i < n (y may
 * be x): runtime/ff_dropout.h's mask of a tensor whose key is key */
static inline void FF_TRAIN(drop)(const float *x, float *y, size_t n, uint64_t key, uint64_t index0,
                                  uint32_t threshold, float scale) {
  size_t i = 0;
#ifdef FF_TRAIN_AVX512
  /* 16 elements a step: two vectors of 8 of splitmix64's counters key + (index + 1) G, 16 G on
   * each step, its finalizer on them (AVX512DQ's 64-bit products), kept where the top 24 bits
   * reach threshold: ff_dropout_bits's values, so the same mask; the last step masked */
  const __m512i c1 = _mm512_set1_epi64((long long)0xBF58476D1CE4E5B9ull);
  const __m512i c2 = _mm512_set1_epi64((long long)0x94D049BB133111EBull);
  const __m512i step = _mm512_set1_epi64((long long)(16u * FF_DROPOUT_GOLDEN)), t = _mm512_set1_epi64(threshold);
  const __m512 s = _mm512_set1_ps(scale);
  uint64_t z[16];
  for (int l = 0; l < 16; l++) z[l] = key + (index0 + (uint64_t)l + 1u) * FF_DROPOUT_GOLDEN;
  __m512i z0 = _mm512_loadu_si512((const void *)z), z1 = _mm512_loadu_si512((const void *)(z + 8));
  for (; i < n; i += 16) {
    __m512i h0 = _mm512_mullo_epi64(_mm512_xor_si512(z0, _mm512_srli_epi64(z0, 30)), c1);
    __m512i h1 = _mm512_mullo_epi64(_mm512_xor_si512(z1, _mm512_srli_epi64(z1, 30)), c1);
    h0 = _mm512_mullo_epi64(_mm512_xor_si512(h0, _mm512_srli_epi64(h0, 27)), c2);
    h1 = _mm512_mullo_epi64(_mm512_xor_si512(h1, _mm512_srli_epi64(h1, 27)), c2);
    h0 = _mm512_srli_epi64(_mm512_xor_si512(h0, _mm512_srli_epi64(h0, 31)), 40);
    h1 = _mm512_srli_epi64(_mm512_xor_si512(h1, _mm512_srli_epi64(h1, 31)), 40);
    const __mmask16 keep = (__mmask16)(_mm512_cmpge_epu64_mask(h0, t) | (unsigned)_mm512_cmpge_epu64_mask(h1, t) << 8);
    const __mmask16 in = (__mmask16)(n - i >= 16 ? 0xFFFFu : (1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(y + i, in, _mm512_maskz_mul_ps(keep, _mm512_maskz_loadu_ps(in, x + i), s));
    z0 = _mm512_add_epi64(z0, step), z1 = _mm512_add_epi64(z1, step);
  }
#endif
  for (; i < n; i++) y[i] = ff_dropout_bits(key, index0 + i) >= threshold ? x[i] * scale : 0.0f;
}

/* y = x with runtime/ff_dropout.h's mask of site in (seed, step), elements
 * index0 .. index0 + n-1 of the site's tensor: kept ones scaled by 1/(1-p);
 * p <= 0 copies (y may be x). */
FF_KERNEL void FF_TRAIN(dropout)(const float *x, float *y, size_t n, uint64_t seed, uint64_t step, uint32_t site,
                                 uint64_t index0, float p) {
  if (!(p > 0.0f)) {
    for (size_t i = 0; y != x && i < n; i++) y[i] = x[i];
    return;
  }
  FF_TRAIN(drop)(x, y, n, ff_dropout_key(seed, step, site), index0, ff_dropout_threshold(p), 1.0f / (1.0f - p));
}

/* @part cross_entropy: train_isa exp */
/* PyTorch's CrossEntropyLoss(ignore_index, label_smoothing = s,
 * reduction='sum') of logits [n, V] (rows every ld floats) against labels [n]:
 *   loss = (1 - s)(lse - l_y) + s mean_k (lse - l_k),  lse = log sum_k e^(l_k),
 * summed (in double) into *loss over the rows whose label is not ignore,
 * counted in *count; with grad, logits are replaced by d loss / d logits =
 * softmax - (1 - s) onehot - s / V (0 on ignored rows), softmax = e^(l -
 * max) / sum (one exponential a logit).  Labels are checked by the caller. */
#define FF_CE_LANES 16
FF_KERNEL void FF_TRAIN(cross_entropy)(float *logits, int n, int V, int ld, const int32_t *labels, int ignore,
                                       float smoothing, int grad, double *loss, int64_t *count) {
  double total = 0.0;
  int64_t k = 0;
  for (int r = 0; r < n; r++) {
    float *l = logits + (size_t)r * ld;
    const int32_t y = labels[r];
    if (y == ignore) {
      for (int j = 0; grad && j < V; j++) l[j] = 0.0f;
      continue;
    }
    /* max, sum of e^(l - max) and sum of l over FF_CE_LANES lanes (element j
     * into lane j mod FF_CE_LANES: independent chains a vector unit runs side
     * by side), the lanes then added pairwise: a fixed order on every compiler */
    float mx[FF_CE_LANES], s[FF_CE_LANES], a[FF_CE_LANES];
    const int whole = V / FF_CE_LANES * FF_CE_LANES;
    for (int t = 0; t < FF_CE_LANES; t++) mx[t] = l[0], s[t] = 0.0f, a[t] = 0.0f;
#ifdef FF_TRAIN_AVX512
    { /* max(a, b) is a > b ? a : b lane by lane (b when either is NaN or both are 0): the loop below */
      __m512 m = _mm512_loadu_ps(mx);
      for (int j = 0; j < whole; j += FF_CE_LANES) m = _mm512_max_ps(_mm512_loadu_ps(l + j), m);
      _mm512_storeu_ps(mx, m);
    }
#else
    for (int j = 0; j < whole; j += FF_CE_LANES)
      for (int t = 0; t < FF_CE_LANES; t++) mx[t] = l[j + t] > mx[t] ? l[j + t] : mx[t];
#endif
    float max = mx[0];
    for (int t = 1; t < FF_CE_LANES; t++) max = mx[t] > max ? mx[t] : max;
    for (int j = whole; j < V; j++) max = l[j] > max ? l[j] : max;
    const float ly = l[y];
    if (grad) /* e^(l - max) kept in place of l (the row is in L1): the gradient's softmax without a second exp */
      for (int j = 0; j < whole; j += FF_CE_LANES)
        for (int t = 0; t < FF_CE_LANES; t++) {
          const float e = ff_exp_neg(l[j + t] - max);
          s[t] += e, a[t] += l[j + t], l[j + t] = e;
        }
    else
      for (int j = 0; j < whole; j += FF_CE_LANES)
        for (int t = 0; t < FF_CE_LANES; t++) s[t] += ff_exp_neg(l[j + t] - max), a[t] += l[j + t];
    for (int j = whole; j < V; j++) {
      const float e = ff_exp_neg(l[j] - max);
      s[j - whole] += e, a[j - whole] += l[j];
      if (grad) l[j] = e;
    }
    for (int w = FF_CE_LANES / 2; w > 0; w /= 2)
      for (int t = 0; t < w; t++) s[t] += s[t + w], a[t] += a[t + w];
    const float sum = s[0], all = a[0], lse = max + logf(sum);
    total += (1.0 - smoothing) * (double)(lse - ly) + smoothing * ((double)lse - (double)all / V);
    k++;
    if (!grad) continue;
    const float inv = 1.0f / sum, off = smoothing / (float)V, hit = 1.0f - smoothing;
    for (int j = 0; j < V; j++) l[j] = l[j] * inv - off; /* softmax = e^(l - max) / sum */
    l[y] -= hit;
  }
  *loss = total;
  *count = k;
}

/* @part attention_train: train_isa sdpa pack dropout */
/* y = drop(x) over rows of cols floats (x's rows every ldx, y's every ldy):
 * site's mask in (seed, step) at index0 + t ldi + j, the padded layout's
 * index of row t's element j; one call when the rows follow each other in
 * all three */
static inline void FF_TRAIN(drop_rows)(const float *x, size_t ldx, float *y, size_t ldy, int rows, int cols,
                                       uint64_t seed, uint64_t step, uint32_t site, uint64_t index0, size_t ldi,
                                       float p) {
  const size_t n = (size_t)cols;
  if (ldx == n && ldy == n && ldi == n) {
    FF_TRAIN(dropout)(x, y, (size_t)rows * n, seed, step, site, index0, p);
    return;
  }
  if (!(p > 0.0f)) {
    for (int t = 0; t < rows; t++) FF_TRAIN(dropout)(x + (size_t)t * ldx, y + (size_t)t * ldy, n, 0, 0, 0, 0, p);
    return;
  }
  /* the key, the threshold and the scale once for the rows */
  const uint64_t key = ff_dropout_key(seed, step, site);
  const uint32_t threshold = ff_dropout_threshold(p);
  const float scale = 1.0f / (1.0f - p);
  for (int t = 0; t < rows; t++)
    FF_TRAIN(drop)(x + (size_t)t * ldx, y + (size_t)t * ldy, n, key, index0 + (size_t)t * ldi, threshold, scale);
}

/* The softmax weights of heads of K/V groups g0 .. g1-1 of one sequence,
 * kept for the backward pass, and their output:
 *   probs [heads, Tq, Tk] = softmax(scale Q K^T + mask)
 *   out [Tq, heads dk]    = drop(probs) V
 * over its first q_len <= Tq queries and key_len <= Tk keys: the rest are
 * padding, masked keys whose weights are 0 and queries nothing reads, so
 * they are neither read nor written (probs keeps the [Tq, Tk] layout).
 * q rows every ldq floats (head h at h dk); k rows every ldk with kv_heads
 * heads, v = k + kv_heads dk (query head h reads K/V head h / (heads /
 * kv_heads)).  Key j is masked for query row t when j >= key_len, or
 * (causal) j > t.  Dropout (p > 0) is site's mask in (seed, step) at
 * index0 + (h Tq + t) Tk + j.  scratch: (dk + Tq) Tk floats. */
FF_KERNEL void FF_TRAIN(attention_train)(const float *q, int ldq, const float *k, int ldk, int Tq, int Tk, int q_len,
                                         int key_len, int heads, int kv_heads, int dk, int g0, int g1, int causal,
                                         float scale, float p, uint64_t seed, uint64_t step, uint32_t site,
                                         uint64_t index0, float *probs, float *scratch, float *out) {
  const int group = heads / kv_heads, d = heads * dk, K = key_len;
  const size_t hw = (size_t)Tq * Tk;
  float *kt = scratch, *pd = scratch + (size_t)dk * Tk;
  for (int g = g0; g < g1; g++) {
    const float *kg = k + g * dk, *vg = k + (kv_heads + g) * dk;
    FF_SDPA_GATHER(kg, ldk, K, dk, kt, K); /* K^T [dk, key_len] of the group */
    for (int h = g * group; h < (g + 1) * group; h++) {
      float *P = probs + (size_t)h * hw;
      FF_SDPA_MATMUL(q_len, K, dk, q + h * dk, ldq, kt, K, P, Tk, NULL, scale, 0);
      for (int t = 0; t < q_len; t += 8) /* 8 rows at a time, row t over keys 0 .. t (causal) */
        FF_SDPA_SOFTMAX_ROWS(P + (size_t)t * Tk, Tk, q_len - t < 8 ? q_len - t : 8, causal ? t + 1 : K, causal, K);
      const float *use = P;
      if (p > 0.0f) {
        FF_TRAIN(drop_rows)(P, Tk, pd, Tk, q_len, K, seed, step, site, index0 + (size_t)h * hw, Tk, p);
        use = pd;
      }
      FF_SDPA_MATMUL(q_len, dk, K, use, Tk, vg, ldk, out + h * dk, d, NULL, 1.0f, 0);
    }
  }
}

/* Back through attention_train for heads of K/V groups g0 .. g1-1 of one
 * sequence, from probs and dout [Tq, heads dk], over the same q_len
 * queries and key_len keys:
 *   dV_g  = sum over the group's heads of drop(P)^T dO
 *   dP    = drop(dO V^T)           (the forward's mask)
 *   dS    = P (dP - rowsum(P dP)) scale
 *   dQ    = dS K_g,   dK_g = sum over the group's heads of dS^T Q
 * dq [q_len, .] like q (rows every ldq), dkv [key_len, .] like k: dK of
 * group g at g dk, dV at (kv_heads + g) dk of rows every ldk; those rows are
 * written (set), no others.  scratch: (dk + 2 Tq) Tk floats. */
FF_KERNEL void FF_TRAIN(attention_backward)(const float *q, int ldq, const float *k, int ldk, int Tq, int Tk,
                                            int q_len, int key_len, int heads, int kv_heads, int dk, int g0, int g1,
                                            float scale, float p, uint64_t seed, uint64_t step, uint32_t site,
                                            uint64_t index0, const float *probs, const float *dout, float *dq,
                                            float *dkv, float *scratch) {
  const int group = heads / kv_heads, d = heads * dk, Q = q_len, K = key_len;
  const size_t hw = (size_t)Tq * Tk;
  float *vt = scratch, *dp = scratch + (size_t)dk * Tk, *tr = dp + hw;
  for (int g = g0; g < g1; g++) {
    const float *kg = k + g * dk, *vg = k + (kv_heads + g) * dk;
    float *dkg = dkv + g * dk, *dvg = dkv + (kv_heads + g) * dk;
    FF_SDPA_GATHER(vg, ldk, K, dk, vt, K); /* V^T [dk, key_len] of the group */
    for (int h = g * group; h < (g + 1) * group; h++) {
      const float *P = probs + (size_t)h * hw, *dO = dout + h * dk;
      const uint64_t at = index0 + (size_t)h * hw;
      const int flags = h == g * group ? 0 : FF_ACC;
      const float *use = P; /* drop(P) (the forward's mask) into dp, rows every key_len, then its transpose */
      int ld = Tk;
      if (p > 0.0f) {
        FF_TRAIN(drop_rows)(P, Tk, dp, K, Q, K, seed, step, site, at, Tk, p);
        use = dp, ld = K;
      }
      FF_TRAIN(transpose)(use, Q, K, ld, tr); /* drop(P)^T [key_len, q_len] */
      FF_SDPA_MATMUL(K, dk, Q, tr, Q, dO, d, dvg, ldk, NULL, 1.0f, flags);
      FF_SDPA_MATMUL(Q, K, dk, dO, d, vt, K, dp, K, NULL, 1.0f, 0); /* dP [q_len, key_len], rows every key_len */
      if (p > 0.0f) FF_TRAIN(drop_rows)(dp, K, dp, K, Q, K, seed, step, site, at, Tk, p);
      for (int t = 0; t < Q; t++) { /* rowsum(P dP): FF_SDPA_DOT's partial sums, not one chain */
        const float *pt = P + (size_t)t * Tk;
        float *dt = dp + (size_t)t * K;
        const float dot = FF_SDPA_DOT(pt, dt, K);
        for (int j = 0; j < K; j++) dt[j] = pt[j] * (dt[j] - dot) * scale;
      }
      FF_SDPA_MATMUL(Q, dk, K, dp, K, kg, ldk, dq + h * dk, ldq, NULL, 1.0f, 0);
      FF_TRAIN(transpose)(dp, Q, K, K, tr);
      FF_SDPA_MATMUL(K, dk, Q, tr, Q, q + h * dk, ldq, dkg, ldk, NULL, 1.0f, flags);
    }
  }
}

/* @part optimizer: train_isa */
/* One torch.optim.AdamW step (its single-tensor code, in float32) on n elements of a tensor,
 * step counting from 1: the scalars as torch derives them (Python floats: in double, then
 * rounded), then element by element
 *   p *= 1 - lr wd;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
 *   p -= lr / (1 - b1^step) m / (sqrt(v) / sqrt(1 - b2^step) + eps),
 * the gradient read as (g gscale) gcoef (a trainer's mean and clipping applied as it reads;
 * 1 and 1: g itself, exactly).  With AVX 8 elements a turn (the last few through a block
 * padded with zeros): the same float operations in the same order, each correctly rounded
 * (no FMA), so the same bits as the plain loop, which compilers leave scalar (sqrtf may set
 * errno) at a fraction of the memory's speed. */
FF_KERNEL void FF_TRAIN(adamw)(float *p, const float *g, float *m, float *v, size_t n, int64_t step, double lr,
                               double beta1, double beta2, double eps, double weight_decay, float gscale,
                               float gcoef) {
  const double bc1 = 1.0 - pow(beta1, (double)step), bc2 = 1.0 - pow(beta2, (double)step);
  const float decay = (float)(1.0 - lr * weight_decay), b1 = (float)beta1, b2 = (float)beta2;
  const float a1 = (float)(1.0 - beta1), a2 = (float)(1.0 - beta2), neg_step = (float)-(lr / bc1);
  const float bc2_sqrt = (float)sqrt(bc2), e = (float)eps;
  size_t i = 0;
#ifdef FF_TRAIN_AVX
  const __m256 vdecay = _mm256_set1_ps(decay), vb1 = _mm256_set1_ps(b1), vb2 = _mm256_set1_ps(b2);
  const __m256 va1 = _mm256_set1_ps(a1), va2 = _mm256_set1_ps(a2), vneg = _mm256_set1_ps(neg_step);
  const __m256 vbc2 = _mm256_set1_ps(bc2_sqrt), veps = _mm256_set1_ps(e);
  const __m256 vscale = _mm256_set1_ps(gscale), vcoef = _mm256_set1_ps(gcoef);
#define FF_ADAMW8(P, G, M, V)                                                                                         \
  do {                                                                                                                \
    const __m256 gv = _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(G), vscale), vcoef);                                \
    const __m256 mv = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(M), vb1), _mm256_mul_ps(va1, gv));                  \
    const __m256 vv = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(V), vb2), _mm256_mul_ps(_mm256_mul_ps(va2, gv), gv)); \
    const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vv), vbc2), veps);                                \
    const __m256 pv = _mm256_mul_ps(_mm256_loadu_ps(P), vdecay);                                                      \
    _mm256_storeu_ps(M, mv), _mm256_storeu_ps(V, vv);                                                                 \
    _mm256_storeu_ps(P, _mm256_add_ps(pv, _mm256_div_ps(_mm256_mul_ps(vneg, mv), denom)));                            \
  } while (0)
  for (; i < n - n % 8; i += 8) FF_ADAMW8(p + i, g + i, m + i, v + i);
  if (i < n) { /* the last n - i elements, in a block padded with zeros */
    float pb[8] = {0}, gb[8] = {0}, mb[8] = {0}, vb[8] = {0};
    for (size_t l = 0; l < n - i; l++) pb[l] = p[i + l], gb[l] = g[i + l], mb[l] = m[i + l], vb[l] = v[i + l];
    FF_ADAMW8(pb, gb, mb, vb);
    for (size_t l = 0; l < n - i; l++) p[i + l] = pb[l], m[i + l] = mb[l], v[i + l] = vb[l];
    i = n;
  }
#undef FF_ADAMW8
#endif
  for (; i < n; i++) {
    const float gi = g[i] * gscale * gcoef; /* grad.mul_(scale), then clip_grad_norm_'s grad.mul_(coef) */
    p[i] *= decay;                          /* param.mul_(1 - lr * weight_decay) */
    m[i] = m[i] * b1 + a1 * gi;             /* exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1) */
    v[i] = v[i] * b2 + a2 * gi * gi;        /* exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2) */
    const float denom = sqrtf(v[i]) / bc2_sqrt + e; /* (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps) */
    p[i] += neg_step * m[i] / denom;        /* param.addcdiv_(exp_avg, denom, value=-step_size) */
  }
}

/* The sum of the squares of g [n] scale (each rounded to float, as grad.mul_(scale) stores
 * it) in double, for clip_grad_norm_: element i into lane i mod 8, the lanes added pairwise
 * at the end (a fixed order: every ISA gives the same bits; eight chains, not one). */
FF_KERNEL double FF_TRAIN(sum_squares)(const float *g, size_t n, float scale) {
  double lane[8] = {0};
  size_t i = 0;
#ifdef FF_TRAIN_AVX
  const __m256 sv = _mm256_set1_ps(scale);
  __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
  for (; i < n - n % 8; i += 8) {
    const __m256 x = _mm256_mul_ps(_mm256_loadu_ps(g + i), sv);
    const __m256d xl = _mm256_cvtps_pd(_mm256_castps256_ps128(x)), xh = _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1));
    lo = _mm256_add_pd(lo, _mm256_mul_pd(xl, xl));
    hi = _mm256_add_pd(hi, _mm256_mul_pd(xh, xh));
  }
  _mm256_storeu_pd(lane, lo);
  _mm256_storeu_pd(lane + 4, hi);
#endif
  for (; i < n; i++) {
    const float x = g[i] * scale;
    const double sq = (double)x * x; /* (apart: no FMA contracted from the add) */
    lane[i % 8] += sq;
  }
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}
