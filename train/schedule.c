/* schedule.c - learning rates per step, the values torch's schedulers give
 * (docs/training.md has the PyTorch each equals), computed the way they
 * compute them: the chainable ones (LinearLR, CosineAnnealingLR) update the
 * previous value, so that every step's value is theirs to the last bit. */
#include <math.h>

#include "fixformer_train.h"

#define PI 3.141592653589793 /* math.pi */

/* LambdaLR(lambda k: d ** -0.5 * min((k + 1) ** -0.5, (k + 1) * warmup ** -1.5)) */
static double noam(const ff_lr_schedule *s, int64_t k) {
  double step = (double)(k + 1), a = pow(step, -0.5), b = step * pow((double)s->warmup, -1.5);
  return s->base * (pow(s->d_model, -0.5) * (a < b ? a : b));
}

void ff_lr_schedule_init(ff_lr_schedule *s, const ff_train_options *o, int d_model) {
  s->kind = o->schedule;
  s->base = o->lr, s->min_lr = o->min_lr, s->d_model = d_model;
  s->warmup = o->warmup;
  s->t_max = (o->decay_steps ? o->decay_steps : o->steps) - o->warmup;
  s->start_factor = o->warmup > 0 ? 1.0 / o->warmup : 1.0;
  s->step = 0;
  if (s->kind == FF_SCHEDULE_NOAM) s->lr = noam(s, 0);
  else if (s->kind == FF_SCHEDULE_COSINE && s->warmup > 0) s->lr = s->base * s->start_factor; /* LinearLR's first */
  else s->lr = s->base;
}

/* CosineAnnealingLR.get_lr at its last_epoch e >= 1 (chainable form) */
static double cosine(const ff_lr_schedule *s, int64_t e) {
  double T = s->t_max, lo = s->min_lr;
  int64_t period = 2 * (int64_t)s->t_max, r = ((e - 1 - s->t_max) % period + period) % period;
  if (r == 0) return s->lr + (s->base - lo) * (1 - cos(PI / T)) / 2;
  return (1 + cos(PI * (double)e / T)) / (1 + cos(PI * (double)(e - 1) / T)) * (s->lr - lo) + lo;
}

void ff_lr_schedule_step(ff_lr_schedule *s) {
  int64_t k = ++s->step;
  if (s->kind == FF_SCHEDULE_NOAM) {
    s->lr = noam(s, k);
  } else if (s->kind == FF_SCHEDULE_COSINE) {
    int64_t W = s->warmup;
    if (k < W) { /* LinearLR.get_lr, end_factor 1 */
      double df = 1.0 - s->start_factor;
      s->lr = s->lr * (1.0 + df / ((double)W * s->start_factor + (double)(k - 1) * df));
    } else if (k == W) { /* SequentialLR's milestone: CosineAnnealingLR.step(0), the closed form at 0 */
      s->lr = s->min_lr + (s->base - s->min_lr) * (1 + cos(PI * 0.0 / s->t_max)) / 2;
    } else {
      s->lr = cosine(s, k - W);
    }
  }
}
