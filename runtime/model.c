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
  int kv = ff_config_kv_heads(c); /* 0: heads */
  if (c->kv_heads < 0 || kv > c->heads)
    return ff_fail(err, FF_EINVAL, "kv_heads: %d is outside 1..heads (%d)", c->kv_heads, c->heads);
  if (c->heads % kv) return ff_fail(err, FF_EINVAL, "kv_heads: %d does not divide heads %d", kv, c->heads);
  if ((unsigned)c->rope_pairing > FF_ROPE_INTERLEAVED)
    return ff_fail(err, FF_EINVAL, "rope_pairing: %d is not a pairing", (int)c->rope_pairing);
  if (c->positional == FF_POS_ROPE && (c->d_model / c->heads) % 2)
    return ff_fail(err, FF_EINVAL, "positional: rope needs an even head width, d_model/heads = %d",
                   c->d_model / c->heads);
  if (c->encoder_layers < 0 || c->decoder_layers < 0 || c->vocab < 0 || c->token_types < 0)
    return ff_fail(err, FF_EINVAL, "layers, vocab and token_types must not be negative");
  int want_enc = c->arch != FF_ARCH_DECODER_ONLY, want_dec = c->arch != FF_ARCH_ENCODER;
  if ((want_enc && c->encoder_layers < 1) || (want_dec && c->decoder_layers < 1) ||
      (!want_enc && c->encoder_layers) || (!want_dec && c->decoder_layers))
    return ff_fail(err, FF_EINVAL, "layers: %d encoder and %d decoder layers do not fit the architecture",
                   c->encoder_layers, c->decoder_layers);
  /* the biggest weight must be addressable: d_model * max(vocab, max_seq, 3 d, 2 d_ff) */
  double big = (double)c->d_model * fmax(fmax(fmax(c->vocab, c->token_types), c->max_seq),
                                         fmax(3.0 * c->d_model, 2.0 * c->d_ff));
  if (big > 2147483647.0) return ff_fail(err, FF_EINVAL, "sizes too large: a weight would exceed 2^31 elements");
  if (strlen(c->prefix) + strlen("decoder.layers.99999.multihead_attn.out_proj.weight") >= FF_TENSOR_NAME_MAX)
    return ff_fail(err, FF_EINVAL, "prefix: longer than %d characters", FF_TENSOR_NAME_MAX / 2);
  return FF_OK;
}

int ff_rt_check_tokens(const ff_config *c, const char *what, const int32_t *ids, int B, int T, int pos0,
                       ff_error *err) {
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      int32_t id = ids[(size_t)b * T + t];
      if (id < 0 || id >= c->vocab)
        return ff_fail(err, FF_ETOKEN, "%s: token id %ld at [%d,%d] is outside the vocabulary [0, %d)", what,
                       (long)id, b, pos0 + t, c->vocab);
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
    int rc = ff_rt_check_tokens(c, "input", in->src_tokens, in->batch, in->src_len, 0, err);
    if (!rc && c->arch == FF_ARCH_ENCODER_DECODER)
      rc = ff_rt_check_tokens(c, "target input", in->tgt_tokens, in->batch, in->tgt_len, 0, err);
    if (rc) return rc;
  }
  return FF_OK;
}

/* Scratch of one forward pass, max_seq rows each, inside the state's buffer. */
typedef struct {
  float *h;      /* [n, d]     normed input of a sub-layer */
  float *qkv;    /* [n, d + 2 kvd] projections q | k | v (kvd = kv_heads d_k) */
  float *ctx;    /* [n, d]     attention output before out_proj */
  float *sub;    /* [n, d]     sub-layer output */
  float *ff;     /* [n, 2 d_ff] feed-forward hidden */
  float *act;    /* [n, d_ff]  swiglu output */
  float *scores; /* [n]        one row of attention scores */
  float *row;    /* [max(d, d_ff)] one input row of a block's linear, rounded (compute int8, bf16) */
} scratch;

