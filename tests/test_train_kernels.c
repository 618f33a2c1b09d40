/* test_train_kernels.c - the kernels that move a training step's data
 * (kernels/train.c: ff_pack_ISA, the panels of every matrix product, and
 * ff_transpose_ISA, dY^T of each dW) of every ISA this machine runs, against
 * their index formulas written out here.  They copy floats, so the check is
 * exact: every float of the destination (what they must not write included,
 * filled with a sentinel) equal to the formula's.  The sizes cross the ways
 * the kernels split their work: 8 x 8 blocks in registers (AVX), their edges,
 * 16 x 16 scalar blocks, panels narrower than NR, column ranges that start
 * past the first panel, and source rows longer than the copied part (ld).
 *
 * The kernels are the host's (host/native.c, what the libtcc engine binds;
 * generated training code compiles the same text). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/isas.h"
#include "codegen.h"
#include "kernel_data.h"

typedef void (*pack_fn)(const float *src, int ld, int K, int N, int trans, int n0, int n1, float *dst);
typedef void (*transpose_fn)(const float *src, int rows, int cols, int ld, float *dst);

static const char *want_isa;
static pack_fn found_pack;
static transpose_fn found_transpose;

static void pick(void *ctx, const char *name, void *fn) {
  char p[64], t[64];
  (void)ctx;
  snprintf(p, sizeof p, "ff_pack_%s", want_isa);
  snprintf(t, sizeof t, "ff_transpose_%s", want_isa);
  if (!strcmp(name, p)) memcpy(&found_pack, &fn, sizeof fn);
  if (!strcmp(name, t)) memcpy(&found_transpose, &fn, sizeof fn);
}

static float *numbered(size_t n) { /* distinct values: a float in the wrong place shows */
  float *x = malloc((n ? n : 1) * sizeof *x);
  for (size_t i = 0; x && i < n; i++) x[i] = (float)(i + 1);
  return x;
}

#define SENTINEL -7.0f

static int check_transpose(const char *isa, int rows, int cols, int ld) {
  float *src = numbered((size_t)rows * ld), *got = malloc(((size_t)rows * cols + 1) * sizeof *got);
  int bad = !src || !got;
  for (size_t i = 0; !bad && i < (size_t)rows * cols + 1; i++) got[i] = SENTINEL;
  if (!bad) found_transpose(src, rows, cols, ld, got);
  for (int c = 0; !bad && c < cols; c++)
    for (int r = 0; r < rows && !bad; r++)
      if (got[(size_t)c * rows + r] != src[(size_t)r * ld + c]) {
        fprintf(stderr, "FAIL %s transpose rows %d cols %d ld %d: dst[%d, %d] = %g, want %g\n", isa, rows, cols, ld,
                c, r, got[(size_t)c * rows + r], src[(size_t)r * ld + c]);
        bad = 1;
      }
  if (!bad && got[(size_t)rows * cols] != SENTINEL) {
    fprintf(stderr, "FAIL %s transpose rows %d cols %d: wrote past its [cols, rows]\n", isa, rows, cols);
    bad = 1;
  }
  free(src), free(got);
  return bad;
}

/* panels n0 / NR .. of B [K, N], B(k, n) = src[n ld + k] (trans) or src[k ld + n] */
static int check_pack(const char *isa, int K, int N, int trans, int n0, int n1, int ld) {
  const int nr = panel_of(isa), panels = (N + nr - 1) / nr;
  const size_t n = (size_t)panels * K * nr + 1;
  float *src = numbered(trans ? (size_t)N * ld : (size_t)K * ld), *got = malloc(n * sizeof *got);
  int bad = !src || !got;
  for (size_t i = 0; !bad && i < n; i++) got[i] = SENTINEL;
  if (!bad) found_pack(src, ld, K, N, trans, n0, n1, got);
  for (int p = 0; p < panels && !bad; p++)
    for (int k = 0; k < K && !bad; k++)
      for (int c = 0; c < nr && !bad; c++) {
        const int col = p * nr + c;
        const float want = col < n0 || col >= (n1 + nr - 1) / nr * nr ? SENTINEL /* outside the range */
                           : col >= N                                  ? 0.0f
                           : trans                                     ? src[(size_t)col * ld + k]
                                                                       : src[(size_t)k * ld + col];
        const float v = got[((size_t)p * K + k) * nr + c];
        if (v != want) {
          fprintf(stderr, "FAIL %s pack K %d N %d trans %d columns %d..%d ld %d: panel %d [%d, %d] = %g, want %g\n",
                  isa, K, N, trans, n0, n1, ld, p, k, c, v, want);
          bad = 1;
        }
      }
  if (!bad && got[n - 1] != SENTINEL) {
    fprintf(stderr, "FAIL %s pack K %d N %d: wrote past its panels\n", isa, K, N);
    bad = 1;
  }
  free(src), free(got);
  return bad;
}

int main(void) {
  /* rows, cols, extra ld: single elements, under one block, whole 8 x 8 blocks, 16-row blocks that
   * straddle the last whole 8, a dY of the GPT shape's width in part */
  static const int transposes[][3] = {{1, 1, 0},  {3, 5, 2},   {8, 8, 0},   {8, 16, 3},  {16, 8, 0},   {9, 17, 1},
                                      {24, 40, 0}, {31, 33, 5}, {40, 13, 0}, {64, 200, 0}, {72, 130, 7}};
  int failed = 0, isas = 0;
  for (const char *const *isa = ff_host_isas(); *isa; isa++) {
    want_isa = *isa, found_pack = NULL, found_transpose = NULL;
    ff_native_kernels(pick, NULL);
    if (!found_pack || !found_transpose || !panel_of(*isa)) {
      fprintf(stderr, "FAIL %s: no ff_pack / ff_transpose among the host's kernels\n", *isa);
      return 1;
    }
    const int nr = panel_of(*isa);
    for (size_t i = 0; i < sizeof transposes / sizeof *transposes; i++)
      failed |= check_transpose(*isa, transposes[i][0], transposes[i][1], transposes[i][1] + transposes[i][2]);
    /* K, N (whole panels, a narrow last one, one narrow panel), both layouts, the whole range and one
     * starting at the second panel; ld longer than a row */
    const int Ks[] = {1, 7, 8, 13, 64, 70}, Ns[] = {nr, 2 * nr, 2 * nr + 5, 3, 3 * nr - 1};
    for (size_t k = 0; k < sizeof Ks / sizeof *Ks; k++)
      for (size_t j = 0; j < sizeof Ns / sizeof *Ns; j++)
        for (int trans = 0; trans < 2; trans++) {
          const int K = Ks[k], N = Ns[j], ld = (trans ? K : N) + (int)(k % 3);
          failed |= check_pack(*isa, K, N, trans, 0, N, ld);
          if (N > nr) failed |= check_pack(*isa, K, N, trans, nr, N, ld);
        }
    isas++;
  }
  if (!failed) printf("train kernels: pack and transpose exact on %d ISA(s)\n", isas);
  return failed;
}
