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
  ff_sampling sampling;  /* .sequence: the next input's index */
  ff_beam_opts beam;     /* .beams 1: no beam search */
  int show_score;        /* --score */
} generation;

/* Greedy-decodes one input (source ids for encoder-decoder, the prompt for
 * decoder-only) and prints the result on one line. */
static int generate_one(generation *g, const int32_t *ids, int n, ff_error *err) {
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
  double score = 0;
  if (g->beam.beams > 1) rc = ff_model_beam(g->m, &q, &g->beam, out, &count, &score, err);
  else rc = ff_model_sample(g->m, &q, &g->sampling, out, &count, logits, err);
  g->sampling.sequence++;
  if (!rc && g->logits) {
    ff_array a = {FF_F32, 3, {1, q.prompt_len + count - 1, c->vocab}, (size_t)(q.prompt_len + count - 1) * c->vocab,
                  logits};
    rc = ff_npy_write(g->logits, &a, err);
  }
  if (!rc) {
    if (g->show_score) printf("%.9g\t", score);
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

/* ids of one text (--text, a line of --lines): a decoder-only prompt starts
 * with the template's ids before the text, bos first (llama2.c, LLaMA), an
 * encoder-decoder's source has the whole template (Marian's and T5's </s>
 * after it, BART's <s> before) */
static int generate_text(generation *g, const char *text, int32_t *ids, ff_error *err) {
  const ff_config *c = ff_model_config(g->m);
  int encdec = c->arch == FF_ARCH_ENCODER_DECODER, n;
  int rc = ff_tokenizer_encode_template(g->vocab, text, encdec || g->bos >= 0, encdec ? -1 : g->bos, encdec, ids,
                                        c->max_seq, &n, err); /* a template's ids alone will do */
  return rc ? rc : generate_one(g, ids, n, err);
}

/* A float flag within its range (lo < v or lo <= v, v < hi or v <= hi), or
 * CLI_EUSAGE naming the range. */
static int float_flag(const cli_flag *flags, const char *name, float *v, double lo, int lo_in, double hi, int hi_in,
                      const char *range, ff_error *err) {
  const char *s = cli_value(flags, name);
  char *end;
  if (!s) return 0;
  errno = 0;
  double d = strtod(s, &end);
  if (end == s || *end || errno || d != d || (lo_in ? d < lo : d <= lo) || (hi_in ? d > hi : d >= hi))
    return ff_fail(err, CLI_EUSAGE, "%s: '%s' is not %s", name, s, range);
  *v = (float)d;
  return 0;
}

/* --temperature, --top-k, --top-p, --min-p, --repeat-penalty, --seed */
static int sampling_options(const cli_flag *flags, ff_sampling *s, ff_error *err) {
  const char *seed = cli_value(flags, "--seed");
  int rc;
  *s = ff_sampling_default();
  if ((rc = float_flag(flags, "--temperature", &s->temperature, 0, 1, 1e30, 1, "a number >= 0 (0: greedy)", err)) ||
      (rc = cli_int(flags, "--top-k", 0, &s->top_k, err)) ||
      (rc = float_flag(flags, "--top-p", &s->top_p, 0, 0, 1, 1, "a number in (0, 1]", err)) ||
      (rc = float_flag(flags, "--min-p", &s->min_p, 0, 1, 1, 0, "a number in [0, 1)", err)) ||
      (rc = float_flag(flags, "--repeat-penalty", &s->repeat_penalty, 0, 0, 1e30, 1, "a number > 0 (1: off)", err)))
    return rc;
  if (seed) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(seed, &end, 10);
    if (errno || *end || !*seed || seed[0] == '-' || seed[0] == '+' || seed[0] == ' ')
      return ff_fail(err, CLI_EUSAGE, "--seed: '%s' is not a non-negative integer", seed);
    s->seed = v;
  }
  return 0;
}

/* --beam N, --length-penalty X, --early-stopping true|false|never, --score:
 * beam search refuses sampling (HF's num_beams without do_sample) */
static int beam_options(const cli_flag *flags, generation *g, ff_error *err) {
  static const char *const sampling[] = {"--top-k", "--top-p", "--min-p", "--repeat-penalty", "--seed"};
  const char *early = cli_value(flags, "--early-stopping");
  int rc = cli_int(flags, "--beam", 1, &g->beam.beams, err);
  g->beam.length_penalty = 1.0f;
  if (rc || (rc = float_flag(flags, "--length-penalty", &g->beam.length_penalty, -1e30, 1, 1e30, 1, "a finite number",
                             err)))
    return rc;
  if (cli_value(flags, "--beam") && g->beam.beams < 1)
    return ff_fail(err, CLI_EUSAGE, "--beam: the width must be at least 1 (1: greedy)");
  if (!cli_value(flags, "--beam") && (early || cli_value(flags, "--length-penalty") || g->show_score))
    return ff_fail(err, CLI_EUSAGE, "--length-penalty, --early-stopping and --score go with --beam N");
  if (g->show_score && g->beam.beams < 2) return ff_fail(err, CLI_EUSAGE, "--score needs --beam 2 or more");
  if (early && strcmp(early, "false") && strcmp(early, "true") && strcmp(early, "never"))
    return ff_fail(err, CLI_EUSAGE, "--early-stopping: '%s' is not true, false or never", early);
  g->beam.early_stopping = !early || !strcmp(early, "false") ? 0 : !strcmp(early, "true") ? 1 : 2;
  if (!cli_value(flags, "--beam")) return 0;
  if (g->sampling.temperature != 0)
    return ff_fail(err, CLI_EUSAGE, "--beam searches, it does not sample: --temperature must be 0 with it");
  for (size_t i = 0; i < sizeof sampling / sizeof *sampling; i++)
    if (cli_value(flags, sampling[i]))
      return ff_fail(err, CLI_EUSAGE, "--beam searches, it does not sample: drop %s", sampling[i]);
  if (g->logits) return ff_fail(err, CLI_EUSAGE, "--logits goes with greedy or sampled decoding, not --beam");
  return 0;
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
  if ((rc = sampling_options(flags, &g->sampling, err)) || (rc = beam_options(flags, g, err))) return rc;
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
  /* ff_model_beam's bound (runtime/ff_beam.h): HF's 2 x beams candidates come from one beam at the first
   * step, and beams x vocab is an int32 */
  int most = c->vocab / 2 < INT32_MAX / c->vocab ? c->vocab / 2 : INT32_MAX / c->vocab;
  if (g->beam.beams > most) return ff_fail(err, CLI_EUSAGE, "--beam %d: at most %d beams (vocab / 2)", g->beam.beams, most);
  return 0;
}

/* --tokens: sequences separated by commas, each decoded on its own */
static int generate_tokens(generation *g, const char *tokens, ff_error *err) {
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
static int generate_lines(generation *g, const char *lines, int32_t *ids, ff_error *err) {
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
      printf("\n"), g->sampling.sequence++;
    else if ((rc = generate_text(g, p, ids, err)))
      ff_fail(err, rc, "%s:%d: %s", lines, line, err->msg);
    *stop = saved;
    p = nl ? nl + 1 : end;
  }
  free(file);
  return rc;
}

static int run_generate(const char *path, cli_flag *flags, ff_error *err) {
  generation g = {NULL, NULL, -1, -1, 0, cli_value(flags, "--ids") != NULL, cli_value(flags, "--logits"),
                  ff_sampling_default(), {1, 1.0f, 0}, cli_value(flags, "--score") != NULL};
  generate_opts o;
  int rc = generate_options(flags, &o, &g, err);
  if (rc) return rc;
  ff_model *m = cli_open_model(path, flags, err);
  if (!m) return err->code;
  cli_note_compute(m, flags);
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
                           {"--dtype", NULL, NULL, 1}, {"--compute", NULL, NULL, 1},   {"--quiet", "-q", NULL, 0},
                           {"--allow-nonfinite", NULL, NULL, 0}, {"--temperature", NULL, NULL, 1},
                           {"--top-k", NULL, NULL, 1},   {"--top-p", NULL, NULL, 1},
                           {"--min-p", NULL, NULL, 1},   {"--repeat-penalty", NULL, NULL, 1},
                           {"--seed", NULL, NULL, 1},    {"--beam", NULL, NULL, 1},
                           {"--length-penalty", NULL, NULL, 1}, {"--early-stopping", NULL, NULL, 1},
                           {"--score", NULL, NULL, 0},   {NULL, NULL, NULL, 0}};

const cli_command cli_generate = {
    "generate", "greedy, sampled or beam-search decoding with a key/value cache (text or ids)",
     "usage: fixformer generate MODEL.lua (--text \"...\" | --lines FILE | --tokens \"ids\")\n"
     "                          [--weights W.safetensors] [--max-new N] [--engine cc|tcc|runtime]\n"
     "                          [--dtype f32|bf16|int8] [--compute f32|int8|bf16]\n"
     "                          [--temperature T [--top-k K] [--top-p P]\n"
     "                          [--min-p P] [--repeat-penalty R] [--seed N]]\n"
     "                          [--beam N [--length-penalty X] [--early-stopping true|false|never] [--score]]\n"
     "Greedy, sampled or beam-search decoding with a key/value cache: encoder-decoder\n"
     "models translate the input (the decoder starts from BOS); decoder-only models\n"
     "continue it.  Prints one line per input: the generated text, or ids without a\n"
     "vocabulary.\n"
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
     "  --compute C       what the blocks' linear layers compute in: f32, int8 or bf16\n"
     "                    (opt-in: int8 inputs quantized per row, weights per channel; bf16\n"
     "                    inputs and weights in bfloat16; docs/performance.md);\n"
     "                    default: the description's compute (f32 unless it says)\n"
     "  --logits OUT.npy  float32 [1, P, vocab]: the logits of every position fed to\n"
     "                    the decoder (one input only)\n"
     "  --temperature T   0 (default): greedy; > 0: sample from softmax(logits / T),\n"
     "                    after the filters below, in Hugging Face's order\n"
     "  --top-k K         keep the K largest logits (0: off)\n"
     "  --top-p P         keep the smallest set of largest logits holding mass P, in (0, 1]\n"
     "  --min-p P         keep ids with probability >= P x the largest's, in [0, 1)\n"
     "  --repeat-penalty R  seen ids' logits x > 0 become x / R, others x * R (1: off)\n"
     "  --seed N          the draws' seed (default 0): the same ids on every engine\n"
     "  --beam N          beam search with N beams, as Hugging Face generate(num_beams=N)\n"
     "                    (1: greedy; at most vocab / 2; no sampling flags with it)\n"
     "  --length-penalty X  a finished beam scores sum(log p) / length^X (default 1)\n"
     "  --early-stopping E  false (default): stop when no open beam can win by HF's\n"
     "                    estimate; true: at N finished beams; never: when none can win\n"
     "  --score           print the beam's score, then a tab, before each output\n"
     "  --allow-nonfinite run with NaN or infinite weights (refused by default)\n"
     "  -q, --quiet       no progress lines on stderr\n"
     "Examples:\n"
     "  fixformer generate models/dates.lua --text \"March 5, 1999\"\n"
     "  fixformer generate models/dates.lua --lines dates.txt --engine tcc\n"
     "  fixformer generate models/dates.lua --text \"March 5, 1999\" --temperature 0.8 --top-p 0.9 --seed 7\n"
     "  fixformer generate models/dates.lua --text \"March 5, 1999\" --beam 4 --length-penalty 0.6\n",
    "MODEL.lua", 0, run_generate, flags};
