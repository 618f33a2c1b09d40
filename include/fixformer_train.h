/* fixformer_train.h - training a model: AdamW as torch.optim.AdamW,
 * learning-rate schedules as torch.optim.lr_scheduler, data files, atomic
 * checkpoints and the loop that drives them.  `fixformer train` is built on
 * exactly this API (docs/training.md says what each option means).
 *
 *   ff_train_options o;
 *   ff_train_options_default(&o);
 *   ff_train_options_from_model(m, &o, &err);      the description's train = {...}
 *   ff_train_option_set(&o, "lr", "3e-4", &err);   flags, by their names
 *   ff_trainer *t = ff_trainer_new(m, "pairs.tsv", &o, &err);
 *   ff_trainer_init(t, NULL, &err);                 seeded init (or a weights file)
 *   ff_trainer_run(t, &run, &err);                  steps, evaluations, checkpoints
 *   ff_trainer_save_weights(t, "out.safetensors", &err);
 *   ff_trainer_free(t);
 *
 * The loss and gradient come from an engine (ff_train_engine), whose
 * contract is the reference runtime's ff_rt_loss_and_grad: flat parameters,
 * a batch (ff_train_batch, ff_config.h) and the step's settings in; the
 * summed loss, the labelled-token count and the gradient added into a flat
 * buffer out.  The engines: the runtime, and generated training code (tcc,
 * cc) behind the same function. */
#ifndef FIXFORMER_TRAIN_H
#define FIXFORMER_TRAIN_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "fixformer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- options ------------------------------------------------------------------ */

enum ff_schedule {
  FF_SCHEDULE_CONSTANT, /* lr every step (no scheduler) */
  FF_SCHEDULE_NOAM,     /* lr d_model^-0.5 min(s^-0.5, s warmup^-1.5), s = step + 1 (LambdaLR) */
  FF_SCHEDULE_COSINE    /* LinearLR warm-up from lr / warmup, then CosineAnnealingLR to min_lr (SequentialLR) */
};

/* How a run without --weights starts (the seeded initialisation). */
enum ff_train_init {
  FF_TRAIN_INIT_TRANSFORMER, /* as nn.Transformer resets itself: xavier-uniform for every matrix, the token
                                embedding N(0, d_model^-0.5) when scaled by sqrt(d_model) (default) */
  FF_TRAIN_INIT_TORCH        /* each module's PyTorch default: what `fixformer init --seed` writes */
};

enum ff_data_format {
  FF_DATA_AUTO,  /* llm.c's magic: llmc; NAME.u16 / NAME.u32: raw ids; else pairs for encoder-decoder, text */
  FF_DATA_PAIRS, /* lines "source<TAB>target", tokenized with the description's vocabulary */
  FF_DATA_TEXT,  /* lines of text, one sequence each: [BOS] ids EOS, shifted by one (BOS where the
                    tokenizer's template puts one, as generate --text) */
  FF_DATA_U16,   /* raw little-endian uint16 ids, one stream cut into windows of seq + 1 */
  FF_DATA_U32,   /* raw little-endian uint32 ids, likewise */
  FF_DATA_LLMC   /* llm.c's .bin: 256 int32 (magic 20240520, version 1, count), then uint16 ids */
};

/* AdamW's parameter groups: tensors of these kinds get no weight decay. */
#define FF_NO_DECAY_BIAS 1u      /* biases of projections, norms and the head */
#define FF_NO_DECAY_NORM 2u      /* LayerNorm / RMSNorm weights (and biases) */
#define FF_NO_DECAY_EMBEDDING 4u /* token, position and token-type embeddings (a tied head too) */

/* Everything that decides a run.  Names are the flags' without "--" and
 * with '_' for '-' (ff_train_option_set), the keys of a description's
 * `train = {...}` block. */
