/* train_check.c - for tests/train.py: the library's training parts one at
 * a time (include/fixformer_train.h).
 *
 *   train_check schedule D_MODEL N [--option value ...]
 *       the learning rate of steps 0 .. N-1, one a line (%.17g)
 *   train_check optimizer MODEL.lua DATA DIR [--option value ...]
 *       a trainer whose engine hands it DIR/grad_K.safetensors as step K's
 *       gradient (of a loss over 1 token): from DIR/init.safetensors, --steps
 *       steps of clipping, AdamW and the schedule; writes DIR/out.safetensors
 *       and DIR/norms.txt (the gradient norm of each step)
 *   train_check order MODEL.lua DATA N [--option value ...]
 *       line 1 the held-out samples' indices in the file, line 2 the file
 *       indices of training positions 0 .. N-1 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ff_rt_train.h"
#include "fixformer_train.h"

static int options(int argc, char **argv, ff_train_options *o, ff_error *err) {
  ff_train_options_default(o);
  for (int i = 0; i + 1 < argc; i += 2) {
    if (strncmp(argv[i], "--", 2)) return ff_fail(err, FF_EINVAL, "expected --option, got %s", argv[i]);
    int rc = ff_train_option_set(o, argv[i] + 2, argv[i + 1], err);
    if (rc) return rc;
  }
  if (argc % 2) return ff_fail(err, FF_EINVAL, "%s needs a value", argv[argc - 1]);
  return ff_train_options_check(o, err);
}

static int schedule(int argc, char **argv, ff_error *err) {
  ff_train_options o;
  if (argc < 2) return ff_fail(err, FF_EINVAL, "usage: train_check schedule D_MODEL N [--option value ...]");
  int rc = options(argc - 2, argv + 2, &o, err);
  if (rc) return rc;
  ff_lr_schedule s;
  ff_lr_schedule_init(&s, &o, atoi(argv[0]));
  for (int i = 0, n = atoi(argv[1]); i < n; i++, ff_lr_schedule_step(&s)) printf("%.17g\n", s.lr);
  return 0;
}

/* ---- an engine that reads the gradients from files ------------------------------------ */

typedef struct {
  const char *dir;
  ff_rt_params g; /* the layout, loaded with each step's file */
  FILE *norms;
} file_engine;

static int file_grad(void *ctx, const float *params, const ff_train_batch *b, const ff_train_step_opts *o,
                     float *grad, double *loss_sum, int64_t *tokens, ff_error *err) {
  file_engine *e = ctx;
  char path[4200];
  (void)params;
  *loss_sum = 0.0, *tokens = b->first == 0; /* one token a step: the trainer's mean is the gradient given */
  if (!grad || b->first != 0) return 0;
  snprintf(path, sizeof path, "%s/grad_%llu.safetensors", e->dir, (unsigned long long)o->step);
  int rc = ff_rt_params_load(&e->g, path, err);
  if (rc) return rc;
  for (size_t i = 0; i < e->g.numel; i++) grad[i] += e->g.data[i];
  return 0;
}

static void report_norm(void *ctx, const ff_train_report *r) {
  fprintf(((file_engine *)ctx)->norms, "%.9g\n", r->grad_norm);
}

static int optimizer(int argc, char **argv, ff_error *err) {
  ff_train_options o;
  char path[4200];
  if (argc < 3) return ff_fail(err, FF_EINVAL, "usage: train_check optimizer MODEL.lua DATA DIR [--option value ...]");
  int rc = options(argc - 3, argv + 3, &o, err);
  if (rc) return rc;
  ff_model *m = ff_model_open(argv[0], err);
  if (!m) return err->code;
  file_engine fe;
  memset(&fe, 0, sizeof fe);
  fe.dir = argv[2];
  ff_trainer *t = ff_trainer_new(m, argv[1], &o, err);
  if (!t) rc = err->code;
  if (!rc) rc = ff_rt_params_layout(&fe.g, ff_model_config(m), err);
  snprintf(path, sizeof path, "%s/init.safetensors", argv[2]);
  if (!rc) rc = ff_trainer_init(t, path, err);
  ff_train_engine e = {"files", &fe, file_grad, NULL, 0}; /* adds: the trainer zeroes grad */
  if (!rc) rc = ff_trainer_set_engine(t, &e, err);
  snprintf(path, sizeof path, "%s/norms.txt", argv[2]);
  if (!rc && !(fe.norms = fopen(path, "w"))) rc = ff_fail(err, FF_EIO, "%s: cannot write", path);
  ff_train_run run = {NULL, report_norm, &fe, NULL};
  if (!rc) rc = ff_trainer_run(t, &run, err);
  if (fe.norms) fclose(fe.norms);
  snprintf(path, sizeof path, "%s/out.safetensors", argv[2]);
  if (!rc) rc = ff_trainer_save_weights(t, path, err);
  ff_rt_params_free(&fe.g);
  ff_trainer_free(t);
  ff_model_close(m);
  return rc;
}

static int order(int argc, char **argv, ff_error *err) {
  ff_train_options o;
  if (argc < 3) return ff_fail(err, FF_EINVAL, "usage: train_check order MODEL.lua DATA N [--option value ...]");
  int rc = options(argc - 3, argv + 3, &o, err);
  if (rc) return rc;
  ff_model *m = ff_model_open(argv[0], err);
  if (!m) return err->code;
  ff_trainer *t = ff_trainer_new(m, argv[1], &o, err);
  if (!t) {
    ff_model_close(m);
    return err->code;
  }
  int64_t n_train, n_held;
  ff_trainer_samples(t, &n_train, &n_held);
  for (int64_t i = 0; i < n_held; i++) printf("%s%lld", i ? " " : "", (long long)ff_trainer_held_out_index(t, i));
  printf("\n");
  for (int64_t i = 0, n = atoll(argv[2]); i < n; i++)
    printf("%s%lld", i ? " " : "", (long long)ff_trainer_stream_index(t, i));
  printf("\n");
  ff_trainer_free(t);
  ff_model_close(m);
  return 0;
}

int main(int argc, char **argv) {
  ff_error err = {0, ""};
  int rc = FF_EINVAL;
  if (argc >= 2 && !strcmp(argv[1], "schedule")) rc = schedule(argc - 2, argv + 2, &err);
  else if (argc >= 2 && !strcmp(argv[1], "optimizer")) rc = optimizer(argc - 2, argv + 2, &err);
  else if (argc >= 2 && !strcmp(argv[1], "order")) rc = order(argc - 2, argv + 2, &err);
  else ff_fail(&err, FF_EINVAL, "usage: train_check schedule|optimizer|order ...");
  if (rc) fprintf(stderr, "train_check: %s\n", err.msg);
  return rc ? 1 : 0;
}
