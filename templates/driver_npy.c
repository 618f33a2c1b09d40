/* driver_npy.c - the files of the --with-main driver: a bounded reader, the
 * .npy parser and the .npy writer.  gen/generate.lua pastes this text as it
 * is into NAME_main.c, and tests/fuzz/fuzz_driver_npy.c compiles it, so the
 * fuzzer runs the driver's own parser.  Plain C99 and libc, plus POSIX where
 * the target has it (anything else, e.g. newlib, gets a stdio fallback).
 *
 * The parser keeps the host's promises (formats/io.c ff_npy_parse): .npy
 * versions 1-3; the header dict parsed, not searched (descr, fortran_order
 * and shape once each, nothing else); dtype '<i4', '<i8' or '<f4' in C
 * order; rank 0..4; sizes non-negative integers below 2^31 whose product is
 * overflow-checked; exactly the data the shape needs.  '<i8' becomes int32
 * (-1, which the model refuses, where a value does not fit).
 *
 * Output goes through a unique temporary created exclusively beside the file
 * and rename(2); a path that exists and is not a regular file (a symlink, a
 * FIFO, a device such as /dev/stdout or /dev/null) is written in place, never
 * replaced; a directory is an error. */
#if !defined(_POSIX_C_SOURCE) && (defined(__unix__) || defined(__unix) || defined(__APPLE__))
#define _POSIX_C_SOURCE 200809L /* fstat, lstat, mkstemp, fchmod, ftruncate, getrlimit */
#endif
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(_POSIX_C_SOURCE) && _POSIX_C_SOURCE >= 200809L
#define NPY_POSIX 1
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>
#else
#define NPY_POSIX 0
#endif

#define NPY_MAX_RANK 4
/* the most a .npy may hold: 4 GiB (1 GiB where size_t has 32 bits) */
#define NPY_MAX_BYTES ((size_t)1 << (sizeof(size_t) > 4 ? 32 : 30))

/* An array: kind 'i' (int32 values, from '<i4' or '<i8') or 'f' (float32). */
typedef struct {
  char kind;
  int rank;
  long shape[NPY_MAX_RANK];
  size_t numel;
  void *data; /* numel 4-byte values */
} npy_array;

static int npy_mul(size_t a, size_t b, size_t *out) {
  if (a && b > (size_t)-1 / a) return -1;
  *out = a * b;
  return 0;
}

/* ---- reading ------------------------------------------------------------ */

/* The whole of path, at most cap bytes: a regular file by its size (fstat),
 * a pipe or device (/dev/stdin) in growing chunks up to cap; never a
 * directory.  NULL and *why on failure. */
static unsigned char *npy_read_all(const char *path, size_t cap, size_t *len, const char **why) {
  FILE *f = fopen(path, "rb");
  unsigned char *buf = NULL;
  size_t n = 0, have = 0;
  *len = 0;
  *why = NULL;
  if (!f) {
    *why = strerror(errno);
    return NULL;
  }
#if NPY_POSIX
  {
    struct stat st;
    if (fstat(fileno(f), &st)) *why = strerror(errno);
    else if (S_ISDIR(st.st_mode)) *why = "is a directory";
    else if (S_ISREG(st.st_mode) && (unsigned long long)st.st_size > cap) *why = "too large for this program";
    else if (S_ISREG(st.st_mode)) have = (cap = (size_t)st.st_size) + 1; /* all at once, +1 to see the end */
  }
#endif
  if (!have) have = cap < 65536 ? cap + 1 : 65536; /* a stream: growing chunks */
  if (!*why && !(buf = malloc(have))) *why = "out of memory";
  while (!*why) {
    n += fread(buf + n, 1, have - n, f);
    if (n < have) break; /* the end, or an error */
    if (n > cap) {
      *why = "too large for this program";
      break;
    }
    have = have <= cap / 2 ? have * 2 : cap + 1;
    unsigned char *bigger = realloc(buf, have);
    if (!bigger) *why = "out of memory";
    else buf = bigger;
  }
  if (!*why && ferror(f)) *why = "read error";
  fclose(f);
  if (*why) {
    free(buf);
    return NULL;
  }
  *len = n;
  return buf;
}

