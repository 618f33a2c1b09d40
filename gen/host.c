/* host.c - the embedded Lua state and the sandboxed description loader. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lualib.h>
#include <openssl/evp.h>

#include "ff_io.h"
#include "host.h"

#define STATE_MEMORY_LIMIT ((size_t)1 << 30)      /* the generator as a whole */
#define DESCRIPTION_MEMORY_LIMIT ((size_t)64 << 20) /* while a description runs */
#define DESCRIPTION_BUDGET 50000000L               /* VM instructions, ~0.2 s */
#define DESCRIPTION_MAX_BYTES (1 << 20)
#define BUDGET_STEP 10000

struct ff_lua {
  lua_State *L;
  size_t used, limit;
  long instructions; /* left in the description's budget */
};

static void *limited_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  ff_lua *h = ud;
  if (!ptr) osize = 0;
  if (nsize == 0) {
    free(ptr);
    h->used -= osize;
    return NULL;
  }
  if (nsize > osize && h->used - osize + nsize > h->limit) return NULL; /* Lua raises "not enough memory" */
  void *p = realloc(ptr, nsize);
  if (p) h->used = h->used - osize + nsize;
  return p;
}

const ff_embedded_file *ff_embedded_find(const char *name) {
  for (int i = 0; i < ff_embedded_count; i++)
    if (!strcmp(ff_embedded_files[i].name, name)) return &ff_embedded_files[i];
  return NULL;
}

/* require(name): loads gen/NAME.lua from the binary, never from disk */
static int embedded_require(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  lua_getfield(L, LUA_REGISTRYINDEX, "ff.loaded");
  if (lua_getfield(L, -1, name) != LUA_TNIL) return 1;
  lua_pop(L, 1);
  char path[128];
  snprintf(path, sizeof path, "gen/%s.lua", name);
  const ff_embedded_file *f = ff_embedded_find(path);
  if (!f) return luaL_error(L, "module '%s' is not built into fixformer", name);
  char chunk[160];
  snprintf(chunk, sizeof chunk, "@%s", path);
  if (luaL_loadbufferx(L, (const char *)f->data, f->size, chunk, "t") != LUA_OK) return lua_error(L);
  lua_call(L, 0, 1);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    lua_pushboolean(L, 1);
  }
  lua_pushvalue(L, -1);
  lua_setfield(L, -3, name);
  return 1;
}

ff_lua *ff_lua_open(ff_error *err) {
  ff_lua *h = calloc(1, sizeof *h);
  if (!h) {
    ff_fail(err, FF_ENOMEM, "out of memory");
    return NULL;
  }
  h->limit = STATE_MEMORY_LIMIT;
  h->L = lua_newstate(limited_alloc, h);
  if (!h->L) {
    free(h);
    ff_fail(err, FF_ENOMEM, "cannot create a Lua state");
    return NULL;
  }
  lua_State *L = h->L;
  static const luaL_Reg libs[] = {{LUA_GNAME, luaopen_base},      {LUA_STRLIBNAME, luaopen_string},
                                  {LUA_TABLIBNAME, luaopen_table}, {LUA_MATHLIBNAME, luaopen_math},
                                  {LUA_UTF8LIBNAME, luaopen_utf8}, {NULL, NULL}};
  for (const luaL_Reg *lib = libs; lib->func; lib++) {
    luaL_requiref(L, lib->name, lib->func, 1);
    lua_pop(L, 1);
  }
  /* no bytecode in or out: string.dump gone, and loadfile/dofile read disk */
  lua_getglobal(L, "string");
  lua_pushnil(L);
  lua_setfield(L, -2, "dump");
  lua_pop(L, 1);
  lua_pushnil(L);
  lua_setglobal(L, "loadfile");
  lua_pushnil(L);
  lua_setglobal(L, "dofile");
  lua_newtable(L);
  lua_setfield(L, LUA_REGISTRYINDEX, "ff.loaded");
  lua_register(L, "require", embedded_require);
  return h;
}

lua_State *ff_lua_state(ff_lua *h) { return h->L; }

void ff_lua_close(ff_lua *h) {
  if (!h) return;
  lua_close(h->L);
  free(h);
}

