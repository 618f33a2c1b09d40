/* tokenizer.c - one interface over the tokenizer files a description may
 * name: fixformer's JSON vocabulary (vocab.c), llama2.c's tokenizer.bin and
 * Hugging Face tokenizer.json (tok_hf.c reads it).  Each is read into the
 * flat tables that tok_encode.c encodes and decodes with. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

void ff_tokenizer_free(ff_tokenizer *t) {
  if (!t) return;
  ff_vocab_free(&t->vocab);
  for (int i = 0; t->tok && i < t->info.size; i++) free(t->tok[i]);
  free(t->tok), free(t->len), free(t->score), free(t->order), free(t->special), free(t->index), free(t->merges);
  free(t->added), free(t->piece_score), free(t->charsmap), free(t->charsmap_text);
  free(t);
}

const ff_tokenizer_info *ff_tokenizer_get_info(const ff_tokenizer *t) { return &t->info; }

const ff_vocab *ff_tokenizer_vocab(const ff_tokenizer *t) {
  return t->info.kind == FF_TOK_VOCAB ? &t->vocab : NULL;
}

/* ---- llama2.c's tokenizer.bin -------------------------------------------------- */

static int rd_i32(const uint8_t *p) { int32_t v; memcpy(&v, p, 4); return v; }

/* one token at *at: float score, int len, len bytes */
static int llama2c_token(const char *path, const uint8_t *buf, size_t len, size_t *at, int max_len, ff_tokenizer *t,
                         int id, ff_error *err) {
  if (len - *at < 8) return ff_fail(err, FF_EFORMAT, "%s: truncated in token %d (its score and length)", path, id);
  float score;
  memcpy(&score, buf + *at, 4);
  int n = rd_i32(buf + *at + 4);
  *at += 8;
  if (!isfinite(score)) return ff_fail(err, FF_EFORMAT, "%s: token %d has a score that is not finite", path, id);
  if (n < 1 || n > max_len)
    return ff_fail(err, FF_EFORMAT, "%s: token %d has length %d, outside [1, max_token_length = %d]", path, id, n,
                   max_len);
  if (len - *at < (size_t)n) return ff_fail(err, FF_EFORMAT, "%s: truncated in token %d (%d bytes)", path, id, n);
  if (memchr(buf + *at, 0, (size_t)n)) return ff_fail(err, FF_EFORMAT, "%s: token %d contains a NUL byte", path, id);
  if (!(t->tok[id] = malloc((size_t)n + 1))) return ff_fail(err, FF_ENOMEM, "out of memory");
  memcpy(t->tok[id], buf + *at, (size_t)n);
  t->tok[id][n] = 0;
  t->len[id] = (uint32_t)n, t->score[id] = score;
  *at += (size_t)n;
  return 0;
}

/* the order a token merges in, from its score: the best (highest) first,
 * equal scores equal; FF_TOK_NEVER for one run.c never merges into */
static uint32_t score_order(float score) {
  uint32_t u;
  if (!(score > -1e10f)) return FF_TOK_NEVER;
  if (score == 0) score = 0; /* -0 sorts with +0 */
  memcpy(&u, &score, 4);
  u = u & 0x80000000u ? ~u : u | 0x80000000u; /* ascending as the floats */
  return ~u;
}

/* counts the tokens first (vocab_size is not in the file: it is the
 * checkpoint's), then reads them; the token that stopped the count (one slot
 * more) gets its own message */
