/* emit.c - `fixformer emit`: C specialised to the model, written to files. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

/* "DIR/NAME" + suffix, malloc'd */
static char *out_path(const char *dir, const char *name, const char *suffix) {
  char *p = malloc(strlen(dir) + strlen(name) + strlen(suffix) + 2);
  if (p) sprintf(p, "%s/%s%s", dir, name, suffix);
  return p;
}

/* A target triple: the architecture first, e.g. aarch64-linux-gnu. */
static int check_target(const char *t, ff_error *err) {
  static const char *const arches[] = {"x86_64",   "aarch64",   "riscv64",       "riscv32", "arm",
                                       "i686",     "thumbv6m",  "thumbv7m",      "thumbv7em", "thumbv8m.main",
                                       "generic",  NULL};
  size_t n = strcspn(t, "-");
  for (const char *const *a = arches; *a; a++)
    if (strlen(*a) == n && !strncmp(t, *a, n)) {
      for (const char *p = t; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '_' || *p == '.'))
          return ff_fail(err, CLI_EUSAGE, "--target: '%s' is not a target triple", t);
      return 0;
    }
  return ff_fail(err, CLI_EUSAGE, "--target: unknown architecture in '%s' (x86_64, aarch64, riscv64, riscv32, arm, thumbv6m, "
                 "thumbv7m, thumbv7em, thumbv8m.main, i686, generic)", t);
}

/* Whether code for the target can use the ISA: its row of kernels/isas.h
 * names no architecture, or the triple's (its first part). */
static int runs_on(const ff_isa *isa, const char *target) {
  const size_t n = strcspn(target, "-");
  for (const char *p = isa->targets; *p; p += strspn(p, " ")) {
    const size_t k = strcspn(p, " ");
    if (k == n && !strncmp(p, target, n)) return 1;
    p += k;
  }
  return !*isa->targets;
}

/* Without --isa, the target gets the best ISA that every CPU of its
 * architecture runs (its row needs no CPU feature): neon on AArch64. */
static const char *target_isa(const char *target) {
  const char *best = NULL;
  for (int i = 0; ff_isa_at(i); i++)
    if (!*ff_isa_at(i)->cpu && runs_on(ff_isa_at(i), target)) best = ff_isa_at(i)->name;
  return best;
}

/* --isa must be one the --target runs: "avx2" for riscv64 is refused. */
static int check_isa_target(const char *isa, const char *target, ff_error *err) {
  char runs[256] = "";
  for (int i = 0; ff_isa_at(i); i++)
    if (runs_on(ff_isa_at(i), target)) {
      if (!strcmp(ff_isa_at(i)->name, isa)) return 0;
      snprintf(runs + strlen(runs), sizeof runs - strlen(runs), "%s%s", *runs ? ", " : "", ff_isa_at(i)->name);
    }
  return ff_fail(err, CLI_EUSAGE, "--isa %s: the target %s runs %s", isa, target, runs);
}

/* NAME_weights.c (embed) or NAME.weights, written as they are packed into
 * the temporary that ff_write_files_atomic_streamed renames: neither the
 * text nor the blob is held whole. */
typedef struct {
  ff_model *m;
  const char *weights, *path;
  int embed;
  size_t bytes;
} weights_file;

static int write_weights(void *ctx, int fd, ff_error *err) {
  weights_file *w = ctx;
  int rc = w->embed ? ff_model_weights_write(w->m, w->weights, fd, &w->bytes, err)
                    : ff_model_weight_blob_write(w->m, fd, &w->bytes, err);
  if (rc == FF_EIO) ff_fail(err, rc, "%s: %s", w->path, err->msg);
  return rc;
}

/* Makes dir (once there is something to put in it) and writes files there,
 * all or none: a folder made here is removed again if they fail.  streams:
 * NULL, or those files written by a weights_file. */
static int write_files(const char *dir, ff_file_out *files, const ff_file_stream *streams, int n_files,
                       ff_error *err) {
  struct stat st;
  int made = 0, rc;
  if (stat(dir, &st) && !(made = !mkdir(dir, 0777)) && errno != EEXIST)
    return ff_fail(err, FF_EIO, "cannot create %s: %s", dir, strerror(errno));
  if (!stat(dir, &st) && !S_ISDIR(st.st_mode)) return ff_fail(err, FF_EIO, "%s is not a directory", dir);
  if ((rc = ff_write_files_atomic_streamed(files, streams, n_files, err))) {
    if (made) rmdir(dir); /* ours, and empty: ff_write_files_atomic_streamed left nothing */
    return rc;
  }
  for (int i = 0; i < n_files; i++)
    printf("wrote %s (%zu bytes)\n", files[i].path,
           streams && streams[i].write ? ((const weights_file *)streams[i].ctx)->bytes : files[i].len);
  return 0;
}