void ff_sha256_hex(const void *data, size_t len, char hex[65]) {
  unsigned char md[32];
  unsigned int n = 0;
  EVP_Digest(data, len, md, &n, EVP_sha256(), NULL);
  for (int i = 0; i < 32; i++) {
    static const char digits[] = "0123456789abcdef";
    hex[2 * i] = digits[md[i] >> 4];
    hex[2 * i + 1] = digits[md[i] & 15];
  }
  hex[64] = 0;
}

/* ---- the description sandbox ------------------------------------------- */

static void budget_hook(lua_State *L, lua_Debug *ar) {
  (void)ar;
  ff_lua *h;
  lua_getallocf(L, (void **)&h);
  h->instructions -= BUDGET_STEP;
  if (h->instructions < 0)
    luaL_error(L, "the description ran too long (more than %d million instructions)",
               (int)(DESCRIPTION_BUDGET / 1000000));
}

/* What a description may call: pure functions on numbers, strings, tables. */
static void push_sandbox_env(lua_State *L) {
  /* no pcall: a description must not catch its own budget error */
  static const char *const base[] = {"assert", "error",    "ipairs",   "next", "pairs", "rawequal", "rawget",
                                     "rawlen", "select",   "tonumber", "tostring", "type", NULL};
  static const char *const string_fns[] = {"byte", "char", "format", "len", "lower", "rep",
                                           "reverse", "sub", "upper", NULL}; /* no patterns: no backtracking hangs */
  static const char *const libs[] = {"math", "table", "utf8", NULL};
  lua_newtable(L);
  for (const char *const *n = base; *n; n++) {
    lua_getglobal(L, *n);
    lua_setfield(L, -2, *n);
  }
  for (const char *const *lib = libs; *lib; lib++) { /* copies, so a description cannot patch ours */
    lua_newtable(L);
    lua_getglobal(L, *lib);
    lua_pushnil(L);
    while (lua_next(L, -2)) {
      lua_pushvalue(L, -2);
      lua_insert(L, -2);
      lua_settable(L, -5);
    }
    lua_pop(L, 1);
    lua_setfield(L, -2, *lib);
  }
  lua_newtable(L);
  lua_getglobal(L, "string");
  for (const char *const *n = string_fns; *n; n++) {
    lua_getfield(L, -1, *n);
    lua_setfield(L, -3, *n);
  }
  lua_pop(L, 1);
  lua_setfield(L, -2, "string");
}

/* Copies the description's table with raw access (no metamethods run after
 * the sandbox closes): string keys; numbers, strings, booleans and nested
 * tables of them as values. */
static int copy_plain(lua_State *L, int src, int depth, const char *path, ff_error *err) {
  if (depth > 8) return ff_fail(err, FF_EINVAL, "%s: tables nested too deeply", path);
  lua_newtable(L);
  int dst = lua_gettop(L);
  lua_pushnil(L);
  while (lua_next(L, src)) {
    int kt = lua_type(L, -2), vt = lua_type(L, -1);
    if (kt != LUA_TSTRING && !(depth > 0 && kt == LUA_TNUMBER)) {
      lua_pop(L, 3);
      return ff_fail(err, FF_EINVAL, "%s: keys must be names, got a %s key", path, lua_typename(L, kt));
    }
    if (vt == LUA_TTABLE) {
      int rc = copy_plain(L, lua_gettop(L), depth + 1, path, err);
      if (rc) {
        lua_pop(L, 3);
        return rc;
      }
      lua_replace(L, -2);
    } else if (vt != LUA_TNUMBER && vt != LUA_TSTRING && vt != LUA_TBOOLEAN) {
      const char *key = kt == LUA_TSTRING ? lua_tostring(L, -2) : "(index)";
      ff_fail(err, FF_EINVAL, "%s: %s: expected a number, string, boolean or table, got %s", path, key,
              lua_typename(L, vt));
      lua_pop(L, 3);
      return FF_EINVAL;
    }
    lua_pushvalue(L, -2);
    lua_insert(L, -2);
    lua_rawset(L, dst);
  }
  return 0;
}

/* Runs the chunk on top of the stack under the budget and memory limit;
 * strings index a pattern-free string table meanwhile. */
