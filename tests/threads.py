#!/usr/bin/python3
"""Threads in the generated code (NAME_set_threads, `--threads N`): models
big enough that matrix products and attention split over the pool (above a
million multiply-adds an op), run by tcc and cc with 2 and 3 threads (3
splits panels and heads unevenly), must equal the runtime within 1e-5; so
must greedy decoding with threads (its ids, and on two models whose one-row
steps split too, its logits), and the emitted program built with its
pthread pool (-DFF_THREADS -pthread) run with --threads 3.  Bad thread
counts fail cleanly.

  threads.py --fixformer BIN
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "lib"))
from configs import write_description  # noqa: E402

CONFIGS = [  # (config, B, T): heads 4, 10 (more than the 8 scratch slots), 3, 5 against 2 and 3 threads; odd
    # widths; padding
    (dict(name="thr_enc", arch="encoder", d_model=128, heads=4, d_ff=300, layers=2, max_seq=80), 2, 64),
    (dict(name="thr_heads", arch="encoder", d_model=160, heads=10, d_ff=200, layers=1, max_seq=80), 2, 64),
    (dict(name="thr_dec", arch="decoder-only", d_model=96, heads=3, d_ff=250, layers=2, norm="pre",
          norm_kind="rmsnorm", activation="swiglu", positional="rope", vocab=300, max_seq=96), 2, 70),
    (dict(name="thr_encdec", arch="encoder-decoder", d_model=120, heads=5, d_ff=260, layers=1,
          activation="gelu", positional="sinusoidal", vocab=200, max_seq=80), 2, 60),
    # grouped-query: 12 heads over 3 K/V heads, the heads' ranges cutting across groups
    (dict(name="thr_gqa", arch="decoder-only", d_model=384, heads=12, kv_heads=3, d_ff=200, layers=1, norm="pre",
          norm_kind="rmsnorm", activation="swiglu", positional="rope", rope_pairing="interleaved", vocab=50,
          max_seq=72), 2, 64),
]

# decoding on threads: one row, where a product with 64K weights or more, and attention over 16K key floats or
# more, split over the pool (the one-row attention path of kernels/sdpa.c on head ranges); (config, prompt, new)
DECODE = [
    (dict(name="thr_step", arch="decoder-only", d_model=256, heads=4, d_ff=300, layers=2, norm="pre",
          norm_kind="rmsnorm", activation="swiglu", positional="rope", vocab=60, max_seq=96), 40, 40),
    # 8 heads over 2 K/V heads, 3 threads: head ranges cutting across groups; attention splits past 128 keys
    (dict(name="thr_step_gqa", arch="decoder-only", d_model=512, heads=8, kv_heads=2, d_ff=200, layers=1,
          norm="pre", norm_kind="rmsnorm", activation="swiglu", positional="rope", vocab=60, max_seq=160), 110, 40),
]


def new_model(ff, tmp, cfg):
    """the config's folder, description and `init` weights under tmp"""
    d = os.path.join(tmp, cfg["name"])
    os.mkdir(d)
    model = write_description(cfg, d)
    w = os.path.join(d, "w.safetensors")
    run([ff, "init", model, "-o", w])
    return d, model, w


