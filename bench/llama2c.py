#!/usr/bin/python3
"""fixformer against llama2.c's run.c (float32) and runq.c (int8 Q8_0), the C
decoders users compare with, on the same random checkpoints (issue 13's
targets).  Not part of the product or the tests: it needs a llama2.c checkout
(https://github.com/karpathy/llama2.c; its code is built in a temporary folder,
never copied into this repository).

For each shape (stories15M: dim 288, 6 layers, 6 heads, vocab 32000; and with
--big stories110M: dim 768, 12 layers, 12 heads) it writes one random checkpoint
as llama2.c's legacy .bin (run.c) and version 2 .bin (runq.c, Q8_0, group 64
or what divides dim), imports the legacy file with `fixformer import`, and
measures on one thread, in interleaved rounds (medians printed):
  decode   tokens/s of greedy decoding, --steps tokens (run.c's own "achieved
           tok/s"; fixformer `bench --generate`), per fixformer dtype;
  start    time to the first token of a whole process (1 new token) on a warm
           file cache, and its peak resident memory (wait4's ru_maxrss).

  bench/llama2c.py --llama2c DIR --fixformer build/fixformer [--big] [--rounds 3] [--steps 200] [--dtypes f32,bf16,int8]

A --dtypes entry DTYPE/COMPUTE also sets --compute (int8/int8: int8 weights, the blocks in int8 compute).
"""
import argparse
import os
import re
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
import import_checkpoints as ic  # noqa: E402  (llama2.c's file layouts, as the import tests write them)

SHAPES = {"15M": dict(dim=288, hidden=768, L=6, H=6, V=32000, seq=256),
          "110M": dict(dim=768, hidden=2048, L=12, H=12, V=32000, seq=1024)}
DTYPES = ("f32", "bf16", "int8")


