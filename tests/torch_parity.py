#!/usr/bin/python3
"""PyTorch parity: fixformer's engines against PyTorch on the same weights.

Each case writes a description, a safetensors file with PyTorch's own
state-dict names, inputs and lengths, computes the expected output in
PyTorch, runs `fixformer run --engine ENGINE` and compares: the max-abs
error over non-padded rows, scaled by the output's max magnitude, must be
<= 1e-4.  Groups:

  encoder      nn.TransformerEncoder: post/pre norm, relu/gelu, with and without biases
  transformer  nn.Transformer: causal target mask, source padding masks, final norms
  decoder      a decoder-only causal stack (nn.TransformerEncoder + causal mask)
  tokens       token models in plain torch: embedding * sqrt(d) + positions + stack + head
  llama        RMSNorm, RoPE, SwiGLU (small torch implementations in lib/reference.py)
  gqa          grouped-query / multi-query attention (kv_heads < heads, HF repeat_kv) and both
               RoPE pairings, with peaked attention; each RoPE case also checks that the
               other pairing's output is far from it (so a swapped pairing would fail)
  files        F16 / BF16 weights files, int64 ids and lengths
  random       seeded random configs over every description key (reference.RefModel)
  embed        BERT-style encoder (token types, embedding LayerNorm, eps 1e-12, no head) and
               decoders with an output-head bias, some with q/k/v and gate/up stored apart
  dtype        weight types: random configs whose description says dtype = "bf16" or "int8",
               against PyTorch on the weights as that type stores them (quantized here from
               the formulas, lib/reference.py store_as, checked first on hand-computed values)
  compute      compute = "int8" and "bf16": random configs against PyTorch with the blocks' linear
               inputs rounded as the type says (int8 per row; bfloat16) and their matrices too
               (per output channel; bfloat16) (lib/reference.py RefModel.qin, store_as), each far
               from its f32 output

RefModel (lib/reference.py) is checked against nn.TransformerEncoder / nn.Transformer
in the first four groups (1e-5) before it is the reference of the last two.

  torch_parity.py --fixformer BIN [--engine runtime|tcc|cc] [--group G] [--random N] [--seed S]
"""
import argparse
import math
import os
import random
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "lib"))
from configs import random_config  # noqa: E402
from reference import (RefModel, lengths_mask, random_weights, randomize, rounded, sinusoidal_table,  # noqa: E402
                       split_projections, state_dict_numpy, store_as, stored, valid_rows, weight_names,
                       write_description, write_safetensors)

torch.set_num_threads(1)


class Case:
    def __init__(self, name, cfg, weights, src, lengths, expected, tgt=None):
        self.name, self.cfg, self.weights = name, cfg, weights
        self.src, self.lengths, self.tgt, self.expected = src, np.asarray(lengths, dtype=np.int32), tgt, expected
        self.dtype = "F32"  # of the weights file
        self.split = False  # the file stores q/k/v (and swiglu's gate/up) apart


def drop_projection_biases(sd):
    return {k: v for k, v in sd.items() if "norm" in k or not k.endswith("bias")}


def check_ref(name, cfg, weights, src, lengths, tgt, expected):
    """RefModel must agree with PyTorch's own module before it is trusted."""
    got = RefModel(cfg, weights).forward(src, lengths, tgt)
    rows = valid_rows(cfg, lengths, got.shape)
    err = np.abs(got[rows] - expected[rows]).max() / max(np.abs(expected[rows]).max(), 1e-30)
    if not err <= 1e-5:
        raise AssertionError("%s: reference.RefModel differs from PyTorch's module: %.3e" % (name, err))


# ---- groups ------------------------------------------------------------------

