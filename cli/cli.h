/* cli.h - what the `fixformer` commands share: their flags, the shape of a
 * command (cli/commands.h lists them), and the helpers several commands use.
 * Each command lives in its own file (cli/NAME.c) and returns a status; only
 * main (cli/main.c) turns it into an exit code and prints the one line. */
#ifndef FF_CLI_H
#define FF_CLI_H

#include <stdint.h>

#include "fixformer.h" /* the public API, all a command calls */
#include "fixformer_train.h"

/* A command-line flag; the command's table ends with a NULL name. */
typedef struct {
  const char *name;  /* "--weights" */
  const char *alias; /* "-o", or NULL */
  const char *value; /* set when given; "1" for switches */
  int takes_value;
} cli_flag;

/* One command: `fixformer NAME [OPERAND] [flags]`. */
typedef struct {
  const char *name;
  const char *summary;  /* one line in `fixformer --help` */
  const char *usage;    /* `fixformer NAME --help`: usage lines, what it does, the flags, examples */
  const char *operand;  /* "MODEL.lua", "SRC", or NULL: the command takes none */
  int operand_optional; /* the command checks itself whether it needs it */
  int (*run)(const char *operand, cli_flag *flags, ff_error *err);
  cli_flag *flags;
} cli_command;

/* A command line that is not well formed (unknown flag, missing operand, a
 * flag value out of range): exit status 2, where bad input is 1. */
#define CLI_EUSAGE (-100)
/* A failure another process reports (an MPI rank but the first): exit
 * status 1, no line. */
#define CLI_ESILENT (-101)

/* ---- flags (cli/args.c) ---------------------------------------------------- */

/* argv (after the command's name) -> flags and the operand: `--flag value`,
 * `--flag=value`, aliases (-o), switches; CLI_EUSAGE on anything else. */
int cli_parse(const cli_command *cmd, int argc, char **argv, const char **operand, ff_error *err);
/* The flag's value, or NULL when not given. */
const char *cli_value(const cli_flag *flags, const char *name);
/* ... or CLI_EUSAGE "NAME is required". */
int cli_require(const cli_flag *flags, const char *name, const char **out, ff_error *err);
/* A non-negative integer flag (at most 2^30), or def when absent. */
int cli_int(const cli_flag *flags, const char *name, int def, int *out, ff_error *err);
/* --engine E, or the default engine (ff_engine_default: cc where a C compiler is found, else tcc). */
int cli_engine(const cli_flag *flags, int *engine, ff_error *err);
/* Training's shapes from --batch B (32) and --seq N or S,T (max_seq) */
int cli_train_shape(const cli_flag *flags, const ff_config *c, ff_train_shape *shape, ff_error *err);
/* --quiet given: no progress lines on stderr. */
int cli_quiet(const cli_flag *flags);

/* ---- models (cli/common.c) ------------------------------------------------- */

/* Progress lines of slow steps: on when stderr is a terminal and not --quiet;
 * cli_progress is the ff_progress_fn that shows them ("CTX: STEP: 1.2 s"). */
int cli_progress_on(const cli_flag *flags);
void cli_progress(void *ctx, const char *step, int done);

/* ff_model_open, then --dtype (the description's `dtype` otherwise) and,
 * when stderr is a terminal and not --quiet, a line per slow step there. */
ff_model *cli_open_model(const char *path, const cli_flag *flags, ff_error *err);
/* Unless --quiet, one line on stderr when m's compute type (int8, bf16) has
 * no dot-product instruction in this machine's kernels: the plain C tiles
 * run it, several times slower than f32 (docs/performance.md). */
void cli_note_compute(ff_model *m, const cli_flag *flags);
/* --weights, or else the file the description names (NULL if neither) */
const char *cli_default_weights(const ff_config *c, const char *given);
/* ... and an error when there is none */
int cli_weights_of(const ff_config *c, const char **weights, ff_error *err);
/* ff_model_load_weights, refusing non-finite weights unless --allow-nonfinite. */
int cli_load_weights(ff_model *m, const cli_flag *flags, const char *weights, ff_error *err);
/* --threads N, then ff_model_prepare with the engine. */
int cli_prepare(ff_model *m, const cli_flag *flags, int engine, ff_error *err);
/* --threads N for the generated code of a tcc or cc engine */
int cli_threads(const cli_flag *flags, ff_model *m, int engine, ff_error *err);
/* Token ids from an int32 or int64 array of rank 2 -> int32 [B, T]. */
int cli_tokens_from(const char *what, const char *path, const ff_array *a, int32_t **out, ff_error *err);
/* "5 17 42, 7 7" -> a right-padded batch [B, T] of ids (padding 0) and the
 * lengths [B] (lengths may be NULL): sequences separated by commas, ids by
 * spaces; none longer than max_len (checked before the batch is allocated). */
int cli_parse_token_list(const char *flagname, const char *text, int max_len, ff_array *a, int32_t **lengths,
                         ff_error *err);

/* ---- tokenizers (cli/tokenize.c) ----------------------------------------------- */

/* The tokenizer of tokenize and detokenize: --vocabulary FILE, else the
 * description's (t NULL when there is none and need is 0); bos and tail the
 * template's ids a text gets (-1: none); cap the ids a text may have (the
 * model's max_seq, 0 without a model). */
typedef struct {
  ff_model *m;
  const ff_config *c;
  ff_tokenizer *t;
  const char *path;
  ff_tokenizer_info info; /* t's, or none of its ids */
  int size, cap, prefix, suffix; /* 1: the template's ids before / after the text */
} cli_tok;
int cli_tok_open(const char *model, const cli_flag *flags, int need, cli_tok *k, ff_error *err);
void cli_tok_close(cli_tok *k);
/* each(ctx, line, err) for each line of path (its '\n', and a '\r' before
 * it, taken off; a NUL byte refused); a failure's message names FILE:LINE */
int cli_each_line(const char *path, int (*each)(void *ctx, const char *line, ff_error *err), void *ctx,
                  ff_error *err);

#endif
