/* test_kernels.c - each template kind against its runtime twin.
 *
 * Every kernel kind of gen/ops.lua is rendered on its own from templates/
 * (ff_render_kernels), compiled by libtcc and by cc, called on random data
 * and compared with the reference kernel of runtime/ that computes the same
 * formula: the max-abs error, scaled by the reference's max magnitude, must
 * be <= 1e-5.  The sizes cover every unroll path of the template engine
 * partial tiles and panels, fused epilogues (+ the residual, relu), odd
 * widths, padding and causal masks and strided q/k/v, for every ISA whose
 * matrix kernels this machine runs (kernels/gemm_*.c).
 *
 * Cases marked nan plant NaN and +-inf in inputs or weights (poison_*() and
 * check_*()): the template's output and the runtime's must have NaN and +-inf
 * exactly where PyTorch has them (the expected places are written from the
 * formulas, not taken from either side: relu(NaN) = NaN, gelu(-inf) = NaN, a
 * NaN score makes its softmax row NaN, a NaN in a key masked for a row does
 * not reach it), and the finite rest must agree as above.
 *
 *   test_kernels [tcc|cc ...]      (default: both)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/isas.h"
#include "codegen.h"
#include "ff_runtime.h"
#include "kernel_data.h"

#define TOL 1e-5

typedef struct {
  const char *kind; /* ops.lua kind */
  int a, b, c, d;   /* sizes, meaning per kind (see params_*) */
  int flag;         /* BIAS / CAUSAL / SCALE */
  const char *act;  /* activation name; for linear: "relu" fused */
  int T, pos0, key_len;
  int nan;          /* 1: NaN and +-inf planted (poison), their places checked (expected) */
  int kv;           /* rope, attention: K/V heads (0: as many as the query heads) */
} kcase;

