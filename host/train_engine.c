/* train_engine.c - generated training code (gen/train.lua, templates/train.c.in) as a trainer's
 * engine (fixformer_train.h's ff_train_engine): the model's training code at fixed shapes,
 * compiled by libtcc or the system compiler (cached), with its state and a pool of threads.
 * Its loss function keeps ff_rt_loss_and_grad's contract and messages: the runtime's checks
 * first, then the generated NAME_loss_and_grad on the batch, in parts of the code's batch. */
#define _DEFAULT_SOURCE /* madvise */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "codegen.h"
#include "ff_rt_train.h"

/* NAME_loss_and_grad, NAME_train_init_state, NAME_train_set_threads (templates/train.c.in); the
 * generated batch and options types are ff_train_batch and ff_train_step_opts field for field */
typedef int (*loss_fn)(const float *params, void *state, const ff_train_batch *b, const ff_train_step_opts *o,
                       float *grad, double *loss_sum, int64_t *tokens);
typedef int (*init_fn)(void *state);
typedef int (*threads_fn)(void *state, void (*fn)(void *, int, void (*)(void *, int), void *), void *pool,
                          int threads);

typedef struct {
  ff_jit *jit;
  loss_fn loss;
  void *state;
  ff_pool *pool;
  int own_pool; /* pool is the engine's (else the caller's, which outlives it) */
  ff_config cfg;
  ff_train_shape shape;
} gen_engine;

/* The state, 2 MiB aligned and, where the system gives them on request
 * (Linux's transparent huge pages, "madvise" mode), in 2 MiB pages: a dW
 * product reads dY down its columns, a row of a wide layer (the FFN's, the
 * logits') a 4 KiB page apart, where each read of 4 KiB pages waits on a
 * TLB miss (one thread: dates 11.68 -> 11.39 ms a step, GPT shape 94.0 ->
 * 93.0).  A hint: without huge pages nothing changes. */
static void *state_alloc(size_t bytes) {
  const size_t huge = (size_t)2 << 20;
  void *p = NULL;
  if (posix_memalign(&p, bytes >= huge ? huge : 64, bytes ? bytes : 64)) return NULL;
#ifdef MADV_HUGEPAGE
  if (bytes >= huge) (void)madvise(p, bytes, MADV_HUGEPAGE);
#endif
  return p;
}

static void gen_release(void *ctx) {
  gen_engine *e = ctx;
  if (!e) return;
  free(e->state);
  if (e->own_pool) ff_pool_free(e->pool);
  ff_jit_free(e->jit);
  free(e);
}

static int gen_loss(void *ctx, const float *params, const ff_train_batch *b, const ff_train_step_opts *o,
                    float *grad, double *loss_sum, int64_t *tokens, ff_error *err) {
  gen_engine *e = ctx;
  const ff_config *c = &e->cfg;
  const int encdec = c->arch == FF_ARCH_ENCODER_DECODER;
  int rc;
  if (!params || !b || !o || !loss_sum || !tokens)
    return ff_fail(err, FF_EINVAL, "the training engine: params, b, o, loss_sum and tokens must not be NULL");
  if ((rc = ff_rt_train_check(c, b, o, err))) return rc; /* the runtime's messages */
  if (b->src_len > e->shape.src || (encdec && b->tgt_len > e->shape.tgt))
    return ff_fail(err, FF_ELENGTH, "a batch of %d %s positions: the generated training code takes at most %d",
                   b->src_len > e->shape.src ? b->src_len : b->tgt_len,
                   b->src_len > e->shape.src ? (encdec ? "source" : "") : "target",
                   b->src_len > e->shape.src ? e->shape.src : e->shape.tgt);
  *loss_sum = 0.0, *tokens = 0;
  ff_train_step_opts rest = *o; /* the parts after the first add (o->set_grad: the first writes) */
  rest.set_grad = 0;
  for (int from = 0; from < b->batch; from += e->shape.batch) { /* parts of the code's batch, first counting on */
    const int n = b->batch - from < e->shape.batch ? b->batch - from : e->shape.batch;
    const ff_train_batch part = ff_train_batch_part(b, from, n, encdec);
    double l;
    int64_t k;
    if ((rc = e->loss(params, e->state, &part, from ? &rest : o, grad, &l, &k)))
      return ff_fail(err, FF_EINVAL, "generated %s_loss_and_grad refused the batch (status %d)", c->name, rc);
    *loss_sum += l, *tokens += k;
  }
  return 0;
}

