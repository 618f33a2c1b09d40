/* main.c - the `fixformer` command line.  Each subcommand parses its flags,
 * calls the public API (fixformer.h) and returns a status; only main turns a
 * status into an exit code and prints the one-line error. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ff_runtime.h" /* the CLI also lists, counts and initialises weights with the runtime (linked privately) */
#include "fixformer.h"
#include "import.h"

/* ---- flags ------------------------------------------------------------- */

typedef struct {
  const char *name;   /* "--weights" */
  const char *alias;  /* "-o" or NULL */
  const char *value;  /* set when given; "1" for switches */
  int takes_value;
} flag;

typedef struct {
  const char *name;
  const char *usage;  /* printed by --help */
  int (*run)(const char *model, flag *flags, ff_error *err);
  flag *flags;
} command;

static const char *value_of(const flag *flags, const char *name) {
  for (const flag *f = flags; f->name; f++)
    if (!strcmp(f->name, name)) return f->value;
  return NULL;
}

static int cmd_cache(const char *unused, flag *flags, ff_error *err);
static int cmd_info(const char *path, flag *flags, ff_error *err);
static int cmd_import(const char *src, flag *flags, ff_error *err);

/* Parses argv into flags and the one positional MODEL argument. */
static int parse_args(const command *cmd, int argc, char **argv, const char **model, ff_error *err) {
  *model = NULL;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (a[0] == '-' && a[1]) {
      flag *f = cmd->flags;
      for (; f->name; f++)
        if (!strcmp(a, f->name) || (f->alias && !strcmp(a, f->alias))) break;
      if (!f->name)
        return ff_fail(err, FF_EINVAL, "unknown option '%s' (see fixformer %s --help)", a,
                       cmd->name);
      if (f->takes_value) {
        if (i + 1 >= argc) return ff_fail(err, FF_EINVAL, "%s needs a value", f->name);
        f->value = argv[++i];
      } else {
        f->value = "1";
      }
    } else if (!*model) {
      *model = a;
    } else {
      return ff_fail(err, FF_EINVAL, "unexpected argument '%s'", a);
    }
  }
  if (cmd->run == cmd_cache) { /* the one command without a model */
    if (*model) return ff_fail(err, FF_EINVAL, "unexpected argument '%s'", *model);
    return 0;
  }
  if (!*model && !(cmd->run == cmd_info && value_of(cmd->flags, "--isas"))) /* info --isas: the table alone */
    return ff_fail(err, FF_EINVAL, "missing %s (see fixformer %s --help)",
                   cmd->run == cmd_import ? "SRC (a model folder or a llama2.c .bin)" : "MODEL.lua", cmd->name);
  return 0;
}

static int require_flag(const flag *flags, const char *name, const char **out, ff_error *err) {
  *out = value_of(flags, name);
  if (!*out) return ff_fail(err, FF_EINVAL, "%s is required", name);
  return 0;
}

static int int_flag(const flag *flags, const char *name, int def, int *out, ff_error *err);
static int threads_flag(const flag *flags, ff_model *m, int engine, ff_error *err);

/* ---- info ---------------------------------------------------------------- */

static const char *const arch_names[] = {"encoder", "decoder-only", "encoder-decoder"};
static const char *const place_names[] = {"post", "pre"};
static const char *const kind_names[] = {"layernorm", "rmsnorm"};
static const char *const act_names[] = {"relu", "gelu", "gelu_tanh", "swiglu"};
static const char *const pos_names[] = {"none", "sinusoidal", "learned", "rope"};

static int print_weight(void *ctx, const ff_weight_spec *s) {
  (void)ctx;
  if (s->rank == 2)
    printf("--   %-56s [%d, %d]\n", s->name, s->shape[0], s->shape[1]);
  else
    printf("--   %-56s [%d]\n", s->name, s->shape[0]);
  return 0;
}

/* ---- info --weights: a checkpoint against the description ---------------- */

typedef struct {
  const char *path;            /* the weights file */
  const ff_tensor_file *file;
  unsigned char *seen;         /* one flag per file tensor */
  int problems;
  ff_error *err;               /* the first problem */
} checkpoint_check;

static const char *const dtype_names[] = {"F32", "F16", "BF16", "I32", "I64"};

static void shape_text(char *buf, size_t n, int rank, const int64_t *shape) {
  int at = snprintf(buf, n, "[");
  for (int i = 0; i < rank && at > 0 && (size_t)at < n; i++)
    at += snprintf(buf + at, n - (size_t)at, i ? ",%lld" : "%lld", (long long)shape[i]);
  if (at > 0 && (size_t)at < n) snprintf(buf + at, n - (size_t)at, "]");
}

/* One row of the table; the first problem is also kept in err. */
static void check_row(checkpoint_check *k, const char *name, const char *shape, const char *dtype,
                      const char *problem) {
  printf("  %-52s %-14s %-5s %s\n", name, shape, dtype, problem ? problem : "ok");
  if (problem && !k->problems++) ff_fail(k->err, FF_EINVAL, "%s: tensor '%s': %s", k->path, name, problem);
}

/* A described tensor: present, same shape, finite (any accepted dtype). */
static int check_described(void *ctx, const ff_weight_spec *s) {
  checkpoint_check *k = ctx;
  int64_t want[2] = {s->shape[0], s->shape[1]};
  char wants[64], haves[160], problem[256];
  shape_text(wants, sizeof wants, s->rank, want);
  const ff_tensor *t = ff_tensor_file_find(k->file, s->name);
  if (!t) {
    check_row(k, s->name, wants, "-", "missing");
    return 0;
  }
  k->seen[t - k->file->tensors] = 1;
  int same = t->rank == s->rank;
  for (int i = 0; same && i < s->rank; i++) same = t->shape[i] == want[i];
  size_t bad = 0, first = 0;
  for (size_t i = 0; same && i < t->numel; i++)
    if (!isfinite(t->data[i]) && !bad++) first = i;
  shape_text(haves, sizeof haves, t->rank, t->shape);
  if (!same)
    snprintf(problem, sizeof problem, "shape %s in file, model needs %s", haves, wants);
  else if (bad)
    snprintf(problem, sizeof problem, "%zu non-finite value%s (the first, %g, at element %zu)", bad,
             bad > 1 ? "s" : "", (double)t->data[first], first);
  check_row(k, s->name, same ? wants : haves, dtype_names[t->file_dtype], same && !bad ? NULL : problem);
  return 0;
}

/* Every tensor the description names, then the file's others. */
static int check_checkpoint(const ff_config *c, const char *weights, ff_error *err) {
  ff_tensor_file file = {0};
  int rc = ff_rt_read_weights(c, weights, &file, err); /* separate q/k/v, gate/up fused, as the model sees them */
  if (rc) return rc;
  checkpoint_check k = {weights, &file, calloc((size_t)file.count + 1, 1), 0, err};
  if (!k.seen) {
    ff_tensor_file_free(&file);
    return ff_fail(err, FF_ENOMEM, "out of memory");
  }
  printf("-- %s against %s: %d tensors in the file\n  %-52s %-14s %-5s %s\n", weights, c->name, file.count,
         "tensor", "shape", "dtype", "check");
  ff_rt_visit_weights(c, NULL, check_described, &k);
  for (int i = 0; i < file.count; i++)
    if (!k.seen[i]) {
      char shape[160];
      shape_text(shape, sizeof shape, file.tensors[i].rank, file.tensors[i].shape);
      check_row(&k, file.tensors[i].name, shape, dtype_names[file.tensors[i].file_dtype],
                "unexpected (not used by this description)");
    }
  size_t tensors, params;
  ff_rt_count_weights(c, &tensors, &params);
  if (k.problems)
    printf("-- %d problem%s; the first: %s\n", k.problems, k.problems > 1 ? "s" : "", err->msg);
  else
    printf("-- ok: %zu tensors, %zu parameters, as the description needs\n", tensors, params);
  free(k.seen);
  ff_tensor_file_free(&file);
  return k.problems ? FF_EINVAL : 0;
}

