/* tok_internal.h - what the tokenizers' files share: the tokenizer struct,
 * the encoders over its tables (tok_encode.c, which `emit` also pastes into
 * the --with-main driver), the tables' builders (tok_table.c) and the
 * tokenizer.json reader (tok_hf.c).  The arrows run tok_encode.c <-
 * tok_table.c <- vocab.c, tok_hf.c <- tokenizer.c (the interface). */
#ifndef FF_TOK_INTERNAL_H
#define FF_TOK_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "ff_io.h"
#include "tok_tables.h"

#define TOK_MAX_BYTES FF_TOK_MAX_BYTES /* longest token a tokenizer.json may hold */
#define TOK_MAX_IDS (1 << 24)
#define TOK_MAX_FILE (256u << 20)

struct ff_tokenizer {
  ff_tokenizer_info info;
  ff_vocab vocab;    /* FF_TOK_VOCAB */
  ff_tok_tables tab; /* what encode and decode read: the arrays below and the options */
  /* the arrays tab points at, owned */
  char **tok;             /* [size] token bytes, NULL for an id no token has */
  uint32_t *len;          /* [size] */
  float *score;           /* [size], llama2.c */
  uint32_t *order;        /* [size], llama2.c: from score */
  double *piece_score;    /* [size], Unigram */
  uint32_t *charsmap;     /* SentencePiece's normalization rules (tab.charsmap) */
  char *charsmap_text;
  unsigned char *special; /* [size] 1: left out of decode */
  int32_t *index;         /* string -> id + 1, open addressing, tab.icap slots */
  ff_tok_merge *merges;   /* (a, b) -> merge, tab.mcap slots, id -1 empty */
  int32_t byte_id[256];   /* <0xXX> tokens, -1 when absent */
  int32_t *added;         /* added tokens matched in text, longest first */
  char wp_prefix[16];
  char norm_str[FF_TOK_NORM_STEPS][2][64]; /* tab.norm_from / norm_to */
  char suffix[16];                        /* tab.suffix */
  int bert_pre;           /* BertPreTokenizer seen */
};

/* ---- tok_encode.c: the encoders (tok_tables.h has the tables) ----------------- */

uint64_t ff_tok_hash(uint64_t h, const char *s, size_t n);
/* the id whose string (strs/lens) is a then b, of hash h, in index; -1 when none */
int ff_tok_find(const int32_t *index, size_t cap, const char *const *strs, const uint32_t *lens, uint64_t h, const char *a,
                size_t la, const char *b, size_t lb);
/* the slot of merge (a, b): its own, or the empty one where it goes */
size_t ff_tok_merge_slot(const ff_tok_merge *m, size_t cap, int32_t a, int32_t b);
size_t ff_tok_max_text(void);
/* UTF-8 bytes out per byte in of tokenizer.json's normalizer steps (tab.norm), at most */
size_t ff_tok_norm_growth(const ff_tok_tables *t);
size_t ff_tok_work_bytes(const ff_tok_tables *t, size_t len);
int ff_tok_encode(const ff_tok_tables *t, const char *text, size_t len, void *work, size_t work_bytes, int32_t *ids,
                  int cap, ff_tok_why *why);
size_t ff_tok_decode(const ff_tok_tables *t, const int32_t *ids, int n, char *text, size_t cap);

/* ff_tok_encode of a NUL-terminated text with its scratch, failures as
 * messages (tokenizer.c) */
int ff_tok_encode_text(const ff_tok_tables *t, const char *text, int32_t *ids, int cap, int *n, ff_error *err);

/* ---- tok_table.c: building the tables ------------------------------------------- */

/* string -> id, or -1 */
int ff_tok_lookup(const ff_tokenizer *t, const char *s, size_t len);
/* the slots for n strings */
size_t ff_tok_index_cap(size_t n);
/* adds id unless its string is there already (then returns 1) */
int ff_tok_insert(int32_t *index, size_t cap, char *const *strs, const uint32_t *lens, int32_t id);
/* builds the string index over ids 0..size-1 (first id of a string wins);
 * *dup gets a duplicated id or -1 */
int ff_tok_index(ff_tokenizer *t, int *dup, ff_error *err);
/* adds the merge a b -> id with its rank (first one of a pair wins) */
int ff_tok_merges_alloc(ff_tokenizer *t, size_t count, ff_error *err);
void ff_tok_merge_add(ff_tokenizer *t, int32_t a, int32_t b, int32_t id, uint32_t rank);
/* allocates the per-id arrays of size ids */
int ff_tok_alloc(ff_tokenizer *t, int size, ff_error *err);
int ff_tok_byte_ids(ff_tokenizer *t);

/* the tables of a JSON vocabulary (vocab.c): views of its arrays */
ff_tok_tables ff_vocab_tables(const ff_vocab *v);

/* SentencePiece's normalization rules (tok_spm.c): 0, FF_ENOMEM, or 1 with *why */
int ff_tok_charsmap(ff_tokenizer *t, const uint8_t *p, size_t n, const char **why);
/* a SentencePiece model (tok_spm.c) */
int ff_tok_spm_parse(const char *path, const uint8_t *buf, size_t len, int expected, ff_tokenizer *t, ff_error *err);

int ff_tok_hf_parse(const char *path, const char *text, size_t len, int expected_size, ff_tokenizer *t,
                    ff_error *err);

#endif
