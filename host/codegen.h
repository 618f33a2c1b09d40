/* codegen.h - running the Lua generator and packing weights into its layout,
 * and the two JIT backends.  Private to host/. */
#ifndef FF_CODEGEN_H
#define FF_CODEGEN_H

#include <stddef.h>
#include <stdint.h>

#include "ff_config.h"
#include "ff_error.h"
#include "ff_io.h"
#include "fixformer_train.h"
#include "host.h"

/* Tables of the positions the packer computes (gen/plan.lua, ops.position_blocks):
 * two levels, pos = hi 2^block_bits + lo.  Sinusoidal: rows hi, then rows lo, of
 * the sin, cos pairs of their angles; RoPE: a row of the frequencies, then rows
 * hi, then rows lo, of the d_k/2 cosines then sines. */
enum { FF_DERIVED_NONE, FF_DERIVED_SINUSOIDAL, FF_DERIVED_ROPE };

/* a layout entry's types beside enum ff_weight_type's: compute int8's panels
 * (kernels/int8.c: a scale and a sum per column, 4 k a column a step) and
 * compute bf16's (kernels/bf16.c: bfloat16, 2 k a column a step) */
#define FF_PACK_I8 3
#define FF_PACK_B16 4

typedef struct {
  char *name;       /* PyTorch name */
  size_t offset;    /* floats into the data */
  int row0, rows;   /* rows row0 .. row0 + rows - 1 of the tensor */
  int cols;         /* 0 for vectors */
  int panel;        /* 0: as in PyTorch; NR: W^T in panels of NR columns, zero-padded */
  int type;         /* stored as: enum ff_weight_type (runtime/quant.c, kernels/prototypes.h) or FF_PACK_I8 */
  int derived;      /* a table no tensor holds, computed when packing: FF_DERIVED_* */
  int block_bits;   /* derived: rows lo are 2^block_bits, rows hi the rest */
  int dim;          /* derived: d_model (sinusoidal), d_k (RoPE) */
  float theta;      /* FF_DERIVED_ROPE: the RoPE base */
} ff_layout_entry;

/* A derived table of the layout (e->rows x e->cols floats) into dst. */
void ff_position_table(const ff_layout_entry *e, float *dst);

/* A generated program: the C text and the weight layout it expects. */
typedef struct {
  char *header, *source;     /* NAME.h, NAME.c */
  char *kernel_source;       /* NAME_kernels.c: the kernels NAME.c calls, which it includes */
  char *kernels;             /* the ISA's whole kernel library on its own (the cc engine's) */
  ff_layout_entry *layout;
  int n_layout;
  size_t weight_floats;
  size_t state_bytes;
  uint64_t layout_hash;
  double flops;              /* one sequence at T = max_seq */
  /* the decoder's caches in the state, in floats from its start (beam search
   * copies their rows between states): n_kv layers (0: an encoder), each
   * kv_row floats a position; kv_cross NULL without an encoder; the int32
   * fields decode checks (source_at -1: none) */
  int n_kv;
  size_t *kv_self, *kv_cross, kv_row;
  long long decoded_at, source_at;
} ff_program;

typedef struct {
  const char *source;        /* the description path as given */
  const char *command;       /* recorded in the header comment */
  const char *isa;           /* the matrix kernels: "generic", "avx512", ... */
  const char *dtype;         /* the weight type: "f32", "bf16", "int8" */
  const char *compute;       /* the blocks' linear layers: "f32", "int8" (kernels/int8.c) */
  const char *target;        /* the triple the code is for; NULL or "": this machine */
  int no_line;               /* no #line directives (emit --no-line) */
} ff_gen_options;

/* The ISAs whose matrix kernels this host has compiled in and can run, best
 * first ("avx512", ..., "generic"), and the best of them. */
