/* ff_beam.h - beam search's bookkeeping, as Hugging Face generate(num_beams,
 * length_penalty, early_stopping) defines it (BeamSearchScorer and
 * BeamHypotheses, transformers 4.38 to 4.49), apart from the model: the caller
 * decodes each beam's last id and hands the rows of logits in; this picks
 * the next beams, keeps the finished hypotheses and says when to stop.
 * Written here from that definition (no library has it in C); plain C99,
 * <stdint.h>, <string.h> and <math.h>, no malloc (the caller gives one
 * buffer of ff_beam_bytes), so the emitted driver can paste it too.
 *
 * Per step s = 1, 2, ... (s ids generated per beam after it):
 *   scores     each beam's running sum plus log_softmax of its row (float,
 *              as torch); step 1 scores beam 0 alone (HF: the others start
 *              at -1e9, so with vocab >= 2 beams none of theirs is taken)
 *   candidates the 2 beams best of beams x vocab, best first (equal scores:
 *              the lower beam x vocab + id first)
 *   each one   an EOS ranked below `beams` is dropped; a better one closes
 *              its beam into a hypothesis scored sum / s^length_penalty (s
 *              counts the EOS, not the prompt); any other id extends its
 *              beam, until `beams` beams are made
 *   hypotheses at most `beams`, a new one kept when there is room or it
 *              beats the worst (which then goes: HF's list order and ties)
 *   done       `beams` hypotheses and: early_stopping true; false: the worst
 *              >= the best candidate / s^lp; "never": the same with
 *              max_new^lp in place of s^lp when lp > 0
 *   stop       done, or s = max_new: the open beams then become hypotheses
 *              scored sum / max_new^lp (unless done)
 * The result is the best hypothesis (equal scores: the one kept last), its
 * ids with the EOS that closed it.  (transformers 4.50's vectorised
 * _beam_search tests done against the best open beam, not the best
 * candidate: the two differ only when an EOS ranks first with `beams`
 * hypotheses kept; this follows BeamSearchScorer.)
 *
 * The caches: each beam decodes in a state (slot) of its own, in lock-step.
 * After a step the first child of a beam keeps its parent's slot as it is; a
 * further child takes a slot freed by a beam that had none, and only the
 * rows from the first position where the two slots' ids differ are copied
 * into it (copy(ctx, from, to, pos0, pos1): a row of a causal cache depends
 * on the ids up to it alone).  Beams share most of their prefix, so a step
 * copies a few rows, never whole caches.  An indirection per row (a paged
 * cache) would copy nothing, but attention reads each layer's cache as one
 * contiguous block in every engine's kernels; copying rows keeps those
 * kernels as they are. */
#ifndef FF_BEAM_H
#define FF_BEAM_H

#include <math.h>
#include <stdint.h>
#include <string.h>

enum { FF_BEAM_HEURISTIC = 0, FF_BEAM_EARLY = 1, FF_BEAM_NEVER = 2 }; /* early_stopping false, true, "never" */

typedef struct ff_beam {
  int beams, vocab, max_new, eos, early, step, n_open, done;
  double lp;
  float *sum;          /* [beams] the open beams' sums of log-probabilities */
  int32_t *ids, *next; /* [beams][max_new] the open beams' ids, and the next step's */
  int32_t *parent;     /* [beams] the open beam each new one continues (the last step's) */
  float *cand;         /* [2 beams] candidate scores, best first */
  int32_t *cand_at;    /* [2 beams] their beam x vocab + id */
  int n_hyp, *hyp;     /* the hypotheses in HF's list order: slots of hyp_ids */
  double worst, *hyp_score;
  int *hyp_len;
  int32_t *hyp_ids;    /* [beams + 1][max_new] */
  /* the slots: beam j decodes its id b->ids[j][step - 1] at position pos in slot_of[j] */
  int prompt, pos, *slot_of, *new_slot, *taken, *free_slots;
  int32_t *hist;       /* [beams][max_new]: the ids each slot has decoded past the prompt */
} ff_beam;

typedef void (*ff_beam_copy_fn)(void *ctx, int from, int to, int pos0, int pos1);

