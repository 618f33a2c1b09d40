/* generate.c - `fixformer generate`: greedy decoding with a key/value cache. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

typedef struct {
  ff_model *m;
  const ff_tokenizer *vocab; /* NULL: ids only */
  int bos, eos, max_new, show_ids;
  const char *logits;    /* --logits OUT.npy, or NULL */
} generation;

/* Greedy-decodes one input (source ids for encoder-decoder, the prompt for
 * decoder-only) and prints the result on one line. */
static int generate_one(const generation *g, const int32_t *ids, int n, ff_error *err) {
  const ff_config *c = ff_model_config(g->m);
  int encdec = c->arch == FF_ARCH_ENCODER_DECODER, count = 0, rc;
  ff_greedy q = {encdec ? ids : NULL, encdec ? n : 0, encdec ? &g->bos : ids, encdec ? 1 : n, g->max_new, g->eos};
  if (q.max_new <= 0) q.max_new = c->max_seq - q.prompt_len; /* default: fill max_seq */
  if (q.max_new <= 0)
    return ff_fail(err, FF_ELENGTH, "the prompt of %d ids leaves no room in max_seq = %d", q.prompt_len,
                   c->max_seq);
  if (q.max_new > c->max_seq - q.prompt_len) /* before the buffers it sizes: ff_model_greedy's message */
    return ff_fail(err, FF_ELENGTH, "%d prompt ids and %d new ones do not fit in max_seq = %d positions",
                   q.prompt_len, q.max_new, c->max_seq);
  size_t rows = (size_t)q.prompt_len + (size_t)q.max_new - 1, cells = 0;
  if (g->logits && (ff_size_mul(rows, (size_t)c->vocab, &cells) || ff_size_mul(cells, sizeof(float), &cells)))
    return ff_fail(err, FF_ENOMEM, "--logits: %zu positions of %d logits do not fit in memory", rows, c->vocab);
  int32_t *out = malloc(sizeof *out * (size_t)q.max_new);
  float *logits = g->logits ? malloc(cells) : NULL;
  if (!out || (g->logits && !logits)) {
    free(out);
    free(logits);
    return ff_fail(err, FF_ENOMEM, "out of memory");
  }
  if (!(rc = ff_model_greedy(g->m, &q, out, &count, logits, err)) && g->logits) {
    ff_array a = {FF_F32, 3, {1, q.prompt_len + count - 1, c->vocab}, (size_t)(q.prompt_len + count - 1) * c->vocab,
                  logits};
    rc = ff_npy_write(g->logits, &a, err);
  }
  if (!rc) {
    for (int i = 0; (g->show_ids || !g->vocab) && i < count; i++) printf("%s%d", i ? " " : "", out[i]);
    if (g->vocab) {
      size_t need = ff_tokenizer_decode(g->vocab, out, count, NULL, 0);
      char *text = malloc(need + 1);
      if (text) ff_tokenizer_decode(g->vocab, out, count, text, need + 1);
      printf("%s%s", g->show_ids ? "\t" : "", text ? text : "");
      free(text);
    }
    printf("\n");
    fflush(stdout);
  }
  free(out);
  free(logits);
  return rc;
}

/* ids of one text (--text, a line of --lines); a decoder-only prompt starts
 * with bos where the tokenizer's format says so (llama2.c, LLaMA, BERT) */
static int generate_text(const generation *g, const char *text, int32_t *ids, ff_error *err) {
  const ff_config *c = ff_model_config(g->m);
  int bos = c->arch == FF_ARCH_DECODER_ONLY && ff_tokenizer_get_info(g->vocab)->add_bos && g->bos >= 0;
  if (bos) ids[0] = g->bos;
  int n, rc = ff_tokenizer_encode(g->vocab, text, ids + bos, c->max_seq - bos, &n, err);
  if (!rc && n == 0) rc = ff_fail(err, FF_ELENGTH, "the text is empty");
  return rc ? rc : generate_one(g, ids, n + bos, err);
}

/* The flags of generate, checked before the model is opened. */
typedef struct {
  const char *weights, *tokens, *text, *lines;
  int bos, eos, engine;
} generate_opts;

