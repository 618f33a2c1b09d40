/* tok_spm.c - reads a SentencePiece model (.model, Marian's .spm): the
 * ModelProto's pieces (string, score, type), its trainer spec (model type,
 * byte_fallback, the special ids) and normalizer spec (the precompiled
 * charsmap and the whitespace options).  A reader of the few protobuf fields
 * it needs, written here rather than linking protobuf-c: that would need
 * protoc-c and the .proto at build time for three messages, and a model
 * comes from a user's file, so every length is checked against the bytes
 * left.  Unigram models only; BPE models are read from tokenizer.json. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

enum { PIECE_NORMAL = 1, PIECE_UNKNOWN, PIECE_CONTROL, PIECE_USER_DEFINED, PIECE_UNUSED, PIECE_BYTE };

typedef struct {
  const uint8_t *p, *end;
} pb;

typedef struct {
  uint32_t field;
  int wire;   /* 0 varint, 1 64-bit, 2 length-delimited, 5 32-bit */
  uint64_t v; /* varint; 32-bit: the bits */
  pb sub;     /* length-delimited: its bytes */
} pb_item;

typedef struct {
  const char *path;
  ff_error *err;
} spm_ctx;

static int bad(spm_ctx *c, const char *what) {
  return ff_fail(c->err, FF_EFORMAT, "%s: not a SentencePiece model (%s)", c->path, what);
}

static int pb_varint(pb *b, uint64_t *v) {
  *v = 0;
  for (int shift = 0; shift < 64 && b->p < b->end; shift += 7) {
    uint8_t x = *b->p++;
    *v |= (uint64_t)(x & 0x7F) << shift;
    if (!(x & 0x80)) return 0;
  }
  return -1;
}

/* the next field of b: 1, 0 at its end, or a negative status */
static int pb_next(spm_ctx *c, pb *b, pb_item *it) {
  uint64_t key, n;
  if (b->p == b->end) return 0;
  if (pb_varint(b, &key) || (key >> 3) == 0 || (key >> 3) > 0xFFFFFFFu) return bad(c, "a broken field key");
  it->field = (uint32_t)(key >> 3), it->wire = (int)(key & 7), it->v = 0;
  switch (it->wire) {
  case 0: return pb_varint(b, &it->v) ? bad(c, "a varint past the end") : 1;
  case 1:
    if (b->end - b->p < 8) return bad(c, "a 64-bit field past the end");
    b->p += 8;
    return 1;
  case 5:
    if (b->end - b->p < 4) return bad(c, "a 32-bit field past the end");
    it->v = (uint64_t)b->p[0] | (uint64_t)b->p[1] << 8 | (uint64_t)b->p[2] << 16 | (uint64_t)b->p[3] << 24;
    b->p += 4;
    return 1;
  case 2:
    if (pb_varint(b, &n) || n > (uint64_t)(b->end - b->p)) return bad(c, "a length past the end");
    it->sub = (pb){b->p, b->p + n};
    b->p += n;
    return 1;
  default: return bad(c, "a field of an unknown wire type");
  }
}

typedef struct {
  int count, model_type, byte_fallback, suffix, ids[4]; /* ids: unk, bos, eos, pad */
  int dummy, extra_ws, escape;
  pb charsmap, normalizer; /* the charsmap's bytes; the normalizer spec's, as they are */
} spm_spec;

/* an int32 field: negative ids are 10-byte varints */
static int pb_int32(uint64_t v) { return (int)(int32_t)(uint32_t)v; }

static int read_trainer(spm_ctx *c, pb b, spm_spec *s) {
  pb_item it = {0, 0, 0, {NULL, NULL}};
  int rc;
  while ((rc = pb_next(c, &b, &it)) > 0) {
    if (it.wire != 0) continue;
    if (it.field == 3) s->model_type = pb_int32(it.v);
    else if (it.field == 35) s->byte_fallback = it.v != 0;
    else if (it.field == 24) s->suffix = it.v != 0;
    else if (it.field >= 40 && it.field <= 43) s->ids[it.field - 40] = pb_int32(it.v);
  }
  return rc;
}

