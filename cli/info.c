/* info.c - `fixformer info`: the resolved description, its weights and FLOPs, a checkpoint checked against it, the ISA table. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "fixformer_train.h"

static int print_weight(void *ctx, const ff_weight_info *w) {
  (void)ctx;
  if (w->rank == 2)
    printf("--   %-56s [%d, %d]\n", w->name, w->shape[0], w->shape[1]);
  else
    printf("--   %-56s [%d]\n", w->name, w->shape[0]);
  return 0;
}

/* ---- info --weights: a checkpoint against the description ---------------- */

typedef struct {
  const char *path;            /* the weights file */
  const ff_tensor_file *file;
  unsigned char *seen;         /* one flag per file tensor */
  int problems;
  ff_error *err;               /* the first problem */
} checkpoint_check;

static const char *const dtype_names[] = {"F32", "F16", "BF16", "I32", "I64"};

static void shape_text(char *buf, size_t n, int rank, const int64_t *shape) {
  int at = snprintf(buf, n, "[");
  for (int i = 0; i < rank && at > 0 && (size_t)at < n; i++)
    at += snprintf(buf + at, n - (size_t)at, i ? ",%lld" : "%lld", (long long)shape[i]);
  if (at > 0 && (size_t)at < n) snprintf(buf + at, n - (size_t)at, "]");
}

/* One row of the table; the first problem is also kept in err. */
static void check_row(checkpoint_check *k, const char *name, const char *shape, const char *dtype,
                      const char *problem) {
  printf("  %-52s %-14s %-5s %s\n", name, shape, dtype, problem ? problem : "ok");
  if (problem && !k->problems++) ff_fail(k->err, FF_EINVAL, "%s: tensor '%s': %s", k->path, name, problem);
}

/* A described tensor: present, same shape, finite (any accepted dtype). */
static int check_described(void *ctx, const ff_weight_info *s) {
  checkpoint_check *k = ctx;
  int64_t want[2] = {s->shape[0], s->shape[1]};
  char wants[64], haves[160], problem[256];
  shape_text(wants, sizeof wants, s->rank, want);
  const ff_tensor *t = ff_tensor_file_find(k->file, s->name);
  if (!t) {
    check_row(k, s->name, wants, "-", "missing");
    return 0;
  }
  k->seen[t - k->file->tensors] = 1;
  int same = t->rank == s->rank;
  for (int i = 0; same && i < s->rank; i++) same = t->shape[i] == want[i];
  size_t bad = 0, first = 0;
  for (size_t i = 0; same && i < t->numel; i++)
    if (!isfinite(t->data[i]) && !bad++) first = i;
  shape_text(haves, sizeof haves, t->rank, t->shape);
  if (!same)
    snprintf(problem, sizeof problem, "shape %s in file, model needs %s", haves, wants);
  else if (bad)
    snprintf(problem, sizeof problem, "%zu non-finite value%s (the first, %g, at element %zu)", bad,
             bad > 1 ? "s" : "", (double)t->data[first], first);
  check_row(k, s->name, same ? wants : haves, dtype_names[t->file_dtype], same && !bad ? NULL : problem);
  return 0;
}

/* Every tensor the description names, then the file's others. */
static int check_checkpoint(const ff_config *c, const char *weights, ff_error *err) {
  ff_tensor_file file = {0};
  int rc = ff_config_read_weights(c, weights, &file, err); /* separate q/k/v, gate/up fused, as the model sees them */
  if (rc) return rc;
  checkpoint_check k = {weights, &file, calloc((size_t)file.count + 1, 1), 0, err};
  if (!k.seen) {
    ff_tensor_file_free(&file);
    return ff_fail(err, FF_ENOMEM, "out of memory");
  }
  printf("-- %s against %s: %d tensors in the file\n  %-52s %-14s %-5s %s\n", weights, c->name, file.count,
         "tensor", "shape", "dtype", "check");
  ff_config_weights(c, check_described, &k);
  for (int i = 0; i < file.count; i++)
    if (!k.seen[i]) {
      char shape[160];
      shape_text(shape, sizeof shape, file.tensors[i].rank, file.tensors[i].shape);
      check_row(&k, file.tensors[i].name, shape, dtype_names[file.tensors[i].file_dtype],
                "unexpected (not used by this description)");
    }
  size_t tensors, params;
  ff_config_count_weights(c, &tensors, &params);
  if (k.problems)
    printf("-- %d problem%s; the first: %s\n", k.problems, k.problems > 1 ? "s" : "", err->msg);
  else
    printf("-- ok: %zu tensors, %zu parameters, as the description needs\n", tensors, params);
  free(k.seen);
  ff_tensor_file_free(&file);
  return k.problems ? FF_EINVAL : 0;
}

