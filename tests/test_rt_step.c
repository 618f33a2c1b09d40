/* test_rt_step.c - the runtime's step-by-step decoding refuses positions
 * whose cache rows were never written: ff_rt_step at a pos beyond the
 * positions decoded (or negative) is FF_ELENGTH and writes nothing, a pos
 * below them decodes again from there with the same numbers, and a new
 * source (ff_rt_begin) empties the cache.  Prints "N passed, N failed". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ff_io.h"
#include "ff_runtime.h"

static int passed, failed;

static void check(const char *what, int ok) {
  ok ? passed++ : failed++;
  printf("%-60s %s\n", what, ok ? "ok" : "FAIL");
}

static ff_config config(enum ff_arch arch) {
  ff_config c;
  memset(&c, 0, sizeof c);
  snprintf(c.name, sizeof c.name, "m");
  c.arch = arch;
  c.d_model = 16, c.heads = 2, c.d_ff = 24, c.vocab = 10, c.max_seq = 12, c.eps = 1e-5f, c.bias = 1;
  c.decoder_layers = 1;
  c.encoder_layers = arch == FF_ARCH_ENCODER_DECODER ? 1 : 0;
  c.positional = FF_POS_SINUSOIDAL;
  c.scale_embeddings = c.tie_embeddings = 1;
  snprintf(c.embed_weight, sizeof c.embed_weight, "embed.weight");
  return c;
}

static int bind(const ff_config *c, ff_rt_model *m, const char *path) {
  ff_error err;
  ff_tensor_file f;
  if (ff_rt_init_weights(c, 7, path, &err) || ff_safetensors_read(path, &f, &err) || ff_rt_model_bind(m, c, &f, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    return -1;
  }
  return 0;
}

static float max_diff(const float *a, const float *b, size_t n) {
  float d = 0;
  for (size_t i = 0; i < n; i++) d = fmaxf(d, fabsf(a[i] - b[i]));
  return d;
}

static void run(enum ff_arch arch, const char *tag, const char *path) {
  ff_config c = config(arch);
  ff_rt_model m;
  ff_rt_state st;
  ff_error err;
  char what[128];
  if (bind(&c, &m, path) || ff_rt_state_init(&st, &m, &err)) {
    check(tag, 0);
    return;
  }
  const int32_t src[3] = {1, 2, 3}, ids[6] = {4, 5, 6, 7, 8, 9};
  float whole[6 * 10], again[6 * 10], sentinel[10];
  int begun = arch != FF_ARCH_ENCODER_DECODER || !ff_rt_begin(&st, src, NULL, 3, 3, &err);
  for (int i = 0; i < 10; i++) sentinel[i] = 12345.0f;
  st.pos = 3; /* nothing decoded yet: rows 0..2 were never written */
  int rc = ff_rt_step(&st, ids, NULL, 1, sentinel, &err);
  snprintf(what, sizeof what, "%s: pos 3 on an empty cache is FF_ELENGTH", tag);
  check(what, begun && rc == FF_ELENGTH && sentinel[0] == 12345.0f && strstr(err.msg, "0 positions are decoded"));
  st.pos = -1;
  snprintf(what, sizeof what, "%s: a negative pos is FF_ELENGTH", tag);
  check(what, ff_rt_step(&st, ids, NULL, 1, sentinel, &err) == FF_ELENGTH && sentinel[0] == 12345.0f);
  st.pos = 0;
  rc = ff_rt_step(&st, ids, NULL, 6, whole, &err);
  snprintf(what, sizeof what, "%s: 6 positions from 0", tag);
  check(what, rc == 0 && st.pos == 6 && st.filled == 6);
  st.pos = 7;
  snprintf(what, sizeof what, "%s: pos 7 after 6 decoded is FF_ELENGTH", tag);
  check(what, ff_rt_step(&st, ids, NULL, 1, sentinel, &err) == FF_ELENGTH && sentinel[0] == 12345.0f);
  st.pos = 2; /* decoding again from 2 gives the same rows 2..5 */
  rc = ff_rt_step(&st, ids + 2, NULL, 4, again, &err);
  snprintf(what, sizeof what, "%s: again from pos 2, the same logits", tag);
  check(what, rc == 0 && st.filled == 6 && max_diff(again, whole + 2 * 10, 4 * 10) <= 1e-6f);
  st.pos = 10;
  snprintf(what, sizeof what, "%s: T past max_seq is FF_ELENGTH", tag);
  check(what, ff_rt_step(&st, ids, NULL, 0x7fffffff, sentinel, &err) == FF_ELENGTH);
  if (arch == FF_ARCH_ENCODER_DECODER) { /* a new source empties the target's cache */
    int ok = !ff_rt_begin(&st, src, NULL, 2, 2, &err);
    st.pos = 3;
    check("encoder-decoder: a new source empties the cache", ok && ff_rt_step(&st, ids, NULL, 1, sentinel, &err) == FF_ELENGTH);
  }
  ff_rt_state_free(&st);
  ff_rt_model_free(&m);
}

int main(void) {
  char dir[] = "/tmp/test_rt_step.XXXXXX", path[64];
  if (!mkdtemp(dir)) return 2;
  snprintf(path, sizeof path, "%s/w.safetensors", dir);
  run(FF_ARCH_DECODER_ONLY, "decoder-only", path);
  unlink(path);
  run(FF_ARCH_ENCODER_DECODER, "encoder-decoder", path);
  unlink(path);
  rmdir(dir);
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
