#!/usr/bin/python3
"""Differential test: generated code (--engine tcc / cc) against the runtime.

For N seeded random configs covering every architecture, norm placement and
kind, activation and positional kind, odd sizes, heads that are not powers of
two, T = 1 and padded batches: `fixformer init` makes weights, and the output
of every engine must equal the runtime's within 1e-5 (max-abs error scaled by
the output's max magnitude).  Usage:

  differential.py --fixformer BIN [--engines tcc,cc] [--configs 32] [--seed 1]
"""
import argparse
import os
import random
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from configs import coverage, inputs, random_config, write_description  # noqa: E402


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(cmd[:3]), p.returncode, p.stderr.strip()))
    return p.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--fixformer", required=True)
    ap.add_argument("--engines", default="tcc,cc")
    ap.add_argument("--configs", type=int, default=32)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tol", type=float, default=1e-5)
    args = ap.parse_args()
    engines = args.engines.split(",")
    rng = random.Random(args.seed)
    failures, worst = 0, {e: 0.0 for e in engines}
    seen = set()
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.configs):
            cfg = random_config(rng, "diff%02d" % i, force=i, dtype=True)
            d = os.path.join(tmp, cfg["name"])
            os.mkdir(d)
            model = write_description(cfg, d)
            weights = os.path.join(d, "w.safetensors")
            run([args.fixformer, "init", model, "-o", weights, "--seed", str(i)])
            files, _ = inputs(cfg, rng, d)
            base = [args.fixformer, "run", model, "--weights", weights]
            for k, v in files.items():
                base += [k, v]
            ref_path = os.path.join(d, "ref.npy")
            run(base + ["--output", ref_path, "--engine", "runtime"])
            ref = np.load(ref_path)
            scale = max(float(np.abs(ref).max()), 1e-30)
            line = []
            for e in engines:
                out_path = os.path.join(d, "out_%s.npy" % e)
                try:
                    run(base + ["--output", out_path, "--engine", e])
                    out = np.load(out_path)
                    err = float(np.abs(out - ref).max()) / scale if out.shape == ref.shape else float("inf")
                except RuntimeError as ex:
                    err, line = float("inf"), line + [str(ex)]
                worst[e] = max(worst[e], err)
                ok = err <= args.tol
                failures += not ok
                line.append("%s err=%.2e %s" % (e, err, "ok" if ok else "FAIL"))
            seen.update(coverage(cfg))
            print("config %-7s %-16s %-4s %s" % (cfg["name"], cfg["arch"], cfg.get("dtype", "f32"), "  ".join(line)),
                  flush=True)
    needed = {"encoder", "decoder-only", "encoder-decoder", "post", "pre", "layernorm", "rmsnorm", "relu", "gelu",
              "gelu_tanh", "swiglu", "none", "sinusoidal", "learned", "rope", "grouped-query", "interleaved"}
    if args.configs >= 32:  # the keys drawn at random, not cycled: the full run (36) must meet each
        needed |= {"head_bias", "token_types", "embed_norm", "no lm_head", "bf16", "int8"}
    missing = needed - seen
    if missing:
        print("coverage: no config had %s" % ", ".join(sorted(missing)))
        failures += 1
    print("%d configs, worst %s; %s" % (args.configs, ", ".join("%s %.2e" % kv for kv in worst.items()),
                                       "FAILED" if failures else "all within %.0e" % args.tol))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
