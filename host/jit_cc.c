/* jit_cc.c - the system-compiler backend: generated C built by $CC (default
 * cc) -O3 into a shared object, kept in the cache folder (cache.c: an entry
 * KEY.so is run only when its bytes hash to the KEY.sha256 recorded when we
 * built it), and loaded with dlopen through /proc/self/fd/N (Linux), so the
 * bytes checked are the bytes loaded.  The matrix kernels (kernels/) are
 * built once into a cached library of their own that the model links, so a
 * new model compiles in a fraction of the time.
 *
 * KEY hashes everything the object depends on: the compiler's identity
 * (`$CC --version`), the flags, which follow the ISA this process chose for
 * the kernels (not -march=native: under valgrind or qemu this process may
 * see fewer CPU features than a native `cc -march=native` does), the kernel
 * library it links, and the text without its provenance comments (so one
 * model reached through two paths shares one object). */
#define _GNU_SOURCE /* pipe2 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../kernels/isas.h"
#include "cache.h"
#include "codegen.h"
#include "fixformer.h"

#define CC_FLAGS "-std=c99 -O3 -mtune=native -fPIC -shared"
#define MAX_ARGS 48
#define LOG_MAX 65536 /* what is read of a failed compiler's output */
#define KERNEL_SONAME "libfixformer-kernels-"

/* ---- loaded libraries --------------------------------------------------------- */

/* One loaded object per content hash.  It is dlopen'ed as /proc/self/fd/N
 * and that fd stays open while the object is loaded: the dynamic loader
 * knows objects by name, so the number must not name another file then. */
typedef struct cc_lib {
  char sha[65];
  void *handle;
  int fd;
  int refs;
  struct cc_lib *dep; /* the kernel library a model links (one reference) */
  struct cc_lib *next;
} cc_lib;

static pthread_mutex_t libs_lock = PTHREAD_MUTEX_INITIALIZER;
static cc_lib *libs;

static void release_locked(cc_lib *l) {
  while (l && --l->refs == 0) {
    cc_lib **p = &libs, *dep = l->dep;
    while (*p != l) p = &(*p)->next;
    *p = l->next;
    char name[40];
    snprintf(name, sizeof name, "/proc/self/fd/%d", l->fd);
    dlclose(l->handle);
    void *still = dlopen(name, RTLD_NOW | RTLD_NOLOAD);
    if (still)
      dlclose(still); /* not unloaded: keep its fd so that its name stays unique */
    else
      close(l->fd);
    free(l);
    l = dep;
  }
}

static void lib_release(cc_lib *l) {
  pthread_mutex_lock(&libs_lock);
  release_locked(l);
  pthread_mutex_unlock(&libs_lock);
}

/* The object of fd (its bytes hash to sha; fd is taken) loaded, or the one
 * already loaded with those bytes; dep: a reference the object keeps. */
static int lib_load(int fd, const char *sha, cc_lib *dep, const char *what, cc_lib **out, ff_error *err) {
  pthread_mutex_lock(&libs_lock);
  cc_lib *l = libs;
  while (l && strcmp(l->sha, sha)) l = l->next;
  if (l) {
    l->refs++;
    release_locked(dep);
    close(fd);
  } else if ((l = calloc(1, sizeof *l))) {
    char name[40];
    snprintf(name, sizeof name, "/proc/self/fd/%d", fd);
    if (!(l->handle = dlopen(name, RTLD_NOW | RTLD_LOCAL))) {
      const char *e = dlerror();
      int rc = ff_fail(err, FF_EIO, "cc: cannot load %s: %s", what, e ? e : "dlopen failed");
      release_locked(dep);
      pthread_mutex_unlock(&libs_lock);
      free(l);
      close(fd);
      return rc;
    }
    memcpy(l->sha, sha, 65);
    l->fd = fd;
    l->refs = 1;
    l->dep = dep;
    l->next = libs;
    libs = l;
  } else {
    release_locked(dep);
    close(fd);
  }
  pthread_mutex_unlock(&libs_lock);
  *out = l;
  return l ? 0 : ff_fail(err, FF_ENOMEM, "out of memory");
}

/* ---- running the compiler ------------------------------------------------------ */

/* Starts argv with stdin from in (-1: none), stdout and stderr into out, and
 * fd keep (-1: none) left open in the child; *pid.  Whether exec worked
 * comes back through a close-on-exec pipe: a missing compiler is named. */
