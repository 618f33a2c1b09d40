/* test_io.c - the readers and writers of formats/io.c, one case at a time.
 *
 * ff_npy_parse and ff_safetensors_parse on images built here byte by byte
 * (each dtype, header versions, rank 0 and zero-size, every refusal with its
 * message), the atomic writers in a private temporary folder (a regular file
 * replaced, a symlink written through, a directory refused, all or none), and
 * write -> read round trips, ff_safetensors_read's mapping (an aligned F32
 * tensor in place, F16 and unaligned F32 converted, ff_tensor_make_owned, a
 * file cut short), the writers under a file-size limit (EFBIG, never
 * SIGXFSZ, nothing left), and ff_json_parse's refusal of a key twice.
 * Prints each failure and "N passed, N failed".
 *
 *   test_io
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "ff_io.h"
#include "ff_json.h"

static int passed, failed;

/* one check: a failure names the line and what was expected */
#define CHECK(cond, ...)                                        \
  do {                                                          \
    if (cond) {                                                 \
      passed++;                                                 \
    } else {                                                    \
      failed++;                                                 \
      printf("FAIL line %d: %s: ", __LINE__, #cond);            \
      printf(__VA_ARGS__);                                      \
      printf("\n");                                             \
    }                                                           \
  } while (0)

/* rc is code and the message holds want */
#define CHECK_ERR(rc, code, err, want) \
  CHECK((rc) == (code) && strstr((err).msg, (want)), "rc %d, message '%s', expected %d and '%s'", rc, (err).msg, code, want)

/* ---- building images ------------------------------------------------------- */

typedef struct {
  uint8_t b[4096];
  size_t n;
} image;

static void put(image *im, const void *p, size_t n) {
  memcpy(im->b + im->n, p, n);
  im->n += n;
}

/* a .npy image: version major, the header dict text, then n data bytes */
static image npy(int major, const char *dict, const void *data, size_t n) {
  image im = {{0}, 0};
  size_t pre = major == 1 ? 10 : 12, dl = strlen(dict), hl = (pre + dl + 1 + 63) / 64 * 64 - pre;
  put(&im, "\x93NUMPY", 6);
  im.b[im.n++] = (uint8_t)major, im.b[im.n++] = 0;
  for (size_t k = 0; k < pre - 8; k++) im.b[im.n++] = (uint8_t)(hl >> (8 * k));
  memset(im.b + im.n, ' ', hl);
  memcpy(im.b + im.n, dict, dl);
  im.b[im.n + hl - 1] = '\n';
  im.n += hl;
  if (n) put(&im, data, n);
  return im;
}

/* a safetensors image: the JSON header (not padded), then n data bytes */
static image st(const char *json, const void *data, size_t n) {
  image im = {{0}, 0};
  size_t jl = strlen(json);
  for (int k = 0; k < 8; k++) im.b[im.n++] = (uint8_t)((uint64_t)jl >> (8 * k));
  put(&im, json, jl);
  if (n) put(&im, data, n);
  return im;
}

/* ---- .npy ------------------------------------------------------------------ */

static void test_npy_dtypes(void) {
  ff_error err = {0, ""};
  ff_array a;
  const int32_t i4[3] = {1, -2, 2147483647};
  const int64_t i8[2] = {-5, (int64_t)1 << 40};
  const float f4[6] = {0.5f, -1, 3, 4, 5, 6};
  image im = npy(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }", i4, sizeof i4);
  int rc = ff_npy_parse(im.b, im.n, &a, &err);
  CHECK(!rc && a.dtype == FF_I32 && a.rank == 1 && a.shape[0] == 3 && a.numel == 3 && !memcmp(a.data, i4, sizeof i4),
        "int32: rc %d %s", rc, err.msg);
  ff_array_free(&a);
  im = npy(1, "{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }", i8, sizeof i8);
  rc = ff_npy_parse(im.b, im.n, &a, &err);
  CHECK(!rc && a.dtype == FF_I64 && a.numel == 2 && !memcmp(a.data, i8, sizeof i8), "int64: rc %d %s", rc, err.msg);
  ff_array_free(&a);
  /* keys in any order, double quotes, no trailing comma */
  im = npy(1, "{\"shape\": (2, 3), \"fortran_order\": False, \"descr\": \"<f4\"}", f4, sizeof f4);
  rc = ff_npy_parse(im.b, im.n, &a, &err);
  CHECK(!rc && a.dtype == FF_F32 && a.rank == 2 && a.shape[0] == 2 && a.shape[1] == 3 && !memcmp(a.data, f4, sizeof f4),
        "float32 [2, 3]: rc %d %s", rc, err.msg);
  ff_array_free(&a);
}

static void test_npy_versions_shapes(void) {
  ff_error err = {0, ""};
  ff_array a;
  const float f = 7.5f;
  for (int major = 1; major <= 3; major++) {
    image im = npy(major, "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1), }", &f, 4);
    int rc = ff_npy_parse(im.b, im.n, &a, &err);
    CHECK(!rc && a.numel == 1 && ((float *)a.data)[0] == 7.5f, "version %d: rc %d %s", major, rc, err.msg);
    ff_array_free(&a);
  }
  image im = npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", &f, 4); /* rank 0: one element */
  int rc = ff_npy_parse(im.b, im.n, &a, &err);
  CHECK(!rc && a.rank == 0 && a.numel == 1 && ((float *)a.data)[0] == 7.5f, "rank 0: rc %d %s", rc, err.msg);
  ff_array_free(&a);
  im = npy(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (0, 5), }", NULL, 0); /* zero-size */
  rc = ff_npy_parse(im.b, im.n, &a, &err);
  CHECK(!rc && a.rank == 2 && a.shape[0] == 0 && a.shape[1] == 5 && a.numel == 0 && a.data,
        "zero-size: rc %d %s", rc, err.msg);
  ff_array_free(&a);
  im = npy(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }", NULL, 0);
  rc = ff_npy_parse(im.b, im.n, &a, &err);
  CHECK_ERR(rc, FF_ESHAPE, err, "rank above 8 not supported");
}

static void test_npy_refused(void) {
  ff_error err = {0, ""};
  ff_array a;
  const float f[2] = {1, 2};
  static const struct {
    const char *dict;
    int code;
    const char *msg;
  } bad[] = {
      {"{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", FF_ESHAPE, "fortran_order arrays not supported"},
      {"{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", FF_ESHAPE, "dtype '>f4' not supported"},
      {"{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", FF_ESHAPE, "dtype '<f8' not supported"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }", FF_EFORMAT, "header: shape holds a non-size"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999,), }", FF_EFORMAT,
       "header: shape size too large"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, 1099511627776), }", FF_EFORMAT,
       "shape too large"},
      {"{'descr': '<f4', 'fortran_order': False, }", FF_EFORMAT, "header lacks shape"},
      {"{'fortran_order': False, 'shape': (2,), }", FF_EFORMAT, "header lacks descr"},
      {"{'descr': '<f4', 'shape': (2,), }", FF_EFORMAT, "header lacks fortran_order"},
      {"{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2,), }", FF_EFORMAT, "fortran_order is not True or False"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'extra': 1}", FF_EFORMAT, "header: unknown key 'extra'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': [2], }", FF_EFORMAT, "header: shape is not a tuple"},
      {"{'descr': 4, 'fortran_order': False, 'shape': (2,), }", FF_EFORMAT, "header: descr is not a string"},
      {"{descr: '<f4'}", FF_EFORMAT, "header: expected a quoted key"},
      {"{'descr' '<f4'}", FF_EFORMAT, "header: expected ':'"},
      {"['descr']", FF_EFORMAT, "header is not a Python dict"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    image im = npy(1, bad[i].dict, f, sizeof f);
    int rc = ff_npy_parse(im.b, im.n, &a, &err);
    CHECK_ERR(rc, bad[i].code, err, bad[i].msg);
    CHECK(a.data == NULL && a.rank == 0, "refused array %zu left data", i);
  }
  const char *dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
  image im = npy(1, dict, f, sizeof f);
  im.b[0] = 'X';
  CHECK_ERR(ff_npy_parse(im.b, im.n, &a, &err), FF_EFORMAT, err, "not a .npy file (bad magic)");
  CHECK_ERR(ff_npy_parse(im.b, 5, &a, &err), FF_EFORMAT, err, "not a .npy file (bad magic)");
  im = npy(1, dict, f, sizeof f);
  im.b[6] = 4;
  CHECK_ERR(ff_npy_parse(im.b, im.n, &a, &err), FF_EFORMAT, err, "unsupported .npy version 4");
  im = npy(2, dict, f, sizeof f);
  CHECK_ERR(ff_npy_parse(im.b, 11, &a, &err), FF_EFORMAT, err, "truncated header");
  CHECK_ERR(ff_npy_parse(im.b, 40, &a, &err), FF_EFORMAT, err, "truncated header: 116 bytes announced");
  im = npy(1, dict, f, sizeof f);
  CHECK_ERR(ff_npy_parse(im.b, im.n - 1, &a, &err), FF_EFORMAT, err, "truncated: 7 bytes of data, the shape needs 8");
  im = npy(1, dict, f, sizeof f);
  im.b[im.n++] = 0;
  CHECK_ERR(ff_npy_parse(im.b, im.n, &a, &err), FF_EFORMAT, err, "trailing bytes: 9 bytes of data, the shape needs 8");
}

