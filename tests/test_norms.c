/* test_norms.c - the float-only LayerNorm and RMSNorm of kernels/plain.c
 * (what generated code and the JIT engines run: no double, no libm) against
 * a double reference written here, on rows chosen to be hard for float sums:
 * lengths 1 to 4096, a mean up to 1e5 standard deviations away from zero,
 * scales from 1e-3 to 1e3 and eps 1e-5 and 1e-12 (BERT's).  Every class
 * must be within 1e-5 of the reference (max |y - ref| / max |ref|, the
 * contract of generated code); the worst error of each is printed
 * (docs/performance.md, "The kernels": the numerical cost of float sums).  Then
 * ff_rsqrt, the norms' 1/sqrt, over every float exponent: within 2 ulp of
 * the correctly rounded value. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FF_KERNEL
#define FF_PLAIN(name) ff_##name##_test
#include "../kernels/plain.c"

#define TOL 1e-5

static uint64_t rng = 0x9e3779b97f4a7c15u;
static double uniform(void) { /* [0, 1) */
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (double)(rng >> 11) / 9007199254740992.0;
}
static double normal(void) { return sqrt(-2.0 * log(1.0 - uniform())) * cos(6.283185307179586 * uniform()); }

/* y [D] in double: layernorm (ln) or rmsnorm of the float row x */
static void reference(const float *x, int D, double eps, int ln, double *y) {
  double mean = 0, var = 0;
  for (int i = 0; i < D; i++) mean += x[i];
  mean = ln ? mean / D : 0;
  for (int i = 0; i < D; i++) var += (x[i] - mean) * (x[i] - mean);
  const double rstd = 1.0 / sqrt(var / D + eps);
  for (int i = 0; i < D; i++) y[i] = (x[i] - mean) * rstd;
}

/* the worst scaled error of one class over `rows` random rows */
static double sweep(int ln, int D, double offset, double scale, double eps, int rows) {
  float *x = malloc(sizeof(float) * (size_t)D), *y = malloc(sizeof(float) * (size_t)D);
  float *gamma = malloc(sizeof(float) * (size_t)D), *beta = calloc((size_t)D, sizeof(float));
  double *r = malloc(sizeof(double) * (size_t)D), worst = 0;
  for (int i = 0; i < D; i++) gamma[i] = 1.0f;
  for (int row = 0; row < rows; row++) {
    for (int i = 0; i < D; i++) x[i] = (float)(offset * scale + normal() * scale);
    if (ln) ff_layernorm_test(x, 1, D, gamma, beta, (float)eps, y);
    else ff_rmsnorm_test(x, 1, D, gamma, (float)eps, y);
    reference(x, D, eps, ln, r);
    double err = 0, big = 1e-30;
    for (int i = 0; i < D; i++) {
      err = fmax(err, fabs(y[i] - r[i]));
      big = fmax(big, fabs(r[i]));
    }
    worst = fmax(worst, err / big);
  }
  free(x), free(y), free(gamma), free(beta), free(r);
  return worst;
}

static int check_norms(void) {
  static const int Ds[] = {1, 7, 64, 512, 4096};
  static const double offsets[] = {0, 10, 1e3, 1e5}, scales[] = {1e-3, 1, 1e3}, epss[] = {1e-5, 1e-12};
  int failed = 0;
  for (int ln = 1; ln >= 0; ln--)
    for (size_t o = 0; o < sizeof offsets / sizeof *offsets; o++) {
      double worst = 0;
      for (size_t d = 0; d < sizeof Ds / sizeof *Ds; d++)
        for (size_t s = 0; s < sizeof scales / sizeof *scales; s++)
          for (size_t e = 0; e < sizeof epss / sizeof *epss; e++) {
            /* D 1 of layernorm is all eps (y = 0); scale 1e-3 with eps 1e-5 is eps-dominated: both still run */
            double err = sweep(ln, Ds[d], offsets[o], scales[s], epss[e], Ds[d] >= 4096 ? 8 : 64);
            if (!(err <= TOL)) {
              printf("FAILED %s D=%d mean %g sd, sd %g, eps %g: err %.3e\n", ln ? "layernorm" : "rmsnorm", Ds[d],
                     offsets[o], scales[s], epss[e], err);
              failed++;
            }
            worst = fmax(worst, err);
          }
      printf("%-9s mean = %-6g sd (D 1..4096, sd 1e-3..1e3, eps 1e-5 and 1e-12): worst err %.2e\n",
             ln ? "layernorm" : "rmsnorm", offsets[o], worst);
    }
  return failed;
}

/* ff_rsqrt against 1/sqrt in double rounded to float, over every exponent
 * (subnormals included) with random mantissas: the worst error in ulp */
static int check_rsqrt(void) {
  double worst = 0;
  for (int e = -149; e <= 127; e++)
    for (int i = 0; i < 2000; i++) {
      float v = (float)ldexp(1.0 + uniform(), e);
      if (!(v > 0) || isinf(v)) continue;
      float got = ff_rsqrt(v), want = (float)(1.0 / sqrt((double)v));
      double ulp = (double)nextafterf(want, INFINITY) - want;
      worst = fmax(worst, fabs((double)got - want) / ulp);
    }
  int bad = !(worst <= 2.0) || ff_rsqrt(INFINITY) != 0.0f || !isnan(ff_rsqrt(NAN));
  printf("ff_rsqrt: worst %.2f ulp over exponents -149..127; rsqrt(inf) = %g, rsqrt(NaN) = %g%s\n", worst,
         ff_rsqrt(INFINITY), ff_rsqrt(NAN), bad ? "  FAILED" : "");
  return bad;
}

int main(void) {
  int failed = check_norms() + check_rsqrt();
  printf("%s\n", failed ? "FAILED" : "ok: float norms within 1e-5 of double everywhere");
  return failed != 0;
}
