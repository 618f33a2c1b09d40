#!/usr/bin/python3
"""The public C API example (examples/jit_model.c) against the command line:
for shipped token models with `fixformer init` weights, the example's output
(libtcc through include/fixformer.h) must equal `fixformer run --engine runtime`
on the same ids within 1e-5 (scaled max-abs), and a bad id must fail cleanly.

  api_example.py --fixformer BIN --example BIN
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError("%s: exit %d: %s" % (" ".join(cmd), p.returncode, p.stderr.strip()))
    return p.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--fixformer", required=True)
    ap.add_argument("--example", required=True)
    args = ap.parse_args()
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for model, ids in (("tiny", [5, 17, 42, 8, 99, 3]), ("llama_tiny", [1, 200, 31, 7])):
            desc = os.path.join(ROOT, "models", model + ".lua")
            w = os.path.join(tmp, model + ".safetensors")
            run([args.fixformer, "init", desc, "-o", w, "--seed", "3"])
            got, ref = os.path.join(tmp, model + "_api.npy"), os.path.join(tmp, model + "_ref.npy")
            printed = run([args.example, desc, w, got] + [str(i) for i in ids])
            run([args.fixformer, "run", desc, "--weights", w, "--tokens", " ".join(map(str, ids)), "--output", ref,
                 "--engine", "runtime"])
            a, b = np.load(got), np.load(ref)
            err = float(np.abs(a - b).max()) / max(float(np.abs(b).max()), 1e-30) if a.shape == b.shape else 1e30
            argmax = "argmax: " + " ".join(str(int(i)) for i in b[0].argmax(-1))
            ok = err <= 1e-5 and printed.strip() == argmax
            failed += not ok
            print("%-10s shape %s err=%.2e %s  (%s)" % (model, a.shape, err, "ok" if ok else "FAIL", printed.strip()))
        p = subprocess.run([args.example, os.path.join(ROOT, "models", "tiny.lua"), os.path.join(tmp, "tiny.safetensors"),
                            os.path.join(tmp, "bad.npy"), "5", "128"], capture_output=True, text=True)
        ok = p.returncode == 1 and "token id 128" in p.stderr and not os.path.exists(os.path.join(tmp, "bad.npy"))
        failed += not ok
        print("bad id     exit %d: %s %s" % (p.returncode, p.stderr.strip(), "ok" if ok else "FAIL"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
