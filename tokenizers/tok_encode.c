/* tok_encode.c - the tokenizers' encoders and decoders over the flat tables
 * of tok_tables.h: fixformer's JSON vocabulary, llama2.c's run.c, Hugging
 * Face's BPE (byte-level, SentencePiece-style) and WordPiece, and the
 * Unigram model (SentencePiece's, Hugging Face's).  The host
 * compiles it (tokenizer.c builds the tables from the files); `fixformer
 * emit --with-main` pastes this text, with tok_tables.h, the Unicode tables
 * its kind needs and the tables as C arrays, into NAME_main.c: the emitted
 * program encodes with this code on the host's tables.  Plain C99 and
 * <string.h>: no malloc (encode works in scratch of ff_tok_work_bytes that
 * the caller gives), floating point only in Unigram's path scores; linear
 * in the text (n log n for BPE's heap).  FF_TOK_KINDS picks the kinds compiled in.
 * The Split patterns (GPT-2's, LLaMA-3's, Qwen2's, GPT-4o's) and the Unicode
 * normalizers are written by hand, not taken from a regex library or
 * libutf8proc, because the driver links nothing but libm: each pattern is a
 * matcher over Unicode categories that decides its alternatives as a
 * backtracking engine would, in one pass (no engine's quadratic \s+(?!\S)). */
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "tok_tables.h"

#define FF_TOK_BPE (FF_TOK_HAS(LLAMA2C) || FF_TOK_HAS(BYTES) || FF_TOK_HAS(SP))
#define FF_TOK_HF (FF_TOK_HAS(BYTES) || FF_TOK_HAS(SP) || FF_TOK_HAS(WORDPIECE) || FF_TOK_HAS(UNIGRAM))
#define FF_TOK_SP_PIECE (FF_TOK_HAS(LLAMA2C) || FF_TOK_HAS(SP) || FF_TOK_HAS(UNIGRAM))
#define FF_TOK_SP_TEXT (FF_TOK_HAS(SP) || FF_TOK_HAS(UNIGRAM))
#define FF_TOK_SPACE "\xe2\x96\x81" /* U+2581, SentencePiece's space */

/* ---- Unicode ----------------------------------------------------------------- */

#ifndef FF_TOK_NORM
/* FF_TOK_NORM: the Unicode normalizers of tokenizer.json (NFC, NFD, NFKC,
 * NFKD, Lowercase, StripAccents).  The host has them; emit keeps them in a
 * driver only when its tokenizer normalizes, with the tables they read
 * (unicode_tables.h, generated from Python's unicodedata): a driver pastes
 * this file and links no library, so libutf8proc, which could do this work
 * in the host, could not in the driver, and both must normalize alike. */
#define FF_TOK_NORM FF_TOK_HF
#endif
#ifndef FF_TOK_CLASSES
/* FF_TOK_CLASSES: the pre-tokenizers that read Unicode classes besides
 * letters, numbers and spaces (GPT-4o's split tells letters by case,
 * DeepSeek's reads marks, punctuation and symbols, Punctuation punctuation):
 * the host has them; emit keeps them (and their tables) in a driver whose
 * tokenizer splits so */
#define FF_TOK_CLASSES FF_TOK_HAS(BYTES)
#endif
#ifndef FF_TOK_GRAPHEME
/* FF_TOK_GRAPHEME: tokenizer.json's Precompiled normalizer, which works in
 * grapheme clusters (UAX #29): the host has it; emit keeps it (and the
 * break property's tables) in a driver whose tokenizer normalizes so */
#define FF_TOK_GRAPHEME FF_TOK_NORM
#endif
#define FF_TOK_UNICODE (FF_TOK_HAS(BYTES) || FF_TOK_HAS(WORDPIECE) || FF_TOK_NORM)

#if FF_TOK_UNICODE
#include "unicode_tables.h" /* emit pastes the tables its kind reads */
#define FF_UC_COUNT(a) (sizeof(a) / sizeof((a)[0]))
#endif

#if FF_TOK_HF
/* the code point at s (len bytes left) and its length in *n; a byte that is
 * not valid UTF-8 is one character of its own, code point 0x110000 + byte */
static uint32_t ff_uc_next(const char *s, size_t len, size_t *n) {
  const unsigned char *u = (const unsigned char *)s;
  size_t k = u[0] < 0x80 ? 1 : u[0] >= 0xC2 && u[0] < 0xE0 ? 2 : u[0] >= 0xE0 && u[0] < 0xF0 ? 3
                                                    : u[0] >= 0xF0 && u[0] < 0xF5 ? 4 : 0;
  uint32_t cp = k == 1 ? u[0] : k == 2 ? u[0] & 0x1Fu : k == 3 ? u[0] & 0x0Fu : u[0] & 0x07u;
  for (size_t i = 1; k > 1 && i < k; i++) {
    if (i >= len || (u[i] & 0xC0) != 0x80) { k = 0; break; }
    cp = cp << 6 | (u[i] & 0x3Fu);
  }
  /* overlong, surrogate or above U+10FFFF: not UTF-8 */
  if (k == 0 || (k == 3 && (cp < 0x800 || (cp >= 0xD800 && cp < 0xE000))) || (k == 4 && (cp < 0x10000 || cp > 0x10FFFF))) {
    *n = 1;
    return 0x110000u + u[0];
  }
  *n = k;
  return cp;
}

/* Unicode's White_Space property (Rust's char::is_whitespace, regex \s) */
static int ff_uc_space_p(uint32_t cp) {
  return (cp >= 9 && cp <= 13) || cp == 32 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

/* the end of the whitespace that starts s (len bytes) */
static size_t tok_space_after(const char *s, size_t len) {
  size_t at = 0, n;
  while (at < len && ff_uc_space_p(ff_uc_next(s + at, len - at, &n))) at += n;
  return at;
}

/* the start of the whitespace that ends s[0..end) */
static size_t tok_space_before(const char *s, size_t end) {
  for (size_t k = end, n; k > 0; end = k) {
    while (--k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80) {} /* the character's first byte */
    if (!ff_uc_space_p(ff_uc_next(s + k, end - k, &n)) || k + n != end) return end;
  }
  return end;
}
#endif

#if FF_TOK_UNICODE
/* cp as UTF-8 (a byte that was not UTF-8, 0x110000 + byte, as that byte) */
static size_t ff_uc_put(uint32_t cp, char *o) {
  if (cp < 0x80) return o[0] = (char)cp, 1;
  if (cp >= 0x110000) return o[0] = (char)(cp - 0x110000), 1;
  if (cp < 0x800) return o[0] = (char)(0xC0 | cp >> 6), o[1] = (char)(0x80 | (cp & 0x3F)), 2;
  if (cp < 0x10000)
    return o[0] = (char)(0xE0 | cp >> 12), o[1] = (char)(0x80 | (cp >> 6 & 0x3F)), o[2] = (char)(0x80 | (cp & 0x3F)), 3;
  o[0] = (char)(0xF0 | cp >> 18), o[1] = (char)(0x80 | (cp >> 12 & 0x3F));
  o[2] = (char)(0x80 | (cp >> 6 & 0x3F)), o[3] = (char)(0x80 | (cp & 0x3F));
  return 4;
}

static int ff_uc_in_ranges(const uint32_t (*r)[2], size_t n, uint32_t cp) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (cp < r[mid][0]) hi = mid;
    else if (cp > r[mid][1]) lo = mid + 1;
    else return 1;
  }
  return 0;
}

static int ff_uc_letter_p(uint32_t cp) { return ff_uc_in_ranges(uc_letter, FF_UC_COUNT(uc_letter), cp); }
#endif

#if FF_TOK_HAS(BYTES)
static int ff_uc_number_p(uint32_t cp) { return ff_uc_in_ranges(uc_number, FF_UC_COUNT(uc_number), cp); }
#endif

#if FF_TOK_HAS(WORDPIECE) || FF_TOK_NORM
static int ff_uc_mn_p(uint32_t cp) {
  return ff_uc_in_ranges(uc_mark_nonspacing, FF_UC_COUNT(uc_mark_nonspacing), cp);
}

static const char *ff_uc_in_map(const ff_umap *m, size_t n, uint32_t cp) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (cp < m[mid].cp) hi = mid;
    else if (cp > m[mid].cp) lo = mid + 1;
    else return m[mid].s;
  }
  return NULL;
}

/* lowercase form, or NULL when itself */
static const char *ff_uc_lower(uint32_t cp) {
  return cp < 0x80 ? NULL : ff_uc_in_map(uc_lower_map, FF_UC_COUNT(uc_lower_map), cp);
}

typedef struct {
  char *p;
  size_t n, cap;
  int over; /* more than cap: the growth bound is wrong */
} tok_buf;

