#!/usr/bin/python3
"""Sampling in `fixformer generate`, the C API and the emitted driver.

  distribution   runtime/ff_sample.h (through tests/sample_tool.c): 20000
                 draws from fixed logits match, by a chi-square test at a
                 fixed seed, the softmax after Hugging Face's processors
                 written here in numpy (repetition penalty, temperature,
                 top-k, top-p, min-p); filtered ids are never drawn
  same_everywhere  a seed gives the same ids on the runtime, tcc, cc,
                 --threads 1 and 2 and the emitted program (cc), for a
                 decoder-only model (--tokens) and the dates model (--lines)
  temperature_zero --temperature 0 (filters set or not) is greedy, byte for byte
  repeat_penalty  each id of a --temperature 0 --repeat-penalty R run is the
                 argmax of its --logits row after HF's penalty over the ids so
                 far (numpy), and the penalty changes the greedy output
  bad_values     top-p 0 or > 1, a negative temperature, top-k < 0, min-p
                 outside [0, 1), repeat-penalty <= 0, a negative seed: one
                 line and exit 2 (the emitted driver: one line, exit 1)

  sampling.py --fixformer BIN --tool SAMPLE_TOOL
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "lib"))
from configs import write_description  # noqa: E402

DATES = os.path.join(ROOT, "models", "dates.lua")
DECODER = dict(name="dec", arch="decoder-only", d_model=32, heads=4, d_ff=48, layers=2, norm="pre",
               norm_kind="rmsnorm", final_norm=True, activation="swiglu", bias=False, vocab=61, positional="rope",
               scale_embeddings=False, tie_embeddings=False, max_seq=40)


class Failed(Exception):
    pass


def run(cmd, ok=True, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    if ok and p.returncode != 0:
        raise Failed("%s: exit %d: %s" % (" ".join(cmd[:3]), p.returncode, p.stderr.strip()))
    return p


# ---- Hugging Face's processors, from their definitions (transformers/generation/logits_process.py) ----

def hf_probs(logits, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, penalty=1.0, seen=()):
    x = np.array(logits, np.float64)
    if penalty != 1.0 and len(seen):  # RepetitionPenaltyLogitsProcessor: gather, then scatter
        ids = np.array(seen)
        score = x[ids]
        x[ids] = np.where(score < 0, score * penalty, score / penalty)
    x = x / temperature  # TemperatureLogitsWarper
    if top_k > 0:  # TopKLogitsWarper: below the k-th largest
        kth = np.sort(x)[::-1][min(top_k, len(x)) - 1]
        x[x < kth] = -np.inf
    if top_p < 1.0:  # TopPLogitsWarper: ascending order, cumulative mass <= 1 - p removed, the largest kept
        order = np.argsort(x, kind="stable")
        p = np.exp(x[order] - x.max())
        p /= p.sum()
        remove = np.cumsum(p) <= 1 - top_p
        remove[-1] = False
        x[order[remove]] = -np.inf
    if min_p > 0:  # MinPLogitsWarper
        p = np.exp(x - x.max())
        p /= p.sum()
        x[p < min_p * p.max()] = -np.inf
    p = np.exp(x - x.max())
    return p / p.sum()


def chi2_critical(df, z=3.719):  # Wilson-Hilferty, z: the normal quantile of 1 - 1e-4
    return df * (1 - 2 / (9 * df) + z * np.sqrt(2 / (9 * df))) ** 3


def distribution(args):
    rng = np.random.RandomState(7)
    V, draws = 50, 20000
    logits = (rng.standard_normal(V) * 2).astype(np.float32)
    seen = [3, 3, 17, int(np.argmax(logits)), int(np.argmin(logits)), 40]
    cases = [dict(), dict(temperature=0.7, top_k=10), dict(temperature=1.3, top_p=0.8), dict(min_p=0.05),
             dict(temperature=0.9, top_k=20, top_p=0.9, min_p=0.02), dict(penalty=1.5, seen=seen),
             dict(temperature=1.2, top_k=30, top_p=0.7, penalty=2.0, seen=seen)]
    lines = []
    for case in cases:
        o = dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, penalty=1.0, seen=())
        o.update(case)
        stdin = "%d %r %d %r %r %r %d %d %d\n%s\n%s\n" % (
            V, o["temperature"], o["top_k"], o["top_p"], o["min_p"], o["penalty"], 11, draws, len(o["seen"]),
            " ".join(repr(float(v)) for v in logits), " ".join(map(str, o["seen"])))
        p = subprocess.run([args.tool], input=stdin, capture_output=True, text=True, timeout=60)
        if p.returncode:
            raise Failed("sample_tool: %s" % p.stderr.strip())
        counts = np.array([int(c) for c in p.stdout.split()])
        probs = hf_probs(logits, o["temperature"], o["top_k"], o["top_p"], o["min_p"], o["penalty"], o["seen"])
        if (counts[probs == 0] > 0).any():
            raise Failed("%s: drew filtered ids %s" % (case, np.nonzero((probs == 0) & (counts > 0))[0].tolist()))
        expected = probs * draws
        big = expected >= 5  # the small bins merged into one
        obs = np.append(counts[big], counts[~big].sum())
        exp = np.append(expected[big], expected[~big].sum())
        keep = exp > 0
        stat = (((obs - exp) ** 2)[keep] / exp[keep]).sum()
        df = keep.sum() - 1
        if df < 1 or stat > chi2_critical(df):
            raise Failed("%s: chi-square %.1f on %d degrees of freedom (critical %.1f)" %
                         (case, stat, df, chi2_critical(max(df, 1))))
        lines.append("%s: %d ids kept, chi2 %.1f / %.1f" % (case or "T=1", (probs > 0).sum(), stat, chi2_critical(df)))
    return "; ".join(lines)


class Models:
    """The decoder-only model with random weights and both models' emitted programs (cc, threads)."""

    def __init__(self, ff, d):
        self.ff, self.d = ff, d
        self.dec = write_description(DECODER, d, "dec.lua")
        self.dec_w = os.path.join(d, "dec.safetensors")
        run([ff, "init", self.dec, "-o", self.dec_w, "--seed", "3"])
        self.exe = {}
        for name, model, weights in (("dec", self.dec, self.dec_w), ("dates", DATES, None)):
            out = os.path.join(d, name)
            run([ff, "emit", model, "-o", out, "--with-main", "-q"] + (["--weights", weights] if weights else []))
            exe = os.path.join(d, name + "_exe")
            run(["cc", "-O1", "-std=c99", "-DFF_THREADS", "-pthread", "-o", exe, os.path.join(out, name + ".c"),
                 os.path.join(out, name + "_main.c"), "-lm"])
            self.exe[name] = (exe, os.path.join(out, name + ".weights"))

    def generate(self, name, engine, flags, threads=1):
        """stdout of one generation: engine runtime/tcc/cc, or "emitted"."""
        if engine == "emitted":
            exe, weights = self.exe[name]
            cmd = [exe, "--weights", weights] + flags + ["--threads", str(threads)]
        else:
            model, weights = (self.dec, self.dec_w) if name == "dec" else (DATES, None)
            cmd = [self.ff, "generate", model, "-q", "--engine", engine] + flags + (["--weights", weights] if weights else [])
            if engine != "runtime":
                cmd += ["--threads", str(threads)]
        return run(cmd).stdout


