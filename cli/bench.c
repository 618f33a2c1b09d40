/* bench.c - `fixformer bench`: timings of forward passes and of decoding. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

static double clock_ms(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static double now_ms(void) { return clock_ms(CLOCK_MONOTONIC); }

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Random weights for a bench without --weights: `init` into a temporary
 * file of our own (mkstemp: nobody else's file or link is written). */
static int bench_weights(ff_model *m, const char *given, ff_error *err) {
  if (given) return ff_model_load_weights(m, given, err);
  const char *dir = getenv("TMPDIR");
  char *path = malloc(strlen(dir && *dir ? dir : "/tmp") + 48);
  if (!path) return ff_fail(err, FF_ENOMEM, "out of memory");
  sprintf(path, "%s/fixformer-bench-XXXXXX", dir && *dir ? dir : "/tmp");
  int fd = mkstemp(path), rc;
  if (fd < 0) {
    rc = ff_fail(err, FF_EIO, "cannot create a temporary weights file in %s: %s", dir && *dir ? dir : "/tmp",
                 strerror(errno));
    free(path);
    return rc;
  }
  close(fd); /* init replaces it by rename, in the same private name */
  rc = ff_config_init_weights(ff_model_config(m), 1, path, err);
  if (!rc) rc = ff_model_load_weights(m, path, err);
  unlink(path);
  free(path);
  return rc;
}

/* The flags of bench, checked before the model is opened. */
typedef struct {
  int batch, T, threads, iters, gen, engine;
} bench_opts;

static int bench_options(const cli_flag *flags, bench_opts *o, ff_error *err) {
  int rc;
  if ((rc = cli_int(flags, "--batch", 1, &o->batch, err)) || (rc = cli_int(flags, "--seq", 0, &o->T, err)) ||
      (rc = cli_int(flags, "--threads", 1, &o->threads, err)) ||
      (rc = cli_int(flags, "--iters", 20, &o->iters, err)) ||
      (rc = cli_int(flags, "--generate", 0, &o->gen, err)) || (rc = cli_engine(flags, &o->engine, err)))
    return rc;
  if (o->batch < 1 || o->iters < 1) return ff_fail(err, CLI_EUSAGE, "--batch and --iters must be at least 1");
  if (o->batch > 1 << 24) /* as run's inputs */
    return ff_fail(err, CLI_EUSAGE, "--batch %d is above %d", o->batch, 1 << 24);
  if (o->iters > 1000000) /* a timing slot each */
    return ff_fail(err, CLI_EUSAGE, "--iters %d is above 1000000", o->iters);
  return 0;
}

/* ... and those that need the model's config: --seq, --generate */
static int bench_check(const ff_config *c, bench_opts *o, ff_error *err) {
  if (o->T == 0) o->T = c->max_seq < 128 ? c->max_seq : 128;
  if (o->T < 1 || o->T > c->max_seq)
    return ff_fail(err, FF_ELENGTH, "--seq %d is outside 1..max_seq (%d)", o->T, c->max_seq);
  if (o->gen && (!ff_config_has_head(c) || c->arch == FF_ARCH_ENCODER || o->gen > c->max_seq - 1))
    return ff_fail(err, FF_EINVAL, "--generate N needs a decoder with a vocab, an output head and N < max_seq (%d)",
                   c->max_seq);
  size_t n, width = (size_t)(c->d_model > ff_config_out_dim(c) ? c->d_model : ff_config_out_dim(c));
  if (ff_size_mul((size_t)o->batch, (size_t)o->T, &n) || ff_size_mul(n, width, &n) || ff_size_add(n, 1, &n) ||
      ff_size_mul(n, sizeof(float), &n)) /* bench_alloc's buffers, checked before any is made */
    return ff_fail(err, FF_ELENGTH, "--batch %d x --seq %d: the inputs and outputs do not fit in memory", o->batch,
                   o->T);
  return 0;
}

/* One line per phase as it ends, flushed: a big model takes seconds a phase. */
static void phase(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  printf("\n");
  fflush(stdout);
}

