/* plain.c - the kernels written in plain C, which the ISA's compiler flags
 * vectorise: LayerNorm and RMSNorm over the rows of x [T, D], and the
 * activations GELU (exact and tanh) and SwiGLU.  The libtcc engine gets the
 * host's build of them, as with the matrix kernels.  The ISA's file defines
 * FF_PLAIN(name) (ff_##name##_ISA), then includes this.
 *
 * Norms: row sums in double, as in the runtime, but over 8 interleaved
 * partial sums: 8 independent chains of adds instead of one (which also lets
 * the compiler vectorise them), so that a row is not bound by the latency of
 * each add.  y may be x (in place).
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
#include <math.h>

/* the sum of a row's 8 partial sums, in a fixed order */
static inline double ff_sum8(const double s[8]) { return (s[0] + s[1]) + (s[2] + s[3]) + ((s[4] + s[5]) + (s[6] + s[7])); }

/* y = (x - mean) / sqrt(var + eps) * gamma + beta, biased var */
FF_KERNEL void FF_PLAIN(layernorm)(const float *x, int T, int D, const float *gamma, const float *beta, double eps,
                                   float *y) {
  const int D8 = D - D % 8;
  for (int t = 0; t < T; t++) {
    const float *xt = x + (size_t)t * D;
    float *yt = y + (size_t)t * D;
    double s[8] = {0}, q[8] = {0};
    for (int i = 0; i < D8; i += 8)
      for (int l = 0; l < 8; l++) s[l] += xt[i + l];
    for (int i = D8; i < D; i++) s[i - D8] += xt[i];
    const double mean = ff_sum8(s) / D;
    for (int i = 0; i < D8; i += 8)
      for (int l = 0; l < 8; l++) q[l] += (xt[i + l] - mean) * (xt[i + l] - mean);
    for (int i = D8; i < D; i++) q[i - D8] += (xt[i] - mean) * (xt[i] - mean);
    const float rstd = (float)(1.0 / sqrt(ff_sum8(q) / D + eps));
    for (int i = 0; i < D; i++) yt[i] = (float)(xt[i] - mean) * rstd * gamma[i] + beta[i];
  }
}

/* y = x / sqrt(mean(x^2) + eps) * gamma */
FF_KERNEL void FF_PLAIN(rmsnorm)(const float *x, int T, int D, const float *gamma, double eps, float *y) {
  const int D8 = D - D % 8;
  for (int t = 0; t < T; t++) {
    const float *xt = x + (size_t)t * D;
    float *yt = y + (size_t)t * D;
    double q[8] = {0};
    for (int i = 0; i < D8; i += 8)
      for (int l = 0; l < 8; l++) q[l] += (double)xt[i + l] * xt[i + l];
    for (int i = D8; i < D; i++) q[i - D8] += (double)xt[i] * xt[i];
    const float rstd = (float)(1.0 / sqrt(ff_sum8(q) / D + eps));
    for (int i = 0; i < D; i++) yt[i] = xt[i] * rstd * gamma[i];
  }
}

/* erf(x): x P(x^2) / Q(x^2) on [-4, 4], where float erf is +-1 beyond */
static inline float ff_erf(float a) {
  const float x = a > 4.0f ? 4.0f : a < -4.0f ? -4.0f : a, x2 = x * x;
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
  return a >= 4.0f ? 1.0f : a <= -4.0f ? -1.0f : x * p / q; /* exactly +-1 beyond (below) */
}

/* tanh(x): x P(x^2) / Q(x^2) on [-7.9053, 7.9053], where float tanh is +-1 beyond */
static inline float ff_tanh(float a) {
  const float c = 7.90531110763549805f, x = a > c ? c : a < -c ? -c : a, x2 = x * x;
  float p = x2 * -2.76076847742355e-16f + 2.00018790482477e-13f, q;
  p = x2 * p - 8.60467152213735e-11f;
  p = x2 * p + 5.12229709037114e-08f;
  p = x2 * p + 1.48572235717979e-05f;
  p = x2 * p + 6.37261928875436e-04f;
  p = x2 * p + 4.89352455891786e-03f;
  q = x2 * 1.19825839466702e-06f + 1.18534705686654e-04f;
  q = x2 * q + 2.26843463243900e-03f;
  q = x2 * q + 4.89352518554385e-03f;
  return a >= c ? 1.0f : a <= -c ? -1.0f : x * p / q; /* exactly +-1 beyond (below) */
}

/* h = h/2 (1 + erf(h / sqrt 2)) over n floats (nn.GELU) */
FF_KERNEL void FF_PLAIN(gelu)(float *h, size_t n) {
  for (size_t i = 0; i < n; i++) h[i] = 0.5f * h[i] * (1.0f + ff_erf(h[i] * 0.70710678118654752f));
}

/* h = h/2 (1 + tanh(sqrt(2/pi) (h + 0.044715 h^3))) over n floats (approximate='tanh') */
FF_KERNEL void FF_PLAIN(gelu_tanh)(float *h, size_t n) {
  for (size_t i = 0; i < n; i++) {
    const float x = h[i];
    h[i] = 0.5f * x * (1.0f + ff_tanh(0.79788456080286536f * (x + 0.044715f * x * x * x)));
  }
}

/* a [T, N] = silu(gate) * up for h [T, 2N] = gate | up */
FF_KERNEL void FF_PLAIN(swiglu)(const float *restrict h, int T, int N, float *restrict a) {
  for (int t = 0; t < T; t++) {
    const float *gate = h + (size_t)t * 2 * N, *up = gate + N;
    float *at = a + (size_t)t * N;
    for (int i = 0; i < N; i++) at[i] = 0.5f * gate[i] * (1.0f + ff_tanh(0.5f * gate[i])) * up[i];
  }
}
