#!/usr/bin/python3
"""Code generation time against depth (issue 10, item 14).

`fixformer emit` of an encoder-decoder with 4096 + 4096 layers (d_model 16,
the most layers validation allows) must finish within 120 s (the arena
placer compared every value with every placed one: 180 s at 512 layers, more
than 8 minutes at 4096; now seconds).  Also:
  * the state grows by exactly the per-layer caches between 64 and 4096
    layers (the activations of a layer still share one region: the faster
    placer packs as tightly);
  * the 4096-layer C compiles (tcc -c).

  plan_scaling.py --fixformer BIN
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

LIMIT = 120  # seconds for the 4096-layer emit


def description(n):
    return """return {
  name = "deep", arch = "encoder-decoder", d_model = 16, heads = 2, d_ff = 32,
  encoder_layers = %d, decoder_layers = %d, vocab = 10, max_seq = 16,
}
""" % (n, n)


def emit(ff, tmp, n, timeout):
    desc = os.path.join(tmp, "deep%d.lua" % n)
    with open(desc, "w") as f:
        f.write(description(n))
    out = os.path.join(tmp, "out%d" % n)
    t0 = time.monotonic()
    try:
        p = subprocess.run([ff, "emit", desc, "-o", out], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise SystemExit("FAIL emit of %d layers took longer than %d s" % (n, timeout))
    took = time.monotonic() - t0
    if p.returncode != 0:
        raise SystemExit("FAIL emit of %d layers: exit %d: %s" % (n, p.returncode, p.stderr.strip()))
    with open(os.path.join(out, "deep.h")) as f:
        state = int(re.search(r"#define DEEP_STATE_BYTES (\d+)", f.read()).group(1))
    print("emit of %d + %d layers: %.1f s, state %d bytes" % (n, n, took, state))
    return out, state


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixformer", required=True)
    a = ap.parse_args()
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        _, small = emit(a.fixformer, tmp, 64, LIMIT)
        out, big = emit(a.fixformer, tmp, 4096, LIMIT)
        # per decoder layer: self-attention k|v cache and cross-attention k|v, [16, 32] floats each
        caches = (4096 - 64) * 2 * 16 * 32 * 4
        if big - small != caches:
            print("FAIL the state grew by %d bytes from 64 to 4096 layers, the caches by %d" % (big - small, caches))
            failed += 1
        t0 = time.monotonic()
        p = subprocess.run(["tcc", "-c", os.path.join(out, "deep.c"), "-o", os.path.join(tmp, "deep.o")],
                           capture_output=True, text=True, timeout=300)
        print("tcc -c of the 4096-layer code: exit %d, %.1f s" % (p.returncode, time.monotonic() - t0))
        if p.returncode != 0:
            print("FAIL tcc: %s" % p.stderr.strip()[:2000])
            failed += 1
    print("plan_scaling: %s" % ("FAILED" if failed else "ok"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