/* ---- safetensors ----------------------------------------------------------- */

static uint32_t bits_of(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static void test_st_dtypes(void) {
  ff_error err = {0, ""};
  ff_tensor_file tf;
  /* F16: 1, -2, the smallest subnormal 2^-24, the largest subnormal, 65504, +inf, -inf, NaN, -0 */
  const uint16_t h[9] = {0x3c00, 0xc000, 0x0001, 0x03ff, 0x7bff, 0x7c00, 0xfc00, 0x7e00, 0x8000};
  const uint16_t bf[2] = {0x3f80, 0xc0a0}; /* 1, -5 */
  const float f32[2] = {0.25f, -3};
  uint8_t data[18 + 4 + 8];
  memcpy(data, h, 18), memcpy(data + 18, bf, 4), memcpy(data + 22, f32, 8);
  image im = st("{\"__metadata__\": {\"format\": \"pt\"},"
                "\"h\": {\"dtype\": \"F16\", \"shape\": [9], \"data_offsets\": [0, 18]},"
                "\"b\": {\"dtype\": \"BF16\", \"shape\": [2, 1], \"data_offsets\": [18, 22]},"
                "\"f\": {\"dtype\": \"F32\", \"shape\": [1, 2], \"data_offsets\": [22, 30]}}",
                data, sizeof data);
  int rc = ff_safetensors_parse(im.b, im.n, &tf, &err);
  CHECK(!rc && tf.count == 3, "three tensors and __metadata__: rc %d %s", rc, err.msg);
  if (rc) return;
  const ff_tensor *th = ff_tensor_file_find(&tf, "h"), *tb = ff_tensor_file_find(&tf, "b"),
                  *tf32 = ff_tensor_file_find(&tf, "f");
  CHECK(th && tb && tf32 && !ff_tensor_file_find(&tf, "__metadata__") && !ff_tensor_file_find(&tf, "x"), "lookups");
  if (th) {
    const float *x = th->data;
    CHECK(th->file_dtype == FF_F16 && th->rank == 1 && th->numel == 9, "F16 tensor");
    CHECK(x[0] == 1 && x[1] == -2 && x[2] == ldexpf(1, -24) && x[3] == ldexpf(1023, -24) && x[4] == 65504,
          "F16 values %g %g %g %g %g", x[0], x[1], x[2], x[3], x[4]);
    CHECK(x[5] == INFINITY && x[6] == -INFINITY && x[7] != x[7], "F16 inf, -inf, nan: %g %g %g", x[5], x[6], x[7]);
    CHECK(bits_of(x[8]) == 0x80000000u, "F16 -0: %08x", (unsigned)bits_of(x[8]));
  }
  if (tb)
    CHECK(tb->file_dtype == FF_BF16 && tb->rank == 2 && tb->data[0] == 1 && tb->data[1] == -5, "BF16 %g %g",
          tb->data[0], tb->data[1]);
  if (tf32)
    CHECK(tf32->file_dtype == FF_F32 && tf32->shape[1] == 2 && tf32->data[0] == 0.25f && tf32->data[1] == -3, "F32");
  ff_tensor_file_free(&tf);
  /* empty header; rank 0 and zero-size tensors */
  im = st("{}", NULL, 0);
  rc = ff_safetensors_parse(im.b, im.n, &tf, &err);
  CHECK(!rc && tf.count == 0, "empty header: rc %d %s", rc, err.msg);
  ff_tensor_file_free(&tf);
  im = st("{\"s\": {\"dtype\": \"F32\", \"shape\": [], \"data_offsets\": [0, 4]},"
          "\"z\": {\"dtype\": \"F32\", \"shape\": [0, 3], \"data_offsets\": [4, 4]}}",
          f32, 4);
  rc = ff_safetensors_parse(im.b, im.n, &tf, &err);
  CHECK(!rc && tf.count == 2, "rank 0 and zero-size: rc %d %s", rc, err.msg);
  if (!rc) {
    const ff_tensor *s = ff_tensor_file_find(&tf, "s"), *z = ff_tensor_file_find(&tf, "z");
    CHECK(s && s->rank == 0 && s->numel == 1 && s->data[0] == 0.25f, "rank 0 tensor");
    CHECK(z && z->rank == 2 && z->numel == 0, "zero-size tensor");
  }
  ff_tensor_file_free(&tf);
}

static void test_st_refused(void) {
  ff_error err = {0, ""};
  ff_tensor_file tf;
  uint8_t data[32] = {0};
  static const struct {
    const char *json;
    int code;
    const char *msg;
  } bad[] = {
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 40]}}", FF_EFORMAT,
       "tensor 'a': data_offsets [0, 40] beyond the 32-byte data buffer (truncated?)"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 4]}}", FF_EFORMAT,
       "tensor 'a': data_offsets must be [begin, end] with 0 <= begin <= end"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [-1, 7]}}", FF_EFORMAT,
       "tensor 'a': data_offsets must be"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0]}}", FF_EFORMAT,
       "tensor 'a': data_offsets must be"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [0, 8]}}", FF_EFORMAT,
       "tensor 'a': 8 data bytes for 3 elements of F32"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
       "\"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}",
       FF_EFORMAT, "tensors 'a' and 'b' overlap in the data buffer"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
       "\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 16]}}",
       FF_EFORMAT, "header: key \"a\" appears twice in the top-level object"},
      {"{\"a\": {\"dtype\": \"F64\", \"shape\": [1], \"data_offsets\": [0, 8]}}", FF_EFORMAT,
       "tensor 'a': dtype F64 not supported (F32, F16, BF16)"},
      {"{\"a\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", FF_EFORMAT, "tensor 'a': missing dtype"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 4]}}", FF_EFORMAT,
       "tensor 'a': shape holds a negative, fractional or too large size"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1.5], \"data_offsets\": [0, 4]}}", FF_EFORMAT,
       "tensor 'a': shape holds a negative"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": [4294967296, 4294967296, 4294967296], \"data_offsets\": [0, 4]}}",
       FF_EFORMAT, "tensor 'a': shape holds a negative, fractional or too large size"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1,1,1,1,1,1,1,1,1], \"data_offsets\": [0, 4]}}", FF_EFORMAT,
       "tensor 'a': shape must be an array of at most 8 sizes"},
      {"{\"a\": {\"dtype\": \"F32\", \"shape\": 1, \"data_offsets\": [0, 4]}}", FF_EFORMAT,
       "tensor 'a': shape must be an array"},
      {"{\"a\": [1, 2]}", FF_EFORMAT, "tensor 'a': entry is not an object"},
      {"{\"__metadata__\": [1]}", FF_EFORMAT, "__metadata__ is not an object"},
      {"{\"a\": 1", FF_EFORMAT, "header: not valid JSON (at byte"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    image im = st(bad[i].json, data, sizeof data);
    int rc = ff_safetensors_parse(im.b, im.n, &tf, &err);
    CHECK_ERR(rc, bad[i].code, err, bad[i].msg);
    CHECK(tf.tensors == NULL && tf.count == 0, "refused file %zu left tensors", i);
  }
  image im = st("[1, 2]", NULL, 0); /* header bounds and non-object headers */
  CHECK_ERR(ff_safetensors_parse(im.b, im.n, &tf, &err), FF_EFORMAT, err, "not a safetensors file (no 8-byte header");
  CHECK_ERR(ff_safetensors_parse(im.b, 5, &tf, &err), FF_EFORMAT, err, "5 bytes, shorter than the 8-byte header length");
  im = st("{}", NULL, 0);
  im.b[0] = 0;
  CHECK_ERR(ff_safetensors_parse(im.b, im.n, &tf, &err), FF_EFORMAT, err, "not a safetensors file");
  im = st("{\"a\": 1}", NULL, 0);
  CHECK_ERR(ff_safetensors_parse(im.b, im.n - 2, &tf, &err), FF_EFORMAT, err,
            "truncated: the header needs 8 bytes, only 6 follow");
  im = st("{}", NULL, 0);
  im.b[0] = 0, im.b[3] = 0x10; /* 256 MiB: above FF_SAFETENSORS_MAX_HEADER */
  CHECK_ERR(ff_safetensors_parse(im.b, im.n, &tf, &err), FF_EFORMAT, err, "not a safetensors file");
  im = st("\"{}\"", NULL, 0);
  CHECK_ERR(ff_safetensors_parse(im.b, im.n, &tf, &err), FF_EFORMAT, err, "not a safetensors file");
  im = st("{} ", NULL, 0);
  memcpy(im.b, "PK\x03\x04\x14\x00\x08\x00", 8);
  CHECK_ERR(ff_safetensors_parse(im.b, im.n, &tf, &err), FF_EFORMAT, err, "a zip archive, as torch.save writes");
}

