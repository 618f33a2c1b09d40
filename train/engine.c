/* engine.c - the engines a trainer computes its loss and gradient with:
 * the reference runtime (ff_rt_loss_and_grad, a batch's sequences over
 * threads) or generated training code (host/train_engine.c) behind the same
 * function; and the memory a run takes on the runtime. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "codegen.h"
#include "train_internal.h"

typedef struct {
  ff_rt_model m;     /* weights pointing into the params last given */
  const float *bound;
  int threads;
  size_t numel;
  float *grads;      /* threads - 1 gradients of numel floats (thread 0 adds into the caller's) */
} runtime_engine;

typedef struct {
  runtime_engine *e;
  ff_train_batch b;
  const ff_train_step_opts *o;
  float *grad;
  double loss;
  int64_t tokens;
  int rc;
  ff_error err;
} part;

static void *run_part(void *arg) {
  part *p = arg;
  p->rc = ff_rt_loss_and_grad(&p->e->m, &p->b, p->o, p->grad, &p->loss, &p->tokens, &p->err);
  return NULL;
}

static int runtime_loss(void *ctx, const float *params, const ff_train_batch *b, const ff_train_step_opts *o,
                        float *grad, double *loss_sum, int64_t *tokens, ff_error *err) {
  runtime_engine *e = ctx;
  const ff_config *c = &e->m.cfg;
  if (params != e->bound) { /* the weights' pointers follow the buffer */
    ff_rt_weights_point(c, params, &e->m.w, e->m.layers);
    e->bound = params;
  }
  int k = e->threads < b->batch ? e->threads : b->batch, encdec = c->arch == FF_ARCH_ENCODER_DECODER;
  if (k <= 1 || !o) return ff_rt_loss_and_grad(&e->m, b, o, grad, loss_sum, tokens, err); /* (!o: its error) */
  part parts[FF_MAX_THREADS];
  pthread_t ids[FF_MAX_THREADS];
  int started[FF_MAX_THREADS] = {0}, rc = 0;
  ff_train_step_opts own = *o; /* the other threads' gradients: their own buffers, written (zeroed once, there) */
  own.set_grad = 1;
  for (int i = 0; i < k; i++) { /* contiguous shares, the first ones a sequence longer */
    int from = (int)((int64_t)b->batch * i / k), to = (int)((int64_t)b->batch * (i + 1) / k);
    parts[i] = (part){e, ff_train_batch_part(b, from, to - from, encdec), i ? &own : o, NULL, 0.0, 0, 0, {0, ""}};
    parts[i].grad = grad && i > 0 ? e->grads + (size_t)(i - 1) * e->numel : grad;
    if (i > 0) started[i] = !pthread_create(&ids[i], NULL, run_part, &parts[i]);
    if (i > 0 && !started[i]) run_part(&parts[i]); /* no thread: here */
  }
  run_part(&parts[0]);
  *loss_sum = 0.0, *tokens = 0;
  for (int i = 0; i < k; i++) {
    if (started[i]) pthread_join(ids[i], NULL);
    if (parts[i].rc && !rc) rc = ff_fail(err, parts[i].rc, "%s", parts[i].err.msg);
    *loss_sum += parts[i].loss, *tokens += parts[i].tokens;
  }
  if (!rc && grad) /* in thread order: the same sums for the same thread count */
    for (int i = 1; i < k; i++)
      for (size_t j = 0; j < e->numel; j++) grad[j] += parts[i].grad[j];
  return rc;
}

static void runtime_release(void *ctx) {
  runtime_engine *e = ctx;
  if (!e) return;
  ff_rt_model_free(&e->m);
  free(e->grads);
  free(e);
}

int ff_train_engine_runtime(const ff_config *c, int threads, ff_train_engine *out, ff_error *err) {
  size_t tensors, numel, bytes;
  memset(out, 0, sizeof *out);
  if (threads < 1 || threads > FF_MAX_THREADS)
    return ff_fail(err, FF_EINVAL, "threads: %d is outside 1..%d", threads, FF_MAX_THREADS);
  if (ff_rt_count_weights(c, &tensors, &numel)) return ff_fail(err, FF_EINVAL, "cannot list the model's weights");
  runtime_engine *e = calloc(1, sizeof *e);
  if (!e) return ff_fail(err, FF_ENOMEM, "out of memory");
  e->threads = threads, e->numel = numel;
  int nl = c->encoder_layers + c->decoder_layers;
  e->m.cfg = *c;
  e->m.layers = calloc((size_t)(nl > 0 ? nl : 1), sizeof *e->m.layers);
  if (!e->m.layers || ff_size_mul(numel, (size_t)(threads - 1) * sizeof(float), &bytes) ||
      (threads > 1 && !(e->grads = malloc(bytes)))) {
    runtime_release(e);
    return ff_fail(err, FF_ENOMEM, "out of memory for %d threads' gradients", threads);
  }
  *out = (ff_train_engine){"runtime", e, runtime_loss, runtime_release, 1};
  return 0;
}

int ff_train_engine_open(ff_model *m, const ff_train_options *o, const ff_train_shape *shape, ff_train_engine *e,
                         ff_error *err) {
  return ff_train_engine_open_on(m, o, shape, NULL, e, err);
}

int ff_train_engine_open_on(ff_model *m, const ff_train_options *o, const ff_train_shape *shape,
                            struct ff_pool *pool, ff_train_engine *e, ff_error *err) {
  if (o->engine == FF_ENGINE_RUNTIME) return ff_train_engine_runtime(ff_model_config(m), o->threads, e, err);
  return ff_train_engine_generated_on(m, (enum ff_engine)o->engine, shape, o->threads, pool, e, err);
}

/* ---- memory ------------------------------------------------------------------------- */

int ff_train_memory_estimate(const ff_config *c, int B, int S, int T, int threads, ff_train_memory *out,
                             ff_error *err) {
  size_t tensors, numel;
  memset(out, 0, sizeof *out);
  if (B < 1 || S < 1 || T < 1 || S > c->max_seq || T > c->max_seq || threads < 1)
    return ff_fail(err, FF_EINVAL, "a batch of %d x %d positions: batch and positions must be >= 1, positions at "
                   "most max_seq %d", B, S > T ? S : T, c->max_seq);
  if (ff_rt_count_weights(c, &tensors, &numel)) return ff_fail(err, FF_EINVAL, "cannot list the model's weights");
  int k = threads < B ? threads : B, encdec = c->arch == FF_ARCH_ENCODER_DECODER;
  out->params = numel * sizeof(float);
  out->grads = numel * sizeof(float) * (size_t)k; /* the step's, and one more per extra thread */
  out->optimizer = 2 * numel * sizeof(float);
  out->activations = ff_rt_train_work_floats(c, S, T) * sizeof(float) * (size_t)k;
  size_t rows = (size_t)B * (size_t)(encdec ? S + 2 * T : 2 * S);
  out->batch = (rows + (size_t)B) * sizeof(int32_t);
  out->assumes = "the runtime engine: one sequence at a time per thread, each sub-layer's input kept and its "
                 "activations recomputed in the backward pass, so activations do not grow with the batch";
  return 0;
}
