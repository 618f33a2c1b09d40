/* params.c - a model's parameters as one flat, owned buffer (the layout of
 * ff_rt_visit_weights), what training updates in place: its table, PyTorch's
 * default initialisation (`fixformer init`), reading, binding and writing. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ff_rt_train.h"

static size_t spec_numel(const ff_weight_spec *s) {
  return (size_t)s->shape[0] * (size_t)(s->rank == 2 ? s->shape[1] : 1);
}

static int layout_one(void *ctx, const ff_weight_spec *s) {
  ff_rt_params *p = ctx;
  ff_rt_param *t = &p->tensors[p->count++];
  memcpy(t->name, s->name, sizeof t->name);
  t->rank = s->rank;
  t->shape[0] = s->shape[0];
  t->shape[1] = s->shape[1];
  t->offset = p->numel;
  t->numel = spec_numel(s);
  p->numel += t->numel;
  unsigned flags = ff_rt_weight_kinds[s->kind].flags; /* AdamW's groups, from include/ff_schema.h */
  t->is_norm = !!(flags & FF_IS_NORM);
  t->is_bias = !!(flags & FF_IS_BIAS);
  t->is_embedding = !!(flags & FF_IS_EMBEDDING);
  t->spec = *s;
  return 0;
}

void *ff_rt_calloc64(size_t count, size_t size) {
  void *p = NULL;
  size_t bytes;
  if (ff_size_mul(count, size, &bytes) || posix_memalign(&p, 64, bytes > 0 ? bytes : 64)) return NULL;
  memset(p, 0, bytes);
  return p;
}

int ff_rt_params_layout(ff_rt_params *p, const ff_config *c, ff_error *err) {
  size_t tensors, params;
  memset(p, 0, sizeof *p);
  int rc = ff_rt_check_config(c, err);
  if (rc) return rc;
  if (ff_rt_count_weights(c, &tensors, &params)) return ff_fail(err, FF_EINVAL, "cannot list the model's weights");
  p->cfg = *c;
  p->tensors = calloc(tensors + 1, sizeof *p->tensors);
  p->data = ff_rt_calloc64(params + 1, sizeof *p->data);
  if (!p->tensors || !p->data) {
    ff_rt_params_free(p);
    return ff_fail(err, FF_ENOMEM, "out of memory for %zu parameters", params);
  }
  if (ff_rt_visit_weights(c, NULL, layout_one, p)) {
    ff_rt_params_free(p);
    return ff_fail(err, FF_EINVAL, "cannot list the model's weights");
  }
  return FF_OK;
}

const ff_rt_param *ff_rt_params_find(const ff_rt_params *p, const char *name) {
  for (int i = 0; i < p->count; i++)
    if (!strcmp(p->tensors[i].name, name)) return &p->tensors[i];
  return NULL;
}

void ff_rt_params_free(ff_rt_params *p) {
  if (!p) return;
  free(p->tensors);
  free(p->data);
  memset(p, 0, sizeof *p);
}

/* ---- initialisation ------------------------------------------------------ */

