/* linear.c - nn.Linear (and the output head) as a call of the ISA's matrix
 * kernel (templates/kernels/gemm_*.c) with the shapes of one op. */

@@ linear
/* ${FN}: y [T, ${OUT}] ${OPDOC_SHAPE}
 * W^T [${IN}, ${OUT}] packed in ${PANELS} panels of ${NR} columns (ff_linear_${ISA}),
 * split over the state's threads. */
static void ${FN}(const float *a, const float *x, int T, const float *W, const float *b, float *y) {
  linear(a, x, T, ${IN}, W, b, ${OUT}, y, ${FLAGS});
}
