/* fuzz_safetensors.c - libFuzzer harness: any bytes through the safetensors
 * reader (ff_safetensors_parse) must give a tensor file or a clean error,
 * never a crash, a leak or undefined behaviour (built with ASan + UBSan). */
#include <stdio.h>

#include "ff_io.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ff_tensor_file f;
  ff_error err;
  if (ff_safetensors_parse(data, size, &f, &err) == 0) {
    volatile float sink = 0; /* touch every float the reader says it has */
    for (int i = 0; i < f.count; i++)
      for (size_t j = 0; j < f.tensors[i].numel; j++) sink += f.tensors[i].data[j];
    (void)sink;
    ff_tensor_file_free(&f);
  }
  return 0;
}
