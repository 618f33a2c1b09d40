#!/usr/bin/python3
"""Step-by-step decoding with the key/value cache, for every engine.

For seeded random decoder-only and encoder-decoder token models (every norm
placement and kind, activation and positional kind; `fixformer init`
weights), `fixformer generate --tokens ... --logits L.npy` decodes greedily
with the cache, and

  incremental  the logits of every position it fed to the decoder equal a
               full recomputation (`fixformer run --engine runtime` on the
               whole sequence) within 1e-5, scaled max-abs;
  greedy       the generated ids equal a PyTorch greedy loop that
               recomputes the whole sequence at every step (reference.RefModel
               on the same weights);
  limits       generating past max_seq is a clear error.

Two LLaMA-shaped grouped-query models (kv_heads 1 and heads/3) follow the random ones.

  generation.py --fixformer BIN [--engines runtime,tcc,cc] [--configs 12] [--seed 3]
"""
import argparse
import os
import random
import subprocess
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "lib"))
from configs import coverage, random_config, write_description  # noqa: E402
from reference import RefModel, read_safetensors  # noqa: E402


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError("%s: exit %d: %s" % (" ".join(cmd[:3]), p.returncode, p.stderr.strip()))
    return p.stdout


def torch_greedy(cfg, weights, src, prompt, max_new):
    """Greedy decoding by full recomputation: argmax of the last row, appended."""
    model = RefModel(cfg, weights)
    seq = list(prompt)
    for _ in range(max_new):
        if cfg["arch"] == "encoder-decoder":
            logits = model.forward(np.array([src], np.int32), [len(src)], np.array([seq], np.int32))
        else:
            logits = model.forward(np.array([seq], np.int32), [len(seq)], None)
        seq.append(int(torch.as_tensor(logits[0, -1]).argmax()))
    return seq[len(prompt):]


def configs(n, seed):
    rng = random.Random(seed)
    out, i = [], 0
    while len(out) < n:
        cfg = random_config(rng, "gen%02d" % len(out), force=i)
        i += 1
        if cfg["arch"] == "encoder":
            continue
        cfg.setdefault("vocab", rng.choice([7, 23, 40]))
        cfg.pop("lm_head", None)  # greedy decoding needs the output head (its bias may stay)
        out.append(cfg)
    # and two LLaMA-shaped grouped-query models: multi-query with Meta's RoPE pairing, 6 heads over 2 with HF's
    llama = dict(arch="decoder-only", d_ff=40, layers=2, norm="pre", norm_kind="rmsnorm", final_norm=True, eps=1e-6,
                 activation="swiglu", bias=False, vocab=61, positional="rope", scale_embeddings=False,
                 tie_embeddings=False, max_seq=24)
    out.append(dict(llama, name="gen_mqa", d_model=32, heads=4, kv_heads=1, rope_pairing="interleaved"))
    out.append(dict(llama, name="gen_gqa", d_model=48, heads=6, kv_heads=2))
    return rng, out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixformer", required=True)
    ap.add_argument("--engines", default="runtime,tcc,cc")
    ap.add_argument("--configs", type=int, default=12)
    ap.add_argument("--seed", type=int, default=3)
    args = ap.parse_args()
    ff, engines = args.fixformer, args.engines.split(",")
    rng, cfgs = configs(args.configs, args.seed)
    failed, worst = 0, 0.0
    seen = set()
    with tempfile.TemporaryDirectory() as tmp:
        for cfg in cfgs:
            d = os.path.join(tmp, cfg["name"])
            os.mkdir(d)
            model = write_description(cfg, d)
            w = os.path.join(d, "w.safetensors")
            run([ff, "init", model, "-o", w, "--seed", str(rng.randint(0, 999))])
            V, encdec = cfg["vocab"], cfg["arch"] == "encoder-decoder"
            src = [rng.randrange(V) for _ in range(rng.randint(1, min(7, cfg["max_seq"])))]
            prompt = [rng.randrange(V)] if encdec else src[:]  # encoder-decoder: a BOS id
            max_new = rng.randint(1, min(6, cfg["max_seq"] - len(prompt)))
            if cfg["name"] in ("gen_mqa", "gen_gqa"):  # the grouped-query models: a longer greedy run
                max_new = 14
            expected = torch_greedy(cfg, read_safetensors(w), src, prompt, max_new)
            for e in engines:
                logits = os.path.join(d, "logits_%s.npy" % e)
                cmd = [ff, "generate", model, "--weights", w, "--tokens", " ".join(map(str, src)),
                       "--max-new", str(max_new), "--engine", e, "--logits", logits]
                if encdec:
                    cmd += ["--bos", str(prompt[0])]
                try:
                    got = [int(x) for x in run(cmd).split()]
                    fed = prompt + got[:-1]  # every position the decoder saw
                    full = os.path.join(d, "full_%s.npy" % e)
                    rcmd = [ff, "run", model, "--weights", w, "--output", full, "--engine", "runtime"]
                    if encdec:
                        rcmd += ["--tokens", " ".join(map(str, src)), "--target-tokens", " ".join(map(str, fed))]
                    else:
                        rcmd += ["--tokens", " ".join(map(str, fed))]
                    run(rcmd)
                    a, b = np.load(logits), np.load(full)
                    err = float(np.abs(a - b).max()) / max(float(np.abs(b).max()), 1e-30) if a.shape == b.shape \
                        else float("inf")
                    problem = None if err <= 1e-5 else "incremental logits differ from recomputation: %.2e" % err
                    if got != expected:
                        problem = "ids %s, PyTorch greedy %s" % (got, expected)
                except RuntimeError as ex:
                    err, problem = float("inf"), str(ex)
                worst = max(worst, err)
                failed += problem is not None
                print("%s %-15s %-7s new=%d err=%.2e %s" % (cfg["name"], cfg["arch"], e, max_new, err,
                                                            "ok" if not problem else "FAIL: " + problem), flush=True)
            seen.update(coverage(cfg))
        # past max_seq: a clear error, for every engine
        cfg = cfgs[0]
        model = os.path.join(tmp, cfg["name"], "model.lua")
        w = os.path.join(tmp, cfg["name"], "w.safetensors")
        for e in engines:
            p = subprocess.run([ff, "generate", model, "--weights", w, "--tokens", "1", "--bos", "0",
                                "--max-new", str(cfg["max_seq"]), "--engine", e], capture_output=True, text=True)
            ok = p.returncode == 1 and "max_seq" in p.stderr and not p.stdout
            failed += not ok
            print("past max_seq (%s): exit %d: %s %s" % (e, p.returncode, p.stderr.strip(), "ok" if ok else "FAIL"))
    needed = {"decoder-only", "encoder-decoder", "post", "pre", "layernorm", "rmsnorm", "relu", "gelu", "gelu_tanh",
              "swiglu", "none", "sinusoidal", "learned", "rope", "grouped-query", "interleaved"}
    if needed - seen:
        print("coverage: no config had %s" % ", ".join(sorted(needed - seen)))
        failed += 1
    print("%d configs x %d engines, %d failed, worst incremental error %.2e" % (len(cfgs), len(engines), failed,
                                                                              worst))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
