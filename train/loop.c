/* loop.c - the trainer: parameters and AdamW's state, the data split and
 * its order, one optimizer step (micro-batches through the engine, the mean
 * gradient, clipping, AdamW with its groups, the schedule), evaluation on
 * the held-out samples, and the loop with its checkpoints.  Over several
 * ranks (mpi.c) each computes its contiguous part of every batch and the
 * parts' sums are added; every rank then takes the same AdamW step. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codegen.h"
#include "train_internal.h"

#define IGNORE (-100)
/* the generator's tags: the held-out split, then each epoch's order */
#define TAG_SPLIT 1
#define TAG_EPOCH 2

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int by_value(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

int ff_train_history_reserve(ff_trainer *t, int64_t steps, ff_error *err) {
  float *h = realloc(t->history, ((size_t)steps + 1) * 4 * sizeof *h);
  if (!h) return ff_fail(err, FF_ENOMEM, "out of memory for the loss history");
  t->history = h;
  return 0;
}

int ff_train_valid_add(ff_trainer *t, ff_train_valid_point v, ff_error *err) {
  if (t->n_valid == t->cap_valid) {
    int cap = t->cap_valid ? 2 * t->cap_valid : 16;
    ff_train_valid_point *p = realloc(t->valid, (size_t)cap * sizeof *p);
    if (!p) return ff_fail(err, FF_ENOMEM, "out of memory");
    t->valid = p, t->cap_valid = cap;
  }
  t->valid[t->n_valid++] = v;
  return 0;
}

void ff_trainer_free(ff_trainer *t) {
  if (!t) return;
  if (t->engine.release) t->engine.release(t->engine.ctx);
  ff_rt_model_free(&t->eval);
  ff_rt_params_free(&t->p);
  ff_train_optimizer_free(t);
  free(t->grad), free(t->exp_avg), free(t->exp_avg_sq), free(t->decay);
  ff_train_data_free(&t->data);
  free(t->train_idx), free(t->held_idx), free(t->epoch_perm), free(t->step_idx);
  ff_train_batch_buf_free(&t->bb);
  free(t->history), free(t->valid);
  free(t);
}

/* AdamW's groups: which tensors decay (docs/training.md, "Parameter groups") */
static void decay_groups(ff_trainer *t) {
  unsigned nd = t->o.no_decay;
  for (int i = 0; i < t->p.count; i++) {
    const ff_rt_param *q = &t->p.tensors[i];
    t->decay[i] = !((q->is_bias && (nd & FF_NO_DECAY_BIAS)) || (q->is_norm && (nd & FF_NO_DECAY_NORM)) ||
                    (q->is_embedding && (nd & FF_NO_DECAY_EMBEDDING)));
  }
}

/* held out: the first holdout samples of a seeded permutation; training: the
 * rest; both in file order (each epoch shuffles the training ones again) */
static int split(ff_trainer *t, const char *path, ff_error *err) {
  int64_t n = t->data.count, h = t->o.holdout;
  if (h >= n)
    return ff_fail(err, FF_EINVAL, "holdout: %lld of the %lld samples of %s leaves none to train on", (long long)h,
                   (long long)n, path);
  int64_t *perm = malloc((size_t)n * sizeof *perm);
  t->held_idx = malloc(((size_t)h + 1) * sizeof *t->held_idx);
  t->train_idx = malloc((size_t)(n - h) * sizeof *t->train_idx);
  t->epoch_perm = malloc((size_t)(n - h) * sizeof *t->epoch_perm);
  if (!perm || !t->held_idx || !t->train_idx || !t->epoch_perm) {
    free(perm);
    return ff_fail(err, FF_ENOMEM, "out of memory for %lld samples", (long long)n);
  }
  ff_train_shuffle(perm, n, t->o.seed, TAG_SPLIT, 0);
  memcpy(t->held_idx, perm, (size_t)h * sizeof *perm);
  memcpy(t->train_idx, perm + h, (size_t)(n - h) * sizeof *perm);
  free(perm);
  qsort(t->held_idx, (size_t)h, sizeof *t->held_idx, by_value);
  qsort(t->train_idx, (size_t)(n - h), sizeof *t->train_idx, by_value);
  t->n_held = h, t->n_train = n - h, t->perm_epoch = -1;
  return 0;
}

ff_trainer *ff_trainer_new(ff_model *m, const char *data_path, const ff_train_options *o, ff_error *err) {
  if (!m || !data_path || !o) {
    ff_fail(err, FF_EINVAL, "ff_trainer_new: m, data_path and o must not be NULL");
    return NULL;
  }
  if (ff_train_options_check(o, err)) return NULL;
  ff_trainer *t = calloc(1, sizeof *t);
  if (!t) {
    ff_fail(err, FF_ENOMEM, "out of memory");
    return NULL;
  }
  t->model = m, t->c = ff_model_config(m), t->o = *o;
  /* the schedule's settings as they act: what a checkpoint records, so that runs
   * that act alike record alike (a cosine run's horizon is fixed when it starts) */
  if (o->schedule != FF_SCHEDULE_COSINE) t->o.decay_steps = 0, t->o.min_lr = 0.0;
  else if (!o->decay_steps) t->o.decay_steps = o->steps;
  if (o->schedule == FF_SCHEDULE_CONSTANT) t->o.warmup = 0;
  int B = o->batch, micro = o->micro_batch ? o->micro_batch : B;
  int rc = ff_rt_params_layout(&t->p, t->c, err);
  if (!rc) rc = ff_train_data_load(&t->data, t->c, data_path, o, err);
  t->ranks = ff_train_ranks(&t->rank);
  if (!rc) { /* generated code's shapes: a micro-batch (of a rank's part at most) of the data's longest sample */
    int part = (int)((B + (int64_t)t->ranks - 1) / t->ranks);
    ff_train_shape shape = {micro < part ? micro : part, t->data.max_src, t->data.max_tgt, o->recompute};
    if (o->threads > 1 && !(t->pool = ff_pool_new(o->threads)))
      rc = ff_fail(err, FF_ENOMEM, "cannot start %d threads", o->threads);
    else /* one pool for the optimizer step (optimizer.c) and a generated engine */
      rc = ff_train_engine_open_on(m, o, &shape, t->pool, &t->engine, err);
  }
  if (!rc) rc = split(t, data_path, err);
  if (!rc) rc = ff_train_batch_buf_init(&t->bb, &t->data, micro, err);
  if (!rc) rc = ff_rt_params_bind(&t->p, &t->eval, err);
  if (!rc) rc = ff_train_history_reserve(t, o->steps, err);
  if (!rc) {
    size_t n = t->p.numel + 1;
    t->grad = ff_rt_calloc64(n, sizeof *t->grad);
    t->exp_avg = ff_rt_calloc64(n, sizeof *t->exp_avg);
    t->exp_avg_sq = ff_rt_calloc64(n, sizeof *t->exp_avg_sq);
    t->decay = calloc((size_t)t->p.count + 1, 1);
    t->step_idx = malloc((size_t)B * sizeof *t->step_idx);
    if (!t->grad || !t->exp_avg || !t->exp_avg_sq || !t->decay || !t->step_idx)
      rc = ff_fail(err, FF_ENOMEM, "out of memory for the gradient and AdamW's moments (%zu parameters)", t->p.numel);
  }
  if (!rc) rc = ff_train_optimizer_init(t, err);
  if (rc) {
    ff_trainer_free(t);
    return NULL;
  }
  decay_groups(t);
  ff_lr_schedule_init(&t->sched, o, t->c->d_model);
  return t;
}

int ff_trainer_set_engine(ff_trainer *t, const ff_train_engine *e, ff_error *err) {
  if (!t || !e || !e->loss_and_grad) return ff_fail(err, FF_EINVAL, "ff_trainer_set_engine: no engine");
  if (t->engine.release) t->engine.release(t->engine.ctx);
  t->engine = *e;
  return 0;
}

int ff_trainer_init(ff_trainer *t, const char *weights_path, ff_error *err) {
  if (weights_path) {
    int rc = ff_rt_params_load(&t->p, weights_path, err);
    if (rc) return rc;
  } else {
    ff_rt_params_init(&t->p, t->o.seed, t->o.init == FF_TRAIN_INIT_TORCH ? FF_RT_INIT_TORCH : FF_RT_INIT_TRANSFORMER);
  }
  t->initialized = 1;
  return 0;
}

void ff_trainer_samples(const ff_trainer *t, int64_t *train, int64_t *held_out) {
  if (train) *train = t->n_train;
  if (held_out) *held_out = t->n_held;
}

int64_t ff_trainer_stream_index(ff_trainer *t, int64_t i) {
  int64_t epoch = i / t->n_train;
  if (epoch != t->perm_epoch) {
    ff_train_shuffle(t->epoch_perm, t->n_train, t->o.seed, TAG_EPOCH, (uint64_t)epoch);
    t->perm_epoch = epoch;
  }
  return t->train_idx[t->epoch_perm[i % t->n_train]];
}

int64_t ff_trainer_held_out_index(const ff_trainer *t, int64_t i) {
  return i >= 0 && i < t->n_held ? t->held_idx[i] : -1;
}

int64_t ff_trainer_steps_done(const ff_trainer *t) { return t->step; }

float *ff_trainer_params(ff_trainer *t, size_t *numel) {
  if (numel) *numel = t->p.numel;
  return t->p.data;
}

static int stopped(const ff_trainer *t) { return t->stop && *t->stop; }

/* the first of rank r's share of n items: contiguous, the first ranks one longer */
static int64_t share(int64_t n, int r, int ranks) { return n * r / ranks; }

/* every rank's status (one rank alone: rc) */
static int agree(const ff_trainer *t, int rc, ff_error *err) {
  return t->ranks > 1 ? ff_train_mpi_agree(rc, err) : rc;
}

/* Loss (and, grad not NULL, its gradient: the first micro-batch's written,
 * with an engine that sets_grad, else added into zeros; the others' added)
 * over samples idx[0..n) in micro-batches padded to S x T (0: each its
 * own), idx[0] sequence `base` of the step's batch: sums */
static int pass(ff_trainer *t, const int64_t *idx, int64_t n, int64_t base, int S, int T,
                const ff_train_step_opts *so, float *grad, double *loss, int64_t *tokens, ff_error *err) {
  int micro = t->o.micro_batch ? t->o.micro_batch : t->o.batch;
  ff_train_step_opts o = *so;
  *loss = 0.0, *tokens = 0;
  if (grad && (n == 0 || !t->engine.sets_grad)) memset(grad, 0, t->p.numel * sizeof *grad);
  for (int64_t first = 0; first < n; first += micro) {
    if (grad && stopped(t)) return FF_EINTR; /* (an evaluation, short, always ends) */
    int k = n - first < micro ? (int)(n - first) : micro;
    ff_train_batch b;
    double l;
    int64_t c;
    ff_train_data_batch(&t->data, idx + first, k, (int)(base + first), S, T, &t->bb, &b);
    o.set_grad = first == 0 && t->engine.sets_grad; /* no pass zeroes the gradient first */
    int rc = t->engine.loss_and_grad(t->engine.ctx, t->p.data, &b, &o, grad, &l, &c, err);
    if (rc) return rc;
    *loss += l, *tokens += c;
  }
  return 0;
}

int ff_trainer_step(ff_trainer *t, ff_train_report *r, ff_error *err) {
  if (!t->initialized)
    return ff_fail(err, FF_EINVAL, "ff_trainer_step: no weights yet (ff_trainer_init or ff_trainer_resume)");
  double start = now_s(), loss;
  int64_t tokens, B = t->o.batch;
  int S, T;
  for (int64_t k = 0; k < B; k++) t->step_idx[k] = ff_trainer_stream_index(t, t->consumed + k);
  /* every part padded as the whole batch: dropout's element indices count over that shape */
  ff_train_data_shape(&t->data, t->step_idx, B, &S, &T);
  ff_train_step_opts so = {(float)t->o.label_smoothing, IGNORE, (float)t->o.dropout, t->o.seed, (uint64_t)t->step, 0};
  int64_t from = share(B, t->rank, t->ranks), to = share(B, t->rank + 1, t->ranks);
  int rc = stopped(t) ? FF_EINTR
                      : pass(t, t->step_idx + from, to - from, from, S, T, &so, t->grad, &loss, &tokens, err);
  if (rc == FF_EINTR) rc = ff_fail(err, FF_EINTR, "stopped");
  if (t->ranks > 1 && !(rc = ff_train_mpi_agree(rc, err))) { /* a stop or a failure anywhere: all stop here */
    double v[2] = {loss, (double)tokens};
    ff_train_sum_doubles(v, 2);
    ff_train_sum_floats(t->grad, t->p.numel);
    loss = v[0], tokens = (int64_t)v[1];
  }
  if (rc) return rc;
  if (tokens == 0)
    return ff_fail(err, FF_EINVAL, "step %lld: the batch has no labelled tokens", (long long)t->step + 1);
  /* the mean over the step's tokens, as CrossEntropyLoss(reduction='mean') over the whole batch,
   * clipped, AdamW (optimizer.c; not when the loss or the gradient is not finite) */
  double lr = t->sched.lr, norm = isfinite(loss) ? ff_train_optimize(t, (float)(1.0 / (double)tokens), lr) : NAN;
  if (!isfinite(norm) || !isfinite(loss))
    return ff_fail(err, FF_EINVAL,
                   "step %lld: the %s is not finite (lr %g too high?); the weights are as after step %lld",
                   (long long)t->step + 1, isfinite(loss) ? "gradient" : "loss", t->sched.lr, (long long)t->step);
  ff_lr_schedule_step(&t->sched);
  float *row = t->history + (size_t)t->step * 4;
  row[0] = (float)(loss / (double)tokens), row[1] = (float)lr, row[2] = (float)norm, row[3] = (float)tokens;
  t->step++;
  t->consumed += B;
  if (r) {
    memset(r, 0, sizeof *r);
    r->step = t->step, r->steps = t->o.steps, r->loss = loss / (double)tokens, r->lr = lr, r->grad_norm = norm;
    r->tokens = tokens, r->seconds = now_s() - start, r->valid_exact = -1.0;
  }
  return 0;
}

/* ---- evaluation --------------------------------------------------------------------------- */

static int argmax(const float *x, int n) {
  int best = 0;
  for (int i = 1; i < n; i++)
    if (x[i] > x[best]) best = i;
  return best;
}

/* greedy decoding of held-out pair i from BOS: 1 if it gives the target and then EOS */
static int decode_exact(ff_trainer *t, ff_rt_state *s, float *logits, int64_t i, int *exact, ff_error *err) {
  const int32_t *src, *tgt;
  int ns, nt, rc = 0;
  ff_train_data_pair(&t->data, i, &src, &ns, &tgt, &nt);
  if ((rc = ff_rt_begin(s, src, NULL, ns, ns, err))) return rc;
  int32_t tok = t->data.bos;
  *exact = 0;
  for (int k = 0; k <= nt; k++) { /* position k predicts target k, or EOS after the last */
    if ((rc = ff_rt_step(s, &tok, NULL, 1, logits, err))) return rc;
    tok = argmax(logits, t->c->vocab);
    if (k == nt) *exact = tok == t->data.eos;
    if (tok != (k < nt ? tgt[k] : t->data.eos)) break;
  }
  return 0;
}

int ff_trainer_evaluate(ff_trainer *t, double *loss, double *exact, ff_error *err) {
  *loss = NAN, *exact = -1.0;
  if (!t->n_held) return ff_fail(err, FF_EINVAL, "no held-out samples to evaluate (holdout 0)");
  ff_train_step_opts so = {(float)t->o.label_smoothing, IGNORE, 0.0f, t->o.seed, (uint64_t)t->step, 0};
  /* over ranks each its share of the held-out samples and of the pairs decoded, the counts summed */
  int64_t from = share(t->n_held, t->rank, t->ranks), to = share(t->n_held, t->rank + 1, t->ranks);
  double v[3] = {0.0, 0.0, 0.0}; /* loss sum, tokens, pairs right */
  int64_t tokens;
  int rc = pass(t, t->held_idx + from, to - from, 0, 0, 0, &so, NULL, &v[0], &tokens, err);
  v[1] = (double)tokens;
  int exact_too = t->data.format == FF_DATA_PAIRS && t->o.eval_exact != 0;
  int64_t n = t->o.eval_exact < 0 || t->o.eval_exact > t->n_held ? t->n_held : t->o.eval_exact;
  if (!rc && exact_too) {
    ff_rt_state s;
    ff_rt_model folded; /* the parameters as they are now, the folded kinds folded (runtime/fold.c) */
    float *logits = malloc((size_t)t->c->vocab * sizeof *logits);
    if (!logits) rc = ff_fail(err, FF_ENOMEM, "out of memory");
    else if (!(rc = ff_rt_model_folded(&t->eval, &folded, err)) && !(rc = ff_rt_state_init(&s, &folded, err))) {
      for (int64_t i = share(n, t->rank, t->ranks); i < share(n, t->rank + 1, t->ranks) && !rc; i++) {
        int ok;
        if (!(rc = decode_exact(t, &s, logits, t->held_idx[i], &ok, err))) v[2] += ok;
      }
      ff_rt_state_free(&s);
    }
    if (logits) ff_rt_model_free(&folded);
    free(logits);
  }
  if ((rc = agree(t, rc, err))) return rc;
  if (t->ranks > 1) ff_train_sum_doubles(v, 3);
  *loss = v[1] > 0 ? v[0] / v[1] : NAN;
  if (exact_too) *exact = v[2] / (double)n;
  return 0;
}

/* ---- the loop ------------------------------------------------------------------------------ */

static int evaluate_now(const ff_trainer *t) {
  return t->n_held && ((t->o.eval_every && t->step % t->o.eval_every == 0) || t->step == t->o.steps);
}

static uint64_t hash_words(uint64_t h, const void *p, size_t bytes) {
  const unsigned char *b = p;
  for (size_t i = 0; i < bytes; i += 8) {
    uint64_t w = 0;
    memcpy(&w, b + i, bytes - i < 8 ? bytes - i : 8);
    h = ff_dropout_mix(h ^ w) + FF_DROPOUT_GOLDEN;
  }
  return h;
}

/* Over ranks, 0 if every rank holds the same run (what, when it fails: the
 * weights diverged, or the ranks were given other files or options). */
static int same_run(ff_trainer *t, int weights_only, const char *what, ff_error *err) {
  if (t->ranks == 1) return 0;
  size_t bytes = t->p.numel * sizeof(float);
  uint64_t h = hash_words(0, t->p.data, bytes);
  h = hash_words(h, t->exp_avg, bytes), h = hash_words(h, t->exp_avg_sq, bytes);
  int64_t where[2] = {t->step, t->consumed};
  h = hash_words(h, where, sizeof where);
  char *options = weights_only ? NULL : ff_train_options_text(&t->o);
  if (!weights_only) {
    h = hash_words(h, t->data.sha256, sizeof t->data.sha256);
    h = options ? hash_words(h, options, strlen(options)) : h + 1; /* (out of memory: differs, says so) */
  }
  free(options);
  if (ff_train_same(h)) return 0;
  return ff_fail(err, FF_EINVAL, "the %d ranks %s", t->ranks, what);
}

/* The ranks' weights checked to be equal; then (path not NULL) rank 0
 * writes the checkpoint and every rank learns how that went. */
static int checkpoint(ff_trainer *t, const char *path, ff_error *err) {
  int rc = same_run(t, 1, "hold different weights (the sum of the gradients differs between them)", err);
  if (rc || !path) return rc;
  return agree(t, ff_trainer_save_checkpoint(t, path, err), err);
}

int ff_trainer_run(ff_trainer *t, const ff_train_run *run, ff_error *err) {
  int rc = 0;
  t->stop = run ? run->stop : NULL;
  const char *ckpt = run ? run->checkpoint : NULL;
  if (t->o.steps > t->step) rc = ff_train_history_reserve(t, t->o.steps, err);
  if ((rc = agree(t, rc, err)) ||
      (rc = same_run(t, 0, "start from different weights, data, step or options (every rank must be given the "
                     "same files and flags)", err)))
    return rc;
  while (!rc && t->step < t->o.steps) {
    ff_train_report r; /* (a stop is the step's: over ranks they agree on it there) */
    if ((rc = ff_trainer_step(t, &r, err))) break;
    if (evaluate_now(t)) {
      if ((rc = ff_trainer_evaluate(t, &r.valid_loss, &r.valid_exact, err))) break;
      r.evaluated = 1;
      ff_train_valid_point v = {(float)t->step, (float)r.valid_loss, (float)r.valid_exact};
      rc = agree(t, ff_train_valid_add(t, v, err), err);
    }
    if (run && run->report) run->report(run->ctx, &r);
    if (!rc && ckpt && t->o.save_every && t->step % t->o.save_every == 0 && t->step < t->o.steps)
      rc = checkpoint(t, ckpt, err);
  }
  if (rc == FF_EINTR || !rc) { /* the last completed step, also when stopped */
    int stop = rc == FF_EINTR;
    if ((rc = checkpoint(t, ckpt, err))) return rc;
    if (stop)
      return ff_fail(err, FF_EINTR, "stopped after step %lld of %lld%s%s", (long long)t->step, (long long)t->o.steps,
                     ckpt ? "; checkpoint written to " : "", ckpt ? ckpt : "");
  }
  return rc;
}
