/* jit_cc.c - the system-compiler backend: generated C built by $CC (default
 * cc) with -O3 -march=native into a shared object, cached by the hash of
 * the source and the compiler command, and loaded with dlopen.  The matrix
 * kernels (templates/kernels/) are built once into a cached library of their
 * own that the model links, so a new model compiles in a fraction of the time. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "codegen.h"

#define CC_FLAGS "-std=c99 -O3 -march=native -fPIC -shared"
#define MAX_ARGS 32

/* $XDG_CACHE_HOME/fixformer, ~/.cache/fixformer, or /tmp/fixformer-cache-UID */
static int cache_dir(char *dir, size_t n) {
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  if (xdg && *xdg)
    snprintf(dir, n, "%s/fixformer", xdg);
  else if (home && *home)
    snprintf(dir, n, "%s/.cache/fixformer", home);
  else
    snprintf(dir, n, "/tmp/fixformer-cache-%ld", (long)getuid());
  char parent[1024];
  snprintf(parent, sizeof parent, "%s", dir);
  char *slash = strrchr(parent, '/');
  if (slash && slash != parent) {
    *slash = 0;
    mkdir(parent, 0755); /* ~/.cache may not exist yet */
  }
  if (mkdir(dir, 0755) && errno != EEXIST) return -1;
  return 0;
}

/* Runs argv, stderr into log; 0 when it exits 0. */
static int run(char *const argv[], const char *log) {
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    execvp(argv[0], argv);
    _exit(127);
  }
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

static void first_error_line(const char *log, char *out, size_t n) {
  FILE *f = fopen(log, "r");
  out[0] = 0;
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof line, f))
    if (strstr(line, "error") || !out[0]) {
      line[strcspn(line, "\n")] = 0;
      snprintf(out, n, "%.300s", line);
      if (strstr(line, "error")) break;
    }
  fclose(f);
}

static void *dl_symbol(void *h, const char *name) { return dlsym(h, name); }
static void dl_close(void *h) { dlclose(h); }

/* Builds text into dir/KEY.so (KEY: the hash of the compiler command and the
 * text) unless it is there already: to a temporary name, then renamed, so
 * concurrent builds never see half a file.  lib: a library to link, or NULL. */
static int build_cached(const char *dir, const char *cc, const char *text, const char *lib, char *so, size_t so_len,
                        ff_error *err) {
  const char *extra = lib ? lib : "";
  char key[65], src[1200], tmp[1300], log[1300];
  size_t tl = strlen(text), cl = strlen(cc) + sizeof CC_FLAGS + strlen(extra) + 4;
  char *keyed = malloc(tl + cl);
  if (!keyed) return ff_fail(err, FF_ENOMEM, "out of memory");
  snprintf(keyed, cl, "%s %s %s\n", cc, CC_FLAGS, extra);
  memcpy(keyed + strlen(keyed), text, tl + 1);
  ff_sha256_hex(keyed, strlen(keyed), key);
  free(keyed);
  snprintf(src, sizeof src, "%s/%.32s.c", dir, key);
  snprintf(so, so_len, "%s/%.32s.so", dir, key);
  if (access(so, R_OK) == 0) return 0;
  if (ff_write_file_atomic(src, text, tl, err)) return err ? err->code : FF_EIO;
  snprintf(tmp, sizeof tmp, "%s.%ld.tmp", so, (long)getpid());
  snprintf(log, sizeof log, "%s.%ld.log", so, (long)getpid());
  char ccbuf[512], *argv[MAX_ARGS], flags[] = CC_FLAGS;
  int argc = 0;
  snprintf(ccbuf, sizeof ccbuf, "%s", cc);
  for (char *t = strtok(ccbuf, " "); t && argc < MAX_ARGS - 16; t = strtok(NULL, " ")) argv[argc++] = t;
  for (char *t = strtok(flags, " "); t && argc < MAX_ARGS - 8; t = strtok(NULL, " ")) argv[argc++] = t;
  if (lib) argv[argc++] = "-DFF_EXTERN_KERNELS"; /* the kernels come from lib */
  argv[argc++] = "-o";
  argv[argc++] = tmp;
  argv[argc++] = src;
  if (lib) argv[argc++] = (char *)lib;
  argv[argc++] = "-lm";
  argv[argc] = NULL;
  if (run(argv, log) || rename(tmp, so)) {
    char line[400];
    first_error_line(log, line, sizeof line);
    unlink(tmp);
    unlink(log);
    return ff_fail(err, FF_EINVAL, "cc: %s failed to build %s%s%s", cc, src, line[0] ? ": " : "", line);
  }
  unlink(log);
  return 0;
}

int ff_jit_cc(const char *text, const char *kernels, ff_jit **out, ff_error *err) {
  const char *cc = getenv("CC");
  if (!cc || !*cc) cc = "cc";
  char dir[1024], so[1200], lib[1200];
  *out = NULL;
  if (cache_dir(dir, sizeof dir)) return ff_fail(err, FF_EIO, "cc: cannot create the cache directory %s", dir);
  int rc;
  if (kernels) { /* the kernel library once per machine; the model links it by its path */
    if ((rc = build_cached(dir, cc, kernels, NULL, lib, sizeof lib, err))) return rc;
  }
  if ((rc = build_cached(dir, cc, text, kernels ? lib : NULL, so, sizeof so, err))) return rc;
  void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
  if (!h) return ff_fail(err, FF_EIO, "cc: cannot load %s: %s", so, dlerror());
  ff_jit *j = calloc(1, sizeof *j);
  if (!j) {
    dlclose(h);
    return ff_fail(err, FF_ENOMEM, "out of memory");
  }
  j->handle = h;
  j->symbol = dl_symbol;
  j->close = dl_close;
  *out = j;
  return 0;
}