static int read_normalizer(spm_ctx *c, pb b, spm_spec *s) {
  pb_item it = {0, 0, 0, {NULL, NULL}};
  int rc;
  while ((rc = pb_next(c, &b, &it)) > 0) {
    if (it.field == 2 && it.wire == 2) s->charsmap = it.sub;
    else if (it.wire == 0 && it.field == 3) s->dummy = it.v != 0;
    else if (it.wire == 0 && it.field == 4) s->extra_ws = it.v != 0;
    else if (it.wire == 0 && it.field == 5) s->escape = it.v != 0;
  }
  return rc;
}

/* the first pass: the specs, and the number of pieces */
static int read_specs(spm_ctx *c, pb b, spm_spec *s) {
  pb_item it = {0, 0, 0, {NULL, NULL}};
  int rc;
  *s = (spm_spec){0, 1, 0, 0, {0, 1, 2, -1}, 1, 1, 1, {NULL, NULL}, {NULL, NULL}};
  while ((rc = pb_next(c, &b, &it)) > 0) {
    if (it.wire != 2 && it.field <= 3) return bad(c, "a message field that is not a message");
    if (it.field == 1 && ++s->count > TOK_MAX_IDS)
      return ff_fail(c->err, FF_EFORMAT, "%s: more than %d pieces", c->path, TOK_MAX_IDS);
    if (it.field == 2 && (rc = read_trainer(c, it.sub, s))) return rc;
    if (it.field == 3 && (rc = read_normalizer(c, it.sub, s))) return rc;
    if (it.field == 3) s->normalizer = it.sub;
  }
  return rc;
}

/* one SentencePiece message into id */
static int read_piece(spm_ctx *c, pb b, ff_tokenizer *t, int id, int *type) {
  pb_item it = {0, 0, 0, {NULL, NULL}};
  int rc;
  float score = 0;
  const uint8_t *s = NULL;
  size_t n = 0;
  *type = PIECE_NORMAL;
  while ((rc = pb_next(c, &b, &it)) > 0) {
    if (it.field == 1 && it.wire == 2) s = it.sub.p, n = (size_t)(it.sub.end - it.sub.p);
    else if (it.field == 2 && it.wire == 5) {
      uint32_t u = (uint32_t)it.v;
      memcpy(&score, &u, 4);
    } else if (it.field == 3 && it.wire == 0) *type = pb_int32(it.v);
  }
  if (rc) return rc;
  if (!s || !n || n > TOK_MAX_BYTES || memchr(s, 0, n))
    return ff_fail(c->err, FF_EFORMAT, "%s: piece %d is empty, longer than %d bytes or holds NUL", c->path, id,
                   TOK_MAX_BYTES);
  if (!isfinite(score))
    return ff_fail(c->err, FF_EFORMAT, "%s: piece %d has a score that is not finite", c->path, id);
  if (*type < PIECE_NORMAL || *type > PIECE_BYTE)
    return ff_fail(c->err, FF_EFORMAT, "%s: piece %d has the unknown type %d", c->path, id, *type);
  if (*type == PIECE_USER_DEFINED)
    return ff_fail(c->err, FF_EFORMAT, "%s: piece %d ('%.40s') is user-defined: not supported", c->path, id,
                   (const char *)s);
  if (!(t->tok[id] = malloc(n + 1))) return ff_fail(c->err, FF_ENOMEM, "out of memory");
  memcpy(t->tok[id], s, n), t->tok[id][n] = 0;
  t->len[id] = (uint32_t)n, t->piece_score[id] = score;
  /* decode leaves control pieces out; the lattice reads normal pieces only */
  t->special[id] = (unsigned char)((*type == PIECE_CONTROL) | (*type != PIECE_NORMAL) << 1);
  return 0;
}

#define DA_OFFSET(u) ((size_t)((u) >> 10) << (((u) & 0x200u) >> 6)) /* darts-clone's unit layout */

