#!/usr/bin/python3
"""Checks on the C files `fixformer emit` writes.

  emitted.py --fixformer BIN --check warnings   gcc and clang -std=c99 -Wall -Wextra
                                                -Werror -pedantic, and tcc, compile every
                                                file (model, driver, embedded weights)
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
                                                (--update rewrites the golden files)
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


def configs(n, seed):
    rng = random.Random(seed)
    return rng, [random_config(rng, "emit%02d" % i, force=i, dtype=True) for i in range(n)]


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
    for f in ("tiny.c", "tiny.h"):
        if not filecmp.cmp(os.path.join(outs[0], f), os.path.join(outs[1], f), shallow=False):
            raise RuntimeError("%s differs between two runs of the same command" % f)
        if update:
            os.makedirs(golden, exist_ok=True)
            shutil.copy(os.path.join(outs[0], f), os.path.join(golden, f))
            print("updated tests/golden/%s" % f)
        elif not filecmp.cmp(os.path.join(outs[0], f), os.path.join(golden, f), shallow=False):
            diff = subprocess.run(["diff", "-u", os.path.join(golden, f), os.path.join(outs[0], f)],
                                  capture_output=True, text=True).stdout
            raise RuntimeError("%s differs from tests/golden/%s:\n%s" % (f, f, diff[:3000]))
        else:
            print("%s: byte-identical to tests/golden/%s (and stable across runs)" % (f, f))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixformer", required=True)
    ap.add_argument("--check", required=True, choices=["warnings", "aot", "cross", "cross32", "golden"])
    ap.add_argument("--configs", type=int, default=12)
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
            else:
                check_golden(ff, tmp, args.update)
        except RuntimeError as e:
            print("FAILED: %s" % e)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
