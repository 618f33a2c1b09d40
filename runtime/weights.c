/* weights.c - the one place weight names and shapes are made, and binding a
 * safetensors file to them (strict, like load_state_dict).  PyTorch's
 * default initialisation (`fixformer init`) is in params.c, on the flat
 * parameter buffer training uses. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ff_runtime.h"

typedef struct {
  const ff_config *cfg;
  ff_weight_fn fn;
  void *ctx;
  enum ff_stack stack;  /* where the visitor is: stack and layer */
  int layer;
} visit;

static const char *const stack_prefixes[] = {"", "encoder.", "decoder."};

/* name = prefix + stack + "layers.{layer}." + role, e.g.
 * "model." "encoder." "layers.3." "self_attn.in_proj_weight".  The prefix
 * names where the layer stack sits in a wrapper module (self.encoder = ...):
 * the embedding, positional and head tensors are outside it and named in
 * full by the description (HF's top-level lm_head.weight), so they get none. */
static int emit_as(visit *v, const char *role, const char *piece, int rows, int cols, enum ff_init init,
                   int fan_in, int fan_out, const float **slot) {
  const ff_config *c = v->cfg;
  ff_weight_spec s;
  memset(&s, 0, sizeof s);
  /* nn.Transformer names its stacks; a lone encoder or decoder-only stack has no stack prefix */
  const char *stack = c->arch == FF_ARCH_ENCODER_DECODER ? stack_prefixes[v->stack] : "";
  char layer[24] = "";
  if (v->layer >= 0) snprintf(layer, sizeof layer, "layers.%d.", v->layer);
  const char *prefix = v->stack == FF_STACK_NONE ? "" : c->prefix;
  int n = snprintf(s.name, sizeof s.name, "%s%s%s%s", prefix, stack, layer, piece);
  if (n < 0 || (size_t)n >= sizeof s.name) return FF_EINVAL; /* prefix length checked by ff_rt_check_config */
  snprintf(s.role, sizeof s.role, "%s", role);
  s.stack = v->stack;
  s.layer = v->layer;
  s.rank = cols > 0 ? 2 : 1;
  s.shape[0] = rows;
  s.shape[1] = cols > 0 ? cols : 0;
  s.init = init;
  s.fan_in = fan_in;
  s.fan_out = fan_out;
  s.slot = slot;
  return v->fn(v->ctx, &s);
}

/* A tensor whose role is its name inside the layer or stack */
static int emit(visit *v, const char *role, int rows, int cols, enum ff_init init, int fan_in, int fan_out,
                const float **slot) {
  return emit_as(v, role, role, rows, cols, init, fan_in, fan_out, slot);
}

#define SLOT(p) ((w) ? &(p) : NULL)

/* nn.Linear "{module}.weight" [out, in], "{module}.bias" [out] */
static int linear(visit *v, const char *module, int out, int in, enum ff_init winit, ff_rt_linear_w *w) {
  char role[FF_ROLE_MAX];
  int rc;
  snprintf(role, sizeof role, "%s.weight", module);
  if ((rc = emit(v, role, out, in, winit, in, out, w ? &w->weight : NULL))) return rc;
  snprintf(role, sizeof role, "%s.bias", module);
  if (v->cfg->bias) return emit(v, role, out, 0, FF_INIT_LINEAR_BIAS, in, out, w ? &w->bias : NULL);
  return 0;
}

/* nn.MultiheadAttention: in_proj_weight [d + 2 kvd, d] (rows q|k|v; kvd =
 * kv_heads d_k, d with every head), in_proj_bias [d + 2 kvd], out_proj */
static int attention(visit *v, const char *module, ff_rt_attn_w *w) {
  int d = v->cfg->d_model, qkv = d + 2 * ff_rt_kv_width(v->cfg), rc;
  char role[FF_ROLE_MAX];
  snprintf(role, sizeof role, "%s.in_proj_weight", module);
  if ((rc = emit(v, role, qkv, d, FF_INIT_XAVIER, d, qkv, w ? &w->in_proj.weight : NULL))) return rc;
  snprintf(role, sizeof role, "%s.in_proj_bias", module);
  if (v->cfg->bias && (rc = emit(v, role, qkv, 0, FF_INIT_ZEROS, d, qkv, w ? &w->in_proj.bias : NULL)))
    return rc;
  snprintf(role, sizeof role, "%s.out_proj.weight", module);
  if ((rc = emit(v, role, d, d, FF_INIT_LINEAR, d, d, w ? &w->out_proj.weight : NULL))) return rc;
  snprintf(role, sizeof role, "%s.out_proj.bias", module);
  if (v->cfg->bias) return emit(v, role, d, 0, FF_INIT_ZEROS, d, d, w ? &w->out_proj.bias : NULL);
  return 0;
}

