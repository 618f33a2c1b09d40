/* ff_config.h - the resolved model description, shared by the runtime and
 * the generator host, and the inputs of a forward pass.  Plain data, no
 * ownership; public (installed beside fixformer.h). */
#ifndef FF_CONFIG_H
#define FF_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#define FF_NAME_MAX 64    /* C identifier of the model, with its NUL */
#define FF_TENSOR_NAME_MAX 256 /* a weight's full name (prefix included) */
#define FF_PATH_MAX 4096       /* a file the description names, resolved: Linux's PATH_MAX, the most open() takes */

#include "ff_schema.h" /* the keys, their enums, the tensors: one row each */

#ifdef __cplusplus
extern "C" {
#endif

/* The enums of the enum keys, in the order of their values' rows. */
#define FF_ENUM_CONSTANT(constant, word) constant,
enum ff_arch { FF_ARCH_VALUES(FF_ENUM_CONSTANT) };
enum ff_norm_place { FF_NORM_PLACE_VALUES(FF_ENUM_CONSTANT) };
enum ff_norm_kind { FF_NORM_KIND_VALUES(FF_ENUM_CONSTANT) };
enum ff_activation { FF_ACTIVATION_VALUES(FF_ENUM_CONSTANT) };
enum ff_positional { FF_POSITIONAL_VALUES(FF_ENUM_CONSTANT) };
enum ff_weight_type { FF_WEIGHT_TYPE_VALUES(FF_ENUM_CONSTANT) };
enum ff_compute { FF_COMPUTE_VALUES(FF_ENUM_CONSTANT) };
enum ff_rope_pairing { FF_ROPE_PAIRING_VALUES(FF_ENUM_CONSTANT) };
#undef FF_ENUM_CONSTANT
#define FF_Q8_GROUP 32 /* int8: inputs per scale */

/* The resolved description: one field per key of ff_schema.h, in its rows'
 * order, named by the row's C field (`lm_head` is no_lm_head, inverted so
 * that a zeroed config keeps its head; `dtype` is weight_type; `layers` has
 * none: it is resolved into encoder_layers, 0 for decoder-only, and
 * decoder_layers, 0 for encoder).  Strings are NUL-terminated; weights and
 * vocabulary are resolved against the description's folder ("" if not
 * given); vocab 0 means no embeddings (float inputs [B,T,d_model]); kv_heads 0
 * in a config built in C means heads (ff_config_kv_heads). */
#define FF_FIELD_NAME(field, tag) char field[FF_NAME_MAX];
#define FF_FIELD_TENSOR_NAME(field, tag) char field[FF_TENSOR_NAME_MAX];
#define FF_FIELD_PATH(field, tag) char field[FF_PATH_MAX];
#define FF_FIELD_INT(field, tag) int field;
#define FF_FIELD_FLOAT(field, tag) float field;
#define FF_FIELD_BOOL(field, tag) int field;
#define FF_FIELD_NOT(field, tag) int field;
#define FF_FIELD_ENUM(field, tag) enum tag field;
#define FF_FIELD_NONE(field, tag)
#define FF_CONFIG_FIELD(key, kind, store, field, tag, ...) FF_FIELD_##store(field, tag)
typedef struct ff_config {
  FF_DESCRIPTION_KEYS(FF_CONFIG_FIELD)
} ff_config;
#undef FF_CONFIG_FIELD

/* The inputs of one forward pass (ff_model_forward; the runtime's
 * ff_rt_input is this type). */
typedef struct ff_input {
  int batch;
  int src_len;                   /* T (S for encoder-decoder) */
  const int32_t *src_tokens;     /* [B, src_len] when vocab > 0 */
  const float *src_embeds;       /* [B, src_len, d] when vocab == 0 */
  const int32_t *lengths;        /* [B] or NULL */
  int tgt_len;                   /* encoder-decoder only */
  const int32_t *tgt_tokens;
  const float *tgt_embeds;
} ff_input;

/* The inputs of one training step's loss and gradient (the runtime's
 * ff_rt_loss_and_grad and generated training code: runtime/ff_rt_train.h
 * says what each holds; fixformer_train.h's engines take it).  B sequences,
 * shifted and padded by the data loader:
 *   decoder-only     src [B, S] the input ids, labels [B, S] the next ids;
 *   encoder (head)   src [B, S], labels [B, S] one per position;
 *   encoder-decoder  src [B, S] the source (keys past src_lengths masked),
 *                    tgt [B, T] = BOS + target (causal), labels [B, T] =
 *                    target + EOS.
 * Positions past src_lengths are padding: masked keys and, but in an
 * encoder-decoder, ignore_index labels (a batch with another label there is
 * refused), so that no loss depends on what padding computes. */
typedef struct ff_train_batch {
  int batch;                  /* B */
  int src_len;                /* S */
  const int32_t *src;         /* [B, S] */
  const int32_t *src_lengths; /* [B] or NULL: all S */
  int tgt_len;                /* T, encoder-decoder only */
  const int32_t *tgt;         /* [B, T], encoder-decoder only */
  const int32_t *labels;      /* [B, S] or, encoder-decoder, [B, T]; ignore_index: no loss */
  int first;                  /* this micro-batch's first sequence in the step's whole batch
                                 (dropout counts from it); 0 when the batch is the whole step */
} ff_train_batch;

/* Sequences from .. from + n - 1 of b, a micro-batch of it (first counting on). */
static inline ff_train_batch ff_train_batch_part(const ff_train_batch *b, int from, int n, int encoder_decoder) {
  ff_train_batch s = *b;
  int T = encoder_decoder ? b->tgt_len : b->src_len;
  s.batch = n;
  s.src = b->src + (size_t)from * b->src_len;
  s.src_lengths = b->src_lengths ? b->src_lengths + from : NULL;
  s.tgt = b->tgt ? b->tgt + (size_t)from * b->tgt_len : NULL;
  s.labels = b->labels + (size_t)from * T;
  s.first = b->first + from;
  return s;
}

/* The settings of one training step's loss (ff_rt_train_opts). */
typedef struct ff_train_step_opts {
  float label_smoothing; /* s in [0, 1] */
  int ignore_index;      /* labels equal to it have no loss (PyTorch's default -100) */
  float dropout;         /* p in [0, 1); 0: none */
  uint64_t seed, step;   /* the dropout mask's key (runtime/ff_dropout.h) */
  int set_grad;          /* 1: the gradient is written into grad, not added (its contents are not
                          * read: a step's first batch, as PyTorch's backward after
                          * zero_grad(set_to_none=True)); 0: added, so that batches accumulate */
} ff_train_step_opts;

/* Whether the model ends in an output head (logits over the vocabulary). */
static inline int ff_config_has_head(const ff_config *c) { return c->vocab > 0 && !c->no_lm_head; }
/* K/V heads: query head h reads kv head h / (heads / kv_heads). */
static inline int ff_config_kv_heads(const ff_config *c) { return c->kv_heads > 0 ? c->kv_heads : c->heads; }

/* Width of the model output per position: logits or hidden states. */
static inline int ff_config_out_dim(const ff_config *c) { return ff_config_has_head(c) ? c->vocab : c->d_model; }

#ifdef __cplusplus
}
#endif

#endif
