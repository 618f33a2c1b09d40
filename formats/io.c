/* io.c - safetensors and .npy: checked readers and atomic writers.
 *
 * Readers treat every byte as untrusted: sizes are multiplied and added with
 * overflow checks before any allocation or copy, offsets must stay inside
 * the file, tensors must not overlap, and every failure is one line naming
 * the tensor or field.  Writers go through a temporary file and rename(2). */
#define _DEFAULT_SOURCE /* madvise */
#include <errno.h>
#include <float.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "ff_io.h"
#include "ff_json.h"

#define MAX_FILE_BYTES ((size_t)1 << 36) /* 64 GiB */

int ff_size_mul(size_t a, size_t b, size_t *out) {
  if (a && b > (size_t)-1 / a) return -1;
  *out = a * b;
  return 0;
}

int ff_size_add(size_t a, size_t b, size_t *out) {
  if (b > (size_t)-1 - a) return -1;
  *out = a + b;
  return 0;
}

/* ---- a file read, not to be written ----------------------------------- */

int ff_same_inode(const char *a, const char *b) {
  struct stat x, y; /* stat follows links: a symlink or a hard link to the file is the file */
  return a && b && !stat(a, &x) && !stat(b, &y) && S_ISREG(x.st_mode) && x.st_dev == y.st_dev &&
         x.st_ino == y.st_ino;
}

int ff_refuse_inputs(const char *out, const char *const *inputs, int n, ff_error *err) {
  for (int i = 0; i < n; i++)
    if (ff_same_inode(out, inputs[i]))
      return strcmp(out, inputs[i])
                 ? ff_fail(err, FF_EIO, "%s: refusing to write over %s, which this command reads (the same file)",
                           out, inputs[i])
                 : ff_fail(err, FF_EIO, "%s: refusing to write over a file this command reads", out);
  return FF_OK;
}

/* ---- a path as generated files show it -------------------------------------- */

const char *ff_shown_path(const char *path, char *buf, size_t n) {
  char cwd[4096];
  const char *shown = path;
  if (path[0] == '/') {
    size_t c = getcwd(cwd, sizeof cwd) ? strlen(cwd) : 0;
    const char *name = strrchr(path, '/') + 1;
    if (c > 1 && !strncmp(path, cwd, c) && path[c] == '/' && path[c + 1]) shown = path + c + 1;
    else if (*name) shown = name;
  }
  snprintf(buf, n, "%s", shown);
  return buf;
}

/* ---- a number a description reads back ------------------------------------ */

const char *ff_lua_number(double v, int float32, char buf[32]) {
  if (v != v) return strcpy(buf, "0/0");
  if (v > DBL_MAX || v < -DBL_MAX) return strcpy(buf, v > 0 ? "math.huge" : "-math.huge");
  for (int n = 1; n <= 17; n++) { /* 1e-05, not 1.0000000000000001e-05 */
    snprintf(buf, 32, "%.*g", n, v);
    const double back = strtod(buf, NULL);
    if (float32 ? (float)back == (float)v : back == v) break;
  }
  return buf;
}

/* ---- files ------------------------------------------------------------- */

/* Opens path for reading only if it is a regular file: O_NONBLOCK so that a
 * FIFO named by mistake is refused instead of hanging in open(2). */
static int open_regular(const char *path, int *fd, size_t *size, ff_error *err) {
  *fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (*fd < 0) return ff_fail(err, FF_EIO, "%s: cannot open: %s", path, strerror(errno));
  struct stat st;
  if (fstat(*fd, &st) || !S_ISREG(st.st_mode)) {
    int dir = !fstat(*fd, &st) && S_ISDIR(st.st_mode);
    close(*fd);
    return ff_fail(err, FF_EIO, "%s: %s", path, dir ? "is a directory" : "not a regular file (a FIFO, device or socket)");
  }
  if ((unsigned long long)st.st_size > MAX_FILE_BYTES) {
    close(*fd);
    return ff_fail(err, FF_EIO, "%s: larger than %zu bytes", path, MAX_FILE_BYTES);
  }
  fcntl(*fd, F_SETFL, fcntl(*fd, F_GETFL) & ~O_NONBLOCK);
  *size = (size_t)st.st_size;
  return FF_OK;
}

/* n bytes at offset into buf; -1 on a read error or a file shorter than that */
static int read_at(int fd, uint8_t *buf, size_t n, size_t offset) {
  while (n > 0) {
    ssize_t r = pread(fd, buf, n, (off_t)offset);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    buf += r;
    offset += (size_t)r;
    n -= (size_t)r;
  }
  return 0;
}

/* The rest of an open file of size n, after its first `have` bytes in b. */
static int read_rest(int fd, uint8_t *b, size_t have, size_t n, const char *path, ff_error *err) {
  if (n > have && read_at(fd, b + have, n - have, have)) return ff_fail(err, FF_EIO, "%s: read error", path);
  return FF_OK;
}

int ff_read_file(const char *path, uint8_t **buf, size_t *len, ff_error *err) {
  int fd, rc;
  size_t n;
  *buf = NULL;
  *len = 0;
  if ((rc = open_regular(path, &fd, &n, err))) return rc;
  uint8_t *b = malloc(n ? n : 1);
  if (!b) {
    close(fd);
    return ff_fail(err, FF_ENOMEM, "%s: out of memory for %zu bytes", path, n);
  }
  rc = read_rest(fd, b, 0, n, path, err);
  close(fd);
  if (rc) {
    free(b);
    return rc;
  }
  *buf = b;
  *len = n;
  return FF_OK;
}

/* Whether len more bytes at fd's offset stay within RLIMIT_FSIZE (ulimit
 * -f).  Checked before writing instead of blocking or ignoring SIGXFSZ: the
 * signal's disposition and masks belong to the application that links us,
 * and a write that crosses the limit comes back short first and raises the
 * signal only on the next write, which then never happens.  (A quota or a
 * full disk gives EDQUOT or ENOSPC, no signal.) */