static const kcase cases[] = {
    /* kind         a    b    c    d   flag  act      T  pos0 key_len nan kv */
    {"embed",       13,  11,  0,   0,  1,    NULL,    5, 0, 0, 0, 0},  /* D, VOCAB, PANEL; scale sqrt(D) */
    {"embed",       16,  7,   0,   0,  0,    NULL,    3, 0, 0, 0, 0},  /* unscaled */
    {"embed",       12,  37,  16,  0,  1,    NULL,    6, 0, 0, 0, 0},  /* from W^T panels of 16 (tied head) */
    {"embed",       5,   40,  32,  0,  1,    NULL,    4, 0, 0, 0, 0},  /* ... of 32 */
    {"copy",        9,   0,   0,   0,  0,    NULL,    4, 0, 0, 0, 0},
    {"sinusoidal",  12,  0,   0,   0,  0,    NULL,    6, 3, 0, 0, 0},  /* D, at positions 3.. */
    {"sinusoidal",  7,   0,   0,   0,  0,    NULL,    5, 0, 0, 0, 0},  /* odd D */
    /* key_len: the tables' max_seq (2^20: 2048 rows, two levels), the positions near its end */
    {"sinusoidal",  33,  0,   0,   0,  0,    NULL,    9, 1048567, 1048576, 0, 0},
    {"sinusoidal",  64,  0,   0,   0,  0,    NULL,    7, 700001, 1000000, 0, 0},
    {"learned",     10,  0,   0,   0,  0,    NULL,    4, 2, 0, 0, 0},
    {"linear",      5,   7,   0,   0,  1,    NULL,    3, 0, 0, 0, 0},  /* IN, OUT, ACC; flag BIAS: a partial tile */
    {"linear",      9,   16,  0,   0,  1,    NULL,    9, 0, 0, 0, 0},  /* rows past one tile */
    {"linear",      6,   40,  0,   0,  0,    NULL,    2, 0, 0, 0, 0},  /* columns past one panel, no bias */
    {"linear",      37,  13,  1,   0,  1,    NULL,    5, 0, 0, 0, 0},  /* y += (the residual) */
    {"linear",      24,  50,  0,   0,  1,    "relu",  8, 0, 0, 0, 0},  /* max(0, .) fused */
    {"linear",      21,  40,  1,   0,  1,    NULL,  400, 0, 0, 0, 0},  /* rows in several blocks (drivers.c) */
    {"linear",      300, 33,  1,   0,  1,    "relu",  3, 0, 0, 0, 0},  /* k in two passes of 192 */
    {"linear",      64,  96,  0,   0,  1,    NULL,    1, 0, 0, 0, 0},  /* one row (decoding) */
    {"linear",      600, 70,  1,   0,  1,    "relu",  11, 0, 0, 0, 0}, /* k in 3-4 passes over 3-5 panels */
    {"rope",        3,   4,   36,  0,  0,    NULL,    5, 2, 0, 0, 0},  /* HEADS, DK, LDX; d 1: interleaved pairs */
    {"rope",        2,   10,  60,  0,  0,    NULL,    3, 0, 0, 0, 0},
    {"rope",        3,   4,   36,  1,  0,    NULL,    5, 2, 0, 0, 0},  /* interleaved pairs */
    {"rope",        4,   6,   36,  0,  0,    NULL,    4, 3, 0, 0, 1}, /* 4 q heads, 1 k head (multi-query) */
    {"rope",        6,   4,   40,  1,  0,    NULL,    3, 1, 0, 0, 2}, /* 6 q heads, 2 k heads, interleaved */
    {"rope",        2,   64,  256, 0,  0,    NULL,    9, 1048567, 1048576, 0, 1}, /* max_seq 2^20, its last positions */
    {"rope",        3,   10,  60,  1,  0,    NULL,    6, 524285, 1000003, 0, 0},  /* around 2^19, interleaved */
    {"rope",        2,   16,  48,  0,  0,    NULL,    5, 65531, 65536, 0, 1},  /* up to max_seq - 1 */
    {"kv_store",    6,   18,  0,   0,  0,    NULL,    3, 4, 0, 0, 0},  /* D, LDX; c: KV (0: 2 D) */
    {"kv_store",    8,   16,  8,   0,  0,    NULL,    3, 4, 0, 0, 0},  /* grouped: k | v 4 + 4 wide */
    {"attention",   3,   4,   36,  36, 0,    NULL,    6, 0, 4, 0, 0},  /* HEADS, DK, LDQ, LDK: padding */
    {"attention",   2,   8,   48,  32, 1,    NULL,    5, 3, 8, 0, 0},  /* causal over a cache */
    {"attention",   1,   3,   3,   6,  0,    NULL,    4, 0, 7, 0, 0},  /* cross-attention layout */
    {"attention",   4,   16,  192, 128, 1,   NULL,    1, 9, 10, 0, 0}, /* one step at position 9 */
    {"attention",   2,   40,  240, 160, 0,   NULL,   11, 0, 37, 0, 0}, /* a head wider than a tile */
    {"attention",   5,   8,   120, 80, 1,    NULL,   19, 0, 19, 0, 0}, /* several query blocks, causal */
    {"attention",   4,   4,   24,  24, 0,    NULL,    6, 0, 5, 0, 2}, /* grouped-query: 4 heads over 2 K/V */
    {"attention",   6,   8,   64,  16, 1,    NULL,    5, 3, 8, 0, 1}, /* multi-query over a cache */
    {"attention",   8,   16,  128, 64, 1,    NULL,    1, 9, 10, 0, 2}, /* one step, 4 heads a group */
    {"attention",   6,   8,   48,  24, 1,    NULL,   19, 0, 19, 0, 3}, /* several query blocks, causal, groups of 2 */
    {"attention",   3,   40,  120, 240, 1,   NULL,    1, 6, 7, 0, 0}, /* one step, a head past whole vectors */
    {"attention",   3,   40,  120, 240, 0,   NULL,    1, 0, 5, 0, 0}, /* one row over a memory (cross-attention) */
    {"attention",   4,   20,  80,  80,  1,   NULL,    1, 4, 5, 0, 2}, /* one step, 2 heads a group, odd width */
    {"attention",   3,   4,   12,  24,  1,   NULL,    1, 0, 1, 0, 0}, /* the first step: one key */
    {"layernorm",   11,  0,   0,   0,  0,    NULL,    4, 0, 0, 0, 0},
    {"rmsnorm",     9,   0,   0,   0,  0,    NULL,    4, 0, 0, 0, 0},
    {"activation",  13,  0,   0,   0,  0,    "relu",  3, 0, 0, 0, 0},
    {"activation",  13,  0,   0,   0,  0,    "gelu",  3, 0, 0, 0, 0},
    {"activation",  13,  0,   0,   0,  0,    "gelu_tanh", 3, 0, 0, 0, 0},
    {"activation",  13,  0,   0,   0,  0,    "silu",  3, 0, 0, 0, 0},
    {"swiglu",      11,  0,   0,   0,  0,    NULL,    4, 0, 0, 0, 0},
    /* NaN and +-inf planted: where, and where they must come out, see poison_*() and check_*() */
    {"embed",       12,  37,  16,  0,  1,    NULL,    6, 0, 0, 1, 0},
    {"linear",      37,  13,  1,   0,  1,    "relu",  5, 0, 0, 1, 0},  /* fused relu(NaN) = NaN, relu(-inf) = 0 */
    {"linear",      300, 70,  1,   0,  1,    "relu",  11, 0, 0, 1, 0}, /* NaN from the first pass of k */
    {"linear",      24,  50,  0,   0,  1,    NULL,    8, 0, 0, 1, 0},
    {"attention",   3,   4,   36,  36, 0,    NULL,    6, 0, 4, 1, 0},  /* NaN score row, padded NaN keys */
    {"attention",   5,   8,   120, 80, 1,    NULL,   19, 0, 19, 1, 0}, /* causal: only rows at or past a NaN key */
    {"attention",   2,   16,  96,  64, 1,    NULL,    7, 5, 12, 1, 0}, /* ... over a cache */
    {"attention",   2,   16,  96,  64, 1,    NULL,    1, 5, 6, 1, 0},  /* ... one step */
    {"layernorm",   11,  0,   0,   0,  0,    NULL,    4, 0, 0, 1, 0},
    {"rmsnorm",     9,   0,   0,   0,  0,    NULL,    4, 0, 0, 1, 0},
    {"activation",  13,  0,   0,   0,  0,    "relu",  3, 0, 0, 1, 0},
    {"activation",  13,  0,   0,   0,  0,    "gelu",  3, 0, 0, 1, 0},
    {"activation",  13,  0,   0,   0,  0,    "gelu_tanh", 3, 0, 0, 1, 0},
    {"activation",  13,  0,   0,   0,  0,    "silu",  3, 0, 0, 1, 0},
    {"swiglu",      11,  0,   0,   0,  0,    NULL,    4, 0, 0, 1, 0},
};
#define N_CASES (int)(sizeof cases / sizeof *cases)
#define EPS 1e-5
#define THETA 10000.0

