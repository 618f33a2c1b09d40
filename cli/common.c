/* common.c - what several commands do with a model: open it with the
 * flags every command shares, find and load its weights, prepare an engine,
 * read token ids, and say on stderr what a slow step is doing. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

/* ---- progress ---------------------------------------------------------------- */

/* On a terminal a step is shown when it starts and finished on the same
 * line with its time; elsewhere (a log, a pipe, a test) nothing, so that a
 * failure stays the one line on stderr.  The CLI is one process with one
 * slow step at a time: one start time is enough. */
static double started;

int cli_progress_on(const cli_flag *flags) { return !cli_quiet(flags) && isatty(STDERR_FILENO); }

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

void cli_progress(void *ctx, const char *step, int done) {
  if (!done) {
    started = now_s();
    fprintf(stderr, "%s: %s ...", (const char *)ctx, step);
  } else {
    fprintf(stderr, "\r%s: %s: %.1f s\033[K\n", (const char *)ctx, step, now_s() - started);
  }
  fflush(stderr);
}

/* ---- models ------------------------------------------------------------------ */

ff_model *cli_open_model(const char *path, const cli_flag *flags, ff_error *err) {
  ff_model *m = ff_model_open(path, err);
  const char *dtype = cli_value(flags, "--dtype");
  const char *compute = cli_value(flags, "--compute");
  if (m && ((dtype && ff_model_set_dtype(m, dtype, err)) || (compute && ff_model_set_compute(m, compute, err)))) {
    ff_model_close(m);
    return NULL;
  }
  if (m && cli_progress_on(flags)) ff_model_set_progress(m, cli_progress, (void *)ff_model_config(m)->name);
  return m;
}

void cli_note_compute(ff_model *m, const cli_flag *flags) {
  const char *compute = ff_model_compute(m), *isa;
  ff_error e;
  /* the ISA the JIT engines will take (they set it so when they prepare; a FIXFORMER_ISA this machine
   * does not run is refused then) */
  if (!strcmp(compute, "f32") || cli_quiet(flags) || ff_model_set_isa(m, "native", &e)) return;
  isa = ff_model_isa(m);
  const int i8 = !strcmp(compute, "int8");
  int fast = 0; /* kernels/gemm_avx512.c's VNNI and BF16 tiles, gemm_avx2.c's AVX-VNNI one; the other avx2 and
                  * neon tiles have no such instruction (the host's neon is built for Armv8.0: no SDOT) */
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b, c, d;
  if (!strcmp(isa, "avx512")) fast = i8 ? __builtin_cpu_supports("avx512vnni") : __builtin_cpu_supports("avx512bf16");
  /* AVX-VNNI: CPUID leaf 7, sub-leaf 1, EAX bit 4, as gemm_avx2.c asks (clang 14's __builtin_cpu_supports lacks it) */
  if (!strcmp(isa, "avx2") && i8) fast = __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a >> 4 & 1u);
#endif
  if (fast) return;
  if (!strcmp(isa, "avx2") || !strcmp(isa, "neon"))
    fprintf(stderr, "note: compute %s runs without a %s dot-product instruction here (%s): much less gain over "
            "f32 than with one (docs/performance.md)\n", compute, i8 ? "int8" : "bf16", isa);
  else
    fprintf(stderr, "note: compute %s runs on the plain C kernels here (%s, no %s): slower than f32 "
            "(docs/performance.md)\n", compute, isa, i8 ? "AVX-512 VNNI" : "AVX-512 BF16");
}

const char *cli_default_weights(const ff_config *c, const char *given) {
  return given ? given : c->weights[0] ? c->weights : NULL;
}

int cli_weights_of(const ff_config *c, const char **weights, ff_error *err) {
  if (!(*weights = cli_default_weights(c, *weights)))
    return ff_fail(err, CLI_EUSAGE, "--weights is required (the description names no weights)");
  return 0;
}

/* Non-finite weights are refused unless --allow-nonfinite: a NaN in a
 * checkpoint is almost always a broken export, and it would only show as
 * NaN outputs later. */
int cli_load_weights(ff_model *m, const cli_flag *flags, const char *weights, ff_error *err) {
  int rc = ff_model_load_weights(m, weights, err);
  if (!rc && !cli_value(flags, "--allow-nonfinite") && (rc = ff_model_check_finite(m, err)))
    ff_fail(err, rc, "%s: %s", weights, err->msg);
  return rc;
}

