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

enum ff_arch {
  FF_ARCH_ENCODER,         /* bidirectional encoder stack */
  FF_ARCH_DECODER_ONLY,    /* causal self-attention stack (GPT) */
  FF_ARCH_ENCODER_DECODER  /* nn.Transformer: encoder + decoder with cross-attention */
};
enum ff_norm_place { FF_NORM_POST, FF_NORM_PRE }; /* LN(x + f(x)) | x + f(LN(x)) */
enum ff_norm_kind { FF_NORM_LAYERNORM, FF_NORM_RMSNORM };
enum ff_activation { FF_ACT_RELU, FF_ACT_GELU, FF_ACT_GELU_TANH, FF_ACT_SWIGLU };
enum ff_positional { FF_POS_NONE, FF_POS_SINUSOIDAL, FF_POS_LEARNED, FF_POS_ROPE };
/* How the matrices of linear ops and the token embedding table are stored
 * (description key `dtype`): float32, bfloat16 (round to nearest even), or
 * int8 with a float scale per group of FF_Q8_GROUP inputs (GGML's Q8_0). */
enum ff_weight_type { FF_WEIGHT_F32, FF_WEIGHT_BF16, FF_WEIGHT_INT8 };
#define FF_Q8_GROUP 32
enum ff_rope_pairing {
  FF_ROPE_ROTATE_HALF, /* (x[i], x[i + d_k/2]): GPT-NeoX, Hugging Face */
  FF_ROPE_INTERLEAVED  /* (x[2i], x[2i+1]): Meta's LLaMA, llama2.c */
};

typedef struct ff_config {
  char name[FF_NAME_MAX];   /* C identifier prefix of everything emitted */
  enum ff_arch arch;
  int d_model;
  int heads;                /* d_model % heads == 0; d_k = d_model / heads */
  int d_ff;                 /* hidden width of the feed-forward (per half for swiglu) */
  int encoder_layers;       /* 0 for decoder-only */
  int decoder_layers;       /* 0 for encoder */
  enum ff_norm_place norm;
  enum ff_norm_kind norm_kind;
  int final_norm;           /* a norm after each stack */
  float eps;
  enum ff_activation activation;
  int bias;                 /* biases in attention and feed-forward projections */
  int vocab;                /* 0: no embeddings, inputs are float [B,T,d_model] */
  enum ff_positional positional;
  float rope_theta;         /* RoPE base, 10000 */
  int kv_heads;             /* K/V heads (grouped-query attention), dividing heads; 0 in a
                               config built in C means heads (ff_config_kv_heads) */
  enum ff_rope_pairing rope_pairing;
  int scale_embeddings;     /* token embeddings times sqrt(d_model) */
  int tie_embeddings;       /* output head shares the embedding matrix */
  int max_seq;
  char prefix[FF_TENSOR_NAME_MAX];          /* prepended to every weight name */
  char embed_weight[FF_TENSOR_NAME_MAX];    /* default "embed.weight" */
  char pos_embed_weight[FF_TENSOR_NAME_MAX]; /* default "pos_embed.weight" */
  char lm_head_weight[FF_TENSOR_NAME_MAX];  /* default "lm_head.weight" */
  int head_bias;            /* the output head adds a bias [vocab] */
  char lm_head_bias[FF_TENSOR_NAME_MAX];    /* default "lm_head.bias" */
  int no_lm_head;           /* lm_head = false: no output head, the output is the hidden
                               states (inverted, so that a zeroed config keeps its head) */
  int token_types;          /* > 0: a token-type embedding [token_types, d], type 0 added */
  char token_type_embed_weight[FF_TENSOR_NAME_MAX]; /* default "token_type_embed.weight" */
  int embed_norm;           /* a norm (norm_kind, eps) on the summed embeddings: "embed_norm.*" */
  enum ff_weight_type weight_type; /* the key `dtype`: f32, bf16, int8 */
  char weights[FF_PATH_MAX];    /* the model's safetensors, relative paths resolved
                                   against the description's folder; "" if not given */
  char vocabulary[FF_PATH_MAX]; /* its token vocabulary (JSON, ff_vocab), likewise */
} ff_config;

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
 *                    target + EOS. */
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
} ff_train_step_opts;

/* Whether the model ends in an output head (logits over the vocabulary). */
static inline int ff_config_has_head(const ff_config *c) { return c->vocab > 0 && !c->no_lm_head; }
/* K/V heads: query head h reads kv head h / (heads / kv_heads). */
static inline int ff_config_kv_heads(const ff_config *c) { return c->kv_heads > 0 ? c->kv_heads : c->heads; }

/* Width of the model output per position: logits or hidden states. */
static inline int ff_config_out_dim(const ff_config *c) { return ff_config_has_head(c) ? c->vocab : c->d_model; }

#endif
