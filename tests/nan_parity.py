#!/usr/bin/python3
"""NaN and inf parity: one non-finite weight, every engine and ISA against PyTorch.

Each case builds a small model (as torch_parity.py does), sets one weight (or
one embedding row) to NaN, +inf or -inf, computes the expected output in
PyTorch, and runs `fixformer run --allow-nonfinite` with the runtime, and with
tcc and cc under FIXFORMER_ISA set to each ISA this machine runs (generic,
avx2, avx512).  Over the valid rows, the output must be NaN exactly where
PyTorch's is, +inf and -inf exactly where PyTorch's are, and the finite rest
within 1e-4 of PyTorch's, scaled by its largest finite magnitude.

Where PyTorch's answer depends on keys a row does not attend to, fixformer
differs on purpose: PyTorch's attention multiplies the masked keys' values by
0, so a NaN at a later position (causal) or in the padding reaches every row
through 0 * NaN; fixformer leaves a masked key out, as incremental decoding
must (a position's output cannot depend on tokens after it).  Those rows are
compared with PyTorch on the input without the masked NaN: the prefix before
it, or the padding holding another token.

  nan_parity.py --fixformer BIN [--engines runtime,tcc,cc] [--isas generic,avx2,avx512]
  nan_parity.py --fixformer BIN --cross    the NEON kernels instead: `emit --target
      aarch64-linux-gnu --with-main --allow-nonfinite`, built -static with
      aarch64-linux-gnu-gcc and run under qemu-aarch64, on the same cases
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "lib"))
from isas import host_isas  # noqa: E402
from reference import (RefModel, lengths_mask, random_weights, randomize, state_dict_numpy, valid_rows,  # noqa: E402
                       weight_names, write_description, write_safetensors)

torch.set_num_threads(1)


class Case:
    def __init__(self, name, cfg, weights, src, lengths, expected):
        self.name, self.cfg, self.weights, self.src = name, cfg, weights, src
        self.lengths, self.expected = np.asarray(lengths, dtype=np.int32), expected


def encoder_case(name, seed, poison, d=24, h=3, ff=37, L=2, norm_first=False, act="relu", final_norm=False,
                 lengths=(6, 4), S=6):
    """nn.TransformerEncoder with poison = (tensor name, index, value) set before PyTorch runs it."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    layer = nn.TransformerEncoderLayer(d, h, ff, dropout=0.0, activation=act, batch_first=True, norm_first=norm_first)
    enc = nn.TransformerEncoder(layer, L, norm=nn.LayerNorm(d) if final_norm else None, enable_nested_tensor=False)
    randomize(enc, gen)
    enc.eval()
    tensor, index, value = poison
    with torch.no_grad():
        enc.state_dict()[tensor][index] = value
        x = torch.randn(len(lengths), S, d, generator=gen)
        ref = enc(x, src_key_padding_mask=lengths_mask(list(lengths), S)).numpy()
    cfg = dict(name=name, arch="encoder", d_model=d, heads=h, d_ff=ff, layers=L, norm="pre" if norm_first else "post",
               final_norm=final_norm, activation=act, max_seq=16)
    return Case(name, cfg, state_dict_numpy(enc), x.numpy(), lengths, ref)


def token_case(name, cfg, seed, token, at, lengths, S):
    """A token model (RefModel: RMSNorm, RoPE, SwiGLU ...) whose embedding row
    `token` is NaN; at: (sequence, position) pairs where the input holds it,
    every other id differs from it.  Rows that see it only as a masked key
    (before it, causally; padding) are PyTorch's on the input with another id
    there (see the module's doc)."""
    gen = torch.Generator().manual_seed(seed)
    w = random_weights(cfg, weight_names(cfg), gen)
    rng = np.random.RandomState(seed)
    src = rng.randint(0, cfg["vocab"] - 1, size=(len(lengths), S)).astype(np.int32)
    src[src >= token] += 1  # never the poisoned id ...
    clean = src.copy()
    for b, t in at:  # ... except where it is put
        src[b, t] = token
    w["embed.weight"][token, :] = np.nan
    ref = RefModel(cfg, w)
    expected = ref.forward(src, lengths)
    causal = cfg["arch"] == "decoder-only"
    for b, t in at:
        if t >= lengths[b]:  # in the padding: the valid rows as with another id there
            expected[b] = ref.forward(clean[b:b + 1], lengths[b:b + 1])[0]
        elif causal:  # the rows before it as on the prefix
            n = min(t, lengths[b])
            if n:
                expected[b, :n] = ref.forward(src[b:b + 1, :n], [n])[0]
    return Case(name, cfg, w, src, lengths, expected)