/* info: the embedding and output head keys of the resolved config */
static void print_embed_head_keys(const ff_model *m) {
  const ff_config *c = ff_model_config(m);
  if (c->vocab > 0) {
    printf("  lm_head = %s\n", c->no_lm_head ? "false,  -- the output is the hidden states" : "true,");
    if (!c->no_lm_head) printf("  head_bias = %s,\n", c->head_bias ? "true" : "false");
    printf("  token_types = %d,%s\n", c->token_types, c->token_types ? "  -- every position has type 0" : "");
  }
  printf("  embed_norm = %s,\n", c->embed_norm ? "true" : "false");
  printf("  dtype = \"%s\",\n", ff_model_dtype(m));
}

/* info --isas: the ISA table (kernels/isas.h), one row per ISA */
static int print_isas(void) {
  printf("%-8s %3s %3s  %-4s  %s\n", "isa", "MR", "NR", "runs", "C flags");
  for (int i = 0; ff_isa_at(i); i++) {
    const ff_isa *isa = ff_isa_at(i);
    printf("%-8s %3d %3d  %s%s%s\n", isa->name, isa->mr, isa->nr, isa->runs_here ? "yes" : "no",
           *isa->flags ? (isa->runs_here ? "   " : "    ") : "", isa->flags);
  }
  return 0;
}

/* ff_model_open, then --dtype (the description's `dtype` otherwise) */
static ff_model *open_model(const char *path, flag *flags, ff_error *err) {
  ff_model *m = ff_model_open(path, err);
  const char *dtype = value_of(flags, "--dtype");
  if (m && dtype && ff_model_set_dtype(m, dtype, err)) {
    ff_model_close(m);
    return NULL;
  }
  return m;
}

static int cmd_info(const char *path, flag *flags, ff_error *err) {
  if (value_of(flags, "--isas")) {
    if (path || value_of(flags, "--weights")) return ff_fail(err, FF_EINVAL, "--isas takes no model or --weights");
    return print_isas();
  }
  ff_model *m = open_model(path, flags, err);
  if (!m) return err->code;
  const ff_config *c = ff_model_config(m);
  const char *weights = value_of(flags, "--weights");
  if (weights) { /* the check only: the description itself is what plain `info` shows */
    int rc = check_checkpoint(c, weights, err);
    ff_model_close(m);
    return rc;
  }
  printf("-- %s, resolved (defaults filled in)\nreturn {\n", path);
  printf("  name = \"%s\",\n  arch = \"%s\",\n", c->name, arch_names[c->arch]);
  printf("  d_model = %d,\n  heads = %d,  -- d_k = %d\n", c->d_model, c->heads, c->d_model / c->heads);
  printf("  kv_heads = %d,%s\n  d_ff = %d,\n", ff_config_kv_heads(c),
         ff_config_kv_heads(c) < c->heads ? "  -- grouped-query: K/V caches of kv_heads * d_k per position" : "", c->d_ff);
  if (c->arch == FF_ARCH_ENCODER_DECODER)
    printf("  encoder_layers = %d,\n  decoder_layers = %d,\n", c->encoder_layers, c->decoder_layers);
  else
    printf("  layers = %d,\n", c->encoder_layers + c->decoder_layers);
  char num[32]; /* numbers that read back as the config's float32 */
  printf("  norm = \"%s\",\n  norm_kind = \"%s\",\n  final_norm = %s,\n  eps = %s,\n", place_names[c->norm],
         kind_names[c->norm_kind], c->final_norm ? "true" : "false", ff_lua_number(c->eps, 1, num));
  printf("  activation = \"%s\",\n  bias = %s,\n", act_names[c->activation], c->bias ? "true" : "false");
  if (c->vocab > 0) printf("  vocab = %d,\n", c->vocab);
  else printf("  vocab = nil,  -- float inputs [B,T,%d]\n", c->d_model);
  printf("  positional = \"%s\",\n", pos_names[c->positional]);
  if (c->positional == FF_POS_ROPE)
    printf("  rope_theta = %s,\n  rope_pairing = \"%s\",\n", ff_lua_number(c->rope_theta, 1, num),
           c->rope_pairing == FF_ROPE_INTERLEAVED ? "interleaved" : "rotate_half");
  printf("  scale_embeddings = %s,\n  tie_embeddings = %s,\n  max_seq = %d,\n  prefix = \"%s\",\n",
         c->scale_embeddings ? "true" : "false", c->tie_embeddings ? "true" : "false", c->max_seq, c->prefix);
  print_embed_head_keys(m);
  if (c->weights[0]) printf("  weights = \"%s\",\n", c->weights);
  if (c->vocabulary[0]) printf("  vocabulary = \"%s\",\n", c->vocabulary);
  printf("}\n");
  size_t tensors, params;
  ff_rt_count_weights(c, &tensors, &params);
  printf("-- weights: %zu tensors, %zu parameters (%.2f MB float32)\n", tensors, params, params * 4.0 / 1e6);
  ff_rt_visit_weights(c, NULL, print_weight, NULL);
  int T = c->max_seq;
  printf("-- FLOPs per token: %.0f at T = 1, %.0f averaged over T = max_seq = %d\n",
         ff_rt_forward_flops(c, 1, 1), ff_rt_forward_flops(c, T, T) / T, T);
  printf("-- output per position: %d %s\n", ff_config_out_dim(c), ff_config_has_head(c) ? "logits" : "hidden states");
  ff_model_close(m);
  return 0;
}

/* ---- init ---------------------------------------------------------------- */

static int cmd_init(const char *path, flag *flags, ff_error *err) {
  const char *out, *seed_s = value_of(flags, "--seed");
  int rc = require_flag(flags, "-o", &out, err);
  if (rc) return rc;
  unsigned long long seed = 0;
  if (seed_s) {
    char *end;
    errno = 0;
    seed = strtoull(seed_s, &end, 10);
    if (errno || *end || !*seed_s || seed_s[0] == '-')
      return ff_fail(err, FF_EINVAL, "--seed: '%s' is not a non-negative integer", seed_s);
  }
  ff_model *m = ff_model_open(path, err);
  if (!m) return err->code;
  rc = ff_rt_init_weights(ff_model_config(m), seed, out, err);
  ff_model_close(m);
  return rc;
}

/* ---- run ----------------------------------------------------------------- */

/* ff_model_prepare; on a terminal, a cc compile says what it is doing first
 * (seconds on a big model, where nothing else would show). */
static int prepare_engine(ff_model *m, int engine, ff_error *err) {
  if (engine == FF_ENGINE_CC && isatty(STDERR_FILENO)) {
    fprintf(stderr, "compiling %s with cc (first time; cached after) ...\n", ff_model_config(m)->name);
    fflush(stderr);
  }
  return ff_model_prepare(m, (enum ff_engine)engine, err);
}

