/* options.c - a run's options: defaults, one setter by name for the
 * command line's flags, a description's train block and a checkpoint's
 * record alike, their text, and the checks. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixformer_train.h"
#include "train_internal.h"

void ff_train_options_default(ff_train_options *o) {
  memset(o, 0, sizeof *o);
  o->steps = 1000;
  o->batch = 32;
  o->lr = 1e-3;
  o->beta1 = 0.9, o->beta2 = 0.999;
  o->eps = 1e-8;
  o->weight_decay = 0.01;
  o->no_decay = FF_NO_DECAY_BIAS | FF_NO_DECAY_NORM | FF_NO_DECAY_EMBEDDING;
  o->schedule = FF_SCHEDULE_CONSTANT;
  o->engine = FF_ENGINE_RUNTIME;
  o->threads = 1;
  o->eval_exact = -1;
}

static const char *const schedules[] = {"constant", "noam", "cosine", NULL};
static const char *const formats[] = {"auto", "pairs", "text", "u16", "u32", "llmc", NULL};
static const char *const inits[] = {"transformer", "torch", NULL};

/* ---- values from text ----------------------------------------------------------- */

static int bad(ff_error *err, const char *name, const char *value, const char *want) {
  return ff_fail(err, FF_EINVAL, "%s: '%s' is not %s", name, value, want);
}

static int int_value(const char *name, const char *v, long lo, long hi, int *out, ff_error *err) {
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno || end == v || *end || x < lo || x > hi) {
    char want[96];
    snprintf(want, sizeof want, "an integer in [%ld, %ld]", lo, hi);
    return bad(err, name, v, want);
  }
  *out = (int)x;
  return 0;
}

/* a finite number in [lo, hi] (hi_open: below hi) */
static int real_value(const char *name, const char *v, double lo, double hi, int hi_open, double *out,
                      ff_error *err) {
  char *end;
  errno = 0;
  double x = strtod(v, &end);
  if (errno || end == v || *end || !isfinite(x) || x < lo || x > hi || (hi_open && x >= hi)) {
    char want[96];
    snprintf(want, sizeof want, "a number in [%g, %g%s", lo, hi, hi_open ? ")" : "]");
    return bad(err, name, v, want);
  }
  *out = x;
  return 0;
}

static int enum_value(const char *name, const char *v, const char *const *names, int *out, ff_error *err) {
  for (int i = 0; names[i]; i++)
    if (!strcmp(v, names[i])) return *out = i, 0;
  char want[160] = "one of";
  for (int i = 0; names[i]; i++)
    snprintf(want + strlen(want), sizeof want - strlen(want), "%s %s", i ? "," : "", names[i]);
  return bad(err, name, v, want);
}

/* "0.9,0.98" */
static int betas_value(const char *name, const char *v, ff_train_options *o, ff_error *err) {
  const char *comma = strchr(v, ',');
  char a[64];
  if (!comma || (size_t)(comma - v) >= sizeof a) return bad(err, name, v, "two numbers B1,B2 in [0, 1)");
  memcpy(a, v, (size_t)(comma - v));
  a[comma - v] = 0;
  double b1, b2;
  if (real_value(name, a, 0.0, 1.0, 1, &b1, err) || real_value(name, comma + 1, 0.0, 1.0, 1, &b2, err))
    return bad(err, name, v, "two numbers B1,B2 in [0, 1)");
  o->beta1 = b1, o->beta2 = b2;
  return 0;
}

/* "bias,norm,embedding" or "none" */
static int no_decay_value(const char *name, const char *v, unsigned *out, ff_error *err) {
  unsigned set = 0;
  if (!strcmp(v, "none")) return *out = 0, 0;
  for (const char *p = v; *p;) {
    size_t n = strcspn(p, ",");
    if (n == 4 && !strncmp(p, "bias", 4)) set |= FF_NO_DECAY_BIAS;
    else if (n == 4 && !strncmp(p, "norm", 4)) set |= FF_NO_DECAY_NORM;
    else if (n == 9 && !strncmp(p, "embedding", 9)) set |= FF_NO_DECAY_EMBEDDING;
    else return bad(err, name, v, "'none' or a list of bias, norm, embedding separated by commas");
    p += n + (p[n] == ',');
  }
  return *out = set, 0;
}

/* name with '-' for '_' into buf; 0 if too long */
static int canonical(const char *name, char *buf, size_t n) {
  size_t i = 0;
  for (; name[i] && i + 1 < n; i++) buf[i] = name[i] == '-' ? '_' : name[i];
  buf[i] = 0;
  return !name[i];
}

