/* api.c - the public API of fixformer.h over the host and the runtime.
 *
 * Threads: every call on a model holds the model's mutex, so calls on one
 * model from several threads are serialised.  What clones share (the
 * description, the bound weights, the generated program, the packed blob and
 * the compiled code) lives in reference-counted parts that are never changed
 * once made: a call that would change one makes a new part for its own model
 * and drops its reference to the old.  What a model owns alone is its
 * generated-code state, the runtime's caches, its position and its pool. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../kernels/isas.h"
#include "beam.h"
#include "cache.h"
#include "codegen.h"
#include "ff_runtime.h"
#include "ff_sample.h"
#include "fixformer.h"
#include "fixformer_train.h"
#include "host.h"

/* NAME_run of the generated code: the uniform entry point (templates/model.h.in) */
typedef int (*run_fn)(const void *weights, void *state, int batch, int src_len, const void *src,
                      const int32_t *lengths, int tgt_len, const void *tgt, float *out);
typedef int (*bind_fn)(void *weights, const void *blob, size_t bytes);
/* NAME_encode and NAME_decode: step-by-step decoding (templates/model.h.in) */
typedef int (*encode_fn)(const void *weights, void *state, const void *src, int S, int src_len);
typedef int (*decode_fn)(const void *weights, void *state, const void *in, int T, int pos0, float *out);
/* NAME_init_state, NAME_set_threads: the state's fields and parallel-for */
typedef int (*init_state_fn)(void *state);
typedef int (*set_threads_fn)(void *state, void (*fn)(void *, int, void (*)(void *, int), void *), void *pool,
                              int threads);

/* ---- the shared parts, reference-counted ------------------------------------ */

static void ref(int *refs) { __atomic_add_fetch(refs, 1, __ATOMIC_RELAXED); }
static int unref(int *refs) { return __atomic_sub_fetch(refs, 1, __ATOMIC_ACQ_REL) == 0; }

/* The description: its Lua state (the generator runs in it, one call at a
 * time: lock) and the resolved config. */
typedef struct {
  int refs;
  pthread_mutex_t lock;
  ff_lua *lua;
  char *path;
  ff_config cfg;
  unsigned last;    /* the program whose ff_render_extra the Lua state holds */
  unsigned next_id; /* numbers the programs generated in it */
} shared_desc;

/* path, st: the file read (the packed-weight cache's key is its hash);
 * finite: 1 once ff_rt_check_finite passed (remembered with the hash);
 * fused tensors are filled on first need (weights_fill), under fill_lock:
 * clones share the part */
typedef struct {
  int refs;
  ff_rt_model rt;
  char *path;
  struct stat st;
  int finite;
  pthread_mutex_t fill_lock;
} shared_weights;

typedef struct {
  int refs;
  unsigned id;
  char *command;
  ff_program program;
} shared_program;

/* packed weights; mapped: a cache entry's mapping (munmap), else malloc'ed */
typedef struct { int refs; void *data; size_t bytes; int mapped; } shared_blob;

typedef struct { /* compiled code and its entry points */
  int refs;
  enum ff_engine engine;
  ff_jit *jit;
  bind_fn bind;
  run_fn run;
  encode_fn encode; /* encoder-decoder only */
  decode_fn decode; /* decoder-only and encoder-decoder */
  init_state_fn init_state;
  set_threads_fn set_threads;
} shared_code;

static void desc_unref(shared_desc *d) {
  if (!d || !unref(&d->refs)) return;
  ff_lua_close(d->lua);
  free(d->path);
  pthread_mutex_destroy(&d->lock);
  free(d);
}

static void weights_unref(shared_weights *w) {
  if (!w || !unref(&w->refs)) return;
  ff_rt_model_free(&w->rt);
  free(w->path);
  pthread_mutex_destroy(&w->fill_lock);
  free(w);
}

/* The fused projections' bytes, copied from their parts before anything
 * reads the floats (the runtime engine, packing, the finiteness check); a
 * start that maps its packed weights never does, and never touches them. */
static void weights_fill(shared_weights *w) {
  pthread_mutex_lock(&w->fill_lock);
  ff_tensor_file_fill(&w->rt.file);
  pthread_mutex_unlock(&w->fill_lock);
}

static void program_unref(shared_program *p) {
  if (!p || !unref(&p->refs)) return;
  ff_program_free(&p->program);
  free(p->command);
  free(p);
}

static void blob_free(shared_blob *b) {
  if (b->mapped)
    munmap(b->data, b->bytes);
  else
    free(b->data);
  free(b);
}

static void blob_unref(shared_blob *b) {
  if (b && unref(&b->refs)) blob_free(b);
}

static void code_unref(shared_code *k) {
  if (!k || !unref(&k->refs)) return;
  ff_jit_free(k->jit); /* (jit_tcc.c serialises libtcc) */
  free(k);
}

/* ---- the model ----------------------------------------------------------------- */

struct ff_model {
  pthread_mutex_t lock;     /* held by every call on this model */
  shared_desc *desc;
  shared_weights *w;        /* NULL: no weights yet */
  shared_weights *wq;       /* the runtime's reference of w in weight_type and compute (not f32): on demand */
  shared_program *prog;     /* NULL: not generated for isa yet */
  shared_blob *blob;        /* NULL: not packed yet (depends on prog and w) */
  shared_code *code;        /* NULL: not compiled (runtime engine, or unprepared) */
  const char *isa;          /* the matrix kernels of the generated code */
  char target[64];          /* the triple it is generated for; "": this machine */
  int no_line;              /* generated without #line directives */
  enum ff_weight_type weight_type; /* the description's dtype, or ff_model_set_dtype's */
  enum ff_compute compute;         /* the description's compute, or ff_model_set_compute's */
  enum ff_engine engine;
  int prepared;
  /* this model's own */
  struct { const float *data; } weights; /* NAME_weights, bound to blob */
  void *state;              /* program.state_bytes, 64-byte aligned */
  ff_rt_state rt_state;     /* the runtime's caches, allocated on the first begin */
  int pos;                  /* the next position a step decodes */
  int begun;                /* a source is encoded / a sequence started */
  int threads;              /* for the generated code: 1, or a pool of this many */
  ff_pool *pool;
  ff_progress_fn progress;  /* told when a slow step starts and ends, or NULL */
  void *progress_ctx;
};

#define CFG(m) (&(m)->desc->cfg)
/* the weights the runtime engine computes with: as stored in the weight type */
#define RT(m) ((m)->wq ? &(m)->wq->rt : &(m)->w->rt)

/* A slow step starts (done 0) or ends (done 1): told to the progress function. */
static void step(const ff_model *m, const char *what, int done) {
  if (m->progress) m->progress(m->progress_ctx, what, done);
}

static int null_arg(ff_error *err, const char *fn, const char *arg) {
  return ff_fail(err, FF_EINVAL, "%s: %s is NULL", fn, arg);
}

static void lock(const ff_model *m) { pthread_mutex_lock((pthread_mutex_t *)&m->lock); }
static void unlock(const ff_model *m) { pthread_mutex_unlock((pthread_mutex_t *)&m->lock); }

/* The host's ISA list is made on first use: once, before any model exists. */
static pthread_once_t isa_once = PTHREAD_ONCE_INIT;
static void isa_init(void) { (void)ff_host_isas(); }

static ff_model *model_new(ff_error *err) {
  ff_model *m = calloc(1, sizeof *m);
  if (!m) {
    ff_fail(err, FF_ENOMEM, "out of memory");
    return NULL;
  }
  if (pthread_mutex_init(&m->lock, NULL)) {
    free(m);
    ff_fail(err, FF_ENOMEM, "cannot create a mutex");
    return NULL;
  }
  m->isa = "generic";
  m->threads = 1;
  return m;
}

