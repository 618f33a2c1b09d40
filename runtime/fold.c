/* fold.c - weight kinds folded into a linear (include/ff_schema.h,
 * FF_WEIGHT_FOLDS): a scale s [rows] of the output channels of W [rows,
 * cols], b [rows], as LayerScale multiplies a sub-layer's output before the
 * residual add.  s (x W^T + b) = x (diag(s) W)^T + s b, so the ops compute
 * with W' = diag(s) W and b' = s b and never see s: inference folds once
 * after binding; training folds copies each step and takes the gradient
 * back through the product (the chain rule of W' and b'). */
#include <stdlib.h>
#include <string.h>

#include "ff_rt_train.h"

/* One fold of a model: the slots of s, W and b (NULL: no bias). */
typedef struct {
  const float **scale, **weight, **bias;
  int rows, cols;
} site;

typedef struct {
  ff_weight_spec *specs;
  int count;
} lister;

static int list_one(void *ctx, const ff_weight_spec *s) {
  lister *l = ctx;
  l->specs[l->count++] = *s;
  return 0;
}

static const ff_weight_spec *find(const lister *l, const ff_weight_spec *near, enum ff_tensor_kind kind) {
  for (int i = 0; i < l->count; i++)
    if (l->specs[i].kind == kind && l->specs[i].stack == near->stack && l->specs[i].layer == near->layer)
      return &l->specs[i];
  return NULL;
}

/* From the rows alone, no listing: every training pass asks.  A scale's
 * scope is its weight's; CROSS only in an encoder-decoder's decoder. */
int ff_rt_has_folds(const ff_config *c) {
  for (int i = 0; i < FF_FOLD_COUNT; i++) {
    const ff_rt_weight_kind *k = &ff_rt_weight_kinds[ff_rt_weight_folds[i].scale];
    if (ff_rt_needs_hold(c, k->needs) && (k->scope != FF_SCOPE_CROSS || c->arch == FF_ARCH_ENCODER_DECODER))
      return 1;
  }
  return 0;
}

/* The folds of c over w's slots into out (NULL: counted only): how many,
 * or -1 out of memory. */
static int sites(const ff_config *c, ff_rt_weights *w, site *out) {
  size_t tensors = 0;
  if (!ff_rt_has_folds(c)) return 0;
  ff_rt_count_weights(c, &tensors, NULL);
  lister l = {malloc((tensors + 1) * sizeof(ff_weight_spec)), 0};
  if (!l.specs) return -1;
  ff_rt_visit_weights(c, w, list_one, &l);
  int n = 0;
  for (int i = 0; i < l.count; i++) {
    const ff_rt_weight_fold *f = ff_rt_fold_of(l.specs[i].kind);
    const ff_weight_spec *W = f ? find(&l, &l.specs[i], f->weight) : NULL, *b = W ? find(&l, W, f->bias) : NULL;
    if (!W) continue; /* (a fold's scale and weight share a scope: always found) */
    if (out) out[n] = (site){l.specs[i].slot, W->slot, b ? b->slot : NULL, W->shape[0], W->shape[1]};
    n++;
  }
  free(l.specs);
  return n;
}


/* The folded copies of n sites into store (rows (cols + 1) floats a site),
 * the slots pointed at them: the floats used. */
static size_t fold_into(site *s, int n, float *store) {
  float *p = store;
  for (int i = 0; i < n; i++) {
    const float *scale = *s[i].scale, *W = *s[i].weight, *b = s[i].bias ? *s[i].bias : NULL;
    for (int r = 0; r < s[i].rows; r++)
      for (int j = 0; j < s[i].cols; j++) p[(size_t)r * s[i].cols + j] = scale[r] * W[(size_t)r * s[i].cols + j];
    *s[i].weight = p, p += (size_t)s[i].rows * s[i].cols;
    if (!b) continue;
    for (int r = 0; r < s[i].rows; r++) p[r] = scale[r] * b[r];
    *s[i].bias = p, p += s[i].rows;
  }
  return (size_t)(p - store);
}

static size_t store_floats(const site *s, int n) {
  size_t floats = 0;
  for (int i = 0; i < n; i++) floats += (size_t)s[i].rows * ((size_t)s[i].cols + 1);
  return floats;
}

/* The sites of m's weights and memory for their folded copies: 0, or
 * FF_ENOMEM; *n 0 when the model has none. */
static int prepare(const ff_config *c, ff_rt_weights *w, site **list, int *n, float **store, ff_error *err) {
  *list = NULL, *store = NULL, *n = sites(c, NULL, NULL);
  if (*n <= 0) return *n < 0 ? ff_fail(err, FF_ENOMEM, "out of memory") : FF_OK;
  *list = malloc((size_t)*n * sizeof **list);
  if (!*list || sites(c, w, *list) != *n) {
    free(*list), *list = NULL;
    return ff_fail(err, FF_ENOMEM, "out of memory");
  }
  size_t floats = store_floats(*list, *n);
  *store = malloc(floats * sizeof **store);
  if (!*store) {
    free(*list), *list = NULL;
    return ff_fail(err, FF_ENOMEM, "out of memory for %zu folded weights", floats);
  }
  return FF_OK;
}

