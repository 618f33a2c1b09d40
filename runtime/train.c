/* train.c - the reference training step, ff_rt_loss_and_grad: per sequence
 * a forward pass that keeps the input of every sub-layer, the loss, and the
 * backward pass, which runs each sub-layer's forward again (the same dropout
 * masks, ff_dropout.h) just before going back through it.  The memory is
 * one sub-layer's activations, not the whole model's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ff_rt_train.h"

/* The gradient has the weights' layout and type (ff_rt_weights, whose
 * pointers are const like the weights'); they point into the caller's
 * mutable grad. */
#define GRAD(p) ((float *)(p))

/* Work memory of one sequence: n = the longest stack's rows, and keys. */
typedef struct {
  /* a sub-layer's activations: its forward writes them, its backward reads them */
  float *h;       /* [n, d]       pre: Norm(x), the input of the sub-layer's function */
  float *f;       /* [n, d]       the function's output, after dropout */
  float *z;       /* [n, d]       x + f: the norm's input (post) or the output (pre) */
  float *y;       /* [n, d]       the output (recomputed, unused) */
  float *qkv;     /* [n, ldq]     q | k | v after RoPE; cross-attention: q [n, d] */
  float *kv;      /* [n, 2 kvd]   cross-attention: k | v of the memory */
  float *probs;   /* [heads, n, n] the attention weights */
  float *probs_d; /* [heads, n, n] the attention weights after dropout */
  float *ctx;     /* [n, d]       attention output before out_proj */
  float *pre;     /* [n, up]      linear1's output */
  float *act;     /* [n, d_ff]    the activation's output, after dropout */
  /* their gradients */
  float *dz, *df, *dh, *dctx, *dqkv, *dkv, *dprobs, *dpre, *dact;
  float *dx, *dy; /* [n, d] the residual stream's, into and out of a sub-layer */
} work;

typedef struct {
  const ff_rt_model *m;
  const ff_config *c;
  const ff_rt_train_opts *o;
  ff_rt_weights g;      /* the gradient */
  uint64_t seq;         /* the sequence's index in the step's batch (dropout) */
  int d, d_k, kv_heads, kvd, ldq, up;
  work w;
} trainer;

/* One stack over one sequence: its rows, masks, and what it keeps. */
typedef struct {
  enum ff_stack stack;
  int layers, subs;     /* sub-layers: layers * (2, or 3 with cross-attention) */
  int T, key_len, causal;
  const int32_t *ids;   /* [T] */
  const float *memory;  /* [S, d] the encoder's output (cross-attention), else NULL */
  float *dmemory;       /* [S, d] its gradient */
  int S, mem_len;       /* memory rows, and the valid ones */
  const ff_rt_layer_w *lw, *lg; /* the stack's layers: weights, gradient */
  const ff_rt_norm_w *final_w, *final_g;
  float *e;             /* [T, d] the embeddings before embed_norm */
  float *stash;         /* [subs + 1][T, d] each sub-layer's input, then the output before the final norm */
  float *out;           /* [T, d] the stack's output */
} stack_run;

enum sub_kind { SUB_SELF, SUB_CROSS, SUB_FFN };

typedef struct {
  enum sub_kind kind;
  int layer;
  const ff_rt_layer_w *w, *g;
  const ff_rt_norm_w *nw, *ng;
} sub;

/* Sub-layer k of a stack: self-attention (norm1), cross-attention (norm2),
 * feed-forward (norm2, or norm3 after cross-attention). */
static sub sub_at(const stack_run *st, int k) {
  int per = st->memory ? 3 : 2, l = k / per, i = k % per;
  sub s = {i == 0 ? SUB_SELF : i == per - 1 ? SUB_FFN : SUB_CROSS, l, &st->lw[l], NULL, NULL, NULL};
  s.nw = i == 0 ? &s.w->norm1 : i == 1 ? &s.w->norm2 : &s.w->norm3;
  if (st->lg) { /* NULL: the loss only */
    s.g = &st->lg[l];
    s.ng = i == 0 ? &s.g->norm1 : i == 1 ? &s.g->norm2 : &s.g->norm3;
  }
  return s;
}

/* Inverted dropout of one sequence's part (n elements) of a site's tensor. */
static void drop(const trainer *tr, float *x, size_t n, enum ff_stack stack, int layer, enum ff_dropout_kind kind) {
  float p = tr->o->dropout;
  if (p <= 0.0f) return;
  ff_rt_dropout(x, n, ff_dropout_key(tr->o->seed, tr->o->step, FF_DROPOUT_SITE(stack, layer, kind)), tr->seq * n, p);
}

