#!/usr/bin/python3
"""Checks on the C files `fixformer emit` writes.

  emitted.py --fixformer BIN --check warnings   gcc and clang -std=c99 -Wall -Wextra
                                                -Werror -pedantic, and tcc, compile every
                                                file (model, driver, embedded weights); the
                                                dates model also in --compute int8 and bf16
                                                (generic with tcc, avx2, neon)
  emitted.py --fixformer BIN --check aot        the emitted driver built with cc -O2 prints
                                                the runtime's numbers (blob and --embed; and
                                                --isa avx512 where the CPU has it)
  emitted.py --fixformer BIN --check cross      aarch64 (NEON kernels) and riscv64 (portable)
                                                builds (-static, --embed --with-main) under
                                                qemu-user print the host runtime's numbers
  emitted.py --fixformer BIN --check cross32    the same for 32-bit Linux (portable kernels):
                                                armhf and i686 under qemu-arm / qemu-i386
  emitted.py --fixformer BIN --check golden     models/tiny.lua emits byte for byte the
                                                committed tests/golden/tiny.{c,h}, twice
                                                (--update rewrites the golden files); the
                                                kernel library, tiny_kernels.c, is not
                                                compared: a kernel edit changes no golden file
  emitted.py --fixformer BIN --check files      what emit writes: NAME.c holds the model and
                                                includes NAME_kernels.c, which holds only the
                                                parts of kernels/ the model calls and is empty
                                                compiled alone; no folder of this machine in
                                                any file; --no-line drops every #line and
                                                nothing else
"""
import argparse
import filecmp
import os
import random
import shutil
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "lib"))
from configs import inputs, random_config, write_description  # noqa: E402
from isas import compilers, isa_table  # noqa: E402
from tools import need  # noqa: E402

STRICT = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"]


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        raise RuntimeError("%s: exit %d: %s" % (" ".join(cmd), p.returncode, (p.stderr or p.stdout).strip()[:2000]))
    return p.stdout


def emit(ff, model, out, *flags):
    run([ff, "emit", model, "-o", out] + list(flags))


# Six force values (tests/lib/configs.py) whose configs between them take every position kind, architecture,
# norm placement, norm kind and activation (swiglu too, which twelve consecutive ones miss): the default set.
FORCES = (0, 5, 7, 9, 10, 14)


def configs(n, seed):
    """n configs forced 0..n-1, or (n None) the six of FORCES."""
    rng = random.Random(seed)
    forces = FORCES if n is None else range(n)
    return rng, [random_config(rng, "emit%02d" % i, force=f, dtype=True) for i, f in enumerate(forces)]


def check_warnings(ff, tmp, n):
    rng, cfgs = configs(n, 7)
    shipped = [("dates", os.path.join(ROOT, "models", "dates.lua"))]  # a driver with a vocabulary
    simd = [(row.name, [cc for cc, _ in compilers(row)]) for row in isa_table(ff)[1:]]
    for cfg in cfgs + [{"name": name, "arch": "shipped", "model": m} for name, m in shipped]:
        d = os.path.join(tmp, cfg["name"])
        os.mkdir(d)
        if "model" in cfg:
            emit(ff, cfg["model"], d, "--embed", "--with-main")
        else:
            model = write_description(cfg, d)
            run([ff, "init", model, "-o", os.path.join(d, "w.safetensors")])
            emit(ff, model, d, "--weights", os.path.join(d, "w.safetensors"), "--embed", "--with-main")
        files = [os.path.join(d, cfg["name"] + s) for s in (".c", "_main.c", "_weights.c")]
        for cc in (["gcc"], ["clang"]):
            for f in files:
                run(cc + STRICT + ["-O1", "-c", f, "-o", f + ".o"])
            run(cc + STRICT + ["-O1", "-DFF_THREADS", "-pthread", "-c", files[1], "-o", files[1] + ".threads.o"])
        for f in files:
            run(["tcc", "-c", f, "-o", f + ".tcc.o"])
        # the SIMD kernels of every ISA in the table, whatever this CPU runs
        for isa, ccs in simd:
            dsimd = os.path.join(d, isa)
            emit(ff, cfg["model"] if "model" in cfg else model, dsimd, "--isa", isa)
            f = os.path.join(dsimd, cfg["name"] + ".c")
            for cc in ccs:
                run(cc + STRICT + ["-O1", "-c", f, "-o", f + ".o"])
        if cfg["arch"] == "shipped":  # the compute types' own tiles (kernels/int8.c, bf16.c; AVX-512's run in parity)
            for what in ("--compute", "--dtype"):  # and the weight types' GEMVs (quant.c's users)
                for t in ("int8", "bf16"):
                    for isa, ccs in [("generic", [["tcc"]])] + [(i, c) for i, c in simd if i in ("avx2", "neon")]:
                        dc = os.path.join(d, "%s-%s-%s" % (isa, what[2:], t))
                        emit(ff, cfg["model"], dc, "--isa", isa, what, t)
                        f = os.path.join(dc, cfg["name"] + ".c")
                        for cc in ccs:
                            run(cc + (STRICT if cc[0] != "tcc" else []) + ["-O1", "-c", f, "-o", f + ".o"])
            print("%s: the compute types and the weight types int8 and bf16 compile cleanly (generic with tcc, "
                  "avx2, neon)" % cfg["name"], flush=True)
        print("%s (%s): gcc, clang -Werror -pedantic and tcc compile cleanly (generic; %s)"
              % (cfg["name"], cfg["arch"], "; ".join("%s with %s" % (isa, ", ".join(c[0] for c in ccs))
                                                       for isa, ccs in simd)), flush=True)


