#!/usr/bin/python3
"""`fixformer train` and the library behind it (include/fixformer_train.h)
against PyTorch 1.13's optimizer and schedulers, as a user would write them.

  schedules   per-step learning rates of 1000 steps (noam, cosine with and
              without warm-up, past its horizon, constant) equal torch's
              LambdaLR / SequentialLR(LinearLR, CosineAnnealingLR) /
              CosineAnnealingLR to the last bit.
  optimizer   the trainer's optimizer alone (train_check: an engine handing
              it given gradients): 10 steps of clip_grad_norm_, AdamW with
              its no-decay groups (biases, norms, embeddings; --no-decay
              none; bias only) and each schedule, against torch.optim.AdamW
              fed the same gradients: weights within 1e-6 scaled error.
  e2e         `fixformer train` for 10 steps (each schedule, clipping, weight
              decay, label smoothing, micro-batches) on a tiny
              encoder-decoder and a decoder-only model against RefModel's
              training forward + torch.optim.AdamW + the torch scheduler on
              the same (whole-file) batch: weights within 1e-5.
  data        pairs: the first step's loss equals PyTorch's on every pair
              alone (padding and masks change nothing); text lines likewise;
              token streams as .u16, .u32 and llm.c .bin train to the same
              bytes, their loss PyTorch's on the windows; the description's
              train block sets defaults, flags override them.
  order       shuffling deterministic from the seed (each epoch a
              permutation of the training samples, another seed another
              order), the held-out split disjoint from training.
  resume      10 steps + resume + 10 steps = 20 steps, checkpoint and weights
              byte for byte (dropout, held-out evaluation, cosine, 2 threads,
              micro-batches; the log appended); SIGTERM mid-run writes a
              checkpoint that resumes to the same bytes, and so does the last
              --save-every one of a run killed by SIGKILL (its JSON-lines log
              parses, the plot after the resume has every step).
  errors      every bad input is one line on stderr, a non-zero exit, and
              the folder exactly as before (over-long line, empty file, ids
              out of range, no TAB, another model's checkpoint, a truncated
              one, a missing one, ...).
  memory      info --train: the bytes it prints follow the parameter count
              and the recompute scheme (activations not growing with B).

  train.py --fixformer FF --tool TRAIN_CHECK [--only PART] [--keep DIR]
"""
import argparse
import hashlib
import json
import math
import os
import random
import re
import signal
import struct
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "lib"))
from configs import write_description  # noqa: E402
from reference import RefModel, read_safetensors, write_safetensors  # noqa: E402

torch.set_num_threads(1)
warnings.filterwarnings("ignore", category=UserWarning)  # SequentialLR's scheduler.step(0) deprecation note
SPECIALS = ["<pad>", "<bos>", "<eos>", "<unk>"]
CHARS = " abcdefghijklmnopqrstuvwxyz"
TOKENS = SPECIALS + list(CHARS)
PAD, BOS, EOS = 0, 1, 2
V = len(TOKENS)


def ids(text):
    return [TOKENS.index(c) for c in text]


def scaled_error(a, b, floor):
    return float(np.abs(a - b).max()) / max(float(np.abs(b).max()), floor)


def worst_error(got, want, skip=None):
    """max over tensors of max|a - b| / max|b|, max|b| at least 1e-3 of the model's largest weight; skip(name) -> a
    slice of rows left out of the comparison (or None)."""
    assert sorted(got) == sorted(want), sorted(set(got) ^ set(want))
    floor = 1e-3 * max(float(np.abs(w).max()) for w in want.values())
    out = []
    for k in want:
        a, b = got[k], want[k]
        rows = skip(k) if skip else None
        if rows is not None:
            keep = np.ones(len(b), bool)
            keep[rows] = False
            a, b = a[keep], b[keep]
        out.append((scaled_error(a, b, floor), k))
    return max(out)


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class Env:
    """A folder with a character vocabulary, pair and text files and models."""

    def __init__(self, ff, tool, root):
        self.ff, self.tool, self.root = ff, tool, root
        with open(os.path.join(root, "vocab.json"), "w") as f:
            json.dump({"tokens": TOKENS, "pad": PAD, "bos": BOS, "eos": EOS, "unk": 3}, f)
        rng = random.Random(5)
        words = ["".join(rng.choice(CHARS[1:]) for _ in range(rng.randint(1, 7))) for _ in range(24)]
        self.pairs = [(w, w[::-1] + " " + w[:2]) for w in words]  # lengths 1..7 and 3..10: padding everywhere
        self.pairs_path = self.write("pairs.tsv", "".join("%s\t%s\n" % p for p in self.pairs))
        self.lines = [" ".join(words[i:i + rng.randint(1, 3)]) for i in range(0, 24, 2)]
        self.text_path = self.write("lines.txt", "".join(l + "\n" for l in self.lines))

    def path(self, name):
        return os.path.join(self.root, name)

    def write(self, name, text, mode="w"):
        with open(self.path(name), mode) as f:
            f.write(text)
        return self.path(name)

    def model(self, name, **kw):
        cfg = {"name": name, "arch": "encoder-decoder", "d_model": 16, "heads": 2, "d_ff": 24, "encoder_layers": 1,
               "decoder_layers": 1, "vocab": V, "max_seq": 12, "final_norm": True, "positional": "sinusoidal",
               "vocabulary": "vocab.json"}
        if kw.get("arch") == "decoder-only":
            del cfg["encoder_layers"], cfg["decoder_layers"]
            cfg["layers"] = 2
        cfg.update(kw)
        return cfg, write_description(cfg, self.root, name + ".lua")

    def train(self, desc, *flags, check=True, **kw):
        p = subprocess.run([self.ff, "train", desc] + [str(f) for f in flags], capture_output=True, text=True, **kw)
        if check and p.returncode:
            raise AssertionError("fixformer train %s: exit %d: %s" % (" ".join(map(str, flags)), p.returncode,
                                                                      p.stderr))
        return p

    def check(self, *argv, environ=None):
        p = subprocess.run([self.tool] + [str(a) for a in argv], capture_output=True, text=True,
                           env=dict(os.environ, **(environ or {})))
        if p.returncode:
            raise AssertionError("train_check %s: %s" % (" ".join(map(str, argv)), p.stderr))
        return p.stdout