#define FF_BEAM_ROUND(x) (((x) + 7) / 8 * 8)

/* The most beams over a vocabulary: vocab / 2 (HF's 2 x beams candidates
 * come from one beam at the first step), and beams x vocab in an int32. */
static int ff_beam_max(int vocab) {
  int half = vocab / 2, fit = vocab > 0 ? 2147483647 / vocab : 0;
  return half < fit ? half : fit;
}

/* Bytes of the buffer ff_beam_init lays out (0: the sizes overflow). */
static size_t ff_beam_bytes(int beams, int max_new) {
  size_t n = (size_t)beams, m = (size_t)max_new;
  if (beams < 1 || max_new < 1 || n > ((size_t)-1 / 64) / (m + 8)) return 0;
  return FF_BEAM_ROUND(n * sizeof(float)) + 2 * FF_BEAM_ROUND(n * m * 4) + FF_BEAM_ROUND(n * 4) +
         2 * FF_BEAM_ROUND(2 * n * 4) + 2 * FF_BEAM_ROUND((n + 1) * sizeof(int)) +
         FF_BEAM_ROUND((n + 1) * sizeof(double)) + FF_BEAM_ROUND((n + 1) * m * 4) + FF_BEAM_ROUND(4 * n * sizeof(int)) +
         FF_BEAM_ROUND(n * m * 4);
}

static void *ff_beam_take(char **p, size_t bytes) {
  void *r = *p;
  *p += FF_BEAM_ROUND(bytes);
  return r;
}

/* buf: ff_beam_bytes(beams, max_new) bytes, 8-byte aligned; eos < 0: none;
 * prompt: the positions slot 0 decoded before (each slot holds them too) */
static void ff_beam_init(ff_beam *b, void *buf, int beams, int vocab, int max_new, int eos, double lp, int early,
                         int prompt) {
  char *p = (char *)buf;
  size_t n = (size_t)beams, m = (size_t)max_new;
  memset(b, 0, sizeof *b);
  b->beams = beams, b->vocab = vocab, b->max_new = max_new, b->eos = eos, b->lp = lp, b->early = early;
  b->n_open = 1, b->worst = 1e9;
  b->sum = (float *)ff_beam_take(&p, n * sizeof(float));
  b->ids = (int32_t *)ff_beam_take(&p, n * m * 4);
  b->next = (int32_t *)ff_beam_take(&p, n * m * 4);
  b->parent = (int32_t *)ff_beam_take(&p, n * 4);
  b->cand = (float *)ff_beam_take(&p, 2 * n * 4);
  b->cand_at = (int32_t *)ff_beam_take(&p, 2 * n * 4);
  b->hyp = (int *)ff_beam_take(&p, (n + 1) * sizeof(int));
  b->hyp_len = (int *)ff_beam_take(&p, (n + 1) * sizeof(int));
  b->hyp_score = (double *)ff_beam_take(&p, (n + 1) * sizeof(double));
  b->hyp_ids = (int32_t *)ff_beam_take(&p, (n + 1) * m * 4);
  b->slot_of = (int *)ff_beam_take(&p, 4 * n * sizeof(int));
  b->new_slot = b->slot_of + n, b->taken = b->slot_of + 2 * n, b->free_slots = b->slot_of + 3 * n;
  b->hist = (int32_t *)ff_beam_take(&p, n * m * 4);
  b->sum[0] = 0, b->slot_of[0] = 0, b->prompt = b->pos = prompt;
}

/* candidate i is better than j: a higher score, or equal and earlier */
static int ff_beam_better(float si, int32_t ai, float sj, int32_t aj) { return si > sj || (si == sj && ai < aj); }

static void ff_beam_swap(float *s, int32_t *a, int i, int j) {
  float ts = s[i];
  int32_t ta = a[i];
  s[i] = s[j], a[i] = a[j], s[j] = ts, a[j] = ta;
}

