/* isas.h - the one table of the matrix kernels' ISAs, a row each; the
 * kernels of ISA name are kernels/gemm_name.c (functions ff_KIND_name).
 *   X(name, MR, NR, flags, cpu, targets, stack_f32, stack_quantized, measured_f32, measured_quantized, measured_on)
 *   MR x NR     the register tile (rows x panel columns: weights are packed
 *               in panels of NR)
 *   flags       what a C compiler needs to build the ISA's kernels
 *   cpu         the CPU features it needs at run time (__builtin_cpu_supports
 *               names); "": every CPU of its targets has it
 *   targets     the architectures it runs on (a target triple's first part,
 *               CMAKE_SYSTEM_PROCESSOR); "": every one
 *   stack_*     NAME_STACK_BYTES of its emitted code, f32 and bf16/int8
 *               weights: headroom over the deepest chain tests/targets.py
 *               measured (measured_*, on measured_on)
 * Everything else derives from the rows: CMake's host build of each ISA the
 * host can run and the embedded kernel text, the host's CPU detection and
 * kernel list for libtcc, the cc engine's flags, ff_host.isas (panel widths,
 * stack bytes), ff_model_set_isa and ff_isa_at (so `fixformer info --isas`,
 * emit --isa and --target, the tests), fixformer_add_model.  A new ISA is its
 * kernels/gemm_name.c and a row here.  Order: generic first, then each ISA
 * after those it beats (the host picks the last one it runs). */
#ifndef FF_ISAS_H
#define FF_ISAS_H
#define FF_ISAS(X)                                                                                                   \
  X(generic, 4, 16, "", "", "", 2560, 4608, 1616, 3328,                                                              \
    "Cortex-M0+, M4F, M7, M33, M55, rv32imafc, armhf, i686; x86-64 gcc and clang")                                   \
  X(avx2, 6, 16, "-mavx2 -mfma", "avx2 fma", "x86_64 i686", 2048, 20480, 1560, 18072, "x86-64")                      \
  X(avx512, 8, 32, "-mavx512f -mavx512dq -mfma", "avx512f avx512dq fma", "x86_64 i686", 3072, 40960, 1880, 35200,   \
    "x86-64")                                                                                                        \
  X(neon, 6, 16, "", "", "aarch64", 20480, 38912, 18624, 35184, "aarch64")
#endif