static int fits_size_limit(int fd, size_t len) {
  struct rlimit rl;
  struct stat st;
  off_t at;
  if (getrlimit(RLIMIT_FSIZE, &rl) || rl.rlim_cur == RLIM_INFINITY) return 1;
  if (fstat(fd, &st) || !S_ISREG(st.st_mode) || (at = lseek(fd, 0, SEEK_CUR)) < 0) return 1; /* no limit on pipes, devices */
  return (uintmax_t)at <= (uintmax_t)rl.rlim_cur && len <= (uintmax_t)rl.rlim_cur - (uintmax_t)at;
}

int ff_write_all(int fd, const void *data, size_t len) {
  const uint8_t *p = data;
  if (!fits_size_limit(fd, len)) return EFBIG;
  while (len > 0) {
    ssize_t w = write(fd, p, len);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return w < 0 ? errno : EIO; /* (a short write is retried: its cause comes back as an errno) */
    p += w;
    len -= (size_t)w;
  }
  return 0;
}

/* A temporary beside path holding the data (or what s writes: its failure
 * in *code and err, and -1 returned), with the mode a new file gets; *tmp
 * is malloc'd (NULL on failure, nothing left behind). */
static int write_temporary(const char *path, const void *data, size_t len, const ff_file_stream *s, int *code,
                           ff_error *err, char **tmp) {
  size_t n = strlen(path) + 16;
  int e = 0;
  if (!(*tmp = malloc(n))) return ENOMEM;
  snprintf(*tmp, n, "%s.tmp.XXXXXX", path);
  int fd = mkstemp(*tmp);
  if (fd < 0) {
    e = errno;
    free(*tmp);
    *tmp = NULL;
    return e;
  }
  mode_t mask = umask(0);
  umask(mask);
  fchmod(fd, 0666 & ~mask); /* mkstemp makes 0600; give the usual mode */
  if (s) e = (*code = s->write(s->ctx, fd, err)) ? -1 : 0;
  else e = ff_write_all(fd, data, len);
  if (close(fd) && !e) e = errno;
  if (e) {
    unlink(*tmp);
    free(*tmp);
    *tmp = NULL;
  }
  return e;
}

/* Whether path is written in place: an existing symlink, FIFO or device is
 * written through (--output /dev/stdout, /dev/null, a pipe), never replaced
 * by rename; a directory or a dangling link is an error. */
static int in_place(const char *path, int *yes, int *truncate, ff_error *err) {
  struct stat st, target;
  *yes = *truncate = 0;
  if (lstat(path, &st)) return errno == ENOENT ? 0 : ff_fail(err, FF_EIO, "%s: cannot write: %s", path, strerror(errno));
  if (S_ISREG(st.st_mode)) return 0;
  if (stat(path, &target))
    return ff_fail(err, FF_EIO, "%s: cannot write: %s", path, errno == ENOENT ? "a dangling symbolic link" : strerror(errno));
  if (S_ISDIR(target.st_mode)) return ff_fail(err, FF_EIO, "%s: cannot write: is a directory", path);
  *yes = 1;
  *truncate = S_ISREG(target.st_mode);
  return 0;
}

/* data [len], or (s set) what s->write writes */
static int write_atomic(const char *path, const void *data, size_t len, const ff_file_stream *s, ff_error *err) {
  int direct, truncate, rc = in_place(path, &direct, &truncate, err), e, code = 0;
  if (rc) return rc;
  if (direct) {
    int fd = open(path, O_WRONLY | O_CLOEXEC | (truncate ? O_TRUNC : 0));
    if (fd < 0) return ff_fail(err, FF_EIO, "%s: cannot write: %s", path, strerror(errno));
    e = s ? ((code = s->write(s->ctx, fd, err)) ? -1 : 0) : ff_write_all(fd, data, len);
    if (close(fd) && !e) e = errno;
    return e < 0 ? code : e ? ff_fail(err, FF_EIO, "%s: cannot write: %s", path, strerror(e)) : FF_OK;
  }
  char *tmp;
  if ((e = write_temporary(path, data, len, s, &code, err, &tmp)))
    return e < 0 ? code : ff_fail(err, FF_EIO, "%s: cannot write: %s", path, strerror(e));
  if (rename(tmp, path)) {
    e = errno;
    unlink(tmp);
    free(tmp);
    return ff_fail(err, FF_EIO, "%s: cannot write: %s", path, strerror(e));
  }
  free(tmp);
  return FF_OK;
}

int ff_write_file_atomic(const char *path, const void *data, size_t len, ff_error *err) {
  return write_atomic(path, data, len, NULL, err);
}

int ff_write_file_atomic_stream(const char *path, const ff_file_stream *s, ff_error *err) {
  return write_atomic(path, NULL, 0, s, err);
}

int ff_write_files_atomic(const ff_file_out *files, int n, ff_error *err) {
  return ff_write_files_atomic_streamed(files, NULL, n, err);
}