def cases():
    nan, inf = float("nan"), float("inf")
    llama = dict(arch="decoder-only", d_model=32, heads=4, d_ff=43, layers=2, norm="pre", norm_kind="rmsnorm",
                 final_norm=True, activation="swiglu", bias=False, vocab=50, positional="rope", max_seq=16)
    return [
        # before the activation: every valid row NaN (relu(NaN) was 0 in the runtime and the AVX kernels)
        encoder_case("post_relu_linear1_nan", 1, ("layers.0.linear1.weight", (5, 7), nan)),
        encoder_case("pre_gelu_linear1_nan", 2, ("layers.1.linear1.weight", (3, 0), nan), norm_first=True,
                     act="gelu", final_norm=True),
        encoder_case("post_relu_bias_neg_inf", 3, ("layers.0.linear1.bias", 4, -inf)),  # relu(-inf) = 0: all finite
        encoder_case("pre_gelu_bias_neg_inf", 4, ("layers.0.linear1.bias", 4, -inf), norm_first=True, act="gelu"),
        # attention projections: a NaN key column makes its head's score rows NaN
        encoder_case("post_relu_key_nan", 5, ("layers.0.self_attn.in_proj_weight", (24 + 9, 2), nan)),
        encoder_case("pre_relu_query_nan", 6, ("layers.1.self_attn.in_proj_weight", (1, 3), nan), norm_first=True),
        # partial masks: one feature of the output
        encoder_case("pre_relu_linear2_bias_inf", 7, ("layers.1.linear2.bias", 5, inf), norm_first=True),
        encoder_case("pre_final_norm_weight_nan", 8, ("norm.weight", 11, nan), norm_first=True, final_norm=True),
        encoder_case("post_norm1_weight_nan", 9, ("layers.0.norm1.weight", 2, nan)),
        # decoder-only, SwiGLU + RMSNorm + RoPE, tied head: a NaN token row at position 3 of sequence 0 and in
        # the padding of sequence 1; the head's column of that token is NaN in every row
        token_case("llama_embed_row_nan", dict(llama, name="llama_embed_row_nan"), 41, 17, [(0, 3), (1, 5)],
                   [7, 4], 7),
        token_case("llama_embed_row_nan_long", dict(llama, name="llama_embed_row_nan_long"), 42, 9, [(0, 10)],
                   [13], 13),
        # bidirectional with tokens: the whole sequence that holds it
        token_case("encoder_embed_row_nan", dict(llama, name="encoder_embed_row_nan", arch="encoder",
                                                 norm_kind="layernorm", activation="relu", tie_embeddings=False),
                   43, 5, [(0, 2), (1, 4)], [6, 3], 6),
    ]


# ---- running -------------------------------------------------------------------

def compare(out, expected, rows):
    """None when the NaN and inf places match and the finite rest is within 1e-4; else what differs."""
    got, want = out[rows], expected[rows]
    for what, f in (("NaN", np.isnan), ("+inf", np.isposinf), ("-inf", np.isneginf)):
        if not np.array_equal(f(got), f(want)):
            return "%s at %d places, PyTorch %d (first difference at %s)" % (
                what, int(f(got).sum()), int(f(want).sum()), np.argwhere(f(got) != f(want))[0].tolist())
    fin = np.isfinite(want)
    if fin.any():
        err = float(np.abs(got[fin] - want[fin]).max()) / max(float(np.abs(want[fin]).max()), 1e-30)
        if not err <= 1e-4:
            return "finite values differ: scaled error %.2e" % err
    return None


