/* mpi_none.c - the ranks of a build without MPI: one process.  Started by
 * an MPI launcher with several ranks, it refuses: each rank would train the
 * whole run by itself and write the same files (mpi.c is the build with
 * MPI). */
#include "train_internal.h"

int ff_train_mpi_begin(int *rank, int *ranks, ff_error *err) {
  int r, n = ff_train_launcher(&r);
  *rank = n > 1 ? r : 0, *ranks = 1;
  if (n > 1)
    return ff_fail(err, FF_EINVAL, "started as rank %d of %d by an MPI launcher, but this fixformer is built without "
                   "MPI: it would train %d copies side by side (build it with MPI: docs/build.md)", r, n, n);
  return 0;
}

void ff_train_mpi_end(void) {}

int ff_train_mpi_agree(int rc, ff_error *err) {
  (void)err;
  return rc;
}

int ff_train_ranks(int *rank) {
  *rank = 0;
  return 1;
}

void ff_train_sum_floats(float *x, size_t n) { (void)x, (void)n; }

void ff_train_sum_doubles(double *x, int n) { (void)x, (void)n; }

int ff_train_same(uint64_t h) {
  (void)h;
  return 1;
}
