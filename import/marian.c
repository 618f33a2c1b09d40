/* marian.c - what a Marian folder (Hugging Face's MarianMTModel: the OPUS-MT
 * translators) needs beyond import.c's name tables: the static sinusoidal
 * positions Marian computes instead of storing, in its layout, and the
 * tokenizer, which MarianTokenizer makes of two files: source.spm splits
 * the text into pieces, vocab.json numbers them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "ff_json.h"
#include "import_internal.h"

int ff_marian_positions(int rows, int d, float **out, ff_error *err) {
  float *p = malloc(sizeof *p * (size_t)rows * (size_t)d);
  int half = (d + 1) / 2; /* MarianSinusoidalPositionalEmbedding's sentinel */
  *out = p;
  if (!p) return ff_fail(err, FF_ENOMEM, "out of memory");
  for (int pos = 0; pos < rows; pos++)
    for (int j = 0; j < d; j++) { /* angle pos / 10000^(2 (j // 2) / d) of column j, in double as numpy */
      int src = j < half ? 2 * j : 2 * (j - half) + 1; /* sines of the even columns, then cosines of the odd */
      double angle = pos / pow(10000.0, 2.0 * (src / 2) / d);
      p[(size_t)pos * d + j] = (float)(j < half ? sin(angle) : cos(angle));
    }
  return 0;
}

/* vocab.json: piece -> id, every id of [0, vocab) once */
static int read_vocab(const char *path, int vocab, char ***names, int *unk, ff_error *err) {
  int rc = 0;
  cJSON *root = ff_json_read(path, err);
  *unk = -1;
  if (!root) return err->code;
  *names = calloc((size_t)vocab + 1, sizeof **names);
  if (!*names) rc = ff_fail(err, FF_ENOMEM, "out of memory");
  else if (!cJSON_IsObject(root)) rc = ff_fail(err, FF_EFORMAT, "%s: not a JSON object of piece -> id", path);
  for (const cJSON *e = rc ? NULL : root->child; e && !rc; e = e->next) {
    double id = cJSON_IsNumber(e) ? e->valuedouble : -1;
    if (!(id >= 0 && id < vocab) || id != floor(id))
      rc = ff_fail(err, FF_EFORMAT, "%s: '%.40s': %s is not an id below the vocab %d", path, e->string,
                   cJSON_IsNumber(e) ? "its value" : "a value that", vocab);
    else if ((*names)[(int)id])
      rc = ff_fail(err, FF_EFORMAT, "%s: id %d is both '%.40s' and '%.40s'", path, (int)id, (*names)[(int)id], e->string);
    else if (!*e->string || !((*names)[(int)id] = strdup(e->string)))
      rc = *e->string ? ff_fail(err, FF_ENOMEM, "out of memory") : ff_fail(err, FF_EFORMAT, "%s: an empty piece", path);
    if (!rc && !strcmp(e->string, "<unk>")) *unk = (int)id;
  }
  for (int i = 0; !rc && i < vocab; i++)
    if (!(*names)[i]) rc = ff_fail(err, FF_EFORMAT, "%s: no piece has id %d (the vocab is %d)", path, i, vocab);
  if (!rc && *unk < 0) rc = ff_fail(err, FF_EFORMAT, "%s: no <unk> piece", path);
  cJSON_Delete(root);
  return rc;
}

static void free_names(char **names, int n) {
  for (int i = 0; names && i < n; i++) free(names[i]);
  free(names);
}

int ff_marian_tokenizer(const char *spm_path, const char *vocab_path, const model_desc *d, uint8_t **bytes,
                        size_t *len, ff_error *err) {
  char **names = NULL;
  uint8_t *spm = NULL;
  size_t spm_len = 0;
  int unk, rc = read_vocab(vocab_path, d->vocab, &names, &unk, err);
  if (!rc) rc = ff_read_file(spm_path, &spm, &spm_len, err);
  if (!rc) {
    const int ids[4] = {unk, d->start_id, d->eos_id, d->pad_id};
    rc = ff_tokenizer_spm_renumber(spm_path, spm, spm_len, (const char *const *)names, d->vocab, ids, bytes, len, err);
  }
  free(spm);
  free_names(names, d->vocab);
  return rc;
}
