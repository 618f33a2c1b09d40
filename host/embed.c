/* embed.c - the packed weights as the C initialisers of NAME_weights.c
 * (emit --embed), formatted piece by piece as ff_pack_stream packs them:
 * the text (some 15 characters a float) is never held whole, and no weight
 * passes through the Lua state, which renders only the text around them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "codegen.h"

/* ---- the hash, and the check ------------------------------------------------ */

typedef struct {
  EVP_MD_CTX *md;
  int floats;          /* f32 words: each a float, which must be finite */
  const char *weights; /* the safetensors file, for the message */
} hasher;

static int hash_piece(void *ctx, const float *x, size_t n, ff_error *err) {
  hasher *h = ctx;
  for (size_t i = 0; h->floats && i < n; i++)
    if (x[i] != x[i] || x[i] - x[i] != 0)
      return ff_fail(err, FF_EINVAL, "%s: a weight is not finite; --embed cannot write it as a C literal (emit the "
                     "packed blob without --embed)", h->weights);
  if (!EVP_DigestUpdate(h->md, x, n * sizeof *x)) return ff_fail(err, FF_ENOMEM, "sha256 of the weights failed");
  return 0;
}

int ff_embed_sha256(const ff_program *p, const ff_tensor_file *f, int floats, const char *weights_path, char hex[65],
                    ff_error *err) {
  hasher h = {EVP_MD_CTX_new(), floats, weights_path};
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  int rc = h.md && EVP_DigestInit_ex(h.md, EVP_sha256(), NULL) ? 0 : ff_fail(err, FF_ENOMEM, "out of memory");
  if (!rc) rc = ff_pack_stream(p, f, hash_piece, &h, err);
  if (!rc && (!EVP_DigestFinal_ex(h.md, md, &len) || len != 32)) rc = ff_fail(err, FF_ENOMEM, "sha256 failed");
  EVP_MD_CTX_free(h.md);
  if (!rc) ff_digest_hex(md, hex);
  return rc;
}

/* ---- the text ------------------------------------------------------------------ */

#define TEXT_BUF ((size_t)1 << 20)
#define WORD_TEXT 40 /* the most one word takes: "\n  " -1.23456789e-38 ".0" "f," */

typedef struct {
  const ff_text_out *out;
  char *buf;
  size_t len;
  size_t i, n; /* the word at hand, of n */
  int floats;
} writer;

static int flush(writer *w, ff_error *err) {
  int rc = w->len ? w->out->write(w->out->ctx, w->buf, w->len, err) : 0;
  w->len = 0;
  return rc;
}

static int put(writer *w, const char *s, size_t n, ff_error *err) {
  int rc = flush(w, err);
  return rc || !n ? rc : w->out->write(w->out->ctx, s, n, err);
}

/* Eight to a line, as "  a, b, ..., h,\n": floats %.9g (which round-trips a
 * float32) with a ".0" where it has neither point nor exponent and an f;
 * other weight types their 4-byte words as written, 0x%08xu. */
static int text_piece(void *ctx, const float *x, size_t n, ff_error *err) {
  static const char hex[] = "0123456789abcdef";
  writer *w = ctx;
  for (size_t k = 0; k < n; k++, w->i++) {
    char *p = w->buf + w->len;
    const char *lead = w->i % 8 ? " " : w->i ? "\n  " : "  ";
    const int last = w->i + 1 == w->n;
    while (*lead) *p++ = *lead++;
    if (w->floats) {
      int len = snprintf(p, 32, "%.9g", (double)x[k]);
      const int plain = !memchr(p, '.', (size_t)len) && !memchr(p, 'e', (size_t)len);
      p += len;
      if (plain) *p++ = '.', *p++ = '0';
      *p++ = 'f';
    } else {
      uint32_t u;
      memcpy(&u, x + k, sizeof u);
      *p++ = '0', *p++ = 'x';
      for (int s = 28; s >= 0; s -= 4) *p++ = hex[(u >> s) & 15];
      *p++ = 'u';
    }
    if (!last) *p++ = ',';
    w->len = (size_t)(p - w->buf);
    int rc = w->len + WORD_TEXT > TEXT_BUF ? flush(w, err) : 0;
    if (rc) return rc;
  }
  return 0;
}

int ff_embed_write(const ff_program *p, const ff_tensor_file *f, int floats, const char *text, const ff_text_out *out,
                   ff_error *err) {
  const char *mark = strstr(text, FF_WEIGHT_DATA_MARK);
  if (!mark || strstr(mark + 1, FF_WEIGHT_DATA_MARK))
    return ff_fail(err, FF_EINVAL, "internal: the weights' file does not hold their place once");
  writer w = {out, malloc(TEXT_BUF), 0, 0, p->weight_floats, floats};
  if (!w.buf) return ff_fail(err, FF_ENOMEM, "out of memory for the embedded weights");
  int rc = put(&w, text, (size_t)(mark - text), err);
  if (!rc && !w.n) { /* (an array needs an element) */
    const char *none = floats ? "  0.0f" : "  0u";
    rc = put(&w, none, strlen(none), err);
  }
  if (!rc) rc = ff_pack_stream(p, f, text_piece, &w, err);
  if (!rc && w.i != w.n) rc = ff_fail(err, FF_EINVAL, "internal: %zu weights of %zu were written", w.i, w.n);
  const char *tail = mark + strlen(FF_WEIGHT_DATA_MARK);
  if (!rc) rc = put(&w, tail, strlen(tail), err);
  free(w.buf);
  return rc;
}