int ff_write_files_atomic_streamed(const ff_file_out *files, const ff_file_stream *streams, int n, ff_error *err) {
  char **tmp = calloc((size_t)n + 1, sizeof *tmp), **old = calloc((size_t)n + 1, sizeof *old);
  int rc = FF_OK, done = 0, e;
  struct stat st;
  if (!tmp || !old) {
    free(tmp);
    free(old);
    return ff_fail(err, FF_ENOMEM, "out of memory");
  }
  for (int i = 0; i < n && !rc; i++) /* regular files only: a folder or device in the way is an error */
    if (!lstat(files[i].path, &st) && !S_ISREG(st.st_mode))
      rc = ff_fail(err, FF_EIO, "%s: cannot write: %s", files[i].path,
                   S_ISDIR(st.st_mode) ? "is a directory" : "not a regular file");
  for (int i = 0; i < n && !rc; i++) { /* every file's bytes on disk before any name changes */
    const ff_file_stream *s = streams && streams[i].write ? &streams[i] : NULL;
    int code = 0;
    if ((e = write_temporary(files[i].path, files[i].data, files[i].len, s, &code, err, &tmp[i])))
      rc = code ? code : ff_fail(err, FF_EIO, "%s: cannot write: %s", files[i].path, strerror(e));
  }
  for (; done < n && !rc; done++) { /* the old file aside, then the new one in its place */
    const char *path = files[done].path;
    if (!lstat(path, &st)) {
      int fd;
      size_t len = strlen(path) + 16;
      if (!(old[done] = malloc(len))) {
        rc = ff_fail(err, FF_ENOMEM, "out of memory");
        break;
      }
      snprintf(old[done], len, "%s.old.XXXXXX", path);
      if ((fd = mkstemp(old[done])) < 0 || close(fd) || rename(path, old[done])) {
        rc = ff_fail(err, FF_EIO, "%s: cannot write: %s", path, strerror(errno));
        if (fd >= 0) unlink(old[done]);
        free(old[done]);
        old[done] = NULL;
        break;
      }
    }
    if (rename(tmp[done], path)) {
      rc = ff_fail(err, FF_EIO, "%s: cannot write: %s", path, strerror(errno));
      if (old[done]) rename(old[done], path);
      free(old[done]);
      old[done] = NULL;
      break;
    }
    free(tmp[done]);
    tmp[done] = NULL;
  }
  for (int i = 0; i < n; i++) {
    if (rc && i < done) { /* undo: what was there before, or nothing */
      if (old[i]) rename(old[i], files[i].path);
      else unlink(files[i].path);
    } else if (old[i]) {
      unlink(old[i]);
    }
    if (tmp[i]) unlink(tmp[i]);
    free(tmp[i]);
    free(old[i]);
  }
  free(tmp);
  free(old);
  return rc;
}

/* ---- safetensors ----------------------------------------------------------- */

static uint64_t le64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

static float float_of_bits(uint32_t bits) {
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

float ff_half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 31, man = h & 1023u, bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else { /* subnormal: normalise */
      int e = -1;
      do {
        e++;
        man <<= 1;
      } while (!(man & 1024u));
      bits = sign | (uint32_t)(127 - 15 - e) << 23 | (man & 1023u) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | man << 13; /* inf or nan */
  } else {
    bits = sign | (exp + 127 - 15) << 23 | man << 13;
  }
  return float_of_bits(bits);
}

float ff_bf16_to_float(uint16_t h) { return float_of_bits((uint32_t)h << 16); }

/* A file format's name of an element type, and its size in bytes */
typedef struct {
  const char *name;
  enum ff_dtype dtype;
  size_t size;
} dtype_name;

static const dtype_name st_dtypes[] = {{"F32", FF_F32, 4}, {"F16", FF_F16, 2}, {"BF16", FF_BF16, 2}};

/* a JSON number that is a non-negative integer below 2^53 */
static int json_uint(const cJSON *j, uint64_t *out) {
  if (!cJSON_IsNumber(j)) return -1;
  double v = j->valuedouble;
  if (!(v >= 0) || v > 9007199254740992.0 || v != (double)(uint64_t)v) return -1;
  *out = (uint64_t)v;
  return 0;
}

typedef struct {
  size_t begin, end;
  int index;
} span;

static int by_begin(const void *a, const void *b) {
  const span *x = a, *y = b;
  return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : (x->end > y->end) - (x->end < y->end);
}

static int by_name(const void *a, const void *b) {
  return strcmp(((const ff_tensor *)a)->name, ((const ff_tensor *)b)->name);
}

/* What a file that is not safetensors probably is, from its first bytes. */
#define FF_CONVERT_TORCH "; convert it: python/fixformer_export.py weights IN.pt -o OUT.safetensors"
static const char *not_safetensors(const uint8_t *b, size_t n) {
  if (n >= 4 && !memcmp(b, "PK\x03\x04", 4)) return "a zip archive, as torch.save writes" FF_CONVERT_TORCH;
  if (n >= 2 && b[0] == 0x80 && b[1] >= 2 && b[1] <= 5) return "a Python pickle (an old torch.save)" FF_CONVERT_TORCH;
  if (n >= 6 && !memcmp(b, "\x93NUMPY", 6)) return "a .npy array, not a safetensors file";
  if (n >= 4 && !memcmp(b, "GGUF", 4)) return "a GGUF file, not a safetensors file";
  return NULL;
}

/* The 8-byte length and the JSON header after it (an object); *data and
 * *data_len are the data buffer that follows. */
static int st_header(const uint8_t *buf, size_t len, cJSON **root, const uint8_t **data, size_t *data_len,
                     ff_error *err) {
  *root = NULL;
  if (len < 8) return ff_fail(err, FF_EFORMAT, "not a safetensors file: %zu bytes, shorter than the 8-byte header length", len);
  uint64_t hlen = le64(buf);
  /* a length that is no header's: the file is something else, and its bytes are not echoed */
  if (hlen == 0 || hlen > FF_SAFETENSORS_MAX_HEADER || len < 9 || buf[8] != '{') {
    const char *what = not_safetensors(buf, len);
    return ff_fail(err, FF_EFORMAT, "%s",
                   what ? what : "not a safetensors file (no 8-byte header length followed by a JSON header)");
  }
  if (hlen > len - 8)
    return ff_fail(err, FF_EFORMAT, "truncated: the header needs %llu bytes, only %zu follow",
                   (unsigned long long)hlen, len - 8);
  *data = buf + 8 + hlen;
  *data_len = len - 8 - (size_t)hlen;
  if (!(*root = ff_json_parse((const char *)buf + 8, (size_t)hlen, "header", err))) return FF_EFORMAT;
  if (!cJSON_IsObject(*root)) {
    cJSON_Delete(*root);
    *root = NULL;
    return ff_fail(err, FF_EFORMAT, "header is not a JSON object");
  }
  return FF_OK;
}

