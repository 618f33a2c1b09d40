/* peak.c - the single-core FMA peak of this machine: 12 independent chains
 * of vector fused multiply-adds (AVX-512, else AVX2, else scalar), which no
 * code multiplying float32 can beat.  Prints "peak_gflops: X". */
#include <stdio.h>
#include <time.h>
#if defined(__AVX512F__)
#include <immintrin.h>
typedef __m512 vec;
#define LANES 16
#define FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define SET(x) _mm512_set1_ps(x)
static float first(vec v) { return _mm512_cvtss_f32(v); }
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
typedef __m256 vec;
#define LANES 8
#define FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define SET(x) _mm256_set1_ps(x)
static float first(vec v) { return _mm256_cvtss_f32(v); }
#else
typedef float vec;
#define LANES 1
#define FMA(a, b, c) ((a) * (b) + (c))
#define SET(x) (x)
static float first(vec v) { return v; }
#endif

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(void) {
  vec acc[12], x = SET(0.999999f), y = SET(1e-7f);
  for (int i = 0; i < 12; i++) acc[i] = SET((float)i);
  double best = 0;
  for (int rep = 0; rep < 5; rep++) { /* the best of 5: the peak, not the neighbours */
    const long n = 20000000;
    double t = now();
    for (long k = 0; k < n; k++) { /* written out: the 12 chains must stay in registers */
      acc[0] = FMA(acc[0], x, y), acc[1] = FMA(acc[1], x, y), acc[2] = FMA(acc[2], x, y);
      acc[3] = FMA(acc[3], x, y), acc[4] = FMA(acc[4], x, y), acc[5] = FMA(acc[5], x, y);
      acc[6] = FMA(acc[6], x, y), acc[7] = FMA(acc[7], x, y), acc[8] = FMA(acc[8], x, y);
      acc[9] = FMA(acc[9], x, y), acc[10] = FMA(acc[10], x, y), acc[11] = FMA(acc[11], x, y);
    }
    t = now() - t;
    double g = 12.0 * LANES * 2 * n / t / 1e9;
    if (g > best) best = g;
  }
  float s = 0;
  for (int i = 0; i < 12; i++) s += first(acc[i]);
  printf("lanes: %d (checksum %g)\npeak_gflops: %.1f\n", LANES, (double)s, best);
  return 0;
}
