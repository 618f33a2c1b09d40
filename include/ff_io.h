/* ff_io.h - safetensors and .npy files: checked readers, atomic writers.
 * Every reader validates sizes with overflow-safe arithmetic before it
 * touches the data; every writer writes NAME.tmp.XXXXXX and renames it, so a
 * failure never leaves a half-written file. */
#ifndef FF_IO_H
#define FF_IO_H

#include <stddef.h>
#include <stdint.h>

#include "ff_error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FF_MAX_RANK 8

enum ff_dtype { FF_F32, FF_F16, FF_BF16, FF_I32, FF_I64 };

/* ---- safetensors ------------------------------------------------------ */

/* One tensor of a safetensors file, as float32.  A file read with
 * ff_safetensors_read is mapped: an F32 tensor whose bytes are 4-byte aligned
 * in the file points into the read-only mapping (never write through it: see
 * ff_tensor_make_owned); other dtypes and unaligned tensors are converted
 * into memory of the file's own. */
typedef struct ff_tensor {
  char *name;
  enum ff_dtype file_dtype;   /* dtype in the file (F32, F16 or BF16) */
  int rank;
  int64_t shape[FF_MAX_RANK];
  size_t numel;
  float *data;                /* numel floats, owned by the ff_tensor_file */
} ff_tensor;

typedef struct ff_tensor_extra ff_tensor_extra; /* (formats/io.c) */

typedef struct ff_tensor_file {
  ff_tensor *tensors;
  int count;
  void *storage;              /* one block for names and converted data */
  void *map;                  /* the file mapped read-only (NULL: parsed from memory) */
  size_t map_bytes;
  ff_tensor_extra *extra;     /* blocks made later (fused tensors, owned copies), copies deferred */
} ff_tensor_file;

/* Largest header a reader accepts (bytes of JSON). */
#define FF_SAFETENSORS_MAX_HEADER (100u << 20)

/* Parses a whole safetensors image held in memory (buf, len): header length
 * bound, JSON, dtype (F32; F16/BF16 converted), shape, data offsets inside
 * the file, not overlapping, duplicates rejected.  0 or a negative status. */
int ff_safetensors_parse(const uint8_t *buf, size_t len, ff_tensor_file *out, ff_error *err);
/* Maps and parses path (see ff_tensor: aligned F32 tensors are not copied);
 * every size is checked against the file's before any data is touched.
 * Messages start with the path. */
int ff_safetensors_read(const char *path, ff_tensor_file *out, ff_error *err);
/* The tensor called name, or NULL. */
const ff_tensor *ff_tensor_file_find(const ff_tensor_file *f, const char *name);
/* Gives t (one of f's tensors) writable float32 memory of f's own, a copy of
 * what it points at, if it points into the read-only mapping; otherwise
 * nothing changes.  Deferred copies are made first (ff_tensor_file_fill).
 * Pointers taken from t->data before (a model's bound weights) still point
 * at the old bytes: call it before binding.  Whoever changes weights in
 * place (quantizing them) calls it first. */
int ff_tensor_make_owned(ff_tensor_file *f, ff_tensor *t, ff_error *err);
/* Whether t's data is in f's read-only mapping (1) or memory of f's own (0). */
int ff_tensor_is_mapped(const ff_tensor_file *f, const ff_tensor *t);
/* Takes the mapping's whole pages within the bytes at p (read by now) out
 * of the process's resident memory: the next read faults them in again
 * from the page cache.  What is not in the mapping is left alone.  A pass
 * over every weight (the finiteness check, packing) then keeps about one
 * piece of the file resident, not all of it. */
void ff_tensor_file_release(const ff_tensor_file *f, const void *p, size_t bytes);
/* Takes block into f's keeping: freed with f (map_bytes > 0: munmap'd). */
int ff_tensor_file_adopt(ff_tensor_file *f, void *block, size_t map_bytes, ff_error *err);
/* Records n floats to copy from src to dst later, when ff_tensor_file_fill
 * runs (a fused tensor whose parts stay unread until someone needs it). */
int ff_tensor_file_defer(ff_tensor_file *f, float *dst, const float *src, size_t n, ff_error *err);
/* Makes the deferred copies (once; not thread-safe: the caller serialises). */
void ff_tensor_file_fill(ff_tensor_file *f);
void ff_tensor_file_free(ff_tensor_file *f);

/* A float32 tensor to write. */
typedef struct ff_tensor_view {
  const char *name;
  int rank;
  int64_t shape[FF_MAX_RANK];
  const float *data;
} ff_tensor_view;

