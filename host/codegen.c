/* codegen.c - calls the Lua generator (gen/generate.lua) and packs weights
 * into the layout it planned. */
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "codegen.h"
#include "ff_runtime.h"
#include "../kernels/isas.h"
#include "fixformer.h"
#include "fixformer_version.h"

/* ---- functions the generator calls ------------------------------------- */

/* The generator reaches these as a module, `local host = require("ff_host")`
 * (never globals; descriptions run in their own environment and see neither). */

/* host.sha256(s) -> 64 hex characters */
static int l_sha256(lua_State *L) {
  size_t len;
  const char *s = luaL_checklstring(L, 1, &len);
  char hex[65];
  ff_sha256_hex(s, len, hex);
  lua_pushstring(L, hex);
  return 1;
}

/* host.read_template("templates/x.c.in") -> the file's text, from the binary */
static int l_read_template(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  const ff_embedded_file *f = ff_embedded_find(path);
  if (!f) return luaL_error(L, "template '%s' is not built into fixformer", path);
  lua_pushlstring(L, (const char *)f->data, f->size);
  return 1;
}

static int push_spec(void *ctx, const ff_weight_spec *s) {
  lua_State *L = ctx;
  static const char *const stacks[] = {"none", "encoder", "decoder"};
  lua_createtable(L, 0, 8);
  lua_pushstring(L, s->name);
  lua_setfield(L, -2, "name");
  lua_pushstring(L, stacks[s->stack]);
  lua_setfield(L, -2, "stack");
  lua_pushinteger(L, s->layer);
  lua_setfield(L, -2, "layer");
  lua_pushstring(L, s->role);
  lua_setfield(L, -2, "role");
  lua_pushinteger(L, s->shape[0]);
  lua_setfield(L, -2, "rows");
  lua_pushinteger(L, s->rank == 2 ? s->shape[1] : 0);
  lua_setfield(L, -2, "cols");
  lua_pushboolean(L, ff_weight_quantized(s)); /* stored in the model's weight type (runtime/quant.c) */
  lua_setfield(L, -2, "quantized");
  lua_pushboolean(L, s->matrix); /* a linear op multiplies by it: packed in panels (include/ff_schema.h) */
  lua_setfield(L, -2, "matrix");
  static const struct {
    const char *key;
    unsigned bit;
  } kinds[] = {{"bias", FF_IS_BIAS}, {"norm", FF_IS_NORM}, {"embedding", FF_IS_EMBEDDING}};
  for (int i = 0; i < 3; i++) { /* AdamW's groups (generated training code) */
    lua_pushboolean(L, (ff_rt_weight_kinds[s->kind].flags & kinds[i].bit) != 0);
    lua_setfield(L, -2, kinds[i].key);
  }
  const ff_rt_weight_fold *f = ff_rt_fold_of(s->kind);
  if (f) { /* a scale folded into a linear (include/ff_schema.h FF_WEIGHT_FOLDS): its roles */
    lua_pushstring(L, ff_rt_weight_kinds[f->weight].role);
    lua_setfield(L, -2, "fold_weight");
    lua_pushstring(L, ff_rt_weight_kinds[f->bias].role);
    lua_setfield(L, -2, "fold_bias");
  }
  lua_rawseti(L, -2, (lua_Integer)lua_rawlen(L, -2) + 1);
  return 0;
}

/* host.weight_specs() -> the runtime's list of tensors for the loaded config */
static int l_weight_specs(lua_State *L) {
  lua_getfield(L, LUA_REGISTRYINDEX, "ff.model");
  const ff_config *c = lua_touserdata(L, -1);
  lua_pop(L, 1);
  if (!c) return luaL_error(L, "host.weight_specs: no model is being generated");
  lua_newtable(L);
  ff_rt_visit_weights(c, NULL, push_spec, L);
  return 1;
}

/* host.position_table(kind, rows, cols, block_bits, dim, theta) -> the floats of
 * a derived position table ("sinusoidal" or "rope"), as ff_position_table
 * packs them (generated training code compiles them in) */
static int l_position_table(lua_State *L) {
  const char *kind = luaL_checkstring(L, 1);
  ff_layout_entry e = {0};
  e.rows = (int)luaL_checkinteger(L, 2);
  e.cols = (int)luaL_checkinteger(L, 3);
  e.block_bits = (int)luaL_checkinteger(L, 4);
  e.dim = (int)luaL_checkinteger(L, 5);
  e.theta = (float)luaL_checknumber(L, 6);
  e.derived = !strcmp(kind, "rope") ? FF_DERIVED_ROPE : FF_DERIVED_SINUSOIDAL;
  if (e.rows < 1 || e.cols < 1 || e.rows > (1 << 22) / e.cols || e.block_bits < 0 || e.block_bits > 20)
    return luaL_error(L, "host.position_table: a table of %d x %d", e.rows, e.cols);
  float *t = malloc(sizeof *t * (size_t)e.rows * (size_t)e.cols);
  if (!t) return luaL_error(L, "host.position_table: out of memory");
  ff_position_table(&e, t);
  lua_createtable(L, e.rows * e.cols, 0);
  for (int i = 0; i < e.rows * e.cols; i++) {
    lua_pushnumber(L, t[i]);
    lua_rawseti(L, -2, i + 1);
  }
  free(t);
  return 1;
}

/* ff_host.isas[name]: a row of kernels/isas.h as { mr =, nr =, flags =, cpu =,
 * targets =, stack = { f32 = { bound, measured }, quantized = { ... }, on = } } */
