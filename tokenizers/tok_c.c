/* tok_c.c - a tokenizer's tables (tok_tables.h) written as C: what `fixformer
 * emit --with-main` compiles into the driver after tok_encode.c's text, so
 * the emitted program encodes with the host's code on the host's tables
 * (the same index and merge slots: no table is rebuilt at run time). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

#define PER_LINE 8

/* bytes as a C string literal: octal escapes for anything but plain ASCII
 * (and for '?': no trigraphs) */
static void c_string(FILE *f, const char *s, size_t n) {
  fputc('"', f);
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\' && c != '?') fputc(c, f);
    else fprintf(f, "\\%03o", c);
  }
  fputc('"', f);
}

static void row_end(FILE *f, size_t i, size_t n) { fputs(i + 1 == n ? "\n" : (i + 1) % PER_LINE ? ", " : ",\n  ", f); }

static void ints(FILE *f, const char *type, const char *name, const int32_t *v, size_t n) {
  fprintf(f, "static const %s %s[%zu] = {\n  ", type, name, n);
  for (size_t i = 0; i < n; i++) fprintf(f, "%ld", (long)v[i]), row_end(f, i, n);
  fputs("};\n", f);
}

static void uints(FILE *f, const char *name, const uint32_t *v, size_t n) {
  fprintf(f, "static const uint32_t %s[%zu] = {\n  ", name, n);
  for (size_t i = 0; i < n; i++) fprintf(f, "%luu", (unsigned long)v[i]), row_end(f, i, n);
  fputs("};\n", f);
}

static void tables(FILE *f, const ff_tok_tables *b) {
  size_t n = (size_t)b->size;
  fprintf(f, "static const char *const tok_str[%zu] = {\n  ", n);
  for (size_t i = 0; i < n; i++) {
    if (b->tok[i]) c_string(f, b->tok[i], b->len[i]);
    else fputs("0", f);
    row_end(f, i, n);
  }
  fputs("};\n", f);
  uints(f, "tok_len", b->len, n);
  fprintf(f, "static const unsigned char tok_special[%zu] = {\n  ", n);
  for (size_t i = 0; i < n; i++) fprintf(f, "%d", b->special[i]), row_end(f, i, n);
  fputs("};\n", f);
  ints(f, "int32_t", "tok_index", b->index, b->icap);
  if (b->merges) {
    fprintf(f, "static const ff_tok_merge tok_merges[%zu] = {\n  ", b->mcap);
    for (size_t i = 0; i < b->mcap; i++) {
      const ff_tok_merge *m = &b->merges[i];
      if (m->id < 0) fputs("{0, 0, -1, 0}", f);
      else fprintf(f, "{%ld, %ld, %ld, %luu}", (long)m->a, (long)m->b, (long)m->id, (unsigned long)m->rank);
      row_end(f, i, b->mcap);
    }
    fputs("};\n", f);
  }
  if (b->order) uints(f, "tok_order", b->order, n);
  if (b->n_added) ints(f, "int32_t", "tok_added", b->added, (size_t)b->n_added);
  if (b->byte_fallback) ints(f, "int32_t", "tok_byte_id", b->byte_id, 256);
  if (b->score) {
    fprintf(f, "static const double tok_score[%zu] = {\n  ", n);
    for (size_t i = 0; i < n; i++) fprintf(f, "%.17g", b->score[i]), row_end(f, i, n);
    fputs("};\n", f);
  }
  if (b->charsmap_units) {
    uints(f, "tok_charsmap", b->charsmap, b->charsmap_units);
    /* numbers, not a string literal: C99 compilers need not take literals over 4095 bytes */
    fprintf(f, "static const unsigned char tok_charsmap_text[%zu] = {\n  ", b->charsmap_text_len);
    for (size_t i = 0; i < b->charsmap_text_len; i++)
      fprintf(f, "%d", (unsigned char)b->charsmap_text[i]), row_end(f, i, b->charsmap_text_len);
    fputs("};\n", f);
  }
}

/* one option, when it is not 0 (what the struct's fields are left as) */
static void option(FILE *f, const char *name, long v, int *col) {
  if (!v) return;
  *col += fprintf(f, "%s.%s = %ld,", *col > 80 ? "\n  " : " ", name, v);
  if (*col > 80) *col = 0;
}

