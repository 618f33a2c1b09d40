/* test_api.c - the public API's argument checks (include/fixformer.h).
 *
 *   test_api MODELS_DIR [CHECK ...]   CHECK: step_overflow bad_engine
 *                                     bad_weights nulls clones isas config
 *                                     (default: all)
 *
 * step_overflow: a step of T = INT_MAX after some positions is FF_ELENGTH
 *   (no signed overflow in the bound, no read past the caller's ids).
 * bad_engine: ff_model_prepare with an engine outside enum ff_engine is
 *   FF_EINVAL and leaves the model unprepared.
 * bad_weights: a weights file that fails to load or bind leaves the model
 *   with its previous weights, prepared, giving the same numbers; good new
 *   weights on a prepared model give the new model's numbers.
 * nulls: every function with a NULL pointer argument returns an error (and
 *   a message when err is given), never crashes.
 * clones: new weights or another ISA in a clone change neither the
 *   original's numbers nor its generated files; closing in any order.
 * config: what a description implies (ff_config_*, ff_model_describe,
 *   ff_schema_text): the tensors listed are those counted and those init
 *   writes; the description's text loads as the same model and prints the
 *   same again; the schema as JSON and Markdown.
 * Weights come from ff_config_init_weights in a private temporary directory,
 * which is also the cc engine's cache (XDG_CACHE_HOME). */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fixformer.h"

static int failures;
static char dir[64], tiny[PATH_MAX], llama[PATH_MAX], dates[PATH_MAX], dates_w[PATH_MAX];

#define CHECK(cond, ...)                                   \
  do {                                                     \
    if (!(cond)) {                                         \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                        \
      fprintf(stderr, "\n");                               \
      failures++;                                          \
    }                                                      \
  } while (0)

static const enum ff_engine engines[] = {FF_ENGINE_RUNTIME, FF_ENGINE_TCC, FF_ENGINE_CC};

/* dir/NAME-SEED.safetensors with PyTorch's initialisation of model. */
static const char *weights(const char *model, const char *name, int seed) {
  static char path[8][PATH_MAX];
  static int next;
  char *p = path[next++ % 8];
  ff_error err = {0, ""};
  snprintf(p, PATH_MAX, "%s/%s-%d.safetensors", dir, name, seed);
  ff_model *m = ff_model_open(model, &err);
  if (!m || ff_config_init_weights(ff_model_config(m), (uint64_t)seed, p, &err)) {
    fprintf(stderr, "test_api: cannot make weights for %s: %s\n", model, err.msg);
    exit(1);
  }
  ff_model_close(m);
  return p;
}

/* model with weights wpath, prepared for engine (NULL on error, reported). */
static ff_model *ready(const char *model, const char *wpath, enum ff_engine e) {
  ff_error err = {0, ""};
  ff_model *m = ff_model_open(model, &err);
  if (!m || ff_model_load_weights(m, wpath, &err) || ff_model_prepare(m, e, &err)) {
    CHECK(0, "%s with %s on %s: %s", model, wpath, ff_engine_name(e), err.msg);
    ff_model_close(m);
    return NULL;
  }
  return m;
}

static const int32_t ids[8] = {1, 5, 9, 2, 7, 3, 11, 4};

/* tiny's forward over ids into out [8, vocab]; the status. */
static int forward(ff_model *m, float *out, ff_error *err) {
  ff_input in = {0};
  in.batch = 1;
  in.src_len = 8;
  in.src_tokens = ids;
  return ff_model_forward(m, &in, out, err);
}

