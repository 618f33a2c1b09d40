/* api.c - the public API of fixformer.h over the host and the runtime. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen.h"
#include "fixformer.h"
#include "host.h"

/* NAME_run of the generated code: the uniform entry point (templates/model.h) */
typedef int (*run_fn)(const void *weights, void *state, int batch, int src_len, const void *src,
                      const int32_t *lengths, int tgt_len, const void *tgt, float *out);
typedef int (*bind_fn)(void *weights, const void *blob, size_t bytes);
/* NAME_encode and NAME_decode: step-by-step decoding (templates/model.h) */
typedef int (*encode_fn)(const void *weights, void *state, const void *src, int S, int src_len);
typedef int (*decode_fn)(const void *weights, void *state, const void *in, int T, int pos0, float *out);
/* NAME_init_state, NAME_set_threads: the state's fields and parallel-for */
typedef int (*init_state_fn)(void *state);
typedef int (*set_threads_fn)(void *state, void (*fn)(void *, int, void (*)(void *, int), void *), void *pool,
                              int threads);

struct ff_model {
  ff_lua *lua;          /* the generator's Lua state, holding the config table */
  char *path;           /* the description as given */
  ff_config cfg;
  ff_rt_model rt;       /* bound weights (the runtime's view) */
  int has_weights;
  enum ff_engine engine;
  int prepared;
  /* tcc / cc engines */
  ff_program program;
  ff_jit *jit;
  void *blob;           /* packed weights */
  void *state;          /* program.state_bytes, 64-byte aligned */
  struct { const float *data; } weights; /* NAME_weights */
  run_fn run;
  encode_fn encode;     /* encoder-decoder only */
  decode_fn decode;     /* decoder-only and encoder-decoder */
  /* step by step */
  ff_rt_state rt_state; /* the runtime's caches, allocated on the first begin */
  int pos;              /* the next position a step decodes */
  int begun;            /* a source is encoded / a sequence started */
  const char *isa;      /* the matrix kernels of the generated code */
  int threads;          /* for the generated code: 1, or a pool of this many */
  ff_pool *pool;
};

static void release_engine(ff_model *m);
static void release_program(ff_model *m);

ff_model *ff_model_open(const char *path, ff_error *err) {
  ff_model *m = calloc(1, sizeof *m);
  if (!m) {
    ff_fail(err, FF_ENOMEM, "out of memory");
    return NULL;
  }
  size_t n = strlen(path) + 1;
  if ((m->path = malloc(n))) memcpy(m->path, path, n);
  if (!m->path) {
    ff_fail(err, FF_ENOMEM, "out of memory");
    ff_model_close(m);
    return NULL;
  }
  m->isa = "generic";
  m->threads = 1;
  if (!(m->lua = ff_lua_open(err)) || ff_lua_load_config(m->lua, path, &m->cfg, err) ||
      ff_rt_check_config(&m->cfg, err)) {
    ff_model_close(m);
    return NULL;
  }
  return m;
}

const ff_config *ff_model_config(const ff_model *m) { return &m->cfg; }

int ff_model_set_isa(ff_model *m, const char *isa, ff_error *err) {
  static const char *const known[] = {"generic", "avx2", "avx512", "neon", NULL};
  if (!strcmp(isa, "native")) isa = ff_host_isa();
  for (int i = 0; known[i]; i++)
    if (!strcmp(known[i], isa)) {
      if (strcmp(m->isa, known[i])) release_program(m); /* the program and the packed weights depend on it */
      m->isa = known[i];
      return 0;
    }
  return ff_fail(err, FF_EINVAL, "isa: '%s' is not one of generic, avx2, avx512, neon, native", isa);
}

int ff_model_load_weights(ff_model *m, const char *path, ff_error *err) {
  ff_tensor_file file;
  int rc = ff_safetensors_read(path, &file, err);
  if (rc) return rc;
  if (m->has_weights) ff_rt_model_free(&m->rt);
  release_program(m);
  m->has_weights = 0;
  if ((rc = ff_rt_model_bind(&m->rt, &m->cfg, &file, err))) {
    if (err) {
      char msg[FF_ERROR_MAX];
      memcpy(msg, err->msg, sizeof msg);
      ff_fail(err, rc, "%s: %s", path, msg);
    }
    return rc;
  }
  m->has_weights = 1;
  return FF_OK;
}

