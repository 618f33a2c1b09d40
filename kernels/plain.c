/* plain.c - the kernels written in plain C, which the ISA's compiler flags
 * vectorise: LayerNorm and RMSNorm over the rows of x [T, D], and the
 * activations GELU (exact and tanh) and SwiGLU.  The libtcc engine gets the
 * host's build of them, as with the matrix kernels.  The ISA's file defines
 * FF_PLAIN(name) (ff_##name##_ISA), and FF_PLAIN_AVX when it has
 * immintrin.h and AVX (the norms' Kahan lanes as one __m256: gcc keeps
 * them scalar), then includes this.
 *
 * Norms: in float only (no double, no libm: a Cortex-M4F has a float unit
 * and nothing else), as accurate as the runtime's double sums to a few float
 * roundings.  LayerNorm is the corrected two-pass algorithm (Chan, Golub and
 * LeVeque): a first mean m, then d = x - m (exact wherever x is near m),
 * sum(d) and sum(d^2) with Kahan compensation, mean = m + sum(d)/D and
 * var = sum(d^2)/D - (sum(d)/D)^2; RMSNorm sums x^2 the same way.  Each sum
 * runs over 8 interleaved lanes: 8 independent chains of adds (which also
 * lets the compiler vectorise them), so that a row is not bound by the
 * latency of each add.  The compensation needs IEEE float adds as written:
 * build without -ffast-math / -Ofast (which would drop it; the result is
 * then a plain float sum).  1/sqrt is Newton's iteration (ff_rsqrt), within
 * 2 ulp.  y may be x (in place).
 *
 * Activations: erf and tanh as odd rational functions on a clamped range
 * (the approximations Eigen and XLA use for float), with no libm call and no
 * branch, so that a loop of them vectorises: at most 4.3e-7 from erf and
 * 4e-7 from tanh (measured over [-20, 20] in steps of 1e-5 against double
 * precision; libm's erff: 5e-8); SiLU is g/2 (1 + tanh(g/2)).  Beyond the
 * clamps they are exactly +-1 whether or not the compiler contracts the
 * polynomials into FMAs, so that -inf (1 + erf) is NaN as in PyTorch (gelu,
 * silu of -inf) and large negative inputs give 0; NaN passes through (the
 * comparisons are false for it). */
/* @part elementwise: plain */
/* out[i] = F for i < n, F an expression of i: FF_PLAIN_BLOCK elements a turn
 * through a local block, then the rest one by one.  GCC vectorises the plain
 * loop at -O3 only; at -O2 its cost model takes no loop that needs a remainder
 * or a check that out does not overlap what F reads, and a loop of a constant
 * count into a local array needs neither.  The same operations element by
 * element (out may be an operand of F: each block is read before it is
 * written). */
#define FF_PLAIN_BLOCK 16
#define FF_ELEMENTWISE(n, out, F)                                                                                     \
  do {                                                                                                                \
    const size_t n_ = (n), blocks_ = n_ - n_ % FF_PLAIN_BLOCK;                                                        \
    for (size_t b0_ = 0; b0_ < blocks_; b0_ += FF_PLAIN_BLOCK) {                                                      \
      float r_[FF_PLAIN_BLOCK];                                                                                       \
      for (int l_ = 0; l_ < FF_PLAIN_BLOCK; l_++) {                                                                   \
        const size_t i = b0_ + (size_t)l_;                                                                            \
        r_[l_] = (F);                                                                                                 \
      }                                                                                                               \
      for (int l_ = 0; l_ < FF_PLAIN_BLOCK; l_++) (out)[b0_ + (size_t)l_] = r_[l_];                                   \
    }                                                                                                                 \
    for (size_t i = blocks_; i < n_; i++) (out)[i] = (F);                                                             \
  } while (0)

/* c ? a : b, for the activations' clamps and limits.  An ISA whose flags vectorise
 * plain.c's loops defines FF_PLAIN_SELECT and takes it as a select of bits: from ?: GCC
 * makes a branch, and it vectorises no loop whose branches hold float operations that may
 * trap unless the ISA can mask them (AVX-512 can; AVX2 and NEON cannot: their GELU, SiLU
 * and SwiGLU stayed scalar at every level).  The generic kernels keep ?: (where a branch
 * on a compare is cheaper than moving floats through integer registers). */
