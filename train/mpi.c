/* mpi.c - the ranks of a data-parallel run over MPI: joining the job, the
 * agreement on every rank's status, and the sums of the gradient.  The one
 * file that includes mpi.h (compiled when CMake finds MPI; mpi_none.c is
 * the build without it).  The trainer's collectives run on a duplicate of
 * MPI_COMM_WORLD, so that an application's own messages never meet them. */
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "train_internal.h"

static MPI_Comm comm = MPI_COMM_NULL;
static int joined, started, my_rank, size = 1;

int ff_train_mpi_begin(int *rank, int *ranks, ff_error *err) {
  int launcher_rank, initialized = 0;
  *rank = 0, *ranks = 1;
  if (!joined && ff_train_launcher(&launcher_rank)) { /* no launcher: one process, MPI left alone */
    MPI_Initialized(&initialized);
    int provided; /* (the runtime's threads never call MPI: the main thread does) */
    if (!initialized && MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
      return ff_fail(err, FF_EINVAL, "MPI_Init_thread failed");
    started = !initialized; /* an application's MPI is its own to finalize */
    if (MPI_Comm_dup(MPI_COMM_WORLD, &comm) != MPI_SUCCESS)
      return ff_fail(err, FF_EINVAL, "MPI_Comm_dup failed");
    MPI_Comm_rank(comm, &my_rank);
    MPI_Comm_size(comm, &size);
    joined = 1;
  }
  *rank = my_rank, *ranks = size;
  return 0;
}

void ff_train_mpi_end(void) {
  if (joined) MPI_Barrier(comm); /* (what rank 0 prints on its way out is out before any rank ends) */
  if (joined) MPI_Comm_free(&comm);
  if (started) MPI_Finalize();
  joined = started = 0, my_rank = 0, size = 1;
}

int ff_train_ranks(int *rank) {
  *rank = my_rank;
  return size;
}

int ff_train_mpi_agree(int rc, ff_error *err) {
  if (size <= 1) return rc;
  /* the first failing rank: an error (2 size - rank) before a stop (size - rank), lower ranks first */
  int key = rc == 0 ? 0 : (rc == FF_EINTR ? size : 2 * size) - my_rank;
  MPI_Allreduce(MPI_IN_PLACE, &key, 1, MPI_INT, MPI_MAX, comm);
  if (!key) return 0;
  int from = key > size ? 2 * size - key : size - key;
  struct {
    int code;
    char msg[FF_ERROR_MAX];
  } m;
  memset(&m, 0, sizeof m);
  if (my_rank == from) {
    const char *text = err && err->msg[0] ? err->msg : "failed";
    m.code = rc;
    if (from && rc != FF_EINTR) snprintf(m.msg, sizeof m.msg, "rank %d: %.480s", from, text);
    else snprintf(m.msg, sizeof m.msg, "%s", text);
  }
  MPI_Bcast(&m, (int)sizeof m, MPI_BYTE, from, comm);
  return ff_fail(err, m.code, "%s", m.msg);
}

/* (MPI counts are ints: INT_MAX elements at a time) */
void ff_train_sum_floats(float *x, size_t n) {
  for (size_t at = 0; size > 1 && at < n; at += INT_MAX) {
    size_t k = n - at < (size_t)INT_MAX ? n - at : (size_t)INT_MAX;
    MPI_Allreduce(MPI_IN_PLACE, x + at, (int)k, MPI_FLOAT, MPI_SUM, comm);
  }
}

void ff_train_sum_doubles(double *x, int n) {
  if (size > 1) MPI_Allreduce(MPI_IN_PLACE, x, n, MPI_DOUBLE, MPI_SUM, comm);
}

int ff_train_same(uint64_t h) {
  if (size <= 1) return 1;
  uint64_t v[2] = {h, ~h}; /* max(h) == h and max(~h) == ~h on every rank iff all are h */
  MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_UINT64_T, MPI_MAX, comm);
  return v[0] == h && v[1] == ~h;
}
