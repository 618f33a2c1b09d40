/* train.c - `fixformer train`: the library's trainer (fixformer_train.h) on
 * a data file, its options from the description's train block, a resumed
 * checkpoint and the flags (in that order, the later winning); progress,
 * the log, checkpoints on SIGINT / SIGTERM, the weights and the plot.
 * Started by mpirun, every rank runs this same code: rank 0 prints and
 * writes, and every failure is agreed on (ff_train_mpi_agree) before the
 * ranks part, so that none waits for another that has given up. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "fixformer_train.h"

/* the options the flags set, by the library's names ("--weight-decay" -> weight-decay) */
static const char *const option_flags[] = {
    "--steps", "--batch", "--micro-batch", "--lr", "--betas", "--eps", "--weight-decay", "--no-decay",
    "--schedule", "--warmup", "--decay-steps", "--min-lr", "--clip", "--label-smoothing", "--dropout", "--seed",
    "--init", "--engine", "--threads", "--format", "--seq", "--holdout", "--eval-every", "--eval-exact", "--save-every",
    "--log-every", NULL};

static volatile sig_atomic_t stop_signal;
static void on_signal(int sig) { stop_signal = sig; }

typedef struct {
  const char *data, *out, *weights, *resume, *checkpoint, *log, *plot;
  char checkpoint_default[FF_PATH_MAX];
} train_files;

/* out.safetensors -> out.ckpt.safetensors */
static int default_checkpoint(train_files *f, ff_error *err) {
  size_t n = strlen(f->out), ext = strlen(".safetensors");
  if (n >= ext && !strcmp(f->out + n - ext, ".safetensors")) n -= ext;
  if (n + 18 > sizeof f->checkpoint_default) return ff_fail(err, CLI_EUSAGE, "-o: the path is too long");
  snprintf(f->checkpoint_default, sizeof f->checkpoint_default, "%.*s.ckpt.safetensors", (int)n, f->out);
  f->checkpoint = f->checkpoint_default;
  return 0;
}

/* no output over an input, nor two outputs on one file */
static int check_files(const char *model, const ff_config *c, const train_files *f, ff_error *err) {
  const char *inputs[] = {model, f->data, f->weights, c->vocabulary[0] ? c->vocabulary : NULL};
  const char *outs[] = {f->out, f->checkpoint, f->log, f->plot};
  for (int i = 0; i < 4; i++) {
    int rc = outs[i] ? ff_refuse_inputs(outs[i], inputs, 4, err) : 0;
    if (rc) return rc;
    for (int j = 0; j < i; j++)
      if (outs[i] && outs[j] && !strcmp(outs[i], outs[j]))
        return ff_fail(err, CLI_EUSAGE, "%s is given as two outputs (-o, --checkpoint, --log, --plot)", outs[i]);
  }
  if (f->resume && ff_refuse_inputs(f->out, (const char *const[]){f->resume}, 1, err))
    return FF_EIO;
  return 0;
}

/* defaults, the description's train block, the checkpoint's record, the flags */
static int train_options(ff_model *m, cli_flag *flags, const train_files *f, ff_train_options *o, ff_error *err) {
  ff_train_options_default(o);
  int rc = ff_train_options_from_model(m, o, err);
  if (!rc && f->resume) rc = ff_train_options_from_checkpoint(f->resume, o, err);
  for (int i = 0; !rc && option_flags[i]; i++) {
    const char *v = cli_value(flags, option_flags[i]);
    if (v && ff_train_option_set(o, option_flags[i] + 2, v, err)) rc = ff_fail(err, CLI_EUSAGE, "--%s", err->msg);
  }
  if (!rc && cli_value(flags, "--recompute")) o->recompute = 1;
  return rc; /* (the engine's default is the runtime, the reference, not FIXFORMER_ENGINE's) */
}

/* ---- progress ------------------------------------------------------------------------- */

typedef struct {
  ff_train_log *log;
  int live, quiet, every;
  int64_t first_step;
  double started;
  int rc;
  ff_error err;
} progress;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void duration(char *buf, size_t n, double s) {
  long t = (long)(s + 0.5);
  if (t >= 3600) snprintf(buf, n, "%ldh%02ldm", t / 3600, t / 60 % 60);
  else if (t >= 60) snprintf(buf, n, "%ldm%02lds", t / 60, t % 60);
  else snprintf(buf, n, "%lds", t);
}