static int spawn(char *const argv[], int in, int out, int keep, pid_t *pid, ff_error *err) {
  int p[2], e = 0;
  if (pipe2(p, O_CLOEXEC)) return ff_fail(err, FF_EIO, "cc: cannot start the compiler: %s", strerror(errno));
  if ((*pid = fork()) < 0) {
    e = errno;
    close(p[0]);
    close(p[1]);
    return ff_fail(err, FF_EIO, "cc: cannot start the compiler: %s", strerror(e));
  }
  if (*pid == 0) {
    if (in >= 0) dup2(in, 0);
    dup2(out, 1);
    dup2(out, 2);
    if (keep >= 0) fcntl(keep, F_SETFD, 0);
    /* the compiler past a file-size limit: an error it reports, not death
     * (our process's disposition is the application's; this one is ours) */
    struct sigaction ign;
    memset(&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    sigaction(SIGXFSZ, &ign, NULL);
    execvp(argv[0], argv);
    e = errno;
    if (write(p[1], &e, sizeof e) < 0) _exit(126);
    _exit(127);
  }
  close(p[1]);
  ssize_t r;
  while ((r = read(p[0], &e, sizeof e)) < 0 && errno == EINTR) {
  }
  close(p[0]);
  if (r != (ssize_t)sizeof e) return 0;
  while (waitpid(*pid, NULL, 0) < 0 && errno == EINTR) {
  }
  if (e == ENOENT) return ff_fail(err, FF_EIO, "cc: compiler '%s' not found (set CC)", argv[0]);
  return ff_fail(err, FF_EIO, "cc: cannot run compiler '%s': %s", argv[0], strerror(e));
}

/* -1: not exited; else the exit status (128 + N for a signal) */
static int wait_exit(pid_t pid) {
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* "cc" "-x" ... split at spaces into argv (the words stay in buf) */
static int split_words(char *buf, char **argv, int max) {
  int n = 0;
  for (char *save, *t = strtok_r(buf, " ", &save); t && n < max; t = strtok_r(NULL, " ", &save)) argv[n++] = t;
  return n;
}

/* What identifies the compiler: the first line of `$CC --version`, read once
 * per process and compiler command. */
static int compiler_identity(const char *cc, char *out, size_t n, ff_error *err) {
  static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  static char last_cc[512], last_id[256];
  int rc = 0;
  pthread_mutex_lock(&lock);
  if (!last_id[0] || strcmp(last_cc, cc)) {
    char words[512], *argv[MAX_ARGS], line[256] = "";
    snprintf(words, sizeof words, "%s", cc);
    int argc = split_words(words, argv, MAX_ARGS - 2), p[2];
    argv[argc++] = "--version";
    argv[argc] = NULL;
    pid_t pid;
    if (argc == 1) {
      rc = ff_fail(err, FF_EINVAL, "cc: CC names no compiler");
    } else if (pipe2(p, O_CLOEXEC)) {
      rc = ff_fail(err, FF_EIO, "cc: cannot start the compiler: %s", strerror(errno));
    } else {
      rc = spawn(argv, -1, p[1], -1, &pid, err);
      close(p[1]);
      size_t got = 0;
      ssize_t r;
      char chunk[512];
      while (!rc && ((r = read(p[0], chunk, sizeof chunk)) > 0 || (r < 0 && errno == EINTR)))
        for (ssize_t i = 0; i < r; i++) /* keep the first line */
          if (got < sizeof line - 1 && !memchr(line, '\n', got)) line[got++] = chunk[i];
      close(p[0]);
      line[strcspn(line, "\n")] = 0;
      if (!rc && (wait_exit(pid) != 0 || !line[0]))
        rc = ff_fail(err, FF_EIO, "cc: compiler '%s' does not answer --version", cc);
    }
    if (!rc) {
      snprintf(last_cc, sizeof last_cc, "%s", cc);
      snprintf(last_id, sizeof last_id, "%s", line);
    }
  }
  if (!rc) snprintf(out, n, "%s", last_id);
  pthread_mutex_unlock(&lock);
  return rc;
}

/* The target flags for the kernels' ISA: what this process checked the CPU
 * runs (ff_host_isas), no more. */
static const char *isa_flags(const char *isa) {
#define FF_ISA_FLAGS(name, mr, nr, flags, ...)                                                                         \
  if (!strcmp(isa, #name)) return flags;
  FF_ISAS(FF_ISA_FLAGS) /* kernels/isas.h */
#undef FF_ISA_FLAGS
  return "";
}

/* ---- building ------------------------------------------------------------------- */

typedef struct {
  const char *dir, *cc, *flags;
  char build[1024]; /* what the key hashes besides the text */
} cc_build;

/* An unlinked temporary in the cache folder (the compiler's input or log) */
static int scratch_fd(const char *dir, const char *key) {
  char path[FF_CACHE_PATH];
  int fd = ff_cache_temp(dir, key, path);
  if (fd >= 0) unlink(path);
  return fd;
}

/* One line of the compiler's log for the message: why it failed. */
static void log_reason(int fd, char *out, size_t n) {
  char *buf = malloc(LOG_MAX + 1);
  ssize_t r = buf ? pread(fd, buf, LOG_MAX, 0) : -1;
  out[0] = 0;
  if (r <= 0) {
    free(buf);
    return;
  }
  buf[r] = 0;
  if (strstr(buf, "No space left on device")) {
    snprintf(out, n, "%s", strerror(ENOSPC));
    free(buf);
    return;
  }
  char *pick = NULL;
  for (char *save, *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    if (!pick) pick = line;
    if (strstr(line, "error")) {
      pick = line;
      break;
    }
  }
  if (pick) snprintf(out, n, "%.300s", pick);
  free(buf);
}

/* Runs the compiler on text into the temporary tmp; kernels: the verified
 * kernel library to link (fd, its key), or NULL when building that. */
static int compile(const cc_build *b, const char *key, const char *text, const cc_lib *kernels, const char *tmp,
                   ff_error *err) {
  int src = scratch_fd(b->dir, key), log = src >= 0 ? scratch_fd(b->dir, key) : -1, e, rc;
  if (src < 0 || log < 0) {
    e = errno;
    if (src >= 0) close(src);
    return ff_fail(err, FF_EIO, "cc: cannot write in the cache directory %s: %s", b->dir, strerror(e));
  }
  if ((e = ff_write_all(src, text, strlen(text))) || lseek(src, 0, SEEK_SET)) {
    close(src);
    close(log);
    return ff_fail(err, FF_EIO, "cc: cannot write the generated source in %s: %s", b->dir, strerror(e ? e : errno));
  }
  char words[1024], soname[96], kpath[40], *argv[MAX_ARGS];
  snprintf(words, sizeof words, "%s %s %s", b->cc, CC_FLAGS, b->flags);
  int argc = split_words(words, argv, MAX_ARGS - 12);
  if (kernels) {
    argv[argc++] = "-DFF_EXTERN_KERNELS"; /* the kernels come from the library */
  } else {                                 /* named, so that a model's DT_NEEDED is this name, not a path */
    snprintf(soname, sizeof soname, "-Wl,-soname," KERNEL_SONAME "%.*s.so", FF_CACHE_KEY_HEX, key);
    argv[argc++] = soname;
  }
  argv[argc++] = "-o";
  argv[argc++] = (char *)tmp;
  argv[argc++] = "-x";
  argv[argc++] = "c";
  argv[argc++] = "-"; /* the source on stdin */
  if (kernels) {      /* the verified bytes, through the fd the child inherits */
    snprintf(kpath, sizeof kpath, "/proc/self/fd/%d", kernels->fd);
    argv[argc++] = "-x";
    argv[argc++] = "none";
    argv[argc++] = kpath;
  }
  argv[argc++] = "-lm";
  argv[argc] = NULL;
  pid_t pid;
  if (!(rc = spawn(argv, src, log, kernels ? kernels->fd : -1, &pid, err))) {
    int status = wait_exit(pid);
    if (status) {
      char line[400];
      log_reason(log, line, sizeof line);
      if (status > 128)
        snprintf(line + strlen(line), sizeof line - strlen(line), "%skilled by signal %d%s", line[0] ? "; " : "",
                 status - 128, status - 128 == SIGXFSZ ? " (a file-size limit, ulimit -f)" : "");
      rc = ff_fail(err, FF_EIO, "cc: '%s' failed to build the generated code in %s%s%s", b->cc, b->dir,
                   line[0] ? ": " : "", line);
    }
  }
  close(src);
  close(log);
  return rc;
}

/* Builds text into a unique temporary, records its hash and publishes it
 * as dir/KEY.so by rename; the opened, hashed file is returned (*fd). */
static int build(const cc_build *b, const char *key, const char *text, const cc_lib *kernels, int *fd, char sha[65],
                 ff_error *err) {
  char tmp[FF_CACHE_PATH], path[FF_CACHE_PATH];
  snprintf(path, sizeof path, "%s/%.*s.so", b->dir, FF_CACHE_KEY_HEX, key);
  int t = ff_cache_temp(b->dir, key, tmp), rc;
  if (t < 0) return ff_fail(err, FF_EIO, "cc: cannot write in the cache directory %s: %s", b->dir, strerror(errno));
  close(t);
  if ((rc = compile(b, key, text, kernels, tmp, err))) {
    unlink(tmp);
    return rc;
  }
  struct stat st;
  *fd = open(tmp, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (*fd < 0 || fstat(*fd, &st) || !S_ISREG(st.st_mode) || st.st_size == 0 || fchmod(*fd, 0600) ||
      ff_cache_hash_fd(*fd, sha)) {
    rc = ff_fail(err, FF_EIO, "cc: '%s' left no usable object in %s", b->cc, b->dir);
  } else if (!(rc = ff_cache_write_sidecar(b->dir, key, sha, err)) && rename(tmp, path)) {
    rc = ff_fail(err, FF_EIO, "cc: cannot write %s: %s", path, strerror(errno));
  }
  if (rc) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
    unlink(tmp);
  }
  return rc;
}

/* The library for text: the verified cached one, else built; *built is set
 * when it was.  kernels: the kernel library it links (a reference that the
 * result takes over) and its key (its soname), or NULL. */
static int get_lib(const cc_build *b, const char *text, cc_lib *kernels, const char *kkey, cc_lib **out, char key[65],
                   int *built, ff_error *err) {
  char buf[1200], sha[65];
  snprintf(buf, sizeof buf, "%s\nlinks %.*s\n", b->build, FF_CACHE_KEY_HEX, kernels ? kkey : "-");
  ff_cache_key(buf, text, key);
  int fd = ff_cache_open_verified(b->dir, key, ".so", sha), rc;
  if (fd < 0) {
    *built = 1;
    if ((rc = build(b, key, text, kernels, &fd, sha, err))) {
      lib_release(kernels);
      return rc;
    }
  }
  char what[FF_CACHE_PATH];
  snprintf(what, sizeof what, "%s/%.*s.so", b->dir, FF_CACHE_KEY_HEX, key);
  return lib_load(fd, sha, kernels, what, out, err);
}

/* ---- the backend ------------------------------------------------------------------ */

static void *dl_symbol(void *h, const char *name) { return dlsym(((cc_lib *)h)->handle, name); }
static void dl_close(void *h) { lib_release(h); }

int ff_jit_cc(const char *text, const char *kernels, ff_jit **out, ff_error *err) {
  const char *cc = getenv("CC");
  if (!cc || !*cc) cc = "cc";
  char dir[PATH_MAX], ident[256], kkey[65] = "", key[65];
  size_t max;
  int rc, built = 0, scaled;
  cc_lib *klib = NULL, *lib = NULL;
  *out = NULL;
  if ((rc = ff_cache_max(&max, &scaled, err)) || (rc = ff_cc_cache_dir(dir, sizeof dir, err)) ||
      (rc = compiler_identity(cc, ident, sizeof ident, err)))
    return rc;
  const char *isa = ff_host_isa();
  cc_build b = {dir, cc, isa_flags(isa), ""};
  snprintf(b.build, sizeof b.build, "fixformer cc cache 2\ncompiler %s\nversion %s\nflags %s %s\nisa %s", cc, ident,
           CC_FLAGS, b.flags, isa);
  /* the kernel library once per machine and compiler; the model links it by its soname */
  if (kernels && (rc = get_lib(&b, kernels, NULL, NULL, &klib, kkey, &built, err))) return rc;
  if ((rc = get_lib(&b, text, klib, kkey, &lib, key, &built, err))) return rc;
  if (built) ff_cache_prune(dir, kkey, key, max, scaled);
  return ff_jit_new(lib, dl_symbol, dl_close, out, err);
}
