/* fuse.c - projections as checkpoints store them, fused into the tensors
 * the model binds.  Hugging Face and Meta keep q_proj, k_proj, v_proj apart
 * (and gate_proj, up_proj for SwiGLU); fixformer binds nn.MultiheadAttention's
 * in_proj_weight (rows q | k | v) and linear1 (rows gate | up).  The fusing
 * happens once, right after a file is read, so the runtime, the packer and
 * `info --weights` all see the canonical names.  Shapes are taken from the
 * tensors found (q may have more rows than k and v: grouped-query
 * attention); whether the fused tensor fits the model is the binding's
 * check, as for a fused tensor in the file. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "ff_runtime.h"

/* Which tensors are fused from which: the parts of the weight kinds of
 * include/ff_schema.h (in_proj_weight from q_proj, k_proj, v_proj; for
 * swiglu linear1 from gate_proj, up_proj), each a role in the same layer. */
#define MAX_PARTS FF_MAX_PARTS

typedef struct {
  char name[FF_TENSOR_NAME_MAX]; /* the fused tensor */
  int part[MAX_PARTS], n;        /* its parts: indices into the file's tensors */
} fusion;

typedef struct {
  const ff_config *cfg;
  const ff_tensor_file *file;
  fusion *list; /* one per tensor the model binds, at most */
  int count;
  ff_error *err;
} planner;

/* The kind whose parts may stand in for s, or NULL. */
static const ff_rt_weight_kind *fused_kind(const ff_config *c, const ff_weight_spec *s) {
  const ff_rt_weight_kind *k = &ff_rt_weight_kinds[s->kind];
  return k->parts[0] && ff_rt_needs_hold(c, k->parts_need) ? k : NULL;
}

/* The parts must stack into one tensor: vectors, or matrices of one width;
 * k and v (gate and up) of one shape.  q's rows are free (kv_heads). */
static int check_parts(const planner *p, const fusion *fu, const ff_tensor *const *t) {
  char a[96], b[96];
  for (int i = 0; i < fu->n; i++) {
    int same_rows = i == 0 || (fu->n == 3 && i == 1) || t[i]->shape[0] == t[i - 1]->shape[0];
    int ok = (t[i]->rank == 1 || t[i]->rank == 2) && t[i]->rank == t[0]->rank &&
             (t[i]->rank == 1 || t[i]->shape[1] == t[0]->shape[1]) && same_rows;
    if (ok) continue;
    const ff_tensor *other = i ? t[i - 1] : t[i];
    ff_rt_shape_text(a, sizeof a, other->rank, other->shape);
    ff_rt_shape_text(b, sizeof b, t[i]->rank, t[i]->shape);
    if (t[i]->rank != 1 && t[i]->rank != 2)
      return ff_fail(p->err, FF_ESHAPE, "tensor '%s' %s: a projection must be a matrix or a vector", t[i]->name, b);
    return ff_fail(p->err, FF_ESHAPE, "tensors '%s' %s and '%s' %s cannot be fused into '%s': %s", other->name, a,
                   t[i]->name, b, fu->name,
                   fu->n == 3 ? "q, k, v need one width, k and v one shape" : "gate and up need one shape");
  }
  return 0;
}

/* One tensor the model binds: if its parts are in the file, a fusion. */
static int plan_one(void *ctx, const ff_weight_spec *s) {
  planner *p = ctx;
  const ff_rt_weight_kind *k = fused_kind(p->cfg, s);
  if (!k) return 0;
  fusion *fu = &p->list[p->count];
  const ff_tensor *t[MAX_PARTS] = {NULL};
  size_t base = strlen(s->name) - strlen(s->role); /* the layer's name, with its dot */
  char names[MAX_PARTS][FF_TENSOR_NAME_MAX + 32];
  int found = 0, missing = -1;
  memset(fu, 0, sizeof *fu);
  snprintf(fu->name, sizeof fu->name, "%s", s->name);
  for (fu->n = 0; fu->n < MAX_PARTS && k->parts[fu->n]; fu->n++) {
    snprintf(names[fu->n], sizeof names[fu->n], "%.*s%s", (int)base, s->name, k->parts[fu->n]);
    t[fu->n] = ff_tensor_file_find(p->file, names[fu->n]);
    if (t[fu->n]) found++, fu->part[fu->n] = (int)(t[fu->n] - p->file->tensors);
    else if (missing < 0) missing = fu->n;
  }
  if (!found) return 0; /* stored fused, or missing: the binding says which */
  int first = missing == 0 ? 1 : 0;
  while (!t[first]) first++;
  if (ff_tensor_file_find(p->file, s->name))
    return ff_fail(p->err, FF_EINVAL, "tensor '%s' is in the file both fused and apart (as '%s', ...); keep one",
                   s->name, names[first]);
  if (missing >= 0)
    return ff_fail(p->err, FF_EMISSING, "missing tensor '%s': '%s' is there, and '%s' is fused from %d parts",
                   names[missing], names[first], s->name, fu->n);
  int rc = check_parts(p, fu, t);
  if (!rc) p->count++;
  return rc;
}

static int by_name(const void *a, const void *b) {
  return strcmp(((const ff_tensor *)a)->name, ((const ff_tensor *)b)->name);
}

