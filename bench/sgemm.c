/* sgemm.c - OpenBLAS cblas_sgemm on the GEMM shapes of a transformer layer:
 * for each "M K N" argument triple, y [M, N] = x [M, K] W [K, N], timed (the
 * median of 30 after warm-up) on one thread.  Prints "sgemm M K N: X GFLOP/s"
 * lines and "sgemm_gflops: X" (all shapes' FLOPs over their summed medians). */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* OpenBLAS's own; Debian's cblas.h may be netlib's (an alternative), which lacks it */
void openblas_set_num_threads(int num_threads);

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  double flops = 0, seconds = 0;
  openblas_set_num_threads(1);
  for (int a = 1; a + 2 < argc; a += 3) {
    int M = atoi(argv[a]), K = atoi(argv[a + 1]), N = atoi(argv[a + 2]);
    float *x = malloc(sizeof(float) * M * K), *w = malloc(sizeof(float) * K * N), *y = malloc(sizeof(float) * M * N);
    for (long i = 0; i < (long)M * K; i++) x[i] = (float)(i % 7) * 0.1f;
    for (long i = 0; i < (long)K * N; i++) w[i] = (float)(i % 5) * 0.1f;
    double t[30];
    for (int r = -3; r < 30; r++) {
      double t0 = now();
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, x, K, w, N, 0.0f, y, N);
      if (r >= 0) t[r] = now() - t0;
    }
    qsort(t, 30, sizeof *t, cmp);
    double f = 2.0 * M * K * N;
    printf("sgemm %d %d %d: %.1f GFLOP/s\n", M, K, N, f / t[15] / 1e9);
    flops += f;
    seconds += t[15];
    free(x), free(w), free(y);
  }
  printf("sgemm_gflops: %.1f\n", flops / seconds / 1e9);
  return 0;
}
