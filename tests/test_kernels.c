/* test_kernels.c - each template kind against its runtime twin.
 *
 * Every kernel kind of gen/ops.lua is rendered on its own from templates/
 * (ff_render_kernels), compiled by libtcc and by cc, called on random data
 * and compared with the reference kernel of runtime/ that computes the same
 * formula: the max-abs error, scaled by the reference's max magnitude, must
 * be <= 1e-5.  The sizes cover every unroll path of the template engine
 * (fully unrolled, x8, x4, x2, plain loop), odd widths, padding and causal
 * masks, strided q/k/v and a weight with a row stride above its width.
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
  int flag;         /* BIAS / CAUSAL / RESIDUAL / SCALE */
  const char *act;  /* activation name */
  int T, pos0, key_len;
} kcase;

static const kcase cases[] = {
    /* kind         a    b    c    d   flag  act      T  pos0 key_len */
    {"embed",       13,  11,  0,   0,  1,    NULL,    5, 0, 0},  /* D, VOCAB, scale sqrt(D) */
    {"embed",       16,  7,   0,   0,  0,    NULL,    3, 0, 0},  /* unscaled */
    {"copy",        9,   0,   0,   0,  0,    NULL,    4, 0, 0},
    {"sinusoidal",  12,  0,   0,   0,  0,    NULL,    6, 3, 0},  /* D, at positions 3.. */
    {"sinusoidal",  7,   0,   0,   0,  0,    NULL,    5, 0, 0},  /* odd D */
    {"learned",     10,  0,   0,   0,  0,    NULL,    4, 2, 0},
    {"linear",      5,   7,   7,   0,  1,    NULL,    3, 0, 0},  /* IN, OUT, LDW: fully unrolled */
    {"linear",      9,   16,  16,  0,  1,    NULL,    4, 0, 0},  /* x8 */
    {"linear",      6,   12,  12,  0,  0,    NULL,    2, 0, 0},  /* x4, no bias */
    {"linear",      4,   10,  10,  0,  1,    NULL,    3, 0, 0},  /* x2 */
    {"linear",      8,   13,  13,  0,  1,    NULL,    5, 0, 0},  /* loop */
    {"linear",      6,   6,   18,  0,  1,    NULL,    3, 0, 0},  /* rows every 18: q of in_proj */
    {"logits",      12,  9,   0,   0,  0,    NULL,    4, 0, 0},  /* D, VOCAB */
    {"logits",      5,   3,   0,   0,  0,    NULL,    1, 0, 0},
    {"rope",        3,   4,   36,  0,  0,    NULL,    5, 2, 0},  /* HEADS, DK, LDX */
    {"rope",        2,   10,  60,  0,  0,    NULL,    3, 0, 0},
    {"kv_store",    6,   18,  0,   0,  0,    NULL,    3, 4, 0},  /* D, LDX */
    {"attention",   3,   4,   36,  36, 0,    NULL,    6, 0, 4},  /* HEADS, DK, LDQ, LDK: padding */
    {"attention",   2,   8,   48,  32, 1,    NULL,    5, 3, 8},  /* causal over a cache */
    {"attention",   1,   3,   3,   6,  0,    NULL,    4, 0, 7},  /* cross-attention layout */
    {"attention",   4,   16,  192, 128, 1,   NULL,    1, 9, 10}, /* one step at position 9 */
    {"attention",   2,   10,  60,  40, 0,    NULL,    3, 0, 3},  /* x2 unroll */
    {"layernorm",   11,  0,   0,   0,  0,    NULL,    4, 0, 0},
    {"layernorm",   8,   0,   0,   0,  1,    NULL,    3, 0, 0},  /* x = LN(x + y) */
    {"rmsnorm",     9,   0,   0,   0,  0,    NULL,    4, 0, 0},
    {"rmsnorm",     16,  0,   0,   0,  1,    NULL,    2, 0, 0},
    {"residual",    7,   0,   0,   0,  0,    NULL,    3, 0, 0},
    {"activation",  13,  0,   0,   0,  0,    "relu",  3, 0, 0},
    {"activation",  13,  0,   0,   0,  0,    "gelu",  3, 0, 0},
    {"activation",  13,  0,   0,   0,  0,    "gelu_tanh", 3, 0, 0},
    {"swiglu",      11,  0,   0,   0,  0,    NULL,    4, 0, 0},
};
#define N_CASES (int)(sizeof cases / sizeof *cases)
#define EPS 1e-5
#define THETA 10000.0

