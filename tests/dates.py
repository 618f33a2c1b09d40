#!/usr/bin/python3
"""The shipped model, models/dates.*: 500 held-out dates (made by the
generator that trained it, with dates it never saw, in every format) are
translated by `fixformer generate` through libtcc, cc and the runtime.  Each
engine must get >= 99 % exactly right and produce, token for token, the ids
of PyTorch's greedy decoding of the same weights (tests/lib/dates_ref.py).  The
inputs are given to fixformer in mixed case (the vocabulary lowercases).
The program `fixformer emit --embed --with-main` writes is then built with cc
and (int8) with aarch64-linux-gnu-gcc (run under qemu-aarch64) and translates the
first dates with the same answers.  Each weight type (f32, bf16, int8) is held
to the same: >= 99 % right (500/500 measured) and PyTorch's ids on the weights as
that type stores them (tests/lib/reference.py store_as).  Compute int8 and bf16
(`--compute`: the blocks' linear layers on rounded inputs and matrices) are held to
their accuracy contract (docs/performance.md): >= 99 % right (500/500 measured),
the same ids on every engine as the runtime's (the oracle), and >= 99 % the same
ids as PyTorch's f32 greedy decoding (500/500 measured).

  dates.py --fixformer BIN [--count 500] [--engines tcc,cc,runtime] [--dtypes f32,bf16,int8]
           [--computes int8,bf16]
"""
import argparse
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = os.path.join(HERE, "..", "models", "dates.lua")


def mixed_case(i, text):
    return (text, text.title(), text.upper(), text.capitalize())[i % 4]


def check_engines(args, dtype, tmp, inputs, expected, torch_out, lines):
    """fixformer generate on each engine: >= 99 % right and PyTorch's ids, token for token."""
    failed = 0
    for e in args.engines.split(","):
        p = subprocess.run([args.fixformer, "generate", MODEL, "--lines", lines, "--ids", "--max-new", "16",
                            "--engine", e, "--dtype", dtype], capture_output=True, text=True)
        got = p.stdout.splitlines()
        if p.returncode != 0 or len(got) != len(inputs):
            print("%-4s %-8s FAIL: exit %d, %d lines: %s" % (dtype, e, p.returncode, len(got), p.stderr.strip()))
            failed += 1
            continue
        right = sum(g.split("\t")[1] == x for g, x in zip(got, expected))
        differ = [(i, g, t) for i, (g, t) in enumerate(zip(got, torch_out)) if g != t]
        ok = right >= 0.99 * len(expected) and not differ
        failed += not ok
        print("%-4s %-8s %d/%d exact (%.1f %%), %d differ from PyTorch's ids %s" % (
            dtype, e, right, len(expected), 100.0 * right / len(expected), len(differ), "ok" if ok else "FAIL"))
        for i, g, t in differ[:5]:
            print("   %r: fixformer %r, pytorch %r" % (inputs[i], g, t))
        for i, (g, x) in enumerate(zip(got, expected)):
            if g.split("\t")[1] != x:
                print("   wrong: %r -> %r, expected %s" % (inputs[i], g.split("\t")[1], x))
    return failed


def check_compute(args, compute, inputs, expected, torch_out, lines):
    """compute int8 on each engine: >= 99 % right, the runtime's ids, and >= 99 % PyTorch's f32 ids."""
    failed, outs = 0, {}
    engines = ["runtime"] + [e for e in args.engines.split(",") if e != "runtime"]
    for e in engines:
        p = subprocess.run([args.fixformer, "generate", MODEL, "--lines", lines, "--ids", "--max-new", "16",
                            "--engine", e, "--compute", compute], capture_output=True, text=True)
        got = outs[e] = p.stdout.splitlines()
        if p.returncode != 0 or len(got) != len(inputs):
            print("compute %s %-8s FAIL: exit %d, %d lines: %s" % (compute, e, p.returncode, len(got),
                                                                   p.stderr.strip()))
            failed += 1
            continue
        right = sum(g.split("\t")[1] == x for g, x in zip(got, expected))
        same = sum(g == t for g, t in zip(got, torch_out))
        oracle = sum(g == r for g, r in zip(got, outs["runtime"]))
        ok = right >= 0.99 * len(expected) and same >= 0.99 * len(expected) and oracle == len(expected)
        failed += not ok
        print("compute %s %-8s %d/%d exact, %d/%d PyTorch's f32 ids, %d/%d the runtime's %s" % (
            compute, e, right, len(expected), same, len(expected), oracle, len(expected), "ok" if ok else "FAIL"))
    # the portable kernels run it too, and say so on stderr, once (not with --quiet)
    notes = []
    for quiet in ([], ["-q"]):
        p = subprocess.run([args.fixformer, "generate", MODEL, "--text", inputs[0], "--engine", "cc", "--compute",
                            compute] + quiet, capture_output=True, text=True, env=dict(os.environ,
                                                                                     FIXFORMER_ISA="generic"))
        notes.append(p.stderr.count("runs on the plain C kernels here (generic"))
        ok = p.returncode == 0 and p.stdout.strip() == expected[0]
        failed += not ok
    ok = notes == [1, 0]
    failed += not ok
    print("compute %s generic   the note on stderr %d time(s), with -q %d: %s" % (compute, notes[0], notes[1],
                                                                             "ok" if ok else "FAIL"))
    return failed


