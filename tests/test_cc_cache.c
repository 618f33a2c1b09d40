/* test_cc_cache.c - the cc engine's cache under threads (issue 10, item 9):
 * six threads of one process, each with its own model, prepare the cc
 * engine at once on an empty cache; each must succeed and give the
 * runtime's numbers.  Then the cache holds exactly the two entries (no
 * temporary left), ff_cc_cache_dir names it and ff_cc_cache_clean empties it.
 *
 *   test_cc_cache MODEL.lua W.safetensors   (sets its own XDG_CACHE_HOME) */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codegen.h"
#include "fixformer.h"

#define THREADS 6
#define T 8

static const char *model_path, *weights_path;
static int32_t ids[T] = {1, 2, 3, 5, 8, 13, 21, 34};
static float *want;
static int dim;

typedef struct {
  int ok;
  char msg[FF_ERROR_MAX];
} result;

/* one forward pass of ids on a fresh model with engine e into out */
static int forward(enum ff_engine e, float *out, ff_error *err) {
  ff_model *m = ff_model_open(model_path, err);
  ff_input in = {0};
  in.batch = 1;
  in.src_len = T;
  in.src_tokens = ids;
  int rc = !m || ff_model_load_weights(m, weights_path, err) || ff_model_prepare(m, e, err) ||
           ff_model_forward(m, &in, out, err);
  ff_model_close(m);
  return rc;
}

static void *worker(void *arg) {
  result *r = arg;
  ff_error err = {0, ""};
  float *out = malloc(sizeof *out * T * (size_t)dim);
  if (!out || forward(FF_ENGINE_CC, out, &err)) {
    snprintf(r->msg, sizeof r->msg, "%s", out ? err.msg : "out of memory");
  } else {
    r->ok = 1;
    for (int i = 0; i < T * dim; i++)
      if (!(fabsf(out[i] - want[i]) <= 1e-4f * (1 + fabsf(want[i])))) {
        snprintf(r->msg, sizeof r->msg, "output %d: %g, the runtime %g", i, out[i], want[i]);
        r->ok = 0;
        break;
      }
  }
  free(out);
  return NULL;
}

/* files in dir: *entries named KEY.so / KEY.sha256, *others anything else */
static void count_files(const char *dir, int *entries, int *others) {
  DIR *d = opendir(dir);
  struct dirent *de;
  *entries = *others = 0;
  while (d && (de = readdir(d))) {
    const char *dot = strchr(de->d_name, '.');
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    if (dot && dot - de->d_name == 32 && (!strcmp(dot, ".so") || !strcmp(dot, ".sha256")))
      ++*entries;
    else
      ++*others;
  }
  if (d) closedir(d);
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: test_cc_cache MODEL.lua W.safetensors\n");
    return 2;
  }
  model_path = argv[1];
  weights_path = argv[2];
  char home[] = "/tmp/ff-cc-cache-XXXXXX", dir[4096], sub[4200];
  if (!mkdtemp(home)) return perror("mkdtemp"), 1;
  setenv("XDG_CACHE_HOME", home, 1);
  snprintf(sub, sizeof sub, "%s/fixformer", home);

  ff_error err = {0, ""};
  ff_model *m = ff_model_open(model_path, &err);
  if (!m) return fprintf(stderr, "test_cc_cache: %s\n", err.msg), 1;
  dim = ff_config_out_dim(ff_model_config(m));
  ff_model_close(m);
  if (!(want = malloc(sizeof *want * T * (size_t)dim)) || forward(FF_ENGINE_RUNTIME, want, &err))
    return fprintf(stderr, "test_cc_cache: runtime: %s\n", err.msg), 1;

  pthread_t th[THREADS];
  result res[THREADS];
  memset(res, 0, sizeof res);
  for (int i = 0; i < THREADS; i++) pthread_create(&th[i], NULL, worker, &res[i]);
  int failed = 0;
  for (int i = 0; i < THREADS; i++) {
    pthread_join(th[i], NULL);
    if (!res[i].ok) {
      fprintf(stderr, "thread %d: FAIL: %s\n", i, res[i].msg);
      failed++;
    }
  }
  printf("%d of %d threads prepared the cc engine on an empty cache and matched the runtime\n", THREADS - failed,
         THREADS);

  int entries, others;
  count_files(sub, &entries, &others);
  printf("cache: %d entry files, %d others\n", entries, others);
  if (entries != 4 || others != 0) {
    fprintf(stderr, "FAIL: want the kernel library and the model (.so + .sha256 each) and nothing else\n");
    failed++;
  }
  if (ff_cc_cache_dir(dir, sizeof dir, &err) || strcmp(dir, sub)) {
    fprintf(stderr, "FAIL: ff_cc_cache_dir: '%s' (%s), want %s\n", dir, err.msg, sub);
    failed++;
  }
  size_t bytes = 0;
  int files = 0;
  if (ff_cc_cache_clean(&bytes, &files, &err) || files != 4 || bytes < 1000) {
    fprintf(stderr, "FAIL: ff_cc_cache_clean: %d files, %zu bytes (%s)\n", files, bytes, err.msg);
    failed++;
  }
  count_files(sub, &entries, &others);
  if (entries || others) {
    fprintf(stderr, "FAIL: %d files left after ff_cc_cache_clean\n", entries + others);
    failed++;
  }
  printf("ff_cc_cache_clean removed %d files (%zu bytes)\n", files, bytes);
  rmdir(sub);
  rmdir(home);
  free(want);
  return failed ? 1 : 0;
}