/* The file's tensor whose floats are at data (the bound pointer), or NULL. */
static ff_tensor *tensor_at(ff_tensor_file *f, const float *data) {
  for (int i = 0; i < f->count; i++)
    if (f->tensors[i].data == data) return &f->tensors[i];
  return NULL;
}

int ff_rt_model_fold(ff_rt_model *m, ff_error *err) {
  site *list;
  float *store;
  int n, rc = prepare(&m->cfg, &m->w, &list, &n, &store, err);
  if (rc || !n) return rc;
  ff_tensor **t = malloc(2 * (size_t)n * sizeof *t); /* W's and b's tensors in the file, before the slots move */
  if (!t || (rc = ff_tensor_file_adopt(&m->file, store, 0, err))) {
    free(t), free(store), free(list);
    return rc ? rc : ff_fail(err, FF_ENOMEM, "out of memory");
  }
  ff_tensor_file_fill(&m->file); /* fused tensors written before they are read */
  for (int i = 0; i < n; i++) {
    t[2 * i] = tensor_at(&m->file, *list[i].weight);
    t[2 * i + 1] = list[i].bias ? tensor_at(&m->file, *list[i].bias) : NULL;
  }
  fold_into(list, n, store);
  for (int i = 0; i < n; i++) {
    if (t[2 * i]) t[2 * i]->data = (float *)*list[i].weight;
    if (t[2 * i + 1]) t[2 * i + 1]->data = (float *)*list[i].bias;
  }
  free(t), free(list);
  return FF_OK;
}

int ff_rt_model_folded(const ff_rt_model *src, ff_rt_model *dst, ff_error *err) {
  const ff_config *c = &src->cfg;
  int nl = c->encoder_layers + c->decoder_layers;
  *dst = *src;
  memset(&dst->file, 0, sizeof dst->file); /* src's: not dst's to free */
  dst->layers = malloc((size_t)(nl > 0 ? nl : 1) * sizeof *dst->layers);
  if (!dst->layers) return ff_fail(err, FF_ENOMEM, "out of memory");
  memcpy(dst->layers, src->layers, (size_t)nl * sizeof *dst->layers); /* encoder layers, then decoder's */
  dst->w.encoder = dst->layers, dst->w.decoder = dst->layers + c->encoder_layers;
  site *list;
  float *store;
  int n, rc = prepare(c, &dst->w, &list, &n, &store, err);
  if (rc) {
    free(dst->layers), dst->layers = NULL;
    return rc;
  }
  if (n && (rc = ff_tensor_file_adopt(&dst->file, store, 0, err))) { /* freed with dst, no tensors */
    free(store), free(list), free(dst->layers), dst->layers = NULL;
    return rc;
  }
  if (n) fold_into(list, n, store);
  free(list);
  return FF_OK;
}

int ff_rt_unfold_grad(const ff_config *c, const ff_rt_weights *w, float *g, ff_error *err) {
  int nl = c->encoder_layers + c->decoder_layers, n = sites(c, NULL, NULL), rc = FF_OK;
  if (n == 0) return FF_OK;
  ff_rt_weights ww = *w, gw;
  ff_rt_layer_w *wl = malloc((size_t)(nl + 1) * sizeof *wl), *gl = malloc((size_t)(nl + 1) * sizeof *gl);
  site *ws = malloc((size_t)(n > 0 ? n : 1) * sizeof *ws), *gs = malloc((size_t)(n > 0 ? n : 1) * sizeof *gs);
  if (n < 0 || !wl || !gl || !ws || !gs) {
    rc = ff_fail(err, FF_ENOMEM, "out of memory");
    goto done;
  }
  memcpy(wl, w->encoder, (size_t)nl * sizeof *wl); /* slots of our own: sites() takes them writable */
  ww.encoder = wl, ww.decoder = wl + c->encoder_layers;
  ff_rt_weights_point(c, g, &gw, gl);
  if (sites(c, &ww, ws) != n || sites(c, &gw, gs) != n) {
    rc = ff_fail(err, FF_ENOMEM, "out of memory");
    goto done;
  }
  for (int i = 0; i < n; i++) {
    const float *s = *ws[i].scale, *W = *ws[i].weight, *b = ws[i].bias ? *ws[i].bias : NULL;
    float *ds = (float *)*gs[i].scale, *dW = (float *)*gs[i].weight, *db = gs[i].bias ? (float *)*gs[i].bias : NULL;
    for (int r = 0; r < ws[i].rows; r++) {
      double sum = b ? (double)db[r] * b[r] : 0.0; /* ds = sum_j dW'[r, j] W[r, j] + db'[r] b[r] */
      float *row = dW + (size_t)r * ws[i].cols;
      for (int j = 0; j < ws[i].cols; j++) sum += (double)row[j] * W[(size_t)r * ws[i].cols + j];
      ds[r] += (float)sum;
      for (int j = 0; j < ws[i].cols; j++) row[j] *= s[r]; /* dW = s dW' */
      if (db) db[r] *= s[r];
    }
  }
done:
  free(wl), free(gl), free(ws), free(gs);
  return rc;
}
