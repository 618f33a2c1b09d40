/* test_train_kernels.c - the kernels that move a training step's data
 * (kernels/train.c: ff_pack_ISA, the panels of every matrix product, and
 * ff_transpose_ISA, attention's P^T) of every ISA this machine runs, against
 * their index formulas written out here; and ff_linear_ta_ISA (a weight's
 * gradient dW += dY^T X read from dY itself) against ff_transpose then
 * ff_linear_ISA, float for float (the same sums in the same order).  They copy floats, so the check is
 * exact: every float of the destination (what they must not write included,
 * filled with a sentinel) equal to the formula's.  The sizes cross the ways
 * the kernels split their work: 8 x 8 blocks in registers (AVX), their edges,
 * 16 x 16 scalar blocks, panels narrower than NR, column ranges that start
 * past the first panel, and source rows longer than the copied part (ld).
 *
 * The kernels are the host's (host/native.c, what the libtcc engine binds;
 * generated training code compiles the same text); built with
 * -DFF_QTEST_DIRECT (tests/qkernels_cross.py, for aarch64 under qemu) the
 * test links the kernels of the ISAs that run there (neon, generic) itself. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/isas.h"
#include "kernel_data.h"
#ifndef FF_QTEST_DIRECT
#include "codegen.h"
#endif

typedef void (*pack_fn)(const float *src, int ld, int K, int N, int trans, int n0, int n1, float *dst);
typedef void (*transpose_fn)(const float *src, int rows, int cols, int ld, float *dst);
typedef void (*linear_fn)(const float *x, int T, int IN, const float *W, const float *b, int OUT, float *y, int flags,
                          int j0, int j1);
typedef void (*linear_ta_fn)(const float *xt, int ldx, int T, int IN, const float *W, const float *b, int OUT, float *y,
                             int ldy, int flags, int j0, int j1);

static const char *want_isa;
static pack_fn found_pack;
static transpose_fn found_transpose;
static linear_fn found_linear;
static linear_ta_fn found_linear_ta;

#ifdef FF_QTEST_DIRECT
#include "ff_host_isas.h" /* the ISAs linked in, as the host build's header (qkernels_cross.py writes it) */
static const char *const linked[] = {
#define FF_TTEST_NAME(name, runs) #name,
    FF_HOST_ISAS(FF_TTEST_NAME)
#undef FF_TTEST_NAME
        NULL};
