#!/usr/bin/python3
"""PyTorch's side of bench/run, on one thread: eval mode, inference_mode.

  encoders  nn.TransformerEncoder (the layer's defaults: post-LN, relu) over
            float inputs [1, T, d], as the bench descriptions fixformer runs;
  decoder   a GPT-2-style decoder-only model (pre-LN, gelu, learned
            positions, final norm, tied head) decoding greedily with a
            key/value cache in plain torch ops, from a 1-token prompt.
Prints one JSON object: name -> median milliseconds.  --quantized adds
each encoder after torch.ao.quantization.quantize_dynamic (its nn.Linear
layers in int8: the feed-forward's two; attention's projections are not
nn.Linear modules it converts) as NAME_q, with NAME_q_err, the scaled error (max |q - f32|
/ max |f32|) of its output against the f32 encoder's on the same input, and the
quantized engine as "qengine".

  torch_bench.py [--iters 20] [--new 128] [--quantized] [--no-decode]
"""
import argparse
import json
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

ENCODERS = [("tiny", 64, 4, 256, 2, 16), ("small", 256, 4, 1024, 4, 64), ("base", 512, 8, 2048, 6, 128)]
DECODER = dict(d=512, h=8, ff=2048, L=6, V=8000, max_seq=256)


def median_ms(fn, iters, warmup=3):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


class Decoder:
    """Pre-LN decoder-only transformer with a KV cache; random weights."""

    def __init__(self, d, h, ff, L, V, max_seq):
        g = torch.Generator().manual_seed(0)
        r = lambda *s: torch.randn(*s, generator=g) / math.sqrt(s[-1])  # noqa: E731
        self.d, self.h, self.L, self.max_seq = d, h, L, max_seq
        self.E, self.P = torch.randn(V, d, generator=g), torch.randn(max_seq, d, generator=g) * 0.02
        self.layers = [dict(ln1=(torch.ones(d), torch.zeros(d)), win=r(3 * d, d), bin=torch.zeros(3 * d),
                            wout=r(d, d), bout=torch.zeros(d), ln2=(torch.ones(d), torch.zeros(d)),
                            w1=r(ff, d), b1=torch.zeros(ff), w2=r(d, ff), b2=torch.zeros(d)) for _ in range(L)]
        self.lnf = (torch.ones(d), torch.zeros(d))

    def generate(self, token, new):
        d, h, dk = self.d, self.h, self.d // self.h
        cache = [(torch.empty(self.max_seq, h, dk), torch.empty(self.max_seq, h, dk)) for _ in range(self.L)]
        out = []
        for pos in range(new):
            x = self.E[token] + self.P[pos]
            for lw, (kc, vc) in zip(self.layers, cache):
                a = F.layer_norm(x, (d,), *lw["ln1"])
                q, k, v = F.linear(a, lw["win"], lw["bin"]).view(3, h, dk)
                kc[pos], vc[pos] = k, v
                att = torch.softmax(torch.einsum("hd,thd->ht", q, kc[:pos + 1]) / math.sqrt(dk), -1)
                x = x + F.linear(torch.einsum("ht,thd->hd", att, vc[:pos + 1]).reshape(d), lw["wout"], lw["bout"])
                a = F.layer_norm(x, (d,), *lw["ln2"])
                x = x + F.linear(F.gelu(F.linear(a, lw["w1"], lw["b1"])), lw["w2"], lw["b2"])
            token = int(torch.argmax(F.linear(F.layer_norm(x, (d,), *self.lnf), self.E)))
            out.append(token)
        return out


def quantized_forward(enc, x):
    """The post-LN layers of a quantize_dynamic'd nn.TransformerEncoder, step by step: the layer's own
    forward would take its fast path, which reads linear1.weight as a tensor (a method once quantized).
    linear1 and linear2 are int8; attention's out_proj (NonDynamicallyQuantizableLinear) stays float."""
    for layer in enc.layers:
        x = layer.norm1(x + layer.self_attn(x, x, x, need_weights=False)[0])
        x = layer.norm2(x + layer.linear2(torch.relu(layer.linear1(x))))
    return x


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--quantized", action="store_true", help="also each encoder under quantize_dynamic")
    ap.add_argument("--no-decode", action="store_true", help="the encoders only")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    result = {}
    with torch.inference_mode():
        for name, d, h, ff, L, T in ENCODERS:
            layer = nn.TransformerEncoderLayer(d, h, ff, dropout=0.0, batch_first=True)
            enc = nn.TransformerEncoder(layer, L, enable_nested_tensor=False).eval()
            x = torch.randn(1, T, d)
            result[name] = median_ms(lambda: enc(x), args.iters)
            if args.quantized:
                q = torch.ao.quantization.quantize_dynamic(enc, {nn.Linear}, dtype=torch.qint8)
                result[name + "_q"] = median_ms(lambda: quantized_forward(q, x), args.iters)
                ref = enc(x)
                result[name + "_q_err"] = float((quantized_forward(q, x) - ref).abs().max() / ref.abs().max())
                result["qengine"] = torch.backends.quantized.engine
        if not args.no_decode:
            dec = Decoder(**DECODER)
            result["decode"] = median_ms(lambda: dec.generate(1, args.new), max(3, args.iters // 4), warmup=1)
    result["torch_version"] = torch.__version__
    print(json.dumps(result))


if __name__ == "__main__":
    main()
