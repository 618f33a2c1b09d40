/* tokenize_tool.c - for tests/tokenizers.py: loads a tokenizer (any format)
 * and, for each line of a file, prints its ids and the hex of
 * decode(encode(line)), tab-separated; the first line is the tokenizer's
 * info.  Usage: tokenize_tool TOKENIZER LINES [EXPECTED_SIZE] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ff_io.h"

static int line_out(const ff_tokenizer *t, const char *line, int32_t *ids, int cap) {
  ff_error err;
  int n;
  if (ff_tokenizer_encode(t, line, ids, cap, &n, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
  for (int i = 0; i < n; i++) printf("%s%d", i ? " " : "", ids[i]);
  size_t need = ff_tokenizer_decode(t, ids, n, NULL, 0);
  char *text = malloc(need + 1);
  if (!text) return 1;
  if (ff_tokenizer_decode(t, ids, n, text, need + 1) != need) return free(text), 1;
  printf("\t");
  for (size_t i = 0; i < need; i++) printf("%02x", (unsigned char)text[i]);
  printf("\n");
  free(text);
  return 0;
}

int main(int argc, char **argv) {
  ff_error err;
  ff_tokenizer *t;
  uint8_t *buf;
  size_t len;
  if (argc < 3) return fprintf(stderr, "usage: tokenize_tool TOKENIZER LINES [EXPECTED_SIZE]\n"), 2;
  if (ff_tokenizer_load(argv[1], argc > 3 ? atoi(argv[3]) : 0, &t, &err) || ff_read_file(argv[2], &buf, &len, &err))
    return fprintf(stderr, "%s\n", err.msg), 1;
  const ff_tokenizer_info *in = ff_tokenizer_get_info(t);
  printf("kind=%d size=%d pad=%d bos=%d eos=%d unk=%d add_bos=%d round_trip=%d tail=%d\n", (int)in->kind, in->size,
         in->pad, in->bos, in->eos, in->unk, in->add_bos, in->round_trip, in->tail);
  int cap = (int)len * 4 + 16, rc = 0;
  int32_t *ids = malloc(sizeof *ids * (size_t)cap);
  char *text = malloc(len + 1), *line = text, *end = text + len;
  if (text) memcpy(text, buf, len), text[len] = 0;
  while (!rc && ids && line && line < end) {
    char *nl = memchr(line, '\n', (size_t)(end - line));
    if (nl) *nl = 0;
    rc = line_out(t, line, ids, cap);
    line = nl ? nl + 1 : end;
  }
  free(text);
  free(ids), free(buf);
  ff_tokenizer_free(t);
  return rc;
}