static inline float ff_pick(int c, float a, float b) {
#ifdef FF_PLAIN_SELECT
  const uint32_t m = 0u - (uint32_t)c;
  uint32_t ua, ub, u;
  float r;
  memcpy(&ua, &a, sizeof ua), memcpy(&ub, &b, sizeof ub);
  u = (ua & m) | (ub & ~m);
  memcpy(&r, &u, sizeof r);
  return r;
#else
  return c ? a : b;
#endif
}

/* @part norm_sums: plain */
#ifdef FF_PLAIN_AVX
/* Before each loop over the rows side by side: their vectors stay in registers
 * only once it is unrolled, which GCC does by itself at -O3, not at -O2 */
#define FF_PLAIN_ROWS_UNROLL _Pragma("GCC unroll 8")
#endif
/* 8 interleaved Kahan sums: sum[l] + the lost low part -comp[l] */
typedef struct {
  float sum[8], comp[8];
} ff_kahan8;

static inline void ff_kahan8_add(ff_kahan8 *k, int l, float v) {
  const float y = v - k->comp[l], t = k->sum[l] + y;
  k->comp[l] = (t - k->sum[l]) - y;
  k->sum[l] = t;
}

/* the sum of 8 lanes, in a fixed order */
static inline float ff_sum8(const float s[8]) {
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

/* the lanes' compensated total */
static inline float ff_kahan8_total(const ff_kahan8 *k) { return ff_sum8(k->sum) - ff_sum8(k->comp); }
#ifdef FF_PLAIN_AVX

/* ff_kahan8_add of v's 8 lanes into sum, comp (the same subtractions and adds, lane by lane) */
static inline void ff_kahan8_vadd(__m256 *sum, __m256 *comp, __m256 v) {
  const __m256 y = _mm256_sub_ps(v, *comp), t = _mm256_add_ps(*sum, y);
  *comp = _mm256_sub_ps(_mm256_sub_ps(t, *sum), y), *sum = t;
}
#endif

/* 1 / sqrt(v) for v > 0, +inf (0) or NaN (NaN): a first guess from the
 * exponent bits, then Newton's y (3 - v y^2) / 2, which doubles the correct
 * bits each time: 4 steps reach float precision (within 2 ulp, measured
 * against double over every exponent).  Subnormal v is scaled by 2^64. */
static inline float ff_rsqrt(float v) {
  float scale = 1.0f;
  if (v > 3.40282347e38f) return 0.0f;
  if (v < 1.17549435e-38f) v *= 18446744073709551616.0f, scale = 4294967296.0f; /* 2^64, 2^32 */
  union {
    float f;
    uint32_t u;
  } b;
  b.f = v;
  b.u = 0x5f375a86u - (b.u >> 1);
  float y = b.f;
  for (int i = 0; i < 4; i++) y = y * (1.5f - 0.5f * v * y * y);
  return y * scale;
}

/* @part layernorm: plain norm_sums elementwise */
#ifdef FF_PLAIN_AVX
/* ff_layernorm_var (the generic build's) of the n <= FF_PLAIN_ROWS rows x, x + D, ... (m, e and
 * the var + eps into m[r], e[r], v[r]): each row's 8 lanes as one vector, each lane's adds,
 * subtractions and products as ff_layernorm_var makes them (no FMA), so the same sums;
 * FF_PLAIN_ROWS rows side by side.  Rows past n repeat the last, their results unused. */
static inline void ff_layernorm_vars(const float *x, int n, int D, float eps, float *m, float *e, float *v) {
  const int D8 = D - D % 8;
  const float *row[FF_PLAIN_ROWS];
  float mr[FF_PLAIN_ROWS];
  __m256 s[FF_PLAIN_ROWS], mv[FF_PLAIN_ROWS], ds[FF_PLAIN_ROWS], dc[FF_PLAIN_ROWS], qs[FF_PLAIN_ROWS],
      qc[FF_PLAIN_ROWS];
  FF_PLAIN_ROWS_UNROLL
  for (int r = 0; r < FF_PLAIN_ROWS; r++) row[r] = x + (size_t)(r < n ? r : n - 1) * D, s[r] = _mm256_setzero_ps();
  for (int i = 0; i < D8; i += 8)
    FF_PLAIN_ROWS_UNROLL
    for (int r = 0; r < FF_PLAIN_ROWS; r++) s[r] = _mm256_add_ps(s[r], _mm256_loadu_ps(row[r] + i));
  FF_PLAIN_ROWS_UNROLL
  for (int r = 0; r < FF_PLAIN_ROWS; r++) {
    float l[8];
    _mm256_storeu_ps(l, s[r]);
    for (int i = D8; i < D; i++) l[i - D8] += row[r][i];
    mr[r] = ff_sum8(l) / (float)D, mv[r] = _mm256_set1_ps(mr[r]);
    ds[r] = dc[r] = qs[r] = qc[r] = _mm256_setzero_ps();
  }
  for (int i = 0; i < D8; i += 8)
    FF_PLAIN_ROWS_UNROLL
    for (int r = 0; r < FF_PLAIN_ROWS; r++) {
      const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(row[r] + i), mv[r]);
      ff_kahan8_vadd(&ds[r], &dc[r], d);
      ff_kahan8_vadd(&qs[r], &qc[r], _mm256_mul_ps(d, d));
    }
  for (int r = 0; r < n; r++) {
    ff_kahan8 sd, sq;
    _mm256_storeu_ps(sd.sum, ds[r]), _mm256_storeu_ps(sd.comp, dc[r]);
    _mm256_storeu_ps(sq.sum, qs[r]), _mm256_storeu_ps(sq.comp, qc[r]);
    for (int i = D8; i < D; i++) {
      const float d = row[r][i] - mr[r];
      ff_kahan8_add(&sd, i % 8, d);
      ff_kahan8_add(&sq, i % 8, d * d);
    }
    m[r] = mr[r], e[r] = ff_kahan8_total(&sd) / (float)D;
    v[r] = ff_kahan8_total(&sq) / (float)D - e[r] * e[r] + eps;
  }
}
#else
/* The mean (m + *e) and var + eps of a row of D, as layernorm normalises it:
 * ((x - m) - e) / sqrt(var + eps) is x's xhat.  Each lane l takes the
 * elements i + l, i % 8, in order; the lanes' Kahan sums, compensated. */
