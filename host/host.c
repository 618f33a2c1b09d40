/* host.c - the embedded Lua state and the sandboxed description loader. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <lauxlib.h>
#include <lualib.h>
#include <openssl/evp.h>

#include "ff_io.h"
#include "ff_rt_schema.h"
#include "host.h"

#define STATE_MEMORY_LIMIT ((size_t)1 << 30)      /* the generator as a whole */
#define DESCRIPTION_MEMORY_LIMIT ((size_t)64 << 20) /* while a description runs */
#define DESCRIPTION_BUDGET 50000000L               /* VM instructions, ~0.2 s */
#define DESCRIPTION_SECONDS 2                      /* wall clock: the backstop of the budget */
#define DESCRIPTION_MAX_BYTES (1 << 20)
#define BUDGET_STEP 100 /* a VM step on a 30 MB string takes ~10 ms: check the clock often */
#define BYTES_PER_STEP 64 /* what a library function's byte of work costs in instructions */
#define MAX_ELEMENTS ((lua_Integer)1 << 24) /* table.move and string.rep: the most a call may do */
#define GENERATE_SECONDS 120.0                     /* default limit of one generator call */
#define GENERATE_STEP 1000

struct ff_lua {
  lua_State *L;
  size_t used, limit;
  long instructions; /* left in the description's budget */
  double deadline;   /* CLOCK_MONOTONIC seconds: the description's or the generator's */
  double seconds;    /* the generator's limit, for its message */
  int timed_out;     /* the generator passed its deadline */
};

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static ff_lua *host_of(lua_State *L) {
  void *h;
  lua_getallocf(L, &h);
  return h;
}

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
  const char *path = lua_pushfstring(L, "gen/%s.lua", name); /* Lua strings: no length limit */
  const ff_embedded_file *f = ff_embedded_find(path);
  if (!f) return luaL_error(L, "module '%s' is not built into fixformer", name);
  const char *chunk = lua_pushfstring(L, "@%s", path);
  if (luaL_loadbufferx(L, (const char *)f->data, f->size, chunk, "t") != LUA_OK) return lua_error(L);
  lua_replace(L, -3); /* the chunk where the path was, the chunk name popped */
  lua_pop(L, 1);
  lua_call(L, 0, 1);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    lua_pushboolean(L, 1);
  }
  lua_pushvalue(L, -1);
  lua_setfield(L, -3, name);
  return 1;
}

/* ---- the schema, for the validator ---------------------------------------- */

/* x as a Lua integer when it is one (the types a literal in Lua would have:
 * max_seq = 512, rope_theta = 10000, eps = 1e-5) */
static void push_number(lua_State *L, double x) {
  if (x == (double)(lua_Integer)x && x > -9007199254740992.0 && x < 9007199254740992.0)
    lua_pushinteger(L, (lua_Integer)x);
  else
    lua_pushnumber(L, x);
}

