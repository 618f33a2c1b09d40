/* linear.c - nn.Linear and the output head. */

@@ linear
/* ${FN}: y [T, ${OUT}] = x [T, ${IN}] W + b
 * W is nn.Linear's weight transposed, [${IN}, ${OUT}] with rows every ${LDW} floats. */
static void ${FN}(const float *restrict x, int T, const float *restrict W, const float *restrict b,
                  float *restrict y) {
@if BIAS
@else
  (void)b;
@end
  for (int t = 0; t < T; t++) {
    const float *restrict xt = x + (size_t)t * ${IN};
    float *restrict yt = y + (size_t)t * ${OUT};
@if BIAS
    for (int o = 0; o < ${OUT}; o++) yt[o] = b[o];
@else
    for (int o = 0; o < ${OUT}; o++) yt[o] = 0.0f;
@end
    for (int i = 0; i < ${IN}; i++) {
      const float xi = xt[i];
      const float *restrict wi = W + (size_t)i * ${LDW};
      @unroll o ${OUT}
      yt[o] += xi * wi[o];
      @end
    }
  }
}

@@ logits
/* ${FN}: logits [T, ${VOCAB}] = x [T, ${D}] E^T, E [${VOCAB}, ${D}] (embedding or lm_head) */
static void ${FN}(const float *restrict x, int T, const float *restrict E, float *restrict logits) {
  for (int t = 0; t < T; t++) {
    const float *restrict xt = x + (size_t)t * ${D};
    for (int v = 0; v < ${VOCAB}; v++) {
      const float *restrict e = E + (size_t)v * ${D};
      float acc = 0.0f;
      @unroll i ${D}
      acc += xt[i] * e[i];
      @end
      logits[(size_t)t * ${VOCAB} + v] = acc;
    }
  }
}