/* The tensors of f that are no part as they are (their data stays where the
 * reader put it: in the file's mapping), then each fusion's parts stacked by
 * rows into fp (deferred: copied by ff_tensor_file_fill), its name into np:
 * the count of tensors, or -1 when a deferred copy cannot be recorded. */
static int fill(ff_tensor_file *f, const unsigned char *is_part, const fusion *list, int count, int deferred,
                ff_tensor *ts, float *fp, char *np) {
  int n = 0;
  for (int i = 0; i < f->count; i++)
    if (!is_part[i]) ts[n++] = f->tensors[i];
  for (int i = 0; i < count; i++) {
    const fusion *fu = &list[i];
    ff_tensor *t = &ts[n++];
    *t = f->tensors[fu->part[0]]; /* dtype, rank, width: the first part's */
    t->data = fp;
    t->name = np;
    strcpy(np, fu->name);
    np += strlen(np) + 1;
    t->shape[0] = 0, t->numel = 0;
    for (int k = 0; k < fu->n; k++) { /* rows q | k | v, or gate | up */
      const ff_tensor *part = &f->tensors[fu->part[k]];
      if (!deferred)
        memcpy(fp, part->data, part->numel * sizeof *fp);
      else if (ff_tensor_file_defer(f, fp, part->data, part->numel, NULL))
        return -1;
      fp += part->numel, t->numel += part->numel, t->shape[0] += part->shape[0];
    }
  }
  return n;
}

/* Fused floats: malloc'd, or (deferred) an anonymous mapping, resident only
 * once written; adopted by f. */
static float *fused_block(ff_tensor_file *f, size_t bytes, int deferred) {
  void *p = deferred ? mmap(NULL, bytes ? bytes : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                     : malloc(bytes ? bytes : 1);
  if (p == MAP_FAILED || !p) return NULL;
  if (!ff_tensor_file_adopt(f, p, deferred ? (bytes ? bytes : 1) : 0, NULL)) return p;
  if (deferred)
    munmap(p, bytes ? bytes : 1);
  else
    free(p);
  return NULL;
}

/* The fused tensors into new blocks the file keeps; the parts' bytes stay
 * where they are, unused; nothing else is copied. */
static int rebuild(ff_tensor_file *f, const fusion *list, int count, int deferred, ff_error *err) {
  size_t floats = 0, names = 0, fbytes;
  unsigned char *is_part = calloc((size_t)f->count + 1, 1);
  if (!is_part) return ff_fail(err, FF_ENOMEM, "out of memory");
  for (int i = 0; i < count; i++) {
    names += strlen(list[i].name) + 1;
    for (int k = 0; k < list[i].n; k++) {
      is_part[list[i].part[k]] = 1;
      floats += f->tensors[list[i].part[k]].numel; /* (each part is a tensor of the file: no overflow) */
    }
  }
  if (ff_size_mul(floats, sizeof(float), &fbytes)) {
    free(is_part);
    return ff_fail(err, FF_ENOMEM, "tensor sizes overflow");
  }
  ff_tensor *ts = calloc((size_t)f->count + 1, sizeof *ts); /* fewer: each fusion takes >= 2 */
  char *np = malloc(names + 1);
  if (np && ff_tensor_file_adopt(f, np, 0, err)) free(np), np = NULL;
  float *fp = ts && np ? fused_block(f, fbytes, deferred) : NULL;
  int n = fp ? fill(f, is_part, list, count, deferred, ts, fp, np) : -1;
  free(is_part);
  if (n < 0) {
    free(ts);
    return ff_fail(err, FF_ENOMEM, "out of memory fusing projections (%zu bytes)", fbytes);
  }
  qsort(ts, (size_t)n, sizeof *ts, by_name); /* ff_tensor_file_find bisects */
  free(f->tensors);
  f->tensors = ts, f->count = n;
  return 0;
}

static int fuse(const ff_config *c, ff_tensor_file *f, int deferred, ff_error *err) {
  size_t specs = 0;
  ff_rt_count_weights(c, &specs, NULL);
  planner p = {c, f, calloc(specs + 1, sizeof(fusion)), 0, err};
  if (!p.list) return ff_fail(err, FF_ENOMEM, "out of memory");
  int rc = ff_rt_visit_weights(c, NULL, plan_one, &p);
  if (!rc && p.count) rc = rebuild(f, p.list, p.count, deferred, err);
  free(p.list);
  return rc;
}

int ff_rt_fuse_projections(const ff_config *c, ff_tensor_file *f, ff_error *err) { return fuse(c, f, 0, err); }

static int read_weights(const ff_config *c, const char *path, int deferred, ff_tensor_file *f, ff_error *err) {
  int rc = ff_safetensors_read(path, f, err);
  if (rc) return rc;
  if ((rc = fuse(c, f, deferred, err))) {
    ff_tensor_file_free(f);
    if (err) ff_fail(err, rc, "%s: %s", path, err->msg);
  }
  return rc;
}

int ff_rt_read_weights(const ff_config *c, const char *path, ff_tensor_file *f, ff_error *err) {
  return read_weights(c, path, 0, f, err);
}

int ff_rt_read_weights_deferred(const ff_config *c, const char *path, ff_tensor_file *f, ff_error *err) {
  return read_weights(c, path, 1, f, err);
}
