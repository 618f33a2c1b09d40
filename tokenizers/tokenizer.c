/* tokenizer.c - one interface over the tokenizer files a description may
 * name: fixformer's JSON vocabulary (vocab.c), llama2.c's tokenizer.bin and
 * Hugging Face tokenizer.json (tok_hf.c reads it), with their encoders and
 * decoders. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

#define SP "\xe2\x96\x81" /* U+2581, SentencePiece's space */

void ff_tokenizer_free(ff_tokenizer *t) {
  if (!t) return;
  ff_vocab_free(&t->vocab);
  for (int i = 0; t->tok && i < t->info.size; i++) free(t->tok[i]);
  free(t->tok), free(t->len), free(t->score), free(t->special), free(t->index), free(t->merges), free(t->added);
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
                                count >= 259, -1};
  for (int i = 0; i < 3 && i < count; i++) t->special[i] = 1; /* <unk> <s> </s> */
  return 0;
}

/* ---- encoding --------------------------------------------------------------- */

typedef struct {
  int32_t *ids;
  int cap, n;
  ff_error *err;
  void *work; /* scratch every word of one text reuses, work_cap bytes */
  size_t work_cap;
} tok_out;

/* at least bytes of scratch (the previous contents lost), or NULL after
 * setting the message */
static void *work(tok_out *o, size_t bytes) {
  if (bytes <= o->work_cap) return o->work;
  free(o->work);
  o->work_cap = bytes > 2 * o->work_cap ? bytes : 2 * o->work_cap;
  if (!(o->work = malloc(o->work_cap))) o->work_cap = 0, ff_fail(o->err, FF_ENOMEM, "out of memory");
  return o->work;
}

static int push(tok_out *o, int32_t id) {
  if (o->n == o->cap) return ff_fail(o->err, FF_ELENGTH, "text: more than %d tokens", o->cap);
  o->ids[o->n++] = id;
  return 0;
}

static int push_all(tok_out *o, const int32_t *sym, int m) {
  int rc = 0;
  for (int i = 0; i < m && !rc; i++) rc = push(o, sym[i]);
  return rc;
}

/* a pair that may merge: a b at position pos into id (a heap ordered by
 * key, then position: Hugging Face's rank, or minus llama2.c's score) */
typedef struct {
  double key;
  int pos;
  int32_t a, b, id;
} bpe_cand;

static int cand_before(const bpe_cand *x, const bpe_cand *y) {
  return x->key != y->key ? x->key < y->key : x->pos < y->pos;
}

static void heap_push(bpe_cand *h, int *n, bpe_cand c) {
  int i = (*n)++;
  for (; i > 0 && cand_before(&c, &h[(i - 1) / 2]); i = (i - 1) / 2) h[i] = h[(i - 1) / 2];
  h[i] = c;
}

static bpe_cand heap_pop(bpe_cand *h, int *n) {
  bpe_cand top = h[0], last = h[--(*n)];
  int i = 0;
  for (int c; (c = 2 * i + 1) < *n; i = c) {
    if (c + 1 < *n && cand_before(&h[c + 1], &h[c])) c++;
    if (!cand_before(&h[c], &last)) break;
    h[i] = h[c];
  }
  h[i] = last;
  return top;
}

/* the pair at i, j if it merges: by the merges list (Hugging Face), or when
 * its concatenation is a token scoring above -1e10 (llama2.c's run.c) */
static void cand_add(const ff_tokenizer *t, bpe_cand *h, int *n, const int32_t *sym, int i, int j) {
  if (i < 0 || j < 0) return;
  if (t->info.kind != FF_TOK_LLAMA2C) {
    const tok_merge *g = ff_tok_merge_of(t, sym[i], sym[j]);
    if (g) heap_push(h, n, (bpe_cand){g->rank, i, sym[i], sym[j], g->id});
    return;
  }
  const char *a = t->tok[sym[i]], *b = t->tok[sym[j]];
  size_t la = t->len[sym[i]], lb = t->len[sym[j]];
  int id = la + lb > t->max_len ? -1 : ff_tok_lookup2(t, ff_tok_hash(ff_tok_hash(TOK_HASH0, a, la), b, lb), a, la, b, lb);
  if (id >= 0 && t->score[id] > -1e10f) heap_push(h, n, (bpe_cand){-(double)t->score[id], i, sym[i], sym[j], id});
}