static void push_key(lua_State *L, const ff_rt_key *k) {
  const char *const *arches = ff_rt_keys[FF_KEY_arch].values; /* in enum ff_arch's order */
  lua_createtable(L, 0, 12);
  lua_pushstring(L, k->key);
  lua_setfield(L, -2, "key");
  lua_pushstring(L, ff_rt_key_kind_name(k->kind));
  lua_setfield(L, -2, "kind");
  lua_newtable(L);
  for (int j = 0; k->values[j]; j++) {
    lua_pushstring(L, k->values[j]);
    lua_rawseti(L, -2, j + 1);
  }
  lua_setfield(L, -2, "values");
  lua_pushboolean(L, k->required);
  lua_setfield(L, -2, "required");
  if (k->has_default) {
    if (k->kind == FF_KIND_BOOLEAN) lua_pushboolean(L, k->default_number != 0);
    else if (k->default_string) lua_pushstring(L, k->default_string);
    else push_number(L, k->default_number);
    lua_setfield(L, -2, "default");
  }
  if (k->default_of) {
    lua_pushstring(L, k->default_of);
    lua_setfield(L, -2, "default_of");
    lua_pushinteger(L, k->default_times);
    lua_setfield(L, -2, "times");
  }
  if (k->kind == FF_KIND_INT || k->kind == FF_KIND_NUMBER) {
    push_number(L, k->min);
    lua_setfield(L, -2, "min");
    push_number(L, k->max);
    lua_setfield(L, -2, "max");
  } else if (k->kind == FF_KIND_IDENTIFIER || k->kind == FF_KIND_STRING || k->kind == FF_KIND_PATH) {
    push_number(L, k->max);
    lua_setfield(L, -2, "maxlen");
  }
  lua_newtable(L); /* needs: { [condition name] = true } */
  for (int c = 0; c < FF_COND_COUNT; c++)
    if (k->needs >> c & 1u) {
      lua_pushboolean(L, 1);
      lua_setfield(L, -2, ff_rt_conditions[c].name);
    }
  lua_setfield(L, -2, "needs");
  lua_newtable(L); /* arches: { [arch] = true } */
  for (int a = 0; a < 3; a++)
    if (k->arches >> a & 1u) {
      lua_pushboolean(L, 1);
      lua_setfield(L, -2, arches[a]);
    }
  lua_setfield(L, -2, "arches");
}

/* require("ff_schema") -> { keys = { row, ... }, conditions = { row, ... } }:
 * include/ff_schema.h's keys in their order ({ key, kind, values, required,
 * default | default_of and times, min and max | maxlen, needs = { [condition]
 * = true }, arches = { [arch] = true } }) and its conditions in theirs
 * ({ name, key, test, value (IS: the word), why }) */
