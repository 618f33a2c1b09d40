/* ff_sample.h - picking the next id from a row of logits: a contract shared by
 * the C API (host/api.c includes it) and the emitted --with-main driver (gen/
 * generate.lua pastes it), so a seed gives the same ids on every engine,
 * thread count and emitted program.  Plain C99, <stdint.h> and <math.h> (expf),
 * no malloc (the caller gives scratch), no state.
 *
 * The steps and their order are Hugging Face generate()'s:
 *   repetition penalty  ids in seen: a logit x > 0 becomes x / R, else x * R
 *                       (once per id; R = 1: off)
 *   temperature         x / T; T = 0: no draw, the first id of the maximum
 *                       (greedy), whatever the filters
 *   top-k               keep x >= the k-th largest (ties kept; 0: off)
 *   top-p               softmax over those; keep, in decreasing order, each id
 *                       whose predecessors' mass is below p (1: off)
 *   min-p               keep p(x) >= min_p * p(max) (0: off)
 *   draw                u = (mix(key + (pos + 1) G) >> 11) 2^-53 in [0, 1),
 *                       key = mix(mix(seed + G) ^ (sequence + G)); the id
 *                       where u * Z falls in the kept ids' weights
 *                       expf(x - max) (float), summed in double in id order
 *                       (Z their sum)
 * with G and mix as ff_dropout.h (splitmix64).  No full sort: top-k keeps a
 * heap of k ids; top-p heaps only the ids whose probability is at least
 * (1 - p) / (n - 1) (smaller ones cannot be in the nucleus) and pops the
 * nucleus.  Equal logits on a top-p boundary are all kept. */
#ifndef FF_SAMPLE_H
#define FF_SAMPLE_H

#include <math.h>
#include <stdint.h>

typedef struct ff_sample_opts {
  float temperature, top_p, min_p, repeat_penalty;
  int top_k;
  uint64_t seed, sequence;
} ff_sample_opts;

static uint64_t ff_sample_mix(uint64_t z) {
  z ^= z >> 30;
  z *= 0xBF58476D1CE4E5B9u;
  z ^= z >> 27;
  z *= 0x94D049BB133111EBu;
  return z ^ (z >> 31);
}

/* the uniform draw in [0, 1) of (seed, sequence, position) */
static double ff_sample_uniform(uint64_t seed, uint64_t sequence, uint64_t pos) {
  const uint64_t G = 0x9E3779B97F4A7C15u;
  uint64_t key = ff_sample_mix(ff_sample_mix(seed + G) ^ (sequence + G));
  return (double)(ff_sample_mix(key + (pos + 1) * G) >> 11) * (1.0 / 9007199254740992.0);
}

/* Moves heap[i] down a heap of n ids over x: a min-heap (dir 1) or max-heap (dir -1). */
static void ff_sample_sift(int32_t *heap, int n, int i, const float *x, int dir) {
  for (;;) {
    int c = 2 * i + 1;
    if (c >= n) return;
    if (c + 1 < n && (dir > 0 ? x[heap[c + 1]] < x[heap[c]] : x[heap[c + 1]] > x[heap[c]])) c++;
    if (dir > 0 ? !(x[heap[c]] < x[heap[i]]) : !(x[heap[c]] > x[heap[i]])) return;
    int32_t t = heap[c];
    heap[c] = heap[i], heap[i] = t, i = c;
  }
}

/* The first id of the maximum (NaN never taken past id 0), as torch.argmax. */
static int32_t ff_sample_argmax(const float *x, int V) {
  int32_t best = 0;
  for (int v = 1; v < V; v++)
    if (x[v] > x[best]) best = v;
  return best;
}

/* The id after logits [V] (left unchanged) at position pos of the sequence,
 * seen [n_seen] and seen2 [n_seen2] the ids so far (prompt, generated) for the
 * repetition penalty.  x [V] and ids [V] are scratch. */
static int32_t ff_sample_next(const float *logits, int V, const int32_t *seen, int n_seen, const int32_t *seen2,
                              int n_seen2, const ff_sample_opts *o, uint64_t pos, float *x, int32_t *ids) {
  float max = -INFINITY, cut = -INFINITY;
  double z = 0, u;
  int n = 0, v;
  for (v = 0; v < V; v++) x[v] = logits[v];
  for (v = 0; o->repeat_penalty != 1.0f && v < n_seen + n_seen2; v++) { /* from logits: once per id */
    int32_t id = v < n_seen ? seen[v] : seen2[v - n_seen];
    if (id >= 0 && id < V) x[id] = logits[id] > 0 ? logits[id] / o->repeat_penalty : logits[id] * o->repeat_penalty;
  }
  if (o->temperature <= 0) return ff_sample_argmax(x, V);
  for (v = 0; v < V; v++) {
    x[v] /= o->temperature;
    if (x[v] > max) max = x[v];
  }
  if (!(max > -INFINITY && max < INFINITY)) return ff_sample_argmax(x, V);
  if (o->top_k > 0 && o->top_k < V) { /* a min-heap of the k largest: its root is the k-th */
    for (v = 0; v < V; v++) {
      if (x[v] != x[v]) continue;
      if (n < o->top_k) {
        ids[n++] = v;
        if (n == o->top_k)
          for (int i = n / 2 - 1; i >= 0; i--) ff_sample_sift(ids, n, i, x, 1);
      } else if (x[v] > x[ids[0]]) {
        ids[0] = v;
        ff_sample_sift(ids, n, 0, x, 1);
      }
    }
    if (n == o->top_k) cut = x[ids[0]];
  }
  /* from here x holds expf(x - max) (the max's is 1): one expf per id, as the model's softmax */
  float floor_e = cut > -INFINITY ? expf(cut - max) : 0;
  for (v = 0; v < V; v++) x[v] = expf(x[v] - max);
  if (o->top_p < 1.0f) {
    double kept = 0, mass = 0;
    n = 0;
    for (v = 0; v < V; v++)
      if (x[v] >= floor_e) kept += x[v], n++;
    float least = n > 1 ? (float)((1.0 - o->top_p) / (n - 1) * kept) : 0; /* smaller ones: not in the nucleus */
    n = 0;
    for (v = 0; v < V; v++)
      if (x[v] >= floor_e && x[v] >= least) ids[n++] = v;
    for (int i = n / 2 - 1; i >= 0; i--) ff_sample_sift(ids, n, i, x, -1);
    while (n > 0 && mass < o->top_p * kept) { /* pop the nucleus, largest first */
      int32_t top = ids[0];
      mass += x[top];
      floor_e = x[top];
      ids[0] = ids[--n];
      ff_sample_sift(ids, n, 0, x, -1);
    }
  }
  if (o->min_p > floor_e) floor_e = o->min_p;
  for (v = 0; v < V; v++)
    if (x[v] >= floor_e) z += x[v];
  u = ff_sample_uniform(o->seed, o->sequence, pos) * z;
  int32_t last = -1;
  for (v = 0; v < V; v++) {
    if (!(x[v] >= floor_e)) continue;
    last = v;
    if ((u -= x[v]) < 0) return v;
  }
  return last >= 0 ? last : ff_sample_argmax(x, V); /* rounding left u at the sum; or nothing kept (NaN) */
}

#endif