/* Candidate (sc, at) into the heap s/a of n <= K whose root is the worst. */
static int ff_beam_push(float *s, int32_t *a, int n, int K, float sc, int32_t at) {
  int i = n;
  if (n == K) {
    if (!ff_beam_better(sc, at, s[0], a[0])) return n;
    s[0] = sc, a[0] = at, i = 0;
    for (int c; (c = 2 * i + 1) < n; i = c) { /* down: below the worse child */
      if (c + 1 < n && ff_beam_better(s[c], a[c], s[c + 1], a[c + 1])) c++;
      if (!ff_beam_better(s[i], a[i], s[c], a[c])) break;
      ff_beam_swap(s, a, i, c);
    }
    return n;
  }
  s[i] = sc, a[i] = at;
  while (i > 0) { /* up: above the better parent */
    int p = (i - 1) / 2;
    if (!ff_beam_better(s[p], a[p], s[i], a[i])) break;
    ff_beam_swap(s, a, i, p);
    i = p;
  }
  return n + 1;
}

/* The 2 beams best of the open beams' rows of logits [n_open][vocab] into
 * cand, best first; returns how many (fewer when beams x vocab is smaller). */
static int ff_beam_candidates(ff_beam *b, const float *logits) {
  int K = 2 * b->beams, n = 0;
  for (int r = 0; r < b->n_open; r++) {
    const float *x = logits + (size_t)r * b->vocab;
    float max = -INFINITY;
    double z = 0;
    for (int v = 0; v < b->vocab; v++) max = x[v] > max ? x[v] : max;
    for (int v = 0; v < b->vocab; v++) z += expf(x[v] - max); /* float terms as the model's softmax, summed in double */
    float lse = (float)(max + log(z));
    for (int v = 0; v < b->vocab; v++)
      n = ff_beam_push(b->cand, b->cand_at, n, K, b->sum[r] + (x[v] - lse), r * b->vocab + v);
  }
  for (int i = 1; i < n; i++) /* best first: insertion sort of at most 2 beams */
    for (int j = i; j > 0 && ff_beam_better(b->cand[j], b->cand_at[j], b->cand[j - 1], b->cand_at[j - 1]); j--)
      ff_beam_swap(b->cand, b->cand_at, j, j - 1);
  return n;
}

/* BeamHypotheses.add: len ids of beam row ids (and eos >= 0 after them) */
static void ff_beam_add(ff_beam *b, const int32_t *ids, int len, int eos, double sum, int gen_len) {
  double score = sum / pow((double)gen_len, b->lp);
  int N = b->beams, slot = 0;
  if (!(b->n_hyp < N || score > b->worst)) return;
  for (int used = 1; used;) { /* a free slot of beams + 1 */
    used = 0;
    for (int i = 0; i < b->n_hyp; i++) used |= b->hyp[i] == slot;
    if (used) slot++;
  }
  memcpy(b->hyp_ids + (size_t)slot * b->max_new, ids, (size_t)len * 4);
  if (eos >= 0) b->hyp_ids[(size_t)slot * b->max_new + len++] = eos;
  b->hyp_len[slot] = len, b->hyp_score[slot] = score, b->hyp[b->n_hyp++] = slot;
  if (b->n_hyp <= N) {
    b->worst = score < b->worst ? score : b->worst;
    return;
  }
  int lo = 0; /* sorted (score, index): the first goes, the second is the new worst */
  for (int i = 1; i < b->n_hyp; i++)
    if (b->hyp_score[b->hyp[i]] < b->hyp_score[b->hyp[lo]]) lo = i;
  memmove(b->hyp + lo, b->hyp + lo + 1, (size_t)(b->n_hyp - lo - 1) * sizeof(int));
  b->n_hyp--;
  b->worst = b->hyp_score[b->hyp[0]];
  for (int i = 1; i < b->n_hyp; i++)
    if (b->hyp_score[b->hyp[i]] < b->worst) b->worst = b->hyp_score[b->hyp[i]];
}

/* BeamHypotheses.is_done for the best candidate's score at step s */
static int ff_beam_is_done(const ff_beam *b, float best, int s) {
  if (b->n_hyp < b->beams) return 0;
  if (b->early == FF_BEAM_EARLY) return 1;
  int len = b->early == FF_BEAM_NEVER && b->lp > 0 ? b->max_new : s;
  return b->worst >= (double)best / pow((double)len, b->lp);
}

