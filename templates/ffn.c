/* ffn.c - the activations of the position-wise feed-forward network, as
 * calls of the ISA's kernels (templates/kernels/plain.c) with the shapes of
 * one op; ReLU is fused into linear1 and stands here for the kernel tests. */

@@ relu
/* ${FN}: h = max(0, h) over [T, ${N}]; NaN stays NaN, as in PyTorch */
static void ${FN}(float *h, int T) {
  for (size_t i = 0; i < (size_t)T * ${N}; i++) h[i] = h[i] < 0.0f ? 0.0f : h[i];
}

@@ gelu
/* ${FN}: h = h/2 (1 + erf(h / sqrt 2)) over [T, ${N}] (nn.GELU, exact; ff_gelu_${ISA}) */
static void ${FN}(float *h, int T) {
  ff_gelu_${ISA}(h, (size_t)T * ${N});
}

@@ gelu_tanh
/* ${FN}: h = h/2 (1 + tanh(sqrt(2/pi) (h + 0.044715 h^3))) over [T, ${N}] (approximate='tanh';
 * ff_gelu_tanh_${ISA}) */
static void ${FN}(float *h, int T) {
  ff_gelu_tanh_${ISA}(h, (size_t)T * ${N});
}

@@ swiglu
/* ${FN}: a [T, ${N}] = silu(gate) * up, h [T, ${N2}] = gate | up, silu(g) = g / (1 + e^-g)
 * (ff_swiglu_${ISA}) */
static void ${FN}(const float *restrict h, int T, float *restrict a) {
  ff_swiglu_${ISA}(h, T, ${N}, a);
}