/* Writes F32 tensors (in the given order) atomically to path. */
int ff_safetensors_write(const char *path, const ff_tensor_view *tensors, int count, ff_error *err);
/* A __metadata__ entry: text to text, as the format allows. */
typedef struct ff_metadata {
  const char *key, *value;
} ff_metadata;
/* ff_safetensors_write with n_meta __metadata__ entries first (meta may be
 * NULL when n_meta is 0). */
int ff_safetensors_write_meta(const char *path, const ff_tensor_view *tensors, int count, const ff_metadata *meta,
                              int n_meta, ff_error *err);
/* A safetensors file to write without its image in memory: its header
 * (the 8-byte length and the JSON, padded to 8 bytes) and the tensors whose
 * floats follow it, written from where they are by ff_safetensors_out_write
 * (an ff_file_stream's write, ctx the ff_safetensors_out: with others all
 * or none).  path names it in messages; bytes = the file's size. */
typedef struct ff_safetensors_out {
  const char *path;
  uint8_t *head;
  size_t head_len, bytes;
  const ff_tensor_view *tensors;
  int count;
} ff_safetensors_out;
int ff_safetensors_out_init(ff_safetensors_out *o, const char *path, const ff_tensor_view *tensors, int count,
                            const ff_metadata *meta, int n_meta, ff_error *err);
int ff_safetensors_out_write(void *o, int fd, ff_error *err);
void ff_safetensors_out_free(ff_safetensors_out *o);
/* The same file image in memory (*out malloc'd, *out_len bytes), to be
 * written with others all or none; path only names it in messages. */
int ff_safetensors_serialize(const char *path, const ff_tensor_view *tensors, int count, uint8_t **out, size_t *out_len,
                             ff_error *err);
int ff_safetensors_serialize_meta(const char *path, const ff_tensor_view *tensors, int count, const ff_metadata *meta,
                                  int n_meta, uint8_t **out, size_t *out_len, ff_error *err);

/* ---- .npy --------------------------------------------------------------- */

/* A C-order array of int32, int64 or float32. */
typedef struct ff_array {
  enum ff_dtype dtype;        /* FF_I32, FF_I64 or FF_F32 */
  int rank;
  int64_t shape[FF_MAX_RANK];
  size_t numel;
  void *data;                 /* owned, free with ff_array_free */
} ff_array;

/* Parses a .npy image in memory (versions 1.0-3.0, little-endian '<i4',
 * '<i8', '<f4', C order). */
int ff_npy_parse(const uint8_t *buf, size_t len, ff_array *out, ff_error *err);
int ff_npy_read(const char *path, ff_array *out, ff_error *err);
/* Writes a version 1.0 .npy atomically. */
int ff_npy_write(const char *path, const ff_array *a, ff_error *err);
void ff_array_free(ff_array *a);

/* ---- vocabulary ------------------------------------------------------------- */

/* A token vocabulary from JSON:
 *   {"tokens": ["<pad>", "<bos>", "<eos>", "<unk>", " ", "a", ...],
 *    "pad": 0, "bos": 1, "eos": 2, "unk": 3, "lowercase": true}
 * Token i is the string tokens[i]; pad, bos, eos and unk (each optional) name
 * the special ids, which text never contains.  Text is tokenized by longest
 * match (one character a token for a character vocabulary), after ASCII
 * lowercasing when "lowercase" is true; a piece no token matches becomes unk,
 * or is an error when there is no unk. */
typedef struct ff_vocab {
  int size;
  char **tokens;          /* size strings */
  int pad, bos, eos, unk; /* -1 when absent */
  int lowercase;
  /* for encode, built by ff_vocab_parse: each token's length, an index of
   * the tokens text may hold (string -> id + 1), the longest of them */
  uint32_t *lens;
  int32_t *index;
  size_t icap, max_len;
  unsigned char *special; /* 1 for pad, bos, eos, unk: left out of decode */
} ff_vocab;

/* Reads and checks a vocabulary; expected_size > 0 must equal its size.
 * ff_vocab_parse does the same on len bytes of JSON read from path (for its
 * messages only). */
int ff_vocab_load(const char *path, int expected_size, ff_vocab *v, ff_error *err);
int ff_vocab_parse(const char *path, const char *text, size_t len, int expected_size, ff_vocab *v, ff_error *err);
void ff_vocab_free(ff_vocab *v);
/* text -> ids (at most cap), *n of them. */
int ff_vocab_encode(const ff_vocab *v, const char *text, int32_t *ids, int cap, int *n, ff_error *err);
/* ids -> text (NUL-terminated, truncated to cap - 1 bytes); special ids and
 * ids outside the vocabulary are left out.  Returns the length it needed. */
