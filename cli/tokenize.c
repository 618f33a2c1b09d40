/* tokenize.c - `fixformer tokenize`: text to the ids a model is given for
 * it, as lines of ids or a C header (a board's inputs); and the tokenizer
 * that `detokenize` (cli/detokenize.c) shares. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* ---- the tokenizer of a description, or of --vocabulary FILE ---------------------- */

int cli_tok_open(const char *model, const cli_flag *flags, int need, cli_tok *k, ff_error *err) {
  const char *file = cli_value(flags, "--vocabulary");
  memset(k, 0, sizeof *k);
  k->info = (ff_tokenizer_info){FF_TOK_VOCAB, 0, -1, -1, -1, -1, 0, 0, -1, 0, {0}, 0, {0}};
  k->prefix = k->suffix = 0;
  if (!model && !file) return ff_fail(err, CLI_EUSAGE, "give MODEL.lua, or --vocabulary FILE");
  if (model && !(k->m = ff_model_open(model, err))) return err->code;
  k->c = k->m ? ff_model_config(k->m) : NULL;
  if (k->c && !k->c->vocab) return ff_fail(err, FF_EINVAL, "%s has no vocab: its inputs are floats", model);
  if (k->c && !file && !k->c->vocabulary[0] && need)
    return ff_fail(err, FF_EINVAL, "%s names no vocabulary: give --vocabulary FILE", model);
  k->size = k->c ? k->c->vocab : 0, k->cap = k->c ? k->c->max_seq : 0;
  if (!(k->path = file ? file : k->c->vocabulary[0] ? k->c->vocabulary : NULL)) return 0;
  int rc = ff_tokenizer_load(k->path, k->size, &k->t, err);
  if (rc) return rc;
  k->info = *ff_tokenizer_get_info(k->t);
  k->size = k->c ? k->size : k->info.size;
  /* the template: a decoding model is given what generate --text feeds it (a
   * decoder-only model the ids before the text, BOS; an encoder-decoder's
   * source the whole template: Marian's </s> after it), any other what run
   * --text feeds (the whole template) */
  int decoder_only = k->c && k->c->arch == FF_ARCH_DECODER_ONLY && !k->c->no_lm_head;
  k->prefix = 1, k->suffix = !decoder_only;
  return 0;
}

void cli_tok_close(cli_tok *k) {
  ff_tokenizer_free(k->t);
  ff_model_close(k->m);
}

/* ---- tokenize ------------------------------------------------------------------------- */

/* the ids of every input, one after another: input i is ids[start[i] .. start[i + 1]) */
typedef struct {
  int32_t *ids;
  size_t n, cap;
  size_t *start; /* [count + 1] */
  int count, room;
} id_list;

static int list_add(id_list *l, const int32_t *ids, int n, ff_error *err) {
  if (l->n + (size_t)n > l->cap) {
    size_t cap = 2 * l->cap + (size_t)n + 64;
    int32_t *p = realloc(l->ids, cap * sizeof *p);
    if (!p) return ff_fail(err, FF_ENOMEM, "out of memory");
    l->ids = p, l->cap = cap;
  }
  if (l->count + 2 > l->room) {
    int room = 2 * l->room + 16;
    size_t *p = realloc(l->start, (size_t)room * sizeof *p);
    if (!p) return ff_fail(err, FF_ENOMEM, "out of memory");
    l->start = p, l->room = room;
  }
  if (!l->count) l->start[0] = 0;
  memcpy(l->ids + l->n, ids, (size_t)n * sizeof *ids);
  l->n += (size_t)n;
  l->start[++l->count] = l->n;
  return 0;
}

/* one text's ids (the template's around them unless --no-special) into the list */
static int tokenize_text(const cli_tok *k, const char *text, int special, id_list *l, ff_error *err) {
  size_t len = strlen(text);
  int n = 0, cap = k->cap ? k->cap : (len > (size_t)1 << 28 ? 1 << 30 : 3 * (int)len + 2 * FF_TOK_TEMPLATE_MAX + 8);
  int32_t *ids = malloc((size_t)cap * sizeof *ids); /* cap: a model's max_seq */
  if (!ids) return ff_fail(err, FF_ENOMEM, "out of memory");
  int rc = ff_tokenizer_encode_template(k->t, text, special && k->prefix, -1, special && k->suffix, ids, cap, &n, err);
  if (rc == FF_ELENGTH && n == 0 && !strcmp(err->msg, "the text is empty")) rc = 0; /* a blank line: no ids */
  if (!rc) rc = list_add(l, ids, n, err);
  free(ids);
  return rc;
}

