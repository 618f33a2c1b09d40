/* fuzz_npy.c - libFuzzer harness: any bytes through the .npy reader
 * (ff_npy_parse) must give an array or a clean error, never a crash, a leak
 * or undefined behaviour (built with ASan + UBSan). */
#include "ff_io.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ff_array a;
  ff_error err;
  if (ff_npy_parse(data, size, &a, &err) == 0) {
    size_t item = a.dtype == FF_I64 ? 8 : 4;
    volatile unsigned char sink = 0; /* touch every byte the reader says it has */
    for (size_t i = 0; i < a.numel * item; i++) sink ^= ((const unsigned char *)a.data)[i];
    (void)sink;
    ff_array_free(&a);
  }
  return 0;
}