def read_log(path):
    with open(path) as f:
        head = f.readline().strip().split(",")
        return [dict(zip(head, line.strip().split(","))) for line in f]


# ---- the torch side, as a user writes it --------------------------------------------------

def no_decay(name, which=("bias", "norm", "embedding")):
    module = name.split(".")[-2] if "." in name else name
    norm = "norm" in module or name.endswith(".gamma")  # LayerScale's gammas: fixformer's norm group
    return (("bias" in which and name.endswith("bias")) or ("norm" in which and norm) or
            ("embedding" in which and name in ("embed.weight", "pos_embed.weight", "token_type_embed.weight")))


def torch_optimizer(params, o):
    """AdamW over two groups (no decay for the --no-decay kinds) and the scheduler of o."""
    which = () if o.get("no_decay", "") == "none" else tuple(o.get("no_decay", "bias,norm,embedding").split(","))
    decay = [p for n, p in params.items() if not no_decay(n, which)]
    rest = [p for n, p in params.items() if no_decay(n, which)]
    betas = tuple(float(b) for b in o.get("betas", "0.9,0.999").split(","))
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": float(o.get("weight_decay", 0.01))},
                             {"params": rest, "weight_decay": 0.0}], lr=float(o.get("lr", 1e-3)), betas=betas,
                            eps=float(o.get("eps", 1e-8)))
    return opt, torch_scheduler(opt, o)


def torch_scheduler(opt, o, d_model=16):
    from torch.optim.lr_scheduler import CosineAnnealingLR, LambdaLR, LinearLR, SequentialLR
    kind, w = o.get("schedule", "constant"), int(o.get("warmup", 0))
    if kind == "noam":
        d = int(o.get("d_model", d_model))
        return LambdaLR(opt, lambda step: d ** -0.5 * min((step + 1) ** -0.5, (step + 1) * w ** -1.5))
    if kind == "cosine":
        total = int(o.get("decay_steps", 0)) or int(o["steps"])
        eta_min = float(o.get("min_lr", 0.0))
        if w == 0:
            return CosineAnnealingLR(opt, T_max=total, eta_min=eta_min)
        return SequentialLR(opt, [LinearLR(opt, start_factor=1 / w, total_iters=w),
                                  CosineAnnealingLR(opt, T_max=total - w, eta_min=eta_min)], milestones=[w])
    return None


def flags_of(o):
    out = []
    for k, v in o.items():
        if k != "d_model":
            out += ["--" + k.replace("_", "-"), str(v)]
    return out


# ---- schedules ------------------------------------------------------------------------------

def check_schedules(env):
    cases = [
        {"schedule": "noam", "lr": 1.0, "warmup": 4000, "d_model": 512, "steps": 1000},
        {"schedule": "noam", "lr": 2.0, "warmup": 100, "d_model": 64, "steps": 1000},
        {"schedule": "cosine", "lr": 1e-3, "warmup": 100, "min_lr": 1e-5, "steps": 1000},
        {"schedule": "cosine", "lr": 3e-4, "warmup": 0, "steps": 1000},
        {"schedule": "cosine", "lr": 2e-3, "warmup": 37, "decay_steps": 400, "min_lr": 1e-4, "steps": 1000},
        {"schedule": "constant", "lr": 5e-4, "steps": 1000},
    ]
    for o in cases:
        got = [float(x) for x in env.check("schedule", o.get("d_model", 16), 1000, *flags_of(o)).split()]
        p = torch.nn.Parameter(torch.zeros(1))
        opt = torch.optim.AdamW([p], lr=o["lr"])
        sched = torch_scheduler(opt, o)
        want = []
        for _ in range(1000):
            want.append(opt.param_groups[0]["lr"])
            opt.step()
            if sched:
                sched.step()
        # ("%.17g" reads back as the same double: equal means to the last bit)
        assert len(got) == 1000 and got == want, (o, [(i, a, b) for i, (a, b) in enumerate(zip(got, want))
                                                      if a != b][:3])
    print("  schedules: %d x 1000 steps equal torch's schedulers to the last bit" % len(cases))


# ---- the optimizer alone ----------------------------------------------------------------------

