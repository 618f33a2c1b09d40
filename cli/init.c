/* init.c - `fixformer init`: deterministic random weights with PyTorch's initialisation. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"

static int run_init(const char *path, cli_flag *flags, ff_error *err) {
  const char *out, *seed_s = cli_value(flags, "--seed");
  int rc = cli_require(flags, "-o", &out, err);
  if (rc) return rc;
  unsigned long long seed = 0;
  if (seed_s) {
    char *end;
    errno = 0;
    seed = strtoull(seed_s, &end, 10);
    if (errno || *end || !*seed_s || seed_s[0] == '-')
      return ff_fail(err, CLI_EUSAGE, "--seed: '%s' is not a non-negative integer", seed_s);
  }
  if ((rc = ff_refuse_inputs(out, (const char *const[]){path}, 1, err))) return rc;
  ff_model *m = ff_model_open(path, err);
  if (!m) return err->code;
  rc = ff_config_init_weights(ff_model_config(m), seed, out, err);
  if (!rc) {
    size_t tensors, params;
    ff_config_count_weights(ff_model_config(m), &tensors, &params);
    printf("wrote %s (%zu tensors, %zu parameters, seed %llu)\n", out, tensors, params, seed);
  }
  ff_model_close(m);
  return rc;
}

static cli_flag flags[] = {{"--help", "-h", NULL, 0}, {"-o", "--output", NULL, 1}, {"--seed", NULL, NULL, 1},
                           {NULL, NULL, NULL, 0}};

const cli_command cli_init = {
    "init", "deterministic random weights (PyTorch initialisation) as safetensors",
     "usage: fixformer init MODEL.lua -o W.safetensors [--seed N]\n"
     "Writes deterministic random weights with PyTorch's default initialisation\n"
     "(same seed, same bytes; default seed 0) under the model's PyTorch names.\n"
     "  -o, --output W  the safetensors file to write\n"
     "  --seed N        the generator's seed (default 0)\n"
     "Example:\n"
     "  fixformer init models/tiny.lua -o tiny.safetensors --seed 1\n",
    "MODEL.lua", 0, run_init, flags};