struct ff_rt_scratch { /* the type behind ff_rt_state's opaque pointer */
  scratch s;
};

static void norm_apply(const ff_config *c, const ff_rt_norm_w *w, const float *x, int n, float *y) {
  if (c->norm_kind == FF_NORM_LAYERNORM)
    ff_rt_layernorm(x, n, c->d_model, w->weight, w->bias, c->eps, y);
  else
    ff_rt_rmsnorm(x, n, c->d_model, w->weight, c->eps, y);
}

/* Where a sub-layer's attention takes its keys and values from. */
typedef struct {
  enum { KEYS_SELF, KEYS_CACHE, KEYS_MEMORY } kind;
  float *kv;   /* KEYS_CACHE: [max_seq, 2 kvd] k | v per position, rows pos0.. written here;
                  KEYS_MEMORY: [S, 2 kvd] k | v of the encoder output (kvd = kv_heads d_k) */
  int pos0;    /* position of the first query row (KEYS_CACHE) */
  int key_len; /* keys at or past it are padding */
} keys;

/* a linear layer of a block: in f32, or in the compute type (cfg.compute) */
static void block_linear(const ff_config *c, scratch *s, const float *x, int n, int in, const float *W,
                         const float *b, int out, float *y) {
  if (c->compute == FF_COMPUTE_INT8) ff_rt_linear_int8(x, n, in, W, b, out, y, s->row);
  else if (c->compute == FF_COMPUTE_BF16) ff_rt_linear_bf16(x, n, in, W, b, out, y, s->row);
  else ff_rt_linear(x, n, in, W, b, out, y);
}

/* MultiHead(Q, K, V) = Concat(head_1..head_h) W^O with head_i =
 * Attention(Q W_i^Q, K W_i^K, V W_i^V), over x [T, d] -> out [T, d].
 *   KEYS_SELF   encoder self-attention: k, v from x, bidirectional;
 *   KEYS_CACHE  decoder self-attention: k, v of the T rows appended to the
 *               cache at pos0.., queries see the cache causally;
 *   KEYS_MEMORY cross-attention: q from x, k, v precomputed from the memory.
 * RoPE (if configured) rotates q and k of self-attention at their positions. */
static void multi_head_attention(const ff_config *c, const ff_rt_attn_w *w, const float *x, int T, const keys *K,
                                 scratch *s, float *out) {
  int d = c->d_model, d_k = d / c->heads, kvh = ff_config_kv_heads(c), kvd = kvh * d_k;
  int ld = 2 * kvd, ldq = d + 2 * kvd, Tk, causal = 0, q_pos0 = 0;
  const float *q = s->qkv, *k, *v;
  if (K->kind == KEYS_MEMORY) { /* q = x W^Q + b^Q: the first d rows of in_proj */
    block_linear(c, s, x, T, d, w->in_proj.weight, w->in_proj.bias, d, s->qkv);
    ldq = d, k = K->kv, v = K->kv + kvd, Tk = K->key_len;
  } else { /* [q | k | v] = x in_proj^T + in_proj_bias */
    int pos0 = K->kind == KEYS_CACHE ? K->pos0 : 0;
    block_linear(c, s, x, T, d, w->in_proj.weight, w->in_proj.bias, ldq, s->qkv);
    if (c->positional == FF_POS_ROPE) {
      ff_rt_rope(s->qkv, ldq, T, c->heads, d_k, pos0, c->rope_theta, c->rope_pairing);
      ff_rt_rope(s->qkv + d, ldq, T, kvh, d_k, pos0, c->rope_theta, c->rope_pairing);
    }
    if (K->kind == KEYS_SELF) {
      k = s->qkv + d, v = s->qkv + d + kvd, ld = ldq, Tk = T;
    } else { /* append this chunk's k | v to the cache, attend over all of it */
      for (int t = 0; t < T; t++)
        memcpy(K->kv + (size_t)(pos0 + t) * 2 * kvd, s->qkv + (size_t)t * ldq + d, 2 * (size_t)kvd * sizeof(float));
      k = K->kv, v = K->kv + kvd, Tk = pos0 + T, causal = 1, q_pos0 = pos0;
    }
  }
  ff_rt_attention(q, ldq, k, v, ld, T, Tk, c->heads, kvh, d_k, K->key_len, causal, q_pos0, s->scores, s->ctx);
  block_linear(c, s, s->ctx, T, d, w->out_proj.weight, w->out_proj.bias, d, out);
}