def run_case(ff, case, tmp, engine, isa):
    d = os.path.join(tmp, case.name)
    os.makedirs(d, exist_ok=True)
    model, weights, out = os.path.join(d, "model.lua"), os.path.join(d, "w.safetensors"), os.path.join(d, "out.npy")
    write_description(case.cfg, model)
    write_safetensors(weights, case.weights)
    np.save(os.path.join(d, "in.npy"), case.src)
    np.save(os.path.join(d, "len.npy"), case.lengths)
    if os.path.exists(out):
        os.unlink(out)
    cmd = [ff, "run", model, "--weights", weights, "--input", os.path.join(d, "in.npy"), "--lengths",
           os.path.join(d, "len.npy"), "--output", out, "--engine", engine, "--allow-nonfinite"]
    env = dict(os.environ, XDG_CACHE_HOME=os.path.join(tmp, "cache"))  # a private cc cache
    env.pop("FIXFORMER_ISA", None)
    if isa:
        env["FIXFORMER_ISA"] = isa
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        return "fixformer failed: " + p.stderr.strip()
    got = np.load(out)
    if got.shape != case.expected.shape:
        return "shape %s, PyTorch %s" % (got.shape, case.expected.shape)
    return compare(got, case.expected, valid_rows(case.cfg, case.lengths, got.shape))


def cross_case(ff, case, tmp):
    """The case's model emitted for aarch64 (NEON kernels), built and run under qemu-user."""
    d = os.path.join(tmp, case.name)
    os.makedirs(d, exist_ok=True)
    model, weights, out = os.path.join(d, "model.lua"), os.path.join(d, "w.safetensors"), os.path.join(d, "out.npy")
    write_description(case.cfg, model)
    write_safetensors(weights, case.weights)
    np.save(os.path.join(d, "in.npy"), case.src)
    np.save(os.path.join(d, "len.npy"), case.lengths)
    src = os.path.join(d, "arm")
    name = case.cfg["name"]
    steps = [[ff, "emit", model, "-o", src, "--weights", weights, "--target", "aarch64-linux-gnu", "--with-main",
              "--allow-nonfinite"],  # the weights as a blob: --embed has no C literal for NaN
             ["aarch64-linux-gnu-gcc", "-static", "-O2", "-std=c99", "-o", os.path.join(src, name)] +
             [os.path.join(src, name + s) for s in (".c", "_main.c")] + ["-lm"],
             ["qemu-aarch64", os.path.join(src, name), "--weights", os.path.join(src, name + ".weights"), "--input",
              os.path.join(d, "in.npy"), "--lengths", os.path.join(d, "len.npy"), "--output", out]]
    for cmd in steps:
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            return "%s failed: %s" % (os.path.basename(cmd[0]), (p.stderr or p.stdout).strip()[:500])
    got = np.load(out)
    if got.shape != case.expected.shape:
        return "shape %s, PyTorch %s" % (got.shape, case.expected.shape)
    return compare(got, case.expected, valid_rows(case.cfg, case.lengths, got.shape))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixformer", required=True)
    ap.add_argument("--engines", default="runtime,tcc,cc")
    ap.add_argument("--isas", help="default: every ISA this machine runs")
    ap.add_argument("--cross", action="store_true", help="aarch64 NEON under qemu-user instead")
    args = ap.parse_args()
    isas = args.isas.split(",") if args.isas else host_isas(os.path.abspath(args.fixformer))
    runs = [(e, i) for e in args.engines.split(",") for i in (["host"] if e == "runtime" else isas)]
    if args.cross:
        runs = [("emitted", "neon")]
    failed = total = 0
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases():
            valid = case.expected[valid_rows(case.cfg, case.lengths, case.expected.shape)]
            for engine, isa in runs:
                if args.cross:
                    problem = cross_case(args.fixformer, case, tmp)
                else:
                    problem = run_case(args.fixformer, case, tmp, engine, "" if isa == "host" else isa)
                total += 1
                failed += problem is not None
                print("case %-27s %-7s %-7s PyTorch NaN %4d/%-4d %s" % (
                    case.name, engine, isa, int(np.isnan(valid).sum()), valid.size,
                    "ok" if problem is None else "FAIL: " + problem), flush=True)
    print("%d passed, %d failed" % (total - failed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