/* The description at path, or its text when text is not NULL. */
static ff_model *model_open(const char *path, const char *text, size_t len, ff_error *err) {
  pthread_once(&isa_once, isa_init);
  ff_model *m = model_new(err);
  shared_desc *d = m ? calloc(1, sizeof *d) : NULL;
  if (m && !d) ff_fail(err, FF_ENOMEM, "out of memory");
  if (!d) {
    ff_model_close(m);
    return NULL;
  }
  size_t n = strlen(path) + 1;
  if (pthread_mutex_init(&d->lock, NULL)) {
    free(d);
    ff_model_close(m);
    ff_fail(err, FF_ENOMEM, "cannot create a mutex");
    return NULL;
  }
  d->refs = 1;
  m->desc = d;
  if ((d->path = malloc(n))) memcpy(d->path, path, n);
  if (!d->path) {
    ff_fail(err, FF_ENOMEM, "out of memory");
    ff_model_close(m);
    return NULL;
  }
  if (!(d->lua = ff_lua_open(err)) ||
      (text ? ff_lua_load_config_text(d->lua, path, text, len, &d->cfg, err)
            : ff_lua_load_config(d->lua, path, &d->cfg, err)) ||
      ff_rt_check_config(&d->cfg, err)) {
    ff_model_close(m);
    return NULL;
  }
  m->weight_type = d->cfg.weight_type;
  m->compute = d->cfg.compute;
  return m;
}

ff_model *ff_model_open(const char *path, ff_error *err) {
  if (!path) {
    null_arg(err, "ff_model_open", "the description path");
    return NULL;
  }
  return model_open(path, NULL, 0, err);
}

ff_model *ff_model_open_text(const char *path, const char *text, size_t len, ff_error *err) {
  if (!path || !text) {
    null_arg(err, "ff_model_open_text", path ? "the text" : "the description path");
    return NULL;
  }
  return model_open(path, text, len, err);
}

const ff_config *ff_model_config(const ff_model *m) { return m ? CFG(m) : NULL; }

/* What an engine made for this model: its state, the runtime's caches. */
static void release_engine(ff_model *m) {
  if (m->rt_state.buf) ff_rt_state_free(&m->rt_state);
  memset(&m->rt_state, 0, sizeof m->rt_state);
  m->begun = m->pos = 0;
  code_unref(m->code);
  m->code = NULL;
  free(m->state);
  m->state = NULL;
  m->weights.data = NULL;
  m->prepared = 0;
}

/* ... and the generated program and the packed weights (they depend on the ISA). */
static void release_program(ff_model *m) {
  release_engine(m);
  blob_unref(m->blob);
  m->blob = NULL;
  program_unref(m->prog);
  m->prog = NULL;
}

int ff_model_set_isa(ff_model *m, const char *isa, ff_error *err) {
#define FF_ISA_NAME(name, ...) #name,
  static const char *const known[] = {FF_ISAS(FF_ISA_NAME) NULL}; /* kernels/isas.h */
#undef FF_ISA_NAME
  if (!m) return null_arg(err, "ff_model_set_isa", "the model");
  if (!isa) return null_arg(err, "ff_model_set_isa", "isa");
  if (!strcmp(isa, "native")) {
    int rc = ff_host_isa_check(err);
    if (rc) return rc;
    isa = ff_host_isa();
  }
  for (int i = 0; known[i]; i++)
    if (!strcmp(known[i], isa)) {
      lock(m);
      if (strcmp(m->isa, known[i])) release_program(m); /* the program and the packed weights depend on it */
      m->isa = known[i];
      unlock(m);
      return 0;
    }
#define FF_ISA_LIST(name, ...) #name ", "
  return ff_fail(err, FF_EINVAL, "isa: '%s' is not one of " FF_ISAS(FF_ISA_LIST) "native", isa);
#undef FF_ISA_LIST
}

const char *ff_model_isa(const ff_model *m) {
  if (!m) return NULL;
  lock(m);
  const char *isa = m->isa;
  unlock(m);
  return isa;
}

int ff_model_set_target(ff_model *m, const char *target, ff_error *err) {
  if (!m) return null_arg(err, "ff_model_set_target", "the model");
  size_t n = target ? strlen(target) : 0;
  if (n >= sizeof m->target || (target && strspn(target, "abcdefghijklmnopqrstuvwxyz0123456789._-") != n))
    return ff_fail(err, FF_EINVAL, "target: '%.80s' is not a target triple", target);
  lock(m);
  if (strcmp(m->target, target ? target : "")) { /* the program's size checks depend on it */
    release_program(m);
    memcpy(m->target, target ? target : "", n + 1);
  }
  unlock(m);
  return 0;
}

int ff_model_set_line_directives(ff_model *m, int on, ff_error *err) {
  if (!m) return null_arg(err, "ff_model_set_line_directives", "the model");
  lock(m);
  if (m->no_line != !on) { /* the program's text depends on it */
    release_program(m);
    m->no_line = !on;
  }
  unlock(m);
  return 0;
}

/* A choice the program, the packed weights and the reference depend on:
 * set to t, and they are made again when next needed. */
static void set_number_type(ff_model *m, int t, int compute) {
  lock(m);
  if ((compute ? (int)m->compute : (int)m->weight_type) != t) {
    release_program(m);
    weights_unref(m->wq);
    m->wq = NULL;
    if (compute) m->compute = (enum ff_compute)t;
    else m->weight_type = (enum ff_weight_type)t;
  }
  unlock(m);
}

int ff_model_set_dtype(ff_model *m, const char *dtype, ff_error *err) {
  if (!m) return null_arg(err, "ff_model_set_dtype", "the model");
  if (!dtype) return null_arg(err, "ff_model_set_dtype", "dtype");
  for (int t = FF_WEIGHT_F32; t <= FF_WEIGHT_INT8; t++)
    if (!strcmp(dtype, ff_weight_type_name((enum ff_weight_type)t))) {
      set_number_type(m, t, 0);
      return 0;
    }
  return ff_fail(err, FF_EINVAL, "dtype: '%s' is not one of f32, bf16, int8", dtype);
}

const char *ff_model_dtype(const ff_model *m) { return m ? ff_weight_type_name(m->weight_type) : NULL; }

static const char *const compute_names[] = {"f32", "int8", "bf16"}; /* FF_COMPUTE_VALUES' words */

int ff_model_set_compute(ff_model *m, const char *compute, ff_error *err) {
  if (!m) return null_arg(err, "ff_model_set_compute", "the model");
  if (!compute) return null_arg(err, "ff_model_set_compute", "compute");
  for (int t = FF_COMPUTE_F32; t <= FF_COMPUTE_BF16; t++)
    if (!strcmp(compute, compute_names[t])) {
      set_number_type(m, t, 1);
      return 0;
    }
  return ff_fail(err, FF_EINVAL, "compute: '%s' is not one of f32, int8, bf16", compute);
}

const char *ff_model_compute(const ff_model *m) { return m ? compute_names[m->compute] : NULL; }

/* ---- generating and packing ---------------------------------------------------- */

/* Runs the generator for the model's ISA into a new program part. */
static int generate_locked(ff_model *m, const char *command, ff_error *err) {
  if (m->prog) return 0;
  shared_program *p = calloc(1, sizeof *p);
  size_t n = strlen(command) + 1;
  if (!p || !(p->command = malloc(n))) {
    free(p);
    return ff_fail(err, FF_ENOMEM, "out of memory");
  }
  memcpy(p->command, command, n);
  p->refs = 1;
  shared_desc *d = m->desc;
  ff_gen_options o = {d->path, command, m->isa, ff_weight_type_name(m->weight_type), compute_names[m->compute],
                      m->target, m->no_line};
  pthread_mutex_lock(&d->lock);
  step(m, "generate C", 0);
  int rc = ff_generate(d->lua, &d->cfg, &o, &p->program, err);
  step(m, "generate C", 1);
  d->last = p->id = ++d->next_id;
  pthread_mutex_unlock(&d->lock);
  if (rc) {
    program_unref(p);
    return rc;
  }
  m->prog = p;
  return 0;
}

int ff_model_generate(ff_model *m, const char *command, const char **header, const char **source, ff_error *err) {
  if (!m) return null_arg(err, "ff_model_generate", "the model");
  lock(m);
  int rc = generate_locked(m, command ? command : "fixformer", err);
  if (!rc && header) *header = m->prog->program.header;
  if (!rc && source) *source = m->prog->program.source;
  unlock(m);
  return rc;
}