int ff_train_option_set(ff_train_options *o, const char *name, const char *v, ff_error *err) {
  char k[32];
  int e;
  if (!o || !name || !v) return ff_fail(err, FF_EINVAL, "ff_train_option_set: an argument is NULL");
  if (!canonical(name, k, sizeof k)) return ff_fail(err, FF_EINVAL, "unknown training option '%.40s'", name);
  const long big = 1L << 30;
  if (!strcmp(k, "steps")) return int_value(name, v, 1, big, &o->steps, err);
  if (!strcmp(k, "batch")) return int_value(name, v, 1, 1 << 24, &o->batch, err);
  if (!strcmp(k, "micro_batch")) return int_value(name, v, 0, 1 << 24, &o->micro_batch, err);
  if (!strcmp(k, "lr")) return real_value(name, v, 0.0, 1e6, 0, &o->lr, err);
  if (!strcmp(k, "betas")) return betas_value(name, v, o, err);
  if (!strcmp(k, "eps")) return real_value(name, v, 0.0, 1.0, 0, &o->eps, err);
  if (!strcmp(k, "weight_decay")) return real_value(name, v, 0.0, 1e6, 0, &o->weight_decay, err);
  if (!strcmp(k, "no_decay")) return no_decay_value(name, v, &o->no_decay, err);
  if (!strcmp(k, "schedule")) {
    int rc = enum_value(name, v, schedules, &e, err);
    return rc ? rc : (o->schedule = (enum ff_schedule)e, 0);
  }
  if (!strcmp(k, "warmup")) return int_value(name, v, 0, big, &o->warmup, err);
  if (!strcmp(k, "decay_steps")) return int_value(name, v, 0, big, &o->decay_steps, err);
  if (!strcmp(k, "min_lr")) return real_value(name, v, 0.0, 1e6, 0, &o->min_lr, err);
  if (!strcmp(k, "clip")) return real_value(name, v, 0.0, 1e30, 0, &o->clip, err);
  if (!strcmp(k, "label_smoothing")) return real_value(name, v, 0.0, 1.0, 0, &o->label_smoothing, err);
  if (!strcmp(k, "dropout")) return real_value(name, v, 0.0, 1.0, 1, &o->dropout, err);
  if (!strcmp(k, "seed")) {
    char *end;
    errno = 0;
    unsigned long long s = strtoull(v, &end, 10);
    if (errno || end == v || *end || v[0] == '-') return bad(err, name, v, "a non-negative integer");
    o->seed = s;
    return 0;
  }
  if (!strcmp(k, "init")) {
    int rc = enum_value(name, v, inits, &e, err);
    return rc ? rc : (o->init = (enum ff_train_init)e, 0);
  }
  if (!strcmp(k, "engine")) {
    int en = ff_engine_parse(v);
    if (en < 0) return bad(err, name, v, "one of runtime, tcc, cc");
    o->engine = en;
    return 0;
  }
  if (!strcmp(k, "threads")) return int_value(name, v, 1, FF_MAX_THREADS, &o->threads, err);
  if (!strcmp(k, "recompute")) { /* a flag (no value: "1") or the train block's boolean */
    if (!strcmp(v, "1") || !strcmp(v, "true")) return o->recompute = 1, 0;
    if (!strcmp(v, "0") || !strcmp(v, "false")) return o->recompute = 0, 0;
    return bad(err, name, v, "true or false");
  }
  if (!strcmp(k, "format")) {
    int rc = enum_value(name, v, formats, &e, err);
    return rc ? rc : (o->format = (enum ff_data_format)e, 0);
  }
  if (!strcmp(k, "seq")) return int_value(name, v, 0, 1 << 20, &o->seq, err);
  if (!strcmp(k, "holdout")) return int_value(name, v, 0, big, &o->holdout, err);
  if (!strcmp(k, "eval_every")) return int_value(name, v, 0, big, &o->eval_every, err);
  if (!strcmp(k, "eval_exact")) return int_value(name, v, -1, big, &o->eval_exact, err);
  if (!strcmp(k, "save_every")) return int_value(name, v, 0, big, &o->save_every, err);
  if (!strcmp(k, "log_every")) return int_value(name, v, 0, big, &o->log_every, err);
  return ff_fail(err, FF_EINVAL, "unknown training option '%.40s'", name);
}

