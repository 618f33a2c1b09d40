/* tok_hf.c - reads a Hugging Face tokenizer.json (cJSON): a BPE model
 * (byte-level like GPT-2, or SentencePiece-style like LLaMA) or WordPiece
 * (BERT), its added tokens, normalizer, pre-tokenizer and post-processor.
 * What it cannot follow exactly is refused with one line naming it. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "ff_json.h"
#include "tok_internal.h"

#define GET cJSON_GetObjectItemCaseSensitive
#define SP "\xe2\x96\x81"

typedef struct {
  const char *path;
  ff_tokenizer *t;
  ff_error *err;
} hf_ctx;

static const char *type_of(const cJSON *j) {
  const cJSON *ty = cJSON_IsObject(j) ? GET(j, "type") : NULL;
  return cJSON_IsString(ty) ? ty->valuestring : "";
}

static int flag(const cJSON *o, const char *key, int dflt) {
  const cJSON *j = GET(o, key);
  return cJSON_IsBool(j) ? cJSON_IsTrue(j) : dflt;
}

/* the token id j holds, or a negative status (the id is the result, not
 * an output left unset on failure) */
static int id_of(hf_ctx *c, const cJSON *j, const char *what) {
  double d = cJSON_IsNumber(j) ? j->valuedouble : -1;
  if (!(d >= 0 && d < TOK_MAX_IDS) || d != (double)(int)d)
    return ff_fail(c->err, FF_EFORMAT, "%s: %s must be a token id in [0, %d)", c->path, what, TOK_MAX_IDS);
  return (int)d;
}

/* a token of model.vocab may be empty (Whisper's: never matched, decoded
 * as nothing); an added token may not */
static int check_token(hf_ctx *c, const char *s, const char *what) {
  size_t n = strlen(s);
  if (!n && strcmp(what, "model.vocab")) return ff_fail(c->err, FF_EFORMAT, "%s: %s: an empty token", c->path, what);
  if (n > TOK_MAX_BYTES)
    return ff_fail(c->err, FF_EFORMAT, "%s: %s: a token of %zu bytes, above %d", c->path, what, n, TOK_MAX_BYTES);
  return 0;
}

/* Unigram's [piece, score] */
static int unigram_entry(hf_ctx *c, const cJSON *e, int i) {
  const cJSON *s = cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 ? e->child : NULL;
  if (!s || !cJSON_IsString(s) || !cJSON_IsNumber(s->next) || !isfinite(s->next->valuedouble))
    return ff_fail(c->err, FF_EFORMAT, "%s: model.vocab[%d] is not [piece, finite score]", c->path, i);
  return check_token(c, s->valuestring, "model.vocab");
}

/* the largest id of model.vocab (an object of ids, Unigram's array of
 * pieces) and added_tokens, every entry checked */
static int max_id(hf_ctx *c, const cJSON *vocab, const cJSON *added, int *top) {
  int rc = 0, id = -1, i = 0;
  *top = -1;
  if (cJSON_IsArray(vocab) && c->t->info.kind == FF_TOK_UNIGRAM) {
    for (const cJSON *e = vocab->child; e && !rc; e = e->next, i++)
      if (i >= TOK_MAX_IDS) rc = ff_fail(c->err, FF_EFORMAT, "%s: more than %d pieces", c->path, TOK_MAX_IDS);
      else if (!(rc = unigram_entry(c, e, i))) *top = i;
    vocab = NULL;
  } else if (!cJSON_IsObject(vocab)) return ff_fail(c->err, FF_EFORMAT, "%s: model.vocab is not an object", c->path);
  for (const cJSON *e = vocab ? vocab->child : NULL; e && !rc; e = e->next) {
    id = (rc = check_token(c, e->string, "model.vocab")) ? rc : id_of(c, e, "model.vocab's values");
    if (id < 0) rc = id;
    else *top = id > *top ? id : *top;
  }
  if (added && !cJSON_IsArray(added)) return ff_fail(c->err, FF_EFORMAT, "%s: added_tokens is not an array", c->path);
  for (const cJSON *e = added ? added->child : NULL; e && !rc; e = e->next) {
    const cJSON *s = GET(e, "content");
    if (!cJSON_IsString(s)) return ff_fail(c->err, FF_EFORMAT, "%s: added_tokens: an entry without content", c->path);
    id = (rc = check_token(c, s->valuestring, "added_tokens")) ? rc : id_of(c, GET(e, "id"), "added_tokens' id");
    if (id < 0) rc = id;
    else *top = id > *top ? id : *top;
  }
  if (!rc && *top < 0) rc = ff_fail(c->err, FF_EFORMAT, "%s: model.vocab is empty", c->path);
  return rc;
}

static int set_token(hf_ctx *c, int id, const char *s, const char *what) {
  ff_tokenizer *t = c->t;
  if (t->tok[id]) {
    if (!strcmp(t->tok[id], s)) return 0;
    return ff_fail(c->err, FF_EFORMAT, "%s: %s: id %d is both '%.40s' and '%.40s'", c->path, what, id, t->tok[id], s);
  }
  size_t n = strlen(s);
  if (!(t->tok[id] = malloc(n + 1))) return ff_fail(c->err, FF_ENOMEM, "out of memory");
  memcpy(t->tok[id], s, n + 1);
  t->len[id] = (uint32_t)n;
  return 0;
}