static void report(void *ctx, const ff_train_report *r) {
  progress *p = ctx;
  if (p->log && !p->rc) p->rc = ff_train_log_write(p->log, r, &p->err);
  if (p->quiet) return;
  double elapsed = now_s() - p->started, per = elapsed / (double)(r->step - p->first_step);
  char eta[32], line[256];
  duration(eta, sizeof eta, per * (double)(r->steps - r->step));
  int n = snprintf(line, sizeof line, "step %lld/%lld  loss %.4f  lr %.3g  grad %.3g  %.0f tok/s  ETA %s",
                   (long long)r->step, (long long)r->steps, r->loss, r->lr, r->grad_norm,
                   r->seconds > 0 ? (double)r->tokens / r->seconds : 0.0, eta);
  if (r->evaluated && n > 0 && (size_t)n < sizeof line)
    n += snprintf(line + n, sizeof line - (size_t)n, "  held-out loss %.4f", r->valid_loss);
  if (r->evaluated && r->valid_exact >= 0 && n > 0 && (size_t)n < sizeof line)
    snprintf(line + n, sizeof line - (size_t)n, "  exact %.1f%%", 100.0 * r->valid_exact);
  if (p->live) { /* one line on the terminal, rewritten; kept when it has a held-out figure */
    fprintf(stderr, "\r%s\033[K%s", line, r->evaluated || r->step == r->steps ? "\n" : "");
    fflush(stderr);
  } else if (r->evaluated || r->step == r->steps || r->step % p->every == 0 || r->step == p->first_step + 1) {
    printf("%s\n", line);
    fflush(stdout);
  }
}

/* ---- the command -------------------------------------------------------------------------- */

static int run_steps(ff_trainer *t, const ff_train_options *o, const train_files *f, cli_flag *flags, int rank,
                     ff_error *err) {
  progress p = {NULL, isatty(STDERR_FILENO), cli_quiet(flags) || rank,
                o->log_every ? o->log_every : (o->steps + 19) / 20, ff_trainer_steps_done(t), now_s(), 0, {0, ""}};
  int rc = 0;
  if (!rank && f->log && !(p.log = ff_train_log_open(f->log, f->resume != NULL, err))) rc = err->code;
  if ((rc = ff_train_mpi_agree(rc, err))) return rc;
  struct sigaction sa, old_int, old_term;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  stop_signal = 0;
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  ff_train_run run = {f->checkpoint, report, &p, &stop_signal};
  rc = ff_trainer_run(t, &run, err);
  sigaction(SIGINT, &old_int, NULL);
  sigaction(SIGTERM, &old_term, NULL);
  if (rc && p.live && !p.quiet && ff_trainer_steps_done(t) > p.first_step)
    fputc('\n', stderr); /* the error's line after the live one, not on it */
  if (rc == FF_EINTR)
    rc = ff_fail(err, FF_EINTR, "interrupted by %s: %s (continue with --resume %s)",
                 stop_signal == SIGINT ? "SIGINT" : stop_signal == SIGTERM ? "SIGTERM" : "a signal to another rank",
                 err->msg, f->checkpoint);
  if (!rc && p.rc) rc = ff_fail(err, p.rc, "%s", p.err.msg);
  int lrc = ff_train_log_close(p.log, rc ? NULL : err);
  return rc ? rc : lrc;
}