static inline float ff_layernorm_var(const float *xt, int D, float eps, float *m_out, float *e_out) {
  const int D8 = D - D % 8;
  float s[8] = {0};
  for (int i = 0; i < D8; i += 8)
    for (int l = 0; l < 8; l++) s[l] += xt[i + l];
  for (int i = D8; i < D; i++) s[i - D8] += xt[i];
  const float m = ff_sum8(s) / (float)D;
  ff_kahan8 sd = {{0}, {0}}, sq = {{0}, {0}};
  for (int i = 0; i < D; i++) {
    const float d = xt[i] - m;
    ff_kahan8_add(&sd, i % 8, d);
    ff_kahan8_add(&sq, i % 8, d * d);
  }
  const float e = ff_kahan8_total(&sd) / (float)D; /* mean = m + e */
  *m_out = m, *e_out = e;
  return ff_kahan8_total(&sq) / (float)D - e * e + eps;
}
#endif

/* Rows t0 .. t0 + n - 1 of x [T, D], n = min(8, T - t0) (returned): each
 * row's mean m + e and 1/sqrt(var + eps) r, the eight rows' sums first,
 * then their 1/sqrt: independent chains side by side */
static inline int ff_layernorm_rows8(const float *x, int t0, int T, int D, float eps, float m[8], float e[8],
                                     float r[8]) {
  const int n = T - t0 < 8 ? T - t0 : 8;
#ifdef FF_PLAIN_AVX
  for (int i = 0; i < n; i += FF_PLAIN_ROWS)
    ff_layernorm_vars(x + (size_t)(t0 + i) * D, n - i < FF_PLAIN_ROWS ? n - i : FF_PLAIN_ROWS, D, eps, m + i, e + i,
                      r + i);
#else
  for (int i = 0; i < n; i++) r[i] = ff_layernorm_var(x + (size_t)(t0 + i) * D, D, eps, m + i, e + i);
#endif
  for (int i = 0; i < n; i++) r[i] = ff_rsqrt(r[i]);
  return n;
}

/* y = (x - mean) / sqrt(var + eps) * gamma + beta, biased var */
FF_KERNEL void FF_PLAIN(layernorm)(const float *x, int T, int D, const float *gamma, const float *beta, float eps,
                                   float *y) {
  for (int t0 = 0; t0 < T; t0 += 8) {
    float m[8], e[8], r[8];
    const int n = ff_layernorm_rows8(x, t0, T, D, eps, m, e, r);
    for (int k = 0; k < n; k++) {
      const float *xt = x + (size_t)(t0 + k) * D, mk = m[k], ek = e[k], rk = r[k];
      float *yt = y + (size_t)(t0 + k) * D;
      FF_ELEMENTWISE((size_t)D, yt, ((xt[i] - mk) - ek) * rk * gamma[i] + beta[i]);
    }
  }
}

