/* schema.c - `fixformer info --schema`: include/ff_schema.h's tables as
 * JSON (what python/fixformer_schema.json holds), or with --markdown the key
 * table of docs/model-description.md. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

/* the word of architecture a (enum ff_arch) */
static const char *arch_word(int a) { return ff_rt_keys[FF_KEY_arch].values[a]; }

/* s as a JSON string */
static void json_string(const char *s) {
  putchar('"');
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\') printf("\\%c", ch);
    else if (ch < 0x20) printf("\\u%04x", ch);
    else putchar(ch);
  }
  putchar('"');
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

static void json_number(double x) {
  char num[32];
  printf("%s", number_text(x, num));
}

/* ["vocab", "lm_head"]: the conditions of a needs mask */
static void json_needs(unsigned needs) {
  printf("[");
  for (int c = 0, n = 0; c < FF_COND_COUNT; c++)
    if (needs >> c & 1u) {
      printf(n++ ? ", " : "");
      json_string(ff_rt_conditions[c].name);
    }
  printf("]");
}

static void json_key(const ff_rt_key *k) {
  printf("    {\"key\": ");
  json_string(k->key);
  printf(", \"kind\": \"%s\"", ff_rt_key_kind_name(k->kind));
  if (k->values[0]) {
    printf(", \"values\": [");
    for (int j = 0; k->values[j]; j++) {
      printf(j ? ", " : "");
      json_string(k->values[j]);
    }
    printf("]");
  }
  if (k->required) printf(", \"required\": true");
  if (k->has_default) {
    printf(", \"default\": ");
    if (k->kind == FF_KIND_BOOLEAN) printf(k->default_number != 0 ? "true" : "false");
    else if (k->default_string) json_string(k->default_string);
    else json_number(k->default_number);
  }
  if (k->default_of) {
    printf(", \"default_of\": ");
    json_string(k->default_of);
    printf(", \"times\": %d", k->default_times);
  }
  if (k->kind == FF_KIND_INT || k->kind == FF_KIND_NUMBER) {
    printf(", \"min\": ");
    json_number(k->min);
    printf(", \"max\": ");
    json_number(k->max);
  } else if (k->kind != FF_KIND_ENUM && k->kind != FF_KIND_BOOLEAN) {
    printf(", \"maxlen\": %.0f", k->max);
  }
  printf(", \"needs\": ");
  json_needs(k->needs);
  printf(", \"arches\": [");
  for (int a = 0, n = 0; a < 3; a++)
    if (k->arches >> a & 1u) printf("%s\"%s\"", n++ ? ", " : "", arch_word(a));
  printf("], \"doc\": ");
  json_string(k->doc);
  printf("}");
}

static void json_weight(const ff_rt_weight_kind *w) {
  static const struct {
    unsigned flag;
    const char *name;
  } flags[] = {{FF_IS_MATRIX, "matrix"}, {FF_IS_QUANTIZED, "quantized"}, {FF_IS_TIED, "tied"},
               {FF_IS_BIAS, "bias"},     {FF_IS_NORM, "norm"},           {FF_IS_EMBEDDING, "embedding"}};
  printf("    {\"role\": ");
  json_string(w->role);
  printf(", \"scope\": \"%s\", \"needs\": ", ff_rt_scope_names[w->scope]);
  json_needs(w->needs);
  printf(", \"shape\": [\"%s\"", ff_rt_dim_names[w->rows]);
  if (w->cols != FF_DIM_NONE) printf(", \"%s\"", ff_rt_dim_names[w->cols]);
  printf("], \"init\": \"%s\", \"fan_in\": \"%s\"", ff_rt_init_names[w->init], ff_rt_dim_names[w->fan_in]);
  for (size_t i = 0; i < sizeof flags / sizeof *flags; i++)
    printf(", \"%s\": %s", flags[i].name, w->flags & flags[i].flag ? "true" : "false");
  if (w->named_by != FF_KEY_NONE) printf(", \"named_by\": \"%s\"", ff_rt_keys[w->named_by].key);
  if (w->parts[0]) {
    printf(", \"parts_need\": ");
    json_needs(w->parts_need);
    printf(", \"parts\": [");
    for (int p = 0; p < FF_MAX_PARTS && w->parts[p]; p++) {
      printf(p ? ", {\"role\": " : "{\"role\": ");
      json_string(w->parts[p]);
      printf(", \"rows\": \"%s\"}", ff_rt_dim_names[w->part_rows[p]]);
    }
    printf("]");
  }
  printf("}");
}

