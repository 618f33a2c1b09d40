/* train_tool.c - for tests/train_grad.py: ff_rt_loss_and_grad on a
 * description, a weights file and a batch of .npy files (int32 or int64).
 *
 *   train_tool MODEL.lua WEIGHTS.safetensors OUT_DIR --src F --labels F [--lengths F] [--tgt F]
 *              [--smoothing S] [--ignore I] [--dropout P] [--seed N] [--step N] [--first N]
 *              [--micro N] [--masks] [--fd N] [--fd-eps E]
 *
 * Writes OUT_DIR/loss.txt ("LOSS_SUM TOKENS"), OUT_DIR/grad.safetensors (the
 * gradient of LOSS_SUM, PyTorch's names), OUT_DIR/params.safetensors (the
 * flat buffer as read, written back) and OUT_DIR/layout.txt (a line a
 * tensor: "NAME OFFSET NUMEL IS_BIAS IS_NORM IS_EMBEDDING"); --micro N: the batch as
 * micro-batches of N sequences accumulated into one gradient (first counting
 * on); --masks: OUT_DIR/masks.safetensors, every dropout site's keep mask
 * over the batch (1 kept, 0 dropped, ff_rt_visit_dropout_sites's names and
 * shapes); --fd N: OUT_DIR/fd.txt, for N coordinates of every tensor "NAME
 * INDEX ANALYTIC CENTRAL_DIFFERENCE" with step E (default 1e-2); --engine tcc|cc: generated
 * training code (ff_train_engine_generated) instead of the runtime, on --threads N, made for
 * --shape B,S,T (default: the batch's, B the micro-batch), --recompute 1 its sub-layers recomputed
 * in the backward pass; --set-grad: grad filled with NaN and the first (micro-)batch's gradient
 * written into it (opts.set_grad), not added to zeros; --steps N [--lr X] [--weight-decay X]
 * [--clip X]: N AdamW steps on the batch as the trainer takes them, OUT_DIR/params.safetensors the
 * parameters after them (grad.safetensors and loss.txt: the last step's). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ff_rt_train.h"
#include "fixformer.h"
#include "fixformer_train.h"

typedef struct {
  const char *src, *labels, *lengths, *tgt;
  ff_rt_train_opts o;
  int first, micro, masks, fd, set_grad;
  float fd_eps;
  int engine, threads;     /* the runtime, or generated code (tcc, cc) on threads */
  const float *params;     /* the flat parameters (generated code reads them) */
  ff_train_shape shape;    /* generated code's shapes (0: the batch's) */
  ff_train_engine e;       /* when not the runtime */
  int steps;               /* AdamW steps on the batch (0: none) */
  double lr, weight_decay, clip;
} args;

/* an int32 or int64 array of rank `rank` as int32; shape into dims */
static int read_ids(const char *path, int rank, int32_t **out, int64_t *dims, ff_error *err) {
  ff_array a;
  int rc = ff_npy_read(path, &a, err);
  if (rc) return rc;
  if (a.rank != rank || (a.dtype != FF_I32 && a.dtype != FF_I64)) {
    ff_array_free(&a);
    return ff_fail(err, FF_ESHAPE, "%s: want an int32 or int64 array of rank %d", path, rank);
  }
  *out = malloc(a.numel * sizeof **out + 1);
  if (!*out) return ff_array_free(&a), ff_fail(err, FF_ENOMEM, "out of memory");
  for (size_t i = 0; i < a.numel; i++)
    (*out)[i] = a.dtype == FF_I32 ? ((int32_t *)a.data)[i] : (int32_t)((int64_t *)a.data)[i];
  for (int i = 0; i < rank; i++) dims[i] = a.shape[i];
  ff_array_free(&a);
  return FF_OK;
}

typedef struct {
  const args *a;
  int B;
  ff_tensor_view views[512];
  float *data[512];
  int n;
} masks;

static int mask_site(void *ctx, uint32_t site, const char *name, int rank, const int64_t *shape) {
  masks *k = ctx;
  size_t numel = 1;
  for (int i = 0; i < rank; i++) numel *= (size_t)shape[i];
  if (k->n == 512) return FF_ENOMEM;
  float *x = malloc(numel * sizeof *x + 1);
  char *copy = malloc(strlen(name) + 1);
  if (!x || !copy) return free(x), free(copy), FF_ENOMEM;
  strcpy(copy, name);
  uint64_t key = ff_dropout_key(k->a->o.seed, k->a->o.step, site), at = (uint64_t)k->a->first * (numel / k->B);
  uint32_t threshold = ff_dropout_threshold(k->a->o.dropout);
  for (size_t i = 0; i < numel; i++) x[i] = ff_dropout_bits(key, at + i) >= threshold ? 1.0f : 0.0f;
  ff_tensor_view *v = &k->views[k->n];
  k->data[k->n++] = x;
  v->name = copy, v->rank = rank, v->data = x;
  memcpy(v->shape, shape, (size_t)rank * sizeof *shape);
  return 0;
}

