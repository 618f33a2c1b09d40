/* data.c - training data: a file read whole, its format found, tokenized
 * with the description's vocabulary (text) or range-checked (token ids),
 * every sample checked against max_seq before training starts; batches
 * right-padded with labels masked; the shuffling generator. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host.h" /* ff_sha256_hex */
#include "train_internal.h"

#define LLMC_MAGIC 20240520
#define LLMC_HEADER 1024 /* 256 int32 */
#define IGNORE (-100)

static uint32_t le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int ends_with(const char *s, const char *tail) {
  size_t n = strlen(s), k = strlen(tail);
  return n >= k && !strcmp(s + n - k, tail);
}

void ff_train_data_free(ff_train_data *d) {
  free(d->ids);
  free(d->off);
  free(d->src_n);
  free(d->tgt_n);
  free(d->raw);
  memset(d, 0, sizeof *d);
}

/* ---- lines: pairs and text ---------------------------------------------------------- */

typedef struct {
  ff_train_data *d;
  const ff_config *c;
  const char *path;
  ff_tokenizer *tok;
  int add_bos;
  int32_t *tmp;     /* max_seq + 2 ids */
  int64_t cap_ids, n_ids, cap_samples;
} lines;

static int grow(lines *L, int64_t more_ids, ff_error *err) {
  ff_train_data *d = L->d;
  if (L->n_ids + more_ids > L->cap_ids) {
    int64_t cap = L->cap_ids ? L->cap_ids * 2 : 4096;
    while (cap < L->n_ids + more_ids) cap *= 2;
    int32_t *ids = realloc(d->ids, (size_t)cap * sizeof *ids);
    if (!ids) return ff_fail(err, FF_ENOMEM, "%s: out of memory for the tokenized data", L->path);
    d->ids = ids, L->cap_ids = cap;
  }
  if (d->count == L->cap_samples) {
    int64_t cap = L->cap_samples ? L->cap_samples * 2 : 256;
    int64_t *off = realloc(d->off, (size_t)cap * sizeof *off);
    if (off) d->off = off;
    int32_t *a = off ? realloc(d->src_n, (size_t)cap * sizeof *a) : NULL;
    if (a) d->src_n = a;
    int32_t *b = a ? realloc(d->tgt_n, (size_t)cap * sizeof *b) : NULL;
    if (!b) return ff_fail(err, FF_ENOMEM, "%s: out of memory for the samples", L->path);
    d->tgt_n = b, L->cap_samples = cap;
  }
  return 0;
}

/* text of line `line` -> ids (at most cap); FF_ELENGTH past cap, said as
 * "the WHAT is more than CAP tokens after tokenizing (max_seq M, WHY)" */
static int encode(lines *L, const char *text, long line, const char *what, int cap, const char *why, int *n,
                  ff_error *err) {
  int rc = ff_tokenizer_encode(L->tok, text, L->tmp, cap, n, err);
  if (rc == FF_ELENGTH)
    return ff_fail(err, FF_ELENGTH, "%s:%ld: the %s is more than %d tokens after tokenizing (max_seq %d%s)", L->path,
                   line, what, cap, L->c->max_seq, why);
  if (rc) return ff_fail(err, rc, "%s:%ld: %s", L->path, line, err ? err->msg : "cannot tokenize");
  if (*n == 0) return ff_fail(err, FF_ELENGTH, "%s:%ld: the %s is empty after tokenizing", L->path, line, what);
  return 0;
}

