/* import.c - ff_import (fixformer.h), what `fixformer import SRC -o DIR
 * [--name NAME] [--tokenizer FILE] [--max-seq N]` calls.
 *
 * Reads a checkpoint as its users have it and writes what every other
 * command takes: DIR/NAME.lua (the description, naming its weights and
 * tokenizer by relative path), DIR/NAME.safetensors (float32, tensors renamed
 * to fixformer's names: separate q/k/v and gate/up kept separate, GPT-2's
 * Conv1D [in,out] transposed to [out,in]) and the tokenizer copied beside
 * them.  Sources:
 *   - a Hugging Face folder: config.json + model.safetensors, or the shards
 *     of model.safetensors.index.json; families llama, qwen2, gpt2, bert;
 *   - a llama2.c checkpoint: the legacy .bin (7 int32 header) or version 1
 *     (magic "ak42", 256-byte header);
 *   - a GGUF file (versions 2 and 3; architectures llama and qwen2; F32, F16,
 *     BF16 and Q8_0 tensors; the tokenizer of its metadata): import/gguf.c.
 * Every source tensor is mapped, or ignored for a stated reason, or the
 * import fails naming it; the files appear all or none.  What was mapped and
 * ignored goes to the caller's report function a line at a time, never to
 * stdout: library code does not print. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "ff_config.h"
#include "ff_gguf.h"
#include "ff_io.h"
#include "ff_json.h"
#include "ff_runtime.h" /* the schema's rows (ff_rt_schema.h), ff_rt_shape_text */
#include "fixformer.h"
#include "import_internal.h"

/* The config whose sizes (ff_rt_dim: d_model, d_ff, qkv, kv, ...) a
 * tensor's shape is made of: the schema's shapes for the model imported. */
static void dims_of(const model_desc *d, ff_config *c) {
  memset(c, 0, sizeof *c);
  c->d_model = d->d_model, c->heads = d->heads, c->kv_heads = d->kv_heads, c->d_ff = d->d_ff;
  c->vocab = d->vocab, c->max_seq = d->max_seq, c->token_types = d->token_types;
  c->activation = d->activation && !strcmp(d->activation, "swiglu") ? FF_ACT_SWIGLU : FF_ACT_RELU;
  c->norm_kind = d->norm_kind && !strcmp(d->norm_kind, "rmsnorm") ? FF_NORM_RMSNORM : FF_NORM_LAYERNORM;
  c->positional = !d->positional ? FF_POS_NONE : !strcmp(d->positional, "rope") ? FF_POS_ROPE
                  : !strcmp(d->positional, "learned") ? FF_POS_LEARNED : FF_POS_NONE;
  c->bias = d->bias, c->attention_bias = d->bias || d->qkv_bias, c->out_proj_bias = d->bias;
  c->tie_embeddings = d->tie, c->final_norm = d->final_norm, c->embed_norm = d->embed_norm;
  c->head_bias = d->head_bias;
}

/* Whether the model imported has r's tensor (the schema's conditions: Qwen2's q/k/v biases, an untied head) */
static int role_present(const model_desc *d, enum ff_tensor_kind kind) {
  ff_config c;
  dims_of(d, &c);
  return ff_rt_needs_hold(&c, ff_rt_weight_kinds[kind].needs);
}

/* ---- the tensors to write ------------------------------------------------- */

typedef struct {
  char name[FF_TENSOR_NAME_MAX];
  int rank;
  int64_t shape[2];
  const float *data;
  float *owned;       /* a transposed copy, or NULL */
} out_tensor;

typedef struct outputs {
  out_tensor *t;
  int n, cap;
  size_t params;
} outputs;

static int out_add(outputs *o, const char *name, int64_t rows, int64_t cols, const float *data, float *owned,
                   ff_error *err) {
  if (o->n == o->cap) {
    int cap = o->cap ? 2 * o->cap : 64;
    out_tensor *t = realloc(o->t, (size_t)cap * sizeof *t);
    if (!t) {
      free(owned);
      return ff_fail(err, FF_ENOMEM, "out of memory");
    }
    o->t = t;
    o->cap = cap;
  }
  out_tensor *t = &o->t[o->n++];
  snprintf(t->name, sizeof t->name, "%s", name);
  t->rank = cols ? 2 : 1;
  t->shape[0] = rows;
  t->shape[1] = cols;
  t->data = data;
  t->owned = owned;
  o->params += (size_t)rows * (size_t)(cols ? cols : 1);
  return 0;
}

static void out_free(outputs *o) {
  for (int i = 0; i < o->n; i++) free(o->t[i].owned);
  free(o->t);
  memset(o, 0, sizeof *o);
}

/* ---- config.json ------------------------------------------------------------ */

/* Reads keys of config.json; the first problem is kept in err and later
 * reads return their defaults, so a family's reader checks rc once. */
typedef struct {
  const cJSON *root;
  const char *path;
  ff_error *err;
  int rc;
} config_reader;

static const cJSON *cfg_get(config_reader *c, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(c->root, key);
  return v && !cJSON_IsNull(v) ? v : NULL;
}

/* an integer in [lo, hi]; def < 0: required */
static int cfg_int(config_reader *c, const char *key, int def, int lo, int hi) {
  if (c->rc) return def;
  const cJSON *v = cfg_get(c, key);
  if (!v) {
    if (def < 0) c->rc = ff_fail(c->err, FF_EINVAL, "%s: '%s' is missing", c->path, key);
    return def;
  }
  double x = cJSON_IsNumber(v) ? v->valuedouble : NAN;
  if (!(x == floor(x) && x >= lo && x <= hi)) {
    c->rc = ff_fail(c->err, FF_EINVAL, "%s: '%s': expected an integer in %d..%d", c->path, key, lo, hi);
    return def;
  }
  return (int)x;
}

static double cfg_num(config_reader *c, const char *key, double def) {
  if (c->rc) return def;
  const cJSON *v = cfg_get(c, key);
  if (!v) return def;
  if (!cJSON_IsNumber(v) || !(v->valuedouble > 0 && v->valuedouble < 1e12))
    c->rc = ff_fail(c->err, FF_EINVAL, "%s: '%s': expected a positive number", c->path, key);
  return c->rc ? def : v->valuedouble;
}

static int cfg_bool(config_reader *c, const char *key, int def) {
  if (c->rc) return def;
  const cJSON *v = cfg_get(c, key);
  if (!v) return def;
  if (!cJSON_IsBool(v)) c->rc = ff_fail(c->err, FF_EINVAL, "%s: '%s': expected true or false", c->path, key);
  return c->rc ? def : cJSON_IsTrue(v);
}

static const char *cfg_str(config_reader *c, const char *key, const char *def) {
  if (c->rc) return def;
  const cJSON *v = cfg_get(c, key);
  if (!v) return def;
  if (!cJSON_IsString(v)) c->rc = ff_fail(c->err, FF_EINVAL, "%s: '%s': expected a string", c->path, key);
  return c->rc ? def : v->valuestring;
}

/* A setting fixformer does not compute: one line naming the key. */
static void cfg_unsupported(config_reader *c, const char *key, const char *why) {
  if (!c->rc) c->rc = ff_fail(c->err, FF_EINVAL, "%s: '%s': %s", c->path, key, why);
}

/* hidden_act / activation_function -> fixformer's activation, or NULL */
static const char *activation_of(const char *act) {
  static const char *const map[][2] = {{"gelu_new", "gelu_tanh"}, {"gelu_pytorch_tanh", "gelu_tanh"},
                                       {"gelu_fast", "gelu_tanh"}, {"gelu", "gelu"}, {"relu", "relu"},
                                       {"swish", "silu"}, {"silu", "silu"}};
  for (size_t i = 0; i < sizeof map / sizeof *map; i++)
    if (!strcmp(act, map[i][0])) return map[i][1];
  return NULL;
}

/* The shapes every family needs: heads divide d_model, kv_heads divide heads, RoPE an even d_k. */
static void cfg_check_shapes(config_reader *c, model_desc *d, const char *heads_key) {
  if (c->rc) return;
  if (d->d_model % d->heads)
    c->rc = ff_fail(c->err, FF_EINVAL, "%s: '%s': %d does not divide the hidden size %d", c->path, heads_key,
                    d->heads, d->d_model);
  else if (d->heads % d->kv_heads)
    c->rc = ff_fail(c->err, FF_EINVAL, "%s: 'num_key_value_heads': %d does not divide %d heads", c->path,
                    d->kv_heads, d->heads);
  else if (!strcmp(d->positional, "rope") && (d->d_model / d->heads) % 2)
    c->rc = ff_fail(c->err, FF_EINVAL, "%s: RoPE needs an even head width, got %d", c->path, d->d_model / d->heads);
}

static void llama_config(config_reader *c, model_desc *d) {
  *d = (model_desc){.family = "llama", .arch = "decoder-only", .norm = "pre", .norm_kind = "rmsnorm",
                    .activation = "swiglu", .positional = "rope", .rope_pairing = "rotate_half"};
  d->d_model = cfg_int(c, "hidden_size", -1, 1, 65536);
  d->heads = cfg_int(c, "num_attention_heads", -1, 1, 65536);
  d->kv_heads = cfg_int(c, "num_key_value_heads", d->heads, 1, 65536);
  d->d_ff = cfg_int(c, "intermediate_size", -1, 1, 1 << 24);
  d->layers = cfg_int(c, "num_hidden_layers", -1, 1, 4096);
  d->vocab = cfg_int(c, "vocab_size", -1, 1, 1 << 24);
  d->max_seq = cfg_int(c, d->max_seq_key = "max_position_embeddings", 2048, 1, 1 << 20);
  d->eps = cfg_num(c, "rms_norm_eps", 1e-6);
  d->rope_theta = cfg_num(c, "rope_theta", 10000);
  d->tie = cfg_bool(c, "tie_word_embeddings", 0);
  d->final_norm = d->lm_head = d->has_kv_heads = 1;
  const char *act = cfg_str(c, "hidden_act", "silu");
  if (strcmp(act, "silu")) cfg_unsupported(c, "hidden_act", "only \"silu\" (SwiGLU) is supported");
  if (cfg_get(c, "rope_scaling")) cfg_unsupported(c, "rope_scaling", "RoPE scaling is not supported (plain RoPE only)");
  if (cfg_bool(c, "attention_bias", 0)) cfg_unsupported(c, "attention_bias", "biases in attention only are not supported");
  if (cfg_bool(c, "mlp_bias", 0)) cfg_unsupported(c, "mlp_bias", "biases in the MLP only are not supported");
  if (!c->rc && d->heads && cfg_int(c, "head_dim", d->d_model / d->heads, 1, 65536) != d->d_model / d->heads)
    cfg_unsupported(c, "head_dim", "must be hidden_size / num_attention_heads");
  cfg_check_shapes(c, d, "num_attention_heads");
}

/* Qwen2: LLaMA's shape with q, k and v biases (no o_proj or MLP biases) */
static void qwen2_config(config_reader *c, model_desc *d) {
  llama_config(c, d);
  d->family = "qwen2", d->qkv_bias = 1;
  d->tie = cfg_bool(c, "tie_word_embeddings", 0);
  if (cfg_bool(c, "use_sliding_window", 0))
    cfg_unsupported(c, "use_sliding_window", "sliding-window attention is not supported");
}