static void push_isa(lua_State *L, int mr, int nr, const char *flags, const char *cpu, const char *targets,
                     int stack_f32, int stack_quantized, int measured_f32, int measured_quantized, const char *on) {
  const int stack[2][2] = {{stack_f32, measured_f32}, {stack_quantized, measured_quantized}};
  const char *const str[][2] = {{"flags", flags}, {"cpu", cpu}, {"targets", targets}};
  lua_createtable(L, 0, 6);
  lua_pushinteger(L, mr);
  lua_setfield(L, -2, "mr");
  lua_pushinteger(L, nr);
  lua_setfield(L, -2, "nr");
  for (int i = 0; i < 3; i++) {
    lua_pushstring(L, str[i][1]);
    lua_setfield(L, -2, str[i][0]);
  }
  lua_createtable(L, 0, 3);
  for (int i = 0; i < 2; i++) {
    lua_createtable(L, 2, 0);
    for (int j = 0; j < 2; j++) {
      lua_pushinteger(L, stack[i][j]);
      lua_rawseti(L, -2, j + 1);
    }
    lua_setfield(L, -2, i ? "quantized" : "f32");
  }
  lua_pushstring(L, on);
  lua_setfield(L, -2, "on");
  lua_setfield(L, -2, "stack");
}

/* Installs the module ff_host where require (host.c) finds loaded modules,
 * and makes c the model weight_specs describes (NULL: none).  The model is
 * in the registry, not an upvalue, so a module that keeps the table from an
 * earlier call still sees the current model.  ff_host.version is FF_VERSION,
 * ff_host.max_threads FF_MAX_THREADS (the one source; plan.lua reads it),
 * ff_host.isas kernels/isas.h (push_isa). */
