/* fuzz_tokenizer.c - libFuzzer harness: any bytes as a tokenizer file
 * through ff_tokenizer_parse (llama2.c's tokenizer.bin, a SentencePiece
 * model, a Hugging Face tokenizer.json or fixformer's vocabulary, by
 * content), with and without an
 * expected size; what it accepts then encodes a multilingual text and long
 * words and decodes the ids, and decodes each id alone (a C string: no
 * NUL before its end).  A tokenizer or a clean error, never a crash,
 * a leak, undefined behaviour (built with ASan + UBSan) or a time-out. */
#include <string.h>

#include "ff_io.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void use(const ff_tokenizer *t) {
  const ff_tokenizer_info *in = ff_tokenizer_get_info(t);
  const int ids[] = {in->pad, in->bos, in->eos, in->unk};
  for (int i = 0; i < 4; i++)
    if (ids[i] < -1 || ids[i] >= in->size) __builtin_trap();
  static int32_t out[4096];
  static char long_words[2049]; /* 4 words of 511 letters: a superlinear encoder times the fuzzer out */
  int n = 0;
  ff_error err;
  if (!long_words[0])
    for (int i = 0; i < 2048; i++) long_words[i] = i % 512 == 511 ? ' ' : "etaoinshrdlucmfwypvbgkjqxz"[(i * 7 + i / 26) % 26];
  const char *const texts[] = {"Hello, world 12-03.", "  caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80\t!",
                               "\xff\xfe bad \xc3 utf8", long_words,
                               /* newlines, marks out of order, titlecase, a contraction, digits, U+FDFA */
                               "x\r\n\r\n  y\xcc\x81\xcc\x96 \xc7\x85" "A'S 1234567 \xef\xb7\xba\n"};
  for (int k = 0; k < 5; k++) {
    if (ff_tokenizer_encode(t, texts[k], out, 4096, &n, &err)) continue;
    for (int i = 0; i < n; i++)
      if (out[i] < 0 || out[i] >= in->size) __builtin_trap();
    char text[512];
    size_t need = ff_tokenizer_decode(t, out, n, text, sizeof text);
    if (need < sizeof text && strlen(text) != need) __builtin_trap();
  }
  for (int32_t id = 0; id < in->size; id++) { /* each id alone (<0x00>, byte-level's U+0100): still a C string */
    char text[512];
    size_t need = ff_tokenizer_decode(t, &id, 1, text, sizeof text);
    if (need < sizeof text && strlen(text) != need) __builtin_trap();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ff_tokenizer *t;
  ff_error err;
  for (int expected = 0; expected <= 300; expected += 300)
    if (ff_tokenizer_parse("fuzz.tok", data, size, expected, &t, &err) == 0) {
      use(t);
      ff_tokenizer_free(t);
    }
  return 0;
}