typedef struct ff_train_options {
  int steps;              /* optimizer steps of the whole run (default 1000) */
  int batch;              /* sequences per optimizer step (default 32) */
  int micro_batch;        /* sequences per engine call, 0: batch; smaller accumulates gradients */
  double lr;              /* the learning rate (noam: its factor); default 1e-3 */
  double beta1, beta2;    /* default 0.9, 0.999 */
  double eps;             /* default 1e-8 */
  double weight_decay;    /* default 0.01 (torch.optim.AdamW's) */
  unsigned no_decay;      /* FF_NO_DECAY_* (default all three) */
  enum ff_schedule schedule;
  int warmup;             /* warm-up steps (noam: >= 1) */
  int decay_steps;        /* cosine: T_max = decay_steps - warmup; 0: steps */
  double min_lr;          /* cosine: the floor, eta_min (default 0) */
  double clip;            /* clip_grad_norm_ max_norm; 0: no clipping */
  double label_smoothing; /* CrossEntropyLoss's, in [0, 1] */
  double dropout;         /* in [0, 1), at PyTorch's places (runtime/ff_dropout.h) */
  uint64_t seed;          /* initialisation, shuffling, the held-out split, dropout */
  enum ff_train_init init; /* the initialisation without --weights (default: transformer) */
  int engine;             /* enum ff_engine: the runtime (default), or generated code on tcc or cc */
  int threads;            /* runtime: sequences of a batch over this many threads; generated code: its matrix
                             products and attention (1..FF_MAX_THREADS) */
  int recompute;          /* generated code: keep only each sub-layer's input and run its forward again in the
                             backward pass (ff_train_shape); the runtime always does.  Not recorded in
                             checkpoints: it changes no result */
  enum ff_data_format format;
  int seq;                /* token streams: positions per sample; 0: max_seq */
  int holdout;            /* samples held out of training for evaluation (default 0) */
  int eval_every;         /* evaluate every this many steps; 0: at the end only (if holdout) */
  int eval_exact;         /* pairs: greedy exact match on at most this many held-out pairs; -1: all */
  int save_every;         /* checkpoint every this many steps; 0: at the end only */
  int log_every;          /* a progress row every this many steps (0: steps / 20) */
} ff_train_options;

/* The defaults above. */
void ff_train_options_default(ff_train_options *o);
/* One option from text, as a flag gives it: name "lr", "betas" ("0.9,0.98"),
 * "schedule" ("constant", "noam", "cosine"), "no_decay" ("bias,norm",
 * "none"), "engine", "format" ...; '-' and '_' alike.  FF_EINVAL naming the
 * option for an unknown name or a value out of range. */
int ff_train_option_set(ff_train_options *o, const char *name, const char *value, ff_error *err);
/* The options in o as "name=value" lines (malloc'd): what a checkpoint records. */
char *ff_train_options_text(const ff_train_options *o);
/* Sets every option the description's `train = {...}` block gives. */
int ff_train_options_from_model(const ff_model *m, ff_train_options *o, ff_error *err);
/* Sets the options a checkpoint recorded (before the command line's, so that
 * a resumed run continues with what it started with). */
int ff_train_options_from_checkpoint(const char *path, ff_train_options *o, ff_error *err);
/* FF_EINVAL naming the first option out of range or in conflict. */
int ff_train_options_check(const ff_train_options *o, ff_error *err);
/* The description's train block, key by key, as text (numbers %.17g, lists
 * joined by commas); implemented by the host, which holds the description. */
typedef int (*ff_train_key_fn)(void *ctx, const char *key, const char *value, ff_error *err);
int ff_model_train_block(const ff_model *m, ff_train_key_fn fn, void *ctx, ff_error *err);

/* ---- AdamW, clipping, schedules ------------------------------------------------ */

typedef struct ff_adamw {
  double lr, beta1, beta2, eps, weight_decay;
} ff_adamw;

/* One torch.optim.AdamW step (its single-tensor code, float32) on n
 * parameters, step counting from 1:
 *   p *= 1 - lr wd;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
 *   p -= lr / (1 - b1^step) * m / (sqrt(v) / sqrt(1 - b2^step) + eps). */
void ff_adamw_update(float *p, const float *g, float *m, float *v, size_t n, int64_t step, const ff_adamw *h);
/* torch.nn.utils.clip_grad_norm_(max_norm): the L2 norm of g [n] (returned;
 * its squares summed in double, 16384 elements a chunk, as fixformer train's
 * step sums them); when max_norm > 0, g is scaled by min(1, max_norm / (norm + 1e-6)). */