/* @part rmsnorm: plain norm_sums elementwise */
/* 1/sqrt(mean(x^2) + eps) of a row of D from its 8 lanes' compensated sums of squares (sq), as
 * rmsnorm normalises it */
static inline float ff_rmsnorm_finish(const float *xt, int D, float eps, const ff_kahan8 *sq) {
  float ss = ff_kahan8_total(sq);
  if (ss != ss) { /* NaN: a NaN in the row, or an inf the compensation turned into one (inf - inf) */
    ss = 0.0f;
    for (int i = 0; i < D; i++) ss += xt[i] * xt[i]; /* NaN, or inf: y = x 0 */
  }
  return ff_rsqrt(ss / (float)D + eps);
}

/* r[k] = 1/sqrt(mean(x^2) + eps) of rows x, x + D, ... (n of them, n <= 8): lane l of a row
 * sums x[i]^2, i % 8 = l, in order */
static inline void ff_rmsnorm_rstds(const float *x, int n, int D, float eps, float *r) {
#ifdef FF_PLAIN_AVX
  /* a row's 8 lanes as one vector (each lane's products, subtractions and adds as the loop
   * below makes them, no FMA: the same sums), FF_PLAIN_ROWS rows side by side; rows past n
   * repeat the last, their results unused */
  const int D8 = D - D % 8;
  for (int k0 = 0; k0 < n; k0 += FF_PLAIN_ROWS) {
    const float *row[FF_PLAIN_ROWS];
    __m256 qs[FF_PLAIN_ROWS], qc[FF_PLAIN_ROWS];
    FF_PLAIN_ROWS_UNROLL
    for (int k = 0; k < FF_PLAIN_ROWS; k++)
      row[k] = x + (size_t)(k0 + k < n ? k0 + k : n - 1) * D, qs[k] = qc[k] = _mm256_setzero_ps();
    for (int i = 0; i < D8; i += 8)
      FF_PLAIN_ROWS_UNROLL
      for (int k = 0; k < FF_PLAIN_ROWS; k++) {
        const __m256 v = _mm256_loadu_ps(row[k] + i);
        ff_kahan8_vadd(&qs[k], &qc[k], _mm256_mul_ps(v, v));
      }
    for (int k = 0; k < FF_PLAIN_ROWS && k0 + k < n; k++) {
      ff_kahan8 sq;
      _mm256_storeu_ps(sq.sum, qs[k]), _mm256_storeu_ps(sq.comp, qc[k]);
      for (int i = D8; i < D; i++) ff_kahan8_add(&sq, i % 8, row[k][i] * row[k][i]);
      r[k0 + k] = ff_rmsnorm_finish(row[k], D, eps, &sq);
    }
  }
#else
  for (int k = 0; k < n; k++) {
    const float *xt = x + (size_t)k * D;
    ff_kahan8 sq = {{0}, {0}};
    for (int i = 0; i < D; i++) ff_kahan8_add(&sq, i % 8, xt[i] * xt[i]);
    r[k] = ff_rmsnorm_finish(xt, D, eps, &sq);
  }
#endif
}

/* y = x / sqrt(mean(x^2) + eps) * gamma, 8 rows' norms first */
FF_KERNEL void FF_PLAIN(rmsnorm)(const float *x, int T, int D, const float *gamma, float eps, float *y) {
  for (int t0 = 0; t0 < T; t0 += 8) {
    const int n = T - t0 < 8 ? T - t0 : 8;
    float r[8];
    ff_rmsnorm_rstds(x + (size_t)t0 * D, n, D, eps, r);
    for (int k = 0; k < n; k++) {
      const float *xt = x + (size_t)(t0 + k) * D, rstd = r[k];
      float *yt = y + (size_t)(t0 + k) * D;
      FF_ELEMENTWISE((size_t)D, yt, xt[i] * rstd * gamma[i]);
    }
  }
}

/* @part gelu: plain elementwise */
/* erf(x): x P(x^2) / Q(x^2) on [-4, 4], where float erf is +-1 beyond */
static inline float ff_erf(float x) {
  const float xc = ff_pick(x > 4.0f, 4.0f, ff_pick(x < -4.0f, -4.0f, x)), x2 = xc * xc;
  float p = x2 * -2.72614225801306e-10f + 2.77068142495902e-08f, q;
  p = x2 * p - 2.10102402082508e-06f;
  p = x2 * p - 5.69250639462346e-05f;
  p = x2 * p - 7.34990630326855e-04f;
  p = x2 * p - 2.95459980854025e-03f;
  p = x2 * p - 1.60960333262415e-02f;
  q = x2 * -1.45660718464996e-05f - 2.13374055278905e-04f;
  q = x2 * q - 1.68282697438203e-03f;
  q = x2 * q - 7.37332916720468e-03f;
  q = x2 * q - 1.42647390514189e-02f;
  return ff_pick(x >= 4.0f, 1.0f, ff_pick(x <= -4.0f, -1.0f, xc * p / q)); /* exactly +-1 beyond (below) */
}

