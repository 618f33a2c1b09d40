/* kernel_data.c - random data, packed panels and the error measure of the
 * kernel tests (kernel_data.h says what each does). */
#include "kernel_data.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/isas.h"

static unsigned long long rng_state = 88172645463325252ULL;

float uniform(void) { /* xorshift64, [-1, 1) */
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (float)((rng_state >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

float *randoms(size_t n, float scale) {
  float *x = malloc((n ? n : 1) * sizeof *x);
  if (!x) {
    fprintf(stderr, "kernel test: out of memory\n");
    exit(1);
  }
  for (size_t i = 0; i < n; i++) x[i] = uniform() * scale;
  return x;
}

float *copy_of(const float *x, size_t n) {
  float *y = randoms(n, 0);
  memcpy(y, x, n * sizeof *x);
  return y;
}

float *pack_panels(const float *W, int rows, int cols, int nr) {
  float *P = randoms((size_t)(rows + nr - 1) / nr * nr * cols, 0);
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) P[(size_t)(r / nr) * cols * nr + (size_t)c * nr + r % nr] = W[(size_t)r * cols + c];
  return P;
}

char class_of(float v) { return v != v ? 'N' : v == INFINITY ? '+' : v == -INFINITY ? '-' : 0; }

char *classes(size_t n) {
  char *c = calloc(n ? n : 1, 1);
  if (!c) {
    fprintf(stderr, "kernel test: out of memory\n");
    exit(1);
  }
  return c;
}

static const char *class_name(char c) { return c == 'N' ? "NaN" : c == '+' ? "+inf" : c == '-' ? "-inf" : "finite"; }

double compare(const float *got, const float *want, const char *ex, size_t n) {
  double e = 0, m = 0;
  for (size_t i = 0; i < n; i++) {
    const char g = class_of(got[i]), w = class_of(want[i]), x = ex ? ex[i] : 0;
    if (g != x || w != x) {
      printf("  output %zu: kernel %s (%g), reference %s (%g), expected %s\n", i, class_name(g), got[i],
             class_name(w), want[i], class_name(x));
      return 1e30;
    }
    if (x) continue;
    double d = fabs((double)got[i] - want[i]);
    if (!(d <= e)) e = d;
    if (fabs(want[i]) > m) m = fabs(want[i]);
  }
  return e / (m > 0 ? m : 1e-30);
}

double scaled_err(const float *got, const float *want, size_t n) { return compare(got, want, NULL, n); }

double compare_columns(const float *y, const float *y0, float *r, int T, int OUT, int j0) {
  double err = 0;
  for (int t = 0; t < T; t++) /* columns before j0, not asked for: untouched */
    for (int o = 0; o < j0; o++) {
      const size_t i = (size_t)t * OUT + o;
      if (memcmp(&y[i], &y0[i], sizeof *y)) err = 1e30;
      r[i] = y[i];
    }
  const size_t ny = (size_t)T * OUT;
  char *ex = classes(ny);
  for (size_t i = 0; i < ny; i++) ex[i] = class_of(r[i]);
  const double e = compare(y, r, ex, ny);
  free(ex);
  return e > err ? e : err;
}

int panel_of(const char *isa) {
#define FF_ISA_NR(name, mr, nr, ...)                                                                                 \
  if (!strcmp(isa, #name)) return nr;
  FF_ISAS(FF_ISA_NR)
#undef FF_ISA_NR
  return 0;
}