static int generate_options(const cli_flag *flags, generate_opts *o, generation *g, ff_error *err) {
  *o = (generate_opts){cli_value(flags, "--weights"), cli_value(flags, "--tokens"), cli_value(flags, "--text"),
                       cli_value(flags, "--lines"), -1, -1, 0};
  int rc;
  if ((!!o->tokens + !!o->text + !!o->lines) != 1)
    return ff_fail(err, CLI_EUSAGE, "give one of --tokens \"ids\", --text \"...\" or --lines FILE");
  if ((rc = cli_int(flags, "--max-new", 0, &g->max_new, err)) ||
      (rc = cli_int(flags, "--bos", -1, &o->bos, err)) ||
      (rc = cli_int(flags, "--eos", -1, &o->eos, err)))
    return rc;
  if (cli_value(flags, "--max-new") && g->max_new < 1)
    return ff_fail(err, CLI_EUSAGE, "--max-new must be at least 1");
  return cli_engine(flags, &o->engine, err);
}

/* The model, its vocabulary and the start and stop ids. */
static int generate_check(const ff_config *c, generate_opts *o, generation *g, ff_tokenizer **vocab,
                          ff_error *err) {
  int rc;
  if (c->vocab == 0 || c->arch == FF_ARCH_ENCODER)
    return ff_fail(err, FF_EINVAL, "needs a decoder-only or encoder-decoder model with a vocab");
  if (c->no_lm_head)
    return ff_fail(err, FF_EINVAL, "%s has lm_head = false (it outputs hidden states): decoding needs an output head",
                   c->name);
  if ((rc = cli_weights_of(c, &o->weights, err))) return rc;
  if (!c->vocabulary[0] && !o->tokens)
    return ff_fail(err, FF_EINVAL, "--text and --lines need a description with a vocabulary; use --tokens");
  if (c->vocabulary[0] && (rc = ff_tokenizer_load(c->vocabulary, c->vocab, vocab, err))) {
    if (!o->tokens) return rc;
    /* ids in need no tokenizer: ids out, with the reason on stderr */
    fprintf(stderr, "fixformer generate: %s; printing ids%s\n", err->msg, o->eos < 0 ? ", no EOS stop (--eos N)" : "");
    *err = (ff_error){0, ""};
  }
  g->vocab = *vocab;
  const ff_tokenizer_info *info = *vocab ? ff_tokenizer_get_info(*vocab) : NULL;
  g->bos = o->bos >= 0 ? o->bos : info ? info->bos : -1;
  g->eos = o->eos >= 0 ? o->eos : info ? info->eos : -1;
  if (g->bos >= c->vocab || g->eos >= c->vocab)
    return ff_fail(err, FF_ETOKEN, "--bos/--eos must be below the vocab size %d", c->vocab);
  if (c->arch == FF_ARCH_ENCODER_DECODER && g->bos < 0)
    return ff_fail(err, FF_EINVAL, "the decoder needs a start id: --bos N, or a vocabulary with \"bos\"");
  return 0;
}

/* --tokens: sequences separated by commas, each decoded on its own */
static int generate_tokens(const generation *g, const char *tokens, ff_error *err) {
  const ff_config *c = ff_model_config(g->m);
  ff_array batch = {0};
  int32_t *lengths = NULL;
  int rc = cli_parse_token_list("--tokens", tokens, c->max_seq, &batch, &lengths, err);
  if (!rc && g->logits && batch.shape[0] > 1) rc = ff_fail(err, FF_EINVAL, "--logits takes one sequence");
  for (int b = 0; !rc && b < (int)batch.shape[0]; b++)
    rc = generate_one(g, (const int32_t *)batch.data + (size_t)b * batch.shape[1], lengths[b], err);
  free(lengths);
  ff_array_free(&batch);
  return rc;
}

/* --lines FILE: one text a line, one output line each */
static int generate_lines(const generation *g, const char *lines, int32_t *ids, ff_error *err) {
  uint8_t *file = NULL;
  size_t len;
  if (g->logits) return ff_fail(err, FF_EINVAL, "--logits takes one sequence, not --lines");
  int rc = ff_read_file(lines, &file, &len, err);
  if (rc) return rc;
  uint8_t *room = realloc(file, len + 1); /* a last line without '\n' ends in this byte */
  if (!room) {
    free(file);
    return ff_fail(err, FF_ENOMEM, "%s: out of memory", lines);
  }
  file = room;
  char *p = (char *)file, *end = p + len;
  for (int line = 1; !rc && p < end; line++) {
    char *nl = memchr(p, '\n', (size_t)(end - p));
    char *stop = nl ? nl : end;
    if (stop > p && stop[-1] == '\r') stop--;
    char saved = *stop;
    *stop = 0;
    if (memchr(p, 0, (size_t)(stop - p)))
      rc = ff_fail(err, FF_EINVAL, "%s:%d: a NUL byte", lines, line);
    else if (stop == p) /* a blank line gives a blank line: outputs stay in step with inputs */
      printf("\n");
    else if ((rc = generate_text(g, p, ids, err)))
      ff_fail(err, rc, "%s:%d: %s", lines, line, err->msg);
    *stop = saved;
    p = nl ? nl + 1 : end;
  }
  free(file);
  return rc;
}

