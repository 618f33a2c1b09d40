/* optimizer.c - AdamW as torch.optim.AdamW computes it (its single-tensor
 * path, in float32 with the scalars it derives in double), and gradient
 * clipping as torch.nn.utils.clip_grad_norm_; the trainer's step of them on
 * its threads. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>

#include "codegen.h"
#include "fixformer_train.h"
#include "train_internal.h"

/* AdamW's step and the clipping's sum of squares are the kernel library's (kernels/train.c:
 * generated training code calls the same), the host's build for ff_host_isa(): with AVX 8
 * elements a turn, the bits of the plain loop that FIXFORMER_ISA=generic takes (the tests
 * compare the two); looked up once, whichever of the optimizer's threads asks first */
typedef void (*adamw_fn)(float *p, const float *g, float *m, float *v, size_t n, int64_t step, double lr,
                         double beta1, double beta2, double eps, double weight_decay, float gscale, float gcoef);
typedef double (*sum_squares_fn)(const float *g, size_t n, float scale);
static adamw_fn adamw_kernel;
static sum_squares_fn sum_squares_kernel;
static pthread_once_t kernels_once = PTHREAD_ONCE_INIT;
static void kernels_find(void) {
  adamw_kernel = (adamw_fn)ff_native_kernel("adamw");
  sum_squares_kernel = (sum_squares_fn)ff_native_kernel("sum_squares");
}

static void adamw_run(float *p, const float *g, float *m, float *v, size_t n, int64_t step, const ff_adamw *h,
                      float gscale, float gcoef) {
  pthread_once(&kernels_once, kernels_find);
  adamw_kernel(p, g, m, v, n, step, h->lr, h->beta1, h->beta2, h->eps, h->weight_decay, gscale, gcoef);
}

/* The sum of the squares of g [n] scale (each rounded to float, as grad.mul_(scale) stores it)
 * in double, in the kernel's fixed order (lane i mod 8); g is only read: AdamW scales it again
 * as it reads it (the same floats), one pass less over it. */
static double scaled_squares(const float *g, size_t n, float scale) {
  pthread_once(&kernels_once, kernels_find);
  return sum_squares_kernel(g, n, scale);
}

void ff_adamw_update(float *p, const float *g, float *m, float *v, size_t n, int64_t step, const ff_adamw *h) {
  adamw_run(p, g, m, v, n, step, h, 1.0f, 1.0f);
}

/* clip_grad_norm_'s factor for a gradient of L2 norm norm: max_norm / (norm + 1e-6),
 * clamped to 1 (a factor of 1 changes nothing); max_norm <= 0: 1 */
static float clip_coef(double norm, double max_norm) {
  const double coef = max_norm / (norm + 1e-6);
  return max_norm > 0.0 && coef < 1.0 ? (float)coef : 1.0f;
}

/* Elements a unit of the step's work: fixed, so that the chunks, their sums
 * of squares (added in chunk order) and the calls of adamw_run are the
 * same whatever the thread count: the same bits on 1 thread as on 8. */
#define OPT_CHUNK 16384

/* The L2 norm of g [n] scale, its squares summed chunk by chunk as the trainer's step sums them */
static double chunked_norm(const float *g, size_t n, float scale) {
  double sum = 0.0;
  for (size_t e0 = 0; e0 < n; e0 += OPT_CHUNK)
    sum += scaled_squares(g + e0, n - e0 < OPT_CHUNK ? n - e0 : OPT_CHUNK, scale);
  return sqrt(sum);
}

double ff_clip_grad_norm(float *g, size_t n, double max_norm) {
  const double norm = chunked_norm(g, n, 1.0f);
  const float coef = clip_coef(norm, max_norm);
  for (size_t i = 0; coef < 1.0f && i < n; i++) g[i] *= coef;
  return norm;
}

/* ---- the trainer's optimizer step, in chunks on its threads ---------------------------------- */

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
    adamw_run(t->p.data + a, g + a, t->exp_avg + a, t->exp_avg_sq + a, b - a, t->step + 1, &h, j->scale, j->coef);
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
