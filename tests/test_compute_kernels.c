/* test_compute_kernels.c - the kernels of int8 compute (kernels/int8.c:
 * ff_quantize_rows_ISA, ff_linear_i8_ISA) and of bf16 compute (kernels/bf16.c:
 * ff_bf16_rows_ISA, ff_linear_dpbf16_ISA) of every ISA this machine runs,
 * against an independent reference.
 *
 * int8:
 * The test quantizes with its own plain C of the formulas (rows: scale =
 * max|x| / 127, q = x * (127 / max|x|) rounded by nearbyintf, ties to even;
 * weights: per output channel, scale = max|w| / 127, q = roundf(w / scale)),
 * checked first on values computed by hand, and packs W in int8.c's layout.
 * ff_quantize_rows must give the same bytes and scales, bit for bit (a row of
 * zeros: scale 0; a NaN or an infinity: scale NaN).  ff_linear_i8's y must be
 * the exact integer sum of q_x q_w (int64 here) times s_x s_w, + b (+ y with
 * FF_ACC, max(0, .) with FF_RELU): scaled error <= 1e-6 (the float rounding of
 * the scaling alone).  The cases cross T (1, a tile's rows and around, more)
 * with IN (not a multiple of 4, long rows) and vary OUT (never a multiple of
 * the panel), bias, flags and the column range (columns outside j0 .. j1
 * untouched; two calls splitting at a panel edge give the whole).
 *
 * bf16: the test rounds with its own integer formula (to nearest even, NaN
 * kept a NaN), checked on hand-computed ties; ff_bf16_rows must give the
 * same bits (NaN for NaN); ff_linear_dpbf16's y must be the sum over pairs,
 * in float32, of the exact products (x[2j+1] w[2j+1], then x[2j] w[2j]),
 * + b (+ y), max(0, .): scaled error <= 1e-6 (the kernel's float sums are the
 * reference's on VDPBF16PS, but for subnormals).  The same cases.
 *
 * The kernels are the host's (host/native.c, what the libtcc engine binds);
 * built with -DFF_QTEST_DIRECT (tests/qkernels_cross.py, for aarch64 under
 * qemu) the test links those of the ISAs that run there itself. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/isas.h"
#include "kernel_data.h"

#define FF_ACC 1
#define FF_RELU 2
#define TOL 1e-6

typedef void (*quantize_fn)(const float *x, int T, int IN, float *q);
typedef void (*linear_fn)(const float *xq, int T, int IN, const void *W, const float *b, int OUT, float *y,
                          int flags, int j0, int j1);

static quantize_fn found_q;
static linear_fn found_l;
#ifdef FF_QTEST_DIRECT
#include "ff_host_isas.h" /* the ISAs linked in, as the host build's header (qkernels_cross.py writes it) */
/* the ISA's row kernel q and linear l (int8: quantize_rows, linear_i8) */
static int find_kernels(const char *isa, const char *q, const char *l) {
  const int i8 = !strcmp(q, "quantize_rows");
  (void)l;
  found_q = NULL, found_l = NULL;
#define FF_CTEST_LINKED(name, runs)                                                                                  \
  if (!strcmp(isa, #name) && (runs))                                                                                 \
    found_q = i8 ? ff_quantize_rows_##name : ff_bf16_rows_##name,                                                    \
    found_l = i8 ? ff_linear_i8_##name : ff_linear_dpbf16_##name;
  FF_HOST_ISAS(FF_CTEST_LINKED)
#undef FF_CTEST_LINKED
  return found_q && found_l;
}
#else
#include "codegen.h"
static const char *want_isa, *want_q, *want_l;
static void pick(void *ctx, const char *name, void *fn) {
  char q[64], l[64];
  (void)ctx;
  snprintf(q, sizeof q, "ff_%s_%s", want_q, want_isa);
  snprintf(l, sizeof l, "ff_%s_%s", want_l, want_isa);
  if (!strcmp(name, q)) memcpy(&found_q, &fn, sizeof fn);
  if (!strcmp(name, l)) memcpy(&found_l, &fn, sizeof fn);
}
/* the ISA's row kernel q and linear l (int8: quantize_rows, linear_i8) */
static int find_kernels(const char *isa, const char *q, const char *l) {
  want_isa = isa, want_q = q, want_l = l, found_q = NULL, found_l = NULL;
  ff_native_kernels(pick, NULL);
  return found_q && found_l;
}
#endif

/* ---- the formulas, written out -------------------------------------------- */

/* a row: its scale, and q[IN] in [-127, 127] */
static float quantize_row(const float *x, int IN, int *q) {
  float max = 0.0f;
  int finite = 1;
  for (int i = 0; i < IN; i++) {
    finite &= isfinite(x[i]) != 0;
    if (fabsf(x[i]) > max) max = fabsf(x[i]);
  }
  const float inv = finite && max >= 1e-30f ? 127.0f / max : 0.0f;
  for (int i = 0; i < IN; i++) {
    if (!finite) {
      q[i] = 0;
      continue;
    }
    const float v = nearbyintf(x[i] * inv);
    q[i] = v > 127.0f ? 127 : v < -127.0f ? -127 : (int)v;
  }
  return !finite ? NAN : inv > 0.0f ? max / 127.0f : 0.0f;
}

/* W [OUT, IN] -> int8.c's panels of nr columns; q, s: the weights' ints and scales */
static unsigned char *pack(const float *W, int OUT, int IN, int nr, int *q, float *s) {
  const size_t quads = (size_t)(IN + 3) / 4, panel = 4 * (size_t)nr * (2 + quads);
  unsigned char *P = calloc((size_t)(OUT + nr - 1) / nr * panel, 1);
  if (!P) exit(1);
  for (int o = 0; o < OUT; o++) {
    float max = 0.0f;
    for (int k = 0; k < IN; k++) max = fabsf(W[(size_t)o * IN + k]) > max ? fabsf(W[(size_t)o * IN + k]) : max;
    s[o] = max / 127.0f;
    int32_t sum = 0;
    unsigned char *at = P + (size_t)(o / nr) * panel;
    for (int k = 0; k < IN; k++) {
      const int v = s[o] > 0.0f ? (int)roundf(W[(size_t)o * IN + k] / s[o]) : 0;
      q[(size_t)o * IN + k] = v, sum += v;
      at[8 * (size_t)nr + (size_t)k / 4 * 4 * nr + 4 * (size_t)(o % nr) + k % 4] = (unsigned char)(signed char)v;
    }
    memcpy(at + 4 * (o % nr), &s[o], 4);
    memcpy(at + 4 * ((size_t)nr + o % nr), &sum, 4);
  }
  return P;
}

static int check_formulas(void) {
  /* max 2: 127 / 2 = 63.5; 1 -> 63.5 -> 64 (the even), -0.5 -> -31.75 -> -32, 2 -> 127 */
  const float x[3] = {1.0f, -0.5f, 2.0f}, zero[2] = {0.0f, 0.0f}, bad[2] = {1.0f, NAN};
  int q[3], bad_count = 0;
  float s = quantize_row(x, 3, q);
  bad_count += s != 2.0f / 127.0f || q[0] != 64 || q[1] != -32 || q[2] != 127;
  s = quantize_row(zero, 2, q);
  bad_count += s != 0.0f || q[0] != 0 || q[1] != 0;
  s = quantize_row(bad, 2, q);
  bad_count += !isnan(s);
  printf("quantizers against hand-computed values: %s\n", bad_count ? "FAIL" : "ok");
  return bad_count != 0;
}

/* ---- bf16: the formula and the layout ------------------------------------- */

static uint16_t bf16_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if (isnan(f)) return (uint16_t)(u >> 16 | 0x40u);
  return (uint16_t)((u + 0x7FFFu + (u >> 16 & 1u)) >> 16);
}

static float bf16_float(uint16_t h) {
  const uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* W [OUT, IN] -> bf16.c's pair panels of nr columns; Wb: the rounded values */
static uint32_t *pack_b16(const float *W, int OUT, int IN, int nr, float *Wb) {
  const size_t pairs = (size_t)(IN + 1) / 2;
  uint32_t *P = calloc((size_t)(OUT + nr - 1) / nr * pairs * nr, sizeof *P);
  if (!P) exit(1);
  for (int o = 0; o < OUT; o++)
    for (int k = 0; k < IN; k++) {
      const uint16_t h = bf16_bits(W[(size_t)o * IN + k]);
      P[(size_t)(o / nr) * pairs * nr + (size_t)k / 2 * nr + o % nr] |= (uint32_t)h << (16 * (k % 2));
      Wb[(size_t)o * IN + k] = bf16_float(h);
    }
  return P;
}

static int check_bf16(void) {
  /* 1 + 2^-8 is the tie between 1 and 1 + 2^-7: to the even 1; 1 + 3 2^-8: up to 1 + 2^-6 */
  int bad = bf16_bits(1.00390625f) != 0x3F80 || bf16_bits(1.01171875f) != 0x3F82 || bf16_bits(-2.0f) != 0xC000;
  bad += !isnan(bf16_float(bf16_bits(NAN)));
  printf("bf16 rounding against hand-computed values: %s\n", bad ? "FAIL" : "ok");
  return bad != 0;
}

/* ---- one case ------------------------------------------------------------- */

typedef struct {
  int T, IN, OUT, bias, flags, split, special; /* special: row 0 zeros, the last row NaN */
} icase;

static double run_case(const icase *c, int nr) {
  const size_t nx = (size_t)c->T * c->IN, nw = (size_t)c->OUT * c->IN, ny = (size_t)c->T * c->OUT;
  const size_t IN4 = (size_t)(c->IN + 3) / 4 * 4;
  float *x = randoms(nx, 3), *W = randoms(nw, 1), *b = randoms((size_t)c->OUT, 1), *s = randoms((size_t)c->OUT, 0);
  float *y = randoms(ny, 1), *y0 = copy_of(y, ny), *r = randoms(ny, 0);
  float *xq = malloc(sizeof(float) * (size_t)c->T + (size_t)c->T * IN4);
  int *q = malloc(sizeof(int) * nw), *qx = malloc(sizeof(int) * (size_t)c->IN + 4);
  if (!xq || !q || !qx) exit(1);
  if (c->special) {
    memset(x, 0, sizeof *x * (size_t)c->IN);
    if (c->T > 1) x[nx - 1] = NAN;
  }
  unsigned char *P = pack(W, c->OUT, c->IN, nr, q, s);
  found_q(x, c->T, c->IN, xq);
  double err = 0;
  for (int t = 0; t < c->T; t++) { /* the kernel's bytes and scale, bit for bit */
    const float sx = quantize_row(x + (size_t)t * c->IN, c->IN, qx);
    const unsigned char *row = (const unsigned char *)(xq + c->T) + (size_t)t * IN4;
    if (memcmp(&sx, &xq[t], 4) && !(isnan(sx) && isnan(xq[t]))) err = 1e30, printf("row %d: scale differs\n", t);
    for (size_t k = 0; k < IN4; k++)
      if (row[k] != (k < (size_t)c->IN ? qx[k] + 128 : 128)) err = 1e30;
    for (int o = 0; o < c->OUT; o++) {
      int64_t acc = 0;
      for (int k = 0; k < c->IN; k++) acc += (int64_t)qx[k] * q[(size_t)o * c->IN + k];
      float v = (float)((double)acc * sx * s[o] + (c->bias ? b[o] : 0.0));
      if (c->flags & FF_ACC) v = (float)((double)v + y0[(size_t)t * c->OUT + o]);
      r[(size_t)t * c->OUT + o] = (c->flags & FF_RELU) && v < 0 ? 0.0f : v;
    }
  }
  const int j0 = c->OUT > nr ? nr : 0; /* split at a panel edge as threads do; else columns from j0 only */
  found_l(xq, c->T, c->IN, P, c->bias ? b : NULL, c->OUT, y, c->flags, j0, c->OUT);
  if (c->split) found_l(xq, c->T, c->IN, P, c->bias ? b : NULL, c->OUT, y, c->flags, 0, j0);
  const double e = compare_columns(y, y0, r, c->T, c->OUT, c->split ? 0 : j0);
  free(x), free(W), free(b), free(s), free(y), free(y0), free(r), free(xq), free(q), free(qx), free(P);
  return e > err ? e : err;
}

/* a bf16 case: the rows' bits, then y against float32 pair sums of the exact products */
static double run_case_bf16(const icase *c, int nr) {
  const size_t nx = (size_t)c->T * c->IN, nw = (size_t)c->OUT * c->IN, ny = (size_t)c->T * c->OUT;
  const size_t IN2 = (size_t)(c->IN + 1) / 2 * 2;
  float *x = randoms(nx, 3), *W = randoms(nw, 1), *b = randoms((size_t)c->OUT, 1), *Wb = randoms(nw, 0);
  float *y = randoms(ny, 1), *y0 = copy_of(y, ny), *r = randoms(ny, 0);
  uint16_t *q = malloc(sizeof *q * (size_t)c->T * IN2 + 4);
  if (!q) exit(1);
  if (c->special) {
    memset(x, 0, sizeof *x * (size_t)c->IN);
    if (c->T > 1) x[nx - 1] = NAN;
  }
  uint32_t *P = pack_b16(W, c->OUT, c->IN, nr, Wb);
  found_q(x, c->T, c->IN, (float *)(void *)q);
  double err = 0;
  for (int t = 0; t < c->T; t++) {
    const uint16_t *row = q + (size_t)t * IN2;
    for (size_t k = 0; k < IN2; k++) {
      const float v = k < (size_t)c->IN ? x[(size_t)t * c->IN + k] : 0.0f;
      if (row[k] != bf16_bits(v) && !(isnan(v) && isnan(bf16_float(row[k])))) err = 1e30;
    }
    for (int o = 0; o < c->OUT; o++) {
      float acc = 0.0f;
      for (int k = 0; k < c->IN; k += 2) {
        const float *w = Wb + (size_t)o * c->IN;
        if (k + 1 < c->IN) acc += bf16_float(row[k + 1]) * w[k + 1];
        acc += bf16_float(row[k]) * w[k];
      }
      float v = acc + (c->bias ? b[o] : 0.0f);
      if (c->flags & FF_ACC) v += y0[(size_t)t * c->OUT + o];
      r[(size_t)t * c->OUT + o] = (c->flags & FF_RELU) && v < 0 ? 0.0f : v;
    }
  }
  const int j0 = c->OUT > nr ? nr : 0;
  found_l((const float *)(const void *)q, c->T, c->IN, P, c->bias ? b : NULL, c->OUT, y, c->flags, j0, c->OUT);
  if (c->split) found_l((const float *)(const void *)q, c->T, c->IN, P, c->bias ? b : NULL, c->OUT, y, c->flags, 0, j0);
  const double e = compare_columns(y, y0, r, c->T, c->OUT, c->split ? 0 : j0);
  free(x), free(W), free(b), free(Wb), free(y), free(y0), free(r), free(q), free(P);
  return e > err ? e : err;
}

static int run_isa(const char *isa, int mr, int nr, int bf16) {
  const int Ts[] = {1, 2, mr - 1, mr, mr + 1, 2 * mr + 3}, INs[] = {1, 3, 4, 5, 64, 203, 768, 3072};
  const int outs[4] = {7, 2 * nr + 5, 3 * nr + 1, 5 * nr + 3};
  int n = 0, failed = 0;
  double worst = 0;
  for (size_t ti = 0; ti < sizeof Ts / sizeof *Ts; ti++)
    for (size_t ii = 0; ii < sizeof INs / sizeof *INs; ii++)
      for (int v = (int)(ti * 8 + ii), end = v + 4; v < end; v++) {
        const icase c = {Ts[ti], INs[ii], outs[v % 4], v / 2 % 2, v % 4, v / 3 % 2, v % 7 == 0};
        const double e = bf16 ? run_case_bf16(&c, nr) : run_case(&c, nr);
        const int ok = e <= TOL;
        n++, failed += !ok;
        if (e > worst) worst = e;
        if (!ok || getenv("COMPUTE_KERNELS_VERBOSE"))
          printf("%-7s %s T=%-2d IN=%-4d OUT=%-3d bias=%d flags=%d split=%d special=%d err=%.2e %s\n", isa,
                 bf16 ? "bf16" : "int8", c.T, c.IN, c.OUT, c.bias, c.flags, c.split, c.special, e, ok ? "ok" : "FAIL");
      }
  printf("%s %s: %d cases, %d failed, worst scaled error %.2e (tolerance %.0e)\n", isa, bf16 ? "bf16" : "int8", n,
         failed, worst, TOL);
  return failed != 0;
}

int main(void) {
  int failed = check_formulas() | check_bf16(), ran = 0;
#define FF_I8TEST_ISA(name, MR, NR, ...)                                                                             \
  if (find_kernels(#name, "quantize_rows", "linear_i8")) failed |= run_isa(#name, MR, NR, 0), ran++;                 \
  else printf("%s: not run here\n", #name);                                                                         \
  if (find_kernels(#name, "bf16_rows", "linear_dpbf16")) failed |= run_isa(#name, MR, NR, 1), ran++;
  FF_ISAS(FF_I8TEST_ISA)
  if (!ran) failed = 1, printf("no ISA ran\n");
  return failed;
}
