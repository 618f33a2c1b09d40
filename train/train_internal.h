/* train_internal.h - what the files of train/ share: the data set, the
 * trainer's state and the generator behind shuffling.  Private to train/. */
#ifndef FF_TRAIN_INTERNAL_H
#define FF_TRAIN_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "ff_rt_train.h"
#include "fixformer_train.h"

/* ---- options.c ---------------------------------------------------------------- */

/* "name=value" lines (ff_train_options_text), each through ff_train_option_set;
 * where names the text in messages. */
int ff_train_options_parse_text(ff_train_options *o, const char *text, const char *where, ff_error *err);

/* ---- data.c ---------------------------------------------------------------------- */

/* A data file, read, tokenized and checked. */
typedef struct ff_train_data {
  enum ff_data_format format; /* resolved: never FF_DATA_AUTO */
  int64_t count;              /* samples */
  /* pairs and text: sample i's ids at ids + off[i]: pairs the source (src_n)
   * then the target without BOS/EOS (tgt_n); text the whole sequence with
   * its BOS and EOS (src_n), which the batch shifts by one */
  int32_t *ids;
  int64_t *off;
  int32_t *src_n, *tgt_n;
  /* token streams: the file, its ids from data_at, width bytes each;
   * sample i is the window of seq + 1 ids from i (seq + 1) */
  uint8_t *raw;
  size_t raw_len, data_at;
  int width, seq;
  int bos, eos, pad;          /* -1: none */
  int max_src, max_tgt;       /* the longest sample's rows (what a batch needs at most) */
  char sha256[65];            /* of the file's bytes */
} ff_train_data;

int ff_train_data_load(ff_train_data *d, const ff_config *c, const char *path, const ff_train_options *o,
                       ff_error *err);
void ff_train_data_free(ff_train_data *d);

/* Room for a batch of up to B samples of d. */
typedef struct ff_train_batch_buf {
  int32_t *src, *lengths, *tgt, *labels;
  int cap;
} ff_train_batch_buf;

int ff_train_batch_buf_init(ff_train_batch_buf *bb, const ff_train_data *d, int B, ff_error *err);
void ff_train_batch_buf_free(ff_train_batch_buf *bb);
/* The positions a batch of samples idx[0..n) pads to: the longest source
 * (or sequence) *S and, pairs, target with BOS *T (0 when not pairs). */
void ff_train_data_shape(const ff_train_data *d, const int64_t *idx, int64_t n, int *S, int *T);
/* The batch of samples idx[0..n) (first: its first sequence's place in the
 * step), right-padded to S x T positions (ff_train_data_shape's of the
 * whole step, so that a part of it drops out what the whole would: dropout
 * counts elements over the padded shape; 0: its own), labels of padding
 * -100. */
void ff_train_data_batch(const ff_train_data *d, const int64_t *idx, int n, int first, int S, int T,
                         ff_train_batch_buf *bb, ff_train_batch *b);
/* Sample i's source ids (pairs: the source; text, streams: the input) and
 * the target the model should produce (pairs: target ids, no EOS). */
void ff_train_data_pair(const ff_train_data *d, int64_t i, const int32_t **src, int *src_n, const int32_t **tgt,
                     int *tgt_n);

/* ---- shuffling: a counter-based generator ------------------------------------------- */

/* A permutation of 0..n-1 into perm by Fisher-Yates from splitmix64 seeded
 * with key(seed, tag, epoch): the same for the same three, nothing kept. */
void ff_train_shuffle(int64_t *perm, int64_t n, uint64_t seed, uint64_t tag, uint64_t epoch);

/* ---- the ranks of a data-parallel run (mpi.c with MPI, mpi_none.c without) ---------------- */

/* The job's size (1: no job) and this process's rank in it. */
int ff_train_ranks(int *rank);
/* Sums over the ranks, in place: the same bits on every rank. */
void ff_train_sum_floats(float *x, size_t n);
void ff_train_sum_doubles(double *x, int n);
/* 1 on every rank if h is the same on all, else 0 on every rank. */
int ff_train_same(uint64_t h);