static void tok_buf_put(tok_buf *b, const char *s, size_t n) {
  if (n > b->cap - b->n) {
    b->over = 1;
    return;
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
}

/* Unicode's Final_Sigma: capital sigma lowercases to final sigma after a
 * letter and before none (nonspacing marks skipped), as JavaScript's and
 * Python's lower() do */
static int tok_final_sigma(const tok_buf *out, const char *rest, size_t len) {
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

/* the character c (its k bytes at p) lowercased into out; rest: the text after it */
static void tok_lower_put(uint32_t c, const char *p, size_t k, const char *rest, size_t len, tok_buf *out) {
  const char *l = c < 0x110000 ? ff_uc_lower(c) : NULL;
  char a = (char)(c + 32);
  if (l && c == 0x3A3 && tok_final_sigma(out, rest, len)) l = "\xcf\x82";
  if (c >= 'A' && c <= 'Z') tok_buf_put(out, &a, 1);
  else if (l) tok_buf_put(out, l, strlen(l));
  else tok_buf_put(out, p, k);
}
#endif

#if FF_TOK_HAS(WORDPIECE) || FF_TOK_CLASSES
static int ff_uc_punct_p(uint32_t cp) { return ff_uc_in_ranges(uc_punct, FF_UC_COUNT(uc_punct), cp); }

/* Rust's char::is_ascii_punctuation: !"#$%&'()*+,-./:;<=>?@[\]^_`{|}~ */
static int tok_ascii_punct(uint32_t cp) {
  return (cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) || (cp >= 123 && cp <= 126);
}

/* a punctuation mark as BertPreTokenizer and the Punctuation pre-tokenizer
 * take it: ASCII's, or \p{P} */
static int tok_punct_p(uint32_t cp) { return tok_ascii_punct(cp) || ff_uc_punct_p(cp); }
#endif

#if FF_TOK_HAS(WORDPIECE)
static int ff_uc_other_p(uint32_t cp) { return cp < 0x110000 && ff_uc_in_ranges(uc_other, FF_UC_COUNT(uc_other), cp); }

/* BERT's _is_chinese_char: the CJK Unified Ideographs blocks */
static int ff_uc_cjk_p(uint32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x20000 && cp <= 0x2A6DF) ||
         (cp >= 0x2A700 && cp <= 0x2B73F) || (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

/* accent-stripped (NFD without Mn) form, or NULL when itself */
static const char *ff_uc_strip(uint32_t cp, char buf[16]) {
  if (cp >= 0xAC00 && cp <= 0xD7A3) { /* Hangul syllable -> L V (T) jamo, by Unicode's formula */
    uint32_t s = cp - 0xAC00, l = 0x1100 + s / 588, v = 0x1161 + s % 588 / 28, tt = s % 28;
    size_t k = ff_uc_put(l, buf);
    k += ff_uc_put(v, buf + k);
    if (tt) k += ff_uc_put(0x11A7 + tt, buf + k);
    buf[k] = 0;
    return buf;
  }
  const char *d = cp < 0xC0 ? NULL : ff_uc_in_map(uc_nfd_map, FF_UC_COUNT(uc_nfd_map), cp); /* <= 12 bytes */
  size_t n = 0;
  for (size_t at = 0, k = 0, len = d ? strlen(d) : 0; at < len && n + 4 < 16; at += k) /* its marks (Mn) left out */
    if (!ff_uc_mn_p(ff_uc_next(d + at, len - at, &k))) memcpy(buf + n, d + at, k), n += k;
  buf[n] = 0;
  return d ? buf : NULL;
}
#endif

/* ---- lookups ------------------------------------------------------------------ */

/* FNV-1a continues from a hash, so the candidates a, a b, a b c ... of a
 * longest match cost one byte each, not one string each */
FF_TOK_API uint64_t ff_tok_hash(uint64_t h, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
  return h;
}

/* the id whose string (strs/lens) is a then b, of hash h, in index (cap
 * slots of id + 1); -1 when none */
FF_TOK_API int ff_tok_find(const int32_t *index, size_t cap, const char *const *strs, const uint32_t *lens, uint64_t h,
                           const char *a, size_t la, const char *b, size_t lb) {
  if (!cap) return -1;
  for (size_t i = (size_t)h & (cap - 1);; i = (i + 1) & (cap - 1)) {
    int32_t e = index[i] - 1;
    if (e < 0) return -1;
    if (lens[e] == la + lb && !memcmp(strs[e], a, la) && !memcmp(strs[e] + la, b, lb)) return e;
  }
}

#if FF_TOK_HAS(LLAMA2C) || FF_TOK_HF
static int tok_lookup2(const ff_tok_tables *t, uint64_t h, const char *a, size_t la, const char *b, size_t lb) {
  return ff_tok_find(t->index, t->icap, t->tok, t->len, h, a, la, b, lb);
}
#endif

#if FF_TOK_BPE || FF_TOK_HAS(UNIGRAM)
static int tok_lookup(const ff_tok_tables *t, const char *s, size_t len) {
  return tok_lookup2(t, ff_tok_hash(FF_TOK_HASH0, s, len), s, len, "", 0);
}
#endif

#if FF_TOK_HAS(BYTES) || FF_TOK_HAS(SP)
/* the slot of merge (a, b) in merges (cap slots): its own, or the empty one
 * where it would go */
FF_TOK_API size_t ff_tok_merge_slot(const ff_tok_merge *m, size_t cap, int32_t a, int32_t b) {
  uint64_t k = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) * 0x9E3779B97F4A7C15ull;
  size_t i = (size_t)(k >> 20) & (cap - 1);
  while (m[i].id >= 0 && (m[i].a != a || m[i].b != b)) i = (i + 1) & (cap - 1);
  return i;
}

static const ff_tok_merge *tok_merge_of(const ff_tok_tables *t, int32_t a, int32_t b) {
  const ff_tok_merge *m = t->mcap ? &t->merges[ff_tok_merge_slot(t->merges, t->mcap, a, b)] : NULL;
  return m && m->id >= 0 ? m : NULL;
}
#endif

/* ---- encoding: the output and the scratch -------------------------------------- */

typedef struct {
  int32_t *ids;
  int cap, n;
  ff_tok_why *why;
  unsigned char *work; /* scratch: taken from the front, given back by restoring work/left */
  size_t left;
} tok_out;

/* bytes of scratch (8-aligned), or NULL when the bound was wrong */
static void *tok_take(tok_out *o, size_t bytes) {
  void *p = o->work;
  bytes = (bytes + 7) & ~(size_t)7;
  if (bytes > o->left) return NULL;
  o->work += bytes, o->left -= bytes;
  return p;
}

static int tok_push(tok_out *o, int32_t id) {
  if (o->n == o->cap) return FF_TOK_EFULL;
  o->ids[o->n++] = id;
  return 0;
}

#if FF_TOK_BPE || FF_TOK_HAS(WORDPIECE)
static int tok_push_all(tok_out *o, const int32_t *sym, int m) {
  int rc = 0;
  for (int i = 0; i < m && !rc; i++) rc = tok_push(o, sym[i]);
  return rc;
}
#endif

#if FF_TOK_HAS(VOCAB) || FF_TOK_HF
static int tok_unknown(tok_out *o, const char *s, size_t n, size_t at) {
  o->why->piece = s, o->why->len = n, o->why->at = at;
  return FF_TOK_EUNKNOWN;
}
#endif

/* ---- BPE: merging pairs -------------------------------------------------------- */

#if FF_TOK_BPE
/* a pair that may merge: a b at position pos into id (a heap ordered by
 * key, then position: Hugging Face's rank, or llama2.c's order) */
typedef struct {
  uint32_t key;
  int pos;
  int32_t a, b, id;
} tok_cand;

static int tok_cand_before(const tok_cand *x, const tok_cand *y) {
  return x->key != y->key ? x->key < y->key : x->pos < y->pos;
}

static void tok_heap_push(tok_cand *h, int *n, tok_cand c) {
  int i = (*n)++;
  for (; i > 0 && tok_cand_before(&c, &h[(i - 1) / 2]); i = (i - 1) / 2) h[i] = h[(i - 1) / 2];
  h[i] = c;
}

static tok_cand tok_heap_pop(tok_cand *h, int *n) {
  tok_cand top = h[0], last = h[--(*n)];
  int i = 0;
  for (int c; (c = 2 * i + 1) < *n; i = c) {
    if (c + 1 < *n && tok_cand_before(&h[c + 1], &h[c])) c++;
    if (!tok_cand_before(&h[c], &last)) break;
    h[i] = h[c];
  }
  h[i] = last;
  return top;
}

/* the pair at i, j if it merges: by the merges list (Hugging Face), or when
 * its concatenation is a token that merges (llama2.c's run.c) */
static void tok_cand_add(const ff_tok_tables *t, tok_cand *h, int *n, const int32_t *sym, int i, int j) {
  if (i < 0 || j < 0) return;
#if FF_TOK_HAS(BYTES) || FF_TOK_HAS(SP)
  if (t->kind != FF_TOK_KIND_LLAMA2C) {
    const ff_tok_merge *g = tok_merge_of(t, sym[i], sym[j]);
    tok_cand c = {0, i, 0, 0, 0};
    if (!g) return;
    c.key = g->rank, c.a = sym[i], c.b = sym[j], c.id = g->id;
    tok_heap_push(h, n, c);
    return;
  }
#endif
#if FF_TOK_HAS(LLAMA2C)
  {
    const char *a = t->tok[sym[i]], *b = t->tok[sym[j]];
    size_t la = t->len[sym[i]], lb = t->len[sym[j]];
    int id = la + lb > t->max_len ? -1 : tok_lookup2(t, ff_tok_hash(ff_tok_hash(FF_TOK_HASH0, a, la), b, lb), a, la, b, lb);
    tok_cand c = {0, i, 0, 0, 0};
    if (id < 0 || t->order[id] == FF_TOK_NEVER) return;
    c.key = t->order[id], c.a = sym[i], c.b = sym[j], c.id = id;
    tok_heap_push(h, n, c);
  }
#endif
}

/* the scratch of n symbols: sym[n] (ids), then what merging them needs */
typedef struct {
  int32_t *sym, *next, *prev;
  tok_cand *heap; /* n - 1 pairs, then at most 2 a merge */
} tok_bpe;

static size_t tok_bpe_bytes(size_t n) { return n * (3 * sizeof(tok_cand) + 3 * sizeof(int32_t)) + 32; }

static int tok_bpe_get(tok_out *o, size_t n, tok_bpe *w) {
  w->heap = tok_take(o, 3 * n * sizeof *w->heap);
  w->sym = tok_take(o, 3 * n * sizeof(int32_t));
  if (!w->heap || !w->sym) return FF_TOK_EWORK;
  w->next = w->sym + n, w->prev = w->next + n;
  return 0;
}

/* merges the best pair (the leftmost of equals) until no pair merges, as
 * Hugging Face's BPE and llama2.c's run.c do, in O(n log n): a popped pair
 * that changed since it was pushed is skipped */
static void tok_merge_pairs(const ff_tok_tables *t, const tok_bpe *w, int *m) {
  int n = *m, hn = 0;
  int32_t *sym = w->sym, *next = w->next, *prev = w->prev;
  tok_cand *h = w->heap;
  if (n < 2) return;
  for (int i = 0; i < n; i++) next[i] = i + 1 < n ? i + 1 : -1, prev[i] = i - 1;
  for (int i = 0; i + 1 < n; i++) tok_cand_add(t, h, &hn, sym, i, i + 1);
  while (hn) {
    tok_cand c = tok_heap_pop(h, &hn);
    int j = next[c.pos];
    if (sym[c.pos] != c.a || j < 0 || sym[j] != c.b) continue;
    sym[c.pos] = c.id, sym[j] = -1;
    next[c.pos] = next[j];
    if (next[j] >= 0) prev[next[j]] = c.pos;
    tok_cand_add(t, h, &hn, sym, prev[c.pos], c.pos);
    tok_cand_add(t, h, &hn, sym, c.pos, next[c.pos]);
  }
  *m = 0;
  for (int i = 0; i < n; i++)
    if (sym[i] >= 0) sym[(*m)++] = sym[i];
}

#endif

/* ---- fixformer's JSON vocabulary --------------------------------------------------- */

#if FF_TOK_HAS(VOCAB)
/* longest match (the lowest id among equals) after ASCII lowercasing when
 * the vocabulary says; a piece no token matches is one UTF-8 character, unk */
static int tok_vocab_encode(const ff_tok_tables *t, const char *text, size_t len, tok_out *o) {
  char *s = tok_take(o, len + 1);
  int rc = 0;
  if (!s) return FF_TOK_EWORK;
  for (size_t i = 0; i < len; i++) /* multi-byte UTF-8 is left alone */
    s[i] = (char)(t->lowercase && text[i] >= 'A' && text[i] <= 'Z' ? text[i] - 'A' + 'a' : text[i]);
  for (size_t at = 0; !rc && at < len;) {
    int best = -1;
    size_t best_len = 0;
    uint64_t h = FF_TOK_HASH0;
    for (size_t k = 1; k <= t->max_len && k <= len - at; k++) {
      h = ff_tok_hash(h, s + at + k - 1, 1);
      int id = ff_tok_find(t->index, t->icap, t->tok, t->len, h, s + at, k, "", 0);
      if (id >= 0) best = id, best_len = k;
    }
    if (best < 0) {
      size_t skip = 1; /* one UTF-8 character */
      while (at + skip < len && ((unsigned char)s[at + skip] & 0xC0) == 0x80) skip++;
      if (t->unk < 0) return tok_unknown(o, s + at, skip, at);
      best = t->unk, best_len = skip;
    }
    rc = tok_push(o, best);
    at += best_len;
  }
  return rc;
}
#endif

/* ---- llama2.c's tokenizer.bin -------------------------------------------------------- */

#if FF_TOK_HAS(LLAMA2C)
/* one character's token, or its bytes as ids byte + 3 */
static int tok_llama2c_char(const ff_tok_tables *t, const char *s, size_t k, int32_t *sym, int *m, tok_out *o) {
  int id = tok_lookup(t, s, k);
  if (id >= 0) return sym[(*m)++] = id, 0;
  for (size_t b = 0; b < k; b++) {
    int bid = (unsigned char)s[b] + 3;
    if (bid >= t->size) return o->why->byte = (unsigned char)s[b], FF_TOK_EBYTE;
    sym[(*m)++] = bid;
  }
  return 0;
}

/* run.c's encode: a dummy " " first, each UTF-8 character its token or its
 * bytes, then merges by score */
static int tok_llama2c_encode(const ff_tok_tables *t, const char *text, size_t len, tok_out *o) {
  tok_bpe w;
  int m = 0, rc;
  if (!len) return 0;
  if ((rc = tok_bpe_get(o, len + 1, &w))) return rc;
  rc = tok_llama2c_char(t, " ", 1, w.sym, &m, o);
  for (size_t at = 0, k; !rc && at < len; at += k) {
    k = 1; /* run.c: a lead byte and at most 3 continuation bytes */
    while (k < 4 && at + k < len && ((unsigned char)text[at + k] & 0xC0) == 0x80) k++;
    rc = tok_llama2c_char(t, text + at, k, w.sym, &m, o);
  }
  if (!rc) tok_merge_pairs(t, &w, &m);
  return rc ? rc : tok_push_all(o, w.sym, m);
}
#endif

/* ---- Hugging Face's BPE ------------------------------------------------------------ */

#if FF_TOK_HAS(BYTES) || FF_TOK_HAS(SP)
/* a word: each character its token (the last one with end_of_word_suffix
 * after it), else its <0xXX> bytes (byte_fallback), else unk (runs of
 * unknowns fused into one by fuse_unk); then merges by rank.  A symbol a
 * byte at most: the scratch of len symbols */
static int tok_bpe_word(const ff_tok_tables *t, const char *w, size_t len, tok_out *o) {
  int id, m = 0, rc, last_unk = 0;
  unsigned char *work = o->work;
  size_t left = o->left;
  tok_bpe bw;
  if (!len) return 0;
  if (t->ignore_merges && (id = tok_lookup(t, w, len)) >= 0) return tok_push(o, id);
  if ((rc = tok_bpe_get(o, len, &bw))) return rc;
  for (size_t at = 0, k, b; !rc && at < len; at += k) {
    ff_uc_next(w + at, len - at, &k);
    const char *suf = t->suffix && at + k == len ? t->suffix : "";
    size_t ls = strlen(suf);
    if ((id = tok_lookup2(t, ff_tok_hash(ff_tok_hash(FF_TOK_HASH0, w + at, k), suf, ls), w + at, k, suf, ls)) >= 0) {
      bw.sym[m++] = id, last_unk = 0;
      continue;
    }
    for (b = 0; t->byte_fallback && b < k && t->byte_id[(unsigned char)w[at + b]] >= 0; b++) {}
    if (t->byte_fallback && b == k) {
      for (b = 0; b < k; b++) bw.sym[m++] = t->byte_id[(unsigned char)w[at + b]];
      last_unk = 0;
    } else if (t->unk < 0) {
      rc = tok_unknown(o, w + at, k, 0);
    } else if (!(t->fuse_unk && last_unk)) {
      bw.sym[m++] = t->unk, last_unk = 1;
    }
  }
  if (!rc) tok_merge_pairs(t, &bw, &m);
  if (!rc) rc = tok_push_all(o, bw.sym, m);
  o->work = work, o->left = left;
  return rc;
}
#endif

#if FF_TOK_HAS(BYTES)
/* GPT-2's bytes_to_unicode: printable bytes stand for themselves, the
 * others for 256, 257, ... in byte order */
static uint32_t tok_byte_cp(int b) {
  if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174) return (uint32_t)b;
  return (uint32_t)(b <= 32 ? 256 + b : b <= 160 ? 289 + b - 127 : 323);
}

static int tok_cp_byte(uint32_t cp) {
  if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 255)) return (int)cp;
  return cp >= 256 && cp <= 288 ? (int)cp - 256 : cp >= 289 && cp <= 322 ? (int)cp - 289 + 127 : cp == 323 ? 173 : -1;
}