double ff_clip_grad_norm(float *g, size_t n, double max_norm);

/* A learning-rate schedule, stepped like a torch scheduler: lr is the value
 * of the next optimizer step. */
typedef struct ff_lr_schedule {
  enum ff_schedule kind;
  double base, min_lr, start_factor, d_model;
  int warmup, t_max;
  int64_t step;   /* optimizer steps taken */
  double lr;      /* the current value (the group's lr) */
} ff_lr_schedule;

/* A schedule at step 0 from the options (d_model for noam). */
void ff_lr_schedule_init(ff_lr_schedule *s, const ff_train_options *o, int d_model);
/* After an optimizer step: the next step's lr (scheduler.step()). */
void ff_lr_schedule_step(ff_lr_schedule *s);

/* ---- the engine boundary --------------------------------------------------------- */

/* The loss and gradient of a batch: ff_rt_loss_and_grad's contract.  params:
 * numel floats in the layout of ff_trainer_params; loss_sum =
 * CrossEntropyLoss(reduction='sum') over labels != ignore_index, *tokens
 * their count (both set); the gradient of loss_sum ADDED into grad (NULL:
 * the loss only), or, for an engine with sets_grad, written into it when
 * o->set_grad (a step's first batch: no pass zeroes grad first).  0 or a
 * negative FF_E* status with err set. */
typedef int (*ff_train_loss_fn)(void *ctx, const float *params, const ff_train_batch *b,
                                const ff_train_step_opts *o, float *grad, double *loss_sum, int64_t *tokens,
                                ff_error *err);
typedef struct ff_train_engine {
  const char *name; /* "runtime" */
  void *ctx;
  ff_train_loss_fn loss_and_grad;
  void (*release)(void *ctx); /* frees ctx (NULL: nothing to free) */
  int sets_grad;              /* 1: loss_and_grad honours o->set_grad; 0: it always adds (the
                               * trainer zeroes grad before a step's first batch) */
} ff_train_engine;

/* The largest batch a call of generated training code takes, its fixed
 * shapes: batch sequences of src positions (the source of an
 * encoder-decoder, else the sequence) and tgt target positions
 * (encoder-decoder; else unused).  recompute: 1 keeps only each sub-layer's
 * input for the backward pass, which runs the sub-layer's forward ops again
 * before their backward (less memory, a second forward's FLOPs; the same
 * results to the bit); 0 (the default) keeps every activation. */
typedef struct ff_train_shape {
  int batch, src, tgt;
  int recompute;
} ff_train_shape;

/* The reference runtime as an engine: ff_rt_loss_and_grad, the sequences of
 * a batch split over threads (each its own gradient, summed in thread order:
 * the same bytes for the same thread count). */
int ff_train_engine_runtime(const ff_config *c, int threads, ff_train_engine *e, ff_error *err);
/* Generated training code as an engine (engine FF_ENGINE_TCC or
 * FF_ENGINE_CC): m's training code at shape for this machine's best ISA,
 * compiled (cc: or taken from the cache), its matrix products and attention
 * split over threads (the same results for every count).  It takes any
 * batch whose lengths are within shape (a larger batch in parts of
 * shape->batch sequences, first counting on) and gives the runtime's loss
 * and gradient for it, to float reassociation. */
int ff_train_engine_generated(ff_model *m, enum ff_engine engine, const ff_train_shape *shape, int threads,
                              ff_train_engine *e, ff_error *err);
/* The engine named by o->engine (threads o->threads): the runtime, or
 * generated code at shape (the trainer's: its micro-batch and its data's
 * longest sample). */
int ff_train_engine_open(ff_model *m, const ff_train_options *o, const ff_train_shape *shape, ff_train_engine *e,
                         ff_error *err);

/* ---- generated training code --------------------------------------------------------- */

/* m's training code at shape (gen/train.lua) for m's ISA (ff_model_set_isa):
 * the text `fixformer emit --train` writes and what it takes. */