/* sym[n] (ids) then what merging them needs, in one piece of scratch */
typedef struct {
  int32_t *sym, *next, *prev;
  bpe_cand *heap; /* n - 1 pairs, then at most 2 a merge */
} bpe_work;

static int bpe_work_get(tok_out *o, size_t n, bpe_work *w) {
  const size_t each = 3 * sizeof *w->heap + 3 * sizeof(int32_t);
  if (n > (size_t)INT_MAX / 4 || n > SIZE_MAX / each) /* positions are ints */
    return ff_fail(o->err, FF_ELENGTH, "text: a word of %zu bytes, above %d", n, INT_MAX / 4);
  char *p = work(o, n * each);
  if (!p) return FF_ENOMEM;
  w->heap = (bpe_cand *)p, w->sym = (int32_t *)(w->heap + 3 * n), w->next = w->sym + n, w->prev = w->next + n;
  return 0;
}

/* merges the best pair (the leftmost of equals) until no pair merges, as
 * Hugging Face's BPE and llama2.c's run.c do, in O(n log n): a popped pair
 * that changed since it was pushed is skipped */
static void merge_pairs(const ff_tokenizer *t, const bpe_work *w, int *m) {
  int n = *m, hn = 0;
  int32_t *sym = w->sym, *next = w->next, *prev = w->prev;
  bpe_cand *h = w->heap;
  if (n < 2) return;
  for (int i = 0; i < n; i++) next[i] = i + 1 < n ? i + 1 : -1, prev[i] = i - 1;
  for (int i = 0; i + 1 < n; i++) cand_add(t, h, &hn, sym, i, i + 1);
  while (hn) {
    bpe_cand c = heap_pop(h, &hn);
    int j = next[c.pos];
    if (sym[c.pos] != c.a || j < 0 || sym[j] != c.b) continue;
    sym[c.pos] = c.id, sym[j] = -1;
    next[c.pos] = next[j];
    if (next[j] >= 0) prev[next[j]] = c.pos;
    cand_add(t, h, &hn, sym, prev[c.pos], c.pos);
    cand_add(t, h, &hn, sym, c.pos, next[c.pos]);
  }
  *m = 0;
  for (int i = 0; i < n; i++)
    if (sym[i] >= 0) sym[(*m)++] = sym[i];
}

static int no_token(ff_error *err, const char *s, size_t n) {
  return ff_fail(err, FF_ETOKEN, "text: '%.*s' is not in the vocabulary, which has no unknown token", (int)n, s);
}

/* one character's token, or its bytes as ids byte + 3 (llama2.c) */
static int llama2c_char(const ff_tokenizer *t, const char *s, size_t k, int32_t *sym, int *m, ff_error *err) {
  int id = ff_tok_lookup(t, s, k);
  if (id >= 0) return sym[(*m)++] = id, 0;
  for (size_t b = 0; b < k; b++) {
    int bid = (unsigned char)s[b] + 3;
    if (bid >= t->info.size)
      return ff_fail(err, FF_ETOKEN, "text: byte 0x%02x needs the byte token %d, above the vocab",
                     (unsigned char)s[b], bid);
    sym[(*m)++] = bid;
  }
  return 0;
}

/* llama2.c's encode: a dummy " " first, each UTF-8 character its token or
 * its bytes, then merges by score */
static int llama2c_encode(const ff_tokenizer *t, const char *text, tok_out *o) {
  size_t len = strlen(text);
  bpe_work w;
  int m = 0, rc;
  if (!len) return 0;
  if ((rc = bpe_work_get(o, len + 1, &w))) return rc;
  int32_t *sym = w.sym;
  rc = llama2c_char(t, " ", 1, sym, &m, o->err);
  for (size_t at = 0, k; !rc && at < len; at += k) {
    k = 1; /* run.c: a lead byte and at most 3 continuation bytes */
    while (k < 4 && at + k < len && ((unsigned char)text[at + k] & 0xC0) == 0x80) k++;
    rc = llama2c_char(t, text + at, k, sym, &m, o->err);
  }
  if (!rc) merge_pairs(t, &w, &m);
  return rc ? rc : push_all(o, sym, m);
}