def encoder_case(name, seed, d, h, ff, L, norm_first, act, bias, final_norm, lengths, S, causal=False):
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    layer = nn.TransformerEncoderLayer(d, h, ff, dropout=0.0, activation=act, batch_first=True, norm_first=norm_first)
    enc = nn.TransformerEncoder(layer, L, norm=nn.LayerNorm(d) if final_norm else None, enable_nested_tensor=False)
    randomize(enc, gen, bias)
    enc.eval()
    B = len(lengths)
    x = torch.randn(B, S, d, generator=gen)
    mask = nn.Transformer.generate_square_subsequent_mask(S) if causal else None
    with torch.no_grad():
        ref = enc(x, mask=mask, src_key_padding_mask=lengths_mask(lengths, S)).numpy()
    sd = state_dict_numpy(enc)
    if not bias:
        sd = drop_projection_biases(sd)
    cfg = dict(name=name, arch="decoder-only" if causal else "encoder", d_model=d, heads=h, d_ff=ff, layers=L,
               norm="pre" if norm_first else "post", final_norm=final_norm, activation=act, bias=bias, max_seq=16)
    check_ref(name, cfg, sd, x.numpy(), lengths, None, ref)
    return Case(name, cfg, sd, x.numpy(), lengths, ref)


def group_encoder():
    return [
        encoder_case("enc_post_relu_h3", 1, 24, 3, 37, 2, False, "relu", True, False, [7, 4, 1], 7),
        encoder_case("enc_pre_gelu_h1", 2, 16, 1, 37, 2, True, "gelu", True, False, [5, 2], 5),
        encoder_case("enc_post_nobias_final", 3, 24, 3, 30, 1, False, "relu", False, True, [6, 3, 5], 6),
        encoder_case("enc_pre_nobias_gelu", 4, 12, 3, 19, 2, True, "gelu", False, True, [4, 1], 4),
        encoder_case("enc_T1", 5, 16, 1, 23, 2, True, "gelu", True, True, [1, 1], 1),
    ]


def transformer_case(name, seed, d, h, ff, Le, Ld, norm_first, act, bias, lengths, S, T):
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = nn.Transformer(d, h, Le, Ld, ff, dropout=0.0, activation=act, batch_first=True, norm_first=norm_first)
    model.encoder.enable_nested_tensor = False  # see DESIGN.md, pitfalls
    randomize(model, gen, bias)
    model.eval()
    B = len(lengths)
    src, tgt = torch.randn(B, S, d, generator=gen), torch.randn(B, T, d, generator=gen)
    pad = lengths_mask(lengths, S)
    with torch.no_grad():
        ref = model(src, tgt, tgt_mask=nn.Transformer.generate_square_subsequent_mask(T), src_key_padding_mask=pad,
                    memory_key_padding_mask=pad).numpy()
    sd = state_dict_numpy(model)
    if not bias:
        sd = drop_projection_biases(sd)
    cfg = dict(name=name, arch="encoder-decoder", d_model=d, heads=h, d_ff=ff, encoder_layers=Le, decoder_layers=Ld,
               norm="pre" if norm_first else "post", final_norm=True, activation=act, bias=bias, max_seq=16)
    check_ref(name, cfg, sd, src.numpy(), lengths, tgt.numpy(), ref)
    return Case(name, cfg, sd, src.numpy(), lengths, ref, tgt.numpy())


def group_transformer():
    return [
        transformer_case("tf_post_relu", 11, 24, 3, 37, 2, 1, False, "relu", True, [6, 3, 1], 6, 5),
        transformer_case("tf_pre_gelu_T1", 12, 16, 1, 21, 1, 2, True, "gelu", True, [4, 2], 4, 1),
        transformer_case("tf_post_nobias", 13, 12, 3, 29, 2, 2, False, "relu", False, [5, 5, 2], 5, 7),
    ]


def group_decoder():
    return [
        encoder_case("dec_post_relu", 21, 24, 3, 37, 2, False, "relu", True, False, [6, 3], 6, causal=True),
        encoder_case("dec_pre_gelu_final", 22, 18, 3, 25, 2, True, "gelu", True, True, [5, 1, 4], 5, causal=True),
        encoder_case("dec_T1", 23, 16, 1, 13, 1, True, "relu", False, True, [1, 1], 1, causal=True),
    ]


