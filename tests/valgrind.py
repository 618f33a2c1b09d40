#!/usr/bin/python3
"""Valgrind (memcheck) over one JIT run and one emitted program: no invalid
read or write, no use of uninitialised memory, no definite or indirect leak.
The portable kernels are used (FIXFORMER_ISA=generic, --isa generic):
valgrind does not decode AVX-512.

  valgrind.py --fixformer BIN
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VALGRIND = ["valgrind", "--error-exitcode=99", "--leak-check=full", "--errors-for-leak-kinds=definite,indirect",
            "--show-leak-kinds=definite,indirect", "--track-origins=yes", "-q"]


def run(cmd, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise RuntimeError("%s: exit %d:\n%s" % (" ".join(cmd), p.returncode, p.stderr.strip()[-3000:]))
    return p


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--fixformer", required=True)
    args = ap.parse_args()
    ff = os.path.abspath(args.fixformer)
    env = dict(os.environ, FIXFORMER_ISA="generic")
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(ROOT, "models", "dates.lua")
        ids = os.path.join(tmp, "in.npy")
        np.save(ids, np.array([[31, 23, 34, 21, 26, 4, 14], [14, 4, 31, 23, 34, 0, 0]], np.int32))
        np.save(os.path.join(tmp, "len.npy"), np.array([7, 5], np.int32))
        np.save(os.path.join(tmp, "tgt.npy"), np.array([[1, 10, 18], [1, 10, 18]], np.int32))
        checks = [
            ("JIT (libtcc) forward", [ff, "run", model, "--input", ids, "--lengths", os.path.join(tmp, "len.npy"),
                                      "--target-input", os.path.join(tmp, "tgt.npy"), "--engine", "tcc",
                                      "--output", os.path.join(tmp, "out.npy")]),
            ("JIT (libtcc) greedy decoding", [ff, "generate", model, "--text", "March 5, 1999", "--engine", "tcc"]),
        ]
        out_dir = os.path.join(tmp, "emit")
        run([ff, "emit", model, "-o", out_dir, "--embed", "--with-main"])
        exe = os.path.join(out_dir, "dates")
        run(["cc", "-O1", "-g", "-std=c99", "-o", exe] + [os.path.join(out_dir, f) for f in
            ("dates.c", "dates_main.c", "dates_weights.c")] + ["-lm"])
        checks.append(("emitted program, greedy decoding", [exe, "--text", "5th of march, 1999"]))
        checks.append(("emitted program, forward", [exe, "--input", ids, "--target-input", os.path.join(tmp, "tgt.npy"),
                                                    "--lengths", os.path.join(tmp, "len.npy"),
                                                    "--output", os.path.join(tmp, "out2.npy")]))
        for name, cmd in checks:
            try:
                p = run(VALGRIND + cmd, env=env)
                print("%-34s valgrind-clean  %s" % (name, p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ""))
            except RuntimeError as e:
                failed += 1
                print("%-34s FAIL\n%s" % (name, e))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