static void norm_forward(const trainer *tr, const ff_rt_norm_w *w, const float *x, int n, float *y) {
  const ff_config *c = tr->c;
  if (c->norm_kind == FF_NORM_LAYERNORM)
    ff_rt_layernorm(x, n, c->d_model, w->weight, w->bias, c->eps, y);
  else
    ff_rt_rmsnorm(x, n, c->d_model, w->weight, c->eps, y);
}

static void norm_backward(const trainer *tr, const ff_rt_norm_w *w, const ff_rt_norm_w *g, const float *x, int n,
                          const float *dy, float *dx) {
  const ff_config *c = tr->c;
  if (c->norm_kind == FF_NORM_LAYERNORM)
    ff_rt_layernorm_backward(x, n, c->d_model, w->weight, c->eps, dy, dx, GRAD(g->weight), GRAD(g->bias));
  else
    ff_rt_rmsnorm_backward(x, n, c->d_model, w->weight, c->eps, dy, dx, GRAD(g->weight));
}

/* ---- attention -------------------------------------------------------------- */

/* Where an attention sub-layer's keys come from. */
typedef struct {
  const float *q, *k, *v;
  int ldk, Tk, key_len, causal;
} attn_keys;

/* Self:  [q | k | v] = x in_proj^T + in_proj_bias, RoPE on q and k;
 * cross: q = x W_q^T + b_q, [k | v] = memory W_kv^T + b_kv.
 * out = drop(softmax(q k^T / sqrt(d_k) + mask)) v out_proj^T + out_proj_bias. */
static attn_keys attention_forward(const trainer *tr, const stack_run *st, const sub *s, const float *x, float *out) {
  const ff_config *c = tr->c;
  const work *w = &tr->w;
  int d = tr->d, T = st->T, cross = s->kind == SUB_CROSS;
  const ff_rt_attn_w *aw = cross ? &s->w->cross_attn : &s->w->self_attn;
  attn_keys K;
  if (cross) {
    const float *b = aw->in_proj.bias;
    ff_rt_linear(x, T, d, aw->in_proj.weight, b, d, w->qkv);
    ff_rt_linear(st->memory, st->S, d, aw->in_proj.weight + (size_t)d * d, b ? b + d : NULL, 2 * tr->kvd, w->kv);
    K = (attn_keys){w->qkv, w->kv, w->kv + tr->kvd, 2 * tr->kvd, st->S, st->mem_len, 0};
  } else {
    ff_rt_linear(x, T, d, aw->in_proj.weight, aw->in_proj.bias, tr->ldq, w->qkv);
    if (c->positional == FF_POS_ROPE) {
      ff_rt_rope(w->qkv, tr->ldq, T, c->heads, tr->d_k, 0, c->rope_theta, c->rope_pairing);
      ff_rt_rope(w->qkv + d, tr->ldq, T, tr->kv_heads, tr->d_k, 0, c->rope_theta, c->rope_pairing);
    }
    K = (attn_keys){w->qkv, w->qkv + d, w->qkv + d + tr->kvd, tr->ldq, T, st->key_len, st->causal};
  }
  int ldq = cross ? d : tr->ldq;
  size_t np = (size_t)c->heads * T * K.Tk;
  ff_rt_attention_probs(K.q, ldq, K.k, K.ldk, T, K.Tk, c->heads, tr->kv_heads, tr->d_k, K.key_len, K.causal, 0,
                        w->probs);
  memcpy(w->probs_d, w->probs, np * sizeof(float));
  drop(tr, w->probs_d, np, st->stack, s->layer, cross ? FF_DROPOUT_CROSS_PROBS : FF_DROPOUT_SELF_PROBS);
  ff_rt_attention_context(w->probs_d, K.v, K.ldk, T, K.Tk, c->heads, tr->kv_heads, tr->d_k, w->ctx);
  ff_rt_linear(w->ctx, T, d, aw->out_proj.weight, aw->out_proj.bias, d, out);
  return K;
}

/* Back through attention_forward: dout [T, d] -> dx (+=), the weights'
 * gradient (+=), and for cross-attention the memory's (+=). */
