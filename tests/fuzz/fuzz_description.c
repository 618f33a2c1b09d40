/* fuzz_description.c - libFuzzer harness: any bytes as a model description
 * go through the sandboxed loader and the validator (ff_model_open) and, when
 * accepted, through the whole generator (ff_model_generate): a clean error or
 * C text, never a crash, a leak, a hang past the instruction budget or
 * undefined behaviour (built with ASan + UBSan). */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "fixformer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char path[64]; /* the description file each input is written to */

static void remove_file(void) { unlink(path); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!path[0]) {
    snprintf(path, sizeof path, "/tmp/fuzz_description_%ld.lua", (long)getpid());
    atexit(remove_file);
  }
  FILE *f = fopen(path, "wb");
  if (!f) return 0;
  fwrite(data, 1, size, f);
  fclose(f);
  ff_error err;
  ff_model *m = ff_model_open(path, &err);
  if (m) {
    const ff_config *c = ff_model_config(m);
    const char *header, *source;
    if ((double)c->d_model * (c->encoder_layers + c->decoder_layers) < 1e6) /* generate text of a sane size */
      ff_model_generate(m, "fuzz", &header, &source, &err);
    ff_model_close(m);
  }
  return 0;
}
