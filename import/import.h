/* import.h - `fixformer import`: a checkpoint as its users have it (a Hugging
 * Face model folder, a llama2.c .bin) -> DIR/NAME.lua + DIR/NAME.safetensors
 * (+ its tokenizer), written all or none. */
#ifndef FF_CLI_IMPORT_H
#define FF_CLI_IMPORT_H

#include <stddef.h>

#include "ff_error.h"

/* src: a model folder (config.json + model.safetensors or a sharded
 * model.safetensors.index.json) or a llama2.c checkpoint; name and
 * tokenizer may be NULL (derived from src; tokenizer.json / tokenizer.bin
 * beside it, left out with a note when generate could not load it);
 * max_seq > 0 caps the positions (1..the source's), 0 keeps them.  The
 * description is validated as every command loads it, and no file read is
 * written over, before anything is written.  Prints a summary, the .lua path
 * on its last line. */
int ff_cli_import(const char *src, const char *dir, const char *name, const char *tokenizer, int max_seq,
                  ff_error *err);
/* src's last name, less trailing slashes and a .bin: its first *n
 * characters (the default NAME, and the command's default DIR). */
const char *ff_import_basename(const char *src, size_t *n);

#endif
