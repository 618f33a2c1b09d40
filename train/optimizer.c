/* optimizer.c - AdamW as torch.optim.AdamW computes it (its single-tensor
 * path, in float32 with the scalars it derives in double), and gradient
 * clipping as torch.nn.utils.clip_grad_norm_. */
#include <math.h>

#include "fixformer_train.h"

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

double ff_clip_grad_norm(float *g, size_t n, double max_norm) {
  double sum = 0.0;
  for (size_t i = 0; i < n; i++) sum += (double)g[i] * g[i];
  double norm = sqrt(sum), coef = max_norm / (norm + 1e-6);
  if (max_norm > 0.0 && coef < 1.0) /* clamp(max=1): a factor of 1 changes nothing */
    for (size_t i = 0; i < n; i++) g[i] *= (float)coef;
  return norm;
}
