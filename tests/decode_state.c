/* decode_state.c - an emitted model's NAME_decode against its cache fill
 * (issue 10, item 15), built by tests/decode_state.py with cc and tcc:
 *
 *   cc -DNAME_H='"m.h"' -DP=m_ -DU=M_ [-DENCDEC] decode_state.c m.c -lm
 *   decode_state M.weights
 *
 * Checks, on one state: decode at pos0 = 3 on a fresh state (encoder-
 * decoder: just after encode) is NAME_ELENGTH and writes nothing; a prompt
 * at 0 then one position at a time gives the logits of one whole-sequence
 * decode (on another state); going back to pos0 < fill decodes again from
 * there (same logits) and moves the fill to pos0 + T, so pos0 just past it
 * is NAME_ELENGTH and pos0 at it works; a new encode / a forward resets the
 * fill (pos0 = 1 refused, 0 accepted); every logit is finite. */
#define _POSIX_C_SOURCE 200112L /* posix_memalign */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include NAME_H

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#define FN(x) CAT(P, x)   /* m_decode */
#define K(x) CAT(U, x)    /* M_ELENGTH */

#define N 8 /* target positions used (max_seq >= 8) */
#define V K(VOCAB)

static int failures;

static void expect(int got, int want, const char *what) {
  if (got != want) {
    printf("FAIL %s: status %d, expected %d\n", what, got, want);
    failures++;
  }
}

static void same(const float *a, const float *b, int rows, const char *what) {
  double worst = 0;
  for (int i = 0; i < rows * V; i++) {
    if (!isfinite(a[i])) {
      printf("FAIL %s: logit %d is %g\n", what, i, a[i]);
      failures++;
      return;
    }
    double d = fabs((double)a[i] - b[i]) / (1 + fabs((double)b[i]));
    if (d > worst) worst = d;
  }
  if (worst > 1e-4) {
    printf("FAIL %s: logits differ by %g\n", what, worst);
    failures++;
  }
}

static void *aligned(size_t n) {
  void *p = NULL;
  return posix_memalign(&p, 64, n) ? NULL : p;
}

static void *read_file(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  void *p = NULL;
  if (!f) return NULL;
  if (!fseek(f, 0, SEEK_END) && (*n = (size_t)ftell(f)) > 0 && !fseek(f, 0, SEEK_SET) &&
      (p = aligned(*n)) && fread(p, 1, *n, f) != *n) {
    free(p);
    p = NULL;
  }
  fclose(f);
  return p;
}

int main(int argc, char **argv) {
  size_t bytes = 0;
  void *blob = argc == 2 ? read_file(argv[1], &bytes) : NULL;
  CAT(P, weights) w;
  if (!blob || FN(bind)(&w, blob, bytes)) {
    printf("FAIL cannot read or bind %s\n", argc == 2 ? argv[1] : "(no file)");
    return 1;
  }
  const size_t sb = (K(STATE_BYTES) + 63) / 64 * 64;
  void *st = aligned(sb), *ref = aligned(sb);
  if (!st || !ref) return 1;
  static float whole[N * V], out[N * V], poison[V];
  int32_t tok[N], src[6];
  for (int i = 0; i < N; i++) tok[i] = (int32_t)((7 * i + 3) % V);
  for (int i = 0; i < 6; i++) src[i] = (int32_t)((5 * i + 4) % V);
  memset(st, 0xff, sb); /* unwritten cache rows: NaN */
  memset(ref, 0xff, sb);
  expect(FN(init_state)(st), 0, "init_state");
  expect(FN(init_state)(ref), 0, "init_state (reference)");
#ifdef ENCDEC
  expect(FN(decode)(&w, st, tok, 1, 0, out), K(EINVAL), "decode before any encode");
  expect(FN(encode)(&w, st, src, 6, 6), 0, "encode");
  expect(FN(encode)(&w, ref, src, 6, 6), 0, "encode (reference)");
#endif
  for (int i = 0; i < V; i++) out[i] = poison[i] = 12345.0f;
  expect(FN(decode)(&w, st, tok + 3, 1, 3, out), K(ELENGTH), "decode at pos0 = 3 on a fresh cache");
  if (memcmp(out, poison, sizeof poison)) {
    printf("FAIL a refused decode wrote its output\n");
    failures++;
  }
  /* the reference: the whole sequence in one decode */
  expect(FN(decode)(&w, ref, tok, N, 0, whole), 0, "decode of the whole sequence");
  /* a prompt of 3, then one position at a time */
  expect(FN(decode)(&w, st, tok, 3, 0, out), 0, "prompt at 0");
  same(out, whole, 3, "prompt");
  for (int p = 3; p < 6; p++) {
    expect(FN(decode)(&w, st, tok + p, 1, p, out), 0, "step");
    same(out, whole + p * V, 1, "step");
  }
  expect(FN(decode)(&w, st, tok + 7, 1, 7, out), K(ELENGTH), "pos0 = 7 with 6 decoded");
  /* rewinding: positions 2, 3 again; the fill becomes 4 */
  expect(FN(decode)(&w, st, tok + 2, 2, 2, out), 0, "rewind to pos0 = 2");
  same(out, whole + 2 * V, 2, "rewind");
  expect(FN(decode)(&w, st, tok + 5, 1, 5, out), K(ELENGTH), "pos0 = 5 with 4 decoded after the rewind");
  expect(FN(decode)(&w, st, tok + 4, 4, 4, out), 0, "pos0 = 4 after the rewind");
  same(out, whole + 4 * V, 4, "continue after the rewind");
  expect(FN(decode)(&w, st, tok, 1, N + 1, out), K(ELENGTH), "pos0 past the fill");
  expect(FN(decode)(&w, st, tok, 1, -1, out), K(ELENGTH), "negative pos0");
#ifdef ENCDEC
  expect(FN(encode)(&w, st, src, 6, 6), 0, "encode again");
  expect(FN(decode)(&w, st, tok + 1, 1, 1, out), K(ELENGTH), "pos0 = 1 after a new encode");
  expect(FN(forward)(&w, st, src, 1, 6, NULL, tok, 4, out), 0, "forward");
#else
  (void)src;
  expect(FN(forward)(&w, st, tok, 1, 4, NULL, out), 0, "forward");
#endif
  same(out, whole, 4, "forward");
  expect(FN(decode)(&w, st, tok + 1, 1, 1, out), K(ELENGTH), "pos0 = 1 after a forward");
  expect(FN(decode)(&w, st, tok, 2, 0, out), 0, "pos0 = 0 after a forward");
  same(out, whole, 2, "decode after a forward");
  free(st);
  free(ref);
  free(blob);
  printf("%s\n", failures ? "decode_state: FAILED" : "decode_state: ok");
  return failures ? 1 : 0;
}