/* FFN(x) = linear2(act(linear1(x))) */
static void feed_forward(const ff_config *c, const ff_rt_layer_w *w, const float *x, int T, scratch *s,
                         float *out) {
  int swiglu = c->activation == FF_ACT_SWIGLU;
  block_linear(c, s, x, T, c->d_model, w->linear1.weight, w->linear1.bias, swiglu ? 2 * c->d_ff : c->d_ff, s->ff);
  if (swiglu)
    ff_rt_swiglu(s->ff, T, c->d_ff, s->act);
  else
    ff_rt_activate(c->activation, s->ff, (size_t)T * c->d_ff);
  block_linear(c, s, swiglu ? s->act : s->ff, T, c->d_ff, w->linear2.weight, w->linear2.bias, c->d_model, out);
}

/* Residual + norm around one sub-layer, in either placement:
 *   post: x = Norm(x + Sublayer(x))      pre: x = x + Sublayer(Norm(x))
 * attn: the attention sub-layer (with its keys), or NULL: feed-forward. */
static void sublayer(const ff_config *c, const ff_rt_layer_w *w, const ff_rt_attn_w *attn, const keys *K,
                     const ff_rt_norm_w *nw, float *x, int T, scratch *s) {
  size_t n = (size_t)T * c->d_model;
  const float *in = x;
  if (c->norm == FF_NORM_PRE) {
    norm_apply(c, nw, x, T, s->h);
    in = s->h;
  }
  if (attn)
    multi_head_attention(c, attn, in, T, K, s, s->sub);
  else
    feed_forward(c, w, in, T, s, s->sub);
  for (size_t i = 0; i < n; i++) x[i] += s->sub[i]; /* residual */
  if (c->norm == FF_NORM_POST) norm_apply(c, nw, x, T, x);
}

/* x [T, d] = embedding (scaled) or the float input, plus positions pos0..,
 * plus the token type 0 (BERT: every token_type_id 0), then the embedding norm. */
static int embed_input(const ff_rt_model *m, const int32_t *tokens, const float *embeds, int T, int pos0, float *x,
                       ff_error *err) {
  const ff_config *c = &m->cfg;
  int d = c->d_model;
  if (c->vocab > 0) {
    int rc = ff_rt_embed(tokens, T, m->w.embed, c->vocab, d, c->scale_embeddings, x, err);
    if (rc) return rc;
  } else {
    memcpy(x, embeds, (size_t)T * d * sizeof *x);
  }
  if (c->positional == FF_POS_SINUSOIDAL) ff_rt_add_sinusoidal(x, T, d, pos0);
  if (c->positional == FF_POS_LEARNED) ff_rt_add_learned(x, T, d, pos0, m->w.pos_embed);
  if (m->w.token_type_embed) ff_rt_add_row(x, T, d, m->w.token_type_embed);
  if (c->embed_norm) norm_apply(c, &m->w.embed_norm, x, T, x);
  return FF_OK;
}

/* The encoder over x [T, d] in place: each layer self-attention then FFN
 * (keys past key_len are padding), then its final norm. */
static void encoder_stack(const ff_rt_model *m, float *x, int T, int key_len, scratch *s) {
  const ff_config *c = &m->cfg;
  keys K = {KEYS_SELF, NULL, 0, key_len};
  for (int l = 0; l < c->encoder_layers; l++) {
    const ff_rt_layer_w *w = &m->w.encoder[l];
    sublayer(c, w, &w->self_attn, &K, &w->norm1, x, T, s);
    sublayer(c, w, NULL, NULL, &w->norm2, x, T, s);
  }
  if (c->final_norm) norm_apply(c, &m->w.encoder_norm, x, T, x);
}