class TokenModel(nn.Module):
    """Embedding * sqrt(d) + positions -> nn stack -> tied or separate head, in plain torch."""

    def __init__(self, V, d, stack, positional, max_seq, scale=True, tied=True, causal=False, encdec=False,
                 head_bias=False):
        super().__init__()
        self.embed = nn.Embedding(V, d)
        self.stack, self.positional, self.scale, self.tied = stack, positional, scale, tied
        self.causal, self.encdec, self.d = causal, encdec, d
        if positional == "learned":
            self.pos_embed = nn.Embedding(max_seq, d)
        if not tied:  # with a bias: the nn.Transformer tutorial's decoder = nn.Linear(d_model, ntoken)
            self.lm_head = nn.Linear(d, V, bias=head_bias)
        elif head_bias:  # tied weights, a bias of its own (description key lm_head_bias names it)
            self.lm_head_bias = nn.Parameter(torch.zeros(V))

    def inp(self, ids):
        x = self.embed(ids) * (math.sqrt(self.d) if self.scale else 1.0)
        T = ids.shape[1]
        if self.positional == "sinusoidal":
            x = x + sinusoidal_table(T, self.d)
        elif self.positional == "learned":
            x = x + self.pos_embed.weight[:T]
        return x

    def forward(self, src, lengths, tgt=None):
        pad = lengths_mask(lengths, src.shape[1])
        if self.encdec:
            T = tgt.shape[1]
            h = self.stack(self.inp(src), self.inp(tgt), tgt_mask=nn.Transformer.generate_square_subsequent_mask(T),
                           src_key_padding_mask=pad, memory_key_padding_mask=pad)
        else:
            S = src.shape[1]
            mask = nn.Transformer.generate_square_subsequent_mask(S) if self.causal else None
            h = self.stack(self.inp(src), mask=mask, src_key_padding_mask=pad)
        if not self.tied:
            return self.lm_head(h)
        return h @ self.embed.weight.T + (self.lm_head_bias if hasattr(self, "lm_head_bias") else 0)


