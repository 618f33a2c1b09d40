/* run.c - `fixformer run`: one forward pass over .npy inputs, ids or text. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Without --output: the argmax id per position (logits) or the first hidden
 * values, for the valid positions of each sequence. */
static void print_output(const ff_config *c, const float *out, int B, int T, const int32_t *lengths) {
  int dim = ff_config_out_dim(c);
  for (int b = 0; b < B; b++) {
    int n = lengths && c->arch != FF_ARCH_ENCODER_DECODER ? lengths[b] : T;
    printf("sequence %d:", b);
    for (int t = 0; t < n; t++) {
      const float *row = out + ((size_t)b * T + t) * dim;
      if (ff_config_has_head(c)) {
        int best = 0;
        for (int i = 1; i < dim; i++)
          if (row[i] > row[best]) best = i;
        printf(" %d", best);
      } else {
        printf("\n  [%d] %9.5f %9.5f %9.5f %9.5f ...", t, (double)row[0], (double)row[dim > 1], (double)row[dim > 2 ? 2 : 0],
               (double)row[dim > 3 ? 3 : 0]);
      }
    }
    printf("%s\n", ff_config_has_head(c) ? "   (argmax of the logits per position)" : "");
  }
}

static int check_floats(const char *what, const char *path, const ff_array *a, int d, ff_error *err) {
  if (a->dtype != FF_F32)
    return ff_fail(err, FF_ESHAPE, "%s %s: integer ids, but the model has no vocab and takes float32 [B,T,%d]",
                   what, path, d);
  if (a->rank != 3 || a->shape[2] != d)
    return ff_fail(err, FF_ESHAPE, "%s %s: must be float32 [B,T,%d], got rank %d%s", what, path, d, a->rank,
                   a->rank == 3 ? " with another last dimension" : "");
  return 0;
}

/* The flags of run, checked before the model is opened. */
typedef struct {
  const char *weights, *input, *output, *tokens, *tgt_tokens, *tgt_path, *len_path, *text;
  int engine;
} run_opts;

static int run_options(const cli_flag *flags, run_opts *o, ff_error *err) {
  *o = (run_opts){cli_value(flags, "--weights"), cli_value(flags, "--input"), cli_value(flags, "--output"),
                  cli_value(flags, "--tokens"), cli_value(flags, "--target-tokens"), cli_value(flags, "--target-input"),
                  cli_value(flags, "--lengths"), cli_value(flags, "--text"), 0};
  if (!!o->input + !!o->tokens + !!o->text != 1)
    return ff_fail(err, CLI_EUSAGE, "give one of --input IN.npy, --tokens \"ids\" or --text \"...\"");
  if (o->tgt_path && o->tgt_tokens) return ff_fail(err, CLI_EUSAGE, "give one of --target-input or --target-tokens");
  if ((o->tokens || o->text) && o->len_path)
    return ff_fail(err, CLI_EUSAGE, "--tokens and --text set the lengths; --lengths is for --input");
  if (o->tgt_tokens) o->tgt_path = "--target-tokens";
  return cli_engine(flags, &o->engine, err);
}

/* ... and those that need the model's config */
static int run_check(const ff_config *c, run_opts *o, ff_error *err) {
  int encdec = c->arch == FF_ARCH_ENCODER_DECODER, rc;
  if ((rc = cli_weights_of(c, &o->weights, err))) return rc;
  if (!encdec && o->tgt_path) return ff_fail(err, FF_EINVAL, "--target-input is only for encoder-decoder models");
  if (encdec && !o->tgt_path)
    return ff_fail(err, FF_EINVAL, "--target-input is required for an encoder-decoder model");
  if ((o->tokens || o->text) && c->vocab == 0)
    return ff_fail(err, FF_EINVAL, "%s needs a model with a vocab; this one takes float --input",
                   o->tokens ? "--tokens" : "--text");
  if (o->text && !c->vocabulary[0])
    return ff_fail(err, FF_EINVAL, "--text needs a description with a vocabulary; use --tokens");
  return 0;
}