/* a Hugging Face BPE word: each character its token, else its <0xXX> bytes
 * (byte_fallback), else unk (runs of unknowns fused into one by fuse_unk);
 * then merges by rank */
static int bpe_word(const ff_tokenizer *t, const char *w, size_t len, tok_out *o) {
  int id, m = 0, rc, last_unk = 0;
  bpe_work bw;
  if (!len) return 0;
  if (t->ignore_merges && (id = ff_tok_lookup(t, w, len)) >= 0) return push(o, id);
  if ((rc = bpe_work_get(o, len, &bw))) return rc;
  int32_t *sym = bw.sym;
  for (size_t at = 0, k, b; !rc && at < len; at += k) {
    ff_uc_next(w + at, len - at, &k);
    if ((id = ff_tok_lookup(t, w + at, k)) >= 0) {
      sym[m++] = id, last_unk = 0;
      continue;
    }
    for (b = 0; t->byte_fallback && b < k && t->byte_id[(unsigned char)w[at + b]] >= 0; b++) {}
    if (t->byte_fallback && b == k) {
      for (b = 0; b < k; b++) sym[m++] = t->byte_id[(unsigned char)w[at + b]];
      last_unk = 0;
    } else if (t->info.unk < 0) {
      rc = no_token(o->err, w + at, k);
    } else if (!(t->fuse_unk && last_unk)) {
      sym[m++] = t->info.unk, last_unk = 1;
    }
  }
  if (!rc) merge_pairs(t, &bw, &m);
  return rc ? rc : push_all(o, sym, m);
}

/* GPT-2's bytes_to_unicode: printable bytes stand for themselves, the
 * others for 256, 257, ... in byte order */
static uint32_t byte_cp(int b) {
  if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174) return (uint32_t)b;
  return (uint32_t)(b <= 32 ? 256 + b : b <= 160 ? 289 + b - 127 : 323);
}

static int cp_byte(uint32_t cp) {
  if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 255)) return (int)cp;
  return cp >= 256 && cp <= 288 ? (int)cp - 256 : cp >= 289 && cp <= 322 ? (int)cp - 289 + 127 : cp == 323 ? 173 : -1;
}

enum { C_SPACE, C_LETTER, C_NUMBER, C_OTHER };

static int char_class(const char *s, size_t len, size_t *k) {
  uint32_t cp = ff_uc_next(s, len, k);
  return ff_uc_space_p(cp) ? C_SPACE : ff_uc_letter_p(cp) ? C_LETTER : ff_uc_number_p(cp) ? C_NUMBER : C_OTHER;
}

/* the length of the match of GPT-2's pattern at s:
 * 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static size_t gpt2_match(const char *s, size_t len) {
  static const char *const tails[] = {"s", "t", "re", "ve", "m", "ll", "d"};
  for (int i = 0; s[0] == '\'' && i < 7; i++)
    if (strlen(tails[i]) < len && !memcmp(s + 1, tails[i], strlen(tails[i]))) return 1 + strlen(tails[i]);
  size_t k, k1, at = 0, last = 0;
  int c = char_class(s, len, &k);
  if (s[0] == ' ' && len > 1 && char_class(s + 1, len - 1, &k1) != C_SPACE) at = 1, c = char_class(s + 1, len - 1, &k1);
  if (c != C_SPACE) {
    while (at < len && char_class(s + at, len - at, &k) == c) at += k;
    return at;
  }
  while (at < len && char_class(s + at, len - at, &k) == C_SPACE) last = at, at += k;
  return at == len || last == 0 ? at : last; /* \s+(?!\S) leaves the last space to the word after it */
}

