/* quant.c - the weight types (description key `dtype`): bfloat16 and int8
 * with a scale per group of FF_Q8_GROUP inputs, as formulas the packer
 * (host/codegen.c) stores and the runtime's reference computes with.
 *
 * Which tensors: the weight kinds include/ff_schema.h marks FF_IS_QUANTIZED,
 * the matrices linear ops multiply by and the token embedding table
 * (ff_weight_quantized); each row W[r, :] (one output's
 * weights over the inputs) is split into groups along its columns.
 *   bf16: round to nearest even, as torch's .to(torch.bfloat16); the value
 *         is the bits shifted up 16: exact in float32.
 *   int8: scale = max|w| / 127 over the group (GGML's Q8_0, llama2.c's
 *         runq.c); q = round(w / scale), half away from zero; an all-zero
 *         group has scale 0 and q 0.  The value is (float)q * scale.  A
 *         subnormal scale (max|w| < 1.5e-36) is coarse: rounded down, or to
 *         0, it would put q past 127 (max|w| below about 2e-41), so the next
 *         scales up are taken until max|w| / scale < 127.5; q is clamped to
 *         [-127, 127] whatever the input (the conversion is then defined).
 * The reference quantizes the weights once and computes in float32 after,
 * which is what every kernel computes too (it dequantizes in registers). */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ff_runtime.h"

const char *ff_weight_type_name(enum ff_weight_type t) {
  return t == FF_WEIGHT_BF16 || t == FF_WEIGHT_INT8 ? ff_rt_keys[FF_KEY_dtype].values[t] : "f32"; /* the key's words */
}

uint16_t ff_bf16_round(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x40u); /* NaN stays NaN, quiet */
  return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

float ff_bf16_value(uint16_t h) {
  const uint32_t u = (uint32_t)h << 16;
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

/* round(v) in [-127, 127] (NaN: 0): an out-of-range float -> int8 cast is undefined */
static int8_t q8_value(float v) {
  v = roundf(v);
  return (int8_t)(v >= 127.0f ? 127 : v <= -127.0f ? -127 : v == v ? (int)v : 0);
}

float ff_q8_scale(const float *w, size_t n) {
  float amax = 0.0f;
  for (size_t i = 0; i < n; i++) amax = fabsf(w[i]) > amax ? fabsf(w[i]) : amax;
  float scale = amax / 127.0f;
  /* a subnormal scale is coarse (to 0 below 63.5 * 2^-149): up a step or two until the max fits */
  while (amax > 0.0f && amax <= FLT_MAX && !(amax / scale < 127.5f)) scale = nextafterf(scale, FLT_MAX);
  return scale;
}

int8_t ff_q8_value(float w, float scale) { return scale > 0.0f ? q8_value(w / scale) : 0; }

/* ff_q8_value of a group, the same values without libm's roundf or a branch
 * a weight (packing calls it once a weight: a new 110M file's int8 start
 * spent 40 % of its time there): with a finite scale, |w / scale| < 127.5
 * (ff_q8_scale), so its integer part r and the rest d = w / scale - r are
 * exact, and roundf's halves away from zero are d >= 0.5 and d <= -0.5. */
float ff_q8_group(const float *w, int n, int8_t *q) {
  const float scale = ff_q8_scale(w, (size_t)n);
  if (!(scale > 0.0f && scale <= FLT_MAX)) {
    for (int i = 0; i < n; i++) q[i] = ff_q8_value(w[i], scale);
    return scale;
  }
  for (int i = 0; i < n; i++) {
    const float v = w[i] / scale;
    int r = (int)v;
    const float d = v - (float)r;
    r += (d >= 0.5f) - (d <= -0.5f);
    q[i] = (int8_t)(r > 127 ? 127 : r < -127 ? -127 : r);
  }
  return scale;
}

int ff_weight_quantized(const ff_weight_spec *s) {
  return s->rank == 2 && (ff_rt_weight_kinds[s->kind].flags & FF_IS_QUANTIZED); /* include/ff_schema.h */
}

int ff_all_finite(const float *w, size_t n) {
  uint32_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, w + i, sizeof u);
    bad |= (u & 0x7F800000u) == 0x7F800000u; /* an infinity or a NaN */
  }
  return !bad;
}

int ff_q8_check_finite(const float *w, size_t n, const char *name, ff_error *err) {
  if (ff_all_finite(w, n)) return 0;
  for (size_t i = 0; i < n; i++)
    if (!isfinite(w[i]))
      return ff_fail(err, FF_EINVAL, "tensor '%s': a weight is not finite (%g); int8 cannot store it (use "
                     "dtype f32 or bf16)", name, (double)w[i]);
  return 0;
}

