/* model.c - the reference forward passes: sub-layers, layers, stacks and the
 * three architectures, one sequence of the batch at a time. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ff_runtime.h"

int ff_rt_check_config(const ff_config *c, ff_error *err) {
  if (c->d_model <= 0 || c->heads <= 0 || c->d_ff <= 0 || c->max_seq <= 0)
    return ff_fail(err, FF_EINVAL, "d_model, heads, d_ff and max_seq must be positive");
  if (c->d_model % c->heads)
    return ff_fail(err, FF_EINVAL, "heads: %d does not divide d_model %d", c->heads, c->d_model);
  if (c->positional == FF_POS_ROPE && (c->d_model / c->heads) % 2)
    return ff_fail(err, FF_EINVAL, "positional: rope needs an even head width, d_model/heads = %d",
                   c->d_model / c->heads);
  if (c->encoder_layers < 0 || c->decoder_layers < 0 || c->vocab < 0)
    return ff_fail(err, FF_EINVAL, "layers and vocab must not be negative");
  int want_enc = c->arch != FF_ARCH_DECODER_ONLY, want_dec = c->arch != FF_ARCH_ENCODER;
  if ((want_enc && c->encoder_layers < 1) || (want_dec && c->decoder_layers < 1) ||
      (!want_enc && c->encoder_layers) || (!want_dec && c->decoder_layers))
    return ff_fail(err, FF_EINVAL, "layers: %d encoder and %d decoder layers do not fit the architecture",
                   c->encoder_layers, c->decoder_layers);
  /* the biggest weight must be addressable: d_model * max(vocab, max_seq, 3 d, 2 d_ff) */
  double big = (double)c->d_model * fmax(fmax(c->vocab, c->max_seq), fmax(3.0 * c->d_model, 2.0 * c->d_ff));
  if (big > 2147483647.0) return ff_fail(err, FF_EINVAL, "sizes too large: a weight would exceed 2^31 elements");
  if (strlen(c->prefix) + strlen("decoder.layers.99999.multihead_attn.out_proj.weight") >= FF_TENSOR_NAME_MAX)
    return ff_fail(err, FF_EINVAL, "prefix: longer than %d characters", FF_TENSOR_NAME_MAX / 2);
  return FF_OK;
}

static int check_tokens(const ff_config *c, const char *what, const int32_t *ids, int B, int T, ff_error *err) {
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      int32_t id = ids[(size_t)b * T + t];
      if (id < 0 || id >= c->vocab)
        return ff_fail(err, FF_ETOKEN, "%s: token id %ld at [%d,%d] is outside the vocabulary [0, %d)", what,
                       (long)id, b, t, c->vocab);
    }
  return FF_OK;
}

int ff_rt_check_input(const ff_config *c, const ff_rt_input *in, ff_error *err) {
  int tokens = c->vocab > 0;
  if (in->batch < 1) return ff_fail(err, FF_ELENGTH, "batch: %d, must be at least 1", in->batch);
  if (in->src_len < 1 || in->src_len > c->max_seq)
    return ff_fail(err, FF_ELENGTH, "input length T = %d is outside 1..max_seq (%d)", in->src_len, c->max_seq);
  if (tokens ? !in->src_tokens : !in->src_embeds)
    return ff_fail(err, FF_EINVAL, "input: the model takes %s", tokens ? "int token ids [B,T]" : "float [B,T,d_model]");
  if (c->arch == FF_ARCH_ENCODER_DECODER) {
    if (in->tgt_len < 1 || in->tgt_len > c->max_seq)
      return ff_fail(err, FF_ELENGTH, "target length T = %d is outside 1..max_seq (%d)", in->tgt_len,
                     c->max_seq);
    if (tokens ? !in->tgt_tokens : !in->tgt_embeds)
      return ff_fail(err, FF_EINVAL, "target input: the encoder-decoder model needs %s",
                     tokens ? "int token ids [B,T]" : "float [B,T,d_model]");
  }
  for (int b = 0; in->lengths && b < in->batch; b++)
    if (in->lengths[b] < 1 || in->lengths[b] > in->src_len)
      return ff_fail(err, FF_ELENGTH, "lengths[%d] = %ld is outside 1..T (T = %d)", b, (long)in->lengths[b],
                     in->src_len);
  if (tokens) { /* every id, padding included: the generated code embeds them all */
    int rc = check_tokens(c, "input", in->src_tokens, in->batch, in->src_len, err);
    if (!rc && c->arch == FF_ARCH_ENCODER_DECODER)
      rc = check_tokens(c, "target input", in->tgt_tokens, in->batch, in->tgt_len, err);
    if (rc) return rc;
  }
  return FF_OK;
}