static const char *npy_skip(const char *p, const char *end) {
  while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
  return p;
}

/* a quoted Python string at *pp: its text (length *n), *pp past it; or NULL */
static const char *npy_string(const char **pp, const char *end, size_t *n) {
  const char *p = *pp, *s;
  char q;
  if (p >= end || (*p != '\'' && *p != '"')) return NULL;
  q = *p++;
  s = p;
  while (p < end && *p != q) p++;
  if (p >= end) return NULL;
  *n = (size_t)(p - s);
  *pp = p + 1;
  return s;
}

/* the shape tuple at *pp: (), (3,), (2, 3), ... of sizes 0..2^31-1 */
static const char *npy_shape(const char **pp, const char *end, npy_array *a) {
  const char *p = *pp;
  if (p >= end || *p++ != '(') return "header: shape is not a tuple";
  a->rank = 0;
  for (;;) {
    long v = 0;
    p = npy_skip(p, end);
    if (p < end && *p == ')') break;
    if (p >= end || *p < '0' || *p > '9') return "header: shape holds a negative, fractional or non-integer size";
    while (p < end && *p >= '0' && *p <= '9') {
      if (v > (2147483647L - (*p - '0')) / 10) return "header: shape holds a size above 2^31 - 1";
      v = v * 10 + (*p++ - '0');
    }
    if (a->rank == NPY_MAX_RANK) return "rank above 4 not supported";
    a->shape[a->rank++] = v;
    p = npy_skip(p, end);
    if (p < end && *p == ',') p++;
    else if (p >= end || *p != ')') return "header: shape holds a negative, fractional or non-integer size";
  }
  *pp = p + 1;
  return NULL;
}

/* one value of the header dict, for key bit 1 descr, 2 fortran_order, 4 shape */
static const char *npy_value(int bit, const char **pp, const char *end, npy_array *a, size_t *item) {
  const char *v;
  size_t vl;
  if (bit == 4) return npy_shape(pp, end, a);
  if (bit == 2) {
    if (end - *pp >= 5 && !memcmp(*pp, "False", 5)) {
      *pp += 5;
      return NULL;
    }
    if (end - *pp >= 4 && !memcmp(*pp, "True", 4)) return "fortran_order arrays are not supported (save in C order)";
    return "header: fortran_order is not True or False";
  }
  if (!(v = npy_string(pp, end, &vl))) return "header: descr is not a string";
  if (vl != 3 || (memcmp(v, "<i4", 3) && memcmp(v, "<i8", 3) && memcmp(v, "<f4", 3)))
    return "dtype must be int32 '<i4', int64 '<i8' or float32 '<f4'";
  a->kind = v[1];
  *item = (size_t)(v[2] - '0');
  return NULL;
}

/* the header dict {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } */
static const char *npy_header(const char *p, const char *end, npy_array *a, size_t *item) {
  int seen = 0;
  p = npy_skip(p, end);
  if (p >= end || *p++ != '{') return "header is not a Python dict";
  for (;;) {
    const char *key, *e;
    size_t kl;
    int bit;
    p = npy_skip(p, end);
    if (p < end && *p == '}') break;
    if (!(key = npy_string(&p, end, &kl))) return "header: expected a quoted key";
    p = npy_skip(p, end);
    if (p >= end || *p++ != ':') return "header: expected ':' after a key";
    p = npy_skip(p, end);
    bit = kl == 5 && !memcmp(key, "descr", 5)           ? 1
          : kl == 13 && !memcmp(key, "fortran_order", 13) ? 2
          : kl == 5 && !memcmp(key, "shape", 5)           ? 4
                                                          : 0;
    if (!bit) return "header: a key other than descr, fortran_order and shape";
    if (seen & bit) return "header: a key given twice";
    seen |= bit;
    if ((e = npy_value(bit, &p, end, a, item))) return e;
    p = npy_skip(p, end);
    if (p < end && *p == ',') p++;
    else if (p >= end || *p != '}') return "header: expected ',' or '}' after a value";
  }
  if (seen != 7) return !(seen & 1) ? "header lacks descr" : !(seen & 2) ? "header lacks fortran_order" : "header lacks shape";
  if (npy_skip(p + 1, end) != end) return "header: text after the dict";
  return NULL;
}