const char *const *ff_host_isas(void);
const char *ff_host_isa(void);
/* FF_EINVAL when FIXFORMER_ISA is set to an ISA this host does not run. */
int ff_host_isa_check(ff_error *err);
/* The host's builds of the kernels (kernels/), for the libtcc
 * engine: add(ctx, "ff_KIND_ISA", fn) for each kernel of each ISA in
 * ff_host_isas(). */
void ff_native_kernels(void (*add)(void *ctx, const char *name, void *fn), void *ctx);
/* The host's build of kernel ff_KIND_ISA for ff_host_isa() (cast it to its prototype,
 * kernels/prototypes.h), or NULL for a kind it does not have. */
void (*ff_native_kernel(const char *kind))(void);

/* Plans and emits the loaded description (its config table is in the
 * state's registry) for config c. */
int ff_generate(ff_lua *h, const ff_config *c, const ff_gen_options *o, ff_program *out, ff_error *err);
/* The same for its training program at fixed shapes (gen/train.lua); o's
 * dtype and target are not used (training is float32). */
int ff_generate_train(ff_lua *h, const ff_config *c, const ff_gen_options *o, const ff_train_shape *shape,
                      ff_train_code *out, ff_error *err);
void ff_program_free(ff_program *p);
/* ff_model_train_code for an ISA other than the model's (NULL: the model's):
 * the JIT engines generate for this machine's. */
int ff_model_train_code_isa(ff_model *m, const ff_train_shape *shape, const char *command, const char *isa,
                            ff_train_code *out, ff_error *err);

/* What the files that go with a program are rendered from. */
typedef struct {
  const char *section;   /* "main": the --with-main driver; "weights": the --embed weights */
  int embed;             /* the driver links NAME_weights.c */
  const char *data;      /* "weights": the initialiser text of the floats */
  const char *weights;   /* "weights": the safetensors file they came from */
  const char *sha256;    /* "weights": of the floats */
  /* "main": the description's tokenizer (NULL: none), compiled into the driver */
  const char *tok_tables;            /* its tables as C (ff_tokenizer_c_tables) */
  const char *tok_path;              /* its file, as the banner shows it */
  const ff_tokenizer_info *tok_info; /* its kind, special ids and template */
} ff_extra;

/* Renders one of those files for the last generated program (malloc'd). */
int ff_render_extra(ff_lua *h, const ff_extra *x, char **out, ff_error *err);

/* ---- the --embed weights as C (embed.c) ---- */

/* Where text goes (0, or FF_E* with err set). */
typedef struct {
  int (*write)(void *ctx, const char *s, size_t n, ff_error *err);
  void *ctx;
} ff_text_out;

/* What the "weights" file is rendered with in place of its data (no value
 * rendered into it has a control character: paths pass comment_text). */
#define FF_WEIGHT_DATA_MARK "\001weights\001"

/* The sha256 of the words the packer lays out for p from f (the blob's data)
 * and, when they are floats (f32), that each is finite: C has no literal for
 * NaN or an infinity (the message names weights_path). */
int ff_embed_sha256(const ff_program *p, const ff_tensor_file *f, int floats, const char *weights_path, char hex[65],
                    ff_error *err);
/* text (the rendered file, FF_WEIGHT_DATA_MARK once) to out with the words
 * as C initialisers in place of the mark, packed and written piece by
 * piece: memory stays at a piece's, whatever the model's size. */
int ff_embed_write(const ff_program *p, const ff_tensor_file *f, int floats, const char *text, const ff_text_out *out,
                   ff_error *err);

/* Kernels on their own (the per-kernel tests): list is a Lua array of
 * { kind, params } (kinds of gen/ops.lua), e.g.
 *   { { "linear", { IN = 5, OUT = 7, LDW = 7, BIAS = true } } }
 * -> *text (malloc'd), one C translation unit with each kernel as a model
 * would contain it and, for the i-th entry from 0, a function pointer
 * ff_kernel_<i> to cast back to the kernel's type. */
int ff_render_kernels(ff_lua *h, const char *list, char **text, ff_error *err);