/* What an engine made: compiled code, its state, the runtime's caches. */
static void release_engine(ff_model *m) {
  if (m->rt_state.buf) ff_rt_state_free(&m->rt_state);
  m->begun = m->pos = 0;
  m->encode = NULL;
  m->decode = NULL;
  ff_jit_free(m->jit);
  free(m->state);
  m->jit = NULL;
  m->state = NULL;
  m->run = NULL;
  m->prepared = 0;
}

/* ... and what the engines share: the generated program and the weights
 * packed in its layout (both depend on the ISA, the blob on the weights). */
static void release_program(ff_model *m) {
  release_engine(m);
  free(m->blob);
  m->blob = NULL;
  ff_program_free(&m->program);
}

int ff_model_generate(ff_model *m, const char *command, const char **header, const char **source, ff_error *err) {
  if (!m->program.source) {
    ff_gen_options o = {m->path, command, m->isa};
    int rc = ff_generate(m->lua, &m->cfg, &o, &m->program, err);
    if (rc) return rc;
  }
  if (header) *header = m->program.header;
  if (source) *source = m->program.source;
  return 0;
}

int ff_model_weight_blob(ff_model *m, const void **blob, size_t *bytes, ff_error *err) {
  int rc;
  if (!m->has_weights) return ff_fail(err, FF_EINVAL, "no weights: load them before packing");
  if ((rc = ff_model_generate(m, "fixformer", NULL, NULL, err))) return rc;
  if (!m->blob) {
    size_t n;
    if ((rc = ff_pack_weights(&m->program, &m->rt.file, &m->blob, &n, err))) return rc;
  }
  *blob = m->blob;
  *bytes = FF_BLOB_HEADER + m->program.weight_floats * sizeof(float);
  return 0;
}

int ff_model_driver_source(ff_model *m, int embed, char **text, ff_error *err) {
  ff_vocab vocab;
  int rc = ff_model_generate(m, "fixformer", NULL, NULL, err);
  if (rc || (m->cfg.vocabulary[0] && (rc = ff_vocab_load(m->cfg.vocabulary, m->cfg.vocab, &vocab, err)))) return rc;
  ff_extra x = {"main", embed, NULL, NULL, NULL, m->cfg.vocabulary[0] ? &vocab : NULL};
  rc = ff_render_extra(m->lua, &x, text, err);
  if (m->cfg.vocabulary[0]) ff_vocab_free(&vocab);
  return rc;
}

int ff_model_weights_source(ff_model *m, const char *weights_path, char **text, ff_error *err) {
  const void *blob;
  size_t bytes;
  int rc = ff_model_weight_blob(m, &blob, &bytes, err);
  if (rc) return rc;
  const float *x = (const float *)(const void *)((const char *)blob + FF_BLOB_HEADER);
  size_t n = m->program.weight_floats, cap;
  if (ff_size_mul(n + 1, 24, &cap)) return ff_fail(err, FF_ENOMEM, "weights too large to embed");
  char *data = malloc(cap + 64), *p = data;
  if (!data) return ff_fail(err, FF_ENOMEM, "out of memory for the embedded weights");
  for (size_t i = 0; i < n; i++) { /* %.9g round-trips a float32 */
    if (x[i] != x[i] || x[i] - x[i] != 0) {
      free(data);
      return ff_fail(err, FF_EINVAL, "%s: a weight is not finite; --embed cannot write it", weights_path);
    }
    char num[32];
    snprintf(num, sizeof num, "%.9g", (double)x[i]);
    p += sprintf(p, "%s%s%s%s", i % 8 ? " " : i ? "\n  " : "  ", num, strpbrk(num, ".e") ? "" : ".0",
                 i + 1 < n ? "f," : "f");
  }
  if (!n) p += sprintf(p, "  0.0f");
  *p = 0;
  char hex[65];
  ff_sha256_hex(x, n * sizeof *x, hex);
  ff_extra xw = {"weights", 1, data, weights_path, hex, NULL};
  rc = ff_render_extra(m->lua, &xw, text, err);
  free(data);
  return rc;
}