/* ---- files ----------------------------------------------------------------- */

static char dir[64];

static const char *in_dir(const char *name) {
  static char buf[16][160]; /* a few names live at once */
  static int k;
  k = (k + 1) % 16;
  snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
  return buf[k];
}

/* the whole file as a string ("" when absent) */
static const char *contents(const char *path) {
  static char buf[256];
  FILE *f = fopen(path, "rb");
  size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
  if (f) fclose(f);
  buf[n] = 0;
  return buf;
}

static void put_file(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  if (f) fputs(text, f), fclose(f);
}

/* entries of dir other than the listed ones: no temporary left behind */
static int leftovers(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "ls -A %s | grep -c '\\.tmp\\.\\|\\.old\\.'", dir);
  FILE *p = popen(cmd, "r");
  int n = -1;
  if (p && fscanf(p, "%d", &n) != 1) n = -1;
  if (p) pclose(p);
  return n;
}

static void test_write_atomic(void) {
  ff_error err = {0, ""};
  struct stat st;
  const char *a = in_dir("a.txt"), *link = in_dir("link"), *sub = in_dir("sub");
  CHECK(!ff_write_file_atomic(a, "first", 5, &err) && !strcmp(contents(a), "first"), "new file: %s", err.msg);
  CHECK(!ff_write_file_atomic(a, "second", 6, &err) && !strcmp(contents(a), "second"), "replaced: %s", err.msg);
  CHECK(symlink("a.txt", link) == 0, "symlink");
  CHECK(!ff_write_file_atomic(link, "through", 7, &err), "through a symlink: %s", err.msg);
  CHECK(!lstat(link, &st) && S_ISLNK(st.st_mode) && !strcmp(contents(a), "through"),
        "the link is kept and its target written: '%s'", contents(a));
  CHECK(mkdir(sub, 0700) == 0, "mkdir");
  CHECK_ERR(ff_write_file_atomic(sub, "x", 1, &err), FF_EIO, err, "sub: cannot write: is a directory");
  CHECK(symlink("nowhere", in_dir("dangling")) == 0, "dangling symlink");
  CHECK_ERR(ff_write_file_atomic(in_dir("dangling"), "x", 1, &err), FF_EIO, err, "a dangling symbolic link");
  CHECK_ERR(ff_write_file_atomic(in_dir("none/x"), "x", 1, &err), FF_EIO, err, "none/x: cannot write:");
  CHECK(leftovers() == 0, "temporaries left: %d", leftovers());
}