static void push_schema(lua_State *L) {
  lua_createtable(L, 0, 2);
  lua_createtable(L, FF_KEY_COUNT, 0);
  for (int i = 0; i < FF_KEY_COUNT; i++) {
    push_key(L, &ff_rt_keys[i]);
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, -2, "keys");
  lua_createtable(L, FF_COND_COUNT, 0);
  for (int i = 0; i < FF_COND_COUNT; i++) {
    const ff_rt_condition *c = &ff_rt_conditions[i];
    lua_createtable(L, 0, 5);
    lua_pushstring(L, c->name);
    lua_setfield(L, -2, "name");
    lua_pushstring(L, ff_rt_keys[c->key].key);
    lua_setfield(L, -2, "key");
    lua_pushstring(L, ff_rt_test_name(c->test));
    lua_setfield(L, -2, "test");
    if (c->test == FF_TEST_IS) {
      lua_pushstring(L, ff_rt_keys[c->key].values[c->value]);
      lua_setfield(L, -2, "value");
    }
    if (c->why) {
      lua_pushstring(L, c->why);
      lua_setfield(L, -2, "why");
    }
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, -2, "conditions");
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
  push_schema(L); /* the validator's schema, from include/ff_schema.h */
  lua_setfield(L, -2, "ff_schema");
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

/* ---- the generator's time limit ------------------------------------------ */

static void generate_hook(lua_State *L, lua_Debug *ar) {
  (void)ar;
  ff_lua *h = host_of(L);
  if (now() > h->deadline) {
    h->timed_out = 1;
    lua_pushliteral(L, "code generation took too long"); /* no position: ff_lua_generator_fail words it */
    lua_error(L);
  }
}

int ff_lua_time_limit(ff_lua *h, ff_error *err) {
  const char *env = getenv("FIXFORMER_GENERATE_SECONDS");
  double seconds = GENERATE_SECONDS;
  if (env && *env) {
    char *end;
    seconds = strtod(env, &end);
    if (*end || !(seconds > 0 && seconds <= 1e9)) /* also rejects NaN */
      return ff_fail(err, FF_EINVAL, "FIXFORMER_GENERATE_SECONDS: expected a number of seconds > 0, got '%.40s'",
                     env);
  }
  h->seconds = seconds;
  h->timed_out = 0;
  h->deadline = now() + seconds;
  lua_sethook(h->L, generate_hook, LUA_MASKCOUNT, GENERATE_STEP);
  return 0;
}

void ff_lua_time_limit_end(ff_lua *h) { lua_sethook(h->L, NULL, 0, 0); }

int ff_lua_generator_fail(ff_lua *h, ff_error *err) {
  if (h->timed_out)
    return ff_fail(err, FF_EINVAL, "code generation took longer than %g s (FIXFORMER_GENERATE_SECONDS sets the limit)",
                   h->seconds);
  const char *msg = lua_tostring(h->L, -1);
  return ff_fail(err, FF_EINVAL, "generator: %s", msg ? msg : "error");
}

void ff_sha256_hex(const void *data, size_t len, char hex[65]) {
  unsigned char md[32];
  unsigned int n = 0;
  EVP_Digest(data, len, md, &n, EVP_sha256(), NULL);
  ff_digest_hex(md, hex);
}

void ff_digest_hex(const unsigned char md[32], char hex[65]) {
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
  ff_lua *h = host_of(L);
  h->instructions -= BUDGET_STEP;
  if (h->instructions < 0)
    luaL_error(L, "the description ran too long (more than %d million instructions)",
               (int)(DESCRIPTION_BUDGET / 1000000));
  if (now() > h->deadline) luaL_error(L, "the description ran longer than %d s", DESCRIPTION_SECONDS);
}

/* Bills a library call's work to the budget (the count hook cannot see into
 * a C function) and checks the clock before it starts. */
static void charge(lua_State *L, double steps) {
  ff_lua *h = host_of(L);
  h->instructions -= steps < (double)DESCRIPTION_BUDGET ? (long)steps : DESCRIPTION_BUDGET;
  budget_hook(L, NULL);
  h->instructions += BUDGET_STEP; /* budget_hook took one step of its own */
}

static lua_Integer int_arg(lua_State *L, int i, lua_Integer dflt) {
  return lua_isnoneornil(L, i) ? dflt : luaL_checkinteger(L, i);
}

/* string.rep(s, n [, sep]): its loop runs n times even for "" */
static double cap_rep(lua_State *L) {
  size_t l, lsep = 0;
  luaL_checklstring(L, 1, &l);
  lua_Integer n = luaL_checkinteger(L, 2);
  luaL_optlstring(L, 3, "", &lsep);
  if (n <= 0) return 0;
  double bytes = (double)n * (double)(l + lsep);
  if (bytes > (double)DESCRIPTION_MEMORY_LIMIT)
    luaL_error(L, "string.rep: the result of %I repetitions would exceed the description's memory limit (%d MB)", n,
               (int)(DESCRIPTION_MEMORY_LIMIT >> 20));
  if (n > MAX_ELEMENTS)
    luaL_error(L, "string.rep: %I repetitions are more than the %I a description may ask for", n, MAX_ELEMENTS);
  return (double)n + bytes / BYTES_PER_STEP;
}

/* table.move(a1, f, e, t [, a2]): its loop runs e - f + 1 times, present or not */
static double cap_move(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_Integer f = luaL_checkinteger(L, 2), e = luaL_checkinteger(L, 3);
  luaL_checkinteger(L, 4);
  if (e < f) return 0;
  if (f <= 0 ? e >= MAX_ELEMENTS + f : e - f >= MAX_ELEMENTS)
    luaL_error(L, "table.move: elements %I to %I are more than the %I a description may move", f, e, MAX_ELEMENTS);
  return (double)(e - f + 1);
}

/* table.unpack(t [, i [, j]]) and table.concat(t [, sep [, i [, j]]]): j - i + 1 elements */
static double range_work(lua_State *L, int i_arg) {
  if (!lua_istable(L, 1)) return 0; /* the original says what is wrong */
  lua_Integer i = int_arg(L, i_arg, 1), j = int_arg(L, i_arg + 1, (lua_Integer)lua_rawlen(L, 1));
  return i > j ? 0 : (double)j - (double)i + 1;
}
static double cap_unpack(lua_State *L) { return range_work(L, 2); } /* the stack limits it (~1e6) */
static double cap_concat(lua_State *L) { /* stops at the first missing element */
  double n = range_work(L, 3), len = lua_istable(L, 1) ? (double)lua_rawlen(L, 1) + 1 : 0;
  return n < len ? n : len;
}

/* table.insert, table.remove shift up to #t elements; table.sort compares n log n times */
static double cap_shift(lua_State *L) { return lua_istable(L, 1) ? (double)lua_rawlen(L, 1) : 0; }
static double cap_sort(lua_State *L) {
  double n = cap_shift(L), log2n = 1;
  for (double m = n; m > 1; m /= 2) log2n++;
  return n * log2n;
}

/* What a call costs: its arguments and results, their strings' bytes. */
static double values_work(lua_State *L, int from, int to) {
  double work = to - from + 1;
  for (int i = from; i <= to; i++)
    if (lua_type(L, i) == LUA_TSTRING) work += (double)lua_rawlen(L, i) / BYTES_PER_STEP;
  return work;
}

/* A library function as a description sees it: upvalues (the original,
 * a light userdata to its cap or NULL). */
static int metered(lua_State *L) {
  int n = lua_gettop(L);
  double (*cap)(lua_State *) = (double (*)(lua_State *))(uintptr_t)lua_touserdata(L, lua_upvalueindex(2));
  charge(L, values_work(L, 1, n) + (cap ? cap(L) : 0));
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, n, LUA_MULTRET);
  charge(L, values_work(L, 1, lua_gettop(L)));
  return lua_gettop(L);
}

