/* attention.c - scaled dot-product attention, its key/value cache and RoPE. */

@@ attention
/* ${FN}: out [Tq, ${D}] = softmax(Q K^T / sqrt(${DK}) + mask) V, ${HEADS} heads of ${DK}
 * q rows every ${LDQ} floats; k rows every ${LDK} floats, v ${D} floats after k.
 * Masked: keys j >= key_len (padding)${CAUSAL_DOC}; masked scores are -inf
 * and the row max is subtracted (ff_attention_${ISA}, heads split over the
 * state's threads, each with (${DK} + 8) x pad16(key_len) floats of scratch). */
static void ${FN}(const float *a, const float *q, const float *k, int Tq, int key_len, int q_pos0, float *scratch,
                  float *out) {
  attention(a, q, ${LDQ}, k, ${LDK}, Tq, key_len, ${HEADS}, ${DK}, ${CAUSAL}, q_pos0, ${SCALE}, scratch, out);
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
