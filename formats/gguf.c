/* gguf.c - GGUF files, versions 2 and 3 (ff_gguf.h).  Written by hand: no
 * Debian package reads GGUF (ggml's own reader is C++ inside llama.cpp and
 * trusts the file).
 *
 * Layout (ggml docs/gguf.md): "GGUF", uint32 version, uint64 tensor count,
 * uint64 metadata count; the key/values (string key, uint32 type, value;
 * an array is uint32 element type, uint64 count, elements; a string is
 * uint64 length and bytes); the tensor infos (name, uint32 n_dims, uint64
 * dims innermost first, uint32 ggml type, uint64 offset); then the data at
 * the next multiple of general.alignment (default 32), each tensor's offset
 * relative to it and a multiple of the alignment.  Little-endian only (as
 * this host: version 3 allows big-endian files, whose version then reads as
 * 50331648 and is refused).  Every count is bounded by the bytes left before anything
 * is allocated, and every read checked against the length. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ff_gguf.h"
#include "ff_io.h"

typedef struct {
  const uint8_t *buf;
  size_t len, at;
  const char *path;
  ff_error *err;
} rd;

static const unsigned vsize[FF_GGUF_VTYPES] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
static const char *const vname[FF_GGUF_VTYPES] = {"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
                                                  "bool", "string", "array", "uint64", "int64", "float64"};

const char *ff_gguf_type_name(uint32_t t) {
  static const char *const names[] = {"F32", "F16", "Q4_0", "Q4_1", "Q4_2", "Q4_3", "Q5_0", "Q5_1", "Q8_0", "Q8_1",
                                      "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ2_XXS", "IQ2_XS",
                                      "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "I8", "I16", "I32",
                                      "I64", "F64", "IQ1_M", "BF16", "Q4_0_4_4", "Q4_0_4_8", "Q4_0_8_8", "TQ1_0",
                                      "TQ2_0", "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8", "MXFP4"};
  return t < sizeof names / sizeof *names ? names[t] : NULL;
}

static uint64_t le(const uint8_t *p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

/* n bytes at the cursor, or a message naming what was cut short */
static int take(rd *r, size_t n, const char *what, const uint8_t **p) {
  *p = NULL;
  if (r->len - r->at < n)
    return ff_fail(r->err, FF_EFORMAT, "%s: truncated in %s (at byte %zu, %zu more needed, the file has %zu)", r->path,
                   what, r->at, n, r->len);
  *p = r->buf + r->at;
  r->at += n;
  return 0;
}

static int u32(rd *r, const char *what, uint32_t *v) {
  const uint8_t *p = NULL;
  int rc = take(r, 4, what, &p);
  if (!rc) *v = (uint32_t)le(p, 4);
  return rc;
}

static int u64(rd *r, const char *what, uint64_t *v) {
  const uint8_t *p = NULL;
  int rc = take(r, 8, what, &p);
  if (!rc) *v = le(p, 8);
  return rc;
}

/* a string: its bytes at *s, *n long */
static int str(rd *r, const char *what, const uint8_t **s, uint64_t *n) {
  int rc = u64(r, what, n);
  if (!rc && *n > r->len - r->at)
    return ff_fail(r->err, FF_EFORMAT, "%s: %s: a string of %llu bytes, past the end of the file (%zu bytes)",
                   r->path, what, (unsigned long long)*n, r->len);
  return rc ? rc : take(r, (size_t)*n, what, s);
}

/* skips one value of type t (arrays nest at most 4 deep) */
static int skip_value(rd *r, uint32_t t, const char *key, int depth) {
  const uint8_t *p = NULL;
  uint64_t n = 0;
  if (t >= FF_GGUF_VTYPES)
    return ff_fail(r->err, FF_EFORMAT, "%s: key '%s': unknown value type %u", r->path, key, t);
  if (t == FF_GGUF_STRING) return str(r, key, &p, &n);
  if (t != FF_GGUF_ARRAY) return take(r, vsize[t], key, &p);
  uint32_t elem;
  int rc = u32(r, key, &elem);
  if (!rc) rc = u64(r, key, &n);
  if (rc) return rc;
  if (elem >= FF_GGUF_VTYPES || depth >= 4)
    return ff_fail(r->err, FF_EFORMAT, "%s: key '%s': %s", r->path, key,
                   depth >= 4 ? "arrays nested more than 4 deep" : "an array of an unknown value type");
  if (elem != FF_GGUF_STRING && elem != FF_GGUF_ARRAY) { /* fixed size: one check */
    if (n > (r->len - r->at) / vsize[elem])
      return ff_fail(r->err, FF_EFORMAT, "%s: key '%s': %llu %s values, past the end of the file", r->path, key,
                     (unsigned long long)n, vname[elem]);
    return take(r, (size_t)n * vsize[elem], key, &p);
  }
  for (uint64_t i = 0; i < n && !rc; i++) rc = skip_value(r, elem, key, depth + 1); /* each reads >= 8 bytes */
  return rc;
}

