/* beam.c - ff_model_beam's search loop: runtime/ff_beam.h picks the beams,
 * host/api.c's decode states (ff_slots) hold their key/value caches.
 *
 * The caches: each beam decodes in a state (slot) of its own, in lock-step
 * (every slot has fed the same number of ids).  After a step the first
 * child of a beam keeps its parent's slot as it is; a further child takes a
 * slot freed by a beam that had none, and only the rows from the first
 * position where the two slots' ids differ are copied into it (a row of a
 * causal cache depends on the ids up to it alone).  Beams that share a
 * prefix, as beams mostly do, copy a few rows a step, not whole caches.  An
 * indirection per row (a paged cache) would copy nothing, but attention
 * reads each layer's cache as one contiguous block in every engine's
 * kernels; copying rows keeps those kernels untouched. */
#include <stdlib.h>
#include <string.h>

#include "beam.h"
#include "ff_beam.h"

typedef struct {
  int n, fed, P, max_new;
  int *slot_of, *new_slot, *taken, *free_slots;
  int32_t *hist; /* [n][max_new]: the ids each slot has fed, past the prompt */
} slot_map;

/* The new beams into slots after a step: see the top of the file. */
static void reorder(ff_slots *sl, slot_map *s, const ff_beam *b, int old_open) {
  int n_free = 0, M = s->max_new;
  memset(s->taken, 0, sizeof *s->taken * (size_t)s->n);
  for (int j = 0; j < b->n_open; j++) {
    int p = b->parent[j];
    s->new_slot[j] = -1;
    if (!s->taken[p]) s->taken[p] = 1, s->new_slot[j] = s->slot_of[p];
  }
  for (int i = 0; i < s->n; i++) s->free_slots[i] = 1; /* first as flags: the slots kept */
  for (int p = 0; p < old_open; p++)
    if (s->taken[p]) s->free_slots[s->slot_of[p]] = 0;
  for (int i = 0; i < s->n; i++)
    if (s->free_slots[i]) s->free_slots[n_free++] = i; /* (i >= n_free: the flags ahead are unread) */
  for (int j = 0; j < b->n_open; j++) {
    if (s->new_slot[j] >= 0) continue;
    int from = s->slot_of[b->parent[j]], to = s->free_slots[--n_free], k = 0;
    const int32_t *a = s->hist + (size_t)from * M;
    int32_t *h = s->hist + (size_t)to * M;
    while (k < s->fed && a[k] == h[k]) k++;
    ff_slots_copy(sl, from, to, s->P + k, s->P + s->fed);
    memcpy(h + k, a + k, sizeof *h * (size_t)(s->fed - k));
    s->new_slot[j] = to;
  }
  for (int j = 0; j < b->n_open; j++) s->slot_of[j] = s->new_slot[j];
}

static int search(ff_model *m, const ff_greedy *g, ff_beam *b, slot_map *s, float *rows, ff_error *err) {
  int V = ff_model_config(m)->vocab, rc;
  ff_slots *sl = NULL;
  if ((rc = ff_slots_open(m, g, s->n, rows, &sl, err))) return rc;
  s->slot_of[0] = 0;
  for (int old_open = 1; !ff_beam_advance(b, rows); old_open = b->n_open, s->fed++) {
    reorder(sl, s, b, old_open);
    for (int j = 0; j < b->n_open && !rc; j++) {
      int32_t id = b->ids[(size_t)j * s->max_new + b->step - 1];
      s->hist[(size_t)s->slot_of[j] * s->max_new + s->fed] = id;
      rc = ff_slots_step(sl, s->slot_of[j], id, s->P + s->fed, rows + (size_t)j * V, err);
    }
    if (rc) break;
  }
  ff_slots_close(sl);
  return rc;
}

int ff_beam_locked(ff_model *m, const ff_greedy *g, const ff_beam_opts *o, int32_t *out, int *n_out, double *score,
                   ff_error *err) {
  const ff_config *c = ff_model_config(m);
  int N = o->beams, V = c->vocab, M = g->max_new, rc;
  size_t bytes = ff_beam_bytes(N, M), ints = (size_t)N * 4;
  slot_map s = {N, 0, g->prompt_len, M, NULL, NULL, NULL, NULL, NULL};
  void *buf = bytes ? malloc(bytes) : NULL;
  float *rows = malloc(sizeof *rows * (size_t)N * V);
  int *map = malloc(sizeof *map * ints);
  s.hist = malloc(sizeof *s.hist * (size_t)N * M);
  if (!buf || !rows || !map || !s.hist) {
    rc = ff_fail(err, FF_ENOMEM, "beam search: out of memory for %d beams of %d ids", N, M);
  } else {
    ff_beam b;
    s.slot_of = map, s.new_slot = map + N, s.taken = map + 2 * N, s.free_slots = map + 3 * N;
    ff_beam_init(&b, buf, N, V, M, g->eos, o->length_penalty,
                 o->early_stopping == 1 ? FF_BEAM_EARLY : o->early_stopping == 2 ? FF_BEAM_NEVER : FF_BEAM_HEURISTIC);
    if (!(rc = search(m, g, &b, &s, rows, err))) {
      const int32_t *ids;
      double sc;
      *n_out = ff_beam_best(&b, &ids, &sc);
      memcpy(out, ids, sizeof *out * (size_t)*n_out);
      if (score) *score = sc;
    }
  }
  free(buf);
  free(rows);
  free(map);
  free(s.hist);
  return rc;
}
