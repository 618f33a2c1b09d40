/* optimizer.c - AdamW as torch.optim.AdamW computes it (its single-tensor
 * path, in float32 with the scalars it derives in double), and gradient
 * clipping as torch.nn.utils.clip_grad_norm_; the trainer's step of them on
 * its threads. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "codegen.h"
#include "fixformer_train.h"
#include "train_internal.h"

/* One element of the step: the scalars as torch derives them (Python floats,
 * so double), the element-wise arithmetic in float32; the gradient as
 * (g gscale) gcoef, the trainer's mean and clipping applied as it is read
 * (1 and 1: g itself, exactly) */
typedef struct {
  float decay, b1, b2, a1, a2, neg_step, bc2_sqrt, eps, gscale, gcoef;
} adamw_scalars;

static adamw_scalars adamw_scalars_of(int64_t step, const ff_adamw *h) {
  const double bc1 = 1.0 - pow(h->beta1, (double)step), bc2 = 1.0 - pow(h->beta2, (double)step);
  adamw_scalars s = {(float)(1.0 - h->lr * h->weight_decay), (float)h->beta1, (float)h->beta2,
                     (float)(1.0 - h->beta1), (float)(1.0 - h->beta2), (float)-(h->lr / bc1), (float)sqrt(bc2),
                     (float)h->eps, 1.0f, 1.0f};
  return s;
}

static void adamw_plain(float *p, const float *g, float *m, float *v, size_t n, const adamw_scalars *s) {
  for (size_t i = 0; i < n; i++) {
    const float gi = g[i] * s->gscale * s->gcoef; /* grad.mul_(scale), then clip_grad_norm_'s grad.mul_(coef) */
    p[i] *= s->decay;                             /* param.mul_(1 - lr * weight_decay) */
    m[i] = m[i] * s->b1 + s->a1 * gi;             /* exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1) */
    v[i] = v[i] * s->b2 + s->a2 * gi * gi;        /* exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2) */
    float denom = sqrtf(v[i]) / s->bc2_sqrt + s->eps; /* (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps) */
    p[i] += s->neg_step * m[i] / denom;           /* param.addcdiv_(exp_avg, denom, value=-step_size) */
  }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define ADAMW_AVX 1
/* adamw_plain's loop eight elements at a time: the same float operations in
 * the same order, each correctly rounded (a multiply and an add stay two
 * roundings: no FMA), so the same bits; a step is memory-bound (seven floats
 * an element), which the scalar loop's square root and division were not */
__attribute__((target("avx"))) static size_t adamw_avx(float *p, const float *g, float *m, float *v, size_t n,
                                                       const adamw_scalars *s) {
  const __m256 decay = _mm256_set1_ps(s->decay), b1 = _mm256_set1_ps(s->b1), b2 = _mm256_set1_ps(s->b2);
  const __m256 a1 = _mm256_set1_ps(s->a1), a2 = _mm256_set1_ps(s->a2), neg_step = _mm256_set1_ps(s->neg_step);
  const __m256 bc2_sqrt = _mm256_set1_ps(s->bc2_sqrt), eps = _mm256_set1_ps(s->eps);
  const __m256 gscale = _mm256_set1_ps(s->gscale), gcoef = _mm256_set1_ps(s->gcoef);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 gi = _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(g + i), gscale), gcoef);
    const __m256 mi = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(m + i), b1), _mm256_mul_ps(a1, gi));
    const __m256 vi = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(v + i), b2), _mm256_mul_ps(_mm256_mul_ps(a2, gi), gi));
    const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), bc2_sqrt), eps);
    const __m256 pi = _mm256_mul_ps(_mm256_loadu_ps(p + i), decay);
    _mm256_storeu_ps(m + i, mi);
    _mm256_storeu_ps(v + i, vi);
    _mm256_storeu_ps(p + i, _mm256_add_ps(pi, _mm256_div_ps(_mm256_mul_ps(neg_step, mi), denom)));
  }
  return i;
}

/* the vector loop unless FIXFORMER_ISA=generic (the tests compare the two) or the CPU lacks AVX;
 * decided once, whichever of the optimizer's threads asks first */
static int adamw_use_avx;
static pthread_once_t adamw_once = PTHREAD_ONCE_INIT;
static void adamw_decide(void) { adamw_use_avx = strcmp(ff_host_isa(), "generic") && __builtin_cpu_supports("avx"); }
static int adamw_vector(void) {
  pthread_once(&adamw_once, adamw_decide);
  return adamw_use_avx;
}

/* scaled_squares's loop, four lanes of each of its two vectors of doubles: the same roundings */
__attribute__((target("avx"))) static size_t scaled_squares_avx(const float *g, size_t n, float scale, double lane[8]) {
  const __m256 sv = _mm256_set1_ps(scale);
  __m256d lo = _mm256_loadu_pd(lane), hi = _mm256_loadu_pd(lane + 4);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_mul_ps(_mm256_loadu_ps(g + i), sv);
    const __m256d xl = _mm256_cvtps_pd(_mm256_castps256_ps128(x)), xh = _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1));
    lo = _mm256_add_pd(lo, _mm256_mul_pd(xl, xl));
    hi = _mm256_add_pd(hi, _mm256_mul_pd(xh, xh));
  }
  _mm256_storeu_pd(lane, lo);
  _mm256_storeu_pd(lane + 4, hi);
  return i;
}
#endif

/* The sum of the squares of g [n] scale (each rounded to float, as
 * grad.mul_(scale) stores it) in double: element i into lane i mod 8, the
 * lanes added pairwise at the end (a fixed order, so every path and thread
 * count gives the same bits; eight chains, not one).  g is only read: AdamW
 * scales it again as it reads it (the same floats), one pass less over it. */