typedef struct {
  uint32_t len;
  int32_t id;
} by_len;

static int longer_first(const void *a, const void *b) {
  const by_len *x = a, *y = b;
  return x->len != y->len ? (x->len < y->len ? 1 : -1) : (x->id > y->id) - (x->id < y->id);
}

/* added tokens are matched in text, longest first */
static int hf_added(hf_ctx *c, const cJSON *added) {
  int rc = 0, n = 0;
  int count = cJSON_GetArraySize(added);
  by_len *order = calloc((size_t)count + 1, sizeof *order);
  if (!order) return ff_fail(c->err, FF_ENOMEM, "out of memory");
  for (const cJSON *e = added ? added->child : NULL; e && !rc; e = e->next) {
    int id = (int)GET(e, "id")->valuedouble;
    rc = set_token(c, id, GET(e, "content")->valuestring, "added_tokens");
    /* bits: 1 special, 4 lstrip, 8 rstrip (the whitespace beside the token goes with it) */
    c->t->special[id] |= (unsigned char)(flag(e, "special", 0) | flag(e, "lstrip", 0) << 2 | flag(e, "rstrip", 0) << 3);
    order[n++] = (by_len){c->t->len[id], id};
  }
  qsort(order, (size_t)n, sizeof *order, longer_first);
  if (!rc && !(c->t->added = malloc(sizeof *c->t->added * ((size_t)n + 1)))) rc = ff_fail(c->err, FF_ENOMEM, "out of memory");
  for (int i = 0; !rc && i < n; i++) c->t->added[i] = order[i].id;
  c->t->tab.added = c->t->added;
  c->t->tab.n_added = rc ? 0 : n;
  free(order);
  int dup;
  return rc ? rc : ff_tok_index(c->t, &dup, c->err);
}

/* Unigram's pieces by index, their scores and the lowest of them */
static int hf_unigram_tokens(hf_ctx *c, const cJSON *vocab, const cJSON *added) {
  ff_tokenizer *t = c->t;
  int rc = 0, i = 0;
  double lowest = INFINITY;
  if (!(t->piece_score = calloc((size_t)t->info.size + 1, sizeof *t->piece_score)))
    return ff_fail(c->err, FF_ENOMEM, "out of memory");
  for (const cJSON *e = vocab->child; e && !rc; e = e->next, i++) {
    rc = set_token(c, i, e->child->valuestring, "model.vocab");
    t->piece_score[i] = e->child->next->valuedouble;
    lowest = t->piece_score[i] < lowest ? t->piece_score[i] : lowest;
  }
  t->tab.score = t->piece_score, t->tab.unk_score = lowest - 10.0; /* Hugging Face's K_UNK_PENALTY */
  return rc ? rc : hf_added(c, added);
}

/* the tokens by id, then the added tokens */
static int hf_tokens(hf_ctx *c, const cJSON *vocab, const cJSON *added, int expected) {
  int top, rc = 0;
  if ((rc = max_id(c, vocab, added, &top))) return rc;
  if (expected > 0 && top >= expected)
    return ff_fail(c->err, FF_ESHAPE, "%s: token id %d, but the model's vocab is %d", c->path, top, expected);
  if ((rc = ff_tok_alloc(c->t, top + 1, c->err))) return rc;
  if (cJSON_IsArray(vocab)) return hf_unigram_tokens(c, vocab, added);
  for (const cJSON *e = vocab->child; e && !rc; e = e->next) rc = set_token(c, (int)e->valuedouble, e->string, "model.vocab");
  return rc ? rc : hf_added(c, added);
}

/* "a b" or ["a", "b"] */
static int merge_parts(hf_ctx *c, const cJSON *m, int i, char *a, char *b) {
  const char *s = cJSON_IsString(m) ? m->valuestring : NULL, *sp = s ? strchr(s, ' ') : NULL;
  if (sp && !strchr(sp + 1, ' ') && sp > s && sp[1] && strlen(s) < 2 * TOK_MAX_BYTES) {
    memcpy(a, s, (size_t)(sp - s)), a[sp - s] = 0, strcpy(b, sp + 1);
    return 0;
  }
  const cJSON *x = cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 ? m->child : NULL;
  if (x && cJSON_IsString(x) && cJSON_IsString(x->next) && strlen(x->valuestring) <= TOK_MAX_BYTES &&
      strlen(x->next->valuestring) <= TOK_MAX_BYTES) {
    strcpy(a, x->valuestring), strcpy(b, x->next->valuestring);
    return 0;
  }
  return ff_fail(c->err, FF_EFORMAT, "%s: model.merges[%d] is not two tokens (\"a b\" or [\"a\", \"b\"])", c->path, i);
}

