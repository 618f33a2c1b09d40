/* beam.h - beam search's decode states (host/api.c, which owns the model's
 * insides) and its search loop (host/beam.c).  Private to host/. */
#ifndef FF_HOST_BEAM_H
#define FF_HOST_BEAM_H

#include "fixformer.h"

/* n decode states of one model, each a beam's key/value caches: state 0 is
 * the model's own, the others are made by ff_slots_open. */
typedef struct ff_slots ff_slots;

/* With m locked: begins g's source, decodes its prompt in state 0 (the last
 * position's logits into row [vocab]) and gives n - 1 more states holding
 * the same source and prompt rows. */
int ff_slots_open(ff_model *m, const ff_greedy *g, int n, float *row, ff_slots **out, ff_error *err);
/* Decodes id at position pos in state slot: its logits into row [vocab]. */
int ff_slots_step(ff_slots *s, int slot, int32_t id, int pos, float *row, ff_error *err);
/* Copies the key/value rows of positions pos0..pos1-1 from one state to another. */
void ff_slots_copy(ff_slots *s, int from, int to, int pos0, int pos1);
/* Frees the extra states; the model's decoding sequence ends. */
void ff_slots_close(ff_slots *s);

/* b's values within their ranges for a model of config c, else FF_EINVAL */
int ff_beam_check(const ff_config *c, const ff_beam_opts *b, ff_error *err);
/* ff_model_beam with m locked and its arguments checked (beams >= 2). */
int ff_beam_locked(ff_model *m, const ff_greedy *g, const ff_beam_opts *b, int32_t *out, int *n_out, double *score,
                   ff_error *err);

#endif
