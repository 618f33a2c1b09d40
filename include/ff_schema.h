/* ff_schema.h - the model description's schema: every key a description may
 * give and every tensor a model may have, declared once.  Public (included by
 * ff_config.h, whose struct ff_config and enums are made from these rows).
 *
 * Everything else is derived from the tables below:
 *   ff_config and its enums        (ff_config.h: one field per key)
 *   the runtime's rows             (runtime/schema.c: ff_rt_keys, ff_rt_weight_kinds)
 *   the Lua validator's schema     (host/host.c pushes them as require("ff_schema"))
 *   the config read from Lua       (host/host.c: a loop over the keys)
 *   `fixformer info`, `info --schema` (JSON), `info --schema --markdown` (the
 *                                   key table of docs/model-description.md)
 *   the exporter's schema          (python/fixformer_schema.json, written by
 *                                   scripts/gen_schema.py from `info --schema`)
 *   the weights a model has        (runtime/weights.c visits the weight rows),
 *   AdamW's groups (runtime/params.c), which are stored in dtype
 *   (runtime/quant.c), which are packed as matrices (gen/plan.lua, through the
 *   specs), projections stored apart (runtime/fuse.c) and import's names and
 *   shapes (import/import.c).
 * A new key is one row here, the op that uses it and its test; a new weight
 * kind that scales a linear's outputs (LayerScale) is a row of FF_WEIGHT_KINDS
 * and one of FF_WEIGHT_FOLDS, and its test. */
