/* ff_runtime.h - the reference: shape-generic kernels and forward passes.
 *
 * Everything here computes what PyTorch computes, in float32, with plain
 * loops that read like the formulas of "Attention Is All You Need".  It is
 * the engine behind `--engine runtime` and the twin every generated kernel is
 * tested against.  No globals; every call that can fail returns 0 or a
 * negative FF_E* status and fills an ff_error.
 *
 * Layout conventions (PyTorch's):
 *   activations  x [T, d] row-major, one sequence at a time;
 *   nn.Linear    W [out, in], y = x W^T + b;
 *   in_proj      W [d + 2 kv_heads d_k, d], rows q | k | v.
 */
#ifndef FF_RUNTIME_H
#define FF_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#include "ff_config.h"
#include "ff_error.h"
#include "ff_io.h"
#include "ff_rt_schema.h" /* the rows of include/ff_schema.h as data */

/* ---- kernels: one function per component ------------------------------ */

/* x[t,:] = E[tokens[t],:] * (scale ? sqrt(d) : 1).  FF_ETOKEN if an id is
 * outside [0, vocab). */
int ff_rt_embed(const int32_t *tokens, int T, const float *E, int vocab, int d, int scale,
                float *x, ff_error *err);
/* x[t,:] += PE(pos0 + t) with PE(pos,2i) = sin(pos / 10000^(2i/d)),
 * PE(pos,2i+1) = cos(pos / 10000^(2i/d)). */
void ff_rt_add_sinusoidal(float *x, int T, int d, int pos0);
/* The angle of sinusoid pair i (columns 2i, 2i+1) at pos: pos / 10000^(2i/d), in double. */
double ff_rt_sinusoid_angle(double pos, int i, int d);
/* x[t,:] += P[pos0 + t,:] (learned positions, P [max_seq, d]). */
void ff_rt_add_learned(float *x, int T, int d, int pos0, const float *P);
/* x[t,:] += r[:] for every t (the token-type embedding of type 0, r [d]). */
void ff_rt_add_row(float *x, int T, int d, const float *r);
/* Rotary positions on x [T, heads*d_k] (row stride ldx) in place, per head:
 * pair i < d_k/2 is (i, i + d_k/2) (rotate_half: GPT-NeoX, HF LLaMA) or
 * (2i, 2i+1) (interleaved: Meta, llama2.c), angle (pos0+t) * theta^(-2i/d_k). */
void ff_rt_rope(float *x, int ldx, int T, int heads, int d_k, int pos0, float theta, enum ff_rope_pairing pairing);
/* The inverse frequency of pair i: theta^(-2i/d_k) rounded to float (Hugging Face's inv_freq). */
float ff_rt_rope_freq(int i, int d_k, float theta);
/* ff_rt_rope by sign * the angle: sign -1 rotates back (the inverse, which
 * is the transpose: RoPE's backward). */
void ff_rt_rope_rotate(float *x, int ldx, int T, int heads, int d_k, int pos0, float theta,
                       enum ff_rope_pairing pairing, float sign);
/* The cos and sin of pair i's angle at position pos (what ff_rt_rope rotates by):
 * cosf and sinf of the float product (float)pos * ff_rt_rope_freq. */
void ff_rt_rope_angle(int pos, int i, int d_k, float theta, float *c, float *s);

/* y [n, out] = x [n, in] W^T + b;  W [out, in], b [out] or NULL. */
void ff_rt_linear(const float *x, int n, int in, const float *W, const float *b, int out, float *y);
/* the same in int8 compute (kernels/int8.c): each row of x quantized (its
 * scale max|x| / 127, x / scale rounded to the nearest, ties to even) into
 * row [in], the products with W (its int8 values) summed in double, times the
 * row's scale */
void ff_rt_linear_int8(const float *x, int n, int in, const float *W, const float *b, int out, float *y,
                       float *row);
/* in bf16 compute (kernels/bf16.c): each row of x rounded to bfloat16
 * (nearest even) into row [in], the products with W (its bfloat16 values)
 * summed in double */
