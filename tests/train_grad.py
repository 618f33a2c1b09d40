#!/usr/bin/python3
"""Training's reference: the runtime's loss and backward pass
(runtime/ff_rt_train.h, ff_rt_loss_and_grad) against PyTorch autograd.

  gradients   for configs of every architecture style (encoder with a head,
              decoder-only, encoder-decoder; post- and pre-LN; LayerNorm and
              RMSNorm; each activation; each position kind and both RoPE
              pairings; grouped-query attention; tied / untied heads, head
              bias, bias = false, embed_norm and token types; padding by
              lengths and ignored labels; label smoothing 0 and 0.1), the
              gradient of every parameter equals PyTorch autograd's through
              lib/reference.py RefModel (computed in float64) within 1e-4
              scaled error (max|a - b| / max|b| per tensor, max|b| taken as
              at least 1e-3 of the model's largest gradient: a gradient that
              vanishes, as every weight's before a LayerNorm of width 1, is
              held to that absolute bound), and the summed loss too; with dropout 0 and with dropout 0.1, the masks the
              tool writes handed to PyTorch.  Attention is peaked (q and k rows
              of in_proj ~ N(0, 4 / d)) so that mask and pairing mistakes show.
  dropout     ff_dropout.h's contract: the masks equal an independent numpy
              implementation of the documented formula and site numbering;
              the same (seed, step) gives the same masks, another step or
              seed others (each differing in ~2p(1-p) of the elements); the
              keep rate is within 5 sigma of 1 - p, overall and per site.
  params      the flat buffer (ff_rt_params): its table lists the tensors
              in the weights file's order (lib/reference.py weight_names),
              contiguous, with the no-decay flags (is_bias, is_norm,
              is_embedding) AdamW's groups need; written back it is the file
              it was read from; a weights file missing a tensor is refused.
  micro       a batch as micro-batches (first counting on) gives the whole
              batch's loss and gradient, dropout included.
  fd          central differences of the loss against the runtime's gradient
              on tiny models (smooth activations), with and without dropout.
  errors      a model without an output head, a label outside the vocabulary
              and dropout 1 are refused with one line naming the problem.

  train_grad.py --tool TRAIN_TOOL [--only PART] [--keep DIR]
"""
import argparse
import math
import os
import random
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "lib"))
from configs import random_config, write_description  # noqa: E402
from reference import RefModel, random_weights, read_safetensors, weight_names, write_safetensors  # noqa: E402

torch.set_num_threads(1)
TOL = 1e-4


def config(name, arch, **kw):
    c = {"name": name, "arch": arch, "d_model": 12, "heads": 3, "d_ff": 20, "vocab": 17, "max_seq": 16}
    if arch == "encoder-decoder":
        c.update(encoder_layers=2, decoder_layers=2)
    else:
        c["layers"] = 2
    c.update(kw)
    return c


