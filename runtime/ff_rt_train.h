/* ff_rt_train.h - the reference runtime's training side: parameters as one
 * flat buffer, the loss and the backward pass of every forward kernel.  It
 * is the oracle generated training code is tested against, as ff_runtime.h
 * is for the forward: plain loops, float32 storage, checked against PyTorch
 * autograd (tests/train_grad.py).
 *
 * A training step, as the caller drives it:
 *
 *   ff_rt_params p;  ff_rt_model m;
 *   ff_rt_params_layout(&p, cfg, &err);         the table and zeroed values
 *   ff_rt_params_load(&p, "w.safetensors", &err) (or ff_rt_params_init)
 *   ff_rt_params_bind(&p, &m, &err);            m's weights point into p.data
 *   float *grad = calloc(p.numel, sizeof *grad); the same layout
 *   for each micro-batch:  ff_rt_loss_and_grad(&m, &batch, &opts, grad, &loss, &tokens, &err);
 *   scale grad by 1 / (total tokens of the global batch), step the optimizer on p.data
 *   ff_rt_params_save(&p, p.data, "out.safetensors", &err);
 */
#ifndef FF_RT_TRAIN_H
#define FF_RT_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "ff_dropout.h"
#include "ff_runtime.h"

/* ---- parameters: one flat buffer ------------------------------------------ */

/* One tensor of the flat buffer. */
typedef struct {
  char name[FF_TENSOR_NAME_MAX]; /* PyTorch's name, prefix included */
  int rank;
  int shape[2];
  size_t offset, numel;          /* floats into the buffer */
  int is_bias;                   /* a bias: of a projection, the head or a LayerNorm */
  int is_norm;                   /* a norm's weight or bias (AdamW's no-decay groups: norms, biases) */
  int is_embedding;              /* token, position or token-type embedding (no decay in
                                    most recipes; tied embeddings are this one tensor) */
  ff_weight_spec spec;           /* how ff_rt_visit_weights describes it (slot NULL) */
} ff_rt_param;

/* Every float the model needs, in ff_rt_visit_weights order, each tensor at
 * its offset; owned and mutable.  Gradients use the same layout (a second
 * buffer of numel floats); a tied embedding is one tensor, so the input and
 * the head both add into its gradient. */
typedef struct ff_rt_params {
  ff_config cfg;
  int count;
  ff_rt_param *tensors; /* count of them */
  size_t numel;         /* floats in data */
  float *data;
} ff_rt_params;

/* The layout of a config's parameters, data zeroed.  FF_EINVAL for a config
 * the runtime cannot compute, FF_ENOMEM. */
int ff_rt_params_layout(ff_rt_params *p, const ff_config *c, ff_error *err);
/* count x size bytes, zeroed, 64-byte aligned (NULL: out of memory), freed by free(): a training
 * step's parameters, gradient and AdamW moments.  malloc gives a large buffer 16 bytes past a
 * page, which puts every AVX-512 load and store across two cache lines: a GPT-shape step
 * (docs/training.md) ran 3-4 % slower on such buffers. */
void *ff_rt_calloc64(size_t count, size_t size);
/* How parameters start (ff_rt_params_init): */
enum ff_rt_init_scheme {
  FF_RT_INIT_TORCH,      /* each module's PyTorch default (the schema's init column): what `fixformer init`
                            writes; nn.Embedding N(0, 1), nn.Linear U(+-1/sqrt(fan_in)) */
  FF_RT_INIT_TRANSFORMER /* as nn.Transformer resets itself: xavier-uniform for every matrix; and the token
                            embedding, when scaled by sqrt(d_model), N(0, d_model^-0.5) (the paper's and
                            fairseq's): `fixformer train`'s default */
};
/* data = the scheme's initialisation from a seeded generator, one generator
 * drawn through every tensor in layout order (ff_rt_init_weights: the
 * torch scheme). */
void ff_rt_params_init(ff_rt_params *p, uint64_t seed, enum ff_rt_init_scheme scheme);
/* data = the tensors of a safetensors file (ff_rt_read_weights: F16/BF16
 * converted, q/k/v and gate/up stored apart fused), strict like
 * load_state_dict: a missing, wrongly shaped or unexpected tensor is an
 * error naming it, and data is unchanged. */
int ff_rt_params_load(ff_rt_params *p, const char *path, ff_error *err);
/* Binds m (freed with ff_rt_model_free) to the values in p->data, which must
 * outlive it: the forward (ff_rt_forward) and ff_rt_loss_and_grad run on it,
 * and see whatever the optimizer writes into p->data. */
int ff_rt_params_bind(const ff_rt_params *p, ff_rt_model *m, ff_error *err);
/* Writes values (p->data, a gradient, an optimizer moment: numel floats in
 * p's layout) as a safetensors file with p's names, atomically. */
