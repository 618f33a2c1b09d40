/* config.c - the public calls on what a description implies (fixformer.h):
 * its tensors, FLOPs, inputs, first weights and text, over the runtime's
 * rows of include/ff_schema.h; and the schema itself as JSON or Markdown
 * (`fixformer info --schema [--markdown]`). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ff_runtime.h"
#include "fixformer.h"

static int null_arg(ff_error *err, const char *fn, const char *arg) {
  return ff_fail(err, FF_EINVAL, "%s: %s is NULL", fn, arg);
}

/* ---- tensors, FLOPs, inputs ---------------------------------------------------- */

typedef struct {
  ff_weight_info_fn fn;
  void *ctx;
} weights_visit;

static int weight_info(void *ctx, const ff_weight_spec *s) {
  const weights_visit *v = ctx;
  ff_weight_info w = {s->name, s->kind, s->layer, s->rank, {s->shape[0], s->rank == 2 ? s->shape[1] : 0}};
  return v->fn(v->ctx, &w);
}

int ff_config_weights(const ff_config *c, ff_weight_info_fn fn, void *ctx) {
  if (!c || !fn) return null_arg(NULL, "ff_config_weights", c ? "fn" : "c");
  weights_visit v = {fn, ctx};
  return ff_rt_visit_weights(c, NULL, weight_info, &v);
}

int ff_config_count_weights(const ff_config *c, size_t *tensors, size_t *params) {
  if (!c) return null_arg(NULL, "ff_config_count_weights", "c");
  return ff_rt_count_weights(c, tensors, params);
}

double ff_config_forward_flops(const ff_config *c, int S, int T) { return c ? ff_rt_forward_flops(c, S, T) : 0; }

int ff_config_check_input(const ff_config *c, const ff_input *in, ff_error *err) {
  if (!c || !in) return null_arg(err, "ff_config_check_input", c ? "in" : "c");
  return ff_rt_check_input(c, in, err);
}

int ff_config_init_weights(const ff_config *c, uint64_t seed, const char *path, ff_error *err) {
  if (!c || !path) return null_arg(err, "ff_config_init_weights", c ? "path" : "c");
  return ff_rt_init_weights(c, seed, path, err);
}

int ff_config_read_weights(const ff_config *c, const char *path, ff_tensor_file *f, ff_error *err) {
  if (!c || !path || !f) return null_arg(err, "ff_config_read_weights", !c ? "c" : !path ? "path" : "f");
  return ff_rt_read_weights(c, path, f, err);
}

const char *ff_config_key_string(const ff_config *c, enum ff_key key) {
  return c && key >= 0 && key < FF_KEY_COUNT ? ff_rt_key_string(c, key) : NULL;
}

/* ---- the description's text ---------------------------------------------------- */

/* Every key the config has in the schema's order (those whose needs it does
 * not meet left out, so it reads back as the same model; a key naming a
 * tensor only when the model has that tensor), a few with a comment. */
int ff_model_describe(const ff_model *m, char **text, ff_error *err) {
  if (!m || !text) return null_arg(err, "ff_model_describe", m ? "text" : "m");
  const ff_config *c = ff_model_config(m);
  ff_rt_value v[FF_KEY_COUNT];
  char d_k[32], vocab[64];
  ff_rt_config_values(c, v);
  snprintf(d_k, sizeof d_k, "d_k = %d", c->d_model / c->heads);
  v[FF_KEY_heads].comment = d_k;
  v[FF_KEY_kv_heads].number = ff_config_kv_heads(c); /* 0 in a config built in C */
  if (ff_config_kv_heads(c) < c->heads)
    v[FF_KEY_kv_heads].comment = "grouped-query: K/V caches of kv_heads * d_k per position";
  if (c->arch != FF_ARCH_ENCODER_DECODER)
    v[FF_KEY_layers] = (ff_rt_value){.set = 1, .number = c->encoder_layers + c->decoder_layers};
  if (!c->vocab) {
    snprintf(vocab, sizeof vocab, "float inputs [B,T,%d]", c->d_model);
    v[FF_KEY_vocab].literal = "nil";
    v[FF_KEY_vocab].comment = vocab;
  }
  if (c->no_lm_head) v[FF_KEY_lm_head].comment = "the output is the hidden states";
  if (c->token_types) v[FF_KEY_token_types].comment = "every position has type 0";
  v[FF_KEY_dtype].string = ff_model_dtype(m); /* set_dtype's, or the description's */
  v[FF_KEY_compute].string = ff_model_compute(m);
  char *keys = ff_rt_describe(v, 1);          /* numbers that read back as the config's float32 */
  size_t n = keys ? strlen(keys) + sizeof "return {\n}\n" : 0;
  *text = keys ? malloc(n) : NULL;
  if (*text) snprintf(*text, n, "return {\n%s}\n", keys);
  free(keys);
  return *text ? 0 : ff_fail(err, FF_ENOMEM, "out of memory");
}