/* a key or a tensor name as a C string (a NUL byte in it is refused) */
static int name(rd *r, const char *what, char **out) {
  const uint8_t *s = NULL;
  uint64_t n;
  int rc = str(r, what, &s, &n);
  if (rc) return rc;
  if (!(*out = malloc((size_t)n + 1))) return ff_fail(r->err, FF_ENOMEM, "out of memory");
  memcpy(*out, s, (size_t)n);
  (*out)[n] = 0;
  return strlen(*out) != n ? ff_fail(r->err, FF_EFORMAT, "%s: %s holds a NUL byte", r->path, what) : 0;
}

static int read_kv(rd *r, ff_gguf_kv *kv) {
  int rc = name(r, "a metadata key", &kv->key);
  if (rc || (rc = u32(r, kv->key, &kv->type))) return rc;
  kv->n = 1, kv->elem = kv->type;
  size_t start = r->at;
  if (kv->type == FF_GGUF_ARRAY && r->len - r->at >= 12) {
    kv->elem = (uint32_t)le(r->buf + r->at, 4);
    kv->n = le(r->buf + r->at + 4, 8);
    start += 12;
  }
  rc = skip_value(r, kv->type, kv->key, 0);
  kv->value = r->buf + start;
  return rc;
}

/* a tensor's bytes from its type and dims; refuses the types not read */
static int tensor_bytes(rd *r, ff_gguf_tensor *t) {
  const char *tn = ff_gguf_type_name(t->type);
  if (t->type != FF_GGML_F32 && t->type != FF_GGML_F16 && t->type != FF_GGML_BF16 && t->type != FF_GGML_Q8_0) {
    if (tn) return ff_fail(r->err, FF_EFORMAT, "%s: tensor '%s' has type %s; fixformer reads F32, F16, BF16 and Q8_0",
                           r->path, t->name, tn);
    return ff_fail(r->err, FF_EFORMAT, "%s: tensor '%s' has an unknown type %u", r->path, t->name, t->type);
  }
  size_t n = 1;
  for (uint32_t i = 0; i < t->n_dims; i++)
    if (t->dims[i] == 0 || t->dims[i] > r->len || ff_size_mul(n, (size_t)t->dims[i], &n) || n > r->len)
      return ff_fail(r->err, FF_EFORMAT, "%s: tensor '%s': dimension %u is %llu, impossible in a file of %zu bytes",
                     r->path, t->name, i, (unsigned long long)t->dims[i], r->len);
  t->numel = n;
  if (t->type == FF_GGML_Q8_0) {
    if (t->dims[0] % FF_GGML_QK8_0)
      return ff_fail(r->err, FF_EFORMAT, "%s: tensor '%s' is Q8_0 but its inner dimension %llu is not a multiple of "
                     "32", r->path, t->name, (unsigned long long)t->dims[0]);
    t->bytes = n / FF_GGML_QK8_0 * 34;
  } else {
    t->bytes = n * (t->type == FF_GGML_F32 ? 4 : 2);
  }
  return 0;
}

static int read_tensor(rd *r, ff_gguf_tensor *t, uint64_t *offset) {
  int rc = name(r, "a tensor name", &t->name);
  if (rc || (rc = u32(r, t->name, &t->n_dims))) return rc;
  if (t->n_dims < 1 || t->n_dims > 4)
    return ff_fail(r->err, FF_EFORMAT, "%s: tensor '%s' has %u dimensions (1 to 4)", r->path, t->name, t->n_dims);
  for (uint32_t i = 0; i < t->n_dims && !rc; i++) rc = u64(r, t->name, &t->dims[i]);
  if (!rc) rc = u32(r, t->name, &t->type);
  if (!rc) rc = u64(r, t->name, offset);
  return rc ? rc : tensor_bytes(r, t);
}