/* byte-level BPE: the pattern's pieces, their bytes as characters */
static int bytes_segment(const ff_tokenizer *t, const char *s, size_t len, tok_out *o) {
  tok_str pre = {0}, w = {0};
  int rc = 0;
  if (t->add_prefix_space && s[0] != ' ') {
    ff_tok_str_put(&pre, " ", 1), ff_tok_str_put(&pre, s, len);
    if (pre.oom) return ff_fail(o->err, FF_ENOMEM, "out of memory");
    s = pre.p, len = pre.n;
  }
  for (size_t at = 0, n; !rc && at < len; at += n) {
    n = !t->use_regex ? len - at : gpt2_match(s + at, len - at);
    w.n = 0;
    for (size_t i = 0; i < n; i++) {
      char u[4];
      ff_tok_str_put(&w, u, ff_uc_put(byte_cp((unsigned char)s[at + i]), u));
    }
    rc = w.oom ? ff_fail(o->err, FF_ENOMEM, "out of memory") : bpe_word(t, w.p, w.n, o);
  }
  free(pre.p), free(w.p);
  return rc;
}

/* SentencePiece-style BPE: "\u2581" for spaces (the Prepend and Replace
 * normalizers, or the Metaspace pre-tokenizer), words split before each
 * "\u2581" when Metaspace splits */
static int sp_segment(const ff_tokenizer *t, const char *s, size_t len, int first, tok_out *o) {
  tok_str w = {0};
  int rc = 0;
  if (t->prepend) ff_tok_str_put(&w, SP, 3);
  for (size_t i = 0; i < len; i++)
    if (s[i] == ' ' && (t->replace_space || t->meta)) ff_tok_str_put(&w, SP, 3);
    else ff_tok_str_put(&w, s + i, 1);
  int lead = w.n >= 3 && !memcmp(w.p, SP, 3);
  if (!w.oom && t->meta && !lead && (t->meta_scheme == META_ALWAYS || (t->meta_scheme == META_FIRST && first))) {
    tok_str v = {0};
    ff_tok_str_put(&v, SP, 3), ff_tok_str_put(&v, w.p, w.n);
    free(w.p), w = v;
  }
  if (w.oom) rc = ff_fail(o->err, FF_ENOMEM, "out of memory");
  for (size_t at = 0, end; !rc && at < w.n; at = end) {
    end = t->meta_split ? at + 3 * (w.n - at >= 3 && !memcmp(w.p + at, SP, 3)) : w.n;
    while (end < w.n && !(w.n - end >= 3 && !memcmp(w.p + end, SP, 3))) end++;
    rc = bpe_word(t, w.p + at, end - at, o);
  }
  free(w.p);
  return rc;
}

/* Unicode's Final_Sigma: capital sigma lowercases to final sigma after a
 * letter and before none (nonspacing marks skipped) */
static int final_sigma(const tok_str *out, const char *rest, size_t len) {
  size_t b = out->n, k;
  if (!b--) return 0;
  while (b > 0 && ((unsigned char)out->p[b] & 0xC0) == 0x80) b--; /* the last character written */
  if (!ff_uc_letter_p(ff_uc_next(out->p + b, out->n - b, &k))) return 0;
  for (size_t at = 0; at < len; at += k) {
    uint32_t cp = ff_uc_next(rest + at, len - at, &k);
    if (!ff_uc_mn_p(cp)) return !ff_uc_letter_p(cp);
  }
  return 1;
}

/* BertNormalizer: control characters out, whitespace to " ", spaces around
 * CJK ideographs, accents stripped (NFD without Mn), lowercase */
static void bert_normalize(const ff_tokenizer *t, const char *s, size_t len, tok_str *out) {
  for (size_t at = 0, k; at < len; at += k) {
    uint32_t cp = ff_uc_next(s + at, len - at, &k);
    int ctl = cp == 0 || cp == 0xFFFD || (ff_uc_other_p(cp) && cp != '\t' && cp != '\n' && cp != '\r');
    if (t->bert_clean && ctl) continue;
    if (t->bert_clean && ff_uc_space_p(cp)) { ff_tok_str_put(out, " ", 1); continue; }
    if (t->bert_chinese && ff_uc_cjk_p(cp)) {
      ff_tok_str_put(out, " ", 1), ff_tok_str_put(out, s + at, k), ff_tok_str_put(out, " ", 1);
      continue;
    }
    if (t->bert_strip && ff_uc_mn_p(cp)) continue;
    char buf[16];
    const char *p = t->bert_strip && cp < 0x110000 ? ff_uc_strip(cp, buf) : NULL;
    size_t n = p ? strlen(p) : k;
    if (!p) p = s + at;
    for (size_t j = 0, kk; j < n; j += kk) {
      uint32_t c = ff_uc_next(p + j, n - j, &kk);
      const char *l = t->bert_lower && c < 0x110000 ? ff_uc_lower(c) : NULL;
      if (l && c == 0x3A3 && final_sigma(out, s + at + k, len - at - k)) l = "\xcf\x82";
      char a = (char)(c + 32);
      if (t->bert_lower && c >= 'A' && c <= 'Z') ff_tok_str_put(out, &a, 1);
      else if (l) ff_tok_str_put(out, l, strlen(l));
      else ff_tok_str_put(out, p + j, kk);
    }
  }
}