static const char *const *ff_host_isas(void) { return linked; }
/* the kernels of isa, linked in */
static void find(const char *isa) {
  want_isa = isa, found_pack = NULL, found_transpose = NULL, found_linear = NULL, found_linear_ta = NULL;
#define FF_TTEST_LINKED(name, runs)                                                                                  \
  if (!strcmp(isa, #name))                                                                                           \
    found_pack = ff_pack_##name, found_transpose = ff_transpose_##name, found_linear = ff_linear_##name,            \
    found_linear_ta = ff_linear_ta_##name;
  FF_HOST_ISAS(FF_TTEST_LINKED)
#undef FF_TTEST_LINKED
}
#else
static void pick(void *ctx, const char *name, void *fn) {
  char p[64], t[64], l[64], a[64];
  (void)ctx;
  snprintf(p, sizeof p, "ff_pack_%s", want_isa);
  snprintf(t, sizeof t, "ff_transpose_%s", want_isa);
  snprintf(l, sizeof l, "ff_linear_%s", want_isa);
  snprintf(a, sizeof a, "ff_linear_ta_%s", want_isa);
  if (!strcmp(name, p)) memcpy(&found_pack, &fn, sizeof fn);
  if (!strcmp(name, t)) memcpy(&found_transpose, &fn, sizeof fn);
  if (!strcmp(name, l)) memcpy(&found_linear, &fn, sizeof fn);
  if (!strcmp(name, a)) memcpy(&found_linear_ta, &fn, sizeof fn);
}

/* the host's kernels of isa, as the libtcc engine gets them */
static void find(const char *isa) {
  want_isa = isa, found_pack = NULL, found_transpose = NULL, found_linear = NULL, found_linear_ta = NULL;
  ff_native_kernels(pick, NULL);
}
#endif

static float *scattered(size_t n, unsigned seed) { /* values of both signs, few of them exact sums */
  float *x = malloc((n ? n : 1) * sizeof *x);
  for (size_t i = 0; x && i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    x[i] = (float)((int)(seed >> 16 & 0x7fff) - 16384) / 8192.0f;
  }
  return x;
}

/* dW [T, IN] (flags) += dY^T [T, R] X [R, IN] + b from dY [R, T] (rows every ldy floats): ff_linear_ta
 * on dY against ff_transpose then ff_linear, columns j0 .. IN-1 */
static int check_linear_ta(const char *isa, int nr, int R, int T, int IN, int ldy, int flags, int j0) {
  const int panels = (IN + nr - 1) / nr;
  float *dy = scattered((size_t)R * ldy, 1u + (unsigned)(R * 31 + T)), *x = scattered((size_t)R * IN, 7u + (unsigned)IN);
  float *b = scattered((size_t)IN, 3u), *xp = malloc((size_t)panels * nr * R * sizeof *xp);
  float *dyt = malloc(((size_t)T * R + 1) * sizeof *dyt), *want = scattered((size_t)T * IN, 11u);
  float *got = scattered((size_t)T * IN, 11u);
  int bad = !dy || !x || !b || !xp || !dyt || !want || !got;
  if (!bad) {
    found_pack(x, IN, R, IN, 0, 0, IN, xp);
    found_transpose(dy, R, T, ldy, dyt);
    found_linear(dyt, T, R, xp, flags & 8 ? b : NULL, IN, want, flags & 7, j0, IN);
    found_linear_ta(dy, ldy, T, R, xp, flags & 8 ? b : NULL, IN, got, IN, flags & 7, j0, IN);
    for (size_t i = 0; i < (size_t)T * IN && !bad; i++)
      if (memcmp(&got[i], &want[i], sizeof *got)) {
        fprintf(stderr, "FAIL %s linear_ta R %d T %d IN %d ldy %d flags %d j0 %d: dW[%d, %d] = %.9g, want %.9g\n", isa,
                R, T, IN, ldy, flags, j0, (int)(i / IN), (int)(i % IN), got[i], want[i]);
        bad = 1;
      }
  }
  free(dy), free(x), free(b), free(xp), free(dyt), free(want), free(got);
  return bad;
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
    find(*isa);
    if (!found_pack || !found_transpose || !found_linear || !found_linear_ta || !panel_of(*isa)) {
      fprintf(stderr, "FAIL %s: no ff_pack / ff_transpose / ff_linear / ff_linear_ta among the host's kernels\n", *isa);
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
    /* R (k: one step, under and over a k block), T (dW's rows: one, a tile's edge, more than a
     * block of rows), IN (narrow, whole panels, a narrow last one); = , += (FF_FETCH), + bias; dY's
     * rows longer than T; from the second panel */
    const int Rs[] = {1, 5, 200, 400}, Ts[] = {1, 13, 200}, INs[] = {3, nr, 2 * nr + 5};
    for (size_t r = 0; r < sizeof Rs / sizeof *Rs; r++)
      for (size_t t = 0; t < sizeof Ts / sizeof *Ts; t++)
        for (size_t k = 0; k < sizeof INs / sizeof *INs; k++) {
          const int R = Rs[r], T = Ts[t], IN = INs[k];
          failed |= check_linear_ta(*isa, nr, R, T, IN, T, 0, 0);
          failed |= check_linear_ta(*isa, nr, R, T, IN, T + 5, 1 | 4, 0);
          failed |= check_linear_ta(*isa, nr, R, T, IN, T + 16, 1 | 8, IN > nr ? nr : 0);
        }
    isas++;
  }
  if (!failed) printf("train kernels: pack and transpose exact, linear_ta as transpose + linear on %d ISA(s)\n", isas);
  return failed;
}