/* The .npy in buf [len] into *a (data allocated; free(a->data)): NULL, or
 * why not (*a then empty). */
static const char *npy_parse(const unsigned char *buf, size_t len, npy_array *a) {
  static const npy_array empty = {0, 0, {0, 0, 0, 0}, 0, NULL};
  size_t hlen, start, item = 0, numel = 1, bytes;
  const char *e;
  const unsigned char *p;
  *a = empty;
  if (len < 10 || memcmp(buf, "\x93NUMPY", 6)) return "not a .npy file";
  if (buf[6] < 1 || buf[6] > 3) return "unsupported .npy version (1, 2 and 3 are read)";
  start = buf[6] == 1 ? 10 : 12;
  if (len < start) return "truncated header";
  hlen = (size_t)buf[8] | (size_t)buf[9] << 8;
  if (start == 12) hlen |= (size_t)buf[10] << 16 | (size_t)buf[11] << 24;
  if (hlen > len - start) return "truncated header";
  if ((e = npy_header((const char *)buf + start, (const char *)buf + start + hlen, a, &item))) {
    *a = empty;
    return e;
  }
  for (int i = 0; i < a->rank; i++)
    if (npy_mul(numel, (size_t)a->shape[i], &numel)) {
      *a = empty;
      return "shape too large";
    }
  if (npy_mul(numel, item, &bytes) || bytes != len - start - hlen) {
    *a = empty;
    return "the data size does not match the shape (truncated, or trailing bytes)";
  }
  a->numel = numel;
  a->data = malloc(numel * 4 + 4); /* numel * 4 <= bytes < len: no overflow */
  if (!a->data) {
    *a = empty;
    return "out of memory";
  }
  p = buf + start + hlen;
  for (size_t i = 0; i < numel; i++) {
    if (item == 8) { /* int64 -> int32 (little-endian) */
      long long v;
      memcpy(&v, p + 8 * i, 8);
      ((int32_t *)a->data)[i] = v < -2147483647 || v > 2147483647 ? -1 : (int32_t)v;
    } else {
      memcpy((char *)a->data + 4 * i, p + 4 * i, 4);
    }
  }
  return NULL;
}

/* path (at most NPY_MAX_BYTES) into *a: NULL, or why not */
static const char *npy_load(const char *path, npy_array *a) {
  static const npy_array empty = {0, 0, {0, 0, 0, 0}, 0, NULL};
  size_t len;
  const char *why;
  unsigned char *buf = npy_read_all(path, NPY_MAX_BYTES, &len, &why);
  if (!buf) {
    *a = empty;
    return why;
  }
  why = npy_parse(buf, len, a);
  free(buf);
  return why;
}

/* ---- writing ------------------------------------------------------------ */

#if NPY_POSIX
/* all of p [n] to fd: 0 or an errno.  Past the file-size limit (ulimit -f)
 * EFBIG before a byte is written: a write that crosses it comes back short
 * and the next one raises SIGXFSZ, which would kill the program with the
 * temporary left behind. */
static int npy_write_fd(int fd, const void *p, size_t n) {
  const unsigned char *c = p;
  struct rlimit rl;
  struct stat st;
  off_t at;
  if (!getrlimit(RLIMIT_FSIZE, &rl) && rl.rlim_cur != RLIM_INFINITY && !fstat(fd, &st) && S_ISREG(st.st_mode) &&
      (at = lseek(fd, 0, SEEK_CUR)) >= 0 && ((unsigned long long)at > (unsigned long long)rl.rlim_cur ||
                                             n > (unsigned long long)rl.rlim_cur - (unsigned long long)at))
    return EFBIG;
  while (n > 0) {
    ssize_t w = write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return w < 0 ? errno : EIO;
    c += w;
    n -= (size_t)w;
  }
  return 0;
}

