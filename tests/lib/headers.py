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


# a function each header declares: referenced from C++, its symbol is the C name only under extern "C"
DECLARES = {"fixformer.h": "ff_model_open", "fixformer_train.h": "ff_trainer_new", "ff_error.h": "ff_fail",
            "ff_io.h": "ff_npy_read"}


def c_linkage(include_dir, tmp):
    """[] or the headers whose functions a C++ program would call by a mangled name (no extern "C")."""
    failures = []
    for header, fn in sorted(DECLARES.items()):
        src, obj = os.path.join(tmp, "link_%s.cc" % fn), os.path.join(tmp, "link_%s.o" % fn)
        with open(src, "w") as f:
            f.write('#include "%s"\ndecltype(&%s) ff_header_uses = &%s;\n' % (header, fn, fn))
        p = subprocess.run(["g++", "-std=c++11"] + WARN + ["-I", include_dir, "-c", src, "-o", obj],
                           capture_output=True, text=True)
        undefined = subprocess.run(["nm", "-u", obj], capture_output=True, text=True).stdout.split() \
            if p.returncode == 0 else []
        if p.returncode or fn not in undefined:
            failures.append("%s: C++ calls %s as %s" % (header, fn, first_error(p.stderr) if p.returncode else
                                                        " ".join(u for u in undefined if fn in u) or "?"))
    return failures