/* --weights, or else the file the description names (NULL if neither) */
static const char *default_weights(const ff_config *c, const char *given) {
  return given ? given : c->weights[0] ? c->weights : NULL;
}

/* ... and an error when there is none */
static int weights_of(const ff_config *c, const char **weights, ff_error *err) {
  if (!(*weights = default_weights(c, *weights)))
    return ff_fail(err, FF_EINVAL, "--weights is required (the description names no weights)");
  return 0;
}

/* Non-finite weights are refused unless --allow-nonfinite: a NaN in a
 * checkpoint is almost always a broken export, and it would only show as
 * NaN outputs later. */
static int check_finite(ff_model *m, const char *weights, ff_error *err) {
  int rc = ff_model_check_finite(m, err);
  if (rc) {
    ff_fail(err, rc, "%s: %s", weights, err->msg);
  }
  return rc;
}

/* Token ids from an int32 or int64 array of rank 2 -> int32 [B, T]. */
static int tokens_from(const char *what, const char *path, const ff_array *a, int32_t **out, ff_error *err) {
  if (a->dtype == FF_F32)
    return ff_fail(err, FF_ESHAPE, "%s %s: float32, but the model takes int token ids [B,T]", what, path);
  if (a->rank != 2)
    return ff_fail(err, FF_ESHAPE, "%s %s: rank %d, token ids must be [B,T]", what, path, a->rank);
  *out = malloc((a->numel ? a->numel : 1) * sizeof **out);
  if (!*out) return ff_fail(err, FF_ENOMEM, "out of memory");
  for (size_t i = 0; i < a->numel; i++) {
    int64_t v = a->dtype == FF_I32 ? ((const int32_t *)a->data)[i] : ((const int64_t *)a->data)[i];
    if (v < -2147483647 || v > 2147483647) v = -1; /* reported as out of vocabulary */
    (*out)[i] = (int32_t)v;
  }
  return 0;
}

/* "5 17 42, 7 7" -> a right-padded batch [B, T] of ids (padding 0) and the
 * lengths [B]: sequences separated by commas, ids by spaces. */
static int parse_token_list(const char *flagname, const char *text, ff_array *a, int32_t **lengths,
                            ff_error *err) {
  int B = 1, T = 0, n = 0;
  for (const char *p = text; *p; p++) B += *p == ',';
  int32_t *len = calloc((size_t)B, sizeof *len);
  int32_t *ids = malloc((strlen(text) / 2 + 1) * sizeof *ids); /* at most one id per 2 chars */
  if (!len || !ids) {
    free(len);
    free(ids);
    return ff_fail(err, FF_ENOMEM, "out of memory");
  }
  const char *p = text;
  for (int b = 0; b < B; b++) {
    for (;;) {
      while (*p == ' ' || *p == '\t') p++;
      if (!*p || *p == ',') break;
      char *end;
      errno = 0;
      long v = strtol(p, &end, 10);
      if (end == p || errno || v < -2147483647 || v > 2147483647 || (*end && *end != ' ' && *end != ',' && *end != '\t')) {
        free(len);
        free(ids);
        return ff_fail(err, FF_EINVAL, "%s: '%s' is not a list of integer token ids", flagname, text);
      }
      ids[n++] = (int32_t)v;
      len[b]++;
      p = end;
    }
    if (len[b] == 0) {
      free(len);
      free(ids);
      return ff_fail(err, FF_ELENGTH, "%s: sequence %d is empty", flagname, b);
    }
    if (len[b] > T) T = len[b];
    if (*p == ',') p++;
  }
  a->dtype = FF_I32;
  a->rank = 2;
  a->shape[0] = B;
  a->shape[1] = T;
  a->numel = (size_t)B * T;
  a->data = calloc(a->numel, sizeof(int32_t));
  if (!a->data) {
    free(len);
    free(ids);
    return ff_fail(err, FF_ENOMEM, "out of memory");
  }
  for (int b = 0, at = 0; b < B; at += len[b], b++)
    memcpy((int32_t *)a->data + (size_t)b * T, ids + at, (size_t)len[b] * sizeof *ids);
  free(ids);
  if (lengths) *lengths = len;
  else free(len);
  return 0;
}

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

static int run_options(const flag *flags, run_opts *o, ff_error *err) {
  const char *engine_s = value_of(flags, "--engine");
  *o = (run_opts){value_of(flags, "--weights"), value_of(flags, "--input"), value_of(flags, "--output"),
                  value_of(flags, "--tokens"), value_of(flags, "--target-tokens"), value_of(flags, "--target-input"),
                  value_of(flags, "--lengths"), value_of(flags, "--text"), 0};
  if (!!o->input + !!o->tokens + !!o->text != 1)
    return ff_fail(err, FF_EINVAL, "give one of --input IN.npy, --tokens \"ids\" or --text \"...\"");
  if (o->tgt_path && o->tgt_tokens) return ff_fail(err, FF_EINVAL, "give one of --target-input or --target-tokens");
  if ((o->tokens || o->text) && o->len_path)
    return ff_fail(err, FF_EINVAL, "--tokens and --text set the lengths; --lengths is for --input");
  if (o->tgt_tokens) o->tgt_path = "--target-tokens";
  o->engine = ff_engine_parse(engine_s ? engine_s : "runtime");
  if (o->engine < 0)
    return ff_fail(err, FF_EINVAL, "--engine: '%s' is not one of runtime, tcc, cc", engine_s);
  return 0;
}

/* ... and those that need the model's config */
static int run_check(const ff_config *c, run_opts *o, ff_error *err) {
  int encdec = c->arch == FF_ARCH_ENCODER_DECODER, rc;
  if ((rc = weights_of(c, &o->weights, err))) return rc;
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

/* The arrays read for one forward pass and the input pointing into them. */
typedef struct {
  ff_array src, tgt, lens;
  int32_t *src_tok, *tgt_tok, *lengths;
  ff_rt_input in;
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
  const ff_tokenizer_info *info = ff_tokenizer_get_info(t);
  int bos = info->add_bos && info->bos >= 0, tail = info->tail >= 0;
  int32_t *ids = malloc((size_t)c->max_seq * sizeof *ids);
  if (!ids) rc = ff_fail(err, FF_ENOMEM, "out of memory");
  else if (c->max_seq <= bos + tail) rc = ff_fail(err, FF_ELENGTH, "--text: max_seq %d has no room", c->max_seq);
  if (!rc) rc = ff_tokenizer_encode(t, text, ids + bos, c->max_seq - bos - tail, &n, err);
  if (!rc && n == 0) rc = ff_fail(err, FF_ELENGTH, "--text: the text is empty");
  if (!rc && bos) ids[0] = info->bos;
  if (!rc && tail) ids[bos + n] = info->tail;
  ff_tokenizer_free(t);
  if (rc) {
    free(ids);
    return rc;
  }
  n += bos + tail;
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
    rc = parse_token_list("--tokens", o->tokens, &r->src, &r->lengths, err);
  } else {
    rc = ff_npy_read(o->input, &r->src, err);
  }
  if (rc) return rc;
  if (c->vocab > 0) rc = tokens_from("input", o->input, &r->src, &r->src_tok, err);
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
  int rc = o->tgt_tokens ? parse_token_list("--target-tokens", o->tgt_tokens, &r->tgt, NULL, err)
                         : ff_npy_read(o->tgt_path, &r->tgt, err);
  if (rc) return rc;
  if (c->vocab > 0) rc = tokens_from("target input", o->tgt_path, &r->tgt, &r->tgt_tok, err);
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
  ff_array result = {FF_F32, 3, {r->in.batch, T, out_dim}, (size_t)r->in.batch * T * out_dim, NULL};
  float *out = malloc(result.numel * sizeof *out);
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

static int cmd_run(const char *path, flag *flags, ff_error *err) {
  run_opts o;
  run_inputs r;
  memset(&r, 0, sizeof r);
  int rc = run_options(flags, &o, err);
  if (rc) return rc;
  ff_model *m = open_model(path, flags, err);
  if (!m) return err->code;
  const ff_config *c = ff_model_config(m);
  if ((rc = run_check(c, &o, err)) || (rc = read_source(c, &o, &r, err)) ||
      (c->arch == FF_ARCH_ENCODER_DECODER && (rc = read_target(c, &o, &r, err))) ||
      (o.len_path && (rc = read_lengths(o.len_path, &r, err))))
    goto done;
  r.in.lengths = r.lengths;
  if ((rc = ff_rt_check_input(c, &r.in, err)) || (rc = ff_model_load_weights(m, o.weights, err)) ||
      (!value_of(flags, "--allow-nonfinite") && (rc = check_finite(m, o.weights, err))) ||
      (rc = threads_flag(flags, m, o.engine, err)) || (rc = prepare_engine(m, o.engine, err)))
    goto done;
  rc = run_forward(m, &o, &r, err);
done:
  run_inputs_free(&r);
  ff_model_close(m);
  return rc;
}

/* ---- generate ------------------------------------------------------------ */

/* A non-negative integer flag, or def when absent. */
static int int_flag(const flag *flags, const char *name, int def, int *out, ff_error *err) {
  const char *s = value_of(flags, name);
  *out = def;
  if (!s) return 0;
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < 0 || v > 1 << 30)
    return ff_fail(err, FF_EINVAL, "%s: '%s' is not a non-negative integer", name, s);
  *out = (int)v;
  return 0;
}

