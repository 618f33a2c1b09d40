/* kernels.c - the reference kernels, one function per component of the
 * transformer.  Plain loops in the order of the formulas; accumulation in
 * float like PyTorch's CPU kernels, except where a sum over a whole row is
 * taken (norms, softmax), which uses double to stay well inside 1e-5. */
#include <math.h>
#include <string.h>

#include "ff_runtime.h"

/* x[t,:] = E[token_t,:] * sqrt(d) */
int ff_rt_embed(const int32_t *tokens, int T, const float *E, int vocab, int d, int scale,
                float *x, ff_error *err) {
  float s = scale ? sqrtf((float)d) : 1.0f;
  for (int t = 0; t < T; t++) {
    int32_t id = tokens[t];
    if (id < 0 || id >= vocab)
      return ff_fail(err, FF_ETOKEN, "token id %ld at position %d is outside the vocabulary [0, %d)",
                     (long)id, t, vocab);
    const float *e = E + (size_t)id * d;
    for (int i = 0; i < d; i++) x[(size_t)t * d + i] = e[i] * s;
  }
  return FF_OK;
}

double ff_rt_sinusoid_angle(double pos, int i, int d) { return pos / pow(10000.0, (double)(2 * i) / d); }

/* PE(pos, 2i) = sin(pos / 10000^(2i/d)),  PE(pos, 2i+1) = cos(pos / 10000^(2i/d)).
 * Computed in double and rounded, like a float32 table built in float64. */
void ff_rt_add_sinusoidal(float *x, int T, int d, int pos0) {
  for (int t = 0; t < T; t++) {
    for (int j = 0; j < d; j++) {
      double angle = ff_rt_sinusoid_angle((double)(pos0 + t), j / 2, d);
      x[(size_t)t * d + j] += (float)((j & 1) ? cos(angle) : sin(angle));
    }
  }
}

/* x[t,:] += P[pos0 + t,:] */
void ff_rt_add_learned(float *x, int T, int d, int pos0, const float *P) {
  for (int t = 0; t < T; t++)
    for (int j = 0; j < d; j++) x[(size_t)t * d + j] += P[(size_t)(pos0 + t) * d + j];
}

void ff_rt_add_row(float *x, int T, int d, const float *r) {
  for (int t = 0; t < T; t++)
    for (int j = 0; j < d; j++) x[(size_t)t * d + j] += r[j];
}

float ff_rt_rope_freq(int i, int d_k, float theta) {
  return (float)(1.0 / pow((double)theta, (double)(2 * i) / d_k));
}

/* The RoPE rotation of pair i at position pos: the angle pos * theta^(-2i/d_k),
 * its inverse frequency rounded to float and the product taken in float, as
 * Hugging Face and llama2.c compute it. */
void ff_rt_rope_angle(int pos, int i, int d_k, float theta, float *c, float *s) {
  float angle = (float)pos * ff_rt_rope_freq(i, d_k, theta);
  *c = cosf(angle);
  *s = sinf(angle);
}

/* RoPE: for pair i < d_k/2 of each head, rotated by ff_rt_rope_angle,
 * (a, b) = (x[i], x[i + d_k/2]) (rotate_half) or (x[2i], x[2i+1]) (interleaved):
 *   a' = a cos - b sin,   b' = b cos + a sin. */
void ff_rt_rope(float *x, int ldx, int T, int heads, int d_k, int pos0, float theta, enum ff_rope_pairing pairing) {
  ff_rt_rope_rotate(x, ldx, T, heads, d_k, pos0, theta, pairing, 1.0f);
}

/* The same rotation by sign * the angle (sin times sign). */
void ff_rt_rope_rotate(float *x, int ldx, int T, int heads, int d_k, int pos0, float theta,
                       enum ff_rope_pairing pairing, float sign) {
  int half = d_k / 2, inter = pairing == FF_ROPE_INTERLEAVED;
  for (int t = 0; t < T; t++) {
    for (int i = 0; i < half; i++) {
      float c, s;
      ff_rt_rope_angle(pos0 + t, i, d_k, theta, &c, &s);
      s *= sign;
      int ia = inter ? 2 * i : i, ib = inter ? 2 * i + 1 : i + half;
      for (int h = 0; h < heads; h++) {
        float *xh = x + (size_t)t * ldx + (size_t)h * d_k;
        float a = xh[ia], b = xh[ib];
        xh[ia] = a * c - b * s;
        xh[ib] = b * c + a * s;
      }
    }
  }
}