/* The dtype (*k: its row of st_dtypes) and shape of entry e, named name, into t. */
static int st_dtype_shape(const cJSON *e, const char *name, ff_tensor *t, int *k, ff_error *err) {
  const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
  const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
  if (!cJSON_IsString(dt)) return ff_fail(err, FF_EFORMAT, "tensor '%s': missing dtype", name);
  *k = -1;
  for (int j = 0; j < (int)(sizeof st_dtypes / sizeof *st_dtypes); j++)
    if (!strcmp(dt->valuestring, st_dtypes[j].name)) *k = j;
  if (*k < 0)
    return ff_fail(err, FF_EFORMAT, "tensor '%s': dtype %.32s not supported (F32, F16, BF16)", name, dt->valuestring);
  t->file_dtype = st_dtypes[*k].dtype;
  if (!cJSON_IsArray(shape) || cJSON_GetArraySize(shape) > FF_MAX_RANK)
    return ff_fail(err, FF_EFORMAT, "tensor '%s': shape must be an array of at most %d sizes", name, FF_MAX_RANK);
  size_t numel = 1;
  for (const cJSON *s = shape->child; s; s = s->next) {
    uint64_t v;
    if (json_uint(s, &v) || ff_size_mul(numel, (size_t)v, &numel))
      return ff_fail(err, FF_EFORMAT, "tensor '%s': shape holds a negative, fractional or too large size", name);
    t->shape[t->rank++] = (int64_t)v;
  }
  t->numel = numel;
  return FF_OK;
}

/* One header entry (not __metadata__): dtype, shape and data_offsets inside
 * the data_len-byte buffer, into t and sp; t->name points into the JSON. */
static int st_entry(const cJSON *e, size_t data_len, ff_tensor *t, span *sp, ff_error *err) {
  const char *name = e->string;
  size_t bytes;
  uint64_t b, en;
  int k = -1;
  if (!cJSON_IsObject(e)) return ff_fail(err, FF_EFORMAT, "tensor '%s': entry is not an object", name);
  int rc = st_dtype_shape(e, name, t, &k, err);
  if (rc) return rc;
  const cJSON *offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
  if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 || json_uint(offs->child, &b) ||
      json_uint(offs->child->next, &en) || b > en)
    return ff_fail(err, FF_EFORMAT, "tensor '%s': data_offsets must be [begin, end] with 0 <= begin <= end", name);
  if (en > data_len)
    return ff_fail(err, FF_EFORMAT, "tensor '%s': data_offsets [%llu, %llu] beyond the %zu-byte data buffer (truncated?)",
                   name, (unsigned long long)b, (unsigned long long)en, data_len);
  if (ff_size_mul(t->numel, st_dtypes[k].size, &bytes) || bytes != (size_t)(en - b))
    return ff_fail(err, FF_EFORMAT, "tensor '%s': %llu data bytes for %zu elements of %s", name,
                   (unsigned long long)(en - b), t->numel, st_dtypes[k].name);
  sp->begin = (size_t)b;
  sp->end = (size_t)en;
  t->name = (char *)name; /* replaced by the copy in st_copy */
  return FF_OK;
}

/* Tensors overlapping in the data buffer (sorts spans); a name twice was
 * refused with the header's JSON (ff_json_parse). */
static int st_overlaps(const ff_tensor *ts, span *spans, int count, ff_error *err) {
  qsort(spans, (size_t)count, sizeof *spans, by_begin);
  for (int j = 1; j < count; j++)
    if (spans[j].begin < spans[j - 1].end)
      return ff_fail(err, FF_EFORMAT, "tensors '%s' and '%s' overlap in the data buffer", ts[spans[j - 1].index].name,
                     ts[spans[j].index].name);
  return FF_OK;
}

/* An F32 tensor of a mapped file used where it lies: its bytes 4-byte aligned. */
static int use_mapped(const uint8_t *src, const ff_tensor *t, int mapped) {
  return mapped && t->file_dtype == FF_F32 && (uintptr_t)src % sizeof(float) == 0;
}

/* One block for the floats (aligned, converted to float32) and the names;
 * each tensor's data and name then point into it, or (mapped: data is the
 * file's mapping, kept) an aligned F32 tensor's data into the file. */
static int st_copy(const uint8_t *data, ff_tensor *ts, const span *spans, int count, size_t names, int mapped,
                   void **storage, ff_error *err) {
  size_t floats = 0, fbytes, total;
  for (int j = 0; j < count; j++) /* (the numel sum was checked by the caller) */
    if (!use_mapped(data + spans[j].begin, &ts[spans[j].index], mapped)) floats += ts[spans[j].index].numel;
  if (ff_size_mul(floats, sizeof(float), &fbytes) || ff_size_add(fbytes, names, &total))
    return ff_fail(err, FF_ENOMEM, "tensor sizes overflow");
  char *block = malloc(total ? total : 1);
  if (!block) return ff_fail(err, FF_ENOMEM, "out of memory for %zu bytes of tensors", total);
  float *fp = (float *)(void *)block;
  char *np = block + fbytes;
  for (int j = 0; j < count; j++) {
    const span *s = &spans[j];
    ff_tensor *t = &ts[s->index];
    const uint8_t *src = data + s->begin;
    if (use_mapped(src, t, mapped)) {
      t->data = (float *)(uintptr_t)src; /* read-only: ff_tensor_make_owned before writing */
    } else {
      t->data = fp;
      if (t->file_dtype == FF_F32) {
        memcpy(fp, src, t->numel * sizeof(float)); /* little-endian host and file */
      } else {
        for (size_t k = 0; k < t->numel; k++) {
          uint16_t h = (uint16_t)(src[2 * k] | src[2 * k + 1] << 8);
          fp[k] = t->file_dtype == FF_F16 ? ff_half_to_float(h) : ff_bf16_to_float(h);
        }
      }
      fp += t->numel;
    }
    size_t nl = strlen(t->name) + 1;
    memcpy(np, t->name, nl);
    t->name = np;
    np += nl;
  }
  *storage = block;
  return FF_OK;
}