static void *symbol(ff_jit *j, const char *name, const char *suffix) {
  char sym[FF_NAME_MAX + 32];
  snprintf(sym, sizeof sym, "%s_%s", name, suffix);
  return ff_jit_symbol(j, sym);
}

/* compiles the code's text (header first: no include path needed) for engine */
static int compile(const ff_train_code *code, enum ff_engine engine, ff_jit **out, ff_error *err) {
  size_t hl = strlen(code->header), sl = strlen(code->source);
  char *text = malloc(hl + sl + 2);
  if (!text) return ff_fail(err, FF_ENOMEM, "out of memory");
  memcpy(text, code->header, hl);
  text[hl] = '\n';
  memcpy(text + hl + 1, code->source, sl + 1);
  if (getenv("FIXFORMER_DUMP")) fputs(text, stderr); /* as the forward's */
  int rc = engine == FF_ENGINE_TCC ? ff_jit_tcc(text, out, err) : ff_jit_cc(text, code->library, out, err);
  free(text);
  return rc;
}

int ff_train_engine_generated(ff_model *m, enum ff_engine engine, const ff_train_shape *shape, int threads,
                              ff_train_engine *out, ff_error *err) {
  return ff_train_engine_generated_on(m, engine, shape, threads, NULL, out, err);
}

int ff_train_engine_generated_on(ff_model *m, enum ff_engine engine, const ff_train_shape *shape, int threads,
                                 ff_pool *pool, ff_train_engine *out, ff_error *err) {
  memset(out, 0, sizeof *out);
  if (!m || !shape) return ff_fail(err, FF_EINVAL, "ff_train_engine_generated: %s is NULL", m ? "shape" : "the model");
  if (engine != FF_ENGINE_TCC && engine != FF_ENGINE_CC)
    return ff_fail(err, FF_EINVAL, "engine: generated training code runs on tcc or cc, not %s", ff_engine_name(engine));
  if (threads < 1 || threads > FF_MAX_THREADS)
    return ff_fail(err, FF_EINVAL, "threads: %d is outside 1..%d", threads, FF_MAX_THREADS);
  int rc = ff_host_isa_check(err);
  if (rc) return rc;
  const ff_config *c = ff_model_config(m);
  gen_engine *e = calloc(1, sizeof *e);
  if (!e) return ff_fail(err, FF_ENOMEM, "out of memory");
  e->cfg = *c, e->shape = *shape;
  ff_train_code code;
  if ((rc = ff_model_train_code_isa(m, shape, "fixformer train", ff_host_isa(), &code, err)) ||
      (rc = compile(&code, engine, &e->jit, err))) {
    ff_train_code_free(&code);
    gen_release(e);
    return rc;
  }
  size_t bytes = code.state_bytes;
  ff_train_code_free(&code);
  e->loss = (loss_fn)symbol(e->jit, c->name, "loss_and_grad");
  init_fn init = (init_fn)symbol(e->jit, c->name, "train_init_state");
  threads_fn set_threads = (threads_fn)symbol(e->jit, c->name, "train_set_threads");
  if (!e->loss || !init || !set_threads)
    rc = ff_fail(err, FF_EINVAL, "generated training code lacks %s_loss_and_grad, _train_init_state or "
                 "_train_set_threads", c->name);
  else if (!(e->state = state_alloc(bytes)))
    rc = ff_fail(err, FF_ENOMEM, "out of memory for %zu bytes of training state", bytes);
  else if (init(e->state))
    rc = ff_fail(err, FF_EINVAL, "generated %s_train_init_state failed", c->name);
  else if (threads > 1 && !(e->pool = pool) && !(e->own_pool = 1, e->pool = ff_pool_new(threads)))
    rc = ff_fail(err, FF_ENOMEM, "cannot start %d threads", threads);
  else if (set_threads(e->state, threads > 1 ? ff_pool_run : NULL, e->pool, threads))
    rc = ff_fail(err, FF_EINVAL, "generated %s_train_set_threads refused %d threads", c->name, threads);
  if (rc) {
    gen_release(e);
    return rc;
  }
  *out = (ff_train_engine){ff_engine_name(engine), e, gen_loss, gen_release, 1};
  return 0;
}
