/* tok_tables.h - the tables a tokenizer encodes and decodes with
 * (tok_encode.c): flat, read-only arrays that the host builds from a
 * tokenizer file and `fixformer emit --with-main` writes as C arrays, so
 * the emitted program tokenizes with the host's code on the host's tables.
 * Types and constants only: `emit` pastes this text into NAME_main.c. */
#ifndef FF_TOK_TABLES_H
#define FF_TOK_TABLES_H

#include <stddef.h>
#include <stdint.h>

#ifndef FF_TOK_API
#define FF_TOK_API /* extern in the host; the emitted driver makes it static */
#endif

/* the kinds, numbered as enum ff_tokenizer_kind (ff_io.h) */
#define FF_TOK_KIND_VOCAB 0     /* fixformer's JSON vocabulary: longest match */
#define FF_TOK_KIND_LLAMA2C 1   /* llama2.c's tokenizer.bin: run.c's encode */
#define FF_TOK_KIND_BYTES 2     /* tokenizer.json, byte-level BPE (GPT-2) */
#define FF_TOK_KIND_SP 3        /* tokenizer.json, SentencePiece-style BPE (LLaMA) */
#define FF_TOK_KIND_WORDPIECE 4 /* tokenizer.json, WordPiece (BERT) */
#define FF_TOK_KIND_UNIGRAM 5   /* SentencePiece's .model, tokenizer.json's Unigram (T5, Marian) */

/* FF_TOK_KINDS: a bit (1 << kind) for each kind compiled in; the host has
 * them all, an emitted driver the one of its model */
#ifndef FF_TOK_KINDS
#define FF_TOK_KINDS 63
#endif
#define FF_TOK_HAS(kind) ((FF_TOK_KINDS >> FF_TOK_KIND_##kind) & 1)

#define FF_TOK_HASH0 1469598103934665603ull /* FNV-1a's offset basis */
#define FF_TOK_NEVER 0xFFFFFFFFu            /* llama2.c: a token no pair merges into */
#define FF_TOK_MAX_BYTES 1024               /* the longest token of a tokenizer.json */

enum { FF_TOK_META_NEVER, FF_TOK_META_FIRST, FF_TOK_META_ALWAYS }; /* Metaspace's prepend_scheme */

/* A byte-level BPE's pre-tokenizers (tokenizer.json's pre_tokenizer, a
 * Sequence of them or one), in order: each splits every piece the one before
 * made; ByteLevel (exactly one) maps a piece's bytes to characters, and the
 * steps after it see those.  A step is FF_TOK_PRE_* | behavior << 4 |
 * invert << 7 | argument << 8: Split's pattern (FF_TOK_SPLIT_*), Digits'
 * individual_digits, ByteLevel's FF_TOK_BL_* bits. */
enum { FF_TOK_PRE_BYTELEVEL = 1, FF_TOK_PRE_SPLIT, FF_TOK_PRE_DIGITS, FF_TOK_PRE_PUNCT };
/* how a split treats its matches, as Hugging Face's SplitDelimiterBehavior */
enum { FF_TOK_REMOVED, FF_TOK_ISOLATED, FF_TOK_MERGED_PREV, FF_TOK_MERGED_NEXT, FF_TOK_CONTIGUOUS };
enum { FF_TOK_BL_REGEX = 1, FF_TOK_BL_PREFIX = 2 }; /* ByteLevel's use_regex, add_prefix_space */
#define FF_TOK_PRE(kind, behavior, invert, arg) ((kind) | (behavior) << 4 | (invert) << 7 | (arg) << 8)
#define FF_TOK_PRE_STEPS 6
/* the Split patterns, recognised by their text (tok_hf.c has them) */
enum { FF_TOK_SPLIT_NONE, FF_TOK_SPLIT_GPT2, FF_TOK_SPLIT_CL100K, FF_TOK_SPLIT_QWEN2, FF_TOK_SPLIT_O200K,
       FF_TOK_SPLIT_DS_NUM, FF_TOK_SPLIT_DS_CJK, FF_TOK_SPLIT_DS_MAIN, FF_TOK_SPLIT_TRIPLES, FF_TOK_SPLIT_CLIP };

/* tokenizer.json's normalizers, the steps of ff_tok_tables' norm: the
 * Unicode ones, Replace (a string, or the regular expressions \s+ and
 * " {2,}"), Prepend (their strings in norm_from / norm_to), Strip (of
 * whitespace: left, right or both) and Precompiled (SentencePiece's rules,
 * tables' charsmap, in Hugging Face's grapheme clusters) */
enum { FF_TOK_NORM_NFC = 1, FF_TOK_NORM_NFD, FF_TOK_NORM_NFKC, FF_TOK_NORM_NFKD, FF_TOK_NORM_LOWER, FF_TOK_NORM_STRIP,
       FF_TOK_NORM_REPLACE, FF_TOK_NORM_SPACES, FF_TOK_NORM_SPACES2, FF_TOK_NORM_PREPEND, FF_TOK_NORM_PRECOMPILED,
       FF_TOK_NORM_TRIM_LEFT, FF_TOK_NORM_TRIM_RIGHT, FF_TOK_NORM_TRIM };