static int hf_merges(hf_ctx *c, const cJSON *merges) {
  int n = cJSON_IsArray(merges) ? cJSON_GetArraySize(merges) : -1, i = 0, rc;
  if (n < 0) return ff_fail(c->err, FF_EFORMAT, "%s: model.merges is not an array", c->path);
  if ((rc = ff_tok_merges_alloc(c->t, (size_t)n, c->err))) return rc;
  char *a = malloc(4 * TOK_MAX_BYTES + 4), *b = a + 2 * TOK_MAX_BYTES + 2;
  if (!a) return ff_fail(c->err, FF_ENOMEM, "out of memory");
  for (const cJSON *m = merges->child; m && !rc; m = m->next, i++) {
    if ((rc = merge_parts(c, m, i, a, b))) break;
    int ia = ff_tok_lookup(c->t, a, strlen(a)), ib = ff_tok_lookup(c->t, b, strlen(b));
    size_t la = strlen(a);
    memmove(a + la, b, strlen(b) + 1);
    int ab = ff_tok_lookup(c->t, a, strlen(a));
    a[la] = 0;
    if (ia < 0 || ib < 0)
      rc = ff_fail(c->err, FF_EFORMAT, "%s: model.merges[%d]: '%.60s' is not in the vocabulary", c->path, i,
                   ia < 0 ? a : b);
    else if (ab < 0)
      rc = ff_fail(c->err, FF_EFORMAT, "%s: model.merges[%d]: '%.60s' + '%.60s' is not in the vocabulary", c->path,
                   i, a, b);
    else ff_tok_merge_add(c->t, ia, ib, ab, (uint32_t)i);
  }
  free(a);
  return rc;
}

static int unsupported(hf_ctx *c, const char *what, const char *type) {
  return ff_fail(c->err, FF_EFORMAT, "%s: %s '%.60s' is not supported", c->path, what, type);
}

static int str_is(const cJSON *o, const char *key, const char *want) {
  const cJSON *j = GET(o, key);
  return cJSON_IsString(j) && !strcmp(j->valuestring, want);
}

/* a Unicode normalizer (NFC, NFD, NFKC, NFKD, Lowercase, StripAccents): its
 * FF_TOK_NORM_* step, or 0 */
static int norm_step(const char *ty) {
  static const char *const names[] = {"NFC", "NFD", "NFKC", "NFKD", "Lowercase", "StripAccents"};
  for (int i = 0; i < 6; i++)
    if (!strcmp(ty, names[i])) return FF_TOK_NORM_NFC + i;
  return 0;
}

/* a normalizer's string (Replace's pattern or content, Prepend's text) kept
 * for step i of the tables' norm */
static const char *norm_string(hf_ctx *c, const cJSON *j, int i, int which, const char *what) {
  char *to = c->t->norm_str[i][which];
  if (!cJSON_IsString(j) || strlen(j->valuestring) >= sizeof c->t->norm_str[i][which] ||
      (!which && !j->valuestring[0])) {
    ff_fail(c->err, FF_EFORMAT, "%s: normalizer %s must be a string of 1 to %zu bytes", c->path, what,
            sizeof c->t->norm_str[i][which] - 1);
    return NULL;
  }
  return strcpy(to, j->valuestring);
}

/* Replace of a string, or of the regular expressions \s+ (CLIP's) and
 * " {2,}" (converted SentencePiece models'), and Prepend: *step and the
 * strings of step i of the tables' norm */
static int text_step(hf_ctx *c, const cJSON *n, const char *ty, int i, int *step) {
  ff_tok_tables *tab = &c->t->tab;
  const cJSON *pat = GET(n, "pattern"), *re = cJSON_IsObject(pat) ? GET(pat, "Regex") : NULL;
  *step = FF_TOK_NORM_PREPEND;
  if (!strcmp(ty, "Prepend"))
    return (tab->norm_to[i] = norm_string(c, GET(n, "prepend"), i, 1, "Prepend's prepend")) ? 0 : FF_EFORMAT;
  if (cJSON_IsString(re) && strcmp(re->valuestring, "\\s+") && strcmp(re->valuestring, " {2,}"))
    return ff_fail(c->err, FF_EFORMAT, "%s: normalizer Replace's pattern Regex '%.100s' is not supported (only a "
                   "String, \\s+ or \" {2,}\")", c->path, re->valuestring);
  if (!cJSON_IsString(re) && !(tab->norm_from[i] = norm_string(c, cJSON_IsObject(pat) ? GET(pat, "String") : NULL, i, 0,
                                                                "Replace's pattern String")))
    return FF_EFORMAT;
  if (!(tab->norm_to[i] = norm_string(c, GET(n, "content"), i, 1, "Replace's content"))) return FF_EFORMAT;
  *step = !cJSON_IsString(re)           ? FF_TOK_NORM_REPLACE
          : re->valuestring[0] == ' ' ? FF_TOK_NORM_SPACES2
                                      : FF_TOK_NORM_SPACES;
  return 0;
}

/* standard base64 (with or without its padding) into out (len * 3 / 4
 * bytes at most): the bytes' count, or -1 when s is not base64 (no
 * library the project links has a decoder; this is the RFC 4648 table) */
static long base64_decode(const char *s, uint8_t *out) {
  static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  uint32_t acc = 0;
  long n = 0;
  int bits = 0, pad = 0;
  for (; *s; s++) {
    const char *p = *s == '=' ? NULL : strchr(abc, *s);
    if (*s == '=') {
      pad++;
      continue;
    }
    if (!p || pad) return -1;
    acc = acc << 6 | (uint32_t)(p - abc), bits += 6;
    if (bits >= 8) bits -= 8, out[n++] = (uint8_t)(acc >> bits);
  }
  return pad > 2 || bits >= 6 ? -1 : n;
}