/* The new beams into slots (see the top), old_open the beams before the step */
static void ff_beam_reorder(ff_beam *b, int old_open, ff_beam_copy_fn copy, void *ctx) {
  int n_free = 0, M = b->max_new, fed = b->step - 1;
  for (int i = 0; i < b->beams; i++) b->taken[i] = 0;
  for (int j = 0; j < b->n_open; j++) {
    int p = b->parent[j];
    b->new_slot[j] = -1;
    if (!b->taken[p]) b->taken[p] = 1, b->new_slot[j] = b->slot_of[p];
  }
  for (int i = 0; i < b->beams; i++) b->free_slots[i] = 1; /* first as flags: the slots kept */
  for (int p = 0; p < old_open; p++)
    if (b->taken[p]) b->free_slots[b->slot_of[p]] = 0;
  for (int i = 0; i < b->beams; i++)
    if (b->free_slots[i]) b->free_slots[n_free++] = i; /* (n_free <= i: no flag ahead is overwritten) */
  for (int j = 0; j < b->n_open; j++) {
    if (b->new_slot[j] >= 0) continue;
    int from = b->slot_of[b->parent[j]], to = b->free_slots[--n_free], k = 0;
    const int32_t *a = b->hist + (size_t)from * M;
    int32_t *h = b->hist + (size_t)to * M;
    while (k < fed && a[k] == h[k]) k++;
    copy(ctx, from, to, b->prompt + k, b->prompt + fed);
    for (; k < fed; k++) h[k] = a[k];
    b->new_slot[j] = to;
  }
  for (int j = 0; j < b->n_open; j++) {
    b->slot_of[j] = b->new_slot[j];
    b->hist[(size_t)b->slot_of[j] * M + fed] = b->ids[(size_t)j * M + fed]; /* decoded next */
  }
  b->pos = b->prompt + fed;
}

/* One step from the open beams' rows of logits [n_open][vocab] (row j: beam
 * j's).  Returns 1 when the search is over (then ff_beam_best); else each
 * of the b->n_open beams j decodes its id b->ids[j * max_new + step - 1] at
 * b->pos in slot b->slot_of[j] into row j, copy having moved the rows. */
static int ff_beam_advance(ff_beam *b, const float *logits, ff_beam_copy_fn copy, void *ctx) {
  int old_open = b->n_open;
  int n = ff_beam_candidates(b, logits), made = 0, N = b->beams, s = b->step, M = b->max_new;
  for (int r = 0; r < n && made < N; r++) {
    int p = b->cand_at[r] / b->vocab;
    int32_t v = b->cand_at[r] % b->vocab;
    if (v == b->eos) {
      if (r < N) ff_beam_add(b, b->ids + (size_t)p * M, s, v, b->cand[r], s + 1);
      continue;
    }
    memcpy(b->next + (size_t)made * M, b->ids + (size_t)p * M, (size_t)s * 4);
    b->next[(size_t)made * M + s] = v;
    b->parent[made] = p, b->sum[made] = b->cand[r];
    made++;
  }
  int32_t *t = b->ids;
  b->ids = b->next, b->next = t;
  b->n_open = made;
  b->step = ++s;
  b->done = b->done || (n > 0 && ff_beam_is_done(b, b->cand[0], s));
  if (!b->done && s == M)
    for (int j = 0; j < made; j++) ff_beam_add(b, b->ids + (size_t)j * M, s, -1, b->sum[j], s);
  if (b->done || s == M || made == 0) return 1;
  ff_beam_reorder(b, old_open, copy, ctx);
  return 0;
}

/* The best hypothesis: its ids (EOS included when it closed it), how many,
 * and its score; 0 ids when there is none. */
static int ff_beam_best(const ff_beam *b, const int32_t **ids, double *score) {
  int best = -1;
  for (int i = 0; i < b->n_hyp; i++)
    if (best < 0 || b->hyp_score[b->hyp[i]] >= b->hyp_score[b->hyp[best]]) best = i;
  if (best < 0) return *ids = NULL, *score = 0, 0;
  *ids = b->hyp_ids + (size_t)b->hyp[best] * b->max_new;
  *score = b->hyp_score[b->hyp[best]];
  return b->hyp_len[b->hyp[best]];
}

#endif