static void gpt2_config(config_reader *c, model_desc *d) {
  *d = (model_desc){.family = "gpt2", .arch = "decoder-only", .norm = "pre", .norm_kind = "layernorm",
                    .positional = "learned"};
  d->d_model = cfg_int(c, "n_embd", -1, 1, 65536);
  d->heads = d->kv_heads = cfg_int(c, "n_head", -1, 1, 65536);
  d->d_ff = cfg_int(c, "n_inner", 4 * d->d_model, 1, 1 << 24);
  d->layers = cfg_int(c, "n_layer", -1, 1, 4096);
  d->vocab = cfg_int(c, "vocab_size", -1, 1, 1 << 24);
  d->max_seq = cfg_int(c, d->max_seq_key = "n_positions", 1024, 1, 1 << 20);
  d->eps = cfg_num(c, "layer_norm_epsilon", 1e-5);
  d->tie = cfg_bool(c, "tie_word_embeddings", 1);
  d->final_norm = d->bias = d->lm_head = 1;
  const char *act = cfg_str(c, "activation_function", "gelu_new");
  if (!c->rc && !(d->activation = activation_of(act)))
    cfg_unsupported(c, "activation_function", "not one of gelu_new, gelu_pytorch_tanh, gelu_fast, gelu, relu, silu");
  if (!cfg_bool(c, "scale_attn_weights", 1)) cfg_unsupported(c, "scale_attn_weights", "false is not supported");
  if (cfg_bool(c, "scale_attn_by_inverse_layer_idx", 0))
    cfg_unsupported(c, "scale_attn_by_inverse_layer_idx", "true is not supported");
  if (cfg_bool(c, "add_cross_attention", 0)) cfg_unsupported(c, "add_cross_attention", "true is not supported");
  cfg_check_shapes(c, d, "n_head");
}

static void bert_config(config_reader *c, model_desc *d) {
  *d = (model_desc){.family = "bert", .arch = "encoder", .norm = "post", .norm_kind = "layernorm",
                    .positional = "learned"};
  d->d_model = cfg_int(c, "hidden_size", -1, 1, 65536);
  d->heads = d->kv_heads = cfg_int(c, "num_attention_heads", -1, 1, 65536);
  d->d_ff = cfg_int(c, "intermediate_size", -1, 1, 1 << 24);
  d->layers = cfg_int(c, "num_hidden_layers", -1, 1, 4096);
  d->vocab = cfg_int(c, "vocab_size", -1, 1, 1 << 24);
  d->max_seq = cfg_int(c, d->max_seq_key = "max_position_embeddings", 512, 1, 1 << 20);
  d->token_types = cfg_int(c, "type_vocab_size", 2, 1, 1 << 20);
  d->eps = cfg_num(c, "layer_norm_eps", 1e-12);
  d->bias = d->tie = d->embed_norm = 1;
  const char *act = cfg_str(c, "hidden_act", "gelu");
  if (!c->rc && !(d->activation = activation_of(act)))
    cfg_unsupported(c, "hidden_act", "not one of gelu, gelu_new, gelu_pytorch_tanh, gelu_fast, relu, silu");
  if (strcmp(cfg_str(c, "position_embedding_type", "absolute"), "absolute"))
    cfg_unsupported(c, "position_embedding_type", "only \"absolute\" is supported");
  if (cfg_bool(c, "is_decoder", 0)) cfg_unsupported(c, "is_decoder", "true is not supported");
  cfg_check_shapes(c, d, "num_attention_heads");
}

/* MarianMTModel: BART's post-LN encoder-decoder with static sinusoidal
 * positions, scaled embeddings shared by both stacks and the head, a bias on
 * the logits (final_logits_bias), no layernorm_embedding, no final norms */
static void marian_config(config_reader *c, model_desc *d) {
  *d = (model_desc){.family = "marian", .arch = "encoder-decoder", .norm = "post", .norm_kind = "layernorm",
                    .positional = "learned"};
  d->d_model = cfg_int(c, "d_model", -1, 1, 65536);
  d->heads = d->kv_heads = cfg_int(c, "encoder_attention_heads", -1, 1, 65536);
  d->d_ff = cfg_int(c, "encoder_ffn_dim", -1, 1, 1 << 24);
  d->layers = d->enc_layers = cfg_int(c, "encoder_layers", -1, 1, 4096);
  d->dec_layers = cfg_int(c, "decoder_layers", -1, 1, 4096);
  d->vocab = cfg_int(c, "vocab_size", -1, 1, 1 << 24);
  d->max_seq = cfg_int(c, d->max_seq_key = "max_position_embeddings", 1024, 1, 1 << 20);
  d->eps = 1e-5; /* nn.LayerNorm's default, which Marian keeps */
  d->scale = cfg_bool(c, "scale_embedding", 0);
  d->tie = cfg_bool(c, "tie_word_embeddings", 1);
  d->bias = d->lm_head = d->head_bias = 1;
  d->pad_id = cfg_int(c, "pad_token_id", -1, 0, d->vocab - 1);
  d->eos_id = cfg_int(c, "eos_token_id", -1, 0, d->vocab - 1);
  d->start_id = cfg_int(c, "decoder_start_token_id", d->pad_id, 0, d->vocab - 1);
  const char *act = cfg_str(c, "activation_function", "swish");
  if (!c->rc && !(d->activation = activation_of(act)))
    cfg_unsupported(c, "activation_function", "not one of swish, silu, gelu, gelu_new, relu");
  if (!c->rc && cfg_int(c, "decoder_attention_heads", d->heads, 1, 65536) != d->heads)
    cfg_unsupported(c, "decoder_attention_heads", "must equal encoder_attention_heads");
  if (!c->rc && cfg_int(c, "decoder_ffn_dim", d->d_ff, 1, 1 << 24) != d->d_ff)
    cfg_unsupported(c, "decoder_ffn_dim", "must equal encoder_ffn_dim");
  if (!c->rc && cfg_int(c, "decoder_vocab_size", d->vocab, 1, 1 << 24) != d->vocab)
    cfg_unsupported(c, "decoder_vocab_size", "separate source and target vocabularies are not supported");
  if (!cfg_bool(c, "share_encoder_decoder_embeddings", 1))
    cfg_unsupported(c, "share_encoder_decoder_embeddings", "false is not supported (one embedding)");
  if (cfg_bool(c, "normalize_before", 0)) cfg_unsupported(c, "normalize_before", "true is not Marian's layout");
  if (cfg_bool(c, "normalize_embedding", 0)) cfg_unsupported(c, "normalize_embedding", "true is not supported");
  if (!cfg_bool(c, "static_position_embeddings", 1))
    cfg_unsupported(c, "static_position_embeddings", "false (learned positions) is not Marian's layout");
  cfg_check_shapes(c, d, "encoder_attention_heads");
}

/* ---- Hugging Face families: name tables ---------------------------------------- */

/* A source tensor and what fixformer calls it: a weight kind of
 * include/ff_schema.h (its name and shape come from there), or one of its
 * parts (q_proj, k_proj, v_proj; gate_proj, up_proj), which the runtime
 * fuses when it reads the file. */
typedef struct {
  const char *src;           /* inside a layer (layer roles) or a full name */
  enum ff_tensor_kind kind;
  int part;                  /* -1: the kind's tensor; else its part */
} role;

typedef struct {
  const char *text;  /* a suffix inside a layer, an exact name, or a prefix ending in '.' */
  int in_layer;
  const char *why;
} ignore_rule;

typedef struct {
  const char *model_type, *arch_hint; /* config.json's model_type; a word of architectures[0] */
  void (*config)(config_reader *c, model_desc *d);
  const char *strip;      /* an optional prefix of the stack's names ("transformer.", "bert.") */
  const char *layer_src;  /* the layer's prefix before its index: "model.layers." */
  int conv1d;             /* the layers' matrices are Conv1D, stored [in, out] (GPT-2): transposed */
  const role *globals, *layer;
  const ignore_rule *ignore;
  const char *dec_layer_src;   /* an encoder-decoder's decoder layers (layer_src: its encoder's), else NULL */
  const role *dec_layer;
  const char *const *copies;   /* tensors that hold the embedding again (tied), checked equal to it */
  int (*extra)(const model_desc *d, outputs *o, ff_error *err); /* tensors the source computes, not stores */
  const struct own_tokenizer *tokenizer; /* files of its own instead of tokenizer.json, or NULL */
} family;

/* A family's tokenizer made from two files beside config.json (no
 * --tokenizer), instead of tokenizer.json: build fills the job's tokenizer,
 * or leaves it out saying why in note. */
struct import_job;
typedef struct own_tokenizer {
  const char *files[2];
  void (*build)(struct import_job *j, char *const paths[2], char *note, size_t n);
} own_tokenizer;
static void marian_tokenizer(struct import_job *j, char *const paths[2], char *note, size_t n);
static const own_tokenizer marian_files = {{"source.spm", "vocab.json"}, marian_tokenizer};

#define WHOLE(kind) FF_TENSOR_##kind, -1
#define PART(kind, i) FF_TENSOR_##kind, i
#define END {NULL, FF_TENSOR_EMBED, -1}

static const role llama_globals[] = {{"model.embed_tokens.weight", WHOLE(EMBED)},
                                     {"model.norm.weight", WHOLE(FINAL_NORM_WEIGHT)},
                                     {"lm_head.weight", WHOLE(LM_HEAD)}, END};
static const role llama_layer[] = {
    {"input_layernorm.weight", WHOLE(NORM1_WEIGHT)},
    {"self_attn.q_proj.weight", PART(SELF_IN_PROJ_WEIGHT, 0)},
    {"self_attn.q_proj.bias", PART(SELF_IN_PROJ_BIAS, 0)}, /* Qwen2's */
    {"self_attn.k_proj.weight", PART(SELF_IN_PROJ_WEIGHT, 1)},
    {"self_attn.k_proj.bias", PART(SELF_IN_PROJ_BIAS, 1)},
    {"self_attn.v_proj.weight", PART(SELF_IN_PROJ_WEIGHT, 2)},
    {"self_attn.v_proj.bias", PART(SELF_IN_PROJ_BIAS, 2)},
    {"self_attn.o_proj.weight", WHOLE(SELF_OUT_PROJ_WEIGHT)},
    {"post_attention_layernorm.weight", WHOLE(NORM2_WEIGHT)},
    {"mlp.gate_proj.weight", PART(LINEAR1_WEIGHT, 0)},
    {"mlp.up_proj.weight", PART(LINEAR1_WEIGHT, 1)},
    {"mlp.down_proj.weight", WHOLE(LINEAR2_WEIGHT)},
    END};
static const ignore_rule llama_ignore[] = {{"self_attn.rotary_emb.inv_freq", 1, "RoPE frequency buffers (recomputed)"},
                                           {NULL, 0, NULL}};

static const role gpt2_globals[] = {{"wte.weight", WHOLE(EMBED)}, {"wpe.weight", WHOLE(POS_EMBED)},
                                    {"ln_f.weight", WHOLE(FINAL_NORM_WEIGHT)}, {"ln_f.bias", WHOLE(FINAL_NORM_BIAS)},
                                    {"lm_head.weight", WHOLE(LM_HEAD)}, END};
static const role gpt2_layer[] = {{"ln_1.weight", WHOLE(NORM1_WEIGHT)},
                                  {"ln_1.bias", WHOLE(NORM1_BIAS)},
                                  {"attn.c_attn.weight", WHOLE(SELF_IN_PROJ_WEIGHT)},
                                  {"attn.c_attn.bias", WHOLE(SELF_IN_PROJ_BIAS)},
                                  {"attn.c_proj.weight", WHOLE(SELF_OUT_PROJ_WEIGHT)},
                                  {"attn.c_proj.bias", WHOLE(SELF_OUT_PROJ_BIAS)},
                                  {"ln_2.weight", WHOLE(NORM2_WEIGHT)},
                                  {"ln_2.bias", WHOLE(NORM2_BIAS)},
                                  {"mlp.c_fc.weight", WHOLE(LINEAR1_WEIGHT)},
                                  {"mlp.c_fc.bias", WHOLE(LINEAR1_BIAS)},
                                  {"mlp.c_proj.weight", WHOLE(LINEAR2_WEIGHT)},
                                  {"mlp.c_proj.bias", WHOLE(LINEAR2_BIAS)},
                                  END};
