/* main.c - the `fixformer` command line.  Each command (cli/NAME.c, listed
 * in cli/commands.h) parses its flags through cli/args.c, calls the public
 * API (fixformer.h) and returns a status; only main turns a status into an
 * exit code and prints the one-line error:
 *   0  done;  1  the command failed (bad input, a file it could not read or
 *   write);  2  the command line is not well formed (usage). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "commands.h"

#define DECLARE(name) extern const cli_command cli_##name;
FF_CLI_COMMANDS(DECLARE)
#define ENTRY(name) &cli_##name,
static const cli_command *const commands[] = {FF_CLI_COMMANDS(ENTRY)};
#define N_COMMANDS (int)(sizeof commands / sizeof *commands)

static void usage(FILE *to) {
  fprintf(to,
          "fixformer %s - a compiler for fixed transformer models\n"
          "usage: fixformer COMMAND [options]   (fixformer COMMAND --help for more)\n"
          "       fixformer --version\n"
          "commands:\n",
          FF_VERSION);
  for (int i = 0; i < N_COMMANDS; i++) fprintf(to, "  %-11s %s\n", commands[i]->name, commands[i]->summary);
  fprintf(to,
          "Every command takes --flag value or --flag=value, and -h/--help.  Exit status: 0 done,\n"
          "1 the command failed (the one line on stderr says why), 2 the command line is wrong.\n");
}

/* FIXFORMER_REPORT_RSS=1: the process's peak resident memory on stderr at
 * the end (VmHWM: this process's own, from its exec on; getrusage of a
 * parent counts the pages the parent had when it forked). */
static void report_rss(void) {
  char line[128];
  FILE *f = getenv("FIXFORMER_REPORT_RSS") ? fopen("/proc/self/status", "r") : NULL;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "VmHWM:", 6)) fprintf(stderr, "peak RSS: %lld kB\n", strtoll(line + 6, NULL, 10));
  if (f) fclose(f);
}

static int run_command(const cli_command *cmd, int argc, char **argv) {
  ff_error err = {0, ""};
  const char *operand;
  int rc = cli_parse(cmd, argc - 2, argv + 2, &operand, &err);
  if (!rc) rc = cmd->run(operand, cmd->flags, &err);
  errno = 0; /* printed output that did not reach its file (a full disk, ulimit -f) is a failure too */
  if (!rc && (fflush(stdout) || ferror(stdout)))
    rc = ff_fail(&err, FF_EIO, "cannot write the standard output: %s", errno ? strerror(errno) : "write error");
  report_rss();
  if (rc) {
    if (rc != CLI_ESILENT) fprintf(stderr, "fixformer %s: %s\n", cmd->name, err.msg[0] ? err.msg : "failed");
    return rc == CLI_EUSAGE ? 2 : 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  /* past a file-size limit (ulimit -f) a write fails with EFBIG, which every
   * writer reports, instead of SIGXFSZ killing us with temporaries left (the
   * library never raises it; the compilers we start and stdio might) */
  signal(SIGXFSZ, SIG_IGN);
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    usage(stdout);
    return 0;
  }
  if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")) {
    printf("fixformer %s\n", FF_VERSION);
    return 0;
  }
  for (int i = 0; i < N_COMMANDS; i++) {
    const cli_command *cmd = commands[i];
    if (strcmp(argv[1], cmd->name)) continue;
    for (int j = 2; j < argc && strcmp(argv[j], "--"); j++)
      if (!strcmp(argv[j], "--help") || !strcmp(argv[j], "-h")) {
        fputs(cmd->usage, stdout);
        return 0;
      }
    return run_command(cmd, argc, argv);
  }
  fprintf(stderr, "fixformer: unknown command '%s' (see fixformer --help)\n", argv[1]);
  return 2;
}
