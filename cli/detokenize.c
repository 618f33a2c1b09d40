/* detokenize.c - `fixformer detokenize`: ids to text with a description's
 * tokenizer (cli/tokenize.c opens it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* one sequence of ids ("5 17 42"; blank: a blank line) as text on a line */
static int detokenize_one(const cli_tok *k, const char *what, const char *ids_text, ff_error *err) {
  ff_array a = {0};
  int32_t *lengths = NULL;
  int rc = 0;
  if (ids_text[strspn(ids_text, " \t")] && (rc = cli_parse_token_list(what, ids_text, 1 << 30, &a, &lengths, err)))
    return rc;
  for (int b = 0; !rc && b < (int)a.shape[0]; b++) {
    const int32_t *ids = (const int32_t *)a.data + (size_t)b * a.shape[1];
    for (int i = 0; !rc && i < lengths[b]; i++)
      if (ids[i] < 0 || ids[i] >= k->size)
        rc = ff_fail(err, FF_ETOKEN, "%s: id %d is outside the vocabulary [0, %d)", what, (int)ids[i], k->size);
    size_t need = rc ? 0 : ff_tokenizer_decode(k->t, ids, lengths[b], NULL, 0);
    char *text = rc ? NULL : malloc(need + 1);
    if (!rc && !text) rc = ff_fail(err, FF_ENOMEM, "out of memory");
    if (!rc) ff_tokenizer_decode(k->t, ids, lengths[b], text, need + 1), fwrite(text, 1, need, stdout), putchar('\n');
    free(text);
  }
  if (!a.data) putchar('\n');
  free(lengths);
  ff_array_free(&a);
  return rc;
}

/* a line of --lines: one sequence */
static int detokenize_line(void *k, const char *line, ff_error *err) {
  if (strchr(line, ',')) return ff_fail(err, FF_EINVAL, "not a line of ids (one sequence a line)");
  return detokenize_one(k, "ids", line, err);
}

static int run_detokenize(const char *model, cli_flag *flags, ff_error *err) {
  const char *tokens = cli_value(flags, "--tokens"), *lines = cli_value(flags, "--lines");
  cli_tok k;
  if (!!tokens + !!lines != 1) return ff_fail(err, CLI_EUSAGE, "give one of --tokens \"ids\" or --lines FILE");
  int rc = cli_tok_open(model, flags, 1, &k, err);
  if (!rc && tokens) {
    if (!tokens[strspn(tokens, " \t")]) rc = ff_fail(err, FF_ELENGTH, "--tokens: no ids");
    else rc = detokenize_one(&k, "--tokens", tokens, err);
  } else if (!rc) {
    rc = cli_each_line(lines, detokenize_line, &k, err);
  }
  cli_tok_close(&k);
  return rc;
}

static cli_flag flags[] = {{"--help", "-h", NULL, 0}, {"--tokens", NULL, NULL, 1}, {"--lines", NULL, NULL, 1},
                           {"--vocabulary", NULL, NULL, 1}, {NULL, NULL, NULL, 0}};

const cli_command cli_detokenize = {
    "detokenize", "ids to text with a description's tokenizer",
    "usage: fixformer detokenize MODEL.lua (--tokens \"ids\" | --lines FILE) [--vocabulary FILE]\n"
    "Prints the text of each sequence of ids, a line each, as generate decodes them:\n"
    "special ids (BOS, EOS, padding, [CLS] ...) left out.\n"
    "  --tokens \"ids\"    ids; several sequences separated by commas, a line each\n"
    "  --lines FILE       a sequence of ids a line (what tokenize --lines prints)\n"
    "  --vocabulary FILE  this tokenizer file instead of the description's (without\n"
    "                     MODEL.lua: the tokenizer alone)\n"
    "Examples:\n"
    "  fixformer detokenize models/dates.lua --tokens \"10 18 18 18 6 9 12 6 9 14 2\"\n"
    "  fixformer tokenize models/dates.lua --lines in.txt | fixformer detokenize models/dates.lua --lines /dev/stdin\n",
    "MODEL.lua", 1, run_detokenize, flags};