/* Precompiled: SentencePiece's rules, base64 in precompiled_charsmap */
static int precompiled_step(hf_ctx *c, const cJSON *n, int *step) {
  const cJSON *j = GET(n, "precompiled_charsmap");
  const char *why = NULL;
  *step = FF_TOK_NORM_PRECOMPILED;
  if (c->t->charsmap) return unsupported(c, "normalizer", "Precompiled (twice)");
  if (!cJSON_IsString(j) || !j->valuestring[0])
    return ff_fail(c->err, FF_EFORMAT, "%s: normalizer Precompiled without a precompiled_charsmap", c->path);
  uint8_t *blob = malloc(strlen(j->valuestring) / 4 * 3 + 3);
  long len = blob ? base64_decode(j->valuestring, blob) : -1;
  int rc = !blob ? FF_ENOMEM : len < 0 ? (why = "not base64", 1) : ff_tok_charsmap(c->t, blob, (size_t)len, &why);
  free(blob);
  if (rc == FF_ENOMEM) return ff_fail(c->err, FF_ENOMEM, "out of memory");
  if (rc) return ff_fail(c->err, FF_EFORMAT, "%s: normalizer Precompiled's precompiled_charsmap: %s", c->path, why);
  return 0;
}

/* one normalizer: the Unicode ones, Replace and Prepend as steps of the
 * tables' norm, in order; SentencePiece's Prepend("\u2581") and
 * Replace(" ", "\u2581") as the options tok_encode.c applies after them
 * (a step after those, or NFKC/NFKD after Replace, whose spaces (from
 * U+00A0, U+3000, ...) Replace would not see, is refused); BertNormalizer
 * (nothing after it) */
static int hf_normalizer1(hf_ctx *c, const cJSON *n, int *steps) {
  const char *ty = type_of(n);
  ff_tokenizer *t = c->t;
  int wp = t->info.kind == FF_TOK_WORDPIECE, step = norm_step(ty);
  int text = !strcmp(ty, "Prepend") || !strcmp(ty, "Replace"), strip = !strcmp(ty, "Strip");
  if (strip) { /* of whitespace, left and / or right */
    step = flag(n, "strip_left", 0) | flag(n, "strip_right", 0) << 1;
    if (!step) return 0;
    step = step == 1 ? FF_TOK_NORM_TRIM_LEFT : step == 2 ? FF_TOK_NORM_TRIM_RIGHT : FF_TOK_NORM_TRIM;
  }
  if (!strcmp(ty, "Precompiled")) text = 1;
  int sp = !wp && ((!strcmp(ty, "Prepend") && str_is(n, "prepend", SP)) ||
                   (!strcmp(ty, "Replace") && cJSON_IsObject(GET(n, "pattern")) &&
                    str_is(GET(n, "pattern"), "String", " ") && str_is(n, "content", SP)));
  if ((step || text) && (t->tab.bert_clean || t->tab.bert_lower || t->tab.bert_strip || t->tab.bert_chinese))
    return unsupported(c, "normalizer after BertNormalizer", ty);
  if (((step == FF_TOK_NORM_NFKC || step == FF_TOK_NORM_NFKD) && t->tab.replace_space) ||
      ((step || (text && !sp)) && (t->tab.replace_space || t->tab.prepend)))
    return unsupported(c, "normalizer after SentencePiece's Replace or Prepend", ty);
  if (sp && !strcmp(ty, "Prepend")) t->tab.prepend = 1;
  else if (sp) t->tab.replace_space = 1;
  else if (step || text) {
    if (*steps == FF_TOK_NORM_STEPS) return unsupported(c, "normalizer Sequence (more steps than 6)", ty);
    int rc = !text ? 0 : strcmp(ty, "Precompiled") ? text_step(c, n, ty, *steps, &step) : precompiled_step(c, n, &step);
    if (rc) return rc;
    t->tab.norm |= step << 4 * (*steps)++;
    if (ff_tok_norm_growth(&t->tab) > 32)
      return unsupported(c, "normalizer Sequence (growing text more than 32 times)", ty);
  } else if (!strcmp(ty, "BertNormalizer") && wp) {
    t->tab.bert_clean = flag(n, "clean_text", 1), t->tab.bert_chinese = flag(n, "handle_chinese_chars", 1);
    t->tab.bert_lower = flag(n, "lowercase", 1), t->tab.bert_strip = flag(n, "strip_accents", t->tab.bert_lower);
  } else return unsupported(c, "normalizer", ty[0] ? ty : "(no type)");
  return 0;
}

static int hf_normalizer(hf_ctx *c, const cJSON *n) {
  int rc = 0, steps = 0;
  if (!n || cJSON_IsNull(n)) return 0;
  if (strcmp(type_of(n), "Sequence")) return hf_normalizer1(c, n, &steps);
  const cJSON *list = GET(n, "normalizers");
  if (!cJSON_IsArray(list)) return unsupported(c, "normalizer", "Sequence without normalizers");
  for (const cJSON *e = list->child; e && !rc; e = e->next) rc = hf_normalizer1(c, e, &steps);
  return rc;
}

/* Split's patterns in the published files, each matched by a hand-written
 * matcher in tok_encode.c (a regex engine backtracks, or is a library the
 * emitted driver could not carry) */
