#!/usr/bin/python3
"""Beam search in `fixformer generate --beam N` against Hugging Face's definition.

The reference is a beam search written here from Hugging Face's
generate(num_beams, length_penalty, early_stopping) (BeamSearchScorer and
BeamHypotheses of transformers/generation/beam_search.py, 4.38+: log-softmax
summed per beam, the 2 N best candidates a step over the N beams, an EOS
ranked below N dropped, a finished hypothesis scored sum / generated_len **
length_penalty with the EOS counted and the prompt not, is_done for True,
False and "never", open beams scored at max_length when nothing is done),
driven by the PyTorch reference of the model (tests/lib/reference.py's
RefModel, in float32) on every beam's whole sequence each step.

  decoder_only   a random decoder-only model (RMSNorm, SwiGLU, RoPE): three
                 prompts, beams 2 to 5, length penalties 1, 0, 0.5, 2 and -0.5,
                 early_stopping false, true and never, an EOS the model does
                 produce (and none); ids equal and --score within 1e-4 of the
                 reference
  encoder_decoder a random encoder-decoder model: the same grid
  dates          the shipped encoder-decoder (models/dates.*, its <bos> and
                 <eos>) on a date and two texts it is unsure of: max-new 8
                 (beams cut short) and 16 (ended by <eos>)
  engines        the runtime, tcc and cc give the same ids and scores
  beam_one       --beam 1 prints exactly what generate prints without it
  bad_input      --beam 0, --beam beyond vocab / 2, --beam 2^40, --beam with
                 --top-k / --temperature 0.7 / --seed, --early-stopping maybe,
                 --length-penalty nan, --score without --beam: one line, exit 2

  beam.py --fixformer BIN
"""
import json
import os
import re
import subprocess
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "lib"))
import cases  # noqa: E402
from configs import write_description  # noqa: E402
from reference import RefModel, read_safetensors  # noqa: E402

sys.path.insert(0, HERE)
from sampling import DATES, DECODER, Failed  # noqa: E402  (the decoder-only model sampling.py decodes)

ENCDEC = dict(name="bencdec", arch="encoder-decoder", d_model=32, heads=4, d_ff=40, encoder_layers=1, decoder_layers=2,
              norm="post", final_norm=True, activation="gelu", vocab=37, positional="learned", max_seq=32,
              tie_embeddings=False, scale_embeddings=False)
GRID = [(2, 1.0, "false"), (3, 0.0, "true"), (5, 2.0, "never"), (3, -0.5, "never"), (2, 2.0, "false"),
        (5, 1.0, "true"), (4, 1.0, "never"), (3, 0.5, "false")]


def run(cmd, ok=True):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if ok and p.returncode != 0:
        raise Failed("%s: exit %d: %s" % (" ".join(cmd[:3]), p.returncode, p.stderr.strip()))
    return p


# ---- Hugging Face's beam search, from its definition ----

class Hypotheses:
    """BeamHypotheses: at most n finished sequences, the worst dropped (sorted (score, index))."""

    def __init__(self, n, length_penalty, early_stopping, max_new):
        self.n, self.lp, self.early, self.max_new = n, length_penalty, early_stopping, max_new
        self.beams, self.worst = [], 1e9

    def add(self, ids, sum_logprobs, generated_len):
        score = sum_logprobs / (generated_len ** self.lp)
        if len(self.beams) < self.n or score > self.worst:
            self.beams.append((score, ids))
            if len(self.beams) > self.n:
                ranked = sorted((s, i) for i, (s, _) in enumerate(self.beams))
                del self.beams[ranked[0][1]]
                self.worst = ranked[1][0]
            else:
                self.worst = min(score, self.worst)

    def is_done(self, best_sum_logprobs, generated_len):
        if len(self.beams) < self.n:
            return False
        if self.early is True:
            return True
        if self.early == "never" and self.lp > 0:  # the longest a sequence can get: max_length - prompt
            return self.worst >= best_sum_logprobs / self.max_new ** self.lp
        return self.worst >= best_sum_logprobs / generated_len ** self.lp