static int write_masks(const ff_config *c, const args *a, const ff_rt_batch *b, const char *path, ff_error *err) {
  masks k = {.a = a, .B = b->batch};
  int rc = ff_rt_visit_dropout_sites(c, b->batch, b->src_len, b->tgt_len, mask_site, &k);
  rc = rc ? ff_fail(err, rc, "out of memory for the masks") : ff_safetensors_write(path, k.views, k.n, err);
  for (int i = 0; i < k.n; i++) free((char *)k.views[i].name), free(k.data[i]);
  return rc;
}

static int write_layout(const ff_rt_params *p, const char *out, ff_error *err) {
  char path[4200];
  snprintf(path, sizeof path, "%s/layout.txt", out);
  FILE *f = fopen(path, "w");
  if (!f) return ff_fail(err, FF_EIO, "%s: cannot write", path);
  for (int i = 0; i < p->count; i++) {
    const ff_rt_param *t = &p->tensors[i];
    fprintf(f, "%s %zu %zu %d %d %d\n", t->name, t->offset, t->numel, t->is_bias, t->is_norm, t->is_embedding);
  }
  return fclose(f) ? ff_fail(err, FF_EIO, "%s: cannot write", path) : FF_OK;
}

/* The batch as micro-batches of a->micro sequences (0: one call). */
static int loss_and_grad(const ff_rt_model *m, const ff_rt_batch *b, const args *a, float *grad, double *loss,
                         int64_t *tokens, ff_error *err) {
  int step = a->micro > 0 ? a->micro : b->batch;
  *loss = 0.0, *tokens = 0;
  ff_rt_train_opts o = a->o;
  for (int i = 0; i < b->batch; i += step) {
    o.set_grad = a->set_grad && i == 0;
    ff_rt_batch mb = ff_train_batch_part(b, i, b->batch - i < step ? b->batch - i : step,
                                         m->cfg.arch == FF_ARCH_ENCODER_DECODER);
    double l;
    int64_t k;
    int rc = a->e.loss_and_grad ? a->e.loss_and_grad(a->e.ctx, a->params, &mb, &o, grad, &l, &k, err)
                                : ff_rt_loss_and_grad(m, &mb, &o, grad, &l, &k, err);
    if (rc) return rc;
    *loss += l, *tokens += k;
  }
  return FF_OK;
}

/* Central differences of the loss at a->fd coordinates of every tensor. */
static int finite_differences(ff_rt_params *p, const ff_rt_model *m, const ff_rt_batch *b, const args *a,
                              const float *grad, const char *path, ff_error *err) {
  FILE *f = fopen(path, "w");
  if (!f) return ff_fail(err, FF_EIO, "%s: cannot write", path);
  uint64_t rng = 12345;
  int rc = 0;
  for (int t = 0; t < p->count && !rc; t++) {
    const ff_rt_param *pt = &p->tensors[t];
    for (int j = 0; j < a->fd && !rc; j++) {
      rng = ff_dropout_mix(rng + FF_DROPOUT_GOLDEN);
      size_t i = pt->offset + (size_t)(rng % pt->numel);
      float keep = p->data[i];
      double up = 0.0, down = 0.0;
      int64_t k;
      p->data[i] = keep + a->fd_eps;
      rc = loss_and_grad(m, b, a, NULL, &up, &k, err);
      p->data[i] = keep - a->fd_eps;
      if (!rc) rc = loss_and_grad(m, b, a, NULL, &down, &k, err);
      p->data[i] = keep;
      /* the step actually taken: float rounds keep +- eps */
      double h = (double)(keep + a->fd_eps) - (double)(keep - a->fd_eps);
      fprintf(f, "%s %zu %.9g %.9g\n", pt->name, i - pt->offset, (double)grad[i], (up - down) / h);
    }
  }
  if (fclose(f) && !rc) rc = ff_fail(err, FF_EIO, "%s: cannot write", path);
  return rc;
}

/* grad before a step: zeros, or with set_grad NaN (the step must write every element) */
static void unset(float *grad, size_t n, int set_grad) {
  for (size_t i = 0; i < n; i++) grad[i] = set_grad ? NAN : 0.0f;
}

