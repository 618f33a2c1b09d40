/* lua_clash.c - an application with its own Lua 5.4 that also uses
 * libfixformer (which runs its generator on a private, hidden Lua): both work
 * in one program.  Prints the app's Lua result, the library's version, and the
 * model's name.   lua_clash MODEL.lua */
#include <stdio.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "fixformer.h"

int main(int argc, char **argv) {
  if (argc != 2) return 2;
  lua_State *L = luaL_newstate(); /* the application's Lua */
  luaL_openlibs(L);
  if (luaL_dostring(L, "return _VERSION .. ' ' .. (6 * 7)")) return 1;
  printf("app lua: %s\n", lua_tostring(L, -1));
  ff_error err = {0, ""};
  ff_model *m = ff_model_open(argv[1], &err); /* fixformer's Lua */
  if (!m) {
    fprintf(stderr, "lua_clash: %s\n", err.msg);
    return 1;
  }
  printf("fixformer %s (header %s, %d.%d.%d): model %s\n", ff_version(), FF_VERSION, FF_VERSION_MAJOR,
         FF_VERSION_MINOR, FF_VERSION_PATCH, ff_model_config(m)->name);
  ff_model_close(m);
  if (luaL_dostring(L, "return string.rep('ok', 2)")) return 1; /* the app's Lua still its own */
  printf("app lua again: %s\n", lua_tostring(L, -1));
  lua_close(L);
  return 0;
}