/* --threads N for the generated code of a tcc or cc engine */
static int threads_flag(const flag *flags, ff_model *m, int engine, ff_error *err) {
  int threads, rc = int_flag(flags, "--threads", 1, &threads, err);
  if (rc) return rc;
  if (threads > 1 && engine == FF_ENGINE_RUNTIME)
    return ff_fail(err, FF_EINVAL, "--threads: the runtime (the reference) runs on one thread; use tcc or cc");
  return ff_model_set_threads(m, threads, err);
}

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
  int32_t *out = malloc(sizeof *out * (size_t)q.max_new);
  size_t rows = (size_t)q.prompt_len + (size_t)q.max_new - 1;
  float *logits = g->logits ? malloc(sizeof *logits * rows * (size_t)c->vocab) : NULL;
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

static int generate_options(const flag *flags, generate_opts *o, generation *g, ff_error *err) {
  const char *engine_s = value_of(flags, "--engine");
  *o = (generate_opts){value_of(flags, "--weights"), value_of(flags, "--tokens"), value_of(flags, "--text"),
                       value_of(flags, "--lines"), -1, -1, 0};
  int rc;
  if ((!!o->tokens + !!o->text + !!o->lines) != 1)
    return ff_fail(err, FF_EINVAL, "give one of --tokens \"ids\", --text \"...\" or --lines FILE");
  if ((rc = int_flag(flags, "--max-new", 0, &g->max_new, err)) ||
      (rc = int_flag(flags, "--bos", -1, &o->bos, err)) ||
      (rc = int_flag(flags, "--eos", -1, &o->eos, err)))
    return rc;
  if (value_of(flags, "--max-new") && g->max_new < 1)
    return ff_fail(err, FF_EINVAL, "--max-new must be at least 1");
  o->engine = ff_engine_parse(engine_s ? engine_s : "tcc");
  if (o->engine < 0) return ff_fail(err, FF_EINVAL, "--engine: '%s' is not one of runtime, tcc, cc", engine_s);
  return 0;
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
  if ((rc = weights_of(c, &o->weights, err))) return rc;
  if (c->vocabulary[0]) {
    if ((rc = ff_tokenizer_load(c->vocabulary, c->vocab, vocab, err))) return rc;
    g->vocab = *vocab;
  } else if (!o->tokens) {
    return ff_fail(err, FF_EINVAL, "--text and --lines need a description with a vocabulary; use --tokens");
  }
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
  int rc = parse_token_list("--tokens", tokens, &batch, &lengths, err);
  if (!rc && g->logits && batch.shape[0] > 1) rc = ff_fail(err, FF_EINVAL, "--logits takes one sequence");
  for (int b = 0; !rc && b < (int)batch.shape[0]; b++) {
    if (lengths[b] > c->max_seq) {
      rc = ff_fail(err, FF_ELENGTH, "sequence %d has %d ids, above max_seq = %d", b, (int)lengths[b], c->max_seq);
      break;
    }
    rc = generate_one(g, (const int32_t *)batch.data + (size_t)b * batch.shape[1], lengths[b], err);
  }
  free(lengths);
  ff_array_free(&batch);
  return rc;
}

