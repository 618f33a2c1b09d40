/* stream.c - what one core reads from memory: one thread summing a buffer
 * far larger than the caches (256 MiB by default), with vector loads and
 * several independent sums so that the loads, not the adds, are the limit.
 * Decoding one token streams every weight once, so a decoder's bytes of
 * weights per second are read against this.  Prints "stream_read_gbs: X"
 * (the best of 10 passes, 1 GB = 1e9 bytes).
 *
 *   stream [MiB [huge]]   huge: 2 MiB pages (default: 4 KiB, as a mapped file) */
#define _DEFAULT_SOURCE /* clock_gettime, posix_memalign, madvise */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

/* the sum of n floats (n a multiple of 64) */
static float sum(const float *x, size_t n) {
#if defined(__AVX2__)
  __m256 a[8];
  for (int k = 0; k < 8; k++) a[k] = _mm256_setzero_ps();
  for (size_t i = 0; i < n; i += 64)
    for (int k = 0; k < 8; k++) a[k] = _mm256_add_ps(a[k], _mm256_load_ps(x + i + 8 * k));
  for (int k = 1; k < 8; k++) a[0] = _mm256_add_ps(a[0], a[k]);
  float l[8];
  _mm256_storeu_ps(l, a[0]);
  return l[0] + l[1] + l[2] + l[3] + l[4] + l[5] + l[6] + l[7];
#else
  float a[16] = {0};
  for (size_t i = 0; i < n; i += 16)
    for (int k = 0; k < 16; k++) a[k] += x[i + k];
  for (int k = 1; k < 16; k++) a[0] += a[k];
  return a[0];
#endif
}

int main(int argc, char **argv) {
  size_t mib = argc > 1 ? (size_t)atol(argv[1]) : 256, n = mib << 18; /* floats */
  float *x = NULL;
  if (!mib || posix_memalign((void **)&x, 4096, n * sizeof *x)) {
    fprintf(stderr, "stream: cannot allocate %zu MiB\n", mib);
    return 1;
  }
  int huge = argc > 2 && !strcmp(argv[2], "huge");
#ifdef MADV_NOHUGEPAGE
  /* 4 KiB pages, as the mapped weights blob has (a file's pages); "huge": 2 MiB */
  madvise(x, n * sizeof *x, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
#endif
  for (size_t i = 0; i < n; i++) x[i] = (float)(i & 7); /* every page touched before timing */
  double best = 0;
  float check = 0;
  for (int rep = 0; rep < 10; rep++) {
    double t = now();
    check += sum(x, n);
    t = now() - t;
    if (n * sizeof *x / t / 1e9 > best) best = n * sizeof *x / t / 1e9;
  }
  printf("buffer: %zu MiB, %s pages (checksum %g)\nstream_read_gbs: %.2f\n", mib, huge ? "2 MiB" : "4 KiB",
         (double)check, best);
  free(x);
  return 0;
}