/* @part tanh: elementwise */
/* tanh(x): x P(x^2) / Q(x^2) on [-7.9053, 7.9053], where float tanh is +-1 beyond */
static inline float ff_tanh(float x) {
  const float c = 7.90531110763549805f, xc = ff_pick(x > c, c, ff_pick(x < -c, -c, x)), x2 = xc * xc;
  float p = x2 * -2.76076847742355e-16f + 2.00018790482477e-13f, q;
  p = x2 * p - 8.60467152213735e-11f;
  p = x2 * p + 5.12229709037114e-08f;
  p = x2 * p + 1.48572235717979e-05f;
  p = x2 * p + 6.37261928875436e-04f;
  p = x2 * p + 4.89352455891786e-03f;
  q = x2 * 1.19825839466702e-06f + 1.18534705686654e-04f;
  q = x2 * q + 2.26843463243900e-03f;
  q = x2 * q + 4.89352518554385e-03f;
  return ff_pick(x >= c, 1.0f, ff_pick(x <= -c, -1.0f, xc * p / q)); /* exactly +-1 beyond (below) */
}

/* @part gelu */
/* h = h/2 (1 + erf(h / sqrt 2)) over n floats (nn.GELU) */
FF_KERNEL void FF_PLAIN(gelu)(float *h, size_t n) {
  FF_ELEMENTWISE(n, h, 0.5f * h[i] * (1.0f + ff_erf(h[i] * 0.70710678118654752f)));
}

/* @part gelu_tanh: plain elementwise tanh */
/* h = h/2 (1 + tanh(sqrt(2/pi) (h + 0.044715 h^3))) over n floats (approximate='tanh') */
static inline float ff_gelu_tanh1(float x) {
  return 0.5f * x * (1.0f + ff_tanh(0.79788456080286536f * (x + 0.044715f * x * x * x)));
}
FF_KERNEL void FF_PLAIN(gelu_tanh)(float *h, size_t n) { FF_ELEMENTWISE(n, h, ff_gelu_tanh1(h[i])); }

/* @part silu: plain elementwise tanh */
/* h = h sigmoid(h) = h/2 (1 + tanh(h/2)) over n floats (nn.SiLU, Marian's swish) */
FF_KERNEL void FF_PLAIN(silu)(float *h, size_t n) { FF_ELEMENTWISE(n, h, 0.5f * h[i] * (1.0f + ff_tanh(0.5f * h[i]))); }

/* @part swiglu: plain elementwise tanh */
/* y [T, N] = silu(gate) * up for h [T, 2N] = gate | up */
FF_KERNEL void FF_PLAIN(swiglu)(const float *restrict h, int T, int N, float *restrict y) {
  for (int t = 0; t < T; t++) {
    const float *gate = h + (size_t)t * 2 * N, *up = gate + N;
    float *yt = y + (size_t)t * N;
    FF_ELEMENTWISE((size_t)N, yt, 0.5f * gate[i] * (1.0f + ff_tanh(0.5f * gate[i])) * up[i]);
  }
}

/* @part exp: elementwise */
/* e^x for x <= 0: x = n ln2 + r, |r| <= ln2/2, e^r by Cephes' degree-6
 * polynomial, 2^n from the exponent bits (about 1 ulp); below -87.3: 0.
 * Float arithmetic with no branch or libm call, so that a loop of it
 * vectorises; n is rounded by adding and taking away 1.5 * 2^23 (C99 rounds
 * each float assignment). */
static inline float ff_exp_neg(float x) {
  const float xc = ff_pick(x < -87.33654f, -87.33654f, x);
  const float big = 12582912.0f, t = xc * 1.44269504088896341f + big, n = t - big;
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + (r + 1.0f);
  union {
    uint32_t u;
    float f;
  } two_n;
  two_n.u = (uint32_t)((int32_t)n + 127) << 23;
  return ff_pick(x < -87.33654f, 0.0f, p * two_n.f);
}

/* ---- the backward passes of the norms and activations (generated training code) ---- */