/* info: the resolved description (ff_model_describe), defaults filled in */
static int print_config(const ff_model *m, const char *path, ff_error *err) {
  char *text;
  int rc = ff_model_describe(m, &text, err);
  if (rc) return rc;
  printf("-- %s, resolved (defaults filled in)\n%s", path, text);
  free(text);
  return 0;
}

/* s with its spaces as commas ("-" when empty): one word of info --isas */
static const char *as_word(const char *s, const char *empty, char *buf, size_t n) {
  snprintf(buf, n, "%s", *s ? s : empty);
  for (char *p = buf; *p; p++)
    if (*p == ' ') *p = ',';
  return buf;
}

/* info --isas: the ISA table (kernels/isas.h), one row per ISA, no trailing blanks */
static int print_isas(void) {
  char cpu[128], targets[128], line[512];
  int wn = 8, wc = 3, wt = 7; /* the columns' widths: their longest word */
  for (int i = 0; ff_isa_at(i); i++) {
    int n = (int)strlen(ff_isa_at(i)->name), c = (int)strlen(as_word(ff_isa_at(i)->cpu, "-", cpu, sizeof cpu)),
        t = (int)strlen(as_word(ff_isa_at(i)->targets, "any", targets, sizeof targets));
    wn = n > wn ? n : wn, wc = c > wc ? c : wc, wt = t > wt ? t : wt;
  }
  printf("%-*s %3s %3s  %-4s  %-*s  %-*s  %s\n", wn, "isa", "MR", "NR", "runs", wc, "CPU", wt, "targets", "C flags");
  for (int i = 0; ff_isa_at(i); i++) {
    const ff_isa *isa = ff_isa_at(i);
    snprintf(line, sizeof line, "%-*s %3d %3d  %-4s  %-*s  %-*s  %s", wn, isa->name, isa->mr, isa->nr,
             isa->runs_here ? "yes" : "no", wc, as_word(isa->cpu, "-", cpu, sizeof cpu), wt,
             as_word(isa->targets, "any", targets, sizeof targets), isa->flags);
    size_t n = strlen(line);
    while (n && line[n - 1] == ' ') line[--n] = 0;
    printf("%s\n", line);
  }
  return 0;
}

/* info --train: what training takes, before anything runs */
static void mb(const char *what, size_t bytes) { printf("--   %-16s %14zu bytes  %10.2f MB\n", what, bytes, bytes / 1e6); }

/* --engine tcc|cc: generated training code's state at --batch x --seq for this machine's best ISA (as
 * `fixformer train --engine` makes it), beside the parameters, gradient and moments */
static int print_generated_memory(ff_model *m, const cli_flag *flags, int engine, ff_error *err) {
  const ff_config *c = ff_model_config(m);
  ff_train_shape shape;
  ff_train_code code;
  ff_train_memory mem; /* the parameters, one gradient, the moments and the batch: as the runtime's on 1 thread */
  int rc = cli_train_shape(flags, c, &shape, err), encdec = c->arch == FF_ARCH_ENCODER_DECODER;
  if (!rc) rc = ff_train_memory_estimate(c, shape.batch, shape.src, encdec ? shape.tgt : shape.src, 1, &mem, err);
  if (!rc) rc = ff_model_set_isa(m, "native", err);
  if (!rc) rc = ff_model_train_code(m, &shape, NULL, &code, err);
  if (rc) return rc;
  char positions[64];
  snprintf(positions, sizeof positions, encdec ? "%d source and %d target positions" : "%d positions", shape.src,
           shape.tgt);
  printf("-- training %s: %zu parameters, batch %d x %s, generated code (%s, %s)%s\n", c->name, code.params,
         shape.batch, positions, ff_engine_name((enum ff_engine)engine), ff_model_isa(m),
         shape.recompute ? ", --recompute" : "");
  mb("parameters", mem.params);
  mb("gradients", mem.grads);
  mb("AdamW moments", mem.optimizer);
  mb("activations", code.activation_bytes); /* with the panels: the footnote */
  mb("scratch", code.scratch_bytes);
  mb("batch", mem.batch);
  mb("total", mem.params + mem.grads + mem.optimizer + code.state_bytes + mem.batch);
  printf("-- assumes the generated code's state (NAME_TRAIN_STATE_BYTES of emit --train): the batch's activations "
         "and gradients with their lifetimes overlapped%s, each matrix's panels among them (packed right before "
         "its product), its scratch\n",
         shape.recompute ? " (each sub-layer's input kept, the rest recomputed)" : "");
  ff_train_code_free(&code);
  return 0;
}