static int run_sandboxed(ff_lua *h, int *status) {
  lua_State *L = h->L;
  size_t saved_limit = h->limit;
  lua_pushliteral(L, "");
  lua_getmetatable(L, -1);           /* the shared string metatable */
  lua_getfield(L, -1, "__index");    /* the real string library */
  lua_getupvalue(L, -4, 1);          /* the chunk's _ENV */
  lua_getfield(L, -1, "string");
  lua_setfield(L, -4, "__index");    /* ("x"):find is gone while the description runs */
  lua_pop(L, 1);
  lua_pushvalue(L, -4);              /* the chunk */
  h->instructions = DESCRIPTION_BUDGET;
  h->limit = h->used + DESCRIPTION_MEMORY_LIMIT < saved_limit ? h->used + DESCRIPTION_MEMORY_LIMIT : saved_limit;
  lua_sethook(L, budget_hook, LUA_MASKCOUNT, BUDGET_STEP);
  *status = lua_pcall(L, 0, 1, 0);
  lua_sethook(L, NULL, 0, 0);
  h->limit = saved_limit;
  /* stack: chunk "" mt realstring result */
  lua_pushvalue(L, -2);
  lua_setfield(L, -4, "__index");
  lua_replace(L, -5); /* result where the chunk was */
  lua_pop(L, 3);
  return *status;
}

static int get_int(lua_State *L, int t, const char *k) {
  lua_getfield(L, t, k);
  int v = (int)lua_tointeger(L, -1);
  lua_pop(L, 1);
  return v;
}

static int get_enum(lua_State *L, int t, const char *k, const char *const *names) {
  lua_getfield(L, t, k);
  const char *s = lua_tostring(L, -1);
  int v = 0;
  for (int i = 0; s && names[i]; i++)
    if (!strcmp(s, names[i])) v = i;
  lua_pop(L, 1);
  return v;
}

static void get_str(lua_State *L, int t, const char *k, char *dst, size_t n) {
  lua_getfield(L, t, k);
  const char *s = lua_tostring(L, -1);
  snprintf(dst, n, "%s", s ? s : "");
  lua_pop(L, 1);
}

/* The validated table (at t) -> ff_config.  Names in the order of the enums. */
static void table_to_config(lua_State *L, int t, ff_config *c) {
  static const char *const arch[] = {"encoder", "decoder-only", "encoder-decoder", NULL};
  static const char *const place[] = {"post", "pre", NULL};
  static const char *const kind[] = {"layernorm", "rmsnorm", NULL};
  static const char *const act[] = {"relu", "gelu", "gelu_tanh", "swiglu", NULL};
  static const char *const pos[] = {"none", "sinusoidal", "learned", "rope", NULL};
  memset(c, 0, sizeof *c);
  get_str(L, t, "name", c->name, sizeof c->name);
  c->arch = (enum ff_arch)get_enum(L, t, "arch", arch);
  c->d_model = get_int(L, t, "d_model");
  c->heads = get_int(L, t, "heads");
  c->d_ff = get_int(L, t, "d_ff");
  c->encoder_layers = get_int(L, t, "encoder_layers");
  c->decoder_layers = get_int(L, t, "decoder_layers");
  c->norm = (enum ff_norm_place)get_enum(L, t, "norm", place);
  c->norm_kind = (enum ff_norm_kind)get_enum(L, t, "norm_kind", kind);
  lua_getfield(L, t, "final_norm");
  c->final_norm = lua_toboolean(L, -1);
  lua_getfield(L, t, "eps");
  c->eps = (float)lua_tonumber(L, -1);
  lua_pop(L, 2);
  c->activation = (enum ff_activation)get_enum(L, t, "activation", act);
  lua_getfield(L, t, "bias");
  c->bias = lua_toboolean(L, -1);
  lua_pop(L, 1);
  c->vocab = get_int(L, t, "vocab");
  c->positional = (enum ff_positional)get_enum(L, t, "positional", pos);
  lua_getfield(L, t, "rope_theta");
  c->rope_theta = (float)lua_tonumber(L, -1);
  lua_getfield(L, t, "scale_embeddings");
  c->scale_embeddings = lua_toboolean(L, -1);
  lua_getfield(L, t, "tie_embeddings");
  c->tie_embeddings = lua_toboolean(L, -1);
  lua_pop(L, 3);
  c->max_seq = get_int(L, t, "max_seq");
  get_str(L, t, "prefix", c->prefix, sizeof c->prefix);
  get_str(L, t, "embed_weight", c->embed_weight, sizeof c->embed_weight);
  get_str(L, t, "pos_embed_weight", c->pos_embed_weight, sizeof c->pos_embed_weight);
  get_str(L, t, "lm_head_weight", c->lm_head_weight, sizeof c->lm_head_weight);
}