def same_everywhere(m):
    dates_txt = os.path.join(m.d, "dates.txt")
    with open(dates_txt, "w") as f:
        f.write("March 5, 1999\n\n5.3.1999\n31 Dec 1900\n")
    runs = [("dec", ["--tokens", "1 2 3, 4 5, 1 2 3", "--max-new", "14"],
             ["--temperature", "1.0", "--top-k", "30", "--top-p", "0.95", "--min-p", "0.01", "--repeat-penalty", "1.1"]),
            ("dates", ["--lines", dates_txt], ["--temperature", "2.5", "--top-p", "0.97"])]
    engines = [("runtime", 1), ("tcc", 1), ("tcc", 2), ("cc", 1), ("cc", 2), ("emitted", 1), ("emitted", 2)]
    for name, inputs, sampling in runs:
        flags = inputs + sampling + ["--seed", "5"]
        outs = {(e, t): m.generate(name, e, flags, t) for e, t in engines}
        first = outs[engines[0]]
        for key, out in outs.items():
            if out != first:
                raise Failed("%s: %s --threads %d printed %r, the runtime %r" % (name, key[0], key[1], out, first))
        greedy = m.generate(name, "tcc", inputs)
        if first == greedy:
            raise Failed("%s: the sampled output equals the greedy one: %r" % (name, first))
        other = m.generate(name, "tcc", flags[:-1] + ["6"])
        if other == first:
            raise Failed("%s: seeds 5 and 6 gave the same ids" % name)
        if name == "dec" and first.split("\n")[0] == first.split("\n")[2]:
            raise Failed("dec: the first and third inputs (the same prompt) drew the same ids: %r" % first)
    return "2 models x %d engine/thread runs identical" % len(engines)