int cli_each_line(const char *path, int (*each)(void *ctx, const char *line, ff_error *err), void *ctx,
                  ff_error *err) {
  uint8_t *buf;
  size_t len;
  int rc = ff_read_file(path, &buf, &len, err);
  if (rc) return rc;
  char *text = malloc(len + 1), *p = text, *end = text + len;
  if (!text) rc = ff_fail(err, FF_ENOMEM, "out of memory");
  else memcpy(text, buf, len);
  free(buf);
  for (int line = 1; !rc && p < end; line++) {
    char *nl = memchr(p, '\n', (size_t)(end - p)), *stop = nl ? nl : end;
    if (stop > p && stop[-1] == '\r') stop--;
    *stop = 0;
    if (memchr(p, 0, (size_t)(stop - p))) rc = ff_fail(err, FF_EINVAL, "a NUL byte");
    else rc = each(ctx, p, err);
    if (rc) ff_fail(err, rc, "%s:%d: %s", path, line, err->msg);
    p = nl ? nl + 1 : end;
  }
  free(text);
  return rc;
}

/* a line of --lines */
typedef struct {
  const cli_tok *k;
  int special;
  id_list *l;
} tokenize_ctx;

static int tokenize_line(void *ctx, const char *line, ff_error *err) {
  const tokenize_ctx *c = ctx;
  return tokenize_text(c->k, line, c->special, c->l, err);
}

/* --tokens "ids, ids": the ids as given, each checked against the vocabulary */
static int tokenize_ids(const cli_tok *k, const char *tokens, id_list *l, ff_error *err) {
  ff_array a = {0};
  int32_t *lengths = NULL;
  int rc = cli_parse_token_list("--tokens", tokens, k->cap ? k->cap : 1 << 30, &a, &lengths, err);
  for (int b = 0; !rc && b < (int)a.shape[0]; b++) {
    const int32_t *row = (const int32_t *)a.data + (size_t)b * a.shape[1];
    for (int i = 0; !rc && i < lengths[b]; i++)
      if (row[i] < 0 || row[i] >= k->size)
        rc = ff_fail(err, FF_ETOKEN, "--tokens: id %d is outside the vocabulary [0, %d)", (int)row[i], k->size);
    if (!rc) rc = list_add(l, row, lengths[b], err);
  }
  free(lengths);
  ff_array_free(&a);
  return rc;
}

static void print_ids(FILE *f, const int32_t *ids, size_t n) {
  for (size_t i = 0; i < n; i++) fprintf(f, "%s%d", i ? " " : "", (int)ids[i]);
}

/* n values, comma-separated, 16 a line */
static void c_list(FILE *f, const int32_t *v, size_t n) {
  for (size_t i = 0; i < n; i++) fprintf(f, "%s%d", !i ? "" : i % 16 ? ", " : ",\n  ", (int)v[i]);
}

/* the ids as a C header for a program of the model (examples/mps2-an386):
 * NAME_COUNT inputs, ragged (NAME_start, NAME_ids) and as a padded batch
 * (NAME_tokens [NAME_BATCH][NAME_T], NAME_lengths), the decoder's start and
 * stop ids */