/* y = x W^T + b:  y[r,o] = b[o] + sum_i x[r,i] W[o,i] */
void ff_rt_linear(const float *x, int n, int in, const float *W, const float *b, int out, float *y) {
  for (int r = 0; r < n; r++) {
    const float *xr = x + (size_t)r * in;
    for (int o = 0; o < out; o++) {
      const float *w = W + (size_t)o * in;
      float acc = 0.0f;
      for (int i = 0; i < in; i++) acc += xr[i] * w[i];
      y[(size_t)r * out + o] = acc + (b ? b[o] : 0.0f);
    }
  }
}

/* x rounded to the nearest integer, ties to even (|x| <= 2^22), as kernels/int8.c */
static int round_even(float v) {
  int q = (int)v;
  const float d = v - (float)q;
  if (d > 0.5f || (d == 0.5f && (q & 1))) q++;
  else if (d < -0.5f || (d == -0.5f && (q & 1))) q--;
  return q;
}

/* y [r, :] = scale (row . W^T) in double sums, + b */
static void linear_row(const float *row, float scale, int in, const float *W, const float *b, int out, float *y) {
  for (int o = 0; o < out; o++) {
    const float *w = W + (size_t)o * in;
    double acc = 0.0;
    for (int i = 0; i < in; i++) acc += (double)row[i] * w[i];
    y[o] = (float)(scale * acc) + (b ? b[o] : 0.0f);
  }
}

void ff_rt_linear_int8(const float *x, int n, int in, const float *W, const float *b, int out, float *y,
                       float *row) {
  for (int r = 0; r < n; r++) {
    const float *xr = x + (size_t)r * in;
    float amax = 0.0f;
    int finite = 1;
    for (int i = 0; i < in; i++) {
      finite &= isfinite(xr[i]) != 0;
      amax = fabsf(xr[i]) > amax ? fabsf(xr[i]) : amax;
    }
    const float inv = finite && amax >= 1e-30f ? 127.0f / amax : 0.0f;
    for (int i = 0; i < in; i++) { /* the row's q, once (0 where it is not finite) */
      const float v = xr[i] * inv;
      const int q = finite ? round_even(v) : 0;
      row[i] = (float)(q > 127 ? 127 : q < -127 ? -127 : q);
    }
    linear_row(row, !finite ? NAN : inv > 0.0f ? amax / 127.0f : 0.0f, in, W, b, out, y + (size_t)r * out);
  }
}

void ff_rt_linear_bf16(const float *x, int n, int in, const float *W, const float *b, int out, float *y,
                       float *row) {
  for (int r = 0; r < n; r++) {
    for (int i = 0; i < in; i++) row[i] = ff_bf16_value(ff_bf16_round(x[(size_t)r * in + i]));
    linear_row(row, 1.0f, in, W, b, out, y + (size_t)r * out);
  }
}

/* LayerNorm(x) = (x - mean) / sqrt(var + eps) * w + b, var biased (/ d). */
void ff_rt_layernorm(const float *x, int n, int d, const float *w, const float *b, float eps, float *y) {
  for (int r = 0; r < n; r++) {
    const float *xr = x + (size_t)r * d;
    double mean = 0.0, var = 0.0;
    for (int i = 0; i < d; i++) mean += xr[i];
    mean /= d;
    for (int i = 0; i < d; i++) var += (xr[i] - mean) * (xr[i] - mean);
    var /= d;
    float rstd = (float)(1.0 / sqrt(var + eps));
    for (int i = 0; i < d; i++)
      y[(size_t)r * d + i] = (float)(xr[i] - mean) * rstd * w[i] + (b ? b[i] : 0.0f);
  }
}