/* Scratch for one sequence of up to n positions (n = max(S, T)). */
typedef struct {
  float *h;      /* [n, d]     normed input of a sub-layer */
  float *qkv;    /* [n, 3d]    projections q | k | v */
  float *kv;     /* [n, 2d]    cross-attention keys | values of the memory */
  float *ctx;    /* [n, d]     attention output before out_proj */
  float *sub;    /* [n, d]     sub-layer output */
  float *ff;     /* [n, 2 d_ff] feed-forward hidden */
  float *act;    /* [n, d_ff]  swiglu output */
  float *scores; /* [n]        one row of attention scores */
} scratch;

static void norm_apply(const ff_config *c, const ff_rt_norm_w *w, const float *x, int n, float *y) {
  if (c->norm_kind == FF_NORM_LAYERNORM)
    ff_rt_layernorm(x, n, c->d_model, w->weight, w->bias, c->eps, y);
  else
    ff_rt_rmsnorm(x, n, c->d_model, w->weight, c->eps, y);
}

/* MultiHead(Q, K, V) = Concat(head_1..head_h) W^O with head_i =
 * Attention(Q W_i^Q, K W_i^K, V W_i^V).  Self-attention when mem is NULL
 * (keys from xq, causal and RoPE as configured); cross-attention over mem
 * [Tk, d] otherwise.  out [Tq, d]. */
static void multi_head_attention(const ff_config *c, const ff_rt_attn_w *w, const float *xq, int Tq,
                                 const float *mem, int Tk, int key_len, int causal, scratch *s, float *out) {
  int d = c->d_model, d_k = d / c->heads;
  const float *q, *k, *v;
  int ldq, ldk;
  if (!mem) { /* [q | k | v] = x in_proj^T + in_proj_bias */
    ff_rt_linear(xq, Tq, d, w->in_proj.weight, w->in_proj.bias, 3 * d, s->qkv);
    q = s->qkv, k = s->qkv + d, v = s->qkv + 2 * d, ldq = ldk = 3 * d;
    if (c->positional == FF_POS_ROPE) {
      ff_rt_rope(s->qkv, 3 * d, Tq, c->heads, d_k, 0, c->rope_theta);
      ff_rt_rope(s->qkv + d, 3 * d, Tq, c->heads, d_k, 0, c->rope_theta);
    }
    Tk = Tq;
  } else { /* q from the decoder, k | v from the memory */
    const float *bq = w->in_proj.bias, *bkv = w->in_proj.bias ? w->in_proj.bias + d : NULL;
    ff_rt_linear(xq, Tq, d, w->in_proj.weight, bq, d, s->qkv);
    ff_rt_linear(mem, Tk, d, w->in_proj.weight + (size_t)d * d, bkv, 2 * d, s->kv);
    q = s->qkv, k = s->kv, v = s->kv + d, ldq = d, ldk = 2 * d;
  }
  ff_rt_attention(q, ldq, k, v, ldk, Tq, Tk, c->heads, d_k, key_len, causal, 0, s->scores, s->ctx);
  ff_rt_linear(s->ctx, Tq, d, w->out_proj.weight, w->out_proj.bias, d, out);
}

/* FFN(x) = linear2(act(linear1(x))) */
static void feed_forward(const ff_config *c, const ff_rt_layer_w *w, const float *x, int T, scratch *s,
                         float *out) {
  int swiglu = c->activation == FF_ACT_SWIGLU;
  ff_rt_linear(x, T, c->d_model, w->linear1.weight, w->linear1.bias, swiglu ? 2 * c->d_ff : c->d_ff, s->ff);
  if (swiglu)
    ff_rt_swiglu(s->ff, T, c->d_ff, s->act);
  else
    ff_rt_activate(c->activation, s->ff, (size_t)T * c->d_ff);
  ff_rt_linear(swiglu ? s->act : s->ff, T, c->d_ff, w->linear2.weight, w->linear2.bias, c->d_model, out);
}

