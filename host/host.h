/* host.h - the embedded Lua 5.4 the generator runs in: a state with a
 * memory limit, the project's Lua modules compiled into the binary, and the
 * sandboxed loader for model descriptions.  Private to host/. */
#ifndef FF_HOST_H
#define FF_HOST_H

#include <lua.h>

#include "ff_config.h"
#include "ff_error.h"

typedef struct ff_lua ff_lua;

/* A new Lua state with base, string, table, math and utf8 (no io, os,
 * package or debug), `require` for the embedded modules only, and a memory
 * limit through its allocator. */
ff_lua *ff_lua_open(ff_error *err);
lua_State *ff_lua_state(ff_lua *h);
void ff_lua_close(ff_lua *h);

/* Runs the description at path in a sandbox (empty environment, text chunks
 * only, an instruction budget that library calls are billed to, a 2 s
 * wall-clock limit and a memory limit), validates it and fills
 * *out.  Keeps the resolved config table and the sha256 of the file in the
 * registry ("ff.config", "ff.sha256") for the generator. */
int ff_lua_load_config(ff_lua *h, const char *path, ff_config *out, ff_error *err);
/* The same on a description's text held in memory, as if read from path. */
int ff_lua_load_config_text(ff_lua *h, const char *path, const char *text, size_t len, ff_config *out,
                            ff_error *err);

/* The validated description's train = {...} block, key by key in sorted
 * order, each value as a flag's text (lists joined by commas):
 * fn(ctx, key, value, err) until it returns non-zero.  No block: nothing. */
int ff_lua_train_block(ff_lua *h, int (*fn)(void *ctx, const char *key, const char *value, ff_error *err), void *ctx,
                       ff_error *err);

/* The generator's wall-clock limit: from ff_lua_time_limit (which reads
 * FIXFORMER_GENERATE_SECONDS, default 120; fails on a bad value) to
 * ff_lua_time_limit_end, a count hook raises an error once it has passed.
 * After a failed lua_pcall in between, ff_lua_generator_fail turns the error
 * on top of the stack into err: "generator: MSG", or "code generation took
 * longer than N s" when the limit was the cause. */
int ff_lua_time_limit(ff_lua *h, ff_error *err);
void ff_lua_time_limit_end(ff_lua *h);
int ff_lua_generator_fail(ff_lua *h, ff_error *err);

/* sha256 of data as 64 hex characters and a NUL (OpenSSL's libcrypto). */
void ff_sha256_hex(const void *data, size_t len, char hex[65]);
/* A sha256 digest's 32 bytes as 64 hex characters. */
void ff_digest_hex(const unsigned char md[32], char hex[65]);

/* Embedded files (the Lua modules of gen/, templates/ and kernels/), made by the build. */
typedef struct {
  const char *name; /* path relative to the source tree, e.g. "gen/validate.lua" */
  const unsigned char *data;
  unsigned long size;
} ff_embedded_file;
extern const ff_embedded_file ff_embedded_files[];
extern const int ff_embedded_count;
const ff_embedded_file *ff_embedded_find(const char *name);

#endif