static void test_write_files_atomic(void) {
  ff_error err = {0, ""};
  const char *b = in_dir("b.txt"), *c = in_dir("c.txt"), *sub = in_dir("sub"), *d = in_dir("d.txt");
  put_file(b, "old b");
  ff_file_out two[2] = {{b, "new b", 5}, {c, "new c", 5}};
  CHECK(!ff_write_files_atomic(two, 2, &err), "two files: %s", err.msg);
  CHECK(!strcmp(contents(b), "new b") && !strcmp(contents(c), "new c"), "both written");
  /* a directory in the way: nothing changes */
  ff_file_out blocked[3] = {{b, "newer b", 7}, {d, "d", 1}, {sub, "x", 1}};
  CHECK_ERR(ff_write_files_atomic(blocked, 3, &err), FF_EIO, err, "sub: cannot write: is a directory");
  CHECK(!strcmp(contents(b), "new b") && access(d, F_OK) != 0, "none written: b '%s'", contents(b));
  /* a later file under a regular file (root writes into read-only folders, not this): its temporary
   * fails after b's was written, and b stays */
  ff_file_out late[3] = {{b, "newest b", 8}, {d, "d", 1}, {in_dir("c.txt/f"), "f", 1}};
  CHECK_ERR(ff_write_files_atomic(late, 3, &err), FF_EIO, err, "c.txt/f: cannot write:");
  CHECK(!strcmp(contents(b), "new b") && access(d, F_OK) != 0, "all or none: b '%s'", contents(b));
  CHECK(leftovers() == 0, "temporaries left: %d", leftovers());
  CHECK(!ff_write_files_atomic(NULL, 0, &err), "no files: %s", err.msg);
}

