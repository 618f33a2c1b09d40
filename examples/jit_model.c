/* jit_model.c - a model description evaluated at run time through the public
 * API (include/fixformer.h), the way a program embeds fixformer: open the
 * description, bind its weights, compile the specialised C in memory with
 * libtcc, run one forward pass over token ids and write the output as .npy.
 *
 *   jit_model MODEL.lua W.safetensors OUT.npy ID [ID ...]
 *
 * For token models (encoder or decoder-only); prints the argmax per position.
 * Build: link with libfixformer, e.g. find_package(fixformer CONFIG) and
 * fixformer::fixformer, or `cc jit_model.c $(pkg-config --cflags --libs fixformer)`. */
#include <stdio.h>
#include <stdlib.h>

#include "fixformer.h"

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: %s MODEL.lua W.safetensors OUT.npy ID [ID ...]\n", argv[0]);
    return 2;
  }
  int T = argc - 4;
  int32_t *ids = malloc(sizeof *ids * (size_t)T);
  if (!ids) return 1;
  for (int t = 0; t < T; t++) ids[t] = (int32_t)atoi(argv[4 + t]);

  ff_error err = {0, ""};
  float *out = NULL;
  ff_model *m = ff_model_open(argv[1], &err); /* sandboxed load + validation */
  if (!m) goto failed;
  const ff_config *c = ff_model_config(m);
  if (c->vocab == 0 || c->arch == FF_ARCH_ENCODER_DECODER) {
    ff_fail(&err, FF_EINVAL, "%s: this example takes token models without a decoder input", argv[1]);
    goto failed;
  }
  if (ff_model_load_weights(m, argv[2], &err) || ff_model_prepare(m, FF_ENGINE_TCC, &err)) goto failed;

  ff_input in = {0};
  in.batch = 1;
  in.src_len = T;
  in.src_tokens = ids;
  int dim = ff_config_out_dim(c);
  if (!(out = malloc(sizeof *out * (size_t)T * dim))) goto failed;
  if (ff_model_forward(m, &in, out, &err)) goto failed; /* bad ids come back as an error */

  for (int t = 0; t < T; t++) {
    int best = 0;
    for (int v = 1; v < dim; v++)
      if (out[(size_t)t * dim + v] > out[(size_t)t * dim + best]) best = v;
    printf("%s%d", t ? " " : "argmax: ", best);
  }
  printf("\n");
  ff_array a = {FF_F32, 3, {1, T, dim}, (size_t)T * dim, out};
  if (ff_npy_write(argv[3], &a, &err)) goto failed;
  free(out);
  free(ids);
  ff_model_close(m);
  return 0;
failed:
  fprintf(stderr, "jit_model: %s\n", err.msg[0] ? err.msg : "out of memory");
  free(out);
  free(ids);
  ff_model_close(m);
  return 1;
}
