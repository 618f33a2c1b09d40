/* gguf.c - a GGUF file's model as import takes it (import_internal.h): the
 * settings from the metadata of the llama and qwen2 architectures (as
 * llama.cpp writes them), the tensors as float32 under their GGUF names (the
 * name table is import.c's), and the tokenizer of tokenizer.ggml.* as the file
 * fixformer already reads for that algorithm.  The file itself is
 * formats/gguf.c's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "ff_gguf.h"
#include "import_internal.h"

/* ---- the settings --------------------------------------------------------------- */

/* Reads keys ARCH.*; the first problem is kept and later reads return their defaults. */
typedef struct {
  const ff_gguf *g;
  const char *path, *arch;
  ff_error *err;
  int rc;
} meta;

static const ff_gguf_kv *meta_get(meta *m, const char *key, char *full, size_t n) {
  snprintf(full, n, "%s.%s", m->arch, key);
  return ff_gguf_find(m->g, full);
}

/* the shortest decimal that is the float32 v (1e-06, not 9.99999997e-07: the description reads as written) */
static double shortest(double v) {
  char buf[32];
  for (int digits = 1; digits < 9; digits++) {
    snprintf(buf, sizeof buf, "%.*g", digits, v);
    if ((float)strtod(buf, NULL) == (float)v) return strtod(buf, NULL);
  }
  return v;
}

/* a number of ARCH.key in (lo, hi] (integral when integer); def < 0: required */
static double meta_num(meta *m, const char *key, double def, double lo, double hi, int integer) {
  char full[128];
  double v;
  if (m->rc) return def;
  const ff_gguf_kv *kv = meta_get(m, key, full, sizeof full);
  if (!kv) {
    if (def < 0) m->rc = ff_fail(m->err, FF_EINVAL, "%s: metadata '%s' is missing", m->path, full);
    return def;
  }
  if (ff_gguf_number(kv, &v) || !(v > lo && v <= hi) || (integer && v != floor(v))) {
    m->rc = integer ? ff_fail(m->err, FF_EINVAL, "%s: metadata '%s': expected an integer in %g..%g", m->path, full,
                              lo + 1, hi)
                    : ff_fail(m->err, FF_EINVAL, "%s: metadata '%s': expected a number above %g, at most %g", m->path,
                              full, lo, hi);
    return def;
  }
  return kv->type == FF_GGUF_F32 ? shortest(v) : v;
}

/* whether kv is the string s */
static int kv_is(const ff_gguf_kv *kv, const char *s) {
  const char **str;
  uint64_t *n;
  if (!kv || kv->type != FF_GGUF_STRING || ff_gguf_strings(kv, &str, &n)) return 0;
  int is = n[0] == strlen(s) && !memcmp(str[0], s, n[0]);
  free(str);
  free(n);
  return is;
}

static int string_count(const ff_gguf *g, const char *key) {
  const ff_gguf_kv *kv = ff_gguf_find(g, key);
  return kv && kv->type == FF_GGUF_ARRAY && kv->elem == FF_GGUF_STRING && kv->n <= 1 << 24 ? (int)kv->n : -1;
}

/* what fixformer does not compute, refused naming the key */
static void meta_unsupported(meta *m) {
  char full[128];
  const ff_gguf_kv *kv;
  double v;
  if (!m->rc && (kv = meta_get(m, "expert_count", full, sizeof full)) && !ff_gguf_number(kv, &v) && v > 0)
    m->rc = ff_fail(m->err, FF_EINVAL, "%s: metadata '%s' = %g: mixtures of experts are not supported", m->path, full, v);
  if (!m->rc && (kv = meta_get(m, "rope.scaling.type", full, sizeof full)) && !kv_is(kv, "none"))
    m->rc = ff_fail(m->err, FF_EINVAL, "%s: metadata '%s': RoPE scaling is not supported (plain RoPE only)", m->path,
                    full);
}