enum { TOK_C_SPACE, TOK_C_LETTER, TOK_C_NUMBER, TOK_C_OTHER };

static int tok_char_class(const char *s, size_t len, size_t *k) {
  uint32_t cp = ff_uc_next(s, len, k);
  return ff_uc_space_p(cp) ? TOK_C_SPACE : ff_uc_letter_p(cp) ? TOK_C_LETTER : ff_uc_number_p(cp) ? TOK_C_NUMBER
                                                                                              : TOK_C_OTHER;
}

/* 's 't 're 've 'm 'll 'd at s: the match's length, or 0.  fold: (?i:...),
 * Unicode's simple case folding as Oniguruma and Rust's regex apply it
 * (ASCII, and U+017F long s for s) */
static size_t tok_contraction(const char *s, size_t len, int fold) {
  static const char *const tails[] = {"s", "t", "re", "ve", "m", "ll", "d"};
  for (int i = 0; s[0] == '\'' && i < 7; i++) {
    size_t at = 1, j = 0;
    for (; tails[i][j] && at < len; j++) {
      char c = fold && s[at] >= 'A' && s[at] <= 'Z' ? (char)(s[at] + 32) : s[at];
      if (c == tails[i][j]) at++;
      else if (fold && tails[i][j] == 's' && len - at >= 2 && !memcmp(s + at, "\xc5\xbf", 2)) at += 2;
      else break;
    }
    if (!tails[i][j]) return at;
  }
  return 0;
}

/* the length of the match of GPT-2's pattern at s:
 * 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static size_t tok_gpt2_match(const char *s, size_t len) {
  size_t k, k1, at = tok_contraction(s, len, 0), last = 0;
  if (at) return at;
  int c = tok_char_class(s, len, &k);
  if (s[0] == ' ' && len > 1 && tok_char_class(s + 1, len - 1, &k1) != TOK_C_SPACE)
    at = 1, c = tok_char_class(s + 1, len - 1, &k1);
  if (c != TOK_C_SPACE) {
    while (at < len && tok_char_class(s + at, len - at, &k) == c) at += k;
    return at;
  }
  while (at < len && tok_char_class(s + at, len - at, &k) == TOK_C_SPACE) last = at, at += k;
  return at == len || last == 0 ? at : last; /* \s+(?!\S) leaves the last space to the word after it */
}

/* a run of characters of class c from at: where it ends, after at most max of them */
static size_t tok_run(const char *s, size_t len, size_t at, int c, size_t max) {
  size_t k;
  for (size_t i = 0; i < max && at < len && tok_char_class(s + at, len - at, &k) == c; i++) at += k;
  return at;
}

/* the whitespace alternatives cl100k's, o200k's and DeepSeek's patterns
 * end with, at s: \s*[\r\n]+|\s+(?!\S)|\s+ (0: s is no space).  A
 * whitespace run is read at most three times (the match leaves no newline
 * or one space of it behind): linear in the text. */
static size_t tok_space_tail(const char *s, size_t len) {
  size_t k, at = 0, last = 0, nl = 0;
  for (; at < len && tok_char_class(s + at, len - at, &k) == TOK_C_SPACE; at += k) /* the whitespace run */
    if (last = at, s[at] == '\r' || s[at] == '\n') nl = at + 1;
  if (nl) return nl;                         /* \s*[\r\n]+: to its last newline */
  return at == len || last == 0 ? at : last; /* \s+(?!\S), else \s+ */
}

/* the length of the match at s of what cl100k's pattern and o200k's share:
 * \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ (digits: 3,
 * or 1 for Qwen2's \p{N}; slash: o200k's [\r\n/]*) */
static size_t tok_cl100k_tail(const char *s, size_t len, size_t digits, int slash) {
  size_t k, k1, at;
  int c = tok_char_class(s, len, &k), c1 = k < len ? tok_char_class(s + k, len - k, &k1) : -1;
  if (c == TOK_C_NUMBER) return tok_run(s, len, 0, TOK_C_NUMBER, digits);
  if (c == TOK_C_OTHER || (s[0] == ' ' && c1 == TOK_C_OTHER)) {
    at = tok_run(s, len, c == TOK_C_OTHER ? 0 : 1, TOK_C_OTHER, (size_t)-1);
    while (at < len && (s[at] == '\r' || s[at] == '\n' || (slash && s[at] == '/'))) at++;
    return at;
  }
  return tok_space_tail(s, len);
}

/* the length of the match at s of LLaMA-3's and GPT-4's (cl100k) pattern,
 * digits 3, or Qwen2's, digits 1 (\p{N} for \p{N}{1,3}), alternatives
 * tried in order as a backtracking engine does, each in one pass:
 * (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
static size_t tok_cl100k_match(const char *s, size_t len, size_t digits) {
  size_t k, k1, at = tok_contraction(s, len, 1);
  if (at) return at;
  int c = tok_char_class(s, len, &k), nlc = s[0] == '\r' || s[0] == '\n';
  int c1 = k < len ? tok_char_class(s + k, len - k, &k1) : -1;
  if (c == TOK_C_LETTER || (c != TOK_C_NUMBER && !nlc && c1 == TOK_C_LETTER))
    return tok_run(s, len, c == TOK_C_LETTER ? 0 : k, TOK_C_LETTER, (size_t)-1);
  return tok_cl100k_tail(s, len, digits, 0);
}

#if FF_TOK_CLASSES
/* o200k's letter classes: U [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}], W [\p{Ll}\p{Lm}\p{Lo}\p{M}] */
enum { TOK_O_U = 1, TOK_O_W = 2 };

static int tok_o200k_class(const char *s, size_t len, size_t *k) {
  uint32_t cp = ff_uc_next(s, len, k);
  if (cp >= 0x110000) return 0;
  if (ff_uc_in_ranges(uc_upper, FF_UC_COUNT(uc_upper), cp)) return TOK_O_U;
  if (ff_uc_in_ranges(uc_lowercase, FF_UC_COUNT(uc_lowercase), cp)) return TOK_O_W;
  return ff_uc_letter_p(cp) || ff_uc_in_ranges(uc_mark, FF_UC_COUNT(uc_mark), cp) ? TOK_O_U | TOK_O_W : 0;
}

static size_t tok_o200k_w_run(const char *s, size_t len, size_t at) {
  size_t k;
  while (at < len && (tok_o200k_class(s + at, len - at, &k) & TOK_O_W)) at += k;
  return at;
}

/* o200k's word at j: U*W+ (upper 0) or U+W* (upper 1), then (?i:'s|...)?:
 * where it ends, or 0 when it does not match.  U* backtracks to the last
 * character of its run that W+ can take, when the run is followed by none */
static size_t tok_o200k_word(const char *s, size_t len, size_t j, int upper) {
  size_t k, at = j, last_w = 0, end;
  int c = 0;
  for (; at < len && ((c = tok_o200k_class(s + at, len - at, &k)) & TOK_O_U); at += k)
    if (c & TOK_O_W) last_w = at + k;
  if (upper) end = at > j ? tok_o200k_w_run(s, len, at) : 0;
  else end = at < len && (c & TOK_O_W) ? tok_o200k_w_run(s, len, at) : last_w;
  return end ? end + tok_contraction(s + end, len - end, 1) : 0;
}