static int llama2c_parse(const char *path, const uint8_t *buf, size_t len, int expected, ff_tokenizer *t,
                         ff_error *err) {
  int max_len = rd_i32(buf), count = 0, rc, dup;
  if (max_len < 1 || max_len > 65536)
    return ff_fail(err, FF_EFORMAT, "%s: max_token_length %d is outside [1, 65536]", path, max_len);
  for (size_t at = 4; at < len && count <= TOK_MAX_IDS; count++) {
    int n = len - at < 8 ? 0 : rd_i32(buf + at + 4);
    if (n < 1 || n > max_len || len - at - 8 < (size_t)n) break;
    at += 8 + (size_t)n;
  }
  if (count > TOK_MAX_IDS) return ff_fail(err, FF_EFORMAT, "%s: more than %d tokens", path, TOK_MAX_IDS);
  if ((rc = ff_tok_alloc(t, count + 1, err))) return rc;
  size_t at = 4;
  for (int id = 0; at < len; id++)
    if ((rc = llama2c_token(path, buf, len, &at, max_len, t, id, err))) return rc;
  t->info.size = count;
  if (count < 1) return ff_fail(err, FF_EFORMAT, "%s: no tokens after max_token_length", path);
  if (expected > 0 && count != expected)
    return ff_fail(err, FF_ESHAPE, "%s: %d tokens, but the model's vocab is %d", path, count, expected);
  if ((rc = ff_tok_index(t, &dup, err))) return rc;
  t->info = (ff_tokenizer_info){FF_TOK_LLAMA2C, count, -1, count > 1 ? 1 : -1, count > 2 ? 2 : -1, 0, 1,
                                count >= 259, -1, 0, {0}, 0, {0}};
  for (int i = 0; i < 3 && i < count; i++) t->special[i] = 1; /* <unk> <s> </s> */
  if (!(t->order = malloc(sizeof *t->order * (size_t)count))) return ff_fail(err, FF_ENOMEM, "out of memory");
  for (int i = 0; i < count; i++) t->order[i] = score_order(t->score[i]);
  t->tab.order = t->order;
  return 0;
}

/* tok_tables.h numbers the kinds as ff_io.h does */
typedef char tok_kinds_agree[FF_TOK_KIND_VOCAB == FF_TOK_VOCAB && FF_TOK_KIND_LLAMA2C == FF_TOK_LLAMA2C &&
                                     FF_TOK_KIND_BYTES == FF_TOK_BPE_BYTES && FF_TOK_KIND_SP == FF_TOK_BPE_SP &&
                                     FF_TOK_KIND_WORDPIECE == FF_TOK_WORDPIECE && FF_TOK_KIND_UNIGRAM == FF_TOK_UNIGRAM
                                 ? 1 : -1];

/* ---- encoding and decoding ------------------------------------------------------ */

/* the message of a failed ff_tok_encode (why's piece may point into the
 * scratch: before it is freed) */
static int encode_failed(const ff_tok_tables *t, int rc, const ff_tok_why *why, int cap, ff_error *err) {
  switch (rc) {
  case FF_TOK_EFULL: return ff_fail(err, FF_ELENGTH, "text: more than %d tokens", cap);
  case FF_TOK_EUNKNOWN:
    if (t->kind == FF_TOK_KIND_VOCAB)
      return ff_fail(err, FF_ETOKEN, "text: '%.*s' at byte %zu is not in the vocabulary", (int)why->len, why->piece,
                     why->at);
    return ff_fail(err, FF_ETOKEN, "text: '%.*s' is not in the vocabulary, which has no unknown token", (int)why->len,
                   why->piece);
  case FF_TOK_EBYTE:
    return ff_fail(err, FF_ETOKEN, "text: byte 0x%02x needs the byte token %d, above the vocab", why->byte,
                   why->byte + 3);
  default: return ff_fail(err, FF_EINVAL, "internal: the tokenizer's scratch is too small");
  }
}

int ff_tok_encode_text(const ff_tok_tables *t, const char *text, int32_t *ids, int cap, int *n, ff_error *err) {
  size_t len = strlen(text), bytes = ff_tok_work_bytes(t, len);
  ff_tok_why why;
  *n = 0;
  if (len > ff_tok_max_text())
    return ff_fail(err, FF_ELENGTH, "text: %zu bytes, above %zu", len, ff_tok_max_text());
  if (bytes == (size_t)-1) /* the normalizer's growth: a smaller bound */
    return ff_fail(err, FF_ELENGTH, "text: %zu bytes, more than the tokenizer's normalizer takes", len);
  void *work = malloc(bytes);
  if (!work) return ff_fail(err, FF_ENOMEM, "out of memory");
  int rc = ff_tok_encode(t, text, len, work, bytes, ids, cap, &why);
  if (rc >= 0) *n = rc, rc = 0;
  else rc = encode_failed(t, rc, &why, cap, err);
  free(work);
  return rc;
}