static void attention_backward(const trainer *tr, const stack_run *st, const sub *s, const attn_keys *K,
                               const float *x, const float *dout, float *dx) {
  const ff_config *c = tr->c;
  const work *w = &tr->w;
  int d = tr->d, T = st->T, cross = s->kind == SUB_CROSS, ldq = cross ? d : tr->ldq;
  const ff_rt_attn_w *aw = cross ? &s->w->cross_attn : &s->w->self_attn;
  const ff_rt_attn_w *ag = cross ? &s->g->cross_attn : &s->g->self_attn;
  size_t np = (size_t)c->heads * T * K->Tk;
  memset(w->dctx, 0, (size_t)T * d * sizeof(float));
  ff_rt_linear_backward(w->ctx, T, d, aw->out_proj.weight, d, dout, w->dctx, GRAD(ag->out_proj.weight),
                        GRAD(ag->out_proj.bias));
  /* d q | k | v, laid out as q | k | v (cross: dq in dqkv, dk | dv in dkv) */
  float *dq = w->dqkv, *dk = cross ? w->dkv : w->dqkv + d, *dv = cross ? w->dkv + tr->kvd : w->dqkv + d + tr->kvd;
  memset(w->dprobs, 0, np * sizeof(float));
  memset(w->dqkv, 0, (size_t)T * ldq * sizeof(float));
  if (cross) memset(w->dkv, 0, (size_t)st->S * 2 * tr->kvd * sizeof(float));
  ff_rt_attention_context_backward(w->probs_d, K->v, K->ldk, T, K->Tk, c->heads, tr->kv_heads, tr->d_k, w->dctx,
                                   w->dprobs, dv);
  drop(tr, w->dprobs, np, st->stack, s->layer, cross ? FF_DROPOUT_CROSS_PROBS : FF_DROPOUT_SELF_PROBS);
  ff_rt_attention_probs_backward(K->q, ldq, K->k, K->ldk, T, K->Tk, c->heads, tr->kv_heads, tr->d_k, w->probs,
                                 w->dprobs, dq, dk);
  float *gW = GRAD(ag->in_proj.weight), *gb = GRAD(ag->in_proj.bias);
  if (cross) {
    ff_rt_linear_backward(x, T, d, aw->in_proj.weight, d, dq, dx, gW, gb);
    ff_rt_linear_backward(st->memory, st->S, d, aw->in_proj.weight + (size_t)d * d, 2 * tr->kvd, w->dkv,
                          st->dmemory, gW + (size_t)d * d, gb ? gb + d : NULL);
  } else {
    if (c->positional == FF_POS_ROPE) {
      ff_rt_rope_backward(dq, ldq, T, c->heads, tr->d_k, 0, c->rope_theta, c->rope_pairing);
      ff_rt_rope_backward(dk, ldq, T, tr->kv_heads, tr->d_k, 0, c->rope_theta, c->rope_pairing);
    }
    ff_rt_linear_backward(x, T, d, aw->in_proj.weight, ldq, w->dqkv, dx, gW, gb);
  }
}

/* ---- feed-forward ------------------------------------------------------------- */

/* FFN(x) = linear2(drop(act(linear1(x)))), act(h) for swiglu = silu(gate) up */
static void ffn_forward(const trainer *tr, const stack_run *st, const sub *s, const float *x, float *out) {
  const ff_config *c = tr->c;
  const work *w = &tr->w;
  int T = st->T, f = c->d_ff;
  size_t nf = (size_t)T * f;
  ff_rt_linear(x, T, tr->d, s->w->linear1.weight, s->w->linear1.bias, tr->up, w->pre);
  if (c->activation == FF_ACT_SWIGLU) {
    ff_rt_swiglu(w->pre, T, f, w->act);
  } else {
    memcpy(w->act, w->pre, nf * sizeof(float));
    ff_rt_activate(c->activation, w->act, nf);
  }
  drop(tr, w->act, nf, st->stack, s->layer, FF_DROPOUT_FFN_HIDDEN);
  ff_rt_linear(w->act, T, f, s->w->linear2.weight, s->w->linear2.bias, tr->d, out);
}