/* a->steps AdamW steps on the batch as the trainer takes them (the mean gradient, clipping, AdamW with
 * no decay for biases, norms and embeddings, step counting from 1, dropout's step from a->o.step):
 * p->data is updated, grad holds the last step's, loss and tokens its */
static int adamw_steps(ff_rt_params *p, const ff_rt_model *m, const ff_rt_batch *b, args *a, float *grad,
                       double *loss, int64_t *tokens, ff_error *err) {
  float *mo = calloc(p->numel + 1, sizeof *mo), *vo = calloc(p->numel + 1, sizeof *vo);
  int rc = mo && vo ? 0 : ff_fail(err, FF_ENOMEM, "out of memory");
  const uint64_t step0 = a->o.step;
  for (int s = 1; s <= a->steps && !rc; s++) {
    unset(grad, p->numel, a->set_grad);
    a->o.step = step0 + (uint64_t)s - 1;
    if ((rc = loss_and_grad(m, b, a, grad, loss, tokens, err))) break;
    if (!*tokens) rc = ff_fail(err, FF_EINVAL, "the batch has no labelled tokens");
    const float scale = (float)(1.0 / (double)*tokens);
    for (size_t i = 0; !rc && i < p->numel; i++) grad[i] *= scale;
    ff_clip_grad_norm(grad, p->numel, a->clip);
    for (int t = 0; !rc && t < p->count; t++) {
      const ff_rt_param *q = &p->tensors[t];
      const ff_adamw h = {a->lr, 0.9, 0.999, 1e-8, q->is_bias || q->is_norm || q->is_embedding ? 0.0 : a->weight_decay};
      ff_adamw_update(p->data + q->offset, grad + q->offset, mo + q->offset, vo + q->offset, q->numel, s, &h);
    }
  }
  a->o.step = step0;
  free(mo), free(vo);
  return rc;
}

static int run(const char *desc, const char *weights, const char *out, args *a, ff_error *err) {
  ff_model *model = ff_model_open(desc, err);
  if (!model) return FF_EINVAL;
  const ff_config *c = ff_model_config(model);
  ff_rt_params p = {0};
  ff_rt_model m = {0};
  int32_t *src = NULL, *labels = NULL, *lengths = NULL, *tgt = NULL;
  float *grad = NULL;
  int64_t sd[2] = {0}, ld[2] = {0}, nd[1] = {0}, td[2] = {0};
  char path[4200];
  int rc = ff_rt_params_layout(&p, c, err);
  if (!rc) rc = ff_rt_params_load(&p, weights, err);
  if (!rc) rc = ff_rt_params_bind(&p, &m, err);
  if (!rc) rc = read_ids(a->src, 2, &src, sd, err);
  if (!rc) rc = read_ids(a->labels, 2, &labels, ld, err);
  if (!rc && a->lengths) rc = read_ids(a->lengths, 1, &lengths, nd, err);
  if (!rc && a->tgt) rc = read_ids(a->tgt, 2, &tgt, td, err);
  int encdec = c->arch == FF_ARCH_ENCODER_DECODER;
  if (!rc && (ld[0] != sd[0] || ld[1] != (encdec ? td[1] : sd[1]) || (lengths && nd[0] != sd[0]) ||
              (tgt && td[0] != sd[0])))
    rc = ff_fail(err, FF_ESHAPE, "the batch's arrays do not agree in shape");
  if (!rc && !(grad = calloc(p.numel + 1, sizeof *grad))) rc = ff_fail(err, FF_ENOMEM, "out of memory");
  ff_rt_batch b = {(int)sd[0], (int)sd[1], src, lengths, (int)td[1], tgt, labels, a->first};
  args *w = a; /* the engine, made once for the batch's shapes */
  w->params = p.data;
  if (!rc && a->engine != FF_ENGINE_RUNTIME) {
    ff_train_shape shape = {a->shape.batch ? a->shape.batch : (a->micro > 0 ? a->micro : b.batch),
                            a->shape.src ? a->shape.src : b.src_len, a->shape.tgt ? a->shape.tgt : (encdec ? b.tgt_len : 0),
                            a->shape.recompute};
    rc = ff_train_engine_generated(model, (enum ff_engine)a->engine, &shape, a->threads, &w->e, err);
  }
  double loss = 0.0;
  int64_t tokens = 0;
  if (!rc) unset(grad, p.numel, a->set_grad);
  if (!rc) rc = a->steps ? adamw_steps(&p, &m, &b, a, grad, &loss, &tokens, err)
                         : loss_and_grad(&m, &b, a, grad, &loss, &tokens, err);
  if (!rc) {
    snprintf(path, sizeof path, "%s/grad.safetensors", out);
    rc = ff_rt_params_save(&p, grad, path, err);
  }
  if (!rc) {
    snprintf(path, sizeof path, "%s/params.safetensors", out);
    rc = ff_rt_params_save(&p, p.data, path, err);
  }
  if (!rc) rc = write_layout(&p, out, err);
  if (!rc) {
    snprintf(path, sizeof path, "%s/loss.txt", out);
    FILE *f = fopen(path, "w");
    if (!f || fprintf(f, "%.17g %lld\n", loss, (long long)tokens) < 0 || fclose(f))
      rc = ff_fail(err, FF_EIO, "%s: cannot write", path);
  }
  if (!rc && a->masks) {
    snprintf(path, sizeof path, "%s/masks.safetensors", out);
    rc = write_masks(c, a, &b, path, err);
  }
  if (!rc && a->fd > 0) {
    snprintf(path, sizeof path, "%s/fd.txt", out);
    rc = finite_differences(&p, &m, &b, a, grad, path, err);
  }
  if (w->e.release) w->e.release(w->e.ctx);
  free(grad), free(src), free(labels), free(lengths), free(tgt);
  ff_rt_model_free(&m);
  ff_rt_params_free(&p);
  ff_model_close(model);
  return rc;
}