/* ---- data: tests/kernel_data.c ---------------------------------------------- */

/* ---- NaN and inf planted, and where PyTorch has them ------------------------ */

/* linear: W[OUT-1, IN/2] NaN (that column NaN), W[OUT/2, 0] +inf with x[:, 0]
 * = +-1 by row (that column +-inf; relu: +inf or 0), x[T-1, IN-1] NaN (that
 * row NaN).  The expected classes of y [T, OUT]. */
static char *poison_linear(const kcase *k, float *x, float *W) {
  const int IN = k->a, OUT = k->b, T = k->T, o1 = OUT - 1, o2 = OUT / 2;
  char *ex = classes((size_t)T * OUT);
  W[(size_t)o1 * IN + IN / 2] = NAN, W[(size_t)o2 * IN] = INFINITY;
  for (int t = 0; t < T; t++) x[(size_t)t * IN] = t % 2 ? -1.0f : 1.0f;
  x[(size_t)(T - 1) * IN + IN - 1] = NAN;
  for (int t = 0; t < T; t++)
    for (int o = 0; o < OUT; o++)
      ex[(size_t)t * OUT + o] = t == T - 1 || o == o1 ? 'N' : o != o2 ? 0 : t % 2 == 0 ? '+' : k->act ? 0 : '-';
  return ex;
}

/* norms: x[1, 2] NaN (row 1 NaN), x[2, 0] +inf (layernorm: row 2 NaN;
 * rmsnorm: x / sqrt(inf) = 0 but inf 0 = NaN at [2, 0]), gamma[3] NaN
 * (column 3 NaN). */
static char *poison_norm(const kcase *k, int ln, float *x, float *g) {
  const int D = k->a, T = k->T;
  char *ex = classes((size_t)T * D);
  x[(size_t)D + 2] = NAN, x[(size_t)2 * D] = INFINITY, g[3] = NAN;
  for (int t = 0; t < T; t++)
    for (int i = 0; i < D; i++)
      ex[(size_t)t * D + i] = t == 1 || i == 3 || (t == 2 && (ln || i == 0)) ? 'N' : 0;
  return ex;
}