static void ffn_backward(const trainer *tr, const stack_run *st, const sub *s, const float *x, const float *dout,
                         float *dx) {
  const ff_config *c = tr->c;
  const work *w = &tr->w;
  int T = st->T, f = c->d_ff;
  size_t nf = (size_t)T * f;
  memset(w->dact, 0, nf * sizeof(float));
  ff_rt_linear_backward(w->act, T, f, s->w->linear2.weight, tr->d, dout, w->dact, GRAD(s->g->linear2.weight),
                        GRAD(s->g->linear2.bias));
  drop(tr, w->dact, nf, st->stack, s->layer, FF_DROPOUT_FFN_HIDDEN);
  memset(w->dpre, 0, (size_t)T * tr->up * sizeof(float));
  if (c->activation == FF_ACT_SWIGLU)
    ff_rt_swiglu_backward(w->pre, T, f, w->dact, w->dpre);
  else
    ff_rt_activate_backward(c->activation, w->pre, w->dact, w->dpre, nf);
  ff_rt_linear_backward(x, T, tr->d, s->w->linear1.weight, tr->up, w->dpre, dx, GRAD(s->g->linear1.weight),
                        GRAD(s->g->linear1.bias));
}

/* ---- sub-layers and stacks ------------------------------------------------------- */

static enum ff_dropout_kind out_site(const sub *s) {
  return s->kind == SUB_SELF ? FF_DROPOUT_SELF_OUT : s->kind == SUB_CROSS ? FF_DROPOUT_CROSS_OUT : FF_DROPOUT_FFN_OUT;
}

/* post: y = Norm(x + drop(f(x)))      pre: y = x + drop(f(Norm(x)))
 * Leaves the activations in tr->w for sublayer_backward. */
static attn_keys sublayer_forward(const trainer *tr, const stack_run *st, const sub *s, const float *x, float *y) {
  const ff_config *c = tr->c;
  const work *w = &tr->w;
  size_t n = (size_t)st->T * tr->d;
  attn_keys K = {0};
  const float *in = x;
  if (c->norm == FF_NORM_PRE) {
    norm_forward(tr, s->nw, x, st->T, w->h);
    in = w->h;
  }
  if (s->kind == SUB_FFN)
    ffn_forward(tr, st, s, in, w->f);
  else
    K = attention_forward(tr, st, s, in, w->f);
  drop(tr, w->f, n, st->stack, s->layer, out_site(s));
  for (size_t i = 0; i < n; i++) w->z[i] = x[i] + w->f[i]; /* residual */
  if (c->norm == FF_NORM_POST)
    norm_forward(tr, s->nw, w->z, st->T, y);
  else
    memcpy(y, w->z, n * sizeof *y);
  return K;
}

/* dy = d loss / d y  ->  dx = d loss / d x (set), the weights' gradient (+=).
 *   post: dz = Norm'(z)^T dy,  dx = dz + f'(x)^T drop(dz)
 *   pre:  dz = dy,             dx = dz + Norm'(x)^T f'(h)^T drop(dz) */
static void sublayer_backward(const trainer *tr, const stack_run *st, const sub *s, const attn_keys *K,
                              const float *x, const float *dy, float *dx) {
  const ff_config *c = tr->c;
  const work *w = &tr->w;
  int T = st->T, pre = c->norm == FF_NORM_PRE;
  size_t n = (size_t)T * tr->d, bytes = n * sizeof(float);
  if (pre) {
    memcpy(w->dz, dy, bytes);
  } else {
    memset(w->dz, 0, bytes);
    norm_backward(tr, s->nw, s->ng, w->z, T, dy, w->dz);
  }
  memcpy(dx, w->dz, bytes); /* the residual path */
  memcpy(w->df, w->dz, bytes);
  drop(tr, w->df, n, st->stack, s->layer, out_site(s));
  memset(w->dh, 0, bytes);
  if (s->kind == SUB_FFN)
    ffn_backward(tr, st, s, pre ? w->h : x, w->df, w->dh);
  else
    attention_backward(tr, st, s, K, pre ? w->h : x, w->df, w->dh);
  if (pre)
    norm_backward(tr, s->nw, s->ng, x, T, w->dh, dx);
  else
    for (size_t i = 0; i < n; i++) dx[i] += w->dh[i];
}

/* x = drop(EmbedNorm(E[ids] s + positions + token type 0)) */
static void embed_forward(const trainer *tr, stack_run *st, float *x) {
  const ff_rt_model *m = tr->m;
  const ff_config *c = tr->c;
  int d = tr->d, T = st->T;
  ff_rt_embed(st->ids, T, m->w.embed, c->vocab, d, c->scale_embeddings, st->e, NULL); /* ids checked before */
  if (c->positional == FF_POS_SINUSOIDAL) ff_rt_add_sinusoidal(st->e, T, d, 0);
  if (c->positional == FF_POS_LEARNED) ff_rt_add_learned(st->e, T, d, 0, m->w.pos_embed);
  if (m->w.token_type_embed) ff_rt_add_row(st->e, T, d, m->w.token_type_embed);
  if (c->embed_norm)
    norm_forward(tr, &m->w.embed_norm, st->e, T, x);
  else
    memcpy(x, st->e, (size_t)T * d * sizeof *x);
  drop(tr, x, (size_t)T * d, st->stack, 0, FF_DROPOUT_EMBED);
}

