/* tok_internal.h - what the tokenizers' files share: the tokenizer struct,
 * its tables (tok_table.c), the Unicode helpers (tok_unicode.c) and the
 * tokenizer.json reader (tok_hf.c).  The arrows run tok_table.c,
 * tok_unicode.c <- vocab.c, tok_hf.c <- tokenizer.c (the interface). */
#ifndef FF_TOK_INTERNAL_H
#define FF_TOK_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "ff_io.h"

#define TOK_MAX_BYTES 1024      /* longest token a tokenizer.json may hold */
#define TOK_MAX_IDS (1 << 24)
#define TOK_MAX_FILE (256u << 20)

typedef struct {
  int32_t a, b, id; /* a b -> id */
  uint32_t rank;
} tok_merge;

enum { META_NEVER, META_FIRST, META_ALWAYS };

struct ff_tokenizer {
  ff_tokenizer_info info;
  ff_vocab vocab;         /* FF_TOK_VOCAB */
  char **tok;             /* [size] token bytes, NULL for an id no token has */
  uint32_t *len;          /* [size] */
  float *score;           /* [size], llama2.c */
  unsigned char *special; /* [size] 1: left out of decode */
  int32_t *index;         /* string -> id + 1, open addressing, icap slots */
  size_t icap;
  size_t max_len;         /* the longest token: no longer string is looked up */
  tok_merge *merges;      /* (a, b) -> merge, mcap slots, id -1 empty */
  size_t mcap;
  int32_t byte_id[256];   /* <0xXX> tokens, -1 when absent */
  int32_t *added;         /* added tokens matched in text, longest first */
  int n_added;
  /* Hugging Face options */
  int byte_fallback, fuse_unk, ignore_merges, add_prefix_space, use_regex;
  int prepend, replace_space;     /* normalizers Prepend("\u2581"), Replace(" ", "\u2581") */
  int meta, meta_scheme, meta_split; /* Metaspace pre-tokenizer */
  int bert_clean, bert_chinese, bert_strip, bert_lower, bert_pre;
  char wp_prefix[16];
  int wp_cleanup; /* the WordPiece decoder's cleanup: " ." -> "." ... within each token */
  size_t wp_max_chars; /* max_input_chars_per_word: a longer word is unk */
};

/* string -> id, or -1 */
int ff_tok_lookup(const ff_tokenizer *t, const char *s, size_t len);
/* the id of the string a then b whose hash is h (ff_tok_hash over both), or -1 */
int ff_tok_lookup2(const ff_tokenizer *t, uint64_t h, const char *a, size_t la, const char *b, size_t lb);

/* An open-addressing index of strings (slots hold id + 1, 0 empty; cap a
 * power of two), shared by the tokenizers and the JSON vocabulary.  FNV-1a
 * continues from a hash, so the candidates a, a b, a b c ... of a longest
 * match cost one byte each, not one string each. */
#define TOK_HASH0 1469598103934665603ull
uint64_t ff_tok_hash(uint64_t h, const char *s, size_t n);
/* the slots for n strings */
size_t ff_tok_index_cap(size_t n);
/* the id whose string (strs/lens) is a then b, of hash h; -1 when none */
int ff_tok_find(const int32_t *index, size_t cap, char *const *strs, const uint32_t *lens, uint64_t h, const char *a,
                size_t la, const char *b, size_t lb);
/* adds id unless its string is there already (then returns 1) */
int ff_tok_insert(int32_t *index, size_t cap, char *const *strs, const uint32_t *lens, int32_t id);
/* builds the string index over ids 0..size-1 (first id of a string wins);
 * *dup gets a duplicated id or -1 */
int ff_tok_index(ff_tokenizer *t, int *dup, ff_error *err);
/* adds the merge a b -> id with its rank (first one of a pair wins) */
int ff_tok_merges_alloc(ff_tokenizer *t, size_t count, ff_error *err);
void ff_tok_merge_add(ff_tokenizer *t, int32_t a, int32_t b, int32_t id, uint32_t rank);
/* the merge a b, or NULL */
const tok_merge *ff_tok_merge_of(const ff_tokenizer *t, int32_t a, int32_t b);
/* allocates the per-id arrays of size ids */
int ff_tok_alloc(ff_tokenizer *t, int size, ff_error *err);
int ff_tok_byte_ids(ff_tokenizer *t);

int ff_tok_hf_parse(const char *path, const char *text, size_t len, int expected_size, ff_tokenizer *t,
                 ff_error *err);

/* ---- Unicode --------------------------------------------------------------- */
/* the code point at s (len bytes left) and its length in *n; a byte that is
 * not valid UTF-8 is one character of its own, code point 0xFFFD + byte */
uint32_t ff_uc_next(const char *s, size_t len, size_t *n);
size_t ff_uc_put(uint32_t cp, char *out);
int ff_uc_letter_p(uint32_t cp);
int ff_uc_number_p(uint32_t cp);
int ff_uc_punct_p(uint32_t cp);
int ff_uc_other_p(uint32_t cp);
int ff_uc_mn_p(uint32_t cp);
int ff_uc_space_p(uint32_t cp);
int ff_uc_cjk_p(uint32_t cp);
/* lowercase / accent-stripped (NFD without Mn) form, or NULL when itself */
const char *ff_uc_lower(uint32_t cp);
const char *ff_uc_strip(uint32_t cp, char buf[16]);

/* a growing string */
typedef struct {
  char *p;
  size_t n, cap;
  int oom;
} tok_str;
void ff_tok_str_put(tok_str *s, const char *p, size_t n);

#endif