/* attention (q [T, LDQ]; k | v rows every LDK, Tk + 2 of them):
 *   bidirectional: k NaN at key 1 of head 0 (every row's head 0 NaN: its
 *   score rows hold a NaN), q NaN at row 2 of head 1 (that row's head 1),
 *   v +inf at key 0, head 2, element 1 (+inf in that column of every row);
 *   causal: v NaN at key kn = pos0 + T/2 of head 0, element 3 (that column
 *   NaN in the rows at or past kn, not before), k NaN at key kn + 2 of head 1
 *   (that head NaN in rows at or past it), v -inf at key kn - 3 of the last
 *   head, element 0;
 * and the two padding keys past key_len NaN throughout: no effect. */
static char *poison_attention(const kcase *k, float *q, float *kv) {
  const int H = k->a, DK = k->b, LDQ = k->c, LDK = k->d, D = H * DK, T = k->T, Tk = k->key_len;
  char *ex = classes((size_t)T * D);
  for (size_t i = (size_t)Tk * LDK; i < (size_t)(Tk + 2) * LDK + D; i++) kv[i] = NAN;
  if (!k->flag) {
    kv[(size_t)1 * LDK + 2] = NAN, q[(size_t)2 * LDQ + DK] = NAN, kv[D + 2 * DK + 1] = INFINITY;
    for (int t = 0; t < T; t++)
      for (int i = 0; i < D; i++)
        ex[(size_t)t * D + i] = i < DK || (t == 2 && i < 2 * DK) ? 'N' : i == 2 * DK + 1 ? '+' : 0;
    return ex;
  }
  const int kn = k->pos0 + T / 2;
  kv[(size_t)kn * LDK + D + 3] = NAN, kv[(size_t)(kn + 2) * LDK + DK] = NAN;
  kv[(size_t)(kn - 3) * LDK + D + (H - 1) * DK] = -INFINITY;
  for (int t = 0; t < T; t++)
    for (int i = 0; i < D; i++) {
      const int pos = k->pos0 + t;
      ex[(size_t)t * D + i] = (i == 3 && pos >= kn) || (i >= DK && i < 2 * DK && pos >= kn + 2) ? 'N'
                              : i == (H - 1) * DK && pos >= kn - 3                            ? '-'
                                                                                              : 0;
    }
  return ex;
}

/* ---- each kind: its params, its inputs and its runtime twin ------------------ */

/* The case's params as a Lua table constructor (names of gen/ops.lua). */
typedef void (*params_fn)(const kcase *k, const char *isa, char *buf, size_t n);
/* Builds the case's inputs, calls the template's kernel f and the runtime's
 * twin, and returns the scaled error (1e30: NaN or inf misplaced). */
typedef void (*generic_fn)(void);
typedef double (*check_fn)(const kcase *k, const char *isa, generic_fn f);

static const char *tf(int v) { return v ? "true" : "false"; }

static void params_embed(const kcase *k, const char *isa, char *buf, size_t n) {
  (void)isa;
  snprintf(buf, n, "{ D = %d, VOCAB = %d, SCALE = %.17g, PANEL = %d, DTYPE = \"f32\" }", k->a, k->b, k->flag ? sqrt(k->a) : 1.0, k->c);
}

static void params_d(const kcase *k, const char *isa, char *buf, size_t n) { /* copy, learned */
  (void)isa;
  snprintf(buf, n, "{ D = %d }", k->a);
}

/* sinusoidal, rope: the tables cover max_seq = key_len (0: just the case's positions) */
static int max_seq_of(const kcase *k) { return k->key_len ? k->key_len : k->pos0 + k->T; }

/* The packer's table of a model of max_seq (gen/ops.lua position_blocks
 * decides the rows the kernel reads: a mismatch fails the case). */
static float *position_table(int derived, int max_seq, int dim) {
  ff_layout_entry e = {.derived = derived, .dim = dim, .theta = (float)THETA, .cols = 2 * ((dim + 1) / 2)};
  while (1L << (2 * e.block_bits) < max_seq) e.block_bits++;
  e.rows = (derived == FF_DERIVED_ROPE) + (max_seq + (1 << e.block_bits) - 1) / (1 << e.block_bits) +
           (1 << e.block_bits);
  float *t = randoms((size_t)e.rows * (size_t)e.cols, 0);
  ff_position_table(&e, t);
  return t;
}

static void params_sinusoidal(const kcase *k, const char *isa, char *buf, size_t n) {
  (void)isa;
  snprintf(buf, n, "{ D = %d, MAX_SEQ = %d }", k->a, max_seq_of(k));
}