static const struct {
  const char *regex;
  int split;
} split_patterns[] = {
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
     "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", FF_TOK_SPLIT_CL100K}, /* LLaMA-3, GPT-4's cl100k */
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
     "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", FF_TOK_SPLIT_QWEN2}, /* Qwen2 */
    {"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+", FF_TOK_SPLIT_GPT2},
    {"[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
     "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+"
     "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|"
     "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", FF_TOK_SPLIT_O200K}, /* GPT-4o's o200k */
    {"\\p{N}{1,3}", FF_TOK_SPLIT_DS_NUM}, /* DeepSeek-V3's three */
    {"[\xe4\xb8\x80-\xe9\xbe\xa5\xe3\x81\x80-\xe3\x82\x9f\xe3\x82\xa0-\xe3\x83\xbf]+", FF_TOK_SPLIT_DS_CJK},
    {"[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
     " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+", FF_TOK_SPLIT_DS_MAIN}, /* CR, LF as characters */
    {"[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
     " ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", FF_TOK_SPLIT_DS_MAIN}, /* or as escapes */
    {"[0-9][0-9][0-9]", FF_TOK_SPLIT_TRIPLES}, /* Falcon's */
    {"<\\|startoftext\\|>|<\\|endoftext\\|>|'s|'t|'re|'ve|'m|'ll|'d|[\\p{L}]+|[\\p{N}]|[^\\s\\p{L}\\p{N}]+",
     FF_TOK_SPLIT_CLIP}, /* CLIP's (the library's converter leaves out the first two alternatives: */
    {"'s|'t|'re|'ve|'m|'ll|'d|[\\p{L}]+|[\\p{N}]|[^\\s\\p{L}\\p{N}]+", FF_TOK_SPLIT_CLIP}, /* they are added tokens) */
};

/* SplitDelimiterBehavior by name, or -1 */
static int behavior(const cJSON *p, const char *dflt) {
  static const char *const names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
  const cJSON *j = GET(p, "behavior");
  const char *b = cJSON_IsString(j) ? j->valuestring : dflt;
  for (int i = 0; i < 5; i++)
    if (!strcmp(b, names[i])) return FF_TOK_REMOVED + i;
  return -1;
}

/* one pre-tokenizer of a byte-level BPE: its step, FF_TOK_PRE(...) */
static int pre_step(hf_ctx *c, const cJSON *p, int *step) {
  const char *ty = type_of(p);
  if (!strcmp(ty, "ByteLevel")) {
    *step = FF_TOK_PRE(FF_TOK_PRE_BYTELEVEL, 0, 0, (flag(p, "use_regex", 1) ? FF_TOK_BL_REGEX : 0) |
                                                       (flag(p, "add_prefix_space", 0) ? FF_TOK_BL_PREFIX : 0));
    return 0;
  }
  if (!strcmp(ty, "Digits")) {
    *step = FF_TOK_PRE(FF_TOK_PRE_DIGITS, flag(p, "individual_digits", 0) ? FF_TOK_ISOLATED : FF_TOK_CONTIGUOUS, 0, 0);
    return 0;
  }
  int how = behavior(p, !strcmp(ty, "Punctuation") ? "Isolated" : "");
  if ((!strcmp(ty, "Punctuation") || !strcmp(ty, "Split")) && how < 0)
    return unsupported(c, "pre_tokenizer behavior", cJSON_IsString(GET(p, "behavior")) ? GET(p, "behavior")->valuestring
                                                                                        : "(none)");
  if (!strcmp(ty, "Punctuation")) {
    *step = FF_TOK_PRE(FF_TOK_PRE_PUNCT, how, 0, 0);
    return 0;
  }
  if (strcmp(ty, "Split")) return unsupported(c, "pre_tokenizer", ty[0] ? ty : "(no type)");
  const cJSON *pat = GET(p, "pattern"), *re = cJSON_IsObject(pat) ? GET(pat, "Regex") : NULL;
  if (!cJSON_IsString(re)) return unsupported(c, "pre_tokenizer Split's pattern", "(not a Regex)");
  for (size_t i = 0; i < sizeof split_patterns / sizeof *split_patterns; i++)
    if (!strcmp(re->valuestring, split_patterns[i].regex)) {
      *step = FF_TOK_PRE(FF_TOK_PRE_SPLIT, how, flag(p, "invert", 0), split_patterns[i].split);
      return 0;
    }
  return ff_fail(c->err, FF_EFORMAT, "%s: pre_tokenizer Split's pattern '%.300s' is not supported (only GPT-2's, "
                 "LLaMA-3's, Qwen2's, GPT-4o's, DeepSeek-V3's, Falcon's and CLIP's)", c->path, re->valuestring);
}

/* the pre-tokenizers of a byte-level BPE, in order (a Sequence's, or one
 * ByteLevel): exactly one ByteLevel, and Split, Digits and Punctuation
 * before or after it */