static int by_name(const void *a, const void *b) {
  return strcmp(((const ff_gguf_tensor *)a)->name, ((const ff_gguf_tensor *)b)->name);
}

/* general.alignment (uint32, a power of two), then each tensor's data in the file */
static int place_data(rd *r, ff_gguf *g, const uint64_t *offsets) {
  const ff_gguf_kv *al = ff_gguf_find(g, "general.alignment");
  g->alignment = 32;
  if (al) {
    g->alignment = al->type == FF_GGUF_U32 ? le(al->value, 4) : 0;
    if (!g->alignment || g->alignment & (g->alignment - 1) || g->alignment > 1u << 20)
      return ff_fail(r->err, FF_EFORMAT, "%s: general.alignment is not a uint32 power of two up to 2^20", r->path);
  }
  size_t data = (r->at + (size_t)g->alignment - 1) / (size_t)g->alignment * (size_t)g->alignment;
  for (size_t i = 0; i < g->n_t; i++) {
    ff_gguf_tensor *t = &g->t[i];
    if (offsets[i] % g->alignment || data > r->len || offsets[i] > r->len - data || t->bytes > r->len - data - offsets[i])
      return ff_fail(r->err, FF_EFORMAT, "%s: tensor '%s': %zu bytes at offset %llu %s (data from byte %zu of %zu)",
                     r->path, t->name, t->bytes, (unsigned long long)offsets[i],
                     offsets[i] % g->alignment ? "not a multiple of the alignment" : "past the end of the file", data,
                     r->len);
    t->data = r->buf + data + offsets[i];
  }
  qsort(g->t, g->n_t, sizeof *g->t, by_name);
  for (size_t i = 1; i < g->n_t; i++)
    if (!strcmp(g->t[i].name, g->t[i - 1].name))
      return ff_fail(r->err, FF_EFORMAT, "%s: tensor '%s' is in the file twice", r->path, g->t[i].name);
  return 0;
}

static int header(rd *r, ff_gguf *g, uint64_t *nt, uint64_t *nkv) {
  const uint8_t *p = NULL;
  int rc = take(r, 4, "the magic", &p);
  if (rc || memcmp(p, "GGUF", 4)) return ff_fail(r->err, FF_EFORMAT, "%s: not a GGUF file (no \"GGUF\" magic)", r->path);
  if ((rc = u32(r, "the version", &g->version))) return rc;
  if (g->version != 2 && g->version != 3)
    return ff_fail(r->err, FF_EFORMAT, "%s: GGUF version %u (fixformer reads 2 and 3)", r->path, g->version);
  if (!rc) rc = u64(r, "the tensor count", nt);
  if (!rc) rc = u64(r, "the metadata count", nkv);
  if (rc) return rc;
  /* a key/value takes at least 13 bytes, a tensor info 29 */
  if (*nkv > (r->len - r->at) / 13 || *nt > (r->len - r->at) / 29)
    return ff_fail(r->err, FF_EFORMAT, "%s: %llu tensors and %llu metadata entries cannot fit in %zu bytes", r->path,
                   (unsigned long long)*nt, (unsigned long long)*nkv, r->len);
  return 0;
}

int ff_gguf_parse(const char *path, const uint8_t *buf, size_t len, ff_gguf *g, ff_error *err) {
  rd r = {buf, len, 0, path, err};
  uint64_t nt = 0, nkv = 0, *offsets = NULL;
  memset(g, 0, sizeof *g);
  int rc = header(&r, g, &nt, &nkv);
  if (!rc && (!(g->kv = calloc((size_t)nkv + 1, sizeof *g->kv)) || !(g->t = calloc((size_t)nt + 1, sizeof *g->t)) ||
              !(offsets = calloc((size_t)nt + 1, sizeof *offsets))))
    rc = ff_fail(err, FF_ENOMEM, "out of memory");
  for (uint64_t i = 0; i < nkv && !rc; i++, g->n_kv++) rc = read_kv(&r, &g->kv[i]);
  for (uint64_t i = 0; i < nt && !rc; i++, g->n_t++) rc = read_tensor(&r, &g->t[i], &offsets[i]);
  if (!rc) rc = place_data(&r, g, offsets);
  free(offsets);
  if (rc) ff_gguf_free(g);
  return rc;
}