int ff_tokenizer_encode(const ff_tokenizer *t, const char *text, int32_t *ids, int cap, int *n, ff_error *err) {
  return ff_tok_encode_text(&t->tab, text, ids, cap, n, err);
}

int ff_tokenizer_encode_template(const ff_tokenizer *t, const char *text, int prefix, int bos, int suffix, int32_t *ids,
                                 int cap, int *n, ff_error *err) {
  const ff_tokenizer_info *in = &t->info;
  int pre = prefix ? in->n_prefix : 0, suf = suffix ? in->n_suffix : 0, k = 0;
  *n = 0;
  if (cap <= pre + suf) return ff_fail(err, FF_ELENGTH, "text: %d ids have no room beside the template's %d", cap,
                                       pre + suf);
  int rc = ff_tok_encode_text(&t->tab, text, ids + pre, cap - pre - suf, &k, err);
  if (rc) return rc;
  for (int i = 0; i < pre; i++) ids[i] = i == 0 && bos >= 0 ? bos : in->prefix[i];
  for (int i = 0; i < suf; i++) ids[pre + k + i] = in->suffix[i];
  *n = pre + k + suf;
  return *n ? 0 : ff_fail(err, FF_ELENGTH, "the text is empty");
}

/* the template of a format that names bos and tail alone (llama2.c, SentencePiece, a JSON vocabulary) */
static void template_of(ff_tokenizer_info *in) {
  if (!in->n_prefix && in->add_bos && in->bos >= 0) in->prefix[in->n_prefix++] = in->bos;
  if (!in->n_suffix && in->tail >= 0) in->suffix[in->n_suffix++] = in->tail;
}

size_t ff_tokenizer_decode(const ff_tokenizer *t, const int32_t *ids, int n, char *text, size_t cap) {
  return ff_tok_decode(&t->tab, ids, n, text, cap);
}

/* ---- loading ----------------------------------------------------------------- */

/* the format from the content: JSON cannot hold a NUL byte, a
 * tokenizer.bin starts with a little-endian max_token_length below 2^24,
 * a SentencePiece model with its first piece (protobuf field 1: 0x0a) */
int ff_tokenizer_parse(const char *path, const uint8_t *buf, size_t len, int expected_size, ff_tokenizer **out,
                       ff_error *err) {
  ff_tokenizer *t = calloc(1, sizeof *t);
  int rc;
  *out = NULL;
  if (!t) return ff_fail(err, FF_ENOMEM, "out of memory");
  t->info = (ff_tokenizer_info){FF_TOK_VOCAB, 0, -1, -1, -1, -1, 0, 0, -1, 0, {0}, 0, {0}};
  if (len >= 4 && buf[3] == 0) {
    rc = llama2c_parse(path, buf, len, expected_size, t, err);
  } else if (len >= 2 && buf[0] == 0x0a) { /* a protobuf's field 1, length-delimited: the pieces */
    rc = ff_tok_spm_parse(path, buf, len, expected_size, t, err);
  } else if ((rc = ff_tok_hf_parse(path, (const char *)buf, len, expected_size, t, err)) == 1) {
    /* not a tokenizer.json: fixformer's own vocabulary */
    if (!(rc = ff_vocab_parse(path, (const char *)buf, len, expected_size, &t->vocab, err)))
      t->info = (ff_tokenizer_info){FF_TOK_VOCAB, t->vocab.size, t->vocab.pad, t->vocab.bos, t->vocab.eos,
                                    t->vocab.unk, 0, 0, -1, 0, {0}, 0, {0}};
  }
  if (rc) {
    ff_tokenizer_free(t);
    return rc;
  }
  template_of(&t->info);
  if (t->info.kind == FF_TOK_VOCAB) t->tab = ff_vocab_tables(&t->vocab);
  t->tab.kind = (int)t->info.kind, t->tab.size = t->info.size, t->tab.unk = t->info.unk;
  *out = t;
  return 0;
}

int ff_tokenizer_load(const char *path, int expected_size, ff_tokenizer **out, ff_error *err) {
  uint8_t *buf;
  size_t len;
  *out = NULL;
  int rc = ff_read_file(path, &buf, &len, err);
  if (rc) return rc;
  rc = ff_tokenizer_parse(path, buf, len, expected_size, out, err);
  free(buf);
  return rc;
}