int main(int argc, char **argv) {
  args a = {.o = {.ignore_index = -100}, .fd_eps = 1e-2f, .engine = FF_ENGINE_RUNTIME, .threads = 1, .lr = 1e-3};
  ff_error err = {0, ""};
  if (argc < 4) return fprintf(stderr, "usage: train_tool MODEL.lua WEIGHTS OUT_DIR --src F --labels F [...]\n"), 2;
  for (int i = 4; i < argc; i++) {
    const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int flag = !strcmp(k, "--masks") || !strcmp(k, "--set-grad");
    if (!flag && !v) return fprintf(stderr, "train_tool: %s needs a value\n", k), 2;
    if (flag && !strcmp(k, "--set-grad")) a.set_grad = 1;
    else if (flag) a.masks = 1;
    else if (!strcmp(k, "--src")) a.src = v;
    else if (!strcmp(k, "--labels")) a.labels = v;
    else if (!strcmp(k, "--lengths")) a.lengths = v;
    else if (!strcmp(k, "--tgt")) a.tgt = v;
    else if (!strcmp(k, "--smoothing")) a.o.label_smoothing = strtof(v, NULL);
    else if (!strcmp(k, "--ignore")) a.o.ignore_index = atoi(v);
    else if (!strcmp(k, "--dropout")) a.o.dropout = strtof(v, NULL);
    else if (!strcmp(k, "--seed")) a.o.seed = strtoull(v, NULL, 10);
    else if (!strcmp(k, "--step")) a.o.step = strtoull(v, NULL, 10);
    else if (!strcmp(k, "--first")) a.first = atoi(v);
    else if (!strcmp(k, "--micro")) a.micro = atoi(v);
    else if (!strcmp(k, "--fd")) a.fd = atoi(v);
    else if (!strcmp(k, "--fd-eps")) a.fd_eps = strtof(v, NULL);
    else if (!strcmp(k, "--engine") && ff_engine_parse(v) >= 0) a.engine = ff_engine_parse(v);
    else if (!strcmp(k, "--threads")) a.threads = atoi(v);
    else if (!strcmp(k, "--shape")) sscanf(v, "%d,%d,%d", &a.shape.batch, &a.shape.src, &a.shape.tgt);
    else if (!strcmp(k, "--recompute")) a.shape.recompute = atoi(v);
    else if (!strcmp(k, "--steps")) a.steps = atoi(v);
    else if (!strcmp(k, "--lr")) a.lr = strtod(v, NULL);
    else if (!strcmp(k, "--weight-decay")) a.weight_decay = strtod(v, NULL);
    else if (!strcmp(k, "--clip")) a.clip = strtod(v, NULL);
    else return fprintf(stderr, "train_tool: unknown flag %s\n", k), 2;
    i += !flag;
  }
  if (!a.src || !a.labels) return fprintf(stderr, "train_tool: --src and --labels are needed\n"), 2;
  if (run(argv[1], argv[2], argv[3], &a, &err)) return fprintf(stderr, "train_tool: %s\n", err.msg), 1;
  return 0;
}
