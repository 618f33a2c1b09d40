/* backward.c - the loss and the backward of each reference kernel
 * (kernels.c), plain loops under their formulas.  Every backward adds (+=)
 * into its outputs, so the uses of one value sum their gradients; sums over
 * a whole row are taken in double, as the forward takes them. */
#include <math.h>
#include <string.h>

#include "ff_rt_train.h"

/* loss = (1 - s)(lse - l_y) + s mean_k (lse - l_k),  lse = log sum_k e^(l_k);
 * d loss / d l_k = softmax_k - (1 - s) [k = y] - s / V. */
int ff_rt_cross_entropy(const float *logits, int n, int V, const int32_t *labels, int ignore, float smoothing,
                        float *dlogits, double *loss_sum, int64_t *count, ff_error *err) {
  double total = 0.0, s = smoothing;
  int64_t k = 0;
  for (int r = 0; r < n; r++) {
    const float *l = logits + (size_t)r * V;
    float *dl = dlogits ? dlogits + (size_t)r * V : NULL;
    int32_t y = labels[r];
    if (y == ignore) {
      if (dl) memset(dl, 0, (size_t)V * sizeof *dl);
      continue;
    }
    if (y < 0 || y >= V)
      return ff_fail(err, FF_ETOKEN, "label %ld at row %d is outside the vocabulary [0, %d)", (long)y, r, V);
    double max = l[0], sum = 0.0, mean = 0.0;
    for (int j = 1; j < V; j++) max = l[j] > max ? l[j] : max;
    for (int j = 0; j < V; j++) sum += exp(l[j] - max);
    double lse = max + log(sum);
    for (int j = 0; j < V; j++) mean += lse - l[j];
    total += (1.0 - s) * (lse - l[y]) + s * mean / V;
    k++;
    for (int j = 0; dl && j < V; j++) dl[j] = (float)(exp(l[j] - lse) - s / V - (j == y ? 1.0 - s : 0.0));
  }
  *loss_sum = total;
  *count = k;
  return FF_OK;
}

/* y[r,o] = b[o] + sum_i x[r,i] W[o,i]:
 *   dx[r,i] += sum_o dy[r,o] W[o,i],  dW[o,i] += sum_r dy[r,o] x[r,i],  db[o] += sum_r dy[r,o] */
void ff_rt_linear_backward(const float *x, int n, int in, const float *W, int out, const float *dy, float *dx,
                           float *dW, float *db) {
  for (int r = 0; r < n; r++) {
    const float *xr = x + (size_t)r * in, *dyr = dy + (size_t)r * out;
    float *dxr = dx ? dx + (size_t)r * in : NULL;
    for (int o = 0; o < out; o++) {
      float g = dyr[o];
      const float *w = W + (size_t)o * in;
      float *dw = dW ? dW + (size_t)o * in : NULL;
      if (db) db[o] += g;
      for (int i = 0; dw && i < in; i++) dw[i] += g * xr[i];
      for (int i = 0; dxr && i < in; i++) dxr[i] += g * w[i];
    }
  }
}

/* Mean and 1/sqrt(var + eps) of a row, as ff_rt_layernorm computes them. */
static float layernorm_stats(const float *x, int d, float eps, double *mean) {
  double m = 0.0, var = 0.0;
  for (int i = 0; i < d; i++) m += x[i];
  m /= d;
  for (int i = 0; i < d; i++) var += (x[i] - m) * (x[i] - m);
  *mean = m;
  return (float)(1.0 / sqrt(var / d + eps));
}

/* y = xhat w + b, xhat = (x - mean) rstd, g = dy w:
 *   dw += sum_rows dy xhat,  db += sum_rows dy,
 *   dx += rstd (g - mean(g) - xhat mean(g xhat))   (biased variance) */