static const ignore_rule gpt2_ignore[] = {{"attn.bias", 1, "causal-mask buffers (attn.bias)"},
                                          {"attn.masked_bias", 1, "mask-value buffers (attn.masked_bias)"},
                                          {NULL, 0, NULL}};

static const role bert_globals[] = {
    {"embeddings.word_embeddings.weight", WHOLE(EMBED)},
    {"embeddings.position_embeddings.weight", WHOLE(POS_EMBED)},
    {"embeddings.token_type_embeddings.weight", WHOLE(TOKEN_TYPE_EMBED)},
    {"embeddings.LayerNorm.weight", WHOLE(EMBED_NORM_WEIGHT)},
    {"embeddings.LayerNorm.bias", WHOLE(EMBED_NORM_BIAS)},
    END};
static const role bert_layer[] = {
    {"attention.self.query.weight", PART(SELF_IN_PROJ_WEIGHT, 0)},
    {"attention.self.query.bias", PART(SELF_IN_PROJ_BIAS, 0)},
    {"attention.self.key.weight", PART(SELF_IN_PROJ_WEIGHT, 1)},
    {"attention.self.key.bias", PART(SELF_IN_PROJ_BIAS, 1)},
    {"attention.self.value.weight", PART(SELF_IN_PROJ_WEIGHT, 2)},
    {"attention.self.value.bias", PART(SELF_IN_PROJ_BIAS, 2)},
    {"attention.output.dense.weight", WHOLE(SELF_OUT_PROJ_WEIGHT)},
    {"attention.output.dense.bias", WHOLE(SELF_OUT_PROJ_BIAS)},
    {"attention.output.LayerNorm.weight", WHOLE(NORM1_WEIGHT)},
    {"attention.output.LayerNorm.bias", WHOLE(NORM1_BIAS)},
    {"intermediate.dense.weight", WHOLE(LINEAR1_WEIGHT)},
    {"intermediate.dense.bias", WHOLE(LINEAR1_BIAS)},
    {"output.dense.weight", WHOLE(LINEAR2_WEIGHT)},
    {"output.dense.bias", WHOLE(LINEAR2_BIAS)},
    {"output.LayerNorm.weight", WHOLE(NORM2_WEIGHT)},
    {"output.LayerNorm.bias", WHOLE(NORM2_BIAS)},
    END};
static const ignore_rule bert_ignore[] = {{"pooler.", 0, "the pooler (pooler.dense)"},
                                          {"cls.", 0, "the masked-LM / NSP head (cls.*)"},
                                          {"embeddings.position_ids", 0, "the position-ids buffer"},
                                          {NULL, 0, NULL}};

/* GGUF (llama.cpp's names, both architectures; "blk.N." the layers) */
static const role gguf_globals[] = {{"token_embd.weight", WHOLE(EMBED)},
                                    {"output_norm.weight", WHOLE(FINAL_NORM_WEIGHT)},
                                    {"output.weight", WHOLE(LM_HEAD)}, END};
static const role gguf_layer[] = {
    {"attn_norm.weight", WHOLE(NORM1_WEIGHT)},
    {"attn_q.weight", PART(SELF_IN_PROJ_WEIGHT, 0)}, {"attn_q.bias", PART(SELF_IN_PROJ_BIAS, 0)},
    {"attn_k.weight", PART(SELF_IN_PROJ_WEIGHT, 1)}, {"attn_k.bias", PART(SELF_IN_PROJ_BIAS, 1)},
    {"attn_v.weight", PART(SELF_IN_PROJ_WEIGHT, 2)}, {"attn_v.bias", PART(SELF_IN_PROJ_BIAS, 2)},
    {"attn_output.weight", WHOLE(SELF_OUT_PROJ_WEIGHT)},
    {"ffn_norm.weight", WHOLE(NORM2_WEIGHT)},
    {"ffn_gate.weight", PART(LINEAR1_WEIGHT, 0)},
    {"ffn_up.weight", PART(LINEAR1_WEIGHT, 1)},
    {"ffn_down.weight", WHOLE(LINEAR2_WEIGHT)},
    END};
static const ignore_rule gguf_ignore[] = {{NULL, 0, NULL}};
static const family gguf_families[] = {
    {"llama", "", NULL, "", "blk.", 0, gguf_globals, gguf_layer, gguf_ignore, NULL, NULL, NULL, NULL, NULL},
    {"qwen2", "", NULL, "", "blk.", 0, gguf_globals, gguf_layer, gguf_ignore, NULL, NULL, NULL, NULL, NULL},
};

static const role marian_globals[] = {{"model.shared.weight", WHOLE(EMBED)},
                                      {"final_logits_bias", WHOLE(LM_HEAD_BIAS)},
                                      {"lm_head.weight", WHOLE(LM_HEAD)}, END};