/* the bytes a replacement becomes, its spaces as "\u2581" */
static size_t escaped_len(const char *s) {
  size_t n = 0;
  for (; *s; s++) n += *s == ' ' ? 3 : 1;
  return n;
}

/* tab.charsmap_growth: the most normalized bytes one input byte becomes, a
 * rule's replacement over its key's length (every key walked once: the
 * encoder's scratch is sized by it; at least 3, a space or a stray byte) */
static int charsmap_growth(ff_tokenizer *t) {
  const uint32_t *a = t->charsmap;
  size_t units = t->tab.charsmap_units, top = 0, growth = 3;
  size_t *stack = malloc(2 * sizeof *stack * (units + 1));
  unsigned char *seen = calloc(units, 1);
  if (!stack || !seen) {
    free(stack), free(seen);
    return FF_ENOMEM;
  }
  stack[top++] = DA_OFFSET(a[0]), stack[top++] = 0; /* a node's base, its depth */
  while (top) {
    size_t depth = stack[--top], base = stack[--top];
    for (size_t ch = 1; ch < 256; ch++) {
      size_t p = base ^ ch, next;
      if (p >= units || (a[p] & 0x800000FFu) != ch || (next = p ^ DA_OFFSET(a[p])) >= units) continue;
      size_t v = a[next] & 0x7FFFFFFFu;
      if ((a[p] >> 8 & 1) && v < t->tab.charsmap_text_len) {
        size_t g = (escaped_len(t->charsmap_text + v) + depth) / (depth + 1);
        growth = g > growth ? g : growth;
      }
      if (!seen[p]) seen[p] = 1, stack[top++] = next, stack[top++] = depth + 1;
    }
  }
  free(stack), free(seen);
  t->tab.charsmap_growth = growth;
  return 0;
}

/* the charsmap blob (a SentencePiece model's, tokenizer.json's Precompiled):
 * a little-endian uint32 size of the trie, the trie's units, then the
 * replacements, each ending in NUL.  0, FF_ENOMEM, or 1 with *why */
int ff_tok_charsmap(ff_tokenizer *t, const uint8_t *p, size_t n, const char **why) {
  size_t trie;
  if (n < 4) return *why = "a charsmap shorter than its header", 1;
  trie = (size_t)p[0] | (size_t)p[1] << 8 | (size_t)p[2] << 16 | (size_t)p[3] << 24;
  if (trie % 4 || trie < 4 || trie > n - 4 || n - 4 - trie < 1 || p[n - 1] != 0)
    return *why = "a charsmap whose trie or replacements do not fit", 1;
  size_t units = trie / 4, text = n - 4 - trie;
  if (!(t->charsmap = malloc(trie)) || !(t->charsmap_text = malloc(text))) return FF_ENOMEM;
  for (size_t i = 0; i < units; i++) {
    const uint8_t *u = p + 4 + 4 * i;
    t->charsmap[i] = (uint32_t)u[0] | (uint32_t)u[1] << 8 | (uint32_t)u[2] << 16 | (uint32_t)u[3] << 24;
  }
  memcpy(t->charsmap_text, p + 4 + trie, text);
  t->tab.charsmap = t->charsmap, t->tab.charsmap_units = units;
  t->tab.charsmap_text = t->charsmap_text, t->tab.charsmap_text_len = text;
  return charsmap_growth(t);
}

static int read_charsmap(spm_ctx *c, pb b, ff_tokenizer *t) {
  const char *why = NULL;
  int rc = b.p && b.end > b.p ? ff_tok_charsmap(t, b.p, (size_t)(b.end - b.p), &why) : 0;
  return rc == 1 ? bad(c, why) : rc ? ff_fail(c->err, FF_ENOMEM, "out of memory") : 0;
}

