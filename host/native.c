/* native.c - the kernels of kernels/ compiled into the host
 * (CMakeLists.txt builds each ISA's file with its flags), for the libtcc
 * engine: libtcc cannot emit SIMD, so the JIT-compiled model calls these
 * through tcc_add_symbol while the model code itself stays specialised. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen.h"
#include "ff_host_isas.h" /* FF_HOST_ISAS(X): the rows of kernels/isas.h built here, and their declarations */

#define KERNEL_ENTRY(kind, isa) {#isa, "ff_" #kind "_" #isa, (void (*)(void))ff_##kind##_##isa},
#define KERNEL_ENTRIES(isa, runs)                                                                                    \
  KERNEL_ENTRY(linear, isa) KERNEL_ENTRY(linear_ld, isa) KERNEL_ENTRY(linear_bf16, isa) KERNEL_ENTRY(linear_q8, isa)  \
  KERNEL_ENTRY(linear_i8, isa) KERNEL_ENTRY(quantize_rows, isa) KERNEL_ENTRY(bf16_rows, isa)                         \
  KERNEL_ENTRY(linear_dpbf16, isa) KERNEL_ENTRY(matmul, isa) KERNEL_ENTRY(linear_ta, isa)                           \
  KERNEL_ENTRY(sdpa, isa) KERNEL_ENTRY(layernorm, isa) KERNEL_ENTRY(rmsnorm, isa) KERNEL_ENTRY(gelu, isa)              \
  KERNEL_ENTRY(gelu_tanh, isa) KERNEL_ENTRY(silu, isa) KERNEL_ENTRY(swiglu, isa) KERNEL_ENTRY(pack, isa)              \
  KERNEL_ENTRY(transpose, isa) KERNEL_ENTRY(dropout, isa) KERNEL_ENTRY(cross_entropy, isa)                            \
  KERNEL_ENTRY(attention_train, isa)                                                                                   \
  KERNEL_ENTRY(attention_backward, isa) KERNEL_ENTRY(layernorm_backward, isa) KERNEL_ENTRY(rmsnorm_backward, isa)     \
  KERNEL_ENTRY(gelu_backward, isa) KERNEL_ENTRY(gelu_tanh_backward, isa) KERNEL_ENTRY(silu_backward, isa)            \
  KERNEL_ENTRY(swiglu_backward, isa) KERNEL_ENTRY(adamw, isa) KERNEL_ENTRY(sum_squares, isa)

/* every kernel the host carries: its ISA, C name and address */
static const struct {
  const char *isa, *name;
  void (*fn)(void);
} kernels[] = {FF_HOST_ISAS(KERNEL_ENTRIES)};

void ff_native_kernels(void (*add)(void *ctx, const char *name, void *fn), void *ctx) {
  for (size_t i = 0; i < sizeof kernels / sizeof *kernels; i++)
    for (const char *const *isa = ff_host_isas(); *isa; isa++)
      if (!strcmp(kernels[i].isa, *isa)) add(ctx, kernels[i].name, (void *)kernels[i].fn);
}

void (*ff_native_kernel(const char *kind))(void) {
  char name[64];
  snprintf(name, sizeof name, "ff_%s_%s", kind, ff_host_isa());
  for (size_t i = 0; i < sizeof kernels / sizeof *kernels; i++)
    if (!strcmp(kernels[i].name, name)) return kernels[i].fn;
  return NULL;
}

#define ISA_NAME(isa, runs) #isa,
#define ISA_RUNS(isa, runs) runs,

/* the ISAs built here that this CPU runs (their rows' CPU features), best
 * (the table's last) first */
const char *const *ff_host_isas(void) {
  static const char *const built[] = {FF_HOST_ISAS(ISA_NAME)};
  static const char *list[sizeof built / sizeof *built + 1];
  if (!list[0]) {
    FF_HOST_CPU_INIT();
    const int runs[] = {FF_HOST_ISAS(ISA_RUNS)};
    int n = 0;
    for (size_t i = sizeof built / sizeof *built; i-- > 0;)
      if (runs[i]) list[n++] = built[i];
  }
  return list;
}

/* FIXFORMER_ISA chooses another of the host's ISAs (the tests run both) */
const char *ff_host_isa(void) {
  const char *want = getenv("FIXFORMER_ISA");
  const char *const *isas = ff_host_isas();
  for (int i = 0; want && isas[i]; i++)
    if (!strcmp(isas[i], want)) return isas[i];
  return isas[0];
}

int ff_host_isa_check(ff_error *err) {
  const char *want = getenv("FIXFORMER_ISA");
  if (!want || !strcmp(ff_host_isa(), want)) return 0; /* unset, or one the lookup above found */
  const char *const *isas = ff_host_isas();
  char list[128] = "";
  for (int i = 0; isas[i]; i++)
    snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", isas[i]);
  return ff_fail(err, FF_EINVAL, "FIXFORMER_ISA=%s: not an ISA this machine runs (%s)", want, list);
}