typedef struct ff_train_code {
  char *header, *source, *kernels; /* NAME_train.h, NAME_train.c, NAME_train_kernels.c */
  char *library;                   /* the ISA's whole kernel library (the cc engine builds it apart) */
  size_t params;                   /* floats of the parameters (and of the gradient, each AdamW moment) */
  size_t state_bytes;              /* NAME_TRAIN_STATE_BYTES: activation_bytes + scratch_bytes */
  size_t packed_bytes;             /* 0: each matrix's panels (W^T for the forward, W for dX) are packed
                                      right before the product that reads them, in activation_bytes */
  size_t activation_bytes;         /* kept activations, gradients and panels, lifetimes overlapped */
  size_t activation_bytes_unshared; /* ... without sharing */
  size_t scratch_bytes;            /* linear_backward's and attention's (a slot per thread) */
  double flops, forward_flops, backward_flops; /* a step at shape (forward: with the loss) */
} ff_train_code;
/* command: the command line the banner records (NULL: "fixformer"). */
int ff_model_train_code(ff_model *m, const ff_train_shape *shape, const char *command, ff_train_code *out,
                        ff_error *err);
void ff_train_code_free(ff_train_code *c);

/* ---- memory ------------------------------------------------------------------------ */

typedef struct ff_train_memory {
  size_t params, grads, optimizer; /* bytes: float32 parameters, their gradient, AdamW's two moments */
  size_t activations;              /* bytes: the engine's work memory for a batch */
  size_t batch;                    /* bytes: the batch's ids, labels and lengths */
  const char *assumes;             /* one sentence: the scheme the activation figure is for */
} ff_train_memory;

/* What training a config takes, before anything runs: a batch of B
 * sequences of S source (and T target) positions on the runtime engine with
 * threads threads. */
int ff_train_memory_estimate(const ff_config *c, int B, int S, int T, int threads, ff_train_memory *out,
                             ff_error *err);

/* ---- data parallelism over MPI -------------------------------------------------------- */

/* Joins the MPI job that an MPI launcher (mpirun, mpiexec, srun) started
 * this process in: MPI_Init, and every trainer made afterwards splits each
 * step's batch over the job's ranks and sums their gradients
 * (docs/training.md, "Data-parallel training").  *rank and *ranks: this
 * process's and the job's (0 and 1 when no launcher started it: MPI is
 * then not started).  Built without MPI, a launch of several ranks is
 * FF_EINVAL saying so (with *rank set), instead of copies training side by
 * side.  Once per process, before ff_trainer_new; then ff_train_mpi_end. */
int ff_train_mpi_begin(int *rank, int *ranks, ff_error *err);
/* A collective (every rank calls it at the same point): each rank's status
 * in, on every rank the first failing one's out, its message in err
 * ("rank R: ..." from a rank other than 0): errors before FF_EINTR, then
 * the lowest rank; 0 when all passed 0.  One rank alone: rc as it is. */
int ff_train_mpi_agree(int rc, ff_error *err);
/* Leaves the job (MPI_Finalize when ff_train_mpi_begin started MPI). */
void ff_train_mpi_end(void);

/* ---- the trainer ------------------------------------------------------------------- */

/* Under data parallelism (ff_train_mpi_begin gave ranks > 1) every rank
 * makes the same trainer on the same files; ff_trainer_step, _evaluate and
 * _run are collectives, and the functions that write files write on rank 0
 * only (returning 0 at once on the others). */
typedef struct ff_trainer ff_trainer;

/* One optimizer step's figures. */
typedef struct ff_train_report {
  int64_t step;        /* steps done (this one included) */
  int64_t steps;       /* of the run */
  double loss;         /* mean over the step's labelled tokens */
  double lr;           /* the lr the step used */
  double grad_norm;    /* total L2 norm before clipping */
  int64_t tokens;      /* labelled tokens of the step */
  double seconds;      /* the step's wall-clock time */
  int evaluated;       /* 1: valid_loss (and valid_exact) measured after this step */
  double valid_loss;   /* mean over the held-out tokens */
  double valid_exact;  /* pairs: the fraction decoded exactly; -1: not measured */
} ff_train_report;

/* A trainer for model m (its description; weights come from ff_trainer_init
 * or ff_trainer_resume) on the data file: the data read, tokenized, checked
 * and split now, so that a bad file is refused before anything is written.
 * m must outlive the trainer.  NULL on error. */
