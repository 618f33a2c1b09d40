/* optimizer.c - AdamW as torch.optim.AdamW computes it (its single-tensor
 * path, in float32 with the scalars it derives in double), and gradient
 * clipping as torch.nn.utils.clip_grad_norm_; the trainer's step of them on
 * its threads. */
#include <math.h>
#include <stdlib.h>

#include "codegen.h"
#include "fixformer_train.h"
#include "train_internal.h"

void ff_adamw_update(float *p, const float *g, float *m, float *v, size_t n, int64_t step, const ff_adamw *h) {
  /* the scalars as torch derives them (Python floats), then float32 element-wise */
  float decay = (float)(1.0 - h->lr * h->weight_decay);
  float b1 = (float)h->beta1, b2 = (float)h->beta2, a1 = (float)(1.0 - h->beta1), a2 = (float)(1.0 - h->beta2);
  double bc1 = 1.0 - pow(h->beta1, (double)step), bc2 = 1.0 - pow(h->beta2, (double)step);
  float neg_step = (float)-(h->lr / bc1), bc2_sqrt = (float)sqrt(bc2), eps = (float)h->eps;
  for (size_t i = 0; i < n; i++) {
    float gi = g[i];
    p[i] *= decay;                          /* param.mul_(1 - lr * weight_decay) */
    m[i] = m[i] * b1 + a1 * gi;             /* exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1) */
    v[i] = v[i] * b2 + a2 * gi * gi;        /* exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2) */
    float denom = sqrtf(v[i]) / bc2_sqrt + eps; /* (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps) */
    p[i] += neg_step * m[i] / denom;        /* param.addcdiv_(exp_avg, denom, value=-step_size) */
  }
}

/* clip_grad_norm_'s factor for a gradient of L2 norm norm: max_norm / (norm + 1e-6),
 * clamped to 1 (a factor of 1 changes nothing: the caller skips it); max_norm <= 0: 1 */
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
 * of squares (added in chunk order) and the calls of ff_adamw_update are the
 * same whatever the thread count: the same bits on 1 thread as on 8. */
#define OPT_CHUNK 16384

typedef struct {
  ff_trainer *t;
  float scale, coef;
  double lr;
  int pass, n; /* pass 1: scale, sums of squares; pass 2: clip, AdamW */
  size_t chunks;
} opt_job;

static void opt_chunk(const opt_job *j, size_t c) {
  ff_trainer *t = j->t;
  const size_t e0 = c * OPT_CHUNK, e1 = e0 + OPT_CHUNK < t->p.numel ? e0 + OPT_CHUNK : t->p.numel;
  float *g = t->grad;
  if (j->pass == 1) {
    double sum = 0.0;
    for (size_t i = e0; i < e1; i++) g[i] *= j->scale, sum += (double)g[i] * g[i];
    t->chunk_sums[c] = sum;
    return;
  }
  for (size_t i = e0; j->coef < 1.0f && i < e1; i++) g[i] *= j->coef;
  for (int k = 0; k < t->p.count; k++) { /* the tensors the chunk holds a part of */
    const ff_rt_param *q = &t->p.tensors[k];
    const size_t a = q->offset > e0 ? q->offset : e0, b = q->offset + q->numel < e1 ? q->offset + q->numel : e1;
    if (a >= b) continue;
    ff_adamw h = {j->lr, t->o.beta1, t->o.beta2, t->o.eps, t->decay[k] ? t->o.weight_decay : 0.0};
    ff_adamw_update(t->p.data + a, g + a, t->exp_avg + a, t->exp_avg_sq + a, b - a, t->step + 1, &h);
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
  if (t->o.threads > 1 && !(t->pool = ff_pool_new(t->o.threads)))
    return ff_fail(err, FF_ENOMEM, "cannot start %d threads for the optimizer", t->o.threads);
  return 0;
}

void ff_train_optimizer_free(ff_trainer *t) {
  if (t->pool) ff_pool_free(t->pool);
  free(t->chunk_sums);
  t->pool = NULL, t->chunk_sums = NULL;
}