static void step_overflow(void) {
  for (int i = 0; i < 3; i++) {
    ff_model *m = ready(llama, weights(llama, "llama", 1), engines[i]);
    if (!m) continue;
    ff_error err = {0, ""};
    int32_t in[4] = {1, 2, 3, 4};
    float *out = malloc(sizeof *out * 4 * 256);
    int rc = ff_model_begin(m, NULL, 0, &err);
    for (int t = 0; t < 3 && !rc; t++) rc = ff_model_step(m, &in[t], 1, out, &err);
    CHECK(!rc && ff_model_position(m) == 3, "%s: 3 steps: %s", ff_engine_name(engines[i]), err.msg);
    rc = ff_model_step(m, in, INT_MAX, out, &err);
    CHECK(rc == FF_ELENGTH, "%s: step of T = INT_MAX at 3 gave %d (%s)", ff_engine_name(engines[i]), rc, err.msg);
    rc = ff_model_step(m, in, INT_MAX - 2, out, &err);
    CHECK(rc == FF_ELENGTH, "%s: step of T = INT_MAX - 2 at 3 gave %d", ff_engine_name(engines[i]), rc);
    rc = ff_model_step(m, in, 254, out, &err); /* 3 + 254 = 257 > max_seq 256 */
    CHECK(rc == FF_ELENGTH, "%s: step past max_seq gave %d", ff_engine_name(engines[i]), rc);
    CHECK(ff_model_position(m) == 3, "%s: a refused step moved the position", ff_engine_name(engines[i]));
    rc = ff_model_step(m, &in[3], 1, out, &err);
    CHECK(!rc && ff_model_position(m) == 4, "%s: a step after the refused ones: %s", ff_engine_name(engines[i]),
          err.msg);
    ff_greedy g = {NULL, 0, in, 2, INT_MAX, -1};
    int32_t gen[4];
    int n = -1;
    rc = ff_model_greedy(m, &g, gen, &n, NULL, &err);
    CHECK(rc == FF_ELENGTH && n == 0, "%s: greedy with max_new = INT_MAX gave %d", ff_engine_name(engines[i]), rc);
    free(out);
    ff_model_close(m);
  }
}

static void bad_engine(void) {
  ff_model *m = ready(tiny, weights(tiny, "tiny", 1), FF_ENGINE_RUNTIME);
  ff_model *fresh = ff_model_open(tiny, NULL);
  if (!m || !fresh || ff_model_load_weights(fresh, weights(tiny, "tiny", 1), NULL)) {
    CHECK(0, "cannot open %s", tiny);
    ff_model_close(m);
    ff_model_close(fresh);
    return;
  }
  ff_error err = {0, ""};
  int rc = ff_model_prepare(fresh, (enum ff_engine)7, &err);
  CHECK(rc == FF_EINVAL && strstr(err.msg, "7"), "prepare with engine 7 gave %d (%s)", rc, err.msg);
  float out[8 * 128];
  CHECK(forward(fresh, out, &err) == FF_EINVAL, "engine 7 prepared the model");
  CHECK(ff_model_prepare(fresh, (enum ff_engine)-1, &err) == FF_EINVAL, "prepare with engine -1 was accepted");
  CHECK(ff_model_prepare(m, (enum ff_engine)3, &err) == FF_EINVAL, "prepare with engine 3 was accepted");
  CHECK(forward(m, out, &err) == 0, "a refused engine unprepared the runtime: %s", err.msg);
  ff_model_close(m);
  ff_model_close(fresh);
}

/* a safetensors file that parses but does not fit tiny */
static const char *junk_weights(void) {
  static char path[PATH_MAX];
  static const float x[2] = {1, 2};
  ff_tensor_view t = {"not_a_weight", 1, {2}, x};
  ff_error err = {0, ""};
  snprintf(path, sizeof path, "%s/junk.safetensors", dir);
  if (ff_safetensors_write(path, &t, 1, &err)) {
    fprintf(stderr, "test_api: %s\n", err.msg);
    exit(1);
  }
  return path;
}

static float max_diff(const float *a, const float *b, size_t n) {
  float d = 0;
  for (size_t i = 0; i < n; i++) d = fmaxf(d, fabsf(a[i] - b[i]));
  return d;
}