static int read_pieces(spm_ctx *c, pb b, ff_tokenizer *t) {
  pb_item it = {0, 0, 0, {NULL, NULL}};
  int rc, id = 0, type, unk = -1;
  float lowest = INFINITY;
  while ((rc = pb_next(c, &b, &it)) > 0) {
    if (it.field != 1) continue;
    if ((rc = read_piece(c, it.sub, t, id, &type))) return rc;
    if (type == PIECE_UNKNOWN && unk < 0) unk = id;
    if (type == PIECE_NORMAL && t->piece_score[id] < lowest) lowest = (float)t->piece_score[id];
    id++;
  }
  if (rc) return rc;
  if (unk < 0) return ff_fail(c->err, FF_EFORMAT, "%s: no piece of type UNKNOWN", c->path);
  t->info.unk = unk;
  t->tab.unk_score = (double)((isfinite(lowest) ? lowest : 0.0f) - 10.0f); /* SentencePiece's kUnkPenalty */
  return 0;
}

/* an id of the trainer spec: -1 or a piece */
static int spec_id(int id, int size) { return id >= 0 && id < size ? id : -1; }

int ff_tok_spm_parse(const char *path, const uint8_t *buf, size_t len, int expected, ff_tokenizer *t, ff_error *err) {
  spm_ctx c = {path, err};
  pb all = {buf, buf + len};
  spm_spec s;
  int rc, dup;
  if ((rc = read_specs(&c, all, &s))) return rc;
  if (s.model_type != 1)
    return ff_fail(err, FF_EFORMAT, "%s: a SentencePiece %s model: only Unigram models are read (BPE: tokenizer.json)",
                   path, s.model_type == 2 ? "BPE" : s.model_type == 3 ? "word" : s.model_type == 4 ? "char" : "unknown");
  if (s.suffix) return ff_fail(err, FF_EFORMAT, "%s: treat_whitespace_as_suffix is not supported", path);
  if (s.count < 1) return bad(&c, "no pieces");
  if (expected > 0 && s.count > expected)
    return ff_fail(err, FF_ESHAPE, "%s: %d pieces, but the model's vocab is %d", path, s.count, expected);
  if ((rc = ff_tok_alloc(t, s.count, err))) return rc;
  if (!(t->piece_score = malloc(sizeof *t->piece_score * (size_t)s.count)))
    return ff_fail(err, FF_ENOMEM, "out of memory");
  /* the tail: the source of a SentencePiece seq2seq model (T5, Marian) ends with </s> */
  t->info = (ff_tokenizer_info){FF_TOK_UNIGRAM, s.count, spec_id(s.ids[3], s.count), spec_id(s.ids[1], s.count),
                                spec_id(s.ids[2], s.count), -1, 0, 0, spec_id(s.ids[2], s.count), 0, {0}, 0, {0}};
  if ((rc = read_pieces(&c, all, t)) || (rc = ff_tok_index(t, &dup, err)) || (rc = read_charsmap(&c, s.charsmap, t)))
    return rc;
  int bytes = ff_tok_byte_ids(t);
  t->tab.byte_fallback = s.byte_fallback && bytes > 0, t->tab.fuse_unk = 1; /* a run of unknowns is one piece */
  t->tab.score = t->piece_score, t->tab.score_f32 = 1;
  t->tab.spm = 1, t->tab.spm_dummy = s.dummy, t->tab.spm_extra_ws = s.extra_ws, t->tab.spm_escape = s.escape;
  if (!t->tab.charsmap_growth) t->tab.charsmap_growth = 3;
  return 0;
}

/* ---- writing: a model renumbered by a vocabulary (Marian) ----------------------------- */

typedef struct {
  uint8_t *p;
  size_t n, cap;
  int failed;
} pb_out;

static void out_bytes(pb_out *o, const void *b, size_t n) {
  if (o->failed) return;
  if (o->cap - o->n < n) {
    size_t cap = o->cap ? 2 * o->cap : 4096;
    while (cap - o->n < n) cap *= 2;
    uint8_t *p = realloc(o->p, cap);
    if (!p) {
      o->failed = 1;
      return;
    }
    o->p = p, o->cap = cap;
  }
  memcpy(o->p + o->n, b, n);
  o->n += n;
}

static void out_varint(pb_out *o, uint64_t v) {
  uint8_t b[10];
  size_t n = 0;
  do b[n++] = (uint8_t)((v & 0x7F) | (v > 0x7F ? 0x80 : 0)), v >>= 7;
  while (v);
  out_bytes(o, b, n);
}