/* the length of the match at s of GPT-4o's (o200k) pattern:
 * [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|...)?|
 * [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|...)?|
 * \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * each word alternative with its optional first character, then without */
static size_t tok_o200k_match(const char *s, size_t len) {
  size_t k, end = 0;
  int c = tok_char_class(s, len, &k);
  int pre = c != TOK_C_LETTER && c != TOK_C_NUMBER && s[0] != '\r' && s[0] != '\n';
  for (int upper = 0; upper < 2 && !end; upper++)
    if (!(pre && k < len && (end = tok_o200k_word(s, len, k, upper)))) end = tok_o200k_word(s, len, 0, upper);
  return end ? end : tok_cl100k_tail(s, len, 3, 1);
}
#endif

/* ---- the pre-tokenizers of byte-level BPE (tok_tables.h's pre) ------------------------ */

#if FF_TOK_CLASSES
static int ff_uc_symbol_p(uint32_t cp) { return ff_uc_in_ranges(uc_symbol, FF_UC_COUNT(uc_symbol), cp); }

enum { TOK_D_LM = 1, TOK_D_PS = 2, TOK_D_NL = 4 }; /* DeepSeek's classes: [\p{L}\p{M}], [\p{P}\p{S}], [\r\n] */

static int tok_ds_class(const char *s, size_t len, size_t *k) {
  uint32_t cp = ff_uc_next(s, len, k);
  if (cp == '\r' || cp == '\n') return TOK_D_NL;
  if (cp >= 0x110000) return 0;
  if (ff_uc_letter_p(cp) || ff_uc_in_ranges(uc_mark, FF_UC_COUNT(uc_mark), cp)) return TOK_D_LM;
  return ff_uc_punct_p(cp) || ff_uc_symbol_p(cp) ? TOK_D_PS : 0;
}

static size_t tok_ds_run(const char *s, size_t len, size_t at, int c) {
  size_t k;
  while (at < len && tok_ds_class(s + at, len - at, &k) == c) at += k;
  return at;
}

static int tok_ascii_letter(char c) { return (c | 32) >= 'a' && (c | 32) <= 'z'; }

/* the length of the match at s of DeepSeek-V3's third pattern, or 0:
 * [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+|
 *  ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
static size_t tok_ds_main_match(const char *s, size_t len) {
  size_t k, k1, at = 1;
  if (tok_ascii_punct((unsigned char)s[0]) && len > 1 && tok_ascii_letter(s[1])) {
    while (at < len && tok_ascii_letter(s[at])) at++;
    return at;
  }
  int c = tok_ds_class(s, len, &k), c1 = k < len ? tok_ds_class(s + k, len - k, &k1) : 0;
  if (c == TOK_D_LM || (c == 0 && c1 == TOK_D_LM)) return tok_ds_run(s, len, c == TOK_D_LM ? 0 : k, TOK_D_LM);
  if (c == TOK_D_PS || (s[0] == ' ' && c1 == TOK_D_PS)) {
    at = tok_ds_run(s, len, c == TOK_D_PS ? 0 : 1, TOK_D_PS);
    while (at < len && (s[at] == '\r' || s[at] == '\n')) at++;
    return at;
  }
  return tok_space_tail(s, len);
}
#endif

/* CLIP's pattern at s, or 0: <\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|
 * [\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+ */
static size_t tok_clip_match(const char *s, size_t len) {
  static const char *const words[] = {"<|startoftext|>", "<|endoftext|>"};
  size_t k, at;
  for (int i = 0; i < 2; i++)
    if (len >= strlen(words[i]) && !memcmp(s, words[i], strlen(words[i]))) return strlen(words[i]);
  if ((at = tok_contraction(s, len, 0))) return at;
  int c = tok_char_class(s, len, &k);
  return c == TOK_C_NUMBER ? k : c == TOK_C_SPACE ? 0 : tok_run(s, len, 0, c, (size_t)-1);
}

/* the length of the match of Split's pattern p at s, or 0 when none starts there */
static size_t tok_split_match(int p, const char *s, size_t len) {
  size_t k;
  switch (p) {
  case FF_TOK_SPLIT_GPT2: return tok_gpt2_match(s, len);
  case FF_TOK_SPLIT_CL100K: return tok_cl100k_match(s, len, 3);
  case FF_TOK_SPLIT_QWEN2: return tok_cl100k_match(s, len, 1);
#if FF_TOK_CLASSES
  case FF_TOK_SPLIT_O200K: return tok_o200k_match(s, len);
  case FF_TOK_SPLIT_DS_MAIN: return tok_ds_main_match(s, len);
#endif
  case FF_TOK_SPLIT_DS_NUM: return tok_run(s, len, 0, TOK_C_NUMBER, 3); /* \p{N}{1,3} */
  case FF_TOK_SPLIT_DS_CJK: { /* [\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+ */
    size_t at = 0;
    for (uint32_t c; at < len && (c = ff_uc_next(s + at, len - at, &k), (c >= 0x4E00 && c <= 0x9FA5) ||
                                                                      (c >= 0x3040 && c <= 0x30FF));)
      at += k;
    return at;
  }
  case FF_TOK_SPLIT_TRIPLES: /* [0-9][0-9][0-9] */
    return len >= 3 && s[0] >= '0' && s[0] <= '9' && s[1] >= '0' && s[1] <= '9' && s[2] >= '0' && s[2] <= '9' ? 3 : 0;
  case FF_TOK_SPLIT_CLIP: return tok_clip_match(s, len);
  default: return 0;
  }
}

/* the match at s of a step that splits (a Split pattern, one number of
 * Digits, one punctuation mark of Punctuation), or 0 */
static size_t tok_pre_match(int step, const char *s, size_t len) {
  size_t k;
  switch (step & 15) {
  case FF_TOK_PRE_SPLIT: return tok_split_match(step >> 8, s, len);
  case FF_TOK_PRE_DIGITS: return tok_char_class(s, len, &k) == TOK_C_NUMBER ? k : 0; /* Rust's char::is_numeric */
#if FF_TOK_CLASSES
  case FF_TOK_PRE_PUNCT: return tok_punct_p(ff_uc_next(s, len, &k)) ? k : 0;
#endif
  default: return 0;
  }
}

static int tok_pre_run(const ff_tok_tables *t, int k, const char *s, size_t len, tok_out *o);

/* ByteLevel: a space first (add_prefix_space), GPT-2's pattern's pieces
 * (use_regex), each piece's bytes as characters for the steps after */
static int tok_byte_level(const ff_tok_tables *t, int k, const char *s, size_t len, tok_out *o) {
  int arg = t->pre[k] >> 8, rc = 0;
  char *w;
  if ((arg & FF_TOK_BL_PREFIX) && s[0] != ' ') {
    char *pre = tok_take(o, len + 1);
    if (!pre) return FF_TOK_EWORK;
    pre[0] = ' ', memcpy(pre + 1, s, len);
    s = pre, len++;
  }
  if (!(w = tok_take(o, 2 * len))) return FF_TOK_EWORK; /* a byte's character has 1 or 2 bytes */
  for (size_t at = 0, n; !rc && at < len; at += n) {
    size_t wn = 0;
    n = arg & FF_TOK_BL_REGEX ? tok_gpt2_match(s + at, len - at) : len - at;
    for (size_t i = 0; i < n; i++) wn += ff_uc_put(tok_byte_cp((unsigned char)s[at + i]), w + wn);
    rc = tok_pre_run(t, k + 1, w, wn, o);
  }
  return rc;
}

/* a split step's pieces, put together by its behavior as Hugging Face's
 * NormalizedString::split does: the piece held back [a, b) waits for what
 * may join it; each piece made goes on to the next step */
typedef struct {
  const ff_tok_tables *t;
  int k, how, prev_match, held_match;
  const char *s;
  size_t a, b;
  tok_out *o;
} tok_split;

static int tok_split_flush(tok_split *p) {
  size_t a = p->a;
  p->a = p->b;
  return p->b > a ? tok_pre_run(p->t, p->k + 1, p->s + a, p->b - a, p->o) : 0;
}

/* the next span [start, end) of the piece, a match or the text between two */
static int tok_split_span(tok_split *p, size_t start, size_t end, int match) {
  int rc = 0, held = p->b > p->a;
  if (p->how == FF_TOK_REMOVED && match) return 0;
  if (held && ((p->how == FF_TOK_MERGED_PREV && match && !p->prev_match) ||
               (p->how == FF_TOK_MERGED_NEXT && p->held_match && !match) ||
               (p->how == FF_TOK_CONTIGUOUS && match == p->prev_match))) {
    p->b = end, p->held_match = 0;
  } else {
    rc = tok_split_flush(p);
    p->a = start, p->b = end, p->held_match = match;
  }
  p->prev_match = match;
  if (!rc && (p->how == FF_TOK_ISOLATED || p->how == FF_TOK_REMOVED)) rc = tok_split_flush(p); /* nothing joins it */
  return rc;
}

/* a split step: matches (Split's pattern, Digits' numbers, Punctuation's
 * marks, one character each) and the text between them, their roles
 * swapped by invert */
static int tok_split_step(const ff_tok_tables *t, int k, const char *s, size_t len, tok_out *o) {
  int step = t->pre[k], invert = step >> 7 & 1, rc = 0;
  tok_split p = {t, k, step >> 4 & 7, 0, 0, s, 0, 0, o};
  size_t at = 0, gap = 0, n, ch; /* gap: where the text since the last match starts */
  while (!rc && at < len) {
    if (!(n = tok_pre_match(step, s + at, len - at))) {
      ff_uc_next(s + at, len - at, &ch);
      at += ch;
      continue;
    }
    if (gap < at) rc = tok_split_span(&p, gap, at, invert);
    if (!rc) rc = tok_split_span(&p, at, at + n, !invert);
    gap = at += n;
  }
  if (!rc && gap < len) rc = tok_split_span(&p, gap, len, invert);
  return rc ? rc : tok_split_flush(&p);
}

/* the piece through steps k, k+1, ... then BPE */
static int tok_pre_run(const ff_tok_tables *t, int k, const char *s, size_t len, tok_out *o) {
  unsigned char *work = o->work;
  size_t left = o->left;
  int rc;
  if (!len) return 0;
  if (k == t->n_pre) return tok_bpe_word(t, s, len, o);
  rc = (t->pre[k] & 15) == FF_TOK_PRE_BYTELEVEL ? tok_byte_level(t, k, s, len, o) : tok_split_step(t, k, s, len, o);
  o->work = work, o->left = left;
  return rc;
}
#endif

/* ---- Unigram ------------------------------------------------------------------------- */

#if FF_TOK_HAS(UNIGRAM)
/* The most probable pieces of a text: Viterbi over the pieces that start at
 * each character, as SentencePiece's EncodeOptimized and Hugging Face's
 * Unigram do.  A character no piece of its own length covers is unknown, at
 * the lowest score less 10; ties keep the shorter piece. */
typedef struct {
  double score; /* of the best path ending here */
  int32_t from; /* where its last piece starts; -1: no path yet */
  int32_t id;   /* its last piece; -1: an unknown character */
} tok_node;