int ff_model_kernel_source(ff_model *m, const char **text, ff_error *err) {
  if (!m) return null_arg(err, "ff_model_kernel_source", "the model");
  if (!text) return null_arg(err, "ff_model_kernel_source", "text");
  lock(m);
  int rc = generate_locked(m, "fixformer", err);
  *text = rc ? NULL : m->prog->program.kernel_source;
  unlock(m);
  return rc;
}

/* Renders a file that goes with the model's program; the Lua state holds
 * the last generated program's renderer, which may be another model's. */
static int render_locked(ff_model *m, const ff_extra *x, char **text, ff_error *err) {
  shared_desc *d = m->desc;
  int rc = 0;
  pthread_mutex_lock(&d->lock);
  if (d->last != m->prog->id) {
    ff_program again = {0};
    ff_gen_options o = {d->path, m->prog->command, m->isa, ff_weight_type_name(m->weight_type),
                        compute_names[m->compute], m->target, m->no_line};
    if (!(rc = ff_generate(d->lua, &d->cfg, &o, &again, err))) d->last = m->prog->id;
    ff_program_free(&again);
  }
  if (!rc) rc = ff_render_extra(d->lua, x, text, err);
  pthread_mutex_unlock(&d->lock);
  return rc;
}

/* FIXFORMER_PACK_CACHE=0: no packed-weight cache; FIXFORMER_PACK_TRACE:
 * one line on stderr saying whether the weights were packed or mapped. */
static int pack_cache_on(void) {
  const char *s = getenv("FIXFORMER_PACK_CACHE");
  return !(s && !strcmp(s, "0"));
}

static void pack_trace(const char *how) {
  if (getenv("FIXFORMER_PACK_TRACE")) fprintf(stderr, "packed weights: %s\n", how);
}

/* The weights file's sha256: remembered by its identity (ff_file_memo_get:
 * the file is not read), else hashed and remembered; *memo: 1 remembered. */
static int weights_sha(shared_weights *w, char sha[65], int *memo) {
  ff_file_memo fm;
  *memo = !ff_file_memo_get(&w->st, &fm) && fm.sha[0];
  if (*memo) {
    memcpy(sha, fm.sha, 65);
    return 0;
  }
  if (ff_file_sha256(w->path, &w->st, sha)) return -1;
  memcpy(fm.sha, sha, 65);
  if (__atomic_load_n(&w->finite, __ATOMIC_RELAXED)) fm.finite = 1;
  ff_file_memo_put(&w->st, &fm); /* (no folder yet on a first start: the store makes it) */
  return 0;
}

/* The cached blob of w for this layout, mapped (b->data NULL: none, or one
 * not of the layout's size); sha: the weights file's, for the store.  0: no
 * cache this time (the file cannot be hashed, the folder is refused): the
 * cache is an aid, its trouble does not stop a run that packs. */
static int pack_cached(ff_model *m, shared_weights *w, shared_blob *b, char sha[65], int *memo) {
  size_t want = FF_BLOB_HEADER + m->prog->program.weight_floats * sizeof(float);
  if (weights_sha(w, sha, memo) ||
      ff_blob_cache_open(sha, m->prog->program.layout_hash, &b->data, &b->bytes, NULL))
    return 0;
  if (!*memo) { /* the folder exists now */
    ff_file_memo fm = {"", __atomic_load_n(&w->finite, __ATOMIC_RELAXED) ? 1 : -1};
    memcpy(fm.sha, sha, 65);
    ff_file_memo_put(&w->st, &fm);
  }
  if (b->data && b->bytes != want) {
    munmap(b->data, b->bytes);
    b->data = NULL;
  }
  b->mapped = b->data != NULL;
  return 1;
}

/* Packs weights w into the model's program layout; cached (the JIT
 * engines): mapped from the cache when it holds them, else packed into a
 * new entry's mapping (ff_blob_cache_begin) and stored.  Where the cache
 * cannot take it (no room, a full disk, a quota), the blob is packed in
 * memory and the run goes on, silently: the cache is an aid, and a library
 * prints nothing (FIXFORMER_PACK_TRACE says why).  Nor is it stored when
 * the file changed while it was hashed and packed (the mapping then holds
 * bytes other than the hash's). */
static int pack(ff_model *m, shared_weights *w, int cached, shared_blob **out, ff_error *err) {
  shared_blob *b = calloc(1, sizeof *b);
  char sha[65], how[FF_ERROR_MAX + 64];
  int memo = 0;
  if (!b) return ff_fail(err, FF_ENOMEM, "out of memory");
  cached = cached && w->path && pack_cache_on() && pack_cached(m, w, b, sha, &memo);
  const size_t bytes = FF_BLOB_HEADER + m->prog->program.weight_floats * sizeof(float);
  const int hit = b->mapped;
  int rc = 0;
  ff_error store = {0, ""};
  if (!b->mapped) {
    ff_blob_pending pb;
    const int direct = cached && !ff_blob_cache_begin(sha, m->prog->program.layout_hash, bytes, &pb, &store);
    weights_fill(w);
    if (direct) {
      rc = ff_pack_weights_into(&m->prog->program, &w->rt.file, pb.data, ff_blob_cache_ready, &pb, err);
      b->data = pb.data;
      b->mapped = 1;
    } else {
      rc = ff_pack_weights(&m->prog->program, &w->rt.file, &b->data, &b->bytes, err);
    }
    b->bytes = bytes;
    struct stat now;
    const int changed = !rc && cached && (stat(w->path, &now) || !ff_same_file(&now, &w->st));
    if (changed) ff_fail(&store, FF_EIO, "%s changed while it was packed", w->path);
    if (direct) ff_blob_cache_finish(&pb, !rc && !changed, &store);
  }
  if (rc) {
    blob_free(b);
    return rc;
  }
  snprintf(how, sizeof how, "%s%s%s%s", hit ? "cached" : "packed",
           memo ? " (key memoized)" : "", store.code ? "; not stored: " : "", store.msg);
  if (cached) pack_trace(how);
  b->refs = 1;
  *out = b;
  return 0;
}

static int blob_locked(ff_model *m, int cached, ff_error *err) {
  int rc;
  if (!m->w) return ff_fail(err, FF_EINVAL, "no weights: load them before packing");
  if ((rc = generate_locked(m, "fixformer", err))) return rc;
  if (m->blob) return 0;
  step(m, "pack weights", 0);
  rc = pack(m, m->w, cached, &m->blob, err);
  step(m, "pack weights", 1);
  return rc;
}

int ff_model_weight_blob(ff_model *m, const void **blob, size_t *bytes, ff_error *err) {
  if (!m) return null_arg(err, "ff_model_weight_blob", "the model");
  if (!blob || !bytes) return null_arg(err, "ff_model_weight_blob", blob ? "bytes" : "blob");
  lock(m);
  int rc = blob_locked(m, 0, err);
  if (!rc) {
    *blob = m->blob->data;
    *bytes = m->blob->bytes;
  }
  unlock(m);
  return rc;
}

int ff_model_driver_source(ff_model *m, int embed, char **text, ff_error *err) {
  if (!m) return null_arg(err, "ff_model_driver_source", "the model");
  if (!text) return null_arg(err, "ff_model_driver_source", "text");
  const ff_config *c = CFG(m);
  ff_tokenizer *tok = NULL;
  char *tables = NULL;
  lock(m);
  int rc = generate_locked(m, "fixformer", err);
  if (!rc && c->vocabulary[0] && !(rc = ff_tokenizer_load(c->vocabulary, c->vocab, &tok, err)))
    rc = ff_tokenizer_c_tables(tok, &tables, err);
  if (!rc) { /* the driver compiles the tokenizer in: --text in, text out */
    ff_extra x = {"main", embed, NULL, NULL, NULL, tables, c->vocabulary, tok ? ff_tokenizer_get_info(tok) : NULL};
    rc = render_locked(m, &x, text, err);
  }
  free(tables);
  ff_tokenizer_free(tok);
  unlock(m);
  return rc;
}

/* The --embed weights (NAME_weights.c) to out: packed once to hash and check
 * them (the banner names the hash), the file rendered around a mark, then
 * packed again and written as they are formatted.  No copy of the weights
 * or of their text is held, and none passes through the Lua state. */
