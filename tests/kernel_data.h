/* kernel_data.h - random data, packed panels and the error measure of the
 * kernel tests (test_kernels.c, test_qkernels.c, test_train_kernels.c);
 * kernel_data.c. */
#ifndef FF_TEST_KERNEL_DATA_H
#define FF_TEST_KERNEL_DATA_H
#include <stddef.h>

float uniform(void);                      /* xorshift64, [-1, 1), one fixed sequence */
float *randoms(size_t n, float scale);    /* n of uniform() scale, malloc'd (exits when out of memory) */
float *copy_of(const float *x, size_t n); /* a malloc'd copy */
/* W [rows, cols] -> W^T in panels of nr columns, zero-padded (gen/plan.lua) */
float *pack_panels(const float *W, int rows, int cols, int nr);
int panel_of(const char *isa); /* the ISA's panel width: its NR in kernels/isas.h (0: no such row) */
char class_of(float v);  /* 0 finite, 'N' NaN, '+' +inf, '-' -inf */
char *classes(size_t n); /* n classes, all finite, calloc'd */
/* Over n outputs: got (the kernel's) and want (the reference's) must be
 * NaN, +inf and -inf at the same places, and there as ex says when ex is
 * given (NULL: finite everywhere); then max |got - want| / max |want| over
 * the finite rest.  A misplaced NaN or inf: 1e30 (fails), and one line. */
double compare(const float *got, const float *want, const char *ex, size_t n);
double scaled_err(const float *got, const float *want, size_t n); /* compare(), all finite */
/* A linear kernel's y [T, OUT] against the reference r, columns 0 .. j0-1
 * not asked for: there y must hold y0's bits (else 1e30) and r takes them;
 * then compare() with r's NaN and inf places as the expected ones. */
double compare_columns(const float *y, const float *y0, float *r, int T, int OUT, int j0);
#endif