/* a UTF-8 character's length from its first byte (SentencePiece's OneCharLen), within n */
static size_t tok_char_len(const char *s, size_t n) {
  static const unsigned char len[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  size_t k = len[(unsigned char)s[0] >> 4];
  return k < n ? k : n;
}

static void tok_lattice_put(tok_node *to, double score, size_t from, int32_t id) {
  if (to->from < 0 || score > to->score) to->score = score, to->from = (int32_t)from, to->id = id;
}

/* the path score plus a piece's, in the library's arithmetic */
static double tok_path_add(const ff_tok_tables *t, double path, double score) {
  return t->score_f32 ? (double)((float)path + (float)score) : path + score;
}

/* the unknown run w[0..n): the piece of that name outside the lattice (not a
 * control piece: Hugging Face looks the run up; MarianTokenizer numbers it
 * by vocab.json, where the target's pieces are), else its bytes' <0xXX>
 * tokens (byte_fallback, all of them there), else the unknown token */
static int tok_unigram_unknown(const ff_tok_tables *t, const char *w, size_t n, tok_out *o) {
  size_t i = 0;
  int rc = 0, id = n <= t->max_len ? tok_lookup(t, w, n) : -1;
  if (id >= 0 && id != t->unk && !(t->special[id] & 1)) return tok_push(o, id);
  while (t->byte_fallback && i < n && t->byte_id[(unsigned char)w[i]] >= 0) i++;
  if (t->byte_fallback && i == n) {
    for (i = 0; i < n && !rc; i++) rc = tok_push(o, t->byte_id[(unsigned char)w[i]]);
    return rc;
  }
  return t->unk >= 0 ? tok_push(o, t->unk) : tok_unknown(o, w, n, 0);
}

static void tok_lattice_fill(const ff_tok_tables *t, const char *w, size_t n, tok_node *best) {
  for (size_t i = 0; i <= n; i++) best[i].from = -1, best[i].score = 0, best[i].id = -1;
  for (size_t at = 0, mb; at < n; at += mb) {
    size_t lim = n - at < t->max_len ? n - at : t->max_len;
    uint64_t h = FF_TOK_HASH0;
    int single = 0;
    mb = tok_char_len(w + at, n - at);
    for (size_t k = 1; k <= lim; k++) {
      h = ff_tok_hash(h, w + at + k - 1, 1);
      int id = tok_lookup2(t, h, w + at, k, "", 0);
      if (id < 0 || (t->special[id] & 2)) continue;
      tok_lattice_put(&best[at + k], tok_path_add(t, best[at].score, t->score[id]), at, id);
      single |= k == mb;
    }
    if (!single) tok_lattice_put(&best[at + mb], tok_path_add(t, best[at].score, t->unk_score), at, -1);
  }
}

/* one word (or SentencePiece's whole text): its best path's pieces; runs of
 * unknown characters fused into one when fuse_unk (Hugging Face) */
static int tok_unigram_word(const ff_tok_tables *t, const char *w, size_t n, tok_out *o) {
  unsigned char *work = o->work;
  size_t left = o->left, m = 0;
  tok_node *best = tok_take(o, (n + 1) * sizeof *best);
  int32_t *start = tok_take(o, (n + 1) * sizeof *start);
  int rc = 0;
  if (!best || !start) return FF_TOK_EWORK;
  tok_lattice_fill(t, w, n, best);
  for (size_t at = n; at > 0; at = (size_t)best[at].from) start[m++] = (int32_t)at; /* piece ends, last first */
  for (size_t i = m, from = 0; i-- > 0 && !rc; from = (size_t)start[i]) {
    size_t end = (size_t)start[i];
    int32_t id = best[end].id;
    while (id < 0 && t->fuse_unk && i > 0 && best[start[i - 1]].id < 0) end = (size_t)start[--i];
    rc = id >= 0 ? tok_push(o, id) : tok_unigram_unknown(t, w + from, end - from, o);
    start[i] = (int32_t)end;
  }
  o->work = work, o->left = left;
  return rc;
}
#endif

#if FF_TOK_HAS(UNIGRAM) || FF_TOK_GRAPHEME
/* the longest rule of the charsmap that s starts with (the shortest: first):
 * its length (0: none) and *to its replacement (darts-clone's
 * commonPrefixSearch, every index checked: the array comes from a file) */
static size_t tok_charsmap_rule(const ff_tok_tables *t, const char *s, size_t len, const char **to, int first) {
  const uint32_t *a = t->charsmap;
  size_t units = t->charsmap_units, pos = 0, best = 0;
#define TOK_DA_OFFSET(u) ((size_t)((u) >> 10) << (((u) & 0x200u) >> 6))
  if (!units) return 0;
  pos ^= TOK_DA_OFFSET(a[0]);
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)s[i];
    uint32_t u;
    if ((pos ^= c) >= units || ((u = a[pos]) & 0x800000FFu) != c) break;
    if ((pos ^= TOK_DA_OFFSET(u)) >= units) break;
    if ((u >> 8 & 1) && (a[pos] & 0x7FFFFFFFu) < t->charsmap_text_len) {
      best = i + 1, *to = t->charsmap_text + (a[pos] & 0x7FFFFFFFu);
      if (first) break;
    }
  }
#undef TOK_DA_OFFSET
  return best;
}
#endif

#if FF_TOK_HAS(UNIGRAM)

/* what SentencePiece's normalizer makes of the text at s: the rule's
 * replacement, else the character, else (not UTF-8) U+FFFD for one byte;
 * *used the bytes it takes */
static const char *tok_spm_prefix(const ff_tok_tables *t, const char *s, size_t len, size_t *used, size_t *n) {
  const char *to = NULL;
  if ((*used = tok_charsmap_rule(t, s, len, &to, 0)) > 0) return *n = strlen(to), to;
  if (ff_uc_next(s, len, used) >= 0x110000u) return *used = 1, *n = 3, "\xef\xbf\xbd";
  return *n = *used, s;
}

/* SentencePiece's Normalizer::Normalize: the rules, spaces at either end
 * and repeated ones dropped (remove_extra_whitespaces), "\u2581" first
 * (add_dummy_prefix) and for each space (escape_whitespaces), into cap
 * bytes (charsmap_growth * len + 3).  Returns the length, or (size_t)-1
 * when it does not fit (a charsmap whose growth was misjudged). */
static size_t tok_spm_normalize(const ff_tok_tables *t, const char *s, size_t len, char *out, size_t cap) {
  const char *space = t->spm_escape ? FF_TOK_SPACE : " ", *r;
  size_t at = 0, n = 0, used, rn, sn = strlen(space);
  int prev = t->spm_extra_ws;
  while (t->spm_extra_ws && at < len && (r = tok_spm_prefix(t, s + at, len - at, &used, &rn)) && rn == 1 && *r == ' ')
    at += used;
  if (at == len) return 0;
  if (t->spm_dummy) memcpy(out, space, sn), n = sn;
  for (; at < len; at += used) {
    r = tok_spm_prefix(t, s + at, len - at, &used, &rn);
    while (prev && rn && *r == ' ') r++, rn--;
    size_t need = rn;
    for (size_t i = 0; i < rn; i++) need += r[i] == ' ' ? sn - 1 : 0;
    if (cap - n < need) return (size_t)-1; /* more than the growth the file's rules gave */
    for (size_t i = 0; i < rn; i++)
      if (r[i] == ' ') memcpy(out + n, space, sn), n += sn;
      else out[n++] = r[i];
    if (rn) prev = r[rn - 1] == ' ';
    prev &= t->spm_extra_ws;
  }
  while (t->spm_extra_ws && n >= sn && !memcmp(out + n - sn, space, sn)) n -= sn;
  return n;
}

/* SentencePiece: the normalized text is one lattice (its pieces never
 * hold a space inside) */
static int tok_spm_encode(const ff_tok_tables *t, const char *text, size_t len, tok_out *o) {
  size_t cap = t->charsmap_growth * len + 3, n;
  char *w = tok_take(o, cap);
  if (!w || (n = tok_spm_normalize(t, text, len, w, cap)) == (size_t)-1) return FF_TOK_EWORK;
  return tok_unigram_word(t, w, n, o);
}

static size_t tok_unigram_bytes(const ff_tok_tables *t, size_t len) {
  size_t n = t->spm ? t->charsmap_growth * len + 3 : 3 * len + 6; /* the text as the lattice reads it */
  return (n + 8) + (n + 1) * (sizeof(tok_node) + sizeof(int32_t)) + 32;
}
#endif

#if FF_TOK_SP_TEXT
/* a word of SentencePiece-style text: BPE's or Unigram's */
static int tok_sp_word(const ff_tok_tables *t, const char *w, size_t n, tok_out *o) {
#if FF_TOK_HAS(SP)
  if (t->kind == FF_TOK_KIND_SP) return tok_bpe_word(t, w, n, o);
#endif
#if FF_TOK_HAS(UNIGRAM)
  if (t->kind == FF_TOK_KIND_UNIGRAM) return tok_unigram_word(t, w, n, o);
#endif
  return 0;
}

/* SentencePiece-style text of tokenizer.json: "\u2581" for spaces (the
 * Prepend and Replace normalizers, or the Metaspace pre-tokenizer), words
 * split before each "\u2581" when Metaspace splits */
static int tok_sp_segment(const ff_tok_tables *t, const char *s, size_t len, int first, tok_out *o) {
  unsigned char *work = o->work;
  size_t left = o->left, n = 3;
  char *w = tok_take(o, 3 * len + 6); /* room for "\u2581" first, put there when it goes */
  int rc = 0;
  if (!w) return FF_TOK_EWORK;
  if (t->prepend) memcpy(w + n, FF_TOK_SPACE, 3), n += 3;
  for (size_t i = 0; i < len; i++)
    if (s[i] == ' ' && (t->replace_space || t->meta)) memcpy(w + n, FF_TOK_SPACE, 3), n += 3;
    else w[n++] = s[i];
  int lead = n >= 6 && !memcmp(w + 3, FF_TOK_SPACE, 3);
  if (t->meta && !lead && (t->meta_scheme == FF_TOK_META_ALWAYS || (t->meta_scheme == FF_TOK_META_FIRST && first)))
    memcpy(w, FF_TOK_SPACE, 3);
  else w += 3, n -= 3;
  for (size_t at = 0, end; !rc && at < n; at = end) {
    end = t->meta_split ? at + 3 * (n - at >= 3 && !memcmp(w + at, FF_TOK_SPACE, 3)) : n;
    while (end < n && !(n - end >= 3 && !memcmp(w + end, FF_TOK_SPACE, 3))) end++;
    rc = tok_sp_word(t, w + at, end - at, o);
  }
  o->work = work, o->left = left;
  return rc;
}
#endif

/* ---- WordPiece ------------------------------------------------------------------------ */

#if FF_TOK_HAS(WORDPIECE)
/* BertNormalizer's output: bytes out per byte in, at most (a Hangul syllable
 * of 3 bytes becomes 3 jamo of 3) */
#define TOK_BERT_GROWTH 3

/* BertNormalizer: control characters out, whitespace to " ", spaces around
 * CJK ideographs, accents stripped (NFD without Mn), lowercase */