static int weights_c_locked(ff_model *m, const char *weights_path, const ff_text_out *out, ff_error *err) {
  if (!m->w) return ff_fail(err, FF_EINVAL, "no weights: load them before packing");
  int rc = generate_locked(m, "fixformer", err);
  if (rc) return rc;
  const ff_program *p = &m->prog->program;
  const int floats = m->weight_type == FF_WEIGHT_F32 && m->compute == FF_COMPUTE_F32;
  char hex[65], *text = NULL;
  weights_fill(m->w);
  step(m, "write the weights as C", 0);
  if (!(rc = ff_embed_sha256(p, &m->w->rt.file, floats, weights_path, hex, err))) {
    ff_extra x = {"weights", 1, FF_WEIGHT_DATA_MARK, weights_path, hex, NULL, NULL, NULL};
    if (!(rc = render_locked(m, &x, &text, err))) rc = ff_embed_write(p, &m->w->rt.file, floats, text, out, err);
  }
  step(m, "write the weights as C", 1);
  free(text);
  return rc;
}

typedef struct {
  char *p;
  size_t len, cap;
} text_buf;

static int to_buf(void *ctx, const char *s, size_t n, ff_error *err) {
  text_buf *t = ctx;
  if (n >= t->cap - t->len) {
    size_t cap = t->cap ? t->cap : 1 << 16;
    while (cap <= t->len + n && cap < SIZE_MAX / 2) cap *= 2;
    char *grown = cap > t->len + n ? realloc(t->p, cap) : NULL;
    if (!grown) return ff_fail(err, FF_ENOMEM, "out of memory for the embedded weights' text");
    t->p = grown, t->cap = cap;
  }
  memcpy(t->p + t->len, s, n);
  t->len += n;
  t->p[t->len] = 0;
  return 0;
}

int ff_model_weights_source(ff_model *m, const char *weights_path, char **text, ff_error *err) {
  if (!m) return null_arg(err, "ff_model_weights_source", "the model");
  if (!weights_path || !text) return null_arg(err, "ff_model_weights_source", text ? "weights_path" : "text");
  text_buf t = {NULL, 0, 0};
  const ff_text_out out = {to_buf, &t};
  lock(m);
  int rc = weights_c_locked(m, weights_path, &out, err);
  unlock(m);
  if (rc) free(t.p);
  *text = rc ? NULL : t.p;
  return rc;
}

typedef struct {
  int fd;
  size_t bytes;
} fd_out;

static int to_fd(void *ctx, const char *s, size_t n, ff_error *err) {
  fd_out *o = ctx;
  int e = ff_write_all(o->fd, s, n);
  if (e) return ff_fail(err, FF_EIO, "cannot write: %s", strerror(e));
  o->bytes += n;
  return 0;
}

static int words_to_fd(void *ctx, const float *x, size_t n, ff_error *err) {
  return to_fd(ctx, (const char *)x, n * sizeof *x, err);
}

int ff_model_weight_blob_write(ff_model *m, int fd, size_t *bytes, ff_error *err) {
  if (!m) return null_arg(err, "ff_model_weight_blob_write", "the model");
  fd_out o = {fd, 0};
  lock(m);
  int rc = m->w ? generate_locked(m, "fixformer", err) : ff_fail(err, FF_EINVAL, "no weights: load them before packing");
  if (!rc) { /* the blob ff_model_weight_blob holds, packed piece by piece as it is written */
    unsigned char header[FF_BLOB_HEADER];
    ff_blob_header(&m->prog->program, header);
    weights_fill(m->w);
    step(m, "pack weights", 0);
    if (!(rc = to_fd(&o, (const char *)header, sizeof header, err)))
      rc = ff_pack_stream(&m->prog->program, &m->w->rt.file, words_to_fd, &o, err);
    step(m, "pack weights", 1);
  }
  unlock(m);
  if (bytes) *bytes = o.bytes;
  return rc;
}

int ff_model_weights_write(ff_model *m, const char *weights_path, int fd, size_t *bytes, ff_error *err) {
  if (!m) return null_arg(err, "ff_model_weights_write", "the model");
  if (!weights_path) return null_arg(err, "ff_model_weights_write", "weights_path");
  fd_out o = {fd, 0};
  const ff_text_out out = {to_fd, &o};
  lock(m);
  int rc = weights_c_locked(m, weights_path, &out, err);
  unlock(m);
  if (bytes) *bytes = o.bytes;
  return rc;
}

/* ---- weights --------------------------------------------------------------------- */

/* Reads and binds a weights file into a new part; nothing of m changes. */
static int read_weights(ff_model *m, const char *path, shared_weights **out, ff_error *err) {
  ff_tensor_file file;
  struct stat st;
  int known = !stat(path, &st); /* before the read: a file changed after it is not cached */
  int rc = ff_rt_read_weights_deferred(CFG(m), path, &file, err); /* separate q/k/v, gate/up fused */
  if (rc) return rc;
  struct stat after; /* the same file before and after: the one mapped (its identity keys the memo) */
  known = known && !stat(path, &after) && ff_same_file(&st, &after);
  shared_weights *w = calloc(1, sizeof *w);
  if (!w || pthread_mutex_init(&w->fill_lock, NULL)) {
    free(w);
    ff_tensor_file_free(&file);
    return ff_fail(err, FF_ENOMEM, "out of memory");
  }
  rc = ff_rt_model_bind(&w->rt, CFG(m), &file, err); /* which takes the file either way */
  if (!rc && (rc = ff_rt_model_fold(&w->rt, err))) ff_rt_model_free(&w->rt); /* LayerScale and its kind */
  if (rc) {
    pthread_mutex_destroy(&w->fill_lock);
    free(w);
    if (err) {
      ff_fail(err, rc, "%s: %s", path, err->msg);
    }
    return rc;
  }
  w->refs = 1;
  w->path = known ? strdup(path) : NULL; /* NULL: no packed-weight cache for these */
  w->st = st;
  *out = w;
  return 0;
}

/* New weights into a prepared generated engine: packed and bound first, so
 * a failure leaves the model as it was. */
static int load_locked(ff_model *m, const char *path, ff_error *err) {
  shared_weights *w = NULL;
  shared_blob *b = NULL;
  int rc = read_weights(m, path, &w, err);
  if (rc) return rc;
  struct { const float *data; } bound = {NULL};
  if (m->prepared && m->code) {
    if ((rc = pack(m, w, 1, &b, err))) {
      weights_unref(w);
      return rc;
    }
    if ((rc = m->code->bind(&bound, b->data, b->bytes))) {
      blob_unref(b);
      weights_unref(w);
      return ff_fail(err, FF_EINVAL, "generated %s_bind refused the packed weights (status %d)", CFG(m)->name, rc);
    }
  }
  /* the new weights replace the old; the caches computed with those go */
  if (m->rt_state.buf) ff_rt_state_free(&m->rt_state);
  memset(&m->rt_state, 0, sizeof m->rt_state);
  m->begun = m->pos = 0;
  weights_unref(m->w);
  weights_unref(m->wq);
  m->wq = NULL;
  blob_unref(m->blob);
  m->w = w;
  m->blob = b;
  m->weights.data = bound.data;
  return 0;
}

/* Every float of w checked, unless the file's memo says they are finite
 * (a start that maps its packed weights then touches none of the file). */
static int check_finite_memo(shared_weights *w, ff_error *err) {
  ff_file_memo fm;
  int memo = w->path && pack_cache_on(), rc;
  if (memo && !ff_file_memo_get(&w->st, &fm) && fm.finite == 1) return 0;
  weights_fill(w);
  if ((rc = ff_rt_check_finite(&w->rt, err))) return rc;
  __atomic_store_n(&w->finite, 1, __ATOMIC_RELAXED);
  if (memo) {
    fm.finite = 1;
    ff_file_memo_put(&w->st, &fm);
  }
  return 0;
}

int ff_model_check_finite(const ff_model *m, ff_error *err) {
  if (!m) return null_arg(err, "ff_model_check_finite", "the model");
  lock(m);
  int rc = m->w ? check_finite_memo(m->w, err) : ff_fail(err, FF_EINVAL, "no weights loaded");
  unlock(m);
  return rc;
}