/* "source<TAB>target": the source, then the target's ids (BOS and EOS are the batch's) */
static int pair_line(lines *L, char *s, long line, ff_error *err) {
  ff_train_data *d = L->d;
  char *tab = strchr(s, '\t');
  if (!tab)
    return ff_fail(err, FF_EFORMAT, "%s:%ld: no TAB between source and target (lines are source<TAB>target)", L->path,
                   line);
  if (strchr(tab + 1, '\t'))
    return ff_fail(err, FF_EFORMAT, "%s:%ld: more than one TAB (lines are source<TAB>target)", L->path, line);
  *tab = 0;
  int ns, nt, rc = encode(L, s, line, "source", L->c->max_seq, "", &ns, err);
  if (rc || (rc = grow(L, ns + L->c->max_seq, err))) return rc;
  memcpy(d->ids + L->n_ids, L->tmp, (size_t)ns * sizeof *L->tmp);
  if ((rc = encode(L, tab + 1, line, "target", L->c->max_seq - 1, ", less one for BOS or EOS", &nt, err))) return rc;
  memcpy(d->ids + L->n_ids + ns, L->tmp, (size_t)nt * sizeof *L->tmp);
  d->off[d->count] = L->n_ids, d->src_n[d->count] = ns, d->tgt_n[d->count] = nt;
  L->n_ids += ns + nt;
  d->count++;
  if (ns > d->max_src) d->max_src = ns;
  if (nt + 1 > d->max_tgt) d->max_tgt = nt + 1;
  return 0;
}

/* one sequence: [BOS] ids [EOS]; the model reads all but the last, predicts all but the first */
static int text_line(lines *L, const char *s, long line, ff_error *err) {
  ff_train_data *d = L->d;
  int bos = L->add_bos && d->bos >= 0, eos = d->eos >= 0, n;
  int rc = encode(L, s, line, "line", L->c->max_seq + 1 - bos - eos,
                  bos + eos ? ", with its BOS/EOS, less one" : ", less one", &n, err);
  if (rc || (rc = grow(L, n + 2, err))) return rc;
  if (bos + n + eos < 2)
    return ff_fail(err, FF_ELENGTH, "%s:%ld: one token and no BOS or EOS: nothing to predict", L->path, line);
  int32_t *out = d->ids + L->n_ids;
  if (bos) out[0] = d->bos;
  memcpy(out + bos, L->tmp, (size_t)n * sizeof *L->tmp);
  if (eos) out[bos + n] = d->eos;
  d->off[d->count] = L->n_ids, d->src_n[d->count] = bos + n + eos, d->tgt_n[d->count] = 0;
  L->n_ids += bos + n + eos;
  if (bos + n + eos - 1 > d->max_src) d->max_src = bos + n + eos - 1;
  d->count++;
  return 0;
}

static int read_lines(ff_train_data *d, const ff_config *c, const char *path, ff_error *err) {
  if (!c->vocabulary[0])
    return ff_fail(err, FF_EINVAL, "%s: text data needs the description's vocabulary (a tokenizer); %s names none",
                   path, c->name);
  lines L = {d, c, path, NULL, 0, NULL, 0, 0, 0};
  int rc = ff_tokenizer_load(c->vocabulary, c->vocab, &L.tok, err);
  if (rc) return rc;
  const ff_tokenizer_info *info = ff_tokenizer_get_info(L.tok);
  d->bos = info->bos, d->eos = info->eos, d->pad = info->pad;
  L.add_bos = info->add_bos;
  if (d->format == FF_DATA_PAIRS && (d->bos < 0 || d->eos < 0))
    rc = ff_fail(err, FF_EINVAL, "%s: pairs need BOS and EOS ids: the vocabulary %s has no %s", path, c->vocabulary,
                 d->bos < 0 ? "bos" : "eos");
  if (!rc && !(L.tmp = malloc(((size_t)c->max_seq + 2) * sizeof *L.tmp))) rc = ff_fail(err, FF_ENOMEM, "out of memory");
  char *text = (char *)d->raw;
  long line = 0;
  for (size_t at = 0; !rc && at < d->raw_len;) {
    char *s = text + at, *nl = memchr(s, '\n', d->raw_len - at);
    size_t n = nl ? (size_t)(nl - s) : d->raw_len - at;
    at += n + 1;
    line++;
    if (n && s[n - 1] == '\r') n--;
    if (memchr(s, 0, n)) rc = ff_fail(err, FF_EFORMAT, "%s:%ld: a NUL byte (not a text file?)", path, line);
    if (rc || !n) continue; /* blank lines separate nothing and are skipped */
    s[n] = 0;               /* the buffer is ours, with a byte past its end */
    rc = d->format == FF_DATA_PAIRS ? pair_line(&L, s, line, err) : text_line(&L, s, line, err);
  }
  free(L.tmp);
  ff_tokenizer_free(L.tok);
  return rc;
}

