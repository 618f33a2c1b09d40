/* ffn.c - the activations of the position-wise feed-forward network. */

@@ relu
/* ${FN}: h = max(0, h) over [T, ${N}] */
static void ${FN}(float *h, int T) {
  for (size_t i = 0; i < (size_t)T * ${N}; i++) h[i] = h[i] > 0.0f ? h[i] : 0.0f;
}

@@ gelu
/* ${FN}: h = h/2 (1 + erf(h / sqrt 2)) over [T, ${N}] (nn.GELU, exact) */
static void ${FN}(float *h, int T) {
  for (size_t i = 0; i < (size_t)T * ${N}; i++) h[i] = 0.5f * h[i] * (1.0f + erff(h[i] * 0.70710678118654752f));
}

@@ gelu_tanh
/* ${FN}: h = h/2 (1 + tanh(sqrt(2/pi) (h + 0.044715 h^3))) over [T, ${N}] (approximate='tanh') */
static void ${FN}(float *h, int T) {
  for (size_t i = 0; i < (size_t)T * ${N}; i++) {
    const float x = h[i];
    h[i] = 0.5f * x * (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
  }
}

@@ swiglu
/* ${FN}: a [T, ${N}] = silu(gate) * up, h [T, ${N2}] = gate | up, silu(g) = g / (1 + e^-g) */
static void ${FN}(const float *restrict h, int T, float *restrict a) {
  for (int t = 0; t < T; t++) {
    const float *restrict gate = h + (size_t)t * ${N2}, *restrict up = gate + ${N};
    float *restrict at = a + (size_t)t * ${N};
    for (int i = 0; i < ${N}; i++) at[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
  }
}
