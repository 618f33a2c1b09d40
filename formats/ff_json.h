/* ff_json.h - the one way fixformer reads JSON (formats/json.c).  Internal:
 * the runtime, the host and the CLI; not installed. */
#ifndef FF_JSON_H
#define FF_JSON_H

#include <stddef.h>

#include "ff_error.h"

struct cJSON;

/* Parses len bytes of text and refuses a key that appears twice in one
 * object, at any depth: cJSON's lookups take the first, Python's json (what
 * transformers and safetensors' writers read) the last, so such a file means
 * two things.  NULL and one line in err naming what (a path, "header") and
 * the key; free the tree with cJSON_Delete. */
struct cJSON *ff_json_parse(const char *text, size_t len, const char *what, ff_error *err);
/* ff_json_parse of the file at path, read whole (ff_read_file): NULL and one
 * line in err (its code: the read's or FF_EFORMAT) when it cannot be */
struct cJSON *ff_json_read(const char *path, ff_error *err);
/* The same check on a tree already parsed (a reader that parses to find out
 * whether a file is its format at all): 0 or FF_EFORMAT. */
int ff_json_unique(const struct cJSON *root, const char *what, ff_error *err);

/* Whether the JSON text holds a NUL byte or a \u0000 escape (cJSON would
 * cut a string short at it, silently). */
int ff_json_has_nul(const char *text, size_t len);

#endif
