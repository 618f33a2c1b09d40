/* use_model.c - a program on the library fixformer_add_model made: the
 * emitted tiny.h/tiny.c with the weights compiled in.  Prints the argmax of
 * each position for the ids on the command line.   use_model ID [ID ...] */
#include <stdio.h>
#include <stdlib.h>

#include "tiny.h"

static union { unsigned char bytes[TINY_STATE_BYTES]; long double align; } state_mem; /* 16-byte aligned on x86-64 and AArch64 (C99 has no _Alignas) */
#define state state_mem.bytes
static float out[TINY_MAX_SEQ * TINY_OUT_DIM];

int main(int argc, char **argv) {
  int32_t ids[TINY_MAX_SEQ];
  int T = argc - 1;
  if (T < 1 || T > TINY_MAX_SEQ) return 2;
  for (int t = 0; t < T; t++) ids[t] = (int32_t)atoi(argv[1 + t]);
  tiny_weights w;
  if (tiny_bind_embedded(&w) || tiny_init_state(state) || tiny_forward(&w, state, ids, 1, T, NULL, out)) {
    fprintf(stderr, "use_model: the model refused the input\n");
    return 1;
  }
  for (int t = 0; t < T; t++) {
    int best = 0;
    for (int v = 1; v < TINY_OUT_DIM; v++)
      if (out[t * TINY_OUT_DIM + v] > out[t * TINY_OUT_DIM + best]) best = v;
    printf("%s%d", t ? " " : "argmax: ", best);
  }
  printf("\n");
  return 0;
}