int ff_model_load_weights(ff_model *m, const char *path, ff_error *err) {
  if (!m) return null_arg(err, "ff_model_load_weights", "the model");
  if (!path) return null_arg(err, "ff_model_load_weights", "the weights path");
  lock(m);
  step(m, "read weights", 0);
  int rc = load_locked(m, path, err);
  step(m, "read weights", 1);
  unlock(m);
  return rc;
}

void ff_model_set_progress(ff_model *m, ff_progress_fn fn, void *ctx) {
  if (!m) return;
  lock(m);
  m->progress = fn;
  m->progress_ctx = ctx;
  unlock(m);
}

/* ---- engines ---------------------------------------------------------------------- */

/* Gives the generated code's state the model's threads (a pool started on
 * the first need). */
static int attach_threads(ff_model *m, ff_error *err) {
  if (m->threads > 1 && !m->pool && !(m->pool = ff_pool_new(m->threads)))
    return ff_fail(err, FF_ENOMEM, "cannot start %d threads", m->threads);
  int rc = m->code->set_threads(m->state, m->threads > 1 ? ff_pool_run : NULL, m->pool, m->threads);
  return rc ? ff_fail(err, FF_EINVAL, "generated %s_set_threads refused %d threads (status %d)", CFG(m)->name,
                      m->threads, rc)
            : 0;
}

int ff_model_set_threads(ff_model *m, int threads, ff_error *err) {
  if (!m) return null_arg(err, "ff_model_set_threads", "the model");
  if (threads < 1 || threads > FF_MAX_THREADS)
    return ff_fail(err, FF_EINVAL, "threads: %d is outside 1..%d", threads, FF_MAX_THREADS);
  lock(m);
  if (threads != m->threads) {
    ff_pool_free(m->pool);
    m->pool = NULL;
    m->threads = threads;
  }
  int rc = m->prepared && m->code ? attach_threads(m, err) : 0;
  unlock(m);
  return rc;
}

static void *symbol(shared_code *k, const char *name, const char *suffix) {
  char sym[FF_NAME_MAX + 16];
  snprintf(sym, sizeof sym, "%s_%s", name, suffix);
  return ff_jit_symbol(k->jit, sym);
}

/* Compiles the program (header first, so it needs no include path) into a
 * new code part. */
static int compile(ff_model *m, enum ff_engine engine, shared_code **out, ff_error *err) {
  const ff_program *p = &m->prog->program;
  const char *name = CFG(m)->name;
  size_t hl = strlen(p->header), sl = strlen(p->source);
  shared_code *k = calloc(1, sizeof *k);
  char *text = malloc(hl + sl + 2);
  if (!k || !text) {
    free(k);
    free(text);
    return ff_fail(err, FF_ENOMEM, "out of memory");
  }
  k->refs = 1;
  k->engine = engine;
  memcpy(text, p->header, hl);
  text[hl] = '\n';
  memcpy(text + hl + 1, p->source, sl + 1);
  if (getenv("FIXFORMER_DUMP")) fputs(text, stderr); /* like tinygrad's DEBUG=4 */
  int rc;
  const char *what = engine == FF_ENGINE_TCC ? "compile with tcc" : "compile with cc";
  step(m, what, 0);
  if (engine == FF_ENGINE_TCC) {
    rc = ff_jit_tcc(text, &k->jit, err);
  } else { /* the kernels as a library of their own, built once */
    rc = ff_jit_cc(text, p->kernels, &k->jit, err);
  }
  step(m, what, 1);
  free(text);
  if (rc) {
    free(k);
    return rc;
  }
  k->bind = (bind_fn)symbol(k, name, "bind");
  k->run = (run_fn)symbol(k, name, "run");
  k->encode = (encode_fn)symbol(k, name, "encode");
  k->decode = (decode_fn)symbol(k, name, "decode");
  k->init_state = (init_state_fn)symbol(k, name, "init_state");
  k->set_threads = (set_threads_fn)symbol(k, name, "set_threads");
  *out = k;
  if (!k->bind || !k->run || !k->init_state || !k->set_threads)
    return ff_fail(err, FF_EINVAL, "generated code lacks %s_bind, _run, _init_state or _set_threads", name);
  return 0;
}

/* This model's own state for the code: weights bound, state allocated and
 * prepared, threads attached. */
static int attach_state(ff_model *m, ff_error *err) {
  const char *name = CFG(m)->name;
  size_t n = m->prog->program.state_bytes;
  int rc = m->code->bind(&m->weights, m->blob->data, m->blob->bytes);
  if (rc) return ff_fail(err, FF_EINVAL, "generated %s_bind refused the packed weights (status %d)", name, rc);
  if (posix_memalign(&m->state, 64, n ? n : 64)) {
    m->state = NULL;
    return ff_fail(err, FF_ENOMEM, "out of memory for %zu bytes of state", n);
  }
  if (m->code->init_state(m->state)) return ff_fail(err, FF_EINVAL, "generated %s_init_state failed", name);
  return attach_threads(m, err);
}

static int prepare_generated(ff_model *m, enum ff_engine engine, ff_error *err) {
  int rc = ff_host_isa_check(err); /* FIXFORMER_ISA, if set, must name one of this machine's */
  if (rc) return rc;
  const char *isa = ff_host_isa(); /* the JIT runs here: the best kernels of this machine */
  if (strcmp(m->isa, isa) || m->target[0]) { /* generated for this machine, not an emit --target */
    release_program(m);
    m->isa = isa;
    m->target[0] = 0;
  }
  if ((rc = generate_locked(m, "fixformer run", err)) || (rc = blob_locked(m, 1, err)) ||
      (rc = compile(m, engine, &m->code, err)))
    return rc;
  return attach_state(m, err);
}

/* m->wq: the weights as the weight type stores them, for the runtime engine */
static int quantize_reference(ff_model *m, ff_error *err) {
  shared_weights *q = calloc(1, sizeof *q);
  if (!q || pthread_mutex_init(&q->fill_lock, NULL)) { /* (weights_unref destroys it) */
    free(q);
    return ff_fail(err, FF_ENOMEM, "out of memory");
  }
  int rc = ff_rt_model_quantized(&m->w->rt, m->weight_type, m->compute, &q->rt, err);
  if (rc) {
    pthread_mutex_destroy(&q->fill_lock);
    free(q);
    return rc;
  }
  q->refs = 1;
  m->wq = q;
  return 0;
}

static int prepare_locked(ff_model *m, enum ff_engine engine, ff_error *err) {
  if (!m->w) return ff_fail(err, FF_EINVAL, "no weights: load them before preparing an engine");
  if (m->prepared && m->engine == engine) return 0;
  release_engine(m);
  int rc = 0;
  if (engine != FF_ENGINE_RUNTIME) {
    rc = prepare_generated(m, engine, err);
  } else {
    weights_fill(m->w);                               /* fused projections, deferred until read */
    if ((m->weight_type != FF_WEIGHT_F32 || m->compute != FF_COMPUTE_F32) && !m->wq) /* the weights as stored */
      rc = quantize_reference(m, err);
  }
  if (rc) {
    release_engine(m);
    return rc;
  }
  m->engine = engine;
  m->prepared = 1;
  return FF_OK;
}

int ff_model_prepare(ff_model *m, enum ff_engine engine, ff_error *err) {
  if (!m) return null_arg(err, "ff_model_prepare", "the model");
  if (engine != FF_ENGINE_RUNTIME && engine != FF_ENGINE_TCC && engine != FF_ENGINE_CC)
    return ff_fail(err, FF_EINVAL, "engine: %d is not one of runtime (%d), tcc (%d), cc (%d)", (int)engine,
                   FF_ENGINE_RUNTIME, FF_ENGINE_TCC, FF_ENGINE_CC);
  lock(m);
  int rc = prepare_locked(m, engine, err);
  unlock(m);
  return rc;
}