int ff_gguf_describe(const char *path, const ff_gguf *g, model_desc *d, const char **arch, ff_error *err) {
  const ff_gguf_kv *a = ff_gguf_find(g, "general.architecture");
  *arch = kv_is(a, "llama") ? "llama" : kv_is(a, "qwen2") ? "qwen2" : NULL;
  if (!a || a->type != FF_GGUF_STRING) return ff_fail(err, FF_EINVAL, "%s: no general.architecture string", path);
  if (!*arch) {
    const char **s;
    uint64_t *n;
    int rc = ff_gguf_strings(a, &s, &n) ? ff_fail(err, FF_ENOMEM, "out of memory")
             : ff_fail(err, FF_EINVAL, "%s: architecture '%.*s' is not supported (fixformer imports llama, qwen2)",
                       path, (int)(n[0] > 64 ? 64 : n[0]), s[0]);
    free(s);
    free(n);
    return rc;
  }
  meta m = {g, path, *arch, err, 0};
  int qwen2 = !strcmp(*arch, "qwen2");
  /* llama.cpp's convert script permutes llama's q/k rows into Meta's
   * layout, in which RoPE rotates adjacent pairs; qwen2 is stored as HF has
   * it (llama.cpp's NEOX mode: halves) */
  *d = (model_desc){.family = "GGUF", .arch = "decoder-only", .norm = "pre", .norm_kind = "rmsnorm",
                    .activation = "swiglu", .positional = "rope", .rope_pairing = qwen2 ? "rotate_half" : "interleaved",
                    .qkv_bias = qwen2, .final_norm = 1, .lm_head = 1, .has_kv_heads = 1};
  d->d_model = (int)meta_num(&m, "embedding_length", -1, 0, 65536, 1);
  d->layers = (int)meta_num(&m, "block_count", -1, 0, 4096, 1);
  d->d_ff = (int)meta_num(&m, "feed_forward_length", -1, 0, 1 << 24, 1);
  d->heads = (int)meta_num(&m, "attention.head_count", -1, 0, 65536, 1);
  d->kv_heads = (int)meta_num(&m, "attention.head_count_kv", d->heads, 0, 65536, 1);
  d->eps = meta_num(&m, "attention.layer_norm_rms_epsilon", -1, 0, 1, 0);
  d->rope_theta = meta_num(&m, "rope.freq_base", 10000, 1, 1e12, 0);
  d->max_seq = (int)meta_num(&m, "context_length", -1, 0, 1 << 20, 1);
  d->max_seq_key = qwen2 ? "qwen2.context_length" : "llama.context_length";
  const ff_gguf_tensor *emb = ff_gguf_tensor_find(g, "token_embd.weight");
  int tokens = string_count(g, "tokenizer.ggml.tokens");
  d->vocab = (int)meta_num(&m, "vocab_size", tokens > 0 ? tokens : emb && emb->n_dims == 2 ? (double)emb->dims[1] : -1,
                           0, 1 << 24, 1);
  d->tie = !ff_gguf_tensor_find(g, "output.weight");
  meta_unsupported(&m);
  if (m.rc) return m.rc;
  if (d->d_model % d->heads || d->heads % d->kv_heads || (d->d_model / d->heads) % 2)
    return ff_fail(err, FF_EINVAL, "%s: embedding_length %d, head_count %d, head_count_kv %d: heads must divide the "
                   "width (an even head width) and head_count_kv head_count", path, d->d_model, d->heads, d->kv_heads);
  if (meta_num(&m, "rope.dimension_count", d->d_model / d->heads, 0, 65536, 1) != d->d_model / d->heads)
    return m.rc ? m.rc : ff_fail(err, FF_EINVAL, "%s: metadata '%s.rope.dimension_count': RoPE on part of a head is "
                                 "not supported", path, *arch);
  return m.rc;
}

/* ---- the tensors ------------------------------------------------------------------ */

/* whether int8's quantization of block b's values gives b back: a q of
 * +-127 makes max|w| = 127 |d| exactly (an f16 times 127 is exact in float),
 * so the scale is |d| and w / scale is q; all-zero values stay zero */
static int q8_block_exact(const uint8_t *b) {
  int amax = 0;
  for (int k = 0; k < FF_GGML_QK8_0; k++) {
    int q = (int8_t)b[2 + k];
    amax = abs(q) > amax ? abs(q) : amax;
  }
  float d = ff_half_to_float((uint16_t)(b[0] | b[1] << 8));
  return amax == 0 || d == 0 || (amax == 127 && isfinite(d));
}