static void out_field(pb_out *o, uint32_t field, int wire) { out_varint(o, (uint64_t)field << 3 | (uint64_t)wire); }

static void out_int32(pb_out *o, uint32_t field, int v) { /* a negative int32 is ten bytes, as protobuf writes it */
  out_field(o, field, 0);
  out_varint(o, (uint64_t)(int64_t)v);
}

static void out_piece(pb_out *o, const char *s, float score, int type) {
  size_t n = strlen(s);
  uint8_t f[4];
  uint32_t u;
  pb_out m = {NULL, 0, 0, 0};
  out_field(&m, 1, 2), out_varint(&m, n), out_bytes(&m, s, n);
  memcpy(&u, &score, 4);
  f[0] = (uint8_t)u, f[1] = (uint8_t)(u >> 8), f[2] = (uint8_t)(u >> 16), f[3] = (uint8_t)(u >> 24);
  out_field(&m, 2, 5), out_bytes(&m, f, 4);
  if (type != PIECE_NORMAL) out_int32(&m, 3, type);
  o->failed |= m.failed;
  out_field(o, 1, 2), out_varint(o, m.n), out_bytes(o, m.p, m.n);
  free(m.p);
}

/* a source piece's type from what the reader kept of it */
static int type_of(const ff_tokenizer *t, int id) {
  unsigned char sp = t->special[id];
  if (id == t->info.unk) return PIECE_UNKNOWN;
  if (sp & 1) return PIECE_CONTROL;
  if (!(sp & 2)) return PIECE_NORMAL;
  return t->len[id] == 6 && !strncmp(t->tok[id], "<0x", 3) && t->tok[id][5] == '>' ? PIECE_BYTE : PIECE_UNUSED;
}

int ff_tokenizer_spm_renumber(const char *path, const uint8_t *buf, size_t len, const char *const *names, int n,
                              const int ids[4], uint8_t **out, size_t *out_len, ff_error *err) {
  ff_tokenizer *t = calloc(1, sizeof *t);
  spm_ctx c = {path, err};
  spm_spec s;
  pb_out o = {NULL, 0, 0, 0}, spec = {NULL, 0, 0, 0};
  *out = NULL, *out_len = 0;
  if (!t) return ff_fail(err, FF_ENOMEM, "out of memory");
  int rc = read_specs(&c, (pb){buf, buf + len}, &s);
  if (!rc) rc = ff_tok_spm_parse(path, buf, len, 0, t, err);
  for (int i = 0; !rc && i < n; i++) {
    int id = ff_tok_lookup(t, names[i], strlen(names[i]));
    int type = id >= 0 ? type_of(t, id) : i == ids[0] ? PIECE_UNKNOWN : i == ids[1] || i == ids[2] || i == ids[3]
                                                                               ? PIECE_CONTROL : PIECE_UNUSED;
    if (i == ids[0] && type != PIECE_UNKNOWN) type = PIECE_UNKNOWN;
    out_piece(&o, names[i], id >= 0 ? (float)t->piece_score[id] : 0.0f, type);
  }
  out_int32(&spec, 3, 1); /* UNIGRAM */
  if (s.byte_fallback) out_int32(&spec, 35, 1);
  for (int k = 0; k < 4; k++) out_int32(&spec, 40 + (uint32_t)k, ids[k]); /* unk, bos, eos, pad */
  out_field(&o, 2, 2), out_varint(&o, spec.n), out_bytes(&o, spec.p, spec.n);
  if (s.normalizer.p) {
    size_t m = (size_t)(s.normalizer.end - s.normalizer.p);
    out_field(&o, 3, 2), out_varint(&o, m), out_bytes(&o, s.normalizer.p, m);
  }
  if (!rc && (o.failed || spec.failed)) rc = ff_fail(err, FF_ENOMEM, "out of memory");
  free(spec.p);
  ff_tokenizer_free(t);
  if (rc) free(o.p);
  else *out = o.p, *out_len = o.n;
  return rc;
}