void ff_rt_linear_bf16(const float *x, int n, int in, const float *W, const float *b, int out, float *y,
                       float *row);
/* y = (x - mean) / sqrt(var + eps) * w + b over the last dim (biased var). */
void ff_rt_layernorm(const float *x, int n, int d, const float *w, const float *b, float eps, float *y);
/* y = x / sqrt(mean(x^2) + eps) * w. */
void ff_rt_rmsnorm(const float *x, int n, int d, const float *w, float eps, float *y);
/* Element-wise activation in place: relu, gelu (erf), gelu_tanh or silu. */
void ff_rt_activate(enum ff_activation act, float *x, size_t n);
/* SwiGLU: h [n, 2f] holds gate | up; y [n, f] = silu(gate) * up. */
void ff_rt_swiglu(const float *h, int n, int f, float *y);

/* Scaled dot-product attention for every head:
 *   out = softmax(Q K^T / sqrt(d_k) + mask) V
 * q [Tq, ldq] with head h at columns h*d_k, k / v [Tk, ldk] with kv_heads
 * heads (query head h reads head h / (heads / kv_heads)); out [Tq, heads*d_k].
 * Query row t sits at position q_pos0 + t.  Keys j >= key_len are padding
 * (masked); with causal, keys j > q_pos0 + t are masked too.  Masked scores
 * are -inf; softmax subtracts the row max.  scores: scratch of Tk floats. */
void ff_rt_attention(const float *q, int ldq, const float *k, const float *v, int ldk, int Tq,
                     int Tk, int heads, int kv_heads, int d_k, int key_len, int causal, int q_pos0,
                     float *scores, float *out);

/* ---- weights ------------------------------------------------------------- */

typedef struct { const float *weight, *bias; } ff_rt_linear_w; /* W [out,in], b [out] | NULL */
typedef struct { const float *weight, *bias; } ff_rt_norm_w;   /* bias NULL for RMSNorm */
typedef struct { ff_rt_linear_w in_proj, out_proj; } ff_rt_attn_w;

/* One layer, nn.TransformerEncoderLayer / DecoderLayer names. */
typedef struct {
  ff_rt_attn_w self_attn;
  ff_rt_attn_w cross_attn;       /* "multihead_attn"; decoder of encoder-decoder only */
  ff_rt_linear_w linear1, linear2;
  ff_rt_norm_w norm1, norm2, norm3; /* norm3: decoder of encoder-decoder only */
  const float *folded[4];        /* kinds folded into a linear (FF_WEIGHT_FOLDS): read by fold.c only */
} ff_rt_layer_w;

typedef struct {
  const float *embed;            /* [vocab, d] */
  const float *pos_embed;        /* [max_seq, d] (learned positions) */
  const float *lm_head;          /* [vocab, d] (== embed when tied) */
  const float *lm_head_bias;     /* [vocab] (head_bias) or NULL */
  const float *token_type_embed; /* [token_types, d] or NULL */
  ff_rt_norm_w embed_norm;       /* the norm of the summed embeddings (embed_norm) */
  ff_rt_layer_w *encoder;        /* encoder_layers */
  ff_rt_layer_w *decoder;        /* decoder_layers (decoder-only: the causal stack) */
  ff_rt_norm_w encoder_norm, decoder_norm; /* final norms */
} ff_rt_weights;

/* Which stack a weight belongs to: none (embeddings, head), the encoder
 * (also of encoder-decoder) or the decoder (also the decoder-only stack). */
enum ff_stack { FF_STACK_NONE, FF_STACK_ENCODER, FF_STACK_DECODER };
#define FF_ROLE_MAX 64

/* One tensor the model needs: a row of include/ff_schema.h's weight kinds
 * for one config, stack and layer (weights.c, the one place names are made). */