/* --train: NAME_train.h, NAME_train.c, NAME_train_kernels.c for the shapes of --batch and --seq */
static int emit_train(ff_model *m, const char *path, const char *dir, const char *command, cli_flag *flags,
                      ff_error *err) {
  static const char *const alone[] = {"--weights", "--embed", "--with-main", "--dtype", "--compute", NULL};
  const ff_config *c = ff_model_config(m);
  for (int i = 0; alone[i]; i++)
    if (cli_value(flags, alone[i]))
      return ff_fail(err, CLI_EUSAGE, "--train writes the training code alone: no %s (the parameters are a flat "
                     "float buffer the program brings)", alone[i]);
  ff_train_shape shape;
  ff_train_code code;
  int rc = cli_train_shape(flags, c, &shape, err);
  if (rc || (rc = ff_model_train_code(m, &shape, command, &code, err))) return rc;
  ff_file_out files[3] = {{out_path(dir, c->name, "_train.h"), code.header, strlen(code.header)},
                          {out_path(dir, c->name, "_train.c"), code.source, strlen(code.source)},
                          {out_path(dir, c->name, "_train_kernels.c"), code.kernels, strlen(code.kernels)}};
  const char *const reads[] = {path};
  for (int i = 0; i < 3 && !rc; i++)
    rc = !files[i].path ? ff_fail(err, FF_ENOMEM, "out of memory") : ff_refuse_inputs(files[i].path, reads, 1, err);
  if (!rc) rc = write_files(dir, files, NULL, 3, err);
  for (int i = 0; i < 3; i++) free((void *)files[i].path);
  ff_train_code_free(&code);
  return rc;
}

static int run_emit(const char *path, cli_flag *flags, ff_error *err) {
  const char *dir, *weights = cli_value(flags, "--weights"), *target = cli_value(flags, "--target");
  int embed = cli_value(flags, "--embed") != NULL, with_main = cli_value(flags, "--with-main") != NULL, rc;
  if ((rc = cli_require(flags, "-o", &dir, err))) return rc;
  if (target && (rc = check_target(target, err))) return rc;
  /* the command, without -o and -q (where the files go does not change them), its paths as
   * the banner shows them (no machine's folders) */
  char command[1024], shown[4096];
  int n = snprintf(command, sizeof command, "fixformer emit %s", ff_shown_path(path, shown, sizeof shown));
  for (const cli_flag *f = flags; f->name && n > 0 && (size_t)n < sizeof command; f++)
    if (f->value && strcmp(f->name, "-o") && strcmp(f->name, "--quiet"))
      n += snprintf(command + n, sizeof command - (size_t)n, f->takes_value ? " %s %s" : " %s", f->name,
                    strcmp(f->name, "--weights") ? f->value : ff_shown_path(f->value, shown, sizeof shown));

  ff_model *m = cli_open_model(path, flags, err);
  if (!m) return err->code;
  const ff_config *c = ff_model_config(m);
  weights = cli_default_weights(c, weights); /* the description's, as for run */
  const char *isa = cli_value(flags, "--isa");
  if (!isa && target) isa = target_isa(target);
  if ((isa && (rc = ff_model_set_isa(m, isa, err))) || (rc = ff_model_set_target(m, target, err)) ||
      (rc = ff_model_set_line_directives(m, !cli_value(flags, "--no-line"), err)) ||
      (target && isa && (rc = check_isa_target(ff_model_isa(m), target, err)))) {
    ff_model_close(m);
    return rc;
  }
  if (cli_value(flags, "--train")) {
    rc = emit_train(m, path, dir, command, flags, err);
    ff_model_close(m);
    return rc;
  }
  if (cli_value(flags, "--batch") || cli_value(flags, "--seq") || cli_value(flags, "--recompute")) {
    ff_model_close(m);
    return ff_fail(err, CLI_EUSAGE, "--batch, --seq and --recompute go with --train");
  }
  if (embed && !weights) {
    ff_model_close(m);
    return ff_fail(err, CLI_EUSAGE, "--embed needs --weights W.safetensors");
  }
  const char *header, *source, *kernels;
  char *driver = NULL;
  if ((weights && (rc = cli_load_weights(m, flags, weights, err))) ||
      (rc = ff_model_generate(m, command, &header, &source, err)) || (rc = ff_model_kernel_source(m, &kernels, err)))
    goto done;
  /* everything is rendered before the first file is written (the weights as they are written), and
   * written all or none */
  if (with_main && (rc = ff_model_driver_source(m, embed, &driver, err))) goto done;
  ff_file_out files[6];
  ff_file_stream streams[6] = {{0}};
  weights_file packed = {m, weights, NULL, embed, 0};
  int n_files = 0;
  files[n_files++] = (ff_file_out){out_path(dir, c->name, ".h"), header, strlen(header)};
  files[n_files++] = (ff_file_out){out_path(dir, c->name, ".c"), source, strlen(source)};
  files[n_files++] = (ff_file_out){out_path(dir, c->name, "_kernels.c"), kernels, strlen(kernels)};
  if (weights) {
    streams[n_files] = (ff_file_stream){write_weights, &packed};
    files[n_files++] = (ff_file_out){packed.path = out_path(dir, c->name, embed ? "_weights.c" : ".weights"), NULL, 0};
  }
  if (driver) files[n_files++] = (ff_file_out){out_path(dir, c->name, "_main.c"), driver, strlen(driver)};
  for (int i = 0; i < n_files; i++)
    if (!files[i].path) {
      rc = ff_fail(err, FF_ENOMEM, "out of memory");
      goto written;
    }
  const char *const reads[] = {path, weights, with_main ? c->vocabulary : NULL};
  for (int i = 0; i < n_files; i++)
    if ((rc = ff_refuse_inputs(files[i].path, reads, 3, err))) goto written;
  rc = write_files(dir, files, streams, n_files, err);
written:
  for (int i = 0; i < n_files; i++) free((void *)files[i].path);
done:
  free(driver);
  ff_model_close(m);
  return rc;
}