static void bad_weights(void) {
  const char *good = weights(tiny, "tiny", 1), *other = weights(tiny, "tiny", 2), *junk = junk_weights();
  const size_t n = 8 * 128;
  static float ref[8 * 128], out[8 * 128], ref2[8 * 128], rt_ref[8 * 128];
  ff_model *r2 = ready(tiny, other, FF_ENGINE_RUNTIME); /* the numbers of the other weights */
  if (!r2 || forward(r2, ref2, NULL)) return;
  ff_model_close(r2);
  for (int i = 0; i < 3; i++) {
    const char *e = ff_engine_name(engines[i]);
    ff_model *m = ready(tiny, good, engines[i]);
    ff_error err = {0, ""};
    if (!m || forward(m, ref, &err)) {
      CHECK(0, "%s: forward: %s", e, err.msg);
      ff_model_close(m);
      continue;
    }
    if (engines[i] == FF_ENGINE_RUNTIME) memcpy(rt_ref, ref, sizeof ref);
    int rc = ff_model_load_weights(m, junk, &err);
    CHECK(rc == FF_EMISSING || rc == FF_ESHAPE || rc == FF_EINVAL, "%s: junk weights gave %d (%s)", e, rc, err.msg);
    rc = forward(m, out, &err);
    CHECK(rc == 0 && !memcmp(out, ref, sizeof ref), "%s: after a failed load: rc %d (%s), max diff %g", e, rc,
          err.msg, rc ? 0.0 : (double)max_diff(out, ref, n));
    rc = ff_model_load_weights(m, "/nonexistent/w.safetensors", &err);
    CHECK(rc != 0, "%s: a missing file loaded", e);
    rc = forward(m, out, &err);
    CHECK(rc == 0 && !memcmp(out, ref, sizeof ref), "%s: after a missing file: rc %d (%s)", e, rc, err.msg);
    rc = ff_model_load_weights(m, other, &err); /* good new weights: prepared, the new numbers */
    CHECK(rc == 0, "%s: loading other weights: %s", e, err.msg);
    rc = forward(m, out, &err);
    CHECK(rc == 0 && max_diff(out, ref2, n) < 1e-4f, "%s: after new weights: rc %d (%s), max diff %g", e, rc,
          err.msg, rc ? 0.0 : (double)max_diff(out, ref2, n));
    ff_model_close(m);
  }
  /* an unprepared model keeps its weights too */
  ff_model *m = ff_model_open(tiny, NULL);
  ff_error err = {0, ""};
  int rc = m ? ff_model_load_weights(m, good, &err) : -1;
  if (!rc) CHECK(ff_model_load_weights(m, junk, &err) != 0, "junk weights loaded");
  if (!rc) rc = ff_model_prepare(m, FF_ENGINE_RUNTIME, &err);
  if (!rc) rc = forward(m, out, &err);
  CHECK(rc == 0 && !memcmp(out, rt_ref, sizeof ref), "unprepared model after a failed load: rc %d (%s)", rc, err.msg);
  ff_model_close(m);
}

/* rc is an error with a message naming the NULL argument (when err given). */
#define NULL_ERR(call, what)                                                                      \
  do {                                                                                              \
    ff_error e_ = {0, ""};                                                                          \
    ff_error *err = &e_;                                                                            \
    int rc_ = (call);                                                                               \
    CHECK(rc_ < 0 && e_.msg[0], "%s: %d, message '%s'", what, rc_, e_.msg);                          \
    err = NULL;                                                                                     \
    rc_ = (call);                                                                                   \
    CHECK(rc_ < 0, "%s with err NULL: %d", what, rc_);                                             \
  } while (0)

