/* pool.c - a small pool of worker threads behind the generated code's
 * parallel-for (NAME_set_threads): ff_pool_run hands n tasks out to the
 * workers and to the calling thread, and returns when all are done.  Plain
 * C and pthreads; compiled into the fixformer host, and copied into the
 * --with-main driver (used there when built with -DFF_THREADS -pthread).
 *   ff_pool_new(threads)   threads - 1 workers (the caller is the last), or NULL
 *   ff_pool_run(pool, n, task, arg)   task(arg, i) for i < n, all done on return
 *   ff_pool_free(pool)
 * A forward pass is a few dozen runs in a row, microseconds apart: a worker
 * that has finished spins a while (FF_POOL_SPIN checks, about a millisecond)
 * on the run counter before it sleeps on the condition variable, and so does
 * the caller waiting for the last task, so that a run does not start with a
 * futex wake-up.  The spin reads with GCC's __atomic builtins (GCC, clang);
 * other compilers only sleep and wake. */
#include <pthread.h>
#include <stdlib.h>

#if defined(__GNUC__) && !defined(__TINYC__)
#define FF_POOL_SPIN 20000
#define FF_POOL_LOAD(x) __atomic_load_n(&(x), __ATOMIC_ACQUIRE)
#define FF_POOL_STORE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELEASE)
#if defined(__x86_64__) || defined(__i386__)
#define FF_POOL_PAUSE() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define FF_POOL_PAUSE() __asm__ __volatile__("yield")
#else
#define FF_POOL_PAUSE() ((void)0)
#endif
#else
#define FF_POOL_SPIN 0
#define FF_POOL_LOAD(x) (x)
#define FF_POOL_STORE(x, v) ((x) = (v))
#define FF_POOL_PAUSE() ((void)0)
#endif

#ifndef FF_POOL_API
#define FF_POOL_API
#endif

typedef struct ff_pool ff_pool;
FF_POOL_API void ff_pool_free(ff_pool *p);

struct ff_pool {
  pthread_mutex_t lock;
  pthread_cond_t work, idle; /* new work for the workers; all tasks done */
  pthread_t *workers;
  int n_workers, stop;
  unsigned long generation; /* bumped for each run */
  void (*task)(void *arg, int i);
  void *arg;
  int n, next, done;
};

/* Takes and runs tasks of the current run until none is left (lock held on
 * entry and on return). */
static void drain(ff_pool *p) {
  while (p->next < p->n) {
    int i = p->next++;
    pthread_mutex_unlock(&p->lock);
    p->task(p->arg, i);
    pthread_mutex_lock(&p->lock);
    FF_POOL_STORE(p->done, p->done + 1);
    if (p->done == p->n) pthread_cond_broadcast(&p->idle);
  }
}

static void *worker(void *arg) {
  ff_pool *p = arg;
  unsigned long seen = 0;
  pthread_mutex_lock(&p->lock);
  for (;;) {
    if (FF_POOL_SPIN && !p->stop && p->generation == seen) { /* spin a while, then sleep */
      pthread_mutex_unlock(&p->lock);
      for (int i = 0; i < FF_POOL_SPIN && FF_POOL_LOAD(p->generation) == seen && !FF_POOL_LOAD(p->stop); i++)
        FF_POOL_PAUSE();
      pthread_mutex_lock(&p->lock);
    }
    while (!p->stop && p->generation == seen) pthread_cond_wait(&p->work, &p->lock);
    if (p->stop) break;
    seen = p->generation;
    drain(p);
  }
  pthread_mutex_unlock(&p->lock);
  return NULL;
}

FF_POOL_API ff_pool *ff_pool_new(int threads) {
  ff_pool *p = calloc(1, sizeof *p);
  if (!p || !(p->workers = calloc((size_t)(threads > 1 ? threads - 1 : 1), sizeof *p->workers))) {
    free(p);
    return NULL;
  }
  pthread_mutex_init(&p->lock, NULL);
  pthread_cond_init(&p->work, NULL);
  pthread_cond_init(&p->idle, NULL);
  for (; p->n_workers < threads - 1; p->n_workers++)
    if (pthread_create(&p->workers[p->n_workers], NULL, worker, p)) {
      ff_pool_free(p);
      return NULL;
    }
  return p;
}

FF_POOL_API void ff_pool_run(void *pool, int n, void (*task)(void *arg, int i), void *arg) {
  ff_pool *p = pool;
  pthread_mutex_lock(&p->lock);
  p->task = task, p->arg = arg, p->n = n, p->next = 0, p->done = 0;
  FF_POOL_STORE(p->generation, p->generation + 1);
  pthread_cond_broadcast(&p->work);
  drain(p); /* the caller works too */
  if (FF_POOL_SPIN && p->done < p->n) { /* the last task is near: spin a while, then sleep */
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; i < FF_POOL_SPIN && FF_POOL_LOAD(p->done) < n; i++) FF_POOL_PAUSE();
    pthread_mutex_lock(&p->lock);
  }
  while (p->done < p->n) pthread_cond_wait(&p->idle, &p->lock);
  pthread_mutex_unlock(&p->lock);
}

FF_POOL_API void ff_pool_free(ff_pool *p) {
  if (!p) return;
  pthread_mutex_lock(&p->lock);
  FF_POOL_STORE(p->stop, 1);
  pthread_cond_broadcast(&p->work);
  pthread_mutex_unlock(&p->lock);
  for (int i = 0; i < p->n_workers; i++) pthread_join(p->workers[i], NULL);
  pthread_mutex_destroy(&p->lock);
  pthread_cond_destroy(&p->work);
  pthread_cond_destroy(&p->idle);
  free(p->workers);
  free(p);
}