int ff_gguf_tensors(const char *path, const ff_gguf *g, ff_tensor_file *f, int counts[32], int *q8_exact,
                    ff_error *err) {
  size_t floats = 0, names = 0, bytes;
  memset(f, 0, sizeof *f);
  *q8_exact = 1;
  for (size_t i = 0; i < g->n_t; i++)
    if (ff_size_add(floats, g->t[i].numel, &floats) || ff_size_add(names, strlen(g->t[i].name) + 1, &names))
      return ff_fail(err, FF_ENOMEM, "%s: the tensors' sizes overflow", path);
  if (ff_size_mul(floats, sizeof(float), &bytes) || ff_size_add(bytes, names, &bytes) ||
      !(f->tensors = calloc(g->n_t + 1, sizeof *f->tensors)) || !(f->storage = malloc(bytes + 1))) {
    free(f->tensors);
    f->tensors = NULL;
    return ff_fail(err, FF_ENOMEM, "%s: out of memory", path);
  }
  float *data = f->storage;
  char *name = (char *)(data + floats);
  for (size_t i = 0; i < g->n_t; i++) { /* g's tensors are sorted by name, as the index needs */
    const ff_gguf_tensor *t = &g->t[i];
    ff_tensor *o = &f->tensors[i];
    o->name = strcpy(name, t->name);
    name += strlen(t->name) + 1;
    o->file_dtype = t->type == FF_GGML_F32 ? FF_F32 : t->type == FF_GGML_BF16 ? FF_BF16 : FF_F16;
    o->rank = (int)t->n_dims;
    for (uint32_t k = 0; k < t->n_dims; k++) o->shape[k] = (int64_t)t->dims[t->n_dims - 1 - k];
    o->numel = t->numel;
    o->data = data;
    ff_gguf_floats(t, data);
    data += t->numel;
    counts[t->type < 32 ? t->type : 31]++;
    for (size_t b = 0; t->type == FF_GGML_Q8_0 && b < t->bytes; b += 34) *q8_exact &= q8_block_exact(t->data + b);
  }
  f->count = (int)g->n_t;
  return 0;
}

/* ---- the tokenizer ---------------------------------------------------------------- */

typedef struct {
  const char **s;
  uint64_t *n;
  int count;
} strings;

/* the string array key, count entries (or note why not) */
static int get_strings(const ff_gguf *g, const char *key, int count, strings *out, char *note, size_t nn) {
  const ff_gguf_kv *kv = ff_gguf_find(g, key);
  memset(out, 0, sizeof *out);
  if (!kv || kv->type != FF_GGUF_ARRAY || kv->elem != FF_GGUF_STRING) return snprintf(note, nn, "no %s strings", key), 1;
  if (count >= 0 && kv->n != (uint64_t)count)
    return snprintf(note, nn, "%s has %llu entries, the model's vocab is %d", key, (unsigned long long)kv->n, count), 1;
  if (ff_gguf_strings(kv, &out->s, &out->n)) return -1;
  out->count = (int)kv->n;
  for (int i = 0; i < out->count; i++)
    if (memchr(out->s[i], 0, out->n[i]) || !out->n[i])
      return snprintf(note, nn, "%s[%d] is %s", key, i, out->n[i] ? "a string with a NUL byte" : "empty"), 1;
  return 0;
}

/* n bytes as a C string (C99 has no strndup) */
static char *dup_n(const char *s, uint64_t n) {
  char *d = malloc((size_t)n + 1);
  if (d) memcpy(d, s, (size_t)n), d[n] = 0;
  return d;
}

static void strings_free(strings *s) {
  free(s->s);
  free(s->n);
}

/* an integer metadata value, or def */
static int meta_id(const ff_gguf *g, const char *key, int def) {
  const ff_gguf_kv *kv = ff_gguf_find(g, key);
  double v;
  return kv && !ff_gguf_number(kv, &v) && v >= 0 && v < 1 << 24 ? (int)v : def;
}