/* ff_safetensors_parse; mapped: buf is a mapping the file keeps */
static int st_parse(const uint8_t *buf, size_t len, int mapped, ff_tensor_file *out, ff_error *err) {
  const uint8_t *data = NULL;
  size_t data_len = 0, names = 0, floats = 0;
  cJSON *root;
  memset(out, 0, sizeof *out);
  int rc = st_header(buf, len, &root, &data, &data_len, err), count = 0, i = 0;
  if (rc) return rc;
  for (cJSON *e = root->child; e; e = e->next)
    if (strcmp(e->string, "__metadata__")) count++;
  ff_tensor *ts = calloc((size_t)count + 1, sizeof *ts);
  span *spans = calloc((size_t)count + 1, sizeof *spans);
  if (!ts || !spans) rc = ff_fail(err, FF_ENOMEM, "out of memory for %d tensors", count);
  /* pass 1: check every entry, measure names and data */
  for (cJSON *e = root->child; e && !rc; e = e->next) {
    if (!strcmp(e->string, "__metadata__")) {
      if (!cJSON_IsObject(e)) rc = ff_fail(err, FF_EFORMAT, "__metadata__ is not an object");
      continue;
    }
    rc = st_entry(e, data_len, &ts[i], &spans[i], err);
    spans[i].index = i;
    if (!rc && (ff_size_add(names, strlen(e->string) + 1, &names) || ff_size_add(floats, ts[i].numel, &floats)))
      rc = ff_fail(err, FF_EFORMAT, "tensor sizes overflow");
    i++;
  }
  if (!rc) rc = st_overlaps(ts, spans, count, err);
  /* pass 2: the data, converted, and the names */
  if (!rc) rc = st_copy(data, ts, spans, count, names, mapped, &out->storage, err);
  if (!rc) {
    qsort(ts, (size_t)count, sizeof *ts, by_name); /* lookups by bsearch */
    out->tensors = ts;
    out->count = count;
    ts = NULL;
  }
  free(ts);
  free(spans);
  cJSON_Delete(root);
  return rc;
}

int ff_safetensors_parse(const uint8_t *buf, size_t len, ff_tensor_file *out, ff_error *err) {
  return st_parse(buf, len, 0, out, err);
}

/* The first bytes of an open file: a safetensors header length and its '{'
 * (else the line that says what the file is instead). */
static int st_sniff(int fd, size_t len, const char *path, ff_error *err) {
  uint8_t head[9];
  size_t have = len < sizeof head ? len : sizeof head;
  if (read_at(fd, head, have, 0)) return ff_fail(err, FF_EIO, "%s: read error", path);
  if (have < sizeof head || le64(head) == 0 || le64(head) > FF_SAFETENSORS_MAX_HEADER || head[8] != '{') {
    const char *what = not_safetensors(head, have); /* only now: a header length can look like a pickle's first bytes */
    return ff_fail(err, FF_EFORMAT, "%s: %s", path,
                   what ? what : "not a safetensors file (no 8-byte header length followed by a JSON header)");
  }
  return FF_OK;
}

/* The file is mapped, not read: F32 tensors are used where they lie, and a
 * page is read when something touches it.  Its size is fstat's, so every
 * offset is checked against the bytes the file has before any is touched.
 * Without mmap (a file system that refuses it) the file is read. */
int ff_safetensors_read(const char *path, ff_tensor_file *out, ff_error *err) {
  int fd, rc;
  size_t len;
  uint8_t *buf = NULL;
  void *map = MAP_FAILED;
  memset(out, 0, sizeof *out);
  if ((rc = open_regular(path, &fd, &len, err))) return rc;
  if (!(rc = st_sniff(fd, len, path, err))) {
    map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED && !(buf = malloc(len)))
      rc = ff_fail(err, FF_ENOMEM, "%s: out of memory for %zu bytes", path, len);
    else if (map == MAP_FAILED)
      rc = read_rest(fd, buf, 0, len, path, err);
  }
  close(fd); /* the mapping stays */
  if (!rc) {
    rc = st_parse(map != MAP_FAILED ? map : buf, len, map != MAP_FAILED, out, err);
    if (rc && err) {
      ff_fail(err, rc, "%s: %s", path, err->msg);
    }
  }
  free(buf);
  if (map != MAP_FAILED && rc) munmap(map, len);
  if (map != MAP_FAILED && !rc) {
    out->map = map;
    out->map_bytes = len;
  }
  return rc;
}

const ff_tensor *ff_tensor_file_find(const ff_tensor_file *f, const char *name) {
  ff_tensor key;
  key.name = (char *)name;
  if (!f->count) return NULL;
  return bsearch(&key, f->tensors, (size_t)f->count, sizeof key, by_name);
}

int ff_tensor_is_mapped(const ff_tensor_file *f, const ff_tensor *t) {
  const char *p = (const char *)t->data, *m = f->map;
  return m && p >= m && p < m + f->map_bytes;
}

void ff_tensor_file_release(const ff_tensor_file *f, const void *p, size_t bytes) {
  const uintptr_t m = (uintptr_t)f->map, page = (uintptr_t)sysconf(_SC_PAGESIZE);
  uintptr_t a = (uintptr_t)p, b = a + bytes;
  if (!f->map || a < m || b < a || b > m + f->map_bytes || !page || (page & (page - 1))) return;
  a = (a + page - 1) & ~(page - 1);
  b &= ~(page - 1);
  if (a < b) madvise((void *)a, b - a, MADV_DONTNEED); /* (a private read-only file mapping: nothing is lost) */
}

/* What a tensor file holds beside its storage: blocks (len > 0: mapped) and
 * copies not made yet. */
typedef struct {
  void *p;
  size_t map_bytes;
} extra_block;
typedef struct {
  float *dst;
  const float *src;
  size_t n;
} extra_copy;
struct ff_tensor_extra {
  extra_block *blocks;
  extra_copy *copies;
  int n_blocks, n_copies;
};

static ff_tensor_extra *extra_of(ff_tensor_file *f) {
  if (!f->extra) f->extra = calloc(1, sizeof *f->extra);
  return f->extra;
}

int ff_tensor_file_adopt(ff_tensor_file *f, void *block, size_t map_bytes, ff_error *err) {
  ff_tensor_extra *x = extra_of(f);
  extra_block *grown = x ? realloc(x->blocks, sizeof *grown * ((size_t)x->n_blocks + 1)) : NULL;
  if (!grown) return ff_fail(err, FF_ENOMEM, "out of memory");
  x->blocks = grown;
  x->blocks[x->n_blocks++] = (extra_block){block, map_bytes};
  return FF_OK;
}

