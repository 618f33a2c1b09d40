/* test_kernels.c - each template kind against its runtime twin.
 *
 * Every kernel kind of gen/ops.lua is rendered on its own from templates/
 * (ff_render_kernels), compiled by libtcc and by cc, called on random data
 * and compared with the reference kernel of runtime/ that computes the same
 * formula: the max-abs error, scaled by the reference's max magnitude, must
 * be <= 1e-5.  The sizes cover every unroll path of the template engine
 * partial tiles and panels, fused epilogues (+ the residual, relu), odd
 * widths, padding and causal masks and strided q/k/v, for every ISA whose
 * matrix kernels this machine runs (templates/kernels/gemm_*.c).
 *
 *   test_kernels [tcc|cc ...]      (default: both)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen.h"
#include "ff_runtime.h"

#define TOL 1e-5

typedef struct {
  const char *kind; /* ops.lua kind */
  int a, b, c, d;   /* sizes, meaning per kind (see params_of) */
  int flag;         /* BIAS / CAUSAL / SCALE */
  const char *act;  /* activation name; for linear: "relu" fused */
  int T, pos0, key_len;
} kcase;

static const kcase cases[] = {
    /* kind         a    b    c    d   flag  act      T  pos0 key_len */
    {"embed",       13,  11,  0,   0,  1,    NULL,    5, 0, 0},  /* D, VOCAB, PANEL; scale sqrt(D) */
    {"embed",       16,  7,   0,   0,  0,    NULL,    3, 0, 0},  /* unscaled */
    {"embed",       12,  37,  16,  0,  1,    NULL,    6, 0, 0},  /* from W^T panels of 16 (tied head) */
    {"embed",       5,   40,  32,  0,  1,    NULL,    4, 0, 0},  /* ... of 32 */
    {"copy",        9,   0,   0,   0,  0,    NULL,    4, 0, 0},
    {"sinusoidal",  12,  0,   0,   0,  0,    NULL,    6, 3, 0},  /* D, at positions 3.. */
    {"sinusoidal",  7,   0,   0,   0,  0,    NULL,    5, 0, 0},  /* odd D */
    {"learned",     10,  0,   0,   0,  0,    NULL,    4, 2, 0},
    {"linear",      5,   7,   0,   0,  1,    NULL,    3, 0, 0},  /* IN, OUT, ACC; flag BIAS: a partial tile */
    {"linear",      9,   16,  0,   0,  1,    NULL,    9, 0, 0},  /* rows past one tile */
    {"linear",      6,   40,  0,   0,  0,    NULL,    2, 0, 0},  /* columns past one panel, no bias */
    {"linear",      37,  13,  1,   0,  1,    NULL,    5, 0, 0},  /* y += (the residual) */
    {"linear",      24,  50,  0,   0,  1,    "relu",  8, 0, 0},  /* max(0, .) fused */
    {"linear",      300, 33,  1,   0,  1,    "relu",  3, 0, 0},  /* k in two passes of 192 */
    {"linear",      64,  96,  0,   0,  1,    NULL,    1, 0, 0},  /* one row (decoding) */
    {"linear",      600, 70,  1,   0,  1,    "relu",  11, 0, 0}, /* k in 3-4 passes over 3-5 panels */
    {"rope",        3,   4,   36,  0,  0,    NULL,    5, 2, 0},  /* HEADS, DK, LDX */
    {"rope",        2,   10,  60,  0,  0,    NULL,    3, 0, 0},
    {"kv_store",    6,   18,  0,   0,  0,    NULL,    3, 4, 0},  /* D, LDX */
    {"attention",   3,   4,   36,  36, 0,    NULL,    6, 0, 4},  /* HEADS, DK, LDQ, LDK: padding */
    {"attention",   2,   8,   48,  32, 1,    NULL,    5, 3, 8},  /* causal over a cache */
    {"attention",   1,   3,   3,   6,  0,    NULL,    4, 0, 7},  /* cross-attention layout */
    {"attention",   4,   16,  192, 128, 1,   NULL,    1, 9, 10}, /* one step at position 9 */
    {"attention",   2,   40,  240, 160, 0,   NULL,   11, 0, 37}, /* a head wider than a tile */
    {"attention",   5,   8,   120, 80, 1,    NULL,   19, 0, 19}, /* several query blocks, causal */
    {"layernorm",   11,  0,   0,   0,  0,    NULL,    4, 0, 0},
    {"rmsnorm",     9,   0,   0,   0,  0,    NULL,    4, 0, 0},
    {"activation",  13,  0,   0,   0,  0,    "relu",  3, 0, 0},
    {"activation",  13,  0,   0,   0,  0,    "gelu",  3, 0, 0},
    {"activation",  13,  0,   0,   0,  0,    "gelu_tanh", 3, 0, 0},
    {"swiglu",      11,  0,   0,   0,  0,    NULL,    4, 0, 0},
};
#define N_CASES (int)(sizeof cases / sizeof *cases)
#define EPS 1e-5
#define THETA 10000.0