#define FF_TOK_NORM_STEPS 6 /* at most, 4 bits each */

typedef struct {
  int32_t a, b, id; /* a b -> id; id -1: an empty slot */
  uint32_t rank;    /* merges apply lowest rank first */
} ff_tok_merge;

typedef struct {
  uint32_t cp;
  const char *s;
} ff_umap; /* a code point's lowercase form or full decomposition (unicode_tables.h) */

typedef struct ff_tok_tables {
  int kind;                     /* FF_TOK_KIND_* */
  int32_t size;                 /* ids are 0..size-1 */
  const char *const *tok;       /* [size] a token's bytes (no NUL), NULL for an id no token has */
  const uint32_t *len;          /* [size] their lengths */
  const unsigned char *special; /* [size] bit 1: left out of decode; bit 2: no piece of Unigram's
                                   lattice (SentencePiece's control, byte, unknown and unused pieces);
                                   bits 4, 8: an added token that takes the whitespace before it (lstrip)
                                   or after it (rstrip) */
  const int32_t *index;         /* [icap] string -> id + 1 (0: empty): FNV-1a, linear probing */
  size_t icap, max_len;         /* icap a power of two; max_len the longest token encode looks up */
  const ff_tok_merge *merges;   /* [mcap] BPE of tokenizer.json: (a, b) by ff_tok_merge_slot */
  size_t mcap;
  const uint32_t *order;        /* llama2.c: [size] the order a token merges in (its score, best
                                   first), FF_TOK_NEVER when it never does (score <= -1e10) */
  const int32_t *added;         /* [n_added] added tokens split the text, longest first */
  int n_added;
  const int32_t *byte_id;       /* [256] the <0xXX> tokens (-1: absent), for byte_fallback */
  const double *score;          /* Unigram: [size] a piece's log probability */
  double unk_score;             /* Unigram: an unknown character's (the lowest score - 10) */
  int score_f32;                /* Unigram: paths summed in float (SentencePiece), else double (Hugging Face) */
  const uint32_t *charsmap;     /* [charsmap_units] SentencePiece's normalization rules: a darts-clone
                                   double array from the rule's bytes to an offset in charsmap_text */
  size_t charsmap_units, charsmap_text_len, charsmap_growth; /* growth: normalized bytes per input byte, at most */
  const char *charsmap_text;    /* the replacements, each ending in NUL */
  int spm, spm_dummy, spm_extra_ws, spm_escape; /* SentencePiece's normalizer and its options */
  int32_t unk;                  /* -1: none */
  int lowercase;                /* JSON vocabulary: ASCII lowercase first */
  /* tokenizer.json's options, as tok_hf.c reads them */
  int byte_fallback, fuse_unk, ignore_merges;
  int pre[FF_TOK_PRE_STEPS], n_pre;     /* byte-level BPE: the pre-tokenizers, FF_TOK_PRE(...) each */
  const char *suffix;                   /* BPE's end_of_word_suffix (CLIP's "</w>"), or NULL */
  int norm;                             /* FF_TOK_NORM_* steps in order, the first in the low 4 bits */
  const char *norm_from[FF_TOK_NORM_STEPS]; /* step i's Replace pattern (a string) */
  const char *norm_to[FF_TOK_NORM_STEPS];   /* step i's Replace content, Prepend text */
  int prepend, replace_space;           /* normalizers Prepend("\u2581"), Replace(" ", "\u2581") */
  int meta, meta_scheme, meta_split;    /* the Metaspace pre-tokenizer */
  int bert_clean, bert_chinese, bert_strip, bert_lower;
  const char *wp_prefix;                /* WordPiece's continuing_subword_prefix ("##") */
  int wp_cleanup;                       /* its decoder's cleanup */
  size_t wp_max_chars;                  /* max_input_chars_per_word: a longer word is unk */
} ff_tok_tables;

/* why encode failed, for its message */
typedef struct {
  const char *piece; /* FF_TOK_EUNKNOWN: the piece no token matches (in the text, or its normalized copy) */
  size_t len, at;    /* its bytes; its offset in the text (the JSON vocabulary) */
  int byte;          /* FF_TOK_EBYTE: the byte */
} ff_tok_why;

#define FF_TOK_EFULL (-1)    /* more ids than fit */
#define FF_TOK_EUNKNOWN (-2) /* a piece no token matches, and no unknown token */
#define FF_TOK_EBYTE (-3)    /* llama2.c: a byte whose token (byte + 3) is past the vocabulary */
#define FF_TOK_ELONG (-4)    /* a text longer than ff_tok_max_text() */
#define FF_TOK_EWORK (-5)    /* less scratch than ff_tok_work_bytes() */

#endif
