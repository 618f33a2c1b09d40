/* import.c - `fixformer import`: a published checkpoint -> a description + weights (ff_import, import/import.c). */
#include <stdio.h>

#include "cli.h"

/* the summary, a line at a time, on stdout */
static void print_line(void *ctx, const char *line) {
  (void)ctx;
  printf("%s\n", line);
}

static int run_import(const char *src, cli_flag *flags, ff_error *err) {
  const char *dir = cli_value(flags, "-o");
  char made[FF_PATH_MAX];
  ff_import_options o = {cli_value(flags, "--name"), cli_value(flags, "--tokenizer"), 0, print_line, NULL, NULL,
                         (void *)"import"};
  int rc = cli_int(flags, "--max-seq", 0, &o.max_seq, err);
  if (rc) return rc;
  if (cli_value(flags, "--max-seq") && o.max_seq < 1) return ff_fail(err, CLI_EUSAGE, "--max-seq must be at least 1");
  if (!dir) { /* SRC's name + -fixformer, in the current folder: never SRC itself, whose files import reads */
    if ((rc = ff_import_default_dir(src, made, sizeof made, err))) return rc;
    fprintf(stderr, "fixformer import: no -o given: writing into %s\n", dir = made);
  }
  if (cli_progress_on(flags)) o.progress = cli_progress;
  return ff_import(src, dir, &o, err);
}

static cli_flag flags[] = {{"--help", "-h", NULL, 0},        {"-o", "--output", NULL, 1},
                           {"--name", NULL, NULL, 1},        {"--tokenizer", NULL, NULL, 1},
                           {"--max-seq", NULL, NULL, 1},     {"--quiet", "-q", NULL, 0},
                           {NULL, NULL, NULL, 0}};

const cli_command cli_import = {
    "import", "a Hugging Face folder, a llama2.c checkpoint or a GGUF file -> a description + weights",
     "usage: fixformer import SRC [-o DIR] [--name NAME] [--tokenizer FILE] [--max-seq N]\n"
     "Turns a checkpoint as it is published into DIR/NAME.lua + DIR/NAME.safetensors\n"
     "(+ the tokenizer), which every other command takes with no other flag:\n"
     "  SRC               a Hugging Face model folder (config.json + model.safetensors, or the\n"
     "                    shards of model.safetensors.index.json; model_type llama, qwen2, gpt2,\n"
     "                    bert, marian: its source.spm + vocab.json as one tokenizer), a llama2.c checkpoint .bin (legacy or version 1, float32), or a\n"
     "                    GGUF file (v2, v3; llama, qwen2; F32, F16, BF16, Q8_0 -> dtype int8;\n"
     "                    its tokenizer.ggml.* written as a tokenizer file)\n"
     "  -o, --output DIR  where the files go (made if need be; default: SRC's name\n"
     "                    + -fixformer in the current folder); they appear all or none\n"
     "  --name NAME       the model's name (a C identifier; default: from SRC)\n"
     "  --tokenizer FILE  the tokenizer to copy (default: tokenizer.json in the folder,\n"
     "                    tokenizer.bin beside a .bin, a GGUF's own; one generate cannot\n"
     "                    load is left out with a note, or refused when given here)\n"
     "  --max-seq N       at most N positions (1..the source's max_position_embeddings,\n"
     "                    n_positions, seq_len or context_length): smaller caches; learned\n"
     "                    positions keep their first N rows\n"
     "  -q, --quiet       no progress lines on stderr\n"
     "Prints what it mapped and ignored; the last line is the path of NAME.lua.  Nothing is\n"
     "written when the description would not load (it is checked as every command loads it)\n"
     "or when a file written would replace one import reads (import . -o .).\n"
     "Example:\n"
     "  fixformer import ~/checkpoints/stories15M.bin -o stories15M\n"
     "  fixformer generate stories15M/stories15M.lua --text \"Once upon a time\" --max-new 40\n",
    "SRC (a model folder, a llama2.c .bin or a .gguf)", 0, run_import, flags};