static void test_round_trips(void) {
  ff_error err = {0, ""};
  const char *pn = in_dir("x.npy"), *ps = in_dir("w.safetensors");
  const int64_t v[5] = {3, -1, 0, (int64_t)1 << 50, -7};
  for (int r = 0; r < 3; r++) { /* rank 1, 2 and 0 */
    ff_array a = {FF_I64, r == 2 ? 0 : r + 1, {5, 1}, r == 2 ? 1 : 5, (void *)v}, b;
    if (r == 1) a.shape[0] = 1, a.shape[1] = 5;
    int rc = ff_npy_write(pn, &a, &err);
    if (!rc) rc = ff_npy_read(pn, &b, &err);
    CHECK(!rc && b.dtype == FF_I64 && b.rank == a.rank && b.numel == a.numel &&
              !memcmp(b.data, v, a.numel * sizeof *v) && (a.rank < 2 || b.shape[1] == 5),
          "npy rank %d round trip: rc %d %s", a.rank, rc, err.msg);
    if (!rc) ff_array_free(&b);
  }
  const float w1[6] = {1, 2, 3, 4, 5, NAN}, w2[1] = {-0.5f};
  ff_tensor_view views[3] = {{"layer.w", 2, {2, 3}, w1}, {"bias", 1, {1}, w2}, {"empty", 1, {0}, w1}};
  ff_tensor_file tf;
  int rc = ff_safetensors_write(ps, views, 3, &err);
  if (!rc) rc = ff_safetensors_read(ps, &tf, &err);
  CHECK(!rc && tf.count == 3, "safetensors round trip: rc %d %s", rc, err.msg);
  if (!rc) {
    const ff_tensor *t = ff_tensor_file_find(&tf, "layer.w"), *b = ff_tensor_file_find(&tf, "bias");
    CHECK(t && t->rank == 2 && t->shape[1] == 3 && !memcmp(t->data, w1, 5 * sizeof(float)) && t->data[5] != t->data[5],
          "layer.w");
    CHECK(b && b->numel == 1 && b->data[0] == -0.5f, "bias");
    ff_tensor_file_free(&tf);
  }
  put_file(ps, "\x80\x02garbage");
  CHECK_ERR(ff_safetensors_read(ps, &tf, &err), FF_EFORMAT, err, "w.safetensors: a Python pickle");
  CHECK_ERR(ff_npy_read(in_dir("sub"), &(ff_array){0}, &err), FF_EIO, err, "sub: is a directory");
}

