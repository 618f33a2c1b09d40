/* ff_dropout.h - the dropout mask of a training step: a contract shared by
 * the reference runtime and generated training code, which includes or
 * pastes this file (plain C99, <stdint.h> only, no libm, no state).
 *
 * The mask is a function of (seed, step, site, element index) alone, so it
 * is the same on every engine and thread count, and a backward pass computes
 * it again instead of storing it.  Element i of the tensor at site `site` in
 * training step `step` of a run seeded `seed` is kept iff
 *
 *   ff_dropout_bits(ff_dropout_key(seed, step, site), i) >= ff_dropout_threshold(p)
 *
 * and a kept value is scaled by 1 / (1 - p) (inverted dropout); p = 0 keeps
 * every element, p must be below 1.  With G = 0x9E3779B97F4A7C15 and mix
 * splitmix64's finalizer (all arithmetic mod 2^64):
 *
 *   mix(z)          z ^= z >> 30; z *= 0xBF58476D1CE4E5B9; z ^= z >> 27;
 *                   z *= 0x94D049BB133111EB; z ^= z >> 31
 *   key             mix(mix(mix(seed + G) ^ (step + G)) ^ (site + G))
 *   bits(key, i)    mix(key + (i + 1) G) >> 40           (24 random bits)
 *   threshold(p)    floor(p 2^24), p a float (p * 16777216.0f is exact)
 *
 * Sites (FF_DROPOUT_SITE): stack << 24 | layer << 4 | kind, where stack is
 * 1 for the encoder (the lone encoder too) and 2 for the decoder (the
 * decoder-only stack too), as enum ff_stack numbers them; layer counts from
 * 0 in its stack (0 for the embedding); kind is one of FF_DROPOUT_EMBED ...
 * below, the places nn.TransformerEncoderLayer / DecoderLayer put dropout.
 * The element index is the row-major index into the site's tensor over the
 * whole batch of the step, B sequences of T positions (T the stack's length,
 * S for the encoder of an encoder-decoder, Tk the keys' length):
 *
 *   kind                  tensor             where
 *   FF_DROPOUT_EMBED      [B, T, d]          the stack's input: token embedding (scaled) +
 *                                            positions (+ token type), after embed_norm if any
 *   FF_DROPOUT_SELF_PROBS [B, heads, T, T]   self-attention weights after softmax (masked ones too)
 *   FF_DROPOUT_SELF_OUT   [B, T, d]          self-attention output, before the residual add
 *   FF_DROPOUT_CROSS_PROBS [B, heads, T, Tk] cross-attention weights after softmax
 *   FF_DROPOUT_CROSS_OUT  [B, T, d]          cross-attention output, before the residual add
 *   FF_DROPOUT_FFN_HIDDEN [B, T, d_ff]       after the activation (swiglu: after silu(gate) * up)
 *   FF_DROPOUT_FFN_OUT    [B, T, d]          feed-forward output, before the residual add
 *
 * A micro-batch holding sequences first..first+B'-1 of the step's batch
 * counts indices from sequence `first`, so that micro-batches (gradient
 * accumulation, data parallelism) drop exactly what the whole batch would. */
#ifndef FF_DROPOUT_H
#define FF_DROPOUT_H

#include <stdint.h>

enum ff_dropout_kind {
  FF_DROPOUT_EMBED,
  FF_DROPOUT_SELF_PROBS,
  FF_DROPOUT_SELF_OUT,
  FF_DROPOUT_CROSS_PROBS,
  FF_DROPOUT_CROSS_OUT,
  FF_DROPOUT_FFN_HIDDEN,
  FF_DROPOUT_FFN_OUT
};

#define FF_DROPOUT_SITE(stack, layer, kind) \
  ((uint32_t)(stack) << 24 | (uint32_t)(layer) << 4 | (uint32_t)(kind))

#define FF_DROPOUT_GOLDEN 0x9E3779B97F4A7C15ull

static inline uint64_t ff_dropout_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* The key of one site's tensor in one step, computed once per tensor. */
static inline uint64_t ff_dropout_key(uint64_t seed, uint64_t step, uint32_t site) {
  uint64_t h = ff_dropout_mix(seed + FF_DROPOUT_GOLDEN);
  h = ff_dropout_mix(h ^ (step + FF_DROPOUT_GOLDEN));
  return ff_dropout_mix(h ^ ((uint64_t)site + FF_DROPOUT_GOLDEN));
}

/* 24 random bits of element i: splitmix64's output number i + 1 from key. */
static inline uint32_t ff_dropout_bits(uint64_t key, uint64_t i) {
  return (uint32_t)(ff_dropout_mix(key + (i + 1) * FF_DROPOUT_GOLDEN) >> 40);
}

/* floor(p 2^24) for 0 <= p < 1: the bits below it drop the element. */
static inline uint32_t ff_dropout_threshold(float p) { return (uint32_t)(p * 16777216.0f); }

#endif