#define MARIAN_ATTN(module, kind_in, kind_out)                                                                       \
  {module ".q_proj.weight", PART(kind_in##_WEIGHT, 0)}, {module ".q_proj.bias", PART(kind_in##_BIAS, 0)},            \
      {module ".k_proj.weight", PART(kind_in##_WEIGHT, 1)}, {module ".k_proj.bias", PART(kind_in##_BIAS, 1)},        \
      {module ".v_proj.weight", PART(kind_in##_WEIGHT, 2)}, {module ".v_proj.bias", PART(kind_in##_BIAS, 2)},        \
      {module ".out_proj.weight", WHOLE(kind_out##_WEIGHT)}, {module ".out_proj.bias", WHOLE(kind_out##_BIAS)}
#define MARIAN_FFN                                                                                                   \
  {"fc1.weight", WHOLE(LINEAR1_WEIGHT)}, {"fc1.bias", WHOLE(LINEAR1_BIAS)}, {"fc2.weight", WHOLE(LINEAR2_WEIGHT)},   \
      {"fc2.bias", WHOLE(LINEAR2_BIAS)}
/* nn.TransformerDecoderLayer's norms: norm1 after self-attention, norm2 after cross-attention, norm3 after the FFN */
static const role marian_encoder_layer[] = {
    MARIAN_ATTN("self_attn", SELF_IN_PROJ, SELF_OUT_PROJ), MARIAN_FFN,
    {"self_attn_layer_norm.weight", WHOLE(NORM1_WEIGHT)}, {"self_attn_layer_norm.bias", WHOLE(NORM1_BIAS)},
    {"final_layer_norm.weight", WHOLE(NORM2_WEIGHT)}, {"final_layer_norm.bias", WHOLE(NORM2_BIAS)}, END};
static const role marian_decoder_layer[] = {
    MARIAN_ATTN("self_attn", SELF_IN_PROJ, SELF_OUT_PROJ), MARIAN_ATTN("encoder_attn", CROSS_IN_PROJ, CROSS_OUT_PROJ),
    MARIAN_FFN,
    {"self_attn_layer_norm.weight", WHOLE(NORM1_WEIGHT)}, {"self_attn_layer_norm.bias", WHOLE(NORM1_BIAS)},
    {"encoder_attn_layer_norm.weight", WHOLE(NORM2_WEIGHT)}, {"encoder_attn_layer_norm.bias", WHOLE(NORM2_BIAS)},
    {"final_layer_norm.weight", WHOLE(NORM3_WEIGHT)}, {"final_layer_norm.bias", WHOLE(NORM3_BIAS)}, END};
#undef MARIAN_ATTN
#undef MARIAN_FFN
static const ignore_rule marian_ignore[] = {
    {"model.encoder.embed_positions.weight", 0, "static sinusoidal positions (computed in Marian's layout)"},
    {"model.decoder.embed_positions.weight", 0, "static sinusoidal positions (computed in Marian's layout)"},
    {NULL, 0, NULL}};
static const char *const marian_copies[] = {"model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight",
                                            NULL};

/* Marian's positions: computed (MarianSinusoidalPositionalEmbedding), written as a learned table */
static int marian_positions(const model_desc *d, outputs *o, ff_error *err) {
  float *p;
  int rc = ff_marian_positions(d->max_seq, d->d_model, &p, err);
  const ff_rt_weight_kind *k = &ff_rt_weight_kinds[FF_TENSOR_POS_EMBED];
  return rc ? rc : out_add(o, ff_rt_keys[k->named_by].default_string, d->max_seq, d->d_model, p, p, err);
}

static const family families[] = {
    {"llama", "Llama", llama_config, "", "model.layers.", 0, llama_globals, llama_layer, llama_ignore, NULL, NULL,
     NULL, NULL, NULL},
    {"qwen2", "Qwen2", qwen2_config, "", "model.layers.", 0, llama_globals, llama_layer, llama_ignore, NULL, NULL,
     NULL, NULL, NULL},
    {"gpt2", "GPT2", gpt2_config, "transformer.", "h.", 1, gpt2_globals, gpt2_layer, gpt2_ignore, NULL, NULL, NULL,
     NULL, NULL},
    {"bert", "Bert", bert_config, "bert.", "encoder.layer.", 0, bert_globals, bert_layer, bert_ignore, NULL, NULL,
     NULL, NULL, NULL},
    {"marian", "Marian", marian_config, "", "model.encoder.layers.", 0, marian_globals, marian_encoder_layer,
     marian_ignore, "model.decoder.layers.", marian_decoder_layer, marian_copies, marian_positions, &marian_files},
};
#define N_FAMILIES (int)(sizeof families / sizeof *families)

/* fixformer's name of r: the part's role, the kind's role, or the default of
 * the key that names it (embed.weight, lm_head.weight, ...) */
static const char *role_name(const role *r) {
  const ff_rt_weight_kind *k = &ff_rt_weight_kinds[r->kind];
  if (r->part >= 0) return k->parts[r->part];
  return k->named_by != FF_KEY_NONE ? ff_rt_keys[k->named_by].default_string : k->role;
}

/* r's shape [rows, cols] (cols 0: a vector) for the model imported; rank 1 or 2 */
static int role_shape(const model_desc *d, const role *r, int64_t *rows, int64_t *cols) {
  const ff_rt_weight_kind *k = &ff_rt_weight_kinds[r->kind];
  ff_config c;
  dims_of(d, &c);
  *rows = ff_rt_dim(&c, r->part >= 0 ? k->part_rows[r->part] : k->rows);
  *cols = ff_rt_dim(&c, k->cols);
  return k->cols == FF_DIM_NONE ? 1 : 2;
}

/* GPT-2's Conv1D: a matrix of a layer, stored [in, out] */
static int transposed(const family *f, const role *r, int in_layer) {
  return f->conv1d && in_layer && (ff_rt_weight_kinds[r->kind].flags & FF_IS_MATRIX);
}

/* The source name of the family's untied output head, or NULL */
static const char *head_src(const family *f) {
  for (const role *r = f->globals; r->src; r++)
    if (r->kind == FF_TENSOR_LM_HEAD) return r->src;
  return NULL;
}

/* ---- the source tensors (one file or the shards) ----------------------------- */

typedef struct {
  const char *name;      /* without the family's optional prefix */
  const ff_tensor *t;    /* t->name is the name as stored */
  int file, used;
} src_tensor;

typedef struct {
  char *name;            /* as stored */
  char dtype[8];
  int file;
} int_tensor;

typedef struct {
  ff_tensor_file *files;
  char **paths;          /* for messages: the file each tensor is in */
  int n_files;
  int_tensor *ints;      /* integer and bool tensors (buffers such as position_ids), not read */
  int n_ints;
  src_tensor *all;       /* sorted by name */
  int n;
  char *what;            /* model.safetensors or the index: names the source of a missing tensor */
  const char *settings;  /* where the shapes come from, for messages: "config.json", "its metadata" */
  const char *strip;     /* the family's optional prefix */
} source;

static void source_free(source *s) {
  for (int i = 0; i < s->n_files; i++) {
    ff_tensor_file_free(&s->files[i]);
    free(s->paths[i]);
  }
  free(s->files);
  free(s->paths);
  free(s->all);
  free(s->what);
  for (int i = 0; i < s->n_ints; i++) free(s->ints[i].name);
  free(s->ints);
  memset(s, 0, sizeof *s);
}

/* "a/b" + "/" + "c" into a fresh string (NULL when out of memory) */
static char *join(const char *dir, const char *file) {
  size_t n = strlen(dir) + strlen(file) + 2;
  char *p = malloc(n);
  if (p) snprintf(p, n, "%s%s%s", dir, *dir && dir[strlen(dir) - 1] != '/' ? "/" : "", file);
  return p;
}

static int exists(const char *path) {
  struct stat st;
  return !stat(path, &st);
}

static int by_src_name(const void *a, const void *b) {
  return strcmp(((const src_tensor *)a)->name, ((const src_tensor *)b)->name);
}

/* Whether a safetensors dtype is an integer or bool one, by its whole name
 * (BF16 starts with B, as BOOL does). */
static int integer_dtype(const char *dt) {
  static const char *const names[] = {"BOOL", "U8", "I8", "U16", "I16", "U32", "I32", "U64", "I64"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++)
    if (!strcmp(dt, names[i])) return 1;
  return 0;
}

/* Integer and bool tensors (buffers such as BERT's position_ids; the safetensors
 * reader takes float ones only) out of the header of buf, their names kept in
 * s; *img is a copy without them, or NULL when there are none. */
static int drop_integers(source *s, const uint8_t *buf, size_t len, uint8_t **img, size_t *img_len, ff_error *err) {
  uint64_t hlen = 0;
  *img = NULL;
  for (int k = 0; k < 8 && len >= 8; k++) hlen |= (uint64_t)buf[k] << (8 * k);
  ff_error ignored; /* a header that does not parse is the safetensors reader's to report */
  cJSON *root = len >= 8 && hlen <= len - 8 ? ff_json_parse((const char *)buf + 8, (size_t)hlen, "header", &ignored) : NULL;
  int rc = 0;
  for (cJSON *e = root ? root->child : NULL, *next; e && !rc; e = next) {
    next = e->next;
    const char *dt = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "dtype"));
    if (!dt || !integer_dtype(dt)) continue;
    int_tensor *t = realloc(s->ints, (size_t)(s->n_ints + 1) * sizeof *t);
    if (!t || !(t[s->n_ints].name = strdup(e->string))) {
      if (t) s->ints = t;
      rc = ff_fail(err, FF_ENOMEM, "out of memory");
      break;
    }
    s->ints = t;
    snprintf(t[s->n_ints].dtype, sizeof t->dtype, "%s", dt);
    t[s->n_ints++].file = s->n_files;
    cJSON_Delete(cJSON_DetachItemViaPointer(root, e));
    *img = (uint8_t *)1; /* something dropped: the header is written again below */
  }
  char *text = !rc && *img ? cJSON_PrintUnformatted(root) : NULL;
  *img = NULL;
  size_t tl = text ? strlen(text) : 0, data = text ? len - 8 - (size_t)hlen : 0;
  if (text && (*img = malloc(8 + tl + data))) {
    for (int k = 0; k < 8; k++) (*img)[k] = (uint8_t)((uint64_t)tl >> (8 * k));
    memcpy(*img + 8, text, tl);
    memcpy(*img + 8 + tl, buf + 8 + hlen, data);
    *img_len = 8 + tl + data;
  } else if (text) {
    rc = ff_fail(err, FF_ENOMEM, "out of memory");
  }
  free(text);
  cJSON_Delete(root);
  return rc;
}

/* Reads one more file of the source (float tensors; integer ones set aside). */
static int source_read(source *s, char *path, ff_error *err) {
  ff_tensor_file *f = realloc(s->files, (size_t)(s->n_files + 1) * sizeof *f);
  char **p = f ? realloc(s->paths, (size_t)(s->n_files + 1) * sizeof *p) : NULL;
  if (f) s->files = f;
  if (p) s->paths = p;
  if (!f || !p || !path) {
    free(path);
    return ff_fail(err, FF_ENOMEM, "out of memory");
  }
  uint8_t *buf, *img = NULL;
  size_t len, img_len = 0;
  int rc = ff_read_file(path, &buf, &len, err);
  if (!rc) rc = drop_integers(s, buf, len, &img, &img_len, err);
  if (!rc && (rc = ff_safetensors_parse(img ? img : buf, img ? img_len : len, &s->files[s->n_files], err)))
    ff_fail(err, rc, "%s: %s", path, err->msg);
  free(img);
  if (!rc) {
    free(buf);
    s->paths[s->n_files++] = path;
    return 0;
  }
  free(buf);
  free(path);
  return rc;
  return 0;
}

/* The index of the tensors of every file, optional prefix stripped; a name twice is an error. */
static int source_index(source *s, const char *strip, ff_error *err) {
  int n = 0, k = 0;
  for (int i = 0; i < s->n_files; i++) n += s->files[i].count;
  if (!(s->all = calloc((size_t)n + 1, sizeof *s->all))) return ff_fail(err, FF_ENOMEM, "out of memory");
  size_t sl = strlen(strip);
  s->strip = strip;
  for (int i = 0; i < s->n_files; i++)
    for (int j = 0; j < s->files[i].count; j++) {
      const ff_tensor *t = &s->files[i].tensors[j];
      s->all[k++] = (src_tensor){sl && !strncmp(t->name, strip, sl) ? t->name + sl : t->name, t, i, 0};
    }
  s->n = n;
  qsort(s->all, (size_t)n, sizeof *s->all, by_src_name);
  for (int i = 1; i < n; i++)
    if (!strcmp(s->all[i].name, s->all[i - 1].name))
      return ff_fail(err, FF_EFORMAT, "%s: tensor '%s' is also in %s (as '%s')", s->paths[s->all[i].file],
                     s->all[i].t->name, s->paths[s->all[i - 1].file], s->all[i - 1].t->name);
  return 0;
}

/* Whether file (of s) holds the tensor name, float or set aside as an integer one. */
static int file_holds(const source *s, int file, const char *name) {
  if (ff_tensor_file_find(&s->files[file], name)) return 1;
  for (int i = 0; i < s->n_ints; i++)
    if (s->ints[i].file == file && !strcmp(s->ints[i].name, name)) return 1;
  return 0;
}

static src_tensor *source_find(source *s, const char *name) {
  src_tensor key = {name, NULL, 0, 0};
  return s->n ? bsearch(&key, s->all, (size_t)s->n, sizeof key, by_src_name) : NULL;
}

/* The shards named by model.safetensors.index.json's weight_map, each read
 * once; a missing shard, or a tensor not in the shard the map names, is an error. */
static int read_shards(source *s, const char *dir, const char *index, ff_error *err) {
  int rc = 0;
  cJSON *root = ff_json_read(index, err);
  const cJSON *map = root ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
  if (!root) rc = err->code;
  else if (!cJSON_IsObject(map)) rc = ff_fail(err, FF_EFORMAT, "%s: no \"weight_map\" object", index);
  for (const cJSON *e = map ? map->child : NULL; e && !rc; e = e->next) {
    const char *shard = cJSON_GetStringValue(e);
    if (!shard || !*shard || strchr(shard, '/') || !strcmp(shard, "..")) {
      rc = ff_fail(err, FF_EFORMAT, "%s: weight_map: '%s' does not name a file in the folder", index, e->string);
      break;
    }
    int have = -1;
    for (int i = 0; i < s->n_files && have < 0; i++)
      if (!strcmp(strrchr(s->paths[i], '/') ? strrchr(s->paths[i], '/') + 1 : s->paths[i], shard)) have = i;
    if (have < 0) {
      char *path = join(dir, shard);
      if (path && !exists(path)) {
        rc = ff_fail(err, FF_EIO, "%s: shard '%s' is missing (%s: %s)", index, shard, path, strerror(errno));
        free(path);
        break;
      }
      if ((rc = source_read(s, path, err))) break;
      have = s->n_files - 1;
    }
    if (!file_holds(s, have, e->string))
      rc = ff_fail(err, FF_EFORMAT, "%s: tensor '%s' is not in its shard %s", index, e->string, shard);
  }
  if (!rc && s->n_files == 0) rc = ff_fail(err, FF_EFORMAT, "%s: weight_map names no tensors", index);
  cJSON_Delete(root);
  return rc;
}

/* model.safetensors.index.json (sharded) if there is one, else model.safetensors */
static int read_hf_weights(source *s, const char *dir, ff_error *err) {
  char *index = join(dir, "model.safetensors.index.json"), *single = join(dir, "model.safetensors");
  int rc;
  if (!index || !single) rc = ff_fail(err, FF_ENOMEM, "out of memory");
  else if (exists(index)) {
    rc = read_shards(s, dir, index, err);
    s->what = index;
    index = NULL;
  } else if (exists(single)) {
    s->what = single;
    rc = source_read(s, strdup(single), err);
    single = NULL;
  } else {
    char *bin = join(dir, "pytorch_model.bin");
    rc = ff_fail(err, FF_EIO, "%s: no model.safetensors or model.safetensors.index.json%s", dir,
                 bin && exists(bin) ? " (pytorch_model.bin is not read: save the model with safetensors)" : "");
    free(bin);
  }
  free(index);
  free(single);
  return rc;
}

/* ---- mapping -------------------------------------------------------------------- */

/* One role: the source tensor present with the shape config.json implies, copied
 * (transposed for Conv1D) under fixformer's name. */
static int map_role(source *s, const model_desc *d, const role *r, int conv1d, const char *src, const char *dst,
                    outputs *o, ff_error *err) {
  src_tensor *st = source_find(s, src);
  int64_t rows, cols;
  int rank = role_shape(d, r, &rows, &cols);
  int64_t want[2] = {conv1d ? cols : rows, conv1d ? rows : cols};
  if (ff_rt_weight_kinds[r->kind].rows == FF_DIM_MAX_SEQ) want[0] = d->pos_rows; /* --max-seq: its first rows */
  char wants[64], haves[64];
  ff_rt_shape_text(wants, sizeof wants, rank, want);
  if (!st)
    return ff_fail(err, FF_EMISSING, "%s: missing tensor '%s' %s%s%s%s", s->what, src, wants,
                   *s->strip ? " (prefix '" : "", s->strip, *s->strip ? "' optional)" : "");
  const ff_tensor *t = st->t;
  int row = rank == 1 && t->rank == 2 && t->shape[0] == 1 && t->shape[1] == want[0]; /* [1, n]: Marian's logits bias */
  if (!row && (t->rank != rank || t->shape[0] != want[0] || (rank == 2 && t->shape[1] != want[1]))) {
    ff_rt_shape_text(haves, sizeof haves, t->rank < 2 ? t->rank : 2, t->shape);
    if (t->rank > 2) snprintf(haves, sizeof haves, "rank %d", t->rank);
    return ff_fail(err, FF_ESHAPE, "%s: tensor '%s': shape %s, %s needs %s", s->paths[st->file], t->name, haves,
                   s->settings, wants);
  }
  st->used = 1;
  if (!conv1d) return out_add(o, dst, rows, rank == 2 ? cols : 0, t->data, NULL, err);
  float *tr = malloc((size_t)rows * (size_t)cols * sizeof *tr);
  if (!tr) return ff_fail(err, FF_ENOMEM, "out of memory");
  for (int64_t i = 0; i < rows; i++) /* Conv1D keeps W as [in, out]: y = x W + b */
    for (int64_t j = 0; j < cols; j++) tr[i * cols + j] = t->data[j * rows + i];
  return out_add(o, dst, rows, cols, tr, tr, err);
}

/* Every role of the family, globals then layer by layer, in fixformer's order. */
static int map_roles(source *s, const family *f, const model_desc *d, outputs *o, ff_error *err) {
  char src[FF_TENSOR_NAME_MAX], dst[FF_TENSOR_NAME_MAX];
  int rc = 0;
  for (const role *r = f->globals; r->src && !rc; r++)
    if (role_present(d, r->kind)) rc = map_role(s, d, r, 0, r->src, role_name(r), o, err);
  for (int stack = 0; stack < (f->dec_layer ? 2 : 1); stack++) { /* an encoder-decoder's encoder, then its decoder */
    const role *layer = stack ? f->dec_layer : f->layer;
    const char *from = stack ? f->dec_layer_src : f->layer_src, *to = !f->dec_layer ? "" : stack ? "decoder." : "encoder.";
    for (int i = 0; i < (stack ? d->dec_layers : d->layers) && !rc; i++)
      for (const role *r = layer; r->src && !rc; r++) {
        if (!role_present(d, r->kind)) continue;
        snprintf(src, sizeof src, "%s%d.%s", from, i, r->src);
        snprintf(dst, sizeof dst, "%slayers.%d.%s", to, i, role_name(r));
        rc = map_role(s, d, r, transposed(f, r, 1), src, dst, o, err);
      }
  }
  return rc || !f->extra ? rc : f->extra(d, o, err);
}

/* The rule that ignores name, or NULL; *layer gets the layer index of a layer tensor (else -1). */
static const ignore_rule *ignored(const family *f, const char *name, int *layer) {
  size_t pl = strlen(f->layer_src);
  const char *rest = NULL;
  *layer = -1;
  if (!strncmp(name, f->layer_src, pl) && name[pl] >= '0' && name[pl] <= '9') {
    char *end;
    long i = strtol(name + pl, &end, 10);
    if (*end == '.') {
      *layer = i > 1 << 20 ? 1 << 20 : (int)i;
      rest = end + 1;
    }
  }
  for (const ignore_rule *g = f->ignore; g->text; g++) {
    size_t n = strlen(g->text);
    if (g->in_layer ? rest && !strcmp(rest, g->text)
                    : (g->text[n - 1] == '.' ? !strncmp(name, g->text, n) : !strcmp(name, g->text)))
      return g;
  }
  return NULL;
}

/* The source tensors no role took: ignored for a reason (counted), a tied head
 * equal to the embedding, or an error naming the tensor. */
static int check_leftovers(source *s, const family *f, const model_desc *d, const outputs *o, int *counts,
                           int *tied_head, ff_error *err) {
  for (int i = 0; i < s->n; i++) {
    src_tensor *st = &s->all[i];
    int layer;
    if (st->used) continue;
    const ignore_rule *g = ignored(f, st->name, &layer);
    if (g) {
      counts[g - f->ignore]++;
      continue;
    }
    int head = head_src(f) && !strcmp(st->name, head_src(f)) && d->tie, copy = 0;
    for (int k = 0; f->copies && f->copies[k]; k++) copy |= !strcmp(st->name, f->copies[k]);
    if (head || copy) { /* a tied head (Marian: each stack's embedding) stored anyway: the embedding */
      const ff_tensor *t = st->t;
      int same = t->rank == 2 && t->shape[0] == o->t[0].shape[0] && t->shape[1] == o->t[0].shape[1] &&
                 !memcmp(t->data, o->t[0].data, t->numel * sizeof(float));
      if (!same)
        return ff_fail(err, FF_EINVAL, "%s: tensor '%s' differs from the embedding, but config.json ties them "
                       "(%s)", s->paths[st->file], t->name, head ? "tie_word_embeddings" : "shared embeddings");
      *tied_head += head;
      continue;
    }
    if (layer >= d->layers)
      return ff_fail(err, FF_EINVAL, "%s: tensor '%s': layer %d, but %s has %d layers", s->paths[st->file],
                     st->t->name, layer, s->settings, d->layers);
    return ff_fail(err, FF_EINVAL, "%s: tensor '%s' cannot be mapped to a %s model (no such %s tensor)",
                   s->paths[st->file], st->t->name, f->model_type, f->model_type);
  }
  size_t sl = strlen(f->strip);
  for (int i = 0; i < s->n_ints; i++) { /* integer buffers: ignorable ones only */
    const char *name = s->ints[i].name;
    int layer;
    const ignore_rule *g = ignored(f, sl && !strncmp(name, f->strip, sl) ? name + sl : name, &layer);
    if (!g)
      return ff_fail(err, FF_EINVAL, "%s: tensor '%s' (%s) cannot be mapped to a %s model (weights are floats)",
                     s->paths[s->ints[i].file], name, s->ints[i].dtype, f->model_type);
    counts[g - f->ignore]++;
  }
  return 0;
}

/* ---- saying what was done --------------------------------------------------------- */

/* One line of the summary (no newline) to the caller's report function. */
static void say(const ff_import_options *o, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void say(const ff_import_options *o, const char *fmt, ...) {
  char small[512], *line = small;
  va_list ap;
  if (!o->report) return;
  va_start(ap, fmt);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n >= sizeof small && (line = malloc((size_t)n + 1))) { /* long paths */
    va_start(ap, fmt);
    vsnprintf(line, (size_t)n + 1, fmt, ap);
    va_end(ap);
  }
  if (line) o->report(o->report_ctx, line);
  if (line != small) free(line);
}

/* A slow step starts (done 0) or ends (done 1). */
static void step(const ff_import_options *o, const char *what, int done) {
  if (o->progress) o->progress(o->progress_ctx, what, done);
}

static void print_model(const ff_import_options *o, const model_desc *d) {
  char kv[32] = "", rope[96] = "", layers[48];
  if (d->has_kv_heads) snprintf(kv, sizeof kv, ", kv_heads %d", d->kv_heads);
  if (d->dec_layers) snprintf(layers, sizeof layers, "%d + %d", d->enc_layers, d->dec_layers);
  else snprintf(layers, sizeof layers, "%d", d->layers);
  if (!strcmp(d->positional, "rope")) snprintf(rope, sizeof rope, " (%s, theta %g)", d->rope_pairing, d->rope_theta);
  say(o, "  %s, d_model %d, heads %d%s, d_ff %d, layers %s, vocab %d, max_seq %d; %s-norm %s eps %g, %s, bias %s, "
      "positions %s%s, %s", d->arch, d->d_model, d->heads, kv, d->d_ff, layers, d->vocab, d->max_seq, d->norm,
      d->norm_kind, d->eps, d->activation, d->qkv_bias ? "q/k/v only" : d->bias ? "yes" : "no", d->positional, rope,
      !d->lm_head ? "no output head (hidden states out)" : d->tie ? "head tied to the embedding" : "own output head");
}

/* One line per role: globals as they are, layer roles once with {i}. */
static void print_roles(const ff_import_options *o, const family *f, const model_desc *d) {
  char shape[64];
  int64_t sh[2];
  for (const role *r = f->globals; r->src; r++) {
    if (!role_present(d, r->kind)) continue;
    ff_rt_shape_text(shape, sizeof shape, role_shape(d, r, &sh[0], &sh[1]), sh);
    say(o, "    %-52s -> %-36s %s", r->src, role_name(r), shape);
  }
  for (int stack = 0; stack < (f->dec_layer ? 2 : 1); stack++)
    for (const role *r = stack ? f->dec_layer : f->layer; r->src; r++) {
      char src[160], dst[160];
      if (!role_present(d, r->kind)) continue;
      ff_rt_shape_text(shape, sizeof shape, role_shape(d, r, &sh[0], &sh[1]), sh);
      snprintf(src, sizeof src, "%s{i}.%s", stack ? f->dec_layer_src : f->layer_src, r->src);
      snprintf(dst, sizeof dst, "%slayers.{i}.%s", !f->dec_layer ? "" : stack ? "decoder." : "encoder.", role_name(r));
      say(o, "    %-52s -> %-36s %s%s", src, dst, shape, transposed(f, r, 1) ? " (Conv1D [in,out], transposed)" : "");
    }
  if (f->extra) say(o, "    (computed)%43s -> %-36s [%d, %d]", "", "pos_embed.weight", d->max_seq, d->d_model);
}

/* ---- llama2.c checkpoints ---------------------------------------------------------------- */

/* The tensors of a llama2.c file in file order (run.c's names): per_layer
 * ones hold all layers back to back. */
typedef struct {
  role r;        /* r.src NULL: data skipped (the legacy RoPE tables, [seq_len, head_size / 2] each) */
  int per_layer;
} l2c_part;

static const l2c_part l2c_emb = {{"token_embedding_table", WHOLE(EMBED)}, 0},
                      l2c_att = {{"rms_att_weight", WHOLE(NORM1_WEIGHT)}, 1},
                      l2c_wq = {{"wq", PART(SELF_IN_PROJ_WEIGHT, 0)}, 1}, l2c_wk = {{"wk", PART(SELF_IN_PROJ_WEIGHT, 1)}, 1},
                      l2c_wv = {{"wv", PART(SELF_IN_PROJ_WEIGHT, 2)}, 1}, l2c_wo = {{"wo", WHOLE(SELF_OUT_PROJ_WEIGHT)}, 1},
                      l2c_ffn = {{"rms_ffn_weight", WHOLE(NORM2_WEIGHT)}, 1},
                      l2c_w1 = {{"w1", PART(LINEAR1_WEIGHT, 0)}, 1}, /* w1: gate, w3: up, w2: down */
                      l2c_w2 = {{"w2", WHOLE(LINEAR2_WEIGHT)}, 1}, l2c_w3 = {{"w3", PART(LINEAR1_WEIGHT, 1)}, 1},
                      l2c_fin = {{"rms_final_weight", WHOLE(FINAL_NORM_WEIGHT)}, 0}, l2c_freq = {{NULL, WHOLE(EMBED)}, 0},
                      l2c_cls = {{"wcls", WHOLE(LM_HEAD)}, 0};

/* A part's shape [rows, cols] (cols 0: a vector), one layer's */
static void l2c_shape(const model_desc *d, const l2c_part *p, int64_t *rows, int64_t *cols) {
  if (p->r.src) role_shape(d, &p->r, rows, cols);
  else *rows = d->max_seq, *cols = d->d_model / d->heads / 2;
}

static int32_t le32(const uint8_t *p) {
  return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

/* The header: legacy (7 int32; vocab < 0 = own classifier) or version 1 (magic, 256 bytes). */
static int l2c_header(const char *path, const uint8_t *b, size_t len, model_desc *d, size_t *data_at, ff_error *err) {
  const uint8_t *p = b;
  int versioned = len >= 8 && (uint32_t)le32(b) == 0x616b3432u;
  if (versioned) {
    int version = le32(b + 4);
    if (version == 2)
      return ff_fail(err, FF_EINVAL, "%s: llama2.c version 2 (int8 Q8_0) is not supported: export it with "
                     "export.py --version 1 (float32)", path);
    if (version != 1) return ff_fail(err, FF_EINVAL, "%s: llama2.c version %d is not known (1: float32)", path, version);
    if (len < 256) return ff_fail(err, FF_EFORMAT, "%s: truncated: %zu bytes, the version 1 header is 256", path, len);
    p = b + 8;
    *data_at = 256;
  } else {
    if (len < 28) return ff_fail(err, FF_EFORMAT, "%s: truncated: %zu bytes, a llama2.c header is 28", path, len);
    *data_at = 28;
  }
  int v[7];
  for (int i = 0; i < 7; i++) v[i] = le32(p + 4 * i);
  *d = (model_desc){.family = "llama2.c", .arch = "decoder-only", .norm = "pre", .norm_kind = "rmsnorm",
                    .activation = "swiglu", .positional = "rope", .rope_pairing = "interleaved"};
  d->d_model = v[0], d->d_ff = v[1], d->layers = v[2], d->heads = v[3], d->kv_heads = v[4];
  d->vocab = v[5] < 0 ? -v[5] : v[5], d->max_seq = v[6], d->max_seq_key = "seq_len";
  d->tie = versioned ? b[36] != 0 : v[5] > 0;
  d->eps = 1e-5, d->rope_theta = 10000;
  d->final_norm = d->lm_head = d->has_kv_heads = 1;
  static const char *const names[] = {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"};
  static const int limits[] = {65536, 1 << 24, 4096, 65536, 65536, 1 << 24, 1 << 20};
  for (int i = 0; i < 7; i++)
    if (v[i] == 0 || v[i] == INT32_MIN || (v[i] < 0 && i != 5) || (v[i] < 0 ? -v[i] : v[i]) > limits[i])
      return ff_fail(err, FF_EFORMAT, "%s: header %s = %d is outside 1..%d: not a llama2.c checkpoint", path, names[i],
                     v[i], limits[i]);
  if (d->d_model % d->heads || d->heads % d->kv_heads || (d->d_model / d->heads) % 2)
    return ff_fail(err, FF_EFORMAT, "%s: header dim %d, n_heads %d, n_kv_heads %d: heads must divide dim (even head "
                   "width) and n_kv_heads n_heads", path, d->d_model, d->heads, d->kv_heads);
  return 0;
}

/* Floats of one part (all layers for a per-layer one); 0 on overflow. */
static size_t l2c_floats(const model_desc *d, const l2c_part *p) {
  int64_t rows, cols;
  l2c_shape(d, p, &rows, &cols);
  size_t n = (size_t)rows, c = cols ? (size_t)cols : 1;
  return ff_size_mul(n, c, &n) || (p->per_layer && ff_size_mul(n, (size_t)d->layers, &n)) ? 0 : n;
}

/* The tensors of path, pointing into *blob; *version 0 (legacy) or 1. */
static int l2c_import(const char *path, model_desc *d, outputs *o, float **blob, int *version, ff_error *err) {
  uint8_t *b;
  size_t len, at = 0, need, total = 0;
  int rc = ff_read_file(path, &b, &len, err);
  if (rc) return rc;
  if ((rc = l2c_header(path, b, len, d, &at, err))) {
    free(b);
    return rc;
  }
  const l2c_part *legacy[] = {&l2c_emb, &l2c_att, &l2c_wq, &l2c_wk, &l2c_wv, &l2c_wo, &l2c_ffn, &l2c_w1,
                              &l2c_w2, &l2c_w3, &l2c_fin, &l2c_freq, &l2c_freq, &l2c_cls};
  const l2c_part *v1[] = {&l2c_att, &l2c_ffn, &l2c_fin, &l2c_emb, &l2c_wq, &l2c_wk, &l2c_wv, &l2c_wo, &l2c_w1,
                          &l2c_w2, &l2c_w3, &l2c_cls};
  const l2c_part **parts = at == 28 ? legacy : v1;
  *version = at == 28 ? 0 : 1;
  int n = (at == 28 ? 14 : 12) - d->tie; /* the classifier last, when not shared */
  for (int i = 0; i < n; i++)
    if (!l2c_floats(d, parts[i]) || ff_size_add(total, l2c_floats(d, parts[i]), &total)) total = SIZE_MAX / 8;
  if (ff_size_mul(total, 4, &need) || ff_size_add(need, at, &need) || len != need) {
    rc = ff_fail(err, FF_EFORMAT, "%s: %s: %zu bytes, but its header (dim %d, hidden_dim %d, %d layers, %d heads, %d "
                 "kv heads, vocab %d, seq_len %d) needs %zu", path, len < need ? "truncated" : "trailing data", len,
                 d->d_model, d->d_ff, d->layers, d->heads, d->kv_heads, d->vocab, d->max_seq, need);
    free(b);
    return rc;
  }
  if (!(*blob = malloc(total * sizeof(float) + 1))) rc = ff_fail(err, FF_ENOMEM, "%s: out of memory", path);
  if (!rc) memcpy(*blob, b + at, total * sizeof(float)); /* float32 little-endian, as this host */
  free(b);
  const float *p = *blob;
  char name[FF_TENSOR_NAME_MAX];
  for (int i = 0; i < n && !rc; i++) {
    const l2c_part *q = parts[i];
    int64_t rows, cols;
    l2c_shape(d, q, &rows, &cols);
    size_t each = (size_t)rows * (size_t)(cols ? cols : 1);
    for (int l = 0; l < (q->per_layer ? d->layers : 1) && !rc; l++, p += each) {
      if (!q->r.src) continue; /* freq_cis_real / imag: recomputed from rope_theta */
      if (q->per_layer) snprintf(name, sizeof name, "layers.%d.%s", l, role_name(&q->r));
      else snprintf(name, sizeof name, "%s", role_name(&q->r));
      rc = out_add(o, name, rows, cols, p, NULL, err);
    }
  }
  return rc;
}

/* ---- the files written ---------------------------------------------------------------------- */

/* The description: every key the source sets, in the schema's order
 * (ff_rt_describe), so it reads as the model it is. */
static char *describe(const model_desc *d, const char *name, const char *src, const char *tokenizer) {
  ff_rt_value v[FF_KEY_COUNT];
  char weights[FF_NAME_MAX + 16], safe[FF_PATH_MAX];
  memset(v, 0, sizeof v);
#define SET(key, field, x) v[FF_KEY_##key] = (ff_rt_value){.set = 1, .field = (x)}
  SET(name, string, name), SET(arch, string, d->arch), SET(d_model, number, d->d_model);
  SET(heads, number, d->heads), SET(d_ff, number, d->d_ff);
  if (d->dec_layers) SET(encoder_layers, number, d->enc_layers), SET(decoder_layers, number, d->dec_layers);
  else SET(layers, number, d->layers);
  if (d->has_kv_heads) SET(kv_heads, number, d->kv_heads);
  SET(norm, string, d->norm), SET(norm_kind, string, d->norm_kind), SET(final_norm, number, d->final_norm);
  SET(eps, number, d->eps), SET(activation, string, d->activation), SET(bias, number, d->bias);
  if (d->qkv_bias) SET(attention_bias, number, 1), SET(out_proj_bias, number, 0);
  SET(vocab, number, d->vocab), SET(positional, string, d->positional), SET(scale_embeddings, number, d->scale);
  if (!strcmp(d->positional, "rope")) SET(rope_theta, number, d->rope_theta), SET(rope_pairing, string, d->rope_pairing);
  if (d->lm_head) SET(tie_embeddings, number, d->tie);
  else SET(lm_head, comment, "the output is the hidden states"); /* number 0: false */
  if (d->token_types) SET(token_types, number, d->token_types);
  if (d->embed_norm) SET(embed_norm, number, 1);
  if (d->head_bias) SET(head_bias, number, 1);
  snprintf(weights, sizeof weights, "%s.safetensors", name);
  SET(max_seq, number, d->max_seq), SET(weights, string, weights);
  if (tokenizer) SET(vocabulary, string, tokenizer);
  if (d->dtype) SET(dtype, string, d->dtype);
#undef SET
  char *keys = ff_rt_describe(v, 0); /* numbers that read back as the same double */
  snprintf(safe, sizeof safe, "%s", src);
  for (char *c = safe; *c; c++)
    if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?'; /* one comment line whatever the path */
  size_t cap = (keys ? strlen(keys) : 0) + strlen(safe) + 2 * FF_NAME_MAX + 64;
  char *t = keys ? malloc(cap) : NULL;
  if (t) snprintf(t, cap, "-- %s: imported by fixformer import from %s (%s)\nreturn {\n%s}\n", name, safe, d->family, keys);
  free(keys);
  return t;
}

/* The keywords of C99, which validate.lua refuses as a name (its C_KEYWORDS;
 * tests/hardening_import.py holds the two lists equal). */
static int c_keyword(const char *name) {
  static const char *const kw[] = {"auto", "break", "case", "char", "const", "continue", "default", "do", "double",
                                   "else", "enum", "extern", "float", "for", "goto", "if", "inline", "int", "long",
                                   "register", "restrict", "return", "short", "signed", "sizeof", "static", "struct",
                                   "switch", "typedef", "union", "unsigned", "void", "volatile", "while", "_Bool",
                                   "_Complex", "_Imaginary"};
  for (size_t i = 0; i < sizeof kw / sizeof *kw; i++)
    if (!strcmp(name, kw[i])) return 1;
  return 0;
}

static int letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

/* src's last name, less trailing slashes and a .bin: its first *n characters
 * (the default NAME, and the default folder) */
static const char *import_basename(const char *src, size_t *n) {
  size_t len = strlen(src);
  while (len > 1 && src[len - 1] == '/') len--;
  const char *base = src;
  for (size_t i = 0; i + 1 < len; i++)
    if (src[i] == '/') base = src + i + 1;
  *n = (size_t)(src + len - base);
  if (*n > 4 && !strncmp(base + *n - 4, ".bin", 4)) *n -= 4;
  else if (*n > 5 && !strncmp(base + *n - 5, ".gguf", 5)) *n -= 5;
  return base;
}

int ff_import_default_dir(const char *src, char *buf, size_t n, ff_error *err) {
  size_t len;
  if (!src || !buf) return ff_fail(err, FF_EINVAL, "ff_import_default_dir: %s is NULL", src ? "buf" : "src");
  const char *base = import_basename(src, &len);
  if (len == 0 || (len == 1 && base[0] == '.') || (len == 2 && !strncmp(base, "..", 2)) || base[0] == '/')
    base = "model", len = 5; /* "", ".", "..", "/" */
  int need = snprintf(buf, n, "%.*s-fixformer", (int)len, base);
  return need < 0 || (size_t)need >= n ? ff_fail(err, FF_ENOMEM, "%.64s...: the folder's name is longer than %zu bytes",
                                                 src, n ? n - 1 : 0)
                                       : 0;
}

/* A C identifier (what validate.lua accepts as name) from the source's file name:
 * no keyword, and none of C's reserved _X or __ prefixes */
static void default_name(const char *src, char *name, size_t n) {
  size_t bl;
  const char *base = import_basename(src, &bl);
  size_t k = 1, blank = 1; /* name[0] is kept for an 'm' in front */
  for (size_t i = 0; i < bl && k + 1 < n && k < 41; i++) {
    char c = base[i];
    name[k++] = letter(c) || (c >= '0' && c <= '9') ? c : '_';
    blank = blank && name[k - 1] == '_';
  }
  name[k] = 0;
  char *c = name + 1;
  if ((c[0] >= '0' && c[0] <= '9') || (c[0] == '_' && (c[1] == '_' || (c[1] >= 'A' && c[1] <= 'Z'))))
    *--c = 'm';
  memmove(name, c, strlen(c) + 1);
  if (blank) snprintf(name, n, "model"); /* "", ".", ".." */
  if (c_keyword(name)) strcat(name, "_model");
}

static int check_name(const char *name, ff_error *err) {
  int ok = strlen(name) <= 48 && (letter(*name) || *name == '_');
  for (const char *c = name; ok && *c; c++) ok = letter(*c) || (*c >= '0' && *c <= '9') || *c == '_';
  if (!ok) return ff_fail(err, FF_EINVAL, "--name: '%s' is not a C identifier of at most 48 characters", name);
  return c_keyword(name) ? ff_fail(err, FF_EINVAL, "--name: '%s' is a C keyword", name) : 0;
}

typedef struct import_job {
  const char *src, *dir, *name;
  const char *origin;      /* what the settings come from (config.json, the .bin), for messages */
  const char *tokenizer;   /* the file to copy, or NULL */
  const char *tok_ext;     /* a tokenizer made from the source (GGUF's): its file's extension, else NULL */
  uint8_t *tok;            /* its bytes */
  size_t tok_len;
  const char **inputs;     /* the files the import reads: none of them is written over */
  int n_inputs, max_seq;   /* max_seq: --max-seq, or 0 */
  const ff_import_options *opt; /* where the summary and the progress go */
  model_desc d;
  outputs o;
} import_job;

/* The description as every command loads it (ff_model_open's sandbox and
 * validate.lua), before anything is written. */
static int check_description(const import_job *j, const char *path, const char *lua, ff_error *err) {
  ff_error e = {0, ""};
  ff_model *m = ff_model_open_text(path, lua, strlen(lua), &e);
  ff_model_close(m);
  return m ? 0 : ff_fail(err, e.code ? e.code : FF_EINVAL, "%s gives a description fixformer refuses: %s", j->origin,
                         e.msg);
}

/* The tokenizer to copy: given (--tokenizer) or found beside the source,
 * read and loaded as generate loads it, against the model's vocab.  One that
 * does not load is an error when given; when found it is left out, why in
 * note (the model still runs on ids). */
static int take_tokenizer(import_job *j, const char *given, const char *found, char *note, size_t n, ff_error *err) {
  const char *path = given ? given : found;
  ff_tokenizer *t = NULL;
  ff_error e = {0, ""};
  *note = 0;
  if (!path) return 0;
  int rc = ff_read_file(path, &j->tok, &j->tok_len, &e);
  if (!rc) rc = ff_tokenizer_parse(path, j->tok, j->tok_len, j->d.vocab, &t, &e);
  ff_tokenizer_free(t);
  if (!rc) {
    j->tokenizer = path;
    return 0;
  }
  free(j->tok);
  j->tok = NULL;
  j->tok_len = 0;
  if (given) return ff_fail(err, rc, "--tokenizer: %s", e.msg);
  snprintf(note, n, "%s", e.msg);
  return 0;
}

/* --max-seq N: fewer positions than the source has (1..its own); a learned
 * table keeps its first N rows */
static int cap_max_seq(import_job *j, ff_error *err) {
  model_desc *d = &j->d;
  d->pos_rows = d->max_seq;
  if (!j->max_seq) return 0;
  if (j->max_seq < 1 || j->max_seq > d->max_seq)
    return ff_fail(err, FF_EINVAL, "--max-seq %d is outside 1..%d (%s: %s = %d)", j->max_seq, d->max_seq, j->origin,
                   d->max_seq_key, d->max_seq);
  d->max_seq = j->max_seq;
  return 0;
}

static void print_cap(const ff_import_options *o, const model_desc *d) {
  if (d->max_seq < d->pos_rows)
    say(o, "  max_seq %d of its %s = %d (--max-seq)%s", d->max_seq, d->max_seq_key, d->pos_rows,
           !strcmp(d->positional, "learned") ? "; pos_embed.weight keeps the first rows" : "");
}

/* NAME.lua, NAME.safetensors and the tokenizer into dir, all or none (dir made if need be). */
static int write_all(import_job *j, ff_error *err) {
  char tok_name[FF_NAME_MAX + 32] = "";
  uint8_t *tok = j->tok;
  size_t tok_len = j->tok_len;
  int rc = 0, made = 0;
  step(j->opt, "write the files", 0);
  if (j->tokenizer) {
    size_t tl = strlen(j->tokenizer);
    const char *ext = j->tok_ext ? j->tok_ext
                      : tl > 5 && !strcmp(j->tokenizer + tl - 5, ".json") ? ".json"
                      : tl > 4 && !strcmp(j->tokenizer + tl - 4, ".bin") ? ".bin" : "";
    snprintf(tok_name, sizeof tok_name, "%s.tokenizer%s", j->name, ext);
  }
  char *lua = describe(&j->d, j->name, j->src, j->tokenizer ? tok_name : NULL);
  char *paths[3] = {NULL, NULL, NULL}, file[FF_NAME_MAX + 32];
  ff_tensor_view *views = calloc((size_t)j->o.n + 1, sizeof *views);
  if (!rc && (!lua || !views)) rc = ff_fail(err, FF_ENOMEM, "out of memory");
  for (int i = 0; i < j->o.n && !rc; i++)
    views[i] = (ff_tensor_view){j->o.t[i].name, j->o.t[i].rank, {j->o.t[i].shape[0], j->o.t[i].shape[1]}, j->o.t[i].data};
  snprintf(file, sizeof file, "%s.safetensors", j->name);
  ff_safetensors_out st; /* written from the tensors, no image of the file in memory */
  memset(&st, 0, sizeof st);
  if (!rc && (paths[1] = join(j->dir, file))) rc = ff_safetensors_out_init(&st, paths[1], views, j->o.n, NULL, 0, err);
  snprintf(file, sizeof file, "%s.lua", j->name);
  paths[0] = join(j->dir, file);
  paths[2] = j->tokenizer ? join(j->dir, tok_name) : NULL;
  if (!rc && (!paths[0] || !paths[1] || (j->tokenizer && !paths[2]))) rc = ff_fail(err, FF_ENOMEM, "out of memory");
  if (!rc) rc = check_description(j, paths[0], lua, err);
  for (int i = 0; i < 3 && !rc; i++) rc = ff_refuse_inputs(paths[i], j->inputs, j->n_inputs, err);
  struct stat sb;
  if (!rc && stat(j->dir, &sb)) {
    if (!mkdir(j->dir, 0777)) made = 1; /* ours to remove on failure; one made meanwhile by another is not */
    else if (errno != EEXIST) rc = ff_fail(err, FF_EIO, "cannot create %s: %s", j->dir, strerror(errno));
  } else if (!rc && !S_ISDIR(sb.st_mode)) {
    rc = ff_fail(err, FF_EIO, "%s is not a directory", j->dir);
  }
  ff_file_out files[3] = {{paths[1], NULL, 0}, {paths[2], tok, tok_len}, {paths[0], lua, lua ? strlen(lua) : 0}};
  const ff_file_stream streams[3] = {{ff_safetensors_out_write, &st}, {NULL, NULL}, {NULL, NULL}};
  if (!rc && !j->tokenizer) files[1] = files[2];
  if (!rc) rc = ff_write_files_atomic_streamed(files, streams, j->tokenizer ? 3 : 2, err);
  if (rc && made) rmdir(j->dir); /* nothing half-written: not even the folder */
  step(j->opt, "write the files", 1);
  if (!rc) {
    say(j->opt, "wrote %s (%zu tensors, %.1f MB)", paths[1], (size_t)j->o.n, st.bytes / 1e6);
    if (j->tokenizer) say(j->opt, "wrote %s (%s %s)", paths[2], j->tok_ext ? "made from" : "copied from", j->tokenizer);
    say(j->opt, "%s", paths[0]);
  }
  for (int i = 0; i < 3; i++) free(paths[i]);
  free(views);
  free(lua);
  ff_safetensors_out_free(&st);
  return rc;
}

/* ---- the two sources ------------------------------------------------------------------------ */

/* config.json's family: model_type, else architectures[0] */
static const family *family_of(const cJSON *root, const char *path, ff_error *err) {
  const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
  const cJSON *archs = cJSON_GetObjectItemCaseSensitive(root, "architectures");
  const char *arch = cJSON_IsArray(archs) ? cJSON_GetStringValue(cJSON_GetArrayItem(archs, 0)) : NULL;
  for (int i = 0; i < N_FAMILIES; i++)
    if (cJSON_IsString(mt) ? !strcmp(mt->valuestring, families[i].model_type)
                           : arch && !strncmp(arch, families[i].arch_hint, strlen(families[i].arch_hint)))
      return &families[i];
  if (cJSON_IsString(mt))
    ff_fail(err, FF_EINVAL, "%s: model_type '%s' is not supported (fixformer imports llama, qwen2, gpt2, bert, marian)", path,
            mt->valuestring);
  else
    ff_fail(err, FF_EINVAL, "%s: no model_type, and architectures '%s' is not one of Llama*, Qwen2*, GPT2*, Bert*, Marian*", path,
            arch ? arch : "(none)");
  return NULL;
}

/* The summary's line on the tokenizer: none, or one left out and why. */
static void print_tokenizer(const import_job *j, const char *note, const char *none) {
  if (*note) say(j->opt, "  tokenizer left out (generate could not load it): %s; generate takes --tokens", note);
  else if (!j->tokenizer) say(j->opt, "  %s (--tokenizer FILE): no vocabulary, generate takes --tokens", none);
}

/* Marian's tokenizer (no --tokenizer): source.spm numbered by vocab.json, as
 * MarianTokenizer splits and numbers a text; left out (why in note) when
 * the files are missing or cannot be read */
static void marian_tokenizer(import_job *j, char *const paths[2], char *note, size_t n) {
  ff_error e = {0, ""};
  ff_tokenizer *t = NULL;
  const char *spm = paths[0], *vocab = paths[1];
  int rc = ff_marian_tokenizer(spm, vocab, &j->d, &j->tok, &j->tok_len, &e);
  if (!rc) rc = ff_tokenizer_parse(spm, j->tok, j->tok_len, j->d.vocab, &t, &e);
  ff_tokenizer_free(t);
  if (!rc) {
    j->tokenizer = spm, j->tok_ext = ".model";
    return;
  }
  free(j->tok);
  j->tok = NULL, j->tok_len = 0;
  snprintf(note, n, "%s", e.msg);
}

static int hf_import(import_job *j, const char *tokenizer, ff_error *err) {
  char *cfg_path = join(j->src, "config.json"), *tok_path = NULL, note[FF_ERROR_MAX] = "", *own[2] = {NULL, NULL};
  source s;
  memset(&s, 0, sizeof s);
  step(j->opt, "read the checkpoint", 0);
  int rc = cfg_path ? 0 : ff_fail(err, FF_ENOMEM, "out of memory");
  cJSON *root = rc ? NULL : ff_json_read(cfg_path, err);
  if (!rc && !root) rc = err->code;
  else if (!rc && !cJSON_IsObject(root)) rc = ff_fail(err, FF_EFORMAT, "%s: not a JSON object", cfg_path);
  const family *f = rc ? NULL : family_of(root, cfg_path, err);
  if (!rc && !f) rc = FF_EINVAL;
  config_reader cr = {root, cfg_path, err, 0};
  j->origin = cfg_path;
  if (!rc) {
    f->config(&cr, &j->d);
    rc = cr.rc;
  }
  if (!rc) rc = cap_max_seq(j, err);
  s.settings = "config.json";
  if (!rc) rc = read_hf_weights(&s, j->src, err);
  if (!rc) rc = source_index(&s, f->strip, err);
  if (!rc) rc = map_roles(&s, f, &j->d, &j->o, err);
  int counts[8] = {0}, tied_head = 0;
  if (!rc) rc = check_leftovers(&s, f, &j->d, &j->o, counts, &tied_head, err);
  const own_tokenizer *ot = f && !tokenizer ? f->tokenizer : NULL;
  char why[160] = "no tokenizer.json";
  for (int i = 0; ot && i < 2 && !rc; i++)
    if (!(own[i] = join(j->src, ot->files[i]))) rc = ff_fail(err, FF_ENOMEM, "out of memory");
  if (ot) snprintf(why, sizeof why, "no %s and %s", ot->files[0], ot->files[1]);
  if (!rc && !tokenizer && !ot && (tok_path = join(j->src, "tokenizer.json")) && !exists(tok_path)) {
    free(tok_path);
    tok_path = NULL;
  }
  if (!rc && ot && (!exists(own[0]) || !exists(own[1]))) snprintf(note, sizeof note, "%s beside config.json", why);
  else if (!rc && ot) ot->build(j, own, note, sizeof note);
  else if (!rc) rc = take_tokenizer(j, tokenizer, tok_path, note, sizeof note, err);
  step(j->opt, "read the checkpoint", 1);
  /* every file read: config.json, the index, the shards, the tokenizer (Marian's: and vocab.json) */
  const char **inputs = rc ? NULL : calloc((size_t)s.n_files + 4, sizeof *inputs);
  if (!rc && !inputs) rc = ff_fail(err, FF_ENOMEM, "out of memory");
  if (!rc) {
    inputs[0] = cfg_path, inputs[1] = s.what, inputs[2] = j->tokenizer, inputs[3] = j->tokenizer ? own[1] : NULL;
    for (int i = 0; i < s.n_files; i++) inputs[4 + i] = s.paths[i];
    j->inputs = inputs;
    j->n_inputs = s.n_files + 4;
    say(j->opt, "import %s: %s (%s, %d file%s)", j->src, f->model_type, s.what, s.n_files, s.n_files > 1 ? "s" : "");
    print_model(j->opt, &j->d);
    print_cap(j->opt, &j->d);
    say(j->opt, "  mapped %d tensors (%zu parameters):", j->o.n, j->o.params);
    print_roles(j->opt, f, &j->d);
    for (int i = 0; f->ignore[i].text; i++)
      if (counts[i]) say(j->opt, "  ignored %d tensor%s: %s", counts[i], counts[i] > 1 ? "s" : "", f->ignore[i].why);
    if (tied_head) say(j->opt, "  ignored lm_head.weight: tied to the embedding (the same values)");
    print_tokenizer(j, note, why);
    rc = write_all(j, err);
  }
  free(inputs);
  free(tok_path);
  free(cfg_path), free(own[0]), free(own[1]);
  cJSON_Delete(root);
  source_free(&s);
  return rc;
}

static int l2c_run(import_job *j, const char *tokenizer, ff_error *err) {
  float *blob = NULL;
  char *tok_path = NULL, note[FF_ERROR_MAX];
  j->origin = j->src;
  step(j->opt, "read the checkpoint", 0);
  int version = 0, rc = l2c_import(j->src, &j->d, &j->o, &blob, &version, err);
  if (!rc) rc = cap_max_seq(j, err);
  if (!rc && !tokenizer) { /* tokenizer.bin beside the checkpoint */
    const char *slash = strrchr(j->src, '/');
    size_t dl = slash ? (size_t)(slash - j->src) + 1 : 0;
    if ((tok_path = malloc(dl + 16))) {
      memcpy(tok_path, j->src, dl);
      strcpy(tok_path + dl, "tokenizer.bin");
      if (!exists(tok_path)) {
        free(tok_path);
        tok_path = NULL;
      }
    }
  }
  if (!rc) rc = take_tokenizer(j, tokenizer, tok_path, note, sizeof note, err);
  step(j->opt, "read the checkpoint", 1);
  const char *inputs[2] = {j->src, j->tokenizer};
  j->inputs = inputs;
  j->n_inputs = 2;
  if (!rc) {
    say(j->opt, "import %s: llama2.c checkpoint, %s (%s classifier)", j->src, version ? "version 1" : "legacy format",
        j->d.tie ? "shared" : "own");
    print_model(j->opt, &j->d);
    print_cap(j->opt, &j->d);
    say(j->opt, "  mapped %d tensors (%zu parameters): token_embedding -> embed.weight, rms_att -> norm1, wq/wk/wv -> "
        "q/k/v_proj, wo -> out_proj,", j->o.n, j->o.params);
    say(j->opt, "    rms_ffn -> norm2, w1 -> gate_proj, w3 -> up_proj, w2 -> linear2, rms_final -> norm%s",
        j->d.tie ? "" : ", wcls -> lm_head");
    say(j->opt, "  RoPE rotates adjacent pairs (interleaved), as llama2.c does%s",
        version ? "" : "; ignored: its freq_cis_real/imag tables (recomputed from rope_theta)");
    print_tokenizer(j, note, "no tokenizer.bin beside it");
    rc = write_all(j, err);
  }
  free(tok_path);
  free(blob);
  return rc;
}

/* GGUF's tensors as the one file of a source, under their own names */
static int gguf_source(source *s, const char *path, const ff_gguf *g, int *counts, int *exact, ff_error *err) {
  if (!(s->files = calloc(1, sizeof *s->files)) || !(s->paths = calloc(1, sizeof *s->paths)) ||
      !(s->paths[0] = strdup(path)) || !(s->what = strdup(path)))
    return ff_fail(err, FF_ENOMEM, "out of memory");
  int rc = ff_gguf_tensors(path, g, &s->files[0], counts, exact, err);
  s->n_files = rc ? 0 : 1;
  s->settings = "its metadata";
  return rc ? rc : source_index(s, "", err);
}

/* dtype int8 when every matrix is Q8_0 and int8's quantization gives its blocks back; else float32 values */
static void gguf_dtype(import_job *j, const ff_gguf *g, const int *counts, int exact, char *why, size_t n) {
  int matrices = 0;
  for (size_t i = 0; i < g->n_t; i++) matrices += g->t[i].n_dims == 2;
  *why = 0;
  if (!counts[FF_GGML_Q8_0]) return;
  if (counts[FF_GGML_Q8_0] == matrices && exact) j->d.dtype = "int8";
  else snprintf(why, n, "%s: the Q8_0 tensors are kept as their float32 values (dtype int8 would quantize them "
                "again)", !exact ? "a Q8_0 block without a +-127 value" : "matrices of other types besides Q8_0");
}

/* the tokenizer of the metadata, loaded as generate loads it; left out (why in note) when it cannot be */
static int gguf_tokenizer(import_job *j, const ff_gguf *g, char *note, size_t n, ff_error *err) {
  uint8_t *bytes;
  size_t len;
  ff_tokenizer *t = NULL;
  ff_error e = {0, ""};
  int rc = ff_gguf_tokenizer(g, j->d.vocab, &bytes, &len, &j->tok_ext, note, n, err);
  if (rc || !bytes) return rc;
  if (ff_tokenizer_parse("the tokenizer of tokenizer.ggml.*", bytes, len, j->d.vocab, &t, &e)) {
    snprintf(note, n, "%s", e.msg);
    free(bytes);
    return 0;
  }
  ff_tokenizer_free(t);
  j->tok = bytes, j->tok_len = len, j->tokenizer = "tokenizer.ggml.*";
  return 0;
}

static void gguf_summary(import_job *j, const ff_gguf *g, const family *f, const int *counts, const char *why) {
  char types[160] = "";
  for (int t = 0; t < 32; t++)
    if (counts[t])
      snprintf(types + strlen(types), sizeof types - strlen(types), "%s%s %d", *types ? ", " : "",
               ff_gguf_type_name((uint32_t)t), counts[t]);
  say(j->opt, "import %s: GGUF version %u, %s (%zu tensors: %s; %zu metadata keys)", j->src, g->version, f->model_type,
      g->n_t, types, g->n_kv);
  print_model(j->opt, &j->d);
  print_cap(j->opt, &j->d);
  say(j->opt, "  mapped %d tensors (%zu parameters):", j->o.n, j->o.params);
  print_roles(j->opt, f, &j->d);
  if (!strcmp(j->d.rope_pairing, "interleaved"))
    say(j->opt, "  RoPE rotates adjacent pairs (interleaved): llama.cpp's converter stores llama's q/k rows so");
  if (j->d.dtype) say(j->opt, "  dtype int8: the Q8_0 blocks as stored (a float scale and 32 int8 a block)");
  else if (*why) say(j->opt, "  %s", why);
}

static int gguf_run(import_job *j, const char *tokenizer, ff_error *err) {
  uint8_t *buf = NULL;
  size_t len;
  ff_gguf g;
  source s;
  const char *arch = NULL;
  char note[FF_ERROR_MAX] = "", why[160] = "";
  int counts[32] = {0}, exact = 1, ignored[1] = {0}, tied = 0;
  memset(&g, 0, sizeof g);
  memset(&s, 0, sizeof s);
  j->origin = j->src;
  step(j->opt, "read the checkpoint", 0);
  int rc = ff_read_file(j->src, &buf, &len, err);
  if (!rc) rc = ff_gguf_parse(j->src, buf, len, &g, err);
  if (!rc) rc = ff_gguf_describe(j->src, &g, &j->d, &arch, err);
  const family *f = &gguf_families[arch && !strcmp(arch, "qwen2")];
  if (!rc) rc = cap_max_seq(j, err);
  if (!rc) rc = gguf_source(&s, j->src, &g, counts, &exact, err);
  if (!rc) rc = map_roles(&s, f, &j->d, &j->o, err);
  if (!rc) rc = check_leftovers(&s, f, &j->d, &j->o, ignored, &tied, err);
  if (!rc) gguf_dtype(j, &g, counts, exact, why, sizeof why);
  if (!rc) rc = tokenizer ? take_tokenizer(j, tokenizer, NULL, note, sizeof note, err)
                          : gguf_tokenizer(j, &g, note, sizeof note, err);
  step(j->opt, "read the checkpoint", 1);
  const char *inputs[2] = {j->src, j->tok_ext ? NULL : j->tokenizer};
  j->inputs = inputs;
  j->n_inputs = 2;
  if (!rc) {
    gguf_summary(j, &g, f, counts, why);
    print_tokenizer(j, note, "no tokenizer in its metadata");
    rc = write_all(j, err);
  }
  ff_gguf_free(&g);
  source_free(&s);
  free(buf);
  return rc;
}

/* whether path starts with GGUF's magic */
static int is_gguf(const char *path) {
  char magic[4] = "";
  FILE *f = fopen(path, "rb");
  size_t n = f ? fread(magic, 1, 4, f) : 0;
  if (f) fclose(f);
  return n == 4 && !memcmp(magic, "GGUF", 4);
}

int ff_import(const char *src, const char *dir, const ff_import_options *options, ff_error *err) {
  static const ff_import_options defaults; /* all NULL and 0 */
  const ff_import_options *o = options ? options : &defaults;
  const char *name = o->name, *tokenizer = o->tokenizer;
  import_job j;
  char derived[FF_NAME_MAX];
  struct stat st, ts;
  int rc;
  if (!src || !dir) return ff_fail(err, FF_EINVAL, "ff_import: %s is NULL", src ? "dir" : "src");
  if (o->max_seq < 0) return ff_fail(err, FF_EINVAL, "--max-seq %d: must be at least 1 (0: the source's)", o->max_seq);
  memset(&j, 0, sizeof j);
  j.opt = o;
  if (stat(src, &st)) return ff_fail(err, FF_EIO, "%s: %s", src, strerror(errno));
  if (!name) default_name(src, derived, sizeof derived);
  if ((rc = check_name(name ? name : derived, err))) return rc;
  j.src = src;
  j.dir = dir;
  j.name = name ? name : derived;
  j.max_seq = o->max_seq;
  if (tokenizer && stat(tokenizer, &ts) == 0 && !S_ISREG(ts.st_mode))
    return ff_fail(err, FF_EIO, "--tokenizer %s: not a regular file", tokenizer);
  size_t sl = strlen(src);
  if (!S_ISDIR(st.st_mode) && ((sl >= 12 && !strcmp(src + sl - 12, ".safetensors")) ||
                               (sl >= 5 && !strcmp(src + sl - 5, ".json"))))
    return ff_fail(err, FF_EINVAL, "%s: give the model folder (with config.json), not one of its files", src);
  if (S_ISDIR(st.st_mode)) rc = hf_import(&j, tokenizer, err);
  else if (is_gguf(src) || (sl >= 5 && !strcmp(src + sl - 5, ".gguf"))) rc = gguf_run(&j, tokenizer, err);
  else rc = l2c_run(&j, tokenizer, err);
  out_free(&j.o);
  free(j.tok);
  return rc;
}