/* ---- the schema as JSON -------------------------------------------------------- */

/* the word of architecture a (enum ff_arch) */
static const char *arch_word(int a) { return ff_rt_keys[FF_KEY_arch].values[a]; }

/* s as a JSON string */
static void json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
    else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
    else fputc(ch, f);
  }
  fputc('"', f);
}

/* x as JSON and Lua read it: whole numbers below 10^7 as integers (10000,
 * not 1e+04), others the shortest text of the same double (1e-05, 1e+12) */
static const char *number_text(double x, char buf[32]) {
  if (x == (double)(long)x && x > -1e7 && x < 1e7) {
    snprintf(buf, 32, "%ld", (long)x);
    return buf;
  }
  return ff_lua_number(x, 0, buf);
}

static void json_number(FILE *f, double x) {
  char num[32];
  fputs(number_text(x, num), f);
}

/* ["vocab", "lm_head"]: the conditions of a needs mask */
static void json_needs(FILE *f, unsigned needs) {
  fputc('[', f);
  for (int c = 0, n = 0; c < FF_COND_COUNT; c++)
    if (needs >> c & 1u) {
      fputs(n++ ? ", " : "", f);
      json_string(f, ff_rt_conditions[c].name);
    }
  fputc(']', f);
}

static void json_key(FILE *f, const ff_rt_key *k) {
  fprintf(f, "    {\"key\": ");
  json_string(f, k->key);
  fprintf(f, ", \"kind\": \"%s\"", ff_rt_key_kind_name(k->kind));
  if (k->values[0]) {
    fprintf(f, ", \"values\": [");
    for (int j = 0; k->values[j]; j++) {
      fputs(j ? ", " : "", f);
      json_string(f, k->values[j]);
    }
    fputc(']', f);
  }
  if (k->required) fprintf(f, ", \"required\": true");
  if (k->has_default) {
    fprintf(f, ", \"default\": ");
    if (k->kind == FF_KIND_BOOLEAN) fputs(k->default_number != 0 ? "true" : "false", f);
    else if (k->default_string) json_string(f, k->default_string);
    else json_number(f, k->default_number);
  }
  if (k->default_of) {
    fprintf(f, ", \"default_of\": ");
    json_string(f, k->default_of);
    fprintf(f, ", \"times\": %d", k->default_times);
  }
  if (k->kind == FF_KIND_INT || k->kind == FF_KIND_NUMBER) {
    fprintf(f, ", \"min\": ");
    json_number(f, k->min);
    fprintf(f, ", \"max\": ");
    json_number(f, k->max);
  } else if (k->kind != FF_KIND_ENUM && k->kind != FF_KIND_BOOLEAN) {
    fprintf(f, ", \"maxlen\": %.0f", k->max);
  }
  fprintf(f, ", \"needs\": ");
  json_needs(f, k->needs);
  fprintf(f, ", \"arches\": [");
  for (int a = 0, n = 0; a < 3; a++)
    if (k->arches >> a & 1u) fprintf(f, "%s\"%s\"", n++ ? ", " : "", arch_word(a));
  fprintf(f, "], \"doc\": ");
  json_string(f, k->doc);
  fputc('}', f);
}