def check_optimizer(env):
    cfg, desc = env.model("opt_model", tie_embeddings=False, head_bias=True, positional="learned")
    cases = [
        {"schedule": "constant", "lr": 1e-2, "weight_decay": 0.1, "clip": 0.5},
        {"schedule": "noam", "lr": 2.0, "warmup": 4, "weight_decay": 0.05, "no_decay": "none", "betas": "0.9,0.98",
         "eps": 1e-9},
        {"schedule": "cosine", "lr": 3e-3, "warmup": 3, "min_lr": 1e-4, "weight_decay": 0.2, "no_decay": "bias",
         "clip": 2.0},
    ]
    worst = worst_norm = 0.0
    for n, o in enumerate(cases):
        o = dict(o, steps=10, batch=4)
        d = env.path("optimizer%d" % n)
        os.makedirs(d)
        rng = np.random.RandomState(n)
        from reference import weight_names
        names = weight_names(cfg)
        w0 = {k: (rng.standard_normal(s) * 0.5).astype(np.float32) for k, s in names}
        write_safetensors(os.path.join(d, "init.safetensors"), w0)
        grads = []
        for k in range(10):  # magnitudes from 1e-3 to 1 across tensors and steps: clipping on some steps only
            g = {name: (rng.standard_normal(s) * 10.0 ** rng.uniform(-3, 0)).astype(np.float32) for name, s in names}
            write_safetensors(os.path.join(d, "grad_%d.safetensors" % k), g)
            grads.append(g)
        env.check("optimizer", desc, env.pairs_path, d, *flags_of(o))
        got = read_safetensors(os.path.join(d, "out.safetensors"))
        norms = [float(x) for x in open(os.path.join(d, "norms.txt")).read().split()]
        # the vector AdamW and sums of squares (x86-64 with AVX) against the scalar loops: the same bits
        outs = {}
        for isa in ("generic", None):
            env.check("optimizer", desc, env.pairs_path, d, *flags_of(o), environ={"FIXFORMER_ISA": isa} if isa else {})
            with open(os.path.join(d, "out.safetensors"), "rb") as f, open(os.path.join(d, "norms.txt"), "rb") as g:
                outs[isa] = (f.read(), g.read())
        assert outs["generic"] == outs[None], "case %d: the scalar and vector optimizer steps differ" % n
        params = {k: torch.nn.Parameter(torch.from_numpy(v.copy())) for k, v in w0.items()}
        opt, sched = torch_optimizer(params, dict(o, d_model=16))
        for k in range(10):
            for name, p in params.items():
                p.grad = torch.from_numpy(grads[k][name].copy())
            total = float(torch.nn.utils.clip_grad_norm_(list(params.values()), float(o.get("clip", 0)))) if \
                o.get("clip") else float(torch.norm(torch.stack([torch.norm(p.grad) for p in params.values()])))
            worst_norm = max(worst_norm, abs(norms[k] - total) / total)
            opt.step()
            if sched:
                sched.step()
        err, where = worst_error(got, {k: v.detach().numpy() for k, v in params.items()})
        assert err <= 1e-6, "case %d: %s differs from torch.optim.AdamW by %.2e" % (n, where, err)
        worst = max(worst, err)
    assert worst_norm <= 1e-6, worst_norm
    print("  optimizer: 3 cases x 10 steps equal torch.optim.AdamW on the same gradients (worst %.1e; "
          "gradient norms %.1e)" % (worst, worst_norm))


# ---- end to end -------------------------------------------------------------------------------

def pair_batch(pairs):
    """The whole file as one batch, as the trainer pads it: src, lengths, tgt = BOS + t, labels = t + EOS."""
    S = max(len(s) for s, _ in pairs)
    T = max(len(t) for _, t in pairs) + 1
    src = np.full((len(pairs), S), PAD, np.int64)
    tgt = np.full((len(pairs), T), PAD, np.int64)
    labels = np.full((len(pairs), T), -100, np.int64)
    for i, (s, t) in enumerate(pairs):
        src[i, :len(s)] = ids(s)
        tgt[i, :len(t) + 1] = [BOS] + ids(t)
        labels[i, :len(t) + 1] = ids(t) + [EOS]
    return src, np.array([len(s) for s, _ in pairs]), tgt, labels


def line_batch(lines):
    """decoder-only text lines: input ids, labels ids[1:] + EOS (no BOS: the vocabulary's template has none)."""
    seqs = [ids(l) + [EOS] for l in lines]
    S = max(len(q) - 1 for q in seqs)
    src = np.full((len(seqs), S), PAD, np.int64)
    labels = np.full((len(seqs), S), -100, np.int64)
    for i, q in enumerate(seqs):
        src[i, :len(q) - 1] = q[:-1]
        labels[i, :len(q) - 1] = q[1:]
    return src, np.array([len(q) - 1 for q in seqs]), None, labels


def torch_train(cfg, w0, batch, o, steps):
    params = {k: torch.nn.Parameter(torch.from_numpy(v.copy())) for k, v in w0.items()}
    model = RefModel(cfg, {})
    model.w = params
    opt, sched = torch_optimizer(params, dict(o, d_model=cfg["d_model"]))
    src, lengths, tgt, labels = batch
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        logits = model.outputs(torch.from_numpy(src), lengths, None if tgt is None else torch.from_numpy(tgt))
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), torch.from_numpy(labels).reshape(-1),
                               ignore_index=-100, label_smoothing=float(o.get("label_smoothing", 0.0)))
        loss.backward()
        losses.append(float(loss))
        if o.get("clip"):
            torch.nn.utils.clip_grad_norm_(list(params.values()), float(o["clip"]))
        opt.step()
        if sched:
            sched.step()
    return {k: v.detach().numpy() for k, v in params.items()}, losses


