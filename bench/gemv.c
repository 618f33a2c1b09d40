/* gemv.c - decoding's matrix-vector products against the memory: GB/s of
 * weight bytes read per second by ff_linear_ISA (f32), ff_linear_bf16_ISA and
 * ff_linear_q8_ISA with T = 1 (or the T given) on one thread, on the 110M model's shapes, for
 * every ISA the host carries and this machine runs; each against a streaming
 * read's GB/s over the same 1 GiB (the memory's limit for one core), the two
 * timed in turns.  Each shape's
 * packed matrix is copied over the whole buffer, which is far larger than the
 * caches, and the copies are multiplied one after another, as decoding reads
 * layer after layer: the bytes come from DRAM, not from a cache.  The best of
 * 7 passes each.  Then prefill's GFLOP/s (T = 128) for the three.  Not a test: it asserts nothing.
 *   bench_gemv [MiB [T]]    (buffer size, default 1024; rows of x, default 1) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codegen.h"

typedef void (*linear_fn)(const float *x, int T, int IN, const void *W, const float *b, int OUT, float *y, int flags,
                          int j0, int j1);

/* the thread's CPU time: on a machine shared with other work, the time this
 * thread was off the CPU is not counted (the memory's other users still are) */
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* the streaming read: 8 independent sums of 64-byte vectors (compiled with
 * -march=native, so the widest loads this machine has) */
typedef float vec16 __attribute__((vector_size(64)));
static float stream_read(const unsigned char *buf, size_t bytes) {
  const vec16 *v = (const vec16 *)(const void *)buf;
  vec16 s[8] = {{0}};
  for (size_t i = 0; i + 8 <= bytes / 64; i += 8)
    for (int j = 0; j < 8; j++) s[j] += v[i + j];
  float r = 0;
  for (int j = 0; j < 8; j++)
    for (int l = 0; l < 16; l++) r += s[j][l];
  return r;
}

static const char *want_isa;
static linear_fn found[3]; /* f32, bf16, int8 */
static void pick(void *ctx, const char *name, void *fn) {
  static const char *kinds[3] = {"linear", "linear_bf16", "linear_q8"};
  (void)ctx;
  for (int d = 0; d < 3; d++) {
    char full[64];
    snprintf(full, sizeof full, "ff_%s_%s", kinds[d], want_isa);
    if (!strcmp(name, full)) memcpy(&found[d], &fn, sizeof fn);
  }
}

/* packed bytes of an OUT x IN matrix: dtype 0 f32, 1 bf16, 2 int8 (panels of nr; OUT a multiple of nr) */
static size_t packed_bytes(int dtype, int IN, int OUT) {
  return dtype == 0 ? 4 * (size_t)IN * OUT : dtype == 1 ? 2 * (size_t)IN * OUT : (size_t)(IN + 31) / 32 * 36 * OUT;
}

/* prefill: T = 128 rows of base's shapes, GFLOP/s per dtype (the tile's
 * arithmetic; the weights of one matrix, in cache after the first pass) */
static void prefill(const unsigned char *buf, size_t total) {
  static const int shapes[][2] = {{768, 768}, {3072, 768}, {768, 3072}}; /* OUT, IN */
  const int T = 128;
  float *x = malloc(sizeof(float) * T * 3072), *y = malloc(sizeof(float) * T * 3072);
  if (!x || !y) return;
  for (int i = 0; i < T * 3072; i++) x[i] = (float)(i % 7) * 0.1f;
  for (const char *const *isa = ff_host_isas(); *isa; isa++) {
    want_isa = *isa;
    memset(found, 0, sizeof found);
    ff_native_kernels(pick, NULL);
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
      printf("prefill %-7s T=%d %4d x %4d:", *isa, T, shapes[s][0], shapes[s][1]);
      for (int d = 0; d < 3; d++) {
        const int OUT = shapes[s][0], IN = shapes[s][1];
        double best = 1e30;
        if (!found[d] || packed_bytes(d, IN, OUT) > total) continue;
        for (int rep = 0; rep < 5; rep++) {
          double t = now();
          found[d](x, T, IN, buf, NULL, OUT, y, 0, 0, OUT);
          t = now() - t;
          best = t < best ? t : best;
        }
        printf("  %s %5.1f GFLOP/s", d == 0 ? "f32" : d == 1 ? "bf16" : "int8", 2.0 * T * IN * OUT / best / 1e9);
      }
      printf("\n");
    }
  }
  free(x), free(y);
}

int main(int argc, char **argv) {
  static const int shapes[][2] = {{768, 768}, {768, 2048}, {2048, 768}, {32000, 768}}; /* OUT, IN */
  static const char *dtypes[3] = {"f32", "bf16", "int8"};
  const size_t total = (size_t)(argc > 1 ? atoi(argv[1]) : 1024) << 20;
  const int T = argc > 2 && atoi(argv[2]) > 0 && atoi(argv[2]) <= 64 ? atoi(argv[2]) : 1;
  void *mem = NULL;
  unsigned char *buf = posix_memalign(&mem, 64, total) ? NULL : mem;
  float *x = malloc(sizeof(float) * 2048 * T), *y = malloc(sizeof(float) * 32000 * T);
  if (!buf || !x || !y) return fprintf(stderr, "bench_gemv: out of memory\n"), 1;
  /* every byte 0x30..0x3f: every float, bf16 and scale normal and < 1, every int8 48..63 */
  unsigned long long r = 88172645463325252ULL;
  for (size_t i = 0; i < total; i++) r ^= r << 13, r ^= r >> 7, r ^= r << 17, buf[i] = 0x30 | (r & 15);
  for (int i = 0; i < 2048 * T; i++) x[i] = (float)(i % 7) * 0.1f;
  volatile float sink = 0;
  for (const char *const *isa = ff_host_isas(); *isa; isa++) {
    want_isa = *isa;
    memset(found, 0, sizeof found);
    ff_native_kernels(pick, NULL);
    for (int d = 0; d < 3; d++)
      for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        const int OUT = shapes[s][0], IN = shapes[s][1];
        const size_t bytes = packed_bytes(d, IN, OUT), copies = total / bytes;
        double g = 0, st = 0;
        if (!found[d] || !copies) continue;
        for (int rep = 0; rep < 7; rep++) { /* the stream and the GEMV in turns: the same load on the machine */
          double t = now();
          sink += stream_read(buf, total);
          t = now() - t;
          if (total / t / 1e9 > st) st = total / t / 1e9;
          t = now();
          for (size_t c = 0; c < copies; c++) found[d](x, T, IN, buf + c * bytes, NULL, OUT, y, 0, 0, OUT);
          t = now() - t;
          if (copies * bytes / t / 1e9 > g) g = copies * bytes / t / 1e9;
        }
        sink += y[0];
        printf("gemv %-7s %-4s T=%d %5d x %4d: %5.1f GB/s, stream read %5.1f GB/s: %3.0f %%\n", *isa, dtypes[d], T, OUT,
               IN, g, st, 100 * g / st);
      }
  }
  prefill(buf, total);
  free(buf), free(x), free(y);
  return sink != sink; /* the sums are read, so that no compiler drops the reads (0 unless a NaN) */
}