/* The decoder over x [T, d] in place, the rows at positions pos0..: masked
 * self-attention over the cache, cross-attention over the memory
 * (encoder-decoder), FFN; then its final norm. */
static void decoder_stack(ff_rt_state *st, float *x, int T, int pos0, int key_len) {
  const ff_rt_model *m = st->m;
  const ff_config *c = &m->cfg;
  size_t layer_kv = (size_t)c->max_seq * 2 * ff_rt_kv_width(c);
  int encdec = c->arch == FF_ARCH_ENCODER_DECODER;
  scratch *s = &st->scratch->s;
  for (int l = 0; l < c->decoder_layers; l++) {
    const ff_rt_layer_w *w = &m->w.decoder[l];
    keys self = {KEYS_CACHE, st->self_kv + l * layer_kv, pos0, key_len};
    keys cross = {KEYS_MEMORY, encdec ? st->cross_kv + l * layer_kv : NULL, 0, st->mem_len};
    sublayer(c, w, &w->self_attn, &self, &w->norm1, x, T, s);
    if (encdec) sublayer(c, w, &w->cross_attn, &cross, &w->norm2, x, T, s);
    sublayer(c, w, NULL, NULL, encdec ? &w->norm3 : &w->norm2, x, T, s);
  }
  if (c->final_norm) norm_apply(c, &m->w.decoder_norm, x, T, x);
}

/* out [T, out_dim]: logits = h W^T (+ b) (W the tied embedding or lm_head,
 * b lm_head_bias), or h (no vocab, or lm_head = false) */
static void output_head(const ff_rt_model *m, const float *x, int T, float *out) {
  const ff_config *c = &m->cfg;
  if (ff_config_has_head(c))
    ff_rt_linear(x, T, c->d_model, m->w.lm_head, m->w.lm_head_bias, c->vocab, out);
  else
    memcpy(out, x, (size_t)T * c->d_model * sizeof *out);
}

int ff_rt_state_init(ff_rt_state *st, const ff_rt_model *m, ff_error *err) {
  const ff_config *c = &m->cfg;
  memset(st, 0, sizeof *st);
  size_t n = (size_t)c->max_seq, d = (size_t)c->d_model, L = (size_t)c->decoder_layers;
  size_t kvd = (size_t)ff_rt_kv_width(c); /* the caches hold kv_heads heads, not d */
  size_t up = c->activation == FF_ACT_SWIGLU ? 2 * (size_t)c->d_ff : (size_t)c->d_ff;
  size_t kv = L * n * 2 * kvd * (c->arch == FF_ARCH_ENCODER_DECODER ? 2 : 1);
  size_t row = d > (size_t)c->d_ff ? d : (size_t)c->d_ff; /* scratch's row */
  size_t total = kv + 2 * n * d + n * (4 * d + 2 * kvd + up + (size_t)c->d_ff + 1) + row;
  st->scratch = malloc(sizeof *st->scratch);
  st->buf = malloc(total * sizeof(float));
  if (!st->scratch || !st->buf) {
    ff_rt_state_free(st);
    return ff_fail(err, FF_ENOMEM, "out of memory for %zu floats of decoding state", total);
  }
  scratch *s = &st->scratch->s;
  float *p = st->buf;
  st->m = m;
  st->self_kv = p, p += L * n * 2 * kvd;
  if (c->arch == FF_ARCH_ENCODER_DECODER) st->cross_kv = p, p += L * n * 2 * kvd;
  st->memory = p, p += n * d;
  st->x = p, p += n * d;
  s->h = p, p += n * d;
  s->qkv = p, p += n * (d + 2 * kvd);
  s->ctx = p, p += n * d;
  s->sub = p, p += n * d;
  s->ff = p, p += n * up;
  s->act = p, p += n * (size_t)c->d_ff;
  s->scores = p, p += n;
  s->row = p;
  return FF_OK;
}