static int run_generate(const char *path, cli_flag *flags, ff_error *err) {
  generation g = {NULL, NULL, -1, -1, 0, cli_value(flags, "--ids") != NULL, cli_value(flags, "--logits")};
  generate_opts o;
  int rc = generate_options(flags, &o, &g, err);
  if (rc) return rc;
  ff_model *m = cli_open_model(path, flags, err);
  if (!m) return err->code;
  g.m = m;
  const ff_config *c = ff_model_config(m);
  ff_tokenizer *vocab = NULL;
  int32_t *ids = NULL;
  if ((rc = generate_check(c, &o, &g, &vocab, err)) ||
      (rc = ff_refuse_inputs(g.logits, (const char *const[]){path, o.weights, c->vocabulary, o.lines}, 4, err)) ||
      (rc = cli_load_weights(m, flags, o.weights, err)) || (rc = cli_prepare(m, flags, o.engine, err)))
    goto done;
  if (!(ids = malloc(sizeof *ids * (size_t)c->max_seq))) {
    rc = ff_fail(err, FF_ENOMEM, "out of memory");
    goto done;
  }
  if (o.tokens) rc = generate_tokens(&g, o.tokens, err);
  else if (o.text) rc = generate_text(&g, o.text, ids, err);
  else rc = generate_lines(&g, o.lines, ids, err);
done:
  free(ids);
  ff_tokenizer_free(vocab);
  ff_model_close(m);
  return rc;
}

static cli_flag flags[] = {{"--help", "-h", NULL, 0},    {"--weights", NULL, NULL, 1},
                           {"--tokens", NULL, NULL, 1},  {"--text", NULL, NULL, 1},
                           {"--lines", NULL, NULL, 1},   {"--max-new", NULL, NULL, 1},
                           {"--engine", NULL, NULL, 1},  {"--bos", NULL, NULL, 1},
                           {"--eos", NULL, NULL, 1},     {"--logits", NULL, NULL, 1},
                           {"--ids", NULL, NULL, 0},     {"--threads", NULL, NULL, 1},
                           {"--dtype", NULL, NULL, 1},   {"--quiet", "-q", NULL, 0},
                           {"--allow-nonfinite", NULL, NULL, 0}, {NULL, NULL, NULL, 0}};

const cli_command cli_generate = {
    "generate", "greedy decoding with a key/value cache (text or ids)",
     "usage: fixformer generate MODEL.lua (--text \"...\" | --lines FILE | --tokens \"ids\")\n"
     "                          [--weights W.safetensors] [--max-new N] [--engine cc|tcc|runtime]\n"
     "                          [--dtype f32|bf16|int8]\n"
     "Greedy decoding with a key/value cache: encoder-decoder models translate the\n"
     "input (the decoder starts from BOS); decoder-only models continue it.  Prints\n"
     "one line per input: the generated text, or ids without a vocabulary.\n"
     "  --text \"...\"     the input as text (needs the description's vocabulary)\n"
     "  --lines FILE      one text per line, one output line each\n"
     "  --tokens \"ids\"   the input as ids; sequences separated by commas (a vocabulary\n"
     "                    that does not load is skipped with a note: ids are printed)\n"
     "  --weights W       default: the description's weights\n"
     "  --max-new N       stop after N new ids (default: up to max_seq); stops at EOS\n"
     "  --engine E        cc, tcc or runtime; default: cc where a C compiler is found,\n"
     "                    else tcc (FIXFORMER_ENGINE sets it)\n"
     "  --bos N, --eos N  start and stop ids (default: the vocabulary's)\n"
     "  --ids             also print the generated ids (EOS included), then a tab\n"
     "  --threads N       tcc, cc: split matrix products and attention over N threads\n"
     "  --dtype T         the weight type: f32, bf16 or int8 (per 32 inputs); default: the\n"
     "                    description's dtype (f32 unless it says)\n"
     "  --logits OUT.npy  float32 [1, P, vocab]: the logits of every position fed to\n"
     "                    the decoder (one input only)\n"
     "  --allow-nonfinite run with NaN or infinite weights (refused by default)\n"
     "  -q, --quiet       no progress lines on stderr\n"
     "Examples:\n"
     "  fixformer generate models/dates.lua --text \"March 5, 1999\"\n"
     "  fixformer generate models/dates.lua --lines dates.txt --engine tcc\n",
    "MODEL.lua", 0, run_generate, flags};