def check_e2e(env):
    enc_cfg, enc = env.model("e2e_encdec", bias=False)
    enc_cfg2, enc2 = env.model("e2e_encdec_pre", norm="pre", positional="learned", tie_embeddings=False,
                               layer_scale=True)  # LayerScale: folded into the linears (runtime/fold.c)
    dec_cfg, dec = env.model("e2e_decoder", arch="decoder-only", bias=False, norm="pre", positional="learned",
                             max_seq=24)
    cases = [
        (enc_cfg, enc, env.pairs_path, pair_batch(env.pairs),
         {"schedule": "noam", "lr": 0.05, "warmup": 4, "weight_decay": 0.1, "clip": 1.0}),
        (enc_cfg2, enc2, env.pairs_path, pair_batch(env.pairs),
         {"schedule": "cosine", "lr": 3e-3, "warmup": 3, "min_lr": 1e-4, "weight_decay": 0.1, "label_smoothing": 0.1,
          "micro_batch": 5}),
        (dec_cfg, dec, env.text_path, line_batch(env.lines),
         {"schedule": "constant", "lr": 2e-3, "weight_decay": 0.3, "no_decay": "none", "clip": 0.3}),
    ]
    worst = 0.0
    for n, (cfg, desc, data, batch, o) in enumerate(cases):
        # --batch = every sample: each step sees the whole file; --init torch: start from `fixformer init`'s weights
        o = dict(o, steps=10, batch=len(batch[0]), seed=n, init="torch")
        out = env.path("e2e%d.safetensors" % n)
        env.train(desc, "--data", data, "-o", out, "-q", "--log", env.path("e2e%d.csv" % n), *flags_of(o))
        init = env.path("e2e_init%d.safetensors" % n)
        subprocess.run([env.ff, "init", desc, "-o", init, "--seed", str(n)], check=True, capture_output=True)
        w0 = read_safetensors(init)
        want, losses = torch_train(cfg, w0, batch, o, 10)
        got = read_safetensors(out)
        # the key rows of a self- or cross-attention's in_proj_bias have a gradient that is 0 but for rounding
        # (softmax does not change when every score of a row moves alike): both sides' rounding noise, which
        # Adam's normalisation turns into steps of about lr, is compared only to that bound
        d = cfg["d_model"]
        k_rows = lambda name: slice(d, 2 * d) if name.endswith("in_proj_bias") else None  # noqa: E731
        err, where = worst_error(got, want, k_rows)
        for name in want:
            if name.endswith("in_proj_bias"):
                noise = float(np.abs(got[name][d:2 * d] - want[name][d:2 * d]).max())
                assert noise <= 2 * 10 * float(o["lr"]), (name, noise)
        logged = [float(r["loss"]) for r in read_log(env.path("e2e%d.csv" % n))]
        lerr = max(abs(a - b) / b for a, b in zip(logged, losses))
        assert err <= 1e-5 and lerr <= 1e-5, "%s: %s differs from PyTorch by %.2e after 10 steps (losses %.1e)" % (
            cfg["name"], where, err, lerr)
        worst = max(worst, err)
    print("  e2e: 3 models x 10 steps of fixformer train equal RefModel + torch.optim.AdamW (worst %.1e)" % worst)
    check_eval(env, enc_cfg2, enc2)


def check_eval(env, cfg, desc):
    """The held-out loss the trainer logs (of a LayerScale model: evaluated with the gammas folded) equals
    RefModel's on the weights it wrote, on the samples `train_check order` says it held out."""
    held, out, log = 6, env.path("eval.safetensors"), env.path("eval.csv")
    env.train(desc, "--data", env.pairs_path, "-o", out, "-q", "--log", log, "--steps", 4, "--batch", 8, "--holdout",
              held, "--eval-every", 4, "--seed", 3, "--lr", 3e-3, "--init", "torch")
    idx = [int(x) for x in env.check("order", desc, env.pairs_path, 0, "--holdout", held, "--seed", 3).split()]
    src, lengths, tgt, labels = pair_batch([env.pairs[i] for i in idx])
    model = RefModel(cfg, read_safetensors(out))
    with torch.no_grad():
        logits = model.outputs(torch.from_numpy(src), lengths, torch.from_numpy(tgt))
        want = float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), torch.from_numpy(labels).reshape(-1),
                                     ignore_index=-100))
    got = float(read_log(log)[-1]["valid_loss"])
    assert abs(got - want) <= 1e-5 * want, "held-out loss %.7g, RefModel's %.7g" % (got, want)
    print("  eval: the held-out loss of a LayerScale model equals RefModel's (%.6g)" % got)


# ---- data ---------------------------------------------------------------------------------------

def first_loss(env, desc, data, *flags):
    log = env.path("first.csv")
    env.train(desc, "--data", data, "-o", env.path("first.safetensors"), "--steps", 1, "--log", log, "-q", *flags)
    return float(read_log(log)[0]["loss"])