int cli_threads(const cli_flag *flags, ff_model *m, int engine, ff_error *err) {
  int threads, rc = cli_int(flags, "--threads", 1, &threads, err);
  if (rc) return rc;
  if (threads < 1 || threads > FF_MAX_THREADS)
    return ff_fail(err, CLI_EUSAGE, "--threads: %d is outside 1..%d", threads, FF_MAX_THREADS);
  if (threads > 1 && engine == FF_ENGINE_RUNTIME)
    return ff_fail(err, CLI_EUSAGE, "--threads: the runtime (the reference) runs on one thread; use tcc or cc");
  return ff_model_set_threads(m, threads, err);
}

int cli_prepare(ff_model *m, const cli_flag *flags, int engine, ff_error *err) {
  int rc = cli_threads(flags, m, engine, err);
  return rc ? rc : ff_model_prepare(m, (enum ff_engine)engine, err);
}

/* ---- token ids ------------------------------------------------------------------ */

int cli_tokens_from(const char *what, const char *path, const ff_array *a, int32_t **out, ff_error *err) {
  if (a->dtype == FF_F32)
    return ff_fail(err, FF_ESHAPE, "%s %s: float32, but the model takes int token ids [B,T]", what, path);
  if (a->rank != 2)
    return ff_fail(err, FF_ESHAPE, "%s %s: rank %d, token ids must be [B,T]", what, path, a->rank);
  *out = malloc((a->numel ? a->numel : 1) * sizeof **out);
  if (!*out) return ff_fail(err, FF_ENOMEM, "out of memory");
  for (size_t i = 0; i < a->numel; i++) {
    int64_t v = a->dtype == FF_I32 ? ((const int32_t *)a->data)[i] : ((const int64_t *)a->data)[i];
    if (v < -2147483647 || v > 2147483647) v = -1; /* reported as out of vocabulary */
    (*out)[i] = (int32_t)v;
  }
  return 0;
}

/* the failure of cli_parse_token_list: its buffers freed */
static int token_list_fail(int32_t *len, int32_t *ids, int rc) {
  free(len);
  free(ids);
  return rc;
}

int cli_parse_token_list(const char *flagname, const char *text, int max_len, ff_array *a, int32_t **lengths,
                         ff_error *err) {
  int B = 1, T = 0, n = 0;
  for (const char *p = text; *p; p++) B += *p == ',';
  int32_t *len = calloc((size_t)B, sizeof *len);
  int32_t *ids = malloc((strlen(text) / 2 + 1) * sizeof *ids); /* at most one id per 2 chars */
  if (!len || !ids) return token_list_fail(len, ids, ff_fail(err, FF_ENOMEM, "out of memory"));
  const char *p = text;
  for (int b = 0; b < B; b++) {
    for (;;) {
      while (*p == ' ' || *p == '\t') p++;
      if (!*p || *p == ',') break;
      char *end;
      errno = 0;
      long v = strtol(p, &end, 10);
      if (end == p || errno || v < -2147483647 || v > 2147483647 || (*end && *end != ' ' && *end != ',' && *end != '\t'))
        return token_list_fail(len, ids, ff_fail(err, FF_EINVAL, "%s: '%s' is not a list of integer token ids",
                                                 flagname, text));
      ids[n++] = (int32_t)v;
      len[b]++;
      p = end;
    }
    if (len[b] == 0)
      return token_list_fail(len, ids, ff_fail(err, FF_ELENGTH, "%s: sequence %d is empty", flagname, b));
    if (len[b] > max_len)
      return token_list_fail(len, ids, ff_fail(err, FF_ELENGTH, "%s: sequence %d has %d ids, above max_seq = %d",
                                               flagname, b, (int)len[b], max_len));
    if (len[b] > T) T = len[b];
    if (*p == ',') p++;
  }
  a->dtype = FF_I32;
  a->rank = 2;
  a->shape[0] = B;
  a->shape[1] = T;
  a->numel = (size_t)B * T;
  if (!(a->data = calloc(a->numel, sizeof(int32_t))))
    return token_list_fail(len, ids, ff_fail(err, FF_ENOMEM, "out of memory"));
  for (int b = 0, at = 0; b < B; at += len[b], b++)
    memcpy((int32_t *)a->data + (size_t)b * T, ids + at, (size_t)len[b] * sizeof *ids);
  free(ids);
  if (lengths) *lengths = len;
  else free(len);
  return 0;
}