int ff_tensor_file_defer(ff_tensor_file *f, float *dst, const float *src, size_t n, ff_error *err) {
  ff_tensor_extra *x = extra_of(f);
  extra_copy *grown = x ? realloc(x->copies, sizeof *grown * ((size_t)x->n_copies + 1)) : NULL;
  if (!grown) return ff_fail(err, FF_ENOMEM, "out of memory");
  x->copies = grown;
  x->copies[x->n_copies++] = (extra_copy){dst, src, n};
  return FF_OK;
}

void ff_tensor_file_fill(ff_tensor_file *f) {
  ff_tensor_extra *x = f->extra;
  for (int i = 0; x && i < x->n_copies; i++) memcpy(x->copies[i].dst, x->copies[i].src, x->copies[i].n * sizeof(float));
  if (x) x->n_copies = 0;
}

int ff_tensor_make_owned(ff_tensor_file *f, ff_tensor *t, ff_error *err) {
  ff_tensor_file_fill(f);
  if (!ff_tensor_is_mapped(f, t)) return FF_OK;
  float *copy = malloc(t->numel ? t->numel * sizeof *copy : 1); /* (numel * 4 bytes are in the file) */
  if (!copy) return ff_fail(err, FF_ENOMEM, "tensor '%s': out of memory for %zu floats", t->name, t->numel);
  if (ff_tensor_file_adopt(f, copy, 0, err)) {
    free(copy);
    return FF_ENOMEM;
  }
  memcpy(copy, t->data, t->numel * sizeof *copy);
  t->data = copy;
  return FF_OK;
}

void ff_tensor_file_free(ff_tensor_file *f) {
  if (!f) return;
  free(f->tensors);
  free(f->storage);
  for (int i = 0; f->extra && i < f->extra->n_blocks; i++) {
    extra_block *b = &f->extra->blocks[i];
    if (b->map_bytes)
      munmap(b->p, b->map_bytes);
    else
      free(b->p);
  }
  if (f->extra) free(f->extra->blocks), free(f->extra->copies);
  free(f->extra);
  if (f->map) munmap(f->map, f->map_bytes);
  memset(f, 0, sizeof *f);
}

int ff_safetensors_serialize(const char *path, const ff_tensor_view *tensors, int count, uint8_t **out, size_t *out_len,
                             ff_error *err) {
  return ff_safetensors_serialize_meta(path, tensors, count, NULL, 0, out, out_len, err);
}

int ff_safetensors_out_init(ff_safetensors_out *o, const char *path, const ff_tensor_view *tensors, int count,
                            const ff_metadata *meta, int n_meta, ff_error *err) {
  memset(o, 0, sizeof *o);
  o->path = path, o->tensors = tensors, o->count = count;
  cJSON *root = cJSON_CreateObject();
  size_t at = 0;
  int rc = FF_OK;
  if (!root) return ff_fail(err, FF_ENOMEM, "out of memory");
  if (n_meta > 0) { /* first, as the format's writers put it */
    cJSON *m = cJSON_AddObjectToObject(root, "__metadata__");
    for (int i = 0; m && i < n_meta; i++)
      if (!cJSON_AddStringToObject(m, meta[i].key, meta[i].value)) m = NULL;
    if (!m) rc = ff_fail(err, FF_ENOMEM, "out of memory");
  }
  for (int i = 0; i < count && !rc; i++) {
    const ff_tensor_view *t = &tensors[i];
    size_t numel = 1, bytes;
    double shape[FF_MAX_RANK];
    for (int k = 0; k < t->rank; k++) {
      shape[k] = (double)t->shape[k];
      if (ff_size_mul(numel, (size_t)t->shape[k], &numel)) numel = (size_t)-1;
    }
    cJSON *e = cJSON_CreateObject(), *offs = NULL;
    double off[2] = {(double)at, 0};
    if (numel == (size_t)-1 || ff_size_mul(numel, sizeof(float), &bytes) || ff_size_add(at, bytes, &at)) {
      cJSON_Delete(e);
      rc = ff_fail(err, FF_ENOMEM, "%s: tensor '%s' too large", path, t->name);
      break;
    }
    off[1] = (double)at;
    if (e) {
      cJSON_AddStringToObject(e, "dtype", "F32");
      cJSON_AddItemToObject(e, "shape", cJSON_CreateDoubleArray(shape, t->rank));
      offs = cJSON_CreateDoubleArray(off, 2);
      cJSON_AddItemToObject(e, "data_offsets", offs);
    }
    if (!e || !offs) {
      cJSON_Delete(e);
      rc = ff_fail(err, FF_ENOMEM, "out of memory");
      break;
    }
    cJSON_AddItemToObject(root, t->name, e);
  }
  char *json = rc ? NULL : cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  if (rc) return rc;
  if (!json) return ff_fail(err, FF_ENOMEM, "out of memory");
  size_t jl = strlen(json), hl = (jl + 7) / 8 * 8; /* data 8-byte aligned, padded with spaces */
  if (ff_size_add(8 + hl, at, &o->bytes) || !(o->head = malloc(8 + hl))) {
    free(json);
    return ff_fail(err, FF_ENOMEM, "%s: out of memory for its header", path);
  }
  for (int k = 0; k < 8; k++) o->head[k] = (uint8_t)((uint64_t)hl >> (8 * k));
  memcpy(o->head + 8, json, jl);
  memset(o->head + 8 + jl, ' ', hl - jl);
  free(json);
  o->head_len = 8 + hl;
  return FF_OK;
}

static size_t view_bytes(const ff_tensor_view *t) {
  size_t n = 1;
  for (int k = 0; k < t->rank; k++) n *= (size_t)t->shape[k];
  return n * sizeof(float); /* (checked by ff_safetensors_out_init) */
}