static void tok_bert_normalize(const ff_tok_tables *t, const char *s, size_t len, tok_buf *out) {
  for (size_t at = 0, k; at < len; at += k) {
    uint32_t cp = ff_uc_next(s + at, len - at, &k);
    int ctl = cp == 0 || cp == 0xFFFD || (ff_uc_other_p(cp) && cp != '\t' && cp != '\n' && cp != '\r');
    if (t->bert_clean && ctl) continue;
    if (t->bert_clean && ff_uc_space_p(cp)) {
      tok_buf_put(out, " ", 1);
      continue;
    }
    if (t->bert_chinese && ff_uc_cjk_p(cp)) {
      tok_buf_put(out, " ", 1), tok_buf_put(out, s + at, k), tok_buf_put(out, " ", 1);
      continue;
    }
    if (t->bert_strip && ff_uc_mn_p(cp)) continue;
    char buf[16];
    const char *p = t->bert_strip && cp < 0x110000 ? ff_uc_strip(cp, buf) : NULL;
    size_t n = p ? strlen(p) : k;
    if (!p) p = s + at;
    for (size_t j = 0, kk; j < n; j += kk) {
      uint32_t c = ff_uc_next(p + j, n - j, &kk);
      if (t->bert_lower) tok_lower_put(c, p + j, kk, s + at + k, len - at - k, out);
      else tok_buf_put(out, p + j, kk);
    }
  }
}

/* greedy longest match first, as Hugging Face's WordPiece: the pieces of w
 * in sub, their count, or -1 when some start has none.  From each start only
 * candidates up to the longest token are tried, hashed a character at a
 * time (hash, ends: room for a word's characters): O(characters x longest
 * token), not O(characters^3) */
static int tok_wordpiece_split(const ff_tok_tables *t, const char *w, size_t len, uint64_t *hash, size_t *ends,
                               int32_t *sub) {
  size_t plen = strlen(t->wp_prefix), k;
  uint64_t h0 = ff_tok_hash(FF_TOK_HASH0, t->wp_prefix, plen);
  int m = 0;
  for (size_t start = 0; start < len;) {
    size_t pre = start ? plen : 0, n = 0; /* the prefix goes before every piece but the first */
    uint64_t h = start ? h0 : FF_TOK_HASH0;
    for (size_t end = start; end < len; n++) {
      ff_uc_next(w + end, len - end, &k);
      if (pre + end + k - start > t->max_len) break;
      h = ff_tok_hash(h, w + end, k), end += k;
      hash[n] = h, ends[n] = end;
    }
    int id = -1;
    while (n > 0 && (id = tok_lookup2(t, hash[n - 1], t->wp_prefix, pre, w + start, ends[n - 1] - start)) < 0) n--;
    if (id < 0) return -1;
    sub[m++] = id, start = ends[n - 1];
  }
  return m;
}

/* a word of more than max_input_chars_per_word characters, or with no
 * split, is unk */
static int tok_wordpiece_word(const ff_tok_tables *t, const char *w, size_t len, tok_out *o) {
  unsigned char *work = o->work;
  size_t left = o->left, chars = 0, k;
  int rc = 0, m = -1;
  for (size_t at = 0; at < len; at += k, chars++) ff_uc_next(w + at, len - at, &k);
  if (chars <= t->wp_max_chars) {
    uint64_t *hash = tok_take(o, chars * sizeof *hash);
    size_t *ends = tok_take(o, chars * sizeof *ends);
    int32_t *sub = tok_take(o, chars * sizeof *sub);
    if (!hash || !ends || !sub) return FF_TOK_EWORK;
    if ((m = tok_wordpiece_split(t, w, len, hash, ends, sub)) >= 0) rc = tok_push_all(o, sub, m);
  }
  o->work = work, o->left = left;
  if (m >= 0) return rc;
  return t->unk < 0 ? tok_unknown(o, w, len, 0) : tok_push(o, t->unk);
}

/* BertPreTokenizer: words between whitespace, each punctuation mark a word */
static int tok_wordpiece_segment(const ff_tok_tables *t, const char *s, size_t len, tok_out *o) {
  tok_buf n = {NULL, 0, TOK_BERT_GROWTH * len, 0};
  int rc = 0;
  size_t word = 0, at = 0, k;
  if (!(n.p = tok_take(o, n.cap))) return FF_TOK_EWORK;
  tok_bert_normalize(t, s, len, &n);
  if (n.over) return FF_TOK_EWORK;
  for (; !rc && at < n.n; at += k) {
    uint32_t cp = ff_uc_next(n.p + at, n.n - at, &k);
    int space = ff_uc_space_p(cp), punct = !space && tok_punct_p(cp);
    if (!space && !punct) continue;
    if (at > word) rc = tok_wordpiece_word(t, n.p + word, at - word, o);
    if (!rc && punct) rc = tok_wordpiece_word(t, n.p + at, k, o);
    word = at + k;
  }
  if (!rc && at > word) rc = tok_wordpiece_word(t, n.p + word, at - word, o);
  return rc; /* the normalized text stays taken: an unknown piece's message points into it */
}
#endif

/* ---- tokenizer.json's Unicode normalizers ----------------------------------------------- */

#if FF_TOK_NORM
#define TOK_DECOMP_MAX 18 /* code points of the longest decomposition (U+FDFA) */

/* UTF-8 bytes out per byte in of each step, at most (scripts/gen_unicode_tables.py checks) */
static size_t tok_norm_step_growth(int step) {
  return step == FF_TOK_NORM_NFKC || step == FF_TOK_NORM_NFKD ? 11 : step == FF_TOK_NORM_LOWER ? 2
                                                                  : step == FF_TOK_NORM_STRIP ? 1 : 3;
}

/* bytes out per byte in of the normalizer's steps, at most (Prepend's text
 * counted against the first byte: it prepends to no empty text) */
FF_TOK_API size_t ff_tok_norm_growth(const ff_tok_tables *t) {
  size_t g = 1;
  for (int norm = t->norm, i = 0; norm; norm >>= 4, i++) {
    int step = norm & 15;
    size_t to = t->norm_to[i] ? strlen(t->norm_to[i]) : 0, from = t->norm_from[i] ? strlen(t->norm_from[i]) : 1;
    if (step == FF_TOK_NORM_SPACES2) from = 2;
    if (step == FF_TOK_NORM_REPLACE || step == FF_TOK_NORM_SPACES || step == FF_TOK_NORM_SPACES2)
      g *= to > from ? (to + from - 1) / from : 1;
    else if (step == FF_TOK_NORM_PREPEND) g *= 1 + to;
    else if (step == FF_TOK_NORM_PRECOMPILED) g *= t->charsmap_growth > 3 ? t->charsmap_growth : 3;
    else if (step < FF_TOK_NORM_TRIM_LEFT) g *= tok_norm_step_growth(step); /* (Strip only shortens) */
  }
  return g;
}

/* Replace of " {2,}" (two spaces or more) */
static void tok_replace_spaces2(const char *to, const char *s, size_t len, tok_buf *out) {
  for (size_t at = 0, n; at < len; at += n) {
    for (n = 0; at + n < len && s[at + n] == ' ';) n++;
    if (n >= 2) tok_buf_put(out, to, strlen(to));
    else tok_buf_put(out, s + at, n = n ? n : 1);
  }
}

/* Strip: the whitespace (Rust's char::is_whitespace) at the text's start, end or both */
static void tok_trim(int step, const char *s, size_t len, tok_buf *out) {
  size_t a = step == FF_TOK_NORM_TRIM_RIGHT ? 0 : tok_space_after(s, len);
  size_t b = step == FF_TOK_NORM_TRIM_LEFT ? len : a + tok_space_before(s + a, len - a);
  tok_buf_put(out, s + a, b - a);
}
#endif

#if FF_TOK_GRAPHEME
/* UAX #29's grapheme cluster break classes (uc_gcb), LV and LVT by formula */
enum { TOK_G_OTHER, TOK_G_CR, TOK_G_LF, TOK_G_CONTROL, TOK_G_EXTEND, TOK_G_ZWJ, TOK_G_RI, TOK_G_PREPEND,
       TOK_G_SPACING, TOK_G_L, TOK_G_V, TOK_G_T, TOK_G_LV, TOK_G_LVT };

static int tok_gcb(uint32_t cp) {
  size_t lo = 0, hi = FF_UC_COUNT(uc_gcb);
  if (cp >= 0x110000) return TOK_G_CONTROL; /* a byte that is not UTF-8: a cluster of its own */
  if (cp >= 0xAC00 && cp <= 0xD7A3) return (cp - 0xAC00) % 28 ? TOK_G_LVT : TOK_G_LV;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (cp < uc_gcb[mid][0]) hi = mid;
    else if (cp > uc_gcb[mid][1]) lo = mid + 1;
    else return (int)uc_gcb[mid][2];
  }
  return TOK_G_OTHER;
}

/* the length of the extended grapheme cluster at s (Unicode 15.0's rules
 * GB3 to GB13), at least one character */
static size_t tok_grapheme(const char *s, size_t len) {
  size_t k, at;
  uint32_t cp = ff_uc_next(s, len, &at);
  int prev = tok_gcb(cp), ri = prev == TOK_G_RI;
  /* pict 1: in ExtPict Extend*, 2: then ZWJ (GB11) */
  int pict = cp < 0x110000 && ff_uc_in_ranges(uc_extpict, FF_UC_COUNT(uc_extpict), cp);
  for (; at < len; at += k) {
    cp = ff_uc_next(s + at, len - at, &k);
    int c = tok_gcb(cp), xp = cp < 0x110000 && ff_uc_in_ranges(uc_extpict, FF_UC_COUNT(uc_extpict), cp), join;
    if (prev == TOK_G_CR || prev == TOK_G_LF || prev == TOK_G_CONTROL || c == TOK_G_CR || c == TOK_G_LF ||
        c == TOK_G_CONTROL)
      join = prev == TOK_G_CR && c == TOK_G_LF; /* GB3, GB4, GB5 */
    else if (prev == TOK_G_L) join = c == TOK_G_L || c == TOK_G_V || c == TOK_G_LV || c == TOK_G_LVT; /* GB6 */
    else join = ((prev == TOK_G_LV || prev == TOK_G_V) && (c == TOK_G_V || c == TOK_G_T)) ||  /* GB7 */
                ((prev == TOK_G_LVT || prev == TOK_G_T) && c == TOK_G_T) ||                 /* GB8 */
                c == TOK_G_EXTEND || c == TOK_G_ZWJ || c == TOK_G_SPACING || prev == TOK_G_PREPEND || /* GB9-9b */
                (pict == 2 && xp) || (prev == TOK_G_RI && c == TOK_G_RI && ri % 2);         /* GB11, GB12-13 */
    if (!join) break;
    pict = xp ? 1 : pict == 1 && c == TOK_G_EXTEND ? 1 : pict == 1 && c == TOK_G_ZWJ ? 2 : 0;
    ri = c == TOK_G_RI ? ri + 1 : 0;
    prev = c;
  }
  return at;
}

/* Precompiled as the Rust library applies it: a grapheme cluster of fewer
 * than 6 bytes whole when a rule matches its start (the shortest rule, its
 * replacement for the whole cluster), else each character by the rule of
 * that character alone, or as it is */
static void tok_precompiled(const ff_tok_tables *t, const char *s, size_t len, tok_buf *out) {
  const char *to;
  for (size_t at = 0, g; at < len; at += g) {
    g = tok_grapheme(s + at, len - at);
    if (g < 6 && tok_charsmap_rule(t, s + at, g, &to, 1)) {
      tok_buf_put(out, to, strlen(to));
      continue;
    }
    for (size_t i = 0, k; i < g; i += k) {
      ff_uc_next(s + at + i, g - i, &k);
      if (tok_charsmap_rule(t, s + at + i, k, &to, 1)) tok_buf_put(out, to, strlen(to));
      else tok_buf_put(out, s + at + i, k);
    }
  }
}
#endif