/* the struct, by field name: the arrays, then every option encode reads that is set */
static void options(FILE *f, const ff_tok_tables *b) {
  static const char *const kinds[] = {"VOCAB", "LLAMA2C", "BYTES", "SP", "WORDPIECE", "UNIGRAM"};
  int col = 99;
  fprintf(f, "static const ff_tok_tables tok_tables = {\n  .kind = FF_TOK_KIND_%s, .size = %ld,\n", kinds[b->kind],
          (long)b->size);
  fputs("  .tok = tok_str, .len = tok_len, .special = tok_special, .index = tok_index,\n", f);
  fprintf(f, "  .icap = %zu, .max_len = %zu, .unk = %ld,", b->icap, b->max_len, (long)b->unk);
  if (b->merges) fprintf(f, "\n  .merges = tok_merges, .mcap = %zu,", b->mcap);
  if (b->order) fputs("\n  .order = tok_order,", f);
  if (b->n_added) fprintf(f, "\n  .added = tok_added, .n_added = %d,", b->n_added);
  if (b->byte_fallback) fputs("\n  .byte_fallback = 1, .byte_id = tok_byte_id,", f);
  if (b->score) fprintf(f, "\n  .score = tok_score, .unk_score = %.17g,", b->unk_score);
  if (b->charsmap_units)
    fprintf(f, "\n  .charsmap = tok_charsmap, .charsmap_units = %zu, .charsmap_text = (const char *)tok_charsmap_text,"
               "\n  .charsmap_text_len = %zu,", b->charsmap_units, b->charsmap_text_len);
  if (b->charsmap_growth) fprintf(f, " .charsmap_growth = %zu,", b->charsmap_growth);
  const struct { const char *name; long v; } set[] = {
      {"lowercase", b->lowercase}, {"fuse_unk", b->fuse_unk}, {"ignore_merges", b->ignore_merges},
      {"prepend", b->prepend},
      {"replace_space", b->replace_space}, {"meta", b->meta}, {"meta_scheme", b->meta_scheme},
      {"meta_split", b->meta_split}, {"bert_clean", b->bert_clean}, {"bert_chinese", b->bert_chinese},
      {"bert_strip", b->bert_strip}, {"bert_lower", b->bert_lower}, {"wp_cleanup", b->wp_cleanup},
      {"score_f32", b->score_f32}, {"spm", b->spm}, {"spm_dummy", b->spm_dummy}, {"spm_extra_ws", b->spm_extra_ws},
      {"spm_escape", b->spm_escape}};
  for (size_t i = 0; i < sizeof set / sizeof *set; i++) option(f, set[i].name, set[i].v, &col);
  if (b->norm) { /* the normalizer's steps by name, the first in the low 4 bits */
    static const char *const steps[] = {"", "NFC", "NFD", "NFKC", "NFKD", "LOWER", "STRIP", "REPLACE", "SPACES",
                                        "SPACES2", "PREPEND", "PRECOMPILED", "TRIM_LEFT", "TRIM_RIGHT", "TRIM", ""};
    fputs("\n  .norm = ", f);
    for (int norm = b->norm, i = 0; norm; norm >>= 4, i++)
      fprintf(f, i ? " | FF_TOK_NORM_%s << %d" : "FF_TOK_NORM_%s", steps[norm & 15], 4 * i);
    fputc(',', f);
  }
  for (int w = 0; w < 2; w++) { /* the normalizer steps' strings */
    const char *const *v = w ? b->norm_to : b->norm_from;
    int n = FF_TOK_NORM_STEPS;
    while (n > 0 && !v[n - 1]) n--;
    if (n) fprintf(f, "\n  .%s = {", w ? "norm_to" : "norm_from");
    for (int i = 0; i < n; i++) {
      if (v[i]) c_string(f, v[i], strlen(v[i]));
      else fputs("0", f);
      fputs(i + 1 < n ? ", " : "},", f);
    }
  }
  if (b->suffix) fputs("\n  .suffix = ", f), c_string(f, b->suffix, strlen(b->suffix)), fputc(',', f);
  if (b->n_pre) { /* the pre-tokenizers by name: FF_TOK_PRE(kind, behavior, invert, argument) */
    static const char *const kinds[] = {"", "BYTELEVEL", "SPLIT", "DIGITS", "PUNCT"};
    static const char *const hows[] = {"REMOVED", "ISOLATED", "MERGED_PREV", "MERGED_NEXT", "CONTIGUOUS"};
    static const char *const splits[] = {"NONE", "GPT2", "CL100K", "QWEN2", "O200K", "DS_NUM", "DS_CJK", "DS_MAIN",
                                         "TRIPLES", "CLIP"};
    fprintf(f, "\n  .n_pre = %d, .pre = {", b->n_pre);
    for (int i = 0; i < b->n_pre; i++) {
      int st = b->pre[i], kind = st & 15, arg = st >> 8;
      fprintf(f, "%s\n    FF_TOK_PRE(FF_TOK_PRE_%s, FF_TOK_%s, %d, ", i ? "," : "", kinds[kind], hows[st >> 4 & 7],
              st >> 7 & 1);
      if (kind == FF_TOK_PRE_SPLIT) fprintf(f, "FF_TOK_SPLIT_%s)", splits[arg]);
      else if (kind == FF_TOK_PRE_BYTELEVEL)
        fprintf(f, "%s)", arg == 3   ? "FF_TOK_BL_REGEX | FF_TOK_BL_PREFIX"
                          : arg == 2 ? "FF_TOK_BL_PREFIX"
                          : arg      ? "FF_TOK_BL_REGEX"
                                     : "0");
      else fprintf(f, "%d)", arg);
    }
    fputs("},", f);
  }
  if (b->wp_prefix) {
    fputs("\n  .wp_prefix = ", f);
    c_string(f, b->wp_prefix, strlen(b->wp_prefix));
    if (b->wp_max_chars > 0xFFFFFFFFu) fputs(", .wp_max_chars = (size_t)-1, /* no limit a 32-bit size_t holds */", f);
    else fprintf(f, ", .wp_max_chars = %lu,", (unsigned long)b->wp_max_chars);
  }
  fputs("\n};\n", f);
}

int ff_tokenizer_c_tables(const ff_tokenizer *t, char **text, ff_error *err) {
  size_t n = 0;
  FILE *f = open_memstream(text, &n);
  *text = NULL;
  if (!f) return ff_fail(err, FF_ENOMEM, "out of memory for the tokenizer's tables");
  tables(f, &t->tab);
  options(f, &t->tab);
  if (ferror(f) | fclose(f)) {
    free(*text);
    *text = NULL;
    return ff_fail(err, FF_ENOMEM, "out of memory for the tokenizer's tables");
  }
  return 0;
}