/* dx: the gradient of embed_forward's x (overwritten) */
static void embed_backward(const trainer *tr, const stack_run *st, float *dx) {
  const ff_rt_model *m = tr->m;
  const ff_config *c = tr->c;
  int d = tr->d, T = st->T;
  float *de = dx;
  drop(tr, dx, (size_t)T * d, st->stack, 0, FF_DROPOUT_EMBED);
  if (c->embed_norm) {
    de = tr->w.dh;
    memset(de, 0, (size_t)T * d * sizeof *de);
    norm_backward(tr, &m->w.embed_norm, &tr->g.embed_norm, st->e, T, dx, de);
  }
  if (c->positional == FF_POS_LEARNED) ff_rt_add_learned_backward(de, T, d, 0, GRAD(tr->g.pos_embed));
  if (m->w.token_type_embed) ff_rt_add_row_backward(de, T, d, GRAD(tr->g.token_type_embed));
  ff_rt_embed_backward(st->ids, T, d, c->scale_embeddings, de, GRAD(tr->g.embed));
}

static float *stashed(const stack_run *st, int k, int d) { return st->stash + (size_t)k * st->T * d; }

static void stack_forward(const trainer *tr, stack_run *st) {
  int d = tr->d;
  embed_forward(tr, st, stashed(st, 0, d));
  for (int k = 0; k < st->subs; k++) {
    sub s = sub_at(st, k);
    sublayer_forward(tr, st, &s, stashed(st, k, d), stashed(st, k + 1, d));
  }
  if (st->final_w)
    norm_forward(tr, st->final_w, stashed(st, st->subs, d), st->T, st->out);
  else
    memcpy(st->out, stashed(st, st->subs, d), (size_t)st->T * d * sizeof(float));
}

/* dout: the gradient of st->out; back to the embeddings.  Each sub-layer's
 * forward runs again from its stashed input, then its backward. */
static void stack_backward(trainer *tr, const stack_run *st, const float *dout) {
  int d = tr->d;
  size_t bytes = (size_t)st->T * d * sizeof(float);
  if (st->final_w) {
    memset(tr->w.dy, 0, bytes);
    norm_backward(tr, st->final_w, st->final_g, stashed(st, st->subs, d), st->T, dout, tr->w.dy);
  } else {
    memcpy(tr->w.dy, dout, bytes);
  }
  for (int k = st->subs - 1; k >= 0; k--) {
    sub s = sub_at(st, k);
    attn_keys K = sublayer_forward(tr, st, &s, stashed(st, k, d), tr->w.y);
    sublayer_backward(tr, st, &s, &K, stashed(st, k, d), tr->w.dy, tr->w.dx);
    float *t = tr->w.dy;
    tr->w.dy = tr->w.dx, tr->w.dx = t;
  }
  embed_backward(tr, st, tr->w.dy);
}

/* ---- the step ------------------------------------------------------------------------ */

static float *take(float *base, size_t *at, size_t n) {
  float *p = base ? base + *at : NULL;
  *at += n;
  return p;
}

/* Places the work memory and the stacks' buffers in base (NULL: counts
 * them); returns the floats needed. */