static int panel_of(const char *isa) { return !strcmp(isa, "avx512") ? 32 : 16; } /* gen/plan.lua M.NR */

/* the case's params as a Lua table constructor (names of gen/ops.lua) */
static void params_of(const kcase *k, const char *isa, char *buf, size_t n) {
  const char *flag = k->flag ? "true" : "false";
  const char *s = k->kind;
  if (!strcmp(s, "embed"))
    snprintf(buf, n, "{ D = %d, VOCAB = %d, SCALE = %.17g, PANEL = %d }", k->a, k->b, k->flag ? sqrt(k->a) : 1.0,
             k->c);
  else if (!strcmp(s, "copy") || !strcmp(s, "sinusoidal") || !strcmp(s, "learned"))
    snprintf(buf, n, "{ D = %d }", k->a);
  else if (!strcmp(s, "linear"))
    snprintf(buf, n, "{ IN = %d, OUT = %d, BIAS = %s, ACC = %s, RELU = %s, ISA = \"%s\", NR = %d }", k->a, k->b,
             flag, k->c ? "true" : "false", k->act ? "true" : "false", isa, panel_of(isa));
  else if (!strcmp(s, "rope"))
    snprintf(buf, n, "{ HEADS = %d, DK = %d, LDX = %d, THETA = %.1f }", k->a, k->b, k->c, THETA);
  else if (!strcmp(s, "kv_store"))
    snprintf(buf, n, "{ D = %d, LDX = %d }", k->a, k->b);
  else if (!strcmp(s, "attention"))
    snprintf(buf, n, "{ HEADS = %d, DK = %d, LDQ = %d, LDK = %d, CAUSAL = %s, ISA = \"%s\" }", k->a, k->b, k->c,
             k->d, flag, isa);
  else if (!strcmp(s, "layernorm") || !strcmp(s, "rmsnorm"))
    snprintf(buf, n, "{ D = %d, EPS = %.17g, ISA = \"%s\" }", k->a, EPS, isa);
  else if (!strcmp(s, "activation"))
    snprintf(buf, n, "{ N = %d, ACT = \"%s\", ISA = \"%s\" }", k->a, k->act, isa);
  else if (!strcmp(s, "swiglu"))
    snprintf(buf, n, "{ N = %d, ISA = \"%s\" }", k->a, isa);
  else
    buf[0] = 0;
}

/* ---- data ---------------------------------------------------------------- */

static unsigned long long rng_state = 88172645463325252ULL;

static float uniform(void) { /* xorshift64, [-1, 1) */
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (float)((rng_state >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

static float *randoms(size_t n, float scale) {
  float *x = malloc((n ? n : 1) * sizeof *x);
  if (!x) {
    fprintf(stderr, "test_kernels: out of memory\n");
    exit(1);
  }
  for (size_t i = 0; i < n; i++) x[i] = uniform() * scale;
  return x;
}

static float *copy_of(const float *x, size_t n) {
  float *y = randoms(n, 0);
  memcpy(y, x, n * sizeof *x);
  return y;
}

/* W [rows, cols] -> W^T in panels of nr columns, zero-padded (gen/plan.lua) */
static float *pack_panels(const float *W, int rows, int cols, int nr) {
  float *P = randoms((size_t)(rows + nr - 1) / nr * nr * cols, 0);
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) P[(size_t)(r / nr) * cols * nr + (size_t)c * nr + r % nr] = W[(size_t)r * cols + c];
  return P;
}

/* max |got - want| / max |want| */
static double scaled_err(const float *got, const float *want, size_t n) {
  double e = 0, m = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)got[i] - want[i]);
    if (!(d <= e)) e = d; /* NaN counts as the largest */
    if (fabs(want[i]) > m) m = fabs(want[i]);
  }
  return e / (m > 0 ? m : 1e-30);
}