/* @part layernorm_backward: layernorm */
#ifdef FF_PLAIN_AVX
/* ff_layernorm_backward's rows x, dy, dx (n <= FF_PLAIN_ROWS of them, rows of D), their
 * statistics m, e, r: the same operations element by element (no FMA; each row's 8 lanes of
 * sums; d gamma and d beta in row order), the rows side by side.  Rows past n repeat the last,
 * their results unused. */
static inline void ff_layernorm_backward_rows(const float *x, int n, int D, const float *gamma, const float *dy,
                                              float *dx, int acc, float *restrict dgamma, float *restrict dbeta,
                                              const float *m, const float *e, const float *r) {
  const int D8 = D - D % 8;
  const float *xr[FF_PLAIN_ROWS], *dyr[FF_PLAIN_ROWS];
  __m256 mv[FF_PLAIN_ROWS], ev[FF_PLAIN_ROWS], rv[FF_PLAIN_ROWS], sg[FF_PLAIN_ROWS], sgx[FF_PLAIN_ROWS];
  FF_PLAIN_ROWS_UNROLL
  for (int k = 0; k < FF_PLAIN_ROWS; k++) {
    const int q = k < n ? k : n - 1;
    xr[k] = x + (size_t)q * D, dyr[k] = dy + (size_t)q * D;
    mv[k] = _mm256_set1_ps(m[q]), ev[k] = _mm256_set1_ps(e[q]), rv[k] = _mm256_set1_ps(r[q]);
    sg[k] = sgx[k] = _mm256_setzero_ps();
  }
  for (int i = 0; i < D8; i += 8) { /* sum g, sum g xhat; dgamma += dy xhat, dbeta += dy, row by row */
    const __m256 gm = _mm256_loadu_ps(gamma + i);
    __m256 dg = _mm256_loadu_ps(dgamma + i), db = _mm256_loadu_ps(dbeta + i);
    FF_PLAIN_ROWS_UNROLL
    for (int k = 0; k < FF_PLAIN_ROWS; k++) {
      const __m256 d = _mm256_loadu_ps(dyr[k] + i);
      const __m256 xhat = _mm256_mul_ps(_mm256_sub_ps(_mm256_sub_ps(_mm256_loadu_ps(xr[k] + i), mv[k]), ev[k]), rv[k]);
      const __m256 g = _mm256_mul_ps(d, gm);
      sg[k] = _mm256_add_ps(sg[k], g), sgx[k] = _mm256_add_ps(sgx[k], _mm256_mul_ps(g, xhat));
      if (k < n) dg = _mm256_add_ps(dg, _mm256_mul_ps(d, xhat)), db = _mm256_add_ps(db, d);
    }
    _mm256_storeu_ps(dgamma + i, dg), _mm256_storeu_ps(dbeta + i, db);
  }
  for (int k = 0; k < n; k++) {
    const float *xt = xr[k], *dyt = dyr[k], mk = m[k], ek = e[k], rstd = r[k];
    float *dxt = dx + (size_t)k * D, g8[8], gx8[8];
    _mm256_storeu_ps(g8, sg[k]), _mm256_storeu_ps(gx8, sgx[k]);
    for (int i = D8; i < D; i++) {
      const float xhat = ((xt[i] - mk) - ek) * rstd, g = dyt[i] * gamma[i];
      g8[i - D8] += g, gx8[i - D8] += g * xhat;
      dgamma[i] += dyt[i] * xhat, dbeta[i] += dyt[i];
    }
    const float mg = ff_sum8(g8) / (float)D, mgx = ff_sum8(gx8) / (float)D;
    const __m256 mgv = _mm256_set1_ps(mg), mgxv = _mm256_set1_ps(mgx);
    for (int i = 0; i < D8; i += 8) { /* dx (+)= rstd (dy gamma - mean(g) - xhat mean(g xhat)) */
      const __m256 xhat = _mm256_mul_ps(_mm256_sub_ps(_mm256_sub_ps(_mm256_loadu_ps(xt + i), mv[k]), ev[k]), rv[k]);
      const __m256 t = _mm256_sub_ps(_mm256_sub_ps(_mm256_mul_ps(_mm256_loadu_ps(dyt + i), _mm256_loadu_ps(gamma + i)),
                                                   mgv), _mm256_mul_ps(xhat, mgxv));
      const __m256 v = _mm256_mul_ps(rv[k], t);
      _mm256_storeu_ps(dxt + i, acc ? _mm256_add_ps(_mm256_loadu_ps(dxt + i), v) : v);
    }
    for (int i = D8; i < D; i++) {
      const float xhat = ((xt[i] - mk) - ek) * rstd, v = rstd * (dyt[i] * gamma[i] - mg - xhat * mgx);
      dxt[i] = acc ? dxt[i] + v : v;
    }
  }
}
#endif

