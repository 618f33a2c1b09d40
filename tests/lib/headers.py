"""The public headers, each compiled alone as C99 and as C++ with warnings as
errors (tests/public_api.py from the source tree, tests/consumers.py from an
install prefix): a header that needs another one generated, or a C++ program
including it, fails here."""
import os
import shutil
import subprocess

HEADERS = ["fixformer.h", "fixformer_train.h", "fixformer_version.h", "ff_config.h", "ff_schema.h", "ff_error.h",
           "ff_io.h"]
WARN = ["-Wall", "-Wextra", "-Werror", "-pedantic"]
# gcc and g++ always (the build's compiler); clang and clang++ where installed
COMPILERS = [("c99", "gcc", ["-x", "c", "-std=c99"]), ("c++11", "g++", ["-x", "c++", "-std=c++11"]),
             ("clang c99", "clang", ["-x", "c", "-std=c99"]), ("clang++", "clang++", ["-x", "c++", "-std=c++11"])]


def compilers():
    return [(label, cc, flags) for label, cc, flags in COMPILERS if cc in ("gcc", "g++") or shutil.which(cc)]


def compile_alone(include_dir, tmp):
    """Every header alone in a translation unit, by every compiler: [] or the failures, one line each."""
    failures = []
    for header in HEADERS:
        src = os.path.join(tmp, "alone_" + header.replace(".", "_") + ".c")
        with open(src, "w") as f:
            f.write('#include "%s"\ntypedef int ff_header_alone; /* not an empty unit */\n' % header)
        for label, cc, flags in compilers():
            p = subprocess.run([cc] + flags + WARN + ["-I", include_dir, "-fsyntax-only", src],
                               capture_output=True, text=True)
            if p.returncode:
                failures.append("%s as %s: %s" % (header, label, first_error(p.stderr)))
    return failures


def first_error(stderr):
    lines = stderr.strip().splitlines() or ["?"]
    return next((line for line in lines if "error" in line), lines[0])