#ifndef FF_SCHEMA_H
#define FF_SCHEMA_H

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the values of the enum keys: V(C constant, the description's word) ---- */

#define FF_ARCH_VALUES(V)                                                                                               \
  V(FF_ARCH_ENCODER, "encoder")                 /* bidirectional encoder stack */                                      \
  V(FF_ARCH_DECODER_ONLY, "decoder-only")       /* causal self-attention stack (GPT) */                                \
  V(FF_ARCH_ENCODER_DECODER, "encoder-decoder") /* nn.Transformer: encoder + decoder with cross-attention */
#define FF_NORM_PLACE_VALUES(V)                                                                                         \
  V(FF_NORM_POST, "post") /* LN(x + f(x)) */                                                                           \
  V(FF_NORM_PRE, "pre")   /* x + f(LN(x)) */
#define FF_NORM_KIND_VALUES(V) V(FF_NORM_LAYERNORM, "layernorm") V(FF_NORM_RMSNORM, "rmsnorm")
#define FF_ACTIVATION_VALUES(V)                                                                                         \
  V(FF_ACT_RELU, "relu") V(FF_ACT_GELU, "gelu") V(FF_ACT_GELU_TANH, "gelu_tanh") V(FF_ACT_SWIGLU, "swiglu") \
  V(FF_ACT_SILU, "silu")
#define FF_POSITIONAL_VALUES(V)                                                                                         \
  V(FF_POS_NONE, "none") V(FF_POS_SINUSOIDAL, "sinusoidal") V(FF_POS_LEARNED, "learned") V(FF_POS_ROPE, "rope")
#define FF_ROPE_PAIRING_VALUES(V)                                                                                       \
  V(FF_ROPE_ROTATE_HALF, "rotate_half") /* (x[i], x[i + d_k/2]): GPT-NeoX, Hugging Face */                             \
  V(FF_ROPE_INTERLEAVED, "interleaved") /* (x[2i], x[2i+1]): Meta's LLaMA, llama2.c */
/* How the matrices of linear ops and the token embedding table are stored:
 * float32, bfloat16 (round to nearest even), or int8 with a float scale per
 * group of FF_Q8_GROUP inputs (GGML's Q8_0). */
#define FF_WEIGHT_TYPE_VALUES(V) V(FF_WEIGHT_F32, "f32") V(FF_WEIGHT_BF16, "bf16") V(FF_WEIGHT_INT8, "int8")
/* What the linear layers of the blocks compute in: float32; int8 (each input
 * row quantized when it runs, the weights per output channel, int32 sums:
 * kernels/int8.c); or bf16 (inputs and weights rounded to bfloat16, float32
 * sums of pairs: kernels/bf16.c). */
#define FF_COMPUTE_VALUES(V) V(FF_COMPUTE_F32, "f32") V(FF_COMPUTE_INT8, "int8") V(FF_COMPUTE_BF16, "bf16")
#define FF_NO_VALUES(V)

/* ---- conditions a key or a tensor needs: C(ID, name, key, test, value, why) ----
 * test: SET (the key is given and not 0), TRUE, FALSE, IS (the enum key is value).
 * A key needing one that does not hold is refused when given, as
 * "KEY: given but <why>" (why NULL: "<key> is <its value>"); a tensor needing
 * one is not in the model.  The validator checks them in this order. */
#define FF_CONDITIONS(C)                                                                                                \
  C(VOCAB, "vocab", vocab, SET, 0, "the model has no vocab")                                                         \
  C(HEAD, "lm_head", lm_head, TRUE, 0, "lm_head is false (no output head)")                                           \
  C(HEAD_BIAS, "head_bias", head_bias, TRUE, 0, NULL)                                                                 \
  C(TOKEN_TYPES, "token_types", token_types, SET, 0, NULL)                                                            \
  C(LEARNED, "learned", positional, IS, FF_POS_LEARNED, NULL)                                                         \
  C(ROPE, "rope", positional, IS, FF_POS_ROPE, NULL)                                                                  \
  C(LAYERNORM, "layernorm", norm_kind, IS, FF_NORM_LAYERNORM, NULL)                                                   \
  C(SWIGLU, "swiglu", activation, IS, FF_ACT_SWIGLU, NULL)                                                            \
  C(BIAS, "bias", bias, TRUE, 0, NULL)                                                                                \
  C(ATTENTION_BIAS, "attention_bias", attention_bias, TRUE, 0, NULL)                                                  \
  C(OUT_PROJ_BIAS, "out_proj_bias", out_proj_bias, TRUE, 0, NULL)                                                    \
  C(FINAL_NORM, "final_norm", final_norm, TRUE, 0, NULL)                                                              \
  C(EMBED_NORM, "embed_norm", embed_norm, TRUE, 0, NULL)                                                              \
  C(UNTIED, "untied", tie_embeddings, FALSE, 0, NULL)                                                                 \
  C(LAYER_SCALE, "layer_scale", layer_scale, TRUE, 0, NULL)

#define FF_CONDITION_ID(id, name, key, test, value, why) FF_COND_##id,
enum ff_condition { FF_CONDITIONS(FF_CONDITION_ID) FF_COND_COUNT };
#undef FF_CONDITION_ID
#define FF_IF(id) (1u << FF_COND_##id)          /* a row's needs: FF_IF(VOCAB) | FF_IF(HEAD) */
#define FF_ARCH_BIT(arch) (1u << (arch))
#define FF_ANY_ARCH 7u

/* ---- the description's keys --------------------------------------------------
 * K(key, kind, C storage, C field, C enum tag, values, default, min, max, needs, arches, doc)
 *   kind     IDENTIFIER (a C identifier), ENUM (one of values), INT, NUMBER
 *            (held as a float32: not 0 as one), BOOLEAN, STRING (printable, no
 *            quotes, backslashes, / * or * /), PATH (a file, relative to the
 *            description's folder; a string, not empty)
 *   storage  how ff_config holds it: NAME char[FF_NAME_MAX], TENSOR_NAME
 *            char[FF_TENSOR_NAME_MAX], PATH char[FF_PATH_MAX] (resolved), INT,
 *            FLOAT, BOOL (0/1), NOT (0/1, the key's negation: a zeroed config
 *            keeps its head), ENUM (enum tag), NONE (no field: `layers` is
 *            resolved into encoder_layers / decoder_layers)
 *   default  FF_REQUIRED, FF_NO_DEFAULT (nil), FF_DEFAULT(number or 0/1),
 *            FF_DEFAULT_STR("word"), FF_DEFAULT_OF(times, key) (times the
 *            resolved key); applied in row order after the given keys
 *   min, max INT: inclusive; NUMBER: min < x <= max; IDENTIFIER, STRING, PATH:
 *            max is the longest
 *   needs    FF_IF(...) bits: given otherwise, the key is refused
 *   arches   FF_ANY_ARCH or FF_ARCH_BIT(...): given for another, refused
 *   doc      a line of the docs' key table (Markdown)
 * The rows are in the order ff_config's fields were, the validator checks
 * and `fixformer info` prints. */
#define FF_BIG (1 << 24) /* upper bound of any size: keeps every product below 2^53 */
#define FF_DESCRIPTION_KEYS(K)                                                                                          \
  K(name, IDENTIFIER, NAME, name, _, FF_NO_VALUES, FF_REQUIRED, 0, 48, 0, FF_ANY_ARCH,                                  \
    "C identifier, prefix of everything emitted")                                                                       \
  K(arch, ENUM, ENUM, arch, ff_arch, FF_ARCH_VALUES, FF_DEFAULT_STR("encoder"), 0, 0, 0, FF_ANY_ARCH,                   \
    "the stacks: an encoder, a causal decoder (GPT, LLaMA), or both with cross-attention (`nn.Transformer`)")           \
  K(d_model, INT, INT, d_model, _, FF_NO_VALUES, FF_REQUIRED, 1, 65536, 0, FF_ANY_ARCH, "model width")                  \
  K(heads, INT, INT, heads, _, FF_NO_VALUES, FF_REQUIRED, 1, 65536, 0, FF_ANY_ARCH,                                     \
    "attention heads; must divide `d_model` (`d_k = d_model / heads`)")                                                 \
  K(d_ff, INT, INT, d_ff, _, FF_NO_VALUES, FF_DEFAULT_OF(4, d_model), 1, FF_BIG, 0, FF_ANY_ARCH,                        \
    "feed-forward hidden width (for `swiglu`: width of each of gate and up)")                                           \
  K(layers, INT, NONE, _, _, FF_NO_VALUES, FF_NO_DEFAULT, 1, 4096, 0, FF_ANY_ARCH,                                      \
    "layers of each stack; required, except for `encoder-decoder` when both below are given")                          \
  K(encoder_layers, INT, INT, encoder_layers, _, FF_NO_VALUES, FF_DEFAULT_OF(1, layers), 1, 4096, 0,                    \
    FF_ARCH_BIT(FF_ARCH_ENCODER_DECODER), "layers of the encoder")                                                      \
  K(decoder_layers, INT, INT, decoder_layers, _, FF_NO_VALUES, FF_DEFAULT_OF(1, layers), 1, 4096, 0,                    \
    FF_ARCH_BIT(FF_ARCH_ENCODER_DECODER), "layers of the decoder")                                                      \
  K(norm, ENUM, ENUM, norm, ff_norm_place, FF_NORM_PLACE_VALUES, FF_DEFAULT_STR("post"), 0, 0, 0, FF_ANY_ARCH,          \
    "`\"post\"`: `x = Norm(x + Sublayer(x))` (Vaswani, PyTorch default); `\"pre\"`: `x = x + Sublayer(Norm(x))` "       \
    "(`norm_first=True`, GPT-2, LLaMA)")                                                                                \
  K(norm_kind, ENUM, ENUM, norm_kind, ff_norm_kind, FF_NORM_KIND_VALUES, FF_DEFAULT_STR("layernorm"), 0, 0, 0,          \
    FF_ANY_ARCH, "`\"layernorm\"` (weight and bias) or `\"rmsnorm\"` (weight only)")                                    \
  K(final_norm, BOOLEAN, BOOL, final_norm, _, FF_NO_VALUES, FF_DEFAULT(0), 0, 0, 0, FF_ANY_ARCH,                        \
    "a norm after each stack (`nn.Transformer` has them)")                                                              \
  K(eps, NUMBER, FLOAT, eps, _, FF_NO_VALUES, FF_DEFAULT(1e-5), 0, 1, 0, FF_ANY_ARCH,                                   \
    "norm epsilon, not 0 as a float32 (BERT's `1e-12` works: the runtime sums norms in double, generated code in "      \
    "compensated float)")                                                                                               \
  K(activation, ENUM, ENUM, activation, ff_activation, FF_ACTIVATION_VALUES, FF_DEFAULT_STR("relu"), 0, 0, 0,           \
    FF_ANY_ARCH, "of the feed-forward: `\"gelu\"` is erf's, `\"gelu_tanh\"` its tanh approximation, `\"silu\"` x sigmoid(x) (Marian's swish)")                    \
  K(bias, BOOLEAN, BOOL, bias, _, FF_NO_VALUES, FF_DEFAULT(1), 0, 0, 0, FF_ANY_ARCH,                                    \
    "biases in the feed-forward projections (and in attention's, unless `attention_bias` says)")                       \
  K(attention_bias, BOOLEAN, BOOL, attention_bias, _, FF_NO_VALUES, FF_DEFAULT_OF(1, bias), 0, 0, 0, FF_ANY_ARCH,       \
    "biases in the attention projections (q, k, v and out): `bias = false, attention_bias = true` has them and a "     \
    "feed-forward without (Hugging Face LLaMA's `attention_bias`)")                                                     \
  K(out_proj_bias, BOOLEAN, BOOL, out_proj_bias, _, FF_NO_VALUES, FF_DEFAULT_OF(1, attention_bias), 0, 0, 0,          \
    FF_ANY_ARCH, "a bias in attention's output projection (out_proj): `attention_bias = true, out_proj_bias = false` "  \
    "has the q, k, v biases only (Qwen2)")                                                                              \
  K(vocab, INT, INT, vocab, _, FF_NO_VALUES, FF_NO_DEFAULT, 1, FF_BIG, 0, FF_ANY_ARCH,                                  \
    "token vocabulary size; `nil`: no embeddings, inputs are float `[B,T,d_model]` and the output is hidden states")    \
  K(positional, ENUM, ENUM, positional, ff_positional, FF_POSITIONAL_VALUES, FF_DEFAULT_STR("none"), 0, 0, 0,           \
    FF_ANY_ARCH, "positions: added sinusoids, a learned table, or rotary (RoPE) in self-attention")                    \
  K(rope_theta, NUMBER, FLOAT, rope_theta, _, FF_NO_VALUES, FF_DEFAULT(10000), 1, 1e12, FF_IF(ROPE), FF_ANY_ARCH,       \
    "RoPE base")                                                                                                        \
  K(kv_heads, INT, INT, kv_heads, _, FF_NO_VALUES, FF_DEFAULT_OF(1, heads), 1, 65536, 0, FF_ANY_ARCH,                   \
    "key/value heads (grouped-query attention; `1`: multi-query); must divide `heads`. Query head `h` reads K/V head "  \
    "`h / (heads / kv_heads)` (Hugging Face's `repeat_kv` order); `in_proj` has `(heads + 2*kv_heads)*d_k` rows; the " \
    "key/value caches hold `kv_heads*d_k` floats a position. Self- and cross-attention")                               \
  K(rope_pairing, ENUM, ENUM, rope_pairing, ff_rope_pairing, FF_ROPE_PAIRING_VALUES, FF_DEFAULT_STR("rotate_half"), 0,  \
    0, FF_IF(ROPE), FF_ANY_ARCH,                                                                                        \
    "`\"rotate_half\"` rotates `(x[i], x[i + d_k/2])` (GPT-NeoX, Hugging Face LLaMA); `\"interleaved\"` rotates "       \
    "`(x[2i], x[2i+1])` (Meta's LLaMA, llama2.c); the same frequencies `rope_theta^(-2i/d_k)`")                        \
  K(scale_embeddings, BOOLEAN, BOOL, scale_embeddings, _, FF_NO_VALUES, FF_DEFAULT(1), 0, 0, 0, FF_ANY_ARCH,            \
    "multiply token embeddings by `sqrt(d_model)`")                                                                     \
  K(tie_embeddings, BOOLEAN, BOOL, tie_embeddings, _, FF_NO_VALUES, FF_DEFAULT(1), 0, 0, 0, FF_ANY_ARCH,                \
    "the output head is the embedding matrix")                                                                          \
  K(max_seq, INT, INT, max_seq, _, FF_NO_VALUES, FF_DEFAULT(512), 1, 1 << 20, 0, FF_ANY_ARCH,                           \
    "longest sequence (learned positions have this many rows)")                                                         \
  K(prefix, STRING, TENSOR_NAME, prefix, _, FF_NO_VALUES, FF_DEFAULT_STR(""), 0, 128, 0, FF_ANY_ARCH,                   \
    "prepended to the layer stack's names (`layers.*`, `encoder.*`, `decoder.*`, `norm.*`), e.g. `\"model.\"` for "     \
    "`self.model = nn.TransformerEncoder(...)`; not to `embed_weight`, `pos_embed_weight`, `lm_head_weight`, which "    \
    "are named in full")                                                                                                \
  K(embed_weight, STRING, TENSOR_NAME, embed_weight, _, FF_NO_VALUES, FF_DEFAULT_STR("embed.weight"), 0, 128,            \
    FF_IF(VOCAB), FF_ANY_ARCH, "name of the token embedding `[vocab, d_model]`")                                        \
  K(pos_embed_weight, STRING, TENSOR_NAME, pos_embed_weight, _, FF_NO_VALUES, FF_DEFAULT_STR("pos_embed.weight"), 0,     \
    128, FF_IF(LEARNED), FF_ANY_ARCH, "name of the learned positions `[max_seq, d_model]`")                            \
  K(lm_head_weight, STRING, TENSOR_NAME, lm_head_weight, _, FF_NO_VALUES, FF_DEFAULT_STR("lm_head.weight"), 0, 128,      \
    FF_IF(VOCAB) | FF_IF(HEAD), FF_ANY_ARCH, "name of the untied output head `[vocab, d_model]`")                       \
  K(head_bias, BOOLEAN, BOOL, head_bias, _, FF_NO_VALUES, FF_DEFAULT(0), 0, 0, FF_IF(VOCAB) | FF_IF(HEAD), FF_ANY_ARCH,  \
    "the output head adds a bias `[vocab]`: `logits = h W^T + b` (the `decoder.bias` of PyTorch's `nn.Transformer` "   \
    "language-model tutorial); tied heads may have one too")                                                            \
  K(lm_head_bias, STRING, TENSOR_NAME, lm_head_bias, _, FF_NO_VALUES, FF_DEFAULT_STR("lm_head.bias"), 0, 128,            \
    FF_IF(VOCAB) | FF_IF(HEAD) | FF_IF(HEAD_BIAS), FF_ANY_ARCH, "name of that bias")                                   \
  K(lm_head, BOOLEAN, NOT, no_lm_head, _, FF_NO_VALUES, FF_DEFAULT(1), 0, 0, FF_IF(VOCAB), FF_ANY_ARCH,                 \
    "`false`: no output head; the output is the hidden states `[B,T,d_model]` (BERT's encoder output); `generate` "    \
    "needs a head")                                                                                                     \
  K(token_types, INT, INT, token_types, _, FF_NO_VALUES, FF_DEFAULT(0), 0, FF_BIG, FF_IF(VOCAB), FF_ANY_ARCH,           \
    "`> 0`: a token-type (segment) embedding `[token_types, d_model]` whose row 0 is added at every position (BERT "   \
    "with `token_type_ids` all 0)")                                                                                     \
  K(token_type_embed_weight, STRING, TENSOR_NAME, token_type_embed_weight, _, FF_NO_VALUES,                             \
    FF_DEFAULT_STR("token_type_embed.weight"), 0, 128, FF_IF(VOCAB) | FF_IF(TOKEN_TYPES), FF_ANY_ARCH,                  \
    "name of that embedding")                                                                                           \
  K(embed_norm, BOOLEAN, BOOL, embed_norm, _, FF_NO_VALUES, FF_DEFAULT(0), 0, 0, 0, FF_ANY_ARCH,                        \
    "a norm (`norm_kind`, the model's `eps`) of the summed embeddings before the first layer (BERT's "                  \
    "`embeddings.LayerNorm`): `embed_norm.weight`, `embed_norm.bias`")                                                  \
  K(layer_scale, BOOLEAN, BOOL, layer_scale, _, FF_NO_VALUES, FF_DEFAULT(0), 0, 0, 0, FF_ANY_ARCH,                      \
    "LayerScale (CaiT, DINOv2): each sub-layer's output times a learned vector before the residual add: "              \
    "`ls1.gamma` (self-attention), `ls2.gamma` (feed-forward), `ls_cross.gamma` (cross-attention), "                   \
    "`[d_model]`, no weight decay (AdamW's norm group); folded into the rows of the linear before it at load, "       \
    "and a `dtype` other than f32 stores the folded rows")                                                              \
  K(dtype, ENUM, ENUM, weight_type, ff_weight_type, FF_WEIGHT_TYPE_VALUES, FF_DEFAULT_STR("f32"), 0, 0, 0, FF_ANY_ARCH,  \
    "the weight type of the matrices of linear ops (attention, feed-forward, the output head) and the token "           \
    "embedding table ([Weight types](#weight-types)); `--dtype` on `run`, `generate`, `bench`, `emit`, `info` "         \
    "overrides it. Biases, norms, positional and token-type tables stay float32")                                       \
  K(compute, ENUM, ENUM, compute, ff_compute, FF_COMPUTE_VALUES, FF_DEFAULT_STR("f32"), 0, 0, 0, FF_ANY_ARCH,        \
    "what the linear layers of the blocks (attention's projections, the feed-forward) compute in: `f32`; `int8` "    \
    "(opt-in: each input row quantized when it runs, the weights per output channel, exact int32 sums); or `bf16` " \
    "(opt-in: inputs and weights rounded to bfloat16, float32 sums) ([Compute types](#compute-types)); "             \
    "`--compute` on `run`, `generate`, `bench`, `emit`, `info` overrides it. "                                        \
    "Embeddings, the output head, attention's scores, norms and activations stay float32")                            \
  K(weights, PATH, PATH, weights, _, FF_NO_VALUES, FF_NO_DEFAULT, 0, 256, 0, FF_ANY_ARCH,                               \
    "the model's safetensors file, relative to the description's folder: the default of `--weights`")                  \
  K(vocabulary, PATH, PATH, vocabulary, _, FF_NO_VALUES, FF_NO_DEFAULT, 0, 256, FF_IF(VOCAB), FF_ANY_ARCH,              \
    "its tokenizer: a JSON vocabulary (below), a Hugging Face `tokenizer.json` or a llama2.c `tokenizer.bin` "          \
    "([Tokenizers](#tokenizers)), relative to the description's folder: lets `generate` take and print text")

#define FF_KEY_ID(key, ...) FF_KEY_##key,
enum ff_key { FF_KEY_NONE = -1, FF_DESCRIPTION_KEYS(FF_KEY_ID) FF_KEY_COUNT };
#undef FF_KEY_ID

/* ---- the tensors a model may have -------------------------------------------
 * Sizes a shape is made of: X(ID, name, what) */
#define FF_DIMS(X)                                                                                                      \
  X(NONE, "", "no second dimension: a vector")                                                                         \
  X(D_MODEL, "d_model", "the model width")                                                                             \
  X(D_FF, "d_ff", "the feed-forward width")                                                                            \
  X(UP, "up", "d_ff, or 2*d_ff for swiglu (rows gate | up)")                                                           \
  X(QKV, "qkv", "d_model + 2*kv_heads*d_k (rows q of every head | k | v of the kv_heads heads)")                       \
  X(KV, "kv", "kv_heads*d_k")                                                                                           \
  X(VOCAB, "vocab", "the vocabulary")                                                                                   \
  X(MAX_SEQ, "max_seq", "the longest sequence")                                                                        \
  X(TOKEN_TYPES, "token_types", "the token types")
/* Where a tensor sits, which sets its name: X(ID, name, what) */
#define FF_SCOPES(X)                                                                                                    \
  X(EMBEDDINGS, "embeddings", "before the stacks; no prefix")                                                          \
  X(LAYER, "layer", "in every layer: prefix, stack (encoder-decoder), layers.{i}.")                                    \
  X(CROSS, "cross", "in every decoder layer of encoder-decoder (cross-attention): as layer")                            \
  X(STACK, "stack", "after each stack's layers: prefix, stack (encoder-decoder)")                                      \
  X(HEAD, "head", "after the stacks; no prefix")
/* How `fixformer init` draws it (PyTorch's defaults): X(ID, name) */
#define FF_INITS(X)                                                                                                     \
  X(XAVIER, "xavier_uniform") /* gain 1: U(-a, a), a = sqrt(6 / (fan_in + fan_out)) */                                \
  X(LINEAR, "linear")         /* nn.Linear weight: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) */                              \
  X(LINEAR_BIAS, "linear_bias") /* nn.Linear bias: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) */                              \
  X(NORMAL, "normal")         /* nn.Embedding: N(0, 1) */                                                              \
  X(ZEROS, "zeros")                                                                                                     \
  X(ONES, "ones")

#define FF_SCHEMA_ENUM_ID(id, ...) FF_DIM_##id,
enum ff_dim { FF_DIMS(FF_SCHEMA_ENUM_ID) FF_DIM_COUNT };
#undef FF_SCHEMA_ENUM_ID
#define FF_SCHEMA_ENUM_ID(id, ...) FF_SCOPE_##id,
enum ff_scope { FF_SCOPES(FF_SCHEMA_ENUM_ID) FF_SCOPE_COUNT };
#undef FF_SCHEMA_ENUM_ID
#define FF_SCHEMA_ENUM_ID(id, ...) FF_INIT_##id,
#define FF_SCHEMA_ONE(...) +1
enum ff_init { FF_INITS(FF_SCHEMA_ENUM_ID) };
enum { FF_INIT_COUNT = 0 FF_INITS(FF_SCHEMA_ONE) }; /* apart: switches name every init */
#undef FF_SCHEMA_ONE
#undef FF_SCHEMA_ENUM_ID

/* What a tensor is: a matrix linear ops multiply by (packed in panels),
 * stored in the model's dtype, the output head's matrix when tie_embeddings,
 * and AdamW's groups (no weight decay for biases, norms, embeddings). */
enum {
  FF_IS_MATRIX = 1,
  FF_IS_QUANTIZED = 2,
  FF_IS_TIED = 4,
  FF_IS_BIAS = 8,
  FF_IS_NORM = 16,
  FF_IS_EMBEDDING = 32
};

/* W(ID, role, scope, needs, rows, cols, init, fan_in, flags, named by, slot, parts)
 *   role     the name inside its layer or stack (PyTorch's), or the tensor's
 *            role when a key names it
 *   needs    FF_IF(...) bits: the model has the tensor when all hold
 *   rows, cols   FF_DIMS (cols NONE: a vector); fan_out is rows
 *   named by the key whose value is its full name (no prefix), or NONE
 *   slot     where the runtime binds it (runtime/ff_runtime.h): a member of
 *            ff_rt_weights (embeddings, head), ff_rt_layer_w (layer, cross)
 *            or ff_rt_norm_w (stack)
 *   parts    FF_NO_PARTS, or FF_PARTS(needs, role, rows, role, rows, role,
 *            rows): the tensors a checkpoint may hold instead (Hugging Face's
 *            q_proj, k_proj, v_proj; gate_proj, up_proj), stacked by rows
 * The rows are in the order the runtime lists (and `init` draws) them. */
#define FF_QKV_PARTS(module, what)                                                                                      \
  FF_PARTS(0, module ".q_proj." what, D_MODEL, module ".k_proj." what, KV, module ".v_proj." what, KV)
#define FF_WEIGHT_KINDS(W)                                                                                              \
  W(EMBED, "embed", EMBEDDINGS, FF_IF(VOCAB), VOCAB, D_MODEL, NORMAL, D_MODEL,                                          \
    FF_IS_QUANTIZED | FF_IS_TIED | FF_IS_EMBEDDING, embed_weight, embed, FF_NO_PARTS)                                   \
  W(POS_EMBED, "pos_embed", EMBEDDINGS, FF_IF(LEARNED), MAX_SEQ, D_MODEL, NORMAL, D_MODEL, FF_IS_EMBEDDING,             \
    pos_embed_weight, pos_embed, FF_NO_PARTS)                                                                           \
  W(TOKEN_TYPE_EMBED, "token_type_embed", EMBEDDINGS, FF_IF(VOCAB) | FF_IF(TOKEN_TYPES), TOKEN_TYPES, D_MODEL, NORMAL,  \
    D_MODEL, FF_IS_EMBEDDING, token_type_embed_weight, token_type_embed, FF_NO_PARTS)                                   \
  W(EMBED_NORM_WEIGHT, "embed_norm.weight", EMBEDDINGS, FF_IF(EMBED_NORM), D_MODEL, NONE, ONES, D_MODEL, FF_IS_NORM,    \
    NONE, embed_norm.weight, FF_NO_PARTS)                                                                               \
  W(EMBED_NORM_BIAS, "embed_norm.bias", EMBEDDINGS, FF_IF(EMBED_NORM) | FF_IF(LAYERNORM), D_MODEL, NONE, ZEROS,         \
    D_MODEL, FF_IS_NORM | FF_IS_BIAS, NONE, embed_norm.bias, FF_NO_PARTS)                                              \
  W(SELF_IN_PROJ_WEIGHT, "self_attn.in_proj_weight", LAYER, 0, QKV, D_MODEL, XAVIER, D_MODEL,                           \
    FF_IS_MATRIX | FF_IS_QUANTIZED, NONE, self_attn.in_proj.weight, FF_QKV_PARTS("self_attn", "weight"))                \
  W(SELF_IN_PROJ_BIAS, "self_attn.in_proj_bias", LAYER, FF_IF(ATTENTION_BIAS), QKV, NONE, ZEROS, D_MODEL,               \
    FF_IS_BIAS, NONE, self_attn.in_proj.bias, FF_QKV_PARTS("self_attn", "bias"))                                        \
  W(SELF_OUT_PROJ_WEIGHT, "self_attn.out_proj.weight", LAYER, 0, D_MODEL, D_MODEL, LINEAR, D_MODEL,                     \
    FF_IS_MATRIX | FF_IS_QUANTIZED, NONE, self_attn.out_proj.weight, FF_NO_PARTS)                                       \
  W(SELF_OUT_PROJ_BIAS, "self_attn.out_proj.bias", LAYER, FF_IF(OUT_PROJ_BIAS), D_MODEL, NONE, ZEROS, D_MODEL,         \
    FF_IS_BIAS, NONE, self_attn.out_proj.bias, FF_NO_PARTS)                                                             \
  W(LS1, "ls1.gamma", LAYER, FF_IF(LAYER_SCALE), D_MODEL, NONE, ONES, D_MODEL, FF_IS_NORM, NONE, folded[0],             \
    FF_NO_PARTS)                                                                                                        \
  W(CROSS_IN_PROJ_WEIGHT, "multihead_attn.in_proj_weight", CROSS, 0, QKV, D_MODEL, XAVIER, D_MODEL,                     \
    FF_IS_MATRIX | FF_IS_QUANTIZED, NONE, cross_attn.in_proj.weight, FF_QKV_PARTS("multihead_attn", "weight"))          \
  W(CROSS_IN_PROJ_BIAS, "multihead_attn.in_proj_bias", CROSS, FF_IF(ATTENTION_BIAS), QKV, NONE, ZEROS, D_MODEL,         \
    FF_IS_BIAS, NONE, cross_attn.in_proj.bias, FF_QKV_PARTS("multihead_attn", "bias"))                                  \
  W(CROSS_OUT_PROJ_WEIGHT, "multihead_attn.out_proj.weight", CROSS, 0, D_MODEL, D_MODEL, LINEAR, D_MODEL,               \
    FF_IS_MATRIX | FF_IS_QUANTIZED, NONE, cross_attn.out_proj.weight, FF_NO_PARTS)                                      \
  W(CROSS_OUT_PROJ_BIAS, "multihead_attn.out_proj.bias", CROSS, FF_IF(OUT_PROJ_BIAS), D_MODEL, NONE, ZEROS, D_MODEL,   \
    FF_IS_BIAS, NONE, cross_attn.out_proj.bias, FF_NO_PARTS)                                                            \
  W(LS_CROSS, "ls_cross.gamma", CROSS, FF_IF(LAYER_SCALE), D_MODEL, NONE, ONES, D_MODEL, FF_IS_NORM, NONE, folded[2],   \
    FF_NO_PARTS)                                                                                                        \
  W(LINEAR1_WEIGHT, "linear1.weight", LAYER, 0, UP, D_MODEL, LINEAR, D_MODEL, FF_IS_MATRIX | FF_IS_QUANTIZED, NONE,     \
    linear1.weight, FF_PARTS(FF_IF(SWIGLU), "gate_proj.weight", D_FF, "up_proj.weight", D_FF, NULL, NONE))             \
  W(LINEAR1_BIAS, "linear1.bias", LAYER, FF_IF(BIAS), UP, NONE, LINEAR_BIAS, D_MODEL, FF_IS_BIAS, NONE, linear1.bias,   \
    FF_PARTS(FF_IF(SWIGLU), "gate_proj.bias", D_FF, "up_proj.bias", D_FF, NULL, NONE))                                 \
  W(LINEAR2_WEIGHT, "linear2.weight", LAYER, 0, D_MODEL, D_FF, LINEAR, D_FF, FF_IS_MATRIX | FF_IS_QUANTIZED, NONE,      \
    linear2.weight, FF_NO_PARTS)                                                                                        \
  W(LINEAR2_BIAS, "linear2.bias", LAYER, FF_IF(BIAS), D_MODEL, NONE, LINEAR_BIAS, D_FF, FF_IS_BIAS, NONE, linear2.bias, \
    FF_NO_PARTS)                                                                                                        \
  W(LS2, "ls2.gamma", LAYER, FF_IF(LAYER_SCALE), D_MODEL, NONE, ONES, D_MODEL, FF_IS_NORM, NONE, folded[1],             \
    FF_NO_PARTS)                                                                                                        \
  W(NORM1_WEIGHT, "norm1.weight", LAYER, 0, D_MODEL, NONE, ONES, D_MODEL, FF_IS_NORM, NONE, norm1.weight, FF_NO_PARTS)  \
  W(NORM1_BIAS, "norm1.bias", LAYER, FF_IF(LAYERNORM), D_MODEL, NONE, ZEROS, D_MODEL, FF_IS_NORM | FF_IS_BIAS, NONE,    \
    norm1.bias, FF_NO_PARTS)                                                                                            \
  W(NORM2_WEIGHT, "norm2.weight", LAYER, 0, D_MODEL, NONE, ONES, D_MODEL, FF_IS_NORM, NONE, norm2.weight, FF_NO_PARTS)  \
  W(NORM2_BIAS, "norm2.bias", LAYER, FF_IF(LAYERNORM), D_MODEL, NONE, ZEROS, D_MODEL, FF_IS_NORM | FF_IS_BIAS, NONE,    \
    norm2.bias, FF_NO_PARTS)                                                                                            \
  W(NORM3_WEIGHT, "norm3.weight", CROSS, 0, D_MODEL, NONE, ONES, D_MODEL, FF_IS_NORM, NONE, norm3.weight, FF_NO_PARTS)  \
  W(NORM3_BIAS, "norm3.bias", CROSS, FF_IF(LAYERNORM), D_MODEL, NONE, ZEROS, D_MODEL, FF_IS_NORM | FF_IS_BIAS, NONE,    \
    norm3.bias, FF_NO_PARTS)                                                                                            \
  W(FINAL_NORM_WEIGHT, "norm.weight", STACK, FF_IF(FINAL_NORM), D_MODEL, NONE, ONES, D_MODEL, FF_IS_NORM, NONE, weight, \
    FF_NO_PARTS)                                                                                                        \
  W(FINAL_NORM_BIAS, "norm.bias", STACK, FF_IF(FINAL_NORM) | FF_IF(LAYERNORM), D_MODEL, NONE, ZEROS, D_MODEL,           \
    FF_IS_NORM | FF_IS_BIAS, NONE, bias, FF_NO_PARTS)                                                                  \
  W(LM_HEAD, "lm_head", HEAD, FF_IF(VOCAB) | FF_IF(HEAD) | FF_IF(UNTIED), VOCAB, D_MODEL, NORMAL, D_MODEL,               \
    FF_IS_MATRIX | FF_IS_QUANTIZED, lm_head_weight, lm_head, FF_NO_PARTS)                                               \
  W(LM_HEAD_BIAS, "lm_head_bias", HEAD, FF_IF(VOCAB) | FF_IF(HEAD) | FF_IF(HEAD_BIAS), VOCAB, NONE, LINEAR_BIAS,        \
    D_MODEL, FF_IS_BIAS, lm_head_bias, lm_head_bias, FF_NO_PARTS)

#define FF_WEIGHT_KIND_ID(id, ...) FF_TENSOR_##id,
enum ff_tensor_kind { FF_WEIGHT_KINDS(FF_WEIGHT_KIND_ID) FF_TENSOR_COUNT };
#undef FF_WEIGHT_KIND_ID

/* ---- kinds folded into a linear: F(scale, weight, bias) ------------------------
 * scale, a vector kind [rows of weight], multiplies the output channels of the
 * linear weight (and bias: a kind the model may not have) before anything
 * reads them: y = scale * (x W^T + b) = x (diag(scale) W)^T + scale * b.  The
 * ops never see scale: the weights are folded once at load for inference (the
 * runtime and the packed weights of generated code), and a training step
 * computes with folded copies and takes the gradient back through the fold
 * (runtime/fold.c; generated training code: gen/train.lua), so a kind of this
 * form is its row in FF_WEIGHT_KINDS (slot folded[i], i free in its layer) and
 * its row here.  A scale kind's scope is its weight's. */
#define FF_WEIGHT_FOLDS(F)                                                                                              \
  F(LS1, SELF_OUT_PROJ_WEIGHT, SELF_OUT_PROJ_BIAS)                                                                      \
  F(LS_CROSS, CROSS_OUT_PROJ_WEIGHT, CROSS_OUT_PROJ_BIAS)                                                               \
  F(LS2, LINEAR2_WEIGHT, LINEAR2_BIAS)

#define FF_WEIGHT_FOLD_ONE(...) +1
enum { FF_FOLD_COUNT = 0 FF_WEIGHT_FOLDS(FF_WEIGHT_FOLD_ONE) };
#undef FF_WEIGHT_FOLD_ONE

#ifdef __cplusplus
}
#endif

#endif