static int print_train_memory(ff_model *m, const cli_flag *flags, ff_error *err) {
  const ff_config *c = ff_model_config(m);
  int B, S, threads, rc, engine = FF_ENGINE_RUNTIME;
  const char *e = cli_value(flags, "--engine");
  if (e && (engine = ff_engine_parse(e)) < 0) return ff_fail(err, CLI_EUSAGE, "--engine: '%s' is not one of cc, tcc, "
                                                             "runtime", e);
  if (engine != FF_ENGINE_RUNTIME) return print_generated_memory(m, flags, engine, err);
  if (cli_value(flags, "--recompute")) return ff_fail(err, CLI_EUSAGE, "--recompute goes with --engine tcc or cc");
  if ((rc = cli_int(flags, "--batch", 32, &B, err)) || (rc = cli_int(flags, "--seq", c->max_seq, &S, err)) ||
      (rc = cli_int(flags, "--threads", 1, &threads, err)))
    return rc;
  ff_train_memory mem;
  if ((rc = ff_train_memory_estimate(c, B, S, S, threads, &mem, err))) return rc;
  size_t params, tensors;
  ff_config_count_weights(c, &tensors, &params);
  printf("-- training %s: %zu parameters, batch %d x %d positions%s, %d thread%s, the runtime engine\n", c->name,
         params, B, S, c->arch == FF_ARCH_ENCODER_DECODER ? " (source and target)" : "", threads,
         threads > 1 ? "s" : "");
  mb("parameters", mem.params);
  mb("gradients", mem.grads);
  mb("AdamW moments", mem.optimizer);
  mb("activations", mem.activations);
  mb("batch", mem.batch);
  mb("total", mem.params + mem.grads + mem.optimizer + mem.activations + mem.batch);
  printf("-- assumes %s\n", mem.assumes);
  return 0;
}

static int run_info(const char *path, cli_flag *flags, ff_error *err) {
  if (cli_value(flags, "--schema") || cli_value(flags, "--markdown")) {
    if (path || cli_value(flags, "--weights") || cli_value(flags, "--isas") || !cli_value(flags, "--schema"))
      return ff_fail(err, CLI_EUSAGE, "--schema [--markdown] takes no model, --weights or --isas");
    char *text;
    int rc = ff_schema_text(cli_value(flags, "--markdown") ? FF_SCHEMA_MARKDOWN : FF_SCHEMA_JSON, &text, err);
    if (!rc) fputs(text, stdout);
    free(text);
    return rc;
  }
  if (cli_value(flags, "--isas")) {
    if (path || cli_value(flags, "--weights")) return ff_fail(err, CLI_EUSAGE, "--isas takes no model or --weights");
    return print_isas();
  }
  if (!path) return ff_fail(err, CLI_EUSAGE, "missing MODEL.lua (see fixformer info --help)");
  ff_model *m = cli_open_model(path, flags, err);
  if (!m) return err->code;
  ff_model_set_progress(m, NULL, NULL);
  const ff_config *c = ff_model_config(m);
  const char *weights = cli_value(flags, "--weights");
  if (!cli_value(flags, "--train") && (cli_value(flags, "--batch") || cli_value(flags, "--seq") ||
                                       cli_value(flags, "--engine") || cli_value(flags, "--recompute"))) {
    ff_model_close(m);
    return ff_fail(err, CLI_EUSAGE, "--batch, --seq, --engine and --recompute go with --train");
  }
  if (cli_value(flags, "--train")) {
    int rc = weights ? ff_fail(err, CLI_EUSAGE, "--train takes no --weights") : print_train_memory(m, flags, err);
    ff_model_close(m);
    return rc;
  }
  if (weights) { /* the check only: the description itself is what plain `info` shows */
    int rc = check_checkpoint(c, weights, err);
    ff_model_close(m);
    return rc;
  }
  int rc = print_config(m, path, err);
  if (rc) {
    ff_model_close(m);
    return rc;
  }
  size_t tensors, params;
  ff_config_count_weights(c, &tensors, &params);
  printf("-- weights: %zu tensors, %zu parameters (%.2f MB float32)\n", tensors, params, params * 4.0 / 1e6);
  ff_config_weights(c, print_weight, NULL);
  int T = c->max_seq;
  printf("-- FLOPs per token: %.0f at T = 1, %.0f averaged over T = max_seq = %d\n",
         ff_config_forward_flops(c, 1, 1), ff_config_forward_flops(c, T, T) / T, T);
  printf("-- output per position: %d %s\n", ff_config_out_dim(c), ff_config_has_head(c) ? "logits" : "hidden states");
  ff_model_close(m);
  return 0;
}