static cli_flag flags[] = {{"--help", "-h", NULL, 0},     {"-o", "--output", NULL, 1},
                           {"--weights", NULL, NULL, 1}, {"--embed", NULL, NULL, 0},
                           {"--target", NULL, NULL, 1},  {"--with-main", NULL, NULL, 0},
                           {"--isa", NULL, NULL, 1},     {"--allow-nonfinite", NULL, NULL, 0},
                           {"--dtype", NULL, NULL, 1}, {"--compute", NULL, NULL, 1},   {"--quiet", "-q", NULL, 0},
                           {"--no-line", NULL, NULL, 0}, {"--train", NULL, NULL, 0},
                           {"--batch", NULL, NULL, 1},   {"--seq", NULL, NULL, 1},
                           {"--recompute", NULL, NULL, 0},
                           {NULL, NULL, NULL, 0}};

const cli_command cli_emit = {
    "emit", "C specialised to the model (files, for any target)",
     "usage: fixformer emit MODEL.lua -o DIR [--weights W.safetensors [--embed]] [--target TRIPLE]\n"
     "                      [--isa ISA|native] [--with-main] [--dtype f32|bf16|int8]\n"
     "                      [--compute f32|int8|bf16] [--no-line]\n"
     "       fixformer emit MODEL.lua -o DIR --train [--batch B] [--seq N|S,T] [--recompute] [--target T]\n"
     "                      [--isa I]\n"
     "Writes C specialised to the model's shapes: DIR/NAME.c, DIR/NAME.h and DIR/NAME_kernels.c\n"
     "(the kernels NAME.c calls, which it includes: build NAME.c alone).\n"
     "  -o, --output DIR the folder (made if need be)\n"
     "  --weights W      also write the weights packed in the code's layout: DIR/NAME.weights\n"
     "                   (default: the description's weights, if it names them)\n"
     "  --embed          ... as C arrays in DIR/NAME_weights.c instead (no file at run time)\n"
     "  --target TRIPLE  the target, e.g. aarch64-linux-gnu (recorded in the header; picks --isa)\n"
     "  --isa ISA        the matrix kernels: a row of `fixformer info --isas`, which says\n"
     "                   the C flags to build them with and what runs them; default:\n"
     "                   generic (portable C99), or the best one every CPU of the --target\n"
     "                   runs (neon for aarch64); native: the best this machine runs; one\n"
     "                   the --target cannot run is refused\n"
     "  --with-main      also DIR/NAME_main.c, a driver with the flags of `fixformer run`\n"
     "  --dtype T        the weight type: f32, bf16 or int8 (per 32 inputs); default: the\n"
     "                   description's dtype (f32 unless it says)\n"
     "  --compute C      what the blocks' linear layers compute in: f32, int8 or bf16\n"
     "                   (opt-in: int8 inputs quantized per row, weights per channel; bf16\n"
     "                   inputs and weights in bfloat16; docs/performance.md);\n"
     "                   default: the description's compute (f32 unless it says)\n"
     "  --no-line        no #line directives (they name fixformer's templates/ and kernels/)\n"
     "  --allow-nonfinite  write weights holding NaN or infinities (refused by default;\n"
     "                   the packed blob only: --embed cannot write them as C literals)\n"
     "  --train          instead: training code, DIR/NAME_train.c, NAME_train.h and\n"
     "                   NAME_train_kernels.c: the loss, its gradient and AdamW for batches of up\n"
     "                   to --batch B (32) sequences of up to --seq N positions (max_seq; S,T:\n"
     "                   source and target), the sizes as macros, no malloc\n"
     "  --recompute      with --train: keep only each sub-layer's input; the backward pass runs\n"
     "                   the sub-layer's forward again (a smaller state, the same results)\n"
     "  -q, --quiet      no progress lines on stderr\n"
     "The files appear all or none.  The same inputs give byte-identical files.  Build, e.g.:\n"
     "  cc -O2 -o NAME DIR/NAME.c DIR/NAME_main.c [DIR/NAME_weights.c] -lm\n"
     "Example:\n"
     "  fixformer emit models/dates.lua -o dates --embed --with-main\n"
     "  cc -O2 -o dates/dates dates/dates.c dates/dates_main.c dates/dates_weights.c -lm\n",
    "MODEL.lua", 0, run_emit, flags};