/* Weights, then the steps of prepare timed apart (each is kept for the next). */
static int bench_prepare(ff_model *m, const cli_flag *flags, const bench_opts *o, ff_error *err) {
  const ff_config *c = ff_model_config(m);
  const char *weights = cli_default_weights(c, cli_value(flags, "--weights")), *engine = ff_engine_name((enum ff_engine)o->engine);
  double t0 = now_ms();
  int rc;
  if ((rc = bench_weights(m, weights, err)) || (rc = ff_model_set_isa(m, "native", err)) ||
      (rc = cli_threads(flags, m, o->engine, err)))
    return rc;
  phase("load weights (%s): %.1f ms", weights ? weights : "random, as init writes them", now_ms() - t0);
  if (o->engine != FF_ENGINE_RUNTIME) {
    const void *blob;
    size_t bytes;
    t0 = now_ms();
    if ((rc = ff_model_generate(m, "fixformer bench", NULL, NULL, err))) return rc;
    phase("generate C: %.2f ms", now_ms() - t0);
    t0 = now_ms();
    if ((rc = ff_model_weight_blob(m, &blob, &bytes, err))) return rc;
    phase("pack weights: %.1f ms (%.1f MB)", now_ms() - t0, bytes / 1e6);
  }
  t0 = now_ms();
  if ((rc = ff_model_prepare(m, (enum ff_engine)o->engine, err))) return rc;
  if (o->engine != FF_ENGINE_RUNTIME) phase("compile (%s) and bind: %.1f ms", engine, now_ms() - t0);
  return 0;
}

/* Random inputs and the buffers of the timed runs. */
typedef struct {
  int32_t *ids, *out_ids;
  float *x, *out;
  double *times;
} bench_buffers;

static void bench_free(bench_buffers *b) {
  free(b->ids);
  free(b->x);
  free(b->out);
  free(b->times);
  free(b->out_ids);
}

static int bench_alloc(const ff_config *c, const bench_opts *o, bench_buffers *b, ff_error *err) {
  size_t n_in = (size_t)o->batch * o->T, n_out = n_in * ff_config_out_dim(c), d = (size_t)c->d_model;
  b->ids = malloc(sizeof *b->ids * (n_in + 1));
  b->x = malloc(sizeof *b->x * (n_in * d + 1));
  b->out = malloc(sizeof *b->out * (n_out + 1));
  b->times = malloc(sizeof *b->times * (size_t)o->iters);
  b->out_ids = malloc(sizeof *b->out_ids * (size_t)(o->gen + 1));
  if (!b->ids || !b->x || !b->out || !b->times || !b->out_ids)
    return ff_fail(err, FF_ENOMEM, "out of memory for --batch %d x --seq %d", o->batch, o->T);
  unsigned long long r = 12345;
  for (size_t i = 0; i < n_in; i++)
    b->ids[i] = (int32_t)((r = r * 6364136223846793005ULL + 1442695040888963407ULL) >> 33) % (c->vocab > 0 ? c->vocab : 1);
  for (size_t i = 0; i < n_in * d; i++) b->x[i] = (float)((r = r * 6364136223846793005ULL + 1) >> 40) / 16777216.0f - 0.5f;
  return 0;
}

/* Two warm-up runs, then the timed ones, each printed as it ends. */
static int bench_time(ff_model *m, const bench_opts *o, bench_buffers *b, ff_error *err) {
  const ff_config *c = ff_model_config(m);
  int encdec = c->arch == FF_ARCH_ENCODER_DECODER, T = o->T, rc = 0;
  ff_input in = {o->batch, T, c->vocab > 0 ? b->ids : NULL, c->vocab > 0 ? NULL : b->x, NULL,
                 encdec ? T : 0, encdec && c->vocab > 0 ? b->ids : NULL, encdec && c->vocab == 0 ? b->x : NULL};
  int32_t bos = 0;
  ff_greedy g = {encdec ? b->ids : NULL, encdec ? T : 0, encdec ? &bos : b->ids, 1, o->gen, -1};
  double warm = now_ms();
  for (int i = -2; i < o->iters && !rc; i++) {
    int n;
    /* CPU time: what neighbours hardly move.  Its clock is a system call (a
     * microsecond or more here, 7 % of tiny's forward), so it is read outside
     * the wall clock's interval, before and after. */
    const double cpu = clock_ms(CLOCK_PROCESS_CPUTIME_ID), t = now_ms();
    rc = o->gen ? ff_model_greedy(m, &g, b->out_ids, &n, NULL, err) : ff_model_forward(m, &in, b->out, err);
    const double wall = now_ms() - t, used = clock_ms(CLOCK_PROCESS_CPUTIME_ID) - cpu;
    if (rc) break;
    if (i == -1) phase("warm-up: 2 runs, %.1f ms", now_ms() - warm);
    if (i >= 0) phase("run %d/%d: %.3f ms, %.3f ms of CPU", i + 1, o->iters, b->times[i] = wall, used);
  }
  return rc;
}