def hf_beam_search(next_logits, n, length_penalty, early_stopping, eos, max_new):
    """next_logits(list of n id lists) -> float32 [n, V] of their last positions.  Returns (ids, score)."""
    seqs = [[] for _ in range(n)]
    sums = torch.full((n,), -1e9, dtype=torch.float32)
    sums[0] = 0  # the copies of the prompt: only the first counts at step 1
    hyps = Hypotheses(n, length_penalty, early_stopping, max_new)
    done = False
    while True:
        logits = next_logits(seqs)
        V = logits.shape[1]
        scores = (torch.log_softmax(logits, dim=-1) + sums[:, None]).view(-1)
        top, at = torch.topk(scores, 2 * n, largest=True, sorted=True)
        generated = len(seqs[0]) + 1
        new = []
        for rank in range(2 * n):
            beam, token, score = int(at[rank]) // V, int(at[rank]) % V, float(top[rank])
            if token == eos:
                if rank < n:
                    hyps.add(seqs[beam] + [eos], score, generated)
            else:
                new.append((seqs[beam] + [token], top[rank]))
            if len(new) == n:
                break
        done = done or hyps.is_done(float(top.max()), generated)
        seqs = [s for s, _ in new]
        sums = torch.stack([v for _, v in new])
        if done or generated == max_new:
            break
    if not done:
        for s, v in zip(seqs, sums):
            hyps.add(s, float(v), len(s))
    score, ids = sorted(hyps.beams, key=lambda x: x[0])[-1]
    return ids, score


def early(flag):
    return {"true": True, "false": False, "never": "never"}[flag]


def lua_config(path):
    """The key = value lines of a description such as models/dates.lua."""
    cfg = {}
    for key, value in re.findall(r"^\s*(\w+)\s*=\s*([^,\n]+?),?\s*(?:--.*)?$", open(path).read(), re.M):
        value = value.strip()
        if value in ("true", "false"):
            cfg[key] = value == "true"
        elif value.startswith('"'):
            cfg[key] = value.strip('"')
        else:
            cfg[key] = float(value) if "." in value or "e" in value else int(value)
    return cfg


class Case:
    """One model: its description, weights, reference and how generate is called."""

    def __init__(self, ff, lua, weights, cfg, bos, eos):
        self.ff, self.lua, self.weights, self.eos, self.bos = ff, lua, weights, eos, bos
        self.ref = RefModel(cfg, read_safetensors(weights))
        self.encdec = cfg["arch"] == "encoder-decoder"

    def next_logits(self, src):
        def f(seqs):
            if self.encdec:
                tgt = np.array([[self.bos] + s for s in seqs], np.int32)
                out = self.ref.forward(np.array([src] * len(seqs), np.int32), [len(src)] * len(seqs), tgt)
            else:
                out = self.ref.forward(np.array([src + s for s in seqs], np.int32), [len(src) + len(seqs[0])] *
                                       len(seqs), None)
            return torch.as_tensor(out[:, -1]).float()
        return f

    def generate(self, sources, flags, engine="runtime"):
        cmd = [self.ff, "generate", self.lua, "--weights", self.weights, "--engine", engine, "-q", "--ids",
               "--tokens", ",".join(" ".join(map(str, s)) for s in sources)] + flags + \
              (["--eos", str(self.eos)] if self.eos >= 0 else [])
        if self.encdec:
            cmd += ["--bos", str(self.bos)]
        return run(cmd).stdout.strip("\n").split("\n")

    def beam(self, sources, n, lp, es, max_new, engine="runtime"):
        """[(ids, score)] of generate --beam --score for each source"""
        lines = self.generate(sources, ["--beam", str(n), "--length-penalty", repr(lp), "--early-stopping", es,
                                        "--max-new", str(max_new), "--score"], engine)
        out = []
        for line in lines:
            score, ids = line.split("\t")[:2]
            out.append(([int(t) for t in ids.split()], float(score)))
        return out


