/* weights.c - the one place weight names and shapes are made (from the
 * weight kinds of include/ff_schema.h), and binding a safetensors file to
 * them (strict, like load_state_dict).  PyTorch's default initialisation
 * (`fixformer init`) is in params.c, on the flat parameter buffer training
 * uses. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ff_runtime.h"

static const char *const stack_prefixes[] = {"", "encoder.", "decoder."};

/* Where each kind's tensor is bound: an offset into the struct of its scope
 * (ff_rt_weights, ff_rt_layer_w or, for a stack's norm, ff_rt_norm_w). */
#define SCOPE_STRUCT_EMBEDDINGS ff_rt_weights
#define SCOPE_STRUCT_HEAD ff_rt_weights
#define SCOPE_STRUCT_LAYER ff_rt_layer_w
#define SCOPE_STRUCT_CROSS ff_rt_layer_w
#define SCOPE_STRUCT_STACK ff_rt_norm_w
#define SLOT_OFFSET(id, role, scope, needs, rows, cols, init, fan_in, flags, named_by, slot, parts)                      \
  offsetof(SCOPE_STRUCT_##scope, slot),
static const size_t slot_offsets[FF_TENSOR_COUNT] = {FF_WEIGHT_KINDS(SLOT_OFFSET)};
#undef SLOT_OFFSET

/* The tensor of kind k in the given stack and layer (-1: none) if the model
 * has it.  name = prefix + stack + "layers.{layer}." + role, e.g. "model."
 * "encoder." "layers.3." "self_attn.in_proj_weight".  The prefix names where
 * the layer stack sits in a wrapper module (self.encoder = ...): the
 * embedding, positional and head tensors are outside it and named in full by
 * the description (HF's top-level lm_head.weight), so they get none. */
static int visit_kind(const ff_config *c, enum ff_tensor_kind id, enum ff_stack stack, int layer, void *base,
                      ff_weight_fn fn, void *ctx) {
  const ff_rt_weight_kind *k = &ff_rt_weight_kinds[id];
  if (!ff_rt_needs_hold(c, k->needs)) return 0;
  ff_weight_spec s;
  memset(&s, 0, sizeof s);
  /* nn.Transformer names its stacks; a lone encoder or decoder-only stack has no stack prefix */
  const char *stack_name = c->arch == FF_ARCH_ENCODER_DECODER ? stack_prefixes[stack] : "";
  const char *prefix = stack == FF_STACK_NONE ? "" : c->prefix;
  char at[24] = "";
  if (layer >= 0) snprintf(at, sizeof at, "layers.%d.", layer);
  int n = k->named_by != FF_KEY_NONE
              ? snprintf(s.name, sizeof s.name, "%s", ff_rt_key_string(c, k->named_by))
              : snprintf(s.name, sizeof s.name, "%s%s%s%s", prefix, stack_name, at, k->role);
  if (n < 0 || (size_t)n >= sizeof s.name) return FF_EINVAL; /* prefix length checked by ff_rt_check_config */
  snprintf(s.role, sizeof s.role, "%s", k->role);
  s.kind = id;
  s.stack = stack;
  s.layer = layer;
  s.shape[0] = ff_rt_dim(c, k->rows);
  s.shape[1] = ff_rt_dim(c, k->cols);
  s.rank = k->cols != FF_DIM_NONE ? 2 : 1;
  s.init = k->init;
  s.fan_in = ff_rt_dim(c, k->fan_in);
  s.fan_out = s.shape[0];
  s.matrix = (k->flags & FF_IS_MATRIX) || ((k->flags & FF_IS_TIED) && ff_config_has_head(c) && c->tie_embeddings);
  s.slot = base ? (const float **)(void *)((char *)base + slot_offsets[id]) : NULL;
  return fn(ctx, &s);
}

/* The kinds of a scope, in the rows' order (cross: also those of CROSS). */
static int visit_scope(const ff_config *c, enum ff_scope scope, int cross, enum ff_stack stack, int layer,
                       void *base, ff_weight_fn fn, void *ctx) {
  for (int id = 0; id < FF_TENSOR_COUNT; id++) {
    enum ff_scope s = ff_rt_weight_kinds[id].scope;
    if (s != scope && !(cross && s == FF_SCOPE_CROSS)) continue;
    int rc = visit_kind(c, (enum ff_tensor_kind)id, stack, layer, base, fn, ctx);
    if (rc) return rc;
  }
  return 0;
}

/* A stack: its layers (with cross-attention in the decoder of
 * encoder-decoder), then its final norm "norm" */
static int stack(const ff_config *c, enum ff_stack which, int n, ff_rt_layer_w *layers, ff_rt_norm_w *final,
                 ff_weight_fn fn, void *ctx) {
  int cross = which == FF_STACK_DECODER && c->arch == FF_ARCH_ENCODER_DECODER, rc;
  for (int l = 0; l < n; l++)
    if ((rc = visit_scope(c, FF_SCOPE_LAYER, cross, which, l, layers ? &layers[l] : NULL, fn, ctx))) return rc;
  return visit_scope(c, FF_SCOPE_STACK, 0, which, -1, final, fn, ctx);
}

int ff_rt_visit_weights(const ff_config *c, ff_rt_weights *w, ff_weight_fn fn, void *ctx) {
  int rc = visit_scope(c, FF_SCOPE_EMBEDDINGS, 0, FF_STACK_NONE, -1, w, fn, ctx);
  if (!rc && c->arch != FF_ARCH_DECODER_ONLY)
    rc = stack(c, FF_STACK_ENCODER, c->encoder_layers, w ? w->encoder : NULL, w ? &w->encoder_norm : NULL, fn, ctx);
  if (!rc && c->arch != FF_ARCH_ENCODER)
    rc = stack(c, FF_STACK_DECODER, c->decoder_layers, w ? w->decoder : NULL, w ? &w->decoder_norm : NULL, fn, ctx);
  return rc ? rc : visit_scope(c, FF_SCOPE_HEAD, 0, FF_STACK_NONE, -1, w, fn, ctx);
}

typedef struct {
  size_t tensors, params;
} counts;

static int count_one(void *ctx, const ff_weight_spec *s) {
  counts *k = ctx;
  k->tensors++;
  k->params += (size_t)s->shape[0] * (size_t)(s->rank == 2 ? s->shape[1] : 1);
  return 0;
}

int ff_rt_count_weights(const ff_config *c, size_t *tensors, size_t *params) {
  counts k = {0, 0};
  int rc = ff_rt_visit_weights(c, NULL, count_one, &k);
  if (tensors) *tensors = k.tensors;
  if (params) *params = k.params;
  return rc;
}

/* ---- binding ------------------------------------------------------------ */

typedef struct {
  const ff_tensor_file *file;
  unsigned char *used;  /* one flag per file tensor */
  ff_error *err;
} binder;

void ff_rt_shape_text(char *buf, size_t n, int rank, const int64_t *shape) {
  size_t at = 0;
  at += (size_t)snprintf(buf, n, "[");
  for (int i = 0; i < rank && at < n; i++)
    at += (size_t)snprintf(buf + at, n - at, i ? ",%lld" : "%lld", (long long)shape[i]);
  if (at < n) snprintf(buf + at, n - at, "]");
}

static int bind_one(void *ctx, const ff_weight_spec *s) {
  binder *b = ctx;
  int64_t want[2] = {s->shape[0], s->shape[1]};
  char wants[64], haves[160];
  ff_rt_shape_text(wants, sizeof wants, s->rank, want);
  const ff_tensor *t = ff_tensor_file_find(b->file, s->name);
  if (!t) return ff_fail(b->err, FF_EMISSING, "missing tensor '%s' %s", s->name, wants);
  int ok = t->rank == s->rank;
  for (int i = 0; ok && i < s->rank; i++) ok = t->shape[i] == want[i];
  if (!ok) {
    ff_rt_shape_text(haves, sizeof haves, t->rank, t->shape);
    return ff_fail(b->err, FF_ESHAPE, "tensor '%s': shape %s in file, model needs %s", s->name, haves,
                   wants);
  }
  b->used[t - b->file->tensors] = 1;
  *s->slot = t->data;
  return 0;
}

int ff_rt_model_bind(ff_rt_model *m, const ff_config *c, ff_tensor_file *file, ff_error *err) {
  int rc;
  memset(m, 0, sizeof *m);
  m->file = *file;
  memset(file, 0, sizeof *file);
  if ((rc = ff_rt_check_config(c, err))) goto fail;
  m->cfg = *c;
  m->cfg.compute = FF_COMPUTE_F32; /* float32 weights compute in f32 (ff_rt_model_quantized: int8) */
  int nl = c->encoder_layers + c->decoder_layers;
  m->layers = calloc((size_t)(nl > 0 ? nl : 1), sizeof *m->layers);
  binder b = {&m->file, calloc((size_t)m->file.count + 1, 1), err};
  if (!m->layers || !b.used) {
    free(b.used);
    rc = ff_fail(err, FF_ENOMEM, "out of memory binding weights");
    goto fail;
  }
  m->w.encoder = m->layers;
  m->w.decoder = m->layers + c->encoder_layers;
  rc = ff_rt_visit_weights(c, &m->w, bind_one, &b);
  for (int i = 0; !rc && i < m->file.count; i++)
    if (!b.used[i])
      rc = ff_fail(err, FF_EINVAL, "unexpected tensor '%s' (not used by this description)",
                   m->file.tensors[i].name);
  free(b.used);
  if (rc) goto fail;
  if (c->vocab > 0 && c->tie_embeddings) m->w.lm_head = m->w.embed;
  return FF_OK;
fail:
  ff_rt_model_free(m);
  return rc;
}

int ff_rt_check_finite(const ff_rt_model *m, ff_error *err) {
  for (int i = 0; i < m->file.count; i++) {
    const ff_tensor *t = &m->file.tensors[i];
    size_t bad = 0, first = 0;
    const size_t n = ff_all_finite(t->data, t->numel) ? 0 : t->numel; /* (the count only when there is one) */
    for (size_t k = 0; k < n; k++)
      if (!isfinite(t->data[k]) && !bad++) first = k;
    ff_tensor_file_release(&m->file, t->data, t->numel * sizeof *t->data);
    if (bad)
      return ff_fail(err, FF_EINVAL,
                     "tensor '%s': %zu non-finite value%s (the first, %g, at element %zu); "
                     "--allow-nonfinite runs anyway, NaN propagating as in PyTorch",
                     t->name, bad, bad > 1 ? "s" : "", (double)t->data[first], first);
  }
  return 0;
}

void ff_rt_model_free(ff_rt_model *m) {
  if (!m) return;
  ff_tensor_file_free(&m->file);
  free(m->layers);
  memset(m, 0, sizeof *m);
}
