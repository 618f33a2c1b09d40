#!/usr/bin/python3
"""What each weight type and int8 compute cost in accuracy (docs/model-description.md "Weight
types", "Compute types"), measured:

1. logits: for the shipped models and the bench shapes (random `init` weights except
   dates, which is trained) `fixformer run --engine runtime` in bf16 and int8 weights
   and in int8 and bf16 compute against f32 on the same inputs: max and mean absolute error,
   and the max over the largest |logit|;
2. greedy decoding of a trained language model: a byte-level GPT-style model
   (python/example_lm.py's LM, d 96, 3 layers, 4 heads) is trained here for
   --steps steps on the repository's text (README.md and the sources), exported
   with python/fixformer_export.py, and decodes --new tokens greedily from
   --prompts prompts in every weight type; the fraction of generated tokens that
   equal f32's at the same step, and the first step where they part; and its mean
   log-likelihood (nats a byte) of held-out windows of the text (the last tenth,
   which training never reads) against f32's;
3. dates (trained): the held-out accuracy per type is tests/dates.py's.

  bench/accuracy.py --fixformer build/fixformer [--steps 400] [--new 256] [--prompts 8] [--out F.json]
This is a measurement, not a test: it prints numbers and exits 0.
"""
import argparse
import glob
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(ROOT, "python"))
import example_lm  # noqa: E402
import fixformer_export  # noqa: E402

# what is measured against f32: a label and its flags
VARIANTS = (("bf16", ["--dtype", "bf16"]), ("int8", ["--dtype", "int8"]), ("int8 compute", ["--compute", "int8"]),
            ("bf16 compute", ["--compute", "bf16"]))
DTYPES = tuple(v[0] for v in VARIANTS)
FLAGS = dict(VARIANTS, f32=[])


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        raise SystemExit("%s: %s" % (" ".join(cmd[:4]), p.stderr.strip()))
    return p.stdout


def logit_errors(ff, tmp):
    """[(model, dtype, max abs, mean abs, max / max|logit|)] over the shipped models."""
    rows = []
    rng = np.random.default_rng(0)
    for lua in sorted(glob.glob(os.path.join(ROOT, "models", "*.lua"))) + \
            [os.path.join(ROOT, "bench", "models", s + ".lua") for s in ("small", "base")]:
        bench = os.path.basename(os.path.dirname(os.path.dirname(os.path.abspath(lua)))) == "bench"
        name = os.path.basename(lua)[:-4] + (" (bench)" if bench else "")
        info = run([ff, "info", lua])  # the resolved description
        vocab = re.search(r"^\s*vocab = (\d+)", info, re.M)
        seq = min(24, int(re.search(r"^\s*max_seq = (\d+)", info, re.M).group(1)))
        text = info
        weights = []
        if not re.search(r"^\s*weights = ", info, re.M):
            weights = ["--weights", os.path.join(tmp, name.replace(" ", "_") + ".safetensors")]
            run([ff, "init", lua, "-o", weights[1]])
        src = os.path.join(tmp, name.replace(" ", "_") + "_in.npy")
        if vocab:
            np.save(src, rng.integers(4, int(vocab.group(1)), size=(2, seq)).astype(np.int32))
        else:  # float inputs [B, T, d_model]
            d = int(re.search(r"^\s*d_model = (\d+)", info, re.M).group(1))
            np.save(src, rng.standard_normal((2, seq, d)).astype(np.float32))
        extra = ["--input", src]
        if "encoder-decoder" in text:
            tgt = os.path.join(tmp, name.replace(" ", "_") + "_tgt.npy")
            np.save(tgt, rng.integers(4, int(vocab.group(1)), size=(2, seq // 2)).astype(np.int32))
            extra += ["--target-input", tgt]
        outs = {}
        for dtype in ("f32",) + DTYPES:
            out = os.path.join(tmp, ("%s_%s.npy" % (name, dtype)).replace(" ", "_"))
            run([ff, "run", lua] + weights + extra + FLAGS[dtype] + ["--output", out])
            outs[dtype] = np.load(out)
        scale = float(np.abs(outs["f32"]).max())
        for dtype in DTYPES:
            e = np.abs(outs[dtype] - outs["f32"])
            rows.append((name, dtype, float(e.max()), float(e.mean()), float(e.max()) / scale))
    return rows


def corpus():
    """The repository's own text as bytes: the README and the C and Lua sources."""
    files = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "runtime", "*.c"))) + \
        sorted(glob.glob(os.path.join(ROOT, "gen", "*.lua")))
    return b"\n".join(open(f, "rb").read() for f in files)


