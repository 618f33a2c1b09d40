/* fuzz_driver_npy.c - libFuzzer harness: any bytes through the .npy parser of
 * the --with-main driver (npy_parse), compiled from templates/driver_npy.c,
 * the same text the generator pastes into NAME_main.c.  An array or a clean
 * reason, never a crash, a leak or undefined behaviour (ASan + UBSan); an
 * accepted array must agree with itself and with the bytes it came from.
 * Shares the host reader's corpus (tests/fuzz/corpus/npy). */
#include "driver_npy.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  npy_array a;
  const char *why = npy_parse(data, size, &a);
  (void)npy_load, (void)npy_save; /* the driver's, not fuzzed here (they read and write files) */
  if (why) {
    if (a.data || a.numel || a.rank || !*why) abort(); /* a failure leaves nothing behind */
    return 0;
  }
  size_t numel = 1;
  for (int i = 0; i < a.rank; i++) {
    if (a.shape[i] < 0 || a.shape[i] > 2147483647L) abort();
    numel *= (size_t)a.shape[i]; /* cannot wrap: checked by the parser */
  }
  if (a.rank > NPY_MAX_RANK || numel != a.numel || (a.kind != 'i' && a.kind != 'f') || !a.data || a.numel > size)
    abort();
  volatile unsigned char sink = 0; /* touch every byte the reader says it has */
  for (size_t i = 0; i < a.numel * 4; i++) sink ^= ((const unsigned char *)a.data)[i];
  (void)sink;
  free(a.data);
  return 0;
}