static void nulls(void) {
  const char *good = weights(tiny, "tiny", 1), *lw = weights(llama, "llama", 1);
  ff_model *m = ready(tiny, good, FF_ENGINE_TCC), *d = ready(llama, lw, FF_ENGINE_RUNTIME);
  ff_model *ed = ready(dates, dates_w, FF_ENGINE_RUNTIME);
  if (!m || !d || !ed) {
    ff_model_close(m);
    ff_model_close(d);
    ff_model_close(ed);
    return;
  }
  float out[8 * 256];
  int32_t gen[4];
  int n = 0;
  const char *h;
  const void *blob;
  size_t bytes;
  char *text;
  ff_input in = {0};
  in.batch = 1;
  in.src_len = 8;
  in.src_tokens = ids;
  ff_greedy g = {NULL, 0, ids, 2, 2, -1}, gnull = {NULL, 0, NULL, 2, 2, -1};
  {
    ff_error e = {0, ""};
    CHECK(!ff_model_open(NULL, &e) && e.msg[0], "ff_model_open(NULL)");
    CHECK(!ff_model_open(NULL, NULL), "ff_model_open(NULL, NULL)");
    CHECK(!ff_model_open_text(NULL, "return {}", 9, &e) && e.msg[0], "ff_model_open_text(NULL path)");
    CHECK(!ff_model_open_text("m.lua", NULL, 0, NULL), "ff_model_open_text(NULL text)");
    /* the text is the description, validated as a file is: the path names it */
    const char *bad = "return { name = \"_Bool\", d_model = 8, heads = 2, layers = 1 }";
    CHECK(!ff_model_open_text("nowhere/m.lua", bad, strlen(bad), &e) && strstr(e.msg, "nowhere/m.lua: name:"),
          "ff_model_open_text validates");
    const char *ok = "return { name = \"ok\", d_model = 8, heads = 2, layers = 1, weights = \"w.safetensors\" }";
    ff_model *t = ff_model_open_text("nowhere/m.lua", ok, strlen(ok), &e);
    CHECK(t && !strcmp(ff_model_config(t)->weights, "nowhere/w.safetensors"), "ff_model_open_text: weights beside path");
    ff_model_close(t);
  }
  CHECK(ff_model_config(NULL) == NULL, "ff_model_config(NULL)");
  NULL_ERR(ff_model_set_isa(NULL, "generic", err), "set_isa(NULL model)");
  NULL_ERR(ff_model_set_isa(m, NULL, err), "set_isa(NULL isa)");
  NULL_ERR(ff_model_set_target(NULL, "i686-linux-gnu", err), "set_target(NULL model)");
  NULL_ERR(ff_model_set_threads(NULL, 2, err), "set_threads(NULL)");
  NULL_ERR(ff_model_load_weights(NULL, good, err), "load_weights(NULL model)");
  NULL_ERR(ff_model_load_weights(m, NULL, err), "load_weights(NULL path)");
  NULL_ERR(ff_model_prepare(NULL, FF_ENGINE_RUNTIME, err), "prepare(NULL)");
  NULL_ERR(ff_model_forward(NULL, &in, out, err), "forward(NULL model)");
  NULL_ERR(ff_model_forward(m, NULL, out, err), "forward(NULL in)");
  NULL_ERR(ff_model_forward(m, &in, NULL, err), "forward(NULL out)");
  NULL_ERR(ff_model_begin(NULL, ids, 2, err), "begin(NULL)");
  NULL_ERR(ff_model_begin(ed, NULL, 2, err), "begin(encoder-decoder, NULL src)");
  CHECK(ff_model_begin(d, NULL, 0, NULL) == 0, "begin(decoder-only, NULL src) is fine");
  NULL_ERR(ff_model_step(NULL, ids, 1, out, err), "step(NULL model)");
  NULL_ERR(ff_model_step(d, NULL, 1, out, err), "step(NULL in)");
  NULL_ERR(ff_model_step(d, ids, 1, NULL, err), "step(NULL out)");
  CHECK(ff_model_position(NULL) < 0, "position(NULL)");
  NULL_ERR(ff_model_greedy(NULL, &g, gen, &n, NULL, err), "greedy(NULL model)");
  NULL_ERR(ff_model_greedy(d, NULL, gen, &n, NULL, err), "greedy(NULL g)");
  NULL_ERR(ff_model_greedy(d, &g, NULL, &n, NULL, err), "greedy(NULL out)");
  NULL_ERR(ff_model_greedy(d, &g, gen, NULL, NULL, err), "greedy(NULL n_out)");
  NULL_ERR(ff_model_greedy(d, &gnull, gen, &n, NULL, err), "greedy(NULL prompt)");
  NULL_ERR(ff_model_greedy(ed, &g, gen, &n, NULL, err), "greedy(encoder-decoder, NULL src)");
  CHECK(ff_model_greedy(d, &g, gen, &n, NULL, NULL) == 0 && n == 2, "greedy with NULL logits and err is fine");
  { /* ff_model_sample: the defaults are greedy; a seed repeats; each value outside its range refused */
    ff_sampling s = ff_sampling_default(), bad[5];
    int32_t again[4];
    int m2 = -1;
    CHECK(ff_model_sample(d, &g, &s, again, &m2, NULL, NULL) == 0 && m2 == n && !memcmp(again, gen, sizeof *gen * 2),
          "sample with ff_sampling_default() is greedy");
    s.temperature = 1.5f, s.top_k = 50, s.top_p = 0.9f, s.min_p = 0.01f, s.repeat_penalty = 1.2f, s.seed = 9;
    CHECK(ff_model_sample(d, &g, &s, gen, &n, NULL, NULL) == 0 && ff_model_sample(d, &g, &s, again, &m2, NULL, NULL) == 0 &&
          n == 2 && m2 == 2 && !memcmp(again, gen, sizeof *gen * 2), "sample: the same seed, the same ids");
    for (int i = 0; i < 5; i++) bad[i] = s;
    bad[0].top_p = 0, bad[1].temperature = -1, bad[2].top_k = -1, bad[3].min_p = 1, bad[4].repeat_penalty = 0;
    for (int i = 0; i < 5; i++) NULL_ERR(ff_model_sample(d, &g, &bad[i], gen, &n, NULL, err), "sample(a value out of range)");
  }
  { /* ff_model_beam: beams 1 is greedy; 2 searches; each value outside its range refused */
    ff_beam_opts one = {1, 1.0f, 0}, two = {2, 1.0f, 2}, bad[4];
    int32_t a[4], b[4];
    int na = -1, nb = -1;
    double sc = 0;
    CHECK(ff_model_greedy(d, &g, a, &na, NULL, NULL) == 0 && ff_model_beam(d, &g, &one, b, &nb, &sc, NULL) == 0 &&
          na == nb && !memcmp(a, b, sizeof *a * (size_t)na) && sc != sc, "beam 1 is greedy (score NAN)");
    CHECK(ff_model_beam(d, &g, &two, b, &nb, &sc, NULL) == 0 && nb >= 1 && nb <= 2 && sc <= 0, "beam 2: %d ids, %g",
          nb, sc);
    for (int i = 0; i < 4; i++) bad[i] = two;
    bad[0].beams = 0, bad[1].beams = 1 << 20, bad[2].early_stopping = 3, bad[3].length_penalty = INFINITY;
    for (int i = 0; i < 4; i++) NULL_ERR(ff_model_beam(d, &g, &bad[i], b, &nb, NULL, err), "beam(a value out of range)");
    NULL_ERR(ff_model_beam(d, &g, NULL, b, &nb, NULL, err), "beam(NULL options)");
    NULL_ERR(ff_model_beam(d, &gnull, &two, b, &nb, NULL, err), "beam(NULL prompt)");
  }
  NULL_ERR(ff_model_generate(NULL, "x", &h, NULL, err), "generate(NULL)");
  CHECK(ff_model_generate(m, NULL, &h, NULL, NULL) == 0 && h, "generate(NULL command, NULL source) is fine");
  NULL_ERR(ff_model_kernel_source(NULL, &h, err), "kernel_source(NULL model)");
  NULL_ERR(ff_model_kernel_source(m, NULL, err), "kernel_source(NULL text)");
  CHECK(ff_model_kernel_source(m, &h, NULL) == 0 && strstr(h, "FF_KERNEL void"), "kernel_source is the kernels");
  NULL_ERR(ff_model_set_line_directives(NULL, 0, err), "set_line_directives(NULL)");
  NULL_ERR(ff_model_weight_blob(NULL, &blob, &bytes, err), "weight_blob(NULL model)");
  NULL_ERR(ff_model_weight_blob(m, NULL, &bytes, err), "weight_blob(NULL blob)");
  NULL_ERR(ff_model_weight_blob(m, &blob, NULL, err), "weight_blob(NULL bytes)");
  NULL_ERR(ff_model_driver_source(NULL, 0, &text, err), "driver_source(NULL model)");
  NULL_ERR(ff_model_driver_source(m, 0, NULL, err), "driver_source(NULL text)");
  NULL_ERR(ff_model_weights_source(NULL, good, &text, err), "weights_source(NULL model)");
  NULL_ERR(ff_model_weights_source(m, NULL, &text, err), "weights_source(NULL path)");
  NULL_ERR(ff_model_weights_source(m, good, NULL, err), "weights_source(NULL text)");
  NULL_ERR(ff_model_weights_write(NULL, good, 1, NULL, err), "weights_write(NULL model)");
  NULL_ERR(ff_model_weights_write(m, NULL, 1, NULL, err), "weights_write(NULL path)");
  NULL_ERR(ff_model_weight_blob_write(NULL, 1, NULL, err), "weight_blob_write(NULL model)");
  CHECK(ff_engine_parse(NULL) == -1, "engine_parse(NULL)");
  size_t count;
  ff_tensor_file tf;
  CHECK(ff_config_weights(NULL, NULL, NULL) == FF_EINVAL, "config_weights(NULL)");
  CHECK(ff_config_count_weights(NULL, &count, &count) == FF_EINVAL, "config_count_weights(NULL)");
  CHECK(ff_config_count_weights(ff_model_config(m), NULL, NULL) == 0, "config_count_weights(c, NULL, NULL) is fine");
  CHECK(ff_config_forward_flops(NULL, 1, 1) == 0, "config_forward_flops(NULL)");
  NULL_ERR(ff_config_check_input(NULL, &in, err), "config_check_input(NULL c)");
  NULL_ERR(ff_config_check_input(ff_model_config(m), NULL, err), "config_check_input(NULL in)");
  NULL_ERR(ff_config_init_weights(NULL, 1, good, err), "config_init_weights(NULL c)");
  NULL_ERR(ff_config_init_weights(ff_model_config(m), 1, NULL, err), "config_init_weights(NULL path)");
  NULL_ERR(ff_config_read_weights(NULL, good, &tf, err), "config_read_weights(NULL c)");
  NULL_ERR(ff_config_read_weights(ff_model_config(m), NULL, &tf, err), "config_read_weights(NULL path)");
  NULL_ERR(ff_config_read_weights(ff_model_config(m), good, NULL, err), "config_read_weights(NULL f)");
  CHECK(!ff_config_key_string(NULL, FF_KEY_arch) && !ff_config_key_string(ff_model_config(m), FF_KEY_COUNT) &&
            !ff_config_key_string(ff_model_config(m), FF_KEY_d_model),
        "config_key_string: NULL c, no such key, a number");
  NULL_ERR(ff_model_describe(NULL, &text, err), "describe(NULL model)");
  NULL_ERR(ff_model_describe(m, NULL, err), "describe(NULL text)");
  NULL_ERR(ff_schema_text(FF_SCHEMA_JSON, NULL, err), "schema_text(NULL text)");
  NULL_ERR(ff_schema_text((enum ff_schema_format)7, &text, err), "schema_text(format 7)");
  char folder[32];
  NULL_ERR(ff_import(NULL, dir, NULL, err), "import(NULL src)");
  NULL_ERR(ff_import(tiny, NULL, NULL, err), "import(NULL dir)");
  NULL_ERR(ff_import_default_dir(NULL, folder, sizeof folder, err), "import_default_dir(NULL src)");
  NULL_ERR(ff_import_default_dir("m.bin", NULL, 0, err), "import_default_dir(NULL buf)");
  CHECK(!ff_import_default_dir("x/stories15M.bin", folder, sizeof folder, NULL) && !strcmp(folder, "stories15M-fixformer"),
        "import_default_dir: '%s'", folder);
  CHECK(ff_import_default_dir("x/stories15M.bin", folder, 8, NULL) == FF_ENOMEM, "import_default_dir: a short buf");
  CHECK(forward(m, out, NULL) == 0, "the model works after all that");
  ff_model_close(NULL);
  ff_model_close(m);
  ff_model_close(d);
  ff_model_close(ed);
}

