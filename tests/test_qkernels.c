/* test_qkernels.c - the bf16 and int8 matrix kernels (ff_linear_bf16_ISA,
 * ff_linear_q8_ISA, kernels/quant.c) of every ISA this machine runs, against
 * an independent reference.
 *
 * The test quantizes random W [OUT, IN] with its own plain C of the two
 * formulas of issue 13 (bf16: round to nearest even; int8: groups of 32 along
 * IN, scale = max|w| / 127, q = round(w / scale)), checked first against
 * values computed by hand; packs them in the layouts of kernels/quant.c; and
 * compares the kernels' y with a double-accumulated x W^T + b on the
 * dequantized weights (then + y with FF_ACC, max(0, .) with FF_RELU): max
 * |error| / max |reference| <= 1e-5 (test_kernels.c's limit).  The cases
 * cross T (1: the GEMV, more: the dequantized tile) with IN (partial groups,
 * several k blocks) and vary OUT (never a multiple of the panel), bias,
 * flags, the column range (columns outside j0 .. j1 must stay as they were;
 * two calls splitting the range as threads do must give the whole), and NaN
 * or +inf in x, whose places must be the reference's.
 *
 * The kernels come from the host's table (host/native.c, what the libtcc
 * engine binds); built with -DFF_QTEST_DIRECT (tests/qkernels_cross.py, for
 * aarch64 under qemu) the test links the kernels of the ISAs that run there
 * (kernels/isas.h: neon, generic) itself. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/isas.h"
#include "kernel_data.h"

#define FF_ACC 1
#define FF_RELU 2
#define TOL 1e-5

typedef void (*linear_fn)(const float *x, int T, int IN, const void *W, const float *b, int OUT, float *y, int flags,
                          int j0, int j1);

#ifdef FF_QTEST_DIRECT
#include "ff_host_isas.h" /* the ISAs linked in, as the host build's header (qkernels_cross.py writes it) */
static int find_kernels(const char *isa, linear_fn fn[2]) {
#define FF_QTEST_LINKED(name, runs)                                                                                  \
  if (!strcmp(isa, #name) && (runs)) return fn[0] = ff_linear_bf16_##name, fn[1] = ff_linear_q8_##name, 1;
  FF_HOST_ISAS(FF_QTEST_LINKED)
#undef FF_QTEST_LINKED
  return 0;
}
#else
#include "codegen.h"
static const char *want_isa;
static linear_fn *want_fn;
static void pick(void *ctx, const char *name, void *fn) {
  char bf16[64], q8[64];
  (void)ctx;
  snprintf(bf16, sizeof bf16, "ff_linear_bf16_%s", want_isa);
  snprintf(q8, sizeof q8, "ff_linear_q8_%s", want_isa);
  if (!strcmp(name, bf16)) memcpy(&want_fn[0], &fn, sizeof fn);
  if (!strcmp(name, q8)) memcpy(&want_fn[1], &fn, sizeof fn);
}
/* the host's kernels, as the libtcc engine gets them: only an ISA this machine runs */
static int find_kernels(const char *isa, linear_fn fn[2]) {
  want_isa = isa, want_fn = fn, fn[0] = fn[1] = NULL;
  ff_native_kernels(pick, NULL);
  return fn[0] && fn[1];
}
#endif

/* ---- the quantizers: issue 13's formulas, written out ------------------- */

static unsigned bits_of(float f) {
  unsigned u;
  memcpy(&u, &f, 4);
  return u;
}

static float float_of(unsigned u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* f32 -> bf16 bits, round to nearest even (torch .to(torch.bfloat16)); NaN stays NaN */
static unsigned short bf16_of(float f) {
  const unsigned u = bits_of(f);
  if (f != f) return (unsigned short)(u >> 16 | 0x40);
  return (unsigned short)((u + 0x7FFFu + (u >> 16 & 1u)) >> 16);
}

/* one group of n <= 32 weights -> q[n], its scale (max|w| / 127; 0: all q 0) */
static float q8_group(const float *w, int n, signed char *q) {
  float max = 0.0f;
  for (int i = 0; i < n; i++) max = fabsf(w[i]) > max ? fabsf(w[i]) : max;
  const float scale = max / 127.0f;
  for (int i = 0; i < n; i++) q[i] = (signed char)(scale != 0.0f ? roundf(w[i] / scale) : 0.0f);
  return scale;
}

/* ---- packing (issue 13's layouts) and the dequantized weights ----------- */

/* W [OUT, IN] -> the bf16 panels of nr columns, and Wd = their values */
static void *pack_bf16(const float *W, int OUT, int IN, int nr, float *Wd) {
  const size_t panels = (size_t)(OUT + nr - 1) / nr;
  unsigned short *P = calloc(panels * IN * nr, sizeof *P);
  if (!P) exit(1);
  for (int o = 0; o < OUT; o++)
    for (int k = 0; k < IN; k++) {
      const unsigned short h = bf16_of(W[(size_t)o * IN + k]);
      P[(size_t)(o / nr) * IN * nr + (size_t)k * nr + o % nr] = h;
      Wd[(size_t)o * IN + k] = float_of((unsigned)h << 16);
    }
  return P;
}

/* W [OUT, IN] -> the int8 panels of nr columns (groups of 32 along IN), Wd their values */
static void *pack_q8(const float *W, int OUT, int IN, int nr, float *Wd) {
  const size_t G = (size_t)(IN + 31) / 32, panels = (size_t)(OUT + nr - 1) / nr;
  unsigned char *P = calloc(panels * G * 36 * nr, 1);
  if (!P) exit(1);
  for (int o = 0; o < OUT; o++)
    for (size_t g = 0; g < G; g++) {
      const int k0 = (int)g * 32, n = IN - k0 < 32 ? IN - k0 : 32;
      signed char q[32];
      const float scale = q8_group(W + (size_t)o * IN + k0, n, q);
      unsigned char *group = P + (size_t)(o / nr) * G * 36 * nr + g * 36 * nr;
      memcpy(group + 4 * (o % nr), &scale, 4);
      for (int i = 0; i < n; i++) {
        group[4 * nr + i * nr + o % nr] = (unsigned char)q[i];
        Wd[(size_t)o * IN + k0 + i] = (float)q[i] * scale;
      }
    }
  return P;
}

/* ---- the quantizers against values computed by hand --------------------- */

static int check_quantizers(void) {
  static const struct {
    float f;
    unsigned short h;
  } bf[] = {
      {1.0f, 0x3F80},       {-1.0f, 0xBF80}, {3.0f / 7, 0x3EDB}, /* 0x3EDB6DB7: below the half, down */
      {1.00390625f, 0x3F80},                                    /* 0x3F808000: the tie, to the even 0x3F80 */
      {1.01171875f, 0x3F82},                                    /* 0x3F818000: the tie, up to the even 0x3F82 */
      {1.0039063692f, 0x3F81},                                  /* 0x3F808001: past the tie, up */
      {0.0f, 0x0000},       {3.0e38f, 0x7F62},                  /* 0x7F61B1E6: up */
  };
  int bad = 0;
  for (size_t i = 0; i < sizeof bf / sizeof *bf; i++)
    if (bf16_of(bf[i].f) != bf[i].h) bad++, printf("bf16(%.9g) = 0x%04X, not 0x%04X\n", bf[i].f, bf16_of(bf[i].f), bf[i].h);
  /* max 254: scale 2; 3 / 2 = 1.5 and -1 / 2 = -0.5 round away from 0, 0.9 / 2 to 0 */
  const float w[5] = {3.0f, -1.0f, 0.9f, 254.0f, -254.0f};
  const signed char want[5] = {2, -1, 0, 127, -127};
  signed char q[32];
  float s = q8_group(w, 5, q);
  bad += s != 2.0f || memcmp(q, want, 5) != 0;
  const float zero[32] = {0.0f}; /* all zero: scale 0, q 0 */
  s = q8_group(zero, 32, q);
  for (int i = 0; i < 32; i++) bad += q[i] != 0;
  bad += s != 0.0f;
  float one[32] = {0.0f}; /* one non-zero value: it is -127 scale, the rest 0 */
  one[7] = -0.3f;
  s = q8_group(one, 32, q);
  bad += s != 0.3f / 127.0f || q[7] != -127 || q[6] != 0 || q[8] != 0;
  printf("quantizers against hand-computed values: %s\n", bad ? "FAIL" : "ok");
  return bad != 0;
}

/* ---- one case ------------------------------------------------------------- */

typedef struct {
  int T, IN, OUT, bias, flags, split, nan; /* split: two calls at a panel edge; nan: 1 +inf, 2 NaN in x */
} qcase;

/* the reference: double sums on the dequantized weights, then + b (+ y0), max(0, .) */
static void reference(const qcase *c, const float *x, const float *Wd, const float *b, const float *y0, float *r) {
  for (int t = 0; t < c->T; t++)
    for (int o = 0; o < c->OUT; o++) {
      double s = 0;
      for (int k = 0; k < c->IN; k++) s += (double)x[(size_t)t * c->IN + k] * Wd[(size_t)o * c->IN + k];
      float v = (float)(s + (c->bias ? b[o] : 0.0));
      if (c->flags & FF_ACC) v = (float)((double)v + y0[(size_t)t * c->OUT + o]);
      r[(size_t)t * c->OUT + o] = (c->flags & FF_RELU) && v < 0 ? 0.0f : v;
    }
}

/* one case on one kernel; returns the scaled error (1e30: misplaced NaN/inf or a column out of range written) */
static double run_case(const qcase *c, int nr, int q8, linear_fn fn) {
  const size_t nx = (size_t)c->T * c->IN, nw = (size_t)c->OUT * c->IN, ny = (size_t)c->T * c->OUT;
  float *x = randoms(nx, 1), *W = randoms(nw, 1), *b = randoms((size_t)c->OUT, 1), *Wd = randoms(nw, 0);
  float *y = randoms(ny, 1), *y0 = copy_of(y, ny), *r = randoms(ny, 0);
  if (c->nan == 1) x[0] = INFINITY;                   /* row 0: +-inf by the sign of W[o][0] (0: NaN) */
  if (c->nan == 2) x[nx - 1] = NAN;                   /* the last row: NaN */
  if (c->IN > 40) W[3] = 0.0f, W[c->IN + 40] = 1e-4f; /* a zero, and a tiny weight in a group */
  void *P = q8 ? pack_q8(W, c->OUT, c->IN, nr, Wd) : pack_bf16(W, c->OUT, c->IN, nr, Wd);
  const int j0 = c->OUT > nr ? nr : 0; /* split at a panel edge as threads do; else columns from j0 only */
  if (c->split) {
    fn(x, c->T, c->IN, P, c->bias ? b : NULL, c->OUT, y, c->flags, j0, c->OUT);
    fn(x, c->T, c->IN, P, c->bias ? b : NULL, c->OUT, y, c->flags, 0, j0);
  } else {
    fn(x, c->T, c->IN, P, c->bias ? b : NULL, c->OUT, y, c->flags, j0, c->OUT);
  }
  reference(c, x, Wd, b, y0, r);
  const double e = compare_columns(y, y0, r, c->T, c->OUT, c->split ? 0 : j0);
  free(x), free(W), free(b), free(Wd), free(y), free(y0), free(r), free(P);
  return e;
}

/* every case on one ISA's two kernels: each T with each IN, OUT (1, 3, 4
 * and 6 panels, the last partial), bias, flags, split and NaN varied from
 * case to case; T = 1 (decoding's GEMV) with every OUT, bias and flags */
static int run_isa(const char *isa, int mr, int nr, linear_fn fn[2]) {
  const int Ts[] = {1, 2, 3, mr - 1, mr, mr + 1, 17}, INs[] = {1, 5, 31, 32, 33, 64, 200, 300, 1000};
  const int outs[4] = {7, 2 * nr + 5, 3 * nr + 1, 5 * nr + 3};
  int n = 0, failed = 0;
  double worst = 0;
  for (int q8 = 0; q8 < 2; q8++)
    for (size_t ti = 0; ti < sizeof Ts / sizeof *Ts; ti++)
      for (size_t ii = 0; ii < sizeof INs / sizeof *INs; ii++)
        for (int v = (int)(ti * 9 + ii), end = Ts[ti] == 1 ? v + 32 : v + 1; v < end; v++) {
          const qcase c = {Ts[ti], INs[ii], outs[v / 8 % 4], v / 4 % 2, v % 4, v / 3 % 2, v % 5 < 2 ? v % 5 + 1 : 0};
          const double e = run_case(&c, nr, q8, fn[q8]);
          const int ok = e <= TOL;
          n++, failed += !ok;
          if (e > worst) worst = e;
          if (!ok || getenv("QKERNELS_VERBOSE"))
            printf("%-7s %-4s T=%-2d IN=%-4d OUT=%-3d bias=%d flags=%d split=%d nan=%d err=%.2e %s\n", isa,
                   q8 ? "int8" : "bf16", c.T, c.IN, c.OUT, c.bias, c.flags, c.split, c.nan, e, ok ? "ok" : "FAIL");
        }
  printf("%s: %d cases, %d failed, worst scaled error %.2e (tolerance %.0e)\n", isa, n, failed, worst, TOL);
  return failed != 0;
}

int main(void) {
  int failed = check_quantizers(), ran = 0;
#define FF_QTEST_ISA(name, MR, NR, ...)                                                                              \
  {                                                                                                                  \
    linear_fn fn[2];                                                                                                 \
    if (find_kernels(#name, fn)) failed |= run_isa(#name, MR, NR, fn), ran++;                                         \
    else printf("%s: not run here\n", #name);                                                                        \
  }
  FF_ISAS(FF_QTEST_ISA)
  if (!ran) failed = 1, printf("no ISA ran\n");
  return failed;
}