size_t ff_vocab_decode(const ff_vocab *v, const int32_t *ids, int n, char *text, size_t cap);

/* ---- tokenizers ------------------------------------------------------------ */

/* One interface over every tokenizer file a description's `vocabulary` may
 * name, the format detected from the content:
 *   FF_TOK_VOCAB      fixformer's JSON vocabulary above (ff_vocab);
 *   FF_TOK_LLAMA2C    llama2.c's tokenizer.bin (int max_token_length, then per
 *                     token float score, int len, len bytes), encoded as
 *                     llama2.c's run.c does (dummy space, <0xXX> = byte + 3,
 *                     greedy merge of the best-scoring pair);
 *   FF_TOK_BPE_BYTES  Hugging Face tokenizer.json, BPE with the ByteLevel
 *                     pre-tokenizer (GPT-2);
 *   FF_TOK_BPE_SP     tokenizer.json, SentencePiece-style BPE (LLaMA: "\u2581"
 *                     for spaces, <0xXX> byte fallback);
 *   FF_TOK_WORDPIECE  tokenizer.json, WordPiece (BERT);
 *   FF_TOK_UNIGRAM    SentencePiece's .model / .spm (T5, Marian), or
 *                     tokenizer.json's Unigram: the most probable pieces. */
enum ff_tokenizer_kind { FF_TOK_VOCAB, FF_TOK_LLAMA2C, FF_TOK_BPE_BYTES, FF_TOK_BPE_SP, FF_TOK_WORDPIECE, FF_TOK_UNIGRAM };

typedef struct ff_tokenizer ff_tokenizer;

#define FF_TOK_TEMPLATE_MAX 8 /* special ids a template puts on either side of the text, at most */

typedef struct ff_tokenizer_info {
  enum ff_tokenizer_kind kind;
  int size;               /* ids are in [0, size) */
  int pad, bos, eos, unk; /* -1 when absent */
  int add_bos;            /* 1: a prompt starts with bos (llama2.c, the tokenizer.json's template) */
  int round_trip;         /* 1: decode(encode(text)) == text for any UTF-8 text */
  int tail;               /* the special id the template ends one sequence with (BERT's [SEP]), -1: none */
  int n_prefix, prefix[FF_TOK_TEMPLATE_MAX]; /* the template's special ids before the text ([CLS]; bos first) */
  int n_suffix, suffix[FF_TOK_TEMPLATE_MAX]; /* ... after it (BERT's [SEP], mBART's </s> en_XX; tail last) */
} ff_tokenizer_info;

/* Reads a tokenizer file of any kind above; expected_size > 0 is the
 * model's vocab: every id must be below it (llama2.c's file and the JSON
 * vocabulary must hold exactly that many tokens).  ff_tokenizer_parse does
 * the same on len bytes read from path (named in messages only). */
int ff_tokenizer_load(const char *path, int expected_size, ff_tokenizer **out, ff_error *err);
/* A SentencePiece Unigram model (path, buf, len) numbered by a vocabulary
 * (Marian's vocab.json: piece i is names[i], n of them): each piece the
 * model has keeps its score and type, any other is UNUSED (decoded, never
 * matched); ids = {unk, bos, eos, pad} (bos: the decoder's start id) and the
 * model's normalizer as they are.  *out (malloc'd) is the new file's bytes. */
int ff_tokenizer_spm_renumber(const char *path, const uint8_t *buf, size_t len, const char *const *names, int n,
                              const int ids[4], uint8_t **out, size_t *out_len, ff_error *err);
int ff_tokenizer_parse(const char *path, const uint8_t *buf, size_t len, int expected_size, ff_tokenizer **out,
                       ff_error *err);
void ff_tokenizer_free(ff_tokenizer *t);
const ff_tokenizer_info *ff_tokenizer_get_info(const ff_tokenizer *t);
/* the JSON vocabulary of an FF_TOK_VOCAB tokenizer, else NULL */
const ff_vocab *ff_tokenizer_vocab(const ff_tokenizer *t);
/* t's tables as C99 text (static const arrays, then `static const
 * ff_tok_tables tok_tables`), which the emitted --with-main driver encodes
 * with (tokenizers/tok_encode.c); *text malloc'd */
