/* schema.c - include/ff_schema.h's rows as data, a config's fields by key,
 * the conditions, the sizes of shapes, and a description's text. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ff_io.h"
#include "ff_rt_schema.h"

/* ---- the keys ---------------------------------------------------------------- */

#define FF_WORD(constant, word) word,
#define KEY_VALUES(key, kind, store, field, tag, values, ...) static const char *const key##_values[] = {values(FF_WORD) NULL};
FF_DESCRIPTION_KEYS(KEY_VALUES)
#undef KEY_VALUES
#undef FF_WORD

#define FF_REQUIRED .required = 1
#define FF_NO_DEFAULT .required = 0
#define FF_DEFAULT(x) .has_default = 1, .default_number = (x)
#define FF_DEFAULT_STR(s) .has_default = 1, .default_string = (s)
#define FF_DEFAULT_OF(times, key) .default_times = (times), .default_of = #key
#define OFFSET_NAME(field) offsetof(ff_config, field)
#define OFFSET_TENSOR_NAME(field) offsetof(ff_config, field)
#define OFFSET_PATH(field) offsetof(ff_config, field)
#define OFFSET_INT(field) offsetof(ff_config, field)
#define OFFSET_FLOAT(field) offsetof(ff_config, field)
#define OFFSET_BOOL(field) offsetof(ff_config, field)
#define OFFSET_NOT(field) offsetof(ff_config, field)
#define OFFSET_ENUM(field) offsetof(ff_config, field)
#define OFFSET_NONE(field) 0
#define KEY_ROW(key_, kind_, store_, field, tag, values_, dflt, lo, hi, needs_, arches_, doc_)                          \
  {.key = #key_, .kind = FF_KIND_##kind_, .store = FF_STORE_##store_, .offset = OFFSET_##store_(field),                 \
   .values = key_##_values, dflt, .min = (lo), .max = (hi), .needs = (needs_), .arches = (arches_), .doc = (doc_)},
const ff_rt_key ff_rt_keys[FF_KEY_COUNT] = {FF_DESCRIPTION_KEYS(KEY_ROW)};
#undef KEY_ROW

const char *ff_rt_key_kind_name(enum ff_key_kind k) {
  static const char *const names[] = {"identifier", "enum", "int", "number", "boolean", "string", "path"};
  return names[k];
}

/* ---- the conditions ---------------------------------------------------------- */

#define CONDITION_ROW(id, name_, key_, test_, value_, why_)                                                             \
  {.name = name_, .key = FF_KEY_##key_, .test = FF_TEST_##test_, .value = (value_), .why = why_},
const ff_rt_condition ff_rt_conditions[FF_COND_COUNT] = {FF_CONDITIONS(CONDITION_ROW)};
#undef CONDITION_ROW

const char *ff_rt_test_name(enum ff_test t) {
  static const char *const names[] = {"set", "true", "false", "is"};
  return names[t];
}

/* ---- the tensor kinds -------------------------------------------------------- */

#define FF_NO_PARTS .parts_need = 0
#define FF_PARTS(need, p1, r1, p2, r2, p3, r3)                                                                          \
  .parts_need = (need), .parts = {p1, p2, p3}, .part_rows = {FF_DIM_##r1, FF_DIM_##r2, FF_DIM_##r3}
#define KIND_ROW(id, role_, scope_, needs_, rows_, cols_, init_, fan_in_, flags_, named_by_, slot, parts_)             \
  {.role = role_, .scope = FF_SCOPE_##scope_, .needs = (needs_), .rows = FF_DIM_##rows_, .cols = FF_DIM_##cols_,        \
   .init = FF_INIT_##init_, .fan_in = FF_DIM_##fan_in_, .flags = (flags_), .named_by = FF_KEY_##named_by_, parts_},
const ff_rt_weight_kind ff_rt_weight_kinds[FF_TENSOR_COUNT] = {FF_WEIGHT_KINDS(KIND_ROW)};
#undef KIND_ROW

#define FOLD_ROW(scale_, weight_, bias_) {FF_TENSOR_##scale_, FF_TENSOR_##weight_, FF_TENSOR_##bias_},
const ff_rt_weight_fold ff_rt_weight_folds[FF_FOLD_COUNT + 1] = {FF_WEIGHT_FOLDS(FOLD_ROW){FF_TENSOR_COUNT, 0, 0}};
#undef FOLD_ROW

const ff_rt_weight_fold *ff_rt_fold_of(enum ff_tensor_kind k) {
  for (int i = 0; i < FF_FOLD_COUNT; i++)
    if (ff_rt_weight_folds[i].scale == k) return &ff_rt_weight_folds[i];
  return NULL;
}

#define NAME_OF(id, name, ...) name,
#define DOC_OF(id, name, doc) doc,
const char *const ff_rt_dim_names[FF_DIM_COUNT] = {FF_DIMS(NAME_OF)};
const char *const ff_rt_dim_docs[FF_DIM_COUNT] = {FF_DIMS(DOC_OF)};
const char *const ff_rt_scope_names[FF_SCOPE_COUNT] = {FF_SCOPES(NAME_OF)};
const char *const ff_rt_scope_docs[FF_SCOPE_COUNT] = {FF_SCOPES(DOC_OF)};
const char *const ff_rt_init_names[FF_INIT_COUNT] = {FF_INITS(NAME_OF)};
#undef NAME_OF
#undef DOC_OF

/* ---- a config by key ----------------------------------------------------------- */

double ff_rt_key_number(const ff_config *c, enum ff_key key) {
  const ff_rt_key *k = &ff_rt_keys[key];
  const char *field = (const char *)c + k->offset;
  int i;
  float f;
  enum ff_arch e; /* every key's enum has the size of an enum */
  switch (k->store) {
  case FF_STORE_INT:
  case FF_STORE_BOOL:
  case FF_STORE_NOT:
    memcpy(&i, field, sizeof i);
    return k->store == FF_STORE_NOT ? !i : i;
  case FF_STORE_FLOAT:
    memcpy(&f, field, sizeof f);
    return f;
  case FF_STORE_ENUM:
    memcpy(&e, field, sizeof e);
    return (double)e;
  default:
    return NAN;
  }
}

const char *ff_rt_key_string(const ff_config *c, enum ff_key key) {
  const ff_rt_key *k = &ff_rt_keys[key];
  switch (k->store) {
  case FF_STORE_NAME:
  case FF_STORE_TENSOR_NAME:
  case FF_STORE_PATH:
    return (const char *)c + k->offset;
  case FF_STORE_ENUM: {
    int e = (int)ff_rt_key_number(c, key), n = 0;
    while (k->values[n]) n++;
    return e >= 0 && e < n ? k->values[e] : NULL;
  }
  default:
    return NULL;
  }
}

static int holds(const ff_config *c, const ff_rt_condition *k) {
  double v = ff_rt_key_number(c, k->key);
  switch (k->test) {
  case FF_TEST_SET: return v != 0;
  case FF_TEST_TRUE: return v != 0;
  case FF_TEST_FALSE: return v == 0;
  default: return v == k->value;
  }
}

int ff_rt_needs_hold(const ff_config *c, unsigned needs) {
  for (int i = 0; i < FF_COND_COUNT; i++)
    if ((needs >> i & 1u) && !holds(c, &ff_rt_conditions[i])) return 0;
  return 1;
}

int ff_rt_dim(const ff_config *c, enum ff_dim d) {
  int kvd = ff_config_kv_heads(c) * (c->heads > 0 ? c->d_model / c->heads : 0);
  switch (d) {
  case FF_DIM_D_MODEL: return c->d_model;
  case FF_DIM_D_FF: return c->d_ff;
  case FF_DIM_UP: return c->activation == FF_ACT_SWIGLU ? 2 * c->d_ff : c->d_ff;
  case FF_DIM_QKV: return c->d_model + 2 * kvd;
  case FF_DIM_KV: return kvd;
  case FF_DIM_VOCAB: return c->vocab;
  case FF_DIM_MAX_SEQ: return c->max_seq;
  case FF_DIM_TOKEN_TYPES: return c->token_types;
  default: return 0;
  }
}

/* ---- a description's text ------------------------------------------------------- */

typedef struct {
  char *s;
  size_t n, cap;
  int failed;
} text;

static void put(text *t, const char *fmt, const char *a, const char *b) {
  int need = snprintf(NULL, 0, fmt, a, b);
  if (t->failed || need < 0) return;
  if (t->n + (size_t)need + 1 > t->cap) {
    size_t cap = (t->n + (size_t)need + 1) * 2;
    char *s = realloc(t->s, cap);
    if (!s) {
      t->failed = 1;
      return;
    }
    t->s = s, t->cap = cap;
  }
  t->n += (size_t)snprintf(t->s + t->n, t->cap - t->n, fmt, a, b);
}

char *ff_rt_describe(const ff_rt_value v[FF_KEY_COUNT], int float32) {
  text t = {NULL, 0, 0, 0};
  put(&t, "%s%s", "", "");
  for (int i = 0; i < FF_KEY_COUNT; i++) {
    const ff_rt_key *k = &ff_rt_keys[i];
    char num[32];
    if (!v[i].set) continue;
    put(&t, "  %s = %s", k->key, "");
    if (v[i].literal)
      put(&t, "%s%s", v[i].literal, "");
    else if (k->kind == FF_KIND_BOOLEAN)
      put(&t, "%s%s", v[i].number != 0 ? "true" : "false", "");
    else if (k->kind == FF_KIND_INT)
      put(&t, "%s%s", (snprintf(num, sizeof num, "%.0f", v[i].number), num), "");
    else if (k->kind == FF_KIND_NUMBER)
      put(&t, "%s%s", ff_lua_number(v[i].number, float32, num), "");
    else
      put(&t, "\"%s\"%s", v[i].string ? v[i].string : "", "");
    put(&t, ",%s%s\n", v[i].comment ? "  -- " : "", v[i].comment ? v[i].comment : "");
  }
  if (t.failed) {
    free(t.s);
    return NULL;
  }
  return t.s;
}

void ff_rt_config_values(const ff_config *c, ff_rt_value v[FF_KEY_COUNT]) {
  memset(v, 0, sizeof *v * FF_KEY_COUNT);
  for (int i = 0; i < FF_KEY_COUNT; i++) {
    const ff_rt_key *k = &ff_rt_keys[i];
    if (k->store == FF_STORE_NONE || !(k->arches >> c->arch & 1u) || !ff_rt_needs_hold(c, k->needs)) continue;
    v[i].number = ff_rt_key_number(c, (enum ff_key)i);
    v[i].string = ff_rt_key_string(c, (enum ff_key)i);
    v[i].set = k->store != FF_STORE_PATH || *v[i].string; /* a file not given */
  }
  for (int i = 0; i < FF_TENSOR_COUNT; i++) { /* a tensor's name: with the tensor */
    const ff_rt_weight_kind *w = &ff_rt_weight_kinds[i];
    if (w->named_by != FF_KEY_NONE && !ff_rt_needs_hold(c, w->needs)) v[w->named_by].set = 0;
  }
}