#define FF_BLOB_HEADER 64

/* Packs bound tensors into the program's layout: a blob of FF_BLOB_HEADER
 * bytes ("FFWEIGHT", version 1, header size, layout hash, data bytes) and the
 * floats, 64-byte aligned.  Free with free(). */
int ff_pack_weights(const ff_program *p, const ff_tensor_file *f, void **blob, size_t *bytes, ff_error *err);
/* The same into blob, FF_BLOB_HEADER + weight_floats * 4 bytes, 64-byte
 * aligned and zeroed (a new file's mapping is): the weights file's pages
 * leave the resident set piece by piece as they are packed
 * (ff_tensor_file_release), so that the file and the blob are not both
 * resident at the end.  ready (or NULL): told, as packing goes (in the
 * layout's order), that the blob's first bytes are final. */
int ff_pack_weights_into(const ff_program *p, const ff_tensor_file *f, void *blob, void (*ready)(void *, size_t),
                         void *ctx, ff_error *err);
/* That blob's header. */
void ff_blob_header(const ff_program *p, unsigned char h[FF_BLOB_HEADER]);

/* The same words (the blob's data, without its header) handed to sink in
 * order, piece by piece as they are packed (about 1 MiB a piece; the gaps
 * between tensors as zeros), never all at once: what writes a model larger
 * than memory would hold twice.  sink returns 0 or FF_E* with err set, which
 * stops the walk. */
typedef int (*ff_pack_sink)(void *ctx, const float *words, size_t n, ff_error *err);
int ff_pack_stream(const ff_program *p, const ff_tensor_file *f, ff_pack_sink sink, void *ctx, ff_error *err);

/* ---- threads (templates/pool.c) ------------------------------------------ */

/* A pool of threads - 1 workers (the caller is the last) that runs the
 * generated code's parallel-for: ff_pool_run(pool, n, task, arg) runs
 * task(arg, i) for i < n and returns when all are done.  NULL: no memory
 * or no threads. */
typedef struct ff_pool ff_pool;
ff_pool *ff_pool_new(int threads);
void ff_pool_run(void *pool, int n, void (*task)(void *arg, int i), void *arg);
void ff_pool_free(ff_pool *p);
/* ff_train_engine_generated on pool's threads (threads of them; pool NULL: a
 * pool of the engine's own), which the caller frees after the engine: the
 * trainer runs its optimizer step on the same pool, so that two pools'
 * workers do not spin beside each other on the same cores. */
int ff_train_engine_generated_on(ff_model *m, enum ff_engine engine, const ff_train_shape *shape, int threads,
                                 ff_pool *pool, ff_train_engine *out, ff_error *err);

/* ---- backends ---------------------------------------------------------- */

/* Compiled code: a handle and how to look up a symbol in it and close it. */
typedef struct ff_jit {
  void *handle;
  void *(*symbol)(void *handle, const char *name);
  void (*close)(void *handle);
} ff_jit;

/* Compiles C text in memory with libtcc; the math and memory functions the
 * generated code uses are handed over with tcc_add_symbol. */
int ff_jit_tcc(const char *text, ff_jit **out, ff_error *err);
/* Compiles C text with $CC (default cc) -O3 and the flags of ff_host_isa()
 * into a shared object in a private, verified cache (host/cache.h), and
 * dlopens it.  kernels: NULL, or the text of the matrix kernel library, then
 * built once into a cached library of its own and linked, the text compiled
 * with FF_EXTERN_KERNELS. */
int ff_jit_cc(const char *text, const char *kernels, ff_jit **out, ff_error *err);
/* The compiled code of handle (symbol looks up a name, close frees it);
 * on failure, handle is closed. */
int ff_jit_new(void *handle, void *(*symbol)(void *handle, const char *name), void (*close)(void *handle),
               ff_jit **out, ff_error *err);
void *ff_jit_symbol(ff_jit *j, const char *name);
void ff_jit_free(ff_jit *j);

#endif