/* Back through layernorm over rows of x [T, D], from dy:
 *   dx (+)= rstd (g - mean(g) - xhat mean(g xhat)),  g = dy gamma,
 *   dgamma += sum over rows of dy xhat,  dbeta += sum over rows of dy
 * (dx = with acc 0, += with 1; it may be dy; dgamma and dbeta are apart
 * from everything else, restrict: without it their stores keep the first
 * loop scalar). */
FF_KERNEL void FF_PLAIN(layernorm_backward)(const float *x, int T, int D, const float *gamma, float eps,
                                            const float *dy, float *dx, int acc, float *restrict dgamma,
                                            float *restrict dbeta) {
  for (int t0 = 0; t0 < T; t0 += 8) { /* 8 rows' statistics first, as the forward takes them */
    float m[8], e[8], r[8];
    const int n = ff_layernorm_rows8(x, t0, T, D, eps, m, e, r);
#ifdef FF_PLAIN_AVX
    for (int k = 0; k < n; k += FF_PLAIN_ROWS)
      ff_layernorm_backward_rows(x + (size_t)(t0 + k) * D, n - k < FF_PLAIN_ROWS ? n - k : FF_PLAIN_ROWS, D, gamma,
                                 dy + (size_t)(t0 + k) * D, dx + (size_t)(t0 + k) * D, acc, dgamma, dbeta, m + k, e + k,
                                 r + k);
#else
    for (int k = 0; k < n; k++) {
      const float *xt = x + (size_t)(t0 + k) * D, *dyt = dy + (size_t)(t0 + k) * D, mk = m[k], ek = e[k], rstd = r[k];
      float *dxt = dx + (size_t)(t0 + k) * D, sg[8] = {0}, sgx[8] = {0};
      const int D8 = D - D % 8;
      for (int i = 0; i < D8; i += 8) /* lane l takes i + l, i % 8 (in this form the lanes vectorize) */
        for (int l = 0; l < 8; l++) {
          const float xhat = ((xt[i + l] - mk) - ek) * rstd, g = dyt[i + l] * gamma[i + l];
          sg[l] += g, sgx[l] += g * xhat;
          dgamma[i + l] += dyt[i + l] * xhat, dbeta[i + l] += dyt[i + l];
        }
      for (int i = D8; i < D; i++) {
        const float xhat = ((xt[i] - mk) - ek) * rstd, g = dyt[i] * gamma[i];
        sg[i - D8] += g, sgx[i - D8] += g * xhat;
        dgamma[i] += dyt[i] * xhat, dbeta[i] += dyt[i];
      }
      const float mg = ff_sum8(sg) / (float)D, mgx = ff_sum8(sgx) / (float)D;
      for (int i = 0; i < D; i++) {
        const float xhat = ((xt[i] - mk) - ek) * rstd, v = rstd * (dyt[i] * gamma[i] - mg - xhat * mgx);
        dxt[i] = acc ? dxt[i] + v : v;
      }
    }
#endif
  }
}

/* @part rmsnorm_backward: rmsnorm */
/* Back through rmsnorm: dx (+)= rstd (g - xhat mean(g xhat)), g = dy gamma,
 * xhat = x rstd; dgamma += sum over rows of dy xhat. */
FF_KERNEL void FF_PLAIN(rmsnorm_backward)(const float *x, int T, int D, const float *gamma, float eps,
                                          const float *dy, float *dx, int acc, float *restrict dgamma) {
  for (int t0 = 0; t0 < T; t0 += 8) { /* 8 rows' norms first, as the forward takes them */
    const int n = T - t0 < 8 ? T - t0 : 8;
    float r[8];
    ff_rmsnorm_rstds(x + (size_t)t0 * D, n, D, eps, r);
    for (int k = 0; k < n; k++) {
      const float *xt = x + (size_t)(t0 + k) * D, *dyt = dy + (size_t)(t0 + k) * D, rstd = r[k];
      float *dxt = dx + (size_t)(t0 + k) * D, sgx[8] = {0};
      const int D8 = D - D % 8;
      for (int i = 0; i < D8; i += 8) /* lane l takes i + l, i % 8 (in this form the lanes vectorize) */
        for (int l = 0; l < 8; l++) {
          const float xhat = xt[i + l] * rstd;
          sgx[l] += dyt[i + l] * gamma[i + l] * xhat;
          dgamma[i + l] += dyt[i + l] * xhat;
        }
      for (int i = D8; i < D; i++) {
        const float xhat = xt[i] * rstd;
        sgx[i - D8] += dyt[i] * gamma[i] * xhat;
        dgamma[i] += dyt[i] * xhat;
      }
      const float mgx = ff_sum8(sgx) / (float)D;
      for (int i = 0; i < D; i++) {
        const float v = rstd * (dyt[i] * gamma[i] - xt[i] * rstd * mgx);
        dxt[i] = acc ? dxt[i] + v : v;
      }
    }
  }
}