static int bert_punct(uint32_t cp) {
  return (cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) || (cp >= 123 && cp <= 126) ||
         ff_uc_punct_p(cp);
}

/* greedy longest match first, as Hugging Face's WordPiece: the pieces of w
 * in sub, their count, or -1 when some start has none.  From each start only
 * candidates up to the longest token are tried, hashed a character at a
 * time (hash, ends: room for a word's characters): O(characters x longest
 * token), not O(characters^3) */
static int wordpiece_split(const ff_tokenizer *t, const char *w, size_t len, uint64_t *hash, size_t *ends,
                           int32_t *sub) {
  size_t plen = strlen(t->wp_prefix), k;
  uint64_t h0 = ff_tok_hash(TOK_HASH0, t->wp_prefix, plen);
  int m = 0;
  for (size_t start = 0; start < len;) {
    size_t pre = start ? plen : 0, n = 0; /* the prefix goes before every piece but the first */
    uint64_t h = start ? h0 : TOK_HASH0;
    for (size_t end = start; end < len; n++) {
      ff_uc_next(w + end, len - end, &k);
      if (pre + end + k - start > t->max_len) break;
      h = ff_tok_hash(h, w + end, k), end += k;
      hash[n] = h, ends[n] = end;
    }
    int id = -1;
    while (n > 0 && (id = ff_tok_lookup2(t, hash[n - 1], t->wp_prefix, pre, w + start, ends[n - 1] - start)) < 0) n--;
    if (id < 0) return -1;
    sub[m++] = id, start = ends[n - 1];
  }
  return m;
}

/* a word of more than max_input_chars_per_word characters, or with no
 * split, is unk */
static int wordpiece_word(const ff_tokenizer *t, const char *w, size_t len, tok_out *o) {
  const size_t each = sizeof(uint64_t) + sizeof(size_t) + sizeof(int32_t);
  size_t chars = 0, k;
  for (size_t at = 0; at < len; at += k, chars++) ff_uc_next(w + at, len - at, &k);
  if (chars <= t->wp_max_chars) {
    if (chars > (size_t)INT_MAX || chars > SIZE_MAX / each)
      return ff_fail(o->err, FF_ELENGTH, "text: a word of %zu characters", chars);
    char *p = work(o, chars * each);
    if (!p) return FF_ENOMEM;
    uint64_t *hash = (uint64_t *)p;
    size_t *ends = (size_t *)(hash + chars);
    int32_t *sub = (int32_t *)(ends + chars);
    int m = wordpiece_split(t, w, len, hash, ends, sub);
    if (m >= 0) return push_all(o, sub, m);
  }
  return t->info.unk < 0 ? no_token(o->err, w, len) : push(o, t->info.unk);
}

/* BertPreTokenizer: words between whitespace, each punctuation mark a word */
static int wordpiece_segment(const ff_tokenizer *t, const char *s, size_t len, tok_out *o) {
  tok_str n = {0};
  bert_normalize(t, s, len, &n);
  if (n.oom) return free(n.p), ff_fail(o->err, FF_ENOMEM, "out of memory");
  int rc = 0;
  size_t word = 0, at = 0, k;
  for (; !rc && at < n.n; at += k) {
    uint32_t cp = ff_uc_next(n.p + at, n.n - at, &k);
    int space = ff_uc_space_p(cp), punct = !space && bert_punct(cp);
    if (!space && !punct) continue;
    if (at > word) rc = wordpiece_word(t, n.p + word, at - word, o);
    if (!rc && punct) rc = wordpiece_word(t, n.p + at, k, o);
    word = at + k;
  }
  if (!rc && at > word) rc = wordpiece_word(t, n.p + word, at - word, o);
  free(n.p);
  return rc;
}