/* --lines FILE: one text a line, one output line each */
static int generate_lines(const generation *g, const char *lines, int32_t *ids, ff_error *err) {
  uint8_t *file = NULL;
  size_t len;
  int rc = ff_read_file(lines, &file, &len, err);
  if (rc) return rc;
  if (g->logits) {
    free(file);
    return ff_fail(err, FF_EINVAL, "--logits takes one sequence, not --lines");
  }
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

static int cmd_generate(const char *path, flag *flags, ff_error *err) {
  generation g = {NULL, NULL, -1, -1, 0, value_of(flags, "--ids") != NULL, value_of(flags, "--logits")};
  generate_opts o;
  int rc = generate_options(flags, &o, &g, err);
  if (rc) return rc;
  ff_model *m = open_model(path, flags, err);
  if (!m) return err->code;
  g.m = m;
  const ff_config *c = ff_model_config(m);
  ff_tokenizer *vocab = NULL;
  int32_t *ids = NULL;
  if ((rc = generate_check(c, &o, &g, &vocab, err)) || (rc = ff_model_load_weights(m, o.weights, err)) ||
      (!value_of(flags, "--allow-nonfinite") && (rc = check_finite(m, o.weights, err))) ||
      (rc = threads_flag(flags, m, o.engine, err)) || (rc = prepare_engine(m, o.engine, err)))
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

/* ---- bench --------------------------------------------------------------- */

static double clock_ms(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static double now_ms(void) { return clock_ms(CLOCK_MONOTONIC); }

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Random weights for a bench without --weights: `init` into a temporary
 * file of our own (mkstemp: nobody else's file or link is written). */
static int bench_weights(ff_model *m, const char *given, ff_error *err) {
  if (given) return ff_model_load_weights(m, given, err);
  const char *dir = getenv("TMPDIR");
  char *path = malloc(strlen(dir && *dir ? dir : "/tmp") + 48);
  if (!path) return ff_fail(err, FF_ENOMEM, "out of memory");
  sprintf(path, "%s/fixformer-bench-XXXXXX", dir && *dir ? dir : "/tmp");
  int fd = mkstemp(path), rc;
  if (fd < 0) {
    rc = ff_fail(err, FF_EIO, "cannot create a temporary weights file in %s: %s", dir && *dir ? dir : "/tmp",
                 strerror(errno));
    free(path);
    return rc;
  }
  close(fd); /* init replaces it by rename, in the same private name */
  rc = ff_rt_init_weights(ff_model_config(m), 1, path, err);
  if (!rc) rc = ff_model_load_weights(m, path, err);
  unlink(path);
  free(path);
  return rc;
}

/* The flags of bench, checked before the model is opened. */
typedef struct {
  int batch, T, threads, iters, gen, engine;
} bench_opts;

static int bench_options(const flag *flags, bench_opts *o, ff_error *err) {
  const char *engine_s = value_of(flags, "--engine");
  int rc;
  if ((rc = int_flag(flags, "--batch", 1, &o->batch, err)) || (rc = int_flag(flags, "--seq", 0, &o->T, err)) ||
      (rc = int_flag(flags, "--threads", 1, &o->threads, err)) ||
      (rc = int_flag(flags, "--iters", 20, &o->iters, err)) ||
      (rc = int_flag(flags, "--generate", 0, &o->gen, err)))
    return rc;
  o->engine = ff_engine_parse(engine_s ? engine_s : "cc");
  if (o->engine < 0) return ff_fail(err, FF_EINVAL, "--engine: '%s' is not one of runtime, tcc, cc", engine_s);
  if (o->batch < 1 || o->iters < 1) return ff_fail(err, FF_EINVAL, "--batch and --iters must be at least 1");
  return 0;
}

/* ... and those that need the model's config: --seq, --generate */
static int bench_check(const ff_config *c, bench_opts *o, ff_error *err) {
  if (o->T == 0) o->T = c->max_seq < 128 ? c->max_seq : 128;
  if (o->T < 1 || o->T > c->max_seq)
    return ff_fail(err, FF_ELENGTH, "--seq %d is outside 1..max_seq (%d)", o->T, c->max_seq);
  if (o->gen && (!ff_config_has_head(c) || c->arch == FF_ARCH_ENCODER || o->gen > c->max_seq - 1))
    return ff_fail(err, FF_EINVAL, "--generate N needs a decoder with a vocab, an output head and N < max_seq (%d)",
                   c->max_seq);
  return 0;
}

/* One line per phase as it ends, flushed: a big model takes seconds a phase. */
static void phase(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  printf("\n");
  fflush(stdout);
}

/* Weights, then the steps of prepare timed apart (each is kept for the next). */
static int bench_prepare(ff_model *m, const flag *flags, const bench_opts *o, ff_error *err) {
  const ff_config *c = ff_model_config(m);
  const char *weights = default_weights(c, value_of(flags, "--weights")), *engine = ff_engine_name((enum ff_engine)o->engine);
  double t0 = now_ms();
  int rc;
  if ((rc = bench_weights(m, weights, err)) || (rc = ff_model_set_isa(m, "native", err)) ||
      (rc = threads_flag(flags, m, o->engine, err)))
    return rc;
  phase("load weights (%s): %.1f ms", weights ? weights : "random, as init writes them", now_ms() - t0);
  if (o->engine != FF_ENGINE_RUNTIME) {
    const void *blob;
    size_t bytes;
    t0 = now_ms();
    if ((rc = ff_model_generate(m, "fixformer bench", NULL, NULL, err))) return rc;
    phase("generate C: %.2f ms", now_ms() - t0);
    t0 = now_ms();
    if ((rc = ff_model_weight_blob(m, &blob, &bytes, err))) return rc;
    phase("pack weights: %.1f ms (%.1f MB)", now_ms() - t0, bytes / 1e6);
  }
  t0 = now_ms();
  if ((rc = prepare_engine(m, o->engine, err))) return rc;
  if (o->engine != FF_ENGINE_RUNTIME) phase("compile (%s) and bind: %.1f ms", engine, now_ms() - t0);
  return 0;
}

/* Random inputs and the buffers of the timed runs. */
typedef struct {
  int32_t *ids, *out_ids;
  float *x, *out;
  double *times;
} bench_buffers;

static void bench_free(bench_buffers *b) {
  free(b->ids);
  free(b->x);
  free(b->out);
  free(b->times);
  free(b->out_ids);
}

static int bench_alloc(const ff_config *c, const bench_opts *o, bench_buffers *b, ff_error *err) {
  size_t n_in = (size_t)o->batch * o->T, n_out = n_in * ff_config_out_dim(c), d = (size_t)c->d_model;
  b->ids = malloc(sizeof *b->ids * (n_in + 1));
  b->x = malloc(sizeof *b->x * (n_in * d + 1));
  b->out = malloc(sizeof *b->out * (n_out + 1));
  b->times = malloc(sizeof *b->times * (size_t)o->iters);
  b->out_ids = malloc(sizeof *b->out_ids * (size_t)(o->gen + 1));
  if (!b->ids || !b->x || !b->out || !b->times || !b->out_ids) return ff_fail(err, FF_ENOMEM, "out of memory");
  unsigned long long r = 12345;
  for (size_t i = 0; i < n_in; i++)
    b->ids[i] = (int32_t)((r = r * 6364136223846793005ULL + 1442695040888963407ULL) >> 33) % (c->vocab > 0 ? c->vocab : 1);
  for (size_t i = 0; i < n_in * d; i++) b->x[i] = (float)((r = r * 6364136223846793005ULL + 1) >> 40) / 16777216.0f - 0.5f;
  return 0;
}

/* Two warm-up runs, then the timed ones, each printed as it ends. */
static int bench_time(ff_model *m, const bench_opts *o, bench_buffers *b, ff_error *err) {
  const ff_config *c = ff_model_config(m);
  int encdec = c->arch == FF_ARCH_ENCODER_DECODER, T = o->T, rc = 0;
  ff_rt_input in = {o->batch, T, c->vocab > 0 ? b->ids : NULL, c->vocab > 0 ? NULL : b->x, NULL,
                    encdec ? T : 0, encdec && c->vocab > 0 ? b->ids : NULL, encdec && c->vocab == 0 ? b->x : NULL};
  int32_t bos = 0;
  ff_greedy g = {encdec ? b->ids : NULL, encdec ? T : 0, encdec ? &bos : b->ids, 1, o->gen, -1};
  double warm = now_ms();
  for (int i = -2; i < o->iters && !rc; i++) {
    int n;
    double t = now_ms(), cpu = clock_ms(CLOCK_PROCESS_CPUTIME_ID); /* CPU: what neighbours hardly move */
    rc = o->gen ? ff_model_greedy(m, &g, b->out_ids, &n, NULL, err) : ff_model_forward(m, &in, b->out, err);
    if (rc) break;
    if (i == -1) phase("warm-up: 2 runs, %.1f ms", now_ms() - warm);
    if (i >= 0)
      phase("run %d/%d: %.3f ms, %.3f ms of CPU", i + 1, o->iters, b->times[i] = now_ms() - t,
            clock_ms(CLOCK_PROCESS_CPUTIME_ID) - cpu);
  }
  return rc;
}

/* The summary; its last line `median_ms: X` is what scripts read. */
static void bench_report(const ff_config *c, const bench_opts *o, double *times) {
  int iters = o->iters, encdec = c->arch == FF_ARCH_ENCODER_DECODER;
  qsort(times, (size_t)iters, sizeof *times, cmp_double);
  double med = times[iters / 2], flops = o->gen ? 0 : ff_rt_forward_flops(c, o->T, o->T) * o->batch;
  if (o->gen) {
    char source[48] = ""; /* encoder-decoder: the source is --seq random tokens */
    if (encdec) snprintf(source, sizeof source, " (source of %d tokens)", o->T);
    printf("generate %d tokens from a 1-token prompt%s: min %.3f ms, median %.3f ms, max %.3f ms over %d runs; "
           "%.1f tokens/s\n", o->gen, source, times[0], med, times[iters - 1], iters, o->gen / (med / 1e3));
  } else {
    printf("forward batch %d x T %d: min %.3f ms, median %.3f ms, max %.3f ms over %d runs; %.2f GFLOP/s at the "
           "median (%.0f FLOP)\n", o->batch, o->T, times[0], med, times[iters - 1], iters, flops / (med * 1e6), flops);
  }
  printf("median_ms: %.4f\n", med);
}

static int cmd_bench(const char *path, flag *flags, ff_error *err) {
  bench_opts o;
  bench_buffers b = {NULL, NULL, NULL, NULL, NULL};
  int rc = bench_options(flags, &o, err);
  if (rc) return rc;
  ff_model *m = open_model(path, flags, err);
  if (!m) return err->code;
  const ff_config *c = ff_model_config(m);
  if ((rc = bench_check(c, &o, err))) goto done;
  phase("bench %s: %s, d_model %d, %d heads, d_ff %d, %d+%d layers; engine %s, %d thread(s)", c->name,
        c->arch == FF_ARCH_ENCODER_DECODER ? "encoder-decoder" : c->arch == FF_ARCH_ENCODER ? "encoder" : "decoder-only",
        c->d_model, c->heads, c->d_ff, c->encoder_layers, c->decoder_layers, ff_engine_name((enum ff_engine)o.engine),
        o.threads);
  if ((rc = bench_prepare(m, flags, &o, err)) || (rc = bench_alloc(c, &o, &b, err)) ||
      (rc = bench_time(m, &o, &b, err)))
    goto done;
  bench_report(c, &o, b.times);
done:
  bench_free(&b);
  ff_model_close(m);
  return rc;
}

/* ---- emit ---------------------------------------------------------------- */

/* "DIR/NAME" + suffix, malloc'd */
static char *out_path(const char *dir, const char *name, const char *suffix) {
  char *p = malloc(strlen(dir) + strlen(name) + strlen(suffix) + 2);
  if (p) sprintf(p, "%s/%s%s", dir, name, suffix);
  return p;
}

/* A target triple: the architecture first, e.g. aarch64-linux-gnu. */
static int check_target(const char *t, ff_error *err) {
  static const char *const arches[] = {"x86_64",   "aarch64",   "riscv64",       "riscv32", "arm",
                                       "i686",     "thumbv6m",  "thumbv7m",      "thumbv7em", "thumbv8m.main",
                                       "generic",  NULL};
  size_t n = strcspn(t, "-");
  for (const char *const *a = arches; *a; a++)
    if (strlen(*a) == n && !strncmp(t, *a, n)) {
      for (const char *p = t; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '_' || *p == '.'))
          return ff_fail(err, FF_EINVAL, "--target: '%s' is not a target triple", t);
      return 0;
    }
  return ff_fail(err, FF_EINVAL, "--target: unknown architecture in '%s' (x86_64, aarch64, riscv64, riscv32, arm, thumbv6m, "
                 "thumbv7m, thumbv7em, thumbv8m.main, i686, generic)", t);
}

static int cmd_emit(const char *path, flag *flags, ff_error *err) {
  const char *dir, *weights = value_of(flags, "--weights"), *target = value_of(flags, "--target");
  int embed = value_of(flags, "--embed") != NULL, with_main = value_of(flags, "--with-main") != NULL, rc;
  if ((rc = require_flag(flags, "-o", &dir, err))) return rc;
  if (target && (rc = check_target(target, err))) return rc;
  /* the command, without -o (where the files go does not change them) */
  char command[1024];
  int n = snprintf(command, sizeof command, "fixformer emit %s", path);
  for (const flag *f = flags; f->name && n > 0 && (size_t)n < sizeof command; f++)
    if (f->value && strcmp(f->name, "-o"))
      n += snprintf(command + n, sizeof command - (size_t)n, f->takes_value ? " %s %s" : " %s", f->name, f->value);

  ff_model *m = open_model(path, flags, err);
  if (!m) return err->code;
  const ff_config *c = ff_model_config(m);
  weights = default_weights(c, weights); /* the description's, as for run */
  const char *isa = value_of(flags, "--isa");
  if (!isa && target && !strncmp(target, "aarch64", 7)) isa = "neon"; /* every AArch64 CPU has it */
  if (isa && (rc = ff_model_set_isa(m, isa, err))) {
    ff_model_close(m);
    return rc;
  }
  if (embed && !weights) {
    ff_model_close(m);
    return ff_fail(err, FF_EINVAL, "--embed needs --weights W.safetensors");
  }
  const char *header, *source;
  char *text = NULL, *driver = NULL;
  if ((weights && (rc = ff_model_load_weights(m, weights, err))) ||
      (weights && !value_of(flags, "--allow-nonfinite") && (rc = check_finite(m, weights, err))) ||
      (rc = ff_model_generate(m, command, &header, &source, err)))
    goto done;
  /* everything is rendered before the first file is written, and written all or none */
  if (weights && embed && (rc = ff_model_weights_source(m, weights, &text, err))) goto done;
  if (with_main && (rc = ff_model_driver_source(m, embed, &driver, err))) goto done;
  ff_file_out files[5];
  int n_files = 0;
  files[n_files++] = (ff_file_out){out_path(dir, c->name, ".h"), header, strlen(header)};
  files[n_files++] = (ff_file_out){out_path(dir, c->name, ".c"), source, strlen(source)};
  if (weights && embed) {
    files[n_files++] = (ff_file_out){out_path(dir, c->name, "_weights.c"), text, strlen(text)};
  } else if (weights) {
    const void *blob;
    size_t bytes;
    if ((rc = ff_model_weight_blob(m, &blob, &bytes, err))) goto written;
    files[n_files++] = (ff_file_out){out_path(dir, c->name, ".weights"), blob, bytes};
  }
  if (driver) files[n_files++] = (ff_file_out){out_path(dir, c->name, "_main.c"), driver, strlen(driver)};
  for (int i = 0; i < n_files; i++)
    if (!files[i].path) {
      rc = ff_fail(err, FF_ENOMEM, "out of memory");
      goto written;
    }
  struct stat st; /* the folder is made only once there is something to put in it */
  if (stat(dir, &st) && mkdir(dir, 0777) && errno != EEXIST) {
    rc = ff_fail(err, FF_EIO, "cannot create %s: %s", dir, strerror(errno));
    goto written;
  }
  if (!stat(dir, &st) && !S_ISDIR(st.st_mode)) {
    rc = ff_fail(err, FF_EIO, "%s is not a directory", dir);
    goto written;
  }
  if ((rc = ff_write_files_atomic(files, n_files, err))) goto written;
  for (int i = 0; i < n_files; i++) printf("wrote %s (%zu bytes)\n", files[i].path, files[i].len);
written:
  for (int i = 0; i < n_files; i++) free((void *)files[i].path);
done:
  free(driver);
  free(text);
  ff_model_close(m);
  return rc;
}

/* ---- cache ----------------------------------------------------------------- */

static int cmd_cache(const char *unused, flag *flags, ff_error *err) {
  (void)unused;
  char dir[4096];
  int rc = ff_cc_cache_dir(dir, sizeof dir, err), files;
  size_t bytes;
  if (rc) return rc;
  if (!value_of(flags, "--clean")) {
    printf("%s\n", dir);
    return 0;
  }
  if ((rc = ff_cc_cache_clean(&bytes, &files, err))) return rc;
  printf("removed %d file%s (%.1f MB) from %s\n", files, files == 1 ? "" : "s", bytes / 1e6, dir);
  return 0;
}

/* ---- import (cli/import.c) ----------------------------------------------- */

static int cmd_import(const char *src, flag *flags, ff_error *err) {
  const char *dir;
  int rc = require_flag(flags, "-o", &dir, err);
  if (rc) return rc;
  return ff_cli_import(src, dir, value_of(flags, "--name"), value_of(flags, "--tokenizer"), err);
}

/* ---- commands ------------------------------------------------------------ */

static flag info_flags[] = {{"--help", "-h", NULL, 0}, {"--weights", NULL, NULL, 1}, {"--isas", NULL, NULL, 0},
                            {"--dtype", NULL, NULL, 1}, {NULL, NULL, NULL, 0}};
static flag init_flags[] = {{"--help", "-h", NULL, 0}, {"-o", "--output", NULL, 1}, {"--seed", NULL, NULL, 1},
                            {NULL, NULL, NULL, 0}};
static flag emit_flags[] = {{"--help", "-h", NULL, 0},     {"-o", "--output", NULL, 1},
                            {"--weights", NULL, NULL, 1}, {"--embed", NULL, NULL, 0},
                            {"--target", NULL, NULL, 1},  {"--with-main", NULL, NULL, 0},
                            {"--isa", NULL, NULL, 1},     {"--allow-nonfinite", NULL, NULL, 0},
                            {"--dtype", NULL, NULL, 1},   {NULL, NULL, NULL, 0}};
static flag run_flags[] = {{"--help", "-h", NULL, 0},      {"--weights", NULL, NULL, 1},
                           {"--input", NULL, NULL, 1},     {"--target-input", NULL, NULL, 1},
                           {"--lengths", NULL, NULL, 1},   {"--output", "-o", NULL, 1},
                           {"--engine", NULL, NULL, 1},    {"--tokens", NULL, NULL, 1},
                           {"--target-tokens", NULL, NULL, 1}, {"--threads", NULL, NULL, 1},
                           {"--text", NULL, NULL, 1},      {"--dtype", NULL, NULL, 1},
                           {"--allow-nonfinite", NULL, NULL, 0}, {NULL, NULL, NULL, 0}};

static flag generate_flags[] = {{"--help", "-h", NULL, 0},    {"--weights", NULL, NULL, 1},
                                {"--tokens", NULL, NULL, 1},  {"--text", NULL, NULL, 1},
                                {"--lines", NULL, NULL, 1},   {"--max-new", NULL, NULL, 1},
                                {"--engine", NULL, NULL, 1},  {"--bos", NULL, NULL, 1},
                                {"--eos", NULL, NULL, 1},     {"--logits", NULL, NULL, 1},
                                {"--ids", NULL, NULL, 0},     {"--threads", NULL, NULL, 1},
                                {"--dtype", NULL, NULL, 1},
                                {"--allow-nonfinite", NULL, NULL, 0}, {NULL, NULL, NULL, 0}};

static flag bench_flags[] = {{"--help", "-h", NULL, 0},   {"--weights", NULL, NULL, 1}, {"--batch", NULL, NULL, 1},
                             {"--seq", NULL, NULL, 1},    {"--engine", NULL, NULL, 1},  {"--threads", NULL, NULL, 1},
                             {"--iters", NULL, NULL, 1},  {"--generate", NULL, NULL, 1}, {"--dtype", NULL, NULL, 1},
                             {NULL, NULL, NULL, 0}};

static flag import_flags[] = {{"--help", "-h", NULL, 0}, {"-o", "--output", NULL, 1}, {"--name", NULL, NULL, 1},
                              {"--tokenizer", NULL, NULL, 1}, {NULL, NULL, NULL, 0}};

static flag cache_flags[] = {{"--help", "-h", NULL, 0}, {"--clean", NULL, NULL, 0}, {NULL, NULL, NULL, 0}};

static const command commands[] = {
    {"info",
     "usage: fixformer info MODEL.lua [--weights W.safetensors]\n"
     "       fixformer info --isas\n"
     "Prints the resolved description (defaults filled in), the weight tensors\n"
     "with their shapes, the parameter count and the FLOPs per token.\n"
     "  --weights W   instead: check the checkpoint against the description without\n"
     "                running it (every tensor present, none extra, shapes, finite\n"
     "                values; F32, F16 and BF16 accepted) in a table; exits 1 naming\n"
     "                the first problem\n"
     "  --isas        instead: the ISAs of emit --isa (kernels/isas.h): register\n"
     "                tile MR x NR, whether this machine runs them, their C flags\n"
     "  --dtype T     the weight type: f32, bf16 or int8 (per 32 inputs); default: the\n"
     "                description's dtype (f32 unless it says)\n",
     cmd_info, info_flags},
    {"init",
     "usage: fixformer init MODEL.lua -o W.safetensors [--seed N]\n"
     "Writes deterministic random weights with PyTorch's default initialisation\n"
     "(same seed, same bytes; default seed 0) under the model's PyTorch names.\n",
     cmd_init, init_flags},
    {"emit",
     "usage: fixformer emit MODEL.lua -o DIR [--weights W.safetensors [--embed]] [--target TRIPLE]\n"
     "                      [--isa generic|avx2|avx512|neon|native] [--with-main] [--dtype f32|bf16|int8]\n"
     "Writes C specialised to the model's shapes: DIR/NAME.c and DIR/NAME.h.\n"
     "  --weights W      also write the weights packed in the code's layout: DIR/NAME.weights\n"
     "                   (default: the description's weights, if it names them)\n"
     "  --embed          ... as C arrays in DIR/NAME_weights.c instead (no file at run time)\n"
     "  --target TRIPLE  the target, e.g. aarch64-linux-gnu (recorded in the header; picks --isa)\n"
     "  --isa ISA        the matrix kernels: generic (portable C99; the default, but neon\n"
     "                   for an aarch64 --target), avx2 (build with -mavx2 -mfma), avx512\n"
     "                   (-mavx512f -mfma), neon (AArch64), native (the best this machine runs)\n"
     "  --with-main      also DIR/NAME_main.c, a driver with the flags of `fixformer run`\n"
     "  --dtype T        the weight type: f32, bf16 or int8 (per 32 inputs); default: the\n"
     "                   description's dtype (f32 unless it says)\n"
     "  --allow-nonfinite  write weights holding NaN or infinities (refused by default;\n"
     "                   the packed blob only: --embed cannot write them as C literals)\n"
     "The files appear all or none.  The same inputs give byte-identical files.  Build, e.g.:\n"
     "  cc -O2 -o NAME DIR/NAME.c DIR/NAME_main.c [DIR/NAME_weights.c] -lm\n",
     cmd_emit, emit_flags},
    {"run",
     "usage: fixformer run MODEL.lua [--weights W.safetensors] --input IN.npy [--output OUT.npy]\n"
     "                     [--lengths LEN.npy] [--target-input TGT.npy] [--engine runtime|tcc|cc]\n"
     "                     [--dtype f32|bf16|int8]\n"
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
     "  --output OUT.npy        float32 [B,T,vocab] logits, or [B,T,d_model] hidden states;\n"
     "                          without it, the argmax ids (or first hidden values) are printed\n"
     "  --engine E              runtime (the reference; default), tcc (generated C compiled\n"
     "                          in memory by libtcc) or cc ($CC -O3, cached shared object)\n"
     "  --threads N             tcc, cc: split matrix products and attention over N threads\n"
     "  --dtype T               the weight type: f32, bf16 or int8 (per 32 inputs); default: the\n"
     "                          description's dtype (f32 unless it says)\n"
     "  --allow-nonfinite       run with NaN or infinite weights (refused by default);\n"
     "                          they propagate as in PyTorch\n",
     cmd_run, run_flags},
    {"generate",
     "usage: fixformer generate MODEL.lua (--text \"...\" | --lines FILE | --tokens \"ids\")\n"
     "                          [--weights W.safetensors] [--max-new N] [--engine tcc|cc|runtime]\n"
     "                          [--dtype f32|bf16|int8]\n"
     "Greedy decoding with a key/value cache: encoder-decoder models translate the\n"
     "input (the decoder starts from BOS); decoder-only models continue it.  Prints\n"
     "one line per input: the generated text, or ids without a vocabulary.\n"
     "  --text \"...\"     the input as text (needs the description's vocabulary)\n"
     "  --lines FILE      one text per line, one output line each\n"
     "  --tokens \"ids\"   the input as ids; sequences separated by commas\n"
     "  --weights W       default: the description's weights\n"
     "  --max-new N       stop after N new ids (default: up to max_seq); stops at EOS\n"
     "  --engine E        tcc (default: generated C compiled in memory), cc or runtime\n"
     "  --bos N, --eos N  start and stop ids (default: the vocabulary's)\n"
     "  --ids             also print the generated ids (EOS included), then a tab\n"
     "  --threads N       tcc, cc: split matrix products and attention over N threads\n"
     "  --dtype T         the weight type: f32, bf16 or int8 (per 32 inputs); default: the\n"
     "                    description's dtype (f32 unless it says)\n"
     "  --logits OUT.npy  float32 [1, P, vocab]: the logits of every position fed to\n"
     "                    the decoder (one input only)\n"
     "  --allow-nonfinite run with NaN or infinite weights (refused by default)\n",
     cmd_generate, generate_flags},
    {"bench",
     "usage: fixformer bench MODEL.lua [--weights W] [--batch B] [--seq T] [--engine tcc|cc|runtime]\n"
     "                       [--threads N] [--iters N] [--generate N] [--dtype f32|bf16|int8]\n"
     "Times forward passes (after two warm-up runs) on random inputs and prints\n"
     "min/median/max, GFLOP/s at the median and a last line `median_ms: X`.\n"
     "  --weights W    default: the description's, else random (`init`) weights\n"
     "  --batch B      sequences per forward (default 1)\n"
     "  --seq T        positions per sequence (default min(128, max_seq))\n"
     "  --engine E     cc (default), tcc or runtime\n"
     "  --threads N    tcc, cc: threads for the generated code (default 1)\n"
     "  --iters N      timed runs (default 20)\n"
     "  --generate N   instead: greedy decoding of N tokens with the KV cache, tokens/s\n"
     "  --dtype T      the weight type: f32, bf16 or int8 (per 32 inputs); default: the\n"
     "                 description's dtype (f32 unless it says)\n",
     cmd_bench, bench_flags},
    {"import",
     "usage: fixformer import SRC -o DIR [--name NAME] [--tokenizer FILE]\n"
     "Turns a checkpoint as it is published into DIR/NAME.lua + DIR/NAME.safetensors\n"
     "(+ the tokenizer), which every other command takes with no other flag:\n"
     "  SRC               a Hugging Face model folder (config.json + model.safetensors, or the\n"
     "                    shards of model.safetensors.index.json; model_type llama, gpt2, bert),\n"
     "                    or a llama2.c checkpoint .bin (legacy or version 1, float32)\n"
     "  -o DIR            where the files go (made if need be); they appear all or none\n"
     "  --name NAME       the model's name (a C identifier; default: from SRC)\n"
     "  --tokenizer FILE  the tokenizer to copy (default: tokenizer.json in the folder,\n"
     "                    tokenizer.bin beside a .bin)\n"
     "Prints what it mapped and ignored; the last line is the path of NAME.lua.\n",
     cmd_import, import_flags},
    {"cache",
     "usage: fixformer cache [--clean]\n"
     "Prints the folder where the cc engine keeps compiled models ($XDG_CACHE_HOME/fixformer,\n"
     "else ~/.cache/fixformer, else /tmp/fixformer-cache-UID; it must be yours alone, mode\n"
     "0700).  Its size is bounded by FIXFORMER_CACHE_MAX_MB (default 256): least recently\n"
     "used entries go first.\n"
     "  --clean   remove every entry\n",
     cmd_cache, cache_flags},
};
#define N_COMMANDS (int)(sizeof commands / sizeof *commands)

static void usage(FILE *to) {
  fprintf(to,
          "fixformer %s - a compiler for fixed transformer models\n"
          "usage: fixformer COMMAND [options]   (fixformer COMMAND --help for more)\n"
          "commands:\n"
          "  info   the resolved description, weights, parameters and FLOPs\n"
          "  init   deterministic random weights (PyTorch initialisation) as safetensors\n"
          "  emit   C specialised to the model (files, for any target)\n"
          "  run    one forward pass over .npy inputs\n"
          "  generate  greedy decoding with a key/value cache (text or ids)\n"
          "  bench  timings of forward passes or of greedy decoding\n"
          "  import a Hugging Face folder or a llama2.c checkpoint -> a description + weights\n"
          "  cache  the cc engine's cache of compiled models (--clean empties it)\n",
          FF_VERSION);
}

/* FIXFORMER_REPORT_RSS=1: the process's peak resident memory on stderr at
 * the end (VmHWM: this process's own, from its exec on; getrusage of a
 * parent counts the pages the parent had when it forked). */
static void report_rss(void) {
  char line[128];
  FILE *f = getenv("FIXFORMER_REPORT_RSS") ? fopen("/proc/self/status", "r") : NULL;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "VmHWM:", 6)) fprintf(stderr, "peak RSS: %lld kB\n", strtoll(line + 6, NULL, 10));
  if (f) fclose(f);
}

static int run_command(const command *cmd, int argc, char **argv) {
  ff_error err = {0, ""};
  const char *model;
  int rc = parse_args(cmd, argc - 2, argv + 2, &model, &err);
  if (!rc) rc = cmd->run(model, cmd->flags, &err);
  report_rss();
  if (rc) {
    fprintf(stderr, "fixformer %s: %s\n", cmd->name, err.msg[0] ? err.msg : "failed");
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    usage(stdout);
    return 0;
  }
  if (!strcmp(argv[1], "--version")) {
    printf("fixformer %s\n", FF_VERSION);
    return 0;
  }
  for (int i = 0; i < N_COMMANDS; i++) {
    const command *cmd = &commands[i];
    if (strcmp(argv[1], cmd->name)) continue;
    for (int j = 2; j < argc; j++)
      if (!strcmp(argv[j], "--help") || !strcmp(argv[j], "-h")) {
        fputs(cmd->usage, stdout);
        return 0;
      }
    return run_command(cmd, argc, argv);
  }
  fprintf(stderr, "fixformer: unknown command '%s' (see fixformer --help)\n", argv[1]);
  return 2;
}