typedef struct {
  const char *name;
  double (*cap)(lua_State *);
} sandbox_fn;

/* Copies lib's functions (NULL: the globals) named in fns into the table on
 * top, each metered; non-functions (math.pi, utf8.charpattern) as they are. */
static void copy_metered(lua_State *L, const char *lib, const sandbox_fn *fns, int meter) {
  if (lib) lua_getglobal(L, lib);
  else lua_pushglobaltable(L);
  for (const sandbox_fn *f = fns; f->name; f++) {
    if (lua_getfield(L, -1, f->name) == LUA_TFUNCTION && meter) {
      lua_pushlightuserdata(L, (void *)(uintptr_t)f->cap);
      lua_pushcclosure(L, metered, 2);
    }
    lua_setfield(L, -3, f->name);
  }
  lua_pop(L, 1);
}

/* __index of the description's environment and of its library tables
 * (upvalue: "" or "math." ...): reading a name never set is an error naming
 * the file and line, not nil, which would leave its key out and the default
 * in place (`activation = gelu` unquoted, `eps = inf`, `math.inf`). */
static int undefined_name(lua_State *L) {
  const char *lib = lua_tostring(L, lua_upvalueindex(1));
  if (lua_type(L, 2) != LUA_TSTRING) return luaL_error(L, "undefined name %s[%s]", lib, luaL_typename(L, 2));
  static const char *const withheld[] = {"io", "os", "require", "load", "loadfile", "dofile", "debug", "package",
                                         "collectgarbage", "pcall", "xpcall", "getmetatable", "setmetatable",
                                         "rawset", "print", "coroutine", NULL}; /* Lua's, not a description's */
  const char *name = lua_tostring(L, 2);
  if (*lib) return luaL_error(L, "undefined name '%s%s'", lib, name);
  for (int i = 0; withheld[i]; i++)
    if (!strcmp(name, withheld[i])) return luaL_error(L, "undefined name '%s' (not available to a description)", name);
  return luaL_error(L, "undefined name '%s' (a string needs quotes: \"%s\")", name, name);
}

/* Gives the table on top a metatable whose __index is undefined_name for
 * library lib (NULL: the environment itself). */
