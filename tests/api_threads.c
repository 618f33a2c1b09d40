/* api_threads.c - one model used from several threads (include/fixformer.h's
 * threading contract).
 *
 *   api_threads MODELS_DIR MODE ENGINE ...   MODE: shared | clone | separate
 *
 * shared: 4 threads x 50 forward passes (and greedy decodings) on ONE model;
 * clone: the same with one ff_model_clone per thread (the original closed
 *   while they run); separate: each thread opens and prepares its own model
 *   at the same time (concurrent compiles).
 * Each thread feeds its own input; every output must equal, bit for bit, the
 * single-threaded result of the same model and engine, and no call may fail.
 * The generated engines run with a pool of 2 threads.  Models: tiny.lua
 * (forward) and llama_tiny.lua (greedy), weights from ff_config_init_weights in
 * a private temporary directory, which is also the cc engine's cache. */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixformer.h"

#define THREADS 4
#define ITERS 50
#define T 8
#define VOCAB 128 /* tiny's */
#define NEW 6     /* greedy: new ids */

static char dir[64], tiny[PATH_MAX], llama[PATH_MAX], tiny_w[PATH_MAX], llama_w[PATH_MAX];
static enum ff_engine engine;
static const char *mode;

typedef struct {
  ff_model *m, *g;              /* tiny, llama_tiny: shared, or this thread's */
  int32_t ids[T];               /* this thread's input */
  float ref[T * VOCAB];         /* its single-threaded output */
  int32_t gen_ref[NEW];         /* greedy from its first two ids */
  int failures;
  char msg[FF_ERROR_MAX];
} job;

static ff_model *ready(const char *model, const char *w, ff_error *err) {
  ff_model *m = ff_model_open(model, err);
  if (!m || ff_model_load_weights(m, w, err) ||
      (engine != FF_ENGINE_RUNTIME && ff_model_set_threads(m, 2, err)) || ff_model_prepare(m, engine, err)) {
    ff_model_close(m);
    return NULL;
  }
  return m;
}

static int forward(ff_model *m, const int32_t *ids, float *out, ff_error *err) {
  ff_input in = {0};
  in.batch = 1;
  in.src_len = T;
  in.src_tokens = ids;
  return ff_model_forward(m, &in, out, err);
}

static int greedy(ff_model *m, const int32_t *ids, int32_t *out, ff_error *err) {
  ff_greedy g = {NULL, 0, ids, 2, NEW, -1};
  int n = 0, rc = ff_model_greedy(m, &g, out, &n, NULL, err);
  return rc ? rc : n == NEW ? 0 : FF_EINVAL;
}

static void fail(job *j, const char *what, const char *msg) {
  if (!j->failures++) snprintf(j->msg, sizeof j->msg, "%s: %s", what, msg);
}

static void *run(void *arg) {
  job *j = arg;
  ff_error err = {0, ""};
  if (!strcmp(mode, "separate") && (!(j->m = ready(tiny, tiny_w, &err)) || !(j->g = ready(llama, llama_w, &err)))) {
    fail(j, "open and prepare", err.msg);
    return NULL;
  }
  for (int it = 0; it < ITERS; it++) {
    float out[T * VOCAB];
    int32_t gen[NEW];
    memset(out, 0, sizeof out);
    if (forward(j->m, j->ids, out, &err)) fail(j, "forward", err.msg);
    else if (memcmp(out, j->ref, sizeof out)) fail(j, "forward", "output differs from the single-threaded one");
    if (it % 5) continue; /* greedy: every 5th iteration */
    if (greedy(j->g, j->ids, gen, &err)) fail(j, "greedy", err.msg);
    else if (memcmp(gen, j->gen_ref, sizeof gen)) fail(j, "greedy", "ids differ from the single-threaded ones");
  }
  return NULL;
}

static int rm(const char *path, const struct stat *st, int flag, struct FTW *f) {
  (void)st, (void)flag, (void)f;
  return remove(path);
}

static int weights(const char *model, const char *path, ff_error *err) {
  ff_model *m = ff_model_open(model, err);
  int rc = m ? ff_config_init_weights(ff_model_config(m), 1, path, err) : FF_EINVAL;
  ff_model_close(m);
  return rc;
}