/* --output is none of the files run reads (the weights resolved by run_check) */
static int run_reads(const char *path, const ff_config *c, const run_opts *o, ff_error *err) {
  const char *const reads[] = {path, o->weights, o->input, o->tgt_tokens ? NULL : o->tgt_path, o->len_path,
                               o->text ? c->vocabulary : NULL};
  return ff_refuse_inputs(o->output, reads, 6, err);
}

/* The arrays read for one forward pass and the input pointing into them. */
typedef struct {
  ff_array src, tgt, lens;
  int32_t *src_tok, *tgt_tok, *lengths;
  ff_input in;
} run_inputs;

static void run_inputs_free(run_inputs *r) {
  ff_array_free(&r->src);
  ff_array_free(&r->tgt);
  ff_array_free(&r->lens);
  free(r->src_tok);
  free(r->tgt_tok);
  free(r->lengths);
}

/* --text: one sequence [1,n] as the tokenizer's template has it: bos first
 * where it says (llama2.c, LLaMA, BERT's [CLS]), its tail last (BERT's [SEP]) */
static int text_source(const ff_config *c, const char *text, ff_array *a, ff_error *err) {
  ff_tokenizer *t = NULL;
  int rc = ff_tokenizer_load(c->vocabulary, c->vocab, &t, err), n = 0;
  if (rc) return rc;
  int32_t *ids = malloc((size_t)c->max_seq * sizeof *ids);
  if (!ids) rc = ff_fail(err, FF_ENOMEM, "out of memory");
  if (!rc) rc = ff_tokenizer_encode_template(t, text, 1, -1, 1, ids, c->max_seq, &n, err); /* "  ": [CLS] [SEP] */
  ff_tokenizer_free(t);
  if (rc) {
    free(ids);
    return rc;
  }
  *a = (ff_array){FF_I32, 2, {1, n}, (size_t)n, ids};
  return 0;
}

/* --input, --tokens or --text: ids or float embeddings [B,T(,d)] */
static int read_source(const ff_config *c, run_opts *o, run_inputs *r, ff_error *err) {
  int rc;
  if (o->text) {
    o->input = "--text";
    rc = text_source(c, o->text, &r->src, err);
  } else if (o->tokens) {
    o->input = "--tokens";
    rc = cli_parse_token_list("--tokens", o->tokens, c->max_seq, &r->src, &r->lengths, err);
  } else {
    rc = ff_npy_read(o->input, &r->src, err);
  }
  if (rc) return rc;
  if (c->vocab > 0) rc = cli_tokens_from("input", o->input, &r->src, &r->src_tok, err);
  else rc = check_floats("input", o->input, &r->src, c->d_model, err);
  if (rc) return rc;
  r->in.batch = (int)r->src.shape[0];
  r->in.src_len = (int)r->src.shape[1];
  if (r->src.shape[0] > 1 << 24 || r->src.shape[1] > 1 << 24)
    return ff_fail(err, FF_ELENGTH, "input %s: shape too large", o->input);
  r->in.src_tokens = r->src_tok;
  r->in.src_embeds = c->vocab > 0 ? NULL : r->src.data;
  return 0;
}

/* encoder-decoder: --target-input or --target-tokens, with the source's batch */
static int read_target(const ff_config *c, const run_opts *o, run_inputs *r, ff_error *err) {
  int rc = o->tgt_tokens ? cli_parse_token_list("--target-tokens", o->tgt_tokens, c->max_seq, &r->tgt, NULL, err)
                         : ff_npy_read(o->tgt_path, &r->tgt, err);
  if (rc) return rc;
  if (c->vocab > 0) rc = cli_tokens_from("target input", o->tgt_path, &r->tgt, &r->tgt_tok, err);
  else rc = check_floats("target input", o->tgt_path, &r->tgt, c->d_model, err);
  if (rc) return rc;
  if (r->tgt.shape[0] != r->src.shape[0] || r->tgt.shape[1] > 1 << 24)
    return ff_fail(err, FF_ESHAPE, "target input %s: batch %lld, but the input has batch %lld", o->tgt_path,
                   (long long)r->tgt.shape[0], (long long)r->src.shape[0]);
  r->in.tgt_len = (int)r->tgt.shape[1];
  r->in.tgt_tokens = r->tgt_tok;
  r->in.tgt_embeds = c->vocab > 0 ? NULL : r->tgt.data;
  return 0;
}