typedef struct {
  char name[FF_TENSOR_NAME_MAX]; /* full name, prefix included */
  enum ff_stack stack;
  int layer;                     /* layer index in its stack, -1 for none */
  char role[FF_ROLE_MAX];        /* the name inside its layer or stack ("linear1.weight",
                                    "norm.weight", "embed_norm.weight"), or "embed", "pos_embed",
                                    "token_type_embed", "lm_head", "lm_head_bias" */
  enum ff_tensor_kind kind;      /* its row: ff_rt_weight_kinds[kind] */
  int rank;
  int shape[2];
  enum ff_init init;
  int fan_in, fan_out;
  int matrix;                    /* a linear op multiplies by it (packed in panels): the
                                    row's FF_IS_MATRIX, or FF_IS_TIED when the head is tied */
  const float **slot;            /* where the bound pointer goes (NULL when listing only) */
} ff_weight_spec;

/* Calls fn for every tensor the model needs, in a fixed order (embeddings,
 * encoder layers, encoder norm, decoder layers, decoder norm, head: the
 * weight kinds' rows by scope).  With w NULL the specs carry slot NULL.
 * Stops at and returns fn's first non-zero. */
typedef int (*ff_weight_fn)(void *ctx, const ff_weight_spec *spec);
int ff_rt_visit_weights(const ff_config *c, ff_rt_weights *w, ff_weight_fn fn, void *ctx);
/* Number of tensors and of float parameters the model needs. */
int ff_rt_count_weights(const ff_config *c, size_t *tensors, size_t *params);

/* ---- weight types (quant.c) ------------------------------------------------ */

const char *ff_weight_type_name(enum ff_weight_type t); /* "f32", "bf16", "int8" */
/* float32 -> bfloat16, round to nearest even (NaN stays a quiet NaN) */
uint16_t ff_bf16_round(float x);
float ff_bf16_value(uint16_t h); /* exact */
/* One int8 group of n <= FF_Q8_GROUP weights: q[i] = round(w[i] / scale) in
 * [-127, 127], scale = max|w| / 127 (returned; 0 for an all-zero group; a
 * subnormal one raised until max|w| / scale < 127.5).  Finite w only. */
float ff_q8_group(const float *w, int n, int8_t *q);
/* its two steps: the scale of w [n], and one weight's q under it */
float ff_q8_scale(const float *w, size_t n);
int8_t ff_q8_value(float w, float scale);
/* Whether a tensor is stored in the model's weight type: the matrices linear
 * ops multiply by and the token embedding table. */
int ff_weight_quantized(const ff_weight_spec *s);
/* FF_EINVAL naming the tensor when w [n] holds a NaN or an infinity: int8
 * cannot store it (the runtime's reference and the packer both refuse). */
int ff_q8_check_finite(const float *w, size_t n, const char *name, ff_error *err);
/* Whether all n floats at w are finite: exponent bits tested a word at a
 * time, a loop the compiler vectorizes (isfinite's branch a value was most
 * of a check of 438 MB) */
int ff_all_finite(const float *w, size_t n);
/* w [n], one row along the inputs, replaced by its stored value in type t;
 * int8 refuses a non-finite weight (FF_EINVAL naming the tensor). */
int ff_quantize_row(enum ff_weight_type t, float *w, int n, const char *name, ff_error *err);
/* Whether a tensor is one that compute int8 / bf16 stores its own way (per
 * output channel in int8, in bfloat16): the matrices of the blocks' linear
 * layers (kernels/int8.c, kernels/bf16.c) */
int ff_compute_weight(const ff_weight_spec *s);
/* w [n], one output channel's weights, replaced by their int8 values: one
 * scale max|w| / 127 over the row (ff_q8_scale); finite weights only. */
int ff_quantize_channel(float *w, int n, const char *name, ff_error *err);
/* dst: src with its weights as type t stores them and, for compute int8 or
 * bf16, the blocks' matrices per channel in int8 or in bfloat16 (a copy; src
 * unchanged); dst computes in `compute` (cfg.compute: the blocks' linear
 * layers quantize or round their inputs). */
struct ff_rt_model;
int ff_rt_model_quantized(const struct ff_rt_model *src, enum ff_weight_type t, enum ff_compute compute,
                          struct ff_rt_model *dst, ff_error *err);

/* ---- model --------------------------------------------------------------- */

