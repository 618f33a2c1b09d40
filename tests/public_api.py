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
      one: each header wraps its declarations in extern "C".

  public_api.py --fixformer BIN [--case NAME]
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
INCLUDE = os.path.join(ROOT, "include")
sys.path.insert(0, os.path.join(HERE, "lib"))
import cases  # noqa: E402
import headers  # noqa: E402


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


CASES = [headers_compile_alone, headers_have_c_linkage]

if __name__ == "__main__":
    sys.exit(cases.main("public_api", __doc__, CASES, Context))
