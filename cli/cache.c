/* cache.c - `fixformer cache`: the cc engine's cache folder, and emptying it. */
#include <stdio.h>

#include "cli.h"

static int run_cache(const char *unused, cli_flag *flags, ff_error *err) {
  (void)unused;
  char dir[4096];
  int rc = ff_cc_cache_dir(dir, sizeof dir, err), files;
  size_t bytes;
  if (rc) return rc;
  if (!cli_value(flags, "--clean")) {
    printf("%s\n", dir);
    return 0;
  }
  if ((rc = ff_cc_cache_clean(&bytes, &files, err))) return rc;
  printf("removed %d file%s (%.1f MB) from %s\n", files, files == 1 ? "" : "s", bytes / 1e6, dir);
  return 0;
}

static cli_flag flags[] = {{"--help", "-h", NULL, 0}, {"--clean", NULL, NULL, 0}, {NULL, NULL, NULL, 0}};

const cli_command cli_cache = {
    "cache", "the cc engine's cache of compiled models (--clean empties it)",
     "usage: fixformer cache [--clean]\n"
     "Prints the folder where the cc engine keeps compiled models ($XDG_CACHE_HOME/fixformer,\n"
     "else ~/.cache/fixformer, else /tmp/fixformer-cache-UID; it must be yours alone, mode\n"
     "0700).  Its size is bounded by FIXFORMER_CACHE_MAX_MB (default 256): least recently\n"
     "used entries go first.\n"
     "  --clean   remove every entry\n"
     "Example:\n"
     "  fixformer cache --clean\n",
    NULL, 0, run_cache, flags};