def compare(name, out_path, ref_path, tol=1e-5):
    out, ref = np.load(out_path), np.load(ref_path)
    if out.shape != ref.shape:
        raise RuntimeError("%s: shape %s, runtime %s" % (name, out.shape, ref.shape))
    err = float(np.abs(out - ref).max()) / max(float(np.abs(ref).max()), 1e-30)
    if not err <= tol:
        raise RuntimeError("%s: err %.3e above %.0e" % (name, err, tol))
    return err


def build_and_compare(ff, tmp, n, targets, seed):
    rng, cfgs = configs(n, seed)
    worst = 0.0
    for cfg in cfgs:
        d = os.path.join(tmp, cfg["name"])
        os.mkdir(d)
        model = write_description(cfg, d)
        weights = os.path.join(d, "w.safetensors")
        run([ff, "init", model, "-o", weights])
        files, _ = inputs(cfg, rng, d)
        args = [x for kv in files.items() for x in kv]
        ref = os.path.join(d, "ref.npy")
        run([ff, "run", model, "--weights", weights, "--output", ref, "--engine", "runtime"] + args)
        for target, cc, runner, embed in targets:
            out_dir = os.path.join(d, target + ("_embed" if embed else ""))
            isa = ["--isa", target[5:]] if target.startswith("host-") else []
            emit(ff, model, out_dir, "--weights", weights, "--with-main", *(["--embed"] if embed else []),
                 *(["--target", target] if not target.startswith("host") else []), *isa)
            srcs = [os.path.join(out_dir, cfg["name"] + s) for s in (".c", "_main.c")]
            if embed:
                srcs.append(os.path.join(out_dir, cfg["name"] + "_weights.c"))
            exe = os.path.join(out_dir, cfg["name"])
            run(cc + ["-O2", "-std=c99", "-o", exe] + srcs + ["-lm"])
            blob = [] if embed else ["--weights", os.path.join(out_dir, cfg["name"] + ".weights")]
            out = os.path.join(out_dir, "out.npy")
            run(runner + [exe] + blob + args + ["--output", out])
            err = compare("%s %s" % (cfg["name"], target), out, ref)
            worst = max(worst, err)
            print("%s (%s) %s%s: err=%.2e ok" % (cfg["name"], cfg["arch"], target, " --embed" if embed else "", err),
                  flush=True)
    print("worst err %.2e" % worst)


