/* tok_unicode.c - the Unicode the tokenizers need: UTF-8, general
 * categories (from tokenizers/unicode_tables.h, generated), lowercase and
 * accent stripping. */
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

typedef struct {
  uint32_t cp;
  const char *s;
} ff_umap;

#include "unicode_tables.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

uint32_t ff_uc_next(const char *s, size_t len, size_t *n) {
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

size_t ff_uc_put(uint32_t cp, char *o) {
  if (cp < 0x80) return o[0] = (char)cp, 1;
  if (cp < 0x800) return o[0] = (char)(0xC0 | cp >> 6), o[1] = (char)(0x80 | (cp & 0x3F)), 2;
  if (cp < 0x10000)
    return o[0] = (char)(0xE0 | cp >> 12), o[1] = (char)(0x80 | (cp >> 6 & 0x3F)), o[2] = (char)(0x80 | (cp & 0x3F)), 3;
  o[0] = (char)(0xF0 | cp >> 18), o[1] = (char)(0x80 | (cp >> 12 & 0x3F));
  o[2] = (char)(0x80 | (cp >> 6 & 0x3F)), o[3] = (char)(0x80 | (cp & 0x3F));
  return 4;
}

static int in_ranges(const uint32_t (*r)[2], size_t n, uint32_t cp) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (cp < r[mid][0]) hi = mid;
    else if (cp > r[mid][1]) lo = mid + 1;
    else return 1;
  }
  return 0;
}

int ff_uc_letter_p(uint32_t cp) { return in_ranges(uc_letter, COUNT(uc_letter), cp); }
int ff_uc_number_p(uint32_t cp) { return in_ranges(uc_number, COUNT(uc_number), cp); }
int ff_uc_punct_p(uint32_t cp) { return in_ranges(uc_punct, COUNT(uc_punct), cp); }
int ff_uc_other_p(uint32_t cp) { return cp < 0x110000 && in_ranges(uc_other, COUNT(uc_other), cp); }
int ff_uc_mn_p(uint32_t cp) { return in_ranges(uc_mark_nonspacing, COUNT(uc_mark_nonspacing), cp); }

/* Unicode's White_Space property (Rust's char::is_whitespace, regex \s) */
int ff_uc_space_p(uint32_t cp) {
  return (cp >= 9 && cp <= 13) || cp == 32 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

/* BERT's _is_chinese_char: the CJK Unified Ideographs blocks */
int ff_uc_cjk_p(uint32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x20000 && cp <= 0x2A6DF) ||
         (cp >= 0x2A700 && cp <= 0x2B73F) || (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

static const char *in_map(const ff_umap *m, size_t n, uint32_t cp) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (cp < m[mid].cp) hi = mid;
    else if (cp > m[mid].cp) lo = mid + 1;
    else return m[mid].s;
  }
  return NULL;
}

const char *ff_uc_lower(uint32_t cp) { return cp < 0x80 ? NULL : in_map(uc_lower_map, COUNT(uc_lower_map), cp); }

const char *ff_uc_strip(uint32_t cp, char buf[16]) {
  if (cp >= 0xAC00 && cp <= 0xD7A3) { /* Hangul syllable -> L V (T) jamo, by Unicode's formula */
    uint32_t s = cp - 0xAC00, l = 0x1100 + s / 588, v = 0x1161 + s % 588 / 28, tt = s % 28;
    size_t k = ff_uc_put(l, buf);
    k += ff_uc_put(v, buf + k);
    if (tt) k += ff_uc_put(0x11A7 + tt, buf + k);
    buf[k] = 0;
    return buf;
  }
  return cp < 0xC0 ? NULL : in_map(uc_strip_map, COUNT(uc_strip_map), cp);
}

void ff_tok_str_put(tok_str *s, const char *p, size_t n) {
  if (s->oom) return;
  if (s->n + n + 1 > s->cap) {
    size_t cap = (s->cap ? s->cap * 2 : 64) + n;
    char *q = realloc(s->p, cap);
    if (!q) { s->oom = 1; return; }
    s->p = q, s->cap = cap;
  }
  memcpy(s->p + s->n, p, n);
  s->n += n;
  s->p[s->n] = 0;
}