def check_data(env):
    cfg, desc = env.model("data_encdec", positional="learned")
    init = env.path("data_init.safetensors")
    subprocess.run([env.ff, "init", desc, "-o", init, "--seed", "3"], check=True, capture_output=True)
    w = read_safetensors(init)
    ref = RefModel(cfg, w)
    # every pair alone, in float64: no padding at all
    total, count = 0.0, 0
    for s, t in env.pairs:
        loss, _ = ref.loss_and_grads(np.array([ids(s)]), np.array([len(s)]), np.array([ids(t) + [EOS]]),
                                     np.array([[BOS] + ids(t)]))
        total, count = total + loss, count + len(t) + 1
    got = first_loss(env, desc, env.pairs_path, "--weights", init, "--batch", len(env.pairs))
    assert abs(got - total / count) <= 1e-5 * abs(total / count), ("pairs", got, total / count)
    # decoder-only lines, each alone
    dcfg, ddesc = env.model("data_decoder", arch="decoder-only", max_seq=24)
    dinit = env.path("data_dinit.safetensors")
    subprocess.run([env.ff, "init", ddesc, "-o", dinit, "--seed", "4"], check=True, capture_output=True)
    dref = RefModel(dcfg, read_safetensors(dinit))
    total, count = 0.0, 0
    for line in env.lines:
        q = ids(line) + [EOS]
        loss, _ = dref.loss_and_grads(np.array([q[:-1]]), np.array([len(q) - 1]), np.array([q[1:]]))
        total, count = total + loss, count + len(q) - 1
    got = first_loss(env, ddesc, env.text_path, "--weights", dinit, "--batch", len(env.lines))
    assert abs(got - total / count) <= 1e-5 * abs(total / count), ("lines", got, total / count)
    # one token stream in three files: the same training to the byte, the loss PyTorch's on its windows
    stream = np.random.RandomState(9).randint(0, V, size=5 * 9 + 4)  # 5 windows of seq + 1 = 9, 4 ids left over
    u16 = env.path("tokens.u16")
    stream.astype("<u2").tofile(u16)
    stream.astype("<u4").tofile(env.path("tokens.u32"))
    header = np.zeros(256, "<i4")
    header[:3] = [20240520, 1, len(stream)]
    with open(env.path("tokens.bin"), "wb") as f:
        f.write(header.tobytes() + stream.astype("<u2").tobytes())
    outs = []
    for name in ("tokens.u16", "tokens.u32", "tokens.bin"):
        out = env.path(name + ".safetensors")
        env.train(ddesc, "--data", env.path(name), "-o", out, "--weights", dinit, "--seq", 8, "--batch", 5,
                  "--steps", 2, "-q", "--log", env.path("tok.csv"))
        outs.append(sha(out))
    assert len(set(outs)) == 1, "the three token formats trained differently"
    wins = stream[:45].reshape(5, 9)
    loss, _ = dref.loss_and_grads(wins[:, :-1], np.full(5, 8), wins[:, 1:])
    got = float(read_log(env.path("tok.csv"))[0]["loss"])
    assert abs(got - loss / 40) <= 1e-5 * loss / 40, ("tokens", got, loss / 40)
    # the train block: defaults by the flags' names, flags over them
    bcfg = dict(cfg, name="block", train={"steps": 3, "batch": 4, "lr": 0.01, "betas": [0.8, 0.9],
                                          "no_decay": ["bias"], "schedule": "noam", "warmup": 2})
    bdesc = write_description(bcfg, env.root, "block.lua")
    env.train(bdesc, "--data", env.pairs_path, "-o", env.path("block.safetensors"), "--lr", "0.5", "-q")
    meta = read_metadata(env.path("block.ckpt.safetensors"))
    opts = dict(line.split("=", 1) for line in meta["options"].split("\n") if line)
    assert (opts["steps"], opts["batch"], opts["lr"], opts["betas"], opts["no_decay"], opts["schedule"],
            opts["warmup"]) == ("3", "4", "0.5", "0.80000000000000004,0.90000000000000002", "bias", "noam", "2"), opts
    assert meta["step"] == "3", meta["step"]
    print("  data: pairs and lines equal PyTorch's loss sample by sample; .u16/.u32/llm.c .bin train alike and "
          "equal PyTorch on the windows; the train block sets defaults")


def read_metadata(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n))["__metadata__"]


# ---- order and split -----------------------------------------------------------------------------

def check_order(env):
    cfg, desc = env.model("order_model")
    n, held = len(env.pairs), 5
    out = env.check("order", desc, env.pairs_path, 3 * (n - held), "--holdout", held, "--seed", 7).split("\n")
    held_idx, stream = [int(x) for x in out[0].split()], [int(x) for x in out[1].split()]
    train = sorted(set(range(n)) - set(held_idx))
    assert len(held_idx) == held and len(set(held_idx)) == held, held_idx
    assert not set(held_idx) & set(stream), "held-out samples in the training stream"
    epochs = [stream[i * (n - held):(i + 1) * (n - held)] for i in range(3)]
    assert all(sorted(e) == train for e in epochs), "an epoch is not a permutation of the training samples"
    assert epochs[0] != epochs[1] and epochs[0] != train, "epochs are not reshuffled"
    again = env.check("order", desc, env.pairs_path, 3 * (n - held), "--holdout", held, "--seed", 7)
    assert again.split("\n") == out, "the same seed gave another order"
    other = env.check("order", desc, env.pairs_path, 3 * (n - held), "--holdout", held, "--seed", 8).split("\n")
    assert other[1] != out[1] and other[0] != out[0], "another seed gave the same order"
    print("  order: epochs are seeded permutations of the training samples; the held-out split is disjoint")


# ---- resume ---------------------------------------------------------------------------------------

