/* fixformer.h - the public C API: open a model description, bind its
 * weights, prepare an engine, run forward passes.  The `fixformer` command
 * line is built on exactly this API.
 *
 *   ff_error err;
 *   ff_model *m = ff_model_open("models/tiny.lua", &err);
 *   if (!m || ff_model_load_weights(m, "tiny.safetensors", &err) ||
 *       ff_model_prepare(m, FF_ENGINE_RUNTIME, &err) ||
 *       ff_model_forward(m, &input, out, &err))
 *     fprintf(stderr, "%s\n", err.msg);
 *   ff_model_close(m);
 */
#ifndef FIXFORMER_H
#define FIXFORMER_H

#include <stddef.h>
#include <stdint.h>

#include "ff_config.h"        /* ff_config, ff_input: plain data */
#include "ff_error.h"         /* ff_error, the FF_E* status codes */
#include "ff_io.h"            /* safetensors, .npy and vocabulary files */
#include "fixformer_version.h" /* FF_VERSION, FF_VERSION_MAJOR/MINOR/PATCH */

#ifdef __cplusplus
extern "C" {
#endif

/* The version of the library linked in (FF_VERSION is the header's). */
const char *ff_version(void);

typedef struct ff_model ff_model;

enum ff_engine {
  FF_ENGINE_RUNTIME, /* the shape-generic reference runtime */
  FF_ENGINE_TCC,     /* generated C compiled in memory by libtcc */
  FF_ENGINE_CC       /* generated C compiled by $CC into a shared object */
};

/* Arguments and NULL: err may be NULL in every call (the status is still
 * returned).  Any other pointer argument is required unless its function
 * says it may be NULL; a NULL one is FF_EINVAL ("FUNCTION: ARG is NULL"),
 * never a crash.
 *
 * Threads: every call on one ff_model holds that model's lock, so calls on
 * one model from several threads are safe but run one at a time.  A
 * decoding sequence (ff_model_begin, then ff_model_step ...) is one position
 * in one model: it belongs to one thread at a time, as interleaved steps of
 * two threads on one model would decode one sequence made of both.  To serve
 * many threads at once, give each its own clone (ff_model_clone): clones
 * share the description, the weights, the generated program, the packed
 * weights and the compiled code, and each has its own state, caches,
 * position and thread pool, so calls on different clones run in parallel.
 * Calls that change a model (ff_model_load_weights, ff_model_set_isa,
 * ff_model_prepare with another engine) change that model only, never its
 * clones.  Models and clones may be closed in any order, from any thread,
 * once no call on that same model is running. */

/* Loads a description in the sandbox and validates it.  NULL on error
 * (description_path NULL: FF_EINVAL). */
ff_model *ff_model_open(const char *description_path, ff_error *err);
/* The same on len bytes of description text, as if read from a file at
 * description_path (which need not exist: its folder is where the weights
 * and vocabulary named are looked for, and it names messages); what writes
 * a description checks it with this before writing.  NULL on error. */
ff_model *ff_model_open_text(const char *description_path, const char *text, size_t len, ff_error *err);
/* A new model sharing m's description, weights, generated program, packed
 * weights and compiled code (nothing is copied or compiled again), with its
 * own state, caches, position, threads and pool; prepared if m is, for the
 * same engine, ISA and number of threads.  NULL on error (m NULL:
 * FF_EINVAL). */
ff_model *ff_model_clone(const ff_model *m, ff_error *err);
/* The resolved config of an open model (the same for its clones); NULL if m
 * is NULL. */
const ff_config *ff_model_config(const ff_model *m);
/* The matrix kernels generated code calls, which fix the packing of the
 * weights: an ISA of ff_isa_at ("generic", portable C, is the default), or
 * "native" (the best this machine runs).  The JIT engines always use this
 * machine's.  Another ISA than the current one unprepares the model. */
int ff_model_set_isa(ff_model *m, const char *isa, ff_error *err);
/* The ISA the model's generated code uses ("generic" until set); NULL if m
 * is NULL. */
const char *ff_model_isa(const ff_model *m);
/* The target the generated code is for, a triple such as
 * "arm-linux-gnueabihf" (NULL: this machine, the default).  Its
 * architecture gives its size_t: 32 bits for arm*, thumb*, i386..i686,
 * riscv32 and the x32 / ILP32 ABIs, 64 otherwise; generating refuses a model
 * whose state, weights or output of max_seq positions do not fit its objects.
 * The JIT engines always generate for this machine. */
int ff_model_set_target(ff_model *m, const char *target, ff_error *err);
/* The weight type: "f32", "bf16" or "int8" (int8 per group of 32 inputs
 * with a float scale), for the matrices of linear ops and the token
 * embeddings; the description's `dtype` until set.  Every engine computes
 * with the weights as that type stores them (the runtime quantizes a copy).
 * Another type than the current one unprepares the model. */
int ff_model_set_dtype(ff_model *m, const char *dtype, ff_error *err);
const char *ff_model_dtype(const ff_model *m);
/* What the linear layers of the blocks compute in: "f32"; "int8" (each input
 * row quantized when it runs, the weights per output channel, exact int32
 * sums); or "bf16" (inputs and weights rounded to bfloat16, float32 sums of
 * pairs): docs/performance.md's accuracy contracts; the description's
 * `compute` until set.  Every engine computes the same (the runtime on a copy
 * of the weights so rounded).  Another one unprepares the model. */
int ff_model_set_compute(ff_model *m, const char *compute, ff_error *err);
const char *ff_model_compute(const ff_model *m);
/* The ISAs ff_model_set_isa knows, generic first (i = 0, 1, ...; NULL past the
 * last): its name, register tile (mr rows x nr columns: weights are packed in
 * panels of nr), the C compiler flags its emitted kernels need, whether
 * this machine runs it, the CPU features it needs at run time (GCC's
 * __builtin_cpu_supports names, space-separated; "": every CPU of its
 * targets has it) and the architectures it runs on (a target triple's first
 * part, space-separated; "": every one). */
typedef struct {
  const char *name;
  int mr, nr;
  const char *flags;
  int runs_here;
  const char *cpu, *targets;
} ff_isa;
const ff_isa *ff_isa_at(int i);
/* Threads for the generated code (tcc, cc engines): its matrix products and
 * attention split over a pool of this many (1..FF_MAX_THREADS; default 1).
 * Results do not depend on it.  The runtime always runs on one thread. */
#define FF_MAX_THREADS 8
int ff_model_set_threads(ff_model *m, int threads, ff_error *err);
/* Reads a safetensors file and binds it by PyTorch names (strict).  On
 * error the model keeps its previous weights and engine, as if not called;
 * on success a prepared model stays prepared (with the new weights) and a
 * decoding sequence must begin again. */
int ff_model_load_weights(ff_model *m, const char *safetensors_path, ff_error *err);
/* FF_EINVAL naming the first loaded tensor that holds a NaN or an infinity
 * (the CLI refuses such weights unless --allow-nonfinite; every engine
 * propagates NaN as PyTorch does). */
int ff_model_check_finite(const ff_model *m, ff_error *err);
/* Makes the engine ready (compiles the generated code for tcc / cc); an
 * engine outside enum ff_engine is FF_EINVAL. */
int ff_model_prepare(ff_model *m, enum ff_engine engine, ff_error *err);
/* One forward pass; out holds batch * T * ff_config_out_dim floats.  In in,
 * lengths may be NULL (all full), and the token or float inputs the model
 * does not take; a missing one it takes is FF_EINVAL.  It ends a decoding
 * sequence begun on this model (ff_model_begin again after it). */
int ff_model_forward(ff_model *m, const ff_input *in, float *out, ff_error *err);
/* ---- step by step: decoding with the key/value cache -------------------- */

/* Starts a sequence: for encoder-decoder, encodes the source src (ids [S],
 * or floats [S, d_model] for a model without vocab) once, computing every
 * decoder layer's cross-attention keys and values; for decoder-only, src is
 * ignored and may be NULL (encoder-decoder: NULL is FF_EINVAL).  The next
 * step decodes position 0. */
int ff_model_begin(ff_model *m, const void *src, int S, ff_error *err);
/* Decodes T new positions (ids [T] or floats [T, d_model]) at the current
 * position, appending their keys and values to the cache: out [T, out_dim].
 * FF_ELENGTH when T < 1 or the positions would pass max_seq. */
int ff_model_step(ff_model *m, const void *in, int T, float *out, ff_error *err);
/* The position the next step decodes; FF_EINVAL if m is NULL. */
int ff_model_position(const ff_model *m);

typedef struct ff_greedy {
  const int32_t *src;    /* encoder-decoder: the source ids (else ignored, may be NULL) */
  int src_len;
  const int32_t *prompt; /* the decoder's first ids (encoder-decoder: usually just BOS) */
  int prompt_len;
  int max_new;           /* at most this many new ids; prompt_len + max_new <= max_seq */
  int eos;               /* stop once this id is generated; -1: never */
} ff_greedy;

/* Greedy decoding with the cache: out receives the generated ids (max_new
 * at most, eos included when it came), *n_out their count (0 on error).
 * logits may be NULL; if not, it receives [prompt_len + max_new - 1, vocab]:
 * the logits of every position fed to the decoder, in order (row i predicts
 * id i + 1).  g, g->prompt, out and n_out are required. */
int ff_model_greedy(ff_model *m, const ff_greedy *g, int32_t *out, int *n_out, float *logits, ff_error *err);

typedef struct ff_sampling {
  float temperature;    /* 0: greedy (the argmax, after the penalty); else > 0 */
  int top_k;            /* keep the k largest logits (ties kept); 0: off */
  float top_p;          /* nucleus: in (0, 1]; 1: off */
  float min_p;          /* keep p >= min_p * p(max): in [0, 1); 0: off */
  float repeat_penalty; /* > 0: seen ids' logits x > 0 become x / R, else x * R; 1: off */
  uint64_t seed;        /* the draws are a function of (seed, sequence, position) */
  uint64_t sequence;    /* this sequence's index in a run (fixformer generate: the input's) */
} ff_sampling;
/* The defaults: greedy (temperature 0), every filter off, seed 0. */
ff_sampling ff_sampling_default(void);

/* ff_model_greedy with sampling, as Hugging Face generate(do_sample=True):
 * repetition penalty (over the prompt and the ids generated; for
 * encoder-decoder the decoder's), temperature, top-k, top-p, min-p, then one
 * draw (runtime/ff_sample.h), so a seed gives the same ids on every engine
 * and thread count, and in the emitted driver.  s NULL, or temperature 0
 * with repeat_penalty 1, is exactly ff_model_greedy.  A value outside its
 * range is FF_EINVAL. */
int ff_model_sample(ff_model *m, const ff_greedy *g, const ff_sampling *s, int32_t *out, int *n_out, float *logits,
                    ff_error *err);

typedef struct ff_beam_opts {
  int beams;            /* the beam width, 1..vocab / 2; 1: exactly ff_model_greedy */
  float length_penalty; /* a finished sequence scores sum(log p) / length^length_penalty (1: HF's default) */
  int early_stopping;   /* 0: HF's early_stopping=False (its default), 1: True, 2: "never" */
} ff_beam_opts;

/* Beam search as Hugging Face generate(num_beams, length_penalty,
 * early_stopping) with num_return_sequences 1 (runtime/ff_beam.h says how):
 * out receives the best sequence's ids (at most g->max_new, the EOS that
 * ended it included) and *score (may be NULL) its score, length counting
 * the ids generated.  Each beam decodes in a state of its own; a beam whose
 * parent lost its state gets the parent's key/value rows copied from the
 * first position where the two sequences differ.  The model's decoding
 * sequence ends: ff_model_begin again before ff_model_step.  beams 1 is
 * ff_model_greedy (score NAN); a value outside its range is FF_EINVAL. */
int ff_model_beam(ff_model *m, const ff_greedy *g, const ff_beam_opts *b, int32_t *out, int *n_out, double *score,
                  ff_error *err);

/* Progress of the slow steps of a model's calls ("read weights", "generate
 * C", "pack weights", "compile with cc", "compile with tcc", "write the
 * weights as C"): fn(ctx, step, 0) when one starts and fn(ctx, step, 1) when
 * it ends, on the calling thread, with the model's lock held (fn must not
 * call back into m).  NULL stops it.  Clones start without one. */
typedef void (*ff_progress_fn)(void *ctx, const char *step, int done);
void ff_model_set_progress(ff_model *m, ff_progress_fn fn, void *ctx);

/* The generated C for the model: header and source text, owned by m (valid
 * until m changes ISA or is closed).  command is recorded in the header
 * comment (NULL: "fixformer"); header and source may be NULL. */
int ff_model_generate(ff_model *m, const char *command, const char **header, const char **source, ff_error *err);
/* The kernel library the source includes (NAME_kernels.c: the kernels of
 * fixformer's kernels/ that the model calls), owned by m as the source is. */
int ff_model_kernel_source(ff_model *m, const char **text, ff_error *err);
/* #line directives in the generated C, naming the lines of fixformer's
 * templates/ and kernels/ each part comes from (on by default; off: emit
 * --no-line).  A change discards the generated program and the engine. */
int ff_model_set_line_directives(ff_model *m, int on, ff_error *err);
/* The loaded weights packed into the generated code's layout: a blob with a
 * 64-byte header (magic, version, layout hash, size), owned by m. */
int ff_model_weight_blob(ff_model *m, const void **blob, size_t *bytes, ff_error *err);
/* The same blob written to fd as it is packed, never held whole; *bytes
 * (may be NULL): how many were written.  A failure may leave part of it
 * in fd: write to a temporary file (ff_write_files_atomic_streamed). */
int ff_model_weight_blob_write(ff_model *m, int fd, size_t *bytes, ff_error *err);
/* The --with-main driver (NAME_main.c) and the --embed weights
 * (NAME_weights.c) for the generated code; malloc'd text for the caller. */
int ff_model_driver_source(ff_model *m, int embed, char **text, ff_error *err);
int ff_model_weights_source(ff_model *m, const char *weights_path, char **text, ff_error *err);
/* The same --embed text written to fd as it is formatted, never held whole
 * (a model's text is about 4 times its float32 weights); *bytes (may be
 * NULL): how many were written.  A failure may leave part of it in fd:
 * write to a temporary file (ff_write_files_atomic_streamed). */
int ff_model_weights_write(ff_model *m, const char *weights_path, int fd, size_t *bytes, ff_error *err);
/* Frees the model (what it shares with clones when the last of them goes);
 * NULL is fine. */
void ff_model_close(ff_model *m);

/* The cc engine's cache of compiled models ($XDG_CACHE_HOME/fixformer, else
 * ~/.cache/fixformer, else /tmp/fixformer-cache-UID): its folder into buf
 * (created 0700; refused unless it is ours alone), and emptying it.  The
 * JIT engines' packed weights are kept there too; one the cache cannot
 * store (a full disk, a quota, RLIMIT_FSIZE) is used from memory, no error,
 * while a cc object that cannot be written fails ff_model_prepare.  No
 * write of the library raises SIGXFSZ (ff_write_all, ff_io.h). */
int ff_cc_cache_dir(char *buf, size_t n, ff_error *err);
int ff_cc_cache_clean(size_t *removed_bytes, int *removed_files, ff_error *err);

/* The engine to use when none is chosen, the same for every command of the
 * CLI: cc (the fastest) where a C compiler is found ($CC, else cc on PATH),
 * else tcc; the environment variable FIXFORMER_ENGINE (runtime, tcc or cc)
 * overrides it.  The runtime is the reference the others are tested against. */
enum ff_engine ff_engine_default(void);
/* Name of an engine ("runtime", "tcc", "cc"; "?" if unknown) and back; -1
 * if unknown or NULL. */
const char *ff_engine_name(enum ff_engine e);
int ff_engine_parse(const char *name);

/* ---- what a description implies: tensors, FLOPs, inputs, text ------------ */
/* c is a resolved config (ff_model_config's); a NULL c or other required
 * pointer is FF_EINVAL, as in every call above. */

/* One tensor a model has: a row of ff_schema.h's FF_WEIGHT_KINDS (kind) for
 * one layer of one stack, named in full as PyTorch names it. */
typedef struct ff_weight_info {
  const char *name;        /* prefix included; valid during the call only */
  enum ff_tensor_kind kind;
  int layer;               /* in its stack; -1 outside the stacks */
  int rank;                /* 1 or 2 */
  int shape[2];            /* rank 1: shape[1] is 0 */
} ff_weight_info;
typedef int (*ff_weight_info_fn)(void *ctx, const ff_weight_info *w);
/* fn for every tensor c's model has, in the order `init` draws them
 * (embeddings, encoder, decoder, head); stops at and returns fn's first
 * non-zero. */
int ff_config_weights(const ff_config *c, ff_weight_info_fn fn, void *ctx);
/* The number of tensors and of float parameters (either may be NULL). */
int ff_config_count_weights(const ff_config *c, size_t *tensors, size_t *params);
/* FLOPs of one sequence's forward pass, a multiply-add counting 2: S
 * positions (encoder-decoder: S source and T target positions); 0 if c is
 * NULL. */
double ff_config_forward_flops(const ff_config *c, int S, int T);
/* The first problem of an input for c, as ff_model_forward would report it
 * (batch, lengths, the inputs the model takes, ids outside the vocabulary),
 * before any weights are read. */
int ff_config_check_input(const ff_config *c, const ff_input *in, ff_error *err);
/* Writes deterministic random weights with PyTorch's default initialisation
 * (the same seed, the same bytes) to path, atomically (`fixformer init`). */
int ff_config_init_weights(const ff_config *c, uint64_t seed, const char *path, ff_error *err);
/* ff_safetensors_read, then projections stored apart (q/k/v_proj,
 * gate/up_proj) fused as c's model binds them: the tensors as the model sees
 * them, to check before loading.  Free with ff_tensor_file_free. */
int ff_config_read_weights(const ff_config *c, const char *path, ff_tensor_file *f, ff_error *err);
/* c's value of a key as its description writes it: IDENTIFIER, STRING and
 * PATH keys, the word of an ENUM ("decoder-only"); NULL for other keys, a
 * key outside enum ff_key or c NULL. */
const char *ff_config_key_string(const ff_config *c, enum ff_key key);
/* m's resolved description as Lua text, "return {\n...}\n", that loads as
 * the same model: every key it has in the schema's order, defaults filled in,
 * a comment on a few, dtype the model's (ff_model_dtype); malloc'd. */
int ff_model_describe(const ff_model *m, char **text, ff_error *err);
/* The schema of descriptions (include/ff_schema.h: keys, conditions, shapes,
 * weight kinds) as JSON, what python/fixformer_schema.json holds, or the key
 * table of docs/model-description.md in Markdown; malloc'd. */
enum ff_schema_format { FF_SCHEMA_JSON, FF_SCHEMA_MARKDOWN };
int ff_schema_text(enum ff_schema_format format, char **text, ff_error *err);

/* ---- import: a published checkpoint -> a description + weights ----------- */

/* The settings of ff_import; a zeroed struct (or NULL) takes every default. */
typedef struct ff_import_options {
  const char *name;      /* the model's name, a C identifier of at most 48 characters (NULL: from src) */
  const char *tokenizer; /* the tokenizer to copy (NULL: tokenizer.json in the folder, tokenizer.bin beside a
                            .bin, left out with a note when generate could not load it) */
  int max_seq;           /* > 0: at most this many positions (1..the source's); 0: the source's */
  void (*report)(void *ctx, const char *line); /* the summary, a line at a time, no newline (NULL: none) */
  void *report_ctx;
  ff_progress_fn progress; /* "read the checkpoint", "write the files" (NULL: none) */
  void *progress_ctx;
} ff_import_options;
/* A checkpoint as it is published, src: a Hugging Face model folder
 * (config.json + model.safetensors or the shards of
 * model.safetensors.index.json; llama, qwen2, gpt2, bert, marian), a llama2.c .bin
 * or a GGUF file (llama, qwen2; F32, F16, BF16, Q8_0 as dtype int8; the
 * tokenizer of its metadata), to dir/NAME.lua (the description, naming the rest), dir/NAME.safetensors
 * and the tokenizer, written all or none (dir made if need be) and only once
 * the description loads as every command loads it and no file written would
 * replace one read.  The summary says what was mapped and ignored; its last
 * line is the path of NAME.lua.  Messages name the options by the command's
 * flags (--name, --tokenizer, --max-seq). */
int ff_import(const char *src, const char *dir, const ff_import_options *options, ff_error *err);
/* The folder `fixformer import` writes into without -o: src's last name,
 * a .bin or .gguf dropped, with "-fixformer" added ("model-fixformer" for "/", "."),
 * into buf (n bytes; FF_ENOMEM when it does not fit). */
int ff_import_default_dir(const char *src, char *buf, size_t n, ff_error *err);

#ifdef __cplusplus
}
#endif

#endif