def check_golden(ff, tmp, update):
    golden = os.path.join(HERE, "golden")
    outs = [os.path.join(tmp, "a"), os.path.join(tmp, "b")]
    for o in outs:  # run from the source root, as the golden command line says
        run([ff, "emit", "models/tiny.lua", "-o", o], cwd=ROOT)
    for f in ("tiny.c", "tiny.h", "tiny_kernels.c"):
        if not filecmp.cmp(os.path.join(outs[0], f), os.path.join(outs[1], f), shallow=False):
            raise RuntimeError("%s differs between two runs of the same command" % f)
        if f == "tiny_kernels.c":  # the kernel library: kernels/, not the model
            print("%s: stable across runs (not a golden file)" % f)
        elif update:
            os.makedirs(golden, exist_ok=True)
            shutil.copy(os.path.join(outs[0], f), os.path.join(golden, f))
            print("updated tests/golden/%s" % f)
        elif not filecmp.cmp(os.path.join(outs[0], f), os.path.join(golden, f), shallow=False):
            diff = subprocess.run(["diff", "-u", os.path.join(golden, f), os.path.join(outs[0], f)],
                                  capture_output=True, text=True).stdout
            raise RuntimeError("%s differs from tests/golden/%s:\n%s" % (f, f, diff[:3000]))
        else:
            print("%s: byte-identical to tests/golden/%s (and stable across runs)" % (f, f))


def read(path):
    """The file's text; "" when emit did not write it."""
    if not os.path.exists(path):
        return ""
    with open(path) as f:
        return f.read()


# The parts of kernels/ (their /* @part */ markers) a model takes: the matrix products on the
# ISA's tile (f32: linear; bf16, int8: quant), attention, and its norm and activation (the norms'
# and activations' loops: elementwise).
def expected_parts(dtype, norm_kind, activation):
    parts = {"tile", "matmul", "sdpa", "plain", "norm_sums", "elementwise", norm_kind,
             "linear" if dtype == "f32" else "quant"}
    parts |= {"gelu": {"gelu"}, "gelu_tanh": {"gelu_tanh", "tanh"}, "swiglu": {"swiglu", "tanh"}}.get(activation, set())
    return parts