/* RMSNorm(x) = x / sqrt(mean(x^2) + eps) * w */
void ff_rt_rmsnorm(const float *x, int n, int d, const float *w, float eps, float *y) {
  for (int r = 0; r < n; r++) {
    const float *xr = x + (size_t)r * d;
    double ms = 0.0;
    for (int i = 0; i < d; i++) ms += (double)xr[i] * xr[i];
    float rstd = (float)(1.0 / sqrt(ms / d + eps));
    for (int i = 0; i < d; i++) y[(size_t)r * d + i] = xr[i] * rstd * w[i];
  }
}

/* relu(x) = max(0, x);  gelu(x) = x/2 (1 + erf(x/sqrt 2));
 * gelu_tanh(x) = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)));  silu(x) = x / (1 + e^-x) */
void ff_rt_activate(enum ff_activation act, float *x, size_t n) {
  for (size_t i = 0; i < n; i++) {
    float v = x[i];
    switch (act) {
    case FF_ACT_RELU: x[i] = v < 0.0f ? 0.0f : v; break; /* NaN stays NaN, as torch.relu */
    case FF_ACT_GELU: x[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f)); break;
    case FF_ACT_GELU_TANH:
      x[i] = 0.5f * v * (1.0f + tanhf(0.79788456080286536f * (v + 0.044715f * v * v * v)));
      break;
    case FF_ACT_SILU: x[i] = v / (1.0f + expf(-v)); break;
    case FF_ACT_SWIGLU: break; /* gated: see ff_rt_swiglu */
    }
  }
}

/* SwiGLU(gate, up) = silu(gate) * up,  silu(g) = g / (1 + e^-g) */
void ff_rt_swiglu(const float *h, int n, int f, float *y) {
  for (int r = 0; r < n; r++) {
    const float *gate = h + (size_t)r * 2 * f, *up = gate + f;
    for (int i = 0; i < f; i++) y[(size_t)r * f + i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
  }
}

/* Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k) + mask) V, per head; query
 * head h reads K/V head h / (heads / kv_heads) (grouped-query attention). */
void ff_rt_attention(const float *q, int ldq, const float *k, const float *v, int ldk, int Tq,
                     int Tk, int heads, int kv_heads, int d_k, int key_len, int causal, int q_pos0,
                     float *scores, float *out) {
  float scale = 1.0f / sqrtf((float)d_k);
  int d = heads * d_k, group = heads / kv_heads;
  for (int h = 0; h < heads; h++) {
    size_t kvh = (size_t)(h / group) * d_k; /* the shared K/V head's columns */
    for (int t = 0; t < Tq; t++) {
      const float *qt = q + (size_t)t * ldq + (size_t)h * d_k;
      int visible = key_len; /* keys 0..visible-1 are unmasked */
      if (causal && q_pos0 + t + 1 < visible) visible = q_pos0 + t + 1;
      if (visible > Tk) visible = Tk;
      float max = -INFINITY;
      for (int j = 0; j < visible; j++) { /* scores = q k^T / sqrt(d_k) */
        const float *kj = k + (size_t)j * ldk + kvh;
        float s = 0.0f;
        for (int i = 0; i < d_k; i++) s += qt[i] * kj[i];
        scores[j] = s * scale;
        if (scores[j] > max) max = scores[j];
      }
      double sum = 0.0; /* softmax with the row max subtracted; masked keys are exp(-inf) = 0 */
      for (int j = 0; j < visible; j++) {
        scores[j] = expf(scores[j] - max);
        sum += scores[j];
      }
      float *ot = out + (size_t)t * d + (size_t)h * d_k;
      for (int i = 0; i < d_k; i++) ot[i] = 0.0f;
      if (visible == 0) continue; /* every key masked: PyTorch gives NaN; keep 0 */
      float inv = (float)(1.0 / sum);
      for (int j = 0; j < visible; j++) { /* out = P V */
        const float *vj = v + (size_t)j * ldk + kvh;
        float p = scores[j] * inv;
        for (int i = 0; i < d_k; i++) ot[i] += p * vj[i];
      }
    }
  }
}