/* Residual + norm around one sub-layer, in either placement:
 *   post: x = Norm(x + Sublayer(x))      pre: x = x + Sublayer(Norm(x))
 * kind 0 self-attention, 1 cross-attention, 2 feed-forward. */
static void sublayer(const ff_config *c, const ff_rt_layer_w *w, int kind, const ff_rt_norm_w *nw, float *x,
                     int T, const float *mem, int Tk, int key_len, int causal, scratch *s) {
  size_t n = (size_t)T * c->d_model;
  const float *in = x;
  if (c->norm == FF_NORM_PRE) {
    norm_apply(c, nw, x, T, s->h);
    in = s->h;
  }
  if (kind == 2)
    feed_forward(c, w, in, T, s, s->sub);
  else
    multi_head_attention(c, kind ? &w->cross_attn : &w->self_attn, in, T, mem, Tk, key_len, causal, s, s->sub);
  for (size_t i = 0; i < n; i++) x[i] += s->sub[i]; /* residual */
  if (c->norm == FF_NORM_POST) norm_apply(c, nw, x, T, x);
}

/* Encoder layer (or decoder-only layer when causal): self-attention, FFN. */
static void encoder_layer(const ff_config *c, const ff_rt_layer_w *w, float *x, int T, int key_len, int causal,
                          scratch *s) {
  sublayer(c, w, 0, &w->norm1, x, T, NULL, T, key_len, causal, s);
  sublayer(c, w, 2, &w->norm2, x, T, NULL, 0, 0, 0, s);
}

/* Decoder layer: masked self-attention, cross-attention over the memory, FFN. */
static void decoder_layer(const ff_config *c, const ff_rt_layer_w *w, float *x, int T, const float *mem, int S,
                          int mem_len, scratch *s) {
  sublayer(c, w, 0, &w->norm1, x, T, NULL, T, T, 1, s);
  sublayer(c, w, 1, &w->norm2, x, T, mem, S, mem_len, 0, s);
  sublayer(c, w, 2, &w->norm3, x, T, NULL, 0, 0, 0, s);
}

/* x [T, d] = embedding (scaled) or the float input, plus positions */
static int embed_input(const ff_rt_model *m, const int32_t *tokens, const float *embeds, int T, float *x,
                       ff_error *err) {
  const ff_config *c = &m->cfg;
  int d = c->d_model;
  if (c->vocab > 0) {
    int rc = ff_rt_embed(tokens, T, m->w.embed, c->vocab, d, c->scale_embeddings, x, err);
    if (rc) return rc;
  } else {
    memcpy(x, embeds, (size_t)T * d * sizeof *x);
  }
  if (c->positional == FF_POS_SINUSOIDAL) ff_rt_add_sinusoidal(x, T, d, 0);
  if (c->positional == FF_POS_LEARNED) ff_rt_add_learned(x, T, d, 0, m->w.pos_embed);
  return FF_OK;
}

/* A whole stack over x [T, d] in place, then its final norm. */
static void run_stack(const ff_rt_model *m, int decoder, float *x, int T, const float *mem, int S, int key_len,
                      scratch *s) {
  const ff_config *c = &m->cfg;
  int causal = c->arch == FF_ARCH_DECODER_ONLY;
  if (!decoder || c->arch == FF_ARCH_DECODER_ONLY) {
    const ff_rt_layer_w *L = decoder ? m->w.decoder : m->w.encoder;
    for (int l = 0; l < (decoder ? c->decoder_layers : c->encoder_layers); l++)
      encoder_layer(c, &L[l], x, T, key_len, causal, s);
  } else {
    for (int l = 0; l < c->decoder_layers; l++) decoder_layer(c, &m->w.decoder[l], x, T, mem, S, key_len, s);
  }
  if (c->final_norm) norm_apply(c, decoder ? &m->w.decoder_norm : &m->w.encoder_norm, x, T, x);
}