def compare(case, sources, grid, max_news, both=True):
    """Each search equal to the reference's; both: some end at EOS, some are cut at max-new (a grid that tests)."""
    worst, n, ended, cut = 0.0, 0, 0, 0
    for max_new in max_news:
        for beams, lp, es in grid:
            got = case.beam(sources, beams, lp, es, max_new)
            for src, (ids, score) in zip(sources, got):
                want, want_score = hf_beam_search(case.next_logits(src), beams, lp, early(es), case.eos, max_new)
                if ids != want or not abs(score - want_score) <= 1e-4:
                    raise Failed("source %s, beams %d, length_penalty %g, early_stopping %s, max-new %d: got %s "
                                 "(%.6f), Hugging Face's beam search %s (%.6f)" % (src, beams, lp, es, max_new, ids,
                                                                                  score, want, want_score))
                worst, n = max(worst, abs(score - want_score)), n + 1
                ended, cut = ended + (want[-1] == case.eos), cut + (want[-1] != case.eos)
    if both and not (ended and cut):
        raise Failed("the grid tests too little: %d searches end at EOS, %d are cut at max-new" % (ended, cut))
    return "%d searches equal (%d end at EOS), scores within %.1e" % (n, ended, worst)


def decoder_case(ff, d):
    lua = write_description(DECODER, d, "bdec.lua")
    w = os.path.join(d, "bdec.safetensors")
    run([ff, "init", lua, "-o", w, "--seed", "5"])
    prompts = [[3, 14, 15], [9, 2, 6, 5, 35], [27]]
    # an EOS the model produces: the third id of the first prompt's greedy output
    greedy = run([ff, "generate", lua, "--weights", w, "--tokens", "3 14 15", "--max-new", "4", "-q",
                  "--engine", "runtime"]).stdout.split()
    return Case(ff, lua, w, DECODER, -1, int(greedy[2])), prompts


def encdec_case(ff, d):
    lua = write_description(ENCDEC, d, "bencdec.lua")
    w = os.path.join(d, "bencdec.safetensors")
    run([ff, "init", lua, "-o", w, "--seed", "8"])
    sources = [[4, 8, 15, 16, 23], [30, 2], [11, 12, 13, 14, 15, 16, 17]]
    greedy = run([ff, "generate", lua, "--weights", w, "--tokens", "4 8 15 16 23", "--max-new", "4", "-q",
                  "--engine", "runtime", "--bos", "1"]).stdout.split()
    return Case(ff, lua, w, ENCDEC, 1, int(greedy[2])), sources


def dates_case(ff):
    cfg = lua_config(DATES)
    w = os.path.join(os.path.dirname(DATES), cfg.pop("weights"))
    vocab = json.load(open(os.path.join(os.path.dirname(DATES), cfg.pop("vocabulary"))))
    texts = ["march 5, 1999", "tuesday", "12 13 14 15 16"]  # the last two: unsure, scores far from 0
    sources = [[vocab["tokens"].index(ch) for ch in t] for t in texts]
    return Case(ff, DATES, w, cfg, vocab["bos"], vocab["eos"]), sources


def engines(case, sources):
    grid = [(3, 1.0, "false"), (4, 0.5, "never")]
    for beams, lp, es in grid:
        want = case.beam(sources, beams, lp, es, 12)
        for e in ("tcc", "cc"):
            got = case.beam(sources, beams, lp, es, 12, e)
            if [i for i, _ in got] != [i for i, _ in want] or \
                    max(abs(a - b) for (_, a), (_, b) in zip(got, want)) > 1e-5:
                raise Failed("%s beams %d: %s, the runtime %s" % (e, beams, got, want))
    return "runtime, tcc and cc agree on %d searches" % (len(grid) * len(sources))