int ff_safetensors_out_write(void *ctx, int fd, ff_error *err) {
  const ff_safetensors_out *o = ctx;
  int e = ff_write_all(fd, o->head, o->head_len);
  for (int i = 0; i < o->count && !e; i++) e = ff_write_all(fd, o->tensors[i].data, view_bytes(&o->tensors[i]));
  return e ? ff_fail(err, FF_EIO, "%s: cannot write: %s", o->path, strerror(e)) : FF_OK;
}

void ff_safetensors_out_free(ff_safetensors_out *o) {
  free(o->head);
  memset(o, 0, sizeof *o);
}

int ff_safetensors_serialize_meta(const char *path, const ff_tensor_view *tensors, int count, const ff_metadata *meta,
                                  int n_meta, uint8_t **out, size_t *out_len, ff_error *err) {
  ff_safetensors_out o;
  *out = NULL, *out_len = 0;
  int rc = ff_safetensors_out_init(&o, path, tensors, count, meta, n_meta, err);
  uint8_t *buf = rc ? NULL : malloc(o.bytes);
  if (!rc && !buf) rc = ff_fail(err, FF_ENOMEM, "%s: out of memory for %zu bytes", path, o.bytes);
  if (!rc) {
    uint8_t *p = buf + o.head_len;
    memcpy(buf, o.head, o.head_len);
    for (int i = 0; i < count; i++) {
      size_t n = view_bytes(&tensors[i]);
      if (n) memcpy(p, tensors[i].data, n);
      p += n;
    }
    *out = buf, *out_len = o.bytes;
  }
  ff_safetensors_out_free(&o);
  return rc;
}

int ff_safetensors_write(const char *path, const ff_tensor_view *tensors, int count, ff_error *err) {
  return ff_safetensors_write_meta(path, tensors, count, NULL, 0, err);
}

/* streamed from the tensors' memory: no copy of the file in memory */
int ff_safetensors_write_meta(const char *path, const ff_tensor_view *tensors, int count, const ff_metadata *meta,
                              int n_meta, ff_error *err) {
  ff_safetensors_out o;
  int rc = ff_safetensors_out_init(&o, path, tensors, count, meta, n_meta, err);
  ff_file_stream s = {ff_safetensors_out_write, &o};
  if (!rc) rc = ff_write_file_atomic_stream(path, &s, err);
  ff_safetensors_out_free(&o);
  return rc;
}

/* ---- .npy -------------------------------------------------------------- */

static const dtype_name npy_dtypes[] = {{"<i4", FF_I32, 4}, {"<i8", FF_I64, 8}, {"<f4", FF_F32, 4}}; /* descr */

static size_t npy_itemsize(enum ff_dtype d) {
  for (size_t i = 0; i < sizeof npy_dtypes / sizeof *npy_dtypes; i++)
    if (npy_dtypes[i].dtype == d) return npy_dtypes[i].size;
  return 0;
}

static const char *skip_ws(const char *p, const char *end) {
  while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
  return p;
}

/* The descr value at *pp (a quoted '<i4', '<i8' or '<f4') into out->dtype. */
static int npy_descr(const char **pp, const char *end, ff_array *out, ff_error *err) {
  const char *p = *pp;
  if (p >= end || (*p != '\'' && *p != '"')) return ff_fail(err, FF_EFORMAT, "header: descr is not a string");
  char q = *p++;
  const char *v = p;
  while (p < end && *p != q) p++;
  if (p >= end) return ff_fail(err, FF_EFORMAT, "header: unterminated descr");
  size_t vl = (size_t)(p++ - v);
  int k = -1;
  for (int j = 0; j < (int)(sizeof npy_dtypes / sizeof *npy_dtypes); j++)
    if (vl == 3 && !memcmp(v, npy_dtypes[j].name, 3)) k = j;
  if (k < 0)
    return ff_fail(err, FF_ESHAPE, "dtype '%.*s' not supported (int32 '<i4', int64 '<i8', float32 '<f4')",
                   (int)(vl > 16 ? 16 : vl), v);
  out->dtype = npy_dtypes[k].dtype;
  *pp = p;
  return 0;
}

/* The shape tuple at *pp, (2, 3) or (5,) or (), into out->rank and shape. */
static int npy_shape(const char **pp, const char *end, ff_array *out, ff_error *err) {
  const char *p = *pp;
  if (p >= end || *p++ != '(') return ff_fail(err, FF_EFORMAT, "header: shape is not a tuple");
  out->rank = 0;
  for (;;) {
    p = skip_ws(p, end);
    if (p < end && *p == ')') {
      p++;
      break;
    }
    if (p >= end || *p < '0' || *p > '9') return ff_fail(err, FF_EFORMAT, "header: shape holds a non-size");
    unsigned long long v = 0;
    while (p < end && *p >= '0' && *p <= '9') {
      if (v > (1ull << 40)) return ff_fail(err, FF_EFORMAT, "header: shape size too large");
      v = v * 10 + (unsigned)(*p++ - '0');
    }
    if (out->rank >= FF_MAX_RANK) return ff_fail(err, FF_ESHAPE, "rank above %d not supported", FF_MAX_RANK);
    out->shape[out->rank++] = (int64_t)v;
    p = skip_ws(p, end);
    if (p < end && *p == ',') p++;
  }
  *pp = p;
  return 0;
}

