/* tok_table.c - building the tables every tokenizer encodes with
 * (tok_tables.h): the string -> id index (FNV-1a, open addressing), the
 * merges of a BPE, the per-id arrays and the <0xXX> byte tokens, with
 * tok_encode.c's hash and probing, so that its lookups find them.  The
 * files that read tokenizers (vocab.c, tok_hf.c, tokenizer.c's llama2.c
 * reader) build on it. */
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

size_t ff_tok_index_cap(size_t n) {
  size_t c = 16;
  while (c < 2 * n) c *= 2;
  return c;
}

int ff_tok_insert(int32_t *index, size_t cap, char *const *strs, const uint32_t *lens, int32_t id) {
  uint64_t h = ff_tok_hash(FF_TOK_HASH0, strs[id], lens[id]);
  if (ff_tok_find(index, cap, (const char *const *)strs, lens, h, strs[id], lens[id], "", 0) >= 0) return 1;
  size_t i = (size_t)h & (cap - 1);
  while (index[i]) i = (i + 1) & (cap - 1);
  index[i] = id + 1;
  return 0;
}

int ff_tok_lookup(const ff_tokenizer *t, const char *s, size_t len) {
  return ff_tok_find(t->tab.index, t->tab.icap, t->tab.tok, t->tab.len, ff_tok_hash(FF_TOK_HASH0, s, len), s, len, "",
                     0);
}

int ff_tok_index(ff_tokenizer *t, int *dup, ff_error *err) {
  *dup = -1;
  t->tab.icap = ff_tok_index_cap((size_t)t->info.size);
  if (!(t->index = calloc(t->tab.icap, sizeof *t->index))) return ff_fail(err, FF_ENOMEM, "out of memory");
  t->tab.index = t->index;
  for (int id = 0; id < t->info.size; id++) {
    if (!t->tok[id] || !t->len[id]) continue; /* an empty token is never looked up */
    if (ff_tok_insert(t->index, t->tab.icap, t->tok, t->len, id) && *dup < 0) *dup = id;
    if (t->len[id] > t->tab.max_len) t->tab.max_len = t->len[id];
  }
  return 0;
}

int ff_tok_merges_alloc(ff_tokenizer *t, size_t count, ff_error *err) {
  t->tab.mcap = ff_tok_index_cap(count);
  if (!(t->merges = malloc(t->tab.mcap * sizeof *t->merges))) return ff_fail(err, FF_ENOMEM, "out of memory");
  for (size_t i = 0; i < t->tab.mcap; i++) t->merges[i] = (ff_tok_merge){0, 0, -1, 0};
  t->tab.merges = t->merges;
  return 0;
}

void ff_tok_merge_add(ff_tokenizer *t, int32_t a, int32_t b, int32_t id, uint32_t rank) {
  ff_tok_merge *m = &t->merges[ff_tok_merge_slot(t->merges, t->tab.mcap, a, b)];
  if (m->id < 0) *m = (ff_tok_merge){a, b, id, rank};
}

int ff_tok_alloc(ff_tokenizer *t, int size, ff_error *err) {
  t->info.size = t->tab.size = size;
  t->tok = calloc((size_t)size, sizeof *t->tok);
  t->len = calloc((size_t)size, sizeof *t->len);
  t->score = calloc((size_t)size, sizeof *t->score);
  t->special = calloc((size_t)size, 1);
  if (!t->tok || !t->len || !t->score || !t->special) return ff_fail(err, FF_ENOMEM, "out of memory");
  t->tab.tok = (const char *const *)t->tok, t->tab.len = t->len, t->tab.special = t->special;
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
  t->tab.byte_id = t->byte_id;
  return found;
}