def check_emitted(args, dtype, tmp, inputs, expected, torch_out):
    """The emitted program (`emit --embed --with-main`), natively and cross-compiled under qemu."""
    failed = 0
    builds = [("cc", os.environ.get("CC", "cc").split(), [], 20)]
    if not args.no_cross and dtype == "int8":  # (f32 on aarch64: emitted_cross)
        builds.append(("aarch64", ["aarch64-linux-gnu-gcc", "-static"], ["qemu-aarch64"], 12))
    for name, cc, runner, count in builds:
        out_dir = os.path.join(tmp, "emit_%s_%s" % (dtype, name))
        subprocess.run([args.fixformer, "emit", MODEL, "-o", out_dir, "--embed", "--with-main", "--dtype", dtype]
                       + (["--target", "aarch64-linux-gnu"] if runner else []), check=True, stdout=subprocess.DEVNULL)
        exe = os.path.join(out_dir, "dates")
        subprocess.run(cc + ["-O2", "-std=c99", "-o", exe] + [os.path.join(out_dir, f) for f in
                       ("dates.c", "dates_main.c", "dates_weights.c")] + ["-lm"], check=True)
        right = 0
        for i in range(count):
            p = subprocess.run(runner + [exe, "--text", mixed_case(i, inputs[i])], capture_output=True, text=True)
            got = p.stdout.strip()
            right += got == expected[i] == torch_out[i].split("\t")[1]
            if got != expected[i]:
                print("   emitted %s: %r -> %r (exit %d %s), expected %s" % (name, inputs[i], got, p.returncode,
                                                                           p.stderr.strip(), expected[i]))
        ok = right == count
        failed += not ok
        print("%-4s emitted program (%s%s): %d/%d the same as PyTorch %s" % (
            dtype, name, " under " + runner[0] if runner else "", right, count, "ok" if ok else "FAIL"))
    return failed


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixformer", required=True)
    ap.add_argument("--count", type=int, default=500)
    ap.add_argument("--engines", default="tcc,cc,runtime")
    ap.add_argument("--dtypes", default="f32,bf16,int8", help="weight types")
    ap.add_argument("--no-cross", action="store_true", help="skip the aarch64 build under qemu")
    ap.add_argument("--computes", default="int8,bf16", help="compute types other than f32 (on the f32 weights)")
    args = ap.parse_args()
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for dtype in args.dtypes.split(","):
            ref_dir = os.path.join(tmp, "ref_" + dtype)
            subprocess.run([sys.executable, os.path.join(HERE, "lib", "dates_ref.py"), "--model", MODEL, "--held-out",
                            str(args.count), "--write-dir", ref_dir, "--dtype", dtype], check=True,
                           stdout=subprocess.DEVNULL)
            inputs = open(os.path.join(ref_dir, "inputs.txt")).read().splitlines()
            expected = open(os.path.join(ref_dir, "expected.txt")).read().splitlines()
            torch_out = open(os.path.join(ref_dir, "torch.txt")).read().splitlines()
            right = sum(t.split("\t")[1] == e for t, e in zip(torch_out, expected))
            print("%-4s pytorch  %d/%d exact (%.1f %%)" % (dtype, right, len(expected), 100.0 * right / len(expected)))
            lines = os.path.join(tmp, "mixed.txt")
            with open(lines, "w") as f:
                f.writelines(mixed_case(i, t) + "\n" for i, t in enumerate(inputs))
            failed += check_engines(args, dtype, tmp, inputs, expected, torch_out, lines)
            failed += check_emitted(args, dtype, tmp, inputs, expected, torch_out)
            if dtype == "f32":
                for compute in filter(None, args.computes.split(",")):
                    failed += check_compute(args, compute, inputs, expected, torch_out, lines)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
