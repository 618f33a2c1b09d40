/* args.c - the command line's conventions, one place for every command:
 * `--flag value` and `--flag=value`, short aliases (-o, -h, -q), one
 * operand, integers checked, and CLI_EUSAGE (exit 2) for a line that is not
 * well formed. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

const char *cli_value(const cli_flag *flags, const char *name) {
  for (const cli_flag *f = flags; f->name; f++)
    if (!strcmp(f->name, name)) return f->value;
  return NULL;
}

/* The flag named by a (up to '=' when eq), or NULL. */
static cli_flag *find_flag(cli_flag *flags, const char *a, const char *eq) {
  size_t n = eq ? (size_t)(eq - a) : strlen(a);
  for (cli_flag *f = flags; f->name; f++)
    if ((strlen(f->name) == n && !strncmp(a, f->name, n)) || (f->alias && strlen(f->alias) == n && !strncmp(a, f->alias, n)))
      return f;
  return NULL;
}

int cli_parse(const cli_command *cmd, int argc, char **argv, const char **operand, ff_error *err) {
  *operand = NULL;
  int only_operands = 0; /* after "--" */
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (!only_operands && !strcmp(a, "--")) {
      only_operands = 1;
    } else if (!only_operands && a[0] == '-' && a[1]) {
      const char *eq = a[1] == '-' ? strchr(a, '=') : NULL;
      cli_flag *f = find_flag(cmd->flags, a, eq);
      if (!f)
        return ff_fail(err, CLI_EUSAGE, "unknown option '%.*s' (see fixformer %s --help)",
                       eq ? (int)(eq - a) : (int)strlen(a), a, cmd->name);
      if (!f->takes_value) {
        if (eq) return ff_fail(err, CLI_EUSAGE, "%s takes no value", f->name);
        f->value = "1";
      } else if (eq) {
        f->value = eq + 1;
      } else {
        if (i + 1 >= argc) return ff_fail(err, CLI_EUSAGE, "%s needs a value", f->name);
        f->value = argv[++i];
      }
    } else if (!*operand && cmd->operand) {
      *operand = a;
    } else {
      return ff_fail(err, CLI_EUSAGE, "unexpected argument '%s' (see fixformer %s --help)", a, cmd->name);
    }
  }
  if (!*operand && cmd->operand && !cmd->operand_optional)
    return ff_fail(err, CLI_EUSAGE, "missing %s (see fixformer %s --help)", cmd->operand, cmd->name);
  return 0;
}

int cli_require(const cli_flag *flags, const char *name, const char **out, ff_error *err) {
  *out = cli_value(flags, name);
  if (!*out) return ff_fail(err, CLI_EUSAGE, "%s is required", name);
  return 0;
}

int cli_int(const cli_flag *flags, const char *name, int def, int *out, ff_error *err) {
  const char *s = cli_value(flags, name);
  *out = def;
  if (!s) return 0;
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < 0 || v > 1 << 30)
    return ff_fail(err, CLI_EUSAGE, "%s: '%s' is not a non-negative integer", name, s);
  *out = (int)v;
  return 0;
}

int cli_train_shape(const cli_flag *flags, const ff_config *c, ff_train_shape *shape, ff_error *err) {
  const char *seq = cli_value(flags, "--seq");
  int rc = cli_int(flags, "--batch", 32, &shape->batch, err);
  shape->src = shape->tgt = c->max_seq;
  shape->recompute = cli_value(flags, "--recompute") != NULL;
  if (!rc && seq) { /* N, or S,T (encoder-decoder: source and target) */
    char extra;
    int k = sscanf(seq, "%d,%d%c", &shape->src, &shape->tgt, &extra);
    if (k == 1 && !strchr(seq, ',')) shape->tgt = shape->src;
    if ((k != 1 && k != 2) || (k == 1 && strchr(seq, ',')) || strspn(seq, "0123456789,") != strlen(seq))
      return ff_fail(err, CLI_EUSAGE, "--seq: '%s' is not N or S,T (positions)", seq);
  }
  if (!rc && (shape->batch < 1 || shape->src < 1 || shape->tgt < 1 || shape->src > c->max_seq ||
              shape->tgt > c->max_seq))
    rc = ff_fail(err, CLI_EUSAGE, "--batch %d --seq %d,%d: a batch of at least 1 and positions within 1..max_seq (%d)",
                 shape->batch, shape->src, shape->tgt, c->max_seq);
  return rc;
}

int cli_engine(const cli_flag *flags, int *engine, ff_error *err) {
  const char *s = cli_value(flags, "--engine"), *env = getenv("FIXFORMER_ENGINE");
  if (!s && env && *env && ff_engine_parse(env) < 0) /* ff_engine_default would pass over it */
    return ff_fail(err, CLI_EUSAGE, "FIXFORMER_ENGINE: '%s' is not one of cc, tcc, runtime", env);
  *engine = s ? ff_engine_parse(s) : (int)ff_engine_default();
  if (*engine < 0) return ff_fail(err, CLI_EUSAGE, "--engine: '%s' is not one of cc, tcc, runtime", s);
  return 0;
}

int cli_quiet(const cli_flag *flags) { return cli_value(flags, "--quiet") != NULL; }