static int hf_byte_pre(hf_ctx *c, const cJSON *p) {
  ff_tokenizer *t = c->t;
  const cJSON *list = GET(p, "pretokenizers"), *e = strcmp(type_of(p), "Sequence") ? p : list ? list->child : NULL;
  int levels = 0;
  for (; e; e = strcmp(type_of(p), "Sequence") ? NULL : e->next) {
    if (t->tab.n_pre == FF_TOK_PRE_STEPS) return unsupported(c, "pre_tokenizer Sequence", "(more than 6 steps)");
    int step = 0, rc = pre_step(c, e, &step);
    if (rc) return rc;
    levels += (step & 15) == FF_TOK_PRE_BYTELEVEL;
    t->tab.pre[t->tab.n_pre++] = step;
  }
  if (levels != 1 || t->info.kind != FF_TOK_BPE_SP || t->tab.prepend || t->tab.replace_space)
    return unsupported(c, "pre_tokenizer Sequence (one ByteLevel, of a BPE model without SentencePiece's normalizers)",
                       levels ? "ByteLevel" : "(no ByteLevel)");
  t->info.kind = FF_TOK_BPE_BYTES;
  return 0;
}

/* whether the pre-tokenizer is of a byte-level BPE: a ByteLevel in it */
static int has_byte_level(const cJSON *p) {
  if (!strcmp(type_of(p), "ByteLevel")) return 1;
  const cJSON *list = GET(p, "pretokenizers");
  for (const cJSON *e = !strcmp(type_of(p), "Sequence") && list ? list->child : NULL; e; e = e->next)
    if (!strcmp(type_of(e), "ByteLevel")) return 1;
  return 0;
}

/* Sequence [WhitespaceSplit, Punctuation(Isolated)]: BertPreTokenizer's steps, spelled out */
static int bert_steps(const cJSON *p) {
  const cJSON *list = GET(p, "pretokenizers"), *a = list ? list->child : NULL, *b = a ? a->next : NULL;
  return !strcmp(type_of(p), "Sequence") && b && !b->next && !strcmp(type_of(a), "WhitespaceSplit") &&
         !strcmp(type_of(b), "Punctuation") && behavior(b, "Isolated") == FF_TOK_ISOLATED;
}

/* ByteLevel (GPT-2) with Split, Digits or Punctuation, Metaspace
 * (SentencePiece), BertPreTokenizer */
static int hf_pre(hf_ctx *c, const cJSON *p) {
  ff_tokenizer *t = c->t;
  const char *ty = p && !cJSON_IsNull(p) ? type_of(p) : "null";
  int bpe = t->info.kind != FF_TOK_WORDPIECE;
  if (bpe && has_byte_level(p)) return hf_byte_pre(c, p);
  if (!strcmp(ty, "Sequence") && cJSON_GetArraySize(GET(p, "pretokenizers")) == 1)
    return hf_pre(c, GET(p, "pretokenizers")->child);
  if (!strcmp(ty, "null") && bpe) return 0;
  if (!strcmp(ty, "Metaspace") && bpe && str_is(p, "replacement", SP)) {
    const cJSON *scheme = GET(p, "prepend_scheme");
    t->tab.meta = 1, t->tab.meta_split = flag(p, "split", 1);
    t->tab.meta_scheme = flag(p, "add_prefix_space", 1) ? FF_TOK_META_ALWAYS : FF_TOK_META_NEVER;
    if (cJSON_IsString(scheme))
      t->tab.meta_scheme = !strcmp(scheme->valuestring, "first") ? FF_TOK_META_FIRST
                       : !strcmp(scheme->valuestring, "never") ? FF_TOK_META_NEVER : FF_TOK_META_ALWAYS;
  } else if ((!strcmp(ty, "BertPreTokenizer") || bert_steps(p)) && !bpe) {
    t->bert_pre = 1;
  } else if (!strcmp(ty, "Sequence")) {
    char names[120] = "";
    const cJSON *list = GET(p, "pretokenizers");
    size_t n = 0;
    for (const cJSON *e = list ? list->child : NULL; e && n < sizeof names - 40; e = e->next)
      n += (size_t)snprintf(names + n, sizeof names - n, "%s%.30s", n ? ", " : "",
                            type_of(e)[0] ? type_of(e) : "(no type)");
    return unsupported(c, "pre_tokenizer Sequence of", names);
  } else return unsupported(c, "pre_tokenizer", ty[0] ? ty : "(no type)");
  return 0;
}

/* the ids of special token name: the template's special_tokens entry (its
 * ids, maybe several), else the token of that name; 0 when none fits */
static int special_ids(hf_ctx *c, const cJSON *specials, const char *name, int *ids, int room) {
  const cJSON *list = GET(GET(specials, name), "ids");
  int n = 0, id;
  if (cJSON_IsArray(list)) {
    for (const cJSON *e = list->child; e; e = e->next, n++)
      if (n >= room || !cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= c->t->info.size) return 0;
      else ids[n] = (int)e->valuedouble;
    return n;
  }
  if ((id = ff_tok_lookup(c->t, name, strlen(name))) < 0 || room < 1) return 0;
  ids[0] = id;
  return 1;
}

/* One side of the template: the special ids it puts there */
static void template_side(hf_ctx *c, const cJSON *specials, const char *name, int side) {
  ff_tokenizer_info *in = &c->t->info;
  int *n = side ? &in->n_suffix : &in->n_prefix, *ids = side ? in->suffix : in->prefix;
  *n += special_ids(c, specials, name, ids + *n, FF_TOK_TEMPLATE_MAX - *n);
}