static void print_json(void) {
  printf("{\n  \"keys\": [\n");
  for (int i = 0; i < FF_KEY_COUNT; i++) {
    json_key(&ff_rt_keys[i]);
    printf(i + 1 < FF_KEY_COUNT ? ",\n" : "\n");
  }
  printf("  ],\n  \"conditions\": [\n");
  for (int i = 0; i < FF_COND_COUNT; i++) {
    const ff_rt_condition *c = &ff_rt_conditions[i];
    printf("    {\"name\": \"%s\", \"key\": \"%s\", \"test\": \"%s\"", c->name, ff_rt_keys[c->key].key,
           ff_rt_test_name(c->test));
    if (c->test == FF_TEST_IS) printf(", \"value\": \"%s\"", ff_rt_keys[c->key].values[c->value]);
    if (c->why) {
      printf(", \"why\": ");
      json_string(c->why);
    }
    printf(i + 1 < FF_COND_COUNT ? "},\n" : "}\n");
  }
  printf("  ],\n  \"dims\": [\n");
  for (int i = 1; i < FF_DIM_COUNT; i++) {
    printf("    {\"name\": \"%s\", \"doc\": ", ff_rt_dim_names[i]);
    json_string(ff_rt_dim_docs[i]);
    printf(i + 1 < FF_DIM_COUNT ? "},\n" : "}\n");
  }
  printf("  ],\n  \"scopes\": [\n");
  for (int i = 0; i < FF_SCOPE_COUNT; i++) {
    printf("    {\"name\": \"%s\", \"doc\": ", ff_rt_scope_names[i]);
    json_string(ff_rt_scope_docs[i]);
    printf(i + 1 < FF_SCOPE_COUNT ? "},\n" : "}\n");
  }
  printf("  ],\n  \"weights\": [\n");
  for (int i = 0; i < FF_TENSOR_COUNT; i++) {
    json_weight(&ff_rt_weight_kinds[i]);
    printf(i + 1 < FF_TENSOR_COUNT ? ",\n" : "\n");
  }
  printf("  ]\n}\n");
}

/* ---- the docs' key table ------------------------------------------------------------- */

/* a condition as the docs say it: `vocab`, `lm_head = true`, `positional = "rope"` */
static void md_condition(const ff_rt_condition *c) {
  const ff_rt_key *k = &ff_rt_keys[c->key];
  switch (c->test) {
  case FF_TEST_SET:
    printf(k->kind == FF_KIND_INT && k->min < 1 ? "`%s > 0`" : "`%s`", k->key); /* token_types, vocab */
    break;
  case FF_TEST_TRUE: printf("`%s = true`", k->key); break;
  case FF_TEST_FALSE: printf("`%s = false`", k->key); break;
  default: printf("`%s = \"%s\"`", k->key, k->values[c->value]);
  }
}

/* text with | escaped, as a table cell needs */
static void md_text(const char *s) {
  for (; *s; s++) printf(*s == '|' ? "\\|" : "%c", *s);
}

static void md_key(const ff_rt_key *k) {
  char num[32];
  printf("| `%s` | ", k->key);
  if (k->required) printf("required");
  else if (k->default_of && k->default_times != 1) printf("`%d*%s`", k->default_times, k->default_of);
  else if (k->default_of) printf("`%s`", k->default_of);
  else if (!k->has_default) printf("none");
  else if (k->kind == FF_KIND_BOOLEAN) printf("`%s`", k->default_number != 0 ? "true" : "false");
  else if (k->default_string) printf("`\"%s\"`", k->default_string);
  else printf("`%s`", number_text(k->default_number, num));
  printf(" | ");
  switch (k->kind) {
  case FF_KIND_ENUM:
    for (int j = 0; k->values[j]; j++) printf("%s`\"%s\"`", j ? ", " : "", k->values[j]);
    break;
  case FF_KIND_INT: printf("%.0f..%.0f", k->min, k->max); break;
  case FF_KIND_NUMBER:
    printf("> %s, ", number_text(k->min, num));
    printf("<= %s", number_text(k->max, num));
    break;
  case FF_KIND_BOOLEAN: printf("`true`, `false`"); break;
  case FF_KIND_IDENTIFIER: printf("a C identifier, at most %.0f characters", k->max); break;
  case FF_KIND_PATH: printf("a file, at most %.0f characters", k->max); break;
  default: printf("at most %.0f characters", k->max);
  }
  printf(" | ");
  md_text(k->doc);
  int n = 0;
  if (k->arches != FF_ANY_ARCH)
    for (int a = 0; a < 3; a++)
      if (k->arches >> a & 1u) printf("%s`arch = \"%s\"`", n++ ? ", " : ". Only with ", arch_word(a));
  for (int c = 0; c < FF_COND_COUNT; c++)
    if (k->needs >> c & 1u) {
      printf(n++ ? ", " : ". Only with ");
      md_condition(&ff_rt_conditions[c]);
    }
  printf(" |\n");
}

static void print_markdown(void) {
  printf("| key | default | values | meaning |\n|---|---|---|---|\n");
  for (int i = 0; i < FF_KEY_COUNT; i++) md_key(&ff_rt_keys[i]);
}

int cli_print_schema(int markdown) {
  if (markdown) print_markdown();
  else print_json();
  return 0;
}
