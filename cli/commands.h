/* commands.h - the commands of `fixformer`, in the order `fixformer --help`
 * lists them: X(NAME) for the cli_command cli_NAME that cli/NAME.c defines.
 * A new command is its file plus one line here. */
#define FF_CLI_COMMANDS(X) X(info) X(init) X(emit) X(run) X(generate) X(tokenize) X(detokenize) X(train) X(bench) \
  X(import) X(cache)