int ff_quantize_row(enum ff_weight_type t, float *w, int n, const char *name, ff_error *err) {
  if (t == FF_WEIGHT_BF16) {
    for (int i = 0; i < n; i++) w[i] = ff_bf16_value(ff_bf16_round(w[i]));
    return 0;
  }
  int rc;
  if (t != FF_WEIGHT_INT8) return 0;
  if ((rc = ff_q8_check_finite(w, (size_t)n, name, err))) return rc;
  for (int g = 0; g < n; g += FF_Q8_GROUP) {
    const int k = n - g < FF_Q8_GROUP ? n - g : FF_Q8_GROUP;
    int8_t q[FF_Q8_GROUP];
    const float scale = ff_q8_group(w + g, k, q);
    for (int i = 0; i < k; i++) w[g + i] = (float)q[i] * scale;
  }
  return 0;
}

/* ---- the reference model of a weight type ----------------------------------- */

int ff_compute_weight(const ff_weight_spec *s) { return s->matrix && s->layer >= 0; }

int ff_quantize_channel(float *w, int n, const char *name, ff_error *err) {
  int rc = ff_q8_check_finite(w, (size_t)n, name, err);
  if (rc) return rc;
  const float scale = ff_q8_scale(w, (size_t)n);
  for (int i = 0; i < n; i++) w[i] = (float)ff_q8_value(w[i], scale) * scale;
  return 0;
}

typedef struct {
  const ff_rt_model *src;
  ff_tensor_file *copy;
  enum ff_weight_type type;
  enum ff_compute compute;
  ff_error *err;
} quantizer;

static int quantize_one(void *ctx, const ff_weight_spec *s) {
  quantizer *z = ctx;
  const int own = z->compute != FF_COMPUTE_F32 && ff_compute_weight(s); /* stored as the compute type says */
  const int channels = own && z->compute == FF_COMPUTE_INT8;
  const enum ff_weight_type type = own ? FF_WEIGHT_BF16 : z->type; /* (int8's own: ff_quantize_channel) */
  if (!own && !ff_weight_quantized(s)) return 0;
  for (int i = 0; i < z->copy->count; i++) {
    ff_tensor *t = &z->copy->tensors[i];
    if (strcmp(t->name, s->name)) continue;
    for (int r = 0; r < s->shape[0]; r++) {
      float *row = t->data + (size_t)r * s->shape[1];
      int rc = channels ? ff_quantize_channel(row, s->shape[1], s->name, z->err)
                        : ff_quantize_row(type, row, s->shape[1], s->name, z->err);
      if (rc) return rc;
    }
    return 0;
  }
  return 0;
}

/* A deep copy of f: one block for the tensor list, the names and the data. */
static int copy_file(const ff_tensor_file *f, ff_tensor_file *out, ff_error *err) {
  size_t bytes = sizeof(ff_tensor) * (size_t)(f->count + 1);
  for (int i = 0; i < f->count; i++) /* name, up to 3 bytes to align the floats, the floats */
    bytes += strlen(f->tensors[i].name) + 1 + 3 + f->tensors[i].numel * 4;
  char *block = malloc(bytes), *p;
  if (!block) return ff_fail(err, FF_ENOMEM, "out of memory for the quantized weights");
  memset(out, 0, sizeof *out);
  out->tensors = (ff_tensor *)(void *)block;
  p = block + sizeof(ff_tensor) * (size_t)(f->count + 1);
  for (int i = 0; i < f->count; i++) {
    const ff_tensor *t = &f->tensors[i];
    ff_tensor *c = &out->tensors[i];
    *c = *t;
    p += (uintptr_t)(-(intptr_t)(uintptr_t)p) & 3u; /* float-aligned */
    c->data = (float *)(void *)p;
    memcpy(c->data, t->data, t->numel * sizeof(float));
    p += t->numel * sizeof(float);
    c->name = p;
    memcpy(c->name, t->name, strlen(t->name) + 1);
    p += strlen(t->name) + 1;
  }
  out->count = f->count;
  out->storage = NULL; /* the block is out->tensors: ff_tensor_file_free frees it */
  return 0;
}

int ff_rt_model_quantized(const ff_rt_model *src, enum ff_weight_type t, enum ff_compute compute, ff_rt_model *dst,
                          ff_error *err) {
  ff_tensor_file copy;
  memset(dst, 0, sizeof *dst);
  int rc = copy_file(&src->file, &copy, err);
  if (rc) return rc;
  quantizer z = {src, &copy, t, compute, err};
  if ((rc = ff_rt_visit_weights(&src->cfg, NULL, quantize_one, &z))) {
    ff_tensor_file_free(&copy);
    return rc;
  }
  if ((rc = ff_rt_model_bind(dst, &src->cfg, &copy, err))) return rc;
  dst->cfg.compute = compute; /* (bind computes in f32) */
  return 0;
}