int ff_rt_forward(const ff_rt_model *m, const ff_rt_input *in, float *out, ff_error *err) {
  const ff_config *c = &m->cfg;
  int rc = ff_rt_check_input(c, in, err);
  if (rc) return rc;
  int d = c->d_model, S = in->src_len, encdec = c->arch == FF_ARCH_ENCODER_DECODER;
  int T = encdec ? in->tgt_len : S, n = S > T ? S : T, out_dim = ff_config_out_dim(c);
  int up = c->activation == FF_ACT_SWIGLU ? 2 * c->d_ff : c->d_ff;
  size_t nd = (size_t)n * d;
  size_t total = nd * 9 + (size_t)n * up + (size_t)n * c->d_ff + (size_t)n + (size_t)T * d;
  float *buf = malloc(total * sizeof(float));
  if (!buf) return ff_fail(err, FF_ENOMEM, "out of memory for %zu activations", total);
  scratch s;
  float *p = buf, *mem, *x;
  s.h = p, p += nd;
  s.qkv = p, p += 3 * nd;
  s.kv = p, p += 2 * nd;
  s.ctx = p, p += nd;
  s.sub = p, p += nd;
  s.ff = p, p += (size_t)n * up;
  s.act = p, p += (size_t)n * c->d_ff;
  s.scores = p, p += n;
  mem = p, p += nd; /* the encoder output (memory), or x itself */
  x = encdec ? p : mem;
  for (int b = 0; b < in->batch && !rc; b++) {
    int len = in->lengths ? in->lengths[b] : S;
    const int32_t *src_tok = in->src_tokens ? in->src_tokens + (size_t)b * S : NULL;
    const float *src_emb = in->src_embeds ? in->src_embeds + (size_t)b * S * d : NULL;
    if ((rc = embed_input(m, src_tok, src_emb, S, mem, err))) break;
    run_stack(m, c->arch == FF_ARCH_DECODER_ONLY, mem, S, NULL, 0, len, &s);
    if (encdec) { /* decoder over the target, attending to the memory */
      const int32_t *tgt_tok = in->tgt_tokens ? in->tgt_tokens + (size_t)b * T : NULL;
      const float *tgt_emb = in->tgt_embeds ? in->tgt_embeds + (size_t)b * T * d : NULL;
      if ((rc = embed_input(m, tgt_tok, tgt_emb, T, x, err))) break;
      run_stack(m, 1, x, T, mem, S, len, &s);
    }
    float *ob = out + (size_t)b * T * out_dim;
    if (c->vocab > 0) /* logits = h W^T, W the (tied) embedding or lm_head */
      ff_rt_linear(x, T, d, m->w.lm_head, NULL, c->vocab, ob);
    else
      memcpy(ob, x, (size_t)T * d * sizeof *ob);
  }
  free(buf);
  return rc;
}

/* FLOPs of one forward of one sequence, a multiply-add counting 2: S source
 * positions (encoder, decoder-only) and T target positions (encoder-decoder). */
double ff_rt_forward_flops(const ff_config *c, int S, int T) {
  double d = c->d_model, up = c->activation == FF_ACT_SWIGLU ? 2.0 * c->d_ff : c->d_ff;
  double ffn = 2 * d * up + 2 * c->d_ff * d;            /* linear1, linear2 */
  double self_proj = 2 * d * 3 * d + 2 * d * d;         /* in_proj, out_proj */
  double f = 0;
  if (c->arch == FF_ARCH_ENCODER_DECODER) {
    f += c->encoder_layers * (S * (self_proj + ffn) + 4.0 * d * S * S); /* QK^T and PV over all keys */
    double cross = T * (2 * d * d + 2 * d * d) + S * (2 * d * 2 * d);   /* q, out_proj; k|v of the memory */
    f += c->decoder_layers * (T * (self_proj + ffn) + cross + 4.0 * d * T * (T + 1) / 2 + 4.0 * d * T * S);
    S = T;
  } else if (c->arch == FF_ARCH_DECODER_ONLY) {
    f += c->decoder_layers * (S * (self_proj + ffn) + 4.0 * d * S * (S + 1) / 2);
  } else {
    f += c->encoder_layers * (S * (self_proj + ffn) + 4.0 * d * S * S);
  }
  if (c->vocab > 0) f += 2.0 * S * d * c->vocab; /* output head */
  return f;
}