def run_rusage(cmd, env=None):
    """(wall seconds, peak RSS MB, output) of one process.  The peak comes from GNU time (/usr/bin/time -f),
    a small process that forks it: the rusage of a child of this Python would count the parent's pages (exec
    keeps the old address space's high-water mark)."""
    t0 = time.perf_counter()
    p = subprocess.run(["/usr/bin/time", "-f", "peak-rss-kb %M"] + cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if p.returncode:
        raise SystemExit("%s failed: %s" % (" ".join(cmd[:3]), p.stderr[-400:]))
    rss = float(re.findall(r"peak-rss-kb (\d+)", p.stderr)[-1]) / 1024.0
    return wall, rss, p.stdout + p.stderr


def quantize_q80(w, gs):
    """llama2.c export.py's quantize_q80 (the formula, in numpy): groups of gs over the flat tensor."""
    g = w.astype(np.float32).reshape(-1, gs)
    scale = (np.abs(g).max(axis=1) / np.float32(127.0)).astype(np.float32)
    q = np.round(g / np.where(scale > 0, scale, 1)[:, None]).astype(np.int8)
    return q, scale


def write_v2(path, p, w, gs):
    """export.py's version2_export layout: header, fp32 norms, then Q8_0 (int8, then scales) per matrix."""
    L = p["n_layers"]
    with open(path, "wb") as f:
        f.write(struct.pack("<Ii7iBi", 0x616b3432, 2, p["dim"], p["hidden_dim"], L, p["n_heads"], p["n_kv_heads"],
                            p["vocab_size"], p["seq_len"], int(p["shared"]), gs))
        f.write(b"\0" * (256 - f.tell()))
        for part in ("attention_norm", "ffn_norm"):
            for i in range(L):
                f.write(w["layers.%d.%s.weight" % (i, part)].astype("<f4").tobytes())
        f.write(w["norm.weight"].astype("<f4").tobytes())
        mats = [w["tok_embeddings.weight"]]
        for part in ("attention.wq", "attention.wk", "attention.wv", "attention.wo", "feed_forward.w1",
                     "feed_forward.w2", "feed_forward.w3"):
            mats += [w["layers.%d.%s.weight" % (i, part)] for i in range(L)]
        if not p["shared"]:
            mats.append(w["output.weight"])
        for m in mats:
            q, s = quantize_q80(m, gs)
            f.write(q.tobytes())
            f.write(s.astype("<f4").tobytes())


def write_tokenizer(path, vocab):
    """A tokenizer.bin of vocab one-piece tokens (run.c loads one; the ids are what is timed)."""
    with open(path, "wb") as f:
        f.write(struct.pack("<I", 8))
        for i in range(vocab):
            b = ("<%d>" % i).encode()
            f.write(struct.pack("<fI", 0.0, len(b)) + b)


def prepare(tmp, name, s, ff):
    d = os.path.join(tmp, name)
    os.makedirs(d)
    p, w = ic.llama2c_case(seed=1, dim=s["dim"], hidden=s["hidden"], L=s["L"], H=s["H"], KV=s["H"], V=s["V"],
                           seq=s["seq"], shared=True)
    legacy, v2, tok = os.path.join(d, "legacy.bin"), os.path.join(d, "q80.bin"), os.path.join(d, "tokenizer.bin")
    ic.write_llama2c(legacy, p, w, 0)
    gs = 64
    while s["dim"] % gs:
        gs //= 2
    write_v2(v2, p, w, gs)
    write_tokenizer(tok, s["V"])
    out = subprocess.run([ff, "import", legacy, "-o", os.path.join(d, "ff"), "--name", "m" + name.lower()],
                         capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
    weight_bytes = {"f32": 4 * sum(a.size for a in w.values()), "int8": os.path.getsize(v2)}
    return dict(legacy=legacy, v2=v2, tok=tok, lua=out, gs=gs, bytes=weight_bytes)


def measure(args, name, m, env):
    res = {}
    steps = str(args.steps)
    for r in range(args.rounds):
        for prog, bin_ in (("run.c", m["legacy"]), ("runq.c", m["v2"])):
            exe = os.path.join(args.build, "run" if prog == "run.c" else "runq")
            _, _, text = run_rusage([exe, bin_, "-z", m["tok"], "-n", steps, "-t", "0", "-i", ""])
            tps = float(re.search(r"achieved tok/s: ([\d.]+)", text).group(1))
            wall, rss, _ = run_rusage([exe, bin_, "-z", m["tok"], "-n", "2", "-t", "0", "-i", ""])
            res.setdefault(prog, []).append((tps, wall, rss))
        for dt in args.dtypes.split(","):
            types = dt.split("/")  # DTYPE or DTYPE/COMPUTE
            flags = ["--dtype", types[0]] + (["--compute", types[1]] if len(types) > 1 else [])
            _, _, text = run_rusage([args.fixformer, "bench", m["lua"], "--generate", steps, "--iters", "3",
                                     "--engine", "cc"] + flags, env)
            tps = float(re.search(r"([\d.]+) tokens/s", text).group(1))
            cmd = [args.fixformer, "generate", m["lua"], "--tokens", "1", "--max-new", "1", "--engine", "cc"] + flags
            run_rusage(cmd, env)  # warm: the compiled model and the packed weights are cached
            wall, rss, _ = run_rusage(cmd, env)
            res.setdefault("fixformer " + dt, []).append((tps, wall, rss))
        print("%s round %d done" % (name, r + 1), file=sys.stderr, flush=True)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama2c", required=True, help="a llama2.c checkout (run.c, runq.c)")
    ap.add_argument("--fixformer", required=True)
    ap.add_argument("--big", action="store_true", help="also the stories110M shape")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--dtypes", default=",".join(DTYPES))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        args.build = tmp
        for prog in ("run", "runq"):
            subprocess.run(["gcc", "-Ofast", "-march=native", "-o", os.path.join(tmp, prog),
                            os.path.join(args.llama2c, prog + ".c"), "-lm"], check=True)
        env = dict(os.environ, XDG_CACHE_HOME=os.path.join(tmp, "cache"), FIXFORMER_CACHE_MAX_MB="4096")
        print("%-6s %-16s %10s %8s %12s %9s" % ("shape", "decoder", "tok/s", "vs run.c", "first token", "RSS MB"))
        for name in (["15M", "110M"] if args.big else ["15M"]):
            m = prepare(tmp, name, SHAPES[name], args.fixformer)
            res = measure(args, name, m, env)
            base = statistics.median(t for t, _, _ in res["run.c"])
            for who, rows in res.items():
                tps = statistics.median(t for t, _, _ in rows)
                wall = statistics.median(w for _, w, _ in rows)
                rss = statistics.median(r for _, _, r in rows)
                print("%-6s %-16s %10.1f %7.2fx %10.3f s %9.0f" % (name, who, tps, tps / base, wall, rss), flush=True)
            shutil.rmtree(os.path.join(tmp, name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
