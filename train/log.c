/* log.c - a run's log, a row per optimizer step: CSV with a header row,
 * or JSON lines for a path ending in .jsonl or .json.  Each row is flushed
 * as it is written, so the log can be followed while training runs. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixformer_train.h"

struct ff_train_log {
  FILE *f;
  int json;
  char *path;
};

static int ends_with(const char *s, const char *tail) {
  size_t n = strlen(s), k = strlen(tail);
  return n >= k && !strcmp(s + n - k, tail);
}

ff_train_log *ff_train_log_open(const char *path, int append, ff_error *err) {
  ff_train_log *l = calloc(1, sizeof *l);
  if (l) l->path = malloc(strlen(path) + 1);
  if (!l || !l->path) {
    free(l);
    ff_fail(err, FF_ENOMEM, "out of memory");
    return NULL;
  }
  strcpy(l->path, path);
  l->json = ends_with(path, ".jsonl") || ends_with(path, ".json");
  l->f = fopen(path, append ? "a" : "w");
  if (!l->f) {
    ff_fail(err, FF_EIO, "%s: cannot write: %s", path, strerror(errno));
    free(l->path), free(l);
    return NULL;
  }
  if (!l->json && !fseek(l->f, 0, SEEK_END) && ftell(l->f) == 0) /* a new or empty file: the header */
    fprintf(l->f, "step,loss,lr,grad_norm,tokens,seconds,tokens_per_s,valid_loss,valid_exact\n");
  return l;
}

/* a number, or an empty CSV field / JSON null when not measured */
static void number(FILE *f, int json, double v, int measured) {
  if (!measured || !isfinite(v)) fputs(json ? "null" : "", f);
  else fprintf(f, "%.9g", v);
}

int ff_train_log_write(ff_train_log *l, const ff_train_report *r, ff_error *err) {
  double tps = r->seconds > 0 ? (double)r->tokens / r->seconds : 0.0;
  if (l->json) {
    fprintf(l->f, "{\"step\": %lld, \"loss\": %.9g, \"lr\": %.9g, \"grad_norm\": %.9g, \"tokens\": %lld, "
                  "\"seconds\": %.6f, \"tokens_per_s\": %.1f, \"valid_loss\": ", (long long)r->step, r->loss, r->lr,
            r->grad_norm, (long long)r->tokens, r->seconds, tps);
    number(l->f, 1, r->valid_loss, r->evaluated);
    fputs(", \"valid_exact\": ", l->f);
    number(l->f, 1, r->valid_exact, r->evaluated && r->valid_exact >= 0);
    fputs("}\n", l->f);
  } else {
    fprintf(l->f, "%lld,%.9g,%.9g,%.9g,%lld,%.6f,%.1f,", (long long)r->step, r->loss, r->lr, r->grad_norm,
            (long long)r->tokens, r->seconds, tps);
    number(l->f, 0, r->valid_loss, r->evaluated);
    fputc(',', l->f);
    number(l->f, 0, r->valid_exact, r->evaluated && r->valid_exact >= 0);
    fputc('\n', l->f);
  }
  if (fflush(l->f) || ferror(l->f)) return ff_fail(err, FF_EIO, "%s: cannot write: %s", l->path, strerror(errno));
  return 0;
}

int ff_train_log_close(ff_train_log *l, ff_error *err) {
  if (!l) return 0;
  int rc = fclose(l->f) ? ff_fail(err, FF_EIO, "%s: cannot write: %s", l->path, strerror(errno)) : 0;
  free(l->path), free(l);
  return rc;
}