static void params_linear(const kcase *k, const char *isa, char *buf, size_t n) {
  snprintf(buf, n, "{ IN = %d, OUT = %d, BIAS = %s, ACC = %s, RELU = %s, ISA = \"%s\", NR = %d, DTYPE = \"f32\" }", k->a, k->b,
           tf(k->flag), tf(k->c), tf(k->act != NULL), isa, panel_of(isa));
}

static int kv_heads_of(const kcase *k) { return k->kv ? k->kv : k->a; }

static void params_rope(const kcase *k, const char *isa, char *buf, size_t n) {
  (void)isa;
  snprintf(buf, n, "{ HEADS = %d, KV_HEADS = %d, DK = %d, LDX = %d, PAIRING = \"%s\", MAX_SEQ = %d }", k->a,
           kv_heads_of(k), k->b, k->c, k->d ? "interleaved" : "rotate_half", max_seq_of(k));
}

static void params_kv_store(const kcase *k, const char *isa, char *buf, size_t n) {
  (void)isa;
  snprintf(buf, n, "{ D = %d, KV = %d, LDX = %d }", k->a, k->c ? k->c : 2 * k->a, k->b);
}

static void params_attention(const kcase *k, const char *isa, char *buf, size_t n) {
  snprintf(buf, n, "{ HEADS = %d, KV_HEADS = %d, DK = %d, LDQ = %d, LDK = %d, CAUSAL = %s, ISA = \"%s\" }", k->a,
           kv_heads_of(k), k->b, k->c, k->d, tf(k->flag), isa);
}

static void params_norm(const kcase *k, const char *isa, char *buf, size_t n) {
  snprintf(buf, n, "{ D = %d, EPS = %.17g, ISA = \"%s\" }", k->a, EPS, isa);
}

static void params_activation(const kcase *k, const char *isa, char *buf, size_t n) {
  snprintf(buf, n, "{ N = %d, ACT = \"%s\", ISA = \"%s\" }", k->a, k->act, isa);
}

static void params_swiglu(const kcase *k, const char *isa, char *buf, size_t n) {
  snprintf(buf, n, "{ N = %d, ISA = \"%s\" }", k->a, isa);
}

/* rows of E, or of E packed as the output head */
static double check_embed(const kcase *k, const char *isa, generic_fn f) {
  int D = k->a, V = k->b, T = k->T;
  int32_t tok[64];
  (void)isa;
  for (int t = 0; t < T; t++) tok[t] = (t * 7 + 3) % V;
  float *E = randoms((size_t)V * D, 1), *x = randoms((size_t)T * D, 0), *r = randoms((size_t)T * D, 0);
  char *ex = k->nan ? classes((size_t)T * D) : NULL;
  if (k->nan) { /* a NaN in the row of the first token, +inf in that of the third: only their rows */
    E[(size_t)tok[0] * D + 1] = NAN, E[(size_t)tok[2] * D] = INFINITY;
    for (int t = 0; t < T; t++) {
      if (tok[t] == tok[0]) ex[(size_t)t * D + 1] = 'N';
      if (tok[t] == tok[2]) ex[(size_t)t * D] = '+';
    }
  }
  float *Ep = k->c ? pack_panels(E, V, D, k->c) : NULL;
  ((void (*)(const int32_t *, int, const float *, float *))f)(tok, T, k->c ? Ep : E, x);
  ff_rt_embed(tok, T, E, V, D, k->flag, r, NULL);
  double err = compare(x, r, ex, (size_t)T * D);
  free(E), free(x), free(r), free(Ep), free(ex);
  return err;
}

static double check_copy(const kcase *k, const char *isa, generic_fn f) {
  size_t n = (size_t)k->T * k->a;
  float *x = randoms(n, 1), *y = randoms(n, 0);
  (void)isa;
  ((void (*)(const float *, int, float *))f)(x, k->T, y);
  double err = scaled_err(y, x, n);
  free(x), free(y);
  return err;
}

/* sinusoidal (learned = 0) or learned (1) positions added from pos0 */
static double check_positions(const kcase *k, generic_fn f, int learned) {
  int D = k->a, T = k->T;
  size_t n = (size_t)T * D;
  float *x = randoms(n, 1), *r = copy_of(x, n), *P;
  if (!learned) { /* the table the packer folds into the weights (host/codegen.c) */
    P = position_table(FF_DERIVED_SINUSOIDAL, max_seq_of(k), D);
    ff_rt_add_sinusoidal(r, T, D, k->pos0);
  } else {
    P = randoms((size_t)(k->pos0 + T) * D, 1);
    ff_rt_add_learned(r, T, D, k->pos0, P);
  }
  ((void (*)(float *, int, const float *, int))f)(x, T, P, k->pos0);
  double err = scaled_err(x, r, n);
  free(x), free(r), free(P);
  return err;
}

