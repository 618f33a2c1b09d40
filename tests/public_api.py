#!/usr/bin/python3
"""The public API (include/) is the whole of what a program, the command line
included, needs.  One named case each:

  headers_compile_alone
      every public header alone in a translation unit, from the source tree
      with -Iinclude only, as C99 and as C++11 (gcc, g++, clang, clang++ where
      installed; -Wall -Wextra -Werror -pedantic): fixformer.h once needed
      fixformer_version.h, which only the build generated;
  headers_have_c_linkage
      a C++ program referring to a function of fixformer.h, fixformer_train.h,
      ff_error.h and ff_io.h needs its C symbol (`nm -u`), not a mangled
      one: each header wraps its declarations in extern "C";
  cli_on_public_api
      every cli/*.c compiles with -Iinclude -Icli and nothing else, and the
      build compiles the fixformer target so (its include directories are
      cli/ and include/: fixformer_lib's public interface): cli/cli.h once
      included runtime/ff_runtime.h for init's weights, FLOP counts,
      weight lists, input checks and the schema's rows;
  import_progress_on_terminal
      `fixformer import` of a llama2.c checkpoint with stderr a terminal
      shows its two slow steps ("import: read the checkpoint: 0.0 s",
      "import: write the files: ...") as the other commands show theirs; -q,
      or stderr a pipe, shows nothing; stdout is the same summary either way
      (ff_import reports it through a callback; import had no progress).

  public_api.py --fixformer BIN [--case NAME]
"""
import os
import struct
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
INCLUDE = os.path.join(ROOT, "include")
sys.path.insert(0, os.path.join(HERE, "lib"))
import cases  # noqa: E402
import headers  # noqa: E402
from tools import on_terminal  # noqa: E402


class Context:
    def __init__(self, ff, tmp):
        self.ff, self.tmp = ff, tmp


def headers_compile_alone(c):
    failures = headers.compile_alone(INCLUDE, c.tmp)
    if failures:
        raise AssertionError("; ".join(failures))
    return "%d headers x %s" % (len(headers.HEADERS), ", ".join(label for label, _, _ in headers.compilers()))


def headers_have_c_linkage(c):
    failures = headers.c_linkage(INCLUDE, c.tmp)
    if failures:
        raise AssertionError("; ".join(failures))
    return ", ".join("%s: %s" % kv for kv in sorted(headers.DECLARES.items()))


def cli_on_public_api(c):
    cli = os.path.join(ROOT, "cli")
    sources = sorted(f for f in os.listdir(cli) if f.endswith(".c"))
    failures = []
    for f in sources:
        p = subprocess.run(["gcc", "-std=c99", "-D_POSIX_C_SOURCE=200809L"] + headers.WARN[:-1] +
                           ["-I", INCLUDE, "-I", cli, "-fsyntax-only", os.path.join(cli, f)],
                           capture_output=True, text=True)
        if p.returncode:
            failures.append("%s: %s" % (f, headers.first_error(p.stderr)))
    flags = os.path.join(os.path.dirname(c.ff), "CMakeFiles", "fixformer.dir", "flags.make")  # Makefile builds
    includes = [line.split("=", 1)[1].split() for line in open(flags) if line.startswith("C_INCLUDES")][0] \
        if os.path.exists(flags) else ["-I" + cli, "-I" + INCLUDE]
    if sorted(includes) != sorted(["-I" + cli, "-I" + INCLUDE]):
        failures.append("the build compiles the CLI with %s" % " ".join(includes))
    if failures:
        raise AssertionError("; ".join(failures))
    return "%d files, the build's includes: %s" % (len(sources), " ".join(os.path.relpath(i[2:], ROOT) for i in includes))


def write_llama2c(path, dim=16, hidden=24, layers=2, heads=2, vocab=32, seq=16):
    """A legacy llama2.c checkpoint of random weights: 7 int32, then the tensors in run.c's order."""
    rng, hs = np.random.default_rng(0), dim // heads
    sizes = [vocab * dim, layers * dim] + [layers * dim * dim] * 4 + [layers * dim, layers * hidden * dim,
                                                                      layers * dim * hidden, layers * hidden * dim,
                                                                      dim, seq * hs // 2, seq * hs // 2]
    with open(path, "wb") as f:
        f.write(struct.pack("<7i", dim, hidden, layers, heads, heads, vocab, seq))  # vocab > 0: shared head
        f.write(rng.normal(0, 0.1, sum(sizes)).astype("<f4").tobytes())


def import_progress_on_terminal(c):
    src = os.path.join(c.tmp, "l2c.bin")
    write_llama2c(src)
    env = dict(os.environ, XDG_CACHE_HOME=os.path.join(c.tmp, "cache"))
    rc, shown, steps = on_terminal([c.ff, "import", src, "-o", os.path.join(c.tmp, "tty")], env)
    want = ["import: read the checkpoint: ", "import: write the files: "]
    if rc or len(steps) != len(want) or not all(s.startswith(w) and s.endswith(" s\x1b[K") for s, w in zip(steps, want)):
        raise AssertionError("on a terminal: exit %d, stderr %r" % (rc, steps))
    rc, _, quiet = on_terminal([c.ff, "import", src, "-o", os.path.join(c.tmp, "quiet"), "-q"], env)
    if rc or quiet:
        raise AssertionError("-q on a terminal: exit %d, stderr %r" % (rc, quiet))
    p = subprocess.run([c.ff, "import", src, "-o", os.path.join(c.tmp, "pipe")], capture_output=True, text=True,
                       env=env)
    if p.returncode or p.stderr:
        raise AssertionError("piped: exit %d, stderr %r" % (p.returncode, p.stderr))
    if p.stdout.replace("pipe", "tty") != shown or not shown.endswith("tty/l2c.lua\n"):
        raise AssertionError("the summaries differ: %r vs %r" % (p.stdout, shown))
    return "%s; -q and a pipe: none; %d summary lines" % (", ".join(s.split(":", 2)[1].strip() for s in steps),
                                                          len(shown.splitlines()))


CASES = [headers_compile_alone, headers_have_c_linkage, cli_on_public_api, import_progress_on_terminal]

if __name__ == "__main__":
    sys.exit(cases.main("public_api", __doc__, CASES, Context))