static int c_header(FILE *f, const cli_tok *k, const char *name, const char *command, const id_list *l,
                    ff_error *err) {
  char up[64], shown[1024];
  size_t T = 0;
  const ff_tokenizer_info *in = &k->info;
  for (int i = 0; name[i]; i++) up[i] = (char)toupper((unsigned char)name[i]), up[i + 1] = 0;
  for (int i = 0; i < l->count; i++) {
    size_t n = l->start[i + 1] - l->start[i];
    if (!n) return ff_fail(err, FF_ELENGTH, "--c-header: input %d has no ids (a program cannot run it)", i);
    T = n > T ? n : T;
  }
  fprintf(f, "/* generated by %s - do not edit.\n", command);
  if (k->t)
    fprintf(f, " * %d input(s) in the ids of %s, each as the model is given it%s. */\n", l->count,
            ff_shown_path(k->path, shown, sizeof shown), (k->prefix && k->info.n_prefix) || (k->suffix && k->info.n_suffix) ? ", the template's specials" : "");
  else fprintf(f, " * %d input(s) of ids. */\n", l->count);
  fprintf(f, "#ifndef FF_IDS_%s_H\n#define FF_IDS_%s_H\n#include <stdint.h>\n\n", up, up);
  fprintf(f, "#define %s_COUNT %d\n#define %s_BATCH %d /* as a padded batch: [%s_BATCH][%s_T] */\n", up, l->count, up,
          l->count, up, up);
  fprintf(f, "#define %s_T %zu\n#define %s_BOS (%d) /* the decoder's start id (-1: none) */\n", up, T, up, in->bos);
  fprintf(f, "#define %s_EOS (%d) /* the stop id (-1: none) */\n\n", up, in->eos);
  fprintf(f, "/* input i is %s_ids[%s_start[i] .. %s_start[i + 1]) */\nstatic const int %s_start[%d] = {", name, name,
          name, name, l->count + 1);
  for (int i = 0; i <= l->count; i++) fprintf(f, "%s%zu", i ? ", " : "", l->start[i]);
  fprintf(f, "};\nstatic const int32_t %s_ids[%zu] = {\n  ", name, l->n);
  c_list(f, l->ids, l->n);
  int32_t pad = in->pad >= 0 ? in->pad : 0, *batch = malloc(T * (size_t)l->count * sizeof *batch);
  if (!batch) return ff_fail(err, FF_ENOMEM, "out of memory");
  for (int i = 0; i < l->count; i++)
    for (size_t t = 0; t < T; t++) batch[(size_t)i * T + t] = l->start[i] + t < l->start[i + 1] ? l->ids[l->start[i] + t] : pad;
  fprintf(f, "};\n/* the same right-padded with %d; %s_lengths the true lengths */\n", (int)pad, name);
  fprintf(f, "static const int32_t %s_tokens[%zu] = {\n  ", name, T * (size_t)l->count);
  c_list(f, batch, T * (size_t)l->count);
  free(batch);
  fprintf(f, "};\nstatic const int32_t %s_lengths[%d] = {", name, l->count);
  for (int i = 0; i < l->count; i++) fprintf(f, "%s%zu", i ? ", " : "", l->start[i + 1] - l->start[i]);
  fprintf(f, "};\n\n#endif\n");
  return 0;
}

/* "fixformer tokenize MODEL --lines x --c-header input", as the header records it */
static void command_line(char *out, size_t n, const char *model, const cli_flag *flags) {
  char shown[1024];
  size_t at = (size_t)snprintf(out, n, "fixformer tokenize%s%s", model ? " " : "", model ? ff_shown_path(model, shown, sizeof shown) : "");
  for (const cli_flag *f = flags; f->name && at < n; f++)
    if (f->value && strcmp(f->name, "--output") && strcmp(f->name, "--text") && strcmp(f->name, "--tokens"))
      at += (size_t)snprintf(out + at, n - at, " %s%s%s", f->name, f->takes_value ? " " : "",
                             f->takes_value ? ff_shown_path(f->value, shown, sizeof shown) : "");
}