int ff_tokenizer_c_tables(const ff_tokenizer *t, char **text, ff_error *err);
/* text (NUL-terminated UTF-8) -> ids (at most cap), *n of them; no special
 * ids are added (bos is the caller's, see add_bos). */
int ff_tokenizer_encode(const ff_tokenizer *t, const char *text, int32_t *ids, int cap, int *n, ff_error *err);
/* ff_tokenizer_encode with the template's special ids around the text:
 * prefix (its first id replaced by bos when bos >= 0) when prefix is 1,
 * suffix when suffix is 1; *n counts them all.  A text of whitespace alone
 * gives the template's ids; nothing at all is FF_ELENGTH. */
int ff_tokenizer_encode_template(const ff_tokenizer *t, const char *text, int prefix, int bos, int suffix, int32_t *ids,
                                 int cap, int *n, ff_error *err);
/* ids -> text (NUL-terminated, truncated to whole pieces within cap - 1
 * bytes); special ids and ids outside the vocabulary are left out, and so
 * is a byte token of 0 (<0x00>, byte-level BPE's U+0100): the text holds no
 * NUL before its end.  Returns the length it needed. */
size_t ff_tokenizer_decode(const ff_tokenizer *t, const int32_t *ids, int n, char *text, size_t cap);

/* ---- files ---------------------------------------------------------------- */

/* Reads a whole file into a malloc'd buffer. */
int ff_read_file(const char *path, uint8_t **buf, size_t *len, ff_error *err);
/* Writes len bytes to fd at its offset: 0 or an errno.  Within the
 * process's file-size limit (RLIMIT_FSIZE) or EFBIG before a byte is
 * written, so no writer here raises SIGXFSZ, whatever its disposition. */
int ff_write_all(int fd, const void *data, size_t len);
/* Writes len bytes to path through a temporary file and rename(2); an
 * existing symlink, FIFO or device (/dev/stdout, /dev/null) is written in
 * place instead, never replaced; a directory is an error. */
int ff_write_file_atomic(const char *path, const void *data, size_t len, ff_error *err);
/* The same, the bytes written by s->write (below) into the file. */
struct ff_file_stream;
int ff_write_file_atomic_stream(const char *path, const struct ff_file_stream *s, ff_error *err);
/* Writes n regular files all or none: every temporary is written first, then
 * each renamed into place; a failure puts back what was there before. */
typedef struct ff_file_out {
  const char *path;
  const void *data;
  size_t len;
} ff_file_out;
int ff_write_files_atomic(const ff_file_out *files, int n, ff_error *err);
/* The same, file i's bytes written by streams[i].write (when set) in place
 * of its data, into the temporary that is renamed: a file too large to
 * hold in memory, all or none with the others.  write returns 0 or FF_E*
 * with err set, whose message is kept. */
typedef struct ff_file_stream {
  int (*write)(void *ctx, int fd, ff_error *err);
  void *ctx;
} ff_file_stream;
int ff_write_files_atomic_streamed(const ff_file_out *files, const ff_file_stream *streams, int n, ff_error *err);

/* IEEE half and bfloat16 bits to float32 (exact; safetensors' and GGUF's F16 / BF16). */
float ff_half_to_float(uint16_t h);
float ff_bf16_to_float(uint16_t h);

/* Checked size arithmetic: 0 on success, -1 on overflow. */
int ff_size_mul(size_t a, size_t b, size_t *out);
int ff_size_add(size_t a, size_t b, size_t *out);

/* Whether a and b name the same existing regular file (device and inode:
 * other spellings, symbolic and hard links included); NULL: no. */
int ff_same_inode(const char *a, const char *b);
/* FF_EIO naming out and the input when out is the same file as one of the n
 * inputs (NULL ones skipped): no command writes over a file it reads. */
int ff_refuse_inputs(const char *out, const char *const *inputs, int n, ff_error *err);

/* path as the files fixformer generates show it (their banners, the command
 * line they record): a relative path as given; an absolute one relative to
 * the current folder when inside it, else its file name alone, so that no
 * machine's folders are stamped into the files.  Returns buf (n bytes). */
const char *ff_shown_path(const char *path, char *buf, size_t n);

/* v as Lua text that reads back as v (a description's number): the shortest
 * %.Ng, of the float32 value when float32 (a config's eps: 1e-05, not
 * 9.99999975e-06); infinities and NaN as math.huge, -math.huge, 0/0, never a
 * name that a description would read as an undefined global.  Returns buf. */
const char *ff_lua_number(double v, int float32, char buf[32]);

#ifdef __cplusplus
}
#endif

#endif