/* splitmix64: a small, well-mixed, seedable generator */
static uint64_t next_u64(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static double uniform01(uint64_t *s) { return (double)(next_u64(s) >> 11) * (1.0 / 9007199254740992.0); }
static float uniform(uint64_t *s, double bound) { return (float)((2.0 * uniform01(s) - 1.0) * bound); }
static float normal(uint64_t *s) { /* Box-Muller */
  double u1 = uniform01(s), u2 = uniform01(s);
  if (u1 < 1e-300) u1 = 1e-300;
  return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* The init of one tensor under a scheme (ff_rt_train.h); *scale: what a
 * normal draw is multiplied by. */
static enum ff_init scheme_init(const ff_config *c, const ff_weight_spec *s, enum ff_rt_init_scheme scheme,
                                double *scale) {
  *scale = 1.0;
  if (scheme != FF_RT_INIT_TRANSFORMER) return s->init;
  if (s->init == FF_INIT_LINEAR) return FF_INIT_XAVIER;
  if (s->init == FF_INIT_NORMAL && !strcmp(s->role, "embed") && c->scale_embeddings)
    *scale = 1.0 / sqrt((double)c->d_model);
  return s->init;
}

void ff_rt_params_init(ff_rt_params *p, uint64_t seed, enum ff_rt_init_scheme scheme) {
  uint64_t rng = seed;
  for (int t = 0; t < p->count; t++) {
    const ff_weight_spec *s = &p->tensors[t].spec;
    float *x = p->data + p->tensors[t].offset;
    double scale;
    const enum ff_init init = scheme_init(&p->cfg, s, scheme, &scale);
    for (size_t i = 0; i < p->tensors[t].numel; i++) {
      switch (init) {
      case FF_INIT_XAVIER: /* gain 1: U(-a, a), a = sqrt(6 / (fan_in + fan_out)) */
        x[i] = uniform(&rng, sqrt(6.0 / (s->fan_in + s->fan_out)));
        break;
      case FF_INIT_LINEAR: /* kaiming_uniform_(a=sqrt 5) = U(-1/sqrt(fan_in), 1/sqrt(fan_in)) */
      case FF_INIT_LINEAR_BIAS: x[i] = uniform(&rng, 1.0 / sqrt((double)s->fan_in)); break;
      case FF_INIT_NORMAL: x[i] = (float)(scale * normal(&rng)); break;
      case FF_INIT_ZEROS: x[i] = 0.0f; break;
      case FF_INIT_ONES: x[i] = 1.0f; break;
      }
    }
  }
}

int ff_rt_init_weights(const ff_config *c, uint64_t seed, const char *path, ff_error *err) {
  ff_rt_params p;
  int rc = ff_rt_params_layout(&p, c, err);
  if (rc) return rc;
  ff_rt_params_init(&p, seed, FF_RT_INIT_TORCH);
  rc = ff_rt_params_save(&p, p.data, path, err);
  ff_rt_params_free(&p);
  return rc;
}

/* ---- files and binding ----------------------------------------------------- */

typedef struct {
  const float *base;
  size_t at;
} pointer;

static int point_one(void *ctx, const ff_weight_spec *s) {
  pointer *k = ctx;
  *s->slot = k->base + k->at;
  k->at += spec_numel(s);
  return 0;
}

int ff_rt_weights_point(const ff_config *c, const float *base, ff_rt_weights *w, ff_rt_layer_w *layers) {
  pointer k = {base, 0};
  memset(w, 0, sizeof *w);
  memset(layers, 0, (size_t)(c->encoder_layers + c->decoder_layers) * sizeof *layers);
  w->encoder = layers;
  w->decoder = layers + c->encoder_layers;
  int rc = ff_rt_visit_weights(c, w, point_one, &k);
  if (c->vocab > 0 && c->tie_embeddings) w->lm_head = w->embed;
  return rc;
}

int ff_rt_params_bind(const ff_rt_params *p, ff_rt_model *m, ff_error *err) {
  const ff_config *c = &p->cfg;
  memset(m, 0, sizeof *m);
  m->cfg = *c;
  int nl = c->encoder_layers + c->decoder_layers;
  m->layers = calloc((size_t)(nl > 0 ? nl : 1), sizeof *m->layers);
  if (!m->layers) return ff_fail(err, FF_ENOMEM, "out of memory binding parameters");
  if (ff_rt_weights_point(c, p->data, &m->w, m->layers)) {
    ff_rt_model_free(m);
    return ff_fail(err, FF_EINVAL, "cannot list the model's weights");
  }
  return FF_OK;
}

typedef struct {
  ff_rt_params *p;
  int next;
} copier;

static int copy_one(void *ctx, const ff_weight_spec *s) {
  copier *k = ctx;
  const ff_rt_param *t = &k->p->tensors[k->next++];
  memcpy(k->p->data + t->offset, *s->slot, t->numel * sizeof(float));
  return 0;
}

int ff_rt_params_load(ff_rt_params *p, const char *path, ff_error *err) {
  ff_tensor_file file;
  ff_rt_model m;
  int rc = ff_rt_read_weights(&p->cfg, path, &file, err);
  if (rc) return rc;
  if ((rc = ff_rt_model_bind(&m, &p->cfg, &file, err))) /* strict: names, shapes, nothing extra */
    return err ? ff_fail(err, rc, "%s: %s", path, err->msg) : rc;
  copier k = {p, 0};
  rc = ff_rt_visit_weights(&p->cfg, &m.w, copy_one, &k);
  ff_rt_model_free(&m);
  return rc ? ff_fail(err, rc, "%s: cannot list the model's weights", path) : FF_OK;
}

int ff_rt_params_save(const ff_rt_params *p, const float *values, const char *path, ff_error *err) {
  ff_tensor_view *views = calloc((size_t)p->count + 1, sizeof *views);
  if (!views) return ff_fail(err, FF_ENOMEM, "out of memory");
  for (int i = 0; i < p->count; i++) {
    const ff_rt_param *t = &p->tensors[i];
    views[i].name = t->name;
    views[i].rank = t->rank;
    views[i].shape[0] = t->shape[0];
    views[i].shape[1] = t->shape[1];
    views[i].data = values + t->offset;
  }
  int rc = ff_safetensors_write(path, views, p->count, err);
  free(views);
  return rc;
}