static double check_sinusoidal(const kcase *k, const char *isa, generic_fn f) {
  (void)isa;
  return check_positions(k, f, 0);
}

static double check_learned(const kcase *k, const char *isa, generic_fn f) {
  (void)isa;
  return check_positions(k, f, 1);
}

/* y (+)= x W^T + b, then max(0, .) */
static double check_linear(const kcase *k, const char *isa, generic_fn f) {
  int IN = k->a, OUT = k->b, T = k->T;
  size_t ny = (size_t)T * OUT;
  float *x = randoms((size_t)T * IN, 1), *W = randoms((size_t)OUT * IN, 1), *b = randoms(OUT, 1);
  char *ex = k->nan ? poison_linear(k, x, W) : NULL;
  float *Wp = pack_panels(W, OUT, IN, panel_of(isa)), *y = randoms(ny, 1), *r = copy_of(y, ny);
  float *lin = randoms(ny, 0);
  ((void (*)(const float *, const float *, int, const float *, const float *, float *))f)(NULL, x, T, Wp,
                                                                                        k->flag ? b : NULL, y);
  ff_rt_linear(x, T, IN, W, k->flag ? b : NULL, OUT, lin);
  for (size_t i = 0; i < ny; i++) {
    float v = k->c ? r[i] + lin[i] : lin[i];
    r[i] = k->act && v < 0 ? 0.0f : v;
  }
  double err = compare(y, r, ex, ny);
  free(x), free(W), free(b), free(Wp), free(y), free(r), free(lin), free(ex);
  return err;
}

static double check_rope(const kcase *k, const char *isa, generic_fn f) {
  int H = k->a, DK = k->b, LDX = k->c, D = H * DK, T = k->T;
  size_t n = (size_t)T * LDX;
  float *x = randoms(n, 1), *r = copy_of(x, n), *R = position_table(FF_DERIVED_ROPE, max_seq_of(k), DK);
  (void)isa;
  ((void (*)(float *, int, const float *, int))f)(x, T, R, k->pos0);
  enum ff_rope_pairing pairing = k->d ? FF_ROPE_INTERLEAVED : FF_ROPE_ROTATE_HALF;
  ff_rt_rope(r, LDX, T, H, DK, k->pos0, (float)THETA, pairing);                  /* q */
  ff_rt_rope(r + D, LDX, T, kv_heads_of(k), DK, k->pos0, (float)THETA, pairing); /* k */
  double err = scaled_err(x, r, n);
  free(x), free(r), free(R);
  return err;
}

static double check_kv_store(const kcase *k, const char *isa, generic_fn f) {
  int D = k->a, LDX = k->b, KV = k->c ? k->c : 2 * D, T = k->T, rows = k->pos0 + T;
  float *qkv = randoms((size_t)T * LDX, 1), *cache = randoms((size_t)rows * KV, 1);
  float *r = copy_of(cache, (size_t)rows * KV);
  (void)isa;
  ((void (*)(const float *, int, float *, int))f)(qkv, T, cache, k->pos0);
  for (int t = 0; t < T; t++) /* row pos0 + t of the cache = k | v of row t */
    for (int i = 0; i < KV; i++) r[(size_t)(k->pos0 + t) * KV + i] = qkv[(size_t)t * LDX + D + i];
  double err = scaled_err(cache, r, (size_t)rows * KV);
  free(qkv), free(cache), free(r);
  return err;
}

static double check_attention(const kcase *k, const char *isa, generic_fn f) {
  int H = k->a, DK = k->b, LDQ = k->c, LDK = k->d, D = H * DK, KVD = kv_heads_of(k) * DK, Tk = k->key_len, T = k->T;
  (void)isa;
  /* two rows past key_len: padding, NaN in the nan cases */
  float *q = randoms((size_t)T * LDQ, 2), *kv = randoms((size_t)(Tk + 2) * LDK + KVD, 2);
  char *ex = k->nan ? poison_attention(k, q, kv) : NULL;
  float *scratch = randoms((size_t)(DK + 8) * ((Tk + 15) / 16 * 16), 0), *scores = randoms((size_t)Tk, 0);
  float *y = randoms((size_t)T * D, 0), *r = randoms((size_t)T * D, 0);
  ((void (*)(const float *, const float *, const float *, int, int, int, float *, float *))f)(NULL, q, kv, T, Tk,
                                                                                            k->pos0, scratch, y);
  ff_rt_attention(q, LDQ, kv, kv + KVD, LDK, T, Tk, H, kv_heads_of(k), DK, Tk, k->flag, k->pos0, scores, r);
  double err = compare(y, r, ex, (size_t)T * D);
  free(q), free(kv), free(scratch), free(scores), free(y), free(r), free(ex);
  return err;
}