def token_case(name, seed, V, d, h, ff, L, positional, lengths, S, scale=True, tied=True, arch="encoder",
               norm_first=False, T=None, prefix=None, head_bias=False):
    """prefix: the state dict exactly as the wrapper module exports it (embed.weight, lm_head.weight,
    PREFIX + layers.*), the description's prefix naming the stack; else "stack." is dropped."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    if arch == "encoder-decoder":
        stack = nn.Transformer(d, h, L, L, ff, dropout=0.0, batch_first=True, norm_first=norm_first)
        stack.encoder.enable_nested_tensor = False
    else:
        layer = nn.TransformerEncoderLayer(d, h, ff, dropout=0.0, batch_first=True, norm_first=norm_first)
        stack = nn.TransformerEncoder(layer, L, enable_nested_tensor=False)
    model = TokenModel(V, d, stack, positional, 16, scale, tied, arch == "decoder-only", arch == "encoder-decoder",
                       head_bias)
    randomize(model, gen)
    model.eval()
    B = len(lengths)
    src = torch.randint(0, V, (B, S), generator=gen)
    tgt = torch.randint(0, V, (B, T), generator=gen) if T else None
    with torch.no_grad():
        ref = model(src, torch.as_tensor(lengths), tgt).numpy()
    sd = {}
    for k, v in state_dict_numpy(model).items():  # docs/model-description.md's names: embed.weight, layers.* / encoder.* ...
        sd[k if prefix else k.replace("stack.", "", 1)] = v
    cfg = dict(name=name, arch=arch, d_model=d, heads=h, d_ff=ff, norm="pre" if norm_first else "post",
               vocab=V, positional=positional, scale_embeddings=scale, tie_embeddings=tied, max_seq=16)
    if head_bias:
        cfg["head_bias"] = True
        if tied:
            cfg["lm_head_bias"] = "lm_head_bias"
    if prefix:
        assert "stack.layers.0.linear1.weight" in sd and "embed.weight" in sd and "lm_head.weight" in sd
        cfg["prefix"] = prefix
    if arch == "encoder-decoder":
        cfg.update(encoder_layers=L, decoder_layers=L, final_norm=True)
    else:
        cfg["layers"] = L
    src_np = src.numpy().astype(np.int32)
    tgt_np = tgt.numpy().astype(np.int32) if T else None
    check_ref(name, cfg, sd, src_np, lengths, tgt_np, ref)
    return Case(name, cfg, sd, src_np, lengths, ref, tgt_np)


def group_tokens():
    return [
        token_case("tok_enc_sinusoidal_tied", 31, 23, 24, 3, 37, 2, "sinusoidal", [7, 3], 7),
        token_case("tok_learned_untied_noscale", 32, 17, 16, 1, 21, 1, "learned", [5, 5, 2], 5, scale=False,
                   tied=False),
        token_case("tok_decoder_pre", 33, 29, 12, 3, 19, 2, "sinusoidal", [6, 4], 6, arch="decoder-only",
                   norm_first=True),
        token_case("tok_encdec_tied", 34, 19, 16, 2, 27, 2, "sinusoidal", [5, 2], 5, arch="encoder-decoder", T=4),
        token_case("tok_odd_d_T1", 35, 11, 15, 3, 9, 1, "sinusoidal", [1, 1], 1),
        # self.embed, self.pos_embed, self.stack = nn.TransformerEncoder(...), self.lm_head: loaded as exported
        token_case("tok_wrapper_prefix", 36, 19, 16, 2, 23, 2, "learned", [5, 3], 5, tied=False, prefix="stack."),
    ]


class BertEncoder(nn.Module):
    """BERT's embeddings (word + position + token type 0, LayerNorm) before an
    nn.TransformerEncoder of post-norm GELU layers; hidden states out."""

    def __init__(self, V, d, h, ff, L, max_seq, types, eps):
        super().__init__()
        self.embed, self.pos_embed = nn.Embedding(V, d), nn.Embedding(max_seq, d)
        self.token_type_embed, self.embed_norm = nn.Embedding(types, d), nn.LayerNorm(d, eps=eps)
        layer = nn.TransformerEncoderLayer(d, h, ff, dropout=0.0, activation="gelu", batch_first=True,
                                           layer_norm_eps=eps)
        self.stack = nn.TransformerEncoder(layer, L, enable_nested_tensor=False)

    def forward(self, ids, lengths):
        T = ids.shape[1]
        x = self.embed(ids) + self.pos_embed.weight[:T] + self.token_type_embed(torch.zeros_like(ids))
        return self.stack(self.embed_norm(x), src_key_padding_mask=lengths_mask(lengths, T))


def bert_case(name, seed, V, d, h, ff, L, types, lengths, S, small=1e-3):
    """Embeddings scaled by `small` make the embedding norm's variance ~1e-6:
    there eps = 1e-12 and PyTorch's default 1e-5 give visibly different numbers."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = BertEncoder(V, d, h, ff, L, 16, types, 1e-12)
    randomize(model, gen)
    with torch.no_grad():
        for e in (model.embed, model.pos_embed, model.token_type_embed):
            e.weight.mul_(small)
    model.eval()
    src = torch.randint(0, V, (len(lengths), S), generator=gen)
    with torch.no_grad():
        ref = model(src, torch.as_tensor(lengths)).numpy()
    sd = {k.replace("stack.", "", 1): v for k, v in state_dict_numpy(model).items()}
    cfg = dict(name=name, arch="encoder", d_model=d, heads=h, d_ff=ff, layers=L, activation="gelu", eps=1e-12,
               vocab=V, positional="learned", scale_embeddings=False, token_types=types, embed_norm=True,
               lm_head=False, max_seq=16)
    src_np = src.numpy().astype(np.int32)
    check_ref(name, cfg, sd, src_np, lengths, None, ref)
    wrong_eps = RefModel(dict(cfg, eps=1e-5), sd).forward(src_np, lengths)
    assert np.abs(wrong_eps - ref).max() > 0.1 * np.abs(ref).max(), "eps does not matter in " + name
    return Case(name, cfg, sd, src_np, lengths, ref)


def split(case):
    case.name, case.split = case.name + "_split", True
    return case