/* The template (TemplateProcessing's single, or Bert/Roberta processing's
 * cls and sep): the special ids before the text (bos, the first of them:
 * generate starts a prompt with it) and after it (tail, the last: run
 * --text ends the sequence with it) */
static void hf_post(hf_ctx *c, const cJSON *p) {
  const char *ty = type_of(p);
  ff_tokenizer_info *in = &c->t->info;
  if (!strcmp(ty, "Sequence")) {
    const cJSON *list = GET(p, "processors");
    for (const cJSON *e = cJSON_IsArray(list) ? list->child : NULL; e; e = e->next) hf_post(c, e);
    return;
  }
  const cJSON *single = GET(p, "single"), *cls = GET(p, "cls"), *sep = GET(p, "sep");
  if (!strcmp(ty, "TemplateProcessing") && cJSON_IsArray(single)) {
    int side = 0;
    in->n_prefix = in->n_suffix = 0;
    for (const cJSON *e = single->child; e; e = e->next) {
      const cJSON *name = GET(GET(e, "SpecialToken"), "id");
      if (GET(e, "Sequence")) side = 1;
      else if (cJSON_IsString(name)) template_side(c, GET(p, "special_tokens"), name->valuestring, side);
    }
  } else if ((!strcmp(ty, "BertProcessing") || !strcmp(ty, "RobertaProcessing")) && cJSON_IsArray(cls) &&
             cJSON_IsArray(sep) && cJSON_IsString(cls->child) && cJSON_IsString(sep->child)) {
    in->n_prefix = in->n_suffix = 0;
    template_side(c, NULL, cls->child->valuestring, 0);
    template_side(c, NULL, sep->child->valuestring, 1);
  } else return;
  if (in->n_prefix) in->bos = in->prefix[0], in->add_bos = 1;
  if (in->n_suffix) in->tail = in->suffix[in->n_suffix - 1];
}

static int named(const ff_tokenizer *t, const char *const *names) {
  for (int i = 0; names[i]; i++) {
    int id = ff_tok_lookup(t, names[i], strlen(names[i]));
    if (id >= 0) return id;
  }
  return -1;
}

/* max_input_chars_per_word: Hugging Face's usize (100 when absent), any
 * size; a word of more characters is unk, a limit of 0 makes every word unk */
static int wp_max_chars(hf_ctx *c, const cJSON *j) {
  double d = cJSON_IsNumber(j) ? j->valuedouble : -1;
  if (!j || cJSON_IsNull(j)) d = 100;
  if (!(d >= 0) || d != floor(d))
    return ff_fail(c->err, FF_EFORMAT, "%s: model.max_input_chars_per_word must be a whole number >= 0", c->path);
  c->t->tab.wp_max_chars = d < (double)SIZE_MAX ? (size_t)d : SIZE_MAX;
  return 0;
}

/* Unigram: unk_id and byte_fallback; runs of unknown characters fuse */
static int hf_unigram(hf_ctx *c, const cJSON *m) {
  ff_tokenizer *t = c->t;
  const cJSON *unk = GET(m, "unk_id");
  if (unk && !cJSON_IsNull(unk)) {
    int id = id_of(c, unk, "model.unk_id");
    if (id < 0) return id;
    if (id >= t->info.size) return ff_fail(c->err, FF_EFORMAT, "%s: model.unk_id %d is not a piece", c->path, id);
    t->info.unk = id;
  }
  t->tab.byte_fallback = flag(m, "byte_fallback", 0), t->tab.fuse_unk = 1;
  if (t->tab.byte_fallback && ff_tok_byte_ids(t) < 256) t->tab.byte_fallback = 0; /* Hugging Face: unk then */
  return 0;
}

static int hf_model(hf_ctx *c, const cJSON *m) {
  ff_tokenizer *t = c->t;
  if (t->info.kind == FF_TOK_UNIGRAM) return hf_unigram(c, m);
  const cJSON *unk = GET(m, "unk_token"), *pre = GET(m, "continuing_subword_prefix"), *drop = GET(m, "dropout");
  const cJSON *suf = GET(m, "end_of_word_suffix"), *maxc = GET(m, "max_input_chars_per_word");
  int wp = t->info.kind == FF_TOK_WORDPIECE;
  const char *unk_s = cJSON_IsString(unk) ? unk->valuestring : wp ? "[UNK]" : NULL;
  if (unk_s && (t->info.unk = ff_tok_lookup(t, unk_s, strlen(unk_s))) < 0)
    return ff_fail(c->err, FF_EFORMAT, "%s: model.unk_token '%.60s' is not in the vocabulary", c->path, unk_s);
  if (wp) {
    const char *p = cJSON_IsString(pre) ? pre->valuestring : "##";
    if (strlen(p) >= sizeof t->wp_prefix) return unsupported(c, "continuing_subword_prefix", p);
    strcpy(t->wp_prefix, p);
    t->tab.wp_prefix = t->wp_prefix;
    return wp_max_chars(c, maxc);
  }
  if (cJSON_IsString(pre) && pre->valuestring[0])
    return unsupported(c, "BPE's continuing_subword_prefix", pre->valuestring);
  if (cJSON_IsString(suf) && suf->valuestring[0]) { /* CLIP's "</w>": a word's last character has it */
    if (strlen(suf->valuestring) >= sizeof t->suffix || t->info.kind != FF_TOK_BPE_BYTES || flag(m, "byte_fallback", 0))
      return unsupported(c, "end_of_word_suffix (up to 15 bytes, of a byte-level BPE without byte_fallback)",
                         suf->valuestring);
    t->tab.suffix = strcpy(t->suffix, suf->valuestring);
  }
  if (cJSON_IsNumber(drop) && drop->valuedouble > 0) return unsupported(c, "BPE dropout", "> 0");
  t->tab.byte_fallback = flag(m, "byte_fallback", 0), t->tab.fuse_unk = flag(m, "fuse_unk", 0);
  t->tab.ignore_merges = flag(m, "ignore_merges", 0);
  return hf_merges(c, GET(m, "merges"));
}