/* ---- token streams ------------------------------------------------------------------ */

static uint32_t stream_id(const ff_train_data *d, int64_t i) {
  const uint8_t *p = d->raw + d->data_at + (size_t)i * (size_t)d->width;
  return d->width == 2 ? (uint32_t)(p[0] | p[1] << 8) : le32(p);
}

static int read_stream(ff_train_data *d, const ff_config *c, const char *path, const ff_train_options *o,
                       ff_error *err) {
  int64_t n;
  d->width = d->format == FF_DATA_U32 ? 4 : 2;
  if (d->format == FF_DATA_LLMC) {
    if (d->raw_len < LLMC_HEADER)
      return ff_fail(err, FF_EFORMAT, "%s: %zu bytes, shorter than llm.c's 1024-byte header", path, d->raw_len);
    uint32_t magic = le32(d->raw), version = le32(d->raw + 4), count = le32(d->raw + 8);
    if (magic != LLMC_MAGIC)
      return ff_fail(err, FF_EFORMAT, "%s: not an llm.c token file (magic %u, not %d)", path, magic, LLMC_MAGIC);
    if (version != 1)
      return ff_fail(err, FF_EFORMAT, "%s: llm.c token file version %u (version 1, uint16 ids, is read)", path,
                     version);
    if ((d->raw_len - LLMC_HEADER) / 2 != count || (d->raw_len - LLMC_HEADER) % 2)
      return ff_fail(err, FF_EFORMAT, "%s: the header counts %u tokens but %zu bytes follow it (%s)", path, count,
                     d->raw_len - LLMC_HEADER, (d->raw_len - LLMC_HEADER) / 2 < count ? "truncated" : "trailing bytes");
    d->data_at = LLMC_HEADER;
    n = count;
  } else {
    if (d->raw_len % (size_t)d->width)
      return ff_fail(err, FF_EFORMAT, "%s: %zu bytes is not a whole number of %d-byte ids", path, d->raw_len, d->width);
    n = (int64_t)(d->raw_len / (size_t)d->width);
  }
  for (int64_t i = 0; i < n; i++) {
    uint32_t id = stream_id(d, i);
    if (id >= (uint32_t)c->vocab)
      return ff_fail(err, FF_ETOKEN, "%s: token id %u at position %lld is outside the vocabulary [0, %d)", path, id,
                     (long long)i, c->vocab);
  }
  d->seq = o->seq ? o->seq : c->max_seq;
  if (d->seq > c->max_seq) return ff_fail(err, FF_ELENGTH, "seq: %d is above max_seq %d", d->seq, c->max_seq);
  d->count = n / (d->seq + 1);
  d->max_src = d->seq;
  d->bos = d->eos = d->pad = -1;
  if (!d->count && n)
    return ff_fail(err, FF_ELENGTH, "%s: %lld tokens, fewer than one sample of seq + 1 = %d", path, (long long)n,
                   d->seq + 1);
  return 0;
}

/* ---- the file ------------------------------------------------------------------------ */