int ff_rt_params_save(const ff_rt_params *p, const float *values, const char *path, ff_error *err);
/* Points every weight of w into base, a buffer in this layout (the tied
 * head at the embedding); layers holds encoder_layers + decoder_layers. */
int ff_rt_weights_point(const ff_config *c, const float *base, ff_rt_weights *w, ff_rt_layer_w *layers);
/* The tensor called name, or NULL. */
const ff_rt_param *ff_rt_params_find(const ff_rt_params *p, const char *name);
void ff_rt_params_free(ff_rt_params *p);

/* ---- a training batch ------------------------------------------------------ */

/* A batch and a step's settings: the public ff_train_batch and
 * ff_train_step_opts (ff_config.h), the contract generated training code
 * shares.  A label equal to ignore_index has no loss (padding);
 * src_lengths (or NULL: all S) masks padding keys as ff_rt_forward does. */
typedef ff_train_batch ff_rt_batch;
typedef ff_train_step_opts ff_rt_train_opts;

/* One forward and backward pass over a batch, in float32, one sequence at a
 * time.  The loss is PyTorch's CrossEntropyLoss(ignore_index, label_smoothing,
 * reduction='sum') of the logits against the labels:
 *
 *   loss_sum = sum over labels y != ignore_index of
 *              (1 - s) (-log p_y) + s mean_k (-log p_k),   p = softmax(logits)
 *
 * and *tokens the number of such labels.  The gradient of loss_sum (the SUM,
 * not the mean) with respect to every parameter is ADDED into grad (numel
 * floats in the layout of ff_rt_params_layout(m->cfg)), so micro-batches
 * accumulate: the caller divides by the total tokens of the global batch
 * once, which makes gradient accumulation and data parallelism exact;
 * opts->set_grad: written into grad instead (its contents are not read).
 * loss_sum and tokens are set, not accumulated.  grad NULL: the loss only,
 * no backward (dropout still as opts say: an evaluation passes dropout 0, as
 * ff_rt_forward never drops).  Dropout (opts->dropout > 0)
 * follows ff_dropout.h.  Activations are recomputed, not stored: the forward
 * keeps each layer's input, and the backward runs each layer's forward again
 * (same masks) before going back through it.
 * Errors: a model without an output head (vocab, lm_head) cannot train; ids
 * and labels outside the vocabulary, lengths outside 1..S, a label past its
 * sequence's src_lengths that is not ignore_index (but in an
 * encoder-decoder), sequences outside 1..max_seq, p outside [0, 1), s outside
 * [0, 1], first < 0. */
int ff_rt_loss_and_grad(const ff_rt_model *m, const ff_rt_batch *b, const ff_rt_train_opts *o, float *grad,
                        double *loss_sum, int64_t *tokens, ff_error *err);

/* ff_rt_loss_and_grad's checks of a batch and a step's settings (the errors
 * listed above), for engines that compute the same thing. */
int ff_rt_train_check(const ff_config *c, const ff_rt_batch *b, const ff_rt_train_opts *o, ff_error *err);

/* The floats of work memory ff_rt_loss_and_grad allocates for a batch of S
 * source and T target positions (T unused but for encoder-decoder): one
 * sequence's activations at a time, whatever the batch size. */
size_t ff_rt_train_work_floats(const ff_config *c, int S, int T);

/* The dropout sites of a model for a batch of B sequences (S source, T
 * target positions; T unused but for encoder-decoder): fn(ctx, site, name,
 * rank, shape) for each, in the order the forward meets them, shape the
 * site's tensor over the batch.  name: "encoder.layers.0.self_attn.probs",
 * "decoder.embed", "...self_attn.out", "...multihead_attn.probs",
 * "...multihead_attn.out", "...ffn.hidden", "...ffn.out".  Stops at fn's
 * first non-zero and returns it. */
typedef int (*ff_rt_site_fn)(void *ctx, uint32_t site, const char *name, int rank, const int64_t *shape);
int ff_rt_visit_dropout_sites(const ff_config *c, int B, int S, int T, ff_rt_site_fn fn, void *ctx);

/* ---- the loss and the backward of each kernel (backward.c) -------------------
 * Each backward ADDS into its outputs (d... +=), so that uses of one value
 * (a residual, q | k | v of one input, a tied embedding) sum their gradients;
 * an output pointer may be NULL when that gradient is not wanted. */

/* Cross-entropy of logits [n, V] against labels [n] (PyTorch's, above):
 * *loss_sum and *count get the sum and the number of labels != ignore; dlogits
 * [n, V] (or NULL) is SET to d loss_sum / d logits = softmax - (1 - s) onehot -
 * s / V (0 on ignored rows).  FF_ETOKEN for a label outside [0, V) that is
 * not ignore. */
