/* blob_cache.c - packed weights kept in the cache folder (cache.c), so
 * that a second start maps them instead of reading and packing the weights
 * file again: KEY.blob, KEY the blob format, the weights' sha256 and the
 * program's layout hash, verified as every entry is. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache.h"
#include "fixformer.h"
#include "host.h"

/* The entry's key: the blob's format, the weights' content, the layout */
static void blob_key(const char *weights_sha, uint64_t layout_hash, char key[65]) {
  char text[160];
  snprintf(text, sizeof text, "weights %.64s\nlayout %016llx\n", weights_sha, (unsigned long long)layout_hash);
  ff_cache_key("fixformer packed weights 1", text, key);
}

int ff_blob_cache_open(const char *weights_sha, uint64_t layout_hash, void **data, size_t *bytes, ff_error *err) {
  char dir[PATH_MAX], key[65], sha[65];
  struct stat st;
  int rc = ff_cc_cache_dir(dir, sizeof dir, err);
  *data = NULL;
  *bytes = 0;
  if (rc) return rc;
  blob_key(weights_sha, layout_hash, key);
  int fd = ff_cache_open_verified(dir, key, ".blob", sha);
  if (fd < 0) return 0;
  if (!fstat(fd, &st) && st.st_size > 0 && (uintmax_t)st.st_size <= SIZE_MAX) {
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p != MAP_FAILED) {
      *data = p;
      *bytes = (size_t)st.st_size;
    }
  }
  close(fd); /* the mapping stays */
  return 0;
}

/* Written to a unique temporary, its KEY.sha256 (of the bytes written,
 * hashed in memory: no second pass over the file) written, then renamed to
 * KEY.blob; a failure leaves nothing (the cache is an aid). */
int ff_blob_cache_store(const char *weights_sha, uint64_t layout_hash, const void *data, size_t bytes,
                        ff_error *err) {
  char dir[PATH_MAX], key[65], sha[65], tmp[FF_CACHE_PATH], path[FF_CACHE_PATH];
  size_t max;
  int scaled, rc = ff_cache_max(&max, &scaled, err);
  if (rc || (rc = ff_cc_cache_dir(dir, sizeof dir, err))) return rc;
  if (!scaled && bytes > max / 2) return 0; /* it would push out the compiled code (and be pushed out by it) */
  blob_key(weights_sha, layout_hash, key);
  snprintf(path, sizeof path, "%s/%.*s.blob", dir, FF_CACHE_KEY_HEX, key);
  int fd = ff_cache_temp(dir, key, tmp), e = fd < 0 ? errno : 0;
  if (e) return ff_fail(err, FF_EIO, "cannot write in the cache directory %s: %s", dir, strerror(e));
  e = fchmod(fd, 0600) ? errno : ff_write_all(fd, data, bytes);
  if (!e) ff_sha256_hex(data, bytes, sha);
  if (close(fd) && !e) e = errno;
  if (!e && (rc = ff_cache_write_sidecar(dir, key, sha, err))) e = EIO;
  if (!e && rename(tmp, path)) e = errno;
  if (e) {
    unlink(tmp);
    return rc ? rc : ff_fail(err, FF_EIO, "cannot write %s: %s", path, strerror(e));
  }
  struct stat st; /* (after the rename, which sets its ctime) */
  char ok[64];
  snprintf(ok, sizeof ok, "%.*s.ok", FF_CACHE_KEY_HEX, key);
  if (!lstat(path, &st)) ff_cache_memo_write(dir, ok, &st, sha, 1); /* the next start need not hash it */
  ff_cache_prune(dir, key, key, max, scaled);
  return 0;
}