static int hf_segment(const ff_tokenizer *t, const char *s, size_t len, int first, tok_out *o) {
  if (!len) return 0;
  if (t->info.kind == FF_TOK_BPE_BYTES) return bytes_segment(t, s, len, o);
  if (t->info.kind == FF_TOK_BPE_SP) return sp_segment(t, s, len, first, o);
  return wordpiece_segment(t, s, len, o);
}

/* the added token at s (the longest), or -1 */
static int added_at(const ff_tokenizer *t, const char *s, size_t len) {
  for (int i = 0; i < t->n_added; i++) {
    int id = t->added[i];
    if (t->len[id] <= len && !memcmp(s, t->tok[id], t->len[id])) return id;
  }
  return -1;
}

int ff_tokenizer_encode(const ff_tokenizer *t, const char *text, int32_t *ids, int cap, int *n, ff_error *err) {
  tok_out o = {ids, cap, 0, err, NULL, 0};
  int rc = 0;
  *n = 0;
  if (t->info.kind == FF_TOK_VOCAB) return ff_vocab_encode(&t->vocab, text, ids, cap, n, err);
  if (t->info.kind == FF_TOK_LLAMA2C) rc = llama2c_encode(t, text, &o);
  else { /* added tokens split the text; each piece between them is encoded on its own */
    size_t len = strlen(text), seg = 0;
    for (size_t at = 0; !rc && at < len;) {
      int id = added_at(t, text + at, len - at);
      if (id < 0) { at++; continue; }
      if (!(rc = hf_segment(t, text + seg, at - seg, seg == 0, &o))) rc = push(&o, id);
      at += t->len[id], seg = at;
    }
    if (!rc) rc = hf_segment(t, text + seg, len - seg, seg == 0, &o);
  }
  free(o.work);
  *n = o.n;
  return rc;
}

/* ---- decoding --------------------------------------------------------------- */

typedef struct {
  char *text;
  size_t cap, need, copied;
  int first; /* nothing put yet */
} tok_sink;

static void sink_put(tok_sink *k, const char *p, size_t n) { /* whole pieces only */
  if (k->copied == k->need && k->need + n < k->cap) memcpy(k->text + k->copied, p, n), k->copied += n;
  k->need += n;
}

/* <0xXX> -> XX, or -1 */
static int byte_token(const char *s, size_t n) {
  static const char hex[] = "0123456789ABCDEF";
  const char *h = n == 6 && !memcmp(s, "<0x", 3) && s[5] == '>' ? strchr(hex, s[3]) : NULL;
  const char *l = h && s[4] ? strchr(hex, s[4]) : NULL;
  return h && l && s[3] && s[4] ? (int)((h - hex) * 16 + (l - hex)) : -1;
}

/* one piece of a SentencePiece-style or llama2.c token: "\u2581" is a space,
 * <0xXX> a byte, the first leading space of the text is the dummy prefix */
static void sp_piece(const ff_tokenizer *t, const char *s, size_t n, tok_sink *k) {
  int b = t->byte_fallback || t->info.kind == FF_TOK_LLAMA2C ? byte_token(s, n) : -1;
  char *buf = malloc(n + 1);
  size_t m = 0;
  if (!buf) return;
  if (b >= 0) buf[m++] = (char)b;
  for (size_t i = 0; b < 0 && i < n; i++)
    if (n - i >= 3 && !memcmp(s + i, SP, 3)) buf[m++] = ' ', i += 2;
    else buf[m++] = s[i];
  int dummy = t->info.kind == FF_TOK_LLAMA2C || t->prepend || (t->meta && t->meta_scheme != META_NEVER);
  size_t strip = k->first && dummy && b < 0 && m && buf[0] == ' ';
  sink_put(k, buf + strip, m - strip);
  free(buf);
}