void ff_rt_layernorm_backward(const float *x, int n, int d, const float *w, float eps, const float *dy, float *dx,
                              float *dw, float *db) {
  for (int r = 0; r < n; r++) {
    const float *xr = x + (size_t)r * d, *dyr = dy + (size_t)r * d;
    double mean, mg = 0.0, mgx = 0.0;
    float rstd = layernorm_stats(xr, d, eps, &mean);
    for (int i = 0; i < d; i++) {
      float xhat = (float)(xr[i] - mean) * rstd, g = dyr[i] * w[i];
      mg += g;
      mgx += (double)g * xhat;
      if (dw) dw[i] += dyr[i] * xhat;
      if (db) db[i] += dyr[i];
    }
    mg /= d, mgx /= d;
    for (int i = 0; dx && i < d; i++) {
      float xhat = (float)(xr[i] - mean) * rstd;
      dx[(size_t)r * d + i] += (float)(rstd * (dyr[i] * w[i] - mg - xhat * mgx));
    }
  }
}

/* y = x rstd w, rstd = 1/sqrt(mean(x^2) + eps), xhat = x rstd, g = dy w:
 *   dw += sum_rows dy xhat,  dx += rstd (g - xhat mean(g xhat)) */
void ff_rt_rmsnorm_backward(const float *x, int n, int d, const float *w, float eps, const float *dy, float *dx,
                            float *dw) {
  for (int r = 0; r < n; r++) {
    const float *xr = x + (size_t)r * d, *dyr = dy + (size_t)r * d;
    double ms = 0.0, mgx = 0.0;
    for (int i = 0; i < d; i++) ms += (double)xr[i] * xr[i];
    float rstd = (float)(1.0 / sqrt(ms / d + eps));
    for (int i = 0; i < d; i++) {
      float xhat = xr[i] * rstd;
      mgx += (double)dyr[i] * w[i] * xhat;
      if (dw) dw[i] += dyr[i] * xhat;
    }
    mgx /= d;
    for (int i = 0; dx && i < d; i++)
      dx[(size_t)r * d + i] += (float)(rstd * (dyr[i] * w[i] - xr[i] * rstd * mgx));
  }
}

/* relu'(x) = [x > 0];  gelu'(x) = Phi(x) + x phi(x);
 * gelu_tanh'(x) = (1 + t)/2 + x/2 (1 - t^2) k (1 + 3 c x^2),  t = tanh(k (x + c x^3)),
 * k = sqrt(2/pi), c = 0.044715;  silu'(x) = s (1 + x (1 - s)), s = sigmoid(x) */
void ff_rt_activate_backward(enum ff_activation act, const float *x, const float *dy, float *dx, size_t n) {
  const float k = 0.79788456080286536f, c = 0.044715f;
  for (size_t i = 0; i < n; i++) {
    float v = x[i], slope = 1.0f;
    switch (act) {
    case FF_ACT_RELU: slope = v > 0.0f ? 1.0f : 0.0f; break;
    case FF_ACT_GELU:
      slope = 0.5f * (1.0f + erff(v * 0.70710678118654752f)) + v * 0.39894228040143268f * expf(-0.5f * v * v);
      break;
    case FF_ACT_GELU_TANH: {
      float t = tanhf(k * (v + c * v * v * v));
      slope = 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * k * (1.0f + 3.0f * c * v * v);
      break;
    }
    case FF_ACT_SILU: {
      float s = 1.0f / (1.0f + expf(-v));
      slope = s * (1.0f + v * (1.0f - s));
      break;
    }
    case FF_ACT_SWIGLU: break; /* gated: see ff_rt_swiglu_backward */
    }
    dx[i] += dy[i] * slope;
  }
}

/* y = silu(g) u, silu(g) = g s, s = sigmoid(g):
 *   du += dy silu(g),  dg += dy u s (1 + g (1 - s)) */
void ff_rt_swiglu_backward(const float *h, int n, int f, const float *dy, float *dh) {
  for (int r = 0; r < n; r++) {
    const float *gate = h + (size_t)r * 2 * f, *up = gate + f, *dyr = dy + (size_t)r * f;
    float *dgate = dh + (size_t)r * 2 * f, *dup = dgate + f;
    for (int i = 0; i < f; i++) {
      float s = 1.0f / (1.0f + expf(-gate[i]));
      dup[i] += dyr[i] * gate[i] * s;
      dgate[i] += dyr[i] * up[i] * s * (1.0f + gate[i] * (1.0f - s));
    }
  }
}