static size_t place(trainer *tr, stack_run *enc, stack_run *dec, int S, int T, float *base, float **logits,
                    float **dlogits, float **dhead) {
  const ff_config *c = tr->c;
  size_t n = (size_t)(S > T ? S : T), d = (size_t)tr->d, at = 0, np = (size_t)c->heads * n * n;
  work *w = &tr->w;
  w->h = take(base, &at, n * d), w->f = take(base, &at, n * d), w->z = take(base, &at, n * d);
  w->y = take(base, &at, n * d);
  w->qkv = take(base, &at, n * tr->ldq), w->kv = take(base, &at, n * 2 * tr->kvd);
  w->probs = take(base, &at, np), w->probs_d = take(base, &at, np), w->ctx = take(base, &at, n * d);
  w->pre = take(base, &at, n * tr->up), w->act = take(base, &at, n * c->d_ff);
  w->dz = take(base, &at, n * d), w->df = take(base, &at, n * d), w->dh = take(base, &at, n * d);
  w->dctx = take(base, &at, n * d), w->dqkv = take(base, &at, n * tr->ldq), w->dkv = take(base, &at, n * 2 * tr->kvd);
  w->dprobs = take(base, &at, np), w->dpre = take(base, &at, n * tr->up), w->dact = take(base, &at, n * c->d_ff);
  w->dx = take(base, &at, n * d), w->dy = take(base, &at, n * d);
  stack_run *runs[2] = {enc, dec};
  for (int i = 0; i < 2; i++) {
    stack_run *st = runs[i];
    if (!st->layers) continue;
    st->e = take(base, &at, (size_t)st->T * d);
    st->stash = take(base, &at, (size_t)(st->subs + 1) * st->T * d);
    st->out = take(base, &at, (size_t)st->T * d);
  }
  if (c->arch == FF_ARCH_ENCODER_DECODER) dec->dmemory = take(base, &at, (size_t)S * d);
  *logits = take(base, &at, (size_t)T * c->vocab);
  *dlogits = take(base, &at, (size_t)T * c->vocab);
  *dhead = take(base, &at, (size_t)T * d);
  return at;
}

/* The shapes of a step over S source and T target positions: the trainer's
 * widths and the stacks (the encoder over src for encoder and
 * encoder-decoder; the decoder over src for decoder-only, causal, or over
 * tgt, attending to the encoder's output); pointers are the caller's. */
static void setup(trainer *tr, stack_run *enc, stack_run *dec, const ff_config *c, int S, int T) {
  int encdec = c->arch == FF_ARCH_ENCODER_DECODER;
  memset(tr, 0, sizeof *tr);
  tr->c = c, tr->d = c->d_model, tr->d_k = c->d_model / c->heads;
  tr->kv_heads = ff_config_kv_heads(c), tr->kvd = ff_rt_kv_width(c);
  tr->ldq = tr->d + 2 * tr->kvd;
  tr->up = c->activation == FF_ACT_SWIGLU ? 2 * c->d_ff : c->d_ff;
  *enc = (stack_run){.stack = FF_STACK_ENCODER, .layers = c->encoder_layers, .subs = 2 * c->encoder_layers, .T = S};
  *dec = (stack_run){.stack = FF_STACK_DECODER, .layers = c->decoder_layers,
                     .subs = (encdec ? 3 : 2) * c->decoder_layers, .T = T, .causal = 1, .S = S};
}

size_t ff_rt_train_work_floats(const ff_config *c, int S, int T) {
  trainer tr;
  stack_run enc, dec;
  float *logits, *dlogits, *dhead;
  setup(&tr, &enc, &dec, c, S, c->arch == FF_ARCH_ENCODER_DECODER ? T : S);
  return place(&tr, &enc, &dec, S, c->arch == FF_ARCH_ENCODER_DECODER ? T : S, NULL, &logits, &dlogits, &dhead);
}

int ff_rt_train_check(const ff_config *c, const ff_rt_batch *b, const ff_rt_train_opts *o, ff_error *err) {
  int encdec = c->arch == FF_ARCH_ENCODER_DECODER;
  if (!ff_config_has_head(c))
    return ff_fail(err, FF_EINVAL, "cannot train %s: the model has no output head (training needs vocab and lm_head)",
                   c->name);
  if (!(o->dropout >= 0.0f && o->dropout < 1.0f))
    return ff_fail(err, FF_EINVAL, "dropout: %g is outside [0, 1)", (double)o->dropout);
  if (!(o->label_smoothing >= 0.0f && o->label_smoothing <= 1.0f))
    return ff_fail(err, FF_EINVAL, "label_smoothing: %g is outside [0, 1]", (double)o->label_smoothing);
  if (b->first < 0) return ff_fail(err, FF_EINVAL, "batch: first sequence %d is negative", b->first);
  if (!b->src || !b->labels || (encdec && !b->tgt))
    return ff_fail(err, FF_EINVAL, "batch: %s", encdec ? "src, tgt and labels are needed" : "src and labels are needed");
  ff_input in = {b->batch, b->src_len, b->src, NULL, b->src_lengths, b->tgt_len, b->tgt, NULL};
  int rc = ff_rt_check_input(c, &in, err);
  if (rc) return rc;
  int T = encdec ? b->tgt_len : b->src_len;
  for (int i = 0; i < b->batch; i++)
    for (int t = 0; t < T; t++) {
      int32_t y = b->labels[(size_t)i * T + t];
      if (y != o->ignore_index && (y < 0 || y >= c->vocab))
        return ff_fail(err, FF_ETOKEN, "labels: id %ld at [%d,%d] is outside the vocabulary [0, %d) and not ignore_index (%d)",
                       (long)y, i, t, c->vocab, o->ignore_index);
      if (!encdec && b->src_lengths && t >= b->src_lengths[i] && y != o->ignore_index)
        return ff_fail(err, FF_ELENGTH, "labels: [%d,%d] is past sequence %d's length %d and not ignore_index (%d): "
                       "padding has no labels", i, t, i, b->src_lengths[i], o->ignore_index);
    }
  return FF_OK;
}

