/* norm.c - LayerNorm and RMSNorm over the last dimension.  Row sums in
 * double, as in the runtime, but over 8 interleaved partial sums: 8
 * independent chains of adds instead of one (which the compiler may also
 * vectorise), so a row is not bound by the latency of each add.  y may be x
 * (in place). */

@@ layernorm
/* ${FN}: y = (x - mean) / sqrt(var + ${EPS}) * gamma + beta over ${D} features, biased var */
static void ${FN}(const float *x, int T, const float *gamma, const float *beta, float *y) {
  for (int t = 0; t < T; t++) {
    const float *xt = x + (size_t)t * ${D};
    float *yt = y + (size_t)t * ${D};
    double s[8] = {0}, q[8] = {0};
    for (int i = 0; i < ${D8}; i += 8)
      for (int l = 0; l < 8; l++) s[l] += xt[i + l];
@if TAIL
    for (int i = ${D8}; i < ${D}; i++) s[i - ${D8}] += xt[i];
@end
    const double mean = ((s[0] + s[1]) + (s[2] + s[3]) + ((s[4] + s[5]) + (s[6] + s[7]))) / ${D};
    for (int i = 0; i < ${D8}; i += 8)
      for (int l = 0; l < 8; l++) q[l] += (xt[i + l] - mean) * (xt[i + l] - mean);
@if TAIL
    for (int i = ${D8}; i < ${D}; i++) q[i - ${D8}] += (xt[i] - mean) * (xt[i] - mean);
@end
    const double var = ((q[0] + q[1]) + (q[2] + q[3]) + ((q[4] + q[5]) + (q[6] + q[7]))) / ${D};
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
    double q[8] = {0};
    for (int i = 0; i < ${D8}; i += 8)
      for (int l = 0; l < 8; l++) q[l] += (double)xt[i + l] * xt[i + l];
@if TAIL
    for (int i = ${D8}; i < ${D}; i++) q[i - ${D8}] += (double)xt[i] * xt[i];
@end
    const double ms = ((q[0] + q[1]) + (q[2] + q[3]) + ((q[4] + q[5]) + (q[6] + q[7]))) / ${D};
    const float rstd = (float)(1.0 / sqrt(ms + ${EPS}));
    for (int i = 0; i < ${D}; i++) yt[i] = xt[i] * rstd * gamma[i];
  }
}