void ff_rt_state_free(ff_rt_state *st) {
  free(st->buf);
  free(st->scratch);
  memset(st, 0, sizeof *st);
}

/* Encodes the source into the memory and every decoder layer's cross-attention
 * k | v = memory in_proj[d:d+2kvd]^T + in_proj_bias[d:d+2kvd]. */
static int begin(ff_rt_state *st, const int32_t *tokens, const float *embeds, int S, int len, ff_error *err) {
  const ff_rt_model *m = st->m;
  const ff_config *c = &m->cfg;
  int d = c->d_model, kvd = ff_rt_kv_width(c), rc = embed_input(m, tokens, embeds, S, 0, st->memory, err);
  if (rc) return rc;
  encoder_stack(m, st->memory, S, len, &st->scratch->s);
  for (int l = 0; l < c->decoder_layers; l++) {
    const ff_rt_linear_w *in_proj = &m->w.decoder[l].cross_attn.in_proj;
    block_linear(c, &st->scratch->s, st->memory, S, d, in_proj->weight + (size_t)d * d,
                 in_proj->bias ? in_proj->bias + d : NULL, 2 * kvd, st->cross_kv + (size_t)l * c->max_seq * 2 * kvd);
  }
  st->mem_len = len;
  st->pos = st->filled = 0; /* a new source: the target's cache was computed against the old one */
  return FF_OK;
}

int ff_rt_begin(ff_rt_state *st, const int32_t *tokens, const float *embeds, int S, int len, ff_error *err) {
  const ff_config *c = &st->m->cfg;
  if (c->arch != FF_ARCH_ENCODER_DECODER) return ff_fail(err, FF_EINVAL, "begin: only an encoder-decoder has a source");
  if (S < 1 || S > c->max_seq || len < 1 || len > S)
    return ff_fail(err, FF_ELENGTH, "source length %d (valid %d) is outside 1..max_seq (%d)", S, len, c->max_seq);
  if (c->vocab > 0 && !tokens) return ff_fail(err, FF_EINVAL, "begin: the model takes token ids");
  int rc = c->vocab > 0 ? ff_rt_check_tokens(c, "source", tokens, 1, S, 0, err) : FF_OK;
  return rc ? rc : begin(st, tokens, embeds, S, len, err);
}

/* T new positions at pos0.. through the decoder (keys past key_len are
 * padding), appended to the cache; out [T, out_dim]. */
static int decode(ff_rt_state *st, const int32_t *tokens, const float *embeds, int T, int pos0, int key_len, float *out,
                  ff_error *err) {
  int rc = embed_input(st->m, tokens, embeds, T, pos0, st->x, err);
  if (rc) return rc;
  decoder_stack(st, st->x, T, pos0, key_len);
  output_head(st->m, st->x, T, out);
  st->pos = st->filled = pos0 + T;
  return FF_OK;
}

int ff_rt_step(ff_rt_state *st, const int32_t *tokens, const float *embeds, int T, float *out, ff_error *err) {
  const ff_config *c = &st->m->cfg;
  if (c->arch == FF_ARCH_ENCODER) return ff_fail(err, FF_EINVAL, "step: an encoder has no decoder to step");
  if (c->arch == FF_ARCH_ENCODER_DECODER && st->mem_len == 0)
    return ff_fail(err, FF_EINVAL, "step: encode a source first (ff_rt_begin)");
  if (st->pos < 0 || st->pos > st->filled) /* rows past filled were never written */
    return ff_fail(err, FF_ELENGTH, "cannot decode from position %d: %d positions are decoded", st->pos, st->filled);
  if (T < 1 || T > c->max_seq - st->pos) /* (no overflow: pos <= filled <= max_seq) */
    return ff_fail(err, FF_ELENGTH, "cannot decode %d positions from %d: max_seq is %d", T, st->pos, c->max_seq);
  if (c->vocab > 0 && !tokens) return ff_fail(err, FF_EINVAL, "step: the model takes token ids");
  int rc = c->vocab > 0 ? ff_rt_check_tokens(c, "input", tokens, 1, T, st->pos, err) : FF_OK;
  return rc ? rc : decode(st, tokens, embeds, T, st->pos, st->pos + T, out, err);
}