/* the case's params as a Lua table constructor (names of gen/ops.lua) */
static void params_of(const kcase *k, char *buf, size_t n) {
  const char *flag = k->flag ? "true" : "false";
  const char *s = k->kind;
  if (!strcmp(s, "embed"))
    snprintf(buf, n, "{ D = %d, VOCAB = %d, SCALE = %.17g }", k->a, k->b, k->flag ? sqrt(k->a) : 1.0);
  else if (!strcmp(s, "copy") || !strcmp(s, "sinusoidal") || !strcmp(s, "learned") || !strcmp(s, "residual"))
    snprintf(buf, n, "{ D = %d }", k->a);
  else if (!strcmp(s, "linear"))
    snprintf(buf, n, "{ IN = %d, OUT = %d, LDW = %d, BIAS = %s }", k->a, k->b, k->c, flag);
  else if (!strcmp(s, "logits"))
    snprintf(buf, n, "{ D = %d, VOCAB = %d }", k->a, k->b);
  else if (!strcmp(s, "rope"))
    snprintf(buf, n, "{ HEADS = %d, DK = %d, LDX = %d, THETA = %.1f }", k->a, k->b, k->c, THETA);
  else if (!strcmp(s, "kv_store"))
    snprintf(buf, n, "{ D = %d, LDX = %d }", k->a, k->b);
  else if (!strcmp(s, "attention"))
    snprintf(buf, n, "{ HEADS = %d, DK = %d, LDQ = %d, LDK = %d, CAUSAL = %s }", k->a, k->b, k->c, k->d, flag);
  else if (!strcmp(s, "layernorm") || !strcmp(s, "rmsnorm"))
    snprintf(buf, n, "{ D = %d, EPS = %.17g, RESIDUAL = %s }", k->a, EPS, flag);
  else if (!strcmp(s, "activation"))
    snprintf(buf, n, "{ N = %d, ACT = \"%s\" }", k->a, k->act);
  else if (!strcmp(s, "swiglu"))
    snprintf(buf, n, "{ N = %d }", k->a);
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

static double check(const kcase *k, generic_fn f) {
  const char *s = k->kind;
  int T = k->T;
  double err = -1;
  if (!strcmp(s, "embed")) {
    int D = k->a, V = k->b;
    int32_t tok[64];
    for (int t = 0; t < T; t++) tok[t] = (t * 7 + 3) % V;
    float *E = randoms((size_t)V * D, 1), *x = randoms((size_t)T * D, 0), *r = randoms((size_t)T * D, 0);
    ((void (*)(const int32_t *, int, const float *, float *))f)(tok, T, E, x);
    ff_rt_embed(tok, T, E, V, D, k->flag, r, NULL);
    err = scaled_err(x, r, (size_t)T * D);
    free(E), free(x), free(r);
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
  } else if (!strcmp(s, "linear")) {
    int IN = k->a, OUT = k->b, LDW = k->c;
    float *x = randoms((size_t)T * IN, 1), *W = randoms((size_t)OUT * IN, 1), *b = randoms(OUT, 1);
    float *Wt = randoms((size_t)IN * LDW, 100); /* columns past OUT must not be read: junk */
    for (int o = 0; o < OUT; o++)
      for (int i = 0; i < IN; i++) Wt[(size_t)i * LDW + o] = W[(size_t)o * IN + i]; /* the packed layout */
    float *y = randoms((size_t)T * OUT, 0), *r = randoms((size_t)T * OUT, 0);
    ((void (*)(const float *, int, const float *, const float *, float *))f)(x, T, Wt, k->flag ? b : NULL, y);
    ff_rt_linear(x, T, IN, W, k->flag ? b : NULL, OUT, r);
    err = scaled_err(y, r, (size_t)T * OUT);
    free(x), free(W), free(b), free(Wt), free(y), free(r);
  } else if (!strcmp(s, "logits")) {
    int D = k->a, V = k->b;
    float *x = randoms((size_t)T * D, 1), *E = randoms((size_t)V * D, 1);
    float *y = randoms((size_t)T * V, 0), *r = randoms((size_t)T * V, 0);
    ((void (*)(const float *, int, const float *, float *))f)(x, T, E, y);
    ff_rt_linear(x, T, D, E, NULL, V, r);
    err = scaled_err(y, r, (size_t)T * V);
    free(x), free(E), free(y), free(r);
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
    float *scores = randoms((size_t)Tk, 0), *y = randoms((size_t)T * D, 0), *r = randoms((size_t)T * D, 0);
    ((void (*)(const float *, const float *, int, int, int, float *, float *))f)(q, kv, T, Tk, k->pos0, scores, y);
    ff_rt_attention(q, LDQ, kv, kv + D, LDK, T, Tk, H, DK, Tk, k->flag, k->pos0, scores, r);
    err = scaled_err(y, r, (size_t)T * D);
    free(q), free(kv), free(scores), free(y), free(r);
  } else if (!strcmp(s, "layernorm") || !strcmp(s, "rmsnorm")) {
    int D = k->a, ln = !strcmp(s, "layernorm");
    size_t n = (size_t)T * D;
    float *x = randoms(n, 3), *y = randoms(n, 1), *g = randoms(D, 1), *b = randoms(D, 1);
    float *out = randoms(n, 0), *r = randoms(n, 0), *xr = copy_of(x, n);
    if (k->flag) { /* x = Norm(x + y) in place */
      for (size_t i = 0; i < n; i++) xr[i] += y[i];
      if (ln) ((void (*)(float *, const float *, int, const float *, const float *))f)(x, y, T, g, b);
      else ((void (*)(float *, const float *, int, const float *))f)(x, y, T, g);
      memcpy(out, x, n * sizeof *x);
    } else if (ln) {
      ((void (*)(const float *, int, const float *, const float *, float *))f)(x, T, g, b, out);
    } else {
      ((void (*)(const float *, int, const float *, float *))f)(x, T, g, out);
    }
    if (ln) ff_rt_layernorm(xr, T, D, g, b, (float)EPS, r);
    else ff_rt_rmsnorm(xr, T, D, g, (float)EPS, r);
    err = scaled_err(out, r, n);
    free(x), free(y), free(g), free(b), free(out), free(r), free(xr);
  } else if (!strcmp(s, "residual")) {
    size_t n = (size_t)T * k->a;
    float *x = randoms(n, 1), *y = randoms(n, 1), *r = copy_of(x, n);
    ((void (*)(float *, const float *, int))f)(x, y, T);
    for (size_t i = 0; i < n; i++) r[i] += y[i];
    err = scaled_err(x, r, n);
    free(x), free(y), free(r);
  } else if (!strcmp(s, "activation")) {
    size_t n = (size_t)T * k->a;
    float *h = randoms(n, 4), *r = copy_of(h, n);
    enum ff_activation act = !strcmp(k->act, "relu") ? FF_ACT_RELU : !strcmp(k->act, "gelu") ? FF_ACT_GELU
                                                                                             : FF_ACT_GELU_TANH;
    ((void (*)(float *, int))f)(h, T);
    ff_rt_activate(act, r, n);
    err = scaled_err(h, r, n);
    free(h), free(r);
  } else if (!strcmp(s, "swiglu")) {
    int N = k->a;
    float *h = randoms((size_t)T * 2 * N, 4), *a = randoms((size_t)T * N, 0), *r = randoms((size_t)T * N, 0);
    ((void (*)(const float *, int, float *))f)(h, T, a);
    ff_rt_swiglu(h, T, N, r);
    err = scaled_err(a, r, (size_t)T * N);
    free(h), free(a), free(r);
  }
  return err;
}

/* ---- main ---------------------------------------------------------------- */

static int run_engine(const char *engine, const char *text) {
  ff_error err = {0, ""};
  ff_jit *jit = NULL;
  int rc = !strcmp(engine, "tcc") ? ff_jit_tcc(text, &jit, &err) : ff_jit_cc(text, &jit, &err);
  if (rc) {
    fprintf(stderr, "test_kernels: %s: %s\n", engine, err.msg);
    return 1;
  }
  int failed = 0;
  double worst = 0;
  for (int i = 0; i < N_CASES; i++) {
    char sym[32], params[256];
    snprintf(sym, sizeof sym, "ff_kernel_%d", i);
    generic_fn const *p = (generic_fn const *)ff_jit_symbol(jit, sym);
    params_of(&cases[i], params, sizeof params);
    double e = p ? check(&cases[i], *p) : -1;
    int ok = e >= 0 && e <= TOL;
    failed += !ok;
    if (e > worst) worst = e;
    printf("%-4s %-11s %-62s err=%.2e %s\n", engine, cases[i].kind, params, e, ok ? "ok" : "FAIL");
  }
  ff_jit_free(jit);
  printf("%s: %d kernels, %d failed, worst scaled error %.2e (tolerance %.0e)\n", engine, N_CASES, failed, worst,
         TOL);
  return failed != 0;
}

int main(int argc, char **argv) {
  ff_error err = {0, ""};
  ff_lua *lua = ff_lua_open(&err);
  if (!lua) {
    fprintf(stderr, "test_kernels: %s\n", err.msg);
    return 1;
  }
  /* the list of { kind, params } for ff_render_kernels */
  size_t cap = 256 * N_CASES + 8, at = 0;
  char *list = malloc(cap), *text = NULL;
  at += (size_t)snprintf(list + at, cap - at, "{");
  for (int i = 0; i < N_CASES; i++) {
    char params[256];
    params_of(&cases[i], params, sizeof params);
    at += (size_t)snprintf(list + at, cap - at, " { \"%s\", %s },", cases[i].kind, params);
  }
  snprintf(list + at, cap - at, " }");
  int failed = 0;
  if (ff_render_kernels(lua, list, &text, &err)) {
    fprintf(stderr, "test_kernels: %s\n", err.msg);
    failed = 1;
  }
  const char *defaults[] = {"tcc", "cc"};
  int n = argc > 1 ? argc - 1 : 2;
  for (int i = 0; text && i < n; i++) failed |= run_engine(argc > 1 ? argv[i + 1] : defaults[i], text);
  free(list);
  free(text);
  ff_lua_close(lua);
  return failed;
}