/* Gives the generated code's state the model's threads (a pool started on
 * the first need). */
static int attach_threads(ff_model *m, ff_error *err) {
  char sym[FF_NAME_MAX + 16];
  snprintf(sym, sizeof sym, "%s_set_threads", m->cfg.name);
  set_threads_fn set = (set_threads_fn)ff_jit_symbol(m->jit, sym);
  if (!set) return ff_fail(err, FF_EINVAL, "generated code lacks %s", sym);
  if (m->threads > 1 && !m->pool && !(m->pool = ff_pool_new(m->threads)))
    return ff_fail(err, FF_ENOMEM, "cannot start %d threads", m->threads);
  int rc = set(m->state, m->threads > 1 ? ff_pool_run : NULL, m->pool, m->threads);
  return rc ? ff_fail(err, FF_EINVAL, "generated %s refused %d threads (status %d)", sym, m->threads, rc) : 0;
}

int ff_model_set_threads(ff_model *m, int threads, ff_error *err) {
  if (threads < 1 || threads > FF_MAX_THREADS)
    return ff_fail(err, FF_EINVAL, "threads: %d is outside 1..%d", threads, FF_MAX_THREADS);
  if (threads != m->threads) {
    ff_pool_free(m->pool);
    m->pool = NULL;
    m->threads = threads;
  }
  return m->prepared && m->engine != FF_ENGINE_RUNTIME ? attach_threads(m, err) : 0;
}

/* Compiles the generated code (header first, so it needs no include path),
 * binds the packed weights and allocates the state. */
static int prepare_generated(ff_model *m, enum ff_engine engine, ff_error *err) {
  const char *header, *source;
  const void *blob;
  size_t bytes;
  int rc;
  const char *isa = ff_host_isa(); /* the JIT runs here: the best kernels of this machine */
  if (strcmp(m->isa, isa)) {
    release_program(m);
    m->isa = isa;
  }
  if ((rc = ff_model_generate(m, "fixformer run", &header, &source, err))) return rc;
  size_t hl = strlen(header), sl = strlen(source);
  char *text = malloc(hl + sl + 2);
  if (!text) return ff_fail(err, FF_ENOMEM, "out of memory");
  memcpy(text, header, hl);
  text[hl] = '\n';
  memcpy(text + hl + 1, source, sl + 1);
  if (getenv("FIXFORMER_DUMP")) fputs(text, stderr); /* like tinygrad's DEBUG=4 */
  if (engine == FF_ENGINE_TCC) {
    rc = ff_jit_tcc(text, &m->jit, err);
  } else { /* the kernels as a library of their own, built once */
    rc = ff_jit_cc(text, m->program.kernels, &m->jit, err);
  }
  free(text);
  if (rc) return rc;
  char sym[FF_NAME_MAX + 16];
  snprintf(sym, sizeof sym, "%s_bind", m->cfg.name);
  bind_fn bind = (bind_fn)ff_jit_symbol(m->jit, sym);
  snprintf(sym, sizeof sym, "%s_run", m->cfg.name);
  m->run = (run_fn)ff_jit_symbol(m->jit, sym);
  if (!bind || !m->run) return ff_fail(err, FF_EINVAL, "generated code lacks %s_bind or %s_run", m->cfg.name, m->cfg.name);
  snprintf(sym, sizeof sym, "%s_encode", m->cfg.name);
  m->encode = (encode_fn)ff_jit_symbol(m->jit, sym);
  snprintf(sym, sizeof sym, "%s_decode", m->cfg.name);
  m->decode = (decode_fn)ff_jit_symbol(m->jit, sym);
  if ((rc = ff_model_weight_blob(m, &blob, &bytes, err))) return rc;
  if ((rc = bind(&m->weights, blob, bytes)))
    return ff_fail(err, FF_EINVAL, "generated %s_bind refused the packed weights (status %d)", m->cfg.name, rc);
  if (posix_memalign(&m->state, 64, m->program.state_bytes ? m->program.state_bytes : 64))
    return ff_fail(err, FF_ENOMEM, "out of memory for %zu bytes of state", m->program.state_bytes);
  snprintf(sym, sizeof sym, "%s_init_state", m->cfg.name);
  init_state_fn init = (init_state_fn)ff_jit_symbol(m->jit, sym);
  if (!init || init(m->state)) return ff_fail(err, FF_EINVAL, "generated %s failed", sym);
  return attach_threads(m, err);
}

