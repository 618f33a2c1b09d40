/* jit_tcc.c - the libtcc backend: generated C compiled in memory.  The only
 * file that includes libtcc.h.  The code is compiled with FIXFORMER_JIT and
 * -nostdlib: it includes no system header and links against nothing but
 * the functions handed over here, so it needs no file at run time. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libtcc.h>

#include "codegen.h"

typedef struct {
  char msg[FF_ERROR_MAX];
} tcc_errors;

static void on_error(void *opaque, const char *msg) {
  tcc_errors *e = opaque;
  if (!e->msg[0]) snprintf(e->msg, sizeof e->msg, "%s", msg); /* keep the first */
}

/* libtcc 0.9.27 keeps global state in tcc_new, compile, relocate, get_symbol
 * and delete: one caller inside libtcc at a time in the process. */
static pthread_mutex_t tcc_lock = PTHREAD_MUTEX_INITIALIZER;

static void *tcc_symbol(void *s, const char *name) {
  pthread_mutex_lock(&tcc_lock);
  void *p = tcc_get_symbol(s, name);
  pthread_mutex_unlock(&tcc_lock);
  return p;
}

static void tcc_close(void *s) {
  pthread_mutex_lock(&tcc_lock);
  tcc_delete(s);
  pthread_mutex_unlock(&tcc_lock);
}
static void add_kernel(void *s, const char *name, void *fn) { tcc_add_symbol(s, name, fn); }

static int compile(const char *text, TCCState **out, ff_error *err) {
  static const struct {
    const char *name;
    void *fn;
  } symbols[] = {
      {"expf", (void *)expf}, /* generated code's only libm function (templates/model.c.in) */
      {"pow", (void *)pow},     {"sqrt", (void *)sqrt}, {"sqrtf", (void *)sqrtf}, /* AdamW's (templates/train.c.in) */
      {"memcpy", (void *)memcpy}, {"memset", (void *)memset}, {"memmove", (void *)memmove},
  };
  tcc_errors errors = {""};
  *out = NULL;
  TCCState *s = tcc_new();
  if (!s) return ff_fail(err, FF_ENOMEM, "tcc: cannot create a compiler state");
  tcc_set_error_func(s, &errors, on_error);
  tcc_set_options(s, "-nostdlib");
  tcc_set_output_type(s, TCC_OUTPUT_MEMORY);
  tcc_define_symbol(s, "FIXFORMER_JIT", "1");
  if (tcc_compile_string(s, text) < 0) goto failed;
  for (size_t i = 0; i < sizeof symbols / sizeof *symbols; i++) tcc_add_symbol(s, symbols[i].name, symbols[i].fn);
  ff_native_kernels(add_kernel, s); /* the SIMD kernels the host carries (kernels/) */
  if (tcc_relocate(s, TCC_RELOCATE_AUTO) < 0) goto failed;
  *out = s;
  return 0;
failed:
  tcc_delete(s);
  return ff_fail(err, FF_EINVAL, "tcc: %s", errors.msg[0] ? errors.msg : "compilation failed");
}

int ff_jit_tcc(const char *text, ff_jit **out, ff_error *err) {
  TCCState *s;
  *out = NULL;
  pthread_mutex_lock(&tcc_lock);
  int rc = compile(text, &s, err);
  pthread_mutex_unlock(&tcc_lock);
  return rc ? rc : ff_jit_new(s, tcc_symbol, tcc_close, out, err); /* (tcc_close takes the lock) */
}
