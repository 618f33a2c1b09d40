/* linear.c - nn.Linear (and the output head) as a call of the ISA's matrix
 * kernel (templates/kernels/gemm_*.c) with the shapes of one op. */

@@ linear
/* ${FN}: y [T, ${OUT}] ${OPDOC_SHAPE}
 * W^T [${IN}, ${OUT}] packed in ${PANELS} panels of ${NR} columns (ff_linear_${ISA}). */
static void ${FN}(const float *restrict x, int T, const float *restrict W, const float *restrict b,
                  float *restrict y) {
  ff_linear_${ISA}(x, T, ${IN}, W, b, ${OUT}, y, ${FLAGS});
}