def check_files(ff, tmp):
    import re
    cc = os.environ.get("CC", "cc").split()
    failed = []

    def case(name, ok, detail=""):
        print("%-40s %s %s" % (name, "ok" if ok else "FAIL", detail), flush=True)
        if not ok:
            failed.append(name)

    # NAME.c opens on the model and ends with an #include of the kernels it calls
    out = os.path.join(tmp, "tiny")
    emit(ff, os.path.join(ROOT, "models", "tiny.lua"), out)
    model, kernels = read(os.path.join(out, "tiny.c")), read(os.path.join(out, "tiny_kernels.c"))
    case("model_file_holds_no_kernel_library", "FF_KERNEL void" not in model and "@part" not in model and
         '\n#include "tiny_kernels.c"\n' in model and kernels.count("FF_KERNEL void") >= 3)
    case("model_file_under_half_the_old_size", model.count("\n") < 1058 // 2, "%d lines" % model.count("\n"))

    # only the parts of the library the model calls, for every ISA and weight type (and it compiles)
    shapes = [("tiny", "f32", "layernorm", "relu", "sinusoidal"), ("g", "bf16", "rmsnorm", "swiglu", "rope"),
              ("h", "int8", "layernorm", "gelu", "learned"), ("k", "f32", "rmsnorm", "gelu_tanh", "none")]
    for row in isa_table(ff):
        isa, flags = row.name, []  # (compilers(row) holds the ISA's flags)
        compiler = compilers(row)[0][0] if row.name != "generic" else cc
        for name, dtype, norm, act, pos in shapes:
            cfg = {"name": name, "arch": "decoder-only", "d_model": 16, "heads": 2, "d_ff": 24, "layers": 1,
                   "norm_kind": norm, "activation": act, "positional": pos, "vocab": 11, "max_seq": 8,
                   "dtype": dtype}
            d = os.path.join(tmp, "sel_%s_%s" % (isa, name))
            os.makedirs(d)
            emit(ff, write_description(cfg, d), d, "--isa", isa)
            run(compiler + STRICT + flags + ["-O0", "-c", os.path.join(d, name + ".c"), "-o", os.path.join(d, "m.o")])
            text = read(os.path.join(d, name + "_kernels.c"))
            got = set(re.findall(r"^/\* @part (\w+)", text, re.M))
            want = expected_parts(dtype, norm, act)
            decls = set(re.findall(r"^void (ff_\w+)\(", read(os.path.join(d, name + ".c")), re.M))
            calls = {"ff_%s_%s" % (k, isa) for k in ["sdpa", norm, "linear" + {"f32": "", "bf16": "_bf16",
                                                                                "int8": "_q8"}[dtype]]
                     + ([act] if act != "relu" else [])}
            case("kernels_%s_%s_%s_%s" % (isa, dtype, norm, act), got == want and decls == calls and
                 ("rope_" in read(os.path.join(d, name + ".c"))) == (pos == "rope"),
                 "" if got == want and decls == calls else "parts %s, want %s; declared %s" %
                 (sorted(got), sorted(want), sorted(decls)))

    # NAME_kernels.c compiled alone (a build that compiles every .c) is empty, so that two models'
    # files link into one program
    both = os.path.join(tmp, "both")
    emit(ff, os.path.join(ROOT, "models", "dates.lua"), both)
    emit(ff, os.path.join(ROOT, "models", "tiny.lua"), both)
    objs = []
    for f in ("tiny.c", "tiny_kernels.c", "dates.c", "dates_kernels.c"):
        run(cc + STRICT + ["-O1", "-fPIC", "-c", os.path.join(both, f), "-o", os.path.join(both, f + ".o")])
        objs.append(os.path.join(both, f + ".o"))
    symbols = run(["nm", objs[1], objs[3]])
    linked = subprocess.run(cc + ["-shared", "-o", os.path.join(both, "both.so")] + objs, capture_output=True,
                            text=True)
    alone = not re.search(r" [TtDdBbRr] ", symbols)
    case("kernel_file_alone_is_empty", alone, "" if alone else symbols.strip()[:300])
    case("two_models_link_together", linked.returncode == 0, linked.stderr.strip()[:300])

    # no folder of this machine in the files: a path inside the current folder relative, one outside
    # it by its file name; the description's sha256 is kept
    weights = os.path.join(tmp, "w.safetensors")
    run([ff, "init", "models/tiny.lua", "-o", weights], cwd=ROOT)
    elsewhere = os.path.join(tmp, "elsewhere")
    os.mkdir(elsewhere)
    shutil.copy(os.path.join(ROOT, "models", "tiny.lua"), elsewhere)
    rel, inside, outside = (os.path.join(tmp, s) for s in ("rel", "inside", "outside"))
    run([ff, "emit", "models/tiny.lua", "-o", rel], cwd=ROOT)
    run([ff, "emit", os.path.join(ROOT, "models", "tiny.lua"), "-o", inside], cwd=ROOT)
    run([ff, "emit", os.path.join(elsewhere, "tiny.lua"), "-o", outside, "--weights", weights, "--embed",
         "--with-main"], cwd=ROOT)
    texts = {f: read(os.path.join(outside, f)) for f in os.listdir(outside)}
    leaks = sorted(f for f, t in texts.items() if tmp in t or ROOT in t)
    case("banner_path_relative_inside_cwd", read(os.path.join(inside, "tiny.c")) == read(os.path.join(rel, "tiny.c")))
    case("banner_paths_name_only_outside_cwd", not leaks and "from tiny.lua - do not edit" in texts["tiny.c"] and
         "command: fixformer emit tiny.lua --weights w.safetensors --embed --with-main" in texts["tiny.c"] and
         "from w.safetensors" in texts["tiny_weights.c"] and
         read(os.path.join(rel, "tiny.c")).split("\n")[1] == texts["tiny.c"].split("\n")[1],
         "machine folders in %s" % leaks if leaks else "")

    # the SIMD register tiles keep their accumulators in registers at -O2, the level the docs build
    # emitted code at: a tile's stack frame under 256 bytes, room for saved registers and a row of
    # output, where its accumulators take 1 KB on AVX-512 and 256 bytes in NEON's 4-row compute
    # tiles (GCC unrolls the loops over a tile's rows by itself at -O3 only; rolled, the
    # accumulators lived on the stack, 2.5x slower).  The compute types' tiles too; not the plain
    # C tiles for CPUs without VNNI or BF16, which hold theirs in arrays by design.
    for row in isa_table(ff)[1:]:
        compiler, frames = compilers(row)[0][0], {}
        for what in ([], ["--compute", "bf16"], ["--dtype", "int8", "--compute", "int8"]):
            d = os.path.join(tmp, "frames_%s_%s" % (row.name, what[-1] if what else "f32"))
            emit(ff, os.path.join(ROOT, "models", "tiny.lua"), d, "--isa", row.name, *what)
            run(compiler + STRICT + ["-O2", "-fstack-usage", "-c", "tiny.c", "-o", "m.o"], cwd=d)
            for line in read(os.path.join(d, "m.su")).splitlines():
                name, size = line.split("\t")[0].rsplit(":", 1)[1].split(".")[0], int(line.split("\t")[1])
                if re.match(r"ff_(i8_|b16_)?tile_\w*%s$" % row.name, name) and "_plain_" not in name \
                        and name != "ff_tile_rows_neon":  # (its narrow tiles' padded block of B)
                    frames[name] = max(size, frames.get(name, 0))
        over = sorted(n for n, b in frames.items() if b >= 256)
        case("tiles_in_registers_%s" % row.name, len(frames) >= 2 and not over,
             "frames %s" % ", ".join("%s %d" % (n, b) for n, b in sorted(frames.items()))
             + ("; 256 bytes or more: %s" % over if over else ""))

    # --no-line: no #line anywhere, the files otherwise as before (but for the command and the banner's
    # line about them), and they build and run as before
    plain = os.path.join(tmp, "noline")
    run([ff, "emit", "models/tiny.lua", "-o", plain, "--no-line", "--with-main"], cwd=ROOT)
    run([ff, "emit", "models/tiny.lua", "-o", rel, "--with-main"], cwd=ROOT)
    same, has_line = True, []
    for f in sorted(os.listdir(plain)):
        a, b = read(os.path.join(rel, f)), read(os.path.join(plain, f))
        has_line += [f] if "#line" in b else []
        a = [x for x in a.split("\n") if not x.startswith("#line ") and "#line directives" not in x]
        b = [x.replace(" --no-line", "") for x in b.split("\n")]
        same = same and a == b
    exe = os.path.join(plain, "tiny")
    run(cc + STRICT + ["-O1", "-o", exe, os.path.join(plain, "tiny.c"), os.path.join(plain, "tiny_main.c"), "-lm"])
    case("no_line_drops_every_line_directive", not has_line and "#line" in read(os.path.join(rel, "tiny.c")),
         "#line in %s" % has_line if has_line else "")
    case("no_line_changes_nothing_else", same)
    if failed:
        raise RuntimeError("%d case(s) failed: %s" % (len(failed), ", ".join(failed)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixformer", required=True)
    ap.add_argument("--check", required=True, choices=["warnings", "aot", "cross", "cross32", "golden", "files"])
    ap.add_argument("--configs", type=int, help="configs forced 0..N-1 (default: the six of FORCES)")
    ap.add_argument("--update", action="store_true")
    args = ap.parse_args()
    ff = os.path.abspath(args.fixformer)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            if args.check == "warnings":
                check_warnings(ff, tmp, args.configs)
            elif args.check == "aot":
                cc = os.environ.get("CC", "cc").split()
                targets = [("host", cc, [], False), ("host", cc, [], True)]
                for row in isa_table(ff)[1:]:  # the SIMD kernels, where this CPU runs them
                    if row.runs:
                        targets.append(("host-" + row.name, cc + row.flags, [], False))
                build_and_compare(ff, tmp, args.configs, targets, 11)
            elif args.check == "cross":
                targets = [("aarch64-linux-gnu", ["aarch64-linux-gnu-gcc", "-static"], ["qemu-aarch64"], True),
                           ("riscv64-linux-gnu", ["riscv64-linux-gnu-gcc", "-static"], ["qemu-riscv64"], True)]
                build_and_compare(ff, tmp, args.configs, targets, 13)
            elif args.check == "cross32":
                need([("arm-linux-gnueabihf-gcc", "gcc-arm-linux-gnueabihf"), ("qemu-arm", "qemu-user"),
                      ("i686-linux-gnu-gcc", "gcc-i686-linux-gnu"), ("qemu-i386", "qemu-user")])
                targets = [(t, [t + "-gcc", "-static"], [qemu], embed)
                           for t, qemu in (("arm-linux-gnueabihf", "qemu-arm"), ("i686-linux-gnu", "qemu-i386"))
                           for embed in (True, False)]
                build_and_compare(ff, tmp, args.configs, targets, 19)
            elif args.check == "files":
                check_files(ff, tmp)
            else:
                check_golden(ff, tmp, args.update)
        except RuntimeError as e:
            print("FAILED: %s" % e)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