/* --lengths LEN.npy: one int per sequence (range checked with the input) */
static int read_lengths(const char *len_path, run_inputs *r, ff_error *err) {
  int rc = ff_npy_read(len_path, &r->lens, err);
  if (rc) return rc;
  const ff_array *lens = &r->lens;
  if (lens->dtype == FF_F32 || lens->rank != 1 || lens->shape[0] != r->src.shape[0])
    return ff_fail(err, FF_ESHAPE, "lengths %s: must be int32 or int64 [%lld] (one per sequence)", len_path,
                   (long long)r->src.shape[0]);
  if (!(r->lengths = malloc((lens->numel + 1) * sizeof *r->lengths))) return ff_fail(err, FF_ENOMEM, "out of memory");
  for (size_t i = 0; i < lens->numel; i++) {
    int64_t v = lens->dtype == FF_I32 ? ((const int32_t *)lens->data)[i] : ((const int64_t *)lens->data)[i];
    r->lengths[i] = v < 0 || v > 1 << 30 ? 0 : (int32_t)v; /* 0: reported as out of range */
  }
  return 0;
}

/* The forward pass, written to --output or printed. */
static int run_forward(ff_model *m, const run_opts *o, const run_inputs *r, ff_error *err) {
  const ff_config *c = ff_model_config(m);
  int T = c->arch == FF_ARCH_ENCODER_DECODER ? r->in.tgt_len : r->in.src_len, out_dim = ff_config_out_dim(c), rc;
  ff_array result = {FF_F32, 3, {r->in.batch, T, out_dim}, 0, NULL};
  size_t bytes;
  if (ff_size_mul((size_t)r->in.batch, (size_t)T, &result.numel) ||
      ff_size_mul(result.numel, (size_t)out_dim, &result.numel) || ff_size_mul(result.numel, sizeof(float), &bytes))
    return ff_fail(err, FF_ENOMEM, "the output [%d,%d,%d] does not fit in memory", r->in.batch, T, out_dim);
  float *out = malloc(bytes);
  if (!out) return ff_fail(err, FF_ENOMEM, "out of memory for the output [%d,%d,%d]", r->in.batch, T, out_dim);
  if (!(rc = ff_model_forward(m, &r->in, out, err))) {
    result.data = out;
    if (o->output)
      rc = ff_npy_write(o->output, &result, err);
    else
      print_output(c, out, r->in.batch, T, r->lengths);
  }
  free(out);
  return rc;
}

static int run_run(const char *path, cli_flag *flags, ff_error *err) {
  run_opts o;
  run_inputs r;
  memset(&r, 0, sizeof r);
  int rc = run_options(flags, &o, err);
  if (rc) return rc;
  ff_model *m = cli_open_model(path, flags, err);
  if (!m) return err->code;
  cli_note_compute(m, flags);
  const ff_config *c = ff_model_config(m);
  if ((rc = run_check(c, &o, err)) || (rc = run_reads(path, c, &o, err)) || (rc = read_source(c, &o, &r, err)) ||
      (c->arch == FF_ARCH_ENCODER_DECODER && (rc = read_target(c, &o, &r, err))) ||
      (o.len_path && (rc = read_lengths(o.len_path, &r, err))))
    goto done;
  r.in.lengths = r.lengths;
  if ((rc = ff_config_check_input(c, &r.in, err)) || (rc = cli_load_weights(m, flags, o.weights, err)) ||
      (rc = cli_prepare(m, flags, o.engine, err)))
    goto done;
  rc = run_forward(m, &o, &r, err);
done:
  run_inputs_free(&r);
  ff_model_close(m);
  return rc;
}