static void install_host_module(lua_State *L, const ff_config *c) {
  static const luaL_Reg fns[] = {
      {"sha256", l_sha256},           {"read_template", l_read_template}, {"weight_specs", l_weight_specs},
      {"position_table", l_position_table}, {NULL, NULL}};
  lua_pushlightuserdata(L, (void *)c);
  lua_setfield(L, LUA_REGISTRYINDEX, "ff.model");
  lua_getfield(L, LUA_REGISTRYINDEX, "ff.loaded");
  if (lua_getfield(L, -1, "ff_host") == LUA_TNIL) {
    lua_pop(L, 1);
    luaL_newlib(L, fns);
    lua_pushstring(L, FF_VERSION); /* stamped in emitted code: CMake's project version, the one source */
    lua_setfield(L, -2, "version");
    lua_pushinteger(L, FF_MAX_THREADS); /* the attention scratch the plan reserves; ff_set_threads' bound */
    lua_setfield(L, -2, "max_threads");
    lua_newtable(L);
#define FF_ISA_ENTRY(name, ...)                                                                                      \
  push_isa(L, __VA_ARGS__);                                                                                          \
  lua_setfield(L, -2, #name);
    FF_ISAS(FF_ISA_ENTRY) /* kernels/isas.h, the one table */
#undef FF_ISA_ENTRY
    lua_setfield(L, -2, "isas");
    lua_setfield(L, -2, "ff_host");
  } else {
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
}

/* ---- reading the result ---------------------------------------------------- */

static char *dup_field(lua_State *L, int t, const char *k) {
  lua_getfield(L, t, k);
  size_t n;
  const char *s = lua_tolstring(L, -1, &n);
  char *d = s ? malloc(n + 1) : NULL;
  if (d) memcpy(d, s, n + 1);
  lua_pop(L, 1);
  return d;
}

static double num_field(lua_State *L, int t, const char *k) {
  lua_getfield(L, t, k);
  double v = lua_tonumber(L, -1);
  lua_pop(L, 1);
  return v;
}

/* A size in the result (a Lua integer, exact), or -1. */
static long long int_field(lua_State *L, int t, const char *k) {
  int ok;
  lua_getfield(L, t, k);
  long long v = (long long)lua_tointegerx(L, -1, &ok);
  lua_pop(L, 1);
  return ok && v >= 0 ? v : -1;
}

/* The size_t of a target triple's architecture, in bits; NULL or "": this
 * machine's.  32-bit: arm*, thumb*, i386..i686, riscv32, x32 and ILP32. */
static int target_bits(const char *t) {
  if (!t || !*t) return (int)(sizeof(size_t) * 8);
  static const char *const arch32[] = {"arm", "thumb", "i386", "i486", "i586", "i686", "riscv32"};
  for (size_t i = 0; i < sizeof arch32 / sizeof *arch32; i++)
    if (!strncmp(t, arch32[i], strlen(arch32[i]))) return 32;
  return strstr(t, "gnux32") || strstr(t, "ilp32") ? 32 : 64;
}

/* The sizes the header declares (state, weights blob, the output of max_seq
 * positions) as the target's objects: at most PTRDIFF_MAX of its size_t
 * (what a C library allocates), and this host's, which holds the first two. */
static int check_sizes(lua_State *L, int t, const ff_gen_options *o, ff_error *err) {
  static const char *const what[] = {"state (activations and key/value caches)", "weights (the packed blob)",
                                     "output of one sequence of max_seq positions"};
  const int bits = target_bits(o->target);
  const unsigned long long target_max = bits == 32 ? 0x7fffffffULL : 0x7fffffffffffffffULL,
                           host_max = (unsigned long long)(SIZE_MAX / 2),
                           max = target_max < host_max ? target_max : host_max;
  long long floats = int_field(L, t, "weight_floats");
  long long sizes[] = {int_field(L, t, "state_bytes"), floats >= 0 && floats <= (1LL << 60) ? 64 + 4 * floats : -1,
                       int_field(L, t, "output_bytes")};
  char where[96] = "machine";
  if (o->target && *o->target) snprintf(where, sizeof where, "target (%.80s)", o->target);
  for (int i = 0; i < 3; i++)
    if (sizes[i] < 0 || (unsigned long long)sizes[i] > max)
      return ff_fail(err, FF_EINVAL, "%s: the %s take%s %lld bytes: more than a %d-bit %s holds (at most %llu bytes "
                     "an object)", o->source, what[i], i == 1 ? "" : "s", sizes[i], bits, where, max);
  /* the generated code names its weight and activation offsets (in floats) as enum constants: C's int */
  for (int i = 0; i < 2; i++)
    if (sizes[i] / 4 > 0x7fffffffLL)
      return ff_fail(err, FF_EINVAL, "%s: the %s take %lld floats: more than the generated code's offsets (C int "
                     "constants) address", o->source, what[i], sizes[i] / 4);
  return 0;
}

/* The offsets of field k (a list of integers) into a new array of n, or NULL (no list) */
static int offsets_field(lua_State *L, int t, const char *k, int n, size_t **out) {
  lua_getfield(L, t, k);
  int ok = 1;
  if (lua_istable(L, -1) && (int)lua_rawlen(L, -1) == n && n > 0 && (*out = calloc((size_t)n, sizeof **out)))
    for (int i = 0; i < n; i++) {
      lua_rawgeti(L, -1, i + 1);
      long long v = (long long)lua_tointegerx(L, -1, &ok);
      (*out)[i] = (size_t)v;
      ok = ok && v >= 0;
      lua_pop(L, 1);
      if (!ok) break;
    }
  else if (lua_istable(L, -1) && (int)lua_rawlen(L, -1) == n && n > 0)
    ok = 0;
  lua_pop(L, 1);
  return ok;
}

/* caches = { self_kv, cross_kv, row, decoded, source } (nil: an encoder) */
static int read_caches(lua_State *L, int t, ff_program *p, ff_error *err) {
  p->decoded_at = p->source_at = -1;
  lua_getfield(L, t, "caches");
  int c = lua_gettop(L), ok = 1;
  if (lua_istable(L, c)) {
    lua_getfield(L, c, "self_kv");
    p->n_kv = (int)lua_rawlen(L, -1);
    lua_pop(L, 1);
    p->kv_row = (size_t)num_field(L, c, "row");
    p->decoded_at = (long long)num_field(L, c, "decoded");
    p->source_at = (long long)num_field(L, c, "source");
    ok = offsets_field(L, c, "self_kv", p->n_kv, &p->kv_self) && offsets_field(L, c, "cross_kv", p->n_kv, &p->kv_cross);
    if (ok && p->source_at < 0) { /* no encoder: no cross caches */
      free(p->kv_cross);
      p->kv_cross = NULL;
    }
  }
  lua_settop(L, c - 1);
  return ok ? 0 : ff_fail(err, FF_ENOMEM, "out of memory for the cache offsets");
}

static int read_program(lua_State *L, int t, const ff_gen_options *o, ff_program *p, ff_error *err) {
  int rc = check_sizes(L, t, o, err); /* before anything is copied or sized by them */
  if (rc) return rc;
  p->header = dup_field(L, t, "header");
  p->source = dup_field(L, t, "source");
  p->kernel_source = dup_field(L, t, "kernel_source");
  p->kernels = dup_field(L, t, "kernels");
  char *hash = dup_field(L, t, "layout_hash");
  p->layout_hash = hash ? strtoull(hash, NULL, 16) : 0;
  free(hash);
  p->weight_floats = (size_t)int_field(L, t, "weight_floats");
  p->state_bytes = (size_t)int_field(L, t, "state_bytes");
  p->flops = num_field(L, t, "flops");
  if ((rc = read_caches(L, t, p, err))) return rc;
  lua_getfield(L, t, "layout");
  int n = (int)lua_rawlen(L, -1);
  p->layout = calloc((size_t)n + 1, sizeof *p->layout);
  if (!p->header || !p->source || !p->kernel_source || !p->kernels || !p->layout) {
    lua_pop(L, 1);
    return ff_fail(err, FF_ENOMEM, "out of memory for the generated program");
  }
  for (int i = 0; i < n; i++, p->n_layout++) {
    ff_layout_entry *e = &p->layout[i];
    lua_rawgeti(L, -1, i + 1);
    int et = lua_gettop(L);
    e->name = dup_field(L, et, "name");
    e->offset = (size_t)num_field(L, et, "offset");
    e->row0 = (int)num_field(L, et, "row0");
    e->rows = (int)num_field(L, et, "rows");
    e->cols = (int)num_field(L, et, "cols");
    e->panel = (int)num_field(L, et, "panel");
    e->type = (int)num_field(L, et, "type");
    e->derived = (int)num_field(L, et, "derived");
    e->block_bits = (int)num_field(L, et, "block_bits");
    e->dim = (int)num_field(L, et, "dim");
    e->theta = (float)num_field(L, et, "theta");
    lua_pop(L, 1);
    if (!e->name) {
      lua_pop(L, 1);
      return ff_fail(err, FF_ENOMEM, "out of memory for the weight layout");
    }
  }
  lua_pop(L, 1);
  return 0;
}

/* ---- calls into the generator ----------------------------------------------- */

/* A failed lua_pcall's error as err (host.h), the stack back to top */
static int lua_failed(ff_lua *h, int top, ff_error *err) {
  int rc = ff_lua_generator_fail(h, err);
  lua_settop(ff_lua_state(h), top);
  return rc;
}

/* The string on top of the stack malloc'd into *out, the stack back to top */
static int take_text(lua_State *L, int top, char **out, ff_error *err) {
  size_t n;
  const char *s = lua_tolstring(L, -1, &n);
  if (s && (*out = malloc(n + 1))) memcpy(*out, s, n + 1);
  lua_settop(L, top);
  return *out ? 0 : ff_fail(err, FF_ENOMEM, "out of memory");
}

/* Each call into the generator runs under its wall-clock limit (host.h): f(h, arg, err). */
static int timed(ff_lua *h, int (*f)(ff_lua *h, void *arg, ff_error *err), void *arg, ff_error *err) {
  int rc = ff_lua_time_limit(h, err);
  if (rc) return rc;
  rc = f(h, arg, err);
  ff_lua_time_limit_end(h);
  return rc;
}

typedef struct {
  const ff_config *c;
  const ff_gen_options *o;
  const ff_train_shape *shape; /* NULL: the model; else its training program (out_train) */
  ff_program *out;
  ff_train_code *out_train;
} generate_args;

static int read_train_program(lua_State *L, int t, ff_train_code *out, ff_error *err);

static int generate(ff_lua *h, void *arg, ff_error *err) {
  const generate_args *a = arg;
  const ff_gen_options *o = a->o;
  lua_State *L = ff_lua_state(h);
  int top = lua_gettop(L), rc;
  char shown[4096]; /* the description's path as the banner shows it: no machine's folders */
  install_host_module(L, a->c);

  lua_getglobal(L, "require");
  lua_pushliteral(L, "generate");
  if (lua_pcall(L, 1, 1, 0) != LUA_OK) return lua_failed(h, top, err);
  lua_getfield(L, LUA_REGISTRYINDEX, "ff.config");
  lua_createtable(L, 0, 7);
  lua_pushstring(L, ff_shown_path(o->source, shown, sizeof shown));
  lua_setfield(L, -2, "source");
  lua_pushstring(L, o->command);
  lua_setfield(L, -2, "command");
  lua_getfield(L, LUA_REGISTRYINDEX, "ff.sha256");
  lua_setfield(L, -2, "sha256");
  lua_pushstring(L, o->isa ? o->isa : "generic");
  lua_setfield(L, -2, "isa");
  lua_pushstring(L, o->dtype ? o->dtype : "f32");
  lua_setfield(L, -2, "dtype");
  lua_pushstring(L, o->compute ? o->compute : "f32");
  lua_setfield(L, -2, "compute");
  lua_pushboolean(L, !o->no_line);
  lua_setfield(L, -2, "lines");
  if (a->shape) { /* train = { batch, src, tgt, recompute } */
    const int dims[] = {a->shape->batch, a->shape->src, a->shape->tgt, a->shape->recompute != 0};
    const char *const names[] = {"batch", "src", "tgt", "recompute"};
    lua_createtable(L, 0, 4);
    for (int i = 0; i < 4; i++) {
      lua_pushinteger(L, dims[i]);
      lua_setfield(L, -2, names[i]);
    }
    lua_setfield(L, -2, "train");
  }
  if (lua_pcall(L, 2, 1, 0) != LUA_OK) return lua_failed(h, top, err);
  rc = a->shape ? read_train_program(L, lua_gettop(L), a->out_train, err)
                : read_program(L, lua_gettop(L), o, a->out, err);
  lua_settop(L, top);
  if (rc && a->shape) ff_train_code_free(a->out_train);
  if (rc && !a->shape) ff_program_free(a->out);
  return rc;
}

/* The training program's result (gen/generate.lua's generate_train) into out */
static int read_train_program(lua_State *L, int t, ff_train_code *out, ff_error *err) {
  const char *const size_fields[] = {"state_bytes", "param_floats", "packed_bytes", "scratch_bytes", "arena_bytes",
                                     "naive_bytes"};
  size_t *sizes[] = {&out->state_bytes, &out->params, &out->packed_bytes, &out->scratch_bytes, &out->activation_bytes,
                     &out->activation_bytes_unshared};
  for (int i = 0; i < 6; i++) {
    long long v = int_field(L, t, size_fields[i]);
    if (v < 0 || (unsigned long long)v > SIZE_MAX / 2)
      return ff_fail(err, FF_EINVAL, "the training state takes more memory than this machine addresses");
    *sizes[i] = (size_t)v;
  }
  if (out->state_bytes / 4 > 0x7fffffff)
    return ff_fail(err, FF_EINVAL, "the training state takes %zu floats: more than the generated code's offsets "
                   "(C int constants) address", out->state_bytes / 4);
  out->flops = num_field(L, t, "flops");
  out->forward_flops = num_field(L, t, "forward_flops");
  out->backward_flops = num_field(L, t, "backward_flops");
  out->header = dup_field(L, t, "header");
  out->source = dup_field(L, t, "source");
  out->kernels = dup_field(L, t, "kernel_source");
  out->library = dup_field(L, t, "kernels");
  if (!out->header || !out->source || !out->kernels || !out->library)
    return ff_fail(err, FF_ENOMEM, "out of memory for the generated training code");
  return 0;
}

int ff_generate_train(ff_lua *h, const ff_config *c, const ff_gen_options *o, const ff_train_shape *shape,
                      ff_train_code *out, ff_error *err) {
  generate_args a = {c, o, shape, NULL, out};
  memset(out, 0, sizeof *out);
  return timed(h, generate, &a, err);
}

void ff_train_code_free(ff_train_code *c) {
  if (!c) return;
  free(c->header);
  free(c->source);
  free(c->kernels);
  free(c->library);
  memset(c, 0, sizeof *c);
}

int ff_generate(ff_lua *h, const ff_config *c, const ff_gen_options *o, ff_program *out, ff_error *err) {
  generate_args a = {c, o, NULL, out, NULL};
  memset(out, 0, sizeof *out);
  return timed(h, generate, &a, err);
}

void ff_program_free(ff_program *p) {
  if (!p) return;
  free(p->kv_self);
  free(p->kv_cross);
  free(p->header);
  free(p->source);
  free(p->kernel_source);
  free(p->kernels);
  for (int i = 0; p->layout && i < p->n_layout; i++) free(p->layout[i].name);
  free(p->layout);
  memset(p, 0, sizeof *p);
}

/* ---- packing ------------------------------------------------------------ */

static void put_u64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* W [rows, cols] -> W^T [cols, rows] in panels of NR columns, float32:
 * W[r, c] at (r / NR, c, r % NR) */
static void pack_panels_f32(const float *src, int rows, size_t cols, int NR, float *dst) {
  for (int r = 0; r < rows; r++)
    for (size_t c = 0; c < cols; c++) dst[(size_t)(r / NR) * cols * NR + c * NR + r % NR] = src[(size_t)r * cols + c];
}

/* The same order in bfloat16 (kernels/prototypes.h) */
static void pack_panels_bf16(const float *src, int rows, size_t cols, int NR, uint16_t *dst) {
  for (int r = 0; r < rows; r++)
    for (size_t c = 0; c < cols; c++)
      dst[(size_t)(r / NR) * cols * NR + c * NR + r % NR] = ff_bf16_round(src[(size_t)r * cols + c]);
}

/* int8 panels (kernels/prototypes.h): per panel, per group of 32 k, NR float
 * scales then 32 rows of NR int8; the q and scales of W's row r are its groups'. */
static void pack_panels_q8(const float *src, int rows, size_t cols, int NR, unsigned char *dst) {
  const size_t G = (cols + FF_Q8_GROUP - 1) / FF_Q8_GROUP, group = (size_t)(4 + FF_Q8_GROUP) * NR;
  for (int r = 0; r < rows; r++)
    for (size_t g = 0; g < G; g++) {
      const size_t k0 = g * FF_Q8_GROUP, n = cols - k0 < FF_Q8_GROUP ? cols - k0 : FF_Q8_GROUP;
      int8_t q[FF_Q8_GROUP];
      const float scale = ff_q8_group(src + (size_t)r * cols + k0, (int)n, q);
      unsigned char *at = dst + ((size_t)(r / NR) * G + g) * group;
      memcpy(at + 4 * (r % NR), &scale, 4);
      for (size_t k = 0; k < n; k++) at[4 * (size_t)NR + k * NR + r % NR] = (unsigned char)q[k];
    }
}

/* compute int8's panels (kernels/int8.c): per panel NR float scales, NR
 * int32 sums of the columns' q, then per 4 k the NR columns' 4 int8; W's row
 * r quantized over the whole row, as the runtime's reference (runtime/quant.c). */
static void pack_panels_i8(const float *src, int rows, size_t cols, int NR, unsigned char *dst) {
  const size_t quads = (cols + 3) / 4, panel = 4 * (size_t)NR * (2 + quads);
  for (int r = 0; r < rows; r++) {
    unsigned char *at = dst + (size_t)(r / NR) * panel;
    const int c = r % NR;
    const float *w = src + (size_t)r * cols, scale = ff_q8_scale(w, cols);
    int32_t sum = 0;
    for (size_t k = 0; k < cols; k++) {
      const int8_t q = ff_q8_value(w[k], scale);
      sum += q;
      at[8 * (size_t)NR + k / 4 * 4 * NR + 4 * (size_t)c + k % 4] = (unsigned char)q;
    }
    memcpy(at + 4 * c, &scale, 4);
    memcpy(at + 4 * ((size_t)NR + c), &sum, 4);
  }
}

/* compute bf16's panels (kernels/bf16.c): per pair of k, the NR columns'
 * (w[k], w[k+1]) rounded to bfloat16, w[k] in the low half of a word */
static void pack_panels_b16(const float *src, int rows, size_t cols, int NR, uint16_t *dst) {
  const size_t pairs = (cols + 1) / 2;
  for (int r = 0; r < rows; r++)
    for (size_t k = 0; k < cols; k++)
      dst[2 * ((size_t)(r / NR) * pairs * NR + k / 2 * NR + (size_t)(r % NR)) + k % 2] =
          ff_bf16_round(src[(size_t)r * cols + k]);
}

/* Rows as in PyTorch: bfloat16 rows of cols rounded up to even (whole
 * words); int8 rows of G scales then G * 32 int8 (the embedding table). */
static void pack_rows(int t, const float *src, int rows, size_t cols, float *dst) {
  const size_t G = (cols + FF_Q8_GROUP - 1) / FF_Q8_GROUP;
  for (int r = 0; r < rows; r++) {
    const float *w = src + (size_t)r * cols;
    if (t == FF_WEIGHT_BF16) {
      uint16_t *row = (uint16_t *)(void *)(dst + (size_t)r * ((cols + 1) / 2));
      for (size_t c = 0; c < cols; c++) row[c] = ff_bf16_round(w[c]);
    } else if (t == FF_WEIGHT_INT8) {
      float *scales = dst + (size_t)r * G * (4 + FF_Q8_GROUP) / 4;
      int8_t *q = (int8_t *)(void *)(scales + G);
      for (size_t g = 0; g < G; g++) {
        const size_t k0 = g * FF_Q8_GROUP, n = cols - k0 < FF_Q8_GROUP ? cols - k0 : FF_Q8_GROUP;
        scales[g] = ff_q8_group(w + k0, (int)n, q + k0);
      }
    } else {
      memcpy(dst + (size_t)r * cols, w, cols * sizeof *dst);
    }
  }
}

/* The tables of the positions from the runtime's frequencies, each angle
 * (an exact product in double) through double sin and cos, rounded: generated
 * code combines a row hi and a row lo (templates/embed.c.in, mha.c.in). */
void ff_position_table(const ff_layout_entry *e, float *dst) {
  const int B = 1 << e->block_bits, rope = e->derived == FF_DERIVED_ROPE, half = e->cols / 2;
  const int NH = e->rows - B - rope;
  if (rope) { /* row 0: the frequencies f_i, then zeros */
    memset(dst, 0, sizeof *dst * (size_t)e->cols);
    for (int i = 0; i < half; i++) dst[i] = ff_rt_rope_freq(i, e->dim, e->theta);
    dst += e->cols;
  }
  for (int r = 0; r < NH + B; r++) {
    const double pos = r < NH ? (double)r * B : (double)(r - NH);
    float *row = dst + (size_t)r * (size_t)e->cols;
    for (int i = 0; i < half; i++) {
      const double a = rope ? pos * (double)ff_rt_rope_freq(i, e->dim, e->theta) : ff_rt_sinusoid_angle(pos, i, e->dim);
      if (rope) row[i] = (float)cos(a), row[half + i] = (float)sin(a);
      else row[2 * i] = (float)sin(a), row[2 * i + 1] = (float)cos(a);
    }
  }
}

/* The 4-byte words rows rows of cols weights of type t take (gen/ops.lua's
 * weight_words): bf16 rows padded to whole words, int8 a scale per group. */
static size_t weight_words(int t, size_t rows, size_t cols) {
  if (t == FF_WEIGHT_BF16 || t == FF_PACK_B16) return rows * ((cols + 1) / 2);
  if (t == FF_PACK_I8) return rows * (2 + (cols + 3) / 4);
  if (t == FF_WEIGHT_INT8) return rows * ((cols + FF_Q8_GROUP - 1) / FF_Q8_GROUP) * (4 + FF_Q8_GROUP) / 4;
  return rows * cols;
}

static size_t entry_cols(const ff_layout_entry *e) { return (size_t)(e->cols > 0 ? e->cols : 1); }

/* The words rows r0 .. r1 - 1 of e take (r0 a multiple of its panel width). */
static size_t rows_words(const ff_layout_entry *e, int r0, int r1) {
  const int P = e->panel;
  if (e->derived) return (size_t)(r1 - r0) * entry_cols(e);
  return weight_words(e->type, (size_t)(P ? (r1 - r0 + P - 1) / P * P : r1 - r0), entry_cols(e));
}

/* e's rows in f (from its row0), checked for size. */
static int entry_source(const ff_layout_entry *e, const ff_tensor_file *f, const float **src, ff_error *err) {
  const ff_tensor *t = ff_tensor_file_find(f, e->name);
  size_t cols = entry_cols(e);
  if (!t || t->numel < (size_t)(e->row0 + e->rows) * cols)
    return ff_fail(err, FF_EMISSING, "tensor '%s' missing or of the wrong size while packing", e->name);
  *src = t->data + (size_t)e->row0 * cols;
  return 0;
}

/* Rows r0 .. r1 - 1 of e's rows src, checked just before they are packed:
 * int8 ones finite (a scale cannot hold NaN), so the rows are read once, a
 * piece at a time (the caller discards what it packed before a refusal). */
static int piece_check(const ff_layout_entry *e, const float *src, int r0, int r1, ff_error *err) {
  const size_t cols = entry_cols(e);
  const int q8 = e->type == FF_WEIGHT_INT8 || e->type == FF_PACK_I8;
  return q8 ? ff_q8_check_finite(src + (size_t)r0 * cols, (size_t)(r1 - r0) * cols, e->name, err) : 0;
}

/* Rows r0 .. r1 - 1 of e (r0 a multiple of its panel width) from its rows
 * src into dst, zeroed, which holds rows_words(e, r0, r1): a panel of rows
 * r .. r + NR - 1 is contiguous, so a run of whole panels packs alone. */
static void pack_entry_rows(const ff_layout_entry *e, const float *src, int r0, int r1, float *dst) {
  const size_t cols = entry_cols(e);
  const int rows = r1 - r0;
  src += (size_t)r0 * cols;
  if (!e->panel) pack_rows(e->type, src, rows, cols, dst);
  else if (e->type == FF_WEIGHT_BF16) pack_panels_bf16(src, rows, cols, e->panel, (uint16_t *)(void *)dst);
  else if (e->type == FF_WEIGHT_INT8) pack_panels_q8(src, rows, cols, e->panel, (unsigned char *)dst);
  else if (e->type == FF_PACK_I8) pack_panels_i8(src, rows, cols, e->panel, (unsigned char *)dst);
  else if (e->type == FF_PACK_B16) pack_panels_b16(src, rows, cols, e->panel, (uint16_t *)(void *)dst);
  else pack_panels_f32(src, rows, cols, e->panel, dst);
}

void ff_blob_header(const ff_program *p, unsigned char h[FF_BLOB_HEADER]) {
  memset(h, 0, FF_BLOB_HEADER);
  memcpy(h, "FFWEIGHT", 8);
  put_u64(h + 8, 1 | (uint64_t)FF_BLOB_HEADER << 32); /* u32 version, u32 header bytes */
  put_u64(h + 16, p->layout_hash);
  put_u64(h + 24, (uint64_t)p->weight_floats * sizeof(float)); /* (ff_generate checked the size) */
}

/* About this many words a piece of packing (1 MiB; a piece is at
 * least one panel, and a derived table is one piece). */
#define STREAM_PIECE ((size_t)1 << 18)

/* Rows a piece of e takes: whole panels, at least one row or panel. */
static int piece_rows(const ff_layout_entry *e) {
  const int unit = e->panel ? e->panel : 1;
  const size_t per = rows_words(e, 0, unit), n = per ? STREAM_PIECE / per : 0;
  if (e->derived || n * (size_t)unit >= (size_t)e->rows) return e->rows > 0 ? e->rows : 1;
  return n ? (int)n * unit : unit;
}

int ff_pack_weights_into(const ff_program *p, const ff_tensor_file *f, void *blob, void (*ready)(void *, size_t),
                         void *ctx, ff_error *err) {
  ff_blob_header(p, blob);
  float *data = (float *)(void *)((unsigned char *)blob + FF_BLOB_HEADER);
  for (int i = 0; i < p->n_layout; i++) {
    const ff_layout_entry *e = &p->layout[i];
    const size_t cols = entry_cols(e);
    const float *src = NULL;
    int rc = e->derived ? 0 : entry_source(e, f, &src, err);
    if (rc) return rc;
    if (e->derived) ff_position_table(e, data + e->offset);
    for (int r0 = 0, step = piece_rows(e); src && r0 < e->rows; r0 += step) { /* piece by piece */
      const int r1 = e->rows - r0 < step ? e->rows : r0 + step;
      if ((rc = piece_check(e, src, r0, r1, err))) return rc;
      pack_entry_rows(e, src, r0, r1, data + e->offset + rows_words(e, 0, r0));
      ff_tensor_file_release(f, src + (size_t)r0 * cols, (size_t)(r1 - r0) * cols * sizeof *src);
      if (ready) ready(ctx, FF_BLOB_HEADER + (e->offset + rows_words(e, 0, r1)) * sizeof *data);
    }
    if (ready && e->derived) ready(ctx, FF_BLOB_HEADER + (e->offset + rows_words(e, 0, e->rows)) * sizeof *data);
  }
  return 0;
}

int ff_pack_weights(const ff_program *p, const ff_tensor_file *f, void **blob, size_t *bytes, ff_error *err) {
  size_t data_bytes, total;
  *blob = NULL;
  if (ff_size_mul(p->weight_floats, sizeof(float), &data_bytes) || ff_size_add(data_bytes, FF_BLOB_HEADER, &total))
    return ff_fail(err, FF_ENOMEM, "weights too large");
  unsigned char *b = NULL;
  if (posix_memalign((void **)&b, 64, total ? total : 64)) return ff_fail(err, FF_ENOMEM, "out of memory for weights");
  memset(b, 0, total);
  int rc = ff_pack_weights_into(p, f, b, NULL, NULL, err);
  if (rc) {
    free(b);
    return rc;
  }
  *blob = b;
  *bytes = total;
  return 0;
}

/* n zero words to sink, through buf (cap words). */
static int stream_zeros(size_t n, float *buf, size_t cap, ff_pack_sink sink, void *ctx, ff_error *err) {
  memset(buf, 0, (n < cap ? n : cap) * sizeof *buf);
  for (size_t k; n; n -= k) {
    k = n < cap ? n : cap;
    int rc = sink(ctx, buf, k, err);
    if (rc) return rc;
  }
  return 0;
}

int ff_pack_stream(const ff_program *p, const ff_tensor_file *f, ff_pack_sink sink, void *ctx, ff_error *err) {
  size_t cap = STREAM_PIECE, at = 0;
  for (int i = 0; i < p->n_layout; i++) {
    const ff_layout_entry *e = &p->layout[i];
    const size_t words = rows_words(e, 0, piece_rows(e) < e->rows ? piece_rows(e) : e->rows);
    if (words > cap) cap = words;
  }
  float *buf = malloc(cap * sizeof *buf);
  if (!buf) return ff_fail(err, FF_ENOMEM, "out of memory packing the weights (%zu bytes)", cap * sizeof *buf);
  int rc = 0;
  for (int i = 0; i < p->n_layout && !rc; i++) {
    const ff_layout_entry *e = &p->layout[i];
    const float *src = NULL;
    if (e->offset < at || e->offset + rows_words(e, 0, e->rows) > p->weight_floats) {
      rc = ff_fail(err, FF_EINVAL, "internal: weight '%s' at %zu overlaps the one before or the end", e->name,
                   e->offset);
      break;
    }
    if ((rc = stream_zeros(e->offset - at, buf, cap, sink, ctx, err)) ||
        (!e->derived && (rc = entry_source(e, f, &src, err))))
      break;
    for (int r0 = 0, step = piece_rows(e); r0 < e->rows && !rc; r0 += step) {
      const int r1 = e->rows - r0 < step ? e->rows : r0 + step;
      const size_t n = rows_words(e, r0, r1);
      memset(buf, 0, n * sizeof *buf);
      if (e->derived) ff_position_table(e, buf);
      else if ((rc = piece_check(e, src, r0, r1, err))) break;
      else pack_entry_rows(e, src, r0, r1, buf);
      rc = sink(ctx, buf, n, err);
    }
    at = e->offset + rows_words(e, 0, e->rows);
  }
  if (!rc) rc = stream_zeros(p->weight_floats - at, buf, cap, sink, ctx, err);
  free(buf);
  return rc;
}

/* ---- compiled code ------------------------------------------------------ */

int ff_jit_new(void *handle, void *(*symbol)(void *handle, const char *name), void (*close)(void *handle),
               ff_jit **out, ff_error *err) {
  ff_jit *j = calloc(1, sizeof *j);
  if (!j) {
    close(handle);
    return ff_fail(err, FF_ENOMEM, "out of memory");
  }
  j->handle = handle;
  j->symbol = symbol;
  j->close = close;
  *out = j;
  return 0;
}

void *ff_jit_symbol(ff_jit *j, const char *name) { return j->symbol(j->handle, name); }

void ff_jit_free(ff_jit *j) {
  if (!j) return;
  j->close(j->handle);
  free(j);
}

/* ---- files that go with the program ---------------------------------------- */

typedef struct {
  const void *in; /* the ff_extra, or the kernels' list */
  char **out;
} render_args;

static int render_extra(ff_lua *h, void *arg, ff_error *err) {
  const ff_extra *x = ((const render_args *)arg)->in;
  lua_State *L = ff_lua_state(h);
  int top = lua_gettop(L);
  if (lua_getglobal(L, "ff_render_extra") != LUA_TFUNCTION) {
    lua_settop(L, top);
    return ff_fail(err, FF_EINVAL, "internal: generate the program before its extra files");
  }
  lua_pushstring(L, x->section);
  lua_createtable(L, 0, 8);
  lua_pushboolean(L, x->embed);
  lua_setfield(L, -2, "EMBED");
  char shown[4096]; /* the banner's weights file: no machine's folders */
  const char *const strings[][2] = {
      {"DATA", x->data}, {"WEIGHTS", x->weights ? ff_shown_path(x->weights, shown, sizeof shown) : NULL},
      {"SHA256", x->sha256}};
  for (int i = 0; i < 3; i++)
    if (strings[i][1]) {
      lua_pushstring(L, strings[i][1]);
      lua_setfield(L, -2, strings[i][0]);
    }
  if (x->tok_tables) { /* tokenizer = { tables, path, kind, bos, eos, add_bos, tail (-1: none), prefix, suffix } */
    const ff_tokenizer_info *in = x->tok_info;
    const int ids[] = {(int)in->kind, in->bos, in->eos, in->add_bos, in->tail};
    const char *const names[] = {"kind", "bos", "eos", "add_bos", "tail"};
    lua_createtable(L, 0, 7);
    lua_pushstring(L, x->tok_tables);
    lua_setfield(L, -2, "tables");
    lua_pushstring(L, ff_shown_path(x->tok_path, shown, sizeof shown));
    lua_setfield(L, -2, "path");
    for (int i = 0; i < 5; i++) {
      lua_pushinteger(L, ids[i]);
      lua_setfield(L, -2, names[i]);
    }
    for (int side = 0; side < 2; side++) { /* prefix, suffix: the template's special ids around a text */
      int n = side ? in->n_suffix : in->n_prefix;
      lua_createtable(L, n, 0);
      for (int i = 0; i < n; i++) {
        lua_pushinteger(L, side ? in->suffix[i] : in->prefix[i]);
        lua_rawseti(L, -2, i + 1);
      }
      lua_setfield(L, -2, side ? "suffix" : "prefix");
    }
    lua_setfield(L, -2, "tokenizer");
  }
  if (lua_pcall(L, 2, 1, 0) != LUA_OK) return lua_failed(h, top, err);
  return take_text(L, top, ((const render_args *)arg)->out, err);
}

int ff_render_extra(ff_lua *h, const ff_extra *x, char **out, ff_error *err) {
  render_args a = {x, out};
  *out = NULL;
  return timed(h, render_extra, &a, err);
}

/* ---- kernels on their own --------------------------------------------------- */

static int render_kernels(ff_lua *h, void *arg, ff_error *err) {
  lua_State *L = ff_lua_state(h);
  int top = lua_gettop(L);
  install_host_module(L, NULL);
  lua_getglobal(L, "require");
  lua_pushliteral(L, "emit");
  if (lua_pcall(L, 1, 1, 0) != LUA_OK) return lua_failed(h, top, err);
  lua_getfield(L, -1, "kernel_unit");
  lua_pushfstring(L, "return %s", (const char *)((const render_args *)arg)->in);
  if (luaL_loadstring(L, lua_tostring(L, -1)) != LUA_OK) return lua_failed(h, top, err);
  lua_remove(L, -2);
  if (lua_pcall(L, 0, 1, 0) != LUA_OK || lua_pcall(L, 1, 1, 0) != LUA_OK) return lua_failed(h, top, err);
  return take_text(L, top, ((const render_args *)arg)->out, err);
}

int ff_render_kernels(ff_lua *h, const char *list, char **text, ff_error *err) {
  render_args a = {list, text};
  *text = NULL;
  return timed(h, render_kernels, &a, err);
}