static int run_tokenize(const char *model, cli_flag *flags, ff_error *err) {
  const char *text = cli_value(flags, "--text"), *lines = cli_value(flags, "--lines");
  const char *tokens = cli_value(flags, "--tokens"), *out = cli_value(flags, "--output");
  const char *header = cli_value(flags, "--c-header");
  int special = !cli_value(flags, "--no-special"), rc;
  if (!!text + !!lines + !!tokens != 1)
    return ff_fail(err, CLI_EUSAGE, "give one of --text \"...\", --lines FILE or --tokens \"ids\"");
  for (const char *p = header; p && *p; p++)
    if (!(isalpha((unsigned char)*p) || *p == '_' || (p > header && isdigit((unsigned char)*p))) || p - header > 40)
      return ff_fail(err, CLI_EUSAGE, "--c-header: '%s' is not a C identifier (of at most 40 characters)", header);
  if (header && !*header) return ff_fail(err, CLI_EUSAGE, "--c-header: an empty name");
  cli_tok k;
  id_list l = {0};
  char *mem = NULL;
  size_t size = 0;
  FILE *f = NULL;
  if ((rc = cli_tok_open(model, flags, !tokens, &k, err)) ||
      (rc = ff_refuse_inputs(out, (const char *const[]){model, k.path, lines}, 3, err)))
    goto done;
  if (text) rc = tokenize_text(&k, text, special, &l, err);
  else if (lines) rc = cli_each_line(lines, tokenize_line, &(tokenize_ctx){&k, special, &l}, err);
  else rc = tokenize_ids(&k, tokens, &l, err);
  if (!rc && !(f = open_memstream(&mem, &size))) rc = ff_fail(err, FF_ENOMEM, "out of memory");
  if (!rc && header) {
    char command[2048];
    command_line(command, sizeof command, model, flags);
    rc = c_header(f, &k, header, command, &l, err);
  }
  for (int i = 0; !rc && !header && i < l.count; i++) {
    print_ids(f, l.ids + l.start[i], l.start[i + 1] - l.start[i]);
    fputc('\n', f);
  }
  if (f && (ferror(f) | fclose(f)) && !rc) rc = ff_fail(err, FF_ENOMEM, "out of memory");
  if (!rc && out) rc = ff_write_file_atomic(out, mem, size, err);
  else if (!rc) fwrite(mem, 1, size, stdout);
done:
  free(mem);
  free(l.ids);
  free(l.start);
  cli_tok_close(&k);
  return rc;
}

static cli_flag flags[] = {{"--help", "-h", NULL, 0},       {"--text", NULL, NULL, 1},     {"--lines", NULL, NULL, 1},
                           {"--tokens", NULL, NULL, 1},     {"--vocabulary", NULL, NULL, 1},
                           {"--no-special", NULL, NULL, 0}, {"--c-header", NULL, NULL, 1},
                           {"--output", "-o", NULL, 1},     {NULL, NULL, NULL, 0}};

const cli_command cli_tokenize = {
    "tokenize", "text to the ids a model is given (lines of ids, or a C header)",
    "usage: fixformer tokenize MODEL.lua (--text \"...\" | --lines FILE | --tokens \"ids\")\n"
    "                          [--no-special] [--vocabulary FILE] [--c-header NAME] [-o FILE]\n"
    "Prints the ids of each text, a line each, with the description's tokenizer:\n"
    "what generate --text gives a decoder (BOS first where the tokenizer's template\n"
    "puts one: llama2.c, LLaMA), what run --text gives an encoder (BERT: [CLS] ... [SEP]).\n"
    "  --text \"...\"      one text\n"
    "  --lines FILE       one text a line (a blank line: the template's ids alone)\n"
    "  --tokens \"ids\"    ids as they are, checked against the vocabulary (for --c-header);\n"
    "                     sequences separated by commas\n"
    "  --no-special       the text's ids alone, no BOS or template tokens\n"
    "  --vocabulary FILE  this tokenizer file instead of the description's (without\n"
    "                     MODEL.lua: the tokenizer alone, its whole template)\n"
    "  --c-header NAME    a C header instead: NAME_COUNT inputs as NAME_ids from\n"
    "                     NAME_start, as a padded batch NAME_tokens [NAME_BATCH][NAME_T]\n"
    "                     with NAME_lengths, NAME_BOS and NAME_EOS (a board's inputs)\n"
    "  -o, --output FILE  write there (atomically) instead of the standard output\n"
    "Examples:\n"
    "  fixformer tokenize models/dates.lua --text \"March 5, 1999\"\n"
    "  fixformer tokenize models/dates.lua --lines dates.txt --c-header input -o inputs.h\n",
    "MODEL.lua", 1, run_tokenize, flags};
