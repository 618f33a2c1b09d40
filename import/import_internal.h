/* import_internal.h - what import/import.c and import/gguf.c share: the
 * description an import writes.  Internal to import/. */
#ifndef FF_IMPORT_INTERNAL_H
#define FF_IMPORT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "ff_error.h"
#include "ff_io.h"

/* ---- the description to write ------------------------------------------- */

typedef struct {
  const char *family;   /* "llama", "qwen2", "gpt2", "bert", "marian", "llama2.c", "GGUF" */
  const char *arch, *norm, *norm_kind, *activation, *positional, *rope_pairing;
  int d_model, heads, kv_heads, d_ff, layers, vocab, max_seq, token_types;
  int final_norm, bias, tie, embed_norm, lm_head, has_kv_heads;
  int qkv_bias; /* q, k and v biases without the rest (Qwen2): attention_bias true, out_proj_bias false */
  int enc_layers, dec_layers;      /* encoder-decoder (Marian); layers is then enc_layers */
  int scale, head_bias;            /* embeddings scaled by sqrt(d_model); a bias on the logits */
  int pad_id, eos_id, start_id;    /* Marian: the ids its tokenizer gets (the decoder starts from pad) */
  double eps, rope_theta;
  const char *dtype;       /* the weight type to describe ("int8": GGUF's Q8_0 blocks), or NULL */
  const char *max_seq_key; /* the source's name for max_seq, for messages */
  int pos_rows;            /* the positions the source has (a learned table's rows); max_seq may be fewer */
} model_desc;

struct ff_gguf;

/* GGUF (import/gguf.c).  The model's settings from the metadata (llama.* or
 * qwen2.*): *arch is general.architecture. */
int ff_gguf_describe(const char *path, const struct ff_gguf *g, model_desc *d, const char **arch, ff_error *err);
/* The tensors as float32 under their GGUF names, [rows, cols] (dims
 * reversed), sorted as ff_tensor_file_find needs; counts[type] of each
 * ggml type; *q8_exact: every Q8_0 block holds a +-127 (or is all zero), so
 * int8's quantization (scale max|w| / 127) gives back its blocks. */
int ff_gguf_tensors(const char *path, const struct ff_gguf *g, ff_tensor_file *f, int counts[32], int *q8_exact,
                    ff_error *err);
/* The tokenizer of the metadata as a file generate reads: tokenizer.ggml.model
 * "llama" as llama2.c's tokenizer.bin, "gpt2" as a byte-level BPE
 * tokenizer.json (*ext ".bin" or ".json"); none (0, *bytes NULL) with why
 * in note when it has none or one fixformer cannot express. */
int ff_gguf_tokenizer(const struct ff_gguf *g, int vocab, uint8_t **bytes, size_t *len, const char **ext, char *note,
                      size_t n, ff_error *err);

/* Marian (import/marian.c).  Its static positions [rows, d] in its layout:
 * sines in the first half of the columns, cosines in the second. */
int ff_marian_positions(int rows, int d, float **out, ff_error *err);
/* MarianTokenizer's two files as one SentencePiece model numbered by
 * vocab.json (bos: d->start_id, the decoder's start), *bytes malloc'd. */
int ff_marian_tokenizer(const char *spm_path, const char *vocab_path, const model_desc *d, uint8_t **bytes,
                        size_t *len, ff_error *err);

#endif