/* ff_safetensors_read maps the file: an aligned F32 tensor points into the
 * mapping, an F16 and an unaligned F32 tensor are converted into owned
 * memory with the same values as from memory; ff_tensor_make_owned gives a
 * writable copy; a file cut short is one line, never a SIGBUS. */
static void test_st_mapped(void) {
  ff_error err = {0, ""};
  ff_tensor_file tf;
  const float a[2] = {1.5f, -2.25f}, u[2] = {3.125f, -0.0625f};
  const uint16_t h[2] = {0x3c00, 0xc000}; /* 1, -2 */
  uint8_t data[22] = {0};
  memcpy(data, a, 8), memcpy(data + 8, h, 4), memcpy(data + 14, u, 8); /* u at 14: 2 bytes off */
  char json[256] = "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
                   "\"h\": {\"dtype\": \"F16\", \"shape\": [2], \"data_offsets\": [8, 12]},"
                   "\"u\": {\"dtype\": \"F32\", \"shape\": [1, 2], \"data_offsets\": [14, 22]}}";
  while (strlen(json) % 4) strcat(json, " "); /* the data buffer 4-byte aligned in the file */
  image im = st(json, data, sizeof data);
  const char *path = in_dir("mapped.safetensors");
  FILE *f = fopen(path, "wb");
  if (f) fwrite(im.b, 1, im.n, f), fclose(f);
  int rc = ff_safetensors_read(path, &tf, &err);
  CHECK(!rc && tf.count == 3 && tf.map && tf.map_bytes == im.n, "mapped read: rc %d %s", rc, err.msg);
  if (rc) return;
  ff_tensor *ta = (ff_tensor *)ff_tensor_file_find(&tf, "a"), *tu = (ff_tensor *)ff_tensor_file_find(&tf, "u");
  const ff_tensor *th = ff_tensor_file_find(&tf, "h");
  CHECK(ta && th && tu, "lookups");
  if (!ta || !th || !tu) return;
  CHECK(ff_tensor_is_mapped(&tf, ta) && !memcmp(ta->data, a, 8), "aligned F32: in the mapping, %g %g", ta->data[0],
        ta->data[1]);
  CHECK(!ff_tensor_is_mapped(&tf, tu) && !memcmp(tu->data, u, 8) && tu->rank == 2, "unaligned F32: owned, %g %g",
        tu->data[0], tu->data[1]);
  CHECK(!ff_tensor_is_mapped(&tf, th) && th->data[0] == 1 && th->data[1] == -2, "F16: owned, %g %g", th->data[0],
        th->data[1]);
  const float *before = ta->data, *owned_u = tu->data;
  rc = ff_tensor_make_owned(&tf, ta, &err);
  CHECK(!rc && ta->data != before && !ff_tensor_is_mapped(&tf, ta) && !memcmp(ta->data, a, 8), "make_owned: a copy");
  if (!rc) ta->data[0] = 7; /* writable (the mapping is read-only) */
  CHECK(before[0] == 1.5f && ff_tensor_file_find(&tf, "a")->data[0] == 7, "the copy is written, the file is not");
  CHECK(!ff_tensor_make_owned(&tf, tu, &err) && tu->data == owned_u, "make_owned of an owned tensor: nothing");
  ff_tensor_file_free(&tf);
  CHECK(!tf.map && !tf.extra && !tf.count, "freed");
  if (truncate(path, (off_t)im.n - 4)) perror("truncate");
  CHECK_ERR(ff_safetensors_read(path, &tf, &err), FF_EFORMAT, err, "mapped.safetensors: tensor 'u': data_offsets [14, 22] beyond");
}