/* Parses the header dict {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } */
static int npy_header(const char *p, const char *end, ff_array *out, ff_error *err) {
  int have_descr = 0, have_order = 0, have_shape = 0, rc;
  p = skip_ws(p, end);
  if (p >= end || *p++ != '{') return ff_fail(err, FF_EFORMAT, "header is not a Python dict");
  for (;;) {
    p = skip_ws(p, end);
    if (p < end && *p == '}') break;
    if (p >= end || (*p != '\'' && *p != '"')) return ff_fail(err, FF_EFORMAT, "header: expected a quoted key");
    char q = *p++;
    const char *key = p;
    while (p < end && *p != q) p++;
    if (p >= end) return ff_fail(err, FF_EFORMAT, "header: unterminated key");
    size_t kl = (size_t)(p - key);
    p = skip_ws(p + 1, end);
    if (p >= end || *p++ != ':') return ff_fail(err, FF_EFORMAT, "header: expected ':'");
    p = skip_ws(p, end);
    if (kl == 5 && !memcmp(key, "descr", 5)) {
      if ((rc = npy_descr(&p, end, out, err))) return rc;
      have_descr = 1;
    } else if (kl == 13 && !memcmp(key, "fortran_order", 13)) {
      if (end - p >= 5 && !memcmp(p, "False", 5)) p += 5;
      else if (end - p >= 4 && !memcmp(p, "True", 4))
        return ff_fail(err, FF_ESHAPE, "fortran_order arrays not supported (save C-order)");
      else return ff_fail(err, FF_EFORMAT, "header: fortran_order is not True or False");
      have_order = 1;
    } else if (kl == 5 && !memcmp(key, "shape", 5)) {
      if ((rc = npy_shape(&p, end, out, err))) return rc;
      have_shape = 1;
    } else {
      return ff_fail(err, FF_EFORMAT, "header: unknown key '%.*s'", (int)(kl > 32 ? 32 : kl), key);
    }
    p = skip_ws(p, end);
    if (p < end && *p == ',') p++;
  }
  if (!have_descr || !have_order || !have_shape)
    return ff_fail(err, FF_EFORMAT, "header lacks %s", !have_descr ? "descr" : !have_order ? "fortran_order" : "shape");
  return 0;
}

int ff_npy_parse(const uint8_t *buf, size_t len, ff_array *out, ff_error *err) {
  memset(out, 0, sizeof *out);
  if (len < 10 || memcmp(buf, "\x93NUMPY", 6)) return ff_fail(err, FF_EFORMAT, "not a .npy file (bad magic)");
  int major = buf[6];
  size_t hlen, start;
  if (major == 1) {
    hlen = (size_t)buf[8] | (size_t)buf[9] << 8;
    start = 10;
  } else if (major == 2 || major == 3) {
    if (len < 12) return ff_fail(err, FF_EFORMAT, "truncated header");
    hlen = (size_t)buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 | (size_t)buf[11] << 24;
    start = 12;
  } else {
    return ff_fail(err, FF_EFORMAT, "unsupported .npy version %d", major);
  }
  if (hlen > len - start) return ff_fail(err, FF_EFORMAT, "truncated header: %zu bytes announced", hlen);
  int rc = npy_header((const char *)buf + start, (const char *)buf + start + hlen, out, err);
  if (rc) {
    memset(out, 0, sizeof *out);
    return rc;
  }
  size_t numel = 1, bytes = 0, item = npy_itemsize(out->dtype);
  for (int i = 0; i < out->rank; i++)
    if (ff_size_mul(numel, (size_t)out->shape[i], &numel)) {
      memset(out, 0, sizeof *out);
      return ff_fail(err, FF_EFORMAT, "shape too large");
    }
  size_t have = len - start - hlen;
  if (ff_size_mul(numel, item, &bytes) || have != bytes) {
    int truncated = have < bytes;
    memset(out, 0, sizeof *out);
    return ff_fail(err, FF_EFORMAT, "%s: %zu bytes of data, the shape needs %zu", truncated ? "truncated" : "trailing bytes",
                   have, bytes);
  }
  out->numel = numel;
  out->data = malloc(bytes ? bytes : 1);
  if (!out->data) {
    memset(out, 0, sizeof *out);
    return ff_fail(err, FF_ENOMEM, "out of memory for %zu bytes", bytes);
  }
  memcpy(out->data, buf + start + hlen, bytes);
  return 0;
}

int ff_npy_read(const char *path, ff_array *out, ff_error *err) {
  uint8_t *buf;
  size_t len;
  memset(out, 0, sizeof *out);
  int rc = ff_read_file(path, &buf, &len, err);
  if (rc) return rc;
  rc = ff_npy_parse(buf, len, out, err);
  free(buf);
  if (rc && err) {
    ff_fail(err, rc, "%s: %s", path, err->msg);
  }
  return rc;
}

int ff_npy_write(const char *path, const ff_array *a, ff_error *err) {
  const char *descr = NULL;
  for (size_t i = 0; i < sizeof npy_dtypes / sizeof *npy_dtypes; i++)
    if (npy_dtypes[i].dtype == a->dtype) descr = npy_dtypes[i].name;
  if (!descr || a->rank < 0 || a->rank > FF_MAX_RANK) return ff_fail(err, FF_EINVAL, "%s: unsupported array", path);
  char dict[256];
  int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
  for (int i = 0; i < a->rank; i++)
    n += snprintf(dict + n, sizeof dict - (size_t)n, "%lld,%s", (long long)a->shape[i], i + 1 < a->rank ? " " : "");
  if (a->rank > 1) n--; /* (2, 3) without the trailing comma; (5,) keeps it */
  n += snprintf(dict + n, sizeof dict - (size_t)n, "), }");
  size_t total_header = (10 + (size_t)n + 1 + 63) / 64 * 64; /* magic, version, u16 length, dict, '\n' */
  size_t bytes, total;
  if (ff_size_mul(a->numel, npy_itemsize(a->dtype), &bytes) || ff_size_add(total_header, bytes, &total))
    return ff_fail(err, FF_ENOMEM, "%s: too large", path);
  uint8_t *buf = malloc(total);
  if (!buf) return ff_fail(err, FF_ENOMEM, "%s: out of memory", path);
  size_t hl = total_header - 10;
  memcpy(buf, "\x93NUMPY\x01\x00", 8);
  buf[8] = (uint8_t)(hl & 255);
  buf[9] = (uint8_t)(hl >> 8);
  memset(buf + 10, ' ', hl);
  memcpy(buf + 10, dict, (size_t)n);
  buf[total_header - 1] = '\n';
  if (bytes) memcpy(buf + total_header, a->data, bytes);
  int rc = ff_write_file_atomic(path, buf, total, err);
  free(buf);
  return rc;
}

void ff_array_free(ff_array *a) {
  if (!a) return;
  free(a->data);
  memset(a, 0, sizeof *a);
}
