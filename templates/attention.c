/* attention.c - scaled dot-product attention, its key/value cache and RoPE. */

@@ attention
/* ${FN}: out [Tq, ${D}] = softmax(Q K^T / sqrt(${DK}) + mask) V, ${HEADS} heads of ${DK}
 * q rows every ${LDQ} floats; k rows every ${LDK} floats, v ${D} floats after k.
 * Masked: keys j >= key_len (padding)${CAUSAL_DOC}.
 * Masked scores are -inf (left out of the sums); the row max is subtracted. */
static void ${FN}(const float *restrict q, const float *restrict k, int Tq, int key_len, int q_pos0,
                  float *restrict scores, float *restrict out) {
  const float *restrict v = k + ${D};
@if CAUSAL
@else
  (void)q_pos0;
@end
  for (int h = 0; h < ${HEADS}; h++) {
    for (int t = 0; t < Tq; t++) {
      const float *restrict qt = q + (size_t)t * ${LDQ} + h * ${DK};
      int visible = key_len;
@if CAUSAL
      if (q_pos0 + t + 1 < visible) visible = q_pos0 + t + 1;
@end
      float max = -3.402823466e+38f;
      for (int j = 0; j < visible; j++) { /* scores = q k^T / sqrt(d_k) */
        const float *restrict kj = k + (size_t)j * ${LDK} + h * ${DK};
        float s = 0.0f;
        @unroll i ${DK}
        s += qt[i] * kj[i];
        @end
        s *= ${SCALE};
        scores[j] = s;
        if (s > max) max = s;
      }
      double sum = 0.0;
      for (int j = 0; j < visible; j++) {
        scores[j] = expf(scores[j] - max);
        sum += scores[j];
      }
      const float inv = (float)(1.0 / sum);
      float *restrict ot = out + (size_t)t * ${D} + h * ${DK};
      @unroll i ${DK}
      ot[i] = 0.0f;
      @end
      for (int j = 0; j < visible; j++) { /* out = P V */
        const float p = scores[j] * inv;
        const float *restrict vj = v + (size_t)j * ${LDK} + h * ${DK};
        @unroll i ${DK}
        ot[i] += p * vj[i];
        @end
      }
    }
  }
}

@@ kv_store
/* ${FN}: cache [pos0 + t, :] = k | v of row t of qkv [T, ${LDX}] (columns ${D}..${LDX}) */
static void ${FN}(const float *qkv, int T, float *cache, int pos0) {
  for (int t = 0; t < T; t++)
    memcpy(cache + (size_t)(pos0 + t) * ${KV}, qkv + (size_t)t * ${LDX} + ${D}, sizeof(float) * ${KV});
}

@@ rope
/* ${FN}_inv_freq[i] = theta^(-2i/${DK}), theta = ${THETA_DOC}, folded at generation time */
static const float ${FN}_inv_freq[${HALF}] = {
${FREQS}
};

/* ${FN}: rotary positions on q (columns 0..${D}) and k (${D}..${D2}) of rows every ${LDX}
 * floats, per head, rotate_half pairing: a = x[i], b = x[i + ${HALF}],
 * x[i] = a cos - b sin, x[i + ${HALF}] = b cos + a sin, angle = (pos0 + t) inv_freq[i]. */
static void ${FN}(float *x, int T, int pos0) {
  for (int t = 0; t < T; t++) {
    for (int i = 0; i < ${HALF}; i++) {
      const float angle = (float)(pos0 + t) * ${FN}_inv_freq[i];
      const float c = cosf(angle), s = sinf(angle);
      for (int h = 0; h < ${HEADS2}; h++) { /* the heads of q, then of k */
        float *xh = x + (size_t)t * ${LDX} + h * ${DK};
        const float a = xh[i], b = xh[i + ${HALF}];
        xh[i] = a * c - b * s;
        xh[i + ${HALF}] = b * c + a * s;
      }
    }
  }
}