/* The summary; its last line `median_ms: X` is what scripts read. */
static void bench_report(const ff_config *c, const bench_opts *o, double *times) {
  int iters = o->iters, encdec = c->arch == FF_ARCH_ENCODER_DECODER;
  qsort(times, (size_t)iters, sizeof *times, cmp_double);
  double med = times[iters / 2], flops = o->gen ? 0 : ff_config_forward_flops(c, o->T, o->T) * o->batch;
  if (o->gen) {
    char source[48] = ""; /* encoder-decoder: the source is --seq random tokens */
    if (encdec) snprintf(source, sizeof source, " (source of %d tokens)", o->T);
    printf("generate %d tokens from a 1-token prompt%s: min %.3f ms, median %.3f ms, max %.3f ms over %d runs; "
           "%.1f tokens/s\n", o->gen, source, times[0], med, times[iters - 1], iters, o->gen / (med / 1e3));
  } else {
    printf("forward batch %d x T %d: min %.3f ms, median %.3f ms, max %.3f ms over %d runs; %.2f GFLOP/s at the "
           "median (%.0f FLOP)\n", o->batch, o->T, times[0], med, times[iters - 1], iters, flops / (med * 1e6), flops);
  }
  printf("median_ms: %.4f\n", med);
}

static int run_bench(const char *path, cli_flag *flags, ff_error *err) {
  bench_opts o;
  bench_buffers b = {NULL, NULL, NULL, NULL, NULL};
  int rc = bench_options(flags, &o, err);
  if (rc) return rc;
  ff_model *m = cli_open_model(path, flags, err);
  if (!m) return err->code;
  ff_model_set_progress(m, NULL, NULL); /* bench times and prints its phases itself */
  cli_note_compute(m, flags);
  const ff_config *c = ff_model_config(m);
  if ((rc = bench_check(c, &o, err))) goto done;
  phase("bench %s: %s, d_model %d, %d heads, d_ff %d, %d+%d layers; engine %s, %d thread(s)", c->name,
        ff_config_key_string(c, FF_KEY_arch), c->d_model, c->heads, c->d_ff, c->encoder_layers, c->decoder_layers, ff_engine_name((enum ff_engine)o.engine),
        o.threads);
  if ((rc = bench_alloc(c, &o, &b, err)) || (rc = bench_prepare(m, flags, &o, err)) || /* the buffers first */
      (rc = bench_time(m, &o, &b, err)))
    goto done;
  bench_report(c, &o, b.times);
done:
  bench_free(&b);
  ff_model_close(m);
  return rc;
}

static cli_flag flags[] = {{"--help", "-h", NULL, 0},   {"--weights", NULL, NULL, 1}, {"--batch", NULL, NULL, 1},
                           {"--seq", NULL, NULL, 1},    {"--engine", NULL, NULL, 1},  {"--threads", NULL, NULL, 1},
                           {"--iters", NULL, NULL, 1},  {"--generate", NULL, NULL, 1}, {"--dtype", NULL, NULL, 1}, {"--compute", NULL, NULL, 1},
                           {NULL, NULL, NULL, 0}};

const cli_command cli_bench = {
    "bench", "timings of forward passes or of greedy decoding",
     "usage: fixformer bench MODEL.lua [--weights W] [--batch B] [--seq T] [--engine cc|tcc|runtime]\n"
     "                       [--threads N] [--iters N] [--generate N] [--dtype f32|bf16|int8]\n"
     "                       [--compute f32|int8|bf16]\n"
     "Times forward passes (after two warm-up runs) on random inputs and prints\n"
     "min/median/max, GFLOP/s at the median and a last line `median_ms: X`.\n"
     "  --weights W    default: the description's, else random (`init`) weights\n"
     "  --batch B      sequences per forward (default 1)\n"
     "  --seq T        positions per sequence (default min(128, max_seq))\n"
     "  --engine E     cc, tcc or runtime (default: cc where a C compiler is found, else\n"
     "                 tcc; FIXFORMER_ENGINE sets it)\n"
     "  --threads N    tcc, cc: threads for the generated code (default 1)\n"
     "  --iters N      timed runs (default 20)\n"
     "  --generate N   instead: greedy decoding of N tokens with the KV cache, tokens/s\n"
     "  --dtype T      the weight type: f32, bf16 or int8 (per 32 inputs); default: the\n"
     "                 description's dtype (f32 unless it says)\n"
     "  --compute C    what the blocks' linear layers compute in: f32, int8 or bf16\n"
     "                 (opt-in: int8 inputs quantized per row, weights per channel; bf16\n"
     "                 inputs and weights in bfloat16; docs/performance.md);\n"
     "                 default: the description's compute (f32 unless it says)\n"
     "Example:\n"
     "  fixformer bench models/tiny.lua --seq 16 --iters 50\n",
    "MODEL.lua", 0, run_bench, flags};