/* The forward rotates (a, b) by the angle: [a'; b'] = [c -s; s c] [a; b].
 * Its transpose is the rotation back:  da = da' c + db' s,  db = db' c - da' s. */
void ff_rt_rope_backward(float *dy, int ldx, int T, int heads, int d_k, int pos0, float theta,
                         enum ff_rope_pairing pairing) {
  ff_rt_rope_rotate(dy, ldx, T, heads, d_k, pos0, theta, pairing, -1.0f);
}

/* P = softmax(Q K^T / sqrt(d_k) + mask) per head, exactly as ff_rt_attention
 * computes it; masked keys get 0. */
void ff_rt_attention_probs(const float *q, int ldq, const float *k, int ldk, int Tq, int Tk, int heads,
                           int kv_heads, int d_k, int key_len, int causal, int q_pos0, float *probs) {
  float scale = 1.0f / sqrtf((float)d_k);
  int group = heads / kv_heads;
  for (int h = 0; h < heads; h++) {
    size_t kvh = (size_t)(h / group) * d_k;
    for (int t = 0; t < Tq; t++) {
      const float *qt = q + (size_t)t * ldq + (size_t)h * d_k;
      float *p = probs + ((size_t)h * Tq + t) * Tk;
      int visible = key_len;
      if (causal && q_pos0 + t + 1 < visible) visible = q_pos0 + t + 1;
      if (visible > Tk) visible = Tk;
      float max = -INFINITY;
      for (int j = 0; j < visible; j++) {
        const float *kj = k + (size_t)j * ldk + kvh;
        float s = 0.0f;
        for (int i = 0; i < d_k; i++) s += qt[i] * kj[i];
        p[j] = s * scale;
        if (p[j] > max) max = p[j];
      }
      double sum = 0.0;
      for (int j = 0; j < visible; j++) {
        p[j] = expf(p[j] - max);
        sum += p[j];
      }
      float inv = visible ? (float)(1.0 / sum) : 0.0f;
      for (int j = 0; j < visible; j++) p[j] *= inv;
      for (int j = visible; j < Tk; j++) p[j] = 0.0f;
    }
  }
}

/* out[t, h] = sum_j P[h,t,j] V[j, h / group] (zero weights skipped: the masked keys) */
void ff_rt_attention_context(const float *probs, const float *v, int ldk, int Tq, int Tk, int heads, int kv_heads,
                             int d_k, float *out) {
  int d = heads * d_k, group = heads / kv_heads;
  for (int h = 0; h < heads; h++) {
    size_t kvh = (size_t)(h / group) * d_k;
    for (int t = 0; t < Tq; t++) {
      const float *p = probs + ((size_t)h * Tq + t) * Tk;
      float *ot = out + (size_t)t * d + (size_t)h * d_k;
      for (int i = 0; i < d_k; i++) ot[i] = 0.0f;
      for (int j = 0; j < Tk; j++) {
        if (p[j] == 0.0f) continue;
        const float *vj = v + (size_t)j * ldk + kvh;
        for (int i = 0; i < d_k; i++) ot[i] += p[j] * vj[i];
      }
    }
  }
}

/* out = P V:  dP[h,t,j] += dout[t,h] . V[j,h],  dV[j,h] += sum_t P[h,t,j] dout[t,h] */
void ff_rt_attention_context_backward(const float *probs, const float *v, int ldk, int Tq, int Tk, int heads,
                                      int kv_heads, int d_k, const float *dout, float *dprobs, float *dv) {
  int d = heads * d_k, group = heads / kv_heads;
  for (int h = 0; h < heads; h++) {
    size_t kvh = (size_t)(h / group) * d_k;
    for (int t = 0; t < Tq; t++) {
      const float *p = probs + ((size_t)h * Tq + t) * Tk, *g = dout + (size_t)t * d + (size_t)h * d_k;
      float *dp = dprobs + ((size_t)h * Tq + t) * Tk;
      for (int j = 0; j < Tk; j++) {
        const float *vj = v + (size_t)j * ldk + kvh;
        float *dvj = dv + (size_t)j * ldk + kvh, acc = 0.0f;
        for (int i = 0; i < d_k; i++) acc += g[i] * vj[i];
        dp[j] += acc;
        for (int i = 0; p[j] != 0.0f && i < d_k; i++) dvj[i] += p[j] * g[i];
      }
    }
  }
}