static int resolve_format(ff_train_data *d, const ff_config *c, const char *path, enum ff_data_format f,
                          ff_error *err) {
  if (f == FF_DATA_AUTO) {
    if (d->raw_len >= LLMC_HEADER && le32(d->raw) == LLMC_MAGIC) f = FF_DATA_LLMC;
    else if (ends_with(path, ".u16")) f = FF_DATA_U16;
    else if (ends_with(path, ".u32")) f = FF_DATA_U32;
    else f = c->arch == FF_ARCH_ENCODER_DECODER ? FF_DATA_PAIRS : FF_DATA_TEXT;
  }
  d->format = f;
  if (c->arch == FF_ARCH_ENCODER)
    return ff_fail(err, FF_EINVAL, "cannot train %s: an encoder; train takes encoder-decoder models (pairs) and "
                   "decoder-only models (text or token ids)", c->name);
  if ((f == FF_DATA_PAIRS) != (c->arch == FF_ARCH_ENCODER_DECODER))
    return ff_fail(err, FF_EINVAL, "%s: %s data is for %s models; %s is %s", path,
                   f == FF_DATA_PAIRS ? "pairs" : "text and token",
                   f == FF_DATA_PAIRS ? "encoder-decoder" : "decoder-only",
                   c->name, c->arch == FF_ARCH_ENCODER_DECODER ? "encoder-decoder" : "decoder-only");
  return 0;
}

int ff_train_data_load(ff_train_data *d, const ff_config *c, const char *path, const ff_train_options *o,
                       ff_error *err) {
  memset(d, 0, sizeof *d);
  d->bos = d->eos = d->pad = -1;
  if (!ff_config_has_head(c))
    return ff_fail(err, FF_EINVAL, "cannot train %s: the model has no output head (training needs vocab and lm_head)",
                   c->name);
  int rc = ff_read_file(path, &d->raw, &d->raw_len, err);
  if (rc) return rc;
  uint8_t *r = realloc(d->raw, d->raw_len + 1); /* a NUL after the last line */
  if (!r) {
    ff_train_data_free(d);
    return ff_fail(err, FF_ENOMEM, "%s: out of memory", path);
  }
  d->raw = r, d->raw[d->raw_len] = 0;
  ff_sha256_hex(d->raw, d->raw_len, d->sha256);
  if ((rc = resolve_format(d, c, path, o->format, err))) goto fail;
  if (d->format == FF_DATA_PAIRS || d->format == FF_DATA_TEXT) {
    rc = read_lines(d, c, path, err);
    free(d->raw); /* tokenized: the bytes are not needed again */
    d->raw = NULL;
  } else {
    rc = read_stream(d, c, path, o, err);
  }
  if (!rc && d->count == 0)
    rc = ff_fail(err, FF_ELENGTH, "%s: no samples (%s)", path, d->raw_len ? "only blank lines" : "an empty file");
  if (!rc) return 0;
fail:
  ff_train_data_free(d);
  return rc;
}

/* ---- batches --------------------------------------------------------------------------- */

int ff_train_batch_buf_init(ff_train_batch_buf *bb, const ff_train_data *d, int B, ff_error *err) {
  size_t rows = (size_t)(d->max_src > d->max_tgt ? d->max_src : d->max_tgt) + 1, n = (size_t)B * rows;
  memset(bb, 0, sizeof *bb);
  bb->src = malloc(n * sizeof *bb->src);
  bb->tgt = malloc(n * sizeof *bb->tgt);
  bb->labels = malloc(n * sizeof *bb->labels);
  bb->lengths = malloc(((size_t)B + 1) * sizeof *bb->lengths);
  bb->cap = B;
  if (!bb->src || !bb->tgt || !bb->labels || !bb->lengths) {
    ff_train_batch_buf_free(bb);
    return ff_fail(err, FF_ENOMEM, "out of memory for a batch of %d", B);
  }
  return 0;
}

void ff_train_batch_buf_free(ff_train_batch_buf *bb) {
  free(bb->src);
  free(bb->tgt);
  free(bb->labels);
  free(bb->lengths);
  memset(bb, 0, sizeof *bb);
}

void ff_train_data_pair(const ff_train_data *d, int64_t i, const int32_t **src, int *src_n, const int32_t **tgt,
                     int *tgt_n) {
  *src = d->ids + d->off[i], *src_n = d->src_n[i];
  *tgt = *src + *src_n, *tgt_n = d->tgt_n[i];
}

