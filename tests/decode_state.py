#!/usr/bin/python3
"""An emitted model's NAME_decode and the state's cache fill (issue 10, item 15).

For a seeded decoder-only token model (`fixformer init` weights) and the
encoder-decoder models/dates.lua (its trained weights), `fixformer emit
--weights` writes NAME.c/NAME.h/NAME.weights; tests/decode_state.c is built
against them with cc and with tcc and run: decode at pos0 = 3 on a fresh
cache is NAME_ELENGTH (it used to return 0 with NaN logits read from
unwritten cache rows), stepping equals one whole decode, rewinding to
pos0 < fill works and moves the fill, pos0 past the fill is refused, and
encode / forward reset it (see the C file).

  decode_state.py --fixformer BIN
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

DECODER = """return {
  name = "dec", arch = "decoder-only", d_model = 16, heads = 2, d_ff = 32, layers = 2,
  norm = "pre", activation = "gelu", vocab = 13, positional = "learned", max_seq = 12,
}
"""


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)
    if p.returncode != 0:
        raise RuntimeError("%s: exit %d\n%s%s" % (" ".join(cmd), p.returncode, p.stdout, p.stderr))
    return p.stdout


def check(ff, tmp, desc, name, encdec, weights=None):
    out = os.path.join(tmp, name)
    cmd = [ff, "emit", desc, "-o", out]
    if weights:
        cmd += ["--weights", weights]
    run(cmd)
    failed = 0
    compilers = [("cc", ["cc", "-std=c99", "-O1", "-Wall", "-Wextra", "-Werror"])]
    if shutil.which("tcc"):
        compilers.append(("tcc", ["tcc"]))
    for cname, cc in compilers:
        exe = os.path.join(tmp, "%s_%s" % (name, cname))
        defs = ['-DNAME_H="%s.h"' % name, "-DP=%s_" % name, "-DU=%s_" % name.upper()]
        if encdec:
            defs.append("-DENCDEC")
        run(cc + defs + ["-I", out, "-o", exe, os.path.join(HERE, "decode_state.c"),
                         os.path.join(out, name + ".c"), "-lm"])
        p = subprocess.run([exe, os.path.join(out, name + ".weights")], capture_output=True, text=True,
                           timeout=120)
        ok = p.returncode == 0 and "decode_state: ok" in p.stdout
        print("%s %s (%s): %s" % ("ok  " if ok else "FAIL", name, cname, p.stdout.strip().replace("\n", "; ")))
        failed += not ok
    return failed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixformer", required=True)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        desc = os.path.join(tmp, "dec.lua")
        with open(desc, "w") as f:
            f.write(DECODER)
        w = os.path.join(tmp, "dec.safetensors")
        run([a.fixformer, "init", desc, "-o", w, "--seed", "7"])
        failed = check(a.fixformer, tmp, desc, "dec", False, w)
        failed += check(a.fixformer, tmp, os.path.join(ROOT, "models", "dates.lua"), "dates", True)
    print("decode_state: %s" % ("FAILED" if failed else "ok"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