# (group, config, label smoothing, ignore index)
CASES = [
    ("encoder", config("enc_post_relu", "encoder"), 0.0, -100),
    ("encoder", config("enc_pre_gelu_learned", "encoder", norm="pre", activation="gelu", positional="learned",
                       final_norm=True), 0.1, -100),
    ("encoder", config("enc_rms_sin_untied_bias", "encoder", norm_kind="rmsnorm", positional="sinusoidal",
                       tie_embeddings=False, head_bias=True), 0.0, 0),
    ("encoder", config("enc_nobias_unscaled", "encoder", bias=False, scale_embeddings=False, activation="gelu_tanh",
                       heads=4, d_model=16), 0.1, -100),
    ("encoder", config("enc_bert", "encoder", embed_norm=True, token_types=2, positional="learned", eps=1e-12,
                       activation="gelu"), 0.0, -100),
    ("decoder", config("dec_post_relu_sin", "decoder-only", positional="sinusoidal"), 0.0, -100),
    ("decoder", config("dec_pre_gelu_tanh_learned", "decoder-only", norm="pre", activation="gelu_tanh",
                       positional="learned", final_norm=True, tie_embeddings=False), 0.1, -100),
    # vocabulary 256: generated code pads the logits' rows (gen/train.lua)
    ("decoder", config("dec_untied_headbias_nobias", "decoder-only", norm="pre", bias=False, head_bias=True,
                       tie_embeddings=False, final_norm=True, vocab=256), 0.0, 0),
    ("llama", config("llama_rope_half", "decoder-only", norm="pre", norm_kind="rmsnorm", activation="swiglu",
                     positional="rope", final_norm=True, bias=False, tie_embeddings=False, d_model=16, heads=2), 0.0, -100),
    ("llama", config("llama_rope_interleaved", "decoder-only", norm="pre", norm_kind="rmsnorm", activation="swiglu",
                     positional="rope", rope_pairing="interleaved", final_norm=True, bias=False, d_model=16, heads=4,
                     rope_theta=500.0), 0.1, -100),
    ("llama", config("enc_rope_post", "encoder", positional="rope", activation="swiglu", d_model=16, heads=2), 0.0, 0),
    ("gqa", config("gqa_rope_half", "decoder-only", norm="pre", norm_kind="rmsnorm", activation="swiglu",
                   positional="rope", heads=4, kv_heads=2, d_model=16, final_norm=True), 0.0, -100),
    ("gqa", config("mqa_rope_interleaved", "decoder-only", norm="pre", positional="rope", rope_pairing="interleaved",
                   heads=4, kv_heads=1, d_model=16, activation="gelu"), 0.1, -100),
    ("gqa", config("gqa_encdec", "encoder-decoder", heads=6, kv_heads=3, d_model=12, norm="pre",
                   positional="learned"), 0.0, -100),
    ("encdec", config("transformer_post", "encoder-decoder", positional="sinusoidal", final_norm=True), 0.0, -100),
    ("encdec", config("transformer_pre_gelu", "encoder-decoder", norm="pre", activation="gelu", positional="learned",
                      final_norm=True, tie_embeddings=False, head_bias=True), 0.1, 0),
    ("encdec", config("encdec_rms_swiglu_rope", "encoder-decoder", norm_kind="rmsnorm", activation="swiglu",
                      positional="rope", bias=False, encoder_layers=1, decoder_layers=3, d_model=16, heads=4), 0.1,
     -100),
    ("encdec", config("encdec_embed_norm", "encoder-decoder", embed_norm=True, token_types=1, activation="gelu_tanh",
                      encoder_layers=3, decoder_layers=1), 0.0, -100),
    ("encdec", config("marian_silu", "encoder-decoder", activation="silu", positional="learned", head_bias=True),
     0.1, 0),
]


def random_cases(n, seed):
    """configs.random_config (every description key), with a head to train, and d_model >= 4: a LayerNorm of
    width 2 is so ill-conditioned that PyTorch's own float32 gradient is 2e-3 off its float64 one."""
    rng, out = random.Random(seed), []
    for i in range(n):
        c = random_config(rng, "rand%d" % i, force=i)
        while c["d_model"] < 4:
            c = random_config(rng, "rand%d" % i, force=i)
        c.setdefault("vocab", rng.choice([5, 17, 40]))
        c.pop("lm_head", None)
        out.append(("random", c, rng.choice([0.0, 0.1]), rng.choice([-100, 0])))
    return out