static int train(const char *path, cli_flag *flags, int rank, int ranks, ff_error *err) {
  train_files f = {cli_value(flags, "--data"), cli_value(flags, "-o"), cli_value(flags, "--weights"),
                   cli_value(flags, "--resume"), cli_value(flags, "--checkpoint"), cli_value(flags, "--log"),
                   cli_value(flags, "--plot"), ""};
  int rc = cli_require(flags, "--data", &f.data, err);
  if (!rc) rc = cli_require(flags, "-o", &f.out, err);
  if (!rc && f.weights && f.resume)
    rc = ff_fail(err, CLI_EUSAGE, "give --weights (where to start) or --resume (where to continue), not both");
  if (!rc && !f.checkpoint) rc = default_checkpoint(&f, err);
  if (rc) return rc; /* (the same command line on every rank: the same failure) */
  ff_model *m = ff_model_open(path, err);
  ff_train_options o;
  ff_trainer *t = NULL;
  if (!m)
    rc = err->code;
  else if (!(rc = check_files(path, ff_model_config(m), &f, err)) && !(rc = train_options(m, flags, &f, &o, err)) &&
           (t = ff_trainer_new(m, f.data, &o, err)))
    rc = f.resume ? ff_trainer_resume(t, f.resume, err) : ff_trainer_init(t, f.weights, err);
  else if (!rc)
    rc = err->code;
  if (!(rc = ff_train_mpi_agree(rc, err))) rc = run_steps(t, &o, &f, flags, rank, err);
  if (!rc) rc = ff_trainer_save_weights(t, f.out, err); /* (these two write on rank 0) */
  if (!rc && f.plot) rc = ff_trainer_plot(t, f.plot, err);
  if (!(rc = ff_train_mpi_agree(rc, err)) && !rank) {
    int64_t n_train, n_held;
    char on[32] = "";
    if (ranks > 1) snprintf(on, sizeof on, " over %d ranks", ranks);
    ff_trainer_samples(t, &n_train, &n_held);
    printf("wrote %s (%lld steps%s on %lld samples%s; checkpoint %s)\n", f.out, (long long)ff_trainer_steps_done(t),
           on, (long long)n_train, n_held ? ", some held out" : "", f.checkpoint);
  }
  ff_trainer_free(t);
  ff_model_close(m);
  return rc;
}

static int run_train(const char *path, cli_flag *flags, ff_error *err) {
  int rank, ranks, rc = ff_train_mpi_begin(&rank, &ranks, err);
  if (rc) /* several ranks without MPI: rank 0 says so, the others end quietly (a non-zero exit would have
             mpirun kill rank 0 before it says why) */
    return rank ? 0 : rc;
  rc = train(path, flags, rank, ranks, err);
  if (rc && ranks > 1 && !rank) /* every failure is agreed on: rank 0 says it, before the ranks part */
    fprintf(stderr, "fixformer train: %s\n", err->msg);
  ff_train_mpi_end();
  return rc && ranks > 1 ? CLI_ESILENT : rc;
}

static cli_flag flags[] = {
    {"--help", "-h", NULL, 0},       {"--data", NULL, NULL, 1},          {"-o", "--output", NULL, 1},
    {"--weights", NULL, NULL, 1},    {"--resume", NULL, NULL, 1},        {"--checkpoint", NULL, NULL, 1},
    {"--log", NULL, NULL, 1},        {"--plot", NULL, NULL, 1},          {"--quiet", "-q", NULL, 0},
    {"--steps", NULL, NULL, 1},      {"--batch", NULL, NULL, 1},         {"--micro-batch", NULL, NULL, 1},
    {"--lr", NULL, NULL, 1},         {"--betas", NULL, NULL, 1},         {"--eps", NULL, NULL, 1},
    {"--weight-decay", NULL, NULL, 1}, {"--no-decay", NULL, NULL, 1},    {"--schedule", NULL, NULL, 1},
    {"--warmup", NULL, NULL, 1},     {"--decay-steps", NULL, NULL, 1},   {"--min-lr", NULL, NULL, 1},
    {"--clip", NULL, NULL, 1},       {"--label-smoothing", NULL, NULL, 1}, {"--dropout", NULL, NULL, 1},
    {"--seed", NULL, NULL, 1},       {"--engine", NULL, NULL, 1},        {"--threads", NULL, NULL, 1},
    {"--format", NULL, NULL, 1},     {"--seq", NULL, NULL, 1},           {"--holdout", NULL, NULL, 1},
    {"--eval-every", NULL, NULL, 1}, {"--eval-exact", NULL, NULL, 1},    {"--save-every", NULL, NULL, 1},
    {"--log-every", NULL, NULL, 1},  {"--init", NULL, NULL, 1},          {"--recompute", NULL, NULL, 0},
    {NULL, NULL, NULL, 0}};

