/* ff_rt_schema.h - the rows of include/ff_schema.h as data (schema.c): the
 * description's keys, the conditions keys and tensors need, the tensors'
 * kinds; reading a config's field by key and writing a description's text.
 * What the host pushes into Lua, `fixformer info` prints and every consumer
 * of a key or a weight reads instead of its name. */
#ifndef FF_RT_SCHEMA_H
#define FF_RT_SCHEMA_H

#include <stddef.h>

#include "ff_config.h"

enum ff_key_kind { FF_KIND_IDENTIFIER, FF_KIND_ENUM, FF_KIND_INT, FF_KIND_NUMBER, FF_KIND_BOOLEAN, FF_KIND_STRING,
                   FF_KIND_PATH };
enum ff_key_store { FF_STORE_NAME, FF_STORE_TENSOR_NAME, FF_STORE_PATH, FF_STORE_INT, FF_STORE_FLOAT, FF_STORE_BOOL,
                    FF_STORE_NOT, FF_STORE_ENUM, FF_STORE_NONE };
enum ff_test { FF_TEST_SET, FF_TEST_TRUE, FF_TEST_FALSE, FF_TEST_IS };

/* A description key (a row of FF_DESCRIPTION_KEYS). */
typedef struct {
  const char *key;
  enum ff_key_kind kind;
  enum ff_key_store store;
  size_t offset;               /* of its field in ff_config (store NONE: 0) */
  const char *const *values;   /* ENUM: the words, in the C enum's order, NULL-terminated */
  int required, has_default;   /* a literal default: default_number, or default_string */
  double default_number;       /* NUMBER, INT; BOOLEAN 0 or 1 */
  const char *default_string;  /* ENUM, STRING */
  const char *default_of;      /* a derived default: default_times * that key, or NULL */
  int default_times;
  double min, max;             /* INT: inclusive; NUMBER: (min, max]; strings: max is the longest */
  unsigned needs, arches;      /* FF_IF bits; FF_ARCH_BIT bits */
  const char *doc;
} ff_rt_key;
extern const ff_rt_key ff_rt_keys[FF_KEY_COUNT];
const char *ff_rt_key_kind_name(enum ff_key_kind k); /* "identifier", "enum", "int", ... */

/* A condition (a row of FF_CONDITIONS). */
typedef struct {
  const char *name;
  enum ff_key key;
  enum ff_test test;
  int value;        /* IS: the enum constant */
  const char *why;  /* the validator's "given but ...", or NULL: "<key> is <its value>" */
} ff_rt_condition;
extern const ff_rt_condition ff_rt_conditions[FF_COND_COUNT];
const char *ff_rt_test_name(enum ff_test t); /* "set", "true", "false", "is" */

/* A tensor kind (a row of FF_WEIGHT_KINDS). */
#define FF_MAX_PARTS 3
typedef struct {
  const char *role;
  enum ff_scope scope;
  unsigned needs;
  enum ff_dim rows, cols;
  enum ff_init init;
  enum ff_dim fan_in;
  unsigned flags;                     /* FF_IS_* */
  enum ff_key named_by;               /* FF_KEY_NONE: named by its role */
  unsigned parts_need;                /* when the parts may stand in for it */
  const char *parts[FF_MAX_PARTS];    /* roles of its parts, or NULL */
  enum ff_dim part_rows[FF_MAX_PARTS];
} ff_rt_weight_kind;
extern const ff_rt_weight_kind ff_rt_weight_kinds[FF_TENSOR_COUNT];
/* A row of FF_WEIGHT_FOLDS: scale folded into weight and, if the model has it, bias. */
typedef struct {
  enum ff_tensor_kind scale, weight, bias;
} ff_rt_weight_fold;
extern const ff_rt_weight_fold ff_rt_weight_folds[FF_FOLD_COUNT + 1]; /* (+ 1: the list may be empty) */
/* The row whose scale is kind k, or NULL. */
const ff_rt_weight_fold *ff_rt_fold_of(enum ff_tensor_kind k);
extern const char *const ff_rt_dim_names[FF_DIM_COUNT];     /* "d_model", "qkv", ... ("" for NONE) */
extern const char *const ff_rt_dim_docs[FF_DIM_COUNT];
extern const char *const ff_rt_scope_names[FF_SCOPE_COUNT]; /* "embeddings", "layer", ... */
extern const char *const ff_rt_scope_docs[FF_SCOPE_COUNT];
extern const char *const ff_rt_init_names[FF_INIT_COUNT];   /* "xavier_uniform", ... */

/* A config's value of key: numbers, 0/1 for BOOLEAN (NOT: the key's, not
 * the field's), the index of ENUM; NaN for strings and `layers`. */
double ff_rt_key_number(const ff_config *c, enum ff_key key);
/* ... its string: IDENTIFIER, STRING, PATH, the word of ENUM; NULL otherwise. */
const char *ff_rt_key_string(const ff_config *c, enum ff_key key);
/* Whether every condition of needs (FF_IF bits) holds for c. */
int ff_rt_needs_hold(const ff_config *c, unsigned needs);
/* A size of a shape for c (FF_DIM_NONE: 0). */
int ff_rt_dim(const ff_config *c, enum ff_dim d);

/* A description's keys as text: v[key] for each key in the rows' order,
 * "  key = value,[  -- comment]\n" for those set.  Strings, ENUM words and
 * PATHs quoted, numbers as the shortest text reading back the same double
 * (float32: the same float), literal as it is when given (`nil`). */
typedef struct {
  int set;
  double number;
  const char *string;
  const char *literal;
  const char *comment;
} ff_rt_value;
/* The text (malloc'd, NULL when out of memory). */
char *ff_rt_describe(const ff_rt_value v[FF_KEY_COUNT], int float32);
/* v[key] = c's value for every key c has (not `layers`; unset: the keys whose
 * needs or arches c does not meet, a key naming a tensor c does not have, a
 * file not given). */
void ff_rt_config_values(const ff_config *c, ff_rt_value v[FF_KEY_COUNT]);

#endif