static void json_weight(FILE *f, const ff_rt_weight_kind *w) {
  static const struct {
    unsigned flag;
    const char *name;
  } flags[] = {{FF_IS_MATRIX, "matrix"}, {FF_IS_QUANTIZED, "quantized"}, {FF_IS_TIED, "tied"},
               {FF_IS_BIAS, "bias"},     {FF_IS_NORM, "norm"},           {FF_IS_EMBEDDING, "embedding"}};
  fprintf(f, "    {\"role\": ");
  json_string(f, w->role);
  fprintf(f, ", \"scope\": \"%s\", \"needs\": ", ff_rt_scope_names[w->scope]);
  json_needs(f, w->needs);
  fprintf(f, ", \"shape\": [\"%s\"", ff_rt_dim_names[w->rows]);
  if (w->cols != FF_DIM_NONE) fprintf(f, ", \"%s\"", ff_rt_dim_names[w->cols]);
  fprintf(f, "], \"init\": \"%s\", \"fan_in\": \"%s\"", ff_rt_init_names[w->init], ff_rt_dim_names[w->fan_in]);
  for (size_t i = 0; i < sizeof flags / sizeof *flags; i++)
    fprintf(f, ", \"%s\": %s", flags[i].name, w->flags & flags[i].flag ? "true" : "false");
  if (w->named_by != FF_KEY_NONE) fprintf(f, ", \"named_by\": \"%s\"", ff_rt_keys[w->named_by].key);
  const ff_rt_weight_fold *fold = ff_rt_fold_of((enum ff_tensor_kind)(w - ff_rt_weight_kinds));
  if (fold) /* include/ff_schema.h FF_WEIGHT_FOLDS */
    fprintf(f, ", \"folds_into\": {\"weight\": \"%s\", \"bias\": \"%s\"}", ff_rt_weight_kinds[fold->weight].role,
            ff_rt_weight_kinds[fold->bias].role);
  if (w->parts[0]) {
    fprintf(f, ", \"parts_need\": ");
    json_needs(f, w->parts_need);
    fprintf(f, ", \"parts\": [");
    for (int p = 0; p < FF_MAX_PARTS && w->parts[p]; p++) {
      fputs(p ? ", {\"role\": " : "{\"role\": ", f);
      json_string(f, w->parts[p]);
      fprintf(f, ", \"rows\": \"%s\"}", ff_rt_dim_names[w->part_rows[p]]);
    }
    fputc(']', f);
  }
  fputc('}', f);
}

/* one named list of the JSON: rows of a name and a doc (dims from 1: 0 is NONE) */
static void json_named(FILE *f, const char *list, const char *const *names, const char *const *docs, int from, int n) {
  fprintf(f, "  ],\n  \"%s\": [\n", list);
  for (int i = from; i < n; i++) {
    fprintf(f, "    {\"name\": \"%s\", \"doc\": ", names[i]);
    json_string(f, docs[i]);
    fputs(i + 1 < n ? "},\n" : "}\n", f);
  }
}

static void print_json(FILE *f) {
  fprintf(f, "{\n  \"keys\": [\n");
  for (int i = 0; i < FF_KEY_COUNT; i++) {
    json_key(f, &ff_rt_keys[i]);
    fputs(i + 1 < FF_KEY_COUNT ? ",\n" : "\n", f);
  }
  fprintf(f, "  ],\n  \"conditions\": [\n");
  for (int i = 0; i < FF_COND_COUNT; i++) {
    const ff_rt_condition *c = &ff_rt_conditions[i];
    fprintf(f, "    {\"name\": \"%s\", \"key\": \"%s\", \"test\": \"%s\"", c->name, ff_rt_keys[c->key].key,
            ff_rt_test_name(c->test));
    if (c->test == FF_TEST_IS) fprintf(f, ", \"value\": \"%s\"", ff_rt_keys[c->key].values[c->value]);
    if (c->why) {
      fprintf(f, ", \"why\": ");
      json_string(f, c->why);
    }
    fputs(i + 1 < FF_COND_COUNT ? "},\n" : "}\n", f);
  }
  json_named(f, "dims", ff_rt_dim_names, ff_rt_dim_docs, 1, FF_DIM_COUNT);
  json_named(f, "scopes", ff_rt_scope_names, ff_rt_scope_docs, 0, FF_SCOPE_COUNT);
  fprintf(f, "  ],\n  \"weights\": [\n");
  for (int i = 0; i < FF_TENSOR_COUNT; i++) {
    json_weight(f, &ff_rt_weight_kinds[i]);
    fputs(i + 1 < FF_TENSOR_COUNT ? ",\n" : "\n", f);
  }
  fprintf(f, "  ]\n}\n");
}

/* ---- the docs' key table ------------------------------------------------------- */