const cli_command cli_train = {
    "train", "train a model with AdamW on a data file",
     "usage: fixformer train MODEL.lua --data FILE -o OUT.safetensors [--weights INIT | --resume CKPT] [options]\n"
     "Trains the model with AdamW (as torch.optim.AdamW) on FILE and writes its weights, PyTorch\n"
     "names, to OUT; a checkpoint (weights, AdamW's moments, step, data position) goes beside it.\n"
     "A description's train = {...} block sets defaults; a resumed checkpoint its own; flags win.\n"
     "Data (--format, default auto):\n"
     "  pairs   encoder-decoder: lines source<TAB>target, tokenized with the vocabulary\n"
     "  text    decoder-only: a sequence per line\n"
     "  u16, u32, llmc   decoder-only: raw little-endian ids (NAME.u16, NAME.u32) or llm.c's .bin,\n"
     "          cut into samples of --seq + 1 ids\n"
     "Files:\n"
     "  --data FILE           the training data (required)\n"
     "  -o, --output OUT      the trained weights (safetensors, what every command takes)\n"
     "  --weights INIT        start from these weights (default: a seeded initialisation, --init)\n"
     "  --init S              transformer (default: as nn.Transformer, xavier-uniform matrices, a\n"
     "                        scaled embedding N(0, d_model^-0.5)) or torch (fixformer init's)\n"
     "  --resume CKPT         continue a checkpoint exactly (same data, engine and threads)\n"
     "  --checkpoint CKPT     where checkpoints go (default: OUT with .ckpt.safetensors)\n"
     "  --log FILE            a row per step: CSV, or JSON lines for NAME.jsonl\n"
     "  --plot FILE.svg       the training and held-out loss at the end\n"
     "Optimizer (torch.optim.AdamW):\n"
     "  --steps N (1000)  --batch N (32)  --micro-batch N (batch: smaller accumulates gradients)\n"
     "  --lr X (1e-3)  --betas B1,B2 (0.9,0.999)  --eps X (1e-8)  --weight-decay X (0.01)\n"
     "  --no-decay LIST       tensors without weight decay: bias,norm,embedding (default) or none\n"
     "  --clip X              clip_grad_norm_ to X (default 0: none)\n"
     "  --schedule S          constant (default), noam (lr d^-0.5 min(s^-0.5, s warmup^-1.5)),\n"
     "                        cosine (linear warm-up from lr/warmup, then cosine to --min-lr)\n"
     "  --warmup N  --decay-steps N (cosine's end; default --steps)  --min-lr X (0)\n"
     "  --label-smoothing X  --dropout P  --seed N (0)\n"
     "Run:\n"
     "  --engine E            runtime (the default), or generated training code on tcc or cc\n"
     "  --threads N           runtime: a batch's sequences over N threads; tcc, cc: its products (1)\n"
     "  --recompute           tcc, cc: keep only each sub-layer's input, run its forward again in the\n"
     "                        backward pass (less memory, the same results; the runtime always does)\n"
     "  mpirun -np N fixformer train ...   N processes train one model, each a part of every batch\n"
     "                        (built with MPI; rank 0 writes; docs/training.md)\n"
     "  --holdout N           hold N samples out; evaluated every --eval-every N steps and at the\n"
     "                        end (loss; pairs: greedy exact match on --eval-exact N of them, all)\n"
     "  --save-every N        a checkpoint every N steps (and at the end, and on SIGINT/SIGTERM)\n"
     "  --log-every N         without a terminal, a progress line every N steps (steps / 20)\n"
     "  --seq N               token data: positions per sample (max_seq)\n"
     "  -q, --quiet           no progress\n"
     "Examples:\n"
     "  fixformer train models/dates.lua --data pairs.tsv -o dates.safetensors --steps 2000 --batch 64 \\\n"
     "      --lr 2e-3 --schedule cosine --warmup 100 --holdout 200 --eval-every 500 --plot loss.svg\n"
     "  fixformer train models/dates.lua --data pairs.tsv -o dates.safetensors --resume dates.ckpt.safetensors\n",
    "MODEL.lua", 0, run_train, flags};