static cli_flag flags[] = {{"--help", "-h", NULL, 0}, {"--weights", NULL, NULL, 1}, {"--isas", NULL, NULL, 0},
                           {"--dtype", NULL, NULL, 1}, {"--compute", NULL, NULL, 1},  {"--schema", NULL, NULL, 0},  {"--markdown", NULL, NULL, 0},
                           {"--train", NULL, NULL, 0},  {"--batch", NULL, NULL, 1},   {"--seq", NULL, NULL, 1},
                           {"--threads", NULL, NULL, 1}, {"--engine", NULL, NULL, 1}, {"--recompute", NULL, NULL, 0},
                           {NULL, NULL, NULL, 0}};

const cli_command cli_info = {
    "info", "the resolved description, weights, parameters and FLOPs",
     "usage: fixformer info MODEL.lua [--weights W.safetensors]\n"
     "       fixformer info MODEL.lua --train [--batch B] [--seq T] [--threads N] [--engine E [--recompute]]\n"
     "       fixformer info --isas\n"
     "       fixformer info --schema [--markdown]\n"
     "Prints the resolved description (defaults filled in), the weight tensors\n"
     "with their shapes, the parameter count and the FLOPs per token.\n"
     "  --weights W   instead: check the checkpoint against the description without\n"
     "                running it (every tensor present, none extra, shapes, finite\n"
     "                values; F32, F16 and BF16 accepted) in a table; exits 1 naming\n"
     "                the first problem\n"
     "  --train       instead: the bytes `fixformer train` takes for a batch of B (32)\n"
     "                sequences of T positions (max_seq) on N threads (1): parameters,\n"
     "                gradients, AdamW's moments, activations (the runtime engine's scheme;\n"
     "                --engine tcc or cc: generated code's state for this machine, --seq\n"
     "                N or S,T, --recompute as train's)\n"
     "  --isas        instead: the ISAs of emit --isa (kernels/isas.h): register\n"
     "                tile MR x NR, whether this machine runs them, the CPU features\n"
     "                and target architectures they need, their C flags\n"
     "  --schema      instead: every description key and weight kind (include/ff_schema.h)\n"
     "                as JSON: kinds, defaults, bounds, values, conditions, shapes\n"
     "  --markdown    with --schema: the key table of docs/model-description.md\n"
     "  --dtype T     the weight type: f32, bf16 or int8 (per 32 inputs); default: the\n"
     "                description's dtype (f32 unless it says)\n"
     "  --compute C   what the blocks' linear layers compute in: f32, int8 or bf16\n"
     "                (opt-in: int8 inputs quantized per row, weights per channel; bf16\n"
     "                inputs and weights in bfloat16; docs/performance.md);\n"
     "                default: the description's compute (f32 unless it says)\n"
     "Examples:\n"
     "  fixformer info models/tiny.lua\n"
     "  fixformer info models/tiny.lua --weights tiny.safetensors\n"
     "  fixformer info --isas\n"
     "  fixformer info --schema\n",
    "MODEL.lua", 1, run_info, flags};
