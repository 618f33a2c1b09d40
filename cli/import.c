/* import.c - `fixformer import`: a published checkpoint -> a description + weights (the library: import/import.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "import.h"

/* Without -o: SRC's last name, its .bin dropped, + "-fixformer", in the
 * current folder (never SRC itself, whose files import reads). */
static char *default_dir(const char *src) {
  size_t n;
  const char *base = ff_import_basename(src, &n);
  if (n == 0 || (n == 1 && base[0] == '.') || (n == 2 && !strncmp(base, "..", 2)) || base[0] == '/')
    base = "model", n = 5;
  char *dir = malloc(n + sizeof "-fixformer");
  if (dir) snprintf(dir, n + sizeof "-fixformer", "%.*s-fixformer", (int)n, base);
  return dir;
}

static int run_import(const char *src, cli_flag *flags, ff_error *err) {
  const char *dir = cli_value(flags, "-o");
  char *made = NULL;
  int max_seq, rc = cli_int(flags, "--max-seq", 0, &max_seq, err);
  if (rc) return rc;
  if (cli_value(flags, "--max-seq") && max_seq < 1) return ff_fail(err, CLI_EUSAGE, "--max-seq must be at least 1");
  if (!dir) {
    if (!(dir = made = default_dir(src))) return ff_fail(err, FF_ENOMEM, "out of memory");
    fprintf(stderr, "fixformer import: no -o given: writing into %s\n", dir);
  }
  rc = ff_cli_import(src, dir, cli_value(flags, "--name"), cli_value(flags, "--tokenizer"), max_seq, err);
  free(made);
  return rc;
}

static cli_flag flags[] = {{"--help", "-h", NULL, 0},        {"-o", "--output", NULL, 1},
                           {"--name", NULL, NULL, 1},        {"--tokenizer", NULL, NULL, 1},
                           {"--max-seq", NULL, NULL, 1},     {NULL, NULL, NULL, 0}};

const cli_command cli_import = {
    "import", "a Hugging Face folder or a llama2.c checkpoint -> a description + weights",
     "usage: fixformer import SRC [-o DIR] [--name NAME] [--tokenizer FILE] [--max-seq N]\n"
     "Turns a checkpoint as it is published into DIR/NAME.lua + DIR/NAME.safetensors\n"
     "(+ the tokenizer), which every other command takes with no other flag:\n"
     "  SRC               a Hugging Face model folder (config.json + model.safetensors, or the\n"
     "                    shards of model.safetensors.index.json; model_type llama, gpt2, bert),\n"
     "                    or a llama2.c checkpoint .bin (legacy or version 1, float32)\n"
     "  -o, --output DIR  where the files go (made if need be; default: SRC's name\n"
     "                    + -fixformer in the current folder); they appear all or none\n"
     "  --name NAME       the model's name (a C identifier; default: from SRC)\n"
     "  --tokenizer FILE  the tokenizer to copy (default: tokenizer.json in the folder,\n"
     "                    tokenizer.bin beside a .bin; one generate cannot load is left out\n"
     "                    with a note, or refused when given here)\n"
     "  --max-seq N       at most N positions (1..the source's max_position_embeddings,\n"
     "                    n_positions or seq_len): smaller caches; learned positions keep\n"
     "                    their first N rows\n"
     "Prints what it mapped and ignored; the last line is the path of NAME.lua.  Nothing is\n"
     "written when the description would not load (it is checked as every command loads it)\n"
     "or when a file written would replace one import reads (import . -o .).\n"
     "Example:\n"
     "  fixformer import ~/checkpoints/stories15M.bin -o stories15M\n"
     "  fixformer generate stories15M/stories15M.lua --text \"Once upon a time\" --max-new 40\n",
    "SRC (a model folder or a llama2.c .bin)", 0, run_import, flags};