/* layernorm (ln = 1) or rmsnorm (0) */
static double check_norm(const kcase *k, generic_fn f, int ln) {
  int D = k->a, T = k->T;
  size_t n = (size_t)T * D;
  float *x = randoms(n, 3), *g = randoms(D, 1), *b = randoms(D, 1), *out = randoms(n, 0), *r = randoms(n, 0);
  char *ex = k->nan ? poison_norm(k, ln, x, g) : NULL;
  if (ln) {
    ((void (*)(const float *, int, const float *, const float *, float *))f)(x, T, g, b, out);
    ff_rt_layernorm(x, T, D, g, b, (float)EPS, r);
  } else {
    ((void (*)(const float *, int, const float *, float *))f)(x, T, g, out);
    ff_rt_rmsnorm(x, T, D, g, (float)EPS, r);
  }
  double err = compare(out, r, ex, n);
  free(x), free(g), free(b), free(out), free(r), free(ex);
  return err;
}

static double check_layernorm(const kcase *k, const char *isa, generic_fn f) {
  (void)isa;
  return check_norm(k, f, 1);
}

static double check_rmsnorm(const kcase *k, const char *isa, generic_fn f) {
  (void)isa;
  return check_norm(k, f, 0);
}

static double check_activation(const kcase *k, const char *isa, generic_fn f) {
  size_t n = (size_t)k->T * k->a;
  float *h = randoms(n, 8), *r = copy_of(h, n); /* past the approximations' clamps (plain.c) */
  enum ff_activation act = !strcmp(k->act, "relu") ? FF_ACT_RELU : !strcmp(k->act, "gelu") ? FF_ACT_GELU
                          : !strcmp(k->act, "silu") ? FF_ACT_SILU : FF_ACT_GELU_TANH;
  char *ex = NULL;
  (void)isa;
  if (k->nan) { /* as torch: relu NaN, inf, 0, 0; gelu (both) and silu NaN, inf, NaN, -0 */
    const float in[4] = {NAN, INFINITY, -INFINITY, -1e30f};
    ex = classes(n);
    memcpy(h, in, sizeof in), memcpy(r, in, sizeof in);
    ex[0] = 'N', ex[1] = '+', ex[2] = act == FF_ACT_RELU ? 0 : 'N';
  }
  ((void (*)(float *, int))f)(h, k->T);
  ff_rt_activate(act, r, n);
  double err = compare(h, r, ex, n);
  free(h), free(r), free(ex);
  return err;
}

static double check_swiglu(const kcase *k, const char *isa, generic_fn f) {
  int N = k->a, T = k->T;
  float *h = randoms((size_t)T * 2 * N, 20), *a = randoms((size_t)T * N, 0), *r = randoms((size_t)T * N, 0);
  char *ex = NULL;
  (void)isa;
  if (k->nan) { /* silu(g) up, as torch: g NaN, -inf: NaN; g +inf: inf up; up NaN: NaN; g -1e30: -0 */
    float *gate = h, *up = h + N, *gate1 = h + 2 * N, *up1 = gate1 + N;
    ex = classes((size_t)T * N);
    gate[0] = NAN, gate[1] = -INFINITY, gate[2] = INFINITY, up[2] = 0.5f, up[3] = NAN, gate[4] = -1e30f;
    gate1[5] = INFINITY, up1[5] = -2.0f;
    ex[0] = ex[1] = ex[3] = 'N', ex[2] = '+', ex[N + 5] = '-';
  }
  ((void (*)(const float *, int, float *))f)(h, T, a);
  ff_rt_swiglu(h, T, N, r);
  double err = compare(a, r, ex, (size_t)T * N);
  free(h), free(a), free(r), free(ex);
  return err;
}

/* One entry per template kind of gen/ops.lua: adding a kind is one row here
 * (and its cases above). */