/* Checks that a config describes a model the runtime can compute. */
/* Width of the keys (and of the values) of one position: kv_heads * d_k. */
static inline int ff_rt_kv_width(const ff_config *c) { return ff_config_kv_heads(c) * (c->d_model / c->heads); }
int ff_rt_check_config(const ff_config *c, ff_error *err);

typedef struct ff_rt_model {
  ff_config cfg;
  ff_rt_weights w;
  ff_tensor_file file;           /* the tensors the pointers point into */
  ff_rt_layer_w *layers;         /* storage for w.encoder / w.decoder */
} ff_rt_model;

/* "[2,3]": a shape as messages show it, cut to n bytes. */
void ff_rt_shape_text(char *buf, size_t n, int rank, const int64_t *shape);

/* Projections stored apart, as Hugging Face and Meta checkpoints keep them,
 * fused in *f into the tensors the model binds: within a layer
 * "self_attn.{q,k,v}_proj.{weight,bias}" into "self_attn.in_proj_weight" /
 * "in_proj_bias" (rows q | k | v; the same for "multihead_attn"), and for
 * swiglu "gate_proj.*", "up_proj.*" into "linear1.*" (rows gate | up).  One
 * part missing, parts that do not stack, or a tensor both fused and apart
 * is an error naming them; a file with nothing apart is left as it is.
 * Call it right after reading a weights file (ff_rt_read_weights). */
int ff_rt_fuse_projections(const ff_config *c, ff_tensor_file *f, ff_error *err);
/* ff_safetensors_read, then ff_rt_fuse_projections; messages start with the path. */
int ff_rt_read_weights(const ff_config *c, const char *path, ff_tensor_file *f, ff_error *err);
/* The same, the fused tensors' bytes deferred: their memory is reserved
 * (not resident until written) and the parts copied into it only by
 * ff_tensor_file_fill(f), which must run before anything reads a weight (a
 * start that maps its packed weights from the cache never does). */
int ff_rt_read_weights_deferred(const ff_config *c, const char *path, ff_tensor_file *f, ff_error *err);

/* Binds the tensors of a safetensors file by their PyTorch names (with the
 * config's prefix).  Like load_state_dict(strict=True): a missing tensor, a
 * wrong shape or an unexpected tensor is an error naming it.  Takes
 * ownership of *file on success and on failure. */
int ff_rt_model_bind(ff_rt_model *m, const ff_config *c, ff_tensor_file *file, ff_error *err);
void ff_rt_model_free(ff_rt_model *m);

/* ---- kinds folded into a linear (fold.c; include/ff_schema.h FF_WEIGHT_FOLDS) ----
 * A scale s [rows] of the output channels of a linear W [rows, cols], b [rows]:
 * the ops compute with W' = diag(s) W and b' = s b instead. */

/* Whether c's model has a kind folded into another. */
int ff_rt_has_folds(const ff_config *c);
/* m's folded weights computed once (after binding, before anything computes
 * or packs): W', b' in new memory of m's file, both the bound pointers and
 * the file's tensors pointing at them (the packer and `info` see the folded
 * values; s stays as it is).  FF_ENOMEM. */
int ff_rt_model_fold(ff_rt_model *m, ff_error *err);
/* dst: src's weights with the folded ones in new memory (the rest points
 * where src's does, and dst owns no tensor), for a model whose weights
 * change between uses (training); ff_rt_model_free(dst) after. */
int ff_rt_model_folded(const ff_rt_model *src, ff_rt_model *dst, ff_error *err);
/* The gradient taken back through the fold: g holds (pointed at by the
 * layout of c, as ff_rt_weights_point) the gradient with respect to W', b'
 * where W, b are, and nothing where s is; on return the gradient with
 * respect to W, b and s (added into s's):
 *   dW = s dW', db = s db', ds += sum_j dW'[., j] W[., j] + db' b.
 * w: the unfolded weights (the parameters the gradient belongs to).  FF_ENOMEM. */
