/* ff_gguf.h - GGUF files (formats/gguf.c): llama.cpp's container, versions
 * 2 and 3 (little-endian), as the published spec (ggml docs/gguf.md) lays
 * it out.  Internal: import reads it; not installed. */
#ifndef FF_GGUF_H
#define FF_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "ff_error.h"

/* the metadata value types of the spec */
enum ff_gguf_vtype {
  FF_GGUF_U8, FF_GGUF_I8, FF_GGUF_U16, FF_GGUF_I16, FF_GGUF_U32, FF_GGUF_I32, FF_GGUF_F32, FF_GGUF_BOOL,
  FF_GGUF_STRING, FF_GGUF_ARRAY, FF_GGUF_U64, FF_GGUF_I64, FF_GGUF_F64, FF_GGUF_VTYPES
};

/* the tensor types read (ggml_type's numbers); every other is refused naming it */
enum { FF_GGML_F32 = 0, FF_GGML_F16 = 1, FF_GGML_Q8_0 = 8, FF_GGML_BF16 = 30 };
#define FF_GGML_QK8_0 32 /* Q8_0: a block is an f16 scale and 32 int8, along the innermost dimension */

typedef struct {
  char *key;             /* NUL-terminated copy */
  uint32_t type;         /* enum ff_gguf_vtype */
  uint32_t elem;         /* an array's element type */
  uint64_t n;            /* an array's element count (1 otherwise) */
  const uint8_t *value;  /* the value's bytes in the file (an array's first element) */
} ff_gguf_kv;

typedef struct {
  char *name;
  uint32_t n_dims;
  uint64_t dims[4];      /* innermost first: a matrix [rows, cols] is dims {cols, rows} */
  uint32_t type;
  uint64_t numel;
  const uint8_t *data;   /* checked to lie in the file */
  size_t bytes;
} ff_gguf_tensor;

typedef struct ff_gguf {
  uint32_t version;
  uint64_t alignment;
  ff_gguf_kv *kv;
  size_t n_kv;
  ff_gguf_tensor *t;
  size_t n_t;
} ff_gguf;

/* Parses buf (len bytes, kept by the caller while g is used): every count,
 * size and offset checked against len; a tensor type other than F32, F16,
 * BF16 and Q8_0 is refused naming it.  0, or FF_E* with one line naming
 * path and the problem. */
int ff_gguf_parse(const char *path, const uint8_t *buf, size_t len, ff_gguf *g, ff_error *err);
void ff_gguf_free(ff_gguf *g);
const char *ff_gguf_type_name(uint32_t ggml_type);
const ff_gguf_kv *ff_gguf_find(const ff_gguf *g, const char *key);
const ff_gguf_tensor *ff_gguf_tensor_find(const ff_gguf *g, const char *name);
/* a scalar integer (any integer type, bool) or number of kv as a double; 0 or -1 when kv is not one */
int ff_gguf_number(const ff_gguf_kv *kv, double *out);
/* array element i as a double (numeric arrays), or string element: at and len (i counts from 0) */
int ff_gguf_array_number(const ff_gguf_kv *kv, uint64_t i, double *out);
/* The strings of a string array (or the one string of a string kv): s[i], n[i]
 * into the file; arrays of n entries the caller frees.  0 or -1. */
int ff_gguf_strings(const ff_gguf_kv *kv, const char ***s, uint64_t **n);
/* A tensor's values as float32 (F16 / BF16 exact, Q8_0 as scale * q). */
void ff_gguf_floats(const ff_gguf_tensor *t, float *out);

#endif