static double scaled_squares(const float *g, size_t n, float scale) {
  double lane[8] = {0};
  size_t i = 0;
#ifdef ADAMW_AVX
  if (adamw_vector()) i = scaled_squares_avx(g, n, scale, lane);
#endif
  for (; i < n; i++) {
    const float x = g[i] * scale;
    lane[i % 8] += (double)x * x;
  }
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

static void adamw_run(float *p, const float *g, float *m, float *v, size_t n, const adamw_scalars *s) {
  size_t done = 0;
#ifdef ADAMW_AVX
  if (adamw_vector()) done = adamw_avx(p, g, m, v, n, s);
#endif
  adamw_plain(p + done, g + done, m + done, v + done, n - done, s);
}

void ff_adamw_update(float *p, const float *g, float *m, float *v, size_t n, int64_t step, const ff_adamw *h) {
  const adamw_scalars s = adamw_scalars_of(step, h);
  adamw_run(p, g, m, v, n, &s);
}

/* clip_grad_norm_'s factor for a gradient of L2 norm norm: max_norm / (norm + 1e-6),
 * clamped to 1 (a factor of 1 changes nothing); max_norm <= 0: 1 */
static float clip_coef(double norm, double max_norm) {
  const double coef = max_norm / (norm + 1e-6);
  return max_norm > 0.0 && coef < 1.0 ? (float)coef : 1.0f;
}

double ff_clip_grad_norm(float *g, size_t n, double max_norm) {
  double sum = 0.0;
  for (size_t i = 0; i < n; i++) sum += (double)g[i] * g[i];
  const double norm = sqrt(sum);
  const float coef = clip_coef(norm, max_norm);
  for (size_t i = 0; coef < 1.0f && i < n; i++) g[i] *= coef;
  return norm;
}

/* ---- the trainer's optimizer step, in chunks on its threads ---------------------------------- */

/* Elements a unit of the step's work: fixed, so that the chunks, their sums
 * of squares (added in chunk order) and the calls of adamw_run are the
 * same whatever the thread count: the same bits on 1 thread as on 8. */
#define OPT_CHUNK 16384

typedef struct {
  ff_trainer *t;
  float scale, coef;
  double lr;
  int pass, n; /* pass 1: sums of the scaled squares; pass 2: AdamW on the scaled, clipped gradient */
  size_t chunks;
} opt_job;

static void opt_chunk(const opt_job *j, size_t c) {
  ff_trainer *t = j->t;
  const size_t e0 = c * OPT_CHUNK, e1 = e0 + OPT_CHUNK < t->p.numel ? e0 + OPT_CHUNK : t->p.numel;
  const float *g = t->grad;
  if (j->pass == 1) {
    t->chunk_sums[c] = scaled_squares(g + e0, e1 - e0, j->scale);
    return;
  }
  for (int k = 0; k < t->p.count; k++) { /* the tensors the chunk holds a part of */
    const ff_rt_param *q = &t->p.tensors[k];
    const size_t a = q->offset > e0 ? q->offset : e0, b = q->offset + q->numel < e1 ? q->offset + q->numel : e1;
    if (a >= b) continue;
    const ff_adamw h = {j->lr, t->o.beta1, t->o.beta2, t->o.eps, t->decay[k] ? t->o.weight_decay : 0.0};
    adamw_scalars s = adamw_scalars_of(t->step + 1, &h);
    s.gscale = j->scale, s.gcoef = j->coef; /* a factor of 1 multiplies exactly */
    adamw_run(t->p.data + a, g + a, t->exp_avg + a, t->exp_avg_sq + a, b - a, &s);
  }
}

static void opt_task(void *arg, int i) { /* the i-th of n ranges of chunks */
  const opt_job *j = arg;
  for (size_t c = j->chunks * (size_t)i / (size_t)j->n; c < j->chunks * (size_t)(i + 1) / (size_t)j->n; c++)
    opt_chunk(j, c);
}

static void opt_run(ff_trainer *t, opt_job *j) {
  j->n = t->pool && j->chunks > 1 ? (t->o.threads < (int)j->chunks ? t->o.threads : (int)j->chunks) : 1;
  if (j->n > 1) ff_pool_run(t->pool, j->n, opt_task, j);
  else opt_task(j, 0);
}

double ff_train_optimize(ff_trainer *t, float scale, double lr) {
  opt_job j = {t, scale, 1.0f, lr, 1, 1, (t->p.numel + OPT_CHUNK - 1) / OPT_CHUNK};
  double sum = 0.0;
  opt_run(t, &j);
  for (size_t c = 0; c < j.chunks; c++) sum += t->chunk_sums[c];
  const double norm = sqrt(sum);
  if (!isfinite(norm)) return norm; /* the caller stops: the weights stay as they are */
  j.pass = 2, j.coef = clip_coef(norm, t->o.clip);
  opt_run(t, &j);
  return norm;
}

int ff_train_optimizer_init(ff_trainer *t, ff_error *err) {
  const size_t chunks = (t->p.numel + OPT_CHUNK - 1) / OPT_CHUNK;
  if (!(t->chunk_sums = calloc(chunks + 1, sizeof *t->chunk_sums)))
    return ff_fail(err, FF_ENOMEM, "out of memory for the optimizer's %zu chunks", chunks);
  return 0;
}

void ff_train_optimizer_free(ff_trainer *t) {
  if (t->pool) ff_pool_free(t->pool);
  free(t->chunk_sums);
  t->pool = NULL, t->chunk_sums = NULL;
}