/* model.type, or what a file without one holds, as Hugging Face infers it
 * (the hub's first GPT-2, RoBERTa and BERT files have none): pieces with
 * scores are Unigram, a vocabulary with merges BPE, one with WordPiece's
 * settings WordPiece */
static const char *model_type(const cJSON *m) {
  const char *ty = type_of(m);
  if (*ty) return ty;
  if (cJSON_IsArray(GET(m, "vocab"))) return "Unigram";
  if (cJSON_IsObject(GET(m, "vocab")) && GET(m, "merges")) return "BPE";
  if (cJSON_IsObject(GET(m, "vocab")) && (GET(m, "continuing_subword_prefix") || GET(m, "max_input_chars_per_word")))
    return "WordPiece";
  return "";
}

static int hf_build(hf_ctx *c, const cJSON *root, int expected) {
  ff_tokenizer *t = c->t;
  const cJSON *model = GET(root, "model");
  const char *ty = model_type(model);
  int rc;
  if (strcmp(ty, "BPE") && strcmp(ty, "WordPiece") && strcmp(ty, "Unigram"))
    return ff_fail(c->err, FF_EFORMAT, "%s: model.type '%.60s' is not supported (BPE, WordPiece or Unigram)", c->path,
                   ty[0] ? ty : "(none)");
  enum ff_tokenizer_kind kind = !strcmp(ty, "BPE") ? FF_TOK_BPE_SP : !strcmp(ty, "Unigram") ? FF_TOK_UNIGRAM : FF_TOK_WORDPIECE;
  t->info = (ff_tokenizer_info){kind, 0, -1, -1, -1, -1, 0, 0, -1, 0, {0}, 0, {0}};
  if ((rc = hf_tokens(c, GET(model, "vocab"), GET(root, "added_tokens"), expected)) ||
      (rc = hf_normalizer(c, GET(root, "normalizer"))) || (rc = hf_pre(c, GET(root, "pre_tokenizer"))) ||
      (rc = hf_model(c, model)))
    return rc;
  if (t->info.kind == FF_TOK_WORDPIECE && !t->bert_pre) return unsupported(c, "pre_tokenizer", "null (WordPiece)");
  hf_post(c, GET(root, "post_processor"));
  const cJSON *dec = GET(root, "decoder");
  t->tab.wp_cleanup = !strcmp(type_of(dec), "WordPiece") && flag(dec, "cleanup", 1);
  static const char *const eos[] = {"</s>", "<|endoftext|>", "<|end_of_text|>", "[SEP]", NULL};
  static const char *const pad[] = {"<pad>", "[PAD]", "<|padding|>", NULL};
  t->info.eos = named(t, eos), t->info.pad = named(t, pad);
  int bytes = ff_tok_byte_ids(t);
  if (t->info.kind != FF_TOK_BPE_SP && t->info.kind != FF_TOK_UNIGRAM) t->tab.byte_fallback = 0; /* only they fall back to bytes */
  /* Metaspace leaves out a space it finds first (HF's decoder strips one that was there) */
  int removes = 0; /* a split that drops text */
  for (int i = 0; i < t->tab.n_pre; i++)
    removes |= (t->tab.pre[i] >> 4 & 7) == FF_TOK_REMOVED && (t->tab.pre[i] & 15) != FF_TOK_PRE_BYTELEVEL;
  t->info.round_trip = !t->tab.norm && !t->tab.suffix && !removes &&
                       (t->info.kind == FF_TOK_BPE_BYTES || (t->tab.byte_fallback && bytes == 256 && !t->tab.meta));
  return 0;
}

/* 1: not a tokenizer.json (no "model" object): the caller tries fixformer's
 * vocabulary.  JSON that is not valid, or has a key twice, is neither. */
int ff_tok_hf_parse(const char *path, const char *text, size_t len, int expected_size, ff_tokenizer *t, ff_error *err) {
  if (len > TOK_MAX_FILE) return 1;
  cJSON *root = ff_json_parse(text, len, path, err);
  if (!root) return FF_EFORMAT;
  if (!cJSON_IsObject(root) || !cJSON_IsObject(GET(root, "model"))) {
    cJSON_Delete(root);
    return 1;
  }
  hf_ctx c = {path, t, err};
  int rc = ff_json_has_nul(text, len) ? ff_fail(err, FF_EFORMAT, "%s: a NUL byte or \\u0000 (no token may hold NUL)", path)
                                      : hf_build(&c, root, expected_size);
  cJSON_Delete(root);
  return rc;
}