ff_model *ff_model_clone(const ff_model *m, ff_error *err) {
  if (!m) {
    null_arg(err, "ff_model_clone", "the model");
    return NULL;
  }
  ff_model *c = model_new(err);
  if (!c) return NULL;
  lock(m);
  ref(&m->desc->refs);
  c->desc = m->desc;
  if ((c->w = m->w)) ref(&c->w->refs);
  if ((c->wq = m->wq)) ref(&c->wq->refs);
  c->weight_type = m->weight_type;
  c->compute = m->compute;
  if ((c->prog = m->prog)) ref(&c->prog->refs);
  if ((c->blob = m->blob)) ref(&c->blob->refs);
  if ((c->code = m->code)) ref(&c->code->refs);
  c->isa = m->isa;
  memcpy(c->target, m->target, sizeof c->target);
  c->no_line = m->no_line;
  c->threads = m->threads;
  c->engine = m->engine;
  int rc = m->code ? attach_state(c, err) : 0;
  c->prepared = m->prepared;
  unlock(m);
  if (rc) {
    ff_model_close(c);
    return NULL;
  }
  return c;
}

/* ---- running --------------------------------------------------------------------- */

static int not_prepared(ff_error *err) {
  return ff_fail(err, FF_EINVAL, "the model has no engine: call ff_model_prepare first");
}

static int forward_locked(ff_model *m, const ff_rt_input *in, float *out, ff_error *err) {
  const ff_config *c = CFG(m);
  if (!m->prepared) return not_prepared(err);
  /* a forward ends a decoding sequence on every engine: the generated code's
   * forward uses the state's cache, and the engines must not disagree */
  m->begun = m->pos = 0;
  if (m->engine == FF_ENGINE_RUNTIME) return ff_rt_forward(RT(m), in, out, err); /* which checks the input */
  int rc = ff_rt_check_input(c, in, err); /* the runtime's checks and messages for the generated code too */
  if (rc) return rc;
  const void *src = c->vocab > 0 ? (const void *)in->src_tokens : (const void *)in->src_embeds;
  const void *tgt = c->vocab > 0 ? (const void *)in->tgt_tokens : (const void *)in->tgt_embeds;
  rc = m->code->run(&m->weights, m->state, in->batch, in->src_len, src, in->lengths, in->tgt_len, tgt, out);
  if (rc) return ff_fail(err, rc, "generated %s_run refused the input (status %d)", c->name, rc);
  return 0;
}

int ff_model_forward(ff_model *m, const ff_input *in, float *out, ff_error *err) {
  if (!m) return null_arg(err, "ff_model_forward", "the model");
  if (!in || !out) return null_arg(err, "ff_model_forward", in ? "out" : "in");
  lock(m);
  int rc = forward_locked(m, in, out, err);
  unlock(m);
  return rc;
}

/* ---- step by step ---------------------------------------------------------------- */

static int begin_locked(ff_model *m, const void *src, int S, ff_error *err) {
  const ff_config *c = CFG(m);
  int rc, encdec = c->arch == FF_ARCH_ENCODER_DECODER;
  if (!m->prepared) return not_prepared(err);
  if (c->arch == FF_ARCH_ENCODER) return ff_fail(err, FF_EINVAL, "an encoder has no decoder to decode with");
  m->begun = 0;
  m->pos = 0;
  if (encdec && !src) return ff_fail(err, FF_EINVAL, "begin: the encoder-decoder model needs a source (src is NULL)");
  if (encdec && (S < 1 || S > c->max_seq))
    return ff_fail(err, FF_ELENGTH, "source length %d is outside 1..max_seq (%d)", S, c->max_seq);
  if (m->engine == FF_ENGINE_RUNTIME) { /* ff_rt_begin checks the ids */
    if (!m->rt_state.buf && (rc = ff_rt_state_init(&m->rt_state, RT(m), err))) return rc;
    if (encdec) {
      const int32_t *ids = c->vocab > 0 ? src : NULL;
      const float *x = c->vocab > 0 ? NULL : src;
      if ((rc = ff_rt_begin(&m->rt_state, ids, x, S, S, err))) return rc;
    }
  } else if (encdec) { /* a bad id gets the runtime's message, not the generated code's status */
    if (c->vocab > 0 && (rc = ff_rt_check_tokens(c, "source", src, 1, S, 0, err))) return rc;
    if (!m->code->encode) return ff_fail(err, FF_EINVAL, "generated code lacks %s_encode", c->name);
    if ((rc = m->code->encode(&m->weights, m->state, src, S, S)))
      return ff_fail(err, rc, "generated %s_encode refused the source (status %d)", c->name, rc);
  }
  m->begun = 1;
  return 0;
}

int ff_model_begin(ff_model *m, const void *src, int S, ff_error *err) {
  if (!m) return null_arg(err, "ff_model_begin", "the model");
  lock(m);
  int rc = begin_locked(m, src, S, err);
  unlock(m);
  return rc;
}

static int step_locked(ff_model *m, const void *in, int T, float *out, ff_error *err) {
  const ff_config *c = CFG(m);
  int rc;
  if (!m->begun) return ff_fail(err, FF_EINVAL, "step: call ff_model_begin first");
  if (T < 1 || T > c->max_seq - m->pos) /* (pos <= max_seq: no overflow) */
    return ff_fail(err, FF_ELENGTH, "cannot decode %d positions from position %d: max_seq is %d", T, m->pos,
                   c->max_seq);
  if (m->engine == FF_ENGINE_RUNTIME) { /* ff_rt_step checks the ids */
    m->rt_state.pos = m->pos;
    rc = ff_rt_step(&m->rt_state, c->vocab > 0 ? in : NULL, c->vocab > 0 ? NULL : in, T, out, err);
  } else if (!(rc = c->vocab > 0 ? ff_rt_check_tokens(c, "input", in, 1, T, m->pos, err) : 0)) {
    /* (a bad id gets the runtime's message, not the generated code's status) */
    if (!m->code->decode)
      rc = ff_fail(err, FF_EINVAL, "generated code lacks %s_decode", c->name);
    else if ((rc = m->code->decode(&m->weights, m->state, in, T, m->pos, out)))
      rc = ff_fail(err, rc, "generated %s_decode refused the input (status %d)", c->name, rc);
  }
  if (!rc) m->pos += T;
  return rc;
}

int ff_model_step(ff_model *m, const void *in, int T, float *out, ff_error *err) {
  if (!m) return null_arg(err, "ff_model_step", "the model");
  if (!in || !out) return null_arg(err, "ff_model_step", in ? "out" : "in");
  lock(m);
  int rc = step_locked(m, in, T, out, err);
  unlock(m);
  return rc;
}

int ff_model_position(const ff_model *m) {
  if (!m) return FF_EINVAL;
  lock(m);
  int pos = m->pos;
  unlock(m);
  return pos;
}

/* The id a scan `if (row[v] > row[best]) best = v` from best = 0 picks: the
 * first of equal maxima, as torch.argmax, with NaN never taken past id 0.
 * The maximum over 8 interleaved lanes first (no chain of compares through
 * one index, so it vectorises), then the first id holding it. */
static int32_t argmax(const float *row, int V) {
  float m[8];
  int v = 0;
  if (row[0] != row[0]) return 0; /* NaN at 0: nothing is greater */
  for (int l = 0; l < 8; l++) m[l] = row[0];
  for (; v + 8 <= V; v += 8)
    for (int l = 0; l < 8; l++) m[l] = row[v + l] > m[l] ? row[v + l] : m[l];
  for (; v < V; v++) m[0] = row[v] > m[0] ? row[v] : m[0];
  for (int l = 1; l < 8; l++) m[0] = m[l] > m[0] ? m[l] : m[0];
  for (v = 0; row[v] != m[0]; v++) {
  }
  return v;
}

ff_sampling ff_sampling_default(void) { return (ff_sampling){0, 0, 1, 0, 1, 0, 0}; }

/* NULL: greedy; else FF_EINVAL naming the first value outside its range. */
static int check_sampling(const ff_sampling *s, ff_error *err) {
  if (!s) return 0;
  if (!(s->temperature >= 0) || s->temperature == INFINITY)
    return ff_fail(err, FF_EINVAL, "temperature %g: must be 0 (greedy) or a finite positive number", s->temperature);
  if (s->top_k < 0) return ff_fail(err, FF_EINVAL, "top_k %d: must be 0 (off) or positive", s->top_k);
  if (!(s->top_p > 0 && s->top_p <= 1)) return ff_fail(err, FF_EINVAL, "top_p %g: must be in (0, 1]", s->top_p);
  if (!(s->min_p >= 0 && s->min_p < 1)) return ff_fail(err, FF_EINVAL, "min_p %g: must be in [0, 1)", s->min_p);
  if (!(s->repeat_penalty > 0) || s->repeat_penalty == INFINITY)
    return ff_fail(err, FF_EINVAL, "repeat_penalty %g: must be a finite positive number", s->repeat_penalty);
  return 0;
}