def peaked_weights(cfg, seed):
    """lib/reference random_weights with the q and k rows of every in_proj twice as large: peaked attention."""
    w = random_weights(cfg, weight_names(cfg), torch.Generator().manual_seed(seed))
    c = RefModel(cfg, {}).c
    d, kvd = c["d_model"], c["kv_heads"] * (c["d_model"] // c["heads"])
    for k, v in w.items():
        if k.endswith("in_proj_weight"):
            v[:d + kvd] *= 2.0
    return w


def make_batch(cfg, rng, ignore):
    """src, lengths, tgt, labels: B = 3, padding past lengths (ignored labels there) and ~15% labels ignored."""
    c = RefModel(cfg, {}).c
    V, B = c["vocab"], 3
    S = rng.randint(3, min(8, c["max_seq"]))
    lo = 1 if ignore == 0 else 0  # labels never equal to an ignore_index that is a real id
    src = rng.randint(0, V, size=(B, S)).astype(np.int32)
    lengths = np.array([S] + [rng.randint(1, S + 1) for _ in range(B - 1)], dtype=np.int32)
    rng.shuffle(lengths)
    tgt = None
    if c["arch"] == "encoder-decoder":
        T = rng.randint(2, min(7, c["max_seq"]) + 1)
        tgt = rng.randint(0, V, size=(B, T)).astype(np.int32)
        labels = rng.randint(lo, V, size=(B, T)).astype(np.int32)
    else:
        labels = rng.randint(lo, V, size=(B, S)).astype(np.int32)
        labels[np.arange(S)[None, :] >= lengths[:, None]] = ignore
    labels[rng.random_sample(labels.shape) < 0.15] = ignore
    return src, lengths, tgt, labels


class Case:
    """One config's files in a folder of its own, and the tool run on them."""

    def __init__(self, tool, root, group, cfg, smoothing, ignore, seed):
        self.tool, self.group, self.cfg, self.smoothing, self.ignore = tool, group, cfg, smoothing, ignore
        self.dir = os.path.join(root, cfg["name"])
        os.makedirs(self.dir)
        self.desc = write_description(cfg, self.dir)
        self.weights = peaked_weights(cfg, seed)
        self.wpath = os.path.join(self.dir, "w.safetensors")
        write_safetensors(self.wpath, self.weights)
        self.src, self.lengths, self.tgt, self.labels = make_batch(cfg, np.random.RandomState(seed), ignore)
        self.files = []
        for flag, a in (("--src", self.src), ("--lengths", self.lengths), ("--tgt", self.tgt),
                        ("--labels", self.labels)):
            if a is not None:
                np.save(os.path.join(self.dir, flag[2:] + ".npy"), a)
                self.files += [flag, os.path.join(self.dir, flag[2:] + ".npy")]
        self.runs = 0

    def run(self, *flags, check=True):
        """The tool with these flags: (loss, tokens, grads, masks or None, fd lines or None, out dir)."""
        out = os.path.join(self.dir, "out%d" % self.runs)
        self.runs += 1
        os.makedirs(out)
        argv = [self.tool, self.desc, self.wpath, out] + self.files + ["--smoothing", str(self.smoothing),
                                                                        "--ignore", str(self.ignore)] + list(flags)
        p = subprocess.run(argv, capture_output=True, text=True)
        if not check:
            return p
        if p.returncode:
            raise AssertionError("%s: train_tool failed: %s" % (self.cfg["name"], p.stderr.strip()))
        loss, tokens = open(os.path.join(out, "loss.txt")).read().split()
        masks = fd = None
        if os.path.exists(os.path.join(out, "masks.safetensors")):
            masks = read_safetensors(os.path.join(out, "masks.safetensors"))
        if os.path.exists(os.path.join(out, "fd.txt")):
            fd = [line.split() for line in open(os.path.join(out, "fd.txt"))]
        return float(loss), int(tokens), read_safetensors(os.path.join(out, "grad.safetensors")), masks, fd, out

    def reference(self, masks=None, p=0.0):
        return RefModel(self.cfg, self.weights).loss_and_grads(self.src, self.lengths, self.labels, self.tgt,
                                                               self.ignore, self.smoothing, masks, p)


def scaled_error(a, b, floor=0.0):
    """max|a - b| / max|b|, max|b| at least floor."""
    m = max(float(np.abs(b).max()), floor)
    return float(np.abs(a - b).max()) / m if m > 0 else float(np.abs(a).max())


def compare(case, what, got, want):
    """Every tensor within TOL scaled error, and the loss; returns the worst error."""
    loss, tokens, grads = got[0], got[1], got[2]
    ref_loss, ref_grads = want
    assert tokens == int((case.labels != case.ignore).sum()), (case.cfg["name"], tokens)
    assert sorted(grads) == sorted(ref_grads), (case.cfg["name"], sorted(set(grads) ^ set(ref_grads)))
    worst, where = abs(loss - ref_loss) / max(1.0, abs(ref_loss)), "loss"
    floor = 1e-3 * max(float(np.abs(g).max()) for g in ref_grads.values())
    for name in grads:
        e = scaled_error(grads[name], ref_grads[name], floor)
        if e > worst:
            worst, where = e, name
    if worst > TOL:
        raise AssertionError("%s (%s): %s differs from PyTorch autograd by %.3e scaled (tolerance %g)"
                             % (case.cfg["name"], what, where, worst, TOL))
    return worst


# ---- the dropout contract, written again from ff_dropout.h's comment ----------------

M64 = (1 << 64) - 1
G = 0x9E3779B97F4A7C15
KINDS = {"embed": 0, "self_attn.probs": 1, "self_attn.out": 2, "multihead_attn.probs": 3, "multihead_attn.out": 4,
         "ffn.hidden": 5, "ffn.out": 6}


def mix(z):
    """splitmix64's finalizer on uint64 numpy arrays (arithmetic mod 2^64)."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def site_id(name):
    """"decoder.layers.2.ffn.out" -> stack << 24 | layer << 4 | kind"""
    parts = name.split(".")
    stack = {"encoder": 1, "decoder": 2}[parts[0]]
    if parts[1] == "layers":
        return stack << 24 | int(parts[2]) << 4 | KINDS[".".join(parts[3:])]
    return stack << 24 | KINDS[".".join(parts[1:])]


def keep_mask(seed, step, site, index, p):
    with np.errstate(over="ignore"):
        key = mix(np.array([(seed + G) & M64], dtype=np.uint64))
        key = mix(key ^ np.uint64((step + G) & M64))
        key = mix(key ^ np.uint64((site + G) & M64))
        bits = mix(key + (index.astype(np.uint64) + np.uint64(1)) * np.uint64(G)) >> np.uint64(40)
    return bits >= np.uint64(int(np.float32(p) * np.float32(16777216.0)))


def check_dropout(tool, root):
    p = 0.1
    c = config("drop_encdec", "encoder-decoder", d_model=16, heads=4, d_ff=24)
    case = Case(tool, root, "dropout", c, 0.0, -100, 11)
    a = case.run("--dropout", str(p), "--seed", "7", "--step", "3", "--masks")[3]
    expected_sites = 1 + 2 * 4 + 1 + 2 * 6  # embed, 4 sites a layer; decoder: embed, 6 a layer
    assert len(a) == expected_sites, sorted(a)
    for name, m in a.items():  # the documented formula, index row-major over the batch
        want = keep_mask(7, 3, site_id(name), np.arange(m.size), p).reshape(m.shape)
        assert np.array_equal(m == 1.0, want), "%s: masks differ from ff_dropout.h's formula" % name
        n, kept = m.size, float(m.sum())
        assert abs(kept / n - (1 - p)) <= 5 * math.sqrt(p * (1 - p) / n), "%s: keep rate %.4f" % (name, kept / n)
    again = case.run("--dropout", str(p), "--seed", "7", "--step", "3", "--masks")[3]
    assert all(np.array_equal(a[k], again[k]) for k in a), "the same (seed, step) gave other masks"
    total = sum(m.size for m in a.values())
    for other in (("--seed", "7", "--step", "4"), ("--seed", "8", "--step", "3")):
        b = case.run("--dropout", str(p), *other, "--masks")[3]
        differ = sum(int((a[k] != b[k]).sum()) for k in a) / total
        q = 2 * p * (1 - p)
        assert abs(differ - q) <= 5 * math.sqrt(q * (1 - q) / total), "%s: %.4f of the masks differ" % (other, differ)
    kept = sum(float(m.sum()) for m in a.values()) / total
    # the formula itself on a million indices at other rates
    for rate in (0.1, 0.5, 0.9):
        n = 1 << 20
        k = keep_mask(1, 2, site_id("encoder.layers.0.ffn.hidden"), np.arange(n), rate).mean()
        assert abs(k - (1 - rate)) <= 5 * math.sqrt(rate * (1 - rate) / n), "p %g: keep rate %.5f" % (rate, k)
    print("  dropout: %d sites, %d elements, keep rate %.4f at p = %g; masks follow ff_dropout.h; "
          "another step or seed changes them" % (len(a), total, kept, p))
    return case


def check_micro(case):
    """Micro-batches with first counting on: the whole batch's loss, gradient and masks."""
    whole = case.run("--dropout", "0.1", "--seed", "5", "--step", "9", "--masks")
    for micro in (1, 2):  # the first micro-batch's gradient written into NaNs (set_grad), the others' added
        part = case.run("--dropout", "0.1", "--seed", "5", "--step", "9", "--micro", str(micro), "--set-grad")
        assert abs(part[0] - whole[0]) <= 1e-9 * abs(whole[0]), (micro, part[0], whole[0])
        worst = max(scaled_error(part[2][k], whole[2][k]) for k in whole[2])
        assert worst <= 1e-6, "micro-batches of %d: gradient differs by %.3e" % (micro, worst)
    # the masks of a micro-batch starting at sequence 1 are the whole batch's from there
    tail = case.run("--dropout", "0.1", "--seed", "5", "--step", "9", "--first", "1", "--masks")[3]
    for k, m in tail.items():
        assert np.array_equal(m[:-1], whole[3][k][1:]), "%s: --first 1 masks are not the batch's from sequence 1" % k
    print("  micro: micro-batches of 1 and 2 give the whole batch's loss and gradient (dropout 0.1; the first "
          "written, set_grad)")


def check_fd(tool, root):
    """Central differences (step 1e-2, loss summed in double) against the analytic gradient."""
    cfgs = [
        config("fd_enc", "encoder", d_model=8, heads=2, d_ff=12, layers=1, vocab=11, activation="gelu",
               positional="learned", tie_embeddings=False, head_bias=True),
        config("fd_dec", "decoder-only", d_model=8, heads=2, kv_heads=1, d_ff=12, layers=2, vocab=11,
               activation="swiglu", norm="pre", norm_kind="rmsnorm", positional="rope", rope_pairing="interleaved",
               final_norm=True),
        config("fd_encdec", "encoder-decoder", d_model=8, heads=2, d_ff=12, encoder_layers=1, decoder_layers=1,
               vocab=11, activation="gelu_tanh", final_norm=True, embed_norm=True),
    ]
    worst, n = 0.0, 0
    for i, c in enumerate(cfgs):
        case = Case(tool, root, "fd", c, 0.1 * (i % 2), -100, 100 + i)
        for flags in ((), ("--dropout", "0.1", "--seed", "3")):
            _, _, grads, _, fd, _ = case.run("--fd", "4", *flags)
            for name, index, analytic, numeric in fd:
                g, f = float(analytic), float(numeric)
                scale = float(np.abs(grads[name]).max())
                err = abs(g - f) / max(abs(g), 0.05 * scale, 1e-3)
                n += 1
                if err > 2e-2:
                    raise AssertionError("%s%s: %s[%s]: analytic %.6g, central difference %.6g"
                                         % (c["name"], " dropout" if flags else "", name, index, g, f))
                worst = max(worst, err)
    print("  fd: %d coordinates, worst relative difference %.2e (tolerance 2e-2)" % (n, worst))


def check_params(tool, root):
    cfgs = [config("params_encdec", "encoder-decoder", embed_norm=True, token_types=2, positional="learned",
                   final_norm=True, tie_embeddings=False, head_bias=True),
            config("params_llama", "decoder-only", norm_kind="rmsnorm", bias=False, activation="swiglu",
                   positional="rope", prefix="model.")]
    for i, c in enumerate(cfgs):
        case = Case(tool, root, "params", c, 0.0, -100, 300 + i)
        out = case.run()[5]
        names = weight_names(c)
        rows = [line.split() for line in open(os.path.join(out, "layout.txt"))]
        assert [r[0] for r in rows] == [n for n, _ in names], (c["name"], [r[0] for r in rows])
        at = 0
        for (name, offset, numel, is_bias, is_norm, is_embedding), (_, shape) in zip(rows, names):
            assert int(offset) == at and int(numel) == int(np.prod(shape)), (name, offset, numel, at, shape)
            at += int(numel)
            module = name.split(".")[-2] if "." in name else name
            want = (int(name.endswith("bias")), int("norm" in module),
                    int(name in ("embed.weight", "pos_embed.weight", "token_type_embed.weight")))
            assert (int(is_bias), int(is_norm), int(is_embedding)) == want, (name, is_bias, is_norm, is_embedding)
        back = read_safetensors(os.path.join(out, "params.safetensors"))
        assert sorted(back) == sorted(case.weights) and all(np.array_equal(back[k], case.weights[k]) for k in back)
    case = Case(tool, root, "params", config("params_missing", "decoder-only"), 0.0, -100, 310)
    w = dict(case.weights)
    del w["layers.1.linear2.bias"]
    write_safetensors(case.wpath, w)
    p = case.run(check=False)
    assert p.returncode != 0 and "missing tensor 'layers.1.linear2.bias'" in p.stderr, p.stderr
    print("  params: the flat buffer's table, flags and round trip; a missing tensor refused")


def check_errors(tool, root):
    cases = [
        (config("no_vocab", "encoder", vocab=None), [], "no output head"),
        (config("no_head", "decoder-only", lm_head=False), [], "no output head"),
        (config("bad_label", "decoder-only"), ["bad_label"], "outside the vocabulary"),
        (config("bad_dropout", "decoder-only"), ["--dropout", "1"], "dropout: 1 is outside [0, 1)"),
    ]
    for c, flags, want in cases:
        if c.get("vocab") is None:
            c.pop("vocab")
        d = os.path.join(root, c["name"])
        os.makedirs(d)
        desc = write_description(c, d)
        wpath = os.path.join(d, "w.safetensors")
        write_safetensors(wpath, random_weights(c, weight_names(c), torch.Generator().manual_seed(1)))
        ids = np.zeros((2, 4), np.int32)
        labels = ids.copy()
        if flags == ["bad_label"]:
            labels[1, 2], flags = 17, []
        np.save(os.path.join(d, "src.npy"), ids)
        np.save(os.path.join(d, "labels.npy"), labels)
        p = subprocess.run([tool, desc, wpath, d, "--src", os.path.join(d, "src.npy"), "--labels",
                            os.path.join(d, "labels.npy")] + flags, capture_output=True, text=True)
        lines = p.stderr.strip().splitlines()
        assert p.returncode != 0 and len(lines) == 1 and want in lines[0], (c["name"], p.returncode, p.stderr)
        assert not os.path.exists(os.path.join(d, "grad.safetensors")), c["name"]
    print("  errors: %d bad inputs refused with one line each" % len(cases))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--only", choices=["gradients", "params", "dropout", "micro", "fd", "errors"])
    ap.add_argument("--random", type=int, default=8)
    ap.add_argument("--keep", help="write the cases under this folder (kept)")
    args = ap.parse_args()
    start = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or tmp
        os.makedirs(root, exist_ok=True)
        if args.only in (None, "gradients"):
            worst = {}
            for i, (group, cfg, smoothing, ignore) in enumerate(CASES + random_cases(args.random, 25)):
                case = Case(args.tool, root, group, cfg, smoothing, ignore, 1000 + i)
                e0 = compare(case, "dropout 0", case.run(), case.reference())
                got = case.run("--dropout", "0.1", "--seed", str(i), "--step", "1", "--masks")
                e1 = compare(case, "dropout 0.1", got, case.reference(got[3], 0.1))
                worst[group] = max(worst.get(group, 0.0), e0)
                worst[group + " +dropout"] = max(worst.get(group + " +dropout", 0.0), e1)
            for k in sorted(worst):
                print("  %-18s worst scaled error %.2e" % (k, worst[k]))
        if args.only in (None, "params"):
            check_params(args.tool, root)
        if args.only in (None, "dropout", "micro"):
            case = check_dropout(args.tool, root)
            if args.only != "dropout":
                check_micro(case)
        if args.only in (None, "fd"):
            check_fd(args.tool, root)
        if args.only in (None, "errors"):
            check_errors(args.tool, root)
    print("train_grad: ok (%.1f s)" % (time.time() - start))


if __name__ == "__main__":
    main()