static int loss_and_grad(const ff_rt_model *m, const ff_rt_batch *b, const ff_rt_train_opts *o, float *grad,
                         double *loss_sum, int64_t *tokens, ff_error *err) {
  if (!m || !b || !o || !loss_sum || !tokens)
    return ff_fail(err, FF_EINVAL, "ff_rt_loss_and_grad: m, b, o, loss_sum and tokens must not be NULL");
  const ff_config *c = &m->cfg;
  int rc = ff_rt_train_check(c, b, o, err);
  if (rc) return rc;
  trainer tr;
  stack_run enc, dec;
  int encdec = c->arch == FF_ARCH_ENCODER_DECODER, S = b->src_len, T = encdec ? b->tgt_len : S;
  setup(&tr, &enc, &dec, c, S, T);
  tr.m = m, tr.o = o;
  ff_rt_layer_w *glayers = calloc((size_t)(c->encoder_layers + c->decoder_layers) + 1, sizeof *glayers);
  if (!glayers) return ff_fail(err, FF_ENOMEM, "out of memory");
  if (grad) ff_rt_weights_point(c, grad, &tr.g, glayers);
  enc.lw = m->w.encoder, enc.lg = grad ? tr.g.encoder : NULL;
  enc.final_w = c->final_norm ? &m->w.encoder_norm : NULL, enc.final_g = &tr.g.encoder_norm;
  dec.lw = m->w.decoder, dec.lg = grad ? tr.g.decoder : NULL;
  dec.final_w = c->final_norm ? &m->w.decoder_norm : NULL, dec.final_g = &tr.g.decoder_norm;
  float *logits, *dlogits, *dhead;
  size_t need = place(&tr, &enc, &dec, S, T, NULL, &logits, &dlogits, &dhead);
  float *buf = malloc((need + 1) * sizeof *buf);
  if (!buf) {
    free(glayers);
    return ff_fail(err, FF_ENOMEM, "out of memory for %zu floats of training activations", need);
  }
  place(&tr, &enc, &dec, S, T, buf, &logits, &dlogits, &dhead);
  if (grad && o->set_grad) { /* written, not added: the sequences' gradients go into zeros */
    size_t numel = 0;
    ff_rt_count_weights(c, NULL, &numel);
    memset(grad, 0, numel * sizeof *grad);
  }
  *loss_sum = 0.0;
  *tokens = 0;
  stack_run *top = c->arch == FF_ARCH_ENCODER ? &enc : &dec;
  for (int i = 0; i < b->batch && !rc; i++) {
    int len = b->src_lengths ? b->src_lengths[i] : S;
    const int32_t *src = b->src + (size_t)i * S, *labels = b->labels + (size_t)i * T;
    tr.seq = (uint64_t)b->first + (uint64_t)i;
    enc.ids = src, enc.key_len = len; /* keys past len are padding */
    dec.ids = encdec ? b->tgt + (size_t)i * T : src;
    dec.key_len = encdec ? T : len;
    if (encdec) dec.memory = enc.out, dec.mem_len = len;
    if (enc.layers) stack_forward(&tr, &enc);
    if (dec.layers) stack_forward(&tr, &dec);
    /* logits = h W^T (+ b);  the loss of this sequence's labels */
    double l;
    int64_t k;
    ff_rt_linear(top->out, T, tr.d, m->w.lm_head, m->w.lm_head_bias, c->vocab, logits);
    rc = ff_rt_cross_entropy(logits, T, c->vocab, labels, o->ignore_index, o->label_smoothing, grad ? dlogits : NULL,
                             &l, &k, err);
    *loss_sum += l, *tokens += k;
    if (rc || !grad) continue;
    memset(dhead, 0, (size_t)T * tr.d * sizeof *dhead);
    ff_rt_linear_backward(top->out, T, tr.d, m->w.lm_head, c->vocab, dlogits, dhead, GRAD(tr.g.lm_head),
                          GRAD(tr.g.lm_head_bias));
    if (encdec) memset(dec.dmemory, 0, (size_t)S * tr.d * sizeof(float));
    stack_backward(&tr, top, dhead);
    if (encdec) stack_backward(&tr, &enc, dec.dmemory);
  }
  free(buf);
  free(glayers);
  return rc;
}