/* SentencePiece BPE as llama2.c's tokenizer.bin (its tokenizer.py's export:
 * U+2581 as a space; run.c's fixed ids: <unk> <s> </s>, then bytes 0..255) */
static int llama_bin(const ff_gguf *g, const strings *tok, uint8_t **bytes, size_t *len, char *note, size_t nn) {
  const ff_gguf_kv *sc = ff_gguf_find(g, "tokenizer.ggml.scores");
  char want[8];
  if (!sc || sc->type != FF_GGUF_ARRAY || sc->n != (uint64_t)tok->count || (sc->elem != FF_GGUF_F32))
    return snprintf(note, nn, "no tokenizer.ggml.scores float32 array of %d entries", tok->count), 1;
  if (meta_id(g, "tokenizer.ggml.bos_token_id", 1) != 1 || meta_id(g, "tokenizer.ggml.eos_token_id", 2) != 2)
    return snprintf(note, nn, "bos/eos ids other than 1 and 2 (llama2.c's tokenizer has them fixed)"), 1;
  for (int b = 0; b < 256 && tok->count >= 259; b++) {
    snprintf(want, sizeof want, "<0x%02X>", b);
    if (tok->n[3 + b] != 6 || memcmp(tok->s[3 + b], want, 6))
      return snprintf(note, nn, "token %d is not the byte token %s (llama2.c's byte fallback is id 3 + byte)", 3 + b,
                      want), 1;
  }
  size_t total = 4, max = 1;
  for (int i = 0; i < tok->count; i++) total += 8 + tok->n[i], max = tok->n[i] > max ? tok->n[i] : max;
  uint8_t *p = *bytes = malloc(total);
  if (!p) return -1;
  uint32_t m = (uint32_t)max;
  memcpy(p, &m, 4), p += 4;
  for (int i = 0; i < tok->count; i++) {
    double score;
    ff_gguf_array_number(sc, (uint64_t)i, &score);
    float s = (float)score;
    uint8_t *lenp = p + 4;
    memcpy(p, &s, 4), p += 8;
    const uint8_t *c = (const uint8_t *)tok->s[i];
    uint32_t k = 0;
    for (uint64_t j = 0; j < tok->n[i]; j++) {
      if (j + 2 < tok->n[i] && c[j] == 0xE2 && c[j + 1] == 0x96 && c[j + 2] == 0x81) p[k++] = ' ', j += 2;
      else p[k++] = c[j];
    }
    memcpy(lenp, &k, 4), p += k;
  }
  *len = (size_t)(p - *bytes);
  return 0;
}

/* tokenizer.ggml.pre's pattern, as the Split of a tokenizer.json (the
 * patterns tok_hf.c implements: llama.cpp's names for LLaMA-3's and
 * Qwen2's); NULL: GPT-2's, ByteLevel's own; "": another */