def temperature_zero(m):
    base = ["--tokens", "1 2 3, 7", "--max-new", "12"]
    for engine in ("cc", "emitted"):
        greedy = m.generate("dec", engine, base)
        for extra in (["--temperature", "0"], ["--temperature", "0", "--top-k", "3", "--top-p", "0.5", "--seed", "9"]):
            out = m.generate("dec", engine, base + extra)
            if out != greedy:
                raise Failed("%s %s: %r, greedy %r" % (engine, " ".join(extra), out, greedy))
    return "equal to greedy on cc and the emitted program"


def repeat_penalty(m):
    prompt, R = [1, 2, 3, 1], 1.8
    logits_path = os.path.join(m.d, "pen.npy")
    flags = ["--tokens", " ".join(map(str, prompt)), "--max-new", "20"]
    greedy = [int(t) for t in m.generate("dec", "tcc", flags).split()]
    ids = [int(t) for t in m.generate("dec", "tcc", flags + ["--temperature", "0", "--repeat-penalty", str(R),
                                                               "--logits", logits_path]).split()]
    rows = np.load(logits_path)[0, len(prompt) - 1:]
    for i, got in enumerate(ids):
        want = int(np.argmax(hf_probs(rows[i], 1.0, penalty=R, seen=prompt + ids[:i])))
        if got != want:
            raise Failed("step %d: generated %d, HF's penalty gives %d" % (i, got, want))
    if ids == greedy:
        raise Failed("the penalty changed nothing: %s" % ids)
    emitted = m.generate("dec", "emitted", flags + ["--temperature", "0", "--repeat-penalty", str(R)])
    if [int(t) for t in emitted.split()] != ids:
        raise Failed("the emitted program: %r, generate %s" % (emitted, ids))
    return "%d steps as numpy's; greedy differs" % len(ids)


def bad_values(m):
    bad = [("--top-p", "0"), ("--top-p", "1.5"), ("--temperature", "-1"), ("--top-k", "-1"), ("--min-p", "1"),
           ("--min-p", "-0.1"), ("--repeat-penalty", "0"), ("--repeat-penalty", "-2"), ("--seed", "-1"),
           ("--temperature", "nan"), ("--top-p", "x")]
    for flag, value in bad:
        for engine, code in (("cli", 2), ("emitted", 1)):
            if engine == "cli":
                cmd = [m.ff, "generate", m.dec, "--weights", m.dec_w, "--tokens", "1 2", flag, value]
            else:
                exe, weights = m.exe["dec"]
                cmd = [exe, "--weights", weights, "--tokens", "1 2", flag, value]
            p = run(cmd, ok=False)
            lines = p.stderr.strip().split("\n")
            if p.returncode != code or len(lines) != 1 or flag not in lines[0] or p.stdout:
                raise Failed("%s %s %s: exit %d, stdout %r, stderr %r" % (engine, flag, value, p.returncode,
                                                                          p.stdout, p.stderr))
    return "%d values refused on the CLI (exit 2) and the emitted program (exit 1)" % len(bad)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixformer", required=True)
    ap.add_argument("--tool", required=True)
    args = ap.parse_args()
    failures = 0
    with tempfile.TemporaryDirectory() as d:
        os.environ["XDG_CACHE_HOME"] = os.path.join(d, "cache")
        checks = [("distribution", lambda: distribution(args))]
        try:
            m = Models(args.fixformer, d)
            checks += [("same_everywhere", lambda: same_everywhere(m)), ("temperature_zero", lambda: temperature_zero(m)),
                       ("repeat_penalty", lambda: repeat_penalty(m)), ("bad_values", lambda: bad_values(m))]
        except Failed as e:
            print("FAIL setup: %s" % e)
            failures += 1
        for name, check in checks:
            try:
                print("ok   %s: %s" % (name, check()))
            except Failed as e:
                print("FAIL %s: %s" % (name, e))
                failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
