/* isas.h - the one table of the matrix kernels' ISAs (kernels/gemm_ISA.c):
 *   X(name, MR, NR, flags)   MR x NR the register tile (rows x panel columns:
 *                            weights are packed in panels of NR), flags what a
 *                            C compiler needs to build the ISA's kernels.
 * The host derives from it the ISAs ff_model_set_isa accepts, the cc engine's
 * flags and ff_host.isas (gen/plan.lua's panel widths).  Order: generic first. */
#ifndef FF_ISAS_H
#define FF_ISAS_H
#define FF_ISAS(X)                                                                                                   \
  X(generic, 4, 16, "")                                                                                              \
  X(avx2, 6, 16, "-mavx2 -mfma")                                                                                     \
  X(avx512, 8, 32, "-mavx512f -mfma")                                                                                \
  X(neon, 6, 16, "") /* every AArch64 has it */
#endif