/* key's file name, relative to the description's folder unless absolute */
static void get_path(lua_State *L, int t, const char *k, const char *description, char *dst, size_t n) {
  lua_getfield(L, t, k);
  const char *s = lua_tostring(L, -1);
  const char *slash = strrchr(description, '/');
  if (!s)
    dst[0] = 0;
  else if (s[0] == '/' || !slash)
    snprintf(dst, n, "%s", s);
  else
    snprintf(dst, n, "%.*s/%s", (int)(slash - description), description, s);
  lua_pop(L, 1);
}

/* validate.validate(desc, path) under pcall; leaves the config table */
static int call_validate(lua_State *L, int desc, const char *path, ff_error *err) {
  lua_getglobal(L, "require");
  lua_pushliteral(L, "validate");
  if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
    ff_fail(err, FF_EINVAL, "internal: %s", lua_tostring(L, -1));
    lua_pop(L, 1);
    return FF_EINVAL;
  }
  lua_getfield(L, -1, "validate");
  lua_remove(L, -2);
  lua_pushvalue(L, desc);
  lua_pushstring(L, path);
  if (lua_pcall(L, 2, 1, 0) != LUA_OK) {
    ff_fail(err, FF_EINVAL, "%s", lua_tostring(L, -1));
    lua_pop(L, 1);
    return FF_EINVAL;
  }
  return 0;
}

int ff_lua_load_config(ff_lua *h, const char *path, ff_config *out, ff_error *err) {
  lua_State *L = h->L;
  uint8_t *text;
  size_t len;
  int rc, status, top = lua_gettop(L);
  if ((rc = ff_read_file(path, &text, &len, err))) return rc;
  if (len > DESCRIPTION_MAX_BYTES) {
    free(text);
    return ff_fail(err, FF_EINVAL, "%s: description larger than %d bytes", path, DESCRIPTION_MAX_BYTES);
  }
  lua_pushfstring(L, "@%s", path);
  status = luaL_loadbufferx(L, (const char *)text, len, lua_tostring(L, -1), "t"); /* text only: no bytecode */
  char hex[65];
  ff_sha256_hex(text, len, hex);
  free(text);
  lua_remove(L, -2);
  if (status != LUA_OK) { /* syntax errors name the file already; "binary chunk" does not */
    const char *msg = status == LUA_ERRMEM ? "out of memory" : lua_tostring(L, -1);
    if (msg && !strncmp(msg, path, strlen(path)))
      rc = ff_fail(err, FF_EINVAL, "%s", msg);
    else
      rc = ff_fail(err, FF_EINVAL, "%s: %s", path, msg ? msg : "cannot load");
    goto done;
  }
  push_sandbox_env(L);
  lua_setupvalue(L, -2, 1); /* the chunk's _ENV */
  if (run_sandboxed(h, &status) != LUA_OK) {
    const char *msg = lua_tostring(L, -1);
    if (status == LUA_ERRMEM) msg = "not enough memory (the description exceeded its memory limit)";
    if (msg && !strncmp(msg, path, strlen(path)))
      rc = ff_fail(err, FF_EINVAL, "%s", msg);
    else
      rc = ff_fail(err, FF_EINVAL, "%s: %s", path, msg ? msg : "error object is not a string");
    goto done;
  }
  if (!lua_istable(L, -1)) {
    rc = ff_fail(err, FF_EINVAL, "%s: the description must return a table, got %s", path, luaL_typename(L, -1));
    goto done;
  }
  if ((rc = copy_plain(L, lua_gettop(L), 0, path, err))) goto done;
  if ((rc = call_validate(L, lua_gettop(L), path, err))) goto done;
  table_to_config(L, lua_gettop(L), out);
  get_path(L, lua_gettop(L), "weights", path, out->weights, sizeof out->weights);
  get_path(L, lua_gettop(L), "vocabulary", path, out->vocabulary, sizeof out->vocabulary);
  lua_setfield(L, LUA_REGISTRYINDEX, "ff.config");
  lua_pushstring(L, hex);
  lua_setfield(L, LUA_REGISTRYINDEX, "ff.sha256");
  lua_settop(L, top);
  return 0;
done:
  lua_settop(L, top);
  return rc;
}