#if FF_TOK_NORM

/* Replace: each match of the pattern (the string from, or \s+ when from is
 * NULL), leftmost first, not overlapping, for to */
static void tok_replace(const char *from, const char *to, const char *s, size_t len, tok_buf *out) {
  size_t lf = from ? strlen(from) : 0, lt = strlen(to), k;
  for (size_t at = 0; at < len;)
    if (from && len - at >= lf && !memcmp(s + at, from, lf)) tok_buf_put(out, to, lt), at += lf;
    else if (!from && ff_uc_space_p(ff_uc_next(s + at, len - at, &k))) {
      while (at < len && ff_uc_space_p(ff_uc_next(s + at, len - at, &k))) at += k;
      tok_buf_put(out, to, lt);
    } else tok_buf_put(out, s + at, 1), at++;
}

static int tok_ccc(uint32_t cp) { /* canonical combining class */
  size_t lo = 0, hi = FF_UC_COUNT(uc_ccc);
  if (cp < 0x300) return 0;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (cp < uc_ccc[mid][0]) hi = mid;
    else if (cp > uc_ccc[mid][1]) lo = mid + 1;
    else return (int)uc_ccc[mid][2];
  }
  return 0;
}

/* cp's full decomposition (compat: NFKD's, else NFD's) into a: its length */
static size_t tok_decompose(uint32_t cp, int compat, uint32_t *a) {
  const char *d = compat && cp >= 0xA0 && cp < 0x110000 ? ff_uc_in_map(uc_nfkd_map, FF_UC_COUNT(uc_nfkd_map), cp) : NULL;
  size_t m = 0, k;
  if (cp >= 0xAC00 && cp <= 0xD7A3) { /* Hangul syllable -> L V (T) jamo, by Unicode's formula */
    uint32_t x = cp - 0xAC00;
    a[m++] = 0x1100 + x / 588, a[m++] = 0x1161 + x % 588 / 28;
    if (x % 28) a[m++] = 0x11A7 + x % 28;
    return m;
  }
  if (!d && cp >= 0xC0 && cp < 0x110000) d = ff_uc_in_map(uc_nfd_map, FF_UC_COUNT(uc_nfd_map), cp);
  if (!d) return a[0] = cp, 1;
  for (size_t n = strlen(d), at = 0; at < n && m < TOK_DECOMP_MAX; at += k) a[m++] = ff_uc_next(d + at, n - at, &k);
  return m;
}

/* canonical ordering: each run of non-starters sorted by class, stably;
 * a long run by counting (linear, not insertion sort's quadratic) */
static void tok_reorder(uint32_t *a, size_t n, uint32_t *tmp) {
  for (size_t i = 0, j; i < n; i = j + (j == i)) {
    for (j = i; j < n && tok_ccc(a[j]); j++) {}
    if (j - i <= 16) {
      for (size_t x = i + 1; x < j; x++)
        for (size_t y = x; y > i && tok_ccc(a[y - 1]) > tok_ccc(a[y]); y--) {
          uint32_t v = a[y];
          a[y] = a[y - 1], a[y - 1] = v;
        }
      continue;
    }
    size_t at[256] = {0};
    for (size_t x = i; x < j; x++) at[tok_ccc(a[x])]++;
    for (size_t c = 0, sum = 0, v; c < 256; c++) v = at[c], at[c] = sum, sum += v;
    for (size_t x = i; x < j; x++) tmp[at[tok_ccc(a[x])]++] = a[x];
    memcpy(a + i, tmp, (j - i) * sizeof *a);
  }
}

/* the primary composite of a then b, or 0 */
static uint32_t tok_compose_pair(uint32_t a, uint32_t b) {
  size_t lo = 0, hi = FF_UC_COUNT(uc_compose);
  if (a >= 0x1100 && a <= 0x1112 && b >= 0x1161 && b <= 0x1175) return 0xAC00 + ((a - 0x1100) * 21 + b - 0x1161) * 28;
  if (a >= 0xAC00 && a <= 0xD7A3 && (a - 0xAC00) % 28 == 0 && b >= 0x11A8 && b <= 0x11C2) return a + b - 0x11A7;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    const uint32_t *e = uc_compose[mid];
    if (a < e[0] || (a == e[0] && b < e[1])) hi = mid;
    else if (a > e[0] || b > e[1]) lo = mid + 1;
    else return e[2];
  }
  return 0;
}

/* Unicode's canonical composition, in place: each character joins the last
 * starter unless a character between has class 0 or at least its own */
static size_t tok_compose(uint32_t *a, size_t n) {
  size_t o = 0, starter = (size_t)-1;
  int prev = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t c = a[i], x;
    int cc = tok_ccc(c);
    if (starter != (size_t)-1 && (o == starter + 1 || (prev && prev < cc)) && (x = tok_compose_pair(a[starter], c))) {
      a[starter] = x;
      continue;
    }
    if (!cc) starter = o;
    prev = cc, a[o++] = c;
  }
  return o;
}

/* NFC, NFD, NFKC or NFKD of s into out (cap bytes; a, tmp: cap code points) */
static void tok_norm_form(int step, const char *s, size_t len, tok_buf *out, uint32_t *a, uint32_t *tmp) {
  int compat = step == FF_TOK_NORM_NFKC || step == FF_TOK_NORM_NFKD;
  size_t m = 0, k;
  char u[4];
  for (size_t at = 0; at < len; at += k) {
    uint32_t cp = ff_uc_next(s + at, len - at, &k);
    if (out->cap - m < TOK_DECOMP_MAX) {
      out->over = 1;
      return;
    }
    m += tok_decompose(cp, compat, a + m);
  }
  tok_reorder(a, m, tmp);
  if (step == FF_TOK_NORM_NFC || step == FF_TOK_NORM_NFKC) m = tok_compose(a, m);
  for (size_t i = 0; i < m; i++) tok_buf_put(out, u, ff_uc_put(a[i], u));
}

/* step i of norm, s into out */
static void tok_norm_step(const ff_tok_tables *t, int i, const char *s, size_t len, tok_buf *out, uint32_t *a,
                          uint32_t *tmp) {
  int step = t->norm >> 4 * i & 15;
  size_t k;
  if (step == FF_TOK_NORM_REPLACE || step == FF_TOK_NORM_SPACES) {
    tok_replace(step == FF_TOK_NORM_REPLACE ? t->norm_from[i] : NULL, t->norm_to[i], s, len, out);
    return;
  }
  if (step == FF_TOK_NORM_SPACES2) {
    tok_replace_spaces2(t->norm_to[i], s, len, out);
    return;
  }
  if (step >= FF_TOK_NORM_TRIM_LEFT) {
    tok_trim(step, s, len, out);
    return;
  }
#if FF_TOK_GRAPHEME
  if (step == FF_TOK_NORM_PRECOMPILED) {
    tok_precompiled(t, s, len, out);
    return;
  }
#endif
  if (step == FF_TOK_NORM_PREPEND) {
    tok_buf_put(out, t->norm_to[i], strlen(t->norm_to[i]));
    tok_buf_put(out, s, len);
    return;
  }
  if (step <= FF_TOK_NORM_NFKD) {
    tok_norm_form(step, s, len, out, a, tmp);
    return;
  }
  for (size_t at = 0; at < len; at += k) {
    uint32_t c = ff_uc_next(s + at, len - at, &k);
    if (step == FF_TOK_NORM_LOWER) tok_lower_put(c, s + at, k, s + at + k, len - at - k, out);
    else if (c >= 0x110000 || !ff_uc_in_ranges(uc_mark, FF_UC_COUNT(uc_mark), c)) tok_buf_put(out, s + at, k);
  }
}

/* the scratch tok_normalize takes for len bytes */
static size_t tok_norm_bytes(const ff_tok_tables *t, size_t len) {
  size_t cap = ff_tok_norm_growth(t) * len + TOK_DECOMP_MAX;
  return 2 * (cap + 8) + 2 * (cap * sizeof(uint32_t) + 8) + 16;
}

/* the text through the normalizer's steps, in two buffers by turns: *s and
 * *len become the result's */
static int tok_normalize(const ff_tok_tables *t, const char **s, size_t *len, tok_out *o) {
  size_t cap = ff_tok_norm_growth(t) * *len + TOK_DECOMP_MAX;
  char *buf[2] = {tok_take(o, cap), tok_take(o, cap)};
  uint32_t *a = tok_take(o, cap * sizeof *a), *tmp = tok_take(o, cap * sizeof *tmp);
  if (!buf[0] || !buf[1] || !a || !tmp) return FF_TOK_EWORK;
  for (int norm = t->norm, k = 0, i = 0; norm; norm >>= 4, k ^= 1, i++) {
    tok_buf out = {buf[k], 0, cap, 0};
    tok_norm_step(t, i, *s, *len, &out, a, tmp);
    if (out.over) return FF_TOK_EWORK; /* the growth bound is wrong */
    *s = out.p, *len = out.n;
  }
  return 0;
}
#endif

/* ---- Hugging Face: added tokens, then the model's segments --------------------------------- */

#if FF_TOK_HF
static int tok_hf_kind(const ff_tok_tables *t, const char *s, size_t len, int first, tok_out *o) {
  (void)first;
  if (!len) return 0;
#if FF_TOK_HAS(BYTES)
  if (t->kind == FF_TOK_KIND_BYTES) return tok_pre_run(t, 0, s, len, o);
#endif
#if FF_TOK_SP_TEXT
  if (t->kind == FF_TOK_KIND_SP || t->kind == FF_TOK_KIND_UNIGRAM) return tok_sp_segment(t, s, len, first, o);
#endif
#if FF_TOK_HAS(WORDPIECE)
  if (t->kind == FF_TOK_KIND_WORDPIECE) return tok_wordpiece_segment(t, s, len, o);
#endif
  return 0;
}

/* a piece of text between added tokens: normalized, then the model's; the
 * scratch given back after (an unknown piece's message may point into it:
 * nothing writes there before the caller reads it) */
static int tok_hf_segment(const ff_tok_tables *t, const char *s, size_t len, int first, tok_out *o) {
  unsigned char *work = o->work;
  size_t left = o->left;
  int rc = 0;
#if FF_TOK_NORM
  if (t->norm && len) rc = tok_normalize(t, &s, &len, o);
#endif
  if (!rc) rc = tok_hf_kind(t, s, len, first, o);
  o->work = work, o->left = left;
  return rc;
}

/* the added token at s (the longest), or -1 */
static int tok_added_at(const ff_tok_tables *t, const char *s, size_t len) {
  for (int i = 0; i < t->n_added; i++) {
    int id = t->added[i];
    if (t->len[id] <= len && !memcmp(s, t->tok[id], t->len[id])) return id;
  }
  return -1;
}

/* added tokens split the text; each piece between them is encoded on its
 * own, without the whitespace an lstrip / rstrip token takes */
static int tok_hf_encode(const ff_tok_tables *t, const char *text, size_t len, tok_out *o) {
  size_t seg = 0;
  int rc = 0;
  for (size_t at = 0; !rc && at < len;) {
    int id = tok_added_at(t, text + at, len - at);
    if (id < 0) {
      at++;
      continue;
    }
    size_t end = t->special[id] & 4 ? seg + tok_space_before(text + seg, at - seg) : at;
    if (!(rc = tok_hf_segment(t, text + seg, end - seg, seg == 0, o))) rc = tok_push(o, id);
    at += t->len[id];
    if (t->special[id] & 8) at += tok_space_after(text + at, len - at);
    seg = at;
  }
  return rc ? rc : tok_hf_segment(t, text + seg, len - seg, seg == 0, o);
}
#endif