ff_trainer *ff_trainer_new(ff_model *m, const char *data_path, const ff_train_options *o, ff_error *err);
/* The starting weights: a safetensors file (strict, as load_state_dict), or
 * NULL: PyTorch's default initialisation seeded with o->seed, the values
 * `fixformer init --seed` writes. */
int ff_trainer_init(ff_trainer *t, const char *weights_path, ff_error *err);
/* Continues a checkpoint: weights, AdamW's moments, the step, the data
 * position.  A checkpoint of another model or shapes, another data file, a
 * truncated or corrupt file is refused, the trainer unchanged. */
int ff_trainer_resume(ff_trainer *t, const char *path, ff_error *err);
/* Replaces the trainer's engine (ff_train_engine_open's) by e, which it then
 * owns: generated training code, or a test's. */
int ff_trainer_set_engine(ff_trainer *t, const ff_train_engine *e, ff_error *err);
/* Training and held-out samples (held-out: the first holdout of a seeded
 * permutation; training: the rest, reshuffled every epoch). */
void ff_trainer_samples(const ff_trainer *t, int64_t *train, int64_t *held_out);
/* The training sample at position i of the run's stream (epoch i / n,
 * shuffled from the seed) as its index in the data file, and held-out sample
 * i's index: what tests check the order and the split with. */
int64_t ff_trainer_stream_index(ff_trainer *t, int64_t i);
int64_t ff_trainer_held_out_index(const ff_trainer *t, int64_t i);
/* One optimizer step: the batch's micro-batches through the engine, the
 * mean gradient, clipping, AdamW, the schedule. */
int ff_trainer_step(ff_trainer *t, ff_train_report *r, ff_error *err);
/* The held-out loss (dropout off) and, for pairs, greedy exact match. */
int ff_trainer_evaluate(ff_trainer *t, double *loss, double *exact, ff_error *err);
/* Steps taken. */
int64_t ff_trainer_steps_done(const ff_trainer *t);
/* The flat parameters (numel floats; the layout ff_rt_params gives). */
float *ff_trainer_params(ff_trainer *t, size_t *numel);

/* Writes a checkpoint atomically: weights (PyTorch names), AdamW's moments
 * ("optimizer.exp_avg.NAME", "optimizer.exp_avg_sq.NAME"), the loss history,
 * and in __metadata__ the format, the layout's hash, the step, the data
 * position and its file's hash, and the options (docs/training.md). */
int ff_trainer_save_checkpoint(ff_trainer *t, const char *path, ff_error *err);
/* Writes just the weights, PyTorch names, atomically: what every other
 * command takes. */
int ff_trainer_save_weights(ff_trainer *t, const char *path, ff_error *err);
/* An SVG plot of the training loss per step and the held-out loss. */
int ff_trainer_plot(const ff_trainer *t, const char *path, ff_error *err);

/* The loop: ff_trainer_step until o->steps, evaluating every eval_every
 * steps (and at the end when there is a held-out set), a checkpoint every
 * save_every steps and at the end.  report(ctx, r) after each step (NULL:
 * none); *stop (may be NULL) polled between micro-batches: once non-zero
 * the step in progress is abandoned, a checkpoint of the last completed step
 * is written and FF_EINTR returned. */
#define FF_EINTR (-50)
typedef struct ff_train_run {
  const char *checkpoint;  /* where checkpoints go (NULL: none) */
  void (*report)(void *ctx, const ff_train_report *r);
  void *ctx;
  volatile sig_atomic_t *stop;
} ff_train_run;
int ff_trainer_run(ff_trainer *t, const ff_train_run *run, ff_error *err);
void ff_trainer_free(ff_trainer *t);

/* A log of the reports, a row per step: CSV with a header row, or JSON lines
 * when path ends in .jsonl or .json; append: after an existing log's rows
 * (a resumed run). */
typedef struct ff_train_log ff_train_log;
ff_train_log *ff_train_log_open(const char *path, int append, ff_error *err);
int ff_train_log_write(ff_train_log *l, const ff_train_report *r, ff_error *err);
int ff_train_log_close(ff_train_log *l, ff_error *err);

#ifdef __cplusplus
}
#endif

#endif
