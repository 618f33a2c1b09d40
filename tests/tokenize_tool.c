/* tokenize_tool.c - for tests/tokenizers.py: loads a tokenizer (any format)
 * and, for each line of a file, prints its ids and the hex of
 * decode(encode(line)), tab-separated; the first line is the tokenizer's
 * info.  Usage: tokenize_tool [--hex] TOKENIZER LINES [EXPECTED_SIZE]; with
 * --hex each line holds its text's bytes in hex (a text with newlines).
 *
 * For tests/hardening_tokenizers.py, --time RATIO TOKENIZER LINES
 * [EXPECTED_SIZE] prints for each line its ids' count and the CPU seconds of
 * one encode + decode (the least of repeats); a line whose best run takes
 * over RATIO times the first line's fails, named on stderr, exit 3, and one
 * run past 8 x RATIO is stopped there (a CPU-time timer: an encoder cubic in
 * its input would run for hours). */
#define _XOPEN_SOURCE 700 /* setitimer */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "ff_io.h"

static double cpu_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts); /* the process clock turns tick-grained while a CPU timer runs */
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* SIGPROF after seconds of CPU time (0: never) */
static void cpu_alarm(double seconds) {
  long long us = seconds > 0 ? (long long)(seconds * 1e6) + 1 : 0;
  struct itimerval it = {{0, 0}, {(time_t)(us / 1000000), (suseconds_t)(us % 1000000)}};
  setitimer(ITIMER_PROF, &it, NULL);
}

static void over_limit(int sig) {
  static const char msg[] = "tokenize_tool: a line took over RATIO times the first line's time\n";
  (void)sig;
  if (write(2, msg, sizeof msg - 1)) {}
  _exit(3);
}

/* the least CPU time of one encode + decode of line, over runs adding up to
 * 0.2 s (at least 3); each run stopped at limit seconds (0: none) */
static int time_line(const ff_tokenizer *t, const char *line, int32_t *ids, int cap, double limit, int *n,
                     double *best) {
  ff_error err;
  size_t need = 0;
  char *text = NULL;
  double spent = 0;
  *best = 1e300;
  for (int run = 0; run < 100000 && (run < 3 || spent < 0.2); run++) {
    double t0 = cpu_seconds();
    cpu_alarm(limit);
    int rc = ff_tokenizer_encode(t, line, ids, cap, n, &err);
    if (!rc && !text) text = malloc((need = ff_tokenizer_decode(t, ids, *n, NULL, 0)) + 1);
    if (!rc && text) ff_tokenizer_decode(t, ids, *n, text, need + 1);
    cpu_alarm(0);
    double dt = cpu_seconds() - t0;
    if (rc || !text) return fprintf(stderr, "%s\n", rc ? err.msg : "out of memory"), free(text), 1;
    spent += dt, *best = dt < *best ? dt : *best;
  }
  free(text);
  return 0;
}

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
  double ratio = 0, first = 0;
  int hex = argc > 1 && !strcmp(argv[1], "--hex");
  if (hex) argv++, argc--;
  int timing = argc > 2 && !strcmp(argv[1], "--time");
  if (timing) ratio = atof(argv[2]), argv += 2, argc -= 2;
  if (argc < 3 || (timing && !(ratio > 0)))
    return fprintf(stderr, "usage: tokenize_tool [--hex] [--time RATIO] TOKENIZER LINES [EXPECTED_SIZE]\n"), 2;
  if (ff_tokenizer_load(argv[1], argc > 3 ? atoi(argv[3]) : 0, &t, &err) || ff_read_file(argv[2], &buf, &len, &err))
    return fprintf(stderr, "%s\n", err.msg), 1;
  const ff_tokenizer_info *in = ff_tokenizer_get_info(t);
  printf("kind=%d size=%d pad=%d bos=%d eos=%d unk=%d add_bos=%d round_trip=%d tail=%d\n", (int)in->kind, in->size,
         in->pad, in->bos, in->eos, in->unk, in->add_bos, in->round_trip, in->tail);
  int cap = (int)len * 12 + 16, rc = 0, n, k = 0; /* room for a normalizer's growth */
  int32_t *ids = malloc(sizeof *ids * (size_t)cap);
  char *text = malloc(len + 1), *line = text, *end = text + len;
  if (text) memcpy(text, buf, len), text[len] = 0;
  signal(SIGPROF, over_limit);
  while (!rc && ids && line && line < end) {
    char *nl = memchr(line, '\n', (size_t)(end - line));
    if (nl) *nl = 0;
    for (size_t i = 0, h; hex && sscanf(line + 2 * i, "%2zx", &h) == 1; i++) line[i] = (char)h, line[i + 1] = 0;
    if (!timing) {
      rc = line_out(t, line, ids, cap);
    } else { /* the first line untimed by a limit, the others held to ratio times it */
      double s;
      /* a run is stopped at 8 x the bound (a cold first run of a long line
       * faults in its buffers); the best of the runs is held to the bound */
      rc = time_line(t, line, ids, cap, k++ ? 8 * ratio * first : 0, &n, &s);
      if (!rc) printf("%zu %d %.9f\n", strlen(line), n, s), fflush(stdout);
      if (k == 1) first = s;
      else if (!rc && s > ratio * first) over_limit(0);
    }
    line = nl ? nl + 1 : end;
  }
  free(text);
  free(ids), free(buf);
  ff_tokenizer_free(t);
  return rc;
}