int ff_rt_forward(const ff_rt_model *m, const ff_rt_input *in, float *out, ff_error *err) {
  const ff_config *c = &m->cfg;
  int rc = ff_rt_check_input(c, in, err);
  if (rc) return rc;
  ff_rt_state st;
  if ((rc = ff_rt_state_init(&st, m, err))) return rc;
  int d = c->d_model, S = in->src_len, T = c->arch == FF_ARCH_ENCODER_DECODER ? in->tgt_len : S;
  int out_dim = ff_config_out_dim(c);
  for (int b = 0; b < in->batch && !rc; b++) {
    int len = in->lengths ? in->lengths[b] : S;
    const int32_t *src_tok = in->src_tokens ? in->src_tokens + (size_t)b * S : NULL;
    const float *src_emb = in->src_embeds ? in->src_embeds + (size_t)b * S * d : NULL;
    float *ob = out + (size_t)b * T * out_dim;
    if (c->arch == FF_ARCH_ENCODER) {
      if (!(rc = embed_input(m, src_tok, src_emb, S, 0, st.memory, err))) {
        encoder_stack(m, st.memory, S, len, &st.scratch->s);
        output_head(m, st.memory, S, ob);
      }
    } else if (c->arch == FF_ARCH_DECODER_ONLY) {
      rc = decode(&st, src_tok, src_emb, S, 0, len, ob, err);
    } else { /* the decoder over the target, attending to the encoded source */
      const int32_t *tgt_tok = in->tgt_tokens ? in->tgt_tokens + (size_t)b * T : NULL;
      const float *tgt_emb = in->tgt_embeds ? in->tgt_embeds + (size_t)b * T * d : NULL;
      if (!(rc = begin(&st, src_tok, src_emb, S, len, err))) rc = decode(&st, tgt_tok, tgt_emb, T, 0, T, ob, err);
    }
  }
  ff_rt_state_free(&st);
  return rc;
}

/* FLOPs of one forward of one sequence, a multiply-add counting 2: S source
 * positions (encoder, decoder-only) and T target positions (encoder-decoder). */
double ff_rt_forward_flops(const ff_config *c, int S, int T) {
  double d = c->d_model, up = c->activation == FF_ACT_SWIGLU ? 2.0 * c->d_ff : c->d_ff;
  double kvd = ff_rt_kv_width(c);                       /* k and v: kv_heads heads */
  double ffn = 2 * d * up + 2 * c->d_ff * d;            /* linear1, linear2 */
  double self_proj = 2 * d * (d + 2 * kvd) + 2 * d * d; /* in_proj, out_proj */
  double f = 0;
  if (c->arch == FF_ARCH_ENCODER_DECODER) {
    f += c->encoder_layers * (S * (self_proj + ffn) + 4.0 * d * S * S); /* QK^T and PV over all keys */
    double cross = T * (2 * d * d + 2 * d * d) + S * (2 * d * 2 * kvd); /* q, out_proj; k|v of the memory */
    f += c->decoder_layers * (T * (self_proj + ffn) + cross + 4.0 * d * T * (T + 1) / 2 + 4.0 * d * T * S);
    S = T;
  } else if (c->arch == FF_ARCH_DECODER_ONLY) {
    f += c->decoder_layers * (S * (self_proj + ffn) + 4.0 * d * S * (S + 1) / 2);
  } else {
    f += c->encoder_layers * (S * (self_proj + ffn) + 4.0 * d * S * S);
  }
  if (ff_config_has_head(c)) f += 2.0 * S * d * c->vocab; /* output head */
  return f;
}