def group_embed():
    swiglu = dict(arch="decoder-only", d_model=24, heads=3, d_ff=19, layers=2, norm="pre", norm_kind="rmsnorm",
                  activation="swiglu", vocab=37, positional="rope", head_bias=True, embed_norm=True, max_seq=16)
    cases = [
        bert_case("bert_types2", 71, 29, 24, 3, 37, 2, 2, [7, 4, 1], 7),
        split(bert_case("bert_types3", 72, 23, 16, 2, 21, 1, 3, [5, 5], 5)),
        token_case("head_bias_untied", 73, 31, 16, 2, 27, 2, "sinusoidal", [6, 2], 6, tied=False,
                   arch="decoder-only", head_bias=True),
        token_case("head_bias_tied", 74, 19, 24, 3, 23, 1, "learned", [5, 3], 5, arch="decoder-only",
                   norm_first=True, head_bias=True),
        split(token_case("head_bias_encdec", 75, 23, 16, 2, 29, 2, "sinusoidal", [5, 2], 5,
                         arch="encoder-decoder", T=4, head_bias=True)),
        split(ref_case("swiglu_embed_norm", dict(swiglu, name="swiglu_embed_norm", token_types=2, bias=True), 76,
                       [6, 3], 6)),
        ref_case("rms_embed_norm_nohead", dict(swiglu, name="rms_embed_norm_nohead", lm_head=False,
                                               head_bias=None), 77, [5, 1], 5),
    ]
    for c in cases:
        c.cfg = {k: v for k, v in c.cfg.items() if v is not None}
    return cases


def ref_case(name, cfg, seed, lengths, S, T=None):
    gen = torch.Generator().manual_seed(seed)
    weights = random_weights(cfg, weight_names(cfg), gen)
    B = len(lengths)
    rng = np.random.RandomState(seed)

    def seq(n):
        if cfg.get("vocab"):
            return rng.randint(0, cfg["vocab"], size=(B, n)).astype(np.int32)
        return rng.standard_normal((B, n, cfg["d_model"])).astype(np.float32)

    src = seq(S)
    tgt = seq(T) if cfg.get("arch") == "encoder-decoder" else None
    expected = RefModel(cfg, stored(cfg, weights, cfg.get("dtype"))).forward(src, lengths, tgt)
    return Case(name, cfg, weights, src, lengths, expected, tgt)


def group_llama():
    base = dict(arch="decoder-only", d_model=32, heads=4, d_ff=43, layers=2, norm="pre", norm_kind="rmsnorm",
                final_norm=True, activation="swiglu", bias=False, vocab=50, positional="rope", max_seq=16)
    cases = [ref_case("llama_tied", dict(base, name="llama_tied"), 41, [7, 3], 7),
             ref_case("llama_untied", dict(base, name="llama_untied", tie_embeddings=False, scale_embeddings=False,
                                           eps=1e-6), 42, [5, 5, 1], 5),
             ref_case("llama_h3_T1", dict(base, name="llama_h3_T1", d_model=24, heads=3), 43, [1, 1], 1),
             ref_case("rms_post_gelu_tanh", dict(base, name="rms_post_gelu_tanh", norm="post",
                                                 activation="gelu_tanh", bias=True), 44, [6, 2], 6),
             ref_case("marian_silu_encdec", dict(base, name="marian_silu_encdec", arch="encoder-decoder", layers=None,
                                                 encoder_layers=2, decoder_layers=2, norm="post",
                                                 norm_kind="layernorm", activation="silu", bias=True,
                                                 positional="learned", head_bias=True, final_norm=False), 47, [6, 3],
                      6, 4),
             ref_case("rope_encoder_padding", dict(base, name="rope_encoder_padding", arch="encoder", heads=2,
                                                   norm_kind="layernorm", activation="relu"), 45, [6, 3, 1], 6),
             ref_case("rope_encdec", dict(base, name="rope_encdec", arch="encoder-decoder", layers=None,
                                          encoder_layers=2, decoder_layers=1, rope_theta=500.0), 46, [5, 2], 5, 4)]
    for c in cases:
        c.cfg = {k: v for k, v in c.cfg.items() if v is not None}
    return cases