/* a condition as the docs say it: `vocab`, `lm_head = true`, `positional = "rope"` */
static void md_condition(FILE *f, const ff_rt_condition *c) {
  const ff_rt_key *k = &ff_rt_keys[c->key];
  switch (c->test) {
  case FF_TEST_SET:
    fprintf(f, k->kind == FF_KIND_INT && k->min < 1 ? "`%s > 0`" : "`%s`", k->key); /* token_types, vocab */
    break;
  case FF_TEST_TRUE: fprintf(f, "`%s = true`", k->key); break;
  case FF_TEST_FALSE: fprintf(f, "`%s = false`", k->key); break;
  default: fprintf(f, "`%s = \"%s\"`", k->key, k->values[c->value]);
  }
}

/* text with | escaped, as a table cell needs */
static void md_text(FILE *f, const char *s) {
  for (; *s; s++)
    if (*s == '|') fputs("\\|", f);
    else fputc(*s, f);
}

static void md_key(FILE *f, const ff_rt_key *k) {
  char num[32];
  fprintf(f, "| `%s` | ", k->key);
  if (k->required) fprintf(f, "required");
  else if (k->default_of && k->default_times != 1) fprintf(f, "`%d*%s`", k->default_times, k->default_of);
  else if (k->default_of) fprintf(f, "`%s`", k->default_of);
  else if (!k->has_default) fprintf(f, "none");
  else if (k->kind == FF_KIND_BOOLEAN) fprintf(f, "`%s`", k->default_number != 0 ? "true" : "false");
  else if (k->default_string) fprintf(f, "`\"%s\"`", k->default_string);
  else fprintf(f, "`%s`", number_text(k->default_number, num));
  fprintf(f, " | ");
  switch (k->kind) {
  case FF_KIND_ENUM:
    for (int j = 0; k->values[j]; j++) fprintf(f, "%s`\"%s\"`", j ? ", " : "", k->values[j]);
    break;
  case FF_KIND_INT: fprintf(f, "%.0f..%.0f", k->min, k->max); break;
  case FF_KIND_NUMBER:
    fprintf(f, "> %s, ", number_text(k->min, num));
    fprintf(f, "<= %s", number_text(k->max, num));
    break;
  case FF_KIND_BOOLEAN: fprintf(f, "`true`, `false`"); break;
  case FF_KIND_IDENTIFIER: fprintf(f, "a C identifier, at most %.0f characters", k->max); break;
  case FF_KIND_PATH: fprintf(f, "a file, at most %.0f characters", k->max); break;
  default: fprintf(f, "at most %.0f characters", k->max);
  }
  fprintf(f, " | ");
  md_text(f, k->doc);
  int n = 0;
  if (k->arches != FF_ANY_ARCH)
    for (int a = 0; a < 3; a++)
      if (k->arches >> a & 1u) fprintf(f, "%s`arch = \"%s\"`", n++ ? ", " : ". Only with ", arch_word(a));
  for (int c = 0; c < FF_COND_COUNT; c++)
    if (k->needs >> c & 1u) {
      fputs(n++ ? ", " : ". Only with ", f);
      md_condition(f, &ff_rt_conditions[c]);
    }
  fprintf(f, " |\n");
}

static void print_markdown(FILE *f) {
  fprintf(f, "| key | default | values | meaning |\n|---|---|---|---|\n");
  for (int i = 0; i < FF_KEY_COUNT; i++) md_key(f, &ff_rt_keys[i]);
}

int ff_schema_text(enum ff_schema_format format, char **text, ff_error *err) {
  if (!text) return null_arg(err, "ff_schema_text", "text");
  if (format != FF_SCHEMA_JSON && format != FF_SCHEMA_MARKDOWN)
    return ff_fail(err, FF_EINVAL, "ff_schema_text: format %d is not FF_SCHEMA_JSON or FF_SCHEMA_MARKDOWN",
                   (int)format);
  size_t n;
  FILE *f = open_memstream(text, &n);
  if (!f) return ff_fail(err, FF_ENOMEM, "out of memory");
  if (format == FF_SCHEMA_MARKDOWN) print_markdown(f);
  else print_json(f);
  int failed = ferror(f);
  if (fclose(f) || failed) {
    free(*text);
    *text = NULL;
    return ff_fail(err, FF_ENOMEM, "out of memory");
  }
  return 0;
}