static cli_flag flags[] = {{"--help", "-h", NULL, 0},      {"--weights", NULL, NULL, 1},
                           {"--input", NULL, NULL, 1},     {"--target-input", NULL, NULL, 1},
                           {"--lengths", NULL, NULL, 1},   {"--output", "-o", NULL, 1},
                           {"--engine", NULL, NULL, 1},    {"--tokens", NULL, NULL, 1},
                           {"--target-tokens", NULL, NULL, 1}, {"--threads", NULL, NULL, 1},
                           {"--text", NULL, NULL, 1},      {"--dtype", NULL, NULL, 1}, {"--compute", NULL, NULL, 1},
                           {"--allow-nonfinite", NULL, NULL, 0}, {"--quiet", "-q", NULL, 0},
                           {NULL, NULL, NULL, 0}};

const cli_command cli_run = {
    "run", "one forward pass over .npy, ids or text",
     "usage: fixformer run MODEL.lua [--weights W.safetensors] --input IN.npy [--output OUT.npy]\n"
     "                     [--lengths LEN.npy] [--target-input TGT.npy] [--engine cc|tcc|runtime]\n"
     "                     [--dtype f32|bf16|int8] [--compute f32|int8|bf16]\n"
     "       fixformer run MODEL.lua [--weights W.safetensors] --tokens \"5 17 42, 7 7\" [...]\n"
     "       fixformer run MODEL.lua [--weights W.safetensors] --text \"...\" [...]\n"
     "One forward pass.\n"
     "  --weights W             the model's tensors (default: the description's weights)\n"
     "  --input IN.npy          int32/int64 token ids [B,T], or float32 [B,T,d_model] for a\n"
     "                          model without vocab (encoder-decoder: the source)\n"
     "  --tokens \"ids, ids\"     instead of --input: sequences of ids separated by commas,\n"
     "                          right-padded into a batch, lengths set from them\n"
     "  --text \"...\"            instead of --input: one sequence, tokenized with the description's\n"
     "                          vocabulary as its template says (BERT: [CLS] ... [SEP])\n"
     "  --target-input TGT.npy  encoder-decoder: the decoder input [B,T'] (causally masked)\n"
     "  --target-tokens \"ids\"   the same as a list of ids\n"
     "  --lengths LEN.npy       int32/int64 [B]: true lengths 1..T, the rest is padding\n"
     "  -o, --output OUT.npy    float32 [B,T,vocab] logits, or [B,T,d_model] hidden states;\n"
     "                          without it, the argmax ids (or first hidden values) are printed\n"
     "  --engine E              cc ($CC -O3, a cached shared object), tcc (generated C compiled\n"
     "                          in memory by libtcc) or runtime (the reference); default: cc\n"
     "                          where a C compiler is found, else tcc (FIXFORMER_ENGINE sets it)\n"
     "  --threads N             tcc, cc: split matrix products and attention over N threads\n"
     "  --dtype T               the weight type: f32, bf16 or int8 (per 32 inputs); default: the\n"
     "                          description's dtype (f32 unless it says)\n"
     "  --compute C             what the blocks' linear layers compute in: f32, int8 or bf16\n"
     "                          (opt-in: int8 inputs quantized per row, weights per channel; bf16\n"
     "                          inputs and weights in bfloat16; docs/performance.md);\n"
     "                          default: the description's compute (f32 unless it says)\n"
     "  --allow-nonfinite       run with NaN or infinite weights (refused by default);\n"
     "                          they propagate as in PyTorch\n"
     "  -q, --quiet             no progress lines on stderr\n"
     "Examples:\n"
     "  fixformer run models/tiny.lua --weights tiny.safetensors --tokens \"5 17 42 8, 7 7\"\n"
     "  fixformer run models/tiny.lua --weights tiny.safetensors --input in.npy -o out.npy --engine runtime\n",
    "MODEL.lua", 0, run_run, flags};