/* What ff_model_weights_write (weights_path given) or ff_model_weight_blob_write
 * (NULL) writes to a file: malloc'd, n bytes (NULL on error, reported). */
static char *written_by(ff_model *m, const char *weights_path, size_t *n) {
  ff_error err = {0, ""};
  FILE *f = tmpfile();
  int rc = !f ? -1 : weights_path ? ff_model_weights_write(m, weights_path, fileno(f), n, &err)
                                  : ff_model_weight_blob_write(m, fileno(f), n, &err);
  char *back = rc ? NULL : malloc(*n + 1);
  if (back && (fseek(f, 0, SEEK_SET) || fread(back, 1, *n + 1, f) != *n)) free(back), back = NULL;
  CHECK(back, "writing the weights to a file: %d (%s)", rc, err.msg);
  if (f) fclose(f);
  return back;
}

/* the blob written piece by piece is the one packed in memory, in every weight type and panel width */
static void streams(void) {
  static const char *const types[] = {"f32", "bf16", "int8"}, *const isas[] = {"generic", "avx512"};
  const char *good = weights(llama, "llama", 1);
  ff_error err = {0, ""};
  ff_model *m = ff_model_open(llama, &err);
  int rc = m ? ff_model_load_weights(m, good, &err) : -1;
  CHECK(rc == 0, "%s: %s", llama, err.msg);
  for (int t = 0; t < 3 && !rc; t++)
    for (int i = 0; i < 2 && !rc; i++) {
      const void *blob = NULL;
      size_t bytes = 0, n = 0;
      rc = ff_model_set_dtype(m, types[t], &err) || ff_model_set_isa(m, isas[i], &err) ||
           ff_model_weight_blob(m, &blob, &bytes, &err);
      char *back = rc ? NULL : written_by(m, NULL, &n);
      CHECK(back && n == bytes && !memcmp(back, blob, n), "%s %s: the blob written differs from the packed one (%s)",
            types[t], isas[i], err.msg);
      free(back);
    }
  ff_model_close(m);
}

