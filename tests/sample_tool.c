/* sample_tool.c - runtime/ff_sample.h on logits given on stdin, for
 * tests/sampling.py: counts of many draws, or the draws themselves.
 *
 *   stdin: V T TOP_K TOP_P MIN_P R SEED DRAWS N_SEEN, then V logits, then N_SEEN ids
 *   stdout: V counts (draw i at position i of sequence 0) */
#include <stdio.h>
#include <stdlib.h>

#include "ff_sample.h"

int main(void) {
  int V, draws, n_seen;
  unsigned long long seed;
  ff_sample_opts o = {0, 1, 0, 1, 0, 0, 0};
  if (scanf("%d %f %d %f %f %f %llu %d %d", &V, &o.temperature, &o.top_k, &o.top_p, &o.min_p, &o.repeat_penalty,
            &seed, &draws, &n_seen) != 9 || V < 1 || draws < 0 || n_seen < 0)
    return fprintf(stderr, "sample_tool: bad header\n"), 1;
  o.seed = seed;
  float *logits = malloc(sizeof(float) * (size_t)V), *x = malloc(sizeof(float) * (size_t)V);
  int32_t *ids = malloc(sizeof(int32_t) * (size_t)V), *seen = malloc(sizeof(int32_t) * (size_t)(n_seen + 1));
  long *counts = calloc((size_t)V, sizeof(long));
  if (!logits || !x || !ids || !seen || !counts) return fprintf(stderr, "sample_tool: out of memory\n"), 1;
  for (int v = 0; v < V; v++)
    if (scanf("%f", &logits[v]) != 1) return fprintf(stderr, "sample_tool: bad logits\n"), 1;
  for (int i = 0, id; i < n_seen; i++) { /* int32_t may be long (newlib): read an int */
    if (scanf("%d", &id) != 1) return fprintf(stderr, "sample_tool: bad ids\n"), 1;
    seen[i] = id;
  }
  for (int i = 0; i < draws; i++) /* the seen ids split in two lists, as prompt and generated ones */
    counts[ff_sample_next(logits, V, seen, n_seen / 2, seen + n_seen / 2, n_seen - n_seen / 2, &o, (uint64_t)i, x,
                          ids)]++;
  for (int v = 0; v < V; v++) printf("%ld\n", counts[v]);
  free(logits), free(x), free(ids), free(seen), free(counts);
  return 0;
}