/* The size of the job an MPI launcher started this process in, 0 if none,
 * from the environment launchers set: Open MPI's OMPI_COMM_WORLD_SIZE and
 * _RANK, the PMI's PMI_SIZE and PMI_RANK (MPICH, Intel MPI, Slurm), PMIx's
 * PMIX_RANK (no size: at least rank + 1); *rank this process's. */
static inline int ff_train_launcher(int *rank) {
  static const char *const sizes[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", NULL, NULL};
  static const char *const ranks[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", NULL};
  int size = 0, found = 0;
  *rank = 0;
  for (int i = 0; ranks[i]; i++) {
    const char *n = sizes[i] ? getenv(sizes[i]) : NULL, *r = getenv(ranks[i]);
    long nv = n ? strtol(n, NULL, 10) : 0, rv = r ? strtol(r, NULL, 10) : -1;
    if (!n && !r) continue;
    found = 1;
    if (rv >= 0 && rv < (1L << 24) && (int)rv > *rank) *rank = (int)rv;
    if (nv > size && nv < (1L << 24)) size = (int)nv;
  }
  if (!found) return 0;
  return size > *rank ? size : *rank + 1;
}

/* ---- the trainer (loop.c) --------------------------------------------------------------- */

typedef struct ff_train_valid_point {
  float step, loss, exact;
} ff_train_valid_point;

struct ff_trainer {
  ff_model *model;
  const ff_config *c;
  ff_train_options o;
  ff_rt_params p;              /* the parameters: layout and values */
  float *grad, *exp_avg, *exp_avg_sq;
  unsigned char *decay;        /* per tensor: 1 if weight decay applies */
  ff_train_engine engine;
  ff_rt_model eval;            /* bound to p.data: greedy decoding of the held-out pairs */
  ff_train_data data;
  int64_t n_train, n_held;
  int64_t *train_idx, *held_idx; /* file indices */
  int64_t *epoch_perm, perm_epoch; /* the current epoch's order of train_idx (perm_epoch -1: none) */
  ff_train_batch_buf bb;
  int64_t *step_idx;           /* the step's samples */
  ff_lr_schedule sched;
  int64_t step, consumed;      /* optimizer steps done; training samples taken */
  float *history;              /* [step][4]: loss, lr, grad norm, tokens */
  ff_train_valid_point *valid;
  int n_valid, cap_valid;
  int initialized;             /* weights set (init or resume) */
  int rank, ranks;             /* data parallelism: this process's part of every batch */
  volatile sig_atomic_t *stop;
  struct ff_pool *pool;        /* o.threads > 1: the optimizer step's threads, and a generated
                                * engine's that the trainer opened; else NULL */
  double *chunk_sums;          /* [chunks] the optimizer step's sums of squares (optimizer.c) */
};

/* The optimizer step over the summed gradient: scaled by scale (1 / the
 * step's tokens), clipped by its global L2 norm (o.clip; returned), AdamW
 * at lr on every tensor (optimizer.c) */
double ff_train_optimize(ff_trainer *t, float scale, double lr);
/* the optimizer step's chunks for t's parameters (its threads: t->pool, which the trainer starts
 * before its engine, and frees in ff_train_optimizer_free) */
int ff_train_optimizer_init(ff_trainer *t, ff_error *err);
/* ff_train_engine_open with generated code on pool's threads (NULL: its own; the caller frees pool
 * after the engine): the trainer's engine and optimizer step share one pool */
int ff_train_engine_open_on(ff_model *m, const ff_train_options *o, const ff_train_shape *shape,
                            struct ff_pool *pool, ff_train_engine *e, ff_error *err);
void ff_train_optimizer_free(ff_trainer *t);

/* layout's identity: sha256 of every tensor's name and shape */
void ff_train_layout_hash(const ff_rt_params *p, char hex[65]);
/* history rows up to steps (grown as needed) */
int ff_train_history_reserve(ff_trainer *t, int64_t steps, ff_error *err);
int ff_train_valid_add(ff_trainer *t, ff_train_valid_point v, ff_error *err);

#endif
