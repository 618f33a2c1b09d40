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
};

static void release_engine(ff_model *m);

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
  if (!(m->lua = ff_lua_open(err)) || ff_lua_load_config(m->lua, path, &m->cfg, err) ||
      ff_rt_check_config(&m->cfg, err)) {
    ff_model_close(m);
    return NULL;
  }
  return m;
}

const ff_config *ff_model_config(const ff_model *m) { return &m->cfg; }

int ff_model_load_weights(ff_model *m, const char *path, ff_error *err) {
  ff_tensor_file file;
  int rc = ff_safetensors_read(path, &file, err);
  if (rc) return rc;
  if (m->has_weights) ff_rt_model_free(&m->rt);
  release_engine(m);
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

static void release_engine(ff_model *m) {
  ff_jit_free(m->jit);
  free(m->blob);
  free(m->state);
  ff_program_free(&m->program);
  m->jit = NULL;
  m->blob = m->state = NULL;
  m->run = NULL;
  m->prepared = 0;
}

int ff_model_generate(ff_model *m, const char *command, const char **header, const char **source, ff_error *err) {
  if (!m->program.source) {
    ff_gen_options o = {m->path, command};
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
  int rc = ff_model_generate(m, "fixformer", NULL, NULL, err);
  return rc ? rc : ff_render_extra(m->lua, "main", embed, NULL, NULL, NULL, text, err);
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
  rc = ff_render_extra(m->lua, "weights", 1, data, weights_path, hex, text, err);
  free(data);
  return rc;
}

/* Compiles the generated code (header first, so it needs no include path),
 * binds the packed weights and allocates the state. */
static int prepare_generated(ff_model *m, enum ff_engine engine, ff_error *err) {
  const char *header, *source;
  const void *blob;
  size_t bytes;
  int rc;
  if ((rc = ff_model_generate(m, "fixformer run", &header, &source, err))) return rc;
  size_t hl = strlen(header), sl = strlen(source);
  char *text = malloc(hl + sl + 2);
  if (!text) return ff_fail(err, FF_ENOMEM, "out of memory");
  memcpy(text, header, hl);
  text[hl] = '\n';
  memcpy(text + hl + 1, source, sl + 1);
  if (getenv("FIXFORMER_DUMP")) fputs(text, stderr); /* like tinygrad's DEBUG=4 */
  rc = engine == FF_ENGINE_TCC ? ff_jit_tcc(text, &m->jit, err) : ff_jit_cc(text, &m->jit, err);
  free(text);
  if (rc) return rc;
  char sym[FF_NAME_MAX + 16];
  snprintf(sym, sizeof sym, "%s_bind", m->cfg.name);
  bind_fn bind = (bind_fn)ff_jit_symbol(m->jit, sym);
  snprintf(sym, sizeof sym, "%s_run", m->cfg.name);
  m->run = (run_fn)ff_jit_symbol(m->jit, sym);
  if (!bind || !m->run) return ff_fail(err, FF_EINVAL, "generated code lacks %s_bind or %s_run", m->cfg.name, m->cfg.name);
  if ((rc = ff_model_weight_blob(m, &blob, &bytes, err))) return rc;
  if ((rc = bind(&m->weights, blob, bytes)))
    return ff_fail(err, FF_EINVAL, "generated %s_bind refused the packed weights (status %d)", m->cfg.name, rc);
  if (posix_memalign(&m->state, 64, m->program.state_bytes ? m->program.state_bytes : 64))
    return ff_fail(err, FF_ENOMEM, "out of memory for %zu bytes of state", m->program.state_bytes);
  return 0;
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
  int rc = ff_rt_check_input(&m->cfg, in, err); /* the same checks and messages for every engine */
  if (rc || m->engine == FF_ENGINE_RUNTIME) return rc ? rc : ff_rt_forward(&m->rt, in, out, err);
  const void *src = m->cfg.vocab > 0 ? (const void *)in->src_tokens : (const void *)in->src_embeds;
  const void *tgt = m->cfg.vocab > 0 ? (const void *)in->tgt_tokens : (const void *)in->tgt_embeds;
  rc = m->run(&m->weights, m->state, in->batch, in->src_len, src, in->lengths, in->tgt_len, tgt, out);
  if (rc) return ff_fail(err, rc, "generated %s_run refused the input (status %d)", m->cfg.name, rc);
  return 0;
}

void ff_model_close(ff_model *m) {
  if (!m) return;
  release_engine(m);
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