def check_resume(env):
    cfg, desc = env.model("resume_model")
    common = ["--data", env.pairs_path, "--batch", 6, "--micro-batch", 4, "--holdout", 4, "--eval-every", 5,
              "--dropout", 0.1, "--schedule", "cosine", "--warmup", 3, "--decay-steps", 20, "--threads", 2,
              "--seed", 11, "-q"]
    env.train(desc, "-o", env.path("r20.safetensors"), "--steps", 20, *common)
    env.train(desc, "-o", env.path("r10.safetensors"), "--steps", 10, "--log", env.path("r.csv"), *common)
    env.train(desc, "-o", env.path("r10b.safetensors"), "--steps", 20, "--resume", env.path("r10.ckpt.safetensors"),
              "--log", env.path("r.csv"), *common)
    rows = read_log(env.path("r.csv"))  # a resumed run appends its rows
    assert [int(r["step"]) for r in rows] == list(range(1, 21)), [r["step"] for r in rows]
    assert [r["step"] for r in rows if r["valid_loss"]] == ["5", "10", "15", "20"], rows
    for a, b in (("r20.safetensors", "r10b.safetensors"), ("r20.ckpt.safetensors", "r10b.ckpt.safetensors")):
        assert sha(env.path(a)) == sha(env.path(b)), "%s and %s differ: resume is not exact" % (a, b)
    # SIGTERM mid-run: the checkpoint of the last completed step, and from it the same bytes
    big, bdesc = env.model("signal_model", d_model=32, heads=4, d_ff=64)
    steps = env.signal_steps
    flags = ["--data", env.pairs_path, "--batch", 24, "--steps", steps, "--seed", 2, "-q"]
    env.train(bdesc, "-o", env.path("s_full.safetensors"), *flags)
    log = env.path("s.csv")
    p = subprocess.Popen([env.ff, "train", bdesc, "-o", env.path("s.safetensors"), "--log", log] +
                         [str(f) for f in flags], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and (not os.path.exists(log) or len(read_log(log)) < 20):
        time.sleep(0.01)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    lines = err.strip().split("\n")
    assert p.returncode == 1 and len(lines) == 1 and "interrupted by SIGTERM" in lines[0], (p.returncode, err)
    step = int(read_metadata(env.path("s.ckpt.safetensors"))["step"])
    assert 20 <= step < steps, ("the signal came too late to test anything", step)
    assert not os.path.exists(env.path("s.safetensors")), "weights written by an interrupted run"
    env.train(bdesc, "-o", env.path("s.safetensors"), "--resume", env.path("s.ckpt.safetensors"), *flags)
    assert sha(env.path("s.safetensors")) == sha(env.path("s_full.safetensors")), "SIGTERM + resume is not exact"
    # SIGKILL: no handler runs; the last --save-every checkpoint is whole (written to a temporary, renamed)
    log = env.path("k.jsonl")
    p = subprocess.Popen([env.ff, "train", bdesc, "-o", env.path("k.safetensors"), "--log", log, "--save-every", "10",
                          "--checkpoint", env.path("k.ckpt")] + [str(f) for f in flags])
    deadline = time.time() + 60
    while time.time() < deadline and (not os.path.exists(log) or len(open(log).readlines()) < 25):
        time.sleep(0.01)
    p.kill()
    p.wait()
    rows = [json.loads(line) for line in open(log).read().splitlines()[:-1]]  # (the last may be cut)
    assert [r["step"] for r in rows] == list(range(1, len(rows) + 1)) and "grad_norm" in rows[0], rows[:2]
    killed = int(read_metadata(env.path("k.ckpt"))["step"])
    assert killed % 10 == 0 and 20 <= killed < steps, killed
    env.train(bdesc, "-o", env.path("k.safetensors"), "--resume", env.path("k.ckpt"), "--checkpoint",
              env.path("k.ckpt"), "--plot", env.path("k.svg"), *flags)
    assert sha(env.path("k.safetensors")) == sha(env.path("s_full.safetensors")), "SIGKILL + resume is not exact"
    import xml.etree.ElementTree as ET
    svg = ET.parse(env.path("k.svg")).getroot()
    lines = [e for e in svg.iter() if e.tag.endswith("polyline")]
    assert len(lines) == 1 and len(lines[0].get("points").split()) == steps, "the plot lacks the steps before resume"
    print("  resume: 10 + 10 steps = 20 steps byte for byte; SIGTERM after step %d and SIGKILL after the checkpoint "
          "of step %d resumed to the same bytes" % (step, killed))


# ---- bad input ----------------------------------------------------------------------------------------

def snapshot(root):
    return {name: sha(os.path.join(root, name)) for name in sorted(os.listdir(root))
            if os.path.isfile(os.path.join(root, name))}


def check_errors(env):
    d = env.path("errors")
    os.makedirs(d)
    cfg, desc = env.model("err_model")
    other_cfg, other = env.model("err_other", d_model=8, heads=2)
    dcfg, ddesc = env.model("err_decoder", arch="decoder-only", max_seq=8)
    for name, text in (("long.tsv", "ab\tcd\n" + "abc\t" + "x" * 12 + "\n"), ("empty.tsv", ""),
                       ("blank.tsv", "\n\n\r\n"), ("notab.tsv", "ab\tcd\nabcd\n"), ("twotabs.tsv", "a\tb\tc\n"),
                       ("longsrc.tsv", "a" * 13 + "\tb\n")):
        env.write("errors/" + name, text)
    np.array([5, 6, V, 7], "<u2").tofile(os.path.join(d, "range.u16"))
    np.array([5, 6, 7], "<u2").tofile(os.path.join(d, "ok.u16"))
    np.zeros(1024, "<u2").tofile(os.path.join(d, "zeros.u16"))
    header = np.zeros(256, "<i4")
    header[:3] = [20240520, 1, 100]
    with open(os.path.join(d, "short.bin"), "wb") as f:
        f.write(header.tobytes() + np.arange(10, dtype="<u2").tobytes())
    # checkpoints: another model's, a truncated one, a weights file
    env.train(other, "--data", env.pairs_path, "-o", os.path.join(d, "other.safetensors"), "--steps", 2, "--batch", 4,
              "-q")
    env.train(desc, "--data", env.pairs_path, "-o", os.path.join(d, "mine.safetensors"), "--steps", 2, "--batch", 4,
              "-q")
    with open(os.path.join(d, "mine.ckpt.safetensors"), "rb") as f:
        raw = f.read()
    with open(os.path.join(d, "cut.ckpt.safetensors"), "wb") as f:
        f.write(raw[:len(raw) * 2 // 3])
    env.write("errors/out.safetensors", "not overwritten")
    P = lambda name: os.path.join(d, name)  # noqa: E731
    out = ["-o", P("out.safetensors"), "-q"]
    cases = [
        ("over-long target", desc, ["--data", P("long.tsv")] + out,
         "long.tsv:2: the target is more than 11 tokens after tokenizing (max_seq 12, less one for BOS or EOS)"),
        ("over-long source", desc, ["--data", P("longsrc.tsv")] + out,
         "longsrc.tsv:1: the source is more than 12 tokens after tokenizing (max_seq 12)"),
        ("empty file", desc, ["--data", P("empty.tsv")] + out, "empty.tsv: no samples (an empty file)"),
        ("blank lines", desc, ["--data", P("blank.tsv")] + out, "no samples (only blank lines)"),
        ("no TAB", desc, ["--data", P("notab.tsv")] + out, "notab.tsv:2: no TAB between source and target"),
        ("two TABs", desc, ["--data", P("twotabs.tsv")] + out, "twotabs.tsv:1: more than one TAB"),
        ("id out of range", ddesc, ["--data", P("range.u16"), "--seq", 2] + out,
         "range.u16: token id %d at position 2 is outside the vocabulary [0, %d)" % (V, V)),
        ("too few tokens", ddesc, ["--data", P("ok.u16"), "--seq", 4] + out, "fewer than one sample of seq + 1 = 5"),
        ("truncated llm.c file", ddesc, ["--data", P("short.bin")] + out,
         "the header counts 100 tokens but 20 bytes follow it (truncated)"),
        ("not an llm.c file", ddesc, ["--data", P("zeros.u16"), "--format", "llmc"] + out,
         "zeros.u16: not an llm.c token file (magic 0, not 20240520)"),
        ("another model's checkpoint", desc, ["--data", env.pairs_path, "--resume", P("other.ckpt.safetensors")] + out,
         "a checkpoint of another model ('err_other'"),
        ("truncated checkpoint", desc, ["--data", env.pairs_path, "--resume", P("cut.ckpt.safetensors")] + out,
         "cut.ckpt.safetensors: "),
        ("weights as checkpoint", desc, ["--data", env.pairs_path, "--resume", P("mine.safetensors")] + out,
         "not a fixformer training checkpoint"),
        ("missing checkpoint", desc, ["--data", env.pairs_path, "--resume", P("nothing.ckpt.safetensors")] + out,
         "nothing.ckpt.safetensors"),
        ("pairs for a decoder", ddesc, ["--data", env.pairs_path, "--format", "pairs"] + out,
         "pairs data is for encoder-decoder models"),
        ("holdout too large", desc, ["--data", env.pairs_path, "--holdout", 24] + out, "leaves none to train on"),
        ("output over the data", desc, ["--data", env.pairs_path, "-o", env.pairs_path], "pairs.tsv"),
        ("bad value", desc, ["--data", env.pairs_path, "--betas", "0.9"] + out, "--betas: '0.9' is not two numbers"),
        ("noam without warm-up", desc, ["--data", env.pairs_path, "--schedule", "noam"] + out, "warmup"),
        ("weights and resume", desc, ["--data", env.pairs_path, "--weights", P("mine.safetensors"), "--resume",
                                      P("mine.ckpt.safetensors")] + out, "not both"),
    ]
    bad_block = write_description(dict(cfg, name="bad_block", train={"learning_rate": 1}), env.root, "bad_block.lua")
    cases.append(("unknown train key", bad_block, ["--data", env.pairs_path] + out,
                  "bad_block.lua: train: unknown training option \"learning_rate\""))
    # another data file for a resume: a file the checkpoint was not trained on
    env.write("errors/other.tsv", "ab\tba\ncd\tdc\n")
    cases.append(("resume on other data", desc,
                  ["--data", P("other.tsv"), "--resume", P("mine.ckpt.safetensors")] + out, "trained on other data"))
    for what, model, flags, want in cases:
        before = snapshot(d), snapshot(env.root)
        p = env.train(model, *flags, check=False)
        lines = p.stderr.strip().split("\n")
        assert p.returncode != 0 and len(lines) == 1 and want in lines[0] and p.stdout == "", (what, p.returncode,
                                                                                               p.stderr, p.stdout)
        assert (snapshot(d), snapshot(env.root)) == before, "%s: the folder changed" % what
    print("  errors: %d bad inputs refused with one line each, nothing written or changed" % len(cases))


def check_memory(env):
    def info(*flags, desc=os.path.join(HERE, "..", "models", "dates.lua")):
        p = subprocess.run([env.ff, "info", desc, "--train"] + list(flags), capture_output=True, text=True, check=True)
        rows = {}
        for line in p.stdout.splitlines():
            parts = line.split()
            if len(parts) >= 4 and parts[-3] == "bytes":
                rows[" ".join(parts[1:-4])] = int(parts[-4])
        return rows
    a, b, c = info("--batch", "64", "--seq", "48"), info("--batch", "1", "--seq", "48"), info("--batch", "64", "--seq",
                                                                                            "48", "--threads", "2")
    params = 170304 * 4
    assert (a["parameters"], a["gradients"], a["AdamW moments"]) == (params, params, 2 * params), a
    assert a["activations"] == b["activations"] and c["activations"] == 2 * a["activations"], (a, b, c)
    assert a["batch"] > b["batch"] and c["gradients"] == 2 * params, (a, b, c)
    # generated code: the state emit --train writes for this machine's ISA, and --recompute's smaller one
    for extra in ([], ["--recompute"]):
        g = info("--batch", "64", "--seq", "48,32", "--engine", "cc", *extra)
        out = env.path("mem_emit%d" % len(extra))
        subprocess.run([env.ff, "emit", os.path.join(HERE, "..", "models", "dates.lua"), "-o", out, "--train", "--batch",
                        "64", "--seq", "48,32", "--isa", "native"] + extra, capture_output=True, check=True)
        with open(os.path.join(out, "dates_train.h")) as f:
            m = re.search(r"STATE_BYTES (\d+) /\* activations and panels (\d+), scratch (\d+)", f.read())
        state = [int(x) for x in m.groups()]
        assert [g["activations"], g["scratch"]] == state[1:] and sum(state[1:]) == state[0], (g, m)
        assert (g["parameters"], g["gradients"], g["AdamW moments"]) == (params, params, 2 * params), g
        assert g["total"] == 4 * params + state[0] + g["batch"], g
        if extra:
            assert g["activations"] < kept["activations"], (g, kept)
        kept = g
    # --recompute keeps each sub-layer's input, so a layer more adds two [rows, d] values: not the
    # layer's panels (a recomputed product's W^T once lived from the forward to the backward)
    grown = []
    for layers in (2, 4):
        desc = write_description(dict(name="deep", arch="decoder-only", d_model=64, heads=4, d_ff=256, layers=layers,
                                      vocab=512, max_seq=32, norm="pre", positional="learned"),
                                 env.root, "deep%d.lua" % layers)
        grown.append(info("--batch", "4", "--engine", "cc", "--recompute", desc=desc)["activations"])
    kept_inputs = 2 * 2 * (4 * 32) * 64 * 4  # 2 more layers x 2 sub-layers x [rows, d] floats
    assert 0 < grown[1] - grown[0] <= 1.25 * kept_inputs, (
        "--recompute: 2 layers more take %d bytes more activations, 2 x 2 sub-layer inputs are %d"
        % (grown[1] - grown[0], kept_inputs))
    print("  memory: info --train's bytes follow the parameters; activations one sequence per thread; --engine cc: "
          "the emitted state, smaller with --recompute, and %d bytes more for 2 layers more (their inputs: %d)"
          % (grown[1] - grown[0], kept_inputs))


def check_init(env):
    """The seeded initialisation without --weights: --init torch is `fixformer init`'s; the default,
    transformer, draws what nn.Transformer's reset and a scaled embedding's N(0, d^-0.5) give."""
    def initial(desc, *flags):  # the weights after one step of lr 1e-30: the initial values (zeros move by lr)
        out = env.path("init_%d.safetensors" % len(os.listdir(env.root)))
        env.train(desc, "--data", env.pairs_path, "-o", out, "--steps", 1, "--batch", 4, "--lr", "1e-30", *flags)
        return read_safetensors(out)
    cfg, desc = env.model("init_m")
    ref = env.path("init_ref.safetensors")
    subprocess.run([env.ff, "init", desc, "-o", ref, "--seed", "3"], check=True, capture_output=True)
    torch_init, ref = initial(desc, "--init", "torch", "--seed", 3), read_safetensors(ref)
    assert sorted(torch_init) == sorted(ref)
    for k in ref:
        assert np.abs(torch_init[k] - ref[k]).max() <= 1e-28, "--init torch: %s is not init's" % k
    d = cfg["d_model"]
    for scaled in (True, False):
        cfg, desc = env.model("init_s%d" % scaled, scale_embeddings=scaled)
        w = initial(desc)
        for k, x in w.items():
            if k == "embed.weight":  # the token embedding: N(0, d^-0.5) when scaled by sqrt(d), else nn.Embedding's
                want = d ** -0.5 if scaled else 1.0
                assert abs(x.std() / want - 1) < 0.15, "%s: std %.3f, want %.3f" % (k, x.std(), want)
            elif x.ndim == 2:  # every matrix xavier-uniform: U(-a, a), a = sqrt(6 / (fan_in + fan_out))
                a = math.sqrt(6.0 / sum(x.shape))
                assert np.abs(x).max() <= a and abs(x.std() / (a / math.sqrt(3)) - 1) < 0.15, \
                    "%s: max %.3f std %.3f, want U(-%.3f, %.3f)" % (k, np.abs(x).max(), x.std(), a, a)
            elif "norm" in k and k.endswith(".weight"):
                assert np.all(x == 1), k
            elif "linear" in k:  # nn.Linear's bias: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), as torch's scheme
                fan_in = d if "linear1" in k else cfg["d_ff"]
                assert np.abs(x).max() <= 1 / math.sqrt(fan_in), k
            else:  # attention and norm biases 0
                assert np.abs(x).max() <= 1e-28, k
    print("  init: --init torch is fixformer init's; transformer: xavier-uniform matrices, the scaled embedding "
          "N(0, d^-0.5)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixformer", required=True)
    ap.add_argument("--tool", required=True)
    ap.add_argument("--only", help="parts separated by commas: schedules, optimizer, e2e, data, order, resume, "
                                   "errors, memory, init (default: all)")
    ap.add_argument("--keep", help="work in this folder (kept)")
    ap.add_argument("--signal-steps", type=int, default=150,
                    help="resume: the run a signal interrupts (at step 20 or later; the sanitizer build: fewer)")
    args = ap.parse_args()
    start = time.time()
    parts = [("schedules", check_schedules), ("optimizer", check_optimizer), ("e2e", check_e2e), ("data", check_data),
             ("order", check_order), ("resume", check_resume), ("errors", check_errors), ("memory", check_memory), ("init", check_init)]
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or tmp
        os.makedirs(root, exist_ok=True)
        env = Env(args.fixformer, args.tool, root)
        env.signal_steps = args.signal_steps
        for name, fn in parts:
            if args.only is None or name in args.only.split(","):
                t = time.time()
                fn(env)
                print("    (%s: %.1f s)" % (name, time.time() - t))
    print("train: ok (%.1f s)" % (time.time() - start))


if __name__ == "__main__":
    main()