def emitted(c):
    """The program emit --with-main writes (cc -O0) against generate --engine tcc; its bad input: exit 1."""
    n = 0
    for case, sources, grid in ((c.dec, c.prompts, GRID[:3]), (c.dates, c.sources, GRID[3:6])):
        out = os.path.join(c.tmp, "emit_" + os.path.basename(case.lua)[:-4])
        run([case.ff, "emit", case.lua, "--weights", case.weights, "-o", out, "--with-main", "-q"])
        name = [f for f in os.listdir(out) if f.endswith("_main.c")][0][:-7]
        exe = os.path.join(out, "exe")
        run(["cc", "-O0", "-std=c99", "-o", exe, os.path.join(out, name + ".c"), os.path.join(out, name + "_main.c"),
             "-lm"])
        tokens = ",".join(" ".join(map(str, s)) for s in sources)
        for beams, lp, es in grid:
            flags = ["--tokens", tokens, "--eos", str(case.eos), "--beam", str(beams), "--length-penalty", repr(lp),
                     "--early-stopping", es, "--max-new", "9", "--score"] + (["--bos", str(case.bos)] if case.encdec
                                                                             else [])
            got = run([exe, "--weights", os.path.join(out, name + ".weights")] + flags).stdout.split("\n")
            want = run([case.ff, "generate", case.lua, "--weights", case.weights, "--engine", "tcc", "-q", "--ids"] +
                       flags).stdout.split("\n")
            for g, w in zip(got, want):  # score, ids (generate: and the text)
                g, w = g.split("\t"), w.split("\t")
                if g[:1] != [""] and (g[1] != w[1] or abs(float(g[0]) - float(w[0])) > 1e-5):
                    raise Failed("%s beams %d: the emitted program %r, generate %r" % (name, beams, got, want))
                n += g[:1] != [""]
        p = run([exe, "--weights", os.path.join(out, name + ".weights"), "--tokens", "1 2", "--beam", "2",
                 "--top-p", "0.5"], ok=False)
        if p.returncode != 1 or len(p.stderr.strip().split("\n")) != 1 or p.stdout:
            raise Failed("%s --beam 2 --top-p 0.5: exit %d, %r" % (name, p.returncode, p.stderr))
    return "%d searches as generate's; --beam with --top-p: one line, exit 1" % n


def beam_one(c):
    case, sources = c.dates, c.sources
    for e in ("runtime", "tcc"):
        a = case.generate(sources, ["--beam", "1"], e)
        b = case.generate(sources, [], e)
        if a != b:
            raise Failed("%s: --beam 1 %s, without %s" % (e, a, b))
    return "--beam 1 prints greedy's lines"


def bad_input(c):
    case = c.dates
    bad = [["--beam", "0"], ["--beam", "21"], ["--beam", str(2 ** 40)], ["--beam", "2", "--top-k", "5"],
           ["--beam", "2", "--temperature", "0.7"], ["--beam", "2", "--seed", "3"],
           ["--beam", "2", "--early-stopping", "maybe"], ["--beam", "2", "--length-penalty", "nan"],
           ["--score"], ["--length-penalty", "2"], ["--beam", "x"]]
    for flags in bad:
        p = run([case.ff, "generate", case.lua, "--tokens", "5 6", "--engine", "runtime"] + flags, ok=False)
        lines = p.stderr.strip().split("\n")
        if p.returncode != 2 or len(lines) != 1 or not lines[0] or p.stdout:
            raise Failed("%s: exit %d, stdout %r, stderr %r" % (" ".join(flags), p.returncode, p.stdout, p.stderr))
    return "%d refused with one line, exit 2" % len(bad)


class Context:
    def __init__(self, ff, tmp):
        os.environ["XDG_CACHE_HOME"] = os.path.join(tmp, "cache")
        self.tmp = tmp
        torch.set_num_threads(1)
        self.dec, self.prompts = decoder_case(ff, tmp)
        self.encdec, self.srcs = encdec_case(ff, tmp)
        self.dates, self.sources = dates_case(ff)


def decoder_only(c):
    """and without an EOS: every search runs to max-new"""
    no_eos = Case(c.dec.ff, c.dec.lua, c.dec.weights, DECODER, -1, -1)
    return compare(c.dec, c.prompts, GRID, [10]) + "; no EOS: " + compare(no_eos, c.prompts, GRID[:3], [6], False)


def encoder_decoder(c):
    return compare(c.encdec, c.srcs, GRID, [9])


def dates(c):
    return compare(c.dates, c.sources, GRID[:4], [8, 16])


def engines_agree(c):
    return engines(c.dec, c.prompts) + "; " + engines(c.encdec, c.srcs)


if __name__ == "__main__":
    sys.exit(cases.main("beam", __doc__, [decoder_only, encoder_decoder, dates, engines_agree, emitted, beam_one,
                                          bad_input], Context))