/* @part gelu_backward: plain elementwise gelu exp */
/* dh = dy gelu'(h), gelu'(h) = Phi(h) + h phi(h) over n floats */
static inline float ff_gelu_grad1(float v) {
  return 0.5f * (1.0f + ff_erf(v * 0.70710678118654752f)) + v * 0.39894228040143268f * ff_exp_neg(-0.5f * v * v);
}
FF_KERNEL void FF_PLAIN(gelu_backward)(const float *h, const float *dy, float *dh, size_t n) {
  FF_ELEMENTWISE(n, dh, dy[i] * ff_gelu_grad1(h[i]));
}

/* @part gelu_tanh_backward: plain elementwise tanh */
/* dh = dy gelu_tanh'(h) = dy ((1 + t)/2 + h/2 (1 - t^2) k (1 + 3 c h^2)),
 * t = tanh(k (h + c h^3)), k = sqrt(2/pi), c = 0.044715 */
static inline float ff_gelu_tanh_grad1(float v) {
  const float k = 0.79788456080286536f, c = 0.044715f, t = ff_tanh(k * (v + c * v * v * v));
  return 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * k * (1.0f + 3.0f * c * v * v);
}
FF_KERNEL void FF_PLAIN(gelu_tanh_backward)(const float *h, const float *dy, float *dh, size_t n) {
  FF_ELEMENTWISE(n, dh, dy[i] * ff_gelu_tanh_grad1(h[i]));
}

/* @part silu_backward: plain elementwise tanh */
/* dh = dy silu'(h) = dy s (1 + h (1 - s)), s = sigmoid(h) = (1 + tanh(h/2)) / 2 */
static inline float ff_silu_grad1(float dy, float h) {
  const float s = 0.5f * (1.0f + ff_tanh(0.5f * h));
  return dy * s * (1.0f + h * (1.0f - s));
}
FF_KERNEL void FF_PLAIN(silu_backward)(const float *h, const float *dy, float *dh, size_t n) {
  FF_ELEMENTWISE(n, dh, ff_silu_grad1(dy[i], h[i]));
}

/* @part swiglu_backward: plain elementwise tanh */
/* Back through y = silu(gate) up, h [T, 2N] = gate | up, s = sigmoid(gate)
 * = (1 + tanh(gate/2)) / 2:  dup = dy gate s,  dgate = dy up s (1 + gate (1 - s))
 * into dh [T, 2N] (set) */
static inline void ff_swiglu_grad1(float dy, float gate, float up, float *dup, float *dgate) {
  const float s = 0.5f * (1.0f + ff_tanh(0.5f * gate));
  *dup = dy * gate * s, *dgate = dy * up * s * (1.0f + gate * (1.0f - s));
}
FF_KERNEL void FF_PLAIN(swiglu_backward)(const float *h, int T, int N, const float *dy, float *dh) {
  for (int t = 0; t < T; t++) {
    const float *gate = h + (size_t)t * 2 * N, *up = gate + N, *dyt = dy + (size_t)t * N;
    float *dgate = dh + (size_t)t * 2 * N, *dup = dgate + N;
    const int blocks = N - N % FF_PLAIN_BLOCK;
    for (int i0 = 0; i0 < blocks; i0 += FF_PLAIN_BLOCK) { /* FF_ELEMENTWISE's blocks, two outputs */
      float du[FF_PLAIN_BLOCK], dg[FF_PLAIN_BLOCK];
      for (int l = 0; l < FF_PLAIN_BLOCK; l++) ff_swiglu_grad1(dyt[i0 + l], gate[i0 + l], up[i0 + l], &du[l], &dg[l]);
      for (int l = 0; l < FF_PLAIN_BLOCK; l++) dup[i0 + l] = du[l], dgate[i0 + l] = dg[l];
    }
    for (int i = blocks; i < N; i++) ff_swiglu_grad1(dyt[i], gate[i], up[i], &dup[i], &dgate[i]);
  }
}