int ff_rt_cross_entropy(const float *logits, int n, int V, const int32_t *labels, int ignore, float smoothing,
                        float *dlogits, double *loss_sum, int64_t *count, ff_error *err);
/* y = x W^T + b:  dx += dy W,  dW += dy^T x,  db += sum_rows dy. */
void ff_rt_linear_backward(const float *x, int n, int in, const float *W, int out, const float *dy, float *dx,
                           float *dW, float *db);
/* y = xhat w + b, xhat = (x - mean) rstd:  dw += sum dy xhat, db += sum dy,
 * dx += rstd (g - mean(g) - xhat mean(g xhat)), g = dy w. */
void ff_rt_layernorm_backward(const float *x, int n, int d, const float *w, float eps, const float *dy, float *dx,
                              float *dw, float *db);
/* y = x rstd w, rstd = 1/sqrt(mean(x^2) + eps):  dw += sum dy x rstd,
 * dx += rstd (g - xhat mean(g xhat)), g = dy w, xhat = x rstd. */
void ff_rt_rmsnorm_backward(const float *x, int n, int d, const float *w, float eps, const float *dy, float *dx,
                            float *dw);
/* y = act(x) element-wise (x the input before ff_rt_activate): dx += dy act'(x). */
void ff_rt_activate_backward(enum ff_activation act, const float *x, const float *dy, float *dx, size_t n);
/* y = silu(gate) up on h [n, 2f] = gate | up:  dup += dy silu(gate),
 * dgate += dy up silu'(gate), silu'(g) = s (1 + g (1 - s)), s = sigmoid(g). */
void ff_rt_swiglu_backward(const float *h, int n, int f, const float *dy, float *dh);
/* RoPE is a rotation by angle a: its backward rotates dy by -a, in place
 * (a = dy_a cos + dy_b sin,  b = dy_b cos - dy_a sin). */
void ff_rt_rope_backward(float *dy, int ldx, int T, int heads, int d_k, int pos0, float theta,
                         enum ff_rope_pairing pairing);
/* The attention weights of ff_rt_attention, kept: probs [heads, Tq, Tk] =
 * softmax(Q K^T / sqrt(d_k) + mask), masked keys 0 (the same masks). */
void ff_rt_attention_probs(const float *q, int ldq, const float *k, int ldk, int Tq, int Tk, int heads,
                           int kv_heads, int d_k, int key_len, int causal, int q_pos0, float *probs);
/* out [Tq, heads d_k] = P V per head (P = probs [heads, Tq, Tk], dropped or not). */
void ff_rt_attention_context(const float *probs, const float *v, int ldk, int Tq, int Tk, int heads, int kv_heads,
                             int d_k, float *out);
/* out = P V:  dP += dout V^T  (dprobs [heads, Tq, Tk]),  dV += P^T dout. */
void ff_rt_attention_context_backward(const float *probs, const float *v, int ldk, int Tq, int Tk, int heads,
                                      int kv_heads, int d_k, const float *dout, float *dprobs, float *dv);
/* P = softmax(S), S = Q K^T / sqrt(d_k):  dS = P (dP - sum_j P dP) per row,
 * dQ += dS K / sqrt(d_k),  dK += dS^T Q / sqrt(d_k) (masked keys: P = 0, no
 * gradient).  A query head's dK, dV land in its shared K/V head. */
void ff_rt_attention_probs_backward(const float *q, int ldq, const float *k, int ldk, int Tq, int Tk, int heads,
                                    int kv_heads, int d_k, const float *probs, const float *dprobs, float *dq,
                                    float *dk);
/* x[t,:] = E[tokens[t],:] s:  dE[tokens[t],:] += s dx[t,:]. */
void ff_rt_embed_backward(const int32_t *tokens, int T, int d, int scale, const float *dx, float *dE);
/* x[t,:] += P[pos0 + t,:] (learned positions):  dP[pos0 + t,:] += dx[t,:]. */
void ff_rt_add_learned_backward(const float *dx, int T, int d, int pos0, float *dP);
/* x[t,:] += r (token type 0):  dr += sum_t dx[t,:]. */
void ff_rt_add_row_backward(const float *dx, int T, int d, float *dr);
/* Inverted dropout of x [n], elements index0.. of a site's tensor: x *= keep
 * ? 1 / (1 - p) : 0 (ff_dropout.h).  Its own backward: applied to dy with
 * the same key and indices it gives dx. */
void ff_rt_dropout(float *x, size_t n, uint64_t key, uint64_t index0, float p);

#endif
