/* fuzz_vocab.c - libFuzzer harness: any bytes as a vocabulary's JSON through
 * ff_vocab_parse (the whole of ff_vocab_load after the file is read), with
 * and without an expected size; what it accepts is then used to encode and
 * decode, its ids checked against a scan of every token.  A vocabulary or a
 * clean error, never a crash, a leak or undefined behaviour (built with ASan
 * + UBSan). */
#include <string.h>

#include "ff_io.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int special(const ff_vocab *v, int id) { return id == v->pad || id == v->bos || id == v->eos || id == v->unk; }

/* encode's ids against the longest match found by a scan of every token
 * (the lowest id among equals, specials never): what its index must give */
static void encode_as_scan(const ff_vocab *v, const char *text) {
  int32_t out[64];
  int n = 0;
  ff_error err;
  ff_vocab_encode(v, text, out, 64, &n, &err);
  char s[256];
  size_t len = strlen(text), at = 0;
  for (size_t i = 0; i <= len && i < sizeof s; i++)
    s[i] = (char)(v->lowercase && text[i] >= 'A' && text[i] <= 'Z' ? text[i] - 'A' + 'a' : text[i]);
  for (int k = 0; k < n; k++) {
    int best = -1;
    size_t best_len = 0;
    for (int i = 0; i < v->size; i++) {
      size_t tl = strlen(v->tokens[i]);
      if (!special(v, i) && tl > best_len && tl <= len - at && !memcmp(s + at, v->tokens[i], tl)) best = i, best_len = tl;
    }
    if (best < 0)
      for (best = v->unk, best_len = 1; at + best_len < len && ((unsigned char)s[at + best_len] & 0xC0) == 0x80;)
        best_len++;
    if (best < 0 || out[k] != best) __builtin_trap();
    at += best_len;
  }
}

static void use(const ff_vocab *v) {
  for (int i = 0; i < v->size; i++) /* every token is a non-empty string without controls but \t \n \r */
    if (!v->tokens[i][0] || strcspn(v->tokens[i], "\x01\x02\x03\x04\x05\x06\x07\x08\x0b\x0c\x0e\x0f"
                                                  "\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e"
                                                  "\x1f\x7f") != strlen(v->tokens[i]))
      __builtin_trap();
  const int ids[] = {v->pad, v->bos, v->eos, v->unk};
  for (int i = 0; i < 4; i++)
    if (ids[i] < -1 || ids[i] >= v->size) __builtin_trap();
  int32_t out[64];
  int n = 0;
  ff_error err;
  ff_vocab_encode(v, "Hello, world 12-03.", out, 64, &n, &err);
  char text[256];
  ff_vocab_decode(v, out, n, text, sizeof text);
  encode_as_scan(v, "Hello, world 12-03.");
  encode_as_scan(v, "abcabc ABC caf\xc3\xa9 \xe4\xb8\xad\xff x");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ff_vocab v;
  ff_error err;
  for (int expected = 0; expected <= 41; expected += 41) /* any size, and dates' */
    if (ff_vocab_parse("fuzz.json", (const char *)data, size, expected, &v, &err) == 0) {
      use(&v);
      ff_vocab_free(&v);
    }
  return 0;
}
