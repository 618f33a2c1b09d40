/* embed.c - token embeddings and positional encodings.
 * Sections are instantiated by gen/emit.lua for one model's shapes. */

@@ embed
/* ${FN}: x [T, ${D}] = E[tokens] * ${SCALE}  (E [${VOCAB}, ${D}]; ids checked by the caller) */
static void ${FN}(const int32_t *tokens, int T, const float *restrict E, float *restrict x) {
  for (int t = 0; t < T; t++) {
@if PANELS
    /* E is the output head too, packed as W^T in panels of ${PANEL} columns:
     * E[v, i] is at (v / ${PANEL}) * ${D} * ${PANEL} + i * ${PANEL} + v % ${PANEL} */
    const float *restrict e = E + (size_t)(tokens[t] / ${PANEL}) * ${D} * ${PANEL} + tokens[t] % ${PANEL};
    float *restrict xt = x + (size_t)t * ${D};
    for (int i = 0; i < ${D}; i++) xt[i] = e[(size_t)i * ${PANEL}] * ${SCALE};
@else
    const float *restrict e = E + (size_t)tokens[t] * ${D};
    float *restrict xt = x + (size_t)t * ${D};
    for (int i = 0; i < ${D}; i++) xt[i] = e[i] * ${SCALE};
@end
  }
}

@@ copy
/* ${FN}: dst [T, ${D}] = src [T, ${D}] */
static void ${FN}(const float *src, int T, float *dst) {
  memcpy(dst, src, sizeof(float) * (size_t)T * ${D});
}

@@ sinusoidal
/* ${FN}_freq[i] = 10000^(-2i/${D}), folded at generation time */
static const double ${FN}_freq[${HALF}] = {
${FREQS}
};

/* ${FN}: x[t, :] += PE(pos0 + t), PE(pos, 2i) = sin(pos f_i), PE(pos, 2i+1) = cos(pos f_i) */
static void ${FN}(float *x, int T, int pos0) {
  for (int t = 0; t < T; t++) {
    float *xt = x + (size_t)t * ${D};
    for (int i = 0; i < ${HALF}; i++) {
      const double angle = (double)(pos0 + t) * ${FN}_freq[i];
      xt[2 * i] += (float)sin(angle);
@if ODD
      if (2 * i + 1 < ${D}) xt[2 * i + 1] += (float)cos(angle);
@else
      xt[2 * i + 1] += (float)cos(angle);
@end
    }
  }
}

@@ learned
/* ${FN}: x[t, :] += P[pos0 + t, :]  (P [max_seq, ${D}]) */
static void ${FN}(float *restrict x, int T, const float *restrict P, int pos0) {
  for (int t = 0; t < T; t++) {
    const float *restrict p = P + (size_t)(pos0 + t) * ${D};
    float *restrict xt = x + (size_t)t * ${D};
    for (int i = 0; i < ${D}; i++) xt[i] += p[i];
  }
}
