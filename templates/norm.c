/* norm.c - LayerNorm and RMSNorm over the last dimension.  Row sums in
 * double, as in the runtime; y may be x (in place). */

@@ layernorm
/* ${FN}: y = (x - mean) / sqrt(var + ${EPS}) * gamma + beta over ${D} features, biased var */
static void ${FN}(const float *x, int T, const float *gamma, const float *beta, float *y) {
  for (int t = 0; t < T; t++) {
    const float *xt = x + (size_t)t * ${D};
    float *yt = y + (size_t)t * ${D};
    double mean = 0.0, var = 0.0;
    for (int i = 0; i < ${D}; i++) mean += xt[i];
    mean /= ${D};
    for (int i = 0; i < ${D}; i++) var += (xt[i] - mean) * (xt[i] - mean);
    var /= ${D};
    const float rstd = (float)(1.0 / sqrt(var + ${EPS}));
    for (int i = 0; i < ${D}; i++) yt[i] = (float)(xt[i] - mean) * rstd * gamma[i] + beta[i];
  }
}

@@ rmsnorm
/* ${FN}: y = x / sqrt(mean(x^2) + ${EPS}) * gamma over ${D} features */
static void ${FN}(const float *x, int T, const float *gamma, float *y) {
  for (int t = 0; t < T; t++) {
    const float *xt = x + (size_t)t * ${D};
    float *yt = y + (size_t)t * ${D};
    double ms = 0.0;
    for (int i = 0; i < ${D}; i++) ms += (double)xt[i] * xt[i];
    const float rstd = (float)(1.0 / sqrt(ms / ${D} + ${EPS}));
    for (int i = 0; i < ${D}; i++) yt[i] = xt[i] * rstd * gamma[i];
  }
}