/* Under a file-size limit (ulimit -f) with SIGXFSZ at its default (death),
 * every writer fails with EFBIG before it writes, and leaves nothing: the
 * library never raises the signal (old code: killed here, KEY.tmp left). */
static void test_write_size_limit(void) {
  ff_error err = {0, ""};
  struct rlimit was, small;
  char big[1000];
  memset(big, 'x', sizeof big);
  signal(SIGXFSZ, SIG_DFL);
  if (getrlimit(RLIMIT_FSIZE, &was)) return;
  small = was;
  small.rlim_cur = 100; /* the soft limit only: put back below */
  CHECK(!setrlimit(RLIMIT_FSIZE, &small), "setrlimit");
  const char *a = in_dir("limited.txt"), *b = in_dir("limited2.txt");
  CHECK(!ff_write_file_atomic(a, big, 100, &err) && strlen(contents(a)) == 100, "exactly at the limit: %s", err.msg);
  CHECK_ERR(ff_write_file_atomic(a, big, sizeof big, &err), FF_EIO, err, "limited.txt: cannot write: File too large");
  CHECK(strlen(contents(a)) == 100, "the old file stays");
  ff_file_out two[2] = {{b, "b", 1}, {a, big, sizeof big}};
  CHECK_ERR(ff_write_files_atomic(two, 2, &err), FF_EIO, err, "limited.txt: cannot write: File too large");
  CHECK(access(b, F_OK) != 0 && strlen(contents(a)) == 100, "all or none under the limit");
  float w[64] = {0};
  ff_tensor_view v = {"w", 1, {64}, w};
  CHECK_ERR(ff_safetensors_write(in_dir("w.safetensors"), &v, 1, &err), FF_EIO, err, "File too large");
  ff_array arr = {FF_F32, 1, {64}, 64, w};
  CHECK_ERR(ff_npy_write(in_dir("o.npy"), &arr, &err), FF_EIO, err, "o.npy: cannot write: File too large");
  int fd = open(in_dir("raw"), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  CHECK(fd >= 0 && ff_write_all(fd, big, 60) == 0 && ff_write_all(fd, big, 60) == EFBIG &&
            lseek(fd, 0, SEEK_END) == 60,
        "ff_write_all: the second 60 bytes refused, none of them written");
  if (fd >= 0) close(fd);
  CHECK(leftovers() == 0, "temporaries left: %d", leftovers());
  CHECK(!setrlimit(RLIMIT_FSIZE, &was), "setrlimit back");
}

/* ff_json_parse refuses a key twice in any object at any depth (cJSON reads
 * the first, Python's json the last), naming what and the key; the same key
 * in two objects, and many keys, are fine; nothing may follow the value. */
static void test_json_unique(void) {
  ff_error err = {0, ""};
  static const struct {
    const char *json, *msg; /* msg NULL: accepted */
  } cases[] = {
      {"{\"rope_scaling\": null, \"a\": 1, \"rope_scaling\": {\"type\": \"linear\"}}",
       "config.json: key \"rope_scaling\" appears twice in the top-level object"},
      {"{\"model\": {\"vocab\": {\"a\": 0, \"b\": 1, \"a\": 2}}}", "key \"a\" appears twice in object \"vocab\""},
      {"{\"added_tokens\": [{\"id\": 1}, {\"id\": 2, \"content\": \"x\", \"id\": 3}]}",
       "key \"id\" appears twice in an object in an array"},
      {"[[[{\"k\": [{\"z\": 1, \"z\": 1}]}]]]", "key \"z\" appears twice"},
      {"{\"a\": {\"x\": 1}, \"b\": {\"x\": 1}, \"c\": [{\"x\": 1}, {\"x\": 2}], \"x\": 0}", NULL},
      {"{\"a\": 1, \"A\": 2}", NULL}, /* keys are case-sensitive, as every lookup here is */
      {"{\"a\": 1}  \n", NULL},
      {"{\"a\": 1} {\"a\": 2}", "config.json: bytes after the JSON value (at byte 9)"},
      {"{\"a\": 1", "config.json: not valid JSON"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    cJSON *root = ff_json_parse(cases[i].json, strlen(cases[i].json), "config.json", &err);
    if (cases[i].msg)
      CHECK(!root && err.code == FF_EFORMAT && strstr(err.msg, cases[i].msg), "case %zu: '%s', want '%s'", i, err.msg,
            cases[i].msg);
    else
      CHECK(root != NULL, "case %zu refused: %s", i, err.msg);
    cJSON_Delete(root);
  }
  /* deep nesting (cJSON's own limit is 1000) and a wide object: 50000 keys, one of them twice */
  enum { DEPTH = 900, KEYS = 50000 };
  char *deep = malloc(DEPTH * 6 + 64), *wide = malloc((size_t)KEYS * 16 + 64);
  if (!deep || !wide) return;
  size_t n = 0;
  for (int i = 0; i < DEPTH; i++) n += (size_t)sprintf(deep + n, "{\"k\":");
  n += (size_t)sprintf(deep + n, "{\"d\":1,\"d\":2}");
  for (int i = 0; i < DEPTH; i++) deep[n++] = '}';
  cJSON *root = ff_json_parse(deep, n, "deep.json", &err);
  CHECK(!root && strstr(err.msg, "deep.json: key \"d\" appears twice in object \"k\""), "deep: '%s'", err.msg);
  cJSON_Delete(root);
  n = (size_t)sprintf(wide, "{");
  for (int i = 0; i < KEYS; i++) n += (size_t)sprintf(wide + n, "\"t%d\":%d,", i, i);
  n += (size_t)sprintf(wide + n, "\"t%d\":0}", KEYS / 2);
  root = ff_json_parse(wide, n, "vocab.json", &err);
  CHECK(!root && strstr(err.msg, "key \"t25000\" appears twice"), "wide: '%s'", err.msg);
  cJSON_Delete(root);
  wide[n - 10] = 'u'; /* the last key "u25000": none twice */
  root = ff_json_parse(wide, n, "vocab.json", &err);
  CHECK(root && cJSON_GetArraySize(root) == KEYS + 1, "wide, unique: %s", err.msg);
  cJSON_Delete(root);
  free(deep);
  free(wide);
}

int main(void) {
  snprintf(dir, sizeof dir, "%s", "/tmp/test_io.XXXXXX");
  const char *tmpdir = getenv("TMPDIR");
  if (tmpdir && strlen(tmpdir) < 40) snprintf(dir, sizeof dir, "%s/test_io.XXXXXX", tmpdir);
  if (!mkdtemp(dir)) {
    perror("test_io: mkdtemp");
    return 1;
  }
  test_npy_dtypes();
  test_npy_versions_shapes();
  test_npy_refused();
  test_st_dtypes();
  test_st_refused();
  test_write_atomic();
  test_write_files_atomic();
  test_round_trips();
  test_st_mapped();
  test_write_size_limit();
  test_json_unique();
  char cmd[96];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd)) printf("test_io: could not remove %s\n", dir);
  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