/* Kinds folded into a linear (runtime/fold.c): the pass computes with
 * W' = diag(s) W, b' = s b, its gradient taken back through them. */
int ff_rt_loss_and_grad(const ff_rt_model *m, const ff_rt_batch *b, const ff_rt_train_opts *o, float *grad,
                        double *loss_sum, int64_t *tokens, ff_error *err) {
  if (!m || !ff_rt_has_folds(&m->cfg)) return loss_and_grad(m, b, o, grad, loss_sum, tokens, err);
  size_t numel = 0;
  ff_rt_count_weights(&m->cfg, NULL, &numel);
  float *g = grad ? calloc(numel + 1, sizeof *g) : NULL; /* this pass's alone: grad may hold earlier passes',
                                                            already taken back through the fold */
  if (grad && !g) return ff_fail(err, FF_ENOMEM, "out of memory for a gradient of %zu floats", numel);
  ff_rt_model folded;
  int rc = ff_rt_model_folded(m, &folded, err);
  if (!rc) {
    rc = loss_and_grad(&folded, b, o, g, loss_sum, tokens, err);
    ff_rt_model_free(&folded);
  }
  if (!rc && g) rc = ff_rt_unfold_grad(&m->cfg, &m->w, g, err);
  for (size_t i = 0; !rc && g && i < numel; i++) grad[i] = o->set_grad ? g[i] : grad[i] + g[i];
  free(g);
  return rc;
}

/* ---- dropout sites ----------------------------------------------------------------- */

static int site(ff_rt_site_fn fn, void *ctx, enum ff_stack stack, int layer, enum ff_dropout_kind kind,
                const char *name, int rank, int64_t a, int64_t b, int64_t c, int64_t d) {
  static const char *const stacks[] = {"", "encoder", "decoder"};
  char full[96];
  int64_t shape[4] = {a, b, c, d};
  if (kind == FF_DROPOUT_EMBED)
    snprintf(full, sizeof full, "%s.%s", stacks[stack], name);
  else
    snprintf(full, sizeof full, "%s.layers.%d.%s", stacks[stack], layer, name);
  return fn(ctx, FF_DROPOUT_SITE(stack, layer, kind), full, rank, shape);
}

int ff_rt_visit_dropout_sites(const ff_config *c, int B, int S, int T, ff_rt_site_fn fn, void *ctx) {
  int encdec = c->arch == FF_ARCH_ENCODER_DECODER, d = c->d_model, H = c->heads, rc = 0;
  for (int i = 0; i < 2 && !rc; i++) {
    enum ff_stack stack = i ? FF_STACK_DECODER : FF_STACK_ENCODER;
    int layers = i ? c->decoder_layers : c->encoder_layers, n = i && encdec ? T : S;
    if (!layers) continue;
    rc = site(fn, ctx, stack, 0, FF_DROPOUT_EMBED, "embed", 3, B, n, d, 0);
    for (int l = 0; l < layers && !rc; l++) {
      if ((rc = site(fn, ctx, stack, l, FF_DROPOUT_SELF_PROBS, "self_attn.probs", 4, B, H, n, n)) ||
          (rc = site(fn, ctx, stack, l, FF_DROPOUT_SELF_OUT, "self_attn.out", 3, B, n, d, 0)))
        break;
      if (i && encdec &&
          ((rc = site(fn, ctx, stack, l, FF_DROPOUT_CROSS_PROBS, "multihead_attn.probs", 4, B, H, n, S)) ||
           (rc = site(fn, ctx, stack, l, FF_DROPOUT_CROSS_OUT, "multihead_attn.out", 3, B, n, d, 0))))
        break;
      if ((rc = site(fn, ctx, stack, l, FF_DROPOUT_FFN_HIDDEN, "ffn.hidden", 3, B, n, c->d_ff, 0)) ||
          (rc = site(fn, ctx, stack, l, FF_DROPOUT_FFN_OUT, "ffn.out", 3, B, n, d, 0)))
        break;
    }
  }
  return rc;
}