/* clones share what is made and own what they change: new weights or
 * another ISA in a clone leave the original's numbers and files alone. */
static void clones(void) {
  const char *good = weights(tiny, "tiny", 1), *other = weights(tiny, "tiny", 2);
  static float ref[8 * 128], out[8 * 128];
  ff_error err = {0, ""};
  ff_model *m = ready(tiny, good, FF_ENGINE_TCC), *c = m ? ff_model_clone(m, &err) : NULL;
  int rc = c ? forward(m, ref, &err) : -1;
  if (!rc) rc = forward(c, out, &err);
  CHECK(rc == 0 && !memcmp(out, ref, sizeof ref), "clone: forward: %d (%s)", rc, err.msg);
  if (!rc) rc = ff_model_load_weights(c, other, &err);
  if (!rc) rc = forward(m, out, &err);
  CHECK(rc == 0 && !memcmp(out, ref, sizeof ref), "new weights in a clone changed the original: %d (%s)", rc,
        err.msg);
  ff_model_close(m); /* the original first: the clone keeps what it shares */
  if (!rc) rc = forward(c, out, &err);
  CHECK(rc == 0 && memcmp(out, ref, sizeof ref), "the clone after its original closed: %d (%s)", rc, err.msg);
  ff_model_close(c);
  /* the description's Lua state renders for each model's own program */
  char *d1 = NULL, *w1 = NULL, *d2 = NULL, *w2 = NULL, *wc = NULL;
  m = ff_model_open(tiny, &err);
  rc = m ? ff_model_load_weights(m, good, &err) : -1;
  if (!rc) rc = ff_model_driver_source(m, 1, &d1, &err);
  if (!rc) rc = ff_model_weights_source(m, good, &w1, &err);
  c = rc ? NULL : ff_model_clone(m, &err);
  rc = c ? ff_model_set_isa(c, "avx512", &err) : -1; /* (tiny packs its weights alike for generic and avx2) */
  if (!rc) rc = ff_model_weights_source(c, good, &wc, &err);
  if (!rc) rc = ff_model_driver_source(m, 1, &d2, &err);
  if (!rc) rc = ff_model_weights_source(m, good, &w2, &err);
  CHECK(rc == 0 && strcmp(w1, wc), "a clone with another ISA: %d (%s)", rc, err.msg);
  size_t n = 0;
  char *back = rc ? NULL : written_by(m, good, &n);
  CHECK(back && n == strlen(w1) && !memcmp(back, w1, n), "weights_write wrote other than weights_source");
  free(back);
  CHECK(rc == 0 && !strcmp(d1, d2) && !strcmp(w1, w2), "the original's files changed after its clone generated");
  free(d1), free(d2), free(w1), free(w2), free(wc);
  ff_model_close(c);
  ff_model_close(m);
}

