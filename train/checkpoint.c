/* checkpoint.c - a run's whole state in one safetensors file, written
 * atomically: the weights under their PyTorch names, AdamW's moments, the
 * loss history, and in __metadata__ what to continue with and what it must
 * match (docs/training.md, "Checkpoints").  The generators are counters
 * (ff_dropout.h, ff_train_shuffle): seed, step and the samples consumed are
 * their whole state. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ff_json.h"
#include "host.h" /* ff_sha256_hex */
#include "train_internal.h"

#define FORMAT "fixformer-train-checkpoint"
#define VERSION "1"

/* The model's identity: its tensors (name, shape) and the settings that
 * change what they compute; max_seq, paths and the description's name
 * aside. */
void ff_train_layout_hash(const ff_rt_params *p, char hex[65]) {
  const ff_config *c = &p->cfg;
  size_t n = 256 + (size_t)p->count * (FF_TENSOR_NAME_MAX + 48), at = 0;
  char *text = malloc(n);
  if (!text) {
    memset(hex, '0', 64), hex[64] = 0;
    return;
  }
  at += (size_t)snprintf(text, n, "arch %d d %d heads %d kv %d ff %d layers %d %d norm %d %d %d eps %.9g act %d "
                         "bias %d vocab %d pos %d rope %.9g %d scale %d tie %d head %d %d types %d embed_norm %d\n",
                         c->arch, c->d_model, c->heads, ff_config_kv_heads(c), c->d_ff, c->encoder_layers,
                         c->decoder_layers, c->norm, c->norm_kind, c->final_norm, (double)c->eps, c->activation,
                         c->bias, c->vocab, c->positional, (double)c->rope_theta, c->rope_pairing, c->scale_embeddings,
                         c->tie_embeddings, c->head_bias, c->no_lm_head, c->token_types, c->embed_norm);
  for (int i = 0; i < p->count && at < n; i++)
    at += (size_t)snprintf(text + at, n - at, "%s [%d,%d]\n", p->tensors[i].name, p->tensors[i].shape[0],
                           p->tensors[i].rank == 2 ? p->tensors[i].shape[1] : 0);
  ff_sha256_hex(text, at < n ? at : n, hex);
  free(text);
}

/* ---- writing --------------------------------------------------------------------------- */

/* (data-parallel: rank 0 writes, the weights being the same on every rank) */
int ff_trainer_save_weights(ff_trainer *t, const char *path, ff_error *err) {
  return t->rank ? 0 : ff_rt_params_save(&t->p, t->p.data, path, err);
}

int ff_trainer_save_checkpoint(ff_trainer *t, const char *path, ff_error *err) {
  if (t->rank) return 0;
  int n = t->p.count, count = 0, rc;
  ff_tensor_view *views = calloc((size_t)3 * n + 2, sizeof *views);
  char *names = malloc((size_t)2 * n * (FF_TENSOR_NAME_MAX + 32));
  char *options = ff_train_options_text(&t->o), layout[65], num[5][32];
  if (!views || !names || !options) {
    free(views), free(names), free(options);
    return ff_fail(err, FF_ENOMEM, "out of memory for a checkpoint");
  }
  const float *bufs[3] = {t->p.data, t->exp_avg, t->exp_avg_sq};
  const char *prefix[3] = {"", "optimizer.exp_avg.", "optimizer.exp_avg_sq."};
  for (int k = 0; k < 3; k++)
    for (int i = 0; i < n; i++) {
      const ff_rt_param *q = &t->p.tensors[i];
      ff_tensor_view *v = &views[count++];
      if (k == 0) {
        v->name = q->name;
      } else {
        char *s = names + ((size_t)(k - 1) * n + i) * (FF_TENSOR_NAME_MAX + 32);
        snprintf(s, FF_TENSOR_NAME_MAX + 32, "%s%s", prefix[k], q->name);
        v->name = s;
      }
      v->rank = q->rank, v->shape[0] = q->shape[0], v->shape[1] = q->shape[1];
      v->data = bufs[k] + q->offset;
    }
  if (t->step > 0)
    views[count++] = (ff_tensor_view){"history.train", 2, {t->step, 4}, t->history};
  if (t->n_valid > 0)
    views[count++] = (ff_tensor_view){"history.valid", 2, {t->n_valid, 3}, (const float *)t->valid};
  ff_train_layout_hash(&t->p, layout);
  snprintf(num[0], sizeof num[0], "%lld", (long long)t->step);
  snprintf(num[1], sizeof num[1], "%lld", (long long)t->consumed);
  snprintf(num[2], sizeof num[2], "%lld", (long long)t->data.count);
  snprintf(num[3], sizeof num[3], "%llu", (unsigned long long)t->o.seed);
  snprintf(num[4], sizeof num[4], "%d", t->ranks);
  ff_metadata meta[] = {{"format", FORMAT},         {"version", VERSION},        {"model", t->c->name},
                        {"model_sha256", layout},    {"step", num[0]},            {"samples_consumed", num[1]},
                        {"data_sha256", t->data.sha256}, {"data_samples", num[2]}, {"seed", num[3]},
                        {"engine", t->engine.name ? t->engine.name : "?"},      {"ranks", num[4]},
                        {"options", options}};
  rc = ff_safetensors_write_meta(path, views, count, meta, (int)(sizeof meta / sizeof *meta), err);
  free(views), free(names), free(options);
  return rc;
}