static void refuse_undefined(lua_State *L, const char *lib) {
  lua_createtable(L, 0, 1);
  if (lib) lua_pushfstring(L, "%s.", lib);
  else lua_pushliteral(L, "");
  lua_pushcclosure(L, undefined_name, 1);
  lua_setfield(L, -2, "__index");
  lua_setmetatable(L, -2);
}

/* What a description may call: pure functions on numbers, strings, tables.
 * Each function that loops over a string or a table is metered: its work is
 * billed to the budget and the clock checked (the count hook does not fire
 * inside a C function); the ones whose loop an argument sets are capped.
 * The rest do work bounded by their arguments. */
static void push_sandbox_env(lua_State *L) {
  /* no pcall: a description must not catch its own budget error.  error and
   * assert stay bare so error() still names the description's line. */
  static const sandbox_fn bare[] = {{"assert", NULL}, {"error", NULL},    {"ipairs", NULL}, {"next", NULL},
                                    {"pairs", NULL},  {"rawequal", NULL}, {"rawget", NULL}, {"rawlen", NULL},
                                    {"select", NULL}, {"type", NULL},     {NULL, NULL}};
  static const sandbox_fn base[] = {{"tonumber", NULL}, {"tostring", NULL}, {NULL, NULL}};
  static const sandbox_fn string_fns[] = {{"byte", NULL},  {"char", NULL},    {"format", NULL},
                                          {"len", NULL},   {"lower", NULL},   {"rep", cap_rep},
                                          {"reverse", NULL}, {"sub", NULL},   {"upper", NULL},
                                          {NULL, NULL}}; /* no patterns: no backtracking hangs */
  static const sandbox_fn table_fns[] = {{"concat", cap_concat}, {"insert", cap_shift}, {"move", cap_move},
                                         {"pack", NULL},         {"remove", cap_shift}, {"sort", cap_sort},
                                         {"unpack", cap_unpack}, {NULL, NULL}};
  static const sandbox_fn utf8_fns[] = {{"char", NULL}, {"charpattern", NULL}, {"codepoint", NULL},
                                        {"codes", NULL}, {"len", NULL},        {"offset", NULL},
                                        {NULL, NULL}};
  static const sandbox_fn math_fns[] = { /* numbers in, numbers out: O(arguments) */
      {"abs", NULL},   {"acos", NULL},       {"asin", NULL},  {"atan", NULL},       {"atan2", NULL},
      {"ceil", NULL},  {"cos", NULL},        {"cosh", NULL},  {"deg", NULL},        {"exp", NULL},
      {"floor", NULL}, {"fmod", NULL},       {"frexp", NULL}, {"huge", NULL},       {"ldexp", NULL},
      {"log", NULL},   {"log10", NULL},      {"max", NULL},   {"maxinteger", NULL}, {"min", NULL},
      {"mininteger", NULL}, {"modf", NULL},  {"pi", NULL},    {"pow", NULL},        {"rad", NULL},
      {"random", NULL}, {"randomseed", NULL}, {"sin", NULL},  {"sinh", NULL},       {"sqrt", NULL},
      {"tan", NULL},   {"tanh", NULL},       {"tointeger", NULL}, {"type", NULL},   {"ult", NULL},
      {NULL, NULL}}; /* those of Lua 5.4 built with LUA_COMPAT_MATHLIB (Debian's), absent ones nil */
  static const struct {
    const char *name;
    const sandbox_fn *fns;
    int meter;
  } libs[] = {{"string", string_fns, 1}, {"table", table_fns, 1}, {"utf8", utf8_fns, 1}, {"math", math_fns, 0}};
  lua_newtable(L);
  copy_metered(L, NULL, bare, 0);
  copy_metered(L, NULL, base, 1);
  for (size_t i = 0; i < sizeof libs / sizeof *libs; i++) { /* copies, so a description cannot patch ours */
    lua_newtable(L);
    copy_metered(L, libs[i].name, libs[i].fns, libs[i].meter);
    refuse_undefined(L, libs[i].name);
    lua_setfield(L, -2, libs[i].name);
  }
  refuse_undefined(L, NULL);
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
  h->deadline = now() + DESCRIPTION_SECONDS;
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

/* key's string into dst[n]; validate.lua bounds every one well below n */
static int get_str(lua_State *L, int t, const char *k, char *dst, size_t n, const char *path, ff_error *err) {
  lua_getfield(L, t, k);
  size_t len = 0;
  const char *s = lua_tolstring(L, -1, &len);
  int rc = 0;
  if (s && (len >= n || strlen(s) != len))
    rc = ff_fail(err, FF_EINVAL, "%s: %s: longer than %zu bytes or contains NUL", path, k, n - 1);
  else
    memcpy(dst, s ? s : "", s ? len + 1 : 1);
  lua_pop(L, 1);
  return rc;
}

/* key's file name, relative to the description's folder unless absolute;
 * one that does not fit dst[n] is an error, never cut short */
static int get_path(lua_State *L, int t, const char *k, const char *description, char *dst, size_t n,
                    ff_error *err) {
  lua_getfield(L, t, k);
  size_t len = 0;
  const char *s = lua_tolstring(L, -1, &len);
  const char *slash = strrchr(description, '/');
  size_t dir = s && s[0] != '/' && slash ? (size_t)(slash - description) + 1 : 0; /* with its slash */
  int rc = 0;
  size_t shown = strlen(description) > 200 ? strlen(description) - 200 : 0; /* the message holds 511 bytes */
  if (s && (strlen(s) != len || dir + len >= n))
    rc = ff_fail(err, FF_EINVAL, "%s%s: %s: the resolved path is longer than %zu bytes", shown ? "..." : "",
                 description + shown, k, n - 1);
  else if (!s)
    dst[0] = 0;
  else {
    memcpy(dst, description, dir);
    memcpy(dst + dir, s, len + 1);
  }
  lua_pop(L, 1);
  return rc;
}

/* The validated table (at t) -> ff_config: each key of include/ff_schema.h
 * into its field (`layers` has none: validate.lua resolved it). */
static int table_to_config(lua_State *L, int t, ff_config *c, const char *path, ff_error *err) {
  static const size_t sizes[] = {FF_NAME_MAX, FF_TENSOR_NAME_MAX, FF_PATH_MAX}; /* FF_STORE_NAME .. _PATH */
  memset(c, 0, sizeof *c);
  for (int i = 0; i < FF_KEY_COUNT; i++) {
    const ff_rt_key *k = &ff_rt_keys[i];
    char *field = (char *)c + k->offset;
    int rc = 0;
    if (k->store == FF_STORE_NONE) continue;
    if (k->store == FF_STORE_PATH) rc = get_path(L, t, k->key, path, field, sizes[k->store], err);
    else if (k->store <= FF_STORE_PATH) rc = get_str(L, t, k->key, field, sizes[k->store], path, err);
    if (rc) return rc;
    if (k->store <= FF_STORE_PATH) continue;
    lua_getfield(L, t, k->key);
    if (k->store == FF_STORE_FLOAT) {
      float f = (float)lua_tonumber(L, -1);
      memcpy(field, &f, sizeof f);
    } else if (k->store == FF_STORE_ENUM) { /* its word's index: the C enum's value */
      const char *w = lua_tostring(L, -1);
      int e = 0;
      for (int j = 0; w && k->values[j]; j++)
        if (!strcmp(w, k->values[j])) e = j;
      enum ff_arch x = (enum ff_arch)e; /* every key's enum has the size of an enum */
      memcpy(field, &x, sizeof x);
    } else {
      int v = k->store == FF_STORE_INT    ? (int)lua_tointeger(L, -1)
              : k->store == FF_STORE_BOOL ? lua_toboolean(L, -1)
                                          : !lua_toboolean(L, -1); /* NOT: the key's negation */
      memcpy(field, &v, sizeof v);
    }
    lua_pop(L, 1);
  }
  return 0;
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
  uint8_t *text;
  size_t len;
  int rc = ff_read_file(path, &text, &len, err);
  if (rc) return rc;
  rc = ff_lua_load_config_text(h, path, (const char *)text, len, out, err);
  free(text);
  return rc;
}

int ff_lua_load_config_text(ff_lua *h, const char *path, const char *text, size_t len, ff_config *out,
                            ff_error *err) {
  lua_State *L = h->L;
  int rc, status, top = lua_gettop(L);
  if (len > DESCRIPTION_MAX_BYTES)
    return ff_fail(err, FF_EINVAL, "%s: description larger than %d bytes", path, DESCRIPTION_MAX_BYTES);
  lua_pushfstring(L, "@%s", path);
  status = luaL_loadbufferx(L, text, len, lua_tostring(L, -1), "t"); /* text only: no bytecode */
  char hex[65];
  ff_sha256_hex(text, len, hex);
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
  if ((rc = table_to_config(L, lua_gettop(L), out, path, err))) goto done;
  lua_setfield(L, LUA_REGISTRYINDEX, "ff.config");
  lua_pushstring(L, hex);
  lua_setfield(L, LUA_REGISTRYINDEX, "ff.sha256");
  lua_settop(L, top);
  return 0;
done:
  lua_settop(L, top);
  return rc;
}

/* ---- the description's train block ------------------------------------------ */

static int by_string(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* value at idx as the flags' text: integers, numbers that read back exactly,
 * strings, and lists joined by commas; into buf[n] */
static void train_value_text(lua_State *L, int idx, char *buf, size_t n) {
  buf[0] = 0;
  if (lua_type(L, idx) == LUA_TTABLE) {
    size_t at = 0;
    for (lua_Integer i = 1; lua_rawgeti(L, idx, i) != LUA_TNIL && at < n; i++) {
      char one[64];
      train_value_text(L, lua_gettop(L), one, sizeof one);
      at += (size_t)snprintf(buf + at, n - at, "%s%s", i > 1 ? "," : "", one);
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
  } else if (lua_type(L, idx) == LUA_TBOOLEAN) {
    snprintf(buf, n, "%s", lua_toboolean(L, idx) ? "true" : "false");
  } else if (lua_isinteger(L, idx)) {
    snprintf(buf, n, "%lld", (long long)lua_tointeger(L, idx));
  } else if (lua_type(L, idx) == LUA_TNUMBER) {
    snprintf(buf, n, "%.17g", (double)lua_tonumber(L, idx));
  } else {
    const char *s = lua_tostring(L, idx);
    snprintf(buf, n, "%s", s ? s : "");
  }
}

int ff_lua_train_block(ff_lua *h, int (*fn)(void *, const char *, const char *, ff_error *), void *ctx,
                       ff_error *err) {
  lua_State *L = h->L;
  int top = lua_gettop(L), rc = 0, n = 0;
  char *keys[64];
  lua_getfield(L, LUA_REGISTRYINDEX, "ff.config");
  if (lua_type(L, -1) != LUA_TTABLE || lua_getfield(L, -1, "train") != LUA_TTABLE) {
    lua_settop(L, top);
    return 0;
  }
  int t = lua_gettop(L);
  lua_pushnil(L);
  while (n < 64 && lua_next(L, t)) { /* validate.lua: string keys, a known few */
    keys[n++] = (char *)lua_tostring(L, -2);
    lua_pop(L, 1);
  }
  qsort(keys, (size_t)n, sizeof *keys, by_string); /* the same order every time */
  for (int i = 0; i < n && !rc; i++) {
    char value[512];
    lua_getfield(L, t, keys[i]);
    train_value_text(L, lua_gettop(L), value, sizeof value);
    lua_pop(L, 1);
    rc = fn(ctx, keys[i], value, err);
  }
  lua_settop(L, top);
  return rc;
}
