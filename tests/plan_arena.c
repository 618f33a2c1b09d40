/* plan_arena.c - runs a Lua test file in the generator's own Lua state (the
 * embedded modules: require("plan") is the plan.lua compiled into fixformer).
 *
 *   plan_arena TEST.lua      exit 0 when the chunk runs without error
 *
 * Used by tests/plan_arena.lua, the arena placer's unit test (issue 10,
 * item 14). */
#include <lauxlib.h>
#include <lua.h>
#include <stdio.h>

#include "host.h"

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: plan_arena TEST.lua\n");
    return 2;
  }
  ff_error err = {0};
  ff_lua *h = ff_lua_open(&err);
  if (!h) {
    fprintf(stderr, "plan_arena: %s\n", err.msg);
    return 1;
  }
  lua_State *L = ff_lua_state(h);
  int rc = luaL_loadfilex(L, argv[1], "t") || lua_pcall(L, 0, 0, 0);
  if (rc) fprintf(stderr, "plan_arena: %s\n", lua_tostring(L, -1));
  ff_lua_close(h);
  return rc ? 1 : 0;
}
