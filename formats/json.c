/* json.c - JSON as every reader here takes it: cJSON's parse, then the
 * checks that make one file mean one thing to every JSON reader (no key twice
 * in an object, nothing after the value). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "ff_io.h" /* ff_read_file */
#include "ff_json.h"

static int by_key(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* the object o as a message names it */
static void where(const cJSON *o, const cJSON *root, char *buf, size_t n) {
  if (o == root) snprintf(buf, n, "the top-level object");
  else if (o->string) snprintf(buf, n, "object \"%.60s\"", o->string);
  else snprintf(buf, n, "an object in an array");
}

/* Walks the tree without recursion (a stack of the containers still to
 * visit); each object's keys sorted, so a key twice is two neighbours. */
int ff_json_unique(const cJSON *root, const char *what, ff_error *err) {
  const cJSON **todo = NULL;
  const char **keys = NULL;
  size_t n_todo = 0, cap_todo = 0, cap_keys = 0;
  int rc = 0;
  if (root && root->child) {
    if (!(todo = malloc(sizeof *todo * (cap_todo = 16)))) return ff_fail(err, FF_ENOMEM, "%s: out of memory", what);
    todo[n_todo++] = root;
  }
  while (n_todo && !rc) {
    const cJSON *o = todo[--n_todo];
    size_t n = 0;
    for (const cJSON *c = o->child; c && !rc; c = c->next) {
      if (c->child && n_todo == cap_todo) { /* a container: visited later */
        const cJSON **grown = realloc(todo, sizeof *todo * (cap_todo *= 2));
        if (!grown) rc = ff_fail(err, FF_ENOMEM, "%s: out of memory", what);
        else todo = grown;
      }
      if (!rc && c->child) todo[n_todo++] = c;
      if (!rc && cJSON_IsObject(o) && n == cap_keys) {
        const char **grown = realloc(keys, sizeof *keys * (cap_keys = cap_keys ? 2 * cap_keys : 64));
        if (!grown) rc = ff_fail(err, FF_ENOMEM, "%s: out of memory", what);
        else keys = grown;
      }
      if (!rc && cJSON_IsObject(o)) keys[n++] = c->string ? c->string : "";
    }
    if (rc || !cJSON_IsObject(o)) continue;
    qsort(keys, n, sizeof *keys, by_key);
    for (size_t i = 1; i < n && !rc; i++)
      if (!strcmp(keys[i], keys[i - 1])) {
        char in[96];
        where(o, root, in, sizeof in);
        rc = ff_fail(err, FF_EFORMAT, "%s: key \"%.80s\" appears twice in %s (JSON readers differ on which one counts)",
                     what, keys[i], in);
      }
  }
  free(todo);
  free(keys);
  return rc;
}

cJSON *ff_json_parse(const char *text, size_t len, const char *what, ff_error *err) {
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
  if (!root) {
    size_t at = end && end >= text && end <= text + len ? (size_t)(end - text) : 0;
    ff_fail(err, FF_EFORMAT, "%s: not valid JSON (at byte %zu)", what, at);
    return NULL;
  }
  while (end < text + len && (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r')) end++;
  if (end < text + len) { /* cJSON stops after the value; Python's json refuses what follows it */
    ff_fail(err, FF_EFORMAT, "%s: bytes after the JSON value (at byte %zu)", what, (size_t)(end - text));
    cJSON_Delete(root);
    return NULL;
  }
  if (ff_json_unique(root, what, err)) {
    cJSON_Delete(root);
    return NULL;
  }
  return root;
}

/* cJSON turns \u0000 into a NUL that would cut a token short, silently: a
 * backslash outside a string is invalid JSON, so every one here starts an
 * escape. */
int ff_json_has_nul(const char *text, size_t len) {
  if (memchr(text, 0, len)) return 1;
  for (size_t i = 0; i + 1 < len; i++)
    if (text[i] == '\\') {
      if (text[i + 1] == 'u' && i + 5 < len && !memcmp(text + i + 2, "0000", 4)) return 1;
      i++; /* the escaped character */
    }
  return 0;
}

cJSON *ff_json_read(const char *path, ff_error *err) {
  uint8_t *text;
  size_t len;
  if (ff_read_file(path, &text, &len, err)) return NULL;
  cJSON *root = ff_json_parse((const char *)text, len, path, err);
  free(text);
  return root;
}
