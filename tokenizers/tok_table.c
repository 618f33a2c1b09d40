/* tok_table.c - the tables every tokenizer is built on: the string -> id
 * index (FNV-1a, open addressing), the merges of a BPE, the per-id arrays
 * and the <0xXX> byte tokens.  The files that read tokenizers (vocab.c,
 * tok_hf.c, tokenizer.c's llama2.c reader) build on it; it uses none of them. */
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

/* ---- lookups --------------------------------------------------------------- */

uint64_t ff_tok_hash(uint64_t h, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull; /* FNV-1a */
  return h;
}

size_t ff_tok_index_cap(size_t n) {
  size_t c = 16;
  while (c < 2 * n) c *= 2;
  return c;
}

int ff_tok_find(const int32_t *index, size_t cap, char *const *strs, const uint32_t *lens, uint64_t h, const char *a,
                size_t la, const char *b, size_t lb) {
  if (!cap) return -1;
  for (size_t i = h & (cap - 1);; i = (i + 1) & (cap - 1)) {
    int32_t e = index[i] - 1;
    if (e < 0) return -1;
    if (lens[e] == la + lb && !memcmp(strs[e], a, la) && !memcmp(strs[e] + la, b, lb)) return e;
  }
}

int ff_tok_insert(int32_t *index, size_t cap, char *const *strs, const uint32_t *lens, int32_t id) {
  uint64_t h = ff_tok_hash(TOK_HASH0, strs[id], lens[id]);
  if (ff_tok_find(index, cap, strs, lens, h, strs[id], lens[id], "", 0) >= 0) return 1;
  size_t i = h & (cap - 1);
  while (index[i]) i = (i + 1) & (cap - 1);
  index[i] = id + 1;
  return 0;
}

/* the id of the string a b, or -1 */
int ff_tok_lookup2(const ff_tokenizer *t, uint64_t h, const char *a, size_t la, const char *b, size_t lb) {
  return ff_tok_find(t->index, t->icap, t->tok, t->len, h, a, la, b, lb);
}

int ff_tok_lookup(const ff_tokenizer *t, const char *s, size_t len) {
  return ff_tok_lookup2(t, ff_tok_hash(TOK_HASH0, s, len), s, len, "", 0);
}

int ff_tok_index(ff_tokenizer *t, int *dup, ff_error *err) {
  *dup = -1;
  t->icap = ff_tok_index_cap((size_t)t->info.size);
  if (!(t->index = calloc(t->icap, sizeof *t->index))) return ff_fail(err, FF_ENOMEM, "out of memory");
  for (int id = 0; id < t->info.size; id++) {
    if (!t->tok[id]) continue;
    if (ff_tok_insert(t->index, t->icap, t->tok, t->len, id) && *dup < 0) *dup = id;
    if (t->len[id] > t->max_len) t->max_len = t->len[id];
  }
  return 0;
}

static size_t pair_slot(const ff_tokenizer *t, int32_t a, int32_t b) {
  uint64_t k = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) * 0x9E3779B97F4A7C15ull;
  size_t i = (size_t)(k >> 20) & (t->mcap - 1);
  while (t->merges[i].id >= 0 && (t->merges[i].a != a || t->merges[i].b != b)) i = (i + 1) & (t->mcap - 1);
  return i;
}

int ff_tok_merges_alloc(ff_tokenizer *t, size_t count, ff_error *err) {
  t->mcap = ff_tok_index_cap(count);
  if (!(t->merges = malloc(t->mcap * sizeof *t->merges))) return ff_fail(err, FF_ENOMEM, "out of memory");
  for (size_t i = 0; i < t->mcap; i++) t->merges[i].id = -1;
  return 0;
}

void ff_tok_merge_add(ff_tokenizer *t, int32_t a, int32_t b, int32_t id, uint32_t rank) {
  tok_merge *m = &t->merges[pair_slot(t, a, b)];
  if (m->id < 0) *m = (tok_merge){a, b, id, rank};
}

const tok_merge *ff_tok_merge_of(const ff_tokenizer *t, int32_t a, int32_t b) {
  if (!t->mcap) return NULL;
  const tok_merge *m = &t->merges[pair_slot(t, a, b)];
  return m->id >= 0 ? m : NULL;
}

int ff_tok_alloc(ff_tokenizer *t, int size, ff_error *err) {
  t->info.size = size;
  t->tok = calloc((size_t)size, sizeof *t->tok);
  t->len = calloc((size_t)size, sizeof *t->len);
  t->score = calloc((size_t)size, sizeof *t->score);
  t->special = calloc((size_t)size, 1);
  if (!t->tok || !t->len || !t->score || !t->special) return ff_fail(err, FF_ENOMEM, "out of memory");
  return 0;
}

/* the <0xXX> tokens; returns how many there are */
int ff_tok_byte_ids(ff_tokenizer *t) {
  int found = 0;
  for (int b = 0; b < 256; b++) {
    char s[8];
    static const char hex[] = "0123456789ABCDEF";
    memcpy(s, "<0x", 3), s[3] = hex[b >> 4], s[4] = hex[b & 15], s[5] = '>';
    t->byte_id[b] = ff_tok_lookup(t, s, 6);
    found += t->byte_id[b] >= 0;
  }
  return found;
}