/* the ISA table (kernels/isas.h) as the API reports it, and ff_model_set_isa agreeing with it */
static void isas(void) {
  ff_error err = {0};
  CHECK(ff_isa_at(0) && !strcmp(ff_isa_at(0)->name, "generic") && ff_isa_at(0)->runs_here,
        "the first ISA is not generic, run here");
  CHECK(ff_isa_at(-1) == NULL, "ff_isa_at(-1) is not NULL");
  ff_model *m = ff_model_open(tiny, &err);
  CHECK(m != NULL, "cannot open %s: %s", tiny, err.msg);
  int n = 0;
  for (; ff_isa_at(n); n++) {
    const ff_isa *isa = ff_isa_at(n);
    CHECK(isa->mr >= 1 && isa->mr <= 8 && isa->nr >= 1 && isa->nr % 16 == 0, "%s: tile %d x %d", isa->name, isa->mr,
          isa->nr); /* kernels/sdpa.c's scratch holds 8 rows; panels are whole cache lines */
    CHECK(!m || ff_model_set_isa(m, isa->name, &err) == 0, "set_isa(%s): %s", isa->name, err.msg);
  }
  CHECK(n >= 2 && ff_isa_at(n) == NULL && ff_isa_at(1000) == NULL, "%d ISAs, or none past the last", n);
  CHECK(!m || ff_model_set_isa(m, "sse9", &err) == FF_EINVAL, "set_isa(sse9) was accepted");
  ff_model_close(m);
}

/* a tensor listed: counted, and in the file init wrote with its shape */
typedef struct {
  const ff_tensor_file *file;
  size_t tensors, params;
  int bad;
} listed;

static int list_one(void *ctx, const ff_weight_info *w) {
  listed *l = ctx;
  const ff_tensor *t = ff_tensor_file_find(l->file, w->name);
  l->tensors++;
  l->params += (size_t)w->shape[0] * (size_t)(w->rank == 2 ? w->shape[1] : 1);
  if (!t || t->rank != w->rank || t->shape[0] != w->shape[0] || (w->rank == 2 && t->shape[1] != w->shape[1])) {
    if (!l->bad++) fprintf(stderr, "FAIL: %s is not in init's file with its shape\n", w->name);
  }
  return 0;
}