int ff_model_prepare(ff_model *m, enum ff_engine engine, ff_error *err) {
  if (!m->has_weights) return ff_fail(err, FF_EINVAL, "no weights: load them before preparing an engine");
  if (m->prepared && m->engine == engine) return 0;
  release_engine(m);
  if (engine != FF_ENGINE_RUNTIME) {
    int rc = prepare_generated(m, engine, err);
    if (rc) {
      release_engine(m);
      return rc;
    }
  }
  m->engine = engine;
  m->prepared = 1;
  return FF_OK;
}

int ff_model_forward(ff_model *m, const ff_rt_input *in, float *out, ff_error *err) {
  if (!m->prepared) return ff_fail(err, FF_EINVAL, "the model has no engine: call ff_model_prepare first");
  if (m->engine == FF_ENGINE_RUNTIME) return ff_rt_forward(&m->rt, in, out, err); /* which checks the input */
  int rc = ff_rt_check_input(&m->cfg, in, err); /* the runtime's checks and messages for the generated code too */
  if (rc) return rc;
  const void *src = m->cfg.vocab > 0 ? (const void *)in->src_tokens : (const void *)in->src_embeds;
  const void *tgt = m->cfg.vocab > 0 ? (const void *)in->tgt_tokens : (const void *)in->tgt_embeds;
  rc = m->run(&m->weights, m->state, in->batch, in->src_len, src, in->lengths, in->tgt_len, tgt, out);
  if (rc) return ff_fail(err, rc, "generated %s_run refused the input (status %d)", m->cfg.name, rc);
  return 0;
}

/* ---- step by step ---------------------------------------------------------- */

int ff_model_begin(ff_model *m, const void *src, int S, ff_error *err) {
  const ff_config *c = &m->cfg;
  int rc, encdec = c->arch == FF_ARCH_ENCODER_DECODER;
  if (!m->prepared) return ff_fail(err, FF_EINVAL, "the model has no engine: call ff_model_prepare first");
  if (c->arch == FF_ARCH_ENCODER) return ff_fail(err, FF_EINVAL, "an encoder has no decoder to decode with");
  m->begun = 0;
  m->pos = 0;
  if (encdec) {
    if (!src || S < 1 || S > c->max_seq)
      return ff_fail(err, FF_ELENGTH, "source length %d is outside 1..max_seq (%d)", src ? S : 0, c->max_seq);
  }
  if (m->engine == FF_ENGINE_RUNTIME) { /* ff_rt_begin checks the ids */
    if (!m->rt_state.buf && (rc = ff_rt_state_init(&m->rt_state, &m->rt, err))) return rc;
    if (encdec) {
      const int32_t *ids = c->vocab > 0 ? src : NULL;
      const float *x = c->vocab > 0 ? NULL : src;
      if ((rc = ff_rt_begin(&m->rt_state, ids, x, S, S, err))) return rc;
    }
  } else if (encdec) { /* a bad id gets the runtime's message, not the generated code's status */
    if (c->vocab > 0 && (rc = ff_rt_check_tokens(c, "source", src, 1, S, 0, err))) return rc;
    if (!m->encode) return ff_fail(err, FF_EINVAL, "generated code lacks %s_encode", c->name);
    if ((rc = m->encode(&m->weights, m->state, src, S, S)))
      return ff_fail(err, rc, "generated %s_encode refused the source (status %d)", c->name, rc);
  }
  m->begun = 1;
  return 0;
}