/* ---- encode --------------------------------------------------------------------------------- */

/* the longest text encode takes: positions are ints, scratch a size_t */
FF_TOK_API size_t ff_tok_max_text(void) {
  size_t a = (size_t)INT_MAX / 8, b = (size_t)-1 / 256;
  return a < b ? a : b;
}

/* the scratch encode needs for a text of len bytes; (size_t)-1 past
 * ff_tok_max_text() */
FF_TOK_API size_t ff_tok_work_bytes(const ff_tok_tables *t, size_t len) {
  size_t n = 64;
  if (len > ff_tok_max_text()) return (size_t)-1;
#if FF_TOK_NORM
  if (t->norm) { /* the normalized text, then the model's scratch for it */
    if (len > (ff_tok_max_text() - TOK_DECOMP_MAX) / ff_tok_norm_growth(t)) return (size_t)-1;
    n += tok_norm_bytes(t, len), len = ff_tok_norm_growth(t) * len + TOK_DECOMP_MAX;
  }
#endif
  switch (t->kind) {
#if FF_TOK_HAS(VOCAB)
  case FF_TOK_KIND_VOCAB: n += len + 8; break;
#endif
#if FF_TOK_HAS(LLAMA2C)
  case FF_TOK_KIND_LLAMA2C: n += tok_bpe_bytes(len + 1); break;
#endif
#if FF_TOK_HAS(BYTES)
  case FF_TOK_KIND_BYTES: n += (len + 9) + (2 * len + 10) + tok_bpe_bytes(2 * len + 2); break;
#endif
#if FF_TOK_HAS(SP)
  case FF_TOK_KIND_SP: n += (3 * len + 14) + tok_bpe_bytes(3 * len + 6); break;
#endif
#if FF_TOK_HAS(UNIGRAM)
  case FF_TOK_KIND_UNIGRAM: n += tok_unigram_bytes(t, len); break;
#endif
#if FF_TOK_HAS(WORDPIECE)
  case FF_TOK_KIND_WORDPIECE:
    n += TOK_BERT_GROWTH * len + 8 + TOK_BERT_GROWTH * len * (sizeof(uint64_t) + sizeof(size_t) + sizeof(int32_t)) + 24;
    break;
#endif
  default: break;
  }
  return n;
}

/* text (len bytes) -> ids, at most cap of them: their count, or FF_TOK_E*
 * with *why set.  No special id is added (BOS and the template's tail are
 * the caller's).  work: work_bytes of scratch, at least ff_tok_work_bytes(t,
 * len), 8-byte aligned. */
FF_TOK_API int ff_tok_encode(const ff_tok_tables *t, const char *text, size_t len, void *work, size_t work_bytes,
                             int32_t *ids, int cap, ff_tok_why *why) {
  tok_out o = {ids, cap, 0, why, (unsigned char *)work, work_bytes};
  int rc = FF_TOK_EWORK;
  why->piece = NULL, why->len = why->at = 0, why->byte = 0;
  if (len > ff_tok_max_text()) return FF_TOK_ELONG;
  if (work_bytes < ff_tok_work_bytes(t, len)) return FF_TOK_EWORK;
  switch (t->kind) {
#if FF_TOK_HAS(VOCAB)
  case FF_TOK_KIND_VOCAB: rc = tok_vocab_encode(t, text, len, &o); break;
#endif
#if FF_TOK_HAS(LLAMA2C)
  case FF_TOK_KIND_LLAMA2C: rc = tok_llama2c_encode(t, text, len, &o); break;
#endif
#if FF_TOK_HF
  case FF_TOK_KIND_BYTES:
  case FF_TOK_KIND_SP:
  case FF_TOK_KIND_WORDPIECE: rc = tok_hf_encode(t, text, len, &o); break;
#endif
#if FF_TOK_HAS(UNIGRAM)
  case FF_TOK_KIND_UNIGRAM: rc = t->spm ? tok_spm_encode(t, text, len, &o) : tok_hf_encode(t, text, len, &o); break;
#endif
  default: break;
  }
  return rc ? rc : o.n;
}

/* ---- decode --------------------------------------------------------------------------------- */

typedef struct {
  char *text;
  size_t cap, need, copied;
  int first;      /* nothing put yet */
  int tail_space; /* the last piece ended in end_of_word_suffix: a space before the next */
} tok_sink;

/* where a piece of n bytes goes, or NULL when it does not fit whole (nor
 * does anything after a piece that did not) */
static char *tok_room(tok_sink *k, size_t n) {
  char *at = k->copied == k->need && k->need + n < k->cap ? k->text + k->copied : NULL;
  if (at) k->copied += n;
  k->need += n;
  return at;
}

static void tok_sink_put(tok_sink *k, const char *p, size_t n) {
  char *at = tok_room(k, n);
  if (at) memcpy(at, p, n);
}

#if FF_TOK_SP_PIECE
/* <0xXX> -> XX, or -1 */
static int tok_byte_token(const char *s, size_t n) {
  static const char hex[] = "0123456789ABCDEF";
  const char *h = n == 6 && !memcmp(s, "<0x", 3) && s[5] == '>' ? strchr(hex, s[3]) : NULL;
  const char *l = h && s[4] ? strchr(hex, s[4]) : NULL;
  return h && l && s[3] && s[4] ? (int)((h - hex) * 16 + (l - hex)) : -1;
}

/* one SentencePiece-style or llama2.c token: "\u2581" is a space, <0xXX> a
 * byte, the first leading space of the text is the dummy prefix */
static void tok_sp_piece(const ff_tok_tables *t, const char *s, size_t n, tok_sink *k) {
  int b = t->byte_fallback || t->kind == FF_TOK_KIND_LLAMA2C ? tok_byte_token(s, n) : -1;
  size_t m = n, i;
  char *at;
  if (b >= 0) { /* <0x00>: no byte (the text is a C string; llama2.c's run.c prints none either) */
    char c = (char)b;
    if (b) tok_sink_put(k, &c, 1);
    return;
  }
  for (i = 0; i + 3 <= n; i++)
    if (!memcmp(s + i, FF_TOK_SPACE, 3)) m -= 2, i += 2;
  int dummy = t->kind == FF_TOK_KIND_LLAMA2C || t->prepend || (t->meta && t->meta_scheme != FF_TOK_META_NEVER) ||
              t->spm_dummy;
  int strip = k->first && dummy && m && (s[0] == ' ' || (n >= 3 && !memcmp(s, FF_TOK_SPACE, 3)));
  if (!(at = tok_room(k, m - (size_t)strip))) return;
  for (i = strip ? (s[0] == ' ' ? 1 : 3) : 0; i < n; i++)
    if (n - i >= 3 && !memcmp(s + i, FF_TOK_SPACE, 3)) *at++ = ' ', i += 2;
    else *at++ = s[i];
}
#endif

#if FF_TOK_HAS(BYTES)
/* a byte-level token's bytes; end_of_word_suffix a space, as transformers'
 * CLIPTokenizerFast decodes (which strips the text's last one) */
static void tok_bytes_piece(const ff_tok_tables *t, const char *s, size_t n, tok_sink *k) {
  size_t m = 0, at, c, ls = t->suffix ? strlen(t->suffix) : 0;
  int eow = ls && n >= ls && !memcmp(s + n - ls, t->suffix, ls), space = k->tail_space;
  char *out;
  if (eow) n -= ls;
  for (at = 0; at < n; at += c) { /* byte 0 (U+0100): none, the text is a C string */
    const int b = tok_cp_byte(ff_uc_next(s + at, n - at, &c));
    m += b > 0 ? 1 : b == 0 ? 0 : c;
  }
  k->tail_space = eow;
  if (!(out = tok_room(k, m + (size_t)space))) return;
  if (space) *out++ = ' ';
  for (at = 0; at < n; at += c) {
    const int b = tok_cp_byte(ff_uc_next(s + at, n - at, &c));
    if (b > 0) *out++ = (char)b;
    else if (b < 0) memcpy(out, s + at, c), out += c;
  }
}
#endif

#if FF_TOK_HAS(WORDPIECE)
/* WordPiece's decoder: the prefix glues a token to the one before, others
 * follow a space; cleanup, token by token as Hugging Face does, drops the
 * space before . ? ! , and contractions (in place: each replacement shrinks) */
static void tok_wordpiece_piece(const ff_tok_tables *t, const char *s, size_t len, tok_sink *k) {
  static const char *const from[] = {" .", " ?", " !", " ,", " ' ", " n't", " 'm", " 's", " 've", " 're"};
  static const char *const to[] = {".", "?", "!", ",", "'", "n't", "'m", "'s", "'ve", "'re"};
  char a[FF_TOK_MAX_BYTES + 2];
  size_t plen = strlen(t->wp_prefix), n = 0;
  int glue = !k->first && plen && len >= plen && !memcmp(s, t->wp_prefix, plen);
  if (glue) s += plen, len -= plen;
  if (len + 1 > sizeof a) { /* no such token in a tokenizer.json: put it as it is */
    if (!k->first) tok_sink_put(k, " ", 1);
    tok_sink_put(k, s, len);
    return;
  }
  if (!k->first && !glue) a[n++] = ' ';
  memcpy(a + n, s, len), n += len;
  for (int r = 0; t->wp_cleanup && r < 10; r++) { /* each replacement over the whole token, in order */
    size_t fl = strlen(from[r]), tl = strlen(to[r]), m = 0;
    for (size_t i = 0; i < n;)
      if (n - i >= fl && !memcmp(a + i, from[r], fl)) memcpy(a + m, to[r], tl), m += tl, i += fl;
      else a[m++] = a[i++];
    n = m;
  }
  tok_sink_put(k, a, n);
}
#endif

/* ids -> text (NUL-terminated when cap > 0, truncated to whole tokens within
 * cap - 1 bytes); special ids and ids outside the vocabulary are left out.
 * Returns the length it needed. */
FF_TOK_API size_t ff_tok_decode(const ff_tok_tables *t, const int32_t *ids, int n, char *text, size_t cap) {
  tok_sink k = {text, cap, 0, 0, 1, 0};
  for (int i = 0; i < n; i++) {
    int id = ids[i];
    if (id < 0 || id >= t->size || !t->tok[id] || (t->special[id] & 1)) continue;
    switch (t->kind) {
#if FF_TOK_HAS(BYTES)
    case FF_TOK_KIND_BYTES: tok_bytes_piece(t, t->tok[id], t->len[id], &k); break;
#endif
#if FF_TOK_HAS(WORDPIECE)
    case FF_TOK_KIND_WORDPIECE: tok_wordpiece_piece(t, t->tok[id], t->len[id], &k); break;
#endif
#if FF_TOK_SP_PIECE
    case FF_TOK_KIND_LLAMA2C:
    case FF_TOK_KIND_SP:
    case FF_TOK_KIND_UNIGRAM: tok_sp_piece(t, t->tok[id], t->len[id], &k); break;
#endif
    default: tok_sink_put(&k, t->tok[id], t->len[id]); break; /* the JSON vocabulary */
    }
    k.first = 0;
  }
  if (cap) text[k.copied] = 0;
  return k.need;
}
