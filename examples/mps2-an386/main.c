/* main.c - runs one model emitted by `fixformer emit MODEL.lua -o DIR --embed`
 * on inputs compiled in from inputs.h, and prints the results exactly (floats
 * as their bit patterns, no printf: nothing is promoted to double).
 *   -DMODEL=tiny -DMODEL_UP=TINY -DMODEL_H='"tiny.h"'  (the Makefile sets them)
 * An encoder-decoder model translates each source of inputs.h greedily with
 * the key/value cache (MODEL_encode once, MODEL_decode a token at a time) and
 * prints the ids; any other model runs one forward pass (MODEL_run) over the
 * batch of inputs.h and prints the outputs.  inputs.h, as `fixformer tokenize
 * MODEL.lua (--lines FILE | --tokens "ids") --c-header input` writes it, defines
 *   INPUT_BATCH, INPUT_T, input_tokens[INPUT_BATCH * INPUT_T], input_lengths[INPUT_BATCH]
 * and, for greedy decoding,
 *   INPUT_COUNT, input_start[INPUT_COUNT + 1] (source i is input_ids[start[i] ..
 *   start[i + 1])), input_ids[], INPUT_BOS, INPUT_EOS;
 * INPUT_MAX_NEW (cmake -DMAX_NEW=N) bounds the ids decoded, MAX_SEQ by default. */
#include MODEL_H
#include "board.h"
#include "inputs.h"

#define CAT_(a, b) a##_##b
#define CAT(a, b) CAT_(a, b)
#define FN(name) CAT(MODEL, name)     /* FN(run): tiny_run */
#define MAC(name) CAT(MODEL_UP, name) /* MAC(VOCAB): TINY_VOCAB */
#ifndef INPUT_MAX_NEW
#define INPUT_MAX_NEW MAC(MAX_SEQ)
#endif

/* Every activation and cache of a call: one static buffer in RAM. */
static unsigned char state[MAC(STATE_BYTES)] __attribute__((aligned(16)));

static void fail(const char *what, int rc) {
  board_puts("error: ");
  board_puts(what);
  board_puts(" returned ");
  board_put_int(rc);
  board_puts("\n");
  board_exit(1);
}

static void put_ticks(const char *what, uint32_t ticks, long steps) {
  board_puts("ticks ");
  board_puts(what);
  board_puts(" ");
  board_put_int((long)ticks);
  board_puts(" steps ");
  board_put_int(steps);
  board_puts(" hz ");
  board_put_int((long)board_tick_hz());
  board_puts("\n");
}

#if MAC(ENCODER_LAYERS) > 0 && MAC(DECODER_LAYERS) > 0
static float logits[MAC(OUT_DIM)];

/* Greedy decoding of one source: the ids generated, EOS included. */
static int greedy(const FN(weights) *w, const int32_t *src, int n, int32_t *out, uint32_t *ticks) {
  int32_t next = INPUT_BOS;
  int count = 0, rc;
  uint32_t t0 = board_ticks();
  if ((rc = FN(encode)(w, state, src, n, n))) fail("encode", rc);
  ticks[0] += board_ticks() - t0;
  while (count < INPUT_MAX_NEW) {
    t0 = board_ticks();
    if ((rc = FN(decode)(w, state, &next, 1, count, logits))) fail("decode", rc);
    ticks[1] += board_ticks() - t0;
    next = 0;
    for (int v = 1; v < MAC(OUT_DIM); v++) /* argmax, the first of equal maxima */
      if (logits[v] > logits[next]) next = v;
    out[count++] = next;
    if (next == INPUT_EOS) break;
  }
  return count;
}

static void run_model(const FN(weights) *w) {
  uint32_t ticks[2] = {0, 0};
  long steps = 0;
  for (int i = 0; i < INPUT_COUNT; i++) {
    static int32_t out[INPUT_MAX_NEW]; /* not on the stack: INPUT_MAX_NEW may be up to MAX_SEQ */
    int n = greedy(w, input_ids + input_start[i], input_start[i + 1] - input_start[i], out, ticks);
    steps += n;
    board_puts("ids");
    for (int k = 0; k < n; k++) {
      board_puts(" ");
      board_put_int(out[k]);
    }
    board_puts("\n");
  }
  put_ticks("encode", ticks[0], INPUT_COUNT);
  put_ticks("decode", ticks[1], steps);
}
#else
static float out[INPUT_BATCH * INPUT_T * MAC(OUT_DIM)];

static void run_model(const FN(weights) *w) {
  uint32_t t0 = board_ticks();
  int rc = FN(run)(w, state, INPUT_BATCH, INPUT_T, input_tokens, input_lengths, 0, NULL, out);
  uint32_t ticks = board_ticks() - t0;
  if (rc) fail("run", rc);
  for (int r = 0; r < INPUT_BATCH * INPUT_T; r++) { /* one line a position */
    board_puts("out");
    for (int c = 0; c < MAC(OUT_DIM); c++) {
      board_puts(" ");
      board_put_float_bits(out[r * MAC(OUT_DIM) + c]);
    }
    board_puts("\n");
  }
  put_ticks("forward", ticks, (long)INPUT_BATCH * INPUT_T);
}
#endif

int main(void) {
  FN(weights) w;
  int rc;
  board_timer_start();
  if ((rc = FN(bind_embedded)(&w))) fail("bind_embedded", rc);
  if ((rc = FN(init_state)(state))) fail("init_state", rc);
  run_model(&w);
  board_puts("stack ");
  board_put_int((long)board_stack_used());
  board_puts("\ndone\n");
  return 0;
}