/* The model and g fit decoding (greedy, sampled or beam search: how) */
static int check_decoding(const ff_model *m, const ff_greedy *g, const char *how, ff_error *err) {
  const ff_config *c = CFG(m);
  int P = g->prompt_len;
  if (c->vocab <= 0) return ff_fail(err, FF_EINVAL, "%s needs a model with a vocab", how);
  if (!ff_config_has_head(c))
    return ff_fail(err, FF_EINVAL, "%s needs an output head; %s has lm_head = false", how, c->name);
  if (!g->prompt) return null_arg(err, "ff_model_greedy", "the prompt");
  if (P < 1) return ff_fail(err, FF_ELENGTH, "%s needs a prompt of at least one id", how);
  if (g->max_new < 1 || P > c->max_seq || g->max_new > c->max_seq - P) /* (no overflow) */
    return ff_fail(err, FF_ELENGTH, "%d prompt ids and %d new ones do not fit in max_seq = %d positions", P,
                   g->max_new, c->max_seq);
  return 0;
}

static int greedy_locked(ff_model *m, const ff_greedy *g, const ff_sampling *s, int32_t *out, int *n_out,
                         float *logits, ff_error *err) {
  const ff_config *c = CFG(m);
  int V = c->vocab, P = g->prompt_len, rc;
  size_t cells;
  if ((rc = check_decoding(m, g, "greedy decoding", err)) || (rc = check_sampling(s, err))) return rc;
  if (s && s->temperature == 0 && s->repeat_penalty == 1) s = NULL; /* greedy: the same code */
  if (ff_size_mul((size_t)P, (size_t)V, &cells) || ff_size_mul(cells, sizeof(float), &cells))
    return ff_fail(err, FF_ENOMEM, "logits of %d positions do not fit in memory", P);
  float *own = logits ? NULL : malloc(cells);
  void *scratch = s ? malloc((size_t)V * (sizeof(float) + sizeof(int32_t))) : NULL; /* the sampler's */
  if ((!logits && !own) || (s && !scratch)) {
    free(own);
    free(scratch);
    return ff_fail(err, FF_ENOMEM, "out of memory");
  }
  ff_sample_opts o = {0};
  if (s) o = (ff_sample_opts){s->temperature, s->top_p, s->min_p, s->repeat_penalty, s->top_k, s->seed, s->sequence};
  float *row = logits ? logits : own;
  if (!(rc = begin_locked(m, g->src, g->src_len, err)) && !(rc = step_locked(m, g->prompt, P, row, err))) {
    row += (size_t)(P - 1) * V; /* the logits of the last position */
    for (;;) {
      int32_t next = s ? ff_sample_next(row, V, g->prompt, P, out, *n_out, &o, (uint64_t)(P + *n_out),
                                        (float *)scratch, (int32_t *)((float *)scratch + V))
                       : argmax(row, V);
      out[(*n_out)++] = next;
      if (next == g->eos || *n_out == g->max_new) break;
      if (logits) row += V;
      if ((rc = step_locked(m, &next, 1, row, err))) break;
    }
  }
  free(own);
  free(scratch);
  return rc;
}

/* ---- beam search: a decode state per beam (host/beam.c) ----------------------------- */

struct ff_slots {
  ff_model *m;
  int n;
  void **state;      /* the generated code's: [n], state[0] the model's */
  ff_rt_state **rt;  /* the runtime's: [n], rt[0] the model's */
};

void ff_slots_close(ff_slots *s) {
  if (!s) return;
  for (int i = 1; i < s->n; i++) {
    if (s->state) free(s->state[i]);
    if (s->rt && s->rt[i]) ff_rt_state_free(s->rt[i]), free(s->rt[i]);
  }
  free(s->state);
  free(s->rt);
  s->m->begun = s->m->pos = 0; /* state 0 holds some beam: a new begin is needed */
  free(s);
}

/* From state 0 into state i: the source's cross-attention rows and length,
 * then the prompt's key/value rows (positions 0..P-1) */
static int slot_fill(ff_slots *s, int i, int P, ff_error *err) {
  ff_model *m = s->m;
  const ff_config *c = CFG(m);
  if (m->engine == FF_ENGINE_RUNTIME) {
    ff_rt_state *a = s->rt[0], *b = s->rt[i] = calloc(1, sizeof *b);
    int rc = b ? ff_rt_state_init(b, RT(m), err) : ff_fail(err, FF_ENOMEM, "out of memory");
    if (rc) return rc;
    size_t row = 2 * (size_t)ff_rt_kv_width(c), layer = (size_t)c->max_seq * row;
    for (int l = 0; a->cross_kv && l < c->decoder_layers; l++)
      memcpy(b->cross_kv + l * layer, a->cross_kv + l * layer, sizeof(float) * (size_t)a->mem_len * row);
    b->mem_len = a->mem_len;
  } else {
    const ff_program *p = &m->prog->program;
    if (posix_memalign(&s->state[i], 64, p->state_bytes)) {
      s->state[i] = NULL;
      return ff_fail(err, FF_ENOMEM, "out of memory for %zu bytes of state", p->state_bytes);
    }
    float *a = s->state[0], *b = s->state[i];
    if (m->code->init_state(b) || m->code->set_threads(b, m->threads > 1 ? ff_pool_run : NULL, m->pool, m->threads))
      return ff_fail(err, FF_EINVAL, "generated %s_init_state failed", c->name);
    int S = 0;
    if (p->source_at >= 0) memcpy(&S, a + p->source_at, sizeof S), memcpy(b + p->source_at, &S, sizeof S);
    for (int l = 0; p->kv_cross && l < p->n_kv; l++)
      memcpy(b + p->kv_cross[l], a + p->kv_cross[l], sizeof(float) * (size_t)S * p->kv_row);
    memcpy(b + p->decoded_at, a + p->decoded_at, sizeof(int32_t));
  }
  ff_slots_copy(s, 0, i, 0, P);
  return 0;
}

int ff_slots_open(ff_model *m, const ff_greedy *g, int n, float *row, ff_slots **out, ff_error *err) {
  const ff_config *c = CFG(m);
  int P = g->prompt_len, V = c->vocab, rc, rt = m->engine == FF_ENGINE_RUNTIME;
  ff_slots *s = calloc(1, sizeof *s);
  float *rows = malloc(sizeof *rows * (size_t)P * V);
  if (s) s->m = m, s->n = 1, s->state = rt ? NULL : calloc((size_t)n, sizeof *s->state);
  if (s && rt) s->rt = calloc((size_t)n, sizeof *s->rt);
  if (!s || !rows || (!s->state && !s->rt)) {
    free(rows);
    if (s) ff_slots_close(s);
    return ff_fail(err, FF_ENOMEM, "out of memory");
  }
  if (!(rc = begin_locked(m, g->src, g->src_len, err)) && !(rc = step_locked(m, g->prompt, P, rows, err))) {
    memcpy(row, rows + (size_t)(P - 1) * V, sizeof *row * (size_t)V);
    if (rt) s->rt[0] = &m->rt_state;
    else s->state[0] = m->state;
    if (!rt && (!m->prog->program.n_kv || m->prog->program.decoded_at < 0))
      rc = ff_fail(err, FF_EINVAL, "the generated program does not say where its caches are");
    for (; !rc && s->n < n; s->n++) rc = slot_fill(s, s->n, P, err);
  }
  free(rows);
  if (rc) {
    ff_slots_close(s);
    return rc;
  }
  *out = s;
  return 0;
}