static const struct kind {
  const char *kind;
  params_fn params; /* the template's variables */
  check_fn check;   /* inputs, the runtime twin, the comparison */
  double tol;       /* scaled error allowed */
} kinds[] = {
    {"embed", params_embed, check_embed, TOL},                /* ff_rt_embed */
    {"copy", params_d, check_copy, TOL},                      /* the input itself */
    {"sinusoidal", params_sinusoidal, check_sinusoidal, TOL},          /* ff_rt_add_sinusoidal */
    {"learned", params_d, check_learned, TOL},                /* ff_rt_add_learned */
    {"linear", params_linear, check_linear, TOL},             /* ff_rt_linear (+ residual, relu) */
    {"rope", params_rope, check_rope, TOL},                   /* ff_rt_rope on q and k */
    {"kv_store", params_kv_store, check_kv_store, TOL},       /* the rows copied by hand */
    {"attention", params_attention, check_attention, TOL},    /* ff_rt_attention */
    {"layernorm", params_norm, check_layernorm, TOL},         /* ff_rt_layernorm */
    {"rmsnorm", params_norm, check_rmsnorm, TOL},             /* ff_rt_rmsnorm */
    {"activation", params_activation, check_activation, TOL}, /* ff_rt_activate */
    {"swiglu", params_swiglu, check_swiglu, TOL},             /* ff_rt_swiglu */
};

static const struct kind *kind_of(const kcase *k) {
  for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++)
    if (!strcmp(kinds[i].kind, k->kind)) return &kinds[i];
  return NULL;
}

static void params_of(const kcase *k, const char *isa, char *buf, size_t n) {
  const struct kind *kd = kind_of(k);
  if (kd) kd->params(k, isa, buf, n);
  else buf[0] = 0;
}

/* ---- main ---------------------------------------------------------------- */

/* One engine and ISA: every case rendered into one unit, compiled, checked. */
static int run(ff_lua *lua, const char *engine, const char *isa) {
  size_t cap = 256 * N_CASES + 8, at = 0;
  char *list = malloc(cap), *text = NULL, params[256];
  ff_error err = {0, ""};
  at += (size_t)snprintf(list + at, cap - at, "{");
  for (int i = 0; i < N_CASES; i++) {
    params_of(&cases[i], isa, params, sizeof params);
    at += (size_t)snprintf(list + at, cap - at, " { \"%s\", %s },", cases[i].kind, params);
  }
  snprintf(list + at, cap - at, " }");
  ff_jit *jit = NULL;
  int rc = ff_render_kernels(lua, list, &text, &err);
  if (!rc) rc = !strcmp(engine, "tcc") ? ff_jit_tcc(text, &jit, &err) : ff_jit_cc(text, NULL, &jit, &err);
  free(list);
  free(text);
  if (rc) {
    fprintf(stderr, "test_kernels: %s, %s: %s\n", engine, isa, err.msg);
    return 1;
  }
  int failed = 0;
  double worst = 0;
  for (int i = 0; i < N_CASES; i++) {
    char sym[32];
    snprintf(sym, sizeof sym, "ff_kernel_%d", i);
    generic_fn const *p = (generic_fn const *)ff_jit_symbol(jit, sym);
    params_of(&cases[i], isa, params, sizeof params);
    const struct kind *kd = kind_of(&cases[i]);
    double e = p && kd ? kd->check(&cases[i], isa, *p) : -1; /* a case of no kind fails */
    int ok = e >= 0 && e <= (kd ? kd->tol : 0);
    failed += !ok;
    if (e > worst) worst = e;
    printf("%-4s %-11s %-84s%s err=%.2e %s\n", engine, cases[i].kind, params, cases[i].nan ? " nan" : "", e,
           ok ? "ok" : "FAIL");
  }
  ff_jit_free(jit);
  printf("%s, %s kernels: %d cases, %d failed, worst scaled error %.2e (tolerance %.0e)\n", engine, isa, N_CASES,
         failed, worst, TOL);
  return failed != 0;
}

int main(int argc, char **argv) {
  ff_error err = {0, ""};
  ff_lua *lua = ff_lua_open(&err);
  if (!lua) {
    fprintf(stderr, "test_kernels: %s\n", err.msg);
    return 1;
  }
  const char *defaults[] = {"tcc", "cc"};
  int n = argc > 1 ? argc - 1 : 2, failed = 0;
  for (int i = 0; i < n; i++) /* every ISA this machine runs, generic included */
    for (const char *const *isa = ff_host_isas(); *isa; isa++)
      failed |= run(lua, argc > 1 ? argv[i + 1] : defaults[i], *isa);
  ff_lua_close(lua);
  return failed;
}