/* ---- one case against its twin --------------------------------------------- */

typedef void (*generic_fn)(void);

static double check(const kcase *k, const char *isa, generic_fn f) {
  const char *s = k->kind;
  int T = k->T;
  double err = -1;
  if (!strcmp(s, "embed")) { /* rows of E, or of E packed as the output head */
    int D = k->a, V = k->b;
    int32_t tok[64];
    for (int t = 0; t < T; t++) tok[t] = (t * 7 + 3) % V;
    float *E = randoms((size_t)V * D, 1), *x = randoms((size_t)T * D, 0), *r = randoms((size_t)T * D, 0);
    float *Ep = k->c ? pack_panels(E, V, D, k->c) : NULL;
    ((void (*)(const int32_t *, int, const float *, float *))f)(tok, T, k->c ? Ep : E, x);
    ff_rt_embed(tok, T, E, V, D, k->flag, r, NULL);
    err = scaled_err(x, r, (size_t)T * D);
    free(E), free(x), free(r), free(Ep);
  } else if (!strcmp(s, "copy")) {
    size_t n = (size_t)T * k->a;
    float *x = randoms(n, 1), *y = randoms(n, 0);
    ((void (*)(const float *, int, float *))f)(x, T, y);
    err = scaled_err(y, x, n);
    free(x), free(y);
  } else if (!strcmp(s, "sinusoidal") || !strcmp(s, "learned")) {
    int D = k->a;
    size_t n = (size_t)T * D;
    float *x = randoms(n, 1), *r = copy_of(x, n), *P = randoms((size_t)(k->pos0 + T) * D, 1);
    if (!strcmp(s, "sinusoidal")) {
      ((void (*)(float *, int, int))f)(x, T, k->pos0);
      ff_rt_add_sinusoidal(r, T, D, k->pos0);
    } else {
      ((void (*)(float *, int, const float *, int))f)(x, T, P, k->pos0);
      ff_rt_add_learned(r, T, D, k->pos0, P);
    }
    err = scaled_err(x, r, n);
    free(x), free(r), free(P);
  } else if (!strcmp(s, "linear")) { /* y (+)= x W^T + b, then max(0, .) */
    int IN = k->a, OUT = k->b;
    size_t ny = (size_t)T * OUT;
    float *x = randoms((size_t)T * IN, 1), *W = randoms((size_t)OUT * IN, 1), *b = randoms(OUT, 1);
    float *Wp = pack_panels(W, OUT, IN, panel_of(isa)), *y = randoms(ny, 1), *r = copy_of(y, ny);
    float *lin = randoms(ny, 0);
    ((void (*)(const float *, const float *, int, const float *, const float *, float *))f)(NULL, x, T, Wp,
                                                                                          k->flag ? b : NULL, y);
    ff_rt_linear(x, T, IN, W, k->flag ? b : NULL, OUT, lin);
    for (size_t i = 0; i < ny; i++) {
      float v = k->c ? r[i] + lin[i] : lin[i];
      r[i] = k->act && v < 0 ? 0.0f : v;
    }
    err = scaled_err(y, r, ny);
    free(x), free(W), free(b), free(Wp), free(y), free(r), free(lin);
  } else if (!strcmp(s, "rope")) {
    int H = k->a, DK = k->b, LDX = k->c, D = H * DK;
    size_t n = (size_t)T * LDX;
    float *x = randoms(n, 1), *r = copy_of(x, n);
    ((void (*)(float *, int, int))f)(x, T, k->pos0);
    ff_rt_rope(r, LDX, T, H, DK, k->pos0, (float)THETA);     /* q */
    ff_rt_rope(r + D, LDX, T, H, DK, k->pos0, (float)THETA); /* k */
    err = scaled_err(x, r, n);
    free(x), free(r);
  } else if (!strcmp(s, "kv_store")) {
    int D = k->a, LDX = k->b, rows = k->pos0 + T;
    float *qkv = randoms((size_t)T * LDX, 1), *cache = randoms((size_t)rows * 2 * D, 1);
    float *r = copy_of(cache, (size_t)rows * 2 * D);
    ((void (*)(const float *, int, float *, int))f)(qkv, T, cache, k->pos0);
    for (int t = 0; t < T; t++) /* row pos0 + t of the cache = k | v of row t */
      for (int i = 0; i < 2 * D; i++) r[(size_t)(k->pos0 + t) * 2 * D + i] = qkv[(size_t)t * LDX + D + i];
    err = scaled_err(cache, r, (size_t)rows * 2 * D);
    free(qkv), free(cache), free(r);
  } else if (!strcmp(s, "attention")) {
    int H = k->a, DK = k->b, LDQ = k->c, LDK = k->d, D = H * DK, Tk = k->key_len;
    float *q = randoms((size_t)T * LDQ, 2), *kv = randoms((size_t)Tk * LDK + D, 2);
    float *scratch = randoms((size_t)(DK + 8) * ((Tk + 15) / 16 * 16), 0), *scores = randoms((size_t)Tk, 0);
    float *y = randoms((size_t)T * D, 0), *r = randoms((size_t)T * D, 0);
    ((void (*)(const float *, const float *, const float *, int, int, int, float *, float *))f)(NULL, q, kv, T, Tk,
                                                                                              k->pos0, scratch, y);
    ff_rt_attention(q, LDQ, kv, kv + D, LDK, T, Tk, H, DK, Tk, k->flag, k->pos0, scores, r);
    err = scaled_err(y, r, (size_t)T * D);
    free(q), free(kv), free(scratch), free(scores), free(y), free(r);
  } else if (!strcmp(s, "layernorm") || !strcmp(s, "rmsnorm")) {
    int D = k->a, ln = !strcmp(s, "layernorm");
    size_t n = (size_t)T * D;
    float *x = randoms(n, 3), *g = randoms(D, 1), *b = randoms(D, 1), *out = randoms(n, 0), *r = randoms(n, 0);
    if (ln) {
      ((void (*)(const float *, int, const float *, const float *, float *))f)(x, T, g, b, out);
      ff_rt_layernorm(x, T, D, g, b, (float)EPS, r);
    } else {
      ((void (*)(const float *, int, const float *, float *))f)(x, T, g, out);
      ff_rt_rmsnorm(x, T, D, g, (float)EPS, r);
    }
    err = scaled_err(out, r, n);
    free(x), free(g), free(b), free(out), free(r);
  } else if (!strcmp(s, "activation")) {
    size_t n = (size_t)T * k->a;
    float *h = randoms(n, 8), *r = copy_of(h, n); /* past the approximations' clamps (plain.c) */
    enum ff_activation act = !strcmp(k->act, "relu") ? FF_ACT_RELU : !strcmp(k->act, "gelu") ? FF_ACT_GELU
                                                                                             : FF_ACT_GELU_TANH;
    ((void (*)(float *, int))f)(h, T);
    ff_rt_activate(act, r, n);
    err = scaled_err(h, r, n);
    free(h), free(r);
  } else if (!strcmp(s, "swiglu")) {
    int N = k->a;
    float *h = randoms((size_t)T * 2 * N, 20), *a = randoms((size_t)T * N, 0), *r = randoms((size_t)T * N, 0);
    ((void (*)(const float *, int, float *))f)(h, T, a);
    ff_rt_swiglu(h, T, N, r);
    err = scaled_err(a, r, (size_t)T * N);
    free(h), free(a), free(r);
  }
  return err;
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
    double e = p ? check(&cases[i], isa, *p) : -1;
    int ok = e >= 0 && e <= TOL;
    failed += !ok;
    if (e > worst) worst = e;
    printf("%-4s %-11s %-84s err=%.2e %s\n", engine, cases[i].kind, params, e, ok ? "ok" : "FAIL");
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