def peaked(case, gen):
    """q and k rows of every in_proj ~ N(0, 1.5^2/d): scores of std ~2, attention far from
    uniform (small q/k weights hide a wrong RoPE pairing; DESIGN.md, pitfalls).  Recomputes
    the expected output, and for RoPE requires the other pairing's to differ by > 1e-2."""
    c = RefModel(case.cfg, {}).c
    d = c["d_model"]
    qk = d + c["kv_heads"] * (d // c["heads"])
    for name, w in case.weights.items():
        if name.endswith("in_proj_weight"):
            w[:qk] = (torch.randn(qk, d, generator=gen) * 1.5 / math.sqrt(d)).numpy()
    case.expected = RefModel(case.cfg, case.weights).forward(case.src, case.lengths, case.tgt)
    if c["positional"] == "rope" and case.src.shape[1] > 1:  # (at position 0 RoPE is the identity)
        other = dict(case.cfg, rope_pairing="interleaved" if c["rope_pairing"] == "rotate_half" else "rotate_half")
        alt = RefModel(other, case.weights).forward(case.src, case.lengths, case.tgt)
        rows = valid_rows(case.cfg, case.lengths, alt.shape)
        diff = np.abs(alt[rows] - case.expected[rows]).max() / np.abs(case.expected[rows]).max()
        if not diff > 1e-2:
            raise AssertionError("%s: the two RoPE pairings differ by only %.2e: the case cannot tell them apart"
                                 % (case.name, diff))
    return case


def group_gqa():
    base = dict(arch="decoder-only", d_model=32, heads=4, d_ff=43, layers=2, norm="pre", norm_kind="rmsnorm",
                final_norm=True, activation="swiglu", bias=False, vocab=50, positional="rope", max_seq=16,
                tie_embeddings=False, scale_embeddings=False)
    specs = [  # name, changes, seed, lengths, S, T
        ("gqa_kv2", dict(kv_heads=2), 71, [7, 3], 7, None),
        ("gqa_rotate_half_mha", dict(), 72, [6, 2], 6, None),  # the pairing check on plain multi-head
        ("mqa_interleaved", dict(kv_heads=1, rope_pairing="interleaved"), 73, [8, 5], 8, None),
        ("gqa_h6_kv3_interleaved_bias", dict(d_model=36, heads=6, kv_heads=3, rope_pairing="interleaved", bias=True,
                                            norm="post", norm_kind="layernorm", activation="gelu"), 74, [6, 1], 6,
         None),
        ("gqa_interleaved_T1", dict(kv_heads=2, rope_pairing="interleaved", rope_theta=500.0), 75, [1, 1], 1, None),
        ("gqa_encoder_padding", dict(arch="encoder", kv_heads=2, rope_pairing="interleaved", bias=True), 76,
         [6, 3, 1], 6, None),
        ("gqa_encdec_interleaved", dict(arch="encoder-decoder", layers=None, encoder_layers=2, decoder_layers=2,
                                        kv_heads=1, rope_pairing="interleaved", bias=True), 77, [5, 2], 5, 4),
        ("gqa_learned_no_rope", dict(kv_heads=2, positional="learned", norm_kind="layernorm", bias=True), 78,
         [7, 4], 7, None),
    ]
    cases = []
    for name, changes, seed, lengths, S, T in specs:
        cfg = {k: v for k, v in dict(base, name=name, **changes).items() if v is not None}
        cases.append(peaked(ref_case(name, cfg, seed, lengths, S, T), torch.Generator().manual_seed(seed)))
    return cases


def group_files():
    """F16 and BF16 weights (converted on load), int64 ids and lengths."""
    cases = []
    base = dict(arch="encoder-decoder", d_model=24, heads=3, d_ff=37, encoder_layers=2, decoder_layers=1,
                final_norm=True, vocab=31, positional="sinusoidal", max_seq=16)
    for i, dtype in enumerate(("F16", "BF16")):
        c = ref_case("weights_" + dtype.lower(), dict(base, name="weights_" + dtype.lower()), 61 + i, [6, 2], 6, 5)
        c.dtype = dtype
        c.expected = RefModel(c.cfg, rounded(c.weights, dtype)).forward(c.src, c.lengths, c.tgt)
        cases.append(c)
    c = ref_case("int64_inputs", dict(base, name="int64_inputs", arch="decoder-only", layers=2, encoder_layers=None,
                                      decoder_layers=None), 63, [5, 3, 1], 5)
    c.cfg = {k: v for k, v in c.cfg.items() if v is not None}
    c.src, c.lengths = c.src.astype(np.int64), c.lengths.astype(np.int64)
    cases.append(c)
    return cases


def group_random(n, seed):
    rng = random.Random(seed)
    cases = []
    for i in range(n):
        cfg = random_config(rng, "rand%02d" % i, force=i, dtype=True)
        B = rng.randint(1, 3)
        S = rng.choice([1, rng.randint(2, cfg["max_seq"])])
        lengths = [S] + [rng.randint(1, S) for _ in range(B - 1)]
        rng.shuffle(lengths)
        T = rng.randint(1, cfg["max_seq"]) if cfg["arch"] == "encoder-decoder" else None
        cases.append(ref_case(cfg["name"], cfg, seed * 1000 + i, lengths, S, T))
    return cases


def check_store_as():
    """store_as on values worked out by hand, so that the reference itself is right."""
    w = np.zeros((2, 40), np.float32)
    w[0, :3] = [1.0, -0.5, 0.25]       # group 0 of row 0: max 1, scale 1/127
    w[0, 32] = 3.0                     # group 1 (8 columns): only 3.0, so it is exact
    w[1, :2] = [127.0, 0.5]            # scale 1: 0.5 is a tie, rounds away from zero to 1
    w[1, 2] = -2.5                     # a negative tie: -3
    q = store_as(w, "int8")
    s0 = np.float32(1.0) / np.float32(127.0)
    assert q[0, 0] == np.float32(127) * s0 and q[0, 1] == np.float32(-64) * s0 and q[0, 2] == np.float32(32) * s0
    assert q[0, 32] == 3.0 and q[0, 33] == 0.0 and not q[0, 3:32].any()
    assert q[1, 0] == 127.0 and q[1, 1] == 1.0 and q[1, 2] == -3.0 and not q[1, 32:].any()
    b = store_as(np.array([[1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, 1.0 + 2.0 ** -9]], np.float32), "bf16")
    assert list(b[0]) == [1.0, 1.0 + 2.0 ** -6, 1.0], b  # ties to even, and below a tie down


def random_shape(rng, cfg):
    """(lengths, S, T) of a random batch: 1-3 sequences, the longest S, a target of T for encoder-decoder."""
    B = rng.randint(1, 3)
    S = rng.choice([1, rng.randint(2, cfg["max_seq"])])
    lengths = [S] + [rng.randint(1, S) for _ in range(B - 1)]
    rng.shuffle(lengths)
    return lengths, S, rng.randint(1, cfg["max_seq"]) if cfg["arch"] == "encoder-decoder" else None


def group_dtype(n=10, seed=13):
    """Random configs in bf16 and int8 (the description's dtype key) against PyTorch on the stored weights."""
    check_store_as()
    rng = random.Random(seed)
    cases = []
    for i in range(n):
        dtype = ("bf16", "int8")[i % 2]
        cfg = dict(random_config(rng, "dt%02d_%s" % (i, dtype), force=i), dtype=dtype)
        c = ref_case(cfg["name"], cfg, seed * 1000 + i, *random_shape(rng, cfg))
        far = RefModel(c.cfg, c.weights).forward(c.src, c.lengths, c.tgt)  # f32: the type must make a difference
        rows = valid_rows(c.cfg, c.lengths, far.shape)
        assert np.abs(far[rows] - c.expected[rows]).max() > 1e-4 * np.abs(far[rows]).max(), c.name
        cases.append(c)
    return cases


def group_compute(n=16, seed=29):
    """Random configs with compute = "int8" or "bf16" (every third also in a weight type) against PyTorch with
    the blocks' inputs rounded as the type says (RefModel.qin: int8 per row, bf16) and their matrices (store_as
    int8_channel, bf16)."""
    rng = random.Random(seed)
    cases = []
    for i in range(n):
        compute = ("int8", "bf16")[i % 2]
        cfg = dict(random_config(rng, "c%02d_%s" % (i, compute), force=i), compute=compute)
        cfg["d_model"], cfg["d_ff"] = 8 * cfg["heads"], max(cfg["d_ff"], 16)  # rows long enough to round
        if cfg.get("kv_heads"):
            cfg["kv_heads"] = 1 if cfg["heads"] % cfg["kv_heads"] else cfg["kv_heads"]
        if i % 3 == 2:
            cfg["dtype"] = ("bf16", "int8")[i // 3 % 2]
        c = ref_case(cfg["name"], cfg, seed * 1000 + i, *random_shape(rng, cfg))
        f32 = dict(c.cfg)
        del f32["compute"]
        far = RefModel(f32, stored(f32, c.weights, f32.get("dtype"))).forward(c.src, c.lengths, c.tgt)
        rows = valid_rows(c.cfg, c.lengths, far.shape)
        assert np.abs(far[rows] - c.expected[rows]).max() > 1e-3 * np.abs(far[rows]).max(), c.name
        cases.append(c)
    return cases


# ---- running -------------------------------------------------------------------

def run_case(ff, engine, case, tmp, tol):
    d = os.path.join(tmp, case.name)
    os.makedirs(d, exist_ok=True)
    model, weights = os.path.join(d, "model.lua"), os.path.join(d, "w.safetensors")
    write_description(case.cfg, model)
    tensors = case.weights
    if case.split:
        tensors = split_projections(tensors, case.cfg["d_model"], case.cfg.get("activation") == "swiglu")
        assert len(tensors) > len(case.weights), case.name
    write_safetensors(weights, tensors, case.dtype)
    np.save(os.path.join(d, "in.npy"), case.src)
    np.save(os.path.join(d, "len.npy"), case.lengths)
    cmd = [ff, "run", model, "--weights", weights, "--input", os.path.join(d, "in.npy"), "--lengths",
           os.path.join(d, "len.npy"), "--output", os.path.join(d, "out.npy"), "--engine", engine]
    if engine == "emitted":  # NAME.c + the --with-main driver, built with cc, on the packed blob
        name, e = case.cfg["name"], os.path.join(d, "emitted")
        p = subprocess.run([ff, "emit", model, "-o", e, "--weights", weights, "--with-main"], capture_output=True,
                           text=True)
        if p.returncode == 0:
            p = subprocess.run(["cc", "-O1", "-o", os.path.join(e, name), os.path.join(e, name + ".c"),
                                os.path.join(e, name + "_main.c"), "-lm"], capture_output=True, text=True)
        if p.returncode != 0:
            return None, "emit or cc failed: " + p.stderr.strip()[:500]
        cmd = [os.path.join(e, name), "--weights", os.path.join(e, name + ".weights")] + cmd[5:-2]
    if case.tgt is not None:
        np.save(os.path.join(d, "tgt.npy"), case.tgt)
        cmd += ["--target-input", os.path.join(d, "tgt.npy")]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return None, "fixformer failed: " + p.stderr.strip()
    out = np.load(os.path.join(d, "out.npy"))
    if out.shape != case.expected.shape:
        return None, "shape %s, PyTorch %s" % (out.shape, case.expected.shape)
    rows = valid_rows(case.cfg, case.lengths, out.shape)
    err = float(np.abs(out[rows] - case.expected[rows]).max()) / max(float(np.abs(case.expected[rows]).max()), 1e-30)
    return err, None if err <= tol else "error above %.0e" % tol


GROUPS = ["encoder", "transformer", "decoder", "tokens", "llama", "gqa", "files", "random", "embed", "dtype",
          "compute"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixformer", required=True)
    ap.add_argument("--engine", default="runtime", help="runtime, tcc, cc, or emitted (emit --with-main, cc)")
    ap.add_argument("--group", choices=GROUPS, action="append")
    ap.add_argument("--random", type=int, default=16)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--keep", help="keep the case files in this directory")
    args = ap.parse_args()
    build = {"encoder": group_encoder, "transformer": group_transformer, "decoder": group_decoder,
             "tokens": group_tokens, "llama": group_llama, "gqa": group_gqa, "files": group_files,
             "random": lambda: group_random(args.random, args.seed), "embed": group_embed,
             "dtype": group_dtype, "compute": group_compute}
    failed, total, worst = 0, 0, 0.0
    with tempfile.TemporaryDirectory() as tmp:
        tmp = args.keep or tmp
        for g in args.group or GROUPS:
            for case in build[g]():
                err, problem = run_case(args.fixformer, args.engine, case, tmp, args.tol)
                total += 1
                if err is not None:
                    worst = max(worst, err)
                failed += problem is not None
                print("case %-28s %-15s err=%s %s" % (case.name, case.cfg.get("arch", "encoder"),
                                                      "%.2e" % err if err is not None else "-",
                                                      "ok" if problem is None else "FAIL: " + problem), flush=True)
    print("%d cases, %d failed, worst scaled error %.2e (engine %s, tolerance %.0e)" % (total, failed, worst,
                                                                                      args.engine, args.tol))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