static void bytes_piece(const char *s, size_t n, tok_sink *k) {
  for (size_t at = 0, c; at < n; at += c) {
    int b = cp_byte(ff_uc_next(s + at, n - at, &c));
    char ch = (char)b;
    if (b >= 0) sink_put(k, &ch, 1);
    else sink_put(k, s + at, c);
  }
}

/* WordPiece's decoder: "##" glues a token to the one before, others follow
 * a space; cleanup, token by token as Hugging Face does, drops the space
 * before . ? ! , and contractions */
static void wordpiece_piece(const ff_tokenizer *t, const char *s, size_t len, tok_sink *k) {
  static const char *const from[] = {" .", " ?", " !", " ,", " ' ", " n't", " 'm", " 's", " 've", " 're"};
  static const char *const to[] = {".", "?", "!", ",", "'", "n't", "'m", "'s", "'ve", "'re"};
  size_t plen = strlen(t->wp_prefix);
  int glue = !k->first && plen && len >= plen && !memcmp(s, t->wp_prefix, plen);
  tok_str a = {0}, b = {0};
  if (!k->first && !glue) ff_tok_str_put(&a, " ", 1);
  ff_tok_str_put(&a, s + (glue ? plen : 0), len - (glue ? plen : 0));
  for (int r = 0; t->wp_cleanup && r < 10 && !a.oom; r++) { /* each replacement over the whole token, in order */
    size_t fl = strlen(from[r]);
    b.n = 0;
    for (size_t i = 0; i < a.n;)
      if (a.n - i >= fl && !memcmp(a.p + i, from[r], fl)) ff_tok_str_put(&b, to[r], strlen(to[r])), i += fl;
      else ff_tok_str_put(&b, a.p + i, 1), i++;
    tok_str x = a;
    a = b, b = x;
  }
  if (!a.oom && !b.oom) sink_put(k, a.p ? a.p : "", a.n);
  free(a.p), free(b.p);
}

size_t ff_tokenizer_decode(const ff_tokenizer *t, const int32_t *ids, int n, char *text, size_t cap) {
  if (t->info.kind == FF_TOK_VOCAB) return ff_vocab_decode(&t->vocab, ids, n, text, cap);
  tok_sink k = {text, cap, 0, 0, 1};
  for (int i = 0; i < n; i++) {
    int id = ids[i];
    if (id < 0 || id >= t->info.size || !t->tok[id] || t->special[id]) continue;
    const char *s = t->tok[id];
    size_t len = t->len[id];
    if (t->info.kind == FF_TOK_BPE_BYTES) bytes_piece(s, len, &k);
    else if (t->info.kind != FF_TOK_WORDPIECE) sp_piece(t, s, len, &k);
    else wordpiece_piece(t, s, len, &k);
    k.first = 0;
  }
  if (cap) text[k.copied] = 0;
  return k.need;
}

/* ---- loading ----------------------------------------------------------------- */

/* the format from the content: JSON cannot hold a NUL byte, and a
 * tokenizer.bin starts with a little-endian max_token_length below 2^24 */
int ff_tokenizer_parse(const char *path, const uint8_t *buf, size_t len, int expected_size, ff_tokenizer **out,
                       ff_error *err) {
  ff_tokenizer *t = calloc(1, sizeof *t);
  int rc;
  *out = NULL;
  if (!t) return ff_fail(err, FF_ENOMEM, "out of memory");
  t->info = (ff_tokenizer_info){FF_TOK_VOCAB, 0, -1, -1, -1, -1, 0, 0, -1};
  if (len >= 4 && buf[3] == 0) {
    rc = llama2c_parse(path, buf, len, expected_size, t, err);
  } else if ((rc = ff_tok_hf_parse(path, (const char *)buf, len, expected_size, t, err)) == 1) {
    /* not a tokenizer.json: fixformer's own vocabulary */
    if (!(rc = ff_vocab_parse(path, (const char *)buf, len, expected_size, &t->vocab, err)))
      t->info = (ff_tokenizer_info){FF_TOK_VOCAB, t->vocab.size, t->vocab.pad, t->vocab.bos, t->vocab.eos,
                                    t->vocab.unk, 0, 0, -1};
  }
  if (rc) ff_tokenizer_free(t);
  else *out = t;
  return rc;
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