/* P = softmax(S) per row, S = Q K^T / sqrt(d_k):
 *   dS[j] = P[j] (dP[j] - sum_k P[k] dP[k]),
 *   dQ[t] += sum_j dS[t,j] K[j] / sqrt(d_k),  dK[j] += sum_t dS[t,j] Q[t] / sqrt(d_k) */
void ff_rt_attention_probs_backward(const float *q, int ldq, const float *k, int ldk, int Tq, int Tk, int heads,
                                    int kv_heads, int d_k, const float *probs, const float *dprobs, float *dq,
                                    float *dk) {
  float scale = 1.0f / sqrtf((float)d_k);
  int group = heads / kv_heads;
  for (int h = 0; h < heads; h++) {
    size_t kvh = (size_t)(h / group) * d_k;
    for (int t = 0; t < Tq; t++) {
      const float *p = probs + ((size_t)h * Tq + t) * Tk, *dp = dprobs + ((size_t)h * Tq + t) * Tk;
      const float *qt = q + (size_t)t * ldq + (size_t)h * d_k;
      float *dqt = dq + (size_t)t * ldq + (size_t)h * d_k;
      double dot = 0.0;
      for (int j = 0; j < Tk; j++) dot += (double)p[j] * dp[j];
      for (int j = 0; j < Tk; j++) {
        if (p[j] == 0.0f) continue; /* a masked key */
        float ds = (float)(p[j] * (dp[j] - dot)) * scale;
        const float *kj = k + (size_t)j * ldk + kvh;
        float *dkj = dk + (size_t)j * ldk + kvh;
        for (int i = 0; i < d_k; i++) {
          dqt[i] += ds * kj[i];
          dkj[i] += ds * qt[i];
        }
      }
    }
  }
}

/* x[t,:] = E[id_t,:] s:  dE[id_t,:] += s dx[t,:] */
void ff_rt_embed_backward(const int32_t *tokens, int T, int d, int scale, const float *dx, float *dE) {
  float s = scale ? sqrtf((float)d) : 1.0f;
  for (int t = 0; t < T; t++) {
    float *e = dE + (size_t)tokens[t] * d;
    for (int i = 0; i < d; i++) e[i] += s * dx[(size_t)t * d + i];
  }
}

/* x[t,:] += P[pos0 + t,:]:  dP[pos0 + t,:] += dx[t,:] */
void ff_rt_add_learned_backward(const float *dx, int T, int d, int pos0, float *dP) {
  for (int t = 0; t < T; t++)
    for (int i = 0; i < d; i++) dP[(size_t)(pos0 + t) * d + i] += dx[(size_t)t * d + i];
}

/* x[t,:] += r:  dr += sum_t dx[t,:] */
void ff_rt_add_row_backward(const float *dx, int T, int d, float *dr) {
  for (int t = 0; t < T; t++)
    for (int i = 0; i < d; i++) dr[i] += dx[(size_t)t * d + i];
}

/* x[i] = keep(index0 + i) ? x[i] / (1 - p) : 0 */
void ff_rt_dropout(float *x, size_t n, uint64_t key, uint64_t index0, float p) {
  uint32_t threshold = ff_dropout_threshold(p);
  float scale = 1.0f / (1.0f - p);
  for (size_t i = 0; i < n; i++) x[i] = ff_dropout_bits(key, index0 + i) >= threshold ? x[i] * scale : 0.0f;
}