int ff_rt_unfold_grad(const ff_config *c, const ff_rt_weights *w, float *g, ff_error *err);
/* FF_EINVAL naming the first tensor that holds a NaN or an infinity. */
int ff_rt_check_finite(const ff_rt_model *m, ff_error *err);

/* One forward pass over a batch.
 *   encoder, decoder-only: src [B, T] tokens or [B, T, d] floats, output [B, T, out_dim].
 *   encoder-decoder: src [B, S] (encoder), tgt [B, T] (decoder, causal),
 *   output [B, T, out_dim] from the decoder.
 * lengths [B] (or NULL: all full) are the true lengths of the src sequences;
 * keys past them are padding.  For decoder-only they mask nothing the causal
 * mask does not already, and padded rows of the output are computed anyway. */
/* the inputs of a forward pass: the public ff_input (ff_config.h) */
typedef ff_input ff_rt_input;

/* Checks an input against the config: batch >= 1, 1 <= T <= max_seq,
 * 1 <= lengths[b] <= T, the right kind of input present, every token id in
 * [0, vocab). */
int ff_rt_check_input(const ff_config *c, const ff_rt_input *in, ff_error *err);
/* FF_ETOKEN naming the first id of ids [B, T] outside [0, vocab) as
 * "what: token id X at [b,t]", t counted from position pos0. */
int ff_rt_check_tokens(const ff_config *c, const char *what, const int32_t *ids, int B, int T, int pos0,
                       ff_error *err);
int ff_rt_forward(const ff_rt_model *m, const ff_rt_input *in, float *out, ff_error *err);
/* ---- step by step: greedy decoding with a key/value cache --------------- */

/* One sequence's decoding state: every decoder layer's self-attention keys |
 * values of the positions decoded so far (and, for encoder-decoder, the
 * cross-attention keys | values of the encoded source, computed once per
 * source), plus the scratch of a forward pass, all sized for max_seq. */
typedef struct ff_rt_state {
  const ff_rt_model *m;
  float *self_kv;   /* [decoder_layers][max_seq][2 kv_heads d_k] */
  float *cross_kv;  /* [decoder_layers][max_seq][2 kv_heads d_k], encoder-decoder only */
  float *memory;    /* [max_seq, d] the encoder output */
  float *x;         /* [max_seq, d] the decoder's residual stream */
  int mem_len;      /* valid source positions: memory keys past it are padding */
  int pos;          /* the position the next step decodes: 0..filled */
  int filled;       /* positions whose keys and values are in the cache */
  float *buf;       /* the one allocation behind the pointers above */
  struct ff_rt_scratch *scratch;
} ff_rt_state;

int ff_rt_state_init(ff_rt_state *s, const ff_rt_model *m, ff_error *err);
void ff_rt_state_free(ff_rt_state *s);
/* Encoder-decoder: encodes a source of S positions (ids, or floats [S, d]),
 * the first len valid, computes the cross-attention keys and values of every
 * decoder layer and starts a new target (pos = 0). */
int ff_rt_begin(ff_rt_state *s, const int32_t *tokens, const float *embeds, int S, int len, ff_error *err);
/* Decoder-only and encoder-decoder: decodes T new positions pos..pos+T-1
 * (ids, or floats [T, d]), appends their keys and values to the cache and
 * writes out [T, out_dim]; pos and filled become pos + T.  FF_ELENGTH past
 * max_seq, or when pos is negative or beyond filled (rows never decoded).
 * Set s->pos = 0 to start a new sequence (decoder-only), or any position up
 * to filled to decode again from there. */
int ff_rt_step(ff_rt_state *s, const int32_t *tokens, const float *embeds, int T, float *out, ff_error *err);

/* FLOPs of one sequence's forward (multiply-add = 2): S source positions, T
 * target positions (encoder-decoder only). */
double ff_rt_forward_flops(const ff_config *c, int S, int T);

/* ---- deterministic initialisation (fixformer init) ----------------------- */

/* Fills every tensor with PyTorch's default initialisation from a seeded
 * generator and writes them as a safetensors file. */
int ff_rt_init_weights(const ff_config *c, uint64_t seed, const char *path, ff_error *err);

#endif