static void config(void) {
  ff_error err = {0, ""};
  const char *models[] = {tiny, llama, dates};
  for (int i = 0; i < 3; i++) {
    ff_model *m = ff_model_open(models[i], &err), *again = NULL;
    CHECK(m != NULL, "cannot open %s: %s", models[i], err.msg);
    if (!m) continue;
    const ff_config *c = ff_model_config(m);
    const char *w = weights(models[i], c->name, 3); /* ff_config_init_weights */
    ff_tensor_file f = {0};
    size_t tensors = 0, params = 0;
    CHECK(ff_config_read_weights(c, w, &f, &err) == 0, "%s: read_weights: %s", c->name, err.msg);
    listed l = {&f, 0, 0, 0};
    CHECK(ff_config_weights(c, list_one, &l) == 0 && !l.bad, "%s: config_weights", c->name);
    ff_config_count_weights(c, &tensors, &params);
    CHECK(l.tensors == tensors && l.params == params && (int)tensors == f.count, "%s: %zu tensors listed, %zu counted, %d in the file",
          c->name, l.tensors, tensors, f.count);
    ff_tensor_file_free(&f);
    CHECK(ff_config_forward_flops(c, 4, 4) > ff_config_forward_flops(c, 1, 1), "%s: FLOPs grow with T", c->name);
    CHECK(!strcmp(ff_config_key_string(c, FF_KEY_name), c->name), "%s: key_string(name)", c->name);
    char *text = NULL, *text2 = NULL;
    CHECK(ff_model_describe(m, &text, &err) == 0 && !strncmp(text, "return {\n", 9), "%s: describe: %s", c->name,
          err.msg);
    if (text) again = ff_model_open_text("described.lua", text, strlen(text), &err); /* paths as resolved: from here */
    CHECK(again && ff_model_describe(again, &text2, &err) == 0 && !strcmp(text, text2),
          "%s: the description's text does not read back the same: %s", c->name, err.msg);
    CHECK(again && !memcmp(ff_model_config(again), c, sizeof *c), "%s: the text loads another config", c->name);
    free(text);
    free(text2);
    ff_model_close(again);
    ff_model_close(m);
  }
  char *json = NULL, *md = NULL;
  CHECK(ff_schema_text(FF_SCHEMA_JSON, &json, &err) == 0 && !strncmp(json, "{\n  \"keys\": [", 12) &&
            strstr(json, "\"key\": \"d_model\""),
        "schema_text(JSON): %.40s", json ? json : err.msg);
  CHECK(ff_schema_text(FF_SCHEMA_MARKDOWN, &md, &err) == 0 && !strncmp(md, "| key | default |", 17) &&
            strstr(md, "| `d_model` | required |"),
        "schema_text(Markdown): %.40s", md ? md : err.msg);
  free(json);
  free(md);
}

static int rm(const char *path, const struct stat *st, int flag, struct FTW *f) {
  (void)st, (void)flag, (void)f;
  return remove(path);
}

int main(int argc, char **argv) {
  static const struct { const char *name; void (*fn)(void); } checks[] = {
      {"step_overflow", step_overflow}, {"bad_engine", bad_engine}, {"bad_weights", bad_weights}, {"nulls", nulls},
      {"clones", clones}, {"streams", streams}, {"isas", isas}, {"config", config}};
  if (argc < 2) {
    fprintf(stderr, "usage: test_api MODELS_DIR [CHECK ...]\n");
    return 2;
  }
  snprintf(tiny, sizeof tiny, "%s/tiny.lua", argv[1]);
  snprintf(llama, sizeof llama, "%s/llama_tiny.lua", argv[1]);
  snprintf(dates, sizeof dates, "%s/dates.lua", argv[1]);
  snprintf(dates_w, sizeof dates_w, "%s/dates.safetensors", argv[1]);
  snprintf(dir, sizeof dir, "/tmp/ff-test-api-XXXXXX");
  if (!mkdtemp(dir)) {
    perror("test_api: mkdtemp");
    return 1;
  }
  setenv("XDG_CACHE_HOME", dir, 1); /* a private cache for the cc engine */
  for (size_t i = 0; i < sizeof checks / sizeof *checks; i++) {
    int run = argc == 2;
    for (int a = 2; a < argc; a++) run |= !strcmp(argv[a], checks[i].name);
    if (!run) continue;
    int before = failures;
    checks[i].fn();
    printf("%s: %s\n", checks[i].name, failures == before ? "ok" : "FAILED");
  }
  nftw(dir, rm, 16, FTW_DEPTH | FTW_PHYS);
  return failures ? 1 : 0;
}