int ff_slots_step(ff_slots *s, int slot, int32_t id, int pos, float *row, ff_error *err) {
  ff_model *m = s->m;
  if (m->engine == FF_ENGINE_RUNTIME) {
    s->rt[slot]->pos = pos;
    return ff_rt_step(s->rt[slot], &id, NULL, 1, row, err);
  }
  int rc = m->code->decode(&m->weights, s->state[slot], &id, 1, pos, row);
  return rc ? ff_fail(err, rc, "generated %s_decode refused the input (status %d)", CFG(m)->name, rc) : 0;
}

void ff_slots_copy(ff_slots *s, int from, int to, int pos0, int pos1) {
  ff_model *m = s->m;
  const ff_config *c = CFG(m);
  if (pos1 <= pos0) return;
  if (m->engine == FF_ENGINE_RUNTIME) {
    size_t row = 2 * (size_t)ff_rt_kv_width(c), layer = (size_t)c->max_seq * row;
    for (int l = 0; l < c->decoder_layers; l++)
      memcpy(s->rt[to]->self_kv + l * layer + pos0 * row, s->rt[from]->self_kv + l * layer + pos0 * row,
             sizeof(float) * (size_t)(pos1 - pos0) * row);
    s->rt[to]->filled = s->rt[from]->filled;
    return;
  }
  const ff_program *p = &m->prog->program;
  for (int l = 0; l < p->n_kv; l++)
    memcpy((float *)s->state[to] + p->kv_self[l] + pos0 * p->kv_row,
           (const float *)s->state[from] + p->kv_self[l] + pos0 * p->kv_row,
           sizeof(float) * (size_t)(pos1 - pos0) * p->kv_row);
}

int ff_model_greedy(ff_model *m, const ff_greedy *g, int32_t *out, int *n_out, float *logits, ff_error *err) {
  return ff_model_sample(m, g, NULL, out, n_out, logits, err);
}

int ff_model_sample(ff_model *m, const ff_greedy *g, const ff_sampling *s, int32_t *out, int *n_out, float *logits,
                    ff_error *err) {
  if (n_out) *n_out = 0;
  if (!m) return null_arg(err, "ff_model_greedy", "the model");
  if (!g || !out || !n_out) return null_arg(err, "ff_model_greedy", !g ? "g" : !out ? "out" : "n_out");
  lock(m);
  int rc = greedy_locked(m, g, s, out, n_out, logits, err);
  unlock(m);
  return rc;
}

void ff_model_close(ff_model *m) {
  if (!m) return;
  release_program(m);
  ff_pool_free(m->pool);
  weights_unref(m->w);
  weights_unref(m->wq);
  desc_unref(m->desc);
  pthread_mutex_destroy(&m->lock);
  free(m);
}

/* ---- training code ----------------------------------------------------------------- */

int ff_model_train_code_isa(ff_model *m, const ff_train_shape *shape, const char *command, const char *isa,
                            ff_train_code *out, ff_error *err) {
  memset(out, 0, sizeof *out);
  if (!m || !shape) return null_arg(err, "ff_model_train_code", m ? "shape" : "the model");
  const ff_config *c = CFG(m);
  const int encdec = c->arch == FF_ARCH_ENCODER_DECODER;
  if (!ff_config_has_head(c))
    return ff_fail(err, FF_EINVAL, "cannot train %s: the model has no output head (training needs vocab and lm_head)",
                   c->name);
  if (shape->batch < 1 || shape->src < 1 || shape->src > c->max_seq ||
      (encdec && (shape->tgt < 1 || shape->tgt > c->max_seq)))
    return ff_fail(err, FF_EINVAL, "training shapes: batch %d, %d source and %d target positions: the batch and "
                   "the positions must be >= 1, the positions at most max_seq %d", shape->batch, shape->src,
                   encdec ? shape->tgt : shape->src, c->max_seq);
  lock(m);
  shared_desc *d = m->desc;
  ff_gen_options o = {d->path, command ? command : "fixformer", isa ? isa : m->isa, "f32", "f32", NULL, m->no_line};
  pthread_mutex_lock(&d->lock);
  step(m, "generate training C", 0);
  int rc = ff_generate_train(d->lua, &d->cfg, &o, shape, out, err);
  step(m, "generate training C", 1);
  pthread_mutex_unlock(&d->lock);
  unlock(m);
  return rc;
}

int ff_model_train_code(ff_model *m, const ff_train_shape *shape, const char *command, ff_train_code *out,
                        ff_error *err) {
  return ff_model_train_code_isa(m, shape, command, NULL, out, err);
}

static const char *const engine_names[] = {"runtime", "tcc", "cc"};

const char *ff_version(void) { return FF_VERSION; }

#define FF_ISA_ROW(name, mr, nr, flags, cpu, targets, ...) {#name, mr, nr, flags, 0, cpu, targets},
static ff_isa isa_table[] = {FF_ISAS(FF_ISA_ROW)}; /* kernels/isas.h */
#undef FF_ISA_ROW

static void mark_runs_here(void) {
  for (const char *const *isa = ff_host_isas(); *isa; isa++)
    for (size_t i = 0; i < sizeof isa_table / sizeof *isa_table; i++)
      if (!strcmp(isa_table[i].name, *isa)) isa_table[i].runs_here = 1;
}

const ff_isa *ff_isa_at(int i) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  if (i < 0 || (size_t)i >= sizeof isa_table / sizeof *isa_table) return NULL;
  pthread_once(&once, mark_runs_here);
  return &isa_table[i];
}

const char *ff_engine_name(enum ff_engine e) {
  return (unsigned)e < sizeof engine_names / sizeof *engine_names ? engine_names[e] : "?";
}

/* Whether the C compiler the cc engine runs ($CC's first word, else cc) is
 * an executable file: by its path, or found on PATH. */
static int have_cc(void) {
  const char *cc = getenv("CC");
  char word[256], path[4096];
  if (!cc || !*cc) cc = "cc";
  size_t n = strcspn(cc, " \t");
  if (n == 0 || n >= sizeof word) return 0;
  memcpy(word, cc, n);
  word[n] = 0;
  if (strchr(word, '/')) return access(word, X_OK) == 0;
  const char *p = getenv("PATH");
  for (p = p ? p : "/usr/bin:/bin"; *p; p += *p == ':') {
    size_t k = strcspn(p, ":");
    if (k + n + 2 <= sizeof path) {
      snprintf(path, sizeof path, "%.*s/%s", (int)k, k ? p : ".", word);
      if (access(path, X_OK) == 0) return 1;
    }
    p += k;
  }
  return 0;
}

enum ff_engine ff_engine_default(void) {
  const char *e = getenv("FIXFORMER_ENGINE");
  int named = ff_engine_parse(e);
  if (named >= 0) return (enum ff_engine)named;
  return have_cc() ? FF_ENGINE_CC : FF_ENGINE_TCC;
}

int ff_engine_parse(const char *name) {
  for (int i = 0; name && i < (int)(sizeof engine_names / sizeof *engine_names); i++)
    if (!strcmp(name, engine_names[i])) return i;
  return -1;
}

int ff_model_train_block(const ff_model *m, ff_train_key_fn fn, void *ctx, ff_error *err) {
  if (!m || !fn) return null_arg(err, "ff_model_train_block", m ? "fn" : "m");
  pthread_mutex_lock(&m->desc->lock); /* the description's Lua state, shared by clones */
  int rc = ff_lua_train_block(m->desc->lua, fn, ctx, err);
  pthread_mutex_unlock(&m->desc->lock);
  return rc;
}

int ff_model_beam(ff_model *m, const ff_greedy *g, const ff_beam_opts *b, int32_t *out, int *n_out, double *score,
                  ff_error *err) {
  if (n_out) *n_out = 0;
  if (score) *score = NAN;
  if (!m) return null_arg(err, "ff_model_beam", "the model");
  if (!g || !b || !out || !n_out) return null_arg(err, "ff_model_beam", !g ? "g" : !b ? "b" : !out ? "out" : "n_out");
  int rc = ff_beam_check(CFG(m), b, err);
  if (rc) return rc;
  if (b->beams == 1) return ff_model_greedy(m, g, out, n_out, NULL, err);
  lock(m);
  rc = check_decoding(m, g, "beam search", err);
  if (!rc && !m->prepared) rc = not_prepared(err);
  if (!rc) rc = ff_beam_locked(m, g, b, out, n_out, score, err);
  unlock(m);
  return rc;
}
