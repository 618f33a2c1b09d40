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
/* data = PyTorch's default initialisation from a seeded generator: the
 * values `fixformer init --seed` writes (ff_rt_init_weights is built on it). */
void ff_rt_params_init(ff_rt_params *p, uint64_t seed);
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

#endif
