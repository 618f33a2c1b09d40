#!/usr/bin/python3
"""fixformer from another build, all outside the source tree (a temp dir):
(a) `cmake --install` to a prefix, then examples/jit_model.c built against the
    installed package with find_package(fixformer CONFIG) and with pkg-config,
    lua_clash.c (its own static Lua 5.4 beside libfixformer's hidden one),
    cpp_model.cpp (C++ on the C API), and each installed header compiled alone
    as C99 and C++ with C linkage;
(b) tests/consumers/model: fixformer_add_model on models/tiny.lua with `init`
    weights (packed blob + WITH_MAIN, embedded + a program of ours), run and
    compared with `fixformer run --engine runtime`; a no-op build emits
    nothing, a touched description emits again and recompiles nothing, an
    edited one recompiles;
    tiny_int8 (DTYPE int8, EMIT_ARGS --no-line) against `fixformer run --dtype
    int8`; arguments fixformer_add_model refuses at configure time, each named;
(c) the same project through FetchContent of a source archive of the tree (the
    files git tracks or would), which adds it with add_subdirectory, built and
    run; add_subdirectory of the source tree itself configured (bad arguments);
    an ISA not in kernels/isas.h fails at configure time, naming the table's;
(cross) the same project for aarch64 Linux through the installed package's
    toolchain file: find_package gives the generator only (the JIT library,
    COMPONENTS library, is refused, saying why), fixformer_add_model emits for
    aarch64-linux-gnu with neon by default, and the programs, run under
    qemu-aarch64, print the host's numbers.

  consumers.py --fixformer BIN --build-dir DIR [--only a|b|c|cross]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
from isas import isa_table  # noqa: E402
from tools import need  # noqa: E402
import headers  # noqa: E402
CONSUMERS = os.path.join(ROOT, "tests", "consumers")
IDS = [5, 17, 42, 8, 99, 3]


def run(cmd, env=None, cwd=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd)
    if p.returncode != 0:
        raise RuntimeError("%s: exit %d:\n%s%s" % (" ".join(cmd), p.returncode, p.stdout[-3000:], p.stderr[-3000:]))
    return p.stdout


def cmake_build(src, build, defs, env=None):
    """Configures and builds: (configure's output, the build's)."""
    conf = run(["cmake", "-S", src, "-B", build, "-DCMAKE_BUILD_TYPE=Release"] + ["-D" + d for d in defs], env=env)
    return conf, run(["cmake", "--build", build, "-j2"], env=env)


class Checks:
    def __init__(self):
        self.failed = 0

    def check(self, name, ok, detail=""):
        self.failed += not ok
        print("%-34s %s %s" % (name, "ok" if ok else "FAIL", detail))


def reference(ff, tmp, weights, dtype="f32"):
    """`fixformer run` (runtime) on IDS: the logits [1, T, vocab]."""
    ref = os.path.join(tmp, "ref_%s.npy" % dtype)
    if not os.path.exists(ref):
        run([ff, "run", os.path.join(ROOT, "models", "tiny.lua"), "--weights", weights, "--dtype", dtype,
             "--tokens", " ".join(map(str, IDS)), "--output", ref, "--engine", "runtime"])
    return np.load(ref)


def close(a, b):
    if a.shape != b.shape:
        return False, "shape %s vs %s" % (a.shape, b.shape)
    err = float(np.abs(a - b).max()) / max(float(np.abs(b).max()), 1e-30)
    return err <= 1e-5, "err=%.2e" % err


def argmax_line(ref):
    return "argmax: " + " ".join(str(int(i)) for i in ref[0].argmax(-1))


def installed(c, args, tmp, weights):
    prefix = os.path.join(tmp, "prefix")
    run(["cmake", "--install", args.build_dir, "--prefix", prefix])
    inc = os.path.join(prefix, "include", "fixformer")
    c.check("installed headers", sorted(os.listdir(inc)) ==
            ["ff_config.h", "ff_error.h", "ff_io.h", "ff_schema.h", "fixformer.h", "fixformer_train.h", "fixformer_version.h"],
            str(sorted(os.listdir(inc))))
    # the library exports ff_* only: Lua and libtcc are hidden
    lib = os.path.join(prefix, "lib", "libfixformer.a")
    syms = [l.split()[-1] for l in run(["nm", "-g", "--defined-only", lib]).splitlines() if len(l.split()) == 3]
    stray = [s for s in syms if not s.startswith("ff_")]
    c.check("libfixformer.a exports ff_* only", syms and not stray, "%d symbols, others: %s" % (len(syms), stray[:5]))
    ref = reference(args.fixformer, tmp, weights)
    desc = os.path.join(ROOT, "models", "tiny.lua")
    # find_package(fixformer CONFIG)
    b = os.path.join(tmp, "installed")
    cmake_build(os.path.join(CONSUMERS, "installed"), b,
                ["CMAKE_PREFIX_PATH=" + prefix, "JIT_MODEL_SOURCE=" + os.path.join(ROOT, "examples", "jit_model.c")])
    out = os.path.join(tmp, "jit_cmake.npy")
    printed = run([os.path.join(b, "jit_model"), desc, weights, out] + list(map(str, IDS)))
    ok, why = close(np.load(out), ref)
    c.check("(a) find_package: jit_model", ok and printed.strip() == argmax_line(ref), why)
    out = os.path.join(tmp, "cpp_model.npy")
    printed = run([os.path.join(b, "cpp_model"), desc, weights, out] + list(map(str, IDS)))
    ok, why = close(np.load(out), ref)
    c.check("(a) C++ on the C API: cpp_model", ok and printed.strip() == argmax_line(ref), why)
    alone = headers.compile_alone(inc, tmp) + headers.c_linkage(inc, tmp)
    c.check("(a) installed headers alone, C/C++", not alone, "; ".join(alone))
    printed = run([os.path.join(b, "lua_clash"), desc])
    c.check("(a) own Lua + libfixformer", "app lua: Lua 5.4 42" in printed and "model tiny" in printed
            and "app lua again: okok" in printed, printed.strip().replace("\n", " | "))
    # pkg-config, with the header alone in strict C99
    env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(prefix, "lib", "pkgconfig"))
    flags = run(["pkg-config", "--cflags", "--libs", "fixformer"], env=env).split()
    exe = os.path.join(tmp, "jit_pc")
    run(["cc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-o", exe,
         os.path.join(ROOT, "examples", "jit_model.c")] + flags)
    out = os.path.join(tmp, "jit_pc.npy")
    printed = run([exe, desc, weights, out] + list(map(str, IDS)))
    ok, why = close(np.load(out), ref)
    c.check("(a) pkg-config: jit_model", ok and printed.strip() == argmax_line(ref), why)
    return prefix


def model_project(c, args, tmp, weights, label, defs, touch, runner=()):
    """tests/consumers/model built with defs; its programs run (under runner: qemu-user) against the
    runtime's numbers.  Returns its configure's output."""
    ref = reference(args.fixformer, tmp, weights)
    b = os.path.join(tmp, "model_" + label)
    # a copy of the description, so touching it changes nothing in the tree
    desc = os.path.join(tmp, "desc_" + label, "tiny.lua")
    os.makedirs(os.path.dirname(desc), exist_ok=True)
    shutil.copy(os.path.join(ROOT, "models", "tiny.lua"), desc)
    conf, _ = cmake_build(os.path.join(CONSUMERS, "model"), b, defs + ["MODEL=" + desc, "WEIGHTS=" + weights])
    ids = os.path.join(tmp, "ids.npy")
    np.save(ids, np.array([IDS], dtype=np.int32))
    for target in ("tiny_packed", "tiny_embedded", "tiny_int8"):
        out = os.path.join(tmp, "%s_%s.npy" % (label, target))
        cmd = list(runner) + [os.path.join(b, target + "_main"), "--input", ids, "--output", out]
        if target == "tiny_packed":
            cmd += ["--weights", os.path.join(b, "tiny_packed.fixformer", "tiny_packed.weights")]
        run(cmd)
        ok, why = close(np.load(out), reference(args.fixformer, tmp, weights, "int8" if "int8" in target else "f32"))
        c.check("(%s) %s_main" % (label, target), ok, why)
    # DTYPE and EMIT_ARGS reached emit: int8 weights, no #line
    emitted = os.path.join(b, "tiny_int8.fixformer", "emit")
    text = open(os.path.join(emitted, "tiny.c")).read()
    header = open(os.path.join(emitted, "tiny.h")).read()
    c.check("(%s) DTYPE int8, EMIT_ARGS --no-line" % label, "#line" not in text and "--dtype int8" in header
            and "--no-line" in header, header.splitlines()[2])
    printed = run(list(runner) + [os.path.join(b, "use_model")] + list(map(str, IDS)))
    c.check("(%s) use_model (tiny.h)" % label, printed.strip() == argmax_line(ref), printed.strip())
    if touch:
        again = run(["cmake", "--build", b, "-j2"])
        c.check("(%s) no-op build emits nothing" % label, "fixformer emit" not in again)
        os.utime(desc)
        again = run(["cmake", "--build", b, "-j2"])
        c.check("(%s) touched: re-emits, same code" % label,
                again.count("fixformer emit") == 3 and "Building C object" not in again)
        with open(desc, "a") as f:
            f.write("-- edited\n")  # a new description sha256 in the emitted files
        again = run(["cmake", "--build", b, "-j2"])
        c.check("(%s) edited: recompiles" % label, again.count("fixformer emit") == 3
                and "use_model.c.o" in again and "tiny_packed_model.c.o" in again)
        # a changed argument emits again (the arguments are a file the step depends on)
        run(["cmake", "-S", os.path.join(CONSUMERS, "model"), "-B", b, "-DTRY=WEIGHTS;%s;DTYPE;bf16" % weights])
        again = run(["cmake", "--build", b, "-j2"])
        run(["cmake", "-S", os.path.join(CONSUMERS, "model"), "-B", b, "-DTRY=WEIGHTS;%s;DTYPE;int8" % weights])
        again2 = run(["cmake", "--build", b, "-j2"])
        c.check("(%s) changed DTYPE: re-emits" % label, "fixformer emit" in again and again2.count("fixformer emit") == 1
                and "--dtype int8" in open(os.path.join(b, "tiny_try.fixformer", "emit", "tiny.h")).read())
    return conf


def source_archive(tmp):
    """The source tree as a .tar.gz, as a release would ship it: the files git
    tracks or would track (no build folders)."""
    files = run(["git", "-C", ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard"]).split("\0")
    path = os.path.join(tmp, "fixformer-src.tar.gz")
    with tarfile.open(path, "w:gz") as tar:
        for f in sorted(x for x in files if x and os.path.isfile(os.path.join(ROOT, x))):
            tar.add(os.path.join(ROOT, f), arcname="fixformer/" + f)
    return path


def refused(c, label, tmp, weights, where, try_args, expect):
    """fixformer_add_model(tiny_try ... TRY) fails at configure time, saying expect."""
    b = os.path.join(tmp, "model_refused")
    shutil.rmtree(b, ignore_errors=True)
    desc = os.path.join(ROOT, "models", "tiny.lua")
    p = subprocess.run(["cmake", "-S", os.path.join(CONSUMERS, "model"), "-B", b, where, "-DMODEL=" + desc,
                        "-DWEIGHTS=" + weights, "-DTRY=" + ";".join(try_args)], capture_output=True, text=True)
    c.check("(%s) %s refused at configure" % (label, " ".join(try_args)), p.returncode != 0 and
            expect in " ".join(p.stderr.split()), p.stderr[-300:])


def bad_args(c, ff, tmp, weights, label, where):
    known = "|".join(["native"] + [row[0] for row in isa_table(ff)])
    refused(c, label, tmp, weights, where, ["ISA", "sse9"], "ISA sse9 is not one of " + known)
    if label != "b":
        return
    refused(c, label, tmp, weights, where, ["DTYPE", "f16"], "DTYPE f16 is not one of f32|bf16|int8")
    arm = "|".join(row[0] for row in isa_table(ff) if not row.targets or "aarch64" in row.targets)
    refused(c, label, tmp, weights, where, ["TARGET", "aarch64-linux-gnu", "ISA", "avx2"],
            "ISA avx2 does not run on the target aarch64-linux-gnu (%s)" % arm)
    refused(c, label, tmp, weights, where, ["EMIT_ARGS", "-o", "x"], "EMIT_ARGS -o: give it as the keyword")
    refused(c, label, tmp, weights, where, ["EMIT_ARGS", "--dtype=int8"], "EMIT_ARGS --dtype=int8: give it as the keyword")


def cross(c, args, tmp, weights):
    """(cross) tests/consumers/model for aarch64 Linux through the installed toolchain file, run under qemu-user;
    tests/consumers/installed (COMPONENTS library) refused there."""
    need([("aarch64-linux-gnu-gcc", "gcc-aarch64-linux-gnu, with libc6-dev-arm64-cross"), ("qemu-aarch64", "qemu-user")])
    prefix = os.path.join(tmp, "prefix")
    run(["cmake", "--install", args.build_dir, "--prefix", prefix])
    toolchain = os.path.join(prefix, "lib", "cmake", "fixformer", "toolchains", "aarch64-linux-gnu.cmake")
    where = ["CMAKE_TOOLCHAIN_FILE=" + toolchain, "CMAKE_PREFIX_PATH=" + prefix]
    conf = model_project(c, args, tmp, weights, "cross", where, False,
                         runner=("qemu-aarch64", "-L", "/usr/aarch64-linux-gnu"))
    c.check("(cross) find_package: the generator only", "consumer: the generator only" in conf and
            "no fixformer::fixformer: libfixformer.a is for Linux" in conf, conf[-400:])
    with open(os.path.join(tmp, "model_cross", "use_model"), "rb") as f:
        elf = f.read(20)
    machine = int.from_bytes(elf[18:20], "little")  # ELF e_machine: 183 is AArch64
    c.check("(cross) built for aarch64", elf[:4] == b"\x7fELF" and machine == 183, "e_machine %d" % machine)
    header = open(os.path.join(tmp, "model_cross", "tiny_packed.fixformer", "emit", "tiny.h")).read()
    c.check("(cross) emitted for aarch64-linux-gnu, neon", "--target aarch64-linux-gnu" in header and
            "--isa neon" in header, header.splitlines()[2])
    b = os.path.join(tmp, "installed_cross")
    p = subprocess.run(["cmake", "-S", os.path.join(CONSUMERS, "installed"), "-B", b] + ["-D" + d for d in where] +
                       ["-DJIT_MODEL_SOURCE=" + os.path.join(ROOT, "examples", "jit_model.c")],
                       capture_output=True, text=True)
    said = " ".join(p.stderr.split())
    c.check("(cross) COMPONENTS library refused", p.returncode != 0 and "component library (fixformer::fixformer): "
            "libfixformer.a is for Linux" in said and "this build's target is Linux aarch64" in said, said[-400:])


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--fixformer", required=True)
    ap.add_argument("--build-dir", required=True, help="fixformer's build tree, to install from")
    ap.add_argument("--only", choices=["a", "b", "c", "cross"])
    args = ap.parse_args()
    c = Checks()
    with tempfile.TemporaryDirectory() as tmp:
        weights = os.path.join(tmp, "tiny.safetensors")
        run([args.fixformer, "init", os.path.join(ROOT, "models", "tiny.lua"), "-o", weights, "--seed", "3"])
        try:
            if args.only in (None, "a", "b"):
                prefix = installed(c, args, tmp, weights) if args.only != "b" else None
                if args.only == "b":
                    prefix = os.path.join(tmp, "prefix")
                    run(["cmake", "--install", args.build_dir, "--prefix", prefix])
                if args.only != "a":
                    model_project(c, args, tmp, weights, "b", ["CMAKE_PREFIX_PATH=" + prefix], True)
                    bad_args(c, args.fixformer, tmp, weights, "b", "-DCMAKE_PREFIX_PATH=" + prefix)
            if args.only in (None, "c"):
                # FetchContent_MakeAvailable adds the fetched tree with add_subdirectory: one build covers both
                # ways (and that the archive holds every file); add_subdirectory of this tree is configured below
                model_project(c, args, tmp, weights, "c-fetch", ["FIXFORMER_URL=" + source_archive(tmp)], False)
                bad_args(c, args.fixformer, tmp, weights, "c", "-DFIXFORMER_SOURCE_DIR=" + ROOT)
            if args.only in (None, "cross"):
                cross(c, args, tmp, weights)
        except RuntimeError as e:
            c.check("build or run", False, str(e))
    return 1 if c.failed else 0


if __name__ == "__main__":
    sys.exit(main())