static const char *pre_pattern(const ff_gguf_kv *pre) {
  static const char llama3[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
                               "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  static const char qwen2[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
                              "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  if (!pre || kv_is(pre, "default") || kv_is(pre, "gpt-2")) return NULL;
  if (kv_is(pre, "llama-bpe") || kv_is(pre, "llama3") || kv_is(pre, "llama-v3")) return llama3;
  return kv_is(pre, "qwen2") ? qwen2 : "";
}

/* the pre-tokenizer: ByteLevel with GPT-2's regex, or Sequence [Split
 * (pattern, Isolated), ByteLevel without it] as LLaMA-3's and Qwen2's
 * tokenizer.json files have it */
static cJSON *pre_tokenizer(const char *pattern) {
  cJSON *level = cJSON_CreateObject(), *seq, *list, *split;
  cJSON_AddStringToObject(level, "type", "ByteLevel");
  cJSON_AddBoolToObject(level, "add_prefix_space", 0), cJSON_AddBoolToObject(level, "use_regex", !pattern);
  if (!pattern) return level;
  seq = cJSON_CreateObject(), list = cJSON_AddArrayToObject(seq, "pretokenizers"), split = cJSON_CreateObject();
  cJSON_AddStringToObject(seq, "type", "Sequence");
  cJSON_AddStringToObject(split, "type", "Split"), cJSON_AddStringToObject(split, "behavior", "Isolated");
  cJSON_AddStringToObject(cJSON_AddObjectToObject(split, "pattern"), "Regex", pattern);
  cJSON_AddItemToArray(list, split), cJSON_AddItemToArray(list, level);
  return seq;
}

/* byte-level BPE as a tokenizer.json (ByteLevel, after LLaMA-3's or
 * Qwen2's Split): the vocabulary, the merges, control and user-defined
 * tokens as added tokens */
static int gpt2_json(const ff_gguf *g, const strings *tok, uint8_t **bytes, size_t *len, char *note, size_t nn) {
  const ff_gguf_kv *pre = ff_gguf_find(g, "tokenizer.ggml.pre"), *types = ff_gguf_find(g, "tokenizer.ggml.token_type");
  const char *pattern = pre_pattern(pre);
  strings merges;
  if (pattern && !pattern[0])
    return snprintf(note, nn, "tokenizer.ggml.pre is not \"default\", \"gpt-2\", \"llama-bpe\" or \"qwen2\": "
                    "another pre-tokenizer regex is not supported"), 1;
  int rc = get_strings(g, "tokenizer.ggml.merges", -1, &merges, note, nn);
  if (rc) return rc;
  cJSON *root = cJSON_CreateObject(), *model = cJSON_AddObjectToObject(root, "model");
  cJSON *vocab = cJSON_AddObjectToObject(model, "vocab"), *added = cJSON_AddArrayToObject(root, "added_tokens");
  cJSON *m = cJSON_AddArrayToObject(model, "merges"), *level = cJSON_CreateObject();
  char *text = NULL;
  cJSON_AddStringToObject(model, "type", "BPE");
  cJSON_AddBoolToObject(level, "add_prefix_space", 0), cJSON_AddBoolToObject(level, "use_regex", 1);
  cJSON_AddStringToObject(level, "type", "ByteLevel");
  cJSON_AddItemToObject(root, "pre_tokenizer", pre_tokenizer(pattern));
  cJSON_AddItemToObject(root, "decoder", level);
  for (int i = 0; i < tok->count; i++) {
    char *s = dup_n(tok->s[i], tok->n[i]);
    double type = 1;
    if (types) ff_gguf_array_number(types, (uint64_t)i, &type);
    if (s && (type == 3 || type == 4)) { /* control, user-defined */
      cJSON *a = cJSON_CreateObject();
      cJSON_AddNumberToObject(a, "id", i), cJSON_AddStringToObject(a, "content", s);
      cJSON_AddBoolToObject(a, "special", type == 3);
      cJSON_AddItemToArray(added, a);
    }
    if (s) cJSON_AddNumberToObject(vocab, s, i);
    free(s);
  }
  for (int i = 0; i < merges.count; i++) {
    char *s = dup_n(merges.s[i], merges.n[i]);
    if (s) cJSON_AddItemToArray(m, cJSON_CreateString(s));
    free(s);
  }
  text = cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  strings_free(&merges);
  if (!text) return -1;
  *bytes = (uint8_t *)text, *len = strlen(text);
  return 0;
}

int ff_gguf_tokenizer(const ff_gguf *g, int vocab, uint8_t **bytes, size_t *len, const char **ext, char *note,
                      size_t n, ff_error *err) {
  const ff_gguf_kv *model = ff_gguf_find(g, "tokenizer.ggml.model");
  strings tok;
  int llama = kv_is(model, "llama"), rc;
  *bytes = NULL, *len = 0, *note = 0;
  *ext = llama ? ".bin" : ".json";
  if (!model) return snprintf(note, n, "no tokenizer.ggml.model"), 0;
  if (!llama && !kv_is(model, "gpt2"))
    return snprintf(note, n, "tokenizer.ggml.model is not \"llama\" or \"gpt2\""), 0;
  if ((rc = get_strings(g, "tokenizer.ggml.tokens", vocab, &tok, note, n)) == 0)
    rc = llama ? llama_bin(g, &tok, bytes, len, note, n) : gpt2_json(g, &tok, bytes, len, note, n);
  strings_free(&tok);
  return rc < 0 ? ff_fail(err, FF_ENOMEM, "out of memory") : 0;
}
