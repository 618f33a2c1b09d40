/* vocab.c - a token vocabulary read from JSON (cJSON): text to ids by
 * longest match, ids to text (tok_encode.c, on the tables it builds). */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "ff_io.h"
#include "ff_json.h"
#include "tok_internal.h"

#define VOCAB_MAX_BYTES (16u << 20)
#define VOCAB_MAX_TOKENS (1 << 24)

void ff_vocab_free(ff_vocab *v) {
  for (int i = 0; v->tokens && i < v->size; i++) free(v->tokens[i]);
  free(v->tokens), free(v->lens), free(v->index), free(v->special);
  memset(v, 0, sizeof *v);
}

/* an optional special id: absent -> -1 */
static int special(const char *path, const cJSON *root, const char *key, int size, int *out, ff_error *err) {
  const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, key);
  *out = -1;
  if (!j || cJSON_IsNull(j)) return 0;
  double d = cJSON_IsNumber(j) ? j->valuedouble : -1;
  if (!(d >= 0 && d < size) || d != (double)(int)d) /* in range first: (int)1e300 is undefined */
    return ff_fail(err, FF_EFORMAT, "%s: \"%s\" must be a token id in [0, %d)", path, key, size);
  *out = (int)d;
  return 0;
}


/* tokens[i]: a non-empty string of printable bytes (UTF-8 passes); tab,
 * newline and carriage return are text a character-level model writes, other
 * control characters (ESC of a terminal sequence) are refused */
static int copy_token(const char *path, const cJSON *t, int i, char **out, ff_error *err) {
  if (!cJSON_IsString(t) || !t->valuestring[0])
    return ff_fail(err, FF_EFORMAT, "%s: tokens[%d] is not a non-empty string", path, i);
  size_t tl = strlen(t->valuestring) + 1;
  for (size_t k = 0; k + 1 < tl; k++) {
    unsigned char c = (unsigned char)t->valuestring[k];
    if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f)
      return ff_fail(err, FF_EFORMAT, "%s: tokens[%d] contains the control character 0x%02x", path, i, c);
  }
  if (!(*out = malloc(tl))) return ff_fail(err, FF_ENOMEM, "out of memory");
  memcpy(*out, t->valuestring, tl);
  return 0;
}

static int parse_tokens(const char *path, const cJSON *root, int expected_size, ff_vocab *v, ff_error *err) {
  const cJSON *tokens = cJSON_GetObjectItemCaseSensitive(root, "tokens");
  int n = cJSON_IsArray(tokens) ? cJSON_GetArraySize(tokens) : 0;
  if (n < 1 || n > VOCAB_MAX_TOKENS)
    return ff_fail(err, FF_EFORMAT, "%s: \"tokens\" must be a non-empty array of at most %d strings", path,
                   VOCAB_MAX_TOKENS);
  if (expected_size > 0 && n != expected_size)
    return ff_fail(err, FF_ESHAPE, "%s: %d tokens, but the model's vocab is %d", path, n, expected_size);
  if (!(v->tokens = calloc((size_t)n, sizeof *v->tokens))) return ff_fail(err, FF_ENOMEM, "out of memory");
  v->size = n;
  int i = 0, rc = 0;
  for (const cJSON *t = tokens->child; t && !rc; t = t->next, i++) rc = copy_token(path, t, i, &v->tokens[i], err);
  return rc;
}

static int is_special(const ff_vocab *v, int id) { return id == v->pad || id == v->bos || id == v->eos || id == v->unk; }

/* the index encode looks tokens up in: special ids left out (text never
 * holds them), the lowest id of a string first */
static int vocab_index(ff_vocab *v, ff_error *err) {
  v->icap = ff_tok_index_cap((size_t)v->size);
  v->lens = malloc(sizeof *v->lens * (size_t)v->size);
  v->index = calloc(v->icap, sizeof *v->index);
  v->special = calloc((size_t)v->size, 1);
  if (!v->lens || !v->index || !v->special) return ff_fail(err, FF_ENOMEM, "out of memory");
  for (int i = 0; i < v->size; i++) {
    v->lens[i] = (uint32_t)strlen(v->tokens[i]);
    if ((v->special[i] = (unsigned char)is_special(v, i))) continue;
    ff_tok_insert(v->index, v->icap, v->tokens, v->lens, i);
    if (v->lens[i] > v->max_len) v->max_len = v->lens[i];
  }
  return 0;
}

int ff_vocab_parse(const char *path, const char *text, size_t len, int expected_size, ff_vocab *v,
                   ff_error *err) {
  memset(v, 0, sizeof *v);
  v->pad = v->bos = v->eos = v->unk = -1;
  if (len > VOCAB_MAX_BYTES)
    return ff_fail(err, FF_EFORMAT, "%s: vocabulary larger than %u bytes", path, VOCAB_MAX_BYTES);
  if (ff_json_has_nul(text, len))
    return ff_fail(err, FF_EFORMAT, "%s: a NUL byte or \\u0000 (no token may hold NUL)", path);
  cJSON *root = ff_json_parse(text, len, path, err);
  int rc;
  if (!root) return FF_EFORMAT;
  if (!cJSON_IsObject(root)) {
    rc = ff_fail(err, FF_EFORMAT, "%s: not a JSON object", path);
    goto done;
  }
  if ((rc = parse_tokens(path, root, expected_size, v, err))) goto done;
  int n = v->size;
  if ((rc = special(path, root, "pad", n, &v->pad, err)) || (rc = special(path, root, "bos", n, &v->bos, err)) ||
      (rc = special(path, root, "eos", n, &v->eos, err)) || (rc = special(path, root, "unk", n, &v->unk, err)))
    goto done;
  const cJSON *lower = cJSON_GetObjectItemCaseSensitive(root, "lowercase");
  if (lower && !cJSON_IsBool(lower) && !cJSON_IsNull(lower)) {
    rc = ff_fail(err, FF_EFORMAT, "%s: \"lowercase\" must be true or false", path);
    goto done;
  }
  v->lowercase = cJSON_IsTrue(lower);
  rc = vocab_index(v, err);
done:
  cJSON_Delete(root);
  if (rc) ff_vocab_free(v);
  return rc;
}

int ff_vocab_load(const char *path, int expected_size, ff_vocab *v, ff_error *err) {
  uint8_t *text;
  size_t len;
  memset(v, 0, sizeof *v);
  v->pad = v->bos = v->eos = v->unk = -1;
  int rc = ff_read_file(path, &text, &len, err);
  if (rc) return rc;
  rc = ff_vocab_parse(path, (const char *)text, len, expected_size, v, err);
  free(text);
  return rc;
}

ff_tok_tables ff_vocab_tables(const ff_vocab *v) {
  ff_tok_tables t;
  memset(&t, 0, sizeof t);
  t.kind = FF_TOK_KIND_VOCAB, t.size = v->size, t.tok = (const char *const *)v->tokens, t.len = v->lens;
  t.special = v->special, t.index = v->index, t.icap = v->icap, t.max_len = v->max_len, t.unk = v->unk;
  t.lowercase = v->lowercase;
  return t;
}

int ff_vocab_encode(const ff_vocab *v, const char *text, int32_t *ids, int cap, int *n, ff_error *err) {
  ff_tok_tables t = ff_vocab_tables(v);
  return ff_tok_encode_text(&t, text, ids, cap, n, err);
}

size_t ff_vocab_decode(const ff_vocab *v, const int32_t *ids, int n, char *text, size_t cap) {
  ff_tok_tables t = ff_vocab_tables(v);
  return ff_tok_decode(&t, ids, n, text, cap);
}