/* ---- reading ---------------------------------------------------------------------------- */

typedef struct {
  ff_tensor_file file;
  cJSON *meta;
} checkpoint;

static void checkpoint_free(checkpoint *k) {
  ff_tensor_file_free(&k->file);
  cJSON_Delete(k->meta);
}

static const char *meta_text(const checkpoint *k, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(k->meta, key);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* a non-negative integer of the metadata */
static int meta_count(const checkpoint *k, const char *path, const char *key, int64_t *out, ff_error *err) {
  const char *s = meta_text(k, key);
  char *end;
  long long v = s ? strtoll(s, &end, 10) : -1;
  if (!s || *end || end == s || v < 0)
    return ff_fail(err, FF_EFORMAT, "%s: __metadata__ %s is missing or not a count", path, key);
  *out = v;
  return 0;
}

/* The file, its tensors and its metadata, checked to be a checkpoint. */
static int checkpoint_read(const char *path, checkpoint *k, ff_error *err) {
  uint8_t *buf;
  size_t len;
  memset(k, 0, sizeof *k);
  int rc = ff_read_file(path, &buf, &len, err);
  if (rc) return rc;
  rc = ff_safetensors_parse(buf, len, &k->file, err);
  if (rc) {
    free(buf);
    return ff_fail(err, rc, "%s: %s", path, err ? err->msg : "not a safetensors file");
  }
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | buf[i]; /* the parse checked it */
  cJSON *root = ff_json_parse((const char *)buf + 8, (size_t)hlen, path, err);
  free(buf);
  if (!root) return FF_EFORMAT;
  k->meta = cJSON_DetachItemFromObjectCaseSensitive(root, "__metadata__");
  cJSON_Delete(root);
  const char *format = meta_text(k, "format"), *version = meta_text(k, "version");
  if (!format || strcmp(format, FORMAT))
    rc = ff_fail(err, FF_EFORMAT, "%s: not a fixformer training checkpoint (a weights file? train writes its "
                 "checkpoints with --checkpoint)", path);
  else if (!version || strcmp(version, VERSION))
    rc = ff_fail(err, FF_EFORMAT, "%s: checkpoint version %.20s; this fixformer reads version %s", path,
                 version ? version : "(none)", VERSION);
  if (rc) checkpoint_free(k);
  return rc;
}

int ff_train_options_from_checkpoint(const char *path, ff_train_options *o, ff_error *err) {
  checkpoint k;
  int rc = checkpoint_read(path, &k, err);
  if (rc) return rc;
  const char *text = meta_text(&k, "options");
  ff_train_options tmp = *o;
  if (!text) rc = ff_fail(err, FF_EFORMAT, "%s: __metadata__ options is missing", path);
  else if (!(rc = ff_train_options_parse_text(&tmp, text, path, err))) *o = tmp;
  checkpoint_free(&k);
  return rc;
}

/* a tensor of the file with this shape, or an error naming it */
static const float *tensor(const checkpoint *k, const char *path, const char *name, int rank, int64_t a, int64_t b,
                           ff_error *err) {
  const ff_tensor *t = ff_tensor_file_find(&k->file, name);
  if (!t) {
    ff_fail(err, FF_EMISSING, "%s: missing tensor '%s'", path, name);
    return NULL;
  }
  if (t->rank != rank || t->shape[0] != a || (rank == 2 && t->shape[1] != b)) {
    char want[64], have[160];
    int64_t w[2] = {a, b};
    ff_rt_shape_text(want, sizeof want, rank, w);
    ff_rt_shape_text(have, sizeof have, t->rank, t->shape);
    ff_fail(err, FF_ESHAPE, "%s: tensor '%s' has shape %s, the model needs %s", path, name, have, want);
    return NULL;
  }
  return t->data;
}

int ff_trainer_resume(ff_trainer *t, const char *path, ff_error *err) {
  checkpoint k;
  char layout[65], name[FF_TENSOR_NAME_MAX + 32];
  int64_t step = 0, consumed = 0, samples = 0;
  int rc = checkpoint_read(path, &k, err);
  if (rc) return rc;
  ff_train_layout_hash(&t->p, layout);
  const char *model = meta_text(&k, "model"), *hash = meta_text(&k, "model_sha256");
  const char *data = meta_text(&k, "data_sha256");
  if (!hash || strcmp(hash, layout))
    rc = ff_fail(err, FF_EINVAL,
                 "%s: a checkpoint of another model ('%.64s': other tensors, shapes or settings than %s's)", path,
                 model ? model : "?", t->c->name);
  else if ((rc = meta_count(&k, path, "step", &step, err)) ||
           (rc = meta_count(&k, path, "samples_consumed", &consumed, err)) ||
           (rc = meta_count(&k, path, "data_samples", &samples, err)))
    ;
  else if (!data || strcmp(data, t->data.sha256) || samples != t->data.count)
    rc = ff_fail(err, FF_EINVAL, "%s: trained on other data (the data file's sha256 or sample count differs); "
                 "resume with the same --data", path);
  else if (step > (int64_t)1 << 30 || consumed != step * t->o.batch)
    rc = ff_fail(err, FF_EINVAL, "%s: %lld samples consumed in %lld steps is not batch %d a step (resume with the same "
                 "--batch)", path, (long long)consumed, (long long)step, t->o.batch);
  /* every tensor there, with its shape, before anything changes */
  const float **src = calloc((size_t)3 * t->p.count + 1, sizeof *src);
  if (!rc && !src) rc = ff_fail(err, FF_ENOMEM, "out of memory");
  for (int i = 0; !rc && i < 3 * t->p.count; i++) {
    const ff_rt_param *q = &t->p.tensors[i % t->p.count];
    int kind = i / t->p.count;
    snprintf(name, sizeof name, "%s%s", kind == 0 ? "" : kind == 1 ? "optimizer.exp_avg." : "optimizer.exp_avg_sq.",
             q->name);
    if (!(src[i] = tensor(&k, path, name, q->rank, q->shape[0], q->shape[1], err))) rc = err ? err->code : FF_EFORMAT;
  }
  const float *hist = NULL, *valid = NULL;
  int64_t n_valid = 0;
  if (!rc && step > 0 && !(hist = tensor(&k, path, "history.train", 2, step, 4, err))) rc = FF_EFORMAT;
  const ff_tensor *v = rc ? NULL : ff_tensor_file_find(&k.file, "history.valid");
  if (v && (n_valid = v->shape[0]) > 0 && !(valid = tensor(&k, path, "history.valid", 2, n_valid, 3, err)))
    rc = FF_EFORMAT;
  int64_t rows = step > t->o.steps ? step : t->o.steps;
  if (!rc) rc = ff_train_history_reserve(t, rows, err);
  ff_train_valid_point *points = NULL;
  if (!rc && n_valid && !(points = malloc((size_t)n_valid * sizeof *points)))
    rc = ff_fail(err, FF_ENOMEM, "out of memory");
  if (!rc) { /* all checked: now the trainer changes */
    float *dst[3] = {t->p.data, t->exp_avg, t->exp_avg_sq};
    for (int i = 0; i < 3 * t->p.count; i++) {
      const ff_rt_param *q = &t->p.tensors[i % t->p.count];
      memcpy(dst[i / t->p.count] + q->offset, src[i], q->numel * sizeof(float));
    }
    if (step) memcpy(t->history, hist, (size_t)step * 4 * sizeof(float));
    if (n_valid) memcpy(points, valid, (size_t)n_valid * sizeof *points);
    free(t->valid);
    t->valid = points, t->n_valid = t->cap_valid = (int)n_valid;
    t->step = step, t->consumed = consumed, t->perm_epoch = -1;
    ff_lr_schedule_init(&t->sched, &t->o, t->c->d_model); /* where a scheduler stepped step times is */
    for (int64_t i = 0; i < step; i++) ff_lr_schedule_step(&t->sched);
    t->initialized = 1;
  }
  free(src);
  checkpoint_free(&k);
  return rc;
}
