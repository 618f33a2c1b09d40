/* train_device.c - fine-tuning on `fixformer emit --train` code as a device runs it: every
 * buffer static and sized by the header's macros, no malloc; the C library only reads the
 * inputs and writes the result.  Built by tests/train_gen.py with gcc, clang and tcc
 * (-std=c99 -Wall -Wextra -Werror) against the emitted MODEL_train.c, with
 * -DMODEL=name -DUMODEL=NAME -DHEADER='"name_train.h"'.
 *
 *   train_device PARAMS BATCH STEPS LR WEIGHT_DECAY CLIP DROPOUT SEED SMOOTHING THREADS OUT
 *
 * PARAMS, OUT: the flat parameters, MODEL_TRAIN_PARAMS little-endian float32; BATCH: int32
 * batch, src_len, tgt_len, has_lengths, then src [batch, src_len], lengths [batch] (if
 * has_lengths), tgt [batch, tgt_len] (if tgt_len), labels [batch, tgt_len or src_len].
 * STEPS AdamW steps on that batch (betas 0.9, 0.999, eps 1e-8, no decay for biases, norms and
 * embeddings), dropout's step counting from 0; THREADS > 1: pthreads (with -DFF_THREADS).
 * Prints each step's mean loss. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include HEADER

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define FN(x) CAT(MODEL, x)
#define SIZE(x) CAT(UMODEL, x)

static float params[SIZE(_TRAIN_PARAMS)], grad[SIZE(_TRAIN_PARAMS)], m[SIZE(_TRAIN_PARAMS)], v[SIZE(_TRAIN_PARAMS)];
/* the state, 64-byte aligned by hand (not every compiler honours an alignment attribute) */
static float state_room[SIZE(_TRAIN_STATE_BYTES) / 4 + 16];
#define MAX_IDS (SIZE(_TRAIN_BATCH) * (SIZE(_TRAIN_SRC_LEN) + 2 * SIZE(_TRAIN_TGT_LEN) + SIZE(_TRAIN_SRC_LEN) + 1) + 4)
static int32_t ids[MAX_IDS];

#ifdef FF_THREADS
#include <pthread.h>
typedef struct {
  void (*task)(void *, int);
  void *arg;
  int i;
} job;
static void *run_job(void *p) {
  job *j = p;
  j->task(j->arg, j->i);
  return NULL;
}
/* a parallel-for: each task on a thread of its own (a device would keep a pool) */
static void parallel(void *pool, int n, void (*task)(void *, int), void *arg) {
  pthread_t t[64];
  job jobs[64];
  (void)pool;
  for (int i = 0; i < n; i++) {
    jobs[i].task = task, jobs[i].arg = arg, jobs[i].i = i;
    if (i > 0 && pthread_create(&t[i], NULL, run_job, &jobs[i])) exit(3);
  }
  run_job(&jobs[0]);
  for (int i = 1; i < n; i++) pthread_join(t[i], NULL);
}
#endif

static int read_all(const char *path, void *dst, size_t bytes) {
  FILE *f = fopen(path, "rb");
  size_t got = f ? fread(dst, 1, bytes, f) : 0;
  if (f) fclose(f);
  return f ? (int)got : -1;
}

int main(int argc, char **argv) {
  if (argc != 12) {
    fprintf(stderr, "usage: train_device PARAMS BATCH STEPS LR WD CLIP DROPOUT SEED SMOOTHING THREADS OUT\n");
    return 2;
  }
  if (read_all(argv[1], params, sizeof params) != (int)sizeof params) {
    fprintf(stderr, "train_device: %s: not %u floats\n", argv[1], (unsigned)SIZE(_TRAIN_PARAMS));
    return 1;
  }
  const int got = read_all(argv[2], ids, sizeof ids);
  if (got < 16) {
    fprintf(stderr, "train_device: %s: no batch\n", argv[2]);
    return 1;
  }
  FN(_train_batch) b;
  const int32_t *at = ids + 4;
  const int L = ids[2] ? ids[2] : ids[1];
  b.batch = ids[0], b.src_len = ids[1], b.tgt_len = ids[2], b.first = 0;
  b.src = at, at += b.batch * b.src_len;
  b.src_lengths = ids[3] ? at : NULL, at += ids[3] ? b.batch : 0;
  b.tgt = b.tgt_len ? at : NULL, at += b.batch * b.tgt_len;
  b.labels = at, at += b.batch * L;
  if ((at - ids) * 4 != got) {
    fprintf(stderr, "train_device: %s: %d bytes, not a batch\n", argv[2], got);
    return 1;
  }
  FN(_train_opts) o = {(float)atof(argv[9]), -100, (float)atof(argv[7]), (uint64_t)atoll(argv[8]), 0, 0};
  FN(_adamw_opts) h = {atof(argv[4]), 0.9, 0.999, 1e-8, atof(argv[5]), atof(argv[6]), 1u | 2u | 4u};
  const int steps = atoi(argv[3]), threads = atoi(argv[10]);
  void *state = (void *)(((uintptr_t)state_room + 63) & ~(uintptr_t)63);
  if (FN(_train_init_state)(state)) {
    fprintf(stderr, "train_device: init_state failed\n");
    return 1;
  }
#ifdef FF_THREADS
  if (threads > 1 && FN(_train_set_threads)(state, parallel, NULL, threads)) {
    fprintf(stderr, "train_device: set_threads failed\n");
    return 1;
  }
#else
  if (threads > 1) fprintf(stderr, "train_device: built without FF_THREADS: one thread\n");
#endif
  for (int s = 1; s <= steps; s++) {
    double loss, norm;
    o.step = (uint64_t)s - 1;
    const int rc = FN(_train_step)(params, state, &b, &o, &h, s, grad, m, v, &loss, &norm);
    if (rc) {
      fprintf(stderr, "train_device: step %d: status %d\n", s, rc);
      return 1;
    }
    printf("step %d loss %.9g grad_norm %.9g\n", s, loss, norm);
  }
  FILE *f = fopen(argv[11], "wb");
  if (!f || fwrite(params, sizeof params, 1, f) != 1 || fclose(f)) {
    fprintf(stderr, "train_device: cannot write %s\n", argv[11]);
    return 1;
  }
  return 0;
}