def decode_logits(ff, tmp, rng):
    """greedy decoding's logits on 3 threads (tcc, cc) against the runtime's: failures"""
    failed = 0
    for cfg, P, new in DECODE:
        d, model, w = new_model(ff, tmp, cfg)
        gen = [ff, "generate", model, "--weights", w, "--tokens",
               " ".join(map(str, rng.randint(2, cfg["vocab"], size=P))), "--max-new", str(new)]
        ref = os.path.join(d, "ref.npy")
        run(gen + ["--engine", "runtime", "--logits", ref])
        r = np.load(ref)
        for engine in ("tcc", "cc"):
            out = os.path.join(d, "out_%s.npy" % engine)
            run(gen + ["--engine", engine, "--threads", "3", "--logits", out])
            got = np.load(out)
            err = float(np.abs(got - r).max()) / float(np.abs(r).max()) if got.shape == r.shape else float("inf")
            ok = err <= 1e-5 and r.shape[1] == P + new - 1
            failed += not ok
            print("%-12s %-3s decoding %d positions on 3 threads: logits err=%.2e %s" % (
                cfg["name"], engine, r.shape[1], err, "ok" if ok else "FAIL"), flush=True)
    return failed


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError("%s: exit %d: %s" % (" ".join(cmd[:3]), p.returncode, p.stderr.strip()))
    return p.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--fixformer", required=True)
    args = ap.parse_args()
    ff, failed = args.fixformer, 0
    rng = np.random.RandomState(7)
    with tempfile.TemporaryDirectory() as tmp:
        for cfg, B, T in CONFIGS:
            d, model, w = new_model(ff, tmp, cfg)
            seq = (lambda n: rng.randint(0, cfg["vocab"], size=(B, n)).astype(np.int32)) if "vocab" in cfg else \
                (lambda n: rng.standard_normal((B, n, cfg["d_model"])).astype(np.float32))
            files = {"--input": seq(T), "--lengths": np.array([T, T // 2 + 1], np.int32)}
            if cfg["arch"] == "encoder-decoder":
                files["--target-input"] = seq(T - 7)
            flags = []
            for k, v in files.items():
                path = os.path.join(d, k[2:] + ".npy")
                np.save(path, v)
                flags += [k, path]
            ref = os.path.join(d, "ref.npy")
            run([ff, "run", model, "--weights", w, "--output", ref, "--engine", "runtime"] + flags)
            r = np.load(ref)
            for engine in ("tcc", "cc"):
                for threads in (2, 3):
                    out = os.path.join(d, "out_%s_%d.npy" % (engine, threads))
                    run([ff, "run", model, "--weights", w, "--output", out, "--engine", engine, "--threads",
                         str(threads)] + flags)
                    err = float(np.abs(np.load(out) - r).max()) / float(np.abs(r).max())
                    ok = err <= 1e-5
                    failed += not ok
                    print("%-10s %-3s %d threads: err=%.2e %s" % (cfg["name"], engine, threads, err,
                                                                  "ok" if ok else "FAIL"), flush=True)
            # the emitted program built with its pthread pool (-DFF_THREADS -pthread)
            out_dir = os.path.join(d, "emit")
            run([ff, "emit", model, "-o", out_dir, "--weights", w, "--with-main"])
            exe = os.path.join(out_dir, cfg["name"])
            run(["cc", "-O2", "-std=c99", "-DFF_THREADS", "-pthread", "-o", exe] +
                [os.path.join(out_dir, cfg["name"] + s) for s in (".c", "_main.c")] + ["-lm"])
            out = os.path.join(d, "out_emitted.npy")
            run([exe, "--weights", os.path.join(out_dir, cfg["name"] + ".weights"), "--output", out, "--threads", "3"]
                + flags)
            err = float(np.abs(np.load(out) - r).max()) / float(np.abs(r).max())
            failed += not err <= 1e-5
            print("%-10s emitted program, 3 threads: err=%.2e %s" % (cfg["name"], err, "ok" if err <= 1e-5 else "FAIL"))
            if "vocab" in cfg:
                gen = [ff, "generate", model, "--weights", w, "--tokens", " ".join(map(str, files["--input"][0][:40])),
                       "--max-new", "8", "--bos", "1"]
                want = run(gen + ["--engine", "runtime"])
                for engine in ("tcc", "cc"):
                    got = run(gen + ["--engine", engine, "--threads", "3"])
                    ok = got == want
                    failed += not ok
                    print("%-10s %-3s greedy with 3 threads: %s %s" % (cfg["name"], engine, got.strip(),
                                                                       "ok" if ok else "FAIL (runtime: %s)" % want))
        failed += decode_logits(ff, tmp, rng)
        model, w = os.path.join(tmp, "thr_enc", "model.lua"), os.path.join(tmp, "thr_enc", "w.safetensors")
        for extra, piece in ((["--engine", "tcc", "--threads", "9"], "outside 1..8"),
                             (["--engine", "tcc", "--threads", "0"], "outside 1..8"),
                             (["--engine", "runtime", "--threads", "2"], "one thread")):
            p = subprocess.run([ff, "run", model, "--weights", w, "--input", os.path.join(tmp, "thr_enc", "input.npy"),
                                "--output", os.path.join(tmp, "bad.npy")] + extra, capture_output=True, text=True)
            ok = p.returncode == 2 and piece in p.stderr and not os.path.exists(os.path.join(tmp, "bad.npy"))
            failed += not ok  # (2: a flag out of range is a command line that is not well formed)
            print("%s: exit %d: %s %s" % (" ".join(extra), p.returncode, p.stderr.strip(), "ok" if ok else "FAIL"))
        emitted = os.path.join(tmp, "thr_enc", "emit")  # the emitted program says the same bound
        p = subprocess.run([os.path.join(emitted, "thr_enc"), "--weights", os.path.join(emitted, "thr_enc.weights"),
                            "--input", os.path.join(tmp, "thr_enc", "input.npy"), "--output",
                            os.path.join(tmp, "bad.npy"), "--threads", "9"], capture_output=True, text=True)
        ok = p.returncode == 1 and "outside 1..8" in p.stderr and not os.path.exists(os.path.join(tmp, "bad.npy"))
        failed += not ok
        print("emitted program --threads 9: exit %d: %s %s" % (p.returncode, p.stderr.strip(), "ok" if ok else "FAIL"))
    print("threads: %s" % ("FAILED" if failed else "all equal the runtime"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