void ff_train_data_shape(const ff_train_data *d, const int64_t *idx, int64_t n, int *S, int *T) {
  *S = *T = 0;
  for (int64_t k = 0; k < n; k++) {
    int s = d->format == FF_DATA_PAIRS ? d->src_n[idx[k]] : d->format == FF_DATA_TEXT ? d->src_n[idx[k]] - 1 : d->seq;
    if (s > *S) *S = s;
    if (d->format == FF_DATA_PAIRS && d->tgt_n[idx[k]] + 1 > *T) *T = d->tgt_n[idx[k]] + 1;
  }
}

void ff_train_data_batch(const ff_train_data *d, const int64_t *idx, int n, int first, int S, int T,
                         ff_train_batch_buf *bb, ff_train_batch *b) {
  int pad = d->pad >= 0 ? d->pad : 0, own_s, own_t;
  ff_train_data_shape(d, idx, n, &own_s, &own_t);
  if (own_s > S) S = own_s;
  if (own_t > T) T = own_t;
  memset(b, 0, sizeof *b);
  b->batch = n, b->first = first;
  b->src = bb->src, b->labels = bb->labels;
  if (d->format == FF_DATA_PAIRS) {
    for (int k = 0; k < n; k++) {
      const int32_t *src, *tgt;
      int ns, nt;
      ff_train_data_pair(d, idx[k], &src, &ns, &tgt, &nt);
      int32_t *s = bb->src + (size_t)k * S, *t = bb->tgt + (size_t)k * T, *y = bb->labels + (size_t)k * T;
      for (int j = 0; j < S; j++) s[j] = j < ns ? src[j] : pad;
      for (int j = 0; j < T; j++) { /* decoder input BOS + target, labels target + EOS */
        t[j] = j == 0 ? d->bos : j <= nt ? tgt[j - 1] : pad;
        y[j] = j < nt ? tgt[j] : j == nt ? d->eos : IGNORE;
      }
      bb->lengths[k] = ns;
    }
    b->src_len = S, b->tgt_len = T, b->tgt = bb->tgt, b->src_lengths = bb->lengths;
  } else if (d->format == FF_DATA_TEXT) {
    for (int k = 0; k < n; k++) {
      const int32_t *seq = d->ids + d->off[idx[k]];
      int len = d->src_n[idx[k]] - 1;
      int32_t *s = bb->src + (size_t)k * S, *y = bb->labels + (size_t)k * S;
      for (int j = 0; j < S; j++) {
        s[j] = j < len ? seq[j] : pad;
        y[j] = j < len ? seq[j + 1] : IGNORE;
      }
      bb->lengths[k] = len;
    }
    b->src_len = S, b->src_lengths = bb->lengths;
  } else {
    for (int k = 0; k < n; k++) {
      int64_t at = idx[k] * (int64_t)(d->seq + 1);
      int32_t *s = bb->src + (size_t)k * S, *y = bb->labels + (size_t)k * S;
      for (int j = 0; j < S; j++) {
        s[j] = (int32_t)stream_id(d, at + j);
        y[j] = (int32_t)stream_id(d, at + j + 1);
      }
    }
    b->src_len = S;
  }
}

/* ---- shuffling ------------------------------------------------------------------------------ */

static uint64_t mix(uint64_t z) { return ff_dropout_mix(z); }

void ff_train_shuffle(int64_t *perm, int64_t n, uint64_t seed, uint64_t tag, uint64_t epoch) {
  uint64_t s = mix(mix(mix(seed + FF_DROPOUT_GOLDEN) ^ (tag + FF_DROPOUT_GOLDEN)) ^ (epoch + FF_DROPOUT_GOLDEN));
  for (int64_t i = 0; i < n; i++) perm[i] = i;
  for (int64_t i = n - 1; i > 0; i--) {
    uint64_t bound = (uint64_t)i + 1, lim = -bound % bound, x; /* lim = 2^64 mod bound: rejection keeps it uniform */
    do x = mix(s += FF_DROPOUT_GOLDEN);
    while (x < lim);
    int64_t j = (int64_t)(x % bound), t = perm[i];
    perm[i] = perm[j], perm[j] = t;
  }
}