static int test(void) {
  static job jobs[THREADS];
  pthread_t th[THREADS];
  ff_error err = {0, ""};
  ff_model *m = ready(tiny, tiny_w, &err), *g = m ? ready(llama, llama_w, &err) : NULL;
  if (!g) {
    fprintf(stderr, "api_threads: %s\n", err.msg);
    ff_model_close(m);
    return 1;
  }
  for (int i = 0; i < THREADS; i++) { /* references, one thread */
    job *j = &jobs[i];
    memset(j, 0, sizeof *j);
    for (int t = 0; t < T; t++) j->ids[t] = (int32_t)((i * 37 + t * 11 + 3) % VOCAB);
    if (forward(m, j->ids, j->ref, &err) || greedy(g, j->ids, j->gen_ref, &err)) {
      fprintf(stderr, "api_threads: reference: %s\n", err.msg);
      return 1;
    }
    j->m = m;
    j->g = g;
    if (!strcmp(mode, "clone") && (!(j->m = ff_model_clone(m, &err)) || !(j->g = ff_model_clone(g, &err)))) {
      fprintf(stderr, "api_threads: clone: %s\n", err.msg);
      return 1;
    }
  }
  if (strcmp(mode, "shared")) { /* clones outlive their original; separate makes its own */
    ff_model_close(m);
    ff_model_close(g);
    m = g = NULL;
  }
  for (int i = 0; i < THREADS; i++)
    if (pthread_create(&th[i], NULL, run, &jobs[i])) {
      fprintf(stderr, "api_threads: cannot start a thread\n");
      return 1;
    }
  int failures = 0;
  for (int i = 0; i < THREADS; i++) {
    pthread_join(th[i], NULL);
    if (jobs[i].failures)
      fprintf(stderr, "FAIL %s %s thread %d: %d of %d calls wrong, first: %s\n", mode, ff_engine_name(engine), i,
              jobs[i].failures, ITERS + ITERS / 5, jobs[i].msg);
    failures += jobs[i].failures;
    if (strcmp(mode, "shared")) {
      ff_model_close(jobs[i].m);
      ff_model_close(jobs[i].g);
    }
  }
  ff_model_close(m);
  ff_model_close(g);
  printf("%s %s: %d threads x %d forward passes and %d greedy decodings: %s\n", mode, ff_engine_name(engine),
         THREADS, ITERS, ITERS / 5, failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}

int main(int argc, char **argv) {
  ff_error err = {0, ""};
  if (argc < 4 || (strcmp(argv[2], "shared") && strcmp(argv[2], "clone") && strcmp(argv[2], "separate"))) {
    fprintf(stderr, "usage: api_threads MODELS_DIR shared|clone|separate ENGINE ...\n");
    return 2;
  }
  mode = argv[2];
  snprintf(tiny, sizeof tiny, "%s/tiny.lua", argv[1]);
  snprintf(llama, sizeof llama, "%s/llama_tiny.lua", argv[1]);
  snprintf(dir, sizeof dir, "/tmp/ff-api-threads-XXXXXX");
  if (!mkdtemp(dir)) {
    perror("api_threads: mkdtemp");
    return 1;
  }
  setenv("XDG_CACHE_HOME", dir, 1); /* a private cache for the cc engine */
  snprintf(tiny_w, sizeof tiny_w, "%s/tiny.safetensors", dir);
  snprintf(llama_w, sizeof llama_w, "%s/llama.safetensors", dir);
  int rc = weights(tiny, tiny_w, &err) || weights(llama, llama_w, &err) ? 2 : 0;
  if (rc) fprintf(stderr, "api_threads: %s\n", err.msg);
  for (int a = 3; a < argc && rc != 2; a++) {
    int e = ff_engine_parse(argv[a]);
    if (e < 0) {
      fprintf(stderr, "api_threads: unknown engine '%s'\n", argv[a]);
      rc = 2;
      break;
    }
    engine = (enum ff_engine)e;
    rc |= test(); /* (0 or 1) */
  }
  nftw(dir, rm, 16, FTW_DEPTH | FTW_PHYS);
  return rc;
}