char *ff_train_options_text(const ff_train_options *o) {
  char decay[40] = "";
  if (!o->no_decay) strcpy(decay, "none");
  if (o->no_decay & FF_NO_DECAY_BIAS) strcat(decay, "bias,");
  if (o->no_decay & FF_NO_DECAY_NORM) strcat(decay, "norm,");
  if (o->no_decay & FF_NO_DECAY_EMBEDDING) strcat(decay, "embedding,");
  if (decay[strlen(decay) - 1] == ',') decay[strlen(decay) - 1] = 0;
  size_t n = 2048;
  char *s = malloc(n);
  if (!s) return NULL;
  /* %.17g: every double reads back as itself */
  snprintf(s, n,
           "steps=%d\nbatch=%d\nmicro_batch=%d\nlr=%.17g\nbetas=%.17g,%.17g\neps=%.17g\nweight_decay=%.17g\n"
           "no_decay=%s\nschedule=%s\nwarmup=%d\ndecay_steps=%d\nmin_lr=%.17g\nclip=%.17g\n"
           "label_smoothing=%.17g\ndropout=%.17g\nseed=%llu\ninit=%s\nengine=%s\nthreads=%d\nformat=%s\nseq=%d\n"
           "holdout=%d\neval_every=%d\neval_exact=%d\nsave_every=%d\nlog_every=%d\n",
           o->steps, o->batch, o->micro_batch, o->lr, o->beta1, o->beta2, o->eps, o->weight_decay, decay,
           schedules[o->schedule], o->warmup, o->decay_steps, o->min_lr, o->clip, o->label_smoothing, o->dropout,
           (unsigned long long)o->seed, inits[o->init], ff_engine_name((enum ff_engine)o->engine), o->threads, formats[o->format],
           o->seq, o->holdout, o->eval_every, o->eval_exact, o->save_every, o->log_every);
  return s;
}

/* "name=value" lines, each through ff_train_option_set */
int ff_train_options_parse_text(ff_train_options *o, const char *text, const char *where, ff_error *err) {
  char line[256];
  for (const char *p = text; *p;) {
    size_t n = strcspn(p, "\n");
    if (n >= sizeof line)
      return ff_fail(err, FF_EFORMAT, "%s: an option line longer than %zu bytes", where, sizeof line);
    memcpy(line, p, n);
    line[n] = 0;
    p += n + (p[n] == '\n');
    if (!n) continue;
    char *eq = strchr(line, '=');
    if (!eq) return ff_fail(err, FF_EFORMAT, "%s: option line '%.60s' has no '='", where, line);
    *eq = 0;
    int rc = ff_train_option_set(o, line, eq + 1, err);
    if (rc) return ff_fail(err, FF_EFORMAT, "%s: %s", where, err ? err->msg : "bad option");
  }
  return 0;
}

typedef struct {
  ff_train_options *o;
  const char *path;
} from_model;

static int set_from_block(void *ctx, const char *key, const char *value, ff_error *err) {
  from_model *k = ctx;
  int rc = ff_train_option_set(k->o, key, value, err);
  return rc ? ff_fail(err, rc, "%s: train.%s", k->path, err ? err->msg : "bad value") : 0;
}

int ff_train_options_from_model(const ff_model *m, ff_train_options *o, ff_error *err) {
  from_model k = {o, ff_model_config(m) ? ff_model_config(m)->name : "model"};
  return ff_model_train_block(m, set_from_block, &k, err);
}

int ff_train_options_check(const ff_train_options *o, ff_error *err) {
  if (o->micro_batch > o->batch)
    return ff_fail(err, FF_EINVAL, "micro_batch: %d is more than batch %d", o->micro_batch, o->batch);
  if (o->schedule == FF_SCHEDULE_NOAM && o->warmup < 1)
    return ff_fail(err, FF_EINVAL,
                   "warmup: the noam schedule needs at least 1 warm-up step (it divides by warmup^1.5)");
  if (o->schedule == FF_SCHEDULE_COSINE) {
    int total = o->decay_steps ? o->decay_steps : o->steps;
    if (total <= o->warmup)
      return ff_fail(err, FF_EINVAL, "the cosine schedule needs %s (%d) above warmup (%d)",
                     o->decay_steps ? "decay_steps" : "steps", total, o->warmup);
    if (o->min_lr > o->lr) return ff_fail(err, FF_EINVAL, "min_lr: %g is above lr %g", o->min_lr, o->lr);
  }
  if (o->lr <= 0.0) return ff_fail(err, FF_EINVAL, "lr: must be above 0");
  return 0;
}
