/* blob_cache.c - packed weights kept in the cache folder (cache.c), so
 * that a second start maps them instead of reading and packing the weights
 * file again: KEY.blob, KEY the blob format, the weights' sha256 and the
 * program's layout hash, verified as every entry is. */
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
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

/* The blob's sha256 taken by a thread of its own that follows the packer:
 * hashing (about 2 GB/s) as long as packing, the two side by side. */
struct ff_blob_hasher {
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t more;
  const unsigned char *data;
  size_t ready, bytes; /* ready: final bytes from the start; bytes: all */
  int stop, ok;
  unsigned char md[EVP_MAX_MD_SIZE];
};

static void *hash_follow(void *arg) {
  struct ff_blob_hasher *h = arg;
  EVP_MD_CTX *c = EVP_MD_CTX_new();
  int ok = c && EVP_DigestInit_ex(c, EVP_sha256(), NULL);
  for (size_t at = 0;;) {
    pthread_mutex_lock(&h->lock);
    while (h->ready == at && !h->stop) pthread_cond_wait(&h->more, &h->lock);
    const size_t to = h->ready;
    const int stop = h->stop;
    pthread_mutex_unlock(&h->lock);
    ok = ok && EVP_DigestUpdate(c, h->data + at, to - at);
    at = to;
    if (at == h->bytes || stop) {
      unsigned n = 0;
      h->ok = ok && at == h->bytes && EVP_DigestFinal_ex(c, h->md, &n) && n == 32;
      break;
    }
  }
  EVP_MD_CTX_free(c);
  return NULL;
}

static struct ff_blob_hasher *hasher_start(const void *data, size_t bytes) {
  struct ff_blob_hasher *h = calloc(1, sizeof *h);
  if (!h) return NULL;
  h->data = data;
  h->bytes = bytes;
  pthread_mutex_init(&h->lock, NULL);
  pthread_cond_init(&h->more, NULL);
  if (!pthread_create(&h->thread, NULL, hash_follow, h)) return h;
  pthread_mutex_destroy(&h->lock);
  pthread_cond_destroy(&h->more);
  free(h);
  return NULL;
}

void ff_blob_cache_ready(void *arg, size_t bytes) {
  struct ff_blob_hasher *h = ((ff_blob_pending *)arg)->hasher;
  if (!h) return;
  pthread_mutex_lock(&h->lock);
  if (bytes > h->ready && bytes <= h->bytes) h->ready = bytes;
  pthread_cond_signal(&h->more);
  pthread_mutex_unlock(&h->lock);
}

/* The hash of all of it (whole: the rest is final too), or 0 when the thread
 * could not take it; the thread is gone either way. */
static int hasher_end(struct ff_blob_hasher *h, int whole, char sha[65]) {
  pthread_mutex_lock(&h->lock);
  if (whole) h->ready = h->bytes;
  h->stop = 1;
  pthread_cond_signal(&h->more);
  pthread_mutex_unlock(&h->lock);
  pthread_join(h->thread, NULL);
  const int ok = whole && h->ok;
  if (ok) ff_digest_hex(h->md, sha);
  pthread_mutex_destroy(&h->lock);
  pthread_cond_destroy(&h->more);
  free(h);
  return ok;
}

/* Packing writes into the entry's own pages: a temporary file of the
 * blob's size, allocated (so that no store through the mapping meets a full
 * disk: that would be SIGBUS) and mapped shared.  Its bytes go to the page
 * cache once, where writing a blob packed in memory copied them there (half
 * of a new 110M file's start) and held them twice. */
int ff_blob_cache_begin(const char *weights_sha, uint64_t layout_hash, size_t bytes, ff_blob_pending *pb,
                        ff_error *err) {
  struct rlimit rl;
  int rc, e;
  memset(pb, 0, sizeof *pb);
  pb->fd = -1;
  if ((rc = ff_cache_max(&pb->max, &pb->scaled, err)) || (rc = ff_cc_cache_dir(pb->dir, sizeof pb->dir, err)))
    return rc;
  if (!bytes || (uintmax_t)bytes > (uintmax_t)INTMAX_MAX || (!pb->scaled && bytes > pb->max / 2))
    return -1; /* over half: it would push out the compiled code (and be pushed out by it) */
  if (!getrlimit(RLIMIT_FSIZE, &rl) && rl.rlim_cur != RLIM_INFINITY && (uintmax_t)bytes > (uintmax_t)rl.rlim_cur)
    return ff_fail(err, FF_EIO, "cannot write the blob in %s: %s", pb->dir, strerror(EFBIG)); /* (not SIGXFSZ) */
  blob_key(weights_sha, layout_hash, pb->key);
  if ((pb->fd = ff_cache_temp(pb->dir, pb->key, pb->tmp)) < 0)
    return ff_fail(err, FF_EIO, "cannot write in the cache directory %s: %s", pb->dir, strerror(errno));
  e = fchmod(pb->fd, 0600) ? errno : posix_fallocate(pb->fd, 0, (off_t)bytes);
  if (!e && (pb->data = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, pb->fd, 0)) == MAP_FAILED) e = errno;
  if (e) {
    pb->data = NULL;
    ff_blob_cache_finish(pb, 0, NULL);
    return ff_fail(err, FF_EIO, "cannot write the blob in %s: %s", pb->dir, strerror(e));
  }
  pb->bytes = bytes;
  pb->hasher = hasher_start(pb->data, bytes);
  return 0;
}

/* Its KEY.sha256 (of the bytes in memory, by the hasher if it ran: no
 * pass over the file) written, then renamed to KEY.blob; the mapping stays (read-only now) for
 * the caller to munmap.  A failure or !keep leaves nothing in the folder. */
int ff_blob_cache_finish(ff_blob_pending *pb, int keep, ff_error *err) {
  char sha[65], path[FF_CACHE_PATH];
  int rc = 0, e = 0;
  if (pb->data) mprotect(pb->data, pb->bytes, PROT_READ);
  const int hashed = pb->hasher && hasher_end(pb->hasher, keep, sha);
  pb->hasher = NULL;
  if (keep) {
    snprintf(path, sizeof path, "%s/%.*s.blob", pb->dir, FF_CACHE_KEY_HEX, pb->key);
    if (!hashed) ff_sha256_hex(pb->data, pb->bytes, sha);
    if ((rc = ff_cache_write_sidecar(pb->dir, pb->key, sha, err))) e = EIO;
    else if (rename(pb->tmp, path)) e = errno;
    if (e && !rc) rc = ff_fail(err, FF_EIO, "cannot write %s: %s", path, strerror(e));
  }
  if (pb->fd >= 0) close(pb->fd); /* (the mapping stays) */
  pb->fd = -1;
  if (!keep || rc) {
    unlink(pb->tmp);
    return rc;
  }
  struct stat st; /* (after the rename, which sets its ctime) */
  char ok[64];
  snprintf(ok, sizeof ok, "%.*s.ok", FF_CACHE_KEY_HEX, pb->key);
  if (!lstat(path, &st)) ff_cache_memo_write(pb->dir, ok, &st, sha, 1); /* the next start need not hash it */
  ff_cache_prune(pb->dir, pb->key, pb->key, pb->max, pb->scaled);
  return 0;
}