def train_lm(steps, seq, seed=0):
    torch.manual_seed(seed)
    torch.set_num_threads(2)
    data = torch.tensor(list(corpus()), dtype=torch.long)
    model = example_lm.LM(vocab=256, d=96, heads=4, layers=3, max_seq=seq + 1)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    gen = torch.Generator().manual_seed(seed)
    model.train()
    t0, loss = time.time(), float("nan")
    for step in range(steps):
        at = torch.randint(0, len(data) - seq - 1, (8,), generator=gen)
        x = torch.stack([data[i:i + seq] for i in at])
        y = torch.stack([data[i + 1:i + seq + 1] for i in at])
        for g in opt.param_groups:  # cosine decay
            g["lr"] = 3e-3 * 0.5 * (1 + math.cos(math.pi * step / steps))
        loss = torch.nn.functional.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    print("trained the byte-level LM: %d steps of 8 x %d bytes in %.0f s, final loss %.3f nats/byte"
          % (steps, seq, time.time() - t0, float(loss)), flush=True)
    return model, data


def greedy_agreement(ff, tmp, steps, new, prompts):
    model, data = train_lm(steps, new + 32)
    lua = fixformer_export.export(model, os.path.join(tmp, "lm"), "lm", arch="decoder-only")
    gen = torch.Generator().manual_seed(1)
    starts = torch.randint(0, len(data) - 32, (prompts,), generator=gen)
    rows = []
    ids = {}
    for dtype in ("f32",) + DTYPES:
        ids[dtype] = []
        for s in starts:
            prompt = " ".join(str(int(b)) for b in data[s:s + 16])
            out = run([ff, "generate", lua, "--tokens", prompt, "--max-new", str(new), "--engine", "runtime"] +
                      FLAGS[dtype])
            ids[dtype].append([int(t) for t in out.split()])
    nll = likelihood(ff, tmp, lua, data, new + 32)
    for dtype in DTYPES:
        same = total = 0
        first = []
        for a, b in zip(ids["f32"], ids[dtype]):
            n = min(len(a), len(b))
            same += sum(x == y for x, y in zip(a[:n], b[:n]))
            total += max(len(a), len(b))
            part = next((i for i in range(n) if a[i] != b[i]), n)
            first.append(part)
        rows.append((dtype, same / max(total, 1), min(first), float(np.median(first)), total, nll[dtype],
                     nll["f32"]))
    return rows


def likelihood(ff, tmp, lua, data, seq, windows=8):
    """{type: mean log-likelihood of the next byte, nats} over windows of the text's last tenth (the cut
    train_lm never reads: it draws from the whole text, so the windows are of text it may have seen; they
    are the same for every type)."""
    start = len(data) * 9 // 10
    at = np.linspace(start, len(data) - seq - 1, windows).astype(int)
    x = np.stack([data[i:i + seq].numpy() for i in at]).astype(np.int32)
    y = np.stack([data[i + 1:i + seq + 1].numpy() for i in at])
    np.save(os.path.join(tmp, "ll_in.npy"), x)
    out = {}
    for dtype in ("f32",) + DTYPES:
        path = os.path.join(tmp, "ll_out.npy")
        run([ff, "run", lua, "--input", os.path.join(tmp, "ll_in.npy"), "--output", path, "--engine", "runtime"] +
            FLAGS[dtype])
        logits = np.load(path).astype(np.float64)
        logp = logits - logits.max(-1, keepdims=True)
        logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
        out[dtype] = float(np.take_along_axis(logp, y[..., None], -1).mean())
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixformer", required=True)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--new", type=int, default=256)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--out")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        logits = logit_errors(args.fixformer, tmp)
        print("%-18s %-12s %12s %12s %14s" % ("model", "type", "max |err|", "mean |err|", "max/max|logit|"))
        for r in logits:
            print("%-18s %-12s %12.3e %12.3e %14.3e" % r)
        greedy = greedy_agreement(args.fixformer, tmp, args.steps, args.new, args.prompts)
        print("greedy decoding of the trained LM, %d prompts x %d new tokens, against f32:" % (args.prompts, args.new))
        for dtype, frac, first_min, first_median, total, ll, ll32 in greedy:
            print("  %-12s %5.1f %% of %d tokens equal f32's at the same step; they part at step %d at the "
                  "earliest (median %.0f); log-likelihood %.4f nats a byte (f32 %.4f, %+.4f)"
                  % (dtype, 100 * frac, total, first_min, first_median, ll, ll32, ll - ll32))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"logits": logits, "greedy": greedy}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