/* nn.LayerNorm: weight, bias [d];  RMSNorm: weight [d] */
static int norm(visit *v, const char *module, ff_rt_norm_w *w) {
  int d = v->cfg->d_model, rc;
  char role[FF_ROLE_MAX];
  snprintf(role, sizeof role, "%s.weight", module);
  if ((rc = emit(v, role, d, 0, FF_INIT_ONES, d, d, w ? &w->weight : NULL))) return rc;
  snprintf(role, sizeof role, "%s.bias", module);
  if (v->cfg->norm_kind == FF_NORM_LAYERNORM) return emit(v, role, d, 0, FF_INIT_ZEROS, d, d, w ? &w->bias : NULL);
  return 0;
}

/* One encoder layer (cross = 0) or decoder layer with cross-attention. */
static int layer(visit *v, int cross, ff_rt_layer_w *w) {
  const ff_config *c = v->cfg;
  int up = c->activation == FF_ACT_SWIGLU ? 2 * c->d_ff : c->d_ff, rc;
  if ((rc = attention(v, "self_attn", w ? &w->self_attn : NULL))) return rc;
  if (cross && (rc = attention(v, "multihead_attn", w ? &w->cross_attn : NULL))) return rc;
  if ((rc = linear(v, "linear1", up, c->d_model, FF_INIT_LINEAR, w ? &w->linear1 : NULL))) return rc;
  if ((rc = linear(v, "linear2", c->d_model, c->d_ff, FF_INIT_LINEAR, w ? &w->linear2 : NULL))) return rc;
  if ((rc = norm(v, "norm1", w ? &w->norm1 : NULL))) return rc;
  if ((rc = norm(v, "norm2", w ? &w->norm2 : NULL))) return rc;
  if (cross) return norm(v, "norm3", w ? &w->norm3 : NULL);
  return 0;
}

/* A stack: its layers, then its final norm "norm" */
static int stack(visit *v, enum ff_stack which, int n, int cross, ff_rt_layer_w *layers, ff_rt_norm_w *final) {
  int rc;
  v->stack = which;
  for (v->layer = 0; v->layer < n; v->layer++)
    if ((rc = layer(v, cross, layers ? &layers[v->layer] : NULL))) return rc;
  v->layer = -1;
  rc = v->cfg->final_norm ? norm(v, "norm", final) : 0;
  v->stack = FF_STACK_NONE;
  return rc;
}

/* Before the stacks: token embedding, learned positions, token types, the
 * embedding norm (BERT's embeddings.LayerNorm), all named without prefix. */
static int embeddings(visit *v, ff_rt_weights *w) {
  const ff_config *c = v->cfg;
  int d = c->d_model, rc = 0;
  if (c->vocab > 0 &&
      (rc = emit_as(v, "embed", c->embed_weight, c->vocab, d, FF_INIT_NORMAL, d, c->vocab, SLOT(w->embed))))
    return rc;
  if (c->positional == FF_POS_LEARNED &&
      (rc = emit_as(v, "pos_embed", c->pos_embed_weight, c->max_seq, d, FF_INIT_NORMAL, d, c->max_seq, SLOT(w->pos_embed))))
    return rc;
  if (c->vocab > 0 && c->token_types > 0 &&
      (rc = emit_as(v, "token_type_embed", c->token_type_embed_weight, c->token_types, d, FF_INIT_NORMAL, d,
                    c->token_types, SLOT(w->token_type_embed))))
    return rc;
  if (c->embed_norm) return norm(v, "embed_norm", w ? &w->embed_norm : NULL);
  return 0;
}

/* After the stacks: the untied head [vocab, d] and its bias [vocab]. */
static int head(visit *v, ff_rt_weights *w) {
  const ff_config *c = v->cfg;
  int d = c->d_model, rc = 0;
  if (!ff_config_has_head(c)) return 0;
  if (!c->tie_embeddings &&
      (rc = emit_as(v, "lm_head", c->lm_head_weight, c->vocab, d, FF_INIT_NORMAL, d, c->vocab, SLOT(w->lm_head))))
    return rc;
  if (c->head_bias) /* nn.Linear's bias init */
    return emit_as(v, "lm_head_bias", c->lm_head_bias, c->vocab, 0, FF_INIT_LINEAR_BIAS, d, c->vocab,
                   SLOT(w->lm_head_bias));
  return 0;
}

int ff_rt_visit_weights(const ff_config *c, ff_rt_weights *w, ff_weight_fn fn, void *ctx) {
  visit v = {c, fn, ctx, FF_STACK_NONE, -1};
  int rc = embeddings(&v, w);
  if (rc) return rc;
  if (c->arch != FF_ARCH_DECODER_ONLY)
    rc = stack(&v, FF_STACK_ENCODER, c->encoder_layers, 0, w ? w->encoder : NULL, SLOT(w->encoder_norm));
  if (!rc && c->arch != FF_ARCH_ENCODER)
    rc = stack(&v, FF_STACK_DECODER, c->decoder_layers, c->arch == FF_ARCH_ENCODER_DECODER,
               w ? w->decoder : NULL, SLOT(w->decoder_norm));
  return rc ? rc : head(&v, w);
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
    for (size_t k = 0; k < t->numel; k++)
      if (!isfinite(t->data[k]) && !bad++) first = k;
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
