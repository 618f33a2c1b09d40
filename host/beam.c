/* beam.c - ff_model_beam's search loop: runtime/ff_beam.h picks the beams
 * and says which rows of which caches to copy (its top says why rows),
 * host/api.c's decode states (ff_slots) hold the caches. */
#include <stdlib.h>
#include <string.h>

#include "beam.h"
#include "ff_beam.h"

int ff_beam_check(const ff_config *c, const ff_beam_opts *b, ff_error *err) {
  if (b->beams < 1 || (c->vocab > 0 && b->beams > ff_beam_max(c->vocab)))
    return ff_fail(err, FF_EINVAL, "beams %d: must be between 1 and %d (vocab / 2)", b->beams, ff_beam_max(c->vocab));
  if (!(fabsf(b->length_penalty) < INFINITY))
    return ff_fail(err, FF_EINVAL, "length_penalty %g: must be a finite number", b->length_penalty);
  if (b->early_stopping < 0 || b->early_stopping > 2)
    return ff_fail(err, FF_EINVAL, "early_stopping %d: must be 0 (false), 1 (true) or 2 (never)", b->early_stopping);
  return 0;
}

static void copy_rows(void *ctx, int from, int to, int pos0, int pos1) { ff_slots_copy(ctx, from, to, pos0, pos1); }

static int search(ff_model *m, const ff_greedy *g, ff_beam *b, float *rows, ff_error *err) {
  int V = ff_model_config(m)->vocab, rc;
  ff_slots *sl = NULL;
  if ((rc = ff_slots_open(m, g, b->beams, rows, &sl, err))) return rc;
  while (!rc && !ff_beam_advance(b, rows, copy_rows, sl))
    for (int j = 0; j < b->n_open && !rc; j++)
      rc = ff_slots_step(sl, b->slot_of[j], b->ids[(size_t)j * b->max_new + b->step - 1], b->pos,
                         rows + (size_t)j * V, err);
  ff_slots_close(sl);
  return rc;
}

int ff_beam_locked(ff_model *m, const ff_greedy *g, const ff_beam_opts *o, int32_t *out, int *n_out, double *score,
                   ff_error *err) {
  const ff_config *c = ff_model_config(m);
  int N = o->beams, V = c->vocab, M = g->max_new, rc;
  size_t bytes = ff_beam_bytes(N, M);
  void *buf = bytes ? malloc(bytes) : NULL;
  float *rows = malloc(sizeof *rows * (size_t)N * V);
  if (!buf || !rows) {
    rc = ff_fail(err, FF_ENOMEM, "beam search: out of memory for %d beams of %d ids", N, M);
  } else {
    ff_beam b;
    ff_beam_init(&b, buf, N, V, M, g->eos, o->length_penalty,
                 o->early_stopping == 1 ? FF_BEAM_EARLY : o->early_stopping == 2 ? FF_BEAM_NEVER : FF_BEAM_HEURISTIC,
                 g->prompt_len);
    if (!(rc = search(m, g, &b, rows, err))) {
      const int32_t *ids;
      double sc;
      *n_out = ff_beam_best(&b, &ids, &sc);
      memcpy(out, ids, sizeof *out * (size_t)*n_out);
      if (score) *score = sc;
    }
  }
  free(buf);
  free(rows);
  return rc;
}