void ff_gguf_free(ff_gguf *g) {
  for (size_t i = 0; i < g->n_kv; i++) free(g->kv[i].key); /* n_kv, n_t count a failed entry too */
  for (size_t i = 0; i < g->n_t; i++) free(g->t[i].name);
  free(g->kv);
  free(g->t);
  memset(g, 0, sizeof *g);
}

const ff_gguf_kv *ff_gguf_find(const ff_gguf *g, const char *key) {
  for (size_t i = 0; i < g->n_kv; i++)
    if (!strcmp(g->kv[i].key, key)) return &g->kv[i];
  return NULL;
}

const ff_gguf_tensor *ff_gguf_tensor_find(const ff_gguf *g, const char *name) {
  ff_gguf_tensor key;
  key.name = (char *)name;
  return g->n_t ? bsearch(&key, g->t, g->n_t, sizeof key, by_name) : NULL;
}

static int scalar(uint32_t t, const uint8_t *p, double *out) {
  uint64_t u;
  float f;
  if (t >= FF_GGUF_VTYPES || t == FF_GGUF_STRING || t == FF_GGUF_ARRAY) return -1;
  u = le(p, (int)vsize[t]);
  switch (t) {
  case FF_GGUF_I8: *out = (int8_t)u; break;
  case FF_GGUF_I16: *out = (int16_t)u; break;
  case FF_GGUF_I32: *out = (int32_t)u; break;
  case FF_GGUF_I64: *out = (double)(int64_t)u; break;
  case FF_GGUF_F32: memcpy(&f, &(uint32_t){(uint32_t)u}, 4), *out = f; break;
  case FF_GGUF_F64: memcpy(out, &u, 8); break;
  default: *out = (double)u; /* unsigned, bool */
  }
  return 0;
}

int ff_gguf_number(const ff_gguf_kv *kv, double *out) { return scalar(kv->type, kv->value, out); }

int ff_gguf_array_number(const ff_gguf_kv *kv, uint64_t i, double *out) {
  if (kv->type != FF_GGUF_ARRAY || i >= kv->n || kv->elem >= FF_GGUF_VTYPES || !vsize[kv->elem]) return -1;
  return scalar(kv->elem, kv->value + i * vsize[kv->elem], out);
}

int ff_gguf_strings(const ff_gguf_kv *kv, const char ***s, uint64_t **n) {
  uint64_t count = kv->type == FF_GGUF_ARRAY ? kv->n : 1;
  *s = NULL, *n = NULL;
  if (kv->elem != FF_GGUF_STRING) return -1;
  if (!(*s = malloc(sizeof **s * (size_t)(count + 1))) || !(*n = malloc(sizeof **n * (size_t)(count + 1)))) {
    free(*s);
    *s = NULL;
    return -1;
  }
  const uint8_t *p = kv->value; /* parsed already: every length lies in the file */
  for (uint64_t i = 0; i < count; i++) {
    (*n)[i] = le(p, 8);
    (*s)[i] = (const char *)p + 8;
    p += 8 + (*n)[i];
  }
  return 0;
}

void ff_gguf_floats(const ff_gguf_tensor *t, float *out) {
  const uint8_t *p = t->data;
  if (t->type == FF_GGML_F32) {
    for (uint64_t i = 0; i < t->numel; i++) {
      uint32_t u = (uint32_t)le(p + 4 * i, 4);
      memcpy(&out[i], &u, 4);
    }
  } else if (t->type == FF_GGML_F16 || t->type == FF_GGML_BF16) {
    for (uint64_t i = 0; i < t->numel; i++) {
      uint16_t h = (uint16_t)le(p + 2 * i, 2);
      out[i] = t->type == FF_GGML_F16 ? ff_half_to_float(h) : ff_bf16_to_float(h);
    }
  } else { /* Q8_0: d (f16), then 32 int8 */
    for (uint64_t b = 0; b < t->numel / FF_GGML_QK8_0; b++, p += 34) {
      float d = ff_half_to_float((uint16_t)le(p, 2));
      for (int k = 0; k < FF_GGML_QK8_0; k++) out[b * FF_GGML_QK8_0 + k] = (float)(int8_t)p[2 + k] * d;
    }
  }
}