/* into an existing symlink, FIFO or device: opened, truncated only if it
 * leads to a regular file, never created or replaced */
static int npy_write_in_place(const char *path, const void *head, size_t hn, const void *data, size_t dn) {
  struct stat st;
  int fd = open(path, O_WRONLY | O_NOCTTY), e;
  if (fd < 0) return errno;
  e = fstat(fd, &st) ? errno : S_ISREG(st.st_mode) && ftruncate(fd, 0) ? errno : 0;
  if (!e) e = npy_write_fd(fd, head, hn);
  if (!e) e = npy_write_fd(fd, data, dn);
  if (close(fd) && !e) e = errno;
  return e;
}

/* through path.tmp.XXXXXX (mkstemp: a new file, O_EXCL) and rename(2) */
static int npy_write_replace(const char *path, const void *head, size_t hn, const void *data, size_t dn) {
  size_t n = strlen(path);
  char *tmp = malloc(n + 12);
  int fd, e;
  mode_t mask;
  if (!tmp) return ENOMEM;
  memcpy(tmp, path, n);
  memcpy(tmp + n, ".tmp.XXXXXX", 12);
  if ((fd = mkstemp(tmp)) < 0) {
    e = errno;
    free(tmp);
    return e;
  }
  mask = umask(0);
  umask(mask);
  e = fchmod(fd, 0666 & ~mask) ? errno : 0; /* mkstemp makes 0600; give the usual mode */
  if (!e) e = npy_write_fd(fd, head, hn);
  if (!e) e = npy_write_fd(fd, data, dn);
  if (close(fd) && !e) e = errno;
  if (!e && rename(tmp, path)) e = errno;
  if (e) unlink(tmp);
  free(tmp);
  return e;
}
#endif

/* head [hn] then data [dn] to path: NULL, or why not */
static const char *npy_write(const char *path, const void *head, size_t hn, const void *data, size_t dn) {
#if NPY_POSIX
  struct stat st;
  int e, exists = lstat(path, &st) == 0;
  if (exists && S_ISDIR(st.st_mode)) return "is a directory";
  if (exists && !S_ISREG(st.st_mode)) e = npy_write_in_place(path, head, hn, data, dn);
  else e = npy_write_replace(path, head, hn, data, dn); /* absent or a regular file */
  return e ? strerror(e) : NULL;
#else /* stdio only: a new temporary ("x": C11, where the library has it) and rename */
  size_t n = strlen(path);
  char *tmp = malloc(n + 16);
  FILE *f = NULL;
  int ok;
  if (!tmp) return "out of memory";
  for (int i = 0; i < 100 && !f; i++) {
    snprintf(tmp, n + 16, "%s.tmp%d", path, i);
    f = fopen(tmp, "wbx");
  }
  if (!f) {
    free(tmp);
    return "cannot create a temporary file beside it";
  }
  ok = fwrite(head, 1, hn, f) == hn && fwrite(data, 1, dn, f) == dn;
  if (fclose(f) || !ok || rename(tmp, path)) {
    remove(tmp);
    free(tmp);
    return "write error";
  }
  free(tmp);
  return NULL;
#endif
}

/* x [b, t, d] to path as a float32 .npy (version 1.0, header padded to 64) */
static const char *npy_save(const char *path, const float *x, int b, int t, int d) {
  char head[192];
  int n = snprintf(head + 10, sizeof head - 10, "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d, %d), }",
                   b, t, d);
  size_t total = (10 + (size_t)n + 1 + 63) / 64 * 64, count;
  if (b < 0 || t < 0 || d < 0 || npy_mul((size_t)b, (size_t)t, &count) || npy_mul(count, (size_t)d, &count) ||
      npy_mul(count, sizeof(float), &count))
    return "output too large";
  memcpy(head, "\x93NUMPY\x01\x00", 8);
  head[8] = (char)((total - 10) & 255);
  head[9] = (char)((total - 10) >> 8);
  memset(head + 10 + n, ' ', total - 11 - (size_t)n);
  head[total - 1] = '\n';
  return npy_write(path, head, total, x, count);
}
