/* norm.c - LayerNorm and RMSNorm over the last dimension, as calls of the
 * ISA's kernel (templates/kernels/norms.c) with the shapes of one op. */

@@ layernorm
/* ${FN}: y = (x - mean) / sqrt(var + ${EPS}) * gamma + beta over ${D} features, biased var
 * (ff_layernorm_${ISA}); y may be x. */
static void ${FN}(const float *x, int T, const float *gamma, const float *beta, float *y) {
  ff_layernorm_${ISA}(x, T, ${D}, gamma, beta, ${EPS}, y);
}

@@ rmsnorm
/* ${FN}: y = x / sqrt(mean(x^2) + ${EPS}) * gamma over ${D} features (ff_rmsnorm_${ISA}); y may be x. */
static void ${FN}(const float *x, int T, const float *gamma, float *y) {
  ff_rmsnorm_${ISA}(x, T, ${D}, gamma, ${EPS}, y);
}