int ff_model_step(ff_model *m, const void *in, int T, float *out, ff_error *err) {
  const ff_config *c = &m->cfg;
  int rc;
  if (!m->begun) return ff_fail(err, FF_EINVAL, "step: call ff_model_begin first");
  if (T < 1 || m->pos + T > c->max_seq)
    return ff_fail(err, FF_ELENGTH, "cannot decode positions %d..%d: max_seq is %d", m->pos, m->pos + T - 1,
                   c->max_seq);
  if (m->engine == FF_ENGINE_RUNTIME) { /* ff_rt_step checks the ids */
    m->rt_state.pos = m->pos;
    rc = ff_rt_step(&m->rt_state, c->vocab > 0 ? in : NULL, c->vocab > 0 ? NULL : in, T, out, err);
  } else if (!(rc = c->vocab > 0 ? ff_rt_check_tokens(c, "input", in, 1, T, m->pos, err) : 0)) {
    /* (a bad id gets the runtime's message, not the generated code's status) */
    if (!m->decode)
      rc = ff_fail(err, FF_EINVAL, "generated code lacks %s_decode", c->name);
    else if ((rc = m->decode(&m->weights, m->state, in, T, m->pos, out)))
      rc = ff_fail(err, rc, "generated %s_decode refused the input (status %d)", c->name, rc);
  }
  if (!rc) m->pos += T;
  return rc;
}

int ff_model_position(const ff_model *m) { return m->pos; }

int ff_model_greedy(ff_model *m, const ff_greedy *g, int32_t *out, int *n_out, float *logits, ff_error *err) {
  const ff_config *c = &m->cfg;
  int V = c->vocab, P = g->prompt_len, rc;
  *n_out = 0;
  if (V <= 0) return ff_fail(err, FF_EINVAL, "greedy decoding needs a model with a vocab");
  if (P < 1) return ff_fail(err, FF_ELENGTH, "greedy decoding needs a prompt of at least one id");
  if (g->max_new < 1 || P > c->max_seq || g->max_new > c->max_seq - P)
    return ff_fail(err, FF_ELENGTH, "%d prompt ids and %d new ones do not fit in max_seq = %d positions", P,
                   g->max_new, c->max_seq);
  float *own = logits ? NULL : malloc(sizeof *own * (size_t)P * V);
  if (!logits && !own) return ff_fail(err, FF_ENOMEM, "out of memory");
  float *row = logits ? logits : own;
  if (!(rc = ff_model_begin(m, g->src, g->src_len, err)) && !(rc = ff_model_step(m, g->prompt, P, row, err))) {
    row += (size_t)(P - 1) * V; /* the logits of the last position */
    for (;;) {
      int32_t next = 0;
      for (int v = 1; v < V; v++) /* argmax: the first of equal maxima, as torch.argmax */
        if (row[v] > row[next]) next = v;
      out[(*n_out)++] = next;
      if (next == g->eos || *n_out == g->max_new) break;
      if (logits) row += V;
      if ((rc = ff_model_step(m, &next, 1, row, err))) break;
    }
  }
  free(own);
  return rc;
}

void ff_model_close(ff_model *m) {
  if (!m) return;
  release_program(m);
  ff_pool_free(m->pool);
  if (m->has_weights) ff_rt_model_free(&m->rt);
  ff_lua_close(m->lua);
  free(m->path);
  free(m);
}

static const char *const engine_names[] = {"runtime", "tcc", "cc"};

const char *ff_engine_name(enum ff_engine e) {
  return (unsigned)e < sizeof engine_names / sizeof *engine_names ? engine_names[e] : "?";
}

int ff_engine_parse(const char *name) {
  for (int i = 0; i < (int)(sizeof engine_names / sizeof *engine_names); i++)
    if (!strcmp(name, engine_names[i])) return i;
  return -1;
}
